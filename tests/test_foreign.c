/* test_foreign.c - a foreign engine behind bt_engine (bt_engine_new_ext),
 * the way src/engines/llamacpp drives it, without llama.cpp: a fake forward
 * that delivers a mapped tensor (blk.1.ffn_gate), an extra tensor under its
 * own name (kq-1) and the logits. Checks the engine's side (ask answers,
 * step numbering, logits rows, no KV access) and the recorder's (extra
 * tensors registered under their names after ours, their taps written, a
 * first_nonfinite event naming the foreign kernel), plus the llama.cpp name
 * table. Needs stories260K (BT_SHARED) for its config; SKIP without. */
#include "check.h"
#include "engine/engine.h"
#include "engines/llamacpp/llamacpp.h"
#include "model/model.h"
#include "tap/inject.h"
#include "run/recorder.h"
#include "run/replay.h"
#include "trace/reader.h"
#include "trace/trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fake {
    bt_extra_tensor extra[1];
    int forwards, freed;
    float buf[4096];
} fake;

static int fake_forward(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits)
{
    (void)tokens;
    fake *f = impl;
    f->forwards++;
    const bt_config *c = &bt_engine_model(e)->cfg;
    if (bt_engine_tap_wanted(e, BT_OP_FFN_GATE, 1)) {
        for (int i = 0; i < T * c->hidden_dim; i++) f->buf[i] = 0.5f;
        bt_tensor_view v = { .op = BT_OP_FFN_GATE, .layer = 1, .pos0 = pos0, .rows = T, .width = c->hidden_dim,
                             .data = f->buf, .kernel = "MUL_MAT f32 on FAKE" };
        if (!bt_engine_tap_deliver(e, &v)) return BT_EINVAL;
    }
    if (bt_engine_tap_wanted(e, BT_OP_COUNT + 0, 1)) {
        for (int i = 0; i < T * 8; i++) f->buf[i] = 1.0f;
        bt_tensor_view v = { .op = BT_OP_COUNT + 0, .layer = 1, .pos0 = pos0, .rows = 1, .width = T * 8,
                             .data = f->buf, .kernel = "MUL_MAT kq on FAKE" };
        if (!bt_engine_tap_deliver(e, &v)) return BT_EINVAL;
    }
    for (int i = 0; i < T * c->n_vocab; i++) logits[i] = (float)(i % c->n_vocab == 7);
    return BT_OK;
}

static void fake_free(void *impl) { ((fake *)impl)->freed++; }

static int count_ev(void *user, const bt_trace_event_row *ev)
{
    if (!strcmp(ev->kind, "first_nonfinite")) {
        CHECK(ev->tensor && !strcmp(ev->tensor, "blk.1.ffn_gate"), "%s", ev->tensor ? ev->tensor : "(null)");
        CHECK(ev->detail && strstr(ev->detail, "MUL_MAT f32 on FAKE"), "%s", ev->detail ? ev->detail : "(null)");
    }
    (*(int *)user)++;
    return 0;
}

