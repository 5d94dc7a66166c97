/* tokenizer.c - SPM, byte-level BPE and llama2.c tokenizers over a bt_vocab.
 *
 * The encoders reproduce their references id for id:
 *  - SPM: llama.cpp's llm_tokenizer_spm (space -> U+2581, optional leading
 *    space, greedy bigram merging by piece score over UTF-8 characters,
 *    <0xXX> byte fallback);
 *  - BPE: llama.cpp's llm_tokenizer_bpe (regex pre-tokenization, GPT-2
 *    byte<->unicode mapping, merges applied lowest rank first);
 *  - BPE with byte_fallback (tokenizer.json from a SentencePiece model):
 *    tokenizers' BPE model (normalizer steps, Metaspace, characters as
 *    symbols, <0xNN> for a character with no piece, merges by rank);
 *  - llama2.c: run.c's encode() (dummy prefix " ", per-code-point lookup
 *    with byte fallback id = byte + 3, merge the best-scoring pair).
 * Every "best pair" loop is a heap over a linked list of symbols; ties go
 * to the leftmost pair, as in the references.
 *
 * Invariants: the tokenizer borrows the vocabulary's arrays (they live in
 * the model mapping) and owns only its lookup tables and decoded pieces.
 * bt_tokenize keeps all scratch state per call, so one tokenizer may be used
 * from several threads. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE         /* memmem */
#endif
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"
#include "config.h"
#ifdef HAVE_UTF8PROC
#include <utf8proc.h>
#endif
#include "base/util.h"

/* True when this build can normalize to NFC (utf8proc). */
static bool bt_tokenizer_has_nfc(void)
{
#ifdef HAVE_UTF8PROC
    return true;
#else
    return false;
#endif
}

/* ---- byte-string hash map (open addressing, power-of-two size) ---- */

typedef struct smap_ent {
    const char *key;
    uint32_t len;
    uint32_t hash;
    int32_t val;
    bool used;
} smap_ent;

typedef struct smap {
    smap_ent *e;
    size_t mask;
} smap;

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;                     /* FNV-1a */
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
    return h;
}

static int smap_init(smap *m, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    m->e = calloc(cap, sizeof(*m->e));
    if (!m->e) return bt_error(BT_ENOMEM, "out of memory for tokenizer tables");
    m->mask = cap - 1;
    return BT_OK;
}

/* overwrite: later keys win (llama.cpp's token_to_id); else the first wins
 * (its bpe_ranks.emplace). */
static void smap_put(smap *m, const char *key, size_t len, int32_t val, bool overwrite)
{
    uint32_t h = hash_bytes(key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        smap_ent *e = &m->e[i];
        if (!e->used) {
            *e = (smap_ent){ .key = key, .len = (uint32_t)len, .hash = h, .val = val, .used = true };
            return;
        }
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) {
            if (overwrite) e->val = val;
            return;
        }
    }
}

static int32_t smap_get(const smap *m, const char *key, size_t len)
{
    if (!m->e) return -1;
    uint32_t h = hash_bytes(key, len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const smap_ent *e = &m->e[i];
        if (!e->used) return -1;
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) return e->val;
    }
}

/* ---- tokenizer ---- */

enum {
    A_CONTROL = 1, A_USER = 2, A_UNKNOWN = 4, A_BYTE = 8, A_EOG = 16,
};

struct bt_tokenizer {
    bt_vocab v;                 /* copy; arrays borrowed */
    smap tok;                   /* piece text -> id */
    smap merges;                /* "left right" -> rank (BPE) */
    bt_pretok *pre;             /* BPE only */
    bool ignore_merges;
    int32_t byte_id[256];       /* SPM byte fallback, -1 when the vocab has none */
    int32_t *special;           /* control / user-defined / unknown ids, longest text first */
    size_t n_special;
    uint8_t *attr;              /* [n_tokens] A_* bits */
    char *pieces;               /* decoded bytes of every token, back to back */
    size_t *piece_off;          /* [n_tokens] */
    uint32_t *piece_len;        /* [n_tokens] */
    uint32_t byte_enc[256][2];  /* BPE: byte -> UTF-8 of its stand-in code point (len, bytes) */
    int16_t *byte_dec;          /* BPE: code point (< 324) -> byte, -1 if not a stand-in */
};

#define BYTE_DEC_N 324

static const char SPM_SPACE[] = "\xE2\x96\x81";    /* U+2581 */

static int32_t type_of(const bt_vocab *v, int32_t id)
{
    return v->type ? v->type[id] : BT_TOK_NORMAL;
}

/* "<0xXX>" -> byte value, or -1. */
static int parse_byte_piece(const char *s, size_t n)
{
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68
 * bytes map to U+0100.. in byte order, so every byte is a visible char. */
static void build_byte_table(bt_tokenizer *t)
{
    int next = 256;
    for (int b = 0; b < BYTE_DEC_N; b++) t->byte_dec[b] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        int cp = self ? b : next++;
        t->byte_dec[cp] = (int16_t)b;
        if (cp < 0x80) { t->byte_enc[b][0] = 1; t->byte_enc[b][1] = (uint32_t)cp; }
        else {
            t->byte_enc[b][0] = 2;
            t->byte_enc[b][1] = (uint32_t)(0xC0 | (cp >> 6)) | (uint32_t)(0x80 | (cp & 0x3F)) << 8;
        }
    }
}

static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "<|end_of_text|>", "</s>", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
};

typedef struct special_key { uint32_t len; int32_t id; } special_key;

