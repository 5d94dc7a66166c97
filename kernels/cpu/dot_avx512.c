/* dot_avx512.c - AVX-512F kernels (16 lanes; one q4/q8 block is two
 * vectors). Same contract as dot_avx2.c: dots reassociate only, dequantizers
 * are bit-identical to the scalar code, and every dot follows this
 * variant's canonical order (kernels_impl.h: 16-float chunks alternating
 * between two accumulators per (row, token)), so bt_matmul is batch
 * invariant. bt_kernels_init() checks avx2+fma+f16c+avx512f/bw/vl/dq (the
 * k-quant kernels take byte masks from AVX-512BW).
 *
 * Every quantized type has a fused kernel: the block's weights are built in
 * registers, 16 at a time, exactly as dequant.c builds them, and go straight
 * into the FMAs. Two ways to build them, both exact:
 *   - a per-(sub-)block table of the possible weights (q4_*, q5_*, q4_K,
 *     q5_K, mxfp4), computed with the dequantizer's arithmetic and indexed with
 *     vpermps (16 entries) or a masked second vpermps (32 entries);
 *   - integer codes made 32 at a time with byte ops, widened, converted and
 *     scaled (q8_0, q2_K, q3_K, q6_K).
 * Where the scalar code rounds twice (q * d, then + m or - m) the kernels
 * use one FMA: q * d is exact for every block layout (an f16 or f16 times a
 * 6-bit scale has at most 17 significant bits, the codes at most 6), so the
 * single rounding is the same rounding. No VNNI or AVX512-BF16 dot
 * instructions: they need integer or bf16 activations (or flush
 * subnormals), and activations stay f32. */
#include "kernels_impl.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/util.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define QK 32
/* Software prefetch this many bytes ahead in the weight stream: on the
 * machines we measured, the hardware prefetcher alone left a decoding core
 * at ~6 GB/s on a 30 MB q8_0 matrix, with it ~15 GB/s. Prefetching past the
 * end of a matrix is harmless (prefetches never fault). 4 KB rather than
 * 1 KB: single-thread decode of 60 MB of q4_0 / q8_0 / q6_K went 25-40%
 * faster (CPU time, on a loaded 2-core machine where memory latency is
 * high); 8 KB gained nothing more. */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
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
 * order wants. The body also runs one column panel of a longer row
 * (dot4x2p_f32): acc carries the 16 accumulators from panel to panel
 * (NULL: start from zero), and only the last panel (out != NULL) takes the
 * zero-padded tail and reduces; the others are whole chunk pairs, so chunk
 * c still lands in accumulator c % 2 and the bits are the whole row's. */
TGT static inline __attribute__((always_inline)) void dot4x2_body(const float *w, int64_t ldw, const float *x,
                                                                  int64_t ldx, int64_t n, const float *acc_in,
                                                                  float *acc_out, float *out)
{
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw, *y = x + ldx;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0, d0 = a0, d1 = a0, d2 = a0, d3 = a0;
    if (acc_in) {
        a0 = _mm512_load_ps(acc_in), a1 = _mm512_load_ps(acc_in + 16), a2 = _mm512_load_ps(acc_in + 32);
        a3 = _mm512_load_ps(acc_in + 48), b0 = _mm512_load_ps(acc_in + 64), b1 = _mm512_load_ps(acc_in + 80);
        b2 = _mm512_load_ps(acc_in + 96), b3 = _mm512_load_ps(acc_in + 112), c0 = _mm512_load_ps(acc_in + 128);
        c1 = _mm512_load_ps(acc_in + 144), c2 = _mm512_load_ps(acc_in + 160), c3 = _mm512_load_ps(acc_in + 176);
        d0 = _mm512_load_ps(acc_in + 192), d1 = _mm512_load_ps(acc_in + 208), d2 = _mm512_load_ps(acc_in + 224);
        d3 = _mm512_load_ps(acc_in + 240);
    }
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
    if (!out) {
        _mm512_store_ps(acc_out, a0), _mm512_store_ps(acc_out + 16, a1), _mm512_store_ps(acc_out + 32, a2);
        _mm512_store_ps(acc_out + 48, a3), _mm512_store_ps(acc_out + 64, b0), _mm512_store_ps(acc_out + 80, b1);
        _mm512_store_ps(acc_out + 96, b2), _mm512_store_ps(acc_out + 112, b3), _mm512_store_ps(acc_out + 128, c0);
        _mm512_store_ps(acc_out + 144, c1), _mm512_store_ps(acc_out + 160, c2), _mm512_store_ps(acc_out + 176, c3);
        _mm512_store_ps(acc_out + 192, d0), _mm512_store_ps(acc_out + 208, d1), _mm512_store_ps(acc_out + 224, d2);
        _mm512_store_ps(acc_out + 240, d3);
        return;
    }
    hsum8x4(fold(a0, b0), fold(a1, b1), fold(a2, b2), fold(a3, b3), out);
    hsum8x4(fold(c0, d0), fold(c1, d1), fold(c2, d2), fold(c3, d3), out + 4);
}

TGT static void dot4x2_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8])
{
    dot4x2_body(w, ldw, x, ldx, n, NULL, NULL, out);
}

TGT static void dot4x2p_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float *acc,
                            bool first, float *out)
{
    dot4x2_body(w, ldw, x, ldx, n, first ? NULL : acc, acc, out);
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

/* Prefill register tile, 8 rows x 3 tokens. The canonical order keeps
 * chunk c in accumulator c % 2, and the two accumulators never meet until
 * the end, so the even chunks and the odd chunks can run as two passes:
 * one register per (row, token) at a time, 24 of them, each weight vector
 * feeding three FMAs and each token vector eight (11 loads per 24 FMAs,
 * against 12 per 16 in the 4x2 tile). Same bits as dot_f32 per pair. */
#define T83_ROW(k)                                                                      \
    do {                                                                                \
        __m512 v = ld16(w + (k) * ldw + i, l);                                          \
        __asm__("" : "+v"(v));                                                          \
        a##k##0 = _mm512_fmadd_ps(v, x0, a##k##0);                                      \
        a##k##1 = _mm512_fmadd_ps(v, x1, a##k##1);                                      \
        a##k##2 = _mm512_fmadd_ps(v, x2, a##k##2);                                      \
    } while (0)
#define T83_OUT(k)                                                                      \
    do {                                                                                \
        acc[(k) * 3] = a##k##0;                                                         \
        acc[(k) * 3 + 1] = a##k##1;                                                     \
        acc[(k) * 3 + 2] = a##k##2;                                                     \
    } while (0)

TGT static inline __attribute__((always_inline)) void tile8x3_pass(const float *w, int64_t ldw, const float *x,
                                                                   int64_t ldx, int64_t n, int64_t i0, __m512 acc[24])
{
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
    __m512 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
    __m512 a40 = a00, a41 = a00, a42 = a00, a50 = a00, a51 = a00, a52 = a00;
    __m512 a60 = a00, a61 = a00, a62 = a00, a70 = a00, a71 = a00, a72 = a00;
    for (int64_t i = i0; i < n; i += 32) {
        int64_t l = n - i;
        __m512 x0 = ld16(x + i, l), x1 = ld16(x + ldx + i, l), x2 = ld16(x + 2 * ldx + i, l);
        T83_ROW(0);
        T83_ROW(1);
        T83_ROW(2);
        T83_ROW(3);
        T83_ROW(4);
        T83_ROW(5);
        T83_ROW(6);
        T83_ROW(7);
    }
    T83_OUT(0);
    T83_OUT(1);
    T83_OUT(2);
    T83_OUT(3);
    T83_OUT(4);
    T83_OUT(5);
    T83_OUT(6);
    T83_OUT(7);
}
#undef T83_ROW
#undef T83_OUT

/* out[t*8 + r] = dot(w + r*ldw, x + t*ldx) for r < 8, t < 3. */
TGT static void dot8x3_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[24])
{
    __m512 e[24], o[24];
    tile8x3_pass(w, ldw, x, ldx, n, 0, e);
    tile8x3_pass(w, ldw, x, ldx, n, 16, o);
    for (int t = 0; t < 3; t++)
        for (int r = 0; r < 8; r += 4)
            hsum8x4(fold(e[r * 3 + t], o[r * 3 + t]), fold(e[(r + 1) * 3 + t], o[(r + 1) * 3 + t]),
                    fold(e[(r + 2) * 3 + t], o[(r + 2) * 3 + t]), fold(e[(r + 3) * 3 + t], o[(r + 3) * 3 + t]),
                    out + t * 8 + r);
}

