/* picture.c - the layers x steps picture of a trace; see picture.h.
 *
 * Rendering (cells, outlines, text in a small built-in 5x7 bitmap font) is
 * plain pixel work on an RGB buffer; the PNG encoding is libpng's. Without
 * libpng the renderer still builds (tests of the layout need no PNG) and
 * bt_picture_save says the build cannot write PNG. */
#include "config.h"
#include "trace/picture.h"
#include "trace/analyze.h"
#include "trace/headroom.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LIBPNG
#include <png.h>
#include <setjmp.h>
#endif

/* ---- font: 5x7 glyphs for printable ASCII, plus an ellipsis (127) ---- */

#define FW 5
#define FH 7
#define ADV 6           /* glyph advance, horizontal */
#define LINE_H 10       /* text line pitch */
#define VADV 9          /* stacked (vertical) glyph pitch */

static const char *const font_src[96][7] = {
    /* ' ' */ { ".....", ".....", ".....", ".....", ".....", ".....", "....." },
    /* '!' */ { "..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.." },
    /* '"' */ { ".#.#.", ".#.#.", ".....", ".....", ".....", ".....", "....." },
    /* '#' */ { ".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#." },
    /* '$' */ { "..#..", ".####", "#.#..", ".###.", "..#.#", "####.", "..#.." },
    /* '%' */ { "##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##" },
    /* '&' */ { ".##..", "#..#.", "#.#..", ".#...", "#.#.#", "#..#.", ".##.#" },
    /* ''' */ { "..#..", "..#..", ".....", ".....", ".....", ".....", "....." },
    /* '(' */ { "...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#." },
    /* ')' */ { ".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..." },
    /* '*' */ { ".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....." },
    /* '+' */ { ".....", "..#..", "..#..", "#####", "..#..", "..#..", "....." },
    /* ',' */ { ".....", ".....", ".....", ".....", ".##..", "..#..", ".#..." },
    /* '-' */ { ".....", ".....", ".....", "#####", ".....", ".....", "....." },
    /* '.' */ { ".....", ".....", ".....", ".....", ".....", ".##..", ".##.." },
    /* '/' */ { ".....", "....#", "...#.", "..#..", ".#...", "#....", "....." },
    /* '0' */ { ".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###." },
    /* '1' */ { "..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###." },
    /* '2' */ { ".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####" },
    /* '3' */ { "#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###." },
    /* '4' */ { "...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#." },
    /* '5' */ { "#####", "#....", "####.", "....#", "....#", "#...#", ".###." },
    /* '6' */ { "..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###." },
    /* '7' */ { "#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..." },
    /* '8' */ { ".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###." },
    /* '9' */ { ".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.." },
    /* ':' */ { ".....", ".##..", ".##..", ".....", ".##..", ".##..", "....." },
    /* ';' */ { ".....", ".##..", ".##..", ".....", ".##..", "..#..", ".#..." },
    /* '<' */ { "...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#." },
    /* '=' */ { ".....", ".....", "#####", ".....", "#####", ".....", "....." },
    /* '>' */ { ".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..." },
    /* '?' */ { ".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.." },
    /* '@' */ { ".###.", "#...#", "....#", ".##.#", "#.#.#", "#.#.#", ".###." },
    /* 'A' */ { ".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#" },
    /* 'B' */ { "####.", "#...#", "#...#", "####.", "#...#", "#...#", "####." },
    /* 'C' */ { ".###.", "#...#", "#....", "#....", "#....", "#...#", ".###." },
    /* 'D' */ { "###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.." },
    /* 'E' */ { "#####", "#....", "#....", "####.", "#....", "#....", "#####" },
    /* 'F' */ { "#####", "#....", "#....", "####.", "#....", "#....", "#...." },
    /* 'G' */ { ".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####" },
    /* 'H' */ { "#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#" },
    /* 'I' */ { ".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###." },
    /* 'J' */ { "..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.." },
    /* 'K' */ { "#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#" },
    /* 'L' */ { "#....", "#....", "#....", "#....", "#....", "#....", "#####" },
    /* 'M' */ { "#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#" },
    /* 'N' */ { "#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#" },
    /* 'O' */ { ".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###." },
    /* 'P' */ { "####.", "#...#", "#...#", "####.", "#....", "#....", "#...." },
    /* 'Q' */ { ".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#" },
    /* 'R' */ { "####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#" },
    /* 'S' */ { ".####", "#....", "#....", ".###.", "....#", "....#", "####." },
    /* 'T' */ { "#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.." },
    /* 'U' */ { "#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###." },
    /* 'V' */ { "#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.." },
    /* 'W' */ { "#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#." },
    /* 'X' */ { "#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#" },
    /* 'Y' */ { "#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.." },
    /* 'Z' */ { "#####", "....#", "...#.", "..#..", ".#...", "#....", "#####" },
    /* '[' */ { ".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###." },
    /* '\' */ { ".....", "#....", ".#...", "..#..", "...#.", "....#", "....." },
    /* ']' */ { ".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###." },
    /* '^' */ { "..#..", ".#.#.", "#...#", ".....", ".....", ".....", "....." },
    /* '_' */ { ".....", ".....", ".....", ".....", ".....", ".....", "#####" },
    /* '`' */ { ".#...", "..#..", ".....", ".....", ".....", ".....", "....." },
    /* 'a' */ { ".....", ".....", ".###.", "....#", ".####", "#...#", ".####" },
    /* 'b' */ { "#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####." },
    /* 'c' */ { ".....", ".....", ".###.", "#....", "#....", "#...#", ".###." },
    /* 'd' */ { "....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####" },
    /* 'e' */ { ".....", ".....", ".###.", "#...#", "#####", "#....", ".###." },
    /* 'f' */ { "..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..." },
    /* 'g' */ { ".....", ".####", "#...#", "#...#", ".####", "....#", ".###." },
    /* 'h' */ { "#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#" },
    /* 'i' */ { "..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###." },
    /* 'j' */ { "...#.", ".....", "..##.", "...#.", "...#.", "#..#.", ".##.." },
    /* 'k' */ { "#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#." },
    /* 'l' */ { ".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###." },
    /* 'm' */ { ".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#" },
    /* 'n' */ { ".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#" },
    /* 'o' */ { ".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###." },
    /* 'p' */ { ".....", ".....", "####.", "#...#", "####.", "#....", "#...." },
    /* 'q' */ { ".....", ".....", ".##.#", "#..##", ".####", "....#", "....#" },
    /* 'r' */ { ".....", ".....", "#.##.", "##..#", "#....", "#....", "#...." },
    /* 's' */ { ".....", ".....", ".####", "#....", ".###.", "....#", "####." },
    /* 't' */ { ".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##." },
    /* 'u' */ { ".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#" },
    /* 'v' */ { ".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.." },
    /* 'w' */ { ".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#." },
    /* 'x' */ { ".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#" },
    /* 'y' */ { ".....", ".....", "#...#", "#...#", ".####", "....#", ".###." },
    /* 'z' */ { ".....", ".....", "#####", "...#.", "..#..", ".#...", "#####" },
    /* '{' */ { "...#.", "..#..", "..#..", ".#...", "..#..", "..#..", "...#." },
    /* '|' */ { "..#..", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.." },
    /* '}' */ { ".#...", "..#..", "..#..", "...#.", "..#..", "..#..", ".#..." },
    /* '~' */ { ".....", ".....", ".#...", "#.#.#", "...#.", ".....", "....." },
    /* 127: ellipsis */ { ".....", ".....", ".....", ".....", ".....", ".....", "#.#.#" },
};
#define GLYPH_ELLIPSIS 127

/* Letters with a descender: 8 rows (the eighth below the baseline). */
static const struct { char ch; const char *rows[8]; } font_desc[] = {
    { 'g', { ".....", ".....", ".####", "#...#", "#...#", ".####", "....#", ".###." } },
    { 'j', { "...#.", ".....", "..##.", "...#.", "...#.", "...#.", "#..#.", ".##.." } },
    { 'p', { ".....", ".....", "####.", "#...#", "#...#", "####.", "#....", "#...." } },
    { 'q', { ".....", ".....", ".####", "#...#", "#...#", ".####", "....#", "....#" } },
    { 'y', { ".....", ".....", "#...#", "#...#", "#...#", ".####", "....#", ".###." } },
};

/* ---- drawing ---- */

typedef struct canvas { int w, h; uint8_t *px; } canvas;

static void put(canvas *c, int x, int y, uint32_t rgb)
{
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    uint8_t *p = c->px + ((size_t)y * c->w + x) * 3;
    p[0] = (uint8_t)(rgb >> 16); p[1] = (uint8_t)(rgb >> 8); p[2] = (uint8_t)rgb;
}

static void fill(canvas *c, int x, int y, int w, int h, uint32_t rgb)
{
    for (int j = 0; j < h; j++)
        for (int i = 0; i < w; i++) put(c, x + i, y + j, rgb);
}

/* An outline of thickness t inside the rectangle. */
static void outline(canvas *c, int x, int y, int w, int h, int t, uint32_t rgb)
{
    fill(c, x, y, w, t, rgb);
    fill(c, x, y + h - t, w, t, rgb);
    fill(c, x, y, t, h, rgb);
    fill(c, x + w - t, y, t, h, rgb);
}

static void glyph(canvas *c, int x, int y, int ch, uint32_t rgb)
{
    if (ch < 32 || ch > 127) ch = '?';
    for (size_t k = 0; k < BT_ARRAY_SIZE(font_desc); k++) {
        if (font_desc[k].ch != ch) continue;
        for (int j = 0; j < FH + 1; j++)
            for (int i = 0; i < FW; i++)
                if (font_desc[k].rows[j][i] == '#') put(c, x + i, y + j, rgb);
        return;
    }
    const char *const *g = font_src[ch - 32];
    for (int j = 0; j < FH; j++)
        for (int i = 0; i < FW; i++)
            if (g[j][i] == '#') put(c, x + i, y + j, rgb);
}

/* Printable ASCII text on one line; anything else as '?'. Clipped at max_x. */
static int text(canvas *c, int x, int y, int max_x, uint32_t rgb, const char *s)
{
    for (; *s && x + FW <= max_x; s++, x += ADV) {
        unsigned char u = (unsigned char)*s;
        glyph(c, x, y, u >= 32 && u < 127 ? u : '?', rgb);
    }
    return x;
}

static int text_width(const char *s) { return (int)strlen(s) * ADV; }

/* ---- colours ---- */

static uint32_t mix(uint32_t a, uint32_t b, double t)
{
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    uint32_t o = 0;
    for (int sh = 16; sh >= 0; sh -= 8) {
        double va = (a >> sh) & 0xff, vb = (b >> sh) & 0xff;
        o |= (uint32_t)lround(va + (vb - va) * t) << sh;
    }
    return o;
}

#define RAMP_LO 0xdeebf7u      /* absmax <= 1e-6 of the limit */
#define RAMP_MID 0x4292c6u
#define RAMP_HI 0x08306bu      /* half the limit */
#define TEXT_C 0x202020u
#define DIM_C 0x808080u
#define ESC_C 0xb03000u        /* escapes in token text */
#define BG_C 0xffffffu

static uint32_t ramp(double ratio)
{
    /* log10(ratio) from -6 to log10(0.5) */
    double lo = -6, hi = log10(0.5);
    double t = ratio > 0 ? (log10(ratio) - lo) / (hi - lo) : 0;
    if (t < 0.5) return mix(RAMP_LO, RAMP_MID, t * 2);
    return mix(RAMP_MID, RAMP_HI, (t - 0.5) * 2);
}

/* One cell: what the taps of one layer (row) held at the steps of a column. */
typedef struct cell {
    bool recorded, nonfinite;
    double absmax;          /* largest finite absmax (NAN: none) */
} cell;

static uint32_t cell_colour(const cell *c)
{
    if (!c->recorded) return BT_PIC_UNTAPPED;
    if (c->nonfinite) return BT_PIC_NONFINITE;
    if (isnan(c->absmax)) return BT_PIC_UNTAPPED;
    double r = c->absmax / BT_F16_MAX;
    if (r > 1) return BT_PIC_OVER;
    if (r > 0.5) return BT_PIC_HALF;
    return ramp(r);
}

/* ---- the model: steps, rows, cells ---- */

typedef struct step_list { int *v; int n, cap, other; } step_list;

static int collect_target(void *user, const bt_trace_step_row *s)
{
    step_list *l = user;
    if (strcmp(s->model, "target")) { l->other++; return 0; }
    return BT_VEC_PUSH(l->v, l->n, l->cap, s->step);
}

static int col_of_step(const step_list *l, int spc, int step)
{
    int lo = 0, hi = l->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (l->v[mid] == step) return mid / spc;
        if (l->v[mid] < step) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

/* The token pieces each step produced (output tokens: gen and bonus). */
typedef struct tok_cb { const step_list *steps; char **piece; size_t *len; bool *redacted; } tok_cb;

static int token_cb(void *user, const bt_trace_token_row *t)
{
    tok_cb *k = user;
    if (!t->role || (strcmp(t->role, "gen") && strcmp(t->role, "bonus"))) return 0;
    int c = col_of_step(k->steps, 1, t->step);
    if (c < 0) return 0;
    if (!t->piece) { k->redacted[c] = true; return 0; }
    if (k->len[c] > 64) return 0;
    char *n = realloc(k->piece[c], k->len[c] + t->piece_len + 1);
    if (!n) return bt_error(BT_ENOMEM, "out of memory");
    memcpy(n + k->len[c], t->piece, t->piece_len);
    k->len[c] += t->piece_len;
    n[k->len[c]] = 0;
    k->piece[c] = n;
    return 0;
}

/* A piece as glyphs: printable ASCII as itself (space as a dim '_'), the
 * rest as escapes in ESC_C. At most max glyphs, the last an ellipsis when
 * cut. */
typedef struct tglyph { int ch; uint32_t rgb; } tglyph;

static int piece_glyphs(const char *s, size_t len, tglyph *out, int max)
{
    int n = 0;
    char esc[16];
    for (size_t i = 0; i < len && n < max;) {
        unsigned char u = (unsigned char)s[i];
        const char *e = NULL;
        if (u == ' ') { out[n++] = (tglyph){ '_', DIM_C }; i++; continue; }
        if (u > 32 && u < 127) { out[n++] = (tglyph){ u, TEXT_C }; i++; continue; }
        if (u == '\n') e = "\\n";
        else if (u == '\t') e = "\\t";
        else if (u == '\r') e = "\\r";
        size_t used = 1;
        if (!e && u >= 0xc2 && u <= 0xf4) {
            int need = u >= 0xf0 ? 3 : u >= 0xe0 ? 2 : 1;
            uint32_t cp = u & (0x3f >> need);
            bool ok = i + (size_t)need < len + 0;
            for (int k = 1; ok && k <= need; k++) {
                if (i + k >= len || ((unsigned char)s[i + k] & 0xc0) != 0x80) ok = false;
                else cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
            }
            if (ok && cp >= 0x80) {
                snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
                e = esc;
                used = (size_t)need + 1;
            }
        }
        if (!e) { snprintf(esc, sizeof esc, "\\x%02X", u); e = esc; }
        for (const char *p = e; *p && n < max; p++) out[n++] = (tglyph){ (unsigned char)*p, ESC_C };
        i += used;
    }
    return n;
}

#define TOK_GLYPHS 8

static void draw_legend_item(canvas *c, int *x, int y, uint32_t fill_rgb, uint32_t line_rgb, int t, const char *label)
{
    fill(c, *x, y, 9, 9, fill_rgb);
    if (t) outline(c, *x, y, 9, 9, t, line_rgb);
    *x += 12;
    *x = text(c, *x, y + 1, c->w, TEXT_C, label) + 10;
}

static int legend_width(void)
{
    static const char *const labels[] = { "non-finite", "> f16 max", "> half", "< half (log)", "not tapped", "first bad", "walk-back" };
    int w = 0;
    for (size_t i = 0; i < BT_ARRAY_SIZE(labels); i++) w += 12 + text_width(labels[i]) + 10;
    return w + 3 * 9;   /* the ramp is three swatches */
}

void bt_picture_free(bt_picture *p)
{
    free(p->rgb);
    memset(p, 0, sizeof(*p));
}

/* What bt_picture_render builds, step by step: the target steps, the rows
 * the tensors map to, the cells, the walk-back links and the token pieces,
 * then the geometry and the canvas they are drawn on. */
typedef struct render {
    bt_picture *out;
    step_list sl;
    int n;                  /* target steps (sl.n) */
    int spc, cols, rows;    /* steps per column, grid size */
    int n_layers;
    bool in_row, out_row;
    int *slot_row;          /* tensor slot -> row, -1: not drawn */
    int max_idx;            /* slots in slot_row */
    cell *cells;            /* rows x cols */
    bt_prop_link *links;
    int n_links;
    bool tokens;            /* the token row is drawn */
    char **piece;           /* per column: the step's token text */
    size_t *plen;
    bool *pred;             /* per column: the text was redacted */
    int x0, y0, cw, ch, grid_w, grid_h, tok_h, width;
    char title[160];
    canvas cv;
} render;

#define MARGIN 8

/* Rows: layers 0..n-1 of the target's tensors, plus "in" for the layerless
 * tensors before the first layer slot and "out" for those after it. */
static int map_rows(render *d, bt_trace_reader *r)
{
    const bt_trace_tensor_row *tens;
    int n_tens = 0;
    bt_trace_tensors(r, "target", &tens, &n_tens);
    int n_layers = 0, first_layer_slot = -1;
    for (int i = 0; i < n_tens; i++) {
        n_layers = BT_MAX(n_layers, tens[i].layer + 1);
        if (tens[i].layer >= 0 && (first_layer_slot < 0 || tens[i].idx < first_layer_slot)) first_layer_slot = tens[i].idx;
    }
    int max_idx = 0;
    for (int i = 0; i < n_tens; i++) max_idx = BT_MAX(max_idx, tens[i].idx + 1);
    if (!(d->slot_row = malloc((size_t)(max_idx ? max_idx : 1) * sizeof(int)))) return bt_error(BT_ENOMEM, "out of memory");
    bool in_row = false, out_row = false;
    for (int i = 0; i < n_tens; i++) {
        if (tens[i].layer >= 0) continue;
        if (first_layer_slot >= 0 && tens[i].idx < first_layer_slot) in_row = true; else out_row = true;
    }
    for (int i = 0; i < max_idx; i++) d->slot_row[i] = -1;
    for (int i = 0; i < n_tens; i++) {
        const bt_trace_tensor_row *t = &tens[i];
        if (t->idx < 0) continue;
        if (t->layer >= 0) d->slot_row[t->idx] = in_row + t->layer;
        else if (first_layer_slot >= 0 && t->idx < first_layer_slot) d->slot_row[t->idx] = 0;
        else d->slot_row[t->idx] = in_row + n_layers;
    }
    d->max_idx = max_idx;
    d->n_layers = n_layers;
    d->in_row = in_row;
    d->out_row = out_row;
    d->rows = n_layers + in_row + out_row;
    return BT_OK;
}

/* Steps per column: 1, or the smallest 1-2-5 number that keeps the columns
 * within BT_PICTURE_MAX_COLS (so the step labels are round). */
static void choose_columns(render *d)
{
    int n = d->n, spc = 1;
    while ((n + spc - 1) / spc > BT_PICTURE_MAX_COLS) {
        int k = spc;
        while (k >= 10) k /= 10;
        spc = k == 2 ? spc / 2 * 5 : spc * 2;
    }
    d->spc = spc;
    d->cols = n ? (n + spc - 1) / spc : 0;
    bt_picture *out = d->out;
    out->n_steps = n;
    out->steps_per_col = spc;
    out->cols = d->cols;
    out->rows = d->rows;
    out->n_layers = d->n_layers;
    out->in_row = d->in_row;
    out->out_row = d->out_row;
    if (n) { out->first_step = d->sl.v[0]; out->last_step = d->sl.v[n - 1]; }
}

/* Each cell: recorded at all, non-finite anywhere, else the largest finite
 * absmax of its layer's taps over its steps. */
static int fill_cells(render *d, bt_trace_reader *r)
{
    int cols = d->cols, rows = d->rows, rc = BT_OK;
    if (!(d->cells = calloc((size_t)(cols ? cols : 1) * (rows ? rows : 1), sizeof(cell)))) return bt_error(BT_ENOMEM, "out of memory");
    for (int i = 0; i < cols * rows; i++) d->cells[i].absmax = NAN;
    bt_trace_tap_row *taps = NULL;
    for (int s = 0; s < d->n && rc == BT_OK; s++) {
        int n_taps = 0;
        free(taps);
        taps = NULL;
        if ((rc = bt_trace_step_taps(r, d->sl.v[s], &taps, &n_taps))) break;
        int c = s / d->spc;
        for (int j = 0; j < n_taps; j++) {
            const bt_trace_tap_row *t = &taps[j];
            if (!t->recorded || t->idx < 0 || t->idx >= d->max_idx || d->slot_row[t->idx] < 0) continue;
            cell *x = &d->cells[d->slot_row[t->idx] * cols + c];
            x->recorded = true;
            if (bt_trace_tap_bad(t)) x->nonfinite = true;
            else if (!isnan(t->absmax) && !(t->absmax <= x->absmax)) x->absmax = t->absmax;
        }
    }
    free(taps);
    return rc;
}

/* The token text of each column, when one column is one step. */
static int collect_tokens(render *d, bt_trace_reader *r)
{
    d->tokens = d->spc == 1 && d->n > 0;
    if (!d->tokens) return BT_OK;
    int cols = d->cols, rc;
    d->piece = calloc((size_t)cols, sizeof(char *));
    d->plen = calloc((size_t)cols, sizeof(size_t));
    d->pred = calloc((size_t)cols, sizeof(bool));
    if (!d->piece || !d->plen || !d->pred) return bt_error(BT_ENOMEM, "out of memory");
    tok_cb k = { &d->sl, d->piece, d->plen, d->pred };
    if ((rc = bt_trace_tokens_each(r, 0, 0, token_cb, &k)) < 0) return rc;
    for (int c = 0; c < cols; c++) if (d->pred[c]) d->out->tokens_redacted = true;
    return BT_OK;
}

/* Cell size, the grid's place, the title and the image size; allocates
 * the image, white. */
static int lay_out(render *d, bt_trace_reader *r)
{
    bt_picture *out = d->out;
    int cw = d->cols ? 960 / d->cols : 16;
    cw = BT_MAX(d->tokens ? 7 : 4, BT_MIN(24, cw));
    int ch = d->rows ? 480 / d->rows : 12;
    ch = BT_MAX(4, BT_MIN(12, ch));
    char lab[16];
    snprintf(lab, sizeof lab, "%d", d->n_layers > 0 ? d->n_layers - 1 : 0);
    int label_w = BT_MAX(text_width("step"), text_width(lab)) + 6;
    int x0 = MARGIN + label_w;
    int y0 = MARGIN + 2 * LINE_H + 2 + LINE_H + 3;      /* title, caption, step numbers, ticks */
    d->grid_w = d->cols * cw;
    d->grid_h = d->rows * ch;
    d->tok_h = d->tokens ? 4 + TOK_GLYPHS * VADV : 0;
    const char *model = bt_trace_meta_get(r, "model_name");
    char safe_model[64] = "";
    if (model) {
        size_t o = 0;
        for (const char *p = model; *p && o + 1 < sizeof safe_model; p++)
            safe_model[o++] = (unsigned char)*p >= 32 && (unsigned char)*p < 127 ? *p : '?';
        safe_model[o] = 0;
    }
    snprintf(d->title, sizeof d->title, "bangtrace: largest |x| per layer and step vs the f16 max 65504%s%s",
             model ? " - " : "", safe_model);
    int width = BT_MAX(x0 + d->grid_w + MARGIN, MARGIN + legend_width() + MARGIN);
    width = BT_MAX(width, MARGIN + text_width(d->title) + MARGIN);
    int height = y0 + d->grid_h + d->tok_h + 6 + LINE_H + 4 + 2 * LINE_H + MARGIN;
    d->x0 = x0; d->y0 = y0; d->cw = cw; d->ch = ch; d->width = width;
    out->x0 = x0; out->y0 = y0; out->cw = cw; out->ch = ch;
    out->width = width; out->height = height;
    out->tokens_drawn = d->tokens;
    if (!(out->rgb = malloc((size_t)width * height * 3))) return bt_error(BT_ENOMEM, "out of memory");
    d->cv = (canvas){ width, height, out->rgb };
    fill(&d->cv, 0, 0, width, height, BG_C);
    return BT_OK;
}

/* The title, and the caption (also kept in out->caption for the markdown). */
static void draw_title(render *d)
{
    bt_picture *out = d->out;
    int n = d->n;
    text(&d->cv, MARGIN, MARGIN, d->width - MARGIN, TEXT_C, d->title);
    if (!n) snprintf(out->caption, sizeof out->caption, "no target steps in the trace");
    else if (d->spc > 1)
        snprintf(out->caption, sizeof out->caption, "%d steps (%d-%d) downsampled to %d columns of %d steps: each cell is the worst of its steps",
                 n, out->first_step, out->last_step, d->cols, d->spc);
    else
        snprintf(out->caption, sizeof out->caption, "%d steps (%d-%d), one column per step; rows: %slayers 0-%d%s", n,
                 out->first_step, out->last_step, d->in_row ? "in, " : "", d->n_layers - 1, d->out_row ? ", out" : "");
    if (d->sl.other) {
        size_t cl = strlen(out->caption);
        snprintf(out->caption + cl, sizeof out->caption - cl, "; target passes only (%d draft passes not drawn)", d->sl.other);
    }
    text(&d->cv, MARGIN, MARGIN + LINE_H, d->width - MARGIN, DIM_C, out->caption);
}

/* Step numbers over the grid (a label every k columns, k a 1-2-5 step that
 * fits) and layer labels beside it (every row when they fit, else every
 * 5th or 10th layer). */
static void draw_axes(render *d)
{
    canvas *cv = &d->cv;
    int x0 = d->x0, y0 = d->y0, cw = d->cw, ch = d->ch, width = d->width;
    char lab[16];
    int digits = (int)strlen((snprintf(lab, sizeof lab, "%d", d->out->last_step), lab));
    int need = digits * ADV + 6;
    int k = 1;
    static const int nice[] = { 1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000 };
    for (size_t i = 0; i < BT_ARRAY_SIZE(nice); i++) { k = nice[i]; if (k * cw >= need) break; }
    int ty = y0 - LINE_H - 3;
    for (int c = 0; c < d->cols; c += k) {
        snprintf(lab, sizeof lab, "%d", d->sl.v[c * d->spc]);
        int x = x0 + c * cw;
        if (x + text_width(lab) > width - 2) break;
        text(cv, x, ty, width, TEXT_C, lab);
        fill(cv, x, y0 - 3, 1, 2, TEXT_C);
    }
    text(cv, x0 - 4 - text_width("step"), ty, x0, DIM_C, "step");

    int rows = d->rows;
    int every = ch >= 8 ? 1 : ch >= 4 ? (ch * 5 >= 10 ? 5 : 10) : 10;
    for (int w = 0; w < rows; w++) {
        const char *l;
        if (d->in_row && w == 0) l = "in";
        else if (d->out_row && w == rows - 1) l = "out";
        else {
            int layer = w - d->in_row;
            if (layer % every) continue;
            snprintf(lab, sizeof lab, "%d", layer);
            l = lab;
        }
        int ly = y0 + w * ch + ch / 2 - FH / 2;
        if (ch < FH + 1 && ((d->in_row && w == 0) || (d->out_row && w == rows - 1))) continue;  /* no room beside layer 0 */
        text(cv, x0 - 4 - text_width(l), ly, x0, TEXT_C, l);
    }
}

/* The cells, the walk-back path over them, then the first bad cell. */
static void draw_grid(render *d)
{
    canvas *cv = &d->cv;
    bt_picture *out = d->out;
    int x0 = d->x0, y0 = d->y0, cw = d->cw, ch = d->ch;
    for (int w = 0; w < d->rows; w++)
        for (int c = 0; c < d->cols; c++)
            fill(cv, x0 + c * cw, y0 + w * ch, cw, ch, cell_colour(&d->cells[w * d->cols + c]));
    outline(cv, x0 - 1, y0 - 1, d->grid_w + 2, d->grid_h + 2, 1, DIM_C);

    int path_n = 0;
    bool have_first = false;
    for (int i = d->n_links - 1; i >= 0; i--) {
        const bt_bad_tensor *t = &d->links[i].t;
        if (strcmp(t->model, "target") || t->idx < 0 || t->idx >= d->max_idx || d->slot_row[t->idx] < 0) continue;
        int c = col_of_step(&d->sl, d->spc, t->step), w = d->slot_row[t->idx];
        if (c < 0) continue;
        path_n++;
        if (i == 0 && d->links[i].kind == BT_PROP_ORIGIN) {
            /* a ring just outside the cell, so the cell keeps its colour
             * and a cell of a few pixels still stands out */
            int t = BT_MIN(cw, ch) < 8 ? 3 : 2;
            outline(cv, x0 + c * cw - t, y0 + w * ch - t, cw + 2 * t, ch + 2 * t, t, BT_PIC_FIRST);
            have_first = true;
            out->first_col = c;
            out->first_row = w;
        } else outline(cv, x0 + c * cw, y0 + w * ch, cw, ch, 1, BT_PIC_PATH);
    }
    out->has_first = have_first;
    out->n_path = path_n;
}

/* The token row under the grid (when drawn); returns the y below it. */
static int draw_tokens(render *d)
{
    canvas *cv = &d->cv;
    int x0 = d->x0, cw = d->cw;
    int y = d->y0 + d->grid_h + 4;
    if (d->tokens) {
        text(cv, x0 - 4 - text_width("tok"), y, x0, DIM_C, "tok");
        for (int c = 0; c < d->cols; c++) {
            if (d->pred[c] && !d->piece[c]) { fill(cv, x0 + c * cw + cw / 2 - 1, y + 2, 3, 3, DIM_C); continue; }  /* redacted */
            tglyph g[TOK_GLYPHS + 8];
            int ng = d->piece[c] ? piece_glyphs(d->piece[c], d->plen[c], g, TOK_GLYPHS + 1) : 0;
            if (ng > TOK_GLYPHS) { ng = TOK_GLYPHS; g[TOK_GLYPHS - 1] = (tglyph){ GLYPH_ELLIPSIS, DIM_C }; }
            int gx = x0 + c * cw + (cw - FW) / 2;
            for (int i = 0; i < ng; i++) glyph(cv, gx, y + i * VADV, g[i].ch, g[i].rgb);
        }
        y += d->tok_h - 4;
    }
    return y + 6;
}

/* The legend at y; returns the y below it. */
static int draw_legend(canvas *cv, int y)
{
    int lx = MARGIN;
    draw_legend_item(cv, &lx, y, BT_PIC_NONFINITE, 0, 0, "non-finite");
    draw_legend_item(cv, &lx, y, BT_PIC_OVER, 0, 0, "> f16 max");
    draw_legend_item(cv, &lx, y, BT_PIC_HALF, 0, 0, "> half");
    fill(cv, lx, y, 9, 9, ramp(1e-6)); lx += 9;
    fill(cv, lx, y, 9, 9, ramp(1e-3)); lx += 9;
    draw_legend_item(cv, &lx, y, ramp(0.5), 0, 0, "< half (log)");
    draw_legend_item(cv, &lx, y, BT_PIC_UNTAPPED, 0, 0, "not tapped");
    draw_legend_item(cv, &lx, y, BG_C, BT_PIC_FIRST, 2, "first bad");
    draw_legend_item(cv, &lx, y, BG_C, BT_PIC_PATH, 1, "walk-back");
    return y + LINE_H + 4;
}

/* The finding in words, and what the token row shows. */
static void draw_finding(render *d, int y)
{
    bt_picture *out = d->out;
    char line[512];
    if (d->n_links > 0) {
        const bt_bad_tensor *f = &d->links[0].t;
        char l[16];
        snprintf(line, sizeof line, "first non-finite: step %d, layer %s, %s%s", f->step, bt_layer_label(f->layer, l, sizeof l),
                 f->tensor, strcmp(f->model, "target") ? " (draft pass, not drawn)" : out->has_first ? " (green outline)" : "");
    } else snprintf(line, sizeof line, "no non-finite tap in the trace");
    text(&d->cv, MARGIN, y, d->width - MARGIN, TEXT_C, line);
    y += LINE_H;
    if (!d->tokens && d->n) snprintf(line, sizeof line, "token row left out: %d steps per column", d->spc);
    else if (out->tokens_redacted) snprintf(line, sizeof line, "token row: the token each step produced; a grey dot: text redacted, not drawn");
    else if (d->tokens) snprintf(line, sizeof line, "token row: the token each step produced (escapes in brown)");
    else line[0] = 0;
    text(&d->cv, MARGIN, y, d->width - MARGIN, DIM_C, line);
}

int bt_picture_render(bt_trace_reader *r, bt_picture *out)
{
    memset(out, 0, sizeof(*out));
    out->first_step = out->last_step = -1;
    render d = { .out = out };
    int rc;
    if ((rc = bt_trace_steps_each(r, INT32_MIN, INT32_MAX, collect_target, &d.sl)) < 0) goto done;
    d.n = d.sl.n;
    if ((rc = map_rows(&d, r))) goto done;
    choose_columns(&d);
    if ((rc = fill_cells(&d, r))) goto done;
    /* the walk-back path (target pass only: the grid is the target's) */
    if ((rc = bt_analyze_walk(r, 16, &d.links, &d.n_links))) goto done;
    if ((rc = collect_tokens(&d, r))) goto done;
    if ((rc = lay_out(&d, r))) goto done;
    draw_title(&d);
    draw_axes(&d);
    draw_grid(&d);
    int y = draw_tokens(&d);
    y = draw_legend(&d.cv, y);
    draw_finding(&d, y);
    rc = BT_OK;
done:
    if (d.piece) for (int c = 0; c < d.cols; c++) free(d.piece[c]);
    free(d.piece); free(d.plen); free(d.pred);
    free(d.links); free(d.cells); free(d.slot_row); free(d.sl.v);
    if (rc) bt_picture_free(out);
    return rc;
}

/* ---- PNG ---- */

bool bt_picture_available(void)
{
#ifdef HAVE_LIBPNG
    return true;
#else
    return false;
#endif
}

#ifdef HAVE_LIBPNG
static int write_png(const bt_picture *p, FILE *f, const char *path)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (!png) return bt_error(BT_ENOMEM, "out of memory for the PNG encoder");
    png_infop info = png_create_info_struct(png);
    png_bytep *rows = NULL;
    if (!info) { png_destroy_write_struct(&png, NULL); return bt_error(BT_ENOMEM, "out of memory for the PNG encoder"); }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        return bt_error(BT_EIO, "%s: the PNG encoder failed", path);
    }
    rows = malloc((size_t)p->height * sizeof(png_bytep));
    if (!rows) longjmp(png_jmpbuf(png), 1);
    for (int y = 0; y < p->height; y++) rows[y] = p->rgb + (size_t)y * p->width * 3;
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)p->width, (png_uint_32)p->height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    char geo[256];
    snprintf(geo, sizeof geo, "x0=%d y0=%d cw=%d ch=%d cols=%d rows=%d steps_per_col=%d first_step=%d layers=%d in_row=%d out_row=%d",
             p->x0, p->y0, p->cw, p->ch, p->cols, p->rows, p->steps_per_col, p->first_step, p->n_layers, p->in_row, p->out_row);
    png_text t[2];
    memset(t, 0, sizeof t);
    t[0].compression = PNG_TEXT_COMPRESSION_NONE;
    t[0].key = (png_charp)"bangtrace-grid";
    t[0].text = geo;
    t[1].compression = PNG_TEXT_COMPRESSION_NONE;
    t[1].key = (png_charp)"Description";
    t[1].text = (png_charp)p->caption;
    png_set_text(png, info, t, 2);
    png_set_rows(png, info, rows);
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return BT_OK;
}
#endif

