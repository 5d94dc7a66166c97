/* view_cache.c - the Cache view (key 8): a batched server's request as KV
 * blocks x steps (model_cache.c), the provenance culprit above, the marked
 * blocks (another request's data, non-finite, a fault's) in colour and
 * with their text marks, and under them each followed block's requests
 * over server steps from server.db beside the trace. The lines above the
 * grid stay put; the rest scrolls. Up/Down (PgUp/PgDn, g/G) move the
 * cursor, Left/Right scroll the steps, n/p jump between marked blocks,
 * Enter opens the Step view at the step that first read the block under
 * the cursor (its first step when it only wrote it). */
#include "view.h"
#include "model_cache.h"
#include "base/util.h"

#include <string.h>

typedef struct cache_view {
    tui_cache c;
    bool loaded;
    int sel, top, col0;
} cache_view;

static int cache_ready(tui_app *a, cache_view *v, int width)
{
    if (!v->loaded) {
        int rc = tui_cache_load(a->tr, -1, &v->c);
        if (rc) return rc;
        v->loaded = true;
        v->sel = -1;
    }
    if (v->c.lines_width != width) {
        int rc = tui_cache_build_lines(&v->c, width);
        if (rc) return rc;
    }
    return BT_OK;
}

static void cache_free(void *state)
{
    cache_view *v = state;
    if (v->loaded) tui_cache_free(&v->c);
}

/* Lines above the first block row stay on screen (when they leave room). */
static int pinned(const tui_cache *c, int h)
{
    int p = 0;
    while (p < c->n_lines && c->lines[p].kind != TUI_CL_BLOCK) p++;
    if (p == c->n_lines) return 0;
    return p <= h - 3 ? p : 0;
}

static int n_grid_cols(const tui_cache *c)
{
    return c->max_step >= c->min_step && c->min_step >= 0 ? c->max_step - c->min_step + 1 : 0;
}

static int line_row(const tui_cache *c, const tui_cache_line *l)
{
    if (l->kind == TUI_CL_BLOCK) return l->ref;
    if (l->kind == TUI_CL_HOT) return c->hot[l->ref].row;
    return -1;
}

static int line_attr(tui_app *a, const tui_cache *c, const tui_cache_line *l)
{
    unsigned f = 0;
    switch (l->kind) {
    case TUI_CL_HEAD: case TUI_CL_SEC: return A_BOLD;
    case TUI_CL_NOTE: return A_DIM;
    case TUI_CL_AXIS: case TUI_CL_SAXIS: return A_DIM;
    case TUI_CL_BAD: return tui_attr_fg(a, TUI_H_BAD) | A_BOLD;
    case TUI_CL_BLOCK: f = c->blocks[l->ref].flags; break;
    case TUI_CL_HOT: f = c->blocks[c->hot[l->ref].row].flags; break;
    case TUI_CL_SREQ: {
        const tui_cache_sreq *q = &c->hot[l->ref].req[l->ref2];
        if (q->poisoner) return tui_attr_fg(a, TUI_H_BAD) | A_BOLD;
        if (q->writer) return tui_attr_fg(a, TUI_H_WARN) | A_BOLD;
        return q->self ? A_BOLD : A_NORMAL;
    }
    default: return A_NORMAL;
    }
    if (f & (TUI_CF_CULPRIT | TUI_CF_BAD | TUI_CF_FAULT))
        return tui_attr_fg(a, TUI_H_BAD) | (f & TUI_CF_CULPRIT ? A_BOLD : 0);
    if (f & TUI_CF_OTHER) return tui_attr_fg(a, TUI_H_WARN);
    return A_NORMAL;
}

static void draw_line(tui_app *a, const cache_view *v, int i, int y, const tui_rect *body, bool sel)
{
    const tui_cache_line *l = &v->c.lines[i];
    char text[4096], line[8192];
    tui_cache_render(&v->c, l, body->w, v->col0, text, sizeof text);
    tui_sanitize(text, strlen(text), line, sizeof line, 0, a->san);
    tui_put(y, body->x, body->w, line_attr(a, &v->c, l) | (sel ? A_REVERSE : 0), line);
}

