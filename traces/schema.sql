-- bangtrace trace schema, version 1 (PRAGMA user_version = 1).
--
-- One SQLite file per replayed request. Embedded into the binary at build
-- time; documented in doc/trace-format.md. Readers that are not bangtrace
-- should use the v_* views at the bottom: they decode the compact tables.
--
-- Size budget: a 1,000-step decode of a 30-layer model must stay under
-- 4 MB at default detail (every op of every layer tapped). A row per
-- (step, tensor) costs ~50 bytes in SQLite, ~20 MB per 1,000 steps, so tap
-- statistics are packed: one BLOB per step holding, for each tapped tensor
-- in forward order, min, max, mean and rms as bfloat16 (8 bytes). Non-finite
-- counts are almost always zero, so they live in a sparse table (tap_bad)
-- with full-precision statistics for the tensors that had any. The views
-- decode the BLOB with plain SQL (hex + arithmetic), so the sqlite3 shell
-- needs nothing from bangtrace.

CREATE TABLE meta (            -- run metadata: tool_version, argv, model_sha256, ...
    key   TEXT PRIMARY KEY,
    value TEXT
) WITHOUT ROWID;

CREATE TABLE tensors (         -- the tapped tensors, in forward order per model
    model TEXT NOT NULL DEFAULT 'target',   -- target | draft
    idx   INTEGER NOT NULL,                 -- slot in tap_blobs.stats (8 bytes each)
    name  TEXT NOT NULL,                    -- blk.17.ffn_down, logits, ...
    layer INTEGER,                          -- NULL outside layers
    op    TEXT NOT NULL,                    -- ffn_down, token_embd, logits, ...
    width INTEGER NOT NULL,                 -- floats per position
    PRIMARY KEY (model, idx)
) WITHOUT ROWID;

CREATE TABLE steps (           -- one forward call each; step 0 is the prefill
    step  INTEGER PRIMARY KEY,
    model TEXT NOT NULL DEFAULT 'target',
    kind  TEXT NOT NULL,                    -- prefill | decode | verify | draft
    pos0  INTEGER NOT NULL,                 -- first position computed
    n_pos INTEGER NOT NULL,                 -- positions computed (rows of each tensor)
    ms    REAL                              -- wall time of the forward
);

CREATE TABLE tap_blobs (       -- packed statistics of every tapped tensor of a step
    step  INTEGER PRIMARY KEY,
    stats BLOB NOT NULL                     -- per tensor idx: bf16 LE min, max, mean, rms
);                                          -- (over finite values; 0x7fc0 = none)

CREATE TABLE tap_bad (         -- tensors with at least one non-finite value
    step  INTEGER NOT NULL,
    model TEXT NOT NULL DEFAULT 'target',
    idx   INTEGER NOT NULL,
    nan   INTEGER NOT NULL,
    pinf  INTEGER NOT NULL,
    ninf  INTEGER NOT NULL,
    first_bad_index INTEGER NOT NULL,       -- column (0..width-1) of the first non-finite value
    first_bad_pos   INTEGER NOT NULL,       -- position (row) holding it
    min REAL, max REAL, mean REAL, rms REAL, -- full precision, over finite values
    PRIMARY KEY (step, model, idx)
) WITHOUT ROWID;

CREATE TABLE tokens (          -- the token trail: prompt, generated, draft, bonus
    seq      INTEGER PRIMARY KEY,
    step     INTEGER NOT NULL,              -- step that consumed (prompt) or produced it
    pos      INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    piece    TEXT,                          -- decoded bytes (NULL after redaction)
    role     TEXT NOT NULL,                 -- prompt | gen | draft | bonus
    logprob  REAL,
    finish_reason TEXT                      -- on the last generated token
);
CREATE INDEX tokens_step ON tokens(step);

