/* reader.h - read-only access to a bangtrace trace file.
 *
 * The queries that bisect, report, export and the browser share. Every one
 * is an indexed lookup (primary key or one of the schema's indexes), so a
 * screen of the browser costs the same on a 1 GB trace as on a 1 MB one;
 * nothing here scans a whole table unless its name says so (…_each over a
 * range the caller chooses).
 *
 * bt_trace_open() validates before anything else: the file must be SQLite,
 * carry the bangtrace application_id, a user_version this build knows, its
 * tables, indexes and views must be of the expected kinds (a table named
 * steps, not a view) and a meta table must be there; anything else is
 * BT_EFORMAT (BT_EUNSUPPORTED for a newer
 * schema, BT_EIO when the file cannot be opened) with a one-line message
 * naming the file. Every query runs under an instruction budget
 * proportional to the file's size: a hostile file ends in BT_EFORMAT, never
 * a hang. No sqlite3 type crosses this header.
 *
 * Conventions: integers that SQL stores as NULL come back as -1 (layer,
 * pos, step of an event) and reals as NAN; strings are borrowed from the
 * reader and valid until the next call on the same reader (or, in a
 * callback, until it returns). A callback returns 0 to go on, anything else
 * to stop; the iterator then returns that value. */
#ifndef BT_TRACE_READER_H
#define BT_TRACE_READER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "base/kernel_rows.h"
#include "base/records.h"   /* BT_TRACE_APPLICATION_ID */

/* The bangtrace SQLite application_id ('BTRC'), written by the writer. */
/* BT_TRACE_APPLICATION_ID: src/base/records.h */
/* The largest layer index + 1 a trace may name (tensors.layer is -1 or NULL
 * for a tensor outside the layers, else 0..BT_TRACE_MAX_LAYERS-1).
 * bt_trace_open refuses anything else, so no command sizes an array from a
 * hostile layer number (2000000000 once made bisect allocate 16 GB). */
#define BT_TRACE_MAX_LAYERS 512

typedef struct bt_trace_reader bt_trace_reader;

int bt_trace_open(const char *path, bt_trace_reader **out);
/* The file SQLite should open for the trace at path: path itself, or the
 * private copy an open reader of path reads (a killed run's trace on
 * read-only media, its -wal without the -shm: see reader.c). */
const char *bt_trace_db_path(const char *path);
void bt_trace_reader_close(bt_trace_reader *r);   /* NULL is a no-op */
const char *bt_trace_reader_path(const bt_trace_reader *r);

/* How complete the trace is. A trace opens whenever SQLite can read it:
 * one a run is still writing, or whose run was killed (its last steps
 * perhaps still in PATH-wal), or that ran out of disk. */
typedef struct bt_trace_state {
    const char *status;         /* meta status: ok | running | crashed | ...; NULL if absent (borrowed) */
    bool finished;              /* meta finished_at is set: the writer closed the trace */
    bool complete;              /* finished with a final status (not "running") */
    bool in_wal;                /* a non-empty PATH-wal held committed pages at open */
    int last_step;              /* the last committed step, -1 when none */
} bt_trace_state;
int bt_trace_state_get(bt_trace_reader *r, bt_trace_state *out);

/* ---- run metadata ---- */

/* The value of meta.key, or NULL when the key is absent (or NULL). The
 * meta table is read once at open: the pointer is valid until close. */
const char *bt_trace_meta_get(bt_trace_reader *r, const char *key);
/* Every (key, value) in key order (export, the browser's Run view). */
int bt_trace_meta_each(bt_trace_reader *r, int (*fn)(void *user, const char *key, const char *value), void *user);

/* ---- overview ---- */

/* Counts over the small per-step tables (steps, tokens, events) and
 * indexed minima; it never touches tap_blobs. */
typedef struct bt_trace_summary {
    int64_t n_steps;            /* rows of steps */
    int first_step, last_step;  /* -1 when there are none */
    int64_t n_tokens, n_prompt_tokens;
    int64_t n_events;
    int first_bad_step;         /* first step with a non-finite tap, -1 if clean */
    int first_bad_logits_step;  /* first step whose logit row had a non-finite value, -1 */
    int n_tensors;              /* tensors of model 'target' */
} bt_trace_summary;
int bt_trace_summary_get(bt_trace_reader *r, bt_trace_summary *out);

/* ---- tensors (cached at open; small) ---- */

