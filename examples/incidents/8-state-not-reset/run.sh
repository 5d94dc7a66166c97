#!/usr/bin/env bash
# Case 8: a hybrid model's state slot is not reset between requests (see
# README.md). A tiny random qwen35 (tools/make-tiny-hybrid.py) behind the
# batched server with --inject slot_noreset; ~5 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
"$PY" -c 'import numpy, gguf' 2>/dev/null || skip "python3 with numpy and gguf makes the tiny hybrid model (./quickstart installs them)"
command -v curl >/dev/null || skip "curl is needed to talk to the server"
"$BT" help serve 2>&1 | grep -q -- '--batching' || skip "this build's serve has no batched server (libmicrohttpd)"
M=$OUT/qwen35-tiny.gguf
[ -f "$M" ] || "$PY" "$top/tools/make-tiny-hybrid.py" "$M" --arch qwen35 --mtp 0 --seed 7 >/dev/null 2>&1 || skip "make-tiny-hybrid.py failed"
rm -rf "$OUT/traces" "$OUT/alone"
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; wait 2>/dev/null' EXIT
# start ARGS...: a server on a free port, its URL in $url
start() {
    "$BT" serve --model "$M" --port 0 --threads "$THREADS" "$@" 2>"$OUT/serve.err" &
    srv=$!
    for _ in $(seq 100); do
        url=$(sed -n 's|.* on \(http://[0-9.:]*\) .*|\1|p' "$OUT/serve.err" | head -1)
        [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "the server did not come up: $(cat "$OUT/serve.err")"; exit 2
}
stop() { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=""; }
ask() {  # ask PROMPT OUT: the answer's request id on stdout
    curl -s -o "$2" "$url/v1/completions" -d "{\"prompt\":\"$1\",\"max_tokens\":8}"
    "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["bangtrace"]["request_id"])' "$2"
}
text() { "$PY" -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "$1"; }

heading "One lane, two requests; the server keeps the first one's recurrent state for the second"
start --parallel 1 --trace-dir "$OUT/traces" --inject slot_noreset
say "$(head -1 "$OUT/serve.err" | sed 's/^bangtrace: //')"
a=$(ask "one two three four five six" "$OUT/a.json")
b=$(ask "seven eight nine" "$OUT/b.json")
stop
say "$a: $(text "$OUT/a.json")"
say "$b: $(text "$OUT/b.json")"
start --parallel 1 --batching off
ask "seven eight nine" "$OUT/b0.json" >/dev/null
stop
say "alone:               $(text "$OUT/b0.json")"
expect "the second answer is not the one it gets alone" [ "$(text "$OUT/b.json")" != "$(text "$OUT/b0.json")" ]

heading "Whose state did it read?"
bt bisect bisect "$OUT/traces/$b.db"
grep -E '^(first non|cache provenance)' "$OUT/bisect.out" | sed 's/^/   /'
expect "bisect exits 1" eq "$rc" 1
expect "bisect names the slot and the request that last wrote it" has "$OUT/bisect.out" \
    "^cache provenance: step 0: state slot 0 last written by $a at server step [0-9]*, not reset on reuse"
bt report report "$OUT/traces/$b.db"
expect "report says it in its summary" has "$OUT/report.out" "Another request's cache data:.*state slot 0 last written by $a"

heading "Where did the state leave the exact computation?"
bt ref bisect "$OUT/traces/$b.db" --reference
grep -E '^first divergence' "$OUT/ref.out" | sed 's/^/   /'
expect "bisect --reference: the first divergence is step 0 in a recurrent op of layer 0 (the state the request started from)" \
    has "$OUT/ref.out" '^first divergence: step 0 (prefill, positions 0-[0-9]*), layer 0, op ssm_'
expect "server.db records the slot kept, not reset" \
    eq "$("$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select event from slot_events where request=?", (sys.argv[2],)).fetchone()[0])' "$OUT/traces/server.db" "$b")" keep
finish
