/* dot_avx2.c - AVX2 + FMA + F16C kernels for the common weight types
 * (f32, f16, bf16, every block type, mxfp4 included). Compiled with per-function target
 * attributes so the build needs no special flags; bt_kernels_init() only
 * installs them when the CPU reports all three features.
 *
 * Dots accumulate in f32 vectors with FMA (they differ from the scalar code
 * by reassociation only), all in this variant's canonical order
 * (kernels_impl.h: 8-float chunks into one accumulator per (row, token)),
 * so bt_matmul is batch invariant. Dequantizers must match
 * the scalar code bit for bit, so they use the same single roundings and
 * never fuse (BT_NOFUSE_V), or fuse only where the product is exact (see
 * dot_avx512.c's header: q * d never rounds, so q * d - m in one FMA is
 * dq's rounding).
 *
 * q5_* and the k-quants build integer codes 32 at a time with byte ops
 * (one ymm), widen them 8 at a time, convert, and scale: the same products
 * as dequant.c. */
#include "kernels_impl.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/util.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define QK 32
/* Software prefetch ahead in the weight stream (see dot_avx512.c). */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
#define PF(p) _mm_prefetch((const char *)(p) + PF_DIST, _MM_HINT_T0)

static inline uint16_t ld_u16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

TGT static inline float ld_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bt_f16_table[h];
}

/* The chunk of 8 floats at p with `left` of them in the row: a full load,
 * or the zero-padded last chunk (masked lanes are not read). */
static const int32_t mask_tab[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };

TGT static inline __m256 ld8(const float *p, int64_t left)
{
    if (left >= 8)
        return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - left)));
}

/* ---- the canonical reduction (kernels_impl.h):
 * ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)). Plain adds only, so NaN and Inf
 * propagate. hsum8 and hsum8x4 build the same tree, one output or four. ---- */

TGT static inline float hsum8(__m256 v)
{
    __m256 p = _mm256_hadd_ps(v, v);    /* [v0+v1, v2+v3, ., . | v4+v5, v6+v7, ., .] */
    p = _mm256_hadd_ps(p, p);           /* [(v0+v1)+(v2+v3), ... | (v4+v5)+(v6+v7), ...] */
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1)));
}

TGT static inline void hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d, float out[4])
{
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);   /* [a, b, c, d | a', b', c', d'] */
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

/* ---- f32 rows. One accumulator per (row, token): 16 ymm registers hold
 * the 4x2 prefill tile's eight plus the loads; a lone row is latency
 * bound, but lone rows are only tails (and attention scores, whose
 * independent calls overlap out of order). ---- */

TGT static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        PF(a + i);
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s);
    }
    if (i < n)
        s = _mm256_fmadd_ps(ld8(a + i, n - i), ld8(x + i, n - i), s);
    return hsum8(s);
}

/* Four rows, one token: the x loads are shared. Decode of f32 weights
 * streams them from memory through here (dot4q_f32), hence the prefetches
 * (one per row per 64 bytes); prefill calls it only for an odd last
 * token. */
TGT static void dot4_f32(const float *w, int64_t ldw, const float *x, int64_t n, float out[4])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        PF(w0 + i);
        PF(w1 + i);
        PF(w2 + i);
        PF(w3 + i);
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), x0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), x0, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), x0, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), x0, a3);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i + 8), x1, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i + 8), x1, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i + 8), x1, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i + 8), x1, a3);
    }
    for (; i < n; i += 8) {
        __m256 x0 = ld8(x + i, n - i);
        a0 = _mm256_fmadd_ps(ld8(w0 + i, n - i), x0, a0);
        a1 = _mm256_fmadd_ps(ld8(w1 + i, n - i), x0, a1);
        a2 = _mm256_fmadd_ps(ld8(w2 + i, n - i), x0, a2);
        a3 = _mm256_fmadd_ps(ld8(w3 + i, n - i), x0, a3);
    }
    hsum8x4(a0, a1, a2, a3, out);
}

TGT static void dot4q_f32(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    dot4_f32(w, (int64_t)(rb / sizeof(float)), x, n, out);
}

/* Prefill register tile, 4 rows x 2 tokens: each loaded weight vector
 * feeds two FMAs. */
TGT static void dot4x2_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *y = x + ldx;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i), yv = _mm256_loadu_ps(y + i), v;
        v = _mm256_loadu_ps(w0 + i);
        a0 = _mm256_fmadd_ps(v, xv, a0);
        b0 = _mm256_fmadd_ps(v, yv, b0);
        v = _mm256_loadu_ps(w1 + i);
        a1 = _mm256_fmadd_ps(v, xv, a1);
        b1 = _mm256_fmadd_ps(v, yv, b1);
        v = _mm256_loadu_ps(w2 + i);
        a2 = _mm256_fmadd_ps(v, xv, a2);
        b2 = _mm256_fmadd_ps(v, yv, b2);
        v = _mm256_loadu_ps(w3 + i);
        a3 = _mm256_fmadd_ps(v, xv, a3);
        b3 = _mm256_fmadd_ps(v, yv, b3);
    }
    if (i < n) {
        int64_t l = n - i;
        __m256 xv = ld8(x + i, l), yv = ld8(y + i, l), v;
        v = ld8(w0 + i, l);
        a0 = _mm256_fmadd_ps(v, xv, a0);
        b0 = _mm256_fmadd_ps(v, yv, b0);
        v = ld8(w1 + i, l);
        a1 = _mm256_fmadd_ps(v, xv, a1);
        b1 = _mm256_fmadd_ps(v, yv, b1);
        v = ld8(w2 + i, l);
        a2 = _mm256_fmadd_ps(v, xv, a2);
        b2 = _mm256_fmadd_ps(v, yv, b2);
        v = ld8(w3 + i, l);
        a3 = _mm256_fmadd_ps(v, xv, a3);
        b3 = _mm256_fmadd_ps(v, yv, b3);
    }
    hsum8x4(a0, a1, a2, a3, out);
    hsum8x4(b0, b1, b2, b3, out + 4);
}