CREATE TABLE logits (          -- one snapshot per step (the row that was sampled)
    step INTEGER NOT NULL,
    pos  INTEGER NOT NULL,
    n_vocab INTEGER NOT NULL,
    nan INTEGER NOT NULL, pinf INTEGER NOT NULL, ninf INTEGER NOT NULL,
    max REAL,                               -- over finite values
    argmax_first INTEGER, argmax_torch INTEGER, argmax_triton INTEGER,
    rule   TEXT,                            -- the rule that decided (run's --argmax)
    chosen INTEGER,                         -- the id the sampler emitted
    entropy REAL,                           -- nats, NULL when the row is not finite
    topk_ids  TEXT,                         -- JSON array, best first
    topk_vals TEXT,                         -- JSON array of logits
    PRIMARY KEY (step, pos)
) WITHOUT ROWID;
-- Sparse (rows with a non-finite value only): finds the first bad row fast.
CREATE INDEX logits_bad ON logits(step) WHERE nan + pinf + ninf > 0;

CREATE TABLE logit_rows (      -- full rows, only where flagged (first non-finite, collapse, --logits full)
    step INTEGER NOT NULL,
    pos  INTEGER NOT NULL,
    reason   TEXT NOT NULL,                 -- first_nonfinite | collapse | full
    dtype    TEXT NOT NULL,                 -- f16 | f32
    encoding TEXT NOT NULL,                 -- zstd | raw
    n        INTEGER NOT NULL,              -- elements
    data     BLOB NOT NULL,
    PRIMARY KEY (step, pos)
) WITHOUT ROWID;

CREATE TABLE events (          -- detector findings
    id     INTEGER PRIMARY KEY,
    step   INTEGER,
    pos    INTEGER,
    kind   TEXT NOT NULL,                   -- first_nonfinite, nonfinite_logits, argmax_fallthrough,
                                            -- oov_token, token_wall, repetition_loop, special_leak, crash, ...
    layer  INTEGER,
    op     TEXT,
    tensor TEXT,
    detail TEXT                             -- one human-readable sentence
);
CREATE INDEX events_kind ON events(kind, step);
CREATE INDEX events_step ON events(step);

CREATE TABLE backtraces (      -- host stacks at the first non-finite and at a crash
    id       INTEGER PRIMARY KEY,
    event_id INTEGER REFERENCES events(id),
    step     INTEGER,
    kind     TEXT NOT NULL,                 -- first_nonfinite | crash
    frames   TEXT NOT NULL                  -- one frame per line: "#0 0xPC symbol+0xOFF (module)"
);

CREATE TABLE spec_steps (      -- speculative decoding: one row per verify step
    step        INTEGER PRIMARY KEY,        -- the verify step (a target forward over k+1 positions)
    drafter     TEXT NOT NULL,              -- model | self:N | ngram:N
    k           INTEGER NOT NULL,           -- tokens drafted for this verify
    accepted    INTEGER NOT NULL,           -- accepted prefix length
    bonus_token INTEGER,                    -- the token the target added (NULL if generation stopped)
    bonus_kind  TEXT                        -- correction (after a rejection) | bonus (all accepted) | none
);

CREATE TABLE spec_trail (      -- one row per drafted token of a verify step
    step         INTEGER NOT NULL,          -- the verify step
    draft_idx    INTEGER NOT NULL,          -- 0..k-1 within the draft
    draft_pos    INTEGER NOT NULL,          -- position the drafted token would occupy
    draft_step   INTEGER,                   -- the draft forward that proposed it (NULL: n-gram)
    draft_token  INTEGER NOT NULL,
    draft_prob   REAL,                      -- q(draft_token) under the drafter (1 when greedy / n-gram)
    draft_finite INTEGER NOT NULL,          -- the draft logit row was finite
    target_token INTEGER,                   -- the target's own pick at this position
    target_prob  REAL,                      -- p(draft_token) under the target
    accepted     INTEGER NOT NULL,          -- 1 accepted, 0 rejected or not reached
    reason       TEXT,                      -- match | mismatch | accept p/q | reject p/q | after_reject | after_stop
    PRIMARY KEY (step, draft_idx)
) WITHOUT ROWID;

-- ---- views: the stable reading interface ----

CREATE TABLE kernels (         -- device activity (CUPTI, --device cuda): kernels, copies, memsets,
    id       INTEGER PRIMARY KEY,   -- synchronizations, driver/runtime API calls
    step     INTEGER,               -- the op that issued it (CUPTI external correlation id);
    layer    INTEGER,               -- NULL when it ran outside any op (weight upload, ...)
    op       TEXT,
    kind     TEXT NOT NULL,         -- kernel | memcpy | memset | sync | driver | runtime
    name     TEXT NOT NULL,         -- demangled kernel name, copy direction, API function
    grid     TEXT,                  -- "x,y,z" (kernels)
    block    TEXT,                  -- "x,y,z" (kernels)
    registers INTEGER,              -- per thread (kernels)
    shared_bytes INTEGER,           -- static + dynamic shared memory (kernels)
    bytes    INTEGER,               -- copied / set (memcpy, memset)
    start_ns INTEGER NOT NULL,      -- CUPTI timestamps (ns, the device's clock)
    end_ns   INTEGER NOT NULL,
    stream   INTEGER,
    device   INTEGER
);
CREATE INDEX kernels_op ON kernels(step, layer, op);

CREATE TABLE op_timings (      -- run --timing: host wall time of each tapped op
    step     INTEGER NOT NULL,
    model    TEXT NOT NULL DEFAULT 'target',
    idx      INTEGER NOT NULL,      -- tensors.idx
    start_ns INTEGER NOT NULL,      -- CLOCK_MONOTONIC
    dur_ns   INTEGER NOT NULL,      -- since the previous tapped op (or the step's start)
    PRIMARY KEY (step, model, idx)
) WITHOUT ROWID;

CREATE TABLE moe_routes (      -- mixture of experts: the experts each token was routed to
    step   INTEGER NOT NULL,
    model  TEXT NOT NULL DEFAULT 'target',
    pos    INTEGER NOT NULL,
    layer  INTEGER NOT NULL,
    rank   INTEGER NOT NULL,                -- 0 = the highest router probability
    expert INTEGER NOT NULL,
    weight REAL NOT NULL,                   -- its weight in ffn_moe_out (after renormalisation)
    PRIMARY KEY (step, model, pos, layer, rank)
) WITHOUT ROWID;

CREATE TABLE kv_access (       -- batched serve: the KV blocks behind this request's steps (traces/server_schema.sql)
    step        INTEGER NOT NULL,           -- this trace's step
    server_step INTEGER NOT NULL,           -- the server's batched forward (server.db steps.step)
    block       INTEGER NOT NULL,           -- physical block id
    logical     INTEGER NOT NULL,           -- its index in this request's block table
    mode        TEXT NOT NULL,              -- w: written here | hit: mapped from the prefix cache |
                                            -- r: read, last written by another request |
                                            -- slot: a recurrent state slot kept from another request (block = slot) |
                                            -- snap: a recurrent state restored from a snapshot (block = snapshot)
    pos_lo      INTEGER NOT NULL,           -- this request's positions in the block
    pos_hi      INTEGER NOT NULL,
    writer      TEXT,                       -- the request that last wrote it (mode hit / r)
    writer_step INTEGER,                    -- the server step it wrote it at
    bad_step    INTEGER,                    -- server step the block first held a non-finite value (NULL: never)
    bad_by      TEXT,                       -- who put it there ("req-..-5", "padding lane of req-..-5")
    note        TEXT,                       -- what was wrong with it (an injected server fault), else NULL
    PRIMARY KEY (step, block, mode)
) WITHOUT ROWID;

CREATE VIEW v_tokens AS
SELECT step, pos, token_id, piece, role, logprob FROM tokens ORDER BY seq;

-- bf16 bits of stat k (0 min, 1 max, 2 mean, 3 rms) of every (step, tensor).
CREATE VIEW v_tap_bits AS
SELECT b.step, s.model, t.idx, t.name, t.layer, t.op, s.n_pos * t.width AS n, k.k,
       (SELECT (instr('0123456789ABCDEF', substr(h, 3, 1)) - 1) * 4096 +
               (instr('0123456789ABCDEF', substr(h, 4, 1)) - 1) * 256 +
               (instr('0123456789ABCDEF', substr(h, 1, 1)) - 1) * 16 +
               (instr('0123456789ABCDEF', substr(h, 2, 1)) - 1)
          FROM (SELECT hex(substr(b.stats, t.idx * 8 + k.k * 2 + 1, 2)) AS h)) AS bits
FROM tap_blobs b
JOIN steps s ON s.step = b.step
JOIN tensors t ON t.model = s.model
JOIN (SELECT 0 AS k UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) k;

CREATE VIEW v_tap_vals AS
SELECT step, model, idx, name, layer, op, n, k,
       CASE WHEN (bits >> 7) & 255 = 255 THEN NULL
            WHEN (bits >> 7) & 255 = 0 THEN (1 - 2 * (bits >> 15)) * ((bits & 127) / 128.0) * pow(2, -126)
            ELSE (1 - 2 * (bits >> 15)) * (1 + (bits & 127) / 128.0) * pow(2, ((bits >> 7) & 255) - 127)
       END AS v
FROM v_tap_bits;

CREATE VIEW v_taps AS
SELECT v.step, v.layer, v.op, v.name AS tensor, v.n,
       coalesce(b.nan, 0) AS nan, coalesce(b.pinf, 0) AS pinf, coalesce(b.ninf, 0) AS ninf,
       coalesce(b.min, v.vmin) AS min, coalesce(b.max, v.vmax) AS max,
       max(abs(coalesce(b.min, v.vmin)), abs(coalesce(b.max, v.vmax))) AS absmax,
       coalesce(b.mean, v.vmean) AS mean, coalesce(b.rms, v.vrms) AS rms,
       b.first_bad_index, b.first_bad_pos, v.model, v.idx
FROM (SELECT step, model, idx, name, layer, op, n,
             max(CASE k WHEN 0 THEN v END) AS vmin, max(CASE k WHEN 1 THEN v END) AS vmax,
             max(CASE k WHEN 2 THEN v END) AS vmean, max(CASE k WHEN 3 THEN v END) AS vrms
        FROM v_tap_vals GROUP BY step, model, idx) v
LEFT JOIN tap_bad b ON b.step = v.step AND b.model = v.model AND b.idx = v.idx
ORDER BY v.step, v.idx;

CREATE VIEW v_logits AS
SELECT step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, argmax_triton,
       entropy, topk_ids, topk_vals, rule, chosen
FROM logits ORDER BY step, pos;

CREATE VIEW v_events AS
SELECT step, pos, kind, layer, op, detail, tensor, id FROM events ORDER BY id;

CREATE VIEW v_first_nonfinite AS
SELECT b.step, b.first_bad_pos AS pos, t.layer, t.op, t.name AS tensor, b.first_bad_index,
       b.nan, b.pinf, b.ninf, b.model
FROM tap_bad b
JOIN tensors t ON t.model = b.model AND t.idx = b.idx
ORDER BY b.step, b.idx
LIMIT 1;

CREATE VIEW v_spec_trail AS
SELECT step, draft_pos, draft_token, draft_prob, draft_finite, target_token, target_prob, accepted,
       reason, draft_idx, draft_step
FROM spec_trail ORDER BY step, draft_idx;

CREATE VIEW v_kernels AS
SELECT step, layer, op, name AS kernel, grid, block, registers, shared_bytes AS shared_memory,
       start_ns, end_ns, stream, device, kind, bytes, id
FROM kernels ORDER BY start_ns, id;

CREATE VIEW v_op_timings AS
SELECT o.step, t.layer, t.op, t.name AS tensor, o.start_ns, o.dur_ns, o.model
FROM op_timings o JOIN tensors t ON t.model = o.model AND t.idx = o.idx
ORDER BY o.step, o.start_ns;

CREATE VIEW v_moe_routes AS
SELECT r.step, r.pos, r.layer, r.rank, r.expert, r.weight, r.model,
       'blk.' || r.layer || '.ffn_down.expert[' || r.expert || ']' AS expert_tensor
FROM moe_routes r ORDER BY r.step, r.model, r.pos, r.layer, r.rank;
