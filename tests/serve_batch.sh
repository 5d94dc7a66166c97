#!/usr/bin/env bash
# serve_batch.sh - the batched server (serve --batching on, the default):
#   - many requests (shared prefixes, repeats, greedy and seeded sampling,
#     streamed and not), random arrival, at concurrency above the lanes:
#     every answer is the one the request gets alone (serve --batching off
#     --parallel 1, itself run's path; and run --request for one), and the
#     traces agree bit for bit (logit snapshots, decode taps), on stories260K,
#     the tiny Llama GGUF, SmolLM2 Q4_1 (when cached) and a hybrid qwen35
#     (a state slot per lane), whose conversations resume their recurrent
#     state from snapshots at block boundaries;
#   - server.db: batches of several requests, prefix hits, every request
#     finished, reads of blocks another request wrote (v_cross_reads);
#   - the server's faults, each named by bisect and report down to the
#     writer request and the block or slot: pad_nan (NaN from a batch's
#     padding lane into block 0, mapped by a later prefix hit), prefix_wrong
#     (a hit mapped to another prefix's block; on the hybrid model another
#     prefix's state snapshot), slot_noreset (a hybrid model's state slot
#     handed on unreset), slot_swap (one request's rows on another's state
#     slot in the same batch, so only above concurrency 1); drawn per
#     request (p=) among
#     interleaved requests, every named writer is one the fault fired for;
#   - bad option combinations are one-line errors, server.db is never
#     overwritten.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_server
py=${PYTHON3:-python3}
D="$py $BT_SRCDIR/tests/serve_mix.py"
TINY=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT
stop_server() { kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; pids=""; }
q() { sqlite3 "file:$1?mode=ro" "$2" 2>/dev/null; }     # q DB SQL
field() { "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# identical NAME N CONC K SERVE-ARGS...: N requests at CONC on the batched
# server and one at a time alone; answers equal, K traces bit for bit
identical() {
    local nm=$1 n=$2 conc=$3 k=$4; shift 4
    $D plan 7 "$n" "$TMP/$nm.plan"
    start_server "$nm-b" "$@" --parallel 4 --block-size 4 --trace-dir "$TMP/$nm-b" || return 1
    $D send "http://127.0.0.1:$port" "$TMP/$nm.plan" "$TMP/$nm-b.json" "$conc" 11 >"$TMP/$nm.send" \
        || { fail "$nm: batched: $(cat "$TMP/$nm.send")"; stop_server; return 1; }
    stop_server
    start_server "$nm-s" "$@" --batching off --parallel 1 --trace-dir "$TMP/$nm-s" || return 1
    $D send "http://127.0.0.1:$port" "$TMP/$nm.plan" "$TMP/$nm-s.json" 1 12 >"$TMP/$nm.send" \
        || { fail "$nm: solo: $(cat "$TMP/$nm.send")"; stop_server; return 1; }
    stop_server
    out=$($D same "$TMP/$nm-b.json" "$TMP/$nm-s.json") && ok "$nm: $out, batched at concurrency $conc (4 lanes) and alone" \
        || fail "$nm: $out"
    out=$($D traces "$TMP/$nm-b" "$TMP/$nm-b.json" "$TMP/$nm-s" "$TMP/$nm-s.json" "$k") && ok "$nm: $out" \
        || fail "$nm: $out"
    db=$TMP/$nm-b/server.db
    [ "$(q "$db" "select value from meta where key='status'")" = ok ] && ok "$nm: server.db closed ok" \
        || fail "$nm: server.db status: $(q "$db" "select value from meta where key='status'")"
    [ "$(q "$db" "select count(*) from requests where finish is null")" = 0 ] \
        && [ "$(q "$db" "select count(*) from requests")" = "$n" ] && ok "$nm: server.db: $n requests, every one finished" \
        || fail "$nm: server.db requests: $(q "$db" "select count(*), count(finish) from requests")"
    multi=$(q "$db" "select count(*) from steps where n_seqs > 1")
    [ "${multi:-0}" -gt 0 ] && ok "$nm: $multi forwards batched several requests" || fail "$nm: no forward had two requests"
}

# --- 1. bit-identical to alone ------------------------------------------------
if identical stories 40 6 6; then
    db=$TMP/stories-b/server.db
    hits=$(q "$db" "select count(*) from requests where hit_tokens > 0")
    cross=$(q "$db" "select count(*) from v_cross_reads")
    [ "${hits:-0}" -gt 5 ] && [ "${cross:-0}" -gt 0 ] && ok "stories: prefix hits in $hits requests, $cross cross-request reads in v_cross_reads" \
        || fail "stories: prefix hits $hits, cross reads $cross"
    # the same request through run (the solo path serve --batching off stands for)
    "$py" -c 'import json,sys; p=json.load(open(sys.argv[1])); r=[x for x in p if not x.get("stream")][0]; json.dump(r["body"], open(sys.argv[2],"w")); print(r["key"])' \
        "$TMP/stories.plan" "$TMP/one.json" >"$TMP/one.key"
    "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --request "$TMP/one.json" --json >"$TMP/one.run" 2>"$TMP/one.err" \
        && [ "$(field "$TMP/one.run" 'repr(j["text"])')" = "$(field "$TMP/stories-b.json" "repr(j['$(cat "$TMP/one.key")']['text'])")" ] \
        && ok "stories: a batched answer is run --request's text" || fail "stories: batched vs run: $(head -c 200 "$TMP/one.err")"
    # a clean request that read the prefix cache replays clean: the cached
    # positions go into the reference untapped, then the step's own rows
    hr=$(q "$db" "select request from requests where hit_tokens > 0 order by request limit 1")
    expect_exit 0 "stories: bisect --reference on a prefix-hit request ($hr) finds no divergence" "$BANGTRACE" bisect \
        "$TMP/stories-b/$hr.db" --reference --model "$STORIES" --tokenizer "$TOK512"
    grep -q "prefix cache: [0-9]* positions of 1 step came from the batched server's prefix cache" "$TMP/out" \
        || fail "stories --reference: $(cat "$TMP/out")"
fi
SERVE_MODEL="--model $TINY" identical tiny 16 4 3
if [ -f "$SMOL" ]; then
    SERVE_MODEL="--model $SMOL" identical smollm2 12 4 2
else
    echo "SKIP part: $SMOL not cached (the Q4_1 model)"
fi
HYB=""
if "$py" -c "import numpy, gguf" 2>/dev/null; then
    "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/qwen35.gguf" --arch qwen35 --mtp 0 --seed 7 >"$TMP/tool.log" 2>&1 \
        && HYB=$TMP/qwen35.gguf || fail "make-tiny-hybrid.py: $(tail -1 "$TMP/tool.log")"
fi
if [ -n "$HYB" ]; then
    SERVE_MODEL="--model $HYB" identical qwen35 16 4 3
    grep -q "prefix cache on ([0-9]* recurrent state snapshots)" "$TMP/qwen35-b.err" && ok "qwen35: the start line names the state snapshots" \
        || fail "qwen35 start line: $(head -2 "$TMP/qwen35-b.err")"
    # conversations: each turn extends the last one, so its prefix hit
    # resumes the recurrent state from a snapshot at a block boundary
    SERVE_MODEL="--model $HYB" start_server chain-b --parallel 3 --block-size 4 --trace-dir "$TMP/chain-b" || finish
    $D chain "http://127.0.0.1:$port" "$TMP/chain-b.json" 3 >"$TMP/chain.out" || fail "qwen35 conversations: $(cat "$TMP/chain.out")"
    stop_server
    SERVE_MODEL="--model $HYB" start_server chain-s --parallel 1 --batching off || finish
    $D chain "http://127.0.0.1:$port" "$TMP/chain-s.json" 1 >"$TMP/chain.out" || fail "qwen35 conversations alone: $(cat "$TMP/chain.out")"
    stop_server
    out=$($D same "$TMP/chain-b.json" "$TMP/chain-s.json") && ok "qwen35 conversations: $out, state resumed from snapshots and alone" \
        || fail "qwen35 conversations: $out"
    nr=$(q "$TMP/chain-b/server.db" "select count(*) from slot_events where event = 'restore'")
    [ "${nr:-0}" -ge 6 ] && ok "qwen35 conversations: $nr prefix hits restored a state snapshot" || fail "qwen35: $nr restores"
    t2=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["c0t2"]["request_id"])' "$TMP/chain-b.json")
    [ "$(q "$TMP/chain-b/$t2.db" "select count(*) from kv_access where mode = 'snap'")" = 1 ] \
        && ok "qwen35: the third turn's trace names the snapshot it resumed from (kv_access snap)" || fail "qwen35 kv_access snap: $(q "$TMP/chain-b/$t2.db" "select * from kv_access where mode <> 'w'")"
    expect_exit 0 "qwen35: bisect --reference on a resumed turn finds no divergence" "$BANGTRACE" bisect "$TMP/chain-b/$t2.db" --reference
