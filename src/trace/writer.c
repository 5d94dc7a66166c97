/* writer.c - the trace writer: one SQLite file per replayed request.
 *
 * Invariants:
 * - WAL journal, synchronous=NORMAL: a commit costs no fsync, yet survives
 *   kill -9 (the WAL is in the page cache; only power loss can lose it).
 * - Steps are committed in groups: a step's rows go into the open step
 *   transaction, and step_end commits it once BT_TRACE_COMMIT_MS (or what
 *   bt_trace_commit_every set) has passed since the last commit; close,
 *   bt_trace_flush, a batch and the fatal-signal path commit whatever is
 *   open. A commit per step wrote the same 16 KiB leaf pages into the WAL
 *   every step (a quarter of a millisecond, 3-6% of a small model's decode
 *   step); grouped, a fast decode commits every dozen steps. A file left by
 *   kill -9 holds every step up to the last committed one: at most the
 *   steps of the last BT_TRACE_COMMIT_MS of stepping are lost. Writes
 *   outside a step join the open group, or autocommit when none is open,
 *   unless between batch_begin and batch_end (the recorder's tensor
 *   registration: one commit, not one per tensor).
 * - Tap statistics are buffered per tensor slot during a step and packed at
 *   step_end into one tap_blobs row (bf16 min/max/mean/rms per slot; 0x7fc0
 *   = no value). Tensors with a non-finite value also get a tap_bad row with
 *   full precision, written as they arrive (inside the step's transaction).
 * - Page size 16 KiB: a step blob of a 30-layer model is ~3.1 KB, and with
 *   4 KiB pages SQLite would store one blob per page (4 KB/step); 16 KiB
 *   pages hold five (3.3 KB/step), which is what keeps 1,000 steps < 4 MB.
 * - The file is created exclusively (O_EXCL | O_NOFOLLOW, mode 0600: a trace
 *   holds the prompt). An existing path is replaced only when it is a
 *   regular file that is a bangtrace trace, no process is writing it, and
 *   the caller passed BT_TRACE_FORCE (sys/outfile.h has the rules).
 * - The writer holds flock(LOCK_EX) on the file from creation to close, so
 *   a second writer, or a --force replace, is refused while a run is live,
 *   and readers can tell a live run from one that died (bt_outfile_locked).
 *   flock rather than SQLite's own locks: SQLite's are POSIX fcntl locks,
 *   which a process loses when it closes any descriptor of the file and
 *   which an exclusive locking_mode would also take from readers (a browser
 *   watching the run). flock locks are per open file description and
 *   independent of SQLite's fcntl locks on Linux.
 * - Every close (normal, error, interrupt, crash) checkpoints the WAL into
 *   the main file and leaves WAL mode, so a closed trace is one
 *   self-contained file with its final meta.status. Only a kill -9, or a
 *   crash inside SQLite, or a disk too full to checkpoint, leaves a -wal.
 * - A full disk must still let the writer say so: at creation it holds a
 *   small unnamed reserve (O_TMPFILE, fallocate'd, in the trace's
 *   directory; gone with the process, even after kill -9). After the first
 *   failed write it gives the reserve back and records status io_error and
 *   the failure (meta write_error) in one transaction, so the trace says
 *   "the disk filled" rather than "still running, killed?".
 * - in_sqlite is set around every sqlite3 call sequence, so the fatal-signal
 *   path (bt_trace_crash_close) knows whether SQLite's state is consistent
 *   enough to commit, and leaves it alone otherwise.
 * Single-threaded: one thread drives a writer. */
#define _GNU_SOURCE 1   /* O_TMPFILE */
#include "trace/trace.h"
#include "trace/reader.h"
#include "sys/outfile.h"
#include "sys/backtrace.h"
#include "base/util.h"
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

extern const char bt_trace_schema_sql[];   /* generated from traces/schema.sql */

#define MAX_MODELS 4
#define PAGE_SIZE 16384

enum {
    ST_META, ST_TENSOR, ST_STEP, ST_BLOB, ST_BAD, ST_LOGITS, ST_ROW, ST_TOKEN, ST_FINISH,
    ST_EVENT, ST_BT, ST_SPEC_STEP, ST_SPEC_TRAIL, ST_BEGIN, ST_COMMIT, ST_KERNEL, ST_TIMING, ST_ROUTE, ST_KVA, ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_META] = "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)",
    [ST_TENSOR] = "INSERT OR REPLACE INTO tensors(model, idx, name, layer, op, width) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_STEP] = "INSERT OR REPLACE INTO steps(step, model, kind, pos0, n_pos, ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_BLOB] = "INSERT OR REPLACE INTO tap_blobs(step, stats) VALUES (?1, ?2)",
    [ST_BAD] = "INSERT OR REPLACE INTO tap_bad(step, model, idx, nan, pinf, ninf, first_bad_index, first_bad_pos,"
               " min, max, mean, rms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [ST_LOGITS] = "INSERT OR REPLACE INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch,"
                  " argmax_triton, rule, chosen, entropy, topk_ids, topk_vals)"
                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [ST_ROW] = "INSERT OR REPLACE INTO logit_rows(step, pos, reason, dtype, encoding, n, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_TOKEN] = "INSERT INTO tokens(step, pos, token_id, piece, role, logprob, finish_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_FINISH] = "UPDATE tokens SET finish_reason = ?1 WHERE seq = (SELECT max(seq) FROM tokens WHERE role <> 'prompt')",
    [ST_EVENT] = "INSERT INTO events(step, pos, kind, layer, op, tensor, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_BT] = "INSERT INTO backtraces(event_id, step, kind, frames) VALUES (?1, ?2, ?3, ?4)",
    [ST_SPEC_STEP] = "INSERT OR REPLACE INTO spec_steps(step, drafter, k, accepted, bonus_token, bonus_kind) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_SPEC_TRAIL] = "INSERT OR REPLACE INTO spec_trail(step, draft_idx, draft_pos, draft_step, draft_token, draft_prob,"
                      " draft_finite, target_token, target_prob, accepted, reason)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [ST_BEGIN] = "BEGIN",
    [ST_COMMIT] = "COMMIT",
    [ST_KERNEL] = "INSERT INTO kernels(step, layer, op, kind, name, grid, block, registers, shared_bytes, bytes,"
                  " start_ns, end_ns, stream, device) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    [ST_TIMING] = "INSERT OR REPLACE INTO op_timings(step, model, idx, start_ns, dur_ns) VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_ROUTE] = "INSERT OR REPLACE INTO moe_routes(step, model, pos, layer, rank, expert, weight) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_KVA] = "INSERT OR REPLACE INTO kv_access(step, server_step, block, logical, mode, pos_lo, pos_hi, writer, writer_step,"
               " bad_step, bad_by, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
};

