/* pretok.c - BPE pre-tokenizer pattern sets (PCRE2, UTF + UCP) and the
 * fragment splitter.
 *
 * The sets reproduce llama.cpp's (src/llama-vocab.cpp) per pre-tokenizer
 * type. llama.cpp runs them through std::regex over "collapsed" text where
 * every non-ASCII code point stands for its Unicode category; PCRE2 with
 * PCRE2_UCP gives the same classes directly. Where llama.cpp writes `$`
 * (ECMAScript: end of input only) we write `\z`, because PCRE2's `$` would
 * also match before a final newline.
 *
 * Only sets we can check against vectors or that are the exact same
 * patterns as a checked set are listed: a name missing here must fail
 * loudly rather than tokenize with the wrong pattern. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretok.h"

#include <pcre2.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define GPT2_PAT "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* CJK unified ideographs, U+0800..U+4E00 and Hangul, as llama.cpp's
 * deepseek sets write them ("[一-龥ࠀ-一가-퟿]+"). */
#define DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

enum { MAX_PATS = 7 };      /* the longest set has 6, plus the NULL */

typedef struct pat_set {
    const char *name;                 /* canonical name */
    bool ignore_merges;
    const char *pats[MAX_PATS];       /* NULL-terminated */
} pat_set;

static const pat_set SET_DEFAULT = { "default", false, {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_PAT, "\\p{N}+", "[0-9][0-9][0-9]", NULL } };
static const pat_set SET_GPT2 = { "gpt-2", false, { GPT2_PAT, NULL } };
static const pat_set SET_FALCON = { "falcon", false, {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_PAT, "[0-9][0-9][0-9]", NULL } };
static const pat_set SET_STARCODER = { "starcoder", false, { "\\p{N}", GPT2_PAT, NULL } };
#define LLAMA3_PAT(digits) LLAMA3_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" digits \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
static const pat_set SET_LLAMA3 = { "llama3", true, { LLAMA3_PAT("\\p{N}{1,3}"), NULL } };
/* dbrx and smaug use the Llama-3 pattern but keep merging whole words. */
static const pat_set SET_LLAMA3_MERGE = { "llama3", false, { LLAMA3_PAT("\\p{N}{1,3}"), NULL } };
static const pat_set SET_QWEN2 = { "qwen2", false, { LLAMA3_PAT("\\p{N}"), NULL } };
static const pat_set SET_DEEPSEEK_CODER = { "deepseek-coder", false, {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}", NULL } };
/* The long letter list in llama.cpp's deepseek-llm set is exactly the cased
 * letters (Lu, Ll, Lt), which PCRE2 names \p{L&}. */
static const pat_set SET_DEEPSEEK_LLM = { "deepseek-llm", false, {
    "[\\r\\n]", "\\s?[A-Za-z\\p{L&}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+\\z", DEEPSEEK_CJK, "\\p{N}+", NULL } };

static const struct { const char *pre; const pat_set *set; } PRE_NAMES[] = {
    { "", &SET_DEFAULT }, { "default", &SET_DEFAULT },
    { "gpt-2", &SET_GPT2 }, { "phi-2", &SET_GPT2 }, { "mpt", &SET_GPT2 }, { "olmo", &SET_GPT2 },
    { "jais", &SET_GPT2 }, { "roberta-bpe", &SET_GPT2 }, { "gigachat", &SET_GPT2 },
    { "jina-es", &SET_GPT2 }, { "jina-de", &SET_GPT2 }, { "jina-v1-en", &SET_GPT2 },
    { "jina-v2-es", &SET_GPT2 }, { "jina-v2-de", &SET_GPT2 }, { "jina-v2-code", &SET_GPT2 },
    { "falcon", &SET_FALCON },
    { "starcoder", &SET_STARCODER }, { "smollm", &SET_STARCODER }, { "refact", &SET_STARCODER },
    { "command-r", &SET_STARCODER }, { "codeshell", &SET_STARCODER }, { "exaone", &SET_STARCODER },
    { "minerva-7b", &SET_STARCODER },
    { "llama3", &SET_LLAMA3 }, { "llama-v3", &SET_LLAMA3 }, { "llama-bpe", &SET_LLAMA3 },
    { "falcon3", &SET_LLAMA3 }, { "dbrx", &SET_LLAMA3_MERGE }, { "smaug-bpe", &SET_LLAMA3_MERGE },
    { "qwen2", &SET_QWEN2 }, { "stablelm2", &SET_QWEN2 }, { "megrez", &SET_QWEN2 },
    { "deepseek-coder", &SET_DEEPSEEK_CODER },
    { "deepseek-llm", &SET_DEEPSEEK_LLM },
};

/* Longest chain a tokenizer.json builds (Sequence of Splits and ByteLevel). */
enum { MAX_CODES = 16 };

struct bt_pretok {
    const pat_set *set;       /* NULL for a custom chain */
    bool ignore_merges;
    bool removes;             /* some split drops bytes */
    int n_code;
    pcre2_code *code[MAX_CODES];
    int behavior[MAX_CODES];
    bool invert[MAX_CODES];
    char what[MAX_CODES][64]; /* the pattern's head, for a match-limit error */
};

void bt_pretok_free(bt_pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_code; i++) pcre2_code_free(p->code[i]);
    free(p);
}