else
    echo "SKIP part: python3 with numpy and gguf makes the hybrid model"
fi

# --- 2. faults, each named down to the writer and the block or slot -------------
P1="Once upon a time there was a little girl named Lily. She loved to play outside"
P2="The old man walked to the river every morning. He looked at the water and smiled"
complete() {   # complete BODY OUT: the answer JSON in OUT, its request id on stdout
    curl -s -o "$2" -X POST "http://127.0.0.1:$port/v1/completions" --data-binary "$1"
    field "$2" 'j["bangtrace"]["request_id"]'
}
ids() { field "$1" 'j["bangtrace"]["completion_ids"]'; }
# alone BODY OUT: the hybrid model's answer with no other request, no batching
alone() {
    SERVE_MODEL="--model $HYB" start_server alone --parallel 1 --batching off || finish
    complete "$1" "$2" >/dev/null
    stop_server
}
start_server padnan --parallel 2 --block-size 4 --trace-dir "$TMP/padnan" --inject pad_nan || finish
a=$(complete "{\"prompt\":\"$P1\",\"max_tokens\":6}" "$TMP/a.json")
b=$(complete "{\"prompt\":\"$P1 and run\",\"max_tokens\":6}" "$TMP/b.json")
stop_server
expect_exit 1 "pad_nan: bisect finds the second request's first non-finite" "$BANGTRACE" bisect "$TMP/padnan/$b.db"
grep -q "cache provenance: step 0, layer 0: read KV block 0 (prefix hit.*written by $a .*non-finite .* when the padding lane of $a wrote it" "$TMP/out" \
    && ok "pad_nan: bisect names block 0, the prefix hit and the writer $a's padding lane" || fail "pad_nan bisect: $(cat "$TMP/out")"
