/* safetensors.h - read-only safetensors reader over one mmap.
 *
 * File layout: u64 little-endian header length N, N bytes of JSON
 * ({"__metadata__": {str: str}, NAME: {"dtype", "shape", "data_offsets":
 * [begin, end]}}), then the data section; offsets are relative to byte 8+N.
 * bt_safetensors_open() validates the whole header as strictly as the
 * reference implementation (huggingface/safetensors) before it returns:
 * JSON syntax, no duplicate names, known dtypes, shape x dtype size ==
 * end - begin without overflow, and the tensors tile the data section
 * exactly (sorted by offset, no gap, no overlap, nothing past the end).
 * After a successful open every tensor's bytes lie inside the mapping. */
#ifndef BT_SAFETENSORS_H
#define BT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct bt_safetensors bt_safetensors;

#define BT_ST_MAX_DIMS 8

typedef struct bt_st_tensor {
    const char *name;          /* NUL-terminated, owned by the handle */
    const char *dtype_name;    /* "F32", "BF16", ... as in the file */
    int dtype;                 /* bt_dtype id (F32/F16/BF16/I8/...), -1 if bangtrace has none */
    int n_dims;
    int64_t shape[BT_ST_MAX_DIMS]; /* row-major: shape[n_dims-1] is contiguous */
    uint64_t nbytes;
    const void *data;          /* into the mapping */
} bt_st_tensor;

/* Open and validate. Errors: BT_ENOTFOUND/BT_EIO (cannot open/map),
 * BT_EFORMAT with a one-line message naming the file and the problem. The
 * mapping is private and writable (copy on write), so a weight bit flip
 * (--inject) never reaches the file. */
int bt_safetensors_open(const char *path, bt_safetensors **out);
/* The same over a borrowed buffer (must outlive the handle). */
int bt_safetensors_open_buffer(const void *data, size_t size, const char *name, bt_safetensors **out);
void bt_safetensors_close(bt_safetensors *st);       /* NULL is a no-op */

int64_t bt_safetensors_n_tensors(const bt_safetensors *st);
const bt_st_tensor *bt_safetensors_tensor_at(const bt_safetensors *st, int64_t i); /* file order */
const bt_st_tensor *bt_safetensors_find(const bt_safetensors *st, const char *name); /* NULL if absent */
const uint8_t *bt_safetensors_map(const bt_safetensors *st);
uint64_t bt_safetensors_size(const bt_safetensors *st);
const char *bt_safetensors_path(const bt_safetensors *st);

#endif
