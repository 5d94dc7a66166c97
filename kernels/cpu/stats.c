/* stats.c - one-pass tap statistics (bt_tap_stats, src/base/records.h).
 *
 * The finite path is the vector sweep (bt_sweep_f32: one pass, float lanes
 * per 64-element chunk folded into double lanes, the same bits on every SIMD
 * variant); a chunk holding a non-finite value takes the slow branch here,
 * which is rare by definition (and when it is not, the run is already
 * broken). The CPU backend's stats op, the engine's host-side taps and the
 * tests' reference all call it. */
#include "kernels.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

void bt_stats_compute(const float *x, int rows, int width, int pos0, bt_tap_stats *out)
{
    int64_t n = (int64_t)rows * width, nan = 0, pinf = 0, ninf = 0, first = -1;
    bt_sweep acc;
    bt_sweep_init(&acc);
    /* Finite chunks go through the kernels' vector sweep; a chunk holding a
     * NaN or an Inf comes back here, element by element. */
    int64_t i = 0;
    while (i < n) {
        i += bt_sweep_f32(x + i, n - i, &acc);
        if (i >= n) break;
        int64_t end = BT_MIN(n, i + 64);
        float s = 0, q = 0;
        for (int64_t j = i; j < end; j++) {
            float v = x[j];
            if (isnan(v)) { nan++; if (first < 0) first = j; }
            else if (isinf(v)) { if (v > 0) pinf++; else ninf++; if (first < 0) first = j; }
            else {
                s += v; q += v * v;
                acc.mn[0] = v < acc.mn[0] ? v : acc.mn[0];
                acc.mx[0] = v > acc.mx[0] ? v : acc.mx[0];
            }
        }
        acc.sum[0] += s; acc.sumsq[0] += q;
        i = end;
    }
    double sum = 0, sumsq = 0;
    float mn = INFINITY, mx = -INFINITY;
    for (int l = 0; l < 8; l++) {
        sum += acc.sum[l]; sumsq += acc.sumsq[l];
        mn = acc.mn[l] < mn ? acc.mn[l] : mn;
        mx = acc.mx[l] > mx ? acc.mx[l] : mx;
    }
    int64_t nf = n - nan - pinf - ninf;
    out->n = n; out->nan = nan; out->pinf = pinf; out->ninf = ninf; out->n_finite = nf;
    if (nf > 0) {
        out->min = mn; out->max = mx;
        out->absmax = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
        out->mean = (float)(sum / nf);
        out->rms = (float)sqrt(sumsq / nf);
    } else {
        out->min = out->max = out->absmax = out->mean = out->rms = NAN;
    }
    out->first_bad_index = first < 0 ? -1 : (int)(first % width);
    out->first_bad_pos = first < 0 ? -1 : pos0 + (int)(first / width);
}
