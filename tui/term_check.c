/* term_check.c - can the terminal in $TERM be driven at all? Kept apart
 * from the views because term.h defines macros named like ordinary
 * variables (lines, columns, tab). */
#define NCURSES_WIDECHAR 1
#include <curses.h>
#include <term.h>
#include <unistd.h>

#include "view.h"

int tui_term_usable(void)
{
    int err = 0;
    if (setupterm(NULL, STDOUT_FILENO, &err) != OK) return -1;
    const char *cup = tigetstr("cup");
    int ok = cup && cup != (char *)-1;
    del_curterm(cur_term);
    return ok;
}
