/* test_generate.c - the generation loop (src/gen/generate.c), linked with
 * the core library alone (it knows no trace: its steps go to an observer).
 *
 * On stories260K, greedy: the observer sees every step opened and closed
 * and one gen token and one snapshot per generated id; the streamed text is
 * the text; a stop string cuts the text at its first occurrence and is
 * never streamed; max_tokens 0 runs no step; poll stops the loop with its
 * value, on_text's nonzero return cancels; and two requests stepped in
 * turn on two engines give what each gives alone (all state per request). */
#include "check.h"
#include "gen/generate.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct counts {
    int begin, end, snap, gen_tokens, other_tokens, events, spec;
    int open;                       /* step_begin without step_end so far */
    bool nested;                    /* a step opened inside another */
} counts;

static int ob_begin(void *u, const char *kind, int pos0, int n_pos)
{
    counts *c = u;
    (void)kind; (void)pos0; (void)n_pos;
    if (c->open) c->nested = true;
    c->open++;
    c->begin++;
    return BT_OK;
}
static int ob_end(void *u, double ms) { counts *c = u; (void)ms; c->open--; c->end++; return BT_OK; }
static int ob_snap(void *u, const float *row, int row_pos, int32_t chosen, const bt_softmax_sums *sums)
{
    counts *c = u;
    (void)row; (void)row_pos; (void)chosen; (void)sums;
    c->snap++;
    return BT_OK;
}
static int ob_token(void *u, int pos, int32_t id, const char *role, float lp)
{
    counts *c = u;
    (void)pos; (void)id; (void)lp;
    if (!strcmp(role, "gen")) c->gen_tokens++; else c->other_tokens++;
    return BT_OK;
}
static int ob_event(void *u, int step, int pos, const char *kind, const char *detail)
{
    counts *c = u;
    (void)step; (void)pos; (void)kind; (void)detail;
    c->events++;
    return BT_OK;
}

typedef struct sink {
    char buf[4096];
    size_t n;
    int calls;
    int cancel_after;               /* on_text returns nonzero at this call (0: never) */
    int poll_calls, poll_stop_at;   /* poll returns 7 at this call (0: never) */
} sink;

static int on_text(void *user, const char *s, size_t n)
{
    sink *k = user;
    if (k->n + n < sizeof k->buf) { memcpy(k->buf + k->n, s, n); k->n += n; }
    k->calls++;
    return k->cancel_after && k->calls >= k->cancel_after;
}

static int poll(void *user)
{
    sink *k = user;
    k->poll_calls++;
    return k->poll_stop_at && k->poll_calls >= k->poll_stop_at ? 7 : 0;
}

static bt_model *m;
static bt_tokenizer *tok;
static bt_sampler *smp;

static bt_generate_cfg cfg_for(bt_engine *e, const int32_t *prompt, int np, long n, const bt_gen_observer *obs, sink *k)
{
    bt_generate_cfg c = { .dec = { .target = e, .target_obs = obs, .smp = smp, .greedy = true,
                                   .rule = { .kind = BT_ARGMAX_FIRST }, .tok = tok, .ignore_eos = true },
                          .model = m, .tok = tok, .prompt = prompt, .n_prompt = np, .max_tokens = n,
                          .ignore_eos = true, .on_text = k ? on_text : NULL, .poll = k ? poll : NULL, .user = k };
    return c;
}

