/* backend_impl.h - the backend vtable (ggml-backend's shape): what a backend
 * implements, and the one symbol a backend plugin exports.
 *
 * Included by the engine, the registry and the backends (kernels/cpu/backend_cpu.c,
 * the CUDA plugin in kernels/cuda); nowhere else. A backend fills a static
 * `const struct bt_backend_i` with designated initializers; hooks marked
 * optional may be NULL and the caller (src/backend/backend.c) supplies the
 * generic fallback.
 *
 * Contract every backend keeps:
 *   - Ops run in the order they are called (a device backend enqueues them
 *     on one stream). `read` is synchronous: it returns once the rows are on
 *     the host, after every op called before it.
 *   - `stats` may fill *out asynchronously: it is valid after the next
 *     `sync` (or `read`). The engine calls `sync` at the end of every forward
 *     and only then lets the taps look at the statistics, so a device backend
 *     copies one small array per step and never synchronises per op. The
 *     caller keeps *out alive until then.
 *   - Activations are f32, row-major: a tensor of T rows of `width` floats at
 *     element offset `off` of a buffer. Offsets and counts are in floats
 *     unless the name says bytes.
 *   - Weights are the GGUF blocks as they are in the file (any type the CPU
 *     reads, bt_dtype(type)->compute), uploaded once; kernels read them in
 *     place (no dequantized copies). A device backend without a kernel for
 *     a type refuses it in get_rows and matmul, before enqueuing anything,
 *     with BT_EUNSUPPORTED and one line naming the type (the CUDA plugin:
 *     mxfp4).
 *   - Results match the CPU backend within the normalized error
 *     tests/test_backend.c allows; the CPU backend is the reference.
 *   - Every hook returns BT_OK or a negative BT_E* with bt_error() set (a
 *     plugin sets the message through the host's bt_error, which the
 *     executable exports). */
#ifndef BT_BACKEND_IMPL_H
#define BT_BACKEND_IMPL_H

#include "backend/backend.h"
#include "base/records.h"
#include "base/kernel_rows.h"

struct bt_numerics;   /* kernels/cpu/numerics.h: a numerics profile, plain data */

/* Kernel families, for kernel_name (events name the kernel that wrote a
 * tensor: "matmul q4_1/avx512"). */
enum bt_kop {
    BT_KOP_GET_ROWS = 0, BT_KOP_RMSNORM, BT_KOP_MATMUL, BT_KOP_ROPE, BT_KOP_KV_STORE,
    BT_KOP_ATTENTION, BT_KOP_SWIGLU, BT_KOP_ADD, BT_KOP_ROPE_NEOX, BT_KOP_ADD_ROW,
    BT_KOP_SCATTER_ADD,
    /* ABI 4: hybrid gated delta net models */
    BT_KOP_COPY_COLS, BT_KOP_MUL_SIGMOID, BT_KOP_GDN_GATES, BT_KOP_SSM_CONV, BT_KOP_GDN_RECUR,
    BT_KOP_ROPE_NEOX_PART,
    BT_KOP_COUNT
};

/* Attention of T query rows at positions pos0..pos0+T-1 over the cached
 * keys/values 0..pos (causal), grouped-query: query head h reads kv head
 * h / (n_heads / n_kv_heads). q: (T, n_heads*head_dim); caches: (ctx_len,
 * n_kv_heads*head_dim) starting at cache_off; out: (T, n_heads*head_dim).
 * Scores scaled by 1/sqrt(head_dim), softmax in f32 with the max
 * subtracted. */
