/* dot_avx512.c - AVX-512F kernels (16 lanes; one q4/q8 block is two
 * vectors). Same contract as dot_avx2.c: dots reassociate only, dequantizers
 * are bit-identical to the scalar code. Scalar f16 scales use F16C, which
 * every AVX-512 CPU has; bt_kernels_init() checks avx2+fma+f16c+avx512f. */
#include "kernels_impl.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#include "util.h"

#define TGT __attribute__((target("avx512f,avx2,fma,f16c")))
#define QK 32
/* Software prefetch this many bytes ahead in the weight stream: on the
 * machines we measured, the hardware prefetcher alone left a decoding core
 * at ~6 GB/s on a 30 MB q8_0 matrix, with it ~15 GB/s. Prefetching past the
 * end of a matrix is harmless (prefetches never fault). */
#define PF_DIST 1024
#define PF(p) _mm_prefetch((const char *)(p) + PF_DIST, _MM_HINT_T0)

TGT static inline float ld_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bt_f16_table[h];
}

/* Tree of plain adds (no max/min), so NaN and Inf propagate. */
TGT static inline float hsum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT static inline __mmask16 tail_mask(int64_t left)
{
    return (__mmask16)((1u << left) - 1);
}

TGT static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        PF(a + i);
        PF(a + i + 16);
        PF(a + i + 32);
        PF(a + i + 48);
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(x + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(x + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(x + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), s0);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, x + i), s1);
    }
    return hsum16(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

TGT static void dot4_f32(const float *w, int64_t ldw, const float *x, int64_t n, float out[4])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i), x0, a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + i), x0, a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + i), x0, a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + i), x0, a3);
        b0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i + 16), x1, b0);
        b1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + i + 16), x1, b1);
        b2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + i + 16), x1, b2);
        b3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + i + 16), x1, b3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 x0 = _mm512_maskz_loadu_ps(m, x + i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w0 + i), x0, a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w1 + i), x0, a1);
        a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w2 + i), x0, a2);
        a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w3 + i), x0, a3);
    }
    out[0] = hsum16(_mm512_add_ps(a0, b0));
    out[1] = hsum16(_mm512_add_ps(a1, b1));
    out[2] = hsum16(_mm512_add_ps(a2, b2));
    out[3] = hsum16(_mm512_add_ps(a3, b3));
}

TGT static void dot4x2_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *y = x + ldx;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + i), yv = _mm512_maskz_loadu_ps(m, y + i), v;
        v = _mm512_maskz_loadu_ps(m, w0 + i);
        a0 = _mm512_fmadd_ps(v, xv, a0);
        b0 = _mm512_fmadd_ps(v, yv, b0);
        v = _mm512_maskz_loadu_ps(m, w1 + i);
        a1 = _mm512_fmadd_ps(v, xv, a1);
        b1 = _mm512_fmadd_ps(v, yv, b1);
        v = _mm512_maskz_loadu_ps(m, w2 + i);
        a2 = _mm512_fmadd_ps(v, xv, a2);
        b2 = _mm512_fmadd_ps(v, yv, b2);
        v = _mm512_maskz_loadu_ps(m, w3 + i);
        a3 = _mm512_fmadd_ps(v, xv, a3);
        b3 = _mm512_fmadd_ps(v, yv, b3);
    }
    out[0] = hsum16(a0);
    out[1] = hsum16(a1);
    out[2] = hsum16(a2);
    out[3] = hsum16(a3);
    out[4] = hsum16(b0);
    out[5] = hsum16(b1);
    out[6] = hsum16(b2);
    out[7] = hsum16(b3);
}

TGT static float dot_f16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PF(p + 2 * i);
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i + 32)));
        s0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), s1);
    }
    float r = hsum16(_mm512_add_ps(s0, s1));
    for (; i < n; i++)
        r += ld_f16(p + 2 * i) * x[i];
    return r;
}

