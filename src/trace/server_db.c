/* server_db.c - DIR/server.db, the batched server's trace (see server_db.h). */
#include "trace/server_db.h"
#include "base/records.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern const char bt_server_schema_sql[];

enum { S_META, S_STEP, S_BATCH, S_ACCESS, S_EVENT, S_REQUEST, S_SLOT, S_COUNT };
static const char *const stmt_sql[S_COUNT] = {
    [S_META] = "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
    [S_STEP] = "INSERT OR REPLACE INTO steps(step, t, n_seqs, n_rows, ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    [S_BATCH] = "INSERT OR REPLACE INTO batch(step, request, lane, row0, pos0, n_tokens, req_step) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [S_ACCESS] = "INSERT OR REPLACE INTO access(step, request, block, logical, mode, pos_lo, pos_hi) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [S_EVENT] = "INSERT INTO block_events(step, block, event, request, logical, hash, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [S_REQUEST] = "INSERT OR REPLACE INTO requests(request, lane, trace, first_step, last_step, n_prompt, hit_tokens, n_forward, "
                  "finish) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [S_SLOT] = "INSERT INTO slot_events(step, slot, event, request, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
};

struct bt_server_db {
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT];
    pthread_mutex_t lock;
    char *path;
    int failed;
};

static int fail(bt_server_db *d, const char *what)
{
    d->failed = 1;
    return bt_error(BT_EIO, "%s: %s: %s", d->path, what, d->db ? sqlite3_errmsg(d->db) : "not open");
}

static int exec_(bt_server_db *d, const char *sql)
{
    return sqlite3_exec(d->db, sql, NULL, NULL, NULL) == SQLITE_OK ? BT_OK : fail(d, "writing");
}

static void text_or_null(sqlite3_stmt *s, int i, const char *v)
{
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(s, i);
}

static void int_or_null(sqlite3_stmt *s, int i, int v)
{
    if (v >= 0) sqlite3_bind_int(s, i, v);
    else sqlite3_bind_null(s, i);
}

static int run(bt_server_db *d, int k)
{
    int rc = sqlite3_step(d->st[k]);
    sqlite3_reset(d->st[k]);
    sqlite3_clear_bindings(d->st[k]);
    return rc == SQLITE_DONE ? BT_OK : fail(d, "writing");
}

#define ENTER(d) do { if (!(d)) return BT_OK; pthread_mutex_lock(&(d)->lock); \
        if ((d)->failed) { pthread_mutex_unlock(&(d)->lock); return BT_EIO; } } while (0)
#define LEAVE(d, rc) do { pthread_mutex_unlock(&(d)->lock); return (rc); } while (0)

int bt_server_db_create(const char *path, bt_server_db **out)
{
    *out = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return bt_error(BT_EINVAL, "%s exists (an earlier server's trace?): it is never replaced; move it away or use "
                            "another --trace-dir", path);
        return bt_error(BT_EIO, "%s: cannot create: %s", path, strerror(errno));
    }
    close(fd);
    bt_server_db *d = calloc(1, sizeof *d);
    if (!d || !(d->path = strdup(path))) { free(d); unlink(path); return bt_error(BT_ENOMEM, "out of memory"); }
    pthread_mutex_init(&d->lock, NULL);
    int rc = BT_OK;
    if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
        rc = fail(d, "cannot open");
        goto bad;
    }
    sqlite3_busy_timeout(d->db, 5000);
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas, "PRAGMA application_id = %d; PRAGMA user_version = %d; PRAGMA journal_mode = WAL;"
             " PRAGMA synchronous = NORMAL;", BT_SERVER_APPLICATION_ID, BT_SERVER_SCHEMA_VERSION);
    if ((rc = exec_(d, pragmas)) || (rc = exec_(d, "BEGIN")) || (rc = exec_(d, bt_server_schema_sql))) goto bad;
    for (int i = 0; i < S_COUNT; i++)
        if (sqlite3_prepare_v3(d->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &d->st[i], NULL) != SQLITE_OK) {
            rc = fail(d, "preparing statements");
            goto bad;
        }
    char started[32];
    time_t now = time(NULL);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    sqlite3_bind_text(d->st[S_META], 1, "started_at", -1, SQLITE_STATIC);
    sqlite3_bind_text(d->st[S_META], 2, started, -1, SQLITE_TRANSIENT);
    if ((rc = run(d, S_META))) goto bad;
    sqlite3_bind_text(d->st[S_META], 1, "status", -1, SQLITE_STATIC);
    sqlite3_bind_text(d->st[S_META], 2, "running", -1, SQLITE_STATIC);
    if ((rc = run(d, S_META)) || (rc = exec_(d, "COMMIT"))) goto bad;
    d->failed = 0;
    *out = d;
    return BT_OK;
bad:
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(d->st[i]);
    sqlite3_close(d->db);
    unlink(path);
    pthread_mutex_destroy(&d->lock);
    free(d->path);
    free(d);
    return rc;
}

