/* replay.c - teacher-forced replay of a trace (see replay.h). Moved from
 * cmd_bisect.c so that bisect is a shell around it.
 *
 * The engine's eval callback asks for exactly the trace's tapped tensors
 * (a (op, layer) -> slot table) and asks the backend for their statistics
 * (bt_tensor_stats: the recorder's definition, computed where the tensor
 * lives, final once the forward returns); after each forward the step's
 * taps are read back and compared slot by slot with bt_tap_compare. */
#include "run/replay.h"
#include "backend/backend.h"
#include "engine/engine.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "session.h"
#include "run/run_meta.h"
#include "tap/stats.h"
#include "trace/analyze.h"
#include "trace/compare.h"
#include "trace/reader.h"
#include "trace/trace.h"
#include "base/util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct replay {
    const bt_trace_tensor_row *tens;
    int n_tens, n_layers;
    int *slot;                  /* (BT_OP_COUNT, n_layers + 1) -> slot or -1 */
    bt_tap_stats *ref;          /* per slot, this step */
    bool *seen;
    /* a mixture-of-experts op's views (one per expert), merged into ref
     * once the forward is done (their statistics may land only then) */
    bt_tap_stats *xs;
    int *xs_slot, n_xs, cap_xs;
    char err[256];
} replay;

static int *slot_at(replay *r, int op, int layer) { return &r->slot[op * (r->n_layers + 1) + layer + 1]; }

static bool rp_ask(void *user, int op, int layer)
{
    replay *r = user;
    return *slot_at(r, op, layer) >= 0;
}

static bool rp_observe(void *user, const bt_tensor_view *t)
{
    replay *r = user;
    int s = *slot_at(r, t->op, t->layer);
    if (s < 0 || t->partial) return true;   /* a prefill's computed logit row: never a tap (recorder.c) */
    if (t->width != r->tens[s].width) {
        snprintf(r->err, sizeof(r->err), "%s is %d wide in the trace but %d in this model: not the model the trace was recorded with",
                 r->tens[s].name, r->tens[s].width, t->width);
        return false;
    }
    /* final once the forward returns, which is when ref is read */
    if (t->moe) {
        if (r->n_xs >= r->cap_xs) {
            snprintf(r->err, sizeof(r->err), "more than %d expert views in one forward", r->cap_xs);
            return false;
        }
        r->xs_slot[r->n_xs] = s;
        if (bt_tensor_stats(t, &r->xs[r->n_xs++]) != BT_OK) {
            snprintf(r->err, sizeof(r->err), "%s", bt_errmsg());
            return false;
        }
        return true;
    }
    if (bt_tensor_stats(t, &r->ref[s]) != BT_OK) {
        snprintf(r->err, sizeof(r->err), "%s", bt_errmsg());
        return false;
    }
    r->seen[s] = true;
    return true;
}

/* Does the trace's statistic t differ from the reference's r0 beyond tol?
 * The rule is bt_tap_compare's (the one diff uses); a count mismatch is
 * reported as the field "nonfinite" with the total counts. Fills the first
 * differing field; *rel gets the largest relative difference. */
static bool stats_differ(const bt_trace_tap_row *t, const bt_tap_stats *r0, double tol,
                         char field[16], double *tv, double *rv, double *rel)
{
    bt_trace_tap_row ref;
    bt_tap_row_from_stats(r0, &ref);
    bt_tap_diff d;
    bool differ = bt_tap_compare(t, &ref, tol, &d);
    *rel = d.rel;
    if (!differ) return false;
    bool count = !strcmp(d.field, "nan") || !strcmp(d.field, "pinf") || !strcmp(d.field, "ninf");
    snprintf(field, 16, "%s", count ? "nonfinite" : d.field);
    *tv = count ? (double)(t->nan + t->pinf + t->ninf) : d.a;
    *rv = count ? (double)(ref.nan + ref.pinf + ref.ninf) : d.b;
    return true;
}

/* cfg.against: compare replay A's statistics with replay B's, slot by
 * slot, with the one comparator; fill d with the first departure and
 * res->one with the first op non-finite under one side only. */
