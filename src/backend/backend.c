/* backend.c - what every backend shares: the handle's accessors, kernel
 * family names, the host reference for mutations (--inject) and the
 * generic fallbacks of the numerics ops (--numerics). */
#include "backend/backend_impl.h"
#include "kernels/cpu/numerics.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static const char *const kop_names[] = {
    [BT_KOP_GET_ROWS] = "get_rows", [BT_KOP_RMSNORM] = "rmsnorm", [BT_KOP_MATMUL] = "matmul",
    [BT_KOP_ROPE] = "rope", [BT_KOP_KV_STORE] = "kv_store", [BT_KOP_ATTENTION] = "attention",
    [BT_KOP_SWIGLU] = "swiglu", [BT_KOP_ADD] = "add", [BT_KOP_ROPE_NEOX] = "rope_neox", [BT_KOP_ADD_ROW] = "add_row",
    [BT_KOP_SCATTER_ADD] = "scatter_add", [BT_KOP_COPY_COLS] = "copy_cols", [BT_KOP_MUL_SIGMOID] = "mul_sigmoid",
    [BT_KOP_GDN_GATES] = "gdn_gates", [BT_KOP_SSM_CONV] = "ssm_conv", [BT_KOP_GDN_RECUR] = "gdn_recur",
    [BT_KOP_ROPE_NEOX_PART] = "rope_neox_part",
};
_Static_assert(BT_ARRAY_SIZE(kop_names) == BT_KOP_COUNT, "kernel family table out of date");

const char *bt_kop_name(int kop) { return kop >= 0 && kop < BT_KOP_COUNT ? kop_names[kop] : "?"; }

void bt_backend_free(bt_backend *be)
{
    if (be) be->iface->free(be);
}

const char *bt_backend_name(const bt_backend *be) { return be->iface->name((bt_backend *)be); }

const char *bt_backend_describe(const bt_backend *be)
{
    return be->iface->describe ? be->iface->describe((bt_backend *)be) : bt_backend_name(be);
}

int bt_backend_threads(const bt_backend *be)
{
    return be->iface->threads ? be->iface->threads((bt_backend *)be) : 1;
}

const char *bt_backend_feature_flag(int feature)
{
    switch (feature) {
    case BT_BACKEND_GRAPHS: return "--cuda-graphs";
    case BT_BACKEND_ACTIVITY: return "--cupti";
    default: return "?";
    }
}

int bt_backend_enable(bt_backend *be, int feature)
{
    const bt_device *d = bt_device_with(feature);
    if (!be->iface->enable)
        return bt_error(BT_EUNSUPPORTED, "%s needs --device %s (the %s backend has no such feature)",
                        bt_backend_feature_flag(feature), d ? d->name : "?", bt_backend_name(be));
    return be->iface->enable(be, feature);
}

int bt_backend_activity(bt_backend *be, bt_act_fn fn, void *user)
{
    return be->iface->activity ? be->iface->activity(be, fn, user) : BT_OK;
}

int bt_backend_mem_info(bt_backend *be, bt_backend_mem *out)
{
    out->weight_bytes = out->upload_ns = out->device_used = out->device_total = -1;
    if (!be->iface->mem_info) return bt_error(BT_EUNSUPPORTED, "the %s backend keeps no memory account", bt_backend_name(be));
    return be->iface->mem_info(be, out);
}

static bool same_bits(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

long bt_mutation_apply_host(float *data, int width, const bt_mutation *m)
{
    long changed = 0;
    for (int r = m->row0; r < m->row1; r++) {
        float *row = data + (size_t)r * width;
        for (long j = m->col0; j < m->col1; j++) {
            float old = row[j], v;
            switch (m->kind) {
            case BT_MUT_SCALE: v = old * m->value; break;
            case BT_MUT_NOISE: v = old + m->value * bt_noise_unit(m->step, m->layer, m->op, m->pos0 + r, j); break;
            default: v = m->value; break;
            }
            if (!same_bits(old, v)) { row[j] = v; changed++; }
        }
    }
    return changed;
}

/* ---- numerics ops: the hook, else the fallback on host copies ---- */

int bt_backend_num_check(bt_backend *be, const bt_numerics *n)
{
    const struct bt_backend_i *bi = be->iface;
    if (bi->num_check) return bi->num_check(be, n);
    if (n->mm_acc == BT_NUM_F16 && !bi->num_matmul)
        return bt_error(BT_EUNSUPPORTED, "--numerics: mm_acc=f16 (f16 accumulation) needs the backend op num_matmul, "
                        "which %s does not implement; run it on the cpu", bt_backend_name(be));
    return BT_OK;
}

/* Host copies of a fallback, freed together. */
typedef struct host_tmp {
    float *p[4];
} host_tmp;

static float *tmp_get(host_tmp *t, int i, size_t n)
{
    return t->p[i] = malloc((n ? n : 1) * sizeof(float));
}

static void tmp_free(host_tmp *t)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(t->p); i++) free(t->p[i]);
}

