/* numerics.c - numerics profiles (see numerics.h for the contract and
 * doc/numerics.md for what each part emulates).
 *
 * Invariant: a part at f32 (or none) never touches a value, so the exact
 * profile is bit-identical to no profile; bt_numerics_ctx_new returns NULL
 * for it and the engine skips the hooks altogether. */
#include "numerics.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- conversions ---- */

uint16_t bt_num_f32_to_f16(float x) { return bt_f32_to_f16(x); }
float bt_num_round_f16(float x) { return bt_f16_to_f32(bt_f32_to_f16(x)); }

uint16_t bt_num_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN, sign and payload top kept */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float bt_num_round_bf16(float x) { return bt_bf16_to_f32(bt_num_f32_to_bf16(x)); }

_Static_assert(BT_NUM_F8_E4M3 == 8, "kernels/cuda/math.cuh's BT_CU_NUM_F8_E4M3 mirrors it");

float bt_num_round_f8_e4m3(float x)
{
    if (isnan(x)) return x;
    if (isinf(x)) return copysignf(448.0f, x);
    float a = fabsf(x);
    if (a == 0.0f) return x;
    int k;
    frexpf(a, &k);                 /* a = f * 2^k, f in [0.5, 1): exponent k - 1 */
    int e = k - 1 < -6 ? -6 : k - 1;
    float q = ldexpf(1.0f, e - 3);   /* the spacing of 3 mantissa bits at that exponent (subnormals: 2^-9) */
    float y = rintf(a / q) * q;      /* a / q is exact (a power of two); rintf rounds half to even */
    return copysignf(y > 448.0f ? 448.0f : y, x);
}

/* One lane of _mm256_cvtps_epi32 then the saturating packs to int8: a NaN
 * or a value out of int32's range converts to INT32_MIN, which saturates
 * to -128 (a C cast of those would be undefined behaviour). */
static int8_t q8_lane(float v)
{
    v = nearbyintf(v);
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
    return (int8_t)(v > 127.0f ? 127 : v < -128.0f ? -128 : (int)v);
}

/* llama.cpp's x86 quantize_row_q8_0 / q8_1 (AVX2 and AVX-512 paths, the
 * ones a CPU build runs): d = amax/127 stored as f16, q = round-to-nearest-
 * even(x * 127/amax). (The scalar _ref code uses 1/d and roundf, which can
 * differ by one step on ties; the SIMD path is what runs.) A non-finite
 * value: amax ignores NaN; an Inf makes amax Inf and 127/amax 0, so Inf * 0
 * is NaN; a NaN lane converts as q8_lane says (-128). */
void bt_num_quantize_q8_block(const float *x, uint16_t *d, int8_t q[32])
{
    float amax = 0;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    *d = bt_f32_to_f16(amax / 127.f);
    float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int i = 0; i < 32; i++) q[i] = q8_lane(x[i] * id);
}

void bt_num_round(int fmt, float *x, size_t n)
{
    switch (fmt) {
    case BT_NUM_F16: for (size_t i = 0; i < n; i++) x[i] = bt_num_round_f16(x[i]); break;
    case BT_NUM_BF16: for (size_t i = 0; i < n; i++) x[i] = bt_num_round_bf16(x[i]); break;
    case BT_NUM_F8_E4M3: for (size_t i = 0; i < n; i++) x[i] = bt_num_round_f8_e4m3(x[i]); break;
    case BT_NUM_Q8_0: case BT_NUM_Q8_1:
        for (size_t b = 0; b + 32 <= n; b += 32) {
            uint16_t d;
            int8_t q[32];
            bt_num_quantize_q8_block(x + b, &d, q);
            float df = bt_f16_to_f32(d);
            for (int i = 0; i < 32; i++) x[b + i] = df * q[i];
        }
        break;
    default: break;
    }
}

/* ---- profiles ---- */

typedef struct preset {
    const char *name, *what;
    bt_numerics n;
} preset;

