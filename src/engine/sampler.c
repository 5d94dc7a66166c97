/* sampler.c - the three argmax rules and temperature / top-k / top-p
 * sampling (doc/argmax.md).
 *
 * The rules differ only on rows with NaN (and, for triton, on all-NaN rows
 * where padding shows through); on finite rows all three return the first
 * index of the maximum. Each is written the way the code it imitates works,
 * so that a trace replayed under a rule shows the same token the incident
 * showed:
 *   first   llama.cpp / llama2.c: best = -inf, id = 0, `if (x > best)`.
 *   torch   torch.argmax: NaN is greater than everything, first one wins.
 *   triton  a block kernel: lanes padded with -inf to a multiple of N, per
 *           block max ignoring NaN, then the lowest lane equal to it; the
 *           blocks are then reduced the same way.
 *
 * Sampling works in double: logits / T, top-k, softmax, top-p over the
 * sorted probabilities, one uniform draw from a splitmix64 stream, so the
 * same seed gives the same ids on every platform. */
#include "sampler.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"     /* bt_softmax_sums_f32 */

#include <errno.h>
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bt_argmax_parse(const char *s, bt_argmax_rule *out)
{
    if (!s) return bt_error(BT_EINVAL, "argmax rule: none given (want first, torch or triton-block:N)");
    if (!strcmp(s, "first")) { *out = (bt_argmax_rule){ BT_ARGMAX_FIRST, 0 }; return BT_OK; }
    if (!strcmp(s, "torch")) { *out = (bt_argmax_rule){ BT_ARGMAX_TORCH, 0 }; return BT_OK; }
    static const char pre[] = "triton-block:";
    if (!strncmp(s, pre, sizeof pre - 1)) {
        const char *num = s + sizeof pre - 1;
        char *end;
        errno = 0;
        long n = (*num >= '0' && *num <= '9') ? strtol(num, &end, 10) : -1;
        if (n < 0 || errno || *end)
            return bt_error(BT_EINVAL, "argmax rule \"%s\": block size is not a number", s);
        if (n < 1 || n > 65536 || (n & (n - 1)))
            return bt_error(BT_EINVAL, "argmax rule \"%s\": block size must be a power of two in 1..65536", s);
        *out = (bt_argmax_rule){ BT_ARGMAX_TRITON, (int)n };
        return BT_OK;
    }
    return bt_error(BT_EINVAL, "argmax rule \"%s\" is unknown (want first, torch or triton-block:N)", s);
}

void bt_argmax_format(const bt_argmax_rule *r, char *buf, size_t cap)
{
    if (!cap) return;
    switch (r->kind) {
    case BT_ARGMAX_FIRST: snprintf(buf, cap, "first"); break;
    case BT_ARGMAX_TORCH: snprintf(buf, cap, "torch"); break;
    case BT_ARGMAX_TRITON: snprintf(buf, cap, "triton-block:%d", r->block); break;
    default: snprintf(buf, cap, "?"); break;
    }
}

/* The largest value of x that is not NaN (-inf when there is none); with
 * bad, also whether x holds a NaN or a +Inf. With SSE2 four lanes at a
 * time (max_ps keeps the lane when x is NaN). */
static float row_max(const float *x, int n, bool *bad)
{
    float m = -INFINITY;
    int i = 0;
    bool b = false;
#if defined(__SSE2__)
    const __m128 inf = _mm_set1_ps(INFINITY);
    __m128 vm = _mm_set1_ps(-INFINITY), vb = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        vb = _mm_or_ps(vb, _mm_or_ps(_mm_cmpunord_ps(v, v), _mm_cmpeq_ps(v, inf)));
        vm = _mm_max_ps(v, vm);
    }
    b = _mm_movemask_ps(vb) != 0;
    float l[4];
    _mm_storeu_ps(l, vm);
    for (int k = 0; k < 4; k++)
        if (l[k] > m) m = l[k];
#endif
    for (; i < n; i++) {
        b |= isnan(x[i]) || x[i] == INFINITY;
        if (x[i] > m) m = x[i];
    }
    if (bad) *bad = b;
    return m;
}

