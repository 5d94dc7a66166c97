/* engine.h - the Llama forward pass over named ops, with an evaluation
 * callback for taps.
 *
 * bt_engine_forward() runs T consecutive tokens starting at position pos0
 * (T > 1 is a prefill) and leaves the logits of every position in the
 * engine. Every tensor it computes has a stable name: token_embd,
 * blk.L.<op> for the per-layer ops below, output_norm and logits. A tensor
 * is T rows (one per position) of `width` floats.
 *
 * Taps (ggml's eval-callback shape): `ask` is called once per (op, layer)
 * when the callback is installed and its answers are cached, so with taps off
 * the hot path pays one predictable branch per op; `observe` sees the tensor
 * right after it is computed and may modify it (fault injection); returning
 * false from observe cancels the forward: bt_engine_forward returns
 * BT_EINVAL, with the message the callback set through bt_error().
 *
 * The ops run on a backend (src/backend/: the CPU, or a device plugin). A
 * tap holds a handle to a tensor that may live on a device: it asks for
 * statistics (bt_tensor_stats, reduced where the tensor lives), rows
 * (bt_tensor_read, a copy) or a mutation (bt_tensor_mutate), never for the
 * memory itself. Statistics may arrive asynchronously: they are valid once
 * the forward has finished, when the engine calls the callback's `flush`. */
#ifndef BT_ENGINE_H
#define BT_ENGINE_H

/* Context length when none is asked for: the model's, at most this. */
#define BT_ENGINE_CTX_CAP 4096

#include <stdint.h>
#include <stdbool.h>
#include "model/model.h"
#include "backend/backend.h"
#include "base/records.h"

/* Every tensor the forward pass computes, in the order it computes them.
 * Which of them a model has depends on its architecture (bt_op_exists):
 * attn_q_norm / attn_k_norm only with per-head q/k norms (qwen3), the router
 * (ffn_gate_inp) and ffn_moe_out only in a mixture of experts. Trace rows
 * store names, never these numbers. */
enum bt_op {
    BT_OP_TOKEN_EMBD = 0,
    /* the MTP (nextn) block's input (a hybrid's drafter, layer N after the trunk) */
    BT_OP_MTP_ENORM, BT_OP_MTP_HNORM,        /* rmsnorm of the token's embedding; of the hidden row */
    BT_OP_MTP_EH_PROJ,                       /* eh_proj([enorm; hnorm]): the block's residual input */
    BT_OP_ATTN_NORM,
    /* gated delta net (the recurrent layers of a hybrid model, engine/gdn.c) */
    BT_OP_SSM_QKV, BT_OP_SSM_Z,              /* the fused q/k/v projection (conv input), the gate z */
    BT_OP_SSM_BETA, BT_OP_SSM_DECAY,         /* sigmoid(b); g = ssm_a * softplus(alpha + dt_bias) */
    BT_OP_SSM_CONV, BT_OP_SSM_CONV_STATE,    /* silu(causal conv1d); the conv state after it */
    BT_OP_SSM_Q, BT_OP_SSM_K, BT_OP_SSM_V,   /* per-head L2-normed q, k (before the 1/sqrt scale), v */
    BT_OP_SSM_CORE, BT_OP_SSM_STATE,         /* the delta rule's output; the state after the last token */
    BT_OP_SSM_NORM, BT_OP_SSM_OUT,           /* gated rmsnorm; the output projection */
    BT_OP_ATTN_GATE,                         /* qwen35: the gate half of the doubled q projection */
    BT_OP_ATTN_Q_A, BT_OP_ATTN_Q_A_NORM,     /* deepseek2: the q low-rank projection, its rmsnorm */
    BT_OP_ATTN_Q_NORM, BT_OP_ATTN_K_NORM,   /* q, k after bias and per-head rmsnorm, before RoPE */
    BT_OP_ATTN_Q, BT_OP_ATTN_K, BT_OP_ATTN_V,
    /* multi-head latent attention (deepseek2, engine/mla.h): attn_kv_a_mqa's
     * output; the latent row the cache stores (normed, k's rope part
     * rotated); the absorbed queries; attention's output in the latent */
    BT_OP_ATTN_KV_A, BT_OP_ATTN_KV_LATENT, BT_OP_ATTN_Q_ABS, BT_OP_ATTN_CTX_LATENT,
    BT_OP_ATTN_CTX,
    BT_OP_ATTN_SINK,                         /* gpt-oss: each head's sink share of its softmax */
    BT_OP_ATTN_GATED,                        /* qwen35: attn_ctx * sigmoid(attn_gate) */
    BT_OP_ATTN_OUTPUT, BT_OP_ATTN_RESID,
    BT_OP_FFN_NORM,
    BT_OP_FFN_GATE_INP,                      /* MoE router logits (n_expert per row) */
    BT_OP_FFN_GATE, BT_OP_FFN_UP, BT_OP_FFN_ACT, BT_OP_FFN_DOWN,
    BT_OP_FFN_MOE_OUT,                       /* MoE: the routed experts' weighted sum */
    BT_OP_FFN_RESID,
    BT_OP_OUTPUT_NORM, BT_OP_LOGITS,
    BT_OP_COUNT
};

