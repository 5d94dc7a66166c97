/* backend_cpu.c - the CPU backend: kernels/cpu behind the vtable, and the
 * reference every other backend is tested against.
 *
 * Buffers are host memory, so buf_host hands taps a float * for free and
 * stats / inject / read run on the tensor that was just written (still in
 * cache). Weights are not copied: a weight buffer points into the model's
 * mapping. Matrix products, dequantization and the attention score dots go
 * through bt_matmul / bt_dequant_row / bt_vec_dot, so whatever SIMD variant
 * kernels/cpu picks at run time is what this backend runs; the loops here
 * (rmsnorm, rope, softmax, silu, residual adds) are the ones the engine
 * used to run inline, operation for operation, so results are unchanged. */
#include "backend/backend_impl.h"
#include "kernels/cpu/numerics.h"
#include "kernels.h"
#include "base/util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elementwise loops of unknown length that GCC's -O2 cost model leaves
 * scalar (the causal conv's taps, SwiGLU's division): BT_VEC lets it
 * vectorize them with a tail. x86-64's baseline vectors have no FMA, so a
 * product is still rounded before its add, a division is still a
 * division, and no sum is reassociated (that needs -fassociative-math):
 * every value keeps the scalar loop's bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define BT_VEC __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define BT_VEC
#endif

#define BT_CPU_MAX_HEAD_DIM 512   /* attention accumulates a head in a stack row */

struct bt_buf {
    void *p;                      /* 64-byte aligned */
    void *base;                   /* what calloc returned, when owned */
    size_t bytes;
    bool owned;                   /* false: a weight inside the model's mapping */
};

typedef struct cpu_ctx {
    bt_pool *pool;
    int n_threads;
    float *att;                   /* (n_threads, att_cap) attention scores scratch */
    size_t att_cap;
    bt_numerics_ctx *num;         /* the numerics ops' scratch, with the last profile handed in */
    bt_sweep_chunk *chunks;       /* matmul_stats: a decode output's swept chunks */
    size_t chunks_cap;
    char name[8];
} cpu_ctx;

#define CTX(be) ((cpu_ctx *)(be)->ctx)
#define F(b) ((float *)(b)->p)

/* Elementwise and per-row ops of a prefill over the pool: [0, n) cut into
 * one contiguous range per thread (rows for the per-row ops, so no row is
 * split). Each element or row runs the same code as serially, so the
 * results are the same bits; below `work` elements the dispatch would cost
 * more than it saves (decode) and the caller's thread does it all. */
typedef struct split_job {
    void (*fn)(void *ctx, size_t lo, size_t hi);
    void *ctx;
    size_t n;
} split_job;

static void split_worker(void *arg, int ith, int nth)
{
    const split_job *j = arg;
    size_t lo = j->n * (size_t)ith / (size_t)nth, hi = j->n * (size_t)(ith + 1) / (size_t)nth;
    if (lo < hi) j->fn(j->ctx, lo, hi);
}

#define SPLIT_MIN_WORK 32768

static void run_split(bt_backend *be, size_t n, size_t work, void (*fn)(void *, size_t, size_t), void *ctx)
{
    cpu_ctx *c = CTX(be);
    if (work < SPLIT_MIN_WORK || c->n_threads < 2 || n < 2) {
        if (n) fn(ctx, 0, n);
        return;
    }
    split_job j = { .fn = fn, .ctx = ctx, .n = n };
    bt_pool_run(c->pool, split_worker, &j);
}

static const char *cpu_name(bt_backend *be) { (void)be; return "cpu"; }

static int cpu_threads(bt_backend *be) { return CTX(be)->n_threads; }

static void cpu_free(bt_backend *be)
{
    if (!be) return;
    cpu_ctx *c = CTX(be);
    if (c) {
        bt_pool_free(c->pool);
        free(c->att);
        free(c->chunks);
        bt_numerics_ctx_free(c->num);
        free(c);
    }
    free(be);
}

static int cpu_buf_alloc(bt_backend *be, size_t bytes, bt_buf **out)
{
    (void)be;
    *out = NULL;
    bt_buf *b = calloc(1, sizeof(*b));
    /* calloc, not aligned_alloc + memset: a KV cache is large and mostly
     * untouched, and fresh pages come zeroed for free. 64 bytes more, so
     * the data can start on a cache line: bt_matmul would otherwise copy
     * every activation to an aligned buffer first (a serial memcpy, and
     * page faults, while the other threads wait). */
    void *base = b && bytes <= SIZE_MAX - 64 ? calloc(1, bytes + 64) : NULL;
    if (!base) {
        free(b);
        return bt_error(BT_ENOMEM, "out of memory for a %zu-byte buffer", bytes);
    }
    b->base = base;
    b->p = (void *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    b->bytes = bytes; b->owned = true;
    *out = b;
    return BT_OK;
}

static int cpu_buf_upload(bt_backend *be, const void *data, size_t bytes, bt_buf **out)
{
    (void)be;
    *out = NULL;
    bt_buf *b = calloc(1, sizeof(*b));
    if (!b) return bt_error(BT_ENOMEM, "out of memory");
    b->p = (void *)data; b->bytes = bytes; b->owned = false;
    *out = b;
    return BT_OK;
}

static void cpu_buf_free(bt_backend *be, bt_buf *b)
{
    (void)be;
    if (!b) return;
    if (b->owned) free(b->base);
    free(b);
}

static void *cpu_buf_host(bt_backend *be, bt_buf *b) { (void)be; return b ? b->p : NULL; }

static int cpu_buf_view(bt_backend *be, bt_buf *b, size_t off, size_t bytes, bt_buf **out)
{
    (void)be;
    *out = NULL;
    if (off * sizeof(float) > b->bytes || bytes > b->bytes - off * sizeof(float))
        return bt_error(BT_ERANGE, "cpu: a view of %zu bytes at float %zu is outside a %zu-byte buffer", bytes, off, b->bytes);
    bt_buf *v = calloc(1, sizeof *v);
    if (!v) return bt_error(BT_ENOMEM, "out of memory");
    v->p = (float *)b->p + off; v->bytes = bytes; v->owned = false;
    *out = v;
    return BT_OK;
}

static int cpu_set(bt_backend *be, bt_buf *b, size_t off, const float *src, size_t n)
{
    (void)be;
    if ((off + n) * sizeof(float) > b->bytes) return bt_error(BT_ERANGE, "cpu: write past the end of a buffer");
    memcpy(F(b) + off, src, n * sizeof(float));
    return BT_OK;
}

static int cpu_read(bt_backend *be, bt_buf *b, size_t off, size_t n, float *dst)
{
    (void)be;
    if ((off + n) * sizeof(float) > b->bytes) return bt_error(BT_ERANGE, "cpu: read past the end of a buffer");
    memcpy(dst, F(b) + off, n * sizeof(float));
    return BT_OK;
}

static int cpu_get_rows(bt_backend *be, int type, bt_buf *table, int64_t width, const int32_t *ids, int n,
                        bt_buf *out)
{
    (void)be;
    size_t rb = bt_dtype_row_size(type, width);
    for (int t = 0; t < n; t++)
        bt_dequant_row(type, (const char *)table->p + (size_t)ids[t] * rb, F(out) + (size_t)t * width, width);
    return BT_OK;
}

typedef struct rms_ctx {
    float *out;
    const float *x, *w;
    int n;
    float eps;
} rms_ctx;

BT_VEC static void rms_rows(void *v, size_t lo, size_t hi)
{
    const rms_ctx *r = v;
    int n = r->n;
    for (size_t t = lo; t < hi; t++) {
        const float *xr = r->x + t * (size_t)n;
        float *o = r->out + t * (size_t)n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / n + r->eps));
        for (int i = 0; i < n; i++) o[i] = xr[i] * scale * r->w[i];
    }
}

