/* engine.c - the Llama forward pass (RMSNorm, RoPE, GQA attention, SwiGLU)
 * over T positions at once, every tensor named and observable.
 *
 * Layout follows llama2.c: one bt_engine owns a run state of named buffers
 * with shape comments. Weights are read in place through bt_matmul (any
 * supported type); activations are f32. The tap branch (`want[op][layer]`)
 * is a cached bool so an engine without taps pays one predictable branch
 * per op. */
#include "engine/engine.h"
#include "kernels.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[] = {
    [BT_OP_TOKEN_EMBD] = "token_embd",
    [BT_OP_ATTN_NORM] = "attn_norm", [BT_OP_ATTN_Q] = "attn_q", [BT_OP_ATTN_K] = "attn_k",
    [BT_OP_ATTN_V] = "attn_v", [BT_OP_ATTN_CTX] = "attn_ctx", [BT_OP_ATTN_OUTPUT] = "attn_output",
    [BT_OP_ATTN_RESID] = "attn_resid",
    [BT_OP_FFN_NORM] = "ffn_norm", [BT_OP_FFN_GATE] = "ffn_gate", [BT_OP_FFN_UP] = "ffn_up",
    [BT_OP_FFN_ACT] = "ffn_act", [BT_OP_FFN_DOWN] = "ffn_down", [BT_OP_FFN_RESID] = "ffn_resid",
    [BT_OP_OUTPUT_NORM] = "output_norm", [BT_OP_LOGITS] = "logits",
};
_Static_assert(BT_ARRAY_SIZE(op_names) == BT_OP_COUNT, "op name table out of date");
/* Per-op header labels (the browser's grid, dumps): a two-letter label that
 * stays unique when a grid cell is narrow, and a four-letter one. */
static const char op_labels[][2][5] = {
    [BT_OP_TOKEN_EMBD] = { "em", "embd" },
    [BT_OP_ATTN_NORM] = { "an", "anrm" }, [BT_OP_ATTN_Q] = { "aq", "q" }, [BT_OP_ATTN_K] = { "ak", "k" },
    [BT_OP_ATTN_V] = { "av", "v" }, [BT_OP_ATTN_CTX] = { "ac", "ctx" }, [BT_OP_ATTN_OUTPUT] = { "ao", "aout" },
    [BT_OP_ATTN_RESID] = { "ar", "ares" },
    [BT_OP_FFN_NORM] = { "fn", "fnrm" }, [BT_OP_FFN_GATE] = { "fg", "gate" }, [BT_OP_FFN_UP] = { "fu", "up" },
    [BT_OP_FFN_ACT] = { "fa", "act" }, [BT_OP_FFN_DOWN] = { "fd", "down" }, [BT_OP_FFN_RESID] = { "fr", "fres" },
    [BT_OP_OUTPUT_NORM] = { "on", "onrm" }, [BT_OP_LOGITS] = { "lg", "lgts" },
};
_Static_assert(BT_ARRAY_SIZE(op_labels) == BT_OP_COUNT, "op label table out of date");

const char *bt_op_label(int op) { return op >= 0 && op < BT_OP_COUNT ? op_labels[op][0] : "?"; }
const char *bt_op_abbrev(int op) { return op >= 0 && op < BT_OP_COUNT ? op_labels[op][1] : "????"; }

const char *bt_op_name(int op) { return op >= 0 && op < BT_OP_COUNT ? op_names[op] : "?"; }

int bt_op_from_name(const char *name)
{
    for (int i = 0; i < BT_OP_COUNT; i++)
        if (!strcmp(name, op_names[i])) return i;
    return -1;
}

bool bt_op_is_layer_op(int op) { return op > BT_OP_TOKEN_EMBD && op < BT_OP_OUTPUT_NORM; }