int bt_picture_save(const bt_picture *p, const char *path, bool force, const bt_out_input *inputs, int n_inputs)
{
#ifndef HAVE_LIBPNG
    (void)p; (void)force; (void)inputs; (void)n_inputs;
    return bt_error(BT_EUNSUPPORTED, "%s: this bangtrace was built without libpng: no PNG (install libpng-dev and reconfigure)", path);
#else
    int rc = bt_outfile_check(path, BT_OUT_TEXT, force, inputs, n_inputs, NULL);
    if (rc) return rc;
    size_t len = strlen(path) + 8;
    char *tmp = malloc(len);
    if (!tmp) return bt_error(BT_ENOMEM, "out of memory");
    snprintf(tmp, len, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) { rc = bt_error(BT_EIO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno)); free(tmp); return rc; }
    /* 0600 (mkstemp's), like the report beside it and the trace: the
     * token row of an unredacted trace is generated text */
    FILE *f = fdopen(fd, "wb");
    if (!f) { close(fd); rc = bt_error(BT_EIO, "%s: %s", tmp, strerror(errno)); goto fail; }
    rc = write_png(p, f, path);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) { if (!rc) rc = bt_error(BT_EIO, "%s: write failed: %s", path, strerror(errno)); }
    if (rc) goto fail;
    /* checked again right before the rename, as report -o does */
    if ((rc = bt_outfile_check(path, BT_OUT_TEXT, force, inputs, n_inputs, NULL))) goto fail;
    if (rename(tmp, path) != 0) { rc = bt_error(BT_EIO, "%s: %s", path, strerror(errno)); goto fail; }
    free(tmp);
    return BT_OK;
fail:
    unlink(tmp);
    free(tmp);
    return rc;
#endif
}

char *bt_picture_path_beside(const char *path)
{
    size_t n = strlen(path);
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    if (dot && (!slash || dot > slash + 1) && (!strcmp(dot, ".md") || !strcmp(dot, ".db") || !strcmp(dot, ".markdown")))
        n = (size_t)(dot - path);
    char *o = malloc(n + 5);
    if (!o) { bt_error(BT_ENOMEM, "out of memory"); return NULL; }
    memcpy(o, path, n);
    memcpy(o + n, ".png", 5);
    return o;
}
