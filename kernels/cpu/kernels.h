/* kernels.h - CPU compute kernels: dequantization, dot
 * products, threaded matrix products.
 *
 * Weights stay in their file layout (ggml blocks) and are read in place.
 * Activations are always f32; a quantized row is dequantized block by block
 * inside the dot product (no activation quantization), so results track an
 * f32 reference closely. SIMD variants (AVX2+FMA+F16C, AVX-512F+BW+VL+DQ)
 * are chosen once at run time by bt_kernels_init(), each with a fused kernel
 * for every compute type; the scalar code is the reference and every
 * variant is tested against it. */
#ifndef BT_KERNELS_H
#define BT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "base/dtype.h"     /* the weight types the kernels compute with */
#include "base/records.h"   /* bt_tap_stats */

/* One-pass statistics of a (rows x width) f32 tensor (kernels/cpu/stats.c):
 * a single sweep over data that was just written (still in cache) counts
 * NaN / +Inf / -Inf, accumulates min, max, sum and sum of squares over the
 * finite values and remembers the first non-finite element. A tensor of
 * more than BT_STATS_SEG elements is swept in segments of BT_STATS_SEG,
 * each from zero, their sums then added in segment order (the first taken
 * as it is: one segment is one sweep's bits): a fixed association, so the
 * CPU backend may sweep the segments on its threads (bt_stats_part) and
 * get these bits. */
void bt_stats_compute(const float *x, int rows, int width, int pos0, bt_tap_stats *out);

#define BT_STATS_SEG 65536   /* elements; a multiple of the sweep's 64-element chunk */
typedef struct bt_stats_part {
    double sum[8], sumsq[8];
    float mn[8], mx[8];
    int64_t nan, pinf, ninf, first;   /* first: the tensor's index of the first non-finite element, or -1 */
} bt_stats_part;
/* Segment k (elements [k*BT_STATS_SEG, min(n, (k+1)*BT_STATS_SEG)) of x[0..n)). */
void bt_stats_part_sweep(const float *x, int64_t n, int64_t k, bt_stats_part *p);
/* acc = acc + p, lane by lane (acc the earlier segments'); the first segment is copied. */
void bt_stats_part_add(bt_stats_part *acc, const bt_stats_part *p, bool first);
/* The statistics of the combined parts of an n-element tensor. */
void bt_stats_part_finish(const bt_stats_part *acc, int64_t n, int width, int pos0, bt_tap_stats *out);

/* Pick SIMD variants for this CPU. BT_SIMD=scalar|avx2|avx512 in the
 * environment forces one (falls back to scalar if the CPU lacks it).
 * Idempotent; called by everything below on first use. */
void bt_kernels_init(void);
const char *bt_kernels_simd(void);          /* "avx512", "avx2" or "scalar" */

/* Dequantize n elements (multiple of the block size) of one row. */
void bt_dequant_row(int type, const void *src, float *dst, int64_t n);
/* dot(W row, x) over n elements, W row of `type`, x f32. */
float bt_vec_dot(int type, const void *w_row, const float *x, int64_t n);

/* The finite sweep behind the tap statistics (stats.c): float
 * partial sums in 8 lanes per 64-element chunk, each chunk's lanes then
 * added into the matching double lane; min and max per lane. Starts with
 * sum = sumsq = 0, mn = +inf, mx = -inf in every lane (bt_sweep_init). */
typedef struct bt_sweep {
    double sum[8], sumsq[8];
    float mn[8], mx[8];
} bt_sweep;
void bt_sweep_init(bt_sweep *acc);
/* Adds x[0..n) to acc chunk by chunk (64 elements, the last one possibly
 * shorter, its tail past a multiple of 8 into lane 0) while every value of
 * a chunk is finite; returns how many elements it took: n, or the start of
 * the first chunk holding a NaN or an Inf (that chunk untouched, for the
 * caller's per-element path). Every variant gives the same bits. */
