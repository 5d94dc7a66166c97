/* model_cache.c - the Cache view's data (see model_cache.h).
 *
 * The request's side comes from its own trace: kv_access rows through the
 * reader (bt_trace_kv_access_each, at most TUI_CACHE_MAX_ACCESS of them),
 * grouped into one row per block, and the provenance culprit
 * (bt_provenance_get, the line bisect and report print). The other
 * requests' side comes from DIR/server.db beside the trace, through
 * trace/server_reader.h: for each of at most TUI_CACHE_MAX_HOT marked
 * blocks, its access rows over a bounded window of server steps (a
 * primary-key range) and its block_events (the (block, step) index), each
 * query row-limited. A missing server.db is said; one that is corrupt or
 * not ours is one note; neither fails the view. */
#include "model_impl.h"
#include "model_cache.h"
#include "trace/provenance.h"
#include "trace/trace.h"           /* bt_kv_access, the rows bt_trace_kv_access_each reads */
#include "trace/server_reader.h"
#include "base/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- pure ---- */

void tui_layout_cache(int width, int n_cols, tui_cache_layout *l)
{
    l->label_w = TUI_CACHE_LABEL_W;
    int room = width - l->label_w;
    if (room < 1) room = 1;
    int g = n_cols;
    if (g > room - TUI_CACHE_INFO_MIN) g = room - TUI_CACHE_INFO_MIN;
    if (g < 8) g = 8;
    if (g > n_cols) g = n_cols;
    if (g > room) g = room;
    if (g < 1) g = 1;
    l->grid_w = g;
    l->info_w = width - l->label_w - g - 1;
    if (l->info_w < 0) l->info_w = 0;
}

int tui_cache_bins(int span, int max_cols, int *per_col)
{
    if (span < 1) span = 1;
    if (max_cols < 1) max_cols = 1;
    int per = (span + max_cols - 1) / max_cols;
    *per_col = per;
    return (span + per - 1) / per;
}

void tui_cache_axis(int first, int n, int per_col, char *buf, size_t cap)
{
    if (!cap) return;
    if (per_col < 1) per_col = 1;
    size_t len = (size_t)n < cap - 1 ? (size_t)(n > 0 ? n : 0) : cap - 1;
    memset(buf, ' ', len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++) {
        int s = first + (int)i * per_col;
        if (per_col == 1) { buf[i] = (char)('0' + (s % 10 + 10) % 10); continue; }
        if (i % 10) continue;
        char num[16];
        int k = snprintf(num, sizeof num, "%d", s);
        for (int j = 0; j < k && i + (size_t)j < len && j < 10; j++) buf[i + (size_t)j] = num[j];
    }
}

char tui_cache_cell_char(unsigned modes)
{
    return modes & TUI_CM_SLOT ? 'S' : modes & TUI_CM_SNAP ? 'P' : modes & TUI_CM_HIT ? 'H' : modes & TUI_CM_W ? 'W' : modes & TUI_CM_R ? 'r' : '.';
}

char tui_cache_smark_char(int mark)
{
    switch (mark) {
    case TUI_SM_HIT: return 'H';
    case TUI_SM_BAD: return '!';
    case TUI_SM_WRITE: return 'W';
    case TUI_SM_READ: return 'r';
    case TUI_SM_LIFE: return '-';
    default: return '.';
    }
}

void tui_cache_modes_text(unsigned modes, char *buf, size_t cap)
{
    static const struct { unsigned m; const char *name; } names[] = {
        { TUI_CM_W, "w" }, { TUI_CM_HIT, "hit" }, { TUI_CM_R, "r" }, { TUI_CM_SLOT, "slot" }, { TUI_CM_SNAP, "snap" },
    };
    size_t o = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < BT_ARRAY_SIZE(names); i++)
        if ((modes & names[i].m) && o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? "," : "", names[i].name);
}

/* ---- the request's side: kv_access ---- */

typedef struct tcell { int row, step, server_step; unsigned mode; } tcell;
typedef struct kload {
    tui_cache *c;
    int *map;                   /* open addressing: key (block, slot) -> row + 1 */
    int map_cap;
    int cap_blocks;
    tcell *tc;
    int n_tc, cap_tc;
} kload;

static unsigned mode_bit(const char *m)
{
    return !strcmp(m, "w") ? TUI_CM_W : !strcmp(m, "hit") ? TUI_CM_HIT : !strcmp(m, "r") ? TUI_CM_R
         : !strcmp(m, "slot") ? TUI_CM_SLOT : !strcmp(m, "snap") ? TUI_CM_SNAP : 0;
}

static unsigned hash_key(int block, bool slot)
{
    unsigned h = (unsigned)block * 2654435761u ^ (slot ? 0x9e3779b9u : 0);
    return h ^ (h >> 15);
}

static int map_find(kload *l, int block, bool slot, bool snap, bool *found)
{
    unsigned mask = (unsigned)l->map_cap - 1;
    for (unsigned i = (hash_key(block, slot) + (snap ? 0x9e37u : 0)) & mask;; i = (i + 1) & mask) {
        int v = l->map[i];
        if (!v) { *found = false; return (int)i; }
        const tui_cache_block *b = &l->c->blocks[v - 1];
        if (b->block == block && b->slot == slot && b->snap == snap) { *found = true; return (int)i; }
    }
}

