/* matmul.c - threaded matrix products and the memory bandwidth probe.
 *
 * Decode (T == 1) is a matrix-vector product bound by memory bandwidth:
 * each thread streams a contiguous band of rows through the quantized dot,
 * four rows per call where the variant has a dot4q kernel.
 * Prefill (T > 1) dequantizes four rows at a time (eight where the variant
 * has the 8x3 tile) into a small per-thread buffer (it stays in L1/L2) and
 * takes their f32 dots with two (three) tokens at a time, so each weight is
 * read from memory and decoded once per call, not T times; rows of 2,048
 * columns and more go panel by panel (mm_rows_panels).
 *
 * Batch invariance: every kernel used here computes a (row, token) dot in
 * its variant's one canonical order (kernels_impl.h), so out[t*rows + r] is
 * bit-identical whatever T is, where the token sits in the batch, how rows
 * fall into 4-row tiles and how threads split them, and equal to what T = 1
 * gives. Speculative decoding and `bisect --reference` rely on it. */
#include <math.h>
#include <stdatomic.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "kernels_impl.h"
#include "base/util.h"

struct mm_job {
    const bt_kvariant *kv;
    int type;
    const uint8_t *W;
    size_t row_bytes;
    int64_t rows, cols;
    const float *x;
    int T;
    float *out;
    int64_t chunk;              /* rows per work item, a multiple of 8 */
    _Atomic int64_t next;       /* the next work item to take */
    bt_sweep_chunk *swept;      /* bt_matmul_swept: out's 64-row chunks */
    _Atomic bool nonfinite;     /* ... and one was not finite */
};

/* Decode: rows [r0, r1) of thread ith, bands a multiple of 4 rows. */
static void band(int64_t rows, int ith, int nth, int64_t *r0, int64_t *r1)
{
    int64_t chunk = (rows + nth - 1) / nth;
    chunk = (chunk + 3) & ~(int64_t)3;
    *r0 = BT_MIN(rows, chunk * ith);
    *r1 = BT_MIN(rows, *r0 + chunk);
}

/* Prefill: work items of `chunk` rows, about eight per thread, taken in turn from
 * an atomic counter: a thread that the host slowed down (a timer tick, a
 * neighbour on the core) takes fewer items instead of making the others
 * wait at the end of the product, which with equal static bands cost
 * some 5-10% of prefill in spinning. Items are multiples of 8 rows, so a
 * prefill tile never straddles two, and which thread computes a row never
 * changes its bits (see above). */
static int64_t mm_chunk(int64_t rows, int nth)
{
    int64_t c = (rows + 8 * nth - 1) / (8 * nth);
    return BT_MAX((int64_t)8, (c + 7) & ~(int64_t)7);
}

static void mm_decode(const struct mm_job *j, int64_t r0, int64_t r1)
{
    bt_dot_fn dot = j->kv->dot[j->type];
    bt_dot4q_fn dot4 = j->kv->dot4q[j->type];
    int64_t r = r0;
    if (dot4)
        for (; r + 4 <= r1; r += 4)
            dot4(j->W + r * j->row_bytes, j->row_bytes, j->x, j->cols, j->out + r);
    for (; r < r1; r++)
        j->out[r] = dot(j->W + r * j->row_bytes, j->x, j->cols);
}

/* Every token against rows [r0, r1) whose f32 values start at w (row
 * stride ldw floats). A 4x2 tile, a 4x1 tile or a lone row all give a
 * (row, token) pair the same bits, as does the type's own dot on the raw
 * row (kernels_impl.h). */
