/* decode.c - prefill, plain and speculative decoding, reported step by step
 * to the observers (gen/observer.h).
 *
 * Invariants between calls (n_ctx = prompt + emitted tokens):
 *   - the target has valid KV entries for positions [0, n_ctx - 1): the last
 *     emitted token is the input of the next target forward;
 *   - the draft engine has valid entries for [0, dpos), dpos <= n_ctx; its
 *     next forward first catches up on ctx[dpos .. n_ctx).
 * Rolling back after a rejection is only moving these bounds: later
 * forwards overwrite the rejected positions. A hybrid target's recurrent
 * state cannot be overwritten that way: the verify saves it first, and a
 * rejection restores it and recomputes the accepted positions, untapped,
 * inside the verify step (its taps are the verify's; the next step's state
 * taps show the restored state). --inject norollback skips that (the
 * rejected drafts stay in the state: the bug class).
 *
 * The MTP drafter (BT_DRAFT_MTP) is the model's nextn block, run as
 * llama.cpp's draft-mtp runs it: its cache position p holds the pair
 * (h_{p-1}, x_p), h the target's output-normed hidden row (zeros before
 * position 0). Its cache is valid for [0, mpos); the target's rows for the
 * positions [mh_pos0, mh_pos0 + mh_n) wait in mh until a draft catches the
 * block up on positions mpos..n_ctx-1, whose last row drafts the next
 * token; each further draft feeds the block its own last hidden row (its
 * head-normed output) with the token it drafted. Those positions are
 * overwritten by the next catch-up, so a rejection needs no rollback. */
#include "decode.h"
#include "tap/detect.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct bt_decoder {
    bt_decoder_cfg c;
    int n_vocab, max_ctx;
    int32_t *ctx;                /* (max_ctx) prompt + emitted */
    int n_ctx, n_prompt;
    int dpos;
    int step;                    /* the next global step number */
    bool started;
    /* the current draft */
    int32_t *draft;              /* (k) */
    int *draft_step;             /* (k) -1 for n-gram */
    bool *draft_finite;          /* (k) */
    bool *draft_det;             /* (k) deterministic proposal: q is one-hot */
    float *q;                    /* (k, n_vocab) draft distributions */
    float *p;                    /* (n_vocab) target distribution scratch */
    int32_t *vin;                /* (k + 1) verify input */
    float *state;                /* a hybrid target's recurrent state before a verify */
    size_t state_n;
    float *dstate;               /* a hybrid drafter's state after its last catch-up, at dstate_pos */
    int dstate_pos, dnext;       /* (-1: none); the position the drafter's state expects */
    /* BT_DRAFT_MTP (see the top) */
    int dim, mpos, mh_pos0, mh_n, mh_cap;
    float *mh;                   /* (mh_cap, dim) the target's hidden rows awaiting the block */
    float *mchain;               /* (dim) the block's last hidden row, for the next draft */
    /* acceptance-rate window */
    double win[BT_SPEC_WINDOW];
    int win_n;
    bool was_high, collapse_reported;
    bt_decoder_stats st;
};

void bt_decoder_free(bt_decoder *d)
{
    if (!d) return;
    free(d->ctx); free(d->draft); free(d->draft_step); free(d->draft_finite); free(d->draft_det);
    free(d->q); free(d->p); free(d->vin); free(d->state); free(d->dstate);
    free(d->mh); free(d->mchain);
    free(d);
}