typedef struct bt_attn_args {
    bt_buf *q;
    bt_buf *k_cache, *v_cache;
    size_t cache_off;          /* floats: this layer's (ctx_len, kv_dim) slab */
    bt_buf *out;
    int T, pos0;
    int n_heads, n_kv_heads, head_dim;
    int ctx_len;
    /* ABI 5, paged KV (the batched server): NULL, or the block table of
     * this sequence: position p's cached row is blocks[p / block_size] *
     * block_size + p % block_size of the slab (the bits of the contiguous
     * cache's: each score is one dot, each sum in key order). A backend
     * without paged attention refuses a non-NULL table. */
    const int32_t *blocks;
    int block_size;
    /* ABI 6, gpt-oss (read only by attention_sinks): sinks NULL, or n_heads
     * f32 logits at sinks_off, head h's joining its softmax's denominator
     * unscaled (exp(sink - m), m the max over the scaled scores and the
     * sink); window > 0: a query at position p attends to keys p-window+1..p
     * only; sink_p NULL, or (T, n_heads) f32 receiving the sink's share of
     * each softmax. */
    bt_buf *sinks;
    size_t sinks_off;
    int window;
    bt_buf *sink_p;
} bt_attn_args;

struct bt_backend_i {
    /* ---- identity ---- */
    const char *(*name)(bt_backend *be);          /* "cpu", "cuda:0" */
    const char *(*describe)(bt_backend *be);      /* optional: longer, for logs and the trace */
    void (*free)(bt_backend *be);                 /* frees be itself */
    int (*threads)(bt_backend *be);               /* optional: host threads used (default 1) */

    /* ---- buffers ---- */
    /* A zero-filled buffer of `bytes`. */
    int (*buf_alloc)(bt_backend *be, size_t bytes, bt_buf **out);
    /* A weight: `bytes` of GGUF blocks at data. A host backend may keep the
     * pointer instead of copying (data outlives every buffer: it is the
     * model's mapping); a device backend copies it now. */
    int (*buf_upload)(bt_backend *be, const void *data, size_t bytes, bt_buf **out);
    void (*buf_free)(bt_backend *be, bt_buf *b);  /* NULL is a no-op */
    /* optional: the host address of a buffer the host can read and write
     * directly (the CPU backend), else NULL. Lets a host backend hand taps
     * a float * for free; callers never require it. */
    void *(*buf_host)(bt_backend *be, bt_buf *b);
    /* Copy n floats from the host into b at off / from b at off to the host
     * (synchronous, after all earlier ops). */
    int (*set)(bt_backend *be, bt_buf *b, size_t off, const float *src, size_t n);
    int (*read)(bt_backend *be, bt_buf *b, size_t off, size_t n, float *dst);
    /* optional: wait for every op enqueued so far (stats results land). */
    int (*sync)(bt_backend *be);

    /* ---- ops ---- */
    /* Embedding: out row t = dequantized row ids[t] of table (n_rows x width
     * of `type`); ids are host memory, already checked against n_rows. */
    int (*get_rows)(bt_backend *be, int type, bt_buf *table, int64_t width, const int32_t *ids, int n,
                    bt_buf *out);
    /* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w (w: `width` f32 at w_off;
     * mean of squares accumulated in double). */
    int (*rmsnorm)(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off, int T, int width,
                   float eps);
    /* out[t*rows + r] = dot(W row r, x[x_off + t*cols ...]) for t < T: W is
     * rows x cols of `type`. Batch invariant: a (row, token) value does not
     * depend on T or the token's slot (speculative decoding and bisect
     * --reference rely on it). The head (logits) is a matmul too. */
    int (*matmul)(bt_backend *be, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off,
                  int T, bt_buf *out);
    /* Rotate pairs (2i, 2i+1) of each head of T rows at positions pos0+t by
     * the tables cos/sin ((ctx_len, head_dim/2) f32, filled by the engine
     * from double-precision angles). In place. */
    int (*rope)(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cos,
                bt_buf *sin);
    /* Append T rows of k and v (n = T*kv_dim floats each) to the caches at
     * element offset off. */
    int (*kv_store)(bt_backend *be, bt_buf *k_cache, bt_buf *v_cache, size_t off, bt_buf *k, bt_buf *v,
                    size_t n);
    int (*attention)(bt_backend *be, const bt_attn_args *a);
    /* out[i] = silu(gate[i]) * up[i] for n elements. */
    int (*swiglu)(bt_backend *be, bt_buf *out, bt_buf *gate, bt_buf *up, size_t n);
    /* x[i] += y[i] for n elements (the residual stream). */
    int (*add)(bt_backend *be, bt_buf *x, bt_buf *y, size_t n);

