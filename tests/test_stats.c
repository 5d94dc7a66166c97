/* test_stats.c - bt_stats_compute, field by field.
 *
 * Every field of bt_tap_stats is checked against a plain double-precision
 * reference on vectors mixing NaN, +Inf, -Inf, signed zeros, subnormals and
 * large values, long enough to take both the vectorised clean path and the
 * slow per-element path, plus the edge cases (empty, width 1, all NaN, all
 * infinite). The NaN / +Inf / -Inf split is checked separately: counting one
 * kind as another must fail here, not pass the suite. */
#include "tap/stats.h"
#include "kernels/cpu/kernels.h"   /* bt_stats_compute */
#include "engine/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c) do { if (!(c)) { failures++; fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #c); } } while (0)

/* The reference: a naive sweep in double precision. */
static void reference(const float *x, int rows, int width, int pos0, bt_tap_stats *r)
{
    int64_t n = (int64_t)rows * width, first = -1;
    double sum = 0, sumsq = 0, mn = INFINITY, mx = -INFINITY;
    memset(r, 0, sizeof(*r));
    r->n = n;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (isnan(v)) r->nan++;
        else if (v == INFINITY) r->pinf++;
        else if (v == -INFINITY) r->ninf++;
        else {
            r->n_finite++; sum += v; sumsq += (double)v * v;
            if (v < mn) mn = v;
            if (v > mx) mx = v;
            continue;
        }
        if (first < 0) first = i;
    }
    if (r->n_finite) {
        r->min = (float)mn; r->max = (float)mx;
        r->absmax = (float)fmax(fabs(mn), fabs(mx));
        r->mean = (float)(sum / r->n_finite);
        r->rms = (float)sqrt(sumsq / r->n_finite);
    } else r->min = r->max = r->absmax = r->mean = r->rms = NAN;
    r->first_bad_index = first < 0 ? -1 : (int)(first % width);
    r->first_bad_pos = first < 0 ? -1 : pos0 + (int)(first / width);
}

/* Relative closeness for the float accumulators (the implementation sums
 * in float lanes folded into doubles). NaN matches NaN only. */
static int close_to(float got, float want)
{
    if (isnan(want)) return isnan(got);
    if (isnan(got)) return 0;
    if (got == want) return 1;
    return fabsf(got - want) <= 1e-5f * fmaxf(fabsf(want), 1e-30f);
}

static void check_case(const char *name, const float *x, int rows, int width, int pos0)
{
    bt_tap_stats got, want;
    memset(&got, 0xa5, sizeof got);   /* every field must be written */
    bt_stats_compute(x, rows, width, pos0, &got);
    reference(x, rows, width, pos0, &want);
    int bad = 0;
#define FIELD_I(f) if (got.f != want.f) { bad++; fprintf(stderr, "FAIL: %s: " #f " = %lld, expected %lld\n", name, (long long)got.f, (long long)want.f); }
#define FIELD_F(f) if (!close_to(got.f, want.f)) { bad++; fprintf(stderr, "FAIL: %s: " #f " = %.9g, expected %.9g\n", name, (double)got.f, (double)want.f); }
    FIELD_I(n) FIELD_I(nan) FIELD_I(pinf) FIELD_I(ninf) FIELD_I(n_finite)
    FIELD_F(min) FIELD_F(max) FIELD_F(absmax) FIELD_F(mean) FIELD_F(rms)
    FIELD_I(first_bad_index) FIELD_I(first_bad_pos)
#undef FIELD_I
#undef FIELD_F
    CHECK(bt_stats_bad(&got) == (want.nan + want.pinf + want.ninf > 0));
    failures += bad;
}

