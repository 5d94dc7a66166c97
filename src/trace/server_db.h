/* server_db.h - the batched server's trace, DIR/server.db: which request
 * ran which tokens in each batched forward, which KV blocks each request
 * read and wrote, and each block's life (traces/server_schema.sql,
 * doc/trace-format.md). Written by the batcher (src/run/batcher.c).
 *
 * One writer; every call is serialised by the handle's own mutex, so the
 * scheduler and the request threads may call it. A step's rows go in one
 * transaction (bt_server_db_begin .. bt_server_db_commit). Errors are BT_EIO
 * with a message naming the file; after the first one the handle keeps
 * refusing (bt_server_db_failed), and the server goes on without it. */
#ifndef BT_SERVER_DB_H
#define BT_SERVER_DB_H

#include <stdbool.h>

/* PRAGMA user_version of server.db (traces/server_schema.sql); the reader
 * (server_reader.c) reads this version only. */
#define BT_SERVER_SCHEMA_VERSION 1

typedef struct bt_server_db bt_server_db;

/* Create path exclusively (mode 0600): an existing file is never replaced
 * (BT_EINVAL naming it). */
int bt_server_db_create(const char *path, bt_server_db **out);
int bt_server_db_meta(bt_server_db *d, const char *key, const char *value);
int bt_server_db_begin(bt_server_db *d);
int bt_server_db_commit(bt_server_db *d);
int bt_server_db_step(bt_server_db *d, int step, double t, int n_seqs, int n_rows, double ms);
int bt_server_db_batch(bt_server_db *d, int step, const char *request, int lane, int row0, int pos0, int n_tokens,
                       int req_step);
/* mode 'r' or 'w' */
int bt_server_db_access(bt_server_db *d, int step, const char *request, int block, int logical, char mode, int pos_lo,
                        int pos_hi);
/* request, hash, detail may be NULL; logical < 0: NULL */
int bt_server_db_block_event(bt_server_db *d, int step, int block, const char *event, const char *request, int logical,
                             const char *hash, const char *detail);
/* A hybrid model's state slot: reset | keep | write (detail may be NULL). */
int bt_server_db_slot_event(bt_server_db *d, int step, int slot, const char *event, const char *request, const char *detail);
/* Insert or update a request's row (trace, finish may be NULL; steps < 0: NULL). */
int bt_server_db_request(bt_server_db *d, const char *request, int lane, const char *trace, int first_step, int last_step,
                         int n_prompt, int hit_tokens, int n_forward, const char *finish);
bool bt_server_db_failed(const bt_server_db *d);
/* meta status (ok | interrupted | error), checkpoint, leave WAL mode, close. NULL is a no-op. */
int bt_server_db_close(bt_server_db *d, const char *status);

#endif
