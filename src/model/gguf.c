/* gguf.c - read-only GGUF v2/v3 reader over one mmap.
 *
 * bt_gguf_open() walks the whole header once and checks every length,
 * count, type and offset against the file size before anything else may
 * look at it; after a successful open, accessors only follow offsets that
 * were proven to be inside the mapping. The walk never touches tensor data,
 * so opening a large model costs one pass over its (small) metadata.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv x {string key, u32 vtype, value}, n_tensors x {string name,
 * u32 n_dims, u64 ne[n_dims], u32 type, u64 offset}, padding to
 * general.alignment, tensor data. A string is {u64 len, bytes}; an array is
 * {u32 elem_type, u64 n, elements}. v1 used 32-bit counts and is refused. */
#include "model/gguf.h"
#include "base/util.h"
#include "base/text.h"
#include "base/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
/* Deeper nesting than this is certainly not a model file; the limit keeps
 * the recursive array walk bounded on hostile input. */
#define GGUF_MAX_ARRAY_DEPTH 8
/* Smallest possible encodings, used to reject counts that cannot fit. */
#define GGUF_MIN_KV_BYTES 13        /* u64 key len + u32 vtype + 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 24    /* u64 name len + u32 n_dims + u32 type + u64 offset */

typedef struct gguf_kv {
    bt_gguf_str key;
    int type;                 /* bt_gguf_vtype */
    uint64_t val_off;         /* file offset of the value */
    /* arrays only */
    int elem_type;
    uint64_t n;
    uint64_t elems_off;       /* file offset of the first element */
    uint64_t *str_off;        /* STRING arrays: file offset of each element's u64 length */
} gguf_kv;

/* Open-addressing hash table of indices, keyed by (ptr, len) strings. */
typedef struct gguf_index {
    int64_t *slots;           /* -1 empty, else index */
    uint64_t mask;
} gguf_index;

struct bt_gguf {
    char *path;
    const uint8_t *map;
    uint64_t size;
    bool mapped;              /* map is ours to munmap (else a borrowed buffer) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_off;
    int64_t n_kv;             /* entries parsed so far; the header's count once open */
    gguf_kv *kv;
    int64_t kv_cap;
    int64_t n_tensors;
    bt_gguf_tensor *tensors;
    int64_t tensor_cap;
    gguf_index kv_index;
    gguf_index tensor_index;
    void *owned;              /* synthetic handles: the serialized header */
    char *owned_names;        /* synthetic handles: tensor names */
    void (*release)(void *);  /* synthetic handles: the loader's resources */
    void *release_arg;
};

static const char *const vtype_names[BT_GGUF_VTYPE_COUNT] = {
    [BT_GGUF_UINT8] = "uint8", [BT_GGUF_INT8] = "int8", [BT_GGUF_UINT16] = "uint16",
    [BT_GGUF_INT16] = "int16", [BT_GGUF_UINT32] = "uint32", [BT_GGUF_INT32] = "int32",
    [BT_GGUF_FLOAT32] = "float32", [BT_GGUF_BOOL] = "bool", [BT_GGUF_STRING] = "string",
    [BT_GGUF_ARRAY] = "array", [BT_GGUF_UINT64] = "uint64", [BT_GGUF_INT64] = "int64",
    [BT_GGUF_FLOAT64] = "float64",
};
_Static_assert(BT_GGUF_VTYPE_COUNT == 13, "vtype_names must cover every GGUF value type");

const char *bt_gguf_vtype_name(int vtype)
{
    if (vtype < 0 || vtype >= BT_GGUF_VTYPE_COUNT) return "unknown";
    return vtype_names[vtype];
}