bool bt_server_db_failed(const bt_server_db *d) { return d && d->failed; }

int bt_server_db_meta(bt_server_db *d, const char *key, const char *value)
{
    ENTER(d);
    sqlite3_bind_text(d->st[S_META], 1, key, -1, SQLITE_TRANSIENT);
    text_or_null(d->st[S_META], 2, value);
    LEAVE(d, run(d, S_META));
}

int bt_server_db_begin(bt_server_db *d)
{
    ENTER(d);
    LEAVE(d, exec_(d, "BEGIN"));
}

int bt_server_db_commit(bt_server_db *d)
{
    ENTER(d);
    LEAVE(d, exec_(d, "COMMIT"));
}

int bt_server_db_step(bt_server_db *d, int step, double t, int n_seqs, int n_rows, double ms)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_STEP];
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_double(s, 2, t);
    sqlite3_bind_int(s, 3, n_seqs);
    sqlite3_bind_int(s, 4, n_rows);
    sqlite3_bind_double(s, 5, ms);
    LEAVE(d, run(d, S_STEP));
}

int bt_server_db_batch(bt_server_db *d, int step, const char *request, int lane, int row0, int pos0, int n_tokens,
                       int req_step)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_BATCH];
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_text(s, 2, request, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 3, lane);
    sqlite3_bind_int(s, 4, row0);
    sqlite3_bind_int(s, 5, pos0);
    sqlite3_bind_int(s, 6, n_tokens);
    sqlite3_bind_int(s, 7, req_step);
    LEAVE(d, run(d, S_BATCH));
}

int bt_server_db_access(bt_server_db *d, int step, const char *request, int block, int logical, char mode, int pos_lo,
                        int pos_hi)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_ACCESS];
    char m[2] = { mode, 0 };
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_text(s, 2, request, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 3, block);
    sqlite3_bind_int(s, 4, logical);
    sqlite3_bind_text(s, 5, m, 1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 6, pos_lo);
    sqlite3_bind_int(s, 7, pos_hi);
    LEAVE(d, run(d, S_ACCESS));
}

int bt_server_db_block_event(bt_server_db *d, int step, int block, const char *event, const char *request, int logical,
                             const char *hash, const char *detail)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_EVENT];
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, block);
    sqlite3_bind_text(s, 3, event, -1, SQLITE_TRANSIENT);
    text_or_null(s, 4, request);
    int_or_null(s, 5, logical);
    text_or_null(s, 6, hash);
    text_or_null(s, 7, detail);
    LEAVE(d, run(d, S_EVENT));
}

int bt_server_db_slot_event(bt_server_db *d, int step, int slot, const char *event, const char *request, const char *detail)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_SLOT];
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, slot);
    sqlite3_bind_text(s, 3, event, -1, SQLITE_TRANSIENT);
    text_or_null(s, 4, request);
    text_or_null(s, 5, detail);
    LEAVE(d, run(d, S_SLOT));
}

int bt_server_db_request(bt_server_db *d, const char *request, int lane, const char *trace, int first_step, int last_step,
                         int n_prompt, int hit_tokens, int n_forward, const char *finish)
{
    ENTER(d);
    sqlite3_stmt *s = d->st[S_REQUEST];
    sqlite3_bind_text(s, 1, request, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, lane);
    text_or_null(s, 3, trace);
    int_or_null(s, 4, first_step);
    int_or_null(s, 5, last_step);
    sqlite3_bind_int(s, 6, n_prompt);
    sqlite3_bind_int(s, 7, hit_tokens);
    sqlite3_bind_int(s, 8, n_forward);
    text_or_null(s, 9, finish);
    LEAVE(d, run(d, S_REQUEST));
}

int bt_server_db_close(bt_server_db *d, const char *status)
{
    if (!d) return BT_OK;
    pthread_mutex_lock(&d->lock);
    int rc = BT_OK;
    if (!d->failed) {
        char fin[32];
        time_t now = time(NULL);
        strftime(fin, sizeof fin, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        sqlite3_bind_text(d->st[S_META], 1, "finished_at", -1, SQLITE_STATIC);
        sqlite3_bind_text(d->st[S_META], 2, fin, -1, SQLITE_TRANSIENT);
        rc = run(d, S_META);
        sqlite3_bind_text(d->st[S_META], 1, "status", -1, SQLITE_STATIC);
        sqlite3_bind_text(d->st[S_META], 2, status ? status : "ok", -1, SQLITE_TRANSIENT);
        if (!rc) rc = run(d, S_META);
    }
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(d->st[i]);
    if (!d->failed) {
        sqlite3_exec(d->db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;", NULL, NULL, NULL);
    }
    if (sqlite3_close(d->db) != SQLITE_OK && !rc) rc = bt_error(BT_EIO, "%s: cannot close", d->path);
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_destroy(&d->lock);
    free(d->path);
    free(d);
    return rc;
}
