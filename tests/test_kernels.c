/* test_kernels.c - unit tests of kernels/cpu: the dtype table, golden
 * dequantized values, every SIMD variant against the scalar reference
 * (bit-identical dequantization, dots within f32 reassociation error),
 * threaded bt_matmul for decode and prefill shapes, batch invariance of
 * bt_matmul (bit-identical outputs whatever the batch), NaN/Inf propagation
 * and the thread pool; mxfp4 at every one of its 256 exponents.
 *
 * Variants the CPU lacks are skipped with a message; the scalar variant is
 * always tested. Exit 0 = pass, 1 = fail. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels_impl.h"
#include "base/util.h"
#include "check.h"
#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "rng.h"



static const char *const simd_names[] = { "avx2", "avx512" };


static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* A random finite f16 scale, sometimes negative, over a few octaves. */
static uint16_t rnd_scale(void)
{
    float v = rndf(0.001f, 0.1f) * (float)(1 << (rnd() % 6));
    return bt_f32_to_f16(rnd() & 1 ? -v : v);
}


/* n elements of random, finite weights of `type` in buf. */
static void fill_random(int type, uint8_t *buf, int64_t n)
{
    const bt_dtype_info *ti = bt_dtype(type);
    size_t bytes = bt_dtype_row_size(type, n);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)rnd();
    if (type == BT_DT_F32) {
        for (int64_t i = 0; i < n; i++) {
            float v = rndf(-2, 2);
            memcpy(buf + 4 * i, &v, 4);
        }
    } else if (type == BT_DT_F16) {
        for (int64_t i = 0; i < n; i++)
            put16(buf + 2 * i, bt_f32_to_f16(rndf(-2, 2)));
    } else if (type == BT_DT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = rndf(-2, 2);
            uint32_t u;
            memcpy(&u, &v, 4);
            put16(buf + 2 * i, (uint16_t)(u >> 16));
        }
    } else {
        int off[2], k = bt_dtype_scale_offsets(type, off), e8 = bt_dtype_e8m0_offset(type);
        for (int64_t b = 0; b < n / ti->blck; b++) {
            for (int i = 0; i < k; i++)
                put16(buf + b * ti->type_size + off[i], rnd_scale());
            if (e8 >= 0)    /* scales 2^-10 .. 2^4 (E8M0 117 .. 131) */
                buf[b * ti->type_size + e8] = (uint8_t)(117 + rnd() % 15);
        }
    }
}

/* Replace every f16 scale/min of a quantized row by an extreme finite
 * half: +-65504, the smallest and largest subnormals, the smallest normal,
 * +-0 (a zero scale times a code must keep dequant.c's sign of zero). An
 * E8M0 exponent becomes 0 or 1 (subnormal half scales 2^-128, 2^-127), 2
 * (the smallest normal) or one up to 240, the largest whose row of 1536
 * weights times activations in [-1, 1] still sums below FLT_MAX (from 253
 * on, weights overflow: test_mxfp4_exponents). */
static void extreme_scales(int type, uint8_t *buf, int64_t n)
{
    static const uint16_t ext[] = { 0x7BFF, 0xFBFF, 0x0001, 0x83FF, 0x0400, 0x0000, 0x8000 };
    static const uint8_t ext8[] = { 0, 1, 2, 3, 127, 200, 239, 240 };
    const bt_dtype_info *ti = bt_dtype(type);
    int off[2], k = bt_dtype_scale_offsets(type, off), e8 = bt_dtype_e8m0_offset(type);
    for (int64_t b = 0; b < n / ti->blck; b++) {
        for (int i = 0; i < k; i++)
            put16(buf + b * ti->type_size + off[i], ext[rnd() % BT_ARRAY_SIZE(ext)]);
        if (e8 >= 0)
            buf[b * ti->type_size + e8] = ext8[rnd() % BT_ARRAY_SIZE(ext8)];
    }
}

static void fill_x(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rndf(-1, 1);
}

/* Reference dot of the scalar-dequantized row in double; *mag gets
 * sum |w_i x_i|, the scale of any rounding error. */
static double ref_dot(int type, const void *w, const float *x, int64_t n, double *mag)
{
    const bt_kvariant *s = bt_kernels_variant("scalar");
    float *d = malloc((size_t)n * sizeof(float));
    s->dequant[type](w, d, n);
    double acc = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += (double)d[i] * x[i];
        m += fabs((double)d[i] * x[i]);
    }
    free(d);
    *mag = m;
    return acc;
}

static bool close_enough(double got, double want, double mag)
{
    return fabs(got - want) <= 2e-5 * mag + 1e-30;
}

static void test_dtype_table(void)
{
    static const struct { int t; const char *name; int blck; size_t size; bool compute; } want[] = {
        { BT_DT_F32, "f32", 1, 4, true },     { BT_DT_F16, "f16", 1, 2, true },
        { BT_DT_Q4_0, "q4_0", 32, 18, true }, { BT_DT_Q4_1, "q4_1", 32, 20, true },
        { BT_DT_Q5_0, "q5_0", 32, 22, true }, { BT_DT_Q5_1, "q5_1", 32, 24, true },
        { BT_DT_Q8_0, "q8_0", 32, 34, true }, { BT_DT_Q8_1, "q8_1", 32, 36, false },
        { BT_DT_Q2_K, "q2_k", 256, 84, true }, { BT_DT_Q3_K, "q3_k", 256, 110, true },
        { BT_DT_Q4_K, "q4_k", 256, 144, true }, { BT_DT_Q5_K, "q5_k", 256, 176, true },
        { BT_DT_Q6_K, "q6_k", 256, 210, true }, { BT_DT_Q8_K, "q8_k", 256, 292, false },
        { 20, "iq4_nl", 32, 18, false },       { 23, "iq4_xs", 256, 136, false },
        { BT_DT_I8, "i8", 1, 1, false },       { BT_DT_I64, "i64", 1, 8, false },
        { BT_DT_F64, "f64", 1, 8, false },     { BT_DT_BF16, "bf16", 1, 2, true },
        { BT_DT_MXFP4, "mxfp4", 32, 17, true },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(want); i++) {
        const bt_dtype_info *ti = bt_dtype(want[i].t);
        CHECK(ti->name && !strcmp(ti->name, want[i].name), "type %d name %s", want[i].t, ti->name ? ti->name : "NULL");
        CHECK(ti->blck == want[i].blck && ti->type_size == want[i].size && ti->compute == want[i].compute,
              "type %s: blck %d size %zu compute %d", want[i].name, ti->blck, ti->type_size, ti->compute);
    }
    CHECK(bt_dtype(-1) && !bt_dtype(-1)->name, "negative id must be unknown");
    CHECK(!bt_dtype(31)->name && !bt_dtype(BT_DT_COUNT)->name && !bt_dtype(99999)->name, "retired/out-of-range ids must be unknown");
    CHECK(bt_dtype_row_size(BT_DT_Q4_1, 576) == 18 * 20, "q4_1 row of 576");
    CHECK(bt_dtype_row_size(BT_DT_Q8_0, 33) == 0, "q8_0 row of 33 is not whole blocks");
    CHECK(bt_dtype_row_size(BT_DT_F32, 7) == 28, "f32 row of 7");
    CHECK(bt_dtype_row_size(31, 32) == 0, "unknown type row size");
    CHECK(bt_dtype_row_size(BT_DT_Q6_K, 512) == 420, "q6_k row of 512");
    CHECK(bt_dtype_row_size(BT_DT_MXFP4, 2880) == 90 * 17, "mxfp4 row of 2880");

    /* block scales as inspect scans them */
    int off[2];
    CHECK(bt_dtype_e8m0_offset(BT_DT_MXFP4) == 0 && bt_dtype_scale_offsets(BT_DT_MXFP4, off) == 0,
          "mxfp4: one E8M0 byte at 0, no f16 field");
    CHECK(bt_dtype_e8m0_offset(BT_DT_Q4_0) < 0 && bt_dtype_e8m0_offset(BT_DT_F32) < 0, "E8M0 offset of q4_0, f32");
    uint8_t blk[210] = { 0 };
    for (int e = 0; e < 256; e++) {
        blk[0] = (uint8_t)e;
        CHECK(bt_dtype_block_scale_bad(BT_DT_MXFP4, blk) == (e == 0xFF), "mxfp4 exponent 0x%02x", e);
    }
    blk[0] = 0;
    static const struct { int t, at; uint8_t hi; bool bad; } f16s[] = {
        { BT_DT_Q8_0, 0, 0x7C, true }, { BT_DT_Q8_0, 0, 0xFE, true }, { BT_DT_Q8_0, 0, 0x7B, false },
        { BT_DT_Q4_1, 2, 0x7D, true }, { BT_DT_Q6_K, 208, 0xFC, true }, { BT_DT_Q2_K, 82, 0x3C, false },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(f16s); i++) {
        memset(blk, 0, sizeof blk);
        blk[f16s[i].at + 1] = f16s[i].hi;
        CHECK(bt_dtype_block_scale_bad(f16s[i].t, blk) == f16s[i].bad, "%s: f16 field at %d, high byte 0x%02x",
              bt_dtype(f16s[i].t)->name, f16s[i].at, f16s[i].hi);
    }
    memset(blk, 0xFF, sizeof blk);
    CHECK(!bt_dtype_block_scale_bad(BT_DT_F32, blk) && !bt_dtype_block_scale_bad(BT_DT_F16, blk),
          "types without block scales have no bad scale");
}