    /* ---- observation ---- */
    /* One-pass statistics (bt_stats_compute's definition) of T rows x width
     * at off, row 0 at position pos0. May complete at the next sync. */
    int (*stats)(bt_backend *be, bt_buf *b, size_t off, int rows, int width, int pos0, bt_tap_stats *out);
    /* optional: apply m to the tensor at off (width floats per row) where it
     * lives; *changed gets the number of elements whose bits changed
     * (bt_mutation_apply_host is the reference). NULL: the caller reads the
     * rows, mutates them on the host and writes them back. */
    int (*inject)(bt_backend *be, bt_buf *b, size_t off, int width, const bt_mutation *m, long *changed);
    /* Name the kernel of a family (and weight type, for GET_ROWS / MATMUL)
     * as events print it: "matmul q4_1/avx512", "rmsnorm (f32, scalar)". */
    void (*kernel_name)(bt_backend *be, int kop, int wtype, char *buf, size_t cap);

    /* ---- ABI 2: the ops of qwen2/qwen3 (issue 11) ----
     * Per-head rmsnorm needs no hook: it is rmsnorm over T*n_heads rows of
     * head_dim (in place: out == x is allowed). Rope with frequency factors
     * (Llama 3) or linear scaling needs none either: the engine folds them
     * into the cos/sin tables. */
    /* optional (NULL: the engine refuses a NEOX model on this backend with
     * BT_EUNSUPPORTED): NEOX rope, rotating pairs (i, i + head_dim/2) of
     * each head by cos/sin[pos][i]; otherwise as rope. */
    int (*rope_neox)(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int pos0, bt_buf *cos,
                     bt_buf *sin);
    /* optional (NULL: refused as above): x[t*width + i] += b[b_off + i] for
     * T rows (a bias vector added to every row). */
    int (*add_row)(bt_backend *be, bt_buf *x, int T, int width, bt_buf *b, size_t b_off);
    /* ---- ABI 2: mixture of experts ---- */
    /* optional (NULL: a MoE model cannot run on this backend, and the engine
     * says so naming the op): for i < n, dst row rows[i] += w[i] * src row i
     * (width floats each), in order i = 0, 1, ... so that results do not
     * depend on the thread count. rows and w are host arrays; the rows of
     * one call are distinct. The weighted sum of a token's experts. */
    int (*scatter_add)(bt_backend *be, bt_buf *dst, bt_buf *src, const int32_t *rows, const float *w, int n,
                       int width);
    /* ---- ABI 2: features, the kernel trail, memory ---- */
    /* optional: switch a feature on (enum bt_backend_feature) before the
     * first op; BT_EUNSUPPORTED with a one-line reason when it cannot run
     * (no CUPTI library). NULL: no feature is available. */
    int (*enable)(bt_backend *be, int feature);
    /* optional: the launches that follow compute op `op` of `layer` in
     * forward `step` (op < 0: no op). A backend recording device activity
     * pushes an external correlation id (bt_act_ext_id) for it, so every
     * record it hands to `activity` names its op. Called only once
     * BT_BACKEND_ACTIVITY is on. */
    int (*mark)(bt_backend *be, int step, int layer, int op);
    /* optional: hand every activity record completed so far (after the last
     * sync) to fn with the external correlation id matched to it (0: none);
     * fn's non-zero status stops the drain and is returned. */
    int (*activity)(bt_backend *be, bt_act_fn fn, void *user);
    /* optional: memory and upload time (bt_backend_mem). */
    int (*mem_info)(bt_backend *be, bt_backend_mem *out);

