/* test_numerics.c - the numerics profile conversions, bit for bit: f32 ->
 * f16 against numpy's astype(float16) (a table made with numpy 2.4) and,
 * where the CPU has F16C, against vcvtps2ph on every class of input and a
 * million random bit patterns; f32 -> bf16 RNE; llama.cpp's Q8 block
 * quantization (round half to even, d = amax/127 in f16); profile parsing
 * and its errors; and the exact profile leaving an engine bit-identical. */
#include "check.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "backend/backend_impl.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* numpy: np.float32(v).astype(np.float16).view(np.uint16) */
static const struct { uint32_t f; uint16_t h; } numpy_f16[] = {
    { 0x00000000u, 0x0000 }, { 0x80000000u, 0x8000 }, { 0x3f800000u, 0x3c00 }, { 0x477fe000u, 0x7bff },
    { 0x477feffdu, 0x7bff }, { 0x477ff000u, 0x7c00 }, { 0xc77ff000u, 0xfc00 }, { 0x4788b800u, 0x7c00 },
    { 0x322bcc77u, 0x0000 }, { 0x337ffae5u, 0x0001 }, { 0x32fffae5u, 0x0000 }, { 0x33000000u, 0x0000 },
    { 0x38800000u, 0x0400 }, { 0x387fc000u, 0x03ff }, { 0x3f801000u, 0x3c00 }, { 0x3f802000u, 0x3c01 },
    { 0x3f803000u, 0x3c02 }, { 0xb627c5acu, 0x802a }, { 0x7f7f0000u, 0x7c00 }, { 0x7f800000u, 0x7c00 },
    { 0xff800000u, 0xfc00 }, { 0x3dcccccdu, 0x2e66 }, { 0x3eaaaaabu, 0x3555 }, { 0x4640e6b6u, 0x7207 },
    { 0xb900f990u, 0x8808 },
};

#if defined(__x86_64__)
__attribute__((target("f16c")))
static uint16_t f16c(float x) { return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), 0), 0); }
#endif

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

static void test_f16(void)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(numpy_f16); i++) {
        uint16_t h = bt_num_f32_to_f16(from_bits(numpy_f16[i].f));
        CHECK(h == numpy_f16[i].h, "f32 0x%08x -> f16 0x%04x, numpy 0x%04x", numpy_f16[i].f, h, numpy_f16[i].h);
    }
    /* quiet NaN keeps its sign and payload top bits */
    CHECK(bt_num_f32_to_f16(from_bits(0x7fc00000u)) == 0x7e00);
    CHECK(bt_num_f32_to_f16(from_bits(0xffc00000u)) == 0xfe00);
    CHECK(isinf(bt_num_round_f16(65520.0f)) && bt_num_round_f16(65519.0f) == 65504.0f);
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("f16c")) { fprintf(stderr, "no F16C: the hardware comparison is skipped\n"); return; }
    int bad = 0;
    /* every exponent with edge mantissas, then random patterns (quiet NaNs only:
     * the hardware quiets a signalling one, and so do we) */
    for (uint32_t e = 0; e < 256; e++)
        for (uint32_t m = 0; m < 64; m++) {
            uint32_t mant = m < 32 ? m : (0x7fffffu - (m - 32)) ^ (m & 1 ? 0x1000u : 0);
            for (uint32_t s = 0; s < 2; s++) {
                uint32_t u = s << 31 | e << 23 | mant;
                if (e == 255 && mant) u |= 0x400000u;
                float x = from_bits(u);
                if (bt_num_f32_to_f16(x) != f16c(x) && bad++ < 5) fprintf(stderr, "0x%08x: ours 0x%04x F16C 0x%04x\n", u, bt_num_f32_to_f16(x), f16c(x));
            }
        }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = next32();
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffff)) u |= 0x400000u;
        float x = from_bits(u);
        if (bt_num_f32_to_f16(x) != f16c(x) && bad++ < 5) fprintf(stderr, "0x%08x: ours 0x%04x F16C 0x%04x\n", u, bt_num_f32_to_f16(x), f16c(x));
    }
    CHECK(bad == 0, "%d conversions differ from F16C", bad);
#endif
}

