/* dot.c - scalar dot products (the reference), the run-time choice of SIMD
 * variant, and the public bt_dequant_row / bt_vec_dot entry points.
 *
 * Every dot is the f32 dot of the dequantized weights in one fixed order
 * (kernels_impl.h), so a row's value does not depend on which kernel or
 * batch computed it. The SIMD variants use the same algebra in their own
 * fixed order, so they differ from this code only by reassociation. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels_impl.h"
#include "base/util.h"


/* The scalar canonical order (see kernels_impl.h): element i goes into
 * s[i % 8]; the product is rounded before the add (the barrier keeps a
 * compiler targeting FMA from fusing it in some places and not others), so
 * every caller gets the same bits. Callers pass runs that start at a
 * multiple of 8, so the lane is the element's position in the row. Where
 * the barrier can hold a vector, eight elements go at a time as two
 * 4-lane vectors: lane-wise operations, so the same bits, but a barrier per
 * scalar product would stop the compiler from vectorizing the loop. */
#if defined(__x86_64__) || defined(__aarch64__)
typedef float bt_v4f __attribute__((vector_size(16)));
#if defined(__x86_64__)
#define NOFUSE_V4(v) __asm__("" : "+x"(v))
#else
#define NOFUSE_V4(v) __asm__("" : "+w"(v))
#endif
#endif

static inline void acc8(float s[8], const float *w, const float *x, int64_t n)
{
    int64_t i = 0;
#ifdef NOFUSE_V4
    bt_v4f s0, s1;
    memcpy(&s0, s, 16);
    memcpy(&s1, s + 4, 16);
    for (; i + 8 <= n; i += 8) {
        bt_v4f w0, w1, x0, x1;
        memcpy(&w0, w + i, 16);
        memcpy(&w1, w + i + 4, 16);
        memcpy(&x0, x + i, 16);
        memcpy(&x1, x + i + 4, 16);
        bt_v4f p0 = w0 * x0, p1 = w1 * x1;
        NOFUSE_V4(p0);
        NOFUSE_V4(p1);
        s0 += p0;
        s1 += p1;
    }
    memcpy(s, &s0, 16);
    memcpy(s + 4, &s1, 16);
#endif
    for (; i < n; i++) {
        float p = w[i] * x[i];
        BT_NOFUSE_F(p);
        s[i & 7] += p;
    }
}

static inline float sum8(const float s[8])
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static float dot_f32(const void *w, const float *x, int64_t n)
{
    float s[8] = { 0 };
    acc8(s, w, x, n);
    return sum8(s);
}

static void dot4_f32(const float *w, int64_t ldw, const float *x, int64_t n, float out[4])
{
    for (int r = 0; r < 4; r++)
        out[r] = dot_f32(w + r * ldw, x, n);
}

static void dot4x2_f32(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8])
{
    dot4_f32(w, ldw, x, n, out);
    dot4_f32(w, ldw, x + ldx, n, out + 4);
}

/* Half-precision rows: converted 256 at a time, then the f32 order. */
static float dot_f16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    float s[8] = { 0 }, tmp[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t k = BT_MIN(256, n - i);
        for (int64_t j = 0; j < k; j++)
            tmp[j] = rd_f16(p + 2 * (i + j));
        acc8(s, tmp, x + i, k);
    }
    return sum8(s);
}

static float dot_bf16(const void *w, const float *x, int64_t n)
{
    const uint8_t *p = w;
    float s[8] = { 0 }, tmp[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t k = BT_MIN(256, n - i);
        for (int64_t j = 0; j < k; j++) {
            uint16_t h;
            memcpy(&h, p + 2 * (i + j), 2);
            tmp[j] = bt_bf16_to_f32(h);
        }
        acc8(s, tmp, x + i, k);
    }
    return sum8(s);
}

/* Quantized rows: dequantize one block into a stack buffer (exactly
 * bt_dequant_row's weights) and continue the f32 order over it. */
