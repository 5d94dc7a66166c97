/* outfile.h - outputs never clobber: the one rule every command that writes
 * a file goes through.
 *
 * An output path may be written when nothing is there. When something is:
 * - a symbolic link, a device, a fifo, a socket or a directory is never
 *   replaced or written through, --force or not (`run --trace /dev/full`
 *   must not turn a device node into a regular file);
 * - the same file as one of the command's inputs (same st_dev/st_ino, so a
 *   hard link or another spelling of the path is caught; an input's -wal and
 *   -shm count as the input) is never replaced;
 * - otherwise the kind of output decides: a trace replaces only a bangtrace
 *   trace that no live process is writing, and only with --force; a text
 *   output (a report) replaces an empty file, or a non-empty regular file
 *   with --force, but never an SQLite database; a dump file replaces a
 *   regular file only with --force.
 *
 * The live-writer lock: a trace writer holds flock(LOCK_EX) on the trace for
 * as long as it writes it (see src/trace/writer.c for why flock and not
 * SQLite's own locks); bt_outfile_locked() probes it. */
#ifndef BT_OUTFILE_H
#define BT_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

typedef enum bt_out_kind {
    BT_OUT_TRACE,   /* a bangtrace trace (run --trace, export -o) */
    BT_OUT_TEXT,    /* a text file (report -o) */
    BT_OUT_DUMP,    /* a file inside a dump directory the command fills (forward --dump):
                       its own regular files there are rewritten only with --force */
} bt_out_kind;

/* One input of the command: the flag that named it ("--model") and its
 * path. A NULL path is skipped, as is "-" (standard input). */
typedef struct bt_out_input {
    const char *flag;
    const char *path;
} bt_out_input;

/* Whether `path` may be written as an output of `kind` by a command reading
 * `inputs`. Returns BT_OK with *exists (may be NULL) telling whether a
 * replaceable file is there, or BT_EINVAL (refused: the message names the
 * path and why, and says whether --force would help) or BT_EIO (lstat or
 * read failed). Never modifies anything. */
int bt_outfile_check(const char *path, bt_out_kind kind, bool force, const bt_out_input *inputs, int n_inputs,
                     bool *exists);

/* Create or truncate `path` for writing after bt_outfile_check (never
 * through a final symbolic link; mode 0666 & ~umask). Returns a FILE or
 * NULL with a message naming the path. */
FILE *bt_outfile_fopen(const char *path, bt_out_kind kind, bool force, const bt_out_input *inputs, int n_inputs);

/* 1 when another open file description holds an exclusive flock on path
 * (a bangtrace process is writing that trace), 0 when not or when the path
 * cannot be opened. Does not follow a final symbolic link. */
int bt_outfile_locked(const char *path);

/* Take the writer's lock on fd (flock LOCK_EX | LOCK_NB). BT_OK, or BT_EINVAL
 * naming path when another process holds it, or BT_EIO. */
int bt_outfile_lock(int fd, const char *path);

/* True when the first 100 bytes of an SQLite file say it is a bangtrace
 * trace (SQLite header and our PRAGMA application_id). */
bool bt_outfile_is_trace_header(const unsigned char *hdr, long n);

#endif