int64_t bt_sweep_f32(const float *x, int64_t n, bt_sweep *acc);
/* One 64-element chunk of that sweep before it is folded in: its float
 * lane sums and sums of squares and its own lane minima and maxima (from
 * +inf and -inf), what bt_sweep_f32 computes for the chunk. An op that
 * wrote a tensor can sweep its part while the values are in its cache and
 * leave the fold, in chunk order, to whoever wants the statistics. */
typedef struct bt_sweep_chunk {
    float s[8], q[8], mn[8], mx[8];
} bt_sweep_chunk;
/* The chunks of x[0 .. 64 * nc) into out[0 .. nc), in turn, while each is
 * finite; returns how many it wrote (nc, or the index of the first chunk
 * holding a NaN or an Inf). Every variant gives the same bits. */
int64_t bt_sweep_chunks_f32(const float *x, int64_t nc, bt_sweep_chunk *out);
/* acc after the chunks c[0 .. nc), as bt_sweep_f32 folds each (min and max,
 * then every lane's float sums into its double): with the chunks of x, the
 * bits bt_sweep_f32(x, 64 * nc, acc) gives. */
void bt_sweep_fold(bt_sweep *acc, const bt_sweep_chunk *c, int64_t nc);
/* bt_stats_compute's result for the (rows x width) tensor whose 64-element
 * chunks, all finite, are c (rows * width a multiple of 64), the same bits. */
void bt_stats_from_chunks(const bt_sweep_chunk *c, int rows, int width, int pos0, bt_tap_stats *out);

/* The CPU backend's attention loops. bt_dot_rows_f32: out[p] = dot(k + p *
 * ldk, q) over n floats for p < np, each the bits bt_vec_dot(BT_DT_F32)
 * gives it (four rows per call where it can: the variant's dot4 kernel
 * follows the same canonical order). bt_wsum_f32: for p = 0 .. np-1 in
 * order, w = wts[p] * scale, then acc[i] += w * v[p * ldv + i] for i < n,
 * product rounded then added (never fused), so every variant gives the
 * bits of that plain loop. */
void bt_dot_rows_f32(const float *k, int64_t ldk, const float *q, int64_t n, int64_t np, float *out);
/* The same for nq queries sharing the keys (a GQA group): out[j*ldo + p] =
 * dot(k + p*ldk, q + j*ldq), each the bits bt_dot_rows_f32 gives it; with
 * the variant's 8x3 tile three queries share every key load. */
void bt_dot_rows_multi_f32(const float *k, int64_t ldk, const float *q, int64_t ldq, int nq, int64_t n, int64_t np,
                           float *out, int64_t ldo);
void bt_wsum_f32(float *acc, const float *wts, float scale, const float *v, int64_t ldv, int64_t np, int64_t n);
/* Softmax's first pass: x[i] = x[i] * scale for i < n, and the largest
 * result that is not NaN (-INFINITY when there is none), i.e. the bits of
 * the plain loop `s = x[i] * scale; x[i] = s; if (s > m) m = s;` up to the
 * sign of a zero maximum, which no exp(x - m) can see. */
float bt_scale_max_f32(float *x, int64_t n, float scale);
/* Softmax's exponentials: x[i] = expf(x[i] - m) for i < n (nothing for
 * n <= 0), x[i] - m rounded in float, each result the bits this machine's
 * C library expf returns (NaN, +-Inf, overflow and underflow included; errno
 * is not set) whichever variant runs: the SIMD ones replicate glibc 2.36's
 * expf (exp.c), and tests/test_expf.c checks them against the libm linked. */
void bt_exp_sub_f32(float *x, int64_t n, float m);
/* The first i in [0, n) with x[i] > t (a NaN is never greater), n when
 * there is none: a top-k scan's jump past values its threshold excludes. */
int64_t bt_first_above_f32(const float *x, int64_t n, float t);
/* A softmax row's two sums for its entropy: with e[i] = expf(x[i] - m)
 * (bt_exp_sub_f32's bits), z[i % 4] += e[i] and ez[i % 4] += e[i] * ((double)
 * x[i] - m) for i = 0 .. n-1 in order, in double, the product rounded then
 * added; an element whose e is 0 (a masked -inf, an underflow) adds
 * nothing. Four chains in a fixed order, so every variant gives the bits
 * of that loop; z and ez carry in and out. x holds no NaN and no +Inf. */