#define GENERIC_DOT(name, type)                                                \
    static float name(const void *w, const float *x, int64_t n)               \
    {                                                                          \
        const bt_dtype_info *ti = bt_dtype(type);                              \
        float tmp[QK_K], s[8] = { 0 };                                         \
        const uint8_t *b = w;                                                  \
        for (int64_t i = 0; i < n; i += ti->blck, b += ti->type_size) {        \
            scalar.dequant[type](b, tmp, ti->blck);                            \
            acc8(s, tmp, x + i, ti->blck);                                     \
        }                                                                      \
        return sum8(s);                                                        \
    }

static bt_kvariant scalar, avx2, avx512;
static bool have_avx2, have_avx512;
static const bt_kvariant *active = &scalar;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

GENERIC_DOT(dot_q4_0, BT_DT_Q4_0)
GENERIC_DOT(dot_q4_1, BT_DT_Q4_1)
GENERIC_DOT(dot_q8_0, BT_DT_Q8_0)
GENERIC_DOT(dot_q5_0, BT_DT_Q5_0)
GENERIC_DOT(dot_q5_1, BT_DT_Q5_1)
GENERIC_DOT(dot_mxfp4, BT_DT_MXFP4)
GENERIC_DOT(dot_q2_k, BT_DT_Q2_K)
GENERIC_DOT(dot_q3_k, BT_DT_Q3_K)
GENERIC_DOT(dot_q4_k, BT_DT_Q4_K)
GENERIC_DOT(dot_q5_k, BT_DT_Q5_K)
GENERIC_DOT(dot_q6_k, BT_DT_Q6_K)

/* ---- the tap statistics' finite sweep (kernels.h). Per chunk: float
 * lanes s[l] += v, q[l] += v * v (product rounded, then added) over 8-wide
 * steps, the tail past a multiple of 8 into lane 0; then each lane into its
 * double. The SIMD sweep does exactly these operations. ---- */

void bt_sweep_init(bt_sweep *acc)
{
    for (int l = 0; l < 8; l++) {
        acc->sum[l] = acc->sumsq[l] = 0;
        acc->mn[l] = INFINITY;
        acc->mx[l] = -INFINITY;
    }
}

int64_t bt_sweep_f32_scalar(const float *x, int64_t n, bt_sweep *acc)
{
    int64_t i = 0;
    while (i < n) {
        int64_t end = BT_MIN(n, i + 64);
        for (int64_t j = i; j < end; j++)
            if (!isfinite(x[j]))
                return i;
        float s[8] = {0}, q[8] = {0};
        int64_t j = i;
        for (; j + 8 <= end; j += 8)
            for (int l = 0; l < 8; l++) {
                float v = x[j + l], vv = v * v;
                BT_NOFUSE_F(vv);
                s[l] += v;
                q[l] += vv;
                acc->mn[l] = v < acc->mn[l] ? v : acc->mn[l];
                acc->mx[l] = v > acc->mx[l] ? v : acc->mx[l];
            }
        for (; j < end; j++) {
            float v = x[j], vv = v * v;
            BT_NOFUSE_F(vv);
            s[0] += v;
            q[0] += vv;
            acc->mn[0] = v < acc->mn[0] ? v : acc->mn[0];
            acc->mx[0] = v > acc->mx[0] ? v : acc->mx[0];
        }
        for (int l = 0; l < 8; l++) {
            acc->sum[l] += s[l];
            acc->sumsq[l] += q[l];
        }
        i = end;
    }
    return n;
}

/* The same per chunk, its lanes stored instead of folded (kernels.h:
 * bt_sweep_chunks_f32): the sweep of one chunk into fresh accumulators,
 * whose doubles then hold the chunk's float sums exactly (0 + s). */
static int64_t sweep_chunks_f32(const float *x, int64_t nc, bt_sweep_chunk *out)
{
    for (int64_t c = 0; c < nc; c++, x += 64) {
        bt_sweep a;
        bt_sweep_init(&a);
        if (bt_sweep_f32_scalar(x, 64, &a) < 64)
            return c;
        for (int l = 0; l < 8; l++) {
            out[c].s[l] = (float)a.sum[l];
            out[c].q[l] = (float)a.sumsq[l];
            out[c].mn[l] = a.mn[l];
            out[c].mx[l] = a.mx[l];
        }
    }
    return nc;
}