int bt_op_width(const bt_config *c, int op)
{
    switch (op) {
    case BT_OP_ATTN_Q: case BT_OP_ATTN_CTX: return c->n_heads * c->head_dim;
    case BT_OP_ATTN_K: case BT_OP_ATTN_V: return c->n_kv_heads * c->head_dim;
    case BT_OP_FFN_GATE: case BT_OP_FFN_UP: case BT_OP_FFN_ACT: return c->hidden_dim;
    case BT_OP_LOGITS: return c->n_vocab;
    default: return c->dim;
    }
}

void bt_tensor_name(int op, int layer, char *buf, size_t cap)
{
    if (bt_op_is_layer_op(op)) snprintf(buf, cap, "blk.%d.%s", layer, bt_op_name(op));
    else snprintf(buf, cap, "%s", bt_op_name(op));
}

#define BT_MAX_HEAD_DIM 512   /* attention accumulates a head in a stack row */

struct bt_engine {
    const bt_model *m;
    bt_config c;
    int ctx_len, max_batch, n_threads;
    bt_pool *pool;
    bool own_pool;
    bool logits_all;
    int step;
    /* run state, B = max_batch */
    float *x;          /* (B, dim) residual stream */
    float *xb;         /* (B, dim) normed input */
    float *q;          /* (B, q_dim) */
    float *k;          /* (B, kv_dim) */
    float *v;          /* (B, kv_dim) */
    float *ctx;        /* (B, q_dim) attention-weighted values */
    float *attn_out;   /* (B, dim) */
    float *gate;       /* (B, hidden) */
    float *up;         /* (B, hidden) */
    float *act;        /* (B, hidden) */
    float *down;       /* (B, dim) */
    float *att;        /* (n_threads, ctx_len) attention scores scratch */
    float *logits;     /* (logit_rows, n_vocab) */
    int logit_rows;    /* rows valid in logits after the last forward */
    int logit_cap;
    float *key_cache;  /* (layer, ctx_len, kv_dim) */
    float *val_cache;  /* (layer, ctx_len, kv_dim) */
    float *rope_cos;   /* (ctx_len, head_dim/2) */
    float *rope_sin;   /* (ctx_len, head_dim/2) */
    float *norm_w;     /* (2*n_layers + 1, dim): attn_norm, ffn_norm per layer, then output_norm, as f32 */
    /* taps */
    bt_eval_cb cb;
    bool has_cb;
    bool *want;        /* (BT_OP_COUNT, n_layers + 1); layer -1 maps to column 0 */
    /* a foreign engine (bt_engine_new_ext): no run state above but logits */
    bt_engine_ext ext;
    bool foreign;
    bool *want_extra;  /* (ext.n_extra) */
};

static bool *want_at(bt_engine *e, int op, int layer) { return &e->want[op * (e->c.n_layers + 1) + layer + 1]; }

void bt_engine_free(bt_engine *e)
{
    if (!e) return;
    if (e->own_pool) bt_pool_free(e->pool);
    if (e->foreign && e->ext.free) e->ext.free(e->ext.impl);
    free(e->want_extra);
    void *bufs[] = { e->x, e->xb, e->q, e->k, e->v, e->ctx, e->attn_out, e->gate, e->up, e->act,
                     e->down, e->att, e->logits, e->key_cache, e->val_cache, e->rope_cos,
                     e->rope_sin, e->norm_w, e->want };
    for (size_t i = 0; i < BT_ARRAY_SIZE(bufs); i++) free(bufs[i]);
    free(e);
}

int bt_engine_new(const bt_model *m, int ctx_len, int max_batch, int n_threads, bt_engine **out)
{
    bt_engine_opts o = { .ctx_len = ctx_len, .max_batch = max_batch, .n_threads = n_threads };
    return bt_engine_new_opts(m, &o, out);
}

