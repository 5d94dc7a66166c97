/* cmd_ctxwalk.c - `bangtrace ctxwalk`: plant a needle ("The secret code is
 * 4821.") at several depths of filler text of several lengths, ask for it
 * back, and report the shortest length at which retrieval fails or the
 * answer degenerates: corruption that only long contexts show.
 *
 * A walked length L is the context one check occupies: prompt tokens plus
 * --max-tokens. With --model the prompt is sized exactly with the model's
 * tokenizer (the most filler whose prompt fits L - max_tokens); with --url
 * approximately (4 characters a token). Judging:
 *   --url, or --model without --inject: the answer must match the needle
 *     (--expect, default the code) and not be degenerate (classify.h);
 *   --model with --inject: a model too small to retrieve (stories260K)
 *     still answers deterministically, so each answer is compared with a
 *     clean run of the same prompt (no injection): an answer that departs
 *     from the clean one, or degenerates where the clean one did not, fails.
 * So a `longctx@pos>=P` injection is found at the first walked length
 * whose context reaches position P.
 *
 * A request that gets no answer (transport error, timeout, an HTTP error,
 * a request the engine refuses) is an error, never a failing length: the
 * walk stops with exit 2 and a line naming the length, depth and reason.
 *
 * Exit 0: no length failed; 1: a failing length was found; 2: error. */
#include "cmd.h"
#include "args.h"
#include "prod/classify.h"
#include "prod/target.h"
#include "base/text.h"
#include "base/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cmd_ctxwalk_help(FILE *out)
{
    fputs(
        "usage: bangtrace ctxwalk (--url URL [--completions] | --model M [--tokenizer T] [--inject SPEC]...)\n"
        "                         [--lengths 256..32768 | --lengths 64,128,256] [--depths 0.1,0.5,0.9]\n"
        "                         [--needle TEXT --expect REGEX] [--max-tokens N] [--timeout S] [--threads N]\n"
        "                         [--ctx N]\n\n"
        "Plant a needle at each depth of filler text of each length, ask for it back,\n"
        "and report the shortest length at which retrieval fails or the answer\n"
        "degenerates (the classes of `bangtrace probe`).\n\n"
        "  --url URL          an OpenAI-compatible server (chat endpoint); lengths are\n"
        "                     approximate (4 characters a token)\n"
        "  --completions      with --url: a /v1/completions prompt ending in \"The secret\n"
        "                     code is\" instead of a chat question (base models)\n"
        "  --model M          the native engine; lengths are exact (its tokenizer)\n"
        "  --tokenizer T      the llama2.c tokenizer for a llama2.c checkpoint\n"
        "  --inject SPEC      fault injection (with --model, e.g. longctx@pos>=P,...); each\n"
        "                     answer is then compared with a clean run of the same prompt:\n"
        "                     departing from it, or degenerating, is a failure\n"
        "  --lengths SPEC     context lengths in tokens (prompt + --max-tokens): A..B doubles\n"
        "                     from A up to B, or a comma list (default 256..32768)\n"
        "  --depths LIST      where the needle goes, 0..1 of the filler (default 0.1,0.5,0.9)\n"
        "  --needle TEXT      the planted sentence (default \"The secret code is 4821.\")\n"
        "  --expect REGEX     what a retrieved answer matches (default 4821)\n"
        "  --max-tokens N     answer tokens (default 16)\n"
        "  --timeout S        seconds per HTTP request (default 600)\n"
        "  --threads N        compute threads (native; default 1)\n"
        "  --ctx N            with --model: the engine's context (default: the model's\n"
        "                     trained context, at most 4096); the header names both\n\n"
        "A request that gets no answer (transport error, timeout, HTTP error, a request\n"
        "the engine refuses) is an error, not a failing length: exit 2.\n"
        "Exit status: 0 no length failed; 1 a failing length was found; 2 error.\n", out);
}

#define MAX_LEN 64
#define MAX_DEPTH 16

static const char *const filler_words[] = {
    "The", "grass", "is", "green.", "The", "sky", "is", "blue.", "A", "small", "bird", "sang", "in", "the", "old",
    "tree.", "The", "river", "ran", "past", "the", "mill", "and", "the", "children", "played", "by", "the",
    "water.", "Mom", "made", "soup", "for", "lunch.", "The", "cat", "slept", "in", "the", "sun.",
};
#define N_FILLER (sizeof filler_words / sizeof filler_words[0])

typedef struct walk {
    const char *url, *model, *tokenizer, *needle, *expect_re;
    const char *inject[16];
    int n_inject;
    long lengths[MAX_LEN];
    int n_len;
    double depths[MAX_DEPTH];
    int n_depth;
    long max_tokens, threads, ctx;
    bool completions;               /* --url: /v1/completions instead of chat */
    double timeout;
} walk;

