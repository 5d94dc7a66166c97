/* target.h - where probe, canary and ctxwalk send a request: an
 * OpenAI-compatible server (libcurl) or the native engine in-process
 * (bt_gen slots). Binary-only: libcurl stays out of the libraries.
 *
 * bt_target_ask() is thread-safe for distinct slots (0 .. n_slots-1). */
#ifndef BT_PROD_TARGET_H
#define BT_PROD_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "prod/classify.h"

typedef struct bt_target bt_target;

typedef struct bt_target_cfg {
    const char *url;                /* base URL (http://host:port or .../v1) */
    const char *model;              /* or a model file (native engine) */
    const char *tokenizer;          /* llama2.c tokenizer for --model */
    const char *const *inject;      /* --inject specs for the native engine */
    int n_inject;
    int slots;                      /* parallel requests */
    int threads;                    /* compute threads per native slot */
    int ctx;                        /* native context (0: the model's, capped) */
    double timeout_s;               /* per HTTP request */
} bt_target_cfg;

typedef struct bt_reply {
    int http_status;                /* 0: transport error / timeout */
    char *text;                     /* malloc'd */
    size_t text_len;
    int32_t *ids;                   /* when the server reports them */
    int n_ids;
    int n_vocab;
    char finish[32];
    char request_id[96];            /* x-request-id of our server, if any */
    char error[512];                /* transport error or the server's error message */
    int n_nonfinite;                /* non-finite events the server's detectors reported (the
                                     * "bangtrace" object's events; the native engine's own) */
    char nonfinite[300];            /* the first one, "kind at step S: detail" */
    double ms;
} bt_reply;

int bt_target_open(const bt_target_cfg *cfg, bt_target **out);
void bt_target_close(bt_target *t);
/* Send one request body (a /v1/completions or /v1/chat/completions JSON;
 * messages pick the chat endpoint). An HTTP failure is a reply, not an
 * error: only a bad body or an allocation failure return an error. */
int bt_target_ask(bt_target *t, int slot, const char *body, size_t len, bt_reply *r);
void bt_reply_clear(bt_reply *r);
/* Native engine only (ctxwalk sizes its prompts exactly): the prompt tokens
 * of a request body, and the context length of each slot. BT_EINVAL for a
 * URL target. */
int bt_target_prompt_tokens(bt_target *t, const char *body, size_t len, int *n);
int bt_target_ctx(const bt_target *t);
/* Native engine only: the model's trained context (inspect's ctx_len),
 * which bt_target_ctx caps at BT_ENGINE_CTX_CAP unless cfg.ctx says. */
int bt_target_trained_ctx(const bt_target *t);
/* What a server sent, as bt_target_ask reads it (exported for
 * tests/fuzz/fuzz_reply.c): one header line (x-request-id is kept), and
 * the body, with r->http_status already set: a completion's text, finish
 * reason and (our server's) ids, or the error message. */
void bt_reply_header(bt_reply *r, const char *line, size_t n);
void bt_reply_parse(bt_reply *r, const char *body, size_t len);
/* The reply as classifier input (borrows r and stop). */
bt_answer bt_reply_answer(const bt_reply *r, char *const *stop, int n_stop);

#endif
