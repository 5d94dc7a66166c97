/* fuzz_trace.c - the trace reader and every command that reads a trace.
 *
 * Input: one selector byte, then a trace file. The file is written where a
 * user's would be (a private folder on tmpfs, /dev/shm when there is one,
 * else $TMPDIR) and the command the selector picks opens it by its path,
 * through the same reader, schema guard and integrity check as for any
 * file: bisect (text, --json), report, diff against itself, browse --dump
 * of each view (tokens also with --all), export (--all-steps or --redact)
 * followed by bisect of the export. The command functions are called
 * directly (cmd.h, linked from libbtcmd). One command per input: opening a
 * trace (SQLite's schema parse, the guard, preparing every query) is most
 * of an input's cost, and running all fourteen on each input made this
 * harness ~25 inputs/s. Any exit status is fine (0, 1, 2); a crash,
 * sanitizer report, leak or exit() is not. Run with -close_fd_mask=3: the
 * commands print a lot. To feed an artifact to bangtrace, drop its first
 * byte: `tail -c +2 ARTIFACT > t.db` (the first byte mod 13 is the row of
 * CMDS below). */
#include "fuzz.h"
#include "cli/cmd.h"
#include "base/util.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[512], in[600], out[600];

static void rm_db(const char *p);
static void cleanup(void) { rm_db(in); rm_db(out); rmdir(dir); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *t = getenv("TMPDIR");
    struct stat st;
    /* tmpfs: export's fsyncs cost nothing there, and nothing touches a disk */
    const char *base = !stat("/dev/shm", &st) && S_ISDIR(st.st_mode) && !access("/dev/shm", W_OK) ? "/dev/shm"
                       : t && *t ? t : "/tmp";
    snprintf(dir, sizeof dir, "%s/fuzz_trace.XXXXXX", base);
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    snprintf(in, sizeof in, "%s/in.db", dir);
    snprintf(out, sizeof out, "%s/out.db", dir);
    atexit(cleanup);
    return 0;
}

static void rm_db(const char *p)
{
    char side[700];
    unlink(p);
    snprintf(side, sizeof side, "%s-wal", p); unlink(side);
    snprintf(side, sizeof side, "%s-shm", p); unlink(side);
    snprintf(side, sizeof side, "%s-journal", p); unlink(side);
}

/* argv as a command sees it (argv[0] its name); "@in" / "@out" are the files */
typedef struct { int (*run)(int, char **); const char *argv[8]; bool then_bisect_out; } fuzz_cmd;
static const fuzz_cmd CMDS[] = {
    { cmd_bisect, { "bisect", "@in", "--json" }, false },
    { cmd_bisect, { "bisect", "@in" }, false },
    { cmd_report, { "report", "@in" }, false },
    { cmd_diff, { "diff", "@in", "@in", "--json" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "tokens" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "step" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "walkback" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "run" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "backtrace" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "spec" }, false },
    { cmd_browse, { "browse", "@in", "--dump", "tokens", "--all" }, false },
    { cmd_export, { "export", "@in", "-o", "@out", "--all-steps", "--force" }, true },
    { cmd_export, { "export", "@in", "-o", "@out", "--redact", "--force" }, true },
};

static int call(int (*run)(int, char **), const char *const *spec)
{
    char *argv[9];
    int argc = 0;
    for (; argc < 8 && spec[argc]; argc++)
        argv[argc] = (char *)(!strcmp(spec[argc], "@in") ? in : !strcmp(spec[argc], "@out") ? out : spec[argc]);
    argv[argc] = NULL;
    bt_log_level = 0;
    int rc = run(argc, argv);
    FUZZ_CHECK(rc >= 0 && rc <= 2);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const fuzz_cmd *c = &CMDS[data[0] % (sizeof CMDS / sizeof *CMDS)];
    rm_db(in);
    rm_db(out);
    FILE *f = fopen(in, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f)) { perror(in); abort(); }
    int rc = call(c->run, c->argv);
    if (c->then_bisect_out && rc == 0) {
        static const char *const b[] = { "bisect", "@out", "--json", NULL };
        call(cmd_bisect, b);
    }
    return 0;
}
