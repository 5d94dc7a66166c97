/* tui.h - the trace browser's internal interface (`bangtrace browse`).
 *
 * Three layers, as in htop: the model (model_*.c) asks the trace reader and
 * the analysis (src/trace/) for rows and fills the plain structs below; the views (view_*.c)
 * draw those structs with curses; keys.c maps key codes to actions and the
 * views answer actions with reaction flags. Layout arithmetic, run
 * collapsing, colouring decisions, sanitization and navigation are pure
 * functions (layout.c, sanitize.c) so tests/test_tui.c checks them without a
 * terminal.
 *
 * Invariant: no screen ever reads a whole table. Tokens are read in windows
 * of TUI_TOK_WINDOW rows by seq, a step is one tap_blobs row plus its tap_bad
 * and logits rows, medians come from at most TUI_MEDIAN_SAMPLES blobs, so a
 * 1 GB trace opens as fast as a small one.
 *
 * No sqlite3 or curses type appears here: tui_trace is opaque and views
 * draw on stdscr. */
#ifndef BT_TUI_H
#define BT_TUI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tap/detect.h"
#include "trace/reader.h"
#define TUI_TOK_WINDOW 2048             /* token rows per window */
#define TUI_RUN_MIN 2                   /* repeats that collapse into one cell */
#define TUI_WALL_MIN BT_DETECT_WALL_MIN /* run length the token_wall detector flags */
#define TUI_MEDIAN_SAMPLES 200          /* blobs sampled for per-tensor medians */
#define TUI_HOT_FACTOR 8.0f             /* absmax this far above the median is "hot" */
#define TUI_CHAIN_STEPS 12              /* steps after the first bad one in the chain */
#define TUI_MAX_LAYERS BT_TRACE_MAX_LAYERS   /* the reader refuses more (trace/reader.h) */

/* ---- health: the colouring decisions ---- */
enum tui_health {
    TUI_H_NONE = 0,     /* nothing recorded (untapped op) */
    TUI_H_CLEAN,        /* green / '.' */
    TUI_H_WARN,         /* yellow / '~': degenerate token, or absmax far above median */
    TUI_H_BAD,          /* red / '!': non-finite */
};
char tui_health_marker(int health);

/* ---- text: sanitization and display width ---- */
enum {
    TUI_SAN_UTF8 = 1,       /* pass printable UTF-8 through (else escape bytes >= 0x80) */
    TUI_SAN_SHOWSPACE = 2,  /* show ' ' as a middle dot (UTF-8) or '_' */
};
/* Render src[0..len) so it cannot drive a terminal: C0/C1 controls, DEL, ESC,
 * bidi overrides and invalid UTF-8 become visible escapes (\x1b, \n, \r, \t,
 * \u202e), backslash becomes \\. Writes at most cap-1 bytes plus NUL (never
 * cutting an escape or a character) and at most max_cols display columns
 * (<= 0: unlimited). Returns the display columns written. */
int tui_sanitize(const char *src, size_t len, char *dst, size_t cap, int max_cols, unsigned flags);
/* Display columns of an already sanitized (or plain ASCII/UTF-8) string. */
int tui_text_width(const char *s);
/* Copy at most max_cols columns of a sanitized string into dst. */
int tui_text_fit(const char *s, char *dst, size_t cap, int max_cols);
/* s (sanitized) in at most max_lines lines of at most width columns, broken
 * at spaces where there is one (else mid-word); when text is left over the
 * last line ends in "...". out[i] point into buf. Returns the line count. */
int tui_wrap(const char *s, int width, int max_lines, char *buf, size_t cap, const char **out);
/* One link of the walk-back list: "step 9    L03 ffn_gate    1 NaN     origin;
 * 4 bad in layer"; compact (the list beside a grid on a narrow screen):
 * "9    L03 ffn_gate  1 NaN   origin; 4 bad" under a "step tensor bad how"
 * heading. Either is cut with "..." to width columns. */
