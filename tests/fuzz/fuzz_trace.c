/* fuzz_trace.c - the trace reader and every command that reads a trace.
 *
 * The input is written to a file and opened the way a user would, through
 * the real command dispatcher (src/main.c, included below with its main()
 * renamed): bisect (text and --json), report, export (then bisect on the
 * export), diff against itself and browse --dump of every view. Any exit
 * status is fine (0, 1, 2); a crash, sanitizer report, leak or exit() is
 * not. Run with -close_fd_mask=3: the commands print a lot. */
#include "fuzz.h"

#define main bt_fuzz_cli_main
#include "../../src/main.c"
#undef main

#include <unistd.h>

static char dir[512], in[600], out[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_trace.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    snprintf(in, sizeof in, "%s/in.db", dir);
    snprintf(out, sizeof out, "%s/out.db", dir);
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

static int cli(int argc, const char *const *argv)
{
    bt_log_level = 0;
    return bt_fuzz_cli_main(argc, (char **)argv);
}
#define CLI(...) do { const char *const a_[] = { "bangtrace", __VA_ARGS__ }; \
    int rc_ = cli((int)(sizeof a_ / sizeof *a_), a_); FUZZ_CHECK(rc_ >= 0 && rc_ <= 2); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rm_db(in);
    rm_db(out);
    FILE *f = fopen(in, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) { perror(in); abort(); }

    CLI("bisect", in, "--json");
    CLI("bisect", in);
    CLI("report", in);
    CLI("diff", in, in, "--json");
    static const char *const views[] = { "tokens", "step", "walkback", "run", "backtrace", "spec" };
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) CLI("browse", in, "--dump", views[i]);
    CLI("browse", in, "--dump", "tokens", "--all");
    CLI("export", in, "-o", out, "--all-steps", "--force");
    CLI("export", in, "-o", out, "--redact", "--force");
    CLI("bisect", out, "--json");
    return 0;
}