    /* ---- ABI 3: numerics profiles (--numerics, doc/numerics.md) ----
     * The engine hands a profile (struct bt_numerics, kernels/cpu/numerics.h:
     * plain ints, part of this ABI) to these ops and never touches a buffer
     * itself. Each is optional: NULL takes the generic fallback below
     * (bt_backend_num_*), which reads the operands to the host, runs the CPU
     * backend's code on them (bit for bit what the CPU computes) and writes
     * the result back; only mm_acc=f16 has no fallback and is refused at
     * bt_engine_set_numerics, naming num_matmul. The CPU backend is the
     * reference: a backend's own op matches it as its plain op does. */
    /* optional: can this backend's numerics ops run profile n? BT_OK, or
     * BT_EUNSUPPORTED with a one-line reason starting "--numerics: " naming
     * the part or op it cannot run. NULL: the fallbacks' rule (above). */
    int (*num_check)(bt_backend *be, const struct bt_numerics *n);
    /* optional: round rows x width floats at off, in place, to the storage
     * format fmt (enum bt_num_fmt: f32 no-op, f16, bf16 round to nearest
     * even; q8_0 / q8_1 quantize and dequantize each whole block of 32 along
     * a row, a partial last block left alone): bt_num_round of each row.
     * The engine rounds every op's output (fmt n->act, one row of all the
     * op's values) and the rows it appends to the KV cache (n->kv, rows of
     * kv_dim). */
    int (*num_round)(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt);
    /* optional: matmul (as above) under profile n: the input converted as
     * bt_numerics_mm_input says (n->mm_in, n->act_q) and, for mm_acc=f16 on
     * an unquantized weight, every running sum rounded to f16
     * (bt_numerics_matmul). */
    int (*num_matmul)(bt_backend *be, const struct bt_numerics *n, int type, bt_buf *W, int64_t rows,
                      int64_t cols, bt_buf *x, size_t x_off, int T, bt_buf *out);
    /* optional: rmsnorm (as above) with n->norm's accumulation
     * (bt_numerics_rmsnorm); called only when bt_numerics_norm_custom_n. */
    int (*num_rmsnorm)(bt_backend *be, const struct bt_numerics *n, bt_buf *out, bt_buf *x, bt_buf *w,
                       size_t w_off, int T, int width, float eps);
    /* optional: attention (as above) as n->attn, n->softmax and n->kv say
     * (bt_numerics_attention); called only when bt_numerics_attn_custom_n,
     * for heads of up to BT_NUMERICS_MAX_HEAD_DIM values. */
    int (*num_attention)(bt_backend *be, const struct bt_numerics *n, const bt_attn_args *a);

