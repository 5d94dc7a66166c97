/* main.c - `bangtrace COMMAND [ARGS]`: the subcommand table and the global
 * flags (the helpers commands share are in cmd_common.c). Exit status: 0 ok, 1 "found something" (the
 * command's help says when), 2 error. Never 0 after a fatal error. */
#include "cmd.h"
#include "cli_check.h"
#include "sys/crash.h"
#include "base/util.h"
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const bt_cmd commands[] = {
    { "run", "generate from a prompt or an OpenAI-style request, optionally traced", cmd_run, cmd_run_help },
    { "inspect", "show a model's architecture, tokenizer and tensors; scan weights for NaN/Inf", cmd_inspect, cmd_inspect_help },
    { "tokenize", "tokenize text (or --decode ids) with a model's tokenizer", cmd_tokenize, cmd_tokenize_help },
    { "bench", "measure prompt and decode tokens/s and weight bandwidth", cmd_bench, cmd_bench_help },
    { "forward", "run one forward pass and dump every named tensor (for oracles)", cmd_forward, cmd_forward_help },
    { "bisect", "first non-finite (step, layer, op) of a trace; --reference: first divergence", cmd_bisect, cmd_bisect_help },
    { "report", "write a markdown report of a trace for an upstream issue", cmd_report, cmd_report_help },
    { "export", "copy a trace for sharing: --redact removes prompt text, --window keeps the steps near the fault", cmd_export, cmd_export_help },
    { "browse", "browse a trace in the terminal: tokens, step grid, walk-back to the first NaN", cmd_browse, cmd_browse_help },
    { "diff", "compare two traces: first diverging token and tap, differing settings", cmd_diff, cmd_diff_help },
    { "serve", "an OpenAI-compatible server on the native engine, with per-request traces", cmd_serve, cmd_serve_help },
    { "probe", "send a request N times, classify the answers, failure rate with its 95% interval", cmd_probe, cmd_probe_help },
    { "canary", "a correctness canary: known-answer prompts every interval, an SQLite log, --on-fail", cmd_canary, cmd_canary_help },
    { "ctxwalk", "plant a needle in long filler, ask for it back: the shortest context that fails", cmd_ctxwalk, cmd_ctxwalk_help },
};

static void usage(FILE *out)
{
    fprintf(out, "usage: bangtrace [--version] [-q|-v] COMMAND [ARGS]\n\n"
                 "Forensic debugging for degenerate LLM output: replay a request under\n"
                 "instrumentation and find the step, layer and op that went wrong.\n\ncommands:\n");
    for (size_t i = 0; i < BT_ARRAY_SIZE(commands); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "  %-10s %s\n", "help", "show help for a command (bangtrace help COMMAND)");
    fprintf(out, "\nglobal flags:\n  -q, --quiet    only errors on stderr\n  -v, --verbose  debug output on stderr\n"
                 "  --version      print the version\n\nSee bangtrace(1) and `bangtrace help COMMAND`.\n");
}

static const bt_cmd *find(const char *name)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(commands); i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

static int dispatch(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--version")) { printf("bangtrace %s\n", PACKAGE_VERSION); return 0; }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) bt_log_level = 0;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) bt_log_level = 2;
        else { fprintf(stderr, "bangtrace: unknown flag '%s' (see bangtrace --help)\n", argv[i]); return 2; }
    }
    if (i >= argc) { usage(stderr); return 2; }
    const char *name = argv[i];
    if (!strcmp(name, "help")) {
        if (i + 1 >= argc) { usage(stdout); return 0; }
        if (!strcmp(argv[i + 1], "help")) {
            printf("usage: bangtrace help [COMMAND]\n\n"
                   "Without COMMAND, list the commands and the global flags; with one, print\n"
                   "that command's full usage (the same as `bangtrace COMMAND --help`).\n");
            return 0;
        }
        const bt_cmd *c = find(argv[i + 1]);
        if (!c) { fprintf(stderr, "bangtrace: no such command '%s' (see bangtrace help)\n", argv[i + 1]); return 2; }
        c->help(stdout);
        return 0;
    }
    const bt_cmd *c = find(name);
    if (c) bt_debug("bangtrace %s: %s", PACKAGE_VERSION, name);
    if (!c) { fprintf(stderr, "bangtrace: no such command '%s' (see bangtrace help)\n", name); return 2; }
    for (int j = i + 1; j < argc; j++)
        if (!strcmp(argv[j], "-h") || !strcmp(argv[j], "--help")) { c->help(stdout); return 0; }
        else if (!strcmp(argv[j], "--")) break;
    /* A file-size limit (ulimit -f) must end in a write error that names
     * the file, with the trace closed, not in a silent SIGXFSZ core dump. */
    signal(SIGXFSZ, SIG_IGN);
    /* `run --trace --force` must not name a trace "--force" */
    if (bt_cli_check_values(name, c->help, argc - i, argv + i)) return 2;
    int status = c->run(argc - i, argv + i);
    /* A command that stopped for SIGINT/SIGTERM returns 128+sig after
     * closing its files; dying by the signal tells a calling shell the truth
     * (it stops a loop on Ctrl-C). */
    int sig = bt_interrupt_pending();
    if (sig && status == 128 + sig) {
        fflush(stdout);
        fflush(stderr);
        bt_signal_die(sig);
    }
    return status;
}

int main(int argc, char **argv)
{
    /* Every command's stdout (help and --version included) must have been
     * written: a full disk behind it is exit 2, never a silent 0. */
    bt_cli_stdout_begin();
    return bt_cli_check_stdout(dispatch(argc, argv));
}
