/* cmd_probe.c - `bangtrace probe`: send one request N times to a server (or
 * the native engine), classify every answer, and report the failure rate
 * with its Wilson 95% interval; --compare runs two arms interleaved and
 * applies Fisher's exact test under the replicate rule.
 *
 * stdout: the report (or one JSON object); stderr: the progress bar (on a
 * terminal only) and errors. Exit 0: the rate's upper bound is under
 * --max-fail; 1: failures shown, or too few requests to bound the rate;
 * 2: error. */
#include "cmd.h"
#include "args.h"
#include "prod/classify.h"
#include "prod/contam.h"
#include "prod/contam_run.h"
#include "prod/stats.h"
#include "prod/target.h"
#include "gen/request.h"
#include "base/text.h"
#include "base/util.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_probe_help(FILE *out)
{
    fputs(
        "usage: bangtrace probe (--url URL | --model M [--tokenizer T] [--inject SPEC]...)\n"
        "                       --request R.json [-n N] [--concurrency C] [--seed-sweep]\n"
        "                       [--expect REGEX] [--max-fail P] [--timeout S] [--threads N] [--json]\n"
        "       bangtrace probe --compare ARM ARM --request R.json [-n N] ...\n"
        "       bangtrace probe --contamination (--url URL | --model M) [--request SHAPE.json] [-n N]\n"
        "                       [--concurrency C] [--nonce-seed S] [--max-fail P] [--timeout S] [--json]\n\n"
        "Send one request N times and classify every answer: ok, http_error,\n"
        "invalid_token, empty, token_wall (the `!!!!` / token-0 signature),\n"
        "repetition_loop, past_stop, degenerate_tail (cut at max_tokens), nonfinite (the\n"
        "server's own detectors saw non-finite values: our serve's bangtrace.events, or\n"
        "the native engine's), expect_failed.\n"
        "Prints the count per class, the failure rate with its Wilson 95% interval,\n"
        "latency percentiles, and a progress bar when stderr is a terminal.\n\n"
        "  --url URL            an OpenAI-compatible server (http://host:port or .../v1);\n"
        "                       messages in the body go to /v1/chat/completions, a prompt\n"
        "                       to /v1/completions\n"
        "  --model M            the native engine in-process (as `run --request`); with\n"
        "  --tokenizer T        the llama2.c tokenizer for a llama2.c checkpoint\n"
        "  --inject SPEC        fault injection for the last --model given (doc/inject.md)\n"
        "  --request R.json     the request body ('-' reads standard input)\n"
        "  -n N                 requests (per arm with --compare; default 40)\n"
        "  --concurrency C      requests in flight at once (default 1; native: C engines)\n"
        "  --seed-sweep         request i gets \"seed\": i (sampled requests differ)\n"
        "  --expect REGEX       an answer must match REGEX (PCRE2), else expect_failed\n"
        "  --max-fail P         pass when the failure rate's upper 95% bound is under P\n"
        "                       (default 0.01)\n"
        "  --timeout S          seconds per HTTP request (default 60)\n"
        "  --threads N          compute threads per native engine (default 1)\n"
        "  --compare            two arms, given as two of --url / --model (each --model with\n"
        "                       its own --inject specs), run interleaved; reports both rates\n"
        "                       and Fisher's exact test. With fewer than 40 requests per arm\n"
        "                       the difference is reported but never called fixed, with how\n"
        "                       many requests per arm would be needed\n"
        "  --contamination      do requests influence each other? No request file needed:\n"
        "                       4 greedy control prompts, each answered first alone (the\n"
        "                       reference), then N times each: after itself, after an\n"
        "                       unrelated request, after one sharing its prefix, and beside\n"
        "                       C-1 others at concurrency 2, 4, ... C (default 4); and a\n"
        "                       fresh prompt sent twice (resent), shuffled; every other\n"
        "                       request carries a unique nonce. Finds nonce_leak (an\n"
        "                       answer holds another request's nonce), order_dependence,\n"
        "                       prefix_dependence, concurrency_dependence (answers differ\n"
        "                       from the reference more there: Fisher's exact test,\n"
        "                       Bonferroni, at least 40 per side), cache_dependence (a\n"
        "                       resent answer departs from its first more than a repeat\n"
        "                       from the send before it), history_dependence (2 or more\n"
        "                       answers of a request right after itself differ) and drift\n"
        "                       (the last third of the run differs more than the first).\n"
        "                       --request gives the shape only (chat or\n"
        "                       completion, model, max_tokens: default 16); temperature is\n"
        "                       set to 0. -n N: answers per comparison (default 40)\n"
        "  --nonce-seed S       draw the nonces and the order from S (default: the clock)\n"
        "  --json               one JSON object on stdout instead of the report\n\n"
        "Exit status: 0 the failure rate's upper bound is under --max-fail; 1 failures were\n"
        "seen, or too few requests to bound the rate (the report says how many more);\n"
        "2 error. With --compare: 0 the arms agree (failures seen, at least 40 requests\n"
        "per arm, no significant difference); 1 the arms differ significantly; 2 error;\n"
        "3 neither arm failed; 4 not called (failures seen, fewer than 40 requests per\n"
        "arm). --json's \"outcome\" says the same: agree, differ, neither_failed, not_called.\n"
        "With --contamination: 0 clean (every comparison called, nothing found, no side\n"
        "differing more often than its baseline, the leak rate's upper bound under\n"
        "--max-fail, no reference answer degenerate alone); 1 contamination found (the\n"
        "classes named), or inconclusive (too few requests, or a difference too small to\n"
        "call: the report says how many would do; or the references fail alone); 2 error.\n"
        "--json's"
        " \"outcome\": clean, contaminated, inconclusive; \"found\" lists the classes.\n", out);
}

