/* guard.h - reading an untrusted trace safely (internal to src/trace and
 * `bangtrace export`; the only trace header that exposes sqlite3).
 *
 * A trace is a file someone hands us: its schema is data, not code. Two
 * defences, used by every connection that reads one (the reader, the
 * integrity check, export's attached source):
 *
 * - bt_trace_guard_schema() checks that every object the reader or export
 *   touches is of the expected kind before any query runs: the known tables
 *   are ordinary tables (not views, not virtual tables, no generated
 *   columns), the known indexes index the right table, the v_* names are
 *   views. Unknown extra objects (triggers, views, tables) are ignored:
 *   nothing of ours reads them and a read-only connection never fires a
 *   trigger. A recursive `steps` view thus fails at open with one line
 *   instead of hanging every command.
 * - bt_trace_guard_install() bounds every statement with a progress
 *   handler: an instruction budget proportional to the file's size (plus a
 *   floor), reset whenever a statement starts running (a statement trace hook), so
 *   each statement is bounded alone. A query
 *   the planner turns quadratic on a hostile file stops with
 *   SQLITE_INTERRUPT, which bt_trace_guard_error() turns into one line.
 *
 * Neither ever executes SQL text read from the file. */
#ifndef BT_TRACE_GUARD_H
#define BT_TRACE_GUARD_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/* traces/schema.sql, embedded at build time (src/trace/schema.c): the only
 * schema text export executes. */
extern const char bt_trace_schema_sql[];

typedef struct bt_trace_guard {
    int64_t budget;      /* VM instructions one statement may run */
    int64_t left;
    bool tripped;        /* the handler interrupted a statement */
} bt_trace_guard;

/* Instructions allowed per byte of trace (file + WAL) and the floor; a
 * legitimate query is linear in the file and far below this. */
#define BT_TRACE_GUARD_PER_BYTE 200
#define BT_TRACE_GUARD_FLOOR 50000000LL

/* Before SQLite opens PATH: it exists, is no directory or fifo, starts with
 * the SQLite magic, and (without a WAL beside it) is not shorter than its
 * header says. noun names the kind in the messages ("trace": "%s: not a
 * bangtrace trace (empty file)", "truncated trace (...)"; "server trace").
 * BT_OK, BT_EIO or BT_EFORMAT. */
int bt_trace_guard_header(const char *path, const char *noun);
/* Size of PATH plus PATH-wal in bytes (0 when absent). */
int64_t bt_trace_guard_bytes(const char *path);
/* Arm the handler on db for a trace of `bytes` bytes. g must outlive db. */
void bt_trace_guard_install(sqlite3 *db, bt_trace_guard *g, int64_t bytes);
/* A fresh budget (the hook does this at every statement start). */
static inline void bt_trace_guard_reset(bt_trace_guard *g) { g->left = g->budget; g->tripped = false; }
/* Check the schema of database `schema` ("main" or an attached name of
 * ours) of db; BT_OK or BT_EFORMAT naming path and the offending object. */
int bt_trace_guard_schema(sqlite3 *db, const char *schema, const char *path);
/* The same check for a batched server's DIR/server.db
 * (traces/server_schema.sql): its tables, the block_events index, the
 * v_* views; messages say "not a bangtrace server trace". */
int bt_server_guard_schema(sqlite3 *db, const char *path);
/* The one-line BT_EFORMAT for an interrupted statement. */
int bt_trace_guard_error(const bt_trace_guard *g, const char *path, const char *what);

#endif
