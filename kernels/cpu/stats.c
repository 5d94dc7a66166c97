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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A finite sweep's accumulators as a segment's part. */
static void part_of(bt_stats_part *p, const bt_sweep *acc)
{
    memcpy(p->sum, acc->sum, sizeof p->sum);
    memcpy(p->sumsq, acc->sumsq, sizeof p->sumsq);
    memcpy(p->mn, acc->mn, sizeof p->mn);
    memcpy(p->mx, acc->mx, sizeof p->mx);
}

/* One segment: the finite chunks through the kernels' vector sweep; a
 * chunk holding a NaN or an Inf comes back here, element by element. */
void bt_stats_part_sweep(const float *x, int64_t n, int64_t k, bt_stats_part *p)
{
    int64_t i0 = k * BT_STATS_SEG, i1 = BT_MIN(n, i0 + BT_STATS_SEG);
    bt_sweep acc;
    bt_sweep_init(&acc);
    p->nan = p->pinf = p->ninf = 0;
    p->first = -1;
    int64_t i = i0;
    while (i < i1) {
        i += bt_sweep_f32(x + i, i1 - i, &acc);
        if (i >= i1) break;
        int64_t end = BT_MIN(i1, i + 64);
        float s = 0, q = 0;
        for (int64_t j = i; j < end; j++) {
            float v = x[j];
            if (isnan(v)) { p->nan++; if (p->first < 0) p->first = j; }
            else if (isinf(v)) { if (v > 0) p->pinf++; else p->ninf++; if (p->first < 0) p->first = j; }
            else {
                s += v; q += v * v;
                acc.mn[0] = v < acc.mn[0] ? v : acc.mn[0];
                acc.mx[0] = v > acc.mx[0] ? v : acc.mx[0];
            }
        }
        acc.sum[0] += s; acc.sumsq[0] += q;
        i = end;
    }
    part_of(p, &acc);
}

void bt_stats_part_add(bt_stats_part *acc, const bt_stats_part *p, bool first)
{
    if (first) {
        *acc = *p;
        return;
    }
    for (int l = 0; l < 8; l++) {
        acc->sum[l] += p->sum[l];
        acc->sumsq[l] += p->sumsq[l];
        acc->mn[l] = p->mn[l] < acc->mn[l] ? p->mn[l] : acc->mn[l];
        acc->mx[l] = p->mx[l] > acc->mx[l] ? p->mx[l] : acc->mx[l];
    }
    acc->nan += p->nan;
    acc->pinf += p->pinf;
    acc->ninf += p->ninf;
    if (acc->first < 0) acc->first = p->first;
}