/* ---- the tap statistics' sweep, two 64-element chunks side by side: chunk
 * A's eight lanes in the low half of each vector, chunk B's in the high
 * half, so every lane does the AVX2 sweep's operations for its chunk
 * (kernels.h: bt_sweep_f32); then A is folded into the accumulators before
 * B, the chunk order. A chunk holding a NaN or an Inf stops the sweep at
 * its start, as there (a good A before a bad B is still taken). The last
 * chunks (fewer than two) go through the AVX2 sweep. v * v is rounded
 * before the add (BT_NOFUSE_V: this target has FMA). ---- */

/* Chunks x[0..64) (low half) and x[64..128) (high half): each lane's sum,
 * sum of squares, minimum and maximum; the lanes whose chunk holds a NaN or
 * an Inf are set in the mask returned (a NaN makes the sum NaN, a +Inf the
 * maximum +Inf, a -Inf the minimum -Inf). */
TGT static inline __attribute__((always_inline)) __mmask16 sweep_pair(const float *x, __m512 *cs, __m512 *cq,
                                                                       __m512 *lmn, __m512 *lmx)
{
    const __m512 pinf = _mm512_set1_ps(INFINITY), ninf = _mm512_set1_ps(-INFINITY);
    __m512 s = _mm512_setzero_ps(), q = s, mn = pinf, mx = ninf;
    for (int k = 0; k < 8; k++) {
        __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(x + 8 * k)), _mm256_loadu_ps(x + 64 + 8 * k),
                                      1);
        __m512 vv = _mm512_mul_ps(v, v);
        BT_NOFUSE_V(vv);
        s = _mm512_add_ps(s, v);
        q = _mm512_add_ps(q, vv);
        mn = _mm512_min_ps(v, mn);
        mx = _mm512_max_ps(v, mx);
    }
    *cs = s; *cq = q; *lmn = mn; *lmx = mx;
    return _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(mx, pinf, _CMP_EQ_OQ) |
           _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
}

TGT static int64_t sweep_f32(const float *x, int64_t n, bt_sweep *acc)
{
    __m256 mn = _mm256_loadu_ps(acc->mn), mx = _mm256_loadu_ps(acc->mx);
    __m512d s = _mm512_loadu_pd(acc->sum), q = _mm512_loadu_pd(acc->sumsq);
    int64_t i = 0;
    bool stopped = false;
    for (; i + 128 <= n; i += 128) {
        __m512 cs, cq, lmn, lmx;
        __mmask16 bad = sweep_pair(x + i, &cs, &cq, &lmn, &lmx);
        if (bad & 0xFF) {
            stopped = true;
            break;
        }
        mn = _mm256_min_ps(_mm512_castps512_ps256(lmn), mn);
        mx = _mm256_max_ps(_mm512_castps512_ps256(lmx), mx);
        s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(cs)));
        q = _mm512_add_pd(q, _mm512_cvtps_pd(_mm512_castps512_ps256(cq)));
        if (bad) {
            i += 64;
            stopped = true;
            break;
        }
        mn = _mm256_min_ps(_mm512_extractf32x8_ps(lmn, 1), mn);
        mx = _mm256_max_ps(_mm512_extractf32x8_ps(lmx, 1), mx);
        s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_extractf32x8_ps(cs, 1)));
        q = _mm512_add_pd(q, _mm512_cvtps_pd(_mm512_extractf32x8_ps(cq, 1)));
    }
    _mm256_storeu_ps(acc->mn, mn);
    _mm256_storeu_ps(acc->mx, mx);
    _mm512_storeu_pd(acc->sum, s);
    _mm512_storeu_pd(acc->sumsq, q);
    if (stopped || i >= n)
        return i;
    return i + bt_sweep_f32_avx2(x + i, n - i, acc);
}

/* The chunks stored, not folded (kernels.h: bt_sweep_chunks_f32), two
 * side by side as above; an odd last chunk goes through the AVX2 one. */
TGT static int64_t sweep_chunks_f32(const float *x, int64_t nc, bt_sweep_chunk *out)
{
    int64_t c = 0;
    for (; c + 2 <= nc; c += 2, x += 128) {
        __m512 cs, cq, lmn, lmx;
        __mmask16 bad = sweep_pair(x, &cs, &cq, &lmn, &lmx);
        if (bad & 0xFF)
            return c;
        _mm256_storeu_ps(out[c].s, _mm512_castps512_ps256(cs));
        _mm256_storeu_ps(out[c].q, _mm512_castps512_ps256(cq));
        _mm256_storeu_ps(out[c].mn, _mm512_castps512_ps256(lmn));
        _mm256_storeu_ps(out[c].mx, _mm512_castps512_ps256(lmx));
        if (bad)
            return c + 1;
        _mm256_storeu_ps(out[c + 1].s, _mm512_extractf32x8_ps(cs, 1));
        _mm256_storeu_ps(out[c + 1].q, _mm512_extractf32x8_ps(cq, 1));
        _mm256_storeu_ps(out[c + 1].mn, _mm512_extractf32x8_ps(lmn, 1));
        _mm256_storeu_ps(out[c + 1].mx, _mm512_extractf32x8_ps(lmx, 1));
    }
    return c < nc ? c + bt_sweep_chunks_f32_avx2(x, nc - c, out + c) : nc;
}

