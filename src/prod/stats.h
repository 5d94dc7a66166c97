/* stats.h - the statistics of probe, canary and ctxwalk: a failure rate's
 * Wilson 95% interval, Fisher's exact test for an A/B of two failure
 * rates, and the replicate rule's "how many more requests".
 *
 * Pure functions of counts (no I/O, no allocation). Checked against scipy
 * to 1e-9 (tests/test_prod_stats.c, tests/prod_stats_scipy.py). */
#ifndef BT_PROD_STATS_H
#define BT_PROD_STATS_H

/* The 97.5% normal quantile (scipy.special.ndtri(0.975)). */
#define BT_STATS_Z95 1.959963984540054
/* The replicate rule: fewer requests than this per arm never declare an
 * A/B difference fixed, whatever the p-value. */
#define BT_STATS_MIN_PER_ARM 40
#define BT_STATS_ALPHA 0.05

/* Wilson score interval for k failures in n trials at 95% (scipy's
 * binomtest(k, n).proportion_ci(method='wilson')). n = 0 gives [0, 1]. */
void bt_stats_wilson(long k, long n, double *lo, double *hi);

/* Two-sided p-value of Fisher's exact test on the 2x2 table
 * [[a, b], [c, d]] (scipy.stats.fisher_exact). 1.0 when a row or column
 * sums to zero. */
double bt_stats_fisher(long a, long b, long c, long d);

/* Replicate rule, A/B: with fa of na failures in arm A and fb of nb in arm
 * B, the smallest requests per arm n >= max(na, nb, BT_STATS_MIN_PER_ARM)
 * at which the observed rates, kept (round(rate * n) failures per arm),
 * would give a Fisher p-value below BT_STATS_ALPHA. -1 when the rates are
 * equal or no n up to 10^7 would do. */
long bt_stats_ab_needed(long fa, long na, long fb, long nb);
/* The same at another significance level (probe --contamination runs
 * several tests and divides BT_STATS_ALPHA among them). */
long bt_stats_ab_needed_alpha(long fa, long na, long fb, long nb, double alpha);

/* One arm: the smallest n at which k failures would put the Wilson upper
 * bound under max_fail, keeping the observed rate (0 failures stay 0);
 * -1 when the rate itself is at or above max_fail (no n would do). */
long bt_stats_rate_needed(long k, long n, double max_fail);

#endif
