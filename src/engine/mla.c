/* mla.c - multi-head latent attention (see mla.h for the conventions). */
#include "engine/mla.h"
#include "kernels/cpu/kernels.h"

#include <math.h>

void bt_mla_w_init(const bt_config *c, const float *k, const float *v, bt_mla_w *w)
{
    size_t kvl = (size_t)c->kv_lora_rank, nope = (size_t)(c->head_dim - c->rope_dim), vd = (size_t)c->mla_v_dim;
    w->kq = w->vq = NULL;
    w->k = k;
    w->v = v;
    if (c->mla_split) {   /* attn_k_b: (n_heads, kv_lora, nope); attn_v_b: (n_heads, v, kv_lora) */
        w->kh = kvl * nope; w->kr = nope; w->kd = 1;
        w->vh = vd * kvl; w->vj = kvl; w->vr = 1;
    } else {              /* attn_kv_b: per head nope key rows then v value rows of kv_lora */
        w->kh = (nope + vd) * kvl; w->kr = 1; w->kd = kvl;
        w->v = v + nope * kvl;
        w->vh = (nope + vd) * kvl; w->vj = kvl; w->vr = 1;
    }
}

/* ggml's correction dims of YaRN (f32, as ggml computes them) */
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void bt_mla_rope_table(const bt_config *c, int ctx_len, float *cos_, float *sin_)
{
    int nr = c->rope_dim, half = nr / 2;
    float fs = c->rope_freq_scale, ext = c->yarn_ext_factor, ms = c->yarn_attn_factor > 0 ? c->yarn_attn_factor : 1.0f;
    float lo = floorf(corr_dim(nr, c->yarn_orig_ctx, c->yarn_beta_fast, c->rope_base));
    float hi = ceilf(corr_dim(nr, c->yarn_orig_ctx, c->yarn_beta_slow, c->rope_base));
    lo = lo > 0 ? lo : 0;
    hi = hi < nr - 1 ? hi : (float)(nr - 1);
    if (ext != 0.0f) ms *= 1.0f + 0.1f * logf(1.0f / fs);
    for (int i = 0; i < half; i++) {
        double freq = pow((double)c->rope_base, -2.0 * i / nr);
        float ramp = 0.0f;
        if (ext != 0.0f) {
            float y = (i - lo) / fmaxf(0.001f, hi - lo);
            ramp = (1 - fminf(1, fmaxf(0, y))) * ext;
        }
        for (int p = 0; p < ctx_len; p++) {
            float extrap = (float)(p * freq), interp = fs * extrap;
            float th = ext != 0.0f ? interp * (1 - ramp) + extrap * ramp : interp;
            cos_[(size_t)p * half + i] = cosf(th) * ms;
            sin_[(size_t)p * half + i] = sinf(th) * ms;
        }
    }
}

float bt_mla_kq_scale(const bt_config *c)
{
    float fs = c->rope_freq_scale;
    float af = c->yarn_attn_factor > 0 ? c->yarn_attn_factor : 1.0f;
    float org = af * (1.0f + 0.1f * logf(1.0f / fs));
    float ms = org * (1.0f + 0.1f * c->yarn_log_mul * logf(1.0f / fs));
    return ms * ms / sqrtf((float)c->head_dim);
}

void bt_mla_rope(const bt_config *c, float *x, int n, size_t stride, int heads, size_t hstride, size_t off, int pos0,
                 const float *cos_, const float *sin_)
{
    int half = c->rope_dim / 2;
    for (int t = 0; t < n; t++) {
        const float *cs = cos_ + (size_t)(pos0 + t) * half, *sn = sin_ + (size_t)(pos0 + t) * half;
        for (int h = 0; h < heads; h++) {
            float *r = x + (size_t)t * stride + (size_t)h * hstride + off;
            for (int i = 0; i < half; i++) {
                float a = r[2 * i], b = r[2 * i + 1];
                r[2 * i] = a * cs[i] - b * sn[i];
                r[2 * i + 1] = a * sn[i] + b * cs[i];
            }
        }
    }
}

/* The three below as work items, one per (row, head). */
typedef struct mla_job {
    const bt_config *c;
    const bt_mla_w *w;
    const float *in, *cache;
    float *out, *scores;
    size_t ld;
    int pos0;
    float kq_scale;
} mla_job;

static void run_items(const bt_mla_runner *run, int n, void (*fn)(void *arg, int i, int ith), mla_job *j)
{
    if (run && run->for_each) run->for_each(run->ctx, n, fn, j);
    else for (int i = 0; i < n; i++) fn(j, i, 0);
}