#define P(a, mi, ma, k, aq, at, sm, nm, rp) { .act = BT_NUM_##a, .mm_in = BT_NUM_##mi, .mm_acc = BT_NUM_##ma, \
        .kv = BT_NUM_##k, .act_q = BT_NUM_##aq, .attn = BT_NUM_##at, .softmax = BT_NUM_##sm, .norm = BT_NUM_NORM_##nm, \
        .rope = BT_NUM_ROPE_##rp }
static const preset presets[] = {
    { "f32", "exact f32 (the default)", P(F32, F32, F32, F32, F32, F32, F32, F64, F64) },
    { "f16", "activations, matmul inputs and KV cache in f16", P(F16, F16, F32, F16, F32, F32, F32, F64, F64) },
    { "bf16", "activations, matmul inputs and KV cache in bf16", P(BF16, BF16, F32, BF16, F32, F32, F32, F64, F64) },
    { "llama.cpp-cpu", "llama.cpp CPU backend defaults: f16 KV cache, q in f16 for the K dot, V summed in f16 (flash attention), "
      "Q8 activations for quantized weights, rms_norm and rope as ggml-cpu computes them",
      P(F32, F32, F32, F16, GGML, GGML, F32, GGML, GGML) },
    { "llama.cpp-cpu-nofa", "llama.cpp-cpu with flash attention off (what run --engine llama.cpp runs): q and the "
      "attention probabilities converted to f16 for the products with the f16 cache",
      P(F32, F32, F32, F16, GGML, GGML_MM, F32, GGML, GGML) },
    { "llama.cpp-cuda-f16", "llama.cpp CUDA: f16 KV, activations to f16 for cuBLAS with f16 accumulation, Q8_1 activations (MMQ)",
      P(F32, F16, F16, F16, Q8_1, GGML, F32, F32, F64) },
    { "vllm-bf16", "vLLM --dtype bfloat16: activations, matmul inputs and KV cache in bf16",
      P(BF16, BF16, F32, BF16, F32, F32, F32, F32, F64) },
    { "vllm-f16", "vLLM --dtype float16: activations, matmul inputs and KV cache in f16",
      P(F16, F16, F32, F16, F32, F32, F32, F32, F64) },
};
#undef P

/* The preset names, for errors. */
static const char *bt_numerics_presets(void)
{
    return "f32, f16, bf16, llama.cpp-cpu, llama.cpp-cpu-nofa, llama.cpp-cuda-f16, vllm-bf16, vllm-f16";
}

typedef struct part {
    const char *name;
    size_t off;
    int allowed[6];     /* terminated by -1 */
    const char *const *names;   /* the part's own value names (NULL: the format names) */
} part;

static const char *const norm_names[] = { [BT_NUM_NORM_F64] = "f64", [BT_NUM_NORM_F32] = "f32", [BT_NUM_NORM_GGML] = "ggml" };
static const char *const rope_names[] = { [BT_NUM_ROPE_F64] = "f64", [BT_NUM_ROPE_GGML] = "ggml" };

static const part parts[] = {
    { "act", offsetof(bt_numerics, act), { BT_NUM_F32, BT_NUM_F16, BT_NUM_BF16, -1 }, NULL },
    { "mm_in", offsetof(bt_numerics, mm_in), { BT_NUM_F32, BT_NUM_F16, BT_NUM_BF16, -1 }, NULL },
    { "mm_acc", offsetof(bt_numerics, mm_acc), { BT_NUM_F32, BT_NUM_F16, -1 }, NULL },
    { "kv", offsetof(bt_numerics, kv), { BT_NUM_F32, BT_NUM_F16, BT_NUM_BF16, BT_NUM_Q8_0, BT_NUM_F8_E4M3, -1 }, NULL },
    { "act_q", offsetof(bt_numerics, act_q), { BT_NUM_F32, BT_NUM_Q8_0, BT_NUM_Q8_1, BT_NUM_GGML, -1 }, NULL },
    { "attn", offsetof(bt_numerics, attn), { BT_NUM_F32, BT_NUM_GGML, BT_NUM_GGML_MM, -1 }, NULL },
    { "softmax", offsetof(bt_numerics, softmax), { BT_NUM_F32, BT_NUM_F16, -1 }, NULL },
    { "norm", offsetof(bt_numerics, norm), { BT_NUM_NORM_F64, BT_NUM_NORM_F32, BT_NUM_NORM_GGML, -1 }, norm_names },
    { "rope", offsetof(bt_numerics, rope), { BT_NUM_ROPE_F64, BT_NUM_ROPE_GGML, -1 }, rope_names },
    { "state", offsetof(bt_numerics, state), { BT_NUM_F32, BT_NUM_F16, BT_NUM_BF16, -1 }, NULL },
};

