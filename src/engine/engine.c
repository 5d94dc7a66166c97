/* engine.c - the Llama forward pass (RMSNorm, RoPE, GQA attention, SwiGLU)
 * over T positions at once, every tensor named and observable.
 *
 * Layout follows llama2.c: one bt_engine owns a run state of named buffers
 * with shape comments. The buffers live on a backend (src/backend/) and
 * every op is a call through its vtable, so this forward pass is the only
 * one whatever the device. Weights are uploaded once (the CPU backend keeps
 * pointers into the mapping) and read in place (any supported type);
 * activations are f32. The tap branch (`want[op][layer]`) is a cached bool
 * so an engine without taps pays one predictable branch per op. */
#include "engine/engine.h"
#include "engine/numerics.h"
#include "backend/backend_impl.h"
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

#define BT_MAX_HEAD_DIM 512   /* the CPU backend accumulates a head in a stack row */

/* A view's handle: where its rows live. */
struct bt_tensor {
    bt_backend *be;
    bt_buf *buf;
    size_t off;          /* floats */
};

/* The weights of one layer on the backend. */
typedef struct layer_bufs {
    bt_buf *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
} layer_bufs;

struct bt_engine {
    const bt_model *m;
    bt_config c;
    int ctx_len, max_batch, n_threads;
    bt_backend *be;
    const struct bt_backend_i *bi;
    bool own_be;
    bool logits_all;
    int step;
    /* weights on the backend */
    bt_buf *w_embd, *w_out;
    layer_bufs *lw;    /* (n_layers) */
    /* run state on the backend, B = max_batch */
    bt_buf *x;         /* (B, dim) residual stream */
    bt_buf *xb;        /* (B, dim) normed input */
    bt_buf *q;         /* (B, q_dim) */
    bt_buf *k;         /* (B, kv_dim) */
    bt_buf *v;         /* (B, kv_dim) */
    bt_buf *ctx;       /* (B, q_dim) attention-weighted values */
    bt_buf *attn_out;  /* (B, dim) */
    bt_buf *gate;      /* (B, hidden) */
    bt_buf *up;        /* (B, hidden) */
    bt_buf *act;       /* (B, hidden) */
    bt_buf *down;      /* (B, dim) */
    bt_buf *logits_b;  /* (logit_cap, n_vocab) */
    bt_buf *key_cache; /* (layer, ctx_len, kv_dim) */
    bt_buf *val_cache; /* (layer, ctx_len, kv_dim) */
    bt_buf *rope_cos;  /* (ctx_len, head_dim/2) */
    bt_buf *rope_sin;  /* (ctx_len, head_dim/2) */
    bt_buf *norm_w;    /* (2*n_layers + 1, dim): attn_norm, ffn_norm per layer, then output_norm, as f32 */
    float *logits;     /* (logit_cap, n_vocab) on the host: the backend's own
                        * memory when it is host memory, else a copy */
    bool logits_copy;  /* logits is a host copy (device backend) */
    int logit_rows;    /* rows valid in logits after the last forward */
    int logit_cap;
    /* taps */
    bt_eval_cb cb;
    bool has_cb;
    bool *want;        /* (BT_OP_COUNT, n_layers + 1); layer -1 maps to column 0 */
    /* numerics profile; NULL = exact f32 (every hook skipped). Only on the
     * CPU backend: the hooks round host memory in place, with its pool. */
    bt_numerics_ctx *num;
    bool rope_ggml;    /* rope_cos/sin hold ggml's f32 tables (the rope=ggml part) */
    bt_pool *pool;     /* the CPU backend's pool, NULL on a device */
    /* a foreign engine (bt_engine_new_ext): no run state above but logits */
    bt_engine_ext ext;
    bool foreign;
    bool *want_extra;  /* (ext.n_extra) */
};

static bool *want_at(bt_engine *e, int op, int layer) { return &e->want[op * (e->c.n_layers + 1) + layer + 1]; }

