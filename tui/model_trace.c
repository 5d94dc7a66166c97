/* model_trace.c - opening a trace for the browser: validation, the prepared
 * queries, the tensor tables and grids, per-tensor medians and the piece
 * cache.
 *
 * The trace is opened read-only (query_only too): the browser must never
 * change the evidence. Validation is cheap and happens before curses starts:
 * the SQLite header (NOTADB for garbage), application_id and user_version,
 * and preparing every query (a missing table or column fails here with the
 * SQLite message). Nothing scans a whole table. */
#include "model_impl.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE_CAP 65536          /* power of two; vocabularies above this share the cache */
#define PIECE_SPAN 2048          /* rows either side of a step harvested for pieces */

static const char *const query_sql[Q_COUNT] = {
    [Q_TOK_WINDOW] = "SELECT seq, step, pos, token_id, piece, role FROM tokens WHERE seq >= ?1 AND role != 'draft' "
                     "ORDER BY seq LIMIT ?2",
    [Q_TOK_RUN_END] = "SELECT seq FROM tokens WHERE seq > ?1 AND role != 'draft' AND "
                      "(token_id != ?2 OR (role = 'prompt') != ?3) ORDER BY seq LIMIT 1",
    [Q_TOK_RUN_START] = "SELECT seq FROM tokens WHERE seq < ?1 AND role != 'draft' AND "
                        "(token_id != ?2 OR (role = 'prompt') != ?3) ORDER BY seq DESC LIMIT 1",
    [Q_TOK_COUNT_RANGE] = "SELECT count(*), min(step), max(step), min(pos) FROM tokens WHERE seq BETWEEN ?1 AND ?2 "
                           "AND role != 'draft'",
    [Q_TOK_SEARCH_FWD] = "SELECT seq FROM tokens WHERE seq > ?1 AND instr(piece, ?2) > 0 AND role != 'draft' "
                          "ORDER BY seq LIMIT 1",
    [Q_TOK_SEARCH_BACK] = "SELECT seq FROM tokens WHERE seq < ?1 AND instr(piece, ?2) > 0 AND role != 'draft' "
                           "ORDER BY seq DESC LIMIT 1",
    [Q_TOK_STEP_SEQ] = "SELECT seq FROM tokens WHERE step = ?1 ORDER BY role = 'draft', seq LIMIT 1",
    [Q_TOK_STEP_GEN] = "SELECT token_id, piece, logprob, seq FROM tokens WHERE step = ?1 AND role IN ('gen', 'bonus') ORDER BY seq LIMIT 1",
    [Q_TOK_PIECES] = "SELECT token_id, piece FROM tokens WHERE seq BETWEEN ?1 AND ?2",
    [Q_LOGITS_BAD_RANGE] = "SELECT DISTINCT l.step FROM logits l JOIN steps s ON s.step = l.step "
                            "WHERE l.step BETWEEN ?1 AND ?2 AND l.nan + l.pinf + l.ninf > 0 AND s.model != 'draft'",
    [Q_EVENTS_DEGEN] = "SELECT step, kind FROM events WHERE kind IN ('repetition_loop', 'token_wall') AND step BETWEEN ?1 AND ?2",
    [Q_STEP] = "SELECT model, kind, pos0, n_pos, ms FROM steps WHERE step = ?1",
    [Q_BLOB] = "SELECT stats FROM tap_blobs WHERE step = ?1",
    [Q_BLOB_AT_OR_AFTER] = "SELECT b.step, b.stats FROM tap_blobs b JOIN steps s ON s.step = b.step "
                           "WHERE b.step >= ?1 AND s.model = ?2 ORDER BY b.step LIMIT 1",
    [Q_BAD_STEP] = "SELECT idx, nan, pinf, ninf, first_bad_index, first_bad_pos, min, max, mean, rms "
                   "FROM tap_bad WHERE step = ?1 AND model = ?2 ORDER BY idx",
    [Q_LOGITS_STEP] = "SELECT pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, argmax_triton, "
                      "rule, chosen, entropy, topk_ids, topk_vals FROM logits WHERE step = ?1 ORDER BY pos DESC LIMIT 1",
    [Q_BAD_FIRST_STEP] = "SELECT min(step) FROM tap_bad",
    [Q_BAD_LAST_STEP] = "SELECT max(step) FROM tap_bad",
    [Q_BAD_NEXT_STEP] = "SELECT step FROM tap_bad WHERE step > ?1 ORDER BY step LIMIT 1",
    [Q_EVENT_FIRST] = "SELECT step, pos, layer, op, tensor, detail FROM events WHERE kind = ?1 ORDER BY step, id LIMIT 1",
    [Q_META] = "SELECT key, value FROM meta",
    [Q_EVENTS] = "SELECT id, step, pos, kind, layer, op, tensor, detail FROM events ORDER BY id LIMIT ?1",
    [Q_BACKTRACES] = "SELECT id, event_id, step, kind, frames FROM backtraces ORDER BY id LIMIT 16",
    [Q_LOGITS_AT] = "SELECT pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, argmax_triton, "
                    "rule, chosen, entropy, topk_ids, topk_vals FROM logits WHERE step = ?1 AND pos = ?2",
    [Q_TOK_STEP_POS_GEN] = "SELECT token_id, piece, logprob, seq FROM tokens WHERE step = ?1 AND pos = ?2 "
                           "AND role IN ('gen', 'bonus') ORDER BY seq LIMIT 1",
};

