/* view_spec.c - the Speculation view: per verify step, the drafted tokens
 * against the target's (accepted '+', rejected 'x' with the target's token,
 * never judged '-' / after the stop token 's' greyed), the bonus or
 * correction token, the drafter and k; above them the acceptance rate over
 * time as a sparkline with the selected verify step marked under it.
 *
 * Only the verify steps on screen are loaded (one pk range on spec_steps and
 * one on spec_trail per draw). Keys: up/down a verify step, left/right a
 * draft within it, PgUp/PgDn, g/G, n/p the next/previous rejection, Enter
 * opens the verify step in the Step view with the logit row that judged the
 * selected draft (by default the rejection, else the bonus row). */
#include "view.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The view's own state: the acceptance series (loaded once) and the
 * cursor. */
typedef struct spec_view {
    tui_spec_info info;
    bool valid;                 /* info loaded */
    int sel;                    /* selected verify step, -1 until the view opens */
    int top;                    /* first verify step on screen */
    int col;                    /* selected draft in the row, -1: none */
    int page;                   /* list rows of the last draw */
} spec_view;

static void spec_init(tui_app *a, void *state)
{
    (void)a;
    spec_view *v = state;
    v->sel = v->col = -1;
}

/* The series, read the first time the view needs it. */
static int spec_load(tui_app *a, spec_view *v)
{
    if (v->valid) return BT_OK;
    int rc = tui_spec_info_load(a->tr, &v->info);
    if (rc) return rc;
    v->valid = true;
    if (v->info.present && v->sel < 0) v->sel = v->top = v->info.min_step;
    return BT_OK;
}

static bool spark_utf8(const tui_app *a) { return (a->san & TUI_SAN_UTF8) && a->color; }

/* 'piece' sanitized, or #id when the trace never showed that token's text. */
static void piece_of(tui_app *a, int id, int64_t near, char *buf, size_t cap, int max_cols)
{
    int len = 0;
    const char *p = id >= 0 ? tui_trace_piece(a->tr, id, near, &len) : NULL;
    if (id < 0) { snprintf(buf, cap, "-"); return; }
    if (!p || cap < 4) { snprintf(buf, cap, "#%d", id); return; }
    buf[0] = '\'';
    tui_sanitize(p, len, buf + 1, cap - 2, max_cols, a->san | TUI_SAN_SHOWSPACE);
    strcat(buf, "'");
}

/* Pad a sanitized string to cols display columns (printf counts bytes). */
static const char *pad(char *buf, size_t cap, int cols)
{
    size_t len = strlen(buf);
    for (int w = tui_text_width(buf); w < cols && len + 1 < cap; w++) buf[len++] = ' ';
    buf[len] = 0;
    return buf;
}

static int mark_attr(const tui_app *a, const tui_spec_draft *d)
{
    if (!d->draft_finite) return tui_attr_fg(a, TUI_H_BAD);
    switch (d->mark) {
    case TUI_SM_ACCEPT: return tui_attr_fg(a, TUI_H_CLEAN);
    case TUI_SM_REJECT: return tui_attr_fg(a, TUI_H_BAD);
    default: return A_DIM;
    }
}

/* The draft the cursor is on: the chosen one, else the rejection. */
static int cur_draft(const spec_view *v, const tui_spec_row *r)
{
    if (v->col >= 0 && v->col < r->n) return v->col;
    return r->reject_at;
}

static void draw_summary(tui_app *a, const spec_view *v, const tui_rect *r)
{
    const tui_spec_info *si = &v->info;
    double rate = si->tot_drafted ? (double)si->tot_acc / (double)si->tot_drafted : NAN;
    char pct[32];
    if (isnan(rate)) snprintf(pct, sizeof pct, "-");
    else snprintf(pct, sizeof pct, "%.1f%%", 100 * rate);
    tui_putf(r->y, r->x, r->w, A_BOLD, "Speculation  drafter %s  k %d  verify steps %d..%d  acceptance %s%s (%lld/%lld drafted%s)",
             si->drafter[0] ? si->drafter : "?", si->spec_k, si->min_step, si->max_step, si->exact ? "" : "~", pct,
             (long long)si->tot_acc, (long long)si->tot_drafted, si->exact ? "" : ", sampled");
}

