/* reader.c - read-only, validated access to a trace (see reader.h).
 *
 * Opening checks, in order, before any query: the file exists and starts
 * with the SQLite magic; without a WAL beside it, the header's page count
 * fits in the file (a truncated copy fails here instead of deep inside a
 * query; with a WAL, committed pages may live there, so SQLite decides);
 * SQLite opens it read-only; application_id is bangtrace's; user_version is
 * one we read; every schema object we use is of the expected kind (guard.h:
 * a trace's schema is data, never code); the meta table is there. meta and
 * tensors are small and read once; everything else is a prepared, indexed
 * query run on demand, each bounded by the guard's instruction budget. Any
 * SQLITE_CORRUPT / SQLITE_NOTADB later on is reported as BT_EFORMAT naming
 * the file, an exhausted budget likewise.
 *
 * An incomplete trace (a run still writing, killed, or out of disk) opens
 * as long as SQLite can read it: bt_trace_state_get() says how complete. */
#include "trace/reader.h"
#include "trace/reader_impl.h"
#include "trace/guard.h"
#include "trace/trace.h"
#include "base/util.h"
#include "base/text.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

enum {
    Q_STEP, Q_STEPS, Q_BLOB, Q_BAD_STEP, Q_FIRST_BAD_STEP, Q_BAD_FROM, Q_TOK_SEQ, Q_TOK_STEPS,
    Q_LOGITS, Q_FIRST_BAD_LOGITS, Q_ROW, Q_EVENTS, Q_EVENTS_KIND, Q_BTS, Q_SERIES, Q_COUNT
};

static const char *const q_sql[Q_COUNT] = {
    [Q_STEP] = "SELECT step, model, kind, pos0, n_pos, ms FROM steps WHERE step = ?1",
    [Q_STEPS] = "SELECT step, model, kind, pos0, n_pos, ms FROM steps WHERE step >= ?1 ORDER BY step LIMIT ?2",
    [Q_BLOB] = "SELECT s.model, s.n_pos, b.stats FROM steps s LEFT JOIN tap_blobs b ON b.step = s.step WHERE s.step = ?1",
    [Q_BAD_STEP] = "SELECT idx, nan, pinf, ninf, first_bad_index, first_bad_pos, min, max, mean, rms"
                   " FROM tap_bad WHERE step = ?1 AND model = ?2 ORDER BY idx",
    [Q_FIRST_BAD_STEP] = "SELECT min(step) FROM tap_bad",
    [Q_BAD_FROM] = "SELECT b.step, b.model, b.idx, b.nan, b.pinf, b.ninf, b.first_bad_index, b.first_bad_pos,"
                   " b.min, b.max, b.mean, b.rms, s.n_pos FROM tap_bad b LEFT JOIN steps s ON s.step = b.step"
                   " WHERE b.step >= ?1 ORDER BY b.step, b.model, b.idx",
    [Q_TOK_SEQ] = "SELECT seq, step, pos, token_id, piece, role, logprob, finish_reason FROM tokens"
                  " WHERE seq >= ?1 ORDER BY seq",
    [Q_TOK_STEPS] = "SELECT seq, step, pos, token_id, piece, role, logprob, finish_reason FROM tokens"
                    " WHERE step BETWEEN ?1 AND ?2 ORDER BY step, seq",
    [Q_LOGITS] = "SELECT l.step, l.pos, l.n_vocab, l.nan, l.pinf, l.ninf, l.max, l.argmax_first, l.argmax_torch,"
                 " l.argmax_triton, l.rule, l.chosen, l.entropy, l.topk_ids, l.topk_vals,"
                 " EXISTS (SELECT 1 FROM logit_rows r WHERE r.step = l.step AND r.pos = l.pos)"
                 " FROM logits l WHERE l.step = ?1 ORDER BY l.pos",
    [Q_FIRST_BAD_LOGITS] = "SELECT min(step) FROM logits WHERE nan + pinf + ninf > 0",
    [Q_ROW] = "SELECT reason, dtype, encoding, n, data FROM logit_rows WHERE step = ?1 AND pos = ?2",
    [Q_EVENTS] = "SELECT id, step, pos, kind, layer, op, tensor, detail FROM events ORDER BY id",
    [Q_EVENTS_KIND] = "SELECT id, step, pos, kind, layer, op, tensor, detail FROM events WHERE kind = ?1 ORDER BY step, id",
    [Q_BTS] = "SELECT id, event_id, step, kind, frames FROM backtraces ORDER BY id",
    [Q_SERIES] = "SELECT s.step, s.model, s.n_pos, substr(b.stats, ?3 * 8 + 1, 8) FROM steps s JOIN tap_blobs b"
                 " ON b.step = s.step WHERE s.step BETWEEN ?1 AND ?2 ORDER BY s.step",
};

struct bt_trace_reader {
    sqlite3 *db;
    char *path;
    char *copy_dir, *copy_db;        /* a private copy (read-only media: see ro_copy) */
    sqlite3_stmt *q[Q_COUNT];
    char **meta_keys, **meta_vals;
    int n_meta;
    bt_trace_tensor_row *tensors;    /* ordered by (model, idx); strings owned */
    int n_tensors;
    /* Speculative-decoding queries: prepared on first use, and only when the
     * file has the spec tables (traces written before them do not). */
    bool spec_tables, has_spec;
    sqlite3_stmt *sq[5];
    sqlite3_stmt *bq[BT_TRACE_BROWSE_MAX];   /* reader_browse.c's, prepared on first use */
    bt_trace_guard guard;            /* statement budget (guard.h) */
    bool wal;                        /* a non-empty PATH-wal was beside the file at open */
};

/* ---- errors ---- */

static int db_fail(bt_trace_reader *r, int rc, const char *what)
{
    int base = rc & 0xff;
    if (base == SQLITE_INTERRUPT) return bt_trace_guard_error(&r->guard, r->path, what);
    if (base == SQLITE_CORRUPT || base == SQLITE_NOTADB || base == SQLITE_FORMAT || base == SQLITE_RANGE)
        return bt_error(BT_EFORMAT, "%s: corrupt trace (%s: %s)", r->path, what, sqlite3_errmsg(r->db));
    if (base == SQLITE_ERROR)   /* a missing table or column: not the schema we know */
        return bt_error(BT_EFORMAT, "%s: not a bangtrace trace or damaged schema (%s: %s)", r->path, what,
                        sqlite3_errmsg(r->db));
    return bt_error(BT_EIO, "%s: %s: %s", r->path, what, sqlite3_errmsg(r->db));
}

static int prep(bt_trace_reader *r, int which, sqlite3_stmt **out)
{
    if (!r->q[which]) {
        int rc = sqlite3_prepare_v3(r->db, q_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &r->q[which], NULL);
        if (rc != SQLITE_OK) return db_fail(r, rc, "preparing a query");
    }
    sqlite3_reset(r->q[which]);
    sqlite3_clear_bindings(r->q[which]);
    *out = r->q[which];
    return BT_OK;
}

/* ---- open / close ---- */

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* A WAL beside the file holds committed pages the main file may not have
 * yet (a live trace, a kill during a checkpoint, a full disk): then only
 * SQLite, reading both, can say whether the trace is whole. */
static bool has_wal(const char *path)
{
    char wal[4096 + 8];
    struct stat st;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &st) == 0 && st.st_size > 0;
}