int bt_decoder_new(const bt_decoder_cfg *cfg, const int32_t *prompt, int n_prompt, int max_tokens, bt_decoder **out)
{
    *out = NULL;
    if (n_prompt <= 0) return bt_error(BT_EINVAL, "the decoder needs at least one prompt token");
    bt_decoder *d = calloc(1, sizeof(*d));
    if (!d) return bt_error(BT_ENOMEM, "out of memory");
    d->c = *cfg;
    if (d->c.drafter == BT_DRAFT_NONE) d->c.k = 0;
    if (d->c.k < 0) d->c.k = 0;
    int k = d->c.k;
    d->n_vocab = bt_engine_model(cfg->target)->cfg.n_vocab;
    d->max_ctx = BT_MIN(bt_engine_ctx_len(cfg->target), n_prompt + BT_MAX(max_tokens, 0) + k + 2);
    d->ctx = malloc((size_t)(d->max_ctx + k + 2) * sizeof(int32_t));
    d->draft = malloc((size_t)(k + 1) * sizeof(int32_t));
    d->draft_step = malloc((size_t)(k + 1) * sizeof(int));
    d->draft_finite = malloc((size_t)(k + 1) * sizeof(bool));
    d->draft_det = malloc((size_t)(k + 1) * sizeof(bool));
    d->q = malloc((size_t)(k + 1) * d->n_vocab * sizeof(float));
    d->p = malloc((size_t)d->n_vocab * sizeof(float));
    d->vin = malloc((size_t)(k + 2) * sizeof(int32_t));
    if (!d->ctx || !d->draft || !d->draft_step || !d->draft_finite || !d->draft_det || !d->q || !d->p || !d->vin) {
        bt_decoder_free(d);
        return bt_error(BT_ENOMEM, "out of memory for the decoder");
    }
    memcpy(d->ctx, prompt, (size_t)n_prompt * sizeof(int32_t));
    d->n_ctx = d->n_prompt = n_prompt;
    if (d->c.drafter == BT_DRAFT_MTP) {
        d->dim = bt_engine_model(cfg->target)->cfg.dim;
        d->mh_cap = n_prompt + k + 2;
        d->mh = calloc((size_t)d->mh_cap * d->dim, sizeof(float));   /* row 0: h_{-1} = 0 */
        d->mchain = malloc((size_t)d->dim * sizeof(float));
        d->mh_pos0 = -1;
        d->mh_n = 1;
        if (!d->mh || !d->mchain) { bt_decoder_free(d); return bt_error(BT_ENOMEM, "out of memory for the MTP drafter"); }
    }
    *out = d;
    return BT_OK;
}

const bt_decoder_stats *bt_decoder_stats_get(const bt_decoder *d) { return &d->st; }

static bool row_finite(const float *x, int n)
{
    for (int i = 0; i < n; i++) if (!isfinite(x[i])) return false;
    return true;
}

/* log softmax(row)[id] at temperature 1; NAN when undefined. */
static float logprob_of(const float *x, int n, int32_t id)
{
    if (id < 0 || id >= n) return NAN;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) { if (isnan(x[i]) || x[i] == INFINITY) return NAN; if (x[i] > mx) mx = x[i]; }
    if (mx == -INFINITY) return NAN;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return (float)(((double)x[id] - mx) - log(s));
}

/* The observer's callbacks; a NULL observer or callback does nothing. */
static int obs_snapshot(const bt_gen_observer *o, const float *row, int row_pos, int32_t chosen,
                        const bt_softmax_sums *sums)
{
    return o && o->snapshot ? o->snapshot(o->user, row, row_pos, chosen, sums) : BT_OK;
}

static int obs_token(const bt_gen_observer *o, int pos, int32_t id, const char *role, float logprob)
{
    return o && o->token ? o->token(o->user, pos, id, role, logprob) : BT_OK;
}

static int obs_spec_step(const bt_gen_observer *o, int step, const char *drafter, int k, int accepted,
                         int32_t bonus, const char *bonus_kind)
{
    return o && o->spec_step ? o->spec_step(o->user, step, drafter, k, accepted, bonus, bonus_kind) : BT_OK;
}

static int obs_spec_trail(const bt_gen_observer *o, const bt_spec_row *row)
{
    return o && o->spec_trail ? o->spec_trail(o->user, row) : BT_OK;
}

static int obs_event(const bt_gen_observer *o, int step, int pos, const char *kind, const char *detail)
{
    return o && o->event ? o->event(o->user, step, pos, kind, detail) : BT_OK;
}

/* One observed forward: number the step, open it, run, inject. */
static int forward(bt_decoder *d, bt_engine *e, const bt_gen_observer *rec, const char *kind,
                   const int32_t *toks, int n, int pos, double *ms)
{
    bt_engine_set_step(e, d->step);
    int rc = rec && rec->step_begin ? rec->step_begin(rec->user, kind, pos, n) : BT_OK;
    if (rc) return rc;
    double t0 = bt_now();
    rc = bt_engine_forward(e, toks, n, pos);
    *ms = (bt_now() - t0) * 1e3;
    d->step++;
    d->st.steps++;
    if (rc) return rc;
    if (e == d->c.target) {
        d->st.target_forwards++;
        d->st.target_positions += n;
        if (d->c.inj) bt_injector_after_forward(d->c.inj, e);
    } else {
        d->st.draft_forwards++;
    }
    return BT_OK;
}

