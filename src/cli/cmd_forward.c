/* cmd_forward.c - `bangtrace forward`: one prefill over given token ids,
 * every named tensor written to a folder as raw f32. The contract the
 * Python oracle (tests/oracle) compares against:
 *   DIR/<tensor>.f32  T rows x width, little-endian float32
 *   DIR/meta.json     {"tokens": [...], "tensors": {"<tensor>": [T, width], ...}} */
#include "cmd.h"
#include "args.h"
#include "engine/engine.h"
#include "engines/llamacpp/llamacpp.h"
#include "model/model.h"
#include "run/session.h"           /* bt_llama_settings */
#include "sys/outfile.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cmd_forward_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace forward --model M [--tokenizer T] --tokens \"ID ID ...\" --dump DIR [--threads N]\n"
        "                        [--device DEV] [--engine native|llama.cpp] [--mtp] [--numerics PROFILE]\n"
        "                        [--llama-flash-attn M] [--llama-repack on|off] [--llama-kv-type T] [--llama-opt K=V] [--force]\n\n"
        "Run one forward pass (a prefill at positions 0..T-1) and write every named\n"
        "tensor (token_embd, blk.L.attn_norm ... blk.L.ffn_resid, output_norm, logits)\n"
        "to DIR/<name>.f32 (T rows x width, float32) with DIR/meta.json describing them.\n"
        "In a mixture-of-experts layer each expert's ffn_gate/up/act/down is written as\n"
        "blk.L.<op>.expert[E].f32, one row per token routed to it (positions in meta.json).\n"
        "A hybrid model's recurrent state after the pass, blk.L.ssm_state and\n"
        "blk.L.ssm_conv_state, has the state's rows, not T (shapes in meta.json).\n"
        "--mtp also runs the model's MTP (nextn) block N over the same ids, paired as\n"
        "llama.cpp's draft-mtp pairs them (id t at position t with the trunk's\n"
        "output_norm row t-1; zeros for t = 0), and writes its tensors: blk.N.mtp_enorm,\n"
        "blk.N.mtp_hnorm, blk.N.mtp_eh_proj, its layer's blk.N.*, mtp_output_norm and\n"
        "mtp_logits (the native engine only). --numerics runs the native engine under a\n"
        "numerics profile (doc/numerics.md; act_q=ggml: llama.cpp's Q8 activations).\n"        "Used by the reference oracle tests; handy for diffing two builds. A DIR that\n"
        "already holds a dump (meta.json or .f32 files) is refused (exit 2, nothing\n"
        "written) unless --force is given; even then a link, a device or the model\n"
        "itself is never replaced (exit 2). --device DEV runs the ops on cpu (default), cuda or\n"
        "cuda:N (the CUDA plugin; exit 2 when it cannot run here). --engine llama.cpp\n"
        "runs llama.cpp instead (a GGUF model; an f32 KV cache and flash attention\n"
        "off, so an f32 model is computed in f32 throughout; otherwise llama.cpp's\n"
        "defaults: repacked weights) and writes the\n"
        "tensors it maps to bangtrace's names (doc/llama-cpp.md), logits included;\n"
        "--llama-flash-attn, --llama-repack, --llama-kv-type and --llama-opt KEY=VAL\n"
        "choose its path as for run (bangtrace help run).\n");
}

typedef struct dump_ctx {
    const char *dir;
    bool mtp;                 /* the MTP block's pass: its head's tensors as mtp_*, no token_embd */
    bool force;               /* --force: replace an earlier dump's files */
    bt_out_input in[2];       /* --model, --tokenizer: never overwritten by a dump file */
    json_t *tensors;
    json_t *positions;        /* expert tensors: the position of each row */
    int err;
} dump_ctx;

/* An earlier dump in dir (meta.json or a .f32 file): refused without
 * --force before anything runs, so nothing is half-replaced. */
static bool dump_present(const char *dir)
{
    DIR *dd = opendir(dir);
    if (!dd) { bt_error(BT_EIO, "%s: %s", dir, strerror(errno)); return true; }
    struct dirent *de;
    const char *hit = NULL;
    while (!hit && (de = readdir(dd))) {
        size_t l = strlen(de->d_name);
        if (!strcmp(de->d_name, "meta.json") || (l > 4 && !strcmp(de->d_name + l - 4, ".f32"))) hit = de->d_name;
    }
    if (hit) bt_error(BT_EINVAL, "%s: already holds a dump (%s): use --force to replace its files", dir, hit);
    closedir(dd);
    return hit != NULL;
}

