/* layout.c - the browser's pure logic: screen and step-view geometry, the
 * token flow, run collapsing, the layer x op grid and the colouring
 * decisions. Nothing here touches curses or SQLite, so tests/test_tui.c
 * checks it directly. */
#include "tui.h"
#include "trace/headroom.h"
#include "engine/engine.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- colouring ---- */

int tui_headroom_health(bool present, int64_t nan, int64_t pinf, int64_t ninf, float absmax)
{
    if (!present) return TUI_H_NONE;
    if (nan || pinf || ninf || isnan(absmax) || isinf(absmax)) return TUI_H_BAD;
    static const int by_level[3] = { TUI_H_CLEAN, TUI_H_WARN, TUI_H_BAD };
    return by_level[bt_headroom_level(absmax, BT_F16_MAX)];
}

int tui_tap_health(bool present, int64_t nan, int64_t pinf, int64_t ninf, float absmax, float median)
{
    if (!present) return TUI_H_NONE;
    if (nan || pinf || ninf) return TUI_H_BAD;
    if (isinf(absmax)) return TUI_H_BAD;
    /* "Far above its median": a ratio, so it means the same for a norm
     * output (~1) and a residual stream (~100). A tensor whose median is 0
     * (always zero) is hot as soon as it is visibly non-zero. */
    if (!isnan(absmax) && !isnan(median)) {
        if (median > 0 ? absmax > TUI_HOT_FACTOR * median : absmax > 1e-3f) return TUI_H_WARN;
    }
    return TUI_H_CLEAN;
}

/* ---- grid ---- */

void tui_op_abbrev(const char *op, char *buf, int max)
{
    /* Labels come from the engine's op table; a cell narrower than four
     * columns gets the two-letter label, which stays unique ("fd", "fg"). */
    int id = bt_op_from_name(op);
    const char *ab = id >= 0 ? (max >= 4 ? bt_op_abbrev(id) : bt_op_label(id)) : op;
    if (id < 0) {                      /* unknown op: drop a module prefix */
        const char *u = strchr(op, '_');
        if (u && u[1]) ab = u + 1;
    }
    if (max < 1) { buf[0] = 0; return; }
    int n = (int)strlen(ab);
    if (n > max) n = max;
    memcpy(buf, ab, n);
    buf[n] = 0;
}

void tui_grid_free(tui_grid *g)
{
    if (!g) return;
    free(g->cell);
    free(g->row_layer);
    free(g->row_label);
    memset(g, 0, sizeof(*g));
}

int tui_grid_build(const tui_tensor *t, int n, tui_grid *g)
{
    memset(g, 0, sizeof(*g));
    int lmin = -1, lmax = -1, first_layer_i = n;
    for (int i = 0; i < n; i++) {
        if (t[i].layer < 0) continue;
        if (t[i].layer >= TUI_MAX_LAYERS) return bt_error(BT_EFORMAT, "tensor %s: layer %d out of range", t[i].name, t[i].layer);
        if (lmin < 0 || t[i].layer < lmin) lmin = t[i].layer;
        if (t[i].layer > lmax) lmax = t[i].layer;
        if (i < first_layer_i) first_layer_i = i;
        bool seen = false;
        for (int c = 0; c < g->n_cols; c++)
            if (!strcmp(g->ops[c], t[i].op)) { seen = true; break; }
        if (!seen && g->n_cols < 32) {
            snprintf(g->ops[g->n_cols], sizeof g->ops[0], "%s", t[i].op);
            g->n_cols++;
        }
    }
    int n_pre = 0, n_post = 0;
    for (int i = 0; i < n; i++)
        if (t[i].layer < 0) { if (i < first_layer_i) n_pre++; else n_post++; }
    g->has_pre = n_pre > 0;
    g->has_post = n_post > 0;
    g->layer0 = lmin < 0 ? 0 : lmin;
    int n_layers = lmin < 0 ? 0 : lmax - lmin + 1;
    if (n_pre > g->n_cols) g->n_cols = n_pre;
    if (n_post > g->n_cols) g->n_cols = n_post;
    if (g->n_cols > 32) g->n_cols = 32;
    g->n_rows = n_layers + g->has_pre + g->has_post;
    if (!g->n_rows || !g->n_cols) return BT_OK;
    g->cell = malloc(sizeof(int) * g->n_rows * g->n_cols);
    g->row_layer = malloc(sizeof(int) * g->n_rows);
    g->row_label = malloc(sizeof(*g->row_label) * g->n_rows);
    if (!g->cell || !g->row_layer || !g->row_label) { tui_grid_free(g); return bt_error(BT_ENOMEM, "out of memory for the tap grid"); }
    for (int i = 0; i < g->n_rows * g->n_cols; i++) g->cell[i] = -1;
    int r = 0;
    if (g->has_pre) { g->row_layer[r] = -1; snprintf(g->row_label[r], 8, "in"); r++; }
    for (int l = 0; l < n_layers; l++, r++) {
        g->row_layer[r] = g->layer0 + l;
        snprintf(g->row_label[r], 8, "L%02d", (g->layer0 + l) % 1000);
    }
    if (g->has_post) { g->row_layer[r] = -1; snprintf(g->row_label[r], 8, "out"); }
    int pre_c = 0, post_c = 0;
    for (int i = 0; i < n; i++) {
        int row, col = -1;
        if (t[i].layer >= 0) {
            row = g->has_pre + t[i].layer - g->layer0;
            for (int c = 0; c < g->n_cols; c++)
                if (!strcmp(g->ops[c], t[i].op)) { col = c; break; }
        } else if (i < first_layer_i) {
            row = 0; col = pre_c++;
        } else {
            row = g->n_rows - 1; col = post_c++;
        }
        if (col >= 0 && col < g->n_cols) g->cell[row * g->n_cols + col] = t[i].idx;
    }
    return BT_OK;
}

