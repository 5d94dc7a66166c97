/* model_tokens.c - the token trail as screen cells, one window at a time.
 *
 * A window is TUI_TOK_WINDOW rows read by seq (the rowid), collapsed into
 * cells. A run that crosses the window's edge (a 50,000-token wall of '!')
 * is followed to its real start and end with bounded rowid scans and counted,
 * so the cell says `! x50000` without the rows ever being held in memory.
 *
 * Speculative traces: the text is prompt + output, where output is the
 * gen (accepted draft) and bonus (the target's correction or bonus) tokens in
 * seq order; drafted tokens are not part of it and never reach a window. A
 * run collapses across gen and bonus rows (a wall is a wall whichever pass
 * produced each token).
 *
 * Health per cell: non-finite logits at any of its steps (one range query on
 * the logits primary key), else degenerate when it is a token wall
 * (>= TUI_WALL_MIN repeats) or falls inside a detected repetition loop /
 * token wall event, else clean. Prompt tokens are always clean: they are
 * input, not output. */
#include "model_impl.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static char role_char(const char *r)
{
    if (!r) return '?';
    if (!strcmp(r, "prompt")) return 'p';
    if (!strcmp(r, "gen")) return 'g';
    if (!strcmp(r, "draft")) return 'd';
    if (!strcmp(r, "bonus")) return 'b';
    return '?';
}

/* Seq where the run holding (seq, id, prompt-or-output) begins (dir -1) or
 * ends (+1). */
static int run_edge(tui_trace *tr, int64_t seq, int id, char role, int dir, int64_t *edge)
{
    int64_t next;
    int rc = bt_trace_token_run_next(tr->r, seq, id, role == 'p', dir, &next);
    *edge = next >= 0 ? next - dir : dir > 0 ? tr->max_seq : tr->min_seq;
    return rc;
}

static int count_range(tui_trace *tr, tui_cell *c)
{
    bt_trace_token_span sp;
    int rc = bt_trace_token_span_get(tr->r, c->seq0, c->seq1, &sp);
    if (rc || !sp.count) return rc;
    c->count = sp.count;
    c->step0 = sp.step0;
    c->step1 = sp.step1;
    c->pos0 = sp.pos0;
    return BT_OK;
}

static bool any_in(const int *v, int n, int lo, int hi)
{
    int a = 0, b = n;                 /* first element >= lo */
    while (a < b) { int m = (a + b) / 2; if (v[m] < lo) a = m + 1; else b = m; }
    return a < n && v[a] <= hi;
}

typedef struct int_list { int *v; int n, cap; } int_list;

static int int_push(int_list *l, int x) { return BT_VEC_PUSH(l->v, l->n, l->cap, x); }

static int bad_step_cb(void *user, int step) { return int_push(user, step); }

/* A loop is reported when its 4th period completes (period <= 16), so it
 * began at most 64 tokens earlier; a wall when its 8th repeat lands. */
typedef struct degen_walk { int_list lo, hi; int from, to; } degen_walk;

static int degen_cb(void *user, const bt_trace_event_row *ev)
{
    degen_walk *d = user;
    if (ev->step > d->to) return 1;          /* in step order */
    if (ev->step < d->from) return 0;
    bool loop = !strcmp(ev->kind, "repetition_loop");
    int rc = int_push(&d->lo, ev->step - (loop ? 63 : TUI_WALL_MIN - 1));
    return rc ? rc : int_push(&d->hi, ev->step);
}

static int mark_health(tui_trace *tr, tui_tokens *tk)
{
    if (!tk->n) return BT_OK;
    int lo = tk->cells[0].step0, hi = tk->cells[0].step1;
    for (int i = 0; i < tk->n; i++) {
        if (tk->cells[i].step0 < lo) lo = tk->cells[i].step0;
        if (tk->cells[i].step1 > hi) hi = tk->cells[i].step1;
    }
    int_list bad = { 0 };
    degen_walk d = { .from = lo, .to = hi + 64 };
    int rc = bt_trace_bad_logits_each(tr->r, lo, hi, bad_step_cb, &bad);
    if (rc >= 0) rc = bt_trace_events_each(tr->r, "repetition_loop", degen_cb, &d);
    if (rc >= 0) rc = bt_trace_events_each(tr->r, "token_wall", degen_cb, &d);
    if (rc < 0) goto done;
    rc = BT_OK;
    for (int i = 0; i < tk->n; i++) {
        tui_cell *c = &tk->cells[i];
        c->health = TUI_H_CLEAN;
        if (c->role == 'p') continue;
        if (any_in(bad.v, bad.n, c->step0, c->step1)) { c->health = TUI_H_BAD; continue; }
        if (c->count >= TUI_WALL_MIN) { c->health = TUI_H_WARN; continue; }
        for (int k = 0; k < d.lo.n; k++)
            if (c->step1 >= d.lo.v[k] && c->step0 <= d.hi.v[k]) { c->health = TUI_H_WARN; break; }
    }
done:
    free(bad.v);
    free(d.lo.v);
    free(d.hi.v);
    return rc;
}

/* The rows of one window: pieces are copied into one arena (offsets first,
 * pointers after the arena stops moving). Pieces longer than 256 bytes are
 * cut: a cell shows at most 40 columns anyway. */
