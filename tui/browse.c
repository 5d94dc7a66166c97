/* browse.c - the interactive loop: curses up, draw / key / action, curses
 * down.
 *
 * The terminal is restored on every way out: normal quit, an error return,
 * exit() anywhere (atexit), and fatal or terminating signals (the handler
 * calls endwin() and re-raises with the default action, so the exit status
 * still says which signal it was). Resizes arrive as KEY_RESIZE from
 * ncurses' own SIGWINCH handling; the next draw recomputes every layout from
 * the new size. */
#include "view.h"
#include "base/util.h"

#include <langinfo.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t curses_up;
static SCREEN *screen;

static void restore_terminal(void)
{
    if (curses_up) {
        curses_up = 0;
        endwin();
    }
}

static void on_signal(int sig)
{
    restore_terminal();
    signal(sig, SIG_DFL);
    raise(sig);
}

static const int restore_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };

static void install_handlers(void)
{
    static bool once;
    if (!once) { atexit(restore_terminal); once = true; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < BT_ARRAY_SIZE(restore_signals); i++) sigaction(restore_signals[i], &sa, NULL);
}

static void remove_handlers(void)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(restore_signals); i++) signal(restore_signals[i], SIG_DFL);
}

static void draw_header(tui_app *a, const tui_rect *r)
{
    int attr = a->color ? COLOR_PAIR(TUI_P_HEADER) : A_REVERSE;
    attrset(attr);
    mvhline(r->y, 0, ' ', r->w);
    /* every view's tab fits: full titles, else short ones, else the keys
     * (and the brand goes when even those need its room) */
    int level = tui_tabs_level(r->w, 11, a->view);
    int x = 0;
    if (level < 2 || 11 + tui_tabs_width(2, a->view) <= r->w) x = tui_put(r->y, 0, r->w, attr | A_BOLD, " bangtrace ");
    for (int i = 0; i < tui_n_views && x < r->w; i++) {
        char tab[48];
        tui_tab_label(i, level, a->view, tab, sizeof tab);
        int ta = i == a->view ? (a->color ? A_REVERSE | A_BOLD : A_NORMAL | A_BOLD) : attr;
        x += tui_put(r->y, x, r->w - x, ta, tab);
    }
    const char *path = tui_trace_path(a->tr);
    char p[512];
    tui_sanitize(path, strlen(path), p, sizeof p, 0, a->san);
    int pw = tui_text_width(p);
    if (x + 2 < r->w) {
        if (pw > r->w - x - 2) tui_put(r->y, x + 1, r->w - x - 1, attr, p + (pw - (r->w - x - 2)));
        else tui_put(r->y, r->w - pw - 1, pw, attr, p);
    }
    attrset(A_NORMAL);
}

static void status_text(tui_app *a, char *buf, size_t cap)
{
    if (a->status[0]) { snprintf(buf, cap, "%s", a->status); return; }
    const tui_view_class *c = tui_views[a->view].cls;
    void *st = c ? tui_app_view_state(a, a->view) : NULL;
    if (c && c->status && (st || !c->state_size)) { c->status(a, st, buf, cap); return; }
    snprintf(buf, cap, "Tab/1-%d:views w:walk-back Enter:open ?:help q:quit", tui_n_views);
}

/* The current view's state for its callbacks; false (with the reason on
 * the status line) when it keeps one and it could not be made. */
static bool view_state(tui_app *a, void **st)
{
    const tui_view_class *c = tui_views[a->view].cls;
    *st = tui_app_view_state(a, a->view);
    if (*st || !c || !c->state_size) return true;
    snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
    return false;
}

static void draw_help(tui_app *a)
{
    const char *const *lines = tui_key_help();
    int n = 0, w = 0;
    for (; lines[n]; n++) if ((int)strlen(lines[n]) > w) w = (int)strlen(lines[n]);
    w += 4;
    int h = n + 4;
    if (w > COLS) w = COLS;
    if (h > LINES) h = LINES;
    int y0 = (LINES - h) / 2, x0 = (COLS - w) / 2;
    tui_rect r = { y0, x0, h, w };
    tui_clear_rect(&r);
    attrset(A_BOLD);
    mvhline(y0, x0, ACS_HLINE, w);
    mvhline(y0 + h - 1, x0, ACS_HLINE, w);
    attrset(A_NORMAL);
    tui_put(y0, x0 + 2, w - 4, A_BOLD, " keys ");
    for (int i = 0; i < n && i + 2 < h - 1; i++) tui_put(y0 + 2 + i, x0 + 2, w - 4, A_NORMAL, lines[i]);
    tui_put(y0 + h - 1, x0 + 2, w - 4, A_NORMAL, " any key closes ");
}

static void draw(tui_app *a)
{
    tui_screen s;
    getmaxyx(stdscr, a->rows, a->cols);
    tui_layout_screen(a->rows, a->cols, &s);
    erase();
    if (s.too_small) {
        tui_putf(0, 0, a->cols, A_BOLD, "terminal too small (%dx%d; need 40x10)", a->cols, a->rows);
        refresh();
        return;
    }
    draw_header(a, &s.header);
    const tui_view *v = &tui_views[a->view];
    void *vs;
    if (v->draw && view_state(a, &vs)) v->draw(a, vs, &s.body);
    char st[512];
    status_text(a, st, sizeof st);
    attrset(a->color ? COLOR_PAIR(TUI_P_HEADER) : A_REVERSE);
    mvhline(s.status.y, 0, ' ', s.status.w);
    tui_put(s.status.y, 0, s.status.w, a->color ? COLOR_PAIR(TUI_P_HEADER) : A_REVERSE, st);
    if (a->help) draw_help(a);
    refresh();
}