typedef struct bt_trace_tensor_row {
    const char *model;          /* "target" | "draft" */
    int idx;                    /* slot in the step's tap blob */
    const char *name;           /* blk.3.ffn_gate */
    int layer;                  /* -1 outside layers */
    const char *op;             /* ffn_gate */
    int width;
} bt_trace_tensor_row;
/* Tensors of model (NULL = "target") in slot order; borrowed, valid until close. */
int bt_trace_tensors(bt_trace_reader *r, const char *model, const bt_trace_tensor_row **out, int *n);
/* Slot of a tensor by name, or -1. */
int bt_trace_tensor_find(bt_trace_reader *r, const char *model, const char *name);

/* ---- steps ---- */

typedef struct bt_trace_step_row {
    int step;
    char model[16];
    char kind[16];              /* prefill | decode | verify | draft */
    int pos0, n_pos;
    double ms;                  /* NAN if not recorded (crashed mid-step) */
} bt_trace_step_row;
/* BT_ENOTFOUND when the step is not in the trace. */
int bt_trace_step_get(bt_trace_reader *r, int step, bt_trace_step_row *out);
/* Steps with step >= from, in order, at most max; *n = how many written. */
int bt_trace_steps(bt_trace_reader *r, int from, int max, bt_trace_step_row *out, int *n);

/* ---- taps ---- */

typedef struct bt_trace_tap_row {
    int step, idx, layer;       /* layer -1 outside layers */
    const char *name, *op;      /* borrowed from the tensor cache */
    int64_t n, nan, pinf, ninf;
    double min, max, absmax, mean, rms;   /* bf16-rounded, or full precision when bad */
    int first_bad_index, first_bad_pos;   /* -1 when finite */
    bool recorded;              /* false: the slot held no stats this step (0x7fc0) */
    const char *model;          /* the pass: target | draft (borrowed from the tensor cache) */
} bt_trace_tap_row;
static inline bool bt_trace_tap_bad(const bt_trace_tap_row *t) { return t->nan | t->pinf | t->ninf; }

/* Every tapped tensor of a step, decoded from the packed blob and merged
 * with its tap_bad rows. *out is malloc'd (free() it), *n its length; a step
 * without taps gives *out = NULL, *n = 0. BT_ENOTFOUND: no such step. */
int bt_trace_step_taps(bt_trace_reader *r, int step, bt_trace_tap_row **out, int *n);
/* One tensor slot across steps [from, to] (inclusive): fn once per step that
 * has a blob. Reads one blob per step: the browser's per-tensor history. */
int bt_trace_tap_series(bt_trace_reader *r, int idx, int from, int to,
                        int (*fn)(void *user, const bt_trace_tap_row *tap), void *user);

/* The first non-finite tap (lowest step, then slot = forward order); the
 * fields of v_first_nonfinite. *found = false on a clean trace. */
int bt_trace_first_nonfinite(bt_trace_reader *r, bt_trace_tap_row *out, bool *found);
/* tap_bad rows with step >= from in (step, slot) order: the propagation. */
int bt_trace_bad_each(bt_trace_reader *r, int from, int (*fn)(void *user, const bt_trace_tap_row *tap), void *user);

/* ---- tokens ---- */

typedef struct bt_trace_token_row {
    int64_t seq;
    int step, pos;
    int32_t id;
    const char *piece;          /* NULL after redaction */
    size_t piece_len;           /* bytes (pieces may hold NUL or invalid UTF-8) */
    const char *role;           /* prompt | gen | draft | bonus */
    double logprob;             /* NAN when not recorded */
    const char *finish_reason;  /* NULL except on the last generated token */
} bt_trace_token_row;
/* Tokens with seq >= from_seq, in trail order, until fn stops or max (<= 0: no limit). */
int bt_trace_tokens_each(bt_trace_reader *r, int64_t from_seq, int max,
                         int (*fn)(void *user, const bt_trace_token_row *tok), void *user);
/* Tokens of steps [from, to] (uses the tokens_step index). */
int bt_trace_tokens_of_steps(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_token_row *tok), void *user);

/* ---- logits ---- */

typedef struct bt_trace_logits_row {
    int step, pos, n_vocab;
    int64_t nan, pinf, ninf;
    double max, entropy;        /* NAN when NULL */
    int32_t argmax_first, argmax_torch, argmax_triton, chosen;   /* -1 when NULL */
    char rule[32];
    int k;
    int32_t topk_ids[64];
    float topk_vals[64];
    bool has_row;               /* a full row is stored for (step, pos) */
} bt_trace_logits_row;
/* Snapshots of a step (usually one; more on verify steps), in pos order. */
int bt_trace_step_logits(bt_trace_reader *r, int step, bt_trace_logits_row *out, int max, int *n);
/* First step whose logit snapshot has a non-finite value; *found false if none. */
int bt_trace_first_bad_logits(bt_trace_reader *r, bt_trace_logits_row *out, bool *found);
/* Decode a stored full row: *row is malloc'd (free()), *n elements;
 * reason (if not NULL) gets first_nonfinite | collapse | full.
 * BT_ENOTFOUND when no row is stored, BT_EFORMAT when it does not decode. */
