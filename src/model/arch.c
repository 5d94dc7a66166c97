/* arch.c - the architecture descriptors (see arch.h).
 *
 * Tensor names and shapes follow llama.cpp's loaders (src/models/<arch>.cpp
 * of the pinned version): a tensor llama.cpp creates TENSOR_NOT_REQUIRED is
 * optional here, and one it does not create at all is absent here, so the
 * loader refuses it as unused. */
#include "model/arch.h"
#include "model/model.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

#define W(f) offsetof(bt_layer_weights, f)
#define E BT_DIM_EMBD
#define Q BT_DIM_Q
#define KV BT_DIM_KV
#define HD BT_DIM_HEAD
#define FF BT_DIM_FF
#define NX BT_DIM_EXPERT
#define XF BT_DIM_EXPERT_FF

/* The attention block's weights, shared by every architecture. q/k/v biases
 * are optional everywhere (llama.cpp's create_tensor_qkv); qwen2's
 * descriptor makes them required. */
#define ATTN(bias_opt) \
    { "attn_norm.weight", W(attn_norm), { E }, false }, \
    { "attn_q.weight", W(wq), { E, Q }, false }, \
    { "attn_k.weight", W(wk), { E, KV }, false }, \
    { "attn_v.weight", W(wv), { E, KV }, false }, \
    { "attn_output.weight", W(wo), { Q, E }, false }, \
    { "attn_q.bias", W(bq), { Q }, bias_opt }, \
    { "attn_k.bias", W(bk), { KV }, bias_opt }, \
    { "attn_v.bias", W(bv), { KV }, bias_opt }
#define QK_NORM \
    { "attn_q_norm.weight", W(attn_q_norm), { HD }, false }, \
    { "attn_k_norm.weight", W(attn_k_norm), { HD }, false }
#define DENSE_FFN \
    { "ffn_norm.weight", W(ffn_norm), { E }, false }, \
    { "ffn_gate.weight", W(w_gate), { E, FF }, false }, \
    { "ffn_up.weight", W(w_up), { E, FF }, false }, \
    { "ffn_down.weight", W(w_down), { FF, E }, false }

static const bt_arch_tensor llama_layer[] = {
    ATTN(true),
    { "attn_output.bias", W(bo), { E }, true },
    DENSE_FFN,
};
static const bt_arch_tensor qwen2_layer[] = { ATTN(false), DENSE_FFN };
static const bt_arch_tensor qwen3_layer[] = { ATTN(true), QK_NORM, DENSE_FFN };
static const bt_arch_tensor qwen3moe_layer[] = {
    ATTN(true), QK_NORM,
    { "ffn_norm.weight", W(ffn_norm), { E }, false },
    { "ffn_gate_inp.weight", W(ffn_gate_inp), { E, NX }, false },
    { "ffn_gate_exps.weight", W(ffn_gate_exps), { E, XF, NX }, false },
    { "ffn_up_exps.weight", W(ffn_up_exps), { E, XF, NX }, false },
    { "ffn_down_exps.weight", W(ffn_down_exps), { XF, E, NX }, false },
    /* a shared expert run on every token (qwen2moe's layout; Qwen3-MoE
     * checkpoints have none): optional, computed when present */
    { "ffn_gate_inp_shexp.weight", W(ffn_gate_inp_shexp), { E }, true },
    { "ffn_gate_shexp.weight", W(ffn_gate_shexp), { E, BT_DIM_SHARED_FF }, true },
    { "ffn_up_shexp.weight", W(ffn_up_shexp), { E, BT_DIM_SHARED_FF }, true },
    { "ffn_down_shexp.weight", W(ffn_down_shexp), { BT_DIM_SHARED_FF, E }, true },
};

/* The rows the qwen35 family's layers share: a gated delta net layer's
 * projections, conv, gates, norm and output (qwen3next binds ssm_ba in place
 * of ssm_beta and ssm_alpha), and a full-attention layer's gated q, k, v,
 * output and q/k norms. */