/* Hand-computed cases: the exact values, not only agreement with reference(). */
static void test_exact(void)
{
    bt_tap_stats s;
    /* one of each non-finite kind, at known places, in a 2 x 4 tensor */
    const float a[8] = { 1.0f, -2.0f, INFINITY, 3.0f,   NAN, -INFINITY, 0.5f, -0.0f };
    bt_stats_compute(a, 2, 4, 7, &s);
    CHECK(s.n == 8);
    CHECK(s.nan == 1);
    CHECK(s.pinf == 1);
    CHECK(s.ninf == 1);
    CHECK(s.n_finite == 5);
    CHECK(s.min == -2.0f);
    CHECK(s.max == 3.0f);
    CHECK(s.absmax == 3.0f);
    CHECK(fabsf(s.mean - 2.5f / 5) < 1e-7f);
    CHECK(fabsf(s.rms - sqrtf((1 + 4 + 9 + 0.25f) / 5)) < 1e-6f);
    CHECK(s.first_bad_index == 2);   /* the +Inf, row 0 column 2 */
    CHECK(s.first_bad_pos == 7);

    /* only -Inf, in the second row: position pos0 + 1, column 1 */
    const float b[6] = { 0.25f, -0.75f, 4.0f,   1.0f, -INFINITY, 2.0f };
    bt_stats_compute(b, 2, 3, 100, &s);
    CHECK(s.nan == 0 && s.pinf == 0 && s.ninf == 1 && s.n_finite == 5);
    CHECK(s.first_bad_index == 1 && s.first_bad_pos == 101);
    CHECK(s.min == -0.75f && s.max == 4.0f && s.absmax == 4.0f);

    /* only +Inf: not counted as NaN or -Inf */
    const float c[3] = { INFINITY, INFINITY, 1.0f };
    bt_stats_compute(c, 1, 3, 0, &s);
    CHECK(s.nan == 0 && s.pinf == 2 && s.ninf == 0 && s.n_finite == 1);
    CHECK(s.first_bad_index == 0 && s.first_bad_pos == 0);
    CHECK(s.mean == 1.0f && s.rms == 1.0f && s.min == 1.0f && s.max == 1.0f);

    /* only NaN (both signs of NaN) */
    const float d[4] = { 2.0f, NAN, -NAN, -2.0f };
    bt_stats_compute(d, 1, 4, 3, &s);
    CHECK(s.nan == 2 && s.pinf == 0 && s.ninf == 0 && s.n_finite == 2);
    CHECK(s.first_bad_index == 1 && s.first_bad_pos == 3);
    CHECK(s.mean == 0.0f && s.rms == 2.0f && s.absmax == 2.0f);

    /* absmax taken from the negative side */
    const float e[3] = { -9.0f, 1.0f, 8.0f };
    bt_stats_compute(e, 1, 3, 0, &s);
    CHECK(s.absmax == 9.0f && s.min == -9.0f && s.max == 8.0f);
    CHECK(s.first_bad_index == -1 && s.first_bad_pos == -1 && !bt_stats_bad(&s));

    /* signed zeros only: finite, mean 0, rms 0, absmax +0 */
    const float z[4] = { -0.0f, 0.0f, -0.0f, 0.0f };
    bt_stats_compute(z, 2, 2, 0, &s);
    CHECK(s.n_finite == 4 && s.min == 0.0f && s.max == 0.0f && s.absmax == 0.0f && !signbit(s.absmax));
    CHECK(s.mean == 0.0f && s.rms == 0.0f && s.first_bad_index == -1);

    /* subnormals are finite, not bad */
    const float sub[3] = { 1e-45f, -1e-40f, 1e-39f };
    bt_stats_compute(sub, 1, 3, 0, &s);
    CHECK(s.n_finite == 3 && !bt_stats_bad(&s) && s.min == -1e-40f && s.max == 1e-39f && s.absmax == 1e-39f);

    /* all NaN: no finite value, every finite statistic is NaN */
    const float an[5] = { NAN, NAN, NAN, NAN, NAN };
    bt_stats_compute(an, 5, 1, 20, &s);
    CHECK(s.nan == 5 && s.pinf == 0 && s.ninf == 0 && s.n_finite == 0);
    CHECK(isnan(s.min) && isnan(s.max) && isnan(s.absmax) && isnan(s.mean) && isnan(s.rms));
    CHECK(s.first_bad_index == 0 && s.first_bad_pos == 20);

    /* all infinite, both signs */
    const float ai[4] = { -INFINITY, INFINITY, INFINITY, -INFINITY };
    bt_stats_compute(ai, 2, 2, 0, &s);
    CHECK(s.nan == 0 && s.pinf == 2 && s.ninf == 2 && s.n_finite == 0);
    CHECK(isnan(s.mean) && isnan(s.min) && s.first_bad_index == 0 && s.first_bad_pos == 0);

    /* empty tensor: nothing counted, nothing bad */
    bt_stats_compute(NULL, 0, 8, 5, &s);
    CHECK(s.n == 0 && s.nan == 0 && s.pinf == 0 && s.ninf == 0 && s.n_finite == 0);
    CHECK(isnan(s.mean) && s.first_bad_index == -1 && s.first_bad_pos == -1 && !bt_stats_bad(&s));

    /* width 1: the column is always 0 and the row gives the position */
    const float w1[4] = { 1.0f, 2.0f, 3.0f, INFINITY };
    bt_stats_compute(w1, 4, 1, 10, &s);
    CHECK(s.pinf == 1 && s.first_bad_index == 0 && s.first_bad_pos == 13);
    CHECK(s.mean == 2.0f && s.min == 1.0f && s.max == 3.0f);
}

/* Long vectors (several 64-element chunks, clean and dirty, with tails) in
 * several shapes, against the reference. */