/* Does a model of config c compute op (in every layer, for a layer op; in
 * a hybrid model: in the layers of one kind, see bt_op_in_layer)? */
bool bt_op_exists(const bt_config *c, int op);
/* Does it compute op in layer (-1 for the ops outside layers)? A hybrid
 * model's recurrent layers compute the ssm_* ops and no attention, its
 * full-attention layers the attention ops and no ssm_*. */
bool bt_op_in_layer(const bt_config *c, int op, int layer);
/* The weight an op's matmul (or embedding lookup) reads, or NULL. */
const bt_weight *bt_op_weight(const bt_model *m, int op, int layer);

/* "ffn_down"; names of per-layer ops are the suffix after "blk.L.". */
const char *bt_op_name(int op);
int bt_op_from_name(const char *name);        /* -1 if unknown */
bool bt_op_is_layer_op(int op);
/* Short labels for column headers, unique per op: label is two letters
 * ("fd" for ffn_down: module letter, op letter), abbrev four ("down").
 * "?" / "????" for an unknown op. */
const char *bt_op_label(int op);
const char *bt_op_abbrev(int op);
/* Floats per row of an op's tensor in a model of config c. */
int bt_op_width(const bt_config *c, int op);
/* The same in layer (a deepseek2's leading dense layers: the dense FFN's
 * widths where the MoE layers have one expert's). */
int bt_op_layer_width(const bt_config *c, int op, int layer);
/* "blk.12.ffn_down.expert[37]": the name of expert e's part of an op. */
void bt_expert_tensor_name(int op, int layer, int expert, char *buf, size_t cap);
/* Full tensor name: "token_embd", "blk.3.ffn_down", "logits". */
void bt_tensor_name(int op, int layer, char *buf, size_t cap);

typedef struct bt_tensor bt_tensor;    /* where a view's rows live (engine.c) */

/* In a mixture-of-experts layer ffn_gate, ffn_up, ffn_act and ffn_down are
 * computed per expert over the tokens routed to it: a view of expert e's
 * part has rows for those tokens only (pos[i] is row i's position; they are
 * not consecutive in a prefill) and its name is
 * blk.L.<op>.expert[e]. */
typedef struct bt_expert_rows {
    int expert;
    const int *pos;      /* (rows) positions, ascending; valid until the forward's flush */
} bt_expert_rows;

typedef struct bt_tensor_view {
    int op;              /* bt_op */
    int layer;           /* -1 outside layers */
    int step;            /* forward call counter (0 = first call) */
    int pos0;            /* position of row 0 */
    int rows;            /* T: one row per position */
    int width;           /* floats per row */
    float *data;         /* rows*width on the host, writable, when the backend's
                          * memory is the host's (the CPU backend); NULL on a
                          * device: use the bt_tensor_* calls below */
    const bt_tensor *tensor;  /* the backend's tensor; NULL in a view made by
                          * hand over host data */
    const char *kernel;  /* who computed it ("MUL_MAT q4_1 on CPU"), set by a
                          * foreign engine (its view is a host copy, tensor
                          * NULL); NULL: ask bt_engine_kernel_name */
    const bt_expert_rows *moe;  /* one expert's rows (see above), else NULL */
    const bt_tap_stats *stats;  /* statistics already reduced where the tensor
                          * lived (a foreign engine that hands over no data:
                          * libbangtrace), else NULL */
    bool partial;        /* the rows are only some of the step's positions: a
                          * prefill's logits, of which the engine computes
                          * the rows it samples from (the last), as with taps
                          * off. An --inject spec may change them; a tap would
                          * not be the tensor's statistics, so none is taken */
} bt_tensor_view;

/* Statistics of a view's rows, computed where they live (host views:
 * bt_stats_compute; a view with stats: those). From an engine's observe, *out may be filled only when
 * the forward ends (before `flush`); keep it alive until then. */