struct bt_trace {
    sqlite3 *db;
    char *path;
    int lock_fd;                       /* holds flock(LOCK_EX) while we write; -1 none */
    int reserve_fd;                    /* the disk-full reserve (see the top); -1 none */
    char fail_msg[256];                /* the first failed write, for meta write_error */
    bool failed;                       /* an SQLite write failed (disk full, I/O error) */
    sqlite3_stmt *st[ST_COUNT];
    volatile sig_atomic_t in_sqlite;   /* inside an sqlite3 call sequence */
    volatile sig_atomic_t crash_closed;
    bool in_step;
    bool in_batch;              /* between bt_trace_batch_begin and _end: one open transaction */
    bool group_open;                   /* the step transaction is open (steps since the last commit) */
    int64_t commit_every_ns;           /* step_end commits when this much has passed since the last */
    int64_t last_commit_ns;            /* CLOCK_MONOTONIC of the last step commit */
    int last_committed;                /* the last step committed; -1 none */
    /* the open step */
    int step, pos0, n_pos;
    char model[16], kind[16];
    int slots;                         /* tensor slots of the step's model */
    uint8_t *blob;                     /* slots * 8 bytes */
    int blob_cap;
    /* registered models and their slot counts */
    struct { char name[16]; int slots; } models[MAX_MODELS];
    int n_models;
    /* scratch for logit rows */
    void *raw, *z;
    size_t raw_cap, z_cap;
};

/* A fatal signal that arrives while the writer is inside SQLite runs the
 * crash hook, which calls back into the writer: SQLite's state is then
 * unknown, so every entry point refuses (without formatting a message: this
 * is signal-handler context). After bt_trace_crash_close, too. */
#define REENTRY_GUARD(t) do { if ((t)->in_sqlite || (t)->crash_closed) return BT_EINTERNAL; } while (0)

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void note_failure(bt_trace *t, const char *msg)
{
    t->failed = true;
    if (!t->fail_msg[0]) snprintf(t->fail_msg, sizeof t->fail_msg, "%s", msg);
}

static int sql_fail(bt_trace *t, const char *what)
{
    int e = sqlite3_system_errno(t->db);
    char msg[sizeof t->fail_msg];
    if (e) snprintf(msg, sizeof msg, "%s: %s (%s)", what, sqlite3_errmsg(t->db), strerror(e));
    else snprintf(msg, sizeof msg, "%s: %s", what, sqlite3_errmsg(t->db));
    note_failure(t, msg);
    return bt_error(BT_EIO, "%s: %s", t->path, msg);
}

/* The disk-full reserve: best effort (no O_TMPFILE, no fallocate, a
 * file-size limit: none, and a full disk then may leave status running). */
#define RESERVE_BYTES (512 << 10)
static int reserve_open(const char *path)
{
#ifdef O_TMPFILE
    char dir[4096];
    bt_dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (posix_fallocate(fd, 0, RESERVE_BYTES) != 0) { close(fd); return -1; }
    return fd;
#else
    (void)path;
    return -1;
#endif
}

/* Run one prepared statement to completion and reset it. */
static int run_stmt(bt_trace *t, int which, const char *what)
{
    sqlite3_stmt *s = t->st[which];
    int rc = sqlite3_step(s);
    /* the message and errno first: reset may overwrite them */
    int r = rc != SQLITE_DONE && rc != SQLITE_ROW ? sql_fail(t, what) : BT_OK;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return r;
}

static int exec(bt_trace *t, const char *sql)
{
    char *err = NULL;
    t->in_sqlite = 1;
    int rc = sqlite3_exec(t->db, sql, NULL, NULL, &err);
    t->in_sqlite = 0;
    if (rc != SQLITE_OK) {
        char msg[sizeof t->fail_msg];
        snprintf(msg, sizeof msg, "%.60s: %s", sql, err ? err : sqlite3_errstr(rc));
        note_failure(t, msg);
        int r = bt_error(BT_EIO, "%s: %s: %s", t->path, sql, err ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        return r;
    }
    return BT_OK;
}

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
    if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
    else sqlite3_bind_null(s, i);
}

static void bind_real_or_null(sqlite3_stmt *s, int i, double v)
{
    if (isfinite(v)) sqlite3_bind_double(s, i, v);
    else sqlite3_bind_null(s, i);
}

static void bind_int_or_null(sqlite3_stmt *s, int i, int64_t v)
{
    if (v >= 0) sqlite3_bind_int64(s, i, v);
    else sqlite3_bind_null(s, i);
}