static const char *const spec_sql[SQ_COUNT] = {
    [SQ_FIRST] = "SELECT step FROM spec_steps ORDER BY step LIMIT 1",
    [SQ_LAST] = "SELECT step FROM spec_steps ORDER BY step DESC LIMIT 1",
    [SQ_ROWS_FWD] = "SELECT step, drafter, k, accepted, bonus_token, bonus_kind FROM spec_steps "
                    "WHERE step >= ?1 ORDER BY step LIMIT ?2",
    [SQ_ROWS_BACK] = "SELECT step, drafter, k, accepted, bonus_token, bonus_kind FROM spec_steps "
                     "WHERE step <= ?1 ORDER BY step DESC LIMIT ?2",
    [SQ_TRAIL] = "SELECT step, draft_idx, draft_pos, draft_step, draft_token, draft_prob, draft_finite, "
                 "target_token, target_prob, accepted, reason FROM spec_trail "
                 "WHERE step BETWEEN ?1 AND ?2 ORDER BY step, draft_idx",
    [SQ_SAMPLE] = "SELECT accepted, k FROM spec_steps WHERE step BETWEEN ?1 AND ?2 ORDER BY step LIMIT ?3",
    [SQ_HEAD] = "SELECT step, accepted, k FROM spec_steps ORDER BY step LIMIT ?1",
    [SQ_REJECT_FWD] = "SELECT step FROM spec_trail WHERE step > ?1 AND accepted = 0 AND "
                      "coalesce(reason, '') NOT IN ('after_reject', 'after_stop') ORDER BY step LIMIT 1",
    [SQ_REJECT_BACK] = "SELECT step FROM spec_trail WHERE step < ?1 AND accepted = 0 AND "
                       "coalesce(reason, '') NOT IN ('after_reject', 'after_stop') ORDER BY step DESC LIMIT 1",
    [SQ_META_KEY] = "SELECT value FROM meta WHERE key = ?1",
};