static int pragma_int(bt_trace_reader *r, const char *sql, int64_t *out)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(r->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) return db_fail(r, rc, sql);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(s, 0);
    else if (rc != SQLITE_DONE) { int e = db_fail(r, rc, sql); sqlite3_finalize(s); return e; }
    else *out = 0;
    sqlite3_finalize(s);
    return BT_OK;
}

static int load_meta(bt_trace_reader *r)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(r->db, "SELECT key, value FROM meta ORDER BY key", -1, &s, NULL);
    if (rc != SQLITE_OK)
        return bt_error(BT_EFORMAT, "%s: not a bangtrace trace (no meta table: %s)", r->path, sqlite3_errmsg(r->db));
    size_t cap_k = 0, cap_v = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if ((rc = BT_VEC_RESERVE(r->meta_keys, cap_k, (size_t)r->n_meta + 1)) ||
            (rc = BT_VEC_RESERVE(r->meta_vals, cap_v, (size_t)r->n_meta + 1))) { sqlite3_finalize(s); return rc; }
        const char *key = bt_col_text(s, 0), *val = bt_col_text(s, 1);
        r->meta_keys[r->n_meta] = strdup(key ? key : "");
        r->meta_vals[r->n_meta] = dup_or_null(val);
        r->n_meta++;
    }
    if (rc != SQLITE_DONE) { int e = db_fail(r, rc, "reading meta"); sqlite3_finalize(s); return e; }
    sqlite3_finalize(s);
    return BT_OK;
}

static int load_tensors(bt_trace_reader *r)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(r->db, "SELECT model, idx, name, layer, op, width FROM tensors ORDER BY model, idx",
                                -1, &s, NULL);
    if (rc != SQLITE_OK) return db_fail(r, rc, "reading tensors");
    size_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if ((rc = BT_VEC_RESERVE(r->tensors, cap, (size_t)r->n_tensors + 1))) { sqlite3_finalize(s); return rc; }
        bt_trace_tensor_row *t = &r->tensors[r->n_tensors++];
        const char *model = bt_col_text(s, 0), *name = bt_col_text(s, 2), *op = bt_col_text(s, 4);
        t->model = strdup(model ? model : "target");
        t->idx = sqlite3_column_int(s, 1);
        t->name = strdup(name ? name : "?");
        int64_t layer = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 3);
        t->layer = layer >= -1 && layer < BT_TRACE_MAX_LAYERS ? (int)layer : -1;
        t->op = strdup(op ? op : "?");
        t->width = sqlite3_column_int(s, 5);
        if (t->idx < 0 || t->idx > 1 << 20) {
            sqlite3_finalize(s);
            return bt_error(BT_EFORMAT, "%s: corrupt trace (tensor %s has slot %d)", r->path, t->name, t->idx);
        }
        if (layer < -1 || layer >= BT_TRACE_MAX_LAYERS) {
            sqlite3_finalize(s);
            return bt_error(BT_EFORMAT, "%s: corrupt trace (tensor %s has layer %lld; a trace holds layers 0..%d)",
                            r->path, bt_text_esc(t->name), (long long)layer, BT_TRACE_MAX_LAYERS - 1);
        }
    }
    if (rc != SQLITE_DONE) { int e = db_fail(r, rc, "reading tensors"); sqlite3_finalize(s); return e; }
    sqlite3_finalize(s);
    return BT_OK;
}

static int spec_detect(bt_trace_reader *r);   /* speculative section, at the end */

/* ---- read-only media ----
 * A killed run leaves its trace in WAL mode: the -wal holds the committed
 * steps, and SQLite reads it only through a -shm index it must be able to
 * create. On read-only media (a CD, a read-only mount of a colleague's
 * disk) with the -shm lost, SQLite says only "unable to open database
 * file"; opening it immutable would silently drop every step in the -wal.
 * So the reader copies the trace and its -wal into a private directory
 * under $TMPDIR and reads the copy (every step; the original is untouched),
 * or, when that fails, says in one line what is wrong and how to recover. */

static bool path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* SQLite would need to create path-shm and cannot: a -wal with content, no
 * -shm, and a directory we cannot write. */
static bool needs_ro_copy(const char *path)
{
    char shm[4096 + 8];
    snprintf(shm, sizeof shm, "%s-shm", path);
    if (!has_wal(path) || path_exists(shm)) return false;
    char dir[4096];
    bt_dir_of(path, dir, sizeof dir);
    return access(dir, W_OK) != 0;
}

static int copy_file(const char *src, const char *dst)
{
    int in = bt_open_input(src);
    if (in < 0) return in;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) { int e = errno; close(in); return bt_error(BT_EIO, "%s: %s", dst, strerror(e)); }
    char buf[1 << 16];
    int rc = BT_OK;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { rc = bt_error(BT_EIO, "%s: %s", src, strerror(errno)); break; }
        if (n == 0) break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { rc = bt_error(BT_EIO, "%s: %s", dst, strerror(w < 0 ? errno : EIO)); break; }
            off += w;
        }
        if (rc) break;
    }
    close(in);
    if (close(out) != 0 && !rc) rc = bt_error(BT_EIO, "%s: %s", dst, strerror(errno));
    return rc;
}

static void ro_copy_remove(bt_trace_reader *r)
{
    if (!r->copy_dir) return;
    if (r->copy_db) {
        size_t n = strlen(r->copy_db);
        char *p = malloc(n + 8);
        if (p) {
            const char *sfx[] = { "-wal", "-shm", "-journal" };
            for (int i = 0; i < 3; i++) { snprintf(p, n + 8, "%s%s", r->copy_db, sfx[i]); unlink(p); }
            free(p);
        }
        unlink(r->copy_db);
    }
    rmdir(r->copy_dir);
    free(r->copy_dir);
    free(r->copy_db);
    r->copy_dir = r->copy_db = NULL;
}

static int ro_copy(bt_trace_reader *r, const char *path)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    size_t n = strlen(tmp) + 32;
    char *dir = malloc(n);
    if (!dir) return bt_error(BT_ENOMEM, "out of memory");
    snprintf(dir, n, "%s/bangtrace-ro.XXXXXX", tmp);
    int rc = BT_OK;
    if (!mkdtemp(dir)) { rc = bt_error(BT_EIO, "%s: %s", dir, strerror(errno)); free(dir); }
    else {
        r->copy_dir = dir;
        r->copy_db = malloc(strlen(dir) + 16);
        if (!r->copy_db) rc = bt_error(BT_ENOMEM, "out of memory");
        else {
            sprintf(r->copy_db, "%s/trace.db", dir);
            char src[4096 + 8], dst[4096 + 8];
            snprintf(src, sizeof src, "%s-wal", path);
            snprintf(dst, sizeof dst, "%s-wal", r->copy_db);
            rc = copy_file(path, r->copy_db);
            if (!rc) rc = copy_file(src, dst);
        }
    }
    if (rc) {
        char why[256];
        snprintf(why, sizeof why, "%s", bt_errmsg());
        ro_copy_remove(r);
        return bt_error(BT_EIO, "%s: the trace has an unapplied write-ahead log (%s-wal, no -shm) on read-only media, "
                        "and a private copy failed (%s): copy %s and %s-wal to writable storage and open the copy",
                        path, path, why, path, path);
    }
    bt_warn("%s: read-only media, a write-ahead log without its -shm: reading a private copy of the trace", path);
    return BT_OK;
}