static int cpu_rmsnorm(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off, int T, int n, float eps)
{
    rms_ctx r = { .out = F(out), .x = F(x), .w = F(w) + w_off, .n = n, .eps = eps };
    run_split(be, (size_t)T, (size_t)T * (size_t)n, rms_rows, &r);
    return BT_OK;
}

static int cpu_matmul(bt_backend *be, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off,
                      int T, bt_buf *out)
{
    bt_matmul(CTX(be)->pool, type, W->p, rows, cols, F(x) + x_off, T, F(out));
    return BT_OK;
}

static int cpu_stats(bt_backend *be, bt_buf *b, size_t off, int rows, int width, int pos0, bt_tap_stats *out);

/* The context's chunk buffer, with room for n (NULL: no memory). */
static bt_sweep_chunk *chunk_room(cpu_ctx *c, size_t n)
{
    if (n > c->chunks_cap) {
        bt_sweep_chunk *p = realloc(c->chunks, n * sizeof(*p));
        if (!p) return NULL;
        c->chunks = p;
        c->chunks_cap = n;
    }
    return c->chunks;
}

/* A decode's output swept by the threads that wrote it (bt_matmul_swept),
 * its chunks folded here (bt_stats_from_chunks: cpu_stats' bits); any
 * other product, or one with a NaN or an Inf, is swept after. */
static int cpu_matmul_stats(bt_backend *be, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off,
                            int T, bt_buf *out, int pos0, bt_tap_stats *st)
{
    cpu_ctx *c = CTX(be);
    bt_sweep_chunk *ch = T == 1 && rows % 64 == 0 && rows <= INT32_MAX ? chunk_room(c, (size_t)rows / 64) : NULL;
    if (ch && bt_matmul_swept(c->pool, type, W->p, rows, cols, F(x) + x_off, T, F(out), ch)) {
        bt_stats_from_chunks(ch, T, (int)rows, pos0, st);
        return BT_OK;
    }
    if (!ch) bt_matmul(c->pool, type, W->p, rows, cols, F(x) + x_off, T, F(out));
    return cpu_stats(be, out, 0, T, (int)rows, pos0, st);
}

/* Rotate pairs of each head by cos/sin[pos][i]: interleaved (2i, 2i + 1)
 * for Llama, or NEOX (i, i + half), ggml's rope mode 2 (qwen2, qwen3). */
typedef struct rope_ctx {
    bt_buf *x, *cos_, *sin_;
    int n_heads, head_dim, pos0;
    bool neox;
} rope_ctx;

BT_VEC static void rope_rows(void *v, size_t lo, size_t hi)
{
    const rope_ctx *r = v;
    int half = r->head_dim / 2, width = r->n_heads * r->head_dim;
    int step = r->neox ? 1 : 2, off = r->neox ? half : 1;
    for (size_t t = lo; t < hi; t++) {
        const float *cs = F(r->cos_) + (size_t)(r->pos0 + (int)t) * half, *sn = F(r->sin_) + (size_t)(r->pos0 + (int)t) * half;
        for (int h = 0; h < r->n_heads; h++) {
            float *p = F(r->x) + t * width + h * r->head_dim;
            for (int i = 0; i < half; i++) {
                float *pa = p + i * step, *pb = pa + off;
                float a = *pa, b = *pb;
                *pa = a * cs[i] - b * sn[i];
                *pb = a * sn[i] + b * cs[i];
            }
        }
    }
}

static void rope_pairs(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cos_, bt_buf *sin_,
                       bool neox)
{
    rope_ctx r = { .x = x, .cos_ = cos_, .sin_ = sin_, .n_heads = n_heads, .head_dim = head_dim, .pos0 = pos0, .neox = neox };
    run_split(be, (size_t)T, (size_t)T * n_heads * head_dim, rope_rows, &r);
}

static int cpu_rope(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cos_, bt_buf *sin_)
{
    rope_pairs(be, x, T, n_heads, head_dim, pos0, cos_, sin_, false);
    return BT_OK;
}

static int cpu_rope_neox(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cos_,
                         bt_buf *sin_)
{
    rope_pairs(be, x, T, n_heads, head_dim, pos0, cos_, sin_, true);
    return BT_OK;
}

BT_VEC static int cpu_add_row(bt_backend *be, bt_buf *x, int T, int width, bt_buf *b, size_t b_off)
{
    (void)be;
    const float *bp = F(b) + b_off;
    for (int t = 0; t < T; t++) {
        float *xr = F(x) + (size_t)t * width;
        for (int i = 0; i < width; i++) xr[i] += bp[i];
    }
    return BT_OK;
}

static int cpu_kv_store(bt_backend *be, bt_buf *kc, bt_buf *vc, size_t off, bt_buf *k, bt_buf *v, size_t n)
{
    (void)be;
    memcpy(F(kc) + off, k->p, n * sizeof(float));
    memcpy(F(vc) + off, v->p, n * sizeof(float));
    return BT_OK;
}

typedef struct attn_job {
    const bt_attn_args *a;
    float *att;
    size_t att_stride;            /* floats of scratch per thread */
    size_t ctx;                   /* floats of one score row */
    int tq;                       /* query positions per prefill work item */
    _Atomic int next;             /* the next prefill work item to take */
} attn_job;

/* The sums of `cnt` (8, 4 or 1) rows ld floats apart, row k of len[k]
 * values, each in key order (one float chain per row, as the plain loop):
 * the chains run side by side up to the shortest row, so they overlap
 * instead of waiting on each other's additions, then each row finishes
 * its own chain. */
