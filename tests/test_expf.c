/* test_expf.c - bt_exp_sub_f32 in every variant this CPU runs gives, bit
 * for bit, what the linked C library's expf gives for x - m:
 *   - a stride sample over all 2^32 float bit patterns (m = 0), which hits
 *     every table entry, both signs, NaN payloads, subnormals, infinities;
 *   - every float in the threshold regions [-110, -85] and [85, 90]
 *     (overflow, the underflow steps, subnormal results) and a dense sample
 *     of [-1e-3, 1e-3], plus named special inputs;
 *   - the subtraction form with random x and finite m (x also -Inf, +Inf,
 *     NaN) at lengths that exercise every vector tail, and that nothing
 *     past n is written; the public wrapper with n <= 0 writes nothing.
 * BT_EXPF_EXHAUSTIVE=1 checks all 2^32 inputs instead of the sample (about
 * a minute; run by hand, not in `make check`). A mismatch prints the input
 * bits and both results. Exit 0 = pass, 1 = fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#include "kernels/cpu/kernels_impl.h"
#include "base/util.h"
#include "check.h"
#include "rng.h"

#define CHUNK 4096

static const bt_kvariant *variants[3];
static int nvar;
static long long mismatches[3];

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Runs every variant on in[0..n) with m and compares with expf(in[i] - m). */
static void check_batch(const float *in, int64_t n, float m, const char *what)
{
    float ref[CHUNK], got[CHUNK + 8];
    for (int64_t i = 0; i < n; i++)
        ref[i] = expf(in[i] - m);
    for (int v = 0; v < nvar; v++) {
        memcpy(got, in, (size_t)n * sizeof(float));
        for (int i = 0; i < 8; i++)
            got[n + i] = 12345.0f;              /* canaries past the end */
        variants[v]->exp_sub_f32(got, n, m);
        for (int64_t i = 0; i < n; i++)
            if (bits_of(got[i]) != bits_of(ref[i])) {
                if (mismatches[v]++ < 10)
                    CHECK(0, "%s %s: x = 0x%08x (%a), m = 0x%08x (%a): got 0x%08x (%a), expf gives 0x%08x (%a)",
                          variants[v]->name, what, bits_of(in[i]), in[i], bits_of(m), m, bits_of(got[i]), got[i],
                          bits_of(ref[i]), ref[i]);
                else
                    failures++;
            }
        for (int i = 0; i < 8; i++)
            CHECK(got[n + i] == 12345.0f, "%s %s: n = %lld, wrote x[%lld]", variants[v]->name, what, (long long)n,
                  (long long)(n + i));
    }
}

/* Every bit pattern from lo to hi (inclusive) in steps of `stride`, m = 0. */
static void check_patterns(uint64_t lo, uint64_t hi, uint64_t stride, const char *what)
{
    float in[CHUNK];
    int n = 0;
    for (uint64_t u = lo; u <= hi; u += stride) {
        in[n++] = float_of((uint32_t)u);
        if (n == CHUNK) {
            check_batch(in, n, 0.0f, what);
            n = 0;
        }
    }
    if (n)
        check_batch(in, n, 0.0f, what);
}

/* Every float in [a, b] (same sign), m = 0. */
static void check_range(float a, float b, uint64_t stride, const char *what)
{
    uint32_t ua = bits_of(a), ub = bits_of(b);
    if (ua > ub) {
        uint32_t t = ua;
        ua = ub;
        ub = t;
    }
    check_patterns(ua, ub, stride, what);
}

static void check_specials(void)
{
    static const uint32_t pats[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000,     /* +-0, +-Inf */
        0x7fc00000, 0xffc00000, 0x7fc12345, 0xffc54321,     /* quiet NaNs with payloads */
        0x7f800001, 0xff800001, 0x7fa00000, 0xffbfffff,     /* signalling NaNs */
        0x00000001, 0x80000001, 0x007fffff, 0x807fffff,     /* subnormals */
        0x00800000, 0x80800000, 0x7f7fffff, 0xff7fffff,     /* min normal, max finite */
        0x42b17217, 0x42b17218, 0x42b17219,                 /* ln(FLT_MAX) and around */
        0xc2cff1b4, 0xc2cff1b5, 0xc2cff1b3,                 /* X_UFLOW and neighbours */
        0xc2ce8ecf, 0xc2ce8ed0, 0xc2ce8ece,                 /* X_MAY_UFLOW and neighbours */
        0x42b00000, 0xc2b00000, 0x42afffff, 0xc2afffff,     /* 88: where libm leaves its main path */
        0x3f800000, 0xbf800000, 0x3f317218, 0xbf317218,
    };
    float in[BT_ARRAY_SIZE(pats)];
    for (size_t i = 0; i < BT_ARRAY_SIZE(pats); i++)
        in[i] = float_of(pats[i]);
    check_batch(in, BT_ARRAY_SIZE(pats), 0.0f, "special");
    /* Each alone too: a lone lane in a mostly padded vector. */
    for (size_t i = 0; i < BT_ARRAY_SIZE(pats); i++)
        check_batch(in + i, 1, 0.0f, "special (n = 1)");
}


/* Scores as attention sees them, minus a finite max; some -Inf, +Inf, NaN,
 * random bit patterns. */