static bool dump_observe(void *user, const bt_tensor_view *t)
{
    dump_ctx *d = user;
    char name[64], path[4096];
    if (d->mtp && t->op == BT_OP_TOKEN_EMBD) return true;   /* the trunk's lookup again */
    if (t->moe) bt_expert_tensor_name(t->op, t->layer, t->moe->expert, name, sizeof(name));
    else if (d->mtp && !bt_op_is_layer_op(t->op)) snprintf(name, sizeof(name), "mtp_%s", bt_op_name(t->op));
    else bt_tensor_name(t->op, t->layer, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s.f32", d->dir, name);
    FILE *f = bt_outfile_fopen(path, BT_OUT_DUMP, d->force, d->in, 2);
    if (!f) { d->err = BT_EIO; return false; }
    size_t n = (size_t)t->rows * t->width;
    /* a device tensor is copied to the host first (dumps are for tests) */
    float *rows = t->data ? NULL : malloc(n * sizeof(float));
    if (!t->data && (!rows || bt_tensor_read(t, 0, t->rows, rows) != BT_OK)) {
        d->err = rows ? BT_EIO : bt_error(BT_ENOMEM, "out of memory");
        free(rows);
        fclose(f);
        return false;
    }
    bool ok = fwrite(t->data ? t->data : rows, sizeof(float), n, f) == n;
    free(rows);
    ok &= fclose(f) == 0;
    if (!ok) { d->err = bt_error(BT_EIO, "%s: write failed", path); return false; }
    json_t *shape = json_array();
    json_array_append_new(shape, json_integer(t->rows));
    json_array_append_new(shape, json_integer(t->width));
    json_object_set_new(d->tensors, name, shape);
    if (t->moe) {   /* an expert's rows are the tokens routed to it */
        json_t *pos = json_array();
        for (int i = 0; i < t->rows; i++) json_array_append_new(pos, json_integer(t->moe->pos[i]));
        json_object_set_new(d->positions, name, pos);
    }
    return true;
}

/* Our named tensors only: a foreign engine's extra tensors (kq-3) have no
 * file name in the dump contract. */
static bool dump_ask(void *user, int op, int layer)
{
    (void)user; (void)layer;
    return op >= 0 && op < BT_OP_COUNT;
}

int cmd_forward(int argc, char **argv)
{
    const char *tokens = NULL, *dir = NULL;
    bool force = false, mtp = false;
    bt_engine *me = NULL;
    float *h = NULL;
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_THREADS | BT_ARGS_DEVICE | BT_ARGS_ENGINE | BT_ARGS_LLAMA |
                          BT_ARGS_NUMERICS,
                  .threads = 1 };
    bt_model *m = NULL;
    bt_engine *e = NULL;
    int32_t *ids = NULL;
    json_t *meta = NULL;
    int status = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--force")) { force = true; continue; }
        if (!strcmp(a, "--mtp")) { mtp = true; continue; }
        if (!v && strncmp(a, "--", 2) == 0) { bt_error(BT_EINVAL, "%s needs a value", a); goto fail; }
        bool taken;
        if (bt_args_take(&g, argc, argv, &i, &taken)) goto fail;
        if (taken) continue;
        if (!strcmp(a, "--tokens")) tokens = argv[++i];
        else if (!strcmp(a, "--dump")) dir = argv[++i];
        else { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help forward)", a); goto fail; }
    }
    const char *model = g.model, *tokenizer = g.tokenizer, *device = g.device;
    bt_llama_settings *llama = &g.llama;
    if (!model || !tokens || !dir) { bt_error(BT_EINVAL, "--model, --tokens and --dump are required"); goto fail; }
    if (bt_args_llama_finish(&g, g.llamacpp, "--engine llama.cpp")) goto fail;
    if (mtp && g.llamacpp) { bt_error(BT_EINVAL, "--mtp runs the native engine's MTP block, not --engine llama.cpp"); goto fail; }
    /* forward's llama.cpp is the f32 reference: f32 cache (kv_f32) and no
     * flash attention (whose fused kernel departs ~1e-2 in the logits
     * even then), unless a flag or alias says otherwise */
    if (!llama->flash_attn) llama->flash_attn = "off";
    size_t n = 0, cap = 0;
    for (const char *p = tokens; *p;) {
        char *end;
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 0x7fffffff) { bt_error(BT_EINVAL, "--tokens: bad id near '%.16s'", p); goto fail; }
        if (BT_VEC_PUSH(ids, n, cap, (int32_t)v)) goto fail;   /* OOM fails, never truncates */
        p = end;
    }
    if (n == 0) { bt_error(BT_EINVAL, "--tokens has no ids"); goto fail; }
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) { bt_error(BT_EIO, "%s: %s", dir, strerror(errno)); goto fail; }
    if (!force && dump_present(dir)) goto fail;
    if (bt_model_load(model, tokenizer, &m)) goto fail;
    if (g.llamacpp) {
        bt_llamacpp_opts lo = { .model_path = model, .ctx_len = BT_MAX((int)n, 8), .max_batch = (int)n,
                                .n_threads = (int)g.threads, .device = device, .kv_f32 = true, .llama = llama };
        if (bt_llamacpp_engine_new(m, &lo, &e)) goto fail;
    } else {
        bt_engine_opts eo = { .ctx_len = BT_MAX((int)n, 1), .max_batch = (int)n, .n_threads = (int)g.threads, .device = device };
        if (bt_engine_new_opts(m, &eo, &e)) goto fail;
        if (g.numerics_spec && bt_engine_set_numerics(e, &g.numerics)) goto fail;
    }
    dump_ctx d = { .dir = dir, .force = force, .tensors = json_object(), .positions = json_object(), .in = { { "--model", model }, { "--tokenizer", tokenizer } } };
    bt_eval_cb cb = { .ask = dump_ask, .observe = dump_observe, .user = &d };
    bt_engine_set_eval_cb(e, &cb);
    bt_engine_set_logits_all(e, true);   /* a dump holds every position's logits */
    int rc = bt_engine_forward(e, ids, (int)n, 0);
    if (rc == BT_OK && !d.err && mtp) {
        /* the block over the same ids: id t with the trunk's hidden row t - 1 */
        int dim = m->cfg.dim;
        bt_engine_opts mo = { .ctx_len = BT_MAX((int)n, 1), .max_batch = (int)n, .n_threads = (int)g.threads,
                              .device = device, .mtp = true };
        rc = (h = calloc(n * (size_t)dim, sizeof(float))) ? BT_OK : bt_error(BT_ENOMEM, "out of memory");
        if (rc == BT_OK && n > 1) rc = bt_engine_hidden_rows(e, 0, (int)n - 1, h + dim);
        if (rc == BT_OK) rc = bt_engine_new_opts(m, &mo, &me);
        if (rc == BT_OK) {
            d.mtp = true;
            bt_engine_set_eval_cb(me, &cb);
            bt_engine_set_logits_all(me, true);
            rc = bt_engine_set_mtp_hidden(me, h);
        }
        if (rc == BT_OK) rc = bt_engine_forward(me, ids, (int)n, 0);
    }
    if (rc || d.err) { json_decref(d.tensors); json_decref(d.positions); goto fail; }
    meta = json_object();
    json_t *toks = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    json_object_set_new(meta, "tokens", toks);
    json_object_set_new(meta, "tensors", d.tensors);
    json_object_set_new(meta, "expert_positions", d.positions);
    char path[4096];
    snprintf(path, sizeof(path), "%s/meta.json", dir);
    FILE *mf = bt_outfile_fopen(path, BT_OUT_DUMP, d.force, d.in, 2);
    if (!mf) goto fail;
    int bad = json_dumpf(meta, mf, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (fclose(mf) != 0 || bad) { bt_error(BT_EIO, "%s: write failed", path); goto fail; }
    status = 0;
    goto out;
fail:
    status = bt_cmd_fail("forward");
out:
    json_decref(meta);
    free(ids);
    free(h);
    bt_engine_free(me);
    bt_engine_free(e);
    bt_model_free(m);
    return status;
}
