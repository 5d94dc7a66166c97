/* app.c - the browser's shared state and the view registry.
 *
 * The app holds what several views share (a token window, one step, the
 * walk-back chain, the run metadata) and loads each lazily the first time a
 * view needs it, so opening a trace costs one token window. Everything else
 * belongs to a view: its state is made on first use from its class and
 * freed with the app. Views are rows of tui_views[]: a later view
 * (speculation, kernels) is one more row, not another case in a switch. */
#include "tui.h"
#include "base/util.h"
#include "config.h"

#include <stdlib.h>
#include <string.h>

/* The registry: one row per view, in tab order. A row names the view's
 * id (its callbacks are tui_<id>_draw and tui_<id>_handle in its view file,
 * tui_dump_<id> and its class tui_<id>_class), its --dump name, titles and
 * key. A build without ncursesw (configure --without-ncursesw) has no
 * view_*.c: the rows keep their dumps only, and `browse` without --dump
 * says so. */
#define TUI_VIEW_ROWS(X) \
    X(tokens, "tokens", "Tokens", "Tokens", '1') \
    X(step, "step", "Step", "Step", '2') \
    X(walk, "walkback", "Walk-back", "Walk", '3') \
    X(run, "run", "Run", "Run", '4') \
    X(bt, "backtrace", "Backtrace", "Stack", '5') \
    X(spec, "spec", "Speculation", "Spec", '6') \
    X(kernels, "kernels", "Kernels", "Kern", '7') \
    X(cache, "cache", "Cache", "Cache", '8')

#define DECLARE(id, name, title, short_title, key) \
    void tui_##id##_draw(tui_app *a, void *state, const tui_rect *body); \
    int tui_##id##_handle(tui_app *a, void *state, int action, const tui_rect *body); \
    int tui_dump_##id(tui_app *a, FILE *out, int step); \
    extern const tui_view_class tui_##id##_class;
TUI_VIEW_ROWS(DECLARE)
#undef DECLARE

#ifdef HAVE_NCURSESW
#define ROW(id, name, title, short_title, key) \
    { name, title, short_title, key, tui_##id##_draw, tui_##id##_handle, tui_dump_##id, &tui_##id##_class },
#else
#define ROW(id, name, title, short_title, key) { name, title, short_title, key, NULL, NULL, tui_dump_##id, NULL },
#endif
const tui_view tui_views[] = { TUI_VIEW_ROWS(ROW) };
#undef ROW
const int tui_n_views = (int)BT_ARRAY_SIZE(tui_views);
_Static_assert(BT_ARRAY_SIZE(tui_views) <= TUI_MAX_VIEWS, "more views than tui_app.view_state holds");

const char *tui_view_names(void)
{
    static char names[TUI_MAX_VIEWS * 24];
    if (names[0]) return names;
    size_t o = 0;
    for (int i = 0; i < tui_n_views && o < sizeof names; i++)
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", tui_views[i].name);
    return names;
}

void *tui_app_view_state(tui_app *a, int view)
{
    if (view < 0 || view >= tui_n_views) return NULL;
    const tui_view_class *c = tui_views[view].cls;
    if (!c || !c->state_size) return NULL;
    if (!a->view_state[view]) {
        void *st = calloc(1, c->state_size);
        if (!st) { bt_error(BT_ENOMEM, "out of memory"); return NULL; }
        if (c->init) c->init(a, st);
        a->view_state[view] = st;
    }
    return a->view_state[view];
}

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
    for (int i = 0; i < tui_n_views; i++) {
        if (!a->view_state[i]) continue;
        if (tui_views[i].cls && tui_views[i].cls->free) tui_views[i].cls->free(a->view_state[i]);
        free(a->view_state[i]);
        a->view_state[i] = NULL;
    }
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

int tui_app_run(tui_app *a)
{
    if (a->run_valid) return BT_OK;
    int rc = tui_run_load(a->tr, &a->run);
    if (rc) return rc;
    a->run_valid = true;
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