void bt_engine_free(bt_engine *e)
{
    if (!e) return;
    bt_numerics_ctx_free(e->num);
    if (e->be) {
        bt_buf *bufs[] = { e->w_embd, e->w_out, e->x, e->xb, e->q, e->k, e->v, e->ctx, e->attn_out, e->gate,
                           e->up, e->act, e->down, e->logits_b, e->key_cache, e->val_cache, e->rope_cos,
                           e->rope_sin, e->norm_w };
        for (size_t i = 0; i < BT_ARRAY_SIZE(bufs); i++) e->bi->buf_free(e->be, bufs[i]);
        if (e->lw)
            for (int l = 0; l < e->c.n_layers; l++) {
                layer_bufs *L = &e->lw[l];
                bt_buf *w[] = { L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down };
                for (size_t i = 0; i < BT_ARRAY_SIZE(w); i++) e->bi->buf_free(e->be, w[i]);
            }
        if (e->own_be) bt_backend_free(e->be);
    }
    if (e->logits_copy) free(e->logits);
    free(e->lw);
    free(e->want);
    if (e->foreign && e->ext.free) e->ext.free(e->ext.impl);
    free(e->want_extra);
    free(e);
}

int bt_engine_new(const bt_model *m, int ctx_len, int max_batch, int n_threads, bt_engine **out)
{
    bt_engine_opts o = { .ctx_len = ctx_len, .max_batch = max_batch, .n_threads = n_threads };
    return bt_engine_new_opts(m, &o, out);
}

static int upload(bt_engine *e, const bt_weight *w, int64_t rows, int64_t cols, bt_buf **out)
{
    size_t bytes = bt_dtype_row_size(w->type, cols) * (size_t)rows;
    if (!bytes) return bt_error(BT_EUNSUPPORTED, "%s: %s rows of %lld are not whole blocks", w->name ? w->name : "weight",
                                bt_dtype(w->type)->name ? bt_dtype(w->type)->name : "?", (long long)cols);
    return e->bi->buf_upload(e->be, w->data, bytes, out);
}

/* A zeroed f32 buffer of n floats. */
static int alloc_f32(bt_engine *e, size_t n, bt_buf **out)
{
    return e->bi->buf_alloc(e->be, n * sizeof(float), out);
}

/* Logit rows on the backend (and a host copy on a device); contents are not
 * kept. */
static int logits_reserve(bt_engine *e, int rows)
{
    if (rows <= e->logit_cap) return BT_OK;
    size_t n = (size_t)rows * e->c.n_vocab;
    bt_buf *nb = NULL;
    int rc = alloc_f32(e, n, &nb);
    if (rc) return bt_error(rc, "out of memory for %d logit rows", rows);
    float *host = e->bi->buf_host ? e->bi->buf_host(e->be, nb) : NULL;
    if (!host) {
        if (!(host = malloc(n * sizeof(float)))) {
            e->bi->buf_free(e->be, nb);
            return bt_error(BT_ENOMEM, "out of memory for %d logit rows", rows);
        }
    }
    e->bi->buf_free(e->be, e->logits_b);
    if (e->logits_copy) free(e->logits);
    e->logits_b = nb;
    e->logits = host;
    e->logits_copy = !e->bi->buf_host || host != e->bi->buf_host(e->be, nb);
    e->logit_cap = rows;
    return BT_OK;
}