/* The first index holding m, which x holds (== also meets a zero of the
 * other sign, which > would not have passed: the strict-greater loop's
 * answer is the first element that reaches the maximum). */
static int32_t first_equal(const float *x, float m)
{
    int32_t j = 0;
    while (x[j] != m) j++;
    return j;
}

/* The loop `if (x[i] > best) { best = x[i]; id = i; }` from best = -inf,
 * id = 0: NaN never wins, nothing above -inf leaves id 0, and otherwise id
 * is the first element equal to the maximum. */
static int32_t argmax_first(const float *x, int n)
{
    float m = row_max(x, n, NULL);
    return m > -INFINITY ? first_equal(x, m) : 0;
}

static int32_t argmax_torch(const float *x, int n)
{
    int32_t id = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) return i;
        if (x[i] > x[id]) id = i;
    }
    return id;
}

/* One block of lanes [lo, lo + N): lanes >= n read as -inf (the masked
 * load's `other=-inf`). Returns false when every lane is NaN. */
static bool triton_block(const float *x, int n, int lo, int N, float *bv, int *bi)
{
    bool any = false;
    for (int i = lo; i < lo + N; i++) {
        float v = i < n ? x[i] : -INFINITY;
        if (isnan(v)) continue;
        if (!any || v > *bv) { *bv = v; *bi = i; any = true; }
    }
    return any;
}

static int32_t argmax_triton(const float *x, int n, int N)
{
    if (N < 1) N = 1;
    int n_blocks = (n + N - 1) / N;
    bool any = false;
    float best = 0;
    int id = 0;
    for (int b = 0; b < n_blocks; b++) {
        float v = 0;
        int i = 0;
        /* strict > keeps the lower block on ties */
        if (triton_block(x, n, b * N, N, &v, &i) && (!any || v > best)) { best = v; id = i; any = true; }
    }
    /* Nothing but NaN and no padding to fall on (n a multiple of N): the
     * index reduction's sentinel, the padded width, which equals n here.
     * With padding the -inf lanes win instead and the first one is also n,
     * so an all-NaN row gives n under every block size. */
    if (!any) return (int32_t)n_blocks * N;
    return id;
}

int32_t bt_argmax(const bt_argmax_rule *r, const float *x, int n)
{
    if (n <= 0) return 0;
    switch (r ? r->kind : BT_ARGMAX_FIRST) {
    case BT_ARGMAX_TORCH: return argmax_torch(x, n);
    case BT_ARGMAX_TRITON: return argmax_triton(x, n, r->block);
    default: return argmax_first(x, n);
    }
}

/* ---- sampling ---- */

struct bt_sampler {
    bt_sampler_cfg cfg;
    uint64_t rng;      /* splitmix64 state */
    int cap;           /* entries in the scratch arrays */
    double *p;         /* (cap) probabilities of the candidates */
    int32_t *idx;      /* (cap) candidate ids, best first */
    bt_softmax_sums sums;   /* the last sampled row's (have_sums) */
    bool have_sums;
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1.0p-53; }

static int grow(bt_sampler *s, int n)
{
    if (n <= s->cap) return BT_OK;
    double *p = realloc(s->p, (size_t)n * sizeof *p);
    if (!p) return bt_error(BT_ENOMEM, "sampler: out of memory for %d entries", n);
    s->p = p;
    int32_t *idx = realloc(s->idx, (size_t)n * sizeof *idx);
    if (!idx) return bt_error(BT_ENOMEM, "sampler: out of memory for %d entries", n);
    s->idx = idx;
    s->cap = n;
    return BT_OK;
}