bool tui_grid_find(const tui_grid *g, int idx, int *row, int *col)
{
    for (int i = 0; g->cell && i < g->n_rows * g->n_cols; i++)
        if (g->cell[i] == idx) { *row = i / g->n_cols; *col = i % g->n_cols; return true; }
    return false;
}

/* ---- tokens ---- */

int tui_collapse(const tui_tok *t, int n, int min_run, tui_cell *cells)
{
    int nc = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        /* gen and bonus are both output: a run crosses them */
        while (j < n && t[j].id == t[i].id && (t[j].role == 'p') == (t[i].role == 'p')) j++;
        int len = j - i;
        int per = len >= min_run ? len : 1;      /* rows per cell */
        for (int k = i; k < j; k += per) {
            tui_cell *c = &cells[nc++];
            memset(c, 0, sizeof(*c));
            c->seq0 = t[k].seq;
            c->seq1 = t[k + per - 1].seq;
            c->step0 = t[k].step;
            c->step1 = t[k + per - 1].step;
            c->pos0 = t[k].pos;
            c->id = t[k].id;
            c->role = t[k].role;
            c->count = per;
            c->health = TUI_H_CLEAN;
        }
        i = j;
    }
    return nc;
}

int tui_hscroll(int off, int delta, int total, int width)
{
    long v = (long)off + delta, max = total > width ? total - width : 0;
    if (v > max) v = max;
    if (v < 0) v = 0;
    return (int)v;
}

const char *tui_text_skip(const char *s, int cols)
{
    while (*s && cols > 0) {
        size_t n = 1;
        while (s[n] && ((unsigned char)s[n] & 0xc0) == 0x80) n++;
        char one[8] = "";
        if (n < sizeof one) { memcpy(one, s, n); one[n] = 0; }
        cols -= tui_text_width(one);
        s += n;
    }
    return s;
}

static bool is_special_piece(const char *p, int len)
{
    if (len < 3 || p[0] != '<' || p[len - 1] != '>') return false;
    for (int i = 1; i < len - 1; i++)
        if (p[i] == '<' || p[i] == '>' || (unsigned char)p[i] <= ' ' || p[i] == 0x7f) return false;
    return true;
}

int tui_piece_label(const char *piece, int len, char *buf, size_t cap, int max_cols, unsigned san_flags)
{
    bool bare = is_special_piece(piece, len);
    int q = bare ? 0 : 1;
    if (cap < 8 || max_cols < 2 * q + 2) { if (cap) buf[0] = 0; return 0; }
    char *o = buf + q;
    size_t room = cap - 2 * (size_t)q - 1;
    int w = tui_sanitize(piece, (size_t)len, o, room, max_cols - 2 * q, san_flags | TUI_SAN_SHOWSPACE);
    char full[512];
    int wf = tui_sanitize(piece, (size_t)len, full, sizeof full, 0, san_flags | TUI_SAN_SHOWSPACE);
    if (wf > w) {                      /* cut: one column less, then the marker */
        w = tui_sanitize(piece, (size_t)len, o, room - 1, max_cols - 2 * q - 1, san_flags | TUI_SAN_SHOWSPACE);
        strcat(o, "~");
        w++;
    }
    if (q) { buf[0] = '\''; strcat(buf, "'"); }
    return w + 2 * q;
}