void tui_walk_line(char *buf, size_t cap, int width, bool compact, int step, const char *where, const char *counts,
                   const char *note);
/* The tab bar in width columns: 0 when every view's full title fits after
 * the brand (brand_w columns), 1 when only the short titles do, 2 when only
 * the keys do (the current view keeps its short title). */
int tui_tabs_level(int width, int brand_w, int current);
/* Columns of every tab at a level (no brand). */
int tui_tabs_width(int level, int current);
/* The label of view i's tab at a level (" 3 Walk-back ", " 3 Walk ", " 3 ") into buf. */
void tui_tab_label(int i, int level, int current, char *buf, size_t cap);
/* "1 NaN", "3 NaN, 2 +Inf", "0 non-finite" into buf. */
void tui_fmt_bad_counts(char *buf, size_t cap, int64_t nan, int64_t pinf, int64_t ninf);

/* ---- tensors and the layer x op grid ---- */
typedef struct tui_tensor {
    int idx;                /* slot in the step blob */
    int layer;              /* -1 outside layers */
    int width;
    char name[64];
    char op[32];
} tui_tensor;

/* Rows: [pre] (non-layer tensors before the layers), one per layer, [post].
 * Columns: the distinct ops of layer tensors in forward order. In the pre
 * and post rows column c is simply the c-th such tensor. */
typedef struct tui_grid {
    int n_rows, n_cols;
    int layer0;             /* layer of the first layer row */
    bool has_pre, has_post;
    char ops[32][32];       /* column op names (max 32 columns) */
    int *cell;              /* n_rows * n_cols tensor idx, -1 if none */
    int *row_layer;         /* layer of each row, -1 for pre/post */
    char (*row_label)[8];   /* "L03", "in", "out" */
} tui_grid;
int tui_grid_build(const tui_tensor *t, int n, tui_grid *g);
void tui_grid_free(tui_grid *g);
/* Row and column of tensor idx; false if it is not on the grid. */
bool tui_grid_find(const tui_grid *g, int idx, int *row, int *col);
/* Short column header for an op ("gate", "ctx", ...) of at most max chars. */
void tui_op_abbrev(const char *op, char *buf, int max);

/* ---- tokens: windows and run collapsing ---- */
typedef struct tui_tok {        /* one row of the tokens table */
    int64_t seq;
    int step, pos, id;
    char role;                  /* 'p' prompt, 'g' gen, 'd' draft, 'b' bonus */
    const char *piece;          /* borrowed; NULL after redaction */
    int piece_len;
} tui_tok;

typedef struct tui_cell {       /* one screen cell: a token or a run of one token */
    int64_t seq0, seq1;         /* first and last seq */
    int step0, step1;
    int pos0;
    int id;
    char role;
    int64_t count;
    int health;
    char text[112];             /* sanitized piece, plus " x412" for a run */
    int width;                  /* display columns of text */
} tui_cell;

/* Collapse consecutive rows with the same id, both prompt or both output
 * (gen and bonus are both output), into cells (runs of at
 * least min_run rows; shorter runs stay one cell per row). cells must hold n
 * entries. Returns the number of cells. Texts are left empty. */
int tui_collapse(const tui_tok *t, int n, int min_run, tui_cell *cells);
/* Horizontal scrolling of one long line: off moved by delta and clamped so
 * that the text (total columns) still fills a width-column field; 0 when it
 * fits. */
int tui_hscroll(int off, int delta, int total, int width);
/* The part of a sanitized string after its first cols display columns. */
const char *tui_text_skip(const char *s, int cols);
/* A piece for a narrow column: sanitized, in quotes ('·Paris'), except a
 * special token such as <|im_start|> or <s>, which delimits itself and is
 * shown bare so that it fits whole; a piece longer than max_cols ends in
 * '~' so a cut is never silent. Returns the display columns written. */
