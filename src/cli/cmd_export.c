/* cmd_export.c - `bangtrace export TRACE -o OUT [--redact[=prompt|all]] [--window K]`:
 * a copy of a trace that can be attached to a public issue. Flags here; the
 * copy and the redaction are src/trace/export.c (bt_trace_export). */
#include "cmd.h"
#include "trace/export.h"
#include "trace/perfetto.h"
#include "trace/picture.h"
#include "trace/reader.h"
#include "sys/outfile.h"
#include "base/util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

void cmd_export_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace export TRACE -o OUT [--redact[=prompt|all]] [--window K | --all-steps] [--png[=PNG]] [--force]\n"
        "       bangtrace export TRACE --perfetto OUT.json [--force]\n\n"
        "Write a copy of a trace for sharing (an upstream issue, a colleague).\n\n"
        "  --perfetto OUT.json  instead, write the run's timeline as Chrome trace-event\n"
        "                    JSON (open it in ui.perfetto.dev or chrome://tracing): steps,\n"
        "                    op timings (run --timing) and detector events on host tracks,\n"
        "                    CUDA kernels and copies on device tracks when the trace has\n"
        "                    them. OUT.json - writes it to standard output. Refuses an\n"
        "                    existing OUT.json unless --force (never a link, a device\n"
        "                    or the trace itself)\n"
        "  -o, --output OUT  the new trace file (refuses to replace an existing file\n"
        "                    unless --force)\n"
        "  --redact[=prompt] remove everything the prompt can be rebuilt from: the ids\n"
        "                    and text of the prompt tokens and of generated tokens that\n"
        "                    repeat the prompt (3+ in a row); every chosen, argmax or\n"
        "                    top-k id of a logit snapshot naming one of them; full\n"
        "                    logit rows with a finite value; the statistics of the taps\n"
        "                    that see a redacted input token alone (token_embd, layer 0\n"
        "                    before attention: they match one embedding row); the\n"
        "                    request JSON and prompt text in meta, text arguments in\n"
        "                    meta argv; absolute paths (meta, argv, events, backtraces)\n"
        "                    become base names; host and user names become [redacted];\n"
        "                    quoted token text and redacted ids in event details an\n"
        "                    ellipsis. Other generated tokens stay.\n"
        "  --redact=all      redact every token: every id and text, the ids of every\n"
        "                    logit snapshot and event, every full logit row, the input-\n"
        "                    token statistics of every step and the drafted/bonus ids\n"
        "                    of a speculative run.\n"
        "                    Both keep what a maintainer needs: counts, positions,\n"
        "                    non-finite counts, the statistics of later taps, logit\n"
        "                    statistics, events, backtraces, model\n"
        "                    name and SHA-256, settings. bisect and report still work\n"
        "                    (bisect --reference needs the ids: it refuses a redacted\n"
        "                    trace).\n"
        "  --window K        keep only the steps within K of the first bad step (the\n"
        "                    first non-finite tap, non-finite logits or event); default\n"
        "                    16. A clean trace keeps every step. The token trail, events\n"
        "                    and backtraces are always kept whole; a speculative trace's\n"
        "                    spec_steps and spec_trail follow the window of their verify\n"
        "                    step.\n"
        "  --all-steps       keep every step\n"
        "  --png[=PNG]       also write the picture of the copy (as report --png draws\n"
        "                    it: layers x steps by f16 headroom, the first non-finite\n"
        "                    cell and the walk-back path outlined, token text only\n"
        "                    where the copy keeps it) to PNG, default OUT with .png for\n"
        "                    .db (OUT.png otherwise). Refuses an existing file unless\n"
        "                    --force; needs a build with libpng (else exit 2)\n"
        "  --force           replace OUT if it is an idle bangtrace trace (nothing else)\n\n"
        "The copy is rebuilt row by row from the known tables into a schema of this\n"
        "version (no SQL from TRACE is ever run; unknown tables are left out) and\n"
        "vacuumed: no byte of removed data remains in OUT, and OUT is a single file\n"
        "(no -wal/-shm). The source is opened read-only and never modified; a trace\n"
        "still being written, or whose run was killed, exports with every committed\n"
        "step.\n\n"
        "Exit status: 0 written, 2 error (missing file, not a trace, damaged or hostile\n"
        "trace, OUT exists, ...).\n");
}

