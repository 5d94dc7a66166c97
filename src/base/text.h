/* text.h - the one escaper for untrusted text: model metadata (general.name,
 * chat templates, tokenizer names, metadata keys and values), token pieces,
 * tensor names, and anything read back from a trace (paths, request text,
 * event details).
 *
 * Such text can hold ESC sequences (OSC 0 sets the terminal title, OSC 52
 * writes the clipboard), BEL, CR, C1 controls (0x9b is CSI), bidi overrides
 * or broken UTF-8. Printed raw, it drives the terminal of whoever reads the
 * output. Every path that prints such text goes through bt_text_escape (the
 * browser through tui_sanitize, a thin wrapper), which only ever emits
 * printable characters and visible escapes (\x1b, \n, \u202e). No curses, no
 * locale: the same bytes give the same output everywhere. */
#ifndef BT_TEXT_H
#define BT_TEXT_H

#include <stddef.h>
#include <stdio.h>

enum {
    BT_TEXT_UTF8 = 1,       /* pass printable UTF-8 through (else escape every byte >= 0x80) */
    BT_TEXT_SHOWSPACE = 2,  /* show ' ' as a middle dot (UTF-8) or '_' */
    BT_TEXT_KEEPNL = 4,     /* '\n' and '\t' pass through (multi-line text: generated output) */
    BT_TEXT_RAWBS = 8,      /* '\\' passes through unescaped: escaping is then idempotent, for
                             * messages that may be escaped again (bt_error, logs) */
    BT_TEXT_SQUOTE = 16,    /* '\'' becomes \' (text shown inside '...') */
    BT_TEXT_DQUOTE = 32,    /* '"' becomes \" (text shown inside "...") */
    BT_TEXT_ELLIPSIS = 64,  /* when src does not fit, end with "..." */
};

/* Typical flags for command-line output of one-line model or trace text. */
#define BT_TEXT_LINE BT_TEXT_UTF8

/* Render src[0..len) (src NULL: empty) so it cannot drive a terminal: C0
 * controls, DEL, ESC, C1 controls, bidi overrides, zero-width and line/
 * paragraph separators and invalid UTF-8 become visible escapes (\x1b, \n,
 * \r, \t, \x9b, \u202e); backslash becomes \\ unless BT_TEXT_RAWBS. Writes at
 * most cap-1 bytes plus NUL (never cutting an escape or a character) and at
 * most max_cols display columns (<= 0: unlimited). Returns the display
 * columns written. */
int bt_text_escape(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags);

/* bt_text_escape of a NUL-terminated string into a static thread-local
 * buffer of 1 KiB (longer text ends in "..."): for one argument of one
 * printf (a second call overwrites the first's text). NULL prints "". */
const char *bt_text_esc(const char *s);

/* bt_text_escape of all of src[0..len) into a malloc'd string (NULL when out
 * of memory; src NULL gives ""). */
char *bt_text_escape_dup(const char *src, size_t len, unsigned flags);

/* Escape src[0..len) with flags and write it to f, however long. Returns 0,
 * or EOF when the write failed. */
int bt_text_fput(const char *src, size_t len, unsigned flags, FILE *f);

/* printf to f whose whole output passes the escaper (UTF-8, newlines and
 * tabs kept, backslashes as they are): for reports and summaries whose
 * arguments quote model or trace text. Returns 0 or EOF. */
int bt_text_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Generated text (run's output, tokenize --decode): the model's exact
 * bytes when f is a pipe or a file, escaped keeping newlines and tabs (and
 * backslashes as they are) when f is a terminal. Returns 0 or EOF. */
int bt_text_fput_output(const char *src, size_t len, FILE *f);

/* Display columns of an already escaped (or plain ASCII/UTF-8) string. */
int bt_text_width(const char *s);
/* Copy at most max_cols columns of an escaped string into dst. */
int bt_text_fit(const char *s, char *dst, size_t cap, int max_cols);

/* Length of the longest prefix of s[0..len) that does not end inside an
 * incomplete UTF-8 sequence (for streaming text piece by piece). */
size_t bt_text_utf8_complete(const char *s, size_t len);

/* A copy of s[0..len) with every byte that is not part of a valid UTF-8
 * sequence replaced by U+FFFD (a model's byte tokens can emit any byte; JSON
 * needs UTF-8), NUL-terminated; *out_len its length. NULL when out of
 * memory. */
char *bt_text_utf8_repair(const char *s, size_t len, size_t *out_len);

#endif