static void expect_floats(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) {
            CHECK(0, "%s: element %d is %.9g, want %.9g", what, i, got[i], want[i]);
            return;
        }
}

/* Hand-built blocks whose values are known exactly, through every variant. */
static void test_golden(const bt_kvariant *v)
{
    uint8_t b[256];
    float got[256], want[256], ones[256];
    char what[64];
    for (int i = 0; i < 256; i++)
        ones[i] = 1.0f;

    /* q4_0, d = 1: low nibbles 0..15 -> -8..7, high nibbles 15..0 -> 7..-8 */
    put16(b, 0x3C00);
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
        want[j] = (float)(j - 8);
        want[16 + j] = (float)(7 - j);
    }
    v->dequant[BT_DT_Q4_0](b, got, 32);
    snprintf(what, sizeof(what), "%s q4_0 golden", v->name);
    expect_floats(what, got, want, 32);
    CHECK(v->dot[BT_DT_Q4_0](b, ones, 32) == -16.0f, "%s q4_0 golden dot = %g, want -16", v->name,
          v->dot[BT_DT_Q4_0](b, ones, 32));

    /* q4_1, d = 0.5, m = -1: nibble j -> 0.5*j - 1 */
    put16(b, 0x3800);
    put16(b + 2, 0xBC00);
    for (int j = 0; j < 16; j++) {
        b[4 + j] = (uint8_t)(j | j << 4);
        want[j] = want[16 + j] = 0.5f * (float)j - 1.0f;
    }
    v->dequant[BT_DT_Q4_1](b, got, 32);
    snprintf(what, sizeof(what), "%s q4_1 golden", v->name);
    expect_floats(what, got, want, 32);
    CHECK(v->dot[BT_DT_Q4_1](b, ones, 32) == 88.0f, "%s q4_1 golden dot = %g, want 88", v->name,
          v->dot[BT_DT_Q4_1](b, ones, 32));

    /* q8_0, d = 0.25: q = -128, -120, ..., 120 */
    put16(b, 0x3400);
    for (int j = 0; j < 32; j++) {
        b[2 + j] = (uint8_t)(int8_t)(-128 + 8 * j);
        want[j] = (float)(-128 + 8 * j) * 0.25f;
    }
    v->dequant[BT_DT_Q8_0](b, got, 32);
    snprintf(what, sizeof(what), "%s q8_0 golden", v->name);
    expect_floats(what, got, want, 32);
    CHECK(v->dot[BT_DT_Q8_0](b, ones, 32) == -32.0f, "%s q8_0 golden dot = %g, want -32", v->name,
          v->dot[BT_DT_Q8_0](b, ones, 32));

    /* q5_0, d = 1: 5th bit set for elements 16..31 only */
    put16(b, 0x3C00);
    put16(b + 2, 0x0000);
    put16(b + 4, 0xFFFF);
    for (int j = 0; j < 16; j++) {
        b[6 + j] = (uint8_t)(j | j << 4);
        want[j] = (float)(j - 16);
        want[16 + j] = (float)j;
    }
    v->dequant[BT_DT_Q5_0](b, got, 32);
    snprintf(what, sizeof(what), "%s q5_0 golden", v->name);
    expect_floats(what, got, want, 32);

    /* mxfp4, E8M0 127 (scale 1): the E2M1 values themselves, written out
     * from the OCP MX spec (not from the doubled table); low nibbles 0..15,
     * high nibbles 15..0. Code 8 (-0 in E2M1) is +0, as in ggml. */
    static const float e2m1[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
    b[0] = 127;
    for (int j = 0; j < 16; j++) {
        b[1 + j] = (uint8_t)(j | (15 - j) << 4);
        want[j] = e2m1[j];
        want[16 + j] = e2m1[15 - j];
    }
    v->dequant[BT_DT_MXFP4](b, got, 32);
    snprintf(what, sizeof(what), "%s mxfp4 golden", v->name);
    expect_floats(what, got, want, 32);
    CHECK(!signbit(got[8]) && !signbit(got[16 + 7]), "%s mxfp4: code 8 must be +0", v->name);
    CHECK(v->dot[BT_DT_MXFP4](b, ones, 32) == 0.0f, "%s mxfp4 golden dot = %g, want 0", v->name,
          v->dot[BT_DT_MXFP4](b, ones, 32));
    b[0] = 130;     /* scale 8; the high nibbles all code 7 (6): 16 * 48 + 8 * (0 + 0.5 + ... + 6 - 0 - ... - 6) */
    for (int j = 0; j < 16; j++)
        b[1 + j] = (uint8_t)(j | 7 << 4);
    CHECK(v->dot[BT_DT_MXFP4](b, ones, 32) == 768.0f, "%s mxfp4 dot at scale 8 = %g, want 768", v->name,
          v->dot[BT_DT_MXFP4](b, ones, 32));

    /* f16 specials: 1, -2, smallest subnormal, largest finite, +Inf */
    static const uint16_t h[8] = { 0x3C00, 0xC000, 0x0001, 0x7BFF, 0x7C00, 0x8000, 0x3555, 0x0400 };
    const float hf[8] = { 1.0f, -2.0f, 0x1p-24f, 65504.0f, INFINITY, -0.0f, 0x1.554p-2f, 0x1p-14f };
    for (int i = 0; i < 8; i++)
        put16(b + 2 * i, h[i]);
    for (int n = 1; n <= 8; n += 7) {     /* n = 1 and 8: tail and vector paths */
        v->dequant[BT_DT_F16](b, got, n);
        snprintf(what, sizeof(what), "%s f16 golden n=%d", v->name, n);
        expect_floats(what, got, hf, n);
    }
    for (int rep = 0; rep < 2; rep++)      /* 16 values: full vectors too */
        memcpy(b + 16 * rep, h, 16);
    float hf16[16];
    memcpy(hf16, hf, sizeof(hf));
    memcpy(hf16 + 8, hf, sizeof(hf));
    v->dequant[BT_DT_F16](b, got, 16);
    snprintf(what, sizeof(what), "%s f16 golden n=16", v->name);
    expect_floats(what, got, hf16, 16);

    /* bf16: 1, -3 */
    put16(b, 0x3F80);
    put16(b + 2, 0xC040);
    v->dequant[BT_DT_BF16](b, got, 2);
    want[0] = 1.0f;
    want[1] = -3.0f;
    snprintf(what, sizeof(what), "%s bf16 golden", v->name);
    expect_floats(what, got, want, 2);

    /* q6_K, d = 1, all ql/qh zero -> q = -32; scale 1 except block 1 = 2 */
    memset(b, 0, 210);
    for (int i = 0; i < 16; i++)
        b[192 + i] = 1;
    b[193] = 2;
    put16(b + 208, 0x3C00);
    for (int i = 0; i < 256; i++)
        want[i] = i >= 16 && i < 32 ? -64.0f : -32.0f;
    v->dequant[BT_DT_Q6_K](b, got, 256);
    snprintf(what, sizeof(what), "%s q6_k golden", v->name);
    expect_floats(what, got, want, 256);

    /* q4_K, d = dmin = 1: sub-block 0 has scale 1, min 2 and nibbles 3 -> 1;
     * sub-block 1 (high nibbles, scale 0, min 0) -> 0; the rest q = 0,
     * scale 0, min 0 -> 0. */
    memset(b, 0, 144);
    put16(b, 0x3C00);
    put16(b + 2, 0x3C00);
    b[4 + 0] = 1;   /* scale of sub-block 0 */
    b[4 + 4] = 2;   /* min of sub-block 0 */
    for (int l = 0; l < 32; l++)
        b[16 + l] = 0x03;
    for (int i = 0; i < 256; i++)
        want[i] = i < 32 ? 1.0f : 0.0f;
    v->dequant[BT_DT_Q4_K](b, got, 256);
    snprintf(what, sizeof(what), "%s q4_k golden", v->name);
    expect_floats(what, got, want, 256);
}

