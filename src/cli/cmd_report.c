/* cmd_report.c - `bangtrace report`: a markdown report of a trace, ready to
 * paste into an upstream issue.
 *
 * Everything comes from the trace itself (a trace is self-describing): the
 * environment and configuration from meta, the finding from the same
 * analysis bisect prints, and the command line to reproduce from meta.argv,
 * shell-quoted so it can be pasted as is. */
#include "cmd.h"
#include "run/run_meta.h"
#include "trace/analyze.h"
#include "trace/provenance.h"
#include "trace/headroom.h"
#include "trace/picture.h"
#include "trace/reader.h"
#include "base/text.h"
#include "trace/runstate.h"
#include "sys/outfile.h"
#include "base/util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cmd_report_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace report TRACE [-o FILE] [--png[=PNG]] [--force]\n\n"
        "Write a markdown report of a trace (bangtrace run --trace) for an upstream\n"
        "issue: environment (CPU, tool version, backend, threads), model file and\n"
        "SHA-256, configuration (sampling, argmax rule, injections), the first\n"
        "non-finite (step, layer, op) with its counts, the propagation table, the\n"
        "collapse summary (detector events), the logit snapshot at the first bad step,\n"
        "the host backtrace and the exact command line to reproduce. A clean trace is\n"
        "reported as clean. A speculative trace (run --spec-k) gets a Speculative\n"
        "decoding section: drafter, k, acceptance, where the first non-finite came from\n"
        "(draft or target pass), the amplification, and the draft-vs-verify trail\n"
        "around the first bad step. A Numerics section states the numerics profile the\n"
        "run used (run --numerics; exact f32 by default) and the headroom verdict: the\n"
        "largest absmax against the f16 maximum and the growth across layers\n"
        "(doc/numerics.md).\n\n"
        "  -o, --output FILE   write the report to FILE instead of standard output. FILE is\n"
        "                      written whole or not at all; it must not be the trace, a\n"
        "                      link, a device or an SQLite file; an existing non-empty\n"
        "                      FILE is replaced only with --force\n"
        "  --png[=PNG]         also write a picture: layers x steps, each cell coloured by\n"
        "                      the layer's largest absmax against the f16 maximum,\n"
        "                      non-finite cells magenta, the first non-finite cell\n"
        "                      (green) and the walk-back path (black) outlined, the\n"
        "                      token each step produced under it (printable ASCII;\n"
        "                      other bytes escaped; redacted text left out). Written\n"
        "                      to PNG, or beside FILE (issue.md -> issue.png) with -o;\n"
        "                      the report links it (![...](issue.png)). More than %d\n"
        "                      steps are downsampled (the caption says so). Same rules\n"
        "                      as FILE: never a link, a device or the trace; an\n"
        "                      existing file only with --force. Needs a build with\n"
        "                      libpng (else exit 2)\n"
        "  --force             replace an existing FILE (and PNG)\n\n"
        "A trace whose run did not finish (killed: status still running and no process\n"
        "writing it; crashed; interrupted; a write error) is reported as such, with the\n"
        "last committed step.\n\n"
        "The report is for a public issue: it names no host, and every absolute path\n"
        "in it (the trace, the model, argv, events, backtraces) is shown by its base\n"
        "name ($HOME never appears). FILE is created mode 0600, like the trace: a\n"
        "report of an unredacted trace quotes the generated text. The first\n"
        "non-finite's backtrace starts at the engine frame that computed the op.\n\n"
        "Exit status: 0 report written, 2 error (missing, corrupt or non-trace file).\n",
        BT_PICTURE_MAX_COLS);
}

/* Text for a markdown table cell or inline code: escaped (text.h), no
 * newlines, '|' escaped, backticks avoided so the cell never breaks the
 * table. */
static void md_cell(FILE *o, const char *s)
{
    if (!s) { fputs("-", o); return; }
    char *e = bt_text_escape_dup(s, strlen(s), BT_TEXT_UTF8 | BT_TEXT_RAWBS);
    if (!e) { fputs("?", o); return; }
    for (const char *p = e; *p; p++) {
        if (*p == '|') fputs("\\|", o);
        else if (*p == '`') fputc('\'', o);
        else fputc(*p, o);
    }
    free(e);
}

static void row(FILE *o, const char *key, const char *value)
{
    fprintf(o, "| %s | ", key);
    md_cell(o, value);
    fputs(" |\n", o);
}

static void row_code(FILE *o, const char *key, const char *value)
{
    if (!value) { row(o, key, NULL); return; }
    fprintf(o, "| %s | `", key);
    md_cell(o, value);
    fputs("` |\n", o);
}

/* POSIX shell quoting: bare when only safe characters, else '...' with
 * embedded quotes as '\''. */
static void shell_quote(FILE *o, const char *s)
{
    bool safe = *s != 0;
    for (const char *p = s; *p && safe; p++)
        safe = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-", *p) != NULL;
    if (safe) { fputs(s, o); return; }
    fputc('\'', o);
    for (; *s; s++) {
        if (*s == '\'') fputs("'\\''", o);
        else fputc(*s, o);
    }
    fputc('\'', o);
}

/* A path's last component ("/home/ann/m/x.gguf" -> "x.gguf"); NULL stays NULL. */
static const char *base_name(const char *p)
{
    if (!p) return NULL;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;     /* trailing slashes: the name before them */
    const char *b = p + n;
    while (b > p && b[-1] != '/') b--;
    return *b ? b : p;
}

/* The whole report on its way out: every absolute path becomes its base name
 * (a path starts with '/' at the start or after a separator, so "a/b" and
 * " / " in a sentence stay), then any $HOME left, and the host's names, are
 * replaced. The report is for a public issue: it names the model by its
 * base name and SHA-256, never where a file lives or whose machine it was.
 * Returns a malloc'd buffer (*len bytes), NULL when out of memory. */
static bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

