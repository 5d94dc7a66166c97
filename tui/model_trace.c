/* model_trace.c - opening a trace for the browser: the reader, the tensor
 * tables and grids, per-tensor medians and the piece cache.
 *
 * The trace is opened with the reader (bt_trace_open: read-only, validated
 * before anything else) and every browse query is prepared at once
 * (bt_trace_browse_check), so a foreign or damaged schema fails here, before
 * curses starts. The browser must never change the evidence: the reader
 * opens the file read-only and nothing here writes. Nothing scans a whole
 * table. */
#include "model_impl.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PIECE_CAP 65536          /* power of two; vocabularies above this share the cache */
#define PIECE_SPAN 2048          /* rows either side of a step harvested for pieces */

const char *tui_trace_path(const tui_trace *tr) { return bt_trace_reader_path(tr->r); }

void tui_trace_bounds(const tui_trace *tr, int *min_step, int *max_step, int64_t *min_seq, int64_t *max_seq)
{
    if (min_step) *min_step = tr->min_step;
    if (max_step) *max_step = tr->max_step;
    if (min_seq) *min_seq = tr->min_seq;
    if (max_seq) *max_seq = tr->max_seq;
}

tui_model_tab *tui_model_tab_get(tui_trace *tr, const char *model)
{
    for (int i = 0; i < tr->n_models; i++)
        if (!strcmp(tr->models[i].name, model)) return &tr->models[i];
    return NULL;
}

/* The reader's tensor table of each model, copied into the browser's
 * tensors (fixed-size names for the views) with its grid. */
static int load_tensors(tui_trace *tr)
{
    char names[BT_ARRAY_SIZE(tr->models)][16];
    int rc = bt_trace_models(tr->r, names, (int)BT_ARRAY_SIZE(tr->models), &tr->n_models);
    if (rc) return rc;
    for (int i = 0; i < tr->n_models; i++) {
        tui_model_tab *m = &tr->models[i];
        memcpy(m->name, names[i], sizeof m->name);
        const bt_trace_tensor_row *rows;
        bt_trace_tensors(tr->r, m->name, &rows, &m->n);
        m->t = calloc(m->n ? m->n : 1, sizeof(*m->t));
        if (!m->t) return bt_error(BT_ENOMEM, "out of memory reading tensors");
        for (int k = 0; k < m->n; k++) {
            tui_tensor *t = &m->t[k];
            t->idx = rows[k].idx;
            t->layer = rows[k].layer;
            t->width = rows[k].width;
            snprintf(t->name, sizeof t->name, "%s", rows[k].name);
            snprintf(t->op, sizeof t->op, "%s", rows[k].op);
            if (t->idx + 1 > m->n_slots) m->n_slots = t->idx + 1;
        }
        m->slot = malloc(sizeof(int) * (m->n_slots ? m->n_slots : 1));
        if (!m->slot) return bt_error(BT_ENOMEM, "out of memory reading tensors");
        for (int k = 0; k < m->n_slots; k++) m->slot[k] = -1;
        for (int k = 0; k < m->n; k++) m->slot[m->t[k].idx] = k;
        if ((rc = tui_grid_build(m->t, m->n, &m->grid))) return bt_error(rc, "%s: %s", tui_trace_path(tr), bt_errmsg());
    }
    return BT_OK;
}

int tui_trace_open(const char *path, tui_trace **out)
{
    *out = NULL;
    /* a fifo or a device is refused by the reader (bt_trace_open), as for
     * every command */
    tui_trace *tr = calloc(1, sizeof(*tr));
    if (!tr) return bt_error(BT_ENOMEM, "out of memory");
    tr->min_step = tr->max_step = -1;
    tr->min_seq = tr->max_seq = -1;
    int rc;
    if ((rc = bt_trace_open(path, &tr->r))) goto fail;
    if ((rc = bt_trace_browse_check(tr->r))) goto fail;
    if ((rc = load_tensors(tr))) goto fail;
    /* The text is prompt + output; drafted tokens (speculative traces) are
     * not part of it. */
    if ((rc = bt_trace_bounds(tr->r, &tr->min_step, &tr->max_step, &tr->min_seq, &tr->max_seq))) goto fail;
    tr->pieces = calloc(PIECE_CAP, sizeof(*tr->pieces));
    if (!tr->pieces) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    for (int i = 0; i < PIECE_CAP; i++) tr->pieces[i].id = -1;
    tr->pieces_lo = 1;
    tr->pieces_hi = 0;
    *out = tr;
    return BT_OK;
fail:
    tui_trace_close(tr);
    return rc;
}

void tui_trace_close(tui_trace *tr)
{
    if (!tr) return;
    bt_trace_reader_close(tr->r);
    for (int i = 0; i < tr->n_models; i++) {
        tui_model_tab *m = &tr->models[i];
        free(m->t);
        free(m->slot);
        free(m->median);
        tui_grid_free(&m->grid);
    }
    if (tr->pieces)
        for (int i = 0; i < PIECE_CAP; i++) free(tr->pieces[i].piece);
    free(tr->pieces);
    free(tr);
}

