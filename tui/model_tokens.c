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
#include "util.h"

#include <stdlib.h>
#include <string.h>

static char role_char(const unsigned char *r)
{
    if (!r) return '?';
    if (!strcmp((const char *)r, "prompt")) return 'p';
    if (!strcmp((const char *)r, "gen")) return 'g';
    if (!strcmp((const char *)r, "draft")) return 'd';
    if (!strcmp((const char *)r, "bonus")) return 'b';
    return '?';
}

/* Seq where the run holding (seq, id, prompt-or-output) begins (dir -1) or
 * ends (+1). */
static int64_t run_edge(tui_trace *tr, int64_t seq, int id, char role, int dir)
{
    sqlite3_stmt *s = tui_q(tr, dir > 0 ? Q_TOK_RUN_END : Q_TOK_RUN_START);
    sqlite3_bind_int64(s, 1, seq);
    sqlite3_bind_int(s, 2, id);
    sqlite3_bind_int(s, 3, role == 'p');
    int64_t edge = dir > 0 ? tr->max_seq : tr->min_seq;
    if (sqlite3_step(s) == SQLITE_ROW) edge = sqlite3_column_int64(s, 0) - dir;
    sqlite3_reset(s);
    return edge;
}

static void count_range(tui_trace *tr, tui_cell *c)
{
    sqlite3_stmt *s = tui_q(tr, Q_TOK_COUNT_RANGE);
    sqlite3_bind_int64(s, 1, c->seq0);
    sqlite3_bind_int64(s, 2, c->seq1);
    if (sqlite3_step(s) == SQLITE_ROW) {
        c->count = sqlite3_column_int64(s, 0);
        c->step0 = sqlite3_column_int(s, 1);
        c->step1 = sqlite3_column_int(s, 2);
        c->pos0 = sqlite3_column_int(s, 3);
    }
    sqlite3_reset(s);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static bool any_in(const int *v, int n, int lo, int hi)
{
    int a = 0, b = n;                 /* first element >= lo */
    while (a < b) { int m = (a + b) / 2; if (v[m] < lo) a = m + 1; else b = m; }
    return a < n && v[a] <= hi;
}

static int grow(int **v, int *cap, int n)
{
    if (n < *cap) return BT_OK;
    int nc = *cap ? *cap * 2 : 64;
    int *nv = realloc(*v, sizeof(int) * nc);
    if (!nv) return bt_error(BT_ENOMEM, "out of memory");
    *v = nv;
    *cap = nc;
    return BT_OK;
}

static int mark_health(tui_trace *tr, tui_tokens *tk)
{
    if (!tk->n) return BT_OK;
    int lo = tk->cells[0].step0, hi = tk->cells[0].step1;
    for (int i = 0; i < tk->n; i++) {
        if (tk->cells[i].step0 < lo) lo = tk->cells[i].step0;
        if (tk->cells[i].step1 > hi) hi = tk->cells[i].step1;
    }
    int *bad = NULL, nb = 0, cb = 0, *dlo = NULL, *dhi = NULL, nd = 0, cd = 0, cd2 = 0;
    int rc = BT_OK;
    sqlite3_stmt *s = tui_q(tr, Q_LOGITS_BAD_RANGE);
    sqlite3_bind_int(s, 1, lo);
    sqlite3_bind_int(s, 2, hi);
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        if ((rc = grow(&bad, &cb, nb))) goto done;
        bad[nb++] = sqlite3_column_int(s, 0);
    }
    if (r != SQLITE_DONE) { rc = tui_db_error(tr, "reading logits"); goto done; }
    if (nb > 1) qsort(bad, nb, sizeof(int), cmp_int);
    /* A loop is reported when its 4th period completes (period <= 16), so it
     * began at most 64 tokens earlier; a wall when its 8th repeat lands. */
    s = tui_q(tr, Q_EVENTS_DEGEN);
    sqlite3_bind_int(s, 1, lo);
    sqlite3_bind_int(s, 2, hi + 64);
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        if ((rc = grow(&dlo, &cd, nd)) || (rc = grow(&dhi, &cd2, nd))) goto done;
        int st = sqlite3_column_int(s, 0);
        bool loop = !strcmp((const char *)sqlite3_column_text(s, 1), "repetition_loop");
        dlo[nd] = st - (loop ? 63 : TUI_WALL_MIN - 1);
        dhi[nd++] = st;
    }
    if (r != SQLITE_DONE) { rc = tui_db_error(tr, "reading events"); goto done; }
    for (int i = 0; i < tk->n; i++) {
        tui_cell *c = &tk->cells[i];
        c->health = TUI_H_CLEAN;
        if (c->role == 'p') continue;
        if (any_in(bad, nb, c->step0, c->step1)) { c->health = TUI_H_BAD; continue; }
        if (c->count >= TUI_WALL_MIN) { c->health = TUI_H_WARN; continue; }
        for (int k = 0; k < nd; k++)
            if (c->step1 >= dlo[k] && c->step0 <= dhi[k]) { c->health = TUI_H_WARN; break; }
    }