/* mxfp4 at every E8M0 exponent e, in every variant: each code's weight is
 * its E2M1 value times 2^(e-127) (computed here in double with ldexp and
 * rounded to float: exact, or +-Inf past FLT_MAX), bit for bit, from the
 * subnormal half scales of e = 0 and 1 to e = 255 (NaN in the MX spec, the
 * scale 2^128 in ggml: all but 0 and +-0.5 overflow). The dot and the 4-row
 * decode kernel: exact up to e = 240 (every weight times an activation 1
 * or 2 is an integer below 2^5 times 2^(e-128), so any partial sum of 64 is
 * exact in float, subnormals included), non-finite once a weight is Inf
 * (e >= 253; between, partial sums may overflow in one order and not in
 * another, so only the dequantization is checked there). */
static void test_mxfp4_exponents(const bt_kvariant *v)
{
    static const float e2m1[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6 };
    enum { NB = 2, N = NB * 32, RB = NB * 17 };
    uint8_t b[4 * RB];
    float got[N], want[N], x[N];
    int bad = 0;
    for (int i = 0; i < N; i++)
        x[i] = (float)(1 + i % 2);
    for (int e = 0; e < 256 && bad < 5; e++) {
        /* block 0: low nibbles 0..15, high 15..0; block 1: every code twice, shuffled */
        for (int k = 0; k < NB; k++) {
            b[17 * k] = (uint8_t)e;
            for (int j = 0; j < 16; j++) {
                int lo = k ? (j * 7 + 3) % 16 : j, hi = k ? (j * 5 + 11) % 16 : 15 - j;
                b[17 * k + 1 + j] = (uint8_t)(lo | hi << 4);
            }
        }
        bool finite = true;
        double sum = 0;
        for (int k = 0; k < NB; k++)
            for (int j = 0; j < 32; j++) {
                uint8_t q = b[17 * k + 1 + j % 16];
                int code = j < 16 ? q & 0xF : q >> 4;
                want[32 * k + j] = (float)ldexp((double)e2m1[code], e - 127);
                finite &= isfinite(want[32 * k + j]);
                sum += (double)want[32 * k + j] * x[32 * k + j];
            }
        v->dequant[BT_DT_MXFP4](b, got, N);
        for (int i = 0; i < N; i++)
            if (memcmp(&got[i], &want[i], 4)) {
                bad++;
                CHECK(0, "%s mxfp4 E8M0 %d: element %d is %a, want %a", v->name, e, i, got[i], want[i]);
                break;
            }
        CHECK(finite == (e < 253), "mxfp4 E8M0 %d: the reference is %sfinite", e, finite ? "" : "not ");
        if (e > 240 && finite)
            continue;
        float d = v->dot[BT_DT_MXFP4](b, x, N);
        if (finite)
            CHECK((double)d == sum, "%s mxfp4 E8M0 %d: dot %a, want %a", v->name, e, d, sum);
        else
            CHECK(!isfinite(d), "%s mxfp4 E8M0 %d: an Inf weight, dot is finite (%g)", v->name, e, d);
        if (v->dot4q[BT_DT_MXFP4]) {
            for (int r = 1; r < 4; r++)
                memcpy(b + r * RB, b, RB);
            float o4[4];
            v->dot4q[BT_DT_MXFP4](b, RB, x, N, o4);
            for (int r = 0; r < 4; r++)
                CHECK(finite ? (double)o4[r] == sum : !isfinite(o4[r]), "%s mxfp4 E8M0 %d: dot4q row %d %a, want %a",
                      v->name, e, r, o4[r], sum);
        }
    }
}

/* Sizes to test for a type: a few blocks, plus odd lengths for 1-element
 * types so the vector tails run. */
static const int64_t elem_sizes[] = { 1, 7, 8, 15, 16, 17, 33, 64, 100, 576, 1000 };
static const int64_t block_counts[] = { 1, 2, 3, 5, 18, 48 };

static int sizes_for(int type, int64_t *out)
{
    const bt_dtype_info *ti = bt_dtype(type);
    int k = 0;
    if (ti->blck == 1)
        for (size_t i = 0; i < BT_ARRAY_SIZE(elem_sizes); i++)
            out[k++] = elem_sizes[i];
    else
        for (size_t i = 0; i < BT_ARRAY_SIZE(block_counts); i++)
            if (ti->blck * block_counts[i] <= 8192)
                out[k++] = ti->blck * block_counts[i];
    return k;
}

/* Every variant dequantizes exactly like the scalar code, and every
 * variant's dot agrees with the double-precision dot of those weights. */
