/* dot_avx512.c - AVX-512F kernels (16 lanes; one q4/q8 block is two
 * vectors). Same contract as dot_avx2.c: dots reassociate only, dequantizers
 * are bit-identical to the scalar code, and every dot follows this
 * variant's canonical order (kernels_impl.h: 16-float chunks alternating
 * between two accumulators per (row, token)), so bt_matmul is batch
 * invariant. bt_kernels_init() checks avx2+fma+f16c+avx512f. */
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

TGT static inline __mmask16 tail_mask(int64_t left)
{
    return (__mmask16)((1u << left) - 1);
}

/* The chunk of 16 floats at p with `left` of them in the row: a full load,
 * or the zero-padded last chunk. */
TGT static inline __m512 ld16(const float *p, int64_t left)
{
    return left >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(tail_mask(left), p);
}

/* ---- the canonical reduction (kernels_impl.h): v = acc0 + acc1, folded
 * to 8 lanes (v_j + v_{j+8}), then ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)).
 * Plain adds only, so NaN and Inf propagate. hsum8 and hsum8x4 build the
 * same tree, one output or four. ---- */

TGT static inline __m256 fold(__m512 a0, __m512 a1)
{
    __m512 v = _mm512_add_ps(a0, a1);
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

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

TGT static inline float reduce1(__m512 a0, __m512 a1)
{
    return hsum8(fold(a0, a1));
}

/* ---- f32 rows ---- */

TGT static float dot_f32(const void *w, const float *x, int64_t n)
{
    const float *a = w;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PF(a + i);
        PF(a + i + 16);
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(x + i + 16), s1);
    }
    if (i < n) {
        s0 = _mm512_fmadd_ps(ld16(a + i, n - i), ld16(x + i, n - i), s0);
        if (n - i > 16)
            s1 = _mm512_fmadd_ps(ld16(a + i + 16, n - i - 16), ld16(x + i + 16, n - i - 16), s1);
    }
    return reduce1(s0, s1);
}

/* Four rows, one token: the x loads are shared. Decode of f32 weights
 * streams them from memory through here (dot4q_f32), hence the prefetches;
 * prefill calls it only for an odd last token. */
TGT static void dot4_f32(const float *w, int64_t ldw, const float *x, int64_t n, float out[4])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        PF(w0 + i);
        PF(w0 + i + 16);
        PF(w1 + i);
        PF(w1 + i + 16);
        PF(w2 + i);
        PF(w2 + i + 16);
        PF(w3 + i);
        PF(w3 + i + 16);
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
    if (i < n) {
        int64_t l = n - i;
        __m512 x0 = ld16(x + i, l);
        a0 = _mm512_fmadd_ps(ld16(w0 + i, l), x0, a0);
        a1 = _mm512_fmadd_ps(ld16(w1 + i, l), x0, a1);
        a2 = _mm512_fmadd_ps(ld16(w2 + i, l), x0, a2);
        a3 = _mm512_fmadd_ps(ld16(w3 + i, l), x0, a3);
        if (l > 16) {
            __m512 x1 = ld16(x + i + 16, l - 16);
            b0 = _mm512_fmadd_ps(ld16(w0 + i + 16, l - 16), x1, b0);
            b1 = _mm512_fmadd_ps(ld16(w1 + i + 16, l - 16), x1, b1);
            b2 = _mm512_fmadd_ps(ld16(w2 + i + 16, l - 16), x1, b2);
            b3 = _mm512_fmadd_ps(ld16(w3 + i + 16, l - 16), x1, b3);
        }
    }
    hsum8x4(fold(a0, b0), fold(a1, b1), fold(a2, b2), fold(a3, b3), out);
}

TGT static void dot4q_f32(const void *w, size_t rb, const float *x, int64_t n, float out[4])
{
    dot4_f32(w, (int64_t)(rb / sizeof(float)), x, n, out);
}

/* One step of the 4x2 tile: chunk pair (v0 at x, v1 at x+16 in each row)
 * against tokens x and y; a* / b* are token 0's even / odd accumulators,
 * c* / d* token 1's. */