static void against_step(double tol, const bt_tap_stats *a, const bool *seen_a, const bt_tap_stats *b,
                         const bool *seen_b, int n_tens, bt_replay_divergence *d, bt_replay_result *res)
{
    for (int j = 0; j < n_tens; j++) {
        if (!seen_a[j] || !seen_b[j]) continue;
        bt_trace_tap_row ra;
        bt_tap_row_from_stats(&a[j], &ra);
        bool bad_a = a[j].nan || a[j].pinf || a[j].ninf, bad_b = b[j].nan || b[j].pinf || b[j].ninf;
        if (bad_a != bad_b && !res->one_bad) {
            res->one_bad = true;
            res->one = *d;
            res->one.slot = j;
            snprintf(res->one_side, sizeof(res->one_side), "%s", bad_a ? "A" : "B");
            snprintf(res->one.field, sizeof(res->one.field), "nonfinite");
            res->one.tv = (double)(a[j].nan + a[j].pinf + a[j].ninf);
            res->one.rv = (double)(b[j].nan + b[j].pinf + b[j].ninf);
        }
        char field[16];
        double tv = 0, rv = 0, rel;
        bool differ = stats_differ(&ra, &b[j], tol, field, &tv, &rv, &rel);
        if (rel > res->max_rel && isfinite(rel)) { res->max_rel = rel; res->max_rel_step = d->step; res->max_rel_slot = j; }
        if (!differ) continue;
        if (d->slot < 0) { d->slot = j; snprintf(d->field, sizeof(d->field), "%s", field); d->tv = tv; d->rv = rv; }
        d->n_div++;
    }
}

/* The drafted tokens of every verify step, in (step, draft_idx) order: a
 * verify forward's input is the last accepted token and its drafts. */
typedef struct trail_list { bt_trace_spec_trail_row *v; int n; size_t cap; } trail_list;

static int trail_cb(void *user, const bt_trace_spec_trail_row *t)
{
    trail_list *l = user;
    bt_trace_spec_trail_row row = *t;
    row.reason = NULL;            /* borrowed string: not kept */
    return BT_VEC_PUSH(l->v, l->n, l->cap, row);
}

/* One replay's state, phase by phase (bt_replay_run). Why this is not the
 * generation loop in a forced mode: a replay samples nothing and decodes no
 * text; it feeds each recorded target forward exactly as it ran (a chunked
 * prefill's chunks, a verify step's rejected drafts included, draft passes
 * skipped), under its own eval callback that taps only the trace's tensors,
 * optionally in lockstep with a second engine, and compares after every
 * forward. The decoder's invariants (emitted tokens, KV bounds, drafting)
 * do not hold for that input, so the shared parts are the session (the
 * engine, exactly as run builds it) and the comparator, not the loop. */
typedef struct replay_run {
    bt_trace_reader *r;
    const bt_replay_cfg *cfg;
    bt_replay_result *res;
    bt_run_meta meta;
    const char *path;           /* the model replayed */
    bool spec;
    trail_list tl;
    bt_trace_step_row *steps;   /* the target's steps */
    int n_steps;
    int32_t *seq;               /* the token trail, prompt first */
    int n_seq, n_prompt;
    int32_t *in_tok;            /* every replayed step's input tokens, back to back */
    int64_t *in_off;
    int *cached;                /* (n_steps) leading positions the step took from a prefix cache */
    /* a hybrid reference's recurrent state: saved before each verify, so a
     * rejection is rolled back as the decoder does (and as a trace made
     * under --inject norollback did not) */
    float *vstate[2];
    int vpos[2], next[2];
    int max_batch, ctx;
    const bt_trace_tensor_row *tens;
    int n_tens;
    bt_session *ses;
    bt_session_cfg sc;
    const bt_model *m;
    bt_engine *e, *e2;          /* the reference, and profile B (cfg->against) */
    replay rp, rp2;
    bt_eval_cb cb, cb2;
    bt_trace_tap_row *tr;       /* the current step's taps in the trace */
    int n_tr;
    size_t all_cap;
} replay_run;

/* A prefix hit of a batched server's request: the step computed (and
 * tapped) only the positions after it. */
