#!/bin/sh
# serve_probe.sh - `bangtrace serve` on stories260K answers the official
# openai Python client (streaming and not), writes a trace per request,
# refuses bad requests with 4xx JSON; `probe` counts 0 of 40 failures on a
# clean server, 40 of 40 token walls on an injected one, and on a server
# that fails a known fraction (p=0.25) a Wilson interval that covers it.
# Servers bind 127.0.0.1 on free ports and are always stopped.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_server
py=${PYTHON3:-python3}
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT

echo '{"prompt":"Once upon a time","max_tokens":24}' > "$TMP/req.json"

# --- clean server with per-request traces ---------------------------------
# strict names: other models get 404 (by default any name is served: serve_robust.sh)
start_server clean --parallel 2 --trace-dir "$TMP/traces" --served-model-name stories260K.bin || finish
url=http://127.0.0.1:$port
code=$(curl -s -o "$TMP/c.json" -D "$TMP/c.hdr" -w '%{http_code}' -X POST "$url/v1/completions" -d @"$TMP/req.json")
[ "$code" = 200 ] && grep -q '"text":", there was' "$TMP/c.json" && ok "completion answers" || fail "completion: $code $(cat "$TMP/c.json")"
rid=$(tr -d '\r' < "$TMP/c.hdr" | sed -n 's/^x-request-id: //p')
[ -n "$rid" ] && [ -f "$TMP/traces/$rid.db" ] && ok "trace named by the request id ($rid)" || fail "no trace for request id '$rid': $(ls "$TMP/traces")"
"$BANGTRACE" report "$TMP/traces/$rid.db" > "$TMP/report.md" 2>&1 && ok "report reads the per-request trace" || fail "report: $(head -c 300 "$TMP/report.md")"
curl -sN -X POST "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":8,"stream":true}' > "$TMP/sse"
grep -q '^data: \[DONE\]' "$TMP/sse" && [ "$(grep -c '^data: {' "$TMP/sse")" -ge 2 ] && ok "SSE stream ends in [DONE]" || fail "stream: $(head -c 300 "$TMP/sse")"
curl -s "$url/v1/models" | grep -q '"id":"stories260K.bin"' && ok "/v1/models" || fail "/v1/models"

# bad requests: 4xx with OpenAI-style error JSON, and the server lives on
bad() {  # bad WANT DESC BODY [PATH]
    c=$(curl -s -o "$TMP/e.json" -w '%{http_code}' -X POST "$url${4:-/v1/completions}" --data-binary "$3")
    if [ "$c" = "$1" ] && grep -q '"error":{' "$TMP/e.json"; then ok "$2 -> $c"; else fail "$2: HTTP $c $(head -c 200 "$TMP/e.json")"; fi
}
bad 400 "malformed JSON" '{"prompt":'
bad 400 "wrong type" '{"prompt":"a","max_tokens":"ten"}'
bad 400 "not an object" '[1,2]'
bad 404 "unknown model" '{"prompt":"a","model":"gpt-9"}'
bad 400 "max_tokens past the context" '{"prompt":"a","max_tokens":100000}'
bad 400 "chat without messages" '{"prompt":"a"}' /v1/chat/completions
head -c 1100000 /dev/zero | tr '\0' a > "$TMP/big"
c=$(curl -s -o "$TMP/e.json" -w '%{http_code}' -X POST "$url/v1/completions" --data-binary @"$TMP/big")
[ "$c" = 413 ] && ok "body over the limit -> 413" || fail "big body: HTTP $c"
curl -sf "$url/health" >/dev/null && ok "alive after bad requests" || fail "server died on bad requests"

# the official openai client, both modes
if ! "$py" -c 'import openai' 2>/dev/null; then
    "$py" -m pip install -q openai >/dev/null 2>&1 || "$py" -m pip install -q --break-system-packages openai >/dev/null 2>&1
fi
if "$py" -c 'import openai' 2>/dev/null; then
    "$py" - "$url" > "$TMP/oa.out" 2>&1 <<'PY'
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
r = c.completions.create(model="stories260K.bin", prompt="Once upon a time", max_tokens=16)
assert r.choices[0].text.startswith(", there was"), r
parts = [ch.choices[0].text for ch in c.completions.create(model="stories260K.bin", prompt="Once upon a time", max_tokens=16, stream=True)]
assert "".join(parts) == r.choices[0].text, (parts, r.choices[0].text)
try:
    c.completions.create(model="nope", prompt="x", max_tokens=4)
    raise SystemExit("unknown model was accepted")
