/* cmd_canary.c - `bangtrace canary`: a correctness canary, not a liveness
 * check. Every --every interval one prompt with a known answer (the
 * built-in set, or the user's --prompts file) goes to the server; the
 * answer is judged by its expectation and by the degeneracy classes of
 * src/prod/classify.h; the check is appended to an SQLite log
 * (src/prod/canary_log.c); after --fail-after K consecutive failures the
 * --on-fail command runs once (again only after a passing check ends the
 * streak). `canary --report LOG` summarises a log.
 *
 * stdout: one line per check, or the report; stderr: errors. Exit 0: no
 * streak reached K (report: always); 1: a streak reached K; 2: error;
 * SIGINT/SIGTERM close the log and kill the process by the signal. */
#include "cmd.h"
#include "prod/classify.h"
#include "prod/stats.h"
#include "prod/target.h"
#include "gen/request.h"
#include "sys/crash.h"
#include "base/text.h"
#include "prod/canary_log.h"
#include "base/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void cmd_canary_help(FILE *out)
{
    fputs(
        "usage: bangtrace canary --url URL [--every DUR] [--prompts FILE] [--builtin] [--log LOG]\n"
        "                        [--on-fail CMD] [--fail-after K] [--count N] [--timeout S]\n"
        "       bangtrace canary --report LOG\n\n"
        "A correctness canary: every DUR, one prompt with a known answer goes to an\n"
        "OpenAI-compatible server; the answer must match the prompt's expectation and\n"
        "must not be degenerate (the classes of `bangtrace probe`). Each check is\n"
        "printed and appended to an SQLite log.\n\n"
        "  --url URL        the server (http://host:port or .../v1)\n"
        "  --every DUR      interval between checks: 60s (default), 5m, 1h, 250ms, 0.2s\n"
        "  --prompts FILE   one JSON request per line (a /v1/completions or chat body)\n"
        "                   with \"expect\": REGEX (PCRE2) and optionally \"name\"; blank\n"
        "                   lines and lines starting with # are skipped. Replaces the\n"
        "                   built-in set (capital of France, 2+2, repeat a phrase)\n"
        "  --builtin        use the built-in set as well as --prompts\n"
        "  --log LOG        append every check to this canary log (created 0600; an\n"
        "                   existing file must be a canary log, never replaced)\n"
        "  --on-fail CMD    run CMD with /bin/sh -c when K checks in a row failed (once per\n"
        "                   streak); its environment has BT_CANARY_URL, BT_CANARY_STREAK,\n"
        "                   BT_CANARY_CLASS, BT_CANARY_REASON, BT_CANARY_PROMPT,\n"
        "                   BT_CANARY_TIME (unix seconds) and BT_CANARY_LOG\n"
        "  --fail-after K   consecutive failures that trigger --on-fail (default 3)\n"
        "  --count N        stop after N checks (default: run until SIGINT/SIGTERM)\n"
        "  --timeout S      seconds per request (default 60)\n"
        "  --report LOG     summarise a canary log: checks, failures per class, the\n"
        "                   failure rate with its Wilson 95% interval, the longest failing\n"
        "                   streak, first and last failure\n\n"
        "Exit status: 0 no streak of K failures (--report: the summary was printed);\n"
        "1 a streak reached K; 2 error. SIGINT/SIGTERM close the log first.\n", out);
}

typedef struct canary_prompt {
    char name[64];
    char *body;                     /* the request sent ("expect"/"name" removed) */
    size_t len;
    bt_request req;                 /* for its stop strings */
    bt_expect *expect;
} canary_prompt;

/* The built-in set: questions any instruction-tuned model answers, greedy
 * and short, so a correct server passes every time. */
