/* test_compare.c - bt_tap_compare, the one rule behind `bisect --reference`
 * and `diff`: exact equality at tolerance 0, bf16 rounding of finite
 * tensors (a replay's full-precision value equals its stored bf16),
 * full precision for tensors holding non-finite values, NaN as "no finite
 * value", the count fields first, and the tolerance edge against the
 * tensor's spread. */
#include "trace/compare.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { failures++; fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #c); } } while (0)

static bt_trace_tap_row row(double min, double max, double mean, double rms)
{
    bt_trace_tap_row r;
    memset(&r, 0, sizeof r);
    r.min = min; r.max = max; r.mean = mean; r.rms = rms;
    r.absmax = fmax(fabs(min), fabs(max));
    r.first_bad_index = r.first_bad_pos = -1;
    r.recorded = true;
    return r;
}

static void test_exact(void)
{
    bt_trace_tap_row a = row(-1, 2, 0.25, 0.5), b = a;
    bt_tap_diff d;
    CHECK(!bt_tap_compare(&a, &b, 0, &d) && !d.field && d.rel == 0);
    CHECK(!bt_tap_compare(&a, &b, 0, NULL));
    b.max = 2.015625;                    /* the next bf16 above 2 */
    CHECK(bt_tap_compare(&a, &b, 0, &d) && !strcmp(d.field, "max") && d.a == 2 && d.b == 2.015625);
    CHECK(fabs(d.rel - 0.015625 / 2.015625) < 1e-12);
    /* fields are reported in the documented order: min before max */
    b.min = -1.0078125;
    CHECK(bt_tap_compare(&a, &b, 0, &d) && !strcmp(d.field, "min"));
}

static void test_bf16(void)
{
    /* a finite tensor: a full-precision replay value equals its stored
     * bf16 rounding (the trace holds bt_bf16_round(x)) */
    float x = 1.0009765625f;             /* 1 + 2^-10: between two bf16 values */
    bt_trace_tap_row stored = row(-1, bt_bf16_round(x), 0, 0.5);
    bt_tap_stats s;
    memset(&s, 0, sizeof s);
    s.n = 8; s.min = -1; s.max = x; s.mean = 0; s.rms = 0.5f;
    s.first_bad_index = s.first_bad_pos = -1;
    bt_trace_tap_row replay;
    bt_tap_row_from_stats(&s, &replay);
    CHECK(replay.max == x && bt_bf16_round(x) != x);
    CHECK(!bt_tap_compare(&stored, &replay, 0, NULL));
    /* a tensor holding NaN is stored at full precision: no rounding */
    stored.nan = replay.nan = 3;
    stored.max = bt_bf16_round(x);
    CHECK(bt_tap_compare(&stored, &replay, 0, NULL));
    stored.max = x;
    CHECK(!bt_tap_compare(&stored, &replay, 0, NULL));
}

static void test_nan(void)
{
    bt_tap_diff d;
    /* count fields first, NaN before +Inf before -Inf; rel infinite */
    bt_trace_tap_row a = row(-1, 1, 0, 0.5), b = a;
    b.nan = 1;
    CHECK(bt_tap_compare(&a, &b, 1e9, &d) && !strcmp(d.field, "nan") && d.a == 0 && d.b == 1 && isinf(d.rel));
    b.nan = 0; b.ninf = 2; a.pinf = 1;
    CHECK(bt_tap_compare(&a, &b, 0, &d) && !strcmp(d.field, "pinf"));
    a.pinf = 0; b.ninf = 0;
    /* NaN: "no finite value", equal only to NaN */
    bt_trace_tap_row n1 = row(NAN, NAN, NAN, NAN), n2 = n1;
    n1.nan = n2.nan = 8;
    CHECK(!bt_tap_compare(&n1, &n2, 0, &d) && d.rel == 0);
    n2.min = n2.max = n2.mean = n2.rms = 1;
    CHECK(bt_tap_compare(&n1, &n2, 1e9, &d) && !strcmp(d.field, "min") && isinf(d.rel));
    /* an overflowed statistic equals itself */
    bt_trace_tap_row i1 = row(-INFINITY, INFINITY, 0, 1), i2 = i1;
    CHECK(!bt_tap_compare(&i1, &i2, 0, NULL));
}

static void test_tolerance(void)
{
    bt_tap_diff d;
    /* min, max against the tensor's absmax (4): 0.0625 off is 1/64 */
    bt_trace_tap_row a = row(-4, 0.5, 0, 1), b = row(-4, 0.5625, 0, 1);
    CHECK(bt_tap_compare(&a, &b, 0.015, &d) && !strcmp(d.field, "max"));
    CHECK(fabs(d.rel - 0.0625 / 4) < 1e-12);
    CHECK(!bt_tap_compare(&a, &b, 0.0625 / 4, &d));   /* at the edge: not beyond it */
    CHECK(!bt_tap_compare(&a, &b, 0.02, NULL));
    /* a mean near zero is judged against the rms, not its own size */
    a = row(-2, 2, 0.001953125, 1);
    b = row(-2, 2, -0.001953125, 1);
    CHECK(!bt_tap_compare(&a, &b, 0.02, &d) && fabs(d.rel - 0.00390625) < 1e-12);
    CHECK(bt_tap_compare(&a, &b, 0.003, &d) && !strcmp(d.field, "mean"));
    /* rms against itself */
    a = row(-2, 2, 0, 1);
    b = row(-2, 2, 0, 1.0625);
    CHECK(bt_tap_compare(&a, &b, 0.05, &d) && !strcmp(d.field, "rms"));
    CHECK(!bt_tap_compare(&a, &b, 0.06, NULL));
    /* an all-zero tensor: the 1e-6 floor keeps a relative tolerance finite */
    a = row(0, 0, 0, 0);
    b = row(0, 0, 0, 0);
    b.max = 1e-9f;
    b.max = bt_bf16_round((float)b.max);
    CHECK(bt_tap_compare(&a, &b, 0, &d) && !strcmp(d.field, "max") && isfinite(d.rel));
    CHECK(!bt_tap_compare(&a, &b, 0.01, NULL));
}

int main(void)
{
    test_exact();
    test_bf16();
    test_nan();
    test_tolerance();
    if (failures) { fprintf(stderr, "test_compare: %d failure(s)\n", failures); return 1; }
    printf("test_compare: ok\n");
    return 0;
}