/* ---- half-precision rows: converted exactly, then the f32 order. The
 * last partial chunk pair goes through a zero-padded buffer, like the
 * masked loads of a dequantized row. ---- */

TGT static inline __m256 bf16x8(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

TGT static inline float bf16_1(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bt_bf16_to_f32(h);
}

TGT static inline float half_tail(const uint8_t *p, const float *x, int64_t l, bool bf, __m256 s)
{
    float t[8] = { 0 };
    for (int64_t k = 0; k < l; k++)
        t[k] = bf ? bf16_1(p + 2 * k) : ld_f16(p + 2 * k);
    return hsum8(_mm256_fmadd_ps(_mm256_loadu_ps(t), ld8(x, l), s));
}

TGT static float dot_f16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        PF(p + 2 * i);
        s = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))), _mm256_loadu_ps(x + i), s);
    }
    return i < n ? half_tail(p + 2 * i, x + i, n - i, false, s) : hsum8(s);
}

TGT static float dot_bf16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        PF(p + 2 * i);
        s = _mm256_fmadd_ps(bf16x8(p + 2 * i), _mm256_loadu_ps(x + i), s);
    }
    return i < n ? half_tail(p + 2 * i, x + i, n - i, true, s) : hsum8(s);
}

/* Decode of half-precision weights, four rows sharing the x loads: a lone
 * row is one latency-bound FMA chain. The tail goes through the same
 * zero-padded buffer as half_tail. */
TGT static inline __m256 half8(const uint8_t *p, bool bf)
{
    return bf ? bf16x8(p) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

TGT static inline void dot4q_half(const void *w, size_t rb, const float *x, int64_t n, bool bf, float out[4])
{
    const uint8_t *p[4] = { w, (const uint8_t *)w + rb, (const uint8_t *)w + 2 * rb, (const uint8_t *)w + 3 * rb };
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        PF(p[0] + 2 * i);
        PF(p[1] + 2 * i);
        PF(p[2] + 2 * i);
        PF(p[3] + 2 * i);
        __m256 xv = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(half8(p[0] + 2 * i, bf), xv, a0);
        a1 = _mm256_fmadd_ps(half8(p[1] + 2 * i, bf), xv, a1);
        a2 = _mm256_fmadd_ps(half8(p[2] + 2 * i, bf), xv, a2);
        a3 = _mm256_fmadd_ps(half8(p[3] + 2 * i, bf), xv, a3);
    }
    if (i < n) {
        float t[4][8] = { { 0 } };
        for (int r = 0; r < 4; r++)
            for (int64_t k = 0; k < n - i; k++)
                t[r][k] = bf ? bf16_1(p[r] + 2 * (i + k)) : ld_f16(p[r] + 2 * (i + k));
        __m256 xv = ld8(x + i, n - i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(t[0]), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(t[1]), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(t[2]), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(t[3]), xv, a3);
    }
    hsum8x4(a0, a1, a2, a3, out);
}

TGT static void dot4q_f16(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    dot4q_half(w, rb, x, n, false, out);
}

TGT static void dot4q_bf16(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    dot4q_half(w, rb, x, n, true, out);
}

/* ---- 32-element blocks: each block's weights are built in registers
 * exactly as the dequantizers below build them, then the f32 order. ---- */

/* Sign-extend 8 int8 at p to floats. */
TGT static inline __m256 i8x8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* The 32 nibbles of a q4 block as int32, zero-extended straight from
 * memory (two shuffles per block): e0 = elements 0..7, e1 = 8..15,
 * e2 = 16..23, e3 = 24..31. */
TGT static inline void nibbles(const uint8_t *qs, __m256i e[4])
{
    __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qs));
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8)));
    __m256i m = _mm256_set1_epi32(0x0F);
    e[0] = _mm256_and_si256(a, m);
    e[1] = _mm256_and_si256(b, m);
    e[2] = _mm256_srli_epi32(a, 4);
    e[3] = _mm256_srli_epi32(b, 4);
}

/* (q - 8) of a q4_0 block as floats. */
TGT static inline void q4_0_vals(const uint8_t *qs, __m256 q[4])
{
    __m256i e[4], eight = _mm256_set1_epi32(8);
    nibbles(qs, e);
    /* Written out: GCC -O2 does not unroll a loop over the array and
     * would keep it in memory. */
    q[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(e[0], eight));
    q[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(e[1], eight));
    q[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(e[2], eight));
    q[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(e[3], eight));
}

TGT static inline void q4_1_vals(const uint8_t *qs, __m256 q[4])
{
    __m256i e[4];
    nibbles(qs, e);
    q[0] = _mm256_cvtepi32_ps(e[0]);
    q[1] = _mm256_cvtepi32_ps(e[1]);
    q[2] = _mm256_cvtepi32_ps(e[2]);
    q[3] = _mm256_cvtepi32_ps(e[3]);
}

/* q8_0: q * d (exact). */
TGT static inline void w_q8_0(const uint8_t *b, __m256 w[4])
{
    __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]);
    w[0] = _mm256_mul_ps(i8x8(b + 2), d);
    w[1] = _mm256_mul_ps(i8x8(b + 10), d);
    w[2] = _mm256_mul_ps(i8x8(b + 18), d);
    w[3] = _mm256_mul_ps(i8x8(b + 26), d);
}

/* q4_0: (q - 8) * d (exact), with dq_q4_0's very operations: a cheaper
 * q * d + (-8 * d) FMA would give +0 where they give -0 (q = 8, d < 0). */
TGT static inline void w_q4_0(const uint8_t *b, __m256 w[4])
{
    __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]);
    q4_0_vals(b + 2, w);
    w[0] = _mm256_mul_ps(w[0], d);
    w[1] = _mm256_mul_ps(w[1], d);
    w[2] = _mm256_mul_ps(w[2], d);
    w[3] = _mm256_mul_ps(w[3], d);
}

/* q4_1: q * d + m as one FMA, which rounds once where dq_q4_1 rounds
 * twice; the same value, since q * d is exact. */