int bt_engine_new_opts(const bt_model *m, const bt_engine_opts *o, bt_engine **out)
{
    *out = NULL;
    int ctx_len = o->ctx_len, max_batch = o->max_batch, n_threads = o->n_threads;
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
    e->m = m; e->c = cfg; e->ctx_len = ctx_len; e->max_batch = max_batch;
    int rc = BT_OK;
    if (o->share_pool) e->be = o->share_pool->be;
    else if (o->backend) e->be = o->backend;
    else if ((rc = bt_backend_open(o->device, n_threads, &e->be))) { free(e); return rc; }
    else e->own_be = true;
    e->bi = e->be->iface;
    e->n_threads = bt_backend_threads(e->be);
    e->pool = bt_backend_cpu_pool(e->be);
    size_t B = (size_t)max_batch, q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t half = (size_t)c->head_dim / 2, nrm = ((size_t)2 * c->n_layers + 1) * c->dim;
    float *host = NULL;
    e->want = calloc((size_t)BT_OP_COUNT * (c->n_layers + 1), sizeof(bool));
    e->lw = calloc((size_t)c->n_layers, sizeof(layer_bufs));
    if (!e->want || !e->lw) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    if ((rc = alloc_f32(e, B * c->dim, &e->x)) || (rc = alloc_f32(e, B * c->dim, &e->xb)) ||
        (rc = alloc_f32(e, B * q_dim, &e->q)) || (rc = alloc_f32(e, B * kv_dim, &e->k)) ||
        (rc = alloc_f32(e, B * kv_dim, &e->v)) || (rc = alloc_f32(e, B * q_dim, &e->ctx)) ||
        (rc = alloc_f32(e, B * c->dim, &e->attn_out)) || (rc = alloc_f32(e, B * c->hidden_dim, &e->gate)) ||
        (rc = alloc_f32(e, B * c->hidden_dim, &e->up)) || (rc = alloc_f32(e, B * c->hidden_dim, &e->act)) ||
        (rc = alloc_f32(e, B * c->dim, &e->down)) ||
        (rc = alloc_f32(e, (size_t)c->n_layers * ctx_len * kv_dim, &e->key_cache)) ||
        (rc = alloc_f32(e, (size_t)c->n_layers * ctx_len * kv_dim, &e->val_cache)) ||
        (rc = alloc_f32(e, (size_t)ctx_len * half, &e->rope_cos)) ||
        (rc = alloc_f32(e, (size_t)ctx_len * half, &e->rope_sin)) ||
        (rc = alloc_f32(e, nrm, &e->norm_w)) || (rc = logits_reserve(e, 1))) {
        rc = bt_error(rc, "out of memory for run state (context %d, batch %d): %s", ctx_len, max_batch, bt_errmsg());
        goto fail;
    }
    /* Weights, read in place by the backend's kernels. */
    if ((rc = upload(e, &m->token_embd, c->n_vocab, c->dim, &e->w_embd)) ||
        (rc = upload(e, &m->output, c->n_vocab, c->dim, &e->w_out)))
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        layer_bufs *B_ = &e->lw[l];
        if ((rc = upload(e, &L->wq, q_dim, c->dim, &B_->wq)) || (rc = upload(e, &L->wk, kv_dim, c->dim, &B_->wk)) ||
            (rc = upload(e, &L->wv, kv_dim, c->dim, &B_->wv)) || (rc = upload(e, &L->wo, c->dim, q_dim, &B_->wo)) ||
            (rc = upload(e, &L->w_gate, c->hidden_dim, c->dim, &B_->w_gate)) ||
            (rc = upload(e, &L->w_up, c->hidden_dim, c->dim, &B_->w_up)) ||
            (rc = upload(e, &L->w_down, c->dim, c->hidden_dim, &B_->w_down)))
            goto fail;
    }
    /* RoPE table, computed in double: angle = pos * base^(-2i/head_dim)
     * (a numerics profile may recompute it: bt_engine_set_numerics). */
    host = malloc(BT_MAX((size_t)2 * ctx_len * half, nrm) * sizeof(float));
    if (!host) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    bt_numerics_rope_table(NULL, c->rope_base, c->head_dim, ctx_len, host, host + (size_t)ctx_len * half);
    if ((rc = e->bi->set(e->be, e->rope_cos, 0, host, (size_t)ctx_len * half)) ||
        (rc = e->bi->set(e->be, e->rope_sin, 0, host + (size_t)ctx_len * half, (size_t)ctx_len * half)))
        goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        bt_dequant_row(m->layers[l].attn_norm.type, m->layers[l].attn_norm.data, host + (size_t)(2 * l) * c->dim, c->dim);
        bt_dequant_row(m->layers[l].ffn_norm.type, m->layers[l].ffn_norm.data, host + (size_t)(2 * l + 1) * c->dim, c->dim);
    }
    bt_dequant_row(m->output_norm.type, m->output_norm.data, host + (size_t)2 * c->n_layers * c->dim, c->dim);
    if ((rc = e->bi->set(e->be, e->norm_w, 0, host, nrm))) goto fail;
    free(host);
    *out = e;
    return BT_OK;