static void test_bf16(void)
{
    CHECK(bt_num_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(bt_num_f32_to_bf16(from_bits(0x3f808000u)) == 0x3f80, "tie to even (down)");
    CHECK(bt_num_f32_to_bf16(from_bits(0x3f818000u)) == 0x3f82, "tie to even (up)");
    CHECK(bt_num_f32_to_bf16(from_bits(0x3f808001u)) == 0x3f81, "above the tie");
    CHECK(bt_num_f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to +Inf");
    CHECK(bt_num_f32_to_bf16(from_bits(0x00012345u)) == 0x0001, "subnormals are kept");
    CHECK(bt_num_f32_to_bf16(from_bits(0xff800000u)) == 0xff80);
    CHECK((bt_num_f32_to_bf16(from_bits(0x7f800001u)) & 0x7fc0) == 0x7fc0, "a signalling NaN comes back quiet");
    CHECK(bt_num_round_bf16(67584.0f) == 67584.0f, "67584 is a bf16 number");
}

/* f32 -> float8 e4m3fn -> f32: values torch 2.13's .to(torch.float8_e4m3fn)
 * gives (checked by hand in tools/torch-env's environment), then every
 * representable value, every midpoint (ties to the even code) and just
 * either side of it. */
static void test_f8(void)
{
    static const float in[] = { 449, 464, 464.5f, 465, 479, 480, 1e6f, 1e-3f, 0x1p-10f, 3 * 0x1p-10f, 0x1p-9f, 1.0625f,
                                1.1875f, -0.3f, 5e-4f, -1e6f, 0.0f };
    static const float out[] = { 448, 448, 448, 448, 448, 448, 448, 0x1p-9f, 0.0f, 0x1p-8f, 0x1p-9f, 1.0f,
                                 1.25f, -0.3125f, 0.0f, -448, 0.0f };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        CHECK(bt_num_round_f8_e4m3(in[i]) == out[i], "f8_e4m3(%g) = %g, torch %g", in[i], bt_num_round_f8_e4m3(in[i]), out[i]);
    CHECK(bt_num_round_f8_e4m3(INFINITY) == 448 && bt_num_round_f8_e4m3(-INFINITY) == -448, "Inf saturates");
    CHECK(isnan(bt_num_round_f8_e4m3(NAN)), "NaN stays NaN");
    CHECK(signbit(bt_num_round_f8_e4m3(-1e-4f)), "a negative underflow keeps its sign");
    float v[127];
    for (int c = 0; c < 127; c++) {   /* codes 0x00..0x7e; 0x7f is NaN */
        int E = c >> 3, m = c & 7;
        v[c] = E ? ldexpf(1.0f + m / 8.0f, E - 7) : ldexpf(m / 8.0f, -6);
        CHECK(bt_num_round_f8_e4m3(v[c]) == v[c] && bt_num_round_f8_e4m3(-v[c]) == -v[c], "code %d (%g) is kept", c, v[c]);
    }
    for (int c = 0; c + 1 < 127; c++) {
        float mid = (v[c] + v[c + 1]) / 2, even = (c & 1) ? v[c + 1] : v[c];
        CHECK(bt_num_round_f8_e4m3(mid) == even, "the midpoint %g of codes %d, %d goes to the even one", mid, c, c + 1);
        CHECK(bt_num_round_f8_e4m3(nextafterf(mid, 0)) == v[c] && bt_num_round_f8_e4m3(nextafterf(mid, 1e9f)) == v[c + 1],
              "either side of the midpoint %g", mid);
    }
    bt_numerics n;
    CHECK_OK(bt_numerics_parse("kv=f8_e4m3", &n));
    CHECK(n.kv == BT_NUM_F8_E4M3);
    CHECK(bt_numerics_parse("kv=f8_e4m3,attn=ggml", &n) == BT_EINVAL, "llama.cpp has no fp8 cache to emulate");
}

static void test_q8(void)
{
    float x[32];
    uint16_t d;
    int8_t q[32];
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    x[31] = 127.0f;
    x[0] = 2.5f; x[1] = 3.5f; x[2] = -2.5f;   /* amax 127: id = 1, so these are exact ties */
    bt_num_quantize_q8_block(x, &d, q);
    CHECK(d == bt_num_f32_to_f16(1.0f), "d = amax/127 = 1");
    CHECK(q[0] == 2 && q[1] == 4 && q[2] == -2, "ties round to even, as _mm256_round_ps does: %d %d %d", q[0], q[1], q[2]);
    CHECK(q[31] == 127 && q[16] == 0 && q[3] == -13);
    float z[32] = { 0 };
    bt_num_quantize_q8_block(z, &d, q);
    CHECK(d == 0 && q[5] == 0, "an all-zero block");
    /* non-finite values (fuzz_numerics: the cast of NaN to int8 was
     * undefined): NaN and Inf * 0 convert as cvtps_epi32 + packs do, to -128 */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    x[4] = NAN;
    bt_num_quantize_q8_block(x, &d, q);
    CHECK(q[4] == -128 && q[0] == -127 && q[31] == 119, "a NaN lane is -128, the others as without it: %d %d %d", q[4], q[0], q[31]);
    x[4] = INFINITY;
    bt_num_quantize_q8_block(x, &d, q);
    CHECK(q[4] == -128 && q[0] == 0 && q[20] == 0 && d == 0x7c00, "an Inf: amax Inf, id 0, Inf * 0 = NaN gives -128, the rest 0: %d %d %d", q[4], q[0], q[20]);
    /* round trip error of a q8 block: d/2 per value, plus 127 times the f16 rounding of d */
    float y[32], r[32];
    for (int i = 0; i < 32; i++) y[i] = r[i] = sinf((float)i) * 3.7f;
    bt_num_round(BT_NUM_Q8_0, r, 32);
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(y[i]));
    float dd = bt_num_round_f16(amax / 127);
    for (int i = 0; i < 32; i++) CHECK(fabsf(r[i] - y[i]) <= dd * 0.5f + 127 * fabsf(dd - amax / 127) + 1e-6f, "value %d: %g vs %g", i, r[i], y[i]);
}

/* act_q=ggml: each weight type's input is converted to llama.cpp CPU's
 * vec_dot_type for it (q8_0 for q4_0/q5_0/q8_0/mxfp4, q8_1 for q4_1/q5_1,
 * none for the k-quants, the weight's own type for f16/bf16). */
static void test_act_q_ggml(void)
{
    static const struct { int type, fmt; } want[] = {
        { BT_DT_Q4_0, BT_NUM_Q8_0 }, { BT_DT_Q8_0, BT_NUM_Q8_0 }, { BT_DT_MXFP4, BT_NUM_Q8_0 },
        { BT_DT_Q4_1, BT_NUM_Q8_1 }, { BT_DT_Q4_K, BT_NUM_F32 }, { BT_DT_F16, BT_NUM_F16 },
        { BT_DT_F32, BT_NUM_F32 },
    };
    bt_numerics n;
    CHECK_OK(bt_numerics_parse("act_q=ggml", &n));
    float x[64], got[64], ref[64];
    for (int i = 0; i < 64; i++) x[i] = sinf((float)i * 0.7f) * 2.3f + 0.01f * (float)i;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        memcpy(got, x, sizeof x);
        memcpy(ref, x, sizeof x);
        bt_numerics_mm_input(&n, want[k].type, 64, got, 64);
        bt_num_round(want[k].fmt, ref, 64);
        CHECK(!memcmp(got, ref, sizeof got), "act_q=ggml: %s input is not converted as format %d", bt_dtype(want[k].type)->name,
              want[k].fmt);
        CHECK(bt_numerics_mm_plain(&n, want[k].type) == (want[k].fmt == BT_NUM_F32), "act_q=ggml: %s plain",
              bt_dtype(want[k].type)->name);
    }
}

