/* kernel_rows.h - device activity as trace rows (table `kernels`), and the
 * conversion from CUPTI activity records to them.
 *
 * The CUDA plugin copies each CUPTI record it receives into a bt_act (plain
 * C, no CUPTI types, so this file and its unit test build without CUDA) and
 * calls bt_act_to_row, which attaches the (step, layer, op) of the external
 * correlation id that was pushed around the op, demangles the kernel name
 * and fills one bt_kernel_row. The writer (bt_trace_kernel_rows) and the
 * reader (bt_trace_kernels_each) use the same row. */
#ifndef BT_KERNEL_ROWS_H
#define BT_KERNEL_ROWS_H

#include <stdint.h>
#include <stddef.h>

enum bt_act_kind { BT_ACT_KERNEL = 0, BT_ACT_MEMCPY, BT_ACT_MEMSET, BT_ACT_SYNC, BT_ACT_DRIVER,
                   BT_ACT_RUNTIME, BT_ACT_COUNT };
/* "kernel", "memcpy", ...; "?" for an unknown kind. */
const char *bt_act_kind_name(int kind);

/* One CUPTI activity record, reduced to what the trace keeps. */
typedef struct bt_act {
    int kind;                     /* enum bt_act_kind */
    const char *name;             /* kernel (mangled or not) / API function; NULL for copies */
    uint32_t correlation_id;      /* CUPTI's, joins external correlation records */
    uint64_t start_ns, end_ns;
    int grid[3], block[3];
    int registers;
    int static_shared, dynamic_shared;
    int copy_kind;                /* memcpy: CUPTI_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD, ...) */
    uint64_t bytes;
    uint32_t stream, device;
} bt_act;

/* An external correlation id packs the op that was running: pushed by the
 * plugin before the op's launches and popped after. Layout: bit 63 set (0
 * means "no id"), step in bits 24..55 (32 bits), layer + 1 in bits 8..23
 * (16 bits, 0 = outside layers), op in bits 0..7. Inline: the plugin
 * computes it without calling into the executable. */
static inline uint64_t bt_act_ext_id(int step, int layer, int op)
{
    return 1ull << 63 | (uint64_t)(uint32_t)step << 24 | (uint64_t)((layer + 1) & 0xffff) << 8 | (uint64_t)(op & 0xff);
}
/* The op of an external id pushed around a CUDA graph launch: its kernels
 * belong to the step, not to one op ("cuda_graph" in the trace). */
#define BT_ACT_OP_GRAPH 255
void bt_act_ext_decode(uint64_t id, int *step, int *layer, int *op);

typedef struct bt_kernel_row {
    int step, layer;              /* -1 when outside any op */
    char op[32];                  /* op name; "" when outside any op */
    const char *kind;             /* static string: bt_act_kind_name */
    char name[256];               /* demangled */
    int grid[3], block[3];        /* 0 when not a kernel */
    int registers, shared_bytes;  /* -1 when not a kernel */
    int64_t bytes;                /* -1 when not a copy or memset */
    int64_t start_ns, end_ns;
    int64_t stream, device;
} bt_kernel_row;

/* Fill *out from a record and the external correlation id CUPTI matched to
 * it (0: none). op_name(op) names ops (bt_op_name); NULL leaves op "".
 * BT_EFORMAT for a record that cannot be a real one (end before start,
 * unknown kind). */
int bt_act_to_row(const bt_act *a, uint64_t ext_id, const char *(*op_name)(int op), bt_kernel_row *out);

/* The function name of an Itanium-mangled C++ symbol without its parameter
 * list ("_Z11bt_k_matmuliPKh..." -> "bt_k_matmul", nested names joined by
 * "::"); anything else is copied as is. Always terminates out. */
void bt_demangle_name(const char *sym, char *out, size_t cap);

#endif
