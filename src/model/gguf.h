/* gguf.h - read-only GGUF v2/v3 reader over one mmap.
 *
 * bt_gguf_open() validates the whole header (magic, version, every key/value,
 * every tensor info, alignment, data offsets against the file size) before it
 * returns, so accessors never read out of bounds. Strings are NOT NUL-
 * terminated in the file: accessors return (pointer, length) pairs that point
 * into the mapping and stay valid until bt_gguf_close(). */
#ifndef BT_GGUF_H
#define BT_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef struct bt_gguf bt_gguf;

/* GGUF metadata value types (numbering from the GGUF spec). */
enum bt_gguf_vtype {
    BT_GGUF_UINT8 = 0, BT_GGUF_INT8 = 1, BT_GGUF_UINT16 = 2, BT_GGUF_INT16 = 3,
    BT_GGUF_UINT32 = 4, BT_GGUF_INT32 = 5, BT_GGUF_FLOAT32 = 6, BT_GGUF_BOOL = 7,
    BT_GGUF_STRING = 8, BT_GGUF_ARRAY = 9, BT_GGUF_UINT64 = 10, BT_GGUF_INT64 = 11,
    BT_GGUF_FLOAT64 = 12, BT_GGUF_VTYPE_COUNT
};
const char *bt_gguf_vtype_name(int vtype);

typedef struct bt_gguf_str { const char *ptr; uint64_t len; } bt_gguf_str;

/* Open and validate. On error returns a BT_E* code with a message naming the
 * path and the problem (e.g. "m.gguf: tensor 'x' data ends past end of file"). */
int bt_gguf_open(const char *path, bt_gguf **out);
/* The same over a buffer already in memory (borrowed: it must outlive the
 * handle); name labels messages. Fuzzers and tests use it. */
int bt_gguf_open_buffer(const void *data, size_t size, const char *name, bt_gguf **out);
void bt_gguf_close(bt_gguf *g);              /* NULL is a no-op */

uint32_t bt_gguf_version(const bt_gguf *g);
uint64_t bt_gguf_alignment(const bt_gguf *g);
const uint8_t *bt_gguf_file_data(const bt_gguf *g); /* whole mapping */
uint64_t bt_gguf_file_size(const bt_gguf *g);
uint64_t bt_gguf_data_offset(const bt_gguf *g);     /* start of tensor data */

/* Metadata. Keys are indexed 0..n_kv-1; bt_gguf_find_key returns -1 if absent. */
int64_t bt_gguf_n_kv(const bt_gguf *g);
int64_t bt_gguf_find_key(const bt_gguf *g, const char *key);
bt_gguf_str bt_gguf_key(const bt_gguf *g, int64_t i);
int bt_gguf_kv_type(const bt_gguf *g, int64_t i);

/* Typed getters by key. Integer getters accept any integer type (and bool)
 * whose value fits; float getters accept FLOAT32/FLOAT64 and integers.
 * Return BT_OK, BT_ENOTFOUND (key missing), or BT_EFORMAT (wrong type /
 * does not fit) with a message naming the key. */
int bt_gguf_get_u32(const bt_gguf *g, const char *key, uint32_t *out);
int bt_gguf_get_i64(const bt_gguf *g, const char *key, int64_t *out);
int bt_gguf_get_f32(const bt_gguf *g, const char *key, float *out);
int bt_gguf_get_bool(const bt_gguf *g, const char *key, bool *out);
int bt_gguf_get_str(const bt_gguf *g, const char *key, bt_gguf_str *out);

/* Arrays: element type and count; for numeric element types a pointer to the
 * packed little-endian elements in the mapping (may be unaligned: memcpy);
 * for STRING arrays use bt_gguf_arr_str(). Nested arrays are parsed and
 * validated but have no accessor. */
int bt_gguf_get_arr(const bt_gguf *g, const char *key, int *elem_type,
                    uint64_t *n, const void **data);
/* i-th string of a STRING array key (index from bt_gguf_find_key). O(1):
 * offsets are indexed at open time. */
bt_gguf_str bt_gguf_arr_str(const bt_gguf *g, int64_t key_index, uint64_t i);

/* Format one value (scalar or short array summary) for `inspect`, into buf. */
void bt_gguf_format_value(const bt_gguf *g, int64_t i, char *buf, size_t cap);

/* Tensors. Dimensions use ggml order: ne[0] is the contiguous (row) length. */
typedef struct bt_gguf_tensor {
    bt_gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];          /* unused dims are 1 */
    int type;               /* ggml type id (see base/dtype.h bt_dtype) */
    uint64_t offset;        /* relative to bt_gguf_data_offset() */
    uint64_t nbytes;
    const void *data;       /* into the mapping */
} bt_gguf_tensor;

int64_t bt_gguf_n_tensors(const bt_gguf *g);
const bt_gguf_tensor *bt_gguf_tensor_at(const bt_gguf *g, int64_t i);
const bt_gguf_tensor *bt_gguf_find_tensor(const bt_gguf *g, const char *name); /* NULL if absent */

/* ---- synthetic handles ------------------------------------------------
 * A loader of another format (Hugging Face folders: src/model/hf.c) builds a
 * bt_gguf whose keys are standard GGUF metadata and whose tensors point into
 * its own mappings, so the model builder reads every format through the
 * accessors above. Keys are serialized as a GGUF header and validated by the
 * same parser as a file; tensors are borrowed (data must outlive the handle).
 * Setters never fail: an allocation failure is remembered and reported by
 * bt_gguf_builder_finish. */
typedef struct bt_gguf_builder bt_gguf_builder;
int bt_gguf_builder_new(bt_gguf_builder **out);
void bt_gguf_builder_free(bt_gguf_builder *b);       /* NULL is a no-op */
void bt_gguf_builder_str(bt_gguf_builder *b, const char *key, const char *s, size_t len);
void bt_gguf_builder_u32(bt_gguf_builder *b, const char *key, uint32_t v);
void bt_gguf_builder_f32(bt_gguf_builder *b, const char *key, float v);
void bt_gguf_builder_bool(bt_gguf_builder *b, const char *key, bool v);
/* Numeric array of n elements of elem_type, packed little-endian. */
void bt_gguf_builder_arr(bt_gguf_builder *b, const char *key, int elem_type, const void *elems, uint64_t n);
void bt_gguf_builder_arr_str(bt_gguf_builder *b, const char *key, const char *const *s,
                             const uint32_t *len, uint64_t n);
/* A tensor of ggml type `type`, ne in ggml order (unused dims 1). */
void bt_gguf_builder_tensor(bt_gguf_builder *b, const char *name, uint32_t n_dims, const int64_t ne[4],
                            int type, const void *data, uint64_t nbytes);
/* Hand the handle a resource to release at bt_gguf_close (the loader's
 * mappings and copies the tensors point into); released by finish on
 * failure too. One per builder. */
void bt_gguf_builder_own(bt_gguf_builder *b, void (*release)(void *), void *arg);
/* The resource given to bt_gguf_builder_own, or NULL. */
void *bt_gguf_owned(const bt_gguf *g);
/* True once a key of that name was set. */
bool bt_gguf_builder_has(const bt_gguf_builder *b, const char *key);
/* Validate and produce the handle; frees b in every case. label names the
 * source in messages. bt_gguf_file_data() of the result is its serialized
 * header (tensor offsets are 0: the data is elsewhere). */
int bt_gguf_builder_finish(bt_gguf_builder *b, const char *label, bt_gguf **out);

#endif