static void names(void)
{
    CHECK(bt_llamacpp_map_name("Qcur") == BT_OP_ATTN_Q);
    CHECK(bt_llamacpp_map_name("ffn_out") == BT_OP_FFN_DOWN);
    CHECK(bt_llamacpp_map_name("l_out") == BT_OP_FFN_RESID);
    CHECK(bt_llamacpp_map_name("result_output") == BT_OP_LOGITS);
    CHECK(bt_llamacpp_map_name("inp_embd") == BT_OP_TOKEN_EMBD);
    CHECK(bt_llamacpp_map_name("kq_soft_max") == -1);
    /* a hybrid (qwen35): names by layer kind, ops only where computed */
    bt_config hc = { .n_layers = 4, .flags = BT_ARCH_HYBRID | BT_ARCH_ATTN_GATE | BT_ARCH_QK_NORM };
    hc.recr[0] = 0x5;   /* layers 0 and 2 recurrent */
    CHECK(bt_llamacpp_map_name_in(&hc, "attn_output", 0) == BT_OP_SSM_CORE);
    CHECK(bt_llamacpp_map_name_in(&hc, "attn_output", 1) == BT_OP_ATTN_OUTPUT);
    CHECK(bt_llamacpp_map_name_in(&hc, "gate", 2) == BT_OP_SSM_DECAY);
    CHECK(bt_llamacpp_map_name_in(&hc, "gate_reshaped", 3) == BT_OP_ATTN_GATE);
    CHECK(bt_llamacpp_map_name_in(&hc, "Qcur", 0) == -1);          /* no attention in a recurrent layer */
    CHECK(bt_llamacpp_map_name_in(&hc, "Qcur", 1) == BT_OP_ATTN_Q);
    CHECK(bt_llamacpp_map_name_in(&hc, "attn_post_norm", 0) == BT_OP_FFN_NORM);
    CHECK(bt_llamacpp_map_name_in(&hc, "l_out", 2) == BT_OP_FFN_RESID);
    /* MoE layers (build_moe_ffn, then the shared expert through build_ffn):
     * ffn_gate/up/swiglu are the shared expert's (no bangtrace op: ours are
     * one routed expert's rows), ffn_out is routed + shared = ffn_moe_out,
     * and ffn_moe_out is that only without a shared expert */
    bt_config mc = hc;
    mc.flags |= BT_ARCH_MOE | BT_ARCH_SHARED_EXP;
    mc.shared_ff_len = 64;
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_gate", 0) == -1);
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_up", 1) == -1);
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_swiglu", 2) == -1);
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_out", 0) == BT_OP_FFN_MOE_OUT);
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_out", 3) == BT_OP_FFN_MOE_OUT);
    CHECK(bt_llamacpp_map_name_in(&mc, "ffn_moe_out", 1) == -1);   /* the routed experts only */
    CHECK(bt_llamacpp_map_name_in(&mc, "attn_output", 0) == BT_OP_SSM_CORE);
    CHECK(bt_llamacpp_map_name_in(&mc, "l_out", 3) == BT_OP_FFN_RESID);
    bt_config qm = { .n_layers = 2, .flags = BT_ARCH_MOE | BT_ARCH_QK_NORM };   /* qwen3moe: no shared expert */
    CHECK(bt_llamacpp_map_name_in(&qm, "ffn_moe_out", 1) == BT_OP_FFN_MOE_OUT);
    CHECK(bt_llamacpp_map_name_in(&qm, "Qcur", 1) == BT_OP_ATTN_Q);
    bt_config ds = { .n_layers = 3, .n_dense_lead = 1, .flags = BT_ARCH_MOE | BT_ARCH_SHARED_EXP, .n_shared_expert = 1 };
    CHECK(bt_llamacpp_map_name_in(&ds, "ffn_gate", 0) == BT_OP_FFN_GATE);   /* deepseek2's leading dense FFN */
    CHECK(bt_llamacpp_map_name_in(&ds, "ffn_out", 0) == BT_OP_FFN_DOWN);
    CHECK(bt_llamacpp_map_name_in(&ds, "ffn_gate", 1) == -1);
    CHECK(bt_llamacpp_map_name_in(&ds, "ffn_out", 2) == BT_OP_FFN_MOE_OUT);
    /* llama.cpp's MTP graph (graph_mtp): the block at layer n_layers, its
     * embedding, h_nextn and head at -1; its shared expert's names in a MoE
     * block are not ours */
    bt_config mt = hc;
    mt.n_nextn = 1;
    int at = 4;
    CHECK(bt_llamacpp_map_mtp_name(&mt, "mtp_eh_proj", &at) == BT_OP_MTP_EH_PROJ && at == 4);
    CHECK(bt_llamacpp_map_mtp_name(&mt, "mtp_attn_pregate", &at) == BT_OP_ATTN_CTX && at == 4);
    CHECK(bt_llamacpp_map_mtp_name(&mt, "mtp_ffn_out", &at) == BT_OP_FFN_DOWN && at == 4);
    CHECK(bt_llamacpp_map_mtp_name(&mt, "ffn_swiglu", &at) == BT_OP_FFN_ACT && at == 4);
    CHECK(bt_llamacpp_map_mtp_name(&mt, "mtp_tok_embd", &at) == BT_OP_TOKEN_EMBD && at == -1);
    at = -1;
    CHECK(bt_llamacpp_map_mtp_name(&mt, "h_nextn", &at) == BT_OP_OUTPUT_NORM && at == -1);
    at = 4;
    CHECK(bt_llamacpp_map_mtp_name(&mt, "mtp_concat", &at) == -1 && at == 4);
    bt_config mm = mc;
    mm.n_nextn = 1;
    CHECK(bt_llamacpp_map_mtp_name(&mm, "mtp_ffn_out", &at) == BT_OP_FFN_MOE_OUT);
    CHECK(bt_llamacpp_map_mtp_name(&mm, "ffn_gate", &at) == -1);
    /* a llama.cpp trace's own tensor labelled with one of our op names is
     * not that op (replay, bisect --reference) */
    bt_trace_tensor_row shx = { .name = "ffn_gate-0", .layer = 0, .op = "ffn_gate", .width = 64 },
                        ours = { .name = "blk.0.ffn_moe_out", .layer = 0, .op = "ffn_moe_out", .width = 16 },
                        kq = { .name = "kq-1", .layer = 1, .op = "kq", .width = 8 };
    CHECK(bt_replay_tensor_op(&shx, true) == -1 && bt_replay_tensor_op(&shx, false) == BT_OP_FFN_GATE);
    CHECK(bt_replay_tensor_op(&ours, true) == BT_OP_FFN_MOE_OUT && bt_replay_tensor_op(&kq, true) == -1);
    CHECK(bt_op_in_layer(&hc, BT_OP_SSM_STATE, 0) && !bt_op_in_layer(&hc, BT_OP_SSM_STATE, 1));
    CHECK(!bt_op_in_layer(&hc, BT_OP_ATTN_CTX, 2) && bt_op_in_layer(&hc, BT_OP_ATTN_CTX, 3));
    CHECK(bt_op_from_name("ssm_conv_state") == BT_OP_SSM_CONV_STATE && bt_op_is_layer_op(BT_OP_SSM_STATE));
    char k[160];
    bt_llamacpp_kernel_guess(BT_OP_FFN_DOWN, "q4_1", k, sizeof(k));
    CHECK(strstr(k, "q4_1") && strstr(k, "q8_1"), "%s", k);
    bt_llamacpp_kernel_guess(BT_OP_ATTN_NORM, "", k, sizeof(k));
    CHECK(strstr(k, "RMS_NORM"), "%s", k);
    /* a trace of llama.cpp's default path: flash attention, Q4_K repacked */
    const char *path = "flash attention on (auto: FLASH_ATTN_EXT); repack on: 16 of 211 matmul weights in extra buffer "
                       "types (16 q4_K in CPU_REPACK as q4_K_8x8); KV cache f16; AMX not in this build";
    bt_llamacpp_kernel_guess_path(BT_OP_ATTN_CTX, "", path, k, sizeof(k));
    CHECK(strstr(k, "FLASH_ATTN_EXT") && strstr(k, "f16"), "%s", k);
    bt_llamacpp_kernel_guess_path(BT_OP_FFN_DOWN, "q4_K", path, k, sizeof(k));
    CHECK(strstr(k, "repacked as q4_K_8x8") && strstr(k, "CPU_REPACK") && strstr(k, "q8_K"), "%s", k);
    bt_llamacpp_kernel_guess_path(BT_OP_FFN_DOWN, "q6_K", path, k, sizeof(k));
    CHECK(!strstr(k, "repacked") && strstr(k, "q6_K with q8_K"), "%s", k);
    bt_llamacpp_kernel_guess_path(BT_OP_ATTN_CTX, "", "flash attention off (off: kq, kq_soft_max); KV cache q8_0; AMX on", k, sizeof(k));
    CHECK(strstr(k, "SOFT_MAX") && strstr(k, "q8_0"), "%s", k);
}