static inline __attribute__((always_inline)) void attn_row_sums(const float *x, size_t ld, int cnt, const int *len,
                                                                float *inv)
{
    float s[8] = { 0 };
    int m = len[0];
    for (int k = 1; k < cnt; k++) m = BT_MIN(m, len[k]);
    for (int p = 0; p < m; p++)
#pragma GCC unroll 8
        for (int k = 0; k < cnt; k++) s[k] += x[(size_t)k * ld + p];
    for (int k = 0; k < cnt; k++) {
        for (int p = m; p < len[k]; p++) s[k] += x[(size_t)k * ld + p];
        inv[k] = 1.0f / s[k];
    }
}

/* Softmax of nr score rows, ld floats apart, row r of len[r] scores, in
 * place: raw dots in, scaled here, then exp(s - max); inv[r] = 1/sum of
 * row r in key order. */
static void attn_softmax_rows(float *att, size_t ld, int nr, const int *len, float scale, float *inv)
{
    for (int r = 0; r < nr; r++) {
        float *x = att + (size_t)r * ld;
        bt_exp_sub_f32(x, len[r], bt_scale_max_f32(x, len[r], scale));   /* libm expf's bits */
    }
    int r = 0;
    for (; r + 8 <= nr; r += 8) attn_row_sums(att + (size_t)r * ld, ld, 8, len + r, inv + r);
    for (; r + 4 <= nr; r += 4) attn_row_sums(att + (size_t)r * ld, ld, 4, len + r, inv + r);
    for (; r < nr; r++) attn_row_sums(att + (size_t)r * ld, ld, 1, len + r, inv + r);
}

/* One query head at position pos: softmax over the scores in att, then the
 * weighted sum of value rows into out (bt_wsum_f32: the plain loop's bits,
 * the head in registers across positions). */
static void attn_head(float *att, int pos, float scale, const float *vc, int kv_dim, int hd, float *out)
{
    float inv;
    int n = pos + 1;
    attn_softmax_rows(att, 0, 1, &n, scale, &inv);
    float acc[BT_CPU_MAX_HEAD_DIM];
    memset(acc, 0, hd * sizeof(float));
    bt_wsum_f32(acc, att, inv, vc, kv_dim, pos + 1, hd);
    memcpy(out, acc, hd * sizeof(float));
}

/* Keys per block of the prefill tile: 64 keys of a 64-wide head are 16 KB
 * of K (then of V), which stay in L1 while every query of the tile uses
 * them. */
#define ATTN_KB 64

/* A paged cache (a->blocks): the cached row of position p, and how many
 * positions from p on are contiguous in the slab (to the end of its block).
 * Contiguous: p itself, and no limit. */
static inline size_t kv_row(const bt_attn_args *a, int p)
{
    return a->blocks ? (size_t)a->blocks[p / a->block_size] * a->block_size + p % a->block_size : (size_t)p;
}

static inline int kv_run(const bt_attn_args *a, int p, int want)
{
    return a->blocks ? BT_MIN(want, a->block_size - p % a->block_size) : want;
}

/* A prefill work item: query positions t0 .. t0+nt-1 and the `group` query
 * heads of KV head kvh, blocked over keys so each block of K and V is read
 * from memory once per tile instead of once per query (at a 4k context
 * the unblocked loop streamed 2 MB of cache per query and KV head). Every
 * score is still the bits of one bt_vec_dot, each row runs attn_softmax,
 * and the weighted sum keeps each lane's additions in key order (the
 * accumulator only goes through memory between blocks, which is exact),
 * so a head's output is the bits of attn_head's: blocking changes the
 * order of the loops, never of the arithmetic. */
static void attn_tile(const bt_attn_args *a, float *att, size_t ctx, int t0, int nt, int kvh)
{
    int hd = a->head_dim, kv_dim = a->n_kv_heads * hd, q_dim = a->n_heads * hd;
    int group = a->n_heads / a->n_kv_heads;
    const float *kc = F(a->k_cache) + a->cache_off + (size_t)kvh * hd;
    const float *vc = F(a->v_cache) + a->cache_off + (size_t)kvh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int last = a->pos0 + t0 + nt - 1;    /* the tile's longest row */
    for (int p0 = 0, kb; p0 <= last; p0 += kb) {
        kb = kv_run(a, p0, ATTN_KB);
        size_t r0 = kv_row(a, p0);
        for (int t = 0; t < nt; t++) {
            int pos = a->pos0 + t0 + t, np = BT_MIN(kb, pos + 1 - p0);
            if (np <= 0) continue;
            const float *q = F(a->q) + (size_t)(t0 + t) * q_dim + (size_t)kvh * group * hd;
            bt_dot_rows_multi_f32(kc + r0 * kv_dim, kv_dim, q, hd, group, hd, np,
                                  att + (size_t)t * group * ctx + p0, (int64_t)ctx);
        }
    }
    float inv[64 * 8];   /* nt * group <= tq * group, bounded by the caller */
    int len[64 * 8] = { 0 };
    for (int t = 0; t < nt; t++)
        for (int g = 0; g < group; g++) {
            len[t * group + g] = a->pos0 + t0 + t + 1;
            memset(F(a->out) + (size_t)(t0 + t) * q_dim + (size_t)(kvh * group + g) * hd, 0, hd * sizeof(float));
        }
    attn_softmax_rows(att, ctx, nt * group, len, scale, inv);
    for (int p0 = 0, kb; p0 <= last; p0 += kb) {
        kb = kv_run(a, p0, ATTN_KB);
        size_t r0 = kv_row(a, p0);
        for (int t = 0; t < nt; t++) {
            int pos = a->pos0 + t0 + t, np = BT_MIN(kb, pos + 1 - p0);
            if (np <= 0) continue;
            for (int g = 0; g < group; g++)
                bt_wsum_f32(F(a->out) + (size_t)(t0 + t) * q_dim + (size_t)(kvh * group + g) * hd,
                            att + (size_t)(t * group + g) * ctx + p0, inv[t * group + g],
                            vc + r0 * kv_dim, kv_dim, np, hd);
        }
    }
}

/* Work items: one (position, head) pair each for a single position (decode:
 * a few heads over the threads), one (tile of positions, KV head) each for
 * a batch (attn_tile). Either way every score is the bits of one
 * bt_vec_dot and each head runs the same softmax and sum, so a head's
 * output does not depend on the batch. */
