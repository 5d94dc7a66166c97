/* kernels_impl.h - private to kernels/cpu and its tests: the per-CPU variant
 * tables behind bt_dequant_row / bt_vec_dot / bt_matmul.
 *
 * A variant is a table of function pointers, one per type id. Every table
 * starts as a copy of the scalar one, and a SIMD variant overrides only the
 * entries it implements, so no entry for a compute type is ever NULL.
 * Invariants every variant keeps (tests/test_kernels.c checks them):
 *   - dequant[t] writes exactly the floats the scalar dequant writes (same
 *     operations in the same order; no fused multiply-add where the scalar
 *     code rounds twice), so dequantized weights never depend on the CPU;
 *   - dot[t] equals the scalar dot up to f32 reassociation, and never hides
 *     a NaN or Inf (no min/max tricks);
 *   - batch invariance: within one variant, every kernel that yields a
 *     (row, token) dot - dot[t], dot4q[t], dot4_f32, dot4x2_f32, dot8x3_f32 on the
 *     dequantized row - runs the same floating-point operations in the same
 *     order, so the value is bit-identical whichever kernel, tile position,
 *     batch size or thread split bt_matmul picks. Each variant fixes one
 *     canonical order, the f32 dot of the dequantized weights w_i (a fused
 *     kernel may build w_i in registers, since each w_i is computed exactly
 *     as dequant[t] computes it):
 *       scalar: s[i % 8] += w_i * x_i (product rounded, then added; never
 *               fused), result ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7));
 *       avx2:   the row is cut into chunks of 8 lanes, the last one
 *               zero-padded (w and x both 0), each added by one FMA into a
 *               single accumulator v, reduced ((v0+v1)+(v2+v3))+((v4+v5)+
 *               (v6+v7)) - one accumulator per (row, token) leaves room for
 *               the 4x2 prefill tile in 16 registers;
 *       avx512: chunks of 16 lanes likewise, chunk c into accumulator c % 2
 *               (two per (row, token); 32 registers hold the 4x2 tile's
 *               16), then v = acc0 + acc1 folded to 8 lanes (v_j +
 *               v_{j+8}) and reduced like avx2.
 *     Every block size (32, 256) is a whole number of chunk pairs, so a
 *     block-by-block kernel keeps the chunk order of a plain f32 loop. */
#ifndef BT_KERNELS_IMPL_H
#define BT_KERNELS_IMPL_H

#include "kernels.h"
#include "base/util.h"

#include <string.h>

typedef void (*bt_dequant_fn)(const void *src, float *dst, int64_t n);
typedef float (*bt_dot_fn)(const void *w, const float *x, int64_t n);
/* out[r] = dot(w + r*ldw, x) for r < 4, all rows f32 of n elements. */
typedef void (*bt_dot4_fn)(const float *w, int64_t ldw, const float *x, int64_t n, float out[4]);
/* Prefill register tile: out[t*4 + r] = dot(w + r*ldw, x + t*ldx) for
 * r < 4, t < 2 (each loaded vector feeds two or four FMAs). */
typedef void (*bt_dot4x2_fn)(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[8]);

/* Decode: out[r] = dot(w + r*row_bytes, x) for r < 4 rows of one type.
 * Interleaving four rows shares the x loads and hides the per-row tail
 * (reduction, call) that dominates short rows like SmolLM2's 576. */
typedef void (*bt_dot4q_fn)(const void *w, size_t row_bytes, const float *x, int64_t n, float out[4]);