except openai.NotFoundError:
    pass
print("openai client ok")
PY
    grep -q "openai client ok" "$TMP/oa.out" && ok "openai client: streaming and non-streaming agree" || fail "openai client: $(tail -5 "$TMP/oa.out")"
else
    echo "note: the openai package could not be installed; client check skipped"
fi

# SmolLM2 (a chat model, when cached): the openai client's chat API, both modes
if [ -f "$SMOL" ] && "$py" -c 'import openai' 2>/dev/null; then
    clean_pid=$last_pid clean_port=$port
    SERVE_MODEL="--model $SMOL" start_server smol --trace-dir "$TMP/smoltraces" && smol_url="http://127.0.0.1:$port"
    if [ -n "${smol_url:-}" ]; then
        "$py" - "$smol_url" > "$TMP/oas.out" 2>&1 <<'PY'
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
msgs = [{"role": "user", "content": "What is the capital of France?"}]
model = c.models.list().data[0].id
r = c.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0)
text = r.choices[0].message.content
assert "Paris" in text, text
parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0, stream=True)]
assert "".join(parts) == text, (parts, text)
print("smol chat ok")
PY
        grep -q "smol chat ok" "$TMP/oas.out" && ok "SmolLM2: openai chat client, streaming and not, answers Paris" || fail "SmolLM2 chat: $(tail -5 "$TMP/oas.out")"
        [ "$(ls "$TMP/smoltraces" | grep -c '^req-.*\.db$')" -ge 2 ] && ok "SmolLM2: a trace per chat request" || fail "SmolLM2: traces: $(ls "$TMP/smoltraces")"
        kill "$last_pid"; wait "$last_pid" 2>/dev/null
    fi
    last_pid=$clean_pid port=$clean_port   # the SIGTERM check below is about the clean server
else
    echo "note: SmolLM2 not cached or no openai client: the chat-model check is skipped"
fi

# probe against the clean server: 0 failures of 40
expect_exit 0 "probe clean: 0 of 40 (upper bound under 10%)" "$BANGTRACE" probe --url "$url" --request "$TMP/req.json" -n 40 --concurrency 2 --max-fail 0.1
grep -q "ok  *40" "$TMP/out" || fail "probe clean counts: $(cat "$TMP/out")"
expect_exit 1 "probe clean at --max-fail 1%: inconclusive" "$BANGTRACE" probe --url "$url" --request "$TMP/req.json" -n 40 --max-fail 0.01
grep -q "INCONCLUSIVE.*more" "$TMP/out" || fail "inconclusive wording: $(cat "$TMP/out")"
ntr=$(ls "$TMP/traces" | grep -c '^req-.*\.db$')
[ "$ntr" -ge 80 ] && ok "one trace per request ($ntr)" || fail "traces: $ntr"

# SIGTERM: the server stops, every trace closed
kill -TERM "$last_pid"; wait "$last_pid" 2>/dev/null
pids=""
running=0
for t in "$TMP"/traces/req-*.db; do "$BANGTRACE" report "$t" 2>&1 | grep -qi "unfinished" && running=$((running + 1)); done
[ "$running" -eq 0 ] && ok "SIGTERM: every trace closed" || fail "$running traces still running"

# --- a token-0 wall on every request ---------------------------------------
start_server wall --inject 'nan@step=3,op=token_embd' || finish
expect_exit 1 "probe on an injected server fails" "$BANGTRACE" probe --url "http://127.0.0.1:$port" --request "$TMP/req.json" -n 40 --json
"$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["classes"]["token_wall"] == 40, j' "$TMP/out" \
    && ok "40 of 40 token walls" || fail "wall counts: $(cat "$TMP/out")"
kill "$last_pid"; wait "$last_pid" 2>/dev/null; pids=""

# --- a known fraction: p=0.25 drawn per request -----------------------------
start_server frac --parallel 2 --inject 'nan@step=3,op=token_embd,p=0.25' || finish
expect_exit 1 "probe on a 25% server" "$BANGTRACE" probe --url "http://127.0.0.1:$port" --request "$TMP/req.json" -n 80 --concurrency 2 --json
"$py" -c '
import json,sys; j=json.load(open(sys.argv[1])); lo,hi=j["wilson95"]
assert 0 < j["failures"] < 80 and lo <= 0.25 <= hi, j' "$TMP/out" \
    && ok "the Wilson interval covers the true 25%" || fail "fraction: $(cat "$TMP/out")"
