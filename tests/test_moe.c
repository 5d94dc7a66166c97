/* test_moe.c - mixture-of-experts routing (src/engine/moe.c) against values
 * worked out by hand with llama.cpp's conventions: softmax, the k largest
 * with ties to the lower expert index, renormalisation, the weight scale, and a NaN router still naming k valid
 * experts. Also the backend's scatter_add (the experts' weighted sum). */
#include "engine/moe.h"
#include "backend/backend_impl.h"
#include "check.h"

#include <math.h>
#include <stdio.h>

static void route(const float *logits, int n, int k, bool norm, float scale, int *ex, float *w)
{
    float probs[64];
    bt_moe_route(logits, n, k, norm, scale, probs, ex, w);
}

int main(void)
{
    int ex[8];
    float w[8];

    /* plain top-2 of 4, renormalised: probabilities of logits 0, ln 3, ln 2, 0
     * are 1/7, 3/7, 2/7, 1/7; top-2 experts 1 then 2; weights 3/5, 2/5 */
    float l1[4] = { 0.0f, logf(3.0f), logf(2.0f), 0.0f };
    route(l1, 4, 2, true, 1.0f, ex, w);
    CHECK(ex[0] == 1 && ex[1] == 2, "experts %d %d", ex[0], ex[1]);
    CHECK(fabsf(w[0] - 0.6f) < 1e-6f && fabsf(w[1] - 0.4f) < 1e-6f, "weights %g %g", w[0], w[1]);

    /* without renormalisation the weights are the probabilities */
    route(l1, 4, 2, false, 1.0f, ex, w);
    CHECK(fabsf(w[0] - 3.0f / 7) < 1e-6f && fabsf(w[1] - 2.0f / 7) < 1e-6f, "weights %g %g", w[0], w[1]);

    /* ties go to the lower expert index, in every slot */
    float l2[6] = { 1.0f, 2.0f, 2.0f, 0.5f, 2.0f, 1.0f };
    route(l2, 6, 3, true, 1.0f, ex, w);
    CHECK(ex[0] == 1 && ex[1] == 2 && ex[2] == 4, "tied experts %d %d %d", ex[0], ex[1], ex[2]);
    route(l2, 6, 4, true, 1.0f, ex, w);
    CHECK(ex[3] == 0, "4th of a tie between 0 and 5 is 0, got %d", ex[3]);
    float l3[5] = { 0, 0, 0, 0, 0 };
    route(l3, 5, 2, true, 1.0f, ex, w);
    CHECK(ex[0] == 0 && ex[1] == 1 && w[0] == 0.5f && w[1] == 0.5f, "all equal: %d %d %g %g", ex[0], ex[1], w[0], w[1]);

    /* a dominant expert: near-one weight; one expert of two: weight 1.
     * (The clamp at 2^-14 can only act when the k best probabilities sum
     * below it, i.e. with over 16384 experts: not exercised here.) */
    float l4[3] = { 0.0f, -30.0f, -31.0f };
    route(l4, 3, 2, true, 1.0f, ex, w);
    CHECK(ex[0] == 0 && ex[1] == 1 && w[0] > 0.99f, "experts %d %d, weight %g", ex[0], ex[1], w[0]);
    route(l4 + 1, 2, 1, true, 1.0f, ex, w);
    CHECK(ex[0] == 0 && fabsf(w[0] - 1.0f) < 1e-6f, "single expert %d %g", ex[0], w[0]);

    /* scale multiplies after renormalisation */
    route(l1, 4, 2, true, 2.5f, ex, w);
    CHECK(fabsf(w[0] - 1.5f) < 1e-6f && fabsf(w[1] - 1.0f) < 1e-6f, "scaled weights %g %g", w[0], w[1]);

    /* k = n: every expert, best first */
    route(l1, 4, 4, true, 1.0f, ex, w);
    CHECK(ex[0] == 1 && ex[1] == 2 && ex[2] == 0 && ex[3] == 3, "full order %d %d %d %d", ex[0], ex[1], ex[2], ex[3]);
    CHECK(fabsf(w[0] + w[1] + w[2] + w[3] - 1.0f) < 1e-6f, "weights sum to 1");

    /* a NaN router: the experts are still valid indexes, the weights NaN */
    float l5[4] = { 0.0f, NAN, 1.0f, 0.0f };
    route(l5, 4, 2, true, 1.0f, ex, w);
    CHECK(ex[0] >= 0 && ex[0] < 4 && ex[1] >= 0 && ex[1] < 4 && ex[0] != ex[1], "NaN router: %d %d", ex[0], ex[1]);
    CHECK(isnan(w[0]) || isnan(w[1]), "a NaN router gives NaN weights (%g %g)", w[0], w[1]);

    /* scatter_add on the CPU backend: dst[rows[i]] += w[i] * src[i] */
    bt_backend *be = NULL;
    CHECK_OK(bt_backend_cpu_new(1, &be));
    if (be) {
        const struct bt_backend_i *bi = be->iface;
        bt_buf *dst = NULL, *src = NULL;
        CHECK_OK(bi->buf_alloc(be, 3 * 2 * sizeof(float), &dst));
        CHECK_OK(bi->buf_alloc(be, 2 * 2 * sizeof(float), &src));
        float s[4] = { 1, 2, 3, 4 }, d[6] = { 10, 10, 10, 10, 10, 10 }, got[6];
        CHECK_OK(bi->set(be, src, 0, s, 4));
        CHECK_OK(bi->set(be, dst, 0, d, 6));
        int32_t rows[2] = { 2, 0 };
        float ww[2] = { 0.5f, -1.0f };
        CHECK(bi->scatter_add != NULL, "the CPU backend has scatter_add");
        if (bi->scatter_add) CHECK_OK(bi->scatter_add(be, dst, src, rows, ww, 2, 2));
        CHECK_OK(bi->read(be, dst, 0, 6, got));
        CHECK(got[0] == 7 && got[1] == 6 && got[2] == 10 && got[3] == 10 && got[4] == 10.5f && got[5] == 11,
              "scatter_add: %g %g %g %g %g %g", got[0], got[1], got[2], got[3], got[4], got[5]);
        bi->buf_free(be, dst);
        bi->buf_free(be, src);
        bt_backend_free(be);
    }
    printf("test_moe: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