static void test_parse(void)
{
    bt_numerics n;
    char buf[256];
    CHECK_OK(bt_numerics_parse("f32", &n));
    CHECK(bt_numerics_is_exact(&n));
    CHECK_OK(bt_numerics_parse("act=f32,mm_in=f32,mm_acc=f32,kv=f32,act_q=none,attn=f32,softmax=f32,norm=f64,rope=f64", &n));
    CHECK(bt_numerics_is_exact(&n));
    bt_numerics_format(&n, buf, sizeof(buf));
    CHECK(!strcmp(buf, "f32"), "%s", buf);
    CHECK_OK(bt_numerics_parse("llama.cpp-cpu,kv=f32", &n));
    CHECK(n.kv == BT_NUM_F32 && n.attn == BT_NUM_GGML && !strcmp(n.preset, "llama.cpp-cpu"));
    CHECK_OK(bt_numerics_parse("act=f16,kv=q8_0", &n));
    bt_numerics_format(&n, buf, sizeof(buf));
    CHECK(!strcmp(buf, "act=f16,mm_in=f32,mm_acc=f32,kv=q8_0,act_q=none,attn=f32,softmax=f32,norm=f64,rope=f64"), "%s", buf);
    /* norm=f32 is not the exact profile: the engine sums norms in double */
    CHECK_OK(bt_numerics_parse("norm=f32", &n));
    CHECK(!bt_numerics_is_exact(&n) && n.norm == BT_NUM_NORM_F32);
    CHECK_OK(bt_numerics_parse("llama.cpp-cpu", &n));
    CHECK(n.norm == BT_NUM_NORM_GGML && n.rope == BT_NUM_ROPE_GGML && n.attn == BT_NUM_GGML && n.kv == BT_NUM_F16);
    CHECK_OK(bt_numerics_parse("llama.cpp-cpu-nofa", &n));
    CHECK(n.attn == BT_NUM_GGML_MM && n.kv == BT_NUM_F16 && n.norm == BT_NUM_NORM_GGML);
    bt_numerics_format(&n, buf, sizeof(buf));
    CHECK(strstr(buf, "attn=ggml-mm") && strstr(buf, "norm=ggml,rope=ggml"), "%s", buf);
    CHECK_OK(bt_numerics_parse("vllm-f16", &n));
    CHECK(n.norm == BT_NUM_NORM_F32 && n.rope == BT_NUM_ROPE_F64);
    const char *bad[] = { "", "f8", "act=f8", "kv=q4_0", "act=f16,", ",act=f16", "act=f16,f16", "zz=f16", "act", "mm_acc=bf16",
                          "norm=f16", "norm=none", "rope=f32", "attn=ggml_mm" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(bad); i++) CHECK(bt_numerics_parse(bad[i], &n) == BT_EINVAL, "'%s' accepted", bad[i]);
}