TGT static inline __m512 bf16x16(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static inline float bf16_1(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bt_bf16_to_f32(h);
}

TGT static float dot_bf16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PF(p + 2 * i);
        s0 = _mm512_fmadd_ps(bf16x16(p + 2 * i), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(bf16x16(p + 2 * i + 32), _mm512_loadu_ps(x + i + 16), s1);
    }
    float r = hsum16(_mm512_add_ps(s0, s1));
    for (; i < n; i++)
        r += bf16_1(p + 2 * i) * x[i];
    return r;
}

TGT static inline __m512 i8x16(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

TGT static inline __m512 q8_0_block(const uint8_t *b, const float *x)
{
    __m512 s = _mm512_mul_ps(i8x16(b + 2), _mm512_loadu_ps(x));
    return _mm512_fmadd_ps(i8x16(b + 18), _mm512_loadu_ps(x + 16), s);
}

/* Two blocks per iteration into two accumulators: no FMA waits on the
 * previous block's. */
TGT static float dot_q8_0(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (; i + 2 <= nb; i += 2, b += 68, x += 64) {
        PF(b);
        PF(b + 64);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b)), q8_0_block(b, x), a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b + 34)), q8_0_block(b + 34, x + 32), a1);
    }
    if (i < nb)
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b)), q8_0_block(b, x), a0);
    return hsum16(_mm512_add_ps(a0, a1));
}

/* The 32 nibbles of a q4 block as int32: lo = elements 0..15, hi = 16..31. */
TGT static inline void nibbles16(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm512_and_si512(v, _mm512_set1_epi32(0x0F));
    *hi = _mm512_srli_epi32(v, 4);
}

TGT static inline __m512 q4_0_block(const uint8_t *b, const float *x)
{
    __m512i lo, hi, eight = _mm512_set1_epi32(8);
    nibbles16(b + 2, &lo, &hi);
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), _mm512_loadu_ps(x));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), _mm512_loadu_ps(x + 16), s);
}

TGT static float dot_q4_0(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (; i + 2 <= nb; i += 2, b += 36, x += 64) {
        PF(b);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b)), q4_0_block(b, x), a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b + 18)), q4_0_block(b + 18, x + 32), a1);
    }
    if (i < nb)
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b)), q4_0_block(b, x), a0);
    return hsum16(_mm512_add_ps(a0, a1));
}

/* q4_1 folds the min into the weight: w = q*d + m, one FMA that yields
 * exactly the dequantized weight (q*d is exact), then w*x. That is ~25%
 * fewer vector ops per block than d*sum(q*x) + m*sum(x) here, and the dot
 * is the f32 dot of bt_dequant_row's weights, like the prefill path. */
TGT static inline void q4_1_block(const uint8_t *b, const float *x, __m512 *alo, __m512 *ahi)
{
    __m512i lo, hi;
    nibbles16(b + 4, &lo, &hi);
    __m512 d = _mm512_set1_ps(ld_f16(b)), m = _mm512_set1_ps(ld_f16(b + 2));
    *alo = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m), _mm512_loadu_ps(x), *alo);
    *ahi = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m), _mm512_loadu_ps(x + 16), *ahi);
}

TGT static float dot_q4_1(const void *w, const float *x, int64_t n)
{
    const uint8_t *b = w;
    int64_t nb = n / QK, i = 0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 2 <= nb; i += 2, b += 40, x += 64) {
        PF(b);
        q4_1_block(b, x, &a0, &a1);
        q4_1_block(b + 20, x + 32, &a2, &a3);
    }
    if (i < nb)
        q4_1_block(b, x, &a0, &a1);
    return hsum16(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Reduce four accumulators to four floats with a shared tree of adds
 * (still plain adds only). */
TGT static inline void hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d, float out[4])
{
    /* 512 -> 256: add halves of each */
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1)));
    __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1)));
    __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
    /* hadd pairs: [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, ...] */
    __m256 ab = _mm256_hadd_ps(a8, b8), cd = _mm256_hadd_ps(c8, d8);
    __m256 abcd = _mm256_hadd_ps(ab, cd);   /* [a, b, c, d | a', b', c', d'] */
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
    _mm_storeu_ps(out, r);
}