fail:
    free(host);
    bt_engine_free(e);
    return rc;
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
    e->logits_copy = true;     /* ours to free: there is no backend */
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

/* ---- tensor handles ---- */

int bt_tensor_stats(const bt_tensor_view *t, bt_tap_stats *out)
{
    const bt_tensor *h = t->tensor;
    if (!h) {
        bt_stats_compute(t->data, t->rows, t->width, t->pos0, out);
        return BT_OK;
    }
    return h->be->iface->stats(h->be, h->buf, h->off, t->rows, t->width, t->pos0, out);
}

int bt_tensor_read(const bt_tensor_view *t, int row0, int n, float *dst)
{
    if (row0 < 0 || n < 0 || row0 + n > t->rows)
        return bt_error(BT_ERANGE, "rows %d..%d of a %d-row tensor", row0, row0 + n - 1, t->rows);
    size_t w = (size_t)t->width;
    const bt_tensor *h = t->tensor;
    if (!h) {
        memcpy(dst, t->data + (size_t)row0 * w, (size_t)n * w * sizeof(float));
        return BT_OK;
    }
    return h->be->iface->read(h->be, h->buf, h->off + (size_t)row0 * w, (size_t)n * w, dst);
}

int bt_tensor_mutate(const bt_tensor_view *t, const bt_mutation *m, long *changed)
{
    *changed = 0;
    const bt_tensor *h = t->tensor;
    if (!h) {
        *changed = bt_mutation_apply_host(t->data, t->width, m);
        return BT_OK;
    }
    const struct bt_backend_i *bi = h->be->iface;
    if (bi->inject) return bi->inject(h->be, h->buf, h->off, t->width, m, changed);
    /* No device-side hook: bring the affected rows over, mutate, put back. */
    if (m->row0 >= m->row1) return BT_OK;
    size_t w = (size_t)t->width, n = (size_t)(m->row1 - m->row0) * w;
    float *rows = malloc(n * sizeof(float));
    if (!rows) return bt_error(BT_ENOMEM, "out of memory");
    size_t off = h->off + (size_t)m->row0 * w;
    bt_mutation local = *m;
    local.row0 = 0; local.row1 = m->row1 - m->row0; local.pos0 = m->pos0 + m->row0;
    int rc = bi->read(h->be, h->buf, off, n, rows);
    if (rc == BT_OK) {
        *changed = bt_mutation_apply_host(rows, t->width, &local);
        if (*changed) rc = bi->set(h->be, h->buf, off, rows, n);
    }
    free(rows);
    return rc;
}

/* Hand a freshly computed tensor to the tap; false means cancel. */
static bool tap(bt_engine *e, int op, int layer, bt_buf *buf, int T, int pos0, int width)
{
    if (!*want_at(e, op, layer)) return true;
    bt_tensor h = { .be = e->be, .buf = buf, .off = 0 };
    bt_tensor_view t = { .op = op, .layer = layer, .step = e->step, .pos0 = pos0, .rows = T, .width = width,
                         .data = e->bi->buf_host ? e->bi->buf_host(e->be, buf) : NULL, .tensor = &h };
    return e->cb.observe(e->cb.user, &t);
}