static void mm_rows_f32(const struct mm_job *j, const float *w, int64_t ldw, int64_t r0, int64_t nr)
{
    float o[8];
    int64_t cols = j->cols, rows = j->rows;
    for (int t = 0; t < j->T;) {
        const float *xt = j->x + (int64_t)t * cols;
        float *ot = j->out + (int64_t)t * rows + r0;
        if (nr == 4 && t + 1 < j->T) {
            j->kv->dot4x2_f32(w, ldw, xt, cols, cols, o);
            memcpy(ot, o, 4 * sizeof(float));
            memcpy(ot + rows, o + 4, 4 * sizeof(float));
            t += 2;
        } else if (nr == 4) {
            j->kv->dot4_f32(w, ldw, xt, cols, o);
            memcpy(ot, o, 4 * sizeof(float));
            t++;
        } else {
            for (int64_t k = 0; k < nr; k++)
                ot[k] = j->kv->dot[BT_DT_F32](w + k * ldw, xt, cols);
            t++;
        }
    }
}

/* Eight rows (f32 at w, stride ldw) against every token: 8x3 tiles, the
 * one or two tokens left over through the 4-row path. */
static void mm_rows8_f32(const struct mm_job *j, const float *w, int64_t ldw, int64_t r0)
{
    float o[24];
    int64_t cols = j->cols, rows = j->rows;
    int t = 0;
    for (; t + 3 <= j->T; t += 3) {
        j->kv->dot8x3_f32(w, ldw, j->x + (int64_t)t * cols, cols, cols, o);
        for (int k = 0; k < 3; k++)
            memcpy(j->out + (int64_t)(t + k) * rows + r0, o + 8 * k, 8 * sizeof(float));
    }
    if (t < j->T) {
        struct mm_job rest = *j;
        rest.x = j->x + (int64_t)t * cols;
        rest.out = j->out + (int64_t)t * rows;
        rest.T = j->T - t;
        mm_rows_f32(&rest, w, ldw, r0, 4);
        mm_rows_f32(&rest, w + 4 * ldw, ldw, r0 + 4, 4);
    }
}

/* Wide rows (ffn_down of a 1024-wide model: 3584 columns): four f32 rows
 * and a token pair no longer fit in L1, nor every token's row in L2, and
 * the 4x2 tile, which streams all the tokens past every four rows, ran
 * from L2 and L3 at half its speed (1024 x 3584 Q4_K, 120 tokens, 2
 * threads: 105 GFLOP/s against 190 for 3584 x 1024). So wide rows go by
 * panels of MM_PANEL columns: for a block of MM_TB tokens (their panel in
 * L2), for each panel, every four rows of the item (their panel in L1)
 * meet every token pair through the variant's panel tile (dot4x2p_f32),
 * whose accumulators wait in a per-thread buffer between panels. The chunk
 * order of each (row, token) is the whole row's: the same bits. */
#define MM_PANEL 1024
#define MM_TB 128                 /* tokens per block: 128 x 4 KB of panel */
#define MM_PANEL_ROWS 16          /* rows per work item (a multiple of 8) */

static bool mm_panelled(const struct mm_job *j)
{
    return j->kv->dot4x2p_f32 && j->cols >= 2 * MM_PANEL && j->T >= 2;
}

/* Rows [r0, r1) (at most MM_PANEL_ROWS) whose f32 values are at w (row
 * stride ldw) against every token; acc holds MM_PANEL_ROWS / 4 x MM_TB / 2
 * tiles of 256 floats. */
