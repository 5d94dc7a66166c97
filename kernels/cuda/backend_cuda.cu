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
 *   - CUPTI (enable(BT_BACKEND_ACTIVITY), what `run --cupti` asks for; only
 *     where configure found CUPTI, HAVE_CUPTI): activity records for
 *     kernels, memcpy, memset, synchronisation and driver/runtime API calls.
 *     mark() pops the previous external correlation id and pushes
 *     bt_act_ext_id(step, layer, op), so CUPTI ties every API call, and the
 *     kernel or copy it launched, to the op. activity() flushes CUPTI's
 *     buffers (after sync, so the step's records are complete) and hands
 *     each record, as a plain bt_act, to the host's callback. CUPTI's
 *     callbacks are process-wide: one backend records at a time. A graph
 *     launch (--cuda-graphs) is marked (step, -1, BT_ACT_OP_GRAPH): its
 *     kernels join the step, not their op (run eager for the per-op join).
 *   - Errors: a failed CUDA call becomes BT_EIO with bt_error() naming the
 *     call and cudaGetErrorString; the executable exports bt_error. */
#include "config.h"

#include <cuda_runtime.h>
#ifdef HAVE_CUPTI
#include <cupti.h>
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "base/util.h"
#include "backend/backend_impl.h"
#include "base/kernel_rows.h"
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
    int64_t upload_ns;                /* wall time of those uploads */
    bool activity;                    /* CUPTI recording (this backend owns it) */
    bool ext_pushed;                  /* an external correlation id is pushed */
    int cur_step;                     /* the step of the last mark */
    uint64_t cur_ext;                 /* the id pushed (0: none) */
} cuda_be;

static cuda_be *CB(bt_backend *be) { return (cuda_be *)be; }

static int cuerr(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return BT_OK;
    return bt_error(BT_EIO, "CUDA: %s: %s", call, cudaGetErrorString(e));
}
#define CU(call) do { int rc_ = cuerr((call), #call); if (rc_) return rc_; } while (0)

/* ---- CUPTI (the kernel trail) ---- */

#ifdef HAVE_CUPTI
#define ACT_BUF_BYTES ((size_t)8 << 20)
#define CORR_RING 65536               /* correlation id -> external id, by id modulo */

/* Completed activity buffers, appended by CUPTI's thread (or by the flush
 * in activity()), taken by activity(). */
static struct {
    pthread_mutex_t mu;
    uint8_t **buf;
    size_t *valid;
    int n, cap;
    long dropped;                     /* buffers we had no room to keep */
    cuda_be *owner;                   /* the backend recording, NULL: none */
    uint32_t corr[CORR_RING];
    uint64_t ext[CORR_RING];
} g_act = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, NULL, {0}, {0} };

static void CUPTIAPI act_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *)aligned_alloc(8, ACT_BUF_BYTES);
    *size = *buffer ? ACT_BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI act_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx; (void)stream; (void)size;
    pthread_mutex_lock(&g_act.mu);
    if (g_act.n == g_act.cap) {
        int cap = g_act.cap ? 2 * g_act.cap : 16;
        uint8_t **b = (uint8_t **)realloc(g_act.buf, (size_t)cap * sizeof(*b));
        if (b) g_act.buf = b;
        size_t *v = b ? (size_t *)realloc(g_act.valid, (size_t)cap * sizeof(*v)) : NULL;
        if (v) { g_act.valid = v; g_act.cap = cap; }
    }
    if (g_act.n < g_act.cap) { g_act.buf[g_act.n] = buffer; g_act.valid[g_act.n++] = valid; }
    else { g_act.dropped++; free(buffer); }
    pthread_mutex_unlock(&g_act.mu);
}

static int cuptierr(CUptiResult r, const char *call)
{
    if (r == CUPTI_SUCCESS) return BT_OK;
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    return bt_error(BT_EIO, "CUPTI: %s: %s", call, msg ? msg : "error");
}
#define CUPTI(call) do { int rc_ = cuptierr((call), #call); if (rc_) return rc_; } while (0)

static const CUpti_ActivityKind act_kinds[] = {
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_RUNTIME,
};

