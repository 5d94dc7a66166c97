/* observer.h - what the generation loop and the decoder report, and to whom.
 *
 * The engine reports its ops through its eval callback; the decoder and the
 * generation loop report their steps the same way, through a table of
 * callbacks: a step opens (its forward runs, the engine's callback taps
 * it), the rows it sampled from, the tokens of the trail, a speculative
 * verify's rows, detector-like events of the decoder's own, and the step's
 * close. src/run/recorder.c implements it into a trace (bt_recorder_observer);
 * gen/ itself never sees a trace or a recorder.
 *
 * Every callback may be NULL (nothing to do). A nonzero return is an error
 * status (BT_E*, message set) that stops the decoder at once. `user` is the
 * observer's own: one observer per request, so that several requests (a
 * batched server's) can run side by side with nothing shared. */
#ifndef BT_GEN_OBSERVER_H
#define BT_GEN_OBSERVER_H

#include <stdint.h>
#include "base/records.h"

typedef struct bt_gen_observer {
    void *user;
    /* A forward opens: kind prefill | decode | draft | verify, over
     * positions pos0 .. pos0 + n_pos - 1. */
    int (*step_begin)(void *user, const char *kind, int pos0, int n_pos);
    /* The logit row predicting position row_pos + 1, and the id taken
     * there; sums: the row's softmax sums when the sampler took them
     * (bt_sampler_sums), else NULL. */
    int (*snapshot)(void *user, const float *row, int row_pos, int32_t chosen, const bt_softmax_sums *sums);
    /* One token of the trail: role prompt | gen | draft | bonus (ids outside
     * the vocabulary are allowed); logprob NAN when unknown. */
    int (*token)(void *user, int pos, int32_t id, const char *role, float logprob);
    /* A speculative verify step: k drafted, `accepted` of them taken, and the
     * target's own token after them (bonus_kind bonus | correction | none). */
    int (*spec_step)(void *user, int step, const char *drafter, int k, int accepted,
                     int32_t bonus_token, const char *bonus_kind);
    /* One drafted token's fate (bt_spec_row, base/records.h). */
    int (*spec_trail)(void *user, const bt_spec_row *row);
    /* An event of the decoder's (post_stop_draft, accept_collapse). */
    int (*event)(void *user, int step, int pos, const char *kind, const char *detail);
    /* The step closes after ms of forward. */
    int (*step_end)(void *user, double ms);
} bt_gen_observer;

#endif
