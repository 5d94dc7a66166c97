/* test_tokenizer.c - tokenizer conformance and behaviour, through the real
 * model loader (bt_model_load).
 *
 *  1. llama.cpp's vectors (.inp/.out files in BT_SHARED/models/gguf-vocab) for the
 *     SPM, gpt-2, falcon and deepseek-coder vocabularies: every case must
 *     give exactly the expected ids, and decoding them must give the input
 *     back. Every mismatching case is printed.
 *  2. llama2.c tok512.bin: bt_tokenize equals a literal transcription of
 *     run.c's encode() (quadratic, obviously right) on several strings, and
 *     round-trips them.
 *  3. SmolLM2 (pre "smollm"; skipped when the cached GGUF is absent): exact
 *     round-trips and parse_special chat markup.
 *  4. Pre-tokenizer sets without a vocab file here (llama3, qwen2, smollm,
 *     deepseek-llm): word splits of small strings.
 *  5. Hand-built vocabularies: an unknown pre-tokenizer is a clear
 *     BT_EUNSUPPORTED error; SPM without byte tokens falls back to <unk>.
 * Exit 0 pass, 1 fail, 77 skip (test data missing). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE         /* memmem */
#endif
#include "model/model.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void print_escaped(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
}

static int load_tok(const char *path, const char *tokpath, bt_model **m, bt_tokenizer **t)
{
    *m = NULL; *t = NULL;
    if (bt_model_load(path, tokpath, m)) { printf("load %s: %s\n", path, bt_errmsg()); return -1; }
    if (!(*m)->has_vocab) { printf("%s: no vocab\n", path); return -1; }
    if (bt_tokenizer_new(&(*m)->vocab, t)) { printf("tokenizer %s: %s\n", path, bt_errmsg()); return -1; }
    return 0;
}

/* ---- 1. llama.cpp vectors ---- */

static void vectors(const char *dir, const char *name)
{
    char path[1200], inp[1300], outp[1300];
    snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", dir, name);
    snprintf(inp, sizeof(inp), "%s.inp", path);
    snprintf(outp, sizeof(outp), "%s.out", path);
    bt_model *m; bt_tokenizer *t;
    if (load_tok(path, NULL, &m, &t)) { failures++; bt_tokenizer_free(t); bt_model_free(m); return; }
    char *in, *out;
    size_t in_len, out_len;
    if (bt_read_file(inp, &in, &in_len) || bt_read_file(outp, &out, &out_len)) {
        printf("FAIL %s: %s\n", name, bt_errmsg());
        failures++;
        bt_tokenizer_free(t); bt_model_free(m);
        return;
    }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const size_t seplen = sizeof(SEP) - 1;
    int ncase = 0, bad = 0;
    char *p = in, *o = out, *in_end = in + in_len;
    while (p < in_end) {
        char *sep = memmem(p, (size_t)(in_end - p), SEP, seplen);
        if (!sep) break;
        size_t len = (size_t)(sep - p);
        char *eol = strchr(o, '\n');
        if (!eol) { printf("FAIL %s: .out has fewer lines than .inp cases\n", name); failures++; break; }
        *eol = 0;
        int32_t want[512];
        size_t nwant = 0;
        for (char *q = o, *end; nwant < 512; q = end) {
            long v = strtol(q, &end, 10);
            if (end == q) break;
            want[nwant++] = (int32_t)v;
        }
        int32_t *got = NULL;
        size_t ngot = 0;
        int rc = bt_tokenize(t, p, len, false, false, &got, &ngot);
        bool same = rc == BT_OK && ngot == nwant && !memcmp(got, want, nwant * sizeof(*want));
        char *dec = NULL;
        size_t dlen = 0;
        bool round = same && bt_detokenize(t, got, ngot, &dec, &dlen) == BT_OK &&
                     dlen == len && !memcmp(dec, p, len);
        if (!same || !round) {
            bad++;
            printf("FAIL %s case %d ", name, ncase);
            print_escaped(p, len);
            if (rc) printf(": error %s\n", bt_errmsg());
            else if (!same) {
                printf("\n  want:"); print_ids(want, nwant);
                printf("\n  got: "); print_ids(got, ngot); printf("\n");
            } else {
                printf(": decodes to "); print_escaped(dec ? dec : "", dlen); printf("\n");
            }
        }
        free(dec);
        free(got);
        ncase++;
        p = sep + seplen;
        o = eol + 1;
    }
    CHECK(ncase == 46, "%s: read %d cases, expected 46", name, ncase);
    printf("%s: %d/%d vectors match\n", name, ncase - bad, ncase);
    failures += bad;
    free(in); free(out);
    bt_tokenizer_free(t); bt_model_free(m);
}