static void test_random(void)
{
    enum { N = 1000 };
    static float x[N];
    unsigned seed = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int width = 1 + (int)(seed % 257), rows;
        seed = seed * 1103515245u + 12345u;
        rows = N / width;
        if (rows < 1) rows = 1;
        int n = rows * width, mode = trial % 5;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = (seed >> 8) & 0xffff;
            float v = ((float)r / 65536.0f - 0.5f) * 8.0f;
            if (r % 53 == 0) v = -0.0f;
            if (r % 59 == 0) v = 1e-42f;   /* subnormal */
            if (mode == 1 && r % 97 == 0) v = NAN;
            if (mode == 2 && r % 89 == 0) v = INFINITY;
            if (mode == 3 && r % 83 == 0) v = -INFINITY;
            if (mode == 4) {
                if (r % 101 == 0) v = NAN;
                else if (r % 103 == 0) v = INFINITY;
                else if (r % 107 == 0) v = -INFINITY;
            }
            x[i] = v;
        }
        /* a non-finite value placed in the middle of a clean chunk, late */
        if (mode == 2 && n > 700) x[n - 3] = INFINITY;
        char name[64];
        snprintf(name, sizeof name, "random trial %d (%d x %d, mode %d)", trial, rows, width, mode);
        check_case(name, x, rows, width, 40 + trial);
    }
}

/* Tensors of several BT_STATS_SEG segments (swept per segment, added in
 * order), clean and with non-finite values in a later segment only,
 * against the reference; and a tensor of exactly one segment gives the
 * bits of its first segment's part alone. */
static void test_segments(void)
{
    enum { ROWS = 3, WIDTH = 70001 };
    float *x = malloc((size_t)ROWS * WIDTH * sizeof(float));
    unsigned seed = 777;
    for (int mode = 0; mode < 3; mode++) {
        for (int i = 0; i < ROWS * WIDTH; i++) {
            seed = seed * 1103515245u + 12345u;
            x[i] = ((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f) * (mode == 2 ? 6e4f : 8.0f);
        }
        if (mode == 1) { x[3 * BT_STATS_SEG + 5] = NAN; x[3 * BT_STATS_SEG + 9] = -INFINITY; }
        char name[64];
        snprintf(name, sizeof name, "%d segments, mode %d", (ROWS * WIDTH + BT_STATS_SEG - 1) / BT_STATS_SEG, mode);
        check_case(name, x, ROWS, WIDTH, 3);
    }
    bt_tap_stats a, b;
    bt_stats_part p, acc;
    bt_stats_compute(x, 1, BT_STATS_SEG, 0, &a);
    bt_stats_part_sweep(x, BT_STATS_SEG, 0, &p);
    bt_stats_part_add(&acc, &p, true);
    bt_stats_part_finish(&acc, BT_STATS_SEG, BT_STATS_SEG, 0, &b);
    CHECK(!memcmp(&a.mean, &b.mean, sizeof(float)) && !memcmp(&a.rms, &b.rms, sizeof(float)) && a.min == b.min &&
          a.max == b.max);
    free(x);
}

/* bt_logit_summarize takes one argmax pass when the row has no NaN; each
 * rule must still give what bt_argmax gives it, ties, -inf, +inf and NaN
 * included. */
static void test_summary_argmax(void)
{
    enum { N = 3000 };
    static float row[N];
    unsigned seed = 777;
    for (int trial = 0; trial < 120; trial++) {
        int mode = trial % 6;
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = (seed >> 8) & 0xffff;
            row[i] = (float)(r % 13) - 6.0f;      /* many ties for the maximum */
            if (mode == 1 && r % 97 == 0) row[i] = -INFINITY;
            if (mode == 2 && r % 211 == 0) row[i] = INFINITY;
            if (mode == 3 && r % 307 == 0) row[i] = NAN;
            if (mode == 4) row[i] = -INFINITY;
            if (mode == 5) row[i] = NAN;
        }
        int blocks[] = { 1, 64, 1024 };
        for (int b = 0; b < 3; b++) {
            bt_logit_summary ls;
            bt_logit_summarize(row, N, 8, blocks[b], NULL, &ls);
            bt_argmax_rule f = { .kind = BT_ARGMAX_FIRST }, t = { .kind = BT_ARGMAX_TORCH },
                           tr = { .kind = BT_ARGMAX_TRITON, .block = blocks[b] };
            CHECK(ls.argmax_first == bt_argmax(&f, row, N));
            CHECK(ls.argmax_torch == bt_argmax(&t, row, N));
            CHECK(ls.argmax_triton == bt_argmax(&tr, row, N));
        }
    }
}

/* The rest of the summary against plain reference loops: counts, the
 * finite maximum, top-k (values descending, first index on ties) and the
 * entropy of the softmax computed in double with double exp (the summary
 * uses f32 exponentials: agreement to 1e-6 relative), on rows with -inf
 * masks, signed zeros as the maximum, and a single finite value. */
