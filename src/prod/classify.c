/* classify.c - the degeneracy classes of an answer (see classify.h).
 *
 * Token-level rules reuse the detectors' thresholds (tap/detect.h), so a
 * wall here is a wall in a trace. Text-level rules exist because a foreign
 * server tells us only text: they look at characters and bytes, and only
 * near the end of the text or over most of it, so a story with a "!!!" in
 * the middle stays ok. */
#include "prod/classify.h"
#include "tap/detect.h"
#include "base/util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const class_names[BT_ANS_COUNT] = {
    [BT_ANS_OK] = "ok",
    [BT_ANS_HTTP_ERROR] = "http_error",
    [BT_ANS_INVALID_TOKEN] = "invalid_token",
    [BT_ANS_EMPTY] = "empty",
    [BT_ANS_TOKEN_WALL] = "token_wall",
    [BT_ANS_LOOP] = "repetition_loop",
    [BT_ANS_PAST_STOP] = "past_stop",
    [BT_ANS_DEGENERATE_TAIL] = "degenerate_tail",
    [BT_ANS_NONFINITE] = "nonfinite",
    [BT_ANS_EXPECT_FAILED] = "expect_failed",
};

const char *bt_answer_class_name(int cls)
{
    return cls >= 0 && cls < BT_ANS_COUNT ? class_names[cls] : "?";
}

int bt_answer_class_from_name(const char *name)
{
    for (int i = 0; i < BT_ANS_COUNT; i++)
        if (name && !strcmp(name, class_names[i])) return i;
    return -1;
}

bool bt_event_is_nonfinite(const char *kind)
{
    return kind && (!strcmp(kind, "nonfinite_logits") || !strcmp(kind, "first_nonfinite") || !strcmp(kind, "argmax_fallthrough"));
}

struct bt_expect { pcre2_code *re; };

int bt_expect_new(const char *regex, bt_expect **out)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                   &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return bt_error(BT_EINVAL, "--expect '%s': %s at offset %zu", regex, (char *)msg, (size_t)off);
    }
    bt_expect *e = malloc(sizeof *e);
    if (!e) { pcre2_code_free(re); return bt_error(BT_ENOMEM, "out of memory"); }
    e->re = re;
    *out = e;
    return BT_OK;
}

void bt_expect_free(bt_expect *e)
{
    if (!e) return;
    pcre2_code_free(e->re);
    free(e);
}

bool bt_expect_match(const bt_expect *e, const char *text, size_t len)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(e->re, NULL);
    if (!md) return false;
    int rc = pcre2_match(e->re, (PCRE2_SPTR)(text ? text : ""), text ? len : 0, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* Length of the UTF-8 sequence at s (1..4), 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    int len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++) if ((s[i] & 0xc0) != 0x80) return 0;
    return len;
}

