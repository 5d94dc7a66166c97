/* model_impl.h - the tui_trace handle, shared by tui/model_*.c only (it is
 * the one place in tui/ that sees sqlite3 types). */
#ifndef BT_TUI_MODEL_IMPL_H
#define BT_TUI_MODEL_IMPL_H

#include "tui.h"
#include <sqlite3.h>

/* Every query the browser runs, prepared at open so that a foreign or
 * damaged schema is reported before curses starts. Each is an indexed
 * lookup or a bounded range (the comment names the index). */
enum tui_query {
    Q_TOK_WINDOW,       /* tokens by seq range (rowid) */
    Q_TOK_RUN_END,      /* first seq after a run: rowid scan bounded by the run */
    Q_TOK_RUN_START,
    Q_TOK_COUNT_RANGE,  /* rows and step span in a seq range (rowid) */
    Q_TOK_SEARCH_FWD,   /* piece contains needle, seq > ? (rowid scan to the match) */
    Q_TOK_SEARCH_BACK,
    Q_TOK_STEP_SEQ,     /* first seq of a step (tokens_step) */
    Q_TOK_STEP_GEN,     /* token a step produced (tokens_step) */
    Q_TOK_PIECES,       /* ids and pieces in a seq range (rowid) */
    Q_LOGITS_BAD_RANGE, /* steps with non-finite logits in a step range (logits pk) */
    Q_EVENTS_DEGEN,     /* repetition_loop / token_wall events in a step range (events_kind) */
    Q_STEP,             /* steps pk */
    Q_BLOB,             /* tap_blobs pk */
    Q_BLOB_AT_OR_AFTER, /* median sampling: first blob of a model at step >= ? */
    Q_BAD_STEP,         /* tap_bad rows of a step (pk prefix) */
    Q_LOGITS_STEP,      /* logits pk */
    Q_BAD_FIRST_STEP,   /* min(step) in tap_bad (pk) */
    Q_BAD_LAST_STEP,
    Q_BAD_NEXT_STEP,    /* first tap_bad step > ? */
    Q_EVENT_FIRST,      /* first event of a kind (events_kind) */
    Q_META,
    Q_EVENTS,
    Q_BACKTRACES,
    Q_LOGITS_AT,        /* one logits row of a step (logits pk) */
    Q_TOK_STEP_POS_GEN, /* output token of a step at a position (tokens_step) */
    Q_COUNT
};

/* Speculative tables: prepared only when spec_steps exists (older traces
 * have none and are simply not speculative). */
enum tui_spec_query {
    SQ_FIRST,           /* first / last verify step (spec_steps pk) */
    SQ_LAST,
    SQ_ROWS_FWD,        /* verify steps from a step on (pk range) */
    SQ_ROWS_BACK,
    SQ_TRAIL,           /* spec_trail rows of a step range (pk range) */
    SQ_SAMPLE,          /* accepted, k of a window's first verify steps (pk range) */
    SQ_HEAD,            /* step, accepted, k of the first verify steps (pk order, bounded) */
    SQ_REJECT_FWD,      /* next verify step with a rejected draft (pk scan to the match) */
    SQ_REJECT_BACK,
    SQ_META_KEY,        /* one meta value (meta pk) */
    SQ_COUNT
};

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
    sqlite3 *db;
    char *path;
    sqlite3_stmt *q[Q_COUNT];
    tui_model_tab models[4];
    int n_models;
    int min_step, max_step;         /* -1 when there are no steps */
    int64_t min_seq, max_seq;       /* -1 when there are no tokens */
    tui_piece_ent *pieces;          /* open addressing, PIECE_CAP entries */
    int n_pieces;
    int64_t pieces_lo, pieces_hi;   /* seq range already harvested */
    sqlite3_stmt *sq[SQ_COUNT];     /* NULL when the trace has no spec_steps table */
    int spec_state;                 /* 0 unknown, 1 speculative, -1 not */
};
sqlite3_stmt *tui_sq(tui_trace *tr, int q);

/* Reset and bind helpers; they return the statement. */
sqlite3_stmt *tui_q(tui_trace *tr, int q);
/* bt_error(BT_EIO) naming the trace and the SQLite message. */
int tui_db_error(tui_trace *tr, const char *what);
tui_model_tab *tui_model_tab_get(tui_trace *tr, const char *model);
/* Remember pieces of ids seen in token rows (for top-k labels). */
void tui_piece_put(tui_trace *tr, int id, const char *piece, int len);
/* Decode the slots of a blob into taps (present/min/max/mean/rms/absmax). */
void tui_blob_decode(const void *blob, int bytes, tui_tap *taps, int n_slots);

#endif