static const struct { const char *name, *body, *expect; } builtin[] = {
    { "capital", "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France? Answer with one word.\"}],"
                 "\"max_tokens\":16,\"temperature\":0}", "(?i)paris" },
    { "arith", "{\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2? Answer with the number only.\"}],"
               "\"max_tokens\":16,\"temperature\":0}", "\\b4\\b|(?i)four" },
    { "repeat", "{\"messages\":[{\"role\":\"user\",\"content\":\"Repeat exactly: blue banana\"}],"
                "\"max_tokens\":16,\"temperature\":0}", "(?i)blue banana" },
};

/* "60s", "5m", "1h", "250ms", "0.2s", "0.2" (seconds) -> seconds */
static int parse_duration(const char *flag, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = !strcmp(end, "") || !strcmp(end, "s") ? 1 : !strcmp(end, "ms") ? 1e-3 : !strcmp(end, "m") ? 60
               : !strcmp(end, "h") ? 3600 : -1;
    if (end == s || errno || mul < 0 || !(v >= 0) || v * mul > 7 * 86400.0)
        return bt_error(BT_EINVAL, "%s '%s' is not a duration (e.g. 60s, 5m, 250ms; at most a week)", flag, s);
    *out = v * mul;
    return BT_OK;
}

static int add_prompt(canary_prompt **v, int *n, const char *name, const char *body, size_t len, const char *re,
                      const char *where)
{
    canary_prompt *nv = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!nv) return bt_error(BT_ENOMEM, "out of memory");
    *v = nv;
    canary_prompt *p = &nv[*n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    if (!(p->body = malloc(len + 1))) return bt_error(BT_ENOMEM, "out of memory");
    memcpy(p->body, body, len);
    p->body[len] = 0;
    p->len = len;
    (*n)++;
    if (bt_request_parse(p->body, len, where, &p->req)) return BT_EINVAL;
    if (re && bt_expect_new(re, &p->expect)) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", bt_errmsg());
        return bt_error(BT_EINVAL, "%s: bad \"expect\": %s", where, msg);
    }
    return BT_OK;
}

static int load_prompts(const char *path, canary_prompt **v, int *n)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = bt_read_file(path, &buf, &len);
    if (rc) return rc;
    char *line = buf;
    int lineno = 0, before = *n;
    while (line && line < buf + len && rc == BT_OK) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        if (nl) *nl = 0;
        lineno++;
        char *s = line;
        line = nl ? nl + 1 : NULL;
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (!*s || *s == '#') continue;
        char where[300];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        json_error_t je;
        json_t *j = json_loads(s, 0, &je);
        if (!j || !json_is_object(j)) {
            rc = bt_error(BT_EINVAL, "%s: not a JSON object%s%s", where, j ? "" : ": ", j ? "" : je.text);
            json_decref(j);
            break;
        }
        json_t *ex = json_object_get(j, "expect"), *nm = json_object_get(j, "name");
        if (!json_is_string(ex) || (nm && !json_is_string(nm))) {
            rc = bt_error(BT_EINVAL, "%s: needs \"expect\": a regex string%s", where, nm && !json_is_string(nm) ? " (and \"name\" must be a string)" : "");
            json_decref(j);
            break;
        }
        char *re = strdup(json_string_value(ex)), name[64];
        snprintf(name, sizeof name, "%.63s", nm ? json_string_value(nm) : where);
        json_object_del(j, "expect");
        json_object_del(j, "name");
        char *body = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        rc = body && re ? add_prompt(v, n, name, body, strlen(body), re, where) : bt_error(BT_ENOMEM, "out of memory");
        free(body);
        free(re);
    }
    free(buf);
    if (rc == BT_OK && *n == before) rc = bt_error(BT_EINVAL, "--prompts %s has no prompts", path);
    return rc;
}

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

static const char *iso(double t, char *buf, size_t cap)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