static char *strip_local(const char *s, size_t n, const char *host, size_t *len)
{
    static const char *const before = " \t\n\"'=(:,[<`|";
    static const char *const stop = " \t\n\"')],;<>`|";
    bt_sbuf a = { 0 };
    for (size_t i = 0; i < n;) {
        if (s[i] == '/' && (i == 0 || strchr(before, s[i - 1])) && i + 1 < n && s[i + 1] && !strchr(stop, s[i + 1])) {
            size_t e = i;
            while (e < n && s[e] && !strchr(stop, s[e])) e++;
            size_t b = e;
            while (b > i + 1 && s[b - 1] == '/') b--;
            size_t last = b;
            while (last > i && s[last - 1] != '/') last--;
            bt_sbuf_putn(&a, s + last, b - last);
            i = e;
            continue;
        }
        bt_sbuf_putn(&a, s + i, 1);
        i++;
    }
    char *out = bt_sbuf_take(&a);
    if (!out) return NULL;
    char hn[256] = "";
    if (gethostname(hn, sizeof hn) != 0) hn[0] = 0;
    hn[sizeof hn - 1] = 0;
    const char *names[] = { getenv("HOME"), host, hn };
    const char *with[] = { "~", "[host]", "[host]" };
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        const char *nm = names[k];
        size_t nl = nm ? strlen(nm) : 0;
        /* "/" as HOME, or a two-letter host name, would blank ordinary text */
        if (nl < 3 || !strcmp(nm, "[redacted]") || !strstr(out, nm)) continue;
        bt_sbuf b = { 0 };
        for (const char *p = out; *p;) {
            const char *hit = strstr(p, nm);
            if (!hit) { bt_sbuf_putn(&b, p, strlen(p)); break; }
            /* a whole name only ("vm" in "avx512vmx" is no host name) */
            bool whole = (hit == out || !word_char(hit[-1])) && !word_char(hit[nl]);
            bt_sbuf_putn(&b, p, (size_t)(hit - p));
            if (whole) bt_sbuf_putn(&b, with[k], strlen(with[k]));
            else bt_sbuf_putn(&b, hit, nl);
            p = hit + nl;
        }
        free(out);
        if (!(out = bt_sbuf_take(&b))) return NULL;
    }
    *len = strlen(out);
    return out;
}

typedef struct ev_list { FILE *o; int shown, total; } ev_list;

static int event_line(void *user, const bt_trace_event_row *ev)
{
    ev_list *l = user;
    l->total++;
    if (l->shown >= 12) return 0;
    l->shown++;
    char buf[16];
    fprintf(l->o, "| %s | %s | ", ev->step >= 0 ? (snprintf(buf, sizeof(buf), "%d", ev->step), buf) : "-", ev->kind ? ev->kind : "?");
    md_cell(l->o, ev->tensor ? ev->tensor : ev->op);
    fputs(" | ", l->o);
    md_cell(l->o, ev->detail);
    fputs(" |\n", l->o);
    return 0;
}

static void section_summary(FILE *o, const bt_analysis *x, const bt_provenance *pv)
{
    fputs("## Summary\n\n", o);
    if (pv->contaminated) fprintf(o, "- **Another request's cache data:** %s.\n", pv->culprit);
    if (!bt_analysis_found(x)) {
        fprintf(o, "Clean: no non-finite tensor, no degenerate output%s in %d steps (%d tapped tensors, %d generated tokens).\n\n",
                x->n_events ? "" : " and no detector events", x->n_steps, x->n_tensors, x->n_gen);
        return;
    }
    char l[16];
    if (x->has_nonfinite) {
        const bt_bad_tensor *f = &x->first;
        fprintf(o, "- **First non-finite:** step %d, position %d, layer %s, op `%s` (`%s`), first at index %d: ",
                f->step, f->pos, bt_layer_label(f->layer, l, sizeof(l)), f->op, f->tensor, f->first_bad_index);
        bt_bad_tensor_print_counts(o, f);
        fputs(" values", o);
        fputs(".\n", o);
        if (x->has_first_kernel) {
            char kb[400];
            fprintf(o, "- **Device kernel that wrote it:** `%s` (%d kernels joined to this op in `v_kernels`, "
                    "the tap's reduction included; the host backtrace is below).\n",
                    bt_kernel_row_format(&x->first_kernel, kb, sizeof(kb)), x->n_first_kernels);
        }
    } else fputs("- **First non-finite:** none (no tapped tensor held NaN or Inf).\n", o);
    if (x->has_degenerate) {
        fprintf(o, "- **First degenerate output:** step %d (%s): ", x->degen_step, x->degen_kind);
        md_cell(o, x->degen_detail);
        fputs(".\n", o);
    }
    if (x->explanation[0]) { fputs("- **Why this output:** ", o); md_cell(o, x->explanation); fputs(".\n", o); }
    if (x->has_crash) fputs("- **The run crashed** (see the events and the backtrace below).\n", o);
    fputs("\n", o);
}

/* The picture (report --png): linked by a path relative to the report when
 * both sit in one directory, else by the path as given. */
static void section_picture(FILE *o, const bt_picture *p, const char *png, const char *md)
{
    const char *link = png;
    if (md) {
        const char *ps = strrchr(png, '/'), *ms = strrchr(md, '/');
        size_t pd = ps ? (size_t)(ps - png) : 0, mdl = ms ? (size_t)(ms - md) : 0;
        if (pd == mdl && !strncmp(png, md, pd)) link = ps ? ps + 1 : png;
    }
    fputs("## Picture\n\n![layers x steps, coloured by absmax against the f16 maximum; non-finite cells magenta, "
          "the first non-finite cell outlined in green, the walk-back path in black](", o);
    /* a link target: no spaces or parentheses unescaped */
    for (const char *c = link; *c; c++) {
        if (*c == ' ' || *c == '(' || *c == ')' || *c == '<' || *c == '>') fprintf(o, "%%%02X", (unsigned char)*c);
        else fputc(*c, o);
    }
    fputs(")\n\n", o);
    md_cell(o, p->caption);
    fprintf(o, ". Image %dx%d.", p->width, p->height);
    if (p->tokens_redacted) fputs(" Token text of redacted tokens is not drawn.", o);
    if (!p->tokens_drawn && p->n_steps) fprintf(o, " No token row (%d steps per column).", p->steps_per_col);
    fputs("\n\n", o);
}