int bt_sampler_new(const bt_sampler_cfg *cfg, int n_vocab, bt_sampler **out)
{
    *out = NULL;
    if (n_vocab <= 0) return bt_error(BT_EINVAL, "sampler: vocabulary size %d", n_vocab);
    if (!(cfg->temperature >= 0) || !isfinite(cfg->temperature))
        return bt_error(BT_EINVAL, "sampler: temperature %g must be finite and >= 0", cfg->temperature);
    if (!(cfg->top_p >= 0 && cfg->top_p <= 1))
        return bt_error(BT_EINVAL, "sampler: top_p %g must be in (0, 1]", cfg->top_p);
    if (cfg->top_k < 0) return bt_error(BT_EINVAL, "sampler: top_k %d must be >= 0", cfg->top_k);
    if (cfg->rule.kind == BT_ARGMAX_TRITON && cfg->rule.block < 1)
        return bt_error(BT_EINVAL, "sampler: triton block size %d", cfg->rule.block);
    bt_sampler *s = calloc(1, sizeof *s);
    if (!s) return bt_error(BT_ENOMEM, "sampler: out of memory");
    s->cfg = *cfg;
    if (s->cfg.top_p == 0) s->cfg.top_p = 1; /* a zeroed config means "off" */
    s->rng = cfg->seed;
    int rc = grow(s, n_vocab);
    if (rc) { bt_sampler_free(s); return rc; }
    *out = s;
    return BT_OK;
}

void bt_sampler_free(bt_sampler *s)
{
    if (!s) return;
    free(s->p);
    free(s->idx);
    free(s);
}

/* Rows that softmax cannot handle: any NaN or +inf, or nothing above -inf
 * (-inf entries alone are fine: masked tokens, probability 0). Otherwise
 * *max is the maximum and *first the first index holding it, the greedy
 * "first" rule's answer, from one pass and a scan. */
static bool row_finite(const float *x, int n, float *max, int32_t *first)
{
    bool bad;
    float m = row_max(x, n, &bad);
    if (bad || !(m > -INFINITY)) return false;
    *first = first_equal(x, m);
    *max = x[*first];
    return true;
}

/* log softmax of x at id. The exponentials are f32 (libm expf's bits
 * through the kernels' bt_exp_sub_f32, 256 at a time: a double exp per
 * vocabulary entry cost a decode step more than recording its taps), summed
 * in double over four chains (bt_softmax_sums_f32); a -inf logit adds 0. */
static double logprob_of(const float *x, int n, float max, int32_t id, bt_softmax_sums *sm)
{
    /* the entropy's kernel: its z chains are these sums (an exp of 0 adds
     * nothing either way); the second chains are the entropy's, kept for
     * the row's summary */
    *sm = (bt_softmax_sums){ .max = max };
    bt_softmax_sums_f32(x, n, max, sm->z, sm->ez);
    if (id < 0 || id >= n) return NAN;
    return ((double)x[id] - max) - log((sm->z[0] + sm->z[1]) + (sm->z[2] + sm->z[3]));
}

/* Candidate order: higher logit first, lower id on ties, so top-k = 1 and a
 * tiny top-p pick the same id as greedy "first". */
static _Thread_local const float *cmp_row;
static int cmp_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float u = cmp_row[i], v = cmp_row[j];
    if (u != v) return u > v ? -1 : 1;
    return (i > j) - (i < j);
}

/* Sift-down on a min-heap of ids ordered by cmp_desc reversed (the root is
 * the worst candidate kept so far). */
static void heap_down(int32_t *h, int k, int at)
{
    for (;;) {
        int l = 2 * at + 1, r = l + 1, w = at;
        if (l < k && cmp_desc(&h[l], &h[w]) > 0) w = l;
        if (r < k && cmp_desc(&h[r], &h[w]) > 0) w = r;
        if (w == at) return;
        int32_t t = h[at]; h[at] = h[w]; h[w] = t;
        at = w;
    }
}

/* Fill s->idx with the candidate ids, best first; returns their count. */
static int candidates(bt_sampler *s, const float *x, int n)
{
    int k = s->cfg.top_k;
    bool sorted = s->cfg.top_p < 1.0f || (k > 0 && k < n);
    cmp_row = x;
    if (k > 0 && k < n) {
        /* keep the k best in a heap whose root is the worst of them */
        for (int i = 0; i < k; i++) s->idx[i] = i;
        for (int i = k / 2 - 1; i >= 0; i--) heap_down(s->idx, k, i);
        for (int i = k; i < n; i++) {
            int32_t c = i;
            if (cmp_desc(&c, &s->idx[0]) < 0) { s->idx[0] = c; heap_down(s->idx, k, 0); }
        }
        n = k;
    } else {
        for (int i = 0; i < n; i++) s->idx[i] = i;
    }
    if (sorted) qsort(s->idx, (size_t)n, sizeof *s->idx, cmp_desc);
    return n;
}