/* The host address of a CPU buffer, for the numerics hooks (e->num is only
 * ever set on the CPU backend, whose buffers are host memory). */
static float *host_f32(bt_engine *e, bt_buf *b) { return e->bi->buf_host(e->be, b); }

/* A matmul: through the numerics profile when there is one (on the host,
 * reading the weights in place: wdata is what the CPU backend's buffer W
 * points at), else the backend's. */
static int mm(bt_engine *e, int type, bt_buf *W, const void *wdata, int64_t rows, int64_t cols, bt_buf *x,
              size_t x_off, int T, bt_buf *out)
{
    if (!e->num) return e->bi->matmul(e->be, type, W, rows, cols, x, x_off, T, out);
    bt_numerics_matmul(e->num, e->pool, type, wdata, rows, cols, host_f32(e, x) + x_off, T, host_f32(e, out));
    return BT_OK;
}

/* rmsnorm of x into xb with the norm weights at w_off: the profile's
 * accumulation when it changes it (host buffers: the CPU backend). */
static int norm(bt_engine *e, size_t w_off, int T)
{
    const bt_config *c = &e->c;
    if (!bt_numerics_norm_custom(e->num))
        return e->bi->rmsnorm(e->be, e->xb, e->x, e->norm_w, w_off, T, c->dim, c->norm_eps);
    bt_numerics_rmsnorm(e->num, host_f32(e, e->xb), host_f32(e, e->x), host_f32(e, e->norm_w) + w_off, T, c->dim, c->norm_eps);
    return BT_OK;
}

#define TAP(op, layer, buf, width) do { \
        if (e->num) bt_numerics_store(e->num, op, host_f32(e, buf), (size_t)T * (width)); \
        if (e->has_cb && !tap(e, op, layer, buf, T, pos0, width)) { e->step++; return BT_EINVAL; } } while (0)
/* An op; a backend error ends the forward (the step still counts). */
#define OP(call) do { int rc_ = (call); if (rc_) { e->step++; return rc_; } } while (0)

static int forward_ext(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    if (T > e->logit_cap) {
        float *nl = realloc(e->logits, (size_t)T * e->c.n_vocab * sizeof(float));
        if (!nl) return bt_error(BT_ENOMEM, "out of memory for %d logit rows", T);
        e->logits = nl;
        e->logit_cap = T;
    }
    int step = e->step;
    int rc = e->ext.forward(e->ext.impl, e, tokens, T, pos0, e->logits);
    e->step++;
    if (rc == BT_OK) e->logit_rows = T;
    /* the seam's contract: statistics queued in observe become final here */
    if (rc == BT_OK && e->has_cb && e->cb.flush && !e->cb.flush(e->cb.user, step)) return BT_EINVAL;
    return rc;
}

