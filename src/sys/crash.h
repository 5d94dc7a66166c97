/* crash.h - fatal-signal handling: a death must leave a readable trace and
 * a non-zero exit status (a crash that exits 0 fools supervisors).
 *
 * bt_crash_install() sets handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and
 * SIGABRT on an alternate stack. On a signal the handler captures a
 * backtrace, calls the hook once (which records a `crash` event and closes
 * the trace), prints one line to stderr ("bangtrace: fatal signal SIGSEGV;
 * trace closed: run.db"), then restores the default action and re-raises,
 * so the process dies by that signal (shell status 128+N). */
#ifndef BT_CRASH_H
#define BT_CRASH_H

typedef void (*bt_crash_hook)(int sig, const char *frames, void *user);

int bt_crash_install(bt_crash_hook hook, void *user);
void bt_crash_uninstall(void);
/* Text appended to the stderr line after the hook ran ("trace closed:
 * run.db"); NULL or "" for none. Copied (at most 511 bytes). */
void bt_crash_set_note(const char *text);
/* Interrupts: SIGINT, SIGTERM, SIGHUP and SIGPIPE (unless ignored when
 * installed) only set a flag, which bt_interrupt_pending() returns (the
 * signal number, 0 for none) so that a command can stop between steps,
 * record the interrupt and close its trace. A second SIGINT/SIGTERM/SIGHUP
 * takes the default action at once. Uninstall restores the old actions and
 * keeps the flag. */
int bt_interrupt_install(void);
void bt_interrupt_uninstall(void);
int bt_interrupt_pending(void);
/* Die by sig with its default action (exit status 128+sig if it returns). */
void bt_signal_die(int sig) __attribute__((noreturn));

/* "SIGSEGV" etc. */
const char *bt_signal_name(int sig);

#endif
