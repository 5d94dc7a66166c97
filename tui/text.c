/* text.c - making untrusted token text safe to show, and small formatters.
 *
 * Token pieces come from a model that may be producing garbage: they can hold
 * ESC sequences, BEL, CR, C1 controls, bidi overrides or broken UTF-8. Any of
 * those written raw would let the model drive the terminal (recolour it, move
 * the cursor, reorder text). Everything goes through tui_sanitize first, which
 * only ever emits printable characters and visible escapes. */
#include "tui.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

char tui_health_marker(int health)
{
    switch (health) {
    case TUI_H_BAD: return '!';
    case TUI_H_WARN: return '~';
    case TUI_H_CLEAN: return '.';
    default: return ' ';
    }
}

const char *tui_health_name(int health)
{
    switch (health) {
    case TUI_H_BAD: return "nonfinite";
    case TUI_H_WARN: return "degenerate";
    case TUI_H_CLEAN: return "clean";
    default: return "none";
    }
}

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
 * visible themselves: C1 controls, bidi embeddings/overrides/isolates,
 * zero-width joiners and marks, BOM, line/paragraph separators. */
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

int tui_sanitize(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    int cols = 0;
    if (!cap) return 0;
    if (!s) len = 0;
    for (size_t i = 0; i < len;) {
        char tmp[16];
        int tlen, tcols;
        unsigned cp;
        int n = (flags & TUI_SAN_UTF8) ? utf8_decode(s + i, len - i, &cp) : (s[i] < 0x80 ? (cp = s[i], 1) : 0);
        if (n == 0) {                       /* invalid or (non-UTF-8 mode) high byte */
            tlen = snprintf(tmp, sizeof tmp, "\\x%02x", s[i]);
            tcols = tlen;
            n = 1;
        } else if (cp == '\\') {
            memcpy(tmp, "\\\\", 2); tlen = tcols = 2;
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            tmp[0] = '\\'; tmp[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
            tlen = tcols = 2;
        } else if (cp < 0x20 || cp == 0x7f) {
            tlen = tcols = snprintf(tmp, sizeof tmp, "\\x%02x", cp);
        } else if (cp == ' ' && (flags & TUI_SAN_SHOWSPACE)) {
            if (flags & TUI_SAN_UTF8) { memcpy(tmp, "\xc2\xb7", 2); tlen = 2; }
            else { tmp[0] = '_'; tlen = 1; }
            tcols = 1;
        } else if (cp >= 0x80 && cp_unsafe(cp)) {
            tlen = tcols = snprintf(tmp, sizeof tmp, "\\u%04x", cp);
        } else {
            memcpy(tmp, s + i, n);
            tlen = n;
            tcols = cp < 0x80 ? 1 : cp_width(cp);
        }
        if (o + tlen + 1 > cap) break;
        if (max_cols > 0 && cols + tcols > max_cols) break;
        memcpy(dst + o, tmp, tlen);
        o += tlen;
        cols += tcols;
        i += n;
    }
    dst[o] = 0;
    return cols;
}

int tui_text_width(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str);
    int cols = 0;
    for (size_t i = 0; i < len;) {
        unsigned cp;
        int n = utf8_decode(s + i, len - i, &cp);
        if (!n) { cols++; i++; continue; }
        cols += cp < 0x80 ? 1 : cp_width(cp);
        i += n;
    }
    return cols;
}

int tui_text_fit(const char *str, char *dst, size_t cap, int max_cols)
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
        if (cols + w > max_cols || o + n + 1 > cap) break;
        memcpy(dst + o, s + i, n);
        o += n; cols += w; i += n;
    }
    dst[o] = 0;
    return cols;
}

void tui_fmt_bad_counts(char *buf, size_t cap, int64_t nan, int64_t pinf, int64_t ninf)
{
    size_t o = 0;
    buf[0] = 0;
    const struct { int64_t v; const char *name; } parts[] = { { nan, "NaN" }, { pinf, "+Inf" }, { ninf, "-Inf" } };
    for (int i = 0; i < 3; i++) {
        if (!parts[i].v) continue;
        int w = snprintf(buf + o, o < cap ? cap - o : 0, "%s%lld %s", o ? ", " : "", (long long)parts[i].v, parts[i].name);
        if (w > 0) o += w;
        if (o >= cap) { buf[cap - 1] = 0; return; }
    }
    if (!o) snprintf(buf, cap, "0 non-finite");
}