int bt_engine_forward(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    const bt_config *c = &e->c;
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
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

    const bt_model *m = e->m;
    int dim = c->dim, hd = c->head_dim, hidden = c->hidden_dim;
    int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    OP(bi->get_rows(be, m->token_embd.type, e->w_embd, dim, tokens, T, e->x));
    TAP(BT_OP_TOKEN_EMBD, -1, e->x, dim);

    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        const layer_bufs *W = &e->lw[l];
        OP(norm(e, (size_t)(2 * l) * dim, T));
        TAP(BT_OP_ATTN_NORM, l, e->xb, dim);

        OP(mm(e, L->wq.type, W->wq, L->wq.data, q_dim, dim, e->xb, 0, T, e->q));
        OP(mm(e, L->wk.type, W->wk, L->wk.data, kv_dim, dim, e->xb, 0, T, e->k));
        OP(mm(e, L->wv.type, W->wv, L->wv.data, kv_dim, dim, e->xb, 0, T, e->v));
        OP(bi->rope(be, e->q, T, c->n_heads, hd, pos0, e->rope_cos, e->rope_sin));
        OP(bi->rope(be, e->k, T, c->n_kv_heads, hd, pos0, e->rope_cos, e->rope_sin));
        TAP(BT_OP_ATTN_Q, l, e->q, q_dim);
        TAP(BT_OP_ATTN_K, l, e->k, kv_dim);
        TAP(BT_OP_ATTN_V, l, e->v, kv_dim);
        /* Append to the cache after the taps, so an injected k/v is what the
         * cache carries forward, as a bad kernel's output would be. */
        size_t slab = (size_t)l * e->ctx_len * kv_dim;
        OP(bi->kv_store(be, e->key_cache, e->val_cache, slab + (size_t)pos0 * kv_dim, e->k, e->v, (size_t)T * kv_dim));
        if (e->num) {   /* the cache as the profile stores it (host memory: the CPU backend) */
            bt_numerics_kv(e->num, host_f32(e, e->key_cache) + slab + (size_t)pos0 * kv_dim, T, kv_dim);
            bt_numerics_kv(e->num, host_f32(e, e->val_cache) + slab + (size_t)pos0 * kv_dim, T, kv_dim);
        }

        if (bt_numerics_attn_custom(e->num)) {
            bt_numerics_attention(e->num, &(bt_numerics_attn){ .q = host_f32(e, e->q), .ctx = host_f32(e, e->ctx),
                .T = T, .pos0 = pos0, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .hd = hd,
                .kc = host_f32(e, e->key_cache) + slab, .vc = host_f32(e, e->val_cache) + slab });
        } else {
            bt_attn_args aa = { .q = e->q, .k_cache = e->key_cache, .v_cache = e->val_cache, .cache_off = slab,
                                .out = e->ctx, .T = T, .pos0 = pos0, .n_heads = c->n_heads,
                                .n_kv_heads = c->n_kv_heads, .head_dim = hd, .ctx_len = e->ctx_len };
            OP(bi->attention(be, &aa));
        }
        TAP(BT_OP_ATTN_CTX, l, e->ctx, q_dim);

        OP(mm(e, L->wo.type, W->wo, L->wo.data, dim, q_dim, e->ctx, 0, T, e->attn_out));
        TAP(BT_OP_ATTN_OUTPUT, l, e->attn_out, dim);
        OP(bi->add(be, e->x, e->attn_out, (size_t)T * dim));
        TAP(BT_OP_ATTN_RESID, l, e->x, dim);

        OP(norm(e, (size_t)(2 * l + 1) * dim, T));
        TAP(BT_OP_FFN_NORM, l, e->xb, dim);
        OP(mm(e, L->w_gate.type, W->w_gate, L->w_gate.data, hidden, dim, e->xb, 0, T, e->gate));
        TAP(BT_OP_FFN_GATE, l, e->gate, hidden);
        OP(mm(e, L->w_up.type, W->w_up, L->w_up.data, hidden, dim, e->xb, 0, T, e->up));
        TAP(BT_OP_FFN_UP, l, e->up, hidden);
        OP(bi->swiglu(be, e->act, e->gate, e->up, (size_t)T * hidden));
        TAP(BT_OP_FFN_ACT, l, e->act, hidden);
        OP(mm(e, L->w_down.type, W->w_down, L->w_down.data, dim, hidden, e->act, 0, T, e->down));
        TAP(BT_OP_FFN_DOWN, l, e->down, dim);
        OP(bi->add(be, e->x, e->down, (size_t)T * dim));
        TAP(BT_OP_FFN_RESID, l, e->x, dim);
    }

    OP(norm(e, (size_t)2 * c->n_layers * dim, T));
    TAP(BT_OP_OUTPUT_NORM, -1, e->xb, dim);

    /* Logits for every row only when a tap wants them; else the last row. */
    bool all = e->logits_all || (e->has_cb && *want_at(e, BT_OP_LOGITS, -1));
    int rows = all ? T : 1;
    OP(logits_reserve(e, rows));
    size_t src = all ? 0 : (size_t)(T - 1) * dim;
    OP(mm(e, m->output.type, e->w_out, m->output.data, c->n_vocab, dim, e->xb, src, rows, e->logits_b));
    e->logit_rows = rows;
    if (e->num) bt_numerics_store(e->num, BT_OP_LOGITS, host_f32(e, e->logits_b), (size_t)rows * c->n_vocab);
    if (e->has_cb && *want_at(e, BT_OP_LOGITS, -1)) TAP(BT_OP_LOGITS, -1, e->logits_b, c->n_vocab);
    /* The sampler reads the host copy; on a device this read is also the
     * step's synchronisation point. */
    if (e->logits_copy) OP(bi->read(be, e->logits_b, 0, (size_t)rows * c->n_vocab, e->logits));
    if (bi->sync) OP(bi->sync(be));
    int step = e->step++;
    if (e->has_cb && e->cb.flush && !e->cb.flush(e->cb.user, step)) return BT_EINVAL;
    return BT_OK;
}

