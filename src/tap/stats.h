/* stats.h - one-pass tensor statistics for taps.
 *
 * A single sweep over data that was just written (still in cache) counts
 * NaN / +Inf / -Inf and accumulates min, max, sum and sum of squares over the
 * finite values, and remembers the first non-finite element. */
#ifndef BT_STATS_H
#define BT_STATS_H

#include <stdint.h>
#include <stdbool.h>

typedef struct bt_tap_stats {
    int64_t n;                /* elements (rows * width) */
    int64_t nan, pinf, ninf;
    int64_t n_finite;
    float min, max, absmax;   /* over finite values; NAN when none is finite */
    float mean, rms;          /* over finite values; NAN when none is finite */
    int first_bad_index;      /* column (0..width-1) of the first non-finite value, -1 if none */
    int first_bad_pos;        /* its position (pos0 + row), -1 if none */
} bt_tap_stats;

void bt_stats_compute(const float *x, int rows, int width, int pos0, bt_tap_stats *out);
static inline bool bt_stats_bad(const bt_tap_stats *s) { return s->nan | s->pinf | s->ninf; }

/* bfloat16 with round-to-nearest-even (the trace's packed stats); NaN in,
 * 0x7fc0 out. bt_bf16_round(x) = the float the trace will give back. */
uint16_t bt_f32_to_bf16(float x);
float bt_bf16_round(float x);

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

/* triton_block: the N of the run's rule if it is triton-block, else 1024. */
void bt_logit_summarize(const float *row, int n, int k, int triton_block, bt_logit_summary *out);

#endif
