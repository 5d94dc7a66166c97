/* keys.c - the key table: key codes to actions. Views never look at raw
 * keys; they answer actions (and return reaction flags), so a binding is
 * changed here once, and the help overlay (tui_key_help) is generated from
 * this table, the view registry and the engine's op labels. */
#define NCURSES_WIDECHAR 1
#include <curses.h>

#include "tui.h"
#include "engine/engine.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

static const struct { int key; int action; } key_table[] = {
    { KEY_UP, TUI_A_UP }, { 'k', TUI_A_UP },
    { KEY_DOWN, TUI_A_DOWN }, { 'j', TUI_A_DOWN },
    { KEY_LEFT, TUI_A_LEFT }, { 'h', TUI_A_LEFT },
    { KEY_RIGHT, TUI_A_RIGHT }, { 'l', TUI_A_RIGHT },
    { KEY_PPAGE, TUI_A_PGUP }, { 'b' & 0x1f, TUI_A_PGUP },
    { KEY_NPAGE, TUI_A_PGDN }, { 'f' & 0x1f, TUI_A_PGDN }, { ' ', TUI_A_PGDN },
    { 'g', TUI_A_FIRST }, { KEY_HOME, TUI_A_FIRST },
    { 'G', TUI_A_LAST }, { KEY_END, TUI_A_LAST },
    { '/', TUI_A_SEARCH },
    { '\n', TUI_A_ENTER }, { '\r', TUI_A_ENTER }, { KEY_ENTER, TUI_A_ENTER },
    { 27, TUI_A_BACK }, { KEY_BACKSPACE, TUI_A_BACK }, { 127, TUI_A_BACK }, { 8, TUI_A_BACK },
    { 'q', TUI_A_QUIT }, { 'Q', TUI_A_QUIT },
    { '?', TUI_A_HELP }, { KEY_F(1), TUI_A_HELP },
    { '\t', TUI_A_NEXT_VIEW }, { KEY_BTAB, TUI_A_PREV_VIEW },
    { 'w', TUI_A_WALK }, { 'H', TUI_A_HEADROOM },
    { 'n', TUI_A_NEXT }, { 'p', TUI_A_PREV }, { 'N', TUI_A_PREV },
    { KEY_RESIZE, TUI_A_RESIZE },
};

int tui_key_action(int key, int *arg)
{
    for (int i = 0; i < tui_n_views; i++)
        if (key == tui_views[i].key) { if (arg) *arg = i; return TUI_A_VIEW; }
    for (size_t i = 0; i < BT_ARRAY_SIZE(key_table); i++)
        if (key_table[i].key == key) return key_table[i].action;
    return TUI_A_NONE;
}

const char *tui_action_name(int action)
{
    static const char *const names[TUI_A_COUNT] = {
        [TUI_A_NONE] = "none", [TUI_A_UP] = "up", [TUI_A_DOWN] = "down", [TUI_A_LEFT] = "left",
        [TUI_A_RIGHT] = "right", [TUI_A_PGUP] = "page-up", [TUI_A_PGDN] = "page-down",
        [TUI_A_FIRST] = "first", [TUI_A_LAST] = "last", [TUI_A_SEARCH] = "search",
        [TUI_A_ENTER] = "enter", [TUI_A_BACK] = "back", [TUI_A_QUIT] = "quit", [TUI_A_HELP] = "help",
        [TUI_A_NEXT_VIEW] = "next-view", [TUI_A_PREV_VIEW] = "prev-view", [TUI_A_VIEW] = "view",
        [TUI_A_WALK] = "walk-back", [TUI_A_NEXT] = "next", [TUI_A_PREV] = "prev", [TUI_A_HEADROOM] = "headroom", [TUI_A_RESIZE] = "resize",
    };
    return action >= 0 && action < TUI_A_COUNT && names[action] ? names[action] : "?";
}

/* How a key is written in the help; NULL for keys that only duplicate
 * another spelling (CR beside LF, DEL and C-h beside Backspace, resize). */
static const char *help_key_name(int key, char *buf, size_t cap)
{
    switch (key) {
    case KEY_UP: return "Up";
    case KEY_DOWN: return "Down";
    case KEY_LEFT: return "Left";
    case KEY_RIGHT: return "Right";
    case KEY_PPAGE: return "PgUp";
    case KEY_NPAGE: return "PgDn";
    case KEY_HOME: return "Home";
    case KEY_END: return "End";
    case KEY_BACKSPACE: return "Backspace";
    case KEY_BTAB: return "S-Tab";
    case '\n': return "Enter";
    case '\t': return "Tab";
    case ' ': return "Space";
    case 27: return "Esc";
    case '\r': case 127: case 8: case KEY_ENTER: case KEY_RESIZE: return NULL;
    }
    if (key == KEY_F(1)) return "F1";
    if (key >= 1 && key < 0x20) { snprintf(buf, cap, "C-%c", key + 'a' - 1); return buf; }
    if (key > 0x20 && key < 0x7f) { snprintf(buf, cap, "%c", key); return buf; }
    return NULL;
}

