/* model_cache.h - the Cache view's model (model_cache.c): a batched
 * server's request trace as KV blocks x steps. One row per block (or
 * recurrent state slot) the request touched, from its kv_access rows, one
 * column per step of the trace, a cell where the request wrote or read
 * that block; the blocks another request wrote, the non-finite ones and
 * those an injected fault touched are marked, the provenance culprit
 * (trace/provenance.h) above. When DIR/server.db lies beside the trace,
 * each marked block is followed there (trace/server_reader.h): the
 * requests that wrote and read it over server steps, so the path writer ->
 * block -> this request shows. Plain structs and text lines, no SQL, no
 * curses; view_cache.c draws them and `browse --dump cache` prints them. */
#ifndef BT_TUI_MODEL_CACHE_H
#define BT_TUI_MODEL_CACHE_H

#include "tui.h"

#define TUI_CACHE_MAX_ACCESS 200000 /* kv_access rows read at most */
#define TUI_CACHE_MAX_HOT 6         /* marked blocks followed into server.db */
#define TUI_CACHE_SPAN 2048         /* server steps of access rows read per block (two halves when longer) */
#define TUI_CACHE_SROWS 4096        /* access / block_events rows read per block and query */
#define TUI_CACHE_MAX_REQS 16       /* requests shown per followed block */
#define TUI_CACHE_LABEL_W 25        /* the label columns of both grids */
#define TUI_CACHE_INFO_MIN 20       /* columns kept for the text after a grid */

/* How the request touched a block (kv_access mode), as a mask. */
enum { TUI_CM_W = 1, TUI_CM_HIT = 2, TUI_CM_R = 4, TUI_CM_SLOT = 8, TUI_CM_SNAP = 16 };
/* Why a block is marked (its row's text marks, in this order: > < ! F). */
enum { TUI_CF_CULPRIT = 1, TUI_CF_OTHER = 2, TUI_CF_BAD = 4, TUI_CF_FAULT = 8 };
/* A server grid cell, by priority: H > ! > W > r > - (alloc, full, cached, free, evict). */
enum { TUI_SM_NONE = 0, TUI_SM_LIFE, TUI_SM_READ, TUI_SM_WRITE, TUI_SM_BAD, TUI_SM_HIT };

typedef struct tui_cache_cell { int step, server_step; unsigned modes; } tui_cache_cell;

typedef struct tui_cache_block {
    int block, logical;
    bool slot;                  /* a state slot (mode slot): block is the slot */
    bool snap;                  /* a state snapshot restored (mode snap): block is the snapshot */
    unsigned modes, flags;      /* TUI_CM_*, TUI_CF_* */
    int first_step, last_step;  /* this trace's steps */
    int first_read;             /* the first step that read it (hit, r, slot), -1 none */
    int read_server;            /* its server step */
    unsigned read_mode;         /* TUI_CM_* of that read */
    int first_server, last_server;
    char writer[64];            /* another request that wrote it, else the last writer named */
    int writer_step;            /* server step, -1 */
    int bad_step;               /* first non-finite server step, -1 */
    char bad_by[96], note[160];
    int c0, nc;                 /* its cells in tui_cache.cells, by step */
} tui_cache_block;

typedef struct tui_cache_mark { int step, mark; } tui_cache_mark;
typedef struct tui_cache_sreq {   /* one request's row in a followed block's server grid */
    char request[64];
    bool self, writer, poisoner;  /* this request; the writer kv_access names; bad_by names it */
    tui_cache_mark *m;            /* by step */
    int n, cap;
    /* first, last server step and count: writes, reads, hits, non-finite
     * or fault events, the other block events (alloc, full, cached, free,
     * evict); -1 / 0 none */
    int w_lo, w_hi, n_w, r_lo, r_hi, n_r, h_lo, h_hi, n_h, b_lo, b_hi, n_b, l_lo, l_hi, n_l;
} tui_cache_sreq;
typedef struct tui_cache_hot {
    int row;                    /* in tui_cache.blocks */
    int lo, hi;                 /* server steps shown */
    int gap_lo, gap_hi;         /* server steps whose access rows were not read (-1: none) */
    bool cut;                   /* a query hit its row limit */
    tui_cache_sreq req[TUI_CACHE_MAX_REQS];
    int n_req, more_req;
    char origin[400];           /* the first inject / nonfinite block event, "" none */
} tui_cache_hot;

