/* test_tui.c - the browser's logic without a terminal: layout arithmetic,
 * the token flow and vertical navigation, run collapsing (also across token
 * windows of a real SQLite trace), colouring decisions, sanitization of
 * hostile token text, the key table and the view registry, the trace
 * checks that must fail before curses starts, and the Speculation view's
 * model (marks, sparkline, verify-step pages, drafts kept out of the text). */
#include "config.h"
#ifdef HAVE_NCURSESW         /* the key table speaks curses KEY_* codes */
#define NCURSES_WIDECHAR 1
#include <curses.h>
#endif

#include "tui/tui.h"
#include "engine/engine.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_STR(a, b) do { checks++; if (strcmp((a), (b))) { failures++; \
    fprintf(stderr, "FAIL %s:%d: '%s' != '%s'\n", __FILE__, __LINE__, (a), (b)); } } while (0)

static bool rect_inside(const tui_rect *r, const tui_rect *outer)
{
    return r->y >= outer->y && r->x >= outer->x && r->y + r->h <= outer->y + outer->h && r->x + r->w <= outer->x + outer->w;
}

static bool rects_overlap(const tui_rect *a, const tui_rect *b)
{
    if (!a->h || !a->w || !b->h || !b->w) return false;
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}

static void test_layout(void)
{
    tui_screen s;
    tui_layout_screen(24, 80, &s);
    CHECK(!s.too_small);
    CHECK(s.header.y == 0 && s.header.h == 1 && s.header.w == 80);
    CHECK(s.status.y == 23 && s.status.h == 1);
    CHECK(s.body.y == 1 && s.body.h == 22 && s.body.w == 80);
    tui_layout_screen(9, 80, &s);
    CHECK(s.too_small);
    tui_layout_screen(24, 39, &s);
    CHECK(s.too_small);

    /* the step view at 80x24 and 200x60, 13 op columns (a llama layer) */
    int sizes[][2] = { { 24, 80 }, { 60, 200 }, { 30, 100 }, { 50, 132 } };
    for (size_t i = 0; i < BT_ARRAY_SIZE(sizes); i++) {
        tui_layout_screen(sizes[i][0], sizes[i][1], &s);
        tui_step_layout l;
        tui_layout_step(&s.body, 13, &l);
        CHECK(rect_inside(&l.logits, &s.body));
        CHECK(rect_inside(&l.grid, &s.body));
        CHECK(rect_inside(&l.detail, &s.body));
        CHECK(!rects_overlap(&l.logits, &l.grid));
        CHECK(!rects_overlap(&l.grid, &l.detail));
        CHECK(!rects_overlap(&l.logits, &l.detail));
        CHECK(l.cell_w >= 2 && l.cell_w <= 6);
        CHECK(l.label_w + 13 * l.cell_w <= l.grid.w);      /* every op column fits */
        CHECK(l.logits.w >= 34);                           /* "rank id piece logit p" */
        CHECK(l.detail.h >= 4);
        CHECK(l.grid_rows_visible == l.grid.h - 1);
    }
    tui_layout_screen(24, 80, &s);
    tui_step_layout l80, l200;
    tui_layout_step(&s.body, 13, &l80);
    CHECK(l80.cell_w == 3);
    tui_layout_screen(60, 200, &s);
    tui_layout_step(&s.body, 13, &l200);
    CHECK(l200.cell_w == 6);
    CHECK(l200.grid_rows_visible >= 32);                   /* 30 layers + in + out fit at 200x60 */
    CHECK(l200.detail.h == 6);

    /* scrolling keeps the cursor visible */
    CHECK(tui_scroll_follow(0, 5, 10, 100) == 0);
    CHECK(tui_scroll_follow(0, 10, 10, 100) == 1);
    CHECK(tui_scroll_follow(20, 5, 10, 100) == 5);
    CHECK(tui_scroll_follow(95, 99, 10, 100) == 90);
    CHECK(tui_scroll_follow(0, 3, 10, 5) == 0);
    CHECK(tui_nav_clamp(0, -1, 10) == 0);
    CHECK(tui_nav_clamp(9, 1, 10) == 9);
    CHECK(tui_nav_clamp(3, 4, 10) == 7);
    CHECK(tui_nav_clamp(3, 4, 0) == 0);
}

/* At 80 columns (and down to the 40-column minimum) every view's tab
 * fits the header, full titles where there is room; the walk-back list and
 * the argmax note fit their width, elided with "..." rather than cut. */
static void test_fit(void)
{
    char tab[64];
    CHECK(tui_tabs_level(200, 11, 0) == 0);
    CHECK(tui_tabs_level(80, 11, 0) == 1);        /* full titles need 88 */
    for (int w = 40; w <= 200; w++)
        for (int cur = 0; cur < tui_n_views; cur++) {
            int level = tui_tabs_level(w, 11, cur);
            int total = tui_tabs_width(level, cur) + (level < 2 || 11 + tui_tabs_width(2, cur) <= w ? 11 : 0);
            CHECK(total <= w);
            if (total > w) { printf("  tabs at width %d, view %d: %d columns\n", w, cur, total); return; }
        }
    tui_tab_label(2, 1, 0, tab, sizeof tab);
    CHECK_STR(tab, " 3 Walk ");
    tui_tab_label(2, 2, 0, tab, sizeof tab);
    CHECK_STR(tab, " 3 ");
    tui_tab_label(2, 2, 2, tab, sizeof tab);      /* the current view keeps its name */
    CHECK_STR(tab, " 3 Walk ");
    tui_tab_label(5, 0, 0, tab, sizeof tab);
    CHECK_STR(tab, " 6 Speculation ");

    char line[256];
    tui_walk_line(line, sizeof line, 200, false, 5, "L18 attn_norm", "576 NaN", "next layer; 13 bad in layer");
    CHECK_STR(line, "step 5    L18 attn_norm   576 NaN   next layer; 13 bad in layer");
    tui_walk_line(line, sizeof line, 48, true, 5, "L18 attn_norm", "576 NaN", "next layer; 13 bad in layer");
    CHECK_STR(line, "5    L18 attn_norm 576 NaN next layer; 13 bad");
    CHECK((int)strlen(line) <= 48);
    tui_walk_line(line, sizeof line, 30, true, 5, "L18 attn_norm", "576 NaN", "next layer; 13 bad in layer");
    CHECK_STR(line, "5    L18 attn_norm 576 NaN...");
    CHECK((int)strlen(line) <= 30);

    char buf[320];
    const char *wl[2];
    const char *note = "step 9: all-non-finite logits (512 of 512 non-finite); rule first -> id 0 ('<unk>')";
    int n = tui_wrap(note, 78, 2, buf, sizeof buf, wl);
    CHECK(n == 2);
    CHECK_STR(wl[0], "step 9: all-non-finite logits (512 of 512 non-finite); rule first -> id 0");
    CHECK_STR(wl[1], "('<unk>')");
    n = tui_wrap(note, 40, 2, buf, sizeof buf, wl);
    CHECK(n == 2 && strlen(wl[0]) <= 40 && strlen(wl[1]) <= 40);
    CHECK(n == 2 && !strcmp(wl[1] + strlen(wl[1]) - 3, "..."));
    n = tui_wrap("short", 40, 2, buf, sizeof buf, wl);
    CHECK(n == 1);
    CHECK_STR(wl[0], "short");
}

