/* analyze.c - trace analysis shared by bisect, report and the browser.
 *
 * Built on the reader's iterators: the propagation walk stops as soon as it
 * has what it reports (the origin step's layer groups, the first KV-carried
 * step and the first recurrence), so a trace that stays NaN for thousands of
 * steps costs no more than one that recovers. The token-level definitions
 * (token wall, repetition loop, out-of-vocabulary id) are the detectors'
 * (tap/detect.h), recomputed here so walls and loops are dated from their
 * first token and traces recorded without detectors are still judged. */
#include "trace/analyze.h"
#include "base/text.h"
#include "base/util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- steps of a speculative trace ---- */

/* Pass of every step, built once for speculative traces (steps of two
 * models interleave there); plain traces have only target passes and skip
 * it. Indexed by step number. */
enum { SK_UNKNOWN = 0, SK_PREFILL, SK_DECODE, SK_VERIFY, SK_DRAFT, SK_MODEL_DRAFT = 8 };
#define SK_MAX_STEPS (1 << 24)

typedef struct step_map {
    uint8_t *code;           /* SK_* kind | SK_MODEL_DRAFT */
    int32_t *n_pos;
    int n;                   /* steps 0..n-1 */
} step_map;

static int sm_code(const step_map *m, int step) { return m && step >= 0 && step < m->n ? m->code[step] : SK_UNKNOWN; }
static bool sm_is_draft(const step_map *m, int step) { return (sm_code(m, step) & SK_MODEL_DRAFT) != 0; }

static int sm_cb(void *user, const bt_trace_step_row *s)
{
    step_map *m = user;
    if (s->step < 0 || s->step >= m->n) return 0;
    int k = !strcmp(s->kind, "prefill") ? SK_PREFILL : !strcmp(s->kind, "decode") ? SK_DECODE
          : !strcmp(s->kind, "verify") ? SK_VERIFY : !strcmp(s->kind, "draft") ? SK_DRAFT : SK_UNKNOWN;
    m->code[s->step] = (uint8_t)(k | (!strcmp(s->model, "draft") ? SK_MODEL_DRAFT : 0));
    m->n_pos[s->step] = s->n_pos;
    return 0;
}

static int sm_build(bt_trace_reader *r, int last_step, step_map *m)
{
    memset(m, 0, sizeof(*m));
    if (last_step < 0) return BT_OK;
    m->n = last_step < SK_MAX_STEPS ? last_step + 1 : SK_MAX_STEPS;
    m->code = calloc((size_t)m->n, 1);
    m->n_pos = calloc((size_t)m->n, sizeof(int32_t));
    if (!m->code || !m->n_pos) return bt_error(BT_ENOMEM, "out of memory");
    int rc = bt_trace_steps_each(r, 0, m->n - 1, sm_cb, m);
    return rc < 0 ? rc : BT_OK;
}

static void sm_free(step_map *m) { free(m->code); free(m->n_pos); memset(m, 0, sizeof(*m)); }

static const char *const prop_names[] = { "origin", "forward", "kv_cache", "recur" };
const char *bt_prop_kind_name(int kind) { return kind >= 0 && kind < 4 ? prop_names[kind] : "?"; }

static void bad_from_tap(const bt_trace_tap_row *t, bt_bad_tensor *b)
{
    memset(b, 0, sizeof(*b));
    b->step = t->step;
    b->pos = t->first_bad_pos;
    b->idx = t->idx;
    b->layer = t->layer;
    snprintf(b->op, sizeof(b->op), "%s", t->op ? t->op : "?");
    snprintf(b->tensor, sizeof(b->tensor), "%s", t->name ? t->name : "?");
    snprintf(b->model, sizeof(b->model), "%s", t->model ? t->model : "target");
    b->first_bad_index = t->first_bad_index;
    b->n = t->n;
    b->nan = t->nan;
    b->pinf = t->pinf;
    b->ninf = t->ninf;
}

/* ---- the walk back (propagation) ----
 *
 * The one walk-back rule, for bisect, report and the browser. In the origin
 * step the bad tensors fall into layer groups (token_embd | layer 0 | ... |
 * everything after the layers): the first group is the origin, each later
 * group's first tensor a forward link. In each later step of the same pass
 * (the other model's passes have their own KV cache: not this chain) the
 * first bad tensor says how the bad values got there: attn_ctx first means
 * everything before it in the step, the layer's own attn_q/k/v included,
 * was finite, so they came out of the KV cache (kv_cache); anything else
 * first means the fault struck again (recur). Every link counts the bad
 * tensors of its group in its step. The walk reads tap_bad in (step, slot)
 * order and stops as soon as it has what it keeps. */