static void section_environment(FILE *o, bt_trace_reader *r, const char *path)
{
    fputs("## Environment\n\n| | |\n|---|---|\n", o);
    /* no host name: the report is written to be pasted in public */
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    row(o, "CPU", rm.cpu);
    row(o, "backend", rm.backend);
    /* a trace of --engine llama.cpp says which llama.cpp computed it */
    const char *engine = rm.engine;
    if (engine) row(o, "engine", engine);
    if (rm.llama_cpp_version) {
        row(o, "llama.cpp (llama-cpp-python sdist)", rm.llama_cpp_version);
        row(o, "llama.cpp version", rm.llama_cpp_lib_version);
        row_code(o, "llama.cpp build", rm.llama_cpp_build);
        /* which llama.cpp path it recorded (traces before these keys: the old
         * adapter's, flash attention off and no repacking) */
        const char *ls = rm.llama_cpp_settings, *lp = rm.llama_cpp_path;
        row(o, "llama.cpp settings", ls ? ls : "not recorded (an older trace: flash_attn=off repack=off kv=f16)");
        if (lp) row(o, "llama.cpp path", lp);
    }
    row(o, "threads", rm.threads);
    row(o, "bangtrace", rm.tool_version);
    row(o, "trace schema", rm.schema_version);
    row(o, "started", rm.started_at);
    row(o, "finished", rm.finished_at);
    row(o, "run status", rm.status);
    row_code(o, "trace file", base_name(path));
    fputs("\n", o);
}

/* What the run stored and converted, and how far it sat from overflowing f16. */
static int section_numerics(FILE *o, bt_trace_reader *r)
{
    bt_headroom h;
    int rc = bt_headroom_analyze(r, 0, &h);
    if (rc) return rc;
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    const char *n = rm.numerics;
    fputs("## Numerics\n\n| | |\n|---|---|\n", o);
    row_code(o, "profile", n && *n ? n : "f32 (exact; the default)");
    char line[512];
    bt_headroom_verdict(&h, line, sizeof(line));
    row(o, "headroom", line);
    if (h.present && h.n_layers > 1) {
        bt_headroom_growth(&h, line, sizeof(line));
        row(o, "growth", line);
    }
    fputs("\n", o);
    bt_headroom_clear(&h);
    return BT_OK;
}

static void section_model(FILE *o, bt_trace_reader *r)
{
    fputs("## Model\n\n| | |\n|---|---|\n", o);
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    row(o, "name", rm.model_name);
    row_code(o, "file", base_name(rm.model_path));
    row_code(o, "SHA-256", rm.model_sha256);
    row(o, "format", rm.model_format);
    row(o, "architecture", rm.arch);
    row_code(o, "hyperparameters", rm.hparams);
    row_code(o, "tokenizer", rm.tokenizer);
    if (rm.tokenizer_path) row_code(o, "tokenizer file", base_name(rm.tokenizer_path));
    fputs("\n", o);
}

/* The --inject specs that never fired (inject_unfired events), as a JSON array. */
typedef struct unfired { json_t *specs; } unfired;

static int unfired_cb(void *user, const bt_trace_event_row *ev)
{
    unfired *u = user;
    json_array_append_new(u->specs, json_string(ev->detail ? ev->detail : "?"));
    return 0;
}

static int section_config(FILE *o, bt_trace_reader *r)
{
    fputs("## Configuration\n\n| | |\n|---|---|\n", o);
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    row_code(o, "sampling", rm.sampling);
    row(o, "argmax rule", rm.argmax_rule);
    row(o, "seed", rm.seed);
    const char *inj = rm.injections;
    bool requested = inj && strcmp(inj, "[]");
    row_code(o, "fault injections", requested ? inj : NULL);
    unfired u = { .specs = json_array() };
    if (!u.specs) return bt_error(BT_ENOMEM, "out of memory");
    int rc = requested ? bt_trace_events_each(r, "inject_unfired", unfired_cb, &u) : 0;
    if (rc < 0) { json_decref(u.specs); return rc; }
    json_t *all = requested ? json_loads(inj, 0, NULL) : NULL;
    size_t n_req = json_is_array(all) ? json_array_size(all) : 0, n_unf = json_array_size(u.specs);
    json_decref(all);
    char *unf = n_unf ? json_dumps(u.specs, JSON_COMPACT) : NULL;
    json_decref(u.specs);
    if (n_unf && !unf) return bt_error(BT_ENOMEM, "out of memory");
    if (n_unf) row_code(o, "never fired", unf);
    row(o, "taps", rm.taps);
    if (rm.tap_layers) row(o, "tapped layers", rm.tap_layers);
    row(o, "logit rows", rm.logits);
    fputs("\n", o);
    /* Claim an injection only when one changed something. */
    if (requested && n_unf >= n_req)
        fputs("Fault injections were requested but none fired (see `never fired`): nothing was injected, so\n"
              "every finding below is the run's own.\n\n", o);
    else if (requested && n_unf)
        fprintf(o, "Faults were injected on purpose in this run (see `fault injections`; %zu of %zu never fired and\n"
                "changed nothing): the finding below is the injected fault unless it says otherwise.\n\n", n_unf, n_req);
    else if (requested)
        fputs("Faults were injected on purpose in this run (see `fault injections`): the finding below is the\n"
              "injected fault unless it says otherwise.\n\n", o);
    free(unf);
    return BT_OK;
}

/* A batched server's request (serve --batching on): the cache blocks and
 * state slot behind it, and whose data it read. */
static void section_cache(FILE *o, const bt_provenance *p)
{
    const bt_provenance pv = *p;
    if (!pv.n_rows) return;
    fputs("## Cache provenance\n\n", o);
    fprintf(o, "This request ran on the batched server (its KV blocks in `kv_access`; the server's own trace, "
               "`server.db`, has every request's).\n\n");
    if (pv.hits[0]) fprintf(o, "- Prefix cache: %s.\n", pv.hits);
    else fputs("- Prefix cache: no hit; every position was computed for this request.\n", o);
    if (pv.contaminated) {
        fprintf(o, "- **Another request's data:** %s.\n", pv.culprit);
        for (int i = 0; i < pv.n_lines; i++)
            if (strcmp(pv.lines[i], pv.culprit)) fprintf(o, "- Also: %s.\n", pv.lines[i]);
    } else {
        fputs("- Nothing it read was written non-finite or misplaced by another request.\n", o);
    }
    fputc('\n', o);
}