#define MAX_ARMS 2

typedef struct arm {
    const char *url, *model;
    const char *inject[16];
    int n_inject;
    bt_target *t;
    long counts[BT_ANS_COUNT];
    long n, fails;
    double *lat;
    char example[BT_ANS_COUNT][300];
} arm;

typedef struct probe {
    arm arms[MAX_ARMS];
    int n_arms;
    const char *tokenizer, *request, *expect_re;
    long n, conc, threads;
    double max_fail, timeout;
    bool seed_sweep, json, compare;
    /* --contamination (prod/contam.h) */
    bool contam, conc_given, seed_given;
    unsigned long long nonce_seed;
    char *body;
    size_t body_len;
    bt_request req;
    bt_expect *expect;
    /* shared work queue */
    pthread_mutex_t lock;
    long next, done, total;
    int err;
    char errmsg[512];
    bool bar;
} probe;

static int parse_args(int argc, char **argv, probe *p)
{
    p->n = 40; p->conc = 1; p->max_fail = 0.01; p->timeout = 60;
    /* --model names a target (an arm), like --url: taken from the group
     * as it comes */
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_THREADS, .threads = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return bt_error(BT_EINVAL, "%s needs a value", a); i++; } while (0)
        bool taken;
        g.model = NULL;
        if (bt_args_take(&g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken && !g.model) continue;            /* --tokenizer, --threads */
        const char *url = NULL;
        if (!taken && !strcmp(a, "--url")) { VAL(); url = v; }
        if (g.model || url) {                       /* a target: --model M or --url URL */
            if (p->n_arms == MAX_ARMS) return bt_error(BT_EINVAL, "at most two targets (--url / --model)");
            arm *r = &p->arms[p->n_arms++];
            r->model = g.model;
            r->url = url;
        } else if (!strcmp(a, "--inject")) {
            VAL();
            arm *r = p->n_arms ? &p->arms[p->n_arms - 1] : NULL;
            if (!r || !r->model) return bt_error(BT_EINVAL, "--inject applies to the native engine: give it after --model M");
            if (r->n_inject == 16) return bt_error(BT_EINVAL, "at most 16 --inject specs per arm");
            r->inject[r->n_inject++] = v;
        } else if (!strcmp(a, "--request")) { VAL(); p->request = v; }
        else if (!strcmp(a, "--expect")) { VAL(); p->expect_re = v; }
        else if (!strcmp(a, "-n")) { VAL(); if (bt_parse_int(a, v, 1, 10000000, &p->n)) return BT_EINVAL; }
        else if (!strcmp(a, "--concurrency")) { VAL(); if (bt_parse_int(a, v, 1, 256, &p->conc)) return BT_EINVAL; p->conc_given = true; }
        else if (!strcmp(a, "--max-fail")) { VAL(); if (bt_parse_float(a, v, 1e-9, 1, &p->max_fail)) return BT_EINVAL; }
        else if (!strcmp(a, "--timeout")) { VAL(); if (bt_parse_float(a, v, 0.001, 86400, &p->timeout)) return BT_EINVAL; }
        else if (!strcmp(a, "--seed-sweep")) p->seed_sweep = true;
        else if (!strcmp(a, "--compare")) p->compare = true;
        else if (!strcmp(a, "--json")) p->json = true;
        /* --contamination's own flags */
        else if (!strcmp(a, "--contamination")) p->contam = true;
        else if (!strcmp(a, "--nonce-seed")) {
            VAL();
            long s;
            if (bt_parse_int(a, v, 0, 0x7fffffffffffffffL, &s)) return BT_EINVAL;
            p->nonce_seed = (unsigned long long)s;
            p->seed_given = true;
        }
        else return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help probe)", a);
