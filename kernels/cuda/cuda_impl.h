/* cuda_impl.h - private to the CUDA plugin: the kernel launchers of
 * kernels.cu that backend_cuda.cu calls. Each enqueues on stream s, never
 * synchronises, and returns the launch's cudaError_t. Pointers are device
 * pointers; sizes are elements unless the name says bytes. */
#ifndef BT_CUDA_IMPL_H
#define BT_CUDA_IMPL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "math.cuh"

#define BT_CU_NT 256          /* threads of the row-wise kernels (a power of two) */

cudaError_t bt_cu_get_rows(cudaStream_t s, int type, const void *table, size_t row_bytes, int64_t width,
                           const int32_t *ids, int n, float *out);
cudaError_t bt_cu_rmsnorm(cudaStream_t s, float *out, const float *x, const float *w, int T, int width, float eps);
cudaError_t bt_cu_matmul(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t rows, int64_t cols,
                         const float *x, int T, float *out);
cudaError_t bt_cu_rope(cudaStream_t s, float *x, int T, int n_heads, int head_dim, int pos0, const float *cs,
                       const float *sn);
cudaError_t bt_cu_rope_neox(cudaStream_t s, float *x, int T, int n_heads, int head_dim, int pos0, const float *cs,
                            const float *sn);
cudaError_t bt_cu_add_row(cudaStream_t s, float *x, int T, int width, const float *b);
cudaError_t bt_cu_attention(cudaStream_t s, const float *q, const float *kc, const float *vc, float *out,
                            float *scratch, int T, int pos0, int n_heads, int n_kv_heads, int head_dim, int ctx_len);
/* Round rows x width values in place to a numerics storage format
 * (BT_CU_NUM_*: bt_cu_num_round_row on each row). */
cudaError_t bt_cu_num_round(cudaStream_t s, float *x, size_t rows, size_t width, int fmt);
cudaError_t bt_cu_swiglu(cudaStream_t s, float *out, const float *gate, const float *up, size_t n);
cudaError_t bt_cu_add(cudaStream_t s, float *x, const float *y, size_t n);
cudaError_t bt_cu_stats_launch(cudaStream_t s, const float *x, int64_t n, bt_cu_stats *slots, int slot);
cudaError_t bt_cu_inject(cudaStream_t s, float *x, int width, int kind, float value, int row0, int row1, long col0,
                         long col1, int step, int layer, int op, int pos0, unsigned long long *changed);

#endif