static void section_propagation(FILE *o, const bt_analysis *x)
{
    if (!x->has_nonfinite) return;
    fputs("## Propagation\n\n"
          "The first bad tensor of each later layer in the same step, then the first later step where the\n"
          "KV cache carried the bad values forward (`kv_cache`: the layer's inputs were finite) or where the\n"
          "fault struck again (`recur`).\n\n"
          "| step | layer | tensor | how | NaN | +Inf | -Inf | values | bad tensors in layer |\n"
          "|---:|---:|---|---|---:|---:|---:|---:|---:|\n", o);
    char l[16];
    for (int i = 0; i < x->n_prop; i++) {
        const bt_prop_link *p = &x->prop[i];
        fprintf(o, "| %d | %s | `%s` | %s | %lld | %lld | %lld | %lld | %d |\n", p->t.step, bt_layer_label(p->t.layer, l, sizeof(l)),
                p->t.tensor, bt_prop_kind_name(p->kind), (long long)p->t.nan, (long long)p->t.pinf, (long long)p->t.ninf,
                (long long)p->t.n, p->n_bad);
    }
    fputs("\n", o);
}

/* ---- mixture of experts ---- */

typedef struct routes_md {
    FILE *o;
    int n, pos, layer;
} routes_md;

static int route_md_cb(void *user, const bt_trace_route_row *row)
{
    routes_md *m = user;
    if (m->n++ == 0)
        fputs("| model | position | layer | experts (weight), best first |\n|---|---:|---:|---|\n", m->o);
    if (m->n > 1 && row->pos == m->pos && row->layer == m->layer) {
        fprintf(m->o, ", expert[%d] (%.4f)", row->expert, row->weight);
    } else {
        if (m->n > 1) fputs(" |\n", m->o);
        fprintf(m->o, "| %s | %d | %d | expert[%d] (%.4f)", row->model, row->pos, row->layer, row->expert, row->weight);
    }
    m->pos = row->pos;
    m->layer = row->layer;
    return m->n >= 4096 ? 1 : 0;     /* a big model's prefill: the first rows say enough */
}

/* Which experts the tokens of the first bad step went through: evidence
 * when an expert's weights or kernel are at fault. */
static int section_routes(FILE *o, bt_trace_reader *r, const bt_analysis *x)
{
    if (!x->has_nonfinite) return BT_OK;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return bt_error(BT_ENOMEM, "out of memory");
    routes_md m = { .o = mem, .pos = -1, .layer = -1 };
    int rc = bt_trace_moe_routes_each(r, x->first.step, route_md_cb, &m);
    if (m.n) fputs(" |\n", mem);
    fclose(mem);
    if (rc >= 0 && m.n) {
        fprintf(o, "## Expert routes at step %d\n\nThe first non-finite tensor is `%s`.\n\n%s%s\n", x->first.step,
                x->first.tensor, buf, m.n >= 4096 ? "(first 4096 routes shown)\n\n" : "");
    }
    free(buf);
    return rc < 0 ? rc : BT_OK;
}

/* ---- speculative decoding ---- */

typedef struct vlist { int *v; int n, cap; } vlist;

static int verify_cb(void *user, const bt_trace_spec_step_row *row)
{
    vlist *l = user;
    return BT_VEC_PUSH(l->v, l->n, l->cap, row->step);
}

/* Pieces of the few ids a table shows, found in one pass over the trail. */
typedef struct piece_cache { int32_t ids[128]; char pieces[128][48]; bool found[128]; int n; } piece_cache;

static void pc_want(piece_cache *c, int32_t id)
{
    for (int i = 0; i < c->n; i++) if (c->ids[i] == id) return;
    if (c->n < 128) { c->ids[c->n] = id; c->pieces[c->n][0] = 0; c->found[c->n] = false; c->n++; }
}

static int pc_cb(void *user, const bt_trace_token_row *t)
{
    piece_cache *c = user;
    if (!t->piece) return 0;
    for (int i = 0; i < c->n; i++) {
        if (c->ids[i] != t->id || c->found[i]) continue;
        bt_text_escape(t->piece, t->piece_len, c->pieces[i], sizeof(c->pieces[i]), 0, BT_TEXT_UTF8 | BT_TEXT_ELLIPSIS);
        c->found[i] = true;
    }
    return 0;
}

static const char *pc_get(const piece_cache *c, int32_t id)
{
    for (int i = 0; i < c->n; i++) if (c->ids[i] == id) return c->pieces[i];
    return "";
}

static void token_cell(FILE *o, const piece_cache *c, int32_t id)
{
    if (id < 0) { fputs("-", o); return; }
    fprintf(o, "%d", id);
    const char *p = pc_get(c, id);
    if (p[0]) { fputs(" `", o); md_cell(o, p); fputc('`', o); }
}

typedef struct trail_rows { bt_trace_spec_trail_row v[256]; int n; } trail_rows;

static int trail_rows_cb(void *user, const bt_trace_spec_trail_row *t)
{
    trail_rows *l = user;
    if (l->n == 256) return 1;
    l->v[l->n] = *t;
    l->v[l->n].reason = NULL;
    /* reason is borrowed: keep the few known ones as static strings */
    static const char *const reasons[] = { "match", "mismatch", "accept p/q", "reject p/q", "after_reject", "after_stop" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(reasons); i++)
        if (t->reason && !strcmp(t->reason, reasons[i])) l->v[l->n].reason = reasons[i];
    if (t->reason && !l->v[l->n].reason) l->v[l->n].reason = "other";
    l->n++;
    return 0;
}

typedef struct srow_list { bt_trace_spec_step_row v[16]; int n; } srow_list;

static int srow_cb(void *user, const bt_trace_spec_step_row *row)
{
    srow_list *l = user;
    if (l->n < 16) l->v[l->n++] = *row;
    return 0;
}

/* The verify step the table centres on: the first bad target verify; the
 * verify that consumed a bad draft; the first degenerate step; else the
 * first rejection (or the first verify of a clean, fully accepted run). */
