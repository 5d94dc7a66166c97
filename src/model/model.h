/* model.h - one model, whatever file it came from.
 *
 * Loaders (GGUF, llama2.c) produce a bt_model: hyperparameters read from the
 * file's own metadata, the tokenizer's vocabulary as plain data, and weight
 * views pointing into one read-only mmap. Quantized blocks stay quantized;
 * kernels read them in place. Nothing is copied except the few arrays a
 * loader must build (llama2.c's tokenizer table). */
#ifndef BT_MODEL_H
#define BT_MODEL_H

#include <stdint.h>
#include <stdbool.h>
#include "tokenizer/tokenizer.h"
#include "model/arch.h"

/* bangtrace's own GGUF key (never in a file llama.cpp's converter wrote):
 * an HF folder's YaRN rope_scaling truncate: false (bt_config.yarn_truncate). */
#define BT_YARN_TRUNCATE_KEY "bangtrace.rope.scaling.yarn_truncate"

/* A weight matrix or vector: rows x cols of `type`, rows contiguous. A 3-D
 * tensor (MoE experts) is n_slab slabs of rows / n_slab rows each: expert e
 * starts at row e * (rows / n_slab). data == NULL: an optional tensor the
 * file does not have. */
typedef struct bt_weight {
    const void *data;
    int type;             /* bt_dtype */
    int64_t cols;         /* ne[0]: contiguous length */
    int64_t rows;         /* ne[1] * ne[2] (1 for vectors) */
    int64_t n_slab;       /* ne[2]: 1, or n_expert for expert tensors */
    const char *name;     /* GGUF tensor name ("blk.3.ffn_down.weight") */
} bt_weight;

/* One layer. Which fields are bound is the architecture's tensor table
 * (model/arch.c); unbound optional ones have data == NULL. */
