/* kernels.cu - the CUDA kernels of the backend plugin and their launchers.
 *
 * Every kernel's arithmetic is a math.cuh function that tests/test_cuda_math
 * checks on the host against the CPU kernels; this file only maps it onto
 * threads, in the order math.cuh's emulations assume (lane l of a warp takes
 * chunks l, l+32, ...; blocks fold by a shared-memory tree).
 *
 * Matmul is one kernel for decode and prefill: a warp per weight row, up to
 * BT_CU_TILE_T tokens per block reusing each dequantized chunk (held in
 * registers) for every token of the tile. Each (row, token) value runs the
 * same operations in the same order whatever T is, so the kernel is batch
 * invariant like the CPU's (backend_impl.h requires it), and it needs no
 * cuBLAS: no second library in the plugin, no dequantized weight copies.
 * Prompts here are short; a tensor-core GEMM for long prefills is a later
 * optimisation, not a correctness matter.
 *
 * Launchers return cudaError_t and never synchronise; each takes the
 * backend's stream, so a graph capture records them. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "math.cuh"
#include "cuda_impl.h"

#define BT_CU_TILE_T 8
#define BT_CU_ROWS_PER_BLOCK 4

__global__ void bt_k_get_rows(int type, const uint8_t *table, size_t row_bytes, int64_t width,
                              const int32_t *ids, float *out)
{
    int t = blockIdx.x;
    const uint8_t *row = table + (size_t)ids[t] * row_bytes;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
        out[(size_t)t * width + i] = bt_cu_dq_at(type, row, i);
}

__global__ void bt_k_rmsnorm(float *out, const float *x, const float *w, int width, float eps)
{
    __shared__ double part[BT_CU_NT];
    int t = blockIdx.x, tid = threadIdx.x;
    const float *xr = x + (size_t)t * width;
    double s = 0.0;
    for (int i = tid; i < width; i += BT_CU_NT) s = fma((double)xr[i], (double)xr[i], s);
    part[tid] = s;
    __syncthreads();
    for (int k = BT_CU_NT / 2; k > 0; k /= 2) {
        if (tid < k) part[tid] += part[tid + k];
        __syncthreads();
    }
    float sc = bt_cu_rms_scale(part[0], width, eps);
    for (int i = tid; i < width; i += BT_CU_NT) out[(size_t)t * width + i] = bt_cu_rms_apply(xr[i], sc, w[i]);
}

/* Warp w of the block takes weight row blockIdx.x*4 + w, tokens
 * blockIdx.y*8 .. +8. */
