/* test_backend.c - every op of a backend against a reference on random
 * inputs, by normalized error (ggml's test-backend-ops shape).
 *
 *   test_backend          the CPU backend against plain scalar references
 *                         written here (double accumulation, the scalar
 *                         dequantizers), every weight type, odd shapes,
 *                         NaN/Inf inputs
 *   test_backend DEVICE   that backend (cuda, cuda:N) against the CPU
 *                         backend, and its one-line refusal of mxfp4
 *                         weights; exit 77 (SKIP) when it cannot run here
 *
 * Non-finite values must match class for class (NaN, +Inf, -Inf) at the same
 * indexes; finite values by NMSE = sum (got - want)^2 / sum want^2. Taps
 * (stats), mutations (inject), read/set, kernel names and the numerics ops
 * (num_round bit for bit on every backend) are checked too. */
#include "backend/backend_impl.h"
#include "kernels/cpu/numerics.h"
#include "kernels/cpu/kernels_impl.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f; }

static bt_backend *be;        /* under test */
static bt_backend *cpu;       /* reference backend (NULL: scalar references) */
static const char *dev = "cpu";

/* ---- helpers ---- */

static bt_buf *up(bt_backend *b, const float *h, size_t n)
{
    bt_buf *buf = NULL;
    CHECK_OK(b->iface->buf_alloc(b, BT_MAX(n, 1) * sizeof(float), &buf));
    if (buf && n) CHECK_OK(b->iface->set(b, buf, 0, h, n));
    return buf;
}

static float *down(bt_backend *b, bt_buf *buf, size_t off, size_t n)
{
    float *h = calloc(BT_MAX(n, 1), sizeof(float));
    CHECK_OK(b->iface->read(b, buf, off, n, h));
    return h;
}

static void fill(float *x, size_t n, float lo, float hi) { for (size_t i = 0; i < n; i++) x[i] = rndf(lo, hi); }

/* A few NaN / +Inf / -Inf in x (every `every`-th element, rotating). */
static void poison(float *x, size_t n, size_t every)
{
    static const float bad[3] = { NAN, INFINITY, -INFINITY };
    for (size_t i = every / 2, k = 0; i < n; i += every, k++) x[i] = bad[k % 3];
}

static int cls(float v) { return isnan(v) ? 1 : isinf(v) ? (v > 0 ? 2 : 3) : 0; }

/* Normalized error of got against want; non-finite classes must agree. */
static void expect_close(const char *what, const float *got, const double *want, size_t n, double tol)
{
    double num = 0, den = 0;
    size_t bad_cls = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        float w = (float)want[i];
        if (cls(got[i]) || cls(w) || !isfinite(want[i])) {
            int wc = isnan(want[i]) ? 1 : isinf(want[i]) ? (want[i] > 0 ? 2 : 3) : cls(w);
            if (cls(got[i]) != wc && !bad_cls++) first = i;
            continue;
        }
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    double nmse = den > 0 ? num / den : num;
    CHECK(bad_cls == 0, "%s on %s: %zu non-finite mismatches (first at %zu: got %g want %g)", what, dev, bad_cls,
          first, (double)got[first], want[first]);
    CHECK(nmse <= tol, "%s on %s: NMSE %.3g > %.3g", what, dev, nmse, tol);
}

/* Random finite weights of `type` (n elements), scales kept sane. */
static uint8_t *rand_weights(int type, int64_t n)
{
    const bt_dtype_info *ti = bt_dtype(type);
    size_t bytes = bt_dtype_row_size(type, n);
    uint8_t *w = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    if (type == BT_DT_F32) {
        for (int64_t i = 0; i < n; i++) { float v = rndf(-1, 1); memcpy(w + 4 * i, &v, 4); }
    } else if (type == BT_DT_F16) {
        for (int64_t i = 0; i < n; i++) { uint16_t h = bt_f32_to_f16(rndf(-1, 1)); memcpy(w + 2 * i, &h, 2); }
    } else if (type == BT_DT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = rndf(-1, 1); uint32_t u; memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16); memcpy(w + 2 * i, &h, 2);
        }
    } else {
        int off[2], k = bt_dtype_scale_offsets(type, off), e8 = bt_dtype_e8m0_offset(type);
        for (int64_t b = 0; b < n / ti->blck; b++) {
            for (int i = 0; i < k; i++) {
                uint16_t h = bt_f32_to_f16(rndf(0.002f, 0.05f) * (rnd() & 1 ? -1.0f : 1.0f));
                memcpy(w + b * ti->type_size + off[i], &h, 2);
            }
            if (e8 >= 0) w[b * ti->type_size + e8] = (uint8_t)(118 + rnd() % 6);   /* scales 2^-9 .. 2^-4 */
        }
    }
    return w;
}

/* The scalar dequantization of a whole weight (reference). */
static float *deq(int type, const uint8_t *w, int64_t rows, int64_t cols)
{
    const bt_kvariant *s = bt_kernels_variant("scalar");
    float *d = malloc((size_t)(rows * cols) * sizeof(float));
    size_t rb = bt_dtype_row_size(type, cols);
    for (int64_t r = 0; r < rows; r++) s->dequant[type](w + r * rb, d + r * cols, cols);
    return d;
}

/* ---- ops ---- */

