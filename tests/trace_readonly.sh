#!/bin/sh
# A killed run's trace (WAL mode: its committed steps in the -wal) copied to
# read-only media without its -shm: SQLite alone says only "unable to open
# database file". The reader reads a private copy (every committed step,
# the -wal included) and bisect, report, browse --dump, export and diff
# work on it; when even the copy cannot be made it says in one line that
# the trace has an unapplied write-ahead log on read-only media and how to
# recover. Read-only media is a read-only bind mount (root only: as root,
# chmod does not stop writes), else SKIP.
. "${BT_SRCDIR:-.}/tests/lib.sh"
TOOL=${BT_BUILDDIR:-.}/tests/trace_writer_tool
[ -x "$TOOL" ] || skip "tests/trace_writer_tool is not built"
[ "$(id -u)" = 0 ] || skip "a read-only bind mount needs root"
SRC=$TMP/src MNT=$TMP/ro
mkdir "$SRC" "$MNT"
mount --bind "$SRC" "$MNT" 2> /dev/null || skip "mount --bind does not work here"
trap 'umount "$MNT" 2>/dev/null; rm -rf "$TMP"' EXIT
mount -o remount,ro,bind "$MNT" 2> /dev/null || { umount "$MNT"; skip "cannot remount the bind mount read-only"; }
touch "$MNT/probe" 2> /dev/null && { umount "$MNT"; skip "the read-only bind mount is writable"; }
umount "$MNT"

# a killed run: the writer prints each committed step; kill -9 it after 30
: > "$TMP/steps"   # exists before the loop reads it (the child's redirection races it)
"$TOOL" write "$SRC/k.db" --steps 1000000 --delay-ms 2 --layers 4 > "$TMP/steps" 2> "$TMP/werr" &
pid=$!
i=0
while [ "$(wc -l < "$TMP/steps")" -lt 30 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
kill -9 $pid
wait $pid 2> /dev/null
last=$(tail -n 1 "$TMP/steps")
[ -n "$last" ] || { fail "the writer committed no step: $(cat "$TMP/werr")"; finish; }
[ -s "$SRC/k.db-wal" ] || { fail "the killed trace has no -wal (nothing to test)"; finish; }
rm -f "$SRC/k.db-shm"
mount --bind -o ro "$SRC" "$MNT" && mount -o remount,ro,bind "$MNT" || { fail "read-only bind mount"; finish; }
T=$MNT/k.db

expect_exit 1 "bisect on a killed trace on read-only media without -shm (exit 1: unfinished)" "$BANGTRACE" bisect "$T"
grep -q "last committed step \($last\|$((last + 1))\)" "$TMP/out" && ok "bisect read the steps in the -wal (last step $last)" ||
    fail "bisect did not read the -wal's steps (writer's last $last): $(head -3 "$TMP/out")"
grep -q "unable to open" "$TMP/err" && fail "bisect: $(cat "$TMP/err")"
expect_exit 1 "bisect --json" "$BANGTRACE" bisect "$T" --json
expect_exit 0 "browse --dump tokens" "$BANGTRACE" browse "$T" --dump tokens
grep -q "unable to open" "$TMP/err" && fail "browse: $(cat "$TMP/err")"
expect_exit 0 "report" "$BANGTRACE" report "$T" && grep -q "Unfinished run" "$TMP/out" || fail "report: $(head -c 300 "$TMP/out")"
expect_exit 0 "export" "$BANGTRACE" export "$T" -o "$TMP/x.db" --all-steps
line=$("$TOOL" check "$TMP/x.db" 2>&1)
case $line in *"last $last "*|*"last $((last + 1)) "*) ok "export copied every committed step: $line" ;;
    *) fail "export of the read-only trace: $line (writer's last $last)" ;; esac
expect_exit 0 "diff of the trace with itself" "$BANGTRACE" diff "$T" "$T"
[ -e "$SRC/k.db-shm" ] && fail "the read-only trace got a -shm" || ok "the original is untouched"
ls "${TMPDIR:-/tmp}" | grep -q "^bangtrace-ro\." && fail "a private copy was left in ${TMPDIR:-/tmp}: $(ls "${TMPDIR:-/tmp}" | grep bangtrace-ro)"

# no writable place for the copy: one line saying what and how to recover
TMPDIR=$MNT expect_exit 2 "bisect when no private copy can be made" "$BANGTRACE" bisect "$T"
if [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "unapplied write-ahead log.*read-only media.*copy .* to writable storage" "$TMP/err"; then
    ok "one line: unapplied write-ahead log on read-only media, copy it to writable storage"
else fail "no private copy: $(cat "$TMP/err")"; fi
umount "$MNT"
finish