static void iso_now(char buf[32])
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int meta_put(bt_trace *t, const char *key, const char *value)
{
    t->in_sqlite = 1;
    sqlite3_bind_text(t->st[ST_META], 1, key, -1, SQLITE_STATIC);
    bind_text_or_null(t->st[ST_META], 2, value);
    int rc = run_stmt(t, ST_META, "writing meta");
    t->in_sqlite = 0;
    return rc;
}

static void unlink_companions(const char *path)
{
    size_t n = strlen(path);
    char *p = malloc(n + sizeof "-journal");
    if (!p) return;
    memcpy(p, path, n);
    strcpy(p + n, "-wal"); unlink(p);
    strcpy(p + n, "-shm"); unlink(p);
    strcpy(p + n, "-journal"); unlink(p);
    free(p);
}

static void free_trace(bt_trace *t)
{
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(t->st[i]);
    if (t->db) sqlite3_close_v2(t->db);
    if (t->reserve_fd >= 0) close(t->reserve_fd);
    if (t->lock_fd >= 0) close(t->lock_fd);   /* last: the lock outlives SQLite's descriptors */
    free(t->blob);
    free(t->raw);
    free(t->z);
    free(t->path);
    free(t);
}

/* Replace the idle bangtrace trace at path (the caller passed --force):
 * checked through its own descriptor (not followed if a link, regular, our
 * header, no live writer), then unlinked with its companions while we hold
 * its lock, so a writer starting meanwhile cannot lose its file to us. */
static int remove_old_trace(const char *path)
{
    int rc = bt_outfile_check(path, BT_OUT_TRACE, true, NULL, 0, NULL);
    if (rc) return rc;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    unsigned char hdr[100];
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, hdr, sizeof hdr) : -1;
    if (n < 0 || !bt_outfile_is_trace_header(hdr, (long)n)) {
        close(fd);
        return bt_error(BT_EINVAL, "%s: changed while being checked: not replacing it", path);
    }
    if ((rc = bt_outfile_lock(fd, path))) {
        close(fd);
        return rc;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        int e = errno;
        close(fd);
        return bt_error(BT_EIO, "%s: cannot replace: %s", path, strerror(e));
    }
    unlink_companions(path);
    close(fd);
    return BT_OK;
}

int bt_trace_create(const char *path, bt_trace **out)
{
    return bt_trace_create_opts(path, 0, out);
}

int bt_trace_create_opts(const char *path, unsigned flags, bt_trace **out)
{
    *out = NULL;
    bt_trace *t = calloc(1, sizeof(*t));
    if (!t || !(t->path = strdup(path))) { free(t); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
    t->lock_fd = -1;
    t->reserve_fd = -1;
    t->commit_every_ns = (int64_t)BT_TRACE_COMMIT_MS * 1000000;
    t->last_commit_ns = INT64_MIN / 2;   /* the first step commits at its end: a watcher sees it at once */
    t->last_committed = -1;
    int rc;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        if (!(flags & BT_TRACE_FORCE)) {
            /* the check names why (a device, a link, not a trace, live, or just "use --force") */
            rc = bt_outfile_check(path, BT_OUT_TRACE, false, NULL, 0, NULL);
            if (!rc) rc = bt_error(BT_EINVAL, "%s: exists: use --force to replace it", path);
            free_trace(t);
            return rc;
        }
        if ((rc = remove_old_trace(path))) { free_trace(t); return rc; }
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST) {
            free_trace(t);
            return bt_error(BT_EINVAL, "%s: another process created it while it was being replaced", path);
        }
    }
    if (fd < 0) {
        int e = errno;
        free_trace(t);
        return bt_error(BT_EIO, "%s: cannot create trace: %s", path, strerror(e));
    }
    t->lock_fd = fd;
    /* Nobody else can hold it yet except a process that opened the new,
     * empty file in the instant since; refuse rather than share. */
    if ((rc = bt_outfile_lock(fd, path))) { free_trace(t); return rc; }
    /* Stale companions of a trace deleted by hand would be replayed into
     * ours; ours cannot have any yet. */
    unlink_companions(path);
    rc = sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        int r = bt_error(BT_EIO, "%s: cannot create trace: %s", path, t->db ? sqlite3_errmsg(t->db) : sqlite3_errstr(rc));
        unlink(path);
        free_trace(t);
        return r;
    }
    sqlite3_extended_result_codes(t->db, 1);
    t->reserve_fd = reserve_open(path);
    /* Someone may open the new file while it is still in rollback mode (a
     * watcher polling for steps, `sqlite3 trace.db`): their shared lock
     * must delay switching to WAL, not fail the run with "database is
     * locked". Later, WAL readers never block the writer. */
    sqlite3_busy_timeout(t->db, 5000);
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA page_size = %d; PRAGMA application_id = %d; PRAGMA user_version = %d;"
             " PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
             PAGE_SIZE, BT_TRACE_APPLICATION_ID, BT_TRACE_SCHEMA_VERSION);
    char started[32], version[16];
    iso_now(started);
    snprintf(version, sizeof version, "%d", BT_TRACE_SCHEMA_VERSION);
    if ((rc = exec(t, pragmas)) || (rc = exec(t, "BEGIN")) || (rc = exec(t, bt_trace_schema_sql)))
        goto fail;
    for (int i = 0; i < ST_COUNT; i++)
        if (sqlite3_prepare_v3(t->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &t->st[i], NULL) != SQLITE_OK) {
            rc = sql_fail(t, "preparing statements");
            goto fail;
        }
    if ((rc = meta_put(t, "tool_version", PACKAGE_VERSION)) || (rc = meta_put(t, "schema_version", version)) ||
        (rc = meta_put(t, "started_at", started)) || (rc = meta_put(t, "status", "running")) ||
        (rc = meta_put(t, "backtraces", bt_backtrace_provider() ? bt_backtrace_provider() : "unavailable")) ||
        (rc = exec(t, "COMMIT")))
        goto fail;
    *out = t;
    return BT_OK;