int bt_tensor_stats(const bt_tensor_view *t, bt_tap_stats *out);
/* Copy rows [row0, row0 + n) to dst (n * width floats), synchronously. */
int bt_tensor_read(const bt_tensor_view *t, int row0, int n, float *dst);
/* Apply a mutation where the tensor lives; *changed gets the number of
 * elements whose bits changed. */
int bt_tensor_mutate(const bt_tensor_view *t, const bt_mutation *m, long *changed);

typedef struct bt_eval_cb {
    bool (*ask)(void *user, int op, int layer);                   /* want this tensor? */
    bool (*observe)(void *user, const bt_tensor_view *t);         /* false cancels */
    void *user;
    /* optional: called at the end of every forward that completed, once the
     * backend has synchronised (statistics asked for in observe are final);
     * false fails the forward (BT_EINVAL, message set through bt_error). */
    bool (*flush)(void *user, int step);
    /* optional: a mixture-of-experts layer routed T tokens (positions
     * pos0..pos0+T-1): token t went to experts[t*k + j] with weight
     * weights[t*k + j], j < k, best first. Called right after the layer's
     * ffn_gate_inp tap (the router logits), with host arrays valid for the
     * call only. */
    void (*routes)(void *user, int step, int layer, int pos0, int T, int k, const int *experts,
                   const float *weights);
} bt_eval_cb;

typedef struct bt_engine bt_engine;

/* Allocate run state (activations for up to max_batch positions, KV cache
 * for ctx_len positions). ctx_len 0 means the model's trained context, capped
 * at 4096. Returns BT_OK or BT_ENOMEM/BT_EINVAL with a message. */
int bt_engine_new(const bt_model *m, int ctx_len, int max_batch, int n_threads, bt_engine **out);

typedef struct bt_engine_opts {
    int ctx_len, max_batch, n_threads;  /* as bt_engine_new */
    int n_layers;           /* 0: all; N: only the first N layers, then output_norm
                             * and the head (self-speculative drafting) */
    bt_engine *share_pool;  /* run on this engine's backend and thread pool (must
                             * outlive us) */
    const char *device;     /* backend: "cpu" (NULL: cpu), "cuda", "cuda:N"
                             * (bt_backend_open) */
    bt_backend *backend;    /* or run on this backend (borrowed, must outlive us;
                             * overrides device) */
    /* A paged engine (the batched server): a KV cache of n_blocks blocks of
     * block_size positions, run by bt_engine_forward_batch only; n_slots
     * recurrent state slots (hybrid models; 0: 1). block_size 0: one
     * sequence, bt_engine_forward. */
    int block_size, n_blocks, n_slots;
    /* The model's MTP (nextn) block instead of its trunk (the drafter of
     * --draft-mtp): each forward runs the block over tokens paired with the
     * hidden rows bt_engine_set_mtp_hidden gave it; its output_norm and
     * logits are the block's head. Its layer is numbered after the trunk
     * (blk.N.*, N = the trunk's layers); its KV cache is its own. */
    bool mtp;
} bt_engine_opts;
int bt_engine_new_opts(const bt_model *m, const bt_engine_opts *o, bt_engine **out);
int bt_engine_n_layers(const bt_engine *e);
/* The first layer a forward runs: 0, or the MTP block's N (opts.mtp); the
 * layers it computes are [first, n_layers). */
int bt_engine_first_layer(const bt_engine *e);
/* An MTP engine's next forward pairs token t with hidden row t (T rows of
 * dim floats, host memory, borrowed until that forward returns): row t is
 * the output-normed hidden state of the position before token t's (the
 * trunk's, or the block's own when drafting ahead; zeros before position
 * 0). BT_EINVAL on an engine that is not an MTP engine. */
int bt_engine_set_mtp_hidden(bt_engine *e, const float *h);
/* Copy rows [row0, row0 + n) of the last forward's output_norm (the hidden
 * state the head reads) to dst (n * dim floats): what an MTP drafter pairs
 * with the next tokens. A native engine's single-sequence forward, or a
 * foreign engine that gives them (bt_engine_ext.hidden_rows: llama.cpp's
 * h_nextn); BT_EUNSUPPORTED on another foreign engine, BT_ERANGE for rows
 * it did not run. */
