/* dtype.c - the table of ggml weight types: name, block size, bytes per
 * block, and whether the CPU kernels can compute with it.
 *
 * Ids and sizes follow ggml/GGUF exactly, so tensor sizes computed here
 * match the file. Ids ggml retired (31-33, 36-38) stay unknown (name NULL). */
#include "base/dtype.h"

#define QK_K 256

static const bt_dtype_info dtypes[BT_DT_COUNT] = {
    [BT_DT_F32]  = { "f32",  1, 4, true },
    [BT_DT_F16]  = { "f16",  1, 2, true },
    [BT_DT_Q4_0] = { "q4_0", 32, 2 + 16, true },
    [BT_DT_Q4_1] = { "q4_1", 32, 2 + 2 + 16, true },
    [BT_DT_Q5_0] = { "q5_0", 32, 2 + 4 + 16, true },
    [BT_DT_Q5_1] = { "q5_1", 32, 2 + 2 + 4 + 16, true },
    [BT_DT_Q8_0] = { "q8_0", 32, 2 + 32, true },
    /* ggml's block_q8_1 is two halves (d, s) + 32 int8 = 36 bytes; it only
     * ever holds activations, never file weights. */
    [BT_DT_Q8_1] = { "q8_1", 32, 2 + 2 + 32, false },
    [BT_DT_Q2_K] = { "q2_k", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, true },
    [BT_DT_Q3_K] = { "q3_k", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, true },
    [BT_DT_Q4_K] = { "q4_k", QK_K, 2 + 2 + 12 + QK_K / 2, true },
    [BT_DT_Q5_K] = { "q5_k", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true },
    [BT_DT_Q6_K] = { "q6_k", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, true },
    [BT_DT_Q8_K] = { "q8_k", QK_K, 4 + QK_K + QK_K / 8, false },
    [16] = { "iq2_xxs", QK_K, 2 + QK_K / 4, false },
    [17] = { "iq2_xs",  QK_K, 2 + QK_K / 4 + QK_K / 32, false },
    [18] = { "iq3_xxs", QK_K, 2 + QK_K / 4 + QK_K / 8, false },
    [19] = { "iq1_s",   QK_K, 2 + QK_K / 8 + QK_K / 16, false },
    [20] = { "iq4_nl",  32, 2 + 16, false },
    [21] = { "iq3_s",   QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false },
    [22] = { "iq2_s",   QK_K, 2 + QK_K / 4 + QK_K / 16, false },
    [23] = { "iq4_xs",  QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, false },
    [BT_DT_I8]  = { "i8",  1, 1, false },
    [BT_DT_I16] = { "i16", 1, 2, false },
    [BT_DT_I32] = { "i32", 1, 4, false },
    [BT_DT_I64] = { "i64", 1, 8, false },
    [BT_DT_F64] = { "f64", 1, 8, false },
    [29] = { "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, false },
    [BT_DT_BF16] = { "bf16", 1, 2, true },
    [34] = { "tq1_0", QK_K, 2 + 4 * 13, false },
    [35] = { "tq2_0", QK_K, 2 + 64, false },
    /* u8 e (E8M0 shared exponent); u8 qs[16] (E2M1 codes, two per byte) */
    [BT_DT_MXFP4] = { "mxfp4", 32, 1 + 16, true },
};

static const bt_dtype_info unknown = { NULL, 0, 0, false };

const bt_dtype_info *bt_dtype(int type)
{
    if (type < 0 || type >= BT_DT_COUNT || !dtypes[type].name)
        return &unknown;
    return &dtypes[type];
}

size_t bt_dtype_row_size(int type, int64_t n)
{
    const bt_dtype_info *ti = bt_dtype(type);
    if (!ti->name || n < 0 || n % ti->blck != 0)
        return 0;
    return (size_t)(n / ti->blck) * ti->type_size;
}

int bt_dtype_scale_offsets(int type, int off[2])
{
    switch (type) {
    case BT_DT_Q4_0: case BT_DT_Q5_0: case BT_DT_Q8_0: off[0] = 0; return 1;
    case BT_DT_Q4_1: case BT_DT_Q5_1: case BT_DT_Q4_K: case BT_DT_Q5_K: off[0] = 0; off[1] = 2; return 2;
    case BT_DT_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case BT_DT_Q3_K: off[0] = 108; return 1;
    case BT_DT_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

int bt_dtype_e8m0_offset(int type)
{
    return type == BT_DT_MXFP4 ? 0 : -1;
}

bool bt_dtype_block_scale_bad(int type, const uint8_t *block)
{
    int off[2], nf = bt_dtype_scale_offsets(type, off);
    for (int k = 0; k < nf; k++) {
        uint16_t h = (uint16_t)(block[off[k]] | block[off[k] + 1] << 8);   /* little-endian, as in the file */
        if ((h & 0x7c00) == 0x7c00)
            return true;
    }
    int e = bt_dtype_e8m0_offset(type);
    return e >= 0 && block[e] == 0xFF;
}
