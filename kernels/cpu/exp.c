/* exp.c - x[i] = expf(x[i] - m) for attention's softmax: the scalar
 * reference (the C library's expf itself) and AVX2 / AVX-512 versions that
 * return the same bits for every input.
 *
 * Why replicate instead of approximate: the engine's outputs must not move
 * by one bit between variants (golden outputs, batch invariance, decode ==
 * prefill), and the scalar path calls libm. The SIMD code therefore runs the
 * algorithm of the libm it was checked against - Debian 12's glibc 2.36
 * x86_64, whose expf dispatches to __expf_fma on CPUs with FMA+AVX2 (every
 * CPU our avx2/avx512 variants run on) - operation for operation, with the
 * roundings where that code rounds and the fused multiply-adds where it
 * fuses (read from its disassembly):
 *
 *   xd = (double)x
 *   kd = fma(N/ln2, xd, 0x1.8p52)        N = 32; the add rounds kd to an
 *                                        integer in its low mantissa bits
 *   ki = bits(kd);  kd = kd - 0x1.8p52
 *   r  = fma(N/ln2, xd, -kd)             r in [-1/2, 1/2]
 *   s  = double with bits T[ki % 32] + (ki << 47)   = 2^(ki/32)
 *   z  = fma(C0, r, C1);  r2 = r * r;  y = fma(C2, r, 1.0)
 *   y  = fma(z, r2, y);   y = y * s;   return (float)y
 *
 * for |x| < 88 and up to the thresholds below; beyond them libm returns:
 * x > 0x1.62e42ep6 (ln of 2^128): +Inf; x < -0x1.9fe368p6 (ln 2^-150) or
 * x = -Inf: +0; -0x1.9fe368p6 <= x < -0x1.9d1d9ep6 (ln 2^-149): the least
 * subnormal (it returns 0x1.4p-75f squared, which rounds to 2^-149); NaN
 * and +Inf: x + x. errno is not set here.
 *
 * Constants: N/ln2, C0..C2 (a minimax cubic for 2^(r/N)) are the double
 * values that libm's code loads (read from its .rodata; the literals below
 * are those bits). T is not copied: T[j] = bits(2^(j/32)) - (j << 47), the
 * shift undone because the code adds ki << 47 (ki = k + bits(0x1.8p52),
 * whose high bits fall off the shift). 2^(j/32) correctly rounded to double
 * came from
 *   python3 -c "from decimal import *; import struct; getcontext().prec=60;
 *     [print(hex(struct.unpack('<Q',struct.pack('<d',float(Decimal(2)**
 *     (Decimal(j)/32))))[0])) for j in range(32)]"
 * (60 digits, float(Decimal) rounds correctly; 2^(j/32) is irrational for
 * j > 0, so no value is a tie). tests/test_expf.c checks every SIMD result
 * against the running libm, and BT_EXPF_EXHAUSTIVE=1 all 2^32 inputs.
 * bt_kernels_init() installs a SIMD version only where it reproduces the
 * linked libm on a probe set (bt_exp_sub_f32_matches_libm), so with another
 * C library the SIMD variants most likely fall back to the expf loop
 * (slower, same bits); only test_expf run there proves it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_impl.h"
#include "base/util.h"

/* x[i] - m rounds once in float, in every variant. */
void bt_exp_sub_f32_scalar(float *x, int64_t n, float m)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = expf(x[i] - m);
}

/* A guard, not a proof (that is tests/test_expf.c): a libm other than the
 * one the SIMD code replicates (another C library, a glibc that changed its
 * expf) is very likely to differ on some of 8192 inputs spread over the
 * range where expf is neither 0, 1 nor Inf (mostly negative: softmax
 * exponents are <= 0) and the special values. About 50 us, once. */
bool bt_exp_sub_f32_matches_libm(void (*fn)(float *x, int64_t n, float m))
{
    enum { NP = 8192, NNEG = 6144 };
    static const uint32_t special[] = { 0x7f800000, 0xff800000, 0x7fc00001, 0xffa00001, 0x42b17218, 0xc2cff1b5,
                                        0xc2ce8ecf, 0xc2ce8ed0, 0x80000001, 0x00000000 };
    float *x = malloc(2 * NP * sizeof(float));
    if (!x)
        return false;
    float *want = x + NP;
    int n = 0;
    for (uint32_t i = 0; i < NNEG; i++) {           /* -0 .. about -104.9 */
        uint32_t u = 0x80000000u + i * 182003u;
        memcpy(&x[n++], &u, 4);
    }
    for (uint32_t i = 0; n < NP - (int)BT_ARRAY_SIZE(special); i++) {   /* +0 .. about 89.3 */
        uint32_t u = i * 546001u;
        memcpy(&x[n++], &u, 4);
    }
    for (size_t i = 0; i < BT_ARRAY_SIZE(special); i++)
        memcpy(&x[n++], &special[i], 4);
    for (int i = 0; i < NP; i++)
        want[i] = expf(x[i]);
    fn(x, NP, 0.0f);
    bool same = memcmp(x, want, NP * sizeof(float)) == 0;
    free(x);
    return same;
}

void bt_exp_sub_f32(float *x, int64_t n, float m)
{
    if (n > 0)
        bt_kernels_active()->exp_sub_f32(x, n, m);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)

#include <immintrin.h>