typedef struct walk {
    bt_prop_link *links;
    int n;
    size_t cap;
    int s0;                  /* the origin step */
    char model0[16];         /* its pass */
    int max_later;           /* later steps to link; -1: only the first kv_cache and the first recur */
    bool open;               /* cur is a group still being counted */
    bt_prop_link cur;
    bool cur_post;
    int n_groups, n_later, last_step;
    bool seen_kv, seen_recur;
} walk;

static int walk_close(walk *w)
{
    if (!w->open) return BT_OK;
    w->open = false;
    return BT_VEC_PUSH(w->links, w->n, w->cap, w->cur);
}

static void walk_open(walk *w, int kind, const bt_trace_tap_row *t, bool post)
{
    w->open = true;
    w->cur.kind = kind;
    w->cur.n_bad = 1;
    w->cur_post = post;
    bad_from_tap(t, &w->cur.t);
}

static int walk_cb(void *user, const bt_trace_tap_row *t)
{
    walk *w = user;
    bool post = t->layer < 0 && strcmp(t->op ? t->op : "", "token_embd");
    if (w->open && t->step == w->cur.t.step && t->layer == w->cur.t.layer && post == w->cur_post) {
        w->cur.n_bad++;
        return 0;
    }
    int rc = walk_close(w);
    if (rc) return rc;
    if (t->step == w->s0) {
        walk_open(w, w->n_groups++ ? BT_PROP_FORWARD : BT_PROP_ORIGIN, t, post);
        return 0;
    }
    if (w->max_later < 0 ? w->seen_kv && w->seen_recur : w->n_later >= w->max_later) return 1;
    if (t->step == w->last_step) return 0;          /* only the first bad group of each later step */
    if (strcmp(t->model ? t->model : "target", w->model0)) return 0;
    w->last_step = t->step;
    bool kv = !strcmp(t->op ? t->op : "", "attn_ctx");
    if (w->max_later < 0 && (kv ? w->seen_kv : w->seen_recur)) return 0;
    if (kv) w->seen_kv = true; else w->seen_recur = true;
    w->n_later++;
    walk_open(w, kv ? BT_PROP_KV_CACHE : BT_PROP_RECUR, t, post);
    return 0;
}

/* The walk from the first non-finite tap `first`; links malloc'd. */
static int walk_from(bt_trace_reader *r, const bt_trace_tap_row *first, int max_later, bt_prop_link **links, int *n)
{
    walk w = { .s0 = first->step, .max_later = max_later, .last_step = first->step };
    snprintf(w.model0, sizeof(w.model0), "%s", first->model ? first->model : "target");
    int rc = bt_trace_bad_each(r, first->step, walk_cb, &w);
    if (rc >= 0) rc = walk_close(&w);
    if (rc < 0) { free(w.links); return rc; }
    *links = w.links;
    *n = w.n;
    return BT_OK;
}

int bt_analyze_walk(bt_trace_reader *r, int max_later, bt_prop_link **links, int *n)
{
    *links = NULL;
    *n = 0;
    bt_trace_tap_row first;
    bool found = false;
    int rc = bt_trace_first_nonfinite(r, &first, &found);
    if (rc || !found) return rc;
    return walk_from(r, &first, max_later < 0 ? 0 : max_later, links, n);
}

static void set_pass(bt_bad_tensor *b, const step_map *sm)
{
    snprintf(b->model, sizeof(b->model), "%s", sm_is_draft(sm, b->step) ? "draft" : "target");
    static const char *const kinds[] = { "", "prefill", "decode", "verify", "draft" };
    int k = sm_code(sm, b->step) & 7;
    snprintf(b->kind, sizeof(b->kind), "%s", k < 5 ? kinds[k] : "");
}

/* The first_nonfinite event names a mixture-of-experts tensor down to the
 * expert ("blk.12.ffn_down.expert[37]"); the tap row only to its op slot,
 * which all the layer's experts share. */
typedef struct expert_find {
    const bt_bad_tensor *b;
    char name[64];
} expert_find;

