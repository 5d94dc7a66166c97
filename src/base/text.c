/* text.c - the one escaper for untrusted text (see text.h for why).
 *
 * Invariant: bt_text_escape only ever emits printable ASCII, valid printable
 * UTF-8 (with BT_TEXT_UTF8), and '\n'/'\t' only with BT_TEXT_KEEPNL. Every
 * other byte comes out as a backslash escape. */
#include "text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Decode one UTF-8 sequence at s (n bytes left). Returns its length and the
 * code point, or 0 when the bytes are not valid UTF-8 (overlong, surrogate,
 * truncated, > U+10FFFF). */
static int utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    int len;
    unsigned v, min;
    if (c < 0x80) { *cp = c; return 1; }
    if ((c & 0xe0) == 0xc0) { len = 2; v = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; v = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

/* Code points that change how the terminal lays out text without being
 * visible themselves: C1 controls (U+009B is CSI), bidi embeddings/overrides/
 * isolates, zero-width joiners and marks, BOM, line/paragraph separators. */
static bool cp_unsafe(unsigned cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0xad ||
           (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb);
}

/* Columns of a printable code point: 0 for combining marks, 2 for wide East
 * Asian ranges and emoji, else 1. (A table, not wcwidth(): the answer must
 * not depend on the locale the tests run under.) */
static int cp_width(unsigned cp)
{
    if ((cp >= 0x300 && cp <= 0x36f) || (cp >= 0x1ab0 && cp <= 0x1aff) ||
        (cp >= 0x1dc0 && cp <= 0x1dff) || (cp >= 0x20d0 && cp <= 0x20ff) ||
        (cp >= 0xfe20 && cp <= 0xfe2f) || (cp >= 0xfe00 && cp <= 0xfe0f))
        return 0;
    if ((cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) ||
        (cp >= 0x3041 && cp <= 0x33ff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
        (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0xa000 && cp <= 0xa4cf) ||
        (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
        (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
        (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
        (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd))
        return 2;
    return 1;
}

/* The escaped form of the character at s[0..n): its bytes into tmp (at
 * least 8 bytes), its columns into *cols; returns the bytes of s used. */
static int escape_one(const unsigned char *s, size_t n, unsigned flags, char *tmp, int *tlen, int *cols)
{
    unsigned cp;
    int used = (flags & BT_TEXT_UTF8) ? utf8_decode(s, n, &cp) : (s[0] < 0x80 ? (cp = s[0], 1) : 0);
    if (used == 0) {                        /* invalid UTF-8, or a high byte in ASCII mode */
        *tlen = *cols = snprintf(tmp, 8, "\\x%02x", s[0]);
        return 1;
    }
    if ((cp == '\n' || cp == '\t') && (flags & BT_TEXT_KEEPNL)) {
        tmp[0] = (char)cp; *tlen = 1; *cols = cp == '\t' ? 1 : 0;
    } else if (cp == '\\' && !(flags & BT_TEXT_RAWBS)) {
        memcpy(tmp, "\\\\", 2); *tlen = *cols = 2;
    } else if ((cp == '\'' && (flags & BT_TEXT_SQUOTE)) || (cp == '"' && (flags & BT_TEXT_DQUOTE))) {
        tmp[0] = '\\'; tmp[1] = (char)cp; *tlen = *cols = 2;
    } else if (cp == '\n' || cp == '\r' || cp == '\t') {
        tmp[0] = '\\'; tmp[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
        *tlen = *cols = 2;
    } else if (cp < 0x20 || cp == 0x7f) {
        *tlen = *cols = snprintf(tmp, 8, "\\x%02x", cp);
    } else if (cp == ' ' && (flags & BT_TEXT_SHOWSPACE)) {
        if (flags & BT_TEXT_UTF8) { memcpy(tmp, "\xc2\xb7", 2); *tlen = 2; }
        else { tmp[0] = '_'; *tlen = 1; }
        *cols = 1;
    } else if (cp >= 0x80 && cp_unsafe(cp)) {
        *tlen = *cols = snprintf(tmp, 8, "\\u%04x", cp);
    } else {
        memcpy(tmp, s, (size_t)used);
        *tlen = used;
        *cols = cp < 0x80 ? 1 : cp_width(cp);
    }
    return used;
}

/* Escape into dst; *done says whether all of src fit. */
static int escape(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags, bool *done)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0, i = 0;
    int cols = 0;
    if (!s) len = 0;
    while (i < len) {
        char tmp[8];
        int tlen, tcols;
        int n = escape_one(s + i, len - i, flags, tmp, &tlen, &tcols);
        if (o + (size_t)tlen + 1 > cap) break;
        if (max_cols > 0 && cols + tcols > max_cols) break;
        memcpy(dst + o, tmp, (size_t)tlen);
        o += (size_t)tlen;
        cols += tcols;
        i += (size_t)n;
    }
    dst[o] = 0;
    *done = i >= len;
    return cols;
}

int bt_text_escape(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags)
{
    bool done;
    if (!cap) return 0;
    int cols = escape(src, len, dst, cap, max_cols, flags, &done);
    if (done || !(flags & BT_TEXT_ELLIPSIS) || cap < 4 || (max_cols > 0 && max_cols < 3)) return cols;
    cols = escape(src, len, dst, cap - 3, max_cols > 0 ? max_cols - 3 : 0, flags, &done);
    strcat(dst, "...");
    return cols + 3;
}

static _Thread_local char esc_buf[1024];

const char *bt_text_esc(const char *s)
{
    bt_text_escape(s, s ? strlen(s) : 0, esc_buf, sizeof esc_buf, 0, BT_TEXT_UTF8 | BT_TEXT_ELLIPSIS);
    return esc_buf;
}

char *bt_text_escape_dup(const char *src, size_t len, unsigned flags)
{
    if (!src) len = 0;
    /* at most 6 output bytes per input byte (\u202e from 3 bytes, \x9b from 1) */
    size_t cap = len * 6 + 1;
    char *out = malloc(cap);
    if (out) bt_text_escape(src, len, out, cap, 0, flags & ~(unsigned)BT_TEXT_ELLIPSIS);
    return out;
}

int bt_text_fput(const char *src, size_t len, unsigned flags, FILE *f)
{
    const unsigned char *s = (const unsigned char *)src;
    char out[4096];
    size_t o = 0;
    if (!s) return 0;
    for (size_t i = 0; i < len;) {
        int tlen, tcols;
        i += (size_t)escape_one(s + i, len - i, flags, out + o, &tlen, &tcols);
        o += (size_t)tlen;
        if (o + 8 > sizeof out) {
            if (fwrite(out, 1, o, f) != o) return EOF;
            o = 0;
        }
    }
    if (o && fwrite(out, 1, o, f) != o) return EOF;
    return 0;
}

int bt_text_printf(FILE *f, const char *fmt, ...)
{
    char small[1024], *buf = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return EOF;
    if ((size_t)n >= sizeof small) {
        if (!(buf = malloc((size_t)n + 1))) return EOF;
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    int rc = bt_text_fput(buf, (size_t)n, BT_TEXT_UTF8 | BT_TEXT_KEEPNL | BT_TEXT_RAWBS, f);
    if (buf != small) free(buf);
    return rc;
}

int bt_text_fput_output(const char *src, size_t len, FILE *f)
{
    if (!isatty(fileno(f))) return fwrite(src, 1, len, f) == len ? 0 : EOF;
    return bt_text_fput(src, len, BT_TEXT_UTF8 | BT_TEXT_KEEPNL | BT_TEXT_RAWBS, f);
}

int bt_text_width(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str);
    int cols = 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        int n = utf8_decode(s + i, len - i, &cp);
        if (!n) { cols++; i++; continue; }
        cols += cp < 0x80 ? 1 : cp_width(cp);
        i += (size_t)n;
    }
    return cols;
}

int bt_text_fit(const char *str, char *dst, size_t cap, int max_cols)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str), o = 0;
    int cols = 0;
    if (!cap) return 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        int n = utf8_decode(s + i, len - i, &cp), w;
        if (!n) { n = 1; w = 1; }
        else w = cp < 0x80 ? 1 : cp_width(cp);
        if (cols + w > max_cols || o + (size_t)n + 1 > cap) break;
        memcpy(dst + o, s + i, (size_t)n);
        o += (size_t)n; cols += w; i += (size_t)n;
    }
    dst[o] = 0;
    return cols;
}

size_t bt_text_utf8_complete(const char *src, size_t len)
{
    const unsigned char *s = (const unsigned char *)src;
    /* Look back over at most 3 continuation bytes for a lead byte whose
     * sequence runs past the end. */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        unsigned c = s[len - back];
        if ((c & 0xc0) == 0x80) continue;
        int need = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
        return (size_t)need > back ? len - back : len;
    }
    return len;
}

/* The length of the valid UTF-8 sequence at s (of at most n bytes), 0 if
 * the byte there does not start one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || k > n) return k == 1 ? 1 : 0;
    for (size_t i = 1; i < k; i++) if ((s[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))) return 0;   /* overlong, surrogate */
    if (k == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))) return 0;   /* overlong, past U+10FFFF */
    return k;
}

char *bt_text_utf8_repair(const char *s, size_t len, size_t *out_len)
{
    char *o = malloc(len * 3 + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq((const unsigned char *)s + i, len - i);
        if (k) { memcpy(o + j, s + i, k); j += k; i += k; }
        else { memcpy(o + j, "\xEF\xBF\xBD", 3); j += 3; i++; }
    }
    o[j] = 0;
    if (out_len) *out_len = j;
    return o;
}
