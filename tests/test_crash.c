/* test_crash.c - host backtraces and the fatal-signal handler.
 *
 * Each crash runs in a forked child that installs the handler with a hook
 * writing the frames it was given to a marker file, then faults on purpose.
 * The parent checks that the child died by that very signal (a crash must
 * never exit 0), that the hook ran once and its backtrace names the
 * faulting function, and that stderr got the one-line report. A hook that
 * itself faults must not hang or loop: the child still dies. */
#include "sys/backtrace.h"
#include "sys/crash.h"
#include "base/util.h"
#include "check.h"
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* noclone: a .constprop clone would carry a different symbol name. */
#if defined(__clang__)
#define KEEP_FRAME __attribute__((noinline))
#else
#define KEEP_FRAME __attribute__((noinline, noclone))
#endif


static char dir[256];

/* Frame checks need libunwind; a build without it (configure
 * --without-libunwind) still records the crash and runs the hook, and its
 * "backtrace" is one line saying why there is none. */
#ifdef HAVE_LIBUNWIND
#define CHECK_FRAMES(c) CHECK(c)
#else
#define CHECK_FRAMES(c) ((void)sizeof((c) ? 1 : 0))
#endif

/* Hook: append "sig=N\n" and the frames to the marker file. Uses only
 * open/write, as a real hook should. */
static void marker_hook(int sig, const char *frames, void *user)
{
    const char *path = user;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    char head[32];
    int n = snprintf(head, sizeof head, "sig=%d\n", sig);
    if (write(fd, head, (size_t)n) < 0) { close(fd); return; }
    if (write(fd, frames, strlen(frames)) < 0) { close(fd); return; }
    close(fd);
}

static void faulting_hook(int sig, const char *frames, void *user)
{
    marker_hook(sig, frames, user);
    volatile int *volatile p = NULL;   /* volatile pointer: the compiler cannot prove it NULL and drop the store */
    *p = 1;                       /* a second fault inside the handler */
}

/* Kept out of line and distinctively named so the backtrace must show it. */
KEEP_FRAME static void crash_test_deref_null(void)
{
    volatile int *volatile p = NULL;   /* volatile pointer: the compiler cannot prove it NULL and drop the store */
    *p = 42;
}

KEEP_FRAME static void crash_test_caller(void)
{
    crash_test_deref_null();
    __asm__ volatile("" ::: "memory");   /* no tail call: keep this frame */
}

KEEP_FRAME static void crash_test_abort(void)
{
    abort();
}

KEEP_FRAME static int backtrace_probe_fn(char *buf, size_t cap)
{
    int n = bt_backtrace(buf, cap, 0);
    __asm__ volatile("" ::: "memory");
    return n;
}

static char *slurp(const char *path)
{
    char *buf = NULL;
    size_t len;
    if (bt_read_file(path, &buf, &len) != BT_OK) return NULL;
    return buf;
}

enum { DO_SEGV, DO_ABORT, DO_FPE_RAISE, DO_HOOK_FAULT, DO_SEGV_THEN_UNINSTALL };

/* Fork a child that does `what`; return its wait status. Its stderr goes to
 * err_path. */
static int run_child(int what, const char *marker, const char *err_path)
{
    unlink(marker);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 2); close(fd); }
        bt_crash_hook hook = what == DO_HOOK_FAULT ? faulting_hook : marker_hook;
        if (bt_crash_install(hook, (void *)marker) != BT_OK) _exit(3);
        bt_crash_set_note("trace closed: test.db");
        switch (what) {
        case DO_SEGV: case DO_HOOK_FAULT: crash_test_caller(); break;
        case DO_ABORT: crash_test_abort(); break;
        case DO_FPE_RAISE: raise(SIGFPE); break;
        case DO_SEGV_THEN_UNINSTALL:
            bt_crash_uninstall();
            crash_test_deref_null();
            break;
        }
        _exit(0);                 /* reaching here is a failure: status 0 */
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {}
    return st;
}