static int cmp_special(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Longest special text first, so "<|im_end|>" is cut before "<|im". */
static int sort_specials(bt_tokenizer *t)
{
    special_key *k = malloc((t->n_special ? t->n_special : 1) * sizeof(*k));
    if (!k) return bt_error(BT_ENOMEM, "out of memory for tokenizer");
    for (size_t i = 0; i < t->n_special; i++) k[i] = (special_key){ t->v.len[t->special[i]], t->special[i] };
    qsort(k, t->n_special, sizeof(*k), cmp_special);
    for (size_t i = 0; i < t->n_special; i++) t->special[i] = k[i].id;
    free(k);
    return BT_OK;
}

/* Decoded bytes of one token (see bt_token_piece). */
static size_t decode_piece(const bt_tokenizer *t, int32_t id, char *o)
{
    const bt_vocab *v = &t->v;
    const char *s = v->text[id];
    size_t n = v->len[id], k = 0;
    uint8_t a = t->attr[id];
    if (a & (A_CONTROL | A_USER | A_UNKNOWN)) { memcpy(o, s, n); return n; }
    if (a & A_BYTE) { o[0] = (char)parse_byte_piece(s, n); return 1; }
    if (v->kind == BT_VOCAB_SPM || (v->kind == BT_VOCAB_BPE && v->bpe_byte_fallback && v->dec_spaces)) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(s + i, SPM_SPACE, 3)) { o[k++] = ' '; i += 3; }
            else o[k++] = s[i++];
        }
        return k;
    }
    if (v->kind == BT_VOCAB_BPE && !v->bpe_byte_fallback) {
        for (size_t i = 0; i < n;) {
            unsigned char c = (unsigned char)s[i];
            uint32_t cp = c;
            size_t cl = 1;
            if (c >= 0xC0 && c < 0xE0 && i + 1 < n) { cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3F); cl = 2; }
            if (cl == 2 && cp < BYTE_DEC_N && t->byte_dec[cp] >= 0) { o[k++] = (char)t->byte_dec[cp]; i += 2; continue; }
            if (cl == 1 && c < 0x80 && t->byte_dec[c] >= 0) { o[k++] = (char)c; i++; continue; }
            /* not a byte stand-in: keep the text as it is, visible */
            cl = bt_utf8_len(c);
            if (i + cl > n) cl = n - i;
            memcpy(o + k, s + i, cl);
            k += cl; i += cl;
        }
        return k;
    }
    memcpy(o, s, n);                     /* llama2.c pieces are plain bytes */
    return n;
}

void bt_tokenizer_free(bt_tokenizer *t)
{
    if (!t) return;
    free(t->tok.e);
    free(t->merges.e);
    bt_pretok_free(t->pre);
    free(t->special);
    free(t->attr);
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    free(t->byte_dec);
    free(t);
}

