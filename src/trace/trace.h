/* trace.h - the SQLite trace file: writer and reader.
 *
 * The schema (traces/schema.sql, embedded at build time) is described in
 * doc/trace-format.md. No sqlite3 type crosses this header: the engine and
 * the commands see only bt_trace / bt_trace_reader handles.
 *
 * Writer durability: WAL mode; steps are committed in groups: step_end
 * commits the steps since the last commit once BT_TRACE_COMMIT_MS has
 * passed since it (a commit per step cost a small model 3-6% of its decode
 * step), and close, bt_trace_flush and the fatal-signal path commit what is
 * open. A committed step survives kill -9, so a killed run loses at most
 * the steps of its last BT_TRACE_COMMIT_MS of stepping. Writes outside a
 * step (meta, tokens of the prompt, events after the loop) join the open
 * group, or commit immediately when none is open.
 * Every function returns BT_OK or a BT_E* with a message naming the file
 * and the SQLite error. */
#ifndef BT_TRACE_H
#define BT_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "base/records.h"
#include "base/kernel_rows.h"

#define BT_TRACE_SCHEMA_VERSION 1

typedef struct bt_trace bt_trace;

/* Create a new trace file exclusively (mode 0600) and write the schema;
 * the writer then holds an exclusive flock on it until close. An existing
 * path is refused (BT_EINVAL, message naming the path and why) unless flags
 * has BT_TRACE_FORCE and it is a regular file, a bangtrace trace, and no
 * process is writing it: then it and its -wal/-shm are replaced. Links and
 * devices are never followed or replaced (sys/outfile.h). */
#define BT_TRACE_FORCE 1u
int bt_trace_create_opts(const char *path, unsigned flags, bt_trace **out);
/* bt_trace_create_opts(path, 0, out): never replaces anything. */
int bt_trace_create(const char *path, bt_trace **out);
/* Mark the run finished with a status (see BT_TRACE_STATUS_*), set
 * meta.finished_at, checkpoint the WAL into the main file, leave WAL mode
 * (no -wal/-shm remain: one self-contained file) and close. NULL is a no-op.
 * Best effort after a failed write: the first error is returned. */
int bt_trace_close(bt_trace *t, const char *status);
/* Emergency close for the crash handler: commit what is pending (the
 * current step included), record status "crashed", checkpoint and leave
 * WAL mode as bt_trace_close does. Does nothing if the signal interrupted
 * SQLite itself. Safe to call once. */
void bt_trace_crash_close(bt_trace *t);
/* True once a write to the trace failed (disk full, I/O error): the run
 * should close it with BT_TRACE_STATUS_IO_ERROR. */
bool bt_trace_failed(const bt_trace *t);

/* meta.status values. "running" until the writer closes the trace; a trace
 * still "running" with no live writer (bt_outfile_locked) was killed. */
#define BT_TRACE_STATUS_RUNNING "running"
#define BT_TRACE_STATUS_OK "ok"                  /* the run finished */
#define BT_TRACE_STATUS_ERROR "error"            /* the run stopped on an error (exit 2) */
#define BT_TRACE_STATUS_IO_ERROR "io_error"      /* a trace write failed (disk full, I/O error) */
#define BT_TRACE_STATUS_CRASHED "crashed"        /* a fatal signal (crash event + backtrace) */
#define BT_TRACE_STATUS_INTERRUPTED "interrupted" /* SIGINT / SIGTERM / SIGHUP / SIGPIPE (interrupted event) */

int bt_trace_meta(bt_trace *t, const char *key, const char *value);
/* Register a tapped tensor: idx is its slot in the step blob (0..n-1, in
 * forward order). model: "target" or "draft". */
int bt_trace_tensor(bt_trace *t, const char *model, int idx, const char *name, int layer, const char *op, int width);
/* Rows written outside a step (tensors, meta) each commit on their own;
 * between batch_begin and batch_end they commit once (a model's 400
 * tensors: one transaction instead of 400). Not inside a step; end commits,
 * or with ok false rolls back. */
int bt_trace_batch_begin(bt_trace *t);
int bt_trace_batch_end(bt_trace *t, bool ok);

