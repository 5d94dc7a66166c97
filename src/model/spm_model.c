/* spm_model.c - a bounds-checked reader of SentencePiece's ModelProto
 * (sentencepiece_model.proto): the protobuf wire format by hand, only the
 * fields spm_model.h lists; unknown fields are skipped by their wire type.
 *
 *   ModelProto     1 pieces (repeated SentencePiece), 2 trainer_spec,
 *                  3 normalizer_spec
 *   SentencePiece  1 piece (string), 2 score (float), 3 type (enum)
 *   TrainerSpec    3 model_type, 35 byte_fallback, 40 unk_id, 41 bos_id,
 *                  42 eos_id, 43 pad_id
 *   NormalizerSpec 1 name, 3 add_dummy_prefix, 4 remove_extra_whitespaces */
#include "model/spm_model.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct pb {
    const uint8_t *p, *end, *base;
    const char *label;
} pb;

static int pb_err(const pb *b, const char *what)
{
    return bt_error(BT_EFORMAT, "%s: not a SentencePiece model: %s at byte %zu", b->label, what,
                    (size_t)(b->p - b->base));
}

static int varint(pb *b, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return pb_err(b, "truncated varint");
        uint8_t c = *b->p++;
        x |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) { *v = x; return BT_OK; }
    }
    return pb_err(b, "varint longer than 10 bytes");
}

/* One field's key and, for length-delimited fields, its payload. */
static int field(pb *b, uint32_t *fno, int *wt, pb *sub, uint64_t *val)
{
    uint64_t key;
    int rc = varint(b, &key);
    if (rc) return rc;
    *fno = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    if (*fno == 0 || key >> 3 > UINT32_MAX) return pb_err(b, "field number 0");
    switch (*wt) {
    case 0: return varint(b, val);
    case 1:
        if (b->end - b->p < 8) return pb_err(b, "truncated fixed64");
        memcpy(val, b->p, 8); b->p += 8; return BT_OK;
    case 5: {
        if (b->end - b->p < 4) return pb_err(b, "truncated fixed32");
        uint32_t v; memcpy(&v, b->p, 4); b->p += 4; *val = v; return BT_OK;
    }
    case 2: {
        uint64_t n;
        if ((rc = varint(b, &n))) return rc;
        if (n > (uint64_t)(b->end - b->p)) return pb_err(b, "length past the end");
        *sub = (pb){ b->p, b->p + n, b->base, b->label };
        b->p += n;
        return BT_OK;
    }
    default: return pb_err(b, "unsupported wire type (groups)");
    }
}

static int32_t as_i32(uint64_t v) { return (int32_t)(uint32_t)v; }   /* int32 varints are sign-extended */

static int piece(pb *b, bt_spm_model *m, int32_t i)
{
    uint32_t fno; int wt; pb sub = { 0 }; uint64_t v = 0;
    bool have_text = false;
    m->type[i] = 1;              /* NORMAL */
    m->score[i] = 0;
    while (b->p < b->end) {
        int rc = field(b, &fno, &wt, &sub, &v);
        if (rc) return rc;
        if (fno == 1 && wt == 2) {
            if (sub.end - sub.p > UINT32_MAX / 2) return pb_err(b, "piece too long");
            m->text[i] = (const char *)sub.p;
            m->len[i] = (uint32_t)(sub.end - sub.p);
            have_text = true;
        } else if (fno == 2 && wt == 5) {
            uint32_t u = (uint32_t)v;
            float f; memcpy(&f, &u, 4);
            m->score[i] = f;
        } else if (fno == 3 && wt == 0) {
            if (v < 1 || v > 6) return pb_err(b, "piece type outside 1..6");
            m->type[i] = (int32_t)v;
        }
    }
    if (!have_text) return pb_err(b, "a piece without text");
    return BT_OK;
}

int bt_spm_model_parse(const uint8_t *data, size_t size, const char *label, bt_spm_model *m)
{
    memset(m, 0, sizeof *m);
    m->model_type = 1;
    m->unk_id = 0; m->bos_id = 1; m->eos_id = 2; m->pad_id = -1;   /* TrainerSpec defaults */
    m->add_dummy_prefix = true; m->remove_extra_whitespaces = true;  /* NormalizerSpec defaults */
    pb b = { data, data + size, data, label };
    uint32_t fno; int wt; pb sub = { 0 }; uint64_t v = 0;
    int rc;
    /* pass 1: count the pieces */
    size_t n = 0;
    while (b.p < b.end) {
        if ((rc = field(&b, &fno, &wt, &sub, &v))) return rc;
        if (fno == 1 && wt == 2) n++;
    }
    if (n == 0) return bt_error(BT_EFORMAT, "%s: not a SentencePiece model: no pieces", label);
    if (n > (1u << 24)) return bt_error(BT_EFORMAT, "%s: %zu pieces (at most %u)", label, n, 1u << 24);
    m->text = calloc(n, sizeof *m->text);
    m->len = calloc(n, sizeof *m->len);
    m->score = calloc(n, sizeof *m->score);
    m->type = calloc(n, sizeof *m->type);
    if (!m->text || !m->len || !m->score || !m->type) { bt_spm_model_free(m); return bt_error(BT_ENOMEM, "out of memory"); }
    b.p = data;
    while (b.p < b.end) {
        if ((rc = field(&b, &fno, &wt, &sub, &v))) goto fail;
        if (fno == 1 && wt == 2) {
            if ((rc = piece(&sub, m, m->n_pieces))) goto fail;
            m->n_pieces++;
        } else if (fno == 2 && wt == 2) {
            pb t = sub;
            while (t.p < t.end) {
                pb s2; uint64_t x = 0;
                if ((rc = field(&t, &fno, &wt, &s2, &x))) goto fail;
                if (wt != 0) continue;
                if (fno == 3) m->model_type = as_i32(x);
                else if (fno == 35) m->byte_fallback = x != 0;
                else if (fno == 40) m->unk_id = as_i32(x);
                else if (fno == 41) m->bos_id = as_i32(x);
                else if (fno == 42) m->eos_id = as_i32(x);
                else if (fno == 43) m->pad_id = as_i32(x);
            }
        } else if (fno == 3 && wt == 2) {
            pb t = sub;
            while (t.p < t.end) {
                pb s2 = { 0 }; uint64_t x = 0;
                if ((rc = field(&t, &fno, &wt, &s2, &x))) goto fail;
                if (fno == 1 && wt == 2) {
                    size_t l = (size_t)(s2.end - s2.p);
                    if (l >= sizeof m->normalizer) l = sizeof m->normalizer - 1;
                    memcpy(m->normalizer, s2.p, l);
                    m->normalizer[l] = 0;
                } else if (fno == 3 && wt == 0) m->add_dummy_prefix = x != 0;
                else if (fno == 4 && wt == 0) m->remove_extra_whitespaces = x != 0;
            }
        }
    }
    int32_t *ids[] = { &m->unk_id, &m->bos_id, &m->eos_id, &m->pad_id };
    for (size_t i = 0; i < 4; i++)
        if (*ids[i] < -1 || *ids[i] >= m->n_pieces) *ids[i] = -1;
    return BT_OK;
fail:
    bt_spm_model_free(m);
    return rc;
}

void bt_spm_model_free(bt_spm_model *m)
{
    if (!m) return;
    free(m->text); free(m->len); free(m->score); free(m->type);
    m->text = NULL; m->len = NULL; m->score = NULL; m->type = NULL;
}