int bt_engine_hidden_rows(bt_engine *e, int row0, int n, float *dst);
/* Switch a backend feature on (bt_backend_enable: BT_BACKEND_GRAPHS,
 * BT_BACKEND_ACTIVITY) before the first forward; with ACTIVITY the forward
 * announces every op to the backend (its mark hook, backend_impl.h) so its
 * device records join (step, layer, op). BT_EUNSUPPORTED on the CPU backend
 * or a foreign engine, with a one-line message naming the flag. */
int bt_engine_enable(bt_engine *e, int feature);
/* Number the next forward call (trace steps are global across a target and
 * a draft engine); the counter then increments per forward as usual. */
void bt_engine_set_step(bt_engine *e, int step);
/* Compute logits for every row of a forward, not only the last (verify). */
void bt_engine_set_logits_all(bt_engine *e, bool all);
void bt_engine_free(bt_engine *e);
/* Install (or with NULL remove) the tap callback. */
void bt_engine_set_eval_cb(bt_engine *e, const bt_eval_cb *cb);
/* Run under a numerics profile (kernels/cpu/numerics.h): NULL or the exact
 * profile restores plain f32. BT_ENOMEM. */
struct bt_numerics;
int bt_engine_set_numerics(bt_engine *e, const struct bt_numerics *n);

/* Run tokens[0..T-1] at positions pos0..pos0+T-1 (1 <= T <= max_batch:
 * a longer prompt is the caller's to split, as the decoder's prefill does).
 * Returns BT_OK, BT_ERANGE (position past ctx_len, token id out of range) or
 * BT_EINVAL (T past the batch, or cancelled by a callback). */
int bt_engine_forward(bt_engine *e, const int32_t *tokens, int T, int pos0);
/* A batched forward (continuous batching over a paged KV cache): n
 * sequences' rows in one pass, each sequence at its own positions with its
 * own block table (position p's cache row: blocks[p / block_size] *
 * block_size + p % block_size) and recurrent state slot. Every row's result
 * is the bits bt_engine_forward computes for that sequence alone (the
 * kernels are batch-invariant; rope, the cache, attention and the recurrence
 * run per sequence). Taps see one view per sequence (bt_engine_batch_seq
 * says which, during the callback). */
enum { BT_SEQ_STATE_AUTO = 0,   /* position 0 resets the slot's recurrent state, else it continues */
       BT_SEQ_STATE_KEEP };     /* keep whatever the slot holds (a fault: slot not reset on reuse) */
typedef struct bt_seq_batch {
    const int32_t *tokens;      /* T tokens at positions pos0.. */
    int T, pos0;
    const int32_t *blocks;      /* block table covering positions 0..pos0+T-1 */
    int slot, state;            /* recurrent state slot and BT_SEQ_STATE_* (hybrid models) */
    bool logits_all;            /* logits of every row, else the last */
    int logit_row;              /* out: bt_engine_logits_row of its last row */
} bt_seq_batch;
/* BT_OK, BT_EINVAL (not a paged engine, rows past the batch, cancelled by
 * a callback), BT_ERANGE (positions past ctx_len, tokens, blocks or slots
 * out of range), BT_EUNSUPPORTED (a backend without buffer views, a
 * numerics profile). */
int bt_engine_forward_batch(bt_engine *e, bt_seq_batch *seqs, int n);
int bt_engine_batch_seq(const bt_engine *e);
/* A hybrid model's recurrent state slot as one buffer of
 * bt_engine_state_size floats (every recurrent layer's delta-rule and conv
 * states; 0 for a model without them): save copies slot's out (and the
 * position it expects next), load puts one back and makes next_pos the
 * position the slot continues from (the batched server's state snapshots at
 * block boundaries, restored on a prefix hit). */
/* Run the next forwards without the tap callback (no ask, observe, routes
 * or flush), then (false) with it again: a recomputation the observer has
 * seen already (a hybrid model's rollback after a rejected draft). */
void bt_engine_hold_taps(bt_engine *e, bool hold);
size_t bt_engine_state_size(const bt_engine *e);
int bt_engine_state_save(bt_engine *e, int slot, float *dst, int *next_pos);
int bt_engine_state_load(bt_engine *e, int slot, const float *src, int next_pos);
/* Roll slot 0 back: load a state saved at position pos, then run
 * tokens[0..n) at pos.. on it without the tap callback (their KV rows come
 * out as they were): the state after the accepted tokens of a rejected
 * draft, or a replay catching up where the traced run rolled back. */
