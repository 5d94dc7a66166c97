/* view_kernels.c - the Kernels view: one step's ops in forward order with
 * their host duration (run --timing) and, under each, the device kernels,
 * copies and memsets joined to it (run --device cuda --cupti). The first
 * non-finite op is drawn as bad and the kernel that wrote it highlighted.
 * Left/right (p/n): previous/next step; up/down, PgUp/PgDn: scroll; Home:
 * the first bad step. The lines are the model's (model_kernels.c), the
 * same text `browse --dump kernels` prints. */
#include "view.h"
#include "model_kernels.h"
#include "base/util.h"

#include <string.h>

/* The view's own state: the step on screen and where it is scrolled to. */
typedef struct kernels_view {
    tui_kstep ks;
    bool valid;                 /* ks holds ks.step */
    int top;                    /* first line on screen */
} kernels_view;

/* Load `step` (< 0: the first non-finite step) unless it is on screen. */
static int kernels_at(tui_app *a, kernels_view *v, int step)
{
    int rc = tui_app_walk(a);
    if (rc) return rc;
    if (step < 0) step = a->walk.found && a->walk.n ? a->walk.links[0].step : a->step;
    if (v->valid && v->ks.step == step) return BT_OK;
    v->valid = false;
    v->top = 0;
    rc = tui_kernels_open(a, step, &v->ks);
    if (rc) return rc;
    v->valid = true;
    return BT_OK;
}

static void kernels_free(void *state)
{
    kernels_view *v = state;
    tui_kernels_free(&v->ks);
}

void tui_kernels_draw(tui_app *a, void *state, const tui_rect *body)
{
    kernels_view *v = state;
    if (kernels_at(a, v, v->valid ? v->ks.step : -1) != BT_OK) {
        tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg());
        return;
    }
    const tui_kstep *k = &v->ks;
    int vis = body->h;
    if (v->top > k->n_kl - vis) v->top = k->n_kl - vis;
    if (v->top < 0) v->top = 0;
    for (int i = 0; i < vis && v->top + i < k->n_kl; i++) {
        const tui_kline *l = &k->kl[v->top + i];
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

int tui_kernels_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    kernels_view *v = state;
    if (kernels_at(a, v, v->valid ? v->ks.step : -1) != BT_OK) return TUI_R_NONE;
    int lo, hi, step = v->ks.step, page = body->h > 1 ? body->h - 1 : 1;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    switch (action) {
    case TUI_A_LEFT: case TUI_A_PREV: if (step > lo) step--; break;
    case TUI_A_RIGHT: case TUI_A_NEXT: if (step < hi) step++; break;
    case TUI_A_UP: v->top--; return TUI_R_REDRAW;
    case TUI_A_DOWN: v->top++; return TUI_R_REDRAW;
    case TUI_A_PGUP: v->top -= page; return TUI_R_REDRAW;
    case TUI_A_PGDN: v->top += page; return TUI_R_REDRAW;
    case TUI_A_FIRST: step = -1; break;
    case TUI_A_LAST: step = hi; break;
    default: return TUI_R_NONE;
    }
    if (step == v->ks.step) return TUI_R_NONE;
    int rc = kernels_at(a, v, step);
    if (rc) snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
    else a->step = v->ks.step;
    return TUI_R_REDRAW;
}

const tui_view_class tui_kernels_class = { .state_size = sizeof(kernels_view), .free = kernels_free };
