/* model_impl.h - the tui_trace handle, shared by tui/model_*.c only.
 *
 * The model layer holds no SQL: every read goes through the trace reader
 * (src/trace/reader.h) and the analysis (src/trace/analyze.h), which own
 * the queries, the packed-statistics decoder and the walk-back rule. */
#ifndef BT_TUI_MODEL_IMPL_H
#define BT_TUI_MODEL_IMPL_H

#include "tui.h"
#include "trace/reader.h"

#include <math.h>

typedef struct tui_model_tab {
    char name[16];
    tui_tensor *t;
    int n;                  /* tensors; t[i].idx == i is not assumed */
    int n_slots;            /* max idx + 1 */
    int *slot;              /* idx -> position in t, -1 */
    tui_grid grid;
    float *median;          /* n_slots, lazily */
} tui_model_tab;

typedef struct tui_piece_ent { int id; int len; char *piece; } tui_piece_ent;

struct tui_trace {
    bt_trace_reader *r;
    tui_model_tab models[4];
    int n_models;
    int min_step, max_step;         /* -1 when there are no steps */
    int64_t min_seq, max_seq;       /* -1 when there are no tokens */
    tui_piece_ent *pieces;          /* open addressing, PIECE_CAP entries */
    int n_pieces;
    int64_t pieces_lo, pieces_hi;   /* seq range already harvested */
    int spec_state;                 /* 0 unknown, 1 speculative, -1 not */
};

/* absmax of a tap from its min and max; NAN when either is unknown. */
static inline float tui_absmax(double min, double max)
{
    return isnan(min) || isnan(max) ? NAN : (float)fmax(fabs(min), fabs(max));
}

tui_model_tab *tui_model_tab_get(tui_trace *tr, const char *model);
/* Remember pieces of ids seen in token rows (for top-k labels). */
void tui_piece_put(tui_trace *tr, int id, const char *piece, int len);

#endif