static void test_matmul_get_rows(int type)
{
    const bt_dtype_info *ti = bt_dtype(type);
    static const int Ts[] = { 1, 3, 8 };
    static const int64_t rows_[] = { 1, 5, 37 };
    int64_t cols = ti->blck == 1 ? 67 : ti->blck * (ti->blck == 32 ? 3 : 2);
    char what[96];
    for (size_t ri = 0; ri < BT_ARRAY_SIZE(rows_); ri++)
        for (size_t ti_ = 0; ti_ < BT_ARRAY_SIZE(Ts); ti_++) {
            int64_t rows = rows_[ri];
            int T = Ts[ti_];
            uint8_t *W = rand_weights(type, rows * cols);
            size_t wbytes = bt_dtype_row_size(type, cols) * rows;
            float *x = malloc((size_t)(T * cols + 5) * sizeof(float));
            fill(x, (size_t)(T * cols + 5), -1, 1);
            if (T == 3) poison(x + 5 + cols, (size_t)cols, (size_t)cols / 2 + 1);   /* token 1 non-finite */
            double *want = calloc((size_t)(T * rows), sizeof(double));
            if (!cpu) {
                float *d = deq(type, W, rows, cols);
                for (int t = 0; t < T; t++)
                    for (int64_t r = 0; r < rows; r++) {
                        double acc = 0;
                        for (int64_t i = 0; i < cols; i++) acc += (double)d[r * cols + i] * x[5 + t * cols + i];
                        want[t * rows + r] = acc;
                    }
                free(d);
            } else {
                bt_buf *wb = NULL, *xb = up(cpu, x, (size_t)(T * cols + 5)), *ob = NULL;
                CHECK_OK(cpu->iface->buf_alloc(cpu, (size_t)(T * rows) * sizeof(float), &ob));
                CHECK_OK(cpu->iface->buf_upload(cpu, W, wbytes, &wb));
                CHECK_OK(cpu->iface->matmul(cpu, type, wb, rows, cols, xb, 5, T, ob));
                float *o = down(cpu, ob, 0, (size_t)(T * rows));
                for (int64_t i = 0; i < T * rows; i++) want[i] = o[i];
                free(o);
                cpu->iface->buf_free(cpu, wb); cpu->iface->buf_free(cpu, xb); cpu->iface->buf_free(cpu, ob);
            }
            bt_buf *wb = NULL, *ob = NULL, *xb = up(be, x, (size_t)(T * cols + 5));
            CHECK_OK(be->iface->buf_upload(be, W, wbytes, &wb));
            CHECK_OK(be->iface->buf_alloc(be, (size_t)(T * rows) * sizeof(float), &ob));
            if (wb && ob && xb) {
                CHECK_OK(be->iface->matmul(be, type, wb, rows, cols, xb, 5, T, ob));
                float *got = down(be, ob, 0, (size_t)(T * rows));
                snprintf(what, sizeof what, "matmul %s %lldx%lld T=%d", ti->name, (long long)rows, (long long)cols, T);
                expect_close(what, got, want, (size_t)(T * rows), 1e-9);
                free(got);
                /* get_rows: rows picked out of the same table */
                int32_t ids[3] = { (int32_t)(rows - 1), 0, (int32_t)(rows / 2) };
                int n = rows >= 3 ? 3 : 1;
                bt_buf *eb = NULL;
                CHECK_OK(be->iface->buf_alloc(be, (size_t)(n * cols) * sizeof(float), &eb));
                CHECK_OK(be->iface->get_rows(be, type, wb, cols, ids, n, eb));
                float *g = down(be, eb, 0, (size_t)(n * cols));
                float *d = deq(type, W, rows, cols);
                double *wd = malloc((size_t)(n * cols) * sizeof(double));
                for (int k = 0; k < n; k++)
                    for (int64_t i = 0; i < cols; i++) wd[k * cols + i] = d[ids[k] * cols + i];
                snprintf(what, sizeof what, "get_rows %s width %lld", ti->name, (long long)cols);
                expect_close(what, g, wd, (size_t)(n * cols), 0);   /* dequantization is exact */
                free(g); free(d); free(wd);
                be->iface->buf_free(be, eb);
            }
            be->iface->buf_free(be, wb); be->iface->buf_free(be, xb); be->iface->buf_free(be, ob);
            free(W); free(x); free(want);
        }
}

/* A weight type the device has no kernel for (mxfp4 on cuda: doc/cuda.md):
 * matmul and get_rows refuse it before enqueuing anything, with
 * BT_EUNSUPPORTED and one line naming the type, and the backend goes on
 * working. */
static void test_refused_type(int type)
{
    const bt_dtype_info *ti = bt_dtype(type);
    int64_t rows = 4, cols = ti->blck * 2;
    uint8_t *W = rand_weights(type, rows * cols);
    float x[64 * 2] = { 0 };
    bt_buf *wb = NULL, *ob = NULL, *xb = up(be, x, (size_t)cols);
    CHECK_OK(be->iface->buf_upload(be, W, bt_dtype_row_size(type, cols) * rows, &wb));
    CHECK_OK(be->iface->buf_alloc(be, (size_t)(rows * cols) * sizeof(float), &ob));
    if (wb && ob && xb) {
        int32_t ids[1] = { 1 };
        for (int op = 0; op < 2; op++) {
            int rc = op ? be->iface->get_rows(be, type, wb, cols, ids, 1, ob)
                        : be->iface->matmul(be, type, wb, rows, cols, xb, 0, 1, ob);
            const char *msg = bt_errmsg();
            CHECK(rc == BT_EUNSUPPORTED, "%s on %s: %s of an %s weight gave %d, want BT_EUNSUPPORTED", ti->name, dev,
                  op ? "get_rows" : "matmul", ti->name, rc);
            CHECK(strstr(msg, ti->name) && !strchr(msg, '\n'), "%s on %s: refusal is not one line naming the type: %s",
                  ti->name, dev, msg);
        }
        /* the stream is still usable */
        float *back = down(be, xb, 0, (size_t)cols);
        CHECK(back[0] == 0.0f, "%s on %s: reading after a refusal", ti->name, dev);
        free(back);
    }
    be->iface->buf_free(be, wb); be->iface->buf_free(be, xb); be->iface->buf_free(be, ob);
    free(W);
}

/* rmsnorm, swiglu, add, rope: elementwise-ish ops with the reference in
 * double on the same inputs (or the CPU backend's output). */
static void test_elementwise(void)
{
    static const int widths[] = { 7, 64, 576 };
    for (size_t wi = 0; wi < BT_ARRAY_SIZE(widths); wi++)
        for (int bad = 0; bad < 2; bad++) {
            int T = 3, W = widths[wi];
            size_t n = (size_t)T * W;
            float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *w = malloc(W * sizeof(float) + 12);
            fill(x, n, -3, 3); fill(y, n, -3, 3); fill(w, W + 3, 0.5f, 1.5f);
            if (bad) { poison(x, n, 29); poison(y + 1, n - 1, 31); }
            double *want = malloc(n * sizeof(double));
            char what[64];
            bt_backend *r = cpu ? cpu : be;
            /* rmsnorm (weights at an offset of 3) */
            if (!cpu) {
                for (int t = 0; t < T; t++) {
                    double ss = 0;
                    for (int i = 0; i < W; i++) ss += (double)x[t * W + i] * x[t * W + i];
                    double sc = (float)(1.0 / sqrt(ss / W + 1e-5f));
                    for (int i = 0; i < W; i++) want[t * W + i] = x[t * W + i] * sc * w[3 + i];
                }
            }
            bt_backend *runs[2] = { be, cpu };
            float *outs[2] = { NULL, NULL };
            for (int k = 0; k < (cpu ? 2 : 1); k++) {
                bt_backend *b = runs[k];
                bt_buf *xb = up(b, x, n), *wb = up(b, w, (size_t)W + 3), *ob = up(b, x, n);
                CHECK_OK(b->iface->rmsnorm(b, ob, xb, wb, 3, T, W, 1e-5f));
                outs[k] = down(b, ob, 0, n);
                b->iface->buf_free(b, xb); b->iface->buf_free(b, wb); b->iface->buf_free(b, ob);
            }
            if (cpu) for (size_t i = 0; i < n; i++) want[i] = outs[1][i];
            snprintf(what, sizeof what, "rmsnorm width %d%s", W, bad ? " non-finite" : "");
            expect_close(what, outs[0], want, n, 1e-12);
            free(outs[0]); free(outs[1]);
            /* swiglu */
            if (!cpu) for (size_t i = 0; i < n; i++) want[i] = (double)x[i] / (1.0 + exp(-(double)x[i])) * y[i];
            for (int k = 0; k < (cpu ? 2 : 1); k++) {
                bt_backend *b = runs[k];
                bt_buf *gb = up(b, x, n), *ub = up(b, y, n), *ob = up(b, x, n);
                CHECK_OK(b->iface->swiglu(b, ob, gb, ub, n));
                outs[k] = down(b, ob, 0, n);
                b->iface->buf_free(b, gb); b->iface->buf_free(b, ub); b->iface->buf_free(b, ob);
            }
            if (cpu) for (size_t i = 0; i < n; i++) want[i] = outs[1][i];
            snprintf(what, sizeof what, "swiglu n=%zu%s", n, bad ? " non-finite" : "");
            expect_close(what, outs[0], want, n, 1e-12);
            free(outs[0]); free(outs[1]);
            /* add */
            if (!cpu) for (size_t i = 0; i < n; i++) want[i] = (double)x[i] + y[i];
            for (int k = 0; k < (cpu ? 2 : 1); k++) {
                bt_backend *b = runs[k];
                bt_buf *xb = up(b, x, n), *yb = up(b, y, n);
                CHECK_OK(b->iface->add(b, xb, yb, n));
                outs[k] = down(b, xb, 0, n);
                b->iface->buf_free(b, xb); b->iface->buf_free(b, yb);
            }
            if (cpu) for (size_t i = 0; i < n; i++) want[i] = outs[1][i];
            snprintf(what, sizeof what, "add n=%zu%s", n, bad ? " non-finite" : "");
            expect_close(what, outs[0], want, n, 1e-12);
            free(outs[0]); free(outs[1]);
            (void)r;
            free(x); free(y); free(w); free(want);
        }
}

