/* export.h - a copy of a trace that can be attached to a public issue
 * (`bangtrace export`): the embedded schema, rows copied table by table
 * from the source attached read-only under the guard's budget, optionally
 * only a window of steps around the first bad one, optionally redacted.
 * The rules are in export.c's header and doc/trace-format.md. */
#ifndef BT_TRACE_EXPORT_H
#define BT_TRACE_EXPORT_H

#include <stdbool.h>

/* redaction levels, weakest first */
enum bt_export_redact { BT_EXPORT_REDACT_NONE = 0, BT_EXPORT_REDACT_PROMPT, BT_EXPORT_REDACT_ALL };

typedef struct bt_export_opts {
    const char *in, *out;        /* the trace; the copy (bt_outfile_check rules, --force) */
    int redact;                  /* bt_export_redact */
    bool force, all_steps;
    long window;                 /* steps kept either side of the first bad one */
} bt_export_opts;

/* Write o->out from o->in. OUT is built in a fresh file beside it and
 * renamed into place, so it is absent or complete. Returns BT_OK or an
 * error naming the file (not a trace, OUT refused, a write failed). */
int bt_trace_export(const bt_export_opts *o);

#endif