/* BT_DRAFT_MTP: keep rows [0, n) of the target's last forward, the hidden
 * states of positions pos.. (which continue the waiting rows). */
static int mtp_keep(bt_decoder *d, int pos, int n)
{
    if (d->c.drafter != BT_DRAFT_MTP || n <= 0) return BT_OK;
    if (pos != d->mh_pos0 + d->mh_n)
        return bt_error(BT_EINVAL, "the MTP drafter lost track of the hidden rows (position %d, expected %d)",
                        pos, d->mh_pos0 + d->mh_n);
    if (d->mh_n + n > d->mh_cap) {
        int cap = BT_MAX(d->mh_n + n, 2 * d->mh_cap);
        float *mh = realloc(d->mh, (size_t)cap * d->dim * sizeof(float));
        if (!mh) return bt_error(BT_ENOMEM, "out of memory for the MTP drafter's hidden rows");
        d->mh = mh;
        d->mh_cap = cap;
    }
    int rc = bt_engine_hidden_rows(d->c.target, 0, n, d->mh + (size_t)d->mh_n * d->dim);
    if (rc == BT_OK) d->mh_n += n;
    return rc;
}

static int end_step(const bt_gen_observer *rec, double ms) { return rec && rec->step_end ? rec->step_end(rec->user, ms) : BT_OK; }

/* A target forward of the last token (or the prompt) and one sampled token. */
static int plain_step(bt_decoder *d, int32_t *out, float *lps, int *n)
{
    const bt_gen_observer *rec = d->c.target_obs;
    bool prefill = !d->started;
    const int32_t *in = prefill ? d->ctx : &d->ctx[d->n_ctx - 1];
    int n_in = prefill ? d->n_ctx : 1, pos = prefill ? 0 : d->n_ctx - 1;
    double ms;
    int rc;
    bt_engine_set_logits_all(d->c.target, false);
    double t0 = bt_now();
    /* A prompt longer than the engine's batch is prefilled in chunks of the
     * batch, each its own recorded prefill step (as bench fills its depth);
     * the kernels are batch-invariant, so the last chunk's logits are the
     * ones one forward of the whole prompt computes. */
    int chunk = prefill ? BT_MAX(bt_engine_max_batch(d->c.target), 1) : n_in;
    while (n_in > chunk) {
        if ((rc = forward(d, d->c.target, rec, "prefill", in, chunk, pos, &ms))) return rc;
        if ((rc = mtp_keep(d, pos, chunk))) return rc;
        if ((rc = end_step(rec, ms))) return rc;
        in += chunk; pos += chunk; n_in -= chunk;
    }
    rc = forward(d, d->c.target, rec, prefill ? "prefill" : "decode", in, n_in, pos, &ms);
    if (rc == BT_OK) rc = mtp_keep(d, pos, n_in);
    if (rc) return rc;
    if (prefill) d->st.prefill_s = bt_now() - t0;
    d->started = true;
    const float *row = bt_engine_logits(d->c.target);
    float lp;
    int32_t id = bt_sampler_sample(d->c.smp, row, d->n_vocab, &lp);
    if (rec) {
        if ((rc = obs_snapshot(rec, row, d->n_ctx - 1, id, bt_sampler_sums(d->c.smp)))) return rc;
        if ((rc = obs_token(rec, d->n_ctx, id, "gen", lp))) return rc;
    }
    if ((rc = end_step(rec, ms))) return rc;
    d->ctx[d->n_ctx++] = id;
    out[0] = id;
    if (lps) lps[0] = lp;
    *n = 1;
    d->st.emitted++;
    return BT_OK;
}

static bool is_eog(const bt_decoder *d, int32_t id)
{
    return !d->c.ignore_eos && d->c.tok && id >= 0 && id < d->n_vocab && bt_tokenizer_is_eog(d->c.tok, id);
}

