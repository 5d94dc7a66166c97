/* view_run.c - the Run view (metadata, then events with jump-to) and the
 * Backtrace view (frames recorded at the first non-finite and at a crash).
 * Meta values and event details are written by the run and may quote the
 * prompt, so they are sanitized like token text. */
#include "view.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* The views' own state: the Run view's cursor and scrolling, the
 * Backtrace view's scrolling (the run's metadata itself is shared). */
typedef struct run_view {
    int sel, top;
    int hscroll;                /* columns the selected line's value is scrolled by */
} run_view;
typedef struct bt_view {
    int top;
} bt_view;

/* Lines: meta rows, a blank, the events header, the events. */
static int run_lines(const tui_run *r) { return r->n_meta + 2 + (r->n_events ? r->n_events : 1); }

static int event_at(const tui_run *r, int line)
{
    int e = line - r->n_meta - 2;
    return e >= 0 && e < r->n_events ? e : -1;
}

/* The value shown for a Run line (meta value or event detail), raw. */
static const char *line_value(const tui_run *r, int ln)
{
    if (ln < r->n_meta) return r->meta[ln].value;
    int e = event_at(r, ln);
    return e >= 0 ? r->events[e].detail : NULL;
}

static int key_width(const tui_run *r)
{
    int kw = 14;
    for (int i = 0; i < r->n_meta; i++) if ((int)strlen(r->meta[i].key) > kw) kw = (int)strlen(r->meta[i].key);
    return kw > 24 ? 24 : kw;
}

/* The selected line's value scrolled by hscroll columns: '<' when text is
 * hidden on the left, '>' when more follows on the right. Other lines are
 * cut at the edge as before. */
static void value_text(tui_app *a, const char *v, bool sel, int hscroll, int width, char *out, size_t cap)
{
    size_t len = strlen(v);
    char *full = malloc(len * 6 + 1);
    if (!full) { tui_sanitize(v, len, out, cap, width, a->san); return; }
    int total = tui_sanitize(v, len, full, len * 6 + 1, 0, a->san);
    int off = sel ? tui_hscroll(hscroll, 0, total, width - 1) : 0;
    const char *p = tui_text_skip(full, off);
    bool left = off > 0, right = total - off > width;
    int room = width - left - right;
    char mid[2048];
    tui_text_fit(p, mid, sizeof mid, room > 0 ? room : 0);
    snprintf(out, cap, "%s%s%s", left ? "<" : "", mid, right && sel ? ">" : "");
    free(full);
}

void tui_run_draw(tui_app *a, void *state, const tui_rect *body)
{
    run_view *rv = state;
    if (tui_app_run(a) != BT_OK) { tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg()); return; }
    const tui_run *r = &a->run;
    int n = run_lines(r);
    rv->sel = tui_nav_clamp(rv->sel, 0, n);
    rv->top = tui_scroll_follow(rv->top, rv->sel, body->h, n);
    int kw = key_width(r);
    for (int i = 0; i < body->h && rv->top + i < n; i++) {
        int ln = rv->top + i, y = body->y + i;
        bool sel = ln == rv->sel;
        int attr = sel ? A_REVERSE : A_NORMAL;
        char val[2100];
        if (ln < r->n_meta) {
            value_text(a, r->meta[ln].value, sel, rv->hscroll, body->w - kw - 1, val, sizeof val);
            tui_putf(y, body->x, body->w, attr, "%-*.*s %s", kw, kw, r->meta[ln].key, val);
        } else if (ln == r->n_meta) {
            continue;
        } else if (ln == r->n_meta + 1) {
            tui_putf(y, body->x, body->w, A_BOLD | (sel ? A_REVERSE : 0), "Events (%d%s)  Enter: open the event's step  "
                     "Left/Right: scroll a long line", r->n_events, r->events_truncated ? ", first ones only" : "");
        } else if (!r->n_events) {
            tui_put(y, body->x, body->w, attr, "  none: the detectors found nothing");
        } else {
            const tui_event *e = &r->events[event_at(r, ln)];
            int h = !strcmp(e->kind, "first_nonfinite") || !strcmp(e->kind, "nonfinite_logits") || !strcmp(e->kind, "crash")
                        ? TUI_H_BAD : TUI_H_WARN;
            char where[112] = "";
            if (e->layer >= 0) snprintf(where, sizeof where, " L%02d %s", e->layer, e->op);
            char head[200];
            snprintf(head, sizeof head, "%c step %-5d %-18s%s  ", tui_health_marker(h), e->step, e->kind, where);
            value_text(a, e->detail, sel, rv->hscroll, body->w - tui_text_width(head), val, sizeof val);
            tui_putf(y, body->x, body->w, attr | tui_attr_fg(a, h), "%s%s", head, val);
        }
    }
}

