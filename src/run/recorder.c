/* recorder.c - glue between the engine's eval callback and the trace.
 *
 * Slots: the tapped tensors get dense indexes in forward order (the trace's
 * tensors table and the packed stats blob use them). The observe callback
 * injects first, then asks the backend for statistics, so a tap sees exactly
 * what a bad kernel would have written. Statistics are reduced where the
 * tensor lives and may arrive only when the forward ends (a device backend
 * copies them once per step), so observe queues them and the flush callback
 * writes the tap rows and the first_nonfinite event, in forward order. */
#include "run/recorder.h"
#include "tap/detect.h"
#include "tap/stats.h"
#include "base/kernel_rows.h"
#include "backend/backend.h"
#include "sys/backtrace.h"
#include "sys/crash.h"
#include "base/text.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING 16                 /* recent logit rows kept for collapse snapshots */

#define KROWS 256               /* kernel rows written per batch */

struct bt_recorder {
    bt_kernel_row *krows;       /* --cupti: (KROWS) rows waiting for the writer */
    int n_krows;
    long act_bad;               /* activity records that could not be real (skipped) */
    bt_recorder_cfg cfg;
    bt_engine *e;
    int n_layers, n_vocab;
    int *slot;                  /* (BT_OP_COUNT, n_layers + 1) -> slot or -1 */
    int n_slots;
    int *extra_slot;            /* a foreign engine's extra tensors (op BT_OP_COUNT + i) -> slot or -1 */
    int n_extra;
    int status;
    int step;                   /* current step (engine step at step_begin) */
    bool in_step;
    bool seen_bad;              /* first_nonfinite already recorded */
    bool seen_bad_logits;
    int n_events;
    bt_detector *det;
    float *ring;                /* (RING, n_vocab) */
    int ring_step[RING];
    int ring_pos[RING];
    int gen_pos;
    /* the latest tensor an --inject spec changed, for the first_nonfinite text */
    const char *inj_by;
    int inj_step;
    char inj_tensor[64];
    char bt_buf[8192];
    bool bt_have;               /* bt_buf holds the stack where step bt_step's first bad tensor was tapped */
    int bt_step;
    int64_t t_last;             /* --timing: CLOCK_MONOTONIC ns when the previous op ended */
    /* statistics asked for during the current forward, in observe order */
    struct pending {
        int slot, op, layer, step;
        int expert;                 /* a MoE expert's part of op (bt_expert_rows), else -1 */
        bt_tap_stats ev;            /* the statistics the first_nonfinite event quotes: after
                                     * merging experts, the bad expert's own */
        const int *pos;             /* its rows' positions (the engine's, valid until flush) */
        int pos0;
        bt_tap_stats s;
        const char *by;             /* spec that changed this tensor, or NULL */
        const char *inj_by;         /* the latest injection before it */
        int inj_step;
        char inj_tensor[64];
        char kernel[160];           /* the view's kernel (foreign engine), or "" */
    } *pend;
    int n_pend, pend_step, pend_cap;
    int *merged;                /* (n_slots) flush: the pending a slot's observations merge into */
    bool seen_flat_logits;      /* a constant_logits event was written */
    bt_recorder_costs costs;    /* cfg.account */
};

static const char *const taps_names[] = { "all", "layers", "logits", "none" };

int bt_taps_mode_parse(const char *s)
{
    for (int i = 0; i < 4; i++) if (!strcmp(s, taps_names[i])) return i;
    return -1;
}

const char *bt_taps_mode_name(int mode) { return mode >= 0 && mode < 4 ? taps_names[mode] : "?"; }

/* A leak is a control token inside the text; an end-of-generation id ends
 * the text (or, under --ignore-eos, repeats into a wall, which the wall
 * detector reports), so it is not one. */
static bool is_control(void *tok, int32_t id) { return tok && bt_tokenizer_is_control(tok, id) && !bt_tokenizer_is_eog(tok, id); }

static int *slot_at(bt_recorder *r, int op, int layer)
{
    static int none = -1;
    if (op >= BT_OP_COUNT) return op - BT_OP_COUNT < r->n_extra ? &r->extra_slot[op - BT_OP_COUNT] : &none;
    return &r->slot[op * (r->n_layers + 1) + layer + 1];
}

/* "blk.3.ffn_down", or a foreign engine's own name for its extra tensors. */
static void name_of(const bt_recorder *r, int op, int layer, char *buf, size_t cap);

/* ... or an expert's part of it: "blk.12.ffn_down.expert[37]" */
static void name_of_expert(const bt_recorder *r, int op, int layer, int expert, char *buf, size_t cap)
{
    if (expert >= 0) bt_expert_tensor_name(op, layer, expert, buf, cap);
    else name_of(r, op, layer, buf, cap);
}

