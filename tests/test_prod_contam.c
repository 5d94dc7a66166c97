/* test_prod_contam.c - src/prod/contam.c: the plan (arms balanced per
 * block and per control, tokens unique and only in their own prompts,
 * prefix sharing as claimed, the concurrency levels, the seed), the
 * request bodies for both shapes, and the verdict on synthetic answers:
 * each class found alone where it was planted, nothing on a clean or a
 * uniformly noisy server, the replicate rule, errors. */
#include "check.h"
#include "prod/contam.h"

#include <stdlib.h>
#include <string.h>

static size_t common_prefix(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

/* answers that echo the prompt (same prompt, same answer) */
static bt_contam_answer *echo_answers(const bt_contam_plan *p)
{
    bt_contam_answer *a = calloc((size_t)p->n_reqs, sizeof *a);
    for (long i = 0; i < p->n_reqs; i++) {
        a[i].sent = a[i].answered = true;
        a[i].order = i;
        a[i].t0 = (double)i; a[i].t1 = i + 0.5;
        size_t n = strlen(p->reqs[i].prompt);
        a[i].text = malloc(n + 6);
        memcpy(a[i].text, "echo ", 5);
        memcpy(a[i].text + 5, p->reqs[i].prompt, n + 1);
        a[i].text_len = n + 5;
    }
    return a;
}

static void set_text(bt_contam_answer *a, const char *s)
{
    free(a->text);
    a->text = strdup(s);
    a->text_len = strlen(s);
}

static void free_answers(bt_contam_answer *a, long n)
{
    for (long i = 0; i < n; i++) free(a[i].text);
    free(a);
}

static int n_found(const bt_contam_verdict *v)
{
    int n = 0;
    for (int c = 0; c < BT_CONTAM_NCLASS; c++) n += v->found[c];
    return n;
}

/* plant: answers of measured controls that satisfy pick(req) differ */
typedef bool (*pick_fn)(const bt_contam_plan *p, long i);
static bool pick_after_other(const bt_contam_plan *p, long i) { return p->reqs[i].arm == BT_CONTAM_ARM_AFTER_OTHER; }
static bool pick_after_shared(const bt_contam_plan *p, long i) { return p->reqs[i].arm == BT_CONTAM_ARM_AFTER_SHARED; }
static bool pick_resent(const bt_contam_plan *p, long i) { return p->reqs[i].arm == BT_CONTAM_ARM_RESENT; }
static bool pick_repeat_half(const bt_contam_plan *p, long i) { return p->reqs[i].arm == BT_CONTAM_ARM_REPEAT && p->reqs[i].block % 2; }
static bool pick_other_resent(const bt_contam_plan *p, long i) { return pick_after_other(p, i) || pick_resent(p, i); }
static bool pick_beside_last(const bt_contam_plan *p, long i) { return p->reqs[i].arm == p->n_arms - 1; }
static bool pick_late(const bt_contam_plan *p, long i) { return p->reqs[i].block >= 2 * p->n_blocks / 3; }
/* a quarter of the measured answers, by a hash of the index (no relation to arms or time) */
static bool pick_quarter(const bt_contam_plan *p, long i)
{
    unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ULL;
    return p->reqs[i].arm >= 0 && (h >> 60) % 4 == 0;
}

static void verdict_with(const bt_contam_plan *p, pick_fn pick, bt_contam_verdict *v)
{
    bt_contam_answer *a = echo_answers(p);
    for (long i = 0; i < p->n_reqs; i++)
        if (p->reqs[i].arm >= 0 && pick(p, i)) set_text(&a[i], "something else");
    CHECK_OK(bt_contam_analyze(p, a, 0.01, v));
    free_answers(a, p->n_reqs);
}

int main(void)
{
    bt_contam_plan p;
    /* ---- the plan ---- */
    CHECK_OK(bt_contam_plan_new(40, 4, 42, &p));
    CHECK(p.n_levels == 2 && p.levels[0] == 2 && p.levels[1] == 4 && p.n_arms == 6);
    CHECK(p.n_reqs == BT_CONTAM_CONTROLS * BT_CONTAM_WARMUP + 40 * (2 + 2 + 2 + 2 + 2 + 4), "%ld requests", p.n_reqs);
    CHECK(p.n_units == BT_CONTAM_CONTROLS + 40 * 6, "%ld units", p.n_units);
    long per_arm[BT_CONTAM_MAX_ARMS] = { 0 }, per_arm_ctl[BT_CONTAM_MAX_ARMS][BT_CONTAM_CONTROLS] = { { 0 } };
    for (long i = 0; i < p.n_reqs; i++) {
        const bt_contam_req *r = &p.reqs[i];
        if (r->arm >= 0) per_arm[r->arm]++;
        if (r->arm >= 0 && r->control >= 0) per_arm_ctl[r->arm][r->control]++;
        CHECK(r->arm < 0 || r->role == (r->arm == BT_CONTAM_ARM_RESENT ? BT_CONTAM_FRESH : BT_CONTAM_CONTROL),
              "request %ld: a measured answer is a control's or a resent fresh prompt's", i);
        if (r->role == BT_CONTAM_FRESH) {
            /* fresh: first in its unit, then resent with the same prompt; it
             * starts and ends with its own nonce; no other request starts like it */
            bool first = r->arm == BT_CONTAM_ARM_FRESH;
            CHECK(first ? p.units[r->unit].first == i : p.reqs[i - 1].arm == BT_CONTAM_ARM_FRESH && !strcmp(p.reqs[i - 1].prompt, r->prompt));
            CHECK(!strncmp(r->prompt, r->token, 9) && strstr(r->prompt + 9, r->token) && strlen(r->prompt) > 350, "fresh: %s", r->prompt);
            for (long j = 0; j < p.n_reqs && first; j++)
                if (j != i && j != i + 1) CHECK(common_prefix(p.reqs[j].prompt, r->prompt) < 4, "requests %ld and %ld share a prefix", i, j);
        }
        CHECK(strstr(r->prompt, r->token) != NULL, "request %ld: its token is in its prompt", i);
        CHECK(strlen(r->token) == 9 && r->token[4] == '-');
        for (long j = 0; j < p.n_reqs; j++) {
            if (!strcmp(p.reqs[j].token, r->token)) {
                CHECK(j == i || (r->role == BT_CONTAM_CONTROL && p.reqs[j].role == BT_CONTAM_CONTROL && p.reqs[j].control == r->control) ||
                      (r->role == BT_CONTAM_FRESH && p.reqs[j].unit == r->unit),
                      "requests %ld and %ld share the token %s", i, j, r->token);
            } else CHECK(!strstr(r->prompt, p.reqs[j].token), "request %ld's prompt holds request %ld's token", i, j);
        }
        if (r->role == BT_CONTAM_NONCE_SHARED) {
            const char *ctl = NULL;
            for (long j = 0; j < p.n_reqs && !ctl; j++)
                if (p.reqs[j].role == BT_CONTAM_CONTROL && p.reqs[j].control == r->control) ctl = p.reqs[j].prompt;
            CHECK(ctl && common_prefix(ctl, r->prompt) >= 200, "a shared-prefix request shares its control's paragraph");
        }
        if (r->role == BT_CONTAM_NONCE_OTHER)
            for (long j = 0; j < p.n_reqs; j++)
                if (p.reqs[j].role == BT_CONTAM_CONTROL) CHECK(common_prefix(p.reqs[j].prompt, r->prompt) < 4);
        if (r->role == BT_CONTAM_CONTROL)
            for (long j = 0; j < p.n_reqs; j++)
                if (p.reqs[j].role == BT_CONTAM_CONTROL && p.reqs[j].control != r->control)
                    CHECK(common_prefix(p.reqs[j].prompt, r->prompt) < 4, "two controls share a prefix");
    }
    for (int a = 0; a < p.n_arms; a++) {
        CHECK(per_arm[a] == 40, "arm %d: %ld measured", a, per_arm[a]);
        for (int k = 0; k < BT_CONTAM_CONTROLS && a != BT_CONTAM_ARM_RESENT; k++)
            CHECK(per_arm_ctl[a][k] == 10, "arm %d control %d: %ld", a, k, per_arm_ctl[a][k]);
    }
    /* every block holds one unit of every arm; warm-up first; unit shapes */
    for (long u = 0; u < BT_CONTAM_CONTROLS; u++) CHECK(p.units[u].arm == BT_CONTAM_ARM_WARMUP && !p.units[u].parallel);
    for (long b = 0; b < 40; b++) {
        int seen = 0;
        for (long u = BT_CONTAM_CONTROLS; u < p.n_units; u++) {
            if (p.units[u].block != b) continue;
            seen |= 1 << p.units[u].arm;
            bool par = p.units[u].arm >= BT_CONTAM_ARM_BESIDE;
            CHECK(p.units[u].parallel == par);
            CHECK(p.units[u].count == (par ? p.levels[p.units[u].arm - BT_CONTAM_ARM_BESIDE] : 2));
            if (!par) CHECK(p.reqs[p.units[u].first + 1].arm == p.units[u].arm, "a serial unit measures its second request");
        }
        CHECK(seen == 63, "block %ld holds arms %#x", b, seen);
    }
    char name[32];
    CHECK(!strcmp(bt_contam_arm_name(&p, 5, name, sizeof name), "beside_4"));
    CHECK(!strcmp(bt_contam_arm_name(&p, BT_CONTAM_ARM_RESENT, name, sizeof name), "resent"));
    CHECK(!strcmp(bt_contam_arm_name(&p, BT_CONTAM_ARM_AFTER_SHARED, name, sizeof name), "after_shared"));
    bt_contam_plan q;
    CHECK_OK(bt_contam_plan_new(40, 4, 42, &q));
    bool same = q.n_reqs == p.n_reqs;
    for (long i = 0; same && i < p.n_reqs; i++) same = !strcmp(p.reqs[i].prompt, q.reqs[i].prompt);
    CHECK(same, "the same seed gives the same plan");
    bt_contam_plan_clear(&q);
    CHECK_OK(bt_contam_plan_new(40, 4, 43, &q));
    CHECK(strcmp(p.reqs[0].token, q.reqs[0].token), "another seed gives other tokens");
    bt_contam_plan_clear(&q);
    int want6[] = { 2, 4, 6 }, want8[] = { 2, 4, 8 };
    CHECK_OK(bt_contam_plan_new(2, 6, 1, &q));
    CHECK(q.n_levels == 3 && !memcmp(q.levels, want6, sizeof want6));
    bt_contam_plan_clear(&q);
    CHECK_OK(bt_contam_plan_new(2, 8, 1, &q));
    CHECK(q.n_levels == 3 && !memcmp(q.levels, want8, sizeof want8));
    bt_contam_plan_clear(&q);
    CHECK_OK(bt_contam_plan_new(2, 2, 1, &q));
    CHECK(q.n_levels == 1 && q.levels[0] == 2 && q.n_arms == 5);
    bt_contam_plan_clear(&q);
    CHECK(bt_contam_plan_new(40, 1, 1, &q) == BT_EINVAL);
    CHECK(bt_contam_plan_new(0, 4, 1, &q) == BT_EINVAL);

    /* ---- bodies ---- */
    char *b;
    size_t bl;
    CHECK_OK(bt_contam_body(NULL, 0, "Hello", &b, &bl));
    json_t *j = json_loads(b, 0, NULL);
    CHECK(j && !strcmp(json_string_value(json_object_get(j, "prompt")), "Hello") &&
          json_number_value(json_object_get(j, "temperature")) == 0 && json_integer_value(json_object_get(j, "max_tokens")) == 16,
          "completion default: %s", b);
    json_decref(j); free(b);
    const char *chat = "{\"model\":\"m\",\"max_tokens\":7,\"stream\":true,\"n\":3,\"temperature\":0.8,\"messages\":["
                       "{\"role\":\"system\",\"content\":\"Be terse.\"},{\"role\":\"user\",\"content\":\"old\"},"
                       "{\"role\":\"assistant\",\"content\":\"x\"}]}";
    CHECK_OK(bt_contam_body(chat, strlen(chat), "New prompt", &b, &bl));
    j = json_loads(b, 0, NULL);
    json_t *m = json_object_get(j, "messages");
    CHECK(json_array_size(m) == 2, "system kept, one user message: %s", b);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 0), "content")), "Be terse."));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 1), "content")), "New prompt"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m, 1), "role")), "user"));
    CHECK(!json_object_get(j, "stream") && !json_object_get(j, "n") && !json_object_get(j, "prompt"), "%s", b);
    CHECK(json_integer_value(json_object_get(j, "max_tokens")) == 7 && json_number_value(json_object_get(j, "temperature")) == 0);
    CHECK(!strcmp(json_string_value(json_object_get(j, "model")), "m"));
    json_decref(j); free(b);
    CHECK(bt_contam_body("[1]", 3, "x", &b, &bl) == BT_EINVAL);
    CHECK(bt_contam_body("{\"messages\":3}", 14, "x", &b, &bl) == BT_EINVAL);
    CHECK(bt_contam_body("{\"prompt\":", 10, "x", &b, &bl) == BT_EINVAL);

    /* ---- the verdict ---- */
    bt_contam_verdict v;
    bt_contam_answer *a = echo_answers(&p);
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 0 && !n_found(&v) && v.leaks == 0 && v.answered == p.n_reqs, "clean: outcome %d", v.outcome);
    CHECK(v.n_tests == 6 && v.tests[2].cls == BT_CONTAM_CACHE && v.tests[2].base == BT_CONTAM_ARM_NONE);
    CHECK(v.hist_called && v.hist_n == 40 && v.hist_dev == 0 && v.pair.n == 40 && v.pair.dev == 0);
    for (int t = 0; t < v.n_tests; t++) CHECK(v.tests[t].called && !v.tests[t].found && v.tests[t].p == 1.0);
    CHECK(v.early.n == 13 * 6 && v.late.n == 13 * 6, "thirds %ld %ld", v.early.n, v.late.n);
    CHECK(v.leak_hi < 0.01 && v.leak_lo == 0);
    /* the same at a stricter leak bound: inconclusive */
    CHECK_OK(bt_contam_analyze(&p, a, 0.005, &v));
    CHECK(v.outcome == 2 && v.leak_needed > p.n_reqs, "leak bound not met: outcome %d, needed %ld", v.outcome, v.leak_needed);

    /* one leak: a nonce request's answer holds the previous request's nonce */
    long victim = -1, src = -1;
    for (long i = 1; i < p.n_reqs && victim < 0; i++)
        if (p.reqs[i].role == BT_CONTAM_NONCE_OTHER && p.reqs[i - 1].role != BT_CONTAM_CONTROL) { victim = i; src = i - 1; }
    CHECK(victim > 0);
    char buf[128];
    snprintf(buf, sizeof buf, "the code is %s and also %s", p.reqs[victim].token, p.reqs[src].token);
    set_text(&a[victim], buf);
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_LEAK] && n_found(&v) == 1 && v.leaks == 1, "leak: outcome %d", v.outcome);
    CHECK(v.n_ex == 1 && v.ex[0].req == victim && v.ex[0].src == src && v.ex[0].lag == 1 && !v.ex[0].beside);
    CHECK(v.leak_first == victim + 1 && !strcmp(v.ex[0].token, p.reqs[src].token));
    /* a control's marker in a nonce answer is a leak too; the answer's own token is not */
    long ctl = p.n_reqs - 1;
    while (p.reqs[ctl].role != BT_CONTAM_CONTROL) ctl--;
    snprintf(buf, sizeof buf, "%s", p.reqs[ctl].token);
    set_text(&a[victim], buf);
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.leaks == 1 && (v.ex[0].lag < 0) == (a[v.ex[0].src].order > a[victim].order), "marker leak");
    snprintf(buf, sizeof buf, "%s %s", p.reqs[victim].token, p.reqs[victim].token);
    set_text(&a[victim], buf);
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.leaks == 0 && v.outcome == 0, "its own nonce is no leak");
    /* an http_error on a measured answer is a deviation */
    long meas = 0;
    while (p.reqs[meas].arm != BT_CONTAM_ARM_REPEAT) meas++;
    a[meas].answered = false; a[meas].cls = BT_ANS_HTTP_ERROR;
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.arms[BT_CONTAM_ARM_REPEAT].dev == 1 && v.arms[BT_CONTAM_ARM_REPEAT].classes[BT_ANS_HTTP_ERROR] == 1);
    /* no answered warm-up for a control: no reference, an error */
    for (long i = 0; i < BT_CONTAM_WARMUP; i++) a[i].answered = false;
    CHECK(bt_contam_analyze(&p, a, 0.01, &v) == BT_EINVAL);
    /* the reference is the modal warm-up answer: the first one odd */
    for (long i = 0; i < BT_CONTAM_WARMUP; i++) a[i].answered = true;
    a[meas].answered = true; a[meas].cls = BT_ANS_OK;
    set_text(&a[0], "a cold start");
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 0 && v.warm.dev == 1, "modal reference: outcome %d, warm-up deviations %ld", v.outcome, v.warm.dev);
    /* an engine failing alone (every answer a wall, the references too) is not clean */
    for (long i = 0; i < p.n_reqs; i++) { set_text(&a[i], "!!!!!!!!!!!!"); a[i].cls = BT_ANS_TOKEN_WALL; }
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 2 && !n_found(&v) && v.ref_failed == 4 && v.ref_class == BT_ANS_TOKEN_WALL, "walls: outcome %d", v.outcome);
    free_answers(a, p.n_reqs);
    /* fine references, but every fifth block's measured answers a wall in
     * every arm alike (a poisoned shared block): the same request right
     * after itself answers otherwise: history_dependence, the walls named */
    a = echo_answers(&p);
    long nw = 0;
    for (long i = 0; i < p.n_reqs; i++)
        if (p.reqs[i].arm > BT_CONTAM_ARM_WARMUP && p.reqs[i].block % 5 == 0) {
            set_text(&a[i], "!!!!!!!!!!!!");
            a[i].cls = BT_ANS_TOKEN_WALL;
            nw++;
        }
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_HISTORY] && n_found(&v) == 1 && !v.ref_failed && v.degen == nw &&
          v.degen_class == BT_ANS_TOKEN_WALL, "constant walls: outcome %d, degenerate %ld of %ld", v.outcome, v.degen, nw);
    /* the same walls only beside others, too few to call: inconclusive, the walls named */
    free_answers(a, p.n_reqs);
    a = echo_answers(&p);
    for (long i = 0; i < p.n_reqs; i++)
        if (p.reqs[i].arm >= BT_CONTAM_ARM_BESIDE && p.reqs[i].block % 10 == 0) { set_text(&a[i], "!!!!!!!!!!!!"); a[i].cls = BT_ANS_TOKEN_WALL; }
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 2 && !n_found(&v) && v.degen == 8, "walls beside: outcome %d, degenerate %ld", v.outcome, v.degen);
    free_answers(a, p.n_reqs);

    /* each dependence alone */
    verdict_with(&p, pick_after_other, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_ORDER] && n_found(&v) == 1, "order: %d found", n_found(&v));
    verdict_with(&p, pick_after_shared, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_PREFIX] && n_found(&v) == 1, "prefix: %d found", n_found(&v));
    verdict_with(&p, pick_beside_last, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_CONCURRENCY] && n_found(&v) == 1, "concurrency: %d found", n_found(&v));
    CHECK(v.tests[4].found && !v.tests[3].found, "beside_4 found, beside_2 not");
    verdict_with(&p, pick_resent, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_CACHE] && n_found(&v) == 1, "cache: %d found", n_found(&v));
    verdict_with(&p, pick_repeat_half, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_HISTORY] && n_found(&v) == 1 && v.hist_dev == 20, "history: %d found", n_found(&v));
    /* a fresh prompt's first answer ran after another prompt: with
     * order_dependence found, a resent differing is explained by it */
    verdict_with(&p, pick_other_resent, &v);
    CHECK(v.found[BT_CONTAM_ORDER] && !v.found[BT_CONTAM_CACHE] && v.tests[2].explained == BT_CONTAM_ORDER && n_found(&v) == 1,
          "order + resent: %d found", n_found(&v));
    verdict_with(&p, pick_late, &v);
    CHECK(v.outcome == 1 && v.found[BT_CONTAM_DRIFT] && n_found(&v) == 1 && v.hist_explained == BT_CONTAM_DRIFT,
          "drift: %d found", n_found(&v));
    /* noise spread over every arm and the whole run: no comparison found,
     * but the same request right after itself answers otherwise */
    verdict_with(&p, pick_quarter, &v);
    bool any_test = false;
    for (int t = 0; t < v.n_tests; t++) any_test |= v.tests[t].found;
    CHECK(!any_test && v.found[BT_CONTAM_HISTORY] && n_found(&v) == 1, "uniform noise: %d found, outcome %d", n_found(&v), v.outcome);
    /* one repeat answer differing: not enough to call, never clean */
    a = echo_answers(&p);
    for (long i = 0; i < p.n_reqs; i++)
        if (p.reqs[i].arm == BT_CONTAM_ARM_REPEAT) { set_text(&a[i], "changed once"); break; }
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 2 && !n_found(&v) && v.hist_dev == 1, "one repeat: outcome %d", v.outcome);
    free_answers(a, p.n_reqs);
    /* a small excess, too small to call: inconclusive, never clean */
    a = echo_answers(&p);
    for (long i = 0, k = 0; i < p.n_reqs && k < 3; i++)
        if (p.reqs[i].arm == BT_CONTAM_ARM_AFTER_OTHER) { set_text(&a[i], "changed"); k++; }
    CHECK_OK(bt_contam_analyze(&p, a, 0.01, &v));
    CHECK(v.outcome == 2 && !n_found(&v) && v.tests[0].worse && !v.tests[0].found && v.tests[0].needed > 40,
          "3 of 40: outcome %d, needed %ld", v.outcome, v.tests[0].needed);
    free_answers(a, p.n_reqs);
    bt_contam_plan_clear(&p);

    /* the replicate rule: a clear difference with 10 a side is not called */
    CHECK_OK(bt_contam_plan_new(10, 4, 7, &p));
    verdict_with(&p, pick_after_other, &v);
    CHECK(v.outcome == 2 && !n_found(&v) && !v.tests[0].called && v.tests[0].fa == 10 && v.tests[0].needed >= 40,
          "10 a side: outcome %d, needed %ld", v.outcome, v.tests[0].needed);
    bt_contam_plan_clear(&p);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
