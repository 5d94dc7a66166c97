/* cmd_report.c - `bangtrace report`: a markdown report of a trace, ready to
 * paste into an upstream issue.
 *
 * Everything comes from the trace itself (a trace is self-describing): the
 * environment and configuration from meta, the finding from the same
 * analysis bisect prints, and the command line to reproduce from meta.argv,
 * shell-quoted so it can be pasted as is. */
#include "cmd.h"
#include "trace/analyze.h"
#include "trace/reader.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cmd_report_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace report TRACE [-o FILE]\n\n"
        "Write a markdown report of a trace (bangtrace run --trace) for an upstream\n"
        "issue: environment (host, CPU, tool version, backend, threads), model and\n"
        "SHA-256, configuration (sampling, argmax rule, injections), the first\n"
        "non-finite (step, layer, op) with its counts, the propagation table, the\n"
        "collapse summary (detector events), the logit snapshot at the first bad step,\n"
        "the host backtrace and the exact command line to reproduce. A clean trace is\n"
        "reported as clean.\n\n"
        "  -o, --output FILE   write the report to FILE instead of standard output\n\n"
        "Exit status: 0 report written, 2 error (missing, corrupt or non-trace file).\n");
}

/* Text for a markdown table cell or inline code: no newlines, '|' escaped,
 * backticks avoided so the cell never breaks the table. */
static void md_cell(FILE *o, const char *s)
{
    if (!s) { fputs("-", o); return; }
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '|') fputs("\\|", o);
        else if (c == '`') fputc('\'', o);
        else if (c == '\n') fputs(" ", o);
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\x%02x", c);
        else fputc(c, o);
    }
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

static void print_counts(FILE *o, const bt_bad_tensor *t)
{
    fprintf(o, "%lld NaN, %lld +Inf, %lld -Inf of %lld values", (long long)t->nan, (long long)t->pinf,
            (long long)t->ninf, (long long)t->n);
}