static const char *const fmt_names[] = {
    [BT_NUM_F32] = "f32", [BT_NUM_F16] = "f16", [BT_NUM_BF16] = "bf16", [BT_NUM_Q8_0] = "q8_0",
    [BT_NUM_Q8_1] = "q8_1", [BT_NUM_GGML] = "ggml", [BT_NUM_F64] = "f64", [BT_NUM_GGML_MM] = "ggml-mm",
    [BT_NUM_F8_E4M3] = "f8_e4m3",
};

static const char *fmt_name(const part *p, int v)
{
    if (p->names) return p->names[v];
    if (v == BT_NUM_F32 && !strcmp(p->name, "act_q")) return "none";
    return v >= 0 && v < (int)BT_ARRAY_SIZE(fmt_names) ? fmt_names[v] : "?";
}

static int fmt_parse(const part *p, const char *v, size_t len)
{
    for (int i = 0; p->allowed[i] >= 0; i++) {
        const char *nm = fmt_name(p, p->allowed[i]);
        if (strlen(nm) == len && !strncmp(nm, v, len)) return p->allowed[i];
    }
    if (!strcmp(p->name, "act_q") && len == 3 && !strncmp(v, "f32", 3)) return BT_NUM_F32;
    return -1;
}

static void allowed_list(const part *p, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; p->allowed[i] >= 0 && o < cap; i++)
        o += snprintf(buf + o, cap - o, "%s%s", i ? "|" : "", fmt_name(p, p->allowed[i]));
}

int bt_numerics_parse(const char *spec, bt_numerics *out)
{
    memset(out, 0, sizeof(*out));
    if (!spec || !*spec) return bt_error(BT_EINVAL, "--numerics needs a profile: a preset (%s) or parts like act=f16,kv=f16", bt_numerics_presets());
    const char *s = spec;
    bool first = true;
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (len == 0) return bt_error(BT_EINVAL, "--numerics '%s': empty part", spec);
        if (!eq) {
            size_t i;
            for (i = 0; i < BT_ARRAY_SIZE(presets); i++)
                if (strlen(presets[i].name) == len && !strncmp(presets[i].name, s, len)) break;
            if (i == BT_ARRAY_SIZE(presets))
                return bt_error(BT_EINVAL, "--numerics: unknown preset '%.*s' (presets: %s; or parts like act=f16,kv=f16)",
                                (int)len, s, bt_numerics_presets());
            if (!first) return bt_error(BT_EINVAL, "--numerics '%s': the preset must come first, the parts after it", spec);
            *out = presets[i].n;
            snprintf(out->preset, sizeof(out->preset), "%s", presets[i].name);
        } else {
            size_t klen = (size_t)(eq - s), i;
            for (i = 0; i < BT_ARRAY_SIZE(parts); i++)
                if (strlen(parts[i].name) == klen && !strncmp(parts[i].name, s, klen)) break;
            if (i == BT_ARRAY_SIZE(parts))
                return bt_error(BT_EINVAL, "--numerics: unknown part '%.*s' (parts: act, mm_in, mm_acc, kv, act_q, attn, softmax, norm, rope, state)", (int)klen, s);
            int v = fmt_parse(&parts[i], eq + 1, len - klen - 1);
            if (v < 0) {
                char al[64];
                allowed_list(&parts[i], al, sizeof(al));
                return bt_error(BT_EINVAL, "--numerics: %s=%.*s is not one of %s", parts[i].name, (int)(len - klen - 1), eq + 1, al);
            }
            *(int *)((char *)out + parts[i].off) = v;
        }
        first = false;
        s += len;
        if (*s == ',') {
            s++;
            if (!*s) return bt_error(BT_EINVAL, "--numerics '%s': empty part", spec);
        }
    }
    if (out->kv == BT_NUM_F8_E4M3 && out->attn != BT_NUM_F32)
        return bt_error(BT_EINVAL, "--numerics: kv=f8_e4m3 with attn=%s: llama.cpp has no fp8 KV cache to emulate; "
                        "give attn=f32", out->attn == BT_NUM_GGML ? "ggml" : "ggml-mm");
    return BT_OK;
}