/* Size of a fixed-size value type; 0 for STRING/ARRAY/unknown. */
static size_t vtype_size(int t)
{
    switch (t) {
    case BT_GGUF_UINT8: case BT_GGUF_INT8: case BT_GGUF_BOOL: return 1;
    case BT_GGUF_UINT16: case BT_GGUF_INT16: return 2;
    case BT_GGUF_UINT32: case BT_GGUF_INT32: case BT_GGUF_FLOAT32: return 4;
    case BT_GGUF_UINT64: case BT_GGUF_INT64: case BT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static uint16_t rd_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* ---- hash index ------------------------------------------------------- */

static uint64_t hash_bytes(const char *p, uint64_t len)
{
    uint64_t h = 1469598103934665603ull;           /* FNV-1a */
    for (uint64_t i = 0; i < len; i++) { h ^= (uint8_t)p[i]; h *= 1099511628211ull; }
    return h;
}

static int index_init(gguf_index *ix, int64_t n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    ix->slots = malloc(cap * sizeof(*ix->slots));
    if (!ix->slots) return BT_ENOMEM;
    for (uint64_t i = 0; i < cap; i++) ix->slots[i] = -1;
    ix->mask = cap - 1;
    return BT_OK;
}

/* Find the slot of name: returns the stored index, or -1 with *slot set to
 * the empty slot where it would go. strs(i) yields the name of entry i. */
#define INDEX_LOOKUP(ix, name_ptr, name_len, strs_expr, slot_out, found_out) do { \
    uint64_t h_ = hash_bytes((name_ptr), (name_len)) & (ix)->mask; \
    (found_out) = -1; \
    for (;;) { \
        int64_t e_ = (ix)->slots[h_]; \
        if (e_ < 0) break; \
        bt_gguf_str s_ = strs_expr(e_); \
        if (s_.len == (name_len) && memcmp(s_.ptr, (name_ptr), (name_len)) == 0) { (found_out) = e_; break; } \
        h_ = (h_ + 1) & (ix)->mask; \
    } \
    (slot_out) = h_; \
} while (0)

/* ---- parsing ---------------------------------------------------------- */

typedef struct cursor {
    const bt_gguf *g;
    uint64_t pos;
} cursor;

static uint64_t remaining(const cursor *c) { return c->g->size - c->pos; }

/* Printable, bounded copy of a name from the file for error messages. */
static const char *safe_name(const char *p, uint64_t len, char *buf, size_t cap)
{
    bt_text_escape(p, (size_t)BT_MIN(len, (uint64_t)cap * 4), buf, cap, 0, BT_TEXT_UTF8 | BT_TEXT_SQUOTE | BT_TEXT_ELLIPSIS);
    return buf;
}

static int need(cursor *c, uint64_t n, const char *what, const char *ctx)
{
    if (n > remaining(c))
        return bt_error(BT_EFORMAT, "%s: truncated: %s%s%s needs %" PRIu64 " bytes at offset %" PRIu64
                        " but the file ends at %" PRIu64, c->g->path, what, ctx[0] ? " of " : "", ctx,
                        n, c->pos, c->g->size);
    return BT_OK;
}

static int take_u32(cursor *c, uint32_t *v, const char *what, const char *ctx)
{
    int rc = need(c, 4, what, ctx);
    if (rc) return rc;
    *v = rd_u32(c->g->map + c->pos);
    c->pos += 4;
    return BT_OK;
}

static int take_u64(cursor *c, uint64_t *v, const char *what, const char *ctx)
{
    int rc = need(c, 8, what, ctx);
    if (rc) return rc;
    *v = rd_u64(c->g->map + c->pos);
    c->pos += 8;
    return BT_OK;
}

static int take_str(cursor *c, bt_gguf_str *s, const char *what, const char *ctx)
{
    uint64_t at = c->pos, len;
    int rc = take_u64(c, &len, what, ctx);
    if (rc) return rc;
    if (len > remaining(c))
        return bt_error(BT_EFORMAT, "%s: %s%s%s at offset %" PRIu64 " has length %" PRIu64
                        " which runs past end of file (%" PRIu64 " bytes)", c->g->path, what,
                        ctx[0] ? " of " : "", ctx, at, len, c->g->size);
    s->ptr = (const char *)c->g->map + c->pos;
    s->len = len;
    c->pos += len;
    return BT_OK;
}

/* Walk one array body (after its u32 elem type and u64 count are known):
 * checks every element is inside the file. If str_off is non-NULL, records
 * the offset of each string element. */
static int skip_array(cursor *c, int elem_type, uint64_t n, int depth, uint64_t *str_off,
                      const char *ctx)
{
    const char *path = c->g->path;
    if (elem_type < 0 || elem_type >= BT_GGUF_VTYPE_COUNT)
        return bt_error(BT_EFORMAT, "%s: key '%s': array element type %d is not a GGUF value type (offset %" PRIu64 ")",
                        path, ctx, elem_type, c->pos);
    size_t es = vtype_size(elem_type);
    if (es) {
        if (n > remaining(c) / es)
            return bt_error(BT_EFORMAT, "%s: key '%s': array of %" PRIu64 " %s at offset %" PRIu64
                            " runs past end of file (%" PRIu64 " bytes)", path, ctx, n,
                            bt_gguf_vtype_name(elem_type), c->pos, c->g->size);
        c->pos += n * es;
        return BT_OK;
    }
    if (elem_type == BT_GGUF_STRING) {
        if (n > remaining(c) / 8)
            return bt_error(BT_EFORMAT, "%s: key '%s': array of %" PRIu64 " strings at offset %" PRIu64
                            " cannot fit in the file (%" PRIu64 " bytes)", path, ctx, n, c->pos, c->g->size);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t at = c->pos;
            bt_gguf_str s;
            int rc = take_str(c, &s, "array string", ctx);
            if (rc) return rc;
            if (str_off) str_off[i] = at;
        }
        return BT_OK;
    }
    /* nested arrays */
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return bt_error(BT_EFORMAT, "%s: key '%s': arrays nested deeper than %d at offset %" PRIu64,
                        path, ctx, GGUF_MAX_ARRAY_DEPTH, c->pos);
    if (n > remaining(c) / 12)
        return bt_error(BT_EFORMAT, "%s: key '%s': array of %" PRIu64 " arrays at offset %" PRIu64
                        " cannot fit in the file (%" PRIu64 " bytes)", path, ctx, n, c->pos, c->g->size);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t et;
        uint64_t en;
        int rc = take_u32(c, &et, "nested array type", ctx);
        if (!rc) rc = take_u64(c, &en, "nested array count", ctx);
        if (!rc) rc = skip_array(c, (int)BT_MIN(et, (uint32_t)INT32_MAX), en, depth + 1, NULL, ctx);
        if (rc) return rc;
    }
    return BT_OK;
}

/* The arrays grow as entries are actually parsed, never to the header's
 * claimed count up front: a hostile count then costs memory only in
 * proportion to the bytes really present. */
static void *grow(void *arr, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap) return arr;
    int64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *na = realloc(arr, (size_t)nc * elem);
    if (!na) return NULL;                   /* arr is still owned by the caller */
    memset((char *)na + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *cap = nc;
    return na;
}