/* ---- 2. llama2.c ---- */

/* run.c's encode(), transcribed: linear-scan lookups, quadratic merging. */
static int ref_lookup(const bt_vocab *v, const char *s, size_t n)
{
    for (int i = 0; i < v->n_tokens; i++)
        if (v->len[i] == n && !memcmp(v->text[i], s, n)) return i;
    return -1;
}

static size_t ref_l2c_encode(const bt_vocab *v, const char *text, int32_t *tok)
{
    size_t n = 0;
    char buf[256];
    if (text[0]) tok[n++] = ref_lookup(v, " ", 1);
    size_t sl = 0;
    for (const char *c = text; *c; c++) {
        if ((*c & 0xC0) != 0x80) sl = 0;
        buf[sl++] = *c;
        if ((c[1] & 0xC0) == 0x80 && sl < 4) continue;
        int id = ref_lookup(v, buf, sl);
        if (id != -1) tok[n++] = id;
        else for (size_t i = 0; i < sl; i++) tok[n++] = (unsigned char)buf[i] + 3;
        sl = 0;
    }
    for (;;) {
        float best = -1e10f;
        int best_id = -1;
        size_t best_i = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            size_t la = v->len[tok[i]], lb = v->len[tok[i + 1]];
            memcpy(buf, v->text[tok[i]], la);
            memcpy(buf + la, v->text[tok[i + 1]], lb);
            int id = ref_lookup(v, buf, la + lb);
            if (id != -1 && v->scores[id] > best) { best = v->scores[id]; best_id = id; best_i = i; }
        }
        if (best_id == -1) break;
        tok[best_i] = best_id;
        memmove(tok + best_i + 1, tok + best_i + 2, (n - best_i - 2) * sizeof(*tok));
        n--;
    }
    return n;
}

static void llama2c(const char *shared)
{
    char bin[1024], tokp[1024];
    snprintf(bin, sizeof(bin), "%s/models/llama2c/stories260K.bin", shared);
    snprintf(tokp, sizeof(tokp), "%s/models/llama2c/tok512.bin", shared);
    bt_model *m; bt_tokenizer *t;
    if (load_tok(bin, tokp, &m, &t)) { failures++; bt_tokenizer_free(t); bt_model_free(m); return; }
    static const char *const texts[] = {
        "Once upon a time", "", " ", "  two  spaces ", "Lily's cat said \"hi!\"\n\nThe end.",
        "caf\xC3\xA9 \xE2\x82\xAC 100 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87", "\t\ttabs\x01\x7f",
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        "\x80\x80stray \xF0\x9F\x98\x80\x80\x80\x80 continuation\xC3",
    };
    for (size_t k = 0; k < BT_ARRAY_SIZE(texts); k++) {
        const char *s = texts[k];
        int32_t want[512];
        size_t nwant = ref_l2c_encode(&m->vocab, s, want);
        int32_t *got; size_t ngot;
        int rc = bt_tokenize(t, s, strlen(s), false, false, &got, &ngot);
        bool same = rc == BT_OK && ngot == nwant && !memcmp(got, want, nwant * sizeof(*want));
        if (!same) {
            failures++;
            printf("FAIL llama2c encode "); print_escaped(s, strlen(s));
            printf("\n  run.c:"); print_ids(want, nwant);
            printf("\n  got:  "); if (!rc) print_ids(got, ngot); printf("\n");
        }
        char *dec; size_t dl;
        if (!rc && bt_detokenize(t, got, ngot, &dec, &dl) == BT_OK) {
            CHECK(dl == strlen(s) && !memcmp(dec, s, dl), "llama2c round trip of text %zu gives %s", k, dec);
            free(dec);
        }
        if (!rc) free(got);
    }
    /* add_special prepends BOS = 1; "Once upon a time" is what llama2.c
     * gives: " Once" " upon" " a" " time" */
    int32_t *ids; size_t n;
    CHECK(bt_tokenize(t, "Once upon a time", 16, true, false, &ids, &n) == BT_OK, "%s", bt_errmsg());
    static const int32_t once[] = { 1, 403, 407, 261, 378 };
    CHECK(n == 5 && !memcmp(ids, once, sizeof(once)), "llama2c 'Once upon a time' with BOS: got %zu ids", n);
    free(ids);
    CHECK(bt_tokenizer_is_eog(t, 2) && bt_tokenizer_is_eog(t, 1) && !bt_tokenizer_is_eog(t, 403),
          "llama2c end-of-generation ids are EOS=2 and BOS=1");
    printf("llama2c: checked %zu strings against run.c's encode\n", BT_ARRAY_SIZE(texts));
    bt_tokenizer_free(t); bt_model_free(m);
}

