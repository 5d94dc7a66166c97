/* detect.c - token-level detectors: walls, short loops, control-token leaks
 * and out-of-vocabulary ids.
 *
 * Loops are found incrementally: for every period p in 1..16, match[p] is
 * the number of consecutive most recent tokens equal to the token p before
 * them, so the last match[p] + p tokens repeat with period p. A loop of
 * period p repeated four times is match[p] >= 3p. The smallest such p is the
 * loop's true period; p = 1 is a wall, reported by its own detector, never
 * as a loop. Each detector fires once per episode: a wall when its run
 * reaches 8, a loop when it first reaches four repeats; the episode ends
 * when the run (or the periodic match) breaks. Memory is O(1). */
#include "tap/detect.h"
#include "base/util.h"
#include "base/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIST 32               /* >= 2 * BT_DETECT_LOOP_MAX_PERIOD, power of two */
_Static_assert(HIST >= 2 * BT_DETECT_LOOP_MAX_PERIOD && !(HIST & (HIST - 1)), "HIST: a power of two holding two periods");

struct bt_detector {
    int n_vocab;
    bool (*is_control)(void *user, int32_t id);
    void *user;
    const bt_tokenizer *tok;
    long n;                            /* tokens fed */
    int32_t ids[HIST];                 /* ring: token i at ids[i % HIST] */
    int steps[HIST];
    int match[BT_DETECT_LOOP_MAX_PERIOD + 1];
    int seg_start[BT_DETECT_LOOP_MAX_PERIOD + 1]; /* step where the period-p segment began */
    int run;                           /* length of the current same-id run */
    int run_start;
    int loop_period;                   /* 0: no loop episode in progress */
};

static const char *const names[] = {
    [BT_FIND_TOKEN_WALL] = "token_wall",
    [BT_FIND_REPETITION_LOOP] = "repetition_loop",
    [BT_FIND_SPECIAL_LEAK] = "special_leak",
    [BT_FIND_OOV_TOKEN] = "oov_token",
};

const char *bt_finding_name(int kind)
{
    return kind > 0 && kind < (int)BT_ARRAY_SIZE(names) && names[kind] ? names[kind] : "unknown";
}

bt_detector *bt_detector_new(int n_vocab, bool (*is_control)(void *user, int32_t id), void *user)
{
    bt_detector *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->n_vocab = n_vocab;
    d->is_control = is_control;
    d->user = user;
    return d;
}

void bt_detector_free(bt_detector *d) { free(d); }

void bt_detector_set_tokenizer(bt_detector *d, const bt_tokenizer *t)
{
    if (d) d->tok = t;
}

static bool in_vocab(const bt_detector *d, int32_t id) { return id >= 0 && id < d->n_vocab; }

static bool control(const bt_detector *d, int32_t id)
{
    if (d->is_control) return d->is_control(d->user, id);
    if (!d->tok) return false;
    if (bt_tokenizer_is_eog(d->tok, id)) return false;
    return id == bt_tokenizer_bos(d->tok) || bt_tokenizer_is_control(d->tok, id);
}

/* Append the piece of `id`, quoted and escaped, to buf (" ('!')"), at most
 * `max` visible bytes. Nothing without a tokenizer. */
static void put_piece(const bt_detector *d, int32_t id, char *buf, size_t cap, size_t max)
{
    if (!d->tok || !in_vocab(d, id) || id >= bt_tokenizer_n_vocab(d->tok)) return;
    size_t len = 0;
    const char *p = bt_token_piece(d->tok, id, &len);
    if (!p) return;
    size_t o = strlen(buf);
    if (o + 8 >= cap) return;
    o += (size_t)snprintf(buf + o, cap - o, " ('");
    size_t n = bt_text_utf8_complete(p, BT_MIN(len, max));
    /* room for "...')" after the piece */
    bt_text_escape(p, n, buf + o, cap - o - 5, 0, BT_TEXT_UTF8 | BT_TEXT_SQUOTE);
    o += strlen(buf + o);
    if (len > max) { memcpy(buf + o, "...", 3); o += 3; }
    memcpy(buf + o, "')", 3);
}

static bt_finding *add(bt_finding *out, int max, int *nf, int kind, int step, int pos, int32_t id)
{
    if (*nf >= max) return NULL;
    bt_finding *f = &out[(*nf)++];
    memset(f, 0, sizeof(*f));
    f->kind = kind; f->step = step; f->pos = pos; f->token = id; f->start_step = step;
    return f;
}

