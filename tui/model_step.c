/* model_step.c - one step as plain data: its logit snapshot and the
 * statistics of every tapped tensor.
 *
 * Cost: one steps row, one tap_blobs row and the step's tap_bad rows
 * (decoded and merged by the reader: bf16 min, max, mean, rms per slot, full
 * precision and non-finite counts where a tensor went bad), one logits row
 * and the token the step produced - all primary-key or index lookups. */
#include "model_impl.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The token a step produced at pos + 1 (an accepted draft or the bonus):
 * role gen or bonus; any_pos takes the step's first output token instead. */
typedef struct produced {
    int pos;
    bool any_pos, found;
    bt_trace_token_row tok;
} produced;

static int produced_cb(void *user, const bt_trace_token_row *t)
{
    produced *p = user;
    if (strcmp(t->role, "gen") && strcmp(t->role, "bonus")) return 0;
    if (!p->any_pos && t->pos != p->pos) return 0;
    p->tok = *t;
    p->found = true;
    return 1;
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
    bt_trace_logits_row row;
    bool have = false;
    if (bt_trace_logits_at(tr->r, st->step, pos, &row, &have) == BT_OK && have) {
        lg->present = true;
        lg->pos = row.pos;
        lg->n_vocab = row.n_vocab;
        lg->nan = row.nan;
        lg->pinf = row.pinf;
        lg->ninf = row.ninf;
        lg->max = row.max;
        lg->argmax[0] = row.argmax_first;
        lg->argmax[1] = row.argmax_torch;
        lg->argmax[2] = row.argmax_triton;
        snprintf(lg->rule, sizeof lg->rule, "%s", row.rule);
        lg->chosen = row.chosen;
        lg->entropy = row.entropy;
        lg->k = row.k;
        for (int i = 0; i < lg->k; i++) { lg->ids[i] = row.topk_ids[i]; lg->vals[i] = row.topk_vals[i]; }
    }

    /* The produced token: its id (when the logits row lacks `chosen`) and
     * its log-probability, which pins the softmax normalizer exactly. */
    produced p = { .pos = lg->pos + 1 };
    if (lg->present && bt_trace_tokens_of_steps(tr->r, st->step, st->step, produced_cb, &p) < 0) p.found = false;
    bool same_row = p.found;
    if (!p.found && pos < 0) {        /* older traces: the step's first output token */
        p.any_pos = true;
        if (bt_trace_tokens_of_steps(tr->r, st->step, st->step, produced_cb, &p) < 0) p.found = false;
    }
    if (p.found) {
        int id = p.tok.id;
        if (lg->chosen < 0) lg->chosen = id;
        /* the logprob pins the normalizer only for the row that produced it:
         * a fallback token of a multi-row step may come from another row */
        same_row = same_row || st->n_pos <= 1;
        if (same_row && id == lg->chosen && !isnan(p.tok.logprob)) lg->chosen_logprob = p.tok.logprob;
        if (st->seq < 0) st->seq = p.tok.seq;
    }

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
    if (!st->present) return bt_error(BT_ENOTFOUND, "%s: no step %d", tui_trace_path(tr), st->step);
    tui_logits keep = st->lg;
    if (load_logits(tr, st, pos)) return BT_OK;
    st->lg = keep;
    return bt_error(BT_ENOTFOUND, "%s: step %d has no logit snapshot at pos %d", tui_trace_path(tr), st->step, pos);
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
    bt_trace_step_row row;
    int rc = bt_trace_step_get(tr->r, step, &row);
    if (rc && rc != BT_ENOTFOUND) return rc;
    if (!rc) {
        st->present = true;
        if (row.model[0]) snprintf(st->model, sizeof st->model, "%s", row.model);
        snprintf(st->kind, sizeof st->kind, "%s", row.kind);
        st->pos0 = row.pos0;
        st->n_pos = row.n_pos;
        st->ms = row.ms;
    }

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
        /* the reader decodes the packed blob and overlays tap_bad */
        bt_trace_tap_row *taps = NULL;
        int nt = 0;
        if (st->present && (rc = bt_trace_step_taps(tr->r, step, &taps, &nt))) return rc;
        for (int j = 0; j < nt; j++) {
            const bt_trace_tap_row *x = &taps[j];
            if (x->idx < 0 || x->idx >= st->n_taps || !x->recorded) continue;
            tui_tap *t = &st->taps[x->idx];
            t->present = true;
            t->nan = x->nan;
            t->pinf = x->pinf;
            t->ninf = x->ninf;
            t->first_bad_index = x->first_bad_index;
            t->first_bad_pos = x->first_bad_pos;
            t->min = (float)x->min;
            t->max = (float)x->max;
            t->mean = (float)x->mean;
            t->rms = (float)x->rms;
            t->absmax = tui_absmax(x->min, x->max);
        }
        free(taps);
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

typedef struct routes_acc {
    tui_route *v;
    int n, cap;
} routes_acc;

static int route_cb(void *user, const bt_trace_route_row *row)
{
    routes_acc *a = user;
    if (a->n >= 1 << 20) return 1;      /* a hostile trace: enough */
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        tui_route *nv = realloc(a->v, (size_t)cap * sizeof(*nv));
        if (!nv) return bt_error(BT_ENOMEM, "out of memory");
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = (tui_route){ .pos = row->pos, .layer = row->layer, .rank = row->rank, .expert = row->expert,
                                .weight = row->weight, .draft = !strcmp(row->model, "draft") };
    return 0;
}

int tui_step_routes(tui_trace *tr, int step, tui_route **out, int *n)
{
    routes_acc a = { 0 };
    int rc = bt_trace_moe_routes_each(tr->r, step, route_cb, &a);
    if (rc) { free(a.v); *out = NULL; *n = 0; return rc; }
    *out = a.v;
    *n = a.n;
    return BT_OK;
}