/* rmsnorm: f64 is the CPU backend's (squares and sum in double), ggml is
 * ggml-cpu's rms_norm_f32 (squares in f32 summed in double, mean rounded to
 * f32, 1.0f/sqrtf), f32 sums the f32 squares in f32. */
static void test_norm(void)
{
    enum { N = 64, T = 200 };
    static float x[T * N], w[N], y[T * N];
    uint32_t s = 12345;
    for (int i = 0; i < T * N; i++) { s = s * 1664525u + 1013904223u; x[i] = ((int32_t)s >> 8) * (3.0f / (1 << 23)); }
    for (int i = 0; i < N; i++) w[i] = 0.5f + i / 64.0f;
    bt_numerics n;
    bt_numerics_ctx *c = NULL;
    int differ_ggml = 0, differ_f32 = 0;
    const float eps = 1e-5f;
    CHECK_OK(bt_numerics_parse("norm=ggml", &n));
    CHECK_OK(bt_numerics_ctx_new(&n, NULL, &c));
    CHECK(bt_numerics_norm_custom(c));
    bt_numerics_rmsnorm(c, y, x, w, T, N, eps);
    for (int t = 0; t < T; t++) {
        const float *xr = x + t * N;
        double ss = 0, sd = 0;
        for (int i = 0; i < N; i++) { float sq = xr[i] * xr[i]; ss += sq; sd += (double)xr[i] * xr[i]; }
        float mean = (float)(ss / N), g = 1.0f / sqrtf(mean + eps), f = (float)(1.0 / sqrt(sd / N + eps));
        for (int i = 0; i < N; i++) {
            CHECK(y[t * N + i] == xr[i] * g * w[i], "ggml norm row %d col %d", t, i);
            differ_ggml += y[t * N + i] != xr[i] * f * w[i];
        }
    }
    bt_numerics_ctx_free(c);
    CHECK_OK(bt_numerics_parse("norm=f32", &n));
    CHECK_OK(bt_numerics_ctx_new(&n, NULL, &c));
    bt_numerics_rmsnorm(c, y, x, w, T, N, eps);
    for (int t = 0; t < T; t++) {
        const float *xr = x + t * N;
        float sf = 0;
        double sd = 0;
        for (int i = 0; i < N; i++) { sf += xr[i] * xr[i]; sd += (double)xr[i] * xr[i]; }
        float g = 1.0f / sqrtf(sf / N + eps), f = (float)(1.0 / sqrt(sd / N + eps));
        for (int i = 0; i < N; i++) {
            CHECK(y[t * N + i] == xr[i] * g * w[i], "f32 norm row %d col %d", t, i);
            differ_f32 += y[t * N + i] != xr[i] * f * w[i];
        }
    }
    bt_numerics_ctx_free(c);
    CHECK(differ_ggml > 0 && differ_f32 > 0, "norm=ggml (%d values) and norm=f32 (%d) differ from the double norm somewhere",
          differ_ggml, differ_f32);
}

