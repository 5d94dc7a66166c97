/* model_step.c - one step as plain data: its logit snapshot and the
 * statistics of every tapped tensor.
 *
 * Cost: one steps row, one tap_blobs row (decoded here: bf16 min, max, mean,
 * rms per slot), the step's tap_bad rows (full precision, non-finite counts),
 * one logits row and the token the step produced - all primary-key or index
 * lookups. */
#include "model_impl.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parse a JSON array of numbers ("[1, 2.5, null]") into v (at most max);
 * null / non-numbers become NAN. Returns the count. */
static int parse_num_array(const char *s, double *v, int max)
{
    int n = 0;
    if (!s) return 0;
    while (*s && *s != '[') s++;
    if (*s) s++;
    while (*s && n < max) {
        while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t') s++;
        if (!*s || *s == ']') break;
        char *end;
        double x = strtod(s, &end);
        if (end == s) {                     /* null, "NaN", junk: skip the token */
            x = NAN;
            while (*s && *s != ',' && *s != ']') s++;
            end = (char *)s;
        }
        v[n++] = x;
        s = end;
    }
    return n;
}

/* The snapshot at pos (< 0: the last row, the one that was sampled). A
 * verify step has one row per target row used, each predicting the token at
 * pos + 1; the token that row produced (an accepted draft or the bonus) pins
 * the softmax normalizer, so it is matched by position, not by step alone.
 * Returns whether the row exists. */
static bool load_logits(tui_trace *tr, tui_step *st, int pos)
{
    tui_logits *lg = &st->lg;
    memset(lg, 0, sizeof(*lg));
    lg->max = lg->entropy = lg->chosen_logprob = NAN;
    lg->argmax[0] = lg->argmax[1] = lg->argmax[2] = -1;
    lg->chosen = -1;
    sqlite3_stmt *s = tui_q(tr, pos < 0 ? Q_LOGITS_STEP : Q_LOGITS_AT);
    sqlite3_bind_int(s, 1, st->step);
    if (pos >= 0) sqlite3_bind_int(s, 2, pos);
    if (sqlite3_step(s) == SQLITE_ROW) {
        lg->present = true;
        lg->pos = sqlite3_column_int(s, 0);
        lg->n_vocab = sqlite3_column_int(s, 1);
        lg->nan = sqlite3_column_int64(s, 2);
        lg->pinf = sqlite3_column_int64(s, 3);
        lg->ninf = sqlite3_column_int64(s, 4);
        if (sqlite3_column_type(s, 5) != SQLITE_NULL) lg->max = sqlite3_column_double(s, 5);
        for (int k = 0; k < 3; k++)
            if (sqlite3_column_type(s, 6 + k) != SQLITE_NULL) lg->argmax[k] = sqlite3_column_int(s, 6 + k);
        if (sqlite3_column_text(s, 9)) snprintf(lg->rule, sizeof lg->rule, "%s", sqlite3_column_text(s, 9));
        if (sqlite3_column_type(s, 10) != SQLITE_NULL) lg->chosen = sqlite3_column_int(s, 10);
        if (sqlite3_column_type(s, 11) != SQLITE_NULL) lg->entropy = sqlite3_column_double(s, 11);
        double ids[64];
        int ni = parse_num_array((const char *)sqlite3_column_text(s, 12), ids, 64);
        int nv = parse_num_array((const char *)sqlite3_column_text(s, 13), lg->vals, 64);
        lg->k = ni < nv ? ni : nv;
        for (int i = 0; i < lg->k; i++) lg->ids[i] = isnan(ids[i]) ? -1 : (int)ids[i];
    }
    sqlite3_reset(s);

    /* The produced token: its id (when the logits row lacks `chosen`) and
     * its log-probability, which pins the softmax normalizer exactly. */
    bool found = false;
    if (lg->present) {
        s = tui_q(tr, Q_TOK_STEP_POS_GEN);
        sqlite3_bind_int(s, 1, st->step);
        sqlite3_bind_int(s, 2, lg->pos + 1);
        found = sqlite3_step(s) == SQLITE_ROW;
    }
    if (!found && pos < 0) {        /* older traces: the step's first output token */
        s = tui_q(tr, Q_TOK_STEP_GEN);
        sqlite3_bind_int(s, 1, st->step);
        found = sqlite3_step(s) == SQLITE_ROW;
    }
    if (found) {
        int id = sqlite3_column_int(s, 0);
        if (lg->chosen < 0) lg->chosen = id;
        /* the logprob pins the normalizer only for the row that produced it:
         * a fallback token of a multi-row step may come from another row */
        bool same_row = s == tr->q[Q_TOK_STEP_POS_GEN] || st->n_pos <= 1;
        if (same_row && id == lg->chosen && sqlite3_column_type(s, 2) != SQLITE_NULL) lg->chosen_logprob = sqlite3_column_double(s, 2);
        if (st->seq < 0) st->seq = sqlite3_column_int64(s, 3);
    }
    sqlite3_reset(tr->q[Q_TOK_STEP_POS_GEN]);
    sqlite3_reset(tr->q[Q_TOK_STEP_GEN]);

    double lse = NAN;
    for (int i = 0; i < lg->k; i++)
        if (lg->ids[i] == lg->chosen && isfinite(lg->chosen_logprob) && isfinite(lg->vals[i]))
            lse = lg->vals[i] - lg->chosen_logprob;
    lg->probs_exact = isfinite(lse);
    if (!lg->probs_exact && lg->k) {       /* renormalize over the top-k */
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < lg->k; i++) if (isfinite(lg->vals[i]) && lg->vals[i] > m) m = lg->vals[i];
        for (int i = 0; i < lg->k; i++) if (isfinite(lg->vals[i])) sum += exp(lg->vals[i] - m);
        if (sum > 0) lse = m + log(sum);
    }
    for (int i = 0; i < lg->k; i++)
        lg->probs[i] = isfinite(lse) && isfinite(lg->vals[i]) ? exp(lg->vals[i] - lse) : NAN;
    return lg->present;
}

