/* spm_model.h - SentencePiece tokenizer.model (ModelProto) files.
 *
 * Only what a BPE SentencePiece model needs for llama.cpp's SPM tokenizer
 * (the GGUF "llama" vocabulary): each piece's text, score and type, the
 * trainer's model type, byte_fallback and special ids, and the normalizer's
 * name, add_dummy_prefix and remove_extra_whitespaces. The parser reads a
 * buffer and never trusts a length: every field is bounds-checked, a
 * truncated or malformed message is BT_EFORMAT naming the byte offset. */
#ifndef BT_SPM_MODEL_H
#define BT_SPM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef struct bt_spm_model {
    int32_t n_pieces;
    const char **text;        /* [n_pieces] into the buffer (not NUL-terminated) */
    uint32_t *len;
    float *score;
    int32_t *type;            /* bt_token_type values (SentencePiece's enum is the same) */
    int32_t model_type;       /* TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char; 1 when absent */
    bool byte_fallback;
    int32_t unk_id, bos_id, eos_id, pad_id;   /* -1 when disabled */
    char normalizer[32];      /* NormalizerSpec.name ("" when absent) */
    bool add_dummy_prefix, remove_extra_whitespaces;
} bt_spm_model;

/* Parse size bytes; arrays are malloc'd and the texts point into data,
 * which must outlive *out. At most 1<<24 pieces. */
int bt_spm_model_parse(const uint8_t *data, size_t size, const char *label, bt_spm_model *out);
void bt_spm_model_free(bt_spm_model *m);      /* the arrays; NULL is a no-op */

#endif
