/* cmd_inspect.c - `bangtrace inspect MODEL`: what a model file claims to be
 * (architecture, hyperparameters, tokenizer, chat template, tensors, SHA-256)
 * and whether its weights hold NaN or Inf.
 *
 * The scan dequantizes every row of every tensor the kernels can read, so it
 * sees exactly what a forward pass would see: a flipped exponent bit in a
 * quantized block's f16 scale turns the whole block into Inf/NaN there. The
 * scales are also checked directly (f16 scales and mins with every exponent
 * bit set; mxfp4's E8M0 exponent 0xFF, NaN in the MX spec though ggml
 * decodes it as 2^128), which names the block even when its quants happen
 * to be zero. Exit status: 0 clean, 1 non-finite weights
 * found, 2 error. */
#include "cmd.h"
#include "args.h"
#include "kernels/cpu/kernels.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "model/model.h"
#include "gen/request.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"
#include "base/text.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_inspect_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace inspect MODEL [--tokenizer T] [--json] [--no-scan]\n\n"
        "Show what a model file contains: format, architecture, hyperparameters,\n"
        "tokenizer, chat template, GGUF metadata, the tensor table (name, type,\n"
        "shape, bytes, offset) and the SHA-256 of the whole file. Then dequantize\n"
        "every weight row and count NaN, +Inf and -Inf per tensor (quantized block\n"
        "scales are checked too).\n\n"
        "  MODEL            GGUF model, Hugging Face model folder (DIR), or llama2.c\n"
        "                   checkpoint (.bin)\n"
        "  --tokenizer T    llama2.c tokenizer.bin (llama2.c checkpoints only)\n"
        "  --json           print one JSON object with the same data\n"
        "  --no-scan        skip the NaN/Inf scan\n\n"
        "A GGUF that bangtrace cannot run (another architecture) is still shown\n"
        "and scanned, after a warning; its hyperparameters are not read.\n"
        "Exit status: 0 no non-finite weights (or --no-scan), 1 some tensor holds\n"
        "NaN/Inf (each is listed), 2 error.\n");
}

/* One tensor of the file, whatever the format, plus its scan result. */
typedef struct titem {
    char name[96];
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    uint64_t offset;          /* from the start of the file */
    const uint8_t *data;
    /* scan */
    bool scanned;
    int64_t n_nan, n_pinf, n_ninf;
    int64_t first_bad;        /* flat element index, -1 if none */
    int64_t bad_scales;       /* quant blocks whose scale/min is Inf/NaN (bt_dtype_block_scale_bad) */
    int64_t first_bad_block;
} titem;

typedef struct inspect_opts {
    const char *model, *tokenizer;
    bool json, no_scan;
} inspect_opts;

static int parse_args(int argc, char **argv, inspect_opts *o)
{
    memset(o, 0, sizeof(*o));
    /* the model is --model M, -m M or the one argument that is not a flag */
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_ONE_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_Z };
    for (int i = 1; i < argc; i++) {
        bool taken;
        if (bt_args_take(&g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-scan")) o->no_scan = true;
        else if (a[0] == '-' && a[1]) return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help inspect)", a);
        else if (g.model) return bt_error(BT_EINVAL, "more than one model given ('%s' and '%s')", g.model, a);
        else g.model = a;
    }
    o->model = g.model;
    o->tokenizer = g.tokenizer;
    if (!o->model) return bt_error(BT_EINVAL, "no model given (usage: bangtrace inspect MODEL)");
    return BT_OK;
}

/* ---- tensor list ------------------------------------------------------ */

static int cmp_offset(const void *a, const void *b)
{
    const titem *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void item_from_weight(titem *t, const bt_model *m, const bt_weight *w, int layer)
{
    memset(t, 0, sizeof(*t));
    if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, w->name ? w->name : "?");
    else snprintf(t->name, sizeof t->name, "%s", w->name ? w->name : "?");
    t->type = w->type;
    t->n_dims = w->rows > 1 ? 2 : 1;
    t->ne[0] = w->cols; t->ne[1] = w->rows; t->ne[2] = 1; t->ne[3] = 1;
    t->nbytes = (uint64_t)bt_dtype_row_size(w->type, w->cols) * (uint64_t)w->rows;
    t->data = w->data;
    t->offset = (uint64_t)((const uint8_t *)w->data - m->file_data);
    t->first_bad = -1;
    t->first_bad_block = -1;
}

