/* stats.h - the logit-row summary taps record (bt_logit_summary,
 * src/base/records.h). A tensor's one-pass statistics, bt_stats_compute, are
 * the CPU kernels' (kernels/cpu/kernels.h). */
#ifndef BT_STATS_H
#define BT_STATS_H

#include <stdint.h>
#include <stdbool.h>

#include "base/records.h"   /* bt_tap_stats, bt_logit_summary */

/* triton_block: the N of the run's rule if it is triton-block, else 1024. */
void bt_logit_summarize(const float *row, int n, int k, int triton_block, bt_logit_summary *out);

#endif