void tui_cell_set_text(tui_cell *c, const char *piece, int piece_len, unsigned san_flags)
{
    char suffix[32] = "";
    if (c->count > 1) snprintf(suffix, sizeof suffix, " x%lld", (long long)c->count);
    size_t room = sizeof c->text - strlen(suffix) - 1;
    int w;
    if (piece) w = tui_sanitize(piece, piece_len, c->text, room, 40, san_flags | TUI_SAN_SHOWSPACE);
    else w = snprintf(c->text, room, "#%d", c->id);      /* redacted: the id stands in */
    if (!piece && w > (int)room) w = (int)room;
    if (piece && !c->text[0]) { snprintf(c->text, room, "\"\""); w = 2; }   /* empty piece */
    strcat(c->text, suffix);
    c->width = w + (int)strlen(suffix);
}

void tui_tokens_free(tui_tokens *tk)
{
    free(tk->cells);
    memset(tk, 0, sizeof(*tk));
    tk->min_seq = tk->max_seq = -1;
}

int tui_tokens_find(const tui_tokens *tk, int64_t seq)
{
    if (tk->n == 0) return 0;
    int lo = 0, hi = tk->n - 1;
    if (seq <= tk->cells[0].seq1) return 0;
    if (seq >= tk->cells[hi].seq0) return hi;
    while (lo < hi) {                 /* last cell with seq0 <= seq */
        int mid = (lo + hi + 1) / 2;
        if (tk->cells[mid].seq0 <= seq) lo = mid; else hi = mid - 1;
    }
    return lo;
}

/* ---- geometry ---- */

void tui_layout_screen(int rows, int cols, tui_screen *s)
{
    memset(s, 0, sizeof(*s));
    s->too_small = rows < 10 || cols < 40;
    s->header = (tui_rect){ 0, 0, 1, cols };
    s->status = (tui_rect){ rows - 1, 0, 1, cols };
    s->body = (tui_rect){ 1, 0, rows > 2 ? rows - 2 : 0, cols };
}

void tui_layout_step(const tui_rect *body, int n_cols, tui_step_layout *l)
{
    memset(l, 0, sizeof(*l));
    int detail_h = body->h >= 30 ? 6 : 4;
    int top_h = body->h - detail_h;
    if (top_h < 3) { top_h = body->h; detail_h = 0; }
    /* The logit panel needs 36 columns for "rank id piece logit p"; it
     * takes a third of a wide screen. The grid gets the rest: label + cells. */
    int logits_w = body->w >= 120 ? body->w / 3 : 36;
    if (logits_w > 60) logits_w = 60;
    if (body->w - logits_w - 1 < 20) logits_w = body->w / 2;
    l->label_w = 4;
    int grid_w = body->w - logits_w - 1;
    int nc = n_cols > 0 ? n_cols : 1;
    l->cell_w = (grid_w - l->label_w) / nc;
    if (l->cell_w > 6) l->cell_w = 6;
    if (l->cell_w < 2) l->cell_w = 2;
    l->logits = (tui_rect){ body->y, body->x, top_h, logits_w };
    l->grid = (tui_rect){ body->y, body->x + logits_w + 1, top_h, grid_w };
    l->detail = (tui_rect){ body->y + top_h, body->x, detail_h, body->w };
    l->grid_rows_visible = top_h > 1 ? top_h - 1 : 0;
}

int tui_scroll_follow(int top, int cur, int vis, int n)
{
    if (vis <= 0) return cur < 0 ? 0 : cur;
    if (cur < top) top = cur;
    if (cur >= top + vis) top = cur - vis + 1;
    if (top > n - vis) top = n - vis;
    if (top < 0) top = 0;
    return top;
}

int tui_flow_layout(const int *widths, int n, int width, int *line, int *col)
{
    int ln = 0, x = 0;
    if (width < 1) width = 1;
    for (int i = 0; i < n; i++) {
        int w = widths[i] > width ? width : widths[i];
        if (x > 0 && x + 1 + w > width) { ln++; x = 0; }
        else if (x > 0) x++;
        line[i] = ln;
        col[i] = x;
        x += w;
    }
    return n ? ln + 1 : 0;
}

int tui_flow_vertical(const int *line, const int *col, int n, int cur, int dir)
{
    if (cur < 0 || cur >= n) return -1;
    int want = line[cur] + dir, best = -1;
    for (int i = cur + dir; i >= 0 && i < n; i += dir) {
        if (line[i] == want) {
            /* keep the cell that covers or precedes the column (the last one
             * starting at or before it), like a text editor */
            if (dir > 0) { if (col[i] <= col[cur] || best < 0) best = i; if (col[i] > col[cur]) break; }
            else { if (col[i] <= col[cur]) { best = i; break; } best = i; }
        } else if ((dir > 0 && line[i] > want) || (dir < 0 && line[i] < want)) break;
    }
    return best;
}