static void name_of(const bt_recorder *r, int op, int layer, char *buf, size_t cap)
{
    const bt_extra_tensor *x = op >= BT_OP_COUNT ? bt_engine_extra(r->e, op - BT_OP_COUNT) : NULL;
    if (x) snprintf(buf, cap, "%s", x->name);
    else bt_tensor_name(op, layer, buf, cap);
}

static bool tapped(const bt_recorder_cfg *c, int op, int layer)
{
    if (c->no_state && (op == BT_OP_SSM_STATE || op == BT_OP_SSM_CONV_STATE)) return false;
    if (bt_op_is_layer_op(op) && c->layer_lo >= 0 && (layer < c->layer_lo || layer > c->layer_hi)) return false;
    switch (c->taps) {
    case BT_TAPS_ALL: return true;
    case BT_TAPS_LAYERS: return op == BT_OP_TOKEN_EMBD || op == BT_OP_FFN_RESID || op == BT_OP_OUTPUT_NORM || op == BT_OP_LOGITS;
    case BT_TAPS_LOGITS: return op == BT_OP_LOGITS;
    default: return false;
    }
}

static int event(bt_recorder *r, int step, int pos, const char *kind, int layer, const char *op,
                 const char *tensor, const char *detail, int64_t *id)
{
    r->n_events++;
    bt_log("bangtrace: event %s at step %d: %s", kind, step, detail);
    if (r->cfg.on_event) r->cfg.on_event(r->cfg.event_user, step, pos, kind, detail);
    if (!r->cfg.trace) return BT_OK;
    return bt_trace_event(r->cfg.trace, step, pos, kind, layer, op, tensor, detail, id);
}

static bool cb_ask(void *user, int op, int layer)
{
    bt_recorder *r = user;
    return *slot_at(r, op, layer) >= 0 ||
           (r->cfg.inj && bt_injector_wants(r->cfg.inj, r->cfg.model_role, op, layer));
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool observe_taps(void *user, const bt_tensor_view *t);

/* The recorder's own functions, and the engine's hand-over of a tensor to
 * the tap (engine.c tap, tap_expert, bt_engine_tap_deliver): a backtrace the
 * recorder stores starts below them, at the engine frame that computed the
 * op. A compiler's clone (name.constprop.0, name.isra.0) counts as name. */
static bool own_frame(const char *line, size_t n)
{
    static const char *const own[] = { "observe_taps", "cb_observe", "record_tap", "cb_flush", "flush_taps", "own_backtrace",
                                       "tap", "tap_expert", "bt_engine_tap_deliver" };
    const char *sym = memchr(line, ' ', n);                 /* "#N 0xPC symbol+0xOFF (module)" */
    sym = sym ? memchr(sym + 1, ' ', n - (size_t)(sym + 1 - line)) : NULL;
    if (!sym) return false;
    sym++;
    size_t left = (size_t)(line + n - sym);
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        size_t l = strlen(own[i]);
        if (left > l && !strncmp(sym, own[i], l) && (sym[l] == '+' || sym[l] == '.')) return true;
    }
    return false;
}

/* The calling stack without the recorder's leading frames, renumbered
 * from #0. */
__attribute__((noinline)) static void own_backtrace(char *buf, size_t cap)
{
    char raw[sizeof(((bt_recorder *)0)->bt_buf)];
    bt_backtrace(raw, sizeof(raw), 0);
    const char *p = raw;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!own_frame(p, n)) break;
        p += n + (e ? 1 : 0);
    }
    if (!*p) p = raw;         /* nothing but ours (or no frames): keep it whole */
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; *p && o + 1 < cap; k++) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *rest = p[0] == '#' ? memchr(p, ' ', n) : NULL;   /* after "#N" */
        int w = rest ? snprintf(buf + o, cap - o, "#%d%.*s\n", k, (int)(n - (size_t)(rest - p)), rest)
                     : snprintf(buf + o, cap - o, "%.*s\n", (int)n, p);
        if (w < 0 || (size_t)w >= cap - o) { buf[o] = 0; break; }   /* a line that does not fit whole: dropped */
        o += (size_t)w;
        p += n + (e ? 1 : 0);
    }
}

/* --timing wraps the tap: an op's duration is the time from the end of the
 * previous observation (or the step's start) to this one, so the recorder's
 * own work (statistics, SQLite) is not counted, and the engine's work
 * between two taps is charged to the later op - exact when every op is
 * tapped (--taps all), which run --timing requires. */
static bool cb_observe(void *user, const bt_tensor_view *t)
{
    bt_recorder *r = user;
    if (r->cfg.account) {
        int64_t t0 = now_ns();
        bool go_on = observe_taps(user, t);
        r->costs.stats_ns += now_ns() - t0;
        r->costs.taps++;
        return go_on;
    }
    if (!r->cfg.timing) return observe_taps(user, t);
    int64_t t_in = now_ns();
    bool go_on = observe_taps(user, t);
    int slot = *slot_at(r, t->op, t->layer);
    if (slot >= 0 && r->cfg.trace && r->status == BT_OK)
        r->status = bt_trace_op_timing(r->cfg.trace, r->step, r->cfg.model_role, slot, r->t_last, t_in - r->t_last);
    r->t_last = now_ns();
    return go_on;
}

