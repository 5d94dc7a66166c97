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

int bt_picture_render(bt_trace_reader *r, bt_picture *out)
{
    memset(out, 0, sizeof(*out));
    out->first_step = out->last_step = -1;
    step_list sl = { 0 };
    cell *cells = NULL;
    int *slot_row = NULL;
    char **piece = NULL;
    size_t *plen = NULL;
    bool *pred = NULL;
    bt_trace_tap_row *taps = NULL;
    bt_prop_link *links = NULL;
    int n_links = 0, rc;

    if ((rc = bt_trace_steps_each(r, INT32_MIN, INT32_MAX, collect_target, &sl)) < 0) goto done;
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
    if (!(slot_row = malloc((size_t)(max_idx ? max_idx : 1) * sizeof(int)))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    bool in_row = false, out_row = false;
    for (int i = 0; i < n_tens; i++) {
        if (tens[i].layer >= 0) continue;
        if (first_layer_slot >= 0 && tens[i].idx < first_layer_slot) in_row = true; else out_row = true;
    }
    int rows = n_layers + in_row + out_row;
    for (int i = 0; i < max_idx; i++) slot_row[i] = -1;
    for (int i = 0; i < n_tens; i++) {
        const bt_trace_tensor_row *t = &tens[i];
        if (t->idx < 0) continue;
        if (t->layer >= 0) slot_row[t->idx] = in_row + t->layer;
        else if (first_layer_slot >= 0 && t->idx < first_layer_slot) slot_row[t->idx] = 0;
        else slot_row[t->idx] = in_row + n_layers;
    }

    int n = sl.n;
    /* steps per column: 1, or the smallest 1-2-5 number that keeps the
     * columns within BT_PICTURE_MAX_COLS (so the step labels are round) */
    int spc = 1;
    while ((n + spc - 1) / spc > BT_PICTURE_MAX_COLS) {
        int d = spc;
        while (d >= 10) d /= 10;
        spc = d == 2 ? spc / 2 * 5 : spc * 2;
    }
    int cols = n ? (n + spc - 1) / spc : 0;
    out->n_steps = n;
    out->steps_per_col = spc;
    out->cols = cols;
    out->rows = rows;
    out->n_layers = n_layers;
    out->in_row = in_row;
    out->out_row = out_row;
    if (n) { out->first_step = sl.v[0]; out->last_step = sl.v[n - 1]; }

    if (!(cells = calloc((size_t)(cols ? cols : 1) * (rows ? rows : 1), sizeof(cell)))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < cols * rows; i++) cells[i].absmax = NAN;
    for (int s = 0; s < n; s++) {
        int n_taps = 0;
        free(taps);
        taps = NULL;
        if ((rc = bt_trace_step_taps(r, sl.v[s], &taps, &n_taps))) goto done;
        int c = s / spc;
        for (int j = 0; j < n_taps; j++) {
            const bt_trace_tap_row *t = &taps[j];
            if (!t->recorded || t->idx < 0 || t->idx >= max_idx || slot_row[t->idx] < 0) continue;
            cell *x = &cells[slot_row[t->idx] * cols + c];
            x->recorded = true;
            if (bt_trace_tap_bad(t)) x->nonfinite = true;
            else if (!isnan(t->absmax) && !(t->absmax <= x->absmax)) x->absmax = t->absmax;
        }
    }

    /* the walk-back path (target pass only: the grid is the target's) */
    if ((rc = bt_analyze_walk(r, 16, &links, &n_links))) goto done;

    /* token text: one step per column only */
    bool tokens = spc == 1 && n > 0;
    if (tokens) {
        piece = calloc((size_t)cols, sizeof(char *));
        plen = calloc((size_t)cols, sizeof(size_t));
        pred = calloc((size_t)cols, sizeof(bool));
        if (!piece || !plen || !pred) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
        tok_cb k = { &sl, piece, plen, pred };
        if ((rc = bt_trace_tokens_each(r, 0, 0, token_cb, &k)) < 0) goto done;
        rc = BT_OK;
        for (int c = 0; c < cols; c++) if (pred[c]) out->tokens_redacted = true;
    }

    /* ---- geometry ---- */
    int cw = cols ? 960 / cols : 16;
    cw = BT_MAX(tokens ? 7 : 4, BT_MIN(24, cw));
    int ch = rows ? 480 / rows : 12;
    ch = BT_MAX(4, BT_MIN(12, ch));
    char lab[16];
    snprintf(lab, sizeof lab, "%d", n_layers > 0 ? n_layers - 1 : 0);
    int label_w = BT_MAX(text_width("step"), text_width(lab)) + 6;
    const int M = 8;
    int x0 = M + label_w;
    int y0 = M + 2 * LINE_H + 2 + LINE_H + 3;      /* title, caption, step numbers, ticks */
    int grid_w = cols * cw, grid_h = rows * ch;
    int tok_h = tokens ? 4 + TOK_GLYPHS * VADV : 0;
    char title[160];
    const char *model = bt_trace_meta_get(r, "model_name");
    char safe_model[64] = "";
    if (model) {
        size_t o = 0;
        for (const char *p = model; *p && o + 1 < sizeof safe_model; p++)
            safe_model[o++] = (unsigned char)*p >= 32 && (unsigned char)*p < 127 ? *p : '?';
        safe_model[o] = 0;
    }
    snprintf(title, sizeof title, "bangtrace: largest |x| per layer and step vs the f16 max 65504%s%s", model ? " - " : "", safe_model);
    int width = BT_MAX(x0 + grid_w + M, M + legend_width() + M);
    width = BT_MAX(width, M + text_width(title) + M);
    int height = y0 + grid_h + tok_h + 6 + LINE_H + 4 + 2 * LINE_H + M;
    out->x0 = x0; out->y0 = y0; out->cw = cw; out->ch = ch;
    out->width = width; out->height = height;
    out->tokens_drawn = tokens;
    if (!(out->rgb = malloc((size_t)width * height * 3))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    canvas cv = { width, height, out->rgb };
    fill(&cv, 0, 0, width, height, BG_C);

    /* title and caption */
    char line[512];
    text(&cv, M, M, width - M, TEXT_C, title);
    if (!n) snprintf(out->caption, sizeof out->caption, "no target steps in the trace");
    else if (spc > 1)
        snprintf(out->caption, sizeof out->caption, "%d steps (%d-%d) downsampled to %d columns of %d steps: each cell is the worst of its steps",
                 n, out->first_step, out->last_step, cols, spc);
    else
        snprintf(out->caption, sizeof out->caption, "%d steps (%d-%d), one column per step; rows: %slayers 0-%d%s", n,
                 out->first_step, out->last_step, in_row ? "in, " : "", n_layers - 1, out_row ? ", out" : "");
    if (sl.other) {
        size_t cl = strlen(out->caption);
        snprintf(out->caption + cl, sizeof out->caption - cl, "; target passes only (%d draft passes not drawn)", sl.other);
    }
    text(&cv, M, M + LINE_H, width - M, DIM_C, out->caption);

    /* step numbers: a label every k columns, k a 1-2-5 step that fits */
    int digits = (int)strlen((snprintf(lab, sizeof lab, "%d", out->last_step), lab));
    int need = digits * ADV + 6;
    int k = 1;
    static const int nice[] = { 1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000 };
    for (size_t i = 0; i < BT_ARRAY_SIZE(nice); i++) { k = nice[i]; if (k * cw >= need) break; }
    int ty = y0 - LINE_H - 3;
    for (int c = 0; c < cols; c += k) {
        snprintf(lab, sizeof lab, "%d", sl.v[c * spc]);
        int x = x0 + c * cw;
        if (x + text_width(lab) > width - 2) break;
        text(&cv, x, ty, width, TEXT_C, lab);
        fill(&cv, x, y0 - 3, 1, 2, TEXT_C);
    }
    text(&cv, x0 - 4 - text_width("step"), ty, x0, DIM_C, "step");

    /* row labels: every row when they fit, else every 5th or 10th layer */
    int every = ch >= 8 ? 1 : ch >= 4 ? (ch * 5 >= 10 ? 5 : 10) : 10;
    for (int w = 0; w < rows; w++) {
        const char *l;
        if (in_row && w == 0) l = "in";
        else if (out_row && w == rows - 1) l = "out";
        else {
            int layer = w - in_row;
            if (layer % every) continue;
            snprintf(lab, sizeof lab, "%d", layer);
            l = lab;
        }
        int ly = y0 + w * ch + ch / 2 - FH / 2;
        if (ch < FH + 1 && ((in_row && w == 0) || (out_row && w == rows - 1))) continue;  /* no room beside layer 0 */
        text(&cv, x0 - 4 - text_width(l), ly, x0, TEXT_C, l);
    }

    /* cells */
    for (int w = 0; w < rows; w++)
        for (int c = 0; c < cols; c++)
            fill(&cv, x0 + c * cw, y0 + w * ch, cw, ch, cell_colour(&cells[w * cols + c]));
    outline(&cv, x0 - 1, y0 - 1, grid_w + 2, grid_h + 2, 1, DIM_C);

    /* walk-back path, then the first bad cell over it */
    int path_n = 0;
    bool have_first = false;
    for (int i = n_links - 1; i >= 0; i--) {
        const bt_bad_tensor *t = &links[i].t;
        if (strcmp(t->model, "target") || t->idx < 0 || t->idx >= max_idx || slot_row[t->idx] < 0) continue;
        int c = col_of_step(&sl, spc, t->step), w = slot_row[t->idx];
        if (c < 0) continue;
        path_n++;
        if (i == 0 && links[i].kind == BT_PROP_ORIGIN) {
            /* a ring just outside the cell, so the cell keeps its colour
             * and a cell of a few pixels still stands out */
            int t = BT_MIN(cw, ch) < 8 ? 3 : 2;
            outline(&cv, x0 + c * cw - t, y0 + w * ch - t, cw + 2 * t, ch + 2 * t, t, BT_PIC_FIRST);
            have_first = true;
            out->first_col = c;
            out->first_row = w;
        } else outline(&cv, x0 + c * cw, y0 + w * ch, cw, ch, 1, BT_PIC_PATH);
    }
    out->has_first = have_first;
    out->n_path = path_n;

    /* the token row */
    int y = y0 + grid_h + 4;
    if (tokens) {
        text(&cv, x0 - 4 - text_width("tok"), y, x0, DIM_C, "tok");
        for (int c = 0; c < cols; c++) {
            if (pred[c] && !piece[c]) { fill(&cv, x0 + c * cw + cw / 2 - 1, y + 2, 3, 3, DIM_C); continue; }  /* redacted */
            tglyph g[TOK_GLYPHS + 8];
            int ng = piece[c] ? piece_glyphs(piece[c], plen[c], g, TOK_GLYPHS + 1) : 0;
            if (ng > TOK_GLYPHS) { ng = TOK_GLYPHS; g[TOK_GLYPHS - 1] = (tglyph){ GLYPH_ELLIPSIS, DIM_C }; }
            int gx = x0 + c * cw + (cw - FW) / 2;
            for (int i = 0; i < ng; i++) glyph(&cv, gx, y + i * VADV, g[i].ch, g[i].rgb);
        }
        y += tok_h - 4;
    }
    y += 6;

    /* legend */
    int lx = M;
    draw_legend_item(&cv, &lx, y, BT_PIC_NONFINITE, 0, 0, "non-finite");
    draw_legend_item(&cv, &lx, y, BT_PIC_OVER, 0, 0, "> f16 max");
    draw_legend_item(&cv, &lx, y, BT_PIC_HALF, 0, 0, "> half");
    fill(&cv, lx, y, 9, 9, ramp(1e-6)); lx += 9;
    fill(&cv, lx, y, 9, 9, ramp(1e-3)); lx += 9;
    draw_legend_item(&cv, &lx, y, ramp(0.5), 0, 0, "< half (log)");
    draw_legend_item(&cv, &lx, y, BT_PIC_UNTAPPED, 0, 0, "not tapped");
    draw_legend_item(&cv, &lx, y, BG_C, BT_PIC_FIRST, 2, "first bad");
    draw_legend_item(&cv, &lx, y, BG_C, BT_PIC_PATH, 1, "walk-back");
    y += LINE_H + 4;

    /* the finding in words */
    if (n_links > 0) {
        const bt_bad_tensor *f = &links[0].t;
        char l[16];
        snprintf(line, sizeof line, "first non-finite: step %d, layer %s, %s%s", f->step, bt_layer_label(f->layer, l, sizeof l),
                 f->tensor, strcmp(f->model, "target") ? " (draft pass, not drawn)" : have_first ? " (green outline)" : "");
    } else snprintf(line, sizeof line, "no non-finite tap in the trace");
    text(&cv, M, y, width - M, TEXT_C, line);
    y += LINE_H;
    if (!tokens && n) snprintf(line, sizeof line, "token row left out: %d steps per column", spc);
    else if (out->tokens_redacted) snprintf(line, sizeof line, "token row: the token each step produced; a grey dot: text redacted, not drawn");
    else if (tokens) snprintf(line, sizeof line, "token row: the token each step produced (escapes in brown)");
    else line[0] = 0;
    text(&cv, M, y, width - M, DIM_C, line);
    rc = BT_OK;
done:
    if (piece) for (int c = 0; c < out->cols; c++) free(piece[c]);
    free(piece); free(plen); free(pred);
    free(taps); free(links); free(cells); free(slot_row); free(sl.v);
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