typedef struct window {
    tui_trace *tr;
    tui_tok *rows;
    size_t *offs;
    int n;
    char *arena;
    size_t len, cap;
} window;

static int window_cb(void *user, const bt_trace_token_row *tok)
{
    window *w = user;
    if (!strcmp(tok->role, "draft")) return 0;
    tui_tok *t = &w->rows[w->n];
    t->seq = tok->seq;
    t->step = tok->step;
    t->pos = tok->pos;
    t->id = tok->id;
    t->role = role_char(tok->role);
    w->offs[w->n] = 0;
    t->piece_len = -1;
    if (tok->piece) {
        int len = tok->piece_len > 256 ? 256 : (int)tok->piece_len;
        int rc = BT_VEC_RESERVE(w->arena, w->cap, w->len + (size_t)len + 1);
        if (rc) return rc;
        if (len) memcpy(w->arena + w->len, tok->piece, len);
        w->arena[w->len + len] = 0;
        w->offs[w->n] = w->len;
        t->piece_len = len;
        w->len += len + 1;
        tui_piece_put(w->tr, t->id, tok->piece, len);
    }
    return ++w->n == TUI_TOK_WINDOW;
}

/* Follow the runs cut by the window's edges to their real ends and count
 * them. */
static int extend_edges(tui_trace *tr, tui_tokens *tk)
{
    tui_cell *first = &tk->cells[0], *last = &tk->cells[tk->n - 1];
    int64_t e;
    int rc;
    if (first->seq0 > tr->min_seq) {
        if ((rc = run_edge(tr, first->seq0, first->id, first->role, -1, &e))) return rc;
        if (e < first->seq0) { first->seq0 = e; if ((rc = count_range(tr, first))) return rc; }
    }
    if (last->seq1 < tr->max_seq) {
        if ((rc = run_edge(tr, last->seq1, last->id, last->role, +1, &e))) return rc;
        if (e > last->seq1) { last->seq1 = e; if ((rc = count_range(tr, last))) return rc; }
    }
    tk->lo = first->seq0;
    tk->hi = last->seq1;
    return BT_OK;
}

int tui_tokens_load(tui_trace *tr, int64_t seq, unsigned san_flags, tui_tokens *tk)
{
    free(tk->cells);
    memset(tk, 0, sizeof(*tk));
    tk->min_seq = tr->min_seq;
    tk->max_seq = tr->max_seq;
    if (tr->max_seq < 0) return BT_OK;
    int64_t lo = seq - TUI_TOK_WINDOW / 2;
    if (lo + TUI_TOK_WINDOW - 1 > tr->max_seq) lo = tr->max_seq - TUI_TOK_WINDOW + 1;
    if (lo < tr->min_seq) lo = tr->min_seq;

    window w = { .tr = tr, .cap = 64 * 1024 };
    w.rows = malloc(sizeof(tui_tok) * TUI_TOK_WINDOW);
    w.offs = malloc(sizeof(size_t) * TUI_TOK_WINDOW);
    w.arena = malloc(w.cap);
    int *rowof = malloc(sizeof(int) * TUI_TOK_WINDOW);
    int rc = BT_OK;
    tk->cells = malloc(sizeof(tui_cell) * TUI_TOK_WINDOW);
    if (!w.rows || !w.offs || !w.arena || !rowof || !tk->cells) { rc = bt_error(BT_ENOMEM, "out of memory for the token window"); goto done; }
    tk->cap = TUI_TOK_WINDOW;
    if ((rc = bt_trace_tokens_each(tr->r, lo, 0, window_cb, &w)) < 0) goto done;
    int n = w.n;
    for (int i = 0; i < n; i++) w.rows[i].piece = w.rows[i].piece_len < 0 ? NULL : w.arena + w.offs[i];

    tk->n = tui_collapse(w.rows, n, TUI_RUN_MIN, tk->cells);
    for (int i = 0, c = 0; i < n && c < tk->n; i++)
        if (w.rows[i].seq == tk->cells[c].seq0) rowof[c++] = i;
    if (tk->n && (rc = extend_edges(tr, tk))) goto done;
    for (int c = 0; c < tk->n; c++) {
        const tui_tok *t = &w.rows[rowof[c]];
        tui_cell_set_text(&tk->cells[c], t->piece, t->piece_len < 0 ? 0 : t->piece_len, san_flags);
    }
    rc = mark_health(tr, tk);
done:
    free(w.rows);
    free(w.offs);
    free(w.arena);
    free(rowof);
    if (rc) { free(tk->cells); tk->cells = NULL; tk->n = 0; }
    return rc < 0 ? rc : BT_OK;
}

int64_t tui_tokens_search(tui_trace *tr, int64_t from, const char *needle, int dir)
{
    if (!needle || !*needle || tr->max_seq < 0) return -1;
    int64_t starts[2] = { from, dir >= 0 ? tr->min_seq - 1 : tr->max_seq + 1 };
    for (int k = 0; k < 2; k++) {
        int64_t hit = -1;
        if (bt_trace_token_search(tr->r, starts[k], needle, dir, &hit)) return -1;
        if (hit >= 0) return hit;
    }
    return -1;
}
