#!/bin/sh
# Durability under kill -9: a traced process killed at any moment leaves a
# file that opens and holds every step up to the last committed one, with
# steps contiguous from 0. First with tests/trace_writer_tool (it prints
# each step number once committed, so the test knows what must be there;
# --delay-ms 0 makes the kill land inside SQLite most of the time), then
# with the real `bangtrace run --trace` on stories260K.
. "${BT_SRCDIR:-.}/tests/lib.sh"
TOOL=${BT_BUILDDIR:-.}/tests/trace_writer_tool
[ -x "$TOOL" ] || skip "tests/trace_writer_tool is not built"

# field NAME LINE: the value after NAME in a `trace_writer_tool check` line
field() { echo "$2" | tr ' ' '\n' | sed -n "/^$1\$/{n;p;q;}"; }

# wait_lines FILE N: until FILE has N lines (at most ~10 s)
wait_lines() {
    i=0
    while [ "$(wc -l < "$1" 2>/dev/null || echo 0)" -lt "$2" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
}

run=0
for delay in 5 0 0 1; do
    run=$((run + 1))
    out=$TMP/kill$run.db
    steps=$TMP/steps$run   # a fresh file per run: never read a previous run's lines
    "$TOOL" write "$out" --steps 1000000 --delay-ms $delay --layers 30 > "$steps" 2> "$TMP/werr" &
    pid=$!
    wait_lines "$steps" 25
    kill -9 $pid
    wait $pid 2>/dev/null
    last=$(tail -n 1 "$steps")
    if [ -z "$last" ]; then fail "delay $delay: the writer committed no step within 10 s: $(cat "$TMP/werr")"; continue; fi
    if ! line=$("$TOOL" check "$out" 2> "$TMP/cerr"); then
        fail "delay $delay: trace does not open after kill -9: $(cat "$TMP/cerr")"
        continue
    fi
    got_last=$(field last "$line")
    if [ "$(field first "$line")" = 0 ] && [ "$(field contiguous "$line")" = yes ] &&
       [ "$got_last" -ge "$last" ] && [ "$(field status "$line")" = running ]; then
        ok "kill -9 (delay $delay ms) after step $last committed: $line"
    else
        fail "kill -9 (delay $delay ms) after step $last committed: $line"
    fi
    if command -v sqlite3 > /dev/null 2>&1; then
        ic=$(sqlite3 "$out" "PRAGMA integrity_check" 2>&1)
        [ "$ic" = ok ] && ok "integrity_check after kill -9" || fail "integrity_check: $ic"
    fi
done

# The real binary, once `run --trace` exists.
if ! "$BANGTRACE" help run 2>/dev/null | grep -q -e '--trace'; then
    echo "note: bangtrace run has no --trace yet; real-binary part not run"
    finish
fi
[ -f "$STORIES" ] || { echo "note: $STORIES missing; real-binary part not run"; finish; }
out=$TMP/run.db
"$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 500 --threads 1 \
    --trace "$out" > /dev/null 2> "$TMP/rerr" &
pid=$!
i=0
while [ $i -lt 1000 ]; do
    line=$("$TOOL" check "$out" 2>/dev/null) && [ "$(field steps "$line")" -ge 20 ] 2>/dev/null && break
    sleep 0.01
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null && killed=yes || killed="no (the run had already finished)"
wait $pid 2>/dev/null
if ! line=$("$TOOL" check "$out" 2> "$TMP/cerr"); then
    fail "run --trace killed: trace does not open: $(cat "$TMP/cerr")"
elif [ "$(field first "$line")" = 0 ] && [ "$(field contiguous "$line")" = yes ] && [ "$(field steps "$line")" -ge 1 ]; then
    ok "bangtrace run --trace, kill -9 mid-run (killed: $killed): $line"
else
    fail "bangtrace run --trace, kill -9 mid-run (killed: $killed): $line"
fi
finish
