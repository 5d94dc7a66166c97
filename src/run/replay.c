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
    if (s < 0) return true;
    if (t->width != r->tens[s].width) {
        snprintf(r->err, sizeof(r->err), "%s is %d wide in the trace but %d in this model: not the model the trace was recorded with",
                 r->tens[s].name, r->tens[s].width, t->width);
        return false;
    }
    /* final once the forward returns, which is when ref is read */
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

int bt_replay_run(bt_trace_reader *r, const bt_replay_cfg *cfg, bt_replay_result *res)
{
    trail_list tl = { 0 };
    int32_t *in_tok = NULL;     /* every replayed step's input tokens, back to back */
    int64_t *in_off = NULL;
    bool spec = bt_trace_has_spec(r);
    bt_trace_step_row *steps = NULL;
    bt_trace_tap_row *tr = NULL;
    int32_t *seq = NULL;
    int n_steps = 0, n_seq = 0, n_prompt = 0, n_tr = 0, rc;
    bt_session *ses = NULL;
    const bt_model *m = NULL;
    bt_engine *e = NULL, *e2 = NULL;
    replay rp = { 0 }, rp2 = { 0 };
    const bt_trace_tensor_row *tens = NULL;
    int n_tens = 0;

    memset(res, 0, sizeof(*res));
    bt_trace_tensors(r, "target", &tens, &n_tens);
    res->tens = tens;
    res->n_tens = n_tens;

    bt_run_meta meta;
    bt_run_meta_read(r, &meta);
    const char *meta_path = meta.model_path, *meta_sha = meta.model_sha256;
    const char *path = cfg->model ? cfg->model : meta_path;
    if (!path) { rc = bt_error(BT_EINVAL, "%s: the trace does not name its model (meta model_path); pass --model", cfg->name); goto out; }
    snprintf(res->model_path, sizeof(res->model_path), "%s", path);
    if (n_tens == 0) { rc = bt_error(BT_EINVAL, "%s: the trace has no tap statistics to compare (recorded with --taps none)", cfg->name); goto out; }
    bt_trace_summary sum;
    if ((rc = bt_trace_summary_get(r, &sum))) goto out;
    steps = malloc((size_t)(sum.n_steps > 0 ? sum.n_steps : 1) * sizeof(*steps));
    if (!steps) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    if ((rc = bt_trace_steps(r, 0, (int)sum.n_steps, steps, &n_steps))) goto out;
    int k = 0;
    for (int i = 0; i < n_steps; i++) if (!strcmp(steps[i].model, "target")) steps[k++] = steps[i];
    res->draft_steps_skipped = n_steps - k;
    n_steps = k;
    if (spec && (rc = bt_trace_spec_trail_each(r, INT32_MIN, INT32_MAX, trail_cb, &tl)) < 0) goto out;
    if ((rc = bt_analyze_sequence(r, &seq, &n_seq, &n_prompt))) goto out;
    for (int i = 0; i < n_seq; i++)
        if (seq[i] < 0) {   /* export --redact replaced the ids with -1: nothing to replay */
            rc = bt_error(BT_EINVAL, "%s: the trace's token ids were removed by export --redact; --reference needs the original trace", cfg->name);
            goto out;
        }
    res->steps_total = n_steps;
    if (n_steps == 0) { rc = bt_error(BT_EINVAL, "%s: the trace has no steps to replay", cfg->name); goto out; }

    if (access(path, R_OK) != 0) {
        rc = bt_error(BT_EIO, "%s: cannot read the trace's model %s (pass --model)", cfg->name, path);
        goto out;
    }
    /* The replay feeds ids only: a llama2.c tokenizer that moved is no reason to fail. */
    bt_session_cfg sc = { .model = path, .tokenizer = cfg->tokenizer, .need_weights = true };
    if ((rc = bt_session_open(&sc, &ses))) goto out;
    m = bt_session_model(ses);
    if (meta_sha && *meta_sha) {
        char hex[65];
        bt_sha256_hex(m->file_data, m->file_size, hex);
        if (strcmp(hex, meta_sha)) {
            rc = bt_error(BT_EINVAL, "%s has SHA-256 %.16s..., but the trace was recorded with %.16s...: not the same model (pass --model)",
                          path, hex, meta_sha);
            goto out;
        }
        res->sha_checked = true;
    } else bt_warn("bangtrace: %s: %s records no model_sha256; cannot verify that %s is the traced model", cfg->who ? cfg->who : "replay", cfg->name, path);

    int n_layers = m->cfg.n_layers, max_batch = 1, ctx = 1;
    const char *backend = meta.backend;
    snprintf(res->trace_backend, sizeof(res->trace_backend), "%s", backend ? backend : "");
    res->tol = cfg->tol;
    if (cfg->device_tol) {
        const bt_config *mc = &m->cfg;
        res->tol_bits = bt_tap_tol_mant_bits(meta.numerics);
        res->tol_k = BT_MAX(BT_MAX((long)mc->dim, (long)mc->hidden_dim), (long)mc->n_heads * mc->head_dim);
        res->tol_layers = n_layers;
        res->tol = bt_tap_tol_devices(res->tol_bits, res->tol_k, n_layers);
        res->tol_derived = true;
    }
    res->cross = meta.llama_cpp;
    if (res->cross && !(res->slot_rel = calloc((size_t)n_tens, sizeof(double)))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < n_tens; i++) {
        int op = bt_op_from_name(tens[i].op);
        if (res->cross && op < 0 && tens[i].idx == i) continue;   /* llama.cpp's own tensor (kq-3): nothing to replay */
        if (tens[i].idx != i || op < 0 || tens[i].layer >= n_layers || (bt_op_is_layer_op(op) != (tens[i].layer >= 0))) {
            rc = bt_error(BT_EFORMAT, "%s: tensor '%s' (slot %d) does not exist in %s (%d layers)", cfg->name, tens[i].name,
                          tens[i].idx, path, n_layers);
            goto out;
        }
    }
    /* Each target forward's input tokens: the output sequence for prefill
     * and decode steps; for a verify step the last accepted token and the
     * drafts it verified (rejected ones included, as the run fed them). */
    int64_t total = 0;
    for (int i = 0; i < n_steps; i++) total += steps[i].n_pos > 0 ? steps[i].n_pos : 0;
    in_tok = malloc((size_t)(total > 0 ? total : 1) * sizeof(int32_t));
    in_off = malloc((size_t)n_steps * sizeof(int64_t));
    if (!in_tok || !in_off) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    int tj = 0;
    int64_t off = 0;
    for (int i = 0; i < n_steps; i++) {
        const bt_trace_step_row *s = &steps[i];
        bool verify = !strcmp(s->kind, "verify");
        if (strcmp(s->kind, "prefill") && strcmp(s->kind, "decode") && !(spec && verify)) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: step %d is a %s step; --reference replays prefill, decode and verify steps only", cfg->name, s->step, s->kind);
            goto out;
        }
        int need = verify ? 1 : s->n_pos;
        if (s->n_pos < 1 || s->pos0 < 0 || s->pos0 + need > n_seq) {
            rc = bt_error(BT_EFORMAT, "%s: step %d needs positions %d-%d but the token trail holds %d tokens",
                          cfg->name, s->step, s->pos0, s->pos0 + need - 1, n_seq);
            goto out;
        }
        in_off[i] = off;
        memcpy(in_tok + off, seq + s->pos0, (size_t)need * sizeof(int32_t));
        if (verify) {
            while (tj < tl.n && tl.v[tj].step < s->step) tj++;
            for (int d = 1; d < s->n_pos; d++, tj++) {
                if (tj >= tl.n || tl.v[tj].step != s->step || tl.v[tj].draft_pos != s->pos0 + d) {
                    rc = bt_error(BT_EFORMAT, "%s: verify step %d covers positions %d-%d but spec_trail has no drafted token for position %d",
                                  cfg->name, s->step, s->pos0, s->pos0 + s->n_pos - 1, s->pos0 + d);
                    goto out;
                }
                in_tok[off + d] = tl.v[tj].draft_token;
            }
            res->verify_steps++;
        }
        /* Only inputs matter: an out-of-vocabulary id that ended the run is never fed. */
        for (int d = 0; d < s->n_pos; d++)
            if (in_tok[off + d] < 0 || in_tok[off + d] >= m->cfg.n_vocab) {
                rc = bt_error(BT_EFORMAT, "%s: token %d at position %d (step %d) is outside the vocabulary (%d)", cfg->name,
                              in_tok[off + d], s->pos0 + d, s->step, m->cfg.n_vocab);
                goto out;
            }
        off += s->n_pos;
        max_batch = BT_MAX(max_batch, s->n_pos);
        ctx = BT_MAX(ctx, s->pos0 + s->n_pos);
    }
    int threads = (int)cfg->threads;
    if (!threads) {
        threads = meta.n_threads;
        int online = bt_pool_default_threads();
        if (threads <= 0 || threads > online) threads = online;
    }
    res->threads = threads;
    sc.ctx = ctx;
    sc.max_batch = max_batch;
    sc.threads = threads;
    sc.device = cfg->device;
    sc.numerics = cfg->numerics;
    if ((rc = bt_session_start(ses, &sc))) goto out;
    e = bt_session_engine(ses);
    snprintf(res->replay_backend, sizeof(res->replay_backend), "%s", bt_backend_name(bt_engine_backend(e)));
    if (cfg->against) {
        /* profile B: a second engine on the same weights, in lockstep */
        bt_engine_opts eo = { .ctx_len = ctx, .max_batch = max_batch, .n_threads = threads, .device = cfg->device };
        if ((rc = bt_engine_new_opts(m, &eo, &e2))) goto out;
        if ((rc = bt_engine_set_numerics(e2, cfg->against))) goto out;
    }

    rp.tens = tens; rp.n_tens = n_tens; rp.n_layers = n_layers;
    rp.slot = malloc((size_t)BT_OP_COUNT * (n_layers + 1) * sizeof(int));
    rp.ref = calloc((size_t)n_tens, sizeof(bt_tap_stats));
    rp.seen = calloc((size_t)n_tens, sizeof(bool));
    if (!rp.slot || !rp.ref || !rp.seen) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < BT_OP_COUNT * (n_layers + 1); i++) rp.slot[i] = -1;
    for (int i = 0; i < n_tens; i++)
        if (bt_op_from_name(tens[i].op) >= 0) *slot_at(&rp, bt_op_from_name(tens[i].op), tens[i].layer) = i;
    bt_eval_cb cb = { .ask = rp_ask, .observe = rp_observe, .user = &rp };
    bt_engine_set_eval_cb(e, &cb);
    bt_eval_cb cb2 = { .ask = rp_ask, .observe = rp_observe, .user = &rp2 };
    if (e2) {
        rp2 = rp;
        rp2.ref = calloc((size_t)n_tens, sizeof(bt_tap_stats));
        rp2.seen = calloc((size_t)n_tens, sizeof(bool));
        if (!rp2.ref || !rp2.seen) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
        bt_engine_set_eval_cb(e2, &cb2);
    }

    size_t all_cap = 0;
    for (int i = 0; i < n_steps; i++) {
        const bt_trace_step_row *s = &steps[i];
        memset(rp.seen, 0, (size_t)n_tens * sizeof(bool));
        /* a verify computes the logits of every row, as the run did */
        if (spec) bt_engine_set_logits_all(e, !strcmp(s->kind, "verify"));
        if ((rc = bt_engine_forward(e, in_tok + in_off[i], s->n_pos, s->pos0))) {
            if (rp.err[0]) rc = bt_error(BT_EFORMAT, "%s: %s", cfg->name, rp.err);
            goto out;
        }
        if ((res->cross || cfg->device_tol) && s->pos0 + s->n_pos < n_seq) {
            /* teacher-forced top-1: would the reference have picked the
             * token the traced run chose (llama.cpp's, the other device's)? */
            const float *lg = bt_engine_logits(e);
            int best = 0;
            for (int v = 1; v < m->cfg.n_vocab; v++) if (lg[v] > lg[best]) best = v;
            res->top1_n++;
            res->top1_agree += best == seq[s->pos0 + s->n_pos];
            /* a full logit row in the trace (run --logits full): the
             * largest absolute difference from the reference's */
            float *row = NULL;
            int nrow = 0;
            char why[32];
            if (cfg->device_tol && !strcmp(s->kind, "decode") &&
                bt_trace_logit_row_get(r, s->step, s->pos0 + s->n_pos - 1, &row, &nrow, why) == BT_OK && row &&
                nrow == m->cfg.n_vocab) {
                for (int v = 0; v < nrow; v++) {
                    double dlt = fabs((double)row[v] - (double)lg[v]);
                    if (isfinite(dlt) && dlt > res->logits_max_abs) res->logits_max_abs = dlt;
                }
                res->logits_rows++;
            }
            free(row);
        }
        if (e2) {
            memset(rp2.seen, 0, (size_t)n_tens * sizeof(bool));
            if (spec) bt_engine_set_logits_all(e2, !strcmp(s->kind, "verify"));
            if ((rc = bt_engine_forward(e2, in_tok + in_off[i], s->n_pos, s->pos0))) {
                if (rp2.err[0]) rc = bt_error(BT_EFORMAT, "%s: %s", cfg->name, rp2.err);
                goto out;
            }
        }
        free(tr);
        tr = NULL;
        if ((rc = bt_trace_step_taps(r, s->step, &tr, &n_tr))) goto out;
        if (n_tr == 0) continue;            /* a step without taps */
        res->steps_compared++;
        bt_replay_divergence d = { .step = s->step, .pos0 = s->pos0, .n_pos = s->n_pos, .slot = -1 };
        snprintf(d.kind, sizeof(d.kind), "%s", s->kind);
        if (e2) against_step(res->tol, rp.ref, rp.seen, rp2.ref, rp2.seen, n_tens, &d, res);
        for (int j = 0; !e2 && j < n_tr && j < n_tens; j++) {
            if (!rp.seen[j] || !tr[j].recorded) continue;
            char field[16];
            double tv = 0, rv = 0, rel;
            bool differ = stats_differ(&tr[j], &rp.ref[j], res->tol, field, &tv, &rv, &rel);
            if (rel > res->max_rel && isfinite(rel)) { res->max_rel = rel; res->max_rel_step = s->step; res->max_rel_slot = j; }
            if (res->cross && !res->found && d.slot < 0) {
                if (!differ && isfinite(rel) && rel > res->before_rel) res->before_rel = rel;
                if (rel > res->slot_rel[j]) res->slot_rel[j] = rel;
            }
            if (!differ) continue;
            if (d.slot < 0) { d.slot = j; snprintf(d.field, sizeof(d.field), "%s", field); d.tv = tv; d.rv = rv; }
            d.n_div++;
        }
        if (d.slot >= 0) {
            if (!res->found) { res->found = true; res->first = d; }
            if (cfg->all) {
                if ((rc = BT_VEC_PUSH(res->all, res->n_all, all_cap, d))) goto out;
            } else if (res->cross) {
                /* cross-engine: go on for the top-1 agreement */
            } else if (!e2 || res->one_bad) break;   /* against: also look for a one-sided non-finite */
        }
        if (cfg->progress) cfg->progress(cfg->user, i + 1, n_steps);
    }
    rc = BT_OK;
out:
    free(steps); free(seq); free(tr);
    free(tl.v); free(in_tok); free(in_off);
    free(rp.slot); free(rp.ref); free(rp.seen);
    free(rp2.ref); free(rp2.seen);
    if (res->found && res->cross && m) {
        /* the departing matmul's weight type, for the verdict's kernel guess */
        int op = bt_op_from_name(tens[res->first.slot].op), l = tens[res->first.slot].layer;
        const bt_weight *w = op == BT_OP_TOKEN_EMBD ? NULL : bt_op_weight(m, op, l);
        snprintf(res->wtype, sizeof(res->wtype), "%s", w && bt_dtype(w->type)->name ? bt_dtype(w->type)->name : "");
    }
    bt_engine_free(e2);
    bt_session_close(ses, NULL);
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
