/* test_gptoss.c MODEL.gguf - a tiny gpt-oss model (tools/make-tiny-gptoss.py)
 * on the engine, what the comparisons with llama.cpp and the oracle do not
 * reach (tests/gptoss_llamacpp.sh runs it):
 *   - a backend without attention_sinks, or without swiglu_oai, refuses the
 *     model at engine creation with one line naming the op (what a device
 *     plugin that lacks them does: --device cuda);
 *   - a prefill of 12 positions and the same ids one decode step at a time
 *     give the same logits bit for bit (the sliding window and the sinks in
 *     decode, past the window of 4), at 1 and 2 threads;
 *   - the attn_sink tap: one share per head in (0, 1), only in a model with
 *     sinks;
 *   - a batched (paged) forward of two sequences gives each the bits of its
 *     own single-sequence forward. */
#include "check.h"
#include "engine/engine.h"
#include "backend/backend_impl.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 12 };

typedef struct sink_seen { int views; bool in_range; } sink_seen;

static bool observe(void *user, const bt_tensor_view *t)
{
    sink_seen *s = user;
    if (t->op != BT_OP_ATTN_SINK) return true;
    s->views++;
    for (int i = 0; i < t->rows * t->width; i++)
        if (!(t->data[i] > 0.0f && t->data[i] < 1.0f)) s->in_range = false;
    return true;
}

static void refusals(const bt_model *m, bt_backend *cpu)
{
    struct bt_backend_i no_sinks = *cpu->iface, no_oai = *cpu->iface;
    no_sinks.attention_sinks = NULL;
    no_oai.swiglu_oai = NULL;
    struct { struct bt_backend_i *i; const char *op; } cases[] = { { &no_sinks, "attention_sinks" },
                                                                   { &no_oai, "swiglu_oai" } };
    for (size_t k = 0; k < BT_ARRAY_SIZE(cases); k++) {
        bt_backend be = { .iface = cases[k].i, .ctx = cpu->ctx };
        bt_engine_opts o = { .ctx_len = 32, .max_batch = 4, .backend = &be };
        bt_engine *e = NULL;
        int rc = bt_engine_new_opts(m, &o, &e);
        CHECK(rc == BT_EUNSUPPORTED && !e, "without %s: rc %d", cases[k].op, rc);
        CHECK(strstr(bt_errmsg(), cases[k].op) && !strchr(bt_errmsg(), '\n'), "message: %s", bt_errmsg());
        bt_engine_free(e);
    }
}

static void decode_equals_prefill(const bt_model *m, int threads)
{
    int nv = m->cfg.n_vocab;
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (i * 7919 + 13) % nv;
    bt_engine *a = NULL, *b = NULL;
    CHECK_OK(bt_engine_new(m, 32, N, threads, &a));
    CHECK_OK(bt_engine_new(m, 32, 1, threads, &b));
    if (!a || !b) { bt_engine_free(a); bt_engine_free(b); return; }
    sink_seen s = { 0, true };
    bt_eval_cb cb = { .observe = observe, .user = &s };
    bt_engine_set_eval_cb(a, &cb);
    bt_engine_set_logits_all(a, true);
    CHECK_OK(bt_engine_forward(a, toks, N, 0));
    CHECK(s.views == m->cfg.n_layers && s.in_range, "attn_sink: %d views, shares in (0,1): %d", s.views, s.in_range);
    int same = 0;
    for (int t = 0; t < N; t++) {
        CHECK_OK(bt_engine_forward(b, toks + t, 1, t));
        same += !memcmp(bt_engine_logits_row(a, t), bt_engine_logits(b), (size_t)nv * sizeof(float));
    }
    CHECK(same == N, "%d threads: decode equals the prefill's logits at %d of %d positions", threads, same, N);
    bt_engine_free(a);
    bt_engine_free(b);
}

static void batch_equals_single(const bt_model *m)
{
    int nv = m->cfg.n_vocab;
    int32_t t0[N], t1[7];
    for (int i = 0; i < N; i++) t0[i] = (i * 31 + 5) % nv;
    for (int i = 0; i < 7; i++) t1[i] = (i * 101 + 9) % nv;
    float *ref0 = malloc((size_t)nv * sizeof(float)), *ref1 = malloc((size_t)nv * sizeof(float));
    bt_engine *s = NULL, *p = NULL;
    CHECK_OK(bt_engine_new(m, 32, N, 2, &s));
    bt_engine_opts o = { .ctx_len = 32, .max_batch = N + 7, .n_threads = 2, .block_size = 4, .n_blocks = 16 };
    CHECK_OK(bt_engine_new_opts(m, &o, &p));
    if (s && p && ref0 && ref1) {
        CHECK_OK(bt_engine_forward(s, t0, N, 0));
        memcpy(ref0, bt_engine_logits(s), (size_t)nv * sizeof(float));
        CHECK_OK(bt_engine_forward(s, t1, 7, 0));
        memcpy(ref1, bt_engine_logits(s), (size_t)nv * sizeof(float));
        int32_t bl0[] = { 5, 2, 9 }, bl1[] = { 0, 7 };
        bt_seq_batch sq[2] = { { .tokens = t0, .T = N, .blocks = bl0 }, { .tokens = t1, .T = 7, .blocks = bl1 } };
        CHECK_OK(bt_engine_forward_batch(p, sq, 2));
        CHECK(!memcmp(bt_engine_logits_row(p, sq[0].logit_row), ref0, (size_t)nv * sizeof(float)) &&
              !memcmp(bt_engine_logits_row(p, sq[1].logit_row), ref1, (size_t)nv * sizeof(float)),
              "a batched forward of two sequences: each the bits of its own forward");
    }
    bt_engine_free(s);
    bt_engine_free(p);
    free(ref0);
    free(ref1);
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: test_gptoss MODEL.gguf\n"); return 2; }
    bt_model *m = NULL;
    CHECK_OK(bt_model_load(argv[1], NULL, &m));
    if (!m) return 1;
    CHECK(!strcmp(m->cfg.arch, "gpt-oss") && (m->cfg.flags & BT_ARCH_SINKS) && m->cfg.rope_yarn,
          "a gpt-oss model with sinks and YaRN");
    CHECK(bt_layer_swa(&m->cfg, 0) && !bt_layer_swa(&m->cfg, 1) && bt_layer_swa(&m->cfg, 2), "the even layers slide");
    bt_backend *cpu = NULL;
    CHECK_OK(bt_backend_cpu_new(1, &cpu));
    if (cpu) refusals(m, cpu);
    bt_backend_free(cpu);
    decode_equals_prefill(m, 1);
    decode_equals_prefill(m, 2);
    batch_equals_single(m);
    bt_model_free(m);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
