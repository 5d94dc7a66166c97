/* model_run.c - run metadata, the events list and recorded backtraces.
 *
 * meta is small (one row per key); events are read up to TUI_MAX_EVENTS (a
 * degenerate 300k-step run can hold many), backtraces up to 16. Meta keys
 * are shown in a fixed, useful order first (what ran, on what, how), then
 * the rest alphabetically. */
#include "model_impl.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static const char *const meta_order[] = {
    "tool_version", "schema_version", "status", "argv", "started_at", "finished_at", "host", "cpu",
    "backend", "threads", "model_path", "model", "model_sha256", "arch", "architecture", "config",
    "hparams", "tokenizer", "sampling", "argmax_rule", "argmax", "seed", "injections", "inject", "generated",
    "taps", "request",
};

static int meta_rank(const char *k)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(meta_order); i++)
        if (!strcmp(meta_order[i], k)) return (int)i;
    return (int)BT_ARRAY_SIZE(meta_order);
}

static int cmp_kv(const void *a, const void *b)
{
    const tui_kv *x = a, *y = b;
    int rx = meta_rank(x->key), ry = meta_rank(y->key);
    if (rx != ry) return rx - ry;
    return strcmp(x->key, y->key);
}

void tui_run_free(tui_run *r)
{
    for (int i = 0; i < r->n_meta; i++) { free(r->meta[i].key); free(r->meta[i].value); }
    for (int i = 0; i < r->n_events; i++) free(r->events[i].detail);
    for (int i = 0; i < r->n_bts; i++) free(r->bts[i].frames);
    free(r->meta);
    free(r->events);
    free(r->bts);
    memset(r, 0, sizeof(*r));
}

static char *dup_col(sqlite3_stmt *s, int c)
{
    const unsigned char *t = sqlite3_column_text(s, c);
    return strdup(t ? (const char *)t : "");
}

int tui_run_load(tui_trace *tr, tui_run *r)
{
    tui_run_free(r);
    int rc = BT_OK, x, cap = 0;
    sqlite3_stmt *s = tui_q(tr, Q_META);
    while ((x = sqlite3_step(s)) == SQLITE_ROW) {
        if (r->n_meta == cap) {
            cap = cap ? cap * 2 : 32;
            tui_kv *n = realloc(r->meta, sizeof(*n) * cap);
            if (!n) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
            r->meta = n;
        }
        r->meta[r->n_meta].key = dup_col(s, 0);
        r->meta[r->n_meta].value = dup_col(s, 1);
        r->n_meta++;
    }
    if (x != SQLITE_DONE) { rc = tui_db_error(tr, "reading meta"); goto done; }
    qsort(r->meta, r->n_meta, sizeof(tui_kv), cmp_kv);

    cap = 0;
    s = tui_q(tr, Q_EVENTS);
    sqlite3_bind_int(s, 1, TUI_MAX_EVENTS + 1);
    while ((x = sqlite3_step(s)) == SQLITE_ROW) {
        if (r->n_events == TUI_MAX_EVENTS) { r->events_truncated = true; break; }
        if (r->n_events == cap) {
            cap = cap ? cap * 2 : 32;
            tui_event *n = realloc(r->events, sizeof(*n) * cap);
            if (!n) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
            r->events = n;
        }
        tui_event *e = &r->events[r->n_events++];
        memset(e, 0, sizeof(*e));
        e->id = sqlite3_column_int64(s, 0);
        e->step = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 1);
        e->pos = sqlite3_column_type(s, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 2);
        snprintf(e->kind, sizeof e->kind, "%s", sqlite3_column_text(s, 3) ? (const char *)sqlite3_column_text(s, 3) : "?");
        e->layer = sqlite3_column_type(s, 4) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 4);
        snprintf(e->op, sizeof e->op, "%s", sqlite3_column_text(s, 5) ? (const char *)sqlite3_column_text(s, 5) : "");
        snprintf(e->tensor, sizeof e->tensor, "%s", sqlite3_column_text(s, 6) ? (const char *)sqlite3_column_text(s, 6) : "");
        e->detail = dup_col(s, 7);
    }
    if (x != SQLITE_DONE && x != SQLITE_ROW) { rc = tui_db_error(tr, "reading events"); goto done; }

    cap = 0;
    s = tui_q(tr, Q_BACKTRACES);
    while ((x = sqlite3_step(s)) == SQLITE_ROW) {
        if (r->n_bts == cap) {
            cap = cap ? cap * 2 : 4;
            tui_frames *n = realloc(r->bts, sizeof(*n) * cap);
            if (!n) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
            r->bts = n;
        }
        tui_frames *f = &r->bts[r->n_bts++];
        memset(f, 0, sizeof(*f));
        f->id = sqlite3_column_int64(s, 0);
        f->event_id = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 1);
        f->step = sqlite3_column_type(s, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 2);
        snprintf(f->kind, sizeof f->kind, "%s", sqlite3_column_text(s, 3) ? (const char *)sqlite3_column_text(s, 3) : "?");
        f->frames = dup_col(s, 4);
    }
    if (x != SQLITE_DONE) { rc = tui_db_error(tr, "reading backtraces"); goto done; }
done:
    sqlite3_reset(tr->q[Q_META]);
    sqlite3_reset(tr->q[Q_EVENTS]);
    sqlite3_reset(tr->q[Q_BACKTRACES]);
    if (rc) tui_run_free(r);
    return rc;
}

const char *tui_run_meta(const tui_run *r, const char *key)
{
    for (int i = 0; i < r->n_meta; i++)
        if (!strcmp(r->meta[i].key, key)) return r->meta[i].value;
    return NULL;
}