/* ---- 3. SmolLM2 ---- */

static void smollm(void)
{
    const char *home = getenv("HOME");
    const char *cache = getenv("BT_CACHE");
    char path[1024];
    if (cache) snprintf(path, sizeof(path), "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else snprintf(path, sizeof(path), "%s/.cache/bangtrace/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                  home ? home : "");
    FILE *f = fopen(path, "rb");
    if (!f) { printf("SKIP smollm part: %s not found\n", path); return; }
    fclose(f);
    bt_model *m; bt_tokenizer *t;
    if (load_tok(path, NULL, &m, &t)) { failures++; bt_tokenizer_free(t); bt_model_free(m); return; }
    CHECK(!strcmp(m->vocab.pre, "smollm"), "SmolLM2 pre is '%s'", m->vocab.pre);
    static const char *const texts[] = {
        "Hello world", " leading and trailing  ", "Numbers 1234567 and 3.14159!",
        "Unicode: caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\n\n\tcode() { return x->y; }",
        "<|im_start|>user\nHi<|im_end|>\n", "bad utf8 is replaced? no: \xE2\x82 ok",
    };
    for (size_t k = 0; k < BT_ARRAY_SIZE(texts); k++) {
        const char *s = texts[k];
        int32_t *ids; size_t n; char *dec; size_t dl;
        if (bt_tokenize(t, s, strlen(s), false, false, &ids, &n) != BT_OK) {
            CHECK(0, "smollm tokenize: %s", bt_errmsg());
            continue;
        }
        CHECK(bt_detokenize(t, ids, n, &dec, &dl) == BT_OK, "%s", bt_errmsg());
        bool valid_utf8 = k != 5;        /* invalid bytes become U+FFFD, as in llama.cpp */
        if (valid_utf8)
            CHECK(dl == strlen(s) && !memcmp(dec, s, dl), "smollm round trip of text %zu gives '%s'", k, dec);
        else
            CHECK(strstr(dec, "\xEF\xBF\xBD") != NULL, "smollm: invalid UTF-8 became U+FFFD");
        free(dec); free(ids);
    }
    const char *chat = "<|im_start|>user\nHi<|im_end|>\n";
    int32_t im_start = bt_tokenizer_find(t, "<|im_start|>", 12);
    int32_t im_end = bt_tokenizer_find(t, "<|im_end|>", 10);
    CHECK(im_start >= 0 && im_end >= 0, "smollm has <|im_start|> and <|im_end|>");
    int32_t *ids; size_t n;
    CHECK(bt_tokenize(t, chat, strlen(chat), false, true, &ids, &n) == BT_OK, "%s", bt_errmsg());
    bool has_end = false;
    for (size_t i = 0; i < n; i++) has_end |= ids[i] == im_end;
    CHECK(n >= 4 && ids[0] == im_start && has_end, "parse_special gives the special ids");
    CHECK(bt_tokenizer_is_eog(t, im_end) && bt_tokenizer_is_control(t, im_start) &&
          !bt_tokenizer_is_eog(t, im_start), "<|im_end|> ends generation, <|im_start|> is control");
    size_t pl;
    const char *piece = bt_token_piece(t, im_end, &pl);
    CHECK(pl == 10 && !memcmp(piece, "<|im_end|>", 10), "control piece is its text");
    free(ids);
    CHECK(bt_tokenize(t, chat, strlen(chat), false, false, &ids, &n) == BT_OK, "%s", bt_errmsg());
    bool leaked = false;
    for (size_t i = 0; i < n; i++) leaked |= ids[i] == im_start || ids[i] == im_end;
    CHECK(!leaked, "without parse_special, special text is plain text");
    free(ids);

    /* speed: a hash-table tokenizer does ~1 MB of prose in well under a second */
    size_t big = 1 << 20;
    char *txt = malloc(big + 1);
    const char *lorem = "The quick brown fox, 1234 times; jumps over the lazy dog!\n";
    for (size_t i = 0; i < big; i++) txt[i] = lorem[i % strlen(lorem)];
    double t0 = bt_now();
    CHECK(bt_tokenize(t, txt, big, false, false, &ids, &n) == BT_OK, "%s", bt_errmsg());
    double dt = bt_now() - t0;
    printf("smollm: 1 MiB tokenized into %zu ids in %.3f s\n", n, dt);
    CHECK(dt < 5.0, "tokenizing 1 MiB took %.1f s", dt);
    free(ids); free(txt);
    bt_tokenizer_free(t); bt_model_free(m);
}

