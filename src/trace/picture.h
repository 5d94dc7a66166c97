/* picture.h - the picture `report --png` and `export --png` write beside
 * their output: layers x steps, each cell coloured by the largest absmax of
 * the layer's taps at that step against the f16 maximum (trace/headroom.h),
 * non-finite cells marked, the first non-finite cell and the walk-back path
 * (bt_analyze_walk, the chain bisect, report and the browser show)
 * outlined, and under the grid the token each step produced. Read through
 * the reader only.
 *
 * Geometry (so a test, or a script, can find a cell): the grid's top-left
 * pixel is (x0, y0); column c (c-th target step, or c-th group of
 * steps_per_col steps) and row w span x0 + c*cw .. x0 + (c+1)*cw - 1 and
 * y0 + w*ch .. y0 + (w+1)*ch - 1. Rows top to bottom: "in" (taps outside
 * the layers before layer 0, when there are any), layers 0..n-1, "out"
 * (taps after the layers). The PNG carries the same numbers in a tEXt chunk
 * keyed "bangtrace-grid". Every cell keeps its colour inside: the path's
 * outline is its own outermost pixel, the first bad cell's green ring (2
 * pixels, 3 for cells under 8) lies just outside it, over its neighbours.
 *
 * The image is bounded: at most BT_PICTURE_MAX_COLS columns (longer runs
 * are downsampled: each column shows the worst of its steps, and the
 * caption says so) and at most about 500 pixels of grid height. Token text
 * is drawn only when one column is one step; only printable ASCII is drawn
 * as itself, everything else as a visible escape (\n, \t, \uXXXX, \xNN) in
 * another colour; a piece the trace does not hold (redacted) is not drawn. */
#ifndef BT_PICTURE_H
#define BT_PICTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "trace/reader.h"
#include "sys/outfile.h"

#define BT_PICTURE_MAX_COLS 240

/* Colours (RGB) of the picture, for the legend, the docs and the tests. */
#define BT_PIC_NONFINITE  0xe600e6u   /* NaN or +-Inf in the layer at that step */
#define BT_PIC_OVER       0xd7191cu   /* finite but past the f16 maximum */
#define BT_PIC_HALF       0xf5a028u   /* past half of it: under 2x headroom */
#define BT_PIC_UNTAPPED   0xe8e8e8u   /* no statistics recorded */
#define BT_PIC_FIRST      0x00c800u   /* outline: the first non-finite cell */
#define BT_PIC_PATH       0x000000u   /* outline: the rest of the walk-back path */
/* below half the limit: a blue ramp on log10(absmax / limit), pale at 1e-6
 * and below, dark at 0.5 */

typedef struct bt_picture {
    int width, height;
    uint8_t *rgb;               /* width * height * 3, row-major */
    /* grid geometry */
    int x0, y0, cw, ch, cols, rows;
    int steps_per_col;
    int n_steps;                /* target steps drawn */
    int first_step, last_step;  /* -1 when none */
    int n_layers;
    bool in_row, out_row;
    bool tokens_drawn;          /* the token row is there */
    bool tokens_redacted;       /* some step's token text was not in the trace */
    bool has_first;             /* the first non-finite cell is outlined */
    int first_col, first_row;
    int n_path;                 /* walk-back cells outlined (first included) */
    char caption[512];          /* one line for the markdown, no newline */
} bt_picture;

/* Build the picture of a trace (in memory). BT_OK or the reader's BT_E*;
 * free with bt_picture_free. */
int bt_picture_render(bt_trace_reader *r, bt_picture *out);
void bt_picture_free(bt_picture *p);

/* Whether this build can encode PNG (configured with libpng). */
bool bt_picture_available(void);

/* Write p as PNG to path: checked like a report (bt_outfile_check with
 * BT_OUT_TEXT: never a link, a device, an input or an SQLite file; an
 * existing non-empty file only with force), through a new temporary file
 * beside it renamed over it, so path is the whole picture or untouched.
 * BT_EUNSUPPORTED without libpng. */
int bt_picture_save(const bt_picture *p, const char *path, bool force, const bt_out_input *inputs, int n_inputs);

/* The path of the picture beside a markdown or trace file: FILE.md ->
 * FILE.png, FILE.db -> FILE.png, anything else FILE + ".png". malloc'd. */
char *bt_picture_path_beside(const char *path);

#endif