static int act_start(cuda_be *c)
{
    if (c->activity) return BT_OK;
    pthread_mutex_lock(&g_act.mu);
    bool busy = g_act.owner != NULL;
    if (!busy) g_act.owner = c;
    pthread_mutex_unlock(&g_act.mu);
    if (busy) return bt_error(BT_EUNSUPPORTED, "--cupti: another CUDA backend in this process is already recording");
    int rc = cuptierr(cuptiActivityRegisterCallbacks(act_requested, act_completed), "cuptiActivityRegisterCallbacks");
    for (size_t i = 0; rc == BT_OK && i < sizeof(act_kinds) / sizeof(act_kinds[0]); i++)
        rc = cuptierr(cuptiActivityEnable(act_kinds[i]), "cuptiActivityEnable");
    if (rc) {
        for (size_t i = 0; i < sizeof(act_kinds) / sizeof(act_kinds[0]); i++) cuptiActivityDisable(act_kinds[i]);
        pthread_mutex_lock(&g_act.mu);
        g_act.owner = NULL;
        pthread_mutex_unlock(&g_act.mu);
        return rc;
    }
    c->activity = true;
    return BT_OK;
}

static void act_stop(cuda_be *c)
{
    if (!c->activity) return;
    if (c->ext_pushed) { uint64_t id; cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id); }
    cuptiActivityFlushAll(1);
    for (size_t i = 0; i < sizeof(act_kinds) / sizeof(act_kinds[0]); i++) cuptiActivityDisable(act_kinds[i]);
    pthread_mutex_lock(&g_act.mu);
    for (int i = 0; i < g_act.n; i++) free(g_act.buf[i]);
    g_act.n = 0;
    g_act.owner = NULL;
    pthread_mutex_unlock(&g_act.mu);
    c->activity = c->ext_pushed = false;
}

/* Replace the pushed external id by `id` (0: none). */
static int act_push(cuda_be *c, uint64_t id)
{
    uint64_t old;
    if (c->ext_pushed)
        CUPTI(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &old));
    c->ext_pushed = false;
    if (id) {
        CUPTI(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
        c->ext_pushed = true;
    }
    return BT_OK;
}

static uint64_t corr_ext(uint32_t corr)
{
    uint32_t k = corr % CORR_RING;
    return g_act.corr[k] == corr ? g_act.ext[k] : 0;
}

static const char *sync_name(int type)
{
    switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return "synchronization";
    }
}

/* One CUPTI record as a bt_act (false: a kind the trace does not keep). */
static bool act_convert(const CUpti_Activity *r, bt_act *a, uint32_t device)
{
    memset(a, 0, sizeof(*a));
    a->device = device;
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        a->kind = BT_ACT_KERNEL; a->name = k->name; a->correlation_id = k->correlationId;
        a->start_ns = k->start; a->end_ns = k->end;
        a->grid[0] = k->gridX; a->grid[1] = k->gridY; a->grid[2] = k->gridZ;
        a->block[0] = k->blockX; a->block[1] = k->blockY; a->block[2] = k->blockZ;
        a->registers = k->registersPerThread;
        a->static_shared = k->staticSharedMemory; a->dynamic_shared = k->dynamicSharedMemory;
        a->stream = k->streamId; a->device = k->deviceId;
        return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
        a->kind = BT_ACT_MEMCPY; a->correlation_id = m->correlationId; a->start_ns = m->start; a->end_ns = m->end;
        a->copy_kind = m->copyKind; a->bytes = m->bytes; a->stream = m->streamId; a->device = m->deviceId;
        return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
        a->kind = BT_ACT_MEMSET; a->correlation_id = m->correlationId; a->start_ns = m->start; a->end_ns = m->end;
        a->bytes = m->bytes; a->stream = m->streamId; a->device = m->deviceId;
        return true;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *y = (const CUpti_ActivitySynchronization2 *)r;
        a->kind = BT_ACT_SYNC; a->name = sync_name(y->type); a->correlation_id = y->correlationId;
        a->start_ns = y->start; a->end_ns = y->end; a->stream = y->streamId;
        return true;
    }
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const CUpti_ActivityAPI *p = (const CUpti_ActivityAPI *)r;
        bool drv = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        const char *nm = NULL;
        cuptiGetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, p->cbid, &nm);
        a->kind = drv ? BT_ACT_DRIVER : BT_ACT_RUNTIME; a->name = nm; a->correlation_id = p->correlationId;
        a->start_ns = p->start; a->end_ns = p->end;
        return true;
    }
    default:
        return false;
    }
}