/* ---- 4. pre-tokenizer sets we have no vocab file for ---- */

/* Split text with the set for `pre` and compare with words joined by '|'. */
static void split_case(const char *pre, const char *text, const char *want)
{
    bt_pretok *p;
    if (bt_pretok_new(pre, &p)) { CHECK(0, "pretok %s: %s", pre, bt_errmsg()); return; }
    size_t *lens, n;
    char got[512] = "";
    if (bt_pretok_split(p, text, strlen(text), &lens, &n)) { CHECK(0, "split: %s", bt_errmsg()); }
    else {
        size_t off = 0, k = 0;
        for (size_t i = 0; i < n && k + lens[i] + 2 < sizeof(got); i++) {
            if (i) got[k++] = '|';
            memcpy(got + k, text + off, lens[i]);
            k += lens[i]; off += lens[i];
        }
        got[k] = 0;
        CHECK(!strcmp(got, want), "pre %s splits '%s' as '%s', expected '%s'", pre, text, got, want);
        free(lens);
    }
    bt_pretok_free(p);
}

static void pretok_sets(void)
{
    split_case("llama-bpe", "I'VE 12345 apples\n\n  ok", "I|'VE| |123|45| apples|\n\n| | ok");
    split_case("qwen2", "x 12345!!\n", "x| |1|2|3|4|5|!!\n");
    split_case("smollm", "ab 2024 c", "ab| |2|0|2|4| c");
    split_case("gpt-2", "Hello  world's 42", "Hello| | world|'s| 42");
    split_case("deepseek-llm", "Hi there, 42  ", "Hi| there|,| |42|  ");
    split_case("default", "a1234b", "a|123|4|b");
    split_case("", "x=y", "x|=|y");
    bt_pretok *p = NULL;
    CHECK(bt_pretok_new("chatglm-bpe", &p) == BT_EUNSUPPORTED && strstr(bt_errmsg(), "chatglm-bpe"),
          "an unlisted set is refused");
}

/* tokenizer.json Split behaviors: the expected words are what the tokenizers
 * package's Split(pattern="-", behavior=..., invert=...) gives for
 * "the-final--countdown" (checked with tokenizers 0.23.3). */
