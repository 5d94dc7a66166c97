/* server_reader.h - read-only access to a batched server's DIR/server.db
 * (traces/server_schema.sql; written by server_db.c), for the browser's
 * Cache view: which requests wrote and read one KV block over a window of
 * server steps, and that block's life (alloc, hit, inject, nonfinite, ...).
 *
 * A server.db is a file someone hands us, like a trace: opening checks the
 * header (guard.h), opens read-only, requires application_id BTSV
 * (src/base/records.h) and user_version 1, and checks every schema object
 * it reads for its kind (bt_server_guard_schema); every statement runs
 * under the guard's instruction budget. Anything else is refused with one
 * line naming the file (BT_EFORMAT, BT_EUNSUPPORTED, BT_EIO). Every query
 * is bounded: a primary-key range of server steps or the block_events
 * (block, step) index, and a row limit. */
#ifndef BT_TRACE_SERVER_READER_H
#define BT_TRACE_SERVER_READER_H

#include <stdint.h>

typedef struct bt_server_reader bt_server_reader;

int bt_server_open(const char *path, bt_server_reader **out);
void bt_server_close(bt_server_reader *s);

/* One requests row; BT_ENOTFOUND (message naming the file) when the
 * request is not listed. Steps -1 for NULL. */
typedef struct bt_server_request_row {
    char request[64], trace[128], finish[24];
    int lane, first_step, last_step, n_prompt, hit_tokens, n_forward;
} bt_server_request_row;
int bt_server_request(bt_server_reader *s, const char *request, bt_server_request_row *out);
/* The last server step (max(steps.step), -1 when none). */
int bt_server_last_step(bt_server_reader *s, int *out);

/* The access rows of one block in server steps [lo, hi], in (step,
 * request) order, at most limit rows; strings are valid during the call.
 * fn returns nonzero to stop (negative: an error, returned). */
typedef struct bt_server_access_row {
    int step, block, logical, pos_lo, pos_hi;
    char mode;                  /* 'r' or 'w' */
    const char *request;
} bt_server_access_row;
int bt_server_block_access(bt_server_reader *s, int block, int lo, int hi, int limit,
                           int (*fn)(void *user, const bt_server_access_row *row), void *user);

/* The block_events of one block in server steps [lo, hi], in (step, id)
 * order, at most limit rows; request, hash, detail NULL when absent,
 * logical -1. */
typedef struct bt_server_event_row {
    int64_t id;
    int step, block, logical;
    const char *event, *request, *hash, *detail;
} bt_server_event_row;
int bt_server_block_events(bt_server_reader *s, int block, int lo, int hi, int limit,
                           int (*fn)(void *user, const bt_server_event_row *row), void *user);

#endif