static void draw_spark(tui_app *a, const spec_view *v, const tui_spec_layout *l)
{
    const tui_spec_info *si = &v->info;
    if (l->spark.h < 2 || l->spark_w < 4) return;
    int cols = l->spark_w;
    double rate[TUI_SPARK_BUCKETS];
    char buf[TUI_SPARK_BUCKETS * 3 + 1];
    tui_spark_rebin(si->win_acc, si->win_drafted, si->n_win, cols, rate);
    tui_spark_render(rate, cols, spark_utf8(a), buf, sizeof buf);
    tui_put(l->spark.y, l->spark.x, 9, A_NORMAL, "accepted");
    tui_put(l->spark.y, l->spark_x, cols, a->color ? COLOR_PAIR(TUI_P_OK) : A_NORMAL, buf);
    /* under it: the step range and a caret at the selected verify step */
    int y = l->spark.y + 1;
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, "%d", si->min_step);
    snprintf(hi, sizeof hi, "%d", si->max_step);
    tui_put(y, l->spark.x, 9, A_DIM, "step");
    int c = tui_spark_col(tui_spec_window_of(si, v->sel), si->n_win, cols);
    int lw = (int)strlen(lo), hw = (int)strlen(hi);
    if (c > lw) tui_put(y, l->spark_x, cols, A_DIM, lo);      /* labels the caret would cut are left out */
    if (hw + lw + 2 < cols && c < cols - hw - 1) tui_put(y, l->spark_x + cols - hw, hw, A_DIM, hi);
    tui_put(y, l->spark_x + c, 1, A_BOLD, "^");
}

/* One verify step on one line: "> 1234  2/4  +'a' +'b' x'c'>'d' -'e' | corr 'd'". */
static void draw_row(tui_app *a, const spec_view *v, const tui_spec_row *r, int y, int x0, int w, bool sel)
{
    int64_t near = tui_trace_step_seq(a->tr, r->step);
    int x = x0, end = x0 + w;
    char head[48];
    snprintf(head, sizeof head, "%c%6d %2d/%-2d ", sel ? '>' : ' ', r->step, r->accepted, r->k);
    x += tui_put(y, x, end - x, sel ? A_BOLD | A_REVERSE : A_BOLD, head);
    int cur = sel ? cur_draft(v, r) : -1;
    const char *arrow = (a->san & TUI_SAN_UTF8) ? "\xe2\x86\x92" : ">";
    for (int i = 0; i < r->n && x < end; i++) {
        const tui_spec_draft *d = &r->d[i];
        char p[64], t[64], cell[160];
        piece_of(a, d->draft_token, near, p, sizeof p, 12);
        if (d->mark == TUI_SM_REJECT) {
            piece_of(a, d->target_token, near, t, sizeof t, 12);
            snprintf(cell, sizeof cell, "%s%c%s%s%s", d->draft_finite ? "" : "!", tui_spec_mark_char(d->mark), p, arrow, t);
        } else {
            snprintf(cell, sizeof cell, "%s%c%s", d->draft_finite ? "" : "!", tui_spec_mark_char(d->mark), p);
        }
        int attr = mark_attr(a, d) | (i == cur ? A_REVERSE : 0);
        x += tui_put(y, x, end - x, attr, cell);
        if (x < end) x += tui_put(y, x, end - x, A_NORMAL, " ");
    }
    if (x < end) {
        char b[64], cell[96];
        if (r->bonus_token >= 0) {
            piece_of(a, r->bonus_token, near, b, sizeof b, 12);
            snprintf(cell, sizeof cell, "| %s %s", !strcmp(r->bonus_kind, "correction") ? "corr" : r->bonus_kind[0] ? r->bonus_kind : "bonus", b);
        } else {
            snprintf(cell, sizeof cell, "| stop");
        }
        tui_put(y, x, end - x, A_BOLD, cell);
    }
}