static int hit_cb(void *user, const bt_kv_access *a)
{
    replay_run *x = user;
    if (strcmp(a->mode, "hit")) return 0;
    for (int i = 0; i < x->n_steps; i++) {
        const bt_trace_step_row *s = &x->steps[i];
        if (s->step != a->step) continue;
        int n = BT_MIN(a->pos_hi + 1, s->pos0 + s->n_pos - 1) - s->pos0;
        if (n > x->cached[i]) {
            if (!x->cached[i]) x->res->cached_steps++;
            x->res->cached_positions += n - x->cached[i];
            x->cached[i] = n;
        }
    }
    return 0;
}

/* The trace's side: its tensors, model, target steps, drafts and tokens. */
static int load_trace(replay_run *x)
{
    const bt_replay_cfg *cfg = x->cfg;
    bt_replay_result *res = x->res;
    int rc;
    bt_trace_tensors(x->r, "target", &x->tens, &x->n_tens);
    res->tens = x->tens;
    res->n_tens = x->n_tens;
    bt_run_meta_read(x->r, &x->meta);
    x->path = cfg->model ? cfg->model : x->meta.model_path;
    if (!x->path) return bt_error(BT_EINVAL, "%s: the trace does not name its model (meta model_path); pass --model", cfg->name);
    snprintf(res->model_path, sizeof(res->model_path), "%s", x->path);
    if (x->n_tens == 0) return bt_error(BT_EINVAL, "%s: the trace has no tap statistics to compare (recorded with --taps none)", cfg->name);
    bt_trace_summary sum;
    if ((rc = bt_trace_summary_get(x->r, &sum))) return rc;
    x->steps = malloc((size_t)(sum.n_steps > 0 ? sum.n_steps : 1) * sizeof(*x->steps));
    if (!x->steps) return bt_error(BT_ENOMEM, "out of memory");
    int n_steps = 0;
    if ((rc = bt_trace_steps(x->r, 0, (int)sum.n_steps, x->steps, &n_steps))) return rc;
    int k = 0;
    for (int i = 0; i < n_steps; i++) if (!strcmp(x->steps[i].model, "target")) x->steps[k++] = x->steps[i];
    res->draft_steps_skipped = n_steps - k;
    x->n_steps = k;
    if (x->spec && (rc = bt_trace_spec_trail_each(x->r, INT32_MIN, INT32_MAX, trail_cb, &x->tl)) < 0) return rc;
    if ((rc = bt_analyze_sequence(x->r, &x->seq, &x->n_seq, &x->n_prompt))) return rc;
    if (!(x->cached = calloc((size_t)(k > 0 ? k : 1), sizeof *x->cached))) return bt_error(BT_ENOMEM, "out of memory");
    if ((rc = bt_trace_kv_access_each(x->r, hit_cb, x)) < 0) return rc;
    for (int i = 0; i < x->n_seq; i++)
        if (x->seq[i] < 0)   /* export --redact replaced the ids with -1: nothing to replay */
            return bt_error(BT_EINVAL, "%s: the trace's token ids were removed by export --redact; --reference needs the original trace", cfg->name);
    res->steps_total = x->n_steps;
    if (x->n_steps == 0) return bt_error(BT_EINVAL, "%s: the trace has no steps to replay", cfg->name);
    return BT_OK;
}

/* The model, verified against the trace's SHA-256. */
static int open_model(replay_run *x)
{
    const bt_replay_cfg *cfg = x->cfg;
    int rc;
    if (access(x->path, R_OK) != 0)
        return bt_error(BT_EIO, "%s: cannot read the trace's model %s (pass --model)", cfg->name, x->path);
    /* The replay feeds ids only: a llama2.c tokenizer that moved is no reason to fail. */
    x->sc = (bt_session_cfg){ .model = x->path, .tokenizer = cfg->tokenizer, .need_weights = true };
    if ((rc = bt_session_open(&x->sc, &x->ses))) return rc;
    x->m = bt_session_model(x->ses);
    const char *meta_sha = x->meta.model_sha256;
    if (meta_sha && *meta_sha) {
        char hex[65];
        bt_sha256_hex(x->m->file_data, x->m->file_size, hex);
        if (strcmp(hex, meta_sha))
            return bt_error(BT_EINVAL, "%s has SHA-256 %.16s..., but the trace was recorded with %.16s...: not the same model (pass --model)",
                            x->path, hex, meta_sha);
        x->res->sha_checked = true;
    } else bt_warn("bangtrace: %s: %s records no model_sha256; cannot verify that %s is the traced model", cfg->who ? cfg->who : "replay", cfg->name, x->path);
    return BT_OK;
}