int bt_detector_feed(bt_detector *d, int step, int pos, int32_t id, bt_finding *out, int max)
{
    if (!d) return 0;
    if (!out) max = 0;
    int nf = 0;
    bt_finding *f;

    /* Periodic matches against the history before this token. */
    for (int p = 1; p <= BT_DETECT_LOOP_MAX_PERIOD; p++) {
        if (d->n >= p && d->ids[(d->n - p) % HIST] == id) {
            if (d->match[p]++ == 0) d->seg_start[p] = d->steps[(d->n - p) % HIST];
        } else {
            d->match[p] = 0;
        }
    }
    bool same = d->n > 0 && d->ids[(d->n - 1) % HIST] == id;
    d->ids[d->n % HIST] = id;
    d->steps[d->n % HIST] = step;
    d->n++;

    if (!in_vocab(d, id)) {
        if ((f = add(out, max, &nf, BT_FIND_OOV_TOKEN, step, pos, id)))
            snprintf(f->detail, sizeof f->detail, "token id %d at step %d is outside the vocabulary (%d ids)",
                     id, step, d->n_vocab);
    } else if (control(d, id)) {
        if ((f = add(out, max, &nf, BT_FIND_SPECIAL_LEAK, step, pos, id))) {
            snprintf(f->detail, sizeof f->detail, "control token %d", id);
            put_piece(d, id, f->detail, sizeof f->detail, 40);
            size_t o = strlen(f->detail);
            snprintf(f->detail + o, sizeof f->detail - o, " emitted as generated text at step %d", step);
        }
    }

    if (same) d->run++;
    else { d->run = 1; d->run_start = step; }
    if (d->run == BT_DETECT_WALL_MIN && (f = add(out, max, &nf, BT_FIND_TOKEN_WALL, step, pos, id))) {
        f->start_step = d->run_start;
        f->count = d->run;
        snprintf(f->detail, sizeof f->detail, "token %d", id);
        put_piece(d, id, f->detail, sizeof f->detail, 40);
        size_t o = strlen(f->detail);
        snprintf(f->detail + o, sizeof f->detail - o, " repeated %d times from step %d", d->run, d->run_start);
    }

    if (d->loop_period && d->match[d->loop_period] == 0) d->loop_period = 0;   /* episode over */
    if (!d->loop_period) {
        int p = 1;
        while (p <= BT_DETECT_LOOP_MAX_PERIOD && d->match[p] < (BT_DETECT_LOOP_MIN_REPEATS - 1) * p) p++;
        if (p >= 2 && p <= BT_DETECT_LOOP_MAX_PERIOD) {
            d->loop_period = p;
            if ((f = add(out, max, &nf, BT_FIND_REPETITION_LOOP, step, pos, id))) {
                f->period = p;
                f->count = (d->match[p] + p) / p;
                f->start_step = d->seg_start[p];
                size_t o = (size_t)snprintf(f->detail, sizeof f->detail, "tokens");
                for (int k = p; k >= 1 && o < 120; k--)
                    o += (size_t)snprintf(f->detail + o, sizeof f->detail - o, " %d", d->ids[(d->n - k) % HIST]);
                if (d->tok) {
                    /* the unit's text, joined */
                    char text[96] = "";
                    size_t t = 0;
                    for (int k = p; k >= 1 && t < 60; k--) {
                        int32_t u = d->ids[(d->n - k) % HIST];
                        size_t len = 0;
                        const char *pc = in_vocab(d, u) && u < bt_tokenizer_n_vocab(d->tok) ? bt_token_piece(d->tok, u, &len) : NULL;
                        for (size_t i = 0; pc && i < len && t < 60; i++) {
                            unsigned char c = (unsigned char)pc[i];
                            if (c == '\n') { if (t + 2 < sizeof text) { text[t++] = '\\'; text[t++] = 'n'; } }
                            else if (c == '\'' || c == '\\') { if (t + 2 < sizeof text) { text[t++] = '\\'; text[t++] = (char)c; } }
                            else if (c < 0x20 || c == 0x7f) { if (t + 1 < sizeof text) text[t++] = '?'; }
                            else text[t++] = (char)c;
                        }
                    }
                    text[t] = 0;
                    o += (size_t)snprintf(f->detail + o, sizeof f->detail - o, " ('%s%s')", text, t >= 60 ? "..." : "");
                }
                if (o < sizeof f->detail)
                    snprintf(f->detail + o, sizeof f->detail - o, " repeated %d times (period %d) from step %d",
                             f->count, p, f->start_step);
            }
        }
    }
    return nf;
}