/* ---- attention scores, 16 keys at a time (kernels_impl.h: dot16_f32).
 * Each (key, query) pair accumulates exactly as dot_f32 does (chunk c
 * into accumulator c % 2, the last chunk zero-padded), then v = acc0 +
 * acc1 is kept per pair and the canonical reduction of the 16 vs runs
 * as a butterfly: each stage adds two shuffled vectors, so one add does
 * the same step for several keys at once. Stage by stage the adds are
 * the tree's own (fold v_j + v_{j+8}, then (v0+v1), (v2+v3), then their
 * sum, then the halves), each with the same left operand as hsum8, so
 * every score is dot_f32's bits; at a 64-wide head it needs about 8
 * vector operations per score instead of 10. ---- */

TGT static inline __attribute__((always_inline)) void keys16_v(const float *k, int64_t ldk, const float *q,
                                                                int64_t ldq, int nq, int64_t n, __m512 v[3][16])
{
    /* named accumulators and nq a constant after inlining, so all of them
     * stay in registers */
    for (int p = 0; p < 16; p++) {
        const float *kp = k + p * ldk;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
#pragma GCC unroll 8
        for (int64_t i = 0; i < n; i += 32) {
            __m512 w = ld16(kp + i, n - i);
            a0 = _mm512_fmadd_ps(w, ld16(q + i, n - i), a0);
            if (nq > 1) a1 = _mm512_fmadd_ps(w, ld16(q + ldq + i, n - i), a1);
            if (nq > 2) a2 = _mm512_fmadd_ps(w, ld16(q + 2 * ldq + i, n - i), a2);
            if (i + 16 < n) {
                w = ld16(kp + i + 16, n - i - 16);
                b0 = _mm512_fmadd_ps(w, ld16(q + i + 16, n - i - 16), b0);
                if (nq > 1) b1 = _mm512_fmadd_ps(w, ld16(q + ldq + i + 16, n - i - 16), b1);
                if (nq > 2) b2 = _mm512_fmadd_ps(w, ld16(q + 2 * ldq + i + 16, n - i - 16), b2);
            }
        }
        v[0][p] = _mm512_add_ps(a0, b0);
        if (nq > 1) v[1][p] = _mm512_add_ps(a1, b1);
        if (nq > 2) v[2][p] = _mm512_add_ps(a2, b2);
    }
}

/* The 16 reduced scores of v[0..15], in key order. */
TGT static inline __m512 keys16_reduce(const __m512 v[16])
{
    __m512 t[8], u[4], x[2];
    for (int m = 0; m < 8; m++)   /* keys 2m, 2m+1: lanes 0-7, 8-15 hold v_j + v_{j+8} */
        t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xEE));
    for (int m = 0; m < 4; m++)   /* pairwise: (w0+w1), (w2+w3), ... */
        u[m] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * m], t[2 * m + 1], 0x88),
                             _mm512_shuffle_ps(t[2 * m], t[2 * m + 1], 0xDD));
    for (int m = 0; m < 2; m++)   /* (w0+w1)+(w2+w3) and (w4+w5)+(w6+w7) */
        x[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0x88),
                             _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0xDD));
    __m512 r = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88), _mm512_shuffle_f32x4(x[0], x[1], 0xDD));
    /* r holds keys 0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15 */
    const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    return _mm512_permutexvar_ps(order, r);
}

TGT static inline __attribute__((always_inline)) void dot16_n(const float *k, int64_t ldk, const float *q,
                                                               int64_t ldq, int nq, int64_t n, float *out,
                                                               int64_t ldo)
{
    __m512 v[3][16];
    keys16_v(k, ldk, q, ldq, nq, n, v);
    for (int j = 0; j < nq; j++) _mm512_storeu_ps(out + j * ldo, keys16_reduce(v[j]));
}

/* out[j*ldo + p] = dot(k + p*ldk, q + j*ldq) for p < 16, j < nq <= 3. */
TGT static void dot16_f32(const float *k, int64_t ldk, const float *q, int64_t ldq, int nq, int64_t n, float *out,
                          int64_t ldo)
{
    /* nq and the common head sizes as constants: the queries stay in
     * registers across the 16 keys */
    if (nq == 3) {
        if (n == 64) dot16_n(k, ldk, q, ldq, 3, 64, out, ldo);
        else dot16_n(k, ldk, q, ldq, 3, n, out, ldo);
    } else if (nq == 2) {
        if (n == 128) dot16_n(k, ldk, q, ldq, 2, 128, out, ldo);
        else dot16_n(k, ldk, q, ldq, 2, n, out, ldo);
    } else {
        if (n == 64) dot16_n(k, ldk, q, ldq, 1, 64, out, ldo);
        else if (n == 128) dot16_n(k, ldk, q, ldq, 1, 128, out, ldo);
        else dot16_n(k, ldk, q, ldq, 1, n, out, ldo);
    }
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

/* kmovw k, m16. GCC turns _load_mask16 into a load into a general
 * register and a kmovw from it (a port-5 uop); the asm keeps it a load. */
TGT static inline __mmask16 ld_mask16(const uint8_t *p)
{
    __mmask16 k;
    __asm__("kmovw %1, %0" : "=k"(k) : "m"(*(const uint16_t *)p));
    return k;
}

/* q5 blocks: a 32-entry table as two vectors; the low 16 entries through
 * vpermps, lanes whose 5th bit is set (a k-mask loaded straight from qh)
 * through a masked second vpermps. The masks come from memory (kmovw k,
 * m16 is a load): moving qh through a general register and shifting it
 * costs two more port-5 uops per block, on the port the permutes already
 * saturate. */
TGT static inline void q5_lookup(const uint8_t *qs, const uint8_t *qh, __m512 la, __m512 lb, __m512 *lo, __m512 *hi)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs)), vh = _mm512_srli_epi32(v, 4);
    __mmask16 klo = ld_mask16(qh), khi = ld_mask16(qh + 2);
    *lo = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(v, la), klo, v, lb);
    *hi = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(vh, la), khi, vh, lb);
}

/* q5_0: (q - 16) * d (exact). */
TGT static inline void w_q5_0(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    const __m512 ka = _mm512_setr_ps(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1);
    const __m512 kb = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 d = _mm512_set1_ps(ld_f16(b));
    q5_lookup(b + 6, b + 2, _mm512_mul_ps(ka, d), _mm512_mul_ps(kb, d), lo, hi);
}

/* q5_1: q * d + m as one FMA (q * d is exact, as in q4_1). */
TGT static inline void w_q5_1(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    const __m512 ka = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 kb = _mm512_add_ps(ka, _mm512_set1_ps(16));
    __m512 d = _mm512_set1_ps(ld_f16(b)), m = _mm512_set1_ps(ld_f16(b + 2));
    q5_lookup(b + 8, b + 4, _mm512_fmadd_ps(ka, d, m), _mm512_fmadd_ps(kb, d, m), lo, hi);
}