static void test_flow(void)
{
    /* width 10: "aaa bbbbb" | "cc dddddddd" does not fit -> own line */
    int w[] = { 3, 5, 2, 8, 12, 1 };
    int line[6], col[6];
    int n = tui_flow_layout(w, 6, 10, line, col);
    CHECK(line[0] == 0 && col[0] == 0);
    CHECK(line[1] == 0 && col[1] == 4);
    CHECK(line[2] == 1 && col[2] == 0);
    CHECK(line[3] == 2 && col[3] == 0);      /* 2 + 1 + 8 > 10 */
    CHECK(line[4] == 3 && col[4] == 0);      /* wider than the line: a line of its own */
    CHECK(line[5] == 4 && col[5] == 0);
    CHECK(n == 5);
    for (int i = 0; i < 6; i++) CHECK(col[i] + (w[i] > 10 ? 10 : w[i]) <= 10);

    /* vertical moves keep the column */
    int w2[] = { 4, 4, 4, 4, 4, 4, 4 };      /* width 9: two per line */
    int l2[7], c2[7];
    CHECK(tui_flow_layout(w2, 7, 9, l2, c2) == 4);
    CHECK(tui_flow_vertical(l2, c2, 7, 0, +1) == 2);
    CHECK(tui_flow_vertical(l2, c2, 7, 1, +1) == 3);
    CHECK(tui_flow_vertical(l2, c2, 7, 3, -1) == 1);
    CHECK(tui_flow_vertical(l2, c2, 7, 5, +1) == 6);  /* last line is shorter: nearest cell */
    CHECK(tui_flow_vertical(l2, c2, 7, 6, +1) == -1);
    CHECK(tui_flow_vertical(l2, c2, 7, 0, -1) == -1);
}

static void test_collapse(void)
{
    tui_tok t[420];
    int n = 0;
    int ids[] = { 1, 7, 7, 7 };
    for (int i = 0; i < 4; i++, n++) t[n] = (tui_tok){ .seq = n, .step = 0, .pos = n, .id = ids[i], .role = i == 0 ? 'p' : 'g' };
    for (int i = 0; i < 412; i++, n++) t[n] = (tui_tok){ .seq = n, .step = 10 + i, .pos = n, .id = 0, .role = 'g' };
    t[n] = (tui_tok){ .seq = n, .step = 500, .pos = n, .id = 5, .role = 'g' };
    n++;
    t[n] = (tui_tok){ .seq = n, .step = 501, .pos = n, .id = 5, .role = 'p' };   /* same id, other role */
    n++;
    tui_cell cells[420];
    int nc = tui_collapse(t, n, 2, cells);
    CHECK(nc == 5);
    CHECK(cells[0].count == 1 && cells[0].id == 1);
    CHECK(cells[1].count == 3 && cells[1].id == 7 && cells[1].seq0 == 1 && cells[1].seq1 == 3);
    CHECK(cells[2].count == 412 && cells[2].id == 0 && cells[2].step0 == 10 && cells[2].step1 == 421);
    CHECK(cells[3].count == 1 && cells[4].count == 1 && cells[4].role == 'p');
    tui_cell_set_text(&cells[2], "!", 1, TUI_SAN_UTF8);
    CHECK_STR(cells[2].text, "! x412");
    CHECK(cells[2].width == 6);
    tui_cell_set_text(&cells[0], " Once", 5, TUI_SAN_UTF8);
    CHECK_STR(cells[0].text, "\xc2\xb7Once");              /* a visible space */
    CHECK(cells[0].width == 5);
    tui_cell_set_text(&cells[0], " Once", 5, 0);
    CHECK_STR(cells[0].text, "_Once");
    tui_cell_set_text(&cells[0], NULL, 0, 0);               /* redacted piece: the id stands in */
    CHECK_STR(cells[0].text, "#1");
    /* runs shorter than min_run stay one cell per token */
    nc = tui_collapse(t, 4, 4, cells);
    CHECK(nc == 4);

    tui_tokens tk = { .cells = cells, .n = 3 };
    nc = tui_collapse(t, n, 2, cells);
    tk.n = nc;
    CHECK(tui_tokens_find(&tk, 0) == 0);
    CHECK(tui_tokens_find(&tk, 2) == 1);
    CHECK(tui_tokens_find(&tk, 300) == 2);
    CHECK(tui_tokens_find(&tk, 10000) == 4);
}

static void test_health(void)
{
    CHECK(tui_tap_health(false, 0, 0, 0, 1, 1) == TUI_H_NONE);
    CHECK(tui_tap_health(true, 1, 0, 0, 1, 1) == TUI_H_BAD);
    CHECK(tui_tap_health(true, 0, 1, 0, 1, 1) == TUI_H_BAD);
    CHECK(tui_tap_health(true, 0, 0, 3, NAN, 1) == TUI_H_BAD);
    CHECK(tui_tap_health(true, 0, 0, 0, INFINITY, 1) == TUI_H_BAD);   /* bf16 overflowed: not finite */
    CHECK(tui_tap_health(true, 0, 0, 0, 100, 2) == TUI_H_WARN);      /* 50x the median */
    CHECK(tui_tap_health(true, 0, 0, 0, 15, 2) == TUI_H_CLEAN);      /* 7.5x: within */
    CHECK(tui_tap_health(true, 0, 0, 0, 17, 2) == TUI_H_WARN);
    CHECK(tui_tap_health(true, 0, 0, 0, 3, NAN) == TUI_H_CLEAN);     /* no median known */
    CHECK(tui_tap_health(true, 0, 0, 0, 0, 0) == TUI_H_CLEAN);
    CHECK(tui_tap_health(true, 0, 0, 0, 5, 0) == TUI_H_WARN);        /* always-zero tensor woke up */
    CHECK(tui_tap_health(true, 0, 0, 0, NAN, 2) == TUI_H_CLEAN);     /* nothing finite, no bad count */
    CHECK(tui_health_marker(TUI_H_BAD) == '!');
    CHECK(tui_health_marker(TUI_H_WARN) == '~');
    CHECK(tui_health_marker(TUI_H_CLEAN) == '.');
    CHECK(tui_health_marker(TUI_H_NONE) == ' ');

    char b[96];
    tui_fmt_bad_counts(b, sizeof b, 1, 0, 0);
    CHECK_STR(b, "1 NaN");
    tui_fmt_bad_counts(b, sizeof b, 3, 2, 1);
    CHECK_STR(b, "3 NaN, 2 +Inf, 1 -Inf");
    tui_fmt_bad_counts(b, sizeof b, 0, 0, 4);
    CHECK_STR(b, "4 -Inf");
    tui_fmt_bad_counts(b, sizeof b, 0, 0, 0);
    CHECK_STR(b, "0 non-finite");

    CHECK(isnan(bt_bf16_to_f32(0x7fc0)));
    CHECK(bt_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(bt_bf16_to_f32(0xc000) == -2.0f);
    CHECK(isinf(bt_bf16_to_f32(0x7f80)));
}

static bool has_control(const char *s)
{
    for (; *s; s++) if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f) return true;
    return false;
}

