/* arch.h - architectures as data: one descriptor per GGUF
 * general.architecture.
 *
 * A descriptor says which hyperparameter keys the loader reads (suffixes of
 * "<arch>."), how RoPE rotates (interleaved pairs or NEOX halves), which
 * per-architecture features the forward pass applies (flags), and which
 * tensors a layer holds (name after "blk.L.", shape in symbolic dimensions,
 * optional or not, and the bt_layer_weights field it binds). The loader,
 * the injector, inspect, bench and the oracle read the tables; the engine
 * picks its forward blocks from the flags. Adding an architecture is one
 * descriptor here plus any new forward block in src/engine/engine.c.
 *
 * Only standard GGUF keys and tensor names (llama.cpp's llama-arch.cpp and
 * convert_hf_to_gguf.py) appear here, so any source that presents itself
 * as a GGUF (the Hugging Face folder loader) gets every architecture.
 *
 * Invariant: a tensor of the file that no table entry binds is refused at
 * load (a weight we would silently ignore computes a different model). */
#ifndef BT_ARCH_H
#define BT_ARCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

struct bt_config;

/* How RoPE pairs dimensions within a head (ggml's rope modes). */
enum bt_rope_kind {
    BT_ROPE_NORM = 0,  /* pairs (2i, 2i+1): llama/mistral (GGUF q/k rows permuted
                        * by the converter so this matches HF rotate-half) */
    BT_ROPE_NEOX = 1,  /* pairs (i, i + rope_dim/2): qwen2, qwen3, qwen3moe */
};

/* Architecture flags: features the forward pass applies. */
enum bt_arch_flag {
    BT_ARCH_QKV_BIAS   = 1u << 0,  /* attn_q/k/v carry a bias (qwen2); optional elsewhere */
    BT_ARCH_QK_NORM    = 1u << 1,  /* per-head rmsnorm of q and k before RoPE (qwen3) */
    BT_ARCH_MOE        = 1u << 2,  /* the FFN is a mixture of experts (router + experts) */
    BT_ARCH_TIED       = 1u << 3,  /* output.weight may be absent: logits use token_embd */
    BT_ARCH_SCALES     = 1u << 4,  /* embedding/residual/attention/logit scales (granite) */
    BT_ARCH_ROPE_FREQS = 1u << 5,  /* rope_freqs.weight (Llama 3 scaling) is accepted */
    BT_ARCH_SHARED_EXP = 1u << 6,  /* MoE with a shared expert (ffn_*_shexp) */
    BT_ARCH_HYBRID     = 1u << 7,  /* gated delta net (linear attention) layers beside full
                                    * attention ones (qwen35): which layer is which comes from
                                    * the file (bt_layer_recurrent) */
    BT_ARCH_SSM_BA     = 1u << 9,  /* qwen3next: beta and alpha from one fused ssm_ba
                                    * projection (per key head [b, a]), and value heads grouped
                                    * by key head (value head h reads key head h / (n_v/n_k)) */
    BT_ARCH_ATTN_GATE  = 1u << 8,  /* the q projection is doubled: per head the query, then an
                                    * output gate (attn_ctx * sigmoid(gate)) (qwen35) */
    BT_ARCH_MLA        = 1u << 12, /* deepseek2: multi-head latent attention (engine/mla.c), a
                                    * latent KV cache, leading dense layers before the MoE ones */
    /* gpt-oss (llama.cpp's src/models/openai-moe.cpp; the forward's parts in engine/gptoss.c) */
    BT_ARCH_SINKS      = 1u << 10, /* a learned logit per head (attn_sinks) joins each softmax's
                                    * denominator; the layers of the sliding-window pattern
                                    * (bt_layer_swa) attend to the last sliding_window keys only */
    BT_ARCH_OAI_MOE    = 1u << 11, /* experts with biases, the clamped SwiGLU (swiglu_oai), a
                                    * router bias and softmax over the chosen experts' logits */
};

/* Symbolic dimensions of tensor shapes and op widths, resolved against a
 * bt_config by bt_arch_dim(). */
enum bt_dim {
    BT_DIM_NONE = 0,   /* the axis does not exist (1) */
    BT_DIM_EMBD,       /* dim: embedding_length */
    BT_DIM_Q,          /* n_heads * head_dim */
    BT_DIM_KV,         /* n_kv_heads * head_dim */
    BT_DIM_HEAD,       /* head_dim */
    BT_DIM_FF,         /* hidden_dim: feed_forward_length */
    BT_DIM_VOCAB,      /* n_vocab */
    BT_DIM_ROPE_HALF,  /* rope_dim / 2 (rope_freqs) */
    BT_DIM_EXPERT,     /* n_expert */
    BT_DIM_EXPERT_FF,  /* expert_ff_len: expert_feed_forward_length */
    BT_DIM_SHARED_FF,  /* shared_ff_len: expert_shared_feed_forward_length */
    BT_DIM_Q2,         /* 2 * n_heads * head_dim: the gated q projection (query + gate) */
    BT_DIM_SSM_CONV,   /* gated delta net conv channels: 2 * n_k_heads * head_k + n_v_heads * head_v */
    BT_DIM_SSM_K,      /* n_k_heads * head_k */
    BT_DIM_SSM_V,      /* n_v_heads * head_v (ssm.inner_size) */
    BT_DIM_SSM_NV,     /* n_v_heads (ssm.time_step_rank) */
    BT_DIM_SSM_HEAD,   /* head_v: the state's width */
    BT_DIM_SSM_KERNEL, /* ssm.conv_kernel */
    BT_DIM_SSM_NV2,    /* 2 * n_v_heads: the fused ssm_ba projection (qwen3next) */
    /* multi-head latent attention (BT_ARCH_MLA; head_dim is a query/key head: nope + rope dims) */
    BT_DIM_Q_LORA,     /* attention.q_lora_rank */
    BT_DIM_KV_LORA,    /* attention.kv_lora_rank */
    BT_DIM_KV_A,       /* kv_lora_rank + rope_dim: the latent a token caches */
    BT_DIM_MLA_NOPE,   /* head_dim - rope_dim: a key head's unrotated part */
    BT_DIM_MLA_V,      /* mla_v_dim: a value head */
    BT_DIM_MLA_KVB,    /* n_heads * (nope + mla_v_dim): the fused attn_kv_b's rows */
    BT_DIM_MLA_O,      /* n_heads * mla_v_dim: attn_output's input */
    BT_DIM_HEADS,      /* n_heads (attn_k_b / attn_v_b slabs; attn_sinks: one logit per query head) */
    BT_DIM_MLA_QABS,   /* n_heads * (kv_lora_rank + rope_dim): the absorbed query */
    BT_DIM_MLA_CTXL,   /* n_heads * kv_lora_rank: attention's output in the latent */
    BT_DIM_COUNT
};
int64_t bt_arch_dim(const struct bt_config *c, int dim);

