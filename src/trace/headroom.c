/* headroom.c - largest absmax per (op, layer) against a float format's
 * maximum; see headroom.h. Walks the steps in order and each step's taps in
 * slot (forward) order, so "first" means the first tap the run computed. */
#include "trace/headroom.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct step_list {
    bt_trace_step_row *v;
    int n, cap;
} step_list;

static int collect_step(void *user, const bt_trace_step_row *row)
{
    step_list *l = user;
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 64;
        bt_trace_step_row *nv = realloc(l->v, (size_t)nc * sizeof(*nv));
        if (!nv) return bt_error(BT_ENOMEM, "out of memory");
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = *row;
    return 0;
}

static void at_set(bt_headroom_at *a, const bt_trace_step_row *s, const bt_trace_tap_row *t, double absmax)
{
    a->step = s->step;
    a->pos0 = s->pos0;
    a->n_pos = s->n_pos;
    a->layer = t->layer;
    a->absmax = absmax;
    snprintf(a->tensor, sizeof(a->tensor), "%s", t->name ? t->name : "?");
    snprintf(a->op, sizeof(a->op), "%s", t->op ? t->op : "?");
    snprintf(a->model, sizeof(a->model), "%s", t->model ? t->model : s->model);
}

void bt_headroom_clear(bt_headroom *h)
{
    free(h->layer_max);
    free(h->cells);
    memset(h, 0, sizeof(*h));
}

double bt_headroom_ratio(const bt_headroom *h, double absmax)
{
    if (!(absmax > 0)) return INFINITY;
    return isinf(absmax) ? 0 : h->limit / absmax;
}

int bt_headroom_level(double absmax, double limit)
{
    if (isnan(absmax)) return 0;
    if (absmax > limit) return 2;
    return absmax > limit / 2 ? 1 : 0;
}

int bt_headroom_analyze(bt_trace_reader *r, double limit, bt_headroom *out)
{
    memset(out, 0, sizeof(*out));
    out->user_limit = limit > 0;
    out->limit = limit > 0 ? limit : BT_F16_MAX;
    out->embd_max = NAN;
    step_list sl = { 0 };
    bt_trace_tap_row *taps = NULL;
    int n_taps = 0, rc;
    const bt_trace_tensor_row *tens;
    int n_tens = 0;
    bt_trace_tensors(r, "target", &tens, &n_tens);
    int n_layers = 0;
    for (int i = 0; i < n_tens; i++) n_layers = BT_MAX(n_layers, tens[i].layer + 1);
    out->n_layers = n_layers;
    out->n_cells = n_tens;
    out->layer_max = malloc((size_t)(n_layers > 0 ? n_layers : 1) * sizeof(double));
    out->cells = calloc((size_t)(n_tens > 0 ? n_tens : 1), sizeof(*out->cells));
    if (!out->layer_max || !out->cells) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    for (int l = 0; l < n_layers; l++) out->layer_max[l] = NAN;
    for (int i = 0; i < n_tens; i++) {
        bt_headroom_at *c = &out->cells[i];
        c->absmax = NAN;
        c->step = -1;
        c->layer = tens[i].layer;
        snprintf(c->tensor, sizeof(c->tensor), "%s", tens[i].name);
        snprintf(c->op, sizeof(c->op), "%s", tens[i].op);
        snprintf(c->model, sizeof(c->model), "target");
    }
    out->worst.absmax = NAN;
    if ((rc = bt_trace_steps_each(r, INT32_MIN, INT32_MAX, collect_step, &sl)) < 0) goto out;
    for (int i = 0; i < sl.n; i++) {
        const bt_trace_step_row *s = &sl.v[i];
        free(taps);
        taps = NULL;
        if ((rc = bt_trace_step_taps(r, s->step, &taps, &n_taps))) goto out;
        bool target = !strcmp(s->model, "target");
        for (int j = 0; j < n_taps; j++) {
            const bt_trace_tap_row *t = &taps[j];
            if (!t->recorded) continue;
            double a = t->pinf || t->ninf ? INFINITY : t->absmax;
            if (isnan(a)) continue;
            out->present = true;
            if (!(a <= out->worst.absmax)) at_set(&out->worst, s, t, a);
            if (!out->has_under2 && a > out->limit / 2) { out->has_under2 = true; at_set(&out->under2, s, t, a); }
            if (!out->has_under1 && a > out->limit) { out->has_under1 = true; at_set(&out->under1, s, t, a); }
            if (!target || t->idx < 0 || t->idx >= n_tens) continue;
            bt_headroom_at *c = &out->cells[t->idx];
            if (!(a <= c->absmax)) at_set(c, s, t, a);
            if (t->layer >= 0 && t->layer < n_layers && !(a <= out->layer_max[t->layer])) out->layer_max[t->layer] = a;
            if (t->layer < 0 && t->op && !strcmp(t->op, "token_embd") && !(a <= out->embd_max)) out->embd_max = a;
        }
    }
    rc = BT_OK;
out:
    free(taps);
    free(sl.v);
    if (rc) bt_headroom_clear(out);
    return rc;
}