int bt_trace_logit_row_get(bt_trace_reader *r, int step, int pos, float **row, int *n, char reason[32]);

/* ---- events and backtraces ---- */

typedef struct bt_trace_event_row {
    int64_t id;
    int step, pos, layer;       /* -1 when NULL */
    const char *kind, *op, *tensor, *detail;  /* op/tensor/detail may be NULL */
} bt_trace_event_row;
/* Events in id order; kind NULL = all kinds (kind uses the events_kind index). */
int bt_trace_events_each(bt_trace_reader *r, const char *kind,
                         int (*fn)(void *user, const bt_trace_event_row *ev), void *user);

/* ---- mixture of experts (table moe_routes, optional) ---- */
typedef struct bt_trace_route_row {
    int step, pos, layer, rank, expert;
    double weight;
    const char *model;          /* "target" or "draft" (static) */
} bt_trace_route_row;
/* The routes of one step in (model, pos, layer, rank) order; none in a
 * trace without the table. fn returns nonzero to stop (negative: error). */
int bt_trace_moe_routes_each(bt_trace_reader *r, int step, int (*fn)(void *user, const bt_trace_route_row *row),
                             void *user);

/* ---- batched serve: the KV blocks behind the steps (table kv_access,
 * optional: a trace from another server has none) ---- */
struct bt_kv_access;
/* Every row in (step, mode, block) order; fn returns nonzero to stop
 * (negative: error). */
int bt_trace_kv_access_each(bt_trace_reader *r, int (*fn)(void *user, const struct bt_kv_access *row), void *user);

/* ---- device activity (table kernels) and op timings (run --timing) ----
 * Both tables are optional: a trace without them has zero rows. */
int bt_trace_kernels_each(bt_trace_reader *r, int (*fn)(void *user, const bt_kernel_row *k), void *user);
/* The rows of one step, in start order. */
int bt_trace_kernels_step(bt_trace_reader *r, int step, int (*fn)(void *user, const bt_kernel_row *k), void *user);
/* The rows of one op (layer -1: outside layers), in start order. */
int bt_trace_kernels_of(bt_trace_reader *r, int step, int layer, const char *op,
                        int (*fn)(void *user, const bt_kernel_row *k), void *user);
typedef struct bt_trace_op_timing_row {
    int step, layer;            /* layer -1 outside layers */
    const char *op, *tensor;    /* borrowed for the callback */
    int64_t start_ns, dur_ns;
} bt_trace_op_timing_row;
int bt_trace_op_timings_each(bt_trace_reader *r, int (*fn)(void *user, const bt_trace_op_timing_row *t), void *user);

typedef struct bt_trace_backtrace_row {
    int64_t id, event_id;       /* event_id -1 when NULL */
    int step;
    const char *kind;           /* first_nonfinite | crash */
    const char *frames;         /* one frame per line */
} bt_trace_backtrace_row;
int bt_trace_backtraces_each(bt_trace_reader *r, int (*fn)(void *user, const bt_trace_backtrace_row *bt), void *user);

/* ---- speculative decoding ----
 * A trace written before the spec tables existed (or of a plain run) reads
 * as non-speculative: bt_trace_has_spec() is false and the iterators below
 * call fn for nothing. */

/* The run speculated: the trace has spec tables with a verify step, or its
 * meta names a drafter. */
bool bt_trace_has_spec(const bt_trace_reader *r);

typedef struct bt_trace_spec_step_row {
    int step;                   /* the verify step */
    char drafter[32];           /* model | self:N | ngram:N */
    int k, accepted;            /* tokens drafted, accepted prefix length */
    int32_t bonus_token;        /* -1 when NULL (generation stopped) */
    char bonus_kind[16];        /* correction | bonus | none; "" when NULL */
} bt_trace_spec_step_row;
/* spec_steps rows of verify steps [from, to], in step order. */
int bt_trace_spec_steps_each(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_spec_step_row *row), void *user);

typedef struct bt_trace_spec_trail_row {
    int step, draft_idx, draft_pos;
    int draft_step;             /* -1: no draft forward (n-gram) */
    int32_t draft_token;
    double draft_prob;          /* NAN when NULL */
    bool draft_finite;
    int32_t target_token;       /* -1 when NULL */
    double target_prob;         /* NAN when NULL */
    bool accepted;
    const char *reason;         /* match | mismatch | accept p/q | ...; NULL when not recorded */
} bt_trace_spec_trail_row;
/* spec_trail rows of verify steps [from, to], in (step, draft_idx) order. */
int bt_trace_spec_trail_each(bt_trace_reader *r, int from, int to,
                             int (*fn)(void *user, const bt_trace_spec_trail_row *row), void *user);

