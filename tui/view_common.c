/* view_common.c - curses helpers shared by the views: colours (or markers
 * when there are none), clipped text, the layer x op grid and a tap's
 * statistics. */
#include "view.h"
#include "base/text.h"
#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tui_colors_init(void)
{
    start_color();
    use_default_colors();
    init_pair(TUI_P_BAD, COLOR_RED, -1);
    init_pair(TUI_P_WARN, COLOR_YELLOW, -1);
    init_pair(TUI_P_OK, COLOR_GREEN, -1);
    init_pair(TUI_P_BAD_BG, COLOR_WHITE, COLOR_RED);
    init_pair(TUI_P_WARN_BG, COLOR_BLACK, COLOR_YELLOW);
    init_pair(TUI_P_OK_BG, COLOR_BLACK, COLOR_GREEN);
    init_pair(TUI_P_HEADER, COLOR_BLACK, COLOR_CYAN);
    init_pair(TUI_P_DIM, COLOR_CYAN, -1);
    init_pair(TUI_P_NONE_BG, COLOR_WHITE, COLOR_BLACK);
}

int tui_attr_fg(const tui_app *a, int health)
{
    if (!a->color) return health == TUI_H_BAD ? A_BOLD : A_NORMAL;
    switch (health) {
    case TUI_H_BAD: return COLOR_PAIR(TUI_P_BAD) | A_BOLD;
    case TUI_H_WARN: return COLOR_PAIR(TUI_P_WARN);
    case TUI_H_CLEAN: return COLOR_PAIR(TUI_P_OK);
    default: return A_NORMAL;
    }
}

static int tui_attr_bg(const tui_app *a, int health)
{
    if (!a->color) return A_NORMAL;
    switch (health) {
    case TUI_H_BAD: return COLOR_PAIR(TUI_P_BAD_BG) | A_BOLD;
    case TUI_H_WARN: return COLOR_PAIR(TUI_P_WARN_BG);
    case TUI_H_CLEAN: return COLOR_PAIR(TUI_P_OK_BG);
    default: return COLOR_PAIR(TUI_P_NONE_BG);
    }
}

int tui_put(int y, int x, int w, int attr, const char *s)
{
    if (w <= 0 || y < 0 || x < 0 || y >= LINES || x >= COLS) return 0;
    if (x + w > COLS) w = COLS - x;
    char buf[1024];
    /* The last line of defence: whatever a view forgot to sanitize (a
     * tensor name, an event kind from a crafted trace) is escaped here.
     * RAWBS keeps already sanitized text as it is. */
    int cols = bt_text_escape(s, strlen(s), buf, sizeof buf, w, BT_TEXT_UTF8 | BT_TEXT_RAWBS);
    attrset(attr);
    mvaddstr(y, x, buf);
    attrset(A_NORMAL);
    return cols;
}

int tui_putf(int y, int x, int w, int attr, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return tui_put(y, x, w, attr, buf);
}

void tui_clear_rect(const tui_rect *r)
{
    for (int y = r->y; y < r->y + r->h && y < LINES; y++) {
        move(y, r->x);
        for (int x = r->x; x < r->x + r->w && x < COLS; x++) addch(' ');
    }
}

const char *tui_num(char *buf, size_t cap, double v)
{
    if (isnan(v)) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.4g", v);
    return buf;
}