/* Prompt lookup: the tokens that followed the latest earlier occurrence of
 * the last N tokens. */
static int draft_ngram(bt_decoder *d, int k)
{
    int N = d->c.ngram;
    if (N <= 0 || d->n_ctx < N + 1) return 0;
    const int32_t *tail = d->ctx + d->n_ctx - N;
    for (int j = d->n_ctx - N - 1; j >= 0; j--) {
        if (memcmp(d->ctx + j, tail, (size_t)N * sizeof(int32_t))) continue;
        int m = BT_MIN(k, d->n_ctx - (j + N));
        for (int i = 0; i < m; i++) {
            d->draft[i] = d->ctx[j + N + i];
            d->draft_step[i] = -1;
            d->draft_finite[i] = true;
            d->draft_det[i] = true;
        }
        return m;
    }
    return 0;
}

/* A hybrid drafter whose state ran past dpos (its rejected drafts): back to
 * the state after its last catch-up, the tokens since recomputed untapped. */
static int draft_rewind(bt_decoder *d)
{
    bt_engine *e = d->c.draft;
    if (!d->dstate) {
        size_t n = bt_engine_state_size(e);
        if (!n) return BT_OK;
        if (!(d->dstate = malloc(n * sizeof(float)))) return bt_error(BT_ENOMEM, "out of memory for the drafter's state");
        d->dstate_pos = -1;
        return BT_OK;
    }
    if (d->dnext <= d->dpos || d->dstate_pos < 0 || d->dstate_pos > d->dpos) return BT_OK;
    return bt_engine_state_rewind(e, d->dstate, d->dstate_pos, d->ctx + d->dstate_pos, d->dpos - d->dstate_pos);
}

/* Draft token j from the drafter's last logit row (it drafts position
 * pos): greedy by the argmax rule, else drawn from its distribution q;
 * reported as the draft step's snapshot and token, and the step ends. */
static int draft_pick(bt_decoder *d, int j, int pos, double ms, int32_t *tok_out)
{
    const bt_gen_observer *rec = d->c.draft_obs;
    const float *row = bt_engine_logits(d->c.draft);
    float *q = d->q + (size_t)j * d->n_vocab;
    int rc;
    bool det = d->c.greedy || !bt_sampler_probs(d->c.smp, row, d->n_vocab, q);
    int32_t tok = det ? bt_argmax(&d->c.rule, row, d->n_vocab) : bt_sampler_draw(d->c.smp, q, d->n_vocab);
    d->draft[j] = tok;
    d->draft_step[j] = d->step - 1;
    d->draft_finite[j] = row_finite(row, d->n_vocab);
    d->draft_det[j] = det;
    if (rec) {
        if ((rc = obs_snapshot(rec, row, pos - 1, tok, NULL))) return rc;
        if ((rc = obs_token(rec, pos, tok, "draft", det ? NAN : logf(q[tok])))) return rc;
    }
    *tok_out = tok;
    return end_step(rec, ms);
}

/* Draft k tokens with the draft engine (catching it up first). */
static int draft_model(bt_decoder *d, int k, int *nd)
{
    const bt_gen_observer *rec = d->c.draft_obs;
    *nd = 0;
    for (int j = 0; j < k; j++) {
        const int32_t *in;
        int n_in, pos;
        if (j == 0) { in = &d->ctx[d->dpos]; n_in = d->n_ctx - d->dpos; pos = d->dpos; }
        else { in = &d->draft[j - 1]; n_in = 1; pos = d->n_ctx + j - 1; }
        double ms;
        int rc = j == 0 ? draft_rewind(d) : BT_OK;
        if (rc == BT_OK) rc = forward(d, d->c.draft, rec, "draft", in, n_in, pos, &ms);
        if (rc) return rc;
        d->dpos = pos + n_in;
        d->dnext = d->dpos;
        if (j == 0 && d->dstate && (rc = bt_engine_state_save(d->c.draft, 0, d->dstate, NULL)) == BT_OK) d->dstate_pos = d->dpos;
        if (rc) return rc;
        int32_t tok;
        if ((rc = draft_pick(d, j, pos + n_in, ms, &tok))) return rc;
        /* an id outside the vocabulary cannot be verified: the draft ends */
        if (tok < 0 || tok >= d->n_vocab) break;
        (*nd)++;
    }
    return BT_OK;
}

