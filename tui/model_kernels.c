/* model_kernels.c - the Kernels view's data: one step's ops in forward
 * order, each with its host duration (op_timings: run --timing) and the
 * device activity joined to it (kernels: run --device cuda --cupti), as
 * plain structs and as the text lines the view draws and --dump prints.
 *
 * Read through the trace reader only (bt_trace_op_timings_each,
 * bt_trace_kernels_step). Ops come from op_timings in their recorded order;
 * ops that only have kernel rows follow in the order of their first
 * kernel. Rows outside any op (the step's copies and wait, API calls) are
 * counted, not listed. The first bad op, when it is in this step, is
 * marked, and so is the kernel that wrote it: the last kernel of the op
 * that is not the tap's reduction (bt_kernel_is_tap, as bisect says). */
#include "model_impl.h"
#include "model_kernels.h"
#include "trace/analyze.h"
#include "engine/engine.h"
#include "base/util.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int find_op(const tui_kstep *k, int layer, const char *op)
{
    for (int i = 0; i < k->n_ops; i++)
        if (k->ops[i].layer == layer && !strcmp(k->ops[i].op, op)) return i;
    return -1;
}

static int add_op(tui_kstep *k, int layer, const char *op, const char *tensor)
{
    if (k->n_ops == k->cap_ops) {
        int cap = k->cap_ops ? 2 * k->cap_ops : 64;
        tui_kop *n = realloc(k->ops, (size_t)cap * sizeof(*n));
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        k->ops = n;
        k->cap_ops = cap;
    }
    tui_kop *o = &k->ops[k->n_ops++];
    memset(o, 0, sizeof(*o));
    o->layer = layer;
    snprintf(o->op, sizeof o->op, "%s", op);
    snprintf(o->tensor, sizeof o->tensor, "%s", tensor ? tensor : "");
    o->op_ns = -1;
    return BT_OK;
}

typedef struct kload { tui_kstep *k; int step; } kload;

static int on_timing(void *user, const bt_trace_op_timing_row *t)
{
    kload *l = user;
    if (t->step != l->step) return BT_OK;
    tui_kstep *k = l->k;
    int i = find_op(k, t->layer, t->op ? t->op : "");
    if (i < 0) {
        int rc = add_op(k, t->layer, t->op ? t->op : "", t->tensor);
        if (rc) return rc;
        i = k->n_ops - 1;
    }
    k->ops[i].op_ns = t->dur_ns;
    k->has_timings = true;
    return BT_OK;
}

/* Kernel rows arrive in start order; each op's kernels are gathered after
 * all are read (an op's kernels need not be contiguous). */
static int on_kernel(void *user, const bt_kernel_row *r)
{
    kload *l = user;
    tui_kstep *k = l->k;
    k->has_kernels = true;
    bool listed = !strcmp(r->kind, "kernel") || !strcmp(r->kind, "memcpy") || !strcmp(r->kind, "memset");
    if (!r->op[0] || !listed) { k->n_outside += !r->op[0]; k->n_api += r->op[0] && !listed; return BT_OK; }
    if (find_op(k, r->layer, r->op) < 0) {
        char tensor[64];
        int op = bt_op_from_name(r->op);
        if (op >= 0) bt_tensor_name(op, r->layer, tensor, sizeof tensor);
        else snprintf(tensor, sizeof tensor, "%s", r->op);   /* cuda_graph: a whole step */
        int rc = add_op(k, r->layer, r->op, tensor);
        if (rc) return rc;
    }
    if (k->n_k == k->cap_k) {
        int cap = k->cap_k ? 2 * k->cap_k : 256;
        tui_kernel *n = realloc(k->k, (size_t)cap * sizeof(*n));
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        k->k = n;
        k->cap_k = cap;
    }
    tui_kernel *d = &k->k[k->n_k++];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof d->name, "%.127s", r->name);
    snprintf(d->kind, sizeof d->kind, "%s", r->kind);
    snprintf(d->op, sizeof d->op, "%s", r->op);
    d->layer = r->layer;
    d->dur_ns = r->end_ns - r->start_ns;
    d->tap = bt_kernel_is_tap(r->name);
    for (int i = 0; i < 3; i++) { d->grid[i] = r->grid[i]; d->block[i] = r->block[i]; }
    return BT_OK;
}

/* A stable sort by op (insertion: kernel lists are short per step). */
static void sort_by_op(tui_kernel *k, int n)
{
    for (int i = 1; i < n; i++) {
        tui_kernel t = k[i];
        int j = i - 1;
        while (j >= 0 && k[j].op_i > t.op_i) { k[j + 1] = k[j]; j--; }
        k[j + 1] = t;
    }
}

static int add_line(tui_kstep *k, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int add_line(tui_kstep *k, int kind, const char *fmt, ...)
{
    if (k->n_kl == k->cap_kl) {
        int cap = k->cap_kl ? 2 * k->cap_kl : 128;
        tui_kline *n = realloc(k->kl, (size_t)cap * sizeof(*n));
        if (!n) return bt_error(BT_ENOMEM, "out of memory");
        k->kl = n;
        k->cap_kl = cap;
    }
    tui_kline *l = &k->kl[k->n_kl++];
    l->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text, sizeof l->text, fmt, ap);
    va_end(ap);
    return BT_OK;
}