static int parse_lengths(const char *s, walk *w)
{
    char *end;
    const char *dots = strstr(s, "..");
    if (dots) {
        long a = strtol(s, &end, 10), b;
        if (end != dots || a < 1 || (b = strtol(dots + 2, &end, 10)) < a || *end || b > 10000000)
            return bt_error(BT_EINVAL, "--lengths '%s': want A..B with 1 <= A <= B, or a comma list", s);
        for (long l = a; l <= b && w->n_len < MAX_LEN; l *= 2) w->lengths[w->n_len++] = l;
        return BT_OK;
    }
    const char *p = s;
    for (;;) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 10000000 || (*end && *end != ',') || w->n_len == MAX_LEN ||
            (w->n_len && v <= w->lengths[w->n_len - 1]))
            return bt_error(BT_EINVAL, "--lengths '%s': want increasing token counts (at most %d), e.g. 64,128,256 or 256..32768", s, MAX_LEN);
        w->lengths[w->n_len++] = v;
        if (!*end) return BT_OK;
        p = end + 1;
    }
}

static int parse_depths(const char *s, walk *w)
{
    const char *p = s;
    char *end;
    for (;;) {
        double v = strtod(p, &end);
        if (end == p || !(v >= 0 && v <= 1) || (*end && *end != ',') || w->n_depth == MAX_DEPTH)
            return bt_error(BT_EINVAL, "--depths '%s': want fractions 0..1 (at most %d), e.g. 0.1,0.5,0.9", s, MAX_DEPTH);
        w->depths[w->n_depth++] = v;
        if (!*end) return BT_OK;
        p = end + 1;
    }
}

/* The request body with `words` filler words and the needle at `depth`. */
static char *make_body(const walk *w, long words, double depth, size_t *len, size_t *chars)
{
    size_t cap = (size_t)words * 10 + strlen(w->needle) + 256, n = 0;
    char *t = malloc(cap);
    if (!t) return NULL;
    long at = lround(depth * (double)words);
    if (!w->model && !w->completions) n += (size_t)snprintf(t + n, cap - n, "Read the text and remember the secret code.\n");
    for (long i = 0; i <= words; i++) {
        if (i == at) n += (size_t)snprintf(t + n, cap - n, "%s%s", n && t[n - 1] != '\n' ? " " : "", w->needle);
        if (i < words) n += (size_t)snprintf(t + n, cap - n, "%s%s", n && t[n - 1] != '\n' ? " " : "", filler_words[i % N_FILLER]);
    }
    json_t *j;
    if (w->model || w->completions) {
        snprintf(t + n, cap - n, "\nThe secret code is");
        j = json_pack("{s:s,s:I,s:i}", "prompt", t, "max_tokens", (json_int_t)w->max_tokens, "temperature", 0);
    } else {
        snprintf(t + n, cap - n, "\n\nWhat is the secret code in the text above? Answer with the code only.");
        j = json_pack("{s:[{s:s,s:s}],s:I,s:i}", "messages", "role", "user", "content", t, "max_tokens",
                      (json_int_t)w->max_tokens, "temperature", 0);
    }
    *chars = strlen(t);
    free(t);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s) *len = strlen(s);
    return s;
}

/* Prompt tokens of a body: exact (native) or about 4 characters of the
 * prompt text a token (a server's chat template adds a few more). */
static int count_tokens(bt_target *t, const walk *w, const char *body, size_t len, size_t chars, int *n)
{
    if (w->model) return bt_target_prompt_tokens(t, body, len, n);
    *n = (int)((chars + 3) / 4);
    return BT_OK;
}

/* The most filler words whose prompt fits `budget` tokens (binary search;
 * token counts grow with the words, up to a token of tokenizer noise). */
static int size_prompt(bt_target *t, const walk *w, long budget, double depth, char **body, size_t *len, int *ntok)
{
    long lo = 0, hi = budget * 2 + 8;
    int rc, n;
    size_t chars = 0;
    char *b = make_body(w, 0, depth, len, &chars);
    if (!b) return bt_error(BT_ENOMEM, "out of memory");
    if ((rc = count_tokens(t, w, b, *len, chars, &n))) { free(b); return rc; }
    free(b);
    if (n > budget) return bt_error(BT_EINVAL, "a length of %ld tokens leaves %ld for the prompt, less than the %d the question alone takes",
                                    budget + w->max_tokens, budget, n);
    while (lo < hi) {
        long mid = lo + (hi - lo + 1) / 2;
        if (!(b = make_body(w, mid, depth, len, &chars))) return bt_error(BT_ENOMEM, "out of memory");
        rc = count_tokens(t, w, b, *len, chars, &n);
        free(b);
        if (rc) return rc;
        if (n <= budget) lo = mid; else hi = mid - 1;
    }
    if (!(*body = make_body(w, lo, depth, len, &chars))) return bt_error(BT_ENOMEM, "out of memory");
    return count_tokens(t, w, *body, *len, chars, ntok);
}