static int focus_index(bt_trace_reader *r, const bt_analysis *x, const vlist *v, int *out)
{
    *out = 0;
    int at = -1;
    if (x->has_nonfinite) at = x->first.step;
    else if (x->has_degenerate) at = x->degen_step;
    if (at >= 0) {
        while (*out < v->n - 1 && v->v[*out] < at) (*out)++;
        return BT_OK;
    }
    srow_list l;
    for (int i = 0; i < v->n; i += 16) {
        l.n = 0;
        int rc = bt_trace_spec_steps_each(r, v->v[i], v->v[BT_MIN(i + 15, v->n - 1)], srow_cb, &l);
        if (rc < 0) return rc;
        for (int j = 0; j < l.n; j++)
            if (l.v[j].accepted < l.v[j].k) {
                for (int q = 0; q < v->n; q++) if (v->v[q] == l.v[j].step) { *out = q; return BT_OK; }
            }
    }
    return BT_OK;
}

static int section_spec(FILE *o, bt_trace_reader *r, const bt_analysis *x)
{
    const bt_spec_analysis *s = &x->spec;
    if (!s->present) return BT_OK;
    char buf[512];
    fputs("## Speculative decoding\n\n| | |\n|---|---|\n", o);
    int nl = !strncmp(s->drafter, "self:", 5) ? atoi(s->drafter + 5) : -1;
    if (nl >= 0) snprintf(buf, sizeof(buf), "%s (the target's first %d layers, its output norm and head)", s->drafter, nl);
    else if (!strncmp(s->drafter, "ngram:", 6)) snprintf(buf, sizeof(buf), "%s (prompt lookup: no draft forward)", s->drafter);
    else if (!strcmp(s->drafter, "model")) {
        bt_run_meta rm;
        bt_run_meta_read(r, &rm);
        const char *dp = rm.draft_model_path;
        snprintf(buf, sizeof(buf), "draft model %s", dp && *dp ? dp : "(path not recorded)");
    } else snprintf(buf, sizeof(buf), "%s", s->drafter[0] ? s->drafter : "unknown");
    row(o, "drafter", buf);
    if (s->k > 0) fprintf(o, "| k (tokens drafted per verify) | %d |\n", s->k);
    fprintf(o, "| passes | %d target verify, %d plain decode, %d draft |\n", s->verify_steps, s->decode_steps, s->draft_steps);
    if (isnan(s->acceptance)) fputs("| acceptance | nothing drafted |\n", o);
    else fprintf(o, "| acceptance | %.2f (%lld of %lld drafted tokens) |\n", s->acceptance, (long long)s->accepted, (long long)s->drafted);
    if (s->n_windows > 1) {
        fprintf(o, "| acceptance per %d verify steps |", BT_SPEC_WINDOW);
        for (int i = 0; i < s->n_windows && i < 32; i++) {
            const bt_spec_window *w = &s->windows[i];
            if (w->drafted) fprintf(o, " %.2f", (double)w->accepted / w->drafted); else fputs(" -", o);
        }
        if (s->n_windows > 32) fprintf(o, " ... (%d windows)", s->n_windows);
        fputs(" |\n", o);
    }
    if (x->has_nonfinite) {
        if (!strcmp(s->first_model, "draft")) {
            snprintf(buf, sizeof(buf), "the drafter's pass at step %d (`%s`), not the target", x->first.step, x->first.tensor);
            row(o, "first non-finite from", buf);
            fprintf(o, "| drafts from non-finite rows | %lld (%lld accepted) |\n", (long long)s->nonfinite_drafts,
                    (long long)s->nonfinite_drafts_accepted);
            row(o, "output", s->output_clean ? "clean: the target verified every drafted token and rejected the bad ones"
                                             : "not clean (see the summary)");
        } else {
            snprintf(buf, sizeof(buf), "the target's %s pass at step %d (`%s`), not the drafter", x->first.kind[0] ? x->first.kind : "",
                     x->first.step, x->first.tensor);
            row(o, "first non-finite from", buf);
        }
    }
    if (s->amp_in_prefill) row(o, "amplification", "none: the target went non-finite in the prefill, which plain decoding runs the same way");
    else if (s->amp_emitted > 0) {
        char until[64] = "";
        if (s->target_bad_step >= 0 || x->has_degenerate) snprintf(until, sizeof(until), " up to step %d", s->amp_until);
        snprintf(buf, sizeof(buf), "%lld target positions through %s in %lld forwards for %lld emitted tokens%s: "
                 "%.2f per token, %.2fx plain decoding (%lld positions in %lld forwards)",
                 (long long)s->amp_positions, s->target_bad_tensor[0] ? s->target_bad_tensor : "every target op",
                 (long long)s->amp_forwards, (long long)s->amp_emitted, until, s->amp_ratio, s->amp_ratio,
                 (long long)s->amp_emitted, (long long)s->amp_emitted);
        row(o, "amplification", buf);
        if (s->amp_draft_positions > 0) {
            snprintf(buf, sizeof(buf), "%lld more positions through the same weights in self-draft passes", (long long)s->amp_draft_positions);
            row(o, "self-draft exposure", buf);
        }
    }
    if (s->n_post_stop) {
        snprintf(buf, sizeof(buf), "%d, first at step %d: %s", s->n_post_stop, s->post_stop_step, s->post_stop_detail);
        row(o, "post_stop_draft", buf);
    }
    if (s->n_accept_collapse) {
        snprintf(buf, sizeof(buf), "%d, first at step %d: %s", s->n_accept_collapse, s->accept_collapse_step, s->accept_collapse_detail);
        row(o, "accept_collapse", buf);
    }
    fputs("\n", o);

    /* The trail around the focus: two verify steps either side. */
    vlist v = { 0 };
    int rc = bt_trace_spec_steps_each(r, INT32_MIN, INT32_MAX, verify_cb, &v);
    if (rc < 0 || v.n == 0) { free(v.v); return rc < 0 ? rc : BT_OK; }
    int f;
    if ((rc = focus_index(r, x, &v, &f))) { free(v.v); return rc; }
    int lo = BT_MAX(0, f - 2), hi = BT_MIN(v.n - 1, f + 2);
    int from = v.v[lo], to = v.v[hi], focus = v.v[f];
    free(v.v);
    trail_rows *tr = calloc(1, sizeof(*tr));
    srow_list *sl = calloc(1, sizeof(*sl));
    piece_cache *pc = calloc(1, sizeof(*pc));
    if (!tr || !sl || !pc) { free(tr); free(sl); free(pc); return bt_error(BT_ENOMEM, "out of memory"); }
    if ((rc = bt_trace_spec_trail_each(r, from, to, trail_rows_cb, tr)) < 0 ||
        (rc = bt_trace_spec_steps_each(r, from, to, srow_cb, sl)) < 0) goto done;
    rc = BT_OK;
    for (int i = 0; i < tr->n; i++) { pc_want(pc, tr->v[i].draft_token); if (tr->v[i].target_token >= 0) pc_want(pc, tr->v[i].target_token); }
    for (int i = 0; i < sl->n; i++) if (sl->v[i].bonus_token >= 0) pc_want(pc, sl->v[i].bonus_token);
    if ((rc = bt_trace_tokens_each(r, 0, 0, pc_cb, pc)) < 0) goto done;
    rc = BT_OK;
    fprintf(o, "Draft-vs-verify trail around verify step %d (steps %d-%d): each drafted token, the target's own pick\n"
               "at that position and whether it was accepted; the last row of a step is the token the target added.\n\n"
               "| verify step | pos | drafted | q(draft) | draft row | target pick | p(draft) | accepted | reason |\n"
               "|---:|---:|---|---:|---|---|---:|---|---|\n", focus, from, to);
    int t = 0;
    for (int i = 0; i < sl->n; i++) {
        const bt_trace_spec_step_row *st = &sl->v[i];
        int first_pos = -1;
        for (; t < tr->n && tr->v[t].step < st->step; t++) {}
        for (; t < tr->n && tr->v[t].step == st->step; t++) {
            const bt_trace_spec_trail_row *d = &tr->v[t];
            fprintf(o, "| %d%s | %d | ", d->step, d->step == focus ? " **<-**" : "", d->draft_pos);
            token_cell(o, pc, d->draft_token);
            if (isnan(d->draft_prob)) fputs(" | - | ", o); else fprintf(o, " | %.3g | ", d->draft_prob);
            fputs(d->draft_finite ? "finite" : "**non-finite**", o);
            fputs(" | ", o);
            token_cell(o, pc, d->target_token);
            if (isnan(d->target_prob)) fputs(" | - | ", o); else fprintf(o, " | %.3g | ", d->target_prob);
            fprintf(o, "%s | %s |\n", d->accepted ? "yes" : "no", d->reason ? d->reason : "-");
            if (first_pos < 0) first_pos = d->draft_pos;
        }
        if (st->bonus_token < 0) continue;
        /* the target's token lands right after the accepted prefix */
        if (first_pos >= 0) fprintf(o, "| %d | %d | | | | ", st->step, first_pos + st->accepted);
        else fprintf(o, "| %d | - | | | | ", st->step);
        token_cell(o, pc, st->bonus_token);
        fprintf(o, " | | added | %s |\n", st->bonus_kind[0] ? st->bonus_kind : "-");
    }
    fputs("\n", o);
done:
    free(tr); free(sl); free(pc);
    return rc;
}

