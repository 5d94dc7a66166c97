/* test_sampler.c - the three argmax rules on the rows that tell them apart
 * (NaN, +-Inf, ties, padding), and sampling: determinism, top-k / top-p
 * limits, and frequencies against the softmax. */
#include "engine/sampler.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_ID(rule, row, want) check_id(__LINE__, rule, row, (int)BT_ARRAY_SIZE(row), want)

static bt_argmax_rule R(const char *s)
{
    bt_argmax_rule r = { -1, 0 };
    if (bt_argmax_parse(s, &r) != BT_OK) { failures++; fprintf(stderr, "cannot parse %s: %s\n", s, bt_errmsg()); }
    return r;
}

static void check_id(int line, const char *rule, const float *x, int n, int want)
{
    bt_argmax_rule r = R(rule);
    int got = bt_argmax(&r, x, n);
    if (got != want) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: %s on a row of %d picked %d, want %d\n", __FILE__, line, rule, n, got, want);
    }
}

static void test_parse(void)
{
    bt_argmax_rule r;
    char buf[32];
    CHECK(bt_argmax_parse("first", &r) == BT_OK && r.kind == BT_ARGMAX_FIRST);
    CHECK(bt_argmax_parse("torch", &r) == BT_OK && r.kind == BT_ARGMAX_TORCH);
    CHECK(bt_argmax_parse("triton-block:1024", &r) == BT_OK && r.kind == BT_ARGMAX_TRITON && r.block == 1024);
    bt_argmax_format(&r, buf, sizeof buf);
    CHECK(strcmp(buf, "triton-block:1024") == 0);
    CHECK(bt_argmax_parse("triton-block:1", &r) == BT_OK && r.block == 1);
    CHECK(bt_argmax_parse("triton-block:65536", &r) == BT_OK && r.block == 65536);
    const char *bad[] = { "", "First", "max", "triton", "triton-block:", "triton-block:0", "triton-block:3",
                          "triton-block:131072", "triton-block:-4", "triton-block:4x", "triton-block: 4" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(bad); i++) {
        CHECK(bt_argmax_parse(bad[i], &r) == BT_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", bad[i]);
        if (!strstr(bt_errmsg(), want)) {
            failures++;
            fprintf(stderr, "FAIL: error for %s does not name it: %s\n", bad[i], bt_errmsg());
        }
    }
    CHECK(bt_argmax_parse(NULL, &r) == BT_EINVAL);
    bt_argmax_rule f = { BT_ARGMAX_FIRST, 0 }, t = { BT_ARGMAX_TORCH, 0 };
    bt_argmax_format(&f, buf, sizeof buf); CHECK(strcmp(buf, "first") == 0);
    bt_argmax_format(&t, buf, sizeof buf); CHECK(strcmp(buf, "torch") == 0);
}

static void test_rules(void)
{
    const float N = NAN, I = INFINITY;
    const float normal[] = { 0.5f, -1, 3, 2, 2.5f };
    const float ties[] = { 2, 5, 5, 1, 5 };
    const float all_nan[] = { N, N, N, N, N, N };
    const float nan0[] = { N, 1, 3, 2 };
    const float nan_mid[] = { 1, 4, N, 2 };
    const float nan_last[] = { 1, 2, 3, N };
    const float one_finite[] = { N, N, 5, N };
    const float pinf[] = { 1, I, N, I };
    const float ninf[] = { -I, -I, -I, -I, -I };
    const float ninf_nan[] = { N, N, -I, N };
    const float mixed[] = { 1, N, 3, 3, N, -I };         /* the doc/argmax.md example */
    const float neg[] = { -7, -3, -3, -9 };

    CHECK_ID("first", normal, 2);     CHECK_ID("torch", normal, 2);     CHECK_ID("triton-block:4", normal, 2);
    CHECK_ID("first", ties, 1);       CHECK_ID("torch", ties, 1);       CHECK_ID("triton-block:4", ties, 1);
    CHECK_ID("first", all_nan, 0);    CHECK_ID("torch", all_nan, 0);    CHECK_ID("triton-block:4", all_nan, 6);
    CHECK_ID("first", nan0, 2);       CHECK_ID("torch", nan0, 0);       CHECK_ID("triton-block:4", nan0, 2);
    CHECK_ID("first", nan_mid, 1);    CHECK_ID("torch", nan_mid, 2);    CHECK_ID("triton-block:4", nan_mid, 1);
    CHECK_ID("first", nan_last, 2);   CHECK_ID("torch", nan_last, 3);   CHECK_ID("triton-block:4", nan_last, 2);
    CHECK_ID("first", one_finite, 2); CHECK_ID("torch", one_finite, 0); CHECK_ID("triton-block:4", one_finite, 2);
    CHECK_ID("first", pinf, 1);       CHECK_ID("torch", pinf, 2);       CHECK_ID("triton-block:4", pinf, 1);
    CHECK_ID("first", ninf, 0);       CHECK_ID("torch", ninf, 0);       CHECK_ID("triton-block:4", ninf, 0);
    /* first never moves off its initial id 0 because -inf > -inf is false;
     * the block kernel finds the -inf lane since it ignores only NaN */
    CHECK_ID("first", ninf_nan, 0);   CHECK_ID("torch", ninf_nan, 0);   CHECK_ID("triton-block:4", ninf_nan, 2);
    CHECK_ID("first", mixed, 2);      CHECK_ID("torch", mixed, 1);      CHECK_ID("triton-block:4", mixed, 2);
    CHECK_ID("first", neg, 1);        CHECK_ID("torch", neg, 1);        CHECK_ID("triton-block:4", neg, 1);

    /* the all-NaN id is the vocabulary size for every block size, whether
     * or not the row needs padding (doc/argmax.md) */
    const char *blocks[] = { "triton-block:1", "triton-block:4", "triton-block:32", "triton-block:1024" };
    const int sizes[] = { 1, 3, 4, 10, 32, 33, 1024, 1030, 49152 };
    float *row = malloc(49152 * sizeof *row);
    for (size_t b = 0; b < BT_ARRAY_SIZE(blocks); b++)
        for (size_t s = 0; s < BT_ARRAY_SIZE(sizes); s++) {
            int n = sizes[s];
            for (int i = 0; i < n; i++) row[i] = NAN;
            check_id(__LINE__, blocks[b], row, n, n);
            row[n - 1] = -INFINITY;            /* a real -inf lane beats padding */
            check_id(__LINE__, blocks[b], row, n, n - 1);
            for (int i = 0; i < n; i++) row[i] = (float)(i % 7);  /* ties across blocks */
            check_id(__LINE__, blocks[b], row, n, n > 6 ? 6 : n - 1);
            row[n - 1] = 100;                  /* max in the last (maybe padded) block */
            check_id(__LINE__, blocks[b], row, n, n - 1);
        }
    free(row);
    bt_argmax_rule f = { BT_ARGMAX_FIRST, 0 };
    CHECK(bt_argmax(&f, NULL, 0) == 0);
}

/* Reference semantics written differently from sampler.c: the lowest index
 * over the padded row equal to its NaN-ignoring max, else the padded width. */
static int ref_triton(const float *x, int n, int N)
{
    int vp = (n + N - 1) / N * N;
    float m = NAN;
    for (int i = 0; i < vp; i++) {
        float v = i < n ? x[i] : -INFINITY;
        if (!isnan(v) && (isnan(m) || v > m)) m = v;
    }
    for (int i = 0; i < vp; i++) {
        float v = i < n ? x[i] : -INFINITY;
        if (v == m) return i;
    }
    return vp;
}

static int ref_torch(const float *x, int n)
{
    for (int i = 0; i < n; i++) if (isnan(x[i])) return i;
    int id = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[id]) id = i;
    return id;
}

