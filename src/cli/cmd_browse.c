/* cmd_browse.c - `bangtrace browse TRACE [--dump VIEW [--step S]]`.
 *
 * The trace is opened and checked, and the first screen's data loaded,
 * before curses starts: a wrong file gets one line on a normal terminal and
 * exit status 2, never a garbled screen. */
#include "cmd.h"
#include "tui/tui.h"
#include "base/text.h"
#include "base/util.h"
#include "config.h"

#include <langinfo.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

void cmd_browse_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace browse TRACE [--view VIEW] [--dump VIEW [--step S] [--all]]\n\n"
        "Browse a trace written by `bangtrace run --trace` in the terminal:\n"
        "  1 Tokens     the generated text as tokens, coloured by health (red: the\n"
        "               logits were non-finite, yellow: inside a token wall or loop);\n"
        "               runs of one token collapse into one cell (`! x412`)\n"
        "  2 Step       the selected step's logit snapshot (top-k, NaN/Inf counts,\n"
        "               entropy, argmax under each rule) beside a layer x op grid\n"
        "               (red: non-finite, yellow: absmax far above that tensor's\n"
        "               median over the trace, green: clean)\n"
        "  3 Walk-back  `w` from any view: the first non-finite (step, layer, op)\n"
        "               and the propagation chain (n/p walk it)\n"
        "  4 Run        run metadata and the events list (Enter jumps to the step)\n"
        "  5 Backtrace  host stacks recorded at the first non-finite and at a crash\n"
        "  6 Speculation  speculative traces: per verify step the drafted tokens\n"
        "               against the target's (+ accepted, x rejected, - not reached,\n"
        "               s after the stop token), the bonus/correction token, and the\n"
        "               acceptance rate over time as a sparkline; n/p jump between\n"
        "               rejections, Enter opens the verify step's Step view\n"
        "  7 Kernels    per step, the ops in forward order with their host duration\n"
        "               (run --timing) and under each the device kernels, copies and\n"
        "               memsets joined to it with their durations (a CUDA run with\n"
        "               CUPTI); the first non-finite op is marked and the kernel\n"
        "               that wrote it highlighted; n/p or Left/Right change the step,\n"
        "               g jumps to the first bad step\n"
        "  8 Cache      a batched server's request (traced by serve): one row per\n"
        "               KV block it touched (W write, H prefix hit, r read, S state\n"
        "               slot) over its steps, the provenance culprit above; blocks\n"
        "               another request wrote (<), non-finite (!), a fault's (F)\n"
        "               marked, and with server.db beside the trace the requests\n"
        "               that wrote and read each over server steps; Enter opens the\n"
        "               step that first read the block\n\n"
        "Keys: Tab or 1-8 switch views, arrows/hjkl move (Left/Right scroll a long\n"
        "Run line and the Cache view's steps), PgUp/PgDn, g/G first/last,\n"
        "/ search token text, Enter drill in, Esc/Backspace back, w walk back to the\n"
        "first non-finite, H colour the grid by f16 headroom, ? help, q quit.\n"
        "Colours degrade to markers (! non-finite, ~ degenerate, . clean) when the\n"
        "terminal has none or NO_COLOR is set. Text from the trace (token pieces,\n"
        "tensor names, metadata, events) is sanitized: control characters and\n"
        "escape sequences are shown escaped (\\x1b), never sent.\n\n"
        "  --view VIEW    start in VIEW (tokens, step, walkback, run, backtrace, spec,\n"
        "                 kernels, cache)\n"
        "  --dump VIEW    print VIEW as plain text and exit (no terminal needed)\n"
        "  --step S       the step to dump (step view; tokens: the window around S;\n"
        "                 spec: verify step S in detail; kernels: default the first\n"
        "                 non-finite step, else the first step; cache: the culprit\n"
        "                 among what steps up to S read)\n"
        "  --all          with --dump tokens: every token, not one window; with\n"
        "                 --dump spec: every verify step, not the first 256\n\n"
        "Exit status: 0 ok, 2 error (not a trace, unreadable, not a terminal, or\n"
        "without --dump in a build configured without ncursesw).\n");
}

/* Time the first screens (open, token window, step with medians, walk-back)
 * on stderr: `browse TRACE --time-open` (for the big-trace measurement). */
