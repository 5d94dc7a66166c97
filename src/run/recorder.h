/* recorder.h - the engine's eval callback for `run`: injection, tap
 * statistics, logit snapshots, the token trail and detector events, written
 * to a trace (or, without a trace, only injection and detection).
 *
 * Per step the caller does: step_begin -> bt_engine_forward (the callback
 * injects and taps) -> sample -> step_sampled -> step_end (commit). The
 * decoder (gen/decode.c) does it through bt_recorder_observer(). */
#ifndef BT_RECORDER_H
#define BT_RECORDER_H

#include <stdbool.h>
#include <stdint.h>
#include "engine/engine.h"
#include "engine/sampler.h"
#include "gen/observer.h"
#include "tap/inject.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"

enum bt_taps_mode { BT_TAPS_ALL = 0, BT_TAPS_LAYERS, BT_TAPS_LOGITS, BT_TAPS_NONE };
/* "all" | "layers" | "logits" | "none"; -1 if unknown. */
int bt_taps_mode_parse(const char *s);
const char *bt_taps_mode_name(int mode);

typedef struct bt_recorder_cfg {
    bt_trace *trace;              /* may be NULL */
    const bt_injector *inj;       /* may be NULL */
    const bt_model *model;
    const bt_tokenizer *tok;
    int taps;                     /* bt_taps_mode */
    int layer_lo, layer_hi;       /* tapped layer range, inclusive; lo = -1: all */
    bool logits_full;             /* store every step's full logit row */
    int topk;                     /* top-k in snapshots (default 20) */
    bt_argmax_rule rule;
    const char *model_role;       /* "target" (default) or "draft" */
    bool timing;                  /* run --timing: record each tapped op's host wall time
                                   * (op_timings): the time since the previous tapped op
                                   * or the step's start, so it needs every op tapped */
    bool kernels;                 /* run --cupti: after each forward, drain the backend's
                                   * device activity records into the kernels table */
    /* Told every event the recorder records (trace or not): serve puts
     * them in its answer. May be NULL. */
    void (*on_event)(void *user, int step, int pos, const char *kind, const char *detail);
    void *event_user;
} bt_recorder_cfg;

typedef struct bt_recorder bt_recorder;

/* Register the tapped tensors in the trace and install the callback. */
int bt_recorder_new(const bt_recorder_cfg *cfg, bt_engine *e, bt_recorder **out);
void bt_recorder_free(bt_recorder *r);

int bt_recorder_prompt(bt_recorder *r, const int32_t *ids, int n);
int bt_recorder_step_begin(bt_recorder *r, const char *kind, int pos0, int n_pos);
/* After sampling from `row` (the logits of position row_pos): snapshot,
 * token (role gen; pos = row_pos + 1), detectors. oov ids are allowed. */
int bt_recorder_step_sampled(bt_recorder *r, const float *row, int row_pos, int32_t chosen, float logprob);
/* The pieces of step_sampled, for steps that use several rows (a
 * speculative verify): a logit snapshot of the row predicting position
 * row_pos + 1, and a token of the trail (role prompt | gen | draft |
 * bonus; gen and bonus feed the detectors). */
int bt_recorder_snapshot(bt_recorder *r, const float *row, int row_pos, int32_t chosen);
int bt_recorder_token(bt_recorder *r, int pos, int32_t id, const char *role, float logprob);
/* Speculative decoding's rows for the trace (spec_steps: what a verify step
 * did; spec_trail: one drafted token's fate), so the decoder writes the
 * trace only through its recorder. No-ops when the recorder has no trace. */
int bt_recorder_spec_step(bt_recorder *r, int step, const char *drafter, int k, int accepted,
                          int32_t bonus_token, const char *bonus_kind);
int bt_recorder_spec_trail(bt_recorder *r, const bt_spec_row *row);
/* A decoder event (post_stop_draft, accept_collapse). */
int bt_recorder_event(bt_recorder *r, int step, int pos, const char *kind, const char *detail);
/* The step last opened (run's interrupt line: the last committed step). */
int bt_recorder_current_step(const bt_recorder *r);
int bt_recorder_step_end(bt_recorder *r, double ms);
int bt_recorder_finish(bt_recorder *r, const char *finish_reason);
/* After the run: for each --inject spec that never changed anything, a
 * warning on stderr and an inject_unfired event (detail: the spec). *n
 * (may be NULL) gets their number. */
int bt_recorder_inject_unfired(bt_recorder *r, int *n);
/* First error the callback hit (it cannot return one through the engine). */
int bt_recorder_status(const bt_recorder *r);
/* Events recorded so far (for the run summary). */
int bt_recorder_n_events(const bt_recorder *r);
/* The recorder as the decoder's and generation loop's observer (the
 * callbacks above; o->user = r). */
void bt_recorder_observer(bt_recorder *r, bt_gen_observer *o);
/* The fatal-signal hook: records a crash event and closes the trace. */
void bt_recorder_crash_hook(int sig, const char *frames, void *user);

#endif