static const char *layer_str(int layer, char *buf, size_t cap)
{
    if (layer < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%d", layer);
    return buf;
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

static void section_summary(FILE *o, const bt_analysis *x)
{
    fputs("## Summary\n\n", o);
    if (!bt_analysis_found(x)) {
        fprintf(o, "Clean: no non-finite tensor, no degenerate output%s in %d steps (%d tapped tensors, %d generated tokens).\n\n",
                x->n_events ? "" : " and no detector events", x->n_steps, x->n_tensors, x->n_gen);
        return;
    }
    char l[16];
    if (x->has_nonfinite) {
        const bt_bad_tensor *f = &x->first;
        fprintf(o, "- **First non-finite:** step %d, position %d, layer %s, op `%s` (`%s`), first at index %d: ",
                f->step, f->pos, layer_str(f->layer, l, sizeof(l)), f->op, f->tensor, f->first_bad_index);
        print_counts(o, f);
        fputs(".\n", o);
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

static void section_environment(FILE *o, bt_trace_reader *r, const char *path)
{
    fputs("## Environment\n\n| | |\n|---|---|\n", o);
    row(o, "host", bt_trace_meta_get(r, "host"));
    row(o, "CPU", bt_trace_meta_get(r, "cpu"));
    row(o, "backend", bt_trace_meta_get(r, "backend"));
    row(o, "threads", bt_trace_meta_get(r, "threads"));
    row(o, "bangtrace", bt_trace_meta_get(r, "tool_version"));
    row(o, "trace schema", bt_trace_meta_get(r, "schema_version"));
    row(o, "started", bt_trace_meta_get(r, "started_at"));
    row(o, "finished", bt_trace_meta_get(r, "finished_at"));
    row(o, "run status", bt_trace_meta_get(r, "status"));
    row_code(o, "trace file", path);
    fputs("\n", o);
}

static void section_model(FILE *o, bt_trace_reader *r)
{
    fputs("## Model\n\n| | |\n|---|---|\n", o);
    row(o, "name", bt_trace_meta_get(r, "model_name"));
    row_code(o, "path", bt_trace_meta_get(r, "model_path"));
    row_code(o, "SHA-256", bt_trace_meta_get(r, "model_sha256"));
    row(o, "format", bt_trace_meta_get(r, "model_format"));
    row(o, "architecture", bt_trace_meta_get(r, "arch"));
    row_code(o, "hyperparameters", bt_trace_meta_get(r, "hparams"));
    row_code(o, "tokenizer", bt_trace_meta_get(r, "tokenizer"));
    if (bt_trace_meta_get(r, "tokenizer_path")) row_code(o, "tokenizer file", bt_trace_meta_get(r, "tokenizer_path"));
    fputs("\n", o);
}

static void section_config(FILE *o, bt_trace_reader *r)
{
    fputs("## Configuration\n\n| | |\n|---|---|\n", o);
    row_code(o, "sampling", bt_trace_meta_get(r, "sampling"));
    row(o, "argmax rule", bt_trace_meta_get(r, "argmax_rule"));
    row(o, "seed", bt_trace_meta_get(r, "seed"));
    const char *inj = bt_trace_meta_get(r, "injections");
    row_code(o, "fault injections", inj && strcmp(inj, "[]") ? inj : NULL);
    row(o, "taps", bt_trace_meta_get(r, "taps"));
    if (bt_trace_meta_get(r, "tap_layers")) row(o, "tapped layers", bt_trace_meta_get(r, "tap_layers"));
    row(o, "logit rows", bt_trace_meta_get(r, "logits"));
    fputs("\n", o);
    if (inj && strcmp(inj, "[]"))
        fputs("Faults were injected on purpose in this run (see `fault injections`): the finding below is the\n"
              "injected fault unless it says otherwise.\n\n", o);
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
        fprintf(o, "| %d | %s | `%s` | %s | %lld | %lld | %lld | %lld | %d |\n", p->t.step, layer_str(p->t.layer, l, sizeof(l)),
                p->t.tensor, bt_prop_kind_name(p->kind), (long long)p->t.nan, (long long)p->t.pinf, (long long)p->t.ninf,
                (long long)p->t.n, p->n_bad);
    }
    fputs("\n", o);
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

static int backtrace_cb(void *user, const bt_trace_backtrace_row *b)
{
    bt_first *f = user;
    fprintf(f->o, "## Host backtrace (%s, step %d)\n\n```\n%s%s```\n\n", b->kind ? b->kind : "?", b->step,
            b->frames ? b->frames : "", b->frames && b->frames[0] && b->frames[strlen(b->frames) - 1] == '\n' ? "" : "\n");
    f->done = true;
    return 1;
}

static void section_reproduce(FILE *o, bt_trace_reader *r, const char *path)
{
    fputs("## Reproduce\n\n", o);
    const char *argv_json = bt_trace_meta_get(r, "argv");
    json_error_t err;
    json_t *a = argv_json ? json_loads(argv_json, 0, &err) : NULL;
    if (!json_is_array(a) || json_array_size(a) == 0) {
        fputs("The trace does not record its command line (meta `argv`).\n\n", o);
        json_decref(a);
    } else {
        fputs("The command that recorded this trace (paths are relative to where it ran):\n\n```sh\n", o);
        for (size_t i = 0; i < json_array_size(a); i++) {
            const char *s = json_string_value(json_array_get(a, i));
            if (i) fputc(' ', o);
            shell_quote(o, s ? s : "");
        }
        fputs("\n```\n\n", o);
        json_decref(a);
    }
    if (bt_trace_meta_get(r, "request_json")) fputs("The request body is stored in the trace (meta `request_json`).\n\n", o);
    const char *model = bt_trace_meta_get(r, "model_path");
    fputs("Analyse it again:\n\n```sh\nbangtrace bisect ", o);
    shell_quote(o, path);
    fputs("\nbangtrace bisect ", o);
    shell_quote(o, path);
    fputs(" --reference", o);
    if (model) { fputs(" --model ", o); shell_quote(o, model); }
    fputs("\n```\n", o);
}

int cmd_report(int argc, char **argv)
{
    const char *trace = NULL, *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) { bt_error(BT_EINVAL, "%s needs a value", a); return bt_cmd_fail("report"); }
            out_path = argv[++i];
        } else if (a[0] == '-' && a[1]) { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help report)", a); return bt_cmd_fail("report"); }
        else if (!trace) trace = a;
        else { bt_error(BT_EINVAL, "unexpected argument '%s' (one trace at a time)", a); return bt_cmd_fail("report"); }
    }
    if (!trace) { bt_error(BT_EINVAL, "give a trace file (see bangtrace help report)"); return bt_cmd_fail("report"); }

    bt_trace_reader *r = NULL;
    bt_analysis x;
    memset(&x, 0, sizeof(x));
    FILE *o = NULL;
    char *tmp = NULL;
    int status = 2, rc;
    char *buf = NULL;
    size_t buf_len = 0;
    if (bt_trace_open(trace, &r) || bt_analyze_verify(trace) || bt_analyze(r, &x)) goto fail;
    /* The report is composed in memory and written at the end, so a read
     * error halfway never leaves half a report on stdout or in FILE. */
    if (!(o = open_memstream(&buf, &buf_len))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }

    const char *model = bt_trace_meta_get(r, "model_name");
    if (x.has_nonfinite)
        fprintf(o, "# bangtrace report: non-finite %s at step %d, layer %d%s%s\n\n", x.first.tensor, x.first.step,
                x.first.layer, model ? " of " : "", model ? model : "");
    else if (x.has_degenerate)
        fprintf(o, "# bangtrace report: %s at step %d%s%s\n\n", x.degen_kind, x.degen_step, model ? " of " : "", model ? model : "");
    else if (x.has_crash)
        fprintf(o, "# bangtrace report: crash%s%s\n\n", model ? " of " : "", model ? model : "");
    else fprintf(o, "# bangtrace report: clean run%s%s\n\n", model ? " of " : "", model ? model : "");
    section_summary(o, &x);
    section_environment(o, r, trace);
    section_model(o, r);
    section_config(o, r);
    section_propagation(o, &x);
    if ((rc = section_events(o, r, &x))) goto fail;
    if ((rc = section_logits(o, r, &x))) goto fail;
    bt_first bf = { .o = o };
    if ((rc = bt_trace_backtraces_each(r, backtrace_cb, &bf)) < 0) goto fail;
    section_reproduce(o, r, trace);
    bool mem_err = ferror(o) != 0;
    fclose(o);
    o = NULL;
    if (mem_err) { bt_error(BT_ENOMEM, "out of memory composing the report"); goto fail; }
    if (out_path) {
        /* temporary file + rename: FILE is either the whole report or untouched */
        size_t len = strlen(out_path) + 8;
        if (!(tmp = malloc(len))) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        snprintf(tmp, len, "%s.tmp", out_path);
        FILE *f = fopen(tmp, "w");
        if (!f) { bt_error(BT_EIO, "%s: %s", tmp, strerror(errno)); free(tmp); tmp = NULL; goto fail; }
        bool bad = fwrite(buf, 1, buf_len, f) != buf_len;
        if (fclose(f) != 0 || bad) { bt_error(BT_EIO, "%s: write failed: %s", tmp, strerror(errno)); goto fail; }
        if (rename(tmp, out_path) != 0) { bt_error(BT_EIO, "%s: %s", out_path, strerror(errno)); goto fail; }
    } else if (fwrite(buf, 1, buf_len, stdout) != buf_len || fflush(stdout) != 0) {
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
    bt_analysis_clear(&x);
    bt_trace_reader_close(r);
    return status;
}