int bt_tokenizer_new(const bt_vocab *v, bt_tokenizer **out)
{
    *out = NULL;
    if (v->kind != BT_VOCAB_SPM && v->kind != BT_VOCAB_BPE && v->kind != BT_VOCAB_LLAMA2C)
        return bt_error(BT_EUNSUPPORTED, "unsupported tokenizer kind %d", v->kind);
    if (v->n_tokens <= 0 || !v->text || !v->len)
        return bt_error(BT_EFORMAT, "vocabulary has no tokens");
    if (v->kind != BT_VOCAB_BPE && !v->scores)
        return bt_error(BT_EFORMAT, "SentencePiece vocabulary has no scores (tokenizer.ggml.scores)");
    if (v->kind == BT_VOCAB_BPE && (v->n_merges <= 0 || !v->merges || !v->merge_len))
        return bt_error(BT_EFORMAT, "BPE vocabulary has no merges (tokenizer.ggml.merges)");
    const int32_t *sp[] = { &v->bos, &v->eos, &v->unk, &v->pad, &v->eot };
    static const char *const spn[] = { "bos", "eos", "unk", "pad", "eot" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(sp); i++)
        if (*sp[i] < -1 || *sp[i] >= v->n_tokens)
            return bt_error(BT_ERANGE, "%s token id %d is outside the vocabulary (%d tokens)",
                            spn[i], *sp[i], v->n_tokens);

    bt_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return bt_error(BT_ENOMEM, "out of memory for tokenizer");
    t->v = *v;
    t->v.pre[sizeof(t->v.pre) - 1] = 0;
    int rc;
    size_t n = (size_t)v->n_tokens;

    if (v->kind == BT_VOCAB_BPE && v->bpe_byte_fallback) {
        t->ignore_merges = v->pre_ignore_merges;
        /* Split / Digits steps after Metaspace (none: the run is one word) */
        if (v->n_pre_pats > 0 && (rc = bt_pretok_new_custom(v->pre_pats, v->n_pre_pats, false, &t->pre))) goto fail;
        for (int i = 0; i < v->n_norm; i++) {
            const bt_norm_op *op = &v->norm[i];
            if (op->kind == BT_NORM_NFC && !bt_tokenizer_has_nfc()) {
                rc = bt_error(BT_EUNSUPPORTED, "the tokenizer asks for NFC normalization, but this bangtrace was "
                              "built without utf8proc (install libutf8proc-dev and re-run configure)");
                goto fail;
            }
            if (op->kind == BT_NORM_REPLACE && op->alen == 0) {
                rc = bt_error(BT_EFORMAT, "normalizer Replace has an empty pattern");
                goto fail;
            }
        }
    }
    if (v->kind == BT_VOCAB_BPE && !v->bpe_byte_fallback) {
        if (v->n_pre_pats > 0 || v->pre_pats) {
            if ((rc = bt_pretok_new_custom(v->pre_pats, v->n_pre_pats, v->pre_ignore_merges, &t->pre))) goto fail;
        } else if ((rc = bt_pretok_new(v->pre, &t->pre))) goto fail;
        t->ignore_merges = bt_pretok_ignore_merges(t->pre);
        if (v->nfc && !bt_tokenizer_has_nfc()) {
            rc = bt_error(BT_EUNSUPPORTED, "the tokenizer asks for NFC normalization, but this bangtrace was "
                          "built without utf8proc (install libutf8proc-dev and re-run configure)");
            goto fail;
        }
        t->byte_dec = malloc(BYTE_DEC_N * sizeof(*t->byte_dec));
        if (!t->byte_dec) { rc = bt_error(BT_ENOMEM, "out of memory for tokenizer"); goto fail; }
        build_byte_table(t);
    }
    if (v->kind == BT_VOCAB_BPE) {
        if ((rc = smap_init(&t->merges, (size_t)v->n_merges))) goto fail;
        for (int64_t i = 0; i < v->n_merges; i++) {
            const char *m = v->merges[i];
            size_t ml = v->merge_len[i];
            /* llama.cpp splits at the first space after the first byte */
            const char *sep = ml > 1 ? memchr(m + 1, ' ', ml - 1) : NULL;
            if (!sep) {
                rc = bt_error(BT_EFORMAT, "tokenizer.ggml.merges[%lld] has no space: '%.*s'",
                              (long long)i, (int)BT_MIN(ml, 64), m);
                goto fail;
            }
            smap_put(&t->merges, m, ml, (int32_t)BT_MIN(i, (int64_t)INT32_MAX), false);
        }
    }

    if ((rc = smap_init(&t->tok, n))) goto fail;
    t->attr = calloc(n, 1);
    t->piece_off = malloc(n * sizeof(*t->piece_off));
    t->piece_len = malloc(n * sizeof(*t->piece_len));
    t->special = malloc(n * sizeof(*t->special));
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += v->len[i];
    t->pieces = malloc(total + 1);
    if (!t->attr || !t->piece_off || !t->piece_len || !t->special || !t->pieces) {
        rc = bt_error(BT_ENOMEM, "out of memory for tokenizer");
        goto fail;
    }

    for (size_t i = 0; i < n; i++) {
        if (!v->text[i] && v->len[i]) {
            rc = bt_error(BT_EFORMAT, "token %zu has no text", i);
            goto fail;
        }
        smap_put(&t->tok, v->text[i] ? v->text[i] : "", v->len[i], (int32_t)i, true);
        int32_t ty = type_of(v, (int32_t)i);
        uint8_t a = 0;
        if (ty == BT_TOK_CONTROL) a |= A_CONTROL;
        else if (ty == BT_TOK_USER_DEFINED) a |= A_USER;
        else if (ty == BT_TOK_UNKNOWN) a |= A_UNKNOWN;
        else if ((v->kind != BT_VOCAB_BPE || (v->bpe_byte_fallback && v->dec_bytes)) &&
                 parse_byte_piece(v->text[i], v->len[i]) >= 0 && (ty == BT_TOK_BYTE || !v->type))
            a |= A_BYTE;
        if (a & A_CONTROL)
            for (size_t k = 0; k < BT_ARRAY_SIZE(EOG_TEXTS); k++)
                if (strlen(EOG_TEXTS[k]) == v->len[i] && !memcmp(EOG_TEXTS[k], v->text[i], v->len[i]))
                    a |= A_EOG;
        if ((a & (A_CONTROL | A_USER | A_UNKNOWN)) && v->len[i] > 0) t->special[t->n_special++] = (int32_t)i;
        t->attr[i] = a;
    }
    if (v->eos >= 0) t->attr[v->eos] |= A_EOG;
    if (v->eot >= 0) t->attr[v->eot] |= A_EOG;
    /* llama2.c's generate loop stops at BOS: it delimits stories. */
    if (v->kind == BT_VOCAB_LLAMA2C && v->bos >= 0) t->attr[v->bos] |= A_EOG;
    if ((rc = sort_specials(t))) goto fail;

    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)decode_piece(t, (int32_t)i, t->pieces + off);
        off += t->piece_len[i];
    }

    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        int32_t id = smap_get(&t->tok, buf, 6);
        if (id < 0 && !v->bpe_byte_fallback) { buf[0] = (char)b; id = smap_get(&t->tok, buf, 1); }
        t->byte_id[b] = id;
    }
    *out = t;
    return BT_OK;
fail:
    bt_tokenizer_free(t);
    return rc;
}

/* ---- shared scratch: output ids, symbols, bigram heap ---- */

typedef struct idvec { int32_t *v; size_t n, cap; } idvec;

static int idvec_push(idvec *a, int32_t id) { return BT_VEC_PUSH(a->v, a->n, a->cap, id); }

typedef struct sym {
    const char *text;   /* SPM/BPE: span of the word; llama2.c: unused */
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
    int32_t id;         /* llama2.c: current token id */
    int prev, next;
} sym;

typedef struct bigram {
    double prio;        /* higher merges first */
    int left, right;
    uint32_t size;      /* SPM/BPE: bytes of the pair when queued */
    int32_t lid, rid;   /* llama2.c: ids of the pair when queued */
    int32_t id;         /* llama2.c: merged id */
} bigram;

typedef struct heap { bigram *v; size_t n, cap; } heap;