static int expert_cb(void *user, const bt_trace_event_row *ev)
{
    expert_find *f = user;
    size_t n = strlen(f->b->tensor);
    if (ev->step == f->b->step && ev->tensor && !strncmp(ev->tensor, f->b->tensor, n) &&
        !strncmp(ev->tensor + n, ".expert[", 8))
        snprintf(f->name, sizeof(f->name), "%s", ev->tensor);
    return 1;    /* only the first first_nonfinite event counts */
}

static int name_expert(bt_trace_reader *r, bt_bad_tensor *b)
{
    expert_find f = { .b = b };
    int rc = bt_trace_events_each(r, "first_nonfinite", expert_cb, &f);
    if (rc < 0) return rc;
    if (f.name[0]) snprintf(b->tensor, sizeof(b->tensor), "%s", f.name);
    return BT_OK;
}

static int analyze_nonfinite(bt_trace_reader *r, bt_analysis *x, const step_map *sm)
{
    bt_trace_tap_row first;
    bool found = false;
    int rc = bt_trace_first_nonfinite(r, &first, &found);
    if (rc || !found) return rc;
    x->has_nonfinite = true;
    bad_from_tap(&first, &x->first);
    bt_trace_step_row st;
    if (bt_trace_step_get(r, first.step, &st) == BT_OK) {
        snprintf(x->first.model, sizeof(x->first.model), "%s", st.model[0] ? st.model : "target");
        snprintf(x->first.kind, sizeof(x->first.kind), "%s", st.kind);
    } else snprintf(x->first.model, sizeof(x->first.model), "target");
    if ((rc = walk_from(r, &first, -1, &x->prop, &x->n_prop))) return rc;
    for (int i = 0; i < x->n_prop; i++) set_pass(&x->prop[i].t, sm);
    if (x->n_prop) { snprintf(x->prop[0].t.model, 16, "%s", x->first.model); snprintf(x->prop[0].t.kind, 16, "%s", x->first.kind); }
    if ((rc = name_expert(r, &x->first))) return rc;
    if (x->n_prop && x->prop[0].t.step == x->first.step && x->prop[0].t.idx == x->first.idx)
        snprintf(x->prop[0].t.tensor, sizeof(x->prop[0].t.tensor), "%s", x->first.tensor);
    return BT_OK;
}

/* ---- events ---- */

static bool degenerate_kind(const char *k)
{
    static const char *const kinds[] = { "nonfinite_logits", "argmax_fallthrough", "oov_token", "token_wall",
                                         "repetition_loop", "special_leak", "crash", "constant_logits" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(kinds); i++) if (!strcmp(k, kinds[i])) return true;
    return false;
}

static void set_degen(bt_analysis *x, int step, int pos, const char *kind, const char *detail)
{
    if (x->has_degenerate && x->degen_step <= step) return;
    x->has_degenerate = true;
    x->degen_step = step;
    x->degen_pos = pos;
    snprintf(x->degen_kind, sizeof(x->degen_kind), "%s", kind);
    snprintf(x->degen_detail, sizeof(x->degen_detail), "%s", detail);
}

typedef struct event_walk { bt_analysis *x; const step_map *sm; size_t cap; } event_walk;

static int event_cb(void *user, const bt_trace_event_row *ev)
{
    event_walk *w = user;
    bt_analysis *x = w->x;
    const char *kind = ev->kind ? ev->kind : "?";
    x->n_events++;
    int k = 0;
    while (k < x->n_event_kinds && strcmp(x->events[k].kind, kind)) k++;
    if (k == x->n_event_kinds) {
        int rc = BT_VEC_RESERVE(x->events, w->cap, (size_t)k + 1);
        if (rc) return rc;
        bt_event_count *e = x->events;
        memset(&e[k], 0, sizeof(e[k]));
        snprintf(e[k].kind, sizeof(e[k].kind), "%s", kind);
        e[k].first_step = -1;
        x->n_event_kinds++;
    }
    x->events[k].count++;
    if (ev->step >= 0 && (x->events[k].first_step < 0 || ev->step < x->events[k].first_step)) x->events[k].first_step = ev->step;
    if (!strcmp(kind, "crash")) x->has_crash = true;
    /* A drafter's non-finite row or odd token is not output: the target
     * verifies every drafted token before it is emitted. */
    bool draft_pass = sm_is_draft(w->sm, ev->step);
    if (ev->step >= 0 && degenerate_kind(kind) && !draft_pass) set_degen(x, ev->step, ev->pos, kind, ev->detail ? ev->detail : kind);
    return 0;
}