#define QWEN35_GDN \
    { "attn_qkv.weight", W(ssm_qkv), { E, BT_DIM_SSM_CONV }, false }, \
    { "attn_gate.weight", W(ssm_z), { E, BT_DIM_SSM_V }, false }, \
    { "ssm_conv1d.weight", W(ssm_conv1d), { BT_DIM_SSM_KERNEL, BT_DIM_SSM_CONV }, false }, \
    { "ssm_dt.bias", W(ssm_dt), { BT_DIM_SSM_NV }, false }, \
    { "ssm_a", W(ssm_a), { BT_DIM_SSM_NV }, false }, \
    { "ssm_beta.weight", W(ssm_beta_w), { E, BT_DIM_SSM_NV }, false }, \
    { "ssm_alpha.weight", W(ssm_alpha), { E, BT_DIM_SSM_NV }, false }, \
    { "ssm_norm.weight", W(ssm_norm_w), { BT_DIM_SSM_HEAD }, false }, \
    { "ssm_out.weight", W(ssm_out_w), { BT_DIM_SSM_V, E }, false }
#define QWEN35_ATTN \
    { "attn_q.weight", W(wq), { E, BT_DIM_Q2 }, false }, \
    { "attn_k.weight", W(wk), { E, KV }, false }, \
    { "attn_v.weight", W(wv), { E, KV }, false }, \
    { "attn_output.weight", W(wo), { Q, E }, false }, \
    QK_NORM

/* qwen35 (Qwen3.5 dense, llama.cpp's src/models/qwen35.cpp): full-attention
 * layers with the doubled (gated) q projection, q/k norms and the
 * post-attention norm (bound as ffn_norm); gated delta net layers. */
static const bt_arch_tensor qwen35_layer[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    QWEN35_ATTN,
    { "post_attention_norm.weight", W(ffn_norm), { E }, false },
    { "ffn_gate.weight", W(w_gate), { E, FF }, false },
    { "ffn_up.weight", W(w_up), { E, FF }, false },
    { "ffn_down.weight", W(w_down), { FF, E }, false },
};
static const bt_arch_tensor qwen35_recr[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    QWEN35_GDN,
    { "post_attention_norm.weight", W(ffn_norm), { E }, false },
    { "ffn_gate.weight", W(w_gate), { E, FF }, false },
    { "ffn_up.weight", W(w_up), { E, FF }, false },
    { "ffn_down.weight", W(w_down), { FF, E }, false },
};

/* qwen35moe: the same two layer kinds with qwen3moe's experts and the
 * sigmoid-gated shared expert (ffn_gate_inp_shexp) in place of the FFN */
#define QWEN35_MOE_FFN \
    { "post_attention_norm.weight", W(ffn_norm), { E }, false }, \
    { "ffn_gate_inp.weight", W(ffn_gate_inp), { E, NX }, false }, \
    { "ffn_gate_exps.weight", W(ffn_gate_exps), { E, XF, NX }, false }, \
    { "ffn_up_exps.weight", W(ffn_up_exps), { E, XF, NX }, false }, \
    { "ffn_down_exps.weight", W(ffn_down_exps), { XF, E, NX }, false }, \
    { "ffn_gate_inp_shexp.weight", W(ffn_gate_inp_shexp), { E }, true }, \
    { "ffn_gate_shexp.weight", W(ffn_gate_shexp), { E, BT_DIM_SHARED_FF }, true }, \
    { "ffn_up_shexp.weight", W(ffn_up_shexp), { E, BT_DIM_SHARED_FF }, true }, \
    { "ffn_down_shexp.weight", W(ffn_down_shexp), { BT_DIM_SHARED_FF, E }, true }
static const bt_arch_tensor qwen35moe_layer[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    QWEN35_ATTN,
    QWEN35_MOE_FFN,
};
static const bt_arch_tensor qwen35moe_recr[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    QWEN35_GDN,
    QWEN35_MOE_FFN,
};

/* qwen3next (src/models/qwen3next.cpp): qwen35moe's layers with beta and
 * alpha in one ssm_ba projection (bound to ssm_beta_w, 2*n_v rows) */