static void test_segv(void)
{
    char marker[300], err[300];
    snprintf(marker, sizeof marker, "%s/segv.marker", dir);
    snprintf(err, sizeof err, "%s/segv.err", dir);
    int st = run_child(DO_SEGV, marker, err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    char *m = slurp(marker);
    CHECK(m != NULL);
    if (m) {
        CHECK(strncmp(m, "sig=11\n", 7) == 0);
        /* Frame #0 is the faulting function itself, then its caller. */
        CHECK_FRAMES(strstr(m, "#0 0x") == m + 7);
        const char *f0 = strstr(m, "crash_test_deref_null+0x");
        const char *f1 = strstr(m, "crash_test_caller+0x");
        CHECK_FRAMES(f0 && f1 && f0 < f1);
        CHECK_FRAMES(f0 && strncmp(m + 7, "#0 ", 3) == 0 && f0 < strchr(m + 7, '\n'));
        CHECK_FRAMES(strstr(m, "main+0x") != NULL);
        CHECK_FRAMES(strstr(m, "(test_crash") != NULL);      /* module name via dladdr */
        CHECK(strstr(m, "handler") == NULL);          /* handler frames are not listed */
        if (failures) fprintf(stderr, "marker:\n%s", m);
        free(m);
    }
    char *e = slurp(err);
    CHECK(e && strstr(e, "bangtrace: fatal signal SIGSEGV; trace closed: test.db\n"));
    free(e);
}

static void test_abort(void)
{
    char marker[300], err[300];
    snprintf(marker, sizeof marker, "%s/abrt.marker", dir);
    snprintf(err, sizeof err, "%s/abrt.err", dir);
    int st = run_child(DO_ABORT, marker, err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    char *m = slurp(marker);
    CHECK(m && strncmp(m, "sig=6\n", 6) == 0);
    CHECK_FRAMES(m && strstr(m, "crash_test_abort+0x"));
    /* the hook ran exactly once even though abort() may raise again */
    CHECK(m && !strstr(m + 1, "sig=6"));
    free(m);
    char *e = slurp(err);
    CHECK(e && strstr(e, "bangtrace: fatal signal SIGABRT"));
    free(e);
}

static void test_fpe(void)
{
    char marker[300], err[300];
    snprintf(marker, sizeof marker, "%s/fpe.marker", dir);
    snprintf(err, sizeof err, "%s/fpe.err", dir);
    int st = run_child(DO_FPE_RAISE, marker, err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGFPE);
    char *m = slurp(marker);
    CHECK(m && strncmp(m, "sig=8\n", 6) == 0);
    free(m);
}

static void test_hook_fault(void)
{
    char marker[300], err[300];
    snprintf(marker, sizeof marker, "%s/hook.marker", dir);
    snprintf(err, sizeof err, "%s/hook.err", dir);
    alarm(20);                    /* a hang here would be the bug */
    int st = run_child(DO_HOOK_FAULT, marker, err);
    alarm(0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    char *m = slurp(marker);
    CHECK(m && strncmp(m, "sig=11\n", 7) == 0);
    CHECK(m && !strstr(m + 1, "sig=11"));           /* the hook ran once */
    free(m);
}

static void test_uninstall(void)
{
    char marker[300], err[300];
    snprintf(marker, sizeof marker, "%s/un.marker", dir);
    snprintf(err, sizeof err, "%s/un.err", dir);
    int st = run_child(DO_SEGV_THEN_UNINSTALL, marker, err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    CHECK(access(marker, F_OK) != 0);               /* no hook after uninstall */
}

static void test_backtrace_direct(void)
{
#ifndef HAVE_LIBUNWIND
    {
        char none[128], tiny[1] = { 'x' };
        CHECK(bt_backtrace(none, sizeof none, 0) == 0 && strstr(none, "without libunwind"));
        CHECK(bt_backtrace_signal(none, sizeof none, NULL) == 0 && strstr(none, "without libunwind"));
        CHECK(bt_backtrace(tiny, 1, 0) == 0 && tiny[0] == 0);
        CHECK(bt_backtrace_provider() == NULL);
        return;
    }
#endif
    CHECK(bt_backtrace_provider() && !strcmp(bt_backtrace_provider(), "libunwind"));
    char buf[8192];
    int n = backtrace_probe_fn(buf, sizeof buf);
    CHECK(n >= 3);
    CHECK(strncmp(buf, "#0 0x", 5) == 0);
    CHECK(strstr(buf, "backtrace_probe_fn+0x") != NULL && strstr(buf, "backtrace_probe_fn") < strchr(buf, '\n'));
    CHECK(strstr(buf, "bt_backtrace+") == NULL);     /* never lists itself */
    CHECK(strstr(buf, "test_backtrace_direct+0x") != NULL);
    /* skip drops innermost frames */
    char buf2[8192];
    int n2 = bt_backtrace(buf2, sizeof buf2, 1);
    CHECK(n2 >= 1 && strstr(buf2, "test_backtrace_direct") == NULL);
    /* tiny buffers: NUL-terminated, whole lines only */
    char small[60];
    memset(small, 'x', sizeof small);
    int ns = bt_backtrace(small, sizeof small, 0);
    CHECK(memchr(small, 0, sizeof small) != NULL);
    CHECK(ns == 0 || small[strlen(small) - 1] == '\n');
    char one[1] = { 'x' };
    CHECK(bt_backtrace(one, 1, 0) == 0 && one[0] == 0);
    if (failures) fprintf(stderr, "backtrace:\n%s", buf);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bt_crash_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    CHECK(strcmp(bt_signal_name(SIGSEGV), "SIGSEGV") == 0);
    CHECK(strcmp(bt_signal_name(SIGBUS), "SIGBUS") == 0);
    test_backtrace_direct();
    test_segv();
    test_abort();
    test_fpe();
    test_hook_fault();
    test_uninstall();
    if (!failures) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
        printf("test_crash: all passed\n");
    } else {
        fprintf(stderr, "test_crash: %d failure(s); files kept in %s\n", failures, dir);
    }
    return failures ? 1 : 0;
}
