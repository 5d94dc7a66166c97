/* test_cuda_math.c - the arithmetic of the CUDA kernels, run on the host.
 *
 * kernels/cuda/math.cuh holds the per-block math of every .cu kernel as
 * __host__ __device__ functions; compiled here with the C compiler, the
 * same text is checked against the CPU kernels and the engine:
 *   - dequantization of every weight type: bit for bit with bt_dequant_row
 *     (random blocks, including random f16 scales that are Inf or NaN);
 *   - the warp-order dot product: by normalized error against bt_vec_dot
 *     (another summation order), plus one exact case;
 *   - the tap statistics: the reduction kernel's per-thread accumulation
 *     and tree fold (bt_cu_stats_thread, bt_cu_stats_fold), then the
 *     plugin's bt_cu_stats_finish, against bt_stats_compute
 *     (kernels/cpu/stats.c): counts, min, max, absmax and the first bad
 *     index/position exactly, mean and rms by relative error;
 *   - rmsnorm and softmax by normalized error, rope bit for bit (same
 *     roundings as src/engine/engine.c, whose static functions are repeated
 *     here as the reference);
 *   - injected values (scale, noise) bit for bit with bt_injector_apply;
 *   - the numerics storage formats of num_round (f16, bf16, q8) bit for bit
 *     with bt_num_round.
 * Needs no GPU: never skips. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "kernels/cpu/kernels.h"
#include "tap/stats.h"
#include "tap/inject.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "../kernels/cuda/math.cuh"

static uint64_t rng_state = 0x12345678abcdefull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float frand(void) { return (float)((rnd() & 0xffffff) / 16777216.0 * 2.0 - 1.0); }

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Offsets of the f16 scale fields, to put sane scales there (finite=1) or
 * leave random bytes (which includes Inf/NaN exponents). */
static void put_f16(uint8_t *p, float v) { uint16_t h = bt_f32_to_f16(v); memcpy(p, &h, 2); }

static void fill_row(int type, uint8_t *row, int64_t n, int sane)
{
    const bt_dtype_info *ti = bt_dtype(type);
    size_t bytes = bt_dtype_row_size(type, n);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rnd();
    if (!sane) return;
    if (type == BT_DT_F32) {
        for (int64_t i = 0; i < n; i++) { float v = frand(); memcpy(row + 4 * i, &v, 4); }
        return;
    }
    if (type == BT_DT_F16) { for (int64_t i = 0; i < n; i++) put_f16(row + 2 * i, frand()); return; }
    if (type == BT_DT_BF16) {
        for (int64_t i = 0; i < n; i++) { uint16_t h = bt_f32_to_bf16(frand()); memcpy(row + 2 * i, &h, 2); }
        return;
    }
    int off[2];
    int k = bt_dtype_scale_offsets(type, off);
    for (int64_t b = 0; b < n / ti->blck; b++)
        for (int j = 0; j < k; j++)
            put_f16(row + b * ti->type_size + off[j], 0.01f + 0.05f * (float)(rnd() % 100) / 100.0f);
}

static const int types[] = { BT_DT_F32, BT_DT_F16, BT_DT_BF16, BT_DT_Q4_0, BT_DT_Q4_1, BT_DT_Q5_0,
                             BT_DT_Q5_1, BT_DT_Q8_0, BT_DT_Q2_K, BT_DT_Q3_K, BT_DT_Q4_K, BT_DT_Q5_K,
                             BT_DT_Q6_K };