/* Draft k tokens with the MTP block: catch it up on positions
 * mpos..n_ctx-1 (in forwards of its batch), the last row drafting the
 * token at n_ctx; then one forward a token, each fed the block's own
 * hidden row. */
static int draft_mtp(bt_decoder *d, int k, int *nd)
{
    const bt_gen_observer *rec = d->c.draft_obs;
    bt_engine *e = d->c.draft;
    int chunk = BT_MAX(bt_engine_max_batch(e), 1), rc;
    double ms = 0;
    *nd = 0;
    if (d->mh_pos0 != d->mpos - 1 || d->mh_n != d->n_ctx - d->mpos)
        return bt_error(BT_EINVAL, "the MTP drafter's hidden rows (%d from position %d) do not cover positions %d..%d",
                        d->mh_n, d->mh_pos0, d->mpos - 1, d->n_ctx - 2);
    for (int p = d->mpos; p < d->n_ctx; ) {
        int n = BT_MIN(chunk, d->n_ctx - p);
        if ((rc = bt_engine_set_mtp_hidden(e, d->mh + (size_t)(p - d->mpos) * d->dim))) return rc;
        if ((rc = forward(d, e, rec, "draft", d->ctx + p, n, p, &ms))) return rc;
        p += n;
        if (p < d->n_ctx && (rc = end_step(rec, ms))) return rc;
        if (p == d->n_ctx && (rc = bt_engine_hidden_rows(e, n - 1, 1, d->mchain))) return rc;
    }
    /* the block's cache is now the real pairs up to n_ctx - 1; the next
     * hidden row it waits for is the target's at n_ctx - 1 */
    d->mpos = d->n_ctx;
    d->mh_pos0 = d->n_ctx - 1;
    d->mh_n = 0;
    for (int j = 0; j < k; j++) {
        int pos = d->n_ctx + j - 1;
        if (j > 0) {
            if ((rc = bt_engine_set_mtp_hidden(e, d->mchain))) return rc;
            if ((rc = forward(d, e, rec, "draft", &d->draft[j - 1], 1, pos, &ms))) return rc;
            if ((rc = bt_engine_hidden_rows(e, 0, 1, d->mchain))) return rc;
        }
        int32_t tok;
        if ((rc = draft_pick(d, j, pos + 1, ms, &tok))) return rc;
        if (tok < 0 || tok >= d->n_vocab) break;
        (*nd)++;
    }
    return BT_OK;
}

static int record_trail(bt_decoder *d, int step, int i, int pos, int32_t target_tok, double target_prob,
                        int accepted, const char *reason)
{
    if (!d->c.target_obs) return BT_OK;
    double qd = d->draft_det[i] ? 1.0 : d->q[(size_t)i * d->n_vocab + d->draft[i]];
    bt_spec_row r = { .step = step, .draft_idx = i, .draft_pos = pos, .draft_step = d->draft_step[i],
                      .draft_token = d->draft[i], .draft_prob = qd, .draft_finite = d->draft_finite[i],
                      .target_token = target_tok, .target_prob = target_prob, .accepted = accepted,
                      .reason = reason };
    return obs_spec_trail(d->c.target_obs, &r);
}

static int note_acceptance(bt_decoder *d, int step, int pos, double rate)
{
    memmove(d->win, d->win + 1, (BT_SPEC_WINDOW - 1) * sizeof(double));
    d->win[BT_SPEC_WINDOW - 1] = rate;
    if (d->win_n < BT_SPEC_WINDOW) d->win_n++;
    if (d->win_n < BT_SPEC_WINDOW || d->collapse_reported) return BT_OK;
    double avg = 0;
    for (int i = 0; i < BT_SPEC_WINDOW; i++) avg += d->win[i];
    avg /= BT_SPEC_WINDOW;
    if (avg >= BT_ACCEPT_COLLAPSE_HIGH) d->was_high = true;
    if (d->was_high && avg < BT_ACCEPT_COLLAPSE_LOW && d->c.target_obs) {
        d->collapse_reported = true;
        char detail[200];
        snprintf(detail, sizeof(detail), "step %d: acceptance over the last %d verify steps fell to %.2f after having been >= 0.6",
                 step, BT_SPEC_WINDOW, avg);
        return obs_event(d->c.target_obs, step, pos, "accept_collapse", detail);
    }
    return BT_OK;
}