typedef struct bt_layer_weights {
    bt_weight attn_norm;  /* (dim) */
    bt_weight wq;         /* (n_heads*head_dim, dim) */
    bt_weight wk;         /* (n_kv_heads*head_dim, dim) */
    bt_weight wv;         /* (n_kv_heads*head_dim, dim) */
    bt_weight wo;         /* (dim, n_heads*head_dim) */
    bt_weight bq;         /* (n_heads*head_dim) attn_q.bias: qwen2, optional elsewhere */
    bt_weight bk;         /* (n_kv_heads*head_dim) */
    bt_weight bv;         /* (n_kv_heads*head_dim) */
    bt_weight bo;         /* (dim) attn_output.bias: optional (llama) */
    bt_weight attn_q_norm;  /* (head_dim) per-head rmsnorm of q before RoPE: qwen3 */
    bt_weight attn_k_norm;  /* (head_dim) */
    bt_weight ffn_norm;   /* (dim) */
    bt_weight w_gate;     /* (hidden, dim)  w1 */
    bt_weight w_up;       /* (hidden, dim)  w3 */
    bt_weight w_down;     /* (dim, hidden)  w2 */
    /* MoE (BT_ARCH_MOE) */
    bt_weight ffn_gate_inp;   /* (n_expert, dim) router */
    bt_weight ffn_gate_exps;  /* (n_expert, expert_ff, dim): slab e = expert e */
    bt_weight ffn_up_exps;    /* (n_expert, expert_ff, dim) */
    bt_weight ffn_down_exps;  /* (n_expert, dim, expert_ff) */
    bt_weight ffn_gate_inp_shexp; /* (1, dim) shared expert's gate (qwen2moe), optional */
    bt_weight ffn_gate_shexp; /* (shared_ff, dim) shared expert */
    bt_weight ffn_up_shexp;   /* (shared_ff, dim) */
    bt_weight ffn_down_shexp; /* (dim, shared_ff) */
    /* gpt-oss (BT_ARCH_SINKS, BT_ARCH_OAI_MOE) */
    bt_weight attn_sinks;     /* (n_heads) each head's sink logit */
    bt_weight ffn_gate_inp_b; /* (n_expert) router bias */
    bt_weight ffn_gate_exps_b;/* (n_expert, expert_ff) */
    bt_weight ffn_up_exps_b;  /* (n_expert, expert_ff) */
    bt_weight ffn_down_exps_b;/* (n_expert, dim) */
    /* gated delta net (recurrent layers of BT_ARCH_HYBRID); ffn_norm is the
     * file's post_attention_norm there and in the attention layers */
    bt_weight ssm_qkv;    /* attn_qkv (conv_channels, dim): q, k, v before the conv */
    bt_weight ssm_z;      /* attn_gate (n_v*head_v, dim): the output gate z */
    bt_weight ssm_conv1d; /* (conv_channels, kernel): channel c's taps, oldest first */
    bt_weight ssm_dt;     /* ssm_dt.bias (n_v) */
    bt_weight ssm_a;      /* (n_v): -exp(A_log), as the converter writes it */
    bt_weight ssm_beta_w; /* ssm_beta (n_v, dim) */
    bt_weight ssm_alpha;  /* (n_v, dim) */
    bt_weight ssm_norm_w; /* ssm_norm (head_v): the gated rmsnorm's weight */
    bt_weight ssm_out_w;  /* ssm_out (dim, n_v*head_v) */
    /* multi-head latent attention (BT_ARCH_MLA); wq is the direct q
     * projection when q_lora_rank is 0, wo reads n_heads * mla_v_dim */
    bt_weight wq_a;           /* attn_q_a (q_lora, dim) */
    bt_weight attn_q_a_norm;  /* (q_lora) */
    bt_weight wq_b;           /* attn_q_b (n_heads*head_dim, q_lora) */
    bt_weight wkv_a;          /* attn_kv_a_mqa (kv_lora + rope_dim, dim): the latent, then k's rope part */
    bt_weight attn_kv_a_norm; /* (kv_lora) */
    bt_weight wkv_b;          /* attn_kv_b (n_heads*(nope + v), kv_lora): per head k_nope rows, then v rows */
    bt_weight wk_b;           /* attn_k_b (n_heads slabs of (kv_lora, nope)): the fused k part, transposed */
    bt_weight wv_b;           /* attn_v_b (n_heads slabs of (v, kv_lora)) */
    bt_weight ffn_exp_probs_b;/* exp_probs_b.bias (n_expert): the router's selection bias */
} bt_layer_weights;