int tui_piece_label(const char *piece, int len, char *buf, size_t cap, int max_cols, unsigned san_flags);
/* Fill cell->text and cell->width from a piece (sanitized) and the count. */
void tui_cell_set_text(tui_cell *c, const char *piece, int piece_len, unsigned san_flags);

typedef struct tui_tokens {
    tui_cell *cells;
    int n, cap;
    int64_t lo, hi;             /* seq range covered */
    int64_t min_seq, max_seq;   /* of the whole trace (-1 when empty) */
} tui_tokens;
void tui_tokens_free(tui_tokens *tk);
/* Index of the cell holding seq (nearest when seq falls outside). */
int tui_tokens_find(const tui_tokens *tk, int64_t seq);

/* ---- layout (pure) ---- */
typedef struct tui_rect { int y, x, h, w; } tui_rect;
typedef struct tui_screen {
    tui_rect header, body, status;
    bool too_small;             /* below 40x10: draw a notice only */
} tui_screen;
void tui_layout_screen(int rows, int cols, tui_screen *s);

typedef struct tui_step_layout {
    tui_rect logits, grid, detail;
    int cell_w;                 /* columns per grid cell (>= 2) */
    int label_w;                /* row label width */
    int grid_rows_visible;      /* layer rows that fit under the header */
} tui_step_layout;
void tui_layout_step(const tui_rect *body, int n_cols, tui_step_layout *l);

typedef struct tui_spec_layout {
    tui_rect summary;           /* drafter, k, acceptance (1 line) */
    tui_rect spark;             /* label + sparkline + caret line (2 lines) */
    int spark_x, spark_w;       /* the sparkline's own columns */
    tui_rect list;              /* header line + one line per verify step */
    tui_rect detail;            /* the selected verify step, one line per draft */
} tui_spec_layout;
/* k: drafts per verify step (the detail pane gets k + 2 lines when it fits). */
void tui_layout_spec(const tui_rect *body, int k, tui_spec_layout *l);
/* First visible row so that cur stays in a window of vis rows. */
int tui_scroll_follow(int top, int cur, int vis, int n);

/* Greedy flow of cells with one space between them: line and column of each
 * cell. Cells wider than width get a line of their own (truncated on
 * screen). Returns the number of lines. */
int tui_flow_layout(const int *widths, int n, int width, int *line, int *col);
/* Cell to move to from cur one line up (dir -1) or down (+1), keeping the
 * column; -1 when there is no such line. */
int tui_flow_vertical(const int *line, const int *col, int n, int cur, int dir);
/* clamp(cur + delta, 0, n-1) (0 when n == 0). */
int tui_nav_clamp(int cur, int delta, int n);

/* ---- the trace (model) ---- */
typedef struct tui_trace tui_trace;

/* Open read-only with the trace reader (bt_trace_open: application_id,
 * user_version, meta, every reader query) and prepare every query the
 * browser needs (bt_trace_browse_check), so a foreign schema fails now,
 * before curses. BT_EFORMAT / BT_EUNSUPPORTED / BT_EIO with a one-line
 * message naming the file. */
int tui_trace_open(const char *path, tui_trace **out);
void tui_trace_close(tui_trace *tr);
const char *tui_trace_path(const tui_trace *tr);
void tui_trace_bounds(const tui_trace *tr, int *min_step, int *max_step, int64_t *min_seq, int64_t *max_seq);
/* The tensor table and grid of a model ("target", "draft"); NULL if none. */
const tui_grid *tui_trace_grid(tui_trace *tr, const char *model);
/* Median absmax per tensor slot over up to TUI_MEDIAN_SAMPLES evenly spaced
 * steps (computed once, cached); NAN where unknown. */
const float *tui_trace_medians(tui_trace *tr, const char *model);
/* Piece of a token id seen near seq (a bounded lookup, cached); NULL if the
 * id was not seen. *len gets the byte length. */
const char *tui_trace_piece(tui_trace *tr, int id, int64_t near_seq, int *len);
/* Seq of the first token row of a step (-1 if none). */
int64_t tui_trace_step_seq(tui_trace *tr, int step);