static void test_variants_random(const bt_kvariant *v)
{
    const bt_kvariant *s = bt_kernels_variant("scalar");
    uint8_t *w = malloc(8192 * 4);
    float *x = malloc(8192 * sizeof(float)), *a = malloc(8192 * sizeof(float)), *b = malloc(8192 * sizeof(float));
    for (int t = 0; t < BT_DT_COUNT; t++) {
        if (!bt_dtype(t)->compute)
            continue;
        CHECK(v->dequant[t] && v->dot[t], "%s: compute type %s has no kernel", v->name, bt_dtype(t)->name);
        if (!v->dequant[t] || !v->dot[t])
            continue;
        int64_t sizes[16];
        int ns = sizes_for(t, sizes);
        for (int si = 0; si < ns; si++) {
            int64_t n = sizes[si];
            for (int rep = 0; rep < 5; rep++) {
                fill_random(t, w, n);
                if (rep == 4)
                    extreme_scales(t, w, n);
                fill_x(x, n);
                s->dequant[t](w, a, n);
                v->dequant[t](w, b, n);
                if (memcmp(a, b, (size_t)n * sizeof(float))) {
                    int64_t i = 0;
                    while (!memcmp(a + i, b + i, sizeof(float)))
                        i++;
                    CHECK(0, "%s %s n=%lld: dequant differs from scalar at %lld: %.9g vs %.9g", v->name,
                          bt_dtype(t)->name, (long long)n, (long long)i, b[i], a[i]);
                }
                double mag, want = ref_dot(t, w, x, n, &mag);
                float got = v->dot[t](w, x, n);
                CHECK(close_enough(got, want, mag), "%s %s n=%lld: dot %.9g, want %.9g (sum|wx| %.3g)", v->name,
                      bt_dtype(t)->name, (long long)n, got, want, mag);
            }
        }
    }
    /* dot4_f32 against single dots, with a tail (n = 37) */
    for (int64_t n = 1; n <= 200; n += 36) {
        fill_x(a, 4 * 200);
        fill_x(x, n);
        float o[4];
        v->dot4_f32(a, 200, x, n, o);
        for (int r = 0; r < 4; r++) {
            double mag, want = ref_dot(BT_DT_F32, a + 200 * r, x, n, &mag);
            CHECK(close_enough(o[r], want, mag), "%s dot4_f32 n=%lld row %d: %.9g want %.9g", v->name, (long long)n, r, o[r], want);
        }
        /* dot4x2_f32: the same rows against two tokens, 300 floats apart */
        float o8[8];
        fill_x(b, 600);
        v->dot4x2_f32(a, 200, b, 300, n, o8);
        for (int k = 0; k < 8; k++) {
            double mag, want = ref_dot(BT_DT_F32, a + 200 * (k % 4), b + 300 * (k / 4), n, &mag);
            CHECK(close_enough(o8[k], want, mag), "%s dot4x2_f32 n=%lld out %d: %.9g want %.9g", v->name, (long long)n, k, o8[k], want);
        }
    }
    free(w);
    free(x);
    free(a);
    free(b);
}

/* A NaN weight or an Inf/NaN scale must reach the dot (no max/min or
 * masking trick may drop it), for every type and variant. */
static void test_nonfinite(const bt_kvariant *v)
{
    uint8_t *w = malloc(4 * 8 * 256 * 4);   /* four rows for dot4q */
    float x[8 * 256];
    for (int t = 0; t < BT_DT_COUNT; t++) {
        const bt_dtype_info *ti = bt_dtype(t);
        if (!ti->compute)
            continue;
        int64_t n = ti->blck == 1 ? 67 : 3 * ti->blck;
        for (int kind = 0; kind < 3; kind++) {    /* NaN value/scale, +Inf scale, -Inf scale */
            fill_random(t, w, n);
            for (int64_t i = 0; i < n; i++)
                x[i] = rndf(0.5f, 1.0f);
            int64_t pos = ti->blck == 1 ? n - 3 : 1;   /* element, or block */
            uint16_t h16 = kind == 0 ? 0x7E00 : kind == 1 ? 0x7C00 : 0xFC00;
            if (t == BT_DT_F32) {
                float f = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
                memcpy(w + 4 * pos, &f, 4);
            } else if (t == BT_DT_F16) {
                put16(w + 2 * pos, h16);
            } else if (t == BT_DT_BF16) {
                put16(w + 2 * pos, kind == 0 ? 0x7FC0 : kind == 1 ? 0x7F80 : 0xFF80);
            } else if (bt_dtype_e8m0_offset(t) >= 0) {
                /* E8M0 has no Inf: 0xFF (NaN in the MX spec) decodes to
                 * 2^127, which takes code 7 (6, doubled 12) to +Inf and
                 * code 15 to -Inf */
                uint8_t *blk = w + pos * ti->type_size;
                blk[bt_dtype_e8m0_offset(t)] = 0xFF;
                blk[1] = kind == 2 ? 0xFF : 0x77;
            } else {
                int off[2] = { 0, 0 };
                bt_dtype_scale_offsets(t, off);
                put16(w + pos * ti->type_size + off[0], h16);
            }
            float got = v->dot[t](w, x, n);
            CHECK(!isfinite(got), "%s %s: %s in the row, dot is finite (%g)", v->name, ti->name,
                  kind == 0 ? "NaN" : "Inf", got);
            /* The min field too (q4_1, q5_1, q2_K, q4_K, q5_K), in the last
             * block, and through the 4-row decode kernel. */
            int off[2], k = bt_dtype_scale_offsets(t, off);
            if (k == 2) {
                fill_random(t, w, n);
                put16(w + (n / ti->blck - 1) * ti->type_size + off[1], h16);
                got = v->dot[t](w, x, n);
                CHECK(!isfinite(got), "%s %s: %s in the min scale, dot is finite (%g)", v->name, ti->name,
                      kind == 0 ? "NaN" : "Inf", got);
            }
            if (v->dot4q[t]) {
                size_t rb = bt_dtype_row_size(t, n);
                float o4[4];
                memmove(w + 2 * rb, w, rb);      /* poisoned row as row 2 of 4 */
                fill_random(t, w, n);
                fill_random(t, w + rb, n);
                fill_random(t, w + 3 * rb, n);
                v->dot4q[t](w, rb, x, n, o4);
                CHECK(isfinite(o4[0]) && isfinite(o4[1]) && !isfinite(o4[2]) && isfinite(o4[3]),
                      "%s %s dot4q: poisoned row 2 gives %g %g %g %g", v->name, ti->name, o4[0], o4[1], o4[2], o4[3]);
            }
        }
        /* A NaN activation too. */
        fill_random(t, w, n);
        for (int64_t i = 0; i < n; i++)
            x[i] = rndf(0.5f, 1.0f);
        x[n / 2] = NAN;
        CHECK(isnan(v->dot[t](w, x, n)), "%s %s: NaN in x, dot is not NaN", v->name, ti->name);
    }
    free(w);
}

/* bt_matmul with 1..3 threads, decode and prefill shapes, against the
 * double-precision reference, with the variant active. */
