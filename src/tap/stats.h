/* stats.h - the logit-row summary taps record (bt_logit_summary,
 * src/base/records.h). A tensor's one-pass statistics, bt_stats_compute, are
 * the CPU kernels' (kernels/cpu/kernels.h). */
#ifndef BT_STATS_H
#define BT_STATS_H

#include <stdint.h>
#include <stdbool.h>

#include "base/records.h"   /* bt_tap_stats, bt_logit_summary */

/* Fold b into a: two views of one tensor slot (a mixture-of-experts op's
 * experts, each over the rows routed to it). Counts add, min/max/absmax
 * widen, mean and rms combine by their finite counts; the first non-finite
 * value is b's only when it sits at a lower position (a tie keeps a's, the
 * earlier observation). Returns whether b's first non-finite was taken. */
bool bt_tap_stats_merge(bt_tap_stats *a, const bt_tap_stats *b);

/* triton_block: the N of the run's rule if it is triton-block, else 1024.
 * sums: the row's softmax sums when the sampler took them (else NULL):
 * the entropy comes from them, the bits a pass of its own gives. */
void bt_logit_summarize(const float *row, int n, int k, int triton_block, const bt_softmax_sums *sums,
                        bt_logit_summary *out);

#endif