/* What each group of actions does, in help order. */
static const struct { int actions[4]; const char *what; } help_groups[] = {
    { { TUI_A_NEXT_VIEW, TUI_A_PREV_VIEW, -1 }, "next / previous view" },
    { { TUI_A_VIEW, -1 }, NULL },                   /* from the view registry */
    { { TUI_A_WALK, -1 }, "walk back to the first non-finite (step, layer, op)" },
    { { TUI_A_HEADROOM, -1 }, "grid colours: health <-> f16 headroom (see below)" },
    { { TUI_A_NEXT, TUI_A_PREV, -1 }, "next / previous link, search match, rejected draft" },
    { { TUI_A_UP, TUI_A_DOWN, TUI_A_LEFT, TUI_A_RIGHT }, "move the cursor; Left/Right scroll a long field (Run)" },
    { { TUI_A_PGUP, TUI_A_PGDN, -1 }, "page up / down" },
    { { TUI_A_FIRST, TUI_A_LAST, -1 }, "first / last" },
    { { TUI_A_SEARCH, -1 }, "search token text" },
    { { TUI_A_ENTER, -1 }, "drill in: a token, link, event or verify step -> its step" },
    { { TUI_A_BACK, -1 }, "back to the previous view (or close this help)" },
    { { TUI_A_HELP, -1 }, "this help" },
    { { TUI_A_QUIT, -1 }, "quit" },
};

#define HELP_KEYS_W 24      /* key column; longer key lists put the text below */
#define HELP_MAX_W 76       /* a line of the help box on an 80-column screen */

const char *const *tui_key_help(void)
{
    static char text[4096];
    static const char *lines[96];
    if (lines[0]) return lines;
    size_t o = 0;
    int n = 0;
#define LINE(...) do { if (n < (int)BT_ARRAY_SIZE(lines) - 1 && o < sizeof text) { \
        lines[n++] = text + o; \
        int w_ = snprintf(text + o, sizeof text - o, __VA_ARGS__); \
        o += w_ > 0 ? (size_t)w_ + 1 : 1; if (o > sizeof text) o = sizeof text; } } while (0)
    for (size_t g = 0; g < BT_ARRAY_SIZE(help_groups); g++) {
        char keys[128] = "", kb[8];
        size_t ko = 0;
        if (help_groups[g].actions[0] == TUI_A_VIEW) {
            /* the titles, or the tab bar's short ones when those do not fit
             * beside the keys on an 80-column screen */
            char titles[2][160] = { "", "" };
            size_t to[2] = { 0, 0 };
            for (int v = 0; v < tui_n_views; v++) {
                ko += (size_t)snprintf(keys + ko, ko < sizeof keys ? sizeof keys - ko : 0, "%s%c", v ? " " : "", tui_views[v].key);
                for (int k = 0; k < 2; k++)
                    to[k] += (size_t)snprintf(titles[k] + to[k], to[k] < sizeof titles[k] ? sizeof titles[k] - to[k] : 0, "%s%s",
                                              v ? ", " : "", k ? tui_views[v].short_title : tui_views[v].title);
            }
            LINE("%-*s %s", HELP_KEYS_W, keys, titles[HELP_KEYS_W + 1 + to[0] > HELP_MAX_W]);
            continue;
        }
        for (int k = 0; k < 4 && help_groups[g].actions[k] >= 0; k++)
            for (size_t i = 0; i < BT_ARRAY_SIZE(key_table); i++) {
                if (key_table[i].action != help_groups[g].actions[k]) continue;
                const char *name = help_key_name(key_table[i].key, kb, sizeof kb);
                if (name && ko < sizeof keys)
                    ko += (size_t)snprintf(keys + ko, sizeof keys - ko, "%s%s", ko ? " " : "", name);
            }
        if (ko > HELP_KEYS_W) { LINE("%s", keys); LINE("%-*s %s", HELP_KEYS_W, "", help_groups[g].what); }
        else LINE("%-*s %s", HELP_KEYS_W, keys, help_groups[g].what);
    }
    LINE("%s", "");
    LINE("%s", "Grid columns (Step, Walk-back): one per op; narrow cells show the");
    LINE("%s", "two-letter label (written downwards when a cell is one column wide):");
    /* every op, the hybrid models' own (gated delta net, gated attention)
     * and then deepseek2's and gpt-oss's after the others, so the common ones
     * fit a small terminal first */
    static const char *const family_of[] = { NULL, "  and in hybrid models (qwen35, qwen3next):",
                                             "  and in deepseek2 (latent attention) and gpt-oss (sinks):" };
    for (int pass = 0; pass < 3; pass++) {
        if (pass) LINE("%s", family_of[pass]);
        char row[96];
        size_t ro = 0;
        int col = 0, per = pass == 2 ? 3 : 4, w = pass == 2 ? 22 : 17;
        for (int op = 0; op < BT_OP_COUNT; op++) {
            const char *name = bt_op_name(op);
            int fam = !strncmp(name, "ssm_", 4) || !strncmp(name, "mtp_", 4) || !strcmp(name, "attn_gate") ||
                      !strcmp(name, "attn_gated") ? 1
                    : !strcmp(name, "attn_q_a") || !strcmp(name, "attn_q_a_norm") || !strcmp(name, "attn_kv_a") ||
                      !strcmp(name, "attn_kv_latent") || !strcmp(name, "attn_q_abs") || !strcmp(name, "attn_ctx_latent") ||
                      !strcmp(name, "attn_sink") ? 2 : 0;
            if (fam != pass) continue;
            char item[40];
            snprintf(item, sizeof item, "%s %s", bt_op_label(op), name);
            ro += (size_t)snprintf(row + ro, sizeof row - ro, "%-*s", w, item);
            if (++col % per == 0) { LINE("  %s", row); ro = 0; }
        }
        if (ro) LINE("  %s", row);
    }
    LINE("%s", "");
    LINE("%s", "Colours: red = non-finite, yellow = degenerate output or |x| far");
    LINE("%s", "above the tensor's median over the trace, green = clean. Without");
    LINE("%s", "colour (NO_COLOR) the markers are  !  ~  .");
    LINE("%s", "Headroom colours (H): red = absmax past the f16 maximum 65504,");
    LINE("%s", "+-Inf or NaN (non-finite), yellow = past half of it (under 2x");
    LINE("%s", "headroom), green = below.");
#undef LINE
    lines[n] = NULL;
    return lines;
}