/* ---- tokens ---- */

typedef struct gen_tok { int step, pos; int32_t id; } gen_tok;
typedef struct tok_list {
    gen_tok *g;
    int n, cap;
    bool gen_only;
} tok_list;

static int tok_cb(void *user, const bt_trace_token_row *t)
{
    tok_list *l = user;
    /* the output: generated tokens and, in a speculative run, the target's
     * bonus/correction tokens (drafted tokens are output only as gen) */
    bool gen = t->role && (!strcmp(t->role, "gen") || !strcmp(t->role, "bonus"));
    if (l->gen_only && !gen) return 0;
    if (!l->gen_only && !gen && !(t->role && !strcmp(t->role, "prompt"))) return 0;
    /* pos of a prompt row is its input position; step -1 marks it for the sequence */
    gen_tok g = { .step = gen ? t->step : -1, .pos = t->pos, .id = t->id };
    return BT_VEC_PUSH(l->g, l->n, l->cap, g);
}

typedef struct piece_find { int32_t id; char *buf; size_t cap; bool found; } piece_find;

static int piece_cb(void *user, const bt_trace_token_row *t)
{
    piece_find *p = user;
    if (t->id != p->id || !t->piece) return 0;
    bt_text_escape(t->piece, t->piece_len, p->buf, p->cap, 0, BT_TEXT_UTF8 | BT_TEXT_SQUOTE | BT_TEXT_ELLIPSIS);
    p->found = true;
    return 1;
}

int bt_analyze_piece(bt_trace_reader *r, int32_t id, char *buf, size_t cap)
{
    buf[0] = 0;
    piece_find p = { .id = id, .buf = buf, .cap = cap };
    int rc = bt_trace_tokens_each(r, 0, 0, piece_cb, &p);
    return rc < 0 ? rc : BT_OK;
}

static int count_cb(void *user, const bt_trace_token_row *t)
{
    if (t->role && (!strcmp(t->role, "gen") || !strcmp(t->role, "bonus"))) (*(int *)user)++;
    return 0;
}

int bt_analyze_generated(bt_trace_reader *r, int *n)
{
    *n = 0;
    const char *g = bt_trace_meta_get(r, "generated");
    if (g) {
        char *end;
        long v = strtol(g, &end, 10);
        if (end == g || *end || v < 0 || v > INT32_MAX)
            return bt_error(BT_EFORMAT, "meta generated is '%.40s', not a count", g);
        *n = (int)v;
        return BT_OK;
    }
    int rc = bt_trace_tokens_each(r, 0, 0, count_cb, n);
    return rc < 0 ? rc : BT_OK;
}

int bt_analyze_sequence(bt_trace_reader *r, int32_t **ids, int *n, int *n_prompt)
{
    *ids = NULL; *n = 0; *n_prompt = 0;
    tok_list l = { 0 };
    int rc = bt_trace_tokens_each(r, 0, 0, tok_cb, &l);
    if (rc < 0) { free(l.g); return rc; }
    int32_t *out = malloc((size_t)(l.n ? l.n : 1) * sizeof(int32_t));
    if (!out) { free(l.g); return bt_error(BT_ENOMEM, "out of memory"); }
    /* prompt first (trail order), then generated tokens (trail order) */
    int k = 0;
    for (int i = 0; i < l.n; i++) if (l.g[i].step < 0) out[k++] = l.g[i].id;
    *n_prompt = k;
    for (int i = 0; i < l.n; i++) if (l.g[i].step >= 0) out[k++] = l.g[i].id;
    free(l.g);
    *ids = out;
    *n = k;
    return BT_OK;
}

/* An export made with --redact replaced removed ids with -1: those are
 * unknown, not out of the vocabulary, and never a wall or a loop. */
static bool ids_redacted(bt_trace_reader *r)
{
    const char *v = bt_trace_meta_get(r, "redacted");
    return v && (!strcmp(v, "prompt") || !strcmp(v, "all"));
}