static void mm_rows_panels(const struct mm_job *j, const float *w, int64_t ldw, int64_t r0, int64_t r1, float *acc)
{
    int64_t cols = j->cols, rows = j->rows, nr = r1 - r0, g4 = nr / 4;
    float o[8];
    for (int t0 = 0; t0 < j->T; t0 += MM_TB) {
        int tb = BT_MIN(MM_TB, j->T - t0), pairs = tb / 2;
        for (int64_t c0 = 0; c0 < cols; c0 += MM_PANEL) {
            int64_t n = BT_MIN((int64_t)MM_PANEL, cols - c0);
            bool last = c0 + n == cols;
            for (int64_t g = 0; g < g4; g++)
                for (int p = 0; p < pairs; p++) {
                    int t = t0 + 2 * p;
                    j->kv->dot4x2p_f32(w + 4 * g * ldw + c0, ldw, j->x + (int64_t)t * cols + c0, cols, n,
                                       acc + ((size_t)g * (MM_TB / 2) + p) * 256, c0 == 0, last ? o : NULL);
                    if (last) {
                        float *ot = j->out + (int64_t)t * rows + r0 + 4 * g;
                        memcpy(ot, o, 4 * sizeof(float));
                        memcpy(ot + rows, o + 4, 4 * sizeof(float));
                    }
                }
        }
        if (tb % 2) {
            /* the block's odd token: whole rows (the same bits) */
            int t = t0 + tb - 1;
            for (int64_t g = 0; g < g4; g++) {
                j->kv->dot4_f32(w + 4 * g * ldw, ldw, j->x + (int64_t)t * cols, cols, o);
                memcpy(j->out + (int64_t)t * rows + r0 + 4 * g, o, 4 * sizeof(float));
            }
        }
    }
    /* rows past the last four (a matrix of rows not a multiple of 4) */
    for (int64_t r = g4 * 4; r < nr; r++)
        for (int t = 0; t < j->T; t++)
            j->out[(int64_t)t * rows + r0 + r] = j->kv->dot[BT_DT_F32](w + r * ldw, j->x + (int64_t)t * cols, cols);
}

/* Rows per prefill tile: eight when the variant has the 8x3 tile, there
 * are tokens enough to fill it and eight rows plus three tokens stay in
 * L1 (any tile gives a pair the same bits). Single thread, q4_0, 128
 * tokens: 576 columns 0.024 -> 0.021 ns per weight-token; at 1536 columns
 * the 48 KB of rows spill and the 4x2 tile is twice as fast. */
static int mm_group(const struct mm_job *j)
{
    return j->kv->dot8x3_f32 && j->T >= 3 && j->cols <= 768 ? 8 : 4;
}

/* Rows [r, r + nr) as f32 in buf, row after row (f32 rows copied). */
static void mm_rows_to_f32(const struct mm_job *j, int64_t r, int64_t nr, float *buf)
{
    for (int64_t k = 0; k < nr; k++) {
        const uint8_t *src = j->W + (r + k) * j->row_bytes;
        if (j->type == BT_DT_F32)
            memcpy(buf + k * j->cols, src, (size_t)j->cols * sizeof(float));
        else
            j->kv->dequant[j->type](src, buf + k * j->cols, j->cols);
    }
}

static void mm_prefill(const struct mm_job *j, int64_t r0, int64_t r1, float *buf, float *acc)
{
    int group = mm_group(j);
    if (acc) {
        /* wide rows: the item's rows as f32 in buf (for f32 rows an
         * aligned copy, as below), then panel by panel */
        mm_rows_to_f32(j, r0, r1 - r0, buf);
        mm_rows_panels(j, buf, j->cols, r0, r1, acc);
        return;
    }
    if (j->type == BT_DT_F32) {
        /* GGUF aligns tensors to 32 bytes: a 64-byte load from a row that
         * is not 64-aligned straddles two lines on every chunk, which cost
         * a quarter of f32 prefill. Copying the 4 rows (reused by every
         * token) into the aligned buffer is cheap; the values, hence the
         * bits, are the same. */
        for (int64_t r = r0; r < r1;) {
            int64_t nr = r1 - r >= group ? group : BT_MIN(4, r1 - r);
            const float *w = (const float *)(j->W + r * j->row_bytes);
            if (buf && j->T > 2 && ((uintptr_t)w % 64 || j->row_bytes % 64)) {
                for (int64_t k = 0; k < nr; k++)
                    memcpy(buf + k * j->cols, w + k * j->cols, (size_t)j->cols * sizeof(float));
                w = buf;
            }
            if (nr == 8)
                mm_rows8_f32(j, w, j->cols, r);
            else
                mm_rows_f32(j, w, j->cols, r, nr);
            r += nr;
        }
        return;
    }
    if (!buf) {
        /* Slow but correct (and the same bits): no buffer, so decode each
         * row per token. */
        bt_dot_fn dot = j->kv->dot[j->type];
        for (int t = 0; t < j->T; t++)
            for (int64_t r = r0; r < r1; r++)
                j->out[(int64_t)t * j->rows + r] =
                    dot(j->W + r * j->row_bytes, j->x + (int64_t)t * j->cols, j->cols);
        return;
    }
    for (int64_t r = r0; r < r1;) {
        int64_t nr = r1 - r >= group ? group : BT_MIN(4, r1 - r);
        mm_rows_to_f32(j, r, nr, buf);
        if (nr == 8)
            mm_rows8_f32(j, buf, j->cols, r);
        else
            mm_rows_f32(j, buf, j->cols, r, nr);
        r += nr;
    }
}