/* Mantissa bits of an engine's dtype as another engine records it (meta
 * dtype: "bfloat16", "float16", "float32", or bangtrace's short names). */
static int dtype_bits(const char *d)
{
    if (!d) return 24;
    if (!strcmp(d, "bfloat16") || !strcmp(d, "bf16")) return 8;
    if (!strcmp(d, "float16") || !strcmp(d, "f16") || !strcmp(d, "half")) return 11;
    return 24;
}

int bt_replay_tensor_op(const bt_trace_tensor_row *t, bool foreign)
{
    int op = bt_op_from_name(t->op);
    if (op < 0 || !foreign) return op;
    char stable[96];
    bt_tensor_name(op, t->layer, stable, sizeof(stable));
    return strcmp(t->name, stable) ? -1 : op;
}

/* The tolerance (given, or derived across devices), cross-engine traces,
 * and every tensor of the trace one this model has. */
static int check_tensors(replay_run *x)
{
    const bt_replay_cfg *cfg = x->cfg;
    bt_replay_result *res = x->res;
    int n_layers = x->m->cfg.n_layers;
    snprintf(res->trace_backend, sizeof(res->trace_backend), "%s", x->meta.backend ? x->meta.backend : "");
    res->tol = cfg->tol;
    int dbits = dtype_bits(x->meta.dtype);
    if (cfg->device_tol || (cfg->tol_auto && x->meta.foreign && dbits < 24)) {
        const bt_config *mc = &x->m->cfg;
        res->tol_bits = BT_MIN(bt_tap_tol_mant_bits(x->meta.numerics), dbits);
        res->tol_k = BT_MAX(BT_MAX((long)mc->dim, (long)mc->hidden_dim), (long)mc->n_heads * mc->head_dim);
        res->tol_layers = n_layers;
        res->tol = bt_tap_tol_devices(res->tol_bits, res->tol_k, n_layers);
        res->tol_derived = true;
    }
    res->cross = x->meta.foreign;
    if (res->cross && !(res->slot_rel = calloc((size_t)x->n_tens, sizeof(double)))) return bt_error(BT_ENOMEM, "out of memory");
    for (int i = 0; i < x->n_tens; i++) {
        const bt_trace_tensor_row *t = &x->tens[i];
        int op = bt_replay_tensor_op(t, res->cross);
        if (res->cross && op < 0 && t->idx == i) continue;   /* llama.cpp's own tensor (kq-3): nothing to replay */
        if (t->idx != i || op < 0 || t->layer >= n_layers || (bt_op_is_layer_op(op) != (t->layer >= 0)))
            return bt_error(BT_EFORMAT, "%s: tensor '%s' (slot %d) does not exist in %s (%d layers)", cfg->name, t->name,
                            t->idx, x->path, n_layers);
    }
    return BT_OK;
}

/* Each target forward's input tokens: the output sequence for prefill and
 * decode steps; for a verify step the last accepted token and the drafts it
 * verified (rejected ones included, as the run fed them). */
