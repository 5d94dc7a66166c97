/* export.c - the copy behind `bangtrace export`: a trace that can be
 * attached to a public issue (moved out of cmd_export.c, so that only
 * src/trace/ runs SQL).
 *
 * The source is untrusted: it is opened by the reader (which checks that
 * every schema object is of the expected kind) and attached read-only (SQLite
 * URI mode=ro), and every statement over it runs under the guard's
 * instruction budget (trace/guard.h). No SQL text from the source is ever
 * executed: OUT's schema is the embedded traces/schema.sql, and rows are
 * copied table by table by INSERT ... SELECT statements composed here from
 * OUT's own column names. Objects the source has and this version does not
 * know are left out (with a warning).
 *
 * The copy is built row by row into a fresh file (never copied page by page
 * and then scrubbed), so redacted data is never written to OUT at all: no
 * freed page, journal or WAL of OUT can hold it. The build goes to
 * a fresh OUT.XXXXXX (mkstemp, 0600) with no journal and is renamed over OUT at the end, so OUT
 * is either absent or complete; it is a single rollback-mode file (no -wal
 * or -shm beside it). Exporting never modifies the evidence, not even by
 * checkpointing its WAL; a trace whose steps are still in its -wal (a run
 * still writing, or killed) exports with every committed step.
 *
 * Redaction leaves nothing from which the prompt can be rebuilt, and keeps
 * what a maintainer needs (counts, positions, later taps, events, model hash,
 * settings); doc/trace-format.md has the table. --redact=prompt (the default
 * level) redacts the prompt tokens and the generated tokens inside a run of
 * three or more that repeats the prompt (a model echoing it): their ids
 * become -1 and their pieces NULL; no logit snapshot names a redacted
 * token (the one predicting it loses its ids; elsewhere a redacted token's
 * id is -1 in top-k, NULL as argmax, unless a token that stays holds it at
 * the predicted position); full logit rows with a finite value go; at steps
 * over a redacted token the statistics of the taps that see the input token
 * alone (token_embd, layer 0 before attn_ctx: they match one embedding row)
 * become "none", their non-finite counts staying; meta request_json,
 * prompt_text, prompt, messages, request, system and host become
 * "[redacted]"; meta argv keeps its flags, with text-carrying values (and
 * any argument with white space, the prompt, or no flag before it)
 * "[redacted]"; absolute paths everywhere in meta, event details and
 * backtraces become base names; host and user names become "[redacted]";
 * quoted token text and redacted ids in event details become an ellipsis.
 * --redact=all redacts every token the same way (every id, piece, snapshot
 * id, full row, input-token statistic, event id, and the ids of
 * spec_steps / spec_trail). tests/redact_adversary.sh attacks the result. */
#include "trace/export.h"
#include "trace/guard.h"
#include "trace/reader.h"
#include "sys/outfile.h"
#include "trace/trace.h"
#include "base/text.h"
#include "base/util.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REDACTED "[redacted]"

/* ---- redaction helpers ---- */

enum { MAX_NAMES = 16 };

typedef struct redactor {
    int level;                   /* BT_EXPORT_REDACT_NONE | BT_EXPORT_REDACT_PROMPT | BT_EXPORT_REDACT_ALL */
    const char *prompt;          /* meta prompt_text (NULL or "" when unknown) */
    size_t prompt_len;
    char *names[MAX_NAMES];      /* host and user names found: replaced wherever they appear */
    int n_names;
    /* Token identities that go (filled by collect_redacted): */
    int32_t *red_ids; int n_red_ids; size_t cap_red_ids;     /* ids of redacted tokens, sorted */
    int32_t *red_pos; int n_red_pos; size_t cap_red_pos;     /* positions holding a redacted token, sorted */
    int64_t *kept; int n_kept; size_t cap_kept;              /* (pos << 32 | id) of tokens that stay, sorted */
    int64_t *echo; int n_echo; size_t cap_echo;              /* seqs of generated tokens that echo the prompt */
    int cut_target, cut_draft;   /* per model: tensors.idx below this see the input token alone */
    struct bt_trace_reader *src; /* the source, for full logit rows */
} redactor;

static bool has_prompt(const redactor *rd, const char *s, size_t min_len)
{
    return rd->prompt && rd->prompt_len >= min_len && s && strstr(s, rd->prompt);
}

static void add_name(redactor *rd, const char *s, size_t n)
{
    /* shorter names would blank out ordinary words */
    if (!s || n < 3 || rd->n_names == MAX_NAMES) return;
    for (int i = 0; i < rd->n_names; i++)
        if (strlen(rd->names[i]) == n && !memcmp(rd->names[i], s, n)) return;
    char *c = strndup(s, n);
    if (c) rd->names[rd->n_names++] = c;
}

/* User names inside home directories: /home/NAME/..., /Users/NAME/... */
static void add_home_names(redactor *rd, const char *s)
{
    static const char *const homes[] = { "/home/", "/Users/" };
    for (size_t h = 0; s && h < BT_ARRAY_SIZE(homes); h++)
        for (const char *p = strstr(s, homes[h]); p; p = strstr(p + 1, homes[h])) {
            const char *u = p + strlen(homes[h]);
            add_name(rd, u, strcspn(u, "/\"' \t\n,;:)]"));
        }
}

/* Whoever ran or exports the trace: names that may sit in any text. */
static void add_local_names(redactor *rd, const char *host)
{
    char buf[256];
    if (host) {
        add_name(rd, host, strlen(host));
        add_name(rd, host, strcspn(host, "."));
    }
    if (gethostname(buf, sizeof buf) == 0) {
        buf[sizeof buf - 1] = 0;
        add_name(rd, buf, strlen(buf));
        add_name(rd, buf, strcspn(buf, "."));
    }
    const char *env[] = { getenv("USER"), getenv("LOGNAME") };
    for (size_t i = 0; i < BT_ARRAY_SIZE(env); i++) if (env[i]) add_name(rd, env[i], strlen(env[i]));
    struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_name) add_name(rd, pw->pw_name, strlen(pw->pw_name));
    if (pw && pw->pw_dir) add_home_names(rd, pw->pw_dir);
}