static int analyze_tokens(bt_trace_reader *r, bt_analysis *x, const gen_tok *g, int n)
{
    char piece[96], detail[256];
    int rc;
    bool red = ids_redacted(r);
    for (int i = 0; i < n; i++) {
        if (red && g[i].id == -1) continue;
        if (g[i].id < 0 || (x->n_vocab > 0 && g[i].id >= x->n_vocab)) {
            snprintf(detail, sizeof(detail), "step %d: id %d is outside the vocabulary (%d)", g[i].step, g[i].id, x->n_vocab);
            set_degen(x, g[i].step, g[i].pos, "oov_token", detail);
            break;
        }
    }
    for (int i = 0; i < n; ) {
        int j = i;
        while (j < n && g[j].id == g[i].id) j++;
        if (j - i >= BT_DETECT_WALL_MIN && !(red && g[i].id == -1)) {
            if ((rc = bt_analyze_piece(r, g[i].id, piece, sizeof(piece)))) return rc;
            snprintf(detail, sizeof(detail), "token %d ('%s') repeated %d times from step %d", g[i].id, piece, j - i, g[i].step);
            set_degen(x, g[i].step, g[i].pos, "token_wall", detail);
            break;
        }
        i = j;
    }
    for (int i = 0; i < n; i++) {
        if (x->has_degenerate && g[i].step >= x->degen_step) break;
        if (red && g[i].id == -1) continue;
        for (int p = 2; p <= BT_DETECT_LOOP_MAX_PERIOD && i + BT_DETECT_LOOP_MIN_REPEATS * p <= n; p++) {
            bool constant = true, periodic = true;
            for (int k = 1; k < p && constant; k++) constant = g[i + k].id == g[i].id;
            if (constant) continue;   /* a wall, not a loop */
            for (int k = p; k < BT_DETECT_LOOP_MIN_REPEATS * p && periodic; k++) periodic = g[i + k].id == g[i + k - p].id;
            if (!periodic) continue;
            int end = i + BT_DETECT_LOOP_MIN_REPEATS * p;
            while (end < n && g[end].id == g[end - p].id) end++;
            snprintf(detail, sizeof(detail), "a period of %d tokens repeated %d times from step %d", p, (end - i) / p, g[i].step);
            set_degen(x, g[i].step, g[i].pos, "repetition_loop", detail);
            return BT_OK;
        }
    }
    return BT_OK;
}

/* ---- the argmax explanation ---- */

/* "step 9: logits all NaN; rule first -> id 0 ('!'); repeated 55 times" */
static int explain(bt_trace_reader *r, bt_analysis *x, const gen_tok *g, int n)
{
    bt_trace_logits_row li;
    bool bad_row = false;
    int rc = bt_trace_first_bad_logits_of(r, "target", &li, &bad_row);
    if (rc) return rc;
    char what[160], piece[96], rule[64];
    int step;
    int32_t id;
    if (bad_row) {
        step = li.step;
        x->bad_logits_step = step;
        id = li.chosen;
        int64_t bad = li.nan + li.pinf + li.ninf;
        if (li.nan == li.n_vocab) snprintf(what, sizeof(what), "logits all NaN");
        else if (bad >= li.n_vocab)
            snprintf(what, sizeof(what), "logits all non-finite (%lld NaN, %lld +Inf, %lld -Inf)",
                     (long long)li.nan, (long long)li.pinf, (long long)li.ninf);
        else
            snprintf(what, sizeof(what), "logits partly non-finite (%lld NaN, %lld +Inf, %lld -Inf of %d)",
                     (long long)li.nan, (long long)li.pinf, (long long)li.ninf, li.n_vocab);
        snprintf(rule, sizeof(rule), "rule %s", li.rule[0] ? li.rule : "?");
        char d[256];
        snprintf(d, sizeof(d), "step %d: %s", step, what);
        set_degen(x, step, li.pos, "nonfinite_logits", d);
    } else if (x->has_degenerate) {
        /* Finite logits: the argmax was a legitimate choice of a damaged model. */
        step = x->degen_step;
        id = INT32_MIN;
        for (int i = 0; i < n; i++) if (g[i].step == step) { id = g[i].id; break; }
        if (id == INT32_MIN) {
            snprintf(x->explanation, sizeof(x->explanation), "step %d: %s", step, x->degen_detail);
            return BT_OK;
        }
        bt_trace_logits_row fl[4];
        int nl = 0;
        if ((rc = bt_trace_step_logits(r, step, fl, 4, &nl))) return rc;
        snprintf(rule, sizeof(rule), "argmax %s", nl > 0 && fl[nl - 1].rule[0] ? fl[nl - 1].rule : "");
        if (!strcmp(x->degen_kind, "constant_logits"))
            snprintf(what, sizeof(what), "logits finite and all equal (every token ties; the first wins)");
        else
            snprintf(what, sizeof(what), "logits finite");
    } else return BT_OK;

    int start = 0;
    while (start < n && g[start].step < step) start++;
    int reps = 0;
    while (start + reps < n && g[start + reps].id == id) reps++;
    char tail[96];
    if (reps > 1 && !(id == -1 && ids_redacted(r))) snprintf(tail, sizeof(tail), "; repeated %d times", reps);
    else tail[0] = 0;
    if (!bad_row) {
        size_t l = strlen(tail);
        snprintf(tail + l, sizeof(tail) - l, " (%s)", x->degen_kind);
    }
    if (id == -1 && ids_redacted(r))
        snprintf(x->explanation, sizeof(x->explanation), "step %d: %s; %s -> id redacted (export --redact)%s", step, what,
                 rule, tail);
    else if (id < 0 || (x->n_vocab > 0 && id >= x->n_vocab))
        snprintf(x->explanation, sizeof(x->explanation), "step %d: %s; %s -> id %d, outside the vocabulary (%d)%s",
                 step, what, rule, id, x->n_vocab, tail);
    else {
        if ((rc = bt_analyze_piece(r, id, piece, sizeof(piece)))) return rc;
        snprintf(x->explanation, sizeof(x->explanation), "step %d: %s; %s -> id %d ('%s')%s", step, what, rule, id, piece, tail);
    }
    return BT_OK;
}

