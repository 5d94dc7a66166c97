/* numerics.h - numerics profiles: emulate what another engine stores and
 * converts (half-precision activations, an f16 KV cache, f16 matmul inputs,
 * Q8 activations) on top of the exact f32 engine, so an overflow or a
 * divergence that only half precision causes can be reproduced and traced.
 *
 * A profile is plain data (bt_numerics). The engine never runs these
 * functions itself: it hands the profile to the backend's numerics ops
 * (backend_impl.h, ABI 3: num_round on every op's output right before its
 * tap and on the rows it appends to the KV cache, num_matmul, num_rmsnorm,
 * num_attention), and the CPU backend implements them with the hooks below
 * (bt_numerics_store / _kv are bt_num_round of the act / kv format). A
 * backend without an op gets the generic fallback of src/backend/backend.c,
 * which runs these same functions on host copies (read, compute, set).
 * Storage is emulated in place: an f32 buffer holding only values the
 * narrower type can represent (rounded exactly as the hardware conversion
 * does), so the engine's layout never changes. The exact profile (every part
 * f32) makes every hook a no-op: bit-identical to running without one.
 *
 * The pure conversions are exported for tests and for other backends
 * (doc/numerics.md says what each emulates and what it does not). */
#ifndef BT_NUMERICS_H
#define BT_NUMERICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/cpu/kernels.h"

enum bt_num_fmt { BT_NUM_F32 = 0, BT_NUM_F16, BT_NUM_BF16, BT_NUM_Q8_0, BT_NUM_Q8_1, BT_NUM_GGML, BT_NUM_F64, BT_NUM_GGML_MM,
                  BT_NUM_F8_E4M3 };

/* The norm and rope parts have their own values; 0 is what the engine does
 * without a profile, so a zeroed bt_numerics is the exact profile. */
enum bt_num_norm { BT_NUM_NORM_F64 = 0, BT_NUM_NORM_F32, BT_NUM_NORM_GGML };
enum bt_num_rope { BT_NUM_ROPE_F64 = 0, BT_NUM_ROPE_GGML };

typedef struct bt_numerics {
    int act;        /* op outputs stored as: f32 | f16 | bf16 */
    int mm_in;      /* matmul inputs converted to: f32 | f16 | bf16 (unquantized activations) */
    int mm_acc;     /* matmul accumulation: f32 | f16 */
    int kv;         /* KV cache stored as: f32 | f16 | bf16 | q8_0 | f8_e4m3 (an MLA latent cache: f32 | f16 | bf16 | f8_e4m3) */
    int act_q;      /* activations for quantized weights: f32 (none) | q8_0 | q8_1 | ggml (llama.cpp CPU vec_dot_type) */
    int attn;       /* attention: f32 (exact) | ggml (llama.cpp CPU flash attention: q in the cache dtype, V summed in f16)
                     * | ggml-mm (llama.cpp CPU without flash attention: q and the probabilities in the cache dtype) */
    int softmax;    /* attention probabilities: f32 | f16 */
    int norm;       /* rmsnorm: BT_NUM_NORM_F64 (0, the engine's own: squares and sum in double) | _F32 | _GGML */
    int rope;       /* rope angles: BT_NUM_ROPE_F64 (0, the engine's own table, in double) | _GGML */
    int state;      /* hybrid models' recurrent and conv states stored between forwards as: f32 | f16 | bf16 */
    char preset[32];   /* the preset it started from ("" for none) */
} bt_numerics;

/* Parse "PRESET", "part=v,part=v" or "PRESET,part=v" (parts override the
 * preset). BT_EINVAL with a one-line message naming the bad part. */
int bt_numerics_parse(const char *spec, bt_numerics *out);
/* Canonical spelling: "f32" for the exact profile, else every part
 * ("llama.cpp-cpu: act=f32,mm_in=f32,..."). */
void bt_numerics_format(const bt_numerics *n, char *buf, size_t cap);
bool bt_numerics_is_exact(const bt_numerics *n);

/* ---- pure conversions (bit-exact; tests/test_numerics.c) ---- */
/* f32 -> float8 e4m3fn (4 exponent bits, bias 7, 3 mantissa bits, no Inf;
 * the format of vLLM's and SGLang's fp8 KV caches, here with scale 1, their
 * default without calibrated scales) -> f32: round to nearest even,
 * subnormals down to 2^-9 kept, saturating: a value past 448 (the largest)
 * or an Inf becomes +-448, a NaN stays NaN, as torch's .to(float8_e4m3fn)
 * converts on the CPU and CUDA's __NV_SATFINITE conversion does. */
float bt_num_round_f8_e4m3(float x);
/* f32 -> f16 round-to-nearest-even, overflow to +-Inf, subnormals kept,
 * NaN quieted with its payload's top bits (F16C vcvtps2ph imm 0, CUDA
 * cvt.rn.f16.f32, numpy astype(float16)). */
