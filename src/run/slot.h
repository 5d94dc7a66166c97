/* slot.h - one request through the native engine, for serve, probe --model
 * and ctxwalk --model: request body -> prompt (chat template) -> the
 * generation loop (gen/generate.h, run's own) -> text, stop strings
 * applied, optionally recorded into its own trace.
 *
 * A bt_gen is one slot: an engine (KV cache, activations) over a model and
 * tokenizer that several slots share (the weights are one read-only mmap).
 * One request at a time per slot; slots run in parallel.
 *
 * This is the per-request half of the "session" (one config -> model,
 * tokenizer, engines, trace, recorders) that run and bench are moving to;
 * bt_gen_request() is written to move there as it is. */
#ifndef BT_RUN_SLOT_H
#define BT_RUN_SLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "engine/sampler.h"
#include "model/model.h"
#include "gen/request.h"
#include "tokenizer/tokenizer.h"

typedef struct bt_gen_cfg {
    const bt_model *model;          /* shared, borrowed */
    const bt_tokenizer *tok;        /* shared, borrowed */
    const char *model_path;         /* for trace metadata */
    const char *model_sha256;       /* hex, for trace metadata ("" if unknown) */
    int ctx;                        /* context length of each slot */
    int threads;                    /* compute threads per slot */
    const char *chat_template;      /* NULL: detect from the model */
    const char *const *inject;      /* activation specs, parsed per request */
    int n_inject;
    bt_argmax_rule rule;
    const char *argv_json;          /* the server's argv as a JSON array (trace meta) */
    /* serve --engine llama.cpp: the slot's engine (one of
     * bt_llamacpp_engines_new's), owned by the bt_gen from bt_gen_new on,
     * also when it fails; NULL: bt_gen_new makes a native engine */
    struct bt_engine *engine;
    /* more trace meta, key and value pairs ending in NULL, written after the
     * standard keys (so they replace one: "backend"); NULL: none */
    const char *const *meta;
} bt_gen_cfg;

typedef struct bt_gen bt_gen;

#define BT_GEN_BATCH 512            /* positions per forward of a slot's engine */

int bt_gen_new(const bt_gen_cfg *cfg, bt_gen **out);
void bt_gen_free(bt_gen *g);

typedef struct bt_gen_opts {
    const char *trace_path;         /* record into this new trace (NULL: none) */
    const char *request_id;         /* trace meta */
    unsigned long long draw_seed;   /* injection p= draw */
    volatile int *cancel;           /* checked between steps (may be NULL) */
    /* Streamed text, whole characters, never a byte that could still turn
     * out to start a stop string. Nonzero return cancels (client gone). */
    int (*on_text)(void *user, const char *s, size_t n);
    void *user;
    /* serve's batched engine (run/batcher.h): the slot's engine is lane
     * `lane` of it; the request is announced to it and its trace gets the
     * request's KV provenance (kv_access). NULL: a slot of its own. */
    struct bt_batcher *batcher;
    int lane;
} bt_gen_opts;

/* An event the request's own detectors recorded (src/run/recorder.c:
 * nonfinite_logits, first_nonfinite, argmax_fallthrough, token_wall, ...),
 * with or without a trace. */
typedef struct bt_gen_event {
    int step, pos;
    char kind[32];
    char detail[256];
} bt_gen_event;
#define BT_GEN_MAX_EVENTS 16        /* events kept per request (all are counted) */

typedef struct bt_gen_result {
    char *text;                     /* malloc'd, stop string cut off */
    size_t text_len;
    int32_t *ids;                   /* generated ids (end-of-generation excluded) */
    int n_ids;
    int n_prompt;
    const char *finish;             /* "stop" | "length" | "invalid_token" | "cancelled" */
    bool injected;                  /* an injection spec was active for this request */
    bt_gen_event *events;           /* malloc'd: the first BT_GEN_MAX_EVENTS, in order */
    int n_events;                   /* kept */
    int n_events_total;             /* recorded */
    int n_nonfinite;                /* of those, events saying a non-finite value was computed */
    int first_nonfinite;            /* index into events of the first of them, -1 if none */
    double ms;
} bt_gen_result;

/* Run one request (its detectors always run: res->events). Errors: BT_EINVAL / BT_ERANGE for a request this model
 * cannot serve (no messages template, prompt longer than the context,
 * max_tokens past it) with a message for the client; BT_EIO etc. for a
 * trace that cannot be written; engine errors. */
int bt_gen_request(bt_gen *g, const bt_request *req, const bt_gen_opts *o, bt_gen_result *res);
void bt_gen_result_clear(bt_gen_result *r);
/* Tokens of a request's prompt (for max_tokens checks before queueing). */
int bt_gen_prompt_tokens(const bt_gen_cfg *cfg, const bt_request *req, int *n);

#endif
