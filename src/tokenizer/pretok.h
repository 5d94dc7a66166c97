/* pretok.h - BPE pre-tokenization: split text into words with a chain of
 * PCRE2 patterns chosen by the GGUF tokenizer.ggml.pre name.
 *
 * Semantics follow llama.cpp's unicode_regex_split: each pattern of a set is
 * applied in turn to every fragment the previous pattern produced; a
 * fragment is cut at the boundaries of every match, and the text between
 * matches is kept as a fragment of its own. Patterns see one fragment at a
 * time, so look-arounds never cross a fragment boundary. */
#ifndef BT_PRETOK_H
#define BT_PRETOK_H

#include <stddef.h>
#include <stdbool.h>

typedef struct bt_pretok bt_pretok;

/* Compile the pattern set for `pre` ("" means "default"). An unknown name is
 * BT_EUNSUPPORTED with a message naming it. */
int bt_pretok_new(const char *pre, bt_pretok **out);
void bt_pretok_free(bt_pretok *p);            /* NULL is a no-op */

/* tokenizer.json pre-tokenizers (Hugging Face `tokenizers`): a Split's
 * behavior says what happens to the pieces a match cuts out; invert swaps
 * which pieces count as matches. The GGUF sets above are all ISOLATED. */
enum bt_split_behavior {
    BT_SPLIT_ISOLATED = 0,    /* matches and gaps are words of their own */
    BT_SPLIT_REMOVED,         /* matches are dropped */
    BT_SPLIT_MERGED_PREV,     /* a match joins the word before it */
    BT_SPLIT_MERGED_NEXT,     /* a match joins the word after it */
    BT_SPLIT_CONTIGUOUS,      /* consecutive matches join into one word */
};
typedef struct bt_pretok_pat {
    const char *regex;        /* PCRE2 syntax (UTF, UCP) */
    int behavior;             /* bt_split_behavior */
    bool invert;
} bt_pretok_pat;

/* Compile a pattern chain given as data (from a tokenizer.json). A pattern
 * PCRE2 rejects is BT_EUNSUPPORTED naming it. n may be 0 (no splitting). */
int bt_pretok_new_custom(const bt_pretok_pat *pats, int n, bool ignore_merges, bt_pretok **out);

/* Llama-3 style: a word that is already a vocabulary piece skips merging. */
bool bt_pretok_ignore_merges(const bt_pretok *p);

/* PCRE2 match limit, per start position of a match (PCRE2's own unit):
 * STEPS_PER_BYTE x the fragment's length, at least MIN_STEPS, at most
 * MAX_STEPS (PCRE2's default). The shipped patterns stay far below it; a
 * tokenizer.json Split regex that backtracks catastrophically (nested
 * quantifiers such as (\p{L}+)+) exceeds it and bt_pretok_words fails with
 * BT_EINVAL naming the pattern, instead of spending seconds per character. */
#define BT_PRETOK_STEPS_PER_BYTE 16
#define BT_PRETOK_MIN_STEPS 100000
#define BT_PRETOK_MAX_STEPS 10000000

/* Split len bytes of valid UTF-8 into consecutive words; *lens (malloc'd,
 * caller frees) receives each word's length in bytes, their sum is len.
 * Returns BT_OK, BT_ENOMEM, BT_EINVAL past the match limit, or BT_EINTERNAL
 * if PCRE2 fails otherwise; a set
 * with a REMOVED split is BT_EINVAL here (use bt_pretok_words). */
int bt_pretok_split(const bt_pretok *p, const char *text, size_t len,
                    size_t **lens, size_t *n);
/* The same as (offset, length) pairs: (*words)[2i] is word i's offset,
 * (*words)[2i+1] its length; words are in order but a REMOVED split may
 * leave bytes out. */
int bt_pretok_words(const bt_pretok *p, const char *text, size_t len,
                    size_t **words, size_t *n);

/* Copy len bytes into a valid UTF-8 string (malloc'd, NUL-terminated),
 * decoding the way llama.cpp does (lead byte decides the length, overlong
 * forms decode to their code point) and replacing each undecodable byte, a
 * surrogate or a code point above U+10FFFF with U+FFFD. */
int bt_utf8_sanitize(const char *text, size_t len, char **out, size_t *out_len);

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation
 * bytes), as llama.cpp's unicode_len_utf8. */
static inline size_t bt_utf8_len(unsigned char c)
{
    static const unsigned char lut[16] = { 1,1,1,1,1,1,1,1,1,1,1,1,2,2,3,4 };
    return lut[c >> 4];
}

#endif