typedef struct bt_kvariant {
    const char *name;                  /* "scalar", "avx2", "avx512" */
    bt_dequant_fn dequant[BT_DT_COUNT];
    bt_dot_fn dot[BT_DT_COUNT];
    bt_dot4_fn dot4_f32;
    bt_dot4x2_fn dot4x2_f32;
    /* Optional: the 4x2 tile over one column panel of longer rows, so a
     * panel of four wide rows stays in L1 while every token passes (w, x
     * at the panel's first column; ldw, ldx the whole rows'). acc: 256
     * floats, 64-byte aligned, the tile's accumulators carried from panel
     * to panel (first: start from zero). Every panel but the last is a
     * multiple of 32 columns; the last (out != NULL) takes the row's tail
     * and writes out as dot4x2_f32 would, the same bits (NULL: no panels). */
    void (*dot4x2p_f32)(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float *acc, bool first,
                        float *out);
    bt_dot4q_fn dot4q[BT_DT_COUNT];    /* optional (NULL: one row at a time) */
    /* Optional bigger prefill tile: out[t*8 + r] = dot(w + r*ldw, x +
     * t*ldx) for r < 8, t < 3, in the canonical order (NULL: 4x2 only). */
    void (*dot8x3_f32)(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, float out[24]);
    /* Optional attention score tile: out[j*ldo + p] = dot(k + p*ldk, q +
     * j*ldq) for p < 16 keys, j < nq <= 3 queries, each the bits of the
     * variant's one-row dot (NULL: the 8x3 tile). */
    void (*dot16_f32)(const float *k, int64_t ldk, const float *q, int64_t ldq, int nq, int64_t n, float *out,
                      int64_t ldo);
    int64_t (*sweep_f32)(const float *x, int64_t n, bt_sweep *acc);   /* bt_sweep_f32 */
    int64_t (*sweep_chunks_f32)(const float *x, int64_t nc, bt_sweep_chunk *out);   /* bt_sweep_chunks_f32 */
    void (*wsum_f32)(float *acc, const float *wts, float scale, const float *v, int64_t ldv,
                     int64_t np, int64_t n);                           /* bt_wsum_f32 */
    float (*scale_max_f32)(float *x, int64_t n, float scale);         /* bt_scale_max_f32 */
    /* bt_exp_sub_f32: x[i] = expf(x[i] - m), the subtraction rounded in
     * float; every variant returns the C library's expf bits (exp.c). */
    void (*exp_sub_f32)(float *x, int64_t n, float m);
    /* bt_softmax_sums_f32's chains over k elements whose exponentials e
     * are computed (chain j % 4 for element j, k any length). */
    void (*softmax_acc_f64)(const float *e, const float *x, int64_t k, float m, double z[4], double ez[4]);
    void (*gdn_cols_f32)(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, float decay, const float *k,
                         const float *v, float beta, const float *qs, float *out);   /* one token of bt_gdn_seq_f32 */
    /* Optional (NULL: token by token through gdn_cols_f32): bt_gdn_seq_f32. */
    void (*gdn_seq_f32)(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, int T, const float *decay,
                        const float *k, int64_t ldk, const float *v, int64_t ldv, const float *beta, const float *qs,
                        int64_t ldq, float *out, int64_t ldo);
} bt_kvariant;

/* The reference sweep (dot.c); SIMD sweeps run their last short chunk
 * through it. */
int64_t bt_sweep_f32_scalar(const float *x, int64_t n, bt_sweep *acc);
/* The AVX2 sweep (dot_avx2.c). 8 lanes a chunk is the sweep's defined
 * order: the avx512 table's sweep runs two chunks side by side, one per
 * half of a vector, and hands its last chunk to this one. */
int64_t bt_sweep_f32_avx2(const float *x, int64_t n, bt_sweep *acc);
int64_t bt_sweep_chunks_f32_avx2(const float *x, int64_t nc, bt_sweep_chunk *out);
/* The AVX2 softmax chains (dot_avx2.c), also the avx512 table's. */
void bt_softmax_acc_f64_avx2(const float *e, const float *x, int64_t k, float m, double z[4], double ez[4]);
/* exp.c: the expf loop (the reference) and its bit-exact SIMD replicas;
 * the SIMD ones exist only in x86 GCC/clang builds (the fill functions
 * below install them). */
void bt_exp_sub_f32_scalar(float *x, int64_t n, float m);
/* dot.c: the reference of the softmax chains (kvariant softmax_acc_f64). */
void bt_softmax_acc_f64_scalar(const float *e, const float *x, int64_t k, float m, double z[4], double ez[4]);
/* dot.c: the delta rule's token over columns [c0, c1) of the state, the
 * scalar reference of bt_gdn_seq_f32's token (and the AVX2 variant's tail). */
