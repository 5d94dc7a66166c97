/* reader_browse.c - the reader's lookups for the browser (see reader.h,
 * "browsing").
 *
 * Each is an indexed lookup or a scan that stops at its answer (the comment
 * at each query names the index), so a screen costs the same on a 1 GB trace
 * as on a 1 MB one. Statements are prepared once in the reader's browse
 * slots; the speculative ones only exist when the file has spec tables (an
 * older trace simply is not speculative). */
#include "trace/reader_impl.h"
#include "base/util.h"

#include <stdint.h>
#include <string.h>

enum {
    B_MODELS, B_BOUNDS, B_BAD_RANGE, B_TAP_FROM, B_RUN_END, B_RUN_START, B_SPAN, B_SEARCH_FWD, B_SEARCH_BACK,
    B_BAD_LOGITS, B_LOGITS_AT, B_SPEC_FWD, B_SPEC_BACK, B_REJECT_FWD, B_REJECT_BACK, B_COUNT,
    B_FIRST_SPEC = B_SPEC_FWD,
};
_Static_assert(B_COUNT <= BT_TRACE_BROWSE_MAX, "browse queries exceed the reader's slots");

static const char *const b_sql[B_COUNT] = {
    [B_MODELS] = "SELECT DISTINCT model FROM tensors ORDER BY model",
    /* four min/max lookups (a pk each; tokens by rowid, stopping at the first non-draft row) */
    [B_BOUNDS] = "SELECT (SELECT min(step) FROM steps), (SELECT max(step) FROM steps),"
                 " (SELECT seq FROM tokens WHERE role != 'draft' ORDER BY seq LIMIT 1),"
                 " (SELECT seq FROM tokens WHERE role != 'draft' ORDER BY seq DESC LIMIT 1)",
    [B_BAD_RANGE] = "SELECT (SELECT min(step) FROM tap_bad), (SELECT max(step) FROM tap_bad)",
    /* tap_blobs pk range, stopping at the first blob of the model */
    [B_TAP_FROM] = "SELECT b.step FROM tap_blobs b JOIN steps s ON s.step = b.step"
                   " WHERE b.step >= ?1 AND s.model = ?2 ORDER BY b.step LIMIT 1",
    /* rowid scans bounded by the run */
    [B_RUN_END] = "SELECT seq FROM tokens WHERE seq > ?1 AND role != 'draft' AND"
                  " (token_id != ?2 OR (role = 'prompt') != ?3) ORDER BY seq LIMIT 1",
    [B_RUN_START] = "SELECT seq FROM tokens WHERE seq < ?1 AND role != 'draft' AND"
                    " (token_id != ?2 OR (role = 'prompt') != ?3) ORDER BY seq DESC LIMIT 1",
    [B_SPAN] = "SELECT count(*), min(step), max(step), min(pos) FROM tokens WHERE seq BETWEEN ?1 AND ?2"
               " AND role != 'draft'",
    /* rowid scans to the match */
    [B_SEARCH_FWD] = "SELECT seq FROM tokens WHERE seq > ?1 AND instr(piece, ?2) > 0 AND role != 'draft'"
                     " ORDER BY seq LIMIT 1",
    [B_SEARCH_BACK] = "SELECT seq FROM tokens WHERE seq < ?1 AND instr(piece, ?2) > 0 AND role != 'draft'"
                      " ORDER BY seq DESC LIMIT 1",
    /* logits pk range */
    [B_BAD_LOGITS] = "SELECT DISTINCT l.step FROM logits l JOIN steps s ON s.step = l.step"
                     " WHERE l.step BETWEEN ?1 AND ?2 AND l.nan + l.pinf + l.ninf > 0 AND s.model != 'draft'"
                     " ORDER BY l.step",
    /* logits pk; the columns of reader.c's Q_LOGITS (bt_trace_reader_read_logits) */
    [B_LOGITS_AT] = "SELECT l.step, l.pos, l.n_vocab, l.nan, l.pinf, l.ninf, l.max, l.argmax_first, l.argmax_torch,"
                    " l.argmax_triton, l.rule, l.chosen, l.entropy, l.topk_ids, l.topk_vals,"
                    " EXISTS (SELECT 1 FROM logit_rows r WHERE r.step = l.step AND r.pos = l.pos)"
                    " FROM logits l WHERE l.step = ?1 AND (?2 < 0 OR l.pos = ?2) ORDER BY l.pos DESC LIMIT 1",
    /* spec_steps pk range, at most skip + 1 rows */
    [B_SPEC_FWD] = "SELECT step FROM (SELECT step FROM spec_steps WHERE step >= ?1 ORDER BY step LIMIT ?2 + 1)"
                   " ORDER BY step DESC LIMIT 1",
    [B_SPEC_BACK] = "SELECT step FROM (SELECT step FROM spec_steps WHERE step <= ?1 ORDER BY step DESC LIMIT ?2 + 1)"
                    " ORDER BY step LIMIT 1",
    /* spec_trail pk scan to the match */
    [B_REJECT_FWD] = "SELECT step FROM spec_trail WHERE step > ?1 AND accepted = 0 AND"
                     " coalesce(reason, '') NOT IN ('after_reject', 'after_stop') ORDER BY step LIMIT 1",
    [B_REJECT_BACK] = "SELECT step FROM spec_trail WHERE step < ?1 AND accepted = 0 AND"
                      " coalesce(reason, '') NOT IN ('after_reject', 'after_stop') ORDER BY step DESC LIMIT 1",
};

