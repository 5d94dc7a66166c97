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
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int first_int(sqlite3_stmt *s, int *out)
{
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) *out = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    return r == SQLITE_ROW || r == SQLITE_DONE ? BT_OK : BT_EIO;
}

bool tui_trace_is_spec(tui_trace *tr)
{
    if (tr->spec_state) return tr->spec_state > 0;
    int step = -1;
    if (tr->sq[SQ_FIRST] && first_int(tui_sq(tr, SQ_FIRST), &step) == BT_OK && step >= 0) tr->spec_state = 1;
    else tr->spec_state = -1;
    return tr->spec_state > 0;
}

static void meta_value(tui_trace *tr, const char *key, char *buf, size_t cap)
{
    buf[0] = 0;
    sqlite3_stmt *s = tui_sq(tr, SQ_META_KEY);
    if (!s) return;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_reset(s);
}

int tui_spec_info_load(tui_trace *tr, tui_spec_info *si)
{
    memset(si, 0, sizeof(*si));
    si->min_step = si->max_step = -1;
    if (!tui_trace_is_spec(tr)) return BT_OK;
    if (first_int(tui_sq(tr, SQ_FIRST), &si->min_step) || first_int(tui_sq(tr, SQ_LAST), &si->max_step))
        return tui_db_error(tr, "reading spec_steps");
    if (si->min_step < 0) return BT_OK;
    si->present = true;

    char v[64];
    meta_value(tr, "drafter", si->drafter, sizeof si->drafter);
    meta_value(tr, "spec_k", v, sizeof v);
    si->spec_k = v[0] ? atoi(v) : 0;
    tui_spec_row row;
    if (tui_spec_row_load(tr, si->min_step, &row) == BT_OK) {
        if (!si->drafter[0]) snprintf(si->drafter, sizeof si->drafter, "%s", row.drafter);
        if (si->spec_k <= 0) si->spec_k = row.k;
    }

    /* small enough to read whole? */
    enum { HEAD = TUI_SPARK_BUCKETS * TUI_SPARK_SAMPLE };
    int *hs = malloc(sizeof(int) * 3 * HEAD);
    if (!hs) return bt_error(BT_ENOMEM, "out of memory for the acceptance series");
    sqlite3_stmt *s = tui_sq(tr, SQ_HEAD);
    sqlite3_bind_int(s, 1, HEAD + 1);
    int r, n = 0;
    while ((r = sqlite3_step(s)) == SQLITE_ROW && n < HEAD + 1) {
        if (n < HEAD) {
            hs[3 * n] = sqlite3_column_int(s, 0);
            hs[3 * n + 1] = sqlite3_column_int(s, 1);
            hs[3 * n + 2] = sqlite3_column_int(s, 2);
        }
        n++;
    }
    sqlite3_reset(s);
    if (r != SQLITE_ROW && r != SQLITE_DONE) { free(hs); return tui_db_error(tr, "reading spec_steps"); }
    if (n <= HEAD) {
        si->exact = true;
        si->n_win = n < TUI_SPARK_BUCKETS ? n : TUI_SPARK_BUCKETS;
        for (int w = 0; w < si->n_win; w++) {
            int i0 = (int)((int64_t)w * n / si->n_win), i1 = (int)((int64_t)(w + 1) * n / si->n_win);
            si->win_lo[w] = hs[3 * i0];
            for (int i = i0; i < i1; i++) {
                int acc = hs[3 * i + 1], k = hs[3 * i + 2];
                if (k < 0) k = 0;
                if (acc > k) acc = k;
                si->win_acc[w] += acc < 0 ? 0 : acc;
                si->win_drafted[w] += k;
            }
            si->tot_acc += si->win_acc[w];
            si->tot_drafted += si->win_drafted[w];
        }
        si->tot_rows = n;
        free(hs);
        return BT_OK;
    }
    free(hs);

    int64_t span = (int64_t)si->max_step - si->min_step + 1;
    si->n_win = span < TUI_SPARK_BUCKETS ? (int)span : TUI_SPARK_BUCKETS;
    si->exact = true;
    for (int w = 0; w < si->n_win; w++) {
        int64_t lo = si->min_step + span * w / si->n_win, hi = si->min_step + span * (w + 1) / si->n_win - 1;
        si->win_lo[w] = (int)lo;
        s = tui_sq(tr, SQ_SAMPLE);
        sqlite3_bind_int64(s, 1, lo);
        sqlite3_bind_int64(s, 2, hi);
        sqlite3_bind_int(s, 3, TUI_SPARK_SAMPLE + 1);
        n = 0;
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            if (++n > TUI_SPARK_SAMPLE) { si->exact = false; break; }
            int acc = sqlite3_column_int(s, 0), k = sqlite3_column_int(s, 1);
            if (k < 0) k = 0;
            if (acc > k) acc = k;       /* a stop token counts once, never more than drafted */
            si->win_acc[w] += acc < 0 ? 0 : acc;
            si->win_drafted[w] += k;
            si->tot_rows++;
        }
        sqlite3_reset(s);
        if (r != SQLITE_ROW && r != SQLITE_DONE) return tui_db_error(tr, "sampling spec_steps");
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

static void text_col(sqlite3_stmt *s, int col, char *buf, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(buf, cap, "%s", t ? (const char *)t : "");
}

static void read_head(sqlite3_stmt *s, tui_spec_row *r)
{
    memset(r, 0, sizeof(*r));
    r->step = sqlite3_column_int(s, 0);
    text_col(s, 1, r->drafter, sizeof r->drafter);
    r->k = sqlite3_column_int(s, 2);
    r->accepted = sqlite3_column_int(s, 3);
    r->bonus_token = sqlite3_column_type(s, 4) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 4);
    text_col(s, 5, r->bonus_kind, sizeof r->bonus_kind);
    r->reject_at = -1;
}