/* Load the window of cells around seq (collapsed, sanitized, with health). */
int tui_tokens_load(tui_trace *tr, int64_t seq, unsigned san_flags, tui_tokens *tk);
/* Next (dir +1) or previous (-1) seq after `from` whose piece contains
 * needle, wrapping around; -1 if none. */
int64_t tui_tokens_search(tui_trace *tr, int64_t from, const char *needle, int dir);

typedef struct tui_tap {
    int idx, layer;
    const char *name, *op;      /* borrowed from the tensor table */
    bool present;               /* recorded at this step */
    int64_t n, nan, pinf, ninf;
    float min, max, absmax, mean, rms;   /* over finite values; NAN if none */
    int first_bad_index, first_bad_pos;  /* -1 if none */
    float median;               /* absmax median over the trace */
    int health;
} tui_tap;
/* The colouring decision for a tap. */
int tui_tap_health(bool present, int64_t nan, int64_t pinf, int64_t ninf, float absmax, float median);
/* The same cell coloured by f16 headroom (key H): bad past 65504, or when
 * it holds +-Inf or NaN (an all-NaN tap has no finite absmax: it is
 * non-finite, never safe), warn past half of it, clean below
 * (trace/headroom.h's levels). */
int tui_headroom_health(bool present, int64_t nan, int64_t pinf, int64_t ninf, float absmax);

typedef struct tui_logits {
    bool present;
    int pos, n_vocab;
    int64_t nan, pinf, ninf;
    double max, entropy;        /* NAN when absent */
    int argmax[3];              /* first, torch, triton; -1 if NULL */
    char rule[32];
    int chosen;                 /* -1 if unknown */
    double chosen_logprob;      /* NAN if unknown */
    int k;
    int ids[64];
    double vals[64];
    double probs[64];
    bool probs_exact;           /* from the chosen token's logprob; else renormalized over top-k */
} tui_logits;

typedef struct tui_step {
    int step;
    bool present;
    char model[16], kind[16];
    int pos0, n_pos;
    double ms;
    tui_logits lg;
    int n_taps;                 /* = tensors of the model */
    tui_tap *taps;              /* indexed by slot */
    int n_bad, n_warn;
    int64_t seq;                /* first token row of the step, -1 if none */
} tui_step;
int tui_step_load(tui_trace *tr, int step, tui_step *out);
/* Mixture of experts: the routes of a step (model_step.c), in (model, pos,
 * layer, rank) order; *out is malloc'd (free()), *n 0 for a dense model. */
typedef struct tui_route {
    int pos, layer, rank, expert;
    double weight;
    bool draft;
} tui_route;
int tui_step_routes(tui_trace *tr, int step, tui_route **out, int *n);
void tui_step_free(tui_step *s);

typedef struct tui_link {       /* one link of the propagation chain */
    int step, layer, idx;
    char model[16];
    char tensor[64], op[32];
    int64_t n, nan, pinf, ninf;
    int first_bad_index, first_bad_pos;
    char note[64];
} tui_link;
typedef struct tui_walk {
    bool found;
    tui_link *links;            /* links[0] is the first non-finite tap */
    int n;
    char summary[400];          /* "step 9, layer 3, ffn_gate: 1 NaN of 172 (index 5)" */
    char extent[160];           /* "non-finite taps in steps 9..58" */
    char argmax_note[256];      /* argmax_fallthrough event detail, if any */
    char source[32];            /* "tap_bad" or "events" */
} tui_walk;
int tui_walk_load(tui_trace *tr, tui_walk *w);
void tui_walk_free(tui_walk *w);

