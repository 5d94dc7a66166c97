/* trace.h - the SQLite trace file: writer and reader.
 *
 * The schema (traces/schema.sql, embedded at build time) is described in
 * doc/trace-format.md. No sqlite3 type crosses this header: the engine and
 * the commands see only bt_trace / bt_trace_reader handles.
 *
 * Writer durability: WAL mode; everything written between
 * bt_trace_step_begin() and bt_trace_step_end() is one transaction, so after
 * step_end returns the step survives kill -9. Writes outside a step (meta,
 * tokens of the prompt, events after the loop) are committed immediately.
 * Every function returns BT_OK or a BT_E* with a message naming the file
 * and the SQLite error. */
#ifndef BT_TRACE_H
#define BT_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "tap/stats.h"

#define BT_TRACE_SCHEMA_VERSION 1

typedef struct bt_trace bt_trace;

/* Create (replacing an existing file and its -wal/-shm) and write the schema. */
int bt_trace_create(const char *path, bt_trace **out);
/* Mark the run finished with a status ("ok", "error", "crashed", ...), set
 * meta.finished_at, checkpoint and close. NULL is a no-op. */
int bt_trace_close(bt_trace *t, const char *status);
/* Async-signal-tolerant emergency close for the crash handler: commit what
 * is pending (the current step included), record status "crashed". Never
 * allocates. Safe to call once. */
void bt_trace_crash_close(bt_trace *t);

int bt_trace_meta(bt_trace *t, const char *key, const char *value);
/* Register a tapped tensor: idx is its slot in the step blob (0..n-1, in
 * forward order). model: "target" or "draft". */
int bt_trace_tensor(bt_trace *t, const char *model, int idx, const char *name, int layer, const char *op, int width);

int bt_trace_step_begin(bt_trace *t, int step, const char *model, const char *kind, int pos0, int n_pos);
/* Within a step: stats of tensor slot idx (any order; packed at step_end). */
int bt_trace_tap(bt_trace *t, int idx, const bt_tap_stats *s);
int bt_trace_logits(bt_trace *t, int pos, const bt_logit_summary *s, const char *rule, int32_t chosen);
/* Full logit row, stored as f16 (or f32) compressed with zstd. */
int bt_trace_logit_row(bt_trace *t, int step, int pos, const float *row, int n, const char *reason, bool f32);
/* Ends the step's transaction (durable after this). ms = forward wall time. */
int bt_trace_step_end(bt_trace *t, double ms);

int bt_trace_token(bt_trace *t, int step, int pos, int32_t id, const char *piece, size_t piece_len,
                   const char *role, double logprob, const char *finish_reason);
/* Set finish_reason on the last generated token. */
int bt_trace_finish_reason(bt_trace *t, const char *finish_reason);
/* layer -1 / op NULL / tensor NULL when not applicable. *id may be NULL. */
int bt_trace_event(bt_trace *t, int step, int pos, const char *kind, int layer, const char *op,
                   const char *tensor, const char *detail, int64_t *id);
int bt_trace_backtrace(bt_trace *t, int64_t event_id, int step, const char *kind, const char *frames);

/* Speculative decoding (inside the verify step). */
typedef struct bt_spec_row {
    int step, draft_idx, draft_pos;
    int draft_step;            /* -1: none (n-gram drafter) */
    int32_t draft_token;
    double draft_prob;         /* NAN: unknown */
    bool draft_finite;
    int32_t target_token;      /* -1: none */
    double target_prob;
    int accepted;              /* 1 accepted, 0 rejected / not reached */
    const char *reason;
} bt_spec_row;
int bt_trace_spec_step(bt_trace *t, int step, const char *drafter, int k, int accepted,
                       int32_t bonus_token, const char *bonus_kind);
int bt_trace_spec_trail(bt_trace *t, const bt_spec_row *r);

/* Size of the file (+ WAL) in bytes, for reports. */
int64_t bt_trace_size(const char *path);

#endif
