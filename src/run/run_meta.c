/* run_meta.c - a recorded run's meta rows, written and read back (see
 * run_meta.h). */
#include "run/run_meta.h"
#include "run/recorder.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void read_cpu_name(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) { c++; while (*c == ' ') c++; c[strcspn(c, "\n")] = 0; snprintf(buf, cap, "%s", c); }
            break;
        }
    }
    fclose(f);
}

/* A row whose value is NULL is not written. */
static int meta(int rc, bt_trace *t, const char *k, const char *v)
{
    return rc == BT_OK && v ? bt_trace_meta(t, k, v) : rc;
}

/* A JSON row (compact, keys sorted); j is consumed. */
static int meta_json(int rc, bt_trace *t, const char *k, json_t *j)
{
    char *js = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    if (!js) return rc ? rc : bt_error(BT_ENOMEM, "out of memory");
    rc = meta(rc, t, k, js);
    free(js);
    return rc;
}

static int meta_real_path(int rc, bt_trace *t, const char *k, const char *path)
{
    if (!path) return rc;
    char *abs = realpath(path, NULL);
    rc = meta(rc, t, k, abs ? abs : path);
    free(abs);
    return rc;
}

int bt_run_meta_write(bt_trace *t, const bt_run_meta_src *s)
{
    const bt_model *m = s->model;
    const bt_config *c = &m->cfg;
    const bt_sampler_cfg *sc = s->sc;
    char buf[512], rule[48];
    int rc = BT_OK;
    if (s->argv_json) rc = meta(rc, t, "argv", s->argv_json);
    else {
        json_t *av = json_array();
        json_array_append_new(av, json_string("bangtrace"));
        for (int i = 0; i < s->argc; i++) json_array_append_new(av, json_string(s->argv[i]));
        rc = meta_json(rc, t, "argv", av);
    }
    rc = meta(rc, t, "request_id", s->request_id);
    if (!s->slot) {
        if (gethostname(buf, sizeof(buf)) == 0) { buf[sizeof(buf) - 1] = 0; rc = meta(rc, t, "host", buf); }
        read_cpu_name(buf, sizeof(buf));
        rc = meta(rc, t, "cpu", buf);
    }
    /* cpu-<simd> on the CPU; the device's name on another backend;
     * llama.cpp-<dev> for llama.cpp's own backends */
    if (s->llamacpp) snprintf(buf, sizeof(buf), "llama.cpp-%s", s->device ? s->device : "cpu");
    else if (s->backend) snprintf(buf, sizeof(buf), "%s", s->backend);
    else if (!s->device || !strcmp(s->device, "cpu")) snprintf(buf, sizeof(buf), "cpu-%s", bt_kernels_simd());
    else snprintf(buf, sizeof(buf), "%s", s->device);
    rc = meta(rc, t, "backend", buf);
    snprintf(buf, sizeof(buf), "%d", s->threads);
    rc = meta(rc, t, "threads", buf);
    if (!s->slot) {
        bt_numerics exact;
        memset(&exact, 0, sizeof exact);
        bt_numerics_format(s->numerics ? s->numerics : &exact, buf, sizeof(buf));
        rc = meta(rc, t, "numerics", buf);
    }
    rc = meta_real_path(rc, t, "model_path", s->model_path);
    rc = meta_real_path(rc, t, "tokenizer_path", s->tokenizer_path);
    rc = meta(rc, t, "model_sha256", s->model_sha256 ? s->model_sha256 : "");
    rc = meta(rc, t, "model_format", m->format);
    rc = meta(rc, t, "model_name", c->name);
    rc = meta(rc, t, "arch", c->arch);
    if (!s->slot) {
        json_t *hp = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b}", "dim", c->dim,
                               "hidden_dim", c->hidden_dim, "n_layers", c->n_layers, "n_heads", c->n_heads,
                               "n_kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "n_vocab", c->n_vocab,
                               "ctx_len", c->ctx_len, "norm_eps", (double)c->norm_eps,
                               "rope_base", (double)c->rope_base, "tied_output", c->tied_output);
        /* a gated delta net's state: rows of head_v, ssm_head_k rows a value head (bisect names head and row) */
        if (hp && c->ssm_n_v > 0 && c->ssm_head_k > 0) {
            json_object_set_new(hp, "ssm_n_v", json_integer(c->ssm_n_v));
            json_object_set_new(hp, "ssm_head_k", json_integer(c->ssm_head_k));
        }
        rc = meta_json(rc, t, "hparams", hp);
    }
    snprintf(buf, sizeof(buf), "%d", c->n_layers);
    rc = meta(rc, t, "n_layers", buf);
    snprintf(buf, sizeof(buf), "%d", c->n_vocab);
    rc = meta(rc, t, "n_vocab", buf);
    if (!s->slot) {
        static const char *const kinds[] = { "?", "spm", "bpe", "llama2c" };
        rc = meta_json(rc, t, "tokenizer", json_pack("{s:s,s:s,s:i,s:I,s:i,s:i}", "kind", kinds[m->vocab.kind & 3],
                                                     "pre", m->vocab.pre, "n_tokens", m->vocab.n_tokens,
                                                     "n_merges", (json_int_t)m->vocab.n_merges,
                                                     "bos", bt_tokenizer_bos(s->tok), "eos", bt_tokenizer_eos(s->tok)));
    }
    bt_argmax_format(&sc->rule, rule, sizeof(rule));
    rc = meta(rc, t, "argmax_rule", rule);
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)sc->seed);
    rc = meta(rc, t, "seed", buf);
    /* meta "seed" is the exact decimal; JSON integers are signed 64-bit, so
     * sampling.seed holds its two's-complement reinterpretation (seeds from
     * 2^63 up read negative there, and back exactly as uint64_t) */
    rc = meta_json(rc, t, "sampling", json_pack("{s:f,s:i,s:f,s:I,s:s}", "temperature", (double)sc->temperature,
                                                "top_k", sc->top_k, "top_p", (double)sc->top_p,
                                                "seed", (json_int_t)sc->seed, "argmax", rule));
    if (s->inj) {
        char *js = bt_injector_json(s->inj);
        if (!js) return rc ? rc : bt_error(BT_ENOMEM, "out of memory");
        rc = meta(rc, t, "injections", js);
        free(js);
    } else rc = meta(rc, t, "injections", "[]");
    rc = meta(rc, t, "request_json", s->request_json);
    rc = meta(rc, t, "prompt_text", s->prompt_text);
    rc = meta(rc, t, "taps", bt_taps_mode_name(s->taps));
    if (s->layer_lo >= 0) { snprintf(buf, sizeof(buf), "%d-%d", s->layer_lo, s->layer_hi); rc = meta(rc, t, "tap_layers", buf); }
    rc = meta(rc, t, "logits", s->logits_full ? "full" : "flagged");
    if (!s->slot) rc = meta(rc, t, "engine", s->engine ? s->engine : s->llamacpp ? "llama.cpp" : "native");
    if (s->llamacpp) {
        rc = meta(rc, t, "llama_cpp_version", s->llama_version);
        rc = meta(rc, t, "llama_cpp_lib_version", s->llama_lib_version);
        rc = meta(rc, t, "llama_cpp_build", s->llama_build);
        rc = meta(rc, t, "llama_cpp_settings", s->llama_settings);   /* as asked: every deviation from llama.cpp's defaults */
        rc = meta(rc, t, "llama_cpp_path", s->llama_path);           /* as resolved by llama.cpp */
    }
    for (const char *const *kv = s->extra; kv && kv[0] && kv[1]; kv += 2) rc = meta(rc, t, kv[0], kv[1]);
    return rc;
}

