/* provenance.h - a batched server's request trace (serve --batching on):
 * whose data the request read. Its kv_access rows (traces/schema.sql) say
 * which KV blocks came from the prefix cache, which blocks another request
 * wrote, which of them held a non-finite value and who put it there, and
 * whether the request's recurrent state slot was handed over unreset. For
 * bisect and report: the line that names the writer request and the block
 * or slot behind a finding. */
#ifndef BT_TRACE_PROVENANCE_H
#define BT_TRACE_PROVENANCE_H

#include <stdbool.h>
#include "trace/reader.h"

#define BT_PROV_LINES 8

typedef struct bt_provenance {
    int n_rows;                 /* kv_access rows (0: not a batched server's trace) */
    int hit_tokens;             /* prompt positions served from the prefix cache */
    int n_hit_blocks;
    char hits[256];             /* "positions 0-7 from blocks 0, 1 (written by req-..-1 at step 0)", "" none */
    /* The other requests' data behind the finding, worst first: a kept
     * state slot, a block that held a non-finite value another request put
     * there, a block a fault mapped; "" none. */
    bool contaminated;
    int culprit_step;           /* this trace's step that read it */
    int culprit_block;          /* the block (or, culprit_slot, the state slot) it read; -1 none */
    bool culprit_slot;
    bool culprit_snap;          /* ... or a recurrent state snapshot restored on a prefix hit */
    char culprit[640];
    /* every such source, for report */
    int n_lines;
    char lines[BT_PROV_LINES][512];
} bt_provenance;

/* Read the trace's kv_access rows. upto_step >= 0: only what steps up to
 * it read (the finding's step). layer >= 0 is named in the culprit line
 * ("step 0, layer 4: read KV block 12 ..."). */
int bt_provenance_get(bt_trace_reader *r, int upto_step, int layer, bt_provenance *out);

#endif