#define TILE_ROW(p, a, b, c, d)                                                         \
    do {                                                                                \
        __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps((p) + 16);                 \
        /* In registers: GCC would rather fold each load into both of its FMAs, */      \
        /* which makes the loop load-bound. */                                          \
        __asm__("" : "+v"(v0), "+v"(v1));                                               \
        a = _mm512_fmadd_ps(v0, x0, a);                                                 \
        b = _mm512_fmadd_ps(v1, x1, b);                                                 \
        c = _mm512_fmadd_ps(v0, y0, c);                                                 \
        d = _mm512_fmadd_ps(v1, y1, d);                                                 \
    } while (0)

/* Prefill register tile, 4 rows x 2 tokens: each loaded weight vector
 * feeds two FMAs; 16 accumulators, two per (row, token) as the canonical
 * order wants. */
TGT static void dot4x2_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8])
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *y = x + ldx;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0, d0 = a0, d1 = a0, d2 = a0, d3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        __m512 y0 = _mm512_loadu_ps(y + i), y1 = _mm512_loadu_ps(y + i + 16);
        TILE_ROW(w0 + i, a0, b0, c0, d0);
        TILE_ROW(w1 + i, a1, b1, c1, d1);
        TILE_ROW(w2 + i, a2, b2, c2, d2);
        TILE_ROW(w3 + i, a3, b3, c3, d3);
    }
    if (i < n) {
        /* The last one or two chunks, zero-padded, as in dot_f32. */
        int64_t l = n - i;
        __m512 x0 = ld16(x + i, l), y0 = ld16(y + i, l);
        a0 = _mm512_fmadd_ps(ld16(w0 + i, l), x0, a0);
        a1 = _mm512_fmadd_ps(ld16(w1 + i, l), x0, a1);
        a2 = _mm512_fmadd_ps(ld16(w2 + i, l), x0, a2);
        a3 = _mm512_fmadd_ps(ld16(w3 + i, l), x0, a3);
        c0 = _mm512_fmadd_ps(ld16(w0 + i, l), y0, c0);
        c1 = _mm512_fmadd_ps(ld16(w1 + i, l), y0, c1);
        c2 = _mm512_fmadd_ps(ld16(w2 + i, l), y0, c2);
        c3 = _mm512_fmadd_ps(ld16(w3 + i, l), y0, c3);
        if (l > 16) {
            __m512 x1 = ld16(x + i + 16, l - 16), y1 = ld16(y + i + 16, l - 16);
            b0 = _mm512_fmadd_ps(ld16(w0 + i + 16, l - 16), x1, b0);
            b1 = _mm512_fmadd_ps(ld16(w1 + i + 16, l - 16), x1, b1);
            b2 = _mm512_fmadd_ps(ld16(w2 + i + 16, l - 16), x1, b2);
            b3 = _mm512_fmadd_ps(ld16(w3 + i + 16, l - 16), x1, b3);
            d0 = _mm512_fmadd_ps(ld16(w0 + i + 16, l - 16), y1, d0);
            d1 = _mm512_fmadd_ps(ld16(w1 + i + 16, l - 16), y1, d1);
            d2 = _mm512_fmadd_ps(ld16(w2 + i + 16, l - 16), y1, d2);
            d3 = _mm512_fmadd_ps(ld16(w3 + i + 16, l - 16), y1, d3);
        }
    }
    hsum8x4(fold(a0, b0), fold(a1, b1), fold(a2, b2), fold(a3, b3), out);
    hsum8x4(fold(c0, d0), fold(c1, d1), fold(c2, d2), fold(c3, d3), out + 4);
}
#undef TILE_ROW

/* ---- half-precision rows: converted exactly, then the f32 order. The
 * last partial chunk pair goes through a zero-padded buffer, like the
 * masked loads of a dequantized row. ---- */

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

TGT static inline float half_tail(const uint8_t *p, const float *x, int64_t l, bool bf, __m512 s0, __m512 s1)
{
    float t[32] = { 0 };
    for (int64_t k = 0; k < l; k++)
        t[k] = bf ? bf16_1(p + 2 * k) : ld_f16(p + 2 * k);
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(t), ld16(x, l), s0);
    if (l > 16)
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(t + 16), ld16(x + 16, l - 16), s1);
    return reduce1(s0, s1);
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
    return i < n ? half_tail(p + 2 * i, x + i, n - i, false, s0, s1) : reduce1(s0, s1);
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
    return i < n ? half_tail(p + 2 * i, x + i, n - i, true, s0, s1) : reduce1(s0, s1);
}