TGT static inline void w_q4_1(const uint8_t *b, __m256 w[4])
{
    __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]);
    __m256 m = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 2)]);
    q4_1_vals(b + 4, w);
    w[0] = _mm256_fmadd_ps(w[0], d, m);
    w[1] = _mm256_fmadd_ps(w[1], d, m);
    w[2] = _mm256_fmadd_ps(w[2], d, m);
    w[3] = _mm256_fmadd_ps(w[3], d, m);
}

/* One row; and four rows sharing the x loads (decode: interleaving hides
 * the per-row reduction and call that dominate short rows like 576, and
 * gives four independent FMA chains). */
#define BLOCK_DOTS(T, BS)                                                                        \
    TGT static float dot_##T(const void *w, const float *x, int64_t n)                           \
    {                                                                                            \
        const uint8_t *b = w;                                                                    \
        __m256 s = _mm256_setzero_ps(), v[4];                                                    \
        for (int64_t i = 0; i < n / QK; i++, b += BS, x += QK) {                                 \
            PF(b);                                                                               \
            w_##T(b, v);                                                                         \
            s = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(x), s);                                    \
            s = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), s);                                \
            s = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + 16), s);                               \
            s = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), s);                               \
        }                                                                                        \
        return hsum8(s);                                                                         \
    }                                                                                            \
    TGT static void dot4q_##T(const void *w, size_t rb, const float *x, int64_t n, float out[4]) \
    {                                                                                            \
        const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;                     \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, v[4];                        \
        for (int64_t i = 0; i < n / QK; i++, b0 += BS, b1 += BS, b2 += BS, b3 += BS, x += QK) {  \
            PF(b0);                                                                              \
            PF(b1);                                                                              \
            PF(b2);                                                                              \
            PF(b3);                                                                              \
            __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);                         \
            __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);                   \
            w_##T(b0, v);                                                                        \
            a0 = _mm256_fmadd_ps(v[0], x0, a0);                                                  \
            a0 = _mm256_fmadd_ps(v[1], x1, a0);                                                  \
            a0 = _mm256_fmadd_ps(v[2], x2, a0);                                                  \
            a0 = _mm256_fmadd_ps(v[3], x3, a0);                                                  \
            w_##T(b1, v);                                                                        \
            a1 = _mm256_fmadd_ps(v[0], x0, a1);                                                  \
            a1 = _mm256_fmadd_ps(v[1], x1, a1);                                                  \
            a1 = _mm256_fmadd_ps(v[2], x2, a1);                                                  \
            a1 = _mm256_fmadd_ps(v[3], x3, a1);                                                  \
            w_##T(b2, v);                                                                        \
            a2 = _mm256_fmadd_ps(v[0], x0, a2);                                                  \
            a2 = _mm256_fmadd_ps(v[1], x1, a2);                                                  \
            a2 = _mm256_fmadd_ps(v[2], x2, a2);                                                  \
            a2 = _mm256_fmadd_ps(v[3], x3, a2);                                                  \
            w_##T(b3, v);                                                                        \
            a3 = _mm256_fmadd_ps(v[0], x0, a3);                                                  \
            a3 = _mm256_fmadd_ps(v[1], x1, a3);                                                  \
            a3 = _mm256_fmadd_ps(v[2], x2, a3);                                                  \
            a3 = _mm256_fmadd_ps(v[3], x3, a3);                                                  \
        }                                                                                        \
        hsum8x4(a0, a1, a2, a3, out);                                                            \
    }

BLOCK_DOTS(q8_0, 34)
BLOCK_DOTS(q4_0, 18)
BLOCK_DOTS(q4_1, 20)

/* ---- q5_* and k-quants: 32 codes per ymm of bytes, then four vectors of
 * 8 (elements 0-7, 8-15, 16-23, 24-31 of the code run), each scaled with
 * the dequantizer's products and added into the one accumulator in order.
 * ---- */

TGT static inline __m256 u8f(__m128i c) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)); }
TGT static inline __m256 i8f(__m128i c) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)); }

/* w = d * code - m per 8 (d * code is exact; see the file header). Unsigned
 * codes; d0/m0 for elements 0..15, d1/m1 for 16..31. */
TGT static inline void codes_dm(__m256i c, float d0, float m0, float d1, float m1, __m256 w[4])
{
    __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    __m256 vd0 = _mm256_set1_ps(d0), vm0 = _mm256_set1_ps(m0), vd1 = _mm256_set1_ps(d1), vm1 = _mm256_set1_ps(m1);
    w[0] = _mm256_fmsub_ps(vd0, u8f(lo), vm0);
    w[1] = _mm256_fmsub_ps(vd0, u8f(_mm_unpackhi_epi64(lo, lo)), vm0);
    w[2] = _mm256_fmsub_ps(vd1, u8f(hi), vm1);
    w[3] = _mm256_fmsub_ps(vd1, u8f(_mm_unpackhi_epi64(hi, hi)), vm1);
}

/* w = d * code, signed codes. */
TGT static inline void codes_d(__m256i c, float d0, float d1, __m256 w[4])
{
    __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    __m256 vd0 = _mm256_set1_ps(d0), vd1 = _mm256_set1_ps(d1);
    w[0] = _mm256_mul_ps(vd0, i8f(lo));
    w[1] = _mm256_mul_ps(vd0, i8f(_mm_unpackhi_epi64(lo, lo)));
    w[2] = _mm256_mul_ps(vd1, i8f(hi));
    w[3] = _mm256_mul_ps(vd1, i8f(_mm_unpackhi_epi64(hi, hi)));
}