/* ---- speculative decoding ---- */

typedef struct spec_walk {
    bt_spec_analysis *s;
    bt_spec_window cur;
    int max_k;
    size_t cap_windows;
} spec_walk;

static int push_window(spec_walk *w)
{
    if (!w->cur.n_verify) return BT_OK;
    int rc = BT_VEC_PUSH(w->s->windows, w->s->n_windows, w->cap_windows, w->cur);
    if (rc) return rc;
    memset(&w->cur, 0, sizeof(w->cur));
    return BT_OK;
}

static int spec_step_cb(void *user, const bt_trace_spec_step_row *row)
{
    spec_walk *w = user;
    bt_spec_analysis *s = w->s;
    /* A verify drafts at most a context's worth; anything else is a crafted
     * or corrupt row, and summing it could overflow the window's ints. */
    if (row->k < 0 || row->k > (1 << 24) || row->accepted < 0 || row->accepted > row->k)
        return bt_error(BT_EFORMAT, "trace: spec_steps row of step %d has k %d and accepted %d",
                        row->step, row->k, row->accepted);
    if (!s->drafter[0] && row->drafter[0]) snprintf(s->drafter, sizeof(s->drafter), "%s", row->drafter);
    s->drafted += row->k;
    s->accepted += row->accepted;
    if (row->k > w->max_k) w->max_k = row->k;
    if (!w->cur.n_verify) w->cur.first_step = row->step;
    w->cur.last_step = row->step;
    w->cur.n_verify++;
    w->cur.drafted += row->k;
    w->cur.accepted += row->accepted;
    return w->cur.n_verify == BT_SPEC_WINDOW ? push_window(w) : 0;
}

static int spec_trail_cb(void *user, const bt_trace_spec_trail_row *row)
{
    bt_spec_analysis *s = user;
    if (!row->draft_finite) {
        s->nonfinite_drafts++;
        if (row->accepted) s->nonfinite_drafts_accepted++;
    }
    return 0;
}

typedef struct first_ev { int *count, *step; char *detail; size_t cap; } first_ev;

static int first_ev_cb(void *user, const bt_trace_event_row *ev)
{
    first_ev *f = user;
    if (!(*f->count)++) {
        *f->step = ev->step;
        snprintf(f->detail, f->cap, "%s", ev->detail ? ev->detail : "");
    }
    return 0;
}

static int first_tap_cb(void *user, const bt_trace_tap_row *t)
{
    bt_trace_tap_row *o = user;
    *o = *t;
    return 1;
}