    /* ---- ABI 4: hybrid gated delta net models (qwen35), engine/gdn.c ----
     * Each optional: NULL and the engine refuses such a model on this backend
     * with one line naming the op. All f32, T rows. */
    /* dst row t (n_seg * seg_len floats) = for s < n_seg, the seg_len floats
     * of src row t (src_width floats) at column col0 + s * seg_stride. */
    int (*copy_cols)(bt_backend *be, bt_buf *dst, bt_buf *src, int T, int src_width, int col0, int n_seg,
                     int seg_len, int seg_stride);
    /* x[i] *= sigmoid(g[i]) for n elements (the gated attention output). */
    int (*mul_sigmoid)(bt_backend *be, bt_buf *x, bt_buf *g, size_t n);
    /* In place over T rows of nv: beta = sigmoid(beta); alpha = a[h] *
     * softplus(alpha + dt[h]) (the log decay; a = -exp(A_log)); a and dt are
     * nv f32 each at a_off / dt_off of vec. softplus(x) = log1p(exp(x)), x
     * itself above 20 (ggml's threshold). */
    int (*gdn_gates)(bt_backend *be, bt_buf *beta, bt_buf *alpha, bt_buf *vec, size_t a_off, size_t dt_off,
                     int T, int nv);
    /* Causal depthwise conv1d of T rows of C channels x with kernel K
     * (w: C*K f32 at w_off of vec, channel c's taps w[c*K + j], j = 0 the
     * oldest), over the K-1 rows of the carried conv state (state: (K-1, C),
     * oldest row first) followed by x; out = silu(conv). The state is then
     * the last K-1 input rows. */
    int (*ssm_conv)(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *state, size_t state_off, bt_buf *vec,
                    size_t w_off, int T, int C, int K);
    /* The gated delta rule, token by token: per value head h (key head
     * h % nk: qwen35's tiled order; grouped: h / (nv/nk), qwen3next), state S (dk rows x dv, at state_off,
     * rows h*dk + r):
     *   S *= exp(g[t,h]);  u = (v[t,h] - S^T k) * beta[t,h];  S += k u^T;
     *   out[t,h] = S^T (q[t,h] / sqrt(dk)).
     * q, k: (T, nk*dk); v, out: (T, nv*dv); g, beta: (T, nv). */
    int (*gdn_recur)(bt_backend *be, bt_buf *out, bt_buf *q, bt_buf *k, bt_buf *v, bt_buf *g, bt_buf *beta,
                     bt_buf *state, size_t state_off, int T, int nk, int nv, int dk, int dv, int grouped);
    /* NEOX rope on the first n_rot dims of each head (pairs (i, i + n_rot/2),
     * tables (ctx_len, n_rot/2)); dims from n_rot on are left alone. */
    int (*rope_neox_part)(bt_backend *be, bt_buf *x, int T, int n_heads, int head_dim, int n_rot, int pos0,
                          bt_buf *cos, bt_buf *sin);

    /* ---- ABI 5: the batched server (continuous batching, paged KV) ----
     * optional: a buffer aliasing `bytes` of b from float offset off (no
     * copy; freed with buf_free, which leaves b alone; b outlives it). Every
     * op takes it as it takes b. NULL: the engine refuses a batched forward
     * on this backend, naming it. */
    int (*buf_view)(bt_backend *be, bt_buf *b, size_t off, size_t bytes, bt_buf **out);

    /* ---- ABI 6: gpt-oss (engine/gptoss.c) ----
     * Each optional: NULL and the engine refuses such a model on this backend
     * with one line naming the op. */
    /* attention (as above) honouring bt_attn_args.sinks, window and sink_p */
    int (*attention_sinks)(bt_backend *be, const bt_attn_args *a);
    /* The clamped SwiGLU (ggml's swiglu_oai) for n elements: x = min(gate,
     * limit), y = clamp(up, -limit, limit), out = x / (1 + exp(-alpha x)) *
     * (y + 1). out may be gate. */
    int (*swiglu_oai)(bt_backend *be, bt_buf *out, bt_buf *gate, bt_buf *up, size_t n, float alpha, float limit);

    /* ---- ABI 7: host work on the backend's threads ----
     * optional: fn(arg, i, ith) for every i < n, spread over the backend's
     * host threads (ith < bt_backend_threads: the calling thread's scratch
     * index), returning when all are done; each i's work is its own, so the
     * result does not depend on who ran it. NULL: the engine runs them in
     * turn (the host parts of multi-head latent attention, engine/mla.c). */
    void (*host_for)(bt_backend *be, int n, void (*fn)(void *arg, int i, int ith), void *arg);