static void absorb_item(void *arg, int i, int ith)
{
    (void)ith;
    const mla_job *j = arg;
    const bt_config *c = j->c;
    const bt_mla_w *w = j->w;
    int H = c->n_heads, hd = c->head_dim, nr = c->rope_dim, nope = hd - nr, kvl = c->kv_lora_rank, lat = kvl + nr;
    int h = i % H;
    const float *qh = j->in + (size_t)i * hd;
    float *o = j->out + (size_t)i * lat;
    const float *wk = w->k + (size_t)h * w->kh;
    if (w->kq) {        /* attn_k_b's rows as stored: one kernel dot a latent dim */
        const uint8_t *rows = w->kq + (size_t)h * kvl * w->krow;
        for (int r = 0; r < kvl; r++) o[r] = bt_vec_dot(w->qtype, rows + (size_t)r * w->krow, qh, nope);
    } else if (w->kd == 1) {   /* rows of nope (attn_k_b): one dot a latent dim, the kernels' canonical order */
        bt_dot_rows_f32(wk, (int64_t)w->kr, qh, nope, kvl, o);
    } else {            /* rows of kv_lora (attn_kv_b's key rows): q's dims weighting them in order */
        for (int r = 0; r < kvl; r++) o[r] = 0;
        bt_wsum_f32(o, qh, 1.0f, wk, (int64_t)w->kd, nope, kvl);
    }
    for (int r = 0; r < nr; r++) o[kvl + r] = qh[nope + r];
}

void bt_mla_absorb(const bt_config *c, const bt_mla_w *w, const float *q, int T, float *qabs, const bt_mla_runner *run)
{
    mla_job j = { .c = c, .w = w, .in = q, .out = qabs };
    run_items(run, T * c->n_heads, absorb_item, &j);
}

static void attend_item(void *arg, int i, int ith)
{
    const mla_job *j = arg;
    const bt_config *c = j->c;
    int H = c->n_heads, kvl = c->kv_lora_rank, lat = kvl + c->rope_dim;
    int n = j->pos0 + i / H + 1;
    const float *qh = j->in + (size_t)i * lat;
    float *scores = j->scores + (size_t)ith * j->ld;
    /* the CPU backend's attention loops: dots in the kernels' canonical
     * order, libm's expf, the weighted sum's plain loop */
    bt_dot_rows_f32(j->cache, lat, qh, lat, n, scores);
    bt_exp_sub_f32(scores, n, bt_scale_max_f32(scores, n, j->kq_scale));
    float sum = 0;
    for (int s = 0; s < n; s++) sum += scores[s];
    float *o = j->out + (size_t)i * kvl;
    for (int r = 0; r < kvl; r++) o[r] = 0;
    bt_wsum_f32(o, scores, 1.0f / sum, j->cache, lat, n, kvl);
}

void bt_mla_attend(const bt_config *c, const float *qabs, const float *cache, int T, int pos0, float kq_scale,
                   float *scores, size_t ld, float *ctxl, const bt_mla_runner *run)
{
    mla_job j = { .c = c, .in = qabs, .cache = cache, .out = ctxl, .scores = scores, .ld = ld, .pos0 = pos0,
                  .kq_scale = kq_scale };
    run_items(run, T * c->n_heads, attend_item, &j);
}

static void up_v_item(void *arg, int i, int ith)
{
    (void)ith;
    const mla_job *j = arg;
    const bt_config *c = j->c;
    const bt_mla_w *w = j->w;
    int H = c->n_heads, kvl = c->kv_lora_rank, vd = c->mla_v_dim, h = i % H;
    const float *x = j->in + (size_t)i * kvl;
    float *o = j->out + (size_t)i * vd;
    if (w->vq) {   /* attn_v_b's rows as stored */
        const uint8_t *rows = w->vq + (size_t)h * vd * w->vrow;
        for (int r = 0; r < vd; r++) o[r] = bt_vec_dot(w->qtype, rows + (size_t)r * w->vrow, x, kvl);
    } else {       /* both layouts keep a value row's kv_lora contiguous (vr 1) */
        bt_dot_rows_f32(w->v + (size_t)h * w->vh, (int64_t)w->vj, x, kvl, vd, o);
    }
}

void bt_mla_up_v(const bt_config *c, const bt_mla_w *w, const float *ctxl, int T, float *ctx, const bt_mla_runner *run)
{
    mla_job j = { .c = c, .w = w, .in = ctxl, .out = ctx };
    run_items(run, T * c->n_heads, up_v_item, &j);
}
