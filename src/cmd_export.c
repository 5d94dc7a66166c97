/* cmd_export.c - `bangtrace export TRACE -o OUT [--redact] [--window K]`:
 * a copy of a trace that can be attached to a public issue.
 *
 * The copy is built row by row into a fresh file (never copied page by page
 * and then scrubbed), so redacted text is never written to OUT at all: no
 * freed page, journal or WAL of OUT can hold it. The build goes to
 * OUT.partial with no journal and is renamed over OUT at the end, so OUT
 * is either absent or complete; it is a single rollback-mode file (no -wal
 * or -shm beside it). The source is opened read-only (SQLite URI mode=ro):
 * exporting never modifies the evidence, not even by checkpointing its WAL.
 *
 * Redaction removes prompt text, token pieces and the request JSON: meta
 * request_json / prompt_text / prompt / messages become "[redacted]"; in
 * meta argv the argument after --prompt (and any argument containing the
 * prompt text) does; any other meta value containing the prompt text does;
 * tokens.piece becomes NULL; quoted token text in event details (`...`,
 * "...", ('...')) and any occurrence of the prompt text there become an
 * ellipsis. Ids, statistics,
 * logits, backtraces and the rest of meta stay. */
#include "cmd.h"
#include "trace/reader.h"
#include "sys/outfile.h"
#include "trace/trace.h"
#include "text.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REDACTED "[redacted]"

void cmd_export_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace export TRACE -o OUT [--redact] [--window K | --all-steps] [--force]\n\n"
        "Write a copy of a trace for sharing (an upstream issue, a colleague).\n\n"
        "  -o, --output OUT  the new trace file (refuses to replace an existing file\n"
        "                    unless --force)\n"
        "  --redact          remove the prompt text, every token's text piece and the\n"
        "                    request JSON: meta request_json, prompt_text, prompt and\n"
        "                    messages, the --prompt argument in meta argv, quoted token\n"
        "                    text in event details. Token ids, tap statistics, logits,\n"
        "                    events and backtraces stay, so bisect and report still work.\n"
        "  --window K        keep only the steps within K of the first bad step (the\n"
        "                    first non-finite tap, non-finite logits or event); default\n"
        "                    16. A clean trace keeps every step. The token trail, events\n"
        "                    and backtraces are always kept whole; a speculative trace's\n"
        "                    spec_steps and spec_trail (ids and probabilities, no text:\n"
        "                    --redact keeps them) follow the window of their verify step.\n"
        "  --all-steps       keep every step\n"
        "  --force           replace OUT if it exists\n\n"
        "The copy is rebuilt row by row and vacuumed: no byte of removed text remains\n"
        "in OUT, and OUT is a single file (no -wal/-shm). The source is opened\n"
        "read-only and never modified.\n\n"
        "Exit status: 0 written, 2 error (missing file, not a trace, OUT exists, ...).\n");
}

typedef struct export_opts {
    const char *in, *out;
    bool redact, force, all_steps;
    long window;
} export_opts;

static int parse_args(int argc, char **argv, export_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->window = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) return bt_error(BT_EINVAL, "%s needs a value", a);
            o->out = v;
            i++;
        } else if (!strcmp(a, "--window")) {
            if (!v) return bt_error(BT_EINVAL, "%s needs a value", a);
            int rc = bt_parse_int("--window", v, 0, INT_MAX / 4, &o->window);
            if (rc) return rc;
            i++;
        } else if (!strcmp(a, "--redact")) o->redact = true;
        else if (!strcmp(a, "--force")) o->force = true;
        else if (!strcmp(a, "--all-steps")) o->all_steps = true;
        else if (a[0] == '-' && a[1]) return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help export)", a);
        else if (!o->in) o->in = a;
        else return bt_error(BT_EINVAL, "unexpected argument '%s' (one TRACE only; see bangtrace help export)", a);
    }
    if (!o->in) return bt_error(BT_EINVAL, "no TRACE given (see bangtrace help export)");
    if (!o->out) return bt_error(BT_EINVAL, "-o OUT is required (see bangtrace help export)");
    return BT_OK;
}

/* ---- redaction helpers ---- */

typedef struct redactor {
    const char *prompt;          /* meta prompt_text (NULL or "" when unknown) */
    size_t prompt_len;
} redactor;