typedef struct tui_kv { char *key, *value; } tui_kv;
typedef struct tui_event {
    int64_t id;
    int step, pos, layer;       /* -1 when NULL */
    char kind[32], op[32], tensor[64];
    char *detail;
} tui_event;
typedef struct tui_frames {
    int64_t id, event_id;
    int step;
    char kind[32];
    char *frames;
} tui_frames;
typedef struct tui_run {
    tui_kv *meta; int n_meta;
    tui_event *events; int n_events;
    bool events_truncated;
    tui_frames *bts; int n_bts;
} tui_run;
#define TUI_MAX_EVENTS 2000
int tui_run_load(tui_trace *tr, tui_run *r);
void tui_run_free(tui_run *r);
const char *tui_run_meta(const tui_run *r, const char *key);

/* ---- speculation (spec_steps / spec_trail) ---- */
#define TUI_SPEC_MAXK 32            /* drafted tokens shown per verify step */
#define TUI_SPARK_BUCKETS 256       /* step windows of the acceptance series */
#define TUI_SPARK_SAMPLE 64         /* verify steps read per window at most */

/* What happened to one drafted token (its mark on screen and in dumps). */
enum tui_spec_mark {
    TUI_SM_ACCEPT = 0,      /* '+': the target agreed (match, accept p/q) */
    TUI_SM_REJECT,          /* 'x': the first disagreement (mismatch, reject p/q) */
    TUI_SM_AFTER_REJECT,    /* '-': drafted after a rejection, never judged (greyed) */
    TUI_SM_AFTER_STOP,      /* 's': drafted after the accepted stop token (greyed) */
};
int tui_spec_mark(bool accepted, const char *reason);
char tui_spec_mark_char(int mark);
const char *tui_spec_mark_name(int mark);  /* "accepted", "REJECTED", "after_reject", "after_stop" */
/* Sparkline level 0..7 of a rate in [0, 1] (clamped); -1 for NAN (no data). */
int tui_spark_level(double rate);
/* The glyph of a level: U+2581..U+2588 when utf8, else one of "_.:-=+*#";
 * " " for -1. */
const char *tui_spark_glyph(int level, bool utf8);
/* Re-bin n windows (accepted / drafted counts) into cols columns: rate per
 * column, NAN where a column has nothing drafted. With cols > n a window
 * spans several columns. */
void tui_spark_rebin(const int64_t *acc, const int64_t *drafted, int n, int cols, double *rate);
/* Render rates as a sparkline into buf (NUL-terminated); returns columns. */
int tui_spark_render(const double *rate, int cols, bool utf8, char *buf, size_t cap);
/* Column (0..cols-1) of a window index when n windows span cols columns. */
int tui_spark_col(int window, int n, int cols);

typedef struct tui_spec_draft {     /* one spec_trail row */
    int idx, pos;
    int draft_step;                 /* -1: none (n-gram) */
    int draft_token, target_token;  /* target -1: not recorded */
    double draft_prob, target_prob; /* NAN: not recorded */
    bool draft_finite, accepted;
    char reason[24];
    int mark;                       /* enum tui_spec_mark */
} tui_spec_draft;

typedef struct tui_spec_row {       /* one verify step: spec_steps + its trail */
    int step;
    char drafter[24];
    int k, accepted;
    int bonus_token;                /* -1: none (generation stopped) */
    char bonus_kind[16];            /* correction | bonus | none */
    int n;                          /* drafts loaded (<= TUI_SPEC_MAXK) */
    tui_spec_draft d[TUI_SPEC_MAXK];
    int reject_at;                  /* index in d of the rejection, -1 none */
} tui_spec_row;

typedef struct tui_spec_info {
    bool present;                   /* spec tables with at least one verify step */
    int min_step, max_step;         /* first and last verify step */
    char drafter[24];               /* meta drafter, else the first row's */
    int spec_k;                     /* meta spec_k, else the first row's k */
    /* acceptance over time: up to TUI_SPARK_BUCKETS windows of consecutive
     * verify steps (every one read, when there are at most BUCKETS * SAMPLE),
     * else of equal step spans over [min_step, max_step], each read with a
     * bounded pk-range query (at most TUI_SPARK_SAMPLE verify steps) */
    int n_win;
    int win_lo[TUI_SPARK_BUCKETS];
    int64_t win_acc[TUI_SPARK_BUCKETS], win_drafted[TUI_SPARK_BUCKETS];
    int64_t tot_acc, tot_drafted, tot_rows;
    bool exact;                     /* every verify step was counted (no window was cut) */
} tui_spec_info;

