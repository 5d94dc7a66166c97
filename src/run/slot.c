/* slot.c - one request through the native engine (see slot.h): the
 * generation loop of `run` (gen/generate.c) on a slot's engine, with the
 * request's own injector, recorder (always: its detectors' events go into
 * the answer) and optionally its own trace. What differs from run: the
 * engine belongs to a slot and is reused, injection specs are parsed per
 * request (their run state and the p= draw are per request), and text goes
 * to a callback. */
#include "run/slot.h"
#include "prod/classify.h"
#include "gen/generate.h"
#include "engine/engine.h"
#include "tap/inject.h"
#include "run/recorder.h"
#include "run/batcher.h"
#include "run/run_meta.h"
#include "trace/trace.h"
#include "base/util.h"
#include "base/text.h"
#include "kernels/cpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bt_gen {
    bt_gen_cfg cfg;
    bt_engine *e;
};

int bt_gen_new(const bt_gen_cfg *cfg, bt_gen **out)
{
    bt_gen *g = calloc(1, sizeof *g);
    if (!g) { bt_engine_free(cfg->engine); return bt_error(BT_ENOMEM, "out of memory"); }
    g->cfg = *cfg;
    g->cfg.engine = NULL;
    if (cfg->engine) { g->e = cfg->engine; *out = g; return BT_OK; }
    bt_kernels_init();
    /* activations for BT_GEN_BATCH positions: a longer prompt is prefilled
     * in chunks of it by the decoder (src/decode.c) that run shares */
    int batch = BT_MIN(cfg->ctx, BT_GEN_BATCH);
    int rc = bt_engine_new(cfg->model, cfg->ctx, batch, cfg->threads, &g->e);
    if (rc) { free(g); return rc; }
    *out = g;
    return BT_OK;
}

void bt_gen_free(bt_gen *g)
{
    if (!g) return;
    bt_engine_free(g->e);
    free(g);
}

void bt_gen_result_clear(bt_gen_result *r)
{
    free(r->text);
    free(r->ids);
    free(r->events);
    memset(r, 0, sizeof *r);
    r->first_nonfinite = -1;
}

/* The recorder's events into the result (the answer's bangtrace object,
 * serve's --trace flagged decision, probe's classes). */
static void on_event(void *user, int step, int pos, const char *kind, const char *detail)
{
    bt_gen_result *res = user;
    res->n_events_total++;
    bool nf = bt_event_is_nonfinite(kind);
    if (nf) res->n_nonfinite++;
    if (res->n_events >= BT_GEN_MAX_EVENTS) return;
    if (!res->events && !(res->events = calloc(BT_GEN_MAX_EVENTS, sizeof *res->events))) return;
    bt_gen_event *e = &res->events[res->n_events];
    e->step = step;
    e->pos = pos;
    snprintf(e->kind, sizeof e->kind, "%s", kind ? kind : "");
    snprintf(e->detail, sizeof e->detail, "%s", detail ? detail : "");
    if (nf && res->first_nonfinite < 0) res->first_nonfinite = res->n_events;
    res->n_events++;
}

/* The request's prompt ids: run's own rendering and tokenizing
 * (bt_request_prompt_ids), after the checks whose wording is for an API
 * client rather than a command line. */
static int prompt_ids(const bt_gen_cfg *cfg, const bt_request *req, int32_t **ids, size_t *n)
{
    const bt_model *m = cfg->model;
    if (!req->prompt) {
        if (cfg->chat_template) {
            if (bt_chat_tmpl_from_name(cfg->chat_template) < 0)
                return bt_error(BT_EINVAL, "unknown chat template '%s'", cfg->chat_template);
        } else if (!m->chat_template || bt_chat_tmpl_detect(m->chat_template, strlen(m->chat_template)) == BT_CHAT_NONE) {
            return bt_error(BT_EINVAL, "this model has no chat template bangtrace renders: use /v1/completions with a prompt");
        }
    }
    return bt_request_prompt_ids(req, NULL, cfg->chat_template, m, cfg->tok, ids, n);
}

int bt_gen_prompt_tokens(const bt_gen_cfg *cfg, const bt_request *req, int *n)
{
    int32_t *ids = NULL;
    size_t nn = 0;
    int rc = prompt_ids(cfg, req, &ids, &nn);
    free(ids);
    *n = (int)nn;
    return rc;
}

static int write_meta(bt_trace *t, const bt_gen_cfg *c, const bt_request *req, const bt_sampler_cfg *sc,
                      const bt_injector *inj, const char *request_id)
{
    bt_run_meta_src src = { .slot = true, .argv_json = c->argv_json ? c->argv_json : "[\"bangtrace\",\"serve\"]",
                            .request_id = request_id, .model = c->model, .tok = c->tok, .model_path = c->model_path,
                            .model_sha256 = c->model_sha256, .threads = c->threads, .sc = sc, .inj = inj,
                            .request_json = req->json, .prompt_text = req->prompt, .taps = BT_TAPS_ALL,
                            .layer_lo = -1, .layer_hi = -1, .extra = c->meta };
    return bt_run_meta_write(t, &src);
}

/* The loop's poll and text callbacks are the request's options'. */
static int poll_cancel(void *user)
{
    const bt_gen_opts *o = user;
    return o->cancel && *o->cancel;
}

/* Text goes to JSON: a byte no UTF-8 sequence holds (a byte token's) is
 * U+FFFD there, as the final text (whole characters come here, so piece by
 * piece is the same as the whole). */
static int text_cb(void *user, const char *s, size_t n)
{
    const bt_gen_opts *o = user;
    size_t m;
    char *u = bt_text_utf8_repair(s, n, &m);
    if (!u) return o->on_text(o->user, s, n);
    int rc = o->on_text(o->user, u, m);
    free(u);
    return rc;
}

