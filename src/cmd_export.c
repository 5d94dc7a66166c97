/* cmd_export.c - `bangtrace export TRACE -o OUT [--redact[=prompt|all]] [--window K]`:
 * a copy of a trace that can be attached to a public issue. Flags here; the
 * copy and the redaction are src/trace/export.c (bt_trace_export). */
#include "cmd.h"
#include "trace/export.h"
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

void cmd_export_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace export TRACE -o OUT [--redact[=prompt|all]] [--window K | --all-steps] [--force]\n\n"
        "Write a copy of a trace for sharing (an upstream issue, a colleague).\n\n"
        "  -o, --output OUT  the new trace file (refuses to replace an existing file\n"
        "                    unless --force)\n"
        "  --redact[=prompt] remove everything the prompt can be rebuilt from: the\n"
        "                    prompt tokens' ids and text, the top-k/argmax ids and full\n"
        "                    logit rows at prompt positions, the request JSON and\n"
        "                    prompt text in meta, text arguments in meta argv; absolute\n"
        "                    paths (meta, argv, events, backtraces) become base names;\n"
        "                    host and user names become [redacted]; quoted token text\n"
        "                    in event details an ellipsis. Generated tokens stay,\n"
        "                    except where they repeat the prompt (3+ tokens in a row).\n"
        "  --redact=all      also remove the generated tokens: every token id and text,\n"
        "                    the ids of every logit snapshot, every full logit row and\n"
        "                    the drafted/bonus ids of a speculative run.\n"
        "                    Both keep what a maintainer needs: counts, positions, tap\n"
        "                    statistics, logit statistics, events, backtraces, model\n"
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

static int parse_args(int argc, char **argv, bt_export_opts *o)
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
        } else if (!strcmp(a, "--redact") || !strcmp(a, "--redact=prompt")) o->redact = BT_EXPORT_REDACT_PROMPT;
        else if (!strcmp(a, "--redact=all")) o->redact = BT_EXPORT_REDACT_ALL;
        else if (!strncmp(a, "--redact=", 9))
            return bt_error(BT_EINVAL, "--redact: unknown level '%s' (prompt or all)", a + 9);
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

int cmd_export(int argc, char **argv)
{
    bt_export_opts o;
    if (parse_args(argc, argv, &o) || bt_trace_export(&o)) return bt_cmd_fail("export");
    return 0;
}