static int map_grow(kload *l)
{
    int cap = l->map_cap ? 2 * l->map_cap : 256;
    int *m = calloc((size_t)cap, sizeof *m);
    if (!m) return bt_error(BT_ENOMEM, "out of memory");
    free(l->map);
    l->map = m;
    l->map_cap = cap;
    for (int r = 0; r < l->c->n_blocks; r++) {
        bool f;
        int i = map_find(l, l->c->blocks[r].block, l->c->blocks[r].slot, l->c->blocks[r].snap, &f);
        l->map[i] = r + 1;
    }
    return BT_OK;
}

static int block_row(kload *l, int block, bool slot, bool snap, int logical)
{
    tui_cache *c = l->c;
    if (2 * (c->n_blocks + 1) > l->map_cap) { int rc = map_grow(l); if (rc) return rc; }
    bool found;
    int i = map_find(l, block, slot, snap, &found);
    if (found) return l->map[i] - 1;
    if (c->n_blocks == l->cap_blocks) {
        int cap = l->cap_blocks ? 2 * l->cap_blocks : 64;
        tui_cache_block *n = realloc(c->blocks, (size_t)cap * sizeof *n);
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        c->blocks = n;
        l->cap_blocks = cap;
    }
    tui_cache_block *b = &c->blocks[c->n_blocks];
    memset(b, 0, sizeof *b);
    b->block = block;
    b->slot = slot;
    b->snap = snap;
    b->logical = logical;
    b->first_step = b->first_read = b->read_server = b->first_server = -1;
    b->last_step = b->last_server = b->writer_step = b->bad_step = -1;
    l->map[i] = ++c->n_blocks;
    return c->n_blocks - 1;
}

static int on_kv(void *user, const bt_kv_access *a)
{
    kload *l = user;
    tui_cache *c = l->c;
    if (c->n_rows >= TUI_CACHE_MAX_ACCESS) { c->truncated = true; return 1; }
    c->n_rows++;
    unsigned m = mode_bit(a->mode);
    if (!m) return 0;                   /* a mode this bangtrace does not know */
    int r = block_row(l, a->block, m == TUI_CM_SLOT, m == TUI_CM_SNAP, a->logical);
    if (r < 0) return r;
    tui_cache_block *b = &c->blocks[r];
    b->modes |= m;
    if (b->first_step < 0 || a->step < b->first_step) b->first_step = a->step;
    if (a->step > b->last_step) b->last_step = a->step;
    if (b->first_server < 0 || a->server_step < b->first_server) b->first_server = a->server_step;
    if (a->server_step > b->last_server) b->last_server = a->server_step;
    if (m != TUI_CM_W && (b->first_read < 0 || a->step < b->first_read)) {
        b->first_read = a->step;
        b->read_server = a->server_step;
        b->read_mode = m;
    }
    if (a->writer[0]) {
        bool other = strcmp(a->writer, c->self) != 0;
        if (other && !(b->flags & TUI_CF_OTHER)) {
            b->flags |= TUI_CF_OTHER;
            snprintf(b->writer, sizeof b->writer, "%s", a->writer);
            b->writer_step = a->writer_step;
        } else if (!(b->flags & TUI_CF_OTHER)) {
            snprintf(b->writer, sizeof b->writer, "%s", a->writer);
            b->writer_step = a->writer_step;
        }
    }
    if (a->bad_step >= 0 && (b->bad_step < 0 || a->bad_step < b->bad_step)) {
        b->flags |= TUI_CF_BAD;
        b->bad_step = a->bad_step;
        snprintf(b->bad_by, sizeof b->bad_by, "%s", a->bad_by);
    }
    if (a->note[0] && !b->note[0]) {
        b->flags |= TUI_CF_FAULT;
        snprintf(b->note, sizeof b->note, "%s", a->note);
    }
    if (l->n_tc == l->cap_tc) {
        int cap = l->cap_tc ? 2 * l->cap_tc : 256;
        tcell *n = realloc(l->tc, (size_t)cap * sizeof *n);
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        l->tc = n;
        l->cap_tc = cap;
    }
    l->tc[l->n_tc++] = (tcell){ r, a->step, a->server_step, m };
    return 0;
}

static int cmp_block(const void *x, const void *y)
{
    const tui_cache_block *a = x, *b = y;
    int ka = a->slot ? 2 : a->snap ? 1 : 0, kb = b->slot ? 2 : b->snap ? 1 : 0;
    if (ka != kb) return ka < kb ? -1 : 1;
    if (a->logical != b->logical) return a->logical < b->logical ? -1 : 1;
    return a->block < b->block ? -1 : a->block > b->block;
}

static int cmp_tcell(const void *x, const void *y)
{
    const tcell *a = x, *b = y;
    if (a->row != b->row) return a->row < b->row ? -1 : 1;
    return a->step < b->step ? -1 : a->step > b->step;
}