int bt_backend_num_round(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt)
{
    const struct bt_backend_i *bi = be->iface;
    if (fmt == BT_NUM_F32 || !rows || !width) return BT_OK;
    if (bi->num_round) return bi->num_round(be, b, off, rows, width, fmt);
    host_tmp t = { { 0 } };
    size_t n = rows * width;
    float *x = tmp_get(&t, 0, n);
    int rc = x ? bi->read(be, b, off, n, x) : bt_error(BT_ENOMEM, "out of memory for --numerics rounding");
    if (rc == BT_OK) {
        for (size_t r = 0; r < rows; r++) bt_num_round(fmt, x + r * width, width);
        rc = bi->set(be, b, off, x, n);
    }
    tmp_free(&t);
    return rc;
}

int bt_backend_num_matmul(bt_backend *be, const bt_numerics *n, int type, bt_buf *W, int64_t rows, int64_t cols,
                          bt_buf *x, size_t x_off, int T, bt_buf *out)
{
    const struct bt_backend_i *bi = be->iface;
    if (bi->num_matmul) return bi->num_matmul(be, n, type, W, rows, cols, x, x_off, T, out);
    if (bt_numerics_mm_plain(n, type)) return bi->matmul(be, type, W, rows, cols, x, x_off, T, out);
    if (bt_numerics_mm_acc16(n, type))
        return bt_error(BT_EUNSUPPORTED, "--numerics: mm_acc=f16 (f16 accumulation) needs the backend op num_matmul, "
                        "which %s does not implement", bt_backend_name(be));
    /* the converted input on a scratch buffer, then the backend's own product */
    host_tmp t = { { 0 } };
    size_t cnt = (size_t)T * (size_t)cols;
    float *h = tmp_get(&t, 0, cnt);
    bt_buf *tmp = NULL;
    int rc = h ? bi->read(be, x, x_off, cnt, h) : bt_error(BT_ENOMEM, "out of memory for a --numerics matmul input");
    if (rc == BT_OK) {
        bt_numerics_mm_input(n, type, cols, h, cnt);
        rc = bi->buf_alloc(be, cnt * sizeof(float), &tmp);
    }
    if (rc == BT_OK) rc = bi->set(be, tmp, 0, h, cnt);
    if (rc == BT_OK) rc = bi->matmul(be, type, W, rows, cols, tmp, 0, T, out);
    /* buf_free after the product: ops run in order, and a device backend
     * frees a buffer only once the work queued on it is done */
    bi->buf_free(be, tmp);
    tmp_free(&t);
    return rc;
}

int bt_backend_num_rmsnorm(bt_backend *be, const bt_numerics *n, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off,
                           int T, int width, float eps)
{
    const struct bt_backend_i *bi = be->iface;
    if (bi->num_rmsnorm) return bi->num_rmsnorm(be, n, out, x, w, w_off, T, width, eps);
    host_tmp t = { { 0 } };
    size_t cnt = (size_t)T * (size_t)width;
    float *hx = tmp_get(&t, 0, cnt), *hw = tmp_get(&t, 1, (size_t)width), *ho = tmp_get(&t, 2, cnt);
    bt_numerics_ctx *c = NULL;
    int rc = hx && hw && ho ? bt_numerics_ctx_use(&c, n, NULL) : bt_error(BT_ENOMEM, "out of memory for a --numerics rmsnorm");
    if (rc == BT_OK) rc = bi->read(be, x, 0, cnt, hx);
    if (rc == BT_OK) rc = bi->read(be, w, w_off, (size_t)width, hw);
    if (rc == BT_OK) {
        bt_numerics_rmsnorm(c, ho, hx, hw, T, width, eps);
        rc = bi->set(be, out, 0, ho, cnt);
    }
    bt_numerics_ctx_free(c);
    tmp_free(&t);
    return rc;
}

int bt_backend_num_attention(bt_backend *be, const bt_numerics *n, const bt_attn_args *a)
{
    const struct bt_backend_i *bi = be->iface;
    if (bi->num_attention) return bi->num_attention(be, n, a);
    if (a->head_dim > BT_NUMERICS_MAX_HEAD_DIM)
        return bt_error(BT_EUNSUPPORTED, "--numerics: attention heads of %d values are above the supported %d",
                        a->head_dim, BT_NUMERICS_MAX_HEAD_DIM);
    host_tmp t = { { 0 } };
    size_t q_n = (size_t)a->T * a->n_heads * a->head_dim;
    size_t c_n = (size_t)(a->pos0 + a->T) * a->n_kv_heads * a->head_dim;   /* the cells attention reads */
    float *q = tmp_get(&t, 0, q_n), *kc = tmp_get(&t, 1, c_n), *vc = tmp_get(&t, 2, c_n), *o = tmp_get(&t, 3, q_n);
    bt_numerics_ctx *c = NULL;
    int rc = q && kc && vc && o ? bt_numerics_ctx_use(&c, n, NULL) : bt_error(BT_ENOMEM, "out of memory for a --numerics attention");
    if (rc == BT_OK) rc = bi->read(be, a->q, 0, q_n, q);
    if (rc == BT_OK) rc = bi->read(be, a->k_cache, a->cache_off, c_n, kc);
    if (rc == BT_OK) rc = bi->read(be, a->v_cache, a->cache_off, c_n, vc);
    if (rc == BT_OK) {
        bt_numerics_attention(c, &(bt_numerics_attn){ .q = q, .kc = kc, .vc = vc, .ctx = o, .T = a->T, .pos0 = a->pos0,
                                                      .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .hd = a->head_dim });
        rc = bi->set(be, a->out, 0, o, q_n);
    }
    bt_numerics_ctx_free(c);
    tmp_free(&t);
    return rc;
}