static void split_behaviors(void)
{
    static const struct { int behavior; bool invert; const char *want; } cases[] = {
        { BT_SPLIT_ISOLATED, false, "the|-|final|-|-|countdown" },
        { BT_SPLIT_ISOLATED, true, "the|-|final|-|-|countdown" },
        { BT_SPLIT_REMOVED, false, "the|final|countdown" },
        { BT_SPLIT_REMOVED, true, "-|-|-" },
        { BT_SPLIT_MERGED_PREV, false, "the-|final-|-|countdown" },
        { BT_SPLIT_MERGED_PREV, true, "the|-final|-|-countdown" },
        { BT_SPLIT_MERGED_NEXT, false, "the|-final|-|-countdown" },
        { BT_SPLIT_MERGED_NEXT, true, "the-|final-|-|countdown" },
        { BT_SPLIT_CONTIGUOUS, false, "the|-|final|--|countdown" },
        { BT_SPLIT_CONTIGUOUS, true, "the|-|final|--|countdown" },
    };
    const char *text = "the-final--countdown";
    for (size_t c = 0; c < BT_ARRAY_SIZE(cases); c++) {
        bt_pretok_pat pat = { "-", cases[c].behavior, cases[c].invert };
        bt_pretok *p = NULL;
        if (bt_pretok_new_custom(&pat, 1, false, &p)) { CHECK(0, "custom pretok: %s", bt_errmsg()); continue; }
        size_t *w = NULL, n = 0;
        char got[128] = "";
        if (bt_pretok_words(p, text, strlen(text), &w, &n) == BT_OK) {
            size_t k = 0;
            for (size_t i = 0; i < n && k + w[2 * i + 1] + 2 < sizeof got; i++) {
                if (i) got[k++] = '|';
                memcpy(got + k, text + w[2 * i], w[2 * i + 1]);
                k += w[2 * i + 1];
            }
            got[k] = 0;
        }
        CHECK(!strcmp(got, cases[c].want), "behavior %d invert %d: '%s', expected '%s'", cases[c].behavior,
              cases[c].invert, got, cases[c].want);
        free(w);
        bt_pretok_free(p);
    }
    /* a chain: Digits(individual) then GPT-2's ByteLevel regex = the smollm set */
    bt_pretok_pat chain[2] = { { "\\p{N}", BT_SPLIT_ISOLATED, false },
        { "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", BT_SPLIT_ISOLATED, false } };
    bt_pretok *p = NULL, *q = NULL;
    const char *t2 = "ab 2024 c's  x\n";
    size_t *a = NULL, *b = NULL, na = 0, nb = 0;
    if (!bt_pretok_new_custom(chain, 2, false, &p) && !bt_pretok_new("smollm", &q) &&
        !bt_pretok_split(p, t2, strlen(t2), &a, &na) && !bt_pretok_split(q, t2, strlen(t2), &b, &nb))
        CHECK(na == nb && !memcmp(a, b, na * sizeof(*a)), "custom chain splits like the smollm set (%zu vs %zu words)", na, nb);
    else
        CHECK(0, "custom chain: %s", bt_errmsg());
    free(a); free(b);
    bt_pretok_free(p); bt_pretok_free(q);
    bt_pretok_pat bad = { "(unclosed", BT_SPLIT_ISOLATED, false };
    p = NULL;
    CHECK(bt_pretok_new_custom(&bad, 1, false, &p) == BT_EUNSUPPORTED && !p && strstr(bt_errmsg(), "(unclosed"),
          "a bad regex is refused naming it");
}

/* ---- 5. hand-built vocabularies ---- */