static void test_type_table(void)
{
    CHECK((int)BT_CU_F32 == (int)BT_DT_F32 && (int)BT_CU_F16 == (int)BT_DT_F16 && (int)BT_CU_BF16 == (int)BT_DT_BF16);
    CHECK((int)BT_CU_Q4_0 == (int)BT_DT_Q4_0 && (int)BT_CU_Q4_1 == (int)BT_DT_Q4_1 && (int)BT_CU_Q5_0 == (int)BT_DT_Q5_0);
    CHECK((int)BT_CU_Q5_1 == (int)BT_DT_Q5_1 && (int)BT_CU_Q8_0 == (int)BT_DT_Q8_0 && (int)BT_CU_Q2_K == (int)BT_DT_Q2_K);
    CHECK((int)BT_CU_Q3_K == (int)BT_DT_Q3_K && (int)BT_CU_Q4_K == (int)BT_DT_Q4_K && (int)BT_CU_Q5_K == (int)BT_DT_Q5_K && (int)BT_CU_Q6_K == (int)BT_DT_Q6_K);
    for (size_t t = 0; t < BT_ARRAY_SIZE(types); t++) {
        const bt_dtype_info *ti = bt_dtype(types[t]);
        CHECK(ti->compute, "%s is not a compute type on the CPU", ti->name);
        CHECK(bt_cu_blck(types[t]) == ti->blck, "%s block %d vs %d", ti->name, bt_cu_blck(types[t]), ti->blck);
        CHECK((size_t)bt_cu_type_size(types[t]) == ti->type_size, "%s size", ti->name);
    }
    /* every compute type of the CPU is one the device computes, but mxfp4,
     * which the plugin knows by name only, to refuse it */
    for (int t = 0; t < BT_DT_COUNT; t++) {
        if (!bt_dtype(t)->compute) continue;
        if (t == BT_DT_MXFP4) CHECK(bt_cu_blck(t) == 0 && bt_cu_type_size(t) == 0, "mxfp4 has a device dequantizer");
        else CHECK(bt_cu_blck(t) > 0, "CPU type %s has no device dequantizer", bt_dtype(t)->name);
        CHECK(!strcasecmp(bt_cu_type_name(t), bt_dtype(t)->name), "CPU type %s is %s on the device", bt_dtype(t)->name,
              bt_cu_type_name(t));
    }
    CHECK((int)BT_CU_MXFP4 == (int)BT_DT_MXFP4 && !strcmp(bt_cu_type_name(-1), "?") && !strcmp(bt_cu_type_name(31), "?"));
}

static void test_f16(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t a = bits(bt_cu_f16((uint16_t)h)), b = bits(bt_f16_to_f32((uint16_t)h));
        bad += a != b;
    }
    CHECK(bad == 0, "%d of 65536 f16 values decode differently from bt_f16_to_f32", bad);
}

static void test_dequant(void)
{
    enum { N = 1024 };
    static uint8_t row[N * 4];
    static float want[N];
    for (size_t t = 0; t < BT_ARRAY_SIZE(types); t++) {
        int type = types[t];
        for (int rep = 0; rep < 8; rep++) {
            fill_row(type, row, N, rep % 2 == 0);
            bt_dequant_row(type, row, want, N);
            int diff = 0, first = -1;
            for (int64_t i = 0; i < N; i++) {
                float got = bt_cu_dq_at(type, row, i);
                bool same = bits(got) == bits(want[i]) || (isnan(got) && isnan(want[i]));
                if (!same) { diff++; if (first < 0) first = (int)i; }
            }
            CHECK(diff == 0, "dequant %s (%s scales): %d elements differ, first at %d", bt_dtype(type)->name,
                  rep % 2 == 0 ? "sane" : "random", diff, first);
        }
    }
}

static void test_dot(void)
{
    int widths[] = { 256, 288, 576, 1536, 2048 + 256 };
    static uint8_t row[4096 * 4];
    static float x[4096], w[4096];
    for (size_t t = 0; t < BT_ARRAY_SIZE(types); t++) {
        int type = types[t];
        const bt_dtype_info *ti = bt_dtype(type);
        for (size_t k = 0; k < BT_ARRAY_SIZE(widths); k++) {
            int n = widths[k];
            if (n % ti->blck) continue;
            fill_row(type, row, n, 1);
            for (int i = 0; i < n; i++) x[i] = frand();
            bt_dequant_row(type, row, w, n);
            double mag = 0;
            for (int i = 0; i < n; i++) mag += fabs((double)w[i] * x[i]);
            float got = bt_cu_dot_emulate(type, row, x, n), want = bt_vec_dot(type, row, x, n);
            double err = fabs((double)got - want) / (mag + 1e-30);
            CHECK(err < 1e-6, "dot %s n=%d: device order %.9g vs CPU %.9g (normalized error %.3g)", ti->name, n, got, want, err);
        }
    }
    /* a sum every order gets exactly: small integers */
    static float ones[512];
    for (int i = 0; i < 512; i++) { ones[i] = 1.0f; x[i] = (float)(i % 7); }
    float got = bt_cu_dot_emulate(BT_DT_F32, (const uint8_t *)ones, x, 512), want = bt_vec_dot(BT_DT_F32, ones, x, 512);
    CHECK(got == want, "integer dot: %g vs %g", got, want);
    /* a NaN weight is never hidden */
    ones[37] = NAN;
    CHECK(isnan(bt_cu_dot_emulate(BT_DT_F32, (const uint8_t *)ones, x, 512)));
}

static bool same_f(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }
static bool close_f(float a, float b) { return (isnan(a) && isnan(b)) || fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b)); }