/* mxfp4: the 16 doubled E2M1 values times the half scale 2^(e-128) as the
 * table (each entry dq_mxfp4's product, exact), read like q4_0's. */
TGT static inline void w_mxfp4(const uint8_t *b, __m512 *lo, __m512 *hi)
{
    const __m512 k = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    q4_lookup(b + 1, _mm512_mul_ps(k, _mm512_set1_ps(bt_e8m0_half(b[0]))), lo, hi);
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
BLOCK_DOTS(q5_0, 22)
BLOCK_DOTS(q5_1, 24)
BLOCK_DOTS(mxfp4, 17)
#undef BLOCK_DOTS

/* Dequantizers from the same builders (bit-identical to dequant.c, which
 * the weights above already are). */
#define BLOCK_DQ(T, BS)                                                       \
    TGT static void dq_##T(const void *src, float *dst, int64_t n)            \
    {                                                                         \
        const uint8_t *b = src;                                               \
        __m512 lo, hi;                                                        \
        for (int64_t i = 0; i < n / QK; i++, b += BS, dst += QK) {            \
            w_##T(b, &lo, &hi);                                               \
            _mm512_storeu_ps(dst, lo);                                        \
            _mm512_storeu_ps(dst + 16, hi);                                   \
        }                                                                     \
    }
BLOCK_DQ(q5_0, 22)
BLOCK_DQ(q5_1, 24)
BLOCK_DQ(mxfp4, 17)
#undef BLOCK_DQ

/* ---- k-quants (256-element blocks). A block's scales are unpacked once
 * into ks (the dequantizer's products, exact); then each group of 64
 * elements is built as four vectors w0..w3 = elements 0-15, 16-31, 32-47,
 * 48-63 of the group, which go to accumulators 0, 1, 0, 1: the f32 order
 * of the dequantized row. ---- */

struct kscales {
    float d[16];    /* per sub-block scale (d * sc) */
    float m[16];    /* per sub-block min (dmin * m), q2_K/q4_K/q5_K */
};

/* q4_K/q5_K: eight 6-bit scales and mins (scale_min_k4 in dequant.c),
 * unpacked four at a time in 32-bit words (the top two bits of bytes
 * 0..3 / 4..7 are bits 4-5 of scales / mins 4..7), then converted and
 * scaled in one vector: each value is the dequantizer's d * (float)sc,
 * one rounding, so exact. The scalar loop it replaces cost more than
 * the block's 256 multiply-adds. */
TGT static inline void prep_k4(const uint8_t *b, struct kscales *ks)
{
    uint32_t a, m, c;
    memcpy(&a, b + 4, 4);
    memcpy(&m, b + 8, 4);
    memcpy(&c, b + 12, 4);
    __m128i v = _mm_setr_epi32((int)(a & 0x3F3F3F3Fu), (int)((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)),
                               (int)(m & 0x3F3F3F3Fu), (int)(((c >> 4) & 0x0F0F0F0Fu) | ((m >> 2) & 0x30303030u)));
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
    __m512 dm = _mm512_insertf32x8(_mm512_set1_ps(ld_f16(b)), _mm256_set1_ps(ld_f16(b + 2)), 1);
    f = _mm512_mul_ps(dm, f);
    _mm256_storeu_ps(ks->d, _mm512_castps512_ps256(f));
    _mm256_storeu_ps(ks->m, _mm512_extractf32x8_ps(f, 1));
}

TGT static inline __m512 lut16(float d, float m)
{
    const __m512 k = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_fmsub_ps(k, _mm512_set1_ps(d), _mm512_set1_ps(m));
}

/* q4_K group g: sub-blocks 2g (low nibbles of q[0..31]) and 2g+1 (high). */
TGT static inline void grp_q4_k(const uint8_t *b, const struct kscales *ks, int g, __m512 *w0, __m512 *w1,
                                __m512 *w2, __m512 *w3)
{
    const uint8_t *q = b + 16 + 32 * g;
    __m512 l0 = lut16(ks->d[2 * g], ks->m[2 * g]), l1 = lut16(ks->d[2 * g + 1], ks->m[2 * g + 1]);
    __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
    *w0 = _mm512_permutexvar_ps(v0, l0);
    *w1 = _mm512_permutexvar_ps(v1, l0);
    *w2 = _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), l1);
    *w3 = _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), l1);
}

/* q5_K group g: as q4_K, the 5th bit (bit 2g / 2g+1 of qh[l]) picks the
 * upper half of a 32-entry table. */
TGT static inline void grp_q5_k(const uint8_t *b, const struct kscales *ks, int g, __m512 *w0, __m512 *w1,
                                __m512 *w2, __m512 *w3)
{
    const uint8_t *qh = b + 16, *q = b + 48 + 32 * g;
    const __m512 k16 = _mm512_set1_ps(16);
    float d0 = ks->d[2 * g], m0 = ks->m[2 * g], d1 = ks->d[2 * g + 1], m1 = ks->m[2 * g + 1];
    __m512 la0 = lut16(d0, m0), la1 = lut16(d1, m1);
    __m512 lb0 = _mm512_fmsub_ps(_mm512_add_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), k16),
                                 _mm512_set1_ps(d0), _mm512_set1_ps(m0));
    __m512 lb1 = _mm512_fmsub_ps(_mm512_add_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), k16),
                                 _mm512_set1_ps(d1), _mm512_set1_ps(m1));
    __m128i h0 = _mm_loadu_si128((const __m128i *)qh), h1 = _mm_loadu_si128((const __m128i *)(qh + 16));
    __m128i bit0 = _mm_set1_epi8((char)(1 << (2 * g))), bit1 = _mm_set1_epi8((char)(2 << (2 * g)));
    __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
    __m512i u0 = _mm512_srli_epi32(v0, 4), u1 = _mm512_srli_epi32(v1, 4);
    *w0 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(v0, la0), _mm_test_epi8_mask(h0, bit0), v0, lb0);
    *w1 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(v1, la0), _mm_test_epi8_mask(h1, bit0), v1, lb0);
    *w2 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(u0, la1), _mm_test_epi8_mask(h0, bit1), u0, lb1);
    *w3 = _mm512_mask_permutexvar_ps(_mm512_permutexvar_ps(u1, la1), _mm_test_epi8_mask(h1, bit1), u1, lb1);
}

/* 16 signed / unsigned byte codes -> f32 times a broadcast scale. */
TGT static inline __m512 scale_i8(__m128i q, float d)
{
    return _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

/* q6_K: (d * sc) * q, q in -32..31, sixteen i8 scales (d * (float)sc,
 * exact, sixteen at a time). */
TGT static inline void prep_q6_k(const uint8_t *b, struct kscales *ks)
{
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192))));
    _mm512_storeu_ps(ks->d, _mm512_mul_ps(_mm512_set1_ps(ld_f16(b + 208)), f));
}

/* q6_K group g: half g/2; part 0 = codes q1 (elements 0..31) and q2
 * (32..63), part 1 = q3 and q4 (dequant.c's names), built 32 at a time in
 * bytes. */
