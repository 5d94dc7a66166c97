/* view_kernels.c - the Kernels view: one step's ops in forward order with
 * their host duration (run --timing) and, under each, the device kernels,
 * copies and memsets joined to it (run --device cuda --cupti). The first
 * non-finite op is drawn as bad and the kernel that wrote it highlighted.
 * Left/right (p/n): previous/next step; up/down, PgUp/PgDn: scroll; Home:
 * the first bad step. The lines are the model's (model_kernels.c), the
 * same text `browse --dump kernels` prints. */
#include "view.h"
#include "base/util.h"

#include <string.h>

void tui_kernels_draw(tui_app *a, const tui_rect *body)
{
    if (tui_app_kernels(a, a->ks_valid ? a->ks.step : -1) != BT_OK) {
        tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg());
        return;
    }
    const tui_kstep *k = &a->ks;
    int vis = body->h;
    if (a->ks_top > k->n_kl - vis) a->ks_top = k->n_kl - vis;
    if (a->ks_top < 0) a->ks_top = 0;
    for (int i = 0; i < vis && a->ks_top + i < k->n_kl; i++) {
        const tui_kline *l = &k->kl[a->ks_top + i];
        int attr = A_NORMAL;
        switch (l->kind) {
        case TUI_KL_HEAD: attr = A_BOLD; break;
        case TUI_KL_NOTE: attr = A_DIM; break;
        case TUI_KL_BAD: attr = tui_attr_fg(a, TUI_H_BAD) | A_BOLD; break;
        case TUI_KL_BADK: attr = tui_attr_fg(a, TUI_H_BAD) | A_REVERSE; break;
        default: break;
        }
        char line[512];
        tui_sanitize(l->text, strlen(l->text), line, sizeof line, 0, a->san);
        tui_put(body->y + i, body->x, body->w, attr, line);
    }
}

int tui_kernels_handle(tui_app *a, int action, const tui_rect *body)
{
    if (tui_app_kernels(a, a->ks_valid ? a->ks.step : -1) != BT_OK) return TUI_R_NONE;
    int lo, hi, step = a->ks.step, page = body->h > 1 ? body->h - 1 : 1;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    switch (action) {
    case TUI_A_LEFT: case TUI_A_PREV: if (step > lo) step--; break;
    case TUI_A_RIGHT: case TUI_A_NEXT: if (step < hi) step++; break;
    case TUI_A_UP: a->ks_top--; return TUI_R_REDRAW;
    case TUI_A_DOWN: a->ks_top++; return TUI_R_REDRAW;
    case TUI_A_PGUP: a->ks_top -= page; return TUI_R_REDRAW;
    case TUI_A_PGDN: a->ks_top += page; return TUI_R_REDRAW;
    case TUI_A_FIRST: step = -1; break;
    case TUI_A_LAST: step = hi; break;
    default: return TUI_R_NONE;
    }
    if (step == a->ks.step) return TUI_R_NONE;
    int rc = tui_app_kernels(a, step);
    if (rc) snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
    else a->step = a->ks.step;
    return TUI_R_REDRAW;
}