void tui_draw_grid(tui_app *a, const tui_step *st, const tui_rect *r, int cell_w, int *top, int sel_idx)
{
    const tui_grid *g = tui_trace_grid(a->tr, st->model);
    if (!g || !g->n_rows) {
        tui_put(r->y, r->x, r->w, A_NORMAL, "no taps recorded for this model");
        return;
    }
    int label_w = 4;
    /* A one-column cell cannot hold a label: the two-letter label is then
     * written downwards over two header rows, so no two ops look alike. */
    int head_h = cell_w - 1 >= 2 ? 1 : 2;
    int vis = r->h - head_h;
    int sel_row = -1, sel_col = -1;
    if (sel_idx >= 0) tui_grid_find(g, sel_idx, &sel_row, &sel_col);
    *top = tui_scroll_follow(*top, sel_row < 0 ? 0 : sel_row, vis, g->n_rows);
    int max_cols = (r->w - label_w) / cell_w;
    int ncols = g->n_cols < max_cols ? g->n_cols : max_cols;
    for (int c = 0; c < ncols; c++) {
        char ab[16];
        tui_op_abbrev(g->ops[c], ab, head_h == 2 ? 2 : cell_w - 1 < 15 ? cell_w - 1 : 15);
        int x = r->x + label_w + c * cell_w;
        if (head_h == 1) { tui_put(r->y, x, cell_w - 1, A_BOLD, ab); continue; }
        for (int k = 0; k < 2 && ab[k]; k++) tui_put(r->y + k, x, 1, A_BOLD, (char[2]){ ab[k], 0 });
    }
    for (int i = 0; i < vis && *top + i < g->n_rows; i++) {
        int row = *top + i, y = r->y + head_h + i;
        tui_put(y, r->x, label_w, A_NORMAL, g->row_label[row]);
        for (int c = 0; c < ncols; c++) {
            int idx = g->cell[row * g->n_cols + c];
            int h = idx >= 0 && idx < st->n_taps ? st->taps[idx].health : TUI_H_NONE;
            if (a->headroom && idx >= 0 && idx < st->n_taps) {
                const tui_tap *t = &st->taps[idx];
                h = tui_headroom_health(t->present, t->nan, t->pinf, t->ninf, t->absmax);
            }
            char txt[8];
            int w = cell_w - 1;
            if (w > 6) w = 6;
            memset(txt, ' ', w);
            txt[w] = 0;
            if (idx >= 0) txt[0] = tui_health_marker(h);
            int attr = tui_attr_bg(a, h);
            if (idx < 0) attr = A_NORMAL;
            if (idx >= 0 && idx == sel_idx) attr = (a->color ? attr : A_NORMAL) | A_REVERSE | A_BOLD;
            tui_put(y, r->x + label_w + c * cell_w, w, attr, txt);
        }
    }
    if (*top > 0) tui_put(r->y, r->x, label_w, A_NORMAL, "^");
    if (*top + vis < g->n_rows) tui_put(r->y + r->h - 1, r->x + r->w - 1, 1, A_NORMAL, "v");
}

void tui_draw_tap_detail(tui_app *a, const tui_tap *t, const tui_rect *r)
{
    char b[6][32];
    if (r->h <= 0) return;
    if (!t || !t->name) { tui_put(r->y, r->x, r->w, A_NORMAL, "no tensor selected (arrows move the cell cursor)"); return; }
    if (!t->present) { tui_putf(r->y, r->x, r->w, A_NORMAL, "%s: not tapped at this step", t->name); return; }
    char counts[96];
    tui_fmt_bad_counts(counts, sizeof counts, t->nan, t->pinf, t->ninf);
    tui_putf(r->y, r->x, r->w, tui_attr_fg(a, t->health) | A_BOLD, "%c %s  (layer %s, op %s)  %s of %lld",
             tui_health_marker(t->health), t->name, t->layer >= 0 ? (snprintf(b[0], 32, "%d", t->layer), b[0]) : "-",
             t->op, counts, (long long)t->n);
    if (r->h > 1) {
        if (t->first_bad_index >= 0)
            tui_putf(r->y + 1, r->x, r->w, A_NORMAL, "  first non-finite at index %d, pos %d", t->first_bad_index, t->first_bad_pos);
        else
            tui_putf(r->y + 1, r->x, r->w, A_NORMAL, "  all %lld values finite", (long long)t->n);
    }
    if (r->h > 2)
        tui_putf(r->y + 2, r->x, r->w, A_NORMAL, "  min %s  max %s  absmax %s  mean %s  rms %s", tui_num(b[0], 32, t->min),
                 tui_num(b[1], 32, t->max), tui_num(b[2], 32, t->absmax), tui_num(b[3], 32, t->mean), tui_num(b[4], 32, t->rms));
    if (r->h > 3) {
        double ratio = t->median > 0 ? t->absmax / t->median : NAN;
        tui_putf(r->y + 3, r->x, r->w, A_NORMAL, "  median absmax over the trace %s (this step x%s)  %s", tui_num(b[0], 32, t->median),
                 tui_num(b[1], 32, ratio),
                 t->health == TUI_H_BAD ? "NON-FINITE" : t->health == TUI_H_WARN ? "FAR ABOVE MEDIAN" : "clean");
    }
}
