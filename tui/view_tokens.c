/* view_tokens.c - the Tokens view: the token trail as a flow of cells,
 * coloured by health, runs collapsed (`! x412`), one selected. In a
 * speculative trace the text is the output (accepted drafts and the target's
 * bonus/correction tokens, the latter underlined); drafts live in the
 * Speculation view.
 *
 * The first body line says where the window is; the flow fills the rest.
 * Moving off either end of the loaded window reloads the window around the
 * target seq (tui_app_goto_seq), so scrolling through 300,000 tokens never
 * holds more than TUI_TOK_WINDOW rows. */
#include "view.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct flow {
    int *line, *col, n_lines, n;
} flow;

/* The view's own state: where the flow is scrolled to. */
typedef struct tokens_view {
    int top;                    /* first visible line */
    int page;                   /* body lines of the last draw */
} tokens_view;

static void flow_free(flow *f) { free(f->line); free(f->col); memset(f, 0, sizeof(*f)); }

/* Marker columns: without colour each cell starts with its health marker. */
static int marker_w(const tui_app *a) { return a->color ? 0 : 1; }

static bool flow_make(tui_app *a, int width, flow *f)
{
    memset(f, 0, sizeof(*f));
    f->n = a->tk.n;
    if (!f->n) return true;
    int *w = malloc(sizeof(int) * f->n);
    f->line = malloc(sizeof(int) * f->n);
    f->col = malloc(sizeof(int) * f->n);
    if (!w || !f->line || !f->col) { free(w); flow_free(f); return false; }
    for (int i = 0; i < f->n; i++) w[i] = a->tk.cells[i].width + marker_w(a);
    f->n_lines = tui_flow_layout(w, f->n, width, f->line, f->col);
    free(w);
    return true;
}

void tui_tokens_draw(tui_app *a, void *state, const tui_rect *body)
{
    tokens_view *v = state;
    tui_tokens *tk = &a->tk;
    if (tk->max_seq < 0) { tui_put(body->y, body->x, body->w, A_NORMAL, "no tokens in this trace"); return; }
    flow f;
    if (!flow_make(a, body->w, &f)) { tui_put(body->y, body->x, body->w, A_BOLD, "out of memory"); return; }
    int cur = tui_tokens_find(tk, a->tok_seq);
    int vis = body->h - 1;
    v->page = vis > 1 ? vis : 1;
    v->top = tui_scroll_follow(v->top, f.n ? f.line[cur] : 0, vis, f.n_lines);
    bool spec = tui_trace_is_spec(a->tr);
    tui_putf(body->y, body->x, body->w, A_BOLD, "Tokens %lld..%lld of %lld..%lld   %s%s",
             (long long)tk->lo, (long long)tk->hi, (long long)tk->min_seq, (long long)tk->max_seq,
             a->color ? "red: non-finite logits  yellow: degenerate  green: clean"
                      : "! non-finite logits  ~ degenerate  . clean",
             spec ? "  | speculative: underlined = bonus/correction (target), drafts in view 6" : "");
    for (int i = 0; i < f.n; i++) {
        int ln = f.line[i] - v->top;
        if (ln < 0) continue;
        if (ln >= vis) break;
        const tui_cell *c = &tk->cells[i];
        int y = body->y + 1 + ln, x = body->x + f.col[i];
        int attr = c->role == 'p' ? (a->color ? COLOR_PAIR(TUI_P_DIM) : A_DIM) : tui_attr_fg(a, c->health);
        if (i == cur) attr |= A_REVERSE;
        if (c->role == 'b') attr |= A_UNDERLINE;      /* the target's own token, not an accepted draft */
        int w = body->w - f.col[i];
        if (!a->color) {
            char m[2] = { tui_health_marker(c->health), 0 };
            tui_put(y, x, 1, attr, m);
            x++, w--;
        }
        tui_put(y, x, w, attr, c->text);
    }
    flow_free(&f);
}

/* Move to the cell one line up/down; off the window's edge, continue in a
 * reloaded window. */
static int move_vertical(tui_app *a, const tui_rect *body, int dir)
{
    tui_tokens *tk = &a->tk;
    flow f;
    if (!tk->n || !flow_make(a, body->w, &f)) return TUI_R_NONE;
    int cur = tui_tokens_find(tk, a->tok_seq);
    int to = tui_flow_vertical(f.line, f.col, f.n, cur, dir);
    flow_free(&f);
    if (to >= 0) { a->tok_seq = tk->cells[to].seq0; return TUI_R_REDRAW; }
    if (dir < 0 && tk->lo > tk->min_seq) tui_app_goto_seq(a, tk->lo - 1);
    else if (dir > 0 && tk->hi < tk->max_seq) tui_app_goto_seq(a, tk->hi + 1);
    else if (dir < 0) a->tok_seq = tk->cells[0].seq0;
    else a->tok_seq = tk->cells[tk->n - 1].seq0;
    return TUI_R_REDRAW;
}