static bool valid_utf8(const char *t, size_t n)
{
    for (size_t i = 0; i < n;) {
        int l = utf8_len((const unsigned char *)t + i, n - i);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

/* Longest run of one repeated character (code point, compared as bytes);
 * *at_end: the run reaches the end; *chars: characters in the text. */
static size_t longest_char_run(const char *t, size_t n, bool *at_end, size_t *chars, char *ch, size_t chcap)
{
    size_t best = 0, run = 0, i = 0, nchar = 0;
    const char *prev = NULL;
    int prev_len = 0;
    *at_end = false;
    while (i < n) {
        int l = utf8_len((const unsigned char *)t + i, n - i);
        if (!l) l = 1;
        nchar++;
        bool same = prev && l == prev_len && !memcmp(prev, t + i, (size_t)l);
        bool space = l == 1 && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t');
        run = same && !space ? run + 1 : space ? 0 : 1;
        if (run > best) { best = run; snprintf(ch, chcap, "%.*s", l, t + i); }
        prev = t + i; prev_len = l;
        i += (size_t)l;
        if (i == n && run == best && best > 0) *at_end = true;
    }
    *chars = nchar;
    return best;
}

/* Smallest period p in [pmin, pmax] such that the last reps * p bytes of t
 * repeat with period p; 0 if none. */
static size_t tail_period(const char *t, size_t n, size_t pmin, size_t pmax, size_t reps)
{
    for (size_t p = pmin; p <= pmax && p * reps <= n; p++) {
        size_t start = n - p * reps, i = start;
        for (; i + p < n; i++) if (t[i] != t[i + p]) break;
        if (i + p >= n) {
            /* a run of one byte is a wall, not a loop */
            size_t j = n - p;
            bool one = true;
            for (size_t k = j + 1; k < n; k++) if (t[k] != t[j]) { one = false; break; }
            if (!one) return p;
        }
    }
    return 0;
}

static bool contains(const char *t, size_t n, const char *s)
{
    size_t sl = strlen(s);
    for (size_t i = 0; i + sl <= n; i++) if (!memcmp(t + i, s, sl)) return true;
    return false;
}

int bt_answer_classify(const bt_answer *a, const bt_expect *expect, char *why, size_t cap)
{
    char dummy[8];
    if (!why) { why = dummy; cap = sizeof dummy; }
    why[0] = 0;
    const char *t = a->text ? a->text : "";
    size_t n = a->text ? a->text_len : 0;
    if (a->http_status != 200) {
        if (!why[0]) snprintf(why, cap, a->http_status ? "HTTP status %d" : "no answer (transport error or timeout)", a->http_status);
        return BT_ANS_HTTP_ERROR;
    }
    if (a->finish_reason && !strcmp(a->finish_reason, "invalid_token")) {
        snprintf(why, cap, "finish_reason invalid_token: an id outside the vocabulary");
        return BT_ANS_INVALID_TOKEN;
    }
    for (int i = 0; i < a->n_ids && a->ids; i++)
        if (a->ids[i] < 0 || (a->n_vocab > 0 && a->ids[i] >= a->n_vocab)) {
            snprintf(why, cap, "id %d at output position %d is outside the vocabulary (%d)", (int)a->ids[i], i, a->n_vocab);
            return BT_ANS_INVALID_TOKEN;
        }
    if (!valid_utf8(t, n)) { snprintf(why, cap, "the text is not valid UTF-8"); return BT_ANS_INVALID_TOKEN; }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) if (t[i] != ' ' && t[i] != '\n' && t[i] != '\t' && t[i] != '\r') ns++;
    if (ns == 0) { snprintf(why, cap, "nothing but whitespace was generated"); return BT_ANS_EMPTY; }
    /* token level, when the ids are known */
    if (a->ids && a->n_ids > 0) {
        int run = 1;
        for (int i = 1; i < a->n_ids; i++) {
            run = a->ids[i] == a->ids[i - 1] ? run + 1 : 1;
            if (run >= BT_DETECT_WALL_MIN) {
                snprintf(why, cap, "token %d repeated %d+ times in a row", (int)a->ids[i], BT_DETECT_WALL_MIN);
                return BT_ANS_TOKEN_WALL;
            }
        }
        for (int p = 2; p <= BT_DETECT_LOOP_MAX_PERIOD; p++) {
            int match = 0;
            for (int i = p; i < a->n_ids; i++) {
                match = a->ids[i] == a->ids[i - p] ? match + 1 : 0;
                if (match >= p * (BT_DETECT_LOOP_MIN_REPEATS - 1)) {
                    snprintf(why, cap, "a period of %d tokens repeated %d times", p, BT_DETECT_LOOP_MIN_REPEATS);
                    return BT_ANS_LOOP;
                }
            }
        }
    }
    bool at_end;
    size_t chars;
    char ch[8] = "";
    size_t run = longest_char_run(t, n, &at_end, &chars, ch, sizeof ch);
    if (run >= BT_DETECT_WALL_MIN && (at_end || 2 * run >= chars)) {
        snprintf(why, cap, "'%s' repeated %zu times%s", ch, run, at_end ? " to the end" : "");
        return BT_ANS_TOKEN_WALL;
    }
    size_t p = tail_period(t, n, 2, 256, BT_DETECT_LOOP_MIN_REPEATS);
    if (p) { snprintf(why, cap, "the text ends in a %zu-byte period repeated %d+ times", p, BT_DETECT_LOOP_MIN_REPEATS); return BT_ANS_LOOP; }
    for (int s = 0; s < a->n_stop; s++)
        if (a->stop[s] && a->stop[s][0] && contains(t, n, a->stop[s])) {
            snprintf(why, cap, "the text runs past stop string %d", s);
            return BT_ANS_PAST_STOP;
        }
    if (a->finish_reason && !strcmp(a->finish_reason, "length")) {
        size_t w = n < 64 ? n : 64;
        unsigned char seen[256] = { 0 };
        int distinct = 0;
        for (size_t i = n - w; i < n; i++) if (!seen[(unsigned char)t[i]]++) distinct++;
        if (w >= 32 && distinct <= 3) {
            snprintf(why, cap, "cut at max_tokens; the last %zu bytes hold %d distinct bytes", w, distinct);
            return BT_ANS_DEGENERATE_TAIL;
        }
        if ((p = tail_period(t, n, 8, 256, 2))) {
            snprintf(why, cap, "cut at max_tokens; the tail repeats a %zu-byte period", p);
            return BT_ANS_DEGENERATE_TAIL;
        }
    }
    if (a->n_nonfinite > 0) {
        snprintf(why, cap, "the server's detectors saw non-finite values (%d event%s)%s%s", a->n_nonfinite,
                 a->n_nonfinite == 1 ? "" : "s", a->nonfinite_detail ? ": " : "", a->nonfinite_detail ? a->nonfinite_detail : "");
        return BT_ANS_NONFINITE;
    }
    if (expect && !bt_expect_match(expect, t, n)) { snprintf(why, cap, "--expect did not match"); return BT_ANS_EXPECT_FAILED; }
    return BT_ANS_OK;
}
