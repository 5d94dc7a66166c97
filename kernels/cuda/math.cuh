/* math.cuh - the per-block arithmetic of the CUDA kernels, written once as
 * __host__ __device__ functions: the .cu kernels call them on the device,
 * and tests/test_cuda_math.c compiles the same text with the host C
 * compiler (BT_HD defined away) and checks it against kernels/cpu and the
 * engine, so the arithmetic the GPU runs is tested on machines without one.
 *
 * Invariants:
 *   - Dequantization writes exactly the floats kernels/cpu/dequant.c writes.
 *     Every product there is an f16 scale (11 significant bits) times small
 *     integers (at most 13 more bits), exact in f32, so it cannot matter
 *     whether nvcc fuses it with the following add (-fmad=true); the
 *     explicit bt_mul keeps the intent visible anyway.
 *   - A reduction here fixes its order completely: lane l of NL lanes takes
 *     chunks l, l+NL, ... and the lanes fold by a butterfly (l ^ 16, l ^ 8,
 *     ... 1) exactly as __shfl_xor_sync does on a warp, or by a shared-memory
 *     tree (s[i] += s[i + k], k = NL/2 ... 1) on a block. The host emulation
 *     (bt_cu_*_emulate) runs the same operations in the same order, and
 *     fmaf is correctly rounded on both sides, so host and device agree bit
 *     for bit; against the CPU kernels (another order) they agree by
 *     normalized error.
 *   - Nothing here allocates, and nothing includes a CUDA header: the file
 *     is plain C when __CUDACC__ is not defined. */
#ifndef BT_CUDA_MATH_CUH
#define BT_CUDA_MATH_CUH

#include <stdint.h>
#include <math.h>

#include "base/records.h"   /* bt_tap_stats */

#ifdef __CUDACC__
#define BT_HD static __host__ __device__ __forceinline__
#else
#define BT_HD static inline
#endif

/* ggml type ids (src/base/dtype.h: enum bt_dtype); repeated here so the
 * plugin does not need the CPU headers. tests/test_cuda_math.c checks that
 * the numbers agree. */
enum {
    BT_CU_F32 = 0, BT_CU_F16 = 1, BT_CU_Q4_0 = 2, BT_CU_Q4_1 = 3,
    BT_CU_Q5_0 = 6, BT_CU_Q5_1 = 7, BT_CU_Q8_0 = 8,
    BT_CU_Q2_K = 10, BT_CU_Q3_K = 11, BT_CU_Q4_K = 12, BT_CU_Q5_K = 13,
    BT_CU_Q6_K = 14, BT_CU_BF16 = 30,
    /* known by name only: the CPU computes with it, the plugin has no
     * kernel and refuses it (backend_cuda.cu, doc/cuda.md) */
    BT_CU_MXFP4 = 39
};

/* Elements per block and bytes per block of a type this file computes;
 * 0 for any other id. */
BT_HD int bt_cu_blck(int type)
{
    switch (type) {
    case BT_CU_F32: case BT_CU_F16: case BT_CU_BF16: return 1;
    case BT_CU_Q4_0: case BT_CU_Q4_1: case BT_CU_Q5_0: case BT_CU_Q5_1: case BT_CU_Q8_0: return 32;
    case BT_CU_Q2_K: case BT_CU_Q3_K: case BT_CU_Q4_K: case BT_CU_Q5_K: case BT_CU_Q6_K: return 256;
    default: return 0;
    }
}

/* A weight type's name in messages and kernel names: the types above
 * (mxfp4 included, so its refusal names it), "?" for any other id. Host
 * code only. */
static inline const char *bt_cu_type_name(int type)
{
    switch (type) {
    case BT_CU_F32: return "f32"; case BT_CU_F16: return "f16"; case BT_CU_BF16: return "bf16";
    case BT_CU_Q4_0: return "q4_0"; case BT_CU_Q4_1: return "q4_1"; case BT_CU_Q5_0: return "q5_0";
    case BT_CU_Q5_1: return "q5_1"; case BT_CU_Q8_0: return "q8_0"; case BT_CU_Q2_K: return "q2_K";
    case BT_CU_Q3_K: return "q3_K"; case BT_CU_Q4_K: return "q4_K"; case BT_CU_Q5_K: return "q5_K";
    case BT_CU_Q6_K: return "q6_K"; case BT_CU_MXFP4: return "mxfp4"; default: return "?";
    }
}