/* Rows in (slot, logical, block) order; cells merged per (row, step). */
static int finish_rows(kload *l)
{
    tui_cache *c = l->c;
    int n = c->n_blocks;
    if (!n) return BT_OK;
    for (int r = 0; r < n; r++) c->blocks[r].c0 = r;     /* the old row, for the remap */
    qsort(c->blocks, (size_t)n, sizeof *c->blocks, cmp_block);
    int *remap = malloc((size_t)n * sizeof *remap);
    if (!remap) return bt_error(BT_ENOMEM, "out of memory");
    for (int r = 0; r < n; r++) remap[c->blocks[r].c0] = r;
    for (int i = 0; i < l->n_tc; i++) l->tc[i].row = remap[l->tc[i].row];
    free(remap);
    qsort(l->tc, (size_t)l->n_tc, sizeof *l->tc, cmp_tcell);
    c->cells = malloc((size_t)(l->n_tc ? l->n_tc : 1) * sizeof *c->cells);
    if (!c->cells) return bt_error(BT_ENOMEM, "out of memory");
    for (int r = 0; r < n; r++) c->blocks[r].c0 = c->blocks[r].nc = 0;
    for (int i = 0; i < l->n_tc; i++) {
        const tcell *t = &l->tc[i];
        tui_cache_block *b = &c->blocks[t->row];
        if (b->nc && c->cells[c->n_cells - 1].step == t->step) { c->cells[c->n_cells - 1].modes |= t->mode; continue; }
        if (!b->nc) b->c0 = c->n_cells;
        b->nc++;
        c->cells[c->n_cells++] = (tui_cache_cell){ t->step, t->server_step, t->mode };
    }
    return BT_OK;
}

/* ---- the other requests' side: server.db ---- */

static bool names(const char *bad_by, const char *req)
{
    size_t n = strlen(bad_by), k = strlen(req);
    if (!k || n < k || strcmp(bad_by + n - k, req)) return false;
    return n == k || bad_by[n - k - 1] == ' ';
}

typedef struct sload {
    tui_cache *c;
    tui_cache_hot *h;
    char (*extra)[64];          /* requests past TUI_CACHE_MAX_REQS, for the count */
    int n_extra;
    int rc;
} sload;

static tui_cache_sreq *sreq_get(sload *s, const char *req)
{
    tui_cache_hot *h = s->h;
    for (int i = 0; i < h->n_req; i++) if (!strcmp(h->req[i].request, req)) return &h->req[i];
    if (h->n_req == TUI_CACHE_MAX_REQS) {
        for (int i = 0; i < s->n_extra; i++) if (!strcmp(s->extra[i], req)) return NULL;
        if (s->n_extra < 256) snprintf(s->extra[s->n_extra++], 64, "%s", req);
        h->more_req++;
        return NULL;
    }
    tui_cache_sreq *q = &h->req[h->n_req++];
    memset(q, 0, sizeof *q);
    snprintf(q->request, sizeof q->request, "%s", req);
    const tui_cache_block *b = &s->c->blocks[h->row];
    q->self = !strcmp(req, s->c->self);
    q->writer = (b->flags & TUI_CF_OTHER) && !strcmp(req, b->writer);
    q->poisoner = b->bad_step >= 0 && names(b->bad_by, req);
    q->w_lo = q->w_hi = q->r_lo = q->r_hi = q->h_lo = q->h_hi = q->b_lo = q->b_hi = q->l_lo = q->l_hi = -1;
    return q;
}

static void range_add(int *lo, int *hi, int *n, int step)
{
    if (*lo < 0 || step < *lo) *lo = step;
    if (step > *hi) *hi = step;
    (*n)++;
}

static int mark_add(sload *s, const char *req, int step, int mark)
{
    tui_cache_sreq *q = sreq_get(s, req);
    if (!q) return 0;
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 32;
        tui_cache_mark *m = realloc(q->m, (size_t)cap * sizeof *m);
        if (!m) return bt_error(BT_ENOMEM, "out of memory");
        q->m = m;
        q->cap = cap;
    }
    q->m[q->n++] = (tui_cache_mark){ step, mark };
    switch (mark) {
    case TUI_SM_WRITE: range_add(&q->w_lo, &q->w_hi, &q->n_w, step); break;
    case TUI_SM_READ: range_add(&q->r_lo, &q->r_hi, &q->n_r, step); break;
    case TUI_SM_HIT: range_add(&q->h_lo, &q->h_hi, &q->n_h, step); break;
    case TUI_SM_BAD: range_add(&q->b_lo, &q->b_hi, &q->n_b, step); break;
    case TUI_SM_LIFE: range_add(&q->l_lo, &q->l_hi, &q->n_l, step); break;
    default: break;
    }
    return 0;
}

static int on_access(void *user, const bt_server_access_row *a)
{
    sload *s = user;
    return mark_add(s, a->request, a->step, a->mode == 'w' ? TUI_SM_WRITE : TUI_SM_READ);
}

static int on_event(void *user, const bt_server_event_row *e)
{
    sload *s = user;
    bool bad = !strcmp(e->event, "inject") || !strcmp(e->event, "nonfinite");
    if (bad && !s->h->origin[0])
        snprintf(s->h->origin, sizeof s->h->origin, "server step %d: %s%s%s%s%s", e->step, e->event, e->request ? " by " : "",
                 e->request ? e->request : "", e->detail ? ": " : "", e->detail ? e->detail : "");
    if (!e->request) return 0;
    return mark_add(s, e->request, e->step, !strcmp(e->event, "hit") ? TUI_SM_HIT : bad ? TUI_SM_BAD : TUI_SM_LIFE);
}

static int cmp_mark(const void *x, const void *y)
{
    const tui_cache_mark *a = x, *b = y;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    return a->mark < b->mark ? -1 : a->mark > b->mark;
}

static int first_mark(const tui_cache_sreq *q)
{
    return q->n ? q->m[0].step : -1;
}

static int cmp_sreq(const void *x, const void *y)
{
    const tui_cache_sreq *a = x, *b = y;
    int fa = first_mark(a), fb = first_mark(b);
    if (fa != fb) return fa < fb ? -1 : 1;
    return strcmp(a->request, b->request);
}

