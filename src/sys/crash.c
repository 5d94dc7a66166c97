/* crash.c - fatal-signal handling.
 *
 * Invariants: the handler runs its body at most once per process. A second
 * fatal signal on the thread already handling one (the hook itself faulted)
 * goes straight to the default action; a fatal signal on another thread
 * while the first is being handled waits for the first to finish (which
 * kills the process). The process always dies by the original signal, so
 * its exit status is never 0. Only async-signal-safe calls are made from
 * the handler, apart from the hook, which is the caller's responsibility.
 *
 * The alternate stack is installed on the calling thread only (sigaltstack
 * is per thread): it is what lets a stack overflow on the main thread still
 * be reported.
 *
 * Interrupts (SIGINT, SIGTERM, SIGHUP, SIGPIPE) are not crashes: the
 * process is healthy, so nothing is done in the handler but setting a flag
 * that the command polls between steps; it then records the interrupt,
 * closes the trace properly and main() dies by the same signal. A second
 * SIGINT/SIGTERM/SIGHUP means "now": the default action, at once. A
 * signal the parent ignored (nohup, a background job's SIGINT) stays
 * ignored. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sys/backtrace.h"
#include "sys/crash.h"
#include "base/util.h"

static const int fatal_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
#define N_SIGS ((int)(sizeof(fatal_sigs) / sizeof(fatal_sigs[0])))

static struct sigaction old_act[N_SIGS];
static bool installed;
static bool own_altstack;
static stack_t old_altstack;
/* 64 KiB: libunwind and the hook need real room, SIGSTKSZ is not enough. */
static char alt_stack[64 * 1024] __attribute__((aligned(16)));
static char frames[16 * 1024];
static char note[512];

static bt_crash_hook crash_hook;
static void *crash_user;
static volatile long handling_tid;   /* 0: no signal being handled */

const char *bt_signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGKILL: return "SIGKILL";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGTRAP: return "SIGTRAP";
    default: return "signal";
    }
}

static void write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0) { if (errno == EINTR) continue; return; }
        s += w; n -= (size_t)w;
    }
}

static void write_str(int fd, const char *s) { write_all(fd, s, strlen(s)); }

/* Die by `sig` with its default action: restore SIG_DFL, unblock it (it is
 * blocked while its handler runs) and raise it. Returning from a hardware
 * fault would re-execute the faulting instruction; raising is explicit and
 * also covers raise()d and kill()ed signals. */
static __attribute__((noreturn)) void die_by(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    /* SIGABRT/SIGSEGV with SIG_DFL cannot return here, but be sure the
     * status is non-zero if something odd (ignored by a parent?) happens. */
    _exit(128 + sig);
}

static void handler(int sig, siginfo_t *si, void *uctx)
{
    (void)si;
    long me = (long)syscall(SYS_gettid);
    long expect = 0;
    if (!__atomic_compare_exchange_n(&handling_tid, &expect, me, false,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        if (expect == me) die_by(sig);               /* fault inside the handler/hook */
        /* Another thread is handling a crash and will kill the process;
         * give it up to ~10 s, then die on our own. */
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        for (int i = 0; i < 1000; i++) nanosleep(&ts, NULL);
        die_by(sig);
    }
    int saved_errno = errno;
    bt_backtrace_signal(frames, sizeof(frames), uctx);
    if (crash_hook) crash_hook(sig, frames, crash_user);
    write_str(2, "bangtrace: fatal signal ");
    write_str(2, bt_signal_name(sig));
    if (note[0]) { write_str(2, "; "); write_str(2, note); }
    write_str(2, "\n");
    errno = saved_errno;
    die_by(sig);
}

static const int interrupt_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
#define N_INT ((int)(sizeof(interrupt_sigs) / sizeof(interrupt_sigs[0])))
static struct sigaction old_int[N_INT];
static bool int_hooked[N_INT];
static volatile sig_atomic_t interrupt_sig;

static void on_interrupt(int sig)
{
    /* Every write to a closed pipe raises SIGPIPE again: only the first
     * counts, and the writes fail with EPIPE instead. */
    if (sig == SIGPIPE) { if (!interrupt_sig) interrupt_sig = sig; return; }
    if (interrupt_sig && interrupt_sig != SIGPIPE) die_by(sig);
    interrupt_sig = sig;
}

int bt_interrupt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_INT; i++) {
        if (int_hooked[i]) continue;
        struct sigaction cur;
        if (sigaction(interrupt_sigs[i], NULL, &cur) != 0) continue;
        if (cur.sa_handler == SIG_IGN) continue;
        if (sigaction(interrupt_sigs[i], &sa, &old_int[i]) != 0)
            return bt_error(BT_EIO, "sigaction(%s) failed: %s", bt_signal_name(interrupt_sigs[i]), strerror(errno));
        int_hooked[i] = true;
    }
    return BT_OK;
}

void bt_interrupt_uninstall(void)
{
    for (int i = 0; i < N_INT; i++)
        if (int_hooked[i]) { sigaction(interrupt_sigs[i], &old_int[i], NULL); int_hooked[i] = false; }
}

int bt_interrupt_pending(void) { return interrupt_sig; }

void bt_signal_die(int sig) { die_by(sig); }

void bt_crash_set_note(const char *text)
{
    size_t n = text ? strlen(text) : 0;
    if (n >= sizeof(note)) n = sizeof(note) - 1;
    memcpy(note, text ? text : "", n);
    note[n] = 0;
}

int bt_crash_install(bt_crash_hook hook, void *user)
{
    if (installed) bt_crash_uninstall();
    crash_hook = hook;
    crash_user = user;
    __atomic_store_n(&handling_tid, 0, __ATOMIC_SEQ_CST);

    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof(alt_stack);
    ss.ss_flags = 0;
    own_altstack = sigaltstack(&ss, &old_altstack) == 0;
    if (!own_altstack) bt_warn("sigaltstack failed: %s (crash reports on stack overflow may be lost)", strerror(errno));

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    /* While one fatal signal is handled, the others wait: the hook is not
     * interrupted by, say, an abort() from another thread. A fault of the
     * same kind inside the hook is forced to the default action by the
     * kernel (a synchronous fault cannot be blocked). */
    for (int i = 0; i < N_SIGS; i++) sigaddset(&sa.sa_mask, fatal_sigs[i]);
    for (int i = 0; i < N_SIGS; i++) {
        if (sigaction(fatal_sigs[i], &sa, &old_act[i]) != 0) {
            int err = errno;
            for (int j = 0; j < i; j++) sigaction(fatal_sigs[j], &old_act[j], NULL);
            if (own_altstack) { sigaltstack(&old_altstack, NULL); own_altstack = false; }
            return bt_error(BT_EIO, "sigaction(%s) failed: %s", bt_signal_name(fatal_sigs[i]), strerror(err));
        }
    }
    installed = true;
    return BT_OK;
}

void bt_crash_uninstall(void)
{
    if (!installed) return;
    for (int i = 0; i < N_SIGS; i++) sigaction(fatal_sigs[i], &old_act[i], NULL);
    if (own_altstack) {
        /* Only swap the old stack back if we are not running on ours. */
        stack_t cur;
        if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_ONSTACK))
            sigaltstack(&old_altstack, NULL);
        own_altstack = false;
    }
    crash_hook = NULL;
    crash_user = NULL;
    installed = false;
}