static int build_inputs(replay_run *x)
{
    const bt_replay_cfg *cfg = x->cfg;
    int64_t total = 0;
    for (int i = 0; i < x->n_steps; i++) total += x->steps[i].n_pos > 0 ? x->steps[i].n_pos : 0;
    x->in_tok = malloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
    x->in_off = malloc((size_t)x->n_steps * sizeof(int64_t));
    if (!x->in_tok || !x->in_off) return bt_error(BT_ENOMEM, "out of memory");
    x->max_batch = x->ctx = 1;
    int tj = 0, n_vocab = x->m->cfg.n_vocab;
    int64_t off = 0;
    for (int i = 0; i < x->n_steps; i++) {
        const bt_trace_step_row *s = &x->steps[i];
        bool verify = !strcmp(s->kind, "verify");
        if (strcmp(s->kind, "prefill") && strcmp(s->kind, "decode") && !(x->spec && verify))
            return bt_error(BT_EUNSUPPORTED, "%s: step %d is a %s step; --reference replays prefill, decode and verify steps only", cfg->name, s->step, s->kind);
        int need = verify ? 1 : s->n_pos;
        if (s->n_pos < 1 || s->pos0 < 0 || s->pos0 + need > x->n_seq)
            return bt_error(BT_EFORMAT, "%s: step %d needs positions %d-%d but the token trail holds %d tokens",
                            cfg->name, s->step, s->pos0, s->pos0 + need - 1, x->n_seq);
        x->in_off[i] = off;
        memcpy(x->in_tok + off, x->seq + s->pos0, (size_t)need * sizeof(int32_t));
        if (verify) {
            const trail_list *tl = &x->tl;
            while (tj < tl->n && tl->v[tj].step < s->step) tj++;
            for (int d = 1; d < s->n_pos; d++, tj++) {
                if (tj >= tl->n || tl->v[tj].step != s->step || tl->v[tj].draft_pos != s->pos0 + d)
                    return bt_error(BT_EFORMAT, "%s: verify step %d covers positions %d-%d but spec_trail has no drafted token for position %d",
                                    cfg->name, s->step, s->pos0, s->pos0 + s->n_pos - 1, s->pos0 + d);
                x->in_tok[off + d] = tl->v[tj].draft_token;
            }
            x->res->verify_steps++;
        }
        /* Only inputs matter: an out-of-vocabulary id that ended the run is never fed. */
        for (int d = 0; d < s->n_pos; d++)
            if (x->in_tok[off + d] < 0 || x->in_tok[off + d] >= n_vocab)
                return bt_error(BT_EFORMAT, "%s: token %d at position %d (step %d) is outside the vocabulary (%d)", cfg->name,
                                x->in_tok[off + d], s->pos0 + d, s->step, n_vocab);
        off += s->n_pos;
        x->max_batch = BT_MAX(x->max_batch, s->n_pos);
        x->ctx = BT_MAX(x->ctx, s->pos0 + s->n_pos);
    }
    return BT_OK;
}

/* The reference engine (and profile B's), each with an eval callback that
 * taps exactly the trace's tensors. */
