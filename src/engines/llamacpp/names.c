/* names.c - llama.cpp graph tensor names -> bangtrace's stable names. Pure
 * data, built with or without llama.cpp (unit-tested, documented in
 * doc/llama-cpp.md). The names are those llm_build_llama gives through its
 * cb() calls; a name seen more than once (Qcur after the matmul and after
 * RoPE) maps at its last computing node, as bangtrace taps attn_q after RoPE. */
#include "llamacpp.h"
#include "backend/backend.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

static const struct { const char *llama; int op; } name_map[] = {
    { "inp_embd", BT_OP_TOKEN_EMBD },
    { "embd", BT_OP_TOKEN_EMBD },       /* the GET_ROWS node in this version */
    { "attn_norm", BT_OP_ATTN_NORM },
    { "Qcur_normed", BT_OP_ATTN_Q_NORM },   /* qwen3: per-head rmsnorm, before RoPE */
    { "Kcur_normed", BT_OP_ATTN_K_NORM },
    { "Qcur", BT_OP_ATTN_Q },           /* after RoPE */
    { "Kcur", BT_OP_ATTN_K },           /* after RoPE, before the cache */
    { "Vcur", BT_OP_ATTN_V },
    { "kqv_out", BT_OP_ATTN_CTX },      /* heads merged, before wo */
    { "fattn", BT_OP_ATTN_CTX },        /* the same values from the fused FLASH_ATTN_EXT node (flash
                                         * attention on), which llama.cpp leaves unnamed: the
                                         * adapter names it fattn-L */
    { "attn_out", BT_OP_ATTN_OUTPUT },  /* wo */
    { "ffn_inp", BT_OP_ATTN_RESID },
    { "ffn_norm", BT_OP_FFN_NORM },
    { "ffn_gate", BT_OP_FFN_GATE },
    { "ffn_up", BT_OP_FFN_UP },
    { "ffn_swiglu", BT_OP_FFN_ACT },    /* silu(gate) * up, fused */
    { "ffn_out", BT_OP_FFN_DOWN },      /* the down matmul (renamed from ffn_down) */
    { "l_out", BT_OP_FFN_RESID },
    { "result_norm", BT_OP_OUTPUT_NORM },
    { "result_output", BT_OP_LOGITS },
};

int bt_llamacpp_map_name(const char *base)
{
    for (size_t i = 0; i < sizeof(name_map) / sizeof(name_map[0]); i++)
        if (!strcmp(base, name_map[i].llama)) return name_map[i].op;
    return -1;
}

/* qwen35's graph (src/models/qwen35.cpp, delta-net-base.cpp): the gated
 * delta net layers' names, and the full-attention layers' own. "attn_output"
 * is the delta rule's output in a recurrent layer and the wo matmul in an
 * attention layer. */
static const struct { const char *llama; int op; } gdn_map[] = {
    { "linear_attn_qkv_mixed", BT_OP_SSM_QKV },
    { "z", BT_OP_SSM_Z },
    { "beta_sigmoid", BT_OP_SSM_BETA },
    { "gate", BT_OP_SSM_DECAY },          /* ssm_a * softplus(alpha + dt) */
    { "conv_output_silu", BT_OP_SSM_CONV },
    { "attn_output", BT_OP_SSM_CORE },
    { "final_output", BT_OP_SSM_NORM },
    { "linear_attn_out", BT_OP_SSM_OUT },
    { "attn_residual", BT_OP_ATTN_RESID },
    { "attn_post_norm", BT_OP_FFN_NORM },
};
static const struct { const char *llama; int op; } gated_attn_map[] = {
    { "gate_reshaped", BT_OP_ATTN_GATE },
    { "attn_gated", BT_OP_ATTN_GATED },
    { "attn_output", BT_OP_ATTN_OUTPUT },
    { "attn_residual", BT_OP_ATTN_RESID },
    { "attn_post_norm", BT_OP_FFN_NORM },
};

/* A mixture-of-experts layer (llm_graph_context::build_moe_ffn, then the
 * model's shared expert through build_ffn, in qwen35moe.cpp, qwen3next.cpp,
 * deepseek2.cpp): ffn_gate, ffn_up and ffn_swiglu there are the shared
 * expert's, which bangtrace computes as part of ffn_moe_out and never taps
 * on its own (its ffn_gate/up/act/down in such a layer are one routed
 * expert's rows); "ffn_out" is the routed experts' weighted sum plus the
 * (gated) shared expert, bangtrace's ffn_moe_out, and "ffn_moe_out" is that
 * sum only when there is no shared expert (qwen3moe, gpt-oss: with one it
 * lacks the shared part). llama.cpp's ffn_moe_gate/up/swiglu/down hold
 * n_expert_used rows a token and stay under their own names. Returns the
 * op, -1 for "not one of ours", or -2 for a name this rule does not cover. */
