/* sanitize.c - making untrusted token text safe to show, and small formatters.
 *
 * Token pieces come from a model that may be producing garbage: they can hold
 * ESC sequences, BEL, CR, C1 controls, bidi overrides or broken UTF-8. Any of
 * those written raw would let the model drive the terminal (recolour it, move
 * the cursor, reorder text). Everything goes through tui_sanitize first, which
 * only ever emits printable characters and visible escapes (src/base/text.c). */
#include "tui.h"
#include "base/text.h"

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

/* The escaping itself is src/base/text.c's, shared with every command-line
 * printer; the TUI flags are the same bits. */
_Static_assert((int)TUI_SAN_UTF8 == (int)BT_TEXT_UTF8 && (int)TUI_SAN_SHOWSPACE == (int)BT_TEXT_SHOWSPACE, "TUI flags are text.h's");

int tui_sanitize(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags)
{
    return bt_text_escape(src, len, dst, cap, max_cols, flags & (BT_TEXT_UTF8 | BT_TEXT_SHOWSPACE));
}

int tui_text_width(const char *str) { return bt_text_width(str); }

int tui_text_fit(const char *str, char *dst, size_t cap, int max_cols) { return bt_text_fit(str, dst, cap, max_cols); }

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