/* GGUF: every tensor in the file (a damaged tensor the model does not use
 * is still worth reporting). llama2.c: the weights the loader bound. */
static int collect_tensors(const bt_model *m, titem **out, int64_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (m->gguf) {
        int64_t n = bt_gguf_n_tensors(m->gguf);
        titem *v = calloc((size_t)BT_MAX(n, 1), sizeof(*v));
        if (!v) return bt_error(BT_ENOMEM, "out of memory");
        uint64_t doff = bt_gguf_data_offset(m->gguf);
        for (int64_t i = 0; i < n; i++) {
            const bt_gguf_tensor *g = bt_gguf_tensor_at(m->gguf, i);
            titem *t = &v[i];
            snprintf(t->name, sizeof t->name, "%.*s", (int)BT_MIN(g->name.len, 90), g->name.ptr);
            t->type = g->type;
            t->n_dims = g->n_dims;
            memcpy(t->ne, g->ne, sizeof t->ne);
            t->nbytes = g->nbytes;
            t->offset = strcmp(m->format, "hf") ? doff + g->offset : 0;   /* hf: data is in other files */
            t->data = g->data;
            t->first_bad = -1;
            t->first_bad_block = -1;
        }
        *out = v;
        *n_out = n;
        return BT_OK;
    }
    if (!bt_model_has_weights(m)) return BT_OK;
    const bt_config *c = &m->cfg;
    const bt_arch *arch = c->desc ? c->desc : bt_arch_find("llama");   /* the layer's tensor table */
    int64_t cap = 3 + (int64_t)c->n_layers * arch->n_layer;
    titem *v = calloc((size_t)cap, sizeof(*v));
    if (!v) return bt_error(BT_ENOMEM, "out of memory");
    int64_t n = 0;
    item_from_weight(&v[n++], m, &m->token_embd, -1);
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < arch->n_layer; k++) {
            const bt_weight *w = (const bt_weight *)((const char *)&m->layers[l] + arch->layer[k].field);
            if (w->data) item_from_weight(&v[n++], m, w, l);
        }
    item_from_weight(&v[n++], m, &m->output_norm, -1);
    if (!c->tied_output && m->output.data && m->output.data != m->token_embd.data)
        item_from_weight(&v[n++], m, &m->output, -1);
    qsort(v, (size_t)n, sizeof(*v), cmp_offset);     /* file order */
    *out = v;
    *n_out = n;
    return BT_OK;
}

/* ---- scan ------------------------------------------------------------- */


static void scan_scales(titem *t)
{
    int off[2];
    if (!bt_dtype_scale_offsets(t->type, off) && bt_dtype_e8m0_offset(t->type) < 0) return;
    const bt_dtype_info *di = bt_dtype(t->type);
    uint64_t n_blocks = t->nbytes / di->type_size;
    for (uint64_t b = 0; b < n_blocks; b++)
        if (bt_dtype_block_scale_bad(t->type, t->data + b * di->type_size)) {
            if (t->first_bad_block < 0) t->first_bad_block = (int64_t)b;
            t->bad_scales++;
        }
}

typedef struct scan_progress {
    double t0, last;
    uint64_t done, total;
    bool tty;
} scan_progress;

static void progress(scan_progress *p, const char *name)
{
    if (!p->tty || bt_log_level < 1) return;
    double now = bt_now();
    if (now - p->t0 < 1.0 || now - p->last < 0.25) return;
    p->last = now;
    fprintf(stderr, "\rbangtrace: inspect: scanning %3d%% %-40.40s",
            (int)(100.0 * (double)p->done / (double)BT_MAX(p->total, 1)), bt_text_esc(name));
    fflush(stderr);
}

/* Dequantize each row and count non-finite values. Returns BT_OK or
 * BT_ENOMEM. Types the kernels cannot read are left unscanned. */