static int follow(tui_cache *c, bt_server_reader *sv, tui_cache_hot *h)
{
    const tui_cache_block *b = &c->blocks[h->row];
    int lo = b->first_server, hi = b->last_server;
    if (b->bad_step >= 0 && b->bad_step < lo) lo = b->bad_step;
    if (b->writer_step >= 0 && b->writer_step < lo) lo = b->writer_step;
    if (lo < 0) lo = 0;
    if (hi < lo) hi = lo;
    h->lo = lo;
    h->hi = hi;
    h->gap_lo = h->gap_hi = -1;
    char extra[256][64];
    sload s = { .c = c, .h = h, .extra = extra };
    sreq_get(&s, c->self);              /* this request's row is never the one left out */
    int rc, limit = TUI_CACHE_SROWS;
    if ((int64_t)hi - lo + 1 <= TUI_CACHE_SPAN) {
        rc = bt_server_block_access(sv, b->block, lo, hi, limit, on_access, &s);
    } else {
        h->gap_lo = lo + TUI_CACHE_SPAN / 2;
        h->gap_hi = hi - TUI_CACHE_SPAN / 2;
        rc = bt_server_block_access(sv, b->block, lo, h->gap_lo - 1, limit, on_access, &s);
        if (!rc) rc = bt_server_block_access(sv, b->block, h->gap_hi + 1, hi, limit, on_access, &s);
    }
    if (!rc) rc = bt_server_block_events(sv, b->block, lo, hi, limit, on_event, &s);
    if (rc) return rc;
    for (int i = 0; i < h->n_req; i++) {
        tui_cache_sreq *q = &h->req[i];
        if (q->n >= limit) h->cut = true;
        qsort(q->m, (size_t)q->n, sizeof *q->m, cmp_mark);
    }
    qsort(h->req, (size_t)h->n_req, sizeof *h->req, cmp_sreq);
    return BT_OK;
}

/* Marked blocks, most telling first: the culprit, data another request made
 * non-finite, a fault's, this request's own non-finite blocks, then the
 * clean ones another request wrote (prefix hits). */
static int hot_rank(const tui_cache *c, const tui_cache_block *b)
{
    int r = 0;
    if (b->flags & TUI_CF_CULPRIT) r += 100;
    if ((b->flags & TUI_CF_BAD) && strcmp(b->bad_by, c->self)) r += 8;
    if (b->flags & TUI_CF_FAULT) r += 4;
    if (b->flags & TUI_CF_BAD) r += 2;
    if (b->flags & TUI_CF_OTHER) r += 1;
    return r;
}

static void pick_hot(tui_cache *c)
{
    for (int r = 0; r < c->n_blocks; r++) {
        if (!c->blocks[r].flags) continue;
        c->n_marked++;
        int rank = hot_rank(c, &c->blocks[r]), at = c->n_hot;
        while (at > 0 && hot_rank(c, &c->blocks[c->hot[at - 1].row]) < rank) at--;
        if (at >= TUI_CACHE_MAX_HOT) continue;
        int last = c->n_hot < TUI_CACHE_MAX_HOT ? c->n_hot : TUI_CACHE_MAX_HOT - 1;
        memmove(&c->hot[at + 1], &c->hot[at], (size_t)(last - at) * sizeof *c->hot);
        memset(&c->hot[at], 0, sizeof *c->hot);
        c->hot[at].row = r;
        if (c->n_hot < TUI_CACHE_MAX_HOT) c->n_hot++;
    }
}

static void open_server(tui_cache *c, tui_trace *tr)
{
    char dir[4096];
    bt_dir_of(tui_trace_path(tr), dir, sizeof dir);
    snprintf(c->server_path, sizeof c->server_path, "%s/server.db", dir);
    struct stat st;
    if (lstat(c->server_path, &st) != 0) {
        c->server = TUI_CS_ABSENT;
        if (errno != ENOENT) snprintf(c->server_note, sizeof c->server_note, "%s: %s", c->server_path, strerror(errno));
        return;
    }
    bt_server_reader *sv = NULL;
    int rc = bt_server_open(c->server_path, &sv);
    bt_server_request_row req;
    if (!rc && !c->self[0]) {
        c->server = TUI_CS_OTHER;
        snprintf(c->server_note, sizeof c->server_note, "this trace names no request (meta request_id): not matched to %s",
                 c->server_path);
        bt_server_close(sv);
        return;
    }
    if (!rc && (rc = bt_server_request(sv, c->self, &req)) == BT_ENOTFOUND) {
        c->server = TUI_CS_OTHER;
        snprintf(c->server_note, sizeof c->server_note, "%s does not list %s (another server's?)", c->server_path, c->self);
        bt_server_close(sv);
        return;
    }
    if (!rc) rc = bt_server_last_step(sv, &c->server_last);
    for (int i = 0; !rc && i < c->n_hot; i++) rc = follow(c, sv, &c->hot[i]);
    if (rc) {
        c->server = TUI_CS_ERROR;
        snprintf(c->server_note, sizeof c->server_note, "%s", bt_errmsg());
        for (int i = 0; i < c->n_hot; i++) {
            for (int j = 0; j < c->hot[i].n_req; j++) free(c->hot[i].req[j].m);
            c->hot[i].n_req = c->hot[i].more_req = 0;
            c->hot[i].origin[0] = 0;
        }
    } else {
        c->server = TUI_CS_OK;
        if (req.first_step >= 0) c->server_lo = req.first_step;
        if (req.last_step >= 0) c->server_hi = req.last_step;
    }
    bt_server_close(sv);
}

