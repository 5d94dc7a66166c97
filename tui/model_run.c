/* model_run.c - run metadata, the events list and recorded backtraces.
 *
 * meta is small (one row per key, read once by the reader); events are read
 * up to TUI_MAX_EVENTS (a degenerate 300k-step run can hold many),
 * backtraces up to TUI_MAX_BACKTRACES. Meta keys
 * are shown in a fixed, useful order first (what ran, on what, how), then
 * the rest alphabetically. */
#include "model_impl.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static const char *const meta_order[] = {
    "tool_version", "schema_version", "status", "argv", "started_at", "finished_at", "host", "cpu",
    "backend", "threads", "model_path", "model", "model_sha256", "arch", "architecture", "config",
    "hparams", "tokenizer", "sampling", "argmax_rule", "argmax", "seed", "injections", "inject", "generated",
    "taps", "request",
};

static int meta_rank(const char *k)
{
    for (size_t i = 0; i < BT_ARRAY_SIZE(meta_order); i++)
        if (!strcmp(meta_order[i], k)) return (int)i;
    return (int)BT_ARRAY_SIZE(meta_order);
}

static int cmp_kv(const void *a, const void *b)
{
    const tui_kv *x = a, *y = b;
    int rx = meta_rank(x->key), ry = meta_rank(y->key);
    if (rx != ry) return rx - ry;
    return strcmp(x->key, y->key);
}

void tui_run_free(tui_run *r)
{
    for (int i = 0; i < r->n_meta; i++) { free(r->meta[i].key); free(r->meta[i].value); }
    for (int i = 0; i < r->n_events; i++) free(r->events[i].detail);
    for (int i = 0; i < r->n_bts; i++) free(r->bts[i].frames);
    free(r->meta);
    free(r->events);
    free(r->bts);
    memset(r, 0, sizeof(*r));
}

/* A new zeroed element at the end of *v (n elements of size, room for
 * *cap); NULL when out of memory. */
static void *append(void **v, int *n, int *cap, size_t size)
{
    size_t c = (size_t)*cap;
    if (bt_vec_grow(v, &c, (size_t)*n + 1, size)) return NULL;
    *cap = (int)c;
    return memset((char *)*v + size * (*n)++, 0, size);
}

typedef struct run_load { tui_run *r; int cap; } run_load;

static int meta_cb(void *user, const char *key, const char *value)
{
    run_load *l = user;
    tui_kv *kv = append((void **)&l->r->meta, &l->r->n_meta, &l->cap, sizeof(tui_kv));
    if (!kv || !(kv->key = strdup(key)) || !(kv->value = strdup(value ? value : "")))
        return bt_error(BT_ENOMEM, "out of memory");
    return 0;
}

static int event_cb(void *user, const bt_trace_event_row *ev)
{
    run_load *l = user;
    if (l->r->n_events == TUI_MAX_EVENTS) { l->r->events_truncated = true; return 1; }
    tui_event *e = append((void **)&l->r->events, &l->r->n_events, &l->cap, sizeof(tui_event));
    if (!e) return bt_error(BT_ENOMEM, "out of memory");
    *e = (tui_event){ .id = ev->id, .step = ev->step, .pos = ev->pos, .layer = ev->layer };
    snprintf(e->kind, sizeof e->kind, "%s", ev->kind);
    snprintf(e->op, sizeof e->op, "%s", ev->op ? ev->op : "");
    snprintf(e->tensor, sizeof e->tensor, "%s", ev->tensor ? ev->tensor : "");
    return (e->detail = strdup(ev->detail ? ev->detail : "")) ? 0 : bt_error(BT_ENOMEM, "out of memory");
}

#define TUI_MAX_BACKTRACES 16

static int bt_cb(void *user, const bt_trace_backtrace_row *b)
{
    run_load *l = user;
    if (l->r->n_bts == TUI_MAX_BACKTRACES) return 1;
    tui_frames *f = append((void **)&l->r->bts, &l->r->n_bts, &l->cap, sizeof(tui_frames));
    if (!f) return bt_error(BT_ENOMEM, "out of memory");
    *f = (tui_frames){ .id = b->id, .event_id = b->event_id, .step = b->step };
    snprintf(f->kind, sizeof f->kind, "%s", b->kind);
    return (f->frames = strdup(b->frames)) ? 0 : bt_error(BT_ENOMEM, "out of memory");
}

int tui_run_load(tui_trace *tr, tui_run *r)
{
    tui_run_free(r);
    run_load l = { .r = r };
    int rc = bt_trace_meta_each(tr->r, meta_cb, &l);
    if (rc >= 0) {
        qsort(r->meta, r->n_meta, sizeof(tui_kv), cmp_kv);
        l.cap = 0;
        rc = bt_trace_events_each(tr->r, NULL, event_cb, &l);
    }
    if (rc >= 0) {
        l.cap = 0;
        rc = bt_trace_backtraces_each(tr->r, bt_cb, &l);
    }
    if (rc < 0) { tui_run_free(r); return rc; }
    return BT_OK;
}

const char *tui_run_meta(const tui_run *r, const char *key)
{
    for (int i = 0; i < r->n_meta; i++)
        if (!strcmp(r->meta[i].key, key)) return r->meta[i].value;
    return NULL;
}