int bt_engine_new_opts(const bt_model *m, const bt_engine_opts *o, bt_engine **out)
{
    *out = NULL;
    int ctx_len = o->ctx_len, max_batch = o->max_batch, n_threads = o->n_threads;
    if (o->share_pool) n_threads = bt_pool_threads(o->share_pool->pool);
    if (!bt_model_has_weights(m))
        return bt_error(BT_EINVAL, "%s: the model has no weights (vocabulary-only file?)", m->path);
    if (o->n_layers < 0 || o->n_layers > m->cfg.n_layers)
        return bt_error(BT_EINVAL, "%d layers asked of a %d-layer model", o->n_layers, m->cfg.n_layers);
    bt_config cfg = m->cfg;
    if (o->n_layers > 0) cfg.n_layers = o->n_layers;
    if (cfg.head_dim > BT_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "%s: head dimension %d is above the supported %d", m->path, cfg.head_dim, BT_MAX_HEAD_DIM);
    const bt_config *c = &cfg;
    if (ctx_len <= 0) ctx_len = BT_MIN(c->ctx_len, BT_ENGINE_CTX_CAP);
    if (max_batch <= 0) max_batch = 1;
    if (n_threads <= 0) n_threads = 1;
    bt_engine *e = calloc(1, sizeof(*e));
    if (!e) return bt_error(BT_ENOMEM, "out of memory");
    e->m = m; e->c = cfg; e->ctx_len = ctx_len; e->max_batch = max_batch; e->n_threads = n_threads;
    size_t B = (size_t)max_batch, q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t half = (size_t)c->head_dim / 2;
    e->x = malloc(B * c->dim * sizeof(float));
    e->xb = malloc(B * c->dim * sizeof(float));
    e->q = malloc(B * q_dim * sizeof(float));
    e->k = malloc(B * kv_dim * sizeof(float));
    e->v = malloc(B * kv_dim * sizeof(float));
    e->ctx = malloc(B * q_dim * sizeof(float));
    e->attn_out = malloc(B * c->dim * sizeof(float));
    e->gate = malloc(B * c->hidden_dim * sizeof(float));
    e->up = malloc(B * c->hidden_dim * sizeof(float));
    e->act = malloc(B * c->hidden_dim * sizeof(float));
    e->down = malloc(B * c->dim * sizeof(float));
    e->att = malloc((size_t)n_threads * ctx_len * sizeof(float));
    e->logit_cap = 1;
    e->logits = malloc((size_t)c->n_vocab * sizeof(float));
    e->key_cache = calloc((size_t)c->n_layers * ctx_len * kv_dim, sizeof(float));
    e->val_cache = calloc((size_t)c->n_layers * ctx_len * kv_dim, sizeof(float));
    e->rope_cos = malloc((size_t)ctx_len * half * sizeof(float));
    e->rope_sin = malloc((size_t)ctx_len * half * sizeof(float));
    e->norm_w = malloc(((size_t)2 * c->n_layers + 1) * c->dim * sizeof(float));
    e->want = calloc((size_t)BT_OP_COUNT * (c->n_layers + 1), sizeof(bool));
    if (o->share_pool) e->pool = o->share_pool->pool;
    else { e->pool = bt_pool_new(n_threads); e->own_pool = true; }
    if (!e->x || !e->xb || !e->q || !e->k || !e->v || !e->ctx || !e->attn_out || !e->gate || !e->up ||
        !e->act || !e->down || !e->att || !e->logits || !e->key_cache || !e->val_cache ||
        !e->rope_cos || !e->rope_sin || !e->norm_w || !e->want || !e->pool) {
        bt_engine_free(e);
        return bt_error(BT_ENOMEM, "out of memory for run state (context %d, batch %d)", ctx_len, max_batch);
    }
    /* RoPE table, computed in double: angle = pos * base^(-2i/head_dim). */
    for (int pos = 0; pos < ctx_len; pos++)
        for (size_t i = 0; i < half; i++) {
            double freq = pow((double)c->rope_base, -2.0 * (double)i / c->head_dim);
            double a = pos * freq;
            e->rope_cos[pos * half + i] = (float)cos(a);
            e->rope_sin[pos * half + i] = (float)sin(a);
        }
    for (int l = 0; l < c->n_layers; l++) {
        bt_dequant_row(m->layers[l].attn_norm.type, m->layers[l].attn_norm.data, e->norm_w + (size_t)(2 * l) * c->dim, c->dim);
        bt_dequant_row(m->layers[l].ffn_norm.type, m->layers[l].ffn_norm.data, e->norm_w + (size_t)(2 * l + 1) * c->dim, c->dim);
    }
    bt_dequant_row(m->output_norm.type, m->output_norm.data, e->norm_w + (size_t)2 * c->n_layers * c->dim, c->dim);
    *out = e;
    return BT_OK;
}

