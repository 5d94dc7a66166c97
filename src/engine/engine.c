/* engine.c - the Llama forward pass (RMSNorm, RoPE, GQA attention, SwiGLU)
 * over T positions at once, every tensor named and observable.
 *
 * Layout follows llama2.c: one bt_engine owns a run state of named buffers
 * with shape comments. The buffers live on a backend (src/backend/) and
 * every op is a call through its vtable, so this forward pass is the only
 * one whatever the device. Weights are uploaded once (the CPU backend keeps
 * pointers into the mapping) and read in place (any supported type);
 * activations are f32. The tap branch (`want[op][layer]`) is a cached bool
 * so an engine without taps pays one predictable branch per op. */
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "engine/moe.h"
#include "engine/mla.h"
#include "engine/gptoss.h"
#include "backend/backend_impl.h"
#include "kernels/cpu/kernels.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-op facts: everybody who lays out ops (recorder, injector, inspect,
 * bench, browser, bisect) reads them through the bt_op_* functions. */
typedef struct bt_op_info {
    const char *name;     /* "ffn_down"; per-layer ops: the suffix after "blk.L." */
    const char *label;    /* two letters, unique: module letter, op letter ("fd") */
    const char *abbrev;   /* four letters at most ("down") */
    int width;            /* bt_dim of one row (model/arch.h) */
    int kop;              /* kernel family that computes it (backend_impl.h bt_kop) */
    size_t weight;        /* offsetof(bt_layer_weights, W) + 1 of its matmul weight;
                           * 0: none (token_embd and logits: see bt_op_weight) */
    unsigned need;        /* bt_arch_flag bits a model must have for the op to exist */
    unsigned absent;      /* bt_arch_flag bits it must not have */
} bt_op_info;

#define LW(f) (offsetof(bt_layer_weights, f) + 1)
/* The op table: name, labels, row width, kernel family, weight, presence. */
static const bt_op_info op_info[] = {
    [BT_OP_TOKEN_EMBD] = { "token_embd", "em", "embd", BT_DIM_EMBD, BT_KOP_GET_ROWS, 0, 0, 0 },
    /* the MTP block's input (exists with a nextn block: bt_op_exists) */
    [BT_OP_MTP_ENORM] = { "mtp_enorm", "me", "menm", BT_DIM_EMBD, BT_KOP_RMSNORM, 0, 0, 0 },
    [BT_OP_MTP_HNORM] = { "mtp_hnorm", "mh", "mhnm", BT_DIM_EMBD, BT_KOP_RMSNORM, 0, 0, 0 },
    [BT_OP_MTP_EH_PROJ] = { "mtp_eh_proj", "mp", "mehp", BT_DIM_EMBD, BT_KOP_MATMUL, 0, 0, 0 },
    [BT_OP_ATTN_NORM] = { "attn_norm", "an", "anrm", BT_DIM_EMBD, BT_KOP_RMSNORM, 0, 0, 0 },
    [BT_OP_SSM_QKV] = { "ssm_qkv", "sx", "sqkv", BT_DIM_SSM_CONV, BT_KOP_MATMUL, LW(ssm_qkv), BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_Z] = { "ssm_z", "sz", "sz", BT_DIM_SSM_V, BT_KOP_MATMUL, LW(ssm_z), BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_BETA] = { "ssm_beta", "sb", "sbet", BT_DIM_SSM_NV, BT_KOP_GDN_GATES, LW(ssm_beta_w), BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_DECAY] = { "ssm_decay", "sd", "sdec", BT_DIM_SSM_NV, BT_KOP_GDN_GATES, LW(ssm_alpha), BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_CONV] = { "ssm_conv", "sc", "scnv", BT_DIM_SSM_CONV, BT_KOP_SSM_CONV, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_CONV_STATE] = { "ssm_conv_state", "sC", "scst", BT_DIM_SSM_CONV, BT_KOP_SSM_CONV, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_Q] = { "ssm_q", "sq", "sq", BT_DIM_SSM_K, BT_KOP_RMSNORM, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_K] = { "ssm_k", "sk", "sk", BT_DIM_SSM_K, BT_KOP_RMSNORM, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_V] = { "ssm_v", "sv", "sv", BT_DIM_SSM_V, BT_KOP_COPY_COLS, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_CORE] = { "ssm_core", "sr", "scor", BT_DIM_SSM_V, BT_KOP_GDN_RECUR, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_STATE] = { "ssm_state", "sS", "sst", BT_DIM_SSM_HEAD, BT_KOP_GDN_RECUR, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_NORM] = { "ssm_norm", "sn", "snrm", BT_DIM_SSM_V, BT_KOP_SWIGLU, 0, BT_ARCH_HYBRID, 0 },
    [BT_OP_SSM_OUT] = { "ssm_out", "so", "sout", BT_DIM_EMBD, BT_KOP_MATMUL, LW(ssm_out_w), BT_ARCH_HYBRID, 0 },
    [BT_OP_ATTN_GATE] = { "attn_gate", "ag", "agat", BT_DIM_Q, BT_KOP_MATMUL, LW(wq), BT_ARCH_ATTN_GATE, 0 },
    [BT_OP_ATTN_GATED] = { "attn_gated", "aG", "agtd", BT_DIM_Q, BT_KOP_MUL_SIGMOID, 0, BT_ARCH_ATTN_GATE, 0 },
    [BT_OP_ATTN_Q_NORM] = { "attn_q_norm", "qn", "qnrm", BT_DIM_Q, BT_KOP_RMSNORM, 0, BT_ARCH_QK_NORM, 0 },
    [BT_OP_ATTN_K_NORM] = { "attn_k_norm", "kn", "knrm", BT_DIM_KV, BT_KOP_RMSNORM, 0, BT_ARCH_QK_NORM, 0 },
    [BT_OP_ATTN_Q] = { "attn_q", "aq", "q", BT_DIM_Q, BT_KOP_MATMUL, LW(wq), 0, 0 },
    [BT_OP_ATTN_K] = { "attn_k", "ak", "k", BT_DIM_KV, BT_KOP_MATMUL, LW(wk), 0, BT_ARCH_MLA },
    [BT_OP_ATTN_V] = { "attn_v", "av", "v", BT_DIM_KV, BT_KOP_MATMUL, LW(wv), 0, BT_ARCH_MLA },
    /* multi-head latent attention (deepseek2); q_a only with q_lora_rank > 0 (bt_op_exists) */
    [BT_OP_ATTN_Q_A] = { "attn_q_a", "qa", "qa", BT_DIM_Q_LORA, BT_KOP_MATMUL, LW(wq_a), BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_Q_A_NORM] = { "attn_q_a_norm", "qA", "qanm", BT_DIM_Q_LORA, BT_KOP_RMSNORM, 0, BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_KV_A] = { "attn_kv_a", "ka", "kva", BT_DIM_KV_A, BT_KOP_MATMUL, LW(wkv_a), BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_KV_LATENT] = { "attn_kv_latent", "kl", "klat", BT_DIM_KV_A, BT_KOP_RMSNORM, 0, BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_Q_ABS] = { "attn_q_abs", "aQ", "qabs", BT_DIM_MLA_QABS, BT_KOP_ATTENTION, 0, BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_CTX_LATENT] = { "attn_ctx_latent", "aC", "ctxl", BT_DIM_MLA_CTXL, BT_KOP_ATTENTION, 0, BT_ARCH_MLA, 0 },
    [BT_OP_ATTN_CTX] = { "attn_ctx", "ac", "ctx", BT_DIM_Q, BT_KOP_ATTENTION, 0, 0, 0 },
    [BT_OP_ATTN_SINK] = { "attn_sink", "as", "sink", BT_DIM_HEADS, BT_KOP_ATTENTION, 0, BT_ARCH_SINKS, 0 },
    [BT_OP_ATTN_OUTPUT] = { "attn_output", "ao", "aout", BT_DIM_EMBD, BT_KOP_MATMUL, LW(wo), 0, 0 },
    [BT_OP_ATTN_RESID] = { "attn_resid", "ar", "ares", BT_DIM_EMBD, BT_KOP_ADD, 0, 0, 0 },
    [BT_OP_FFN_NORM] = { "ffn_norm", "fn", "fnrm", BT_DIM_EMBD, BT_KOP_RMSNORM, 0, 0, 0 },
    [BT_OP_FFN_GATE_INP] = { "ffn_gate_inp", "rt", "rout", BT_DIM_EXPERT, BT_KOP_MATMUL, LW(ffn_gate_inp), BT_ARCH_MOE, 0 },
    /* in a MoE model these four are computed per expert (bt_expert_rows):
     * width expert_ff, weight the expert slab (bt_op_weight) */
    [BT_OP_FFN_GATE] = { "ffn_gate", "fg", "gate", BT_DIM_FF, BT_KOP_MATMUL, LW(w_gate), 0, 0 },
    [BT_OP_FFN_UP] = { "ffn_up", "fu", "up", BT_DIM_FF, BT_KOP_MATMUL, LW(w_up), 0, 0 },
    [BT_OP_FFN_ACT] = { "ffn_act", "fa", "act", BT_DIM_FF, BT_KOP_SWIGLU, 0, 0, 0 },
    [BT_OP_FFN_DOWN] = { "ffn_down", "fd", "down", BT_DIM_EMBD, BT_KOP_MATMUL, LW(w_down), 0, 0 },
    [BT_OP_FFN_MOE_OUT] = { "ffn_moe_out", "fm", "moe", BT_DIM_EMBD, BT_KOP_SCATTER_ADD, 0, BT_ARCH_MOE, 0 },
    [BT_OP_FFN_RESID] = { "ffn_resid", "fr", "fres", BT_DIM_EMBD, BT_KOP_ADD, 0, 0, 0 },
    [BT_OP_OUTPUT_NORM] = { "output_norm", "on", "onrm", BT_DIM_EMBD, BT_KOP_RMSNORM, 0, 0, 0 },
    [BT_OP_LOGITS] = { "logits", "lg", "lgts", BT_DIM_VOCAB, BT_KOP_MATMUL, 0, 0, 0 },
};
_Static_assert(BT_ARRAY_SIZE(op_info) == BT_OP_COUNT, "op table out of date");
#undef LW

/* NULL for an unknown op. */
static const bt_op_info *bt_op_info_of(int op) { return op >= 0 && op < BT_OP_COUNT ? &op_info[op] : NULL; }
const char *bt_op_label(int op) { return op >= 0 && op < BT_OP_COUNT ? op_info[op].label : "?"; }
const char *bt_op_abbrev(int op) { return op >= 0 && op < BT_OP_COUNT ? op_info[op].abbrev : "????"; }
const char *bt_op_name(int op) { return op >= 0 && op < BT_OP_COUNT ? op_info[op].name : "?"; }

int bt_op_from_name(const char *name)
{
    for (int i = 0; i < BT_OP_COUNT; i++)
        if (!strcmp(name, op_info[i].name)) return i;
    return -1;
}

bool bt_op_is_layer_op(int op) { return op > BT_OP_TOKEN_EMBD && op < BT_OP_OUTPUT_NORM; }

static bool op_is_mtp(int op) { return op >= BT_OP_MTP_ENORM && op <= BT_OP_MTP_EH_PROJ; }

bool bt_op_exists(const bt_config *c, int op)
{
    if (op < 0 || op >= BT_OP_COUNT) return false;
    if (op_is_mtp(op) && c->n_nextn <= 0) return false;
    if ((op == BT_OP_ATTN_Q_A || op == BT_OP_ATTN_Q_A_NORM) && c->q_lora_rank <= 0) return false;
    return (c->flags & op_info[op].need) == op_info[op].need && !(c->flags & op_info[op].absent);
}

static bool op_is_ssm(int op) { return op >= BT_OP_SSM_QKV && op <= BT_OP_SSM_OUT; }
static bool op_is_attn(int op)
{
    return (op >= BT_OP_ATTN_GATE && op <= BT_OP_ATTN_OUTPUT);
}

bool bt_op_in_layer(const bt_config *c, int op, int layer)
{
    if (!bt_op_exists(c, op)) return false;
    if (!bt_op_is_layer_op(op)) return true;
    /* the MTP block: its input ops, then a full-attention layer */
    if (op_is_mtp(op)) return bt_layer_mtp(c, layer);
    if (layer < c->n_dense_lead && (op == BT_OP_FFN_GATE_INP || op == BT_OP_FFN_MOE_OUT)) return false;
    if (!(c->flags & BT_ARCH_HYBRID)) return true;
    bool recr = bt_layer_recurrent(c, layer);
    if (op_is_ssm(op)) return recr;
    if (op_is_attn(op)) return !recr;
    return true;
}

int bt_op_width(const bt_config *c, int op)
{
    if (op < 0 || op >= BT_OP_COUNT) return 0;
    if ((c->flags & BT_ARCH_MOE) && (op == BT_OP_FFN_GATE || op == BT_OP_FFN_UP || op == BT_OP_FFN_ACT))
        return c->expert_ff_len;     /* one expert's rows */
    if ((c->flags & BT_ARCH_MLA) && op == BT_OP_ATTN_CTX) return c->n_heads * c->mla_v_dim;
    return (int)bt_arch_dim(c, op_info[op].width);
}

int bt_op_layer_width(const bt_config *c, int op, int layer)
{
    if (layer >= 0 && layer < c->n_dense_lead && (op == BT_OP_FFN_GATE || op == BT_OP_FFN_UP || op == BT_OP_FFN_ACT))
        return c->hidden_dim;
    return bt_op_width(c, op);
}

const bt_weight *bt_op_weight(const bt_model *m, int op, int layer)
{
    if (op == BT_OP_TOKEN_EMBD) return &m->token_embd;
    if (op == BT_OP_LOGITS) return &m->output;
    if (op == BT_OP_MTP_EH_PROJ) return m->cfg.n_nextn > 0 && m->nextn.eh_proj.data ? &m->nextn.eh_proj : NULL;
    int n_lay = m->cfg.n_layers + (m->cfg.n_nextn > 0 ? 1 : 0);   /* the MTP block's layer after the trunk */
    if (op < 0 || op >= BT_OP_COUNT || !op_info[op].weight || layer < 0 || layer >= n_lay) return NULL;
    if ((m->cfg.flags & BT_ARCH_MLA) && op == BT_OP_ATTN_Q && m->cfg.q_lora_rank > 0) return &m->layers[layer].wq_b;
    if ((m->cfg.flags & BT_ARCH_MOE) && layer >= m->cfg.n_dense_lead) {   /* the experts' slabs */
        const bt_layer_weights *L = &m->layers[layer];
        if (op == BT_OP_FFN_GATE) return &L->ffn_gate_exps;
        if (op == BT_OP_FFN_UP) return &L->ffn_up_exps;
        if (op == BT_OP_FFN_DOWN) return &L->ffn_down_exps;
    }
    const bt_weight *w = (const bt_weight *)((const char *)&m->layers[layer] + op_info[op].weight - 1);
    return w->data ? w : NULL;
}

void bt_expert_tensor_name(int op, int layer, int expert, char *buf, size_t cap)
{
    snprintf(buf, cap, "blk.%d.%s.expert[%d]", layer, bt_op_name(op), expert);
}

void bt_tensor_name(int op, int layer, char *buf, size_t cap)
{
    if (bt_op_is_layer_op(op)) snprintf(buf, cap, "blk.%d.%s", layer, bt_op_name(op));
    else snprintf(buf, cap, "%s", bt_op_name(op));
}

#define BT_MAX_HEAD_DIM 512   /* the CPU backend accumulates a head in a stack row */

/* A view's handle: where its rows live. */
struct bt_tensor {
    bt_backend *be;
    bt_buf *buf;
    size_t off;          /* floats */
};

#define NO_VEC ((size_t)-1)

/* The weights of one layer on the backend. Small vectors (biases, q/k
 * norm weights) are f32 copies in the engine's vec_w buffer at these
 * offsets (floats), NO_VEC when the layer has none. */
typedef struct layer_bufs {
    bt_buf *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    /* mixture of experts: the router and one view per expert of each slab */
    bt_buf *w_gate_inp, **e_gate, **e_up, **e_down;   /* (n_expert) each */
    bt_buf *sh_gate, *sh_up, *sh_down, *sh_gate_inp;  /* shared expert, NULL when absent */
    size_t bq, bk, bv, bo, q_norm, k_norm;
    size_t sinks, r_b, gate_b, up_b, down_b;   /* gpt-oss: sink logits, router and expert biases */
    /* gated delta net (recurrent layers): projections, and in vec_w the
     * decay's a and dt, the gated norm's weight and the conv taps */
    bt_buf *s_qkv, *s_z, *s_beta, *s_alpha, *s_out;
    size_t s_a, s_dt, s_norm, s_conv;
    /* multi-head latent attention: projections, and in vec_w the q_a and
     * kv_a norms' weights */
    bt_buf *wq_a, *wkv_a;
    size_t qa_norm, kva_norm;
} layer_bufs;