sqlite3_stmt *tui_sq(tui_trace *tr, int q)
{
    sqlite3_stmt *s = tr->sq[q];
    if (!s) return NULL;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

static const char *const required_tables[] = {
    "meta", "tensors", "steps", "tap_blobs", "tap_bad", "tokens", "logits", "events", "backtraces",
};

sqlite3_stmt *tui_q(tui_trace *tr, int q)
{
    sqlite3_stmt *s = tr->q[q];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

int tui_db_error(tui_trace *tr, const char *what)
{
    return bt_error(BT_EIO, "%s: %s: %s", tr->path, what, sqlite3_errmsg(tr->db));
}

const char *tui_trace_path(const tui_trace *tr) { return tr->path; }

void tui_trace_bounds(const tui_trace *tr, int *min_step, int *max_step, int64_t *min_seq, int64_t *max_seq)
{
    if (min_step) *min_step = tr->min_step;
    if (max_step) *max_step = tr->max_step;
    if (min_seq) *min_seq = tr->min_seq;
    if (max_seq) *max_seq = tr->max_seq;
}

static int scalar_int(tui_trace *tr, const char *sql, int64_t *out, bool *is_null)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(tr->db, sql, -1, &s, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        int e = bt_error(BT_EFORMAT, "%s: corrupt or unreadable trace (SQLite: %s)", tr->path, sqlite3_errmsg(tr->db));
        sqlite3_finalize(s);
        return e;
    }
    if (is_null) *is_null = sqlite3_column_type(s, 0) == SQLITE_NULL;
    *out = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return BT_OK;
}

tui_model_tab *tui_model_tab_get(tui_trace *tr, const char *model)
{
    for (int i = 0; i < tr->n_models; i++)
        if (!strcmp(tr->models[i].name, model)) return &tr->models[i];
    return NULL;
}

static int load_tensors(tui_trace *tr)
{
    sqlite3_stmt *s = NULL;
    const char *sql = "SELECT model, idx, name, layer, op, width FROM tensors ORDER BY model, idx";
    if (sqlite3_prepare_v2(tr->db, sql, -1, &s, NULL) != SQLITE_OK) return tui_db_error(tr, "reading tensors");
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *model = (const char *)sqlite3_column_text(s, 0);
        if (!model) model = "target";
        tui_model_tab *m = tui_model_tab_get(tr, model);
        if (!m) {
            if (tr->n_models == (int)BT_ARRAY_SIZE(tr->models)) continue;
            m = &tr->models[tr->n_models++];
            snprintf(m->name, sizeof m->name, "%s", model);
        }
        if (m->n % 64 == 0) {
            tui_tensor *nt = realloc(m->t, sizeof(*nt) * (m->n + 64));
            if (!nt) { sqlite3_finalize(s); return bt_error(BT_ENOMEM, "out of memory reading tensors"); }
            m->t = nt;
        }
        tui_tensor *t = &m->t[m->n];
        memset(t, 0, sizeof(*t));
        int64_t idx = sqlite3_column_int64(s, 1);
        if (idx < 0 || idx > 1000000) {
            sqlite3_finalize(s);
            return bt_error(BT_EFORMAT, "%s: tensors: idx %lld out of range", tr->path, (long long)idx);
        }
        t->idx = (int)idx;
        snprintf(t->name, sizeof t->name, "%s", sqlite3_column_text(s, 2) ? (const char *)sqlite3_column_text(s, 2) : "?");
        t->layer = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 3);
        snprintf(t->op, sizeof t->op, "%s", sqlite3_column_text(s, 4) ? (const char *)sqlite3_column_text(s, 4) : "?");
        t->width = sqlite3_column_int(s, 5);
        if (t->idx + 1 > m->n_slots) m->n_slots = t->idx + 1;
        m->n++;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return tui_db_error(tr, "reading tensors");
    for (int i = 0; i < tr->n_models; i++) {
        tui_model_tab *m = &tr->models[i];
        m->slot = malloc(sizeof(int) * (m->n_slots ? m->n_slots : 1));
        if (!m->slot) return bt_error(BT_ENOMEM, "out of memory reading tensors");
        for (int k = 0; k < m->n_slots; k++) m->slot[k] = -1;
        for (int k = 0; k < m->n; k++) m->slot[m->t[k].idx] = k;
        int rc2 = tui_grid_build(m->t, m->n, &m->grid);
        if (rc2) return bt_error(rc2, "%s: %s", tr->path, bt_errmsg());
    }
    return BT_OK;
}

