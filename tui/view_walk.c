/* view_walk.c - the Walk-back view: the first non-finite (step, layer, op)
 * in one sentence, the propagation chain (n/p walk it; the selected link's
 * step and tensor become the Step view's selection) and, where there is
 * room, that step's grid with the link's cell selected. */
#include "view.h"
#include "util.h"

#include <string.h>

static void select_link(tui_app *a)
{
    if (!a->walk.n) return;
    const tui_link *l = &a->walk.links[a->walk_sel];
    if (tui_app_step(a, l->step) != BT_OK) { snprintf(a->status, sizeof a->status, "%s", bt_errmsg()); return; }
    if (l->idx >= 0) a->sel_idx = l->idx;
    else tui_app_select_tensor(a, l->layer, l->op);
}

void tui_walk_draw(tui_app *a, const tui_rect *body)
{
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
        char tmp[300];
        tui_sanitize(w->argmax_note, strlen(w->argmax_note), tmp, sizeof tmp, 0, a->san);
        tui_putf(y++, body->x, body->w, A_NORMAL, "  %s", tmp);
    }
    y++;
    /* chain on the left, the selected link's grid on the right if it fits */
    const tui_grid *g = a->st_valid ? tui_trace_grid(a->tr, a->st.model) : NULL;
    int grid_w = g ? 4 + g->n_cols * 2 + 1 : 0;
    int list_w = body->w;
    if (g && body->w - grid_w >= 44) list_w = body->w - grid_w - 1;
    else grid_w = 0;
    int top = y, vis = body->y + body->h - top - 1;
    tui_put(y, body->x, list_w, A_BOLD, "Propagation (n/p: walk, Enter: open step)");
    int first = tui_scroll_follow(0, a->walk_sel, vis, w->n);
    for (int i = 0; i < vis && first + i < w->n; i++) {
        const tui_link *l = &w->links[first + i];
        char counts[96], where[112];
        tui_fmt_bad_counts(counts, sizeof counts, l->nan, l->pinf, l->ninf);
        if (l->layer >= 0) snprintf(where, sizeof where, "L%02d %s", l->layer, l->op);
        else snprintf(where, sizeof where, "%s", l->tensor);
        int attr = (first + i == a->walk_sel ? A_REVERSE : A_NORMAL) | (first + i == 0 ? A_BOLD : 0);
        tui_putf(top + 1 + i, body->x, list_w, attr, "step %-4d %-15s %-9s %s", l->step, where, counts, l->note);
    }
    if (grid_w && a->st_valid) {
        tui_rect gr = { top, body->x + list_w + 1, body->y + body->h - top, grid_w };
        int gtop = 0;
        tui_draw_grid(a, &a->st, &gr, 2, &gtop, a->sel_idx);
    }
}

int tui_walk_handle(tui_app *a, int action, const tui_rect *body)
{
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