int bt_pretok_new(const char *pre, bt_pretok **out)
{
    *out = NULL;
    const pat_set *set = NULL;
    for (size_t i = 0; i < BT_ARRAY_SIZE(PRE_NAMES); i++)
        if (!strcmp(PRE_NAMES[i].pre, pre)) { set = PRE_NAMES[i].set; break; }
    if (!set)
        return bt_error(BT_EUNSUPPORTED, "unknown BPE pre-tokenizer '%s' (tokenizer.ggml.pre); "
                        "refusing to guess its split patterns", pre);

    bt_pretok *p = calloc(1, sizeof(*p));
    if (!p) return bt_error(BT_ENOMEM, "out of memory for pre-tokenizer");
    p->set = set;
    p->ignore_merges = set->ignore_merges;
    uint32_t have_jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
    for (int i = 0; i < MAX_PATS && set->pats[i]; i++) {
        p->behavior[i] = BT_SPLIT_ISOLATED;
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)set->pats[i], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
        if (!c) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof(msg));
            bt_pretok_free(p);
            return bt_error(BT_EINTERNAL, "pre-tokenizer '%s' pattern %d: %s at offset %zu",
                            set->name, i, (const char *)msg, (size_t)erroff);
        }
        /* JIT is an optimization only: the interpreter gives the same matches. */
        if (have_jit) pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        snprintf(p->what[p->n_code], sizeof p->what[0], "%s", set->pats[i]);
        p->code[p->n_code++] = c;
    }
    *out = p;
    return BT_OK;
}

bool bt_pretok_ignore_merges(const bt_pretok *p) { return p->ignore_merges; }

int bt_pretok_new_custom(const bt_pretok_pat *pats, int n, bool ignore_merges, bt_pretok **out)
{
    *out = NULL;
    if (n < 0 || n > MAX_CODES)
        return bt_error(BT_EUNSUPPORTED, "pre-tokenizer chain of %d patterns (at most %d)", n, MAX_CODES);
    bt_pretok *p = calloc(1, sizeof(*p));
    if (!p) return bt_error(BT_ENOMEM, "out of memory for pre-tokenizer");
    p->ignore_merges = ignore_merges;
    uint32_t have_jit = 0;
    pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
    for (int i = 0; i < n; i++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)pats[i].regex, PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
        if (!c) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof(msg));
            bt_pretok_free(p);
            return bt_error(BT_EUNSUPPORTED, "pre-tokenizer regex '%.80s': %s at offset %zu",
                            pats[i].regex, (const char *)msg, (size_t)erroff);
        }
        if (have_jit) pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        p->code[p->n_code] = c;
        snprintf(p->what[p->n_code], sizeof p->what[0], "%s", pats[i].regex);
        p->behavior[p->n_code] = pats[i].behavior;
        p->invert[p->n_code] = pats[i].invert;
        p->removes |= pats[i].behavior == BT_SPLIT_REMOVED;
        p->n_code++;
    }
    *out = p;
    return BT_OK;
}

/* Words as (offset, length) pairs into the whole text. */
typedef struct wordvec { size_t *v; size_t n, cap; } wordvec;   /* n counts size_t's */