/* The 32 bits of a q5 block's qh as bytes 0x10 (set) or 0 (clear). */
TGT static inline __m256i q5_high(const uint8_t *p)
{
    uint32_t qh;
    memcpy(&qh, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The 32 codes (nibble | 5th bit) of a q5 block, element order. */
TGT static inline __m256i q5_codes(const uint8_t *qs, const uint8_t *qh)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i nib = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    nib = _mm256_and_si256(nib, _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(nib, q5_high(qh));
}

/* q5_0: (q - 16) * d (exact). */
TGT static inline void w_q5_0(const uint8_t *b, __m256 w[4])
{
    float d = ld_f16(b);
    codes_d(_mm256_sub_epi8(q5_codes(b + 6, b + 2), _mm256_set1_epi8(16)), d, d, w);
}

/* q5_1: q * d + m as one FMA (q * d exact). */
TGT static inline void w_q5_1(const uint8_t *b, __m256 w[4])
{
    float d = ld_f16(b), m = -ld_f16(b + 2);
    codes_dm(q5_codes(b + 8, b + 4), d, m, d, m, w);
}

/* The q5 types' dots are BLOCK_DOTS above; their dequantizer uses the
 * same register decode (and mxfp4's, below). */
#define BLOCK_DQ(T, BS)                                                                          \
    TGT static void dq_##T(const void *src, float *dst, int64_t n)                               \
    {                                                                                            \
        const uint8_t *b = src;                                                                  \
        __m256 v[4];                                                                             \
        for (int64_t i = 0; i < n / QK; i++, b += BS, dst += QK) {                               \
            w_##T(b, v);                                                                         \
            _mm256_storeu_ps(dst, v[0]);                                                         \
            _mm256_storeu_ps(dst + 8, v[1]);                                                     \
            _mm256_storeu_ps(dst + 16, v[2]);                                                    \
            _mm256_storeu_ps(dst + 24, v[3]);                                                    \
        }                                                                                        \
    }
BLOCK_DOTS(q5_0, 22)
BLOCK_DOTS(q5_1, 24)
BLOCK_DQ(q5_0, 22)
BLOCK_DQ(q5_1, 24)

/* mxfp4: the doubled E2M1 values looked up 16 at a time with one byte
 * shuffle (the code is the index), widened, converted and multiplied by
 * the half scale 2^(e-128): dq_mxfp4's product, exact (dequant.c). */
TGT static inline void w_mxfp4(const uint8_t *b, __m256 w[4])
{
    const __m128i lut = _mm_loadu_si128((const __m128i *)bt_kvalues_mxfp4), m4 = _mm_set1_epi8(0x0F);
    __m128i q = _mm_loadu_si128((const __m128i *)(b + 1));
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));                     /* elements 0..15 */
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));  /* 16..31 */
    __m256 d = _mm256_set1_ps(bt_e8m0_half(b[0]));
    w[0] = _mm256_mul_ps(i8f(lo), d);
    w[1] = _mm256_mul_ps(i8f(_mm_unpackhi_epi64(lo, lo)), d);
    w[2] = _mm256_mul_ps(i8f(hi), d);
    w[3] = _mm256_mul_ps(i8f(_mm_unpackhi_epi64(hi, hi)), d);
}
BLOCK_DOTS(mxfp4, 17)
BLOCK_DQ(mxfp4, 17)
#undef BLOCK_DOTS
#undef BLOCK_DQ

/* k-quant scales of one block: the dequantizer's products (exact); m is
 * subtracted, as in dequant.c. */
struct kscales {
    float d[16];
    float m[16];
};

/* 8 bytes (unsigned or signed) -> 8 floats times d: the dequantizer's
 * d * (float)code, one rounding, so exact. */
TGT static inline void scale8_u8(float *dst, __m128i v, float d)
{
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
}

TGT static inline void scale8_i8(float *dst, __m128i v, float d)
{
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
}

/* q4_K/q5_K scales and mins unpacked four at a time in 32-bit words (as
 * the AVX-512 file does), then converted eight at a time. */
TGT static inline void prep_k4(const uint8_t *b, struct kscales *ks)
{
    uint32_t a, m, c;
    memcpy(&a, b + 4, 4);
    memcpy(&m, b + 8, 4);
    memcpy(&c, b + 12, 4);
    __m128i v = _mm_setr_epi32((int)(a & 0x3F3F3F3Fu), (int)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)),
                               (int)(m & 0x3F3F3F3Fu), (int)(((c >> 4) & 0x0F0F0F0Fu) | ((m >> 2) & 0x30303030u)));
    scale8_u8(ks->d, v, ld_f16(b));
    scale8_u8(ks->m, _mm_srli_si128(v, 8), ld_f16(b + 2));
}
#define prep_q4_k prep_k4
#define prep_q5_k prep_k4

TGT static inline void prep_q6_k(const uint8_t *b, struct kscales *ks)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(b + 192));
    float d = ld_f16(b + 208);
    scale8_i8(ks->d, v, d);
    scale8_i8(ks->d + 8, _mm_srli_si128(v, 8), d);
}

/* q3_K: low nibbles from bytes 0..7, bits 4-5 from byte 8 + k%4 shifted
 * by 2*(k/4), then d * (float)(sc - 32) (exact: sc - 32 as a signed byte). */
TGT static inline void prep_q3_k(const uint8_t *b, struct kscales *ks)
{
    const uint8_t *s = b + 96;
    const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3);
    __m128i v = _mm_loadl_epi64((const __m128i *)s);
    __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t h;
    memcpy(&h, s + 8, 4);
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)h), _mm_setr_epi32(0, 2, 4, 6)), m2);
    __m128i sc = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    float d = ld_f16(b + 108);
    scale8_i8(ks->d, sc, d);
    scale8_i8(ks->d + 8, _mm_srli_si128(sc, 8), d);
}

TGT static inline void prep_q2_k(const uint8_t *b, struct kscales *ks)
{
    __m128i v = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(0x0F);
    __m128i sc = _mm_and_si128(v, m4), mn = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
    float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    scale8_u8(ks->d, sc, d);
    scale8_u8(ks->d + 8, _mm_srli_si128(sc, 8), d);
    scale8_u8(ks->m, mn, dmin);
    scale8_u8(ks->m + 8, _mm_srli_si128(mn, 8), dmin);
}

/* Sub-block runs of 32 elements, j = 0..7, in element order. */
TGT static inline void sub_q4_k(const uint8_t *b, const struct kscales *ks, int j, __m256 w[4])
{
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * (j >> 1)));
    if (j & 1)
        q = _mm256_srli_epi16(q, 4);
    q = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
    codes_dm(q, ks->d[j], ks->m[j], ks->d[j], ks->m[j], w);
}

