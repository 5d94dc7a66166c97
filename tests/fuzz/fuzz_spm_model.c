/* fuzz_spm_model.c - SentencePiece tokenizer.model files
 * (bt_spm_model_parse), then an SPM tokenizer built on the pieces as a
 * Hugging Face folder's tokenizer.model would give it: encode, decode and
 * every piece. Input: the file. */
#include "fuzz.h"
#include "model/spm_model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    bt_log_level = 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a private copy, so ASan sees any read past the file's end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) abort();
    if (size) memcpy(buf, data, size);
    bt_spm_model m;
    if (bt_spm_model_parse(buf, size, "fuzz.model", &m) != BT_OK) {
        FUZZ_CHECK(bt_errmsg()[0]);
        free(buf);
        return 0;
    }
    FUZZ_CHECK(m.n_pieces > 0);
    for (int32_t i = 0; i < m.n_pieces; i++) {
        FUZZ_CHECK((const uint8_t *)m.text[i] >= buf && (const uint8_t *)m.text[i] + m.len[i] <= buf + size);
        FUZZ_CHECK(m.type[i] >= 1 && m.type[i] <= 6);
    }
    FUZZ_CHECK(m.unk_id >= -1 && m.unk_id < m.n_pieces && m.bos_id >= -1 && m.bos_id < m.n_pieces &&
               m.eos_id >= -1 && m.eos_id < m.n_pieces);
    bt_vocab v = { .kind = BT_VOCAB_SPM, .n_tokens = m.n_pieces, .text = m.text, .len = m.len,
                   .scores = m.score, .type = m.type, .bos = m.bos_id, .eos = m.eos_id, .unk = m.unk_id,
                   .pad = -1, .eot = -1, .add_bos = true, .add_space_prefix = m.add_dummy_prefix };
    bt_tokenizer *t = NULL;
    if (bt_tokenizer_new(&v, &t) == BT_OK) {
        static const char *const texts[] = { "Once upon a time", " hello  world\n", "\xe6\x97\xa5\xff\x00z", "<s></s><unk>" };
        for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
            int32_t *ids = NULL; size_t n = 0;
            if (bt_tokenize(t, texts[k], strlen(texts[k]) + (k == 2), k & 1, k & 2, &ids, &n) == BT_OK) {
                for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < m.n_pieces);
                char *out = NULL; size_t ol = 0;
                if (bt_detokenize(t, ids, n, &out, &ol) == BT_OK) FUZZ_CHECK(out != NULL);
                free(out);
            }
            free(ids);
        }
        for (int32_t id = -1; id <= m.n_pieces; id++) {
            size_t len = 0;
            const char *p = bt_token_piece(t, id, &len);
            if (p && len) { volatile char c = p[len - 1]; (void)c; }
        }
        bt_tokenizer_free(t);
    } else FUZZ_CHECK(bt_errmsg()[0]);
    bt_spm_model_free(&m);
    free(buf);
    return 0;
}
