/* api.c - libbangtrace (bangtrace.h): another engine's run recorded through
 * bangtrace's own recorder.
 *
 * The engine that ran is a foreign engine (bt_engine_new_ext) whose forward
 * computes nothing: it hands the recorder the statistics and logits the
 * caller reduced (bt_tensor_view.stats), so slots, tap rows, logit
 * snapshots, the token trail, detectors and events are a native run's, and
 * every reader takes the trace as it is. A model is one session that holds
 * the model and tokenizer; each recording is a session sharing it, with its
 * own trace and recorder. */
#include "api/bangtrace.h"
#include "run/recorder.h"
#include "run/run_meta.h"
#include "run/session.h"
#include "model/hf.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API_CTX (1 << 30)   /* positions: the engine that ran decides its own context */

typedef struct api_tensor { char name[64]; char op[32]; int opid, layer, width; } api_tensor;

struct bangtrace_model {
    bt_session *base;           /* the model and tokenizer, shared by every recording */
    api_tensor *tens;
    int n_tens;
    char sha[65];
    bool have_sha;
    pthread_mutex_t mu;         /* the SHA-256, computed once */
};

/* The foreign engine's forward: what bangtrace_forward was given. */
typedef struct passive {
    const bangtrace_model *m;
    char kernel[96];            /* who computed the tensors, for the first_nonfinite event */
    const double *stats;
    int n_stats;
    const float *logits;
    int n_rows;
    bt_tap_stats *tmp;          /* (n_tens) */
} passive;

struct bangtrace_rec {
    bangtrace_model *m;
    bt_session *s;
    passive *pv;                /* owned by the engine */
    bt_recorder *rec;
    bool open_step, prompted;
    int pos0, n, step;          /* the open step */
    int fwd_pos0, fwd_n;        /* its computed rows (after a cached prefix, not all of the step's) */
    int32_t *prefix;            /* bangtrace_cached_prefix's tokens, until the first forward */
    int n_prefix;
    long generated;
    struct timespec t0;
    char path[1024];
};

static double elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

int bangtrace_api_version(void) { return BANGTRACE_API_VERSION; }
const char *bangtrace_error(void) { return bt_errmsg(); }

/* ---- statistics ---- */

static int stats_from(const double *v, int pos0, bt_tap_stats *s)
{
    if (!(v[BANGTRACE_STAT_N] >= 0)) return 0;    /* not computed this step (NaN too) */
    s->n = (int64_t)v[BANGTRACE_STAT_N];
    s->nan = (int64_t)v[BANGTRACE_STAT_NAN];
    s->pinf = (int64_t)v[BANGTRACE_STAT_PINF];
    s->ninf = (int64_t)v[BANGTRACE_STAT_NINF];
    s->n_finite = (int64_t)v[BANGTRACE_STAT_FINITE];
    s->min = (float)v[BANGTRACE_STAT_MIN];
    s->max = (float)v[BANGTRACE_STAT_MAX];
    s->absmax = (float)v[BANGTRACE_STAT_ABSMAX];
    s->mean = (float)v[BANGTRACE_STAT_MEAN];
    s->rms = (float)v[BANGTRACE_STAT_RMS];
    bool bad = s->nan + s->pinf + s->ninf > 0;
    s->first_bad_index = bad ? (int)v[BANGTRACE_STAT_FIRST_BAD_COL] : -1;
    s->first_bad_pos = bad ? pos0 + (int)v[BANGTRACE_STAT_FIRST_BAD_ROW] : -1;
    if (s->n < 0 || s->nan < 0 || s->pinf < 0 || s->ninf < 0 || s->n_finite < 0 ||
        s->nan + s->pinf + s->ninf + s->n_finite != s->n)
        return bt_error(BT_EINVAL, "statistics whose counts do not add up (%lld elements: %lld NaN, %lld +Inf, %lld -Inf, %lld finite)",
                        (long long)s->n, (long long)s->nan, (long long)s->pinf, (long long)s->ninf, (long long)s->n_finite);
    return 1;
}