static const char *us(int64_t ns, char *buf, size_t cap)
{
    if (ns < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.1f us", (double)ns / 1e3);
    return buf;
}

static int build_lines(tui_kstep *k)
{
    char a[32], b[32];
    int64_t op_total = 0, k_total = 0;
    for (int i = 0; i < k->n_ops; i++) { if (k->ops[i].op_ns > 0) op_total += k->ops[i].op_ns; k_total += k->ops[i].kern_ns; }
    int rc = add_line(k, TUI_KL_HEAD, "step %d: %d ops, %d device rows; op time %s, kernel time %s; %d rows outside any op, %d API/sync rows",
                      k->step, k->n_ops, k->n_k, k->has_timings ? us(op_total, a, sizeof a) : "-",
                      k->has_kernels ? us(k_total, b, sizeof b) : "-", k->n_outside, k->n_api);
    if (!rc && !k->has_kernels)
        rc = add_line(k, TUI_KL_NOTE, "no device activity recorded (a CUDA run with --cupti records it)");
    if (!rc && !k->has_timings)
        rc = add_line(k, TUI_KL_NOTE, "no op timings recorded (run --timing records them)");
    if (!rc && k->bad_op >= 0)
        rc = add_line(k, TUI_KL_BAD, "first non-finite: %s%s%s", k->ops[k->bad_op].tensor,
                      k->bad_kernel >= 0 ? ", written by " : "", k->bad_kernel >= 0 ? k->k[k->bad_kernel].name : "");
    for (int i = 0; i < k->n_ops && !rc; i++) {
        const tui_kop *o = &k->ops[i];
        char where[16];
        if (o->layer >= 0) snprintf(where, sizeof where, "L%02d", o->layer);
        else snprintf(where, sizeof where, "-");
        rc = add_line(k, i == k->bad_op ? TUI_KL_BAD : TUI_KL_OP, "%c %-4s %-14s op %-10s kernels %-10s %s",
                      i == k->bad_op ? '!' : ' ', where, o->op, us(o->op_ns, a, sizeof a),
                      o->nk ? us(o->kern_ns, b, sizeof b) : "-", o->tensor);
        for (int j = o->k0; j < o->k0 + o->nk && !rc; j++) {
            const tui_kernel *d = &k->k[j];
            bool wrote = j == k->bad_kernel;
            if (!strcmp(d->kind, "kernel"))
                rc = add_line(k, wrote ? TUI_KL_BADK : TUI_KL_KERNEL, "    %c %-28s %-10s <<<(%d,%d,%d), (%d,%d,%d)>>>%s%s", wrote ? '*' : ' ',
                              d->name, us(d->dur_ns, a, sizeof a), d->grid[0], d->grid[1], d->grid[2], d->block[0],
                              d->block[1], d->block[2], d->tap ? " (tap)" : "", wrote ? "  <- wrote the first bad tensor" : "");
            else
                rc = add_line(k, TUI_KL_KERNEL, "      %-28s %s", d->name, us(d->dur_ns, a, sizeof a));
        }
    }
    return rc;
}

/* Load step `step`; mark (bad_layer, bad_op) as the first bad op when it is
 * in this step (bad_op NULL: none). */
static int tui_kernels_load(tui_trace *tr, int step, int bad_layer, const char *bad_op, tui_kstep *out)
{
    tui_kernels_free(out);
    out->step = step;
    out->bad_op = out->bad_kernel = -1;
    kload l = { out, step };
    int rc = bt_trace_op_timings_each(tr->r, on_timing, &l);
    if (rc >= 0) rc = bt_trace_kernels_step(tr->r, step, on_kernel, &l);
    if (rc < 0) { tui_kernels_free(out); return rc; }
    for (int j = 0; j < out->n_k; j++) out->k[j].op_i = find_op(out, out->k[j].layer, out->k[j].op);
    sort_by_op(out->k, out->n_k);
    for (int j = 0; j < out->n_k; j++) {
        tui_kop *o = &out->ops[out->k[j].op_i];
        if (!o->nk) o->k0 = j;
        o->nk++;
        o->kern_ns += out->k[j].dur_ns;
    }
    if (bad_op && (out->bad_op = find_op(out, bad_layer, bad_op)) >= 0) {
        const tui_kop *o = &out->ops[out->bad_op];
        for (int j = o->k0; j < o->k0 + o->nk; j++)
            if (!strcmp(out->k[j].kind, "kernel") && !out->k[j].tap) out->bad_kernel = j;
    }
    if ((rc = build_lines(out))) { tui_kernels_free(out); return rc; }
    return BT_OK;
}

void tui_kernels_free(tui_kstep *k)
{
    free(k->ops);
    free(k->k);
    free(k->kl);
    memset(k, 0, sizeof(*k));
    k->step = -1;
}

int tui_kernels_open(tui_app *a, int step, tui_kstep *out)
{
    int rc = tui_app_walk(a);
    if (rc) return rc;
    const tui_link *bad = a->walk.found && a->walk.n ? &a->walk.links[0] : NULL;
    if (step < 0) step = bad ? bad->step : a->step;
    return tui_kernels_load(a->tr, step, bad ? bad->layer : -1, bad && bad->step == step ? bad->op : NULL, out);
}

int tui_dump_kernels(tui_app *a, FILE *out, int step)
{
    int lo, hi;
    tui_trace_bounds(a->tr, &lo, &hi, NULL, NULL);
    if (step >= 0 && (hi < 0 || step < lo || step > hi))
        return bt_error(BT_ENOTFOUND, "%s: no step %d in this trace", tui_trace_path(a->tr), step);
    tui_kstep ks;
    memset(&ks, 0, sizeof ks);
    int rc = tui_kernels_open(a, step, &ks);
    for (int i = 0; !rc && i < ks.n_kl; i++) {
        char line[512];
        tui_sanitize(ks.kl[i].text, strlen(ks.kl[i].text), line, sizeof line, 0, a->san);
        fprintf(out, "%s\n", line);
    }
    tui_kernels_free(&ks);
    return rc;
}