static bool has_prompt(const redactor *rd, const char *s, size_t min_len)
{
    return rd->prompt && rd->prompt_len >= min_len && s && strstr(s, rd->prompt);
}

/* Event details quote token text as `...`, "..." or ('...') (the detectors'
 * form; a piece may itself hold an apostrophe, so that one closes at "')").
 * Quoted spans and any occurrence of the prompt become an ellipsis.
 * Returns a malloc'd string. */
static char *redact_detail(const redactor *rd, const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 3 + 4), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        if (rd->prompt && rd->prompt_len > 0 && !strncmp(s + i, rd->prompt, rd->prompt_len)) {
            o += sprintf(o, "\xe2\x80\xa6");
            i += rd->prompt_len;
            continue;
        }
        const char *end = NULL;
        if (!strncmp(s + i, "('", 2) && (end = strstr(s + i + 2, "')"))) {
            o += sprintf(o, "('\xe2\x80\xa6')");
            i = end - s + 2;
            continue;
        }
        char q = s[i];
        if ((q == '`' || q == '"') && (end = strchr(s + i + 1, q))) {
            o += sprintf(o, "%c\xe2\x80\xa6%c", q, q);
            i = end - s + 1;
            continue;
        }
        *o++ = s[i++];
    }
    *o = 0;
    return out;
}

static void sql_redact_detail(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const char *s = (const char *)sqlite3_value_text(argv[0]);
    if (!s) { sqlite3_result_null(ctx); return; }
    char *r = redact_detail(sqlite3_user_data(ctx), s);
    if (!r) { sqlite3_result_error_nomem(ctx); return; }
    sqlite3_result_text(ctx, r, -1, free);
}

/* argv (a JSON array of strings): the value after a text-carrying flag and
 * any element holding the prompt text become "[redacted]". Returns malloc'd. */
static char *redact_argv(const redactor *rd, const char *value)
{
    static const char *const text_flags[] = { "--prompt", "-p", "--system", "--stop" };
    json_error_t err;
    json_t *a = json_loads(value, 0, &err);
    if (!a || !json_is_array(a)) { json_decref(a); return strdup(REDACTED); }
    bool next = false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) continue;
        bool flag = false;
        for (size_t f = 0; f < BT_ARRAY_SIZE(text_flags); f++) {
            size_t fl = strlen(text_flags[f]);
            if (!strcmp(s, text_flags[f])) flag = true;
            else if (!strncmp(s, text_flags[f], fl) && s[fl] == '=') {
                char buf[64];
                snprintf(buf, sizeof buf, "%s=" REDACTED, text_flags[f]);
                json_array_set_new(a, i, json_string(buf));
                s = NULL;
                break;
            }
        }
        if (s && (next || has_prompt(rd, s, 1))) json_array_set_new(a, i, json_string(REDACTED));
        next = flag;
    }
    char *out = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return out;
}

static bool text_key(const char *key)
{
    static const char *const keys[] = { "request_json", "prompt_text", "prompt", "messages", "request" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(keys); i++)
        if (!strcmp(key, keys[i])) return true;
    return false;
}

/* ---- the copy ---- */

typedef struct exporter {
    const export_opts *o;
    sqlite3 *db;
    const char *tmp;
    redactor rd;
    bool has_spec_tables;        /* the source has spec_steps and spec_trail */
} exporter;

static int db_err(exporter *x, const char *what)
{
    return bt_error(BT_EIO, "%s: %s: %s", x->o->out, what, sqlite3_errmsg(x->db));
}

static int exec(exporter *x, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(x->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = bt_error(BT_EIO, "%s: %s", x->o->out, err ? err : sqlite3_errmsg(x->db));
        sqlite3_free(err);
        return rc;
    }
    return BT_OK;
}

/* "file:" URI for a path, read-only (percent-encodes what URIs reserve). */
static char *ro_uri(const char *path)
{
    size_t n = strlen(path);
    char *u = malloc(n * 3 + 32), *p = u;
    if (!u) return NULL;
    p += sprintf(p, "file:");
    for (const unsigned char *s = (const unsigned char *)path; *s; s++) {
        if (*s == '%' || *s == '?' || *s == '#' || *s < 0x21 || *s >= 0x7f) p += sprintf(p, "%%%02X", *s);
        else *p++ = (char)*s;
    }
    strcpy(p, "?mode=ro");
    return u;
}