int bt_trace_step_begin(bt_trace *t, int step, const char *model, const char *kind, int pos0, int n_pos);
/* Within a step: stats of tensor slot idx (any order; packed at step_end). */
int bt_trace_tap(bt_trace *t, int idx, const bt_tap_stats *s);
int bt_trace_logits(bt_trace *t, int pos, const bt_logit_summary *s, const char *rule, int32_t chosen);
/* Full logit row, stored as f16 (or f32) compressed with zstd. */
int bt_trace_logit_row(bt_trace *t, int step, int pos, const float *row, int n, const char *reason, bool f32);
/* Ends the step: its rows are written, and committed with the steps before
 * it once BT_TRACE_COMMIT_MS has passed since the last commit. ms =
 * forward wall time. */
#define BT_TRACE_COMMIT_MS 50
int bt_trace_step_end(bt_trace *t, double ms);
/* Commit the steps not yet committed (outside a step); a no-op when none.
 * For a caller about to wait on something outside (a client, the next
 * request), so a kill meanwhile loses nothing. */
int bt_trace_flush(bt_trace *t);
/* The commit interval in milliseconds; 0 commits every step. */
void bt_trace_commit_every(bt_trace *t, int ms);
/* The last step committed (durable against kill -9); -1 none yet. */
int bt_trace_last_committed(const bt_trace *t);

int bt_trace_token(bt_trace *t, int step, int pos, int32_t id, const char *piece, size_t piece_len,
                   const char *role, double logprob, const char *finish_reason);
/* Set finish_reason on the last generated token. */
int bt_trace_finish_reason(bt_trace *t, const char *finish_reason);
/* layer -1 / op NULL / tensor NULL when not applicable. *id may be NULL. */
int bt_trace_event(bt_trace *t, int step, int pos, const char *kind, int layer, const char *op,
                   const char *tensor, const char *detail, int64_t *id);
int bt_trace_backtrace(bt_trace *t, int64_t event_id, int step, const char *kind, const char *frames);

/* Speculative decoding (inside the verify step). */
/* bt_spec_row: base/records.h */
int bt_trace_spec_step(bt_trace *t, int step, const char *drafter, int k, int accepted,
                       int32_t bonus_token, const char *bonus_kind);
int bt_trace_spec_trail(bt_trace *t, const bt_spec_row *r);

/* Device activity (CUPTI records converted by bt_act_to_row), any time
 * during the run; rows outside a step transaction commit with the next. */
int bt_trace_kernel_rows(bt_trace *t, const bt_kernel_row *rows, int n);
/* run --timing: the host wall time of tapped tensor idx of step (inside the
 * step). start_ns is CLOCK_MONOTONIC. */
int bt_trace_op_timing(bt_trace *t, int step, const char *model, int idx, int64_t start_ns, int64_t dur_ns);
/* Mixture of experts: T tokens at positions pos0.. of `layer` went to
 * experts[i*k + j] with weights[i*k + j] (rank j, best first): k rows each
 * in moe_routes. */
int bt_trace_moe_routes(bt_trace *t, int step, const char *model, int layer, int pos0, int T, int k,
                        const int *experts, const float *weights);

/* Size of the file (+ WAL) in bytes, for reports. */
int64_t bt_trace_size(const char *path);

/* Batched serve: the KV blocks behind a request's steps (the kv_access
 * table; traces/schema.sql). mode "w" (written at this step), "hit" (mapped
 * from the prefix cache), "r" (read, last written by another request),
 * "slot" (a hybrid model's recurrent state slot kept from another request:
 * block is the slot); writer_step, bad_step -1 and writer, bad_by, note ""
 * for none. */
typedef struct bt_kv_access {
    int step, server_step, block, logical;
    char mode[8];
    int pos_lo, pos_hi;
    char writer[64];
    int writer_step, bad_step;
    char bad_by[96];
    char note[160];              /* what was wrong with it (an injected server fault) */
} bt_kv_access;
/* In one transaction, outside a step. */
int bt_trace_kv_access(bt_trace *t, const bt_kv_access *rows, int n);

#endif
