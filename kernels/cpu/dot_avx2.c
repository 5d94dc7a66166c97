/* dot_avx2.c - AVX2 + FMA + F16C kernels for the common weight types
 * (f32, f16, bf16, q8_0, q4_0, q4_1). Compiled with per-function target
 * attributes so the build needs no special flags; bt_kernels_init() only
 * installs them when the CPU reports all three features.
 *
 * Dots accumulate in f32 vectors with FMA (they differ from the scalar code
 * by reassociation only). Dequantizers must match the scalar code bit for
 * bit, so they use the same single roundings and never fuse (BT_NOFUSE_V). */
#include "kernels_impl.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#include "util.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define QK 32
/* Software prefetch ahead in the weight stream (see dot_avx512.c). */
#define PF_DIST 1024
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

/* Plain adds only: a NaN or Inf in any lane reaches the result. */
TGT static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PF(a + i);
        PF(a + i + 16);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
    float r = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        r += a[i] * x[i];
    return r;
}

TGT static void dot4_f32(const float *w, int64_t ldw, const float *x, int64_t n, float out[4])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), x0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), x0, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), x0, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), x0, a3);
        b0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i + 8), x1, b0);
        b1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i + 8), x1, b1);
        b2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i + 8), x1, b2);
        b3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i + 8), x1, b3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), x0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), x0, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), x0, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), x0, a3);
    }
    float r0 = hsum8(_mm256_add_ps(a0, b0)), r1 = hsum8(_mm256_add_ps(a1, b1));
    float r2 = hsum8(_mm256_add_ps(a2, b2)), r3 = hsum8(_mm256_add_ps(a3, b3));
    for (; i < n; i++) {
        r0 += w0[i] * x[i];
        r1 += w1[i] * x[i];
        r2 += w2[i] * x[i];
        r3 += w3[i] * x[i];
    }
    out[0] = r0;
    out[1] = r1;
    out[2] = r2;
    out[3] = r3;
}

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
    float r[8] = { hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3), hsum8(b0), hsum8(b1), hsum8(b2), hsum8(b3) };
    for (; i < n; i++) {
        r[0] += w0[i] * x[i];
        r[1] += w1[i] * x[i];
        r[2] += w2[i] * x[i];
        r[3] += w3[i] * x[i];
        r[4] += w0[i] * y[i];
        r[5] += w1[i] * y[i];
        r[6] += w2[i] * y[i];
        r[7] += w3[i] * y[i];
    }
    memcpy(out, r, sizeof(r));
}

TGT static float dot_f16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        PF(p + 2 * i);
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i + 16)));
        s0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), s1);
    }
    float r = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        r += ld_f16(p + 2 * i) * x[i];
    return r;
}

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

TGT static float dot_bf16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        PF(p + 2 * i);
        s0 = _mm256_fmadd_ps(bf16x8(p + 2 * i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(bf16x8(p + 2 * i + 16), _mm256_loadu_ps(x + i + 8), s1);
    }
    float r = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        r += bf16_1(p + 2 * i) * x[i];
    return r;
}

/* Sign-extend 8 int8 at p to floats. */
TGT static inline __m256 i8x8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

TGT static inline __m256 q8_0_block(const uint8_t *b, const float *x)
{
    __m256 s = _mm256_mul_ps(i8x8(b + 2), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(i8x8(b + 10), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(i8x8(b + 18), _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(i8x8(b + 26), _mm256_loadu_ps(x + 24), s);
}

TGT static float dot_q8_0(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; i + 2 <= nb; i += 2, b += 68, x += 64) {
        PF(b);
        PF(b + 64);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q8_0_block(b, x), a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 34)]), q8_0_block(b + 34, x + 32), a1);
    }
    if (i < nb)
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q8_0_block(b, x), a0);
    return hsum8(_mm256_add_ps(a0, a1));
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

TGT static inline __m256 q4_0_block(const uint8_t *b, const float *x)
{
    __m256 q[4];
    q4_0_vals(b + 2, q);
    __m256 s = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), s);
}

TGT static float dot_q4_0(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; i + 2 <= nb; i += 2, b += 36, x += 64) {
        PF(b);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q4_0_block(b, x), a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 18)]), q4_0_block(b + 18, x + 32), a1);
    }
    if (i < nb)
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q4_0_block(b, x), a0);
    return hsum8(_mm256_add_ps(a0, a1));
}

/* q4_1 folds the min into the weight: w = q*d + m (one FMA, exactly the
 * dequantized weight since q*d is exact), then acc += w*x; four
 * accumulators, one per 8-element group, so FMAs do not chain. */