/* Every part's exact value is 0 (f32, none, or the engine's own f64). */
bool bt_numerics_is_exact(const bt_numerics *n)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(parts); i++)
        if (*(const int *)((const char *)n + parts[i].off) != 0) return false;
    return true;
}

void bt_numerics_format(const bt_numerics *n, char *buf, size_t cap)
{
    if (bt_numerics_is_exact(n)) { snprintf(buf, cap, "f32"); return; }
    size_t o = 0;
    buf[0] = 0;
    if (n->preset[0]) o += snprintf(buf, cap, "%s: ", n->preset);
    for (size_t i = 0; i < BT_ARRAY_SIZE(parts) && o < cap; i++) {
        int v = *(const int *)((const char *)n + parts[i].off);
        /* state= only where it is set: it applies to hybrid models alone,
         * and every profile's spelling stays what it was before it */
        if (!v && !strcmp(parts[i].name, "state")) continue;
        o += snprintf(buf + o, cap - o, "%s%s=%s", i ? "," : "", parts[i].name, fmt_name(&parts[i], v));
    }
}

/* ---- engine hooks ---- */

struct bt_numerics_ctx {
    bt_numerics n;
    bt_pool *pool;
    float *xbuf;        /* converted matmul input */
    size_t xcap;
    float *wrow;        /* (threads, cols) dequantized weight rows for f16 accumulation */
    size_t wcap;
    float *attn_scratch;   /* (threads, cache cells) scores for attn=ggml-mm */
    size_t scap;
};

int bt_numerics_ctx_new(const bt_numerics *n, bt_pool *pool, bt_numerics_ctx **out)
{
    *out = NULL;
    if (!n || bt_numerics_is_exact(n)) return BT_OK;
    bt_numerics_ctx *c = calloc(1, sizeof(*c));
    if (!c) return bt_error(BT_ENOMEM, "out of memory");
    c->n = *n;
    c->pool = pool;
    *out = c;
    return BT_OK;
}

int bt_numerics_ctx_use(bt_numerics_ctx **c, const bt_numerics *n, bt_pool *pool)
{
    if (!*c && !(*c = calloc(1, sizeof(**c)))) return bt_error(BT_ENOMEM, "out of memory");
    (*c)->n = *n;
    (*c)->pool = pool;
    return BT_OK;
}

void bt_numerics_ctx_free(bt_numerics_ctx *c)
{
    if (!c) return;
    free(c->xbuf);
    free(c->wrow);
    free(c->attn_scratch);
    free(c);
}

void bt_numerics_store(bt_numerics_ctx *c, int op, float *x, size_t n)
{
    if (!c || c->n.act == BT_NUM_F32) return;
    bt_num_round(c->n.act, x, n);
}

void bt_numerics_kv(bt_numerics_ctx *c, float *rows, int T, int kv_dim)
{
    if (!c || c->n.kv == BT_NUM_F32) return;
    /* q8_0 blocks run along each row, as ggml's set_rows quantizes a row */
    for (int t = 0; t < T; t++) bt_num_round(c->n.kv, rows + (size_t)t * kv_dim, (size_t)kv_dim);
}