/* Steps [from, to] in order: model (target | draft) and kind (prefill |
 * decode | verify | draft) with their positions. */
int bt_trace_steps_each(bt_trace_reader *r, int from, int to,
                        int (*fn)(void *user, const bt_trace_step_row *row), void *user);
/* The first step of model (NULL = "target") whose logit snapshot has a
 * non-finite value: a drafter's NaN row never reaches the output, the
 * target's does. *found false if none. */
int bt_trace_first_bad_logits_of(bt_trace_reader *r, const char *model, bt_trace_logits_row *out, bool *found);
/* The first step with a non-finite tap in a pass of model (NULL = "target"),
 * -1 if none. Reads tap_bad (sparse: bad tensors only). */
int bt_trace_first_bad_step_of(bt_trace_reader *r, const char *model, int *step);

/* ---- integrity ---- */

/* Full integrity check of the file behind a trace (SQLite quick_check: every
 * page of every table and index). The reader validates only what it must at
 * open so the browser opens a 1 GB trace instantly; batch commands that
 * draw conclusions from the whole file (bisect, report) call this too, so a
 * damaged page is a clear BT_EFORMAT instead of a quietly partial answer.
 * (Named for its callers, the analysis commands; it lives here because it
 * is SQL.) */
int bt_analyze_verify(const char *path);

/* ---- browsing (reader_browse.c) ----
 * The bounded lookups of the browser's model layer (tui/model_*.c), which
 * holds no SQL of its own. "Non-draft" tokens are the text: prompt plus
 * output (gen and bonus); drafted tokens are not part of it. */

/* Prepare every query below now, so a foreign or damaged schema fails at
 * open (before curses starts), not on the first screen that needs it. */
int bt_trace_browse_check(bt_trace_reader *r);
/* The models that registered tensors ("draft", "target"), sorted, at most
 * max, copied into names; *n the count. */
int bt_trace_models(bt_trace_reader *r, char names[][16], int max, int *n);
/* First and last step, first and last non-draft token seq; -1 when none.
 * Four indexed min/max lookups, never a scan. */
int bt_trace_bounds(bt_trace_reader *r, int *min_step, int *max_step, int64_t *min_seq, int64_t *max_seq);
/* First and last step holding a non-finite tap; -1 on a clean trace. */
int bt_trace_bad_step_range(bt_trace_reader *r, int *first, int *last);
/* The first step >= from of model (NULL = "target") with a tap blob; -1 if none. */
int bt_trace_tap_step_from(bt_trace_reader *r, const char *model, int from, int *step);
/* The nearest non-draft token after seq (dir +1) or before it (dir -1) that
 * ends the run of (id, prompt or not) holding seq; -1 when the run reaches
 * the end of the text. A rowid scan that stops at the answer. */
int bt_trace_token_run_next(bt_trace_reader *r, int64_t seq, int32_t id, bool prompt, int dir, int64_t *next);
typedef struct bt_trace_token_span {
    int64_t count;              /* non-draft tokens with seq in the range */
    int step0, step1, pos0;     /* their first and last step, first position; -1 when count is 0 */
} bt_trace_token_span;
int bt_trace_token_span_get(bt_trace_reader *r, int64_t lo, int64_t hi, bt_trace_token_span *out);
/* The nearest non-draft token after (dir +1) / before (-1) seq `from` whose
 * piece contains needle (bytes); *seq -1 if none. */
int bt_trace_token_search(bt_trace_reader *r, int64_t from, const char *needle, int dir, int64_t *seq);
/* Steps in [from, to] of the target (non-draft passes) whose logit snapshot
 * had a non-finite value, ascending. */
int bt_trace_bad_logits_each(bt_trace_reader *r, int from, int to, int (*fn)(void *user, int step), void *user);
/* The logit snapshot of step at pos (pos < 0: the step's last one, the row
 * that was sampled); *found false when there is none. */
int bt_trace_logits_at(bt_trace_reader *r, int step, int pos, bt_trace_logits_row *out, bool *found);
/* Verify steps: the `skip`-th after the first one >= from (dir +1) or
 * before the last one <= from (dir -1), clamped to the last that exists;
 * *step -1 when there is none in that direction at all. */
int bt_trace_spec_seek(bt_trace_reader *r, int from, int dir, int skip, int *step);
/* The next verify step after (dir +1) / before (-1) step whose drafts hold
 * a rejection (not the drafts after it); *out -1 if none. */
int bt_trace_spec_next_reject(bt_trace_reader *r, int step, int dir, int *out);

#endif
