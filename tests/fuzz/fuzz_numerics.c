/* fuzz_numerics.c - the `--numerics SPEC` profile string, then the profile
 * applied to the rest of the input.
 *
 * Input: SPEC, a NUL byte, then raw f32 values (the activations). A spec
 * that does not parse must give a one-line message; one that parses must
 * format to a canonical spelling whose parts parse back to the same
 * profile, and the exact profile (and only it) formats as "f32". A parsed
 * profile then runs its engine hooks on the values: storing an op's output
 * (twice: storing what is already stored changes no finite value), the KV
 * rows, the rounding of every format, rmsnorm when the profile changes it,
 * the rope tables, and attention over a tiny cache built from the values. */
#include "fuzz.h"
#include "kernels/cpu/numerics.h"
#include "base/util.h"

#include <math.h>

static void check_same(const bt_numerics *a, const bt_numerics *b)
{
    FUZZ_CHECK(a->act == b->act && a->mm_in == b->mm_in && a->mm_acc == b->mm_acc && a->kv == b->kv &&
               a->act_q == b->act_q && a->attn == b->attn && a->softmax == b->softmax && a->norm == b->norm &&
               a->rope == b->rope);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_log_level = 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    char *spec = fuzz_strndup(data, slen);
    bt_numerics n;
    if (bt_numerics_parse(spec, &n) != BT_OK) {
        const char *m = bt_errmsg();
        FUZZ_CHECK(m[0] && !strchr(m, '\n'));
        free(spec);
        return 0;
    }
    free(spec);

    /* canonical spelling: "f32", or "[PRESET: ]part=v,..." whose parts parse back */
    char buf[512];
    bt_numerics_format(&n, buf, sizeof buf);
    FUZZ_CHECK(!strcmp(buf, "f32") == bt_numerics_is_exact(&n));
    const char *parts = strstr(buf, ": ");
    bt_numerics back;
    FUZZ_CHECK(bt_numerics_parse(parts ? parts + 2 : buf, &back) == BT_OK);
    check_same(&n, &back);

    /* the values: 32..256 of them (a multiple of 32, zero-padded) */
    const uint8_t *vals = nul ? nul + 1 : data + size;
    size_t nv = (size_t)(data + size - vals) / 4;
    if (nv > 256) nv = 256;
    size_t n32 = nv < 32 ? 32 : (nv + 31) / 32 * 32;
    float *x = calloc(n32, sizeof(float)), *y = calloc(n32, sizeof(float)), *z = calloc(n32, sizeof(float));
    if (!x || !y || !z) abort();
    if (nv) memcpy(x, vals, nv * 4);

    bt_numerics_ctx *c = NULL;
    FUZZ_CHECK(bt_numerics_ctx_new(&n, NULL, &c) == BT_OK);
    FUZZ_CHECK(!c == bt_numerics_is_exact(&n));
    if (c) {
        memcpy(y, x, n32 * 4);
        bt_numerics_store(c, 0, y, n32);
        memcpy(z, y, n32 * 4);
        bt_numerics_store(c, 0, z, n32);
        for (size_t i = 0; i < n32; i++)
            if (isfinite(y[i])) FUZZ_CHECK(!memcmp(&y[i], &z[i], 4));
        memcpy(y, x, n32 * 4);
        bt_numerics_kv(c, y, (int)(n32 / 32), 32);
        if (bt_numerics_norm_custom(c)) {
            float w[32];
            for (int i = 0; i < 32; i++) w[i] = 1.0f;
            bt_numerics_rmsnorm(c, y, x, w, (int)(n32 / 32), 32, 1e-5f);
        }
        if (bt_numerics_attn_custom(c)) {
            /* 2 heads sharing 1 KV head of 8 values: T = 1 query at pos0, a cache of pos0 + 1 rows */
            int hd = 8, pos0 = (int)(n32 / 8) - 2;
            if (pos0 < 0) pos0 = 0;
            float *kc = calloc((size_t)(pos0 + 1) * hd, sizeof(float)), *vc = calloc((size_t)(pos0 + 1) * hd, sizeof(float));
            float q[16], ctx[16];
            if (!kc || !vc) abort();
            for (int i = 0; i < (pos0 + 1) * hd; i++) { kc[i] = x[(size_t)i % n32]; vc[i] = x[(size_t)(i * 7 + 3) % n32]; }
            for (int i = 0; i < 16; i++) q[i] = x[(size_t)(i * 5 + 1) % n32];
            bt_numerics_attn a = { .q = q, .kc = kc, .vc = vc, .ctx = ctx, .T = 1, .pos0 = pos0, .n_heads = 2,
                                   .n_kv_heads = 1, .hd = hd };
            bt_numerics_attention(c, &a);
            free(kc);
            free(vc);
        }
        bt_numerics_ctx_free(c);
    }
    static const int fmts[] = { BT_NUM_F32, BT_NUM_F16, BT_NUM_BF16, BT_NUM_Q8_0, BT_NUM_Q8_1 };
    for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        memcpy(y, x, n32 * 4);
        bt_num_round(fmts[f], y, n32);
    }
    /* rope tables: head_dim and base from the first values, kept sane */
    int head_dim = 2 * (1 + (int)(nv ? (((const uint8_t *)x)[0] % 8) : 0));
    float base = isfinite(x[1]) && x[1] > 1.0f && x[1] < 1e7f ? x[1] : 10000.0f;
    float ff[8], cs[4 * 8], sn[4 * 8];
    for (int i = 0; i < 8; i++) ff[i] = isfinite(x[2 + i]) && x[2 + i] > 1e-3f && x[2 + i] < 1e3f ? x[2 + i] : 1.0f;
    bt_numerics_rope_table(&n, base, head_dim, 1.0f, (nv & 1) ? ff : NULL, 4, cs, sn);
    free(x);
    free(y);
    free(z);
    return 0;
}