void tui_cache_draw(tui_app *a, void *state, const tui_rect *body)
{
    cache_view *v = state;
    if (cache_ready(a, v, body->w) != BT_OK) {
        tui_put(body->y, body->x, body->w, A_BOLD, bt_errmsg());
        return;
    }
    const tui_cache *c = &v->c;
    int pin = pinned(c, body->h), vis = body->h - pin;
    if (v->sel < pin) v->sel = pin;
    if (v->sel >= c->n_lines) v->sel = c->n_lines - 1;
    for (int i = 0; i < pin; i++) draw_line(a, v, i, body->y + i, body, false);
    if (vis <= 0 || v->sel < 0) return;
    v->top = tui_scroll_follow(v->top < pin ? 0 : v->top - pin, v->sel - pin, vis, c->n_lines - pin) + pin;
    for (int i = 0; i < vis && v->top + i < c->n_lines; i++)
        draw_line(a, v, v->top + i, body->y + pin + i, body, v->top + i == v->sel);
}

static int next_marked(const tui_cache *c, int from, int dir)
{
    for (int i = from + dir; i >= 0 && i < c->n_lines; i += dir)
        if (c->lines[i].kind == TUI_CL_BLOCK && c->blocks[c->lines[i].ref].flags) return i;
    return -1;
}

int tui_cache_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    cache_view *v = state;
    if (cache_ready(a, v, body->w) != BT_OK) return TUI_R_NONE;
    const tui_cache *c = &v->c;
    int pin = pinned(c, body->h), page = body->h - pin > 1 ? body->h - pin - 1 : 1;
    tui_cache_layout lay;
    tui_layout_cache(body->w, n_grid_cols(c), &lay);
    int step_page = lay.grid_w / 2 > 1 ? lay.grid_w / 2 : 1, max_col0 = n_grid_cols(c) - lay.grid_w;
    if (max_col0 < 0) max_col0 = 0;
    switch (action) {
    case TUI_A_UP: v->sel--; break;
    case TUI_A_DOWN: v->sel++; break;
    case TUI_A_PGUP: v->sel -= page; break;
    case TUI_A_PGDN: v->sel += page; break;
    case TUI_A_FIRST: v->sel = pin; break;
    case TUI_A_LAST: v->sel = c->n_lines - 1; break;
    case TUI_A_LEFT: v->col0 -= step_page; break;
    case TUI_A_RIGHT: v->col0 += step_page; break;
    case TUI_A_NEXT: case TUI_A_PREV: {
        int i = next_marked(c, v->sel, action == TUI_A_NEXT ? 1 : -1);
        if (i < 0) { snprintf(a->status, sizeof a->status, "no %s marked block", action == TUI_A_NEXT ? "later" : "earlier"); return TUI_R_REDRAW; }
        v->sel = i;
        break;
    }
    case TUI_A_ENTER: {
        int row = v->sel >= 0 && v->sel < c->n_lines ? line_row(c, &c->lines[v->sel]) : -1;
        if (row < 0) { snprintf(a->status, sizeof a->status, "Enter on a block row opens the step that first read it"); return TUI_R_REDRAW; }
        const tui_cache_block *b = &c->blocks[row];
        int step = tui_cache_row_step(c, row);
        if (tui_app_step(a, step) != BT_OK) { snprintf(a->status, sizeof a->status, "%s", bt_errmsg()); return TUI_R_REDRAW; }
        char how[24];
        tui_cache_modes_text(b->first_read >= 0 ? b->read_mode : TUI_CM_W, how, sizeof how);
        snprintf(a->status, sizeof a->status, "%s %d: step %d, where this request first %s it (%s)", b->slot ? "slot" : b->snap ? "snapshot" : "block",
                 b->block, step, b->first_read >= 0 ? "read" : "wrote", how);
        tui_app_switch(a, tui_view_find("step"));
        return TUI_R_REDRAW | TUI_R_SWITCH;
    }
    default: return TUI_R_NONE;
    }
    if (v->sel < pin) v->sel = pin;
    if (v->sel >= c->n_lines) v->sel = c->n_lines - 1;
    if (v->col0 > max_col0) v->col0 = max_col0;
    if (v->col0 < 0) v->col0 = 0;
    return TUI_R_REDRAW;
}

static void cache_status(tui_app *a, void *state, char *buf, size_t cap)
{
    (void)a;
    (void)state;
    snprintf(buf, cap, "Up/Down:block Left/Right:steps n/p:marked Enter:its step ?:help q:quit");
}

const tui_view_class tui_cache_class = { .state_size = sizeof(cache_view), .free = cache_free, .status = cache_status };