static bool better(const bigram *a, const bigram *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static int heap_push(heap *h, bigram b)
{
    if (BT_VEC_RESERVE(h->v, h->cap, h->n + 1)) return BT_ENOMEM;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return BT_OK;
}

static bigram heap_pop(heap *h)
{
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && better(&h->v[c + 1], &h->v[c])) c++;
        if (!better(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct scratch {
    sym *s; size_t cap;
    heap h;
    char *buf; size_t bufcap;
} scratch;

static int sym_reserve(scratch *sc, size_t n) { return BT_VEC_RESERVE(sc->s, sc->cap, n); }
static int buf_reserve(scratch *sc, size_t n) { return BT_VEC_RESERVE(sc->buf, sc->bufcap, n); }

/* Split a span into one symbol per UTF-8 character (lead byte decides). */
static int make_symbols(scratch *sc, const char *s, size_t n, size_t *count)
{
    int rc;
    if ((rc = sym_reserve(sc, n))) return rc;
    size_t k = 0;
    for (size_t off = 0; off < n; k++) {
        size_t cl = BT_MIN(bt_utf8_len((unsigned char)s[off]), n - off);
        sc->s[k] = (sym){ .text = s + off, .n = (uint32_t)cl, .prev = (int)k - 1, .next = -1 };
        if (k > 0) sc->s[k - 1].next = (int)k;
        off += cl;
    }
    *count = k;
    return BT_OK;
}

/* ---- SPM ---- */

/* Apply the bigram the heap gave: its right symbol joins its left one and
 * leaves the list. NULL when either side changed since it was queued. */
static sym *merge_pair(scratch *sc, bigram b)
{
    sym *l = &sc->s[b.left], *r = &sc->s[b.right];
    if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) return NULL;
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) sc->s[r->next].prev = b.left;
    return l;
}

static int spm_add_bigram(const bt_tokenizer *t, scratch *sc, int l, int r)
{
    if (l < 0 || r < 0) return BT_OK;
    uint32_t size = sc->s[l].n + sc->s[r].n;     /* symbols are contiguous in the text */
    int32_t id = smap_get(&t->tok, sc->s[l].text, size);
    if (id < 0) return BT_OK;
    return heap_push(&sc->h, (bigram){ .prio = t->v.scores[id], .left = l, .right = r, .size = size });
}

static int spm_encode(const bt_tokenizer *t, scratch *sc, const char *text, size_t len,
                      bool prefix, idvec *out)
{
    int rc;
    /* escape: optional leading space, then ' ' -> U+2581 */
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t elen = (prefix ? 3 : 0) + len + 2 * spaces;
    if ((rc = buf_reserve(sc, elen + 1))) return rc;
    char *e = sc->buf;
    size_t k = 0;
    if (prefix) { memcpy(e, SPM_SPACE, 3); k = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(e + k, SPM_SPACE, 3); k += 3; }
        else e[k++] = text[i];
    }
    size_t ns;
    if ((rc = make_symbols(sc, e, elen, &ns))) return rc;
    sc->h.n = 0;
    for (size_t i = 1; i < ns; i++)
        if ((rc = spm_add_bigram(t, sc, (int)i - 1, (int)i))) return rc;
    while (sc->h.n) {
        bigram b = heap_pop(&sc->h);
        sym *l = merge_pair(sc, b);
        if (!l) continue;   /* stale */
        if ((rc = spm_add_bigram(t, sc, l->prev, b.left))) return rc;
        if ((rc = spm_add_bigram(t, sc, b.left, l->next))) return rc;
    }
    for (int i = ns ? 0 : -1; i != -1; i = sc->s[i].next) {
        sym *s = &sc->s[i];
        int32_t id = smap_get(&t->tok, s->text, s->n);
        if (id >= 0) { if ((rc = idvec_push(out, id))) return rc; continue; }
        for (uint32_t j = 0; j < s->n; j++) {
            unsigned char byte = (unsigned char)s->text[j];
            int32_t bid = t->byte_id[byte] >= 0 ? t->byte_id[byte] : t->v.unk;
            if (bid < 0)
                return bt_error(BT_EINVAL, "cannot encode byte 0x%02X: the vocabulary has no byte "
                                "tokens and no unknown token", byte);
            if ((rc = idvec_push(out, bid))) return rc;
        }
    }
    return BT_OK;
}

/* ---- BPE ---- */

static int bpe_add_bigram(const bt_tokenizer *t, scratch *sc, char **key, size_t *keycap, int l, int r)
{
    if (l < 0 || r < 0) return BT_OK;
    const sym *a = &sc->s[l], *b = &sc->s[r];
    size_t kl = (size_t)a->n + 1 + b->n;
    if (kl > *keycap) {
        char *nk = realloc(*key, kl * 2);
        if (!nk) return bt_error(BT_ENOMEM, "out of memory in tokenizer");
        *key = nk; *keycap = kl * 2;
    }
    memcpy(*key, a->text, a->n);
    (*key)[a->n] = ' ';
    memcpy(*key + a->n + 1, b->text, b->n);
    int32_t rank = smap_get(&t->merges, *key, kl);
    if (rank < 0) return BT_OK;
    return heap_push(&sc->h, (bigram){ .prio = -(double)rank, .left = l, .right = r,
                                       .size = a->n + b->n });
}

/* Merges by rank over the linked symbols sc->s[0..ns): the lowest-ranked
 * adjacent pair first, until no pair is a merge. fixed_ids: a symbol that
 * already has its id (a byte-fallback <0xNN> piece, unk) never merges. */
