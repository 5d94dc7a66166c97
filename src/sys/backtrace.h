/* backtrace.h - symbolized host backtraces (libunwind).
 *
 * Used at the first non-finite detection (which code path produced the
 * tensor) and from the fatal-signal handler, so it never allocates. Built
 * without libunwind (configure --without-libunwind), backtrace_none.c
 * provides the same functions: they list no frame and write one line saying
 * why, and bt_backtrace_provider() returns NULL. */
#ifndef BT_BACKTRACE_H
#define BT_BACKTRACE_H

#include <stddef.h>

/* Write the calling thread's stack into buf, one frame per line:
 *   "#0 0x0000555555555abc bt_engine_forward+0x1a4 (bangtrace)"
 * skipping the innermost `skip` frames (bt_backtrace itself is never
 * listed). Returns the number of frames written; buf is always
 * NUL-terminated. Async-signal-safe: no malloc, no stdio. */
int bt_backtrace(char *buf, size_t cap, int skip);
/* From inside a SA_SIGINFO handler, given its ucontext argument: the
 * interrupted code's stack, frame #0 being the instruction that faulted
 * (the handler and the kernel's signal trampoline are not listed). With a
 * NULL ucontext, libunwind's signal-frame flag is used; outside a handler it
 * lists the caller's stack. Async-signal-safe. */
int bt_backtrace_signal(char *buf, size_t cap, const void *ucontext);
/* "libunwind", or NULL when built without backtraces (the trace writer
 * records it as meta.backtraces). */
const char *bt_backtrace_provider(void);

#endif