static bool observe_taps(void *user, const bt_tensor_view *t)
{
    bt_recorder *r = user;
    const char *by = NULL;
    if (r->cfg.inj) {
        if (bt_injector_crash_at(r->cfg.inj, t->step) && t->op == BT_OP_TOKEN_EMBD) {
            bt_log("bangtrace: injected crash at step %d", t->step);
            raise(SIGSEGV);
        }
        bt_injector_apply_by(r->cfg.inj, r->cfg.model_role, t, &by);
        if (by) {
            r->inj_by = by;
            r->inj_step = t->step;
            name_of_expert(r, t->op, t->layer, t->moe ? t->moe->expert : -1, r->inj_tensor, sizeof(r->inj_tensor));
        }
    }
    int slot = *slot_at(r, t->op, t->layer);
    if (slot < 0 || t->partial) return true;
    if (t->step != r->pend_step) { r->n_pend = 0; r->pend_step = t->step; }   /* a forward that never flushed */
    if (r->n_pend >= r->pend_cap) {
        /* a MoE layer's ffn_gate/up/act/down come once per routed expert */
        int cap = r->pend_cap * 2;
        struct pending *np = realloc(r->pend, (size_t)cap * sizeof(*np));
        if (!np) { if (r->status == BT_OK) r->status = bt_error(BT_ENOMEM, "out of memory"); return true; }
        r->pend = np;
        r->pend_cap = cap;
    }
    struct pending *p = &r->pend[r->n_pend++];
    p->slot = slot; p->op = t->op; p->layer = t->layer; p->step = t->step;
    p->expert = t->moe ? t->moe->expert : -1;
    p->pos = t->moe ? t->moe->pos : NULL;
    p->pos0 = t->pos0;
    p->by = by; p->inj_by = r->inj_by; p->inj_step = r->inj_step;
    /* a foreign engine names its kernel in the view (which lives only now) */
    if (t->kernel && t->kernel[0]) snprintf(p->kernel, sizeof(p->kernel), "%s", t->kernel);
    else p->kernel[0] = 0;
    if (r->inj_by) memcpy(p->inj_tensor, r->inj_tensor, sizeof(p->inj_tensor));
    else p->inj_tensor[0] = 0;
    /* statistics the op took are of what it wrote: after an injection
     * changed the tensor they are the tensor's again */
    bt_tensor_view fresh;
    if (by && t->stats && (t->tensor || t->data)) { fresh = *t; fresh.stats = NULL; t = &fresh; }
    int rc = bt_tensor_stats(t, &p->s);
    if (rc && r->status == BT_OK) r->status = rc;
    /* the stack now is the op's (the engine handing its tensor over), not
     * the flush's: kept for the first_nonfinite backtrace */
    if (r->cfg.trace && !r->seen_bad && (!r->bt_have || r->bt_step != t->step) && bt_stats_bad(&p->s)) {
        own_backtrace(r->bt_buf, sizeof(r->bt_buf));
        r->bt_have = true;
        r->bt_step = t->step;
    }
    return true;
}

/* One tapped tensor's statistics, now final: the tap row, and the first
 * non-finite event naming the kernel (or the injection) that wrote it. */
static void record_tap(bt_recorder *r, const struct pending *p)
{
    const bt_tap_stats *s = &p->s;
    if (r->cfg.trace && r->status == BT_OK) r->status = bt_trace_tap(r->cfg.trace, p->slot, s);
    if (!bt_stats_bad(s) || r->seen_bad) return;
    r->seen_bad = true;
    char name[64], detail[1400], kern[200], who[1200];
    name_of_expert(r, p->op, p->layer, p->expert, name, sizeof(name));
    if (p->kernel[0]) snprintf(kern, sizeof(kern), "%s", p->kernel);
    else bt_engine_kernel_name(r->e, p->op, p->layer, kern, sizeof(kern));
    /* A value the injector wrote is the injector's, not the kernel's;
     * a tensor downstream of an injection says where it came from. */
    if (p->by) snprintf(who, sizeof(who), "--inject '%s' (the injector; computed by %s)", p->by, kern);
    else if (p->inj_by) snprintf(who, sizeof(who), "%s, downstream of --inject '%s' on %s at step %d", kern, p->inj_by,
                                 p->inj_tensor, p->inj_step);
    else snprintf(who, sizeof(who), "%s", kern);
    snprintf(detail, sizeof(detail), "step %d, %s%s: %lld NaN, %lld +Inf, %lld -Inf of %lld (first at index %d, position %d); "
             "written by %s",
             p->step, strcmp(r->cfg.model_role, "target") ? "draft model " : "", name,
             (long long)p->ev.nan, (long long)p->ev.pinf, (long long)p->ev.ninf, (long long)p->ev.n,
             s->first_bad_index, s->first_bad_pos, who);
    int64_t id = 0;
    const bt_extra_tensor *x = bt_engine_extra(r->e, p->op - BT_OP_COUNT);
    int rc = event(r, p->step, s->first_bad_pos, "first_nonfinite", p->layer, x ? x->op : bt_op_name(p->op), name,
                   detail, &id);
    if (rc == BT_OK && r->cfg.trace) {
        /* taken where the op handed the tensor over (observe_taps); else here */
        if (!r->bt_have || r->bt_step != p->step) own_backtrace(r->bt_buf, sizeof(r->bt_buf));
        r->bt_have = false;
        rc = bt_trace_backtrace(r->cfg.trace, id, p->step, "first_nonfinite", r->bt_buf);
    }
    if (rc && r->status == BT_OK) r->status = rc;
}

