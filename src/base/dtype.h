/* dtype.h - the table of ggml weight types (src/base/dtype.c): id, name,
 * block size, bytes per block. The model loaders, the engine, the backends
 * and the trace all read it; nothing here computes. */
#ifndef BT_DTYPE_H
#define BT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* ggml type ids, same numbering as ggml/GGUF. */
enum bt_dtype {
    BT_DT_F32 = 0, BT_DT_F16 = 1, BT_DT_Q4_0 = 2, BT_DT_Q4_1 = 3,
    BT_DT_Q5_0 = 6, BT_DT_Q5_1 = 7, BT_DT_Q8_0 = 8, BT_DT_Q8_1 = 9,
    BT_DT_Q2_K = 10, BT_DT_Q3_K = 11, BT_DT_Q4_K = 12, BT_DT_Q5_K = 13,
    BT_DT_Q6_K = 14, BT_DT_Q8_K = 15,
    BT_DT_I8 = 24, BT_DT_I16 = 25, BT_DT_I32 = 26, BT_DT_I64 = 27, BT_DT_F64 = 28,
    BT_DT_BF16 = 30, BT_DT_MXFP4 = 39,
    BT_DT_COUNT = 40
};

typedef struct bt_dtype_info {
    const char *name;   /* "q4_1"; NULL for ids we do not know at all */
    int blck;           /* elements per block */
    size_t type_size;   /* bytes per block */
    bool compute;       /* dequant + dot implemented (usable as a weight) */
} bt_dtype_info;

/* Info for a type id; name == NULL if the id is unknown. Never NULL. */
const bt_dtype_info *bt_dtype(int type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t bt_dtype_row_size(int type, int64_t n);

/* Byte offsets of the f16 scale (and min) fields inside one block of a
 * quantized type; returns how many (0: none). A flipped exponent bit there
 * poisons a whole block, so inspect scans them. */
int bt_dtype_scale_offsets(int type, int off[2]);
/* Byte offset of a block's E8M0 shared exponent (one unsigned byte e, the
 * scale 2^(e-127); the OCP MX spec makes e = 0xFF NaN), or -1 for a type
 * without one. Only mxfp4 has one, at offset 0; it has no f16 fields. */
int bt_dtype_e8m0_offset(int type);
/* Whether one block of `type` has a non-finite scale: an f16 scale or min
 * with every exponent bit set (Inf or NaN), or an E8M0 exponent of 0xFF
 * (NaN in the MX spec; ggml and gguf-py, and the dequantizers here, decode
 * it as the scale 2^128, so every weight but 0 and +-2^127 is +-Inf).
 * false for a type without block scales. */
bool bt_dtype_block_scale_bad(int type, const uint8_t *block);

#endif