/* Read a search string on the status line. false on Esc. */
static bool prompt(tui_app *a, const char *label, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    curs_set(1);
    for (;;) {
        draw(a);
        char line[300];
        snprintf(line, sizeof line, "%s%s", label, buf);
        attrset(A_NORMAL);
        mvhline(LINES - 1, 0, ' ', COLS);
        tui_put(LINES - 1, 0, COLS, A_BOLD, line);
        move(LINES - 1, tui_text_width(line) < COLS ? tui_text_width(line) : COLS - 1);
        refresh();
        int ch = getch();
        if (ch == KEY_RESIZE) continue;
        if (ch == 27) { curs_set(0); return false; }
        if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) break;
        if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
            while (n > 0 && ((unsigned char)buf[n - 1] & 0xc0) == 0x80) n--;   /* a whole UTF-8 character */
            if (n > 0) n--;
            buf[n] = 0;
        } else if (ch >= 0x20 && ch <= 0xff && ch != 0x7f && n + 1 < cap) {
            buf[n++] = (char)ch;
            buf[n] = 0;
        }
    }
    curs_set(0);
    return n > 0;
}

static int handle_key(tui_app *a, int ch)
{
    int arg = 0, action = tui_key_action(ch, &arg);
    if (action == TUI_A_RESIZE) return TUI_R_REDRAW;
    if (a->help) { a->help = false; return action == TUI_A_QUIT ? TUI_R_QUIT : TUI_R_REDRAW; }
    a->status[0] = 0;
    tui_screen s;
    tui_layout_screen(a->rows, a->cols, &s);
    void *vs;
    int rc;
    switch (action) {
    case TUI_A_QUIT: return TUI_R_QUIT;
    case TUI_A_HELP: a->help = true; return TUI_R_REDRAW;
    case TUI_A_NEXT_VIEW: tui_app_switch(a, (a->view + 1) % tui_n_views); return TUI_R_REDRAW;
    case TUI_A_PREV_VIEW: tui_app_switch(a, (a->view + tui_n_views - 1) % tui_n_views); return TUI_R_REDRAW;
    case TUI_A_VIEW: tui_app_switch(a, arg); return TUI_R_REDRAW;
    case TUI_A_BACK:
        if (a->n_prev) a->view = a->prev_view[--a->n_prev];
        return TUI_R_REDRAW;
    case TUI_A_HEADROOM:
        a->headroom = !a->headroom;
        snprintf(a->status, sizeof a->status, "grid colours: %s", a->headroom ? "f16 headroom (H again: health)" : "health");
        return TUI_R_REDRAW;
    case TUI_A_WALK:
        if ((rc = tui_app_walk_jump(a))) snprintf(a->status, sizeof a->status, "%s", bt_errmsg());
        return TUI_R_REDRAW;
    case TUI_A_SEARCH: {
        char q[128];
        if (!prompt(a, "search token text: ", q, sizeof q)) return TUI_R_REDRAW;
        snprintf(a->search, sizeof a->search, "%s", q);
        tui_app_switch(a, tui_view_find("tokens"));
        if (!view_state(a, &vs)) return TUI_R_REDRAW;
        return tui_views[a->view].handle(a, vs, TUI_A_NEXT, &s.body);
    }
    default:
        if (action == TUI_A_NONE) return TUI_R_NONE;
        if (!tui_views[a->view].handle) return TUI_R_NONE;
        if (!view_state(a, &vs)) return TUI_R_REDRAW;
        return tui_views[a->view].handle(a, vs, action, &s.body);
    }
}

int tui_browse_run(tui_app *a)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "bangtrace: browse: not a terminal (use --dump VIEW for plain text)\n");
        return 2;
    }
    const char *term = getenv("TERM");
    /* A terminal that cannot address the cursor (TERM=dumb) would get a
     * blank, unusable screen: refuse it before taking the terminal over. */
    int usable = tui_term_usable();
    if (usable < 0) {
        fprintf(stderr, "bangtrace: browse: cannot drive this terminal (TERM=%s)\n", term ? term : "(unset)");
        return 2;
    }
    if (usable == 0) {
        fprintf(stderr, "bangtrace: browse: terminal TERM=%s cannot position the cursor (use --dump VIEW)\n", term ? term : "(unset)");
        return 2;
    }
    install_handlers();
    screen = newterm(NULL, stdout, stdin);
    if (!screen) {
        remove_handlers();
        fprintf(stderr, "bangtrace: browse: cannot drive this terminal (TERM=%s)\n", term ? term : "(unset)");
        return 2;
    }
    curses_up = 1;
    set_term(screen);
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    const char *nc = getenv("NO_COLOR");
    a->color = a->color && has_colors() && !(nc && *nc);
    if (a->color) tui_colors_init();
    int errs = 0;
    for (;;) {
        draw(a);
        int ch = getch();
        if (ch == ERR) {            /* input gone (pane closed, EOF): do not spin */
            if (++errs > 100) break;
            continue;
        }
        errs = 0;
        int r = handle_key(a, ch);
        if (r & TUI_R_QUIT) break;
    }
    restore_terminal();
    delscreen(screen);
    screen = NULL;
    remove_handlers();
    return 0;
}
