/* stats.c - one-pass tap statistics and logit-row summaries.
 *
 * The finite path is the kernels' vector sweep (bt_sweep_f32: one pass,
 * float lanes per 64-element chunk folded into double lanes, the same bits
 * on every SIMD variant); a chunk holding a non-finite value takes the slow
 * branch here, which is rare by definition (and when it is not, the run is
 * already broken). */
#include "tap/stats.h"
#include "engine/sampler.h"
#include "kernels.h"
#include "util.h"

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

uint16_t bt_f32_to_bf16(float x)
{
    union { float f; uint32_t u; } v = { .f = x };
    if (isnan(x)) return 0x7fc0;
    uint32_t u = v.u;
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float bt_bf16_round(float x) { return bt_bf16_to_f32(bt_f32_to_bf16(x)); }

void bt_logit_summarize(const float *row, int n, int k, int triton_block, bt_logit_summary *out)
{
    memset(out, 0, sizeof(*out));
    out->n_vocab = n;
    if (k > 64) k = 64;
    if (k > n) k = n;
    float mx = -INFINITY;
    /* A finite row (every healthy step) in one vector pass: the sweep's
     * lane maxima give the row's maximum exactly; a row with a NaN or an
     * Inf is counted element by element. */
    bt_sweep acc;
    bt_sweep_init(&acc);
    bool finite = n > 0 && bt_sweep_f32(row, n, &acc) == n;
    if (finite) {
        for (int l = 0; l < 8; l++)
            if (acc.mx[l] > mx) mx = acc.mx[l];
    } else {
        for (int i = 0; i < n; i++) {
            float v = row[i];
            if (isnan(v)) out->nan++;
            else if (isinf(v)) { if (v > 0) out->pinf++; else out->ninf++; }
            else if (v > mx) mx = v;
        }
    }
    int64_t bad = out->nan + out->pinf + out->ninf;
    out->max = bad == n ? NAN : mx;
    bt_argmax_rule r = { .kind = BT_ARGMAX_FIRST };
    if (finite) {
        /* the first rule's answer on a finite row: the first index holding
         * the maximum (== also matches a zero of the other sign, as > does) */
        int i = 0;
        while (row[i] != mx) i++;
        out->argmax_first = i;
    } else
        out->argmax_first = bt_argmax(&r, row, n);
    if (out->nan == 0) {
        /* The rules differ only in how they meet a NaN: without one, each
         * gives the first index of the maximum (0 for an all -inf row), so
         * one pass serves all three (tests/test_stats.c checks it). */
        out->argmax_torch = out->argmax_triton = out->argmax_first;
    } else {
        r.kind = BT_ARGMAX_TORCH;
        out->argmax_torch = bt_argmax(&r, row, n);
        r.kind = BT_ARGMAX_TRITON; r.block = triton_block > 0 ? triton_block : 1024;
        out->argmax_triton = bt_argmax(&r, row, n);
    }
    /* entropy of softmax, only meaningful for a finite row (-inf entries are
     * masked tokens with probability 0) */
    if (out->nan == 0 && out->pinf == 0 && bad < n) {
        /* p_i = exp(x_i - max) / z. The exponentials are f32 (libm's expf
         * bits through bt_exp_sub_f32, 256 at a time: a double exp per
         * logit was most of a decode step's recording cost); the sums and
         * the logarithm are double. A -inf logit gives exp 0 and adds
         * nothing, as a masked token should. */
        double z[4] = { 0 }, ez[4] = { 0 };   /* four chains, fixed order */
        float e[256];
        for (int i = 0; i < n; i += 256) {
            int k = BT_MIN(256, n - i);
            memcpy(e, row + i, (size_t)k * sizeof(float));
            bt_exp_sub_f32(e, k, mx);
            for (int j = 0; j < k; j++) {
                double d = (double)row[i + j] - mx;
                if (out->ninf && e[j] == 0) continue;   /* a masked -inf: 0 * -inf would be NaN */
                z[j & 3] += e[j];
                ez[j & 3] += e[j] * d;
            }
        }
        double zs = (z[0] + z[1]) + (z[2] + z[3]), es = (ez[0] + ez[1]) + (ez[2] + ez[3]);
        out->entropy = log(zs) - es / zs;
    } else out->entropy = NAN;
    /* top-k by insertion into a small sorted array (k <= 64) */
    int m = 0;
    for (int i = 0; i < n; i++) {
        float v = row[i];
        if (!isfinite(v)) continue;
        if (m == k && v <= out->topk_vals[m - 1]) continue;
        int j = m < k ? m++ : m - 1;
        while (j > 0 && out->topk_vals[j - 1] < v) { out->topk_vals[j] = out->topk_vals[j - 1]; out->topk_ids[j] = out->topk_ids[j - 1]; j--; }
        out->topk_vals[j] = v; out->topk_ids[j] = i;
    }
    out->k = m;
}
