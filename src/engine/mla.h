/* mla.h - multi-head latent attention (deepseek2), the host half.
 *
 * Conventions are llama.cpp's deepseek2 graph with the absorbed k/v
 * up-projections (its MLA path): a token caches one latent row,
 * [rmsnorm(kv_a[0:kv_lora]); rope(kv_a[kv_lora:])] (kv_lora + rope_dim
 * floats, shared by every head). Head h's query is [q_nope_h; q_pe_h]
 * (nope + rope_dim); its absorbed form [W_k,h^T q_nope_h; rope(q_pe_h)]
 * scores the cached rows directly, scaled by kq_scale; the softmax-weighted
 * sum of the rows' latent parts (kv_lora) is brought up to a value head by
 * W_v,h. Both layouts of the up-projections (fused attn_kv_b, split
 * attn_k_b / attn_v_b) are the same two matrices per head, read through
 * strides (bt_mla_w).
 *
 * RoPE is NORM (pairs 2i, 2i+1) over the rope_dim trailing dims of a head
 * with YaRN: theta = interp * (1 - ramp) + extrap * ramp, the ramp between
 * ggml's correction dims, and cos/sin times the rope's magnitude
 * yarn_attn_factor * (1 + 0.1 ln(1/freq_scale)) when YaRN is on. These run
 * on the host over the engine's buffers (a backend with host memory: the
 * CPU); a device backend refuses the architecture. */
#ifndef BT_MLA_H
#define BT_MLA_H

#include <stddef.h>
#include "model/model.h"

/* Head h's up-projections as f32 with strides: W_k,h[r][d] (r < kv_lora,
 * d < nope) at k[h*kh + r*kr + d*kd]; W_v,h[j][r] (j < v_dim) at
 * v[h*vh + j*vj + r*vr]. */
typedef struct bt_mla_w {
    const float *k, *v;
    size_t kh, kr, kd, vh, vj, vr;
    /* the split layout's rows as the file stores them (a quantized type):
     * W_k,h row r at kq + (h*kv_lora + r) * krow, W_v,h row j at
     * vq + (h*v_dim + j) * vrow, each dotted by the kernels (bt_vec_dot),
     * as a matmul reads a row; NULL: the f32 data above */
    const uint8_t *kq, *vq;
    int qtype;
    size_t krow, vrow;
} bt_mla_w;

/* The strides of a layer's weights (f32 data: k from wk_b or wkv_b, v from
 * wv_b or wkv_b, as the config's layout says). */
void bt_mla_w_init(const bt_config *c, const float *k, const float *v, bt_mla_w *w);

/* cos/sin tables (ctx_len, rope_dim/2), the magnitude folded in. */
void bt_mla_rope_table(const bt_config *c, int ctx_len, float *cos_, float *sin_);
/* The score scale: mscale^2 / sqrt(head_dim), mscale as llama.cpp's graph. */
float bt_mla_kq_scale(const bt_config *c);

/* Rotate n rows (stride floats apart) in place: per row `heads` groups of
 * `hstride` floats, each rotated at [off, off + rope_dim), row t at
 * position pos0 + t. */
void bt_mla_rope(const bt_config *c, float *x, int n, size_t stride, int heads, size_t hstride, size_t off, int pos0,
                 const float *cos_, const float *sin_);

/* Where the per-(row, head) work of the three below runs: for(ctx, n, fn,
 * arg) calls fn(arg, i, ith) for every i < n, ith < nth the runner's thread
 * (its scratch); each i's result is its own, so the bits do not depend on
 * the runner. NULL: in turn, on this thread. */
typedef struct bt_mla_runner {
    void (*for_each)(void *ctx, int n, void (*fn)(void *arg, int i, int ith), void *arg);
    void *ctx;
} bt_mla_runner;

/* The absorbed queries of T rows: q (T, n_heads*head_dim, roped) into
 * qabs (T, n_heads*(kv_lora + rope_dim)). */
void bt_mla_absorb(const bt_config *c, const bt_mla_w *w, const float *q, int T, float *qabs, const bt_mla_runner *run);

/* Causal attention of T absorbed query rows at pos0.. over the cached
 * latent rows 0..pos (cache: (ctx, kv_lora + rope_dim)): ctxl (T,
 * n_heads*kv_lora). scores: scratch of ld floats (>= pos0 + T) for each of
 * the runner's threads. */
void bt_mla_attend(const bt_config *c, const float *qabs, const float *cache, int T, int pos0, float kq_scale,
                   float *scores, size_t ld, float *ctxl, const bt_mla_runner *run);

/* ctx (T, n_heads*v_dim) = W_v,h ctxl_h per head. */
void bt_mla_up_v(const bt_config *c, const bt_mla_w *w, const float *ctxl, int T, float *ctx, const bt_mla_runner *run);

#endif
