/* model_walk.c - the walk back from a collapse to its origin: the first
 * non-finite (step, layer, op) and the chain along which it spread.
 *
 * The first bad step is min(step) of tap_bad (its primary key), so finding
 * it costs the same on a 60-step and a 300,000-step trace. The chain lists,
 * within that step, every bad tensor of the origin's layer, then the first
 * bad tensor of each later layer and the tensors after the layers; then for
 * up to TUI_CHAIN_STEPS later steps with bad taps, the first bad tensor of
 * each - which is where the KV cache carried the poison forward (an
 * attention context going bad while the layer's q/k/v are clean).
 *
 * A trace without tap statistics (--taps none) falls back to the
 * first_nonfinite / nonfinite_logits events. */
#include "model_impl.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void tui_walk_free(tui_walk *w)
{
    free(w->links);
    memset(w, 0, sizeof(*w));
}

static int add_link(tui_walk *w, const tui_step *st, const tui_tap *t, const char *note)
{
    if (w->n % 16 == 0) {
        tui_link *nl = realloc(w->links, sizeof(*nl) * (w->n + 16));
        if (!nl) return bt_error(BT_ENOMEM, "out of memory for the propagation chain");
        w->links = nl;
    }
    tui_link *l = &w->links[w->n++];
    memset(l, 0, sizeof(*l));
    l->step = st->step;
    l->layer = t->layer;
    l->idx = t->idx;
    snprintf(l->model, sizeof l->model, "%s", st->model);
    snprintf(l->tensor, sizeof l->tensor, "%s", t->name ? t->name : "?");
    snprintf(l->op, sizeof l->op, "%s", t->op ? t->op : "?");
    l->n = t->n;
    l->nan = t->nan;
    l->pinf = t->pinf;
    l->ninf = t->ninf;
    l->first_bad_index = t->first_bad_index;
    l->first_bad_pos = t->first_bad_pos;
    snprintf(l->note, sizeof l->note, "%s", note ? note : "");
    return BT_OK;
}

static bool tap_bad(const tui_tap *t) { return t->present && (t->nan || t->pinf || t->ninf); }

static bool layer_qkv_clean(const tui_step *st, int layer)
{
    for (int i = 0; i < st->n_taps; i++) {
        const tui_tap *t = &st->taps[i];
        if (t->layer == layer && t->op && (!strcmp(t->op, "attn_q") || !strcmp(t->op, "attn_k") || !strcmp(t->op, "attn_v")) && tap_bad(t))
            return false;
    }
    return true;
}