typedef struct bt_config {
    char arch[32];        /* "llama" */
    char name[128];       /* general.name, or the file's base name */
    int dim;              /* embedding length */
    int hidden_dim;       /* feed-forward length */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;         /* dim / n_heads unless the file says otherwise */
    int n_vocab;
    int ctx_len;          /* trained context length (at most sliding_window) */
    int sliding_window;   /* attention.sliding_window (Mistral): keys further back
                           * are not attended; 0 = none. Within it that is full
                           * attention, which is all the engine computes: it
                           * refuses a longer context. With BT_ARCH_SINKS (gpt-oss)
                           * the window is applied in attention on the layers of
                           * swa (bt_layer_swa) and the context is not bounded by it */
    uint64_t swa[16];     /* bit l: layer l attends within sliding_window only */
    float norm_eps;
    float rope_base;
    int rope_dim;         /* rotated dims per head (== head_dim for Llama) */
    bool tied_output;     /* output shares token_embd */
    /* from the architecture descriptor and the file */
    const bt_arch *desc;  /* NULL for llama2.c checkpoints (llama layout) */
    unsigned flags;       /* bt_arch_flag: the descriptor's, plus QKV_BIAS when
                           * the file carries q/k/v biases */
    int rope_kind;        /* bt_rope_kind */
    float rope_freq_scale;    /* 1 / rope.scaling.factor for linear scaling, else 1 */
    bool has_rope_freqs;      /* rope_freqs.weight divides each pair's frequency
                               * (Llama 3 rope scaling) */
    /* YaRN rope scaling (rope.scaling.type yarn; rope_freq_scale is 1/factor):
     * llama.cpp's defaults, ext_factor 1, beta_fast 32, beta_slow 1. rope_yarn:
     * gpt-oss and the others (engine/gptoss.c), which read yarn_orig_ctx and
     * yarn_attn_factor (the file's attn_factor, 1) below; deepseek2 (MLA) has
     * its own reading (yarn_ext_factor, and yarn_attn_factor the computed
     * attention factor, engine/mla.c) */
    bool rope_yarn;
    /* gpt-oss's YaRN correction range rounded outwards (llama.cpp's rule,
     * and transformers' truncate: true); false for an HF folder whose
     * rope_scaling says truncate: false (the real gpt-oss configs), which
     * transformers and vLLM honour: the range as computed (engine/gptoss.c).
     * From the key bangtrace.rope.scaling.yarn_truncate, which only the HF
     * folder reader writes; absent: true. */
    bool yarn_truncate;
    /* MoE (0 when dense) */
    int n_expert;             /* expert_count */
    int n_expert_used;        /* expert_used_count: top-k */
    int expert_ff_len;        /* expert_feed_forward_length */
    bool norm_topk_prob;      /* renormalise the top-k weights to sum 1 */
    int n_shared_expert;      /* expert_shared_count */
    int shared_ff_len;        /* expert_shared_feed_forward_length */
    /* granite-style scales (BT_ARCH_SCALES); 1 (logit 1) when absent */
    float embd_scale, resid_scale, attn_scale, logit_scale;
    /* hybrid gated delta net models (BT_ARCH_HYBRID; 0 otherwise) */
    int ssm_kernel;           /* ssm.conv_kernel */
    int ssm_head_k, ssm_head_v;   /* ssm.state_size (both: llama.cpp requires them equal) */
    int ssm_n_k, ssm_n_v;     /* ssm.group_count key heads, ssm.time_step_rank value heads */
    int n_nextn;              /* nextn_predict_layers: MTP blocks stored after the trunk */
    int trunk_layers;         /* 0: the trunk is n_layers (a model's config); an MTP
                               * engine's config runs layers up to n_layers = the
                               * trunk's + 1 and says here where its block starts */
    int rope_sections[4];     /* rope.dimension_sections (imrope) */
    /* multi-head latent attention (BT_ARCH_MLA; 0 otherwise): head_dim is a
     * query/key head (nope + rope_dim), rope_dim its rotated tail */
    int q_lora_rank;          /* 0: the direct attn_q projection */
    int kv_lora_rank;
    int mla_v_dim;            /* a value head */
    bool mla_split;           /* attn_k_b/attn_v_b (key_length_mla present), else attn_kv_b */
    int n_dense_lead;         /* leading_dense_block_count: dense FFN layers before the MoE ones */
    int gating;               /* expert_gating_func: 1 softmax (0 reads as 1), 2 sigmoid */
    float expert_scale;       /* expert_weights_scale (0 or 1: none) */
    int n_expert_groups, n_group_used;   /* grouped top-k (0: none) */
    /* YaRN (rope.scaling.type yarn): ext_factor 1 (0 without YaRN), beta 32 / 1 */
    float yarn_ext_factor, yarn_attn_factor, yarn_log_mul, yarn_beta_fast, yarn_beta_slow;
    int yarn_orig_ctx;        /* rope.scaling.original_context_length, else context_length */
    uint64_t recr[16];        /* bit l: layer l is recurrent (from the file) */
} bt_config;

/* Is layer l of a hybrid model a gated delta net (recurrent) layer? */
static inline bool bt_layer_recurrent(const bt_config *c, int l)
{
    return (c->flags & BT_ARCH_HYBRID) && l >= 0 && l < 1024 && ((c->recr[l >> 6] >> (l & 63)) & 1);
}