int main(void)
{
    names();
    const char *shared = getenv("BT_SHARED");
    char model[1024], tok[1024], path[] = "/tmp/bt-foreign-XXXXXX";
    snprintf(model, sizeof model, "%s/models/llama2c/stories260K.bin", shared && *shared ? shared : "/work/shared");
    snprintf(tok, sizeof tok, "%s/models/llama2c/tok512.bin", shared && *shared ? shared : "/work/shared");
    if (access(model, R_OK)) { printf("SKIP: needs %s (set BT_SHARED)\n", model); return failures ? 1 : 77; }
    bt_model *m = NULL;
    CHECK_OK(bt_model_load(model, tok, &m));
    if (!m) return 1;
    fake f = { 0 };
    snprintf(f.extra[0].name, sizeof f.extra[0].name, "kq-1");
    snprintf(f.extra[0].op, sizeof f.extra[0].op, "kq");
    f.extra[0].layer = 1;
    f.extra[0].width = 8;
    bt_engine_ext ext = { .forward = fake_forward, .free = fake_free, .impl = &f, .extra = f.extra, .n_extra = 1 };
    bt_engine *e = NULL;
    CHECK_OK(bt_engine_new_ext(m, 64, 4, &ext, &e));
    CHECK(bt_engine_is_foreign(e));
    CHECK(bt_engine_kv(e, 0, 0, 0) == NULL);
    CHECK(!bt_engine_tap_wanted(e, BT_OP_FFN_GATE, 1));      /* no callback yet */

    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    bt_trace *t = NULL;
    CHECK_OK(bt_trace_create(path, &t));
    bt_injector *inj = bt_injector_new();
    CHECK_OK(bt_injector_add(inj, "nan@layer=1,op=ffn_gate,step=1,index=3"));
    bt_recorder_cfg rc = { .trace = t, .inj = inj, .model = m, .taps = BT_TAPS_ALL, .layer_lo = -1, .layer_hi = -1,
                           .model_role = "target" };
    bt_recorder *r = NULL;
    CHECK_OK(bt_recorder_new(&rc, e, &r));
    CHECK(bt_engine_tap_wanted(e, BT_OP_FFN_GATE, 1));
    CHECK(bt_engine_tap_wanted(e, BT_OP_COUNT, 1));
    CHECK(!bt_engine_tap_wanted(e, BT_OP_COUNT + 1, 1));    /* no such extra */
    int32_t ids[3] = { 1, 5, 9 };
    for (int s = 0; s < 2; s++) {
        CHECK_OK(bt_recorder_step_begin(r, s ? "decode" : "prefill", s ? 3 : 0, s ? 1 : 3));
        CHECK_OK(bt_engine_forward(e, s ? ids : ids, s ? 1 : 3, s ? 3 : 0));
        CHECK(bt_engine_logits(e)[7] == 1.0f && bt_engine_logits(e)[6] == 0.0f);
        CHECK(bt_engine_logits_row(e, s ? 0 : 2) != NULL);
        CHECK_OK(bt_recorder_step_sampled(r, bt_engine_logits(e), s ? 3 : 2, 7, 0.0f, NULL));
        CHECK_OK(bt_recorder_step_end(r, 1.0));
    }
    CHECK(bt_engine_step(e) == 2);
    CHECK(f.forwards == 2);
    CHECK(bt_recorder_n_events(r) >= 1, "the injected NaN is a first_nonfinite event");
    CHECK_OK(bt_recorder_finish(r, "length"));
    CHECK_OK(bt_trace_close(t, BT_TRACE_STATUS_OK));
    bt_recorder_free(r);
    bt_engine_free(e);
    CHECK(f.freed == 1);

    bt_trace_reader *rd = NULL;
    CHECK_OK(bt_trace_open(path, &rd));
    if (rd) {
        const bt_trace_tensor_row *tens = NULL;
        int n = 0;
        CHECK_OK(bt_trace_tensors(rd, "target", &tens, &n));
        CHECK(n >= 2 && !strcmp(tens[n - 1].name, "kq-1") && tens[n - 1].layer == 1 && !strcmp(tens[n - 1].op, "kq"),
              "last of %d: %s", n, n ? tens[n - 1].name : "-");
        int nev = 0;
        CHECK(bt_trace_events_each(rd, NULL, count_ev, &nev) >= 0);
        CHECK(nev >= 1);
        bt_trace_reader_close(rd);
    }
    unlink(path);
    bt_injector_free(inj);
    bt_model_free(m);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
