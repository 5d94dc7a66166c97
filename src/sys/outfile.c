/* outfile.c - outputs never clobber (see outfile.h for the rules).
 *
 * Everything here looks and never touches: the commands create their
 * outputs exclusively (O_EXCL, or a temporary file + rename) after asking,
 * so the check is advice for a clear message and the exclusive create is
 * what actually keeps a file from being lost. */
#include "sys/outfile.h"
#include "base/records.h"   /* BT_TRACE_APPLICATION_ID */
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char sqlite_magic[16] = "SQLite format 3";   /* 15 chars + NUL */

bool bt_outfile_is_trace_header(const unsigned char *hdr, long n)
{
    if (n < 100 || memcmp(hdr, sqlite_magic, 16)) return false;
    /* PRAGMA application_id: big-endian at offset 68 of the database header */
    uint32_t app = (uint32_t)hdr[68] << 24 | (uint32_t)hdr[69] << 16 | (uint32_t)hdr[70] << 8 | hdr[71];
    return app == BT_TRACE_APPLICATION_ID;
}

static const char *kind_name(mode_t m)
{
    if (S_ISDIR(m)) return "directory";
    if (S_ISCHR(m)) return "character device";
    if (S_ISBLK(m)) return "block device";
    if (S_ISFIFO(m)) return "fifo";
    if (S_ISSOCK(m)) return "socket";
    if (S_ISLNK(m)) return "symbolic link";
    return "special file";
}

/* Is (dev, ino) the file `path` names, or its -wal / -shm? Fills what. */
static bool same_as(const struct stat *o, const char *path, const char **what)
{
    static const char *const sfx[] = { "", "-wal", "-shm" };
    char buf[4200];
    for (int i = 0; i < 3; i++) {
        if (snprintf(buf, sizeof buf, "%s%s", path, sfx[i]) >= (int)sizeof buf) return false;
        struct stat s;
        if (stat(buf, &s) == 0 && s.st_dev == o->st_dev && s.st_ino == o->st_ino) { *what = sfx[i]; return true; }
    }
    return false;
}

static int check_inputs(const char *path, const struct stat *o, const char *as, const bt_out_input *in, int n)
{
    for (int i = 0; i < n; i++) {
        if (!in[i].path || !strcmp(in[i].path, "-")) continue;
        const char *what = "";
        if (!same_as(o, in[i].path, &what)) continue;
        const char *flag = in[i].flag ? in[i].flag : "input";
        if (*what)
            return bt_error(BT_EINVAL, "%s%s: is the %s of %s %s: refusing to write an output onto an input",
                            path, as, what, flag, in[i].path);
        return bt_error(BT_EINVAL, "%s%s: is the same file as %s %s: refusing to write an output onto an input",
                        path, as, flag, in[i].path);
    }
    return BT_OK;
}

int bt_outfile_locked(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    int locked = 0;
    struct stat st;
    /* A shared probe, released at once: it fails only against a writer's
     * LOCK_EX, and never keeps a writer from starting. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
        locked = 1;
    close(fd);   /* drops the probe lock, if taken */
    return locked;
}

int bt_outfile_lock(int fd, const char *path)
{
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return BT_OK;
    if (errno == EWOULDBLOCK)
        return bt_error(BT_EINVAL, "%s: another bangtrace process is writing this trace", path);
    return bt_error(BT_EIO, "%s: cannot lock: %s", path, strerror(errno));
}

int bt_outfile_check(const char *path, bt_out_kind kind, bool force, const bt_out_input *inputs, int n_inputs,
                     bool *exists)
{
    if (exists) *exists = false;
    if (!path || !*path) return bt_error(BT_EINVAL, "empty output path");
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
        if (kind == BT_OUT_TRACE) {
            /* a stale -wal/-shm beside a missing trace would be taken for the
             * new trace's by SQLite: it must not be an input either */
            char buf[4200];
            for (int i = 0; i < 2; i++) {
                snprintf(buf, sizeof buf, "%s%s", path, i ? "-shm" : "-wal");
                struct stat c;
                if (lstat(buf, &c) == 0) {
                    int rc = check_inputs(path, &c, i ? "-shm" : "-wal", inputs, n_inputs);
                    if (rc) return rc;
                }
            }
        }
        return BT_OK;
    }
    if (S_ISLNK(st.st_mode))
        return bt_error(BT_EINVAL, "%s: is a symbolic link: refusing to write through it", path);
    if (!S_ISREG(st.st_mode))
        return bt_error(BT_EINVAL, "%s: is a %s, not a regular file: refusing to replace it", path, kind_name(st.st_mode));
    int rc = check_inputs(path, &st, "", inputs, n_inputs);
    if (rc) return rc;

    unsigned char hdr[100];
    long n = 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    ssize_t r = read(fd, hdr, sizeof hdr);
    close(fd);
    if (r < 0) return bt_error(BT_EIO, "%s: %s", path, strerror(errno));
    n = (long)r;

    if (kind == BT_OUT_TRACE) {
        if (bt_outfile_locked(path))
            return bt_error(BT_EINVAL, "%s: another bangtrace process is writing this trace: refusing to replace it", path);
        if (!bt_outfile_is_trace_header(hdr, n))
            return bt_error(BT_EINVAL, "%s: exists and is not a bangtrace trace: refusing to replace it "
                            "(--force replaces only a bangtrace trace)", path);
        if (!force) return bt_error(BT_EINVAL, "%s: exists (a bangtrace trace): use --force to replace it", path);
        for (int i = 0; i < 2; i++) {
            char buf[4200];
            snprintf(buf, sizeof buf, "%s%s", path, i ? "-shm" : "-wal");
            struct stat c;
            if (lstat(buf, &c) == 0 && (rc = check_inputs(path, &c, i ? "-shm" : "-wal", inputs, n_inputs))) return rc;
        }
    } else if (kind == BT_OUT_TEXT) {
        if (st.st_size == 0) { if (exists) *exists = true; return BT_OK; }
        if (n >= 16 && !memcmp(hdr, sqlite_magic, 16))
            return bt_error(BT_EINVAL, "%s: is an SQLite database (a trace?): refusing to replace it with text", path);
        if (!force) return bt_error(BT_EINVAL, "%s: exists and is not empty: use --force to replace it", path);
    } else if (kind == BT_OUT_DUMP) {
        if (!force) return bt_error(BT_EINVAL, "%s: exists: use --force to replace it", path);
    }
    if (exists) *exists = true;
    return BT_OK;
}

FILE *bt_outfile_fopen(const char *path, bt_out_kind kind, bool force, const bt_out_input *inputs, int n_inputs)
{
    if (bt_outfile_check(path, kind, force, inputs, n_inputs, NULL)) return NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) { bt_error(BT_EIO, "%s: %s", path, strerror(errno)); return NULL; }
    FILE *f = fdopen(fd, "wb");
    if (!f) { bt_error(BT_EIO, "%s: %s", path, strerror(errno)); close(fd); }
    return f;
}