static void test_stats(void)
{
    static float x[3 * 1000];
    int rows = 3, width = 1000, pos0 = 17;
    for (int scenario = 0; scenario < 6; scenario++) {
        for (int i = 0; i < rows * width; i++) x[i] = frand() * 10.0f;
        if (scenario == 1) x[1234] = NAN;
        if (scenario == 2) { x[2999] = INFINITY; x[2500] = -INFINITY; x[2600] = NAN; }
        if (scenario == 3) for (int i = 0; i < rows * width; i++) x[i] = NAN;
        if (scenario == 4) { x[0] = -INFINITY; x[5] = INFINITY; }
        int nts[] = { 1, 32, BT_CU_STATS_THREADS };
        for (size_t k = 0; k < BT_ARRAY_SIZE(nts); k++) {
            bt_cu_stats acc;
            bt_tap_stats got, want;
            bt_cu_stats_emulate(x, (int64_t)rows * width, nts[k], &acc);
            bt_cu_stats_finish(&acc, width, pos0, &got);
            bt_stats_compute(x, rows, width, pos0, &want);
            CHECK(got.n == want.n && got.nan == want.nan && got.pinf == want.pinf && got.ninf == want.ninf &&
                  got.n_finite == want.n_finite, "scenario %d threads %d: counts", scenario, nts[k]);
            CHECK(same_f(got.min, want.min) && same_f(got.max, want.max) && same_f(got.absmax, want.absmax),
                  "scenario %d threads %d: min %g/%g max %g/%g", scenario, nts[k], got.min, want.min, got.max, want.max);
            CHECK(close_f(got.mean, want.mean) && close_f(got.rms, want.rms),
                  "scenario %d threads %d: mean %.9g/%.9g rms %.9g/%.9g", scenario, nts[k], got.mean, want.mean, got.rms, want.rms);
            CHECK(got.first_bad_index == want.first_bad_index && got.first_bad_pos == want.first_bad_pos,
                  "scenario %d threads %d: first bad %d@%d vs %d@%d", scenario, nts[k], got.first_bad_index,
                  got.first_bad_pos, want.first_bad_index, want.first_bad_pos);
        }
    }
}

/* src/engine/engine.c's rmsnorm and rope, repeated (they are static there). */
static void ref_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void test_rmsnorm_rope_softmax(void)
{
    enum { N = 576 };
    static float x[N], w[N], a[N], b[N];
    for (int i = 0; i < N; i++) { x[i] = frand() * 3.0f; w[i] = 1.0f + frand() * 0.1f; }
    ref_rmsnorm(a, x, w, N, 1e-5f);
    bt_cu_rmsnorm_emulate(b, x, w, N, 1e-5f, 256);
    double worst = 0;
    int same = 0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]) / (fabs(a[i]) + 1e-30));
        same += bits(a[i]) == bits(b[i]);
    }
    CHECK(worst < 1e-6, "rmsnorm: relative error %.3g", worst);
    printf("# rmsnorm: %d of %d bit-identical, worst relative error %.3g\n", same, N, worst);

    /* rope: same roundings, so bit for bit (angles from the engine's table) */
    int hd = 64, half = hd / 2, diff = 0;
    for (int pos = 0; pos < 40; pos += 13) {
        for (int i = 0; i < half; i++) {
            double freq = pow(10000.0, -2.0 * i / hd), ang = pos * freq;
            float c = (float)cos(ang), s = (float)sin(ang);
            float p = frand(), q = frand();
            float ra = p * c - q * s, rb = p * s + q * c;
            bt_cu_rope_pair(&p, &q, c, s);
            diff += bits(ra) != bits(p) || bits(rb) != bits(q);
        }
    }
    CHECK(diff == 0, "rope: %d pairs differ from the engine's", diff);

    /* softmax: the engine's sequential sum vs the tree */
    static float s1[300], s2[300];
    for (int n = 1; n <= 300; n += 37) {
        for (int p = 0; p < n; p++) s1[p] = s2[p] = frand() * 8.0f;
        float mx = -INFINITY, sum = 0;
        for (int p = 0; p < n; p++) if (s1[p] > mx) mx = s1[p];
        for (int p = 0; p < n; p++) { s1[p] = expf(s1[p] - mx); sum += s1[p]; }
        float inv1 = 1.0f / sum, inv2 = bt_cu_softmax_emulate(s2, n, 128);
        double err = 0;
        for (int p = 0; p < n; p++) err = fmax(err, fabs((double)s1[p] * inv1 - (double)s2[p] * inv2));
        CHECK(err < 1e-6, "softmax n=%d: max abs difference %.3g", n, err);
    }
}

