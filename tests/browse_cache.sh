#!/usr/bin/env bash
# browse_cache.sh - the browser's Cache view (issue 26) on a real pair of
# batched requests: the server with --inject pad_nan, two prompts sharing a
# prefix, so the second maps block 0 from the prefix cache after the first
# request's padding lane wrote NaN into it.
#   - `browse --dump cache` of the second request names block 0 (marked as
#     the culprit, another request's data, non-finite, a fault's: "><!F"),
#     the writer request, the padding lane, the culprit line bisect prints,
#     and, from server.db beside the trace, the writer's row (marked < and !)
#     and this request's row (=, its prefix hit H) over server steps;
#   - without server.db it says so; a server.db that is random bytes,
#     another program's SQLite, truncated or with smashed pages is one note
#     line, the request's own part is still dumped, exit 0, stderr empty;
#   - an ordinary trace (`run --trace`) dumps an empty Cache view in one line;
#   - at 80x24 (tmux) the view shows the culprit and block 0, Enter opens the
#     Step view at step 0, and the ? help still shows its grid legend.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_server
py=${PYTHON3:-python3}
pids=""
T="tmux -L bt-cache-$$"
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; $T kill-server >/dev/null 2>&1; rm -rf "$TMP"' EXIT
field() { "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
complete() {   # complete BODY OUT: the answer JSON in OUT, its request id on stdout
    curl -s -o "$2" -X POST "http://127.0.0.1:$port/v1/completions" --data-binary "$1"
    field "$2" 'j["bangtrace"]["request_id"]'
}

P1="Once upon a time there was a little girl named Lily. She loved to play outside"
start_server padnan --parallel 2 --block-size 4 --trace-dir "$TMP/pad" --inject pad_nan || finish
a=$(complete "{\"prompt\":\"$P1\",\"max_tokens\":6}" "$TMP/a.json")
b=$(complete "{\"prompt\":\"$P1 and run\",\"max_tokens\":6}" "$TMP/b.json")
kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; pids=""
[ -n "$a" ] && [ -n "$b" ] && [ -f "$TMP/pad/$b.db" ] && [ -f "$TMP/pad/server.db" ] ||
    { fail "pad_nan pair: requests '$a' '$b', files: $(ls "$TMP/pad" 2>&1)"; finish; }

# --- the dump, with server.db -------------------------------------------------
expect_exit 0 "--dump cache of $b" "$BANGTRACE" browse "$TMP/pad/$b.db" --dump cache && cp "$TMP/out" "$TMP/dump"
[ -s "$TMP/err" ] && fail "--dump cache wrote to stderr: $(head -c 300 "$TMP/err")"
grep -Eq "^><!F +0 L0 +hit,r +Hr+ written by $a @[0-9]+; non-finite @0 by padding lane of $a" "$TMP/dump" &&
    ok "block 0's row: marked ><!F, a prefix hit then reads, written by $a, non-finite by its padding lane" ||
    fail "block 0's row: $(grep -E '^.{4} +0 L0' "$TMP/dump")"
grep -q "^culprit: step 0: read KV block 0 (prefix hit, positions 0-3) written by $a at server step [0-9]*; that block first went non-finite at server step 0 when the padding lane of $a wrote it" "$TMP/dump" &&
    ok "the culprit line is the provenance bisect prints" || fail "culprit: $(grep -i culprit "$TMP/dump")"
grep -q "^     path: padding lane of $a put a non-finite value into block 0 at server step 0 -> $a wrote it" "$TMP/dump" &&
    ok "the path: padding lane of $a -> block 0 -> this request" || fail "path: $(grep 'path:' "$TMP/dump" | head -2)"
grep -Eq "^server.db: $TMP/pad/server.db \(server steps 0-[0-9]+; this request's [0-9]+-[0-9]+\)\$" "$TMP/dump" && ok "server.db beside the trace is read" ||
    fail "server.db line: $(grep '^server.db' "$TMP/dump")"
grep -Eq "^ <!  $a +!" "$TMP/dump" && grep -Eq "^=    $b +\.+H" "$TMP/dump" &&
    ok "block 0 over server steps: $a's row (writer <, poisoner !) from step 0, this request's row (=) with its hit H" ||
    fail "server rows: $(grep -E '^[ =][ <][ !]  req-' "$TMP/dump" | head -4)"
grep -q "^     first: server step 0: inject by $a: pad_nan: padding lane of $a wrote NaN" "$TMP/dump" &&
    ok "server.db's block_events: the first inject into block 0" || fail "origin: $(grep 'first:' "$TMP/dump" | head -2)"
expect_exit 0 "--dump cache --step 0" "$BANGTRACE" browse "$TMP/pad/$b.db" --dump cache --step 0
grep -q "^culprit: step 0: read KV block 0" "$TMP/out" || fail "--step 0: $(grep -i culprit "$TMP/out")"
expect_exit 2 "--dump cache --step 99: no such step" "$BANGTRACE" browse "$TMP/pad/$b.db" --dump cache --step 99
grep -q "no step 99" "$TMP/err" || fail "--step 99: $(cat "$TMP/err")"

# --- without server.db, and with one that is not one ----------------------------
mkdir "$TMP/c"
cp "$TMP/pad/$b.db" "$TMP/c/"
expect_exit 0 "no server.db beside the trace" "$BANGTRACE" browse "$TMP/c/$b.db" --dump cache &&
    grep -q "^server.db: none beside this trace" "$TMP/out" && grep -Eq "^><!F +0 L0" "$TMP/out" &&
    ok "no server.db: said so, the request's side dumped" || fail "no server.db: $(grep '^server.db' "$TMP/out")"
make_bad_traces "$TMP/pad/server.db"
for kind in random foreign truncated corrupt empty; do
    cp "$TMP/$kind.db" "$TMP/c/server.db"
    expect_exit 0 "$kind server.db: --dump cache exits 0" "$BANGTRACE" browse "$TMP/c/$b.db" --dump cache || continue
    note=$(grep '^server.db: ' "$TMP/out")
    if [ "$(printf '%s\n' "$note" | grep -c .)" -eq 1 ] && [ ! -s "$TMP/err" ] &&
        printf '%s' "$note" | grep -Eq "server.db: (not a bangtrace server trace|corrupt server trace|truncated server trace)" &&
        grep -Eq "^><!F +0 L0" "$TMP/out" && grep -q "^culprit: " "$TMP/out"; then
        ok "$kind server.db: one note ($note), the request's part still there"
    else fail "$kind server.db: note '$note', stderr '$(head -c 200 "$TMP/err")'"; fi
done

# --- an ordinary trace ----------------------------------------------------------
"$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt hi -n 4 --trace "$TMP/T.db" >/dev/null 2>"$TMP/run.err" ||
    fail "run --trace: $(head -c 300 "$TMP/run.err")"
cp "$TMP/random.db" "$TMP/server.db"        # beside it, and not read: no kv_access
expect_exit 0 "ordinary trace: --dump cache" "$BANGTRACE" browse "$TMP/T.db" --dump cache &&
    [ "$(wc -l < "$TMP/out")" -eq 1 ] && [ ! -s "$TMP/err" ] && grep -q "^Cache: not a batched server's trace (no kv_access)" "$TMP/out" &&
    ok "ordinary trace: one line, not a batched server's trace" || fail "ordinary trace: $(cat "$TMP/out" "$TMP/err")"

# --- 80x24 ----------------------------------------------------------------------
if built_with NCURSESW && command -v tmux >/dev/null 2>&1; then
    export TERM=${TERM:-xterm}
    [ "$TERM" = dumb ] && export TERM=xterm
    screen() { $T capture-pane -p -t bt; }
    wait_for() { local i=0; while [ $i -lt 50 ]; do screen | grep -qF -- "$1" && return 0; sleep 0.1; i=$((i + 1)); done; return 1; }
    $T -f /dev/null new-session -d -s bt -x 80 -y 24 \
        "env LANG=C.UTF-8 '$BANGTRACE' browse '$TMP/pad/$b.db' --view cache; echo BROWSE-EXIT=\$?; sleep 60" || fail "tmux new-session"
    $T set-option -t bt -g status off >/dev/null 2>&1
    if wait_for "8 Cache"; then
        screen >"$TMP/s80"
        [ "$(wc -L < "$TMP/s80")" -le 80 ] && grep -q "^culprit: step 0: read KV block 0" "$TMP/s80" &&
            grep -Eq "^><!F +0 L0 +hit,r +Hr+ written by" "$TMP/s80" && grep -q "Enter:its step" "$TMP/s80" &&
            ok "80x24: the culprit, block 0's row and the view's keys on screen" || fail "80x24 Cache view: $(cat "$TMP/s80")"
        $T send-keys -t bt Enter
        wait_for "block 0: step 0, where this request first read it (hit)" && screen | grep -q "^Step 0 " &&
            ok "Enter on block 0: the Step view at step 0, its first read" || fail "Enter: $(screen)"
        $T send-keys -t bt 8 '?'
        wait_for "Grid columns" && screen | grep -qF 'fd ffn_down' && screen | grep -q "Tokens, Step, Walk, Run, Stack, Spec, Kern, Cache" &&
            ok "? help at 80x24: every view named, the grid legend still on screen" || fail "? help: $(screen)"
        $T send-keys -t bt Escape q
        wait_for "BROWSE-EXIT=0" && ok "q: exit 0" || fail "q: $(screen | tail -3)"
    else fail "the Cache view did not come up: $(screen)"; fi
else
    echo "SKIP part: no ncursesw build or no tmux (the 80x24 screen)"
fi
finish