/* server.db beside the trace */
enum { TUI_CS_NONE = 0 /* not looked for */, TUI_CS_ABSENT, TUI_CS_OK, TUI_CS_ERROR, TUI_CS_OTHER /* lists not this request */ };

enum { TUI_CL_HEAD, TUI_CL_NOTE, TUI_CL_BAD, TUI_CL_AXIS, TUI_CL_BLOCK, TUI_CL_SEC, TUI_CL_HOT, TUI_CL_SAXIS, TUI_CL_SREQ };
typedef struct tui_cache_line {
    int kind;
    int ref, ref2;              /* BLOCK: block row; HOT, SAXIS: hot; SREQ: hot, request */
    char text[1024];            /* text kinds (wrapped); grid kinds are rendered */
} tui_cache_line;

typedef struct tui_cache {
    char self[64];              /* meta request_id */
    int n_rows;                 /* kv_access rows read (0: not a batched server's trace) */
    bool truncated;             /* more than TUI_CACHE_MAX_ACCESS */
    int min_step, max_step;     /* the grid's columns; -1 when none */
    int server_lo, server_hi;   /* this request's server steps */
    bool contaminated;
    int culprit_step, culprit_row;
    char culprit[640], hits[256];
    tui_cache_block *blocks;
    int n_blocks;
    tui_cache_cell *cells;
    int n_cells;
    int n_marked;               /* blocks with a flag */
    tui_cache_hot *hot;         /* TUI_CACHE_MAX_HOT */
    int n_hot;
    int server;                 /* TUI_CS_* */
    int server_last;            /* server.db's last server step, -1 */
    char server_path[4096 + 16], server_note[4096 + 512];
    tui_cache_line *lines;
    int n_lines, cap_lines, lines_width;
} tui_cache;

/* Read the trace's kv_access rows and the provenance (upto_step >= 0: the
 * culprit among what steps up to it read), then follow the marked blocks
 * into server.db beside the trace when there is one. A trace without
 * kv_access loads empty (n_rows 0); a server.db that cannot be read is a
 * note (server_note), never an error. Builds the lines unwrapped. */
int tui_cache_load(tui_trace *tr, int upto_step, tui_cache *out);
void tui_cache_free(tui_cache *c);
/* The lines, text wrapped at width (<= 0: one line each); BT_OK or BT_ENOMEM. */
int tui_cache_build_lines(tui_cache *c, int width);
/* One line as text: a grid line laid out for width columns, the request
 * grid from column col0 (a step offset); the text after a grid is not cut. */
void tui_cache_render(const tui_cache *c, const tui_cache_line *l, int width, int col0, char *buf, size_t cap);
/* The step Enter opens for a block row: its first read, else its first step. */
int tui_cache_row_step(const tui_cache *c, int row);

/* ---- pure ---- */
typedef struct tui_cache_layout { int label_w, grid_w, info_w; } tui_cache_layout;
/* Columns of a grid of n_cols columns in width: the label, the grid (all
 * columns when they fit, else what leaves TUI_CACHE_INFO_MIN for the text,
 * at least 8 and at most what fits) and the text after it. */
void tui_layout_cache(int width, int n_cols, tui_cache_layout *l);
/* span server steps into at most max_cols columns: returns the columns,
 * *per_col the steps each covers. */
int tui_cache_bins(int span, int max_cols, int *per_col);
/* The axis over n columns from step first, per_col steps each: one per
 * column, the last digit of its step; with per_col > 1 the step number at
 * every tenth column. NUL-terminated, n characters. */
void tui_cache_axis(int first, int n, int per_col, char *buf, size_t cap);
/* A request grid cell: S slot, P snapshot restored, H hit, W write, r read, '.' none. */
char tui_cache_cell_char(unsigned modes);
/* A server grid cell: H ! W r - and '.' for TUI_SM_NONE. */
char tui_cache_smark_char(int mark);
/* "w,hit,r" from a mode mask. */
void tui_cache_modes_text(unsigned modes, char *buf, size_t cap);

#endif
