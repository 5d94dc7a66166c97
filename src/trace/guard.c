/* guard.c - schema check and statement budget for untrusted traces (see guard.h). */
#include "trace/guard.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Every name the reader, export or the documented views use, with the kind
 * it must have. Optional objects may be absent (older traces lack the spec
 * tables); when present they must still be of this kind. */
typedef struct expected_obj {
    const char *name, *type, *table;   /* table: what an index is on */
    bool required;
} expected_obj;

static const expected_obj trace_objs[] = {
    { "meta", "table", NULL, true },        { "tensors", "table", NULL, true },
    { "steps", "table", NULL, true },       { "tap_blobs", "table", NULL, true },
    { "tap_bad", "table", NULL, true },     { "tokens", "table", NULL, true },
    { "logits", "table", NULL, true },      { "logit_rows", "table", NULL, true },
    { "events", "table", NULL, true },      { "backtraces", "table", NULL, true },
    { "spec_steps", "table", NULL, false }, { "spec_trail", "table", NULL, false },
    { "kernels", "table", NULL, false },    { "op_timings", "table", NULL, false },
    { "kernels_op", "index", "kernels", false },
    { "v_kernels", "view", NULL, false },   { "v_op_timings", "view", NULL, false },
    { "moe_routes", "table", NULL, false }, { "v_moe_routes", "view", NULL, false },
    { "kv_access", "table", NULL, false },
    { "tokens_step", "index", "tokens", false }, { "logits_bad", "index", "logits", false },
    { "events_kind", "index", "events", false }, { "events_step", "index", "events", false },
    { "v_tokens", "view", NULL, false },    { "v_tap_bits", "view", NULL, false },
    { "v_tap_vals", "view", NULL, false },  { "v_taps", "view", NULL, false },
    { "v_logits", "view", NULL, false },    { "v_events", "view", NULL, false },
    { "v_first_nonfinite", "view", NULL, false }, { "v_spec_trail", "view", NULL, false },
};

/* A batched server's DIR/server.db (traces/server_schema.sql): every table
 * and the block index its reader's queries use. */
static const expected_obj server_objs[] = {
    { "meta", "table", NULL, true },        { "requests", "table", NULL, true },
    { "steps", "table", NULL, true },       { "batch", "table", NULL, true },
    { "access", "table", NULL, true },      { "block_events", "table", NULL, true },
    { "slot_events", "table", NULL, true },
    { "block_events_block", "index", "block_events", true },
    { "v_read_writer", "view", NULL, false }, { "v_cross_reads", "view", NULL, false },
    { "v_nonfinite_blocks", "view", NULL, false },
};

/* A file that holds a WAL beside it (committed pages may live there). */
static bool has_wal(const char *path)
{
    char wal[4096 + 8];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &st) == 0 && st.st_size > 0;
}

int bt_trace_guard_header(const char *path, const char *noun)
{
    struct stat st;
    if (stat(path, &st) != 0) return bt_error(BT_EIO, "%s: cannot open %s: %s", path, noun, strerror(errno));
    if (S_ISDIR(st.st_mode)) return bt_error(BT_EIO, "%s: cannot open %s: is a directory", path, noun);
    FILE *f = bt_fopen_input(path);     /* a fifo is refused, never waited on */
    if (!f) return BT_EIO;
    unsigned char h[100];
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    if (n == 0) return bt_error(BT_EFORMAT, "%s: not a bangtrace %s (empty file)", path, noun);
    if (n < sizeof h || memcmp(h, "SQLite format 3", 16) != 0)
        return bt_error(BT_EFORMAT, "%s: not a bangtrace %s (not an SQLite database)", path, noun);
    uint32_t page = (uint32_t)h[16] << 8 | h[17];
    if (page == 1) page = 65536;
    uint32_t pages = (uint32_t)h[28] << 24 | (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
    uint32_t change = (uint32_t)h[24] << 24 | (uint32_t)h[25] << 16 | (uint32_t)h[26] << 8 | h[27];
    uint32_t valid_for = (uint32_t)h[92] << 24 | (uint32_t)h[93] << 16 | (uint32_t)h[94] << 8 | h[95];
    if (page < 512 || (page & (page - 1)))
        return bt_error(BT_EFORMAT, "%s: corrupt %s (page size %u in the header)", path, noun, page);
    /* The header's page count is only trustworthy when valid_for matches,
     * and only describes the file alone when no WAL goes with it: a
     * checkpoint writes page 1 (the new count) before it extends the file.
     * Without a WAL a shorter file really is cut short. */
    if (valid_for == change && !has_wal(path) && (int64_t)pages * page > (int64_t)st.st_size)
        return bt_error(BT_EFORMAT, "%s: truncated %s (header declares %u pages of %u bytes, file holds %lld bytes)",
                        path, noun, pages, page, (long long)st.st_size);
    return BT_OK;
}

int64_t bt_trace_guard_bytes(const char *path)
{
    struct stat st;
    int64_t n = 0;
    char wal[4096 + 8];
    if (stat(path, &st) == 0) n += st.st_size;
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (stat(wal, &st) == 0) n += st.st_size;
    return n;
}

static int progress(void *user)
{
    bt_trace_guard *g = user;
    g->left -= 1000;
    if (g->left > 0) return 0;
    g->tripped = true;
    return 1;
}

/* A statement starts running: give it a fresh budget. Each statement is
 * bounded alone, so a long browse session or a long walk of many small
 * queries never runs out. */
static int on_stmt(unsigned type, void *user, void *p, void *x)
{
    (void)p; (void)x;
    if (type == SQLITE_TRACE_STMT) bt_trace_guard_reset(user);
    return 0;
}

void bt_trace_guard_install(sqlite3 *db, bt_trace_guard *g, int64_t bytes)
{
    if (bytes < 0) bytes = 0;
    /* saturate rather than overflow on absurd sizes */
    g->budget = bytes > INT64_MAX / 2 / BT_TRACE_GUARD_PER_BYTE ? INT64_MAX / 2
              : BT_TRACE_GUARD_FLOOR + bytes * BT_TRACE_GUARD_PER_BYTE;
    bt_trace_guard_reset(g);
    sqlite3_progress_handler(db, 1000, progress, g);
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, on_stmt, g);
}