/* Open readers with a private copy, for bt_trace_db_path. */
static bt_trace_reader *ro_readers[8];

const char *bt_trace_db_path(const char *path)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(ro_readers); i++)
        if (ro_readers[i] && !strcmp(ro_readers[i]->path, path)) return ro_readers[i]->copy_db;
    return path;
}

int bt_trace_open(const char *path, bt_trace_reader **out)
{
    *out = NULL;
    int rc = bt_trace_guard_header(path, "trace");
    if (rc) return rc;
    bt_trace_reader *r = calloc(1, sizeof(*r));
    if (!r || !(r->path = strdup(path))) { free(r); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
    const char *db_path = path;
    if (needs_ro_copy(path)) {
        if ((rc = ro_copy(r, path))) goto fail;
        db_path = r->copy_db;
        for (size_t i = 0; i < BT_ARRAY_SIZE(ro_readers); i++)
            if (!ro_readers[i]) { ro_readers[i] = r; break; }
    }
    int src = sqlite3_open_v2(db_path, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: cannot open trace: %s", path, r->db ? sqlite3_errmsg(r->db) : sqlite3_errstr(src));
        goto fail;
    }
    sqlite3_extended_result_codes(r->db, 1);
    /* a run may be writing it: wait out its short commit locks */
    sqlite3_busy_timeout(r->db, 5000);
    r->wal = has_wal(db_path);
    bt_trace_guard_install(r->db, &r->guard, bt_trace_guard_bytes(path));
    int64_t app = 0, ver = 0;
    if ((rc = pragma_int(r, "PRAGMA application_id", &app))) goto fail;
    if ((uint32_t)app == BT_SERVER_APPLICATION_ID) {
        rc = bt_error(BT_EFORMAT, "%s: the batched server's trace (server.db), not a request's: open a request's trace "
                      "beside it (req-*.db; its Cache view, key 8, follows server.db), or query it with sqlite3 "
                      "(doc/serve.md)", path);
        goto fail;
    }
    if ((uint32_t)app != BT_TRACE_APPLICATION_ID) {
        rc = bt_error(BT_EFORMAT, "%s: not a bangtrace trace (SQLite file with application_id 0x%08x, expected 0x%08x)",
                      path, (unsigned)app, (unsigned)BT_TRACE_APPLICATION_ID);
        goto fail;
    }
    if ((rc = pragma_int(r, "PRAGMA user_version", &ver))) goto fail;
    if (ver < 1) {
        rc = bt_error(BT_EFORMAT, "%s: not a bangtrace trace (schema version %lld)", path, (long long)ver);
        goto fail;
    }
    if (ver > BT_TRACE_SCHEMA_VERSION) {
        rc = bt_error(BT_EUNSUPPORTED, "%s: trace schema version %lld is newer than this bangtrace reads (%d); upgrade bangtrace",
                      path, (long long)ver, BT_TRACE_SCHEMA_VERSION);
        goto fail;
    }
    /* Every object we read must be the kind we expect before any query
     * runs: a view named steps could loop forever. */
    if ((rc = bt_trace_guard_schema(r->db, "main", path))) goto fail;
    if ((rc = load_meta(r)) || (rc = load_tensors(r))) goto fail;
    if (!bt_trace_meta_get(r, "schema_version")) {
        rc = bt_error(BT_EFORMAT, "%s: not a bangtrace trace (meta has no schema_version)", path);
        goto fail;
    }
    /* Every query must compile against this file's schema: a damaged or
     * foreign schema is reported now, not from deep inside a view. */
    for (int i = 0; i < Q_COUNT; i++) {
        int e = sqlite3_prepare_v3(r->db, q_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &r->q[i], NULL);
        if (e != SQLITE_OK) { rc = db_fail(r, e, "checking the schema"); goto fail; }
    }
    if ((rc = spec_detect(r))) goto fail;
    *out = r;
    return BT_OK;
fail:
    bt_trace_reader_close(r);
    return rc;
}

void bt_trace_reader_close(bt_trace_reader *r)
{
    if (!r) return;
    for (int i = 0; i < Q_COUNT; i++) sqlite3_finalize(r->q[i]);
    for (size_t i = 0; i < BT_ARRAY_SIZE(r->sq); i++) sqlite3_finalize(r->sq[i]);
    for (size_t i = 0; i < BT_ARRAY_SIZE(r->bq); i++) sqlite3_finalize(r->bq[i]);
    if (r->db) sqlite3_close_v2(r->db);
    for (size_t i = 0; i < BT_ARRAY_SIZE(ro_readers); i++)
        if (ro_readers[i] == r) ro_readers[i] = NULL;
    ro_copy_remove(r);
    for (int i = 0; i < r->n_meta; i++) { free(r->meta_keys[i]); free(r->meta_vals[i]); }
    free(r->meta_keys);
    free(r->meta_vals);
    for (int i = 0; i < r->n_tensors; i++) {
        free((char *)r->tensors[i].model);
        free((char *)r->tensors[i].name);
        free((char *)r->tensors[i].op);
    }
    free(r->tensors);
    free(r->path);
    free(r);
}

const char *bt_trace_reader_path(const bt_trace_reader *r) { return r->path; }

/* ---- meta ---- */

const char *bt_trace_meta_get(bt_trace_reader *r, const char *key)
{
    for (int i = 0; i < r->n_meta; i++)
        if (!strcmp(r->meta_keys[i], key)) return r->meta_vals[i];
    return NULL;
}

int bt_trace_meta_each(bt_trace_reader *r, int (*fn)(void *user, const char *key, const char *value), void *user)
{
    for (int i = 0; i < r->n_meta; i++) {
        int s = fn(user, r->meta_keys[i], r->meta_vals[i]);
        if (s) return s;
    }
    return BT_OK;
}

/* ---- tensors ---- */

int bt_trace_tensors(bt_trace_reader *r, const char *model, const bt_trace_tensor_row **out, int *n)
{
    if (!model) model = "target";
    int i = 0;
    while (i < r->n_tensors && strcmp(r->tensors[i].model, model)) i++;
    int j = i;
    while (j < r->n_tensors && !strcmp(r->tensors[j].model, model)) j++;
    *out = i < r->n_tensors ? &r->tensors[i] : NULL;
    *n = j - i;
    return BT_OK;
}

static const bt_trace_tensor_row *tensor_at(bt_trace_reader *r, const char *model, int idx)
{
    const bt_trace_tensor_row *t;
    int n;
    bt_trace_tensors(r, model, &t, &n);
    /* Slots are dense in practice: try the direct index before searching. */
    if (idx >= 0 && idx < n && t[idx].idx == idx) return &t[idx];
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t[mid].idx == idx) return &t[mid];
        if (t[mid].idx < idx) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}

int bt_trace_tensor_find(bt_trace_reader *r, const char *model, const char *name)
{
    const bt_trace_tensor_row *t;
    int n;
    bt_trace_tensors(r, model, &t, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].idx;
    return -1;
}

/* ---- summary ---- */

static int scalar(bt_trace_reader *r, const char *sql, int64_t *out)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(r->db, sql, -1, &s, NULL);
    if (rc != SQLITE_OK) return db_fail(r, rc, "summary");
    rc = sqlite3_step(s);
    *out = -1;
    if (rc == SQLITE_ROW) { if (sqlite3_column_type(s, 0) != SQLITE_NULL) *out = sqlite3_column_int64(s, 0); }
    else if (rc != SQLITE_DONE) { int e = db_fail(r, rc, "summary"); sqlite3_finalize(s); return e; }
    sqlite3_finalize(s);
    return BT_OK;
}