TGT static inline void sub_q5_k(const uint8_t *b, const struct kscales *ks, int j, __m256 w[4])
{
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * (j >> 1)));
    __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
    if (j & 1)
        q = _mm256_srli_epi16(q, 4);
    q = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
    /* bit j of each qh byte -> 0x10 */
    __m256i bit = _mm256_set1_epi8((char)(1 << j));
    h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(0x10));
    codes_dm(_mm256_or_si256(q, h), ks->d[j], ks->m[j], ks->d[j], ks->m[j], w);
}

TGT static inline void sub_q6_k(const uint8_t *b, const struct kscales *ks, int j, __m256 w[4])
{
    int h = j >> 2, g = j & 3;
    __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (g & 1)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
    if (g & 2)
        ql = _mm256_srli_epi16(ql, 4);
    ql = _mm256_and_si256(ql, _mm256_set1_epi8(0x0F));
    /* bits 2g, 2g+1 of qh -> bits 4, 5 */
    qh = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2) : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
    qh = _mm256_and_si256(qh, _mm256_set1_epi8(0x30));
    __m256i c = _mm256_sub_epi8(_mm256_or_si256(ql, qh), _mm256_set1_epi8(32));
    codes_d(c, ks->d[8 * h + 2 * g], ks->d[8 * h + 2 * g + 1], w);
}

TGT static inline void sub_q3_k(const uint8_t *b, const struct kscales *ks, int j, __m256 w[4])
{
    int h = j >> 2, jj = j & 3;
    __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * h));
    __m256i hm = _mm256_loadu_si256((const __m256i *)b);
    __m256i c = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * jj), _mm256_set1_epi8(3));
    __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, _mm256_set1_epi8((char)(1 << j))), _mm256_setzero_si256());
    c = _mm256_sub_epi8(c, _mm256_and_si256(clear, _mm256_set1_epi8(4)));
    codes_d(c, ks->d[8 * h + 2 * jj], ks->d[8 * h + 2 * jj + 1], w);
}

TGT static inline void sub_q2_k(const uint8_t *b, const struct kscales *ks, int j, __m256 w[4])
{
    int h = j >> 2, jj = j & 3, k = 8 * h + 2 * jj;
    __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * h));
    __m256i c = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * jj), _mm256_set1_epi8(3));
    codes_dm(c, ks->d[k], ks->m[k], ks->d[k + 1], ks->m[k + 1], w);
}

#define PF_BLOCK(b, BS)                       \
    do {                                      \
        for (int o_ = 0; o_ < BS; o_ += 64)   \
            PF((b) + o_);                     \
    } while (0)

/* One block of one row into accumulator s, x = its 256 activations. */
#define KQ_BLOCK(T, b, x, s)                                                 \
    do {                                                                     \
        struct kscales ks_;                                                  \
        prep_##T(b, &ks_);                                                   \
        for (int j_ = 0; j_ < 8; j_++) {                                     \
            __m256 v_[4];                                                    \
            const float *xj_ = (x) + 32 * j_;                                \
            sub_##T(b, &ks_, j_, v_);                                        \
            s = _mm256_fmadd_ps(v_[0], _mm256_loadu_ps(xj_), s);             \
            s = _mm256_fmadd_ps(v_[1], _mm256_loadu_ps(xj_ + 8), s);         \
            s = _mm256_fmadd_ps(v_[2], _mm256_loadu_ps(xj_ + 16), s);        \
            s = _mm256_fmadd_ps(v_[3], _mm256_loadu_ps(xj_ + 24), s);        \
        }                                                                    \
    } while (0)

#define KQ_DOTS(T, BS)                                                                           \
    TGT static float dot_##T(const void *w, const float *x, int64_t n)                           \
    {                                                                                            \
        const uint8_t *b = w;                                                                    \
        __m256 s = _mm256_setzero_ps();                                                          \
        for (int64_t i = 0; i < n / QK_K; i++, b += BS, x += QK_K) {                             \
            PF_BLOCK(b, BS);                                                                     \
            KQ_BLOCK(T, b, x, s);                                                                \
        }                                                                                        \
        return hsum8(s);                                                                         \
    }                                                                                            \
    TGT static void dot4q_##T(const void *w, size_t rb, const float *x, int64_t n, float out[4]) \
    {                                                                                            \
        const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;                     \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        for (int64_t i = 0; i < n / QK_K; i++, b0 += BS, b1 += BS, b2 += BS, b3 += BS, x += QK_K) { \
            PF_BLOCK(b0, BS);                                                                    \
            PF_BLOCK(b1, BS);                                                                    \
            PF_BLOCK(b2, BS);                                                                    \
            PF_BLOCK(b3, BS);                                                                    \
            KQ_BLOCK(T, b0, x, a0);                                                              \
            KQ_BLOCK(T, b1, x, a1);                                                              \
            KQ_BLOCK(T, b2, x, a2);                                                              \
            KQ_BLOCK(T, b3, x, a3);                                                              \
        }                                                                                        \
        hsum8x4(a0, a1, a2, a3, out);                                                            \
    }                                                                                            \
    TGT static void dq_##T(const void *src, float *dst, int64_t n)                               \
    {                                                                                            \
        const uint8_t *b = src;                                                                  \
        for (int64_t i = 0; i < n / QK_K; i++, b += BS) {                                        \
            struct kscales ks_;                                                                  \
            prep_##T(b, &ks_);                                                                   \
            for (int j = 0; j < 8; j++, dst += 32) {                                             \
                __m256 v[4];                                                                     \
                sub_##T(b, &ks_, j, v);                                                          \
                _mm256_storeu_ps(dst, v[0]);                                                     \
                _mm256_storeu_ps(dst + 8, v[1]);                                                 \
                _mm256_storeu_ps(dst + 16, v[2]);                                                \
                _mm256_storeu_ps(dst + 24, v[3]);                                                \
            }                                                                                    \
        }                                                                                        \
    }

KQ_DOTS(q2_k, 84)
KQ_DOTS(q3_k, 110)
KQ_DOTS(q4_k, 144)
KQ_DOTS(q5_k, 176)
KQ_DOTS(q6_k, 210)
#undef KQ_DOTS