#define E_(j, pow2_bits) ((uint64_t)(pow2_bits) - ((uint64_t)(j) << 47))
static const uint64_t exp2_tab[32] __attribute__((aligned(64))) = {
    E_(0, 0x3ff0000000000000), E_(1, 0x3ff059b0d3158574), E_(2, 0x3ff0b5586cf9890f), E_(3, 0x3ff11301d0125b51),
    E_(4, 0x3ff172b83c7d517b), E_(5, 0x3ff1d4873168b9aa), E_(6, 0x3ff2387a6e756238), E_(7, 0x3ff29e9df51fdee1),
    E_(8, 0x3ff306fe0a31b715), E_(9, 0x3ff371a7373aa9cb), E_(10, 0x3ff3dea64c123422), E_(11, 0x3ff44e086061892d),
    E_(12, 0x3ff4bfdad5362a27), E_(13, 0x3ff5342b569d4f82), E_(14, 0x3ff5ab07dd485429), E_(15, 0x3ff6247eb03a5585),
    E_(16, 0x3ff6a09e667f3bcd), E_(17, 0x3ff71f75e8ec5f74), E_(18, 0x3ff7a11473eb0187), E_(19, 0x3ff82589994cce13),
    E_(20, 0x3ff8ace5422aa0db), E_(21, 0x3ff93737b0cdc5e5), E_(22, 0x3ff9c49182a3f090), E_(23, 0x3ffa5503b23e255d),
    E_(24, 0x3ffae89f995ad3ad), E_(25, 0x3ffb7f76f2fb5e47), E_(26, 0x3ffc199bdd85529c), E_(27, 0x3ffcb720dcef9069),
    E_(28, 0x3ffd5818dcfba487), E_(29, 0x3ffdfc97337b9b5f), E_(30, 0x3ffea4afa2a490da), E_(31, 0x3fff50765b6e4540),
};
#undef E_

#define INV_LN2_N 0x1.71547652b82fep+5     /* 32 / ln 2 */
#define SHIFT 0x1.8p52
#define C0 0x1.c6af84b912394p-20
#define C1 0x1.ebfce50fac4f3p-13
#define C2 0x1.62e42ff0c52d6p-6
#define X_OFLOW 0x1.62e42ep6f              /* above: +Inf */
#define X_UFLOW -0x1.9fe368p6f             /* below: +0 */
#define X_MAY_UFLOW -0x1.9d1d9ep6f         /* below (down to X_UFLOW): 2^-149 */

#define TGT2 __attribute__((target("avx2,fma")))
#define TGT512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

/* Four lanes of the main path (header), x already in double. */
TGT2 static inline __m128 exp4_avx2(__m256d xd)
{
    const __m256d inv = _mm256_set1_pd(INV_LN2_N), shift = _mm256_set1_pd(SHIFT);
    __m256d kd = _mm256_fmadd_pd(inv, xd, shift);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)exp2_tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(C0), r, _mm256_set1_pd(C1));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, _mm256_castsi256_pd(t));
    return _mm256_cvtpd_ps(y);
}

/* Eight lanes: the main path, then libm's answers where it does not take it. */
TGT2 static inline __m256 exp8_avx2(__m256 x)
{
    __m128 lo = exp4_avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    __m128 hi = exp4_avx2(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    __m256 y = _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
    /* |x| >= 88 or NaN: one test keeps the common case short. */
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    if (_mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(88.0f), _CMP_NLT_UQ))) {
        y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(X_OFLOW), _CMP_GT_OQ));
        y = _mm256_blendv_ps(y, _mm256_set1_ps(0x1p-149f), _mm256_cmp_ps(x, _mm256_set1_ps(X_MAY_UFLOW), _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(X_UFLOW), _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    return y;
}

TGT2 void bt_exp_sub_f32_avx2(float *x, int64_t n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
    if (i < n) {
        float buf[8] = { 0 };
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(buf, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(buf), vm)));
        memcpy(x + i, buf, (size_t)(n - i) * sizeof(float));
    }
}

/* Eight lanes of the main path; the table is four zmm of 8 entries, looked
 * up by two two-source permutes (index bits 0-3) and a blend on bit 4. */
TGT512 static inline __m256 exp8_avx512(__m512d xd, const __m512i tab[4])
{
    const __m512d inv = _mm512_set1_pd(INV_LN2_N), shift = _mm512_set1_pd(SHIFT);
    __m512d kd = _mm512_fmadd_pd(inv, xd, shift);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    __m512i t0 = _mm512_permutex2var_epi64(tab[0], ki, tab[1]);
    __m512i t1 = _mm512_permutex2var_epi64(tab[2], ki, tab[3]);
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), t0, t1);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(C0), r, _mm512_set1_pd(C1));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    y = _mm512_mul_pd(y, _mm512_castsi512_pd(t));
    return _mm512_cvtpd_ps(y);
}

TGT512 static inline __m512 exp16_avx512(__m512 x, const __m512i tab[4])
{
    __m256 lo = exp8_avx512(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), tab);
    __m256 hi = exp8_avx512(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), tab);
    __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    __m512 ax = _mm512_abs_ps(x);
    if (_mm512_cmp_ps_mask(ax, _mm512_set1_ps(88.0f), _CMP_NLT_UQ)) {
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(X_OFLOW), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(X_MAY_UFLOW), _CMP_LT_OQ), _mm512_set1_ps(0x1p-149f));
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(X_UFLOW), _CMP_LT_OQ), _mm512_setzero_ps());
        y = _mm512_mask_add_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
    }
    return y;
}

TGT512 void bt_exp_sub_f32_avx512(float *x, int64_t n, float m)
{
    const __m512i tab[4] = {
        _mm512_load_si512(exp2_tab), _mm512_load_si512(exp2_tab + 8),
        _mm512_load_si512(exp2_tab + 16), _mm512_load_si512(exp2_tab + 24),
    };
    const __m512 vm = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, exp16_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), tab));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm);
        _mm512_mask_storeu_ps(x + i, k, exp16_avx512(v, tab));
    }
}

#endif