int bt_run_meta_write_spec(bt_trace *t, int spec_k, const char *drafter, const bt_model *dm, const char *dm_path)
{
    char buf[80], hex[65];
    snprintf(buf, sizeof(buf), "%d", spec_k);
    int rc = bt_trace_meta(t, "spec_k", buf);
    if (!rc) rc = bt_trace_meta(t, "drafter", drafter);
    if (!rc && dm) {
        rc = meta_real_path(rc, t, "draft_model_path", dm_path);
        bt_sha256_hex(dm->file_data, dm->file_size, hex);
        if (!rc) rc = bt_trace_meta(t, "draft_model_sha256", hex);
    }
    return rc;
}

int bt_run_meta_write_mem(bt_trace *t, long long weight_bytes, double upload_ms, long long used, long long total)
{
    char buf[32];
    int rc;
    snprintf(buf, sizeof(buf), "%lld", weight_bytes);
    if ((rc = bt_trace_meta(t, "device_weight_bytes", buf))) return rc;
    snprintf(buf, sizeof(buf), "%.3f", upload_ms);
    if ((rc = bt_trace_meta(t, "device_upload_ms", buf))) return rc;
    snprintf(buf, sizeof(buf), "%lld", used);
    if ((rc = bt_trace_meta(t, "device_mem_used", buf))) return rc;
    snprintf(buf, sizeof(buf), "%lld", total);
    return bt_trace_meta(t, "device_mem_total", buf);
}

int bt_run_meta_write_cuda(bt_trace *t, bool cuda_graphs, bool cupti)
{
    int rc = BT_OK;
    if (cuda_graphs) rc = bt_trace_meta(t, "cuda_graphs", "1");
    if (!rc && cupti) rc = bt_trace_meta(t, "cupti", "1");
    return rc;
}

int bt_run_meta_write_generated(bt_trace *t, long n)
{
    char ng[24];
    snprintf(ng, sizeof(ng), "%ld", n);
    return bt_trace_meta(t, "generated", ng);
}

void bt_run_meta_read(bt_trace_reader *r, bt_run_meta *m)
{
    memset(m, 0, sizeof *m);
#define READ_(k) m->k = bt_trace_meta_get(r, #k);
    BT_RUN_META_KEYS(READ_)
    BT_TRACE_META_KEYS(READ_)
#undef READ_
    m->n_threads = m->threads ? atoi(m->threads) : 0;
    m->n_spec_k = m->spec_k ? atoi(m->spec_k) : 0;
    m->llama_cpp = m->engine && !strcmp(m->engine, "llama.cpp");
    m->foreign = m->engine && strcmp(m->engine, "native");
}

const char *bt_run_meta_get(const bt_run_meta *m, const char *key)
{
#define GET_(k) if (!strcmp(key, #k)) return m->k;
    BT_RUN_META_KEYS(GET_)
    BT_TRACE_META_KEYS(GET_)
#undef GET_
    return NULL;
}