/* Does layer l attend within the sliding window only (gpt-oss)? */
static inline bool bt_layer_swa(const bt_config *c, int l)
{
    return c->sliding_window > 0 && l >= 0 && l < 1024 && ((c->swa[l >> 6] >> (l & 63)) & 1);
}

/* The MTP (nextn) block of a hybrid model, stored after its trunk as
 * block N = cfg.n_layers: layers[N] holds its full-attention layer (the
 * architecture's attention-layer table); these are the block's own. The
 * block predicts the token after next from (the trunk's output-normed hidden
 * state of position p - 1, the token at p): eh_proj([enorm(embed(x_p));
 * hnorm(h_{p-1})]), the layer, then shared_head_norm (else output_norm) and
 * shared_head_head (else output). */
typedef struct bt_nextn_weights {
    bt_weight eh_proj;           /* (dim, 2*dim) */
    bt_weight enorm, hnorm;      /* (dim) */
    bt_weight shared_head_norm;  /* (dim), optional */
    bt_weight embed_tokens;      /* (n_vocab, dim), optional: token_embd */
    bt_weight shared_head_head;  /* (n_vocab, dim), optional: output */
    const char *missing;         /* NULL: usable; else the first required tensor the file lacks */
} bt_nextn_weights;

/* Is layer l the MTP (nextn) block after the trunk (bt_nextn_weights)? */
static inline bool bt_layer_mtp(const bt_config *c, int l)
{
    return c->n_nextn > 0 && l >= (c->trunk_layers ? c->trunk_layers : c->n_layers);
}

typedef struct bt_model {
    bt_config cfg;
    bt_weight token_embd;        /* (n_vocab, dim) */
    bt_layer_weights *layers;    /* [n_layers + n_nextn]: the trunk, then the MTP block's layer */
    bt_nextn_weights nextn;      /* the MTP block (cfg.n_nextn > 0) */
    bt_weight output_norm;       /* (dim) */
    bt_weight output;            /* (n_vocab, dim); == token_embd when tied */
    bt_weight rope_freqs;        /* (rope_dim/2) frequency divisors, or data NULL */
    bt_vocab vocab;
    bool has_vocab;
    char *chat_template;         /* tokenizer.chat_template, NUL-terminated copy, or NULL */
    char *path;
    char format[16];             /* "gguf" or "llama2c" */
    const uint8_t *file_data;    /* the whole mapping, for hashing */
    uint64_t file_size;
    struct bt_gguf *gguf;        /* GGUF handle (NULL for llama2.c) */
    void *priv;                  /* loader-owned allocations */
} bt_model;

/* Load a model by content: GGUF magic, else a llama2.c checkpoint (which
 * needs tokenizer_path for text; NULL allowed for id-only use). A GGUF with 0
 * tensors loads as vocab-only (n_layers = 0, token_embd.data = NULL).
 * Returns BT_OK or a BT_E* with a message naming the file and the problem. */
int bt_model_load(const char *path, const char *tokenizer_path, bt_model **out);
/* The same over a file already in memory (borrowed: it must outlive the
 * model; 4-byte aligned for a llama2.c checkpoint); name labels messages.
 * A llama2.c checkpoint loads without a vocabulary (see below). */
int bt_model_load_buffer(const void *data, size_t size, const char *name, bt_model **out);
void bt_model_free(bt_model *m);   /* NULL is a no-op */
bool bt_model_has_weights(const bt_model *m);

/* Expert e's matrix of a 3-D expert tensor w (slab e of w->n_slab): a
 * view into the same mapping, rows / n_slab rows. */
bt_weight bt_moe_expert_view(const bt_weight *w, int e);

/* llama2.c loaders (used by bt_model_load). */
int bt_llama2c_load(const char *path, const char *tokenizer_path, bt_model *m);
int bt_llama2c_load_buffer(const void *data, size_t size, const char *name, bt_model *m);
/* data is copied; the model owns the copy. */
int bt_llama2c_tokenizer_load_buffer(const void *data, size_t size, const char *name, int n_vocab, bt_model *m);

#endif