static bt_gguf_str kv_name(const bt_gguf *g, int64_t i) { return g->kv[i].key; }
static bt_gguf_str tensor_name(const bt_gguf *g, int64_t i) { return g->tensors[i].name; }
#define KV_NAME(i) kv_name(g, (i))
#define TENSOR_NAME(i) tensor_name(g, (i))

static int parse_kvs(bt_gguf *g, cursor *c, int64_t n_kv)
{
    char nb[96];
    int rc;
    for (int64_t i = 0; i < n_kv; i++) {
        gguf_kv *nkv = grow(g->kv, &g->kv_cap, i + 1, sizeof(*g->kv));
        if (!nkv)
            return bt_error(BT_ENOMEM, "%s: out of memory reading key #%" PRId64, g->path, i);
        g->kv = nkv;
        g->n_kv = i + 1;
        gguf_kv *kv = &g->kv[i];
        char ctx[48];
        snprintf(ctx, sizeof ctx, "key #%" PRId64, i);
        rc = take_str(c, &kv->key, "name", ctx);
        if (rc) return rc;
        const char *kn = safe_name(kv->key.ptr, kv->key.len, nb, sizeof nb);

        uint32_t t;
        rc = take_u32(c, &t, "value type", kn);
        if (rc) return rc;
        if (t >= BT_GGUF_VTYPE_COUNT)
            return bt_error(BT_EFORMAT, "%s: key '%s' has unknown value type %" PRIu32 " (offset %" PRIu64 ")",
                            g->path, kn, t, c->pos - 4);
        kv->type = (int)t;
        kv->val_off = c->pos;
        size_t vs = vtype_size(kv->type);
        if (vs) {
            rc = need(c, vs, "value", kn);
            if (rc) return rc;
            c->pos += vs;
        } else if (kv->type == BT_GGUF_STRING) {
            bt_gguf_str s;
            rc = take_str(c, &s, "string value", kn);
            if (rc) return rc;
        } else {
            uint32_t et;
            rc = take_u32(c, &et, "array element type", kn);
            if (!rc) rc = take_u64(c, &kv->n, "array count", kn);
            if (rc) return rc;
            kv->elem_type = (int)BT_MIN(et, (uint32_t)INT32_MAX);
            kv->elems_off = c->pos;
            if (kv->elem_type == BT_GGUF_STRING) {
                /* Reject an impossible count before allocating for it. */
                if (kv->n > remaining(c) / 8)
                    return bt_error(BT_EFORMAT, "%s: key '%s': array of %" PRIu64 " strings at offset %" PRIu64
                                    " cannot fit in the file (%" PRIu64 " bytes)", g->path, kn, kv->n,
                                    c->pos, g->size);
                kv->str_off = malloc((size_t)BT_MAX(kv->n, 1) * sizeof(uint64_t));
                if (!kv->str_off)
                    return bt_error(BT_ENOMEM, "%s: out of memory indexing key '%s'", g->path, kn);
            }
            rc = skip_array(c, kv->elem_type, kv->n, 1, kv->str_off, kn);
            if (rc) return rc;
        }
    }
    rc = index_init(&g->kv_index, g->n_kv);
    if (rc) return bt_error(rc, "%s: out of memory for %" PRId64 " keys", g->path, g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        uint64_t slot;
        int64_t dup;
        INDEX_LOOKUP(&g->kv_index, g->kv[i].key.ptr, g->kv[i].key.len, KV_NAME, slot, dup);
        if (dup >= 0)
            return bt_error(BT_EFORMAT, "%s: duplicate key '%s' (keys #%" PRId64 " and #%" PRId64 ")", g->path,
                            safe_name(g->kv[i].key.ptr, g->kv[i].key.len, nb, sizeof nb), dup, i);
        g->kv_index.slots[slot] = i;
    }
    return BT_OK;
}

static int read_alignment(bt_gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = bt_gguf_find_key(g, "general.alignment");
    if (i < 0) return BT_OK;
    int64_t a;
    int rc = bt_gguf_get_i64(g, "general.alignment", &a);
    if (rc) return bt_error(BT_EFORMAT, "%s: general.alignment must be an integer, not %s",
                            g->path, bt_gguf_vtype_name(g->kv[i].type));
    if (a <= 0 || (a & (a - 1)) != 0)
        return bt_error(BT_EFORMAT, "%s: general.alignment %" PRId64 " is not a power of two", g->path, a);
    g->alignment = (uint64_t)a;
    return BT_OK;
}