static void attn_worker(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    const bt_attn_args *a = j->a;
    float *att = j->att + (size_t)ith * j->att_stride;
    if (a->T > 1) {
        /* Items taken in turn from a counter, the last tiles (the longest
         * rows) first, so the threads finish together however the host
         * slows one of them down. */
        int tiles = (a->T + j->tq - 1) / j->tq, items = tiles * a->n_kv_heads;
        for (int it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
            int tile = tiles - 1 - it / a->n_kv_heads, kvh = it % a->n_kv_heads, t0 = tile * j->tq;
            attn_tile(a, att, j->ctx, t0, BT_MIN(j->tq, a->T - t0), kvh);
        }
        return;
    }
    int hd = a->head_dim, kv_dim = a->n_kv_heads * hd, group = a->n_heads / a->n_kv_heads;
    const float *kc = F(a->k_cache) + a->cache_off, *vc = F(a->v_cache) + a->cache_off;
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = ith; h < a->n_heads; h += nth) {
        int pos = a->pos0, kvh = h / group;
        if (a->blocks) {   /* paged: the same dots and sums, one block's run at a time */
            float inv;
            int n = pos + 1;
            for (int p0 = 0, kb; p0 <= pos; p0 += kb) {
                kb = kv_run(a, p0, pos + 1 - p0);
                bt_dot_rows_f32(kc + kv_row(a, p0) * kv_dim + kvh * hd, kv_dim, F(a->q) + (size_t)h * hd, hd, kb, att + p0);
            }
            attn_softmax_rows(att, 0, 1, &n, scale, &inv);
            float acc[BT_CPU_MAX_HEAD_DIM];
            memset(acc, 0, hd * sizeof(float));
            for (int p0 = 0, kb; p0 <= pos; p0 += kb) {
                kb = kv_run(a, p0, pos + 1 - p0);
                bt_wsum_f32(acc, att + p0, inv, vc + kv_row(a, p0) * kv_dim + kvh * hd, kv_dim, kb, hd);
            }
            memcpy(F(a->out) + (size_t)h * hd, acc, hd * sizeof(float));
            continue;
        }
        /* SIMD score dots (the same bits as one bt_vec_dot each) */
        bt_dot_rows_f32(kc + kvh * hd, kv_dim, F(a->q) + (size_t)h * hd, hd, pos + 1, att);
        attn_head(att, pos, scale, vc + kvh * hd, kv_dim, hd, F(a->out) + (size_t)h * hd);
    }
}

/* gpt-oss's attention (a->sinks, a->window): one work item per (row,
 * head), taken in turn from a counter. Scores are the same one-row dots;
 * the softmax's max takes in the head's sink logit, whose exp(sink - max)
 * joins the sum after the keys' (ggml's soft_max with sinks); keys before
 * the window are neither scored nor summed. */
typedef struct sink_job {
    const bt_attn_args *a;
    float *att;
    size_t att_stride;
    _Atomic int next;
} sink_job;

