/* perfetto.h - export a trace as Chrome trace-event JSON (the timeline that
 * ui.perfetto.dev and chrome://tracing open); layout in perfetto.c and
 * doc/trace-format.md. */
#ifndef BT_PERFETTO_H
#define BT_PERFETTO_H

#include <stdio.h>
#include "trace/reader.h"

/* Write the whole timeline of r to f. BT_OK, or the reader's error (a
 * corrupt trace); write errors are the caller's to detect (ferror). */
int bt_perfetto_write(bt_trace_reader *r, FILE *f);

#endif