/* "self:N" -> N; -1 for any other drafter */
static int self_layers(const char *drafter)
{
    if (strncmp(drafter, "self:", 5)) return -1;
    char *end;
    long n = strtol(drafter + 5, &end, 10);
    return end != drafter + 5 && n >= 0 && n < 100000 ? (int)n : -1;
}

static int analyze_spec(bt_trace_reader *r, bt_analysis *x, const step_map *sm, const gen_tok *g, int n)
{
    bt_spec_analysis *s = &x->spec;
    s->present = true;
    s->acceptance = NAN;
    s->amp_ratio = NAN;
    s->amp_draft_positions = -1;
    s->target_bad_step = s->post_stop_step = s->accept_collapse_step = -1;
    const char *d = bt_trace_meta_get(r, "drafter"), *k = bt_trace_meta_get(r, "spec_k");
    if (d) snprintf(s->drafter, sizeof(s->drafter), "%s", d);
    const char *win = bt_trace_meta_get(r, "export_window");
    s->partial = win && strcmp(win, "all");
    spec_walk w = { .s = s };
    int rc = bt_trace_spec_steps_each(r, INT32_MIN, INT32_MAX, spec_step_cb, &w);
    if (rc < 0 || (rc = push_window(&w))) return rc;
    s->k = k && atoi(k) > 0 ? atoi(k) : w.max_k;
    if (s->drafted > 0) s->acceptance = (double)s->accepted / (double)s->drafted;
    if ((rc = bt_trace_spec_trail_each(r, INT32_MIN, INT32_MAX, spec_trail_cb, s)) < 0) return rc;
    for (int i = 0; i < sm->n; i++) {
        int c = sm->code[i] & 7;
        if (sm->code[i] & SK_MODEL_DRAFT) s->draft_steps++;
        else if (c == SK_VERIFY) s->verify_steps++;
        else if (c == SK_DECODE) s->decode_steps++;
        else if (c == SK_PREFILL) s->prefill_steps++;
    }

    /* Where the first non-finite came from, and the target's own first. */
    if (x->has_nonfinite) {
        snprintf(s->first_model, sizeof(s->first_model), "%s", x->first.model);
        snprintf(s->first_kind, sizeof(s->first_kind), "%s", x->first.kind);
    }
    if (x->has_nonfinite && strcmp(x->first.model, "draft")) {
        s->target_bad_step = x->first.step;
        snprintf(s->target_bad_tensor, sizeof(s->target_bad_tensor), "%s", x->first.tensor);
    } else if (x->has_nonfinite) {
        if ((rc = bt_trace_first_bad_step_of(r, "target", &s->target_bad_step))) return rc;
        if (s->target_bad_step >= 0) {
            bt_trace_tap_row t;
            memset(&t, 0, sizeof(t));
            if ((rc = bt_trace_bad_each(r, s->target_bad_step, first_tap_cb, &t)) < 0) return rc;
            /* bad_each runs in (step, model, idx) order: the step's first row is the target's */
            snprintf(s->target_bad_tensor, sizeof(s->target_bad_tensor), "%s", t.name ? t.name : "?");
        }
    }
    s->output_clean = s->target_bad_step < 0 && !x->has_degenerate;

    /* Amplification, counted after the prefill up to the collapse. */
    int until = s->target_bad_step >= 0 ? s->target_bad_step : x->has_degenerate ? x->degen_step : sm->n - 1;
    s->amp_until = until;
    s->amp_in_prefill = s->target_bad_step >= 0 && (sm_code(sm, s->target_bad_step) & 7) == SK_PREFILL;
    int nl = self_layers(s->drafter);
    bool shared = false;
    if (nl >= 0 && s->target_bad_step >= 0) {
        /* self-drafting runs the target's own first N layers, embedding and head */
        int layer = -1;
        if (!strncmp(s->target_bad_tensor, "blk.", 4)) layer = atoi(s->target_bad_tensor + 4);
        shared = layer < nl;
    }
    if (shared) s->amp_draft_positions = 0;
    for (int i = 0; i <= until && i < sm->n; i++) {
        int c = sm->code[i];
        if (c & SK_MODEL_DRAFT) { if (shared) s->amp_draft_positions += sm->n_pos[i]; continue; }
        if ((c & 7) != SK_VERIFY && (c & 7) != SK_DECODE) continue;
        s->amp_forwards++;
        s->amp_positions += sm->n_pos[i];
    }
    for (int i = 0; i < n; i++) {
        if (g[i].step > until) break;
        int c = sm_code(sm, g[i].step) & 7;
        if (c == SK_VERIFY || c == SK_DECODE) s->amp_emitted++;
    }
    if (s->amp_emitted > 0) s->amp_ratio = (double)s->amp_positions / (double)s->amp_emitted;

    first_ev fp = { &s->n_post_stop, &s->post_stop_step, s->post_stop_detail, sizeof(s->post_stop_detail) };
    if ((rc = bt_trace_events_each(r, "post_stop_draft", first_ev_cb, &fp)) < 0) return rc;
    first_ev fa = { &s->n_accept_collapse, &s->accept_collapse_step, s->accept_collapse_detail, sizeof(s->accept_collapse_detail) };
    if ((rc = bt_trace_events_each(r, "accept_collapse", first_ev_cb, &fa)) < 0) return rc;
    return BT_OK;
}