static int start_engines(replay_run *x)
{
    const bt_replay_cfg *cfg = x->cfg;
    int rc, n_layers = x->m->cfg.n_layers, n_tens = x->n_tens;
    int threads = (int)cfg->threads;
    if (!threads) {
        threads = x->meta.n_threads;
        int online = bt_pool_default_threads();
        if (threads <= 0 || threads > online) threads = online;
    }
    x->res->threads = threads;
    x->sc.ctx = x->ctx;
    x->sc.max_batch = x->max_batch;
    x->sc.threads = threads;
    x->sc.device = cfg->device;
    x->sc.numerics = cfg->numerics;
    if ((rc = bt_session_start(x->ses, &x->sc))) return rc;
    x->e = bt_session_engine(x->ses);
    snprintf(x->res->replay_backend, sizeof(x->res->replay_backend), "%s", bt_backend_name(bt_engine_backend(x->e)));
    if (cfg->against) {
        /* profile B: a second engine on the same weights, in lockstep */
        bt_engine_opts eo = { .ctx_len = x->ctx, .max_batch = x->max_batch, .n_threads = threads, .device = cfg->device };
        if ((rc = bt_engine_new_opts(x->m, &eo, &x->e2))) return rc;
        if ((rc = bt_engine_set_numerics(x->e2, cfg->against))) return rc;
    }
    replay *rp = &x->rp;
    rp->tens = x->tens; rp->n_tens = n_tens; rp->n_layers = n_layers;
    rp->slot = malloc((size_t)BT_OP_COUNT * (n_layers + 1) * sizeof(int));
    rp->ref = calloc((size_t)n_tens, sizeof(bt_tap_stats));
    rp->seen = calloc((size_t)n_tens, sizeof(bool));
    rp->cap_xs = n_tens * BT_MAX(x->m->cfg.n_expert, 1);
    rp->xs = calloc((size_t)rp->cap_xs, sizeof(bt_tap_stats));
    rp->xs_slot = calloc((size_t)rp->cap_xs, sizeof(int));
    if (!rp->slot || !rp->ref || !rp->seen || !rp->xs || !rp->xs_slot) return bt_error(BT_ENOMEM, "out of memory");
    for (int i = 0; i < BT_OP_COUNT * (n_layers + 1); i++) rp->slot[i] = -1;
    for (int i = 0; i < n_tens; i++) {
        int op = bt_replay_tensor_op(&x->tens[i], x->meta.foreign);
        if (op >= 0) *slot_at(rp, op, x->tens[i].layer) = i;
    }
    x->cb = (bt_eval_cb){ .ask = rp_ask, .observe = rp_observe, .user = rp };
    bt_engine_set_eval_cb(x->e, &x->cb);
    x->cb2 = (bt_eval_cb){ .ask = rp_ask, .observe = rp_observe, .user = &x->rp2 };
    if (x->e2) {
        x->rp2 = *rp;
        x->rp2.ref = calloc((size_t)n_tens, sizeof(bt_tap_stats));
        x->rp2.seen = calloc((size_t)n_tens, sizeof(bool));
        x->rp2.xs = calloc((size_t)rp->cap_xs, sizeof(bt_tap_stats));
        x->rp2.xs_slot = calloc((size_t)rp->cap_xs, sizeof(int));
        if (!x->rp2.ref || !x->rp2.seen || !x->rp2.xs || !x->rp2.xs_slot) return bt_error(BT_ENOMEM, "out of memory");
        bt_engine_set_eval_cb(x->e2, &x->cb2);
    }
    return BT_OK;
}

/* A hybrid engine's state before step s: saved at a verify; rolled back to
 * the last verify's start, the accepted positions recomputed untapped, when
 * s starts before where the state is (the decoder's rollback). */
static int hybrid_align(replay_run *x, bt_engine *e, int w, const bt_trace_step_row *s)
{
    size_t sn = bt_engine_state_size(e);
    if (!sn) return BT_OK;
    if (!x->vstate[w] && !(x->vstate[w] = malloc(sn * sizeof(float)))) return bt_error(BT_ENOMEM, "out of memory");
    int rc = BT_OK;
    if (s->pos0 > 0 && s->pos0 < x->next[w] && x->vpos[w] >= 0 && x->vpos[w] <= s->pos0) {
        rc = bt_engine_state_rewind(e, x->vstate[w], x->vpos[w], x->seq + x->vpos[w], s->pos0 - x->vpos[w]);
    }
    if (rc == BT_OK && !strcmp(s->kind, "verify")) {
        rc = bt_engine_state_save(e, 0, x->vstate[w], NULL);
        x->vpos[w] = rc == BT_OK ? s->pos0 : -1;
    }
    x->next[w] = s->pos0 + s->n_pos;
    return rc;
}

/* Step i's input through the reference (and B): the taps land in rp.ref. */
static int forward_on(replay_run *x, bt_engine *e, int w, replay *rp, int i)
{
    const bt_trace_step_row *s = &x->steps[i];
    int rc;
    memset(rp->seen, 0, (size_t)x->n_tens * sizeof(bool));
    rp->n_xs = 0;
    /* a verify computes the logits of every row, as the run did */
    if (x->spec) bt_engine_set_logits_all(e, !strcmp(s->kind, "verify"));
    if ((rc = hybrid_align(x, e, w, s))) return rc;
    int h = x->cached ? x->cached[i] : 0;
    if (h > 0) {
        /* the positions the traced request read from the prefix cache: into
         * the reference's KV cache untapped, so the taps compare like rows */
        bt_engine_hold_taps(e, true);
        rc = bt_engine_forward(e, x->in_tok + x->in_off[i], h, s->pos0);
        bt_engine_hold_taps(e, false);
        if (rc) return rc;
    }
    if ((rc = bt_engine_forward(e, x->in_tok + x->in_off[i] + h, s->n_pos - h, s->pos0 + h)) && rp->err[0])
        rc = bt_error(BT_EFORMAT, "%s: %s", x->cfg->name, rp->err);
    for (int k = 0; k < rp->n_xs && rc == BT_OK; k++) {   /* the experts' views, as the recorder merges them */
        int sl = rp->xs_slot[k];
        if (rp->seen[sl]) bt_tap_stats_merge(&rp->ref[sl], &rp->xs[k]);
        else { rp->ref[sl] = rp->xs[k]; rp->seen[sl] = true; }
    }
    return rc;
}

