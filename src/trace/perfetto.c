/* perfetto.c - a trace as Chrome trace-event JSON (export --perfetto), which
 * ui.perfetto.dev and chrome://tracing open.
 *
 * Tracks: process 1 "host" with thread 1 "steps" (one complete event per
 * forward) and thread 2 "ops" (one per tapped op, from op_timings: run
 * --timing or a device run); process 2+N "cuda:N" with one thread per
 * stream (kernels, copies, memsets from the kernels table); detector events
 * are instant events on the steps track at the start of their step.
 * Timestamps are microseconds from the first recorded instant. Op timings
 * use the host's CLOCK_MONOTONIC; steps without op timings are laid end to
 * end from their recorded durations (args.synthetic_time = true); device
 * activity keeps its own clock, shifted so that it starts with the first
 * step (host and device clocks are not joined). Within each track events
 * are written in time order.
 *
 * Every string from the trace is escaped for JSON here (quotes, backslashes,
 * control bytes, and bytes >= 0x80 as \u00XX, so the output is valid JSON
 * whatever the trace holds). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/perfetto.h"
#include "trace/reader.h"
#include "base/util.h"

static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') { fputc('\\', f); fputc(*p, f); }
        else if (*p < 0x20 || *p >= 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

typedef struct step_span { int step; int64_t t0; double ms; char kind[16]; } step_span;

typedef struct pf {
    FILE *f;
    bool first;
    step_span *steps;
    int n_steps, cap_steps;
    int64_t host0, dev0, dev_shift;
    bool have_timings, have_dev;
    int max_device;
} pf;

static void sep(pf *p) { if (!p->first) fputs(",\n", p->f); p->first = false; }

static double us(int64_t ns) { return (double)ns / 1000.0; }

static int on_timing_min(void *user, const bt_trace_op_timing_row *t)
{
    pf *p = user;
    if (!p->have_timings || t->start_ns < p->host0) p->host0 = t->start_ns;
    p->have_timings = true;
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].step == t->step && (p->steps[i].t0 < 0 || t->start_ns < p->steps[i].t0)) p->steps[i].t0 = t->start_ns;
    return 0;
}

static int on_timing(void *user, const bt_trace_op_timing_row *t)
{
    pf *p = user;
    sep(p);
    fputs("{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"cat\":\"op\",\"name\":", p->f);
    jstr(p->f, t->tensor);
    fprintf(p->f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%d,\"layer\":%d,\"op\":", us(t->start_ns - p->host0),
            us(t->dur_ns), t->step, t->layer);
    jstr(p->f, t->op);
    fputs("}}", p->f);
    return 0;
}

static int on_kernel_min(void *user, const bt_kernel_row *k)
{
    pf *p = user;
    if (!p->have_dev || k->start_ns < p->dev0) p->dev0 = k->start_ns;
    p->have_dev = true;
    if (k->device > p->max_device && k->device < 64) p->max_device = (int)k->device;
    return 0;
}

static int on_kernel(void *user, const bt_kernel_row *k)
{
    pf *p = user;
    int dev = k->device >= 0 && k->device < 64 ? (int)k->device : 0;
    sep(p);
    fprintf(p->f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%" PRId64 ",\"cat\":", 2 + dev, k->stream >= 0 ? k->stream : 0);
    jstr(p->f, k->kind);
    fputs(",\"name\":", p->f);
    jstr(p->f, k->name);
    fprintf(p->f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{", us(k->start_ns - p->dev0) + us(p->dev_shift),
            us(k->end_ns - k->start_ns));
    fprintf(p->f, "\"step\":%d,\"layer\":%d,\"op\":", k->step, k->layer);
    jstr(p->f, k->op);
    if (k->registers >= 0)
        fprintf(p->f, ",\"grid\":\"%d,%d,%d\",\"block\":\"%d,%d,%d\",\"registers\":%d,\"shared_bytes\":%d", k->grid[0],
                k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2], k->registers, k->shared_bytes);
    if (k->bytes >= 0) fprintf(p->f, ",\"bytes\":%" PRId64, k->bytes);
    fputs("}}", p->f);
    return 0;
}

static int on_event(void *user, const bt_trace_event_row *ev)
{
    pf *p = user;
    int64_t ts = 0;
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].step == ev->step) ts = p->steps[i].t0;
    sep(p);
    fputs("{\"ph\":\"i\",\"s\":\"p\",\"pid\":1,\"tid\":3,\"cat\":\"event\",\"name\":", p->f);
    jstr(p->f, ev->kind);
    fprintf(p->f, ",\"ts\":%.3f,\"args\":{\"step\":%d,\"pos\":%d,\"layer\":%d,\"op\":", us(ts - p->host0), ev->step,
            ev->pos, ev->layer);
    jstr(p->f, ev->op);
    fputs(",\"detail\":", p->f);
    jstr(p->f, ev->detail);
    fputs("}}", p->f);
    return 0;
}

static void meta(pf *p, int pid, int64_t tid, const char *what, const char *name)
{
    sep(p);
    if (tid < 0) fprintf(p->f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"%s\",\"args\":{\"name\":", pid, what);
    else fprintf(p->f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRId64 ",\"name\":\"%s\",\"args\":{\"name\":", pid, tid, what);
    jstr(p->f, name);
    fputs("}}", p->f);
}

typedef struct streams { int64_t dev_stream[256][2]; int n; } streams;
static int on_stream(void *user, const bt_kernel_row *k)
{
    streams *s = user;
    for (int i = 0; i < s->n; i++) if (s->dev_stream[i][0] == k->device && s->dev_stream[i][1] == k->stream) return 0;
    if (s->n < 256) { s->dev_stream[s->n][0] = k->device; s->dev_stream[s->n][1] = k->stream; s->n++; }
    return 0;
}

int bt_perfetto_write(bt_trace_reader *r, FILE *f)
{
    pf p = { .f = f, .first = true };
    int rc = BT_OK;
    /* steps, in order */
    for (int from = INT32_MIN;;) {
        bt_trace_step_row rows[256];
        int n = 0;
        if ((rc = bt_trace_steps(r, from, 256, rows, &n))) goto out;
        for (int i = 0; i < n; i++) {
            if (p.n_steps == p.cap_steps) {
                int cap = p.cap_steps ? 2 * p.cap_steps : 256;
                step_span *s = realloc(p.steps, (size_t)cap * sizeof(*s));
                if (!s) { rc = bt_error(BT_ENOMEM, "out of memory"); goto out; }
                p.steps = s;
                p.cap_steps = cap;
            }
            step_span *s = &p.steps[p.n_steps++];
            s->step = rows[i].step;
            s->t0 = -1;
            s->ms = rows[i].ms;
            snprintf(s->kind, sizeof s->kind, "%s", rows[i].kind);
        }
        if (n < 256) break;
        from = rows[n - 1].step + 1;
    }
    if ((rc = bt_trace_op_timings_each(r, on_timing_min, &p))) goto out;
    /* steps without op timings: end to end from the previous one */
    int64_t clock = p.have_timings ? p.host0 : 0;
    if (!p.have_timings) p.host0 = 0;
    for (int i = 0; i < p.n_steps; i++) {
        step_span *s = &p.steps[i];
        if (s->t0 < 0 || s->t0 < clock) s->t0 = clock;
        clock = s->t0 + (isfinite(s->ms) && s->ms > 0 ? (int64_t)(s->ms * 1e6) : 0);
    }
    if ((rc = bt_trace_kernels_each(r, on_kernel_min, &p))) goto out;
    p.dev_shift = p.n_steps ? p.steps[0].t0 - p.host0 : 0;

    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"bangtrace export --perfetto\"},\"traceEvents\":[\n", f);
    meta(&p, 1, -1, "process_name", "host");
    meta(&p, 1, 1, "thread_name", "steps");
    if (p.have_timings) meta(&p, 1, 2, "thread_name", "ops");
    meta(&p, 1, 3, "thread_name", "events");
    if (p.have_dev) {
        streams st = { .n = 0 };
        if ((rc = bt_trace_kernels_each(r, on_stream, &st))) goto out;
        for (int d = 0; d <= p.max_device; d++) {
            char name[32];
            snprintf(name, sizeof name, "cuda:%d", d);
            meta(&p, 2 + d, -1, "process_name", name);
        }
        for (int i = 0; i < st.n; i++) {
            char name[48];
            snprintf(name, sizeof name, "stream %" PRId64, st.dev_stream[i][1]);
            meta(&p, 2 + (int)(st.dev_stream[i][0] >= 0 && st.dev_stream[i][0] < 64 ? st.dev_stream[i][0] : 0),
                 st.dev_stream[i][1] >= 0 ? st.dev_stream[i][1] : 0, "thread_name", name);
        }
    }
    for (int i = 0; i < p.n_steps; i++) {
        step_span *s = &p.steps[i];
        char name[48];
        snprintf(name, sizeof name, "step %d", s->step);
        sep(&p);
        fputs("{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"cat\":\"step\",\"name\":", f);
        jstr(f, name);
        fprintf(f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%d,\"kind\":", us(s->t0 - p.host0),
                isfinite(s->ms) && s->ms > 0 ? s->ms * 1000.0 : 0.0, s->step);
        jstr(f, s->kind);
        fprintf(f, ",\"synthetic_time\":%s}}", p.have_timings ? "false" : "true");
    }
    if ((rc = bt_trace_op_timings_each(r, on_timing, &p))) goto out;
    if ((rc = bt_trace_kernels_each(r, on_kernel, &p))) goto out;
    if ((rc = bt_trace_events_each(r, NULL, on_event, &p))) goto out;
    fputs("\n]}\n", f);
out:
    free(p.steps);
    return rc;
}
