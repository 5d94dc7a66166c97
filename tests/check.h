/* check.h - the one assertion macro of the C unit tests.
 *
 * CHECK(cond) or CHECK(cond, "fmt", args...) counts a check and, when cond
 * is false, counts a failure and prints "FAIL file:line: cond[: message]"
 * on stderr; the test goes on, so one run lists every failure. CHECK_OK(e)
 * checks that a status-returning call gave BT_OK and prints the code and
 * bt_errmsg() otherwise. A test's main returns `failures ? 1 : 0`. */
#ifndef BT_TEST_CHECK_H
#define BT_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "base/util.h"

static int failures, checks;

__attribute__((format(printf, 4, 5), unused))
static void check_fail_(const char *file, int line, const char *cond, const char *fmt, ...)
{
    failures++;
    fprintf(stderr, "FAIL %s:%d: %s", file, line, cond);
    if (fmt[2]) {               /* ": " plus a message */
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

/* `": " __VA_ARGS__` makes the message optional (a literal format string
 * pasted after ": "; absent, the format is ": " alone). */
#define CHECK(c, ...) do { checks++; if (!(c)) check_fail_(__FILE__, __LINE__, #c, ": " __VA_ARGS__); } while (0)
#define CHECK_OK(e) do { int rc_ = (e); checks++; \
    if (rc_) check_fail_(__FILE__, __LINE__, #e, ": %s: %s", bt_strerror(rc_), bt_errmsg()); } while (0)

#endif
