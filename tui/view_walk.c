/* view_walk.c - the Walk-back view: the first non-finite (step, layer, op)
 * in one sentence, the propagation chain (n/p walk it; the selected link's
 * step and tensor become the Step view's selection) and, where there is
 * room, that step's grid with the link's cell selected. */
#include "view.h"
#include "base/util.h"

#include <string.h>

static void select_link(tui_app *a)
{
    if (!a->walk.n) return;
    const tui_link *l = &a->walk.links[a->walk_sel];
    if (tui_app_step(a, l->step) != BT_OK) { snprintf(a->status, sizeof a->status, "%s", bt_errmsg()); return; }
    if (l->idx >= 0) a->sel_idx = l->idx;
    else tui_app_select_tensor(a, l->layer, l->op);
}

void tui_walk_draw(tui_app *a, void *state, const tui_rect *body)
{
    (void)state;
    if (tui_app_walk(a) != BT_OK) { tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg()); return; }
    const tui_walk *w = &a->walk;
    int y = body->y;
    if (!w->found) {
        tui_put(y++, body->x, body->w, tui_attr_fg(a, TUI_H_CLEAN) | A_BOLD,
                "Trace is clean: no non-finite tap or logit was recorded.");
        tui_put(y++, body->x, body->w, A_NORMAL, "Nothing to walk back to. Tokens (1) shows degenerate output, if any.");
        return;
    }
    if (!a->st_valid || a->st.step != w->links[a->walk_sel].step) select_link(a);
    tui_putf(y++, body->x, body->w, tui_attr_fg(a, TUI_H_BAD) | A_BOLD, "! First non-finite: %s", w->summary);
    const tui_link *o = &w->links[0];
    tui_putf(y++, body->x, body->w, A_NORMAL, "  tensor %s, pos %d%s%s", o->tensor, o->first_bad_pos,
             w->extent[0] ? "; " : "", w->extent);
    if (w->argmax_note[0]) {
        /* the argmax sentence is long: two lines, the rest elided */
        char tmp[300], wrapped[320];
        const char *wl[2];
        tui_sanitize(w->argmax_note, strlen(w->argmax_note), tmp, sizeof tmp, 0, a->san);
        int nl = tui_wrap(tmp, body->w - 2, 2, wrapped, sizeof wrapped, wl);
        for (int i = 0; i < nl; i++) tui_putf(y++, body->x, body->w, A_NORMAL, "  %s", wl[i]);
    }
    y++;
    /* The chain on the left, the selected link's grid on the right if it
     * fits; a list too narrow for its whole lines beside the grid gets the
     * compact columns (tui_walk_line), cut with "..." only past those. */
    char line[256], counts[96], where[112];
    int need = 0;
    for (int i = 0; i < w->n; i++) {
        const tui_link *l = &w->links[i];
        tui_fmt_bad_counts(counts, sizeof counts, l->nan, l->pinf, l->ninf);
        if (l->layer >= 0) snprintf(where, sizeof where, "L%02d %s", l->layer, l->op);
        else snprintf(where, sizeof where, "%s", l->tensor);
        tui_walk_line(line, sizeof line, 1 << 20, false, l->step, where, counts, l->note);
        need = BT_MAX(need, tui_text_width(line));
    }
    const tui_grid *g = a->st_valid ? tui_trace_grid(a->tr, a->st.model) : NULL;
    int cell_w = 2, grid_w = g ? 4 + g->n_cols * 2 + 1 : 0;
    int list_w = body->w;
    if (g && body->w - grid_w >= 44) list_w = body->w - grid_w - 1;
    else grid_w = 0;
    int top = y, vis = body->y + body->h - top - 1;
    bool compact = need > list_w;
    if (compact) snprintf(line, sizeof line, "%-4s %-13s %-7s %s", "step", "tensor", "bad", "how (n/p: walk)");
    else snprintf(line, sizeof line, "Propagation (n/p: walk, Enter: open step)");
    tui_put(y, body->x, list_w, A_BOLD, line);
    int first = tui_scroll_follow(0, a->walk_sel, vis, w->n);
    for (int i = 0; i < vis && first + i < w->n; i++) {
        const tui_link *l = &w->links[first + i];
        tui_fmt_bad_counts(counts, sizeof counts, l->nan, l->pinf, l->ninf);
        if (l->layer >= 0) snprintf(where, sizeof where, "L%02d %s", l->layer, l->op);
        else snprintf(where, sizeof where, "%s", l->tensor);
        int attr = (first + i == a->walk_sel ? A_REVERSE : A_NORMAL) | (first + i == 0 ? A_BOLD : 0);
        tui_walk_line(line, sizeof line, list_w, compact, l->step, where, counts, l->note);
        tui_put(top + 1 + i, body->x, list_w, attr, line);
    }
    if (grid_w && a->st_valid) {
        tui_rect gr = { top, body->x + list_w + 1, body->y + body->h - top, grid_w };
        int gtop = 0;
        tui_draw_grid(a, &a->st, &gr, cell_w, &gtop, a->sel_idx);
    }
}

int tui_walk_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    (void)state;
    (void)body;
    if (tui_app_walk(a) != BT_OK || !a->walk.n) return TUI_R_NONE;
    int n = a->walk.n, old = a->walk_sel;
    switch (action) {
    case TUI_A_UP: case TUI_A_PREV: case TUI_A_LEFT: a->walk_sel = tui_nav_clamp(a->walk_sel, -1, n); break;
    case TUI_A_DOWN: case TUI_A_NEXT: case TUI_A_RIGHT: a->walk_sel = tui_nav_clamp(a->walk_sel, +1, n); break;
    case TUI_A_PGUP: a->walk_sel = tui_nav_clamp(a->walk_sel, -10, n); break;
    case TUI_A_PGDN: a->walk_sel = tui_nav_clamp(a->walk_sel, +10, n); break;
    case TUI_A_FIRST: a->walk_sel = 0; break;
    case TUI_A_LAST: a->walk_sel = n - 1; break;
    case TUI_A_ENTER:
        select_link(a);
        tui_app_switch(a, tui_view_find("step"));
        return TUI_R_REDRAW | TUI_R_SWITCH;
    default: return TUI_R_NONE;
    }
    if (a->walk_sel != old) select_link(a);
    return TUI_R_REDRAW;
}

static void walk_status(tui_app *a, void *state, char *buf, size_t cap)
{
    (void)a;
    (void)state;
    snprintf(buf, cap, "n/p:walk the chain Enter:open step Tab:views ?:help q:quit");
}

/* No state of its own: the chain and its selected link are shared (the
 * walk-back jump, `w` from any view, selects the origin). */
const tui_view_class tui_walk_class = { .status = walk_status };