static void redactor_free(redactor *rd)
{
    for (int i = 0; i < rd->n_names; i++) free(rd->names[i]);
    rd->n_names = 0;
    free(rd->red_ids); free(rd->red_pos); free(rd->kept); free(rd->echo);
    rd->red_ids = NULL; rd->red_pos = NULL; rd->kept = NULL; rd->echo = NULL;
}

/* ---- token identities ----
 * A token's identity is its id, its piece, and anything computed from the
 * input token alone (the embedding row and layer 0 before attention mixes
 * positions: token_embd, attn_norm, attn_q/k/v, whose statistics match one
 * vocabulary row). A logit snapshot at position p predicts the token at
 * p + 1: its chosen, argmax and top-k ids name that token. */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int uniq_i32(int32_t *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_i32);
    int k = 1;
    for (int i = 1; i < n; i++) if (v[i] != v[k - 1]) v[k++] = v[i];
    return k;
}

static int uniq_i64(int64_t *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    int k = 1;
    for (int i = 1; i < n; i++) if (v[i] != v[k - 1]) v[k++] = v[i];
    return k;
}

static int64_t pos_id_key(int64_t pos, int32_t id) { return (int64_t)((uint64_t)pos << 32 | (uint32_t)id); }

static bool has_i32(const int32_t *v, int n, int32_t x) { return n && bsearch(&x, v, (size_t)n, sizeof(x), cmp_i32); }
static bool has_i64(const int64_t *v, int n, int64_t x) { return n && bsearch(&x, v, (size_t)n, sizeof(x), cmp_i64); }

/* Any redacted token at a position in [lo, hi)? */
static bool red_in(const redactor *rd, int64_t lo, int64_t hi)
{
    if (rd->level == BT_EXPORT_REDACT_ALL) return true;
    int a = 0, b = rd->n_red_pos;          /* first red_pos >= lo */
    while (a < b) { int m = (a + b) / 2; if (rd->red_pos[m] < lo) a = m + 1; else b = m; }
    return a < rd->n_red_pos && rd->red_pos[a] < hi;
}

/* May id stay as the identity of a token at pos? Not at a redacted
 * position, and never an id of a redacted token unless a token that stays
 * holds it there (then the trail shows it anyway). */
static bool id_ok(const redactor *rd, int64_t id, int64_t pos)
{
    if (rd->level == BT_EXPORT_REDACT_ALL) return false;
    if (red_in(rd, pos, pos + 1)) return false;
    if (id < INT32_MIN || id > INT32_MAX) return true;
    return !has_i32(rd->red_ids, rd->n_red_ids, (int32_t)id) || has_i64(rd->kept, rd->n_kept, pos_id_key(pos, (int32_t)id));
}

/* bt_tok(id, pos[, replacement]): id when it may stay at pos, else the
 * replacement (NULL by default). */
static void sql_tok(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    const redactor *rd = sqlite3_user_data(ctx);
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) { sqlite3_result_null(ctx); return; }
    bool ok = sqlite3_value_type(argv[1]) != SQLITE_NULL &&
              id_ok(rd, sqlite3_value_int64(argv[0]), sqlite3_value_int64(argv[1]));
    if (ok) sqlite3_result_value(ctx, argv[0]);
    else if (argc > 2) sqlite3_result_value(ctx, argv[2]);
    else sqlite3_result_null(ctx);
}

/* bt_topk(topk_ids, pos): the list of a snapshot at pos (predicting pos + 1):
 * NULL when the predicted token is redacted; otherwise every id of a
 * redacted token (not the one that stays at pos + 1) becomes -1, so ranks
 * and values stay aligned. */
static void sql_topk(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const redactor *rd = sqlite3_user_data(ctx);
    const char *s = (const char *)sqlite3_value_text(argv[0]);
    if (!s || sqlite3_value_type(argv[1]) == SQLITE_NULL || rd->level == BT_EXPORT_REDACT_ALL) { sqlite3_result_null(ctx); return; }
    int64_t next = sqlite3_value_int64(argv[1]) + 1;
    if (red_in(rd, next, next + 1)) { sqlite3_result_null(ctx); return; }
    json_t *a = json_loads(s, 0, NULL);
    if (!json_is_array(a)) { json_decref(a); sqlite3_result_null(ctx); return; }   /* not a list: nothing to keep */
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || !id_ok(rd, json_integer_value(v), next)) json_array_set_new(a, i, json_integer(-1));
    }
    char *out = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    if (!out) { sqlite3_result_error_nomem(ctx); return; }
    sqlite3_result_text(ctx, out, -1, free);
}

static int model_cut(const redactor *rd, const char *model)
{
    return model && !strcmp(model, "draft") ? rd->cut_draft : rd->cut_target;
}

/* bt_tap_red(model, idx, pos0, n_pos): 1 when the tensor idx of a step over
 * positions pos0 .. pos0 + n_pos - 1 sees a redacted input token alone. An
 * unknown step counts as redacted. */
static void sql_tap_red(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const redactor *rd = sqlite3_user_data(ctx);
    int idx = sqlite3_value_int(argv[1]);
    bool known = sqlite3_value_type(argv[2]) != SQLITE_NULL && sqlite3_value_type(argv[3]) != SQLITE_NULL;
    int64_t p0 = sqlite3_value_int64(argv[2]), n = sqlite3_value_int64(argv[3]);
    bool red = idx < model_cut(rd, (const char *)sqlite3_value_text(argv[0])) && (!known || red_in(rd, p0, p0 + n));
    sqlite3_result_int(ctx, red);
}

/* bt_blank_taps(stats, model, pos0, n_pos): the step's packed statistics
 * with the slots of tensors that see a redacted input token alone set to
 * "none" (bf16 0x7fc0). */
