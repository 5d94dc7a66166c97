/* records.h - the plain records every layer shares: a tensor's tap
 * statistics and a logit row's summary (computed by kernels/cpu/stats.c and
 * src/tap/stats.c, stored by src/trace/, shown by tui/), a mutation (an --inject spec applied to one
 * tensor, by the engine or a backend), a speculative draft's fate and the
 * trace file's identity. Data only: no function is declared here. */
#ifndef BT_RECORDS_H
#define BT_RECORDS_H

#include <stdint.h>
#include <stdbool.h>

/* One tensor's statistics: NaN / +Inf / -Inf counts, min, max, mean and rms
 * over the finite values, and the first non-finite element. */
typedef struct bt_tap_stats {
    int64_t n;                /* elements (rows * width) */
    int64_t nan, pinf, ninf;
    int64_t n_finite;
    float min, max, absmax;   /* over finite values; NAN when none is finite */
    float mean, rms;          /* over finite values; NAN when none is finite */
    int first_bad_index;      /* column (0..width-1) of the first non-finite value, -1 if none */
    int first_bad_pos;        /* its position (pos0 + row), -1 if none */
} bt_tap_stats;

static inline bool bt_stats_bad(const bt_tap_stats *s) { return s->nan | s->pinf | s->ninf; }

/* A finite logit row's softmax sums, bt_softmax_sums_f32's chains with the
 * row's maximum: the sampler takes them for the token's log-probability,
 * and the row's summary reuses them for its entropy instead of a second
 * pass of exponentials over the vocabulary. */
typedef struct bt_softmax_sums {
    float max;
    double z[4], ez[4];
} bt_softmax_sums;

/* Logit row summary for the trace (k <= 64). */
typedef struct bt_logit_summary {
    int n_vocab;
    int64_t nan, pinf, ninf;
    float max;                /* over finite values (NAN if none) */
    int32_t argmax_first, argmax_torch, argmax_triton;
    double entropy;           /* nats of softmax(row); NAN if the row is not finite */
    int k;
    int32_t topk_ids[64];     /* by value, descending; finite values only */
    float topk_vals[64];
} bt_logit_summary;

/* One injection spec applied to one tensor (src/backend/backend.h explains
 * the rectangle and the kinds). */
enum bt_mut_kind { BT_MUT_SET = 0, BT_MUT_SCALE = 1, BT_MUT_NOISE = 2 };

typedef struct bt_mutation {
    int kind;                  /* enum bt_mut_kind */
    float value;               /* value set, scale factor or noise amplitude */
    int row0, row1;            /* rows, 0 <= row0 <= row1 <= rows */
    long col0, col1;           /* columns, 0 <= col0 <= col1 <= width */
    int step, layer, op, pos0; /* the tensor's identity (noise hashes it) */
} bt_mutation;

/* PRAGMA application_id of a bangtrace trace ("BTRC"; set by src/trace/writer.c). */
#define BT_TRACE_APPLICATION_ID 0x42545243
/* PRAGMA application_id of a batched server's DIR/server.db ("BTSV";
 * traces/server_schema.sql). */
#define BT_SERVER_APPLICATION_ID 0x42545356

/* Speculative decoding: one drafted token's fate in a verify step (the
 * decoder reports it, the trace stores it as a spec_trail row). */
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

#endif