static int parse_tensors(bt_gguf *g, cursor *c, int64_t n_tensors)
{
    char nb[96];
    int rc;
    for (int64_t i = 0; i < n_tensors; i++) {
        bt_gguf_tensor *nts = grow(g->tensors, &g->tensor_cap, i + 1, sizeof(*g->tensors));
        if (!nts)
            return bt_error(BT_ENOMEM, "%s: out of memory reading tensor #%" PRId64, g->path, i);
        g->tensors = nts;
        g->n_tensors = i + 1;
        bt_gguf_tensor *t = &g->tensors[i];
        char ctx[48];
        snprintf(ctx, sizeof ctx, "tensor #%" PRId64, i);
        uint64_t info_off = c->pos;
        rc = take_str(c, &t->name, "name", ctx);
        if (rc) return rc;
        const char *tn = safe_name(t->name.ptr, t->name.len, nb, sizeof nb);
        char tctx[128];
        snprintf(tctx, sizeof tctx, "tensor '%s'", tn);

        uint32_t nd;
        rc = take_u32(c, &nd, "n_dims", tctx);
        if (rc) return rc;
        if (nd > 4)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' has %" PRIu32 " dimensions (at most 4; info at offset %" PRIu64 ")",
                            g->path, tn, nd, info_off);
        t->n_dims = nd;
        int64_t nel = 1;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v;
            rc = take_u64(c, &v, "dimension", tctx);
            if (rc) return rc;
            if (v == 0)
                return bt_error(BT_EFORMAT, "%s: tensor '%s' dimension %" PRIu32 " is zero", g->path, tn, d);
            if (v > (uint64_t)INT64_MAX)
                return bt_error(BT_EFORMAT, "%s: tensor '%s' dimension %" PRIu32 " is negative (%" PRId64 ")",
                                g->path, tn, d, (int64_t)v);
            t->ne[d] = (int64_t)v;
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                return bt_error(BT_EFORMAT, "%s: tensor '%s' element count overflows (shape %" PRId64 " x ...)",
                                g->path, tn, t->ne[0]);
        }
        uint32_t type;
        rc = take_u32(c, &type, "type", tctx);
        if (rc) return rc;
        const bt_dtype_info *di = type < BT_DT_COUNT ? bt_dtype((int)type) : NULL;
        if (!di || !di->name)
            return bt_error(BT_EUNSUPPORTED, "%s: unknown tensor type %" PRIu32 " for tensor '%s'",
                            g->path, type, tn);
        t->type = (int)type;
        rc = take_u64(c, &t->offset, "data offset", tctx);
        if (rc) return rc;

        if (di->blck <= 0 || t->ne[0] % di->blck != 0)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' row length %" PRId64 " is not a multiple of the %s block size %d",
                            g->path, tn, t->ne[0], di->name, di->blck);
        size_t row = bt_dtype_row_size(t->type, t->ne[0]);
        uint64_t nrows = (uint64_t)(nel / t->ne[0]);
        if (row == 0 || __builtin_mul_overflow((uint64_t)row, nrows, &t->nbytes))
            return bt_error(BT_EFORMAT, "%s: tensor '%s' byte size overflows (%" PRId64 " elements of %s)",
                            g->path, tn, nel, di->name);
        if (t->offset % g->alignment != 0)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                            g->path, tn, t->offset, g->alignment);
    }
    rc = index_init(&g->tensor_index, g->n_tensors);
    if (rc) return bt_error(rc, "%s: out of memory for %" PRId64 " tensors", g->path, g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const bt_gguf_tensor *t = &g->tensors[i];
        uint64_t slot;
        int64_t dup;
        INDEX_LOOKUP(&g->tensor_index, t->name.ptr, t->name.len, TENSOR_NAME, slot, dup);
        if (dup >= 0)
            return bt_error(BT_EFORMAT, "%s: duplicate tensor name '%s' (tensors #%" PRId64 " and #%" PRId64 ")",
                            g->path, safe_name(t->name.ptr, t->name.len, nb, sizeof nb), dup, i);
        g->tensor_index.slots[slot] = i;
    }
    return BT_OK;
}

/* Data section placement; needs data_off, so runs after all tensor infos. */
static int check_tensor_data(bt_gguf *g)
{
    char nb[96];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        bt_gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        if (__builtin_add_overflow(g->data_off, t->offset, &start) ||
            __builtin_add_overflow(start, t->nbytes, &end) || end > g->size)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' data (offset %" PRIu64 " + %" PRIu64
                            " bytes, data section at %" PRIu64 ") ends past end of file (%" PRIu64 " bytes)",
                            g->path, safe_name(t->name.ptr, t->name.len, nb, sizeof nb),
                            t->offset, t->nbytes, g->data_off, g->size);
        t->data = g->map + start;
    }
    return BT_OK;
}

static int parse(bt_gguf *g)
{
    cursor c = { .g = g, .pos = 0 };
    const char *path = g->path;
    if (g->size < 4)
        return bt_error(BT_EFORMAT, "%s: file too short (%" PRIu64 " bytes) to be GGUF", path, g->size);
    if (memcmp(g->map, "GGUF", 4) != 0)
        return bt_error(BT_EFORMAT, "%s: bad magic (not a GGUF file)", path);
    c.pos = 4;
    int rc = take_u32(&c, &g->version, "version", "header");
    if (rc) return rc;
    if (g->version == 1)
        return bt_error(BT_EUNSUPPORTED, "%s: GGUF version 1 is not supported (re-convert to v2 or v3)", path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            return bt_error(BT_EUNSUPPORTED, "%s: GGUF version %" PRIu32 " looks big-endian; only little-endian GGUF is supported",
                            path, __builtin_bswap32(g->version));
        return bt_error(BT_EUNSUPPORTED, "%s: unsupported GGUF version %" PRIu32 " (only 2 and 3)", path, g->version);
    }
    uint64_t nt, nkv;
    rc = take_u64(&c, &nt, "tensor count", "header");
    if (!rc) rc = take_u64(&c, &nkv, "key count", "header");
    if (rc) return rc;
    uint64_t room = remaining(&c);
    if (nkv > room / GGUF_MIN_KV_BYTES)
        return bt_error(BT_EFORMAT, "%s: header claims %" PRIu64 " keys, which cannot fit in %" PRIu64 " bytes",
                        path, nkv, g->size);
    room -= nkv * GGUF_MIN_KV_BYTES;
    if (nt > room / GGUF_MIN_TENSOR_BYTES)
        return bt_error(BT_EFORMAT, "%s: header claims %" PRIu64 " tensors, which cannot fit in %" PRIu64 " bytes",
                        path, nt, g->size);
    rc = parse_kvs(g, &c, (int64_t)nkv);
    if (!rc) rc = read_alignment(g);
    if (!rc) rc = parse_tensors(g, &c, (int64_t)nt);
    if (rc) return rc;
    /* The data section starts at the next multiple of the alignment; a
     * vocab-only file may end before that, which is fine with 0 tensors. */
    uint64_t a = g->alignment;
    if (c.pos > UINT64_MAX - a)
        return bt_error(BT_EFORMAT, "%s: header too large", path);
    g->data_off = (c.pos + a - 1) / a * a;
    return check_tensor_data(g);
}