struct bt_engine {
    const bt_model *m;
    bt_config c;
    int ctx_len, max_batch, n_threads;
    bt_backend *be;
    const struct bt_backend_i *bi;
    bool own_be;
    bool logits_all;
    bool marking;      /* BT_BACKEND_ACTIVITY on: announce each op to the backend */
    int step;
    /* weights on the backend */
    bt_buf *w_embd, *w_out;
    layer_bufs *lw;    /* (n_layers) */
    /* run state on the backend, B = max_batch */
    bt_buf *x;         /* (B, dim) residual stream */
    bt_buf *xb;        /* (B, dim) normed input */
    bt_buf *q;         /* (B, q_dim) */
    bt_buf *k;         /* (B, kv_dim) */
    bt_buf *v;         /* (B, kv_dim) */
    bt_buf *ctx;       /* (B, q_dim) attention-weighted values */
    bt_buf *sink_p;    /* (B, n_heads) gpt-oss: the sinks' shares of the softmax */
    bt_buf *attn_out;  /* (B, dim) */
    bt_buf *gate;      /* (B, hidden) */
    bt_buf *up;        /* (B, hidden) */
    bt_buf *act;       /* (B, hidden) */
    bt_buf *down;      /* (B, dim) */
    bt_buf *logits_b;  /* (logit_cap, n_vocab) */
    bt_buf *key_cache; /* (layer, ctx_len, kv_dim) */
    bt_buf *val_cache; /* (layer, ctx_len, kv_dim) */
    bt_buf *rope_cos;  /* (ctx_len, head_dim/2) */
    bt_buf *rope_sin;  /* (ctx_len, head_dim/2) */
    bt_buf *norm_w;    /* (2*n_layers + 1, dim): attn_norm, ffn_norm per layer, then output_norm, as f32 */
    bt_buf *vec_w;     /* (n_vec) per-layer biases and q/k norm weights, f32 (layer_bufs offsets) */
    float *logits;     /* (logit_cap, n_vocab) on the host: the backend's own
                        * memory when it is host memory, else a copy */
    bool logits_copy;  /* logits is a host copy (device backend) */
    int logit_rows;    /* rows valid in logits after the last forward */
    int logit_cap;
    /* taps */
    bt_eval_cb cb;
    bool has_cb;
    bool holding, held_cb;  /* bt_engine_hold_taps: the callback set aside */
    bool *want;        /* (BT_OP_COUNT, n_layers + 1); layer -1 maps to column 0 */
    /* numerics profile (num_on false: exact f32, every numerics op
     * skipped), handed to the backend's numerics ops: the engine never
     * computes it nor touches a buffer for it */
    bt_numerics num;
    bool num_on;
    bool rope_ggml;    /* rope_cos/sin hold ggml's f32 tables (the rope=ggml part) */
    float *rope_ff;    /* rope frequency divisors (rope_freqs.weight, else 1), head_dim/2 */
    /* a foreign engine (bt_engine_new_ext): no run state above but logits */
    bt_engine_ext ext;
    bool foreign;
    bool *want_extra;  /* (ext.n_extra) */
    /* mixture of experts (c.n_expert > 0) */
    bt_buf *router;    /* (B, n_expert) router logits */
    bt_buf *xe;        /* (B, dim) the rows routed to one expert, gathered */
    bt_buf *moe_out;   /* (B, dim) weighted sum of the experts */
    float *h_router;   /* (B, n_expert) host copy of the router logits */
    float *h_probs;    /* (n_expert) */
    int *h_sel;        /* (B, k) chosen experts */
    float *h_w;        /* (B, k) their weights */
    int32_t *h_ids;    /* (B * k) token rows per expert */
    float *h_ew;       /* (B * k) their weights */
    int *h_pos;        /* (n_layers, B, k) positions of each expert's rows: the
                        * views point here until the forward's flush */
    float *h_zero;     /* (B, dim) zeros */
    /* hybrid gated delta net models (BT_ARCH_HYBRID) */
    bool hybrid;
    bt_buf *qg;        /* (B, 2*q_dim) the doubled q projection (BT_ARCH_ATTN_GATE) */
    bt_buf *agate;     /* (B, q_dim) its gate half */
    bt_buf *s_qkv, *s_conv, *s_z, *s_beta, *s_decay, *s_q, *s_k, *s_v, *s_core, *s_norm;
    bt_buf *ssm_state; /* (n_layers, n_v*head_k, head_v): each recurrent layer's state, f32 */
    bt_buf *conv_state;/* (n_layers, kernel-1, conv_channels) */
    size_t l2_w;       /* vec_w offset of head_k floats 1/sqrt(head_k): L2 norm as rmsnorm */
    int *rec_next;     /* (n_slots) the position each slot's recurrent state expects next */
    /* paged KV (the batched server, bt_engine_forward_batch): the cache is
     * cache_rows = n_blocks * block_size rows per layer; block_size 0: one
     * sequence, row = position */
    int block_size, n_blocks, n_slots;
    size_t cache_rows;
    /* the sequences of the forward running now (one for bt_engine_forward) */
    struct seq_run *run;
    int n_run;
    int tap_seq;       /* the sequence a callback of a batched forward is about */
    /* statistics a matmul took of its output (mm_tap), for the tap of
     * (fused_op, fused_layer) on fused_buf that comes right after it */
    bt_tap_stats fused_st;
    int fused_op, fused_layer;
    const bt_buf *fused_buf;
    int32_t *h_rows;   /* (B) a batched forward's logit rows, gathered */
    int last_rows;     /* rows of the last single-sequence forward (bt_engine_hidden_rows) */
    /* the MTP (nextn) block instead of the trunk (bt_engine_opts.mtp) */
    bool mtp;
    int layer0;        /* the first layer a forward runs (the block's N); the KV cache holds [layer0, n_layers) */
    bool part_rope;    /* the hybrid family's partial rope (its trunk or its MTP block) */
    int embd_type, out_type;   /* the weight types of w_embd and w_out */
    const float *mtp_h;        /* (T, dim) the next forward's hidden rows (borrowed) */
    bt_buf *w_eh;      /* (dim, 2*dim) eh_proj */
    bt_buf *mtp_cat;   /* (B, 2*dim) [enorm; hnorm] */
    float *mtp_host;   /* (B, 4*dim) host scratch for the concatenation */
    size_t mtp_enorm, mtp_hnorm;   /* vec_w offsets of enorm and hnorm */
    /* multi-head latent attention (BT_ARCH_MLA, engine/mla.h): computed on
     * the host over the buffers' host memory; key_cache holds the latent */
    bool mla;
    bt_buf *m_qa;      /* (B, q_lora) */
    bt_buf *m_kva;     /* (B, kv_lora + rope) attn_kv_a_mqa's output */
    bt_buf *m_lat;     /* (B, kv_lora + rope) the cached latent rows */
    bt_buf *m_qabs;    /* (B, n_heads * (kv_lora + rope)) */
    bt_buf *m_ctxl;    /* (B, n_heads * kv_lora) */
    bt_buf *m_ctx;     /* (B, n_heads * v) */
    bt_mla_w *m_w;     /* (n_layers) the up-projections as f32 */
    float **m_own;     /* (2 * n_layers) f32 copies of quantized up-projections, else NULL */
    float **m_bias;    /* (n_layers) exp_probs_b as f32, or NULL */
    float *m_cos, *m_sin;      /* (ctx_len, rope/2) YaRN tables, magnitude folded in */
    float *m_scores;   /* (m_threads, ctx_len) */
    int m_threads;     /* the host threads the MLA work items run on (bt_backend_i.host_for) */
    float m_kq_scale;
};

/* One sequence of a forward: its rows of the batch and where its cache is.
 * View buffers alias the engine's activations at its rows (NULL when it
 * starts at row 0: the buffers themselves). */
enum { V_Q, V_K, V_V, V_CTX, V_SINK, V_QKV, V_CONV, V_SQ, V_SK, V_SV, V_DECAY, V_BETA, V_CORE, V_COUNT };
typedef struct seq_run {
    const int32_t *tokens;
    int T, pos0, row0;
    const int32_t *blocks;   /* NULL: contiguous cache */
    int slot, state;         /* recurrent state slot, BT_SEQ_STATE_* */
    bool all;                /* logits of every row */
    int lrow0, lrows;        /* its logit rows */
    bt_buf *view[V_COUNT];
    bt_tap_stats st;         /* the layer's recurrent state's statistics, when gdn_recur_stats took them */
} seq_run;

static bool *want_at(bt_engine *e, int op, int layer) { return &e->want[op * (e->c.n_layers + 1) + layer + 1]; }

void bt_engine_free(bt_engine *e)
{
    if (!e) return;
    if (e->be) {
        bt_buf *bufs[] = { e->w_embd, e->w_out, e->x, e->xb, e->q, e->k, e->v, e->ctx, e->attn_out, e->gate,
                           e->up, e->act, e->down, e->logits_b, e->key_cache, e->val_cache, e->rope_cos,
                           e->rope_sin, e->norm_w, e->vec_w, e->qg, e->agate, e->s_qkv, e->s_conv, e->s_z,
                           e->s_beta, e->s_decay, e->s_q, e->s_k, e->s_v, e->s_core, e->s_norm, e->ssm_state,
                           e->conv_state, e->w_eh, e->mtp_cat, e->m_qa, e->m_kva, e->m_lat, e->m_qabs, e->m_ctxl,
                           e->m_ctx, e->sink_p };
        for (size_t i = 0; i < BT_ARRAY_SIZE(bufs); i++) e->bi->buf_free(e->be, bufs[i]);
        if (e->lw)
            for (int l = 0; l < e->c.n_layers; l++) {
                layer_bufs *L = &e->lw[l];
                bt_buf *w[] = { L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down, L->w_gate_inp,
                                L->sh_gate, L->sh_up, L->sh_down, L->sh_gate_inp, L->s_qkv, L->s_z, L->s_beta,
                                L->s_alpha, L->s_out, L->wq_a, L->wkv_a };
                for (size_t i = 0; i < BT_ARRAY_SIZE(w); i++) e->bi->buf_free(e->be, w[i]);
                for (int x = 0; x < e->c.n_expert; x++) {
                    if (L->e_gate) e->bi->buf_free(e->be, L->e_gate[x]);
                    if (L->e_up) e->bi->buf_free(e->be, L->e_up[x]);
                    if (L->e_down) e->bi->buf_free(e->be, L->e_down[x]);
                }
                free(L->e_gate); free(L->e_up); free(L->e_down);
            }
        e->bi->buf_free(e->be, e->router);
        e->bi->buf_free(e->be, e->xe);
        e->bi->buf_free(e->be, e->moe_out);
        if (e->own_be) bt_backend_free(e->be);
    }
    if (e->logits_copy) free(e->logits);
    free(e->lw);
    free(e->rope_ff);
    free(e->want);
    if (e->foreign && e->ext.free) e->ext.free(e->ext.impl);
    free(e->want_extra);
    free(e->h_router); free(e->h_probs); free(e->h_sel); free(e->h_w); free(e->h_ids); free(e->h_ew);
    free(e->h_pos); free(e->h_zero);
    free(e->rec_next); free(e->h_rows); free(e->mtp_host);
    for (int i = 0; e->m_own && i < 2 * e->c.n_layers; i++) free(e->m_own[i]);
    for (int i = 0; e->m_bias && i < e->c.n_layers; i++) free(e->m_bias[i]);
    free(e->m_own); free(e->m_bias); free(e->m_w); free(e->m_cos); free(e->m_sin); free(e->m_scores);
    free(e);
}

int bt_engine_new(const bt_model *m, int ctx_len, int max_batch, int n_threads, bt_engine **out)
{
    bt_engine_opts o = { .ctx_len = ctx_len, .max_batch = max_batch, .n_threads = n_threads };
    return bt_engine_new_opts(m, &o, out);
}

static int upload(bt_engine *e, const bt_weight *w, int64_t rows, int64_t cols, bt_buf **out)
{
    size_t bytes = bt_dtype_row_size(w->type, cols) * (size_t)rows;
    if (!bytes) return bt_error(BT_EUNSUPPORTED, "%s: %s rows of %lld are not whole blocks", w->name ? w->name : "weight",
                                bt_dtype(w->type)->name ? bt_dtype(w->type)->name : "?", (long long)cols);
    return e->bi->buf_upload(e->be, w->data, bytes, out);
}

/* A zeroed f32 buffer of n floats. */
static int alloc_f32(bt_engine *e, size_t n, bt_buf **out)
{
    return e->bi->buf_alloc(e->be, n * sizeof(float), out);
}

/* Logit rows on the backend (and a host copy on a device); contents are not
 * kept. */
static int logits_reserve(bt_engine *e, int rows)
{
    if (rows <= e->logit_cap) return BT_OK;
    size_t n = (size_t)rows * e->c.n_vocab;
    bt_buf *nb = NULL;
    int rc = alloc_f32(e, n, &nb);
    if (rc) return bt_error(rc, "out of memory for %d logit rows", rows);
    float *host = e->bi->buf_host ? e->bi->buf_host(e->be, nb) : NULL;
    if (!host) {
        if (!(host = malloc(n * sizeof(float)))) {
            e->bi->buf_free(e->be, nb);
            return bt_error(BT_ENOMEM, "out of memory for %d logit rows", rows);
        }
    }
    e->bi->buf_free(e->be, e->logits_b);
    if (e->logits_copy) free(e->logits);
    e->logits_b = nb;
    e->logits = host;
    e->logits_copy = !e->bi->buf_host || host != e->bi->buf_host(e->be, nb);
    e->logit_cap = rows;
    return BT_OK;
}

/* One layer's MoE weights: the router, and each expert's slab of the 3-D
 * tensors as its own buffer (on the CPU a pointer into the mapping, so
 * nothing is copied and a token reads only its experts' weights). */
static int moe_upload(bt_engine *e, const bt_layer_weights *L, layer_bufs *B_)
{
    const bt_config *c = &e->c;
    int rc, E = c->n_expert, eh = c->expert_ff_len;
    if (!e->bi->scatter_add)
        return bt_error(BT_EUNSUPPORTED, "%s: the mixture-of-experts op scatter_add (the experts' weighted sum) "
                        "is not implemented on this backend; run it on the cpu", bt_backend_name(e->be));
    if (c->n_expert_used > BT_MOE_MAX_USED)
        return bt_error(BT_EUNSUPPORTED, "%d experts per token is above the supported %d", c->n_expert_used, BT_MOE_MAX_USED);
    if ((rc = upload(e, &L->ffn_gate_inp, E, c->dim, &B_->w_gate_inp))) return rc;
    B_->e_gate = calloc((size_t)E, sizeof(bt_buf *));
    B_->e_up = calloc((size_t)E, sizeof(bt_buf *));
    B_->e_down = calloc((size_t)E, sizeof(bt_buf *));
    if (!B_->e_gate || !B_->e_up || !B_->e_down) return bt_error(BT_ENOMEM, "out of memory");
    for (int x = 0; x < E; x++) {
        bt_weight g = bt_moe_expert_view(&L->ffn_gate_exps, x), u = bt_moe_expert_view(&L->ffn_up_exps, x),
                  d = bt_moe_expert_view(&L->ffn_down_exps, x);
        if ((rc = upload(e, &g, eh, c->dim, &B_->e_gate[x])) || (rc = upload(e, &u, eh, c->dim, &B_->e_up[x])) ||
            (rc = upload(e, &d, c->dim, eh, &B_->e_down[x])))
            return rc;
    }
    if (L->ffn_gate_shexp.data) {
        int sh = c->shared_ff_len;
        if ((rc = upload(e, &L->ffn_gate_shexp, sh, c->dim, &B_->sh_gate)) ||
            (rc = upload(e, &L->ffn_up_shexp, sh, c->dim, &B_->sh_up)) ||
            (rc = upload(e, &L->ffn_down_shexp, c->dim, sh, &B_->sh_down)))
            return rc;
        if (L->ffn_gate_inp_shexp.data && (rc = upload(e, &L->ffn_gate_inp_shexp, 1, c->dim, &B_->sh_gate_inp)))
            return rc;
    }
    return BT_OK;
}

/* The MoE run state: device buffers and the host arrays of the routing. */
static int moe_alloc(bt_engine *e)
{
    const bt_config *c = &e->c;
    size_t B = (size_t)e->max_batch, E = (size_t)c->n_expert, k = (size_t)c->n_expert_used;
    int rc;
    if ((rc = alloc_f32(e, B * E, &e->router)) || (rc = alloc_f32(e, B * c->dim, &e->xe)) ||
        (rc = alloc_f32(e, B * c->dim, &e->moe_out)))
        return rc;
    e->h_router = malloc(B * E * sizeof(float));
    e->h_probs = malloc(2 * E * sizeof(float));
    e->h_sel = malloc(B * k * sizeof(int));
    e->h_w = malloc(B * k * sizeof(float));
    e->h_ids = malloc(B * k * sizeof(int32_t));
    e->h_ew = malloc(B * k * sizeof(float));
    e->h_pos = malloc((size_t)c->n_layers * B * k * sizeof(int));
    e->h_zero = calloc(B * c->dim, sizeof(float));
    if (!e->h_router || !e->h_probs || !e->h_sel || !e->h_w || !e->h_ids || !e->h_ew || !e->h_pos || !e->h_zero)
        return bt_error(BT_ENOMEM, "out of memory for the expert routing (batch %zu)", B);
    return BT_OK;
}