#undef VAL
    }
    p->tokenizer = g.tokenizer; p->threads = g.threads;
    if (!p->n_arms) return bt_error(BT_EINVAL, "give --url URL or --model M (see bangtrace help probe)");
    if (p->contam) {
        if (p->compare || p->n_arms != 1) return bt_error(BT_EINVAL, "--contamination takes one target, not --compare");
        if (p->seed_sweep || p->expect_re)
            return bt_error(BT_EINVAL, "--contamination sends its own greedy prompts: %s does not apply",
                            p->seed_sweep ? "--seed-sweep" : "--expect");
        if (!p->conc_given) p->conc = 4;
        if (p->conc < 2) return bt_error(BT_EINVAL, "--contamination needs --concurrency 2 or more");
        if (p->n > 100000) return bt_error(BT_EINVAL, "--contamination: -n %ld is past 100000", p->n);
        return BT_OK;
    }
    if (p->seed_given) return bt_error(BT_EINVAL, "--nonce-seed applies to --contamination");
    if (p->compare && p->n_arms != 2) return bt_error(BT_EINVAL, "--compare needs two targets: two of --url / --model");
    if (!p->compare && p->n_arms != 1) return bt_error(BT_EINVAL, "two targets need --compare");
    if (!p->request) return bt_error(BT_EINVAL, "--request R.json is required");
    return BT_OK;
}

/* The body of request i: the file's, with "seed": i under --seed-sweep. */
static char *body_for(const probe *p, long i, size_t *len)
{
    if (!p->seed_sweep) {
        char *b = malloc(p->body_len + 1);
        if (b) { memcpy(b, p->body, p->body_len + 1); *len = p->body_len; }
        return b;
    }
    json_t *j = json_loadb(p->body, p->body_len, 0, NULL);
    if (!j) return NULL;
    json_object_set_new(j, "seed", json_integer(i));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s) *len = strlen(s);
    return s;
}

static void draw_bar(probe *p)
{
    int w = 40, f = (int)(w * p->done / (p->total ? p->total : 1));
    long fails = 0;
    for (int a = 0; a < p->n_arms; a++) fails += p->arms[a].fails;
    fprintf(stderr, "\r[%.*s%*s] %ld/%ld, %ld failed", f, "########################################", w - f, "", p->done, p->total, fails);
    if (p->done == p->total) fputc('\n', stderr);
    fflush(stderr);
}