/* One tensor of a layer: "blk.L.<name>" with shape ne = {ne0 (contiguous),
 * ne1, ne2} in bt_dim units. field is the offsetof() of its bt_weight in
 * bt_layer_weights. A 3-D tensor is n_expert slabs (expert e = slab e). */
typedef struct bt_arch_tensor {
    const char *name;      /* "attn_q.weight" */
    size_t field;          /* offsetof(bt_layer_weights, ...) */
    uint8_t ne[3];         /* bt_dim */
    bool optional;
} bt_arch_tensor;

typedef struct bt_arch {
    const char *name;            /* general.architecture */
    int rope_kind;               /* bt_rope_kind */
    unsigned flags;              /* bt_arch_flag */
    bool norm_topk_prob;         /* MoE: renormalise the top-k router weights when
                                  * the file has no <arch>.expert_weights_norm */
    const char *refuse;          /* non-NULL: known but refused, with this reason */
    const bt_arch_tensor *layer; /* per-layer tensor table (a hybrid's full-attention layers) */
    int n_layer;
    const bt_arch_tensor *recr;  /* BT_ARCH_HYBRID: the table of its recurrent layers */
    int n_recr;
} bt_arch;

/* The descriptor of general.architecture `name`, or NULL if unknown. */
const bt_arch *bt_arch_find(const char *name);
/* "llama, mistral, qwen2, qwen3": the accepted names, for error messages. */
const char *bt_arch_names(void);
const char *bt_rope_kind_name(int kind);   /* "norm", "neox" */

/* Global (non-layer) tensors every architecture reads: token_embd.weight
 * (embd, vocab), output_norm.weight (embd), output.weight (embd, vocab;
 * optional with BT_ARCH_TIED), rope_freqs.weight (rope_half; optional with
 * BT_ARCH_ROPE_FREQS). */

/* Hyperparameter keys the loader reads, as "<arch>." suffixes (required
 * first, then optional). Listed here once so the HF loader can present the
 * same keys. */
#define BT_ARCH_KEYS_REQUIRED "embedding_length", "feed_forward_length", "block_count", "attention.head_count"
#define BT_ARCH_KEYS_OPTIONAL "attention.head_count_kv", "context_length", "attention.layer_norm_rms_epsilon", \
    "rope.freq_base", "attention.key_length", "attention.value_length", "rope.dimension_count", "vocab_size", \
    "rope.scaling.type", "rope.scaling.factor", "expert_count", "expert_used_count", \
    "expert_feed_forward_length", "expert_shared_count", "expert_shared_feed_forward_length", \
    "expert_weights_norm", "attention.sliding_window_pattern", "rope.scaling.original_context_length", \
    "rope.scaling.attn_factor"
/* BT_ARCH_HYBRID (qwen35): ssm.conv_kernel, ssm.inner_size, ssm.state_size,
 * ssm.time_step_rank, ssm.group_count (required), rope.dimension_sections,
 * attention.recurrent_layers or full_attention_interval (which layers are
 * recurrent; llama.cpp's default interval is 4), nextn_predict_layers (MTP
 * blocks after the trunk: loaded by llama.cpp, not computed here yet). */
/* BT_ARCH_MLA (deepseek2): attention.q_lora_rank, attention.kv_lora_rank
 * (required), attention.key_length_mla / value_length_mla (present: split
 * attn_k_b/attn_v_b, absent: the fused attn_kv_b), leading_dense_block_count,
 * expert_gating_func (1 softmax, 2 sigmoid), expert_weights_scale,
 * expert_group_count, expert_group_used_count, and YaRN's
 * rope.scaling.original_context_length, yarn_log_multiplier, attn_factor. */
#define BT_ARCH_KEYS_MLA "attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length_mla", \
    "attention.value_length_mla", "leading_dense_block_count", "expert_gating_func", "expert_weights_scale", \
    "expert_group_count", "expert_group_used_count", "rope.scaling.original_context_length", \
    "rope.scaling.yarn_log_multiplier", "rope.scaling.attn_factor"
#define BT_ARCH_KEYS_HYBRID "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", \
    "ssm.group_count", "rope.dimension_sections", "attention.recurrent_layers", "full_attention_interval", \
    "nextn_predict_layers"

#endif