/* ---- attention's weighted sum of value rows (kernels.h) ---- */
static void wsum_f32(float *acc, const float *wts, float scale, const float *v, int64_t ldv, int64_t np, int64_t n)
{
    for (int64_t p = 0; p < np; p++) {
        float w = wts[p] * scale;
        const float *vp = v + p * ldv;
        for (int64_t i = 0; i < n; i++) {
            float t = w * vp[i];
            BT_NOFUSE_F(t);
            acc[i] += t;
        }
    }
}

static float scale_max_f32(float *x, int64_t n, float scale)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float s = x[i] * scale;
        x[i] = s;
        if (s > m) m = s;
    }
    return m;
}

/* ---- a softmax row's entropy sums (kernels.h: bt_softmax_sums_f32) ---- */

void bt_softmax_acc_f64_scalar(const float *e, const float *x, int64_t k, float m, double z[4], double ez[4])
{
    for (int64_t j = 0; j < k; j++) {
        if (e[j] == 0)
            continue;   /* a masked -inf: 0 * -inf would be NaN */
        double t = e[j] * ((double)x[j] - m);
        BT_NOFUSE_F(t);
        z[j & 3] += e[j];
        ez[j & 3] += t;
    }
}

void bt_softmax_sums_f32(const float *x, int64_t n, float m, double z[4], double ez[4])
{
    const bt_kvariant *kv = bt_kernels_active();
    float e[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t k = BT_MIN(256, n - i);
        memcpy(e, x + i, (size_t)k * sizeof(float));
        kv->exp_sub_f32(e, k, m);
        kv->softmax_acc_f64(e, x + i, k, m, z, ez);   /* 256 is a multiple of 4: element i + j is chain j % 4 */
    }
}

/* The delta rule's token (kernels.h: bt_gdn_seq_f32), column by column:
 * the reference the SIMD variants match lane for lane; columns [c0, c1)
 * (the AVX2 variant's tail too). */
void bt_gdn_cols_scalar(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, float decay, const float *k,
                        const float *v, float beta, const float *qs, float *out)
{
    for (int64_t c = c0; c < c1; c++) {
        float sk = 0.0f, o = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            float s = S[i * dv + c] * decay;
            S[i * dv + c] = s;
            float t = k[i] * s;
            BT_NOFUSE_F(t);
            sk += t;
        }
        float u = (v[c] - sk) * beta;
        for (int64_t i = 0; i < dk; i++) {
            float t = k[i] * u;
            BT_NOFUSE_F(t);
            float s = S[i * dv + c] + t;
            S[i * dv + c] = s;
            float t2 = qs[i] * s;
            BT_NOFUSE_F(t2);
            o += t2;
        }
        out[c] = o;
    }
}


static void bt_kv_scalar_fill(bt_kvariant *kv)
{
    memset(kv, 0, sizeof(*kv));
    kv->name = "scalar";
    bt_kv_dequant_scalar_fill(kv);
    kv->dot[BT_DT_F32] = dot_f32;
    kv->dot[BT_DT_F16] = dot_f16;
    kv->dot[BT_DT_BF16] = dot_bf16;
    kv->dot[BT_DT_Q4_0] = dot_q4_0;
    kv->dot[BT_DT_Q4_1] = dot_q4_1;
    kv->dot[BT_DT_Q5_0] = dot_q5_0;
    kv->dot[BT_DT_Q5_1] = dot_q5_1;
    kv->dot[BT_DT_Q8_0] = dot_q8_0;
    kv->dot[BT_DT_MXFP4] = dot_mxfp4;
    kv->dot[BT_DT_Q2_K] = dot_q2_k;
    kv->dot[BT_DT_Q3_K] = dot_q3_k;
    kv->dot[BT_DT_Q4_K] = dot_q4_k;
    kv->dot[BT_DT_Q5_K] = dot_q5_k;
    kv->dot[BT_DT_Q6_K] = dot_q6_k;
    kv->dot4_f32 = dot4_f32;
    kv->dot4x2_f32 = dot4x2_f32;
    kv->sweep_f32 = bt_sweep_f32_scalar;
    kv->sweep_chunks_f32 = sweep_chunks_f32;
    kv->wsum_f32 = wsum_f32;
    kv->scale_max_f32 = scale_max_f32;
    kv->exp_sub_f32 = bt_exp_sub_f32_scalar;
    kv->gdn_cols_f32 = bt_gdn_cols_scalar;
    kv->softmax_acc_f64 = bt_softmax_acc_f64_scalar;
}