int bt_gguf_open(const char *path, bt_gguf **out)
{
    *out = NULL;
    bt_gguf *g = calloc(1, sizeof(*g));
    if (!g) return bt_error(BT_ENOMEM, "%s: out of memory", path);
    g->path = strdup(path);
    if (!g->path) { free(g); return bt_error(BT_ENOMEM, "%s: out of memory", path); }

    int rc;
    int fd = bt_open_input(path);     /* a fifo is refused, never waited on */
    if (fd < 0) {
        rc = fd;
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = bt_error(BT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bt_error(BT_EIO, "%s: not a regular file", path);
        close(fd);
        goto fail;
    }
    g->size = (uint64_t)st.st_size;
    if (g->size == 0) {
        rc = bt_error(BT_EFORMAT, "%s: empty file", path);
        close(fd);
        goto fail;
    }
    void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        rc = bt_error(BT_EIO, "%s: cannot mmap %" PRIu64 " bytes: %s", path, g->size, strerror(errno));
        goto fail;
    }
    g->map = m;
    g->mapped = true;
    rc = parse(g);
    if (rc) goto fail;
    *out = g;
    return BT_OK;
fail:
    bt_gguf_close(g);
    return rc;
}

int bt_gguf_open_buffer(const void *data, size_t size, const char *name, bt_gguf **out)
{
    *out = NULL;
    bt_gguf *g = calloc(1, sizeof(*g));
    if (!g) return bt_error(BT_ENOMEM, "%s: out of memory", name);
    g->path = strdup(name);
    if (!g->path) { free(g); return bt_error(BT_ENOMEM, "%s: out of memory", name); }
    int rc;
    if (size == 0) {
        rc = bt_error(BT_EFORMAT, "%s: empty file", name);
        goto fail;
    }
    g->map = data;
    g->size = size;
    rc = parse(g);
    if (rc) goto fail;
    *out = g;
    return BT_OK;
fail:
    bt_gguf_close(g);
    return rc;
}

void bt_gguf_close(bt_gguf *g)
{
    if (!g) return;
    if (g->map && g->mapped) munmap((void *)g->map, (size_t)g->size);
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_off);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    free(g->owned);
    free(g->owned_names);
    if (g->release) g->release(g->release_arg);
    free(g->path);
    free(g);
}

uint32_t bt_gguf_version(const bt_gguf *g) { return g->version; }
uint64_t bt_gguf_alignment(const bt_gguf *g) { return g->alignment; }
const uint8_t *bt_gguf_file_data(const bt_gguf *g) { return g->map; }
uint64_t bt_gguf_file_size(const bt_gguf *g) { return g->size; }
uint64_t bt_gguf_data_offset(const bt_gguf *g) { return g->data_off; }
int64_t bt_gguf_n_kv(const bt_gguf *g) { return g->n_kv; }

int64_t bt_gguf_find_key(const bt_gguf *g, const char *key)
{
    if (!g->kv_index.slots || !key) return -1;
    uint64_t len = strlen(key), slot;
    int64_t found;
    INDEX_LOOKUP(&g->kv_index, key, len, KV_NAME, slot, found);
    (void)slot;
    return found;
}

bt_gguf_str bt_gguf_key(const bt_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return (bt_gguf_str){ NULL, 0 };
    return g->kv[i].key;
}

int bt_gguf_kv_type(const bt_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return -1;
    return g->kv[i].type;
}

/* ---- typed getters ---------------------------------------------------- */

/* A scalar numeric value widened without loss: integers to (is_signed, bits),
 * floats to double. */
typedef struct num {
    bool is_int, is_float, neg;
    uint64_t u;       /* magnitude for ints when !neg, else two's complement value in i */
    int64_t i;
    double f;
} num;

