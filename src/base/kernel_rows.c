/* kernel_rows.c - CUPTI activity record -> trace row (see kernel_rows.h).
 * Plain C, no CUDA headers: unit-tested with synthetic records
 * (tests/test_kernel_rows.c) on machines without a GPU. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/kernel_rows.h"
#include "util.h"

static const char *const kind_names[BT_ACT_COUNT] = {
    [BT_ACT_KERNEL] = "kernel", [BT_ACT_MEMCPY] = "memcpy", [BT_ACT_MEMSET] = "memset",
    [BT_ACT_SYNC] = "sync", [BT_ACT_DRIVER] = "driver", [BT_ACT_RUNTIME] = "runtime",
};

const char *bt_act_kind_name(int kind)
{
    return kind >= 0 && kind < BT_ACT_COUNT ? kind_names[kind] : "?";
}

void bt_act_ext_decode(uint64_t id, int *step, int *layer, int *op)
{
    *step = (int)(uint32_t)(id >> 24);
    *layer = (int)((id >> 8) & 0xffff) - 1;
    *op = (int)(id & 0xff);
}

/* <source-name> ::= <length> <identifier>; returns the end or NULL. */
static const char *source_name(const char *p, char *out, size_t cap, size_t *len)
{
    size_t n = 0;
    if (*p < '1' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') { n = n * 10 + (size_t)(*p - '0'); p++; if (n > 4096) return NULL; }
    if (strnlen(p, n) < n) return NULL;
    for (size_t i = 0; i < n; i++) if (*len + 1 < cap) out[(*len)++] = p[i];
    out[*len] = 0;
    return p + n;
}

void bt_demangle_name(const char *sym, char *out, size_t cap)
{
    if (!cap) return;
    out[0] = 0;
    if (!sym) return;
    size_t len = 0;
    const char *p = sym;
    if (strncmp(p, "_Z", 2) != 0) goto verbatim;
    p += 2;
    if (*p == 'N') {      /* nested: N [qualifiers] <name>+ E */
        p++;
        while (*p == 'K' || *p == 'V' || *p == 'r') p++;
        bool first = true;
        while (*p && *p != 'E' && *p != 'I') {   /* template arguments (I...E) end the name */
            if (!first) { if (len + 2 < cap) { out[len++] = ':'; out[len++] = ':'; out[len] = 0; } }
            p = source_name(p, out, cap, &len);
            if (!p) goto verbatim;
            first = false;
        }
        if ((*p != 'E' && *p != 'I') || first) goto verbatim;
        return;
    }
    if (source_name(p, out, cap, &len)) return;
verbatim:
    snprintf(out, cap, "%s", sym);
}

int bt_act_to_row(const bt_act *a, uint64_t ext_id, const char *(*op_name)(int op), bt_kernel_row *out)
{
    memset(out, 0, sizeof(*out));
    if (a->kind < 0 || a->kind >= BT_ACT_COUNT)
        return bt_error(BT_EFORMAT, "CUPTI record of unknown kind %d", a->kind);
    if (a->end_ns < a->start_ns)
        return bt_error(BT_EFORMAT, "CUPTI %s record ends before it starts (%llu < %llu)", bt_act_kind_name(a->kind),
                        (unsigned long long)a->end_ns, (unsigned long long)a->start_ns);
    out->kind = bt_act_kind_name(a->kind);
    out->step = out->layer = -1;
    if (ext_id) {
        int op;
        bt_act_ext_decode(ext_id, &out->step, &out->layer, &op);
        const char *nm = op_name ? op_name(op) : NULL;
        snprintf(out->op, sizeof(out->op), "%s", nm ? nm : "");
    }
    out->start_ns = (int64_t)a->start_ns;
    out->end_ns = (int64_t)a->end_ns;
    out->stream = a->stream;
    out->device = a->device;
    out->registers = out->shared_bytes = -1;
    out->bytes = -1;
    switch (a->kind) {
    case BT_ACT_KERNEL:
        bt_demangle_name(a->name ? a->name : "?", out->name, sizeof(out->name));
        for (int i = 0; i < 3; i++) { out->grid[i] = a->grid[i]; out->block[i] = a->block[i]; }
        out->registers = a->registers;
        out->shared_bytes = a->static_shared + a->dynamic_shared;
        break;
    case BT_ACT_MEMCPY: {
        static const char *const dir[] = { "?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP" };
        int k = a->copy_kind >= 0 && a->copy_kind < (int)BT_ARRAY_SIZE(dir) ? a->copy_kind : 0;
        snprintf(out->name, sizeof(out->name), "memcpy %s", dir[k]);
        out->bytes = (int64_t)a->bytes;
        break;
    }
    case BT_ACT_MEMSET:
        snprintf(out->name, sizeof(out->name), "memset");
        out->bytes = (int64_t)a->bytes;
        break;
    default:
        snprintf(out->name, sizeof(out->name), "%s", a->name ? a->name : bt_act_kind_name(a->kind));
        break;
    }
    return BT_OK;
}