int bt_gen_request(bt_gen *g, const bt_request *req, const bt_gen_opts *o, bt_gen_result *res)
{
    const bt_gen_cfg *c = &g->cfg;
    const bt_model *m = c->model;
    memset(res, 0, sizeof *res);
    res->first_nonfinite = -1;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    bt_injector *inj = NULL;
    bt_trace *trace = NULL;
    bt_recorder *rec = NULL;
    bt_sampler *smp = NULL;
    bt_generate_out go = { 0 };
    const char *finish = "length";
    bool laned = false;
    double t0 = bt_now();
    int rc = prompt_ids(c, req, &prompt, &n_prompt);
    if (rc) goto out;
    int ctx = bt_engine_ctx_len(g->e);
    if ((int)n_prompt >= ctx) {
        rc = bt_error(BT_ERANGE, "the prompt has %zu tokens but the context is %d", n_prompt, ctx);
        goto out;
    }
    long n_max = req->has_max_tokens ? req->max_tokens : 128;
    if (n_prompt + n_max > (size_t)ctx) {
        rc = bt_error(BT_ERANGE, "max_tokens %ld + %zu prompt tokens exceed the context of %d", n_max, n_prompt, ctx);
        goto out;
    }
    bt_sampler_cfg sc = { .temperature = req->has_temperature ? req->temperature : 0, .top_k = req->has_top_k ? req->top_k : 0,
                          .top_p = req->has_top_p ? req->top_p : 1, .seed = req->has_seed ? req->seed : 42, .rule = c->rule };
    if ((rc = bt_sampler_new(&sc, m->cfg.n_vocab, &smp))) goto out;
    if (c->n_inject) {
        if (!(inj = bt_injector_new())) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
        for (int i = 0; i < c->n_inject; i++) if ((rc = bt_injector_add(inj, c->inject[i]))) goto out;
        bt_injector_set_draw(inj, o->draw_seed);
        res->injected = bt_injector_active(inj);
    }
    if (o->batcher) {
        if ((rc = bt_batcher_lane_begin(o->batcher, o->lane, o->request_id, o->trace_path, o->draw_seed))) goto out;
        laned = true;
        if (bt_batcher_lane_faulted(o->batcher, o->lane)) res->injected = true;
    }
    if (o->trace_path) {
        if ((rc = bt_trace_create(o->trace_path, &trace))) goto out;
        if ((rc = write_meta(trace, c, req, &sc, inj, o->request_id))) goto out;
    }
    /* always a recorder: without a trace it still runs the detectors
     * (non-finite logits, walls, loops) whose events the answer carries */
    bt_recorder_cfg rcfg = { .trace = trace, .inj = inj, .model = m, .tok = c->tok, .taps = trace ? BT_TAPS_ALL : BT_TAPS_NONE,
                             .layer_lo = -1, .layer_hi = -1, .topk = 20, .rule = sc.rule, .model_role = "target",
                             .on_event = on_event, .event_user = res };
    if ((rc = bt_recorder_new(&rcfg, g->e, &rec))) goto out;
    if ((rc = bt_recorder_prompt(rec, prompt, (int)n_prompt))) goto out;
    bt_gen_observer obs;
    bt_recorder_observer(rec, &obs);
    bt_generate_cfg gc = { .dec = { .target = g->e, .target_obs = &obs, .smp = smp, .greedy = sc.temperature <= 0,
                                    .rule = sc.rule, .tok = c->tok, .inj = inj },
                           .model = m, .tok = c->tok, .prompt = prompt, .n_prompt = (int)n_prompt, .max_tokens = n_max,
                           .stop = req->stop, .n_stop = req->n_stop, .on_text = o->on_text ? text_cb : NULL, .poll = poll_cancel,
                           .user = (void *)o };
    res->n_prompt = (int)n_prompt;
    rc = bt_generate(&gc, &go);
    res->text = go.text;
    res->text_len = go.text_len;
    if (go.text) {
        size_t m;
        char *u = bt_text_utf8_repair(go.text, go.text_len, &m);
        if (u) { free(res->text); res->text = u; res->text_len = m; }
    }
    res->ids = go.ids;
    res->n_ids = go.n_ids;
    finish = go.finish;
    if (rc) goto out;
    if (trace) {
        if ((rc = bt_run_meta_write_generated(trace, res->n_ids))) goto out;
    }
    if (rec && (rc = bt_recorder_finish(rec, finish))) goto out;
out:
    if (rc == BT_OK && rec && bt_recorder_status(rec)) rc = bt_error(bt_recorder_status(rec), "trace write failed");
    if (trace && laned) {
        int kc = bt_batcher_lane_trace(o->batcher, o->lane, trace);
        if (rc == BT_OK) rc = kc;
    }
    if (laned) bt_batcher_lane_end(o->batcher, o->lane, rc == BT_OK ? finish : "error", (int)n_prompt);
    if (trace) {
        const char *st = rc == BT_OK ? (!strcmp(finish, "cancelled") ? BT_TRACE_STATUS_INTERRUPTED : BT_TRACE_STATUS_OK)
                         : bt_trace_failed(trace) ? BT_TRACE_STATUS_IO_ERROR : BT_TRACE_STATUS_ERROR;
        int tc = bt_trace_close(trace, st);
        if (rc == BT_OK) rc = tc;
    }
    res->finish = finish;
    res->ms = (bt_now() - t0) * 1e3;
    bt_recorder_free(rec);
    bt_injector_free(inj);
    bt_sampler_free(smp);
    free(prompt);
    return rc;
}