static int bprep(bt_trace_reader *r, int which, sqlite3_stmt **out)
{
    return bt_trace_reader_prep(r, which, b_sql[which], out);
}

int bt_trace_browse_check(bt_trace_reader *r)
{
    int n = bt_trace_reader_spec_tables(r) ? B_COUNT : B_FIRST_SPEC;
    for (int i = 0; i < n; i++) {
        sqlite3_stmt *s;
        int rc = bprep(r, i, &s);
        if (rc) return rc;
    }
    return BT_OK;
}

/* Step s (already bound) for one row; *found says whether it gave one.
 * Any failure is the reader's error, with what naming the table. */
static int step_row(bt_trace_reader *r, sqlite3_stmt *s, const char *what, bool *found)
{
    int rc = sqlite3_step(s);
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return BT_OK;
    rc = bt_trace_reader_fail(r, rc, what);
    sqlite3_reset(s);
    return rc;
}

/* One integer answer (NULL or no row: -1). */
static int one_int64(bt_trace_reader *r, sqlite3_stmt *s, const char *what, int64_t *out)
{
    bool found;
    int rc = step_row(r, s, what, &found);
    *out = found && sqlite3_column_type(s, 0) != SQLITE_NULL ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return rc;
}

static int one_int(bt_trace_reader *r, sqlite3_stmt *s, const char *what, int *out)
{
    int64_t v;
    int rc = one_int64(r, s, what, &v);
    *out = (int)v;
    return rc;
}

int bt_trace_models(bt_trace_reader *r, char names[][16], int max, int *n)
{
    *n = 0;
    sqlite3_stmt *s;
    int rc = bprep(r, B_MODELS, &s);
    if (rc) return rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        if (*n < max) bt_copy_str(names[(*n)++], 16, bt_col_text(s, 0) ? bt_col_text(s, 0) : "target");
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? BT_OK : bt_trace_reader_fail(r, rc, "reading tensors");
}

