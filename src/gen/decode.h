/* decode.h - the generation loop's engine side: prefill, plain decoding and
 * speculative decoding (a draft model, the target's own first layers, its
 * MTP (nextn) block, or n-gram prompt lookup), every step reported to an
 * observer (gen/observer.h).
 *
 * bt_decoder_next() emits the next 1..k+1 tokens. Greedy speculative
 * decoding accepts a drafted token while it equals the target's argmax under
 * the run's argmax rule, so its output is identical to plain decoding (the
 * kernels are batch-invariant: a row's result does not depend on how many
 * rows a forward computes). With temperature > 0 it is standard speculative
 * rejection sampling: accept with min(1, p/q), on rejection resample from
 * max(0, p - q) renormalised, a bonus from p when all are accepted; a
 * deterministic drafter (greedy draft, n-gram) has q = one-hot. Tokens after
 * an accepted end-of-generation token are never emitted (post_stop_draft). */
#ifndef BT_DECODE_H
#define BT_DECODE_H

#include <stdbool.h>
#include <stdint.h>
#include "engine/engine.h"
#include "engine/sampler.h"
#include "tap/inject.h"
#include "gen/observer.h"
#include "tokenizer/tokenizer.h"

enum bt_drafter { BT_DRAFT_NONE = 0, BT_DRAFT_MODEL, BT_DRAFT_SELF, BT_DRAFT_NGRAM, BT_DRAFT_MTP };

typedef struct bt_decoder_cfg {
    bt_engine *target;
    const bt_gen_observer *target_obs; /* the target's steps; may be NULL */
    bt_sampler *smp;
    bool greedy;                 /* temperature 0 */
    bt_argmax_rule rule;
    const bt_tokenizer *tok;     /* may be NULL (bench) */
    bool ignore_eos;
    const bt_injector *inj;      /* may be NULL */
    /* speculation */
    int drafter;                 /* bt_drafter */
    int k;                       /* tokens drafted per verify */
    int ngram;                   /* n-gram size for BT_DRAFT_NGRAM */
    const char *drafter_name;    /* "model", "self:N", "ngram:N", "mtp" */
    bt_engine *draft;            /* BT_DRAFT_MODEL / BT_DRAFT_SELF; BT_DRAFT_MTP: an MTP
                                  * engine (bt_engine_opts.mtp) of the target's model */
    const bt_gen_observer *draft_obs;  /* the drafter's steps; may be NULL */
} bt_decoder_cfg;

typedef struct bt_decoder_stats {
    int steps;                   /* forwards of both engines */
    int target_forwards, target_positions;
    int draft_forwards;
    int verify_steps, drafted, accepted;
    int emitted;
    int rollbacks;               /* a hybrid target's state restored after a rejection */
    int rollbacks_skipped;       /* --inject norollback */
    double prefill_s;            /* wall time of the target prefill */
} bt_decoder_stats;

typedef struct bt_decoder bt_decoder;

/* max_tokens bounds the context the decoder will use (prompt + output). */
int bt_decoder_new(const bt_decoder_cfg *cfg, const int32_t *prompt, int n_prompt, int max_tokens, bt_decoder **out);
void bt_decoder_free(bt_decoder *d);
/* Emit the next tokens into out[0..*n) (capacity k + 1, logprobs may be
 * NULL). An id outside the vocabulary (the triton rule on a non-finite row)
 * is emitted as is, last. Returns BT_OK or the engine/trace error. */
int bt_decoder_next(bt_decoder *d, int32_t *out, float *logprobs, int *n);
const bt_decoder_stats *bt_decoder_stats_get(const bt_decoder *d);

#endif