static float rnd_score(void)
{
    switch (rnd() % 16) {
    case 0: return -INFINITY;
    case 1: return INFINITY;
    case 2: return float_of(0x7fc00000u | (rnd() & 0x803fffffu));
    case 3: return float_of(rnd());
    case 4: return rndf(-1e-3f, 1e-3f);
    default: return rndf(-150.0f, 40.0f);
    }
}

static float rnd_max(void)
{
    switch (rnd() % 4) {
    case 0: return 0.0f;
    case 1: {
        float f = float_of(rnd());
        return isfinite(f) ? f : 1.0f;
    }
    default: return rndf(-60.0f, 60.0f);
    }
}

static void check_sub_form(void)
{
    static const int64_t lens[] = { 0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 4096 };
    float in[CHUNK];
    for (int rep = 0; rep < 200; rep++)
        for (size_t l = 0; l < BT_ARRAY_SIZE(lens); l++) {
            int64_t n = lens[l];
            for (int64_t i = 0; i < n; i++)
                in[i] = rnd_score();
            check_batch(in, n, rnd_max(), "x - m");
        }
}

/* The public entry point runs the active variant, and n <= 0 is a no-op. */
static void check_wrapper(void)
{
    for (int v = 0; v < nvar; v++) {
        CHECK_OK(bt_kernels_force(variants[v]->name));
        float x[20], want[20];
        for (int i = 0; i < 20; i++) {
            x[i] = rndf(-30.0f, 5.0f);
            want[i] = expf(x[i] - 2.5f);
        }
        float keep = x[0], last = x[19];
        bt_exp_sub_f32(x, 0, 2.5f);
        bt_exp_sub_f32(x, -3, 2.5f);
        CHECK(bits_of(x[0]) == bits_of(keep), "%s: bt_exp_sub_f32 with n <= 0 wrote x[0]", variants[v]->name);
        bt_exp_sub_f32(x, 19, 2.5f);
        for (int i = 0; i < 19; i++)
            CHECK(bits_of(x[i]) == bits_of(want[i]), "%s: bt_exp_sub_f32 x[%d] = %a, want %a", variants[v]->name, i,
                  x[i], want[i]);
        CHECK(bits_of(x[19]) == bits_of(last), "%s: bt_exp_sub_f32 wrote x[19] past n", variants[v]->name);
    }
}

int main(void)
{
    bt_kernels_init();
    const bt_kvariant *was = bt_kernels_active();
    static const char *const names[] = { "scalar", "avx2", "avx512" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(names); i++) {
        const bt_kvariant *v = bt_kernels_variant(names[i]);
        if (v)
            variants[nvar++] = v;
        else
            printf("SKIP variant %s: this CPU or compiler lacks it\n", names[i]);
    }

    /* bt_kernels_init() keeps the expf loop in a SIMD variant whose exp
     * does not reproduce the linked libm; with the glibc it replicates
     * (2.36), that fallback would be a false alarm of the probe. */
    static void (*const simd_fn[])(float *, int64_t, float) = { bt_exp_sub_f32_scalar, bt_exp_sub_f32_avx2,
                                                                bt_exp_sub_f32_avx512 };
    bool replicated_libm = false;
#ifdef __GLIBC__
    replicated_libm = !strcmp(gnu_get_libc_version(), "2.36");
#endif
    for (int v = 0; v < nvar; v++) {
        size_t k = 0;
        while (strcmp(names[k], variants[v]->name))
            k++;
        bool simd = variants[v]->exp_sub_f32 == simd_fn[k];
        if (k > 0 && !simd)
            printf("%s: its exp differs from this libm's on the probe; the variant runs the expf loop\n",
                   variants[v]->name);
        CHECK(simd || !replicated_libm, "%s: glibc 2.36, yet the SIMD exp was not installed", variants[v]->name);
        /* Test the SIMD code itself, installed or not. */
        if (k > 0 && !simd && replicated_libm) {
            static bt_kvariant copy[3];
            copy[v] = *variants[v];
            copy[v].exp_sub_f32 = simd_fn[k];
            variants[v] = &copy[v];
        }
    }

    const char *ex = getenv("BT_EXPF_EXHAUSTIVE");
    if (ex && !strcmp(ex, "1")) {
        check_patterns(0, 0xffffffffull, 1, "exhaustive");
        printf("exhaustive: all 2^32 inputs checked\n");
    } else {
        /* 61 is odd and prime, so the sample walks every residue of the
         * low bits (every table index, sign, exponent). */
        check_patterns(0, 0xffffffffull, 61, "stride 61");
        check_range(-85.0f, -110.0f, 1, "[-110,-85]");
        check_range(85.0f, 90.0f, 1, "[85,90]");
        check_range(0.0f, 1e-3f, 13, "[0,1e-3]");
        check_range(-0.0f, -1e-3f, 13, "[-1e-3,-0]");
        check_specials();
        check_sub_form();
        check_wrapper();
    }
    bt_kernels_force(was->name);

    for (int v = 0; v < nvar; v++)
        printf("%s: %lld mismatch(es)\n", variants[v]->name, mismatches[v]);
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("all expf tests passed\n");
    return 0;
}