static int moe_layer_op(const bt_config *c, const char *base)
{
    static const char *const shared[] = { "ffn_gate", "ffn_up", "ffn_swiglu" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(shared); i++)
        if (!strcmp(base, shared[i])) return -1;
    if (!strcmp(base, "ffn_out")) return BT_OP_FFN_MOE_OUT;
    if (!strcmp(base, "ffn_moe_out")) return c->shared_ff_len > 0 || c->n_shared_expert > 0 ? -1 : BT_OP_FFN_MOE_OUT;
    return -2;
}

int bt_llamacpp_map_name_in(const bt_config *c, const char *base, int layer)
{
    if (c && (c->flags & BT_ARCH_MOE) && layer >= 0 && bt_op_in_layer(c, BT_OP_FFN_MOE_OUT, layer)) {
        int op = moe_layer_op(c, base);
        if (op != -2) return op;
    }
    if (c && (c->flags & BT_ARCH_HYBRID) && layer >= 0) {
        bool recr = bt_layer_recurrent(c, layer);
        if (recr)
            for (size_t i = 0; i < sizeof(gdn_map) / sizeof(gdn_map[0]); i++)
                if (!strcmp(base, gdn_map[i].llama)) return gdn_map[i].op;
        if (!recr)
            for (size_t i = 0; i < sizeof(gated_attn_map) / sizeof(gated_attn_map[0]); i++)
                if (!strcmp(base, gated_attn_map[i].llama)) return gated_attn_map[i].op;
    }
    int op = bt_llamacpp_map_name(base);
    return op >= 0 && c && !bt_op_in_layer(c, op, layer) ? -1 : op;
}

/* llama.cpp's MTP graphs (graph_mtp in qwen35.cpp, qwen35moe.cpp,
 * deepseek2.cpp): the block's own names. Its q and k after RoPE, the gated
 * product and MLA's absorbed ops are unnamed or named apart: they stay
 * under llama.cpp's names. */
static const struct { const char *llama; int op; } mtp_map[] = {
    { "mtp_tok_embd", BT_OP_TOKEN_EMBD },
    { "mtp_hnorm", BT_OP_MTP_HNORM },
    { "mtp_enorm", BT_OP_MTP_ENORM },
    { "mtp_eh_proj", BT_OP_MTP_EH_PROJ },
    { "mtp_attn_norm", BT_OP_ATTN_NORM },
    { "mtp_Qcur_normed", BT_OP_ATTN_Q_NORM },
    { "mtp_gate", BT_OP_ATTN_GATE },
    { "mtp_Kcur_normed", BT_OP_ATTN_K_NORM },
    { "mtp_Vcur", BT_OP_ATTN_V },
    { "mtp_attn_pregate", BT_OP_ATTN_CTX },
    { "mtp_attn_out", BT_OP_ATTN_OUTPUT },
    { "mtp_attn_residual", BT_OP_ATTN_RESID },
    { "mtp_attn_post_norm", BT_OP_FFN_NORM },
    { "mtp_post_ffn", BT_OP_FFN_RESID },
    { "h_nextn", BT_OP_OUTPUT_NORM },       /* the shared head norm, every row */
    { "result_output", BT_OP_LOGITS },
};

int bt_llamacpp_map_mtp_name(const bt_config *c, const char *base, int *layer)
{
    int op = -1;
    bool moe = c && (c->flags & BT_ARCH_MOE);
    for (size_t i = 0; i < BT_ARRAY_SIZE(mtp_map) && op < 0; i++)
        if (!strcmp(base, mtp_map[i].llama)) op = mtp_map[i].op;
    if (!strcmp(base, "mtp_ffn_out")) op = moe ? BT_OP_FFN_MOE_OUT : BT_OP_FFN_DOWN;
    else if (!moe && op < 0) {              /* build_ffn's own names in a dense block */
        static const struct { const char *llama; int op; } ffn[] = {
            { "ffn_gate", BT_OP_FFN_GATE }, { "ffn_up", BT_OP_FFN_UP }, { "ffn_swiglu", BT_OP_FFN_ACT } };
        for (size_t i = 0; i < BT_ARRAY_SIZE(ffn) && op < 0; i++)
            if (!strcmp(base, ffn[i].llama)) op = ffn[i].op;
    }
    if (op < 0) return -1;
    if (!bt_op_is_layer_op(op)) *layer = -1;
    return c && !bt_op_in_layer(c, op, *layer) ? -1 : op;
}

/* What llama.cpp's CPU backend ran for a tapped op of a model whose weight
 * is of type wtype, for the cross-engine verdict (the trace of a run has
 * the exact kernel in its first_nonfinite events; a clean run has none):
 * ggml-cpu quantizes matmul activations to the weight type's vec_dot type. */
void bt_llamacpp_kernel_guess(int op, const char *wtype, char *buf, size_t cap)
{
    bt_llamacpp_kernel_guess_path(op, wtype, NULL, buf, cap);
}

