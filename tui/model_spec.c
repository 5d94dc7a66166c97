/* model_spec.c - speculative decoding as plain data: verify steps with
 * their drafted tokens against the target's, and the acceptance rate over
 * time.
 *
 * Every read is a primary-key range of spec_steps / spec_trail: a page of
 * verify steps is one range on each, the next rejection is a pk scan that
 * stops at the match. The acceptance series splits [first, last verify
 * step] into at most TUI_SPARK_BUCKETS windows of equal step span and reads
 * at most TUI_SPARK_SAMPLE verify steps from the start of each, so a
 * 100,000-verify-step trace costs ~16,000 short rows, not a table scan.
 * A trace with at most TUI_SPARK_BUCKETS * TUI_SPARK_SAMPLE verify steps is
 * read whole instead (the same bounded number of rows) and windowed by
 * verify step, not by step number, so no window falls between two verify
 * steps; its overall rate is exact and said to be. Otherwise the overall
 * rate is the rate over the sampled verify steps.
 *
 * A trace written before the speculative tables existed (or one without
 * verify steps) is "not a speculative trace": present = false, no error. */
#include "model_impl.h"
#include "base/util.h"
#include "run/run_meta.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool tui_trace_is_spec(tui_trace *tr)
{
    if (tr->spec_state) return tr->spec_state > 0;
    int step = -1;
    if (bt_trace_spec_seek(tr->r, INT32_MIN, +1, 0, &step) == BT_OK && step >= 0) tr->spec_state = 1;
    else tr->spec_state = -1;
    return tr->spec_state > 0;
}

/* Verify steps (accepted, k) in [from, to] in step order, at most max. */
typedef struct spec_counts {
    int max, n;
    int *v;                 /* step, accepted, k per row (3 ints); NULL: count only */
    int64_t acc, drafted;
} spec_counts;

static int counts_cb(void *user, const bt_trace_spec_step_row *row)
{
    spec_counts *c = user;
    if (c->n == c->max) return 1;
    int k = row->k < 0 ? 0 : row->k, acc = row->accepted;
    if (acc > k) acc = k;       /* a stop token counts once, never more than drafted */
    if (acc < 0) acc = 0;
    if (c->v) { c->v[3 * c->n] = row->step; c->v[3 * c->n + 1] = acc; c->v[3 * c->n + 2] = k; }
    c->acc += acc;
    c->drafted += k;
    c->n++;
    return 0;
}

int tui_spec_info_load(tui_trace *tr, tui_spec_info *si)
{
    memset(si, 0, sizeof(*si));
    si->min_step = si->max_step = -1;
    if (!tui_trace_is_spec(tr)) return BT_OK;
    int rc;
    if ((rc = bt_trace_spec_seek(tr->r, INT32_MIN, +1, 0, &si->min_step)) ||
        (rc = bt_trace_spec_seek(tr->r, INT32_MAX, -1, 0, &si->max_step)))
        return rc;
    if (si->min_step < 0) return BT_OK;
    si->present = true;

    bt_run_meta meta;
    bt_run_meta_read(tr->r, &meta);
    snprintf(si->drafter, sizeof si->drafter, "%s", meta.drafter ? meta.drafter : "");
    si->spec_k = meta.n_spec_k;
    tui_spec_row row;
    if (tui_spec_row_load(tr, si->min_step, &row) == BT_OK) {
        if (!si->drafter[0]) snprintf(si->drafter, sizeof si->drafter, "%s", row.drafter);
        if (si->spec_k <= 0) si->spec_k = row.k;
    }

    /* small enough to read whole? */
    enum { HEAD = TUI_SPARK_BUCKETS * TUI_SPARK_SAMPLE };
    spec_counts head = { .max = HEAD + 1, .v = malloc(sizeof(int) * 3 * (HEAD + 1)) };
    if (!head.v) return bt_error(BT_ENOMEM, "out of memory for the acceptance series");
    if ((rc = bt_trace_spec_steps_each(tr->r, INT32_MIN, INT32_MAX, counts_cb, &head)) < 0) { free(head.v); return rc; }
    int n = head.n;
    const int *hs = head.v;
    if (n <= HEAD) {
        si->exact = true;
        si->n_win = n < TUI_SPARK_BUCKETS ? n : TUI_SPARK_BUCKETS;
        for (int w = 0; w < si->n_win; w++) {
            int i0 = (int)((int64_t)w * n / si->n_win), i1 = (int)((int64_t)(w + 1) * n / si->n_win);
            si->win_lo[w] = hs[3 * i0];
            for (int i = i0; i < i1; i++) {
                si->win_acc[w] += hs[3 * i + 1];
                si->win_drafted[w] += hs[3 * i + 2];
            }
            si->tot_acc += si->win_acc[w];
            si->tot_drafted += si->win_drafted[w];
        }
        si->tot_rows = n;
        free(head.v);
        return BT_OK;
    }
    free(head.v);

    int64_t span = (int64_t)si->max_step - si->min_step + 1;
    si->n_win = span < TUI_SPARK_BUCKETS ? (int)span : TUI_SPARK_BUCKETS;
    si->exact = true;
    for (int w = 0; w < si->n_win; w++) {
        int64_t lo = si->min_step + span * w / si->n_win, hi = si->min_step + span * (w + 1) / si->n_win - 1;
        si->win_lo[w] = (int)lo;
        spec_counts c = { .max = TUI_SPARK_SAMPLE };
        if ((rc = bt_trace_spec_steps_each(tr->r, (int)lo, (int)hi, counts_cb, &c)) < 0) return rc;
        if (rc == 1) si->exact = false;         /* the window held more verify steps than sampled */
        si->win_acc[w] = c.acc;
        si->win_drafted[w] = c.drafted;
        si->tot_rows += c.n;
        si->tot_acc += si->win_acc[w];
        si->tot_drafted += si->win_drafted[w];
    }
    return BT_OK;
}

