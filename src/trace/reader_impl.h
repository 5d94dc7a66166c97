/* reader_impl.h - what reader.c shares with the reader's other files
 * (reader_browse.c). Private to src/trace/: the one place besides the
 * writer where sqlite3 types appear. */
#ifndef BT_TRACE_READER_IMPL_H
#define BT_TRACE_READER_IMPL_H

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include "trace/reader.h"

/* Statement slots for reader_browse.c's queries (finalized at close). */
#define BT_TRACE_BROWSE_MAX 16

/* The reader's error for an SQLite failure: BT_EFORMAT for a corrupt file
 * or a schema we do not know, else BT_EIO; the message names the file. */
int bt_trace_reader_fail(bt_trace_reader *r, int rc, const char *what);
/* Prepare sql into browse slot `slot` (once, then cached), reset it and
 * clear its bindings. */
int bt_trace_reader_prep(bt_trace_reader *r, int slot, const char *sql, sqlite3_stmt **out);
/* The file has the speculative tables (spec_steps, spec_trail). */
bool bt_trace_reader_spec_tables(const bt_trace_reader *r);
/* One row of the logits columns (the order of reader.c's Q_LOGITS) into *o. */
void bt_trace_reader_read_logits(sqlite3_stmt *s, bt_trace_logits_row *o);

/* ---- column helpers: SQL NULL as -1, NAN or NULL ---- */

static inline int bt_col_int(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? -1 : sqlite3_column_int(s, i);
}

static inline double bt_col_real(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static inline const char *bt_col_text(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NULL : (const char *)sqlite3_column_text(s, i);
}

static inline void bt_copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

#endif
