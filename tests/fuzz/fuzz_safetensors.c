/* fuzz_safetensors.c - the safetensors header validator
 * (bt_safetensors_open_buffer): after BT_OK every tensor lies inside the
 * buffer with exactly shape x dtype-size bytes, names are unique and
 * findable; otherwise an error with a message and no handle. */
#include "fuzz.h"
#include "model/safetensors.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc; (void)argv; bt_log_level = 0; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_safetensors *st = NULL;
    if (bt_safetensors_open_buffer(data, size, "fuzz.safetensors", &st) != BT_OK) {
        FUZZ_CHECK(!st && bt_errmsg()[0]);
        return 0;
    }
    uint64_t covered = 0;
    for (int64_t i = 0; i < bt_safetensors_n_tensors(st); i++) {
        const bt_st_tensor *t = bt_safetensors_tensor_at(st, i);
        FUZZ_CHECK(t && t->name && t->dtype_name && t->n_dims >= 0 && t->n_dims <= BT_ST_MAX_DIMS);
        FUZZ_CHECK(bt_safetensors_find(st, t->name) == t);
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= data + 8 && p + t->nbytes <= data + size);
        if (t->nbytes) { volatile uint8_t c = p[0] ^ p[t->nbytes - 1]; (void)c; }
        covered += t->nbytes;
    }
    FUZZ_CHECK(covered <= size);
    FUZZ_CHECK(bt_safetensors_find(st, "\x01no such tensor") == NULL);
    bt_safetensors_close(st);
    return 0;
}
