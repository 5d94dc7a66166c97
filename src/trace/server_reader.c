/* server_reader.c - read-only, validated access to DIR/server.db (see
 * server_reader.h). The checks are the trace reader's, in its order: the
 * header, a read-only open, application_id and user_version, the schema
 * objects' kinds, then only prepared queries under the guard's budget. */
#include "trace/server_reader.h"
#include "trace/server_db.h"
#include "trace/guard.h"
#include "base/records.h"
#include "base/util.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SQ_REQUEST, SQ_LAST_STEP, SQ_ACCESS, SQ_EVENTS, SQ_COUNT };

static const char *const sq_sql[SQ_COUNT] = {
    [SQ_REQUEST] = "SELECT request, lane, trace, first_step, last_step, n_prompt, hit_tokens, n_forward, finish"
                   " FROM requests WHERE request = ?1",
    [SQ_LAST_STEP] = "SELECT max(step) FROM steps",
    /* the primary key (step, request, block, mode): a range of server steps */
    [SQ_ACCESS] = "SELECT step, request, block, logical, mode, pos_lo, pos_hi FROM access"
                  " WHERE step BETWEEN ?2 AND ?3 AND block = ?1 ORDER BY step, request LIMIT ?4",
    /* the index block_events_block (block, step) */
    [SQ_EVENTS] = "SELECT id, step, block, event, request, logical, hash, detail FROM block_events"
                  " WHERE block = ?1 AND step BETWEEN ?2 AND ?3 ORDER BY step, id LIMIT ?4",
};

struct bt_server_reader {
    sqlite3 *db;
    char *path;
    sqlite3_stmt *q[SQ_COUNT];
    bt_trace_guard guard;
};

