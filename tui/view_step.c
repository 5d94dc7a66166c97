/* view_step.c - the Step view: the logit snapshot beside the layer x op
 * grid, and the full statistics of the selected tap underneath.
 *
 * Keys: arrows/hjkl move the cell cursor, n/p the next/previous step, g/G
 * the first/last step, PgUp/PgDn scroll the grid, Enter opens the step's
 * tokens. */
#include "view.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

static void piece_of(tui_app *a, int id, int64_t near, char *buf, size_t cap, int max_cols)
{
    int len = 0;
    const char *p = id >= 0 ? tui_trace_piece(a->tr, id, near, &len) : NULL;
    if (!p || cap < 8) { snprintf(buf, cap, "?"); return; }
    tui_piece_label(p, len, buf, cap, max_cols, a->san);
}

static void draw_logits(tui_app *a, const tui_rect *r)
{
    const tui_step *st = &a->st;
    const tui_logits *lg = &st->lg;
    int y = r->y, w = r->w;
    char b[4][48];
    bool draft = st->model[0] && strcmp(st->model, "target");
    tui_putf(y++, r->x, w, draft ? A_BOLD | A_REVERSE : A_BOLD, "Step %d  %s%s%s%s", st->step, st->kind, st->present ? "" : "(not recorded)",
             draft ? "  model " : "", draft ? st->model : "");
    if (st->present) {
        /* a verify step has a snapshot per target row: say which one this is */
        if (st->n_pos > 1 && lg->present)
            tui_putf(y++, r->x, w, A_NORMAL, "pos %d..%d  %s ms  row pos %d", st->pos0, st->pos0 + st->n_pos - 1,
                     tui_num(b[0], 48, st->ms), lg->pos);
        else
            tui_putf(y++, r->x, w, A_NORMAL, "pos %d..%d  %s ms", st->pos0, st->pos0 + st->n_pos - 1, tui_num(b[0], 48, st->ms));
    }
    if (!lg->present) { tui_put(y++, r->x, w, A_NORMAL, "no logit snapshot"); return; }
    int64_t nb = lg->nan + lg->pinf + lg->ninf;
    char counts[96];
    tui_fmt_bad_counts(counts, sizeof counts, lg->nan, lg->pinf, lg->ninf);
    if (nb) tui_putf(y++, r->x, w, tui_attr_fg(a, TUI_H_BAD), "! logits: %s of %d", counts, lg->n_vocab);
    else tui_putf(y++, r->x, w, tui_attr_fg(a, TUI_H_CLEAN), "logits finite (%d), max %s", lg->n_vocab, tui_num(b[0], 48, lg->max));
    tui_putf(y++, r->x, w, A_NORMAL, "entropy %s nats", tui_num(b[0], 48, lg->entropy));
    static const char *const rules[3] = { "first", "torch", "triton" };
    for (int k = 0; k < 3 && y < r->y + r->h; k++) {
        piece_of(a, lg->argmax[k], st->seq, b[0], sizeof b[0], w - 24 > 14 ? w - 24 : 14);
        bool decided = lg->rule[0] && !strncmp(lg->rule, rules[k], strlen(rules[k]));
        tui_putf(y++, r->x, w, decided ? A_BOLD : A_NORMAL, "%sargmax %-6s %6d %s", decided ? ">" : " ", rules[k], lg->argmax[k], b[0]);
    }
    if (y < r->y + r->h) {
        piece_of(a, lg->chosen, st->seq, b[0], sizeof b[0], w - 24 > 14 ? w - 24 : 14);
        tui_putf(y++, r->x, w, A_NORMAL, "rule %s -> chose %d %s", lg->rule[0] ? lg->rule : "?", lg->chosen, b[0]);
    }
    /* the piece column takes what the panel leaves: <|im_start|> fits whole at 80 columns */
    int pw = w - 24 < 11 ? 11 : w - 24 > 30 ? 30 : w - 24;
    if (y < r->y + r->h && lg->k)
        tui_putf(y++, r->x, w, A_BOLD, " # %6s %-*s %7s %5s", "id", pw, "top-k", "logit", lg->probs_exact ? "p" : "p~k");
    for (int i = 0; i < lg->k && y < r->y + r->h; i++) {
        piece_of(a, lg->ids[i], st->seq, b[0], sizeof b[0], pw);
        char pb[16];
        if (isnan(lg->probs[i])) snprintf(pb, sizeof pb, "    -");
        else snprintf(pb, sizeof pb, "%5.3f", lg->probs[i]);
        char cell[160];
        snprintf(cell, sizeof cell, "%s%*s", b[0], pw - tui_text_width(b[0]) > 0 ? pw - tui_text_width(b[0]) : 0, "");
        tui_putf(y++, r->x, w, lg->ids[i] == lg->chosen ? A_BOLD : A_NORMAL, "%2d %6d %s %7s %s", i + 1, lg->ids[i], cell,
                 tui_num(b[1], 48, lg->vals[i]), pb);
    }
}