"$BANGTRACE" report "$TMP/padnan/$b.db" >"$TMP/rep" 2>&1
grep -q "Another request's cache data:.*KV block 0.*padding lane of $a" "$TMP/rep" && ok "pad_nan: report says it in its summary" \
    || fail "pad_nan report: $(grep -A3 'Cache' "$TMP/rep" | head -5)"
[ "$(q "$TMP/padnan/server.db" "select request from v_nonfinite_blocks where block = 0")" = "$a" ] \
    && ok "pad_nan: server.db's v_nonfinite_blocks: block 0, by $a" || fail "pad_nan v_nonfinite_blocks: $(q "$TMP/padnan/server.db" "select * from v_nonfinite_blocks")"

start_server pwrong --parallel 2 --block-size 4 --trace-dir "$TMP/pwrong" --inject prefix_wrong || finish
a=$(complete "{\"prompt\":\"$P1\",\"max_tokens\":8}" "$TMP/a.json")
c=$(complete "{\"prompt\":\"$P2\",\"max_tokens\":8}" "$TMP/c.json")
b=$(complete "{\"prompt\":\"$P1\",\"max_tokens\":8}" "$TMP/b.json")
stop_server
[ "$(field "$TMP/a.json" 'j["choices"][0]["text"]')" != "$(field "$TMP/b.json" 'j["choices"][0]["text"]')" ] \
    && ok "prefix_wrong: the same prompt answered differently after a wrong hit" || fail "prefix_wrong: the answers are the same"
expect_exit 1 "prefix_wrong: bisect reports the wrong mapping (no NaN)" "$BANGTRACE" bisect "$TMP/pwrong/$b.db"
grep -Eq "cache provenance: step 0: read KV block [0-9]+ \(prefix hit, positions 0-3\) written by ($a|$c) at server step [0-9]+: prefix_wrong: mapped block" "$TMP/out" \
    && ok "prefix_wrong: bisect names the wrongly mapped block and its writer" || fail "prefix_wrong bisect: $(cat "$TMP/out")"
expect_exit 1 "prefix_wrong: bisect --reference diverges" "$BANGTRACE" bisect "$TMP/pwrong/$b.db" --reference --model "$STORIES" \
    --tokenizer "$TOK512"
