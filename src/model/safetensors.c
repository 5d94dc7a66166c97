/* safetensors.c - read-only safetensors reader over one mmap.
 *
 * The header is parsed with jansson (duplicate keys rejected) and checked
 * entry by entry against the file size before anything else may look at
 * it; the rules are those of huggingface/safetensors' validate(): every
 * tensor's byte range equals its shape times its dtype size, and sorted by
 * offset the ranges tile the data section from 0 to its end. Names and
 * dtype strings are copied out of the JSON once; the JSON is then freed. */
#include "model/safetensors.h"
#include "base/dtype.h"
#include "base/text.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation's limit: a larger header is not a model. */
#define ST_MAX_HEADER ((uint64_t)100000000)

struct bt_safetensors {
    char *path;
    const uint8_t *map;
    uint64_t size;
    bool mapped;
    int64_t n;
    bt_st_tensor *t;
    int64_t *by_name;          /* indices sorted by name, for bsearch */
    char *strings;             /* names and dtype strings, one arena */
};

static const struct { const char *name; size_t size; int dtype; } DTYPES[] = {
    { "F64", 8, BT_DT_F64 }, { "F32", 4, BT_DT_F32 }, { "F16", 2, BT_DT_F16 }, { "BF16", 2, BT_DT_BF16 },
    { "I64", 8, BT_DT_I64 }, { "I32", 4, BT_DT_I32 }, { "I16", 2, BT_DT_I16 }, { "I8", 1, BT_DT_I8 },
    { "U64", 8, -1 }, { "U32", 4, -1 }, { "U16", 2, -1 }, { "U8", 1, -1 }, { "BOOL", 1, -1 },
    { "F8_E4M3", 1, -1 }, { "F8_E5M2", 1, -1 },
};

static const char *esc(const char *s, char *buf, size_t cap)
{
    bt_text_escape(s, strlen(s) < cap * 4 ? strlen(s) : cap * 4, buf, cap, 0,
                   BT_TEXT_UTF8 | BT_TEXT_SQUOTE | BT_TEXT_ELLIPSIS);
    return buf;
}

static const bt_safetensors *g_sort_st;     /* qsort has no context argument */
static int cmp_name(const void *a, const void *b)
{
    return strcmp(g_sort_st->t[*(const int64_t *)a].name, g_sort_st->t[*(const int64_t *)b].name);
}
static int cmp_offset(const void *a, const void *b)
{
    const bt_st_tensor *x = &g_sort_st->t[*(const int64_t *)a], *y = &g_sort_st->t[*(const int64_t *)b];
    const uint8_t *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* data_offsets as two non-negative integers; begin <= end. */
static int get_offsets(const bt_safetensors *st, const char *tn, json_t *o, uint64_t *b, uint64_t *e)
{
    if (!json_is_array(o) || json_array_size(o) != 2 || !json_is_integer(json_array_get(o, 0)) ||
        !json_is_integer(json_array_get(o, 1)))
        return bt_error(BT_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end] integers", st->path, tn);
    json_int_t jb = json_integer_value(json_array_get(o, 0)), je = json_integer_value(json_array_get(o, 1));
    if (jb < 0 || je < 0 || je < jb)
        return bt_error(BT_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] are not an ascending byte range",
                        st->path, tn, (long long)jb, (long long)je);
    *b = (uint64_t)jb;
    *e = (uint64_t)je;
    return BT_OK;
}