int bt_trace_summary_get(bt_trace_reader *r, bt_trace_summary *o)
{
    memset(o, 0, sizeof(*o));
    int64_t v;
    int rc;
#define Q(sql, field) do { if ((rc = scalar(r, sql, &v))) return rc; o->field = v; } while (0)
    Q("SELECT count(*) FROM steps", n_steps);
    Q("SELECT min(step) FROM steps", first_step);
    Q("SELECT max(step) FROM steps", last_step);
    Q("SELECT count(*) FROM tokens", n_tokens);
    Q("SELECT count(*) FROM tokens WHERE role = 'prompt'", n_prompt_tokens);
    Q("SELECT count(*) FROM events", n_events);
    Q("SELECT min(step) FROM tap_bad", first_bad_step);
    Q("SELECT min(step) FROM logits WHERE nan + pinf + ninf > 0", first_bad_logits_step);
#undef Q
    const bt_trace_tensor_row *t;
    bt_trace_tensors(r, "target", &t, &o->n_tensors);
    return BT_OK;
}

/* ---- steps ---- */

static void read_step(sqlite3_stmt *s, bt_trace_step_row *o)
{
    o->step = sqlite3_column_int(s, 0);
    bt_copy_str(o->model, sizeof o->model, bt_col_text(s, 1));
    bt_copy_str(o->kind, sizeof o->kind, bt_col_text(s, 2));
    o->pos0 = sqlite3_column_int(s, 3);
    o->n_pos = sqlite3_column_int(s, 4);
    o->ms = bt_col_real(s, 5);
}

int bt_trace_step_get(bt_trace_reader *r, int step, bt_trace_step_row *out)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_STEP, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) { read_step(s, out); sqlite3_reset(s); return BT_OK; }
    if (rc == SQLITE_DONE) return bt_error(BT_ENOTFOUND, "%s: no step %d in the trace", r->path, step);
    return db_fail(r, rc, "reading steps");
}

int bt_trace_steps(bt_trace_reader *r, int from, int max, bt_trace_step_row *out, int *n)
{
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_STEPS, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, max);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && *n < max) read_step(s, &out[(*n)++]);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return db_fail(r, rc, "reading steps");
    sqlite3_reset(s);
    return BT_OK;
}

/* ---- taps ---- */

static double bf16_at(const unsigned char *p, bool *none)
{
    uint16_t b = (uint16_t)(p[0] | p[1] << 8);
    if (b == 0x7fc0) { *none = true; return NAN; }
    *none = false;
    return bt_bf16_to_f32(b);
}

/* Fill a tap from 8 packed bytes (stats of one slot). */
static void tap_from_packed(bt_trace_tap_row *o, const bt_trace_tensor_row *t, int step, int n_pos, const unsigned char *p)
{
    memset(o, 0, sizeof(*o));
    o->step = step;
    o->idx = t->idx;
    o->layer = t->layer;
    o->name = t->name;
    o->op = t->op;
    o->model = t->model;
    o->n = (int64_t)n_pos * t->width;
    bool none[4];
    o->min = bf16_at(p, &none[0]);
    o->max = bf16_at(p + 2, &none[1]);
    o->mean = bf16_at(p + 4, &none[2]);
    o->rms = bf16_at(p + 6, &none[3]);
    o->recorded = !(none[0] && none[1] && none[2] && none[3]);
    o->absmax = fmax(fabs(o->min), fabs(o->max));
    o->first_bad_index = o->first_bad_pos = -1;
}

/* Overlay a tap_bad row (columns from..from+9: nan pinf ninf fbi fbp min max mean rms). */
static void tap_apply_bad(bt_trace_tap_row *o, sqlite3_stmt *s, int c)
{
    o->nan = sqlite3_column_int64(s, c);
    o->pinf = sqlite3_column_int64(s, c + 1);
    o->ninf = sqlite3_column_int64(s, c + 2);
    o->first_bad_index = bt_col_int(s, c + 3);
    o->first_bad_pos = bt_col_int(s, c + 4);
    o->min = bt_col_real(s, c + 5);
    o->max = bt_col_real(s, c + 6);
    o->mean = bt_col_real(s, c + 7);
    o->rms = bt_col_real(s, c + 8);
    o->absmax = fmax(fabs(o->min), fabs(o->max));
    o->recorded = true;
}

int bt_trace_step_taps(bt_trace_reader *r, int step, bt_trace_tap_row **out, int *n)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_BLOB, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return bt_error(BT_ENOTFOUND, "%s: no step %d in the trace", r->path, step);
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading tap_blobs");
    char model[16];
    bt_copy_str(model, sizeof model, bt_col_text(s, 0));
    int n_pos = sqlite3_column_int(s, 1);
    const unsigned char *blob = sqlite3_column_blob(s, 2);
    int bytes = sqlite3_column_bytes(s, 2);
    const bt_trace_tensor_row *t;
    int nt;
    bt_trace_tensors(r, model, &t, &nt);
    if (!blob || nt == 0) { sqlite3_reset(s); return BT_OK; }
    bt_trace_tap_row *taps = calloc(nt, sizeof(*taps));
    if (!taps) { sqlite3_reset(s); return bt_error(BT_ENOMEM, "%s: out of memory", r->path); }
    static const unsigned char none[8] = { 0xc0, 0x7f, 0xc0, 0x7f, 0xc0, 0x7f, 0xc0, 0x7f };
    for (int i = 0; i < nt; i++) {
        /* A blob shorter than the tensor list (tensors registered after
         * this step) reads as "no value" rather than past its end. */
        const unsigned char *p = (t[i].idx + 1) * 8 <= bytes ? blob + t[i].idx * 8 : none;
        tap_from_packed(&taps[i], &t[i], step, n_pos, p);
    }
    sqlite3_reset(s);
    if ((rc = prep(r, Q_BAD_STEP, &s))) { free(taps); return rc; }
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_text(s, 2, model, -1, SQLITE_TRANSIENT);
    int j = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int idx = sqlite3_column_int(s, 0);
        while (j < nt && t[j].idx < idx) j++;
        if (j < nt && t[j].idx == idx) tap_apply_bad(&taps[j], s, 1);
    }
    if (rc != SQLITE_DONE) { free(taps); return db_fail(r, rc, "reading tap_bad"); }
    sqlite3_reset(s);
    *out = taps;
    *n = nt;
    return BT_OK;
}

int bt_trace_tap_series(bt_trace_reader *r, int idx, int from, int to,
                        int (*fn)(void *user, const bt_trace_tap_row *tap), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_SERIES, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    sqlite3_bind_int(s, 3, idx);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const bt_trace_tensor_row *t = tensor_at(r, bt_col_text(s, 1) ? bt_col_text(s, 1) : "target", idx);
        if (!t || sqlite3_column_bytes(s, 3) != 8) continue;
        bt_trace_tap_row tap;
        tap_from_packed(&tap, t, sqlite3_column_int(s, 0), sqlite3_column_int(s, 2), sqlite3_column_blob(s, 3));
        int stop = fn(user, &tap);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading tap_blobs");
    sqlite3_reset(s);
    return BT_OK;
}