fail:
    unlink(path);          /* ours: created above and still locked */
    unlink_companions(path);
    free_trace(t);
    return rc;
}

int bt_trace_meta(bt_trace *t, const char *key, const char *value)
{
    REENTRY_GUARD(t);
    return meta_put(t, key, value);
}

static int model_slot(bt_trace *t, const char *model, bool add)
{
    for (int i = 0; i < t->n_models; i++)
        if (!strcmp(t->models[i].name, model)) return i;
    if (!add || t->n_models == MAX_MODELS || strlen(model) >= sizeof t->models[0].name) return -1;
    snprintf(t->models[t->n_models].name, sizeof t->models[0].name, "%s", model);
    t->models[t->n_models].slots = 0;
    return t->n_models++;
}

int bt_trace_tensor(bt_trace *t, const char *model, int idx, const char *name, int layer, const char *op, int width)
{
    REENTRY_GUARD(t);
    if (!model) model = "target";
    int m = model_slot(t, model, true);
    if (m < 0) return bt_error(BT_EINVAL, "%s: tensor %s: bad model name '%s'", t->path, name, model);
    if (idx < 0 || idx > 1 << 20) return bt_error(BT_ERANGE, "%s: tensor %s: slot %d out of range", t->path, name, idx);
    if (t->in_step) return bt_error(BT_EINVAL, "%s: tensor %s registered inside step %d", t->path, name, t->step);
    sqlite3_stmt *s = t->st[ST_TENSOR];
    t->in_sqlite = 1;
    sqlite3_bind_text(s, 1, model, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, idx);
    sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
    bind_int_or_null(s, 4, layer);
    sqlite3_bind_text(s, 5, op ? op : name, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 6, width);
    int rc = run_stmt(t, ST_TENSOR, "writing tensors");
    t->in_sqlite = 0;
    if (!rc && idx + 1 > t->models[m].slots) t->models[m].slots = idx + 1;
    return rc;
}

static int commit_group(bt_trace *t);

int bt_trace_batch_begin(bt_trace *t)
{
    REENTRY_GUARD(t);
    if (t->in_step || t->in_batch) return bt_error(BT_EINVAL, "%s: a batch of rows inside a step or another batch", t->path);
    t->in_sqlite = 1;
    int rc = commit_group(t);
    if (!rc) rc = run_stmt(t, ST_BEGIN, "beginning a batch of rows");
    t->in_sqlite = 0;
    if (!rc) t->in_batch = true;
    return rc;
}

