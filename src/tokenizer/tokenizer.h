/* tokenizer.h - SentencePiece-style (SPM), byte-level BPE, character BPE
 * with byte fallback (tokenizer.json) and llama2.c tokenizers over a
 * plain-data vocabulary.
 *
 * Model loaders fill a bt_vocab (borrowed pointers into their mapping); the
 * tokenizer builds its lookup tables from it and never touches files. BPE
 * pre-tokenization uses PCRE2 with Unicode properties; the pattern set is
 * chosen by bt_vocab.pre (GGUF tokenizer.ggml.pre) and an unknown value is an
 * error, never a silent fallback. */
#ifndef BT_TOKENIZER_H
#define BT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum bt_vocab_kind {
    BT_VOCAB_SPM = 1,     /* GGUF tokenizer.ggml.model = "llama" (pieces use U+2581 for space) */
    BT_VOCAB_BPE = 2,     /* GGUF "gpt2": byte-level BPE with merges */
    BT_VOCAB_LLAMA2C = 3, /* llama2.c tokenizer.bin: SPM-like, pieces use ' ' for space */
};

/* Token types (GGUF tokenizer.ggml.token_type). */
enum bt_token_type {
    BT_TOK_UNDEFINED = 0, BT_TOK_NORMAL = 1, BT_TOK_UNKNOWN = 2, BT_TOK_CONTROL = 3,
    BT_TOK_USER_DEFINED = 4, BT_TOK_UNUSED = 5, BT_TOK_BYTE = 6,
};

typedef struct bt_vocab {
    int kind;                 /* bt_vocab_kind */
    char pre[64];             /* tokenizer.ggml.pre ("" when absent: treated as "default") */
    int32_t n_tokens;
    const char **text;        /* [n_tokens] piece bytes (not NUL-terminated) */
    const uint32_t *len;      /* [n_tokens] piece lengths */
    const float *scores;      /* [n_tokens] or NULL (BPE) */
    const int32_t *type;      /* [n_tokens] bt_token_type or NULL (all NORMAL) */
    int64_t n_merges;
    const char **merges;      /* [n_merges] "left right" (not NUL-terminated) */
    const uint32_t *merge_len;
    int32_t bos, eos, unk, pad, eot;   /* -1 when absent */
    bool add_bos, add_eos, add_space_prefix;
    /* tokenizer.json (Hugging Face folders, src/model/hf.c) only; zero for
     * GGUF. n_pre_pats > 0 replaces the set named by `pre`; the array is
     * borrowed from the loader. */
    const struct bt_pretok_pat *pre_pats;
    int n_pre_pats;
    bool pre_ignore_merges;   /* BPE model's ignore_merges */
    bool nfc;                 /* normalizer NFC: each text run is composed first */
    bool bytelevel_prefix_space;  /* ByteLevel add_prefix_space: a run not starting with ' ' gets one */
    /* tokenizer.json BPE with byte_fallback (the SentencePiece-converted
     * kind: Llama 2, Mistral, Gemma, ...): symbols are UTF-8 characters, not
     * GPT-2 byte stand-ins; a character with no piece becomes its <0xNN>
     * pieces (or unk, consecutive unks fused when fuse_unk). Encoding is
     * Hugging Face's: normalizer steps in order, then the Metaspace
     * pre-tokenizer, then merges by rank per word. */
    bool bpe_byte_fallback;
    bool bpe_fuse_unk;
    const struct bt_norm_op *norm;    /* normalizer steps (byte_fallback only), borrowed */
    int n_norm;
    int metaspace;            /* bt_metaspace: the pre-tokenizer, 0 when absent */
    bool metaspace_split;     /* Metaspace split: a word starts at every U+2581 */
    /* decoder (byte_fallback only) */
    bool dec_spaces;          /* Replace U+2581 -> ' ' (or Metaspace) */
    bool dec_bytes;           /* ByteFallback: <0xNN> -> that byte */
    bool dec_meta_first;      /* Metaspace: the first token's U+2581s decode to nothing */
    int dec_strip;            /* Strip after Fuse: leading spaces removed from the text */
} bt_vocab;

/* Hugging Face normalizer steps (tokenizer.json, byte_fallback BPE). */
enum bt_norm_kind { BT_NORM_NFC = 1, BT_NORM_PREPEND, BT_NORM_REPLACE };
typedef struct bt_norm_op {
    int kind;                 /* bt_norm_kind */
    const char *a, *b;        /* PREPEND: a; REPLACE: every a (non-empty) -> b */
    size_t alen, blen;
} bt_norm_op;

/* Metaspace prepend_scheme: when a text run gets a leading U+2581 (never
 * when it already starts with one): always, only the run at offset 0 of the
 * input (first), or never. */
enum bt_metaspace { BT_METASPACE_ALWAYS = 1, BT_METASPACE_FIRST, BT_METASPACE_NEVER };

typedef struct bt_tokenizer bt_tokenizer;

/* Build lookup tables. Errors (BT_EUNSUPPORTED for an unknown pre-tokenizer
 * or kind, BT_EFORMAT for inconsistent vocab/merges) carry a message. */
int bt_tokenizer_new(const bt_vocab *v, bt_tokenizer **out);
void bt_tokenizer_free(bt_tokenizer *t);     /* NULL is a no-op */

/* Tokenize len bytes of text. add_special: BOS (and EOS) as the vocabulary
 * asks (add_bos/add_eos); parse_special: text of control/user-defined tokens
 * ("<|im_start|>") maps to those ids instead of being split. *ids is
 * malloc'd; caller frees. */
int bt_tokenize(const bt_tokenizer *t, const char *text, size_t len,
                bool add_special, bool parse_special, int32_t **ids, size_t *n_ids);

/* Bytes a token contributes to output text (U+2581 -> ' ', <0xXX> -> byte,
 * byte-level BPE unicode -> bytes). Control tokens give their text (e.g.
 * "<|im_end|>") so a leak is visible. Valid until bt_tokenizer_free. */
const char *bt_token_piece(const bt_tokenizer *t, int32_t id, size_t *len);
/* Decode a sequence into a malloc'd NUL-terminated string. Follows the
 * llama.cpp/llama2.c convention that SPM drops the leading space of the
 * first piece when the vocabulary adds a space prefix. */
int bt_detokenize(const bt_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len);

int32_t bt_tokenizer_n_vocab(const bt_tokenizer *t);
int32_t bt_tokenizer_bos(const bt_tokenizer *t);
int32_t bt_tokenizer_eos(const bt_tokenizer *t);
/* True for EOS, EOT and other end-of-generation ids (e.g. <|im_end|>). */
bool bt_tokenizer_is_eog(const bt_tokenizer *t, int32_t id);
bool bt_tokenizer_is_control(const bt_tokenizer *t, int32_t id);
/* Id of an exact piece text, or -1. */
int32_t bt_tokenizer_find(const bt_tokenizer *t, const char *text, size_t len);

#endif