int tui_step_logits_at(tui_trace *tr, tui_step *st, int pos)
{
    if (!st->present) return bt_error(BT_ENOTFOUND, "%s: no step %d", tr->path, st->step);
    tui_logits keep = st->lg;
    if (load_logits(tr, st, pos)) return BT_OK;
    st->lg = keep;
    return bt_error(BT_ENOTFOUND, "%s: step %d has no logit snapshot at pos %d", tr->path, st->step, pos);
}

void tui_step_free(tui_step *st)
{
    free(st->taps);
    memset(st, 0, sizeof(*st));
}

int tui_step_load(tui_trace *tr, int step, tui_step *st)
{
    tui_step_free(st);
    st->step = step;
    st->seq = -1;
    snprintf(st->model, sizeof st->model, "target");
    sqlite3_stmt *s = tui_q(tr, Q_STEP);
    sqlite3_bind_int(s, 1, step);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW) {
        st->present = true;
        if (sqlite3_column_text(s, 0)) snprintf(st->model, sizeof st->model, "%s", sqlite3_column_text(s, 0));
        if (sqlite3_column_text(s, 1)) snprintf(st->kind, sizeof st->kind, "%s", sqlite3_column_text(s, 1));
        st->pos0 = sqlite3_column_int(s, 2);
        st->n_pos = sqlite3_column_int(s, 3);
        st->ms = sqlite3_column_type(s, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 4);
    }
    sqlite3_reset(s);
    if (r != SQLITE_ROW && r != SQLITE_DONE) return tui_db_error(tr, "reading steps");

    tui_model_tab *m = tui_model_tab_get(tr, st->model);
    const float *med = tui_trace_medians(tr, st->model);
    st->n_taps = m ? m->n_slots : 0;
    if (st->n_taps) {
        st->taps = calloc(st->n_taps, sizeof(tui_tap));
        if (!st->taps) return bt_error(BT_ENOMEM, "out of memory for step %d", step);
        for (int i = 0; i < st->n_taps; i++) {
            tui_tap *t = &st->taps[i];
            t->idx = i;
            t->layer = -1;
            t->first_bad_index = t->first_bad_pos = -1;
            t->min = t->max = t->absmax = t->mean = t->rms = t->median = NAN;
            int k = m->slot[i];
            if (k >= 0) {
                t->name = m->t[k].name;
                t->op = m->t[k].op;
                t->layer = m->t[k].layer;
                t->n = (int64_t)m->t[k].width * (st->n_pos > 0 ? st->n_pos : 1);
            }
            if (med) t->median = med[i];
        }
        s = tui_q(tr, Q_BLOB);
        sqlite3_bind_int(s, 1, step);
        r = sqlite3_step(s);
        if (r == SQLITE_ROW) tui_blob_decode(sqlite3_column_blob(s, 0), sqlite3_column_bytes(s, 0), st->taps, st->n_taps);
        sqlite3_reset(s);
        if (r != SQLITE_ROW && r != SQLITE_DONE) return tui_db_error(tr, "reading tap_blobs");
        for (int i = 0; i < st->n_taps; i++)
            if (m->slot[i] < 0) st->taps[i].present = false;

        s = tui_q(tr, Q_BAD_STEP);
        sqlite3_bind_int(s, 1, step);
        sqlite3_bind_text(s, 2, st->model, -1, SQLITE_STATIC);
        while ((r = sqlite3_step(s)) == SQLITE_ROW) {
            int idx = sqlite3_column_int(s, 0);
            if (idx < 0 || idx >= st->n_taps) continue;
            tui_tap *t = &st->taps[idx];
            t->present = true;
            t->nan = sqlite3_column_int64(s, 1);
            t->pinf = sqlite3_column_int64(s, 2);
            t->ninf = sqlite3_column_int64(s, 3);
            t->first_bad_index = sqlite3_column_int(s, 4);
            t->first_bad_pos = sqlite3_column_int(s, 5);
            float *dst[4] = { &t->min, &t->max, &t->mean, &t->rms };
            for (int k = 0; k < 4; k++)
                *dst[k] = sqlite3_column_type(s, 6 + k) == SQLITE_NULL ? NAN : (float)sqlite3_column_double(s, 6 + k);
            t->absmax = isnan(t->min) || isnan(t->max) ? NAN : fmaxf(fabsf(t->min), fabsf(t->max));
        }
        sqlite3_reset(s);
        if (r != SQLITE_DONE) return tui_db_error(tr, "reading tap_bad");
        for (int i = 0; i < st->n_taps; i++) {
            tui_tap *t = &st->taps[i];
            t->health = tui_tap_health(t->present, t->nan, t->pinf, t->ninf, t->absmax, t->median);
            if (t->health == TUI_H_BAD) st->n_bad++;
            if (t->health == TUI_H_WARN) st->n_warn++;
        }
    }
    load_logits(tr, st, -1);
    if (st->seq < 0) st->seq = tui_trace_step_seq(tr, step);
    return BT_OK;
}