static bool is_quant(int type) { return type != BT_DT_F32 && type != BT_DT_F16 && type != BT_DT_BF16; }

/* What a weight type's product does to its input under the profile. */
static int input_fmt(const bt_numerics *n, int type)
{
    if (is_quant(type)) {
        if (n->act_q != BT_NUM_GGML) return n->act_q == BT_NUM_F32 ? n->mm_in : n->act_q;
        /* llama.cpp CPU vec_dot_type: q8_0 for q4_0/q5_0/q8_0/mxfp4, q8_1
         * for q4_1/q5_1; k-quants use q8_K (not emulated: left f32). */
        switch (type) {
        case BT_DT_Q4_0: case BT_DT_Q5_0: case BT_DT_Q8_0: case BT_DT_MXFP4: return BT_NUM_Q8_0;
        case BT_DT_Q4_1: case BT_DT_Q5_1: return BT_NUM_Q8_1;
        default: return n->mm_in;
        }
    }
    if (n->act_q == BT_NUM_GGML) {   /* ggml converts the input to the weight's own float type */
        if (type == BT_DT_F16) return BT_NUM_F16;
        if (type == BT_DT_BF16) return BT_NUM_BF16;
    }
    return n->mm_in;
}

typedef struct acc16_job {
    bt_numerics_ctx *c;
    int type;
    const void *W;
    int64_t rows, cols;
    const float *x;
    int T;
    float *out;
} acc16_job;

/* f16 accumulation: each running sum rounded to f16 after every multiply-add,
 * as an f16 GEMM (compute type 16F) keeps it. */
static void acc16_worker(void *arg, int ith, int nth)
{
    acc16_job *j = arg;
    float *w = j->c->wrow + (size_t)ith * j->cols;
    size_t rs = bt_dtype_row_size(j->type, j->cols);
    for (int64_t r = ith; r < j->rows; r += nth) {
        bt_dequant_row(j->type, (const char *)j->W + r * rs, w, j->cols);
        for (int64_t i = 0; i < j->cols; i++) w[i] = bt_num_round_f16(w[i]);
        for (int t = 0; t < j->T; t++) {
            const float *x = j->x + (size_t)t * j->cols;
            float acc = 0;
            for (int64_t i = 0; i < j->cols; i++) acc = bt_num_round_f16(fmaf(w[i], x[i], acc));
            j->out[(size_t)t * j->rows + r] = acc;
        }
    }
}

bool bt_numerics_mm_acc16(const bt_numerics *n, int type) { return n->mm_acc == BT_NUM_F16 && !is_quant(type); }

bool bt_numerics_mm_plain(const bt_numerics *n, int type)
{
    return input_fmt(n, type) == BT_NUM_F32 && !bt_numerics_mm_acc16(n, type);
}

void bt_numerics_mm_input(const bt_numerics *n, int type, int64_t cols, float *x, size_t count)
{
    int fmt = input_fmt(n, type);
    if (fmt == BT_NUM_Q8_0 || fmt == BT_NUM_Q8_1) {
        if (cols % 32 == 0) bt_num_round(fmt, x, count);
    } else bt_num_round(fmt, x, count);
}

