/* dequant.c - scalar dequantizers: the reference for every SIMD variant and
 * for tests/dequant_check.py, which compares them bit for bit with the gguf
 * Python package.
 *
 * Block layouts are ggml's, read byte by byte (blocks in a file are not
 * aligned). Each value is computed with the same operations, in the same
 * order, as ggml and gguf.quants: e.g. q4_1 is (d*q) + m with two roundings,
 * k-quants are (d*sc)*q - (dmin*m), mxfp4 is kvalue * 2^(e-128). Each
 * product of an f16 scale (11 significant bits) with small integers (at
 * most 13 more bits) is exact in f32, and so is a power of two times
 * mxfp4's small integers (or it overflows to Inf), so a compiler that fuses
 * multiply and add (-march=native) cannot change a result; q4_1/q5_1 still
 * keep BT_NOFUSE_F to mirror the SIMD code, which makes that explicit. */
#include <string.h>

#include "kernels_impl.h"
#include "base/util.h"


static void dq_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void dq_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = rd_f16(p + 2 * i);
}

static void dq_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = bt_bf16_to_f32(h);
    }
}

/* block_q4_0: f16 d; u8 qs[16]. Low nibbles are elements 0..15, high
 * nibbles 16..31; value (q - 8) * d. */
static void dq_q4_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 18, dst += QK) {
        float d = rd_f16(b);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((b[2 + j] & 0xF) - 8) * d;
            dst[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

/* block_q4_1: f16 d; f16 m; u8 qs[16]; value q * d + m. */
static void dq_q4_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 20, dst += QK) {
        float d = rd_f16(b), m = rd_f16(b + 2);
        for (int j = 0; j < 16; j++) {
            float lo = d * (float)(b[4 + j] & 0xF), hi = d * (float)(b[4 + j] >> 4);
            BT_NOFUSE_F(lo);
            BT_NOFUSE_F(hi);
            dst[j] = lo + m;
            dst[j + 16] = hi + m;
        }
    }
}

/* block_q5_0: f16 d; u32 qh (bit j = 5th bit of element j); u8 qs[16];
 * value (q - 16) * d. */
static void dq_q5_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 22, dst += QK) {
        float d = rd_f16(b);
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        for (int j = 0; j < 16; j++) {
            int lo = (b[6 + j] & 0xF) | ((qh >> j) & 1) << 4;
            int hi = (b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

/* block_q5_1: f16 d; f16 m; u32 qh; u8 qs[16]; value q * d + m. */
static void dq_q5_1(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 24, dst += QK) {
        float d = rd_f16(b), m = rd_f16(b + 2);
        uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
        for (int j = 0; j < 16; j++) {
            int ql = (b[8 + j] & 0xF) | ((qh >> j) & 1) << 4;
            int qh2 = (b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            float lo = d * (float)ql, hi = d * (float)qh2;
            BT_NOFUSE_F(lo);
            BT_NOFUSE_F(hi);
            dst[j] = lo + m;
            dst[j + 16] = hi + m;
        }
    }
}

/* block_q8_0: f16 d; i8 qs[32]; value q * d. */
static void dq_q8_0(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 34, dst += QK) {
        float d = rd_f16(b);
        for (int j = 0; j < QK; j++)
            dst[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* block_mxfp4: u8 e (E8M0); u8 qs[16] (E2M1 codes); value kvalues[q] *
 * 2^(e-128), as ggml's dequantize_row_mxfp4 and gguf.quants.MXFP4. */
const int8_t bt_kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

static void dq_mxfp4(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK; i++, b += 17, dst += QK) {
        float d = bt_e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)bt_kvalues_mxfp4[b[1 + j] & 0xF] * d;
            dst[j + 16] = (float)bt_kvalues_mxfp4[b[1 + j] >> 4] * d;
        }
    }
}

/* block_q2_K: u8 scales[16] (low nibble scale, high nibble min, one per 16
 * elements); u8 qs[64] (2 bits); f16 d; f16 dmin. Element e sits in
 * qs[(e/128)*32 + e%32] at bit 2*((e%128)/32). */
static void dq_q2_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 84) {
        const uint8_t *sc = b;
        float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
        for (int half = 0; half < 2; half++) {
            const uint8_t *qs = b + 16 + 32 * half;
            for (int j = 0; j < 4; j++, sc += 2, dst += 32) {
                float dl0 = d * (float)(sc[0] & 0xF), ml0 = dmin * (float)(sc[0] >> 4);
                float dl1 = d * (float)(sc[1] & 0xF), ml1 = dmin * (float)(sc[1] >> 4);
                for (int l = 0; l < 16; l++) {
                    dst[l] = dl0 * (float)((qs[l] >> (2 * j)) & 3) - ml0;
                    dst[l + 16] = dl1 * (float)((qs[l + 16] >> (2 * j)) & 3) - ml1;
                }
            }
        }
    }
}

