/* test_gguf.c - the GGUF reader against files this test writes itself
 * (every value type, custom alignment, each kind of corruption, every
 * truncation length) and against the real files in shared/models.
 *
 * The writer below is deliberately independent of src/model/gguf.c: it
 * lays bytes out from the format description, so a symmetric bug in the
 * reader cannot hide behind a matching bug in a shared helper. */
#include "model/gguf.h"
#include "model/model.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"
#include "check.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>



/* ---- a tiny GGUF writer ------------------------------------------------ */

typedef struct buf { uint8_t *p; size_t len, cap; } buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { perror("realloc"); exit(99); }
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(buf *b, uint16_t v) { put(b, &v, 2); }
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(buf *b, float v) { put(b, &v, 4); }
static void put_f64(buf *b, double v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(buf *b, size_t align) { while (b->len % align) put_u8(b, 0); }

static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void kv_u32(buf *b, const char *k, uint32_t v) { put_str(b, k); put_u32(b, BT_GGUF_UINT32); put_u32(b, v); }
static void kv_str(buf *b, const char *k, const char *v) { put_str(b, k); put_u32(b, BT_GGUF_STRING); put_str(b, v); }

static void tensor_info(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(b, ne[d]);
    put_u32(b, type);
    put_u64(b, off);
}

static char tmpdir[256];

static const char *write_file(const char *name, const buf *b, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(b->p, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        exit(99);
    }
    return path;
}

/* Open path expecting failure with code, and a message that names the file
 * and contains every fragment in want[] (NULL-terminated). */
static void expect_error(const char *label, const char *path, int code, const char *const *want)
{
    bt_gguf *g = NULL;
    bt_error(BT_OK, "%s", "");
    int rc = bt_gguf_open(path, &g);
    CHECK(rc == code, "%s: got %s (%s), want %s", label, bt_strerror(rc), bt_errmsg(), bt_strerror(code));
    CHECK(g == NULL, "%s: handle must be NULL on error", label);
    const char *msg = bt_errmsg();
    CHECK(strstr(msg, path) != NULL, "%s: message does not name the file: %s", label, msg);
    CHECK(strchr(msg, '\n') == NULL, "%s: message is not one line: %s", label, msg);
    for (int i = 0; want && want[i]; i++)
        CHECK(strstr(msg, want[i]) != NULL, "%s: message lacks '%s': %s", label, want[i], msg);
    bt_gguf_close(g);
}
#define WANT(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- the all-types file ------------------------------------------------ */

#define U64_BIG (((uint64_t)1 << 40) + 5)
#define I64_NEG (-((int64_t)1 << 40))

/* Writes every value type and three tensors with alignment 64; the last
 * tensor's data ends exactly at EOF so every shorter prefix is invalid. */
static void build_all_types(buf *b)
{
    int n_kv = 21;
    header(b, 3, 3, n_kv);
    put_str(b, "t.u8"); put_u32(b, BT_GGUF_UINT8); put_u8(b, 200);
    put_str(b, "t.i8"); put_u32(b, BT_GGUF_INT8); put_u8(b, (uint8_t)(int8_t)-100);
    put_str(b, "t.u16"); put_u32(b, BT_GGUF_UINT16); put_u16(b, 60000);
    put_str(b, "t.i16"); put_u32(b, BT_GGUF_INT16); put_u16(b, (uint16_t)(int16_t)-30000);
    put_str(b, "t.u32"); put_u32(b, BT_GGUF_UINT32); put_u32(b, 4000000000u);
    put_str(b, "t.i32"); put_u32(b, BT_GGUF_INT32); put_u32(b, (uint32_t)(int32_t)-2000000000);
    put_str(b, "t.f32"); put_u32(b, BT_GGUF_FLOAT32); put_f32(b, 1.5f);
    put_str(b, "t.bool"); put_u32(b, BT_GGUF_BOOL); put_u8(b, 1);
    kv_str(b, "t.str", "hello \"world\"");
    put_str(b, "t.u64"); put_u32(b, BT_GGUF_UINT64); put_u64(b, U64_BIG);
    put_str(b, "t.i64"); put_u32(b, BT_GGUF_INT64); put_u64(b, (uint64_t)I64_NEG);
    put_str(b, "t.f64"); put_u32(b, BT_GGUF_FLOAT64); put_f64(b, 3.25);
    put_str(b, "t.u64max"); put_u32(b, BT_GGUF_UINT64); put_u64(b, UINT64_MAX);
    /* arrays */
    put_str(b, "a.u8"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_UINT8); put_u64(b, 3);
    put_u8(b, 7); put_u8(b, 8); put_u8(b, 9);
    put_str(b, "a.i32"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_INT32); put_u64(b, 2);
    put_u32(b, (uint32_t)-5); put_u32(b, 6);
    put_str(b, "a.f32"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_FLOAT32); put_u64(b, 2);
    put_f32(b, 0.25f); put_f32(b, -2.0f);
    put_str(b, "a.str"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_STRING); put_u64(b, 4);
    put_str(b, "a"); put_str(b, "bc"); put_str(b, ""); put_str(b, "d\xe2\x96\x81");
    /* [[1, 2], [3]] of int32, and [["x"], []] of strings */
    put_str(b, "a.nested"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_ARRAY); put_u64(b, 2);
    put_u32(b, BT_GGUF_INT32); put_u64(b, 2); put_u32(b, 1); put_u32(b, 2);
    put_u32(b, BT_GGUF_INT32); put_u64(b, 1); put_u32(b, 3);
    put_str(b, "a.nested_str"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_ARRAY); put_u64(b, 2);
    put_u32(b, BT_GGUF_STRING); put_u64(b, 1); put_str(b, "x");
    put_u32(b, BT_GGUF_STRING); put_u64(b, 0);
    put_str(b, "a.u64"); put_u32(b, BT_GGUF_ARRAY); put_u32(b, BT_GGUF_UINT64); put_u64(b, 1); put_u64(b, U64_BIG);
    kv_u32(b, "general.alignment", 64);
    /* tensors: f32 [4,2] at 0, f16 [8] at 64, q8_0 [32,2] at 128 */
    tensor_info(b, "a", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0);
    tensor_info(b, "b", 1, (uint64_t[]){ 8 }, BT_DT_F16, 64);
    tensor_info(b, "blk.0.c", 2, (uint64_t[]){ 32, 2 }, BT_DT_Q8_0, 128);
    pad_to(b, 64);
    size_t data = b->len;
    for (int i = 0; i < 8; i++) put_f32(b, (float)i + 0.5f);
    pad_to(b, 64);
    for (int i = 0; i < 8; i++) put_u16(b, (uint16_t)(0x3c00 + i));
    pad_to(b, 64);
    for (int i = 0; i < 68; i++) put_u8(b, (uint8_t)i);
    (void)data;
}

static void test_all_types(void)
{
    buf b = { 0 };
    build_all_types(&b);
    const char *path = write_file("all.gguf", &b, b.len);
    bt_gguf *g = NULL;
    int rc = bt_gguf_open(path, &g);
    CHECK(rc == BT_OK, "open all.gguf: %s", bt_errmsg());
    if (rc) { free(b.p); return; }

    CHECK(bt_gguf_version(g) == 3, "version %u", bt_gguf_version(g));
    CHECK(bt_gguf_n_kv(g) == 21, "n_kv %" PRId64, bt_gguf_n_kv(g));
    CHECK(bt_gguf_alignment(g) == 64, "alignment %" PRIu64, bt_gguf_alignment(g));
    CHECK(bt_gguf_file_size(g) == b.len, "file size");
    CHECK(bt_gguf_file_data(g) != NULL && memcmp(bt_gguf_file_data(g), "GGUF", 4) == 0, "file data");

    uint32_t u32; int64_t i64; float f; bool bo; bt_gguf_str s;
    CHECK(bt_gguf_get_u32(g, "t.u8", &u32) == BT_OK && u32 == 200, "u8 -> u32");
    CHECK(bt_gguf_get_i64(g, "t.i8", &i64) == BT_OK && i64 == -100, "i8 -> i64");
    CHECK(bt_gguf_get_u32(g, "t.i8", &u32) == BT_EFORMAT && strstr(bt_errmsg(), "t.i8"), "negative i8 -> u32 must fail naming key: %s", bt_errmsg());
    CHECK(bt_gguf_get_u32(g, "t.u16", &u32) == BT_OK && u32 == 60000, "u16");
    CHECK(bt_gguf_get_i64(g, "t.i16", &i64) == BT_OK && i64 == -30000, "i16");
    CHECK(bt_gguf_get_u32(g, "t.u32", &u32) == BT_OK && u32 == 4000000000u, "u32");
    CHECK(bt_gguf_get_i64(g, "t.i32", &i64) == BT_OK && i64 == -2000000000, "i32");
    CHECK(bt_gguf_get_f32(g, "t.f32", &f) == BT_OK && f == 1.5f, "f32");
    CHECK(bt_gguf_get_f32(g, "t.u32", &f) == BT_OK && f == 4e9f, "u32 as float");
    CHECK(bt_gguf_get_f32(g, "t.i8", &f) == BT_OK && f == -100.0f, "i8 as float");
    CHECK(bt_gguf_get_bool(g, "t.bool", &bo) == BT_OK && bo, "bool");
    CHECK(bt_gguf_get_u32(g, "t.bool", &u32) == BT_OK && u32 == 1, "bool as int");
    CHECK(bt_gguf_get_str(g, "t.str", &s) == BT_OK && s.len == 13 && memcmp(s.ptr, "hello \"world\"", 13) == 0, "str");
    CHECK(bt_gguf_get_i64(g, "t.u64", &i64) == BT_OK && i64 == (int64_t)U64_BIG, "u64");
    CHECK(bt_gguf_get_u32(g, "t.u64", &u32) == BT_EFORMAT, "u64 2^40 does not fit u32");
    CHECK(bt_gguf_get_i64(g, "t.i64", &i64) == BT_OK && i64 == I64_NEG, "i64");
    CHECK(bt_gguf_get_f32(g, "t.f64", &f) == BT_OK && f == 3.25f, "f64");
    CHECK(bt_gguf_get_i64(g, "t.u64max", &i64) == BT_EFORMAT && strstr(bt_errmsg(), "t.u64max"), "u64 max does not fit i64: %s", bt_errmsg());
    CHECK(bt_gguf_get_i64(g, "t.f32", &i64) == BT_EFORMAT, "float is not an integer");
    CHECK(bt_gguf_get_str(g, "t.u32", &s) == BT_EFORMAT && strstr(bt_errmsg(), "t.u32") && strstr(bt_errmsg(), "uint32"),
          "wrong type names key and type: %s", bt_errmsg());
    CHECK(bt_gguf_get_u32(g, "no.such.key", &u32) == BT_ENOTFOUND && strstr(bt_errmsg(), "no.such.key"), "missing key: %s", bt_errmsg());
    CHECK(bt_gguf_get_u32(g, "a.u8", &u32) == BT_EFORMAT, "array is not an integer");
    CHECK(bt_gguf_find_key(g, "t.f64") == 11, "find_key index");
    CHECK(bt_gguf_find_key(g, "t") == -1, "prefix is not a key");
    CHECK(bt_gguf_kv_type(g, 11) == BT_GGUF_FLOAT64 && bt_gguf_kv_type(g, 99) == -1, "kv_type");
    s = bt_gguf_key(g, 0);
    CHECK(s.len == 4 && memcmp(s.ptr, "t.u8", 4) == 0, "key 0");
    CHECK(bt_gguf_key(g, -1).ptr == NULL && bt_gguf_key(g, 21).ptr == NULL, "key out of range");

    int et; uint64_t n; const void *data;
    CHECK(bt_gguf_get_arr(g, "a.u8", &et, &n, &data) == BT_OK && et == BT_GGUF_UINT8 && n == 3 &&
          memcmp(data, "\x07\x08\x09", 3) == 0, "array u8");
    CHECK(bt_gguf_get_arr(g, "a.i32", &et, &n, &data) == BT_OK && et == BT_GGUF_INT32 && n == 2, "array i32");
    if (n == 2) { int32_t v[2]; memcpy(v, data, 8); CHECK(v[0] == -5 && v[1] == 6, "array i32 values"); }
    CHECK(bt_gguf_get_arr(g, "a.f32", &et, &n, &data) == BT_OK && et == BT_GGUF_FLOAT32 && n == 2, "array f32");
    if (n == 2) { float v[2]; memcpy(v, data, 8); CHECK(v[0] == 0.25f && v[1] == -2.0f, "array f32 values"); }
    CHECK(bt_gguf_get_arr(g, "a.u64", &et, &n, &data) == BT_OK && et == BT_GGUF_UINT64 && n == 1, "array u64");
    if (n == 1) { uint64_t v; memcpy(&v, data, 8); CHECK(v == U64_BIG, "array u64 value"); }
    CHECK(bt_gguf_get_arr(g, "a.nested", &et, &n, NULL) == BT_OK && et == BT_GGUF_ARRAY && n == 2, "nested array");
    CHECK(bt_gguf_get_arr(g, "a.nested_str", &et, &n, NULL) == BT_OK && et == BT_GGUF_ARRAY && n == 2, "nested string array");
    CHECK(bt_gguf_get_arr(g, "t.u32", &et, &n, &data) == BT_EFORMAT, "scalar is not an array");
    CHECK(bt_gguf_get_arr(g, "a.str", &et, &n, NULL) == BT_OK && et == BT_GGUF_STRING && n == 4, "array str");
    int64_t ki = bt_gguf_find_key(g, "a.str");
    const char *want[] = { "a", "bc", "", "d\xe2\x96\x81" };
    for (int i = 0; i < 4; i++) {
        s = bt_gguf_arr_str(g, ki, (uint64_t)i);
        CHECK(s.ptr && s.len == strlen(want[i]) && memcmp(s.ptr, want[i], s.len) == 0, "arr_str %d", i);
    }
    CHECK(bt_gguf_arr_str(g, ki, 4).ptr == NULL, "arr_str past end");
    CHECK(bt_gguf_arr_str(g, bt_gguf_find_key(g, "a.u8"), 0).ptr == NULL, "arr_str on a u8 array");
    CHECK(bt_gguf_arr_str(g, -1, 0).ptr == NULL && bt_gguf_arr_str(g, 1000, 0).ptr == NULL, "arr_str bad key");

    char fb[128];
    bt_gguf_format_value(g, bt_gguf_find_key(g, "t.str"), fb, sizeof fb);
    CHECK(strstr(fb, "hello") != NULL, "format string: %s", fb);
    bt_gguf_format_value(g, bt_gguf_find_key(g, "t.i64"), fb, sizeof fb);
    CHECK(strcmp(fb, "-1099511627776") == 0, "format i64: %s", fb);
    bt_gguf_format_value(g, bt_gguf_find_key(g, "t.bool"), fb, sizeof fb);
    CHECK(strcmp(fb, "true") == 0, "format bool: %s", fb);
    bt_gguf_format_value(g, ki, fb, sizeof fb);
    CHECK(strstr(fb, "string") && strstr(fb, "4"), "format string array: %s", fb);
    bt_gguf_format_value(g, ki, fb, 8);
    CHECK(strlen(fb) < 8, "format respects the buffer size");

    /* tensors and data placement */
    CHECK(bt_gguf_n_tensors(g) == 3, "n_tensors");
    uint64_t doff = bt_gguf_data_offset(g);
    CHECK(doff % 64 == 0, "data offset %" PRIu64 " aligned to 64", doff);
    const bt_gguf_tensor *ta = bt_gguf_find_tensor(g, "a");
    const bt_gguf_tensor *tb = bt_gguf_find_tensor(g, "b");
    const bt_gguf_tensor *tc = bt_gguf_find_tensor(g, "blk.0.c");
    CHECK(ta && tb && tc, "find tensors");
    CHECK(bt_gguf_find_tensor(g, "blk.0") == NULL && bt_gguf_find_tensor(g, "") == NULL, "absent tensor");
    CHECK(bt_gguf_tensor_at(g, 3) == NULL && bt_gguf_tensor_at(g, -1) == NULL, "tensor_at range");
    if (ta && tb && tc) {
        CHECK(bt_gguf_tensor_at(g, 2) == tc, "tensor_at order");
        CHECK(ta->n_dims == 2 && ta->ne[0] == 4 && ta->ne[1] == 2 && ta->ne[2] == 1 && ta->ne[3] == 1, "shape a");
        CHECK(ta->type == BT_DT_F32 && ta->nbytes == 32 && ta->offset == 0, "a type/size");
        CHECK((const uint8_t *)ta->data == bt_gguf_file_data(g) + doff, "a data pointer");
        float v[8];
        memcpy(v, ta->data, sizeof v);
        CHECK(v[0] == 0.5f && v[7] == 7.5f, "a data values");
        CHECK(tb->n_dims == 1 && tb->ne[0] == 8 && tb->ne[1] == 1 && tb->nbytes == 16 && tb->offset == 64, "b");
        CHECK((const uint8_t *)tb->data == bt_gguf_file_data(g) + doff + 64, "b data pointer");
        uint16_t h;
        memcpy(&h, tb->data, 2);
        CHECK(h == 0x3c00, "b data value");
        CHECK(tc->type == BT_DT_Q8_0 && tc->nbytes == 68 && tc->offset == 128, "c q8_0 size %" PRIu64, tc->nbytes);
        CHECK((const uint8_t *)tc->data + tc->nbytes == bt_gguf_file_data(g) + bt_gguf_file_size(g), "c ends at EOF");
        CHECK(tc->name.len == 7 && memcmp(tc->name.ptr, "blk.0.c", 7) == 0, "c name");
    }
    bt_gguf_close(g);
    bt_gguf_close(NULL);

    /* Every proper prefix of a valid file is invalid (the last tensor's data
     * ends at EOF): each must fail cleanly with a message, never crash. */
    int bad = 0;
    for (size_t len = 0; len < b.len; len++) {
        const char *p = write_file("trunc.gguf", &b, len);
        bt_gguf *t = NULL;
        rc = bt_gguf_open(p, &t);
        if (rc >= 0 || t != NULL || !strstr(bt_errmsg(), p)) {
            if (bad++ < 5)
                fprintf(stderr, "FAIL truncated at %zu: rc %s msg '%s'\n", len, bt_strerror(rc), bt_errmsg());
            bt_gguf_close(t);
        }
    }
    CHECK(bad == 0, "%d truncation lengths out of %zu misbehaved", bad, b.len);
    free(b.p);
}

/* ---- corruptions ------------------------------------------------------- */

/* A valid 1-tensor file; mutate() gets to damage it. */
static void small_file(buf *b, uint32_t version, uint64_t n_tensors_claim, const char *tname,
                       uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off, uint64_t data_bytes)
{
    header(b, version, n_tensors_claim, 2);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "general.alignment", 32);
    tensor_info(b, tname, n_dims, ne, type, off);
    pad_to(b, 32);
    for (uint64_t i = 0; i < data_bytes; i++) put_u8(b, 0);
}