static int parse_header(bt_safetensors *st)
{
    char nb[96];
    if (st->size < 8)
        return bt_error(BT_EFORMAT, "%s: truncated: %" PRIu64 " bytes, too short for the safetensors header length",
                        st->path, st->size);
    uint64_t hlen;
    memcpy(&hlen, st->map, 8);
    if (hlen > ST_MAX_HEADER)
        return bt_error(BT_EFORMAT, "%s: header length %" PRIu64 " is absurd (limit %" PRIu64 "; not a safetensors file?)",
                        st->path, hlen, ST_MAX_HEADER);
    if (hlen > st->size - 8)
        return bt_error(BT_EFORMAT, "%s: truncated: header of %" PRIu64 " bytes runs past the end of the file (%" PRIu64 " bytes)",
                        st->path, hlen, st->size);
    if (hlen < 2 || st->map[8] != '{')
        return bt_error(BT_EFORMAT, "%s: header is not a JSON object", st->path);
    const uint8_t *data = st->map + 8 + hlen;
    uint64_t dsize = st->size - 8 - hlen;

    json_error_t je;
    json_t *root = json_loadb((const char *)st->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return bt_error(BT_EFORMAT, "%s: bad header JSON at byte %d: %s", st->path, je.position + 8, je.text);
    int rc = BT_OK;
    int64_t *order = NULL;
    if (!json_is_object(root)) { rc = bt_error(BT_EFORMAT, "%s: header is not a JSON object", st->path); goto done; }

    size_t n = json_object_size(root), strbytes = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        strbytes += strlen(key) + 1;
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) { rc = bt_error(BT_EFORMAT, "%s: __metadata__ is not an object", st->path); goto done; }
            const char *mk; json_t *mv;
            json_object_foreach(val, mk, mv)
                if (!json_is_string(mv)) {
                    rc = bt_error(BT_EFORMAT, "%s: __metadata__ '%s' is not a string", st->path, esc(mk, nb, sizeof nb));
                    goto done;
                }
            n--;
        }
    }
    st->t = calloc(n ? n : 1, sizeof(*st->t));
    st->by_name = calloc(n ? n : 1, sizeof(*st->by_name));
    order = calloc(n ? n : 1, sizeof(*order));
    st->strings = malloc(strbytes + 1);
    if (!st->t || !st->by_name || !order || !st->strings) { rc = bt_error(BT_ENOMEM, "%s: out of memory", st->path); goto done; }
    char *sp = st->strings;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        const char *tn = esc(key, nb, sizeof nb);
        bt_st_tensor *t = &st->t[st->n];
        if (!json_is_object(val)) { rc = bt_error(BT_EFORMAT, "%s: tensor '%s' is not an object", st->path, tn); goto done; }
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_string(jd)) { rc = bt_error(BT_EFORMAT, "%s: tensor '%s' has no dtype string", st->path, tn); goto done; }
        size_t es = 0;
        for (size_t k = 0; k < BT_ARRAY_SIZE(DTYPES); k++)
            if (!strcmp(json_string_value(jd), DTYPES[k].name)) {
                es = DTYPES[k].size; t->dtype = DTYPES[k].dtype; t->dtype_name = DTYPES[k].name;
            }
        if (!es) {
            char db[48];
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s' has unknown dtype %s", st->path, tn,
                          esc(json_string_value(jd), db, sizeof db));
            goto done;
        }
        if (!json_is_array(js) || json_array_size(js) > BT_ST_MAX_DIMS) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s': shape must be an array of at most %d integers",
                          st->path, tn, BT_ST_MAX_DIMS);
            goto done;
        }
        uint64_t nel = 1;
        bool overflow = false;
        t->n_dims = (int)json_array_size(js);
        for (int d = 0; d < t->n_dims; d++) {
            json_t *x = json_array_get(js, (size_t)d);
            if (!json_is_integer(x) || json_integer_value(x) < 0) {
                rc = bt_error(BT_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", st->path, tn, d);
                goto done;
            }
            t->shape[d] = (int64_t)json_integer_value(x);
            overflow |= __builtin_mul_overflow(nel, (uint64_t)t->shape[d], &nel);
        }
        uint64_t b = 0, e = 0, want;
        if ((rc = get_offsets(st, tn, jo, &b, &e))) goto done;
        if (overflow || __builtin_mul_overflow(nel, (uint64_t)es, &want)) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s': shape is absurd (element count overflows)", st->path, tn);
            goto done;
        }
        if (want != e - b) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s': %s shape needs %" PRIu64 " bytes but data_offsets [%" PRIu64
                          ", %" PRIu64 "] give %" PRIu64, st->path, tn, t->dtype_name, want, b, e, e - b);
            goto done;
        }
        if (e > dsize) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s' data [%" PRIu64 ", %" PRIu64 ") ends past end of file "
                          "(data section has %" PRIu64 " bytes)", st->path, tn, b, e, dsize);
            goto done;
        }
        size_t kl = strlen(key) + 1;
        memcpy(sp, key, kl);
        t->name = sp;
        sp += kl;
        t->nbytes = e - b;
        t->data = data + b;
        order[st->n] = st->n;
        st->by_name[st->n] = st->n;
        st->n++;
    }
    /* The ranges must tile the data section: no overlap, no gap. */
    g_sort_st = st;
    qsort(order, (size_t)st->n, sizeof(*order), cmp_offset);
    const uint8_t *at = data;
    for (int64_t i = 0; i < st->n; i++) {
        const bt_st_tensor *t = &st->t[order[i]];
        if ((const uint8_t *)t->data != at) {
            const char *what = (const uint8_t *)t->data < at ? "overlaps the previous tensor" : "leaves a gap before it";
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s' at data offset %" PRIu64 " %s (expected offset %" PRIu64 ")",
                          st->path, esc(t->name, nb, sizeof nb), (uint64_t)((const uint8_t *)t->data - data), what,
                          (uint64_t)(at - data));
            goto done;
        }
        at += t->nbytes;
    }
    if ((uint64_t)(at - data) != dsize) {
        rc = bt_error(BT_EFORMAT, "%s: %" PRIu64 " bytes after the last tensor are not described by the header",
                      st->path, dsize - (uint64_t)(at - data));
        goto done;
    }
    qsort(st->by_name, (size_t)st->n, sizeof(*st->by_name), cmp_name);