static int forward_step(replay_run *x, int i)
{
    int rc = forward_on(x, x->e, 0, &x->rp, i);
    if (rc == BT_OK && x->e2) rc = forward_on(x, x->e2, 1, &x->rp2, i);
    return rc;
}

/* Teacher-forced top-1: would the reference have picked the token the traced
 * run chose (llama.cpp's, the other device's)? And with a full logit row in
 * the trace (run --logits full), the largest difference from the reference's. */
static int argmax_row(const float *lg, int n)
{
    int best = 0;
    for (int v = 1; v < n; v++) if (lg[v] > lg[best]) best = v;
    return best;
}

static void compare_logits(replay_run *x, int i)
{
    const bt_trace_step_row *s = &x->steps[i];
    bt_replay_result *res = x->res;
    if (!(res->cross || x->cfg->device_tol)) return;
    int n_vocab = x->m->cfg.n_vocab;
    if (x->spec && !strcmp(s->kind, "verify")) {
        /* a verify's rows whose next token the run emitted: the accepted
         * drafts' and the one after them (the correction or the bonus); a
         * rejected draft ends them (the rows after it are not the run's) */
        const int32_t *in = x->in_tok + x->in_off[i];
        for (int r = 0; r < s->n_pos && s->pos0 + 1 + r < x->n_seq; r++) {
            res->top1_n++;
            res->top1_agree += argmax_row(bt_engine_logits_row(x->e, r), n_vocab) == x->seq[s->pos0 + 1 + r];
            if (r + 1 < s->n_pos && in[r + 1] != x->seq[s->pos0 + 1 + r]) break;
        }
        return;
    }
    if (s->pos0 + s->n_pos >= x->n_seq) return;
    const float *lg = bt_engine_logits(x->e);
    int best = 0;
    for (int v = 1; v < n_vocab; v++) if (lg[v] > lg[best]) best = v;
    res->top1_n++;
    res->top1_agree += best == x->seq[s->pos0 + s->n_pos];
    float *row = NULL;
    int nrow = 0;
    char why[32];
    if (x->cfg->device_tol && !strcmp(s->kind, "decode") &&
        bt_trace_logit_row_get(x->r, s->step, s->pos0 + s->n_pos - 1, &row, &nrow, why) == BT_OK && row && nrow == n_vocab) {
        for (int v = 0; v < nrow; v++) {
            double dlt = fabs((double)row[v] - (double)lg[v]);
            if (isfinite(dlt) && dlt > res->logits_max_abs) res->logits_max_abs = dlt;
        }
        res->logits_rows++;
    }
    free(row);
}

/* The trace's taps of step s against the reference's, slot by slot, into d. */
static void compare_taps(replay_run *x, const bt_trace_step_row *s, bt_replay_divergence *d)
{
    bt_replay_result *res = x->res;
    for (int j = 0; j < x->n_tr && j < x->n_tens; j++) {
        if (!x->rp.seen[j] || !x->tr[j].recorded) continue;
        char field[16];
        double tv = 0, rv = 0, rel;
        bool differ = stats_differ(&x->tr[j], &x->rp.ref[j], res->tol, field, &tv, &rv, &rel);
        if (rel > res->max_rel && isfinite(rel)) { res->max_rel = rel; res->max_rel_step = s->step; res->max_rel_slot = j; }
        if (res->cross && !res->found && d->slot < 0) {
            if (!differ && isfinite(rel) && rel > res->before_rel) res->before_rel = rel;
            if (rel > res->slot_rel[j]) res->slot_rel[j] = rel;
        }
        if (!differ) continue;
        if (d->slot < 0) { d->slot = j; snprintf(d->field, sizeof(d->field), "%s", field); d->tv = tv; d->rv = rv; }
        d->n_div++;
    }
}

