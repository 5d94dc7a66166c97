/* canary_log.c - the SQLite log of `bangtrace canary` (see canary_log.h).
 *
 * Why a separate application_id: the outfile rule is "replace only our own
 * kind"; a canary appends to its log, so the kind must be recognisable
 * before SQLite touches the file (a trace or somebody's database passed as
 * --log must not grow a `checks` table). */
#include "prod/canary_log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SQLITE_OPEN_NOFOLLOW
#define SQLITE_OPEN_NOFOLLOW 0
#endif

struct bt_canary_log {
    char *path;
    int lock_fd;                    /* holds flock while the log is open */
    sqlite3 *db;
    sqlite3_stmt *ins;
};

static const char schema[] =
    "PRAGMA journal_mode = DELETE;"
    "CREATE TABLE IF NOT EXISTS canary_meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS checks(id INTEGER PRIMARY KEY, t REAL NOT NULL, target TEXT, prompt TEXT,"
    " class TEXT NOT NULL, ok INTEGER NOT NULL, why TEXT, http_status INTEGER, ms REAL, answer TEXT);"
    "INSERT OR IGNORE INTO canary_meta VALUES('format', 'bangtrace canary log 1');";

/* What the first 100 bytes say: 1 a canary log, 0 something else (why[] says what). */
static int sniff(const char *path, char *why, size_t cap)
{
    unsigned char h[100];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) { snprintf(why, cap, "cannot be opened (%s)", strerror(errno)); return -1; }
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    if (n < 100 || memcmp(h, "SQLite format 3", 16)) { snprintf(why, cap, "is not a canary log (not an SQLite file)"); return 0; }
    uint32_t app = (uint32_t)h[68] << 24 | (uint32_t)h[69] << 16 | (uint32_t)h[70] << 8 | h[71];
    if (app == BT_CANARY_APPLICATION_ID) return 1;
    snprintf(why, cap, "is not a canary log (an SQLite database with application_id 0x%08x%s)", app,
             app == 0x42545243u ? ", a bangtrace trace" : "");
    return 0;
}

static int db_fail(bt_canary_log *l, const char *what)
{
    return bt_error(BT_EIO, "%s: %s: %s", l->path, what, l->db ? sqlite3_errmsg(l->db) : "out of memory");
}

int bt_canary_log_open(const char *path, const bt_out_input *inputs, int n_inputs, bt_canary_log **out)
{
    *out = NULL;
    struct stat st;
    bool fresh = false;
    char why[200];
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return bt_error(BT_EIO, "--log %s: %s", path, strerror(errno));
        int rc = bt_outfile_check(path, BT_OUT_TEXT, false, inputs, n_inputs, NULL);
        if (rc) return rc;
        fresh = true;
    } else {
        if (!S_ISREG(st.st_mode))
            return bt_error(BT_EINVAL, "--log %s is not a regular file; a canary log is never written through a link or a device", path);
        for (int i = 0; i < n_inputs; i++) {
            struct stat in;
            if (inputs[i].path && strcmp(inputs[i].path, "-") && stat(inputs[i].path, &in) == 0 &&
                in.st_dev == st.st_dev && in.st_ino == st.st_ino)
                return bt_error(BT_EINVAL, "--log %s is the same file as %s %s", path, inputs[i].flag, inputs[i].path);
        }
        int k = sniff(path, why, sizeof why);
        if (k <= 0) return bt_error(k < 0 ? BT_EIO : BT_EINVAL, "--log %s %s; give a new path or an existing canary log", path, why);
    }
    bt_canary_log *l = calloc(1, sizeof *l);
    if (!l) return bt_error(BT_ENOMEM, "out of memory");
    l->lock_fd = -1;
    int rc = BT_OK;
    if (!(l->path = strdup(path))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    l->lock_fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_CREAT | O_EXCL : 0), 0600);
    if (l->lock_fd < 0) { rc = bt_error(BT_EIO, "--log %s: %s", path, strerror(errno)); goto fail; }
    if ((rc = bt_outfile_lock(l->lock_fd, path))) goto fail;
    if (sqlite3_open_v2(path, &l->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
        rc = db_fail(l, "open");
        goto fail;
    }
    sqlite3_busy_timeout(l->db, 5000);
    char sql[160];
    snprintf(sql, sizeof sql, "PRAGMA application_id = %d;", BT_CANARY_APPLICATION_ID);
    if (sqlite3_exec(l->db, sql, NULL, NULL, NULL) != SQLITE_OK || sqlite3_exec(l->db, schema, NULL, NULL, NULL) != SQLITE_OK) {
        rc = db_fail(l, "cannot set up the log");
        goto fail;
    }
    if (sqlite3_prepare_v2(l->db, "INSERT INTO checks(t, target, prompt, class, ok, why, http_status, ms, answer)"
                           " VALUES(?,?,?,?,?,?,?,?,?)", -1, &l->ins, NULL) != SQLITE_OK) {
        rc = db_fail(l, "not a canary log of this version");
        goto fail;
    }
    *out = l;
    return BT_OK;
fail:
    if (fresh && l->lock_fd >= 0) unlink(path);   /* ours, just created: leave nothing half-made */
    bt_canary_log_close(l);
    return rc;
}