/* The hybrid model's run state: the gated q projection's buffers, the
 * gated delta net's activations and the recurrent states (zero: the
 * state of an empty sequence). */
static int hybrid_alloc(bt_engine *e)
{
    const bt_config *c = &e->c;
    size_t B = (size_t)e->max_batch;
    size_t C = (size_t)bt_arch_dim(c, BT_DIM_SSM_CONV), K = (size_t)bt_arch_dim(c, BT_DIM_SSM_K);
    size_t V = (size_t)bt_arch_dim(c, BT_DIM_SSM_V), nv = (size_t)c->ssm_n_v, L = (size_t)c->n_layers;
    int rc;
    if ((rc = alloc_f32(e, B * C, &e->s_qkv)) || (rc = alloc_f32(e, B * C, &e->s_conv)) ||
        (rc = alloc_f32(e, B * V, &e->s_z)) || (rc = alloc_f32(e, B * nv, &e->s_beta)) ||
        (rc = alloc_f32(e, B * nv, &e->s_decay)) || (rc = alloc_f32(e, B * K, &e->s_q)) ||
        (rc = alloc_f32(e, B * K, &e->s_k)) || (rc = alloc_f32(e, B * V, &e->s_v)) ||
        (rc = alloc_f32(e, B * BT_MAX(V, 2 * nv), &e->s_core)) || (rc = alloc_f32(e, B * V, &e->s_norm)) ||
        (rc = alloc_f32(e, (size_t)e->n_slots * L * nv * c->ssm_head_k * c->ssm_head_v, &e->ssm_state)) ||
        (rc = alloc_f32(e, (size_t)e->n_slots * L * (size_t)(c->ssm_kernel - 1) * C, &e->conv_state)))
        return bt_error(rc, "out of memory for the gated delta net's run state (batch %zu)", B);
    return BT_OK;
}

/* qwen35's rope tables: imrope over rope_dim dims, (ctx_len, rope_dim/2).
 * Pair i of sector i % (sum of sections) takes the text position for the
 * t, h and w sections (interleaved as ggml's imrope: sector % 3) and the
 * fourth position, 0 for text, elsewhere (cos 1, sin 0). Angle pos *
 * freq_scale * base^(-2i/rope_dim), computed in double. No sections: every
 * pair takes the position (plain NEOX). */
static void hybrid_rope_table(const bt_config *c, int ctx_len, float *cos_, float *sin_)
{
    int half = c->rope_dim / 2;
    const int *s = c->rope_sections;
    int sect = s[0] + s[1] + s[2] + s[3];
    for (int i = 0; i < half; i++) {
        bool text = true;
        if (sect > 0) {
            int sector = i % sect;
            text = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                   (sector % 3 == 2 && sector < 3 * s[2]);
        }
        double freq = pow((double)c->rope_base, -2.0 * i / c->rope_dim) * c->rope_freq_scale;
        for (int p = 0; p < ctx_len; p++) {
            double a = text ? p * freq : 0.0;
            cos_[(size_t)p * half + i] = (float)cos(a);
            sin_[(size_t)p * half + i] = (float)sin(a);
        }
    }
}

/* A deepseek2 layer's attention weights: the q path, attn_kv_a_mqa and the
 * output projection on the backend; the per-head up-projections as f32 on
 * the host (the file's data when f32, else a dequantized copy), and the
 * router's selection bias. */
static int mla_upload(bt_engine *e, int l, const bt_layer_weights *L, layer_bufs *B_)
{
    const bt_config *c = &e->c;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, lat = (int64_t)c->kv_lora_rank + c->rope_dim;
    int rc;
    if (c->q_lora_rank > 0) {
        if ((rc = upload(e, &L->wq_a, c->q_lora_rank, c->dim, &B_->wq_a)) ||
            (rc = upload(e, &L->wq_b, qd, c->q_lora_rank, &B_->wq)))
            return rc;
    } else if ((rc = upload(e, &L->wq, qd, c->dim, &B_->wq))) {
        return rc;
    }
    if ((rc = upload(e, &L->wkv_a, lat, c->dim, &B_->wkv_a)) ||
        (rc = upload(e, &L->wo, c->dim, (int64_t)c->n_heads * c->mla_v_dim, &B_->wo)))
        return rc;
    const bt_weight *src[2] = { c->mla_split ? &L->wk_b : &L->wkv_b, c->mla_split ? &L->wv_b : &L->wkv_b };
    int nope = c->head_dim - c->rope_dim;
    size_t krow = bt_dtype_row_size(L->wk_b.type, nope), vrow = bt_dtype_row_size(L->wv_b.type, c->kv_lora_rank);
    if (c->mla_split && L->wk_b.type == L->wv_b.type && L->wk_b.type != BT_DT_F32 && krow && vrow) {
        /* the split layout's rows are what a matmul reads: dot them as
         * stored (a quantized copy read, not a dequantized f32 one 2-8x its size) */
        bt_mla_w_init(c, NULL, NULL, &e->m_w[l]);
        e->m_w[l].kq = L->wk_b.data;
        e->m_w[l].vq = L->wv_b.data;
        e->m_w[l].qtype = L->wk_b.type;
        e->m_w[l].krow = krow;
        e->m_w[l].vrow = vrow;
        goto bias;
    }
    const float *f[2];
    for (int i = 0; i < 2; i++) {
        if (src[i]->type == BT_DT_F32) { f[i] = src[i]->data; continue; }
        if (i == 1 && src[1] == src[0]) { f[1] = f[0]; continue; }
        size_t n = (size_t)(src[i]->rows * src[i]->cols);
        if (!(e->m_own[2 * l + i] = malloc(n * sizeof(float)))) return bt_error(BT_ENOMEM, "out of memory");
        bt_dequant_row(src[i]->type, src[i]->data, e->m_own[2 * l + i], (int64_t)n);
        f[i] = e->m_own[2 * l + i];
    }
    bt_mla_w_init(c, f[0], f[1], &e->m_w[l]);
bias:
    if (L->ffn_exp_probs_b.data) {
        if (!(e->m_bias[l] = malloc((size_t)c->n_expert * sizeof(float)))) return bt_error(BT_ENOMEM, "out of memory");
        bt_dequant_row(L->ffn_exp_probs_b.type, L->ffn_exp_probs_b.data, e->m_bias[l], c->n_expert);
    }
    return BT_OK;
}

/* The latent attention's run state and its rope tables. */
static int mla_alloc(bt_engine *e)
{
    const bt_config *c = &e->c;
    size_t B = (size_t)e->max_batch, H = (size_t)c->n_heads, kvl = (size_t)c->kv_lora_rank;
    size_t lat = kvl + (size_t)c->rope_dim, half = (size_t)c->rope_dim / 2;
    int rc;
    if ((c->q_lora_rank > 0 && (rc = alloc_f32(e, B * c->q_lora_rank, &e->m_qa))) ||
        (rc = alloc_f32(e, B * lat, &e->m_kva)) || (rc = alloc_f32(e, B * lat, &e->m_lat)) ||
        (rc = alloc_f32(e, B * H * lat, &e->m_qabs)) || (rc = alloc_f32(e, B * H * kvl, &e->m_ctxl)) ||
        (rc = alloc_f32(e, B * H * c->mla_v_dim, &e->m_ctx)))
        return bt_error(rc, "out of memory for the latent attention's run state (batch %zu)", B);
    e->m_cos = malloc((size_t)e->ctx_len * half * sizeof(float));
    e->m_sin = malloc((size_t)e->ctx_len * half * sizeof(float));
    e->m_threads = e->bi->host_for ? BT_MAX(1, bt_backend_threads(e->be)) : 1;
    e->m_scores = malloc((size_t)e->ctx_len * e->m_threads * sizeof(float));   /* a row per host thread */
    if (!e->m_cos || !e->m_sin || !e->m_scores) return bt_error(BT_ENOMEM, "out of memory");
    bt_mla_rope_table(c, e->ctx_len, e->m_cos, e->m_sin);
    e->m_kq_scale = bt_mla_kq_scale(c);
    return BT_OK;
}