/* The ABI 2 ops (qwen2/qwen3): NEOX rope (pairs (i, i + hd/2)), a bias added
 * to every row, and per-head rmsnorm as rmsnorm over T*heads rows in place.
 * Reference in double; on a device also the CPU backend's output. */
static void test_arch_ops(int n_heads, int hd, int T, int pos0)
{
    int half = hd / 2, W = n_heads * hd, ctx = pos0 + T;
    size_t n = (size_t)T * W;
    float *x = malloc(n * sizeof(float)), *cs = malloc((size_t)ctx * half * sizeof(float));
    float *sn = malloc((size_t)ctx * half * sizeof(float)), *bias = malloc(((size_t)W + 5) * sizeof(float));
    double *want = malloc(n * sizeof(double));
    fill(x, n, -2, 2); fill(bias, (size_t)W + 5, -1, 1);
    for (int p = 0; p < ctx; p++)
        for (int i = 0; i < half; i++) {
            double a = p * pow(1e4, -2.0 * i / hd);
            cs[p * half + i] = (float)cos(a); sn[p * half + i] = (float)sin(a);
        }
    char what[96];
    bt_backend *runs[2] = { be, cpu };
    float *outs[2] = { NULL, NULL };
    /* rope_neox */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < half; i++) {
                size_t o = (size_t)t * W + (size_t)h * hd;
                double c = cs[(pos0 + t) * half + i], s_ = sn[(pos0 + t) * half + i], a = x[o + i], b = x[o + i + half];
                want[o + i] = a * c - b * s_;
                want[o + i + half] = a * s_ + b * c;
            }
    for (int k = 0; k < (cpu ? 2 : 1); k++) {
        bt_backend *b = runs[k];
        CHECK(b->iface->rope_neox != NULL, "%s has rope_neox", bt_backend_name(b));
        if (!b->iface->rope_neox) continue;
        bt_buf *xb = up(b, x, n), *cb = up(b, cs, (size_t)ctx * half), *sb = up(b, sn, (size_t)ctx * half);
        CHECK_OK(b->iface->rope_neox(b, xb, T, n_heads, hd, pos0, cb, sb));
        outs[k] = down(b, xb, 0, n);
        b->iface->buf_free(b, xb); b->iface->buf_free(b, cb); b->iface->buf_free(b, sb);
    }
    snprintf(what, sizeof what, "rope_neox (%d heads x %d, T=%d at %d)", n_heads, hd, T, pos0);
    if (outs[0]) expect_close(what, outs[0], want, n, 1e-12);
    if (cpu && outs[0] && outs[1]) {
        for (size_t i = 0; i < n; i++) want[i] = outs[1][i];
        snprintf(what, sizeof what, "rope_neox vs cpu (%d heads x %d)", n_heads, hd);
        expect_close(what, outs[0], want, n, 0);
    }
    free(outs[0]); free(outs[1]); outs[0] = outs[1] = NULL;
    /* add_row: bias at an offset of 5 */
    for (size_t i = 0; i < n; i++) want[i] = x[i] + bias[5 + i % (size_t)W];   /* f32 sum, as the op */
    for (int k = 0; k < (cpu ? 2 : 1); k++) {
        bt_backend *b = runs[k];
        CHECK(b->iface->add_row != NULL, "%s has add_row", bt_backend_name(b));
        if (!b->iface->add_row) continue;
        bt_buf *xb = up(b, x, n), *bb = up(b, bias, (size_t)W + 5);
        CHECK_OK(b->iface->add_row(b, xb, T, W, bb, 5));
        outs[k] = down(b, xb, 0, n);
        b->iface->buf_free(b, xb); b->iface->buf_free(b, bb);
    }
    snprintf(what, sizeof what, "add_row (T=%d, width %d)", T, W);
    if (outs[0]) expect_close(what, outs[0], want, n, 0);
    free(outs[0]); free(outs[1]); outs[0] = outs[1] = NULL;
    /* per-head rmsnorm in place: T*n_heads rows of hd, weights (hd) at 5 */
    for (int r = 0; r < T * n_heads; r++) {
        double ss = 0;
        for (int i = 0; i < hd; i++) ss += (double)x[(size_t)r * hd + i] * x[(size_t)r * hd + i];
        double sc = (float)(1.0 / sqrt(ss / hd + 1e-6f));
        for (int i = 0; i < hd; i++) want[(size_t)r * hd + i] = x[(size_t)r * hd + i] * sc * bias[5 + i];
    }
    for (int k = 0; k < (cpu ? 2 : 1); k++) {
        bt_backend *b = runs[k];
        bt_buf *xb = up(b, x, n), *bb = up(b, bias, (size_t)W + 5);
        CHECK_OK(b->iface->rmsnorm(b, xb, xb, bb, 5, T * n_heads, hd, 1e-6f));
        outs[k] = down(b, xb, 0, n);
        b->iface->buf_free(b, xb); b->iface->buf_free(b, bb);
    }
    snprintf(what, sizeof what, "per-head rmsnorm in place (%d x %d)", T * n_heads, hd);
    expect_close(what, outs[0], want, n, 1e-12);
    free(outs[0]); free(outs[1]);
    free(x); free(cs); free(sn); free(bias); free(want);
}