static void sql_blank_taps(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const redactor *rd = sqlite3_user_data(ctx);
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) { sqlite3_result_null(ctx); return; }
    const unsigned char *b = sqlite3_value_blob(argv[0]);
    int n = sqlite3_value_bytes(argv[0]);
    bool known = sqlite3_value_type(argv[2]) != SQLITE_NULL && sqlite3_value_type(argv[3]) != SQLITE_NULL;
    int64_t p0 = sqlite3_value_int64(argv[2]), np = sqlite3_value_int64(argv[3]);
    if (known && !red_in(rd, p0, p0 + np)) { sqlite3_result_value(ctx, argv[0]); return; }
    unsigned char *c = malloc((size_t)n + 1);
    if (!c) { sqlite3_result_error_nomem(ctx); return; }
    if (n) memcpy(c, b, (size_t)n);
    int cut = model_cut(rd, (const char *)sqlite3_value_text(argv[1]));
    for (int64_t i = 0; i < n; i++)
        if (i / 8 < cut) c[i] = i % 2 ? 0x7f : 0xc0;
    sqlite3_result_blob(ctx, c, n, free);
}

/* bt_row_dark(step, pos): 1 when the stored full row holds no finite value
 * (it ranks no id: only the pattern of what went wrong). */
static void sql_row_dark(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const redactor *rd = sqlite3_user_data(ctx);
    float *row = NULL;
    int n = 0;
    if (bt_trace_logit_row_get(rd->src, sqlite3_value_int(argv[0]), sqlite3_value_int(argv[1]), &row, &n, NULL) != BT_OK) {
        sqlite3_result_int(ctx, 0);     /* does not decode: left out */
        return;
    }
    bool dark = true;
    for (int i = 0; i < n && dark; i++) dark = !isfinite(row[i]);
    free(row);
    sqlite3_result_int(ctx, dark);
}


/* Absolute paths become their base names (/home/ann/m/x.gguf -> x.gguf) and
 * host or user names become [redacted]. A path starts with '/' at the start
 * or after a separator, so "p/q" or "t/s" in a sentence stay. Returns a
 * malloc'd string, NULL when out of memory. */
static char *scrub(const redactor *rd, const char *s)
{
    static const char *const before = " \t\n\"'=(:,[<`";
    static const char *const stop = " \t\n\"')],;<>`";
    bt_sbuf a = { 0 };
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (s[i] == '/' && (i == 0 || strchr(before, s[i - 1])) && s[i + 1] && !strchr(stop, s[i + 1])) {
            size_t e = i;
            while (e < n && !strchr(stop, s[e])) e++;
            size_t b = e;
            while (b > i && s[b - 1] == '/') b--;     /* trailing slashes */
            size_t last = b;
            while (last > i && s[last - 1] != '/') last--;
            if (last < b) bt_sbuf_putn(&a, s + last, b - last);
            else bt_sbuf_putn(&a, "/", 1);
            i = e;
            continue;
        }
        bt_sbuf_putn(&a, s + i, 1);
        i++;
    }
    char *out = bt_sbuf_take(&a);
    for (int k = 0; out && k < rd->n_names; k++) {
        const char *name = rd->names[k];
        size_t nl = strlen(name);
        if (!strstr(out, name)) continue;
        bt_sbuf b = { 0 };
        for (const char *p = out; *p;) {
            const char *hit = strstr(p, name);
            if (!hit) { bt_sbuf_putn(&b, p, strlen(p)); break; }
            bt_sbuf_putn(&b, p, (size_t)(hit - p));
            bt_sbuf_putn(&b, REDACTED, strlen(REDACTED));
            p = hit + nl;
        }
        free(out);
        out = bt_sbuf_take(&b);
    }
    return out;
}

/* Event details quote token text as `...`, "..." or ('...') (the detectors'
 * form; a piece may itself hold an apostrophe, so that one closes at "')").
 * Quoted spans and any occurrence of the prompt become an ellipsis; then
 * scrub(). Returns a malloc'd string. */
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
        /* token ids as the detectors write them: "token 7", "token id 7",
         * "control token 7", "tokens 7 8 9", "-> id 7" */
        static const char *const id_heads[] = { "token id ", "tokens ", "token ", "-> id " };
        size_t hl = 0;
        for (size_t h = 0; !hl && h < BT_ARRAY_SIZE(id_heads); h++) {
            size_t l = strlen(id_heads[h]);
            if (!strncmp(s + i, id_heads[h], l) && (s[i + l] == '-' || (s[i + l] >= '0' && s[i + l] <= '9'))) hl = l;
        }
        if (hl) {
            memcpy(o, s + i, hl);
            o += hl;
            i += hl;
            for (bool more = true; more;) {
                char *e;
                errno = 0;
                long long id = strtoll(s + i, &e, 10);
                if (e == s + i) break;
                bool go = rd->level == BT_EXPORT_REDACT_ALL || errno ||
                          (id >= INT32_MIN && id <= INT32_MAX && has_i32(rd->red_ids, rd->n_red_ids, (int32_t)id));
                if (go) o += sprintf(o, "\xe2\x80\xa6");
                else { memcpy(o, s + i, (size_t)(e - (s + i))); o += e - (s + i); }
                i = (size_t)(e - s);
                more = hl == strlen("tokens ") && s[i] == ' ' && ((s[i + 1] >= '0' && s[i + 1] <= '9') || s[i + 1] == '-');
                if (more) *o++ = s[i++];
            }
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
    char *sc = scrub(rd, out);
    free(out);
    return sc;
}

static void sql_redact(sqlite3_context *ctx, sqlite3_value *v, bool detail)
{
    const char *s = (const char *)sqlite3_value_text(v);
    if (!s) { sqlite3_result_null(ctx); return; }
    char *r = detail ? redact_detail(sqlite3_user_data(ctx), s) : scrub(sqlite3_user_data(ctx), s);
    if (!r) { sqlite3_result_error_nomem(ctx); return; }
    sqlite3_result_text(ctx, r, -1, free);
}

static void sql_redact_detail(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sql_redact(ctx, argv[0], true);
}

static void sql_scrub(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sql_redact(ctx, argv[0], false);
}

/* argv (a JSON array of strings) keeps its shape for a maintainer: flags
 * stay; the value of a text-carrying flag, any argument holding the prompt
 * or white space (text, not a setting) and any argument that follows no
 * flag become "[redacted]"; paths become base names (scrub). Returns
 * malloc'd, NULL when out of memory. */
