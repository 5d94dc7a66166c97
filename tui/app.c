/* app.c - the browser's state and the view registry.
 *
 * The app holds one loaded item per view (a token window, one step, the
 * walk-back chain, the run metadata) and loads each lazily the first time a
 * view needs it, so opening a trace costs one token window. Views are rows
 * of tui_views[]: a later view (speculation, kernels) is one more row, not
 * another case in a switch. */
#include "tui.h"
#include "base/util.h"
#include "config.h"

#include <stdlib.h>
#include <string.h>

/* A build without ncursesw (configure --without-ncursesw) has no view_*.c:
 * the registry keeps the dumps only, and `browse` without --dump says so. */
#ifdef HAVE_NCURSESW
#define VIEW(name, title, short_title, key, draw, handle, dump, status) { name, title, short_title, key, draw, handle, dump, status }
#else
#define VIEW(name, title, short_title, key, draw, handle, dump, status) { name, title, short_title, key, NULL, NULL, dump, NULL }
#endif
const tui_view tui_views[] = {
    VIEW("tokens", "Tokens", "Tokens", '1', tui_tokens_draw, tui_tokens_handle, tui_dump_tokens, NULL),
    VIEW("step", "Step", "Step", '2', tui_step_draw, tui_step_handle, tui_dump_step, NULL),
    VIEW("walkback", "Walk-back", "Walk", '3', tui_walk_draw, tui_walk_handle, tui_dump_walk, NULL),
    VIEW("run", "Run", "Run", '4', tui_run_draw, tui_run_handle, tui_dump_run, NULL),
    VIEW("backtrace", "Backtrace", "Stack", '5', tui_bt_draw, tui_bt_handle, tui_dump_backtrace, NULL),
    VIEW("spec", "Speculation", "Spec", '6', tui_spec_draw, tui_spec_handle, tui_dump_spec, tui_spec_status),
    VIEW("kernels", "Kernels", "Kern", '7', tui_kernels_draw, tui_kernels_handle, tui_dump_kernels, NULL),
};
const int tui_n_views = (int)BT_ARRAY_SIZE(tui_views);

int tui_view_find(const char *name)
{
    for (int i = 0; i < tui_n_views; i++)
        if (!strcmp(tui_views[i].name, name)) return i;
    if (!strcmp(name, "walk") || !strcmp(name, "walk-back")) return tui_view_find("walkback");
    if (!strcmp(name, "bt")) return tui_view_find("backtrace");
    if (!strcmp(name, "speculation")) return tui_view_find("spec");
    return -1;
}

int tui_app_init(tui_app *a, tui_trace *tr, unsigned san, bool color)
{
    memset(a, 0, sizeof(*a));
    a->tr = tr;
    a->san = san;
    a->color = color;
    a->sel_idx = -1;
    a->spec_sel = a->spec_col = -1;
    a->dump_width = 80;
    a->tk.min_seq = a->tk.max_seq = -1;
    int min_step;
    int64_t min_seq;
    tui_trace_bounds(tr, &min_step, NULL, &min_seq, NULL);
    a->step = min_step < 0 ? 0 : min_step;
    int rc = tui_tokens_load(tr, min_seq < 0 ? 0 : min_seq, san, &a->tk);
    if (rc) return rc;
    a->tok_seq = a->tk.n ? a->tk.cells[0].seq0 : -1;
    return BT_OK;
}

void tui_app_free(tui_app *a)
{
    tui_tokens_free(&a->tk);
    tui_step_free(&a->st);
    tui_walk_free(&a->walk);
    tui_run_free(&a->run);
    tui_kernels_free(&a->ks);
}

int tui_app_step(tui_app *a, int step)
{
    int lo, hi;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    if (hi >= 0) {
        if (step < lo) step = lo;
        if (step > hi) step = hi;
    }
    a->step = step;
    if (a->st_valid && a->st.step == step) return BT_OK;
    a->st_valid = false;
    int rc = tui_step_load(a->tr, step, &a->st);
    if (rc) return rc;
    a->st_valid = true;
    if (a->sel_idx >= a->st.n_taps) a->sel_idx = -1;
    return BT_OK;
}

int tui_app_walk(tui_app *a)
{
    if (a->walk_valid) return BT_OK;
    int rc = tui_walk_load(a->tr, &a->walk);
    if (rc) return rc;
    a->walk_valid = true;
    return BT_OK;
}