TGT static void dot4q_q8_0(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n / QK; i++, b0 += 34, b1 += 34, b2 += 34, b3 += 34, x += QK) {
        PF(b0);
        PF(b1);
        PF(b2);
        PF(b3);
        __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16), s;
        s = _mm512_fmadd_ps(i8x16(b0 + 18), x1, _mm512_mul_ps(i8x16(b0 + 2), x0));
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b0)), s, a0);
        s = _mm512_fmadd_ps(i8x16(b1 + 18), x1, _mm512_mul_ps(i8x16(b1 + 2), x0));
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b1)), s, a1);
        s = _mm512_fmadd_ps(i8x16(b2 + 18), x1, _mm512_mul_ps(i8x16(b2 + 2), x0));
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b2)), s, a2);
        s = _mm512_fmadd_ps(i8x16(b3 + 18), x1, _mm512_mul_ps(i8x16(b3 + 2), x0));
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(ld_f16(b3)), s, a3);
    }
    hsum16x4(a0, a1, a2, a3, out);
}

/* One q4_1 block of one row against loaded x halves; see q4_1_block. */
TGT static inline __m512 q4_1_row(const uint8_t *b, __m512 x0, __m512 x1, __m512 acc)
{
    __m512i lo, hi;
    nibbles16(b + 4, &lo, &hi);
    __m512 d = _mm512_set1_ps(ld_f16(b)), m = _mm512_set1_ps(ld_f16(b + 2));
    acc = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m), x0, acc);
    return _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m), x1, acc);
}

TGT static void dot4q_q4_1(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n / QK; i++, b0 += 20, b1 += 20, b2 += 20, b3 += 20, x += QK) {
        PF(b0);
        PF(b1);
        PF(b2);
        PF(b3);
        __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        a0 = q4_1_row(b0, x0, x1, a0);
        a1 = q4_1_row(b1, x0, x1, a1);
        a2 = q4_1_row(b2, x0, x1, a2);
        a3 = q4_1_row(b3, x0, x1, a3);
    }
    hsum16x4(a0, a1, a2, a3, out);
}

/* ---- dequantizers (bit-identical to dequant.c) ---- */

TGT static void dq_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i))));
    for (; i < n; i++)
        dst[i] = ld_f16(p + 2 * i);
}

TGT static void dq_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, bf16x16(p + 2 * i));
    for (; i < n; i++)
        dst[i] = bf16_1(p + 2 * i);
}

TGT static void dq_q8_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, dst += QK) {
        __m512 d = _mm512_set1_ps(ld_f16(b));
        _mm512_storeu_ps(dst, _mm512_mul_ps(i8x16(b + 2), d));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(i8x16(b + 18), d));
    }
}

TGT static void dq_q4_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    __m512i eight = _mm512_set1_epi32(8);
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        __m512 d = _mm512_set1_ps(ld_f16(b));
        __m512i lo, hi;
        nibbles16(b + 2, &lo, &hi);
        _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d));
        _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d));
    }
}

TGT static void dq_q4_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, dst += QK) {
        __m512 d = _mm512_set1_ps(ld_f16(b)), m = _mm512_set1_ps(ld_f16(b + 2));
        __m512i lo, hi;
        nibbles16(b + 4, &lo, &hi);
        __m512 t0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo));
        __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi));
        BT_NOFUSE_V(t0);
        BT_NOFUSE_V(t1);
        _mm512_storeu_ps(dst, _mm512_add_ps(t0, m));
        _mm512_storeu_ps(dst + 16, _mm512_add_ps(t1, m));
    }
}

bool bt_kv_avx512_fill(bt_kvariant *kv)
{
    kv->name = "avx512";
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

bool bt_kv_avx512_fill(bt_kvariant *kv)
{
    (void)kv;
    return false;
}

#endif