void bt_engine_set_eval_cb(bt_engine *e, const bt_eval_cb *cb)
{
    e->has_cb = cb && cb->observe;
    memset(e->want, 0, (size_t)BT_OP_COUNT * (e->c.n_layers + 1) * sizeof(bool));
    if (e->want_extra) memset(e->want_extra, 0, (size_t)e->ext.n_extra * sizeof(bool));
    if (!e->has_cb) return;
    e->cb = *cb;
    for (int op = 0; op < BT_OP_COUNT; op++) {
        if (bt_op_is_layer_op(op)) {
            for (int l = 0; l < e->c.n_layers; l++) *want_at(e, op, l) = !cb->ask || cb->ask(cb->user, op, l);
        } else {
            *want_at(e, op, -1) = !cb->ask || cb->ask(cb->user, op, -1);
        }
    }
    for (int i = 0; i < e->ext.n_extra; i++)
        e->want_extra[i] = !cb->ask || cb->ask(cb->user, BT_OP_COUNT + i, e->ext.extra[i].layer);
}

int bt_engine_new_ext(const bt_model *m, int ctx_len, int max_batch, const bt_engine_ext *ext, bt_engine **out)
{
    *out = NULL;
    bt_engine *e = calloc(1, sizeof(*e));
    if (!e) { if (ext->free) ext->free(ext->impl); return bt_error(BT_ENOMEM, "out of memory"); }
    e->m = m; e->c = m->cfg; e->foreign = true; e->ext = *ext;
    e->ctx_len = ctx_len > 0 ? ctx_len : BT_MIN(m->cfg.ctx_len, BT_ENGINE_CTX_CAP);
    e->max_batch = max_batch > 0 ? max_batch : 1;
    e->logit_cap = e->max_batch;
    e->logits = malloc((size_t)e->logit_cap * m->cfg.n_vocab * sizeof(float));
    e->want = calloc((size_t)BT_OP_COUNT * (m->cfg.n_layers + 1), sizeof(bool));
    e->want_extra = calloc((size_t)ext->n_extra + 1, sizeof(bool));
    if (!e->logits || !e->want || !e->want_extra) { bt_engine_free(e); return bt_error(BT_ENOMEM, "out of memory"); }
    *out = e;
    return BT_OK;
}

bool bt_engine_is_foreign(const bt_engine *e) { return e->foreign; }
int bt_engine_n_extra(const bt_engine *e) { return e->ext.n_extra; }
const bt_extra_tensor *bt_engine_extra(const bt_engine *e, int i) { return i >= 0 && i < e->ext.n_extra ? &e->ext.extra[i] : NULL; }

bool bt_engine_tap_wanted(const bt_engine *e, int op, int layer)
{
    if (!e->has_cb) return false;
    if (op >= BT_OP_COUNT) return op - BT_OP_COUNT < e->ext.n_extra && e->want_extra[op - BT_OP_COUNT];
    if (op < 0 || layer < -1 || layer >= e->c.n_layers) return false;
    return *want_at((bt_engine *)e, op, layer);
}

bool bt_engine_tap_deliver(bt_engine *e, bt_tensor_view *t)
{
    if (!e->has_cb) return true;
    t->step = e->step;
    return e->cb.observe(e->cb.user, t);
}