/* Fold b's statistics into a's (the same tensor slot: two experts' rows of
 * one op). The first non-finite value is the one at the lower position, then
 * the earlier observation; the merged pending keeps that expert's name. */
static void merge_pending(struct pending *a, const struct pending *b)
{
    bool take_bad = bt_tap_stats_merge(&a->s, &b->s);
    if (take_bad) {
        a->ev = b->ev;
        a->expert = b->expert;
        memcpy(a->kernel, b->kernel, sizeof(a->kernel));
    }
    if (!a->by && b->by) a->by = b->by;
    if (b->by || take_bad) {
        a->inj_by = b->inj_by; a->inj_step = b->inj_step;
        memcpy(a->inj_tensor, b->inj_tensor, sizeof(a->inj_tensor));
    }
}

/* op names of external correlation ids: the engine's ops, and the graph
 * launch that carries a whole step (--cuda-graphs). */
static const char *act_op_name(int op)
{
    if (op == BT_ACT_OP_GRAPH) return "cuda_graph";
    return op >= 0 && op < BT_OP_COUNT ? bt_op_name(op) : NULL;
}

static int on_act(void *user, const bt_act *a, uint64_t ext_id)
{
    bt_recorder *r = user;
    int rc = bt_act_to_row(a, ext_id, act_op_name, &r->krows[r->n_krows]);
    if (rc == BT_EFORMAT) { r->act_bad++; return BT_OK; }   /* an incomplete record: skip, count */
    if (rc) return rc;
    if (++r->n_krows < KROWS) return BT_OK;
    r->n_krows = 0;
    return bt_trace_kernel_rows(r->cfg.trace, r->krows, KROWS);
}

/* The forward's device activity (complete: the engine synchronised before
 * flushing) into the kernels table, in the step's transaction. */
static int drain_kernels(bt_recorder *r)
{
    r->n_krows = 0;
    int rc = bt_backend_activity(bt_engine_backend(r->e), on_act, r);
    if (rc == BT_OK && r->n_krows) rc = bt_trace_kernel_rows(r->cfg.trace, r->krows, r->n_krows);
    r->n_krows = 0;
    return rc;
}

static void flush_taps(bt_recorder *r, int step);

static bool cb_flush(void *user, int step)
{
    bt_recorder *r = user;
    int64_t t0 = r->cfg.account ? now_ns() : 0;
    flush_taps(r, step);
    if (r->cfg.account) r->costs.rows_ns += now_ns() - t0;
    return true;
}

static void flush_taps(bt_recorder *r, int step)
{
    if (step == r->pend_step) {
        /* an expert's rows: its first non-finite position is a token's */
        for (int i = 0; i < r->n_pend; i++) {
            struct pending *p = &r->pend[i];
            if (p->pos && p->s.first_bad_pos >= 0) p->s.first_bad_pos = p->pos[p->s.first_bad_pos - p->pos0];
            p->pos = NULL;     /* the engine's array ends with this forward */
            p->ev = p->s;
        }
        for (int i = 0; i < r->n_slots; i++) r->merged[i] = -1;
        int n = 0;
        for (int i = 0; i < r->n_pend; i++) {
            int *m = &r->merged[r->pend[i].slot];
            if (*m >= 0) merge_pending(&r->pend[*m], &r->pend[i]);
            else { *m = n; if (n != i) r->pend[n] = r->pend[i]; n++; }
        }
        for (int i = 0; i < n; i++) record_tap(r, &r->pend[i]);
    }
    r->n_pend = 0;
    if (r->cfg.kernels && r->cfg.trace) {
        int rc = drain_kernels(r);
        if (rc && r->status == BT_OK) r->status = rc;
    }
}