static void test_sanitize(void)
{
    char out[256];
    int w;
    const char *esc = "\x1b[31mred\x1b[0m";
    w = tui_sanitize(esc, strlen(esc), out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\x1b[31mred\\x1b[0m");
    CHECK(w == (int)strlen(out));
    CHECK(!has_control(out));
    tui_sanitize("\x07", 1, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\x07");
    tui_sanitize("\r\n\t", 3, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\r\\n\\t");
    tui_sanitize("a\\b", 3, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "a\\\\b");                                /* a literal "\x1b" stays distinguishable */
    tui_sanitize("\x7f", 1, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\x7f");
    tui_sanitize("a\0b", 3, out, sizeof out, 0, TUI_SAN_UTF8);  /* embedded NUL */
    CHECK_STR(out, "a\\x00b");
    /* UTF-8: printable passes, C1 controls (8-bit CSI) and bidi overrides do not */
    w = tui_sanitize("caf\xc3\xa9", 5, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "caf\xc3\xa9");
    CHECK(w == 4);
    tui_sanitize("caf\xc3\xa9", 5, out, sizeof out, 0, 0);     /* not a UTF-8 terminal */
    CHECK_STR(out, "caf\\xc3\\xa9");
    tui_sanitize("\xc2\x9b" "31m", 5, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\u009b31m");
    tui_sanitize("\xe2\x80\xae" "abc", 6, out, sizeof out, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "\\u202eabc");
    tui_sanitize("\xff\xfe", 2, out, sizeof out, 0, TUI_SAN_UTF8);   /* invalid UTF-8 */
    CHECK_STR(out, "\\xff\\xfe");
    tui_sanitize("\xe4\xbd", 2, out, sizeof out, 0, TUI_SAN_UTF8);   /* truncated sequence */
    CHECK_STR(out, "\\xe4\\xbd");
    tui_sanitize("\xc0\xaf", 2, out, sizeof out, 0, TUI_SAN_UTF8);   /* overlong '/' */
    CHECK_STR(out, "\\xc0\\xaf");
    w = tui_sanitize("\xe4\xbd\xa0", 3, out, sizeof out, 0, TUI_SAN_UTF8);   /* wide CJK */
    CHECK(w == 2);
    /* limits never cut an escape in half */
    w = tui_sanitize("ab\x1b" "cd", 5, out, sizeof out, 4, TUI_SAN_UTF8);
    CHECK_STR(out, "ab");
    CHECK(w == 2);
    tui_sanitize("ab\x1b" "cd", 5, out, 5, 0, TUI_SAN_UTF8);
    CHECK_STR(out, "ab");
    w = tui_sanitize("a b", 3, out, sizeof out, 0, TUI_SAN_UTF8 | TUI_SAN_SHOWSPACE);
    CHECK_STR(out, "a\xc2\xb7" "b");
    CHECK(w == 3);
    CHECK(tui_text_width("a\xc2\xb7" "b") == 3);
    char fit[16];
    CHECK(tui_text_fit("\xe4\xbd\xa0\xe4\xbd\xa0", fit, sizeof fit, 3) == 2);   /* no half of a wide char */
    CHECK_STR(fit, "\xe4\xbd\xa0");
    /* every byte value alone: output never holds a control byte */
    for (int c = 0; c < 256; c++) {
        char in = (char)c;
        tui_sanitize(&in, 1, out, sizeof out, 0, TUI_SAN_UTF8);
        CHECK(!has_control(out));
        tui_sanitize(&in, 1, out, sizeof out, 0, 0);
        CHECK(!has_control(out) && !((unsigned char)out[0] & 0x80));
    }
}

static void test_grid(void)
{
    tui_tensor t[] = {
        { 0, -1, 8, "token_embd", "token_embd" },
        { 1, 0, 8, "blk.0.attn_norm", "attn_norm" }, { 2, 0, 8, "blk.0.ffn_gate", "ffn_gate" },
        { 3, 0, 8, "blk.0.ffn_down", "ffn_down" },
        { 4, 1, 8, "blk.1.attn_norm", "attn_norm" }, { 5, 1, 8, "blk.1.ffn_down", "ffn_down" },
        { 6, -1, 8, "output_norm", "output_norm" }, { 7, -1, 32, "logits", "logits" },
    };
    tui_grid g;
    CHECK(tui_grid_build(t, 8, &g) == BT_OK);
    CHECK(g.n_rows == 4 && g.n_cols == 3);
    CHECK(g.has_pre && g.has_post);
    CHECK_STR(g.row_label[0], "in");
    CHECK_STR(g.row_label[1], "L00");
    CHECK_STR(g.row_label[3], "out");
    CHECK_STR(g.ops[2], "ffn_down");
    CHECK(g.cell[0 * 3 + 0] == 0 && g.cell[0 * 3 + 1] == -1);
    CHECK(g.cell[2 * 3 + 0] == 4 && g.cell[2 * 3 + 1] == -1 && g.cell[2 * 3 + 2] == 5);  /* layer 1 untapped gate */
    CHECK(g.cell[3 * 3 + 0] == 6 && g.cell[3 * 3 + 1] == 7);
    int r, c;
    CHECK(tui_grid_find(&g, 5, &r, &c) && r == 2 && c == 2);
    CHECK(!tui_grid_find(&g, 99, &r, &c));
    tui_grid_free(&g);
    /* --tap-layers 10-11: rows start at layer 10, no pre/post */
    tui_tensor t2[] = { { 0, 10, 8, "blk.10.ffn_down", "ffn_down" }, { 1, 11, 8, "blk.11.ffn_down", "ffn_down" } };
    CHECK(tui_grid_build(t2, 2, &g) == BT_OK);
    CHECK(g.n_rows == 2 && g.n_cols == 1 && !g.has_pre && g.layer0 == 10);
    CHECK_STR(g.row_label[0], "L10");
    tui_grid_free(&g);
    /* horizontal scroll of a long Run line */
    CHECK(tui_hscroll(0, 10, 100, 40) == 10);
    CHECK(tui_hscroll(50, 40, 100, 40) == 60);          /* clamped: the end still fills the field */
    CHECK(tui_hscroll(10, -40, 100, 40) == 0);
    CHECK(tui_hscroll(0, 10, 30, 40) == 0);             /* fits: no scrolling */
    CHECK_STR(tui_text_skip("abcdef", 2), "cdef");
    CHECK_STR(tui_text_skip("\xc2\xb7x\xe4\xb8\xadyz", 3), "yz");   /* middle dot 1 column, CJK 2: no half character */
    CHECK_STR(tui_text_skip("ab", 5), "");
    /* narrow piece columns: special tokens whole and bare, cuts marked */
    {
        char pl[64];
        CHECK(tui_piece_label("<|im_start|>", 12, pl, sizeof pl, 12, TUI_SAN_UTF8) == 12);
        CHECK_STR(pl, "<|im_start|>");
        CHECK(tui_piece_label(" Paris", 6, pl, sizeof pl, 12, TUI_SAN_UTF8) == 8);
        CHECK_STR(pl, "'\xc2\xb7Paris'");
        CHECK(tui_piece_label("internationalization", 20, pl, sizeof pl, 10, 0) == 10);
        CHECK_STR(pl, "'interna~'");
        CHECK(tui_piece_label("<|reserved_special_token_250|>", 30, pl, sizeof pl, 10, 0) == 10);
        CHECK_STR(pl, "<|reserve~");
        tui_piece_label("<a b>", 5, pl, sizeof pl, 12, 0);        /* not a special token: quoted */
        CHECK_STR(pl, "'<a_b>'");
        tui_piece_label("\x1b[31m>", 6, pl, sizeof pl, 20, 0);
        CHECK(!strchr(pl, 0x1b));
    }
    char ab[8];
    tui_op_abbrev("ffn_gate", ab, 4);
    CHECK_STR(ab, "gate");
    tui_op_abbrev("attn_ctx", ab, 2);
    CHECK_STR(ab, "ac");
    tui_op_abbrev("ffn_down", ab, 3);
    CHECK_STR(ab, "fd");
    /* narrow headers: every op's label is unique (was "a q k v c a a f g u a d f") */
    for (int i = 0; i < BT_OP_COUNT; i++)
        for (int j = i + 1; j < BT_OP_COUNT; j++) {
            char x[8], y[8];
            tui_op_abbrev(bt_op_name(i), x, 2);
            tui_op_abbrev(bt_op_name(j), y, 2);
            CHECK(strlen(x) == 2 && strcmp(x, y));
            tui_op_abbrev(bt_op_name(i), x, 4);
            tui_op_abbrev(bt_op_name(j), y, 4);
            CHECK(strcmp(x, y));
        }
    tui_op_abbrev("moe_router", ab, 6);
    CHECK_STR(ab, "router");
}

static void test_keys(void)
{
    int arg = -1;
    (void)arg;               /* unused without ncursesw */
#ifdef HAVE_NCURSESW         /* without ncursesw there are no keys, only dumps */
    CHECK(tui_key_action('j', NULL) == TUI_A_DOWN);
    CHECK(tui_key_action(KEY_DOWN, NULL) == TUI_A_DOWN);
    CHECK(tui_key_action('k', NULL) == TUI_A_UP);
    CHECK(tui_key_action('h', NULL) == TUI_A_LEFT);
    CHECK(tui_key_action(KEY_RIGHT, NULL) == TUI_A_RIGHT);
    CHECK(tui_key_action(KEY_NPAGE, NULL) == TUI_A_PGDN);
    CHECK(tui_key_action(KEY_PPAGE, NULL) == TUI_A_PGUP);
    CHECK(tui_key_action('g', NULL) == TUI_A_FIRST);
    CHECK(tui_key_action('G', NULL) == TUI_A_LAST);
    CHECK(tui_key_action('/', NULL) == TUI_A_SEARCH);
    CHECK(tui_key_action('\r', NULL) == TUI_A_ENTER);
    CHECK(tui_key_action(27, NULL) == TUI_A_BACK);
    CHECK(tui_key_action(KEY_BACKSPACE, NULL) == TUI_A_BACK);
    CHECK(tui_key_action('q', NULL) == TUI_A_QUIT);
    CHECK(tui_key_action('?', NULL) == TUI_A_HELP);
    CHECK(tui_key_action('\t', NULL) == TUI_A_NEXT_VIEW);
    CHECK(tui_key_action('w', NULL) == TUI_A_WALK);
    CHECK(tui_key_action('H', NULL) == TUI_A_HEADROOM);
    CHECK(!strcmp(tui_action_name(TUI_A_HEADROOM), "headroom"));
    /* headroom colouring: the f16 maximum and half of it */
    CHECK(tui_headroom_health(true, 0, 0, 0, 100.0f) == TUI_H_CLEAN);
    CHECK(tui_headroom_health(true, 0, 0, 0, 40000.0f) == TUI_H_WARN);
    CHECK(tui_headroom_health(true, 0, 0, 0, 67584.0f) == TUI_H_BAD);
    CHECK(tui_headroom_health(true, 0, 1, 0, 1.0f) == TUI_H_BAD);
    CHECK(tui_headroom_health(false, 0, 0, 0, 1e9f) == TUI_H_NONE);
    /* an all-NaN tap has no finite absmax: non-finite, never "safe" (was
     * green '.'); a tap with some NaN is non-finite too */
    CHECK(tui_headroom_health(true, 576, 0, 0, NAN) == TUI_H_BAD);
    CHECK(tui_headroom_health(true, 3, 0, 0, 12.0f) == TUI_H_BAD);
    CHECK(tui_headroom_health(true, 0, 0, 0, NAN) == TUI_H_BAD);
    /* the key is H ('h' is Left, vim-style), and the help names H */
    CHECK(tui_key_action('h', NULL) == TUI_A_LEFT);
    {
        bool named = false, legend = false, nan_named = false;
        for (const char *const *l = tui_key_help(); *l; l++) {
            if (!strncmp(*l, "H ", 2) && strstr(*l, "headroom")) named = true;
            if (strstr(*l, "Headroom colours (H)")) legend = true;
            if (strstr(*l, "NaN (non-finite)")) nan_named = true;
        }
        CHECK(named && legend && nan_named);
    }
    CHECK(tui_key_action('n', NULL) == TUI_A_NEXT);
    CHECK(tui_key_action('p', NULL) == TUI_A_PREV);
    CHECK(tui_key_action(KEY_RESIZE, NULL) == TUI_A_RESIZE);
    CHECK(tui_key_action('Z', NULL) == TUI_A_NONE);
    CHECK(tui_key_action('3', &arg) == TUI_A_VIEW && arg == 2);
    CHECK_STR(tui_views[arg].name, "walkback");
    CHECK_STR(tui_action_name(TUI_A_WALK), "walk-back");
#endif
    /* the registry: unique names and keys, every view drawable and dumpable */
    CHECK(tui_n_views >= 5);
    for (int i = 0; i < tui_n_views; i++) {
#ifdef HAVE_NCURSESW
        CHECK(tui_views[i].draw && tui_views[i].handle && tui_views[i].dump);
        CHECK(tui_key_action(tui_views[i].key, &arg) == TUI_A_VIEW && arg == i);
#else
        CHECK(!tui_views[i].draw && !tui_views[i].handle && tui_views[i].dump);
#endif
        CHECK(tui_view_find(tui_views[i].name) == i);
        for (int j = 0; j < i; j++) CHECK(tui_views[i].key != tui_views[j].key && strcmp(tui_views[i].name, tui_views[j].name));
    }
    CHECK(tui_view_find("nope") == -1);
#ifdef HAVE_NCURSESW
    const char *const *help = tui_key_help();
    int n = 0;
    while (help[n]) n++;
    CHECK(n > 5);
    /* generated from the key table: every binding and view is there, and
     * the legend names every grid label */
    {
        char all[8192] = "";
        for (int i = 0; help[i]; i++) { strcat(all, help[i]); strcat(all, "\n"); }
        if (getenv("BT_SHOW_HELP")) fputs(all, stderr);
        const char *want[] = { "Tab S-Tab", "Up k Down j Left h Right l", "PgUp C-b PgDn C-f Space", "g Home G End",
                               "Enter", "Esc Backspace", "? F1", "q Q", "n p N", "w ", "/ ", "1 2 3 4 5 6",
                               "Tokens, Step, Walk, Run, Stack, Spec, Kern, Cache", "1 2 3 4 5 6 7 8" };
        for (size_t i = 0; i < BT_ARRAY_SIZE(want); i++)
            if (!strstr(all, want[i])) { fprintf(stderr, "help lacks '%s'\n", want[i]); CHECK(0); }
        /* the views' line fits the help box at 80 columns (short titles) */
        for (int i = 0; help[i]; i++)
            if (strstr(help[i], "Tokens, Step")) CHECK(strlen(help[i]) <= 76);
        for (int op = 0; op < BT_OP_COUNT; op++) {
            char item[40];
            snprintf(item, sizeof item, "%s %s", bt_op_label(op), bt_op_name(op));
            if (!strstr(all, item)) { fprintf(stderr, "help legend lacks '%s'\n", item); CHECK(0); }
        }
    }
#endif

    /* view history: switch and back */
    tui_app a;
    memset(&a, 0, sizeof a);
    tui_app_switch(&a, 1);
    tui_app_switch(&a, 2);
    tui_app_switch(&a, 2);          /* same view: no history entry */
    CHECK(a.view == 2 && a.n_prev == 2 && a.prev_view[1] == 1 && a.prev_view[0] == 0);
    for (int i = 0; i < 40; i++) tui_app_switch(&a, i % 2 ? 3 : 4);   /* bounded */
    CHECK(a.n_prev <= 16);
}

/* ---- the model on a real SQLite trace ---- */

static char *read_schema(void)
{
    const char *src = getenv("BT_SRCDIR");
    const char *cands[] = { NULL, "../traces/schema.sql", "traces/schema.sql", "../../traces/schema.sql" };
    char buf[4096];
    if (src) { snprintf(buf, sizeof buf, "%s/traces/schema.sql", src); cands[0] = buf; }
    for (size_t i = 0; i < BT_ARRAY_SIZE(cands); i++) {
        char *text;
        size_t len;
        if (cands[i] && access(cands[i], R_OK) == 0 && bt_read_file(cands[i], &text, &len) == BT_OK) return text;
    }
    return NULL;
}

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) { fprintf(stderr, "sql: %s: %s\n", err, sql); sqlite3_free(err); }
    return rc;
}

/* 1 prompt token, 30 clean tokens, then a 5000-token wall of id 0 (with
 * NaN logits and tap_bad from step 31 on), then 3 clean tokens; steps 10..19
 * repeat one token with finite logits (a degenerate wall). 2 layers x 2 ops
 * + logits. */
static bool make_trace(const char *path, const char *schema)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) return false;
    bool ok = exec(db, schema) == SQLITE_OK && exec(db, "PRAGMA application_id = 1112822339; PRAGMA user_version = 1; BEGIN") == SQLITE_OK;
    ok = ok && exec(db, "INSERT INTO tensors VALUES ('target', 0, 'blk.0.ffn_gate', 0, 'ffn_gate', 4),"
                        "('target', 1, 'blk.0.ffn_down', 0, 'ffn_down', 4), ('target', 2, 'blk.1.ffn_gate', 1, 'ffn_gate', 4),"
                        "('target', 3, 'blk.1.ffn_down', 1, 'ffn_down', 4), ('target', 4, 'logits', NULL, 'logits', 8);"
                        "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (0, 0, 1, '<s>', 'prompt');"
                        "INSERT INTO meta VALUES ('tool_version', 'test'), ('schema_version', '1');") == SQLITE_OK;
    sqlite3_stmt *st, *tb, *tk, *lg, *bad;
    sqlite3_prepare_v2(db, "INSERT INTO steps(step, kind, pos0, n_pos) VALUES (?1, 'decode', ?1, 1)", -1, &st, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO tap_blobs VALUES (?1, ?2)", -1, &tb, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (?1, ?1 + 1, ?2, ?3, 'gen')", -1, &tk, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf) VALUES (?1, ?1, 8, ?2, 0, 0)", -1, &lg, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO tap_bad(step, idx, nan, pinf, ninf, first_bad_index, first_bad_pos) VALUES (?1, ?2, ?3, 0, 0, ?4, ?1)", -1, &bad, NULL);
    const int n_steps = 30 + 5000 + 3;
    for (int s = 0; s < n_steps && ok; s++) {
        bool wall = s >= 30 && s < 5030;
        unsigned char blob[40];
        for (int i = 0; i < 5; i++) {
            /* min -1, max 2 (bf16 0xbf80, 0x4000), mean 0, rms 0.5; step 20 slot 1: max 64 */
            uint16_t v[4] = { 0xbf80, (s == 20 && i == 1) ? 0x4280 : 0x4000, 0x0000, 0x3f00 };
            if (wall && s >= 31 && i >= 2) v[0] = v[1] = v[2] = v[3] = 0x7fc0;
            for (int k = 0; k < 4; k++) { blob[i * 8 + k * 2] = v[k] & 0xff; blob[i * 8 + k * 2 + 1] = v[k] >> 8; }
        }
        sqlite3_reset(st); sqlite3_bind_int(st, 1, s); ok = ok && sqlite3_step(st) == SQLITE_DONE;
        sqlite3_reset(tb); sqlite3_bind_int(tb, 1, s); sqlite3_bind_blob(tb, 2, blob, sizeof blob, SQLITE_TRANSIENT);
        ok = ok && sqlite3_step(tb) == SQLITE_DONE;
        sqlite3_reset(tk); sqlite3_bind_int(tk, 1, s); sqlite3_bind_int(tk, 2, wall ? 0 : s >= 10 && s < 20 ? 42 : 10 + s % 7);
        sqlite3_bind_text(tk, 3, wall ? "!" : "w", -1, SQLITE_STATIC);
        ok = ok && sqlite3_step(tk) == SQLITE_DONE;
        sqlite3_reset(lg); sqlite3_bind_int(lg, 1, s); sqlite3_bind_int(lg, 2, s >= 31 && wall ? 8 : 0);
        ok = ok && sqlite3_step(lg) == SQLITE_DONE;
        if (wall && s >= 31) {
            if (s == 31) {          /* origin: layer 0 ffn_down, 1 NaN at index 2 */
                sqlite3_reset(bad); sqlite3_bind_int(bad, 1, s); sqlite3_bind_int(bad, 2, 1); sqlite3_bind_int(bad, 3, 1);
                sqlite3_bind_int(bad, 4, 2); ok = ok && sqlite3_step(bad) == SQLITE_DONE;
            }
            for (int i = 2; i < 5; i++) {
                sqlite3_reset(bad); sqlite3_bind_int(bad, 1, s); sqlite3_bind_int(bad, 2, i); sqlite3_bind_int(bad, 3, i == 4 ? 8 : 4);
                sqlite3_bind_int(bad, 4, 0); ok = ok && sqlite3_step(bad) == SQLITE_DONE;
            }
        }
    }
    sqlite3_finalize(st); sqlite3_finalize(tb); sqlite3_finalize(tk); sqlite3_finalize(lg); sqlite3_finalize(bad);
    ok = ok && exec(db, "COMMIT") == SQLITE_OK;
    sqlite3_close(db);
    return ok;
}

static void test_model(void)
{
    char *schema = read_schema();
    if (!schema) { printf("SKIP (part): traces/schema.sql not found (set BT_SRCDIR); model tests not run\n"); return; }
    char path[64], foreign[64];
    snprintf(path, sizeof path, "/tmp/bt-test-tui-%d.db", (int)getpid());
    snprintf(foreign, sizeof foreign, "/tmp/bt-test-tui-f-%d.db", (int)getpid());
    CHECK(make_trace(path, schema));
    tui_trace *tr = NULL;
    int rc = tui_trace_open(path, &tr);
    CHECK(rc == BT_OK);
    if (rc) { fprintf(stderr, "%s\n", bt_errmsg()); free(schema); return; }
    int lo, hi;
    int64_t smin, smax;
    tui_trace_bounds(tr, &lo, &hi, &smin, &smax);
    CHECK(lo == 0 && hi == 5032 && smin == 1 && smax == 5034);

    /* The wall is one cell wherever the window starts: before it, inside it
     * (the window holds none of its ends) and after it. */
    tui_tokens tk = { 0 };
    int64_t starts[] = { 1, 2500, 4000, 5034 };
    for (size_t k = 0; k < BT_ARRAY_SIZE(starts); k++) {
        CHECK(tui_tokens_load(tr, starts[k], TUI_SAN_UTF8, &tk) == BT_OK);
        int i = tui_tokens_find(&tk, 2000);
        const tui_cell *c = &tk.cells[i];
        CHECK(c->id == 0 && c->count == 5000 && c->seq0 == 32 && c->seq1 == 5031);
        CHECK(c->step0 == 30 && c->step1 == 5029);
        CHECK_STR(c->text, "! x5000");
        CHECK(c->health == TUI_H_BAD);
        CHECK(tk.n <= TUI_TOK_WINDOW);
    }
    CHECK(tui_tokens_load(tr, 1, TUI_SAN_UTF8, &tk) == BT_OK);
    CHECK(tk.cells[0].role == 'p' && tk.cells[0].health == TUI_H_CLEAN);
    CHECK(tk.cells[1].health == TUI_H_CLEAN && tk.cells[1].count == 1);
    {   /* a wall of 10 with finite logits: degenerate, not non-finite */
        const tui_cell *c = &tk.cells[tui_tokens_find(&tk, 15)];
        CHECK(c->id == 42 && c->count == 10 && c->seq0 == 12 && c->health == TUI_H_WARN);
    }
    CHECK(tui_tokens_search(tr, 1, "!", +1) == 32);
    CHECK(tui_tokens_search(tr, 5034, "!", +1) == 32);          /* wraps */
    CHECK(tui_tokens_search(tr, 1, "zzz", +1) == -1);
    tui_tokens_free(&tk);

    tui_step st = { 0 };
    CHECK(tui_step_load(tr, 20, &st) == BT_OK);
    CHECK(st.present && st.n_taps == 5);
    CHECK(st.taps[0].present && st.taps[0].min == -1.0f && st.taps[0].max == 2.0f && st.taps[0].rms == 0.5f);
    CHECK(st.taps[0].median == 2.0f && st.taps[0].health == TUI_H_CLEAN);
    CHECK(st.taps[1].absmax == 64.0f && st.taps[1].health == TUI_H_WARN);   /* 32x its median */
    CHECK(st.n_warn == 1 && st.n_bad == 0);
    CHECK(tui_step_load(tr, 31, &st) == BT_OK);
    CHECK(st.taps[1].health == TUI_H_BAD && st.taps[1].nan == 1 && st.taps[1].first_bad_index == 2);
    CHECK(st.taps[0].health == TUI_H_CLEAN);
    CHECK(st.n_bad == 4);
    CHECK(st.lg.present && st.lg.nan == 8);
    tui_step_free(&st);

    tui_walk w = { 0 };
    CHECK(tui_walk_load(tr, &w) == BT_OK);
    CHECK(w.found && w.n >= 3);
    CHECK_STR(w.summary, "step 31, layer 0, ffn_down: 1 NaN of 4 (index 2)");
    CHECK(w.links[0].step == 31 && w.links[0].layer == 0 && !strcmp(w.links[0].op, "ffn_down"));
    CHECK(w.links[1].step == 31 && w.links[1].layer == 1);     /* next layer */
    CHECK(w.links[w.n - 1].step > 31);                         /* later steps follow */
    tui_walk_free(&w);
    tui_trace_close(tr);

    /* Not traces: each fails at open with a message naming the file. */
    sqlite3 *db;
    unlink(foreign);
    sqlite3_open(foreign, &db);
    exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)");
    sqlite3_close(db);
    CHECK(tui_trace_open(foreign, &tr) == BT_EFORMAT && !tr);
    CHECK(strstr(bt_errmsg(), foreign) && strstr(bt_errmsg(), "not a bangtrace trace"));
    sqlite3_open(foreign, &db);
    exec(db, "PRAGMA application_id = 1234");
    sqlite3_close(db);
    CHECK(tui_trace_open(foreign, &tr) == BT_EFORMAT);
    CHECK(strstr(bt_errmsg(), "application_id"));
    /* a newer schema version is refused with advice */
    sqlite3_open(path, &db);
    exec(db, "PRAGMA user_version = 7");
    sqlite3_close(db);
    CHECK(tui_trace_open(path, &tr) == BT_EUNSUPPORTED);
    CHECK(strstr(bt_errmsg(), "newer"));
    /* garbage bytes */
    FILE *f = fopen(foreign, "wb");
    for (int i = 0; i < 4096; i++) fputc((i * 131) & 0xff, f);
    fclose(f);
    CHECK(tui_trace_open(foreign, &tr) == BT_EFORMAT);
    CHECK(strstr(bt_errmsg(), "not a bangtrace trace"));
    CHECK(tui_trace_open("/nonexistent/x.db", &tr) == BT_EIO);
    unlink(path);
    unlink(foreign);
    free(schema);
}

/* ---- speculation: marks, sparkline, layout (pure) ---- */

static void test_spec_pure(void)
{
    /* marks from (accepted, reason) */
    CHECK(tui_spec_mark(true, "match") == TUI_SM_ACCEPT);
    CHECK(tui_spec_mark(true, "accept p/q") == TUI_SM_ACCEPT);
    CHECK(tui_spec_mark(false, "mismatch") == TUI_SM_REJECT);
    CHECK(tui_spec_mark(false, "reject p/q") == TUI_SM_REJECT);
    CHECK(tui_spec_mark(false, "after_reject") == TUI_SM_AFTER_REJECT);
    CHECK(tui_spec_mark(false, "after_stop") == TUI_SM_AFTER_STOP);
    CHECK(tui_spec_mark(false, NULL) == TUI_SM_REJECT);       /* unknown reason: a rejection, not hidden */
    CHECK(tui_spec_mark(true, "after_stop") == TUI_SM_ACCEPT); /* accepted wins */
    CHECK(tui_spec_mark_char(TUI_SM_ACCEPT) == '+' && tui_spec_mark_char(TUI_SM_REJECT) == 'x');
    CHECK(tui_spec_mark_char(TUI_SM_AFTER_REJECT) == '-' && tui_spec_mark_char(TUI_SM_AFTER_STOP) == 's');
    CHECK_STR(tui_spec_mark_name(TUI_SM_REJECT), "REJECTED");
    CHECK_STR(tui_spec_mark_name(TUI_SM_AFTER_STOP), "after_stop");

    /* sparkline levels: 8 equal bands, ends clamped, NAN blank */
    CHECK(tui_spark_level(0.0) == 0);
    CHECK(tui_spark_level(0.124) == 0);
    CHECK(tui_spark_level(0.125) == 1);
    CHECK(tui_spark_level(0.5) == 4);
    CHECK(tui_spark_level(0.99) == 7);
    CHECK(tui_spark_level(1.0) == 7);
    CHECK(tui_spark_level(1.7) == 7 && tui_spark_level(-0.2) == 0);
    CHECK(tui_spark_level(NAN) == -1);
    CHECK_STR(tui_spark_glyph(0, true), "\xe2\x96\x81");      /* U+2581 lower one eighth block */
    CHECK_STR(tui_spark_glyph(7, true), "\xe2\x96\x88");      /* U+2588 full block */
    CHECK_STR(tui_spark_glyph(0, false), "_");
    CHECK_STR(tui_spark_glyph(7, false), "#");
    CHECK_STR(tui_spark_glyph(-1, true), " ");
    for (int l = 0; l < 8; l++) {
        CHECK(strlen(tui_spark_glyph(l, false)) == 1);
        CHECK(tui_text_width(tui_spark_glyph(l, true)) == 1);   /* one column each */
        for (int m = 0; m < l; m++) CHECK(strcmp(tui_spark_glyph(l, false), tui_spark_glyph(m, false)));
    }

    /* re-binning windows into columns */
    int64_t acc[8] = { 4, 4, 0, 0, 2, 2, 0, 3 }, dr[8] = { 4, 4, 4, 4, 4, 4, 0, 4 };
    double r[16];
    tui_spark_rebin(acc, dr, 8, 4, r);                       /* two windows per column */
    CHECK(r[0] == 1.0 && r[1] == 0.0 && r[2] == 0.5 && r[3] == 0.75);
    tui_spark_rebin(acc, dr, 8, 16, r);                      /* more columns: each window twice */
    CHECK(r[0] == 1.0 && r[1] == 1.0 && r[4] == 0.0 && r[15] == 0.75);
    CHECK(isnan(r[12]) && isnan(r[13]));                     /* window 6 drafted nothing */
    tui_spark_rebin(acc, dr, 8, 3, r);                       /* uneven: 2 + 3 + 3 windows */
    CHECK(r[0] == 1.0 && fabs(r[1] - 2.0 / 12) < 1e-12 && r[2] == 5.0 / 8);
    char buf[64];
    double rates[5] = { 0, 0.5, 1, NAN, 0.3 };
    CHECK(tui_spark_render(rates, 5, false, buf, sizeof buf) == 5);
    CHECK_STR(buf, "_=# :");
    CHECK(tui_spark_render(rates, 5, true, buf, sizeof buf) == 5);
    CHECK(tui_text_width(buf) == 5 && strlen(buf) == 4 * 3 + 1);
    CHECK(tui_spark_render(rates, 5, true, buf, 8) == 2);    /* never cuts a glyph */
    /* the caret column is the column whose windows hold the step */
    CHECK(tui_spark_col(0, 8, 4) == 0 && tui_spark_col(1, 8, 4) == 0 && tui_spark_col(2, 8, 4) == 1);
    CHECK(tui_spark_col(7, 8, 4) == 3 && tui_spark_col(99, 8, 4) == 3);
    CHECK(tui_spark_col(3, 8, 16) == 6);
    for (int n = 1; n < 40; n += 3)
        for (int cols = 1; cols < 50; cols += 7)
            for (int w = 0; w < n; w++) {
                int c = tui_spark_col(w, n, cols);
                int w0 = (int)((int64_t)c * n / cols), w1 = (int)((int64_t)(c + 1) * n / cols);
                if (w1 <= w0) w1 = w0 + 1;
                CHECK(c >= 0 && c < cols && w >= w0 && w < w1);
            }

    /* the view's geometry at 80x24 and 200x60, k = 4 and k = 16 */
    int sizes[][2] = { { 24, 80 }, { 60, 200 }, { 12, 40 } };
    int ks[] = { 1, 4, 16 };
    for (size_t i = 0; i < BT_ARRAY_SIZE(sizes); i++)
        for (size_t j = 0; j < BT_ARRAY_SIZE(ks); j++) {
            tui_screen s;
            tui_layout_screen(sizes[i][0], sizes[i][1], &s);
            tui_spec_layout l;
            tui_layout_spec(&s.body, ks[j], &l);
            CHECK(rect_inside(&l.summary, &s.body) && rect_inside(&l.list, &s.body) && rect_inside(&l.detail, &s.body));
            CHECK(!rects_overlap(&l.summary, &l.spark) && !rects_overlap(&l.spark, &l.list) && !rects_overlap(&l.list, &l.detail));
            CHECK(l.summary.h + l.spark.h + l.list.h + l.detail.h == s.body.h);
            CHECK(l.list.h >= 4);                            /* header + 3 verify steps at least */
            CHECK(l.spark_x + l.spark_w <= s.body.x + s.body.w && l.spark_w <= TUI_SPARK_BUCKETS);
            if (sizes[i][0] >= 24) CHECK(l.spark.h == 2 && l.spark_w >= 60);
        }
    tui_screen s;
    tui_layout_screen(24, 80, &s);
    tui_spec_layout l;
    tui_layout_spec(&s.body, 4, &l);
    CHECK(l.detail.h == 6);                                  /* rule + 4 drafts + 1 */
    CHECK(l.list.h == 13);                                   /* header + 12 verify steps */

    /* output runs collapse across gen and bonus (a wall is a wall), never into the prompt */
    tui_tok t[6] = {
        { .seq = 1, .step = 0, .id = 9, .role = 'p' }, { .seq = 2, .step = 0, .id = 9, .role = 'g' },
        { .seq = 7, .step = 5, .id = 9, .role = 'g' }, { .seq = 8, .step = 5, .id = 9, .role = 'b' },
        { .seq = 13, .step = 10, .id = 9, .role = 'g' }, { .seq = 14, .step = 10, .id = 4, .role = 'b' },
    };
    tui_cell cells[6];
    int nc = tui_collapse(t, 6, 2, cells);
    CHECK(nc == 3);
    CHECK(cells[0].role == 'p' && cells[0].count == 1);
    CHECK(cells[1].count == 4 && cells[1].seq0 == 2 && cells[1].seq1 == 13 && cells[1].step1 == 10);
    CHECK(cells[2].id == 4 && cells[2].role == 'b');
}

/* A speculative trace: step 0 prefill, then per round 2 draft steps and a
 * verify step (k = 2): rounds alternate full acceptance and a rejection at
 * draft 0; the last round accepts the stop token and drafts after it. Draft
 * tokens are in the token trail (role draft) but not in the text. */
static bool make_spec_trace(const char *path, const char *schema, int rounds)
{
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) return false;
    bool ok = exec(db, schema) == SQLITE_OK && exec(db, "PRAGMA application_id = 1112822339; PRAGMA user_version = 1; BEGIN") == SQLITE_OK;
    ok = ok && exec(db, "INSERT INTO tensors VALUES ('target', 0, 'logits', NULL, 'logits', 8), ('draft', 0, 'logits', NULL, 'logits', 8);"
                        "INSERT INTO meta VALUES ('spec_k', '2'), ('drafter', 'self:1'), ('schema_version', '1');"
                        "INSERT INTO steps VALUES (0, 'target', 'prefill', 0, 1, 1);"
                        "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (0, 0, 1, 'A', 'prompt'), (0, 1, 2, 'B', 'gen');") == SQLITE_OK;
    int step = 1, pos = 2;
    char sql[1024];
    for (int r = 0; r < rounds && ok; r++) {
        bool last = r == rounds - 1, reject = !last && r % 2;
        int d0 = step, d1 = step + 1, v = step + 2;
        int t0 = last ? 3 : 10 + r % 5, t1 = 20 + r % 5;      /* 3 is the stop token */
        snprintf(sql, sizeof sql,
                 "INSERT INTO steps VALUES (%d, 'draft', 'draft', %d, 1, 1), (%d, 'draft', 'draft', %d, 1, 1), (%d, 'target', 'verify', %d, 3, 1);"
                 "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (%d, %d, %d, '%s', 'draft'), (%d, %d, %d, 'e', 'draft');",
                 d0, pos - 1, d1, pos, v, pos - 1, d0, pos, t0, last ? "S" : "d", d1, pos + 1, t1);
        ok = exec(db, sql) == SQLITE_OK;
        if (last) {
            snprintf(sql, sizeof sql,
                     "INSERT INTO spec_steps VALUES (%d, 'self:1', 2, 1, NULL, 'none');"
                     "INSERT INTO spec_trail VALUES (%d, 0, %d, %d, 3, 1, 1, 3, 0.9, 1, 'match'), (%d, 1, %d, %d, %d, 1, 1, NULL, NULL, 0, 'after_stop');"
                     "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (%d, %d, 3, 'S', 'gen');",
                     v, v, pos, d0, v, pos + 1, d1, t1, v, pos);
            pos += 1;
        } else if (reject) {
            snprintf(sql, sizeof sql,
                     "INSERT INTO spec_steps VALUES (%d, 'self:1', 2, 0, 7, 'correction');"
                     "INSERT INTO spec_trail VALUES (%d, 0, %d, %d, %d, 1, 1, 7, 0.01, 0, 'mismatch'), (%d, 1, %d, %d, %d, 1, 1, NULL, NULL, 0, 'after_reject');"
                     "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (%d, %d, 7, 'C', 'bonus');"
                     "INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, chosen) VALUES (%d, %d, 8, 0, 0, 0, 7);",
                     v, v, pos, d0, t0, v, pos + 1, d1, t1, v, pos, v, pos - 1);
            pos += 1;
        } else {
            snprintf(sql, sizeof sql,
                     "INSERT INTO spec_steps VALUES (%d, 'self:1', 2, 2, 6, 'bonus');"
                     "INSERT INTO spec_trail VALUES (%d, 0, %d, %d, %d, 1, 1, %d, 0.9, 1, 'match'), (%d, 1, %d, %d, %d, 1, 1, %d, 0.8, 1, 'match');"
                     "INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (%d, %d, %d, 'd', 'gen'), (%d, %d, %d, 'e', 'gen'), (%d, %d, 6, 'F', 'bonus');"
                     "INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, chosen) VALUES (%d, %d, 8, 0, 0, 0, %d), (%d, %d, 8, 0, 0, 0, 6);",
                     v, v, pos, d0, t0, t0, v, pos + 1, d1, t1, t1, v, pos, t0, v, pos + 1, t1, v, pos + 2, v, pos - 1, t0, v, pos + 1);
            pos += 3;
        }
        ok = ok && exec(db, sql) == SQLITE_OK;
        step += 3;
    }
    ok = ok && exec(db, "COMMIT") == SQLITE_OK;
    sqlite3_close(db);
    return ok;
}