/* Hand a freshly computed tensor to the tap; false means cancel. */
static bool tap(bt_engine *e, int op, int layer, float *data, int T, int pos0, int width)
{
    if (!*want_at(e, op, layer)) return true;
    bt_tensor_view t = { .op = op, .layer = layer, .step = e->step, .pos0 = pos0,
                         .rows = T, .width = width, .data = data };
    return e->cb.observe(e->cb.user, &t);
}

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void rope(float *v, int n_heads, int head_dim, const float *cs, const float *sn)
{
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * head_dim;
        for (int i = 0; i < half; i++) {
            float a = p[2 * i], b = p[2 * i + 1];
            p[2 * i] = a * cs[i] - b * sn[i];
            p[2 * i + 1] = a * sn[i] + b * cs[i];
        }
    }
}

typedef struct attn_job {
    bt_engine *e;
    int layer, T, pos0;
} attn_job;

/* One (position, head) pair per work item, split across threads. */
static void attn_worker(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    bt_engine *e = j->e;
    const bt_config *c = &e->c;
    int hd = c->head_dim, kv_dim = c->n_kv_heads * hd, q_dim = c->n_heads * hd;
    int group = c->n_heads / c->n_kv_heads;
    const float *kc = e->key_cache + (size_t)j->layer * e->ctx_len * kv_dim;
    const float *vc = e->val_cache + (size_t)j->layer * e->ctx_len * kv_dim;
    float *att = e->att + (size_t)ith * e->ctx_len;
    float scale = 1.0f / sqrtf((float)hd);
    int items = j->T * c->n_heads;
    for (int it = ith; it < items; it += nth) {
        int t = it / c->n_heads, h = it % c->n_heads, pos = j->pos0 + t;
        const float *q = e->q + (size_t)t * q_dim + h * hd;
        int kvh = h / group;
        float mx = -INFINITY;
        for (int p = 0; p <= pos; p++) {
            const float *k = kc + (size_t)p * kv_dim + kvh * hd;
            float s = bt_vec_dot(BT_DT_F32, k, q, hd) * scale;   /* SIMD: the score loop is a quarter of decode time */
            att[p] = s;
            if (s > mx) mx = s;
        }
        float sum = 0;
        for (int p = 0; p <= pos; p++) { att[p] = expf(att[p] - mx); sum += att[p]; }
        float inv = 1.0f / sum;
        /* Accumulate in a local row: with no possible aliasing between the
         * accumulator and the cache, the inner loop vectorises (same
         * per-element order, so results do not change). */
        float acc[BT_MAX_HEAD_DIM];
        memset(acc, 0, hd * sizeof(float));
        for (int p = 0; p <= pos; p++) {
            const float *restrict v = vc + (size_t)p * kv_dim + kvh * hd;
            float a = att[p] * inv;
            for (int i = 0; i < hd; i++) acc[i] += a * v[i];
        }
        memcpy(e->ctx + (size_t)t * q_dim + h * hd, acc, hd * sizeof(float));
    }
}

#define TAP(op, layer, buf, width) do { \
        if (e->has_cb && !tap(e, op, layer, buf, T, pos0, width)) { e->step++; return BT_EINVAL; } } while (0)

static int forward_ext(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    if (T > e->logit_cap) {
        float *nl = realloc(e->logits, (size_t)T * e->c.n_vocab * sizeof(float));
        if (!nl) return bt_error(BT_ENOMEM, "out of memory for %d logit rows", T);
        e->logits = nl;
        e->logit_cap = T;
    }
    int rc = e->ext.forward(e->ext.impl, e, tokens, T, pos0, e->logits);
    e->step++;
    if (rc == BT_OK) e->logit_rows = T;
    return rc;
}

