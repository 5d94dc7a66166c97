/* cmd_common.c - the helpers commands share (cmd.h): the failure line and
 * flag-value parsing. Apart from main.c so that programs calling the
 * command functions directly (the fuzz harnesses) link them from libbtcmd. */
#include "cmd.h"
#include "base/util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int bt_cmd_fail(const char *cmd)
{
    const char *msg = bt_errmsg();
    fprintf(stderr, "bangtrace: %s: %s\n", cmd, *msg ? msg : "failed");
    return 2;
}

int bt_parse_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return bt_error(BT_EINVAL, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s ? s : "");
    *out = v;
    return BT_OK;
}

int bt_parse_u64(const char *flag, const char *s, unsigned long long *out)
{
    /* Decimal digits only: strtoull would take a sign, spaces and "0x", and
     * clamp anything past 2^64-1 to that value without a word. */
    unsigned long long v = 0;
    const char *p = s ? s : "";
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (ULLONG_MAX - d) / 10) break;
        v = v * 10 + d;
    }
    if (!s || !*s || *p)
        return bt_error(BT_EINVAL, "%s expects an integer in [0, 18446744073709551615], got '%s'", flag, s ? s : "");
    *out = v;
    return BT_OK;
}

int bt_parse_float(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !(v >= lo && v <= hi))
        return bt_error(BT_EINVAL, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s ? s : "");
    *out = v;
    return BT_OK;
}