/* Fill the drafts of rows[0..n) (ascending steps) from one spec_trail range. */
static int load_trails(tui_trace *tr, tui_spec_row *rows, int n)
{
    if (!n) return BT_OK;
    sqlite3_stmt *s = tui_sq(tr, SQ_TRAIL);
    sqlite3_bind_int(s, 1, rows[0].step);
    sqlite3_bind_int(s, 2, rows[n - 1].step);
    int r, i = 0;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        int step = sqlite3_column_int(s, 0);
        while (i < n && rows[i].step < step) i++;
        if (i == n) break;
        tui_spec_row *row = &rows[i];
        if (row->step != step || row->n >= TUI_SPEC_MAXK) continue;
        tui_spec_draft *d = &row->d[row->n++];
        d->idx = sqlite3_column_int(s, 1);
        d->pos = sqlite3_column_int(s, 2);
        d->draft_step = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 3);
        d->draft_token = sqlite3_column_int(s, 4);
        d->draft_prob = sqlite3_column_type(s, 5) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 5);
        d->draft_finite = sqlite3_column_int(s, 6) != 0;
        d->target_token = sqlite3_column_type(s, 7) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 7);
        d->target_prob = sqlite3_column_type(s, 8) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 8);
        d->accepted = sqlite3_column_int(s, 9) != 0;
        text_col(s, 10, d->reason, sizeof d->reason);
        d->mark = tui_spec_mark(d->accepted, d->reason);
        if (d->mark == TUI_SM_REJECT && row->reject_at < 0) row->reject_at = row->n - 1;
    }
    sqlite3_reset(s);
    if (r != SQLITE_ROW && r != SQLITE_DONE) return tui_db_error(tr, "reading spec_trail");
    return BT_OK;
}

int tui_spec_rows_load(tui_trace *tr, int from, int dir, tui_spec_row *rows, int max, int *n)
{
    *n = 0;
    if (!tui_trace_is_spec(tr) || max <= 0) return BT_OK;
    sqlite3_stmt *s = tui_sq(tr, dir >= 0 ? SQ_ROWS_FWD : SQ_ROWS_BACK);
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, max);
    int r, k = 0;
    while (k < max && (r = sqlite3_step(s)) == SQLITE_ROW) read_head(s, &rows[k++]);
    sqlite3_reset(s);
    if (k < max && r != SQLITE_DONE) return tui_db_error(tr, "reading spec_steps");
    if (dir < 0)                        /* read descending: put in step order */
        for (int i = 0; i < k / 2; i++) { tui_spec_row t = rows[i]; rows[i] = rows[k - 1 - i]; rows[k - 1 - i] = t; }
    *n = k;
    return load_trails(tr, rows, k);
}

int tui_spec_row_load(tui_trace *tr, int step, tui_spec_row *row)
{
    int n = 0, rc = tui_spec_rows_load(tr, step, +1, row, 1, &n);
    if (rc) return rc;
    if (!n || row->step != step) return bt_error(BT_ENOTFOUND, "%s: step %d is not a verify step", tr->path, step);
    return BT_OK;
}

int tui_spec_neighbor(tui_trace *tr, int step, int dir, bool rejects_only)
{
    if (!tui_trace_is_spec(tr)) return -1;
    int out = -1;
    if (rejects_only) {
        sqlite3_stmt *s = tui_sq(tr, dir >= 0 ? SQ_REJECT_FWD : SQ_REJECT_BACK);
        sqlite3_bind_int(s, 1, step);
        first_int(s, &out);
        return out;
    }
    /* the row after (before) step: rows from step +- 1 on, take the first */
    sqlite3_stmt *s = tui_sq(tr, dir >= 0 ? SQ_ROWS_FWD : SQ_ROWS_BACK);
    sqlite3_bind_int(s, 1, dir >= 0 ? step + 1 : step - 1);
    sqlite3_bind_int(s, 2, 1);
    first_int(s, &out);
    return out;
}

int tui_spec_skip(tui_trace *tr, int step, int count)
{
    if (!tui_trace_is_spec(tr) || !count) return step;
    int dir = count > 0 ? +1 : -1, want = abs(count) + 1, out = step;
    sqlite3_stmt *s = tui_sq(tr, dir > 0 ? SQ_ROWS_FWD : SQ_ROWS_BACK);
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, want);
    while (sqlite3_step(s) == SQLITE_ROW) out = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    return out;
}