static int time_open(const char *path)
{
    double t0 = bt_now();
    tui_trace *tr;
    if (tui_trace_open(path, &tr)) return bt_cmd_fail("browse");
    double t1 = bt_now();
    tui_app a;
    int rc = tui_app_init(&a, tr, TUI_SAN_UTF8, false);
    double t2 = bt_now();
    if (!rc) rc = tui_app_step(&a, a.step);
    double t3 = bt_now();
    if (!rc) rc = tui_app_walk(&a);
    double t4 = bt_now();
    if (!rc) rc = a.walk.found ? tui_app_step(&a, a.walk.links[0].step) : BT_OK;
    double t5 = bt_now();
    if (rc) { tui_app_free(&a); tui_trace_close(tr); return bt_cmd_fail("browse"); }
    int lo, hi;
    int64_t smin, smax;
    tui_trace_bounds(tr, &lo, &hi, &smin, &smax);
    printf("steps %d..%d tokens %lld..%lld\nopen+validate %.1f ms\ntoken window %.1f ms (first screen at %.1f ms)\n"
           "step view (incl. medians) %.1f ms\nwalk-back %.1f ms\nfirst-bad step %.1f ms\ntotal %.1f ms\n",
           lo, hi, (long long)smin, (long long)smax, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t0) * 1e3, (t3 - t2) * 1e3,
           (t4 - t3) * 1e3, (t5 - t4) * 1e3, (t5 - t0) * 1e3);
    tui_app_free(&a);
    tui_trace_close(tr);
    return 0;
}

int cmd_browse(int argc, char **argv)
{
    const char *path = NULL, *dump = NULL, *view = NULL;
    long step = -1;
    bool all = false, timing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dump") || !strcmp(a, "--view") || !strcmp(a, "--step")) {
            if (i + 1 >= argc) { bt_error(BT_EINVAL, "%s needs a value", a); return bt_cmd_fail("browse"); }
            const char *v = argv[++i];
            if (!strcmp(a, "--dump")) dump = v;
            else if (!strcmp(a, "--view")) view = v;
            else if (bt_parse_int("--step", v, 0, 2147483647L, &step)) return bt_cmd_fail("browse");
        } else if (!strcmp(a, "--all")) all = true;
        else if (!strcmp(a, "--time-open")) timing = true;
        else if (a[0] == '-' && a[1]) { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help browse)", a); return bt_cmd_fail("browse"); }
        else if (path) { bt_error(BT_EINVAL, "more than one trace given ('%s' and '%s')", path, a); return bt_cmd_fail("browse"); }
        else path = a;
    }
    if (!path) { bt_error(BT_EINVAL, "no trace given (usage: bangtrace browse TRACE)"); return bt_cmd_fail("browse"); }
    int dump_view = -1, start_view = 0;
    if (dump && (dump_view = tui_view_find(dump)) < 0) {
        bt_error(BT_EINVAL, "--dump: no view '%s' (%s)", dump, tui_view_names());
        return bt_cmd_fail("browse");
    }
    if (view && (start_view = tui_view_find(view)) < 0) {
        bt_error(BT_EINVAL, "--view: no view '%s' (%s)", view, tui_view_names());
        return bt_cmd_fail("browse");
    }
    if (timing) return time_open(path);

    setlocale(LC_ALL, "");
    const char *cs = nl_langinfo(CODESET);
    bool utf8 = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));

    tui_trace *tr;
    if (tui_trace_open(path, &tr)) return bt_cmd_fail("browse");
    tui_app a;
    /* A dump is plain text for files and issue comments: UTF-8 passes
     * through, controls are still escaped. */
    int rc = tui_app_init(&a, tr, dump || utf8 ? TUI_SAN_UTF8 : 0, true);
    if (rc) { tui_trace_close(tr); return bt_cmd_fail("browse"); }
    int status = 0;
    if (dump_view >= 0) {
        a.dump_all = all;
        a.color = false;
        /* Composed in memory, then escaped once more on the way out (text.h):
         * a dump quotes tensor names, kinds and notes from the trace too. */
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        if (!mem) status = bt_cmd_fail("browse");
        else {
            rc = tui_views[dump_view].dump(&a, mem, (int)step);
            fclose(mem);
            bt_text_fput(buf, len, BT_TEXT_UTF8 | BT_TEXT_KEEPNL | BT_TEXT_RAWBS, stdout);
            if (rc) status = bt_cmd_fail("browse");
        }
        free(buf);
        fflush(stdout);
    } else {
        if (step >= 0 && tui_app_step(&a, (int)step) == BT_OK && a.st.seq >= 0) tui_app_goto_seq(&a, a.st.seq);
        for (int v = 0; step >= 0 && v < tui_n_views; v++) {    /* each view opens there (Speculation: that verify step) */
            const tui_view_class *c = tui_views[v].cls;
            void *vs = c && c->start ? tui_app_view_state(&a, v) : NULL;
            if (vs || (c && c->start && !c->state_size)) c->start(&a, vs, (int)step);
        }
        a.view = start_view;
        if (tui_views[start_view].name[0] == 'w' && tui_app_walk_jump(&a)) { status = bt_cmd_fail("browse"); }
#ifdef HAVE_NCURSESW
        else status = tui_browse_run(&a);
#else
        else {      /* the trace is checked first: a wrong file is named as with curses */
            bt_error(BT_EUNSUPPORTED, "this bangtrace was built without ncursesw: only --dump VIEW is available");
            status = bt_cmd_fail("browse");
        }
#endif
    }
    tui_app_free(&a);
    tui_trace_close(tr);
    return status;
}