/* rope + kv_store + attention: a small grouped-query layer at odd sizes. */
static void test_attention(int n_heads, int n_kv, int hd, int T, int pos0, bool bad)
{
    int ctx = pos0 + T + 2, q_dim = n_heads * hd, kv_dim = n_kv * hd, half = hd / 2;
    size_t nq = (size_t)T * q_dim, nk = (size_t)T * kv_dim, nc = (size_t)ctx * kv_dim;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *kc = malloc(nc * 4), *vc = malloc(nc * 4);
    float *cs = malloc((size_t)ctx * half * 4), *sn = malloc((size_t)ctx * half * 4);
    fill(q, nq, -1, 1); fill(k, nk, -1, 1); fill(v, nk, -1, 1); fill(kc, nc, -1, 1); fill(vc, nc, -1, 1);
    for (int p = 0; p < ctx; p++)
        for (int i = 0; i < half; i++) {
            double a = p * pow(10000.0, -2.0 * i / hd);
            cs[p * half + i] = (float)cos(a); sn[p * half + i] = (float)sin(a);
        }
    if (bad) poison(vc + (size_t)1 * kv_dim, (size_t)kv_dim, (size_t)kv_dim);   /* one NaN in position 1's values */
    bt_backend *runs[2] = { be, cpu };
    float *oq[2] = { 0 }, *ok_[2] = { 0 }, *octx[2] = { 0 }, *okc[2] = { 0 };
    for (int r = 0; r < (cpu ? 2 : 1); r++) {
        bt_backend *b = runs[r];
        bt_buf *qb = up(b, q, nq), *kb = up(b, k, nk), *vb = up(b, v, nk), *kcb = up(b, kc, nc), *vcb = up(b, vc, nc);
        bt_buf *cb = up(b, cs, (size_t)ctx * half), *sb = up(b, sn, (size_t)ctx * half), *ob = up(b, q, nq);
        CHECK_OK(b->iface->rope(b, qb, T, n_heads, hd, pos0, cb, sb));
        CHECK_OK(b->iface->rope(b, kb, T, n_kv, hd, pos0, cb, sb));
        CHECK_OK(b->iface->kv_store(b, kcb, vcb, (size_t)pos0 * kv_dim, kb, vb, nk));
        bt_attn_args a = { .q = qb, .k_cache = kcb, .v_cache = vcb, .cache_off = 0, .out = ob, .T = T, .pos0 = pos0,
                           .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .ctx_len = ctx };
        CHECK_OK(b->iface->attention(b, &a));
        oq[r] = down(b, qb, 0, nq); ok_[r] = down(b, kcb, 0, nc); octx[r] = down(b, ob, 0, nq);
        okc[r] = down(b, vcb, 0, nc);
        bt_buf *all[] = { qb, kb, vb, kcb, vcb, cb, sb, ob };
        for (size_t i = 0; i < BT_ARRAY_SIZE(all); i++) b->iface->buf_free(b, all[i]);
    }
    double *wq = malloc(nq * sizeof(double)), *wkc = malloc(nc * sizeof(double)), *wctx = malloc(nq * sizeof(double));
    double *wvc = malloc(nc * sizeof(double));
    if (cpu) {
        for (size_t i = 0; i < nq; i++) { wq[i] = oq[1][i]; wctx[i] = octx[1][i]; }
        for (size_t i = 0; i < nc; i++) { wkc[i] = ok_[1][i]; wvc[i] = okc[1][i]; }
    } else {
        /* reference in double: rope, store, causal softmax attention */
        double *qr = wq, *kr = malloc(nk * sizeof(double));
        for (int t = 0; t < T; t++) {
            const float *c_ = cs + (size_t)(pos0 + t) * half, *s_ = sn + (size_t)(pos0 + t) * half;
            for (int h = 0; h < n_heads + n_kv; h++) {
                bool isq = h < n_heads;
                const float *src = isq ? q + (size_t)t * q_dim + h * hd : k + (size_t)t * kv_dim + (h - n_heads) * hd;
                double *dst = isq ? qr + (size_t)t * q_dim + h * hd : kr + (size_t)t * kv_dim + (h - n_heads) * hd;
                for (int i = 0; i < half; i++) {
                    double a = src[2 * i], b2 = src[2 * i + 1];
                    dst[2 * i] = a * c_[i] - b2 * s_[i];
                    dst[2 * i + 1] = a * s_[i] + b2 * c_[i];
                }
            }
        }
        for (size_t i = 0; i < nc; i++) { wkc[i] = kc[i]; wvc[i] = vc[i]; }
        for (size_t i = 0; i < nk; i++) { wkc[(size_t)pos0 * kv_dim + i] = (float)kr[i]; wvc[(size_t)pos0 * kv_dim + i] = v[i]; }
        int group = n_heads / n_kv;
        double *att = malloc((size_t)ctx * sizeof(double));
        for (int t = 0; t < T; t++)
            for (int h = 0; h < n_heads; h++) {
                int pos = pos0 + t, kvh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int p = 0; p <= pos; p++) {
                    double s = 0;
                    for (int i = 0; i < hd; i++) s += (float)qr[(size_t)t * q_dim + h * hd + i] * wkc[(size_t)p * kv_dim + kvh * hd + i];
                    att[p] = s / sqrt((double)hd);
                    if (att[p] > mx) mx = att[p];
                }
                for (int p = 0; p <= pos; p++) { att[p] = exp(att[p] - mx); sum += att[p]; }
                for (int i = 0; i < hd; i++) {
                    double acc = 0;
                    for (int p = 0; p <= pos; p++) acc += att[p] / sum * wvc[(size_t)p * kv_dim + kvh * hd + i];
                    wctx[(size_t)t * q_dim + h * hd + i] = acc;
                }
            }
        free(att); free(kr);
    }
    char what[96];
    snprintf(what, sizeof what, "rope q (%d heads x %d, T=%d at %d)", n_heads, hd, T, pos0);
    expect_close(what, oq[0], wq, nq, 1e-12);
    snprintf(what, sizeof what, "rope k + kv_store (%d kv heads)", n_kv);
    expect_close(what, ok_[0], wkc, nc, 1e-12);
    expect_close("kv_store values", okc[0], wvc, nc, 0);
    snprintf(what, sizeof what, "attention %d/%d heads x %d, T=%d at %d%s", n_heads, n_kv, hd, T, pos0, bad ? " NaN value" : "");
    expect_close(what, octx[0], wctx, nq, 1e-9);
    for (int r = 0; r < 2; r++) { free(oq[r]); free(ok_[r]); free(octx[r]); free(okc[r]); }
    free(q); free(k); free(v); free(kc); free(vc); free(cs); free(sn); free(wq); free(wkc); free(wctx); free(wvc);
}

/* The numerics ops (ABI 3) through bt_backend_num_* (the backend's own op,
 * else the generic fallback). num_round is held bit for bit to
 * bt_num_round on every backend (storage rounding has one right answer, a
 * device's included), and touches nothing outside its rows; num_matmul,
 * num_rmsnorm and num_attention to the host numerics code run here: bit for
 * bit on the CPU, by normalized error on a device (its own product under the
 * converted input). mm_acc=f16 without a num_matmul is refused naming it. */