int tui_cache_load(tui_trace *tr, int upto_step, tui_cache *out)
{
    memset(out, 0, sizeof *out);
    out->min_step = out->max_step = out->culprit_step = out->culprit_row = -1;
    out->server_lo = out->server_hi = out->server_last = -1;
    const char *self = bt_trace_meta_get(tr->r, "request_id");
    snprintf(out->self, sizeof out->self, "%s", self ? self : "");
    out->hot = calloc(TUI_CACHE_MAX_HOT, sizeof *out->hot);
    if (!out->hot) return bt_error(BT_ENOMEM, "out of memory");
    kload l = { .c = out };
    int rc = bt_trace_kv_access_each(tr->r, on_kv, &l);
    if (!rc) rc = finish_rows(&l);
    free(l.map);
    free(l.tc);
    if (rc) { tui_cache_free(out); return rc; }
    tui_trace_bounds(tr, &out->min_step, &out->max_step, NULL, NULL);
    for (int r = 0; r < out->n_blocks; r++) {
        const tui_cache_block *b = &out->blocks[r];
        if (out->min_step < 0 || b->first_step < out->min_step) out->min_step = b->first_step;
        if (b->last_step > out->max_step) out->max_step = b->last_step;
        if (b->first_server >= 0 && (out->server_lo < 0 || b->first_server < out->server_lo)) out->server_lo = b->first_server;
        if (b->last_server > out->server_hi) out->server_hi = b->last_server;
    }
    if (out->n_rows) {
        bt_provenance p;
        if ((rc = bt_provenance_get(tr->r, upto_step, -1, &p))) { tui_cache_free(out); return rc; }
        out->contaminated = p.contaminated;
        out->culprit_step = p.culprit_step;
        snprintf(out->culprit, sizeof out->culprit, "%s", p.culprit);
        snprintf(out->hits, sizeof out->hits, "%s", p.hits);
        for (int r = 0; p.contaminated && r < out->n_blocks; r++)
            if (out->blocks[r].block == p.culprit_block && out->blocks[r].slot == p.culprit_slot &&
                out->blocks[r].snap == p.culprit_snap) {
                out->blocks[r].flags |= TUI_CF_CULPRIT;
                out->culprit_row = r;
            }
        pick_hot(out);
        open_server(out, tr);
    }
    if ((rc = tui_cache_build_lines(out, 0))) { tui_cache_free(out); return rc; }
    return BT_OK;
}

void tui_cache_free(tui_cache *c)
{
    free(c->blocks);
    free(c->cells);
    for (int i = 0; c->hot && i < c->n_hot; i++)
        for (int j = 0; j < c->hot[i].n_req; j++) free(c->hot[i].req[j].m);
    free(c->hot);
    free(c->lines);
    memset(c, 0, sizeof *c);
    c->min_step = c->max_step = c->culprit_step = c->culprit_row = c->server_last = -1;
}

int tui_cache_row_step(const tui_cache *c, int row)
{
    if (row < 0 || row >= c->n_blocks) return -1;
    return c->blocks[row].first_read >= 0 ? c->blocks[row].first_read : c->blocks[row].first_step;
}

/* ---- text ---- */