grep -q "first divergence: step 0" "$TMP/out" && grep -Eq "cache provenance: step 0: read KV block [0-9]+ .*prefix_wrong" "$TMP/out" \
    && ok "prefix_wrong: bisect --reference: the first divergence at step 0, from the wrongly mapped block" \
    || fail "prefix_wrong --reference: $(cat "$TMP/out")"

if [ -n "$HYB" ]; then
    SERVE_MODEL="--model $HYB" start_server noreset --parallel 1 --trace-dir "$TMP/noreset2" --inject slot_noreset || finish
    a=$(complete '{"prompt":"one two three four five six","max_tokens":6}' "$TMP/a.json")
    b=$(complete '{"prompt":"seven eight nine","max_tokens":6}' "$TMP/b.json")
    stop_server
    expect_exit 1 "slot_noreset: bisect reports the kept state" "$BANGTRACE" bisect "$TMP/noreset2/$b.db"
    grep -q "cache provenance: step 0: state slot 0 last written by $a at server step [0-9]*, not reset on reuse" "$TMP/out" \
        && ok "slot_noreset: bisect names slot 0 and its last writer $a" || fail "slot_noreset bisect: $(cat "$TMP/out")"
    [ "$(q "$TMP/noreset2/server.db" "select event from slot_events where request = '$b'")" = keep ] \
        && ok "slot_noreset: server.db's slot_events: keep for $b" || fail "slot_noreset slot_events: $(q "$TMP/noreset2/server.db" "select * from slot_events")"
    alone '{"prompt":"seven eight nine","max_tokens":6}' "$TMP/b0.json"
    [ "$(ids "$TMP/b.json")" != "$(ids "$TMP/b0.json")" ] \
        && ok "slot_noreset: the kept state changed the answer" || fail "slot_noreset: the answer is the clean one"
    # two requests in one batch, one's rows on the other's state slot (a
    # graph reused across batch shapes): only above concurrency 1
    SERVE_MODEL="--model $HYB" start_server swap --parallel 2 --trace-dir "$TMP/swap" --inject slot_swap || finish
    curl -s -o "$TMP/s1.json" -X POST "http://127.0.0.1:$port/v1/completions" \
        --data-binary '{"prompt":"one two three four five six seven eight","max_tokens":200}' &
    s2=$(complete '{"prompt":"alpha beta gamma","max_tokens":200}' "$TMP/s2.json")
    wait $!
    s1=$(field "$TMP/s1.json" 'j["bangtrace"]["request_id"]')
    ok1=0
    for r in "$s1" "$s2"; do
        o=$([ "$r" = "$s1" ] && echo "$s2" || echo "$s1")
        "$BANGTRACE" bisect "$TMP/swap/$r.db" >"$TMP/sw.out" 2>&1
        [ $? -eq 1 ] && grep -q "^cache provenance: step [0-9]*: state slot [01] written by $o at server step [0-9]*, which is not this request's (slot_swap" "$TMP/sw.out" \
            && ok1=$((ok1 + 1)) || echo "slot_swap $r: $(cat "$TMP/sw.out")"
    done
    [ "$ok1" = 2 ] && ok "slot_swap: each of two batched requests' bisect names the other as the writer of its state slot" \
        || fail "slot_swap: $ok1 of 2 traces named the other request"
    a=$(complete '{"prompt":"alpha beta gamma","max_tokens":24}' "$TMP/s3.json")
    stop_server
    alone '{"prompt":"alpha beta gamma","max_tokens":24}' "$TMP/s0.json"
    [ "$(ids "$TMP/s3.json")" = "$(ids "$TMP/s0.json")" ] \
        && ok "slot_swap: alone in its batch the request gets its clean answer (the fault needs concurrency)" \
        || fail "slot_swap: a request alone was changed"
    # a prefix hit that resumes another prefix's state (the captured-graph
    # incident: the previous request's state block replayed)
    SERVE_MODEL="--model $HYB" start_server hwrong --parallel 1 --block-size 4 --trace-dir "$TMP/hwrong" --inject prefix_wrong || finish
    a=$(complete '{"prompt":"one two three four five six seven","max_tokens":10}' "$TMP/a.json")
    "$py" -c 'import json,sys; json.dump({"prompt": "one two three four five six seven" + json.load(open(sys.argv[1]))["choices"][0]["text"] + " and", "max_tokens": 6}, open(sys.argv[2], "w"))' \
        "$TMP/a.json" "$TMP/b.body"
    b=$(complete @"$TMP/b.body" "$TMP/b.json")
    stop_server
    expect_exit 1 "hybrid prefix_wrong: bisect reports the wrong state" "$BANGTRACE" bisect "$TMP/hwrong/$b.db"
    grep -q "cache provenance: step 0: restored the recurrent state after position [0-9]* from snapshot [0-9]* (prefix hit) written by $a at server step [0-9]*: prefix_wrong: restored snapshot" "$TMP/out" \
        && ok "hybrid prefix_wrong: bisect names the snapshot and its writer $a" || fail "hybrid prefix_wrong: $(cat "$TMP/out")"
    alone @"$TMP/b.body" "$TMP/b0.json"
    [ "$(ids "$TMP/b.json")" != "$(ids "$TMP/b0.json")" ] \
        && ok "hybrid prefix_wrong: the wrong state changed the answer" || fail "hybrid prefix_wrong: the answer is the clean one"