int tui_nav_clamp(int cur, int delta, int n)
{
    if (n <= 0) return 0;
    long v = (long)cur + delta;
    if (v < 0) v = 0;
    if (v > n - 1) v = n - 1;
    return (int)v;
}

/* ---- speculation: marks, the sparkline, the view's geometry ---- */

int tui_spec_mark(bool accepted, const char *reason)
{
    if (accepted) return TUI_SM_ACCEPT;
    if (reason && !strcmp(reason, "after_stop")) return TUI_SM_AFTER_STOP;
    if (reason && !strcmp(reason, "after_reject")) return TUI_SM_AFTER_REJECT;
    return TUI_SM_REJECT;               /* mismatch, reject p/q, or an unknown reason */
}

char tui_spec_mark_char(int mark)
{
    switch (mark) {
    case TUI_SM_ACCEPT: return '+';
    case TUI_SM_REJECT: return 'x';
    case TUI_SM_AFTER_REJECT: return '-';
    case TUI_SM_AFTER_STOP: return 's';
    default: return '?';
    }
}

const char *tui_spec_mark_name(int mark)
{
    switch (mark) {
    case TUI_SM_ACCEPT: return "accepted";
    case TUI_SM_REJECT: return "REJECTED";
    case TUI_SM_AFTER_REJECT: return "after_reject";
    case TUI_SM_AFTER_STOP: return "after_stop";
    default: return "?";
    }
}

int tui_spark_level(double rate)
{
    if (isnan(rate)) return -1;
    if (rate <= 0) return 0;
    if (rate >= 1) return 7;
    int l = (int)(rate * 8);
    return l > 7 ? 7 : l;
}

const char *tui_spark_glyph(int level, bool utf8)
{
    static const char *const blocks[8] = {
        "\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
        "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88",
    };
    static const char *const ascii[8] = { "_", ".", ":", "-", "=", "+", "*", "#" };
    if (level < 0 || level > 7) return " ";
    return utf8 ? blocks[level] : ascii[level];
}

int tui_spark_col(int window, int n, int cols)
{
    if (n <= 0 || cols <= 0) return 0;
    if (window < 0) window = 0;
    if (window >= n) window = n - 1;
    /* the first column whose windows (as tui_spark_rebin bins them) hold it */
    for (int c = 0; c < cols; c++) {
        int w0 = (int)((int64_t)c * n / cols), w1 = (int)((int64_t)(c + 1) * n / cols);
        if (w1 <= w0) w1 = w0 + 1;
        if (window >= w0 && window < w1) return c;
    }
    return cols - 1;
}

void tui_spark_rebin(const int64_t *acc, const int64_t *drafted, int n, int cols, double *rate)
{
    for (int c = 0; c < cols; c++) {
        int w0 = (int)((int64_t)c * n / cols), w1 = (int)((int64_t)(c + 1) * n / cols);
        if (w1 <= w0) w1 = w0 + 1;      /* more columns than windows: repeat */
        int64_t a = 0, d = 0;
        for (int w = w0; w < w1 && w < n; w++) { a += acc[w]; d += drafted[w]; }
        rate[c] = d > 0 ? (double)a / (double)d : NAN;
    }
}

int tui_spark_render(const double *rate, int cols, bool utf8, char *buf, size_t cap)
{
    size_t o = 0;
    int n = 0;
    if (!cap) return 0;
    for (int c = 0; c < cols; c++) {
        const char *g = tui_spark_glyph(tui_spark_level(rate[c]), utf8);
        size_t len = strlen(g);
        if (o + len + 1 > cap) break;
        memcpy(buf + o, g, len);
        o += len;
        n++;
    }
    buf[o] = 0;
    return n;
}

