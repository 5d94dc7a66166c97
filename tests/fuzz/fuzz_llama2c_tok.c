/* fuzz_llama2c_tok.c - llama2.c tokenizer files
 * (bt_llama2c_tokenizer_load_buffer), then a tokenizer built on the result:
 * encode, decode and every piece. Input: 2 bytes little-endian vocabulary
 * size (1..4096, as the checkpoint would say), then the file. */
#include "fuzz.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

/* The smallest plausible checkpoint (dim 2, one layer, one head, vocab 1,
 * seq 1): only there to own the tokenizer's storage. */
static float ckpt[7 + 32];   /* header + 32 f32 of weights (see l2c_parse) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    bt_log_level = 0;
    int32_t h[7] = { 2, 1, 1, 1, 1, 1, 1 };
    memcpy(ckpt, h, sizeof h);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int n_vocab = 1 + ((data[0] | data[1] << 8) % 4096);
    bt_model *m = NULL;
    FUZZ_CHECK(bt_model_load_buffer(ckpt, sizeof ckpt, "ckpt.bin", &m) == BT_OK);
    if (bt_llama2c_tokenizer_load_buffer(data + 2, size - 2, "fuzz.tok", n_vocab, m) != BT_OK) {
        FUZZ_CHECK(bt_errmsg()[0]);
        bt_model_free(m);
        return 0;
    }
    FUZZ_CHECK(m->has_vocab && m->vocab.n_tokens == n_vocab);
    bt_tokenizer *t = NULL;
    if (bt_tokenizer_new(&m->vocab, &t) == BT_OK) {
        static const char *const texts[] = { "Once upon a time", " hello  world\n", "\xe6\x97\xa5\xff\x00z", "<s></s><unk>" };
        for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
            int32_t *ids = NULL; size_t n = 0;
            if (bt_tokenize(t, texts[k], strlen(texts[k]) + (k == 2), k & 1, k & 2, &ids, &n) == BT_OK) {
                for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < n_vocab);
                char *out = NULL; size_t ol = 0;
                if (bt_detokenize(t, ids, n, &out, &ol) == BT_OK) FUZZ_CHECK(out != NULL);
                free(out);
            }
            free(ids);
        }
        for (int32_t id = -1; id <= n_vocab; id++) {
            size_t len = 0;
            const char *p = bt_token_piece(t, id, &len);
            if (p && len) { volatile char c = p[len - 1]; (void)c; }
        }
        bt_tokenizer_free(t);
    }
    bt_model_free(m);
    return 0;
}