BT_HD int bt_cu_type_size(int type)
{
    switch (type) {
    case BT_CU_F32: return 4;
    case BT_CU_F16: case BT_CU_BF16: return 2;
    case BT_CU_Q4_0: return 18;
    case BT_CU_Q4_1: return 20;
    case BT_CU_Q5_0: return 22;
    case BT_CU_Q5_1: return 24;
    case BT_CU_Q8_0: return 34;
    case BT_CU_Q2_K: return 84;
    case BT_CU_Q3_K: return 110;
    case BT_CU_Q4_K: return 144;
    case BT_CU_Q5_K: return 176;
    case BT_CU_Q6_K: return 210;
    default: return 0;
    }
}

/* ---- scalar helpers ---- */

BT_HD float bt_cu_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { uint32_t u; float f; } v;
    v.u = u;
    return v.f;
#endif
}

BT_HD uint32_t bt_cu_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    union { uint32_t u; float f; } v;
    v.f = f;
    return v.u;
#endif
}

/* f16 bits -> f32, exact, the same bit manipulation as src/base/util.c
 * (bt_f16_to_f32) so a NaN keeps its payload on both sides. */
BT_HD float bt_cu_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t ex = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (ex == 0) {
        if (man == 0) bits = sign;
        else {
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (ex == 31) {
        bits = sign | 0x7f800000 | man << 13;
    } else {
        bits = sign | (ex + 112) << 23 | man << 13;
    }
    return bt_cu_bits_f32(bits);
}

BT_HD float bt_cu_bf16(uint16_t h) { return bt_cu_bits_f32((uint32_t)h << 16); }

/* Blocks in a GGUF file are not aligned: read little-endian bytes. */
BT_HD uint16_t bt_cu_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
BT_HD uint32_t bt_cu_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
BT_HD float bt_cu_rd_f16(const uint8_t *p) { return bt_cu_f16(bt_cu_u16(p)); }

/* Rounded products and sums that nvcc may not contract into an FMA. */
BT_HD float bt_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
BT_HD float bt_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
BT_HD float bt_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/* ---- dequantization: element e (0 .. block size - 1) of one block ---- */

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
BT_HD void bt_cu_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element e of the block at b (layouts: kernels/cpu/dequant.c). For the
 * unblocked types b points at the element itself and e is ignored. */
BT_HD float bt_cu_dq1(int type, const uint8_t *b, int e)
{
    switch (type) {
    case BT_CU_F32: return bt_cu_bits_f32(bt_cu_u32(b));
    case BT_CU_F16: return bt_cu_rd_f16(b);
    case BT_CU_BF16: return bt_cu_bf16(bt_cu_u16(b));
    case BT_CU_Q4_0: {
        int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
        return bt_mul((float)(q - 8), bt_cu_rd_f16(b));
    }
    case BT_CU_Q4_1: {
        int q = e < 16 ? (b[4 + e] & 0xF) : (b[4 + e - 16] >> 4);
        return bt_add(bt_mul(bt_cu_rd_f16(b), (float)q), bt_cu_rd_f16(b + 2));
    }
    case BT_CU_Q5_0: {
        uint32_t qh = bt_cu_u32(b + 2);
        int l = e & 15;
        int q = e < 16 ? ((b[6 + l] & 0xF) | ((qh >> l) & 1) << 4)
                       : ((b[6 + l] >> 4) | ((qh >> (l + 16)) & 1) << 4);
        return bt_mul((float)(q - 16), bt_cu_rd_f16(b));
    }
    case BT_CU_Q5_1: {
        uint32_t qh = bt_cu_u32(b + 4);
        int l = e & 15;
        int q = e < 16 ? ((b[8 + l] & 0xF) | ((qh >> l) & 1) << 4)
                       : ((b[8 + l] >> 4) | ((qh >> (l + 16)) & 1) << 4);
        return bt_add(bt_mul(bt_cu_rd_f16(b), (float)q), bt_cu_rd_f16(b + 2));
    }
    case BT_CU_Q8_0:
        return bt_mul((float)(int8_t)b[2 + e], bt_cu_rd_f16(b));
    case BT_CU_Q2_K: {
        int half = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint8_t *sc = b + (half * 4 + j) * 2 + (l >= 16);
        const uint8_t *qs = b + 16 + 32 * half;
        float d = bt_cu_rd_f16(b + 80), dmin = bt_cu_rd_f16(b + 82);
        float dl = bt_mul(d, (float)(*sc & 0xF)), ml = bt_mul(dmin, (float)(*sc >> 4));
        return bt_sub(bt_mul(dl, (float)((qs[l] >> (2 * j)) & 3)), ml);
    }
    case BT_CU_Q3_K: {
        const uint8_t *hm = b, *s = b + 96;
        int half = e / 128, j = (e % 128) / 32, l = e % 32;
        int k = half * 8 + 2 * j + (l >= 16);
        int lo = k < 8 ? s[k] & 0xF : s[k - 8] >> 4;
        int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        float dl = bt_mul(bt_cu_rd_f16(b + 108), (float)((lo | hi << 4) - 32));
        const uint8_t *qs = b + 32 + 32 * half;
        int q = ((qs[l] >> (2 * j)) & 3) - (((hm[l] >> (half * 4 + j)) & 1) ? 0 : 4);
        return bt_mul(dl, (float)q);
    }
    case BT_CU_Q4_K: case BT_CU_Q5_K: {
        int chunk = e / 64, w = e % 64, l = w % 32, hi = w >= 32, sub = 2 * chunk + hi;
        int sc, m;
        bt_cu_scale_min_k4(sub, b + 4, &sc, &m);
        const uint8_t *q = b + (type == BT_CU_Q4_K ? 16 : 48) + 32 * chunk;
        int v = hi ? q[l] >> 4 : q[l] & 0xF;
        if (type == BT_CU_Q5_K) v |= ((b[16 + l] >> sub) & 1) << 4;
        float d = bt_mul(bt_cu_rd_f16(b), (float)sc), dm = bt_mul(bt_cu_rd_f16(b + 2), (float)m);
        return bt_sub(bt_mul(d, (float)v), dm);
    }
    case BT_CU_Q6_K: {
        int half = e / 128, w = e % 128, quarter = w / 32, l = w % 32, is = l / 16;
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        const int8_t *s = (const int8_t *)(b + 192) + 8 * half;
        int lowb = (quarter & 1) ? ql[l + 32] : ql[l];
        int nib = quarter >= 2 ? lowb >> 4 : lowb & 0xF;
        int q = (nib | ((qh[l] >> (2 * quarter)) & 3) << 4) - 32;
        float d = bt_mul(bt_cu_rd_f16(b + 208), (float)s[is + 2 * quarter]);
        return bt_mul(d, (float)q);
    }
    default:
        return bt_cu_bits_f32(0x7fc00000u);   /* unknown type: NaN, never silent */
    }
}

/* Element i of a row of `type` (i need not be block aligned). */
BT_HD float bt_cu_dq_at(int type, const uint8_t *row, int64_t i)
{
    int bl = bt_cu_blck(type);
    if (bl == 1) return bt_cu_dq1(type, row + i * bt_cu_type_size(type), 0);
    return bt_cu_dq1(type, row + (i / bl) * bt_cu_type_size(type), (int)(i % bl));
}

/* ---- dot product: the warp matvec order ----
 * A row of n elements is cut into chunks of 8; chunk c goes to lane
 * c % 32, which adds w_i * x_i with one fmaf per element in element order;
 * the 32 lane sums then fold by the xor butterfly. Every block size (32,
 * 256) is a multiple of 8, so a chunk never straddles two blocks. */
#define BT_CU_WARP 32
#define BT_CU_CHUNK 8

/* Lane `lane`'s partial sum over its chunks (the per-thread half of the
 * matvec kernel). n must be a multiple of 8 (every model width is). */
BT_HD float bt_cu_dot_lane(int type, const uint8_t *row, const float *x, int64_t n, int lane)
{
    float s = 0.0f;
    for (int64_t c = lane; c * BT_CU_CHUNK < n; c += BT_CU_WARP) {
        int64_t i0 = c * BT_CU_CHUNK;
        for (int k = 0; k < BT_CU_CHUNK; k++)
            s = fmaf(bt_cu_dq_at(type, row, i0 + k), x[i0 + k], s);
    }
    return s;
}

/* The butterfly of __shfl_xor_sync on 32 lane values, in place: afterwards
 * every lane holds the same sum. */
BT_HD void bt_cu_butterfly32(float s[BT_CU_WARP])
{
    for (int off = BT_CU_WARP / 2; off > 0; off /= 2) {
        float t[BT_CU_WARP];
        for (int l = 0; l < BT_CU_WARP; l++) t[l] = s[l] + s[l ^ off];
        for (int l = 0; l < BT_CU_WARP; l++) s[l] = t[l];
    }
}

/* Host emulation of the device dot: the bits the matvec kernel writes. */
BT_HD float bt_cu_dot_emulate(int type, const uint8_t *row, const float *x, int64_t n)
{
    float s[BT_CU_WARP];
    for (int l = 0; l < BT_CU_WARP; l++) s[l] = bt_cu_dot_lane(type, row, x, n, l);
    bt_cu_butterfly32(s);
    return s[0];
}

/* ---- tap statistics ----
 * One accumulator per thread over elements tid, tid + NT, ...; accumulators
 * merge by a shared-memory tree. Sums are double like kernels/cpu/stats.c;
 * counts, min, max and the first bad index do not depend on the order, so
 * they equal the CPU's exactly. */
typedef struct bt_cu_stats {
    int64_t n, nan, pinf, ninf;
    int64_t first_bad;      /* flat index of the first non-finite value, -1 if none */
    float min, max;         /* over finite values; +Inf / -Inf when none */
    double sum, sumsq;      /* over finite values */
} bt_cu_stats;

BT_HD void bt_cu_stats_init(bt_cu_stats *a)
{
    a->n = a->nan = a->pinf = a->ninf = 0;
    a->first_bad = -1;
    a->min = bt_cu_bits_f32(0x7f800000u);
    a->max = bt_cu_bits_f32(0xff800000u);
    a->sum = a->sumsq = 0.0;
}

BT_HD void bt_cu_stats_add(bt_cu_stats *a, float v, int64_t i)
{
    uint32_t u = bt_cu_f32_bits(v);
    a->n++;
    if ((u & 0x7f800000u) == 0x7f800000u) {
        if (u & 0x007fffffu) a->nan++;
        else if (u >> 31) a->ninf++;
        else a->pinf++;
        if (a->first_bad < 0 || i < a->first_bad) a->first_bad = i;
        return;
    }
    double d = (double)v;
    a->sum += d;
    a->sumsq = fma(d, d, a->sumsq);
    a->min = v < a->min ? v : a->min;
    a->max = v > a->max ? v : a->max;
}

BT_HD void bt_cu_stats_merge(bt_cu_stats *a, const bt_cu_stats *b)
{
    a->n += b->n; a->nan += b->nan; a->pinf += b->pinf; a->ninf += b->ninf;
    if (b->first_bad >= 0 && (a->first_bad < 0 || b->first_bad < a->first_bad)) a->first_bad = b->first_bad;
    a->min = b->min < a->min ? b->min : a->min;
    a->max = b->max > a->max ? b->max : a->max;
    a->sum += b->sum;
    a->sumsq += b->sumsq;
}

/* The reduction kernel (kernels.cu, bt_k_stats) is one block of
 * BT_CU_STATS_THREADS threads; thread tid of nt accumulates elements tid,
 * tid + nt, ... of x[0..n) ... */
#define BT_CU_STATS_THREADS 256
BT_HD void bt_cu_stats_thread(const float *x, int64_t n, int tid, int nt, bt_cu_stats *a)
{
    bt_cu_stats_init(a);
    for (int64_t i = tid; i < n; i += nt) bt_cu_stats_add(a, x[i], i);
}

/* ... then the accumulators fold by a tree, level k = nt/2, ..., 1: thread
 * tid < k merges acc[tid + k] into acc[tid] (the device waits for the
 * whole level before the next), leaving the result in acc[0]. */
BT_HD void bt_cu_stats_fold(bt_cu_stats *acc, int tid, int k)
{
    if (tid < k) bt_cu_stats_merge(&acc[tid], &acc[tid + k]);
}

/* Host emulation of the device reduction over n elements with nt threads
 * (nt a power of two, at most 1024): the kernel's two steps, threads in
 * turn. */
BT_HD void bt_cu_stats_emulate(const float *x, int64_t n, int nt, bt_cu_stats *out)
{
    bt_cu_stats acc[1024];
    for (int t = 0; t < nt; t++) bt_cu_stats_thread(x, n, t, nt, &acc[t]);
    for (int k = nt / 2; k > 0; k /= 2)
        for (int t = 0; t < k; t++) bt_cu_stats_fold(acc, t, k);
    *out = acc[0];
}

/* The tap statistics (base/records.h) of a reduced accumulator over rows
 * of `width` values starting at position pos0: what the plugin hands the
 * taps (backend_cuda.cu, finish_step), checked against kernels/cpu/stats.c
 * (bt_stats_compute) by tests/test_cuda_math.c. */
BT_HD void bt_cu_stats_finish(const bt_cu_stats *a, int width, int pos0, bt_tap_stats *s)
{
    s->n = a->n; s->nan = a->nan; s->pinf = a->pinf; s->ninf = a->ninf;
    s->n_finite = a->n - a->nan - a->pinf - a->ninf;
    if (s->n_finite > 0) {
        s->min = a->min; s->max = a->max;
        s->absmax = fabsf(a->min) > fabsf(a->max) ? fabsf(a->min) : fabsf(a->max);
        s->mean = (float)(a->sum / s->n_finite);
        s->rms = (float)sqrt(a->sumsq / s->n_finite);
    } else s->min = s->max = s->absmax = s->mean = s->rms = bt_cu_bits_f32(0x7fc00000u);
    s->first_bad_index = a->first_bad < 0 ? -1 : (int)(a->first_bad % width);
    s->first_bad_pos = a->first_bad < 0 ? -1 : pos0 + (int)(a->first_bad / width);
}

/* ---- rmsnorm, rope, softmax ---- */

/* The scale rmsnorm multiplies by, from the sum of squares (double, as
 * src/engine/engine.c): out[i] = (x[i] * scale) * w[i], two roundings. */
BT_HD float bt_cu_rms_scale(double ss, int n, float eps)
{
    return (float)(1.0 / sqrt(ss / n + eps));
}
BT_HD float bt_cu_rms_apply(float x, float scale, float w) { return bt_mul(bt_mul(x, scale), w); }

/* Host emulation of the rmsnorm kernel (nt threads, strided sums of
 * squares, tree). */
BT_HD void bt_cu_rmsnorm_emulate(float *out, const float *x, const float *w, int n, float eps, int nt)
{
    double part[1024];
    for (int t = 0; t < nt; t++) {
        part[t] = 0.0;
        for (int i = t; i < n; i += nt) part[t] = fma((double)x[i], (double)x[i], part[t]);
    }
    for (int k = nt / 2; k > 0; k /= 2)
        for (int t = 0; t < k; t++) part[t] += part[t + k];
    float sc = bt_cu_rms_scale(part[0], n, eps);
    for (int i = 0; i < n; i++) out[i] = bt_cu_rms_apply(x[i], sc, w[i]);
}

/* Rotate pair (a, b) = (v[2i], v[2i+1]) by the angle with cosine c, sine s;
 * the engine's interleaved rope, with every product and sum rounded as the
 * CPU rounds them (no FMA), so it equals the CPU bit for bit. */
BT_HD void bt_cu_rope_pair(float *a, float *b, float c, float s)
{
    float x = *a, y = *b;
    *a = bt_sub(bt_mul(x, c), bt_mul(y, s));
    *b = bt_add(bt_mul(x, s), bt_mul(y, c));
}

/* Softmax of att[0..n) in place as the attention kernel computes it: the
 * maximum (order-free), exp(v - max), the sum by a tree over nt threads,
 * then the probabilities are att[p] * (1 / sum) like the engine. Returns
 * 1 / sum. */
BT_HD float bt_cu_softmax_emulate(float *att, int n, int nt)
{
    float mx = bt_cu_bits_f32(0xff800000u);
    for (int p = 0; p < n; p++) mx = att[p] > mx ? att[p] : mx;
    float part[1024];
    for (int t = 0; t < nt; t++) part[t] = 0.0f;
    for (int p = 0; p < n; p++) {
        att[p] = expf(att[p] - mx);
        part[p % nt] += att[p];
    }
    for (int k = nt / 2; k > 0; k /= 2)
        for (int t = 0; t < k; t++) part[t] += part[t + k];
    return 1.0f / part[0];
}

/* ---- injection: the value a spec writes into one element ----
 * kind: 0 set (nan, inf, -inf, zero: v is the value), 1 scale (x * v),
 * 2 noise (x + v * noise_unit), the kinds of src/tap/inject.c. */
enum { BT_CU_INJ_SET = 0, BT_CU_INJ_SCALE = 1, BT_CU_INJ_NOISE = 2 };

/* Deterministic noise in [-1, 1) from the element's identity: the
 * splitmix64 hash of src/tap/inject.c (noise_unit), bit for bit. */
BT_HD float bt_cu_noise_unit(int step, int layer, int op, int pos, long long idx)
{
    uint64_t z = 0x9e3779b97f4a7c15ull;
    uint64_t parts[5] = { (uint64_t)(uint32_t)step, (uint64_t)(uint32_t)(layer + 1),
                          (uint64_t)(uint32_t)op, (uint64_t)(uint32_t)pos, (uint64_t)idx };
    for (int i = 0; i < 5; i++) {
        z += parts[i] + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
    }
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

BT_HD float bt_cu_inject_value(int kind, float old, float v, int step, int layer, int op, int pos, long long idx)
{
    switch (kind) {
    case BT_CU_INJ_SCALE: return bt_mul(old, v);
    case BT_CU_INJ_NOISE: return bt_add(old, bt_mul(v, bt_cu_noise_unit(step, layer, op, pos, idx)));
    default: return v;
    }
}

/* ---- numerics profiles: the storage formats of num_round ----
 * kernels/cpu/numerics.c's conversions, bit for bit (tests/test_cuda_math.c
 * checks them against bt_num_round on edge cases and random patterns):
 * f32 -> f16 and bf16 round to nearest even with the same NaN quieting,
 * and llama.cpp's q8 block (d = amax/127 stored as f16, q = round half to
 * even of x * 127/amax, dequantized d * q). Format ids as enum bt_num_fmt. */
enum { BT_CU_NUM_F32 = 0, BT_CU_NUM_F16 = 1, BT_CU_NUM_BF16 = 2, BT_CU_NUM_Q8_0 = 3, BT_CU_NUM_Q8_1 = 4,
       BT_CU_NUM_F8_E4M3 = 8 /* numerics.h's: no CUDA rounding (refused) */ };

/* src/base/util.c's bt_f32_to_f16, the same bit manipulation. */
BT_HD uint16_t bt_cu_f32_to_f16(float f)
{
    uint32_t x = bt_cu_f32_bits(f), sign = (x >> 16) & 0x8000;
    int32_t ex = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    if (ex >= 31) return (uint16_t)(sign | 0x7c00);
    if (ex <= 0) {
        if (ex < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - ex);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | (uint32_t)ex << 10 | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

BT_HD uint16_t bt_cu_f32_to_bf16(float f)
{
    uint32_t u = bt_cu_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* One value stored as f16 or bf16 (any other format: unchanged). */
BT_HD float bt_cu_num_round1(int fmt, float x)
{
    if (fmt == BT_CU_NUM_F16) return bt_cu_f16(bt_cu_f32_to_f16(x));
    if (fmt == BT_CU_NUM_BF16) return bt_cu_bf16(bt_cu_f32_to_bf16(x));
    return x;
}

/* One block of 32 quantized to q8 and back, in place. The products are
 * exact (an f16 scale times an integer of 8 bits); a NaN quotient (or one
 * past int32's range) becomes -128, as numerics.c's q8_lane (the x86
 * convert-then-saturating-pack that llama.cpp runs) gives it. */
BT_HD void bt_cu_num_round_q8(float *x)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = bt_cu_f16(bt_cu_f32_to_f16(amax / 127.f));
    float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int i = 0; i < 32; i++) {
        float r = nearbyintf(x[i] * id);
        int q = !(r >= -2147483648.0f && r < 2147483648.0f) ? -128 : r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r;
        x[i] = d * (float)q;
    }
}

/* A row of n values as bt_num_round stores it: whole blocks of 32 for q8
 * (a partial last block left alone), every value for f16 / bf16. */
BT_HD void bt_cu_num_round_row(int fmt, float *x, int64_t n)
{
    if (fmt == BT_CU_NUM_Q8_0 || fmt == BT_CU_NUM_Q8_1) {
        for (int64_t b = 0; b + 32 <= n; b += 32) bt_cu_num_round_q8(x + b);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = bt_cu_num_round1(fmt, x[i]);
}

#endif