/* The context a native walk runs in, naming the model's trained context
 * too when they differ (inspect prints the trained one). */
static void describe_ctx(int ctx, int trained, bool asked, char *buf, size_t cap)
{
    if (ctx == trained) snprintf(buf, cap, "context of %d tokens (the model's trained context)", ctx);
    else if (asked) snprintf(buf, cap, "context of %d tokens (--ctx; the model's trained context is %d)", ctx, trained);
    else snprintf(buf, cap, "context of %d tokens (the model's trained context is %d, capped at %d by default: --ctx N)",
                  ctx, trained, ctx);
}

int cmd_ctxwalk(int argc, char **argv)
{
    walk w;
    memset(&w, 0, sizeof w);
    w.needle = "The secret code is 4821.";
    w.max_tokens = 16; w.timeout = 600;
    const char *lengths = "256..32768", *depths = "0.1,0.5,0.9";
    bool needle_set = false;
    int status = 2;
    bt_target *t = NULL, *ref = NULL;
    bt_expect *ex = NULL;
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_THREADS | BT_ARGS_CTX, .ctx_min = 16, .threads = 1 };
    for (int i = 1; i < argc; i++) {
        bool taken;
        if (bt_args_take(&g, argc, argv, &i, &taken)) goto fail;
        if (taken) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) { bt_error(BT_EINVAL, "%s needs a value", a); goto fail; } i++; } while (0)
        if (!strcmp(a, "--url")) { VAL(); w.url = v; }
        else if (!strcmp(a, "--inject")) {
            VAL();
            if (w.n_inject == 16) { bt_error(BT_EINVAL, "at most 16 --inject specs"); goto fail; }
            w.inject[w.n_inject++] = v;
        }
        else if (!strcmp(a, "--lengths")) { VAL(); lengths = v; }
        else if (!strcmp(a, "--depths")) { VAL(); depths = v; }
        else if (!strcmp(a, "--completions")) w.completions = true;
        else if (!strcmp(a, "--needle")) { VAL(); w.needle = v; needle_set = true; }
        else if (!strcmp(a, "--expect")) { VAL(); w.expect_re = v; }
        else if (!strcmp(a, "--max-tokens")) { VAL(); if (bt_parse_int(a, v, 1, 4096, &w.max_tokens)) goto fail; }
        else if (!strcmp(a, "--timeout")) { VAL(); if (bt_parse_float(a, v, 0.001, 86400, &w.timeout)) goto fail; }
        else { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help ctxwalk)", a); goto fail; }