static void mm_worker(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    if (j->T == 1) {
        /* decode streams memory: one long band per thread keeps the
         * prefetchers on it (items cost 5% of decode) */
        int64_t r0, r1;
        band(j->rows, ith, nth, &r0, &r1);
        if (r0 < r1)
            mm_decode(j, r0, r1);
        int64_t c0 = (r0 + 63) / 64, c1 = r1 / 64;   /* the chunks inside the band */
        if (j->swept && c0 < c1 && bt_sweep_chunks_f32(j->out + c0 * 64, c1 - c0, j->swept + c0) < c1 - c0)
            atomic_store_explicit(&j->nonfinite, true, memory_order_relaxed);
        return;
    }
    bool panels = mm_panelled(j);
    float *buf = aligned_alloc(64, ((size_t)j->cols * (panels ? MM_PANEL_ROWS : mm_group(j)) * sizeof(float) + 63) &
                                       ~(size_t)63);
    /* the panel tiles' accumulators (NULL: whole-row tiles, the same bits,
     * in a buffer that holds them too) */
    float *acc = buf && panels ? aligned_alloc(64, (size_t)(MM_PANEL_ROWS / 4) * (MM_TB / 2) * 256 * sizeof(float)) : NULL;
    for (;;) {
        int64_t r0 = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed) * j->chunk;
        if (r0 >= j->rows)
            break;
        mm_prefill(j, r0, BT_MIN(j->rows, r0 + j->chunk), buf, acc);
    }
    free(acc);
    free(buf);
}

static bool mm_run(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols, const float *x, int T,
                   float *out, bt_sweep_chunk *swept);

void bt_matmul(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols,
               const float *x, int T, float *out)
{
    mm_run(p, type, W, rows, cols, x, T, out, NULL);
}

bool bt_matmul_swept(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols, const float *x, int T,
                     float *out, bt_sweep_chunk *chunks)
{
    bool whole = T == 1 && rows > 0 && rows % 64 == 0;
    return mm_run(p, type, W, rows, cols, x, T, out, whole ? chunks : NULL) && whole;
}

/* The product; with swept (a decode of whole chunks), out's chunks too:
 * false when one is not finite. */