static void test_numerics_ops(void)
{
    static const int fmts[] = { BT_NUM_F16, BT_NUM_BF16, BT_NUM_Q8_0, BT_NUM_Q8_1 };
    static const int widths[] = { 7, 64, 100 };
    for (size_t fi = 0; fi < BT_ARRAY_SIZE(fmts); fi++)
        for (size_t wi = 0; wi < BT_ARRAY_SIZE(widths); wi++) {
            int rows = 3, W = widths[wi];
            size_t n = (size_t)rows * W, all = n + 12;
            float *x = malloc(all * sizeof(float)), *h = malloc(all * sizeof(float));
            fill(x, all, -3, 3);
            x[9] = 7e4f; x[10] = -65519.0f; x[11] = 1e-7f; x[12] = 3e-39f;   /* f16 overflow, subnormals */
            poison(x + 8, n, 23);
            memcpy(h, x, all * sizeof(float));
            for (int r = 0; r < rows; r++) bt_num_round(fmts[fi], h + 8 + (size_t)r * W, (size_t)W);
            bt_buf *b = up(be, x, all);
            CHECK_OK(bt_backend_num_round(be, b, 8, (size_t)rows, (size_t)W, fmts[fi]));
            float *g = down(be, b, 0, all);
            CHECK(memcmp(g, h, all * sizeof(float)) == 0, "num_round fmt %d width %d on %s: different bits", fmts[fi], W, dev);
            free(g); free(x); free(h);
            be->iface->buf_free(be, b);
        }

    bt_numerics_ctx *hc = NULL;
    char what[96];
    /* num_matmul: f16 inputs on f32 weights, q8_0 activations on q4_0, f16 accumulation on f16 */
    static const struct { const char *spec; int type; } mms[] = {
        { "mm_in=f16", BT_DT_F32 }, { "act_q=q8_0", BT_DT_Q4_0 }, { "llama.cpp-cpu", BT_DT_Q4_1 },
        { "mm_acc=f16,mm_in=f16", BT_DT_F16 },
    };
    for (size_t k = 0; k < BT_ARRAY_SIZE(mms); k++) {
        bt_numerics n;
        CHECK_OK(bt_numerics_parse(mms[k].spec, &n));
        int64_t rows = 37, cols = 96;
        int T = 3;
        uint8_t *Wt = rand_weights(mms[k].type, rows * cols);
        size_t wbytes = bt_dtype_row_size(mms[k].type, cols) * rows;
        float *x = malloc((size_t)(T * cols + 5) * sizeof(float)), *ref = malloc((size_t)(T * rows) * sizeof(float));
        fill(x, (size_t)(T * cols + 5), -1, 1);
        CHECK_OK(bt_numerics_ctx_use(&hc, &n, NULL));
        bt_numerics_matmul(hc, NULL, mms[k].type, Wt, rows, cols, x + 5, T, ref);
        bt_buf *wb = NULL, *xb = up(be, x, (size_t)(T * cols + 5)), *ob = NULL;
        CHECK_OK(be->iface->buf_upload(be, Wt, wbytes, &wb));
        CHECK_OK(be->iface->buf_alloc(be, (size_t)(T * rows) * sizeof(float), &ob));
        int rc = bt_backend_num_matmul(be, &n, mms[k].type, wb, rows, cols, xb, 5, T, ob);
        snprintf(what, sizeof what, "num_matmul %s on %s weights", mms[k].spec, bt_dtype(mms[k].type)->name);
        if (rc == BT_EUNSUPPORTED && n.mm_acc == BT_NUM_F16 && !be->iface->num_matmul) {
            CHECK(strstr(bt_errmsg(), "num_matmul") != NULL, "%s: the refusal names num_matmul: %s", what, bt_errmsg());
        } else {
            CHECK_OK(rc);
            float *g = down(be, ob, 0, (size_t)(T * rows));
            double *want = malloc((size_t)(T * rows) * sizeof(double));
            for (int64_t i = 0; i < T * rows; i++) want[i] = ref[i];
            if (!cpu) CHECK(memcmp(g, ref, (size_t)(T * rows) * sizeof(float)) == 0, "%s on cpu: different bits", what);
            else expect_close(what, g, want, (size_t)(T * rows), 1e-9);
            free(g); free(want);
        }
        be->iface->buf_free(be, wb); be->iface->buf_free(be, xb); be->iface->buf_free(be, ob);
        free(Wt); free(x); free(ref);
    }

    /* num_rmsnorm (norm=ggml, weights at an offset of 3) and num_attention
     * (llama.cpp-cpu: q and the V sums in f16; -nofa: the mul_mat path) */
    bt_numerics n;
    CHECK_OK(bt_numerics_parse("llama.cpp-cpu", &n));
    CHECK_OK(bt_numerics_ctx_use(&hc, &n, NULL));
    {
        int T = 3, W = 64;
        size_t cnt = (size_t)T * W;
        float *x = malloc(cnt * sizeof(float)), *w = malloc((W + 3) * sizeof(float)), *ref = malloc(cnt * sizeof(float));
        fill(x, cnt, -3, 3); fill(w, (size_t)W + 3, 0.5f, 1.5f);
        bt_numerics_rmsnorm(hc, ref, x, w + 3, T, W, 1e-5f);
        bt_buf *xb = up(be, x, cnt), *wb = up(be, w, (size_t)W + 3), *ob = up(be, x, cnt);
        CHECK_OK(bt_backend_num_rmsnorm(be, &n, ob, xb, wb, 3, T, W, 1e-5f));
        float *g = down(be, ob, 0, cnt);
        double *want = malloc(cnt * sizeof(double));
        for (size_t i = 0; i < cnt; i++) want[i] = ref[i];
        if (!cpu) CHECK(memcmp(g, ref, cnt * sizeof(float)) == 0, "num_rmsnorm norm=ggml on cpu: different bits");
        else expect_close("num_rmsnorm norm=ggml", g, want, cnt, 1e-12);
        free(g); free(want); free(x); free(w); free(ref);
        be->iface->buf_free(be, xb); be->iface->buf_free(be, wb); be->iface->buf_free(be, ob);
    }
    for (int variant = 0; variant < 2; variant++) {
        CHECK_OK(bt_numerics_parse(variant ? "llama.cpp-cpu-nofa" : "llama.cpp-cpu", &n));
        CHECK_OK(bt_numerics_ctx_use(&hc, &n, NULL));
        int n_heads = 4, n_kv = 2, hd = 32, T = 5, pos0 = 6, ctx = pos0 + T + 2;
        int q_dim = n_heads * hd, kv_dim = n_kv * hd;
        size_t nq = (size_t)T * q_dim, nc = (size_t)ctx * kv_dim;
        float *q = malloc(nq * 4), *kc = malloc(nc * 4), *vc = malloc(nc * 4), *ref = malloc(nq * 4);
        fill(q, nq, -1, 1); fill(kc, nc, -1, 1); fill(vc, nc, -1, 1);
        bt_num_round(BT_NUM_F16, kc, nc);   /* an f16 cache, as kv=f16 leaves it */
        bt_num_round(BT_NUM_F16, vc, nc);
        bt_numerics_attention(hc, &(bt_numerics_attn){ .q = q, .kc = kc, .vc = vc, .ctx = ref, .T = T, .pos0 = pos0,
                                                       .n_heads = n_heads, .n_kv_heads = n_kv, .hd = hd });
        bt_buf *qb = up(be, q, nq), *kcb = up(be, kc, nc), *vcb = up(be, vc, nc), *ob = up(be, q, nq);
        bt_attn_args a = { .q = qb, .k_cache = kcb, .v_cache = vcb, .cache_off = 0, .out = ob, .T = T, .pos0 = pos0,
                           .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .ctx_len = ctx };
        CHECK_OK(bt_backend_num_attention(be, &n, &a));
        float *g = down(be, ob, 0, nq);
        double *want = malloc(nq * sizeof(double));
        for (size_t i = 0; i < nq; i++) want[i] = ref[i];
        snprintf(what, sizeof what, "num_attention %s", variant ? "llama.cpp-cpu-nofa" : "llama.cpp-cpu");
        if (!cpu) CHECK(memcmp(g, ref, nq * sizeof(float)) == 0, "%s on cpu: different bits", what);
        else expect_close(what, g, want, nq, 1e-9);
        free(g); free(want); free(q); free(kc); free(vc); free(ref);
        be->iface->buf_free(be, qb); be->iface->buf_free(be, kcb); be->iface->buf_free(be, vcb); be->iface->buf_free(be, ob);
    }
    bt_numerics_ctx_free(hc);
}