/* Replay step i and compare it. *next: STEP_DONE (count it as progress),
 * STEP_UNTAPPED (the trace has no taps there: not counted), STEP_STOP (the
 * replay has what it looks for). */
enum { STEP_DONE, STEP_UNTAPPED, STEP_STOP };

static int replay_step(replay_run *x, int i, int *next)
{
    const bt_trace_step_row *s = &x->steps[i];
    bt_replay_result *res = x->res;
    int rc;
    *next = STEP_DONE;
    if ((rc = forward_step(x, i))) return rc;
    compare_logits(x, i);
    free(x->tr);
    x->tr = NULL;
    if ((rc = bt_trace_step_taps(x->r, s->step, &x->tr, &x->n_tr))) return rc;
    if (x->n_tr == 0) { *next = STEP_UNTAPPED; return BT_OK; }   /* a step without taps */
    res->steps_compared++;
    bt_replay_divergence d = { .step = s->step, .pos0 = s->pos0, .n_pos = s->n_pos, .slot = -1 };
    snprintf(d.kind, sizeof(d.kind), "%s", s->kind);
    if (x->e2) against_step(res->tol, x->rp.ref, x->rp.seen, x->rp2.ref, x->rp2.seen, x->n_tens, &d, res);
    else compare_taps(x, s, &d);
    if (d.slot >= 0) {
        if (!res->found) { res->found = true; res->first = d; }
        if (x->cfg->all) return BT_VEC_PUSH(res->all, res->n_all, x->all_cap, d);
        if (res->cross) return BT_OK;           /* cross-engine: go on for the top-1 agreement */
        if (!x->e2 || res->one_bad) *next = STEP_STOP;   /* against: also look for a one-sided non-finite */
    }
    return BT_OK;
}

static void replay_run_free(replay_run *x)
{
    bt_replay_result *res = x->res;
    free(x->steps); free(x->seq); free(x->tr);
    free(x->tl.v); free(x->in_tok); free(x->in_off); free(x->cached); free(x->vstate[0]); free(x->vstate[1]);
    free(x->rp.slot); free(x->rp.ref); free(x->rp.seen); free(x->rp.xs); free(x->rp.xs_slot);
    free(x->rp2.ref); free(x->rp2.seen); free(x->rp2.xs); free(x->rp2.xs_slot);
    if (res->found && res->cross && x->m) {
        /* the departing matmul's weight type, for the verdict's kernel guess */
        int op = bt_op_from_name(x->tens[res->first.slot].op), l = x->tens[res->first.slot].layer;
        const bt_weight *w = op == BT_OP_TOKEN_EMBD ? NULL : bt_op_weight(x->m, op, l);
        snprintf(res->wtype, sizeof(res->wtype), "%s", w && bt_dtype(w->type)->name ? bt_dtype(w->type)->name : "");
    }
    bt_engine_free(x->e2);
    bt_session_close(x->ses, NULL);
}

int bt_replay_run(bt_trace_reader *r, const bt_replay_cfg *cfg, bt_replay_result *res)
{
    memset(res, 0, sizeof(*res));
    replay_run x = { .r = r, .cfg = cfg, .res = res, .spec = bt_trace_has_spec(r), .vpos = { -1, -1 } };
    int rc;
    if (!(rc = load_trace(&x)) && !(rc = open_model(&x)) && !(rc = check_tensors(&x)) && !(rc = build_inputs(&x)))
        rc = start_engines(&x);
    for (int i = 0; !rc && i < x.n_steps; i++) {
        int next;
        if ((rc = replay_step(&x, i, &next)) || next == STEP_STOP) break;
        if (next == STEP_DONE && cfg->progress) cfg->progress(cfg->user, i + 1, x.n_steps);
    }
    replay_run_free(&x);
    return rc;
}

void bt_replay_result_clear(bt_replay_result *res)
{
    free(res->all);
    res->all = NULL;
    res->n_all = 0;
    free(res->slot_rel);
    res->slot_rel = NULL;
}