int bt_engine_new_opts(const bt_model *m, const bt_engine_opts *o, bt_engine **out)
{
    *out = NULL;
    int ctx_len = o->ctx_len, max_batch = o->max_batch, n_threads = o->n_threads;
    if (!bt_model_has_weights(m))
        return bt_error(BT_EINVAL, "%s: the model has no weights (vocabulary-only file?)", m->path);
    if (o->n_layers < 0 || o->n_layers > m->cfg.n_layers)
        return bt_error(BT_EINVAL, "%d layers asked of a %d-layer model", o->n_layers, m->cfg.n_layers);
    bt_config cfg = m->cfg;
    if (o->n_layers > 0) cfg.n_layers = o->n_layers;
    if (o->mtp) {
        if (o->n_layers > 0 || o->block_size > 0)
            return bt_error(BT_EINVAL, "an MTP engine runs the whole block on one sequence");
        if (cfg.n_nextn <= 0)
            return bt_error(BT_EUNSUPPORTED, "%s: the model has no MTP (nextn) block to draft with (architecture %s, "
                            "nextn_predict_layers 0)", m->path, cfg.arch);
        if (m->nextn.missing)
            return bt_error(BT_EFORMAT, "%s: the MTP (nextn) block lacks tensor '%s'", m->path, m->nextn.missing);
        cfg.trunk_layers = cfg.n_layers;
        cfg.n_layers += 1;
    }
    if (cfg.head_dim > BT_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "%s: head dimension %d is above the supported %d", m->path, cfg.head_dim, BT_MAX_HEAD_DIM);
    const bt_config *c = &cfg;
    if (ctx_len <= 0) ctx_len = BT_MIN(c->ctx_len, BT_ENGINE_CTX_CAP);
    if (c->sliding_window > 0 && ctx_len > c->sliding_window && !(c->flags & BT_ARCH_SINKS))
        return bt_error(BT_EUNSUPPORTED, "%s: a context of %d tokens exceeds the model's sliding attention window "
                        "of %d, which bangtrace does not compute", m->path, ctx_len, c->sliding_window);
    if (max_batch <= 0) max_batch = 1;
    if (n_threads <= 0) n_threads = 1;
    bt_engine *e = calloc(1, sizeof(*e));
    if (!e) return bt_error(BT_ENOMEM, "out of memory");
    e->m = m; e->c = cfg; e->ctx_len = ctx_len; e->max_batch = max_batch;
    e->mtp = o->mtp;
    e->layer0 = o->mtp ? cfg.trunk_layers : 0;
    const bt_nextn_weights *nx = &m->nextn;
    const bt_weight *wemb = o->mtp && nx->embed_tokens.data ? &nx->embed_tokens : &m->token_embd;
    const bt_weight *wout = o->mtp && nx->shared_head_head.data ? &nx->shared_head_head : &m->output;
    e->embd_type = wemb->type;
    e->out_type = wout->type;
    e->block_size = o->block_size > 0 ? o->block_size : 0;
    e->n_blocks = e->block_size ? o->n_blocks : 0;
    e->n_slots = BT_MAX(1, o->n_slots);
    e->cache_rows = e->block_size ? (size_t)e->n_blocks * e->block_size : (size_t)ctx_len;
    int rc = BT_OK;
    if (e->block_size && e->n_blocks <= 0) { free(e); return bt_error(BT_EINVAL, "a paged KV cache needs at least one block"); }
    if (o->share_pool) e->be = o->share_pool->be;
    else if (o->backend) e->be = o->backend;
    else if ((rc = bt_backend_open(o->device, n_threads, &e->be))) { free(e); return rc; }
    else e->own_be = true;
    e->bi = e->be->iface;
    e->n_threads = bt_backend_threads(e->be);
    size_t B = (size_t)max_batch, q_dim = (size_t)c->n_heads * c->head_dim, kv_dim = (size_t)c->n_kv_heads * c->head_dim;
    size_t half = (size_t)c->head_dim / 2, nrm = ((size_t)2 * c->n_layers + 1) * c->dim;
    size_t mla_lat = (size_t)c->kv_lora_rank + (size_t)c->rope_dim;   /* a latent cache row (MLA) */
    /* the FFN's hidden buffers serve the dense FFN, one expert or the shared expert */
    size_t hid = (size_t)BT_MAX(c->hidden_dim, BT_MAX(c->expert_ff_len, c->shared_ff_len));
    float *host = NULL;
    e->want = calloc((size_t)BT_OP_COUNT * (c->n_layers + 1), sizeof(bool));
    e->lw = calloc((size_t)c->n_layers, sizeof(layer_bufs));
    e->rec_next = calloc((size_t)e->n_slots, sizeof(int));
    e->h_rows = calloc(B, sizeof(int32_t));
    if (!e->want || !e->lw || !e->rec_next || !e->h_rows) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    /* Offsets of the small per-layer vectors in vec_w. */
    size_t n_vec = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        layer_bufs *B_ = &e->lw[l];
        struct { const bt_weight *w; size_t *off; } v[] = {
            { &L->bq, &B_->bq }, { &L->bk, &B_->bk }, { &L->bv, &B_->bv }, { &L->bo, &B_->bo },
            { &L->attn_q_norm, &B_->q_norm }, { &L->attn_k_norm, &B_->k_norm },
            { &L->ssm_a, &B_->s_a }, { &L->ssm_dt, &B_->s_dt }, { &L->ssm_norm_w, &B_->s_norm },
            { &L->ssm_conv1d, &B_->s_conv }, { &L->attn_q_a_norm, &B_->qa_norm }, { &L->attn_kv_a_norm, &B_->kva_norm },
            { &L->attn_sinks, &B_->sinks }, { &L->ffn_gate_inp_b, &B_->r_b }, { &L->ffn_gate_exps_b, &B_->gate_b },
            { &L->ffn_up_exps_b, &B_->up_b }, { &L->ffn_down_exps_b, &B_->down_b },
        };
        for (size_t i = 0; i < BT_ARRAY_SIZE(v); i++) {
            *v[i].off = v[i].w->data ? n_vec : NO_VEC;
            if (v[i].w->data) n_vec += (size_t)(v[i].w->cols * v[i].w->rows);
        }
    }
    if (e->mtp) {
        e->mtp_enorm = n_vec;
        e->mtp_hnorm = n_vec + (size_t)c->dim;
        n_vec += 2 * (size_t)c->dim;
    }
    e->part_rope = (c->flags & BT_ARCH_HYBRID) != 0;
    e->hybrid = e->part_rope && !e->mtp;    /* an MTP engine runs no recurrent layer */
    if (e->hybrid) {
        e->l2_w = n_vec;
        n_vec += (size_t)c->ssm_head_k;
    }
    if (e->part_rope) {
        /* the ops a hybrid model needs beyond the others, on this backend */
        const char *lack = !e->bi->ssm_conv ? "ssm_conv (the causal conv1d)" : !e->bi->gdn_recur ? "gdn_recur (the delta rule)"
                         : !e->bi->gdn_gates ? "gdn_gates (beta and the decay)" : !e->bi->copy_cols ? "copy_cols"
                         : !e->bi->mul_sigmoid ? "mul_sigmoid (the attention output gate)"
                         : !e->bi->rope_neox_part ? "rope_neox_part (partial rope)" : NULL;
        if (lack) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: the gated delta net op %s (architecture %s) is not implemented by the %s "
                          "backend; run it on the cpu", m->path, lack, c->arch, bt_backend_name(e->be));
            goto fail;
        }
    }
    e->mla = (c->flags & BT_ARCH_MLA) != 0;
    if (e->mla) {
        /* the latent attention runs on the host over the backend's buffers */
        if (!e->bi->buf_host) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: the multi-head latent attention op mla_attention (architecture %s) is not "
                          "implemented by the %s backend; run it on the cpu", m->path, c->arch, bt_backend_name(e->be));
            goto fail;
        }
        if (e->block_size) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: batched forwards of multi-head latent attention (architecture %s) are "
                          "not supported yet", m->path, c->arch);
            goto fail;
        }
        e->m_w = calloc((size_t)c->n_layers, sizeof(bt_mla_w));
        e->m_own = calloc(2 * (size_t)c->n_layers, sizeof(float *));
        e->m_bias = calloc((size_t)c->n_layers, sizeof(float *));
        if (!e->m_w || !e->m_own || !e->m_bias) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    }
    /* The ops this model needs beyond the Llama set, on this backend. */
    if ((c->flags & BT_ARCH_SINKS) && !e->bi->attention_sinks) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: the attention op attention_sinks (per-head sink logits and the sliding "
                      "window, architecture %s) is not implemented by the %s backend; run it on the cpu", m->path,
                      c->arch, bt_backend_name(e->be));
        goto fail;
    }
    if ((c->flags & BT_ARCH_OAI_MOE) && !e->bi->swiglu_oai) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: the op swiglu_oai (the clamped SwiGLU, architecture %s) is not implemented "
                      "by the %s backend; run it on the cpu", m->path, c->arch, bt_backend_name(e->be));
        goto fail;
    }
    if (c->rope_yarn && e->part_rope) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: YaRN rope scaling with the partial rope of architecture %s is not supported",
                      m->path, c->arch);
        goto fail;
    }
    if (c->rope_kind == BT_ROPE_NEOX && !e->bi->rope_neox) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: NEOX rope (architecture %s) is not implemented by the %s backend",
                      m->path, c->arch, bt_backend_name(e->be));
        goto fail;
    }
    if (n_vec && !e->bi->add_row) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: bias add (architecture %s) is not implemented by the %s backend",
                      m->path, c->arch, bt_backend_name(e->be));
        goto fail;
    }
    if ((rc = alloc_f32(e, B * c->dim, &e->x)) || (rc = alloc_f32(e, B * c->dim, &e->xb)) ||
        (rc = alloc_f32(e, B * q_dim, &e->q)) || (rc = alloc_f32(e, B * kv_dim, &e->k)) ||
        (rc = alloc_f32(e, B * kv_dim, &e->v)) || (rc = alloc_f32(e, B * q_dim, &e->ctx)) ||
        (rc = alloc_f32(e, B * c->dim, &e->attn_out)) || (rc = alloc_f32(e, B * hid, &e->gate)) ||
        (rc = alloc_f32(e, B * hid, &e->up)) || (rc = alloc_f32(e, B * hid, &e->act)) ||
        (rc = alloc_f32(e, B * c->dim, &e->down)) ||
        (rc = alloc_f32(e, (size_t)(c->n_layers - e->layer0) * e->cache_rows * (e->mla ? mla_lat : kv_dim), &e->key_cache)) ||
        (rc = alloc_f32(e, e->mla ? 1 : (size_t)(c->n_layers - e->layer0) * e->cache_rows * kv_dim, &e->val_cache)) ||
        (rc = alloc_f32(e, (size_t)ctx_len * half, &e->rope_cos)) ||
        (rc = alloc_f32(e, (size_t)ctx_len * half, &e->rope_sin)) ||
        (rc = alloc_f32(e, nrm, &e->norm_w)) || (n_vec && (rc = alloc_f32(e, n_vec, &e->vec_w))) ||
        (rc = logits_reserve(e, 1))) {
        rc = bt_error(rc, "out of memory for run state (context %d, batch %d): %s", ctx_len, max_batch, bt_errmsg());
        goto fail;
    }
    /* Weights, read in place by the backend's kernels. */
    if ((rc = upload(e, wemb, c->n_vocab, c->dim, &e->w_embd)) ||
        (rc = upload(e, wout, c->n_vocab, c->dim, &e->w_out)))
        goto fail;
    if (e->mtp && ((rc = upload(e, &nx->eh_proj, c->dim, 2 * (int64_t)c->dim, &e->w_eh)) ||
                   (rc = alloc_f32(e, B * 2 * c->dim, &e->mtp_cat)) ||
                   !(e->mtp_host = malloc(B * 4 * c->dim * sizeof(float))))) {
        rc = rc ? rc : bt_error(BT_ENOMEM, "out of memory for the MTP block");
        goto fail;
    }
    for (int l = e->layer0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        layer_bufs *B_ = &e->lw[l];
        if (bt_layer_recurrent(c, l)) {
            int64_t C = bt_arch_dim(c, BT_DIM_SSM_CONV), V = bt_arch_dim(c, BT_DIM_SSM_V);
            if ((rc = upload(e, &L->ssm_qkv, C, c->dim, &B_->s_qkv)) || (rc = upload(e, &L->ssm_z, V, c->dim, &B_->s_z)) ||
                (rc = upload(e, &L->ssm_beta_w, (c->flags & BT_ARCH_SSM_BA) ? 2 * c->ssm_n_v : c->ssm_n_v, c->dim,
                             &B_->s_beta)) ||
                (!(c->flags & BT_ARCH_SSM_BA) && (rc = upload(e, &L->ssm_alpha, c->ssm_n_v, c->dim, &B_->s_alpha))) ||
                (rc = upload(e, &L->ssm_out_w, c->dim, V, &B_->s_out)))
                goto fail;
        } else if (e->mla) {
            if ((rc = mla_upload(e, l, L, B_))) goto fail;
        } else if ((rc = upload(e, &L->wq, (c->flags & BT_ARCH_ATTN_GATE) ? 2 * q_dim : q_dim, c->dim, &B_->wq)) ||
            (rc = upload(e, &L->wk, kv_dim, c->dim, &B_->wk)) ||
            (rc = upload(e, &L->wv, kv_dim, c->dim, &B_->wv)) || (rc = upload(e, &L->wo, c->dim, q_dim, &B_->wo)))
            goto fail;
        if (c->n_expert > 0 && l >= c->n_dense_lead) {
            if ((rc = moe_upload(e, L, B_))) goto fail;
        } else if ((rc = upload(e, &L->w_gate, c->hidden_dim, c->dim, &B_->w_gate)) ||
                   (rc = upload(e, &L->w_up, c->hidden_dim, c->dim, &B_->w_up)) ||
                   (rc = upload(e, &L->w_down, c->dim, c->hidden_dim, &B_->w_down)))
            goto fail;
    }
    if (c->n_expert > 0 && (rc = moe_alloc(e))) goto fail;
    if (e->mla && (rc = mla_alloc(e))) goto fail;
    if (e->hybrid && (rc = hybrid_alloc(e))) goto fail;
    if ((c->flags & BT_ARCH_SINKS) && (rc = alloc_f32(e, B * c->n_heads, &e->sink_p))) goto fail;
    /* the gated attention's doubled q projection (a hybrid's trunk or its MTP block) */
    if ((c->flags & BT_ARCH_ATTN_GATE) &&
        ((rc = alloc_f32(e, B * 2 * q_dim, &e->qg)) || (rc = alloc_f32(e, B * q_dim, &e->agate))))
        goto fail;
    /* RoPE tables, angles computed in double: pos * freq_scale *
     * base^(-2i/rope_dim) / freq_factor[i] (ggml's rope_ext with
     * ext_factor 0: linear scaling and Llama 3's rope_freqs divisors). Both
     * rope kinds use the same angle per pair; they differ in which two
     * dimensions form the pair. */
    host = malloc(BT_MAX(BT_MAX((size_t)2 * ctx_len * half, nrm), n_vec) * sizeof(float));
    if (half && !(e->rope_ff = malloc(half * sizeof(float)))) { free(host); host = NULL; }
    if (!host) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    for (size_t i = 0; i < half; i++) e->rope_ff[i] = 1.0f;
    if (c->has_rope_freqs && m->rope_freqs.data)
        bt_dequant_row(m->rope_freqs.type, m->rope_freqs.data, e->rope_ff, (int64_t)half);
    bt_numerics_rope_table(NULL, c->rope_base, c->head_dim, c->rope_freq_scale, e->rope_ff, ctx_len, host,
                           host + (size_t)ctx_len * half);
    if (e->part_rope) hybrid_rope_table(c, ctx_len, host, host + (size_t)ctx_len * half);
    if (c->rope_yarn) bt_gptoss_rope_table(c, ctx_len, host, host + (size_t)ctx_len * half);
    if ((rc = e->bi->set(e->be, e->rope_cos, 0, host, (size_t)ctx_len * half)) ||
        (rc = e->bi->set(e->be, e->rope_sin, 0, host + (size_t)ctx_len * half, (size_t)ctx_len * half)))
        goto fail;
    /* Biases and q/k norm weights as f32 vectors. */
    for (int l = 0; l < c->n_layers && n_vec; l++) {
        const bt_layer_weights *L = &m->layers[l];
        layer_bufs *B_ = &e->lw[l];
        struct { const bt_weight *w; size_t *off; } v[] = {
            { &L->bq, &B_->bq }, { &L->bk, &B_->bk }, { &L->bv, &B_->bv }, { &L->bo, &B_->bo },
            { &L->attn_q_norm, &B_->q_norm }, { &L->attn_k_norm, &B_->k_norm },
            { &L->ssm_a, &B_->s_a }, { &L->ssm_dt, &B_->s_dt }, { &L->ssm_norm_w, &B_->s_norm },
            { &L->ssm_conv1d, &B_->s_conv }, { &L->attn_q_a_norm, &B_->qa_norm }, { &L->attn_kv_a_norm, &B_->kva_norm },
            { &L->attn_sinks, &B_->sinks }, { &L->ffn_gate_inp_b, &B_->r_b }, { &L->ffn_gate_exps_b, &B_->gate_b },
            { &L->ffn_up_exps_b, &B_->up_b }, { &L->ffn_down_exps_b, &B_->down_b },
        };
        for (size_t i = 0; i < BT_ARRAY_SIZE(v); i++)
            if (*v[i].off != NO_VEC)
                bt_dequant_row(v[i].w->type, v[i].w->data, host + *v[i].off, v[i].w->cols * v[i].w->rows);
    }
    if (e->hybrid)
        for (int i = 0; i < c->ssm_head_k; i++) host[e->l2_w + i] = (float)(1.0 / sqrt((double)c->ssm_head_k));
    if (e->mtp) {
        bt_dequant_row(nx->enorm.type, nx->enorm.data, host + e->mtp_enorm, c->dim);
        bt_dequant_row(nx->hnorm.type, nx->hnorm.data, host + e->mtp_hnorm, c->dim);
    }
    if (n_vec && (rc = e->bi->set(e->be, e->vec_w, 0, host, n_vec))) goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        bt_dequant_row(m->layers[l].attn_norm.type, m->layers[l].attn_norm.data, host + (size_t)(2 * l) * c->dim, c->dim);
        bt_dequant_row(m->layers[l].ffn_norm.type, m->layers[l].ffn_norm.data, host + (size_t)(2 * l + 1) * c->dim, c->dim);
    }
    const bt_weight *onorm = e->mtp && nx->shared_head_norm.data ? &nx->shared_head_norm : &m->output_norm;
    bt_dequant_row(onorm->type, onorm->data, host + (size_t)2 * c->n_layers * c->dim, c->dim);
    if ((rc = e->bi->set(e->be, e->norm_w, 0, host, nrm))) goto fail;
    free(host);
    *out = e;
    return BT_OK;
fail:
    free(host);
    bt_engine_free(e);
    return rc;
}

void bt_engine_set_eval_cb(bt_engine *e, const bt_eval_cb *cb)
{
    e->has_cb = cb && cb->observe;
    memset(e->want, 0, (size_t)BT_OP_COUNT * (e->c.n_layers + 1) * sizeof(bool));
    if (e->want_extra) memset(e->want_extra, 0, (size_t)e->ext.n_extra * sizeof(bool));
    if (!e->has_cb) return;
    e->cb = *cb;
    for (int op = 0; op < BT_OP_COUNT; op++) {
        if (!bt_op_exists(&e->c, op)) continue;   /* never computed: never asked about */
        if (bt_op_is_layer_op(op)) {
            for (int l = e->layer0; l < e->c.n_layers; l++)
                *want_at(e, op, l) = bt_op_in_layer(&e->c, op, l) && (!cb->ask || cb->ask(cb->user, op, l));
        } else {
            *want_at(e, op, -1) = !cb->ask || cb->ask(cb->user, op, -1);
        }
    }
    for (int i = 0; i < e->ext.n_extra; i++)
        e->want_extra[i] = !cb->ask || cb->ask(cb->user, BT_OP_COUNT + i, e->ext.extra[i].layer);
}

int bt_engine_new_ext(const bt_model *m, int ctx_len, int max_batch, const bt_engine_ext *ext, bt_engine **out)
{
    *out = NULL;
    bt_engine *e = calloc(1, sizeof(*e));
    if (!e) { if (ext->free) ext->free(ext->impl); return bt_error(BT_ENOMEM, "out of memory"); }
    e->m = m; e->c = m->cfg; e->foreign = true; e->ext = *ext;
    if (ext->mtp) {             /* the block's layer after the trunk's (bt_engine_new_opts' .mtp) */
        e->c.trunk_layers = e->c.n_layers;
        e->c.n_layers += 1;
        e->layer0 = e->c.trunk_layers;
    }
    e->ctx_len = ctx_len > 0 ? ctx_len : BT_MIN(m->cfg.ctx_len, BT_ENGINE_CTX_CAP);
    e->max_batch = max_batch > 0 ? max_batch : 1;
    e->logit_cap = e->max_batch;
    e->logits = malloc((size_t)e->logit_cap * m->cfg.n_vocab * sizeof(float));
    e->logits_copy = true;     /* ours to free: there is no backend */
    e->want = calloc((size_t)BT_OP_COUNT * (e->c.n_layers + 1), sizeof(bool));
    e->want_extra = calloc((size_t)ext->n_extra + 1, sizeof(bool));
    if (!e->logits || !e->want || !e->want_extra) { bt_engine_free(e); return bt_error(BT_ENOMEM, "out of memory"); }
    *out = e;
    return BT_OK;
}

bool bt_engine_is_foreign(const bt_engine *e) { return e->foreign; }
void *bt_engine_foreign_impl(const bt_engine *e) { return e->foreign ? e->ext.impl : NULL; }
int bt_engine_n_extra(const bt_engine *e) { return e->ext.n_extra; }
const bt_extra_tensor *bt_engine_extra(const bt_engine *e, int i) { return i >= 0 && i < e->ext.n_extra ? &e->ext.extra[i] : NULL; }

bool bt_engine_tap_wanted(const bt_engine *e, int op, int layer)
{
    if (!e->has_cb) return false;
    if (op >= BT_OP_COUNT) return op - BT_OP_COUNT < e->ext.n_extra && e->want_extra[op - BT_OP_COUNT];
    if (op < 0 || layer < -1 || layer >= e->c.n_layers) return false;
    return *want_at((bt_engine *)e, op, layer);
}

bool bt_engine_tap_deliver(bt_engine *e, bt_tensor_view *t)
{
    if (!e->has_cb) return true;
    t->step = e->step;
    return e->cb.observe(e->cb.user, t);
}

/* ---- tensor handles ---- */

void bt_engine_routes_deliver(bt_engine *e, int layer, int pos0, int T, int k, const int *experts, const float *weights)
{
    if (e->has_cb && e->cb.routes) e->cb.routes(e->cb.user, e->step, layer, pos0, T, k, experts, weights);
}

bool bt_engine_logits_all(const bt_engine *e) { return e->logits_all; }

int bt_tensor_stats(const bt_tensor_view *t, bt_tap_stats *out)
{
    const bt_tensor *h = t->tensor;
    if (t->stats) { *out = *t->stats; return BT_OK; }
    if (!h) {
        bt_stats_compute(t->data, t->rows, t->width, t->pos0, out);
        return BT_OK;
    }
    return h->be->iface->stats(h->be, h->buf, h->off, t->rows, t->width, t->pos0, out);
}

int bt_tensor_read(const bt_tensor_view *t, int row0, int n, float *dst)
{
    if (row0 < 0 || n < 0 || row0 + n > t->rows)
        return bt_error(BT_ERANGE, "rows %d..%d of a %d-row tensor", row0, row0 + n - 1, t->rows);
    size_t w = (size_t)t->width;
    const bt_tensor *h = t->tensor;
    if (!h) {
        memcpy(dst, t->data + (size_t)row0 * w, (size_t)n * w * sizeof(float));
        return BT_OK;
    }
    return h->be->iface->read(h->be, h->buf, h->off + (size_t)row0 * w, (size_t)n * w, dst);
}

int bt_tensor_mutate(const bt_tensor_view *t, const bt_mutation *m, long *changed)
{
    *changed = 0;
    const bt_tensor *h = t->tensor;
    if (!h) {
        *changed = bt_mutation_apply_host(t->data, t->width, m);
        return BT_OK;
    }
    const struct bt_backend_i *bi = h->be->iface;
    if (bi->inject) return bi->inject(h->be, h->buf, h->off, t->width, m, changed);
    /* No device-side hook: bring the affected rows over, mutate, put back. */
    if (m->row0 >= m->row1) return BT_OK;
    size_t w = (size_t)t->width, n = (size_t)(m->row1 - m->row0) * w;
    float *rows = malloc(n * sizeof(float));
    if (!rows) return bt_error(BT_ENOMEM, "out of memory");
    size_t off = h->off + (size_t)m->row0 * w;
    bt_mutation local = *m;
    local.row0 = 0; local.row1 = m->row1 - m->row0; local.pos0 = m->pos0 + m->row0;
    int rc = bi->read(h->be, h->buf, off, n, rows);
    if (rc == BT_OK) {
        *changed = bt_mutation_apply_host(rows, t->width, &local);
        if (*changed) rc = bi->set(h->be, h->buf, off, rows, n);
    }
    free(rows);
    return rc;
}