static int section_events(FILE *o, bt_trace_reader *r, const bt_analysis *x)
{
    fputs("## Collapse summary\n\n", o);
    if (!x->n_events) {
        fputs("No detector events (no non-finite value, token wall, repetition loop, out-of-vocabulary id,\n"
              "special-token leak or crash was detected).\n\n", o);
        return BT_OK;
    }
    fputs("| event | count | first step |\n|---|---:|---:|\n", o);
    for (int i = 0; i < x->n_event_kinds; i++) {
        char buf[16];
        fprintf(o, "| %s | %d | %s |\n", x->events[i].kind, x->events[i].count,
                x->events[i].first_step >= 0 ? (snprintf(buf, sizeof(buf), "%d", x->events[i].first_step), buf) : "-");
    }
    fputs("\n| step | event | where | detail |\n|---:|---|---|---|\n", o);
    ev_list l = { .o = o };
    int rc = bt_trace_events_each(r, NULL, event_line, &l);
    if (rc < 0) return rc;
    if (l.total > l.shown) fprintf(o, "\n(%d more events in the trace: `sqlite3 TRACE 'SELECT * FROM v_events'`)\n", l.total - l.shown);
    fputs("\n", o);
    return BT_OK;
}

static int section_logits(FILE *o, bt_trace_reader *r, const bt_analysis *x)
{
    int step = x->bad_logits_step >= 0 ? x->bad_logits_step : x->has_nonfinite ? x->first.step
             : x->has_degenerate ? x->degen_step : -1;
    if (step < 0) return BT_OK;
    bt_trace_logits_row li[4];
    int n = 0, rc = bt_trace_step_logits(r, step, li, 4, &n);
    if (rc) return rc;
    if (n == 0) return BT_OK;
    const bt_trace_logits_row *L = &li[n - 1];
    fprintf(o, "## Logit snapshot at step %d (position %d)\n\n| | |\n|---|---|\n", step, L->pos);
    fprintf(o, "| vocabulary | %d |\n| NaN / +Inf / -Inf | %lld / %lld / %lld |\n", L->n_vocab, (long long)L->nan,
            (long long)L->pinf, (long long)L->ninf);
    if (isnan(L->max)) fputs("| max (finite) | none |\n", o); else fprintf(o, "| max (finite) | %.6g |\n", L->max);
    fprintf(o, "| argmax: first / torch / triton-block | %d / %d / %d |\n", L->argmax_first, L->argmax_torch, L->argmax_triton);
    fprintf(o, "| rule | %s |\n| chosen id | %d |\n", L->rule[0] ? L->rule : "-", L->chosen);
    if (isnan(L->entropy)) fputs("| entropy | undefined (row not finite) |\n", o); else fprintf(o, "| entropy | %.4f nats |\n", L->entropy);
    fprintf(o, "| full row stored | %s |\n\n", L->has_row ? "yes (`logit_rows`)" : "no");
    if (L->k > 0) {
        fputs("| rank | id | piece | logit |\n|---:|---:|---|---:|\n", o);
        for (int i = 0; i < L->k && i < 10; i++) {
            char piece[96];
            if ((rc = bt_analyze_piece(r, L->topk_ids[i], piece, sizeof(piece)))) return rc;
            fprintf(o, "| %d | %d | ", i + 1, L->topk_ids[i]);
            if (piece[0]) { fputc('`', o); md_cell(o, piece); fputc('`', o); }
            fprintf(o, " | %.6g |\n", L->topk_vals[i]);
        }
        fputs("\n", o);
    } else fputs("No finite logit to rank.\n\n", o);
    return BT_OK;
}

