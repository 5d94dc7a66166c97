/* test_guard.c - reading untrusted traces (src/trace/guard.h): the
 * statement budget stops a query that would never end, with one BT_EFORMAT
 * line; each statement gets a fresh budget, so many small ones never run
 * out; the schema check refuses known names of the wrong kind (a view or
 * virtual table for a table, an index on another table, a generated
 * column) and ignores unknown extras. */
#include "trace/guard.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int failures;
#define CHECK(c) do { if (!(c)) { failures++; fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #c); } } while (0)

static const char *const base_schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE tensors(model, idx, name, layer, op, width);"
    "CREATE TABLE tap_blobs(step, stats); CREATE TABLE tap_bad(step);"
    "CREATE TABLE tokens(seq, step); CREATE TABLE logits(step); CREATE TABLE logit_rows(step);"
    "CREATE TABLE events(id, step); CREATE TABLE backtraces(id);";

static sqlite3 *make_db(const char *steps_sql, const char *extra)
{
    sqlite3 *db = NULL;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return NULL;
    sqlite3_exec(db, base_schema, NULL, NULL, NULL);
    if (sqlite3_exec(db, steps_sql, NULL, NULL, NULL) != SQLITE_OK) fprintf(stderr, "setup: %s\n", sqlite3_errmsg(db));
    if (extra && sqlite3_exec(db, extra, NULL, NULL, NULL) != SQLITE_OK) fprintf(stderr, "setup: %s\n", sqlite3_errmsg(db));
    return db;
}

static void test_budget(void)
{
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
    bt_trace_guard g;
    bt_trace_guard_install(db, &g, 1000);
    CHECK(g.budget == BT_TRACE_GUARD_FLOOR + 1000 * BT_TRACE_GUARD_PER_BYTE);
    sqlite3_stmt *s = NULL;
    CHECK(sqlite3_prepare_v2(db, "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c",
                             -1, &s, NULL) == SQLITE_OK);
    /* the query never ends by itself: returning SQLITE_INTERRUPT is the
     * guard working (no wall-clock assertion: tests never time things) */
    int e = sqlite3_step(s);
    CHECK(e == SQLITE_INTERRUPT);
    CHECK(g.tripped);
    sqlite3_finalize(s);
    CHECK(bt_trace_guard_error(&g, "x.db", "reading steps") == BT_EFORMAT);
    CHECK(strstr(bt_errmsg(), "x.db") && !strchr(bt_errmsg(), '\n'));
    /* a fresh budget per statement: many small ones all finish */
    for (int i = 0; i < 2000; i++) {
        CHECK(sqlite3_prepare_v2(db, "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)"
                                 " SELECT max(x) FROM c", -1, &s, NULL) == SQLITE_OK);
        e = sqlite3_step(s);
        sqlite3_finalize(s);
        if (e != SQLITE_ROW) { CHECK(e == SQLITE_ROW); break; }
    }
    /* saturates instead of overflowing */
    bt_trace_guard_install(db, &g, INT64_MAX / 4);
    CHECK(g.budget > 0);
    sqlite3_close(db);
}

static void expect_schema(const char *steps_sql, const char *extra, int want, const char *msg)
{
    sqlite3 *db = make_db(steps_sql, extra);
    CHECK(db != NULL);
    int rc = bt_trace_guard_schema(db, "main", "t.db");
    if (rc != want) fprintf(stderr, "schema %s / %s: got %d (%s), want %d\n", steps_sql, extra ? extra : "", rc,
                            rc ? bt_errmsg() : "", want);
    CHECK(rc == want);
    if (rc && msg) CHECK(strstr(bt_errmsg(), msg) != NULL);
    sqlite3_close(db);
}

int main(void)
{
    test_budget();
    const char *table = "CREATE TABLE steps(step INTEGER PRIMARY KEY, model, kind, pos0, n_pos, ms)";
    expect_schema(table, NULL, BT_OK, NULL);
    expect_schema(table, "CREATE TRIGGER tr AFTER INSERT ON events BEGIN DELETE FROM steps; END;"
                         "CREATE VIEW v_mine AS SELECT 1; CREATE TABLE mine(x)", BT_OK, NULL);
    expect_schema("CREATE VIEW steps AS WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c) SELECT x AS step FROM c",
                  NULL, BT_EFORMAT, "steps is a view, expected a table");
    expect_schema(table, "CREATE TABLE v_taps(x)", BT_EFORMAT, "v_taps is a table, expected a view");
    expect_schema(table, "CREATE INDEX tokens_step ON events(step)", BT_EFORMAT, "index tokens_step is on events");
    expect_schema("CREATE TABLE steps(step INTEGER PRIMARY KEY, model, kind, pos0, n_pos, ms AS (step * 2))", NULL,
                  BT_EFORMAT, "steps.ms is generated");
    expect_schema("CREATE TABLE other(x)", NULL, BT_EFORMAT, "no steps table");
    if (failures) { fprintf(stderr, "%d check(s) failed\n", failures); return 1; }
    printf("test_guard: ok\n");
    return 0;
}