/* Hand a freshly computed tensor to the tap, one view per sequence of the
 * forward (its rows; the logits: its logit rows); false means cancel. */
static bool tap(bt_engine *e, int op, int layer, bt_buf *buf, int width)
{
    const bt_tap_stats *pre = e->fused_op == op && e->fused_layer == layer && e->fused_buf == buf ? &e->fused_st : NULL;
    e->fused_op = -1;
    if (!*want_at(e, op, layer)) return true;
    float *host = e->bi->buf_host ? e->bi->buf_host(e->be, buf) : NULL;
    for (int s = 0; s < e->n_run; s++) {
        const seq_run *q = &e->run[s];
        int row0 = op == BT_OP_LOGITS ? q->lrow0 : q->row0, rows = op == BT_OP_LOGITS ? q->lrows : q->T;
        int pos0 = op == BT_OP_LOGITS ? q->pos0 + q->T - q->lrows : q->pos0;
        size_t off = (size_t)row0 * width;
        bt_tensor h = { .be = e->be, .buf = buf, .off = off };
        bt_tensor_view t = { .op = op, .layer = layer, .step = e->step, .pos0 = pos0, .rows = rows, .width = width,
                             .data = host ? host + off : NULL, .tensor = &h, .partial = rows != q->T, .stats = pre };
        e->tap_seq = s;
        if (!e->cb.observe(e->cb.user, &t)) return false;
    }
    return true;
}

/* Hand rows x width floats at offset off of buf to the tap, row 0 at pos0
 * (the recurrent states: pos0 0, a row per state row), with their
 * statistics when the op that wrote them took them (st, else NULL). */
static bool tap_at(bt_engine *e, int seq, int op, int layer, bt_buf *buf, size_t off, int rows, int pos0, int width,
                   const bt_tap_stats *st)
{
    if (!*want_at(e, op, layer)) return true;
    e->tap_seq = seq;
    bt_tensor h = { .be = e->be, .buf = buf, .off = off };
    float *host = e->bi->buf_host ? e->bi->buf_host(e->be, buf) : NULL;
    bt_tensor_view t = { .op = op, .layer = layer, .step = e->step, .pos0 = pos0, .rows = rows, .width = width,
                         .data = host ? host + off : NULL, .tensor = &h, .stats = st };
    return e->cb.observe(e->cb.user, &t);
}

/* Hand one expert's part of an op to the tap: n rows at the positions pos,
 * from the batch rows e->h_ids (ascending), one view per sequence that
 * routed rows to it. */
static bool tap_expert(bt_engine *e, int op, int layer, int expert, const int *pos, bt_buf *buf, int n, int width)
{
    if (!*want_at(e, op, layer)) return true;
    float *host = e->bi->buf_host ? e->bi->buf_host(e->be, buf) : NULL;
    for (int s = 0, i = 0; s < e->n_run && i < n; s++) {
        const seq_run *q = &e->run[s];
        int i0 = i;
        while (i < n && e->h_ids[i] < q->row0 + q->T) i++;
        if (i == i0) continue;
        size_t off = (size_t)i0 * width;
        bt_tensor h = { .be = e->be, .buf = buf, .off = off };
        bt_expert_rows er = { .expert = expert, .pos = pos + i0 };
        bt_tensor_view t = { .op = op, .layer = layer, .step = e->step, .pos0 = pos[i0], .rows = i - i0, .width = width,
                             .data = host ? host + off : NULL, .tensor = &h, .moe = &er };
        e->tap_seq = s;
        if (!e->cb.observe(e->cb.user, &t)) return false;
    }
    return true;
}

/* An op's output of n values stored as the profile's activation format
 * (act=f16 | bf16), right before its tap: the backend's num_round. */
static int num_store(bt_engine *e, bt_buf *buf, size_t n)
{
    if (!e->num_on || e->num.act == BT_NUM_F32) return BT_OK;
    return bt_backend_num_round(e->be, buf, 0, 1, n, e->num.act);
}

/* A matmul: the backend's num_matmul under the profile when there is one,
 * else its matmul. */
static int mm(bt_engine *e, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off, int T,
              bt_buf *out)
{
    if (!e->num_on) return e->bi->matmul(e->be, type, W, rows, cols, x, x_off, T, out);
    return bt_backend_num_matmul(e->be, &e->num, type, W, rows, cols, x, x_off, T, out);
}

/* A matmul whose output the tap of (op, layer) right after it observes as
 * it is: in a decode step of one sequence without a numerics profile, the
 * backend's matmul_stats takes the tap's statistics as it computes the
 * product (the threads that wrote the rows sweep them), for that tap. */
static int mm_tap(bt_engine *e, int op, int layer, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x,
                  size_t x_off, int T, bt_buf *out)
{
    if (e->num_on || !e->has_cb || !e->bi->matmul_stats || e->n_run != 1 || e->run[0].T != 1 || T != 1 ||
        !*want_at(e, op, layer))
        return mm(e, type, W, rows, cols, x, x_off, T, out);
    int rc = e->bi->matmul_stats(e->be, type, W, rows, cols, x, x_off, T, out, e->run[0].pos0, &e->fused_st);
    if (rc == BT_OK) { e->fused_op = op; e->fused_layer = layer; e->fused_buf = out; }
    return rc;
}

#define TAPX(op, layer, x, pos, buf, n, width) do { \
        if ((rc = num_store(e, buf, (size_t)(n) * (width)))) return rc; \
        if (e->has_cb && !tap_expert(e, op, layer, x, pos, buf, n, width)) return BT_EINVAL; } while (0)
/* The launches that follow compute (layer, op): the backend's device
 * activity records join that op (one predictable branch when off). */
#define MARK(op, layer) do { if (e->marking) OP(bi->mark(be, e->step, layer, op)); } while (0)
/* rmsnorm of x into xb with the norm weights at w_off: the backend's
 * num_rmsnorm when the profile changes the accumulation. */
static int norm(bt_engine *e, size_t w_off, int T)
{
    const bt_config *c = &e->c;
    if (!e->num_on || !bt_numerics_norm_custom_n(&e->num))
        return e->bi->rmsnorm(e->be, e->xb, e->x, e->norm_w, w_off, T, c->dim, c->norm_eps);
    return bt_backend_num_rmsnorm(e->be, &e->num, e->xb, e->x, e->norm_w, w_off, T, c->dim, c->norm_eps);
}

#define TAP(op, layer, buf, width) do { \
        MARK(op, layer); \
        OP(num_store(e, buf, (size_t)T * (width))); \
        if (e->has_cb && !tap(e, op, layer, buf, width)) { e->step++; return BT_EINVAL; } } while (0)
/* An op; a backend error ends the forward (the step still counts). */
#define OP(call) do { int rc_ = (call); if (rc_) { e->step++; return rc_; } } while (0)

/* The position of row r of the forward running now. */
static int row_pos(const bt_engine *e, int r)
{
    for (int s = 0; s < e->n_run; s++)
        if (r < e->run[s].row0 + e->run[s].T) return e->run[s].pos0 + r - e->run[s].row0;
    return -1;
}

/* A SwiGLU FFN of n rows of x through gate/up (rows hid) and down into
 * e->down, tapping its four tensors as expert x's (x < 0: the shared
 * expert, not tapped on its own: it is part of ffn_moe_out). gpt-oss
 * (BT_ARCH_OAI_MOE): each product plus expert x's bias row (vec_w offsets
 * gb, ub, db of the layer's (n_expert, width) biases) and the clamped
 * SwiGLU. */
static int expert_ffn(bt_engine *e, int l, int x, const int *pos, bt_buf *wg, bt_buf *wu, bt_buf *wd, int wtype_g,
                      int wtype_u, int wtype_d, int hid, bt_buf *in, int n, size_t gb, size_t ub, size_t db)
{
    const struct bt_backend_i *bi = e->bi;
    int dim = e->c.dim;
    int rc;
    bool oai = x >= 0 && (e->c.flags & BT_ARCH_OAI_MOE);
    if ((rc = mm(e, wtype_g, wg, hid, dim, in, 0, n, e->gate))) return rc;
    if (oai && (rc = bi->add_row(e->be, e->gate, n, hid, e->vec_w, gb + (size_t)x * hid))) return rc;
    if (x >= 0) TAPX(BT_OP_FFN_GATE, l, x, pos, e->gate, n, hid);
    if ((rc = mm(e, wtype_u, wu, hid, dim, in, 0, n, e->up))) return rc;
    if (oai && (rc = bi->add_row(e->be, e->up, n, hid, e->vec_w, ub + (size_t)x * hid))) return rc;
    if (x >= 0) TAPX(BT_OP_FFN_UP, l, x, pos, e->up, n, hid);
    if (oai) rc = bi->swiglu_oai(e->be, e->act, e->gate, e->up, (size_t)n * hid, BT_GPTOSS_SWIGLU_ALPHA,
                                 BT_GPTOSS_SWIGLU_LIMIT);
    else rc = bi->swiglu(e->be, e->act, e->gate, e->up, (size_t)n * hid);
    if (rc) return rc;
    if (x >= 0) TAPX(BT_OP_FFN_ACT, l, x, pos, e->act, n, hid);
    if ((rc = mm(e, wtype_d, wd, dim, hid, e->act, 0, n, e->down))) return rc;
    if (oai && (rc = bi->add_row(e->be, e->down, n, dim, e->vec_w, db + (size_t)x * dim))) return rc;
    if (x >= 0) TAPX(BT_OP_FFN_DOWN, l, x, pos, e->down, n, dim);
    return BT_OK;
}

/* The mixture-of-experts FFN of layer l over e->xb (T rows): router
 * logits (tapped as ffn_gate_inp), routing on the host (moe.c), then per
 * expert with tokens: gather its rows, its SwiGLU FFN on its own weight
 * slab, and the weighted sum into moe_out; the shared expert on every row;
 * moe_out is tapped as ffn_moe_out. Decode reads only the routed experts'
 * weights. Returns BT_OK, a backend error, or BT_EINVAL (a tap cancelled). */
static int moe_ffn(bt_engine *e, int l, int T)
{
    const bt_config *c = &e->c;
    const bt_layer_weights *L = &e->m->layers[l];
    const layer_bufs *W = &e->lw[l];
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    int dim = c->dim, E = c->n_expert, k = c->n_expert_used, eh = c->expert_ff_len;
    int rc;
    if (e->marking && (rc = bi->mark(be, e->step, l, BT_OP_FFN_GATE_INP))) return rc;
    if ((rc = mm(e, L->ffn_gate_inp.type, W->w_gate_inp, E, dim, e->xb, 0, T, e->router)))
        return rc;
    if (W->r_b != NO_VEC && (rc = bi->add_row(be, e->router, T, E, e->vec_w, W->r_b))) return rc;
    if ((rc = num_store(e, e->router, (size_t)T * E))) return rc;
    if (e->has_cb && !tap(e, BT_OP_FFN_GATE_INP, l, e->router, E)) return BT_EINVAL;
    /* the choice is made from what the tap left (an injected router routes) */
    if ((rc = bi->read(be, e->router, 0, (size_t)T * E, e->h_router))) return rc;
    bt_moe_gate g = { .sigmoid = c->gating == 2, .bias = e->m_bias ? e->m_bias[l] : NULL, .n_group = c->n_expert_groups,
                      .topk_group = c->n_group_used, .norm = c->norm_topk_prob, .scale = c->expert_scale };
    for (int t = 0; t < T; t++) {
        if (e->mla)   /* deepseek2's gating options */
            bt_moe_route_gate(e->h_router + (size_t)t * E, E, k, &g, e->h_probs, e->h_sel + (size_t)t * k,
                              e->h_w + (size_t)t * k);
        else if (c->flags & BT_ARCH_OAI_MOE)   /* gpt-oss: softmax over the chosen experts' logits */
            bt_moe_route_topk_softmax(e->h_router + (size_t)t * E, E, k, e->h_sel + (size_t)t * k, e->h_w + (size_t)t * k);
        else
            bt_moe_route(e->h_router + (size_t)t * E, E, k, c->norm_topk_prob, 1.0f, e->h_probs,
                         e->h_sel + (size_t)t * k, e->h_w + (size_t)t * k);
    }
    if (e->has_cb && e->cb.routes)
        for (int s = 0; s < e->n_run; s++) {
            const seq_run *q = &e->run[s];
            e->tap_seq = s;
            e->cb.routes(e->cb.user, e->step, l, q->pos0, q->T, k, e->h_sel + (size_t)q->row0 * k, e->h_w + (size_t)q->row0 * k);
        }
    if (e->marking && (rc = bi->mark(be, e->step, l, BT_OP_FFN_MOE_OUT))) return rc;
    if ((rc = bi->set(be, e->moe_out, 0, e->h_zero, (size_t)T * dim))) return rc;
    int *pos_l = e->h_pos + (size_t)l * e->max_batch * k;
    int used = 0;
    for (int x = 0; x < E; x++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (e->h_sel[t * k + j] == x) { e->h_ids[n] = t; e->h_ew[n] = e->h_w[t * k + j]; n++; }
        if (!n) continue;
        int *pos = pos_l + used;
        for (int i = 0; i < n; i++) pos[i] = row_pos(e, e->h_ids[i]);
        used += n;
        if ((rc = bi->get_rows(be, BT_DT_F32, e->xb, dim, e->h_ids, n, e->xe))) return rc;
        bt_weight g = bt_moe_expert_view(&L->ffn_gate_exps, x), u = bt_moe_expert_view(&L->ffn_up_exps, x),
                  d = bt_moe_expert_view(&L->ffn_down_exps, x);
        if ((rc = expert_ffn(e, l, x, pos, W->e_gate[x], W->e_up[x], W->e_down[x], g.type, u.type, d.type, eh, e->xe, n,
                             W->gate_b, W->up_b, W->down_b)))
            return rc;
        if ((rc = bi->scatter_add(be, e->moe_out, e->down, e->h_ids, e->h_ew, n, dim))) return rc;
    }
    if (W->sh_gate) {
        int sh = c->shared_ff_len;
        if ((rc = expert_ffn(e, l, -1, NULL, W->sh_gate, W->sh_up, W->sh_down, L->ffn_gate_shexp.type,
                             L->ffn_up_shexp.type, L->ffn_down_shexp.type, sh, e->xb, T, NO_VEC, NO_VEC, NO_VEC)))
            return rc;
        for (int t = 0; t < T; t++) { e->h_ids[t] = t; e->h_ew[t] = 1.0f; }
        if (W->sh_gate_inp) {   /* qwen2moe: the shared expert scaled by sigmoid(x . w) */
            if ((rc = mm(e, L->ffn_gate_inp_shexp.type, W->sh_gate_inp, 1, dim, e->xb, 0, T, e->router)))
                return rc;
            if ((rc = bi->read(be, e->router, 0, (size_t)T, e->h_router))) return rc;
            for (int t = 0; t < T; t++) e->h_ew[t] = 1.0f / (1.0f + expf(-e->h_router[t]));
        }
        if ((rc = bi->scatter_add(be, e->moe_out, e->down, e->h_ids, e->h_ew, T, dim))) return rc;
    }
    if ((rc = num_store(e, e->moe_out, (size_t)T * dim))) return rc;
    if (e->has_cb && !tap(e, BT_OP_FFN_MOE_OUT, l, e->moe_out, dim)) return BT_EINVAL;
    return BT_OK;
}

/* One gated delta net layer over e->xb (T rows, the attn_norm output):
 * leaves the layer's output projection in e->attn_out. Prefill runs the
 * recurrence token by token (the same arithmetic as T decode steps, so a
 * prefill and a decode give the same state); the conv and delta-rule
 * states carry over between forwards. Returns BT_OK, a backend error or
 * BT_EINVAL (a tap cancelled). */
#define GTAP(op, buf, width) do { \
        if ((rc = num_store(e, buf, (size_t)T * (width)))) return rc; \
        if (e->has_cb && !tap(e, op, l, buf, width)) return BT_EINVAL; } while (0)
/* Sequence q's rows of an activation buffer: its view, or the buffer when
 * it starts at row 0. */