static void test_random_rows(void)
{
    uint64_t st = 12345;
    float row[300];
    const int Ns[] = { 1, 4, 32, 1024 };
    for (int iter = 0; iter < 4000; iter++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        int n = 1 + (int)((st >> 33) % 300);
        int nan_pct = (int)((st >> 20) % 101);
        for (int i = 0; i < n; i++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            int r = (int)((st >> 33) % 100);
            row[i] = r < nan_pct ? NAN : (r % 13 == 0 ? -INFINITY : (r % 17 == 0 ? INFINITY : (float)((st >> 40) % 9)));
        }
        bt_argmax_rule t = { BT_ARGMAX_TORCH, 0 };
        if (bt_argmax(&t, row, n) != ref_torch(row, n)) { failures++; fprintf(stderr, "FAIL: torch row %d\n", iter); }
        /* first: the plain strict-greater loop (its vector maximum and scan
         * must agree on NaN, +-Inf and zeros of both signs) */
        if (iter % 3 == 0)
            for (int i = 0; i < n; i++)
                if (row[i] == 0 && (i & 1)) row[i] = -0.0f;
        int fw = 0;
        float fb = -INFINITY;
        for (int i = 0; i < n; i++) if (row[i] > fb) { fb = row[i]; fw = i; }
        bt_argmax_rule f = { BT_ARGMAX_FIRST, 0 };
        if (bt_argmax(&f, row, n) != fw) { failures++; fprintf(stderr, "FAIL: first row %d: %d vs %d\n", iter, bt_argmax(&f, row, n), fw); }
        for (size_t k = 0; k < BT_ARRAY_SIZE(Ns); k++) {
            bt_argmax_rule r = { BT_ARGMAX_TRITON, Ns[k] };
            int got = bt_argmax(&r, row, n), want = ref_triton(row, n, Ns[k]);
            if (got != want) { failures++; fprintf(stderr, "FAIL: triton:%d row %d: %d vs %d\n", Ns[k], iter, got, want); }
            /* padding never shows through unless the row has no number */
            bool any = false;
            for (int i = 0; i < n; i++) any |= !isnan(row[i]);
            if (any ? got >= n : got != n) { failures++; fprintf(stderr, "FAIL: triton:%d out of range\n", Ns[k]); }
        }
    }
}

