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

TGT static float dot_f16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
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
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q4_0_block(b, x), a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 18)]), q4_0_block(b + 18, x + 32), a1);
    }
    if (i < nb)
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), q4_0_block(b, x), a0);
    return hsum8(_mm256_add_ps(a0, a1));
}

/* One q4_1 block: ad += d * sum(q*x), am += m * sum(x) (separate
 * accumulators, so the two FMAs do not chain). */
TGT static inline void q4_1_block(const uint8_t *b, const float *x, __m256 *ad, __m256 *am)
{
    __m256 q[4];
    q4_1_vals(b + 4, q);
    __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
    __m256 s = _mm256_mul_ps(q[0], x0);
    s = _mm256_fmadd_ps(q[1], x1, s);
    s = _mm256_fmadd_ps(q[2], x2, s);
    s = _mm256_fmadd_ps(q[3], x3, s);
    __m256 sx = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
    *ad = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b)]), s, *ad);
    *am = _mm256_fmadd_ps(_mm256_broadcast_ss(&bt_f16_table[ld_u16(b + 2)]), sx, *am);
}

TGT static float dot_q4_1(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m256 d0 = _mm256_setzero_ps(), d1 = d0, m0 = d0, m1 = d0;
    for (; i + 2 <= nb; i += 2, b += 40, x += 64) {
        q4_1_block(b, x, &d0, &m0);
        q4_1_block(b + 20, x + 32, &d1, &m1);
    }
    if (i < nb)
        q4_1_block(b, x, &d0, &m0);
    return hsum8(_mm256_add_ps(_mm256_add_ps(d0, d1), _mm256_add_ps(m0, m1)));
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