void bt_gdn_cols_scalar(float *S, int64_t dk, int64_t dv, int64_t c0, int64_t c1, float decay, const float *k,
                        const float *v, float beta, const float *qs, float *out);
void bt_exp_sub_f32_avx2(float *x, int64_t n, float m);
void bt_exp_sub_f32_avx512(float *x, int64_t n, float m);
/* Whether fn gives the linked libm's expf bits on a probe set (exp.c);
 * bt_kernels_init() keeps the scalar loop in a variant where it does not. */
bool bt_exp_sub_f32_matches_libm(void (*fn)(float *x, int64_t n, float m));

/* The table named `name` if this build has it and this CPU can run it, else
 * NULL. Calls bt_kernels_init() first. */
const bt_kvariant *bt_kernels_variant(const char *name);
/* The table chosen by bt_kernels_init(). */
const bt_kvariant *bt_kernels_active(void);
/* Make `name` the active table (tests only; not safe while other threads run
 * kernels). BT_OK, or BT_EUNSUPPORTED if the variant is unavailable here. */
int bt_kernels_force(const char *name);

/* f16 bits -> f32 (from bt_f16_to_f32, so exact; 256 KB, but one model's
 * scales span few exponents, so few lines are hot), filled by
 * bt_kernels_init(). SIMD kernels read block scales through it: the lookup
 * plus a broadcast from memory runs on the load ports, where F16C's
 * convert + broadcast would compete with the dequantization shuffles. */
extern float bt_f16_table[65536];

/* Scalar reference kernels (dequant.c); SIMD files fall back to them. */
void bt_kv_dequant_scalar_fill(bt_kvariant *kv);   /* dequant.c */
/* Fill SIMD tables over a copy of the scalar one. Return false when this
 * build has no such code (non-x86 compiler); CPU support is checked by the
 * caller. */
bool bt_kv_avx2_fill(bt_kvariant *kv);
bool bt_kv_avx512_fill(bt_kvariant *kv);

/* Keeps the compiler from fusing a multiply and a following add into one
 * FMA (GCC contracts across statements by default), so a dequantizer rounds
 * twice like gguf's numpy code. Today every such product (f16 scale times a
 * small integer) is exact and fusing could not change a result; the
 * barrier keeps that guarantee explicit for the q4_1/q5_1 paths. */
#if defined(__x86_64__) || defined(__i386__)
#define BT_NOFUSE_F(v) __asm__("" : "+x"(v))
#define BT_NOFUSE_V(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__)
#define BT_NOFUSE_F(v) __asm__("" : "+w"(v))
#else
#define BT_NOFUSE_F(v) do { volatile float bt_nf_ = (v); (v) = bt_nf_; } while (0)
#endif

/* Block sizes, the scalar f16 scale read and the mxfp4 decoding shared by
 * the reference dequantizers and dot products (and the SIMD files). */
#define QK 32
#define QK_K 256

static inline float rd_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bt_f16_to_f32(h);
}

/* mxfp4 (ggml's block_mxfp4: u8 e; u8 qs[16], low nibbles elements 0..15,
 * high nibbles 16..31). The E2M1 codes as ggml's kvalues_mxfp4 stores
 * them, doubled to integers (dequant.c): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives (code 8, -0 in E2M1, is 0 here as in ggml). */
extern const int8_t bt_kvalues_mxfp4[16];

/* Half the E8M0 scale, 2^(e-128), from its bits as ggml_e8m0_to_fp32_half
 * builds it (e < 2: the subnormals 2^-128, 2^-127). The doubled codes times
 * it are the E2M1 values times 2^(e-127), each product exact (a power of
 * two times a small integer; the subnormal ones are multiples of 2^-149)
 * unless it overflows (from e = 253 on). e = 0xFF, NaN in the MX spec, gives
 * 2^127 here, as in ggml and gguf-py: the scale 2^128, so every weight but
 * 0 and +-2^127 (E2M1 +-0.5) is +-Inf. */
static inline float bt_e8m0_half(uint8_t e)
{
    uint32_t u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