__global__ void bt_k_matmul(int type, const uint8_t *W, size_t row_bytes, int64_t rows, int64_t cols,
                            const float *x, int T, float *out)
{
    int lane = threadIdx.x % BT_CU_WARP, warp = threadIdx.x / BT_CU_WARP;
    int64_t r = (int64_t)blockIdx.x * BT_CU_ROWS_PER_BLOCK + warp;
    int t0 = blockIdx.y * BT_CU_TILE_T;
    int nt = T - t0 < BT_CU_TILE_T ? T - t0 : BT_CU_TILE_T;
    if (r >= rows) return;     /* whole warps only: the shuffles below stay full */
    const uint8_t *row = W + (size_t)r * row_bytes;
    float s[BT_CU_TILE_T];
#pragma unroll
    for (int t = 0; t < BT_CU_TILE_T; t++) s[t] = 0.0f;
    for (int64_t c = lane; c * BT_CU_CHUNK < cols; c += BT_CU_WARP) {
        int64_t i0 = c * BT_CU_CHUNK;
        float w[BT_CU_CHUNK];
#pragma unroll
        for (int k = 0; k < BT_CU_CHUNK; k++) w[k] = bt_cu_dq_at(type, row, i0 + k);
#pragma unroll
        for (int t = 0; t < BT_CU_TILE_T; t++) {
            if (t < nt) {
                const float *xt = x + (size_t)(t0 + t) * cols + i0;
#pragma unroll
                for (int k = 0; k < BT_CU_CHUNK; k++) s[t] = fmaf(w[k], xt[k], s[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < BT_CU_TILE_T; t++) {
        float v = s[t];
        for (int off = BT_CU_WARP / 2; off > 0; off /= 2) v = v + __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0 && t < nt) out[(size_t)(t0 + t) * rows + r] = v;
    }
}

__global__ void bt_k_rope(float *x, int n_heads, int head_dim, int pos0, const float *cs, const float *sn)
{
    int t = blockIdx.x, half = head_dim / 2;
    const float *c = cs + (size_t)(pos0 + t) * half, *s = sn + (size_t)(pos0 + t) * half;
    float *xr = x + (size_t)t * n_heads * head_dim;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        int h = j / half, i = j % half;
        float *p = xr + h * head_dim + 2 * i;
        bt_cu_rope_pair(&p[0], &p[1], c[i], s[i]);
    }
}

/* NEOX rope (qwen2, qwen3): pair (i, i + half) of each head, the same
 * rounding as the CPU's cpu_rope_neox. */
__global__ void bt_k_rope_neox(float *x, int n_heads, int head_dim, int pos0, const float *cs, const float *sn)
{
    int t = blockIdx.x, half = head_dim / 2;
    const float *c = cs + (size_t)(pos0 + t) * half, *s = sn + (size_t)(pos0 + t) * half;
    float *xr = x + (size_t)t * n_heads * head_dim;
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        int h = j / half, i = j % half;
        float *p = xr + h * head_dim;
        bt_cu_rope_pair(&p[i], &p[i + half], c[i], s[i]);
    }
}

/* x[t*width + i] += b[i]: a bias on every row. */
__global__ void bt_k_add_row(float *x, const float *b, int width, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = bt_add(x[i], b[i % (size_t)width]);
}

/* One block per (head, token); scores and probabilities go through a
 * global scratch row of ctx_len floats per (token, head). */
__global__ void bt_k_attention(const float *q, const float *kc, const float *vc, float *out, float *scratch,
                               int pos0, int n_heads, int n_kv_heads, int head_dim, int ctx_len)
{
    __shared__ float red[BT_CU_NT];
    int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    int pos = pos0 + t, n = pos + 1, kv_dim = n_kv_heads * head_dim, q_dim = n_heads * head_dim;
    int kvh = h / (n_heads / n_kv_heads);
    const float *qh = q + (size_t)t * q_dim + h * head_dim;
    float *att = scratch + ((size_t)t * n_heads + h) * ctx_len;
    float scale = 1.0f / sqrtf((float)head_dim);
    float mx = -INFINITY;
    for (int p = tid; p < n; p += BT_CU_NT) {
        const float *k = kc + (size_t)p * kv_dim + kvh * head_dim;
        float d = 0.0f;
        for (int i = 0; i < head_dim; i++) d = fmaf(k[i], qh[i], d);
        float sc = bt_mul(d, scale);
        att[p] = sc;
        mx = sc > mx ? sc : mx;
    }
    red[tid] = mx;
    __syncthreads();
    for (int k = BT_CU_NT / 2; k > 0; k /= 2) {
        if (tid < k) red[tid] = red[tid + k] > red[tid] ? red[tid + k] : red[tid];
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float part = 0.0f;
    for (int p = tid; p < n; p += BT_CU_NT) {
        float e = expf(att[p] - mx);
        att[p] = e;
        part += e;
    }
    red[tid] = part;
    __syncthreads();
    for (int k = BT_CU_NT / 2; k > 0; k /= 2) {
        if (tid < k) red[tid] += red[tid + k];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int i = tid; i < head_dim; i += BT_CU_NT) {
        float acc = 0.0f;
        for (int p = 0; p < n; p++) {
            const float *v = vc + (size_t)p * kv_dim + kvh * head_dim;
            acc = bt_add(acc, bt_mul(bt_mul(att[p], inv), v[i]));
        }
        out[(size_t)t * q_dim + h * head_dim + i] = acc;
    }
}

__global__ void bt_k_swiglu(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = bt_mul(__fdiv_rn(g, bt_add(1.0f, expf(-g))), up[i]);
    }
}

__global__ void bt_k_add(float *x, const float *y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = bt_add(x[i], y[i]);
}

/* num_round: f16 / bf16 one thread per value; q8 one thread per block of
 * 32 (blocks run along each row of width; a partial last block is left). */
__global__ void bt_k_num_round(float *x, size_t rows, size_t width, int fmt)
{
    size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (fmt == BT_CU_NUM_Q8_0 || fmt == BT_CU_NUM_Q8_1) {
        size_t nb = width / 32;
        for (size_t u = i0; u < rows * nb; u += stride) bt_cu_num_round_q8(x + (u / nb) * width + (u % nb) * 32);
        return;
    }
    for (size_t i = i0; i < rows * width; i += stride) x[i] = bt_cu_num_round1(fmt, x[i]);
}

/* One block reduces one tensor into slots[slot] (the per-step array). */
__global__ void bt_k_stats(const float *x, int64_t n, bt_cu_stats *slots, int slot)
{
    __shared__ bt_cu_stats acc[BT_CU_STATS_THREADS];
    int tid = threadIdx.x;
    bt_cu_stats a;
    bt_cu_stats_thread(x, n, tid, BT_CU_STATS_THREADS, &a);
    acc[tid] = a;
    __syncthreads();
    for (int k = BT_CU_STATS_THREADS / 2; k > 0; k /= 2) {
        bt_cu_stats_fold(acc, tid, k);
        __syncthreads();
    }
    if (tid == 0) slots[slot] = acc[0];
}

__global__ void bt_k_inject(float *x, int width, int kind, float value, int row0, int row1, long col0, long col1,
                            int step, int layer, int op, int pos0, unsigned long long *changed)
{
    long cols = col1 - col0;
    long total = (long)(row1 - row0) * cols;
    for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (long)gridDim.x * blockDim.x) {
        int r = row0 + (int)(k / cols);
        long j = col0 + k % cols;
        float *p = x + (size_t)r * width + j;
        float old = *p, v = bt_cu_inject_value(kind, old, value, step, layer, op, pos0 + r, j);
        if (__float_as_uint(old) != __float_as_uint(v)) {
            *p = v;
            atomicAdd(changed, 1ull);
        }
    }
}