void bt_softmax_sums_f32(const float *x, int64_t n, float m, double z[4], double ez[4]);
/* The gated delta rule over T tokens in order, on columns [c0, c1) of a
 * head's dk x dv state S (row i = key dimension i, dv floats). Token t,
 * with decay = decay[t], k = k + t*ldk, v = v + t*ldv (indexed by column),
 * beta = beta[t], qs = qs + t*ldq (the query already scaled), out = out +
 * t*ldo (indexed by column): S *= decay; sk = sum_i k[i] S_i; u = (v -
 * sk) * beta; S_i += k[i] u; out = sum_i qs[i] S_i. Each sum runs over i
 * in order from 0.0f, each product rounded then added (never fused): the
 * bits of bt_scale_max_f32 and bt_wsum_f32 composed that way, in every
 * variant. A column of S depends on no other, so SIMD lanes are columns,
 * and a variant may run a block of columns through every token, sweeping
 * the rows once a token (two passes a token, it was four). */
void bt_gdn_seq_f32(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, int T, const float *decay,
                    const float *k, int64_t ldk, const float *v, int64_t ldv, const float *beta, const float *qs,
                    int64_t ldq, float *out, int64_t ldo);

/* A small fixed pthread pool. bt_pool_run calls fn(arg, ith, nth) on nth
 * threads (the caller is thread 0) and returns when all are done. */
typedef struct bt_pool bt_pool;
bt_pool *bt_pool_new(int n_threads);         /* 0: bt_pool_default_threads(); NULL on failure */
/* Threads a command uses when not told: the online CPUs, at most
 * BT_POOL_DEFAULT_MAX (decode is bandwidth bound well before that). */
#define BT_POOL_DEFAULT_MAX 16
int bt_pool_default_threads(void);
void bt_pool_free(bt_pool *p);               /* NULL is a no-op */
int bt_pool_threads(const bt_pool *p);
void bt_pool_run(bt_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* out[t*rows + r] = dot(W row r, x[t*cols ...]) for t < T, r < rows.
 * W is rows x cols of `type` (row-major, rows contiguous, row stride =
 * bt_dtype_row_size(type, cols)). Work is split over rows; with T > 1 each
 * row is dequantized once and reused for every t. p may be NULL (1 thread).
 * Batch invariant: out[t*rows + r] is bit-identical whatever T, the token's
 * slot t and the thread count, and equal to what T = 1 gives for that token
 * (within one SIMD variant; kernels_impl.h). */
void bt_matmul(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols,
               const float *x, int T, float *out);
/* bt_matmul, and for a decode (T == 1) of whole 64-element chunks (rows a
 * multiple of 64) out's chunks swept into chunks[0 .. rows/64)
 * (bt_sweep_chunks_f32): each thread sweeps those inside its band of rows
 * as it finishes it, while they are in its cache; the few a band boundary
 * cuts are swept after. Returns whether every chunk was swept (false: not
 * a decode of whole chunks, or a chunk holds a NaN or an Inf; out is the
 * product either way). */
bool bt_matmul_swept(bt_pool *p, int type, const void *W, int64_t rows, int64_t cols, const float *x, int T,
                     float *out, bt_sweep_chunk *chunks);

/* Measure sustained memory read bandwidth in GB/s with n_threads threads
 * (streams a buffer much larger than the caches). */
double bt_measure_bandwidth(bt_pool *p);
/* Measure the f32 fused multiply-add peak in GFLOP/s (2 flops per lane) on
 * every thread of p: independent FMA chains in registers on the widest unit
 * the CPU has (AVX-512, else AVX2+FMA, else scalar fmaf), the best of three
 * runs of about 50 ms; *unit (may be NULL) names the unit. The ceiling of an
 * f32 matmul on this machine: the prompt's are compared with it. */
double bt_measure_fma_peak(bt_pool *p, const char **unit);

#endif