/* One row of Q_BAD_FROM into a tap (names from the tensor cache). */
static void tap_from_bad_row(bt_trace_reader *r, sqlite3_stmt *s, bt_trace_tap_row *o)
{
    memset(o, 0, sizeof(*o));
    o->step = sqlite3_column_int(s, 0);
    o->idx = sqlite3_column_int(s, 2);
    const bt_trace_tensor_row *t = tensor_at(r, bt_col_text(s, 1) ? bt_col_text(s, 1) : "target", o->idx);
    o->layer = t ? t->layer : -1;
    o->name = t ? t->name : "?";
    o->op = t ? t->op : "?";
    o->model = t ? t->model : "target";
    o->n = t ? (int64_t)sqlite3_column_int(s, 12) * t->width : 0;
    tap_apply_bad(o, s, 3);
}

int bt_trace_bad_each(bt_trace_reader *r, int from, int (*fn)(void *user, const bt_trace_tap_row *tap), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_BAD_FROM, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_tap_row tap;
        tap_from_bad_row(r, s, &tap);
        int stop = fn(user, &tap);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading tap_bad");
    sqlite3_reset(s);
    return BT_OK;
}

static int first_bad_cb(void *user, const bt_trace_tap_row *tap)
{
    *(bt_trace_tap_row *)user = *tap;
    return 1;
}

int bt_trace_first_nonfinite(bt_trace_reader *r, bt_trace_tap_row *out, bool *found)
{
    *found = false;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_FIRST_BAD_STEP, &s);
    if (rc) return rc;
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading tap_bad");
    if (sqlite3_column_type(s, 0) == SQLITE_NULL) { sqlite3_reset(s); return BT_OK; }
    int step = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    rc = bt_trace_bad_each(r, step, first_bad_cb, out);
    if (rc < 0) return rc;
    *found = rc == 1;
    return BT_OK;
}

/* ---- tokens ---- */

static void read_token(sqlite3_stmt *s, bt_trace_token_row *o)
{
    o->seq = sqlite3_column_int64(s, 0);
    o->step = sqlite3_column_int(s, 1);
    o->pos = sqlite3_column_int(s, 2);
    o->id = sqlite3_column_int(s, 3);
    o->piece = bt_col_text(s, 4);
    o->piece_len = o->piece ? (size_t)sqlite3_column_bytes(s, 4) : 0;
    o->role = bt_col_text(s, 5);
    if (!o->role) o->role = "gen";
    o->logprob = bt_col_real(s, 6);
    o->finish_reason = bt_col_text(s, 7);
}

static int each_token(bt_trace_reader *r, sqlite3_stmt *s, int max,
                      int (*fn)(void *user, const bt_trace_token_row *tok), void *user)
{
    int rc, count = 0;
    while ((max <= 0 || count < max) && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_token_row tok;
        read_token(s, &tok);
        count++;
        int stop = fn(user, &tok);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (max > 0 && count >= max) { sqlite3_reset(s); return BT_OK; }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading tokens");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_tokens_each(bt_trace_reader *r, int64_t from_seq, int max,
                         int (*fn)(void *user, const bt_trace_token_row *tok), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_TOK_SEQ, &s);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, from_seq);
    return each_token(r, s, max, fn, user);
}

int bt_trace_tokens_of_steps(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_token_row *tok), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_TOK_STEPS, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    return each_token(r, s, 0, fn, user);
}

/* ---- logits ---- */

/* Parse a JSON array of numbers ("null" = NAN) into up to max values. */
static int parse_array(const char *s, double *v, int max)
{
    int n = 0;
    if (!s) return 0;
    while (*s == ' ') s++;
    if (*s++ != '[') return 0;
    while (*s && *s != ']' && n < max) {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ']' || !*s) break;
        if (!strncmp(s, "null", 4)) { v[n++] = NAN; s += 4; continue; }
        char *end;
        double d = strtod(s, &end);
        if (end == s) break;
        v[n++] = d;
        s = end;
    }
    return n;
}

void bt_trace_reader_read_logits(sqlite3_stmt *s, bt_trace_logits_row *o)
{
    memset(o, 0, sizeof(*o));
    o->step = sqlite3_column_int(s, 0);
    o->pos = sqlite3_column_int(s, 1);
    o->n_vocab = sqlite3_column_int(s, 2);
    o->nan = sqlite3_column_int64(s, 3);
    o->pinf = sqlite3_column_int64(s, 4);
    o->ninf = sqlite3_column_int64(s, 5);
    o->max = bt_col_real(s, 6);
    o->argmax_first = bt_col_int(s, 7);
    o->argmax_torch = bt_col_int(s, 8);
    o->argmax_triton = bt_col_int(s, 9);
    bt_copy_str(o->rule, sizeof o->rule, bt_col_text(s, 10));
    o->chosen = bt_col_int(s, 11);
    o->entropy = bt_col_real(s, 12);
    double ids[64], vals[64];
    int ni = parse_array(bt_col_text(s, 13), ids, 64);
    int nv = parse_array(bt_col_text(s, 14), vals, 64);
    o->k = ni < nv ? ni : nv;
    /* a null (NAN) or out-of-range id must not reach the int conversion (undefined behaviour) */
    for (int i = 0; i < o->k; i++) { o->topk_ids[i] = fabs(ids[i]) < 2147483648.0 ? (int32_t)ids[i] : -1; o->topk_vals[i] = (float)vals[i]; }
    o->has_row = sqlite3_column_int(s, 15) != 0;
}

int bt_trace_step_logits(bt_trace_reader *r, int step, bt_trace_logits_row *out, int max, int *n)
{
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_LOGITS, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    while (*n < max && (rc = sqlite3_step(s)) == SQLITE_ROW) bt_trace_reader_read_logits(s, &out[(*n)++]);
    if (*n < max && rc != SQLITE_DONE) return db_fail(r, rc, "reading logits");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_first_bad_logits(bt_trace_reader *r, bt_trace_logits_row *out, bool *found)
{
    *found = false;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_FIRST_BAD_LOGITS, &s);
    if (rc) return rc;
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading logits");
    if (sqlite3_column_type(s, 0) == SQLITE_NULL) { sqlite3_reset(s); return BT_OK; }
    int step = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    bt_trace_logits_row rows[8];
    int n;
    if ((rc = bt_trace_step_logits(r, step, rows, 8, &n))) return rc;
    for (int i = 0; i < n; i++)
        if (rows[i].nan + rows[i].pinf + rows[i].ninf > 0) { *out = rows[i]; *found = true; break; }
    return BT_OK;
}