TGT static float dot_q4_1(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n / QK; i++, b += 20, x += QK) {
        PF(b);
        __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]);
        __m256 m = _mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 2)]), q[4];
        q4_1_vals(b + 4, q);
        a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[0], d, m), _mm256_loadu_ps(x), a0);
        a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[1], d, m), _mm256_loadu_ps(x + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[2], d, m), _mm256_loadu_ps(x + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[3], d, m), _mm256_loadu_ps(x + 24), a3);
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* Four 8-lane accumulators to four floats through one tree of plain adds. */
TGT static inline void hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d, float out[4])
{
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    __m256 abcd = _mm256_hadd_ps(ab, cd);   /* [a, b, c, d | a', b', c', d'] */
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

/* Decode, four rows at once: the x loads are shared by the rows. */
TGT static void dot4q_q8_0(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    const uint8_t *b[4] = { w, (const uint8_t *)w + rb, (const uint8_t *)w + 2 * rb, (const uint8_t *)w + 3 * rb };
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
        __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
        const uint8_t *p0 = b[0] + i * 34, *p1 = b[1] + i * 34, *p2 = b[2] + i * 34, *p3 = b[3] + i * 34;
        PF(p0);
        PF(p1);
        PF(p2);
        PF(p3);
#define Q8ROW(p, acc)                                                                              \
        do {                                                                                       \
            __m256 s = _mm256_mul_ps(i8x8(p + 2), x0);                                              \
            s = _mm256_fmadd_ps(i8x8(p + 10), x1, s);                                               \
            s = _mm256_fmadd_ps(i8x8(p + 18), x2, s);                                               \
            s = _mm256_fmadd_ps(i8x8(p + 26), x3, s);                                               \
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(p)]), s, acc);           \
        } while (0)
        Q8ROW(p0, a0);
        Q8ROW(p1, a1);
        Q8ROW(p2, a2);
        Q8ROW(p3, a3);
#undef Q8ROW
    }
    hsum8x4(a0, a1, a2, a3, out);
}

TGT static void dot4q_q4_1(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    const uint8_t *b[4] = { w, (const uint8_t *)w + rb, (const uint8_t *)w + 2 * rb, (const uint8_t *)w + 3 * rb };
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
        __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
#define Q41ROW(r)                                                                                  \
        do {                                                                                       \
            const uint8_t *p = b[r] + i * 20;                                                       \
            PF(p);                                                                                  \
            __m256 d = _mm256_broadcast_ss(&bt_f16_table[ld_u16(p)]);                               \
            __m256 m = _mm256_broadcast_ss(&bt_f16_table[ld_u16(p + 2)]), q[4];                     \
            q4_1_vals(p + 4, q);                                                                    \
            __m256 s = _mm256_mul_ps(_mm256_fmadd_ps(q[0], d, m), x0);                              \
            s = _mm256_fmadd_ps(_mm256_fmadd_ps(q[1], d, m), x1, s);                                \
            s = _mm256_fmadd_ps(_mm256_fmadd_ps(q[2], d, m), x2, s);                                \
            s = _mm256_fmadd_ps(_mm256_fmadd_ps(q[3], d, m), x3, s);                                \
            acc[r] = _mm256_add_ps(acc[r], s);                                                      \
        } while (0)
        Q41ROW(0);
        Q41ROW(1);
        Q41ROW(2);
        Q41ROW(3);
#undef Q41ROW
    }
    hsum8x4(acc[0], acc[1], acc[2], acc[3], out);
}

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

bool bt_kv_avx2_fill(bt_kvariant *kv)
{
    kv->name = "avx2";
    kv->dot[BT_DT_F32] = dot_f32;
    kv->dot[BT_DT_F16] = dot_f16;
    kv->dot[BT_DT_BF16] = dot_bf16;
    kv->dot[BT_DT_Q8_0] = dot_q8_0;
    kv->dot[BT_DT_Q4_0] = dot_q4_0;
    kv->dot[BT_DT_Q4_1] = dot_q4_1;
    kv->dot4_f32 = dot4_f32;
    kv->dot4x2_f32 = dot4x2_f32;
    kv->dot4q[BT_DT_Q8_0] = dot4q_q8_0;
    kv->dot4q[BT_DT_Q4_1] = dot4q_q4_1;
    kv->dequant[BT_DT_F16] = dq_f16;
    kv->dequant[BT_DT_BF16] = dq_bf16;
    kv->dequant[BT_DT_Q8_0] = dq_q8_0;
    kv->dequant[BT_DT_Q4_0] = dq_q4_0;
    kv->dequant[BT_DT_Q4_1] = dq_q4_1;
    return true;
}

#else

bool bt_kv_avx2_fill(bt_kvariant *kv)
{
    (void)kv;
    return false;
}

#endif