int bt_trace_guard_error(const bt_trace_guard *g, const char *path, const char *what)
{
    return bt_error(BT_EFORMAT, "%s: damaged or hostile trace (%s: stopped after %lld SQLite instructions, the budget for a file this size)",
                    path, what, (long long)g->budget);
}

/* Columns of a known table: none may be generated (computed on read). */
static int check_columns(sqlite3 *db, const char *schema, const char *table, const char *path, const char *kind)
{
    sqlite3_stmt *s = NULL;
    int rc = BT_OK;
    if (sqlite3_prepare_v2(db, "SELECT name, hidden FROM pragma_table_xinfo(?1, ?2)", -1, &s, NULL) != SQLITE_OK)
        return bt_error(BT_EFORMAT, "%s: not a %s (schema of %s: %s)", path, kind, table, sqlite3_errmsg(db));
    sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, schema, -1, SQLITE_STATIC);
    int e;
    while ((e = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_int(s, 1) != 0) {
            rc = bt_error(BT_EFORMAT, "%s: not a %s (column %s.%s is generated or hidden)", path, kind, table,
                          (const char *)sqlite3_column_text(s, 0));
            break;
        }
    }
    if (!rc && e != SQLITE_DONE)
        rc = bt_error(BT_EFORMAT, "%s: not a %s (schema of %s: %s)", path, kind, table, sqlite3_errmsg(db));
    sqlite3_finalize(s);
    return rc;
}

/* noun: "trace" or "server trace", in the messages ("not a bangtrace
 * trace (...)", "corrupt server trace (...)"). */
static int check_schema(sqlite3 *db, const char *schema, const char *path, const expected_obj *expected, size_t n_expected,
                        const char *noun)
{
    bool seen[64] = { false };
    char kind[40];
    snprintf(kind, sizeof kind, "bangtrace %s", noun);
    if (n_expected > BT_ARRAY_SIZE(seen)) return bt_error(BT_EINVAL, "%s: too many schema objects to check", path);
    char *sql = sqlite3_mprintf("SELECT type, name, tbl_name, sql FROM \"%w\".sqlite_master", schema);
    sqlite3_stmt *s = NULL;
    int rc = BT_OK, e;
    if (!sql) return bt_error(BT_ENOMEM, "out of memory");
    e = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
    sqlite3_free(sql);
    if (e != SQLITE_OK) return bt_error(BT_EFORMAT, "%s: not a %s (schema: %s)", path, kind, sqlite3_errmsg(db));
    while ((e = sqlite3_step(s)) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(s, 0), *name = (const char *)sqlite3_column_text(s, 1);
        const char *tbl = (const char *)sqlite3_column_text(s, 2), *text = (const char *)sqlite3_column_text(s, 3);
        if (!type || !name) continue;
        for (size_t i = 0; i < n_expected; i++) {
            const expected_obj *x = &expected[i];
            if (sqlite3_stricmp(name, x->name)) continue;
            seen[i] = true;
            /* a virtual table is type 'table' too: only a plain CREATE TABLE will do */
            bool plain = strcmp(type, "table") || !text || !sqlite3_strnicmp(text, "CREATE TABLE", 12);
            if (strcmp(type, x->type) || !plain) {
                rc = bt_error(BT_EFORMAT, "%s: not a %s (%s is a %s%s, expected a %s)", path, kind, name,
                              plain ? "" : "virtual ", type, x->type);
                goto out;
            }
            if (x->table && (!tbl || sqlite3_stricmp(tbl, x->table))) {
                rc = bt_error(BT_EFORMAT, "%s: not a %s (index %s is on %s, expected %s)", path, kind, name,
                              tbl ? tbl : "?", x->table);
                goto out;
            }
        }
    }
    if (e != SQLITE_DONE) { rc = bt_error(BT_EFORMAT, "%s: corrupt %s (schema: %s)", path, noun, sqlite3_errmsg(db)); goto out; }
    for (size_t i = 0; i < n_expected; i++) {
        if (!seen[i] && expected[i].required) {
            rc = bt_error(BT_EFORMAT, "%s: not a %s (no %s %s)", path, kind, expected[i].name, expected[i].type);
            goto out;
        }
        if (seen[i] && !strcmp(expected[i].type, "table") && (rc = check_columns(db, schema, expected[i].name, path, kind)))
            goto out;
    }
out:
    sqlite3_finalize(s);
    return rc;
}

int bt_trace_guard_schema(sqlite3 *db, const char *schema, const char *path)
{
    return check_schema(db, schema, path, trace_objs, BT_ARRAY_SIZE(trace_objs), "trace");
}

int bt_server_guard_schema(sqlite3 *db, const char *path)
{
    return check_schema(db, "main", path, server_objs, BT_ARRAY_SIZE(server_objs), "server trace");
}