int bt_trace_logit_row_get(bt_trace_reader *r, int step, int pos, float **row, int *n, char reason[32])
{
    *row = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_ROW, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, step);
    sqlite3_bind_int(s, 2, pos);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return bt_error(BT_ENOTFOUND, "%s: no full logit row stored for step %d pos %d", r->path, step, pos);
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading logit_rows");
    if (reason) bt_copy_str(reason, 32, bt_col_text(s, 0));
    const char *dtype = bt_col_text(s, 1), *enc = bt_col_text(s, 2);
    int64_t count = sqlite3_column_int64(s, 3);
    const void *data = sqlite3_column_blob(s, 4);
    size_t bytes = (size_t)sqlite3_column_bytes(s, 4);
    int es = dtype && !strcmp(dtype, "f32") ? 4 : dtype && !strcmp(dtype, "f16") ? 2 : 0;
    bool zstd = enc && !strcmp(enc, "zstd"), raw = enc && !strcmp(enc, "raw");
    if (!es || !(zstd || raw) || count <= 0 || count > (1 << 26)) {
        sqlite3_reset(s);
        return bt_error(BT_EFORMAT, "%s: logit row of step %d: unknown dtype '%s' / encoding '%s' / count %lld",
                        r->path, step, dtype ? dtype : "", enc ? enc : "", (long long)count);
    }
    size_t want = (size_t)count * es;
    unsigned char *buf = malloc(want);
    float *f = malloc((size_t)count * sizeof(float));
    if (!buf || !f) { free(buf); free(f); sqlite3_reset(s); return bt_error(BT_ENOMEM, "%s: out of memory", r->path); }
    rc = BT_OK;
    if (zstd) {
        unsigned long long fsize = data ? ZSTD_getFrameContentSize(data, bytes) : ZSTD_CONTENTSIZE_ERROR;
        size_t got = fsize == want ? ZSTD_decompress(buf, want, data, bytes) : 0;
        if (fsize != want || ZSTD_isError(got) || got != want)
            rc = bt_error(BT_EFORMAT, "%s: logit row of step %d does not decode (zstd frame of %zu bytes for %lld %s values)",
                          r->path, step, bytes, (long long)count, dtype);
    } else if (bytes != want) {
        rc = bt_error(BT_EFORMAT, "%s: logit row of step %d holds %zu bytes, expected %zu", r->path, step, bytes, want);
    } else {
        memcpy(buf, data, want);
    }
    sqlite3_reset(s);
    if (rc) { free(buf); free(f); return rc; }
    for (int64_t i = 0; i < count; i++) {
        if (es == 2) {
            f[i] = bt_f16_to_f32((uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8));
        } else {
            uint32_t u = (uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 | (uint32_t)buf[4 * i + 2] << 16 |
                         (uint32_t)buf[4 * i + 3] << 24;
            memcpy(&f[i], &u, 4);
        }
    }
    free(buf);
    *row = f;
    *n = (int)count;
    return BT_OK;
}

/* ---- events and backtraces ---- */

int bt_trace_events_each(bt_trace_reader *r, const char *kind,
                         int (*fn)(void *user, const bt_trace_event_row *ev), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, kind ? Q_EVENTS_KIND : Q_EVENTS, &s);
    if (rc) return rc;
    if (kind) sqlite3_bind_text(s, 1, kind, -1, SQLITE_TRANSIENT);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_event_row ev = {
            .id = sqlite3_column_int64(s, 0), .step = bt_col_int(s, 1), .pos = bt_col_int(s, 2),
            .kind = bt_col_text(s, 3), .layer = bt_col_int(s, 4), .op = bt_col_text(s, 5),
            .tensor = bt_col_text(s, 6), .detail = bt_col_text(s, 7),
        };
        if (!ev.kind) ev.kind = "?";
        int stop = fn(user, &ev);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading events");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_backtraces_each(bt_trace_reader *r, int (*fn)(void *user, const bt_trace_backtrace_row *bt), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = prep(r, Q_BTS, &s);
    if (rc) return rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_backtrace_row b = {
            .id = sqlite3_column_int64(s, 0),
            .event_id = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 1),
            .step = bt_col_int(s, 2), .kind = bt_col_text(s, 3), .frames = bt_col_text(s, 4),
        };
        if (!b.kind) b.kind = "?";
        if (!b.frames) b.frames = "";
        int stop = fn(user, &b);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading backtraces");
    sqlite3_reset(s);
    return BT_OK;
}

/* ---- speculative decoding ---- */

enum { SQ_STEPS, SQ_TRAIL, SQ_STEP_RANGE, SQ_BAD_LOGITS_OF, SQ_FIRST_BAD_OF };

static const char *const sq_sql[] = {
    [SQ_STEPS] = "SELECT step, drafter, k, accepted, bonus_token, bonus_kind FROM spec_steps"
                 " WHERE step BETWEEN ?1 AND ?2 ORDER BY step",
    [SQ_TRAIL] = "SELECT step, draft_idx, draft_pos, draft_step, draft_token, draft_prob, draft_finite,"
                 " target_token, target_prob, accepted, reason FROM spec_trail"
                 " WHERE step BETWEEN ?1 AND ?2 ORDER BY step, draft_idx",
    [SQ_STEP_RANGE] = "SELECT step, model, kind, pos0, n_pos, ms FROM steps WHERE step BETWEEN ?1 AND ?2 ORDER BY step",
    /* walks the logits_bad partial index in step order, stops at the first match */
    [SQ_BAD_LOGITS_OF] = "SELECT l.step FROM logits l JOIN steps s ON s.step = l.step"
                         " WHERE l.nan + l.pinf + l.ninf > 0 AND s.model = ?1 ORDER BY l.step LIMIT 1",
    [SQ_FIRST_BAD_OF] = "SELECT min(step) FROM tap_bad WHERE model = ?1",
};

/* The spec tables exist (a newer writer) and the run speculated: it has a
 * verify step or names its drafter. An older trace simply has neither. */