/* stats and inject against their host references; read/set round trips.
 * 4 x 70001 floats are five BT_STATS_SEG segments, which the CPU backend
 * sweeps on its two threads: bt_stats_compute's bits exactly there. */
static void test_observation(void)
{
    static const int widths[] = { 1, 9, 576, 70001 };
    for (size_t wi = 0; wi < BT_ARRAY_SIZE(widths); wi++)
        for (int bad = 0; bad < 3; bad++) {
            int rows = 4, W = widths[wi];
            size_t n = (size_t)rows * W;
            float *x = malloc((n + 8) * sizeof(float));
            fill(x, n + 8, -5, 5);
            if (bad == 1) poison(x + 8, n, 7);
            if (bad == 2) for (size_t i = 0; i < n + 8; i++) x[i] = NAN;
            bt_buf *b = up(be, x, n + 8);
            bt_tap_stats got, want;
            CHECK_OK(be->iface->stats(be, b, 8, rows, W, 17, &got));
            if (be->iface->sync) CHECK_OK(be->iface->sync(be));
            bt_stats_compute(x + 8, rows, W, 17, &want);
            CHECK(got.n == want.n && got.nan == want.nan && got.pinf == want.pinf && got.ninf == want.ninf &&
                  got.n_finite == want.n_finite, "stats counts on %s (width %d)", dev, W);
            CHECK(got.first_bad_index == want.first_bad_index && got.first_bad_pos == want.first_bad_pos,
                  "stats first bad on %s: %d/%d vs %d/%d", dev, got.first_bad_index, got.first_bad_pos,
                  want.first_bad_index, want.first_bad_pos);
            bool both_nan = isnan(want.min) && isnan(got.min);
            CHECK(both_nan || (got.min == want.min && got.max == want.max && got.absmax == want.absmax),
                  "stats min/max on %s", dev);
            CHECK(both_nan || (fabs(got.mean - want.mean) <= 1e-5 * (fabs(want.rms) + 1e-30) &&
                               fabs(got.rms - want.rms) <= 1e-5 * want.rms), "stats mean/rms on %s: %g/%g vs %g/%g",
                  dev, got.mean, got.rms, want.mean, want.rms);
            if (!strcmp(dev, "cpu"))
                CHECK(both_nan || (!memcmp(&got.mean, &want.mean, sizeof(float)) &&
                                   !memcmp(&got.rms, &want.rms, sizeof(float))),
                      "stats on cpu (width %d): mean/rms %a/%a, not bt_stats_compute's %a/%a", W, got.mean, got.rms,
                      want.mean, want.rms);
            /* inject: each kind on a rectangle; bits and counts as the host's */
            for (int kind = 0; kind < 3; kind++) {
                bt_mutation m = { .kind = kind, .value = kind == BT_MUT_SET ? NAN : kind == BT_MUT_SCALE ? -4.0f : 0.25f,
                                  .row0 = 1, .row1 = rows, .col0 = W > 2 ? 1 : 0, .col1 = W,
                                  .step = 3, .layer = 2, .op = 5, .pos0 = 17 };
                float *h = malloc((n + 8) * sizeof(float));
                memcpy(h, x, (n + 8) * sizeof(float));
                long want_n = bt_mutation_apply_host(h + 8, W, &m), got_n = -1;
                bt_buf *ib = up(be, x, n + 8);
                if (be->iface->inject) CHECK_OK(be->iface->inject(be, ib, 8, W, &m, &got_n));
                else got_n = want_n;
                float *g = down(be, ib, 0, n + 8);
                CHECK(got_n == want_n, "inject kind %d on %s: %ld changed, want %ld", kind, dev, got_n, want_n);
                CHECK(memcmp(g, h, (n + 8) * sizeof(float)) == 0, "inject kind %d on %s: different bits", kind, dev);
                free(g); free(h);
                be->iface->buf_free(be, ib);
            }
            float *back = down(be, b, 8, n);
            CHECK(memcmp(back, x + 8, n * sizeof(float)) == 0, "read after set on %s", dev);
            free(back);
            be->iface->buf_free(be, b);
            free(x);
        }
    char name[128];
    for (int k = 0; k < BT_KOP_COUNT; k++) {
        name[0] = 0;
        be->iface->kernel_name(be, k, BT_DT_Q4_1, name, sizeof name);
        CHECK(name[0] && strcmp(name, "?"), "kernel_name(%s) on %s", bt_kop_name(k), dev);
    }
    if (!cpu) {
        be->iface->kernel_name(be, BT_KOP_MATMUL, BT_DT_Q4_1, name, sizeof name);
        char want[64];
        snprintf(want, sizeof want, "matmul q4_1/%s", bt_kernels_simd());
        CHECK(!strcmp(name, want), "cpu kernel name '%s', want '%s'", name, want);
    }
}