static void sink_worker(void *arg, int ith, int nth)
{
    (void)nth;
    sink_job *j = arg;
    const bt_attn_args *a = j->a;
    float *att = j->att + (size_t)ith * j->att_stride;
    int hd = a->head_dim, kv_dim = a->n_kv_heads * hd, q_dim = a->n_heads * hd, group = a->n_heads / a->n_kv_heads;
    const float *kc = F(a->k_cache) + a->cache_off, *vc = F(a->v_cache) + a->cache_off;
    const float *sk = a->sinks ? F(a->sinks) + a->sinks_off : NULL;
    float scale = 1.0f / sqrtf((float)hd);
    int items = a->T * a->n_heads;
    for (int it; (it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
        int t = it / a->n_heads, h = it % a->n_heads, kvh = h / group, pos = a->pos0 + t;
        int lo = a->window > 0 ? BT_MAX(0, pos - a->window + 1) : 0, n = pos + 1 - lo;
        const float *q = F(a->q) + (size_t)t * q_dim + (size_t)h * hd;
        for (int p0 = lo, kb; p0 <= pos; p0 += kb) {
            kb = kv_run(a, p0, pos + 1 - p0);
            bt_dot_rows_f32(kc + kv_row(a, p0) * kv_dim + kvh * hd, kv_dim, q, hd, kb, att + (p0 - lo));
        }
        float m = bt_scale_max_f32(att, n, scale);
        if (sk && sk[h] > m) m = sk[h];
        bt_exp_sub_f32(att, n, m);
        float sum = 0;
        for (int p = 0; p < n; p++) sum += att[p];
        float es = sk ? expf(sk[h] - m) : 0.0f;
        sum += es;
        float inv = 1.0f / sum;
        float acc[BT_CPU_MAX_HEAD_DIM];
        memset(acc, 0, hd * sizeof(float));
        for (int p0 = lo, kb; p0 <= pos; p0 += kb) {
            kb = kv_run(a, p0, pos + 1 - p0);
            bt_wsum_f32(acc, att + (p0 - lo), inv, vc + kv_row(a, p0) * kv_dim + kvh * hd, kv_dim, kb, hd);
        }
        memcpy(F(a->out) + (size_t)t * q_dim + (size_t)h * hd, acc, hd * sizeof(float));
        if (a->sink_p) F(a->sink_p)[(size_t)t * a->n_heads + h] = es * inv;
    }
}

static int cpu_attention(bt_backend *be, const bt_attn_args *a)
{
    cpu_ctx *c = CTX(be);
    if (a->head_dim > BT_CPU_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "cpu: head dimension %d is above the supported %d", a->head_dim, BT_CPU_MAX_HEAD_DIM);
    size_t group = (size_t)BT_MAX(1, a->n_heads / BT_MAX(1, a->n_kv_heads));
    if (group > 64)
        return bt_error(BT_EUNSUPPORTED, "cpu: %zu query heads per KV head is above the supported 64", group);
    size_t ctx = (size_t)BT_MAX(a->ctx_len, a->pos0 + a->T);
    /* Score rows per thread: a tile of positions times the group's heads
     * for a batch, one row for decode. The tile shrinks so the scratch
     * stays near 1 MB per thread at long contexts (it only trades cache
     * reuse, never results). */
    int tq = 1;
    if (a->T > 1) {
        tq = (int)BT_MIN((size_t)8, BT_MAX((size_t)1, ((size_t)1 << 18) / (ctx * group)));
        tq = BT_MIN(tq, a->T);
    }
    if (a->sinks || a->window > 0 || a->sink_p) tq = 1, group = 1;   /* sink_worker: one score row */
    size_t need = (size_t)tq * group * ctx;
    if (need > c->att_cap) {
        /* grows to the largest context of the engines sharing this backend */
        float *na = realloc(c->att, (size_t)c->n_threads * need * sizeof(float));
        if (!na) return bt_error(BT_ENOMEM, "out of memory for attention scores (context %zu)", ctx);
        c->att = na;
        c->att_cap = need;
    }
    if (a->sinks || a->window > 0 || a->sink_p) {
        sink_job sj = { .a = a, .att = c->att, .att_stride = c->att_cap };
        atomic_init(&sj.next, 0);
        bt_pool_run(c->pool, sink_worker, &sj);
        return BT_OK;
    }
    attn_job job = { .a = a, .att = c->att, .att_stride = c->att_cap, .ctx = ctx, .tq = tq };
    atomic_init(&job.next, 0);
    bt_pool_run(c->pool, attn_worker, &job);
    return BT_OK;
}

typedef struct ew_ctx {
    float *o;
    const float *a, *b;
} ew_ctx;

/* expf(-g) through bt_exp_sub_f32 (libm's bits; -g - 0 is -g, a NaN only
 * quieted as expf would), 256 at a time: the scalar call was most of this
 * loop. Reads g[i] before writing o[i], so out may be gate. */
/* e[j] = expf(-x[j]) for j < k, libm's bits (exp_sub's -x - 0 is -x). */
BT_VEC static void exp_neg(float *e, const float *x, size_t k)
{
    for (size_t j = 0; j < k; j++) e[j] = -x[j];
    bt_exp_sub_f32(e, (int64_t)k, 0.0f);
}

BT_VEC static void swiglu_range(void *v, size_t lo, size_t hi)
{
    const ew_ctx *c = v;
    float *o = c->o;
    const float *g = c->a, *u = c->b;
    float e[256];
    for (size_t i = lo; i < hi; i += 256) {
        size_t k = BT_MIN((size_t)256, hi - i);
        exp_neg(e, g + i, k);
        for (size_t j = 0; j < k; j++) o[i + j] = g[i + j] / (1.0f + e[j]) * u[i + j];
    }
}

static int cpu_swiglu(bt_backend *be, bt_buf *out, bt_buf *gate, bt_buf *up, size_t n)
{
    ew_ctx c = { .o = F(out), .a = F(gate), .b = F(up) };
    run_split(be, n, n, swiglu_range, &c);
    return BT_OK;
}

typedef struct oai_ctx {
    float *o;
    const float *g, *u;
    float alpha, limit;
} oai_ctx;

/* expf(alpha * -x) through bt_exp_sub_f32 as in swiglu_range (the
 * product rounded in float first, as the scalar expression does). */
BT_VEC static void swiglu_oai_range(void *v, size_t lo, size_t hi)
{
    const oai_ctx *c = v;
    float xs[256], e[256];
    for (size_t i = lo; i < hi; i += 256) {
        size_t k = BT_MIN((size_t)256, hi - i);
        for (size_t j = 0; j < k; j++) {
            float g = c->g[i + j];
            xs[j] = c->limit < g ? c->limit : g;   /* std::min's comparison: a NaN passes through */
            e[j] = c->alpha * -xs[j];
        }
        bt_exp_sub_f32(e, (int64_t)k, 0.0f);
        for (size_t j = 0; j < k; j++) {
            float u = c->u[i + j];
            float y = u < -c->limit ? -c->limit : c->limit < u ? c->limit : u;   /* std::clamp's */
            c->o[i + j] = xs[j] / (1.0f + e[j]) * (y + 1.0f);
        }
    }
}

static int cpu_swiglu_oai(bt_backend *be, bt_buf *out, bt_buf *gate, bt_buf *up, size_t n, float alpha, float limit)
{
    oai_ctx c = { .o = F(out), .g = F(gate), .u = F(up), .alpha = alpha, .limit = limit };
    run_split(be, n, n, swiglu_oai_range, &c);
    return BT_OK;
}

BT_VEC static void add_range(void *v, size_t lo, size_t hi)
{
    const ew_ctx *c = v;
    for (size_t i = lo; i < hi; i++) c->o[i] += c->b[i];
}

static int cpu_add(bt_backend *be, bt_buf *x, bt_buf *y, size_t n)
{
    ew_ctx c = { .o = F(x), .b = F(y) };
    run_split(be, n, n, add_range, &c);
    return BT_OK;
}

static int cpu_scatter_add(bt_backend *be, bt_buf *dst, bt_buf *src, const int32_t *rows, const float *w, int n,
                           int width)
{
    (void)be;
    for (int i = 0; i < n; i++) {
        float *d = F(dst) + (size_t)rows[i] * width;
        const float *s = F(src) + (size_t)i * width;
        float wi = w[i];
        for (int j = 0; j < width; j++) d[j] += wi * s[j];
    }
    return BT_OK;
}

static void cpu_host_for(bt_backend *be, int n, void (*fn)(void *arg, int i, int ith), void *arg);

/* A tensor of several BT_STATS_SEG segments (a layer's recurrent state, a
 * prefill's activations) has its segments swept on the pool's threads,
 * then added in segment order: bt_stats_compute's bits (kernels.h). On
 * one thread the sweep was most of what taps cost a hybrid model's decode
 * step (its states: 4.7 M floats a step at Qwen3.5-0.8B's shapes). */
typedef struct stats_job {
    const float *x;
    int64_t n;
    bt_stats_part *parts;
} stats_job;

static void stats_item(void *arg, int k, int ith)
{
    (void)ith;
    const stats_job *j = arg;
    bt_stats_part_sweep(j->x, j->n, k, &j->parts[k]);
}

static int cpu_stats(bt_backend *be, bt_buf *b, size_t off, int rows, int width, int pos0, bt_tap_stats *out)
{
    int64_t n = (int64_t)rows * width, nseg = (n + BT_STATS_SEG - 1) / BT_STATS_SEG;
    bt_stats_part stack[64], *parts = NULL;
    if (nseg >= 2 && nseg <= INT32_MAX && CTX(be)->n_threads >= 2)
        parts = nseg <= 64 ? stack : malloc((size_t)nseg * sizeof(*parts));
    if (!parts) {   /* one segment, one thread (or no memory): the serial sweep, the same bits */
        bt_stats_compute(F(b) + off, rows, width, pos0, out);
        return BT_OK;
    }
    stats_job j = { .x = F(b) + off, .n = n, .parts = parts };
    cpu_host_for(be, (int)nseg, stats_item, &j);
    bt_stats_part acc;
    for (int64_t k = 0; k < nseg; k++) bt_stats_part_add(&acc, &parts[k], k == 0);
    bt_stats_part_finish(&acc, n, width, pos0, out);
    if (parts != stack) free(parts);
    return BT_OK;
}

static int cpu_inject(bt_backend *be, bt_buf *b, size_t off, int width, const bt_mutation *m, long *changed)
{
    (void)be;
    *changed = bt_mutation_apply_host(F(b) + off, width, m);
    return BT_OK;
}

static void cpu_kernel_name(bt_backend *be, int kop, int wtype, char *buf, size_t cap)
{
    (void)be;
    const char *simd = bt_kernels_simd();
    const char *tn = bt_dtype(wtype)->name;
    switch (kop) {
    case BT_KOP_GET_ROWS: snprintf(buf, cap, "dequant row %s/%s", tn ? tn : "?", simd); break;
    case BT_KOP_MATMUL: snprintf(buf, cap, "matmul %s/%s", tn ? tn : "?", simd); break;
    case BT_KOP_RMSNORM: snprintf(buf, cap, "rmsnorm (f32, scalar)"); break;
    case BT_KOP_ROPE: snprintf(buf, cap, "rope (f32, scalar)"); break;
    case BT_KOP_KV_STORE: snprintf(buf, cap, "kv store (memcpy)"); break;
    case BT_KOP_ATTENTION: snprintf(buf, cap, "attention (f32 dot %s, softmax)", simd); break;
    case BT_KOP_SWIGLU: snprintf(buf, cap, "silu(gate)*up (f32, expf %s)", simd); break;
    case BT_KOP_ADD: snprintf(buf, cap, "residual add (f32, scalar)"); break;
    case BT_KOP_ROPE_NEOX: snprintf(buf, cap, "rope neox (f32, scalar)"); break;
    case BT_KOP_ADD_ROW: snprintf(buf, cap, "bias add (f32, scalar)"); break;
    case BT_KOP_SCATTER_ADD: snprintf(buf, cap, "expert weighted sum (f32, scalar)"); break;
    case BT_KOP_COPY_COLS: snprintf(buf, cap, "column copy (f32)"); break;
    case BT_KOP_MUL_SIGMOID: snprintf(buf, cap, "x*sigmoid(gate) (f32, expf %s)", simd); break;
    case BT_KOP_GDN_GATES: snprintf(buf, cap, "gdn beta/decay: sigmoid, softplus (f32, scalar)"); break;
    case BT_KOP_SSM_CONV: snprintf(buf, cap, "causal depthwise conv1d + silu (f32, expf %s)", simd); break;
    case BT_KOP_GDN_RECUR: snprintf(buf, cap, "gated delta rule, token by token (f32 %s)", simd); break;
    case BT_KOP_ROPE_NEOX_PART: snprintf(buf, cap, "partial rope neox (f32, scalar)"); break;
    default: snprintf(buf, cap, "?"); break;
    }
}

/* ---- ABI 4: the gated delta net ops (hybrid models) ---- */

static int cpu_copy_cols(bt_backend *be, bt_buf *dst, bt_buf *src, int T, int src_width, int col0, int n_seg,
                         int seg_len, int seg_stride)
{
    (void)be;
    for (int t = 0; t < T; t++) {
        const float *s = F(src) + (size_t)t * src_width + col0;
        float *d = F(dst) + (size_t)t * n_seg * seg_len;
        for (int g = 0; g < n_seg; g++) memcpy(d + (size_t)g * seg_len, s + (size_t)g * seg_stride, (size_t)seg_len * sizeof(float));
    }
    return BT_OK;
}

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* x *= sigmoid(g), expf(-g) through bt_exp_sub_f32 (libm's bits). */
BT_VEC static int cpu_mul_sigmoid(bt_backend *be, bt_buf *x, bt_buf *g, size_t n)
{
    (void)be;
    float *xp = F(x);
    const float *gp = F(g);
    float e[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = BT_MIN((size_t)256, n - i);
        exp_neg(e, gp + i, k);
        for (size_t j = 0; j < k; j++) xp[i + j] *= 1.0f / (1.0f + e[j]);
    }
    return BT_OK;
}

static int cpu_gdn_gates(bt_backend *be, bt_buf *beta, bt_buf *alpha, bt_buf *vec, size_t a_off, size_t dt_off, int T,
                         int nv)
{
    (void)be;
    const float *a = F(vec) + a_off, *dt = F(vec) + dt_off;
    for (int t = 0; t < T; t++) {
        float *b = F(beta) + (size_t)t * nv, *al = F(alpha) + (size_t)t * nv;
        for (int h = 0; h < nv; h++) {
            b[h] = sigmoidf_(b[h]);
            float x = al[h] + dt[h];
            float sp = x > 20.0f ? x : log1pf(expf(x));
            al[h] = sp * a[h];
        }
    }
    return BT_OK;
}

/* The causal conv over blocks of channels, host_for's items (a channel's
 * sum is its own: the bits do not depend on who runs it). Per token, the
 * block's sums run as vectors over channels, each channel's K products
 * added in k order from 0.0f (the scalar loop's roundings), then SiLU as
 * acc / (1 + expf(-acc)) with the exact SIMD expf (exp.c: libm's bits;
 * expf(-acc - 0) is expf(-acc)). The scalar SiLU's libm call per channel
 * was most of the op: 71 of 922 ms of a 120-token Qwen3.5-0.8B prefill. */
typedef struct conv_job {
    float *o;
    const float *st, *w, *xp;
    int T, C, K;
} conv_job;

#define CONV_BLOCK 256
#define CONV_MAX_K 16   /* the model loader's bound on ssm.conv_kernel */

BT_VEC static void conv_item(void *arg, int b, int ith)
{
    (void)ith;
    const conv_job *j = arg;
    int T = j->T, C = j->C, K = j->K, c0 = b * CONV_BLOCK, n = BT_MIN(C, c0 + CONV_BLOCK) - c0;
    float acc[CONV_BLOCK], e[CONV_BLOCK], wt[CONV_MAX_K][CONV_BLOCK];
    for (int k = 0; k < K; k++)   /* the block's taps, k-major: unit-stride loads below */
        for (int i = 0; i < n; i++) wt[k][i] = j->w[(size_t)(c0 + i) * K + k];
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < n; i++) acc[i] = 0.0f;
        for (int k = 0; k < K; k++) {
            int r = t + k;   /* row in [state (K-1 rows), x (T rows)] */
            const float *in = r < K - 1 ? j->st + (size_t)r * C + c0 : j->xp + (size_t)(r - (K - 1)) * C + c0;
            for (int i = 0; i < n; i++) acc[i] += in[i] * wt[k][i];
        }
        exp_neg(e, acc, (size_t)n);
        float *o = j->o + (size_t)t * C + c0;
        for (int i = 0; i < n; i++) o[i] = acc[i] / (1.0f + e[i]);
    }
}

