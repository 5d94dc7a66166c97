/* backend.h - where the engine's ops run: an opaque backend (the CPU built
 * in, CUDA as a plugin), the registry that opens one by device name, and the
 * pieces of the tap contract every backend shares.
 *
 * The forward pass (src/engine/engine.c) is written once against the vtable
 * in backend_impl.h; nothing outside src/backend/ and the backends
 * themselves includes that header. A tap never touches a device tensor
 * directly: it asks the backend for statistics (bt_tap_stats, reduced where
 * the tensor lives), for rows (a copy to the host) or to apply a mutation
 * (--inject) in place. */
#ifndef BT_BACKEND_H
#define BT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "base/records.h"   /* bt_mutation */

typedef struct bt_backend bt_backend;
/* A buffer on a backend: f32 activations, or a weight's raw GGUF blocks. */
typedef struct bt_buf bt_buf;

/* ---- the device table (registry.c) ----
 *
 * One row per device a backend runs on; every --device flag, its error
 * text, each device check of a command and the trace's meta backend read
 * it. A device name is a row's name, or name:N (an ordinal, 0..1024) where
 * the row takes one; NULL and "" are the first row, the CPU. */
typedef struct bt_device {
    const char *name;               /* "cpu", "cuda" */
    bool ordinal;                   /* also name:N ("cuda:1") */
    /* the built-in constructor (kernels/cpu), or NULL for a plugin */
    int (*builtin)(int n_threads, bt_backend **out);
    const char *plugin;             /* the plugin's file name (bangtrace-cuda.so), or NULL */
    const char *title;              /* for messages: "CUDA" ("no CUDA plugin ...") */
    unsigned features;              /* the bt_backend_feature bits it can offer */
    const char *description;        /* one line, for -v and the docs */
} bt_device;

/* The rows, and how many (*n). Row 0 is the CPU, the default. */
const bt_device *bt_device_table(int *n);
/* Parse a device name: BT_OK with *row and *ordinal (0 when none given),
 * or BT_EINVAL with "--device expects cpu, cuda or cuda:N, got 'X'" (the
 * list built from the table). row and ordinal may be NULL. */
int bt_device_parse(const char *device, const bt_device **row, int *ordinal);
/* Does `device` parse? For flag checks before anything is loaded. */
bool bt_backend_device_valid(const char *device);
/* Is `device` the built-in CPU (NULL, "", "cpu")? */
bool bt_device_is_cpu(const char *device);
/* Can the device named offer the feature (bt_backend_feature)? false for a
 * bad name. The row that can (for "needs --device cuda"): bt_device_with. */
bool bt_device_offers(const char *device, int feature);
const bt_device *bt_device_with(int feature);

/* Open the backend named by `device` (its row's constructor or plugin).
 * n_threads is the CPU backend's thread pool size (0:
 * bt_pool_default_threads()); a device backend may use a few host threads
 * too. Returns BT_OK, BT_EINVAL for a device name we do not know, or
 * BT_EUNSUPPORTED with a one-line message when the device cannot run here
 * (no plugin, no driver, no such GPU). */
int bt_backend_open(const char *device, int n_threads, bt_backend **out);
/* The built-in CPU backend (kernels/cpu) with its own pool of n_threads. */
int bt_backend_cpu_new(int n_threads, bt_backend **out);
void bt_backend_free(bt_backend *be);                 /* NULL is a no-op */
/* "cpu" or "cuda:0"; a longer description ("cuda:0 NVIDIA H200, sm_90"). */
const char *bt_backend_name(const bt_backend *be);
const char *bt_backend_describe(const bt_backend *be);
/* What a trace records as meta backend for an opened backend: the built-in
 * CPU with its kernels' instruction set ("cpu-avx2"), a plugin's device by
 * its name ("cuda:0"). */
void bt_backend_trace_name(const bt_backend *be, char *buf, size_t cap);
/* Threads of the CPU backend's pool (1 for a device backend). */
int bt_backend_threads(const bt_backend *be);

/* Features a backend may offer (bt_backend_enable), switched on before the
 * first op. */
enum bt_backend_feature {
    BT_BACKEND_GRAPHS = 1,     /* capture each step as a CUDA graph and replay it (run --cuda-graphs) */
    BT_BACKEND_ACTIVITY = 2,   /* record device activity: CUPTI kernels, copies, syncs, API calls (run --cupti) */
};
/* "--cuda-graphs" / "--cupti": the flag that asks for a feature. */
const char *bt_backend_feature_flag(int feature);
/* Switch a feature on. BT_EUNSUPPORTED with a one-line message naming the
 * flag when this backend has no such feature (the CPU) or it cannot run
 * here (no CUPTI library). */
int bt_backend_enable(bt_backend *be, int feature);

/* One device activity record and the external correlation id (0: none)
 * matched to it; a non-zero return stops the drain. */
struct bt_act;
typedef int (*bt_act_fn)(void *user, const struct bt_act *a, uint64_t ext_id);
/* Hand every activity record completed so far to fn (BT_BACKEND_ACTIVITY
 * on; a backend without it hands none). Returns fn's status or a drain
 * error. */
int bt_backend_activity(bt_backend *be, bt_act_fn fn, void *user);

/* What a backend holds in memory: weights uploaded and how long it took,
 * device memory in use / total (-1 when unknown: the CPU). */
typedef struct bt_backend_mem {
    int64_t weight_bytes, upload_ns;
    int64_t device_used, device_total;
} bt_backend_mem;
/* BT_EUNSUPPORTED when the backend keeps no such account. */
int bt_backend_mem_info(bt_backend *be, bt_backend_mem *out);

/* Directories searched for the CUDA plugin, in order: $BANGTRACE_PLUGIN_DIR,
 * the directory of the running executable, then the install's pkglibdir. */
#define BT_BACKEND_CUDA_PLUGIN "bangtrace-cuda.so"

/* ---- mutations (--inject applied where the tensor lives) ----
 *
 * One injection spec applied to one tensor is a rectangle of elements of a
 * (rows x width) f32 tensor: rows [row0, row1), columns [col0, col1), each
 * element replaced by `value` (SET), multiplied by it (SCALE) or moved by
 * value * bt_noise_unit(step, layer, op, pos0 + row, col) (NOISE). An element
 * counts as changed when its bits differ afterwards. */
/* enum bt_mut_kind and bt_mutation: src/base/records.h */

/* Deterministic noise in [-1, 1) for one element: a splitmix64 hash of its
 * identity, so reruns, replays with different chunking and every backend
 * draw the same values. Plain C with no library calls, so a CUDA kernel can
 * use the same text as a __host__ __device__ function. */
static inline float bt_noise_unit(int step, int layer, int op, int pos, long idx)
{
    uint64_t z = 0x9e3779b97f4a7c15ull;
    uint64_t parts[5] = { (uint64_t)(uint32_t)step, (uint64_t)(uint32_t)(layer + 1),
                          (uint64_t)(uint32_t)op, (uint64_t)(uint32_t)pos, (uint64_t)idx };
    for (int i = 0; i < 5; i++) {
        z += parts[i] + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
    }
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Apply m to a host tensor of `width` floats per row; returns the number of
 * elements whose bits changed. The reference every backend's inject hook
 * must match. */
long bt_mutation_apply_host(float *data, int width, const bt_mutation *m);

#endif
