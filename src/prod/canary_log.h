/* canary_log.h - the SQLite log of `bangtrace canary`: one row per check,
 * appended as the check finishes, and the summary `canary --report` prints.
 *
 * A canary log is an SQLite file with PRAGMA application_id 'BTCN' (not a
 * trace: traces are 'BTRC'). Opening for append creates the file
 * exclusively (0600) when nothing is there, appends to an existing canary
 * log, and refuses anything else: a trace, another database, a text file, a
 * link or a device, or one of the command's inputs (src/sys/outfile.h). The
 * writer holds flock(LOCK_EX) on the log while it is open, so two canaries
 * never interleave in one log. Every append is its own transaction in a
 * rollback journal, so a killed canary leaves a complete log of the checks
 * before it and no -wal file. The log is untrusted input for --report:
 * bounded text, counts computed in SQL. */
#ifndef BT_TRACE_CANARY_LOG_H
#define BT_TRACE_CANARY_LOG_H

#include <stdbool.h>
#include "sys/outfile.h"

/* 'BTCN' */
#define BT_CANARY_APPLICATION_ID 0x4254434e

typedef struct bt_canary_log bt_canary_log;

typedef struct bt_canary_check {
    double t;                   /* unix time (s) the check finished */
    const char *target;         /* URL */
    const char *prompt;         /* the prompt's name */
    const char *cls;            /* answer class name ("ok", "token_wall", ...) */
    const char *why;            /* reason sentence ("" for ok) */
    int http_status;
    double ms;
    const char *answer;         /* the answer text (stored up to 4 KiB) */
} bt_canary_check;

/* Open `path` for appending checks (see the header comment for what is
 * refused). BT_EINVAL with a one-line message naming the path, BT_EIO. */
int bt_canary_log_open(const char *path, const bt_out_input *inputs, int n_inputs, bt_canary_log **out);
int bt_canary_log_append(bt_canary_log *l, const bt_canary_check *c);
/* Close; returns BT_EIO when the final close fails. NULL is a no-op. */
int bt_canary_log_close(bt_canary_log *l);

#define BT_CANARY_MAX_CLASSES 32
typedef struct bt_canary_summary {
    long checks, failures;
    int n_classes;                          /* failing classes, most frequent first */
    char cls[BT_CANARY_MAX_CLASSES][32];
    long cls_count[BT_CANARY_MAX_CLASSES];
    long longest_streak;                    /* most consecutive failures */
    double first_t, last_t;                 /* first / last check (0: none) */
    double first_fail_t, last_fail_t;       /* first / last failure (0: none) */
    int n_targets;                          /* distinct targets in the log */
    char target[256];                       /* the first one */
} bt_canary_summary;

/* Summarise a canary log, read-only. BT_EFORMAT when the file is not a
 * canary log (names the path), BT_EIO. */
int bt_canary_log_summary(const char *path, bt_canary_summary *out);

#endif