static void test_summary_fields(void)
{
    enum { N = 5000, K = 20 };
    static float row[N];
    unsigned seed = 4242;
    for (int trial = 0; trial < 72; trial++) {
        int mode = trial % 6, n = trial % 2 ? N : 4093;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            float u = (float)((seed >> 8) & 0xffffff) / 16777216.0f;
            row[i] = 30.0f * u - 10.0f;
            if (mode == 1 && (seed >> 3) % 5 == 0) row[i] = -INFINITY;
            if (mode == 2) row[i] = (seed >> 5) % 3 ? -1.0f - u : ((seed >> 7) & 1 ? 0.0f : -0.0f);
            if (mode == 3) row[i] = i == n / 3 ? 2.5f : -INFINITY;
            if (mode == 4) row[i] = 1e-3f * u - 80.0f;   /* exponentials near the f32 range */
            if (mode == 5) row[i] = floorf(8.0f * u) * 0.5f;   /* eight values: ties everywhere */
        }
        bt_logit_summary ls;
        bt_logit_summarize(row, n, K, 1024, NULL, &ls);
        int64_t ninf = 0;
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            if (row[i] == -INFINITY) ninf++;
            else if (row[i] > mx) mx = row[i];
        }
        CHECK(ls.nan == 0 && ls.pinf == 0 && ls.ninf == ninf);
        CHECK(ls.max == mx);
        double z = 0, ez = 0;
        for (int i = 0; i < n; i++)
            if (isfinite(row[i])) { double e = exp((double)row[i] - mx); z += e; ez += e * ((double)row[i] - mx); }
        double want = log(z) - ez / z;
        CHECK(fabs(ls.entropy - want) <= 1e-6 * fmax(1.0, fabs(want)));
        /* and exactly the summary's own order: f32 exponentials, element i
         * into chain i % 4 (the vectorized loop must not reorder it) */
        double zc[4] = { 0 }, ezc[4] = { 0 };
        for (int i = 0; i < n; i++) {
            if (!isfinite(row[i])) continue;
            float e = expf(row[i] - mx);
            zc[i & 3] += e;
            ezc[i & 3] += e * ((double)row[i] - mx);
        }
        double zs = (zc[0] + zc[1]) + (zc[2] + zc[3]), es = (ezc[0] + ezc[1]) + (ezc[2] + ezc[3]);
        CHECK(ls.entropy == log(zs) - es / zs);
        /* with the softmax sums the greedy sampler took of the row (what
         * run hands the recorder), the same summary; sums taken with
         * another maximum are not used */
        bt_sampler *sp = NULL;
        CHECK(bt_sampler_new(&(bt_sampler_cfg){ .rule = { .kind = BT_ARGMAX_FIRST } }, n, &sp) == 0 && sp);
        float lp;
        bt_sampler_sample(sp, row, n, &lp);
        const bt_softmax_sums *sm = bt_sampler_sums(sp);
        CHECK(sm != NULL);
        if (sm) {
            bt_logit_summary l2, l3;
            bt_logit_summarize(row, n, K, 1024, sm, &l2);
            bt_softmax_sums other = *sm;
            other.max = nextafterf(other.max, INFINITY);
            other.z[0] += 1;
            bt_logit_summarize(row, n, K, 1024, &other, &l3);
            CHECK(!memcmp(&l2.entropy, &ls.entropy, sizeof(double)) && !memcmp(&l3.entropy, &ls.entropy, sizeof(double)));
            CHECK(l2.k == ls.k && l2.argmax_first == ls.argmax_first && !memcmp(l2.topk_ids, ls.topk_ids, sizeof ls.topk_ids));
        }
        bt_sampler_free(sp);
        /* top-k: the k largest finite values, descending, lower index first on ties */
        int taken[K], m = 0;
        for (; m < K; m++) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                if (!isfinite(row[i])) continue;
                bool used = false;
                for (int j = 0; j < m; j++) used |= taken[j] == i;
                if (!used && (best < 0 || row[i] > row[best])) best = i;
            }
            if (best < 0) break;
            taken[m] = best;
        }
        CHECK(ls.k == m);
        for (int j = 0; j < m && j < ls.k; j++) CHECK(ls.topk_vals[j] == row[taken[j]] && ls.topk_ids[j] == taken[j]);
    }
}

int main(void)
{
    test_exact();
    test_random();
    test_segments();
    test_summary_argmax();
    test_summary_fields();
    if (failures) { fprintf(stderr, "%d failure(s)\n", failures); return 1; }
    printf("stats: all fields agree (exact cases, 200 random shapes)\n");
    return 0;
}
