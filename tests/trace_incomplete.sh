#!/bin/sh
# Incomplete traces open: any trace SQLite can read opens read-only in
# every reader, with every committed step, even when those steps are still
# in the -wal. The reader once compared the main file's header page count
# with its size and ignored the WAL, so a trace killed during a checkpoint
# (page 1, with the new count, written; the file not yet extended) was
# refused as "truncated" though integrity_check said ok; and a live trace
# was now and then refused mid-checkpoint. A file cut short with no WAL is
# still refused (tests/bad_input.sh, tests/test_trace): that one is damaged.
. "${BT_SRCDIR:-.}/tests/lib.sh"
TOOL=${BT_BUILDDIR:-.}/tests/trace_writer_tool
[ -x "$TOOL" ] || skip "tests/trace_writer_tool is not built"
py=${PYTHON3:-python3}
command -v "$py" > /dev/null 2>&1 || skip "python3 (sqlite3 module) is needed"
field() { echo "$2" | tr ' ' '\n' | sed -n "/^$1\$/{n;p;q;}"; }
wait_lines() {
    i=0
    while [ "$(wc -l < "$1" 2>/dev/null || echo 0)" -lt "$2" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
}

# 1. kill -9 mid-run; copy the .db and its -wal (not the -shm) elsewhere,
#    as someone attaching the evidence would.
"$TOOL" write "$TMP/k.db" --steps 1000000 --delay-ms 10 --layers 2 > "$TMP/steps" 2> "$TMP/werr" &
pid=$!
wait_lines "$TMP/steps" 30
kill -9 $pid
wait $pid 2>/dev/null
last=$(tail -n 1 "$TMP/steps")
[ -n "$last" ] || { fail "the writer committed no step: $(cat "$TMP/werr")"; finish; }
[ -s "$TMP/k.db-wal" ] || { fail "no -wal after kill -9 (test is void)"; finish; }
mkdir "$TMP/copy" "$TMP/ckpt" "$TMP/mid"
cp "$TMP/k.db" "$TMP/k.db-wal" "$TMP/copy/"

# 2. the same trace as a kill during a checkpoint leaves it: the main file
#    holds page 1 (declaring every page) and page 2 only; the WAL is whole.
cp "$TMP/k.db" "$TMP/k.db-wal" "$TMP/ckpt/"
"$py" - "$TMP/ckpt/k.db" "$TMP/mid/k.db" "$TMP/k.db-wal" <<'PY' || fail "building the mid-checkpoint copy"
import shutil, sqlite3, sys
full, mid, wal = sys.argv[1:4]
d = sqlite3.connect(full)
d.execute("PRAGMA wal_checkpoint(TRUNCATE)")
page = d.execute("PRAGMA page_size").fetchone()[0]
pages = d.execute("PRAGMA page_count").fetchone()[0]
d.close()
data = open(full, "rb").read()
assert pages > 2, pages
open(mid, "wb").write(data[:2 * page])
shutil.copy(wal, mid + "-wal")
hdr = int.from_bytes(data[28:32], "big")
assert hdr * page > 2 * page, (hdr, page)
PY

for dir in copy mid; do
    t=$TMP/$dir/k.db
    if command -v sqlite3 > /dev/null 2>&1; then
        ic=$(sqlite3 "file:$t?mode=ro" "PRAGMA integrity_check" 2>&1)
        [ "$ic" = ok ] || fail "$dir: SQLite itself cannot read the copy ($ic): test is void"
    fi
    if line=$("$TOOL" check "$t" 2> "$TMP/err"); then
        if [ "$(field last "$line")" -ge "$last" ] && [ "$(field contiguous "$line")" = yes ] && [ "$(field status "$line")" = running ]; then
            ok "$dir: opens with every committed step (last $last): $line"
        else fail "$dir: $line (last committed step $last)"; fi
    else fail "$dir: the reader refuses a trace SQLite reads: $(cat "$TMP/err")"; continue; fi
    n=$(($(field last "$line") + 1))
    "$BANGTRACE" bisect "$t" > "$TMP/out" 2> "$TMP/err"
    got=$?
    [ $got -ne 2 ] && grep -q "($n steps" "$TMP/out" && ok "$dir: bisect reads $n steps (exit $got)" ||
        fail "$dir: bisect exit $got: $(head -c 300 "$TMP/err") $(head -n 2 "$TMP/out")"
    expect_exit 0 "$dir: report" "$BANGTRACE" report "$t" -o "$TMP/$dir.md"
    expect_exit 0 "$dir: export" "$BANGTRACE" export "$t" -o "$TMP/$dir-export.db" --all-steps
    eline=$("$TOOL" check "$TMP/$dir-export.db") && [ "$(field steps "$eline")" = "$n" ] &&
        ok "$dir: the export holds all $n steps" || fail "$dir: export: $eline (want $n steps)"
done

# 3. a live trace: 50 reads while a run writes, none refused.
"$TOOL" write "$TMP/live.db" --steps 100000 --delay-ms 3 --layers 4 > "$TMP/lsteps" 2> "$TMP/werr" &
pid=$!
wait_lines "$TMP/lsteps" 5
bad=0 i=0
while [ $i -lt 50 ]; do
    i=$((i + 1))
    if ! "$TOOL" check "$TMP/live.db" > /dev/null 2> "$TMP/err"; then
        bad=$((bad + 1)); echo "read $i refused: $(cat "$TMP/err")"
    fi
    if [ $((i % 10)) = 0 ] && ! "$BANGTRACE" report "$TMP/live.db" -o "$TMP/live$i.md" > /dev/null 2> "$TMP/err"; then
        bad=$((bad + 1)); echo "report $i refused: $(cat "$TMP/err")"
    fi
done
kill -9 $pid
wait $pid 2>/dev/null
[ $bad = 0 ] && ok "50 reads (and 5 reports) of a live trace, none refused" || fail "$bad reads of a live trace refused"
finish