void tui_layout_spec(const tui_rect *body, int k, tui_spec_layout *l)
{
    memset(l, 0, sizeof(*l));
    int y = body->y, h = body->h;
    l->summary = (tui_rect){ y, body->x, h > 0 ? 1 : 0, body->w };
    int spark_h = h >= 8 ? 2 : 0;
    l->spark = (tui_rect){ y + 1, body->x, spark_h, body->w };
    l->spark_x = body->x + 9;           /* "accepted " label */
    l->spark_w = body->w - 9 - 1;
    if (l->spark_w > TUI_SPARK_BUCKETS) l->spark_w = TUI_SPARK_BUCKETS;
    if (l->spark_w < 0) l->spark_w = 0;
    int rest = h - 1 - spark_h;
    if (k < 1) k = 1;
    if (k > TUI_SPEC_MAXK) k = TUI_SPEC_MAXK;
    /* detail: a rule, one line per draft, the bonus line; never more than
     * half of what is left, so the list keeps at least 3 rows */
    int detail_h = k + 2;
    if (detail_h > rest / 2) detail_h = rest / 2;
    if (rest - detail_h < 4) detail_h = rest - 4 > 0 ? rest - 4 : 0;
    if (detail_h < 3) detail_h = 0;
    l->list = (tui_rect){ y + 1 + spark_h, body->x, rest - detail_h > 0 ? rest - detail_h : 0, body->w };
    l->detail = (tui_rect){ l->list.y + l->list.h, body->x, detail_h, body->w };
}

/* ---- fitting text: the tab bar, the walk-back list, wrapped notes ---- */

/* Columns of the first n bytes of s (UTF-8 continuation bytes take none). */
static int cols_of(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n && s[i]; i++) if (((unsigned char)s[i] & 0xc0) != 0x80) c++;
    return c;
}

/* Bytes of s that fill at most width columns (never mid-character). */
static size_t bytes_for(const char *s, int width)
{
    size_t i = 0;
    int c = 0;
    while (s[i]) {
        if (((unsigned char)s[i] & 0xc0) != 0x80) { if (c == width) break; c++; }
        i++;
    }
    return i;
}

int tui_wrap(const char *s, int width, int max_lines, char *buf, size_t cap, const char **out)
{
    int n = 0;
    size_t o = 0;
    if (width < 4 || max_lines < 1 || cap < 2) { if (cap) buf[0] = 0; if (max_lines > 0) out[0] = buf; return cap ? 1 : 0; }
    while (*s == ' ') s++;
    while (*s && n < max_lines) {
        size_t len = strlen(s), take;
        bool last = n == max_lines - 1;
        if (cols_of(s, len) <= width) take = len;
        else if (last) take = bytes_for(s, width - 3);
        else {
            take = bytes_for(s, width);
            size_t sp = take;
            while (sp > 0 && s[sp] != ' ') sp--;
            if (sp > 0) take = sp;
        }
        bool cut = take < len && last;
        if (o + take + 4 > cap) break;
        out[n++] = buf + o;
        memcpy(buf + o, s, take);
        o += take;
        while (cut && o > 0 && buf[o - 1] == ' ') o--;
        if (cut) { memcpy(buf + o, "...", 3); o += 3; }
        buf[o++] = 0;
        s += take;
        while (*s == ' ') s++;
        if (cut) break;
    }
    if (!n) { buf[0] = 0; out[0] = buf; n = 1; }
    return n;
}

void tui_walk_line(char *buf, size_t cap, int width, bool compact, int step, const char *where, const char *counts,
                   const char *note)
{
    if (!compact) snprintf(buf, cap, "step %-4d %-15s %-9s %s", step, where, counts, note);
    else {
        /* narrower columns, and "; 13 bad in layer" says "; 13 bad" */
        char n[96];
        snprintf(n, sizeof n, "%s", note);
        size_t nl = strlen(n), sl = strlen(" in layer");
        if (nl > sl && !strcmp(n + nl - sl, " in layer")) n[nl - sl] = 0;
        snprintf(buf, cap, "%-4d %-13s %-7s %s", step, where, counts, n);
    }
    if (width < 4 || cols_of(buf, strlen(buf)) <= width) return;
    size_t keep = bytes_for(buf, width - 3);
    while (keep > 0 && buf[keep - 1] == ' ') keep--;
    if (keep + 4 <= cap) memcpy(buf + keep, "...", 4);
}

void tui_tab_label(int i, int level, int current, char *buf, size_t cap)
{
    const tui_view *v = &tui_views[i];
    if (level == 0) snprintf(buf, cap, " %c %s ", v->key, v->title);
    else if (level == 1 || i == current) snprintf(buf, cap, " %c %s ", v->key, v->short_title ? v->short_title : v->title);
    else snprintf(buf, cap, " %c ", v->key);
}

int tui_tabs_width(int level, int current)
{
    int w = 0;
    char tab[48];
    for (int i = 0; i < tui_n_views; i++) { tui_tab_label(i, level, current, tab, sizeof tab); w += (int)strlen(tab); }
    return w;
}

int tui_tabs_level(int width, int brand_w, int current)
{
    for (int level = 0; level < 2; level++)
        if (brand_w + tui_tabs_width(level, current) <= width) return level;
    return 2;
}
