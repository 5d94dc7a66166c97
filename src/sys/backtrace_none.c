/* backtrace_none.c - backtraces where bangtrace was built without libunwind
 * (configure --without-libunwind, or libunwind not found).
 *
 * Same contract as backtrace.c, async-signal-safe: no frame is listed and
 * buf gets one line saying why, so the crash event and the browser's
 * Backtrace view say "unavailable" instead of showing an empty stack. */
#include <string.h>

#include "sys/backtrace.h"

static const char why[] = "(no backtrace: bangtrace was built without libunwind)";

static int no_frames(char *buf, size_t cap)
{
    if (!buf || !cap) return 0;
    size_t n = sizeof(why) - 1 < cap - 1 ? sizeof(why) - 1 : cap - 1;
    memcpy(buf, why, n);
    buf[n] = 0;
    return 0;
}

int bt_backtrace(char *buf, size_t cap, int skip) { (void)skip; return no_frames(buf, cap); }
int bt_backtrace_signal(char *buf, size_t cap, const void *ucontext) { (void)ucontext; return no_frames(buf, cap); }
const char *bt_backtrace_provider(void) { return NULL; }