static bool cpu_has_avx2(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    /* F16C straight from CPUID: clang's __builtin_cpu_supports does not
     * know "f16c". avx2 there already implies the OS saves ymm state. */
    unsigned a, b, c, d;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
    return false;
#endif
}

static bool cpu_has_avx512(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    /* BW/VL/DQ: every AVX-512 CPU but Knights Landing has them, and the
     * k-quant kernels use byte masks. */
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

float bt_f16_table[65536];

static void init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        bt_f16_table[h] = bt_f16_to_f32((uint16_t)h);
    bt_kv_scalar_fill(&scalar);
    avx2 = scalar;
    avx512 = scalar;
    have_avx2 = cpu_has_avx2() && bt_kv_avx2_fill(&avx2);
    have_avx512 = cpu_has_avx512() && bt_kv_avx512_fill(&avx512);
    /* The SIMD exp replicates one libm's expf; elsewhere it must not run. */
    bt_kvariant *simd[2] = { have_avx2 ? &avx2 : NULL, have_avx512 ? &avx512 : NULL };
    for (int i = 0; i < 2; i++)
        if (simd[i] && !bt_exp_sub_f32_matches_libm(simd[i]->exp_sub_f32)) {
            bt_debug("kernels: %s expf differs from this C library's; using the expf loop", simd[i]->name);
            simd[i]->exp_sub_f32 = bt_exp_sub_f32_scalar;
        }
    active = have_avx512 ? &avx512 : have_avx2 ? &avx2 : &scalar;

    const char *want = getenv("BT_SIMD");
    if (want && *want) {
        const bt_kvariant *v = NULL;
        if (!strcmp(want, "scalar"))
            v = &scalar;
        else if (!strcmp(want, "avx2"))
            v = have_avx2 ? &avx2 : &scalar;
        else if (!strcmp(want, "avx512"))
            v = have_avx512 ? &avx512 : &scalar;
        else
            bt_warn("BT_SIMD=%s: unknown variant (want scalar, avx2 or avx512); using %s",
                    want, active->name);
        if (v && strcmp(v->name, want))
            bt_warn("BT_SIMD=%s: this CPU or build lacks it; using scalar", want);
        if (v)
            active = v;
    }
}

void bt_kernels_init(void)
{
    pthread_once(&init_once, init);
}

const char *bt_kernels_simd(void)
{
    bt_kernels_init();
    return active->name;
}

const bt_kvariant *bt_kernels_active(void)
{
    bt_kernels_init();
    return active;
}

const bt_kvariant *bt_kernels_variant(const char *name)
{
    bt_kernels_init();
    if (!strcmp(name, "scalar"))
        return &scalar;
    if (!strcmp(name, "avx2"))
        return have_avx2 ? &avx2 : NULL;
    if (!strcmp(name, "avx512"))
        return have_avx512 ? &avx512 : NULL;
    return NULL;
}

int bt_kernels_force(const char *name)
{
    const bt_kvariant *v = bt_kernels_variant(name);
    if (!v)
        return bt_error(BT_EUNSUPPORTED, "kernels: variant %s is not available on this CPU", name);
    active = v;
    return BT_OK;
}

/* A type without kernels yields NaN so a caller that skipped the
 * bt_dtype()->compute check sees garbage at once instead of zeros. */
void bt_dequant_row(int type, const void *src, float *dst, int64_t n)
{
    const bt_kvariant *v = bt_kernels_active();
    if (type < 0 || type >= BT_DT_COUNT || !v->dequant[type]) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = NAN;
        return;
    }
    v->dequant[type](src, dst, n);
}

float bt_vec_dot(int type, const void *w_row, const float *x, int64_t n)
{
    const bt_kvariant *v = bt_kernels_active();
    if (type < 0 || type >= BT_DT_COUNT || !v->dot[type])
        return NAN;
    return v->dot[type](w_row, x, n);
}