int tui_spec_window_of(const tui_spec_info *si, int step)
{
    if (!si->n_win) return 0;
    int a = 0, b = si->n_win - 1;       /* last window starting at or before step */
    while (a < b) {
        int m = (a + b + 1) / 2;
        if (si->win_lo[m] <= step) a = m; else b = m - 1;
    }
    return a;
}

/* Up to max verify-step rows, in step order. */
typedef struct head_load { tui_spec_row *rows; int max, n; } head_load;

static int head_cb(void *user, const bt_trace_spec_step_row *h)
{
    head_load *l = user;
    if (l->n == l->max) return 1;
    tui_spec_row *r = &l->rows[l->n++];
    memset(r, 0, sizeof(*r));
    r->step = h->step;
    snprintf(r->drafter, sizeof r->drafter, "%.*s", (int)sizeof r->drafter - 1, h->drafter);   /* a label: cut to fit */
    r->k = h->k;
    r->accepted = h->accepted;
    r->bonus_token = h->bonus_token;
    snprintf(r->bonus_kind, sizeof r->bonus_kind, "%s", h->bonus_kind);
    r->reject_at = -1;
    return 0;
}

/* The drafts of rows[0..n) (ascending steps), from one spec_trail range. */
typedef struct trail_load { tui_spec_row *rows; int n, i; } trail_load;

static int trail_cb(void *user, const bt_trace_spec_trail_row *t)
{
    trail_load *l = user;
    while (l->i < l->n && l->rows[l->i].step < t->step) l->i++;
    if (l->i == l->n) return 1;
    tui_spec_row *row = &l->rows[l->i];
    if (row->step != t->step || row->n >= TUI_SPEC_MAXK) return 0;
    tui_spec_draft *d = &row->d[row->n++];
    *d = (tui_spec_draft){
        .idx = t->draft_idx, .pos = t->draft_pos, .draft_step = t->draft_step, .draft_token = t->draft_token,
        .target_token = t->target_token, .draft_prob = t->draft_prob, .target_prob = t->target_prob,
        .draft_finite = t->draft_finite, .accepted = t->accepted,
    };
    snprintf(d->reason, sizeof d->reason, "%s", t->reason ? t->reason : "");
    d->mark = tui_spec_mark(d->accepted, d->reason);
    if (d->mark == TUI_SM_REJECT && row->reject_at < 0) row->reject_at = row->n - 1;
    return 0;
}

int tui_spec_rows_load(tui_trace *tr, int from, int dir, tui_spec_row *rows, int max, int *n)
{
    *n = 0;
    if (!tui_trace_is_spec(tr) || max <= 0) return BT_OK;
    int lo = from, hi = INT32_MAX, rc;
    if (dir < 0) {                      /* the max verify steps ending at from */
        hi = from;
        if ((rc = bt_trace_spec_seek(tr->r, from, -1, max - 1, &lo))) return rc;
        if (lo < 0) return BT_OK;
    }
    head_load h = { .rows = rows, .max = max };
    if ((rc = bt_trace_spec_steps_each(tr->r, lo, hi, head_cb, &h)) < 0) return rc;
    *n = h.n;
    if (!h.n) return BT_OK;
    trail_load t = { .rows = rows, .n = h.n };
    rc = bt_trace_spec_trail_each(tr->r, rows[0].step, rows[h.n - 1].step, trail_cb, &t);
    return rc < 0 ? rc : BT_OK;
}

int tui_spec_row_load(tui_trace *tr, int step, tui_spec_row *row)
{
    int n = 0, rc = tui_spec_rows_load(tr, step, +1, row, 1, &n);
    if (rc) return rc;
    if (!n || row->step != step) return bt_error(BT_ENOTFOUND, "%s: step %d is not a verify step", tui_trace_path(tr), step);
    return BT_OK;
}

int tui_spec_neighbor(tui_trace *tr, int step, int dir, bool rejects_only)
{
    if (!tui_trace_is_spec(tr)) return -1;
    int out = -1;
    if (rejects_only) bt_trace_spec_next_reject(tr->r, step, dir, &out);
    else bt_trace_spec_seek(tr->r, dir >= 0 ? step + 1 : step - 1, dir, 0, &out);
    return out;
}

int tui_spec_skip(tui_trace *tr, int step, int count)
{
    if (!tui_trace_is_spec(tr) || !count) return step;
    int out = -1;
    bt_trace_spec_seek(tr->r, step, count > 0 ? +1 : -1, abs(count), &out);
    return out >= 0 ? out : step;
}