void bt_numerics_matmul(bt_numerics_ctx *c, bt_pool *p, int type, const void *W, int64_t rows, int64_t cols,
                        const float *x, int T, float *out)
{
    if (!c || bt_numerics_mm_plain(&c->n, type)) { bt_matmul(p, type, W, rows, cols, x, T, out); return; }
    bool acc16 = bt_numerics_mm_acc16(&c->n, type);
    size_t n = (size_t)T * cols;
    if (n > c->xcap) {
        float *nb = realloc(c->xbuf, n * sizeof(float));
        if (!nb) BT_ASSERT(!"out of memory converting matmul input");
        c->xbuf = nb;
        c->xcap = n;
    }
    memcpy(c->xbuf, x, n * sizeof(float));
    bt_numerics_mm_input(&c->n, type, cols, c->xbuf, n);
    if (!acc16) { bt_matmul(p, type, W, rows, cols, c->xbuf, T, out); return; }
    int nth = p ? bt_pool_threads(p) : 1;
    size_t need = (size_t)nth * cols;
    if (need > c->wcap) {
        float *nw = realloc(c->wrow, need * sizeof(float));
        if (!nw) BT_ASSERT(!"out of memory for f16 accumulation");
        c->wrow = nw;
        c->wcap = need;
    }
    acc16_job j = { .c = c, .type = type, .W = W, .rows = rows, .cols = cols, .x = c->xbuf, .T = T, .out = out };
    if (p) bt_pool_run(p, acc16_worker, &j);
    else acc16_worker(&j, 0, 1);
}

bool bt_numerics_norm_custom(const bt_numerics_ctx *c) { return c && c->n.norm != BT_NUM_NORM_F64; }
bool bt_numerics_norm_custom_n(const bt_numerics *n) { return n && n->norm != BT_NUM_NORM_F64; }

/* f32: the squares summed in f32, in order; scale 1/sqrtf(mean + eps) in
 * f32. ggml: ggml-cpu's ggml_compute_forward_rms_norm_f32: each square
 * rounded to f32, summed in double (ggml_float), the mean rounded to f32,
 * scale = 1.0f/sqrtf(mean + eps) in f32. Both then y = x * scale * w, as
 * the engine (and ggml's rms_norm followed by its mul) does. */
void bt_numerics_rmsnorm(const bt_numerics_ctx *c, float *out, const float *x, const float *w, int T, int n, float eps)
{
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * n;
        float *o = out + (size_t)t * n, scale;
        if (c->n.norm == BT_NUM_NORM_GGML) {
            double sum = 0;
            for (int i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
            float mean = (float)(sum / n);
            scale = 1.0f / sqrtf(mean + eps);
        } else {
            float sum = 0;
            for (int i = 0; i < n; i++) sum += xr[i] * xr[i];
            scale = 1.0f / sqrtf(sum / (float)n + eps);
        }
        for (int i = 0; i < n; i++) o[i] = xr[i] * scale * w[i];
    }
}

/* f64: angle = pos * base^(-2i/head_dim) in double, then cos and sin in
 * double (the engine's own table). ggml: ggml-cpu's ggml_rope_cache_init
 * for a plain (non-YaRN) rope: theta starts at (float)pos and is multiplied
 * by theta_scale = powf(base, -2.0f/head_dim) once per pair, in f32; cos
 * and sin are cosf and sinf of it. The f32 recurrence drifts with the
 * position, so the two tables part from the first few hundred positions. */
void bt_numerics_rope_table(const bt_numerics *n, float base, int head_dim, float freq_scale, const float *freq_factors,
                            int ctx_len, float *cos_t, float *sin_t)
{
    int half = head_dim / 2;
    bool ggml = n && n->rope == BT_NUM_ROPE_GGML;
    float theta_scale = powf(base, -2.0f / (float)head_dim);
    for (int pos = 0; pos < ctx_len; pos++) {
        float theta_base = (float)pos;
        for (int i = 0; i < half; i++) {
            size_t k = (size_t)pos * half + i;
            float ff = freq_factors ? freq_factors[i] : 1.0f;
            if (ggml) {   /* ggml's rope_yarn with ext_factor 0 */
                float theta = freq_scale * (theta_base / ff);
                cos_t[k] = cosf(theta);
                sin_t[k] = sinf(theta);
                theta_base *= theta_scale;
            } else {
                double freq = pow((double)base, -2.0 * (double)i / head_dim) * (double)freq_scale / ff;
                cos_t[k] = (float)cos(pos * freq);
                sin_t[k] = (float)sin(pos * freq);
            }
        }
    }
}