static void test_corruptions(void)
{
    buf b = { 0 };
    const char *p;

    /* the base file is valid */
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    p = write_file("ok.gguf", &b, b.len);
    bt_gguf *g = NULL;
    CHECK(bt_gguf_open(p, &g) == BT_OK, "small valid file: %s", bt_errmsg());
    bt_gguf_close(g);
    /* v2 has the same layout */
    b.len = 0;
    small_file(&b, 2, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    p = write_file("v2.gguf", &b, b.len);
    g = NULL;
    CHECK(bt_gguf_open(p, &g) == BT_OK && bt_gguf_version(g) == 2, "v2 file: %s", bt_errmsg());
    bt_gguf_close(g);

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    memcpy(b.p, "GGUX", 4);
    expect_error("bad magic", write_file("magic.gguf", &b, b.len), BT_EFORMAT, WANT("magic"));

    b.len = 0;
    small_file(&b, 1, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    expect_error("version 1", write_file("v1.gguf", &b, b.len), BT_EUNSUPPORTED, WANT("version 1"));

    b.len = 0;
    small_file(&b, 99, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    expect_error("version 99", write_file("v99.gguf", &b, b.len), BT_EUNSUPPORTED, WANT("version 99"));

    b.len = 0;
    small_file(&b, 0x03000000u, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    expect_error("big-endian", write_file("be.gguf", &b, b.len), BT_EUNSUPPORTED, WANT("big-endian"));

    b.len = 0;
    small_file(&b, 3, (uint64_t)1 << 60, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    expect_error("absurd n_tensors", write_file("ntensors.gguf", &b, b.len), BT_EFORMAT, WANT("1152921504606846976 tensors"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    { uint64_t v = UINT64_MAX; memcpy(b.p + 16, &v, 8); }
    expect_error("absurd n_kv", write_file("nkv.gguf", &b, b.len), BT_EFORMAT, WANT("keys"));

    /* the first key's length (at offset 24) points past EOF */
    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    { uint64_t v = 1000000; memcpy(b.p + 24, &v, 8); }
    expect_error("key length past EOF", write_file("keylen.gguf", &b, b.len), BT_EFORMAT, WANT("offset 24", "past end"));

    /* the string value of general.architecture has a huge length */
    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 32);
    { uint64_t v = (uint64_t)1 << 62; memcpy(b.p + 24 + 8 + 20 + 4, &v, 8); }
    expect_error("string value past EOF", write_file("strlen.gguf", &b, b.len), BT_EFORMAT,
                 WANT("general.architecture", "past end"));

    b.len = 0;
    header(&b, 3, 0, 1);
    put_str(&b, "k.bad"); put_u32(&b, 13); put_u32(&b, 0);
    expect_error("unknown value type", write_file("vtype.gguf", &b, b.len), BT_EFORMAT, WANT("k.bad", "value type 13"));

    b.len = 0;
    header(&b, 3, 0, 1);
    put_str(&b, "k.arr"); put_u32(&b, BT_GGUF_ARRAY); put_u32(&b, BT_GGUF_UINT32); put_u64(&b, (uint64_t)1 << 61);
    put_u32(&b, 0);
    expect_error("array count past EOF", write_file("arrcount.gguf", &b, b.len), BT_EFORMAT, WANT("k.arr", "past end"));

    b.len = 0;
    header(&b, 3, 0, 1);
    put_str(&b, "k.deep"); put_u32(&b, BT_GGUF_ARRAY);
    for (int d = 0; d < 20; d++) { put_u32(&b, BT_GGUF_ARRAY); put_u64(&b, 1); }
    put_u32(&b, BT_GGUF_UINT8); put_u64(&b, 0);
    expect_error("deep nesting", write_file("deep.gguf", &b, b.len), BT_EFORMAT, WANT("k.deep", "nested"));

    b.len = 0;
    header(&b, 3, 0, 2);
    kv_u32(&b, "dup.key", 1);
    kv_u32(&b, "dup.key", 2);
    expect_error("duplicate key", write_file("dupkey.gguf", &b, b.len), BT_EFORMAT, WANT("duplicate key 'dup.key'"));

    b.len = 0;
    small_file(&b, 3, 1, "blk.0.attn_q.weight", 5, (uint64_t[]){ 4, 2, 1, 1, 1 }, BT_DT_F32, 0, 32);
    expect_error("n_dims 5", write_file("ndims.gguf", &b, b.len), BT_EFORMAT, WANT("blk.0.attn_q.weight", "5 dimensions"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 0 }, BT_DT_F32, 0, 32);
    expect_error("zero dim", write_file("zerodim.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "zero"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, (uint64_t)-3 }, BT_DT_F32, 0, 32);
    expect_error("negative dim", write_file("negdim.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "negative"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 3, (uint64_t[]){ (uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)1 << 32 }, BT_DT_F32, 0, 32);
    expect_error("element overflow", write_file("overflow.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "overflow"));

    /* 2^61 f32 elements: the count fits int64, the byte size does not */
    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ (uint64_t)1 << 31, (uint64_t)1 << 30 }, BT_DT_F32, 0, 32);
    expect_error("byte size overflow", write_file("bytes.gguf", &b, b.len), BT_EFORMAT, WANT("'x'"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, 99, 0, 32);
    expect_error("unknown tensor type", write_file("ttype.gguf", &b, b.len), BT_EUNSUPPORTED,
                 WANT("unknown tensor type 99 for tensor 'x'"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, 0xffffffffu, 0, 32);
    expect_error("tensor type 2^32-1", write_file("ttype2.gguf", &b, b.len), BT_EUNSUPPORTED, WANT("'x'"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 30, 2 }, BT_DT_Q8_0, 0, 68);
    expect_error("row not multiple of block", write_file("block.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "block"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 0, 31);
    expect_error("data past EOF", write_file("pasteof.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "past end"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, UINT64_MAX - 31, 32);
    expect_error("offset wraps", write_file("wrap.gguf", &b, b.len), BT_EFORMAT, WANT("'x'"));

    b.len = 0;
    small_file(&b, 3, 1, "x", 2, (uint64_t[]){ 4, 2 }, BT_DT_F32, 16, 64);
    expect_error("misaligned offset", write_file("misalign.gguf", &b, b.len), BT_EFORMAT, WANT("'x'", "alignment"));

    b.len = 0;
    header(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 48);
    tensor_info(&b, "x", 1, (uint64_t[]){ 4 }, BT_DT_F32, 0);
    pad_to(&b, 16);
    for (int i = 0; i < 16; i++) put_u8(&b, 0);
    expect_error("alignment 48", write_file("align48.gguf", &b, b.len), BT_EFORMAT, WANT("alignment", "48", "power of two"));

    b.len = 0;
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    expect_error("alignment 0", write_file("align0.gguf", &b, b.len), BT_EFORMAT, WANT("alignment"));

    b.len = 0;
    header(&b, 3, 0, 1);
    kv_str(&b, "general.alignment", "32");
    expect_error("alignment string", write_file("alignstr.gguf", &b, b.len), BT_EFORMAT, WANT("alignment"));

    b.len = 0;
    header(&b, 3, 2, 0);
    tensor_info(&b, "same", 1, (uint64_t[]){ 8 }, BT_DT_F32, 0);
    tensor_info(&b, "same", 1, (uint64_t[]){ 8 }, BT_DT_F32, 32);
    pad_to(&b, 32);
    for (int i = 0; i < 64; i++) put_u8(&b, 0);
    expect_error("duplicate tensor", write_file("duptensor.gguf", &b, b.len), BT_EFORMAT, WANT("duplicate tensor", "'same'"));

    b.len = 0;
    expect_error("empty file", write_file("empty.gguf", &b, 0), BT_EFORMAT, WANT("empty"));
    expect_error("missing file", "/nonexistent/dir/model.gguf", BT_ENOTFOUND, WANT("cannot open"));
    expect_error("directory", tmpdir, BT_EIO, WANT("not a regular file"));

    /* A vocab-only file may end before the aligned data section. */
    b.len = 0;
    header(&b, 3, 0, 1);
    kv_str(&b, "general.architecture", "llama");
    p = write_file("vocabonly.gguf", &b, b.len);
    g = NULL;
    CHECK(bt_gguf_open(p, &g) == BT_OK && bt_gguf_n_tensors(g) == 0, "0-tensor file: %s", bt_errmsg());
    bt_gguf_close(g);
    free(b.p);
}

/* ---- random damage ------------------------------------------------------ */

/* Whatever bytes the header holds, an open either fails with a message or
 * yields a handle whose every accessor stays inside the mapping. */
static int exercise(const bt_gguf *g)
{
    const uint8_t *lo = bt_gguf_file_data(g), *hi = lo + bt_gguf_file_size(g);
    int bad = 0;
    char buf[256];
    for (int64_t i = 0; i < bt_gguf_n_kv(g); i++) {
        bt_gguf_str k = bt_gguf_key(g, i);
        bad += (const uint8_t *)k.ptr < lo || (const uint8_t *)k.ptr + k.len > hi;
        bt_gguf_format_value(g, i, buf, sizeof buf);
        int et; uint64_t n;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)BT_MIN(k.len, 120), k.ptr);
        if (bt_gguf_kv_type(g, i) == BT_GGUF_ARRAY && bt_gguf_get_arr(g, key, &et, &n, NULL) == BT_OK &&
            et == BT_GGUF_STRING)
            for (uint64_t j = 0; j < n; j++) {
                bt_gguf_str s = bt_gguf_arr_str(g, i, j);
                bad += !s.ptr || (const uint8_t *)s.ptr < lo || (const uint8_t *)s.ptr + s.len > hi;
            }
        bt_gguf_str sv;
        if (bt_gguf_get_str(g, key, &sv) == BT_OK)
            bad += (const uint8_t *)sv.ptr < lo || (const uint8_t *)sv.ptr + sv.len > hi;
    }
    for (int64_t i = 0; i < bt_gguf_n_tensors(g); i++) {
        const bt_gguf_tensor *t = bt_gguf_tensor_at(g, i);
        bad += (const uint8_t *)t->data < lo || (const uint8_t *)t->data + t->nbytes > hi;
        bad += t->n_dims > 4 || t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[2] <= 0 || t->ne[3] <= 0;
        bad += bt_dtype(t->type)->name == NULL;
    }
    return bad;
}

static void test_random_damage(void)
{
    buf b = { 0 };
    build_all_types(&b);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int opened = 0, escaped = 0, silent = 0;
    for (int iter = 0; iter < 1500; iter++) {
        buf d = { 0 };
        put(&d, b.p, b.len);
        int flips = 1 + (int)(iter % 4);
        for (int k = 0; k < flips; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t at = (size_t)(rng % (d.len - 68));      /* damage the header, not the data */
            d.p[at] = (uint8_t)(rng >> 32);
        }
        const char *p = write_file("damaged.gguf", &d, d.len);
        bt_gguf *g = NULL;
        bt_error(BT_OK, "%s", "");
        if (bt_gguf_open(p, &g) == BT_OK) {
            opened++;
            escaped += exercise(g) != 0;
            bt_gguf_close(g);
        } else if (!strstr(bt_errmsg(), p)) {
            silent++;
        }
        free(d.p);
    }
    CHECK(escaped == 0, "%d damaged files opened with accessors outside the mapping", escaped);
    CHECK(silent == 0, "%d damaged files failed without a message naming the file", silent);
    printf("random damage: %d of 1500 damaged files still opened (all accessors in bounds)\n", opened);
    free(b.p);
}

/* ---- buffer entry points (what the fuzzers call) ----------------------- */

static void test_buffers(void)
{
    buf b = { 0 };
    build_all_types(&b);
    bt_gguf *g = NULL, *gf = NULL;
    CHECK(bt_gguf_open_buffer(b.p, b.len, "mem.gguf", &g) == BT_OK, "open_buffer: %s", bt_errmsg());
    CHECK(bt_gguf_open(write_file("same.gguf", &b, b.len), &gf) == BT_OK, "open: %s", bt_errmsg());
    if (g && gf) {
        CHECK(bt_gguf_n_kv(g) == bt_gguf_n_kv(gf) && bt_gguf_n_tensors(g) == bt_gguf_n_tensors(gf) &&
              bt_gguf_data_offset(g) == bt_gguf_data_offset(gf) && bt_gguf_file_data(g) == b.p,
              "buffer and file views differ");
    }
    bt_gguf_close(g); bt_gguf_close(gf);
    g = (bt_gguf *)&b;
    CHECK(bt_gguf_open_buffer(b.p, 0, "mem.gguf", &g) == BT_EFORMAT && !g && strstr(bt_errmsg(), "mem.gguf"),
          "empty buffer: %s", bt_errmsg());
    CHECK(bt_gguf_open_buffer(b.p, 30, "cut.gguf", &g) == BT_EFORMAT && !g && strstr(bt_errmsg(), "cut.gguf"),
          "truncated buffer: %s", bt_errmsg());
    free(b.p);

    /* a llama2.c header with vocab_size INT_MIN: negating it was undefined
     * (UBSan, every GGUF/llama2.c fuzz artifact); it is an implausible header */
    int32_t h[7] = { 64, 172, 5, 8, 4, INT32_MIN, 512 };
    uint8_t l2c[64] = { 0 };
    memcpy(l2c, h, sizeof h);
    bt_model *m = (bt_model *)&b;
    CHECK(bt_model_load_buffer(l2c, sizeof l2c, "min.bin", &m) == BT_EFORMAT && !m &&
          strstr(bt_errmsg(), "min.bin") && strstr(bt_errmsg(), "vocab -2147483648"), "INT_MIN vocab: %s", bt_errmsg());
    buf f = { 0 };
    put(&f, l2c, sizeof l2c);
    CHECK(bt_model_load(write_file("min.bin", &f, f.len), NULL, &m) == BT_EFORMAT && !m, "INT_MIN vocab (file): %s", bt_errmsg());
    free(f.p);
    h[5] = -512;    /* separate classifier: still refused by size, not by sign */
    memcpy(l2c, h, sizeof h);
    CHECK(bt_model_load_buffer(l2c, sizeof l2c, "neg.bin", &m) == BT_EFORMAT && strstr(bt_errmsg(), "separate"),
          "negative vocab: %s", bt_errmsg());
    CHECK(bt_model_load_buffer(l2c, 10, "short.bin", &m) == BT_EFORMAT && strstr(bt_errmsg(), "too short"),
          "short: %s", bt_errmsg());

    /* the real llama2.c pair, loaded from memory */
    const char *shared = getenv("BT_SHARED");
    char mp[1024], tp[1024];
    snprintf(mp, sizeof mp, "%s/models/llama2c/stories260K.bin", shared ? shared : "/nonexistent");
    snprintf(tp, sizeof tp, "%s/models/llama2c/tok512.bin", shared ? shared : "/nonexistent");
    char *md = NULL, *td = NULL;
    size_t ms = 0, ts = 0;
    if (bt_read_file(mp, &md, &ms) || bt_read_file(tp, &td, &ts)) {
        printf("SKIP llama2.c buffers: %s\n", bt_errmsg());
    } else {
        CHECK(bt_model_load_buffer(md, ms, "stories.bin", &m) == BT_OK, "stories buffer: %s", bt_errmsg());
        if (m) {
            CHECK(m->cfg.n_vocab == 512 && m->cfg.n_layers == 5 && bt_model_has_weights(m), "stories config");
            CHECK(bt_llama2c_tokenizer_load_buffer(td, ts, "tok.bin", 512, m) == BT_OK && m->has_vocab &&
                  m->vocab.n_tokens == 512, "tok512 buffer: %s", bt_errmsg());
            CHECK(bt_llama2c_tokenizer_load_buffer(td, 100, "tok.bin", 512, m) == BT_EFORMAT &&
                  strstr(bt_errmsg(), "truncated"), "cut tokenizer: %s", bt_errmsg());
            bt_model_free(m);
        }
    }
    free(md); free(td);
}

/* ---- the real files ---------------------------------------------------- */

static void test_real_files(void)
{
    const char *shared = getenv("BT_SHARED");
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/models/gguf-tiny/llama-2-tiny-random.gguf", shared ? shared : "/nonexistent");
    if (!shared || stat(path, &st) != 0) {
        printf("SKIP real files: BT_SHARED models not found (%s)\n", path);
        return;
    }
    bt_gguf *g = NULL;
    int rc = bt_gguf_open(path, &g);
    CHECK(rc == BT_OK, "open tiny random: %s", bt_errmsg());
    if (rc == BT_OK) {
        CHECK(bt_gguf_version(g) == 3 && bt_gguf_alignment(g) == 32 && bt_gguf_n_kv(g) == 18, "tiny header");
        CHECK(bt_gguf_n_tensors(g) == 12, "tiny n_tensors %" PRId64, bt_gguf_n_tensors(g));
        const bt_gguf_tensor *last = NULL;
        int odd = 0;
        for (int64_t i = 0; i < bt_gguf_n_tensors(g); i++) {
            const bt_gguf_tensor *t = bt_gguf_tensor_at(g, i);
            if (t->type != BT_DT_F16 && t->type != BT_DT_F32) odd++;
            if (!last || t->offset > last->offset) last = t;
        }
        CHECK(odd == 0, "tiny: only F16/F32 tensors");
        CHECK(last && bt_gguf_data_offset(g) + last->offset + last->nbytes == bt_gguf_file_size(g), "tiny data ends at EOF");
        const bt_gguf_tensor *te = bt_gguf_find_tensor(g, "token_embd.weight");
        CHECK(te && te->ne[0] == 8 && te->ne[1] == 32000 && te->type == BT_DT_F16, "token_embd shape");
        uint32_t dim = 0;
        CHECK(bt_gguf_get_u32(g, "llama.embedding_length", &dim) == BT_OK && dim == 8, "embedding_length");
        int64_t ki = bt_gguf_find_key(g, "tokenizer.ggml.tokens");
        bt_gguf_str s = bt_gguf_arr_str(g, ki, 1);
        CHECK(s.len == 3 && memcmp(s.ptr, "<s>", 3) == 0, "token 1 is <s>");
        bt_gguf_close(g);
    }

    static const struct { const char *file; int64_t n_tokens, n_merges; } vocabs[] = {
        { "ggml-vocab-llama-spm.gguf", 32000, -1 },
        { "ggml-vocab-gpt-2.gguf", 50257, 50000 },
        { "ggml-vocab-falcon.gguf", 65024, 64784 },
        { "ggml-vocab-deepseek-coder.gguf", 32256, 31757 },
    };
    for (size_t v = 0; v < BT_ARRAY_SIZE(vocabs); v++) {
        snprintf(path, sizeof path, "%s/models/gguf-vocab/%s", shared, vocabs[v].file);
        g = NULL;
        rc = bt_gguf_open(path, &g);
        CHECK(rc == BT_OK, "open %s: %s", vocabs[v].file, bt_errmsg());
        if (rc) continue;
        CHECK(bt_gguf_n_tensors(g) == 0, "%s: 0 tensors", vocabs[v].file);
        int et = -1; uint64_t n = 0;
        CHECK(bt_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL) == BT_OK && et == BT_GGUF_STRING &&
              (int64_t)n == vocabs[v].n_tokens, "%s: %" PRIu64 " tokens", vocabs[v].file, n);
        /* every string is reachable and inside the file */
        int64_t ki = bt_gguf_find_key(g, "tokenizer.ggml.tokens");
        const uint8_t *lo = bt_gguf_file_data(g), *hi = lo + bt_gguf_file_size(g);
        int outside = 0;
        for (uint64_t i = 0; i < n; i++) {
            bt_gguf_str s = bt_gguf_arr_str(g, ki, i);
            if (!s.ptr || (const uint8_t *)s.ptr < lo || (const uint8_t *)s.ptr + s.len > hi) outside++;
        }
        CHECK(outside == 0, "%s: %d token strings outside the file", vocabs[v].file, outside);
        if (vocabs[v].n_merges >= 0)
            CHECK(bt_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, NULL) == BT_OK &&
                  (int64_t)n == vocabs[v].n_merges, "%s: %" PRIu64 " merges", vocabs[v].file, n);
        bt_gguf_close(g);
    }

    /* The default model, when cached: opening must not touch tensor data. */
    const char *home = getenv("HOME");
    snprintf(path, sizeof path, "%s/.cache/bangtrace/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "/root");
    if (stat(path, &st) == 0) {
        double t0 = bt_now();
        rc = bt_gguf_open(path, &g);
        double ms = (bt_now() - t0) * 1e3;
        CHECK(rc == BT_OK && bt_gguf_n_tensors(g) == 272, "SmolLM2: %s", bt_errmsg());
        CHECK(ms < 100, "SmolLM2 opened in %.1f ms", ms);
        if (rc == BT_OK) bt_gguf_close(g);
    } else {
        printf("SKIP SmolLM2 open time: %s not cached\n", path);
    }
}

/* Synthetic handles (bt_gguf_builder, used by Hugging Face folders): keys
 * round-trip through the same parser as files, tensors are borrowed, the
 * owned resource is released exactly once, on success and on failure. */
static int released;
static void count_release(void *arg) { (void)arg; released++; }

static void test_builder(void)
{
    bt_gguf_builder *b = NULL;
    CHECK_OK(bt_gguf_builder_new(&b));
    bt_gguf_builder_own(b, count_release, NULL);
    static const char *const toks[] = { "a", "b c", "" };
    int32_t ids[3] = { 1, -2, 3 };
    static float w[6] = { 1, 2, 3, 4, 5, 6 };
    bt_gguf_builder_str(b, "general.architecture", "llama", 5);
    bt_gguf_builder_u32(b, "llama.block_count", 7);
    bt_gguf_builder_f32(b, "llama.rope.freq_base", 0.5f);
    bt_gguf_builder_bool(b, "x.flag", true);
    bt_gguf_builder_arr(b, "x.ids", BT_GGUF_INT32, ids, 3);
    bt_gguf_builder_arr_str(b, "x.toks", toks, NULL, 3);
    CHECK(bt_gguf_builder_has(b, "x.flag") && !bt_gguf_builder_has(b, "x.nope"), "builder_has");
    bt_gguf_builder_tensor(b, "w.weight", 2, (int64_t[4]){ 3, 2, 1, 1 }, BT_DT_F32, w, sizeof w);
    bt_gguf *g = NULL;
    CHECK_OK(bt_gguf_builder_finish(b, "synthetic", &g));
    if (g) {
        uint32_t u = 0; float f = 0; bool fl = false; bt_gguf_str st;
        int et; uint64_t n; const void *d;
        CHECK(!bt_gguf_get_u32(g, "llama.block_count", &u) && u == 7, "u32 key");
        CHECK(!bt_gguf_get_f32(g, "llama.rope.freq_base", &f) && f == 0.5f, "f32 key");
        CHECK(!bt_gguf_get_bool(g, "x.flag", &fl) && fl, "bool key");
        CHECK(!bt_gguf_get_str(g, "general.architecture", &st) && st.len == 5 && !memcmp(st.ptr, "llama", 5), "str key");
        CHECK(!bt_gguf_get_arr(g, "x.ids", &et, &n, &d) && et == BT_GGUF_INT32 && n == 3 && !memcmp(d, ids, sizeof ids), "int array");
        bt_gguf_str s1 = bt_gguf_arr_str(g, bt_gguf_find_key(g, "x.toks"), 1);
        CHECK(s1.len == 3 && !memcmp(s1.ptr, "b c", 3), "string array");
        const bt_gguf_tensor *t = bt_gguf_find_tensor(g, "w.weight");
        CHECK(t && t->data == w && t->ne[0] == 3 && t->ne[1] == 2 && t->nbytes == sizeof w, "borrowed tensor");
        CHECK(released == 0, "not released while open");
        bt_gguf_close(g);
        CHECK(released == 1, "released once at close (%d)", released);
    }
    /* two tensors with one name, and a tensor whose bytes do not fit its shape */
    for (int k = 0; k < 2; k++) {
        released = 0;
        CHECK_OK(bt_gguf_builder_new(&b));
        bt_gguf_builder_own(b, count_release, NULL);
        bt_gguf_builder_tensor(b, "w.weight", 1, (int64_t[4]){ 6, 1, 1, 1 }, BT_DT_F32, w, k ? sizeof w - 4 : sizeof w);
        if (!k) bt_gguf_builder_tensor(b, "w.weight", 1, (int64_t[4]){ 6, 1, 1, 1 }, BT_DT_F32, w, sizeof w);
        g = NULL;
        int rc = bt_gguf_builder_finish(b, "synthetic", &g);
        CHECK(rc != BT_OK && !g && strstr(bt_errmsg(), "w.weight"), "bad tensor refused: %s", bt_errmsg());
        CHECK(released == 1, "released once on failure (%d)", released);
    }
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_gguf.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 99; }

    test_all_types();
    test_corruptions();
    test_random_damage();
    test_buffers();
    test_builder();
    test_real_files();

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    printf("test_gguf: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