static int bpe_merge(const bt_tokenizer *t, scratch *sc, size_t ns, bool fixed_ids)
{
#define MERGEABLE(i) ((i) >= 0 && (!fixed_ids || sc->s[i].id < 0))
    char *key = NULL;
    size_t keycap = 0;
    int rc = BT_OK;
    sc->h.n = 0;
    for (size_t i = 1; i < ns && !rc; i++)
        if (MERGEABLE((int)i - 1) && MERGEABLE((int)i)) rc = bpe_add_bigram(t, sc, &key, &keycap, (int)i - 1, (int)i);
    while (sc->h.n && !rc) {
        bigram b = heap_pop(&sc->h);
        sym *l = merge_pair(sc, b);
        if (!l) continue;   /* stale */
        if (MERGEABLE(l->prev)) rc = bpe_add_bigram(t, sc, &key, &keycap, l->prev, b.left);
        if (!rc && MERGEABLE(l->next)) rc = bpe_add_bigram(t, sc, &key, &keycap, b.left, l->next);
    }
#undef MERGEABLE
    free(key);
    return rc;
}

static int bpe_word(const bt_tokenizer *t, scratch *sc, const char *w, size_t wl, idvec *out)
{
    int rc;
    /* GPT-2 byte-level stand-ins: one symbol per original byte */
    if ((rc = buf_reserve(sc, wl * 2 + 1))) return rc;
    char *e = sc->buf;
    size_t el = 0;
    for (size_t i = 0; i < wl; i++) {
        const uint32_t *be = t->byte_enc[(unsigned char)w[i]];
        e[el++] = (char)(be[1] & 0xFF);
        if (be[0] == 2) e[el++] = (char)(be[1] >> 8);
    }
    if (t->ignore_merges) {
        int32_t id = smap_get(&t->tok, e, el);
        if (id >= 0) return idvec_push(out, id);
    }
    size_t ns;
    if ((rc = make_symbols(sc, e, el, &ns))) return rc;
    if ((rc = bpe_merge(t, sc, ns, false))) return rc;
    for (int i = ns ? 0 : -1; i != -1; i = sc->s[i].next) {
        sym *s = &sc->s[i];
        int32_t id = smap_get(&t->tok, s->text, s->n);
        if (id >= 0) { if ((rc = idvec_push(out, id))) return rc; continue; }
        /* as llama.cpp: fall back to single-byte pieces, dropping what has none */
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t bid = smap_get(&t->tok, s->text + j, 1);
            if (bid >= 0 && (rc = idvec_push(out, bid))) return rc;
        }
    }
    return BT_OK;
}

/* Unicode NFC of valid UTF-8 (malloc'd); the tokenizer.json normalizer. */
static int nfc(const char *s, size_t n, char **out, size_t *out_len)
{
#ifdef HAVE_UTF8PROC
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) return bt_error(BT_EINTERNAL, "NFC normalization failed: %s", utf8proc_errmsg(r));
    *out = (char *)d;
    *out_len = (size_t)r;
    return BT_OK;
#else
    (void)s; (void)n; (void)out; (void)out_len;
    return bt_error(BT_EUNSUPPORTED, "NFC normalization needs utf8proc");
#endif
}


static int bpe_encode(const bt_tokenizer *t, scratch *sc, const char *text, size_t len, idvec *out)
{
    char *clean = NULL;
    size_t clen, *words = NULL, nw = 0;
    int rc = bt_utf8_sanitize(text, len, &clean, &clen);
    if (!rc && t->v.nfc) {
        char *c2 = NULL;
        size_t l2 = 0;
        if (!(rc = nfc(clean, clen, &c2, &l2))) { free(clean); clean = c2; clen = l2; }
    }
    if (!rc && t->v.bytelevel_prefix_space && clen > 0 && clean[0] != ' ') {
        char *c2 = malloc(clen + 2);
        if (!c2) rc = bt_error(BT_ENOMEM, "out of memory tokenizing");
        else { c2[0] = ' '; memcpy(c2 + 1, clean, clen + 1); free(clean); clean = c2; clen++; }
    }
    if (!rc) rc = bt_pretok_words(t->pre, clean, clen, &words, &nw);
    for (size_t i = 0; i < nw && !rc; i++)
        rc = bpe_word(t, sc, clean + words[2 * i], words[2 * i + 1], out);
    free(words);
    free(clean);
    return rc;
}

/* ---- BPE with byte fallback (tokenizers' BPE model over characters) ---- */

/* One word: symbols are characters; a character with no piece becomes its
 * <0xNN> pieces when all 256 exist for its bytes, else unk (fused with an
 * unk before it when fuse_unk), else it is dropped, as tokenizers'
 * merge_word. Those symbols are frozen (id >= 0) and never merge. The
 * symbols' text is copied back to back into sc->buf so that two mergeable
 * neighbours are always contiguous. */