bool bt_numerics_attn_custom(const bt_numerics_ctx *c) { return c && bt_numerics_attn_custom_n(&c->n); }
bool bt_numerics_attn_custom_n(const bt_numerics *n) { return n && (n->attn != BT_NUM_F32 || n->softmax != BT_NUM_F32); }

typedef struct attn_job {
    bt_numerics_ctx *c;
    const bt_numerics_attn *a;
} attn_job;

#define ATTN_MAX_HD BT_NUMERICS_MAX_HEAD_DIM

/* attn=ggml-mm: llama.cpp CPU attention without flash attention (the
 * graph's mul_mat -> soft_max -> mul_mat, llama_context's flash_attn_type
 * disabled): kq = mul_mat(K cache, q) converts q to the K cache's
 * vec_dot_type (f16 for an f16 cache) and sums the products (exact in f32
 * for two f16 values) in f32 lanes; soft_max_ext scales by 1/sqrt(hd),
 * takes expf(s - max), sums those in double and multiplies each by
 * (float)(1/sum); kqv = mul_mat(V cache, kq) converts the probabilities to
 * f16 (the V cache's vec_dot_type) before the product. Sums of products are
 * taken in double here: ggml's SIMD lane order is not emulated. */
static void attn_mm(attn_job *j, int ith, int nth)
{
    const bt_numerics_attn *a = j->a;
    const bt_numerics *n = &j->c->n;
    int hd = a->hd, kv_dim = a->n_kv_heads * hd, q_dim = a->n_heads * hd, group = a->n_heads / a->n_kv_heads;
    int cfmt = n->kv == BT_NUM_Q8_0 ? (hd % 32 == 0 ? BT_NUM_Q8_0 : BT_NUM_F32) : n->kv;
    float scale = 1.0f / sqrtf((float)hd);
    float qv[ATTN_MAX_HD];
    float *p = j->c->attn_scratch + (size_t)ith * (a->pos0 + a->T);
    int items = a->T * a->n_heads;
    for (int it = ith; it < items; it += nth) {
        int t = it / a->n_heads, h = it % a->n_heads, pos = a->pos0 + t, kvh = h / group;
        memcpy(qv, a->q + (size_t)t * q_dim + h * hd, hd * sizeof(float));
        bt_num_round(cfmt, qv, hd);
        float mx = -INFINITY;
        for (int c = 0; c <= pos; c++) {
            const float *k = a->kc + (size_t)c * kv_dim + kvh * hd;
            double sum = 0;
            for (int i = 0; i < hd; i++) sum += (double)(qv[i] * k[i]);
            p[c] = (float)sum * scale;
            if (n->softmax == BT_NUM_F16) p[c] = bt_num_round_f16(p[c]);
            mx = fmaxf(mx, p[c]);
        }
        double se = 0;
        for (int c = 0; c <= pos; c++) se += (double)(p[c] = expf(p[c] - mx));
        float inv = (float)(1.0 / se);
        for (int c = 0; c <= pos; c++) p[c] *= inv;
        bt_num_round(n->kv == BT_NUM_Q8_0 ? BT_NUM_F32 : n->kv, p, (size_t)pos + 1);   /* V's vec_dot_type */
        if (n->softmax == BT_NUM_F16) bt_num_round(BT_NUM_F16, p, (size_t)pos + 1);
        float *o = a->ctx + (size_t)t * q_dim + h * hd;
        for (int i = 0; i < hd; i++) {
            double sum = 0;
            for (int c = 0; c <= pos; c++) sum += (double)(p[c] * a->vc[(size_t)c * kv_dim + kvh * hd + i]);
            o[i] = (float)sum;
        }
    }
}

/* One (position, head) per item. With attn=ggml this is ggml-cpu's
 * ggml_compute_forward_flash_attn_ext_f16_one_chunk (the path a decode step
 * and a prompt under 64 tokens take): q converted to the K cache's
 * vec_dot_type (f16 for an f16 cache, q8_0 for q8_0), the K dot summed in
 * double (ggml_vec_dot_f16's scalar path: exact for head_dim < 32), an
 * online softmax with expf, and the V accumulator kept in f16 when V is f16
 * (ggml_vec_mad_f16 / ggml_vec_scale_f16 round every update). A prompt of
 * 64 or more tokens takes the tiled path: q stays f32 and V sums in f32. */