static int cpu_ssm_conv(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *state, size_t state_off, bt_buf *vec,
                        size_t w_off, int T, int C, int K)
{
    if (K > CONV_MAX_K) return bt_error(BT_EUNSUPPORTED, "a causal conv kernel of %d (at most %d)", K, CONV_MAX_K);
    float *st = F(state) + state_off;
    const float *xp = F(x);
    conv_job j = { .o = F(out), .st = st, .w = F(vec) + w_off, .xp = xp, .T = T, .C = C, .K = K };
    cpu_host_for(be, (C + CONV_BLOCK - 1) / CONV_BLOCK, conv_item, &j);
    /* the new state: the last K-1 rows of [state, x] */
    int keep = K - 1;
    if (T >= keep) {
        memcpy(st, xp + (size_t)(T - keep) * C, (size_t)keep * C * sizeof(float));
    } else {
        memmove(st, st + (size_t)T * C, (size_t)(keep - T) * C * sizeof(float));
        memcpy(st + (size_t)(keep - T) * C, xp, (size_t)T * C * sizeof(float));
    }
    return BT_OK;
}

/* host_for: the items taken in turn by the pool's threads. */
typedef struct host_job {
    void (*fn)(void *arg, int i, int ith);
    void *arg;
    int n;
    _Atomic int next;
} host_job;