static const bt_arch_tensor qwen3next_recr[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    { "attn_qkv.weight", W(ssm_qkv), { E, BT_DIM_SSM_CONV }, false },
    { "attn_gate.weight", W(ssm_z), { E, BT_DIM_SSM_V }, false },
    { "ssm_conv1d.weight", W(ssm_conv1d), { BT_DIM_SSM_KERNEL, BT_DIM_SSM_CONV }, false },
    { "ssm_dt.bias", W(ssm_dt), { BT_DIM_SSM_NV }, false },
    { "ssm_a", W(ssm_a), { BT_DIM_SSM_NV }, false },
    { "ssm_ba.weight", W(ssm_beta_w), { E, BT_DIM_SSM_NV2 }, false },
    { "ssm_norm.weight", W(ssm_norm_w), { BT_DIM_SSM_HEAD }, false },
    { "ssm_out.weight", W(ssm_out_w), { BT_DIM_SSM_V, E }, false },
    QWEN35_MOE_FFN,
};

/* deepseek2 (src/models/deepseek2.cpp): multi-head latent attention and
 * leading dense layers, then MoE layers with shared experts. Every variant
 * is optional here; which must be present (q low-rank path or attn_q, the
 * fused attn_kv_b or split attn_k_b/attn_v_b, dense or MoE FFN by layer)
 * the loader checks per layer (model.c, check_mla_layers). */
static const bt_arch_tensor deepseek2_layer[] = {
    { "attn_norm.weight", W(attn_norm), { E }, false },
    { "attn_q_a.weight", W(wq_a), { E, BT_DIM_Q_LORA }, true },
    { "attn_q_a_norm.weight", W(attn_q_a_norm), { BT_DIM_Q_LORA }, true },
    { "attn_q_b.weight", W(wq_b), { BT_DIM_Q_LORA, Q }, true },
    { "attn_q.weight", W(wq), { E, Q }, true },
    { "attn_kv_a_mqa.weight", W(wkv_a), { E, BT_DIM_KV_A }, false },
    { "attn_kv_a_norm.weight", W(attn_kv_a_norm), { BT_DIM_KV_LORA }, false },
    { "attn_kv_b.weight", W(wkv_b), { BT_DIM_KV_LORA, BT_DIM_MLA_KVB }, true },
    { "attn_k_b.weight", W(wk_b), { BT_DIM_MLA_NOPE, BT_DIM_KV_LORA, BT_DIM_HEADS }, true },
    { "attn_v_b.weight", W(wv_b), { BT_DIM_KV_LORA, BT_DIM_MLA_V, BT_DIM_HEADS }, true },
    { "attn_output.weight", W(wo), { BT_DIM_MLA_O, E }, false },
    { "ffn_norm.weight", W(ffn_norm), { E }, false },
    { "ffn_gate.weight", W(w_gate), { E, FF }, true },
    { "ffn_up.weight", W(w_up), { E, FF }, true },
    { "ffn_down.weight", W(w_down), { FF, E }, true },
    { "ffn_gate_inp.weight", W(ffn_gate_inp), { E, NX }, true },
    { "exp_probs_b.bias", W(ffn_exp_probs_b), { NX }, true },
    { "ffn_gate_exps.weight", W(ffn_gate_exps), { E, XF, NX }, true },
    { "ffn_up_exps.weight", W(ffn_up_exps), { E, XF, NX }, true },
    { "ffn_down_exps.weight", W(ffn_down_exps), { XF, E, NX }, true },
    { "ffn_gate_shexp.weight", W(ffn_gate_shexp), { E, BT_DIM_SHARED_FF }, true },
    { "ffn_up_shexp.weight", W(ffn_up_shexp), { E, BT_DIM_SHARED_FF }, true },
    { "ffn_down_shexp.weight", W(ffn_down_shexp), { BT_DIM_SHARED_FF, E }, true },
};
/* gpt-oss (src/models/openai-moe.cpp): q/k/v/output biases, per-head sink
 * logits, the post-attention norm (bound as ffn_norm), experts with biases
 * and a router bias; no dense FFN, no shared expert */