typedef struct bt_first { FILE *o; bool done; } bt_first;

/* Does a frame line ("#N 0xPC symbol+0xOFF (module)") belong to the
 * recorder or to the engine's hand-over of a tensor to it? Traces recorded
 * before the recorder took the stack where the op runs start with those. */
static bool recorder_frame(const char *line, size_t n)
{
    static const char *const own[] = { "observe_taps", "cb_observe", "record_tap", "cb_flush", "own_backtrace",
                                       "tap", "tap_expert", "bt_engine_tap_deliver" };
    const char *sym = line[0] == '#' ? memchr(line, ' ', n) : NULL;
    sym = sym ? memchr(sym + 1, ' ', n - (size_t)(sym + 1 - line)) : NULL;
    if (!sym) return false;
    sym++;
    size_t left = (size_t)(line + n - sym);
    for (size_t i = 0; i < BT_ARRAY_SIZE(own); i++) {
        size_t l = strlen(own[i]);
        if (left > l && !strncmp(sym, own[i], l) && (sym[l] == '+' || sym[l] == '.')) return true;
    }
    return false;
}

static int backtrace_cb(void *user, const bt_trace_backtrace_row *b)
{
    bt_first *f = user;
    const char *frames = b->frames ? b->frames : "";
    int skipped = 0;
    if (b->kind && !strcmp(b->kind, "first_nonfinite")) {
        const char *p = frames;
        while (*p) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (!recorder_frame(p, n)) break;
            p += n + (e ? 1 : 0);
            skipped++;
        }
        if (*p) frames = p; else skipped = 0;      /* nothing but the recorder's: shown whole */
    }
    fprintf(f->o, "## Host backtrace (%s, step %d)\n\n", b->kind ? b->kind : "?", b->step);
    if (skipped)
        fprintf(f->o, "(%d frame%s of bangtrace's recorder above the op left out)\n\n", skipped, skipped == 1 ? "" : "s");
    fprintf(f->o, "```\n%s%s```\n\n", frames, frames[0] && frames[strlen(frames) - 1] == '\n' ? "" : "\n");
    f->done = true;
    return 1;
}

static void section_reproduce(FILE *o, bt_trace_reader *r, const char *path)
{
    fputs("## Reproduce\n\n", o);
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    const char *argv_json = rm.argv;
    json_error_t err;
    json_t *a = argv_json ? json_loads(argv_json, 0, &err) : NULL;
    if (!json_is_array(a) || json_array_size(a) == 0) {
        fputs("The trace does not record its command line (meta `argv`).\n\n", o);
        json_decref(a);
    } else {
        fputs("The command that recorded this trace (relative paths are as it ran; absolute paths are shown\n"
              "by their base names):\n\n```sh\n", o);
        for (size_t i = 0; i < json_array_size(a); i++) {
            const char *s = json_string_value(json_array_get(a, i));
            if (i) fputc(' ', o);
            shell_quote(o, s ? s : "");
        }
        fputs("\n```\n\n", o);
        json_decref(a);
    }
    /* an export (bangtrace export --redact) says what it removed in meta redacted */
    const char *red = rm.redacted, *req = rm.request_json;
    bool redacted = (red && strcmp(red, "no")) || (req && !strcmp(req, "[redacted]"));
    if (redacted)
        fprintf(o, "This trace was exported with `--redact=%s`: the request body and prompt are not in it, and the token\n"
                "ids `bisect --reference` replays are gone.\n\n", red && !strcmp(red, "all") ? "all" : "prompt");
    else if (req) fputs("The request body is stored in the trace (meta `request_json`).\n\n", o);
    const char *model = base_name(rm.model_path);
    fputs("Analyse it again:\n\n```sh\nbangtrace bisect ", o);
    shell_quote(o, base_name(path));
    if (!redacted) {
        fputs("\nbangtrace bisect ", o);
        shell_quote(o, base_name(path));
        fputs(" --reference", o);
        if (model) { fputs(" --model ", o); shell_quote(o, model); }
    }
    fputs("\n```\n", o);
}

/* Every byte of the report passes the escaper once more on the way out:
 * whatever a section forgot (a backtrace frame, an argv element, a tensor
 * name from a crafted trace) still reaches the reader's terminal or issue
 * tracker as visible text. Idempotent on text already escaped. */
#define REPORT_TEXT (BT_TEXT_UTF8 | BT_TEXT_KEEPNL | BT_TEXT_RAWBS)