/* Recreate the source's tables, indexes and views in main (tables first). */
static int copy_schema(exporter *x)
{
    static const char *const q =
        "SELECT sql FROM src.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
        "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, rowid";
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(x->db, q, -1, &s, NULL) != SQLITE_OK) return db_err(x, "reading the source schema");
    int rc = BT_OK;
    while (sqlite3_step(s) == SQLITE_ROW && !rc)
        rc = exec(x, (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return rc;
}

static int copy_meta(exporter *x, const char *window)
{
    sqlite3_stmt *s, *ins;
    if (sqlite3_prepare_v2(x->db, "SELECT key, value FROM src.meta", -1, &s, NULL) != SQLITE_OK)
        return db_err(x, "reading meta");
    if (sqlite3_prepare_v2(x->db, "INSERT OR REPLACE INTO main.meta(key, value) VALUES (?1, ?2)", -1, &ins, NULL) != SQLITE_OK) {
        sqlite3_finalize(s);
        return db_err(x, "writing meta");
    }
    int rc = BT_OK;
    while (!rc && sqlite3_step(s) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(s, 0);
        const char *val = (const char *)sqlite3_column_text(s, 1);
        char *owned = NULL;
        if (!key) continue;
        if (x->o->redact && val) {
            if (text_key(key)) val = REDACTED;
            else if (!strcmp(key, "argv")) val = owned = redact_argv(&x->rd, val);
            else if (has_prompt(&x->rd, val, 4)) val = REDACTED;
            if (!val) { rc = bt_error(BT_ENOMEM, "out of memory"); break; }
        }
        sqlite3_bind_text(ins, 1, key, -1, SQLITE_TRANSIENT);
        if (val) sqlite3_bind_text(ins, 2, val, -1, SQLITE_TRANSIENT);
        else sqlite3_bind_null(ins, 2);
        if (sqlite3_step(ins) != SQLITE_DONE) rc = db_err(x, "writing meta");
        sqlite3_reset(ins);
        free(owned);
    }
    sqlite3_finalize(s);
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *base = strrchr(x->o->in, '/');
    const char *extra[][2] = {
        { "exported_at", now }, { "export_source", base ? base + 1 : x->o->in },
        { "export_window", window }, { "redacted", x->o->redact ? "yes" : "no" },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(extra) && !rc; i++) {
        sqlite3_bind_text(ins, 1, extra[i][0], -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 2, extra[i][1], -1, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) rc = db_err(x, "writing meta");
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    return rc;
}

static int copy_rows(exporter *x, int lo, int hi, bool windowed)
{
    char where[96] = "";
    if (windowed) snprintf(where, sizeof where, " WHERE step BETWEEN %d AND %d", lo, hi);
    char sql[512];
    static const char *const stepped[] = { "steps", "tap_blobs", "tap_bad", "logits", "logit_rows" };
    static const char *const whole[] = { "tensors", "backtraces" };
    int rc = BT_OK;
    for (size_t i = 0; i < BT_ARRAY_SIZE(stepped) && !rc; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO main.%s SELECT * FROM src.%s%s", stepped[i], stepped[i], where);
        rc = exec(x, sql);
    }
    for (size_t i = 0; i < BT_ARRAY_SIZE(whole) && !rc; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO main.%s SELECT * FROM src.%s", whole[i], whole[i]);
        rc = exec(x, sql);
    }
    /* Speculative decoding (absent from older traces): ids, probabilities
     * and reasons only, no text, so --redact keeps them whole; windowed by
     * the verify step like the other per-step tables. */
    static const char *const spec[] = { "spec_steps", "spec_trail" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(spec) && !rc; i++) {
        if (!x->has_spec_tables) break;
        snprintf(sql, sizeof sql, "INSERT INTO main.%s SELECT * FROM src.%s%s", spec[i], spec[i], where);
        rc = exec(x, sql);
    }
    if (rc) return rc;
    /* Explicit columns: the redacted ones are replaced, never copied. */
    rc = exec(x, x->o->redact
        ? "INSERT INTO main.tokens(seq, step, pos, token_id, piece, role, logprob, finish_reason)"
          " SELECT seq, step, pos, token_id, NULL, role, logprob, finish_reason FROM src.tokens"
        : "INSERT INTO main.tokens SELECT * FROM src.tokens");
    if (!rc) rc = exec(x, x->o->redact
        ? "INSERT INTO main.events(id, step, pos, kind, layer, op, tensor, detail)"
          " SELECT id, step, pos, kind, layer, op, tensor, bt_redact_detail(detail) FROM src.events"
        : "INSERT INTO main.events SELECT * FROM src.events");
    return rc;
}

/* Tables of the source that this version does not know: copied as they are,
 * except under --redact (they might hold text), where they stay empty. */
static int copy_unknown(exporter *x)
{
    static const char *const known[] = { "meta", "tensors", "steps", "tap_blobs", "tap_bad", "tokens", "logits",
                                         "logit_rows", "events", "backtraces", "spec_steps", "spec_trail" };
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(x->db, "SELECT name FROM src.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                           -1, &s, NULL) != SQLITE_OK)
        return db_err(x, "reading the source schema");
    int rc = BT_OK;
    while (!rc && sqlite3_step(s) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        bool k = false;
        for (size_t i = 0; i < BT_ARRAY_SIZE(known); i++) k |= !strcmp(name, known[i]);
        if (k) continue;
        if (x->o->redact) { bt_warn("export: table %s is not known to this version; left empty by --redact", name); continue; }
        char *sql = sqlite3_mprintf("INSERT INTO main.\"%w\" SELECT * FROM src.\"%w\"", name, name);
        rc = sql ? exec(x, sql) : bt_error(BT_ENOMEM, "out of memory");
        sqlite3_free(sql);
    }
    sqlite3_finalize(s);
    return rc;
}

static int spec_tables(exporter *x)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(x->db, "SELECT count(*) FROM src.sqlite_master WHERE type = 'table'"
                           " AND name IN ('spec_steps', 'spec_trail')", -1, &s, NULL) != SQLITE_OK)
        return db_err(x, "reading the source schema");
    x->has_spec_tables = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == 2;
    sqlite3_finalize(s);
    return BT_OK;
}

/* The first bad step: earliest non-finite tap, non-finite logits or event. */
static int first_bad_step(bt_trace_reader *r, int *out)
{
    bt_trace_summary sum;
    int rc = bt_trace_summary_get(r, &sum);
    if (rc) return rc;
    int bad = -1;
    if (sum.first_bad_step >= 0) bad = sum.first_bad_step;
    if (sum.first_bad_logits_step >= 0 && (bad < 0 || sum.first_bad_logits_step < bad)) bad = sum.first_bad_logits_step;
    *out = bad;
    return BT_OK;
}

static int first_event_cb(void *user, const bt_trace_event_row *ev)
{
    int *bad = user;
    if (ev->step >= 0 && (*bad < 0 || ev->step < *bad)) *bad = ev->step;
    return 0;
}

static void remove_file_set(const char *path)
{
    char buf[PATH_MAX + 16];
    unlink(path);
    snprintf(buf, sizeof buf, "%s-journal", path); unlink(buf);
    snprintf(buf, sizeof buf, "%s-wal", path); unlink(buf);
    snprintf(buf, sizeof buf, "%s-shm", path); unlink(buf);
}

int cmd_export(int argc, char **argv)
{
    export_opts o;
    bt_trace_reader *r = NULL;
    exporter x = { .o = &o };
    char *uri = NULL, tmp[PATH_MAX + 16] = "", window[64] = "all";
    int rc;
    if ((rc = parse_args(argc, argv, &o))) return bt_cmd_fail("export");
    if ((rc = bt_trace_open(o.in, &r))) return bt_cmd_fail("export");
    /* OUT never the trace (or its -wal/-shm), never a link or a device; an
     * existing OUT only if it is an idle bangtrace trace and --force. */
    const bt_out_input in[] = { { "TRACE", o.in } };
    if ((rc = bt_outfile_check(o.out, BT_OUT_TRACE, o.force, in, 1, NULL))) goto done;
    if (strlen(o.out) > PATH_MAX) { rc = bt_error(BT_EINVAL, "%s: path too long", o.out); goto done; }

    /* What to keep. */
    int bad;
    if ((rc = first_bad_step(r, &bad))) goto done;
    if ((rc = bt_trace_events_each(r, NULL, first_event_cb, &bad)) < 0) goto done;
    rc = BT_OK;
    bt_trace_summary sum;
    if ((rc = bt_trace_summary_get(r, &sum))) goto done;
    bool windowed = !o.all_steps && bad >= 0;
    int lo = 0, hi = 0;
    if (windowed) {
        lo = bad - (int)o.window < sum.first_step ? sum.first_step : bad - (int)o.window;
        hi = bad + (int)o.window;
        snprintf(window, sizeof window, "%d-%d (first bad step %d, K=%ld)", lo, hi, bad, o.window);
    }
    const char *prompt = bt_trace_meta_get(r, "prompt_text");
    char *prompt_copy = prompt ? strdup(prompt) : NULL;
    x.rd.prompt = prompt_copy;
    x.rd.prompt_len = prompt_copy ? strlen(prompt_copy) : 0;
    int64_t app = BT_TRACE_APPLICATION_ID;
    const char *ver = bt_trace_meta_get(r, "schema_version");
    int user_version = ver ? atoi(ver) : BT_TRACE_SCHEMA_VERSION;
    bt_trace_reader_close(r);
    r = NULL;

    /* Build OUT.partial row by row, then vacuum and rename it into place. */
    snprintf(tmp, sizeof tmp, "%s.partial", o.out);
    x.tmp = tmp;
    remove_file_set(tmp);
    if (sqlite3_open_v2(tmp, &x.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: cannot create: %s", o.out, x.db ? sqlite3_errmsg(x.db) : "out of memory");
        goto done_free;
    }
    sqlite3_create_function(x.db, "bt_redact_detail", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_redact_detail,
                            NULL, NULL);
    char sql[256];
    uri = ro_uri(o.in);
    char *attach = uri ? sqlite3_mprintf("ATTACH %Q AS src", uri) : NULL;
    /* main. only: without it journal_mode would also try to switch the
     * read-only source, which fails on a WAL trace (one still being written) */
    snprintf(sql, sizeof sql, "PRAGMA page_size = 16384; PRAGMA main.journal_mode = OFF; PRAGMA main.synchronous = OFF;"
             " PRAGMA application_id = %lld; PRAGMA user_version = %d;", (long long)app, user_version);
    rc = attach ? exec(&x, attach) : bt_error(BT_ENOMEM, "out of memory");
    sqlite3_free(attach);
    if (rc) {
        rc = bt_error(BT_EIO, "%s: cannot open read-only: %s", o.in, sqlite3_errmsg(x.db));
        goto done_free;
    }
    if ((rc = spec_tables(&x))) goto done_free;
    if ((rc = exec(&x, sql)) || (rc = exec(&x, "BEGIN")) || (rc = copy_schema(&x)) || (rc = copy_meta(&x, window)) ||
        (rc = copy_rows(&x, lo, hi, windowed)) || (rc = copy_unknown(&x)) || (rc = exec(&x, "COMMIT")) ||
        (rc = exec(&x, "DETACH src")) || (rc = exec(&x, "VACUUM")))
        goto done_free;
    if (sqlite3_close(x.db) != SQLITE_OK) { rc = db_err(&x, "closing"); goto done_free; }
    x.db = NULL;
    if (o.force) remove_file_set(o.out);
    if (rename(tmp, o.out) != 0) {
        rc = bt_error(BT_EIO, "%s: cannot rename %s into place: %s", o.out, tmp, strerror(errno));
        goto done_free;
    }
    tmp[0] = 0;
    bt_log("bangtrace: export: wrote %s (steps %s%s), %.2f MB", o.out, window, o.redact ? "; redacted" : "",
           bt_trace_size(o.out) / 1e6);
done_free:
    free(prompt_copy);
done:
    if (x.db) sqlite3_close(x.db);
    if (tmp[0]) remove_file_set(tmp);
    free(uri);
    bt_trace_reader_close(r);
    return rc ? bt_cmd_fail("export") : 0;
}