static char *redact_argv(const redactor *rd, const char *value)
{
    static const char *const text_flags[] = { "--prompt", "-p", "--system", "--stop", "--messages" };
    json_error_t err;
    json_t *a = json_loads(value, 0, &err);
    if (!a || !json_is_array(a)) { json_decref(a); return strdup(REDACTED); }
    bool after_flag = false, text_next = false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) continue;
        const char *val = s;
        bool text = text_next, flag = false;
        char head[64] = "";
        if (s[0] == '-' && s[1]) {
            size_t fl = strcspn(s, "=");
            text = false;
            for (size_t f = 0; f < BT_ARRAY_SIZE(text_flags); f++)
                if (strlen(text_flags[f]) == fl && !strncmp(s, text_flags[f], fl)) text = true;
            if (!s[fl]) { flag = true; val = NULL; }
            else { snprintf(head, sizeof head, "%.*s=", (int)(fl < 60 ? fl : 60), s); val = s + fl + 1; }
        } else if (!after_flag && i > 1) text = true;   /* a positional argument: may be text */
        if (val) {
            char *sc = NULL;
            if (text || has_prompt(rd, val, 1) || strpbrk(val, " \t\n")) sc = strdup(REDACTED);
            else sc = scrub(rd, val);
            if (!sc) { json_decref(a); return NULL; }
            size_t hl = strlen(head), vl = strlen(sc);
            char *joined = malloc(hl + vl + 1);
            if (!joined) { free(sc); json_decref(a); return NULL; }
            memcpy(joined, head, hl);
            memcpy(joined + hl, sc, vl + 1);
            json_array_set_new(a, i, json_string(joined));
            free(joined);
            free(sc);
        }
        after_flag = flag || i == 0;   /* the subcommand follows the program name */
        text_next = flag && text;
    }
    char *out = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return out;
}

/* Meta keys that hold the prompt or request themselves. */
static bool text_key(const char *key)
{
    static const char *const keys[] = { "request_json", "prompt_text", "prompt", "messages", "request", "system" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(keys); i++)
        if (!strcmp(key, keys[i])) return true;
    return false;
}

/* ---- the copy ---- */

typedef struct exporter {
    const bt_export_opts *o;
    sqlite3 *db;
    redactor rd;
    bt_trace_guard guard;        /* bounds every statement over the source */
    int lo, hi;                  /* the step window when windowed */
    bool windowed;
} exporter;

static int db_err(exporter *x, const char *what)
{
    int e = sqlite3_errcode(x->db);
    if (e == SQLITE_INTERRUPT) return bt_trace_guard_error(&x->guard, x->o->in, what);
    return bt_error(BT_EIO, "%s: %s: %s", x->o->out, what, sqlite3_errmsg(x->db));
}

/* Only ever called with SQL text written in this file or the embedded
 * schema: nothing read from the source is executed. */