/* Presence and the acceptance series; BT_OK with present = false for a
 * trace without speculation. */
int tui_spec_info_load(tui_trace *tr, tui_spec_info *si);
/* Window index of a step in the series (clamped). */
int tui_spec_window_of(const tui_spec_info *si, int step);
/* Up to max verify steps starting at the first one >= from (dir +1) or
 * ending at the last one <= from (dir -1), in step order, trails included.
 * *n gets the count. */
int tui_spec_rows_load(tui_trace *tr, int from, int dir, tui_spec_row *rows, int max, int *n);
/* The verify step `step` exactly; BT_ENOTFOUND if it is not one. */
int tui_spec_row_load(tui_trace *tr, int step, tui_spec_row *row);
/* The verify step after (dir +1) / before (-1) `step`, -1 if none; with
 * rejects_only the next one holding a rejected draft. */
int tui_spec_neighbor(tui_trace *tr, int step, int dir, bool rejects_only);
/* The verify step `count` verify steps after/before `step` (clamped to the
 * last one that exists). */
int tui_spec_skip(tui_trace *tr, int step, int count);
/* Replace a step's logit snapshot with the row at pos (a verify step has one
 * per target row used); BT_ENOTFOUND when that row was not recorded. */
int tui_step_logits_at(tui_trace *tr, tui_step *st, int pos);
/* True when the trace has speculative tables with rows (cheap, cached). */
bool tui_trace_is_spec(tui_trace *tr);

/* ---- keys and actions ---- */
enum tui_action {
    TUI_A_NONE = 0,
    TUI_A_UP, TUI_A_DOWN, TUI_A_LEFT, TUI_A_RIGHT,
    TUI_A_PGUP, TUI_A_PGDN, TUI_A_FIRST, TUI_A_LAST,
    TUI_A_SEARCH, TUI_A_ENTER, TUI_A_BACK, TUI_A_QUIT, TUI_A_HELP,
    TUI_A_NEXT_VIEW, TUI_A_PREV_VIEW, TUI_A_VIEW,   /* VIEW: arg = registry index */
    TUI_A_WALK, TUI_A_NEXT, TUI_A_PREV, TUI_A_HEADROOM, TUI_A_RESIZE,
    TUI_A_COUNT
};
/* Action of a key code (curses KEY_* or a character); *arg gets the view
 * index for TUI_A_VIEW. */
int tui_key_action(int key, int *arg);
const char *tui_action_name(int action);
/* Help lines ("key  what it does"), NULL-terminated. */
const char *const *tui_key_help(void);

/* Reaction flags returned by actions. */
enum { TUI_R_NONE = 0, TUI_R_REDRAW = 1, TUI_R_QUIT = 2, TUI_R_SWITCH = 4 };

/* ---- the application state shared by views ---- */
#define TUI_MAX_VIEWS 16            /* rows of tui_views[] at most (app.c checks) */
typedef struct tui_app {
    tui_trace *tr;
    unsigned san;               /* sanitize flags for this terminal */
    bool color;
    int rows, cols;
    int view, prev_view[16], n_prev;
    bool help;
    bool headroom;              /* grid coloured by f16 headroom instead of health */
    char status[512];
    char search[128];
    /* What several views share: the tokens cursor (Tokens, Enter from Step
     * and Walk-back, the walk-back jump), the selected step and tensor
     * (Step, Walk-back, Kernels, Speculation's Enter), the walk-back chain
     * and its selected link (Walk-back, Kernels, the jump), the run's
     * metadata (Run, Backtrace). A view's own state (scroll positions, its
     * private model) is in view_state[], owned by the view. */
    tui_tokens tk;
    int64_t tok_seq;            /* cursor: seq0 of the selected cell */
    int step;                   /* selected step */
    int sel_idx;                /* selected tensor slot, -1 none */
    tui_step st;                /* loaded for st.step */
    bool st_valid;
    tui_walk walk;
    bool walk_valid;
    int walk_sel;
    tui_run run;
    bool run_valid;
    void *view_state[TUI_MAX_VIEWS];    /* tui_app_view_state(); freed by tui_app_free */
    /* --dump */
    bool dump_all;              /* tokens: every token, not one window */
    int dump_width;             /* columns for wrapped dump text */
} tui_app;

