/* hf_check_tool.c - hf_check_tool FOLDER EXPECT.json: the synthetic GGUF a
 * Hugging Face folder becomes (bt_hf_open) against what tests/hf_make_arch.py
 * says llama.cpp's converter would write: exactly the expected tensor names
 * and ggml shapes, the metadata keys and values, Llama 3 rope_freqs values,
 * and (Llama/Mistral) the q rows permuted for interleaved RoPE. Prints one
 * line per mismatch; exit 0 when everything matches, 1 otherwise, 2 when the
 * folder does not load. Used by tests/hf_arch.sh.
 *
 * hf_check_tool FOLDER --same FILE.gguf: the folder's synthetic GGUF holds
 * exactly FILE's tensors (names, types, shapes, bytes) and the same
 * ARCH.block_count and ARCH.nextn_predict_layers. Used by tests/hf_hybrid.sh
 * against tools/make-tiny-hybrid.py's GGUF of the same weights. */
#include "model/gguf.h"
#include "model/hf.h"
#include "kernels/cpu/kernels.h"
#include "base/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define BAD(...) do { printf("mismatch: " __VA_ARGS__); printf("\n"); failures++; } while (0)

static float elem(const bt_gguf_tensor *t, int64_t i)
{
    float f[1];
    if (t->type == BT_DT_F32) { memcpy(f, (const float *)t->data + i, 4); return f[0]; }
    uint16_t h;
    memcpy(&h, (const uint16_t *)t->data + i, 2);
    if (t->type == BT_DT_BF16) { uint32_t u = (uint32_t)h << 16; memcpy(f, &u, 4); return f[0]; }
    bt_dequant_row(t->type, &h, f, 1);
    return f[0];
}

static void same_u32(const bt_gguf *g, const bt_gguf *f, const char *arch, const char *suffix)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    uint32_t a = 0, b = 0;
    int ra = bt_gguf_get_u32(g, k, &a), rb = bt_gguf_get_u32(f, k, &b);
    if ((ra == BT_OK) != (rb == BT_OK) || a != b)
        BAD("key %s: folder %s%u, gguf %s%u", k, ra ? "absent " : "", a, rb ? "absent " : "", b);
}

