/* headroom.h - how far a traced run sits from overflowing a narrower float
 * format. Every tap stores its tensor's absmax (bf16-rounded, so a ratio is
 * good to about 0.4%); this module folds them, step by step, into the
 * largest absmax per (op, layer), the first tap whose headroom against a
 * limit (by default the f16 maximum) fell under 2x and under 1x, and the
 * per-layer maxima (growth across layers). Read through the reader only.
 *
 * A tap holding +-Inf counts as headroom 0 (it already overflowed); NaN-only
 * taps and unrecorded slots are skipped. */
#ifndef BT_HEADROOM_H
#define BT_HEADROOM_H

#include <stdbool.h>
#include "trace/reader.h"

#define BT_F16_MAX 65504.0
#define BT_BF16_MAX 3.3895313892515355e38

/* One tap: where a value was seen. */
typedef struct bt_headroom_at {
    int step, pos0, n_pos, layer;   /* layer -1 outside layers */
    char tensor[64], op[32], model[16];
    double absmax;                  /* INFINITY: the tap held +-Inf */
} bt_headroom_at;

typedef struct bt_headroom {
    bool present;                   /* at least one recorded tap */
    double limit;                   /* what headroom is measured against */
    bool user_limit;                /* limit came from the caller, not BT_F16_MAX */
    bt_headroom_at worst;           /* largest absmax of the run (first such tap) */
    bool has_under2, has_under1;
    bt_headroom_at under2, under1;  /* first tap (step, then slot) with absmax > limit/2, > limit */
    int n_layers;
    double *layer_max;              /* (n_layers) largest absmax of any op of the layer; malloc'd */
    double embd_max;                /* token_embd (NAN if not tapped) */
    /* (op, layer) maxima in slot order of the target's tensors */
    int n_cells;
    bt_headroom_at *cells;          /* malloc'd */
} bt_headroom;

/* Fold every step of the trace. limit <= 0 means BT_F16_MAX. *out is
 * cleared first; free it with bt_headroom_clear. BT_OK or the reader's
 * BT_E*. A trace with no taps gives present = false. */
int bt_headroom_analyze(bt_trace_reader *r, double limit, bt_headroom *out);
void bt_headroom_clear(bt_headroom *h);

/* Headroom of an absmax against the limit: limit / absmax (INFINITY for 0). */
double bt_headroom_ratio(const bt_headroom *h, double absmax);
/* The one-line verdict bisect and report print (no newline), e.g.
 * "f16-safe: worst blk.1.ffn_down absmax 9,812 = 15% of f16 max (headroom 6.7x)"
 * or "would overflow in f16 at blk.2.ffn_down, step 0, positions 0-4 (...)". */
void bt_headroom_verdict(const bt_headroom *h, char *buf, size_t cap);
/* The growth line: "absmax by layer: 12 -> 35 -> ... (x1,300 from layer 0 to 5)". */
void bt_headroom_growth(const bt_headroom *h, char *buf, size_t cap);
/* Severity of an absmax against the limit for colouring: 0 under half the
 * limit, 1 between half and the limit, 2 past it (or Inf). */
int bt_headroom_level(double absmax, double limit);

#endif