uint16_t bt_num_f32_to_f16(float x);
float bt_num_round_f16(float x);
/* f32 -> bf16 round-to-nearest-even, subnormals kept, NaN quieted
 * (PyTorch / CUDA __float2bfloat16_rn). */
uint16_t bt_num_f32_to_bf16(float x);
float bt_num_round_bf16(float x);
/* Round n values in place to fmt (f32: no-op; f16, bf16; q8_0 and q8_1:
 * quantize and dequantize each block of 32 as llama.cpp's x86 SIMD
 * quantize_row_q8_0/q8_1 do; n must be a multiple of 32 for those). */
void bt_num_round(int fmt, float *x, size_t n);
/* One block of 32 as llama.cpp quantizes it: *d gets the f16 scale bits,
 * q the int8 values (q8_1 and q8_0 store the same d and q; q8_1 adds s). */
void bt_num_quantize_q8_block(const float *x, uint16_t *d, int8_t q[32]);

/* ---- engine hooks ---- */
typedef struct bt_numerics_ctx bt_numerics_ctx;
/* NULL *out for the exact profile (the engine then skips every hook). */
int bt_numerics_ctx_new(const bt_numerics *n, bt_pool *pool, bt_numerics_ctx **out);
void bt_numerics_ctx_free(bt_numerics_ctx *c);
/* A context for profile n (even the exact one) with pool: *c is made when
 * NULL, else its profile and pool replaced and its scratch kept (a backend
 * keeps one for every profile its engines hand it). */
int bt_numerics_ctx_use(bt_numerics_ctx **c, const bt_numerics *n, bt_pool *pool);
/* Store op's output (n values) as the profile's activation dtype. */
void bt_numerics_store(bt_numerics_ctx *c, int op, float *x, size_t n);
/* Store T appended KV-cache rows of width kv_dim as the cache dtype. */
void bt_numerics_kv(bt_numerics_ctx *c, float *rows, int T, int kv_dim);
/* bt_matmul with the profile's input conversion / activation quantization
 * (and f16 accumulation). c NULL: bt_matmul. */
void bt_numerics_matmul(bt_numerics_ctx *c, bt_pool *p, int type, const void *W, int64_t rows, int64_t cols,
                        const float *x, int T, float *out);
/* The parts of bt_numerics_matmul, for a backend that runs its own product:
 * _plain: the profile leaves a product with a weight of `type` alone (a
 * plain bt_matmul on the unconverted input); _acc16: it accumulates in f16
 * (not a conversion of the input: it needs its own kernel); _input: convert
 * count values of input (rows of cols) in place as bt_numerics_matmul does
 * before the product. */
bool bt_numerics_mm_plain(const bt_numerics *n, int type);
bool bt_numerics_mm_acc16(const bt_numerics *n, int type);
void bt_numerics_mm_input(const bt_numerics *n, int type, int64_t cols, float *x, size_t count);
/* rmsnorm of T rows of width n (out = x / rms(x) * w) with the profile's
 * accumulation, when bt_numerics_norm_custom says the profile changes it. */
bool bt_numerics_norm_custom(const bt_numerics_ctx *c);
bool bt_numerics_norm_custom_n(const bt_numerics *n);   /* the same of a profile (NULL: false) */
void bt_numerics_rmsnorm(const bt_numerics_ctx *c, float *out, const float *x, const float *w, int T, int n, float eps);
/* The rope cos/sin tables, (ctx_len, head_dim/2) each, as the profile n
 * computes them (n NULL or rope=f64: in double, the engine's own): angle
 * pos * freq_scale * base^(-2i/head_dim) / freq_factors[i] (ggml's rope_ext
 * with ext_factor 0; freq_factors NULL: all 1, else head_dim/2 values). */
void bt_numerics_rope_table(const bt_numerics *n, float base, int head_dim, float freq_scale, const float *freq_factors,
                            int ctx_len, float *cos_t, float *sin_t);
/* Attention over the cache when the profile changes how it is computed
 * (heads of up to BT_NUMERICS_MAX_HEAD_DIM values; the engine refuses more). */
#define BT_NUMERICS_MAX_HEAD_DIM 512
bool bt_numerics_attn_custom(const bt_numerics_ctx *c);
bool bt_numerics_attn_custom_n(const bt_numerics *n);   /* the same of a profile (NULL: false) */
typedef struct bt_numerics_attn {
    const float *q;          /* (T, n_heads*hd) */
    const float *kc, *vc;    /* this layer's cache: (ctx_len, kv_dim) */
    float *ctx;              /* (T, n_heads*hd) out */
    int T, pos0, n_heads, n_kv_heads, hd;
} bt_numerics_attn;
void bt_numerics_attention(bt_numerics_ctx *c, const bt_numerics_attn *a);

#endif