static void cb_routes(void *user, int step, int layer, int pos0, int T, int k, const int *experts,
                      const float *weights)
{
    bt_recorder *r = user;
    if (!r->cfg.trace || r->status != BT_OK || r->cfg.taps == BT_TAPS_NONE) return;
    if (r->cfg.layer_lo >= 0 && (layer < r->cfg.layer_lo || layer > r->cfg.layer_hi)) return;
    r->status = bt_trace_moe_routes(r->cfg.trace, step, r->cfg.model_role, layer, pos0, T, k, experts, weights);
}

int bt_recorder_new(const bt_recorder_cfg *cfg, bt_engine *e, bt_recorder **out)
{
    *out = NULL;
    bt_recorder *r = calloc(1, sizeof(*r));
    if (!r) return bt_error(BT_ENOMEM, "out of memory");
    r->cfg = *cfg;
    if (!r->cfg.model_role) r->cfg.model_role = "target";
    if (r->cfg.topk <= 0) r->cfg.topk = 20;
    r->e = e;
    r->n_layers = bt_engine_n_layers(e);    /* a self-drafting engine runs fewer */
    r->n_vocab = cfg->model->cfg.n_vocab;
    r->slot = malloc((size_t)BT_OP_COUNT * (r->n_layers + 1) * sizeof(int));
    r->ring = malloc((size_t)RING * r->n_vocab * sizeof(float));
    /* room for our ops and a foreign engine's extra tensors, each once per forward */
    r->pend_cap = BT_OP_COUNT * (r->n_layers + 1) + bt_engine_n_extra(e);
    r->pend = malloc((size_t)r->pend_cap * sizeof(*r->pend));
    r->merged = malloc(((size_t)r->pend_cap + 1) * sizeof(int));
    r->pend_step = -1;
    r->det = bt_detector_new(r->n_vocab, is_control, (void *)cfg->tok);
    if (!r->slot || !r->ring || !r->pend || !r->merged || !r->det) { bt_recorder_free(r); return bt_error(BT_ENOMEM, "out of memory"); }
    if (cfg->kernels && !(r->krows = malloc(KROWS * sizeof(*r->krows)))) { bt_recorder_free(r); return bt_error(BT_ENOMEM, "out of memory"); }
    if (!r->slot || !r->ring || !r->pend || !r->det) { bt_recorder_free(r); return bt_error(BT_ENOMEM, "out of memory"); }
    if (cfg->tok) bt_detector_set_tokenizer(r->det, cfg->tok);
    for (int i = 0; i < RING; i++) r->ring_step[i] = -1;
    for (int i = 0; i < BT_OP_COUNT * (r->n_layers + 1); i++) r->slot[i] = -1;
    /* Forward order: token_embd, per layer the layer ops, output_norm, logits. */
    int rc = BT_OK;
    char name[64];
    /* the tensors in one transaction (a row each would commit ~400 times) */
    if (cfg->trace && (rc = bt_trace_batch_begin(cfg->trace))) { bt_recorder_free(r); return rc; }
    int first = bt_engine_first_layer(e);   /* an MTP drafter runs only its block */
    for (int l = -1; l <= r->n_layers && rc == BT_OK; l++) {
        if (l >= 0 && l < first) continue;
        for (int op = 0; op < BT_OP_COUNT && rc == BT_OK; op++) {
            bool layer_op = bt_op_is_layer_op(op);
            if ((l == -1 && op != BT_OP_TOKEN_EMBD) || (l == r->n_layers && op < BT_OP_OUTPUT_NORM) ||
                (l >= 0 && l < r->n_layers && !layer_op))
                continue;
            int layer = layer_op ? l : -1;
            /* not in this architecture, or not in this layer (a hybrid's two kinds) */
            if (!bt_op_in_layer(&cfg->model->cfg, op, layer)) continue;
            if (!tapped(&r->cfg, op, layer)) continue;
            int s = r->n_slots++;
            *slot_at(r, op, layer) = s;
            if (cfg->trace) {
                int w = bt_op_layer_width(&cfg->model->cfg, op, layer);
                bt_tensor_name(op, layer, name, sizeof(name));
                rc = bt_trace_tensor(cfg->trace, r->cfg.model_role, s, name, layer, bt_op_name(op), w);
            }
        }
    }
    /* A foreign engine's tensors with no bt_op (llama.cpp's kq-3): after
     * ours, under their own names, only when every tensor is tapped. */
    r->n_extra = bt_engine_n_extra(e);
    r->extra_slot = malloc(((size_t)r->n_extra + 1) * sizeof(int));
    if (!r->extra_slot && rc == BT_OK) rc = bt_error(BT_ENOMEM, "out of memory");
    for (int i = 0; i < r->n_extra && rc == BT_OK; i++) {
        const bt_extra_tensor *x = bt_engine_extra(e, i);
        bool in_range = x->layer < 0 || r->cfg.layer_lo < 0 || (x->layer >= r->cfg.layer_lo && x->layer <= r->cfg.layer_hi);
        r->extra_slot[i] = -1;
        if (r->cfg.taps != BT_TAPS_ALL || !in_range) continue;
        r->extra_slot[i] = r->n_slots++;
        if (cfg->trace) rc = bt_trace_tensor(cfg->trace, r->cfg.model_role, r->extra_slot[i], x->name, x->layer, x->op, x->width);
    }
    if (cfg->trace) {
        int re = bt_trace_batch_end(cfg->trace, rc == BT_OK);
        if (rc == BT_OK) rc = re;
    }
    if (rc) { bt_recorder_free(r); return rc; }
    bt_eval_cb cb = { .ask = cb_ask, .observe = cb_observe, .user = r, .flush = cb_flush, .routes = cb_routes };
    bt_engine_set_eval_cb(e, &cb);
    *out = r;
    return BT_OK;
}