int tui_run_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    run_view *rv = state;
    if (tui_app_run(a) != BT_OK) return TUI_R_NONE;
    const tui_run *r = &a->run;
    int n = run_lines(r);
    if (action == TUI_A_LEFT || action == TUI_A_RIGHT) {     /* scroll the selected line's value */
        const char *v = line_value(r, rv->sel);
        if (!v) return TUI_R_NONE;
        size_t len = strlen(v);
        char *full = malloc(len * 6 + 1);
        if (!full) return TUI_R_NONE;
        int total = tui_sanitize(v, len, full, len * 6 + 1, 0, a->san);
        free(full);
        int width = body->w - key_width(r) - 1, step = width > 4 ? width / 2 : 2;
        rv->hscroll = tui_hscroll(rv->hscroll, action == TUI_A_RIGHT ? step : -step, total, width - 1);
        return TUI_R_REDRAW;
    }
    if (action != TUI_A_ENTER) rv->hscroll = 0;
    switch (action) {
    case TUI_A_UP: rv->sel = tui_nav_clamp(rv->sel, -1, n); return TUI_R_REDRAW;
    case TUI_A_DOWN: rv->sel = tui_nav_clamp(rv->sel, +1, n); return TUI_R_REDRAW;
    case TUI_A_PGUP: rv->sel = tui_nav_clamp(rv->sel, -(body->h - 1), n); return TUI_R_REDRAW;
    case TUI_A_PGDN: rv->sel = tui_nav_clamp(rv->sel, body->h - 1, n); return TUI_R_REDRAW;
    case TUI_A_FIRST: rv->sel = 0; return TUI_R_REDRAW;
    case TUI_A_LAST: rv->sel = n - 1; return TUI_R_REDRAW;
    case TUI_A_NEXT: case TUI_A_PREV: {      /* next / previous event */
        int e = event_at(r, rv->sel);
        e = e < 0 ? 0 : tui_nav_clamp(e, action == TUI_A_NEXT ? 1 : -1, r->n_events);
        if (r->n_events) rv->sel = r->n_meta + 2 + e;
        return TUI_R_REDRAW;
    }
    case TUI_A_ENTER: {
        int e = event_at(r, rv->sel);
        if (e < 0 || r->events[e].step < 0) return TUI_R_NONE;
        const tui_event *ev = &r->events[e];
        if (tui_app_step(a, ev->step) != BT_OK) { snprintf(a->status, sizeof a->status, "%s", bt_errmsg()); return TUI_R_REDRAW; }
        tui_app_select_tensor(a, ev->layer, ev->op);
        tui_app_switch(a, tui_view_find("step"));
        return TUI_R_REDRAW | TUI_R_SWITCH;
    }
    default: return TUI_R_NONE;
    }
}

/* Backtrace lines: per backtrace a header and its frames, then a blank. */
static int bt_count_lines(const tui_run *r)
{
    int n = 0;
    for (int i = 0; i < r->n_bts; i++) {
        n += 2;
        for (const char *p = r->bts[i].frames; *p; p++) if (*p == '\n') n++;
        if (r->bts[i].frames[0] && r->bts[i].frames[strlen(r->bts[i].frames) - 1] != '\n') n++;
    }
    return n;
}

void tui_bt_draw(tui_app *a, void *state, const tui_rect *body)
{
    bt_view *v = state;
    if (tui_app_run(a) != BT_OK) { tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg()); return; }
    const tui_run *r = &a->run;
    if (!r->n_bts) {
        tui_put(body->y, body->x, body->w, A_NORMAL, "No backtraces recorded: no non-finite value was detected and the run did not crash.");
        return;
    }
    int n = bt_count_lines(r);
    if (v->top > n - body->h) v->top = n - body->h;
    if (v->top < 0) v->top = 0;
    int ln = 0, y = body->y;
    for (int i = 0; i < r->n_bts && y < body->y + body->h; i++) {
        const tui_frames *f = &r->bts[i];
        if (ln++ >= v->top)
            tui_putf(y++, body->x, body->w, A_BOLD | tui_attr_fg(a, TUI_H_BAD), "%s at step %d (event %lld)", f->kind, f->step,
                     (long long)f->event_id);
        const char *p = f->frames;
        while (*p && y < body->y + body->h) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (ln++ >= v->top) {
                char line[512];
                tui_sanitize(p, len, line, sizeof line, body->w - 2, a->san);
                tui_putf(y++, body->x + 2, body->w - 2, A_NORMAL, "%s", line);
            }
            p += len + (e ? 1 : 0);
        }
        if (ln++ >= v->top) y++;
    }
}

int tui_bt_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    bt_view *v = state;
    switch (action) {
    case TUI_A_UP: v->top--; break;
    case TUI_A_DOWN: v->top++; break;
    case TUI_A_PGUP: v->top -= body->h - 1; break;
    case TUI_A_PGDN: v->top += body->h - 1; break;
    case TUI_A_FIRST: v->top = 0; break;
    case TUI_A_LAST: v->top = 1 << 30; break;
    default: return TUI_R_NONE;
    }
    if (v->top < 0) v->top = 0;
    return TUI_R_REDRAW;
}

const tui_view_class tui_run_class = { .state_size = sizeof(run_view) };
const tui_view_class tui_bt_class = { .state_size = sizeof(bt_view) };