int64_t bt_sweep_f32(const float *x, int64_t n, bt_sweep *acc)
{
    return n > 0 ? bt_kernels_active()->sweep_f32(x, n, acc) : 0;
}

int64_t bt_sweep_chunks_f32(const float *x, int64_t nc, bt_sweep_chunk *out)
{
    return nc > 0 ? bt_kernels_active()->sweep_chunks_f32(x, nc, out) : 0;
}

void bt_dot_rows_f32(const float *k, int64_t ldk, const float *q, int64_t n, int64_t np, float *out)
{
    const bt_kvariant *v = bt_kernels_active();
    int64_t p = 0;
    if (v->dot16_f32)
        for (; p + 16 <= np; p += 16)
            v->dot16_f32(k + p * ldk, ldk, q, n, 1, n, out + p, 16);
    for (; p + 4 <= np; p += 4)
        v->dot4_f32(k + p * ldk, ldk, q, n, out + p);
    for (; p < np; p++)
        out[p] = v->dot[BT_DT_F32](k + p * ldk, q, n);
}

void bt_dot_rows_multi_f32(const float *k, int64_t ldk, const float *q, int64_t ldq, int nq, int64_t n, int64_t np,
                           float *out, int64_t ldo)
{
    const bt_kvariant *v = bt_kernels_active();
    int j = 0;
    if (v->dot16_f32 && np >= 16) {
        /* 16 keys by up to 3 queries, the last keys through the path below */
        int64_t p16 = np & ~(int64_t)15;
        for (int j0 = 0; j0 < nq; j0 += 3)
            for (int64_t p = 0; p < p16; p += 16)
                v->dot16_f32(k + p * ldk, ldk, q + j0 * ldq, ldq, BT_MIN(3, nq - j0), n, out + j0 * ldo + p, ldo);
        if (p16 == np)
            return;
        k += p16 * ldk;
        out += p16;
        np -= p16;
    }
    if (v->dot8x3_f32)
        for (; j + 3 <= nq; j += 3) {
            float o[24];
            int64_t p = 0;
            for (; p + 8 <= np; p += 8) {
                v->dot8x3_f32(k + p * ldk, ldk, q + j * ldq, ldq, n, o);
                for (int t = 0; t < 3; t++)
                    memcpy(out + (j + t) * ldo + p, o + 8 * t, 8 * sizeof(float));
            }
            for (int t = 0; t < 3 && p < np; t++)
                bt_dot_rows_f32(k + p * ldk, ldk, q + (j + t) * ldq, n, np - p, out + (j + t) * ldo + p);
        }
    for (; j < nq; j++)
        bt_dot_rows_f32(k, ldk, q + j * ldq, n, np, out + j * ldo);
}

float bt_scale_max_f32(float *x, int64_t n, float scale)
{
    return n > 0 ? bt_kernels_active()->scale_max_f32(x, n, scale) : -INFINITY;
}

void bt_wsum_f32(float *acc, const float *wts, float scale, const float *v, int64_t ldv, int64_t np, int64_t n)
{
    if (np > 0 && n > 0)
        bt_kernels_active()->wsum_f32(acc, wts, scale, v, ldv, np, n);
}

void bt_gdn_seq_f32(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, int T, const float *decay,
                    const float *k, int64_t ldk, const float *v, int64_t ldv, const float *beta, const float *qs,
                    int64_t ldq, float *out, int64_t ldo)
{
    if (dk <= 0 || c0 < 0 || c1 > dv || c0 >= c1 || T <= 0) return;
    const bt_kvariant *kv = bt_kernels_active();
    if (kv->gdn_seq_f32 && T > 1) {   /* one token: the variant's one-token kernel */
        kv->gdn_seq_f32(S, dk, dv, c0, c1, T, decay, k, ldk, v, ldv, beta, qs, ldq, out, ldo);
        return;
    }
    for (int t = 0; t < T; t++)
        kv->gdn_cols_f32(S, dk, dv, c0, c1, decay[t], k + (int64_t)t * ldk, v + (int64_t)t * ldv, beta[t],
                         qs + (int64_t)t * ldq, out + (int64_t)t * ldo);
}