void bt_recorder_free(bt_recorder *r)
{
    if (!r) return;
    if (r->e) bt_engine_set_eval_cb(r->e, NULL);
    bt_detector_free(r->det);
    free(r->krows);
    free(r->slot);
    free(r->extra_slot);
    free(r->ring);
    free(r->pend);
    free(r->merged);
    free(r);
}

int bt_recorder_n_slots(const bt_recorder *r) { return r->n_slots; }

bool bt_recorder_slot(const bt_recorder *r, int i, int *op, int *layer)
{
    if (i < 0 || i >= r->n_slots) return false;
    for (int o = 0; o < BT_OP_COUNT; o++)
        for (int l = -1; l < r->n_layers; l++)
            if (r->slot[o * (r->n_layers + 1) + l + 1] == i) { *op = o; *layer = l; return true; }
    for (int j = 0; j < r->n_extra; j++)
        if (r->extra_slot[j] == i) { *op = BT_OP_COUNT + j; *layer = bt_engine_extra(r->e, j)->layer; return true; }
    return false;
}

int bt_recorder_prompt(bt_recorder *r, const int32_t *ids, int n)
{
    if (!r->cfg.trace) return BT_OK;
    for (int i = 0; i < n; i++) {
        size_t pl = 0;
        const char *piece = r->cfg.tok ? bt_token_piece(r->cfg.tok, ids[i], &pl) : NULL;
        int rc = bt_trace_token(r->cfg.trace, 0, i, ids[i], piece, pl, "prompt", NAN, NULL);
        if (rc) return rc;
    }
    return BT_OK;
}

int bt_recorder_step_begin(bt_recorder *r, const char *kind, int pos0, int n_pos)
{
    r->step = bt_engine_step(r->e);
    r->in_step = true;
    if (r->cfg.timing) r->t_last = now_ns();
    if (!r->cfg.trace) return BT_OK;
    return bt_trace_step_begin(r->cfg.trace, r->step, r->cfg.model_role, kind, pos0, n_pos);
}

static void token_text(const bt_recorder *r, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || id >= r->n_vocab || !r->cfg.tok) { snprintf(buf, cap, id < 0 || id >= r->n_vocab ? "<oov>" : "?"); return; }
    size_t pl = 0;
    const char *p = bt_token_piece(r->cfg.tok, id, &pl);
    bt_text_escape(p, pl, buf, cap, 0, BT_TEXT_UTF8 | BT_TEXT_SQUOTE | BT_TEXT_ELLIPSIS);
}

static int save_row(bt_recorder *r, int step, int pos, const float *row, const char *reason)
{
    if (!r->cfg.trace) return BT_OK;
    return bt_trace_logit_row(r->cfg.trace, step, pos, row, r->n_vocab, reason, false);
}