static int scan_tensor(titem *t, scan_progress *p)
{
    const bt_dtype_info *di = bt_dtype(t->type);
    if (!di->name || !di->compute || !t->data) return BT_OK;
    int64_t cols = t->ne[0];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t row_bytes = bt_dtype_row_size(t->type, cols);
    if (row_bytes == 0) return BT_OK;
    float *buf = malloc((size_t)cols * sizeof(float));
    if (!buf) return bt_error(BT_ENOMEM, "out of memory scanning '%s' (%" PRId64 " columns)", t->name, cols);
    for (int64_t r = 0; r < rows; r++) {
        bt_dequant_row(t->type, t->data + (uint64_t)r * row_bytes, buf, cols);
        /* Fast check first: all bits of the exponent set means Inf or NaN. */
        uint32_t any = 0;
        for (int64_t j = 0; j < cols; j++) {
            uint32_t u;
            memcpy(&u, &buf[j], 4);
            any |= ((u & 0x7f800000u) == 0x7f800000u);
        }
        if (any) {
            for (int64_t j = 0; j < cols; j++) {
                float x = buf[j];
                if (isfinite(x)) continue;
                if (isnan(x)) t->n_nan++;
                else if (x > 0) t->n_pinf++;
                else t->n_ninf++;
                if (t->first_bad < 0) t->first_bad = r * cols + j;
            }
        }
        if ((r & 255) == 255) {
            uint64_t base = p->done;
            p->done += (uint64_t)(r + 1) * row_bytes;
            progress(p, t->name);
            p->done = base;
        }
    }
    free(buf);
    scan_scales(t);
    t->scanned = true;
    return BT_OK;
}

static bool item_bad(const titem *t)
{
    return t->n_nan || t->n_pinf || t->n_ninf || t->bad_scales;
}

/* ---- helpers ---------------------------------------------------------- */

static const char *vocab_kind_name(int kind)
{
    switch (kind) {
    case BT_VOCAB_SPM: return "spm";
    case BT_VOCAB_BPE: return "bpe";
    case BT_VOCAB_LLAMA2C: return "llama2c";
    default: return "unknown";
    }
}

/* Printable, quoted, bounded form of bytes (token pieces, key values). */
static void quote_bytes(const char *s, size_t len, char *out, size_t cap)
{
    if (cap < 8) { if (cap) out[0] = 0; return; }
    out[0] = '"';
    bt_text_escape(s, len, out + 1, cap - 2, 0, BT_TEXT_UTF8 | BT_TEXT_DQUOTE | BT_TEXT_ELLIPSIS);
    strcat(out, "\"");
}

static void token_text(const bt_vocab *v, int32_t id, char *out, size_t cap)
{
    if (id < 0 || id >= v->n_tokens || !v->text) { snprintf(out, cap, "-"); return; }
    char q[64];
    quote_bytes(v->text[id], v->len ? v->len[id] : 0, q, sizeof q);
    snprintf(out, cap, "%d %s", id, q);
}

static void shape_str(const titem *t, char *out, size_t cap)
{
    size_t o = 0;
    uint32_t nd = BT_MAX(t->n_dims, 1u);
    o += (size_t)snprintf(out + o, cap - o, "[");
    for (uint32_t d = 0; d < nd && o < cap; d++)
        o += (size_t)snprintf(out + o, cap - o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (o < cap) snprintf(out + o, cap - o, "]");
}

static const char *chat_name(const bt_model *m)
{
    if (!m->chat_template) return "none";
    int t = bt_chat_tmpl_detect(m->chat_template, strlen(m->chat_template));
    const char *n = t == BT_CHAT_NONE ? NULL : bt_chat_tmpl_name(t);
    return n ? n : "unknown";
}

static void human_bytes(uint64_t n, char *out, size_t cap)
{
    if (n >= (1ull << 30)) snprintf(out, cap, "%.2f GiB", (double)n / (double)(1ull << 30));
    else if (n >= (1ull << 20)) snprintf(out, cap, "%.1f MiB", (double)n / (double)(1ull << 20));
    else if (n >= 1024) snprintf(out, cap, "%.1f KiB", (double)n / 1024.0);
    else snprintf(out, cap, "%" PRIu64 " B", n);
}

/* Re-raise the last error with the model path in front: the tokenizer
 * never sees file names, but a user needs to know which file is broken. */
static int error_in_file(int rc, const char *path)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bt_errmsg());
    return bt_error(rc, "%s: %s", path, msg);
}

/* Every BPE merge "left right" must join two tokens into a third. The
 * tokenizer ignores merges that do not, so a vocabulary/merges mismatch
 * (merges from another model) would silently change tokenization. */