static int spec_detect(bt_trace_reader *r)
{
    int64_t n = 0;
    int rc = pragma_int(r, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('spec_steps', 'spec_trail')", &n);
    if (rc) return rc;
    r->spec_tables = n == 2;
    if (!r->spec_tables) return BT_OK;
    if ((rc = pragma_int(r, "SELECT EXISTS (SELECT 1 FROM spec_steps)", &n))) return rc;
    const char *d = bt_trace_meta_get(r, "drafter");
    r->has_spec = n > 0 || (d && *d);
    return BT_OK;
}

static int sprep(bt_trace_reader *r, int which, sqlite3_stmt **out)
{
    if (!r->sq[which]) {
        int rc = sqlite3_prepare_v3(r->db, sq_sql[which], -1, SQLITE_PREPARE_PERSISTENT, &r->sq[which], NULL);
        if (rc != SQLITE_OK) return db_fail(r, rc, "preparing a query");
    }
    sqlite3_reset(r->sq[which]);
    sqlite3_clear_bindings(r->sq[which]);
    *out = r->sq[which];
    return BT_OK;
}

bool bt_trace_has_spec(const bt_trace_reader *r) { return r->has_spec; }

int bt_trace_spec_steps_each(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_spec_step_row *row), void *user)
{
    if (!r->spec_tables) return BT_OK;
    sqlite3_stmt *s = NULL;
    int rc = sprep(r, SQ_STEPS, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_spec_step_row o;
        memset(&o, 0, sizeof(o));
        o.step = sqlite3_column_int(s, 0);
        bt_copy_str(o.drafter, sizeof o.drafter, bt_col_text(s, 1));
        o.k = sqlite3_column_int(s, 2);
        o.accepted = sqlite3_column_int(s, 3);
        o.bonus_token = bt_col_int(s, 4);
        bt_copy_str(o.bonus_kind, sizeof o.bonus_kind, bt_col_text(s, 5));
        int stop = fn(user, &o);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading spec_steps");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_spec_trail_each(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_spec_trail_row *row), void *user)
{
    if (!r->spec_tables) return BT_OK;
    sqlite3_stmt *s = NULL;
    int rc = sprep(r, SQ_TRAIL, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_spec_trail_row o = {
            .step = sqlite3_column_int(s, 0), .draft_idx = sqlite3_column_int(s, 1),
            .draft_pos = sqlite3_column_int(s, 2), .draft_step = bt_col_int(s, 3),
            .draft_token = sqlite3_column_int(s, 4), .draft_prob = bt_col_real(s, 5),
            .draft_finite = sqlite3_column_int(s, 6) != 0, .target_token = bt_col_int(s, 7),
            .target_prob = bt_col_real(s, 8), .accepted = sqlite3_column_int(s, 9) != 0,
            .reason = bt_col_text(s, 10),
        };
        int stop = fn(user, &o);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading spec_trail");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_steps_each(bt_trace_reader *r, int from, int to,
                        int (*fn)(void *user, const bt_trace_step_row *row), void *user)
{
    sqlite3_stmt *s = NULL;
    int rc = sprep(r, SQ_STEP_RANGE, &s);
    if (rc) return rc;
    sqlite3_bind_int(s, 1, from);
    sqlite3_bind_int(s, 2, to);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_step_row o;
        read_step(s, &o);
        int stop = fn(user, &o);
        if (stop) { sqlite3_reset(s); return stop; }
    }
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading steps");
    sqlite3_reset(s);
    return BT_OK;
}

int bt_trace_first_bad_logits_of(bt_trace_reader *r, const char *model, bt_trace_logits_row *out, bool *found)
{
    *found = false;
    sqlite3_stmt *s = NULL;
    int rc = sprep(r, SQ_BAD_LOGITS_OF, &s);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, model ? model : "target", -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) { sqlite3_reset(s); return BT_OK; }
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading logits");
    int step = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    /* a verify step holds one snapshot per target row it used (k + 1) */
    bt_trace_logits_row *rows = malloc(64 * sizeof(*rows));
    if (!rows) return bt_error(BT_ENOMEM, "%s: out of memory", r->path);
    int n = 0;
    if ((rc = bt_trace_step_logits(r, step, rows, 64, &n))) { free(rows); return rc; }
    for (int i = 0; i < n; i++)
        if (rows[i].nan + rows[i].pinf + rows[i].ninf > 0) { *out = rows[i]; *found = true; break; }
    free(rows);
    return BT_OK;
}

int bt_trace_first_bad_step_of(bt_trace_reader *r, const char *model, int *step)
{
    *step = -1;
    sqlite3_stmt *s = NULL;
    int rc = sprep(r, SQ_FIRST_BAD_OF, &s);
    if (rc) return rc;
    sqlite3_bind_text(s, 1, model ? model : "target", -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) return db_fail(r, rc, "reading tap_bad");
    if (sqlite3_column_type(s, 0) != SQLITE_NULL) *step = sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    return BT_OK;
}

/* ---- for the reader's other files (reader_impl.h) ---- */

int bt_trace_reader_fail(bt_trace_reader *r, int rc, const char *what) { return db_fail(r, rc, what); }

bool bt_trace_reader_spec_tables(const bt_trace_reader *r) { return r->spec_tables; }

int bt_trace_reader_prep(bt_trace_reader *r, int slot, const char *sql, sqlite3_stmt **out)
{
    BT_ASSERT(slot >= 0 && slot < BT_TRACE_BROWSE_MAX);
    if (!r->bq[slot]) {
        int rc = sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &r->bq[slot], NULL);
        if (rc != SQLITE_OK) return db_fail(r, rc, "checking the schema");
    }
    sqlite3_reset(r->bq[slot]);
    sqlite3_clear_bindings(r->bq[slot]);
    *out = r->bq[slot];
    return BT_OK;
}

/* ---- integrity check (bisect, report: see reader.h) ---- */