int bt_engine_state_rewind(bt_engine *e, const float *state, int pos, const int32_t *tokens, int n);
/* Logits of the last position of the last forward ([n_vocab]), or of row i. */
float *bt_engine_logits(bt_engine *e);
float *bt_engine_logits_row(bt_engine *e, int i);
int bt_engine_step(const bt_engine *e);        /* forward calls so far */
/* The cached key (which = 0) or value (1) row of (layer, pos): kv_dim
 * floats, writable (fault injection), or NULL if out of range or when the
 * cache lives on a device (use bt_engine_kv_fill). In a paged engine pos is
 * the cache row (block * block_size + offset), as for bt_engine_kv_fill. */
float *bt_engine_kv(bt_engine *e, int layer, int pos, int which);
/* Set every element of the cached key (which = 0) or value (1) row of
 * (layer, pos) to value, wherever the cache lives. BT_OK, BT_ERANGE when out
 * of range, or the backend's error. */
int bt_engine_kv_fill(bt_engine *e, int layer, int pos, int which, float value);
int bt_engine_kv_dim(const bt_engine *e);
int bt_engine_ctx_len(const bt_engine *e);
/* Positions one forward may compute (bt_engine_new's max_batch). */
int bt_engine_max_batch(const bt_engine *e);
const bt_model *bt_engine_model(const bt_engine *e);
/* The backend the engine runs on (borrowed). */
bt_backend *bt_engine_backend(const bt_engine *e);
/* Which kernel computes (op, layer) on this engine's backend, as events
 * print it: "matmul q4_1/avx512 on blk.17.ffn_down.weight",
 * "rmsnorm (f32, scalar)". */
void bt_engine_kernel_name(const bt_engine *e, int op, int layer, char *buf, size_t cap);

/* A foreign engine (llama.cpp through its C API, src/engines/llamacpp/) behind
 * the same handle, so the decoder, the recorder and everything downstream
 * see one kind of engine. The engine keeps the step counter, the logits and
 * the tap wishes; `forward` computes tokens[0..T) at pos0 (discarding any
 * cached positions >= pos0), hands each tensor a tap wants to
 * bt_engine_tap_deliver, and writes T rows of n_vocab logits to `logits`.
 * Tensors the foreign engine computes that have no bt_op ("extra" tensors:
 * llama.cpp's kq-3) are ops BT_OP_COUNT + i in views and asks; their names
 * come from bt_engine_extra(). */
typedef struct bt_extra_tensor {
    char name[64];       /* the foreign engine's own name ("kq-3") */
    char op[32];         /* short op label for the trace ("kq") */
    int layer;           /* -1 outside layers */
    int width;           /* floats per row at the first forward (kq's grows) */
} bt_extra_tensor;

typedef struct bt_engine_ext {
    int (*forward)(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits);
    void (*free)(void *impl);
    void *impl;
    const bt_extra_tensor *extra;   /* owned by impl */
    int n_extra;
    /* optional: bt_engine_hidden_rows of the last forward's rows; and, for a
     * foreign MTP engine, bt_engine_set_mtp_hidden (NULL: not an MTP engine) */
    int (*hidden_rows)(void *impl, int row0, int n, float *dst);
    int (*set_mtp_hidden)(void *impl, const float *h);
    /* an MTP block engine (llama.cpp's MTP context): its one layer is the
     * block's, after the trunk's, as a native MTP engine's */
    bool mtp;
} bt_engine_ext;

/* Takes ownership of ext->impl (freed through ext->free, also on error). */
int bt_engine_new_ext(const bt_model *m, int ctx_len, int max_batch, const bt_engine_ext *ext, bt_engine **out);
bool bt_engine_is_foreign(const bt_engine *e);
/* A foreign engine's impl (bt_engine_ext.impl); NULL for a native engine. */
void *bt_engine_foreign_impl(const bt_engine *e);
int bt_engine_n_extra(const bt_engine *e);
const bt_extra_tensor *bt_engine_extra(const bt_engine *e, int i);   /* NULL if out of range */
/* For a foreign forward: does a tap want (op, layer)? (cached ask answers) */
bool bt_engine_tap_wanted(const bt_engine *e, int op, int layer);
/* For a foreign forward: give a computed tensor to the tap (it may modify
 * it); the view's step is filled in. false: the callback cancelled. */
bool bt_engine_tap_deliver(bt_engine *e, bt_tensor_view *t);
/* For a foreign forward: a mixture-of-experts layer's routes (bt_eval_cb.routes). */
void bt_engine_routes_deliver(bt_engine *e, int layer, int pos0, int T, int k, const int *experts, const float *weights);
/* Does the next forward want every row's logits (bt_engine_set_logits_all)? */
bool bt_engine_logits_all(const bt_engine *e);

#endif
