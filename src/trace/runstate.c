/* runstate.c - how the run that wrote a trace ended (see runstate.h). */
#include "trace/runstate.h"
#include "trace/reader.h"
#include "trace/trace.h"
#include "sys/outfile.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

int bt_run_state_get(bt_trace_reader *r, const char *path, bt_run_state *out)
{
    memset(out, 0, sizeof(*out));
    out->last_step = -1;
    bt_trace_summary sum;
    int rc = bt_trace_summary_get(r, &sum);
    if (rc) return rc;
    out->last_step = sum.n_steps > 0 ? sum.last_step : -1;
    const char *st = bt_trace_meta_get(r, "status");
    out->status = st ? st : "?";
    char last[48];
    if (out->last_step >= 0) snprintf(last, sizeof last, "last committed step %d", out->last_step);
    else snprintf(last, sizeof last, "no step committed");
    const char *why = NULL;
    if (!st) return BT_OK;   /* a trace from elsewhere that does not say: take it as it is */
    if (!strcmp(st, BT_TRACE_STATUS_RUNNING)) {
        if (bt_outfile_locked(path)) {
            out->live = true;
            snprintf(out->line, sizeof out->line, "live run: a bangtrace process is still writing this trace (%s so far)", last);
            return BT_OK;
        }
        why = "the run never finished (status still 'running' and no process writing it: killed?)";
    } else if (!strcmp(st, BT_TRACE_STATUS_CRASHED)) why = "the run crashed (fatal signal; see the crash event)";
    else if (!strcmp(st, BT_TRACE_STATUS_INTERRUPTED)) why = "the run was interrupted (SIGINT/SIGTERM; see the interrupted event)";
    else if (!strcmp(st, BT_TRACE_STATUS_IO_ERROR)) why = "the run stopped when a trace write failed (disk full or I/O error)";
    else if (!strcmp(st, BT_TRACE_STATUS_ERROR)) why = "the run stopped on an error";
    if (!why) return BT_OK;
    out->unfinished = true;
    const char *we = bt_trace_meta_get(r, "write_error");
    if (we && *we && !strcmp(st, BT_TRACE_STATUS_IO_ERROR)) {
        /* the writer's message, as data: printable ASCII only */
        char msg[140];
        size_t n = 0;
        for (; we[n] && n + 1 < sizeof msg; n++) msg[n] = we[n] >= 0x20 && we[n] < 0x7f ? we[n] : '?';
        msg[n] = 0;
        snprintf(out->line, sizeof out->line, "unfinished run: the trace is incomplete: a trace write failed (%s); %s", msg, last);
    }
    else
        snprintf(out->line, sizeof out->line, "unfinished run: %s; %s", why, last);
    return BT_OK;
}