int main(void)
{
    const char *shared = getenv("BT_SHARED");
    char path[4096], tpath[4096];
    snprintf(path, sizeof(path), "%s/models/llama2c/stories260K.bin", shared ? shared : "../shared");
    snprintf(tpath, sizeof(tpath), "%s/models/llama2c/tok512.bin", shared ? shared : "../shared");
    if (bt_model_load(path, tpath, &m)) { printf("SKIP: %s\n", bt_errmsg()); return 77; }
    CHECK_OK(bt_tokenizer_new(&m->vocab, &tok));
    bt_sampler_cfg sc = { .top_p = 1, .seed = 42, .rule = { .kind = BT_ARGMAX_FIRST } };
    CHECK_OK(bt_sampler_new(&sc, m->cfg.n_vocab, &smp));
    int32_t *pa = NULL, *pb = NULL;
    size_t na = 0, nb = 0;
    CHECK_OK(bt_tokenize(tok, "Once upon a time", 16, true, false, &pa, &na));
    CHECK_OK(bt_tokenize(tok, "The little dog", 14, true, false, &pb, &nb));
    bt_engine *e1 = NULL, *e2 = NULL;
    CHECK_OK(bt_engine_new(m, 128, 32, 1, &e1));
    CHECK_OK(bt_engine_new(m, 128, 32, 1, &e2));
    if (!e1 || !e2 || !pa || !pb) return 1;

    /* the whole request, observed and streamed */
    counts cn = { 0 };
    bt_gen_observer obs = { .user = &cn, .step_begin = ob_begin, .step_end = ob_end, .snapshot = ob_snap,
                            .token = ob_token, .event = ob_event };
    sink k = { 0 };
    bt_generate_cfg c = cfg_for(e1, pa, (int)na, 24, &obs, &k);
    bt_generate_out a;
    CHECK_OK(bt_generate(&c, &a));
    CHECK(a.n_ids == 24 && !strcmp(a.finish, "length"), "%d ids, finish %s", a.n_ids, a.finish);
    CHECK(a.stopped == 0);
    CHECK(cn.begin == a.stats.steps && cn.end == cn.begin && !cn.nested && cn.open == 0,
          "steps: %d opened, %d closed, decoder %d", cn.begin, cn.end, a.stats.steps);
    CHECK(cn.gen_tokens == 24 && cn.snap == 24 && cn.other_tokens == 0, "gen tokens %d, snapshots %d", cn.gen_tokens, cn.snap);
    CHECK(a.text_len > 0 && a.text_len == strlen(a.text));
    CHECK(k.n == a.text_len && a.streamed == a.text_len && !memcmp(k.buf, a.text, k.n), "streamed %zu of %zu bytes", k.n, a.text_len);
    CHECK(k.poll_calls == a.stats.emitted, "poll asked before each step (%d, %d emitted)", k.poll_calls, a.stats.emitted);

    /* no observer: the same ids */
    bt_generate_out a2;
    c = cfg_for(e1, pa, (int)na, 24, NULL, NULL);
    CHECK_OK(bt_generate(&c, &a2));
    CHECK(a2.n_ids == a.n_ids && !memcmp(a2.ids, a.ids, (size_t)a.n_ids * sizeof(int32_t)), "observing changes nothing");
    bt_generate_out_clear(&a2);

    /* a stop string: three bytes from the middle of the text */
    if (a.text_len >= 12) {
        char stop[4];
        memcpy(stop, a.text + a.text_len / 2, 3);
        stop[3] = 0;
        const char *first = strstr(a.text, stop);
        size_t cut = (size_t)(first - a.text);
        char *stops[] = { stop };
        sink ks = { 0 };
        c = cfg_for(e1, pa, (int)na, 24, NULL, &ks);
        c.stop = stops;
        c.n_stop = 1;
        bt_generate_out s;
        CHECK_OK(bt_generate(&c, &s));
        CHECK(!strcmp(s.finish, "stop") && s.text_len == cut && !memcmp(s.text, a.text, cut),
              "stop '%s': %zu bytes (want %zu), finish %s", stop, s.text_len, cut, s.finish);
        CHECK(ks.n == cut && !memcmp(ks.buf, a.text, cut), "the stop string is never streamed (%zu bytes)", ks.n);
        CHECK(s.n_ids < a.n_ids && !memcmp(s.ids, a.ids, (size_t)s.n_ids * sizeof(int32_t)));
        bt_generate_out_clear(&s);
    } else CHECK(0, "the text is too short for the stop-string check: '%s'", a.text);

    /* max_tokens 0: no step at all */
    counts c0 = { 0 };
    bt_gen_observer obs0 = obs;
    obs0.user = &c0;
    c = cfg_for(e1, pa, (int)na, 0, &obs0, NULL);
    bt_generate_out z;
    CHECK_OK(bt_generate(&c, &z));
    CHECK(z.n_ids == 0 && !strcmp(z.finish, "length") && c0.begin == 0 && z.text && z.text_len == 0);
    bt_generate_out_clear(&z);

    /* poll stops the loop between steps with its value */
    sink kp = { .poll_stop_at = 4 };
    c = cfg_for(e1, pa, (int)na, 24, NULL, &kp);
    bt_generate_out p;
    CHECK_OK(bt_generate(&c, &p));
    CHECK(p.stopped == 7 && !strcmp(p.finish, "cancelled") && p.n_ids == 3, "stopped %d, %s, %d ids", p.stopped, p.finish, p.n_ids);
    CHECK(!memcmp(p.ids, a.ids, 3 * sizeof(int32_t)));
    bt_generate_out_clear(&p);

    /* on_text's nonzero return cancels */
    sink kc = { .cancel_after = 1 };
    c = cfg_for(e1, pa, (int)na, 24, NULL, &kc);
    bt_generate_out q;
    CHECK_OK(bt_generate(&c, &q));
    CHECK(!strcmp(q.finish, "cancelled") && kc.calls == 1 && q.n_ids < 24, "%s after %d calls, %d ids", q.finish, kc.calls, q.n_ids);
    bt_generate_out_clear(&q);

    /* two requests stepped in turn, each on its own engine */
    bt_generate_out b;
    c = cfg_for(e2, pb, (int)nb, 16, NULL, NULL);
    CHECK_OK(bt_generate(&c, &b));
    bt_generation *g1 = NULL, *g2 = NULL;
    bt_generate_cfg c1 = cfg_for(e1, pa, (int)na, 24, NULL, NULL), c2 = cfg_for(e2, pb, (int)nb, 16, NULL, NULL);
    CHECK_OK(bt_generation_new(&c1, &g1));
    CHECK_OK(bt_generation_new(&c2, &g2));
    int turns = 0;
    while (g1 && g2 && (!bt_generation_done(g1) || !bt_generation_done(g2)) && turns < 100) {
        CHECK_OK(bt_generation_step(g1));
        CHECK_OK(bt_generation_step(g2));
        turns++;
    }
    bt_generate_out i1, i2;
    bt_generation_take(g1, &i1);
    bt_generation_take(g2, &i2);
    CHECK(i1.n_ids == a.n_ids && !memcmp(i1.ids, a.ids, (size_t)a.n_ids * sizeof(int32_t)) && !strcmp(i1.text, a.text),
          "request A stepped in turn gives what it gives alone");
    CHECK(i2.n_ids == b.n_ids && !memcmp(i2.ids, b.ids, (size_t)b.n_ids * sizeof(int32_t)) && !strcmp(i2.text, b.text),
          "request B stepped in turn gives what it gives alone");
    CHECK(bt_generation_out(g1)->n_ids == 0, "take moves the results out");
    bt_generation_free(g1);
    bt_generation_free(g2);
    bt_generate_out_clear(&i1);
    bt_generate_out_clear(&i2);
    bt_generate_out_clear(&b);
    bt_generate_out_clear(&a);

    bt_engine_free(e1);
    bt_engine_free(e2);
    bt_sampler_free(smp);
    bt_tokenizer_free(tok);
    bt_model_free(m);
    free(pa);
    free(pb);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