#define SV(q, which, buf) ((q)->view[which] ? (q)->view[which] : (buf))
static int gdn_layer(bt_engine *e, int l, int T)
{
    const bt_config *c = &e->c;
    const bt_layer_weights *L = &e->m->layers[l];
    const layer_bufs *W = &e->lw[l];
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    int dim = c->dim, nk = c->ssm_n_k, nv = c->ssm_n_v, dk = c->ssm_head_k, dv = c->ssm_head_v, K = c->ssm_kernel;
    int C = (int)bt_arch_dim(c, BT_DIM_SSM_CONV), KD = nk * dk, V = nv * dv;
    size_t st_per = (size_t)nv * dk * dv, cs_per = (size_t)(K - 1) * C, Ls = (size_t)c->n_layers;
    int rc;
#define GMARK(op) do { if (e->marking && (rc = bi->mark(be, e->step, l, op))) return rc; } while (0)
    GMARK(BT_OP_SSM_QKV);
    if ((rc = mm(e, L->ssm_qkv.type, W->s_qkv, C, dim, e->xb, 0, T, e->s_qkv))) return rc;
    GTAP(BT_OP_SSM_QKV, e->s_qkv, C);
    GMARK(BT_OP_SSM_Z);
    if ((rc = mm(e, L->ssm_z.type, W->s_z, V, dim, e->xb, 0, T, e->s_z))) return rc;
    GTAP(BT_OP_SSM_Z, e->s_z, V);
    GMARK(BT_OP_SSM_BETA);
    bool ba = (c->flags & BT_ARCH_SSM_BA) != 0;
    if (ba) {   /* qwen3next: per key head [b (nv/nk), a (nv/nk)] in one projection, via s_core */
        int r = nv / nk;
        if ((rc = mm(e, L->ssm_beta_w.type, W->s_beta, 2 * nv, dim, e->xb, 0, T, e->s_core))) return rc;
        if ((rc = bi->copy_cols(be, e->s_beta, e->s_core, T, 2 * nv, 0, nk, r, 2 * r))) return rc;
        if ((rc = bi->copy_cols(be, e->s_decay, e->s_core, T, 2 * nv, r, nk, r, 2 * r))) return rc;
    } else {
        if ((rc = mm(e, L->ssm_beta_w.type, W->s_beta, nv, dim, e->xb, 0, T, e->s_beta))) return rc;
        if ((rc = mm(e, L->ssm_alpha.type, W->s_alpha, nv, dim, e->xb, 0, T, e->s_decay))) return rc;
    }
    if ((rc = bi->gdn_gates(be, e->s_beta, e->s_decay, e->vec_w, W->s_a, W->s_dt, T, nv))) return rc;
    GTAP(BT_OP_SSM_BETA, e->s_beta, nv);
    GMARK(BT_OP_SSM_DECAY);
    GTAP(BT_OP_SSM_DECAY, e->s_decay, nv);
    GMARK(BT_OP_SSM_CONV);
    for (int s = 0; s < e->n_run; s++) {   /* each sequence over its own slot's conv state */
        seq_run *q = &e->run[s];
        size_t cs_off = ((size_t)q->slot * Ls + l) * cs_per;
        if ((rc = bi->ssm_conv(be, SV(q, V_CONV, e->s_conv), SV(q, V_QKV, e->s_qkv), e->conv_state, cs_off, e->vec_w,
                               W->s_conv, q->T, C, K)))
            return rc;
        /* --numerics state=: the state as a cache of that dtype keeps it between forwards */
        if (e->num_on && e->num.state != BT_NUM_F32 &&
            (rc = bt_backend_num_round(be, e->conv_state, cs_off, 1, cs_per, e->num.state)))
            return rc;
    }
    GTAP(BT_OP_SSM_CONV, e->s_conv, C);
    for (int s = 0; s < e->n_run && e->has_cb; s++)
        if (!tap_at(e, s, BT_OP_SSM_CONV_STATE, l, e->conv_state, ((size_t)e->run[s].slot * Ls + l) * cs_per, K - 1, 0, C, NULL))
            return BT_EINVAL;
    GMARK(BT_OP_SSM_Q);
    if ((rc = bi->copy_cols(be, e->s_q, e->s_conv, T, C, 0, 1, KD, 0))) return rc;
    /* L2 norm per head: x / sqrt(sum x^2 + eps), llama.cpp's form: an
     * rmsnorm with eps / head_k and every weight 1 / sqrt(head_k) */
    if ((rc = bi->rmsnorm(be, e->s_q, e->s_q, e->vec_w, e->l2_w, T * nk, dk, c->norm_eps / dk))) return rc;
    GTAP(BT_OP_SSM_Q, e->s_q, KD);
    GMARK(BT_OP_SSM_K);
    if ((rc = bi->copy_cols(be, e->s_k, e->s_conv, T, C, KD, 1, KD, 0))) return rc;
    if ((rc = bi->rmsnorm(be, e->s_k, e->s_k, e->vec_w, e->l2_w, T * nk, dk, c->norm_eps / dk))) return rc;
    GTAP(BT_OP_SSM_K, e->s_k, KD);
    GMARK(BT_OP_SSM_V);
    if ((rc = bi->copy_cols(be, e->s_v, e->s_conv, T, C, 2 * KD, 1, V, 0))) return rc;
    GTAP(BT_OP_SSM_V, e->s_v, V);
    GMARK(BT_OP_SSM_CORE);
    /* A tapped state's statistics are taken by the op where the backend
     * can (swept by the threads that wrote it), unless a numerics profile
     * rounds the state after it */
    bool fuse = e->has_cb && bi->gdn_recur_stats && *want_at(e, BT_OP_SSM_STATE, l) &&
                !(e->num_on && e->num.state != BT_NUM_F32);
    for (int s = 0; s < e->n_run; s++) {   /* the delta rule over each sequence's slot */
        seq_run *q = &e->run[s];
        size_t st_off = ((size_t)q->slot * Ls + l) * st_per;
        if (fuse) rc = bi->gdn_recur_stats(be, SV(q, V_CORE, e->s_core), SV(q, V_SQ, e->s_q), SV(q, V_SK, e->s_k),
                                           SV(q, V_SV, e->s_v), SV(q, V_DECAY, e->s_decay), SV(q, V_BETA, e->s_beta),
                                           e->ssm_state, st_off, q->T, nk, nv, dk, dv, ba, &q->st);
        else rc = bi->gdn_recur(be, SV(q, V_CORE, e->s_core), SV(q, V_SQ, e->s_q), SV(q, V_SK, e->s_k), SV(q, V_SV, e->s_v),
                                SV(q, V_DECAY, e->s_decay), SV(q, V_BETA, e->s_beta), e->ssm_state, st_off, q->T, nk, nv,
                                dk, dv, ba);
        if (rc) return rc;
        if (e->num_on && e->num.state != BT_NUM_F32 &&
            (rc = bt_backend_num_round(be, e->ssm_state, st_off, 1, st_per, e->num.state)))
            return rc;
    }
    GTAP(BT_OP_SSM_CORE, e->s_core, V);
    for (int s = 0; s < e->n_run && e->has_cb; s++)
        if (!tap_at(e, s, BT_OP_SSM_STATE, l, e->ssm_state, ((size_t)e->run[s].slot * Ls + l) * st_per, nv * dk, 0, dv, fuse ? &e->run[s].st : NULL))
            return BT_EINVAL;
    GMARK(BT_OP_SSM_NORM);
    if ((rc = bi->rmsnorm(be, e->s_norm, e->s_core, e->vec_w, W->s_norm, T * nv, dv, c->norm_eps))) return rc;
    if ((rc = bi->swiglu(be, e->s_norm, e->s_z, e->s_norm, (size_t)T * V))) return rc;
    GTAP(BT_OP_SSM_NORM, e->s_norm, V);
    GMARK(BT_OP_SSM_OUT);
    if ((rc = mm_tap(e, BT_OP_SSM_OUT, l, L->ssm_out_w.type, W->s_out, dim, V, e->s_norm, 0, T, e->attn_out))) return rc;
    GTAP(BT_OP_SSM_OUT, e->attn_out, dim);
#undef GMARK
    return BT_OK;
}
#undef GTAP

static void state_sizes(const bt_engine *e, size_t *ns, size_t *nc);

/* bt_mla_runner's for_each: the backend's host threads. */
static void mla_for_each(void *ctx, int n, void (*fn)(void *arg, int i, int ith), void *arg)
{
    bt_engine *e = ctx;
    e->bi->host_for(e->be, n, fn, arg);
}

/* One multi-head latent attention layer over e->xb (T rows of one
 * sequence): leaves the output projection in e->attn_out. The
 * projections and norms run on the backend, rope, the cache append and the
 * latent attention on the host (mla.c) over the buffers' host memory. */
#define MTAP(op, buf, width) do { \
        if ((rc = num_store(e, buf, (size_t)T * (width)))) return rc; \
        if (e->has_cb && !tap(e, op, l, buf, width)) return BT_EINVAL; } while (0)
#define MMARK(op) do { if (e->marking && (rc = bi->mark(be, e->step, l, op))) return rc; } while (0)
static int mla_layer(bt_engine *e, int l, int T)
{
    const bt_config *c = &e->c;
    const bt_layer_weights *L = &e->m->layers[l];
    const layer_bufs *W = &e->lw[l];
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    int dim = c->dim, H = c->n_heads, hd = c->head_dim, nr = c->rope_dim, kvl = c->kv_lora_rank, lat = kvl + nr;
    int qd = H * hd, ql = c->q_lora_rank, vd = c->mla_v_dim, pos0 = e->run[0].pos0;
    int rc;
    if (ql > 0) {
        MMARK(BT_OP_ATTN_Q_A);
        if ((rc = mm(e, L->wq_a.type, W->wq_a, ql, dim, e->xb, 0, T, e->m_qa))) return rc;
        MTAP(BT_OP_ATTN_Q_A, e->m_qa, ql);
        MMARK(BT_OP_ATTN_Q_A_NORM);
        if ((rc = bi->rmsnorm(be, e->m_qa, e->m_qa, e->vec_w, W->qa_norm, T, ql, c->norm_eps))) return rc;
        MTAP(BT_OP_ATTN_Q_A_NORM, e->m_qa, ql);
        MMARK(BT_OP_ATTN_Q);
        if ((rc = mm(e, L->wq_b.type, W->wq, qd, ql, e->m_qa, 0, T, e->q))) return rc;
    } else {
        MMARK(BT_OP_ATTN_Q);
        if ((rc = mm(e, L->wq.type, W->wq, qd, dim, e->xb, 0, T, e->q))) return rc;
    }
    float *q = bi->buf_host(be, e->q), *kva = bi->buf_host(be, e->m_kva), *lr = bi->buf_host(be, e->m_lat);
    float *vw = bi->buf_host(be, e->vec_w), *qabs = bi->buf_host(be, e->m_qabs), *ctxl = bi->buf_host(be, e->m_ctxl);
    float *ctx = bi->buf_host(be, e->m_ctx), *cache = bi->buf_host(be, e->key_cache);
    bt_mla_rope(c, q, T, (size_t)qd, H, (size_t)hd, (size_t)(hd - nr), pos0, e->m_cos, e->m_sin);
    MTAP(BT_OP_ATTN_Q, e->q, qd);
    MMARK(BT_OP_ATTN_KV_A);
    if ((rc = mm(e, L->wkv_a.type, W->wkv_a, lat, dim, e->xb, 0, T, e->m_kva))) return rc;
    MTAP(BT_OP_ATTN_KV_A, e->m_kva, lat);
    /* the latent row: rmsnorm of the first kv_lora (ggml: the mean square
     * summed in double), the rope part rotated */
    MMARK(BT_OP_ATTN_KV_LATENT);
    const float *nw = vw + W->kva_norm;
    for (int t = 0; t < T; t++) {
        const float *x = kva + (size_t)t * lat;
        float *o = lr + (size_t)t * lat;
        double ss = 0;
        for (int i = 0; i < kvl; i++) ss += (double)x[i] * x[i];
        float sc = 1.0f / sqrtf((float)(ss / kvl) + c->norm_eps);
        for (int i = 0; i < kvl; i++) o[i] = (x[i] * sc) * nw[i];
        for (int i = kvl; i < lat; i++) o[i] = x[i];
    }
    bt_mla_rope(c, lr, T, (size_t)lat, 1, (size_t)lat, (size_t)kvl, pos0, e->m_cos, e->m_sin);
    /* --numerics kv=: the latent rows as the cache stores them (the tap is the cache write) */
    if (e->num_on && e->num.kv != BT_NUM_F32 && (rc = bt_backend_num_round(be, e->m_lat, 0, (size_t)T, (size_t)lat, e->num.kv)))
        return rc;
    MTAP(BT_OP_ATTN_KV_LATENT, e->m_lat, lat);
    /* the cache append after the tap: an injected latent is what it carries */
    float *slab = cache + (size_t)(l - e->layer0) * e->cache_rows * lat;   /* an MTP engine caches its block only */
    memcpy(slab + (size_t)pos0 * lat, lr, (size_t)T * lat * sizeof(float));
    /* per (row, head) on the backend's host threads; one thread: in turn, here */
    bt_mla_runner run = { e->m_threads > 1 ? mla_for_each : NULL, e };
    MMARK(BT_OP_ATTN_Q_ABS);
    bt_mla_absorb(c, &e->m_w[l], q, T, qabs, &run);
    MTAP(BT_OP_ATTN_Q_ABS, e->m_qabs, H * lat);
    MMARK(BT_OP_ATTN_CTX_LATENT);
    bt_mla_attend(c, qabs, slab, T, pos0, e->m_kq_scale, e->m_scores, (size_t)e->ctx_len, ctxl, &run);
    MTAP(BT_OP_ATTN_CTX_LATENT, e->m_ctxl, H * kvl);
    MMARK(BT_OP_ATTN_CTX);
    bt_mla_up_v(c, &e->m_w[l], ctxl, T, ctx, &run);
    MTAP(BT_OP_ATTN_CTX, e->m_ctx, H * vd);
    MMARK(BT_OP_ATTN_OUTPUT);
    if ((rc = mm(e, L->wo.type, W->wo, dim, H * vd, e->m_ctx, 0, T, e->attn_out))) return rc;
    MTAP(BT_OP_ATTN_OUTPUT, e->attn_out, dim);
    return BT_OK;
}
#undef MTAP
#undef MMARK

/* A sequence's recurrent states (its slot's): position 0 starts them afresh
 * (zero states), any other position must be the next one (there is no
 * rollback yet: speculative drafts, rewinds are refused), unless the
 * caller keeps them as they are (BT_SEQ_STATE_KEEP: the batched server's
 * "slot not reset" fault). */
static int hybrid_begin(bt_engine *e, const seq_run *q)
{
    int *next = &e->rec_next[q->slot];
    if (q->state == BT_SEQ_STATE_KEEP) {
        /* whatever the slot holds */
    } else if (q->pos0 == 0) {
        size_t ns, nc;
        state_sizes(e, &ns, &nc);
        float *hs = e->bi->buf_host ? e->bi->buf_host(e->be, e->ssm_state) : NULL;
        float *hc = e->bi->buf_host ? e->bi->buf_host(e->be, e->conv_state) : NULL;
        if (hs && hc) {
            /* a host backend's states cleared in place (a zeroed copy of
             * every layer's state, 19 MB at Qwen3.5-0.8B's shapes, was a
             * prefill's 2% at 128 tokens) */
            memset(hs + (size_t)q->slot * ns, 0, ns * sizeof(float));
            memset(hc + (size_t)q->slot * nc, 0, nc * sizeof(float));
            *next = q->pos0 + q->T;
            return BT_OK;
        }
        float *z = calloc(BT_MAX(ns, nc) + 1, sizeof(float));
        if (!z) return bt_error(BT_ENOMEM, "out of memory");
        int rc = e->bi->set(e->be, e->ssm_state, (size_t)q->slot * ns, z, ns);
        if (rc == BT_OK) rc = e->bi->set(e->be, e->conv_state, (size_t)q->slot * nc, z, nc);
        free(z);
        if (rc) return rc;
    } else if (q->pos0 != *next) {
        return bt_error(BT_EUNSUPPORTED, "a forward at position %d, but the recurrent state of this hybrid model is at "
                        "position %d: it cannot be rolled back or skipped ahead (start again at 0)", q->pos0, *next);
    }
    *next = q->pos0 + q->T;
    return BT_OK;
}

static int forward_ext(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    if (T > e->logit_cap) {
        float *nl = realloc(e->logits, (size_t)T * e->c.n_vocab * sizeof(float));
        if (!nl) return bt_error(BT_ENOMEM, "out of memory for %d logit rows", T);
        e->logits = nl;
        e->logit_cap = T;
    }
    int step = e->step;
    int rc = e->ext.forward(e->ext.impl, e, tokens, T, pos0, e->logits);
    e->step++;
    if (rc == BT_OK) e->logit_rows = T;
    /* the seam's contract: statistics queued in observe become final here */
    if (rc == BT_OK && e->has_cb && e->cb.flush && !e->cb.flush(e->cb.user, step)) return BT_EINVAL;
    return rc;
}

/* Positions pos0..pos0+T-1 and their tokens, checked against the context
 * and the vocabulary. */
static int check_rows(const bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    if (pos0 < 0 || pos0 + T > e->ctx_len)
        return bt_error(BT_ERANGE, "positions %d..%d exceed the context length %d (use --ctx)", pos0, pos0 + T - 1, e->ctx_len);
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= e->c.n_vocab)
            return bt_error(BT_ERANGE, "token id %d at position %d is outside the vocabulary (%d)", tokens[t], pos0 + t, e->c.n_vocab);
    return BT_OK;
}

/* Store sequence q's T rows of k and v (layer slab at slab): at its
 * positions, or through its block table a block's run at a time. */
