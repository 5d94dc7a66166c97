/* backend_cuda.cu - the CUDA backend: struct bt_backend_i over kernels.cu,
 * built into the plugin bangtrace-cuda.so, whose only export is
 * bt_backend_plugin_init (src/backend/backend_impl.h).
 *
 * Invariants:
 *   - Every op is enqueued on one stream; nothing synchronises the host
 *     except sync, read and set (synchronous by contract) and inject (which
 *     reports how many elements changed).
 *   - Tap statistics: stats() launches one reduction that writes slot k of a
 *     per-step device array and remembers (out, width, pos0) for slot k on
 *     the host; sync() enqueues ONE asynchronous copy of the used slots into
 *     pinned memory, waits once, and fills every remembered bt_tap_stats.
 *     So a step costs one copy of a few KB, never a copy or a wait per op.
 *   - CUDA graphs (BANGTRACE_CUDA_GRAPHS=1 in the environment, what
 *     `run --cuda-graphs` sets): the ops between two synchronisation points
 *     (a "segment": one decode step, tap reductions and their copy included)
 *     are captured with stream capture and launched as a graph; the next
 *     segment updates the instantiated graph in place (cudaGraphExecUpdate,
 *     llama.cpp's approach) and re-instantiates only when the topology
 *     changed (prefill vs decode). The graph replays exactly the kernels and
 *     arguments the eager path would launch, so a trace with graphs equals
 *     the eager one by construction.
 *   - Errors: a failed CUDA call becomes BT_EIO with bt_error() naming the
 *     call and cudaGetErrorString; the executable exports bt_error. */
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "util.h"
#include "backend/backend_impl.h"
}

#include "math.cuh"
#include "cuda_impl.h"

#define MAX_SLOTS 16384       /* tapped tensors per step (SmolLM2: ~430) */
#define STAGE_IDS 65536       /* token ids staged per step (pinned) */

struct bt_buf {
    void *dev;
    size_t bytes;
};

typedef struct stat_req {
    bt_tap_stats *out;
    int width, pos0;
} stat_req;

typedef struct cuda_be {
    struct bt_backend base;
    int device;
    char name[32], desc[256];
    cudaStream_t stream;
    bt_cu_stats *d_slots, *h_slots;   /* device array / pinned copy */
    stat_req *req;
    int n_slots;
    int32_t *h_ids, *d_ids;           /* pinned staging / device ids */
    int n_ids;
    float *d_scratch;                 /* attention scores */
    size_t scratch_floats;
    unsigned long long *d_changed, *h_changed;
    bool graphs, capturing;
    cudaGraphExec_t exec;
    size_t weight_bytes;              /* uploaded, for the report */
} cuda_be;

static cuda_be *CB(bt_backend *be) { return (cuda_be *)be; }

static int cuerr(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return BT_OK;
    return bt_error(BT_EIO, "CUDA: %s: %s", call, cudaGetErrorString(e));
}
#define CU(call) do { int rc_ = cuerr((call), #call); if (rc_) return rc_; } while (0)

/* ---- graph segments ---- */

static int seg_begin(cuda_be *c)
{
    if (!c->graphs || c->capturing) return BT_OK;
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    return BT_OK;
}

/* End the capture (if any) and launch it: afterwards the stream holds the
 * segment's work, as if it had been launched eagerly. */
static int seg_end(cuda_be *c)
{
    if (!c->capturing) return BT_OK;
    cudaGraph_t g = NULL;
    c->capturing = false;
    CU(cudaStreamEndCapture(c->stream, &g));
    int rc = BT_OK;
    if (c->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(c->exec, g, &info) != cudaSuccess) {
            (void)cudaGetLastError();
            cudaGraphExecDestroy(c->exec);
            c->exec = NULL;
        }
    }
    if (!c->exec) rc = cuerr(cudaGraphInstantiate(&c->exec, g, 0), "cudaGraphInstantiate");
    if (!rc) rc = cuerr(cudaGraphLaunch(c->exec, c->stream), "cudaGraphLaunch");
    cudaGraphDestroy(g);
    return rc;
}

/* Copy the step's statistics back (one async copy), wait once, hand them
 * to the taps. */