int bt_canary_log_append(bt_canary_log *l, const bt_canary_check *c)
{
    sqlite3_stmt *s = l->ins;
    size_t alen = c->answer ? strlen(c->answer) : 0;
    sqlite3_bind_double(s, 1, c->t);
    sqlite3_bind_text(s, 2, c->target ? c->target : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, c->prompt ? c->prompt : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 4, c->cls, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 5, !strcmp(c->cls, "ok"));
    sqlite3_bind_text(s, 6, c->why ? c->why : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 7, c->http_status);
    sqlite3_bind_double(s, 8, c->ms);
    sqlite3_bind_blob(s, 9, c->answer ? c->answer : "", (int)(alen > 4096 ? 4096 : alen), SQLITE_TRANSIENT);
    int r = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return r == SQLITE_DONE ? BT_OK : db_fail(l, "cannot append a check");
}

int bt_canary_log_close(bt_canary_log *l)
{
    if (!l) return BT_OK;
    int rc = BT_OK;
    sqlite3_finalize(l->ins);
    if (l->db && sqlite3_close(l->db) != SQLITE_OK) rc = bt_error(BT_EIO, "%s: close failed", l->path);
    if (l->lock_fd >= 0) close(l->lock_fd);
    free(l->path);
    free(l);
    return rc;
}

int bt_canary_log_summary(const char *path, bt_canary_summary *out)
{
    memset(out, 0, sizeof *out);
    char why[200];
    struct stat st;
    if (lstat(path, &st) != 0) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return bt_error(BT_EFORMAT, "%s is not a canary log (not a regular file)", path);
    int k = sniff(path, why, sizeof why);
    if (k <= 0) return bt_error(k < 0 ? BT_EIO : BT_EFORMAT, "%s %s", path, why);
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int rc = BT_OK;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        goto done;
    }
#define Q(sql) do { sqlite3_finalize(s); s = NULL; \
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) { \
            rc = bt_error(BT_EFORMAT, "%s: not a readable canary log (%s)", path, sqlite3_errmsg(db)); goto done; } } while (0)
    Q("SELECT count(*), coalesce(sum(ok = 0), 0), coalesce(min(t), 0), coalesce(max(t), 0), count(DISTINCT target),"
      " (SELECT substr(target, 1, 255) FROM checks ORDER BY id LIMIT 1) FROM checks");
    if (sqlite3_step(s) == SQLITE_ROW) {
        out->checks = sqlite3_column_int64(s, 0);
        out->failures = sqlite3_column_int64(s, 1);
        out->first_t = sqlite3_column_double(s, 2);
        out->last_t = sqlite3_column_double(s, 3);
        out->n_targets = sqlite3_column_int(s, 4);
        const unsigned char *tg = sqlite3_column_text(s, 5);
        snprintf(out->target, sizeof out->target, "%s", tg ? (const char *)tg : "");
    }
    Q("SELECT coalesce(min(t), 0), coalesce(max(t), 0) FROM checks WHERE ok = 0");
    if (sqlite3_step(s) == SQLITE_ROW) {
        out->first_fail_t = sqlite3_column_double(s, 0);
        out->last_fail_t = sqlite3_column_double(s, 1);
    }
    Q("SELECT substr(class, 1, 31), count(*) FROM checks WHERE ok = 0 GROUP BY class ORDER BY 2 DESC, 1 LIMIT 32");
    while (sqlite3_step(s) == SQLITE_ROW && out->n_classes < BT_CANARY_MAX_CLASSES) {
        const unsigned char *c = sqlite3_column_text(s, 0);
        snprintf(out->cls[out->n_classes], sizeof out->cls[0], "%s", c ? (const char *)c : "");
        out->cls_count[out->n_classes++] = sqlite3_column_int64(s, 1);
    }
    Q("SELECT ok FROM checks ORDER BY id");
    long run = 0;
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        run = sqlite3_column_int(s, 0) ? 0 : run + 1;
        if (run > out->longest_streak) out->longest_streak = run;
    }
    if (r != SQLITE_DONE) rc = bt_error(BT_EFORMAT, "%s: %s", path, sqlite3_errmsg(db));
#undef Q
done:
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rc;
}