fi

# drawn per request among interleaved requests: every request that went
# non-finite names a writer the fault fired for
start_server drawn --parallel 4 --block-size 4 --trace-dir "$TMP/drawn" --inject pad_nan@p=0.2 || finish
$D plan 3 30 "$TMP/drawn.plan"
$D send "http://127.0.0.1:$port" "$TMP/drawn.plan" "$TMP/drawn.json" 5 4 >"$TMP/drawn.send" || fail "drawn: $(cat "$TMP/drawn.send")"
stop_server
# on failure the whole output: the trace's bisect (a rare run names no writer; kept for diagnosis)
"$py" - "$TMP/drawn" "$BANGTRACE" <<'PY' >"$TMP/drawn.out" 2>&1 && ok "pad_nan@p=0.2: $(tail -1 "$TMP/drawn.out")" || fail "pad_nan@p=0.2: $(cat "$TMP/drawn.out")"
import glob, os, re, sqlite3, subprocess, sys
d, bt = sys.argv[1], sys.argv[2]
db = sqlite3.connect(os.path.join(d, "server.db"))
fired = {r for (r,) in db.execute("select request from block_events where event = 'inject'")}
named, bad = 0, 0
for t in sorted(glob.glob(os.path.join(d, "req-*.db"))):
    out = subprocess.run([bt, "bisect", t], capture_output=True, text=True).stdout
    if "first non-finite" not in out:
        continue
    bad += 1
    m = re.search(r"when the padding lane of (req-\S+) wrote it", out)
    assert m, "%s went non-finite without a named writer:\n%s" % (t, out)
    assert m.group(1) in fired, "%s names %s, for which pad_nan never fired" % (t, m.group(1))
    named += 1
assert fired and named, "the fault fired for %d requests, %d traces named one" % (len(fired), named)
print("%d of 30 requests went non-finite, each naming one of the %d the fault fired for" % (named, len(fired)))
PY

# prefix_wrong and (hybrid) slot_noreset drawn the same way: bisect names
# the fault in exactly the requests it fired for, and every other answer is
# the one the request gets alone
drawn() {  # drawn NAME SPEC N SERVE-ARGS...
    local nm=$1 spec=$2 n=$3; shift 3
    $D plan 5 "$n" "$TMP/$nm.plan"
    start_server "$nm-d" "$@" --parallel 4 --block-size 4 --trace-dir "$TMP/$nm-d" --inject "$spec" || return
    $D send "http://127.0.0.1:$port" "$TMP/$nm.plan" "$TMP/$nm-d.json" 5 6 >"$TMP/$nm.send" || fail "$nm: $(cat "$TMP/$nm.send")"
    stop_server
    start_server "$nm-a" "$@" --batching off || return
    $D send "http://127.0.0.1:$port" "$TMP/$nm.plan" "$TMP/$nm-a.json" 1 6 >"$TMP/$nm.send" || fail "$nm alone: $(cat "$TMP/$nm.send")"
    stop_server
    out=$($D drawn "$TMP/$nm-d" "${spec%%@*}" "$BANGTRACE" "$TMP/$nm-d.json" "$TMP/$nm-a.json") && ok "$spec: $out" \
        || fail "$spec: $out"
}
drawn pwrongd prefix_wrong@p=0.3 30
[ -n "$HYB" ] && SERVE_MODEL="--model $HYB" drawn noresetd slot_noreset@p=0.5 16