static int finish_step(cuda_be *c)
{
    if (c->n_slots > 0) {
        int rc = seg_begin(c);
        if (rc) return rc;
        CU(cudaMemcpyAsync(c->h_slots, c->d_slots, (size_t)c->n_slots * sizeof(bt_cu_stats),
                           cudaMemcpyDeviceToHost, c->stream));
    }
    int rc = seg_end(c);
    if (rc) return rc;
    CU(cudaStreamSynchronize(c->stream));
    for (int k = 0; k < c->n_slots; k++) {
        const bt_cu_stats *a = &c->h_slots[k];
        bt_tap_stats *s = c->req[k].out;
        s->n = a->n; s->nan = a->nan; s->pinf = a->pinf; s->ninf = a->ninf;
        s->n_finite = a->n - a->nan - a->pinf - a->ninf;
        if (s->n_finite > 0) {
            s->min = a->min; s->max = a->max;
            s->absmax = fabsf(a->min) > fabsf(a->max) ? fabsf(a->min) : fabsf(a->max);
            s->mean = (float)(a->sum / s->n_finite);
            s->rms = (float)sqrt(a->sumsq / s->n_finite);
        } else s->min = s->max = s->absmax = s->mean = s->rms = NAN;
        s->first_bad_index = a->first_bad < 0 ? -1 : (int)(a->first_bad % c->req[k].width);
        s->first_bad_pos = a->first_bad < 0 ? -1 : c->req[k].pos0 + (int)(a->first_bad / c->req[k].width);
    }
    c->n_slots = 0;
    c->n_ids = 0;
    return BT_OK;
}

/* ---- identity ---- */

static const char *cu_name(bt_backend *be) { return CB(be)->name; }
static const char *cu_describe(bt_backend *be) { return CB(be)->desc; }

static void cu_free(bt_backend *be)
{
    cuda_be *c = CB(be);
    if (!c) return;
    if (c->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    if (c->exec) cudaGraphExecDestroy(c->exec);
    cudaFree(c->d_slots);
    cudaFreeHost(c->h_slots);
    cudaFree(c->d_ids);
    cudaFreeHost(c->h_ids);
    cudaFree(c->d_scratch);
    cudaFree(c->d_changed);
    cudaFreeHost(c->h_changed);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->req);
    free(c);
}

/* ---- buffers ---- */

static int cu_buf_alloc(bt_backend *be, size_t bytes, bt_buf **out)
{
    cuda_be *c = CB(be);
    bt_buf *b = (bt_buf *)calloc(1, sizeof(*b));
    if (!b) return bt_error(BT_ENOMEM, "out of memory");
    int rc = seg_end(c);
    if (!rc) rc = cuerr(cudaMalloc(&b->dev, bytes ? bytes : 1), "cudaMalloc");
    if (!rc) rc = cuerr(cudaMemsetAsync(b->dev, 0, bytes ? bytes : 1, c->stream), "cudaMemsetAsync");
    if (rc) { cudaFree(b->dev); free(b); return rc; }
    b->bytes = bytes;
    *out = b;
    return BT_OK;
}