static void *worker(void *u)
{
    probe *p = ((void **)u)[0];
    int slot = (int)(intptr_t)((void **)u)[1];
    for (;;) {
        pthread_mutex_lock(&p->lock);
        long i = p->err ? p->total : p->next++;
        pthread_mutex_unlock(&p->lock);
        if (i >= p->total) break;
        arm *r = &p->arms[i % p->n_arms];       /* interleaved arms */
        long k = i / p->n_arms;
        size_t len = 0;
        char *body = body_for(p, k, &len);
        bt_reply rep;
        int rc = body ? bt_target_ask(r->t, slot, body, len, &rep) : bt_error(BT_ENOMEM, "out of memory");
        free(body);
        pthread_mutex_lock(&p->lock);
        if (rc) {
            if (!p->err) { p->err = rc; snprintf(p->errmsg, sizeof p->errmsg, "%s", bt_errmsg()); }
        } else {
            bt_answer ans = bt_reply_answer(&rep, p->req.stop, p->req.n_stop);
            char why[600];
            int c = bt_answer_classify(&ans, p->expect, why, sizeof why);
            if (c == BT_ANS_HTTP_ERROR && rep.error[0]) snprintf(why, sizeof why, "%s", rep.error);
            r->counts[c]++;
            if (c != BT_ANS_OK) r->fails++;
            if (!r->example[c][0]) snprintf(r->example[c], sizeof r->example[c], "%.290s", why);
            r->lat[r->n++] = rep.ms;
            p->done++;
            if (p->bar) draw_bar(p);
        }
        pthread_mutex_unlock(&p->lock);
        if (!rc) bt_reply_clear(&rep);
    }
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, long n, double q)
{
    if (n <= 0) return NAN;
    long i = (long)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static json_t *arm_json(const arm *r)
{
    double lo, hi;
    bt_stats_wilson(r->fails, r->n, &lo, &hi);
    json_t *c = json_object();
    for (int k = 0; k < BT_ANS_COUNT; k++) json_object_set_new(c, bt_answer_class_name(k), json_integer(r->counts[k]));
    return json_pack("{s:s,s:I,s:I,s:f,s:[f,f],s:o,s:{s:f,s:f,s:f,s:f}}", "target", r->url ? r->url : r->model,
                     "requests", (json_int_t)r->n, "failures", (json_int_t)r->fails, "failure_rate", r->n ? (double)r->fails / r->n : 0.0,
                     "wilson95", lo, hi, "classes", c, "latency_ms", "p50", pct(r->lat, r->n, .5), "p90", pct(r->lat, r->n, .9),
                     "p99", pct(r->lat, r->n, .99), "max", pct(r->lat, r->n, 1));
}

static void arm_print(const probe *p, const arm *r, const char *label)
{
    double lo, hi;
    bt_stats_wilson(r->fails, r->n, &lo, &hi);
    bt_text_printf(stdout, "%s%s: %ld requests\n", label, r->url ? r->url : r->model, r->n);
    for (int k = 0; k < BT_ANS_COUNT; k++) {
        if (!r->counts[k] && k != BT_ANS_OK) continue;
        bt_text_printf(stdout, "  %-16s %6ld", bt_answer_class_name(k), r->counts[k]);
        if (k != BT_ANS_OK && r->example[k][0]) bt_text_printf(stdout, "   e.g. %s", r->example[k]);
        fputc('\n', stdout);
    }
    printf("  failure rate %.2f%% (%ld of %ld), Wilson 95%% interval [%.2f%%, %.2f%%]\n",
           r->n ? 100.0 * r->fails / r->n : 0.0, r->fails, r->n, 100 * lo, 100 * hi);
    printf("  latency ms: p50 %.1f, p90 %.1f, p99 %.1f, max %.1f\n", pct(r->lat, r->n, .5), pct(r->lat, r->n, .9),
           pct(r->lat, r->n, .99), pct(r->lat, r->n, 1));
    (void)p;
}

static void contam_bar(void *u, long done, long total)
{
    (void)u;
    int w = 40, f = (int)(w * done / (total ? total : 1));
    fprintf(stderr, "\r[%.*s%*s] %ld/%ld", f, "########################################", w - f, "", done, total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* probe --contamination (prod/contam.h): the plan, sent to the one target,
 * judged; exit 0 clean, 1 contaminated or inconclusive, 2 error. */
static int probe_contamination(probe *p)
{
    int status = 2;
    bt_contam_plan plan = { 0 };
    bt_contam_answer *ans = NULL;
    bt_target *t = NULL;
    bt_request req = { 0 };
    bool have_req = false;
    char *body = NULL;
    size_t len;
    if (p->request && bt_read_file(p->request, &p->body, &p->body_len)) goto fail;
    unsigned long long seed = p->seed_given ? p->nonce_seed
                              : ((unsigned long long)(bt_now() * 1e6) ^ ((unsigned long long)getpid() << 32)) & 0x7fffffffffffffffULL;
    if (bt_contam_plan_new(p->n, (int)p->conc, seed, &plan)) goto fail;
    /* the shape must make a valid request: checked on the first body, before anything is sent */
    if (bt_contam_body(p->body, p->body_len, plan.reqs[0].prompt, &body, &len)) {
        if (p->request) bt_error(BT_EINVAL, "%s: %s", p->request, bt_errmsg());
        goto fail;
    }
    /* a field our parser does not know (llama-server's cache_prompt, ...) is
     * the server's, sent as it is: the parser's "is ignored" warnings (it
     * writes them to stderr, unconditionally) would be wrong here. Still
     * one thread; errors come back in bt_errmsg, not on stderr. */
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (saved >= 0 && devnull >= 0) dup2(devnull, 2);
    int prc = bt_request_parse(body, len, p->request ? p->request : "the request", &req);
    fflush(stderr);
    if (saved >= 0 && devnull >= 0) dup2(saved, 2);
    if (saved >= 0) close(saved);
    if (devnull >= 0) close(devnull);
    if (prc) goto fail;
    have_req = true;
    arm *r = &p->arms[0];
    bt_target_cfg tc = { .url = r->url, .model = r->model, .tokenizer = p->tokenizer, .inject = r->inject,
                         .n_inject = r->n_inject, .slots = (int)p->conc, .threads = (int)p->threads, .timeout_s = p->timeout };
    if (bt_target_open(&tc, &t)) goto fail;
    if (!(ans = calloc((size_t)plan.n_reqs, sizeof *ans))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    bool bar = isatty(2) && bt_log_level > 0;
    if (bt_contam_run(t, &plan, p->body, p->body_len, req.stop, req.n_stop, ans, bar ? contam_bar : NULL, NULL)) goto fail;
    bt_contam_verdict v;
    if (bt_contam_analyze(&plan, ans, p->max_fail, &v)) goto fail;
    const char *name = r->url ? r->url : r->model;   /* what the verdict names */
    if (p->json) {
        json_t *j = bt_contam_json(name, &plan, ans, &v);
        char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        json_decref(j);
        if (!s) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        puts(s);
        free(s);
    } else bt_contam_print(stdout, name, &plan, ans, &v);
    fflush(stdout);
    status = v.outcome == 0 ? 0 : 1;
    goto done;
fail:
    status = bt_cmd_fail("probe");
done:
    free(body);
    if (have_req) bt_request_clear(&req);
    bt_contam_answers_free(ans, plan.n_reqs);
    free(ans);
    bt_target_close(t);
    bt_contam_plan_clear(&plan);
    return status;
}

int cmd_probe(int argc, char **argv)
{
    probe p;
    memset(&p, 0, sizeof p);
    pthread_mutex_init(&p.lock, NULL);
    int status = 2;
    pthread_t *th = NULL;
    void **args = NULL;
    json_t *out = NULL;
    if (parse_args(argc, argv, &p)) goto fail;
    if (p.contam) { status = probe_contamination(&p); goto done; }
    if (bt_read_file(p.request, &p.body, &p.body_len)) goto fail;
    if (bt_request_parse(p.body, p.body_len, p.request, &p.req)) goto fail;
    if (p.expect_re && bt_expect_new(p.expect_re, &p.expect)) goto fail;
    for (int a = 0; a < p.n_arms; a++) {
        arm *r = &p.arms[a];
        bt_target_cfg tc = { .url = r->url, .model = r->model, .tokenizer = p.tokenizer, .inject = r->inject,
                             .n_inject = r->n_inject, .slots = (int)p.conc, .threads = (int)p.threads, .timeout_s = p.timeout };
        if (bt_target_open(&tc, &r->t)) goto fail;
        if (!(r->lat = calloc((size_t)p.n, sizeof(double)))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    }
    p.total = p.n * p.n_arms;
    p.bar = isatty(2) && bt_log_level > 0;
    th = calloc((size_t)p.conc, sizeof *th);
    args = calloc((size_t)p.conc * 2, sizeof *args);
    if (!th || !args) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    long started = 0;
    for (long i = 0; i < p.conc; i++) {
        args[2 * i] = &p; args[2 * i + 1] = (void *)(intptr_t)i;
        if (pthread_create(&th[i], NULL, worker, &args[2 * i])) { bt_error(BT_ENOMEM, "cannot start a thread"); break; }
        started++;
    }
    for (long i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (started < p.conc) goto fail;
    if (p.err) { bt_error(p.err, "%s", p.errmsg); goto fail; }
    for (int a = 0; a < p.n_arms; a++) qsort(p.arms[a].lat, (size_t)p.arms[a].n, sizeof(double), cmp_d);

    arm *A = &p.arms[0], *B = &p.arms[1];
    double lo, hi;
    bt_stats_wilson(A->fails, A->n, &lo, &hi);
    if (!p.compare) {
        long need = A->fails ? -1 : bt_stats_rate_needed(0, A->n, p.max_fail);
        status = hi < p.max_fail ? 0 : 1;
        if (p.json) {
            out = arm_json(A);
            json_object_set_new(out, "max_fail", json_real(p.max_fail));
            json_object_set_new(out, "passed", json_boolean(status == 0));
            if (status && !A->fails && need > 0) json_object_set_new(out, "requests_needed", json_integer(need));
        } else {
            arm_print(&p, A, "");
            if (status == 0)
                printf("PASS: the failure rate is below %g%% (upper 95%% bound %.2f%%)\n", 100 * p.max_fail, 100 * hi);
            else if (A->fails)
                printf("FAIL: %ld of %ld answers failed\n", A->fails, A->n);
            else
                printf("INCONCLUSIVE: 0 failures in %ld requests bound the rate only below %.2f%%; "
                       "%ld requests in all (%ld more) would bound it below %g%%\n", A->n, 100 * hi, need, need - A->n, 100 * p.max_fail);
        }
    } else {
        double pv = bt_stats_fisher(A->fails, A->n - A->fails, B->fails, B->n - B->fails);
        bool enough = A->n >= BT_STATS_MIN_PER_ARM && B->n >= BT_STATS_MIN_PER_ARM;
        bool differ = pv < BT_STATS_ALPHA;
        long need = bt_stats_ab_needed(A->fails, A->n, B->fails, B->n);
        const char *verdict = !A->fails && !B->fails ? "neither arm failed"
                              : !enough ? "not called: fewer than 40 requests per arm"
                              : differ ? "the arms differ" : "no significant difference";
        /* distinct codes, so a CI gate can tell "the fix changed the rate"
         * (1) from "no difference" (0), "nothing failed" (3) and "too few
         * requests to say" (4) */
        const char *outcome = !A->fails && !B->fails ? "neither_failed" : !enough ? "not_called" : differ ? "differ" : "agree";
        status = !A->fails && !B->fails ? 3 : !enough ? 4 : differ ? 1 : 0;
        if (p.json) {
            out = json_pack("{s:o,s:o,s:f,s:b,s:s,s:s,s:I}", "a", arm_json(A), "b", arm_json(B), "fisher_p", pv,
                            "significant", enough && differ, "verdict", verdict, "outcome", outcome,
                            "requests_needed_per_arm", (json_int_t)need);
        } else {
            arm_print(&p, A, "A ");
            arm_print(&p, B, "B ");
            printf("difference: %.2f%% - %.2f%% = %+.2f points; Fisher's exact test p = %.4g\n", 100.0 * A->fails / A->n,
                   100.0 * B->fails / B->n, 100.0 * A->fails / A->n - 100.0 * B->fails / B->n, pv);
            if (!enough && (A->fails || B->fails)) {
                printf("NOT CALLED: the replicate rule needs at least %d requests per arm", BT_STATS_MIN_PER_ARM);
                if (need > 0) printf("; at these rates %ld per arm (%ld more) would show the difference at p < %g", need,
                                     need - BT_MIN(A->n, B->n), BT_STATS_ALPHA);
                printf("\n");
            } else if (differ) printf("DIFFERENT: the arms' failure rates differ (p < %g)\n", BT_STATS_ALPHA);
            else if (A->fails || B->fails) {
                printf("NO SIGNIFICANT DIFFERENCE (p >= %g)", BT_STATS_ALPHA);
                if (need > 0) printf("; at these rates %ld requests per arm (%ld more) would show one", need, need - BT_MIN(A->n, B->n));
                printf("\n");
            } else printf("neither arm failed\n");
        }
    }
    if (out) {
        char *s = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!s) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        puts(s);
        free(s);
    }
    fflush(stdout);
    goto done;
fail:
    status = bt_cmd_fail("probe");
done:
    json_decref(out);
    free(th);
    free(args);
    for (int a = 0; a < MAX_ARMS; a++) { bt_target_close(p.arms[a].t); free(p.arms[a].lat); }
    bt_expect_free(p.expect);
    bt_request_clear(&p.req);
    free(p.body);
    pthread_mutex_destroy(&p.lock);
    return status;
}
