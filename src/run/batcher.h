/* batcher.h - the batched server's engine: continuous batching over a paged
 * KV cache with a prefix cache, and the provenance of every block and state
 * slot (serve's default on the native engine; doc/serve.md).
 *
 * One paged engine (bt_engine_forward_batch) and a scheduler thread. Each
 * lane (serve --parallel N: N lanes) has an engine handle of its own
 * (bt_batcher_lane_engine) that the request's generation loop drives as if
 * it were alone: its forwards are queued, the scheduler puts the rows of
 * every waiting lane into one forward (decode rows first, prefill chunks in
 * the rest of the --batch-rows budget), and hands each lane its logits and
 * its taps (the views of its rows, on the lane's own eval callback). Every
 * answer is the bits the request gets alone (the kernels are
 * batch-invariant; tests/serve_batch.sh).
 *
 * KV blocks: block_size positions each, a table per lane. A block that
 * fills is hashed (its tokens and every token before them) and kept in the
 * prefix cache; a later prompt that starts with the same tokens maps those
 * blocks instead of computing them (a prefix hit: the positions the lane's
 * step does not compute). Free cached blocks are reused oldest first.
 * Hybrid models: one recurrent state slot per lane, reset when a request
 * starts; a forward that ends on a block boundary snapshots the slot's
 * state there (keyed by the boundary's chain hash), and a prefix hit maps
 * the cached KV blocks (attention layers) up to the last boundary that has
 * a snapshot and restores that state (no hit without one).
 *
 * Provenance: each block's writer (request, server step), the first
 * non-finite value it held and who put it there, every hit, free, evict;
 * into DIR/server.db (trace/server_db.h) and, per request, its trace's
 * kv_access rows (bt_batcher_lane_trace).
 *
 * Server faults (serve --inject, drawn per request with p= as the others):
 *   prefix_wrong[@p=P]   a prefix hit maps another cached block (hybrid:
 *                        restores another snapshot's state)
 *   pad_nan[@p=P]        the request's batch writes its padding lane's K/V
 *                        (NaN) into block 0 row 0, a block others may map
 *   slot_noreset[@p=P]   hybrid: the request's state slot keeps the previous
 *                        request's state
 *   slot_swap[@p=P]      hybrid: once, sharing a batch with another running
 *                        request, its rows run on that one's state slot */
#ifndef BT_RUN_BATCHER_H
#define BT_RUN_BATCHER_H

#include <stdbool.h>
#include "engine/engine.h"
#include "model/model.h"
#include "trace/trace.h"

typedef struct bt_batcher_cfg {
    const bt_model *model;
    int ctx;                    /* positions per request */
    int lanes;                  /* requests at once */
    int max_rows;               /* rows per forward (0: 512) */
    int block_size;             /* 0: 16 */
    int n_blocks;               /* 0: lanes * ceil(ctx / block_size) */
    bool prefix_cache;
    int n_snapshots;            /* hybrid: recurrent state snapshots kept (0: 8 per lane, at most 1 GiB) */
    int threads;
    const char *server_db;      /* DIR/server.db to create, or NULL */
    const char *const *faults;  /* server fault specs (bt_batcher_is_fault) */
    int n_faults;
    const char *argv_json;      /* server.db meta */
    const char *model_path;
} bt_batcher_cfg;

typedef struct bt_batcher bt_batcher;

/* Is spec one of the server's own faults (prefix_wrong, pad_nan,
 * slot_noreset, slot_swap)? bt_batcher_fault_check parses one (BT_EINVAL naming it). */
bool bt_batcher_is_fault(const char *spec);
int bt_batcher_fault_check(const char *spec);

int bt_batcher_new(const bt_batcher_cfg *cfg, bt_batcher **out);
/* Lane i's engine handle (the caller owns it: bt_engine_free, before
 * bt_batcher_free). */
int bt_batcher_lane_engine(bt_batcher *b, int lane, bt_engine **out);
/* A request starts on a lane: its id, its trace's file name (NULL:
 * untraced), the draw of the faults' p=. */
int bt_batcher_lane_begin(bt_batcher *b, int lane, const char *request, const char *trace, unsigned long long draw);
/* Did a server fault fire for the lane's request (its draw)? */
bool bt_batcher_lane_faulted(const bt_batcher *b, int lane);
/* The request's provenance rows into its trace (kv_access), before it is
 * closed. */
int bt_batcher_lane_trace(bt_batcher *b, int lane, bt_trace *t);
/* It ended (finish: "stop", "length", "cancelled", "error"): its blocks go
 * back (full ones stay in the prefix cache). */
void bt_batcher_lane_end(bt_batcher *b, int lane, const char *finish, int n_prompt);
/* A line for the server's start: "continuous batching, 4 lanes, 128 blocks of 16, prefix cache on". */
const char *bt_batcher_describe(const bt_batcher *b);
/* Stop the scheduler (waiting forwards fail) and close server.db with
 * status. */
int bt_batcher_close(bt_batcher *b, const char *status);
void bt_batcher_free(bt_batcher *b);

#endif