int bt_analyze_verify(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc = BT_OK;
    if (sqlite3_open_v2(bt_trace_db_path(path), &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK) {
        rc = bt_error(BT_EFORMAT, "%s: corrupt trace (integrity check: %s)", path, db ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(db, 2000);   /* a run may still be writing it */
    bt_trace_guard g;                 /* quick_check is linear, but the file is untrusted */
    bt_trace_guard_install(db, &g, bt_trace_guard_bytes(path));
    int s = sqlite3_step(st);
    const char *res = s == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (s == SQLITE_INTERRUPT) rc = bt_trace_guard_error(&g, path, "integrity check");
    else if (s != SQLITE_ROW) rc = bt_error(BT_EFORMAT, "%s: corrupt trace (integrity check: %s)", path, sqlite3_errmsg(db));
    else if (!res || strcmp(res, "ok")) {
        /* quick_check answers "*** in database main ***\nPage 6: ..."; keep one line */
        char msg[256];
        const char *m = res ? res : "no answer";
        if (!strncmp(m, "*** in database main ***", 24)) m += 24;
        size_t o = 0;
        for (; *m && o + 1 < sizeof(msg); m++) {
            if (*m == '\n') { if (o) { msg[o++] = ';'; if (o + 1 < sizeof(msg)) msg[o++] = ' '; } }
            else msg[o++] = *m;
        }
        msg[o] = 0;
        rc = bt_error(BT_EFORMAT, "%s: corrupt trace (integrity check: %s)", path, msg);
    }
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc;
}

/* ---- completeness ---- */

int bt_trace_state_get(bt_trace_reader *r, bt_trace_state *out)
{
    memset(out, 0, sizeof(*out));
    out->status = bt_trace_meta_get(r, "status");
    const char *fin = bt_trace_meta_get(r, "finished_at");
    out->finished = fin && *fin;
    out->in_wal = r->wal;
    int64_t v;
    int rc = scalar(r, "SELECT max(step) FROM steps", &v);
    if (rc) return rc;
    out->last_step = (int)v;
    out->complete = out->finished && out->status && strcmp(out->status, "running") != 0;
    return BT_OK;
}

/* ---- device activity and op timings (optional tables: older traces and
 * CPU runs without --timing have none, which reads as zero rows) ---- */

static int table_exists(bt_trace_reader *r, const char *name, bool *yes)
{
    int64_t n = 0;
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'", name);
    int rc = pragma_int(r, sql, &n);
    *yes = !rc && n > 0;
    return rc;
}

int bt_trace_kv_access_each(bt_trace_reader *r, int (*fn)(void *user, const bt_kv_access *row), void *user)
{
    bool have;
    int rc = table_exists(r, "kv_access", &have);
    if (rc || !have) return rc;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, "SELECT step, server_step, block, logical, mode, pos_lo, pos_hi, writer, writer_step, bad_step, "
                           "bad_by, note FROM kv_access ORDER BY step, mode, block", -1, &st, NULL) != SQLITE_OK)
        return db_fail(r, sqlite3_errcode(r->db), "reading kv_access");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        bt_kv_access a;
        memset(&a, 0, sizeof a);
        a.step = bt_col_int(st, 0);
        a.server_step = bt_col_int(st, 1);
        a.block = bt_col_int(st, 2);
        a.logical = bt_col_int(st, 3);
        snprintf(a.mode, sizeof a.mode, "%s", bt_col_text(st, 4) ? bt_col_text(st, 4) : "");
        a.pos_lo = bt_col_int(st, 5);
        a.pos_hi = bt_col_int(st, 6);
        snprintf(a.writer, sizeof a.writer, "%s", bt_col_text(st, 7) ? bt_col_text(st, 7) : "");
        a.writer_step = bt_col_int(st, 8);
        a.bad_step = bt_col_int(st, 9);
        snprintf(a.bad_by, sizeof a.bad_by, "%s", bt_col_text(st, 10) ? bt_col_text(st, 10) : "");
        snprintf(a.note, sizeof a.note, "%s", bt_col_text(st, 11) ? bt_col_text(st, 11) : "");
        int s2 = fn(user, &a);
        if (s2) { sqlite3_finalize(st); return s2 < 0 ? s2 : BT_OK; }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? BT_OK : db_fail(r, rc, "reading kv_access");
}

/* Every row; (op != NULL) the rows of one (step, layer, op); (op == NULL,
 * step >= 0) the rows of one step. */
static int kernels_query(bt_trace_reader *r, int step, int layer, const char *op,
                         int (*fn)(void *user, const bt_kernel_row *k), void *user)
{
    bool have;
    int rc = table_exists(r, "kernels", &have);
    if (rc || !have) return rc;
    sqlite3_stmt *s = NULL;
    const char *sql = !op && step >= 0
                      ? "SELECT step, layer, op, kind, name, grid, block, registers, shared_bytes, bytes,"
                        " start_ns, end_ns, stream, device FROM kernels WHERE step = ?1 ORDER BY start_ns, id"
                      : op ? "SELECT step, layer, op, kind, name, grid, block, registers, shared_bytes, bytes,"
                           " start_ns, end_ns, stream, device FROM kernels WHERE step = ?1 AND layer IS ?2 AND op = ?3"
                           " ORDER BY start_ns, id"
                         : "SELECT step, layer, op, kind, name, grid, block, registers, shared_bytes, bytes,"
                           " start_ns, end_ns, stream, device FROM kernels ORDER BY start_ns, id";
    if (sqlite3_prepare_v2(r->db, sql, -1, &s, NULL) != SQLITE_OK)
        return db_fail(r, sqlite3_errcode(r->db), "reading kernels");
    if (!op && step >= 0) sqlite3_bind_int(s, 1, step);
    if (op) {
        sqlite3_bind_int(s, 1, step);
        if (layer >= 0) sqlite3_bind_int(s, 2, layer); else sqlite3_bind_null(s, 2);
        sqlite3_bind_text(s, 3, op, -1, SQLITE_TRANSIENT);
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_kernel_row k;
        memset(&k, 0, sizeof k);
        k.step = bt_col_int(s, 0);
        k.layer = bt_col_int(s, 1);
        const char *op = bt_col_text(s, 2), *kind = bt_col_text(s, 3), *name = bt_col_text(s, 4);
        const char *grid = bt_col_text(s, 5), *block = bt_col_text(s, 6);
        snprintf(k.op, sizeof k.op, "%s", op ? op : "");
        /* kind points into a static table, never at the trace's text */
        k.kind = "?";
        for (int i = 0; i < BT_ACT_COUNT; i++) if (kind && !strcmp(kind, bt_act_kind_name(i))) k.kind = bt_act_kind_name(i);
        snprintf(k.name, sizeof k.name, "%s", name ? name : "?");
        if (!grid || sscanf(grid, "%d,%d,%d", &k.grid[0], &k.grid[1], &k.grid[2]) != 3) k.grid[0] = k.grid[1] = k.grid[2] = 0;
        if (!block || sscanf(block, "%d,%d,%d", &k.block[0], &k.block[1], &k.block[2]) != 3) k.block[0] = k.block[1] = k.block[2] = 0;
        k.registers = bt_col_int(s, 7);
        k.shared_bytes = bt_col_int(s, 8);
        k.bytes = sqlite3_column_type(s, 9) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 9);
        k.start_ns = sqlite3_column_int64(s, 10);
        k.end_ns = sqlite3_column_int64(s, 11);
        k.stream = sqlite3_column_int64(s, 12);
        k.device = sqlite3_column_int64(s, 13);
        int stop = fn(user, &k);
        if (stop) { sqlite3_finalize(s); return stop; }
    }
    int e = rc;
    sqlite3_finalize(s);
    return e == SQLITE_DONE ? BT_OK : db_fail(r, e, "reading kernels");
}

int bt_trace_kernels_each(bt_trace_reader *r, int (*fn)(void *user, const bt_kernel_row *k), void *user)
{
    return kernels_query(r, -1, 0, NULL, fn, user);
}

int bt_trace_kernels_step(bt_trace_reader *r, int step, int (*fn)(void *user, const bt_kernel_row *k), void *user)
{
    return step < 0 ? BT_OK : kernels_query(r, step, 0, NULL, fn, user);
}

int bt_trace_kernels_of(bt_trace_reader *r, int step, int layer, const char *op,
                        int (*fn)(void *user, const bt_kernel_row *k), void *user)
{
    return kernels_query(r, step, layer, op ? op : "", fn, user);
}

int bt_trace_op_timings_each(bt_trace_reader *r, int (*fn)(void *user, const bt_trace_op_timing_row *t), void *user)
{
    bool have;
    int rc = table_exists(r, "op_timings", &have);
    if (rc || !have) return rc;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT o.step, t.layer, t.op, t.name, o.start_ns, o.dur_ns FROM op_timings o"
                           " JOIN tensors t ON t.model = o.model AND t.idx = o.idx ORDER BY o.step, o.start_ns",
                           -1, &s, NULL) != SQLITE_OK)
        return db_fail(r, sqlite3_errcode(r->db), "reading op_timings");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_op_timing_row t = {
            .step = bt_col_int(s, 0), .layer = bt_col_int(s, 1), .op = bt_col_text(s, 2), .tensor = bt_col_text(s, 3),
            .start_ns = sqlite3_column_int64(s, 4), .dur_ns = sqlite3_column_int64(s, 5),
        };
        if (!t.op) t.op = "?";
        if (!t.tensor) t.tensor = "?";
        int stop = fn(user, &t);
        if (stop) { sqlite3_finalize(s); return stop; }
    }
    int e = rc;
    sqlite3_finalize(s);
    return e == SQLITE_DONE ? BT_OK : db_fail(r, e, "reading op_timings");
}

int bt_trace_moe_routes_each(bt_trace_reader *r, int step, int (*fn)(void *user, const bt_trace_route_row *row),
                             void *user)
{
    bool have;
    int rc = table_exists(r, "moe_routes", &have);
    if (rc || !have) return rc;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT step, model, pos, layer, rank, expert, weight FROM moe_routes WHERE step = ?1"
                           " ORDER BY model, pos, layer, rank", -1, &s, NULL) != SQLITE_OK)
        return db_fail(r, sqlite3_errcode(r->db), "reading moe_routes");
    sqlite3_bind_int(s, 1, step);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        bt_trace_route_row row;
        const char *model = bt_col_text(s, 1);
        row.step = bt_col_int(s, 0);
        /* the model text is the trace's: only the two names we write pass */
        row.model = model && !strcmp(model, "draft") ? "draft" : "target";
        row.pos = bt_col_int(s, 2);
        row.layer = bt_col_int(s, 3);
        row.rank = bt_col_int(s, 4);
        row.expert = bt_col_int(s, 5);
        row.weight = sqlite3_column_type(s, 6) == SQLITE_TEXT ? strtod(bt_col_text(s, 6), NULL) : bt_col_real(s, 6);
        int stop = fn(user, &row);
        if (stop) { sqlite3_finalize(s); return stop < 0 ? stop : BT_OK; }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return db_fail(r, rc, "reading moe_routes");
    return BT_OK;
}
