/* fuzz_tokenizer.c - the tokenizers on real vocabularies: llama2.c
 * (stories260K + tok512), SPM and byte-level BPE GGUF vocabularies
 * (llama-spm, gpt-2, falcon, deepseek-coder from BT_SHARED/models).
 * Input: one byte choosing the vocabulary and the flags, then the text.
 * Every id is in range, decoding succeeds, and decode(encode(x)) == x for
 * valid UTF-8 without special-token parsing where the tokenizer is
 * lossless: byte-level BPE for bytes the vocabulary can spell; SPM and
 * llama2.c (byte fallback) for text that does not start with a space (the
 * space prefix is added, then dropped), has no NUL and, for SPM, no U+2581. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1   /* memmem */
#endif
#include "fuzz.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <stdbool.h>

/* byte_ok[b]: the vocabulary can spell byte b. A byte-level BPE vocabulary
 * without the token for a byte drops it, as llama.cpp does (falcon has no
 * token for most control characters), so round trips are only checked on
 * text made of bytes it can spell. */
typedef struct vocab_slot { bt_model *m; bt_tokenizer *t; bool lossless_bpe; bool byte_ok[256]; } vocab_slot;
static vocab_slot slots[8];
static int n_slots;

/* GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
 * others map to U+0100 upwards in byte order. Writes the UTF-8 into buf. */
static const char *byte_piece(int b, char *buf)
{
    int n = 0, cp = b;
    bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    if (!printable) {
        for (int i = 0; i < b; i++)
            if (!((i >= '!' && i <= '~') || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { buf[0] = (char)cp; buf[1] = 0; }
    else { buf[0] = (char)(0xc0 | cp >> 6); buf[1] = (char)(0x80 | (cp & 0x3f)); buf[2] = 0; }
    return buf;
}

static void add(const char *model, const char *tok, bool bpe)
{
    char mp[1024], tp[1024];
    snprintf(mp, sizeof mp, "%s/models/%s", fuzz_shared(), model);
    if (tok) snprintf(tp, sizeof tp, "%s/models/%s", fuzz_shared(), tok);
    vocab_slot *s = &slots[n_slots];
    if (bt_model_load(mp, tok ? tp : NULL, &s->m) || !s->m->has_vocab || bt_tokenizer_new(&s->m->vocab, &s->t)) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s (set BT_SHARED)\n", mp, bt_errmsg());
        exit(1);
    }
    s->lossless_bpe = bpe;
    for (int b = 0; b < 256; b++) s->byte_ok[b] = !bpe || bt_tokenizer_find(s->t, byte_piece(b, mp), strlen(mp)) >= 0;
    n_slots++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    bt_log_level = 0;
    add("llama2c/stories260K.bin", "llama2c/tok512.bin", false);
    add("gguf-vocab/ggml-vocab-llama-spm.gguf", NULL, false);
    add("gguf-vocab/ggml-vocab-gpt-2.gguf", NULL, true);
    add("gguf-vocab/ggml-vocab-falcon.gguf", NULL, true);
    add("gguf-vocab/ggml-vocab-deepseek-coder.gguf", NULL, true);
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : c & (0x7f >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const vocab_slot *s = &slots[(data[0] & 7) % n_slots];
    bool add_special = data[0] & 0x10, parse_special = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    int32_t *ids = NULL;
    size_t n = 0;
    if (bt_tokenize(s->t, text, len, add_special, parse_special, &ids, &n) != BT_OK) {
        FUZZ_CHECK(bt_errmsg()[0]);
        return 0;
    }
    int32_t nv = bt_tokenizer_n_vocab(s->t);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
    char *out = NULL;
    size_t out_len = 0;
    FUZZ_CHECK(bt_detokenize(s->t, ids, n, &out, &out_len) == BT_OK && out);
    bool spellable = true;
    for (size_t i = 0; i < len; i++) spellable &= s->byte_ok[(uint8_t)text[i]];
    /* SPM writes spaces as U+2581, so a U+2581 in the text reads back as ' ' */
    if (s->m->vocab.kind == BT_VOCAB_SPM && memmem(text, len, "\xe2\x96\x81", 3)) spellable = false;
    if (!add_special && !parse_special && spellable && valid_utf8(data + 1, len) && !memchr(text, 0, len) &&
        (s->lossless_bpe || (len && text[0] != ' '))) {
        if (out_len != len || memcmp(out, text, len)) {
            fprintf(stderr, "round trip: %zu bytes in, %zu out: '%.*s' -> '%.*s'\n", len, out_len,
                    (int)len, text, (int)out_len, out);
            abort();
        }
    }
    free(out);
    free(ids);
    return 0;
}