static void draw_detail(tui_app *a, const spec_view *v, const tui_spec_row *r, const tui_rect *rc)
{
    if (rc->h <= 0) return;
    int64_t near = tui_trace_step_seq(a->tr, r->step);
    char b[4][64];
    {   /* a plain rule: the alternate character set is not there in every terminal */
        char rule[1024];
        bool u = (a->san & TUI_SAN_UTF8) != 0;
        int n = rc->w < (int)(sizeof rule / 3) - 1 ? rc->w : (int)(sizeof rule / 3) - 1;
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            if (u) { memcpy(rule + o, "\xe2\x94\x80", 3); o += 3; }
            else rule[o++] = '-';
        }
        rule[o] = 0;
        tui_put(rc->y, rc->x, rc->w, A_DIM, rule);
    }
    if (r->bonus_token >= 0) piece_of(a, r->bonus_token, near, b[0], sizeof b[0], 16);
    tui_putf(rc->y, rc->x + 2, rc->w - 4, A_BOLD, " verify step %d: %d of %d accepted; %s %s  (Enter: Step view) ", r->step, r->accepted,
             r->k, r->bonus_token >= 0 ? (r->bonus_kind[0] ? r->bonus_kind : "bonus") : "no bonus:",
             r->bonus_token >= 0 ? b[0] : "generation stopped");
    int cur = cur_draft(v, r);
    for (int i = 0; i < r->n && i + 1 < rc->h; i++) {
        const tui_spec_draft *d = &r->d[i];
        piece_of(a, d->draft_token, near, b[0], sizeof b[0], 10);
        piece_of(a, d->target_token, near, b[1], sizeof b[1], 10);
        char where[48];
        if (!d->draft_finite) snprintf(where, sizeof where, "NON-FINITE draft row");
        else if (d->draft_step >= 0) snprintf(where, sizeof where, "draft step %d", d->draft_step);
        else snprintf(where, sizeof where, "n-gram");
        tui_putf(rc->y + 1 + i, rc->x, rc->w, mark_attr(a, d) | (i == cur ? A_REVERSE : 0),
                 "%c #%-2d pos %-5d %s %s %s q %-5s p %-7s %-12s %s", tui_spec_mark_char(d->mark), d->idx, d->pos,
                 pad(b[0], sizeof b[0], 12), (a->san & TUI_SAN_UTF8) ? "\xe2\x86\x92" : ">", pad(b[1], sizeof b[1], 12),
                 tui_num(b[2], 32, d->draft_prob), tui_num(b[3], 32, d->target_prob), d->reason[0] ? d->reason : tui_spec_mark_name(d->mark),
                 where);
    }
    if (r->n < r->k && r->n + 1 < rc->h)
        tui_putf(rc->y + 1 + r->n, rc->x, rc->w, A_DIM, "  (%d more drafts not shown)", r->k - r->n);
}

void tui_spec_draw(tui_app *a, void *state, const tui_rect *body)
{
    spec_view *v = state;
    if (spec_load(a, v) != BT_OK) { tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg()); return; }
    const tui_spec_info *si = &v->info;
    if (!si->present) {
        tui_put(body->y, body->x, body->w, A_BOLD, "Not a speculative trace: no verify steps were recorded.");
        tui_put(body->y + 1, body->x, body->w, A_NORMAL,
                "Runs with --spec-k K and a drafter (--draft MODEL, --draft-self N, --draft-ngram N) record");
        tui_put(body->y + 2, body->x, body->w, A_NORMAL, "each verify step's drafted tokens against the target's here.");
        return;
    }
    tui_spec_layout l;
    tui_layout_spec(body, si->spec_k, &l);
    draw_summary(a, v, &l.summary);
    draw_spark(a, v, &l);
    int vis = l.list.h - 1;
    v->page = vis > 1 ? vis : 1;
    if (vis < 1) return;
    tui_putf(l.list.y, l.list.x, l.list.w, A_BOLD, "  step acc/k drafts (%c accepted, %c rejected%starget, %c not reached, %c after stop)  bonus",
             tui_spec_mark_char(TUI_SM_ACCEPT), tui_spec_mark_char(TUI_SM_REJECT), (a->san & TUI_SAN_UTF8) ? "\xe2\x86\x92" : ">",
             tui_spec_mark_char(TUI_SM_AFTER_REJECT), tui_spec_mark_char(TUI_SM_AFTER_STOP));
    tui_spec_row *rows = malloc(sizeof(tui_spec_row) * vis);
    if (!rows) { tui_put(l.list.y + 1, l.list.x, l.list.w, A_BOLD, "out of memory"); return; }
    int n = 0;
    if (v->top > v->sel) v->top = v->sel;
    if (tui_spec_rows_load(a->tr, v->top, +1, rows, vis, &n) != BT_OK) {
        tui_put(l.list.y + 1, l.list.x, l.list.w, A_BOLD, bt_errmsg());
        free(rows);
        return;
    }
    /* the selection fell below the page (moved down, or the terminal got
     * shorter): the page ends at it */
    if (n && v->sel > rows[n - 1].step) {
        if (tui_spec_rows_load(a->tr, v->sel, -1, rows, vis, &n) != BT_OK) n = 0;
        if (n) v->top = rows[0].step;
    } else if (n < vis && v->top > si->min_step) {     /* a short last page: fill it from the end */
        if (tui_spec_rows_load(a->tr, si->max_step, -1, rows, vis, &n) != BT_OK) n = 0;
        if (n) v->top = rows[0].step;
    }
    const tui_spec_row *sel = NULL;
    for (int i = 0; i < n; i++) {
        bool is_sel = rows[i].step == v->sel;
        if (is_sel) sel = &rows[i];
        draw_row(a, v, &rows[i], l.list.y + 1 + i, l.list.x, l.list.w, is_sel);
    }
    if (sel) draw_detail(a, v, sel, &l.detail);
    free(rows);
}