static int cu_buf_upload(bt_backend *be, const void *data, size_t bytes, bt_buf **out)
{
    cuda_be *c = CB(be);
    bt_buf *b = NULL;
    int rc = cu_buf_alloc(be, bytes, &b);
    if (rc) return rc;
    rc = cuerr(cudaMemcpy(b->dev, data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
    if (rc) { cudaFree(b->dev); free(b); return rc; }
    c->weight_bytes += bytes;
    *out = b;
    return BT_OK;
}

static void cu_buf_free(bt_backend *be, bt_buf *b)
{
    if (!b) return;
    seg_end(CB(be));
    cudaFree(b->dev);
    free(b);
}

static float *F(bt_buf *b, size_t off) { return (float *)b->dev + off; }

static int cu_set(bt_backend *be, bt_buf *b, size_t off, const float *src, size_t n)
{
    cuda_be *c = CB(be);
    int rc = seg_end(c);
    if (rc) return rc;
    CU(cudaMemcpyAsync(F(b, off), src, n * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    return BT_OK;
}

static int cu_read(bt_backend *be, bt_buf *b, size_t off, size_t n, float *dst)
{
    cuda_be *c = CB(be);
    int rc = finish_step(c);   /* read implies every earlier op, stats included */
    if (rc) return rc;
    CU(cudaMemcpy(dst, F(b, off), n * sizeof(float), cudaMemcpyDeviceToHost));
    return BT_OK;
}

static int cu_sync(bt_backend *be) { return finish_step(CB(be)); }

/* ---- ops ---- */

static int cu_get_rows(bt_backend *be, int type, bt_buf *table, int64_t width, const int32_t *ids, int n,
                       bt_buf *out)
{
    cuda_be *c = CB(be);
    if (c->n_ids + n > STAGE_IDS) return bt_error(BT_ERANGE, "CUDA: %d token ids in one step (at most %d)", c->n_ids + n, STAGE_IDS);
    int rc = seg_begin(c);
    if (rc) return rc;
    int32_t *h = c->h_ids + c->n_ids, *d = c->d_ids + c->n_ids;
    memcpy(h, ids, (size_t)n * sizeof(int32_t));
    c->n_ids += n;
    CU(cudaMemcpyAsync(d, h, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream));
    size_t row_bytes = (size_t)(width / bt_cu_blck(type)) * bt_cu_type_size(type);
    CU(bt_cu_get_rows(c->stream, type, table->dev, row_bytes, width, d, n, F(out, 0)));
    return BT_OK;
}

static int cu_rmsnorm(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off, int T, int width, float eps)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_rmsnorm(c->stream, F(out, 0), F(x, 0), F(w, w_off), T, width, eps));
    return BT_OK;
}

static int cu_matmul(bt_backend *be, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off,
                     int T, bt_buf *out)
{
    cuda_be *c = CB(be);
    if (bt_cu_blck(type) == 0 || cols % bt_cu_blck(type) || cols % BT_CU_CHUNK)
        return bt_error(BT_EUNSUPPORTED, "CUDA matmul: weight type %d with %lld columns", type, (long long)cols);
    int rc = seg_begin(c);
    if (rc) return rc;
    size_t row_bytes = (size_t)(cols / bt_cu_blck(type)) * bt_cu_type_size(type);
    CU(bt_cu_matmul(c->stream, type, W->dev, row_bytes, rows, cols, F(x, x_off), T, F(out, 0)));
    return BT_OK;
}

static int cu_rope(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cs, bt_buf *sn)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_rope(c->stream, F(x, 0), T, n_heads, head_dim, pos0, F(cs, 0), F(sn, 0)));
    return BT_OK;
}

static int cu_rope_neox(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cs, bt_buf *sn)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_rope_neox(c->stream, F(x, 0), T, n_heads, head_dim, pos0, F(cs, 0), F(sn, 0)));
    return BT_OK;
}

static int cu_add_row(bt_backend *be, bt_buf *x, int T, int width, bt_buf *b, size_t b_off)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_add_row(c->stream, F(x, 0), T, width, F(b, b_off)));
    return BT_OK;
}

static int cu_kv_store(bt_backend *be, bt_buf *kc, bt_buf *vc, size_t off, bt_buf *k, bt_buf *v, size_t n)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(cudaMemcpyAsync(F(kc, off), F(k, 0), n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    CU(cudaMemcpyAsync(F(vc, off), F(v, 0), n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    return BT_OK;
}

static int cu_attention(bt_backend *be, const bt_attn_args *a)
{
    cuda_be *c = CB(be);
    size_t need = (size_t)a->T * a->n_heads * a->ctx_len;
    if (need > c->scratch_floats) {
        int rc = seg_end(c);   /* cudaMalloc may not run inside a capture */
        if (rc) return rc;
        CU(cudaStreamSynchronize(c->stream));
        cudaFree(c->d_scratch);
        c->d_scratch = NULL;
        c->scratch_floats = 0;
        CU(cudaMalloc(&c->d_scratch, need * sizeof(float)));
        c->scratch_floats = need;
    }
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_attention(c->stream, F(a->q, 0), F(a->k_cache, a->cache_off), F(a->v_cache, a->cache_off),
                       F(a->out, 0), c->d_scratch, a->T, a->pos0, a->n_heads, a->n_kv_heads, a->head_dim,
                       a->ctx_len));
    return BT_OK;
}

static int cu_swiglu(bt_backend *be, bt_buf *out, bt_buf *gate, bt_buf *up, size_t n)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_swiglu(c->stream, F(out, 0), F(gate, 0), F(up, 0), n));
    return BT_OK;
}