static int check_merges(const bt_model *m, const bt_tokenizer *tok)
{
    const bt_vocab *v = &m->vocab;
    if (v->kind != BT_VOCAB_BPE || !v->merges) return BT_OK;
    char *joined = NULL;
    size_t cap = 0;
    int rc = BT_OK;
    for (int64_t i = 0; i < v->n_merges && rc == BT_OK; i++) {
        const char *s = v->merges[i];
        size_t len = v->merge_len[i];
        const char *sep = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sep) {
            rc = bt_error(BT_EFORMAT, "%s: tokenizer.ggml.merges[%" PRId64 "] has no space", m->path, i);
            break;
        }
        size_t ll = (size_t)(sep - s), rl = len - ll - 1;
        if ((rc = BT_VEC_RESERVE(joined, cap, ll + rl))) break;
        memcpy(joined, s, ll);
        memcpy(joined + ll, sep + 1, rl);
        const char *bad = NULL;
        size_t bl = 0;
        if (bt_tokenizer_find(tok, s, ll) < 0) { bad = s; bl = ll; }
        else if (bt_tokenizer_find(tok, sep + 1, rl) < 0) { bad = sep + 1; bl = rl; }
        else if (bt_tokenizer_find(tok, joined, ll + rl) < 0) { bad = joined; bl = ll + rl; }
        if (bad) {
            char qm[96], qb[96];
            quote_bytes(s, len, qm, sizeof qm);
            quote_bytes(bad, bl, qb, sizeof qb);
            rc = bt_error(BT_EFORMAT, "%s: tokenizer.ggml.merges[%" PRId64 "] %s names %s, which is not a token",
                          m->path, i, qm, qb);
        }
    }
    free(joined);
    return rc;
}

/* ---- text output ------------------------------------------------------ */