static int store_kv(bt_engine *e, const seq_run *q, size_t slab, int kv_dim)
{
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    if (!q->blocks)
        return bi->kv_store(be, e->key_cache, e->val_cache, slab + (size_t)q->pos0 * kv_dim, SV(q, V_K, e->k),
                            SV(q, V_V, e->v), (size_t)q->T * kv_dim);
    int bs = e->block_size, rc = BT_OK;
    for (int p = q->pos0, run; p < q->pos0 + q->T && rc == BT_OK; p += run) {
        run = BT_MIN(bs - p % bs, q->pos0 + q->T - p);
        size_t row = (size_t)q->blocks[p / bs] * bs + p % bs, src = (size_t)(q->row0 + p - q->pos0) * kv_dim;
        bt_buf *kv = NULL, *vv = NULL;
        if ((rc = bi->buf_view(be, e->k, src, (size_t)run * kv_dim * sizeof(float), &kv)) == BT_OK &&
            (rc = bi->buf_view(be, e->v, src, (size_t)run * kv_dim * sizeof(float), &vv)) == BT_OK)
            rc = bi->kv_store(be, e->key_cache, e->val_cache, slab + row * kv_dim, kv, vv, (size_t)run * kv_dim);
        bi->buf_free(be, kv);
        bi->buf_free(be, vv);
    }
    return rc;
}

/* The MTP block's input: eh_proj([enorm(embed(tokens)); hnorm(hidden)]) into
 * the residual stream x (x holds the embeddings). The two normed halves are
 * joined row by row through the host (2 * dim floats a row, once a forward). */
static int mtp_input(bt_engine *e, int T)
{
    const bt_config *c = &e->c;
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    int dim = c->dim, l = e->layer0;
    const float *h = e->mtp_h;
    e->mtp_h = NULL;
    if (!h) { e->step++; return bt_error(BT_EINVAL, "an MTP forward needs its hidden rows (bt_engine_set_mtp_hidden)"); }
    MARK(BT_OP_MTP_ENORM, l);
    OP(bi->rmsnorm(be, e->xb, e->x, e->vec_w, e->mtp_enorm, T, dim, c->norm_eps));
    TAP(BT_OP_MTP_ENORM, l, e->xb, dim);
    MARK(BT_OP_MTP_HNORM, l);
    OP(bi->set(be, e->attn_out, 0, h, (size_t)T * dim));
    OP(bi->rmsnorm(be, e->down, e->attn_out, e->vec_w, e->mtp_hnorm, T, dim, c->norm_eps));
    TAP(BT_OP_MTP_HNORM, l, e->down, dim);
    MARK(BT_OP_MTP_EH_PROJ, l);
    float *en = e->mtp_host, *hn = en + (size_t)T * dim, *cat = hn + (size_t)T * dim;
    OP(bi->read(be, e->xb, 0, (size_t)T * dim, en));
    OP(bi->read(be, e->down, 0, (size_t)T * dim, hn));
    for (int t = 0; t < T; t++) {
        memcpy(cat + (size_t)t * 2 * dim, en + (size_t)t * dim, (size_t)dim * sizeof(float));
        memcpy(cat + (size_t)t * 2 * dim + dim, hn + (size_t)t * dim, (size_t)dim * sizeof(float));
    }
    OP(bi->set(be, e->mtp_cat, 0, cat, (size_t)T * 2 * dim));
    OP(mm(e, e->m->nextn.eh_proj.type, e->w_eh, dim, 2 * (int64_t)dim, e->mtp_cat, 0, T, e->x));
    TAP(BT_OP_MTP_EH_PROJ, l, e->x, dim);
    return BT_OK;
}

/* The forward of the sequences in e->run (T rows in all, each sequence's
 * rows consecutive from its row0): every op over all rows but the
 * position-dependent ones (rope, the cache, attention, the recurrence),
 * which run per sequence over its rows. */
static int forward_run(bt_engine *e, int T)
{
    const bt_config *c = &e->c;
    bt_backend *be = e->be;
    const struct bt_backend_i *bi = e->bi;
    const bt_model *m = e->m;
    int dim = c->dim, hd = c->head_dim, hidden = c->hidden_dim;
    int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    bool gated = (c->flags & BT_ARCH_ATTN_GATE) != 0, sinks = (c->flags & BT_ARCH_SINKS) != 0;
    const int32_t *tokens = e->run[0].tokens;
    e->fused_op = -1;   /* nothing a failed forward's matmul took is a tap's now */
    if (e->hybrid)
        for (int s = 0; s < e->n_run; s++) {
            int rc0 = hybrid_begin(e, &e->run[s]);
            if (rc0) return rc0;
        }
    MARK(BT_OP_TOKEN_EMBD, -1);
    OP(bi->get_rows(be, e->embd_type, e->w_embd, dim, tokens, T, e->x));
    TAP(BT_OP_TOKEN_EMBD, -1, e->x, dim);
    if (e->mtp) OP(mtp_input(e, T));

    for (int l = e->layer0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        const layer_bufs *W = &e->lw[l];
        MARK(BT_OP_ATTN_NORM, l);
        OP(norm(e, (size_t)(2 * l) * dim, T));
        TAP(BT_OP_ATTN_NORM, l, e->xb, dim);

        if (bt_layer_recurrent(c, l)) {   /* gated delta net */
            OP(gdn_layer(e, l, T));
            goto resid;
        }
        if (e->mla) {   /* multi-head latent attention */
            OP(mla_layer(e, l, T));
            goto resid;
        }
        MARK(BT_OP_ATTN_Q, l);
        if (gated) {   /* per head the query, then the gate */
            OP(mm(e, L->wq.type, W->wq, 2 * q_dim, dim, e->xb, 0, T, e->qg));
            OP(bi->copy_cols(be, e->q, e->qg, T, 2 * q_dim, 0, c->n_heads, hd, 2 * hd));
            MARK(BT_OP_ATTN_GATE, l);
            OP(bi->copy_cols(be, e->agate, e->qg, T, 2 * q_dim, hd, c->n_heads, hd, 2 * hd));
            TAP(BT_OP_ATTN_GATE, l, e->agate, q_dim);
        } else {
            OP(mm(e, L->wq.type, W->wq, q_dim, dim, e->xb, 0, T, e->q));
        }
        if (W->bq != NO_VEC) OP(bi->add_row(be, e->q, T, q_dim, e->vec_w, W->bq));
        MARK(BT_OP_ATTN_K, l);
        OP(mm(e, L->wk.type, W->wk, kv_dim, dim, e->xb, 0, T, e->k));
        if (W->bk != NO_VEC) OP(bi->add_row(be, e->k, T, kv_dim, e->vec_w, W->bk));
        MARK(BT_OP_ATTN_V, l);
        OP(mm(e, L->wv.type, W->wv, kv_dim, dim, e->xb, 0, T, e->v));
        if (W->bv != NO_VEC) OP(bi->add_row(be, e->v, T, kv_dim, e->vec_w, W->bv));
        if (W->q_norm != NO_VEC) {   /* qwen3: rmsnorm of each head before RoPE */
            MARK(BT_OP_ATTN_Q_NORM, l);
            OP(bi->rmsnorm(be, e->q, e->q, e->vec_w, W->q_norm, T * c->n_heads, hd, c->norm_eps));
            TAP(BT_OP_ATTN_Q_NORM, l, e->q, q_dim);
            MARK(BT_OP_ATTN_K_NORM, l);
            OP(bi->rmsnorm(be, e->k, e->k, e->vec_w, W->k_norm, T * c->n_kv_heads, hd, c->norm_eps));
            TAP(BT_OP_ATTN_K_NORM, l, e->k, kv_dim);
        }
        for (int s = 0; s < e->n_run; s++) {   /* rope at each sequence's positions */
            const seq_run *sq = &e->run[s];
            bt_buf *qb = SV(sq, V_Q, e->q), *kb = SV(sq, V_K, e->k);
            int n = sq->T, p0 = sq->pos0;
            if (e->part_rope) {   /* partial (sectioned) rope */
                MARK(BT_OP_ATTN_Q, l);
                OP(bi->rope_neox_part(be, qb, n, c->n_heads, hd, c->rope_dim, p0, e->rope_cos, e->rope_sin));
                MARK(BT_OP_ATTN_K, l);
                OP(bi->rope_neox_part(be, kb, n, c->n_kv_heads, hd, c->rope_dim, p0, e->rope_cos, e->rope_sin));
            } else if (c->rope_kind == BT_ROPE_NEOX) {
                MARK(BT_OP_ATTN_Q, l);
                OP(bi->rope_neox(be, qb, n, c->n_heads, hd, p0, e->rope_cos, e->rope_sin));
                MARK(BT_OP_ATTN_K, l);
                OP(bi->rope_neox(be, kb, n, c->n_kv_heads, hd, p0, e->rope_cos, e->rope_sin));
            } else {
                MARK(BT_OP_ATTN_Q, l);
                OP(bi->rope(be, qb, n, c->n_heads, hd, p0, e->rope_cos, e->rope_sin));
                MARK(BT_OP_ATTN_K, l);
                OP(bi->rope(be, kb, n, c->n_kv_heads, hd, p0, e->rope_cos, e->rope_sin));
            }
        }
        TAP(BT_OP_ATTN_Q, l, e->q, q_dim);
        TAP(BT_OP_ATTN_K, l, e->k, kv_dim);
        TAP(BT_OP_ATTN_V, l, e->v, kv_dim);
        /* Append to the cache after the taps, so an injected k/v is what the
         * cache carries forward, as a bad kernel's output would be. */
        size_t slab = (size_t)(l - e->layer0) * e->cache_rows * kv_dim;
        MARK(BT_OP_ATTN_CTX, l);   /* the cache append is attention's input */
        for (int s = 0; s < e->n_run; s++) OP(store_kv(e, &e->run[s], slab, kv_dim));
        if (e->num_on && e->num.kv != BT_NUM_F32) {   /* the cache as the profile stores it (one sequence) */
            size_t at = slab + (size_t)e->run[0].pos0 * kv_dim;
            OP(bt_backend_num_round(be, e->key_cache, at, (size_t)T, (size_t)kv_dim, e->num.kv));
            OP(bt_backend_num_round(be, e->val_cache, at, (size_t)T, (size_t)kv_dim, e->num.kv));
        }

        for (int s = 0; s < e->n_run; s++) {
            const seq_run *sq = &e->run[s];
            bt_attn_args aa = { .q = SV(sq, V_Q, e->q), .k_cache = e->key_cache, .v_cache = e->val_cache,
                                .cache_off = slab, .out = SV(sq, V_CTX, e->ctx), .T = sq->T, .pos0 = sq->pos0,
                                .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = hd,
                                .ctx_len = e->ctx_len, .blocks = sq->blocks, .block_size = e->block_size };
            if (sinks) {   /* gpt-oss: sink logits, the window on its sliding layers */
                aa.sinks = e->vec_w;
                aa.sinks_off = W->sinks;
                aa.window = bt_layer_swa(c, l) ? c->sliding_window : 0;
                aa.sink_p = SV(sq, V_SINK, e->sink_p);
                OP(bi->attention_sinks(be, &aa));
            } else if (e->num_on && bt_numerics_attn_custom_n(&e->num)) OP(bt_backend_num_attention(be, &e->num, &aa));
            else OP(bi->attention(be, &aa));
        }
        TAP(BT_OP_ATTN_CTX, l, e->ctx, q_dim);
        if (sinks) TAP(BT_OP_ATTN_SINK, l, e->sink_p, c->n_heads);
        if (gated) {
            MARK(BT_OP_ATTN_GATED, l);
            OP(bi->mul_sigmoid(be, e->ctx, e->agate, (size_t)T * q_dim));
            TAP(BT_OP_ATTN_GATED, l, e->ctx, q_dim);
        }

        MARK(BT_OP_ATTN_OUTPUT, l);
        if (W->bo != NO_VEC) {
            OP(mm(e, L->wo.type, W->wo, dim, q_dim, e->ctx, 0, T, e->attn_out));
            OP(bi->add_row(be, e->attn_out, T, dim, e->vec_w, W->bo));
        } else OP(mm_tap(e, BT_OP_ATTN_OUTPUT, l, L->wo.type, W->wo, dim, q_dim, e->ctx, 0, T, e->attn_out));
        TAP(BT_OP_ATTN_OUTPUT, l, e->attn_out, dim);
    resid:
        MARK(BT_OP_ATTN_RESID, l);
        OP(bi->add(be, e->x, e->attn_out, (size_t)T * dim));
        TAP(BT_OP_ATTN_RESID, l, e->x, dim);

        MARK(BT_OP_FFN_NORM, l);
        OP(norm(e, (size_t)(2 * l + 1) * dim, T));
        TAP(BT_OP_FFN_NORM, l, e->xb, dim);
        if (c->n_expert > 0 && l >= c->n_dense_lead) {
            OP(moe_ffn(e, l, T));
            OP(bi->add(be, e->x, e->moe_out, (size_t)T * dim));
            TAP(BT_OP_FFN_RESID, l, e->x, dim);
            continue;
        }
        MARK(BT_OP_FFN_GATE, l);
        OP(mm_tap(e, BT_OP_FFN_GATE, l, L->w_gate.type, W->w_gate, hidden, dim, e->xb, 0, T, e->gate));
        TAP(BT_OP_FFN_GATE, l, e->gate, hidden);
        MARK(BT_OP_FFN_UP, l);
        OP(mm_tap(e, BT_OP_FFN_UP, l, L->w_up.type, W->w_up, hidden, dim, e->xb, 0, T, e->up));
        TAP(BT_OP_FFN_UP, l, e->up, hidden);
        MARK(BT_OP_FFN_ACT, l);
        OP(bi->swiglu(be, e->act, e->gate, e->up, (size_t)T * hidden));
        TAP(BT_OP_FFN_ACT, l, e->act, hidden);
        MARK(BT_OP_FFN_DOWN, l);
        OP(mm_tap(e, BT_OP_FFN_DOWN, l, L->w_down.type, W->w_down, dim, hidden, e->act, 0, T, e->down));
        TAP(BT_OP_FFN_DOWN, l, e->down, dim);
        MARK(BT_OP_FFN_RESID, l);
        OP(bi->add(be, e->x, e->down, (size_t)T * dim));
        TAP(BT_OP_FFN_RESID, l, e->x, dim);
    }

    MARK(BT_OP_OUTPUT_NORM, -1);
    OP(norm(e, (size_t)2 * c->n_layers * dim, T));
    TAP(BT_OP_OUTPUT_NORM, -1, e->xb, dim);

    /* Logits for every row of a sequence that asks for them (a verify,
     * perplexity); else its last row, taps on or off: a tap observes what
     * the forward computes and never adds work (a prefill's logits are
     * then a partial view, bt_tensor_view.partial). Several sequences:
     * their rows gathered first, so the head's weights are read once. */
    bool want_l = e->has_cb && *want_at(e, BT_OP_LOGITS, -1);
    int rows = 0;
    for (int s = 0; s < e->n_run; s++) {
        seq_run *sq = &e->run[s];
        sq->lrows = sq->all ? sq->T : 1;
        sq->lrow0 = rows;
        rows += sq->lrows;
    }
    OP(logits_reserve(e, rows));
    bt_buf *head_in = e->xb;
    size_t src = (size_t)(T - e->run[0].lrows) * dim;
    if (e->n_run > 1) {
        for (int s = 0, k = 0; s < e->n_run; s++)
            for (int i = 0; i < e->run[s].lrows; i++) e->h_rows[k++] = e->run[s].row0 + e->run[s].T - e->run[s].lrows + i;
        OP(bi->get_rows(be, BT_DT_F32, e->xb, dim, e->h_rows, rows, e->attn_out));
        head_in = e->attn_out;
        src = 0;
    }
    MARK(BT_OP_LOGITS, -1);
    OP(mm_tap(e, BT_OP_LOGITS, -1, e->out_type, e->w_out, c->n_vocab, dim, head_in, src, rows, e->logits_b));
    e->last_rows = e->n_run == 1 ? T : 0;
    e->logit_rows = rows;
    OP(num_store(e, e->logits_b, (size_t)rows * c->n_vocab));
    /* the rows computed (stored above), not T of them as TAP would round */
    if (want_l && !tap(e, BT_OP_LOGITS, -1, e->logits_b, c->n_vocab)) { e->step++; return BT_EINVAL; }
    /* The sampler reads the host copy; on a device this read is also the
     * step's synchronisation point. */
    MARK(-1, -1);   /* the step's copies and wait belong to no op */
    if (e->logits_copy) OP(bi->read(be, e->logits_b, 0, (size_t)rows * c->n_vocab, e->logits));
    if (bi->sync) OP(bi->sync(be));
    int step = e->step++;
    if (e->has_cb && e->cb.flush && !e->cb.flush(e->cb.user, step)) return BT_EINVAL;
    return BT_OK;
}

