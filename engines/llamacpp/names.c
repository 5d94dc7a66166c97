/* names.c - llama.cpp graph tensor names -> bangtrace's stable names. Pure
 * data, built with or without llama.cpp (unit-tested, documented in
 * doc/llama-cpp.md). The names are those llm_build_llama gives through its
 * cb() calls; a name seen more than once (Qcur after the matmul and after
 * RoPE) maps at its last computing node, as bangtrace taps attn_q after RoPE. */
#include "llamacpp.h"

#include <string.h>

static const struct { const char *llama; int op; } name_map[] = {
    { "inp_embd", BT_OP_TOKEN_EMBD },
    { "attn_norm", BT_OP_ATTN_NORM },
    { "Qcur", BT_OP_ATTN_Q },           /* after RoPE */
    { "Kcur", BT_OP_ATTN_K },           /* after RoPE, before the cache */
    { "Vcur", BT_OP_ATTN_V },
    { "kqv_out", BT_OP_ATTN_CTX },      /* heads merged, before wo */
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