static bool read_num(const uint8_t *p, int type, num *n)
{
    memset(n, 0, sizeof(*n));
    switch (type) {
    case BT_GGUF_UINT8: case BT_GGUF_BOOL: n->is_int = true; n->u = p[0]; break;
    case BT_GGUF_UINT16: n->is_int = true; n->u = rd_u16(p); break;
    case BT_GGUF_UINT32: n->is_int = true; n->u = rd_u32(p); break;
    case BT_GGUF_UINT64: n->is_int = true; n->u = rd_u64(p); break;
    case BT_GGUF_INT8: n->is_int = true; n->i = (int8_t)p[0]; break;
    case BT_GGUF_INT16: n->is_int = true; n->i = (int16_t)rd_u16(p); break;
    case BT_GGUF_INT32: n->is_int = true; n->i = (int32_t)rd_u32(p); break;
    case BT_GGUF_INT64: n->is_int = true; n->i = (int64_t)rd_u64(p); break;
    case BT_GGUF_FLOAT32: { float f; memcpy(&f, p, 4); n->is_float = true; n->f = f; return true; }
    case BT_GGUF_FLOAT64: { double f; memcpy(&f, p, 8); n->is_float = true; n->f = f; return true; }
    default: return false;
    }
    switch (type) {
    case BT_GGUF_INT8: case BT_GGUF_INT16: case BT_GGUF_INT32: case BT_GGUF_INT64:
        if (n->i < 0) n->neg = true; else n->u = (uint64_t)n->i;
        break;
    default:
        n->i = n->u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n->u;
    }
    return true;
}

static int lookup(const bt_gguf *g, const char *key, const gguf_kv **kv)
{
    int64_t i = bt_gguf_find_key(g, key);
    if (i < 0) return bt_error(BT_ENOTFOUND, "%s: key '%s' not found", g->path, key);
    *kv = &g->kv[i];
    return BT_OK;
}

static int wrong_type(const bt_gguf *g, const char *key, const gguf_kv *kv, const char *want)
{
    return bt_error(BT_EFORMAT, "%s: key '%s' has type %s, expected %s", g->path, key,
                    bt_gguf_vtype_name(kv->type), want);
}

int bt_gguf_get_u32(const bt_gguf *g, const char *key, uint32_t *out)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    num n;
    if (!read_num(g->map + kv->val_off, kv->type, &n) || !n.is_int) return wrong_type(g, key, kv, "an integer");
    if (n.neg || n.u > UINT32_MAX)
        return bt_error(BT_EFORMAT, "%s: key '%s' value does not fit in uint32", g->path, key);
    *out = (uint32_t)n.u;
    return BT_OK;
}

int bt_gguf_get_i64(const bt_gguf *g, const char *key, int64_t *out)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    num n;
    if (!read_num(g->map + kv->val_off, kv->type, &n) || !n.is_int) return wrong_type(g, key, kv, "an integer");
    if (!n.neg && n.u > (uint64_t)INT64_MAX)
        return bt_error(BT_EFORMAT, "%s: key '%s' value %" PRIu64 " does not fit in int64", g->path, key, n.u);
    *out = n.i;
    return BT_OK;
}

int bt_gguf_get_f32(const bt_gguf *g, const char *key, float *out)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    num n;
    if (!read_num(g->map + kv->val_off, kv->type, &n) || kv->type == BT_GGUF_BOOL)
        return wrong_type(g, key, kv, "a number");
    if (n.is_float) *out = (float)n.f;
    else if (n.neg) *out = (float)n.i;
    else *out = (float)n.u;
    return BT_OK;
}

int bt_gguf_get_bool(const bt_gguf *g, const char *key, bool *out)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    num n;
    if (!read_num(g->map + kv->val_off, kv->type, &n) || !n.is_int) return wrong_type(g, key, kv, "bool");
    *out = n.neg || n.u != 0;
    return BT_OK;
}

int bt_gguf_get_str(const bt_gguf *g, const char *key, bt_gguf_str *out)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != BT_GGUF_STRING) return wrong_type(g, key, kv, "string");
    out->len = rd_u64(g->map + kv->val_off);
    out->ptr = (const char *)g->map + kv->val_off + 8;
    return BT_OK;
}

int bt_gguf_get_arr(const bt_gguf *g, const char *key, int *elem_type, uint64_t *n, const void **data)
{
    const gguf_kv *kv = NULL;
    int rc = lookup(g, key, &kv);
    if (rc) return rc;
    if (kv->type != BT_GGUF_ARRAY) return wrong_type(g, key, kv, "array");
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = g->map + kv->elems_off;
    return BT_OK;
}

bt_gguf_str bt_gguf_arr_str(const bt_gguf *g, int64_t key_index, uint64_t i)
{
    bt_gguf_str s = { NULL, 0 };
    if (key_index < 0 || key_index >= g->n_kv) return s;
    const gguf_kv *kv = &g->kv[key_index];
    if (kv->type != BT_GGUF_ARRAY || kv->elem_type != BT_GGUF_STRING || i >= kv->n) return s;
    s.len = rd_u64(g->map + kv->str_off[i]);
    s.ptr = (const char *)g->map + kv->str_off[i] + 8;
    return s;
}

/* ---- formatting ------------------------------------------------------- */

typedef struct sbuf { char *p; size_t cap, len; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len = BT_MIN(b->len + (size_t)n, b->cap - 1);
}

static void sb_quoted(sbuf *b, const char *s, uint64_t len, size_t max)
{
    char q[4 * 64 + 8];
    size_t n = bt_text_utf8_complete(s, (size_t)BT_MIN(len, (uint64_t)BT_MIN(max, (size_t)64)));
    bt_text_escape(s, n, q, sizeof q, 0, BT_TEXT_UTF8 | BT_TEXT_DQUOTE);
    sb_printf(b, "\"%s", q);
    sb_printf(b, len > max ? "\"...(%" PRIu64 " bytes)" : "\"", len);
}