/* rope: ggml's f32 recurrence theta *= powf(base, -2/hd) from (float)pos,
 * then cosf/sinf; it drifts from the double table at far positions. */
static void test_rope(void)
{
    enum { HD = 8, CTX = 512, H = HD / 2 };
    static float c64[CTX * H], s64[CTX * H], cg[CTX * H], sg[CTX * H];
    bt_numerics n;
    CHECK_OK(bt_numerics_parse("rope=ggml", &n));
    bt_numerics_rope_table(NULL, 10000.0f, HD, 1.0f, NULL, CTX, c64, s64);
    bt_numerics_rope_table(&n, 10000.0f, HD, 1.0f, NULL, CTX, cg, sg);
    float ts = powf(10000.0f, -2.0f / HD);
    for (int p = 0; p < CTX; p++) {
        float th = (float)p;
        for (int i = 0; i < H; i++) {
            CHECK(cg[p * H + i] == cosf(th) && sg[p * H + i] == sinf(th), "ggml rope at %d,%d", p, i);
            th *= ts;
            double fr = pow(10000.0, -2.0 * i / HD);
            CHECK(c64[p * H + i] == (float)cos(p * fr) && s64[p * H + i] == (float)sin(p * fr), "f64 rope at %d,%d", p, i);
        }
    }
    CHECK(memcmp(c64, cg, sizeof(c64)) || memcmp(s64, sg, sizeof(s64)), "the ggml rope table equals the double one");
}

/* The exact profile is no profile: logits bit-identical over a few steps. */
static void test_exact(const char *model, const char *tok)
{
    bt_model *m = NULL;
    if (bt_model_load(model, tok, &m)) { fprintf(stderr, "no %s: the engine comparison is skipped\n", model); return; }
    bt_engine *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(bt_engine_new(m, 32, 8, 1, &a));
    CHECK_OK(bt_engine_new(m, 32, 8, 1, &b));
    CHECK_OK(bt_engine_new(m, 32, 8, 1, &c));
    bt_numerics n, h;
    /* b went through rope=ggml and back: its rope tables are the exact ones again */
    CHECK_OK(bt_numerics_parse("rope=ggml,norm=ggml", &n));
    CHECK_OK(bt_engine_set_numerics(b, &n));
    CHECK_OK(bt_numerics_parse("act=f32,mm_in=f32,mm_acc=f32,kv=f32,act_q=none,attn=f32,softmax=f32,norm=f64,rope=f64", &n));
    CHECK_OK(bt_engine_set_numerics(b, &n));
    CHECK_OK(bt_numerics_parse("f16", &h));
    CHECK_OK(bt_engine_set_numerics(c, &h));
    int32_t toks[5] = { 1, 400, 300, 42, 7 };
    CHECK_OK(bt_engine_forward(a, toks, 5, 0));
    CHECK_OK(bt_engine_forward(b, toks, 5, 0));
    CHECK_OK(bt_engine_forward(c, toks, 5, 0));
    for (int s = 0; s < 4; s++) {
        int32_t t = 10 + s * 37;
        CHECK_OK(bt_engine_forward(a, &t, 1, 5 + s));
        CHECK_OK(bt_engine_forward(b, &t, 1, 5 + s));
        CHECK_OK(bt_engine_forward(c, &t, 1, 5 + s));
    }
    int nv = m->cfg.n_vocab;
    CHECK(!memcmp(bt_engine_logits(a), bt_engine_logits(b), (size_t)nv * sizeof(float)), "the all-f32 profile changed the logits");
    CHECK(memcmp(bt_engine_logits(a), bt_engine_logits(c), (size_t)nv * sizeof(float)), "the f16 profile changed nothing");
    for (int i = 0; i < nv; i++) CHECK(bt_engine_logits(c)[i] == bt_num_round_f16(bt_engine_logits(c)[i]), "f16 logits are f16 numbers");
    bt_engine_free(a); bt_engine_free(b); bt_engine_free(c);
    /* each new part changes the logits on its own, and stays near f32 */
    const char *one[] = { "norm=f32", "norm=ggml", "kv=f16,attn=ggml-mm", "attn=ggml-mm", "rope=ggml" };
    float *ref = malloc((size_t)nv * sizeof(float));
    for (size_t k = 0; k < BT_ARRAY_SIZE(one); k++) {
        bt_engine *e[2] = { NULL, NULL };
        for (int v = 0; v < 2; v++) {
            CHECK_OK(bt_engine_new(m, 400, 8, 1, &e[v]));
            if (v) { CHECK_OK(bt_numerics_parse(one[k], &n)); CHECK_OK(bt_engine_set_numerics(e[v], &n)); }
            CHECK_OK(bt_engine_forward(e[v], toks, 5, 0));
            for (int p = 5; p < 380; p++) { int32_t t = (p * 37) % nv; CHECK_OK(bt_engine_forward(e[v], &t, 1, p)); }
        }
        memcpy(ref, bt_engine_logits(e[0]), (size_t)nv * sizeof(float));
        float *got = bt_engine_logits(e[1]);
        double md = 0, mx = 0;
        for (int i = 0; i < nv; i++) { md = fmax(md, fabs(got[i] - ref[i])); mx = fmax(mx, fabs(ref[i])); }
        CHECK(md > 0, "%s changed nothing", one[k]);
        CHECK(md < 0.05 * mx, "%s: max difference %g against logits up to %g", one[k], md, mx);
        bt_engine_free(e[0]); bt_engine_free(e[1]);
    }
    free(ref);
    bt_model_free(m);
}