int bt_trace_bounds(bt_trace_reader *r, int *min_step, int *max_step, int64_t *min_seq, int64_t *max_seq)
{
    *min_step = *max_step = -1;
    *min_seq = *max_seq = -1;
    sqlite3_stmt *s;
    bool found;
    int rc = bprep(r, B_BOUNDS, &s);
    if (rc || (rc = step_row(r, s, "reading steps and tokens", &found))) return rc;
    if (found) {
        *min_step = bt_col_int(s, 0);
        *max_step = bt_col_int(s, 1);
        if (sqlite3_column_type(s, 2) != SQLITE_NULL) *min_seq = sqlite3_column_int64(s, 2);
        if (sqlite3_column_type(s, 3) != SQLITE_NULL) *max_seq = sqlite3_column_int64(s, 3);
    }
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_bad_step_range(bt_trace_reader *r, int *first, int *last)
{
    *first = *last = -1;
    sqlite3_stmt *s;
    bool found;
    int rc = bprep(r, B_BAD_RANGE, &s);
    if (rc || (rc = step_row(r, s, "reading tap_bad", &found))) return rc;
    if (found) { *first = bt_col_int(s, 0); *last = bt_col_int(s, 1); }
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_tap_step_from(bt_trace_reader *r, const char *model, int from, int *step)
{
    *step = -1;
    sqlite3_stmt *s;
    int rc = bprep(r, B_TAP_FROM, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_text(s, 2, model ? model : "target", -1, SQLITE_TRANSIENT);
    return one_int(r, s, "reading tap_blobs", step);
}

int bt_trace_token_run_next(bt_trace_reader *r, int64_t seq, int32_t id, bool prompt, int dir, int64_t *next)
{
    *next = -1;
    sqlite3_stmt *s;
    int rc = bprep(r, dir > 0 ? B_RUN_END : B_RUN_START, &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, seq);
    sqlite3_bind_int(s, 2, id);
    sqlite3_bind_int(s, 3, prompt);
    return one_int64(r, s, "reading tokens", next);
}

int bt_trace_token_span_get(bt_trace_reader *r, int64_t lo, int64_t hi, bt_trace_token_span *out)
{
    memset(out, 0, sizeof(*out));
    out->step0 = out->step1 = out->pos0 = -1;
    sqlite3_stmt *s;
    bool found;
    int rc = bprep(r, B_SPAN, &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, lo);
    sqlite3_bind_int64(s, 2, hi);
    if ((rc = step_row(r, s, "reading tokens", &found))) return rc;
    if (found) {
        out->count = sqlite3_column_int64(s, 0);
        out->step0 = bt_col_int(s, 1);
        out->step1 = bt_col_int(s, 2);
        out->pos0 = bt_col_int(s, 3);
    }
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_token_search(bt_trace_reader *r, int64_t from, const char *needle, int dir, int64_t *seq)
{
    *seq = -1;
    sqlite3_stmt *s;
    int rc = bprep(r, dir >= 0 ? B_SEARCH_FWD : B_SEARCH_BACK, &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, from);
    sqlite3_bind_text(s, 2, needle, -1, SQLITE_TRANSIENT);
    return one_int64(r, s, "searching tokens", seq);
}

int bt_trace_bad_logits_each(bt_trace_reader *r, int from, int to, int (*fn)(void *user, int step), void *user)
{
    sqlite3_stmt *s;
    int rc = bprep(r, B_BAD_LOGITS, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int stop = fn(user, sqlite3_column_int(s, 0));
        if (stop) { sqlite3_reset(s); return stop; }
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? BT_OK : bt_trace_reader_fail(r, rc, "reading logits");
}

int bt_trace_logits_at(bt_trace_reader *r, int step, int pos, bt_trace_logits_row *out, bool *found)
{
    sqlite3_stmt *s;
    int rc = bprep(r, B_LOGITS_AT, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, pos < 0 ? -1 : pos);
    if ((rc = step_row(r, s, "reading logits", found))) return rc;
    if (*found) bt_trace_reader_read_logits(s, out);
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_spec_seek(bt_trace_reader *r, int from, int dir, int skip, int *step)
{
    *step = -1;
    if (!bt_trace_reader_spec_tables(r)) return BT_OK;
    sqlite3_stmt *s;
    int rc = bprep(r, dir >= 0 ? B_SPEC_FWD : B_SPEC_BACK, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, skip < 0 ? 0 : skip);
    return one_int(r, s, "reading spec_steps", step);
}

int bt_trace_spec_next_reject(bt_trace_reader *r, int step, int dir, int *out)
{
    *out = -1;
    if (!bt_trace_reader_spec_tables(r)) return BT_OK;
    sqlite3_stmt *s;
    int rc = bprep(r, dir >= 0 ? B_REJECT_FWD : B_REJECT_BACK, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    return one_int(r, s, "reading spec_trail", out);
}