static int same(const char *folder, const char *file)
{
    bt_gguf *g = NULL, *f = NULL;
    if (bt_hf_open(folder, &g) || bt_gguf_open(file, &f)) {
        fprintf(stderr, "%s\n", bt_errmsg());
        bt_gguf_close(g);
        return 2;
    }
    char name[256];
    for (int64_t i = 0; i < bt_gguf_n_tensors(f); i++) {
        const bt_gguf_tensor *w = bt_gguf_tensor_at(f, i);
        snprintf(name, sizeof name, "%.*s", (int)w->name.len, w->name.ptr);
        const bt_gguf_tensor *t = bt_gguf_find_tensor(g, name);
        if (!t) { BAD("tensor %s is missing", name); continue; }
        if (t->type != w->type || t->n_dims != w->n_dims || memcmp(t->ne, w->ne, sizeof t->ne))
            BAD("%s: type %d [%lld, %lld, %lld], gguf type %d [%lld, %lld, %lld]", name, t->type, (long long)t->ne[0],
                (long long)t->ne[1], (long long)t->ne[2], w->type, (long long)w->ne[0], (long long)w->ne[1],
                (long long)w->ne[2]);
        else if (t->nbytes != w->nbytes || memcmp(t->data, w->data, t->nbytes))
            BAD("%s: the values differ", name);
    }
    if (bt_gguf_n_tensors(g) != bt_gguf_n_tensors(f))
        BAD("%lld tensors, the gguf has %lld", (long long)bt_gguf_n_tensors(g), (long long)bt_gguf_n_tensors(f));
    bt_gguf_str s;
    char arch[64] = "";
    if (bt_gguf_get_str(f, "general.architecture", &s) == BT_OK) snprintf(arch, sizeof arch, "%.*s", (int)s.len, s.ptr);
    same_u32(g, f, arch, "block_count");
    same_u32(g, f, arch, "nextn_predict_layers");
    printf("%s: %lld tensors as in %s: %s\n", folder, (long long)bt_gguf_n_tensors(g), file, failures ? "MISMATCH" : "ok");
    bt_gguf_close(g);
    bt_gguf_close(f);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[2], "--same")) {
        bt_log_level = 0;
        return same(argv[1], argv[3]);
    }
    if (argc != 3) { fprintf(stderr, "usage: hf_check_tool FOLDER EXPECT.json | FOLDER --same FILE.gguf\n"); return 2; }
    bt_log_level = 0;
    json_error_t je;
    json_t *exp = json_load_file(argv[2], 0, &je);
    if (!exp) { fprintf(stderr, "%s: %s\n", argv[2], je.text); return 2; }
    bt_gguf *g = NULL;
    if (bt_hf_open(argv[1], &g)) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }

    json_t *want = json_object_get(exp, "tensors");
    const char *name;
    json_t *shape;
    const bool bf16 = !strcmp(json_string_value(json_object_get(exp, "dtype")), "bf16");
    json_object_foreach(want, name, shape) {
        const bt_gguf_tensor *t = bt_gguf_find_tensor(g, name);
        if (!t) { BAD("tensor %s is missing", name); continue; }
        for (size_t d = 0; d < 4; d++) {
            int64_t w = d < json_array_size(shape) ? json_integer_value(json_array_get(shape, d)) : 1;
            if (t->ne[d] != w) BAD("%s ne[%zu] = %lld, expected %lld", name, d, (long long)t->ne[d], (long long)w);
        }
        int wt = !strcmp(name, "rope_freqs.weight") || !bf16 ? BT_DT_F32 : BT_DT_BF16;
        if (t->type != wt) BAD("%s has type %d, expected %d", name, t->type, wt);
    }
    if (bt_gguf_n_tensors(g) != (int64_t)json_object_size(want))
        BAD("%lld tensors, expected %zu", (long long)bt_gguf_n_tensors(g), json_object_size(want));

    json_t *v;
    json_object_foreach(json_object_get(exp, "keys"), name, v) {
        if (json_is_boolean(v)) {
            bool b;
            if (bt_gguf_get_bool(g, name, &b) || b != json_is_true(v)) BAD("key %s", name);
        } else if (json_is_integer(v)) {
            uint32_t u;
            if (bt_gguf_get_u32(g, name, &u) || u != json_integer_value(v)) BAD("key %s", name);
        } else {
            float f;
            if (bt_gguf_get_f32(g, name, &f) || f != (float)json_number_value(v)) BAD("key %s", name);
        }
    }
    bt_gguf_str s;
    const char *arch = json_string_value(json_object_get(exp, "arch"));
    if (bt_gguf_get_str(g, "general.architecture", &s) || s.len != strlen(arch) || memcmp(s.ptr, arch, s.len))
        BAD("general.architecture is not %s", arch);

    json_t *rf = json_object_get(exp, "rope_freqs");
    const bt_gguf_tensor *t = bt_gguf_find_tensor(g, "rope_freqs.weight");
    for (size_t i = 0; rf && t && i < json_array_size(rf); i++) {
        double w = json_number_value(json_array_get(rf, i)), got = elem(t, (int64_t)i);
        if (fabs(got - w) > 1e-6 * fabs(w)) BAD("rope_freqs[%zu] = %.9g, expected %.9g", i, got, w);
    }
    json_object_foreach(json_object_get(exp, "samples"), name, v) {
        const bt_gguf_tensor *st = bt_gguf_find_tensor(g, name);
        for (size_t i = 0; st && i < json_array_size(v); i++) {
            json_t *pr = json_array_get(v, i);
            int64_t at = json_integer_value(json_array_get(pr, 0));
            double w = json_number_value(json_array_get(pr, 1)), got = elem(st, at);
            if (fabs(got - w) > (bf16 ? 1e-2 * fabs(w) + 1e-6 : 0)) BAD("%s[%lld] = %.9g, expected %.9g", name, (long long)at, got, w);
        }
    }
    json_t *q = json_object_get(exp, "q0_permuted_first_col");
    t = bt_gguf_find_tensor(g, "blk.0.attn_q.weight");
    for (size_t r = 0; q && t && r < json_array_size(q); r++) {
        double w = json_number_value(json_array_get(q, r)), got = elem(t, (int64_t)r * t->ne[0]);
        if (fabs(got - w) > (bf16 ? 1e-2 * fabs(w) + 1e-6 : 0)) BAD("attn_q row %zu col 0 = %.9g, expected %.9g (permutation)", r, got, w);
    }
    printf("%s: %lld tensors, %zu keys checked%s%s: %s\n", argv[1], (long long)bt_gguf_n_tensors(g),
           json_object_size(json_object_get(exp, "keys")), rf ? ", rope_freqs" : "", q ? ", q permutation" : "",
           failures ? "MISMATCH" : "ok");
    bt_gguf_close(g);
    json_decref(exp);
    return failures ? 1 : 0;
}