static void stats_to(const bt_tap_stats *s, double *v)
{
    v[BANGTRACE_STAT_N] = (double)s->n;
    v[BANGTRACE_STAT_NAN] = (double)s->nan;
    v[BANGTRACE_STAT_PINF] = (double)s->pinf;
    v[BANGTRACE_STAT_NINF] = (double)s->ninf;
    v[BANGTRACE_STAT_FINITE] = (double)s->n_finite;
    v[BANGTRACE_STAT_MIN] = s->min;
    v[BANGTRACE_STAT_MAX] = s->max;
    v[BANGTRACE_STAT_ABSMAX] = s->absmax;
    v[BANGTRACE_STAT_MEAN] = s->mean;
    v[BANGTRACE_STAT_RMS] = s->rms;
    v[BANGTRACE_STAT_FIRST_BAD_COL] = s->first_bad_index;
    v[BANGTRACE_STAT_FIRST_BAD_ROW] = s->first_bad_pos;
}

int bangtrace_stats(const void *data, int dtype, int rows, int width, double out[BANGTRACE_STAT_COUNT])
{
    if (!data || !out || rows < 1 || width < 1)
        return bt_error(BT_EINVAL, "bangtrace_stats: no data, or %d rows of %d", rows, width);
    if (dtype != BANGTRACE_F32 && dtype != BANGTRACE_F16 && dtype != BANGTRACE_BF16)
        return bt_error(BT_EINVAL, "bangtrace_stats: unknown element type %d (F32 0, F16 1, BF16 2)", dtype);
    bt_tap_stats s;
    if (dtype == BANGTRACE_F32) {
        bt_stats_compute(data, rows, width, 0, &s);
    } else {
        float *f = malloc((size_t)rows * width * sizeof(float));
        if (!f) return bt_error(BT_ENOMEM, "out of memory");
        const uint16_t *h = data;
        for (size_t i = 0; i < (size_t)rows * width; i++)
            f[i] = dtype == BANGTRACE_F16 ? bt_f16_to_f32(h[i]) : bt_bf16_to_f32(h[i]);
        bt_stats_compute(f, rows, width, 0, &s);
        free(f);
    }
    stats_to(&s, out);
    return BT_OK;
}

/* ---- the engine that ran elsewhere ---- */

static int passive_forward(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits)
{
    passive *p = impl;
    const bangtrace_model *m = p->m;
    for (int i = 0; i < m->n_tens && p->stats; i++) {
        const api_tensor *t = &m->tens[i];
        int have = stats_from(p->stats + (size_t)i * BANGTRACE_STAT_COUNT, pos0, &p->tmp[i]);
        if (have < 0) return bt_error(BT_EINVAL, "%s: %s", t->name, bt_errmsg());
        if (!have || !bt_engine_tap_wanted(e, t->opid, t->layer)) continue;
        /* a recurrent state's rows are not positions: its first bad row
         * counts from 0, as the native engine's state taps */
        bool st = t->opid == BT_OP_SSM_STATE || t->opid == BT_OP_SSM_CONV_STATE;
        if (st && p->tmp[i].first_bad_pos >= 0) p->tmp[i].first_bad_pos -= pos0;
        bt_tensor_view v = { .op = t->opid, .layer = t->layer, .pos0 = st ? 0 : pos0,
                             .rows = st ? (int)(p->tmp[i].n / t->width) : T, .width = t->width,
                             .stats = &p->tmp[i], .kernel = p->kernel[0] ? p->kernel : NULL };
        if (!bt_engine_tap_deliver(e, &v)) return BT_EINVAL;
    }
    int nv = bt_engine_model(e)->cfg.n_vocab;
    int rows = BT_MIN(p->n_rows, T);
    memset(logits, 0, (size_t)(T - rows) * nv * sizeof(float));
    memcpy(logits + (size_t)(T - rows) * nv, p->logits + (size_t)(p->n_rows - rows) * nv, (size_t)rows * nv * sizeof(float));
    return BT_OK;
}