static void test_spec_model(void)
{
    char *schema = read_schema();
    if (!schema) { printf("SKIP (part): traces/schema.sql not found (set BT_SRCDIR); spec model tests not run\n"); return; }
    char path[64];
    snprintf(path, sizeof path, "/tmp/bt-test-tui-s-%d.db", (int)getpid());
    CHECK(make_spec_trace(path, schema, 21));
    tui_trace *tr = NULL;
    CHECK(tui_trace_open(path, &tr) == BT_OK);
    if (!tr) { fprintf(stderr, "%s\n", bt_errmsg()); free(schema); return; }
    CHECK(tui_trace_is_spec(tr));
    tui_spec_info si;
    CHECK(tui_spec_info_load(tr, &si) == BT_OK);
    CHECK(si.present && si.min_step == 3 && si.max_step == 63);
    CHECK_STR(si.drafter, "self:1");
    CHECK(si.spec_k == 2);
    /* 10 full rounds (2/2), 10 rejections (0/2), the stop round (1/2) */
    CHECK(si.exact && si.tot_rows == 21 && si.tot_drafted == 42 && si.tot_acc == 21);
    CHECK(si.n_win == 21 && si.win_lo[0] == 3 && si.win_lo[20] == 63);
    CHECK(tui_spec_window_of(&si, 3) == 0 && tui_spec_window_of(&si, 8) == 1 && tui_spec_window_of(&si, 9) == 2);

    tui_spec_row rows[8];
    int n = 0;
    CHECK(tui_spec_rows_load(tr, 0, +1, rows, 8, &n) == BT_OK && n == 8);
    CHECK(rows[0].step == 3 && rows[0].k == 2 && rows[0].accepted == 2 && rows[0].bonus_token == 6 && rows[0].n == 2);
    CHECK(rows[0].reject_at == -1 && rows[0].d[0].mark == TUI_SM_ACCEPT && rows[0].d[1].draft_step == 2);
    CHECK(rows[1].step == 6 && rows[1].reject_at == 0 && rows[1].d[0].mark == TUI_SM_REJECT && rows[1].d[0].target_token == 7);
    CHECK(rows[1].d[1].mark == TUI_SM_AFTER_REJECT && rows[1].d[1].target_token == -1 && isnan(rows[1].d[1].target_prob));
    CHECK_STR(rows[1].bonus_kind, "correction");
    CHECK(tui_spec_rows_load(tr, 62, -1, rows, 3, &n) == BT_OK && n == 3);
    CHECK(rows[0].step == 54 && rows[2].step == 60);        /* backwards, returned in step order */
    tui_spec_row row;
    CHECK(tui_spec_row_load(tr, 63, &row) == BT_OK);
    CHECK(row.bonus_token == -1 && row.d[1].mark == TUI_SM_AFTER_STOP && row.reject_at == -1);
    CHECK(tui_spec_row_load(tr, 4, &row) == BT_ENOTFOUND);   /* a draft step */
    CHECK(tui_spec_neighbor(tr, 3, +1, false) == 6);
    CHECK(tui_spec_neighbor(tr, 3, -1, false) == -1);
    CHECK(tui_spec_neighbor(tr, 0, +1, true) == 6);          /* the first rejection */
    CHECK(tui_spec_neighbor(tr, 6, +1, true) == 12);
    CHECK(tui_spec_neighbor(tr, 12, -1, true) == 6);
    CHECK(tui_spec_neighbor(tr, 60, +1, true) == -1);        /* after_stop is no rejection */
    CHECK(tui_spec_skip(tr, 3, 4) == 15 && tui_spec_skip(tr, 60, 10) == 63 && tui_spec_skip(tr, 15, -10) == 3);

    /* the text: prompt + output, drafts hidden; gen and bonus both shown */
    tui_tokens tk = { 0 };
    int64_t smin, smax;
    tui_trace_bounds(tr, NULL, NULL, &smin, &smax);
    CHECK(tui_tokens_load(tr, smin, TUI_SAN_UTF8, &tk) == BT_OK);
    int nd = 0, nb = 0, ng = 0;
    for (int i = 0; i < tk.n; i++) {
        nd += tk.cells[i].role == 'd';
        nb += tk.cells[i].role == 'b';
        ng += tk.cells[i].role == 'g';
    }
    CHECK(nd == 0 && nb == 20 && ng == 1 + 20 + 1);
    CHECK(tk.cells[tk.n - 1].id == 3);                       /* the stop token ends the text */
    CHECK(tui_tokens_search(tr, 0, "d", +1) > 0);            /* accepted drafts are text */
    tui_tokens_free(&tk);

    /* a verify step's logits: the sampled row by default, any used row on request */
    tui_step st = { 0 };
    CHECK(tui_step_load(tr, 3, &st) == BT_OK);
    CHECK(st.lg.present && st.lg.pos == 3 && st.lg.chosen == 6);
    CHECK(tui_step_logits_at(tr, &st, 1) == BT_OK && st.lg.pos == 1 && st.lg.chosen == 10);
    CHECK(tui_step_logits_at(tr, &st, 2) == BT_ENOTFOUND && st.lg.pos == 1);   /* unchanged */
    CHECK(tui_step_load(tr, 4, &st) == BT_OK);
    CHECK_STR(st.model, "draft");
    CHECK_STR(st.kind, "draft");
    CHECK(st.n_taps == 1);
    tui_step_free(&st);

    /* --dump spec: marks, the rate and the sparkline as plain text */
    tui_app a;
    CHECK(tui_app_init(&a, tr, TUI_SAN_UTF8, false) == BT_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(tui_dump_spec(&a, out, -1) == BT_OK);
    fclose(out);
    CHECK(strstr(text, "drafter self:1, k 2") != NULL);
    CHECK(strstr(text, "acceptance rate 50.0% (21 of 42 drafted tokens accepted over 21 verify steps)") != NULL);
    CHECK(strstr(text, "|#_#_#_#_#_#_#_#_#_#_=|") != NULL);
    CHECK(strstr(text, "x'd'>'C' -'e' | correction 'C'") != NULL);
    CHECK(strstr(text, "+'S' s'e' | stop") != NULL);
    free(text);
    out = open_memstream(&text, &len);
    CHECK(tui_dump_spec(&a, out, 7) == BT_OK);               /* not a verify step: the next one */
    fclose(out);
    CHECK(strstr(text, "step 7 is not a verify step; the next one is 9") && strstr(text, "verify step 9: drafter self:1"));
    free(text);
    tui_app_free(&a);
    tui_trace_close(tr);

    /* not speculative: an empty spec_steps, and a trace from before the tables */
    CHECK(make_trace(path, schema));
    CHECK(tui_trace_open(path, &tr) == BT_OK);
    CHECK(!tui_trace_is_spec(tr));
    CHECK(tui_spec_info_load(tr, &si) == BT_OK && !si.present);
    CHECK(tui_spec_neighbor(tr, 0, +1, true) == -1);
    tui_trace_close(tr);
    sqlite3 *db;
    sqlite3_open(path, &db);
    exec(db, "DROP VIEW v_spec_trail; DROP TABLE spec_trail; DROP TABLE spec_steps");
    sqlite3_close(db);
    CHECK(tui_trace_open(path, &tr) == BT_OK);
    if (tr) {
        CHECK(tui_spec_info_load(tr, &si) == BT_OK && !si.present);
        CHECK(tui_app_init(&a, tr, TUI_SAN_UTF8, false) == BT_OK);
        out = open_memstream(&text, &len);
        CHECK(tui_dump_spec(&a, out, -1) == BT_OK);
        fclose(out);
        CHECK(strstr(text, "not a speculative trace") != NULL);
        free(text);
        tui_app_free(&a);
        tui_trace_close(tr);
    }
    unlink(path);
    free(schema);
}

int main(void)
{
    test_layout();
    test_flow();
    test_fit();
    test_collapse();
    test_health();
    test_sanitize();
    test_grid();
    test_keys();
    test_model();
    test_spec_pure();
    test_spec_model();
    printf("test_tui: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