static int cu_add(bt_backend *be, bt_buf *x, bt_buf *y, size_t n)
{
    cuda_be *c = CB(be);
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_add(c->stream, F(x, 0), F(y, 0), n));
    return BT_OK;
}

/* ---- observation ---- */

static int cu_stats(bt_backend *be, bt_buf *b, size_t off, int rows, int width, int pos0, bt_tap_stats *out)
{
    cuda_be *c = CB(be);
    if (c->n_slots >= MAX_SLOTS)
        return bt_error(BT_ERANGE, "CUDA: more than %d tapped tensors in one step", MAX_SLOTS);
    int rc = seg_begin(c);
    if (rc) return rc;
    int k = c->n_slots++;
    c->req[k].out = out;
    c->req[k].width = width;
    c->req[k].pos0 = pos0;
    CU(bt_cu_stats_launch(c->stream, F(b, off), (int64_t)rows * width, c->d_slots, k));
    return BT_OK;
}

static int cu_inject(bt_backend *be, bt_buf *b, size_t off, int width, const bt_mutation *m, long *changed)
{
    cuda_be *c = CB(be);
    /* The count is needed now: run what was captured so far, then the
     * mutation eagerly, and wait for it (injection runs are tests, not the
     * serving path). */
    int rc = seg_end(c);
    if (rc) return rc;
    CU(cudaMemsetAsync(c->d_changed, 0, sizeof(*c->d_changed), c->stream));
    CU(bt_cu_inject(c->stream, F(b, off), width, m->kind, m->value, m->row0, m->row1, m->col0, m->col1, m->step,
                    m->layer, m->op, m->pos0, c->d_changed));
    CU(cudaMemcpyAsync(c->h_changed, c->d_changed, sizeof(*c->d_changed), cudaMemcpyDeviceToHost, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    *changed = (long)*c->h_changed;
    return BT_OK;
}

static const char *type_name(int t)
{
    switch (t) {
    case BT_CU_F32: return "f32"; case BT_CU_F16: return "f16"; case BT_CU_BF16: return "bf16";
    case BT_CU_Q4_0: return "q4_0"; case BT_CU_Q4_1: return "q4_1"; case BT_CU_Q5_0: return "q5_0";
    case BT_CU_Q5_1: return "q5_1"; case BT_CU_Q8_0: return "q8_0"; case BT_CU_Q2_K: return "q2_K";
    case BT_CU_Q3_K: return "q3_K"; case BT_CU_Q4_K: return "q4_K"; case BT_CU_Q5_K: return "q5_K";
    case BT_CU_Q6_K: return "q6_K"; default: return "?";
    }
}

/* The __global__ function each family launches (what CUPTI records name). */
static void cu_kernel_name(bt_backend *be, int kop, int wtype, char *buf, size_t cap)
{
    switch (kop) {
    case BT_KOP_GET_ROWS: snprintf(buf, cap, "bt_k_get_rows %s/cuda", type_name(wtype)); break;
    case BT_KOP_RMSNORM: snprintf(buf, cap, "bt_k_rmsnorm (f32, cuda)"); break;
    case BT_KOP_MATMUL: snprintf(buf, cap, "bt_k_matmul %s/cuda", type_name(wtype)); break;
    case BT_KOP_ROPE: snprintf(buf, cap, "bt_k_rope (f32, cuda)"); break;
    case BT_KOP_KV_STORE: snprintf(buf, cap, "memcpy d2d (kv store, cuda)"); break;
    case BT_KOP_ATTENTION: snprintf(buf, cap, "bt_k_attention (f32, cuda)"); break;
    case BT_KOP_SWIGLU: snprintf(buf, cap, "bt_k_swiglu (f32, cuda)"); break;
    case BT_KOP_ADD: snprintf(buf, cap, "bt_k_add (f32, cuda)"); break;
    case BT_KOP_ROPE_NEOX: snprintf(buf, cap, "bt_k_rope_neox (f32, cuda)"); break;
    case BT_KOP_ADD_ROW: snprintf(buf, cap, "bt_k_add_row (f32, cuda)"); break;
    case BT_KOP_SCATTER_ADD: snprintf(buf, cap, "scatter_add (not implemented on cuda: MoE runs on the CPU)"); break;
    default: snprintf(buf, cap, "? (cuda)"); break;
    }
}

static const struct bt_backend_i cuda_iface = {
    .name = cu_name,
    .describe = cu_describe,
    .free = cu_free,
    .threads = NULL,
    .buf_alloc = cu_buf_alloc,
    .buf_upload = cu_buf_upload,
    .buf_free = cu_buf_free,
    .buf_host = NULL,
    .set = cu_set,
    .read = cu_read,
    .sync = cu_sync,
    .get_rows = cu_get_rows,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .rope = cu_rope,
    .kv_store = cu_kv_store,
    .attention = cu_attention,
    .swiglu = cu_swiglu,
    .add = cu_add,
    .stats = cu_stats,
    .inject = cu_inject,
    .kernel_name = cu_kernel_name,
    .rope_neox = cu_rope_neox,
    .add_row = cu_add_row,
    .scatter_add = NULL,          /* MoE: not yet; the engine refuses a MoE model here, naming the op */
};

/* The plugin's one export. A one-line reason in err for every refusal. */
extern "C" __attribute__((visibility("default")))
int bt_backend_plugin_init(int abi_version, int device, bt_backend **out, char *err, size_t errcap)
{
    *out = NULL;
    if (abi_version != BT_BACKEND_ABI_VERSION) {
        snprintf(err, errcap, "bangtrace-cuda.so was built for backend ABI %d, bangtrace speaks %d",
                 BT_BACKEND_ABI_VERSION, abi_version);
        return BT_EUNSUPPORTED;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, errcap, "no usable CUDA driver or GPU: %s", cudaGetErrorString(e));
        return BT_EUNSUPPORTED;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errcap, "CUDA device %d of %d", device, n);
        return BT_EUNSUPPORTED;
    }
    cuda_be *c = (cuda_be *)calloc(1, sizeof(*c));
    if (!c) { snprintf(err, errcap, "out of memory"); return BT_ENOMEM; }
    c->base.iface = &cuda_iface;
    c->base.ctx = c;
    c->device = device;
    const char *g = getenv("BANGTRACE_CUDA_GRAPHS");
    c->graphs = g && *g && strcmp(g, "0") != 0;
    cudaDeviceProp p;
    const char *what = "cudaSetDevice";
    e = cudaSetDevice(device);
    if (e == cudaSuccess) { what = "cudaGetDeviceProperties"; e = cudaGetDeviceProperties(&p, device); }
    if (e == cudaSuccess) { what = "cudaStreamCreate"; e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking); }
    if (e == cudaSuccess) { what = "cudaMalloc (tap slots)"; e = cudaMalloc(&c->d_slots, MAX_SLOTS * sizeof(bt_cu_stats)); }
    if (e == cudaSuccess) { what = "cudaMallocHost (tap slots)"; e = cudaMallocHost(&c->h_slots, MAX_SLOTS * sizeof(bt_cu_stats)); }
    if (e == cudaSuccess) { what = "cudaMalloc (ids)"; e = cudaMalloc(&c->d_ids, STAGE_IDS * sizeof(int32_t)); }
    if (e == cudaSuccess) { what = "cudaMallocHost (ids)"; e = cudaMallocHost(&c->h_ids, STAGE_IDS * sizeof(int32_t)); }
    if (e == cudaSuccess) { what = "cudaMalloc (counter)"; e = cudaMalloc(&c->d_changed, sizeof(unsigned long long)); }
    if (e == cudaSuccess) { what = "cudaMallocHost (counter)"; e = cudaMallocHost(&c->h_changed, sizeof(unsigned long long)); }
    c->req = (stat_req *)calloc(MAX_SLOTS, sizeof(stat_req));
    if (e != cudaSuccess || !c->req) {
        snprintf(err, errcap, "%s: %s", what, e != cudaSuccess ? cudaGetErrorString(e) : "out of memory");
        cu_free(&c->base);
        return e != cudaSuccess ? BT_EIO : BT_ENOMEM;
    }
    snprintf(c->name, sizeof(c->name), "cuda:%d", device);
    snprintf(c->desc, sizeof(c->desc), "cuda:%d %s, sm_%d%d, %.1f GiB%s", device, p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024 * 1024), c->graphs ? ", CUDA graphs" : "");
    *out = &c->base;
    return BT_OK;
}