static int bt_recorder_snapshot(bt_recorder *r, const float *row, int row_pos, int32_t chosen, const bt_softmax_sums *sums)
{
    int rc = BT_OK;
    int step = r->step;
    if (!r->cfg.trace) {
        /* no trace (serve's untraced requests): only the non-finite
         * detector needs the row, and a finite row gives it nothing */
        bt_sweep acc;
        bt_sweep_init(&acc);
        if (bt_sweep_f32(row, r->n_vocab, &acc) == r->n_vocab) return BT_OK;
    }
    bt_logit_summary ls;
    bt_logit_summarize(row, r->n_vocab, r->cfg.topk, r->cfg.rule.kind == BT_ARGMAX_TRITON ? r->cfg.rule.block : 1024, sums,
                       &ls);
    char rule[48], piece[96], detail[256];
    bt_argmax_format(&r->cfg.rule, rule, sizeof(rule));
    memcpy(r->ring + (size_t)(step % RING) * r->n_vocab, row, (size_t)r->n_vocab * sizeof(float));
    r->ring_step[step % RING] = step;
    r->ring_pos[step % RING] = row_pos;
    if (r->cfg.trace) {
        if ((rc = bt_trace_logits(r->cfg.trace, row_pos, &ls, rule, chosen))) return rc;
        if (r->cfg.logits_full && (rc = save_row(r, step, row_pos, row, "full"))) return rc;
    }
    int64_t bad = ls.nan + ls.pinf + ls.ninf;
    /* A finite row whose logits are all equal (a head of zeros, a
     * collapsed norm): no token is preferred, and every argmax rule takes
     * the first, id 0. The top-k being equal is the cheap sign; the row
     * confirms it. */
    if (bad == 0 && ls.k >= 2 && ls.topk_vals[0] == ls.topk_vals[ls.k - 1] && (!r->seen_flat_logits || step % 64 == 0)) {
        int i = 0;
        while (i < r->n_vocab && row[i] == ls.max) i++;
        if (i == r->n_vocab) {
            bool first = !r->seen_flat_logits;
            r->seen_flat_logits = true;
            token_text(r, chosen, piece, sizeof(piece));
            snprintf(detail, sizeof(detail), "step %d%s: every logit is %g (%d of %d): no token is preferred; rule %s -> id %d "
                     "('%s')", step, strcmp(r->cfg.model_role, "target") ? " (draft model)" : "", (double)ls.max, ls.n_vocab,
                     ls.n_vocab, rule, chosen, piece);
            if ((rc = event(r, step, row_pos, "constant_logits", -1, "logits", "logits", detail, NULL))) return rc;
            if (first && !r->cfg.logits_full && (rc = save_row(r, step, row_pos, row, "constant"))) return rc;
        }
    }
    if (bad > 0 && !(ls.ninf > 0 && ls.nan == 0 && ls.pinf == 0 && ls.ninf < ls.n_vocab)) {
        bool first = !r->seen_bad_logits;
        const char *who = strcmp(r->cfg.model_role, "target") ? " (draft model)" : "";
        if (first) {
            r->seen_bad_logits = true;
            snprintf(detail, sizeof(detail), "step %d%s: logits have %lld NaN, %lld +Inf, %lld -Inf of %d",
                     step, who, (long long)ls.nan, (long long)ls.pinf, (long long)ls.ninf, ls.n_vocab);
            if ((rc = event(r, step, row_pos, "nonfinite_logits", -1, "logits", "logits", detail, NULL))) return rc;
            if (!r->cfg.logits_full && (rc = save_row(r, step, row_pos, row, "first_nonfinite"))) return rc;
        }
        token_text(r, chosen, piece, sizeof(piece));
        if (first || step % 64 == 0) {
            snprintf(detail, sizeof(detail), "step %d%s: %s logits (%lld of %d non-finite); rule %s -> id %d ('%s')",
                     step, who, bad == ls.n_vocab ? "all-non-finite" : "partly non-finite", (long long)bad, ls.n_vocab,
                     rule, chosen, piece);
            if ((rc = event(r, step, row_pos, "argmax_fallthrough", -1, "logits", "logits", detail, NULL))) return rc;
        }
    }
    return BT_OK;
}

static int bt_recorder_token(bt_recorder *r, int pos, int32_t id, const char *role, float logprob)
{
    int rc = BT_OK;
    int step = r->step;
    if (r->cfg.trace) {
        size_t pl = 0;
        const char *p = r->cfg.tok && id >= 0 && id < r->n_vocab ? bt_token_piece(r->cfg.tok, id, &pl) : NULL;
        if ((rc = bt_trace_token(r->cfg.trace, step, pos, id, p, pl, role, logprob, NULL))) return rc;
    }
    if (strcmp(role, "gen") && strcmp(role, "bonus")) return BT_OK;   /* only output feeds the detectors */
    bt_finding f[4];
    int nf = bt_detector_feed(r->det, step, pos, id, f, 4);
    for (int i = 0; i < nf; i++) {
        if ((rc = event(r, f[i].step, f[i].pos, bt_finding_name(f[i].kind), -1, NULL, NULL, f[i].detail, NULL))) return rc;
        if (f[i].kind == BT_FIND_TOKEN_WALL || f[i].kind == BT_FIND_REPETITION_LOOP) {
            int s = f[i].start_step;
            int k = s % RING;
            if (s >= 0 && r->ring_step[k] == s && !r->cfg.logits_full && !r->seen_bad_logits)
                if ((rc = save_row(r, s, r->ring_pos[k], r->ring + (size_t)k * r->n_vocab, "collapse"))) return rc;
        }
    }
    return BT_OK;
}

int bt_recorder_step_sampled(bt_recorder *r, const float *row, int row_pos, int32_t chosen, float logprob,
                             const bt_softmax_sums *sums)
{
    int64_t t0 = r->cfg.account ? now_ns() : 0;
    int rc = bt_recorder_snapshot(r, row, row_pos, chosen, sums);
    if (!rc) rc = bt_recorder_token(r, row_pos + 1, chosen, "gen", logprob);
    if (r->cfg.account) r->costs.logits_ns += now_ns() - t0;
    return rc;
}