static void handmade(void)
{
    /* BPE with a pre-tokenizer nobody knows */
    const char *text[] = { "a", "b", "ab" };
    uint32_t len[] = { 1, 1, 2 };
    const char *merges[] = { "a b" };
    uint32_t mlen[] = { 3 };
    bt_vocab v = { .kind = BT_VOCAB_BPE, .n_tokens = 3, .text = text, .len = len,
                   .n_merges = 1, .merges = merges, .merge_len = mlen,
                   .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1 };
    snprintf(v.pre, sizeof(v.pre), "%s", "no-such-pretok");
    bt_tokenizer *t = NULL;
    int rc = bt_tokenizer_new(&v, &t);
    CHECK(rc == BT_EUNSUPPORTED && strstr(bt_errmsg(), "no-such-pretok"),
          "unknown pre gives BT_EUNSUPPORTED naming it (rc %d, '%s')", rc, bt_errmsg());
    CHECK(t == NULL, "no tokenizer on error");

    /* the same vocabulary with pre "" (default) works and merges */
    v.pre[0] = 0;
    CHECK(bt_tokenizer_new(&v, &t) == BT_OK, "%s", bt_errmsg());
    if (t) {
        int32_t *ids; size_t n;
        CHECK(bt_tokenize(t, "abab", 4, false, false, &ids, &n) == BT_OK && n == 2 && ids[0] == 2 &&
              ids[1] == 2, "default BPE merges 'a b'");
        free(ids);
        bt_tokenizer_free(t);
    }

    /* a merge without a separator is a format error */
    const char *badm[] = { "ab" };
    uint32_t badl[] = { 2 };
    v.merges = badm; v.merge_len = badl;
    CHECK(bt_tokenizer_new(&v, &t) == BT_EFORMAT && strstr(bt_errmsg(), "merges[0]"),
          "merge without space: '%s'", bt_errmsg());

    /* SPM without byte tokens: unknown characters become <unk> */
    const char *st[] = { "<unk>", "<s>", "</s>", "\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi" };
    uint32_t sl[] = { 5, 3, 4, 3, 1, 1, 4, 5 };
    float sc[] = { 0, 0, 0, -1, -2, -2, -3, -1 };
    int32_t ty[] = { BT_TOK_UNKNOWN, BT_TOK_CONTROL, BT_TOK_CONTROL, 1, 1, 1, 1, 1 };
    bt_vocab s = { .kind = BT_VOCAB_SPM, .n_tokens = 8, .text = st, .len = sl, .scores = sc, .type = ty,
                   .bos = 1, .eos = 2, .unk = 0, .pad = -1, .eot = -1,
                   .add_bos = true, .add_space_prefix = true };
    CHECK(bt_tokenizer_new(&s, &t) == BT_OK, "%s", bt_errmsg());
    if (t) {
        int32_t *ids; size_t n;
        CHECK(bt_tokenize(t, "hi\xC3\xA9", 4, true, false, &ids, &n) == BT_OK, "%s", bt_errmsg());
        static const int32_t want[] = { 1, 7, 0, 0 };
        CHECK(n == 4 && !memcmp(ids, want, sizeof(want)), "SPM unk fallback: got %zu ids", n);
        char *d; size_t dl;
        CHECK(bt_detokenize(t, ids, 2, &d, &dl) == BT_OK && dl == 2 && !memcmp(d, "hi", 2),
              "SPM decode drops BOS and the prefix space");
        free(d); free(ids);
        /* parse_special: "</s>" maps to EOS and the next run gets a space prefix */
        CHECK(bt_tokenize(t, "hi</s>hi", 8, false, true, &ids, &n) == BT_OK && n == 3 &&
              ids[0] == 7 && ids[1] == 2 && ids[2] == 7, "SPM parse_special");
        free(ids);
        int32_t bad = 99;
        CHECK(bt_detokenize(t, &bad, 1, &d, &dl) == BT_ERANGE, "out-of-range id is an error");
        bt_tokenizer_free(t);
    }
}

int main(void)
{
    const char *shared = getenv("BT_SHARED");
    char dir[1024];
    if (!shared) shared = "../shared";
    snprintf(dir, sizeof(dir), "%s/models/gguf-vocab", shared);
    char probe[1100];
    snprintf(probe, sizeof(probe), "%s/ggml-vocab-llama-spm.gguf", dir);
    FILE *f = fopen(probe, "rb");
    handmade();
    pretok_sets();
    split_behaviors();
    if (!f) {
        printf("SKIP: test data not found at %s (set BT_SHARED)\n", dir);
        return failures ? 1 : 77;
    }
    fclose(f);
    static const char *const vocabs[] = { "llama-spm", "gpt-2", "falcon", "deepseek-coder" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(vocabs); i++) vectors(dir, vocabs[i]);
    llama2c(shared);
    smollm();
    if (failures) { printf("%d failure(s)\n", failures); return 1; }
    printf("all tokenizer checks passed\n");
    return 0;
}