static bool mm_run(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols, const float *x, int T,
                   float *out, bt_sweep_chunk *swept)
{
    const bt_kvariant *kv = bt_kernels_active();
    if (rows <= 0 || T <= 0)
        return false;
    size_t rb = bt_dtype_row_size(type, cols);
    if (type < 0 || type >= BT_DT_COUNT || !kv->dot[type] || rb == 0) {
        /* Callers check bt_dtype()->compute first; NaN makes a miss loud. */
        for (int64_t i = 0; i < rows * T; i++)
            out[i] = NAN;
        return false;
    }
    /* 64-byte vector loads that straddle two cache lines cost twice as
     * much, so an input that does not start on a line (the CPU backend's
     * buffers do; malloc'd ones are only 16-byte aligned) is copied to an
     * aligned buffer (cols*T floats, small next to the weights). */
    float *xa = NULL;
    if ((uintptr_t)x % 64) {
        size_t xbytes = (size_t)cols * T * sizeof(float);
        xa = aligned_alloc(64, (xbytes + 63) & ~(size_t)63);
        if (xa)
            x = memcpy(xa, x, xbytes);
    }
    struct mm_job j = {
        .kv = kv, .type = type, .W = W, .row_bytes = rb,
        .rows = rows, .cols = cols, .x = x, .T = T, .out = out, .swept = swept,
    };
    atomic_init(&j.next, 0);
    atomic_init(&j.nonfinite, false);
    /* Tiny products are not worth waking workers for. */
    bool panels = mm_panelled(&j);
    int nth = 1;
    if (!p || (int64_t)rb * rows * T < 16384) {
        j.chunk = panels ? MM_PANEL_ROWS : BT_MAX((int64_t)8, rows);
        mm_worker(&j, 0, 1);
    } else {
        nth = bt_pool_threads(p);
        j.chunk = panels ? MM_PANEL_ROWS : mm_chunk(rows, nth);
        bt_pool_run(p, mm_worker, &j);
    }
    free(xa);
    if (!swept)
        return true;
    /* the chunks a band boundary cut (T == 1: the bands of mm_worker) */
    bool ok = !atomic_load(&j.nonfinite);
    for (int ith = 0; ith + 1 < nth && ok; ith++) {
        int64_t r0, r1;
        band(rows, ith, nth, &r0, &r1);
        if (r1 % 64 && r1 < rows)
            ok = bt_sweep_chunks_f32(out + r1 / 64 * 64, 1, swept + r1 / 64) == 1;
    }
    return ok;
}

/* ---- bandwidth probe ---- */

/* The buffer holds 1.0f everywhere and is read through the active f32 dot
 * (each chunk dotted with itself: one stream, every line fetched once), so
 * the probe uses the same vector loads as decode instead of measuring how
 * fast a scalar loop can issue them. */
struct bw_job {
    float *buf;
    size_t n;                /* floats */
    float sums[256];         /* one per thread, keeps the loads alive */
    bool fill;
};

static void bw_worker(void *arg, int ith, int nth)
{
    struct bw_job *j = arg;
    size_t chunk = (j->n + nth - 1) / nth;
    size_t i0 = BT_MIN(j->n, chunk * ith), i1 = BT_MIN(j->n, i0 + chunk);
    if (j->fill) {
        for (size_t i = i0; i < i1; i++)
            j->buf[i] = 1.0f;
        return;
    }
    bt_dot_fn dot = bt_kernels_active()->dot[BT_DT_F32];
    float s = 0;
    for (size_t i = i0; i < i1; i += 1 << 18)
        s += dot(j->buf + i, j->buf + i, (int64_t)BT_MIN((size_t)1 << 18, i1 - i));
    j->sums[ith & 255] += s;
}

double bt_measure_bandwidth(bt_pool *p)
{
    size_t bytes = (size_t)256 << 20;
    float *buf = NULL;
    while (bytes >= ((size_t)32 << 20) && !(buf = malloc(bytes)))
        bytes /= 2;
    if (!buf)
        return 0.0;
    struct bw_job *j = calloc(1, sizeof(*j));
    if (!j) {
        free(buf);
        return 0.0;
    }
    j->buf = buf;
    j->n = bytes / sizeof(float);
    j->fill = true;       /* first touch by the threads that will read */
    bt_pool_run(p, bw_worker, j);
    j->fill = false;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bt_now();
        bt_pool_run(p, bw_worker, j);
        double dt = bt_now() - t0;
        if (dt > 0 && bytes / dt / 1e9 > best)
            best = bytes / dt / 1e9;
    }
    free(buf);
    free(j);
    return best;
}

