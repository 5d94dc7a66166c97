/* stats.c - Wilson interval, Fisher's exact test, replicate-rule sizes.
 *
 * Fisher's two-sided p-value follows scipy: the sum of the hypergeometric
 * probabilities of every table (same margins) no more likely than the
 * observed one, with a relative tolerance for ties; 1 when the observed
 * table is the mode. Probabilities come from lgamma, exact to ~1e-13
 * relative for the table sizes probe sees, far inside the 1e-9 we test. */
#include "prod/stats.h"

#include <math.h>

void bt_stats_wilson(long k, long n, double *lo, double *hi)
{
    if (n <= 0 || k < 0 || k > n) { *lo = 0; *hi = 1; return; }
    double z = BT_STATS_Z95, z2 = z * z, nn = (double)n, p = (double)k / nn;
    double denom = 1 + z2 / nn;
    double center = (p + z2 / (2 * nn)) / denom;
    double half = z * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
    *lo = center - half;
    *hi = center + half;
    if (*lo < 0) *lo = 0;
    if (*hi > 1) *hi = 1;
    /* k = 0 and k = n: the bound is exactly 0 / 1, not a rounding of it */
    if (k == 0) *lo = 0;
    if (k == n) *hi = 1;
}

static double lchoose(long n, long k)
{
    return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1);
}

/* log P(X = x), X ~ hypergeom(total M, N successes, n draws) */
static double lpmf(long x, long M, long N, long n)
{
    return lchoose(N, x) + lchoose(M - N, n - x) - lchoose(M, n);
}

double bt_stats_fisher(long a, long b, long c, long d)
{
    if (a < 0 || b < 0 || c < 0 || d < 0) return NAN;
    if (a + b == 0 || c + d == 0 || a + c == 0 || b + d == 0) return 1.0;
    long n1 = a + b, n2 = c + d, n = a + c, M = n1 + n2;
    long lo = n - n2 > 0 ? n - n2 : 0, hi = n < n1 ? n : n1;
    long mode = (long)((double)(n + 1) * (double)(n1 + 1) / (double)(M + 2));
    double lexact = lpmf(a, M, n1, n), lmode = lpmf(mode, M, n1, n);
    /* the observed table is (within rounding) the most likely one */
    if (fabs(exp(lexact - lmode) - 1) <= 1e-12) return 1.0;
    double cut = lexact + log1p(1e-7), p = 0;
    for (long x = lo; x <= hi; x++) {
        double l = lpmf(x, M, n1, n);
        if (l <= cut) p += exp(l);
    }
    return p > 1 ? 1 : p;
}

long bt_stats_ab_needed(long fa, long na, long fb, long nb)
{
    return bt_stats_ab_needed_alpha(fa, na, fb, nb, BT_STATS_ALPHA);
}

long bt_stats_ab_needed_alpha(long fa, long na, long fb, long nb, double alpha)
{
    if (na <= 0 || nb <= 0 || fa < 0 || fb < 0 || fa > na || fb > nb) return -1;
    double ra = (double)fa / na, rb = (double)fb / nb;
    if (ra == rb) return -1;
    long start = na > nb ? na : nb;
    if (start < BT_STATS_MIN_PER_ARM) start = BT_STATS_MIN_PER_ARM;
    for (long n = start; n <= 10000000; ) {
        long a = lround(ra * n), b = lround(rb * n);
        if (bt_stats_fisher(a, n - a, b, n - b) < alpha) return n;
        /* exact steps while small; beyond, 1% strides (the answer is an
         * order of magnitude for a human, not a sample-size table) */
        n += n < 1000 ? 1 : n / 100;
    }
    return -1;
}

long bt_stats_rate_needed(long k, long n, double max_fail)
{
    if (n <= 0 || k < 0 || k > n || !(max_fail > 0)) return -1;
    double r = (double)k / n;
    if (r >= max_fail) return -1;
    double lo, hi;
    /* the upper bound falls monotonically with n at a fixed rate: bisect */
    long a = n, b = n;
    for (;;) {
        bt_stats_wilson(lround(r * b), b, &lo, &hi);
        if (hi < max_fail) break;
        if (b > 1000000000L) return -1;
        a = b;
        b *= 2;
    }
    bt_stats_wilson(lround(r * a), a, &lo, &hi);
    if (hi < max_fail) return a;
    while (b - a > 1) {
        long m = a + (b - a) / 2;
        bt_stats_wilson(lround(r * m), m, &lo, &hi);
        if (hi < max_fail) b = m; else a = m;
    }
    return b;
}