static void test_matmul(const char *variant)
{
    CHECK(bt_kernels_force(variant) == BT_OK, "force %s: %s", variant, bt_errmsg());
    static const int types[] = { BT_DT_F32, BT_DT_F16, BT_DT_BF16, BT_DT_Q8_0, BT_DT_Q4_0,
                                 BT_DT_Q4_1, BT_DT_Q5_0, BT_DT_Q5_1, BT_DT_Q4_K, BT_DT_Q6_K, BT_DT_MXFP4 };
    static const int Ts[] = { 1, 3, 17 };
    static const int64_t row_counts[] = { 1, 5, 37, 130 };
    for (int nth = 1; nth <= 3; nth++) {
        bt_pool *p = bt_pool_new(nth);
        CHECK(p && bt_pool_threads(p) == nth, "pool of %d: %s", nth, bt_errmsg());
        for (size_t ti = 0; ti < BT_ARRAY_SIZE(types); ti++) {
            int t = types[ti];
            int64_t cols = bt_dtype(t)->blck == 256 ? 512 : bt_dtype(t)->blck == 1 ? 100 : 96;
            size_t rb = bt_dtype_row_size(t, cols);
            for (size_t ri = 0; ri < BT_ARRAY_SIZE(row_counts); ri++) {
                int64_t rows = row_counts[ri];
                uint8_t *W = malloc(rb * rows);
                fill_random(t, W, rows * cols);
                for (size_t k = 0; k < BT_ARRAY_SIZE(Ts); k++) {
                    int T = Ts[k];
                    float *x = malloc(sizeof(float) * cols * T), *out = malloc(sizeof(float) * rows * T);
                    fill_x(x, cols * T);
                    for (int64_t i = 0; i < rows * T; i++)
                        out[i] = -12345.0f;
                    bt_matmul(p, t, W, rows, cols, x, T, out);
                    int bad = 0;
                    for (int tt = 0; tt < T && !bad; tt++)
                        for (int64_t r = 0; r < rows && !bad; r++) {
                            double mag, want = ref_dot(t, W + r * rb, x + tt * cols, cols, &mag);
                            float got = out[tt * rows + r];
                            if (!close_enough(got, want, mag)) {
                                bad = 1;
                                CHECK(0, "%s matmul %s threads=%d T=%d rows=%lld: out[%d,%lld] %.9g want %.9g",
                                      variant, bt_dtype(t)->name, nth, T, (long long)rows, tt, (long long)r, got, want);
                            }
                        }
                    free(x);
                    free(out);
                }
                free(W);
            }
        }
        /* A NaN scale in one row poisons that row only, in both paths. */
        {
            int64_t rows = 37, cols = 64;
            size_t rb = bt_dtype_row_size(BT_DT_Q4_1, cols);
            uint8_t *W = malloc(rb * rows);
            float x[64 * 3], out[37 * 3];
            fill_random(BT_DT_Q4_1, W, rows * cols);
            put16(W + 20 * rb, 0x7E00);
            fill_x(x, 64 * 3);
            for (int T = 1; T <= 3; T += 2) {
                bt_matmul(p, BT_DT_Q4_1, W, rows, cols, x, T, out);
                for (int tt = 0; tt < T; tt++)
                    for (int64_t r = 0; r < rows; r++)
                        CHECK(isfinite(out[tt * rows + r]) == (r != 20), "%s matmul NaN row T=%d: out[%d,%lld] = %g",
                              variant, T, tt, (long long)r, out[tt * rows + r]);
            }
            free(W);
        }
        bt_pool_free(p);
    }
}

/* Batch invariance (speculative decoding verifies drafted tokens in one
 * batched forward and must match one-token decoding bit for bit): each
 * token's outputs from bt_matmul equal, by memcmp, what T = 1 gives for
 * that token alone, whatever T, the token's slot in the batch and the
 * thread count; and the variant's own single-row dot gives those bits too.
 * Rows not a multiple of the 4-row tile, columns of several block counts
 * (and odd lengths for 1-element types, so vector tails run), up to rows
 * wide enough for the panel tile. */
static void test_batch_invariance(const char *variant)
{
    CHECK(bt_kernels_force(variant) == BT_OK, "force %s: %s", variant, bt_errmsg());
    const bt_kvariant *v = bt_kernels_active();
    enum { NTOK = 17 };
    /* 131 tokens: more than one block of the wide-row panels (matmul.c) */
    static const int Ts[] = { 1, 2, 3, 5, 8, 17, 131 };
    static const int64_t row_counts[] = { 1, 6, 37, 130 };
    /* the last: rows wide enough for the panel tile (2,048 columns and up),
     * with a tail that is not a whole chunk pair */
    static const int64_t elem_cols[] = { 7, 37, 576, 2100 }, blk_cols[] = { 1, 3, 18, 72 };
    bt_pool *pools[3];
    for (int i = 0; i < 3; i++)
        pools[i] = bt_pool_new(i + 1);
    CHECK(pools[0] && pools[1] && pools[2], "pools: %s", bt_errmsg());
    int bad_types = 0;
    for (int t = 0; t < BT_DT_COUNT; t++) {
        const bt_dtype_info *ti = bt_dtype(t);
        if (!ti->compute)
            continue;
        int fails = 0;
        for (int ci = 0; ci < 4 && !fails; ci++) {
            int64_t cols = ti->blck == 1 ? elem_cols[ci] : ti->blck * (ti->blck == 256 ? (ci < 3 ? ci + 1 : 9) : blk_cols[ci]);
            size_t rb = bt_dtype_row_size(t, cols);
            for (size_t ri = 0; ri < BT_ARRAY_SIZE(row_counts) && !fails; ri++) {
                int64_t rows = row_counts[ri];
                uint8_t *W = malloc(rb * rows);
                int maxT = Ts[BT_ARRAY_SIZE(Ts) - 1];
                float *X = malloc(sizeof(float) * cols * NTOK), *xb = malloc(sizeof(float) * cols * maxT);
                float *ref = malloc(sizeof(float) * rows * NTOK), *out = malloc(sizeof(float) * rows * maxT);
                fill_random(t, W, rows * cols);
                fill_x(X, cols * NTOK);
                for (int k = 0; k < NTOK; k++)
                    bt_matmul(NULL, t, W, rows, cols, X + k * cols, 1, ref + k * rows);
                for (int k = 0; k < NTOK && !fails; k++)
                    for (int64_t r = 0; r < rows && !fails; r++) {
                        float d = v->dot[t](W + r * rb, X + k * cols, cols);
                        if (memcmp(&d, ref + k * rows + r, sizeof(float))) {
                            fails++;
                            CHECK(0, "%s %s rows=%lld cols=%lld: dot of row %lld is %a, matmul T=1 gives %a", variant,
                                  ti->name, (long long)rows, (long long)cols, (long long)r, d, ref[k * rows + r]);
                        }
                    }
                for (int nth = 1; nth <= 3 && !fails; nth++)
                    for (size_t k = 0; k < BT_ARRAY_SIZE(Ts) && !fails; k++) {
                        int T = Ts[k], shift = (T * 7 + nth * 3) % NTOK;   /* which token sits in slot 0 */
                        for (int i = 0; i < T; i++)
                            memcpy(xb + i * cols, X + ((shift + i) % NTOK) * cols, sizeof(float) * cols);
                        bt_matmul(pools[nth - 1], t, W, rows, cols, xb, T, out);
                        for (int i = 0; i < T && !fails; i++) {
                            const float *want = ref + ((shift + i) % NTOK) * rows, *got = out + i * rows;
                            if (memcmp(got, want, sizeof(float) * rows)) {
                                int64_t r = 0;
                                while (!memcmp(got + r, want + r, sizeof(float)))
                                    r++;
                                fails++;
                                CHECK(0, "%s %s rows=%lld cols=%lld threads=%d T=%d: token in slot %d, row %lld is %a, "
                                      "T=1 gives %a", variant, ti->name, (long long)rows, (long long)cols, nth, T, i,
                                      (long long)r, got[r], want[r]);
                            }
                        }
                    }
                free(W);
                free(X);
                free(xb);
                free(ref);
                free(out);
            }
        }
        bad_types += fails > 0;
    }
    for (int i = 0; i < 3; i++)
        bt_pool_free(pools[i]);
    printf("%s: batch invariance %s\n", variant, bad_types ? "FAILED" : "ok");
}