static void passive_free(void *impl)
{
    passive *p = impl;
    if (p) free(p->tmp);
    free(p);
}

static int passive_new(void *user, const bt_model *m, int ctx, int max_batch, int threads, bt_engine **out)
{
    bangtrace_model *bm = user;
    passive *p = calloc(1, sizeof *p);
    if (p) p->tmp = calloc((size_t)(bm->n_tens > 0 ? bm->n_tens : BT_OP_COUNT * (m->cfg.n_layers + 1)), sizeof *p->tmp);
    if (!p || !p->tmp) { passive_free(p); return bt_error(BT_ENOMEM, "out of memory"); }
    p->m = bm;
    bt_engine_ext ext = { .forward = passive_forward, .free = passive_free, .impl = p };
    return bt_engine_new_ext(m, ctx, max_batch, &ext, out);
}

/* ---- the model ---- */

int bangtrace_model_open(const char *path, bangtrace_model **out)
{
    if (!out) return bt_error(BT_EINVAL, "bangtrace_model_open: no place for the model");
    *out = NULL;
    if (!path || !*path) return bt_error(BT_EINVAL, "bangtrace_model_open: no model path");
    bangtrace_model *m = calloc(1, sizeof *m);
    if (!m) return bt_error(BT_ENOMEM, "out of memory");
    pthread_mutex_init(&m->mu, NULL);
    bt_session_cfg sc = { .model = path, .need_vocab = true };
    int rc = bt_session_open(&sc, &m->base);
    /* the tensors a native run taps: a recorder of every op over an engine of this model */
    bt_engine *e = NULL;
    bt_recorder *r = NULL;
    const bt_model *bm = rc ? NULL : bt_session_model(m->base);
    if (!rc) rc = passive_new(m, bm, 1, 1, 1, &e);
    bt_recorder_cfg rcfg = { .model = bm, .taps = BT_TAPS_ALL, .layer_lo = -1 };
    if (!rc) rc = bt_recorder_new(&rcfg, e, &r);
    if (!rc) {
        m->n_tens = bt_recorder_n_slots(r);
        if (!(m->tens = calloc((size_t)(m->n_tens > 0 ? m->n_tens : 1), sizeof *m->tens))) rc = bt_error(BT_ENOMEM, "out of memory");
        for (int i = 0; i < m->n_tens && !rc; i++) {
            api_tensor *t = &m->tens[i];
            bt_recorder_slot(r, i, &t->opid, &t->layer);
            bt_tensor_name(t->opid, t->layer, t->name, sizeof t->name);
            snprintf(t->op, sizeof t->op, "%s", bt_op_name(t->opid));
            t->width = bt_op_layer_width(&bm->cfg, t->opid, t->layer);    /* a leading dense layer: its own ffn width */
        }
    }
    bt_recorder_free(r);
    bt_engine_free(e);
    if (rc) { bangtrace_model_close(m); return rc; }
    *out = m;
    return BT_OK;
}