static int exec(exporter *x, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(x->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = sqlite3_errcode(x->db) == SQLITE_INTERRUPT ? bt_trace_guard_error(&x->guard, x->o->in, "copying")
               : bt_error(BT_EIO, "%s: %s", x->o->out, err ? err : sqlite3_errmsg(x->db));
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

/* ---- meta ---- */

typedef struct meta_copy { exporter *x; sqlite3_stmt *ins; int rc; } meta_copy;

static int meta_put(meta_copy *m, const char *key, const char *val)
{
    sqlite3_bind_text(m->ins, 1, key, -1, SQLITE_TRANSIENT);
    if (val) sqlite3_bind_text(m->ins, 2, val, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(m->ins, 2);
    int e = sqlite3_step(m->ins);
    sqlite3_reset(m->ins);
    return e == SQLITE_DONE ? BT_OK : db_err(m->x, "writing meta");
}

static int meta_cb(void *user, const char *key, const char *val)
{
    meta_copy *m = user;
    exporter *x = m->x;
    char *owned = NULL;
    if (x->rd.level != BT_EXPORT_REDACT_NONE && val) {
        if (!strcmp(key, "argv")) val = owned = redact_argv(&x->rd, val);
        else if (text_key(key) || !strcmp(key, "host") || has_prompt(&x->rd, val, 4)) val = REDACTED;
        else val = owned = scrub(&x->rd, val);
        if (!val) { m->rc = bt_error(BT_ENOMEM, "out of memory"); return 1; }
    }
    m->rc = meta_put(m, key, val);
    free(owned);
    return m->rc ? 1 : 0;
}

static int copy_meta(exporter *x, bt_trace_reader *r, const char *window)
{
    meta_copy m = { .x = x };
    if (sqlite3_prepare_v2(x->db, "INSERT OR REPLACE INTO main.meta(key, value) VALUES (?1, ?2)", -1, &m.ins, NULL) != SQLITE_OK)
        return db_err(x, "writing meta");
    bt_trace_meta_each(r, meta_cb, &m);
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *base = strrchr(x->o->in, '/');
    static const char *const levels[] = { [BT_EXPORT_REDACT_NONE] = "no", [BT_EXPORT_REDACT_PROMPT] = "prompt", [BT_EXPORT_REDACT_ALL] = "all" };
    const char *extra[][2] = {
        { "exported_at", now }, { "export_source", base ? base + 1 : x->o->in },
        { "export_window", window }, { "redacted", levels[x->rd.level] },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(extra) && !m.rc; i++) m.rc = meta_put(&m, extra[i][0], extra[i][1]);
    sqlite3_finalize(m.ins);
    return m.rc;
}

/* ---- rows ----
 * Each known table is copied by an INSERT ... SELECT composed here from
 * the output's own column names (the embedded schema), restricted to the
 * columns the source also has (older traces lack a few), with the
 * redaction rules below replacing columns, never copying them first. */

typedef struct col_rule {
    const char *table, *column;
    int level;                   /* applies at this level and above, up to the next rule */
    const char *expr;
} col_rule;

/* the step a row of a stepped table belongs to: its positions */
#define STEP_OF(t, c) "(SELECT " c " FROM src.steps s WHERE s.step = " t ".step)"
#define STEP_POS(t) STEP_OF(t, "s.model") ", " STEP_OF(t, "s.pos0") ", " STEP_OF(t, "s.n_pos")
#define TAP_RED "bt_tap_red(model, idx, " STEP_OF("tap_bad", "s.pos0") ", " STEP_OF("tap_bad", "s.n_pos") ")"
#define TAP_STAT(c) "CASE WHEN " TAP_RED " THEN NULL ELSE " c " END"
/* where a speculative verify step's target token lands */
#define BONUS_POS "(SELECT min(t.draft_pos) FROM src.spec_trail t WHERE t.step = spec_steps.step) + accepted"
static const col_rule col_rules[] = {
    /* the prompt (and generated tokens echoing it): ids and text */
    { "tokens", "token_id", BT_EXPORT_REDACT_PROMPT, "CASE WHEN role = 'prompt' OR seq IN temp.echo THEN -1 ELSE token_id END" },
    { "tokens", "token_id", BT_EXPORT_REDACT_ALL, "-1" },
    { "tokens", "piece", BT_EXPORT_REDACT_PROMPT, "CASE WHEN role = 'prompt' OR seq IN temp.echo THEN NULL ELSE piece END" },
    { "tokens", "piece", BT_EXPORT_REDACT_ALL, "NULL" },
    /* a snapshot at pos names the token at pos + 1 in its chosen, argmax and
     * top-k ids; no snapshot names a redacted token's id anywhere */
    { "logits", "argmax_first", BT_EXPORT_REDACT_PROMPT, "bt_tok(argmax_first, pos + 1)" }, { "logits", "argmax_first", BT_EXPORT_REDACT_ALL, "NULL" },
    { "logits", "argmax_torch", BT_EXPORT_REDACT_PROMPT, "bt_tok(argmax_torch, pos + 1)" }, { "logits", "argmax_torch", BT_EXPORT_REDACT_ALL, "NULL" },
    { "logits", "argmax_triton", BT_EXPORT_REDACT_PROMPT, "bt_tok(argmax_triton, pos + 1)" }, { "logits", "argmax_triton", BT_EXPORT_REDACT_ALL, "NULL" },
    { "logits", "chosen", BT_EXPORT_REDACT_PROMPT, "bt_tok(chosen, pos + 1)" }, { "logits", "chosen", BT_EXPORT_REDACT_ALL, "NULL" },
    { "logits", "topk_ids", BT_EXPORT_REDACT_PROMPT, "bt_topk(topk_ids, pos)" }, { "logits", "topk_ids", BT_EXPORT_REDACT_ALL, "NULL" },
    /* statistics of what sees the input token alone (they match one
     * vocabulary row), at steps over a redacted token: "none"; the
     * non-finite counts and where the first one sits stay */
    { "tap_blobs", "stats", BT_EXPORT_REDACT_PROMPT, "bt_blank_taps(stats, " STEP_POS("tap_blobs") ")" },
    { "tap_bad", "min", BT_EXPORT_REDACT_PROMPT, TAP_STAT("min") },
    { "tap_bad", "max", BT_EXPORT_REDACT_PROMPT, TAP_STAT("max") },
    { "tap_bad", "mean", BT_EXPORT_REDACT_PROMPT, TAP_STAT("mean") },
    { "tap_bad", "rms", BT_EXPORT_REDACT_PROMPT, TAP_STAT("rms") },
    /* text that may quote tokens or name their ids, paths, host or user names */
    { "events", "detail", BT_EXPORT_REDACT_PROMPT, "bt_redact_detail(detail)" },
    { "backtraces", "frames", BT_EXPORT_REDACT_PROMPT, "bt_scrub(frames)" },
    /* ids of a speculative run: drafted and target tokens at their positions */
    { "spec_steps", "bonus_token", BT_EXPORT_REDACT_PROMPT, "bt_tok(bonus_token, " BONUS_POS ")" },
    { "spec_steps", "bonus_token", BT_EXPORT_REDACT_ALL, "NULL" },
    { "spec_trail", "draft_token", BT_EXPORT_REDACT_PROMPT, "bt_tok(draft_token, draft_pos, -1)" },
    { "spec_trail", "draft_token", BT_EXPORT_REDACT_ALL, "-1" },
    { "spec_trail", "target_token", BT_EXPORT_REDACT_PROMPT, "bt_tok(target_token, draft_pos)" },
    { "spec_trail", "target_token", BT_EXPORT_REDACT_ALL, "NULL" },
};

static const char *col_expr(int level, const char *table, const char *column)
{
    const char *e = NULL;
    for (size_t i = 0; i < BT_ARRAY_SIZE(col_rules); i++)
        if (level >= col_rules[i].level && !strcmp(col_rules[i].table, table) && !strcmp(col_rules[i].column, column))
            e = col_rules[i].expr;   /* the last (strongest) rule that applies */
    return e;
}

typedef struct table_plan {
    const char *name;
    bool stepped;                /* follows the step window */
} table_plan;

static const table_plan tables[] = {
    { "tensors", false }, { "steps", true }, { "tap_blobs", true }, { "tap_bad", true }, { "tokens", false },
    { "logits", true }, { "logit_rows", true }, { "events", false }, { "backtraces", false },
    /* ids, probabilities and reasons only: windowed by their verify step */
    { "spec_steps", true }, { "spec_trail", true },
    /* device activity and op timings carry no token text: copied as they
     * are, in the window (activity outside any op has no step: left out
     * of a windowed copy) */
    { "kernels", true }, { "op_timings", true },
    /* expert ids and weights: no text */
    { "moe_routes", true },
    /* block ids and request ids (the server's x-request-id): no text */
    { "kv_access", true },
};

static bool src_has_column(exporter *x, const char *table, const char *column, int *err)
{
    sqlite3_stmt *s = NULL;
    *err = BT_OK;
    if (sqlite3_prepare_v2(x->db, "SELECT 1 FROM pragma_table_info(?1, 'src') WHERE name = ?2", -1, &s, NULL) != SQLITE_OK) {
        *err = db_err(x, "reading the source schema");
        return false;
    }
    sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, column, -1, SQLITE_STATIC);
    bool has = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_finalize(s);
    return has;
}

static int copy_table(exporter *x, const table_plan *t)
{
    int rc = BT_OK;
    sqlite3_stmt *cols = NULL, *ins = NULL;
    bt_sbuf into = { 0 }, sel = { 0 };
    char *sql = NULL;
    if (sqlite3_prepare_v2(x->db, "SELECT name FROM pragma_table_info(?1, 'main') ORDER BY cid", -1, &cols, NULL) != SQLITE_OK)
        return db_err(x, "reading the output schema");
    sqlite3_bind_text(cols, 1, t->name, -1, SQLITE_STATIC);
    int n = 0;
    while (!rc && sqlite3_step(cols) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(cols, 0);
        if (!src_has_column(x, t->name, c, &rc)) continue;
        const char *e = col_expr(x->rd.level, t->name, c);
        char *qc = sqlite3_mprintf("%s\"%w\"", n ? ", " : "", c);
        if (!qc) { rc = bt_error(BT_ENOMEM, "out of memory"); break; }
        bt_sbuf_putn(&into, qc, strlen(qc));
        if (n) bt_sbuf_putn(&sel, ", ", 2);
        if (e) bt_sbuf_putn(&sel, e, strlen(e));
        else bt_sbuf_putn(&sel, qc + (n ? 2 : 0), strlen(qc) - (n ? 2 : 0));
        sqlite3_free(qc);
        n++;
    }
    sqlite3_finalize(cols);
    if (rc || n == 0) goto out;      /* a table the source does not have: left empty */
    if (into.oom || sel.oom) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    const char *where = "1";
    bool rows_of_prompt = !strcmp(t->name, "logit_rows");
    if (rows_of_prompt && x->rd.level == BT_EXPORT_REDACT_ALL) goto out;   /* a full row names every id by its argmax */
    /* a row with a finite value ranks the whole vocabulary (the prompt's
     * words among the likeliest): only rows with none stay */
    if (rows_of_prompt && x->rd.level == BT_EXPORT_REDACT_PROMPT) where = "bt_row_dark(step, pos)";
    sql = sqlite3_mprintf("INSERT INTO main.\"%w\"(%s) SELECT %s FROM src.\"%w\" WHERE %s%s", t->name, into.p, sel.p, t->name,
                          where, t->stepped && x->windowed ? " AND step BETWEEN :lo AND :hi" : "");
    if (!sql) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    if (sqlite3_prepare_v2(x->db, sql, -1, &ins, NULL) != SQLITE_OK) { rc = db_err(x, "preparing the copy"); goto out; }
    int i;
    if ((i = sqlite3_bind_parameter_index(ins, ":lo"))) sqlite3_bind_int(ins, i, x->lo);
    if ((i = sqlite3_bind_parameter_index(ins, ":hi"))) sqlite3_bind_int(ins, i, x->hi);
    if (sqlite3_step(ins) != SQLITE_DONE) {
        char what[64];
        snprintf(what, sizeof what, "copying %s", t->name);
        rc = db_err(x, what);
    }
out:
    sqlite3_finalize(ins);
    sqlite3_free(sql);
    free(into.p);
    free(sel.p);
    return rc;
}

static int copy_rows(exporter *x)
{
    int rc = BT_OK;
    for (size_t i = 0; i < BT_ARRAY_SIZE(tables) && !rc; i++) rc = copy_table(x, &tables[i]);
    return rc;
}

/* Objects of the source this version does not know are not copied: their
 * definitions are SQL text from the file, which export never executes. */
static int note_unknown(exporter *x)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(x->db, "SELECT count(*) FROM src.sqlite_master s WHERE s.name NOT LIKE 'sqlite_%'"
                           " AND NOT EXISTS (SELECT 1 FROM main.sqlite_master m WHERE m.name = s.name AND m.type = s.type)",
                           -1, &s, NULL) != SQLITE_OK)
        return db_err(x, "reading the source schema");
    int n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
    sqlite3_finalize(s);
    if (n > 0) bt_warn("bangtrace: export: %s: %d schema object%s unknown to this version not copied", x->o->in, n, n == 1 ? "" : "s");
    return BT_OK;
}