/* block_q3_K: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 six-bit scales,
 * offset 32); f16 d. The high bit of element e is bit (e/128)*4 +
 * (e%128)/32 of hmask[e%32]; a clear bit means subtract 4. */
static void dq_q3_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 110) {
        const uint8_t *hm = b, *s = b + 96;
        float d = rd_f16(b + 108);
        float dl[16];
        for (int k = 0; k < 16; k++) {
            int lo = k < 8 ? s[k] & 0xF : s[k - 8] >> 4;
            int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
            dl[k] = d * (float)((lo | hi << 4) - 32);
        }
        for (int half = 0; half < 2; half++) {
            const uint8_t *qs = b + 32 + 32 * half;
            for (int j = 0; j < 4; j++, dst += 32) {
                int shift = 2 * j, hbit = half * 4 + j;
                float d0 = dl[half * 8 + 2 * j], d1 = dl[half * 8 + 2 * j + 1];
                for (int l = 0; l < 32; l++) {
                    int q = ((qs[l] >> shift) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
                    dst[l] = (l < 16 ? d0 : d1) * (float)q;
                }
            }
        }
    }
}

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* block_q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Each 64 elements
 * share 32 bytes: low nibbles first, then high nibbles. */
static void dq_q4_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 144) {
        float d = rd_f16(b), dmin = rd_f16(b + 2);
        const uint8_t *s = b + 4, *q = b + 16;
        for (int sub = 0; sub < 8; sub += 2, q += 32, dst += 64) {
            int sc0, m0, sc1, m1;
            scale_min_k4(sub, s, &sc0, &m0);
            scale_min_k4(sub + 1, s, &sc1, &m1);
            float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                dst[l] = d0 * (float)(q[l] & 0xF) - dm0;
                dst[l + 32] = d1 * (float)(q[l] >> 4) - dm1;
            }
        }
    }
}

/* block_q5_K: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. Like
 * q4_K plus a 5th bit: bit `sub` of qh[l]. */
static void dq_q5_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 176) {
        float d = rd_f16(b), dmin = rd_f16(b + 2);
        const uint8_t *s = b + 4, *qh = b + 16, *q = b + 48;
        for (int sub = 0; sub < 8; sub += 2, q += 32, dst += 64) {
            int sc0, m0, sc1, m1;
            scale_min_k4(sub, s, &sc0, &m0);
            scale_min_k4(sub + 1, s, &sc1, &m1);
            float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                int v0 = (q[l] & 0xF) | ((qh[l] >> sub) & 1) << 4;
                int v1 = (q[l] >> 4) | ((qh[l] >> (sub + 1)) & 1) << 4;
                dst[l] = d0 * (float)v0 - dm0;
                dst[l + 32] = d1 * (float)v1 - dm1;
            }
        }
    }
}

/* block_q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Per 128
 * elements: 64 ql bytes (low nibbles = elements 0..63, high = 64..127) and
 * 32 qh bytes holding 2 bits for each of four groups of 32. */
static void dq_q6_k(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += 210) {
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = rd_f16(b + 208);
        for (int half = 0; half < 2; half++, dst += 128) {
            const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
            const int8_t *s = sc + 8 * half;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                dst[l] = (d * (float)s[is]) * (float)q1;
                dst[l + 32] = (d * (float)s[is + 2]) * (float)q2;
                dst[l + 64] = (d * (float)s[is + 4]) * (float)q3;
                dst[l + 96] = (d * (float)s[is + 6]) * (float)q4;
            }
        }
    }
}

void bt_kv_dequant_scalar_fill(bt_kvariant *kv)
{
    kv->dequant[BT_DT_F32] = dq_f32;
    kv->dequant[BT_DT_F16] = dq_f16;
    kv->dequant[BT_DT_BF16] = dq_bf16;
    kv->dequant[BT_DT_Q4_0] = dq_q4_0;
    kv->dequant[BT_DT_Q4_1] = dq_q4_1;
    kv->dequant[BT_DT_Q5_0] = dq_q5_0;
    kv->dequant[BT_DT_Q5_1] = dq_q5_1;
    kv->dequant[BT_DT_Q8_0] = dq_q8_0;
    kv->dequant[BT_DT_MXFP4] = dq_mxfp4;
    kv->dequant[BT_DT_Q2_K] = dq_q2_k;
    kv->dequant[BT_DT_Q3_K] = dq_q3_k;
    kv->dequant[BT_DT_Q4_K] = dq_q4_k;
    kv->dequant[BT_DT_Q5_K] = dq_q5_k;
    kv->dequant[BT_DT_Q6_K] = dq_q6_k;
}