static const bt_arch_tensor gptoss_layer[] = {
    ATTN(true),
    { "attn_output.bias", W(bo), { E }, false },
    { "attn_sinks.weight", W(attn_sinks), { BT_DIM_HEADS }, false },
    { "post_attention_norm.weight", W(ffn_norm), { E }, false },
    { "ffn_gate_inp.weight", W(ffn_gate_inp), { E, NX }, false },
    { "ffn_gate_inp.bias", W(ffn_gate_inp_b), { NX }, false },
    { "ffn_gate_exps.weight", W(ffn_gate_exps), { E, XF, NX }, false },
    { "ffn_up_exps.weight", W(ffn_up_exps), { E, XF, NX }, false },
    { "ffn_down_exps.weight", W(ffn_down_exps), { XF, E, NX }, false },
    { "ffn_gate_exps.bias", W(ffn_gate_exps_b), { XF, NX }, false },
    { "ffn_up_exps.bias", W(ffn_up_exps_b), { XF, NX }, false },
    { "ffn_down_exps.bias", W(ffn_down_exps_b), { E, NX }, false },
};

#define TABLE(t) t, (int)BT_ARRAY_SIZE(t)

static const bt_arch archs[] = {
    { .name = "llama", .rope_kind = BT_ROPE_NORM, .flags = BT_ARCH_TIED | BT_ARCH_ROPE_FREQS,
      .layer = TABLE(llama_layer) },
    /* llama.cpp's converter writes Mistral 7B as "llama"; "mistral" files
     * (other writers) have the same layout under their own key prefix. */
    { .name = "mistral", .rope_kind = BT_ROPE_NORM, .flags = BT_ARCH_TIED | BT_ARCH_ROPE_FREQS,
      .layer = TABLE(llama_layer) },
    { .name = "qwen2", .rope_kind = BT_ROPE_NEOX, .flags = BT_ARCH_TIED | BT_ARCH_QKV_BIAS,
      .layer = TABLE(qwen2_layer) },
    { .name = "qwen3", .rope_kind = BT_ROPE_NEOX, .flags = BT_ARCH_TIED | BT_ARCH_QK_NORM,
      .layer = TABLE(qwen3_layer) },
    { .name = "qwen3moe", .rope_kind = BT_ROPE_NEOX, .flags = BT_ARCH_TIED | BT_ARCH_QK_NORM | BT_ARCH_MOE,
      .norm_topk_prob = true, .layer = TABLE(qwen3moe_layer) },
    /* the rope is imrope with sections; for text all section positions are
     * the token's (the fourth, 0, rotates nothing): NEOX pairs over
     * rope.dimension_count dims (partial rope) */
    { .name = "qwen35", .rope_kind = BT_ROPE_NEOX,
      .flags = BT_ARCH_TIED | BT_ARCH_QK_NORM | BT_ARCH_HYBRID | BT_ARCH_ATTN_GATE,
      .layer = TABLE(qwen35_layer), .recr = TABLE(qwen35_recr) },
    { .name = "qwen35moe", .rope_kind = BT_ROPE_NEOX,
      .flags = BT_ARCH_TIED | BT_ARCH_QK_NORM | BT_ARCH_HYBRID | BT_ARCH_ATTN_GATE | BT_ARCH_MOE | BT_ARCH_SHARED_EXP,
      .norm_topk_prob = true, .layer = TABLE(qwen35moe_layer), .recr = TABLE(qwen35moe_recr) },
    /* NEOX rope over rope.dimension_count dims, no sections */
    { .name = "qwen3next", .rope_kind = BT_ROPE_NEOX,
      .flags = BT_ARCH_TIED | BT_ARCH_QK_NORM | BT_ARCH_HYBRID | BT_ARCH_ATTN_GATE | BT_ARCH_MOE | BT_ARCH_SHARED_EXP |
               BT_ARCH_SSM_BA,
      .norm_topk_prob = true, .layer = TABLE(qwen35moe_layer), .recr = TABLE(qwen3next_recr) },
    /* NORM rope over the rope.dimension_count trailing dims of each head */
    { .name = "deepseek2", .rope_kind = BT_ROPE_NORM,
      .flags = BT_ARCH_TIED | BT_ARCH_MOE | BT_ARCH_SHARED_EXP | BT_ARCH_MLA, .layer = TABLE(deepseek2_layer) },
    /* NEOX rope (YaRN scaling from the file), sliding window on the even
     * layers (pattern 2) */
    { .name = "gpt-oss", .rope_kind = BT_ROPE_NEOX,
      .flags = BT_ARCH_MOE | BT_ARCH_SINKS | BT_ARCH_OAI_MOE, .layer = TABLE(gptoss_layer) },
    { .name = "granite", .rope_kind = BT_ROPE_NORM, .flags = BT_ARCH_TIED | BT_ARCH_SCALES,
      .layer = TABLE(llama_layer),
      .refuse = "its embedding, residual, attention and logit scales are not applied yet, "
                "and computing it without them gives wrong logits" },
};