static int act_drain(cuda_be *c, bt_act_fn fn, void *user)
{
    if (!c->activity) return BT_OK;
    CUPTI(cuptiActivityFlushAll(0));
    pthread_mutex_lock(&g_act.mu);
    int n = g_act.n;
    uint8_t **bufs = (uint8_t **)malloc((size_t)(n ? n : 1) * sizeof(*bufs));
    size_t *valid = (size_t *)malloc((size_t)(n ? n : 1) * sizeof(*valid));
    if (bufs && valid) {
        memcpy(bufs, g_act.buf, (size_t)n * sizeof(*bufs));
        memcpy(valid, g_act.valid, (size_t)n * sizeof(*valid));
        g_act.n = 0;
    }
    long dropped = g_act.dropped;
    g_act.dropped = 0;
    pthread_mutex_unlock(&g_act.mu);
    if (!bufs || !valid) { free(bufs); free(valid); return bt_error(BT_ENOMEM, "out of memory draining CUPTI records"); }
    int rc = dropped ? bt_error(BT_ENOMEM, "CUPTI: %ld activity buffers lost (out of memory)", dropped) : BT_OK;
    /* External correlation records first: a kernel's may sit in another
     * buffer (or an earlier drain: the ring keeps them). */
    for (int i = 0; i < n; i++) {
        CUpti_Activity *r = NULL;
        while (cuptiActivityGetNextRecord(bufs[i], valid[i], &r) == CUPTI_SUCCESS)
            if (r->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
                const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)r;
                if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
                g_act.corr[x->correlationId % CORR_RING] = x->correlationId;
                g_act.ext[x->correlationId % CORR_RING] = x->externalId;
            }
    }
    for (int i = 0; i < n; i++) {
        CUpti_Activity *r = NULL;
        while (rc == BT_OK && cuptiActivityGetNextRecord(bufs[i], valid[i], &r) == CUPTI_SUCCESS) {
            bt_act a;
            if (!act_convert(r, &a, (uint32_t)c->device)) continue;
            rc = fn(user, &a, corr_ext(a.correlation_id));
        }
        free(bufs[i]);
    }
    free(bufs);
    free(valid);
    return rc;
}
#endif /* HAVE_CUPTI */

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
#ifdef HAVE_CUPTI
    /* the graph's kernels run now, at the launch: they join the step */
    uint64_t was = c->cur_ext;
    if (!rc && c->activity) rc = act_push(c, bt_act_ext_id(c->cur_step, -1, BT_ACT_OP_GRAPH));
#endif
    if (!rc) rc = cuerr(cudaGraphLaunch(c->exec, c->stream), "cudaGraphLaunch");
#ifdef HAVE_CUPTI
    if (!rc && c->activity) rc = act_push(c, was);
#endif
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
    for (int k = 0; k < c->n_slots; k++)
        bt_cu_stats_finish(&c->h_slots[k], c->req[k].width, c->req[k].pos0, c->req[k].out);
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
#ifdef HAVE_CUPTI
    act_stop(c);