/* ---- 32-element blocks: each block's weights are built in registers
 * exactly as the dequantizers below build them (lo = elements 0..15 into
 * accumulator 0, hi = 16..31 into accumulator 1), then the f32 order. ---- */

TGT static inline __m512 i8x16(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* The 32 nibbles of a q4 block as int32: lo = elements 0..15, hi = 16..31. */
TGT static inline void nibbles16(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm512_and_si512(v, _mm512_set1_epi32(0x0F));
    *hi = _mm512_srli_epi32(v, 4);
}

/* q8_0: q * d (exact). */
TGT static inline void w_q8_0(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    __m512 d = _mm512_set1_ps(ld_f16(b));
    *lo = _mm512_mul_ps(i8x16(b + 2), d);
    *hi = _mm512_mul_ps(i8x16(b + 18), d);
}

/* q4 blocks through a 16-entry table of the block's possible weights,
 * built with the dequantizer's arithmetic (one vector op per block instead
 * of two conversions and two multiplies per block): vpermps reads only the
 * low 4 bits of each index lane, so the low nibbles need no mask and the
 * high ones one shift. */
TGT static inline void q4_lookup(const uint8_t *qs, __m512 lut, __m512 *lo, __m512 *hi)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm512_permutexvar_ps(v, lut);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
}

/* q4_0: (q - 8) * d (exact). */
TGT static inline void w_q4_0(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    const __m512 k = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    q4_lookup(b + 2, _mm512_mul_ps(k, _mm512_set1_ps(ld_f16(b))), lo, hi);
}

/* q4_1: q * d + m as one FMA, which rounds once where dq_q4_1 rounds
 * twice; the same value, since q * d is exact. */
TGT static inline void w_q4_1(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    const __m512 k = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    q4_lookup(b + 4, _mm512_fmadd_ps(k, _mm512_set1_ps(ld_f16(b)), _mm512_set1_ps(ld_f16(b + 2))), lo, hi);
}

/* One row; and four rows sharing the x loads (decode: interleaving hides
 * the per-row reduction and call that dominate short rows like 576). */
#define BLOCK_DOTS(T, BS)                                                                        \
    TGT static float dot_##T(const void *w, const float *x, int64_t n)                           \
    {                                                                                            \
        const uint8_t *b = w;                                                                    \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, lo, hi;                                        \
        for (int64_t i = 0; i < n / QK; i++, b += BS, x += QK) {                                 \
            PF(b);                                                                               \
            w_##T(b, &lo, &hi);                                                                  \
            s0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), s0);                                    \
            s1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), s1);                               \
        }                                                                                        \
        return reduce1(s0, s1);                                                                  \
    }                                                                                            \
    TGT static void dot4q_##T(const void *w, size_t rb, const float *x, int64_t n, float out[4]) \
    {                                                                                            \
        const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;                     \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0, lo, hi;                                       \
        for (int64_t i = 0; i < n / QK; i++, b0 += BS, b1 += BS, b2 += BS, b3 += BS, x += QK) {  \
            PF(b0);                                                                              \
            PF(b1);                                                                              \
            PF(b2);                                                                              \
            PF(b3);                                                                              \
            __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);                        \
            w_##T(b0, &lo, &hi);                                                                 \
            a0 = _mm512_fmadd_ps(lo, x0, a0);                                                    \
            c0 = _mm512_fmadd_ps(hi, x1, c0);                                                    \
            w_##T(b1, &lo, &hi);                                                                 \
            a1 = _mm512_fmadd_ps(lo, x0, a1);                                                    \
            c1 = _mm512_fmadd_ps(hi, x1, c1);                                                    \
            w_##T(b2, &lo, &hi);                                                                 \
            a2 = _mm512_fmadd_ps(lo, x0, a2);                                                    \
            c2 = _mm512_fmadd_ps(hi, x1, c2);                                                    \
            w_##T(b3, &lo, &hi);                                                                 \
            a3 = _mm512_fmadd_ps(lo, x0, a3);                                                    \
            c3 = _mm512_fmadd_ps(hi, x1, c3);                                                    \
        }                                                                                        \
        hsum8x4(fold(a0, c0), fold(a1, c1), fold(a2, c2), fold(a3, c3), out);                    \
    }