static int bfb_word(const bt_tokenizer *t, scratch *sc, const char *w, size_t wl, idvec *out)
{
    int rc;
    if (wl == 0) return BT_OK;
    if (t->ignore_merges) {
        int32_t id = smap_get(&t->tok, w, wl);
        if (id >= 0) return idvec_push(out, id);
    }
    if ((rc = sym_reserve(sc, wl + 1)) || (rc = buf_reserve(sc, wl + 1))) return rc;
    char *e = sc->buf;
    size_t ns = 0, el = 0;
    bool prev_unk = false;
    for (size_t off = 0; off < wl;) {
        size_t cl = BT_MIN(bt_utf8_len((unsigned char)w[off]), wl - off);
        int32_t id = smap_get(&t->tok, w + off, cl);
        bool bytes = id < 0;
        for (size_t j = 0; bytes && j < cl; j++) bytes = t->byte_id[(unsigned char)w[off + j]] >= 0;
        if (id >= 0) {
            sc->s[ns++] = (sym){ .text = e + el, .n = (uint32_t)cl, .id = -1 };
            prev_unk = false;
        } else if (bytes) {
            for (size_t j = 0; j < cl; j++)
                sc->s[ns++] = (sym){ .text = e + el + j, .n = 1, .id = t->byte_id[(unsigned char)w[off + j]] };
            prev_unk = false;
        } else if (t->v.unk >= 0) {
            if (!(prev_unk && t->v.bpe_fuse_unk)) sc->s[ns++] = (sym){ .text = e + el, .n = (uint32_t)cl, .id = t->v.unk };
            prev_unk = true;
        } else {
            off += cl;              /* no piece, no byte pieces, no unk: dropped */
            continue;
        }
        memcpy(e + el, w + off, cl);
        el += cl;
        off += cl;
    }
    for (size_t i = 0; i < ns; i++) {
        sc->s[i].prev = (int)i - 1;
        sc->s[i].next = i + 1 < ns ? (int)i + 1 : -1;
    }
    if ((rc = bpe_merge(t, sc, ns, true))) return rc;
    for (int i = ns ? 0 : -1; i != -1; i = sc->s[i].next) {
        sym *s = &sc->s[i];
        int32_t id = s->id >= 0 ? s->id : smap_get(&t->tok, s->text, s->n);
        if (id < 0) id = t->v.unk;   /* a merge whose result is no piece: tokenizers refuses such a file */
        if (id >= 0 && (rc = idvec_push(out, id))) return rc;
    }
    return BT_OK;
}

/* Replace every occurrence of a (non-empty) by b; *s is malloc'd and replaced. */
static int replace_all(char **s, size_t *n, const char *a, size_t alen, const char *b, size_t blen)
{
    size_t hits = 0;
    for (const char *p = *s, *end = *s + *n; (p = memmem(p, (size_t)(end - p), a, alen)); p += alen) hits++;
    if (!hits) return BT_OK;
    size_t nl = *n - hits * alen + hits * blen;
    char *o = malloc(nl + 1);
    if (!o) return bt_error(BT_ENOMEM, "out of memory normalizing");
    size_t k = 0;
    const char *p = *s, *end = *s + *n;
    for (const char *h; (h = memmem(p, (size_t)(end - p), a, alen)); p = h + alen) {
        memcpy(o + k, p, (size_t)(h - p)); k += (size_t)(h - p);
        memcpy(o + k, b, blen); k += blen;
    }
    memcpy(o + k, p, (size_t)(end - p)); k += (size_t)(end - p);
    o[k] = 0;
    free(*s);
    *s = o; *n = k;
    return BT_OK;
}

static int prepend(char **s, size_t *n, const char *a, size_t alen)
{
    char *o = malloc(*n + alen + 1);
    if (!o) return bt_error(BT_ENOMEM, "out of memory normalizing");
    memcpy(o, a, alen);
    memcpy(o + alen, *s, *n + 1);
    free(*s);
    *s = o; *n += alen;
    return BT_OK;
}

/* One Metaspace word through the Split / Digits steps, if any. */
static int bfb_split(const bt_tokenizer *t, scratch *sc, const char *w, size_t wl, idvec *out)
{
    if (!t->pre) return bfb_word(t, sc, w, wl, out);
    size_t *words = NULL, nw = 0;
    int rc = bt_pretok_words(t->pre, w, wl, &words, &nw);
    for (size_t i = 0; i < nw && !rc; i++) rc = bfb_word(t, sc, w + words[2 * i], words[2 * i + 1], out);
    free(words);
    return rc;
}

/* at_start: this text run begins at offset 0 of the input (Metaspace "first"). */
static int bfb_encode(const bt_tokenizer *t, scratch *sc, const char *text, size_t len, bool at_start, idvec *out)
{
    const bt_vocab *v = &t->v;
    char *s = NULL;
    size_t n = 0;
    int rc = bt_utf8_sanitize(text, len, &s, &n);
    for (int i = 0; i < v->n_norm && !rc; i++) {
        const bt_norm_op *op = &v->norm[i];
        if (op->kind == BT_NORM_NFC) {
            char *c2 = NULL;
            size_t l2 = 0;
            if (!(rc = nfc(s, n, &c2, &l2))) { free(s); s = c2; n = l2; }
        } else if (op->kind == BT_NORM_PREPEND) {
            if (n > 0) rc = prepend(&s, &n, op->a, op->alen);   /* an empty text stays empty */
        } else rc = replace_all(&s, &n, op->a, op->alen, op->b, op->blen);
    }
    if (!rc && v->metaspace) {
        rc = replace_all(&s, &n, " ", 1, SPM_SPACE, 3);
        bool want = v->metaspace == BT_METASPACE_ALWAYS || (v->metaspace == BT_METASPACE_FIRST && at_start);
        if (!rc && want && n > 0 && !(n >= 3 && !memcmp(s, SPM_SPACE, 3))) rc = prepend(&s, &n, SPM_SPACE, 3);
    }
    if (!rc && v->metaspace && v->metaspace_split) {
        /* a word starts at every U+2581 (MergedWithNext) */
        size_t w0 = 0;
        for (size_t i = 1; i + 3 <= n && !rc; i++)
            if (!memcmp(s + i, SPM_SPACE, 3)) { rc = bfb_split(t, sc, s + w0, i - w0, out); w0 = i; i += 2; }
        if (!rc) rc = bfb_split(t, sc, s + w0, n - w0, out);
    } else if (!rc) rc = bfb_split(t, sc, s, n, out);
    free(s);
    return rc;
}