# --- the bounded load test: 6 s at concurrency 16 on 4 lanes, a third of
# the streams dropped by their clients mid-way, SIGTERM with requests in
# flight: none lost or answered twice, every trace closed, server.db
# consistent
"$py" "$BT_SRCDIR/tools/bench-serve.py" --model "$TINY" --bangtrace "$BANGTRACE" --arms "" --load 6 --parallel 4 --ctx 256 \
    --threads 2 >"$TMP/load.out" 2>&1 && grep -q "; consistent$" "$TMP/load.out" && ok "$(tail -1 "$TMP/load.out")" \
    || fail "load test: $(tail -3 "$TMP/load.out")"

# --- 3. a byte token's byte no UTF-8 holds: U+FFFD in JSON, never a dropped answer
# (this seeded request on the tiny model emits <0xF2> then "k"; serve used to
# close the connection and run --json to leave "text" out)
BODY='{"prompt":"The old man walked to the river every morning. He looked at the water and smiled at the fish. So they","max_tokens":18,"temperature":0.9,"seed":460}'
printf '%s' "$BODY" >"$TMP/bytes.json"
"$BANGTRACE" run --model "$TINY" --request "$TMP/bytes.json" --json >"$TMP/bytes.run" 2>/dev/null
SERVE_MODEL="--model $TINY" start_server bytes --parallel 2 || finish
curl -s -o "$TMP/bytes.serve" -X POST "http://127.0.0.1:$port/v1/completions" --data-binary "$BODY"
stop_server
"$py" - "$TMP/bytes.run" "$TMP/bytes.serve" <<'PY' && ok "invalid UTF-8 from byte tokens: U+FFFD in run --json and serve, the same text" \
    || fail "invalid UTF-8: $(head -c 300 "$TMP/bytes.serve")"
import json, sys
r, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert "\ufffd" in r["text"], r.get("text")
assert s["choices"][0]["text"] == r["text"], (s["choices"][0]["text"], r["text"])
PY

# --- 4. bad options, nothing overwritten ---------------------------------------
expect_exit 2 "--batching maybe is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --batching maybe
grep -q "expects on or off" "$TMP/err" || fail "--batching maybe: $(cat "$TMP/err")"
expect_exit 2 "--block-size with --batching off is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --batching off --block-size 8
grep -q "'--block-size' is the batched server's" "$TMP/err" || fail "--block-size off: $(cat "$TMP/err")"
expect_exit 2 "slot_noreset on a model without state slots is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --port 0 --inject slot_noreset
grep -q "needs a hybrid model" "$TMP/err" || fail "slot_noreset: $(cat "$TMP/err")"
expect_exit 2 "prefix_wrong without the prefix cache is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --port 0 --prefix-cache off --inject prefix_wrong
expect_exit 2 "kvcorrupt on the batched server is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --port 0 --inject kvcorrupt@layer=1,pos=1
grep -q "use --batching off" "$TMP/err" || fail "kvcorrupt: $(cat "$TMP/err")"
expect_exit 2 "a server fault with a bad p is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --inject pad_nan@p=2
expect_exit 2 "--kv-blocks below one request's context is refused" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --port 0 --kv-blocks 2
grep -q "cannot hold one request" "$TMP/err" || fail "--kv-blocks 2: $(cat "$TMP/err")"
expect_exit 2 "report on server.db itself is refused" "$BANGTRACE" report "$TMP/padnan/server.db"
grep -q "the batched server's trace (server.db), not a request's: open a request's trace beside it" "$TMP/err" \
    && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "report server.db: one line pointing at the request traces" || fail "report server.db: $(cat "$TMP/err")"
sum=$(sha256sum "$TMP/padnan/server.db" | cut -c1-64)
start_server again --trace-dir "$TMP/padnan" || finish
stop_server
[ "$(sha256sum "$TMP/padnan/server.db" | cut -c1-64)" = "$sum" ] && [ -f "$TMP/padnan/server-2.db" ] \
    && ok "a second server in the same --trace-dir writes server-2.db; server.db is untouched" || fail "server.db again: $(ls "$TMP/padnan")"
finish