done:
    sqlite3_reset(tr->q[Q_LOGITS_BAD_RANGE]);
    sqlite3_reset(tr->q[Q_EVENTS_DEGEN]);
    free(bad);
    free(dlo);
    free(dhi);
    return rc;
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

    tui_tok *rows = malloc(sizeof(tui_tok) * TUI_TOK_WINDOW);
    int *rowof = malloc(sizeof(int) * TUI_TOK_WINDOW);
    size_t arena_cap = 64 * 1024, arena_len = 0;
    char *arena = malloc(arena_cap);
    int n = 0, rc = BT_OK;
    tk->cells = malloc(sizeof(tui_cell) * TUI_TOK_WINDOW);
    if (!rows || !rowof || !arena || !tk->cells) { rc = bt_error(BT_ENOMEM, "out of memory for the token window"); goto done; }
    tk->cap = TUI_TOK_WINDOW;

    /* Pieces are copied into one arena (offsets first, pointers after the
     * arena stops moving). Pieces longer than 256 bytes are cut: a cell
     * shows at most 40 columns anyway. */
    size_t *offs = malloc(sizeof(size_t) * TUI_TOK_WINDOW);
    if (!offs) { rc = bt_error(BT_ENOMEM, "out of memory for the token window"); goto done; }
    sqlite3_stmt *s = tui_q(tr, Q_TOK_WINDOW);
    sqlite3_bind_int64(s, 1, lo);
    sqlite3_bind_int(s, 2, TUI_TOK_WINDOW);
    int r;
    while (n < TUI_TOK_WINDOW && (r = sqlite3_step(s)) == SQLITE_ROW) {
        tui_tok *t = &rows[n];
        t->seq = sqlite3_column_int64(s, 0);
        t->step = sqlite3_column_int(s, 1);
        t->pos = sqlite3_column_int(s, 2);
        t->id = sqlite3_column_int(s, 3);
        t->role = role_char(sqlite3_column_text(s, 5));
        if (sqlite3_column_type(s, 4) == SQLITE_NULL) {
            t->piece_len = -1;
            offs[n] = 0;
        } else {
            const void *p = sqlite3_column_blob(s, 4);
            int len = sqlite3_column_bytes(s, 4);
            if (len > 256) len = 256;
            if (arena_len + len + 1 > arena_cap) {
                char *na = realloc(arena, arena_cap * 2);
                if (!na) { rc = bt_error(BT_ENOMEM, "out of memory for the token window"); free(offs); goto done; }
                arena = na;
                arena_cap *= 2;
            }
            if (len) memcpy(arena + arena_len, p, len);
            arena[arena_len + len] = 0;
            offs[n] = arena_len;
            t->piece_len = len;
            arena_len += len + 1;
            tui_piece_put(tr, t->id, p, len);
        }
        n++;
    }
    sqlite3_reset(s);
    if (n < TUI_TOK_WINDOW && r != SQLITE_DONE) { free(offs); rc = tui_db_error(tr, "reading tokens"); goto done; }
    for (int i = 0; i < n; i++) rows[i].piece = rows[i].piece_len < 0 ? NULL : arena + offs[i];
    free(offs);

    tk->n = tui_collapse(rows, n, TUI_RUN_MIN, tk->cells);
    for (int i = 0, c = 0; i < n && c < tk->n; i++)
        if (rows[i].seq == tk->cells[c].seq0) rowof[c++] = i;
    if (tk->n) {
        tui_cell *first = &tk->cells[0], *last = &tk->cells[tk->n - 1];
        bool ext = false;
        if (first->seq0 > tr->min_seq) {
            int64_t e = run_edge(tr, first->seq0, first->id, first->role, -1);
            if (e < first->seq0) { first->seq0 = e; ext = true; }
        }
        if (ext) count_range(tr, first);
        ext = false;
        if (last->seq1 < tr->max_seq) {
            int64_t e = run_edge(tr, last->seq1, last->id, last->role, +1);
            if (e > last->seq1) { last->seq1 = e; ext = true; }
        }
        if (ext) count_range(tr, last);
        tk->lo = first->seq0;
        tk->hi = last->seq1;
    }
    for (int c = 0; c < tk->n; c++) {
        const tui_tok *t = &rows[rowof[c]];
        tui_cell_set_text(&tk->cells[c], t->piece, t->piece_len < 0 ? 0 : t->piece_len, san_flags);
    }
    rc = mark_health(tr, tk);
done:
    free(rows);
    free(rowof);
    free(arena);
    if (rc) { free(tk->cells); tk->cells = NULL; tk->n = 0; }
    return rc;
}

int64_t tui_tokens_search(tui_trace *tr, int64_t from, const char *needle, int dir)
{
    if (!needle || !*needle || tr->max_seq < 0) return -1;
    int q = dir >= 0 ? Q_TOK_SEARCH_FWD : Q_TOK_SEARCH_BACK;
    int64_t starts[2] = { from, dir >= 0 ? tr->min_seq - 1 : tr->max_seq + 1 };
    for (int k = 0; k < 2; k++) {
        sqlite3_stmt *s = tui_q(tr, q);
        sqlite3_bind_int64(s, 1, starts[k]);
        sqlite3_bind_text(s, 2, needle, -1, SQLITE_TRANSIENT);
        int64_t hit = -1;
        if (sqlite3_step(s) == SQLITE_ROW) hit = sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
        if (hit >= 0) return hit;
    }
    return -1;
}