static void cat(char *buf, size_t cap, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void cat(char *buf, size_t cap, size_t *o, const char *fmt, ...)
{
    if (*o >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, cap - *o, fmt, ap);
    va_end(ap);
    if (n > 0) *o = *o + (size_t)n < cap ? *o + (size_t)n : cap - 1;
}

static const char *who(const tui_cache *c, const char *name)
{
    return !strcmp(name, c->self) ? "this request" : name;
}

/* "by req-..-1 @5; non-finite @0 by padding lane of req-..-1; fault: ..." */
static void block_info(const tui_cache *c, const tui_cache_block *b, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    if (b->slot) cat(buf, cap, &o, "state slot kept from %s @%d", b->writer[0] ? b->writer : "another request", b->writer_step);
    else if (b->snap) cat(buf, cap, &o, "state snapshot from %s @%d", b->writer[0] ? b->writer : "?", b->writer_step);
    else if (b->flags & TUI_CF_OTHER) cat(buf, cap, &o, "written by %s @%d", b->writer, b->writer_step);
    if (b->flags & TUI_CF_BAD)
        cat(buf, cap, &o, "%snon-finite @%d by %s", o ? "; " : "", b->bad_step, b->bad_by[0] ? who(c, b->bad_by) : "?");
    if (b->flags & TUI_CF_FAULT) cat(buf, cap, &o, "%sfault: %s", o ? "; " : "", b->note);
    if (!o && b->modes == TUI_CM_W) cat(buf, cap, &o, "written here");
}

static void block_label(const tui_cache_block *b, char *buf, size_t cap)
{
    char modes[24], id[16], lg[16];
    tui_cache_modes_text(b->modes, modes, sizeof modes);
    if (b->slot) snprintf(id, sizeof id, "s%d", b->block);
    else if (b->snap) snprintf(id, sizeof id, "p%d", b->block);
    else snprintf(id, sizeof id, "%d", b->block);
    if (b->slot || b->snap) snprintf(lg, sizeof lg, "-");
    else snprintf(lg, sizeof lg, "%d", b->logical);
    snprintf(buf, cap, "%c%c%c%c %5.5s L%-4.4s %-7.7s ", b->flags & TUI_CF_CULPRIT ? '>' : ' ', b->flags & TUI_CF_OTHER ? '<' : ' ',
             b->flags & TUI_CF_BAD ? '!' : ' ', b->flags & TUI_CF_FAULT ? 'F' : ' ', id, lg, modes);
}

static unsigned cell_at(const tui_cache *c, const tui_cache_block *b, int step)
{
    int lo = b->c0, hi = b->c0 + b->nc - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int s = c->cells[mid].step;
        if (s == step) return c->cells[mid].modes;
        if (s < step) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

static int server_cols(const tui_cache_hot *h, int width, int *per)
{
    tui_cache_layout lay;
    int span = h->hi - h->lo + 1;
    tui_layout_cache(width > 0 ? width : 80, span, &lay);
    return tui_cache_bins(span, lay.grid_w, per);
}

static int smark_in(const tui_cache_sreq *q, int a, int b)
{
    int best = TUI_SM_NONE;
    int lo = 0, hi = q->n;              /* first mark with step >= a */
    while (lo < hi) { int mid = (lo + hi) / 2; if (q->m[mid].step < a) lo = mid + 1; else hi = mid; }
    for (int i = lo; i < q->n && q->m[i].step <= b; i++) if (q->m[i].mark > best) best = q->m[i].mark;
    return best;
}

static void range_text(char *buf, size_t cap, size_t *o, const char *what, int lo, int hi, int n)
{
    if (n <= 0) return;
    if (lo == hi) cat(buf, cap, o, "%s%s %d", *o ? "; " : "", what, lo);
    else cat(buf, cap, o, "%s%s %d-%d (%d)", *o ? "; " : "", what, lo, hi, n);
}

void tui_cache_render(const tui_cache *c, const tui_cache_line *l, int width, int col0, char *buf, size_t cap)
{
    if (!cap) return;
    buf[0] = 0;
    size_t o = 0;
    int n_cols = c->max_step >= c->min_step && c->min_step >= 0 ? c->max_step - c->min_step + 1 : 0;
    tui_cache_layout lay;
    tui_layout_cache(width > 0 ? width : 80, n_cols, &lay);
    if (col0 >= n_cols) col0 = n_cols - 1;
    if (col0 < 0) col0 = 0;
    int ncol = n_cols - col0 < lay.grid_w ? n_cols - col0 : lay.grid_w;
    char axis[1024];
    switch (l->kind) {
    case TUI_CL_AXIS:
        tui_cache_axis(c->min_step + col0, ncol, 1, axis, sizeof axis);
        cat(buf, cap, &o, "%-*s%s", lay.label_w, "  step", axis);
        if (ncol < n_cols) cat(buf, cap, &o, " (steps %d-%d of %d-%d)", c->min_step + col0, c->min_step + col0 + ncol - 1, c->min_step, c->max_step);
        return;
    case TUI_CL_BLOCK: {
        const tui_cache_block *b = &c->blocks[l->ref];
        char label[64], info[512];
        block_label(b, label, sizeof label);
        cat(buf, cap, &o, "%s", label);
        for (int i = 0; i < ncol && o + 1 < cap; i++) buf[o++] = tui_cache_cell_char(cell_at(c, b, c->min_step + col0 + i));
        buf[o] = 0;
        block_info(c, b, info, sizeof info);
        if (info[0]) cat(buf, cap, &o, " %s", info);
        return;
    }
    case TUI_CL_SAXIS: {
        const tui_cache_hot *h = &c->hot[l->ref];
        int per, cols = server_cols(h, width, &per);
        tui_cache_axis(h->lo, cols, per, axis, sizeof axis);
        cat(buf, cap, &o, "%-*s%s (server steps %d-%d", lay.label_w, "    server step", axis, h->lo, h->hi);
        if (per > 1) cat(buf, cap, &o, ", %d a column", per);
        if (h->gap_lo >= 0) cat(buf, cap, &o, "; access rows of %d-%d not read", h->gap_lo, h->gap_hi);
        cat(buf, cap, &o, ")");
        return;
    }
    case TUI_CL_SREQ: {
        const tui_cache_hot *h = &c->hot[l->ref];
        const tui_cache_sreq *q = &h->req[l->ref2];
        int per, cols = server_cols(h, width, &per);
        char id[24];
        size_t n = strlen(q->request);
        if (n > 19) snprintf(id, sizeof id, "%.18s~", q->request);
        else snprintf(id, sizeof id, "%s", q->request);
        cat(buf, cap, &o, "%c%c%c  %-19s ", q->self ? '=' : ' ', q->writer ? '<' : ' ', q->poisoner ? '!' : ' ', id);
        for (int j = 0; j < cols && o + 1 < cap; j++) {
            int a = h->lo + j * per, b = a + per - 1;
            int m = smark_in(q, a, b);
            bool gap = h->gap_lo >= 0 && a >= h->gap_lo && b <= h->gap_hi;
            buf[o++] = m == TUI_SM_NONE && gap ? ' ' : tui_cache_smark_char(m);
        }
        buf[o] = 0;
        cat(buf, cap, &o, " %s", q->self ? "this request: " : "");
        char sum[400];
        size_t so = 0;
        sum[0] = 0;
        range_text(sum, sizeof sum, &so, "wrote", q->w_lo, q->w_hi, q->n_w);
        range_text(sum, sizeof sum, &so, "hit", q->h_lo, q->h_hi, q->n_h);
        range_text(sum, sizeof sum, &so, "read", q->r_lo, q->r_hi, q->n_r);
        range_text(sum, sizeof sum, &so, "non-finite/fault", q->b_lo, q->b_hi, q->n_b);
        range_text(sum, sizeof sum, &so, "life events", q->l_lo, q->l_hi, q->n_l);
        if (q->poisoner) cat(sum, sizeof sum, &so, "%sput the non-finite value there", so ? "; " : "");
        cat(buf, cap, &o, "%s", so ? sum : "no access or event in these steps");
        return;
    }
    default:
        cat(buf, cap, &o, "%s", l->text);
        return;
    }
}

/* ---- lines ---- */

static int add_line_ind(tui_cache *c, int kind, int ref, int ref2, int ind, const char *text)
{
    if (c->n_lines == c->cap_lines) {
        int cap = c->cap_lines ? 2 * c->cap_lines : 64;
        tui_cache_line *n = realloc(c->lines, (size_t)cap * sizeof *n);
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        c->lines = n;
        c->cap_lines = cap;
    }
    tui_cache_line *l = &c->lines[c->n_lines++];
    l->kind = kind;
    l->ref = ref;
    l->ref2 = ref2;
    snprintf(l->text, sizeof l->text, "%*s%s", ind, "", text ? text : "");
    return BT_OK;
}

static int add_line(tui_cache *c, int kind, int ref, int ref2, const char *text)
{
    return add_line_ind(c, kind, ref, ref2, 0, text);
}

/* A text line, wrapped at width (<= 0: one line). */
static int add_text(tui_cache *c, int width, int kind, int ref, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int add_text(tui_cache *c, int width, int kind, int ref, const char *fmt, ...)
{
    char text[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (width <= 0) return add_line(c, kind, ref, 0, text);
    /* the leading spaces indent every line of it (tui_wrap drops them) */
    int ind = 0;
    while (text[ind] == ' ' && ind < 8) ind++;
    char buf[1600];
    const char *parts[16];
    int n = tui_wrap(text + ind, width - ind > 10 ? width - ind : 10, 16, buf, sizeof buf, parts);
    for (int i = 0; i < n; i++) {
        int rc = add_line_ind(c, kind, ref, i, ind, parts[i]);
        if (rc) return rc;
    }
    return BT_OK;
}

/* The path writer -> block -> this request, from the trace alone. */
static void path_text(const tui_cache *c, const tui_cache_block *b, char *buf, size_t cap)
{
    size_t o = 0;
    char how[24];
    tui_cache_modes_text(b->read_mode, how, sizeof how);
    if (b->slot) {
        cat(buf, cap, &o, "path: %s wrote state slot %d (last at server step %d) -> not reset on reuse -> this request's step %d "
            "(server step %d)", b->writer[0] ? b->writer : "another request", b->block, b->writer_step, b->first_step,
            b->first_server);
        return;
    }
    if (b->snap) {
        cat(buf, cap, &o, "path: %s's recurrent state at a block boundary kept as snapshot %d (server step %d) -> restored by "
            "this request's prefix hit at step %d (server step %d)%s%s", b->writer[0] ? b->writer : "another request", b->block,
            b->writer_step, b->first_step, b->first_server, b->note[0] ? ": " : "", b->note);
        return;
    }
    cat(buf, cap, &o, "path: ");
    if (b->first_read < 0 && !(b->flags & TUI_CF_OTHER)) {
        /* only written here: what happened to it after */
        cat(buf, cap, &o, "this request wrote block %d at step %d (server step %d)", b->block, b->first_step, b->first_server);
        if (b->bad_step >= 0)
            cat(buf, cap, &o, "; it held a non-finite value from server step %d on, put there by %s", b->bad_step,
                b->bad_by[0] ? who(c, b->bad_by) : "?");
    } else {
        if (b->bad_step >= 0)
            cat(buf, cap, &o, "%s put a non-finite value into block %d at server step %d -> ", b->bad_by[0] ? who(c, b->bad_by) : "?",
                b->block, b->bad_step);
        if (b->flags & TUI_CF_OTHER) cat(buf, cap, &o, "%s wrote it (last at server step %d) -> ", b->writer, b->writer_step);
        if (b->first_read >= 0)
            cat(buf, cap, &o, "this request read it (%s) at step %d (server step %d)", how, b->first_read, b->read_server);
        else cat(buf, cap, &o, "this request wrote it at step %d (server step %d)", b->first_step, b->first_server);
    }
    if (b->note[0]) cat(buf, cap, &o, "; fault: %s", b->note);
}

int tui_cache_build_lines(tui_cache *c, int width)
{
    c->n_lines = 0;
    c->lines_width = width;
    int rc;
    if (!c->n_rows)
        return add_text(c, width, TUI_CL_HEAD, 0, "Cache: not a batched server's trace (no kv_access): "
                        "the view shows the KV blocks of a request traced by serve --trace-dir");
    rc = add_text(c, width, TUI_CL_HEAD, 0, "Cache: %s, %d block%s (%d marked) over steps %d-%d, server steps %d-%d; %d kv_access rows%s",
                  c->self[0] ? c->self : "this request", c->n_blocks, c->n_blocks == 1 ? "" : "s", c->n_marked, c->min_step,
                  c->max_step, c->server_lo, c->server_hi, c->n_rows, c->truncated ? " (the first ones only)" : "");
    if (!rc && c->contaminated) rc = add_text(c, width, TUI_CL_BAD, 0, "culprit: %s", c->culprit);
    else if (!rc) rc = add_text(c, width, TUI_CL_NOTE, 0, "no other request's data behind this request");
    if (!rc && c->hits[0]) rc = add_text(c, width, TUI_CL_NOTE, 0, "prefix cache: %s", c->hits);
    if (!rc) rc = add_text(c, width, TUI_CL_NOTE, 0, "W wr H hit r rd S slot P snap  > culprit < other's data ! non-finite F fault");
    if (!rc) rc = add_line(c, TUI_CL_AXIS, 0, 0, NULL);
    for (int r = 0; !rc && r < c->n_blocks; r++) rc = add_line(c, TUI_CL_BLOCK, r, 0, NULL);
    if (rc) return rc;
    if (!c->n_marked) return add_text(c, width, TUI_CL_NOTE, 0, "no block marked: every block is this request's own and finite");
    rc = add_text(c, width, TUI_CL_SEC, 0, "Marked blocks: %d (%d followed below, the most telling first)", c->n_marked, c->n_hot);
    switch (c->server) {
    case TUI_CS_ABSENT:
        if (!rc) rc = add_text(c, width, TUI_CL_NOTE, 0, "server.db: %s", c->server_note[0] ? c->server_note :
                               "none beside this trace: the other requests' side is not shown");
        break;
    case TUI_CS_OK:
        if (!rc) rc = add_text(c, width, TUI_CL_NOTE, 0, "server.db: %s (server steps 0-%d; this request's %d-%d)", c->server_path,
                               c->server_last, c->server_lo, c->server_hi);
        break;
    default: if (!rc) rc = add_text(c, width, TUI_CL_BAD, 0, "server.db: %s", c->server_note); break;
    }
    for (int i = 0; !rc && i < c->n_hot; i++) {
        const tui_cache_hot *h = &c->hot[i];
        const tui_cache_block *b = &c->blocks[h->row];
        char label[64], info[512], path[1024], modes[24];
        block_label(b, label, sizeof label);
        block_info(c, b, info, sizeof info);
        tui_cache_modes_text(b->modes, modes, sizeof modes);
        rc = add_text(c, width, TUI_CL_HOT, i, "%.4s %s %d (L%d, %s): %s", label, b->slot ? "slot" : b->snap ? "snapshot" : "block", b->block, b->logical,
                      modes, info);
        path_text(c, b, path, sizeof path);
        if (!rc) rc = add_text(c, width, TUI_CL_HOT, i, "     %s", path);
        if (c->server != TUI_CS_OK) continue;
        if (!rc) rc = add_line(c, TUI_CL_SAXIS, i, 0, NULL);
        for (int j = 0; !rc && j < h->n_req; j++) rc = add_line(c, TUI_CL_SREQ, i, j, NULL);
        if (!rc && h->more_req) rc = add_text(c, width, TUI_CL_NOTE, i, "     (%d more request%s not shown)", h->more_req,
                                               h->more_req == 1 ? "" : "s");
        if (!rc && h->cut) rc = add_text(c, width, TUI_CL_NOTE, i, "     (a query stopped at its %d-row limit)", TUI_CACHE_SROWS);
        if (!rc && h->origin[0]) rc = add_text(c, width, TUI_CL_NOTE, i, "     first: %s", h->origin);
    }
    if (!rc && c->n_marked > c->n_hot)
        rc = add_text(c, width, TUI_CL_NOTE, 0, "(%d more marked block%s not followed)", c->n_marked - c->n_hot,
                      c->n_marked - c->n_hot == 1 ? "" : "s");
    return rc;
}

/* ---- the dump ---- */

int tui_dump_cache(tui_app *a, FILE *out, int step)
{
    int lo, hi;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    if (step >= 0 && (hi < 0 || step < lo || step > hi))
        return bt_error(BT_ENOTFOUND, "%s: no step %d in this trace", tui_trace_path(a->tr), step);
    tui_cache c;
    int rc = tui_cache_load(a->tr, step, &c);
    if (rc) return rc;
    int width = a->dump_width > 0 ? a->dump_width : 80;
    int n_cols = c.max_step >= c.min_step && c.min_step >= 0 ? c.max_step - c.min_step + 1 : 0;
    tui_cache_layout lay;
    tui_layout_cache(width, n_cols, &lay);
    char *text = malloc(4096), *line = malloc(8192);
    if (!text || !line) { free(text); free(line); tui_cache_free(&c); return bt_error(BT_ENOMEM, "out of memory"); }
    for (int i = 0; i < c.n_lines; i++) {
        if (c.lines[i].kind == TUI_CL_AXIS) {
            /* the request grid in chunks of the columns one screen shows */
            int j = i + 1;
            while (j < c.n_lines && c.lines[j].kind == TUI_CL_BLOCK) j++;
            for (int col0 = 0; col0 < (n_cols ? n_cols : 1); col0 += lay.grid_w)
                for (int k = i; k < j; k++) {
                    tui_cache_render(&c, &c.lines[k], width, col0, text, 4096);
                    tui_sanitize(text, strlen(text), line, 8192, 0, a->san);
                    fprintf(out, "%s\n", line);
                }
            i = j - 1;
            continue;
        }
        tui_cache_render(&c, &c.lines[i], width, 0, text, 4096);
        tui_sanitize(text, strlen(text), line, 8192, 0, a->san);
        fprintf(out, "%s\n", line);
    }
    free(text);
    free(line);
    tui_cache_free(&c);
    return BT_OK;
}