bool bt_kernel_is_tap(const char *name)
{
    return name && !strncmp(name, "bt_k_stats", 10);
}

const char *bt_kernel_row_format(const bt_kernel_row *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s <<<(%d,%d,%d), (%d,%d,%d)>>> %.1f us, stream %lld, device %lld", k->name, k->grid[0],
             k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2], (double)(k->end_ns - k->start_ns) / 1e3,
             (long long)k->stream, (long long)k->device);
    return buf;
}

static int first_kernel_cb(void *user, const bt_kernel_row *k)
{
    bt_analysis *x = user;
    if (strcmp(k->kind, "kernel")) return BT_OK;
    x->n_first_kernels++;
    if (bt_kernel_is_tap(k->name)) return BT_OK;
    x->first_kernel = *k;
    x->has_first_kernel = true;
    return BT_OK;
}

int bt_analyze(bt_trace_reader *r, bt_analysis *x)
{
    memset(x, 0, sizeof(*x));
    x->degen_step = -1;
    x->bad_logits_step = -1;
    tok_list l = { .gen_only = true };
    step_map sm = { 0 };
    bt_trace_summary sum;
    int rc = bt_trace_summary_get(r, &sum);
    if (rc) goto out;
    bool spec = bt_trace_has_spec(r);
    if (spec && (rc = sm_build(r, sum.last_step, &sm))) goto out;
    x->n_steps = (int)sum.n_steps;
    x->n_tensors = sum.n_tensors;
    const char *nv = bt_trace_meta_get(r, "n_vocab");
    x->n_vocab = nv ? atoi(nv) : 0;
    if ((rc = analyze_nonfinite(r, x, spec ? &sm : NULL))) goto out;
    if (x->has_nonfinite &&
        (rc = bt_trace_kernels_of(r, x->first.step, x->first.layer, x->first.op, first_kernel_cb, x)) < 0) goto out;
    rc = BT_OK;
    if ((rc = bt_trace_tokens_each(r, 0, 0, tok_cb, &l)) < 0) goto out;
    x->n_gen = l.n;
    const char *g = bt_trace_meta_get(r, "generated");
    if (g && (rc = bt_analyze_generated(r, &x->n_gen))) goto out;
    event_walk w = { .x = x, .sm = spec ? &sm : NULL };
    if ((rc = bt_trace_events_each(r, NULL, event_cb, &w)) < 0) goto out;
    if ((rc = analyze_tokens(r, x, l.g, l.n))) goto out;
    if ((rc = explain(r, x, l.g, l.n))) goto out;
    if (spec) rc = analyze_spec(r, x, &sm, l.g, l.n);
out:
    free(l.g);
    sm_free(&sm);
    if (rc) bt_analysis_clear(x);
    return rc < 0 ? rc : BT_OK;
}

void bt_analysis_clear(bt_analysis *x)
{
    free(x->prop);
    free(x->events);
    free(x->spec.windows);
    memset(x, 0, sizeof(*x));
}

void bt_bad_tensor_print_counts(FILE *out, const bt_bad_tensor *t)
{
    fprintf(out, "%lld NaN, %lld +Inf, %lld -Inf of %lld", (long long)t->nan, (long long)t->pinf, (long long)t->ninf, (long long)t->n);
}

const char *bt_layer_label(int layer, char *buf, size_t cap)
{
    if (layer < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%d", layer);
    return buf;
}