struct pool_probe {
    int seen[8];
    int nth_seen[8];
};

static void probe_fn(void *arg, int ith, int nth)
{
    struct pool_probe *pp = arg;
    __atomic_fetch_add(&pp->seen[ith], 1, __ATOMIC_RELAXED);
    pp->nth_seen[ith] = nth;
}

static void nop_fn(void *arg, int ith, int nth)
{
    (void)arg;
    (void)ith;
    (void)nth;
}

static void test_pool(void)
{
    bt_pool_free(NULL);
    CHECK(bt_pool_threads(NULL) == 1, "NULL pool has one thread");
    CHECK(bt_pool_new(-1) == NULL, "negative thread count must fail");
    for (int nth = 1; nth <= 4; nth++) {
        bt_pool *p = bt_pool_new(nth);
        CHECK(p != NULL, "bt_pool_new(%d): %s", nth, bt_errmsg());
        if (!p)
            continue;
        struct pool_probe pp = { { 0 }, { 0 } };
        int runs = 2000;
        for (int i = 0; i < runs; i++)
            bt_pool_run(p, probe_fn, &pp);
        for (int i = 0; i < nth; i++)
            CHECK(pp.seen[i] == runs && pp.nth_seen[i] == nth, "pool %d: thread %d ran %d/%d times (nth %d)", nth, i,
                  pp.seen[i], runs, pp.nth_seen[i]);
        /* Dispatch overhead: printed, not asserted (shared CI machines). */
        double t0 = bt_now();
        for (int i = 0; i < 2000; i++)
            bt_pool_run(p, nop_fn, NULL);
        printf("pool %d threads: %.2f us per bt_pool_run\n", nth, (bt_now() - t0) / 2000 * 1e6);
        bt_pool_free(p);
    }
}

/* The tap statistics' sweep: every variant gives the scalar sweep's bits
 * (sums, min, max per lane) and stops at the same chunk (its chunks swept
 * apart and folded after, too), on lengths around
 * the 64-element chunk, with zeros of both signs, subnormals, values near
 * FLT_MAX (whose squares and sums overflow to Inf: still finite inputs)
 * and a NaN, a -Inf or a +Inf planted at random. */
static void test_sweep(const bt_kvariant *v)
{
    const bt_kvariant *sc = bt_kernels_variant("scalar");
    static const int64_t lens[] = { 1, 7, 8, 63, 64, 65, 127, 128, 200, 576, 1000, 4096, 4099 };
    static float x[4099];
    for (int trial = 0; trial < 60; trial++)
        for (size_t li = 0; li < BT_ARRAY_SIZE(lens); li++) {
            int64_t n = lens[li];
            for (int64_t i = 0; i < n; i++) {
                uint32_t r = rnd();
                x[i] = rndf(-8, 8);
                if (r % 41 == 0) x[i] = -0.0f;
                if (r % 43 == 0) x[i] = 0.0f;
                if (r % 47 == 0) x[i] = 1e-42f * (r & 1 ? 1 : -1);
                if (r % 53 == 0 && trial % 3 == 1) x[i] = (r & 2 ? 1 : -1) * 3e38f;
            }
            if (trial % 4 == 3) {
                int64_t at = rnd() % n;
                x[at] = (trial / 4) % 3 == 0 ? NAN : (trial / 4) % 3 == 1 ? -INFINITY : INFINITY;
            }
            bt_sweep a, b;
            bt_sweep_init(&a);
            bt_sweep_init(&b);
            int64_t ga = sc->sweep_f32(x, n, &a), gb = v->sweep_f32(x, n, &b);
            CHECK(ga == gb, "%s sweep of %lld: took %lld, scalar %lld", v->name, (long long)n, (long long)gb,
                  (long long)ga);
            CHECK(!memcmp(&a, &b, sizeof a), "%s sweep of %lld (trial %d): accumulators differ from scalar",
                  v->name, (long long)n, trial);
            if (n % 64) continue;
            /* whole chunks: swept one by one and folded after, the same
             * bits, stopping at the same chunk */
            static bt_sweep_chunk ch[4096 / 64];
            int64_t gc = v->sweep_chunks_f32(x, n / 64, ch);
            CHECK(gc * 64 == ga, "%s chunks of %lld: took %lld chunks, the sweep %lld elements", v->name, (long long)n,
                  (long long)gc, (long long)ga);
            bt_sweep c;
            bt_sweep_init(&c);
            bt_sweep_fold(&c, ch, gc);
            CHECK(!memcmp(&a, &c, sizeof a), "%s chunks of %lld (trial %d): folded, they differ from the sweep",
                  v->name, (long long)n, trial);
        }
}

/* A softmax row's entropy chains: every variant's softmax_acc_f64 gives
 * the plain loop's bits (element j into chain j % 4, e * d rounded then
 * added, e == 0 skipped) with exponentials of every size, zeros (masked
 * -inf logits and underflows), lengths around the 8-wide step and carried
 * chains; bt_softmax_sums_f32 over a row gives the same as that loop. */
static void test_softmax_sums(const bt_kvariant *v)
{
    static const int64_t lens[] = { 0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 255, 256, 257, 1000 };
    static float e[1000], x[1000];
    for (int trial = 0; trial < 40; trial++)
        for (size_t li = 0; li < BT_ARRAY_SIZE(lens); li++) {
            int64_t n = lens[li];
            float m = rndf(-2, 12);
            for (int64_t i = 0; i < n; i++) {
                uint32_t r = rnd();
                x[i] = rndf(-40, m);
                e[i] = expf(x[i] - m);
                if (r % 13 == 0) { x[i] = -INFINITY; e[i] = 0; }
                if (r % 17 == 0) { x[i] = m - 200; e[i] = 0; }
                if (r % 19 == 0) e[i] = 1e-42f;
            }
            double z0[4], e0[4], z1[4], e1[4];
            for (int c = 0; c < 4; c++) z0[c] = z1[c] = trial % 2 ? rndf(0, 3) : 0, e0[c] = e1[c] = trial % 2 ? rndf(-3, 0) : 0;
            for (int64_t j = 0; j < n; j++) {
                if (e[j] == 0) continue;
                volatile double t = e[j] * ((double)x[j] - m);
                z0[j % 4] += e[j];
                e0[j % 4] += t;
            }
            v->softmax_acc_f64(e, x, n, m, z1, e1);
            CHECK(!memcmp(z0, z1, sizeof z0) && !memcmp(e0, e1, sizeof e0),
                  "%s softmax chains of %lld (trial %d) differ from the plain loop", v->name, (long long)n, trial);
        }
    /* the whole row, through the active variant's exp and chains */
    int64_t n = 1000;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] = i % 97 == 0 ? -INFINITY : rndf(-30, 9);
        if (x[i] > m) m = x[i];
    }
    double z0[4] = { 0 }, e0[4] = { 0 }, z1[4] = { 0 }, e1[4] = { 0 };
    for (int64_t j = 0; j < n; j++) {
        float ej = expf(x[j] - m);
        if (ej == 0) continue;
        volatile double t = ej * ((double)x[j] - m);
        z0[j % 4] += ej;
        e0[j % 4] += t;
    }
    bt_softmax_sums_f32(x, n, m, z1, e1);
    CHECK(!memcmp(z0, z1, sizeof z0) && !memcmp(e0, e1, sizeof e0), "bt_softmax_sums_f32 differs from the plain loop");
}