/* 67584 -> "67,584"; 0.0123 -> "0.0123"; big values in %g. */
static const char *num(double v, char *buf, size_t cap)
{
    if (isinf(v)) { snprintf(buf, cap, "Inf"); return buf; }
    if (v < 1000) { snprintf(buf, cap, "%.3g", v); return buf; }
    if (v >= 1e15) { snprintf(buf, cap, "%.3g", v); return buf; }
    char d[32];
    snprintf(d, sizeof(d), "%.0f", v);
    size_t n = strlen(d), o = 0;
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        buf[o++] = d[i];
        if ((n - i - 1) % 3 == 0 && i + 1 < n) buf[o++] = ',';
    }
    buf[o] = 0;
    return buf;
}

static void where(const bt_headroom_at *a, char *buf, size_t cap)
{
    if (a->n_pos > 1) snprintf(buf, cap, "step %d, positions %d-%d", a->step, a->pos0, a->pos0 + a->n_pos - 1);
    else snprintf(buf, cap, "step %d, position %d", a->step, a->pos0);
    if (strcmp(a->model, "target")) snprintf(buf + strlen(buf), cap - strlen(buf), " (%s pass)", a->model);
}

void bt_headroom_verdict(const bt_headroom *h, char *buf, size_t cap)
{
    char lim[48], a[32], w[96];
    if (h->user_limit) snprintf(lim, sizeof(lim), "the limit %s", num(h->limit, a, sizeof(a)));
    else snprintf(lim, sizeof(lim), "f16 max");
    const char *fmt = h->user_limit ? "limit" : "f16";
    if (!h->present) { snprintf(buf, cap, "headroom: no tap statistics in the trace"); return; }
    const bt_headroom_at *x = &h->worst;
    if (h->has_under1) {
        const bt_headroom_at *u = &h->under1;
        where(u, w, sizeof(w));
        if (isinf(u->absmax))
            snprintf(buf, cap, "overflowed at %s, %s (the tap holds +-Inf)", u->tensor, w);
        else
            snprintf(buf, cap, "would overflow in %s at %s, %s (absmax %s = %.0f%% of %s)", fmt, u->tensor, w,
                     num(u->absmax, a, sizeof(a)), 100 * u->absmax / h->limit, lim);
        return;
    }
    if (h->has_under2) {
        where(&h->under2, w, sizeof(w));
        snprintf(buf, cap, "%s headroom under 2x: worst %s absmax %s = %.0f%% of %s (first under 2x: %s, %s)", fmt, x->tensor,
                 num(x->absmax, a, sizeof(a)), 100 * x->absmax / h->limit, lim, h->under2.tensor, w);
        return;
    }
    snprintf(buf, cap, "%s-safe: worst %s absmax %s = %.0f%% of %s (headroom %.1fx)", fmt, x->tensor, num(x->absmax, a, sizeof(a)),
             100 * x->absmax / h->limit, lim, bt_headroom_ratio(h, x->absmax));
}

void bt_headroom_growth(const bt_headroom *h, char *buf, size_t cap)
{
    size_t o = 0;
    char a[32];
    buf[0] = 0;
    o += snprintf(buf + o, cap - o, "absmax by layer:");
    int first = -1, last = -1;
    int shown = 0;
    for (int l = 0; l < h->n_layers && o < cap; l++) {
        if (isnan(h->layer_max[l])) continue;
        if (first < 0) first = l;
        last = l;
        /* long models: the first 4, an ellipsis, the last 4 */
        if (h->n_layers > 10 && l >= 4 && l < h->n_layers - 4) {
            if (shown == 4) { o += snprintf(buf + o, cap - o, " ..."); shown++; }
            continue;
        }
        o += snprintf(buf + o, cap - o, " %s", num(h->layer_max[l], a, sizeof(a)));
        shown++;
    }
    if (first < 0) { snprintf(buf, cap, "absmax by layer: no layer taps"); return; }
    if (o < cap && last > first && h->layer_max[first] > 0 && isfinite(h->layer_max[last]))
        snprintf(buf + o, cap - o, " (x%s from layer %d to %d)", num(h->layer_max[last] / h->layer_max[first], a, sizeof(a)), first, last);
}