/* A rejection at a hybrid target: the state back to the verify's start,
 * then positions base..base+keep-1 again (their KV rows come out the same),
 * so the state holds exactly the accepted tokens; the logits of the
 * verify's rows stay the decoder's (set_logits_all restored after). */
static int roll_back(bt_decoder *d, int step, int base, int keep, int nd)
{
    bt_engine *e = d->c.target;
    const bt_gen_observer *rec = d->c.target_obs;
    char detail[240];
    if (d->c.inj && bt_injector_norollback(d->c.inj, step)) {
        /* the fault: the state keeps every verified row, as if accepted */
        int rc = bt_engine_state_save(e, 0, d->state, NULL);
        if (rc == BT_OK) rc = bt_engine_state_load(e, 0, d->state, base + keep);
        snprintf(detail, sizeof detail, "step %d: --inject norollback: the recurrent state was not restored; it holds the "
                 "rejected drafts at positions %d..%d", step, base + keep, base + nd);
        d->st.rollbacks_skipped++;
        return rc ? rc : rec ? obs_event(rec, step, base + keep, "norollback", detail) : BT_OK;
    }
    /* untapped: the observer saw the verify's rows already */
    bt_engine_set_step(e, step);
    bt_engine_set_logits_all(e, false);
    int rc = bt_engine_state_rewind(e, d->state, base, d->vin, keep);
    bt_engine_set_logits_all(e, true);
    if (rc) return rc;
    d->st.rollbacks++;
    return BT_OK;
}

