/* view.h - drawing helpers shared by tui/view_*.c and browse.c (the only
 * files that include curses). Every string drawn goes through tui_put, which
 * clips to a width by display columns; token text is sanitized before it
 * gets here. */
#ifndef BT_TUI_VIEW_H
#define BT_TUI_VIEW_H

#define NCURSES_WIDECHAR 1
#include <curses.h>

#include "tui.h"

enum {
    TUI_P_BAD = 1, TUI_P_WARN, TUI_P_OK,          /* foreground */
    TUI_P_BAD_BG, TUI_P_WARN_BG, TUI_P_OK_BG,     /* cell backgrounds */
    TUI_P_HEADER, TUI_P_DIM, TUI_P_NONE_BG,
};

void tui_colors_init(void);
/* Attribute for text of a given health (fg) or a grid cell (bg). */
int tui_attr_fg(const tui_app *a, int health);
/* Draw s at (y, x), at most w columns; returns columns drawn. */
int tui_put(int y, int x, int w, int attr, const char *s);
int tui_putf(int y, int x, int w, int attr, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Blank a rectangle. */
void tui_clear_rect(const tui_rect *r);
/* The grid of a step in rect r with cells cell_w wide; first row top. */
void tui_draw_grid(tui_app *a, const tui_step *st, const tui_rect *r, int cell_w, int *top, int sel_idx);
/* Full statistics of a tap, in up to r->h lines. */
void tui_draw_tap_detail(tui_app *a, const tui_tap *t, const tui_rect *r);
/* 1 if $TERM can address the cursor, 0 if not (dumb), -1 if unknown
 * (term_check.c: term.h's macros stay out of the views). */
int tui_term_usable(void);
/* "%.4g" that prints NaN as "-" (none). */
const char *tui_num(char *buf, size_t cap, double v);

#endif