TGT static inline void grp_q6_k(const uint8_t *b, const struct kscales *ks, int g, __m512 *w0, __m512 *w1,
                                __m512 *w2, __m512 *w3)
{
    int h = g >> 1;
    const uint8_t *ql = b + 64 * h, *qhp = b + 128 + 32 * h;
    const float *s = ks->d + 8 * h + 4 * (g & 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i qh = _mm256_loadu_si256((const __m256i *)qhp), qa, qb;
    if (!(g & 1)) {
        qa = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        qb = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    } else {
        qa = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
        qb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    qa = _mm256_sub_epi8(qa, k32);
    qb = _mm256_sub_epi8(qb, k32);
    *w0 = scale_i8(_mm256_castsi256_si128(qa), s[0]);
    *w1 = scale_i8(_mm256_extracti128_si256(qa, 1), s[1]);
    *w2 = scale_i8(_mm256_castsi256_si128(qb), s[2]);
    *w3 = scale_i8(_mm256_extracti128_si256(qb, 1), s[3]);
}

/* q3_K: d * (sc - 32) per 16 elements, codes q - 4 where the hmask bit is
 * clear. The sixteen 6-bit scales in vectors: low nibbles from bytes
 * 0..7 (low then high halves), bits 4-5 from byte 8 + k%4 shifted by
 * 2*(k/4) (a per-dword shift of the four bytes broadcast), then
 * d * (float)(sc - 32) as the dequantizer rounds it. */
TGT static inline void prep_q3_k(const uint8_t *b, struct kscales *ks)
{
    const uint8_t *s = b + 96;
    const __m128i m4 = _mm_set1_epi8(0x0F), m2 = _mm_set1_epi8(3);
    __m128i v = _mm_loadl_epi64((const __m128i *)s);
    __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    uint32_t h;
    memcpy(&h, s + 8, 4);
    __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)h), _mm_setr_epi32(0, 2, 4, 6)), m2);
    __m512i sc = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_or_si128(lo, _mm_slli_epi16(hi, 4))), _mm512_set1_epi32(32));
    _mm512_storeu_ps(ks->d, _mm512_mul_ps(_mm512_set1_ps(ld_f16(b + 108)), _mm512_cvtepi32_ps(sc)));
}

/* q3_K group g: half h = g/2, shifts j = 2(g%2) and 2(g%2)+1 of qs. */
TGT static inline void grp_q3_k(const uint8_t *b, const struct kscales *ks, int g, __m512 *w0, __m512 *w1,
                                __m512 *w2, __m512 *w3)
{
    int h = g >> 1, j = 2 * (g & 1);
    const __m256i m3 = _mm256_set1_epi8(3), k4 = _mm256_set1_epi8(4);
    __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * h));
    __m256i hm = _mm256_loadu_si256((const __m256i *)b);
    __m256i qa = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
    __m256i qb = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j + 2), m3);
    qa = _mm256_mask_sub_epi8(qa, _mm256_testn_epi8_mask(hm, _mm256_set1_epi8((char)(1 << (4 * h + j)))), qa, k4);
    qb = _mm256_mask_sub_epi8(qb, _mm256_testn_epi8_mask(hm, _mm256_set1_epi8((char)(2 << (4 * h + j)))), qb, k4);
    const float *s = ks->d + 8 * h + 2 * j;
    *w0 = scale_i8(_mm256_castsi256_si128(qa), s[0]);
    *w1 = scale_i8(_mm256_extracti128_si256(qa, 1), s[1]);
    *w2 = scale_i8(_mm256_castsi256_si128(qb), s[2]);
    *w3 = scale_i8(_mm256_extracti128_si256(qb, 1), s[3]);
}

/* q2_K: (d * sc) * q - dmin * m per 16 elements, q in 0..3; the sixteen
 * scale and min nibbles converted and scaled as vectors (exact). */
TGT static inline void prep_q2_k(const uint8_t *b, struct kscales *ks)
{
    __m128i v = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(0x0F);
    __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, m4)));
    __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), m4)));
    _mm512_storeu_ps(ks->d, _mm512_mul_ps(_mm512_set1_ps(ld_f16(b + 80)), sc));
    _mm512_storeu_ps(ks->m, _mm512_mul_ps(_mm512_set1_ps(ld_f16(b + 82)), mn));
}

TGT static inline __m512 scale_min_u8(__m128i q, float d, float m)
{
    return _mm512_fmsub_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q)), _mm512_set1_ps(m));
}

/* q2_K group g: half h = g/2, shifts j = 2(g%2) and 2(g%2)+1 of qs. */
TGT static inline void grp_q2_k(const uint8_t *b, const struct kscales *ks, int g, __m512 *w0, __m512 *w1,
                                __m512 *w2, __m512 *w3)
{
    int h = g >> 1, j = 2 * (g & 1);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i qs = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * h));
    __m256i qa = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
    __m256i qb = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j + 2), m3);
    int k = 8 * h + 2 * j;
    *w0 = scale_min_u8(_mm256_castsi256_si128(qa), ks->d[k], ks->m[k]);
    *w1 = scale_min_u8(_mm256_extracti128_si256(qa, 1), ks->d[k + 1], ks->m[k + 1]);
    *w2 = scale_min_u8(_mm256_castsi256_si128(qb), ks->d[k + 2], ks->m[k + 2]);
    *w3 = scale_min_u8(_mm256_extracti128_si256(qb, 1), ks->d[k + 3], ks->m[k + 3]);
}

#define prep_q4_k prep_k4
#define prep_q5_k prep_k4

/* One k-quant block of one row into accumulators s0/s1 (x = the block's
 * 256 activations). */
#define KQ_BLOCK(T, b, x, s0, s1)                                                    \
    do {                                                                             \
        struct kscales ks_;                                                          \
        prep_##T(b, &ks_);                                                           \
        for (int g_ = 0; g_ < 4; g_++) {                                             \
            __m512 w0_, w1_, w2_, w3_;                                               \
            const float *xg_ = (x) + 64 * g_;                                        \
            grp_##T(b, &ks_, g_, &w0_, &w1_, &w2_, &w3_);                            \
            s0 = _mm512_fmadd_ps(w0_, _mm512_loadu_ps(xg_), s0);                     \
            s1 = _mm512_fmadd_ps(w1_, _mm512_loadu_ps(xg_ + 16), s1);                \
            s0 = _mm512_fmadd_ps(w2_, _mm512_loadu_ps(xg_ + 32), s0);                \
            s1 = _mm512_fmadd_ps(w3_, _mm512_loadu_ps(xg_ + 48), s1);                \
        }                                                                            \
    } while (0)

#define PF_BLOCK(b, BS)                       \
    do {                                      \
        for (int o_ = 0; o_ < BS; o_ += 64)   \
            PF((b) + o_);                     \
    } while (0)

