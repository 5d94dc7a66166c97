/* generate.h - the generation loop: prompt ids -> decoder -> generated ids
 * and text, with end-of-generation, stop strings, the context bound and the
 * leading-space rule after BOS applied, text streamed in whole characters.
 *
 * The one loop of `run`, of serve / probe --model / ctxwalk --model (through
 * the per-request slot of run/slot.h) and of whatever drives several
 * requests at once (a batched server): all of a request's state is in its
 * bt_generation, nothing is global, and every step goes to the observers of
 * cfg.dec (gen/observer.h), so the loop knows no trace.
 *
 * Either bt_generate() (the whole request), or bt_generation_new(), then
 * bt_generation_step() until bt_generation_done(), bt_generation_take(),
 * bt_generation_free() (one step of each request in turn). */
#ifndef BT_GEN_GENERATE_H
#define BT_GEN_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gen/decode.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct bt_generate_cfg {
    bt_decoder_cfg dec;             /* engines, sampler, injector, drafter, observers */
    const bt_model *model;          /* n_vocab and the vocabulary's add_space_prefix */
    const bt_tokenizer *tok;
    const int32_t *prompt;          /* borrowed until the generation is freed */
    int n_prompt;                   /* >= 1 */
    long max_tokens;                /* tokens to generate (the caller fits it in the context) */
    bool ignore_eos;                /* end-of-generation ids are text like any other */
    char *const *stop;              /* stop strings (borrowed), cut off the text */
    int n_stop;
    /* Streamed text: whole characters, never a byte that could still turn
     * out to start a stop string; the rest once done. Nonzero return
     * cancels (client gone). May be NULL. */
    int (*on_text)(void *user, const char *s, size_t n);
    /* Asked before each step: nonzero stops the loop there (finish
     * "cancelled", out.stopped = the value: run's signal). May be NULL. */
    int (*poll)(void *user);
    void *user;
} bt_generate_cfg;

typedef struct bt_generate_out {
    int32_t *ids;                   /* malloc'd: generated ids (end-of-generation excluded;
                                     * an id outside the vocabulary, last) */
    int n_ids;
    char *text;                     /* malloc'd, NUL-terminated, stop string cut off */
    size_t text_len;
    size_t streamed;                /* bytes of text given to on_text */
    const char *finish;             /* "stop" | "length" | "invalid_token" | "cancelled" */
    int stopped;                    /* poll's value that stopped the loop, else 0 */
    bt_decoder_stats stats;         /* the decoder's (prefill_s: the prompt's time) */
} bt_generate_out;

typedef struct bt_generation bt_generation;

/* The decoder over cfg's prompt (cfg is copied; what it points to is
 * borrowed). */
int bt_generation_new(const bt_generate_cfg *cfg, bt_generation **out);
/* One decoder step (1..k+1 tokens) and their text; a no-op once done.
 * Errors are the decoder's (engine, observer). */
int bt_generation_step(bt_generation *g);
bool bt_generation_done(const bt_generation *g);
/* The results so far (valid until the next step or free). */
const bt_generate_out *bt_generation_out(const bt_generation *g);
/* Move the results into *out (the caller clears it with bt_generate_out_clear). */
void bt_generation_take(bt_generation *g, bt_generate_out *out);
void bt_generation_free(bt_generation *g);
void bt_generate_out_clear(bt_generate_out *o);

/* The whole request. On an error *out holds what was generated before it. */
int bt_generate(const bt_generate_cfg *cfg, bt_generate_out *out);

#endif