static void test_registry(void)
{
    bt_backend *b = NULL;
    CHECK(bt_backend_device_valid("cpu") && bt_backend_device_valid("cuda") && bt_backend_device_valid("cuda:1"));
    CHECK(!bt_backend_device_valid("cuda:") && !bt_backend_device_valid("gpu") && !bt_backend_device_valid("cuda:-1") &&
          !bt_backend_device_valid("cuda:1x"));
    CHECK(bt_backend_open("tpu", 1, &b) == BT_EINVAL && !b);
    CHECK(strstr(bt_errmsg(), "tpu") != NULL);
    CHECK_OK(bt_backend_open(NULL, 2, &b));
    if (b) {
        CHECK(!strcmp(bt_backend_name(b), "cpu") && bt_backend_threads(b) == 2);
        bt_backend_free(b);
    }
    bt_backend_free(NULL);
    /* no plugin anywhere: one clear error, nothing loaded */
    setenv("BANGTRACE_PLUGIN_DIR", "/nonexistent-bangtrace-plugins", 1);
    b = NULL;
    int rc = bt_backend_open("cuda:0", 1, &b);
    if (rc == BT_EUNSUPPORTED) CHECK(!b && strstr(bt_errmsg(), "cuda") && !strchr(bt_errmsg(), '\n'));
    else if (b) bt_backend_free(b);   /* a plugin installed beside us or in pkglibdir */
    unsetenv("BANGTRACE_PLUGIN_DIR");
}

/* Batch invariance of attention: T query rows in one call (the CPU
 * backend's tiled prefill: 8 positions per tile, keys blocked by 64) give
 * each row the bits of a one-row call at its position (decode's path),
 * with and without a NaN in the values. */
static void test_attention_batch(int n_heads, int n_kv, int hd, int T, int pos0, bool bad)
{
    int ctx = pos0 + T, q_dim = n_heads * hd, kv_dim = n_kv * hd;
    size_t nq = (size_t)T * q_dim, nc = (size_t)ctx * kv_dim;
    float *q = malloc(nq * 4), *kc = malloc(nc * 4), *vc = malloc(nc * 4);
    fill(q, nq, -2, 2); fill(kc, nc, -2, 2); fill(vc, nc, -1, 1);
    if (bad) vc[(size_t)(pos0 / 2) * kv_dim + 1] = NAN;
    bt_buf *qb = up(be, q, nq), *kcb = up(be, kc, nc), *vcb = up(be, vc, nc), *ob = up(be, q, nq);
    bt_attn_args a = { .q = qb, .k_cache = kcb, .v_cache = vcb, .out = ob, .T = T, .pos0 = pos0,
                       .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .ctx_len = ctx };
    CHECK_OK(be->iface->attention(be, &a));
    float *batch = down(be, ob, 0, nq);
    int diff = 0;
    for (int t = 0; t < T; t++) {
        bt_buf *q1 = up(be, q + (size_t)t * q_dim, (size_t)q_dim), *o1 = up(be, q, (size_t)q_dim);
        bt_attn_args a1 = a;
        a1.q = q1; a1.out = o1; a1.T = 1; a1.pos0 = pos0 + t;
        CHECK_OK(be->iface->attention(be, &a1));
        float *one = down(be, o1, 0, (size_t)q_dim);
        if (memcmp(one, batch + (size_t)t * q_dim, (size_t)q_dim * sizeof(float))) diff++;
        free(one);
        be->iface->buf_free(be, q1); be->iface->buf_free(be, o1);
    }
    checks++;
    if (diff) {
        failures++;
        printf("FAIL: attention heads %d/%d hd %d T %d at %d%s: %d rows differ from one-row calls\n", n_heads, n_kv,
               hd, T, pos0, bad ? " (NaN value)" : "", diff);
    }
    bt_buf *all[] = { qb, kcb, vcb, ob };
    for (size_t i = 0; i < BT_ARRAY_SIZE(all); i++) be->iface->buf_free(be, all[i]);
    free(batch); free(q); free(kc); free(vc);
}

/* Two statistics equal bit for bit (the record's padding aside). */
static bool same_stats(const bt_tap_stats *a, const bt_tap_stats *b)
{
    return a->n == b->n && a->nan == b->nan && a->pinf == b->pinf && a->ninf == b->ninf && a->n_finite == b->n_finite &&
           !memcmp(&a->min, &b->min, 5 * sizeof(float)) && a->first_bad_index == b->first_bad_index &&
           a->first_bad_pos == b->first_bad_pos;
}

/* matmul_stats: matmul's bits and, of its output, the bits stats gives: a
 * decode of whole chunks with band boundaries inside a chunk (rows 320 on
 * three threads), on one (576), bands with no whole chunk (128), one small
 * enough for a single thread, a row count that is not whole chunks, a
 * prefill, and a weight row of NaN. */
static void test_matmul_stats(int type, int64_t rows, int T, bool bad)
{
    if (!be->iface->matmul_stats) return;
    const bt_dtype_info *ti = bt_dtype(type);
    int64_t cols = ti->blck == 1 ? 96 : ti->blck * 3;
    uint8_t *W = rand_weights(type, rows * cols);
    size_t wbytes = bt_dtype_row_size(type, cols) * rows;
    if (bad && type == BT_DT_F32) for (int64_t i = 0; i < cols; i++) ((float *)W)[(rows / 3) * cols + i] = NAN;
    float *x = malloc((size_t)(T * cols + 3) * sizeof(float));
    fill(x, (size_t)(T * cols + 3), -1, 1);
    bt_buf *wb = NULL, *xb = up(be, x, (size_t)(T * cols + 3)), *o1 = NULL, *o2 = NULL;
    CHECK_OK(be->iface->buf_upload(be, W, wbytes, &wb));
    CHECK_OK(be->iface->buf_alloc(be, (size_t)(T * rows) * sizeof(float), &o1));
    CHECK_OK(be->iface->buf_alloc(be, (size_t)(T * rows) * sizeof(float), &o2));
    bt_tap_stats want, got;
    memset(&got, 0x5a, sizeof got);
    CHECK_OK(be->iface->matmul(be, type, wb, rows, cols, xb, 3, T, o1));
    CHECK_OK(be->iface->stats(be, o1, 0, T, (int)rows, 17, &want));
    CHECK_OK(be->iface->matmul_stats(be, type, wb, rows, cols, xb, 3, T, o2, 17, &got));
    if (be->iface->sync) CHECK_OK(be->iface->sync(be));
    float *a = down(be, o1, 0, (size_t)(T * rows)), *b = down(be, o2, 0, (size_t)(T * rows));
    CHECK(!memcmp(a, b, (size_t)(T * rows) * sizeof(float)), "%s matmul_stats %s %lldx%lld T=%d: product differs from matmul's",
          dev, ti->name, (long long)rows, (long long)cols, T);
    CHECK(same_stats(&want, &got), "%s matmul_stats %s %lldx%lld T=%d%s: statistics differ from stats' (mean %.9g/%.9g, "
          "nan %lld/%lld)", dev, ti->name, (long long)rows, (long long)cols, T, bad ? " with a NaN row" : "", want.mean,
          got.mean, (long long)want.nan, (long long)got.nan);
    if (bad) CHECK(got.nan >= 1 && got.first_bad_pos == 17, "%s matmul_stats: the NaN row is not counted", dev);
    be->iface->buf_free(be, wb); be->iface->buf_free(be, xb); be->iface->buf_free(be, o1); be->iface->buf_free(be, o2);
    free(W); free(x); free(a); free(b);
}