/* ---- llama2.c ---- */

static int l2c_add_bigram(const bt_tokenizer *t, scratch *sc, int l, int r)
{
    if (l < 0 || r < 0) return BT_OK;
    int32_t a = sc->s[l].id, b = sc->s[r].id;
    size_t la = t->v.len[a], lb = t->v.len[b];
    int rc;
    if ((rc = buf_reserve(sc, la + lb + 1))) return rc;
    memcpy(sc->buf, t->v.text[a], la);
    memcpy(sc->buf + la, t->v.text[b], lb);
    int32_t id = smap_get(&t->tok, sc->buf, la + lb);
    /* run.c only takes a pair whose score beats its -1e10 starting point */
    if (id < 0 || !(t->v.scores[id] > -1e10f)) return BT_OK;
    return heap_push(&sc->h, (bigram){ .prio = t->v.scores[id], .left = l, .right = r,
                                       .lid = a, .rid = b, .id = id });
}

static int l2c_encode(const bt_tokenizer *t, scratch *sc, const char *text, size_t len,
                      bool prefix, idvec *out)
{
    int rc;
    if ((rc = sym_reserve(sc, len + 1))) return rc;
    size_t ns = 0;
    int32_t sp = smap_get(&t->tok, " ", 1);
    if (prefix && len > 0 && sp >= 0) sc->s[ns++].id = sp;
    /* run.c: gather a code point (at most 4 bytes), look it up, else bytes + 3 */
    size_t start = 0, cur = 0;
    for (size_t i = 0; i < len; i++) {
        if (((unsigned char)text[i] & 0xC0) != 0x80) { start = i; cur = 0; }
        if (cur == 0) start = i;
        cur++;
        bool cont = i + 1 < len && ((unsigned char)text[i + 1] & 0xC0) == 0x80;
        if (cont && cur < 4) continue;
        int32_t id = smap_get(&t->tok, text + start, cur);
        if (id >= 0) {
            if ((rc = sym_reserve(sc, ns + 1))) return rc;
            sc->s[ns++].id = id;
        } else {
            if ((rc = sym_reserve(sc, ns + cur))) return rc;
            for (size_t j = 0; j < cur; j++) {
                int32_t bid = (int32_t)(unsigned char)text[start + j] + 3;
                if (bid >= t->v.n_tokens)
                    return bt_error(BT_EINVAL, "cannot encode byte 0x%02X: byte token %d is outside "
                                    "the vocabulary", (unsigned char)text[start + j], bid);
                sc->s[ns++].id = bid;
            }
        }
        cur = 0;
    }
    for (size_t i = 0; i < ns; i++) {
        sc->s[i].n = 1;
        sc->s[i].prev = (int)i - 1;
        sc->s[i].next = i + 1 < ns ? (int)i + 1 : -1;
    }
    sc->h.n = 0;
    for (size_t i = 1; i < ns; i++)
        if ((rc = l2c_add_bigram(t, sc, (int)i - 1, (int)i))) return rc;
    while (sc->h.n) {
        bigram b = heap_pop(&sc->h);
        sym *l = &sc->s[b.left], *r = &sc->s[b.right];
        if (!l->n || !r->n || l->next != b.right || l->id != b.lid || r->id != b.rid) continue;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->s[r->next].prev = b.left;
        if ((rc = l2c_add_bigram(t, sc, l->prev, b.left))) return rc;
        if ((rc = l2c_add_bigram(t, sc, b.left, l->next))) return rc;
    }
    for (int i = ns ? 0 : -1; i != -1; i = sc->s[i].next)
        if ((rc = idvec_push(out, sc->s[i].id))) return rc;
    return BT_OK;
}

/* ---- special-token partition and the public entry point ---- */

typedef struct frag { size_t off, len; int32_t id; } frag;   /* id < 0: raw text */
typedef struct fragvec { frag *v; size_t n, cap; } fragvec;

static int frag_push(fragvec *f, frag x) { return BT_VEC_PUSH(f->v, f->n, f->cap, x); }

/* Cut raw fragments around special-token texts, longest token first, as
 * llama.cpp's tokenizer_st_partition. User-defined tokens are cut even
 * without parse_special (Hugging Face does the same). */
static int partition(const bt_tokenizer *t, const char *text, size_t len, bool parse_special,
                     fragvec *fv)
{
    fragvec tmp = { 0 };
    int rc = BT_OK;
    fv->n = 0;
    if (len == 0) return BT_OK;
    if ((rc = frag_push(fv, (frag){ 0, len, -1 }))) return rc;
    for (size_t si = 0; si < t->n_special && !rc; si++) {
        int32_t id = t->special[si];
        if (!parse_special && !(t->attr[id] & A_USER)) continue;
        const char *st = t->v.text[id];
        size_t sl = t->v.len[id];
        bool any = false;
        for (size_t f = 0; f < fv->n; f++)
            if (fv->v[f].id < 0 && fv->v[f].len >= sl &&
                memmem(text + fv->v[f].off, fv->v[f].len, st, sl)) { any = true; break; }
        if (!any) continue;
        tmp.n = 0;
        for (size_t f = 0; f < fv->n && !rc; f++) {
            frag fr = fv->v[f];
            if (fr.id >= 0) { rc = frag_push(&tmp, fr); continue; }
            size_t pos = fr.off, end = fr.off + fr.len;
            while (!rc && pos < end) {
                const char *hit = memmem(text + pos, end - pos, st, sl);
                if (!hit) { rc = frag_push(&tmp, (frag){ pos, end - pos, -1 }); break; }
                size_t h = (size_t)(hit - text);
                if (h > pos) rc = frag_push(&tmp, (frag){ pos, h - pos, -1 });
                if (!rc) rc = frag_push(&tmp, (frag){ h, sl, id });
                pos = h + sl;
            }
        }
        fragvec sw = *fv; *fv = tmp; tmp = sw;
    }
    free(tmp.v);
    return rc;
}

