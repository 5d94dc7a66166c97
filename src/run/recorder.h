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
    bool no_state;                /* leave out the recurrent states (ssm_state,
                                   * ssm_conv_state): bench --no-state-taps prices them */
    bool logits_full;             /* store every step's full logit row */
    int topk;                     /* top-k in snapshots (default 20) */
    bt_argmax_rule rule;
    const char *model_role;       /* "target" (default) or "draft" */
    bool timing;                  /* run --timing: record each tapped op's host wall time
                                   * (op_timings): the time since the previous tapped op
                                   * or the step's start, so it needs every op tapped */
    bool kernels;                 /* run --cupti: after each forward, drain the backend's
                                   * device activity records into the kernels table */
    bool account;                 /* bench --taps: time the recorder's own parts
                                   * (bt_recorder_costs); two clock reads per tap */
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
int bt_recorder_step_sampled(bt_recorder *r, const float *row, int row_pos, int32_t chosen, float logprob,
                             const bt_softmax_sums *sums);
/* The speculative verify's pieces (logit snapshots, trail tokens, spec_steps
 * and spec_trail rows) and the decoder's events reach the recorder through
 * its observer (bt_recorder_observer, src/gen/observer.h), not by name. */
/* The step last opened (run's interrupt line: the last committed step). */
int bt_recorder_current_step(const bt_recorder *r);
int bt_recorder_step_end(bt_recorder *r, double ms);
int bt_recorder_finish(bt_recorder *r, const char *finish_reason);
/* After the run: for each --inject spec that never changed anything, a
 * warning on stderr and an inject_unfired event (detail: the spec). *n
 * (may be NULL) gets their number. */
int bt_recorder_inject_unfired(bt_recorder *r, int *n);
/* The tapped tensors in slot order (the trace's tensors table): slot i's op
 * (a foreign engine's extra tensors: BT_OP_COUNT + j) and layer; false when
 * i is out of range. */
int bt_recorder_n_slots(const bt_recorder *r);
bool bt_recorder_slot(const bt_recorder *r, int i, int *op, int *layer);
/* What recording cost, with cfg.account: wall time of the recorder's parts
 * summed over the steps so far, in nanoseconds. Zero without account. */
typedef struct bt_recorder_costs {
    long steps;                   /* steps ended */
    int64_t stats_ns;             /* observe: injection and the statistics pass (every tap) */
    int64_t rows_ns;              /* flush: tap rows packed into the step's blob, events */
    int64_t logits_ns;            /* after sampling: logit summary, snapshot, token, detectors */
    int64_t commit_ns;            /* step end: the step's rows written and committed */
    long taps;                    /* tensors observed */
} bt_recorder_costs;
void bt_recorder_costs_get(const bt_recorder *r, bt_recorder_costs *out);
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