/* The view's own state: the grid's scroll position. */
typedef struct step_view {
    int grid_top;               /* first layer row on screen */
} step_view;

void tui_step_draw(tui_app *a, void *state, const tui_rect *body)
{
    step_view *v = state;
    if (tui_app_step(a, a->step) != BT_OK) { tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg()); return; }
    const tui_grid *g = tui_trace_grid(a->tr, a->st.model);
    tui_step_layout l;
    tui_layout_step(body, g ? g->n_cols : 1, &l);
    if (a->sel_idx < 0 && g && g->n_rows) {             /* start on the first bad tap, else the first cell */
        for (int i = 0; i < a->st.n_taps && a->sel_idx < 0; i++)
            if (a->st.taps[i].health == TUI_H_BAD) a->sel_idx = i;
        for (int i = 0; i < g->n_rows * g->n_cols && a->sel_idx < 0; i++)
            if (g->cell[i] >= 0) a->sel_idx = g->cell[i];
    }
    draw_logits(a, &l.logits);
    tui_draw_grid(a, &a->st, &l.grid, l.cell_w, &v->grid_top, a->sel_idx);
    const tui_tap *t = a->sel_idx >= 0 && a->sel_idx < a->st.n_taps ? &a->st.taps[a->sel_idx] : NULL;
    if (l.detail.h > 0) {
        mvhline(l.detail.y, l.detail.x, ACS_HLINE, l.detail.w);
        tui_putf(l.detail.y, l.detail.x + 2, l.detail.w - 4, A_NORMAL, " %d non-finite, %d far above median ", a->st.n_bad, a->st.n_warn);
        tui_rect d = { l.detail.y + 1, l.detail.x, l.detail.h - 1, l.detail.w };
        tui_draw_tap_detail(a, t, &d);
    }
}

/* Move the cell cursor by (dr, dc), skipping empty cells; moving onto a
 * shorter row (in/out) lands on its last cell. */
static void move_cell(tui_app *a, int dr, int dc)
{
    const tui_grid *g = tui_trace_grid(a->tr, a->st.model);
    if (!g || !g->n_rows) return;
    int row = 0, col = 0;
    if (a->sel_idx < 0 || !tui_grid_find(g, a->sel_idx, &row, &col)) { row = col = 0; }
    if (dc) {
        for (int c = col + dc; c >= 0 && c < g->n_cols; c += dc)
            if (g->cell[row * g->n_cols + c] >= 0) { a->sel_idx = g->cell[row * g->n_cols + c]; return; }
        return;
    }
    int r = tui_nav_clamp(row, dr, g->n_rows);
    if (r == row) return;
    for (int c = col; c >= 0; c--)
        if (g->cell[r * g->n_cols + c] >= 0) { a->sel_idx = g->cell[r * g->n_cols + c]; return; }
    for (int c = col + 1; c < g->n_cols; c++)
        if (g->cell[r * g->n_cols + c] >= 0) { a->sel_idx = g->cell[r * g->n_cols + c]; return; }
}

static int goto_step(tui_app *a, int step)
{
    if (tui_app_step(a, step) != BT_OK) snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
    return TUI_R_REDRAW;
}

int tui_step_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    (void)state;
    (void)body;
    int lo, hi;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    switch (action) {
    case TUI_A_UP: move_cell(a, -1, 0); return TUI_R_REDRAW;
    case TUI_A_DOWN: move_cell(a, +1, 0); return TUI_R_REDRAW;
    case TUI_A_LEFT: move_cell(a, 0, -1); return TUI_R_REDRAW;
    case TUI_A_RIGHT: move_cell(a, 0, +1); return TUI_R_REDRAW;
    case TUI_A_PGUP: for (int i = 0; i < 8; i++) move_cell(a, -1, 0); return TUI_R_REDRAW;
    case TUI_A_PGDN: for (int i = 0; i < 8; i++) move_cell(a, +1, 0); return TUI_R_REDRAW;
    case TUI_A_NEXT: return goto_step(a, a->step + 1);
    case TUI_A_PREV: return goto_step(a, a->step - 1);
    case TUI_A_FIRST: return goto_step(a, lo);
    case TUI_A_LAST: return goto_step(a, hi);
    case TUI_A_ENTER:
        if (a->st_valid && a->st.seq >= 0) tui_app_goto_seq(a, a->st.seq);
        tui_app_switch(a, tui_view_find("tokens"));
        return TUI_R_REDRAW | TUI_R_SWITCH;
    default: return TUI_R_NONE;
    }
}

static void step_status(tui_app *a, void *state, char *buf, size_t cap)
{
    (void)a;
    (void)state;
    snprintf(buf, cap, "arrows:cell n/p:step g/G:first/last Enter:tokens w:walk-back ?:help q:quit");
}

const tui_view_class tui_step_class = { .state_size = sizeof(step_view), .status = step_status };
