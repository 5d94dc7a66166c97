/* model_walk.c - the walk back from a collapse to its origin: the first
 * non-finite (step, layer, op) and the chain along which it spread.
 *
 * The chain is the analysis's (bt_analyze_walk, the rule bisect and report
 * use): the origin step's layer groups (the origin, then the first bad
 * tensor of each later layer and of what follows the layers), then the
 * first bad tensor of each of up to TUI_CHAIN_STEPS later steps of the same
 * pass, marked where the KV cache carried the poison forward (an attention
 * context going bad while everything before it in the step was finite).
 * Finding the first bad step is min(step) of tap_bad (its primary key), so
 * it costs the same on a 60-step and a 300,000-step trace.
 *
 * A trace without tap statistics (--taps none) falls back to the
 * first_nonfinite / nonfinite_logits events. */
#include "model_impl.h"
#include "trace/analyze.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

void tui_walk_free(tui_walk *w)
{
    free(w->links);
    memset(w, 0, sizeof(*w));
}

static void link_from(tui_link *l, const bt_prop_link *p)
{
    const bt_bad_tensor *t = &p->t;
    *l = (tui_link){
        .step = t->step, .layer = t->layer, .idx = t->idx, .n = t->n, .nan = t->nan, .pinf = t->pinf,
        .ninf = t->ninf, .first_bad_index = t->first_bad_index, .first_bad_pos = t->pos,
    };
    snprintf(l->model, sizeof l->model, "%s", t->model);
    snprintf(l->tensor, sizeof l->tensor, "%s", t->tensor);
    snprintf(l->op, sizeof l->op, "%s", t->op);
    const char *how = p->kind == BT_PROP_ORIGIN ? "origin"
                    : p->kind == BT_PROP_FORWARD ? (t->layer >= 0 ? "next layer" : "after layers")
                    : p->kind == BT_PROP_KV_CACHE ? "via KV cache" : "recurs";
    if (p->n_bad > 1) snprintf(l->note, sizeof l->note, "%s; %d bad%s", how, p->n_bad, t->layer >= 0 ? " in layer" : "");
    else snprintf(l->note, sizeof l->note, "%s", how);
}

static void fill_summary(tui_walk *w)
{
    const tui_link *l = &w->links[0];
    char counts[96];
    tui_fmt_bad_counts(counts, sizeof counts, l->nan, l->pinf, l->ninf);
    char where[112];
    if (l->layer >= 0) snprintf(where, sizeof where, "layer %d, %s", l->layer, l->op);
    else snprintf(where, sizeof where, "%s", l->tensor[0] ? l->tensor : l->op);
    /* speculative traces: say which pass it came from (the drafter is often
     * blamed for what the target did, and the other way round) */
    char model[40] = "";
    if (l->model[0] && strcmp(l->model, "target")) snprintf(model, sizeof model, " (%s model)", l->model);
    if (l->n > 0)
        snprintf(w->summary, sizeof w->summary, "step %d%s, %s: %s of %lld (index %d)", l->step, model, where, counts,
                 (long long)l->n, l->first_bad_index);
    else
        snprintf(w->summary, sizeof w->summary, "step %d%s, %s: %s", l->step, model, where, counts);
}

/* The first event of a kind (events are in step order). */
typedef struct first_event { bool found; bt_trace_event_row ev; char op[32], tensor[64], detail[256]; } first_event;

static int first_event_cb(void *user, const bt_trace_event_row *ev)
{
    first_event *f = user;
    f->found = true;
    f->ev = *ev;
    snprintf(f->op, sizeof f->op, "%s", ev->op ? ev->op : "");
    snprintf(f->tensor, sizeof f->tensor, "%s", ev->tensor ? ev->tensor : "");
    snprintf(f->detail, sizeof f->detail, "%s", ev->detail ? ev->detail : "");
    return 1;
}

static int first_event_of(tui_trace *tr, const char *kind, first_event *f)
{
    memset(f, 0, sizeof(*f));
    int rc = bt_trace_events_each(tr->r, kind, first_event_cb, f);
    return rc < 0 ? rc : BT_OK;
}

static int from_events(tui_trace *tr, tui_walk *w)
{
    static const char *const kinds[] = { "first_nonfinite", "nonfinite_logits" };
    for (size_t k = 0; k < BT_ARRAY_SIZE(kinds); k++) {
        first_event f;
        int rc = first_event_of(tr, kinds[k], &f);
        if (rc) return rc;
        if (!f.found) continue;
        w->links = calloc(1, sizeof(tui_link));
        if (!w->links) return bt_error(BT_ENOMEM, "out of memory");
        tui_link *l = &w->links[0];
        w->n = 1;
        l->step = f.ev.step;
        l->first_bad_pos = f.ev.pos;
        l->layer = f.ev.layer;
        l->idx = -1;
        l->first_bad_index = -1;
        snprintf(l->model, sizeof l->model, "target");
        snprintf(l->op, sizeof l->op, "%s", f.op[0] ? f.op : "logits");
        snprintf(l->tensor, sizeof l->tensor, "%s", f.tensor[0] ? f.tensor : l->op);
        snprintf(l->note, sizeof l->note, "from the %s event", kinds[k]);
        const char *d = f.ev.detail ? f.detail : "non-finite";
        w->found = true;
        snprintf(w->source, sizeof w->source, "events");
        if (l->layer >= 0) snprintf(w->summary, sizeof w->summary, "step %d, layer %d, %s: %s", l->step, l->layer, l->op, d);
        else snprintf(w->summary, sizeof w->summary, "step %d, %s: %s", l->step, l->tensor, d);
        return BT_OK;
    }
    return BT_OK;
}

int tui_walk_load(tui_trace *tr, tui_walk *w)
{
    tui_walk_free(w);
    first_event f;
    int rc = first_event_of(tr, "argmax_fallthrough", &f);
    if (rc) return rc;
    if (f.found && f.ev.detail) snprintf(w->argmax_note, sizeof w->argmax_note, "%s", f.detail);

    bt_prop_link *p = NULL;
    int n = 0;
    if ((rc = bt_analyze_walk(tr->r, TUI_CHAIN_STEPS, &p, &n))) return rc;
    if (!n) return from_events(tr, w);
    w->links = calloc((size_t)n, sizeof(tui_link));
    if (!w->links) { free(p); return bt_error(BT_ENOMEM, "out of memory for the propagation chain"); }
    for (int i = 0; i < n; i++) link_from(&w->links[i], &p[i]);
    free(p);
    w->n = n;
    w->found = true;
    snprintf(w->source, sizeof w->source, "tap_bad");
    fill_summary(w);
    int first, last;
    if ((rc = bt_trace_bad_step_range(tr->r, &first, &last))) { tui_walk_free(w); return rc; }
    if (first >= 0) snprintf(w->extent, sizeof w->extent, "non-finite taps in steps %d..%d", first, last);
    return BT_OK;
}