int bt_engine_forward(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    const bt_model *m = e->m;
    const bt_config *c = &e->c;
    if (e->foreign) {
        if (T <= 0 || pos0 < 0 || pos0 + T > e->ctx_len)
            return bt_error(BT_ERANGE, "positions %d..%d exceed the context length %d (use --ctx)", pos0, pos0 + T - 1, e->ctx_len);
        for (int t = 0; t < T; t++)
            if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
                return bt_error(BT_ERANGE, "token id %d at position %d is outside the vocabulary (%d)", tokens[t], pos0 + t, c->n_vocab);
        return forward_ext(e, tokens, T, pos0);
    }
    if (T <= 0 || T > e->max_batch)
        return bt_error(BT_EINVAL, "forward of %d tokens exceeds the batch size %d", T, e->max_batch);
    if (pos0 < 0 || pos0 + T > e->ctx_len)
        return bt_error(BT_ERANGE, "positions %d..%d exceed the context length %d (use --ctx)", pos0, pos0 + T - 1, e->ctx_len);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return bt_error(BT_ERANGE, "token id %d at position %d is outside the vocabulary (%d)", tokens[t], pos0 + t, c->n_vocab);

    int dim = c->dim, hd = c->head_dim, hidden = c->hidden_dim;
    int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd, half = hd / 2;
    size_t erow = bt_dtype_row_size(m->token_embd.type, dim);
    for (int t = 0; t < T; t++)
        bt_dequant_row(m->token_embd.type, (const char *)m->token_embd.data + (size_t)tokens[t] * erow, e->x + (size_t)t * dim, dim);
    TAP(BT_OP_TOKEN_EMBD, -1, e->x, dim);

    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        const float *wn = e->norm_w + (size_t)(2 * l) * dim;
        for (int t = 0; t < T; t++) rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, wn, dim, c->norm_eps);
        TAP(BT_OP_ATTN_NORM, l, e->xb, dim);

        bt_matmul(e->pool, L->wq.type, L->wq.data, q_dim, dim, e->xb, T, e->q);
        bt_matmul(e->pool, L->wk.type, L->wk.data, kv_dim, dim, e->xb, T, e->k);
        bt_matmul(e->pool, L->wv.type, L->wv.data, kv_dim, dim, e->xb, T, e->v);
        for (int t = 0; t < T; t++) {
            const float *cs = e->rope_cos + (size_t)(pos0 + t) * half, *sn = e->rope_sin + (size_t)(pos0 + t) * half;
            rope(e->q + (size_t)t * q_dim, c->n_heads, hd, cs, sn);
            rope(e->k + (size_t)t * kv_dim, c->n_kv_heads, hd, cs, sn);
        }
        TAP(BT_OP_ATTN_Q, l, e->q, q_dim);
        TAP(BT_OP_ATTN_K, l, e->k, kv_dim);
        TAP(BT_OP_ATTN_V, l, e->v, kv_dim);
        /* Append to the cache after the taps, so an injected k/v is what the
         * cache carries forward, as a bad kernel's output would be. */
        float *kc = e->key_cache + ((size_t)l * e->ctx_len + pos0) * kv_dim;
        float *vc = e->val_cache + ((size_t)l * e->ctx_len + pos0) * kv_dim;
        memcpy(kc, e->k, (size_t)T * kv_dim * sizeof(float));
        memcpy(vc, e->v, (size_t)T * kv_dim * sizeof(float));

        attn_job job = { .e = e, .layer = l, .T = T, .pos0 = pos0 };
        bt_pool_run(e->pool, attn_worker, &job);
        TAP(BT_OP_ATTN_CTX, l, e->ctx, q_dim);

        bt_matmul(e->pool, L->wo.type, L->wo.data, dim, q_dim, e->ctx, T, e->attn_out);
        TAP(BT_OP_ATTN_OUTPUT, l, e->attn_out, dim);
        for (size_t i = 0; i < (size_t)T * dim; i++) e->x[i] += e->attn_out[i];
        TAP(BT_OP_ATTN_RESID, l, e->x, dim);

        const float *wf = e->norm_w + (size_t)(2 * l + 1) * dim;
        for (int t = 0; t < T; t++) rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, wf, dim, c->norm_eps);
        TAP(BT_OP_FFN_NORM, l, e->xb, dim);
        bt_matmul(e->pool, L->w_gate.type, L->w_gate.data, hidden, dim, e->xb, T, e->gate);
        TAP(BT_OP_FFN_GATE, l, e->gate, hidden);
        bt_matmul(e->pool, L->w_up.type, L->w_up.data, hidden, dim, e->xb, T, e->up);
        TAP(BT_OP_FFN_UP, l, e->up, hidden);
        for (size_t i = 0; i < (size_t)T * hidden; i++) {
            float g = e->gate[i];
            e->act[i] = g / (1.0f + expf(-g)) * e->up[i];
        }
        TAP(BT_OP_FFN_ACT, l, e->act, hidden);
        bt_matmul(e->pool, L->w_down.type, L->w_down.data, dim, hidden, e->act, T, e->down);
        TAP(BT_OP_FFN_DOWN, l, e->down, dim);
        for (size_t i = 0; i < (size_t)T * dim; i++) e->x[i] += e->down[i];
        TAP(BT_OP_FFN_RESID, l, e->x, dim);
    }

    const float *wo = e->norm_w + (size_t)2 * c->n_layers * dim;
    for (int t = 0; t < T; t++) rmsnorm(e->xb + (size_t)t * dim, e->x + (size_t)t * dim, wo, dim, c->norm_eps);
    TAP(BT_OP_OUTPUT_NORM, -1, e->xb, dim);

    /* Logits for every row only when a tap wants them; else the last row. */
    bool all = e->logits_all || (e->has_cb && *want_at(e, BT_OP_LOGITS, -1));
    int rows = all ? T : 1;
    if (rows > e->logit_cap) {
        float *nl = realloc(e->logits, (size_t)rows * c->n_vocab * sizeof(float));
        if (!nl) { e->step++; return bt_error(BT_ENOMEM, "out of memory for %d logit rows", rows); }
        e->logits = nl;
        e->logit_cap = rows;
    }
    const float *src = all ? e->xb : e->xb + (size_t)(T - 1) * dim;
    bt_matmul(e->pool, m->output.type, m->output.data, c->n_vocab, dim, src, rows, e->logits);
    e->logit_rows = rows;
    if (e->has_cb && *want_at(e, BT_OP_LOGITS, -1)) TAP(BT_OP_LOGITS, -1, e->logits, c->n_vocab);
    e->step++;
    return BT_OK;
}

