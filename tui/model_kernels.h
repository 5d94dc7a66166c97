/* model_kernels.h - the Kernels view's model (model_kernels.c): one step's
 * ops with their device activity and durations, and the text lines that
 * view_kernels.c draws and `browse --dump kernels` prints. Only the two
 * Kernels files include it: the view is a model file, a view file and its
 * row in tui_views[] (app.c). */
#ifndef BT_TUI_MODEL_KERNELS_H
#define BT_TUI_MODEL_KERNELS_H

#include "tui.h"

typedef struct tui_kernel {
    char name[128], kind[8], op[32];
    int layer, op_i;            /* op_i: index in tui_kstep.ops */
    int64_t dur_ns;
    int grid[3], block[3];
    bool tap;                   /* the tap's own reduction, not the op's work */
} tui_kernel;
typedef struct tui_kop {
    int layer;                  /* -1 outside layers */
    char op[32], tensor[64];
    int64_t op_ns;              /* host duration (op_timings), -1 none */
    int64_t kern_ns;            /* sum of its device rows' durations */
    int k0, nk;                 /* its rows in tui_kstep.k */
} tui_kop;
enum { TUI_KL_HEAD, TUI_KL_NOTE, TUI_KL_OP, TUI_KL_KERNEL, TUI_KL_BAD, TUI_KL_BADK };
typedef struct tui_kline { int kind; char text[240]; } tui_kline;
typedef struct tui_kstep {
    int step;
    tui_kop *ops;
    int n_ops, cap_ops;
    tui_kernel *k;              /* grouped by op, in start order within an op */
    int n_k, cap_k;
    int n_outside, n_api;       /* rows outside any op; API and sync rows of ops */
    bool has_kernels, has_timings;
    int bad_op, bad_kernel;     /* the first non-finite op and the kernel that wrote it, -1 */
    tui_kline *kl;              /* the lines the view draws and --dump prints */
    int n_kl, cap_kl;
} tui_kstep;
void tui_kernels_free(tui_kstep *k);
/* The kernels of `step` for the Kernels view and its dump: step < 0 is
 * the first non-finite step (the walk-back's origin; else the selected
 * step), and the first bad op is marked when it is in that step. */
int tui_kernels_open(tui_app *a, int step, tui_kstep *out);

#endif