int tui_trace_open(const char *path, tui_trace **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return bt_error(BT_EIO, "%s: not a regular file", path);
    if (sb.st_size == 0) return bt_error(BT_EFORMAT, "%s: not a bangtrace trace (empty file)", path);

    tui_trace *tr = calloc(1, sizeof(*tr));
    if (!tr) return bt_error(BT_ENOMEM, "out of memory");
    tr->path = strdup(path);
    tr->min_step = tr->max_step = -1;
    tr->min_seq = tr->max_seq = -1;
    int rc;
    if (!tr->path) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    /* A trace that was closed cleanly has no -wal file: open it immutable, so
     * reading leaves no -wal/-shm files beside the evidence and takes no
     * locks. A trace still being written (or killed) keeps its WAL: read it
     * normally so the last committed steps are seen. */
    char *uri = NULL;
    {
        size_t n = strlen(path);
        char *wal = malloc(n + 5);
        uri = malloc(n * 3 + 32);
        if (!wal || !uri) { free(wal); free(uri); rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        snprintf(wal, n + 5, "%s-wal", path);
        bool live = access(wal, F_OK) == 0;
        free(wal);
        size_t o = 0;
        o += (size_t)sprintf(uri, "file:");
        for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
            if (*c == '%' || *c == '?' || *c == '#') o += (size_t)sprintf(uri + o, "%%%02X", *c);
            else uri[o++] = (char)*c;
        }
        sprintf(uri + o, "%s", live ? "?mode=ro" : "?immutable=1");
    }
    rc = sqlite3_open_v2(uri, &tr->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: cannot open: %s", path, tr->db ? sqlite3_errmsg(tr->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(tr->db, 2000);     /* a trace still being written holds brief locks */

    int64_t app_id = 0, version = 0;
    {
        sqlite3_stmt *s = NULL;
        rc = sqlite3_prepare_v2(tr->db, "PRAGMA application_id", -1, &s, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
            int code = sqlite3_errcode(tr->db);
            rc = bt_error(code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? BT_EFORMAT : BT_EIO,
                          "%s: not a bangtrace trace (SQLite: %s)", path, sqlite3_errmsg(tr->db));
            sqlite3_finalize(s);
            goto fail;
        }
        app_id = sqlite3_column_int64(s, 0) & 0xffffffff;
        sqlite3_finalize(s);
    }
    if ((rc = scalar_int(tr, "PRAGMA user_version", &version, NULL))) goto fail;
    if (app_id != TUI_APPLICATION_ID && app_id != 0) {
        rc = bt_error(BT_EFORMAT, "%s: not a bangtrace trace (SQLite application_id 0x%08llx, expected 0x%08x)",
                      path, (long long)app_id, TUI_APPLICATION_ID);
        goto fail;
    }
    for (size_t i = 0; i < BT_ARRAY_SIZE(required_tables); i++) {
        sqlite3_stmt *s = NULL;
        rc = sqlite3_prepare_v2(tr->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &s, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(s, 1, required_tables[i], -1, SQLITE_STATIC);
            rc = sqlite3_step(s);
        }
        sqlite3_finalize(s);
        if (rc == SQLITE_DONE) {
            rc = bt_error(BT_EFORMAT, "%s: not a bangtrace trace (no '%s' table%s)", path, required_tables[i],
                          app_id == 0 ? ", no bangtrace application_id" : "");
            goto fail;
        }
        if (rc != SQLITE_ROW) {
            int code = sqlite3_errcode(tr->db);
            rc = bt_error(code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? BT_EFORMAT : BT_EIO,
                          "%s: not a readable trace (SQLite: %s)", path, sqlite3_errmsg(tr->db));
            goto fail;
        }
    }
    if (version != TUI_SCHEMA_VERSION) {
        rc = version > TUI_SCHEMA_VERSION
                 ? bt_error(BT_EUNSUPPORTED, "%s: trace schema version %lld is newer than this browser (%d); upgrade bangtrace",
                            path, (long long)version, TUI_SCHEMA_VERSION)
                 : bt_error(BT_EFORMAT, "%s: trace schema version %lld (PRAGMA user_version), expected %d",
                            path, (long long)version, TUI_SCHEMA_VERSION);
        goto fail;
    }
    sqlite3_exec(tr->db, "PRAGMA query_only = 1", NULL, NULL, NULL);
    for (int i = 0; i < Q_COUNT; i++) {
        if (sqlite3_prepare_v3(tr->db, query_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &tr->q[i], NULL) != SQLITE_OK) {
            rc = bt_error(BT_EFORMAT, "%s: unexpected trace schema: %s", path, sqlite3_errmsg(tr->db));
            goto fail;
        }
    }
    if ((rc = load_tensors(tr))) goto fail;
    {   /* speculative tables are optional (traces written before them) */
        sqlite3_stmt *s = NULL;
        bool has = false;
        if (sqlite3_prepare_v2(tr->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'spec_steps'", -1, &s, NULL) == SQLITE_OK)
            has = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
        for (int i = 0; has && i < SQ_COUNT; i++) {
            if (sqlite3_prepare_v3(tr->db, spec_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &tr->sq[i], NULL) != SQLITE_OK) {
                rc = bt_error(BT_EFORMAT, "%s: unexpected speculative tables: %s", path, sqlite3_errmsg(tr->db));
                goto fail;
            }
        }
        if (!has) tr->spec_state = -1;
    }

    int64_t v;
    bool null;
    if ((rc = scalar_int(tr, "SELECT min(step) FROM steps", &v, &null))) goto fail;
    if (!null) tr->min_step = (int)v;
    if ((rc = scalar_int(tr, "SELECT max(step) FROM steps", &v, &null))) goto fail;
    if (!null) tr->max_step = (int)v;
    /* The text is prompt + output; drafted tokens (speculative traces) are
     * not part of it. Both ends are rowid scans that stop at the first
     * non-draft row. */
    if ((rc = scalar_int(tr, "SELECT (SELECT seq FROM tokens WHERE role != 'draft' ORDER BY seq LIMIT 1)", &v, &null))) goto fail;
    if (!null) tr->min_seq = v;
    if ((rc = scalar_int(tr, "SELECT (SELECT seq FROM tokens WHERE role != 'draft' ORDER BY seq DESC LIMIT 1)", &v, &null))) goto fail;
    if (!null) tr->max_seq = v;
    tr->pieces = calloc(PIECE_CAP, sizeof(*tr->pieces));
    if (!tr->pieces) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < PIECE_CAP; i++) tr->pieces[i].id = -1;
    tr->pieces_lo = 1;
    tr->pieces_hi = 0;
    *out = tr;
    return BT_OK;
fail:
    tui_trace_close(tr);
    return rc;
}

void tui_trace_close(tui_trace *tr)
{
    if (!tr) return;
    for (int i = 0; i < Q_COUNT; i++) sqlite3_finalize(tr->q[i]);
    for (int i = 0; i < SQ_COUNT; i++) sqlite3_finalize(tr->sq[i]);
    if (tr->db) sqlite3_close(tr->db);
    for (int i = 0; i < tr->n_models; i++) {
        tui_model_tab *m = &tr->models[i];
        free(m->t);
        free(m->slot);
        free(m->median);
        tui_grid_free(&m->grid);
    }
    if (tr->pieces)
        for (int i = 0; i < PIECE_CAP; i++) free(tr->pieces[i].piece);
    free(tr->pieces);
    free(tr->path);
    free(tr);
}

const tui_tensor *tui_trace_tensors(tui_trace *tr, const char *model, int *n)
{
    tui_model_tab *m = tui_model_tab_get(tr, model);
    *n = m ? m->n : 0;
    return m ? m->t : NULL;
}

const tui_grid *tui_trace_grid(tui_trace *tr, const char *model)
{
    tui_model_tab *m = tui_model_tab_get(tr, model);
    return m ? &m->grid : NULL;
}

void tui_blob_decode(const void *blob, int bytes, tui_tap *taps, int n_slots)
{
    const unsigned char *b = blob;
    for (int i = 0; i < n_slots; i++) {
        tui_tap *t = &taps[i];
        if (!b || (i + 1) * 8 > bytes) { t->present = false; continue; }
        const unsigned char *p = b + i * 8;
        t->present = true;
        t->min = tui_bf16(p[0] | p[1] << 8);
        t->max = tui_bf16(p[2] | p[3] << 8);
        t->mean = tui_bf16(p[4] | p[5] << 8);
        t->rms = tui_bf16(p[6] | p[7] << 8);
        t->absmax = isnan(t->min) || isnan(t->max) ? NAN : fmaxf(fabsf(t->min), fabsf(t->max));
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Sample evenly spaced steps (not the first N: the start of a trace is the
 * prompt and says little about the steady state), one indexed blob lookup
 * each, and take the median absmax of every slot. */
static int compute_medians(tui_trace *tr, tui_model_tab *m)
{
    int ns = m->n_slots;
    m->median = malloc(sizeof(float) * (ns ? ns : 1));
    float *vals = malloc(sizeof(float) * (size_t)(ns ? ns : 1) * TUI_MEDIAN_SAMPLES);
    int *cnt = calloc(ns ? ns : 1, sizeof(int));
    tui_tap *taps = calloc(ns ? ns : 1, sizeof(tui_tap));
    int rc = BT_OK;
    if (!m->median || !vals || !cnt || !taps) { rc = bt_error(BT_ENOMEM, "out of memory for medians"); goto done; }
    for (int i = 0; i < ns; i++) m->median[i] = NAN;
    if (tr->min_step >= 0) {
        int64_t span = (int64_t)tr->max_step - tr->min_step;
        int n = span + 1 < TUI_MEDIAN_SAMPLES ? (int)span + 1 : TUI_MEDIAN_SAMPLES;
        int64_t last = -1;
        for (int k = 0; k < n; k++) {
            int64_t want = tr->min_step + (n > 1 ? span * k / (n - 1) : 0);
            if (want <= last) want = last + 1;
            sqlite3_stmt *s = tui_q(tr, Q_BLOB_AT_OR_AFTER);
            sqlite3_bind_int64(s, 1, want);
            sqlite3_bind_text(s, 2, m->name, -1, SQLITE_STATIC);
            int r = sqlite3_step(s);
            if (r == SQLITE_DONE) break;
            if (r != SQLITE_ROW) { rc = tui_db_error(tr, "sampling tap_blobs"); goto done; }
            last = sqlite3_column_int64(s, 0);
            tui_blob_decode(sqlite3_column_blob(s, 1), sqlite3_column_bytes(s, 1), taps, ns);
            for (int i = 0; i < ns; i++)
                if (taps[i].present && !isnan(taps[i].absmax) && cnt[i] < TUI_MEDIAN_SAMPLES)
                    vals[(size_t)i * TUI_MEDIAN_SAMPLES + cnt[i]++] = taps[i].absmax;
        }
        sqlite3_reset(tr->q[Q_BLOB_AT_OR_AFTER]);
    }
    for (int i = 0; i < ns; i++) {
        if (!cnt[i]) continue;
        float *v = vals + (size_t)i * TUI_MEDIAN_SAMPLES;
        qsort(v, cnt[i], sizeof(float), cmp_float);
        m->median[i] = cnt[i] % 2 ? v[cnt[i] / 2] : 0.5f * (v[cnt[i] / 2 - 1] + v[cnt[i] / 2]);
    }
done:
    free(vals);
    free(cnt);
    free(taps);
    if (rc) { free(m->median); m->median = NULL; }
    return rc;
}

const float *tui_trace_medians(tui_trace *tr, const char *model)
{
    tui_model_tab *m = tui_model_tab_get(tr, model);
    if (!m) return NULL;
    if (!m->median && compute_medians(tr, m) != BT_OK) return NULL;
    return m->median;
}

static unsigned piece_hash(int id) { return ((unsigned)id * 2654435761u) & (PIECE_CAP - 1); }

void tui_piece_put(tui_trace *tr, int id, const char *piece, int len)
{
    if (id < 0 || !piece || tr->n_pieces >= PIECE_CAP * 3 / 4) return;
    unsigned h = piece_hash(id);
    while (tr->pieces[h].id >= 0) {
        if (tr->pieces[h].id == id) return;
        h = (h + 1) & (PIECE_CAP - 1);
    }
    char *p = malloc(len + 1);
    if (!p) return;
    memcpy(p, piece, len);
    p[len] = 0;
    tr->pieces[h] = (tui_piece_ent){ id, len, p };
    tr->n_pieces++;
}

static const tui_piece_ent *piece_get(tui_trace *tr, int id)
{
    unsigned h = piece_hash(id);
    while (tr->pieces[h].id >= 0) {
        if (tr->pieces[h].id == id) return &tr->pieces[h];
        h = (h + 1) & (PIECE_CAP - 1);
    }
    return NULL;
}

const char *tui_trace_piece(tui_trace *tr, int id, int64_t near_seq, int *len)
{
    const tui_piece_ent *e = piece_get(tr, id);
    if (!e && near_seq >= 0 && !(near_seq >= tr->pieces_lo && near_seq <= tr->pieces_hi)) {
        int64_t lo = near_seq - PIECE_SPAN, hi = near_seq + PIECE_SPAN;
        sqlite3_stmt *s = tui_q(tr, Q_TOK_PIECES);
        sqlite3_bind_int64(s, 1, lo);
        sqlite3_bind_int64(s, 2, hi);
        while (sqlite3_step(s) == SQLITE_ROW)
            if (sqlite3_column_type(s, 1) != SQLITE_NULL)
                tui_piece_put(tr, sqlite3_column_int(s, 0), (const char *)sqlite3_column_blob(s, 1), sqlite3_column_bytes(s, 1));
        sqlite3_reset(s);
        tr->pieces_lo = lo;
        tr->pieces_hi = hi;
        e = piece_get(tr, id);
    }
    if (!e) return NULL;
    if (len) *len = e->len;
    return e->piece;
}

int64_t tui_trace_step_seq(tui_trace *tr, int step)
{
    sqlite3_stmt *s = tui_q(tr, Q_TOK_STEP_SEQ);
    sqlite3_bind_int(s, 1, step);
    int64_t seq = -1;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) seq = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return seq;
}