/* Load lazily what a view needs; BT_OK or an error (shown on the status line). */
int tui_app_step(tui_app *a, int step);
int tui_app_walk(tui_app *a);
int tui_app_run(tui_app *a);
/* Move the tokens cursor to seq (reloading the window when needed). */
int tui_app_goto_seq(tui_app *a, int64_t seq);
/* Select tensor (layer, op) of the current step's model; false if absent. */
bool tui_app_select_tensor(tui_app *a, int layer, const char *op);
/* Initialize an app on an open trace (tokens window at the first token). */
int tui_app_init(tui_app *a, tui_trace *tr, unsigned san, bool color);
void tui_app_free(tui_app *a);

/* ---- the view registry ----
 * A view is a row of tui_views[] (app.c): its name, titles and key, three
 * callbacks (draw and handle in its view_*.c, curses; dump, plain text) and
 * its class, the private half. The app keeps nothing of a view's own: the
 * class says how big its state is and how to start, free and describe it,
 * and the app hands that state to every callback (htop's meters: a struct
 * of callbacks plus a private this). Adding a view is a model file, a view
 * file and a row; none of app.c, keys.c, layout.c, dump.c, browse.c or this
 * header changes. */
typedef struct tui_view_class {
    size_t state_size;          /* calloc'd on first use; 0: the view keeps no state */
    void (*init)(tui_app *a, void *state);             /* NULL: zeroes are the start */
    void (*free)(void *state);                         /* what the state owns (not the state) */
    void (*status)(tui_app *a, void *state, char *buf, size_t cap);   /* status line hint; NULL: generic */
    void (*start)(tui_app *a, void *state, int step);  /* `browse --step S` (interactive); NULL: nothing */
} tui_view_class;
typedef struct tui_view {
    const char *name;           /* for --dump and the tab bar */
    const char *title;
    const char *short_title;    /* the tab bar's when the titles do not fit */
    int key;                    /* number key that selects it */
    void (*draw)(tui_app *a, void *state, const tui_rect *body);            /* curses; NULL without ncursesw */
    int (*handle)(tui_app *a, void *state, int action, const tui_rect *body);   /* TUI_R_*; NULL likewise */
    int (*dump)(tui_app *a, FILE *out, int step);      /* plain text; BT_OK or error */
    const tui_view_class *cls;  /* NULL without ncursesw */
} tui_view;
extern const tui_view tui_views[];
extern const int tui_n_views;
int tui_view_find(const char *name);        /* index, -1 if none */
/* "tokens, step, ..., kernels": every view's name, for error messages. */
const char *tui_view_names(void);
/* View `view`'s own state, made (and initialized) on first use; NULL when
 * the view keeps none, or out of memory (bt_errmsg says so). */
void *tui_app_view_state(tui_app *a, int view);
/* Select a view, remembering the current one for Back. */
void tui_app_switch(tui_app *a, int view);
/* The walk-back jump: first non-finite (step, layer, op) selected. */
int tui_app_walk_jump(tui_app *a);
/* The Speculation view's dump (dump.c), named here for tests/test_tui.c;
 * every other callback is declared by its row in app.c. */
int tui_dump_spec(tui_app *a, FILE *out, int step);

/* The interactive loop (browse.c): curses up, loop, curses down. Returns the
 * exit status. */
int tui_browse_run(tui_app *a);

#endif