/* The top-k scan's jump: the first value above a threshold, NaN never. */
static void test_first_above(void)
{
    static float x[300];
    for (int trial = 0; trial < 200; trial++) {
        int64_t n = rnd() % 300;
        float t = rndf(0, 1);
        for (int64_t i = 0; i < n; i++) x[i] = rnd() % 5 == 0 ? NAN : rnd() % 7 == 0 ? t : rndf(-1, t);
        int64_t want = n;
        if (n && trial % 3) { want = rnd() % n; x[want] = t + (trial % 2 ? 1e-6f : 5); }
        CHECK(bt_first_above_f32(x, n, t) == want, "bt_first_above_f32 of %lld: %lld, want %lld", (long long)n,
              (long long)bt_first_above_f32(x, n, t), (long long)want);
    }
}

/* Attention's loops: every variant's weighted sum gives the plain loop's
 * bits (the scalar table's), and bt_dot_rows_f32 gives each row the bits
 * of the variant's own one-row dot, for head sizes around the vector
 * widths, with NaN / Inf / subnormal values and weights. */
/* The delta rule's token (the variants' gdn_cols_f32, bt_gdn_seq_f32's): each variant,
 * over column ranges, gives the scalar reference's bits over the whole, and the reference gives the four-pass composition the
 * CPU backend ran before (scale_max, then wsum for sk, the rank-1 update
 * and the output), over head shapes with SIMD tails and non-finite,
 * signed-zero and subnormal entries. */
static void test_gdn_step(const bt_kvariant *v)
{
    const bt_kvariant *sc = bt_kernels_variant("scalar");
    static const int64_t dks[] = { 1, 8, 16, 33, 128 };
    static const int64_t dvs[] = { 1, 7, 8, 16, 24, 33, 64, 80, 128, 200 };
    static float S0[128 * 200], S1[128 * 200], S2[128 * 200], k[128], q[128], qs[128], vv[200], o1[200], o2[200],
        o3[200], sk[200], u[200];
    for (size_t a = 0; a < BT_ARRAY_SIZE(dks); a++)
        for (size_t b = 0; b < BT_ARRAY_SIZE(dvs); b++) {
            int64_t dk = dks[a], dv = dvs[b];
            float decay = rndf(0.5f, 1.0f), beta = rndf(0, 1), scale = 1.0f / sqrtf((float)dk);
            for (int64_t i = 0; i < dk * dv; i++) S0[i] = S1[i] = S2[i] = rndf(-2, 2);
            for (int64_t i = 0; i < dk; i++) k[i] = rndf(-1, 1), q[i] = rndf(-1, 1), qs[i] = q[i] * scale;
            for (int64_t i = 0; i < dv; i++) vv[i] = rndf(-3, 3);
            if (b == 2) { S0[dv / 2] = S1[dv / 2] = S2[dv / 2] = NAN; k[0] = -0.0f; }
            if (b == 4) { S0[dk * dv - 1] = S1[dk * dv - 1] = S2[dk * dv - 1] = INFINITY; vv[0] = 1e-40f; }
            if (b == 5) for (int64_t i = 0; i < dv; i++) S0[i] = S1[i] = S2[i] = (i & 1) ? -0.0f : 1e-39f;
            /* the variant over column ranges split at 64 (the prefill's
             * blocks) and at an odd column: the whole token's bits */
            int64_t cut = dv > 64 ? 64 : dv / 2 + 1, cut2 = BT_MIN(dv, cut + 13);
            v->gdn_cols_f32(S1, dk, dv, 0, cut, decay, k, vv, beta, qs, o1);
            if (cut < dv) v->gdn_cols_f32(S1, dk, dv, cut, cut2, decay, k, vv, beta, qs, o1);
            if (cut2 < dv) v->gdn_cols_f32(S1, dk, dv, cut2, dv, decay, k, vv, beta, qs, o1);
            sc->gdn_cols_f32(S2, dk, dv, 0, dv, decay, k, vv, beta, qs, o2);
            CHECK(!memcmp(S1, S2, (size_t)(dk * dv) * sizeof(float)) && !memcmp(o1, o2, (size_t)dv * sizeof(float)),
                  "%s gdn_cols dk %lld dv %lld (cut at %lld, %lld) differs from scalar", v->name, (long long)dk,
                  (long long)dv, (long long)cut, (long long)cut2);
            if (v->gdn_seq_f32) {
                /* five tokens in one call: each token's bits as one by one */
                enum { NT = 5 };
                static float Sa[128 * 200], Sb[128 * 200], ks[NT * 128], qq[NT * 128], vs[NT * 200], oa[NT * 200],
                    ob[NT * 200];
                float decs[NT], betas[NT];
                for (int64_t i = 0; i < dk * dv; i++) Sa[i] = Sb[i] = S2[i];
                for (int t = 0; t < NT; t++) {
                    decs[t] = t == 3 && b == 2 ? NAN : rndf(0.5f, 1.0f);
                    betas[t] = rndf(0, 1);
                    for (int64_t i = 0; i < dk; i++) ks[t * dk + i] = rndf(-1, 1), qq[t * dk + i] = rndf(-1, 1) * scale;
                    for (int64_t i = 0; i < dv; i++) vs[t * dv + i] = rndf(-3, 3);
                }
                for (int t = 0; t < NT; t++)
                    sc->gdn_cols_f32(Sb, dk, dv, 0, dv, decs[t], ks + t * dk, vs + t * dv, betas[t], qq + t * dk,
                                     ob + t * dv);
                v->gdn_seq_f32(Sa, dk, dv, 0, dv, NT, decs, ks, dk, vs, dv, betas, qq, dk, oa, dv);
                CHECK(!memcmp(Sa, Sb, (size_t)(dk * dv) * sizeof(float)) &&
                      !memcmp(oa, ob, (size_t)(NT * dv) * sizeof(float)),
                      "%s gdn_seq dk %lld dv %lld: %d tokens differ from one by one", v->name, (long long)dk,
                      (long long)dv, NT);
            }
            {   /* the reference against the four passes */
                sc->scale_max_f32(S0, dk * dv, decay);
                memset(sk, 0, sizeof sk);
                sc->wsum_f32(sk, k, 1.0f, S0, dv, dk, dv);
                for (int64_t c = 0; c < dv; c++) u[c] = (vv[c] - sk[c]) * beta;
                for (int64_t i = 0; i < dk; i++) sc->wsum_f32(S0 + i * dv, k + i, 1.0f, u, 0, 1, dv);
                memset(o3, 0, sizeof o3);
                sc->wsum_f32(o3, q, scale, S0, dv, dk, dv);
                CHECK(!memcmp(S0, S2, (size_t)(dk * dv) * sizeof(float)) && !memcmp(o3, o2, (size_t)dv * sizeof(float)),
                      "scalar gdn_step dk %lld dv %lld differs from the four-pass composition", (long long)dk,
                      (long long)dv);
            }
        }
}