kill "$last_pid"; wait "$last_pid" 2>/dev/null; pids=""

# --- which requests are traced: flagged only, and every Nth -----------------
start_server flagged --inject 'nan@step=3,op=token_embd,p=0.25' --trace-dir "$TMP/flagged" --trace flagged || finish
expect_exit 1 "probe on a 25% server, --trace flagged" "$BANGTRACE" probe --url "http://127.0.0.1:$port" --request "$TMP/req.json" -n 24 --json
nf=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["failures"])' "$TMP/out")
nt=$(ls "$TMP/flagged" 2>/dev/null | grep -c '^req-.*\.db$')
[ "$nt" = "$nf" ] && [ "$nt" -gt 0 ] && ok "--trace flagged: one trace per flagged request ($nt of 24)" || fail "--trace flagged: $nt traces for $nf flagged requests"
bad=0
for t in "$TMP"/flagged/req-*.db; do "$BANGTRACE" bisect "$t" >/dev/null 2>&1; [ $? -eq 1 ] || bad=$((bad + 1)); done
[ "$bad" -eq 0 ] && ok "--trace flagged: every kept trace holds the fault (bisect exit 1)" || fail "--trace flagged: $bad traces without the fault"
kill "$last_pid"; wait "$last_pid" 2>/dev/null; pids=""
start_server sampled --trace-dir "$TMP/sampled" --trace sample:4 || finish
expect_exit 0 "probe with --trace sample:4" "$BANGTRACE" probe --url "http://127.0.0.1:$port" --request "$TMP/req.json" -n 12 --max-fail 0.5
nt=$(ls "$TMP/sampled" 2>/dev/null | grep -c '^req-.*\.db$')
[ "$nt" = 3 ] && ok "--trace sample:4: 3 traces for 12 requests" || fail "--trace sample:4: $nt traces for 12 requests"
kill "$last_pid"; wait "$last_pid" 2>/dev/null; pids=""

# --- A/B: replicate rule, native arms --------------------------------------
expect_exit 4 "compare with 10 per arm is not called (exit 4)" "$BANGTRACE" probe --compare --model "$STORIES" --model "$STORIES" \
    --inject 'nan@step=3,op=token_embd' --tokenizer "$TOK512" --request "$TMP/req.json" -n 10
grep -q "NOT CALLED.*per arm" "$TMP/out" || fail "replicate rule wording: $(cat "$TMP/out")"
expect_exit 1 "compare with 40 per arm: different (exit 1)" "$BANGTRACE" probe --compare --model "$STORIES" --model "$STORIES" \
    --inject 'nan@step=3,op=token_embd' --tokenizer "$TOK512" --request "$TMP/req.json" -n 40
grep -q "DIFFERENT" "$TMP/out" || fail "compare: $(cat "$TMP/out")"
# neither arm fails: exit 3, told apart from "the arms differ" (1) and "they agree" (0)
expect_exit 3 "compare where neither arm fails (exit 3)" "$BANGTRACE" probe --compare --model "$STORIES" --model "$STORIES" \
    --tokenizer "$TOK512" --request "$TMP/req.json" -n 4
grep -q "neither arm failed" "$TMP/out" || fail "compare, neither fails: $(cat "$TMP/out")"
expect_exit 3 "compare --json where neither arm fails" "$BANGTRACE" probe --compare --model "$STORIES" --model "$STORIES" \
    --tokenizer "$TOK512" --request "$TMP/req.json" -n 4 --json
grep -q '"outcome": *"neither_failed"' "$TMP/out" || fail "compare --json outcome: $(cat "$TMP/out")"
# both arms fail alike, 40 per arm: the arms agree, exit 0
expect_exit 0 "compare where both arms fail alike (exit 0)" "$BANGTRACE" probe --compare --model "$STORIES" \
    --inject 'nan@step=3,op=token_embd' --model "$STORIES" --inject 'nan@step=3,op=token_embd' \
    --tokenizer "$TOK512" --request "$TMP/req.json" -n 40 --json
grep -q '"outcome": *"agree"' "$TMP/out" || fail "compare --json outcome: $(cat "$TMP/out")"
expect_exit 2 "probe without a target" "$BANGTRACE" probe --request "$TMP/req.json"
expect_exit 2 "probe with a bad --expect" "$BANGTRACE" probe --url "http://127.0.0.1:1" --request "$TMP/req.json" --expect '('
finish