static void print_text(const bt_model *m, const char *load_err, const char *sha, const titem *ts, int64_t nt,
                       bool scanned, double scan_s)
{
    const bt_config *c = &m->cfg;
    char hb[32];
    human_bytes(m->file_size, hb, sizeof hb);
    printf("file:          %s\n", bt_text_esc(m->path));
    if (m->gguf && !strcmp(m->format, "hf"))    /* a folder: the GGUF view is synthetic */
        printf("format:        hf (Hugging Face folder as %" PRId64 " GGUF keys, %" PRId64 " tensors; "
               "size and sha256 are of the first safetensors file)\n", bt_gguf_n_kv(m->gguf), bt_gguf_n_tensors(m->gguf));
    else if (m->gguf)
        printf("format:        gguf v%u (alignment %" PRIu64 ", %" PRId64 " keys, %" PRId64 " tensors, data at %" PRIu64 ")\n",
               bt_gguf_version(m->gguf), bt_gguf_alignment(m->gguf), bt_gguf_n_kv(m->gguf),
               bt_gguf_n_tensors(m->gguf), bt_gguf_data_offset(m->gguf));
    else
        printf("format:        %s\n", m->format);
    printf("size:          %" PRIu64 " bytes (%s)\n", m->file_size, hb);
    printf("sha256:        %s\n", sha);
    printf("architecture:  %s\n", bt_text_esc(c->arch));
    printf("name:          %s\n", bt_text_esc(c->name));
    if (load_err) {
        printf("hyperparameters: not read (%s)\n", load_err);
    } else if (bt_model_has_weights(m)) {
        printf("hyperparameters:\n");
        printf("  dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, head_dim %d\n",
               c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim);
        printf("  n_vocab %d, ctx_len %d, norm_eps %g, rope_base %g, rope_dim %d, tied_output %s\n",
               c->n_vocab, c->ctx_len, (double)c->norm_eps, (double)c->rope_base, c->rope_dim,
               c->tied_output ? "yes" : "no");
        printf("  rope %s%s%s, qkv_bias %s, qk_norm %s\n", bt_rope_kind_name(c->rope_kind),
               c->has_rope_freqs ? " with rope_freqs (Llama 3 scaling)" : "",
               c->rope_yarn ? " yarn-scaled" : c->rope_freq_scale != 1.0f ? " linear-scaled" : "",
               c->flags & BT_ARCH_QKV_BIAS ? "yes" : "no", c->flags & BT_ARCH_QK_NORM ? "yes" : "no");
        if (c->rope_yarn)
            printf("  yarn factor %g, original context %d, attn_factor %g%s\n", 1.0 / (double)c->rope_freq_scale,
                   c->yarn_orig_ctx, (double)c->yarn_attn_factor,
                   c->flags & BT_ARCH_SINKS && !c->yarn_truncate ? ", correction range unrounded (truncate: false)" : "");
        if (c->flags & BT_ARCH_SINKS) {
            printf("  attention sinks, sliding window %d on layers", c->sliding_window);
            for (int l = 0, n = 0; l < c->n_layers; l++)
                if (bt_layer_swa(c, l)) printf("%s%d", n++ ? "," : " ", l);
            printf("\n");
        }
        if (c->n_expert)
            printf("  experts %d, used %d, expert_ff %d, norm_topk_prob %s, shared experts %d (ff %d)\n",
                   c->n_expert, c->n_expert_used, c->expert_ff_len, c->norm_topk_prob ? "yes" : "no",
                   c->n_shared_expert, c->shared_ff_len);
    } else {
        printf("hyperparameters: none (vocabulary-only file)\n");
    }
    if (m->has_vocab) {
        const bt_vocab *v = &m->vocab;
        char bos[96], eos[96];
        token_text(v, v->bos, bos, sizeof bos);
        token_text(v, v->eos, eos, sizeof eos);
        printf("tokenizer:     %s, pre \"%s\", %d tokens, %" PRId64 " merges\n", vocab_kind_name(v->kind),
               v->pre[0] ? bt_text_esc(v->pre) : "default", v->n_tokens, v->n_merges);
        printf("  bos %s, eos %s, add_bos %s, add_eos %s\n", bos, eos, v->add_bos ? "yes" : "no",
               v->add_eos ? "yes" : "no");
    } else {
        printf("tokenizer:     %s\n", load_err ? "not read" : m->gguf ? "none" :
               "none (llama2.c checkpoint: pass --tokenizer tokenizer.bin)");
    }
    printf("chat template: %s\n", chat_name(m));

    if (m->gguf) {
        printf("metadata (%" PRId64 " keys):\n", bt_gguf_n_kv(m->gguf));
        char val[256], key[512];
        for (int64_t i = 0; i < bt_gguf_n_kv(m->gguf); i++) {
            bt_gguf_str k = bt_gguf_key(m->gguf, i);
            bt_gguf_format_value(m->gguf, i, val, sizeof val);
            bt_text_escape(k.ptr, (size_t)BT_MIN(k.len, 200), key, sizeof key, 0, BT_TEXT_UTF8 | BT_TEXT_ELLIPSIS);
            printf("  %-40s %-8s %s\n", key,
                   bt_gguf_vtype_name(bt_gguf_kv_type(m->gguf, i)), val);
        }
    }

    uint64_t total = 0;
    for (int64_t i = 0; i < nt; i++) total += ts[i].nbytes;
    human_bytes(total, hb, sizeof hb);
    printf("tensors (%" PRId64 ", %s):\n", nt, hb);
    if (nt) printf("  %-32s %-6s %-20s %12s %12s\n", "name", "type", "shape", "bytes", "offset");
    for (int64_t i = 0; i < nt; i++) {
        char shape[64];
        shape_str(&ts[i], shape, sizeof shape);
        const char *tn = bt_dtype(ts[i].type)->name;
        printf("  %-32s %-6s %-20s %12" PRIu64 " %12" PRIu64 "\n", bt_text_esc(ts[i].name), tn ? tn : "?", shape,
               ts[i].nbytes, ts[i].offset);
    }

    if (!scanned) {
        printf("scan:          skipped (--no-scan)\n");
        return;
    }
    int64_t n_bad = 0, n_skipped = 0;
    for (int64_t i = 0; i < nt; i++) { n_bad += item_bad(&ts[i]); n_skipped += !ts[i].scanned; }
    if (!n_bad) {
        printf("scan:          clean: no NaN/Inf in %" PRId64 " tensors (%.2f s)", nt - n_skipped, scan_s);
        if (n_skipped) printf(", %" PRId64 " not scanned (type not readable)", n_skipped);
        printf("\n");
        return;
    }
    printf("scan:          NON-FINITE weights in %" PRId64 " of %" PRId64 " tensors (%.2f s)\n", n_bad, nt, scan_s);
    for (int64_t i = 0; i < nt; i++) {
        const titem *t = &ts[i];
        if (!item_bad(t)) continue;
        printf("  %s: nan %" PRId64 ", +inf %" PRId64 ", -inf %" PRId64, bt_text_esc(t->name), t->n_nan, t->n_pinf, t->n_ninf);
        if (t->first_bad >= 0)
            printf(", first at row %" PRId64 " col %" PRId64, t->first_bad / t->ne[0], t->first_bad % t->ne[0]);
        if (t->bad_scales)
            printf(", %" PRId64 " block scales Inf/NaN (first block %" PRId64 ")", t->bad_scales, t->first_bad_block);
        printf("\n");
    }
}