static bt_sampler *mk(float temp, int top_k, float top_p, uint64_t seed, const char *rule, int n)
{
    bt_sampler_cfg c = { .temperature = temp, .top_k = top_k, .top_p = top_p, .seed = seed, .rule = R(rule) };
    bt_sampler *s = NULL;
    if (bt_sampler_new(&c, n, &s) != BT_OK) { failures++; fprintf(stderr, "sampler_new: %s\n", bt_errmsg()); exit(1); }
    return s;
}

static void fill_row(float *x, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(seed >> 11) * 0x1.0p-53 * 8.0 - 4.0);
    }
}

static void test_sampling_basics(void)
{
    enum { V = 1000 };
    float *x = malloc(V * sizeof *x);
    fill_row(x, V, 7);
    bt_argmax_rule first = { BT_ARGMAX_FIRST, 0 };
    int amax = bt_argmax(&first, x, V);

    /* same seed, same ids; another seed, other ids */
    bt_sampler *a = mk(1, 0, 1, 42, "first", V), *b = mk(1, 0, 1, 42, "first", V), *c = mk(1, 0, 1, 43, "first", V);
    int same = 1, differ = 0;
    for (int i = 0; i < 500; i++) {
        int32_t u = bt_sampler_sample(a, x, V, NULL), v = bt_sampler_sample(b, x, V, NULL);
        int32_t w = bt_sampler_sample(c, x, V, NULL);
        same &= u == v;
        differ |= u != w;
        CHECK(u >= 0 && u < V);
    }
    CHECK(same);
    CHECK(differ);
    bt_sampler_free(a); bt_sampler_free(b); bt_sampler_free(c);

    /* the PRNG is part of the trace's reproducibility: pin its first ids */
    const float small[] = { 0, 1, 2, 3 };
    bt_sampler *p = mk(1, 0, 1, 3, "first", 4);
    int32_t got[8];
    for (int i = 0; i < 8; i++) got[i] = bt_sampler_sample(p, small, 4, NULL);
    bt_sampler_free(p);
    static const int32_t pinned[8] = { 1, 3, 3, 1, 2, 3, 2, 3 };
    CHECK(memcmp(got, pinned, sizeof got) == 0);
    if (memcmp(got, pinned, sizeof got) != 0) {
        fprintf(stderr, "got ids:");
        for (int i = 0; i < 8; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n");
    }

    /* top-k 1 and a tiny top-p both reduce to greedy "first" */
    bt_sampler *k1 = mk(1.5f, 1, 1, 9, "first", V), *p0 = mk(1, 0, 1e-6f, 9, "first", V);
    bt_sampler *g = mk(0, 0, 1, 9, "first", V);
    for (int i = 0; i < 200; i++) {
        fill_row(x, V, 100 + (uint64_t)i);
        if (i % 3 == 0) x[V - 1] = x[0] = 9; /* a tie: the lower id must win */
        int want = bt_argmax(&first, x, V);
        CHECK(bt_sampler_sample(k1, x, V, NULL) == want);
        CHECK(bt_sampler_sample(p0, x, V, NULL) == want);
        CHECK(bt_sampler_sample(g, x, V, NULL) == want);
    }
    bt_sampler_free(k1); bt_sampler_free(p0); bt_sampler_free(g);

    /* logprob: log softmax at temperature 1, whatever the sampling temperature */
    fill_row(x, V, 7);
    bt_sampler *t = mk(0.7f, 0, 1, 3, "first", V);
    float lp;
    int32_t id = bt_sampler_sample(t, x, V, &lp);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)x[i]);
    CHECK(fabs(lp - (x[id] - log(sum))) < 1e-5);
    bt_sampler_free(t);
    bt_sampler *gr = mk(0, 0, 1, 3, "first", V);
    CHECK(bt_sampler_sample(gr, x, V, &lp) == amax);
    CHECK(fabs(lp - (x[amax] - log(sum))) < 1e-5);

    /* -inf entries are masked tokens, never drawn */
    for (int i = 0; i < V; i++) if (i % 2) x[i] = -INFINITY;
    bt_sampler *m = mk(1, 0, 1, 5, "first", V);
    for (int i = 0; i < 300; i++) CHECK(bt_sampler_sample(m, x, V, NULL) % 2 == 0);
    bt_sampler_free(m);

    /* non-finite rows: sampling falls back to the configured argmax rule */
    const float bad[] = { 1, NAN, 3, NAN };
    const float nans[] = { NAN, NAN, NAN };
    const float posinf[] = { 1, INFINITY, 2 };
    const float allneg[] = { -INFINITY, -INFINITY };
    bt_sampler *st = mk(1, 0, 1, 5, "torch", 4), *sf = mk(1, 0, 0.9f, 5, "first", 4);
    bt_sampler *sb = mk(1, 40, 1, 5, "triton-block:32", 4);
    CHECK(bt_sampler_sample(st, bad, 4, &lp) == 1 && isnan(lp));
    CHECK(bt_sampler_sample(sf, bad, 4, &lp) == 2 && isnan(lp));
    CHECK(bt_sampler_sample(sb, bad, 4, &lp) == 2 && isnan(lp));
    CHECK(bt_sampler_sample(sb, nans, 3, &lp) == 3 && isnan(lp));
    CHECK(bt_sampler_sample(sf, posinf, 3, &lp) == 1 && isnan(lp));
    CHECK(bt_sampler_sample(sf, allneg, 2, &lp) == 0 && isnan(lp));
    bt_sampler_free(st); bt_sampler_free(sf); bt_sampler_free(sb);
    bt_sampler_free(gr);

    /* bad configurations */
    bt_sampler *s = NULL;
    bt_sampler_cfg c1 = { .temperature = -1, .top_p = 1 };
    CHECK(bt_sampler_new(&c1, 10, &s) == BT_EINVAL && !s);
    bt_sampler_cfg c2 = { .temperature = 1, .top_p = 1.5f };
    CHECK(bt_sampler_new(&c2, 10, &s) == BT_EINVAL && !s);
    bt_sampler_cfg c3 = { .temperature = 1, .top_p = 1, .top_k = -2 };
    CHECK(bt_sampler_new(&c3, 10, &s) == BT_EINVAL && !s);
    CHECK(bt_sampler_new(&c3, 0, &s) == BT_EINVAL && !s);
    bt_sampler_cfg c4 = { .temperature = 1 }; /* zeroed top_p: off */
    CHECK(bt_sampler_new(&c4, 10, &s) == BT_OK && s);
    bt_sampler_free(s);
    bt_sampler_free(NULL);
    free(x);
}