static int fail(bt_server_reader *s, int rc, const char *what)
{
    int base = rc & 0xff;
    if (base == SQLITE_INTERRUPT) return bt_trace_guard_error(&s->guard, s->path, what);
    if (base == SQLITE_CORRUPT || base == SQLITE_NOTADB || base == SQLITE_FORMAT || base == SQLITE_RANGE)
        return bt_error(BT_EFORMAT, "%s: corrupt server trace (%s: %s)", s->path, what, sqlite3_errmsg(s->db));
    if (base == SQLITE_ERROR)
        return bt_error(BT_EFORMAT, "%s: not a bangtrace server trace or damaged schema (%s: %s)", s->path, what,
                        sqlite3_errmsg(s->db));
    return bt_error(BT_EIO, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int pragma_int(bt_server_reader *s, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return fail(s, rc, sql);
    rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    int e = rc == SQLITE_ROW || rc == SQLITE_DONE ? BT_OK : fail(s, rc, sql);
    sqlite3_finalize(st);
    return e;
}

/* A prepared query (bt_server_open made them all), reset and unbound. */
static sqlite3_stmt *query(bt_server_reader *s, int which)
{
    sqlite3_reset(s->q[which]);
    sqlite3_clear_bindings(s->q[which]);
    return s->q[which];
}

static int col_int(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int(st, i);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NULL : (const char *)sqlite3_column_text(st, i);
}

int bt_server_open(const char *path, bt_server_reader **out)
{
    *out = NULL;
    int rc = bt_trace_guard_header(path, "server trace");
    if (rc) return rc;
    bt_server_reader *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) { free(s); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
    int e = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (e != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: cannot open server trace: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(e));
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, 5000);      /* a live server commits a step at a time */
    bt_trace_guard_install(s->db, &s->guard, bt_trace_guard_bytes(path));
    int64_t app = 0, ver = 0;
    if ((rc = pragma_int(s, "PRAGMA application_id", &app))) goto fail;
    if ((uint32_t)app != BT_SERVER_APPLICATION_ID) {
        rc = bt_error(BT_EFORMAT, "%s: not a bangtrace server trace (SQLite file with application_id 0x%08x, expected 0x%08x)",
                      path, (unsigned)app, (unsigned)BT_SERVER_APPLICATION_ID);
        goto fail;
    }
    if ((rc = pragma_int(s, "PRAGMA user_version", &ver))) goto fail;
    if (ver != BT_SERVER_SCHEMA_VERSION) {
        rc = ver > BT_SERVER_SCHEMA_VERSION
             ? bt_error(BT_EUNSUPPORTED, "%s: server trace schema version %lld is newer than this bangtrace reads (%d)", path,
                        (long long)ver, BT_SERVER_SCHEMA_VERSION)
             : bt_error(BT_EFORMAT, "%s: not a bangtrace server trace (schema version %lld)", path, (long long)ver);
        goto fail;
    }
    if ((rc = bt_server_guard_schema(s->db, path))) goto fail;
    /* every query compiles against this file now, not from inside a view */
    for (int i = 0; i < SQ_COUNT; i++) {
        e = sqlite3_prepare_v3(s->db, sq_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL);
        if (e != SQLITE_OK) { rc = fail(s, e, "checking the schema"); goto fail; }
    }
    *out = s;
    return BT_OK;
fail:
    bt_server_close(s);
    return rc;
}

void bt_server_close(bt_server_reader *s)
{
    if (!s) return;
    for (int i = 0; i < SQ_COUNT; i++) sqlite3_finalize(s->q[i]);
    if (s->db) sqlite3_close_v2(s->db);
    free(s->path);
    free(s);
}

int bt_server_request(bt_server_reader *s, const char *request, bt_server_request_row *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = query(s, SQ_REQUEST);
    sqlite3_bind_text(st, 1, request, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return bt_error(BT_ENOTFOUND, "%s: no request %s", s->path, request);
    if (rc != SQLITE_ROW) return fail(s, rc, "reading requests");
    snprintf(out->request, sizeof out->request, "%s", col_text(st, 0) ? col_text(st, 0) : "");
    out->lane = col_int(st, 1);
    snprintf(out->trace, sizeof out->trace, "%s", col_text(st, 2) ? col_text(st, 2) : "");
    out->first_step = col_int(st, 3);
    out->last_step = col_int(st, 4);
    out->n_prompt = col_int(st, 5);
    out->hit_tokens = col_int(st, 6);
    out->n_forward = col_int(st, 7);
    snprintf(out->finish, sizeof out->finish, "%s", col_text(st, 8) ? col_text(st, 8) : "");
    sqlite3_reset(st);
    return BT_OK;
}

int bt_server_last_step(bt_server_reader *s, int *out)
{
    sqlite3_stmt *st = query(s, SQ_LAST_STEP);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? col_int(st, 0) : -1;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? BT_OK : fail(s, rc, "reading steps");
}

static void bind_range(sqlite3_stmt *st, int block, int lo, int hi, int limit)
{
    sqlite3_bind_int(st, 1, block);
    sqlite3_bind_int(st, 2, lo);
    sqlite3_bind_int(st, 3, hi);
    sqlite3_bind_int(st, 4, limit);
}

int bt_server_block_access(bt_server_reader *s, int block, int lo, int hi, int limit,
                           int (*fn)(void *user, const bt_server_access_row *row), void *user)
{
    sqlite3_stmt *st = query(s, SQ_ACCESS);
    bind_range(st, block, lo, hi, limit);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *mode = col_text(st, 4);
        bt_server_access_row a = { .step = col_int(st, 0), .request = col_text(st, 1), .block = col_int(st, 2),
                                   .logical = col_int(st, 3), .mode = mode && mode[0] ? mode[0] : '?',
                                   .pos_lo = col_int(st, 5), .pos_hi = col_int(st, 6) };
        if (!a.request) a.request = "";
        int r2 = fn(user, &a);
        if (r2) { sqlite3_reset(st); return r2 < 0 ? r2 : BT_OK; }
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? BT_OK : fail(s, rc, "reading access");
}

int bt_server_block_events(bt_server_reader *s, int block, int lo, int hi, int limit,
                           int (*fn)(void *user, const bt_server_event_row *row), void *user)
{
    sqlite3_stmt *st = query(s, SQ_EVENTS);
    bind_range(st, block, lo, hi, limit);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        bt_server_event_row e = { .id = sqlite3_column_int64(st, 0), .step = col_int(st, 1), .block = col_int(st, 2),
                                  .event = col_text(st, 3), .request = col_text(st, 4), .logical = col_int(st, 5),
                                  .hash = col_text(st, 6), .detail = col_text(st, 7) };
        if (!e.event) e.event = "";
        int r2 = fn(user, &e);
        if (r2) { sqlite3_reset(st); return r2 < 0 ? r2 : BT_OK; }
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? BT_OK : fail(s, rc, "reading block_events");
}