/* ---- the FMA peak (bt_measure_fma_peak): FMA_ACC independent
 * accumulators in registers (named, so no compiler keeps them in memory),
 * each a chain of FMAs: enough to cover the latency of two FMA ports ---- */
#define FMA_ACC 12
#define FMA_ACCS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
struct fma_job {
    long iters;
    int lanes;               /* floats per FMA of the unit used */
    float (*burn)(long iters, float seed);
    float sums[256];
};

static float burn_scalar(long iters, float seed)
{
    const float x = 1.0f - 1e-7f, y = seed * 1e-9f;
#define DECL(k) float a##k = seed + (float)k;
#define STEP(k) a##k = fmaf(a##k, x, y);
#define SUM(k) + a##k
    FMA_ACCS(DECL)
    for (long i = 0; i < iters; i++) { FMA_ACCS(STEP) }
    return 0 FMA_ACCS(SUM);
#undef DECL
#undef STEP
#undef SUM
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static float burn_avx2(long iters, float seed)
{
    const __m256 x = _mm256_set1_ps(1.0f - 1e-7f), y = _mm256_set1_ps(seed * 1e-9f);
#define DECL(k) __m256 a##k = _mm256_set1_ps(seed + (float)k);
#define STEP(k) a##k = _mm256_fmadd_ps(a##k, x, y);
#define SUM(k) s = _mm256_add_ps(s, a##k);
    FMA_ACCS(DECL)
    for (long i = 0; i < iters; i++) { FMA_ACCS(STEP) }
    __m256 s = _mm256_setzero_ps();
    FMA_ACCS(SUM)
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0] + o[7];
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx512f"))) static float burn_avx512(long iters, float seed)
{
    const __m512 x = _mm512_set1_ps(1.0f - 1e-7f), y = _mm512_set1_ps(seed * 1e-9f);
#define DECL(k) __m512 a##k = _mm512_set1_ps(seed + (float)k);
#define STEP(k) a##k = _mm512_fmadd_ps(a##k, x, y);
#define SUM(k) s = _mm512_add_ps(s, a##k);
    FMA_ACCS(DECL)
    for (long i = 0; i < iters; i++) { FMA_ACCS(STEP) }
    __m512 s = _mm512_setzero_ps();
    FMA_ACCS(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}
#endif

static void fma_worker(void *arg, int ith, int nth)
{
    (void)nth;
    struct fma_job *j = arg;
    j->sums[ith & 255] += j->burn(j->iters, (float)ith);
}

double bt_measure_fma_peak(bt_pool *p, const char **unit)
{
    struct fma_job *j = calloc(1, sizeof(*j));
    if (!j) return 0.0;
    j->burn = burn_scalar;
    j->lanes = 1;
    const char *u = "scalar fmaf";
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) { j->burn = burn_avx512; j->lanes = 16; u = "avx512 (16-wide FMA)"; }
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { j->burn = burn_avx2; j->lanes = 8; u = "avx2 (8-wide FMA)"; }
#endif
    if (unit) *unit = u;
    int nth = p ? bt_pool_threads(p) : 1;
    /* size a run to about 50 ms from a short one */
    j->iters = 1 << 14;
    double t0 = bt_now();
    if (p) bt_pool_run(p, fma_worker, j); else fma_worker(j, 0, 1);
    double dt = bt_now() - t0;
    if (dt > 0) j->iters = (long)BT_MAX(1 << 14, (double)j->iters * 0.05 / dt);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        t0 = bt_now();
        if (p) bt_pool_run(p, fma_worker, j); else fma_worker(j, 0, 1);
        dt = bt_now() - t0;
        double flops = 2.0 * j->lanes * FMA_ACC * (double)j->iters * nth;
        if (dt > 0 && flops / dt / 1e9 > best) best = flops / dt / 1e9;
    }
    free(j);
    return best;
}