/* ---- JSON output ------------------------------------------------------ */

static json_t *json_strn(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (!j) {
        /* not UTF-8: keep it visible as escaped ASCII */
        size_t cap = len * 4 + 8;
        char *q = malloc(cap);
        if (!q) return json_null();
        quote_bytes(s, len, q, cap);
        j = json_string(q);
        free(q);
        if (!j) j = json_null();
    }
    return j;
}

static json_t *json_gguf_value(const bt_gguf *g, int64_t i)
{
    bt_gguf_str k = bt_gguf_key(g, i);
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)BT_MIN(k.len, 250), k.ptr);
    int t = bt_gguf_kv_type(g, i);
    switch (t) {
    case BT_GGUF_STRING: {
        bt_gguf_str s;
        if (bt_gguf_get_str(g, key, &s) == BT_OK) return json_strn(s.ptr, s.len);
        return json_null();
    }
    case BT_GGUF_BOOL: {
        bool b = false;
        bt_gguf_get_bool(g, key, &b);
        return json_boolean(b);
    }
    case BT_GGUF_FLOAT32: case BT_GGUF_FLOAT64: {
        float f = 0;
        bt_gguf_get_f32(g, key, &f);
        return isfinite(f) ? json_real((double)f) : json_null();
    }
    case BT_GGUF_ARRAY: {
        int et = 0; uint64_t n = 0;
        bt_gguf_get_arr(g, key, &et, &n, NULL);
        return json_pack("{s:s, s:I}", "array", bt_gguf_vtype_name(et), "n", (json_int_t)n);
    }
    default: {
        int64_t v;
        if (bt_gguf_get_i64(g, key, &v) == BT_OK) return json_integer((json_int_t)v);
        char buf[64];                       /* u64 above INT64_MAX */
        bt_gguf_format_value(g, i, buf, sizeof buf);
        return json_string(buf);
    }
    }
}

static json_t *json_token(const bt_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens || !v->text) return json_null();
    return json_pack("{s:i, s:o}", "id", (int)id, "text", json_strn(v->text[id], v->len ? v->len[id] : 0));
}