static void sb_num(sbuf *b, const uint8_t *p, int type)
{
    num n;
    if (!read_num(p, type, &n)) { sb_printf(b, "?"); return; }
    if (type == BT_GGUF_BOOL) sb_printf(b, "%s", n.u ? "true" : "false");
    else if (n.is_float) sb_printf(b, "%.9g", n.f);
    else if (n.neg) sb_printf(b, "%" PRId64, n.i);
    else sb_printf(b, "%" PRIu64, n.u);
}

void bt_gguf_format_value(const bt_gguf *g, int64_t i, char *buf, size_t cap)
{
    if (!cap) return;
    buf[0] = 0;
    if (i < 0 || i >= g->n_kv) return;
    sbuf b = { buf, cap, 0 };
    const gguf_kv *kv = &g->kv[i];
    const uint8_t *p = g->map + kv->val_off;
    if (kv->type == BT_GGUF_STRING) {
        sb_quoted(&b, (const char *)p + 8, rd_u64(p), 60);
    } else if (kv->type != BT_GGUF_ARRAY) {
        sb_num(&b, p, kv->type);
    } else {
        sb_printf(&b, "[%s x %" PRIu64 "]", bt_gguf_vtype_name(kv->elem_type), kv->n);
        uint64_t show = BT_MIN(kv->n, (uint64_t)4);
        size_t es = vtype_size(kv->elem_type);
        if (show && (es || kv->elem_type == BT_GGUF_STRING)) {
            sb_printf(&b, " ");
            for (uint64_t k = 0; k < show; k++) {
                if (k) sb_printf(&b, ", ");
                if (es) sb_num(&b, g->map + kv->elems_off + k * es, kv->elem_type);
                else { bt_gguf_str s = bt_gguf_arr_str(g, i, k); sb_quoted(&b, s.ptr, s.len, 20); }
            }
            if (kv->n > show) sb_printf(&b, ", ...");
        }
    }
}

/* ---- tensors ---------------------------------------------------------- */

int64_t bt_gguf_n_tensors(const bt_gguf *g) { return g->n_tensors; }

const bt_gguf_tensor *bt_gguf_tensor_at(const bt_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const bt_gguf_tensor *bt_gguf_find_tensor(const bt_gguf *g, const char *name)
{
    if (!g->tensor_index.slots || !name) return NULL;
    uint64_t len = strlen(name), slot;
    int64_t found;
    INDEX_LOOKUP(&g->tensor_index, name, len, TENSOR_NAME, slot, found);
    (void)slot;
    return found < 0 ? NULL : &g->tensors[found];
}

/* ---- synthetic handles ------------------------------------------------ */

typedef struct bld_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];
    int type;
    const void *data;
    uint64_t nbytes;
} bld_tensor;

struct bt_gguf_builder {
    uint8_t *kv;              /* serialized key/value entries */
    size_t len, cap;
    uint64_t n_kv;
    bld_tensor *t;
    int64_t n_t, cap_t;
    char **keys;              /* for bt_gguf_builder_has */
    bool oom;
    void (*release)(void *);
    void *release_arg;
};

void bt_gguf_builder_own(bt_gguf_builder *b, void (*release)(void *), void *arg)
{
    b->release = release;
    b->release_arg = arg;
}

void *bt_gguf_owned(const bt_gguf *g) { return g->release_arg; }

int bt_gguf_builder_new(bt_gguf_builder **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? BT_OK : bt_error(BT_ENOMEM, "out of memory");
}

void bt_gguf_builder_free(bt_gguf_builder *b)
{
    if (!b) return;
    if (b->release) b->release(b->release_arg);
    for (int64_t i = 0; i < b->n_t; i++) free(b->t[i].name);
    for (uint64_t i = 0; i < b->n_kv; i++) free(b->keys[i]);
    free(b->keys);
    free(b->t);
    free(b->kv);
    free(b);
}

static void bput(bt_gguf_builder *b, const void *p, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->len + n) nc *= 2;
        uint8_t *nb = realloc(b->kv, nc);
        if (!nb) { b->oom = true; return; }
        b->kv = nb;
        b->cap = nc;
    }
    memcpy(b->kv + b->len, p, n);
    b->len += n;
}
static void bput_u32(bt_gguf_builder *b, uint32_t v) { bput(b, &v, 4); }
static void bput_u64(bt_gguf_builder *b, uint64_t v) { bput(b, &v, 8); }
static void bput_str(bt_gguf_builder *b, const char *s, size_t n) { bput_u64(b, n); bput(b, s, n); }

static void bkey(bt_gguf_builder *b, const char *key, uint32_t vtype)
{
    if (b->oom) return;
    char **nk = realloc(b->keys, (b->n_kv + 1) * sizeof(*nk));
    if (!nk) { b->oom = true; return; }
    b->keys = nk;
    if (!(b->keys[b->n_kv] = strdup(key))) { b->oom = true; return; }
    b->n_kv++;
    bput_str(b, key, strlen(key));
    bput_u32(b, vtype);
}

bool bt_gguf_builder_has(const bt_gguf_builder *b, const char *key)
{
    for (uint64_t i = 0; i < b->n_kv; i++)
        if (!strcmp(b->keys[i], key)) return true;
    return false;
}

void bt_gguf_builder_str(bt_gguf_builder *b, const char *key, const char *s, size_t len)
{
    bkey(b, key, BT_GGUF_STRING);
    bput_str(b, s, len);
}
void bt_gguf_builder_u32(bt_gguf_builder *b, const char *key, uint32_t v) { bkey(b, key, BT_GGUF_UINT32); bput_u32(b, v); }
void bt_gguf_builder_f32(bt_gguf_builder *b, const char *key, float v) { bkey(b, key, BT_GGUF_FLOAT32); bput(b, &v, 4); }
void bt_gguf_builder_bool(bt_gguf_builder *b, const char *key, bool v)
{
    uint8_t x = v;
    bkey(b, key, BT_GGUF_BOOL);
    bput(b, &x, 1);
}

