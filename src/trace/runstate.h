/* runstate.h - how the run that wrote a trace ended, as readers tell it.
 *
 * A trace's meta.status is "running" until its writer closes it; a writer
 * killed with -9 never does. The writer's flock (sys/outfile.h) tells a
 * live run from a dead one, so a trace still "running" with nobody writing
 * it is a run that was killed. bisect and report say so in one line, with
 * the last committed step, instead of calling the trace clean. */
#ifndef BT_TRACE_RUNSTATE_H
#define BT_TRACE_RUNSTATE_H

#include <stdbool.h>

typedef struct bt_trace_reader bt_trace_reader;

typedef struct bt_run_state {
    const char *status;     /* meta.status, borrowed from the reader; "?" when missing */
    bool live;              /* a bangtrace process is writing the trace now */
    bool unfinished;        /* killed, crashed, interrupted, a write error or an error */
    int last_step;          /* last committed step, -1 when none */
    char line[256];         /* one sentence when unfinished or live, "" otherwise */
} bt_run_state;

/* Fill *out for the trace open in r (path: the same file, for the lock
 * probe). Returns BT_OK or the reader's error. */
int bt_run_state_get(bt_trace_reader *r, const char *path, bt_run_state *out);

#endif