/* In a trace's llama_cpp_path ("...(16 q4_K in CPU_REPACK as q4_K_8x8)..."):
 * the layout weights of type wtype were repacked into, "" when repacked
 * with no known layout, NULL when they were not repacked. */
static const char *repacked_as(const char *path, const char *wtype, char *lay, size_t cap)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s in CPU_REPACK", wtype);
    const char *p = path ? strstr(path, pat) : NULL;
    if (!p) return NULL;
    p += strlen(pat);
    if (strncmp(p, " as ", 4)) { lay[0] = 0; return lay; }
    p += 4;
    size_t n = strcspn(p, ",); ");
    snprintf(lay, cap, "%.*s", (int)n, p);
    return lay;
}

void bt_llamacpp_kernel_guess_path(int op, const char *wtype, const char *path, char *buf, size_t cap)
{
    char kv[16] = "f16";
    const char *k = path ? strstr(path, "KV cache ") : NULL;
    if (k) snprintf(kv, sizeof(kv), "%.*s", (int)strcspn(k + 9, ";"), k + 9);
    static const struct { const char *w, *act; } vd[] = {
        { "q4_0", "q8_0" }, { "q4_1", "q8_1" }, { "q5_0", "q8_0" }, { "q5_1", "q8_1" }, { "q8_0", "q8_0" },
        { "q2_K", "q8_K" }, { "q3_K", "q8_K" }, { "q4_K", "q8_K" }, { "q5_K", "q8_K" }, { "q6_K", "q8_K" },
        { "f16", "f16" }, { "bf16", "bf16" }, { "f32", "f32" },
    };
    if (wtype && *wtype) {
        const char *act = NULL;
        for (size_t i = 0; i < sizeof(vd) / sizeof(vd[0]); i++) if (!strcmp(vd[i].w, wtype)) act = vd[i].act;
        char lay[32];
        const char *rp = repacked_as(path, wtype, lay, sizeof(lay));
        if (rp)
            snprintf(buf, cap, "MUL_MAT %s repacked%s%s (CPU_REPACK gemm/gemv) with %s-quantized activations (ggml-cpu)", wtype,
                     rp[0] ? " as " : "", rp, act ? act : "?");
        else if (act && strcmp(act, "f32"))
            snprintf(buf, cap, "MUL_MAT %s with %s-quantized activations (ggml-cpu)", wtype, act);
        else snprintf(buf, cap, "MUL_MAT %s (ggml-cpu)", wtype);
        return;
    }
    switch (op) {
    case BT_OP_ATTN_NORM: case BT_OP_FFN_NORM: case BT_OP_OUTPUT_NORM: snprintf(buf, cap, "RMS_NORM + MUL (ggml-cpu)"); break;
    case BT_OP_ATTN_CTX:
        if (path && strstr(path, "FLASH_ATTN_EXT"))
            snprintf(buf, cap, "attention: FLASH_ATTN_EXT (kq, softmax and kqv fused) with the %s KV cache (ggml-cpu)", kv);
        else snprintf(buf, cap, "attention: MUL_MAT with the %s KV cache, SOFT_MAX (ggml-cpu)", kv);
        break;
    case BT_OP_ATTN_Q: case BT_OP_ATTN_K: snprintf(buf, cap, "ROPE (ggml-cpu)"); break;
    case BT_OP_FFN_ACT: snprintf(buf, cap, "GLU swiglu (ggml-cpu)"); break;
    case BT_OP_ATTN_RESID: case BT_OP_FFN_RESID: snprintf(buf, cap, "ADD (ggml-cpu)"); break;
    default: snprintf(buf, cap, "GET_ROWS (ggml-cpu)"); break;
    }
}

/* The device table's rows that llama.cpp has a backend for, by the name
 * of that ggml backend. */
static const struct { const char *device, *ggml; } llama_devices[] = {
    { "cpu", "CPU" },
    { "cuda", "CUDA" },
};

int bt_llamacpp_device(const char *device, const char **ggml)
{
    const bt_device *row;
    int ordinal;
    if (bt_device_parse(device, &row, &ordinal) == BT_OK && (!device || !*device || !strcmp(device, row->name)))
        for (size_t i = 0; i < BT_ARRAY_SIZE(llama_devices); i++)
            if (!strcmp(row->name, llama_devices[i].device)) {
                if (ggml) *ggml = llama_devices[i].ggml;
                return BT_OK;
            }
    char list[64] = "";
    size_t u = 0, n = BT_ARRAY_SIZE(llama_devices);
    for (size_t i = 0; i < n && u < sizeof(list); i++)
        u += (size_t)snprintf(list + u, sizeof(list) - u, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", llama_devices[i].device);
    return bt_error(BT_EINVAL, "--device with --engine llama.cpp expects %s, got '%s'", list, device ? device : "");
}