static int print_json(const bt_model *m, const char *load_err, const char *sha, const titem *ts, int64_t nt,
                      bool scanned, double scan_s)
{
    const bt_config *c = &m->cfg;
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(m->path));
    json_object_set_new(root, "format", json_string(m->format));
    if (m->gguf) {
        json_object_set_new(root, "gguf_version", json_integer(bt_gguf_version(m->gguf)));
        json_object_set_new(root, "alignment", json_integer((json_int_t)bt_gguf_alignment(m->gguf)));
        json_object_set_new(root, "data_offset", json_integer((json_int_t)bt_gguf_data_offset(m->gguf)));
    }
    json_object_set_new(root, "size", json_integer((json_int_t)m->file_size));
    json_object_set_new(root, "sha256", json_string(sha));
    json_object_set_new(root, "architecture", json_strn(c->arch, strlen(c->arch)));
    json_object_set_new(root, "name", json_strn(c->name, strlen(c->name)));
    json_object_set_new(root, "has_weights", json_boolean(bt_model_has_weights(m)));
    json_object_set_new(root, "load_error", load_err ? json_string(load_err) : json_null());
    json_object_set_new(root, "config", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:b}",
        "dim", c->dim, "hidden_dim", c->hidden_dim, "n_layers", c->n_layers, "n_heads", c->n_heads,
        "n_kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "n_vocab", c->n_vocab, "ctx_len", c->ctx_len,
        "norm_eps", (double)c->norm_eps, "rope_base", (double)c->rope_base, "rope_dim", c->rope_dim,
        "tied_output", c->tied_output));
    if (bt_model_has_weights(m)) {
        json_t *cfg = json_object_get(root, "config");
        json_object_set_new(cfg, "rope_kind", json_string(bt_rope_kind_name(c->rope_kind)));
        json_object_set_new(cfg, "rope_freqs", json_boolean(c->has_rope_freqs));
        json_object_set_new(cfg, "rope_freq_scale", json_real(c->rope_freq_scale));
        json_object_set_new(cfg, "qkv_bias", json_boolean(c->flags & BT_ARCH_QKV_BIAS));
        json_object_set_new(cfg, "qk_norm", json_boolean(c->flags & BT_ARCH_QK_NORM));
        json_object_set_new(cfg, "n_expert", json_integer(c->n_expert));
        json_object_set_new(cfg, "n_expert_used", json_integer(c->n_expert_used));
    }
    if (m->has_vocab) {
        const bt_vocab *v = &m->vocab;
        json_object_set_new(root, "tokenizer", json_pack("{s:s, s:s, s:i, s:I, s:o, s:o, s:b, s:b}",
            "kind", vocab_kind_name(v->kind), "pre", v->pre[0] ? bt_text_esc(v->pre) : "default", "n_tokens", (int)v->n_tokens,
            "n_merges", (json_int_t)v->n_merges, "bos", json_token(v, v->bos), "eos", json_token(v, v->eos),
            "add_bos", v->add_bos, "add_eos", v->add_eos));
    } else {
        json_object_set_new(root, "tokenizer", json_null());
    }
    json_object_set_new(root, "chat_template", json_string(chat_name(m)));
    if (m->gguf) {
        json_t *md = json_object();
        for (int64_t i = 0; i < bt_gguf_n_kv(m->gguf); i++) {
            bt_gguf_str k = bt_gguf_key(m->gguf, i);
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)BT_MIN(k.len, 250), k.ptr);
            json_object_set_new(md, key, json_gguf_value(m->gguf, i));
        }
        json_object_set_new(root, "metadata", md);
    }
    json_t *arr = json_array();
    int64_t n_bad = 0;
    for (int64_t i = 0; i < nt; i++) {
        const titem *t = &ts[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < BT_MAX(t->n_dims, 1u); d++) json_array_append_new(shape, json_integer((json_int_t)t->ne[d]));
        const char *tn = bt_dtype(t->type)->name;
        json_t *o = json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", t->name, "type", tn ? tn : "?",
                              "shape", shape, "bytes", (json_int_t)t->nbytes, "offset", (json_int_t)t->offset);
        if (scanned) {
            json_object_set_new(o, "scanned", json_boolean(t->scanned));
            json_object_set_new(o, "nan", json_integer(t->n_nan));
            json_object_set_new(o, "pinf", json_integer(t->n_pinf));
            json_object_set_new(o, "ninf", json_integer(t->n_ninf));
            json_object_set_new(o, "bad_scales", json_integer(t->bad_scales));
            if (t->first_bad >= 0)
                json_object_set_new(o, "first_bad", json_pack("{s:I, s:I}", "row", (json_int_t)(t->first_bad / t->ne[0]),
                                                             "col", (json_int_t)(t->first_bad % t->ne[0])));
        }
        n_bad += item_bad(t);
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "tensors", arr);
    if (scanned) {
        json_t *bad = json_array();
        for (int64_t i = 0; i < nt; i++)
            if (item_bad(&ts[i])) json_array_append_new(bad, json_string(ts[i].name));
        json_object_set_new(root, "scan", json_pack("{s:b, s:b, s:f, s:o}", "done", 1, "clean", n_bad == 0,
                                                    "seconds", scan_s, "nonfinite_tensors", bad));
    } else {
        json_object_set_new(root, "scan", json_pack("{s:b}", "done", 0));
    }
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!s) return bt_error(BT_ENOMEM, "out of memory formatting JSON");
    puts(s);
    free(s);
    return BT_OK;
}

/* ---- command ---------------------------------------------------------- */