#endif
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = cu_buf_alloc(be, bytes, &b);
    if (rc) return rc;
    rc = cuerr(cudaMemcpy(b->dev, data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
    if (rc) { cudaFree(b->dev); free(b); return rc; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c->upload_ns += (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
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

/* A weight type with no kernel here (mxfp4: the CPU computes with it):
 * refused in one line naming it, before anything is enqueued. */
static int refuse_type(const char *op, int type)
{
    return bt_error(BT_EUNSUPPORTED, "cuda: %s: weight type %s (ggml type %d) has no CUDA kernel; run this model "
                    "with --device cpu", op, bt_cu_type_name(type), type);
}

static int cu_get_rows(bt_backend *be, int type, bt_buf *table, int64_t width, const int32_t *ids, int n,
                       bt_buf *out)
{
    cuda_be *c = CB(be);
    if (bt_cu_blck(type) == 0) return refuse_type("get_rows", type);
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
    if (bt_cu_blck(type) == 0) return refuse_type("matmul", type);
    if (cols % bt_cu_blck(type) || cols % BT_CU_CHUNK)
        return bt_error(BT_EUNSUPPORTED, "CUDA matmul: weight type %s with %lld columns", bt_cu_type_name(type),
                        (long long)cols);
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
    if (a->blocks) return bt_error(BT_EUNSUPPORTED, "cuda: paged attention (the batched server's KV cache) is not implemented yet");
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

/* The __global__ function each family launches (what CUPTI records name). */
static void cu_kernel_name(bt_backend *be, int kop, int wtype, char *buf, size_t cap)
{
    switch (kop) {
    case BT_KOP_GET_ROWS: snprintf(buf, cap, "bt_k_get_rows %s/cuda", bt_cu_type_name(wtype)); break;
    case BT_KOP_RMSNORM: snprintf(buf, cap, "bt_k_rmsnorm (f32, cuda)"); break;
    case BT_KOP_MATMUL: snprintf(buf, cap, "bt_k_matmul %s/cuda", bt_cu_type_name(wtype)); break;
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

/* ---- ABI 2: features, the kernel trail, memory ---- */

static int cu_enable(bt_backend *be, int feature)
{
    cuda_be *c = CB(be);
    switch (feature) {
    case BT_BACKEND_GRAPHS:
        if (!c->graphs) snprintf(c->desc + strlen(c->desc), sizeof(c->desc) - strlen(c->desc), ", CUDA graphs");
        c->graphs = true;
        return BT_OK;
    case BT_BACKEND_ACTIVITY:
#ifdef HAVE_CUPTI
        return act_start(c);
#else
        return bt_error(BT_EUNSUPPORTED, "--cupti: this bangtrace-cuda.so was built without CUPTI (configure --with-cupti)");
#endif
    default:
        return bt_error(BT_EUNSUPPORTED, "CUDA backend: unknown feature %d", feature);
    }
}

static int cu_mark(bt_backend *be, int step, int layer, int op)
{
    cuda_be *c = CB(be);
    c->cur_step = step;
#ifdef HAVE_CUPTI
    if (!c->activity) return BT_OK;
    uint64_t id = op < 0 ? 0 : bt_act_ext_id(step, layer, op);
    if (id == c->cur_ext && c->ext_pushed == (id != 0)) return BT_OK;
    int rc = act_push(c, id);
    if (rc == BT_OK) c->cur_ext = id;
    return rc;
#else
    (void)layer; (void)op;
    return BT_OK;
#endif
}

static int cu_activity(bt_backend *be, bt_act_fn fn, void *user)
{
#ifdef HAVE_CUPTI
    return act_drain(CB(be), fn, user);
#else
    (void)be; (void)fn; (void)user;
    return BT_OK;
#endif
}

static int cu_mem_info(bt_backend *be, bt_backend_mem *out)
{
    cuda_be *c = CB(be);
    size_t fr = 0, total = 0;
    CU(cudaMemGetInfo(&fr, &total));
    out->weight_bytes = (int64_t)c->weight_bytes;
    out->upload_ns = c->upload_ns;
    out->device_used = (int64_t)(total - fr);
    out->device_total = (int64_t)total;
    return BT_OK;
}

/* ---- ABI 3: numerics profiles ----
 * Only the storage rounding runs here (act= and kv=, math.cuh's
 * conversions); the other numerics ops take the host's generic fallbacks
 * (src/backend/backend.c), and mm_acc=f16 is refused, naming num_matmul. */
static int cu_num_round(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt)
{
    cuda_be *c = CB(be);
    if (fmt == BT_CU_NUM_F8_E4M3)
        return bt_error(BT_EUNSUPPORTED, "--numerics: kv=f8_e4m3 has no CUDA rounding (num_round); run it with --device cpu");
    if (fmt != BT_CU_NUM_F16 && fmt != BT_CU_NUM_BF16 && fmt != BT_CU_NUM_Q8_0 && fmt != BT_CU_NUM_Q8_1) return BT_OK;
    if ((off + rows * width) * sizeof(float) > b->bytes) return bt_error(BT_ERANGE, "CUDA: rounding past the end of a buffer");
    int rc = seg_begin(c);
    if (rc) return rc;
    CU(bt_cu_num_round(c->stream, F(b, off), rows, width, fmt));
    return BT_OK;
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
    .enable = cu_enable,
    .mark = cu_mark,
    .activity = cu_activity,
    .mem_info = cu_mem_info,
    .num_check = NULL,            /* the fallbacks' rule: mm_acc=f16 is refused */
    .num_round = cu_num_round,
    .num_matmul = NULL,           /* generic fallback: the input converted on the host, cu_matmul on a copy */
    .num_rmsnorm = NULL,          /* generic fallback on host copies */
    .num_attention = NULL,        /* generic fallback on host copies */
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