    /* ---- ABI 8: statistics taken by the op that writes the tensor ----
     * optional: gdn_recur, and then the statistics of the state it leaves
     * (nv*dk rows of dv floats at state_off, pos0 0) into *st: the bits
     * `stats` gives for them, final when the call returns. The op can sweep
     * each head's state while it is in the cache of the thread that wrote
     * it, instead of the whole state being read again from the other
     * threads' caches. NULL: gdn_recur, then stats. */
    int (*gdn_recur_stats)(bt_backend *be, bt_buf *out, bt_buf *q, bt_buf *k, bt_buf *v, bt_buf *g, bt_buf *beta,
                           bt_buf *state, size_t state_off, int T, int nk, int nv, int dk, int dv, int grouped,
                           bt_tap_stats *st);
    /* optional: matmul, and then the statistics of out (T rows of `rows`
     * floats, row 0 at position pos0) into *st, the bits `stats` gives,
     * final when the call returns (a decode's output swept by the threads
     * that wrote it). NULL: matmul, then stats. */
    int (*matmul_stats)(bt_backend *be, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x, size_t x_off,
                        int T, bt_buf *out, int pos0, bt_tap_stats *st);
};

/* Every backend handle starts with its vtable; the rest is the backend's. */
struct bt_backend {
    const struct bt_backend_i *iface;
    void *ctx;
};

/* ---- plugins ----
 * A backend plugin (bangtrace-cuda.so) exports exactly one symbol,
 * BT_BACKEND_PLUGIN_ENTRY, of type bt_backend_plugin_init_fn. The registry
 * calls it with BT_BACKEND_ABI_VERSION and the device ordinal; the plugin
 * returns BT_OK and a backend in *out, or a negative BT_E* with a one-line
 * reason in err ("no CUDA driver", "device 3 of 2"), and must refuse an ABI
 * version it was not built for. The ABI version changes whenever
 * struct bt_backend_i, bt_attn_args, bt_mutation, bt_tap_stats, bt_act or
 * bt_backend_mem or bt_numerics change layout (2: rope_neox, add_row,
 * scatter_add, enable, mark, activity, mem_info; 3: num_check, num_round,
 * num_matmul, num_rmsnorm, num_attention; 4: copy_cols, mul_sigmoid, gdn_gates,
 * ssm_conv, gdn_recur, rope_neox_part; 5: bt_attn_args.blocks and
 * block_size, buf_view; 6: bt_attn_args.sinks, sinks_off, window, sink_p,
 * attention_sinks, swiglu_oai; 7: host_for; 8: gdn_recur_stats, matmul_stats); hooks
 * are only ever added at the end. */
#define BT_BACKEND_ABI_VERSION 8
#define BT_BACKEND_PLUGIN_ENTRY "bt_backend_plugin_init"
typedef int (*bt_backend_plugin_init_fn)(int abi_version, int device, bt_backend **out, char *err, size_t errcap);
int bt_backend_plugin_init(int abi_version, int device, bt_backend **out, char *err, size_t errcap);

/* ---- numerics ops with their fallbacks (src/backend/backend.c) ----
 * The backend's hook when it has one, else the generic fallback: operands
 * read to the host, the CPU backend's numerics code run there (one thread,
 * the same bits: every value it computes is independent of the thread
 * count), the result written back with `set`. The matmul fallback converts
 * the input on the host and runs the backend's own matmul on a scratch copy
 * (bt_numerics_mm_plain: no copy at all); with f16 accumulation it returns
 * BT_EUNSUPPORTED naming num_matmul. bt_backend_num_check: the backend's
 * num_check, else that rule. */
int bt_backend_num_check(bt_backend *be, const struct bt_numerics *n);
int bt_backend_num_round(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt);
int bt_backend_num_matmul(bt_backend *be, const struct bt_numerics *n, int type, bt_buf *W, int64_t rows,
                          int64_t cols, bt_buf *x, size_t x_off, int T, bt_buf *out);
int bt_backend_num_rmsnorm(bt_backend *be, const struct bt_numerics *n, bt_buf *out, bt_buf *x, bt_buf *w,
                           size_t w_off, int T, int width, float eps);
int bt_backend_num_attention(bt_backend *be, const struct bt_numerics *n, const bt_attn_args *a);

/* Kernel family names ("matmul"), for backends' kernel_name. */
const char *bt_kop_name(int kop);

#endif