const bt_arch *bt_arch_find(const char *name)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(archs); i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *bt_arch_names(void)
{
    static char buf[256];
    if (!buf[0]) {
        size_t len = 0;
        for (size_t i = 0; i < BT_ARRAY_SIZE(archs); i++) {
            if (archs[i].refuse) continue;
            len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", len ? ", " : "", archs[i].name);
        }
    }
    return buf;
}

const char *bt_rope_kind_name(int kind) { return kind == BT_ROPE_NEOX ? "neox" : "norm"; }

int64_t bt_arch_dim(const bt_config *c, int dim)
{
    switch (dim) {
    case BT_DIM_EMBD: return c->dim;
    case BT_DIM_Q: return (int64_t)c->n_heads * c->head_dim;
    case BT_DIM_KV: return (int64_t)c->n_kv_heads * c->head_dim;
    case BT_DIM_HEAD: return c->head_dim;
    case BT_DIM_FF: return c->hidden_dim;
    case BT_DIM_VOCAB: return c->n_vocab;
    case BT_DIM_ROPE_HALF: return c->rope_dim / 2;
    case BT_DIM_EXPERT: return c->n_expert;
    case BT_DIM_EXPERT_FF: return c->expert_ff_len;
    case BT_DIM_SHARED_FF: return c->shared_ff_len;
    case BT_DIM_Q2: return (int64_t)2 * c->n_heads * c->head_dim;
    case BT_DIM_SSM_CONV: return (int64_t)2 * c->ssm_n_k * c->ssm_head_k + (int64_t)c->ssm_n_v * c->ssm_head_v;
    case BT_DIM_SSM_K: return (int64_t)c->ssm_n_k * c->ssm_head_k;
    case BT_DIM_SSM_V: return (int64_t)c->ssm_n_v * c->ssm_head_v;
    case BT_DIM_SSM_NV: return c->ssm_n_v;
    case BT_DIM_SSM_HEAD: return c->ssm_head_v;
    case BT_DIM_SSM_KERNEL: return c->ssm_kernel;
    case BT_DIM_SSM_NV2: return (int64_t)2 * c->ssm_n_v;
    case BT_DIM_Q_LORA: return c->q_lora_rank;
    case BT_DIM_KV_LORA: return c->kv_lora_rank;
    case BT_DIM_KV_A: return (int64_t)c->kv_lora_rank + c->rope_dim;
    case BT_DIM_MLA_NOPE: return (int64_t)c->head_dim - c->rope_dim;
    case BT_DIM_MLA_V: return c->mla_v_dim;
    case BT_DIM_MLA_KVB: return (int64_t)c->n_heads * (c->head_dim - c->rope_dim + c->mla_v_dim);
    case BT_DIM_MLA_O: return (int64_t)c->n_heads * c->mla_v_dim;
    case BT_DIM_HEADS: return c->n_heads;
    case BT_DIM_MLA_QABS: return (int64_t)c->n_heads * (c->kv_lora_rank + c->rope_dim);
    case BT_DIM_MLA_CTXL: return (int64_t)c->n_heads * c->kv_lora_rank;
    default: return 1;
    }
}