static void host_worker(void *arg, int ith, int nth)
{
    (void)nth;
    host_job *j = arg;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n;) j->fn(j->arg, i, ith);
}

static void cpu_host_for(bt_backend *be, int n, void (*fn)(void *arg, int i, int ith), void *arg)
{
    host_job j = { .fn = fn, .arg = arg, .n = n };
    atomic_init(&j.next, 0);
    if (n == 1) fn(arg, 0, 0);
    else bt_pool_run(CTX(be)->pool, host_worker, &j);
}

/* The delta rule over T tokens, value heads taken in turn by the pool's
 * threads (a head's state is its own across the tokens; a head's tokens
 * run in order). Per head and token, with S the head's dk x dv state:
 * S *= exp(g); sk = sum_i k_i S_i; u = (v - sk) * beta; S_i += k_i u;
 * out = sum_i (q_i / sqrt(dk)) S_i, the sums over i in order, each product
 * rounded then added: bt_gdn_seq_f32 gives the bits of that plain loop in
 * every kernel variant, for a block of tokens at a time (on AVX-512 a
 * block of columns runs through them with one sweep of the rows a token),
 * so neither the thread count, the SIMD width nor the block changes a bit. */
typedef struct gdn_job {
    float *out, *state;
    const float *q, *k, *v, *g, *beta;
    size_t state_off;
    int T, nk, nv, dk, dv, grouped;
    _Atomic int next;
    /* gdn_recur_stats: work items are the state's BT_STATS_SEG segments,
     * hps heads each, and each one's statistics part is swept right after
     * its heads ran (parts[k]); else items are heads and parts is NULL */
    bt_stats_part *parts;
    int hps;
} gdn_job;

/* Tokens per kernel call: their scaled queries on the worker's stack (dk
 * <= 512: 32 KB). The state carries from one block to the next. */
#define GDN_TB 16

static void gdn_head(gdn_job *j, int h, float *qs, float *dec, float *beta)
{
    int nk = j->nk, nv = j->nv, dk = j->dk, dv = j->dv;
    const float scale = 1.0f / sqrtf((float)dk);
    int hk = j->grouped ? h / (nv / nk) : h % nk;
    float *S = j->state + j->state_off + (size_t)h * dk * dv;
    for (int t0 = 0; t0 < j->T; t0 += GDN_TB) {
        int tb = BT_MIN(GDN_TB, j->T - t0);
        for (int b = 0; b < tb; b++) {
            size_t t = (size_t)(t0 + b);
            const float *qh = j->q + t * nk * dk + (size_t)hk * dk;
            dec[b] = expf(j->g[t * nv + h]);
            beta[b] = j->beta[t * nv + h];
            for (int i = 0; i < dk; i++) qs[(size_t)b * dk + i] = qh[i] * scale;
        }
        size_t t = (size_t)t0;
        bt_gdn_seq_f32(S, dk, dv, 0, dv, tb, dec, j->k + t * nk * dk + (size_t)hk * dk, (int64_t)nk * dk,
                       j->v + t * nv * dv + (size_t)h * dv, (int64_t)nv * dv, beta, qs, dk,
                       j->out + t * nv * dv + (size_t)h * dv, (int64_t)nv * dv);
    }
}