int cmd_report(int argc, char **argv)
{
    const char *trace = NULL, *out_path = NULL, *png_arg = NULL;
    bool force = false, png = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) { bt_error(BT_EINVAL, "%s needs a value", a); return bt_cmd_fail("report"); }
            out_path = argv[++i];
        } else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "--png")) png = true;
        else if (!strncmp(a, "--png=", 6)) {
            if (!a[6]) { bt_error(BT_EINVAL, "--png=PNG needs a file name"); return bt_cmd_fail("report"); }
            png = true;
            png_arg = a + 6;
        } else if (a[0] == '-' && a[1]) { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help report)", a); return bt_cmd_fail("report"); }
        else if (!trace) trace = a;
        else { bt_error(BT_EINVAL, "unexpected argument '%s' (one trace at a time)", a); return bt_cmd_fail("report"); }
    }
    if (!trace) { bt_error(BT_EINVAL, "give a trace file (see bangtrace help report)"); return bt_cmd_fail("report"); }
    if (force && !out_path && !png_arg) { bt_error(BT_EINVAL, "--force replaces an existing -o FILE: give -o FILE"); return bt_cmd_fail("report"); }
    if (png && !bt_picture_available()) {
        bt_error(BT_EUNSUPPORTED, "--png: this bangtrace was built without libpng (install libpng-dev and reconfigure)");
        return bt_cmd_fail("report");
    }
    if (png && !png_arg && !out_path) {
        bt_error(BT_EINVAL, "--png writes the picture beside -o FILE: give -o FILE or --png=PNG");
        return bt_cmd_fail("report");
    }
    char *png_path = png ? (png_arg ? strdup(png_arg) : bt_picture_path_beside(out_path)) : NULL;
    if (png && !png_path) { bt_error(BT_ENOMEM, "out of memory"); return bt_cmd_fail("report"); }
    if (png_path && out_path && !strcmp(png_path, out_path)) {
        bt_error(BT_EINVAL, "--png=%s: the picture and the report (-o) must be different files", png_path);
        free(png_path);
        return bt_cmd_fail("report");
    }
    const bt_out_input in[] = { { "TRACE", trace }, { "-o", out_path } };
    if (out_path && bt_outfile_check(out_path, BT_OUT_TEXT, force, in, 1, NULL)) { free(png_path); return bt_cmd_fail("report"); }
    if (png_path && bt_outfile_check(png_path, BT_OUT_TEXT, force, in, out_path ? 2 : 1, NULL)) {
        free(png_path);
        return bt_cmd_fail("report");
    }

    bt_trace_reader *r = NULL;
    bt_analysis x;
    memset(&x, 0, sizeof(x));
    bt_picture pic;
    memset(&pic, 0, sizeof(pic));
    FILE *o = NULL;
    char *tmp = NULL;
    int status = 2, rc;
    char *buf = NULL;
    size_t buf_len = 0;
    if (bt_trace_open(trace, &r) || bt_analyze_verify(trace) || bt_analyze(r, &x)) goto fail;
    /* The report is composed in memory and written at the end, so a read
     * error halfway never leaves half a report on stdout or in FILE. */
    if (!(o = open_memstream(&buf, &buf_len))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }

    bt_run_state rs;
    if (bt_run_state_get(r, trace, &rs)) goto fail;
    /* The heading names the model: one line, escaped like a cell. */
    bt_run_meta rm;
    bt_run_meta_read(r, &rm);
    const char *model = rm.model_name;
    if (x.has_nonfinite)
        fprintf(o, "# bangtrace report: non-finite %s at step %d, layer %d%s", bt_text_esc(x.first.tensor), x.first.step,
                x.first.layer, x.spec.present && !strcmp(x.first.model, "draft") ? " (draft pass)" : "");
    else if (x.has_degenerate)
        fprintf(o, "# bangtrace report: %s at step %d", bt_text_esc(x.degen_kind), x.degen_step);
    else if (x.has_crash)
        fputs("# bangtrace report: crash", o);
    else if (rs.unfinished) fputs("# bangtrace report: unfinished run", o);
    else fputs("# bangtrace report: clean run", o);
    if (model) { fputs(" of ", o); md_cell(o, model); }
    fputs("\n\n", o);
    if (rs.line[0]) fprintf(o, "**%s%s**\n\n", rs.line[0] == 'u' ? "U" : "L", rs.line + 1);
    bt_provenance pv;
    if ((rc = bt_provenance_get(r, x.has_nonfinite ? x.first.step : -1, x.has_nonfinite ? x.first.layer : -1, &pv))) goto fail;
    section_summary(o, &x, &pv);
    if (png_path) {
        if ((rc = bt_picture_render(r, &pic))) goto fail;
        section_picture(o, &pic, png_path, out_path);
    }
    section_environment(o, r, trace);
    section_model(o, r);
    if ((rc = section_config(o, r))) goto fail;
    if ((rc = section_numerics(o, r))) goto fail;
    section_propagation(o, &x);
    section_cache(o, &pv);
    if ((rc = section_routes(o, r, &x))) goto fail;
    if ((rc = section_spec(o, r, &x))) goto fail;
    if ((rc = section_events(o, r, &x))) goto fail;
    if ((rc = section_logits(o, r, &x))) goto fail;
    bt_first bf = { .o = o };
    if ((rc = bt_trace_backtraces_each(r, backtrace_cb, &bf)) < 0) goto fail;
    section_reproduce(o, r, trace);
    bool mem_err = ferror(o) != 0;
    fclose(o);
    o = NULL;
    if (mem_err) { bt_error(BT_ENOMEM, "out of memory composing the report"); goto fail; }
    {
        size_t n = 0;
        char *clean = strip_local(buf, buf_len, rm.host, &n);
        if (!clean) { bt_error(BT_ENOMEM, "out of memory composing the report"); goto fail; }
        free(buf);
        buf = clean;
        buf_len = n;
    }
    /* the picture first: a report never links a picture that is not there */
    if (png_path && bt_picture_save(&pic, png_path, force, in, out_path ? 2 : 1)) goto fail;
    if (out_path) {
        /* A new temporary file beside FILE (created exclusively, never
         * through a link) + rename: FILE is either the whole report or
         * untouched, and rename replaces a name, never a link's target. */
        size_t len = strlen(out_path) + 8;
        if (!(tmp = malloc(len))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        snprintf(tmp, len, "%s.XXXXXX", out_path);
        int fd = mkstemp(tmp);
        if (fd < 0) { bt_error(BT_EIO, "%s: %s", out_path, strerror(errno)); free(tmp); tmp = NULL; goto fail; }
        /* 0600 (mkstemp's), like the trace it comes from: a report of an
         * unredacted trace quotes the generated text */
        FILE *f = fdopen(fd, "w");
        if (!f) { close(fd); bt_error(BT_EIO, "%s: %s", tmp, strerror(errno)); goto fail; }
        bool bad = bt_text_fput(buf, buf_len, REPORT_TEXT, f) != 0;
        if (fclose(f) != 0 || bad) { bt_error(BT_EIO, "%s: write failed: %s", tmp, strerror(errno)); goto fail; }
        /* checked again right before the rename: the trace may have become FILE meanwhile */
        if (bt_outfile_check(out_path, BT_OUT_TEXT, force, in, 1, NULL)) goto fail;
        if (rename(tmp, out_path) != 0) { bt_error(BT_EIO, "%s: %s", out_path, strerror(errno)); goto fail; }
    } else if (bt_text_fput(buf, buf_len, REPORT_TEXT, stdout) != 0 || fflush(stdout) != 0) {
        bt_error(BT_EIO, "standard output: write failed: %s", strerror(errno));
        goto fail;
    }
    status = 0;
    goto out;
fail:
    status = bt_cmd_fail("report");
out:
    if (o) fclose(o);
    if (status && tmp) remove(tmp);
    free(tmp);
    free(buf);
    free(png_path);
    bt_picture_free(&pic);
    bt_analysis_clear(&x);
    bt_trace_reader_close(r);
    return status;
}
