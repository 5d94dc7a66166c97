/* gptoss.c - YaRN rope tables (see gptoss.h). */
#include "engine/gptoss.h"

#include <math.h>

/* The rotary dimension at which a wavelength spans n_rot turns of the
 * original context (ggml's yarn correction dim). */
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void bt_gptoss_rope_table(const bt_config *c, int ctx_len, float *cos_, float *sin_)
{
    int n_dims = c->rope_dim, half = c->head_dim / 2;
    float base = c->rope_base, fs = c->rope_freq_scale, factor = 1.0f / fs;
    const float beta_fast = 32.0f, beta_slow = 1.0f, ext = 1.0f;
    /* rounded outwards (llama.cpp), or as computed (truncate: false) */
    float lo = corr_dim(n_dims, c->yarn_orig_ctx, beta_fast, base);
    float hi = corr_dim(n_dims, c->yarn_orig_ctx, beta_slow, base);
    if (c->yarn_truncate) { lo = floorf(lo); hi = ceilf(hi); }
    lo = lo > 0 ? lo : 0;
    hi = hi < n_dims - 1 ? hi : (float)(n_dims - 1);
    /* llama_context's yarn_attn_factor, then rope_yarn's mscale */
    float attn = (0.1f * logf(factor) + 1.0f) * (1.0f / (1.0f + 0.1f * logf(factor))) * c->yarn_attn_factor;
    float mscale = attn * (1.0f + 0.1f * logf(1.0f / fs));
    for (int i = 0; i < half; i++) {
        float y = (i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
        float ramp = (1 - (y < 0 ? 0 : y > 1 ? 1 : y)) * ext;
        double theta_i = pow((double)base, -2.0 * i / n_dims);
        for (int p = 0; p < ctx_len; p++) {
            double extrap = p * theta_i, interp = extrap * fs;
            double a = interp * (1 - ramp) + extrap * ramp;
            cos_[(size_t)p * half + i] = (float)cos(a) * mscale;
            sin_[(size_t)p * half + i] = (float)sin(a) * mscale;
        }
    }
}