/* ---- dequantizers (bit-identical to dequant.c) ---- */

TGT static void dq_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
    for (; i < n; i++)
        dst[i] = ld_f16(p + 2 * i);
}

TGT static void dq_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, bf16x8(p + 2 * i));
    for (; i < n; i++)
        dst[i] = bf16_1(p + 2 * i);
}

TGT static void dq_q8_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, dst += QK) {
        __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]);
        _mm256_storeu_ps(dst, _mm256_mul_ps(i8x8(b + 2), d));
        _mm256_storeu_ps(dst + 8, _mm256_mul_ps(i8x8(b + 10), d));
        _mm256_storeu_ps(dst + 16, _mm256_mul_ps(i8x8(b + 18), d));
        _mm256_storeu_ps(dst + 24, _mm256_mul_ps(i8x8(b + 26), d));
    }
}

TGT static void dq_q4_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q[4];
        q4_0_vals(b + 2, q);
        _mm256_storeu_ps(dst, _mm256_mul_ps(q[0], d));
        _mm256_storeu_ps(dst + 8, _mm256_mul_ps(q[1], d));
        _mm256_storeu_ps(dst + 16, _mm256_mul_ps(q[2], d));
        _mm256_storeu_ps(dst + 24, _mm256_mul_ps(q[3], d));
    }
}

TGT static void dq_q4_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, dst += QK) {
        __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), m = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 2)]), q[4];
        q4_1_vals(b + 4, q);
        __m256 t0 = _mm256_mul_ps(d, q[0]), t1 = _mm256_mul_ps(d, q[1]);
        __m256 t2 = _mm256_mul_ps(d, q[2]), t3 = _mm256_mul_ps(d, q[3]);
        BT_NOFUSE_V(t0);
        BT_NOFUSE_V(t1);
        BT_NOFUSE_V(t2);
        BT_NOFUSE_V(t3);
        _mm256_storeu_ps(dst, _mm256_add_ps(t0, m));
        _mm256_storeu_ps(dst + 8, _mm256_add_ps(t1, m));
        _mm256_storeu_ps(dst + 16, _mm256_add_ps(t2, m));
        _mm256_storeu_ps(dst + 24, _mm256_add_ps(t3, m));
    }
}

/* ---- softmax's scale and max (kernels.h: bt_scale_max_f32), as the
 * AVX-512 one: max(s, m) keeps m when s is NaN. ---- */
TGT static float scale_max_f32(float *x, int64_t n, float scale)
{
    __m256 sc = _mm256_set1_ps(scale), m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc), b = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), sc);
        _mm256_storeu_ps(x + i, a);
        _mm256_storeu_ps(x + i + 8, b);
        m0 = _mm256_max_ps(a, m0);
        m1 = _mm256_max_ps(b, m1);
    }
    float l[8];
    _mm256_storeu_ps(l, _mm256_max_ps(m1, m0));
    float m = -INFINITY;
    for (int j = 0; j < 8; j++)
        if (l[j] > m) m = l[j];
    for (; i < n; i++) {
        float s = x[i] * scale;
        x[i] = s;
        if (s > m) m = s;
    }
    return m;
}

/* ---- attention's weighted sum (kernels.h: bt_wsum_f32): the plain
 * loop's roundings lane by lane (mul, then add, never fused), 32 floats of
 * the head in four registers across all positions, a scalar tail. ---- */
TGT static void wsum_f32(float *acc, const float *wts, float scale, const float *v, int64_t ldv, int64_t np, int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
        __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
        for (int64_t p = 0; p < np; p++) {
            __m256 w = _mm256_set1_ps(wts[p] * scale);
            const float *vp = v + p * ldv + i;
            __m256 t0 = _mm256_mul_ps(w, _mm256_loadu_ps(vp)), t1 = _mm256_mul_ps(w, _mm256_loadu_ps(vp + 8));
            __m256 t2 = _mm256_mul_ps(w, _mm256_loadu_ps(vp + 16)), t3 = _mm256_mul_ps(w, _mm256_loadu_ps(vp + 24));
            BT_NOFUSE_V(t0);
            BT_NOFUSE_V(t1);
            BT_NOFUSE_V(t2);
            BT_NOFUSE_V(t3);
            a0 = _mm256_add_ps(a0, t0);
            a1 = _mm256_add_ps(a1, t1);
            a2 = _mm256_add_ps(a2, t2);
            a3 = _mm256_add_ps(a3, t3);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
        _mm256_storeu_ps(acc + i + 16, a2);
        _mm256_storeu_ps(acc + i + 24, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i);
        for (int64_t p = 0; p < np; p++) {
            __m256 t = _mm256_mul_ps(_mm256_set1_ps(wts[p] * scale), _mm256_loadu_ps(v + p * ldv + i));
            BT_NOFUSE_V(t);
            a = _mm256_add_ps(a, t);
        }
        _mm256_storeu_ps(acc + i, a);
    }
    for (; i < n; i++)
        for (int64_t p = 0; p < np; p++) {
            float t = (wts[p] * scale) * v[p * ldv + i];
            BT_NOFUSE_F(t);
            acc[i] += t;
        }
}

/* ---- the tap statistics' sweep (kernels.h, dot.c): 8 float lanes per
 * 64-element chunk, as the scalar sweep, so the same bits. No FMA in the
 * target: the scalar code rounds v * v before adding it. ---- */

