/* test_prod_stats.c - src/prod/stats.c against the scipy reference table
 * tests/prod_stats_ref.tsv (generated and re-checked against scipy by
 * tests/prod_stats_scipy.py): Wilson bounds and Fisher p-values to 1e-9,
 * replicate-rule sizes exactly. */
#include "check.h"
#include "prod/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool near(double a, double b) { return fabs(a - b) <= 1e-9; }

int main(void)
{
    const char *src = getenv("BT_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/prod_stats_ref.tsv", src ? src : ".");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return 1;
    char line[512];
    int rows = 0, kinds[4] = { 0 };
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char kind[16];
        long a, b, c, d, n;
        double x, y;
        rows++;
        if (sscanf(line, "wilson %ld %ld %lf %lf", &a, &b, &x, &y) == 4 && !strncmp(line, "wilson", 6)) {
            double lo, hi;
            bt_stats_wilson(a, b, &lo, &hi);
            CHECK(near(lo, x) && near(hi, y), "wilson(%ld, %ld) = [%.17g, %.17g], scipy [%.17g, %.17g]", a, b, lo, hi, x, y);
            kinds[0]++;
        } else if (sscanf(line, "fisher %ld %ld %ld %ld %lf", &a, &b, &c, &d, &x) == 5) {
            double p = bt_stats_fisher(a, b, c, d);
            CHECK(near(p, x) && (x == 0 || fabs(p - x) / x < 1e-9), "fisher(%ld %ld %ld %ld) = %.17g, scipy %.17g", a, b, c, d, p, x);
            kinds[1]++;
        } else if (sscanf(line, "abneed %ld %ld %ld %ld %ld", &a, &b, &c, &d, &n) == 5) {
            long got = bt_stats_ab_needed(a, b, c, d);
            CHECK(got == n, "ab_needed(%ld/%ld vs %ld/%ld) = %ld, reference %ld", a, b, c, d, got, n);
            kinds[2]++;
        } else if (sscanf(line, "rateneed %ld %ld %lf %ld", &a, &b, &x, &n) == 4) {
            long got = bt_stats_rate_needed(a, b, x);
            CHECK(got == n, "rate_needed(%ld/%ld, %g) = %ld, reference %ld", a, b, x, got, n);
            kinds[3]++;
        } else {
            sscanf(line, "%15s", kind);
            CHECK(0, "unparsed row: %s", line);
        }
    }
    fclose(f);
    CHECK(kinds[0] >= 10 && kinds[1] >= 10 && kinds[2] >= 5 && kinds[3] >= 5, "table too small: %d rows", rows);
    /* properties the table does not spell out */
    double lo, hi;
    bt_stats_wilson(0, 40, &lo, &hi);
    CHECK(lo == 0 && hi > 0.08 && hi < 0.09, "0/40 bounds the rate below ~8.8%%, got %g", hi);
    CHECK(bt_stats_ab_needed(1, 10, 1, 10) == -1, "equal rates: no n confirms a difference");
    CHECK(isnan(bt_stats_fisher(-1, 1, 1, 1)), "negative counts are not a table");
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