#define KQ_DOTS(T, BS)                                                                           \
    TGT static float dot_##T(const void *w, const float *x, int64_t n)                           \
    {                                                                                            \
        const uint8_t *b = w;                                                                    \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;                                                \
        for (int64_t i = 0; i < n / QK_K; i++, b += BS, x += QK_K) {                             \
            PF_BLOCK(b, BS);                                                                     \
            KQ_BLOCK(T, b, x, s0, s1);                                                           \
        }                                                                                        \
        return reduce1(s0, s1);                                                                  \
    }                                                                                            \
    TGT static void dot4q_##T(const void *w, size_t rb, const float *x, int64_t n, float out[4]) \
    {                                                                                            \
        const uint8_t *b0 = w, *b1 = b0 + rb, *b2 = b1 + rb, *b3 = b2 + rb;                     \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                                               \
        for (int64_t i = 0; i < n / QK_K; i++, b0 += BS, b1 += BS, b2 += BS, b3 += BS, x += QK_K) { \
            PF_BLOCK(b0, BS);                                                                    \
            PF_BLOCK(b1, BS);                                                                    \
            PF_BLOCK(b2, BS);                                                                    \
            PF_BLOCK(b3, BS);                                                                    \
            KQ_BLOCK(T, b0, x, a0, c0);                                                          \
            KQ_BLOCK(T, b1, x, a1, c1);                                                          \
            KQ_BLOCK(T, b2, x, a2, c2);                                                          \
            KQ_BLOCK(T, b3, x, a3, c3);                                                          \
        }                                                                                        \
        hsum8x4(fold(a0, c0), fold(a1, c1), fold(a2, c2), fold(a3, c3), out);                    \
    }                                                                                            \
    TGT static void dq_##T(const void *src, float *dst, int64_t n)                               \
    {                                                                                            \
        const uint8_t *b = src;                                                                  \
        for (int64_t i = 0; i < n / QK_K; i++, b += BS) {                                        \
            struct kscales ks_;                                                                  \
            prep_##T(b, &ks_);                                                                   \
            for (int g = 0; g < 4; g++, dst += 64) {                                             \
                __m512 w0, w1, w2, w3;                                                           \
                grp_##T(b, &ks_, g, &w0, &w1, &w2, &w3);                                         \
                _mm512_storeu_ps(dst, w0);                                                       \
                _mm512_storeu_ps(dst + 16, w1);                                                  \
                _mm512_storeu_ps(dst + 32, w2);                                                  \
                _mm512_storeu_ps(dst + 48, w3);                                                  \
            }                                                                                    \
        }                                                                                        \
    }

KQ_DOTS(q2_k, 84)
KQ_DOTS(q3_k, 110)
KQ_DOTS(q4_k, 144)
KQ_DOTS(q5_k, 176)
KQ_DOTS(q6_k, 210)
#undef KQ_DOTS

/* f16 / bf16 decode, four rows: the single-row kernels' order, sharing the
 * x loads. A row with a partial last chunk pair goes row by row. */
#define HALF_DOT4(T, CVT)                                                                        \
    TGT static void dot4q_##T(const void *w, size_t rb, const float *x, int64_t n, float out[4]) \
    {                                                                                            \
        const uint8_t *p0 = w, *p1 = p0 + rb, *p2 = p1 + rb, *p3 = p2 + rb;                     \
        if (n % 32) {                                                                            \
            out[0] = dot_##T(p0, x, n);                                                          \
            out[1] = dot_##T(p1, x, n);                                                          \
            out[2] = dot_##T(p2, x, n);                                                          \
            out[3] = dot_##T(p3, x, n);                                                          \
            return;                                                                              \
        }                                                                                        \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                              \
        __m512 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                                               \
        for (int64_t i = 0; i < n; i += 32) {                                                    \
            PF(p0 + 2 * i);                                                                      \
            PF(p1 + 2 * i);                                                                      \
            PF(p2 + 2 * i);                                                                      \
            PF(p3 + 2 * i);                                                                      \
            __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);                \
            a0 = _mm512_fmadd_ps(CVT(p0 + 2 * i), x0, a0);                                      \
            c0 = _mm512_fmadd_ps(CVT(p0 + 2 * i + 32), x1, c0);                                  \
            a1 = _mm512_fmadd_ps(CVT(p1 + 2 * i), x0, a1);                                       \
            c1 = _mm512_fmadd_ps(CVT(p1 + 2 * i + 32), x1, c1);                                  \
            a2 = _mm512_fmadd_ps(CVT(p2 + 2 * i), x0, a2);                                       \
            c2 = _mm512_fmadd_ps(CVT(p2 + 2 * i + 32), x1, c2);                                  \
            a3 = _mm512_fmadd_ps(CVT(p3 + 2 * i), x0, a3);                                       \
            c3 = _mm512_fmadd_ps(CVT(p3 + 2 * i + 32), x1, c3);                                  \
        }                                                                                        \
        hsum8x4(fold(a0, c0), fold(a1, c1), fold(a2, c2), fold(a3, c3), out);                    \
    }
#define F16X16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
HALF_DOT4(f16, F16X16)
HALF_DOT4(bf16, bf16x16)
#undef HALF_DOT4
#undef F16X16

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

/* ---- softmax's scale and max (kernels.h: bt_scale_max_f32): max(s, m)
 * returns m when s is NaN, as the plain loop skips it; the lanes are
 * reduced the same way. Products are single roundings, so x is the plain
 * loop's bits; the maximum is too, up to the sign of a zero. ---- */
TGT static float scale_max_f32(float *x, int64_t n, float scale)
{
    __m512 sc = _mm512_set1_ps(scale), m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x + i), sc), b = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), sc);
        _mm512_storeu_ps(x + i, a);
        _mm512_storeu_ps(x + i + 16, b);
        m0 = _mm512_max_ps(a, m0);
        m1 = _mm512_max_ps(b, m1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sc);
        _mm512_mask_storeu_ps(x + i, k, a);
        m0 = _mm512_mask_max_ps(m0, k, a, m0);
    }
    float l[16];
    _mm512_storeu_ps(l, _mm512_max_ps(m1, m0));
    float m = -INFINITY;
    for (int j = 0; j < 16; j++)
        if (l[j] > m) m = l[j];
    return m;
}

/* ---- attention's weighted sum (kernels.h: bt_wsum_f32): the plain
 * loop's roundings lane by lane (mul, then add; BT_NOFUSE_V keeps GCC from
 * contracting them), a 64-float head held in four registers across all
 * positions. ---- */