/* A device backend stands in: the CPU's kernels behind another vtable with
 * no host memory (no buf_host). Profiles round host buffers, so a non-exact
 * one is refused there with one line; the exact one is accepted. */
static const char *dev_name(bt_backend *be) { (void)be; return "fake:0"; }

static void test_device_refused(const char *model, const char *tok)
{
    bt_model *m = NULL;
    if (bt_model_load(model, tok, &m)) return;
    bt_backend *cpu = NULL;
    CHECK_OK(bt_backend_cpu_new(1, &cpu));
    struct bt_backend_i iface = *cpu->iface;
    iface.name = dev_name;
    iface.buf_host = NULL;
    bt_backend dev = { .iface = &iface, .ctx = cpu->ctx };
    bt_engine_opts o = { .ctx_len = 16, .max_batch = 4, .backend = &dev };
    bt_engine *e = NULL;
    CHECK_OK(bt_engine_new_opts(m, &o, &e));
    bt_numerics n;
    CHECK_OK(bt_numerics_parse("f16", &n));
    CHECK(bt_engine_set_numerics(e, &n) == BT_EUNSUPPORTED, "a profile on a device backend is refused");
    CHECK(strstr(bt_errmsg(), "CPU only") && strstr(bt_errmsg(), "fake:0"), "the refusal names the device: %s", bt_errmsg());
    CHECK_OK(bt_numerics_parse("f32", &n));
    CHECK_OK(bt_engine_set_numerics(e, &n));
    int32_t t = 1;
    CHECK_OK(bt_engine_forward(e, &t, 1, 0));
    bt_engine_free(e);
    bt_backend_free(cpu);
    bt_model_free(m);
}

int main(int argc, char **argv)
{
    test_f16();
    test_bf16();
    test_f8();
    test_q8();
    test_act_q_ggml();
    test_parse();
    test_norm();
    test_rope();
    const char *shared = getenv("BT_SHARED") ? getenv("BT_SHARED") : "../shared";
    char model[1024], tok[1024];
    snprintf(model, sizeof(model), "%s/models/llama2c/stories260K.bin", argc > 1 ? argv[1] : shared);
    snprintf(tok, sizeof(tok), "%s/models/llama2c/tok512.bin", argc > 1 ? argv[1] : shared);
    test_exact(model, tok);
    test_device_refused(model, tok);
    printf("test_numerics: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