/* Pearson's statistic of n draws against the expected probabilities. */
static double chi2(const int *count, const double *p, int k, int n)
{
    double c = 0;
    for (int i = 0; i < k; i++) {
        if (p[i] == 0) { if (count[i]) return INFINITY; continue; }
        double e = p[i] * n;
        c += (count[i] - e) * (count[i] - e) / e;
    }
    return c;
}

static void check_freq(int line, float temp, int top_k, float top_p, const float *x, int k)
{
    enum { DRAWS = 20000 };
    double p[16], sum = 0;
    int order[16], count[16] = {0};
    for (int i = 0; i < k; i++) { p[i] = exp(x[i] / (double)temp); order[i] = i; }
    /* expected: renormalised softmax over the top-k, then the nucleus */
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            if (x[order[j]] > x[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    int keep = top_k > 0 && top_k < k ? top_k : k;
    for (int i = 0; i < keep; i++) sum += p[order[i]];
    double cum = 0;
    int nucleus = keep;
    for (int i = 0; i < keep; i++) {
        cum += p[order[i]] / sum;
        if (cum >= top_p) { nucleus = i + 1; break; }
    }
    double q[16] = {0}, qs = 0;
    for (int i = 0; i < nucleus; i++) qs += p[order[i]];
    for (int i = 0; i < nucleus; i++) q[order[i]] = p[order[i]] / qs;

    bt_sampler *s = mk(temp, top_k, top_p, 2024 + (uint64_t)line, "first", k);
    for (int i = 0; i < DRAWS; i++) count[bt_sampler_sample(s, x, k, NULL)]++;
    bt_sampler_free(s);
    /* k - 1 degrees of freedom at most 11; 40 is far past p = 1e-4, while a
     * wrong distribution (off-by-one, wrong temperature) gives hundreds */
    double c = chi2(count, q, k, DRAWS);
    if (!(c < 40)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: chi-square %.1f for T=%g top_k=%d top_p=%g\n", __FILE__, line, c, temp, top_k, top_p);
    }
}

static void test_frequencies(void)
{
    const float x[12] = { 1.0f, 0.2f, -0.5f, 2.0f, 1.5f, 0.0f, -1.0f, 0.7f, 1.2f, -2.0f, 0.4f, 1.9f };
    check_freq(__LINE__, 1.0f, 0, 1.0f, x, 12);
    check_freq(__LINE__, 0.5f, 0, 1.0f, x, 12);
    check_freq(__LINE__, 2.0f, 0, 1.0f, x, 12);
    check_freq(__LINE__, 1.0f, 4, 1.0f, x, 12);
    check_freq(__LINE__, 1.0f, 0, 0.6f, x, 12);
    check_freq(__LINE__, 0.8f, 6, 0.8f, x, 12);

    /* a sampler at temperature 1 that ignored the softmax would fail here */
    const float flat[4] = { 0, 0, 0, 0 };
    int count[4] = {0};
    bt_sampler *s = mk(1, 0, 1, 77, "first", 4);
    for (int i = 0; i < 20000; i++) count[bt_sampler_sample(s, flat, 4, NULL)]++;
    bt_sampler_free(s);
    double q[4] = { .25, .25, .25, .25 };
    CHECK(chi2(count, q, 4, 20000) < 25);
}

int main(void)
{
    test_parse();
    test_rules();
    test_random_rows();
    test_sampling_basics();
    test_frequencies();
    if (failures) { fprintf(stderr, "test_sampler: %d failure(s)\n", failures); return 1; }
    printf("test_sampler: ok\n");
    return 0;
}