static void test_attn_loops(const bt_kvariant *v)
{
    const bt_kvariant *sc = bt_kernels_variant("scalar");
    const char *was = bt_kernels_simd();
    static const int64_t hds[] = { 1, 7, 8, 16, 24, 33, 64, 80, 128, 200 };
    static const int64_t nps[] = { 1, 3, 4, 5, 9, 16, 17, 33, 64 };
    enum { LD = 256 + 8, MAXP = 64 };
    static float vv[MAXP * LD], wts[MAXP], a1[256], a2[256], q[256], o1[MAXP];
    for (size_t hi = 0; hi < BT_ARRAY_SIZE(hds); hi++)
        for (size_t pi = 0; pi < BT_ARRAY_SIZE(nps); pi++) {
            int64_t hd = hds[hi], np = nps[pi];
            for (int64_t i = 0; i < MAXP * LD; i++) vv[i] = rndf(-3, 3);
            for (int64_t p = 0; p < np; p++) wts[p] = rndf(0, 1);
            for (int64_t i = 0; i < hd; i++) a1[i] = a2[i] = rndf(-1, 1), q[i] = rndf(-2, 2);
            if (pi == 2) { vv[LD + hd / 2] = NAN; vv[hd - 1] = INFINITY; wts[0] = 1e-40f; }
            if (pi == 5)   /* the 16-key score tile: signed zeros, subnormals, Inf - Inf in one key */
                for (int64_t p = 0; p < np; p++)
                    for (int64_t i = 0; i < hd; i++) {
                        float *e = &vv[p * LD + i + 1];
                        if (p % 4 == 1) *e = (i & 1) ? -0.0f : 0.0f;
                        if (p % 4 == 2) *e = ((i + p) % 3 ? 1 : -1) * 1e-39f;
                        if (p == 7) *e = i % 2 ? -INFINITY : INFINITY;
                        if (p == 11 && i == hd - 1) *e = NAN;
                    }
            v->wsum_f32(a2, wts, 0.37f, vv + 3, LD, np, hd);
            sc->wsum_f32(a1, wts, 0.37f, vv + 3, LD, np, hd);
            CHECK(!memcmp(a1, a2, (size_t)hd * sizeof(float)), "%s wsum hd %lld np %lld differs from scalar",
                  v->name, (long long)hd, (long long)np);
            /* softmax's scale-and-max: the scaled row is the plain loop's
             * bits and so is the maximum (a NaN never wins; the sign of
             * a zero maximum may differ, which exp(x - m) cannot see) */
            {
                static float r1[256], r2[256];
                for (int64_t i = 0; i < hd; i++) r1[i] = r2[i] = rndf(-50, 50);
                if (pi == 1) r1[hd / 2] = r2[hd / 2] = NAN;
                if (pi == 2) r1[0] = r2[0] = -INFINITY, r1[hd - 1] = r2[hd - 1] = 3e38f;
                if (pi == 3) for (int64_t i = 0; i < hd; i++) r1[i] = r2[i] = (i % 3) ? NAN : -INFINITY;
                if (pi == 4) for (int64_t i = 0; i < hd; i++) r1[i] = r2[i] = (i & 1) ? -0.0f : 0.0f;
                float m1 = sc->scale_max_f32(r1, hd, 0.125f), m2 = v->scale_max_f32(r2, hd, 0.125f);
                CHECK(!memcmp(r1, r2, (size_t)hd * sizeof(float)), "%s scale_max n %lld: scaled row differs",
                      v->name, (long long)hd);
                CHECK(m1 == m2 || (isnan(m1) && isnan(m2)), "%s scale_max n %lld: max %g, scalar %g", v->name,
                      (long long)hd, m2, m1);
                CHECK(!isnan(m2), "%s scale_max n %lld: a NaN maximum", v->name, (long long)hd);
                if (pi == 3) CHECK(m2 == -INFINITY, "%s scale_max: %g over NaN and -inf", v->name, m2);
            }
            if (bt_kernels_force(v->name) != BT_OK) continue;
            bt_dot_rows_f32(vv + 1, LD, q, hd, np, o1);
            for (int64_t p = 0; p < np; p++) {
                float want = v->dot[BT_DT_F32](vv + 1 + p * LD, q, hd);
                CHECK(!memcmp(&want, &o1[p], sizeof want), "%s dot_rows hd %lld row %lld: %g vs dot %g", v->name,
                      (long long)hd, (long long)p, o1[p], want);
            }
            /* a GQA group of nq queries (stride hd) against the same keys:
             * 8x3 tiles plus leftovers, each score the one-query bits */
            static float qs[7 * 256], om[7 * (MAXP + 1)];
            for (int64_t i = 0; i < 7 * hd; i++) qs[i] = rndf(-2, 2);
            for (int nq = 1; nq <= 7; nq += 2) {
                bt_dot_rows_multi_f32(vv + 2, LD, qs, hd, nq, hd, np, om, MAXP + 1);
                for (int jq = 0; jq < nq; jq++) {
                    bt_dot_rows_f32(vv + 2, LD, qs + jq * hd, hd, np, o1);
                    CHECK(!memcmp(o1, om + jq * (MAXP + 1), (size_t)np * sizeof(float)),
                          "%s dot_rows_multi hd %lld np %lld nq %d: query %d differs", v->name, (long long)hd,
                          (long long)np, nq, jq);
                }
            }
        }
    bt_kernels_force(was);
}

int main(void)
{
    bt_kernels_init();
    printf("active SIMD variant: %s\n", bt_kernels_simd());
    test_dtype_table();

    const bt_kvariant *variants[3];
    int nv = 0;
    variants[nv++] = bt_kernels_variant("scalar");
    for (size_t i = 0; i < BT_ARRAY_SIZE(simd_names); i++) {
        const bt_kvariant *v = bt_kernels_variant(simd_names[i]);
        if (v)
            variants[nv++] = v;
        else
            printf("SKIP variant %s: this CPU or compiler lacks it\n", simd_names[i]);
    }
    for (int i = 0; i < nv; i++) {
        printf("testing variant %s\n", variants[i]->name);
        test_golden(variants[i]);
        test_mxfp4_exponents(variants[i]);
        test_sweep(variants[i]);
        test_softmax_sums(variants[i]);
        test_attn_loops(variants[i]);
        test_gdn_step(variants[i]);
        test_variants_random(variants[i]);
        test_nonfinite(variants[i]);
        test_matmul(variants[i]->name);
        test_batch_invariance(variants[i]->name);
    }
    test_pool();
    test_first_above();
    double bw = bt_measure_bandwidth(NULL);
    CHECK(bw > 0, "bandwidth probe returned %g", bw);
    printf("memory bandwidth (1 thread): %.1f GB/s\n", bw);

    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("all kernel tests passed\n");
    return 0;
}