TGT static void wsum_f32(float *acc, const float *wts, float scale, const float *v, int64_t ldv, int64_t np, int64_t n)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a0 = _mm512_loadu_ps(acc + i), a1 = _mm512_loadu_ps(acc + i + 16);
        __m512 a2 = _mm512_loadu_ps(acc + i + 32), a3 = _mm512_loadu_ps(acc + i + 48);
        for (int64_t p = 0; p < np; p++) {
            __m512 w = _mm512_set1_ps(wts[p] * scale);
            const float *vp = v + p * ldv + i;
            __m512 t0 = _mm512_mul_ps(w, _mm512_loadu_ps(vp)), t1 = _mm512_mul_ps(w, _mm512_loadu_ps(vp + 16));
            __m512 t2 = _mm512_mul_ps(w, _mm512_loadu_ps(vp + 32)), t3 = _mm512_mul_ps(w, _mm512_loadu_ps(vp + 48));
            BT_NOFUSE_V(t0);
            BT_NOFUSE_V(t1);
            BT_NOFUSE_V(t2);
            BT_NOFUSE_V(t3);
            a0 = _mm512_add_ps(a0, t0);
            a1 = _mm512_add_ps(a1, t1);
            a2 = _mm512_add_ps(a2, t2);
            a3 = _mm512_add_ps(a3, t3);
        }
        _mm512_storeu_ps(acc + i, a0);
        _mm512_storeu_ps(acc + i + 16, a1);
        _mm512_storeu_ps(acc + i + 32, a2);
        _mm512_storeu_ps(acc + i + 48, a3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        for (int64_t p = 0; p < np; p++) {
            __m512 t = _mm512_mul_ps(_mm512_set1_ps(wts[p] * scale), _mm512_maskz_loadu_ps(m, v + p * ldv + i));
            BT_NOFUSE_V(t);
            a = _mm512_add_ps(a, t);
        }
        _mm512_mask_storeu_ps(acc + i, m, a);
    }
}

/* ---- the delta rule's token (kernels.h: bt_gdn_seq_f32): columns in
 * lanes, 128 at a time (eight independent sums), then 64 (four), a masked
 * 16 for the rest; per lane the scalar loop's roundings (mul, then
 * add, never fused). ---- */
#define GDN_PASS1(J)                                                              \
    do {                                                                          \
        __m512 s_ = _mm512_mul_ps(_mm512_maskz_loadu_ps(m##J, r + 16 * J), dec);  \
        _mm512_mask_storeu_ps(r + 16 * J, m##J, s_);                              \
        __m512 t_ = _mm512_mul_ps(ki, s_);                                        \
        BT_NOFUSE_V(t_);                                                          \
        a##J = _mm512_add_ps(a##J, t_);                                           \
    } while (0)
#define GDN_PASS2(J)                                                              \
    do {                                                                          \
        __m512 t_ = _mm512_mul_ps(ki, u##J);                                      \
        BT_NOFUSE_V(t_);                                                          \
        __m512 s_ = _mm512_add_ps(_mm512_maskz_loadu_ps(m##J, r + 16 * J), t_);   \
        _mm512_mask_storeu_ps(r + 16 * J, m##J, s_);                              \
        __m512 t2_ = _mm512_mul_ps(qi, s_);                                       \
        BT_NOFUSE_V(t2_);                                                         \
        a##J = _mm512_add_ps(a##J, t2_);                                          \
    } while (0)
/* A block of up to 64 columns (w of them left): its masks, one per
 * vector; the first pass over the rows, sk into a0..a3 (kk: the token's
 * key); u = (v - sk) * beta from those (vp: the block's values); the
 * second pass, out into a0..a3 (kk, qq: the key and the scaled query). */
#define GDN_MASKS(w)                                                              \
    __mmask16 m0 = (w) >= 16 ? (__mmask16)0xFFFF : tail_mask(w);                  \
    __mmask16 m1 = (w) >= 32 ? (__mmask16)0xFFFF : (w) > 16 ? tail_mask((w) - 16) : 0; \
    __mmask16 m2 = (w) >= 48 ? (__mmask16)0xFFFF : (w) > 32 ? tail_mask((w) - 32) : 0; \
    __mmask16 m3 = (w) >= 64 ? (__mmask16)0xFFFF : (w) > 48 ? tail_mask((w) - 48) : 0
#define GDN_PASS1_ROWS(kk)                                                        \
    do {                                                                          \
        for (int64_t i = 0; i < dk; i++) {                                        \
            float *r = S + i * dv + c;                                            \
            __m512 ki = _mm512_set1_ps((kk)[i]);                                  \
            GDN_PASS1(0);                                                         \
            GDN_PASS1(1);                                                         \
            GDN_PASS1(2);                                                         \
            GDN_PASS1(3);                                                         \
        }                                                                         \
    } while (0)
#define GDN_PASS2_ROWS(kk, qq)                                                    \
    do {                                                                          \
        for (int64_t i = 0; i < dk; i++) {                                        \
            float *r = S + i * dv + c;                                            \
            __m512 ki = _mm512_set1_ps((kk)[i]), qi = _mm512_set1_ps((qq)[i]);    \
            GDN_PASS2(0);                                                         \
            GDN_PASS2(1);                                                         \
            GDN_PASS2(2);                                                         \
            GDN_PASS2(3);                                                         \
        }                                                                         \
    } while (0)
#define GDN_U(vp)                                                                 \
    __m512 u0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m0, (vp)), a0), bt);      \
    __m512 u1 = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m1, (vp) + 16), a1), bt); \
    __m512 u2 = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m2, (vp) + 32), a2), bt); \
    __m512 u3 = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m3, (vp) + 48), a3), bt)

/* 128 columns, eight sums in flight: each sum is a chain of dk adds (the
 * order the bits need), so four chains left the adder waiting on its
 * latency (128 x 128 head state, 120 tokens: 3.9 us a token). */
TGT static void gdn_cols128(float *S, int64_t dk, int64_t dv, int64_t c, __m512 dec, __m512 bt, const float *k,
                            const float *v, const float *qs, float *out)
{
    const __mmask16 m0 = 0xFFFF, m1 = m0, m2 = m0, m3 = m0, m4 = m0, m5 = m0, m6 = m0, m7 = m0;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t i = 0; i < dk; i++) {
        float *r = S + i * dv + c;
        __m512 ki = _mm512_set1_ps(k[i]);
        GDN_PASS1(0); GDN_PASS1(1); GDN_PASS1(2); GDN_PASS1(3);
        GDN_PASS1(4); GDN_PASS1(5); GDN_PASS1(6); GDN_PASS1(7);
    }
    __m512 u0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c), a0), bt);
    __m512 u1 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 16), a1), bt);
    __m512 u2 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 32), a2), bt);
    __m512 u3 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 48), a3), bt);
    __m512 u4 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 64), a4), bt);
    __m512 u5 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 80), a5), bt);
    __m512 u6 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 96), a6), bt);
    __m512 u7 = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + c + 112), a7), bt);
    a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t i = 0; i < dk; i++) {
        float *r = S + i * dv + c;
        __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(qs[i]);
        GDN_PASS2(0); GDN_PASS2(1); GDN_PASS2(2); GDN_PASS2(3);
        GDN_PASS2(4); GDN_PASS2(5); GDN_PASS2(6); GDN_PASS2(7);
    }
    _mm512_storeu_ps(out + c, a0);
    _mm512_storeu_ps(out + c + 16, a1);
    _mm512_storeu_ps(out + c + 32, a2);
    _mm512_storeu_ps(out + c + 48, a3);
    _mm512_storeu_ps(out + c + 64, a4);
    _mm512_storeu_ps(out + c + 80, a5);
    _mm512_storeu_ps(out + c + 96, a6);
    _mm512_storeu_ps(out + c + 112, a7);
}