int bt_tokenize(const bt_tokenizer *t, const char *text, size_t len,
                bool add_special, bool parse_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    idvec out = { 0 };
    fragvec fv = { 0 };
    scratch sc = { 0 };
    const bt_vocab *v = &t->v;
    int rc = BT_OK;
    if (!text && len) return bt_error(BT_EINVAL, "tokenize: NULL text");

    if (add_special && v->add_bos && v->bos >= 0 && (rc = idvec_push(&out, v->bos))) goto done;
    if ((rc = partition(t, text, len, parse_special, &fv))) goto done;
    bool prev_special = true;       /* SPM: a space prefix starts every text run after a special */
    for (size_t f = 0; f < fv.n && !rc; f++) {
        frag fr = fv.v[f];
        if (fr.id >= 0) { rc = idvec_push(&out, fr.id); prev_special = true; continue; }
        bool prefix = v->add_space_prefix && prev_special;
        switch (v->kind) {
        case BT_VOCAB_SPM: rc = spm_encode(t, &sc, text + fr.off, fr.len, prefix, &out); break;
        case BT_VOCAB_BPE:
            rc = v->bpe_byte_fallback ? bfb_encode(t, &sc, text + fr.off, fr.len, fr.off == 0, &out)
                                      : bpe_encode(t, &sc, text + fr.off, fr.len, &out);
            break;
        default: rc = l2c_encode(t, &sc, text + fr.off, fr.len, prefix, &out); break;
        }
        prev_special = false;
    }
    if (!rc && add_special && v->add_eos && v->eos >= 0) rc = idvec_push(&out, v->eos);
done:
    free(fv.v);
    free(sc.s);
    free(sc.h.v);
    free(sc.buf);
    if (rc) { free(out.v); return rc; }
    if (!out.v) out.v = malloc(sizeof(int32_t));     /* callers may free() an empty result */
    if (!out.v) return bt_error(BT_ENOMEM, "out of memory for token ids");
    *ids = out.v;
    *n_ids = out.n;
    return BT_OK;
}

const char *bt_token_piece(const bt_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->v.n_tokens) { if (len) *len = 0; return ""; }
    if (len) *len = t->piece_len[id];
    return t->pieces + t->piece_off[id];
}

int bt_detokenize(const bt_tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    /* A leading BOS the tokenizer itself adds is framing, not text (llama2.c
     * never prints it; llama.cpp drops it with remove_special). Where BOS is
     * not added (SmolLM2: BOS is <|im_start|>), it stays visible. */
    size_t start = n > 0 && t->v.add_bos && t->v.bos >= 0 && ids[0] == t->v.bos;
    size_t total = 0;
    for (size_t i = start; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->v.n_tokens)
            return bt_error(BT_ERANGE, "token id %d at position %zu is outside the vocabulary (%d tokens)",
                            ids[i], i, t->v.n_tokens);
        total += t->piece_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return bt_error(BT_ENOMEM, "out of memory decoding %zu tokens", n);
    bool strip = t->v.kind != BT_VOCAB_BPE && t->v.add_space_prefix;
    bool bfb = t->v.kind == BT_VOCAB_BPE && t->v.bpe_byte_fallback;
    size_t k = 0;
    for (size_t i = start; i < n; i++) {
        const char *p = t->pieces + t->piece_off[ids[i]];
        size_t pl = t->piece_len[ids[i]];
        if (bfb && i == start && t->v.dec_meta_first && !(t->attr[ids[i]] & (A_BYTE | A_CONTROL | A_USER | A_UNKNOWN))) {
            /* tokenizers' Metaspace decoder: the first token's U+2581s vanish */
            for (size_t j = 0; j < pl; j++) if (p[j] != ' ') s[k++] = p[j];
            continue;
        }
        /* the encoder added this space; a byte token's space is real text */
        if (strip && pl > 0 && p[0] == ' ' && !(t->attr[ids[i]] & A_BYTE)) { p++; pl--; }
        strip = false;
        memcpy(s + k, p, pl);
        k += pl;
    }
    if (bfb && t->v.dec_strip > 0) {      /* Strip after Fuse: the decoded text's leading spaces */
        size_t cut = 0;
        while (cut < k && cut < (size_t)t->v.dec_strip && s[cut] == ' ') cut++;
        memmove(s, s + cut, k - cut);
        k -= cut;
    }
    s[k] = 0;
    *out = s;
    if (out_len) *out_len = k;
    return BT_OK;
}

int32_t bt_tokenizer_n_vocab(const bt_tokenizer *t) { return t->v.n_tokens; }
int32_t bt_tokenizer_bos(const bt_tokenizer *t) { return t->v.bos; }
int32_t bt_tokenizer_eos(const bt_tokenizer *t) { return t->v.eos; }

bool bt_tokenizer_is_eog(const bt_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->v.n_tokens && (t->attr[id] & A_EOG);
}

bool bt_tokenizer_is_control(const bt_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->v.n_tokens && (t->attr[id] & A_CONTROL);
}

int32_t bt_tokenizer_find(const bt_tokenizer *t, const char *text, size_t len)
{
    return smap_get(&t->tok, text, len);
}