float *bt_engine_logits(bt_engine *e) { return e->logits + (size_t)(e->logit_rows - 1) * e->c.n_vocab; }

float *bt_engine_logits_row(bt_engine *e, int i)
{
    if (i < 0 || i >= e->logit_rows) return NULL;
    return e->logits + (size_t)i * e->c.n_vocab;
}

int bt_engine_set_numerics(bt_engine *e, const bt_numerics *n)
{
    bt_numerics_ctx *c;
    /* The hooks round host buffers in place and run the CPU kernels: a
     * profile on a device backend is future work (doc/numerics.md). */
    if (n && !bt_numerics_is_exact(n) && e->foreign)
        return bt_error(BT_EUNSUPPORTED, "--numerics: a numerics profile runs on the native engine only, not on llama.cpp");
    if (n && !bt_numerics_is_exact(n) && (!e->pool || !e->bi->buf_host))
        return bt_error(BT_EUNSUPPORTED, "--numerics: a numerics profile runs on the CPU only, not on %s",
                        bt_backend_name(e->be));
    if (n && (n->attn || n->softmax) && e->c.head_dim > BT_NUMERICS_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "--numerics: attn= and softmax= handle heads of up to %d values, this model's have %d",
                        BT_NUMERICS_MAX_HEAD_DIM, e->c.head_dim);
    int rc = bt_numerics_ctx_new(n, e->pool, &c);
    if (rc) return rc;
    bt_numerics_ctx_free(e->num);
    e->num = c;
    /* The rope part changes the tables, made once per engine: remake them
     * when it differs from what they hold (host memory: the CPU backend). */
    bool rope_ggml = n && n->rope == BT_NUM_ROPE_GGML;
    if (rope_ggml != e->rope_ggml && !e->foreign) {
        float *cs = host_f32(e, e->rope_cos), *sn = host_f32(e, e->rope_sin);
        if (!cs || !sn) return bt_error(BT_EUNSUPPORTED, "--numerics: rope=ggml runs on the CPU only");
        bt_numerics_rope_table(n, e->c.rope_base, e->c.head_dim, e->ctx_len, cs, sn);
        e->rope_ggml = rope_ggml;
    }
    return BT_OK;
}

int bt_engine_step(const bt_engine *e) { return e->step; }
void bt_engine_set_step(bt_engine *e, int step) { e->step = step; }
void bt_engine_set_logits_all(bt_engine *e, bool all) { e->logits_all = all; }
int bt_engine_n_layers(const bt_engine *e) { return e->c.n_layers; }
int bt_engine_ctx_len(const bt_engine *e) { return e->ctx_len; }
int bt_engine_kv_dim(const bt_engine *e) { return e->c.n_kv_heads * e->c.head_dim; }
bt_backend *bt_engine_backend(const bt_engine *e) { return e->be; }

