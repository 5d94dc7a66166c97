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

/* A weight matrix or vector: rows x cols of `type`, rows contiguous. */
typedef struct bt_weight {
    const void *data;
    int type;             /* bt_dtype */
    int64_t cols;         /* ne[0]: contiguous length */
    int64_t rows;         /* ne[1] (1 for vectors) */
    const char *name;     /* GGUF tensor name ("blk.3.ffn_down.weight") */
} bt_weight;

typedef struct bt_layer_weights {
    bt_weight attn_norm;  /* (dim) */
    bt_weight wq;         /* (n_heads*head_dim, dim) */
    bt_weight wk;         /* (n_kv_heads*head_dim, dim) */
    bt_weight wv;         /* (n_kv_heads*head_dim, dim) */
    bt_weight wo;         /* (dim, n_heads*head_dim) */
    bt_weight ffn_norm;   /* (dim) */
    bt_weight w_gate;     /* (hidden, dim)  w1 */
    bt_weight w_up;       /* (hidden, dim)  w3 */
    bt_weight w_down;     /* (dim, hidden)  w2 */
    /* Mixture of experts (cfg.n_expert > 0; then w_gate/w_up/w_down are
     * unused). The expert tensors are GGUF 3-D tensors [cols, rows, n_expert]:
     * expert e's matrix is the contiguous slab of rows [e*R, (e+1)*R), so a
     * view of one expert is data + e * R * row_size (bt_moe_expert_view). */
    bt_weight ffn_gate_inp;       /* (n_expert, dim) router */
    bt_weight ffn_gate_exps;      /* (n_expert * expert_hidden, dim) */
    bt_weight ffn_up_exps;        /* (n_expert * expert_hidden, dim) */
    bt_weight ffn_down_exps;      /* (n_expert * dim, expert_hidden) */
    /* shared expert (optional; data NULL when absent), run on every token */
    bt_weight ffn_gate_inp_shexp; /* (1, dim): sigmoid gate of the shared expert, optional */
    bt_weight ffn_gate_shexp;     /* (shexp_hidden, dim) */
    bt_weight ffn_up_shexp;       /* (shexp_hidden, dim) */
    bt_weight ffn_down_shexp;     /* (dim, shexp_hidden) */
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
    int ctx_len;          /* trained context length */
    float norm_eps;
    float rope_base;
    int rope_dim;         /* rotated dims per head (== head_dim for Llama) */
    bool tied_output;     /* output shares token_embd */
    /* Mixture of experts: 0 experts is a dense FFN. Routing (llama.cpp's
     * build_moe_ffn with softmax gating): softmax over the router logits,
     * the n_expert_used largest probabilities, renormalised to sum 1 when
     * moe_norm_w, times moe_w_scale. */
    int n_expert;         /* <arch>.expert_count */
    int n_expert_used;    /* <arch>.expert_used_count */
    int expert_hidden_dim;/* rows of one expert's gate/up (<arch>.expert_feed_forward_length) */
    int shexp_hidden_dim; /* shared expert's hidden size, 0 when there is none */
    bool moe_norm_w;      /* renormalise the top-k weights (norm_topk_prob) */
    float moe_w_scale;    /* expert weight scale (1 unless the file says) */
} bt_config;

typedef struct bt_model {
    bt_config cfg;
    bt_weight token_embd;        /* (n_vocab, dim) */
    bt_layer_weights *layers;    /* [n_layers] */
    bt_weight output_norm;       /* (dim) */
    bt_weight output;            /* (n_vocab, dim); == token_embd when tied */
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

/* Bind layer l's MoE tensors (router, expert slabs, shared expert when
 * present) from m->gguf, with shapes checked against m->cfg's n_expert,
 * expert_hidden_dim and dim; read the expert hyperparameters first with
 * bt_model_moe_config. Names are written into names (NAME_CAP-sized slots
 * at *used). Returns BT_OK or BT_EFORMAT naming the tensor. */
int bt_model_moe_config(bt_model *m);
int bt_model_moe_bind(bt_model *m, int l, char (*names)[48], int *used);
/* Slots bt_model_moe_bind may use per layer. */
#define BT_MODEL_MOE_NAMES 8
/* Expert e's rows of a MoE slab w, where each expert has `rows` rows. */
bt_weight bt_moe_expert_view(const bt_weight *w, int e, int64_t rows);

/* llama2.c loaders (used by bt_model_load). */
int bt_llama2c_load(const char *path, const char *tokenizer_path, bt_model *m);
int bt_llama2c_tokenizer_load(const char *path, int n_vocab, bt_model *m);
int bt_llama2c_load_buffer(const void *data, size_t size, const char *name, bt_model *m);
/* data is copied; the model owns the copy. */
int bt_llama2c_tokenizer_load_buffer(const void *data, size_t size, const char *name, int n_vocab, bt_model *m);

#endif