/* ---- launchers ---- */

static unsigned grid_for(size_t n, unsigned threads)
{
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

cudaError_t bt_cu_get_rows(cudaStream_t s, int type, const void *table, size_t row_bytes, int64_t width,
                           const int32_t *ids, int n, float *out)
{
    bt_k_get_rows<<<n, BT_CU_NT, 0, s>>>(type, (const uint8_t *)table, row_bytes, width, ids, out);
    return cudaGetLastError();
}

cudaError_t bt_cu_rmsnorm(cudaStream_t s, float *out, const float *x, const float *w, int T, int width, float eps)
{
    bt_k_rmsnorm<<<T, BT_CU_NT, 0, s>>>(out, x, w, width, eps);
    return cudaGetLastError();
}

cudaError_t bt_cu_matmul(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols,
                         const float *x, int T, float *out)
{
    dim3 grid((unsigned)((rows + BT_CU_ROWS_PER_BLOCK - 1) / BT_CU_ROWS_PER_BLOCK),
              (unsigned)((T + BT_CU_TILE_T - 1) / BT_CU_TILE_T));
    bt_k_matmul<<<grid, BT_CU_ROWS_PER_BLOCK * BT_CU_WARP, 0, s>>>(type, (const uint8_t *)W, row_bytes, rows, cols,
                                                                  x, T, out);
    return cudaGetLastError();
}

cudaError_t bt_cu_rope(cudaStream_t s, float *x, int T, int n_heads, int head_dim, int pos0, const float *cs,
                       const float *sn)
{
    bt_k_rope<<<T, BT_CU_NT, 0, s>>>(x, n_heads, head_dim, pos0, cs, sn);
    return cudaGetLastError();
}

cudaError_t bt_cu_rope_neox(cudaStream_t s, float *x, int T, int n_heads, int head_dim, int pos0, const float *cs,
                            const float *sn)
{
    bt_k_rope_neox<<<T, BT_CU_NT, 0, s>>>(x, n_heads, head_dim, pos0, cs, sn);
    return cudaGetLastError();
}

cudaError_t bt_cu_add_row(cudaStream_t s, float *x, int T, int width, const float *b)
{
    size_t n = (size_t)T * (size_t)width;
    bt_k_add_row<<<grid_for(n, BT_CU_NT), BT_CU_NT, 0, s>>>(x, b, width, n);
    return cudaGetLastError();
}

cudaError_t bt_cu_num_round(cudaStream_t s, float *x, size_t rows, size_t width, int fmt)
{
    size_t n = fmt == BT_CU_NUM_Q8_0 || fmt == BT_CU_NUM_Q8_1 ? rows * (width / 32) : rows * width;
    if (!n) return cudaSuccess;
    bt_k_num_round<<<grid_for(n, BT_CU_NT), BT_CU_NT, 0, s>>>(x, rows, width, fmt);
    return cudaGetLastError();
}

cudaError_t bt_cu_attention(cudaStream_t s, const float *q, const float *kc, const float *vc, float *out,
                            float *scratch, int T, int pos0, int n_heads, int n_kv_heads, int head_dim, int ctx_len)
{
    dim3 grid((unsigned)n_heads, (unsigned)T);
    bt_k_attention<<<grid, BT_CU_NT, 0, s>>>(q, kc, vc, out, scratch, pos0, n_heads, n_kv_heads, head_dim, ctx_len);
    return cudaGetLastError();
}

cudaError_t bt_cu_swiglu(cudaStream_t s, float *out, const float *gate, const float *up, size_t n)
{
    bt_k_swiglu<<<grid_for(n, BT_CU_NT), BT_CU_NT, 0, s>>>(out, gate, up, n);
    return cudaGetLastError();
}

cudaError_t bt_cu_add(cudaStream_t s, float *x, const float *y, size_t n)
{
    bt_k_add<<<grid_for(n, BT_CU_NT), BT_CU_NT, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t bt_cu_stats_launch(cudaStream_t s, const float *x, int64_t n, bt_cu_stats *slots, int slot)
{
    bt_k_stats<<<1, BT_CU_STATS_THREADS, 0, s>>>(x, n, slots, slot);
    return cudaGetLastError();
}

cudaError_t bt_cu_inject(cudaStream_t s, float *x, int width, int kind, float value, int row0, int row1, long col0,
                         long col1, int step, int layer, int op, int pos0, unsigned long long *changed)
{
    size_t total = (size_t)(row1 - row0) * (size_t)(col1 - col0);
    if (total == 0) return cudaSuccess;
    bt_k_inject<<<grid_for(total, BT_CU_NT), BT_CU_NT, 0, s>>>(x, width, kind, value, row0, row1, col0, col1, step,
                                                               layer, op, pos0, changed);
    return cudaGetLastError();
}
