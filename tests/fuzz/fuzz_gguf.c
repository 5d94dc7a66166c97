/* fuzz_gguf.c - the GGUF reader (bt_gguf_open_buffer and every accessor),
 * then the model loader over the same bytes (config, vocabulary, weight
 * binding) and, when a vocabulary loads, the tokenizer built from it. */
#include "fuzz.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { bt_log_level = 0; return 0; }

static void exercise_gguf(const bt_gguf *g)
{
    char buf[256];
    for (int64_t i = 0; i < bt_gguf_n_kv(g); i++) {
        bt_gguf_str k = bt_gguf_key(g, i);
        FUZZ_CHECK(k.ptr != NULL || k.len == 0);
        bt_gguf_format_value(g, i, buf, sizeof buf);
        FUZZ_CHECK(memchr(buf, 0, sizeof buf) != NULL);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(k.len < 120 ? k.len : 120), k.ptr);
        uint32_t u; int64_t l; float f; bool b; bt_gguf_str s;
        (void)bt_gguf_get_u32(g, key, &u); (void)bt_gguf_get_i64(g, key, &l);
        (void)bt_gguf_get_f32(g, key, &f); (void)bt_gguf_get_bool(g, key, &b);
        if (bt_gguf_get_str(g, key, &s) == BT_OK && s.len) { volatile char c = s.ptr[s.len - 1]; (void)c; }
        int et; uint64_t n; const void *d;
        if (bt_gguf_get_arr(g, key, &et, &n, &d) == BT_OK && et == BT_GGUF_STRING && n) {
            int64_t ki = bt_gguf_find_key(g, key);
            bt_gguf_str a = bt_gguf_arr_str(g, ki, n - 1), z = bt_gguf_arr_str(g, ki, 0);
            if (a.len) { volatile char c = a.ptr[a.len - 1]; (void)c; }
            if (z.len) { volatile char c = z.ptr[0]; (void)c; }
        }
    }
    const uint8_t *base = bt_gguf_file_data(g);
    uint64_t size = bt_gguf_file_size(g);
    for (int64_t i = 0; i < bt_gguf_n_tensors(g); i++) {
        const bt_gguf_tensor *t = bt_gguf_tensor_at(g, i);
        FUZZ_CHECK(t != NULL);
        const uint8_t *td = t->data;
        if (td && t->nbytes) {
            FUZZ_CHECK(td >= base && t->nbytes <= size && td - base <= (ptrdiff_t)(size - t->nbytes));
            volatile uint8_t c = td[t->nbytes - 1]; (void)c;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_gguf *g = NULL;
    if (bt_gguf_open_buffer(data, size, "fuzz.gguf", &g) == BT_OK) {
        exercise_gguf(g);
        bt_gguf_close(g);
    } else {
        FUZZ_CHECK(!g && bt_errmsg()[0]);
    }
    if (size < 4 || memcmp(data, "GGUF", 4)) return 0;   /* llama2.c: fuzz_llama2c */

    bt_model *m = NULL;
    if (bt_model_load_buffer(data, size, "fuzz.gguf", &m) != BT_OK) {
        FUZZ_CHECK(!m && bt_errmsg()[0]);
        return 0;
    }
    if (m->has_vocab) {
        bt_tokenizer *t = NULL;
        if (bt_tokenizer_new(&m->vocab, &t) == BT_OK) {
            static const char text[] = "Hello world! <|im_start|>user\n\xe6\x97\xa5\xe6\x9c\xac 123 \xff";
            int32_t *ids = NULL; size_t n = 0;
            if (bt_tokenize(t, text, sizeof text - 1, true, true, &ids, &n) == BT_OK) {
                for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < bt_tokenizer_n_vocab(t));
                char *out = NULL; size_t ol = 0;
                if (bt_detokenize(t, ids, n, &out, &ol) == BT_OK) FUZZ_CHECK(strlen(out) <= ol);
                free(out);
            }
            free(ids);
            bt_tokenizer_free(t);
        }
    }
    bt_model_free(m);
    return 0;
}