static int wv_push(wordvec *a, size_t off, size_t len)
{
    int rc = BT_VEC_PUSH(a->v, a->n, a->cap, off);
    return rc ? rc : BT_VEC_PUSH(a->v, a->n, a->cap, len);
}

/* Cut one word at every match of code, then combine the pieces as the
 * split's behavior says (the fold of tokenizers' SplitDelimiterBehavior). */
static int split_fragment(const bt_pretok *p, int ci, pcre2_match_data *md, pcre2_match_context *mc,
                          const char *text, size_t foff, size_t flen, wordvec *outv, wordvec *pieces)
{
    const char *frag = text + foff;
    size_t pos = 0, last = 0;
    int rc;
    pieces->n = 0;
    /* pieces: (off, len) pairs plus a third entry, the is-match flag */
#define PIECE(o, l, m) do { if ((rc = BT_VEC_PUSH(pieces->v, pieces->n, pieces->cap, (o))) || \
    (rc = BT_VEC_PUSH(pieces->v, pieces->n, pieces->cap, (l))) || \
    (rc = BT_VEC_PUSH(pieces->v, pieces->n, pieces->cap, (size_t)((m) != p->invert[ci])))) return rc; } while (0)
    /* PCRE2 counts its match limit per start position; the default (10
     * million) lets a backtracking pattern spend milliseconds at every
     * character. Well-behaved patterns need a few steps per byte of the
     * fragment (\s+(?!\S) backtracks over a run of spaces), so the limit
     * scales with the fragment and a pattern past it is an error. */
    uint32_t limit = (uint32_t)BT_MIN(BT_MAX((uint64_t)flen * BT_PRETOK_STEPS_PER_BYTE,
                                             (uint64_t)BT_PRETOK_MIN_STEPS), (uint64_t)BT_PRETOK_MAX_STEPS);
    pcre2_set_match_limit(mc, limit);
    pcre2_set_depth_limit(mc, limit);
    while (pos < flen) {
        rc = pcre2_match(p->code[ci], (PCRE2_SPTR)frag, flen, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
            rc == PCRE2_ERROR_JIT_STACKLIMIT)
            return bt_error(BT_EINVAL, "pre-tokenizer regex '%s%s' exceeded its match limit (%" PRIu32
                            " steps at byte %zu of a %zu-byte fragment): it backtracks catastrophically "
                            "on this text", p->what[ci], strlen(p->what[ci]) >= sizeof p->what[0] - 1 ? "..." : "",
                            limit, pos, flen);
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return bt_error(BT_EINTERNAL, "pre-tokenizer match failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {         /* empty match: none of our patterns make one, but never loop */
            if (ms >= flen) break;
            pos = ms + bt_utf8_len((unsigned char)frag[ms]);
            continue;
        }
        if (ms > last) PIECE(foff + last, ms - last, false);
        PIECE(foff + ms, me - ms, true);
        last = pos = me;
    }
    if (flen > last) PIECE(foff + last, flen - last, false);
#undef PIECE
    size_t np = pieces->n / 3, *pv = pieces->v;
    size_t first = outv->n;           /* this fragment's words start here */
    bool prev_match = false;
    switch (p->behavior[ci]) {
    case BT_SPLIT_ISOLATED:
        for (size_t i = 0; i < np; i++) if ((rc = wv_push(outv, pv[3 * i], pv[3 * i + 1]))) return rc;
        break;
    case BT_SPLIT_REMOVED:
        for (size_t i = 0; i < np; i++)
            if (!pv[3 * i + 2] && (rc = wv_push(outv, pv[3 * i], pv[3 * i + 1]))) return rc;
        break;
    case BT_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < np; i++) {
            bool m = pv[3 * i + 2];
            if (m && !prev_match && outv->n > first) outv->v[outv->n - 1] += pv[3 * i + 1];
            else if ((rc = wv_push(outv, pv[3 * i], pv[3 * i + 1]))) return rc;
            prev_match = m;
        }
        break;
    case BT_SPLIT_MERGED_NEXT:
        /* walk backwards: a match joins the word after it */
        for (size_t k = np; k-- > 0;) {
            bool m = pv[3 * k + 2];
            if (m && !prev_match && outv->n > first) {
                size_t *w = &outv->v[outv->n - 2];
                w[1] += w[0] - pv[3 * k];
                w[0] = pv[3 * k];
            } else if ((rc = wv_push(outv, pv[3 * k], pv[3 * k + 1]))) return rc;
            prev_match = m;
        }
        for (size_t a = first, b = outv->n - 2; a < b; a += 2, b -= 2) {
            size_t t0 = outv->v[a], t1 = outv->v[a + 1];
            outv->v[a] = outv->v[b]; outv->v[a + 1] = outv->v[b + 1];
            outv->v[b] = t0; outv->v[b + 1] = t1;
        }
        break;
    default: /* BT_SPLIT_CONTIGUOUS */
        for (size_t i = 0; i < np; i++) {
            bool m = pv[3 * i + 2];
            if (m == prev_match && outv->n > first) outv->v[outv->n - 1] += pv[3 * i + 1];
            else if ((rc = wv_push(outv, pv[3 * i], pv[3 * i + 1]))) return rc;
            prev_match = m;
        }
        break;
    }
    return BT_OK;
}