/* Run CMD through /bin/sh -c with the failure in its environment; waits. */
static void run_on_fail(const char *cmd, const char *url, long streak, const char *cls, const char *why,
                        const char *prompt, double t, const char *log)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { bt_warn("--on-fail: fork failed: %s", strerror(errno)); return; }
    if (pid == 0) {
        char b[64];
        setenv("BT_CANARY_URL", url, 1);
        snprintf(b, sizeof b, "%ld", streak);
        setenv("BT_CANARY_STREAK", b, 1);
        setenv("BT_CANARY_CLASS", cls, 1);
        setenv("BT_CANARY_REASON", why, 1);
        setenv("BT_CANARY_PROMPT", prompt, 1);
        snprintf(b, sizeof b, "%.3f", t);
        setenv("BT_CANARY_TIME", b, 1);
        setenv("BT_CANARY_LOG", log ? log : "", 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        bt_warn("--on-fail command %s %d", WIFEXITED(st) ? "exited with" : "died by signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static int report(const char *path)
{
    bt_canary_summary s;
    if (bt_canary_log_summary(path, &s)) return 2;
    double lo, hi;
    bt_stats_wilson(s.failures, s.checks, &lo, &hi);
    char a[32], b[32];
    bt_text_printf(stdout, "canary log %s: %ld checks", path, s.checks);
    if (s.checks) bt_text_printf(stdout, " of %s%s, %s .. %s", s.target, s.n_targets > 1 ? " (and other targets)" : "",
                                 iso(s.first_t, a, sizeof a), iso(s.last_t, b, sizeof b));
    printf("\n");
    printf("  ok               %6ld\n", s.checks - s.failures);
    for (int i = 0; i < s.n_classes; i++) bt_text_printf(stdout, "  %-16s %6ld\n", s.cls[i], s.cls_count[i]);
    printf("  failure rate %.2f%% (%ld of %ld), Wilson 95%% interval [%.2f%%, %.2f%%]\n",
           s.checks ? 100.0 * s.failures / s.checks : 0.0, s.failures, s.checks, 100 * lo, 100 * hi);
    printf("  longest failing streak %ld\n", s.longest_streak);
    if (s.failures) printf("  first failure %s, last failure %s\n", iso(s.first_fail_t, a, sizeof a), iso(s.last_fail_t, b, sizeof b));
    else printf("  no failures\n");
    return 0;
}

int cmd_canary(int argc, char **argv)
{
    const char *url = NULL, *prompts = NULL, *logp = NULL, *on_fail = NULL, *rep = NULL;
    double every = 60, timeout = 60;
    long fail_after = 3, count = 0;
    bool use_builtin = false;
    canary_prompt *pv = NULL;
    int np = 0, status = 2, sig = 0;
    bt_target *t = NULL;
    bt_canary_log *log = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) { bt_error(BT_EINVAL, "%s needs a value", a); goto fail; } i++; } while (0)
        if (!strcmp(a, "--url")) { VAL(); url = v; }
        else if (!strcmp(a, "--every")) { VAL(); if (parse_duration(a, v, &every)) goto fail; }
        else if (!strcmp(a, "--prompts")) { VAL(); prompts = v; }
        else if (!strcmp(a, "--log")) { VAL(); logp = v; }
        else if (!strcmp(a, "--on-fail")) { VAL(); on_fail = v; }
        else if (!strcmp(a, "--fail-after")) { VAL(); if (bt_parse_int(a, v, 1, 1000000, &fail_after)) goto fail; }
        else if (!strcmp(a, "--count")) { VAL(); if (bt_parse_int(a, v, 1, 1000000000, &count)) goto fail; }
        else if (!strcmp(a, "--timeout")) { VAL(); if (bt_parse_float(a, v, 0.001, 86400, &timeout)) goto fail; }
        else if (!strcmp(a, "--report")) { VAL(); rep = v; }
        else if (!strcmp(a, "--builtin")) use_builtin = true;
        else { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help canary)", a); goto fail; }
#undef VAL
    }
    if (rep) {
        if (argc != 3) {
            bt_error(BT_EINVAL, "--report LOG takes no other flags");
            goto fail;
        }
        status = report(rep);
        if (status) goto fail;
        goto done;
    }
    if (!url) { bt_error(BT_EINVAL, "give --url URL (or --report LOG; see bangtrace help canary)"); goto fail; }
    if (!prompts || use_builtin)
        for (size_t k = 0; k < sizeof builtin / sizeof builtin[0]; k++)
            if (add_prompt(&pv, &np, builtin[k].name, builtin[k].body, strlen(builtin[k].body), builtin[k].expect, builtin[k].name))
                goto fail;
    if (prompts && load_prompts(prompts, &pv, &np)) goto fail;
    bt_target_cfg tc = { .url = url, .slots = 1, .timeout_s = timeout };
    if (bt_target_open(&tc, &t)) goto fail;
    if (logp) {
        bt_out_input in[] = { { "--prompts", prompts } };
        if (bt_canary_log_open(logp, in, 1, &log)) goto fail;
    }
    if (bt_interrupt_install()) goto fail;
    long streak = 0, checks = 0;
    bool triggered = false;
    double next = now_s();
    status = 0;
    for (;;) {
        canary_prompt *p = &pv[checks % np];
        bt_reply r;
        if (bt_target_ask(t, 0, p->body, p->len, &r)) { status = 2; break; }
        if ((sig = bt_interrupt_pending()) && r.http_status == 0) { bt_reply_clear(&r); break; }   /* cut short: not a check */
        bt_answer ans = bt_reply_answer(&r, p->req.stop, p->req.n_stop);
        char why[600] = "";
        int c = bt_answer_classify(&ans, p->expect, why, sizeof why);
        if (c == BT_ANS_HTTP_ERROR && r.error[0]) snprintf(why, sizeof why, "%s", r.error);
        double tnow = now_s();
        char ts[32];
        bt_canary_check ck = { .t = tnow, .target = url, .prompt = p->name, .cls = bt_answer_class_name(c),
                               .why = c == BT_ANS_OK ? "" : why, .http_status = r.http_status, .ms = r.ms,
                               .answer = r.text ? r.text : "" };
        int lrc = log ? bt_canary_log_append(log, &ck) : BT_OK;
        checks++;
        streak = c == BT_ANS_OK ? 0 : streak + 1;
        if (c == BT_ANS_OK) bt_text_printf(stdout, "%s ok %s %.0fms\n", iso(tnow, ts, sizeof ts), p->name, r.ms);
        else bt_text_printf(stdout, "%s FAIL %s %s (streak %ld): %s\n", iso(tnow, ts, sizeof ts), p->name, ck.cls, streak, why);
        fflush(stdout);
        if (streak == fail_after) {
            triggered = true;
            bt_text_printf(stderr, "bangtrace: canary: %ld consecutive failures at %s\n", streak, url);
            if (on_fail) run_on_fail(on_fail, url, streak, ck.cls, why, p->name, tnow, logp);
        }
        bt_reply_clear(&r);
        if (lrc) { status = 2; break; }
        if ((count && checks >= count) || (sig = bt_interrupt_pending())) break;
        /* sleep to the next tick in short naps, so a signal stops us promptly */
        next += every;
        while (!(sig = bt_interrupt_pending())) {
            double left = next - now_s();
            if (left <= 0) break;
            if (left > 0.1) left = 0.1;
            struct timespec ns = { (time_t)left, (long)((left - (time_t)left) * 1e9) };
            nanosleep(&ns, NULL);
        }
        if (sig) break;
        if (next < now_s() - every) next = now_s();      /* a slow server: do not burst to catch up */
    }
    bt_interrupt_uninstall();
    if (bt_canary_log_close(log)) status = 2;
    log = NULL;
    if (status == 2) goto fail;
    if (sig) { status = 128 + sig; goto done; }
    status = triggered ? 1 : 0;
    goto done;
fail:
    status = bt_cmd_fail("canary");
done:
    bt_canary_log_close(log);
    bt_target_close(t);
    for (int i = 0; i < np; i++) { free(pv[i].body); bt_request_clear(&pv[i].req); bt_expect_free(pv[i].expect); }
    free(pv);
    return status;
}