int bt_decoder_next(bt_decoder *d, int32_t *out, float *lps, int *n)
{
    *n = 0;
    if (!d->started || d->c.drafter == BT_DRAFT_NONE) return plain_step(d, out, lps, n);
    int k = BT_MIN(d->c.k, bt_engine_ctx_len(d->c.target) - d->n_ctx);
    int nd = 0, rc;
    if (k > 0) {
        if (d->c.drafter == BT_DRAFT_NGRAM) nd = draft_ngram(d, k);
        else if (d->c.drafter == BT_DRAFT_MTP) { if ((rc = draft_mtp(d, k, &nd))) return rc; }
        else if ((rc = draft_model(d, k, &nd))) return rc;
    }
    if (nd == 0) return plain_step(d, out, lps, n);

    /* Verify: the target over [last token, d_0 .. d_{nd-1}] in one forward. */
    const bt_gen_observer *rec = d->c.target_obs;
    int base = d->n_ctx - 1;                 /* position of the last emitted token */
    d->vin[0] = d->ctx[base];
    memcpy(d->vin + 1, d->draft, (size_t)nd * sizeof(int32_t));
    double ms;
    bt_engine_set_logits_all(d->c.target, true);
    if (!d->state_n && (d->state_n = bt_engine_state_size(d->c.target)) &&
        !(d->state = malloc(d->state_n * sizeof(float))))
        return bt_error(BT_ENOMEM, "out of memory for the recurrent state (%zu floats)", d->state_n);
    if (d->state_n && (rc = bt_engine_state_save(d->c.target, 0, d->state, NULL))) return rc;
    if ((rc = forward(d, d->c.target, rec, "verify", d->vin, nd + 1, base, &ms))) return rc;
    if ((rc = mtp_keep(d, base, nd + 1))) return rc;   /* trimmed to the emitted below */
    int step = d->step - 1;
    int a = 0;
    bool stopped = false, rejected = false;
    int32_t fix = -1;
    const char *fix_kind = "none";
    for (int i = 0; i < nd; i++) {
        const float *row = bt_engine_logits_row(d->c.target, i);
        int32_t di = d->draft[i], ti;
        double pd;
        bool accept;
        bool sampled = !d->c.greedy && bt_sampler_probs(d->c.smp, row, d->n_vocab, d->p);
        const char *reason;
        if (!sampled) {
            ti = bt_argmax(&d->c.rule, row, d->n_vocab);
            pd = exp(logprob_of(row, d->n_vocab, di));
            accept = ti == di;
            reason = accept ? "match" : "mismatch";
        } else {
            pd = d->p[di];
            double qd = d->draft_det[i] ? 1.0 : d->q[(size_t)i * d->n_vocab + di];
            accept = bt_sampler_uniform(d->c.smp) * qd < pd;
            reason = accept ? "accept p/q" : "reject p/q";
            ti = di;
            if (!accept) {
                /* residual max(0, p - q), renormalised by the draw */
                if (d->draft_det[i]) d->p[di] = 0;
                else {
                    const float *q = d->q + (size_t)i * d->n_vocab;
                    for (int v = 0; v < d->n_vocab; v++) d->p[v] = d->p[v] > q[v] ? d->p[v] - q[v] : 0;
                }
                ti = bt_sampler_draw(d->c.smp, d->p, d->n_vocab);
                if (ti < 0) { bt_sampler_probs(d->c.smp, row, d->n_vocab, d->p); ti = bt_sampler_draw(d->c.smp, d->p, d->n_vocab); }
            }
        }
        if ((rc = record_trail(d, step, i, base + 1 + i, ti, pd, accept, reason))) return rc;
        if (rec && (rc = obs_snapshot(rec, row, base + i, accept ? di : ti, NULL))) return rc;
        if (accept) {
            out[(*n)++] = di;
            a++;
            if (is_eog(d, di)) { stopped = true; break; }
        } else {
            fix = ti;
            fix_kind = "correction";
            out[(*n)++] = ti;
            rejected = true;
            break;
        }
    }
    int last = a + (rejected ? 1 : 0);      /* drafts consumed by the decision */
    for (int i = last; i < nd; i++)
        if ((rc = record_trail(d, step, i, base + 1 + i, -1, NAN, 0, stopped ? "after_stop" : "after_reject"))) return rc;
    if (!stopped && !rejected) {
        /* all accepted: the bonus token from the last row */
        const float *row = bt_engine_logits_row(d->c.target, nd);
        float lp;
        fix = bt_sampler_sample(d->c.smp, row, d->n_vocab, &lp);
        fix_kind = "bonus";
        out[(*n)++] = fix;
        if (rec && (rc = obs_snapshot(rec, row, base + nd, fix, bt_sampler_sums(d->c.smp)))) return rc;
    }
    if (stopped && nd - a > 0 && rec) {
        char detail[240];
        snprintf(detail, sizeof(detail), "step %d: the drafter proposed %d token(s) after the accepted end-of-generation "
                 "token at position %d; none reached the output", step, nd - a, base + a);
        if ((rc = obs_event(rec, step, base + a, "post_stop_draft", detail))) return rc;
    }
    for (int i = 0; i < *n; i++) {
        const float *row = bt_engine_logits_row(d->c.target, i);
        float lp = logprob_of(row, d->n_vocab, out[i]);
        if (lps) lps[i] = lp;
        /* out[0..a) are accepted drafts; out[a], when present, is the
         * target's correction or bonus */
        if (rec && (rc = obs_token(rec, base + 1 + i, out[i], i == a ? "bonus" : "gen", lp))) return rc;
    }
    if (d->c.drafter == BT_DRAFT_MTP) d->mh_n = *n;   /* the rows of the positions that stay */
    /* the logit rows are read: the state may be rolled back now */
    if (rejected && d->state_n && (rc = roll_back(d, step, base, a + 1, nd))) return rc;
    if (rec && (rc = obs_spec_step(rec, step, d->c.drafter_name, nd, a, stopped ? -1 : fix, fix_kind))) return rc;
    if ((rc = note_acceptance(d, step, base, (double)a / nd))) return rc;
    if ((rc = end_step(rec, ms))) return rc;
    d->st.verify_steps++;
    d->st.drafted += nd;
    d->st.accepted += a;
    d->st.emitted += *n;
    memcpy(d->ctx + d->n_ctx, out, (size_t)*n * sizeof(int32_t));
    int old = d->n_ctx;
    d->n_ctx += *n;
    if (d->dpos > old + a) d->dpos = old + a;
    return BT_OK;
}