static int move_cell(tui_app *a, int delta)
{
    tui_tokens *tk = &a->tk;
    if (!tk->n) return TUI_R_NONE;
    int cur = tui_tokens_find(tk, a->tok_seq) + delta;
    if (cur < 0) { if (tk->lo > tk->min_seq) tui_app_goto_seq(a, tk->lo - 1); return TUI_R_REDRAW; }
    if (cur >= tk->n) { if (tk->hi < tk->max_seq) tui_app_goto_seq(a, tk->hi + 1); return TUI_R_REDRAW; }
    return tui_app_goto_seq(a, tk->cells[cur].seq0) == BT_OK ? TUI_R_REDRAW : TUI_R_REDRAW;
}

static int search(tui_app *a, int dir)
{
    if (!a->search[0]) { snprintf(a->status, sizeof a->status, "no search yet: press / to search token text"); return TUI_R_REDRAW; }
    const tui_cell *c = a->tk.n ? &a->tk.cells[tui_tokens_find(&a->tk, a->tok_seq)] : NULL;
    int64_t from = c ? (dir > 0 ? c->seq1 : c->seq0) : -1;
    int64_t hit = tui_tokens_search(a->tr, from, a->search, dir);
    if (hit < 0) { snprintf(a->status, sizeof a->status, "'%.100s' not found in token text", a->search); return TUI_R_REDRAW; }
    tui_app_goto_seq(a, hit);
    snprintf(a->status, sizeof a->status, "'%.100s' at seq %lld", a->search, (long long)hit);
    return TUI_R_REDRAW;
}

int tui_tokens_handle(tui_app *a, void *state, int action, const tui_rect *body)
{
    const tokens_view *v = state;
    tui_tokens *tk = &a->tk;
    switch (action) {
    case TUI_A_LEFT: return move_cell(a, -1);
    case TUI_A_RIGHT: return move_cell(a, +1);
    case TUI_A_UP: return move_vertical(a, body, -1);
    case TUI_A_DOWN: return move_vertical(a, body, +1);
    case TUI_A_PGUP:
    case TUI_A_PGDN:
        for (int i = 0; i < (v->page > 1 ? v->page - 1 : 1); i++)
            move_vertical(a, body, action == TUI_A_PGUP ? -1 : +1);
        return TUI_R_REDRAW;
    case TUI_A_FIRST: tui_app_goto_seq(a, tk->min_seq); return TUI_R_REDRAW;
    case TUI_A_LAST: tui_app_goto_seq(a, tk->max_seq); return TUI_R_REDRAW;
    case TUI_A_NEXT: return search(a, +1);
    case TUI_A_PREV: return search(a, -1);
    case TUI_A_ENTER: {
        if (!tk->n) return TUI_R_NONE;
        const tui_cell *c = &tk->cells[tui_tokens_find(tk, a->tok_seq)];
        if (tui_app_step(a, c->step0) != BT_OK) {
            snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
            return TUI_R_REDRAW;
        }
        /* a verify step produced several tokens, each from its own target
         * row: show the row that produced this one (the row before its pos) */
        if (!strcmp(a->st.kind, "verify") && c->role != 'p' && tui_step_logits_at(a->tr, &a->st, c->pos0 - 1) == BT_OK)
            snprintf(a->status, sizeof a->status, "step %d: the logit row (pos %d) that produced this %s token", c->step0,
                     c->pos0 - 1, c->role == 'b' ? "bonus" : "accepted draft");
        tui_app_switch(a, tui_view_find("step"));
        return TUI_R_REDRAW | TUI_R_SWITCH;
    }
    default: return TUI_R_NONE;
    }
}

static void tokens_status(tui_app *a, void *state, char *buf, size_t cap)
{
    (void)state;
    if (!a->tk.n) {
        snprintf(buf, cap, "Tab/1-%d:views w:walk-back Enter:open ?:help q:quit", tui_n_views);
        return;
    }
    const tui_cell *c = &a->tk.cells[tui_tokens_find(&a->tk, a->tok_seq)];
    char steps[48] = "";
    if (c->count > 1) snprintf(steps, sizeof steps, " x%lld (steps %d..%d)", (long long)c->count, c->step0, c->step1);
    snprintf(buf, cap, "seq %lld step %d pos %d id %d %s %s%s  Enter:step w:walk-back /:search ?:help q:quit",
             (long long)c->seq0, c->step0, c->pos0, c->id,
             c->role == 'p' ? "prompt" : c->role == 'b' ? "bonus" : "gen",
             c->health == TUI_H_BAD ? "NON-FINITE" : c->health == TUI_H_WARN ? "degenerate" : "clean", steps);
}

const tui_view_class tui_tokens_class = { .state_size = sizeof(tokens_view), .status = tokens_status };
