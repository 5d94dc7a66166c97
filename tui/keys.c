/* keys.c - the key table: key codes to actions. Views never look at raw
 * keys; they answer actions (and return reaction flags), so a binding is
 * changed here once and the help overlay is generated from the same place. */
#define NCURSES_WIDECHAR 1
#include <curses.h>

#include "tui.h"
#include "util.h"

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
    { 'w', TUI_A_WALK },
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
        [TUI_A_WALK] = "walk-back", [TUI_A_NEXT] = "next", [TUI_A_PREV] = "prev", [TUI_A_RESIZE] = "resize",
    };
    return action >= 0 && action < TUI_A_COUNT && names[action] ? names[action] : "?";
}

const char *const *tui_key_help(void)
{
    static const char *const lines[] = {
        "Tab / S-Tab     next / previous view",
        "1..6            Tokens, Step, Walk-back, Run, Backtrace, Speculation",
        "w               walk back to the first non-finite (step, layer, op)",
        "n / p           next / previous link of the chain (Walk-back),",
        "                next / previous search match (Tokens),",
        "                next / previous rejected draft (Speculation)",
        "arrows, hjkl    move the cursor",
        "PgUp / PgDn     page up / down (also C-b / C-f, space)",
        "g / G           first / last",
        "/               search token text",
        "Enter           drill in: token -> step, link or event -> step,",
        "                verify step -> its Step view (Speculation)",
        "Esc, Backspace  back to the previous view (or close this help)",
        "?               this help",
        "q               quit",
        "",
        "Colours: red = non-finite, yellow = degenerate output or |x| far",
        "above the tensor's median over the trace, green = clean. Without",
        "colour (NO_COLOR) the markers are  !  ~  .",
        NULL,
    };
    return lines;
}