int bt_pretok_words(const bt_pretok *p, const char *text, size_t len, size_t **words, size_t *n)
{
    *words = NULL; *n = 0;
    wordvec cur = { 0 }, next = { 0 }, pieces = { 0 };
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    int rc = BT_OK;
    if (!mc || !js) { rc = bt_error(BT_ENOMEM, "out of memory in pre-tokenizer"); goto done; }
    pcre2_jit_stack_assign(mc, NULL, js);
    if (len > 0 && (rc = wv_push(&cur, 0, len))) goto done;

    for (int i = 0; i < p->n_code; i++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code[i], NULL);
        if (!md) { rc = bt_error(BT_ENOMEM, "out of memory in pre-tokenizer"); goto done; }
        next.n = 0;
        for (size_t f = 0; f < cur.n && rc == BT_OK; f += 2)
            rc = split_fragment(p, i, md, mc, text, cur.v[f], cur.v[f + 1], &next, &pieces);
        pcre2_match_data_free(md);
        if (rc) goto done;
        wordvec t = cur; cur = next; next = t;
    }
    *words = cur.v; *n = cur.n / 2;
    cur.v = NULL;
done:
    free(cur.v);
    free(next.v);
    free(pieces.v);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    return rc;
}

int bt_pretok_split(const bt_pretok *p, const char *text, size_t len, size_t **lens, size_t *n)
{
    *lens = NULL; *n = 0;
    if (p->removes) return bt_error(BT_EINVAL, "pre-tokenizer drops text: use bt_pretok_words");
    size_t *w, nw;
    int rc = bt_pretok_words(p, text, len, &w, &nw);
    if (rc) return rc;
    for (size_t i = 0; i < nw; i++) w[i] = w[2 * i + 1];
    if (!w && !(w = malloc(sizeof(*w)))) return bt_error(BT_ENOMEM, "out of memory in pre-tokenizer");
    *lens = w; *n = nw;
    return BT_OK;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

int bt_utf8_sanitize(const char *text, size_t len, char **out, size_t *out_len)
{
    /* Worst case: every byte becomes a 3-byte U+FFFD. */
    char *o = malloc(len * 3 + 1);
    if (!o) return bt_error(BT_ENOMEM, "out of memory sanitizing %zu bytes of text", len);
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, n = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t need = (c & 0x80) == 0 ? 1 : (c & 0x40) == 0 ? 0 : (c & 0x20) == 0 ? 2
                    : (c & 0x10) == 0 ? 3 : (c & 0x08) == 0 ? 4 : 0;
        uint32_t cp = 0;
        bool ok = need > 0 && i + need <= len;
        if (ok) {
            cp = need == 1 ? c : need == 2 ? (c & 0x1F) : need == 3 ? (c & 0x0F) : (c & 0x07);
            for (size_t k = 1; k < need; k++) {
                if ((s[i + k] & 0xC0) != 0x80) { ok = false; break; }
                cp = (cp << 6) | (s[i + k] & 0x3F);
            }
        }
        if (ok && ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) ok = false;
        if (!ok) { cp = 0xFFFD; need = 1; }
        n += put_utf8(o + n, cp);
        i += need;
    }
    o[n] = 0;
    *out = o;
    *out_len = n;
    return BT_OK;
}