TGT static void gdn_cols_f32(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, float decay, const float *k,
                             const float *v, float beta, const float *qs, float *out)
{
    const __m512 dec = _mm512_set1_ps(decay), bt = _mm512_set1_ps(beta);
    for (; c0 + 128 <= c1; c0 += 128) gdn_cols128(S, dk, dv, c0, dec, bt, k, v, qs, out);
    for (int64_t c = c0; c < c1; c += 64) {
        int64_t w = c1 - c;
        GDN_MASKS(w);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        GDN_PASS1_ROWS(k);
        GDN_U(v + c);
        a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        GDN_PASS2_ROWS(k, qs);
        _mm512_mask_storeu_ps(out + c, m0, a0);
        _mm512_mask_storeu_ps(out + c + 16, m1, a1);
        _mm512_mask_storeu_ps(out + c + 32, m2, a2);
        _mm512_mask_storeu_ps(out + c + 48, m3, a3);
    }
}

/* ---- the delta rule over a prefill's tokens (bt_gdn_seq_f32), 64 columns
 * at a time: token t's second pass (S_i += k_i u; out += qs_i S_i) and
 * token t+1's first (S_i *= decay'; sk' += k'_i S_i) in one sweep of the
 * rows, so the block of S (32 KB for 128 rows) is read and written once a
 * token, and eight sums are in flight (out's four, sk's four). Per column
 * the operations and their order are the token-by-token ones: the same
 * bits. ---- */
#define SEQ_MUL_ADD(acc, a, b)                                                    \
    do {                                                                          \
        __m512 p_ = _mm512_mul_ps(a, b);                                          \
        BT_NOFUSE_V(p_);                                                          \
        acc = _mm512_add_ps(acc, p_);                                             \
    } while (0)
#define SEQ_FUSED(J)                                                              \
    do {                                                                          \
        __m512 x_ = _mm512_maskz_loadu_ps(m##J, r + 16 * J);                      \
        SEQ_MUL_ADD(x_, ki, u##J);                                                \
        SEQ_MUL_ADD(o##J, qi, x_);                                                \
        x_ = _mm512_mul_ps(x_, dn);                                               \
        _mm512_mask_storeu_ps(r + 16 * J, m##J, x_);                              \
        SEQ_MUL_ADD(a##J, kn, x_);                                                \
    } while (0)

TGT static void gdn_seq_f32(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, int T, const float *decay,
                            const float *k, int64_t ldk, const float *v, int64_t ldv, const float *beta,
                            const float *qs, int64_t ldq, float *out, int64_t ldo)
{
    for (int64_t c = c0; c < c1; c += 64) {
        int64_t w = c1 - c;
        GDN_MASKS(w);
        /* token 0's first pass */
        __m512 dec = _mm512_set1_ps(decay[0]);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        GDN_PASS1_ROWS(k);
        for (int t = 0; t < T; t++) {
            const float *kt = k + (int64_t)t * ldk, *vt = v + (int64_t)t * ldv + c, *qt = qs + (int64_t)t * ldq;
            __m512 bt = _mm512_set1_ps(beta[t]);
            GDN_U(vt);
            __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
            a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            if (t + 1 < T) {
                const float *kt1 = kt + ldk;
                __m512 dn = _mm512_set1_ps(decay[t + 1]);
                for (int64_t i = 0; i < dk; i++) {
                    float *r = S + i * dv + c;
                    __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]), kn = _mm512_set1_ps(kt1[i]);
                    SEQ_FUSED(0);
                    SEQ_FUSED(1);
                    SEQ_FUSED(2);
                    SEQ_FUSED(3);
                }
            } else {
                /* the last token: its second pass alone, as gdn_cols_f32's */
                GDN_PASS2_ROWS(kt, qt);
                o0 = a0, o1 = a1, o2 = a2, o3 = a3;
            }
            float *ot = out + (int64_t)t * ldo + c;
            _mm512_mask_storeu_ps(ot, m0, o0);
            _mm512_mask_storeu_ps(ot + 16, m1, o1);
            _mm512_mask_storeu_ps(ot + 32, m2, o2);
            _mm512_mask_storeu_ps(ot + 48, m3, o3);
        }
    }
}
#undef SEQ_MUL_ADD
#undef SEQ_FUSED
#undef GDN_PASS1
#undef GDN_PASS2
#undef GDN_MASKS
#undef GDN_PASS1_ROWS
#undef GDN_PASS2_ROWS
#undef GDN_U

bool bt_kv_avx512_fill(bt_kvariant *kv)
{
    kv->name = "avx512";
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
    kv->dot4x2p_f32 = dot4x2p_f32;
    kv->dot4q[BT_DT_F32] = dot4q_f32;
    kv->dot4q[BT_DT_Q8_0] = dot4q_q8_0;
    kv->dot4q[BT_DT_Q4_0] = dot4q_q4_0;
    kv->dot4q[BT_DT_Q4_1] = dot4q_q4_1;
    kv->dot4q[BT_DT_Q5_0] = dot4q_q5_0;
    kv->dot4q[BT_DT_Q5_1] = dot4q_q5_1;
    kv->dot4q[BT_DT_MXFP4] = dot4q_mxfp4;
    kv->dot4q[BT_DT_F16] = dot4q_f16;
    kv->dot4q[BT_DT_BF16] = dot4q_bf16;
    kv->dot4q[BT_DT_Q2_K] = dot4q_q2_k;
    kv->dot4q[BT_DT_Q3_K] = dot4q_q3_k;
    kv->dot4q[BT_DT_Q4_K] = dot4q_q4_k;
    kv->dot4q[BT_DT_Q5_K] = dot4q_q5_k;
    kv->dot4q[BT_DT_Q6_K] = dot4q_q6_k;
    kv->sweep_f32 = sweep_f32;
    kv->sweep_chunks_f32 = sweep_chunks_f32;
    kv->wsum_f32 = wsum_f32;
    kv->scale_max_f32 = scale_max_f32;
    kv->dot8x3_f32 = dot8x3_f32;
    kv->dot16_f32 = dot16_f32;
    kv->exp_sub_f32 = bt_exp_sub_f32_avx512;
    kv->gdn_cols_f32 = gdn_cols_f32;
    kv->softmax_acc_f64 = bt_softmax_acc_f64_avx2;   /* four chains: lanes of a 256-bit vector */
    kv->gdn_seq_f32 = gdn_seq_f32;
    return true;
}

#else

bool bt_kv_avx512_fill(bt_kvariant *kv)
{
    (void)kv;
    return false;
}

#endif
