/* backend.c - what every backend shares: the handle's accessors, kernel
 * family names and the host reference for mutations (--inject). */
#include "backend/backend_impl.h"
#include "util.h"

#include <string.h>

static const char *const kop_names[] = {
    [BT_KOP_GET_ROWS] = "get_rows", [BT_KOP_RMSNORM] = "rmsnorm", [BT_KOP_MATMUL] = "matmul",
    [BT_KOP_ROPE] = "rope", [BT_KOP_KV_STORE] = "kv_store", [BT_KOP_ATTENTION] = "attention",
    [BT_KOP_SWIGLU] = "swiglu", [BT_KOP_ADD] = "add", [BT_KOP_ROPE_NEOX] = "rope_neox", [BT_KOP_ADD_ROW] = "add_row",
    [BT_KOP_SCATTER_ADD] = "scatter_add",
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
    if (!be->iface->enable)
        return bt_error(BT_EUNSUPPORTED, "%s needs --device cuda (the %s backend has no such feature)",
                        bt_backend_feature_flag(feature), bt_backend_name(be));
    return be->iface->enable(be, feature);
}

int bt_backend_activity(bt_backend *be, bt_act_fn fn, void *user)
{
    return be->iface->activity ? be->iface->activity(be, fn, user) : BT_OK;
}

int bt_backend_mark(bt_backend *be, int step, int layer, int op)
{
    return be->iface->mark ? be->iface->mark(be, step, layer, op) : BT_OK;
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