int bt_engine_forward(bt_engine *e, const int32_t *tokens, int T, int pos0)
{
    if (e->foreign) {
        if (T <= 0)
            return bt_error(BT_ERANGE, "positions %d..%d exceed the context length %d (use --ctx)", pos0, pos0 + T - 1, e->ctx_len);
        int rc = check_rows(e, tokens, T, pos0);
        return rc ? rc : forward_ext(e, tokens, T, pos0);
    }
    if (e->block_size) return bt_error(BT_EINVAL, "a paged engine runs batched forwards (bt_engine_forward_batch)");
    if (T <= 0 || T > e->max_batch)
        return bt_error(BT_EINVAL, "forward of %d tokens exceeds the batch size %d", T, e->max_batch);
    int rc = check_rows(e, tokens, T, pos0);
    if (rc) return rc;
    seq_run q = { .tokens = tokens, .T = T, .pos0 = pos0, .all = e->logits_all };
    e->run = &q;
    e->n_run = 1;
    e->tap_seq = 0;
    rc = forward_run(e, T);
    e->run = NULL;
    e->n_run = 0;
    return rc;
}

int bt_engine_forward_batch(bt_engine *e, bt_seq_batch *b, int n)
{
    if (e->foreign || !e->block_size)
        return bt_error(BT_EINVAL, "a batched forward needs a paged engine (bt_engine_opts.block_size)");
    if (!e->bi->buf_view)
        return bt_error(BT_EUNSUPPORTED, "the %s backend has no buffer views (buf_view): batched forwards run on the cpu",
                        bt_backend_name(e->be));
    if (e->num_on) return bt_error(BT_EUNSUPPORTED, "numerics profiles are not supported in a batched forward");
    if (n <= 0) return bt_error(BT_EINVAL, "a batched forward of %d sequences", n);
    int T = 0, rc = BT_OK;
    for (int s = 0; s < n; s++) {
        const bt_seq_batch *q = &b[s];
        if (q->T <= 0 || q->T > e->max_batch - T)
            return bt_error(BT_EINVAL, "a batched forward of more than the batch size %d rows", e->max_batch);
        if ((rc = check_rows(e, q->tokens, q->T, q->pos0))) return rc;
        if (!q->blocks) return bt_error(BT_EINVAL, "sequence %d of a batched forward has no block table", s);
        for (int k = 0; k <= (q->pos0 + q->T - 1) / e->block_size; k++)
            if (q->blocks[k] < 0 || q->blocks[k] >= e->n_blocks)
                return bt_error(BT_ERANGE, "sequence %d maps positions %d.. to block %d of %d", s, k * e->block_size,
                                q->blocks[k], e->n_blocks);
        if (q->slot < 0 || q->slot >= e->n_slots)
            return bt_error(BT_ERANGE, "sequence %d's state slot %d is outside the %d slots", s, q->slot, e->n_slots);
        T += q->T;
    }
    seq_run *run = calloc((size_t)n, sizeof *run);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    if (!run || !tok) { free(run); free(tok); return bt_error(BT_ENOMEM, "out of memory"); }
    const bt_config *c = &e->c;
    int hd = c->head_dim, q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    int C = e->hybrid ? (int)bt_arch_dim(c, BT_DIM_SSM_CONV) : 0, KD = c->ssm_n_k * c->ssm_head_k;
    int V = c->ssm_n_v * c->ssm_head_v, nv = c->ssm_n_v;
    bt_buf *base[V_COUNT] = { e->q, e->k, e->v, e->ctx, e->sink_p, e->s_qkv, e->s_conv, e->s_q, e->s_k, e->s_v,
                              e->s_decay, e->s_beta, e->s_core };
    int width[V_COUNT] = { q_dim, kv_dim, kv_dim, q_dim, c->n_heads, C, C, KD, KD, V, nv, nv, V };
    int nviews = e->hybrid ? V_COUNT : V_QKV;
    for (int s = 0, row = 0; s < n; s++) {
        seq_run *q = &run[s];
        q->tokens = tok + row; q->T = b[s].T; q->pos0 = b[s].pos0; q->row0 = row; q->blocks = b[s].blocks;
        q->slot = b[s].slot; q->state = b[s].state; q->all = b[s].logits_all;
        memcpy(tok + row, b[s].tokens, (size_t)q->T * sizeof *tok);
        for (int v = 0; v < nviews && row > 0 && rc == BT_OK; v++)
            if (base[v]) rc = e->bi->buf_view(e->be, base[v], (size_t)row * width[v], (size_t)q->T * width[v] * sizeof(float), &q->view[v]);
        row += q->T;
    }
    if (rc == BT_OK) {
        e->run = run;
        e->n_run = n;
        rc = forward_run(e, T);
        for (int s = 0; s < n; s++) b[s].logit_row = run[s].lrow0 + run[s].lrows - 1;
        e->run = NULL;
        e->n_run = 0;
    }
    for (int s = 0; s < n; s++)
        for (int v = 0; v < V_COUNT; v++) e->bi->buf_free(e->be, run[s].view[v]);
    free(run);
    free(tok);
    return rc;
}

int bt_engine_batch_seq(const bt_engine *e) { return e->tap_seq; }

int bt_engine_state_rewind(bt_engine *e, const float *state, int pos, const int32_t *tokens, int n)
{
    int rc = bt_engine_state_load(e, 0, state, pos);
    if (rc || n <= 0) return rc;
    bt_engine_hold_taps(e, true);
    rc = bt_engine_forward(e, tokens, n, pos);
    bt_engine_hold_taps(e, false);
    return rc;
}

void bt_engine_hold_taps(bt_engine *e, bool hold)
{
    if (hold == e->holding) return;
    e->holding = hold;
    if (hold) { e->held_cb = e->has_cb; e->has_cb = false; }
    else e->has_cb = e->held_cb;
}

/* ---- a slot's recurrent state as one buffer (the batched server's
 * snapshots at block boundaries) ---- */

static void state_sizes(const bt_engine *e, size_t *ns, size_t *nc)
{
    const bt_config *c = &e->c;
    *ns = (size_t)c->n_layers * c->ssm_n_v * c->ssm_head_k * c->ssm_head_v;
    *nc = (size_t)c->n_layers * (c->ssm_kernel - 1) * (size_t)bt_arch_dim(c, BT_DIM_SSM_CONV);
}

size_t bt_engine_state_size(const bt_engine *e)
{
    if (e->foreign || !e->hybrid) return 0;
    size_t ns, nc;
    state_sizes(e, &ns, &nc);
    return ns + nc;
}

int bt_engine_state_save(bt_engine *e, int slot, float *dst, int *next_pos)
{
    if (!bt_engine_state_size(e)) return bt_error(BT_EINVAL, "this engine has no recurrent state");
    if (slot < 0 || slot >= e->n_slots) return bt_error(BT_ERANGE, "state slot %d of %d", slot, e->n_slots);
    size_t ns, nc;
    state_sizes(e, &ns, &nc);
    int rc = e->bi->read(e->be, e->ssm_state, (size_t)slot * ns, ns, dst);
    if (rc == BT_OK) rc = e->bi->read(e->be, e->conv_state, (size_t)slot * nc, nc, dst + ns);
    if (next_pos) *next_pos = e->rec_next[slot];
    return rc;
}

int bt_engine_state_load(bt_engine *e, int slot, const float *src, int next_pos)
{
    if (!bt_engine_state_size(e)) return bt_error(BT_EINVAL, "this engine has no recurrent state");
    if (slot < 0 || slot >= e->n_slots) return bt_error(BT_ERANGE, "state slot %d of %d", slot, e->n_slots);
    size_t ns, nc;
    state_sizes(e, &ns, &nc);
    int rc = e->bi->set(e->be, e->ssm_state, (size_t)slot * ns, src, ns);
    if (rc == BT_OK) rc = e->bi->set(e->be, e->conv_state, (size_t)slot * nc, src + ns, nc);
    if (rc == BT_OK) e->rec_next[slot] = next_pos;
    return rc;
}

float *bt_engine_logits(bt_engine *e) { return e->logits + (size_t)(e->logit_rows - 1) * e->c.n_vocab; }

float *bt_engine_logits_row(bt_engine *e, int i)
{
    if (i < 0 || i >= e->logit_rows) return NULL;
    return e->logits + (size_t)i * e->c.n_vocab;
}

int bt_engine_set_numerics(bt_engine *e, const bt_numerics *n)
{
    /* The profile is the backend's to apply (its numerics ops, or the
     * generic fallbacks of src/backend/backend.c); the backend says here
     * what it cannot run. */
    bool on = n && !bt_numerics_is_exact(n);
    if (on && e->foreign)
        return bt_error(BT_EUNSUPPORTED, "--numerics: a numerics profile runs on the native engine only, not on llama.cpp");
    int rc;
    if (on && e->mla) {   /* MLA: the latent cache's dtype only (the cache write rounded, then attended) */
        bt_numerics rest = *n;
        rest.kv = BT_NUM_F32;
        if (!bt_numerics_is_exact(&rest))
            return bt_error(BT_EUNSUPPORTED, "--numerics: on multi-head latent attention (architecture %s) profiles "
                            "cover the latent cache only: give kv=f16, kv=bf16 or kv=f8_e4m3 alone", e->c.arch);
        if (n->kv == BT_NUM_Q8_0)
            return bt_error(BT_EUNSUPPORTED, "--numerics: kv=q8_0 does not cover a latent cache (architecture %s); "
                            "give kv=f16, kv=bf16 or kv=f8_e4m3", e->c.arch);
    }
    if (on && e->part_rope && n->rope == BT_NUM_ROPE_GGML)
        return bt_error(BT_EUNSUPPORTED, "--numerics: rope=ggml does not cover the sectioned partial rope of hybrid (gated "
                        "delta net) models; give rope=f64");
    if (on && e->c.rope_yarn && n->rope == BT_NUM_ROPE_GGML)
        return bt_error(BT_EUNSUPPORTED, "--numerics: rope=ggml does not cover YaRN rope scaling; give rope=f64");
    if (on && (e->c.flags & BT_ARCH_SINKS) && bt_numerics_attn_custom_n(n))
        return bt_error(BT_EUNSUPPORTED, "--numerics: attn= and softmax= do not cover attention sinks and the sliding "
                        "window (architecture %s); give attn=f32,softmax=f32", e->c.arch);
    if (on && (rc = bt_backend_num_check(e->be, n))) return rc;
    if (n && (n->attn || n->softmax) && e->c.head_dim > BT_NUMERICS_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "--numerics: attn= and softmax= handle heads of up to %d values, this model's have %d",
                        BT_NUMERICS_MAX_HEAD_DIM, e->c.head_dim);
    /* The rope part changes the tables, made once per engine: remake them
     * on the host when it differs from what they hold, and upload them as
     * bt_engine_new_opts does. */
    bool rope_ggml = n && n->rope == BT_NUM_ROPE_GGML;
    if (rope_ggml != e->rope_ggml && !e->foreign) {
        size_t cells = (size_t)e->ctx_len * (size_t)(e->c.head_dim / 2);
        float *tab = malloc((cells ? 2 * cells : 1) * sizeof(float));
        if (!tab) return bt_error(BT_ENOMEM, "out of memory for the rope tables");
        bt_numerics_rope_table(n, e->c.rope_base, e->c.head_dim, e->c.rope_freq_scale, e->rope_ff, e->ctx_len, tab,
                               tab + cells);
        rc = e->bi->set(e->be, e->rope_cos, 0, tab, cells);
        if (rc == BT_OK) rc = e->bi->set(e->be, e->rope_sin, 0, tab + cells, cells);
        free(tab);
        if (rc) return rc;
        e->rope_ggml = rope_ggml;
    }
    e->num_on = on;
    if (on) e->num = *n;
    else memset(&e->num, 0, sizeof(e->num));
    return BT_OK;
}

int bt_engine_enable(bt_engine *e, int feature)
{
    if (e->foreign)
        return bt_error(BT_EUNSUPPORTED, "%s runs on the native engine only, not on a foreign one", bt_backend_feature_flag(feature));
    int rc = bt_backend_enable(e->be, feature);
    if (rc == BT_OK && feature == BT_BACKEND_ACTIVITY) e->marking = e->bi->mark != NULL;
    return rc;
}

int bt_engine_step(const bt_engine *e) { return e->step; }
void bt_engine_set_step(bt_engine *e, int step) { e->step = step; }
void bt_engine_set_logits_all(bt_engine *e, bool all) { e->logits_all = all; }
int bt_engine_n_layers(const bt_engine *e) { return e->c.n_layers; }
int bt_engine_first_layer(const bt_engine *e) { return e->layer0; }

int bt_engine_set_mtp_hidden(bt_engine *e, const float *h)
{
    if (e->foreign && e->ext.set_mtp_hidden) return e->ext.set_mtp_hidden(e->ext.impl, h);
    if (!e->mtp) return bt_error(BT_EINVAL, "hidden rows given to an engine that is not an MTP block");
    e->mtp_h = h;
    return BT_OK;
}

int bt_engine_hidden_rows(bt_engine *e, int row0, int n, float *dst)
{
    if (e->foreign && e->ext.hidden_rows) return e->ext.hidden_rows(e->ext.impl, row0, n, dst);
    if (e->foreign) return bt_error(BT_EUNSUPPORTED, "the hidden rows of a foreign engine are its own");
    if (row0 < 0 || n < 0 || row0 + n > e->last_rows)
        return bt_error(BT_ERANGE, "hidden rows %d..%d of a forward of %d rows", row0, row0 + n - 1, e->last_rows);
    return e->bi->read(e->be, e->xb, (size_t)row0 * e->c.dim, (size_t)n * e->c.dim, dst);
}
int bt_engine_ctx_len(const bt_engine *e) { return e->ctx_len; }
int bt_engine_max_batch(const bt_engine *e) { return e->max_batch; }
int bt_engine_kv_dim(const bt_engine *e)
{
    if (e->mla) return e->c.kv_lora_rank + e->c.rope_dim;   /* one latent row, no value cache */
    return e->c.n_kv_heads * e->c.head_dim;
}
bt_backend *bt_engine_backend(const bt_engine *e) { return e->be; }

float *bt_engine_kv(bt_engine *e, int layer, int pos, int which)
{
    if (e->foreign) return NULL;    /* the foreign engine owns its cache */
    if (layer < e->layer0 || layer >= e->c.n_layers || pos < 0 || (size_t)pos >= e->cache_rows) return NULL;
    if (e->mla && which) return NULL;   /* the latent is the only cache */
    size_t kv_dim = (size_t)bt_engine_kv_dim(e);
    float *base = e->bi->buf_host ? e->bi->buf_host(e->be, which ? e->val_cache : e->key_cache) : NULL;
    if (!base) return NULL;
    return base + ((size_t)(layer - e->layer0) * e->cache_rows + pos) * kv_dim;
}

int bt_engine_kv_fill(bt_engine *e, int layer, int pos, int which, float value)
{
    if (e->foreign) return bt_error(BT_EUNSUPPORTED, "the KV cache of a foreign engine is its own");
    if (layer < e->layer0 || layer >= e->c.n_layers || pos < 0 || (size_t)pos >= e->cache_rows)
        return bt_error(BT_ERANGE, "layer %d / position %d is outside the KV cache", layer, pos);
    if (e->mla && which)
        return bt_error(BT_EUNSUPPORTED, "multi-head latent attention caches one latent row per position, no values");
    size_t kv_dim = (size_t)bt_engine_kv_dim(e);
    float *p = malloc(kv_dim * sizeof(float));     /* rare: fault injection */
    if (!p) return bt_error(BT_ENOMEM, "out of memory");
    for (size_t i = 0; i < kv_dim; i++) p[i] = value;
    int rc = e->bi->set(e->be, which ? e->val_cache : e->key_cache, ((size_t)(layer - e->layer0) * e->cache_rows + pos) * kv_dim,
                        p, kv_dim);
    free(p);
    return rc;
}

const bt_model *bt_engine_model(const bt_engine *e) { return e->m; }

void bt_engine_kernel_name(const bt_engine *e, int op, int layer, char *buf, size_t cap)
{
    if (e->foreign) { snprintf(buf, cap, "llama.cpp"); return; }   /* its views name their kernel */
    const bt_op_info *oi = bt_op_info_of(op);
    if (!oi || (bt_op_is_layer_op(op) && (layer < 0 || layer >= e->c.n_layers))) { snprintf(buf, cap, "?"); return; }
    int kop = oi->kop;
    const bt_weight *w = kop == BT_KOP_MATMUL || kop == BT_KOP_GET_ROWS ? bt_op_weight(e->m, op, layer) : NULL;
    if ((kop == BT_KOP_MATMUL || kop == BT_KOP_GET_ROWS) && !w) { snprintf(buf, cap, "?"); return; }
    char k[128];
    e->bi->kernel_name(e->be, kop, w ? w->type : BT_DT_F32, k, sizeof(k));
    if (w) snprintf(buf, cap, "%s on %s", k, w->name ? w->name : "?");
    else snprintf(buf, cap, "%s", k);
}