void bangtrace_model_close(bangtrace_model *m)
{
    if (!m) return;
    bt_session_close(m->base, NULL);
    free(m->tens);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static const bt_model *model_of(const bangtrace_model *m) { return m ? bt_session_model(m->base) : NULL; }
const char *bangtrace_model_arch(const bangtrace_model *m) { return m ? model_of(m)->cfg.arch : ""; }
int bangtrace_model_n_layers(const bangtrace_model *m) { return m ? model_of(m)->cfg.n_layers : -1; }
int bangtrace_model_n_vocab(const bangtrace_model *m) { return m ? model_of(m)->cfg.n_vocab : -1; }
int bangtrace_model_n_tensors(const bangtrace_model *m) { return m ? m->n_tens : -1; }

int bangtrace_model_tensor(const bangtrace_model *m, int i, const char **name, int *layer, const char **op, int *width)
{
    if (!m || i < 0 || i >= m->n_tens) return -1;
    const api_tensor *t = &m->tens[i];
    if (name) *name = t->name;
    if (layer) *layer = t->layer;
    if (op) *op = t->op;
    if (width) *width = t->width;
    return 0;
}

int bangtrace_model_tensor_find(const bangtrace_model *m, const char *name)
{
    for (int i = 0; m && name && i < m->n_tens; i++)
        if (!strcmp(m->tens[i].name, name)) return i;
    return -1;
}

/* GGUF names are the tensor names with ".weight": "blk.3.ffn_down.weight"
 * feeds blk.3.ffn_down, "blk.3.ffn_down_exps.weight" its experts, and
 * "output.weight" the logits. */
int bangtrace_model_weight_tensor(const bangtrace_model *m, const char *weight_name)
{
    if (!m || !weight_name) return -1;
    char g[160];
    if (bt_hf_gguf_name(model_of(m)->cfg.arch, weight_name, g, sizeof g) != 0) snprintf(g, sizeof g, "%s", weight_name);
    size_t n = strlen(g);
    if (n < 8 || strcmp(g + n - 7, ".weight")) return -1;
    g[n - 7] = 0;
    n -= 7;
    if (n > 5 && !strcmp(g + n - 5, "_exps")) g[n - 5] = 0;
    if (!strcmp(g, "output")) return bangtrace_model_tensor_find(m, "logits");
    /* weights whose output the engine names otherwise: gpt-oss's
     * post-attention norm is its FFN input norm, deepseek2's kv_a_mqa
     * gives attn_kv_a */
    static const struct { const char *weight, *tap; } TAP_OF[] = {
        { ".post_attention_norm", ".ffn_norm" }, { ".attn_kv_a_mqa", ".attn_kv_a" },
    };
    for (size_t i = 0; i < sizeof TAP_OF / sizeof TAP_OF[0]; i++) {
        size_t wl = strlen(TAP_OF[i].weight), len = strlen(g);
        if (len > wl && !strcmp(g + len - wl, TAP_OF[i].weight)) snprintf(g + len - wl, sizeof g - (len - wl), "%s", TAP_OF[i].tap);
    }
    return bangtrace_model_tensor_find(m, g);
}

/* ---- a recording ---- */

static const char *model_sha(bangtrace_model *m)
{
    pthread_mutex_lock(&m->mu);
    if (!m->have_sha) {
        const bt_model *bm = model_of(m);
        bt_sha256_hex(bm->file_data, bm->file_size, m->sha);
        m->have_sha = true;
    }
    pthread_mutex_unlock(&m->mu);
    return m->sha;
}

static bool printable(const char *s)
{
    for (; *s; s++) if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

int bangtrace_open(bangtrace_model *m, const char *trace_path, const char *engine, const char *settings,
                   unsigned flags, bangtrace_rec **out)
{
    if (!out) return bt_error(BT_EINVAL, "bangtrace_open: no place for the recording");
    *out = NULL;
    if (!m) return bt_error(BT_EINVAL, "bangtrace_open: no model");
    if (!trace_path || !*trace_path) return bt_error(BT_EINVAL, "bangtrace_open: no trace path");
    if (!engine || !*engine || strlen(engine) > 32 || !printable(engine) || !strcmp(engine, "native") || !strcmp(engine, "llama.cpp"))
        return bt_error(BT_EINVAL, "bangtrace_open: the engine must be named (\"transformers\", \"vllm\", ...; not \"native\" or \"llama.cpp\")");
    if (flags & ~BANGTRACE_FORCE) return bt_error(BT_EINVAL, "bangtrace_open: unknown flags 0x%x", flags & ~BANGTRACE_FORCE);
    bangtrace_rec *r = calloc(1, sizeof *r);
    if (!r) return bt_error(BT_ENOMEM, "out of memory");
    r->m = m;
    snprintf(r->path, sizeof r->path, "%s", trace_path);
    const bt_model *bm = model_of(m);
    const char *sha = model_sha(m);
    bt_session_cfg sc = { .share = m->base, .ctx = API_CTX, .max_batch = 1, .threads = 1,
                          .engine_new = passive_new, .engine_user = m,
                          .trace = trace_path, .force = flags & BANGTRACE_FORCE, .taps = BT_TAPS_ALL, .layer_lo = -1,
                          .rule = { .kind = BT_ARGMAX_TORCH } };
    int rc = bt_session_new(&sc, &r->s);
    if (rc) {
        bt_session_close(r->s, NULL);
        free(r);
        return rc;
    }
    r->rec = bt_session_recorder(r->s);
    snprintf(((passive *)bt_engine_foreign_impl(bt_session_engine(r->s)))->kernel, sizeof(((passive *)0)->kernel),
             "%s (the module that computes it)", engine);
    bt_sampler_cfg smp = { .rule = { .kind = BT_ARGMAX_TORCH } };
    const char *extra[] = { "engine_settings", settings && *settings ? settings : NULL, NULL, NULL };
    bt_run_meta_src src = { .argv_json = "[]", .model = bm, .tok = bt_session_tokenizer(m->base), .model_path = bm->path,
                            .model_sha256 = sha, .backend = engine, .engine = engine, .threads = 0, .sc = &smp,
                            .taps = BT_TAPS_ALL, .layer_lo = -1, .extra = settings && *settings ? extra : NULL };
    rc = bt_run_meta_write(bt_session_trace(r->s), &src);
    if (rc) {
        bt_session_close(r->s, BT_TRACE_STATUS_ERROR);
        free(r);
        return rc;
    }
    *out = r;
    return BT_OK;
}

int bangtrace_meta(bangtrace_rec *r, const char *key, const char *value)
{
    static const char *const keys[] = { "request_id", "request_json", "prompt_text", "engine_version", "dtype" };
    if (!r || !key || !value) return bt_error(BT_EINVAL, "bangtrace_meta: no recording, key or value");
    for (size_t i = 0; i < BT_ARRAY_SIZE(keys); i++)
        if (!strcmp(key, keys[i])) return bt_trace_meta(bt_session_trace(r->s), key, value);
    return bt_error(BT_EINVAL, "bangtrace_meta: '%s' is not a key the caller may write (request_id, request_json, "
                    "prompt_text, engine_version, dtype)", key);
}

/* End the open step: the sampled token when known (token >= 0). */
static int end_step(bangtrace_rec *r, int32_t token, double logprob)
{
    if (!r->open_step) return BT_OK;
    r->open_step = false;
    int rc = BT_OK;
    bt_engine *e = bt_session_engine(r->s);
    if (token >= 0) {
        rc = bt_recorder_step_sampled(r->rec, bt_engine_logits(e), r->pos0 + r->n - 1, token, (float)logprob, NULL);
        if (!rc) r->generated++;
    }
    int rc2 = bt_recorder_step_end(r->rec, elapsed_ms(&r->t0));
    return rc ? rc : rc2;
}

int bangtrace_cached_prefix(bangtrace_rec *r, const int32_t *tokens, int n)
{
    if (!r) return bt_error(BT_EINVAL, "bangtrace_cached_prefix: no recording");
    if (r->prompted) return bt_error(BT_EINVAL, "bangtrace_cached_prefix: the recording has its prompt already");
    if (!tokens || n < 1) return bt_error(BT_EINVAL, "bangtrace_cached_prefix: %d tokens", n);
    int32_t *p = malloc((size_t)n * sizeof *p);
    if (!p) return bt_error(BT_ENOMEM, "out of memory");
    memcpy(p, tokens, (size_t)n * sizeof *p);
    free(r->prefix);
    r->prefix = p;
    r->n_prefix = n;
    return BT_OK;
}

int bangtrace_forward(bangtrace_rec *r, const int32_t *tokens, int n, int pos0, const double *stats, int n_stats,
                      const float *logits, int n_rows)
{
    if (!r) return bt_error(BT_EINVAL, "bangtrace_forward: no recording");
    if (!tokens || n < 1 || pos0 < 0) return bt_error(BT_EINVAL, "bangtrace_forward: %d tokens at position %d", n, pos0);
    if (stats && n_stats != r->m->n_tens)
        return bt_error(BT_EINVAL, "bangtrace_forward: %d rows of statistics, but the model has %d tapped tensors", n_stats, r->m->n_tens);
    if (!logits || n_rows < 1 || n_rows > n)
        return bt_error(BT_EINVAL, "bangtrace_forward: %d logit rows for %d tokens (give 1 to %d)", n_rows, n, n);
    int rc;
    if (r->open_step) {
        /* the previous step's sampled token is this forward's first input when it continues */
        bool next = pos0 == r->pos0 + r->n;
        if ((rc = end_step(r, next ? tokens[0] : -1, NAN))) return rc;
    }
    int step_pos0 = pos0, step_n = n;
    if (!r->prompted) {
        if (pos0 != r->n_prefix)
            return r->n_prefix ? bt_error(BT_EINVAL, "bangtrace_forward: the first forward after a cached prefix of %d "
                                          "tokens starts at position %d, not %d", r->n_prefix, r->n_prefix, pos0)
                               : bt_error(BT_EINVAL, "bangtrace_forward: the first forward of a recording starts at "
                                          "position 0, not %d", pos0);
        if (r->n_prefix) {
            /* the prompt is the cached prefix and this forward's tokens; the
             * step covers it all, its taps the computed rows; a kv_access
             * "hit" row tells bisect --reference to run the prefix untapped */
            int32_t *all = malloc((size_t)(r->n_prefix + n) * sizeof *all);
            if (!all) return bt_error(BT_ENOMEM, "out of memory");
            memcpy(all, r->prefix, (size_t)r->n_prefix * sizeof *all);
            memcpy(all + r->n_prefix, tokens, (size_t)n * sizeof *all);
            rc = bt_recorder_prompt(r->rec, all, r->n_prefix + n);
            free(all);
            bt_kv_access hit = { .step = 0, .server_step = -1, .block = -1, .logical = 0, .mode = "hit", .pos_lo = 0,
                                 .pos_hi = r->n_prefix - 1, .writer_step = -1, .bad_step = -1 };
            snprintf(hit.note, sizeof hit.note, "the engine's prefix cache (reported by the caller)");
            if (!rc) rc = bt_trace_kv_access(bt_session_trace(r->s), &hit, 1);
            if (rc) return rc;
            step_pos0 = 0;
            step_n = r->n_prefix + n;
        } else if ((rc = bt_recorder_prompt(r->rec, tokens, n))) return rc;
        r->prompted = true;
        free(r->prefix);
        r->prefix = NULL;
    }
    bt_engine *e = bt_session_engine(r->s);
    passive *p = bt_engine_foreign_impl(e);
    p->stats = stats;
    p->n_stats = n_stats;
    p->logits = logits;
    p->n_rows = n_rows;
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
    const char *kind = step_pos0 == 0 || n > 1 ? "prefill" : "decode";
    if ((rc = bt_recorder_step_begin(r->rec, kind, step_pos0, step_n))) return rc;
    r->open_step = true;
    r->pos0 = step_pos0;
    r->n = step_n;
    r->fwd_pos0 = pos0;
    r->fwd_n = n;
    rc = bt_engine_forward(e, tokens, n, pos0);
    p->stats = NULL;
    p->logits = NULL;
    if (!rc) rc = bt_recorder_status(r->rec);
    if (rc) { r->open_step = false; bt_recorder_step_end(r->rec, 0); }
    return rc;
}

int bangtrace_moe_routes(bangtrace_rec *r, int layer, const int32_t *experts, const float *weights, int n_rows, int k)
{
    if (!r) return bt_error(BT_EINVAL, "bangtrace_moe_routes: no recording");
    if (!r->open_step) return bt_error(BT_EINVAL, "bangtrace_moe_routes: no forward open (call it after bangtrace_forward)");
    const bt_config *c = &bt_session_model(r->s)->cfg;
    if (c->n_expert <= 0) return bt_error(BT_EINVAL, "bangtrace_moe_routes: %s is not a mixture-of-experts model", c->arch);
    if (layer < 0 || layer >= c->n_layers)
        return bt_error(BT_ERANGE, "bangtrace_moe_routes: layer %d of a %d-layer model", layer, c->n_layers);
    if (n_rows != r->fwd_n)
        return bt_error(BT_EINVAL, "bangtrace_moe_routes: %d rows, but the forward computed %d", n_rows, r->fwd_n);
    if (k < 1 || k > c->n_expert)
        return bt_error(BT_ERANGE, "bangtrace_moe_routes: %d experts a row, of the model's %d", k, c->n_expert);
    if (!experts || !weights) return bt_error(BT_EINVAL, "bangtrace_moe_routes: no experts or weights");
    int *ids = malloc((size_t)n_rows * k * sizeof *ids);
    if (!ids) return bt_error(BT_ENOMEM, "out of memory");
    for (long i = 0; i < (long)n_rows * k; i++) {
        if (experts[i] < 0 || experts[i] >= c->n_expert) {
            free(ids);
            return bt_error(BT_ERANGE, "bangtrace_moe_routes: row %ld routes to expert %d of %d", i / k, (int)experts[i],
                            c->n_expert);
        }
        ids[i] = experts[i];
    }
    int rc = bt_trace_moe_routes(bt_session_trace(r->s), bt_recorder_current_step(r->rec), "target", layer, r->fwd_pos0,
                                 n_rows, k, ids, weights);
    free(ids);
    return rc;
}

int bangtrace_sampled(bangtrace_rec *r, int32_t token, double logprob)
{
    if (!r) return bt_error(BT_EINVAL, "bangtrace_sampled: no recording");
    if (!r->open_step) return bt_error(BT_EINVAL, "bangtrace_sampled: no forward to sample from (call bangtrace_forward first)");
    if (token < 0) return bt_error(BT_EINVAL, "bangtrace_sampled: token id %d", (int)token);
    return end_step(r, token, logprob);
}

int bangtrace_event(bangtrace_rec *r, const char *kind, const char *detail)
{
    if (!r || !kind || !*kind || !printable(kind)) return bt_error(BT_EINVAL, "bangtrace_event: no recording or kind");
    int step = r->open_step ? bt_engine_step(bt_session_engine(r->s)) - 1 : -1;
    return bt_trace_event(bt_session_trace(r->s), step, -1, kind, -1, NULL, NULL, detail ? detail : "", NULL);
}

int bangtrace_close(bangtrace_rec *r, const char *status, const char *finish_reason)
{
    if (!r) return BT_OK;
    if (status && strcmp(status, "ok") && strcmp(status, "error") && strcmp(status, "interrupted")) status = "error";
    int rc = end_step(r, -1, NAN);
    if (!rc && finish_reason && r->generated > 0) rc = bt_recorder_finish(r->rec, finish_reason);
    if (!rc) rc = bt_run_meta_write_generated(bt_session_trace(r->s), r->generated);
    int rc2 = bt_session_close_trace(r->s, rc ? BT_TRACE_STATUS_ERROR : status ? status : BT_TRACE_STATUS_OK);
    bt_session_close(r->s, NULL);
    free(r->prefix);
    free(r);
    return rc ? rc : rc2;
}