/* gdn_recur_stats: the delta rule's bits and, of the state it leaves,
 * the bits stats gives, with states of fewer stats segments than threads,
 * heads that do not fill segments, segments of whole heads (on the CPU
 * each swept by the thread that ran its heads) and a state holding a NaN
 * (each backend that has the hook). */
static void test_gdn_stats(int T, int nk, int nv, int dk, int dv, bool grouped, bool bad)
{
    if (!be->iface->gdn_recur_stats) return;
    size_t nq = (size_t)T * nk * dk, no = (size_t)T * nv * dv, ng = (size_t)T * nv, ns = (size_t)nv * dk * dv + 64;
    float *q = malloc(nq * sizeof(float)), *k = malloc(nq * sizeof(float)), *v = malloc(no * sizeof(float));
    float *g = malloc(ng * sizeof(float)), *beta = malloc(ng * sizeof(float)), *st = malloc(ns * sizeof(float));
    fill(q, nq, -1, 1); fill(k, nq, -0.3f, 0.3f); fill(v, no, -2, 2);
    fill(g, ng, -0.5f, 0); fill(beta, ng, 0, 1); fill(st, ns, -1, 1);
    if (bad) st[64 + (size_t)(nv / 2) * dk * dv + 5] = NAN;
    bt_buf *bq = up(be, q, nq), *bk = up(be, k, nq), *bv = up(be, v, no), *bg = up(be, g, ng), *bb = up(be, beta, ng);
    bt_buf *s1 = up(be, st, ns), *s2 = up(be, st, ns), *o1 = up(be, v, no), *o2 = up(be, v, no);
    bt_tap_stats want, got;
    memset(&got, 0x5a, sizeof got);
    CHECK_OK(be->iface->gdn_recur(be, o1, bq, bk, bv, bg, bb, s1, 64, T, nk, nv, dk, dv, grouped));
    CHECK_OK(be->iface->stats(be, s1, 64, nv * dk, dv, 0, &want));
    CHECK_OK(be->iface->gdn_recur_stats(be, o2, bq, bk, bv, bg, bb, s2, 64, T, nk, nv, dk, dv, grouped, &got));
    if (be->iface->sync) CHECK_OK(be->iface->sync(be));
    float *a = down(be, s1, 0, ns), *b = down(be, s2, 0, ns), *oa = down(be, o1, 0, no), *ob = down(be, o2, 0, no);
    CHECK(!memcmp(a, b, ns * sizeof(float)) && !memcmp(oa, ob, no * sizeof(float)),
          "%s gdn_recur_stats T %d heads %d/%d of %dx%d: state or output differs from gdn_recur's", dev, T, nk, nv, dk, dv);
    CHECK(same_stats(&want, &got),
          "%s gdn_recur_stats T %d heads %d/%d of %dx%d%s: statistics differ from stats' (mean %.9g/%.9g, rms %.9g/%.9g, "
          "nan %lld/%lld)", dev, T, nk, nv, dk, dv, bad ? " with a NaN" : "", want.mean, got.mean, want.rms, got.rms,
          (long long)want.nan, (long long)got.nan);
    if (bad) CHECK(got.nan >= 1 && got.first_bad_pos >= 0, "%s gdn_recur_stats: the planted NaN is not counted", dev);
    bt_buf *bufs[] = { bq, bk, bv, bg, bb, s1, s2, o1, o2 };
    for (size_t i = 0; i < BT_ARRAY_SIZE(bufs); i++) be->iface->buf_free(be, bufs[i]);
    free(q); free(k); free(v); free(g); free(beta); free(st); free(a); free(b); free(oa); free(ob);
}

int main(int argc, char **argv)
{
    bt_kernels_init();
    if (argc > 1 && strcmp(argv[1], "cpu")) {
        dev = argv[1];
        int rc = bt_backend_open(dev, 2, &be);
        if (rc) {
            printf("%s cannot run here: %s\n", dev, bt_errmsg());
            return 77;
        }
        CHECK_OK(bt_backend_cpu_new(2, &cpu));
    } else {
        test_registry();
        CHECK_OK(bt_backend_cpu_new(3, &be));
    }
    if (!be) return 1;
    for (int t = 0; t < BT_DT_COUNT; t++) {
        if (!bt_dtype(t)->name || !bt_dtype(t)->compute) continue;
        /* a device has no mxfp4 kernel: it must refuse the type, by name */
        if (cpu && t == BT_DT_MXFP4) test_refused_type(t);
        else test_matmul_get_rows(t);
    }
    test_elementwise();
    test_arch_ops(3, 6, 1, 0);
    test_arch_ops(4, 64, 5, 7);
    test_attention(3, 1, 6, 1, 0, false);
    test_attention(3, 1, 6, 4, 3, false);
    test_attention(4, 2, 64, 5, 2, false);
    test_attention(9, 3, 64, 1, 11, true);
    test_attention(2, 2, 8, 3, 0, true);
    test_attention(9, 3, 64, 20, 100, false);   /* several tiles and key blocks */
    if (!cpu) {   /* the CPU backend's contract; a device backend is held to the reference only */
        test_attention_batch(9, 3, 64, 19, 130, false);
        test_attention_batch(9, 3, 64, 19, 130, true);
        test_attention_batch(4, 1, 80, 9, 63, false);
        test_attention_batch(8, 8, 32, 17, 0, false);
        test_attention_batch(14, 2, 128, 11, 200, false);
    }
    test_observation();
    test_matmul_stats(BT_DT_F32, 320, 1, false);
    test_matmul_stats(BT_DT_Q4_0, 576, 1, false);
    test_matmul_stats(BT_DT_Q8_0, 1536, 1, false);
    test_matmul_stats(BT_DT_F32, 64, 1, false);       /* one thread */
    test_matmul_stats(BT_DT_F32, 128, 1, false);      /* bands smaller than a chunk */
    test_matmul_stats(BT_DT_Q4_K, 100, 1, false);     /* not whole chunks */
    test_matmul_stats(BT_DT_F32, 320, 3, false);      /* a prefill */
    test_matmul_stats(BT_DT_F32, 320, 1, true);
    test_gdn_stats(1, 2, 4, 16, 16, false, false);
    test_gdn_stats(3, 2, 6, 16, 24, true, false);
    test_gdn_stats(1, 4, 8, 128, 128, false, false);    /* 2 segments of BT_STATS_SEG */
    test_gdn_stats(2, 2, 8, 128, 96, true, true);
    test_gdn_stats(1, 1, 3, 6, 10, false, false);       /* heads that are not whole chunks */
    test_gdn_stats(1, 4, 16, 128, 128, true, false);    /* segments of 4 heads, one per work item */
    test_gdn_stats(2, 4, 16, 128, 128, false, true);
    test_gdn_stats(3, 8, 48, 64, 64, false, false);     /* segments of 16 heads */
    test_numerics_ops();
    bt_backend_free(be);
    bt_backend_free(cpu);
    printf("%s: %d checks, %d failures\n", dev, checks, failures);
    return failures ? 1 : 0;
}