/* ---- generated tokens that repeat the prompt ----
 * A model that echoes its prompt writes the prompt into the generated
 * trail, which --redact=prompt otherwise keeps. The output is the last
 * token of the trail at each position (a speculative trail also holds
 * drafts that a correction replaced). Every output token inside a run of
 * three or more that also occurs consecutively in the prompt is redacted
 * like a prompt token, and so is every other token of the trail at its
 * position with its id (the accepted draft it was); their seqs go to
 * temp.echo (the temp database never reaches OUT). */

typedef struct tri { int32_t a, b, c; } tri;
typedef struct gen_tok { int64_t seq; int pos; int32_t id; } gen_tok;
typedef struct echo_scan {
    int32_t *pid; int np; size_t cap_p;      /* prompt ids, trail order */
    int32_t *gid; int64_t *gseq; int ng; size_t cap_g, cap_s;
    int *gpos; size_t cap_pos;
    bool oom;
} echo_scan;

static int gen_cmp(const void *a, const void *b)
{
    const gen_tok *x = a, *y = b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int echo_cb(void *user, const bt_trace_token_row *t)
{
    echo_scan *e = user;
    bool prompt = t->role && !strcmp(t->role, "prompt");
    if (prompt) {
        if (BT_VEC_PUSH(e->pid, e->np, e->cap_p, t->id)) { e->oom = true; return 1; }
    } else {
        if (BT_VEC_RESERVE(e->gid, e->cap_g, (size_t)e->ng + 1) || BT_VEC_RESERVE(e->gseq, e->cap_s, (size_t)e->ng + 1) ||
            BT_VEC_RESERVE(e->gpos, e->cap_pos, (size_t)e->ng + 1)) {
            e->oom = true;
            return 1;
        }
        e->gid[e->ng] = t->id;
        e->gpos[e->ng] = t->pos;
        e->gseq[e->ng++] = t->seq;
    }
    return 0;
}

static int tri_cmp(const void *a, const void *b)
{
    const tri *x = a, *y = b;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return x->c < y->c ? -1 : x->c > y->c;
}

static int find_echo(exporter *x, bt_trace_reader *r)
{
    echo_scan e = { 0 };
    tri *t = NULL;
    gen_tok *g = NULL;
    int *out_i = NULL;
    sqlite3_stmt *ins = NULL;
    int rc = exec(x, "CREATE TEMP TABLE echo (seq INTEGER PRIMARY KEY)");
    if (rc) return rc;
    if ((rc = bt_trace_tokens_each(r, 0, 0, echo_cb, &e)) < 0) goto out;
    rc = BT_OK;
    if (e.oom) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    if (e.np < 3 || e.ng < 3) goto out;
    int nt = e.np - 2;
    if (!(t = malloc((size_t)nt * sizeof(*t)))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < nt; i++) t[i] = (tri){ e.pid[i], e.pid[i + 1], e.pid[i + 2] };
    qsort(t, (size_t)nt, sizeof(*t), tri_cmp);
    if (sqlite3_prepare_v2(x->db, "INSERT OR IGNORE INTO temp.echo(seq) VALUES (?1)", -1, &ins, NULL) != SQLITE_OK) {
        rc = db_err(x, "marking echoed tokens");
        goto out;
    }
    /* the output: the last token (largest seq) at each position, in position order */
    if (!(g = malloc((size_t)e.ng * sizeof(*g))) || !(out_i = malloc((size_t)e.ng * sizeof(*out_i)))) {
        rc = bt_error(BT_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < e.ng; i++) g[i] = (gen_tok){ e.gseq[i], e.gpos[i], e.gid[i] };
    qsort(g, (size_t)e.ng, sizeof(*g), gen_cmp);
    int no = 0;
    for (int i = 0; i < e.ng; i++) if (i + 1 == e.ng || g[i + 1].pos != g[i].pos) out_i[no++] = i;
    for (int i = 0; i + 2 < no && !rc; i++) {
        tri k = { g[out_i[i]].id, g[out_i[i + 1]].id, g[out_i[i + 2]].id };
        if (!bsearch(&k, t, (size_t)nt, sizeof(*t), tri_cmp)) continue;
        for (int j = i; j < i + 3 && !rc; j++) {
            const gen_tok *o = &g[out_i[j]];
            for (int m = out_i[j]; m >= 0 && g[m].pos == o->pos && !rc; m--) {
                if (g[m].id != o->id) continue;
                if (BT_VEC_PUSH(x->rd.echo, x->rd.n_echo, x->rd.cap_echo, g[m].seq)) { rc = bt_error(BT_ENOMEM, "out of memory"); break; }
                sqlite3_bind_int64(ins, 1, g[m].seq);
                if (sqlite3_step(ins) != SQLITE_DONE) rc = db_err(x, "marking echoed tokens");
                sqlite3_reset(ins);
            }
        }
    }
out:
    sqlite3_finalize(ins);
    free(g);
    free(out_i);
    free(e.gpos);
    free(t);
    free(e.pid);
    free(e.gid);
    free(e.gseq);
    return rc;
}

/* Which tokens go: their ids, their positions, and the (position, id) of
 * those that stay. */
static int collect_cb(void *user, const bt_trace_token_row *t)
{
    redactor *rd = user;
    bool red = rd->level == BT_EXPORT_REDACT_ALL || (t->role && !strcmp(t->role, "prompt")) ||
               has_i64(rd->echo, rd->n_echo, t->seq);
    int e = red ? BT_VEC_PUSH(rd->red_ids, rd->n_red_ids, rd->cap_red_ids, t->id) ||
                  BT_VEC_PUSH(rd->red_pos, rd->n_red_pos, rd->cap_red_pos, t->pos)
                : BT_VEC_PUSH(rd->kept, rd->n_kept, rd->cap_kept, pos_id_key(t->pos, t->id));
    return e ? BT_ENOMEM : 0;
}

static int collect_redacted(exporter *x, bt_trace_reader *r)
{
    redactor *rd = &x->rd;
    rd->n_echo = uniq_i64(rd->echo, rd->n_echo);
    int rc = bt_trace_tokens_each(r, 0, 0, collect_cb, rd);
    if (rc == BT_ENOMEM) return bt_error(BT_ENOMEM, "out of memory");
    if (rc < 0) return rc;
    rd->n_red_ids = uniq_i32(rd->red_ids, rd->n_red_ids);
    rd->n_red_pos = uniq_i32(rd->red_pos, rd->n_red_pos);
    rd->n_kept = uniq_i64(rd->kept, rd->n_kept);
    return BT_OK;
}

/* Per model, the first tensor that no longer sees the input token alone:
 * layer 0's attention context (it mixes positions), or anything of a later
 * layer or after the layers. Tensors are numbered in forward order; a
 * model without such a tensor has every slot cut. */
static int find_cuts(exporter *x)
{
    sqlite3_stmt *s;
    x->rd.cut_target = x->rd.cut_draft = INT_MAX;
    if (sqlite3_prepare_v2(x->db, "SELECT model, min(idx) FROM src.tensors WHERE layer > 0 OR (layer = 0 AND op = 'attn_ctx')"
                           " OR (layer IS NULL AND op <> 'token_embd') GROUP BY model", -1, &s, NULL) != SQLITE_OK)
        return db_err(x, "reading the tensors");
    int e;
    while ((e = sqlite3_step(s)) == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(s, 0);
        if (m && !strcmp(m, "draft")) x->rd.cut_draft = sqlite3_column_int(s, 1);
        else if (m && !strcmp(m, "target")) x->rd.cut_target = sqlite3_column_int(s, 1);
    }
    sqlite3_finalize(s);
    return e == SQLITE_DONE ? BT_OK : db_err(x, "reading the tensors");
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

int bt_trace_export(const bt_export_opts *o)
{
    bt_trace_reader *r = NULL;
    exporter x = { .o = o };
    char *uri = NULL, tmp[PATH_MAX + 16] = "", window[64] = "all";
    int rc;
    if ((rc = bt_trace_open(o->in, &r))) return rc;
    /* OUT never the trace (or its -wal/-shm), never a link or a device; an
     * existing OUT only if it is an idle bangtrace trace and --force. */
    const bt_out_input in[] = { { "TRACE", o->in } };
    if ((rc = bt_outfile_check(o->out, BT_OUT_TRACE, o->force, in, 1, NULL))) goto done;
    if (strlen(o->out) > PATH_MAX) { rc = bt_error(BT_EINVAL, "%s: path too long", o->out); goto done; }

    /* What to keep. */
    int bad;
    if ((rc = first_bad_step(r, &bad))) goto done;
    if ((rc = bt_trace_events_each(r, NULL, first_event_cb, &bad)) < 0) goto done;
    rc = BT_OK;
    bt_trace_summary sum;
    if ((rc = bt_trace_summary_get(r, &sum))) goto done;
    x.windowed = !o->all_steps && bad >= 0;
    if (x.windowed) {
        x.lo = bad - (int)o->window < sum.first_step ? sum.first_step : bad - (int)o->window;
        x.hi = bad + (int)o->window;
        snprintf(window, sizeof window, "%d-%d (first bad step %d, K=%ld)", x.lo, x.hi, bad, o->window);
    }
    const char *prompt = bt_trace_meta_get(r, "prompt_text");
    x.rd.level = o->redact;
    x.rd.src = r;
    x.rd.prompt = prompt;             /* borrowed from r, open until the end */
    x.rd.prompt_len = prompt ? strlen(prompt) : 0;
    if (o->redact) {
        add_local_names(&x.rd, bt_trace_meta_get(r, "host"));
        static const char *const path_keys[] = { "model_path", "tokenizer_path", "draft_model_path", "argv", "cwd" };
        for (size_t i = 0; i < BT_ARRAY_SIZE(path_keys); i++) add_home_names(&x.rd, bt_trace_meta_get(r, path_keys[i]));
    }

    /* Build OUT.partial: the embedded schema first, then the source
     * attached read-only and checked like the reader checks it. */
    /* A fresh name of our own (mode 0600: the copy may still hold the
     * prompt), so nothing already on disk is ever removed or reused. */
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", o->out);
    int tfd = mkstemp(tmp);
    if (tfd < 0) { rc = bt_error(BT_EIO, "%s: cannot create a temporary file beside it: %s", o->out, strerror(errno)); tmp[0] = 0; goto done; }
    close(tfd);
    if (sqlite3_open_v2(tmp, &x.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
        rc = bt_error(BT_EIO, "%s: cannot create: %s", o->out, x.db ? sqlite3_errmsg(x.db) : "out of memory");
        goto done;
    }
    sqlite3_create_function(x.db, "bt_redact_detail", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_redact_detail,
                            NULL, NULL);
    sqlite3_create_function(x.db, "bt_scrub", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_scrub, NULL, NULL);
    sqlite3_create_function(x.db, "bt_tok", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_tok, NULL, NULL);
    sqlite3_create_function(x.db, "bt_tok", 3, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_tok, NULL, NULL);
    sqlite3_create_function(x.db, "bt_topk", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_topk, NULL, NULL);
    sqlite3_create_function(x.db, "bt_tap_red", 4, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_tap_red, NULL, NULL);
    sqlite3_create_function(x.db, "bt_blank_taps", 4, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &x.rd, sql_blank_taps, NULL, NULL);
    sqlite3_create_function(x.db, "bt_row_dark", 2, SQLITE_UTF8, &x.rd, sql_row_dark, NULL, NULL);
    char sql[256];
    snprintf(sql, sizeof sql, "PRAGMA page_size = 16384; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
             " PRAGMA application_id = %lld; PRAGMA user_version = %d;", (long long)BT_TRACE_APPLICATION_ID,
             BT_TRACE_SCHEMA_VERSION);
    if ((rc = exec(&x, sql)) || (rc = exec(&x, "PRAGMA temp_store = MEMORY")) || (rc = find_echo(&x, r)) || (o->redact && (rc = collect_redacted(&x, r))) ||
        (rc = exec(&x, "BEGIN")) || (rc = exec(&x, bt_trace_schema_sql)))
        goto done;
    uri = ro_uri(bt_trace_db_path(o->in));   /* a read-only medium's private copy */
    if (!uri) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    sqlite3_stmt *att = NULL;
    if (sqlite3_prepare_v2(x.db, "ATTACH ?1 AS src", -1, &att, NULL) != SQLITE_OK) { rc = db_err(&x, "attaching"); goto done; }
    sqlite3_bind_text(att, 1, uri, -1, SQLITE_STATIC);
    int e = sqlite3_step(att);
    sqlite3_finalize(att);
    if (e != SQLITE_DONE) { rc = bt_error(BT_EIO, "%s: cannot open read-only: %s", o->in, sqlite3_errmsg(x.db)); goto done; }
    sqlite3_busy_timeout(x.db, 5000);      /* a run may be writing the source */
    bt_trace_guard_install(x.db, &x.guard, bt_trace_guard_bytes(o->in));
    if ((rc = bt_trace_guard_schema(x.db, "src", o->in)) || (rc = note_unknown(&x)) || (o->redact && (rc = find_cuts(&x))) || (rc = copy_meta(&x, r, window)) ||
        (rc = copy_rows(&x)) || (rc = exec(&x, "COMMIT")) || (rc = exec(&x, "DETACH src")) || (rc = exec(&x, "VACUUM")))
        goto done;
    if (sqlite3_close(x.db) != SQLITE_OK) { rc = db_err(&x, "closing"); goto done; }
    x.db = NULL;
    /* checked again right before the rename: OUT may have changed meanwhile */
    if ((rc = bt_outfile_check(o->out, BT_OUT_TRACE, o->force, in, 1, NULL))) goto done;
    if (o->force) remove_file_set(o->out);
    if (rename(tmp, o->out) != 0) {
        rc = bt_error(BT_EIO, "%s: cannot rename %s into place: %s", o->out, tmp, strerror(errno));
        goto done;
    }
    tmp[0] = 0;
    static const char *const how[] = { "", "; redacted (prompt)", "; redacted (all)" };
    bt_log("bangtrace: export: wrote %s (steps %s%s), %.2f MB", o->out, window, how[o->redact], bt_trace_size(o->out) / 1e6);
    bt_trace_state st;
    if (bt_trace_state_get(r, &st) == BT_OK && !st.complete)
        bt_log("bangtrace: export: %s is incomplete (status %s; last committed step %d)%s", o->in,
               st.status ? st.status : "unknown", st.last_step, st.in_wal ? "; its -wal was read too" : "");
done:
    if (x.db) sqlite3_close(x.db);
    if (tmp[0]) remove_file_set(tmp);
    free(uri);
    redactor_free(&x.rd);
    bt_trace_reader_close(r);
    return rc;
}