const tui_grid *tui_trace_grid(tui_trace *tr, const char *model)
{
    tui_model_tab *m = tui_model_tab_get(tr, model);
    return m ? &m->grid : NULL;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Sample evenly spaced steps (not the first N: the start of a trace is the
 * prompt and says little about the steady state), one indexed blob lookup
 * each, and take the median absmax of every slot. */
static int compute_medians(tui_trace *tr, tui_model_tab *m)
{
    int ns = m->n_slots;
    m->median = malloc(sizeof(float) * (ns ? ns : 1));
    float *vals = malloc(sizeof(float) * (size_t)(ns ? ns : 1) * TUI_MEDIAN_SAMPLES);
    int *cnt = calloc(ns ? ns : 1, sizeof(int));
    int rc = BT_OK;
    if (!m->median || !vals || !cnt) { rc = bt_error(BT_ENOMEM, "out of memory for medians"); goto done; }
    for (int i = 0; i < ns; i++) m->median[i] = NAN;
    if (tr->min_step >= 0) {
        int64_t span = (int64_t)tr->max_step - tr->min_step;
        int n = span + 1 < TUI_MEDIAN_SAMPLES ? (int)span + 1 : TUI_MEDIAN_SAMPLES;
        int64_t last = -1;
        for (int k = 0; k < n; k++) {
            int64_t want = tr->min_step + (n > 1 ? span * k / (n - 1) : 0);
            if (want <= last) want = last + 1;
            int step;
            if ((rc = bt_trace_tap_step_from(tr->r, m->name, (int)want, &step))) goto done;
            if (step < 0) break;
            last = step;
            bt_trace_tap_row *taps;
            int nt;
            if ((rc = bt_trace_step_taps(tr->r, step, &taps, &nt))) goto done;
            for (int i = 0; i < nt; i++) {
                int s = taps[i].idx;
                float v = tui_absmax(taps[i].min, taps[i].max);
                if (s < ns && taps[i].recorded && !isnan(v) && cnt[s] < TUI_MEDIAN_SAMPLES)
                    vals[(size_t)s * TUI_MEDIAN_SAMPLES + cnt[s]++] = v;
            }
            free(taps);
        }
    }
    for (int i = 0; i < ns; i++) {
        if (!cnt[i]) continue;
        float *v = vals + (size_t)i * TUI_MEDIAN_SAMPLES;
        qsort(v, cnt[i], sizeof(float), cmp_float);
        m->median[i] = cnt[i] % 2 ? v[cnt[i] / 2] : 0.5f * (v[cnt[i] / 2 - 1] + v[cnt[i] / 2]);
    }
done:
    free(vals);
    free(cnt);
    if (rc) { free(m->median); m->median = NULL; }
    return rc;
}

const float *tui_trace_medians(tui_trace *tr, const char *model)
{
    tui_model_tab *m = tui_model_tab_get(tr, model);
    if (!m) return NULL;
    if (!m->median && compute_medians(tr, m) != BT_OK) return NULL;
    return m->median;
}

static unsigned piece_hash(int id) { return ((unsigned)id * 2654435761u) & (PIECE_CAP - 1); }

void tui_piece_put(tui_trace *tr, int id, const char *piece, int len)
{
    if (id < 0 || !piece || tr->n_pieces >= PIECE_CAP * 3 / 4) return;
    unsigned h = piece_hash(id);
    while (tr->pieces[h].id >= 0) {
        if (tr->pieces[h].id == id) return;
        h = (h + 1) & (PIECE_CAP - 1);
    }
    char *p = malloc(len + 1);
    if (!p) return;
    memcpy(p, piece, len);
    p[len] = 0;
    tr->pieces[h] = (tui_piece_ent){ id, len, p };
    tr->n_pieces++;
}

static const tui_piece_ent *piece_get(tui_trace *tr, int id)
{
    unsigned h = piece_hash(id);
    while (tr->pieces[h].id >= 0) {
        if (tr->pieces[h].id == id) return &tr->pieces[h];
        h = (h + 1) & (PIECE_CAP - 1);
    }
    return NULL;
}

static int harvest_cb(void *user, const bt_trace_token_row *t)
{
    tui_trace *tr = user;
    if (t->seq > tr->pieces_hi) return 1;
    if (t->piece) tui_piece_put(tr, t->id, t->piece, (int)t->piece_len);
    return 0;
}

const char *tui_trace_piece(tui_trace *tr, int id, int64_t near_seq, int *len)
{
    const tui_piece_ent *e = piece_get(tr, id);
    if (!e && near_seq >= 0 && !(near_seq >= tr->pieces_lo && near_seq <= tr->pieces_hi)) {
        tr->pieces_lo = near_seq - PIECE_SPAN;
        tr->pieces_hi = near_seq + PIECE_SPAN;
        /* a label, not evidence: a failed read only leaves it unlabelled */
        bt_trace_tokens_each(tr->r, tr->pieces_lo, 2 * PIECE_SPAN + 1, harvest_cb, tr);
        e = piece_get(tr, id);
    }
    if (!e) return NULL;
    if (len) *len = e->len;
    return e->piece;
}

/* The first token row of a step: a text (non-draft) row if it has one. */
typedef struct step_seq { int64_t text, draft; } step_seq;

static int step_seq_cb(void *user, const bt_trace_token_row *t)
{
    step_seq *s = user;
    if (strcmp(t->role, "draft")) { s->text = t->seq; return 1; }
    if (s->draft < 0) s->draft = t->seq;
    return 0;
}

int64_t tui_trace_step_seq(tui_trace *tr, int step)
{
    step_seq s = { -1, -1 };
    if (bt_trace_tokens_of_steps(tr->r, step, step, step_seq_cb, &s) < 0) return -1;
    return s.text >= 0 ? s.text : s.draft;
}