float *bt_engine_kv(bt_engine *e, int layer, int pos, int which)
{
    if (e->foreign) return NULL;    /* the foreign engine owns its cache */
    if (layer < 0 || layer >= e->c.n_layers || pos < 0 || pos >= e->ctx_len) return NULL;
    size_t kv_dim = (size_t)bt_engine_kv_dim(e);
    float *base = e->bi->buf_host ? e->bi->buf_host(e->be, which ? e->val_cache : e->key_cache) : NULL;
    if (!base) return NULL;
    return base + ((size_t)layer * e->ctx_len + pos) * kv_dim;
}

int bt_engine_kv_fill(bt_engine *e, int layer, int pos, int which, float value)
{
    if (e->foreign) return bt_error(BT_EUNSUPPORTED, "the KV cache of a foreign engine is its own");
    if (layer < 0 || layer >= e->c.n_layers || pos < 0 || pos >= e->ctx_len)
        return bt_error(BT_ERANGE, "layer %d / position %d is outside the KV cache", layer, pos);
    size_t kv_dim = (size_t)bt_engine_kv_dim(e);
    float *p = malloc(kv_dim * sizeof(float));     /* rare: fault injection */
    if (!p) return bt_error(BT_ENOMEM, "out of memory");
    for (size_t i = 0; i < kv_dim; i++) p[i] = value;
    int rc = e->bi->set(e->be, which ? e->val_cache : e->key_cache, ((size_t)layer * e->ctx_len + pos) * kv_dim, p, kv_dim);
    free(p);
    return rc;
}

const bt_model *bt_engine_model(const bt_engine *e) { return e->m; }

void bt_engine_kernel_name(const bt_engine *e, int op, int layer, char *buf, size_t cap)
{
    if (e->foreign) { snprintf(buf, cap, "llama.cpp"); return; }   /* its views name their kernel */
    const bt_model *m = e->m;
    const bt_weight *w = NULL;
    const bt_layer_weights *L = layer >= 0 && layer < e->c.n_layers ? &m->layers[layer] : NULL;
    int kop = -1;
    switch (op) {
    case BT_OP_TOKEN_EMBD: w = &m->token_embd; kop = BT_KOP_GET_ROWS; break;
    case BT_OP_ATTN_Q: w = L ? &L->wq : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_ATTN_K: w = L ? &L->wk : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_ATTN_V: w = L ? &L->wv : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_ATTN_OUTPUT: w = L ? &L->wo : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_FFN_GATE: w = L ? &L->w_gate : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_FFN_UP: w = L ? &L->w_up : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_FFN_DOWN: w = L ? &L->w_down : NULL; kop = BT_KOP_MATMUL; break;
    case BT_OP_LOGITS: w = &m->output; kop = BT_KOP_MATMUL; break;
    case BT_OP_ATTN_NORM: case BT_OP_FFN_NORM: case BT_OP_OUTPUT_NORM: kop = BT_KOP_RMSNORM; break;
    case BT_OP_ATTN_CTX: kop = BT_KOP_ATTENTION; break;
    case BT_OP_FFN_ACT: kop = BT_KOP_SWIGLU; break;
    case BT_OP_ATTN_RESID: case BT_OP_FFN_RESID: kop = BT_KOP_ADD; break;
    default: break;
    }
    if (kop < 0 || ((kop == BT_KOP_MATMUL || kop == BT_KOP_GET_ROWS) && !w)) { snprintf(buf, cap, "?"); return; }
    char k[128];
    e->bi->kernel_name(e->be, kop, w ? w->type : BT_DT_F32, k, sizeof(k));
    if (w) snprintf(buf, cap, "%s on %s", k, w->name ? w->name : "?");
    else snprintf(buf, cap, "%s", k);
}