/* One chunk x[0..64): its lane sums, sums of squares and its own min and
 * max (from +-Inf, by the scalar rule v < m ? v : m, so each keeps the
 * first of equal values), before knowing whether it is finite: a NaN
 * makes its lane's sum NaN (finite values can overflow a sum to Inf,
 * never to NaN), a +Inf its max +Inf, a -Inf its min -Inf. That is the
 * check, instead of a compare per vector: true when the chunk is finite. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) bool
sweep_chunk8(const float *x, __m256 *cs, __m256 *cq, __m256 *lmn, __m256 *lmx)
{
    const __m256 pinf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
    __m256 s = _mm256_setzero_ps(), q = s, mn = pinf, mx = ninf;
    for (int k = 0; k < 8; k++) {
        __m256 v = _mm256_loadu_ps(x + 8 * k);
        s = _mm256_add_ps(s, v);
        q = _mm256_add_ps(q, _mm256_mul_ps(v, v));
        mn = _mm256_min_ps(v, mn);    /* v < m ? v : m, the scalar rule (a NaN v leaves m) */
        mx = _mm256_max_ps(v, mx);
    }
    *cs = s; *cq = q; *lmn = mn; *lmx = mx;
    __m256 bad = _mm256_or_ps(_mm256_cmp_ps(s, s, _CMP_UNORD_Q),
                              _mm256_or_ps(_mm256_cmp_ps(mx, pinf, _CMP_EQ_OQ), _mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ)));
    return _mm256_testz_ps(bad, bad);
}

__attribute__((target("avx2"))) int64_t bt_sweep_f32_avx2(const float *x, int64_t n, bt_sweep *acc)
{
    __m256 mn = _mm256_loadu_ps(acc->mn), mx = _mm256_loadu_ps(acc->mx);
    __m256d s0 = _mm256_loadu_pd(acc->sum), s1 = _mm256_loadu_pd(acc->sum + 4);
    __m256d q0 = _mm256_loadu_pd(acc->sumsq), q1 = _mm256_loadu_pd(acc->sumsq + 4);
    int64_t i = 0;
    bool stopped = false;
    for (; i + 64 <= n; i += 64) {
        __m256 s, q, lmn, lmx;
        if (!sweep_chunk8(x + i, &s, &q, &lmn, &lmx)) {
            stopped = true;
            break;
        }
        /* the chunk's min after the earlier ones': the scalar loop's
         * element by element (a tie keeps the earlier value) */
        mn = _mm256_min_ps(lmn, mn);
        mx = _mm256_max_ps(lmx, mx);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(s)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1)));
        q0 = _mm256_add_pd(q0, _mm256_cvtps_pd(_mm256_castps256_ps128(q)));
        q1 = _mm256_add_pd(q1, _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1)));
    }
    _mm256_storeu_ps(acc->mn, mn);
    _mm256_storeu_ps(acc->mx, mx);
    _mm256_storeu_pd(acc->sum, s0);
    _mm256_storeu_pd(acc->sum + 4, s1);
    _mm256_storeu_pd(acc->sumsq, q0);
    _mm256_storeu_pd(acc->sumsq + 4, q1);
    if (stopped || i >= n)
        return i;
    return i + bt_sweep_f32_scalar(x + i, n - i, acc);
}

/* The chunks of that sweep stored, not folded (kernels.h:
 * bt_sweep_chunks_f32): the same operations per chunk. */
__attribute__((target("avx2"))) int64_t bt_sweep_chunks_f32_avx2(const float *x, int64_t nc, bt_sweep_chunk *out)
{
    for (int64_t c = 0; c < nc; c++, x += 64) {
        __m256 s, q, lmn, lmx;
        if (!sweep_chunk8(x, &s, &q, &lmn, &lmx))
            return c;
        _mm256_storeu_ps(out[c].s, s);
        _mm256_storeu_ps(out[c].q, q);
        _mm256_storeu_ps(out[c].mn, lmn);
        _mm256_storeu_ps(out[c].mx, lmx);
    }
    return nc;
}

/* ---- a softmax row's entropy chains (kernels.h: bt_softmax_sums_f32):
 * chain l of the four is lane l of a double vector; eight elements a turn
 * go in as two adds, elements j .. j+3 then j+4 .. j+7, the scalar loop's
 * order. An element whose e is 0 adds +0, which leaves a chain's value as
 * skipping it does (z is never -0; ez gets only negative terms). The
 * product is rounded before the add: no FMA in the target. ---- */

__attribute__((target("avx2"))) void bt_softmax_acc_f64_avx2(const float *e, const float *x, int64_t k, float m,
                                                              double z[4], double ez[4])
{
    const __m256d md = _mm256_set1_pd(m), zero = _mm256_setzero_pd();
    __m256d vz = _mm256_loadu_pd(z), vez = _mm256_loadu_pd(ez);
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
        __m256 e8 = _mm256_loadu_ps(e + j), x8 = _mm256_loadu_ps(x + j);
        __m256d e0 = _mm256_cvtps_pd(_mm256_castps256_ps128(e8)), e1 = _mm256_cvtps_pd(_mm256_extractf128_ps(e8, 1));
        __m256d d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x8)), md);
        __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x8, 1)), md);
        __m256d k0 = _mm256_cmp_pd(e0, zero, _CMP_NEQ_OQ), k1 = _mm256_cmp_pd(e1, zero, _CMP_NEQ_OQ);
        vz = _mm256_add_pd(vz, _mm256_and_pd(e0, k0));
        vez = _mm256_add_pd(vez, _mm256_and_pd(_mm256_mul_pd(e0, d0), k0));
        vz = _mm256_add_pd(vz, _mm256_and_pd(e1, k1));
        vez = _mm256_add_pd(vez, _mm256_and_pd(_mm256_mul_pd(e1, d1), k1));
    }
    _mm256_storeu_pd(z, vz);
    _mm256_storeu_pd(ez, vez);
    if (j < k) {
        /* the tail from a multiple of 8: its chain numbers start at 0 again */
        bt_softmax_acc_f64_scalar(e + j, x + j, k - j, m, z, ez);
    }
}

/* ---- the delta rule's token (kernels.h: bt_gdn_seq_f32): columns in
 * lanes, 32 at a time (four independent sums), then 8 at a time, then a
 * scalar tail; per lane the scalar loop's roundings (mul, then add, never
 * fused). ---- */