static int parse_args(int argc, char **argv, bt_export_opts *o, const char **perfetto, bool *png, const char **png_arg)
{
    *perfetto = NULL;
    *png = false;
    *png_arg = NULL;
    memset(o, 0, sizeof(*o));
    o->window = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) return bt_error(BT_EINVAL, "%s needs a value", a);
            o->out = v;
            i++;
        } else if (!strcmp(a, "--perfetto")) {
            if (!v) return bt_error(BT_EINVAL, "%s needs a value", a);
            *perfetto = v;
            i++;
        } else if (!strcmp(a, "--window")) {
            if (!v) return bt_error(BT_EINVAL, "%s needs a value", a);
            int rc = bt_parse_int("--window", v, 0, INT_MAX / 4, &o->window);
            if (rc) return rc;
            i++;
        } else if (!strcmp(a, "--redact") || !strcmp(a, "--redact=prompt")) o->redact = BT_EXPORT_REDACT_PROMPT;
        else if (!strcmp(a, "--redact=all")) o->redact = BT_EXPORT_REDACT_ALL;
        else if (!strncmp(a, "--redact=", 9))
            return bt_error(BT_EINVAL, "--redact: unknown level '%s' (prompt or all)", a + 9);
        else if (!strcmp(a, "--force")) o->force = true;
        else if (!strcmp(a, "--all-steps")) o->all_steps = true;
        else if (!strcmp(a, "--png")) *png = true;
        else if (!strncmp(a, "--png=", 6)) {
            if (!a[6]) return bt_error(BT_EINVAL, "--png=PNG needs a file name");
            *png = true;
            *png_arg = a + 6;
        }
        else if (a[0] == '-' && a[1]) return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help export)", a);
        else if (!o->in) o->in = a;
        else return bt_error(BT_EINVAL, "unexpected argument '%s' (one TRACE only; see bangtrace help export)", a);
    }
    if (!o->in) return bt_error(BT_EINVAL, "no TRACE given (see bangtrace help export)");
    if (*perfetto && (o->out || o->redact || o->all_steps))
        return bt_error(BT_EINVAL, "--perfetto writes a timeline, not a trace: it takes no -o, --redact, --window or --all-steps");
    if (!o->out && !*perfetto) return bt_error(BT_EINVAL, "-o OUT is required (see bangtrace help export)");
    if (*perfetto && *png) return bt_error(BT_EINVAL, "--png draws the exported trace: it goes with -o OUT, not --perfetto");
    if (*png && !bt_picture_available())
        return bt_error(BT_EUNSUPPORTED, "--png: this bangtrace was built without libpng (install libpng-dev and reconfigure)");
    return BT_OK;
}

/* export --perfetto: the timeline as JSON, written to a fresh temporary
 * file beside OUT and renamed over it (OUT is absent or complete). A text
 * output like report -o: an existing OUT only with --force, never a link,
 * a device or the trace. */
static int export_perfetto(const char *in_path, const char *out, bool force)
{
    const bt_out_input in[] = { { "TRACE", in_path } };
    bt_trace_reader *r = NULL;
    char tmp[PATH_MAX + 16] = "";
    FILE *f = NULL;
    int rc;
    if (!strcmp(out, "-")) {          /* standard output: main checks its write errors */
        if ((rc = bt_trace_open(in_path, &r))) goto done;
        rc = bt_perfetto_write(r, stdout);
        goto done;
    }
    if ((rc = bt_outfile_check(out, BT_OUT_TEXT, force, in, 1, NULL))) goto done;
    if (strlen(out) > PATH_MAX) { rc = bt_error(BT_EINVAL, "%s: path too long", out); goto done; }
    if ((rc = bt_trace_open(in_path, &r))) goto done;
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", out);
    int fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        rc = bt_error(BT_EIO, "%s: cannot create a temporary file beside it: %s", out, strerror(errno));
        if (fd >= 0) close(fd); else tmp[0] = 0;
        goto done;
    }
    if ((rc = bt_perfetto_write(r, f))) goto done;
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) { f = NULL; rc = bt_error(BT_EIO, "%s: write failed: %s", tmp, strerror(errno)); goto done; }
    f = NULL;
    if ((rc = bt_outfile_check(out, BT_OUT_TEXT, force, in, 1, NULL))) goto done;
    if (rename(tmp, out) != 0) { rc = bt_error(BT_EIO, "%s: %s", out, strerror(errno)); goto done; }
    tmp[0] = 0;
    bt_log("bangtrace: export: wrote the timeline of %s to %s", in_path, out);
done:
    if (f) fclose(f);
    if (tmp[0]) unlink(tmp);
    bt_trace_reader_close(r);
    return rc;
}

/* export --png: the picture of the copy just written (so it shows only
 * what the copy keeps: a redacted copy's blanked token text is not drawn). */
static int export_png(const char *in_path, const char *out, const char *png, bool force)
{
    const bt_out_input in[] = { { "TRACE", in_path }, { "-o", out } };
    bt_trace_reader *r = NULL;
    bt_picture pic;
    memset(&pic, 0, sizeof pic);
    int rc;
    if (!(rc = bt_trace_open(out, &r)) && !(rc = bt_picture_render(r, &pic)))
        rc = bt_picture_save(&pic, png, force, in, 2);
    bt_picture_free(&pic);
    bt_trace_reader_close(r);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", bt_errmsg());
        return bt_error(rc, "%s (the trace %s was written; the picture was not)", msg, out);
    }
    bt_log("bangtrace: export: wrote the picture of %s to %s", out, png);
    return BT_OK;
}

int cmd_export(int argc, char **argv)
{
    bt_export_opts o;
    const char *perfetto, *png_arg;
    bool png;
    if (parse_args(argc, argv, &o, &perfetto, &png, &png_arg)) return bt_cmd_fail("export");
    char *png_path = png ? (png_arg ? strdup(png_arg) : bt_picture_path_beside(o.out)) : NULL;
    if (png && !png_path) { bt_error(BT_ENOMEM, "out of memory"); return bt_cmd_fail("export"); }
    if (png_path) {
        /* refused before the copy is made: never half the outputs */
        const bt_out_input in[] = { { "TRACE", o.in }, { "-o", o.out } };
        if (!strcmp(png_path, o.out)) {
            bt_error(BT_EINVAL, "--png=%s: the picture and the copy (-o) must be different files", png_path);
            free(png_path);
            return bt_cmd_fail("export");
        }
        if (bt_outfile_check(png_path, BT_OUT_TEXT, o.force, in, 2, NULL)) { free(png_path); return bt_cmd_fail("export"); }
    }
    if (perfetto ? export_perfetto(o.in, perfetto, o.force) : bt_trace_export(&o)) { free(png_path); return bt_cmd_fail("export"); }
    int rc = png_path ? export_png(o.in, o.out, png_path, o.force) : BT_OK;
    free(png_path);
    return rc ? bt_cmd_fail("export") : 0;
}