static void attn_worker(void *arg, int ith, int nth)
{
    attn_job *j = arg;
    const bt_numerics_attn *a = j->a;
    const bt_numerics *n = &j->c->n;
    int hd = a->hd, kv_dim = a->n_kv_heads * hd, q_dim = a->n_heads * hd, group = a->n_heads / a->n_kv_heads;
    if (n->attn == BT_NUM_GGML_MM) { attn_mm(j, ith, nth); return; }
    bool ggml = n->attn == BT_NUM_GGML;
    bool tiled = ggml && a->T >= 64;
    int qfmt = ggml && !tiled ? (n->kv == BT_NUM_Q8_0 ? BT_NUM_Q8_0 : n->kv) : BT_NUM_F32;
    bool v16 = ggml && !tiled && n->kv == BT_NUM_F16;
    float scale = 1.0f / sqrtf((float)hd);
    float qv[ATTN_MAX_HD], acc[ATTN_MAX_HD];
    int items = a->T * a->n_heads;
    for (int it = ith; it < items; it += nth) {
        int t = it / a->n_heads, h = it % a->n_heads, pos = a->pos0 + t, kvh = h / group;
        memcpy(qv, a->q + (size_t)t * q_dim + h * hd, hd * sizeof(float));
        if (qfmt == BT_NUM_Q8_0) { if (hd % 32 == 0) bt_num_round(qfmt, qv, hd); }
        else bt_num_round(qfmt, qv, hd);
        memset(acc, 0, hd * sizeof(float));
        float M = -INFINITY, S = 0;
        for (int p = 0; p <= pos; p++) {
            const float *k = a->kc + (size_t)p * kv_dim + kvh * hd;
            const float *v = a->vc + (size_t)p * kv_dim + kvh * hd;
            float s;
            if (ggml) {
                double sum = 0;
                for (int i = 0; i < hd; i++) sum += (double)(qv[i] * k[i]);
                s = (float)sum * scale;
            } else s = bt_vec_dot(BT_DT_F32, k, qv, hd) * scale;
            if (n->softmax == BT_NUM_F16) s = bt_num_round_f16(s);
            float ms = 1.0f, vs = 1.0f, Mold = M;
            if (s > M) {
                M = s;
                ms = expf(Mold - M);
                for (int i = 0; i < hd; i++) acc[i] = v16 ? bt_num_round_f16(acc[i] * ms) : acc[i] * ms;
            } else vs = expf(s - M);
            if (n->softmax == BT_NUM_F16) vs = bt_num_round_f16(vs);
            for (int i = 0; i < hd; i++) acc[i] = v16 ? bt_num_round_f16(fmaf(v[i], vs, acc[i])) : fmaf(v[i], vs, acc[i]);
            S = fmaf(S, ms, vs);
        }
        float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = a->ctx + (size_t)t * q_dim + h * hd;
        for (int i = 0; i < hd; i++) o[i] = acc[i] * inv;
    }
}

void bt_numerics_attention(bt_numerics_ctx *c, const bt_numerics_attn *a)
{
    size_t need = (size_t)(c->pool ? bt_pool_threads(c->pool) : 1) * (size_t)(a->pos0 + a->T);
    if (c->n.attn == BT_NUM_GGML_MM && need > c->scap) {
        float *nb = realloc(c->attn_scratch, need * sizeof(float));
        if (!nb) BT_ASSERT(!"out of memory for attention scores");
        c->attn_scratch = nb;
        c->scap = need;
    }
    attn_job j = { .c = c, .a = a };
    if (c->pool) bt_pool_run(c->pool, attn_worker, &j);
    else attn_worker(&j, 0, 1);
}