#undef VAL
    }
    w.model = g.model; w.tokenizer = g.tokenizer; w.threads = g.threads; w.ctx = g.ctx;
    if (!w.url == !w.model) { bt_error(BT_EINVAL, "give one of --url URL or --model M (see bangtrace help ctxwalk)"); goto fail; }
    if (w.completions && !w.url) { bt_error(BT_EINVAL, "--completions applies to --url (--model always completes a prompt)"); goto fail; }
    if (w.n_inject && !w.model) { bt_error(BT_EINVAL, "--inject applies to the native engine: use it with --model"); goto fail; }
    if (w.ctx && !w.model) { bt_error(BT_EINVAL, "--ctx applies to the native engine (--model): a server has its own"); goto fail; }
    if (needle_set && !w.expect_re) { bt_error(BT_EINVAL, "--needle needs --expect REGEX (what a retrieved answer matches)"); goto fail; }
    if (parse_lengths(lengths, &w) || parse_depths(depths, &w)) goto fail;
    if (bt_expect_new(w.expect_re ? w.expect_re : "4821", &ex)) goto fail;
    if (w.lengths[0] <= w.max_tokens) {
        bt_error(BT_EINVAL, "--lengths: %ld tokens leave no room for a prompt beside --max-tokens %ld", w.lengths[0], w.max_tokens);
        goto fail;
    }
    bt_target_cfg tc = { .url = w.url, .model = w.model, .tokenizer = w.tokenizer, .inject = w.inject,
                         .n_inject = w.n_inject, .slots = 1, .threads = (int)w.threads, .ctx = (int)w.ctx,
                         .timeout_s = w.timeout };
    if (bt_target_open(&tc, &t)) goto fail;
    if (w.n_inject) {
        tc.inject = NULL; tc.n_inject = 0;
        if (bt_target_open(&tc, &ref)) goto fail;
    }
    char ctxs[200] = "";
    if (w.model) {
        describe_ctx(bt_target_ctx(t), bt_target_trained_ctx(t), w.ctx > 0, ctxs, sizeof ctxs);
        if (w.lengths[w.n_len - 1] > bt_target_ctx(t)) {
            bt_error(BT_EINVAL, "--lengths: %ld tokens exceed the %s", w.lengths[w.n_len - 1], ctxs);
            goto fail;
        }
    }
    bt_text_printf(stdout, "ctxwalk %s: needle \"%s\" at depths", w.url ? w.url : w.model, w.needle);
    for (int d = 0; d < w.n_depth; d++) printf(" %g", w.depths[d]);
    if (w.model) printf("; %s", ctxs);
    printf("; judged %s\n", ref ? "against a clean run of each prompt (no injection)" : "by retrieval of the needle");
    printf("%8s %8s %6s  %s\n", "length", "prompt", "depth", "result");
    long first_fail = 0;
    for (int li = 0; li < w.n_len; li++) {
        long L = w.lengths[li];
        for (int di = 0; di < w.n_depth; di++) {
            char *body = NULL;
            size_t len = 0;
            int ntok = 0;
            if (size_prompt(t, &w, L - w.max_tokens, w.depths[di], &body, &len, &ntok)) goto fail;
            bt_reply r, rr;
            memset(&rr, 0, sizeof rr);
            int rc = bt_target_ask(t, 0, body, len, &r);
            if (!rc && ref && (rc = bt_target_ask(ref, 0, body, len, &rr))) bt_reply_clear(&r);
            free(body);
            if (rc) goto fail;
            char why[600] = "";
            bt_answer ans = bt_reply_answer(&r, NULL, 0);
            int c = bt_answer_classify(&ans, ref ? NULL : ex, why, sizeof why);
            /* no answer says nothing about the model at this length */
            if (c == BT_ANS_HTTP_ERROR || (ref && rr.http_status != 200)) {
                const bt_reply *bad = c == BT_ANS_HTTP_ERROR ? &r : &rr;
                bt_error(BT_EIO, "length %ld, depth %g: %sno answer, not a model failure: %s", L, w.depths[di],
                         bad == &rr ? "the clean reference run got " : "", bad->error[0] ? bad->error : why);
                bt_reply_clear(&r);
                bt_reply_clear(&rr);
                /* what the walk found before it, on stdout with the table */
                if (first_fail) printf("first failing length: %ld tokens; then an error at %ld stopped the walk\n", first_fail, L);
                else if (li > 0) printf("no failure up to %ld tokens; then an error at %ld stopped the walk\n", w.lengths[li - 1], L);
                else printf("an error at %ld tokens stopped the walk\n", L);
                fflush(stdout);
                goto fail;
            }
            bool failed = c != BT_ANS_OK;
            if (ref) {
                bt_answer ra = bt_reply_answer(&rr, NULL, 0);
                int rcls = bt_answer_classify(&ra, NULL, NULL, 0);
                bool same = r.text_len == rr.text_len && (!r.text_len || !memcmp(r.text, rr.text, r.text_len));
                failed = !same || (c != BT_ANS_OK && rcls == BT_ANS_OK);
                if (failed && c == BT_ANS_OK) snprintf(why, sizeof why, "departs from the clean answer");
                if (!failed) c = BT_ANS_OK;
            }
            char txt[64];       /* one line: the answer's start, controls as spaces (escaped when printed) */
            snprintf(txt, sizeof txt, "%.60s", r.text ? r.text : "");
            for (char *q = txt; *q; q++) if ((unsigned char)*q < 32) *q = ' ';
            if (failed) bt_text_printf(stdout, "%8ld %8d %6g  FAIL %s%s%s; answer \"%s\"\n", L, ntok, w.depths[di],
                                       c == BT_ANS_OK ? "" : bt_answer_class_name(c), c == BT_ANS_OK ? "" : ": ", why, txt);
            else bt_text_printf(stdout, "%8ld %8d %6g  ok \"%s\"\n", L, ntok, w.depths[di], txt);
            fflush(stdout);
            if (failed && !first_fail) first_fail = L;
            bt_reply_clear(&r);
            bt_reply_clear(&rr);
        }
    }
    if (first_fail) printf("first failing length: %ld tokens\n", first_fail);
    else printf("no failure up to %ld tokens\n", w.lengths[w.n_len - 1]);
    status = first_fail ? 1 : 0;
    goto done;
fail:
    status = bt_cmd_fail("ctxwalk");
done:
    bt_target_close(t);
    bt_target_close(ref);
    bt_expect_free(ex);
    return status;
}