void bt_stats_part_finish(const bt_stats_part *acc, int64_t n, int width, int pos0, bt_tap_stats *out)
{
    int64_t nan = acc->nan, pinf = acc->pinf, ninf = acc->ninf, first = acc->first;
    double sum = 0, sumsq = 0;
    float mn = INFINITY, mx = -INFINITY;
    for (int l = 0; l < 8; l++) {
        sum += acc->sum[l]; sumsq += acc->sumsq[l];
        mn = acc->mn[l] < mn ? acc->mn[l] : mn;
        mx = acc->mx[l] > mx ? acc->mx[l] : mx;
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

void bt_stats_compute(const float *x, int rows, int width, int pos0, bt_tap_stats *out)
{
    int64_t n = (int64_t)rows * width, nseg = n > 0 ? (n + BT_STATS_SEG - 1) / BT_STATS_SEG : 1;
    bt_stats_part acc, p;
    for (int64_t k = 0; k < nseg; k++) {
        bt_stats_part_sweep(x, n, k, &p);
        bt_stats_part_add(&acc, &p, k == 0);
    }
    bt_stats_part_finish(&acc, n, width, pos0, out);
}

void bt_sweep_fold(bt_sweep *acc, const bt_sweep_chunk *c, int64_t nc)
{
    int64_t k = 0;
#if defined(__SSE2__)
    /* the baseline's vectors, lane by lane the loop below: min_ps(a, b) is
     * a < b ? a : b, each float widened exactly, then one double add */
    __m128 mn0 = _mm_loadu_ps(acc->mn), mn1 = _mm_loadu_ps(acc->mn + 4);
    __m128 mx0 = _mm_loadu_ps(acc->mx), mx1 = _mm_loadu_ps(acc->mx + 4);
    __m128d s[4], q[4];
    for (int i = 0; i < 4; i++) {
        s[i] = _mm_loadu_pd(acc->sum + 2 * i);
        q[i] = _mm_loadu_pd(acc->sumsq + 2 * i);
    }
    for (; k < nc; k++) {
        const bt_sweep_chunk *ck = &c[k];
        mn0 = _mm_min_ps(_mm_loadu_ps(ck->mn), mn0);
        mn1 = _mm_min_ps(_mm_loadu_ps(ck->mn + 4), mn1);
        mx0 = _mm_max_ps(_mm_loadu_ps(ck->mx), mx0);
        mx1 = _mm_max_ps(_mm_loadu_ps(ck->mx + 4), mx1);
        __m128 s0 = _mm_loadu_ps(ck->s), s1 = _mm_loadu_ps(ck->s + 4);
        __m128 q0 = _mm_loadu_ps(ck->q), q1 = _mm_loadu_ps(ck->q + 4);
        s[0] = _mm_add_pd(s[0], _mm_cvtps_pd(s0));
        s[1] = _mm_add_pd(s[1], _mm_cvtps_pd(_mm_movehl_ps(s0, s0)));
        s[2] = _mm_add_pd(s[2], _mm_cvtps_pd(s1));
        s[3] = _mm_add_pd(s[3], _mm_cvtps_pd(_mm_movehl_ps(s1, s1)));
        q[0] = _mm_add_pd(q[0], _mm_cvtps_pd(q0));
        q[1] = _mm_add_pd(q[1], _mm_cvtps_pd(_mm_movehl_ps(q0, q0)));
        q[2] = _mm_add_pd(q[2], _mm_cvtps_pd(q1));
        q[3] = _mm_add_pd(q[3], _mm_cvtps_pd(_mm_movehl_ps(q1, q1)));
    }
    _mm_storeu_ps(acc->mn, mn0);
    _mm_storeu_ps(acc->mn + 4, mn1);
    _mm_storeu_ps(acc->mx, mx0);
    _mm_storeu_ps(acc->mx + 4, mx1);
    for (int i = 0; i < 4; i++) {
        _mm_storeu_pd(acc->sum + 2 * i, s[i]);
        _mm_storeu_pd(acc->sumsq + 2 * i, q[i]);
    }
#endif
    for (; k < nc; k++)
        for (int l = 0; l < 8; l++) {
            acc->mn[l] = c[k].mn[l] < acc->mn[l] ? c[k].mn[l] : acc->mn[l];
            acc->mx[l] = c[k].mx[l] > acc->mx[l] ? c[k].mx[l] : acc->mx[l];
            acc->sum[l] += c[k].s[l];
            acc->sumsq[l] += c[k].q[l];
        }
}

/* Each segment's chunks folded from zero, the segments added in order:
 * bt_stats_compute's association (its segment sweep, on finite chunks,
 * folds them as bt_sweep_fold does). */
void bt_stats_from_chunks(const bt_sweep_chunk *c, int rows, int width, int pos0, bt_tap_stats *out)
{
    int64_t n = (int64_t)rows * width, nc = n / 64, per = BT_STATS_SEG / 64;
    bt_stats_part acc, p;
    p.nan = p.pinf = p.ninf = 0;
    p.first = -1;
    for (int64_t k = 0; k == 0 || k * per < nc; k++) {
        bt_sweep sw;
        bt_sweep_init(&sw);
        bt_sweep_fold(&sw, c + k * per, BT_MIN(per, nc - k * per));
        part_of(&p, &sw);
        bt_stats_part_add(&acc, &p, k == 0);
    }
    bt_stats_part_finish(&acc, n, width, pos0, out);
}

int64_t bt_first_above_f32(const float *x, int64_t n, float t)
{
    int64_t i = 0;
#if defined(__SSE2__)
    /* 16 at a time, the baseline's vectors (a NaN compares false) */
    const __m128 tv = _mm_set1_ps(t);
    for (; i + 16 <= n; i += 16) {
        __m128 a = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + i), tv), _mm_cmpgt_ps(_mm_loadu_ps(x + i + 4), tv));
        __m128 b = _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + i + 8), tv), _mm_cmpgt_ps(_mm_loadu_ps(x + i + 12), tv));
        if (_mm_movemask_ps(_mm_or_ps(a, b)))
            break;
    }
#endif
    for (; i < n; i++)
        if (x[i] > t)
            return i;
    return n;
}