BLOCK_DOTS(q8_0, 34)
BLOCK_DOTS(q4_0, 18)
BLOCK_DOTS(q4_1, 20)
#undef BLOCK_DOTS

/* Types without a fused kernel (q5_*, k-quants): dequantize a block into a
 * stack buffer with this table's dequantizer (bit-identical to the scalar
 * one) and continue the f32 order; every block is a whole number of chunk
 * pairs. */
static bt_dequant_fn gen_dq[BT_DT_COUNT];

TGT static inline float gen_dot(int type, const void *w, const float *x, int64_t n)
{
    const bt_dtype_info *ti = bt_dtype(type);
    float tmp[256] __attribute__((aligned(64)));
    const uint8_t *b = w;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int64_t i = 0; i < n; i += ti->blck, b += ti->type_size) {
        gen_dq[type](b, tmp, ti->blck);
        for (int j = 0; j < ti->blck; j += 32) {
            s0 = _mm512_fmadd_ps(_mm512_load_ps(tmp + j), _mm512_loadu_ps(x + i + j), s0);
            s1 = _mm512_fmadd_ps(_mm512_load_ps(tmp + j + 16), _mm512_loadu_ps(x + i + j + 16), s1);
        }
    }
    return reduce1(s0, s1);
}

#define GEN_DOT(T, ID) \
    TGT static float dot_##T(const void *w, const float *x, int64_t n) { return gen_dot(ID, w, x, n); }
GEN_DOT(q5_0, BT_DT_Q5_0)
GEN_DOT(q5_1, BT_DT_Q5_1)
GEN_DOT(q2_k, BT_DT_Q2_K)
GEN_DOT(q3_k, BT_DT_Q3_K)
GEN_DOT(q4_k, BT_DT_Q4_K)
GEN_DOT(q5_k, BT_DT_Q5_K)
GEN_DOT(q6_k, BT_DT_Q6_K)
#undef GEN_DOT

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
    kv->dequant[BT_DT_F16] = dq_f16;
    kv->dequant[BT_DT_BF16] = dq_bf16;
    kv->dequant[BT_DT_Q8_0] = dq_q8_0;
    kv->dequant[BT_DT_Q4_0] = dq_q4_0;
    kv->dequant[BT_DT_Q4_1] = dq_q4_1;
    for (int t = 0; t < BT_DT_COUNT; t++)
        gen_dq[t] = kv->dequant[t];
    kv->dot[BT_DT_F32] = dot_f32;
    kv->dot[BT_DT_F16] = dot_f16;
    kv->dot[BT_DT_BF16] = dot_bf16;
    kv->dot[BT_DT_Q8_0] = dot_q8_0;
    kv->dot[BT_DT_Q4_0] = dot_q4_0;
    kv->dot[BT_DT_Q4_1] = dot_q4_1;
    kv->dot[BT_DT_Q5_0] = dot_q5_0;
    kv->dot[BT_DT_Q5_1] = dot_q5_1;
    kv->dot[BT_DT_Q2_K] = dot_q2_k;
    kv->dot[BT_DT_Q3_K] = dot_q3_k;
    kv->dot[BT_DT_Q4_K] = dot_q4_k;
    kv->dot[BT_DT_Q5_K] = dot_q5_k;
    kv->dot[BT_DT_Q6_K] = dot_q6_k;
    kv->dot4_f32 = dot4_f32;
    kv->dot4x2_f32 = dot4x2_f32;
    kv->dot4q[BT_DT_F32] = dot4q_f32;
    kv->dot4q[BT_DT_Q8_0] = dot4q_q8_0;
    kv->dot4q[BT_DT_Q4_0] = dot4q_q4_0;
    kv->dot4q[BT_DT_Q4_1] = dot4q_q4_1;
    return true;
}

#else

bool bt_kv_avx512_fill(bt_kvariant *kv)
{
    (void)kv;
    return false;
}

#endif