int tui_app_kernels(tui_app *a, int step)
{
    int rc = tui_app_walk(a);
    if (rc) return rc;
    const tui_link *bad = a->walk.found && a->walk.n ? &a->walk.links[0] : NULL;
    if (step < 0) step = bad ? bad->step : a->step;
    if (a->ks_valid && a->ks.step == step) return BT_OK;
    a->ks_valid = false;
    a->ks_top = 0;
    rc = tui_kernels_load(a->tr, step, bad ? bad->layer : -1, bad && bad->step == step ? bad->op : NULL, &a->ks);
    if (rc) return rc;
    a->ks_valid = true;
    return BT_OK;
}

int tui_app_run(tui_app *a)
{
    if (a->run_valid) return BT_OK;
    int rc = tui_run_load(a->tr, &a->run);
    if (rc) return rc;
    a->run_valid = true;
    return BT_OK;
}

int tui_app_spec(tui_app *a)
{
    if (a->spec_valid) return BT_OK;
    int rc = tui_spec_info_load(a->tr, &a->spec);
    if (rc) return rc;
    a->spec_valid = true;
    if (a->spec.present && a->spec_sel < 0) a->spec_sel = a->spec_top = a->spec.min_step;
    return BT_OK;
}

int tui_app_goto_seq(tui_app *a, int64_t seq)
{
    tui_tokens *tk = &a->tk;
    if (tk->max_seq < 0) return BT_OK;
    if (seq < tk->min_seq) seq = tk->min_seq;
    if (seq > tk->max_seq) seq = tk->max_seq;
    /* Reload when the target is outside the window or close enough to an
     * edge that the next page would run off it. */
    const int64_t margin = 256;
    bool reload = !tk->n || seq < tk->lo || seq > tk->hi ||
                  (seq - tk->lo < margin && tk->lo > tk->min_seq) ||
                  (tk->hi - seq < margin && tk->hi < tk->max_seq);
    if (reload) {
        int i = tk->n ? tui_tokens_find(tk, seq) : -1;
        /* inside one huge run cell the target is already on screen */
        if (i >= 0 && seq >= tk->cells[i].seq0 && seq <= tk->cells[i].seq1 &&
            tk->cells[i].seq1 - tk->cells[i].seq0 > margin && !(seq < tk->lo || seq > tk->hi))
            reload = false;
    }
    if (reload) {
        int rc = tui_tokens_load(a->tr, seq, a->san, tk);
        if (rc) return rc;
    }
    if (tk->n) a->tok_seq = tk->cells[tui_tokens_find(tk, seq)].seq0;
    return BT_OK;
}

bool tui_app_select_tensor(tui_app *a, int layer, const char *op)
{
    if (!a->st_valid || !op || !*op) return false;
    for (int i = 0; i < a->st.n_taps; i++) {
        const tui_tap *t = &a->st.taps[i];
        if (t->op && t->layer == layer && !strcmp(t->op, op)) { a->sel_idx = i; return true; }
    }
    return false;
}

void tui_app_switch(tui_app *a, int view)
{
    if (view < 0 || view >= tui_n_views || view == a->view) return;
    if (a->n_prev == (int)BT_ARRAY_SIZE(a->prev_view)) {
        memmove(a->prev_view, a->prev_view + 1, sizeof(int) * (a->n_prev - 1));
        a->n_prev--;
    }
    a->prev_view[a->n_prev++] = a->view;
    a->view = view;
}

int tui_app_walk_jump(tui_app *a)
{
    int rc = tui_app_walk(a);
    if (rc) return rc;
    tui_app_switch(a, tui_view_find("walkback"));
    if (!a->walk.found || !a->walk.n) {
        snprintf(a->status, sizeof a->status, "trace is clean: no non-finite tap or logit recorded");
        return BT_OK;
    }
    const tui_link *l = &a->walk.links[0];
    a->walk_sel = 0;
    if ((rc = tui_app_step(a, l->step))) return rc;
    if (l->idx >= 0) a->sel_idx = l->idx;
    else tui_app_select_tensor(a, l->layer, l->op);
    int64_t seq = a->st.seq;
    if (seq >= 0 && (rc = tui_app_goto_seq(a, seq))) return rc;
    snprintf(a->status, sizeof a->status, "first non-finite: %s", a->walk.summary);
    return BT_OK;
}