done:
    free(order);
    json_decref(root);
    return rc;
}

int bt_safetensors_open_buffer(const void *data, size_t size, const char *name, bt_safetensors **out)
{
    *out = NULL;
    bt_safetensors *st = calloc(1, sizeof(*st));
    if (!st || !(st->path = strdup(name))) { free(st); return bt_error(BT_ENOMEM, "%s: out of memory", name); }
    st->map = data;
    st->size = size;
    int rc = parse_header(st);
    if (rc) { bt_safetensors_close(st); return rc; }
    *out = st;
    return BT_OK;
}

int bt_safetensors_open(const char *path, bt_safetensors **out)
{
    *out = NULL;
    bt_safetensors *st = calloc(1, sizeof(*st));
    if (!st || !(st->path = strdup(path))) { free(st); return bt_error(BT_ENOMEM, "%s: out of memory", path); }
    int rc;
    int fd = bt_open_input(path);     /* a fifo is refused, never waited on */
    if (fd < 0) {
        rc = fd;
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = bt_error(BT_EIO, "%s: not a regular file", path);
        close(fd);
        goto fail;
    }
    st->size = (uint64_t)sb.st_size;
    if (st->size == 0) { close(fd); rc = bt_error(BT_EFORMAT, "%s: empty file", path); goto fail; }
    void *m = mmap(NULL, (size_t)st->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        rc = bt_error(BT_EIO, "%s: cannot mmap %" PRIu64 " bytes: %s", path, st->size, strerror(errno));
        goto fail;
    }
    st->map = m;
    st->mapped = true;
    if ((rc = parse_header(st))) goto fail;
    *out = st;
    return BT_OK;
fail:
    bt_safetensors_close(st);
    return rc;
}

void bt_safetensors_close(bt_safetensors *st)
{
    if (!st) return;
    if (st->mapped) munmap((void *)st->map, (size_t)st->size);
    free(st->t);
    free(st->by_name);
    free(st->strings);
    free(st->path);
    free(st);
}

int64_t bt_safetensors_n_tensors(const bt_safetensors *st) { return st->n; }
const bt_st_tensor *bt_safetensors_tensor_at(const bt_safetensors *st, int64_t i)
{
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}
const uint8_t *bt_safetensors_map(const bt_safetensors *st) { return st->map; }
uint64_t bt_safetensors_size(const bt_safetensors *st) { return st->size; }
const char *bt_safetensors_path(const bt_safetensors *st) { return st->path; }

const bt_st_tensor *bt_safetensors_find(const bt_safetensors *st, const char *name)
{
    int64_t lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->t[st->by_name[mid]].name, name);
        if (!c) return &st->t[st->by_name[mid]];
        if (c < 0) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}