/* A GGUF that bangtrace cannot run (another architecture, a weight type the
 * kernels lack) is still worth inspecting: metadata, tensors and the scan
 * need only the container. Fills a bare model around the GGUF handle. */
static int open_gguf_only(const char *path, bt_model *m)
{
    memset(m, 0, sizeof(*m));
    bool folder = bt_hf_is_folder(path);
    int rc = folder ? bt_hf_open(path, &m->gguf) : bt_gguf_open(path, &m->gguf);
    if (rc) return rc;
    m->path = (char *)path;
    strcpy(m->format, "gguf");
    m->file_data = bt_gguf_file_data(m->gguf);
    m->file_size = bt_gguf_file_size(m->gguf);
    if (folder && (rc = bt_hf_attach(m))) return rc;
    bt_gguf_str s;
    if (bt_gguf_get_str(m->gguf, "general.architecture", &s) == BT_OK)
        snprintf(m->cfg.arch, sizeof m->cfg.arch, "%.*s", (int)BT_MIN(s.len, 31), s.ptr);
    if (bt_gguf_get_str(m->gguf, "general.name", &s) == BT_OK)
        snprintf(m->cfg.name, sizeof m->cfg.name, "%.*s", (int)BT_MIN(s.len, 127), s.ptr);
    return BT_OK;
}

int cmd_inspect(int argc, char **argv)
{
    inspect_opts o;
    if (parse_args(argc, argv, &o)) return bt_cmd_fail("inspect");

    bt_model *m = NULL, bare;
    bt_tokenizer *tok = NULL;
    char load_err[512] = "";
    bool is_bare = false;
    titem *ts = NULL;
    int64_t nt = 0;
    int status = 2;
    int lrc = bt_model_load(o.model, o.tokenizer, &m);
    if (lrc == BT_EUNSUPPORTED) {
        snprintf(load_err, sizeof load_err, "%s", bt_errmsg());
        if (open_gguf_only(o.model, &bare)) {
            bt_error(lrc, "%s", load_err);
            goto fail;
        }
        m = &bare;
        is_bare = true;
        bt_warn("%s; showing the file's contents only", load_err);
    } else if (lrc) {
        goto fail;
    }
    /* Build the tokenizer too: an inconsistent vocabulary (a merge naming a
     * missing token) is a defect of the file that inspect should surface. */
    if (m->has_vocab) {
        int rc = bt_tokenizer_new(&m->vocab, &tok);
        if (rc) { error_in_file(rc, m->path); goto fail; }
        if (check_merges(m, tok)) goto fail;
    }
    if (collect_tensors(m, &ts, &nt)) goto fail;

    char sha[65];
    bt_sha256_hex(m->file_data, (size_t)m->file_size, sha);

    double scan_s = 0;
    if (!o.no_scan) {
        bt_kernels_init();
        scan_progress p = { .t0 = bt_now(), .tty = isatty(2) };
        for (int64_t i = 0; i < nt; i++) p.total += ts[i].nbytes;
        for (int64_t i = 0; i < nt; i++) {
            if (scan_tensor(&ts[i], &p)) goto fail;
            p.done += ts[i].nbytes;
            progress(&p, ts[i].name);
        }
        scan_s = bt_now() - p.t0;
        if (p.last > 0) fprintf(stderr, "\r%-70s\r", "");
    }

    int64_t n_bad = 0;
    for (int64_t i = 0; i < nt; i++) n_bad += item_bad(&ts[i]);
    if (o.json) {
        if (print_json(m, is_bare ? load_err : NULL, sha, ts, nt, !o.no_scan, scan_s)) goto fail;
    } else {
        print_text(m, is_bare ? load_err : NULL, sha, ts, nt, !o.no_scan, scan_s);
    }
    fflush(stdout);
    status = n_bad ? 1 : 0;
    if (n_bad && !o.json)
        fprintf(stderr, "bangtrace: inspect: %s: %" PRId64 " tensor%s NaN/Inf weights\n", o.model, n_bad,
                n_bad == 1 ? " holds" : "s hold");
    goto done;
fail:
    status = bt_cmd_fail("inspect");
done:
    free(ts);
    bt_tokenizer_free(tok);
    if (is_bare) bt_gguf_close(bare.gguf);
    else bt_model_free(m);
    return status;
}