static int bt_recorder_spec_step(bt_recorder *r, int step, const char *drafter, int k, int accepted,
                          int32_t bonus_token, const char *bonus_kind)
{
    return r->cfg.trace ? bt_trace_spec_step(r->cfg.trace, step, drafter, k, accepted, bonus_token, bonus_kind) : BT_OK;
}

static int bt_recorder_spec_trail(bt_recorder *r, const bt_spec_row *row)
{
    return r->cfg.trace ? bt_trace_spec_trail(r->cfg.trace, row) : BT_OK;
}

static int bt_recorder_event(bt_recorder *r, int step, int pos, const char *kind, const char *detail)
{
    return event(r, step, pos, kind, -1, NULL, NULL, detail, NULL);
}


int bt_recorder_current_step(const bt_recorder *r) { return r->step; }

int bt_recorder_step_end(bt_recorder *r, double ms)
{
    r->in_step = false;
    if (r->status) return r->status;
    if (!r->cfg.trace) return BT_OK;
    int64_t t0 = r->cfg.account ? now_ns() : 0;
    int rc = bt_trace_step_end(r->cfg.trace, ms);
    if (r->cfg.account) { r->costs.commit_ns += now_ns() - t0; r->costs.steps++; }
    return rc;
}

void bt_recorder_costs_get(const bt_recorder *r, bt_recorder_costs *out) { *out = r->costs; }


int bt_recorder_finish(bt_recorder *r, const char *finish_reason)
{
    if (!r->cfg.trace) return BT_OK;
    return bt_trace_finish_reason(r->cfg.trace, finish_reason);
}

int bt_recorder_inject_unfired(bt_recorder *r, int *n)
{
    if (n) *n = 0;
    int rc = BT_OK;
    for (int i = 0; i < bt_injector_count(r->cfg.inj) && rc == BT_OK; i++) {
        const char *text;
        if (bt_injector_fired(r->cfg.inj, i, &text)) continue;
        if (n) (*n)++;
        bt_warn("--inject '%s' never fired (the run ended at step %d): no value it selects was computed, or each "
                "already held what it writes; nothing was injected", text, r->step);
        if (r->cfg.trace) rc = bt_trace_event(r->cfg.trace, r->step, -1, "inject_unfired", -1, NULL, NULL, text, NULL);
    }
    return rc;
}

int bt_recorder_status(const bt_recorder *r) { return r->status; }
int bt_recorder_n_events(const bt_recorder *r) { return r->n_events; }

void bt_recorder_crash_hook(int sig, const char *frames, void *user)
{
    bt_recorder *r = user;
    if (!r->cfg.trace) return;
    char detail[128];
    /* snprintf is not async-signal-safe in theory; the process is dying and
     * this is the last thing it does, so we take the chance. */
    snprintf(detail, sizeof(detail), "fatal signal %s at step %d", bt_signal_name(sig), r->step);
    int64_t id = 0;
    if (bt_trace_event(r->cfg.trace, r->step, -1, "crash", -1, NULL, NULL, detail, &id) == BT_OK)
        bt_trace_backtrace(r->cfg.trace, id, r->step, "crash", frames);
    bt_trace_crash_close(r->cfg.trace);
}

/* ---- the generation observer (gen/observer.h) ---- */

static int ob_step_begin(void *u, const char *kind, int pos0, int n_pos) { return bt_recorder_step_begin(u, kind, pos0, n_pos); }
static int ob_snapshot(void *u, const float *row, int row_pos, int32_t chosen, const bt_softmax_sums *sums)
{
    return bt_recorder_snapshot(u, row, row_pos, chosen, sums);
}
static int ob_token(void *u, int pos, int32_t id, const char *role, float lp) { return bt_recorder_token(u, pos, id, role, lp); }
static int ob_spec_step(void *u, int step, const char *drafter, int k, int accepted, int32_t bonus, const char *bonus_kind)
{
    return bt_recorder_spec_step(u, step, drafter, k, accepted, bonus, bonus_kind);
}
static int ob_spec_trail(void *u, const bt_spec_row *row) { return bt_recorder_spec_trail(u, row); }
static int ob_event(void *u, int step, int pos, const char *kind, const char *detail) { return bt_recorder_event(u, step, pos, kind, detail); }
static int ob_step_end(void *u, double ms) { return bt_recorder_step_end(u, ms); }

void bt_recorder_observer(bt_recorder *r, bt_gen_observer *o)
{
    *o = (bt_gen_observer){ .user = r, .step_begin = ob_step_begin, .snapshot = ob_snapshot, .token = ob_token,
                            .spec_step = ob_spec_step, .spec_trail = ob_spec_trail, .event = ob_event,
                            .step_end = ob_step_end };
}
