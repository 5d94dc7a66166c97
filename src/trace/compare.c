/* compare.c - bt_tap_compare: the tolerance rule of compare.h, shared by
 * `bisect --reference` and `diff`. */
#include "trace/compare.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

static double abs_finite(double x) { return isfinite(x) ? fabs(x) : 0; }
static double max_finite(double a, double b) { return fmax(abs_finite(a), abs_finite(b)); }

bool bt_tap_compare(const bt_trace_tap_row *a, const bt_trace_tap_row *b, double tol, bt_tap_diff *d)
{
    bt_tap_diff tmp;
    if (!d) d = &tmp;
    memset(d, 0, sizeof(*d));
    const struct { const char *name; int64_t a, b; } counts[] = {
        { "nan", a->nan, b->nan }, { "pinf", a->pinf, b->pinf }, { "ninf", a->ninf, b->ninf },
    };
    for (int i = 0; i < 3; i++) {
        if (counts[i].a == counts[i].b) continue;
        d->field = counts[i].name;
        d->a = (double)counts[i].a;
        d->b = (double)counts[i].b;
        d->rel = INFINITY;
        return true;
    }
    /* the counts agree, so both sides are stored alike: bf16 when finite */
    bool bf16 = !bt_trace_tap_bad(a);
    double v[2][4] = { { a->min, a->max, a->mean, a->rms }, { b->min, b->max, b->mean, b->rms } };
    if (bf16)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 4; k++) v[s][k] = bt_bf16_round((float)v[s][k]);
    double s_abs = fmax(max_finite(v[0][0], v[0][1]), max_finite(v[1][0], v[1][1]));
    double s_rms = max_finite(v[0][3], v[1][3]);
    const double scale[4] = { s_abs, s_abs, fmax(s_rms, max_finite(v[0][2], v[1][2])), s_rms };
    static const char *const names[4] = { "min", "max", "mean", "rms" };
    for (int k = 0; k < 4; k++) {
        double x = v[0][k], y = v[1][k];
        if (x == y || (isnan(x) && isnan(y))) continue;
        double rel = isnan(x) || isnan(y) || isinf(x) || isinf(y) ? INFINITY
                   : fabs(x - y) / fmax(scale[k], BT_TAP_SCALE_FLOOR);
        if (rel > d->rel) d->rel = rel;
        if (!d->field && rel > tol) {
            d->field = names[k];
            d->a = x;
            d->b = y;
        }
    }
    return d->field != NULL;
}

void bt_tap_row_from_stats(const bt_tap_stats *s, bt_trace_tap_row *o)
{
    *o = (bt_trace_tap_row){
        .layer = -1, .n = s->n, .nan = s->nan, .pinf = s->pinf, .ninf = s->ninf,
        .min = s->min, .max = s->max, .mean = s->mean, .rms = s->rms,
        .absmax = isnan(s->min) || isnan(s->max) ? NAN : fmax(fabs(s->min), fabs(s->max)),
        .first_bad_index = s->first_bad_index, .first_bad_pos = s->first_bad_pos, .recorded = true,
    };
}

double bt_tap_tol_devices(int mant_bits, long k, int n_layers)
{
    double u = ldexp(1.0, -(mant_bits > 0 ? mant_bits : 24));
    double t = 8.0 * u * sqrt((double)(k > 0 ? k : 1) * (double)(n_layers + 1));
    return fmin(BT_TAP_TOL_MAX, fmax(BT_TAP_TOL_STORED, t));
}

int bt_tap_tol_mant_bits(const char *numerics)
{
    int bits = 24;
    if (!numerics) return bits;
    static const char *const parts[] = { "act=", "mm_in=", "mm_acc=", "kv=" };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        const char *p = numerics;
        while ((p = strstr(p, parts[i]))) {
            /* a whole part: at the start or after ',', ' ' or ':' */
            bool whole = p == numerics || p[-1] == ',' || p[-1] == ' ' || p[-1] == ':';
            p += strlen(parts[i]);
            if (!whole) continue;
            int b = !strncmp(p, "f16", 3) ? 11 : !strncmp(p, "bf16", 4) || !strncmp(p, "q8", 2) ? 8 : 24;
            if (b < bits) bits = b;
        }
    }
    return bits;
}