void bt_gguf_builder_arr(bt_gguf_builder *b, const char *key, int elem_type, const void *elems, uint64_t n)
{
    size_t es = vtype_size(elem_type);
    if (!es) { b->oom = true; return; }       /* a caller bug; finish reports it */
    bkey(b, key, BT_GGUF_ARRAY);
    bput_u32(b, (uint32_t)elem_type);
    bput_u64(b, n);
    bput(b, elems, (size_t)n * es);
}

void bt_gguf_builder_arr_str(bt_gguf_builder *b, const char *key, const char *const *s,
                             const uint32_t *len, uint64_t n)
{
    bkey(b, key, BT_GGUF_ARRAY);
    bput_u32(b, BT_GGUF_STRING);
    bput_u64(b, n);
    for (uint64_t i = 0; i < n; i++) bput_str(b, s[i], len ? len[i] : strlen(s[i]));
}

void bt_gguf_builder_tensor(bt_gguf_builder *b, const char *name, uint32_t n_dims, const int64_t ne[4],
                            int type, const void *data, uint64_t nbytes)
{
    if (b->oom) return;
    bld_tensor *nt = grow(b->t, &b->cap_t, b->n_t + 1, sizeof(*b->t));
    if (!nt) { b->oom = true; return; }
    b->t = nt;
    bld_tensor *t = &b->t[b->n_t];
    if (!(t->name = strdup(name))) { b->oom = true; return; }
    b->n_t++;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = ne[d];
    t->type = type;
    t->data = data;
    t->nbytes = nbytes;
}

int bt_gguf_builder_finish(bt_gguf_builder *b, const char *label, bt_gguf **out)
{
    *out = NULL;
    int rc;
    bt_gguf *g = NULL;
    if (b->oom) { rc = bt_error(BT_ENOMEM, "%s: out of memory building the model description", label); goto done; }
    /* Header with no tensors, parsed like a file: keys get the same checks. */
    size_t hl = 24 + b->len;
    uint8_t *buf = malloc(hl);
    if (!buf) { rc = bt_error(BT_ENOMEM, "%s: out of memory", label); goto done; }
    uint32_t ver = 3;
    uint64_t zero = 0;
    memcpy(buf, "GGUF", 4);
    memcpy(buf + 4, &ver, 4);
    memcpy(buf + 8, &zero, 8);
    memcpy(buf + 16, &b->n_kv, 8);
    if (b->len) memcpy(buf + 24, b->kv, b->len);
    if ((rc = bt_gguf_open_buffer(buf, hl, label, &g))) { free(buf); goto done; }
    g->owned = buf;
    g->release = b->release;          /* the handle owns them from here on */
    g->release_arg = b->release_arg;
    b->release = NULL;

    size_t names = 0;
    for (int64_t i = 0; i < b->n_t; i++) names += strlen(b->t[i].name) + 1;
    g->owned_names = malloc(names + 1);
    g->tensors = calloc((size_t)BT_MAX(b->n_t, 1), sizeof(*g->tensors));
    if (!g->owned_names || !g->tensors) { rc = bt_error(BT_ENOMEM, "%s: out of memory", label); goto done; }
    g->tensor_cap = BT_MAX(b->n_t, 1);
    char *np = g->owned_names;
    for (int64_t i = 0; i < b->n_t; i++) {
        const bld_tensor *s = &b->t[i];
        bt_gguf_tensor *t = &g->tensors[i];
        size_t nl = strlen(s->name);
        memcpy(np, s->name, nl + 1);
        t->name = (bt_gguf_str){ np, nl };
        np += nl + 1;
        t->n_dims = s->n_dims;
        for (int d = 0; d < 4; d++) t->ne[d] = s->ne[d];
        t->type = s->type;
        t->nbytes = s->nbytes;
        t->data = s->data;
        size_t row = bt_dtype_row_size(t->type, t->ne[0]);
        uint64_t want = row;
        for (int d = 1; d < 4; d++) want *= (uint64_t)t->ne[d];
        if (row == 0 || want != t->nbytes) {
            rc = bt_error(BT_EINTERNAL, "%s: tensor '%s': %" PRIu64 " bytes for its shape and type, %" PRIu64 " given",
                          label, s->name, want, t->nbytes);
            goto done;
        }
    }
    g->n_tensors = b->n_t;
    free(g->tensor_index.slots);
    if ((rc = index_init(&g->tensor_index, g->n_tensors))) { rc = bt_error(rc, "%s: out of memory", label); goto done; }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        uint64_t slot;
        int64_t dup;
        INDEX_LOOKUP(&g->tensor_index, g->tensors[i].name.ptr, g->tensors[i].name.len, TENSOR_NAME, slot, dup);
        if (dup >= 0) {
            rc = bt_error(BT_EFORMAT, "%s: two weights map to tensor '%s'", label, g->tensors[i].name.ptr);
            goto done;
        }
        g->tensor_index.slots[slot] = i;
    }
    *out = g;
    g = NULL;
done:
    bt_gguf_close(g);
    bt_gguf_builder_free(b);
    return rc;
}