static void test_inject(void)
{
    const char *specs[] = { "noise=0.5@op=ffn_down,count=40", "scale=-3.5@op=ffn_down,count=40", "nan@op=ffn_down,index=3" };
    int kinds[] = { BT_CU_INJ_NOISE, BT_CU_INJ_SCALE, BT_CU_INJ_SET };
    float vals[] = { 0.5f, -3.5f, NAN };
    for (int k = 0; k < 3; k++) {
        bt_injector *inj = bt_injector_new();
        CHECK_OK(bt_injector_add(inj, specs[k]));
        static float data[2 * 64], orig[2 * 64];
        for (int i = 0; i < 128; i++) data[i] = orig[i] = frand();
        bt_tensor_view t = { .op = BT_OP_FFN_DOWN, .layer = 2, .step = 5, .pos0 = 9, .rows = 2, .width = 64, .data = data };
        bt_injector_apply(inj, "target", &t);
        int diff = 0;
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 64; j++) {
                float want = orig[r * 64 + j];
                bool hit = k == 2 ? j == 3 : j < 40;
                if (hit) want = bt_cu_inject_value(kinds[k], want, vals[k], 5, 2, BT_OP_FFN_DOWN, 9 + r, j);
                diff += !same_f(want, data[r * 64 + j]);
            }
        CHECK(diff == 0, "inject '%s': %d elements differ from bt_injector_apply", specs[k], diff);
        bt_injector_free(inj);
    }
}

/* num_round's storage formats (math.cuh) against kernels/cpu/numerics.c:
 * every exponent with edge mantissas and random bit patterns through f16
 * and bf16, and q8 rows (random, with NaN / Inf, all zero, a partial last
 * block), all bit for bit. */
static void test_num_round(void)
{
    CHECK((int)BT_CU_NUM_F32 == (int)BT_NUM_F32 && (int)BT_CU_NUM_F16 == (int)BT_NUM_F16 &&
          (int)BT_CU_NUM_BF16 == (int)BT_NUM_BF16 && (int)BT_CU_NUM_Q8_0 == (int)BT_NUM_Q8_0 &&
          (int)BT_CU_NUM_Q8_1 == (int)BT_NUM_Q8_1, "format ids agree with enum bt_num_fmt");
    int bad16 = 0, badbf = 0;
    for (int i = 0; i < 300000; i++) {
        uint32_t u;
        if (i < 256 * 64) {
            uint32_t e = (uint32_t)i / 64, m = (uint32_t)i % 64;
            u = e << 23 | (m < 32 ? m : 0x7fffffu - (m - 32)) | (i & 1u) << 31;
        } else u = rnd() << 16 ^ rnd();
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffff)) u |= 0x400000u;   /* quiet NaNs only */
        float x;
        memcpy(&x, &u, 4);
        if (bt_cu_f32_to_f16(x) != bt_num_f32_to_f16(x)) bad16++;
        if (bt_cu_f32_to_bf16(x) != bt_num_f32_to_bf16(x)) badbf++;
        float a = x, b = x;
        bt_cu_num_round_row(BT_CU_NUM_F16, &a, 1);
        bt_num_round(BT_NUM_F16, &b, 1);
        if (bits(a) != bits(b)) bad16++;
        a = b = x;
        bt_cu_num_round_row(BT_CU_NUM_BF16, &a, 1);
        bt_num_round(BT_NUM_BF16, &b, 1);
        if (bits(a) != bits(b)) badbf++;
    }
    CHECK(bad16 == 0, "%d f16 conversions differ from bt_num_f32_to_f16", bad16);
    CHECK(badbf == 0, "%d bf16 conversions differ from bt_num_f32_to_bf16", badbf);
    int badq = 0;
    for (int trial = 0; trial < 400; trial++) {
        float x[100], a[100], b[100];
        float scale = trial % 4 == 0 ? 1e-6f : trial % 4 == 1 ? 1.0f : trial % 4 == 2 ? 300.0f : 7e4f;
        for (int i = 0; i < 100; i++) x[i] = frand() * scale;
        if (trial % 7 == 1) x[trial % 100] = NAN;
        if (trial % 7 == 2) x[trial % 100] = -INFINITY;
        if (trial % 7 == 3) for (int i = 32; i < 64; i++) x[i] = 0.0f;
        if (trial % 7 == 4) x[5] = x[9] = 127.5f, x[6] = -63.5f;   /* ties at the scale 1 */
        for (int fmt = BT_NUM_Q8_0; fmt <= BT_NUM_Q8_1; fmt++) {
            memcpy(a, x, sizeof(x));
            memcpy(b, x, sizeof(x));
            bt_cu_num_round_row(fmt, a, 100);
            bt_num_round(fmt, b, 100);
            if (memcmp(a, b, sizeof(a))) badq++;
        }
    }
    CHECK(badq == 0, "%d q8 rows differ from bt_num_round", badq);
}

int main(void)
{
    bt_kernels_init();
    test_type_table();
    test_f16();
    test_dequant();
    test_dot();
    test_stats();
    test_rmsnorm_rope_softmax();
    test_inject();
    test_num_round();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
