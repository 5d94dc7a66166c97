/* moe.h - mixture-of-experts routing, the host half of the MoE FFN.
 *
 * The router's logits are n_expert floats per token (a matmul on the
 * backend, tapped as blk.L.ffn_gate_inp); choosing the experts is a few
 * dozen floats per token, so it runs on the host, where the engine needs the
 * choice anyway to pick the expert slabs and the trace records it. The
 * expert FFNs themselves run on the backend (engine.c, moe_ffn).
 *
 * Conventions are llama.cpp's build_moe_ffn with softmax gating (llama /
 * Mixtral, qwen3moe): probabilities = softmax(logits) in f32 with the max
 * subtracted; the k largest probabilities in descending order, ties to the
 * lower expert index (what ggml's argsort gives: std::sort over <= 16
 * experts is an insertion sort, hence stable; above that the C++ library
 * leaves ties unspecified, and random weights never tie); weights = those
 * probabilities, divided by their sum clamped below at 6.103515625e-5 when
 * norm is set, then times scale when scale is not 1. */
#ifndef BT_MOE_H
#define BT_MOE_H

#include <stdbool.h>

/* The largest k the engine supports (experts used per token). */
#define BT_MOE_MAX_USED 64

/* Route one token. logits and probs: n_expert floats (probs is scratch and
 * holds the softmax afterwards); experts/weights: k entries, best first.
 * A NaN probability ranks below every number (so a broken router still
 * names k valid experts) and its NaN flows into the weights. */
void bt_moe_route(const float *logits, int n_expert, int k, bool norm, float scale, float *probs,
                  int *experts, float *weights);

/* deepseek2's router (llama.cpp's build_moe_ffn with its gating options):
 * probs = softmax(logits) or sigmoid(logits); the choice ranks probs +
 * bias (exp_probs_b, NULL: none); with n_group > 1 the experts are n_group
 * consecutive groups, each scored by the sum of its two best biased probs,
 * and only the topk_group best groups compete; weights are the unbiased
 * probs of the chosen, normalised (norm, clamped as above), then times
 * scale (0 or 1: none). probs: 2 * n_expert floats of scratch. */
typedef struct bt_moe_gate {
    bool sigmoid;
    const float *bias;
    int n_group, topk_group;
    bool norm;
    float scale;
} bt_moe_gate;
void bt_moe_route_gate(const float *logits, int n_expert, int k, const bt_moe_gate *g, float *probs, int *experts,
                       float *weights);
/* gpt-oss's routing (llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT):
 * the k largest logits, ranked as above (NaN last, ties to the lower index);
 * weights = softmax over those k logits (f32, their max subtracted). */
void bt_moe_route_topk_softmax(const float *logits, int n_expert, int k, int *experts, float *weights);

#endif