#define GDN_W 4
TGT static void gdn_cols8(float *S, int64_t dk, int64_t dv, int64_t c, int nw, __m256 dec, __m256 bt,
                          const float *k, const float *v, const float *qs, float *out)
{
    __m256 a[GDN_W], u[GDN_W];
    for (int j = 0; j < nw; j++) a[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; i++) {
        float *r = S + i * dv + c;
        __m256 ki = _mm256_set1_ps(k[i]);
        for (int j = 0; j < nw; j++) {
            __m256 s = _mm256_mul_ps(_mm256_loadu_ps(r + 8 * j), dec);
            _mm256_storeu_ps(r + 8 * j, s);
            __m256 t = _mm256_mul_ps(ki, s);
            BT_NOFUSE_V(t);
            a[j] = _mm256_add_ps(a[j], t);
        }
    }
    for (int j = 0; j < nw; j++) {
        u[j] = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + c + 8 * j), a[j]), bt);
        a[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < dk; i++) {
        float *r = S + i * dv + c;
        __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(qs[i]);
        for (int j = 0; j < nw; j++) {
            __m256 t = _mm256_mul_ps(ki, u[j]);
            BT_NOFUSE_V(t);
            __m256 s = _mm256_add_ps(_mm256_loadu_ps(r + 8 * j), t);
            _mm256_storeu_ps(r + 8 * j, s);
            __m256 t2 = _mm256_mul_ps(qi, s);
            BT_NOFUSE_V(t2);
            a[j] = _mm256_add_ps(a[j], t2);
        }
    }
    for (int j = 0; j < nw; j++) _mm256_storeu_ps(out + c + 8 * j, a[j]);
}

TGT static void gdn_cols_f32(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, float decay, const float *k,
                             const float *v, float beta, const float *qs, float *out)
{
    const __m256 dec = _mm256_set1_ps(decay), bt = _mm256_set1_ps(beta);
    int64_t c = c0;
    for (; c + 8 * GDN_W <= c1; c += 8 * GDN_W) gdn_cols8(S, dk, dv, c, GDN_W, dec, bt, k, v, qs, out);
    if (c + 8 <= c1) {
        int nw = (int)((c1 - c) / 8);
        gdn_cols8(S, dk, dv, c, nw, dec, bt, k, v, qs, out);
        c += 8 * nw;
    }
    bt_gdn_cols_scalar(S, dk, dv, c, c1, decay, k, v, beta, qs, out);   /* the columns left, as the reference */
}
#undef GDN_W

bool bt_kv_avx2_fill(bt_kvariant *kv)
{
    kv->name = "avx2";
    kv->dequant[BT_DT_F16] = dq_f16;
    kv->dequant[BT_DT_BF16] = dq_bf16;
    kv->dequant[BT_DT_Q8_0] = dq_q8_0;
    kv->dequant[BT_DT_Q4_0] = dq_q4_0;
    kv->dequant[BT_DT_Q4_1] = dq_q4_1;
    kv->dequant[BT_DT_Q5_0] = dq_q5_0;
    kv->dequant[BT_DT_Q5_1] = dq_q5_1;
    kv->dequant[BT_DT_MXFP4] = dq_mxfp4;
    kv->dequant[BT_DT_Q2_K] = dq_q2_k;
    kv->dequant[BT_DT_Q3_K] = dq_q3_k;
    kv->dequant[BT_DT_Q4_K] = dq_q4_k;
    kv->dequant[BT_DT_Q5_K] = dq_q5_k;
    kv->dequant[BT_DT_Q6_K] = dq_q6_k;
    kv->dot[BT_DT_F32] = dot_f32;
    kv->dot[BT_DT_F16] = dot_f16;
    kv->dot[BT_DT_BF16] = dot_bf16;
    kv->dot[BT_DT_Q8_0] = dot_q8_0;
    kv->dot[BT_DT_Q4_0] = dot_q4_0;
    kv->dot[BT_DT_Q4_1] = dot_q4_1;
    kv->dot[BT_DT_Q5_0] = dot_q5_0;
    kv->dot[BT_DT_Q5_1] = dot_q5_1;
    kv->dot[BT_DT_MXFP4] = dot_mxfp4;
    kv->dot[BT_DT_Q2_K] = dot_q2_k;
    kv->dot[BT_DT_Q3_K] = dot_q3_k;
    kv->dot[BT_DT_Q4_K] = dot_q4_k;
    kv->dot[BT_DT_Q5_K] = dot_q5_k;
    kv->dot[BT_DT_Q6_K] = dot_q6_k;
    kv->dot4_f32 = dot4_f32;
    kv->dot4x2_f32 = dot4x2_f32;
    kv->dot4q[BT_DT_F32] = dot4q_f32;
    kv->dot4q[BT_DT_F16] = dot4q_f16;
    kv->dot4q[BT_DT_BF16] = dot4q_bf16;
    kv->dot4q[BT_DT_Q8_0] = dot4q_q8_0;
    kv->dot4q[BT_DT_Q4_0] = dot4q_q4_0;
    kv->dot4q[BT_DT_Q4_1] = dot4q_q4_1;
    kv->dot4q[BT_DT_Q5_0] = dot4q_q5_0;
    kv->dot4q[BT_DT_Q5_1] = dot4q_q5_1;
    kv->dot4q[BT_DT_MXFP4] = dot4q_mxfp4;
    kv->dot4q[BT_DT_Q2_K] = dot4q_q2_k;
    kv->dot4q[BT_DT_Q3_K] = dot4q_q3_k;
    kv->dot4q[BT_DT_Q4_K] = dot4q_q4_k;
    kv->dot4q[BT_DT_Q5_K] = dot4q_q5_k;
    kv->dot4q[BT_DT_Q6_K] = dot4q_q6_k;
    kv->sweep_f32 = bt_sweep_f32_avx2;
    kv->sweep_chunks_f32 = bt_sweep_chunks_f32_avx2;
    kv->wsum_f32 = wsum_f32;
    kv->scale_max_f32 = scale_max_f32;
    kv->exp_sub_f32 = bt_exp_sub_f32_avx2;
    kv->gdn_cols_f32 = gdn_cols_f32;
    kv->softmax_acc_f64 = bt_softmax_acc_f64_avx2;
    return true;
}

#else

bool bt_kv_avx2_fill(bt_kvariant *kv)
{
    (void)kv;
    return false;
}

#endif