static int chain_first_step(tui_walk *w, const tui_step *st)
{
    int origin = -1, rc;
    for (int i = 0; i < st->n_taps && origin < 0; i++)
        if (tap_bad(&st->taps[i])) origin = i;
    if (origin < 0) return BT_OK;
    const tui_tap *o = &st->taps[origin];
    if ((rc = add_link(w, st, o, "origin"))) return rc;
    int last_layer = o->layer;
    for (int i = origin + 1; i < st->n_taps; i++) {
        const tui_tap *t = &st->taps[i];
        if (!tap_bad(t)) continue;
        if (t->layer >= 0 && t->layer == o->layer && o->layer >= 0) { if ((rc = add_link(w, st, t, "same layer"))) return rc; continue; }
        if (t->layer < 0) {
            if ((rc = add_link(w, st, t, o->layer >= 0 ? "after layers" : ""))) return rc;
            continue;
        }
        if (t->layer != last_layer) {
            if ((rc = add_link(w, st, t, "next layer"))) return rc;
            last_layer = t->layer;
        }
    }
    return BT_OK;
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

static int from_events(tui_trace *tr, tui_walk *w)
{
    static const char *const kinds[] = { "first_nonfinite", "nonfinite_logits" };
    for (size_t k = 0; k < BT_ARRAY_SIZE(kinds); k++) {
        sqlite3_stmt *s = tui_q(tr, Q_EVENT_FIRST);
        sqlite3_bind_text(s, 1, kinds[k], -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            w->links = calloc(1, sizeof(tui_link));
            if (!w->links) { sqlite3_reset(s); return bt_error(BT_ENOMEM, "out of memory"); }
            tui_link *l = &w->links[0];
            w->n = 1;
            l->step = sqlite3_column_int(s, 0);
            l->first_bad_pos = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 1);
            l->layer = sqlite3_column_type(s, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(s, 2);
            l->idx = -1;
            l->first_bad_index = -1;
            snprintf(l->model, sizeof l->model, "target");
            snprintf(l->op, sizeof l->op, "%s", sqlite3_column_text(s, 3) ? (const char *)sqlite3_column_text(s, 3) : "logits");
            snprintf(l->tensor, sizeof l->tensor, "%s", sqlite3_column_text(s, 4) ? (const char *)sqlite3_column_text(s, 4) : l->op);
            snprintf(l->note, sizeof l->note, "from the %s event", kinds[k]);
            const unsigned char *d = sqlite3_column_text(s, 5);
            w->found = true;
            snprintf(w->source, sizeof w->source, "events");
            if (l->layer >= 0) snprintf(w->summary, sizeof w->summary, "step %d, layer %d, %s: %s", l->step, l->layer, l->op, d ? (const char *)d : "non-finite");
            else snprintf(w->summary, sizeof w->summary, "step %d, %s: %s", l->step, l->tensor, d ? (const char *)d : "non-finite");
            sqlite3_reset(s);
            return BT_OK;
        }
        sqlite3_reset(s);
    }
    return BT_OK;
}

int tui_walk_load(tui_trace *tr, tui_walk *w)
{
    tui_walk_free(w);
    int rc = BT_OK;
    tui_step st = { 0 };
    sqlite3_stmt *s = tui_q(tr, Q_BAD_FIRST_STEP);
    int first = -1;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) first = sqlite3_column_int(s, 0);
    sqlite3_reset(s);

    s = tui_q(tr, Q_EVENT_FIRST);
    sqlite3_bind_text(s, 1, "argmax_fallthrough", -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 5))
        snprintf(w->argmax_note, sizeof w->argmax_note, "%s", sqlite3_column_text(s, 5));
    sqlite3_reset(s);

    if (first < 0) return from_events(tr, w);

    if ((rc = tui_step_load(tr, first, &st))) goto done;
    if ((rc = chain_first_step(w, &st))) goto done;
    if (!w->n) return from_events(tr, w);     /* tap_bad rows for another model's slots */
    w->found = true;
    snprintf(w->source, sizeof w->source, "tap_bad");
    fill_summary(w);

    int cur = first;
    for (int k = 0; k < TUI_CHAIN_STEPS; k++) {
        s = tui_q(tr, Q_BAD_NEXT_STEP);
        sqlite3_bind_int(s, 1, cur);
        int next = -1;
        if (sqlite3_step(s) == SQLITE_ROW) next = sqlite3_column_int(s, 0);
        sqlite3_reset(s);
        if (next < 0) break;
        cur = next;
        if ((rc = tui_step_load(tr, cur, &st))) goto done;
        for (int i = 0; i < st.n_taps; i++) {
            const tui_tap *t = &st.taps[i];
            if (!tap_bad(t)) continue;
            char note[64];
            bool kv = t->op && !strcmp(t->op, "attn_ctx") && layer_qkv_clean(&st, t->layer);
            snprintf(note, sizeof note, "%s%d bad", kv ? "via KV cache; " : "first of ", st.n_bad);
            if ((rc = add_link(w, &st, t, note))) goto done;
            break;
        }
    }
    s = tui_q(tr, Q_BAD_LAST_STEP);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        snprintf(w->extent, sizeof w->extent, "non-finite taps in steps %d..%d", first, sqlite3_column_int(s, 0));
    sqlite3_reset(s);
done:
    tui_step_free(&st);
    if (rc) tui_walk_free(w);
    return rc;
}