float *bt_engine_logits(bt_engine *e) { return e->logits + (size_t)(e->logit_rows - 1) * e->c.n_vocab; }

float *bt_engine_logits_row(bt_engine *e, int i)
{
    if (i < 0 || i >= e->logit_rows) return NULL;
    return e->logits + (size_t)i * e->c.n_vocab;
}

int bt_engine_step(const bt_engine *e) { return e->step; }
void bt_engine_set_step(bt_engine *e, int step) { e->step = step; }
void bt_engine_set_logits_all(bt_engine *e, bool all) { e->logits_all = all; }
int bt_engine_n_layers(const bt_engine *e) { return e->c.n_layers; }
int bt_engine_ctx_len(const bt_engine *e) { return e->ctx_len; }
int bt_engine_kv_dim(const bt_engine *e) { return e->c.n_kv_heads * e->c.head_dim; }

float *bt_engine_kv(bt_engine *e, int layer, int pos, int which)
{
    if (e->foreign) return NULL;    /* the foreign engine owns its cache */
    if (layer < 0 || layer >= e->c.n_layers || pos < 0 || pos >= e->ctx_len) return NULL;
    size_t kv_dim = (size_t)bt_engine_kv_dim(e);
    float *base = which ? e->val_cache : e->key_cache;
    return base + ((size_t)layer * e->ctx_len + pos) * kv_dim;
}
const bt_model *bt_engine_model(const bt_engine *e) { return e->m; }
