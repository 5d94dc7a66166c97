/* stats.c - logit-row summaries for the trace (the one-pass tensor
 * statistics, bt_stats_compute, are the CPU kernels': kernels/cpu/stats.c). */
#include "tap/stats.h"
#include "engine/sampler.h"
#include "kernels/cpu/kernels.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

void bt_logit_summarize(const float *row, int n, int k, int triton_block, const bt_softmax_sums *sums,
                        bt_logit_summary *out)
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
    if (!finite) out->argmax_first = bt_argmax(&r, row, n);
    /* a finite row's first-rule answer comes with the top-k below */
    if (out->nan == 0) {
        /* The rules differ only in how they meet a NaN: without one, each
         * gives the first index of the maximum (0 for an all -inf row), so
         * one pass serves all three (tests/test_stats.c checks it). */
        out->argmax_torch = out->argmax_triton = -1;   /* set with argmax_first below */
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
         * bits), the sums and the logarithm double, in four chains of a
         * fixed order (bt_softmax_sums_f32: the variant's vectors, the
         * same bits everywhere). A -inf logit gives exp 0 and adds
         * nothing, as a masked token should. */
        double z[4] = { 0 }, ez[4] = { 0 };
        if (sums && !memcmp(&sums->max, &mx, sizeof mx)) {   /* the sampler's, with this maximum (sign of a zero too) */
            memcpy(z, sums->z, sizeof z);
            memcpy(ez, sums->ez, sizeof ez);
        } else bt_softmax_sums_f32(row, n, mx, z, ez);
        double zs = (z[0] + z[1]) + (z[2] + z[3]), es = (ez[0] + ez[1]) + (ez[2] + ez[3]);
        out->entropy = log(zs) - es / zs;
    } else out->entropy = NAN;
    /* top-k by insertion into a small sorted array (k <= 64); once it is
     * full, a finite row's values that are not above its last one are
     * passed over by a vector scan (what the loop would do one by one) */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (finite && m == k && k > 0) {
            i += (int)bt_first_above_f32(row + i, n - i, out->topk_vals[k - 1]);
            if (i >= n) break;
        }
        float v = row[i];
        if (!isfinite(v)) continue;
        if (m == k && v <= out->topk_vals[m - 1]) continue;
        int j = m < k ? m++ : m - 1;
        while (j > 0 && out->topk_vals[j - 1] < v) { out->topk_vals[j] = out->topk_vals[j - 1]; out->topk_ids[j] = out->topk_ids[j - 1]; j--; }
        out->topk_vals[j] = v; out->topk_ids[j] = i;
    }
    out->k = m;
    if (finite) {
        /* The first rule's answer on a finite row: the first index holding
         * the maximum (== also matches a zero of the other sign, as > does).
         * The top-k's first entry is that index: a value equal to the one
         * in front never passes it. Without a top-k, a scan 16 at a time. */
        int i = 0;
        if (m > 0) i = out->topk_ids[0];
        else {
            for (; i + 16 <= n; i += 16) {
                int any = 0;
                for (int t = 0; t < 16; t++) any |= row[i + t] == mx;
                if (any) break;
            }
            while (row[i] != mx) i++;
        }
        out->argmax_first = i;
    }
    if (out->argmax_torch < 0) out->argmax_torch = out->argmax_triton = out->argmax_first;
}

bool bt_tap_stats_merge(bt_tap_stats *x, const bt_tap_stats *y)
{
    bool take_bad = y->first_bad_pos >= 0 && (x->first_bad_pos < 0 || y->first_bad_pos < x->first_bad_pos);
    int64_t nf = x->n_finite + y->n_finite;
    if (y->n_finite > 0) {
        if (x->n_finite > 0) {
            x->mean = (float)(((double)x->mean * x->n_finite + (double)y->mean * y->n_finite) / nf);
            x->rms = (float)sqrt(((double)x->rms * x->rms * x->n_finite + (double)y->rms * y->rms * y->n_finite) / nf);
            x->min = fminf(x->min, y->min);
            x->max = fmaxf(x->max, y->max);
            x->absmax = fmaxf(x->absmax, y->absmax);
        } else {
            x->mean = y->mean; x->rms = y->rms; x->min = y->min; x->max = y->max; x->absmax = y->absmax;
        }
    }
    x->n += y->n; x->n_finite = nf;
    x->nan += y->nan; x->pinf += y->pinf; x->ninf += y->ninf;
    if (take_bad) {
        x->first_bad_index = y->first_bad_index;
        x->first_bad_pos = y->first_bad_pos;
    }
    return take_bad;
}
