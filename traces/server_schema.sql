-- bangtrace server trace schema, version 1 (PRAGMA user_version = 1,
-- PRAGMA application_id = 0x42545356, "BTSV").
--
-- One SQLite file per `serve --trace-dir DIR` run of the batched server:
-- DIR/server.db, beside the per-request traces. It says which request ran
-- which tokens in each batched forward (a server step), which KV blocks
-- each request read and wrote, each block's token hash, writer and
-- free/reuse events. A per-request trace carries the same block ids in its
-- kv_access table (traces/schema.sql), so the two join on (request, block).
-- Embedded into the binary; documented in doc/trace-format.md.

CREATE TABLE meta (            -- model, block_size, n_blocks, batch, prefix_cache, inject, status, ...
    key   TEXT PRIMARY KEY,
    value TEXT
) WITHOUT ROWID;

CREATE TABLE requests (        -- one row per request the scheduler admitted
    request    TEXT PRIMARY KEY,            -- the x-request-id (req-...-N)
    lane       INTEGER NOT NULL,            -- the batch lane (sequence slot) it ran in
    trace      TEXT,                        -- its per-request trace, relative to DIR (NULL: untraced)
    first_step INTEGER,                     -- server step of its first forward
    last_step  INTEGER,                     -- server step of its last forward
    n_prompt   INTEGER,                     -- prompt tokens
    hit_tokens INTEGER NOT NULL DEFAULT 0,  -- prompt tokens served from the prefix cache
    n_forward  INTEGER NOT NULL DEFAULT 0,  -- forwards it took part in
    finish     TEXT                         -- stop | length | cancelled | error ... (NULL: running)
) WITHOUT ROWID;

CREATE TABLE steps (           -- one batched forward each
    step   INTEGER PRIMARY KEY,             -- server step, from 0
    t      REAL NOT NULL,                   -- seconds since the server started
    n_seqs INTEGER NOT NULL,                -- requests in the batch
    n_rows INTEGER NOT NULL,                -- token rows computed (prefill and decode mixed)
    ms     REAL                             -- wall time of the forward
);

CREATE TABLE batch (           -- which request ran which tokens in a step
    step     INTEGER NOT NULL,
    request  TEXT NOT NULL,
    lane     INTEGER NOT NULL,
    row0     INTEGER NOT NULL,              -- its first row in the batch
    pos0     INTEGER NOT NULL,              -- position of that row
    n_tokens INTEGER NOT NULL,
    req_step INTEGER NOT NULL,              -- the step number in its own trace
    PRIMARY KEY (step, request)
) WITHOUT ROWID;

CREATE TABLE access (          -- KV blocks a request read ('r') or wrote ('w') in a step
    step    INTEGER NOT NULL,
    request TEXT NOT NULL,
    block   INTEGER NOT NULL,               -- physical block id
    logical INTEGER NOT NULL,               -- its index in the request's block table
    mode    TEXT NOT NULL,                  -- r | w
    pos_lo  INTEGER NOT NULL,               -- positions of the block read or written
    pos_hi  INTEGER NOT NULL,
    PRIMARY KEY (step, request, block, mode)
) WITHOUT ROWID;

CREATE TABLE block_events (    -- a block's life
    id      INTEGER PRIMARY KEY,
    step    INTEGER NOT NULL,               -- server step (the one about to run)
    block   INTEGER NOT NULL,
    event   TEXT NOT NULL,                  -- alloc | full | hit | free | evict | nonfinite | inject
    request TEXT,                           -- who caused it
    logical INTEGER,                        -- the block's index in that request's table
    hash    TEXT,                           -- token hash of a full block (16 hex digits)
    detail  TEXT                            -- e.g. hit: "written by req-..-5 at step 3"
);
CREATE INDEX block_events_block ON block_events(block, step);

CREATE TABLE slot_events (     -- hybrid models: a recurrent state slot's life
    id      INTEGER PRIMARY KEY,
    step    INTEGER NOT NULL,               -- server step
    slot    INTEGER NOT NULL,               -- the state slot (= the lane)
    event   TEXT NOT NULL,                  -- reset | keep (not reset on reuse) | snapshot | restore | inject
    request TEXT,
    detail  TEXT                            -- keep: "state of req-..-5 (last written at step 12)"
);

-- Views --------------------------------------------------------------------

-- The writer of each (block, positions) a request read: the last 'w'
-- access of another or the same request to that block at or before the read.
CREATE VIEW v_read_writer AS
SELECT r.step, r.request AS reader, r.block, r.logical, r.pos_lo, r.pos_hi,
       (SELECT w.request FROM access w WHERE w.block = r.block AND w.mode = 'w' AND w.step <= r.step
         ORDER BY w.step DESC LIMIT 1) AS writer,
       (SELECT w.step FROM access w WHERE w.block = r.block AND w.mode = 'w' AND w.step <= r.step
         ORDER BY w.step DESC LIMIT 1) AS writer_step
FROM access r WHERE r.mode = 'r';

-- Reads of data another request wrote (prefix hits; or a contamination).
CREATE VIEW v_cross_reads AS
SELECT * FROM v_read_writer WHERE writer IS NOT NULL AND writer <> reader;

-- Blocks that held a non-finite value, and who wrote it first.
CREATE VIEW v_nonfinite_blocks AS
SELECT block, MIN(step) AS first_step, request, detail FROM block_events
WHERE event IN ('nonfinite', 'inject') GROUP BY block;