static void spec_status(tui_app *a, void *state, char *buf, size_t cap)
{
    (void)a;
    const spec_view *v = state;
    if (!v->valid || !v->info.present) {
        snprintf(buf, cap, "not a speculative trace  Tab/1-%d:views ?:help q:quit", tui_n_views);
        return;
    }
    snprintf(buf, cap, "verify step %d  up/down:verify step  left/right:draft  n/p:next/prev rejection  Enter:Step view  ?:help",
             v->sel);
}

/* Open the verify step in the Step view with the logit row that judged the
 * selected draft: the row at pos - 1 predicts the token at pos. */
static int open_step(tui_app *a, const spec_view *v)
{
    tui_spec_row r;
    if (tui_spec_row_load(a->tr, v->sel, &r) != BT_OK || tui_app_step(a, r.step) != BT_OK) {
        snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
        return TUI_R_REDRAW;
    }
    int j = cur_draft(v, &r);
    if (j >= 0 && tui_step_logits_at(a->tr, &a->st, r.d[j].pos - 1) == BT_OK)
        snprintf(a->status, sizeof a->status, "verify step %d: logits of the row that judged draft #%d (%s, pos %d)", r.step, r.d[j].idx,
                 tui_spec_mark_name(r.d[j].mark), r.d[j].pos);
    else
        snprintf(a->status, sizeof a->status, "verify step %d: %d of %d drafts accepted", r.step, r.accepted, r.k);
    tui_app_switch(a, tui_view_find("step"));
    return TUI_R_REDRAW | TUI_R_SWITCH;
}

static int select_step(spec_view *v, int step)
{
    if (step < 0) return TUI_R_NONE;
    if (step != v->sel) v->col = -1;
    v->sel = step;
    if (v->top > step) v->top = step;
    return TUI_R_REDRAW;
}

int tui_spec_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    (void)body;
    spec_view *v = state;
    if (spec_load(a, v) != BT_OK || !v->info.present) return TUI_R_NONE;
    const tui_spec_info *si = &v->info;
    switch (action) {
    case TUI_A_UP: return select_step(v, tui_spec_neighbor(a->tr, v->sel, -1, false));
    case TUI_A_DOWN: return select_step(v, tui_spec_neighbor(a->tr, v->sel, +1, false));
    case TUI_A_PGUP: {
        int page = v->page > 1 ? v->page - 1 : 1;
        v->top = tui_spec_skip(a->tr, v->top, -page);
        return select_step(v, tui_spec_skip(a->tr, v->sel, -page));
    }
    case TUI_A_PGDN: {
        int page = v->page > 1 ? v->page - 1 : 1;
        v->top = tui_spec_skip(a->tr, v->top, page);
        return select_step(v, tui_spec_skip(a->tr, v->sel, page));
    }
    case TUI_A_FIRST: return select_step(v, si->min_step);
    case TUI_A_LAST: return select_step(v, si->max_step);
    case TUI_A_LEFT:
    case TUI_A_RIGHT: {
        tui_spec_row r;
        if (tui_spec_row_load(a->tr, v->sel, &r) != BT_OK || !r.n) return TUI_R_NONE;
        int cur = cur_draft(v, &r);
        if (cur < 0) cur = action == TUI_A_RIGHT ? -1 : r.n;
        v->col = tui_nav_clamp(cur, action == TUI_A_RIGHT ? 1 : -1, r.n);
        return TUI_R_REDRAW;
    }
    case TUI_A_NEXT:
    case TUI_A_PREV: {
        int s = tui_spec_neighbor(a->tr, v->sel, action == TUI_A_NEXT ? +1 : -1, true);
        if (s < 0) {
            snprintf(a->status, sizeof a->status, "no %s rejection", action == TUI_A_NEXT ? "later" : "earlier");
            return TUI_R_REDRAW;
        }
        v->col = -1;
        select_step(v, s);
        v->col = -1;
        return TUI_R_REDRAW;
    }
    case TUI_A_ENTER: return open_step(a, v);
    default: return TUI_R_NONE;
    }
}

/* `browse --step S`: open on the first verify step at or after S. */
static void spec_start(tui_app *a, void *state, int step)
{
    spec_view *v = state;
    if (spec_load(a, v) != BT_OK || !v->info.present) return;
    int s = tui_spec_neighbor(a->tr, step - 1, +1, false);
    if (s >= 0) v->sel = v->top = s;
}

const tui_view_class tui_spec_class = {
    .state_size = sizeof(spec_view), .init = spec_init, .status = spec_status, .start = spec_start,
};
