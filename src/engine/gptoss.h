/* gptoss.h - the parts of gpt-oss's forward (llama.cpp's "gpt-oss",
 * src/models/openai-moe.cpp) that are not engine plumbing: YaRN rope
 * tables and the constants of its clamped SwiGLU. The rest is in engine.c:
 * the sinks and the sliding window go to the backend's attention_sinks, the
 * biases are add_row, the routing is moe.c's bt_moe_route_topk_softmax. */
#ifndef BT_GPTOSS_H
#define BT_GPTOSS_H

#include "model/model.h"

/* swiglu_oai's constants (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE) */
#define BT_GPTOSS_SWIGLU_ALPHA 1.702f
#define BT_GPTOSS_SWIGLU_LIMIT 7.0f

/* YaRN rope tables (ctx_len, head_dim/2) for a config with rope_yarn, as
 * ggml's rope_ext computes them with llama.cpp's context parameters
 * (ext_factor 1, beta_fast 32, beta_slow 1, n_ctx_orig yarn_orig_ctx):
 * pair i's angle mixes the interpolated pos*freq_scale*theta_i and the
 * extrapolated pos*theta_i by a ramp over the correction dims (rounded
 * outwards as ggml does, unless yarn_truncate is false: an HF folder's
 * truncate: false, as transformers computes it), and cos/sin
 * carry the magnitude scale attn_factor * (1 + 0.1 ln(1/freq_scale)), where
 * llama.cpp's attn_factor is mscale(factor) / (1 + 0.1 ln(factor)) times
 * rope.scaling.attn_factor (1 in float arithmetic, kept as computed).
 * Angles in double, as the engine's other tables. */
void bt_gptoss_rope_table(const bt_config *c, int ctx_len, float *cos_, float *sin_);

#endif