int bt_trace_batch_end(bt_trace *t, bool ok)
{
    REENTRY_GUARD(t);
    if (!t->in_batch) return bt_error(BT_EINVAL, "%s: batch_end without batch_begin", t->path);
    t->in_batch = false;
    t->in_sqlite = 1;
    int rc = ok ? run_stmt(t, ST_COMMIT, "committing a batch of rows") : BT_OK;
    if (!ok || rc) sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_step_begin(bt_trace *t, int step, const char *model, const char *kind, int pos0, int n_pos)
{
    REENTRY_GUARD(t);
    if (t->in_step) return bt_error(BT_EINVAL, "%s: step %d begun while step %d is open", t->path, step, t->step);
    if (t->in_batch) return bt_error(BT_EINVAL, "%s: step %d begun inside a batch of rows", t->path, step);
    if (!model) model = "target";
    if (strlen(model) >= sizeof t->model || !kind || strlen(kind) >= sizeof t->kind)
        return bt_error(BT_EINVAL, "%s: step %d: bad model or kind", t->path, step);
    int m = model_slot(t, model, false);
    int slots = m < 0 ? 0 : t->models[m].slots;
    if (slots * 8 > t->blob_cap) {
        uint8_t *b = realloc(t->blob, (size_t)slots * 8);
        if (!b) return bt_error(BT_ENOMEM, "%s: out of memory for step %d", t->path, step);
        t->blob = b;
        t->blob_cap = slots * 8;
    }
    /* 0x7fc0 little-endian in every stat: "no value" until the tap arrives. */
    for (int i = 0; i < slots * 4; i++) { t->blob[2 * i] = 0xc0; t->blob[2 * i + 1] = 0x7f; }
    /* in_step before BEGIN: a crash in between then still records the step
     * (its rows autocommit) instead of leaving a transaction nobody ends. */
    t->step = step;
    t->pos0 = pos0;
    t->n_pos = n_pos;
    t->slots = slots;
    snprintf(t->model, sizeof t->model, "%s", model);
    snprintf(t->kind, sizeof t->kind, "%s", kind);
    t->in_step = true;
    t->in_sqlite = 1;
    int rc = t->group_open ? BT_OK : run_stmt(t, ST_BEGIN, "beginning a step");
    t->in_sqlite = 0;
    if (rc) t->in_step = false;
    else t->group_open = true;
    return rc;
}

static void put_bf16(uint8_t *p, float v)
{
    uint16_t b = bt_f32_to_bf16(v);
    p[0] = (uint8_t)(b & 0xff);
    p[1] = (uint8_t)(b >> 8);
}

int bt_trace_tap(bt_trace *t, int idx, const bt_tap_stats *s)
{
    REENTRY_GUARD(t);
    if (!t->in_step) return bt_error(BT_EINVAL, "%s: tap of slot %d outside a step", t->path, idx);
    if (idx < 0 || idx >= t->slots)
        return bt_error(BT_ERANGE, "%s: step %d: tap slot %d is not a registered tensor of model %s (%d slots)",
                        t->path, t->step, idx, t->model, t->slots);
    uint8_t *p = t->blob + (size_t)idx * 8;
    put_bf16(p, s->min);
    put_bf16(p + 2, s->max);
    put_bf16(p + 4, s->mean);
    put_bf16(p + 6, s->rms);
    if (!bt_stats_bad(s)) return BT_OK;
    sqlite3_stmt *st = t->st[ST_BAD];
    t->in_sqlite = 1;
    sqlite3_bind_int(st, 1, t->step);
    sqlite3_bind_text(st, 2, t->model, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, idx);
    sqlite3_bind_int64(st, 4, s->nan);
    sqlite3_bind_int64(st, 5, s->pinf);
    sqlite3_bind_int64(st, 6, s->ninf);
    sqlite3_bind_int(st, 7, s->first_bad_index);
    sqlite3_bind_int(st, 8, s->first_bad_pos);
    bind_real_or_null(st, 9, s->min);
    bind_real_or_null(st, 10, s->max);
    bind_real_or_null(st, 11, s->mean);
    bind_real_or_null(st, 12, s->rms);
    int rc = run_stmt(t, ST_BAD, "writing tap_bad");
    t->in_sqlite = 0;
    return rc;
}

/* JSON array of ids or of floats (shortest form that round-trips a float). */
static void json_ids(char *buf, size_t cap, const int32_t *v, int k)
{
    size_t o = 0;
    buf[o++] = '[';
    for (int i = 0; i < k && o + 16 < cap; i++)
        o += snprintf(buf + o, cap - o, "%s%d", i ? "," : "", v[i]);
    snprintf(buf + o, cap - o, "]");
}

static void json_vals(char *buf, size_t cap, const float *v, int k)
{
    size_t o = 0;
    buf[o++] = '[';
    for (int i = 0; i < k && o + 24 < cap; i++) {
        char num[24];
        /* 6 significant digits (5e-7 relative) are plenty for a snapshot
         * and keep 1,000 SmolLM2 steps well under the 4 MB budget; the
         * exact row is in logit_rows where it matters. */
        snprintf(num, sizeof num, "%.6g", v[i]);
        if (!isfinite(v[i])) strcpy(num, "null");
        o += snprintf(buf + o, cap - o, "%s%s", i ? "," : "", num);
    }
    snprintf(buf + o, cap - o, "]");
}

int bt_trace_logits(bt_trace *t, int pos, const bt_logit_summary *s, const char *rule, int32_t chosen)
{
    REENTRY_GUARD(t);
    if (!t->in_step) return bt_error(BT_EINVAL, "%s: logits outside a step", t->path);
    int k = s->k < 0 ? 0 : s->k > 64 ? 64 : s->k;
    char ids[64 * 12 + 4], vals[64 * 26 + 4];
    json_ids(ids, sizeof ids, s->topk_ids, k);
    json_vals(vals, sizeof vals, s->topk_vals, k);
    sqlite3_stmt *st = t->st[ST_LOGITS];
    t->in_sqlite = 1;
    sqlite3_bind_int(st, 1, t->step);
    sqlite3_bind_int(st, 2, pos);
    sqlite3_bind_int(st, 3, s->n_vocab);
    sqlite3_bind_int64(st, 4, s->nan);
    sqlite3_bind_int64(st, 5, s->pinf);
    sqlite3_bind_int64(st, 6, s->ninf);
    bind_real_or_null(st, 7, s->max);
    sqlite3_bind_int(st, 8, s->argmax_first);
    sqlite3_bind_int(st, 9, s->argmax_torch);
    sqlite3_bind_int(st, 10, s->argmax_triton);
    bind_text_or_null(st, 11, rule);
    sqlite3_bind_int(st, 12, chosen);
    bind_real_or_null(st, 13, s->entropy);
    sqlite3_bind_text(st, 14, ids, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 15, vals, -1, SQLITE_STATIC);
    int rc = run_stmt(t, ST_LOGITS, "writing logits");
    t->in_sqlite = 0;
    return rc;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (*cap >= need) return BT_OK;
    void *q = realloc(*p, need);
    if (!q) return BT_ENOMEM;
    *p = q;
    *cap = need;
    return BT_OK;
}

int bt_trace_logit_row(bt_trace *t, int step, int pos, const float *row, int n, const char *reason, bool f32)
{
    REENTRY_GUARD(t);
    if (n <= 0 || !row) return bt_error(BT_EINVAL, "%s: step %d: empty logit row", t->path, step);
    size_t raw_n = (size_t)n * (f32 ? 4 : 2);
    if (grow(&t->raw, &t->raw_cap, raw_n) || grow(&t->z, &t->z_cap, ZSTD_compressBound(raw_n)))
        return bt_error(BT_ENOMEM, "%s: out of memory for the logit row of step %d", t->path, step);
    uint8_t *raw = t->raw;
    for (int i = 0; i < n; i++) {
        if (f32) {
            uint32_t u;
            memcpy(&u, &row[i], 4);
            for (int b = 0; b < 4; b++) raw[4 * i + b] = (uint8_t)(u >> (8 * b));
        } else {
            uint16_t h = bt_f32_to_f16(row[i]);
            raw[2 * i] = (uint8_t)(h & 0xff);
            raw[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
    size_t zn = ZSTD_compress(t->z, t->z_cap, raw, raw_n, 3);
    if (ZSTD_isError(zn))
        return bt_error(BT_EINTERNAL, "%s: step %d: zstd: %s", t->path, step, ZSTD_getErrorName(zn));
    sqlite3_stmt *st = t->st[ST_ROW];
    t->in_sqlite = 1;
    sqlite3_bind_int(st, 1, step);
    sqlite3_bind_int(st, 2, pos);
    sqlite3_bind_text(st, 3, reason ? reason : "full", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, f32 ? "f32" : "f16", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, "zstd", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, n);
    sqlite3_bind_blob(st, 7, t->z, (int)zn, SQLITE_STATIC);
    int rc = run_stmt(t, ST_ROW, "writing a logit row");
    t->in_sqlite = 0;
    return rc;
}

/* Insert the step row and its blob (the caller holds in_sqlite). */
static int write_step_rows(bt_trace *t, double ms)
{
    sqlite3_stmt *s = t->st[ST_STEP];
    sqlite3_bind_int(s, 1, t->step);
    sqlite3_bind_text(s, 2, t->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, t->kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 4, t->pos0);
    sqlite3_bind_int(s, 5, t->n_pos);
    bind_real_or_null(s, 6, ms);
    int rc = run_stmt(t, ST_STEP, "writing steps");
    if (rc || t->slots == 0) return rc;
    s = t->st[ST_BLOB];
    sqlite3_bind_int(s, 1, t->step);
    sqlite3_bind_blob(s, 2, t->blob, t->slots * 8, SQLITE_STATIC);
    return run_stmt(t, ST_BLOB, "writing tap_blobs");
}

/* Commit the open step group (in_sqlite set by the caller). A failed
 * commit rolls the group back: the steps since the last commit are lost,
 * and the failure is recorded for close (meta write_error). */
static int commit_group(bt_trace *t)
{
    if (!t->group_open) return BT_OK;
    t->group_open = false;
    int rc = run_stmt(t, ST_COMMIT, "committing steps");
    if (rc) { sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL); return rc; }
    t->last_commit_ns = mono_ns();
    t->last_committed = t->step;   /* a group holds steps up to the last one begun */
    return BT_OK;
}

int bt_trace_step_end(bt_trace *t, double ms)
{
    REENTRY_GUARD(t);
    if (!t->in_step) return bt_error(BT_EINVAL, "%s: step_end without step_begin", t->path);
    t->in_sqlite = 1;
    int rc = write_step_rows(t, ms);
    if (rc) {
        sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
        t->group_open = false;
    } else if (mono_ns() - t->last_commit_ns >= t->commit_every_ns)
        rc = commit_group(t);
    t->in_sqlite = 0;
    t->in_step = false;
    return rc;
}

int bt_trace_flush(bt_trace *t)
{
    REENTRY_GUARD(t);
    if (t->in_step) return bt_error(BT_EINVAL, "%s: flush inside step %d", t->path, t->step);
    t->in_sqlite = 1;
    int rc = commit_group(t);
    t->in_sqlite = 0;
    return rc;
}

void bt_trace_commit_every(bt_trace *t, int ms) { t->commit_every_ns = (int64_t)(ms < 0 ? 0 : ms) * 1000000; }

int bt_trace_last_committed(const bt_trace *t) { return t->last_committed; }

int bt_trace_token(bt_trace *t, int step, int pos, int32_t id, const char *piece, size_t piece_len,
                   const char *role, double logprob, const char *finish_reason)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_TOKEN];
    t->in_sqlite = 1;
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, pos);
    sqlite3_bind_int(s, 3, id);
    if (piece) sqlite3_bind_text(s, 4, piece, (int)piece_len, SQLITE_STATIC);
    else sqlite3_bind_null(s, 4);
    sqlite3_bind_text(s, 5, role ? role : "gen", -1, SQLITE_STATIC);
    bind_real_or_null(s, 6, logprob);
    bind_text_or_null(s, 7, finish_reason);
    int rc = run_stmt(t, ST_TOKEN, "writing tokens");
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_finish_reason(bt_trace *t, const char *finish_reason)
{
    REENTRY_GUARD(t);
    t->in_sqlite = 1;
    bind_text_or_null(t->st[ST_FINISH], 1, finish_reason);
    int rc = run_stmt(t, ST_FINISH, "writing finish_reason");
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_event(bt_trace *t, int step, int pos, const char *kind, int layer, const char *op,
                   const char *tensor, const char *detail, int64_t *id)
{
    REENTRY_GUARD(t);
    if (!kind) return bt_error(BT_EINVAL, "%s: event without a kind", t->path);
    sqlite3_stmt *s = t->st[ST_EVENT];
    t->in_sqlite = 1;
    bind_int_or_null(s, 1, step);
    bind_int_or_null(s, 2, pos);
    sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
    bind_int_or_null(s, 4, layer);
    bind_text_or_null(s, 5, op);
    bind_text_or_null(s, 6, tensor);
    bind_text_or_null(s, 7, detail);
    int rc = run_stmt(t, ST_EVENT, "writing events");
    if (!rc && id) *id = sqlite3_last_insert_rowid(t->db);
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_backtrace(bt_trace *t, int64_t event_id, int step, const char *kind, const char *frames)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_BT];
    t->in_sqlite = 1;
    bind_int_or_null(s, 1, event_id);
    bind_int_or_null(s, 2, step);
    sqlite3_bind_text(s, 3, kind ? kind : "first_nonfinite", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, frames ? frames : "", -1, SQLITE_STATIC);
    int rc = run_stmt(t, ST_BT, "writing backtraces");
    t->in_sqlite = 0;
    return rc;
}

/* Checkpoint the WAL into the main file and go back to a rollback journal
 * (which deletes the -wal and -shm): the closed trace is then one
 * self-contained file that anyone can copy alone and open read-only. Best
 * effort, and quiet: a reader still attached, or a disk too full to take
 * the checkpoint, leaves a WAL-mode file, which is just as valid as long as
 * its -wal travels with it (the first error is what the caller reports). */
static void seal(bt_trace *t)
{
    sqlite3_wal_checkpoint_v2(t->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    sqlite3_exec(t->db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
}

bool bt_trace_failed(const bt_trace *t) { return t && t->failed; }

int bt_trace_close(bt_trace *t, const char *status)
{
    if (!t) return BT_OK;
    int rc = BT_OK, r;
    if (t->crash_closed) { free_trace(t); return BT_OK; }
    if (t->in_step && (r = bt_trace_step_end(t, NAN)) && !rc) rc = r;
    if (t->in_batch && (r = bt_trace_batch_end(t, true)) && !rc) rc = r;
    if (t->group_open && (r = bt_trace_flush(t)) && !rc) rc = r;
    char finished[32];
    iso_now(finished);
    if (!status) status = BT_TRACE_STATUS_OK;
    bool put;
    if (t->failed) {
        /* A write failed (a full disk, most likely): give the reserve back
         * so the verdict fits, and write it in one transaction. */
        if (t->reserve_fd >= 0) { close(t->reserve_fd); t->reserve_fd = -1; }
        if (!sqlite3_get_autocommit(t->db)) sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
        put = sqlite3_exec(t->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK &&
              meta_put(t, "status", status) == BT_OK && meta_put(t, "write_error", t->fail_msg) == BT_OK &&
              meta_put(t, "finished_at", finished) == BT_OK && sqlite3_exec(t->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK;
        if (!put && !sqlite3_get_autocommit(t->db)) sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
    } else {
        put = (r = meta_put(t, "status", status)) == BT_OK;
        if (r && !rc) rc = r;
        if ((r = meta_put(t, "finished_at", finished)) && !rc) rc = r;
    }
    /* A browser watching the run may hold a read transaction for a moment:
     * wait a little for it rather than leave a -wal behind. */
    sqlite3_busy_timeout(t->db, 500);
    seal(t);
    /* A full disk or a file-size limit usually fails in the WAL, which the
     * checkpoint has just emptied into the main file: the status may fit
     * now (rewritten in place under a rollback journal). */
    if (!put && meta_put(t, "status", status) == BT_OK) {
        if (t->failed) meta_put(t, "write_error", t->fail_msg);
        meta_put(t, "finished_at", finished);
    }
    for (int i = 0; i < ST_COUNT; i++) { sqlite3_finalize(t->st[i]); t->st[i] = NULL; }
    if (sqlite3_close(t->db) != SQLITE_OK && !rc) rc = sql_fail(t, "closing");
    t->db = NULL;
    free_trace(t);
    return rc;
}

void bt_trace_crash_close(bt_trace *t)
{
    if (!t || t->crash_closed) return;
    t->crash_closed = 1;
    /* Interrupted inside SQLite: its structures may be half-updated, so the
     * open transaction is abandoned (the WAL still holds every earlier step). */
    if (t->in_sqlite) return;
    t->in_sqlite = 1;
    int rc = BT_OK;
    if (t->in_step) rc = write_step_rows(t, NAN);
    sqlite3_stmt *s = t->st[ST_META];
    sqlite3_bind_text(s, 1, "status", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, "crashed", -1, SQLITE_STATIC);
    sqlite3_step(s);
    sqlite3_reset(s);
    if (t->in_step || t->in_batch || t->group_open) {
        if (rc == BT_OK) { sqlite3_step(t->st[ST_COMMIT]); sqlite3_reset(t->st[ST_COMMIT]); }
        t->in_step = t->in_batch = t->group_open = false;
    }
    /* The process is about to die: make the file self-contained now, so a
     * copy of the .db alone (attached to an issue) holds every step. This
     * allocates inside SQLite, in signal context; the caller dies right
     * after either way, and a crash inside SQLite never gets here. */
    seal(t);
    t->in_sqlite = 0;
}

int64_t bt_trace_size(const char *path)
{
    struct stat st;
    int64_t total = 0;
    if (stat(path, &st) == 0) total += st.st_size;
    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (stat(wal, &st) == 0) total += st.st_size;
    return total;
}

int bt_trace_spec_step(bt_trace *t, int step, const char *drafter, int k, int accepted,
                       int32_t bonus_token, const char *bonus_kind)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_SPEC_STEP];
    t->in_sqlite = 1;
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_text(s, 2, drafter ? drafter : "?", -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, k);
    sqlite3_bind_int(s, 4, accepted);
    bind_int_or_null(s, 5, bonus_token);
    bind_text_or_null(s, 6, bonus_kind);
    int rc = run_stmt(t, ST_SPEC_STEP, "writing spec_steps");
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_spec_trail(bt_trace *t, const bt_spec_row *r)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_SPEC_TRAIL];
    t->in_sqlite = 1;
    sqlite3_bind_int(s, 1, r->step);
    sqlite3_bind_int(s, 2, r->draft_idx);
    sqlite3_bind_int(s, 3, r->draft_pos);
    bind_int_or_null(s, 4, r->draft_step);
    sqlite3_bind_int(s, 5, r->draft_token);
    bind_real_or_null(s, 6, r->draft_prob);
    sqlite3_bind_int(s, 7, r->draft_finite);
    bind_int_or_null(s, 8, r->target_token);
    bind_real_or_null(s, 9, r->target_prob);
    sqlite3_bind_int(s, 10, r->accepted);
    bind_text_or_null(s, 11, r->reason);
    int rc = run_stmt(t, ST_SPEC_TRAIL, "writing spec_trail");
    t->in_sqlite = 0;
    return rc;
}

/* ---- device activity and op timings ---- */

int bt_trace_kernel_rows(bt_trace *t, const bt_kernel_row *rows, int n)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_KERNEL];
    int rc = BT_OK;
    t->in_sqlite = 1;
    for (int i = 0; i < n && !rc; i++) {
        const bt_kernel_row *k = &rows[i];
        char grid[48], block[48];
        bool kern = k->registers >= 0;
        snprintf(grid, sizeof grid, "%d,%d,%d", k->grid[0], k->grid[1], k->grid[2]);
        snprintf(block, sizeof block, "%d,%d,%d", k->block[0], k->block[1], k->block[2]);
        bind_int_or_null(s, 1, k->step);
        bind_int_or_null(s, 2, k->layer);
        bind_text_or_null(s, 3, k->op[0] ? k->op : NULL);
        sqlite3_bind_text(s, 4, k->kind ? k->kind : "?", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, k->name, -1, SQLITE_TRANSIENT);
        bind_text_or_null(s, 6, kern ? grid : NULL);
        bind_text_or_null(s, 7, kern ? block : NULL);
        bind_int_or_null(s, 8, kern ? k->registers : -1);
        bind_int_or_null(s, 9, kern ? k->shared_bytes : -1);
        bind_int_or_null(s, 10, k->bytes);
        sqlite3_bind_int64(s, 11, k->start_ns);
        sqlite3_bind_int64(s, 12, k->end_ns);
        sqlite3_bind_int64(s, 13, k->stream);
        sqlite3_bind_int64(s, 14, k->device);
        rc = run_stmt(t, ST_KERNEL, "writing kernels");
    }
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_op_timing(bt_trace *t, int step, const char *model, int idx, int64_t start_ns, int64_t dur_ns)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_TIMING];
    t->in_sqlite = 1;
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_text(s, 2, model ? model : "target", -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, idx);
    sqlite3_bind_int64(s, 4, start_ns);
    sqlite3_bind_int64(s, 5, dur_ns);
    int rc = run_stmt(t, ST_TIMING, "writing op_timings");
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_moe_routes(bt_trace *t, int step, const char *model, int layer, int pos0, int T, int k,
                        const int *experts, const float *weights)
{
    REENTRY_GUARD(t);
    sqlite3_stmt *s = t->st[ST_ROUTE];
    int rc = BT_OK;
    t->in_sqlite = 1;
    for (int i = 0; i < T && rc == BT_OK; i++)
        for (int j = 0; j < k && rc == BT_OK; j++) {
            sqlite3_bind_int(s, 1, step);
            sqlite3_bind_text(s, 2, model ? model : "target", -1, SQLITE_STATIC);
            sqlite3_bind_int(s, 3, pos0 + i);
            sqlite3_bind_int(s, 4, layer);
            sqlite3_bind_int(s, 5, j);
            sqlite3_bind_int(s, 6, experts[i * k + j]);
            /* a router that scored NaN routes with a NaN weight: the
             * evidence, kept as text (SQLite stores a NaN REAL as NULL) */
            float w = weights[i * k + j];
            if (isfinite(w)) sqlite3_bind_double(s, 7, w);
            else sqlite3_bind_text(s, 7, isnan(w) ? "nan" : w > 0 ? "inf" : "-inf", -1, SQLITE_STATIC);
            rc = run_stmt(t, ST_ROUTE, "writing moe_routes");
        }
    t->in_sqlite = 0;
    return rc;
}