/* The weights the sampler draws from: s->p[0..m) over ids s->idx[0..m),
 * temperature applied, cut to top-k and to the top-p nucleus; their sum in
 * *sum. The row must be finite (row_finite) and s->p/idx grown to n. */
static int weights(bt_sampler *s, const float *logits, int n, float max, double *sum_out)
{
    int m = candidates(s, logits, n);
    double inv_t = 1.0 / s->cfg.temperature, sum = 0;
    float cmax = logits[s->idx[0]];
    if (m == n && s->cfg.top_p >= 1.0f) cmax = max; /* unsorted: idx[0] is not the best */
    for (int i = 0; i < m; i++) {
        s->p[i] = exp(((double)logits[s->idx[i]] - cmax) * inv_t);
        sum += s->p[i];
    }
    if (s->cfg.top_p < 1.0f) {
        /* nucleus: the shortest best-first prefix reaching top_p */
        double cum = 0, want = s->cfg.top_p * sum;
        int keep = m;
        for (int i = 0; i < m; i++) {
            cum += s->p[i];
            if (cum >= want) { keep = i + 1; break; }
        }
        m = keep;
        sum = cum;
    }
    *sum_out = sum;
    return m;
}

int32_t bt_sampler_sample(bt_sampler *s, const float *logits, int n, float *logprob)
{
    float max;
    int32_t first = 0;
    bool finite = n > 0 && row_finite(logits, n, &max, &first);
    int32_t id;
    if (finite && s->cfg.temperature == 0 && s->cfg.rule.kind == BT_ARGMAX_FIRST) {
        id = first;   /* the first rule on a finite row: row_finite found it */
    } else if (!finite || s->cfg.temperature == 0 || grow(s, n) != BT_OK) {
        /* greedy, or a row softmax cannot describe: decide as the engine we
         * imitate would, with its argmax */
        id = bt_argmax(&s->cfg.rule, logits, n);
    } else {
        double sum;
        int m = weights(s, logits, n, max, &sum);
        double r = rng_uniform(&s->rng) * sum, acc = 0;
        id = s->idx[m - 1];
        for (int i = 0; i < m; i++) {
            acc += s->p[i];
            if (r < acc) { id = s->idx[i]; break; }
        }
    }
    s->have_sums = logprob && finite;
    if (logprob) *logprob = finite ? (float)logprob_of(logits, n, max, id, &s->sums) : NAN;
    return id;
}

const bt_softmax_sums *bt_sampler_sums(const bt_sampler *s) { return s->have_sums ? &s->sums : NULL; }

/* ---- speculative decoding needs the distribution itself ---- */

bool bt_sampler_probs(bt_sampler *s, const float *logits, int n, float *probs)
{
    float max;
    int32_t first;
    if (n <= 0 || s->cfg.temperature == 0 || !row_finite(logits, n, &max, &first) || grow(s, n) != BT_OK) return false;
    double sum;
    int m = weights(s, logits, n, max, &sum);
    memset(probs, 0, (size_t)n * sizeof(float));
    for (int i = 0; i < m; i++) probs[s->idx[i]] = (float)(s->p[i] / sum);
    return true;
}

double bt_sampler_uniform(bt_sampler *s) { return rng_uniform(&s->rng); }

int32_t bt_sampler_draw(bt_sampler *s, const float *w, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i] > 0 ? w[i] : 0;
    if (!(sum > 0)) return -1;
    double r = rng_uniform(&s->rng) * sum, acc = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (!(w[i] > 0)) continue;
        acc += w[i];
        last = i;
        if (r < acc) return i;
    }
    return last;
}
