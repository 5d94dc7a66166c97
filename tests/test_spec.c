/* test_spec.c - speculative rejection sampling keeps the target's
 * distribution.
 *
 * On stories260K at temperature 1 after "Once upon a time, there was a"
 * (a spread-out continuation), the second generated token (the first
 * one decided by a draft/verify round) is sampled N times with speculative
 * decoding (self-draft of 2 layers, k = 3; and n-gram-free model drafting)
 * and compared with its exact marginal under plain sampling,
 *     P(t2) = sum_t1 p(t1 | prompt) p(t2 | prompt, t1),
 * computed with one forward per t1.
 *
 * The bound: for N samples of a distribution P over m outcomes the
 * empirical total variation distance D = 1/2 sum |f_i - P_i| has
 * E[D] <= 1/2 sum_i sqrt(P_i (1 - P_i) / N) =: B (Jensen, per outcome);
 * D changes by at most 1/N when one sample changes, so McDiarmid gives
 * P(D >= E[D] + eps) <= exp(-2 N eps^2). With N = 8000 and eps = 0.025 that
 * is < 5e-5, so the test asserts D < B + 0.025. A sampler that accepted
 * drafts without the p/q test would produce the draft's distribution
 * instead; the test prints that distance too, to show the bound can tell. */
#include "gen/decode.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SAMPLES 8000

static double tvd(const double *f, const double *p, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) d += fabs(f[i] - p[i]);
    return d / 2;
}

static void softmax(const float *x, int n, double *p)
{
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) { p[i] = exp((double)x[i] - mx); s += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= s;
}

int main(void)
{
    const char *shared = getenv("BT_SHARED");
    char path[4096], tpath[4096];
    snprintf(path, sizeof(path), "%s/models/llama2c/stories260K.bin", shared ? shared : "../shared");
    snprintf(tpath, sizeof(tpath), "%s/models/llama2c/tok512.bin", shared ? shared : "../shared");
    bt_model *m = NULL;
    if (bt_model_load(path, tpath, &m)) { printf("SKIP: %s\n", bt_errmsg()); return 77; }
    bt_tokenizer *tok = NULL;
    if (bt_tokenizer_new(&m->vocab, &tok)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
    int32_t *prompt; size_t np;
    if (bt_tokenize(tok, "Once upon a time, there was a", 29, true, false, &prompt, &np)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
    int V = m->cfg.n_vocab, k = 3, fails = 0;

    /* exact marginal of the second generated token */
    bt_engine *e = NULL;
    if (bt_engine_new(m, 64, (int)np + 8, 1, &e)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
    double *p1 = calloc(V, sizeof(double)), *p2 = calloc(V, sizeof(double)), *tmp = calloc(V, sizeof(double));
    double *f = calloc(V, sizeof(double)), *qd = calloc(V, sizeof(double));
    bt_engine_forward(e, prompt, (int)np, 0);
    softmax(bt_engine_logits(e), V, p1);
    for (int t1 = 0; t1 < V; t1++) {
        if (p1[t1] < 1e-12) continue;
        bt_engine_forward(e, &t1, 1, (int)np);
        softmax(bt_engine_logits(e), V, tmp);
        for (int i = 0; i < V; i++) p2[i] += p1[t1] * tmp[i];
    }
    double B = 0;
    for (int i = 0; i < V; i++) B += sqrt(p2[i] * (1 - p2[i]) / N_SAMPLES);
    B /= 2;
    double bound = B + 0.025;

    /* the draft's own marginal (what accepting every draft would give) */
    bt_engine_opts dopt = { .ctx_len = 64, .max_batch = (int)np + k + 2, .n_layers = 2, .share_pool = e };
    bt_engine *de = NULL;
    if (bt_engine_new_opts(m, &dopt, &de)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
    for (int t1 = 0; t1 < V; t1++) {
        if (p1[t1] < 1e-12) continue;
        int32_t in[64];
        memcpy(in, prompt, np * sizeof(int32_t));
        in[np] = t1;
        bt_engine_forward(de, in, (int)np + 1, 0);
        softmax(bt_engine_logits(de), V, tmp);
        for (int i = 0; i < V; i++) qd[i] += p1[t1] * tmp[i];
    }
    printf("exact marginal computed; bound B + 0.025 = %.4f; TVD(draft-only, exact) = %.4f\n", bound, tvd(qd, p2, V));

    struct { const char *name; int drafter; bt_engine *draft; } cases[] = {
        { "plain sampling", BT_DRAFT_NONE, NULL },
        { "speculative self:2 k=3", BT_DRAFT_SELF, de },
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        memset(f, 0, V * sizeof(double));
        for (int s = 0; s < N_SAMPLES; s++) {
            bt_sampler_cfg sc = { .temperature = 1, .top_p = 1, .seed = 1000 + s };
            bt_sampler *smp = NULL;
            bt_sampler_new(&sc, V, &smp);
            bt_decoder_cfg dc = { .target = e, .smp = smp, .greedy = false, .tok = tok, .ignore_eos = true,
                                  .drafter = cases[c].drafter, .k = k, .drafter_name = "self:2", .draft = cases[c].draft };
            bt_decoder *d = NULL;
            int32_t out[8]; int n = 0, got = 0, second = -1;
            if (bt_decoder_new(&dc, prompt, (int)np, 8, &d)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
            while (got < 2) {
                if (bt_decoder_next(d, out, NULL, &n)) { printf("FAIL: %s\n", bt_errmsg()); return 1; }
                for (int i = 0; i < n && got < 2; i++, got++) if (got == 1) second = out[i];
            }
            f[second] += 1.0 / N_SAMPLES;
            bt_decoder_free(d);
            bt_sampler_free(smp);
        }
        double D = tvd(f, p2, V);
        bool ok = D < bound;
        printf("%s: %s TVD(empirical, exact) = %.4f (bound %.4f, N = %d)\n", ok ? "ok" : "FAIL", cases[c].name, D, bound, N_SAMPLES);
        if (!ok) fails++;
    }
    bt_engine_free(de);
    bt_engine_free(e);
    free(p1); free(p2); free(tmp); free(f); free(qd); free(prompt);
    bt_tokenizer_free(tok);
    bt_model_free(m);
    return fails ? 1 : 0;
}