static void gdn_worker(void *arg, int ith, int nth)
{
    (void)ith; (void)nth;
    gdn_job *j = arg;
    float qs[GDN_TB * 512], dec[GDN_TB], beta[GDN_TB];
    if (!j->parts) {
        for (int h; (h = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->nv;)
            gdn_head(j, h, qs, dec, beta);
        return;
    }
    /* a segment's heads, then its sweep while the state is in this
     * thread's cache: cpu_stats' segment sweep, so its bits */
    int64_t n = (int64_t)j->nv * j->dk * j->dv;
    for (int k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->nv / j->hps;) {
        for (int h = k * j->hps; h < (k + 1) * j->hps; h++) gdn_head(j, h, qs, dec, beta);
        bt_stats_part_sweep(j->state + j->state_off, n, k, &j->parts[k]);
    }
}

static void gdn_run(bt_backend *be, bt_buf *out, bt_buf *q, bt_buf *k, bt_buf *v, bt_buf *g, bt_buf *beta,
                    bt_buf *state, size_t state_off, int T, int nk, int nv, int dk, int dv, int grouped,
                    bt_stats_part *parts, int hps)
{
    gdn_job j = { .out = F(out), .state = F(state), .q = F(q), .k = F(k), .v = F(v), .g = F(g), .beta = F(beta),
                  .state_off = state_off, .T = T, .nk = nk, .nv = nv, .dk = dk, .dv = dv, .grouped = grouped,
                  .parts = parts, .hps = hps };
    atomic_init(&j.next, 0);
    bt_pool_run(CTX(be)->pool, gdn_worker, &j);
}

static int cpu_gdn_recur(bt_backend *be, bt_buf *out, bt_buf *q, bt_buf *k, bt_buf *v, bt_buf *g, bt_buf *beta,
                         bt_buf *state, size_t state_off, int T, int nk, int nv, int dk, int dv, int grouped)
{
    if (dk > 512) return bt_error(BT_EUNSUPPORTED, "gated delta net key heads of %d (at most 512)", dk);
    gdn_run(be, out, q, k, v, g, beta, state, state_off, T, nk, nv, dk, dv, grouped, NULL, 0);
    return BT_OK;
}

/* The state's statistics where it was written: when a BT_STATS_SEG
 * segment holds whole heads and there are segments enough for every
 * thread, each thread runs a segment's heads and sweeps that segment
 * before the next (bt_stats_part_sweep, what cpu_stats does per segment,
 * so its bits: the segments then added in order); otherwise the delta
 * rule, then cpu_stats. */
static int cpu_gdn_recur_stats(bt_backend *be, bt_buf *out, bt_buf *q, bt_buf *k, bt_buf *v, bt_buf *g, bt_buf *beta,
                               bt_buf *state, size_t state_off, int T, int nk, int nv, int dk, int dv, int grouped,
                               bt_tap_stats *st)
{
    if (dk > 512) return bt_error(BT_EUNSUPPORTED, "gated delta net key heads of %d (at most 512)", dk);
    int64_t per = (int64_t)dk * dv, hps = per > 0 && BT_STATS_SEG % per == 0 ? BT_STATS_SEG / per : 0;
    int nseg = hps && nv % hps == 0 ? (int)(nv / hps) : 0;
    bt_stats_part stack[64];
    if (nseg < CTX(be)->n_threads || nseg > 64 || (int64_t)nv * dk > INT32_MAX) {
        gdn_run(be, out, q, k, v, g, beta, state, state_off, T, nk, nv, dk, dv, grouped, NULL, 0);
        return cpu_stats(be, state, state_off, nv * dk, dv, 0, st);
    }
    gdn_run(be, out, q, k, v, g, beta, state, state_off, T, nk, nv, dk, dv, grouped, stack, (int)hps);
    bt_stats_part acc;
    for (int s = 0; s < nseg; s++) bt_stats_part_add(&acc, &stack[s], s == 0);
    bt_stats_part_finish(&acc, (int64_t)nv * dk * dv, dv, 0, st);
    return BT_OK;
}

static int cpu_rope_neox_part(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int n_rot, int pos0,
                              bt_buf *cos_, bt_buf *sin_)
{
    (void)be;
    int half = n_rot / 2, width = n_heads * head_dim;
    for (int t = 0; t < T; t++) {
        const float *cs = F(cos_) + (size_t)(pos0 + t) * half, *sn = F(sin_) + (size_t)(pos0 + t) * half;
        for (int h = 0; h < n_heads; h++) {
            float *p = F(x) + (size_t)t * width + (size_t)h * head_dim;
            for (int i = 0; i < half; i++) {
                float a = p[i], b = p[i + half];
                p[i] = a * cs[i] - b * sn[i];
                p[i + half] = a * sn[i] + b * cs[i];
            }
        }
    }
    return BT_OK;
}

/* ---- numerics ops (--numerics): kernels/cpu/numerics.c on the host buffers,
 * with this backend's pool ---- */

/* The ops below compute on host memory: a vtable that borrows them without
 * host buffers (no buf_host, as a device's) cannot run a profile with them. */
static int cpu_num_check(bt_backend *be, const bt_numerics *n)
{
    (void)n;
    if (!be->iface->buf_host)
        return bt_error(BT_EUNSUPPORTED, "--numerics: %s has no host buffers for the CPU's numerics ops; "
                        "a numerics profile runs there on the CPU only", bt_backend_name(be));
    return BT_OK;
}

static bt_numerics_ctx *cpu_num_ctx(bt_backend *be, const bt_numerics *n)
{
    cpu_ctx *c = CTX(be);
    return bt_numerics_ctx_use(&c->num, n, c->pool) == BT_OK ? c->num : NULL;
}

static int cpu_num_round(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt)
{
    (void)be;
    if ((off + rows * width) * sizeof(float) > b->bytes) return bt_error(BT_ERANGE, "cpu: rounding past the end of a buffer");
    for (size_t r = 0; r < rows; r++) bt_num_round(fmt, F(b) + off + r * width, width);
    return BT_OK;
}

static int cpu_num_matmul(bt_backend *be, const bt_numerics *n, int type, bt_buf *W, int64_t rows, int64_t cols,
                          bt_buf *x, size_t x_off, int T, bt_buf *out)
{
    bt_numerics_ctx *nc = cpu_num_ctx(be, n);
    if (!nc) return BT_ENOMEM;
    bt_numerics_matmul(nc, CTX(be)->pool, type, W->p, rows, cols, F(x) + x_off, T, F(out));
    return BT_OK;
}

static int cpu_num_rmsnorm(bt_backend *be, const bt_numerics *n, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off,
                           int T, int width, float eps)
{
    bt_numerics_ctx *nc = cpu_num_ctx(be, n);
    if (!nc) return BT_ENOMEM;
    bt_numerics_rmsnorm(nc, F(out), F(x), F(w) + w_off, T, width, eps);
    return BT_OK;
}

static int cpu_num_attention(bt_backend *be, const bt_numerics *n, const bt_attn_args *a)
{
    if (a->blocks) return bt_error(BT_EUNSUPPORTED, "cpu: numerics profiles over a paged KV cache are not supported");
    if (a->head_dim > BT_NUMERICS_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "--numerics: attention heads of %d values are above the supported %d",
                        a->head_dim, BT_NUMERICS_MAX_HEAD_DIM);
    bt_numerics_ctx *nc = cpu_num_ctx(be, n);
    if (!nc) return BT_ENOMEM;
    bt_numerics_attention(nc, &(bt_numerics_attn){ .q = F(a->q), .ctx = F(a->out), .T = a->T, .pos0 = a->pos0,
        .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .hd = a->head_dim,
        .kc = F(a->k_cache) + a->cache_off, .vc = F(a->v_cache) + a->cache_off });
    return BT_OK;
}

static const struct bt_backend_i cpu_iface = {
    .name = cpu_name,
    .describe = NULL,
    .free = cpu_free,
    .threads = cpu_threads,
    .buf_alloc = cpu_buf_alloc,
    .buf_upload = cpu_buf_upload,
    .buf_free = cpu_buf_free,
    .buf_host = cpu_buf_host,
    .buf_view = cpu_buf_view,
    .set = cpu_set,
    .read = cpu_read,
    .sync = NULL,                 /* every op has finished when it returns */
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .stats = cpu_stats,
    .inject = cpu_inject,
    .kernel_name = cpu_kernel_name,
    .rope_neox = cpu_rope_neox,
    .add_row = cpu_add_row,
    .scatter_add = cpu_scatter_add,
    .num_check = cpu_num_check,
    .num_round = cpu_num_round,
    .num_matmul = cpu_num_matmul,
    .num_rmsnorm = cpu_num_rmsnorm,
    .num_attention = cpu_num_attention,
    .copy_cols = cpu_copy_cols,
    .mul_sigmoid = cpu_mul_sigmoid,
    .gdn_gates = cpu_gdn_gates,
    .ssm_conv = cpu_ssm_conv,
    .gdn_recur = cpu_gdn_recur,
    .gdn_recur_stats = cpu_gdn_recur_stats,
    .matmul_stats = cpu_matmul_stats,
    .host_for = cpu_host_for,
    .rope_neox_part = cpu_rope_neox_part,
    .attention_sinks = cpu_attention,
    .swiglu_oai = cpu_swiglu_oai,
};

int bt_backend_cpu_new(int n_threads, bt_backend **out)
{
    *out = NULL;
    if (n_threads <= 0) n_threads = bt_pool_default_threads();
    bt_kernels_init();
    bt_backend *be = calloc(1, sizeof(*be));
    cpu_ctx *c = calloc(1, sizeof(*c));
    if (!be || !c) { free(be); free(c); return bt_error(BT_ENOMEM, "out of memory"); }
    be->iface = &cpu_iface;
    be->ctx = c;
    c->n_threads = n_threads;
    c->pool = bt_pool_new(n_threads);
    if (!c->pool) { cpu_free(be); return bt_error(BT_ENOMEM, "cannot start %d threads", n_threads); }
    c->n_threads = bt_pool_threads(c->pool);
    *out = be;
    return BT_OK;
}