int bt_trace_kv_access(bt_trace *t, const bt_kv_access *rows, int n)
{
    REENTRY_GUARD(t);
    if (t->in_step) return bt_error(BT_EINVAL, "%s: kv_access rows written inside step %d", t->path, t->step);
    sqlite3_stmt *s = t->st[ST_KVA];
    t->in_sqlite = 1;
    int rc = commit_group(t);   /* the steps before go first: these rows are one transaction */
    t->in_sqlite = 0;
    if (!rc) rc = exec(t, "BEGIN");
    t->in_sqlite = 1;
    for (int i = 0; i < n && rc == BT_OK; i++) {
        const bt_kv_access *r = &rows[i];
        sqlite3_bind_int(s, 1, r->step);
        sqlite3_bind_int(s, 2, r->server_step);
        sqlite3_bind_int(s, 3, r->block);
        sqlite3_bind_int(s, 4, r->logical);
        sqlite3_bind_text(s, 5, r->mode, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 6, r->pos_lo);
        sqlite3_bind_int(s, 7, r->pos_hi);
        if (r->writer[0]) sqlite3_bind_text(s, 8, r->writer, -1, SQLITE_STATIC); else sqlite3_bind_null(s, 8);
        bind_int_or_null(s, 9, r->writer_step);
        bind_int_or_null(s, 10, r->bad_step);
        if (r->bad_by[0]) sqlite3_bind_text(s, 11, r->bad_by, -1, SQLITE_STATIC); else sqlite3_bind_null(s, 11);
        if (r->note[0]) sqlite3_bind_text(s, 12, r->note, -1, SQLITE_STATIC); else sqlite3_bind_null(s, 12);
        rc = run_stmt(t, ST_KVA, "writing kv_access");
    }
    t->in_sqlite = 0;
    int rc2 = exec(t, rc == BT_OK ? "COMMIT" : "ROLLBACK");
    return rc ? rc : rc2;
}
