#!/bin/sh
# serve_robust.sh - `bangtrace serve` against a hostile or unlucky world:
# any model name by default (the README's serve + probe example replays
# unchanged) and a strict --served-model-name; /health only for GET/HEAD;
# slow clients (1,100 trickling sockets, a connection limit, a timeout)
# lock nobody out; a trace disk that fills up costs the client nothing and
# /health says so; the queue is checked before a prompt is tokenized; and
# SIGTERM under load answers everyone (in-flight: "cancelled", streams end
# in [DONE]; queued: 503) before the daemon stops with exit 0.
# Servers bind 127.0.0.1 on free ports and are always stopped; every loop
# is bounded.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_server
py=${PYTHON3:-python3}
pids=""
mnt=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait
    [ -n "$mnt" ] && umount "$mnt" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
stop_server() { kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; pids=""; }
# post PATH BODY: HTTP code on stdout, body in $TMP/b.json, headers in $TMP/b.hdr
post() { curl -s -m 30 -o "$TMP/b.json" -D "$TMP/b.hdr" -w '%{http_code}' -X POST "$url$1" --data-binary "$2"; }
# wait_health FIELD VALUE: until /health has "FIELD":VALUE (10 s at most)
wait_health() {
    i=0
    while [ $i -lt 100 ]; do
        curl -s -m 2 "$url/health" | grep -q "\"$1\":$2" && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

# --- model names -------------------------------------------------------------
start_server names || finish
url=http://127.0.0.1:$port
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"model":"gpt-9"}')
[ "$c" = 200 ] && grep -q '"text":", there was' "$TMP/b.json" && ok "default: any model name is served" || fail "default, model gpt-9: $c $(head -c 200 "$TMP/b.json")"
cp "$TMP/b.json" "$TMP/ref8.json"
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":48}')
[ "$c" = 200 ] && cp "$TMP/b.json" "$TMP/ref48.json" || fail "reference answer: $c"
# /health: GET and HEAD only
c=$(curl -s -o "$TMP/h.json" -D "$TMP/h.hdr" -w '%{http_code}' -X POST "$url/health")
[ "$c" = 405 ] && tr -d '\r' < "$TMP/h.hdr" | grep -qi '^allow: GET, HEAD$' && grep -q '"error":{' "$TMP/h.json" \
    && ok "POST /health -> 405 with Allow: GET, HEAD" || fail "POST /health: $c $(cat "$TMP/h.hdr" "$TMP/h.json")"
c=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$url/health")
[ "$c" = 405 ] && ok "DELETE /health -> 405" || fail "DELETE /health: $c"
c=$(curl -s -o /dev/null -w '%{http_code}' -I "$url/health")
[ "$c" = 200 ] && ok "HEAD /health -> 200" || fail "HEAD /health: $c"
c=$(curl -s -o /dev/null -D "$TMP/h.hdr" -w '%{http_code}' "$url/v1/completions")
[ "$c" = 405 ] && tr -d '\r' < "$TMP/h.hdr" | grep -qi '^allow: POST$' && ok "GET on a completion path -> 405 with Allow: POST" || fail "GET /v1/completions: $c"
stop_server

start_server strict --served-model-name story,tiny-story --served-model-name other || finish
url=http://127.0.0.1:$port
"$py" -c '
import json, sys, urllib.request
j = json.load(urllib.request.urlopen(sys.argv[1] + "/v1/models", timeout=10))
assert [m["id"] for m in j["data"]] == ["story", "tiny-story", "other"], j' "$url" \
    && ok "--served-model-name: /v1/models lists every name" || fail "--served-model-name: /v1/models: $(curl -s "$url/v1/models")"
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"model":"tiny-story"}')
[ "$c" = 200 ] && grep -q '"model":"story"' "$TMP/b.json" && ok "--served-model-name: an alias is served" || fail "alias: $c $(head -c 200 "$TMP/b.json")"
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"model":"stories260K.bin"}')
[ "$c" = 404 ] && grep -q '"code":"model_not_found"' "$TMP/b.json" && ok "--served-model-name: another name -> 404" || fail "strict: $c $(head -c 200 "$TMP/b.json")"
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":8}')
[ "$c" = 200 ] && ok "--served-model-name: no model field is served" || fail "no model: $c"
stop_server
expect_exit 2 "--served-model-name with an empty name" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --served-model-name 'a,,b'
grep -q "empty name" "$TMP/err" || fail "empty-name message: $(cat "$TMP/err")"
expect_exit 2 "--timeout 0" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --timeout 0
expect_exit 2 "--max-connections x" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --max-connections x
expect_exit 2 "--max-connections-per-ip 0" "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --max-connections-per-ip 0

# a --trace-dir removed under the running server: answered untraced, /health says so
start_server gone --trace-dir "$TMP/gone" || finish
url=http://127.0.0.1:$port
rm -rf "$TMP/gone"
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":8}')
[ "$c" = 200 ] && grep -q '"text":", there was' "$TMP/b.json" && ok "--trace-dir removed: the request is answered untraced" || fail "--trace-dir removed: $c $(head -c 300 "$TMP/b.json")"
curl -s "$url/health" | grep -q '"status":"degraded"' && ok "--trace-dir removed: /health says degraded" || fail "--trace-dir removed: /health $(curl -s "$url/health")"
stop_server

# --- slow clients --------------------------------------------------------------
# 1,100 sockets that send half a request line and stop: past select()'s
# FD_SETSIZE. A normal request must still be answered, and the idle ones
# are dropped after --timeout.
start_server slow --timeout 3 || finish
url=http://127.0.0.1:$port
"$py" - "$port" > "$TMP/slow.out" 2>&1 <<'PY'
import json, resource, select, socket, sys, time, urllib.request
port = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = 1300
if soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
n = min(1100, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 100)
if n < 1030:
    print("SKIPPED: the open-file limit allows only", n, "sockets"); sys.exit(0)
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
    socks.append(s)
time.sleep(0.5)
t0 = time.time()
r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port,
    data=b'{"prompt":"Once upon a time","max_tokens":8}', method="POST"), timeout=10)
body = json.load(r)
assert r.status == 200 and body["choices"][0]["text"].startswith(", there was"), body
print("answered with %d slow sockets open" % n)
# every slow socket is closed by the server within --timeout (3 s) + slack
deadline = time.time() + 15
open_ = {s.fileno(): s for s in socks}
p = select.poll()
for fd in open_: p.register(fd, select.POLLIN)
while open_ and time.time() < deadline:
    for fd, ev in p.poll(1000):
        s = open_[fd]
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data or b"HTTP/1." in data:   # closed, or closed after an error answer
            p.unregister(fd); del open_[fd]; s.close()
print("dropped %d of %d after the timeout" % (n - len(open_), n))
assert not open_, "%d slow sockets still open after 15 s" % len(open_)
PY
if grep -q "^SKIPPED" "$TMP/slow.out"; then echo "note: $(cat "$TMP/slow.out"): the 1,100-socket check is skipped"
else
    grep -q "answered with" "$TMP/slow.out" && ok "1,100 slow sockets: a normal request is still answered" || fail "slow sockets: $(tail -5 "$TMP/slow.out")"
    grep -q "dropped .* after the timeout" "$TMP/slow.out" && ok "slow sockets are dropped after --timeout" || fail "slow sockets not dropped: $(tail -3 "$TMP/slow.out")"
fi
curl -sf -m 5 "$url/health" >/dev/null && ok "alive after the slow clients" || fail "server died after the slow clients: $(tail -3 "$TMP/slow.err")"
stop_server

# a connection limit: the 9th connection is closed at once; once the idle
# ones time out, requests are answered again
start_server limit --max-connections 8 --timeout 2 || finish
"$py" - "$port" > "$TMP/limit.out" 2>&1 <<'PY'
import json, socket, sys, time, urllib.request
port = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
for s in socks: s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
extra = socket.create_connection(("127.0.0.1", port), timeout=5)
extra.settimeout(1.5)
try:
    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = extra.recv(4096)
except OSError:
    data = b""
assert data == b"", "the connection over the limit was answered: %r" % data[:80]
print("over the limit: closed")
time.sleep(3.5)
r = urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5)
assert r.status == 200
print("answered after the timeout")
PY
grep -q "over the limit: closed" "$TMP/limit.out" && ok "--max-connections 8: the 9th connection is closed" || fail "connection limit: $(tail -3 "$TMP/limit.out")"
grep -q "answered after the timeout" "$TMP/limit.out" && ok "--max-connections: answered again once idle connections time out" || fail "after the limit: $(tail -3 "$TMP/limit.out")"
stop_server

start_server perip --max-connections-per-ip 3 --timeout 5 || finish
"$py" - "$port" > "$TMP/perip.out" 2>&1 <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
for s in socks: s.sendall(b"GET /health HTTP/1.1\r\n")
time.sleep(0.3)
extra = socket.create_connection(("127.0.0.1", port), timeout=5)
extra.settimeout(1.5)
try:
    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    data = extra.recv(4096)
except OSError:
    data = b""
assert data == b"", "the 4th connection from one address was answered: %r" % data[:80]
socks[0].close()
time.sleep(0.3)
import urllib.request
assert urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5).status == 200
print("per-ip limit ok")
PY
grep -q "per-ip limit ok" "$TMP/perip.out" && ok "--max-connections-per-ip 3: the 4th from one address is closed, a freed one is reused" || fail "per-ip limit: $(tail -3 "$TMP/perip.out")"
stop_server

# SIGTERM with a client stalled mid-body: its request cannot be answered;
# the drain waits 5 s for it, closes it and exits 1 (not 0, not hanging)
start_server stall || finish
"$py" -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"prompt\":")
open(sys.argv[2], "w").close()
time.sleep(30)' "$port" "$TMP/stall.sent" 2>/dev/null &
stallc=$!
i=0
while [ $i -lt 100 ] && [ ! -f "$TMP/stall.sent" ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.5
kill -TERM "$last_pid"
i=0
while [ $i -lt 120 ] && kill -0 "$last_pid" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$last_pid" 2>/dev/null; then fail "SIGTERM with a stalled upload: still running after 12 s"; kill -9 "$last_pid"; fi
wait "$last_pid"; st=$?; pids=""
kill "$stallc" 2>/dev/null; wait "$stallc" 2>/dev/null
[ "$st" = 1 ] && grep -q "still unanswered after 5 s" "$TMP/stall.err" && ok "SIGTERM with a stalled upload: closed after 5 s, exit 1" \
    || fail "SIGTERM with a stalled upload: exit $st: $(tail -3 "$TMP/stall.err")"

# --- a trace disk that fills up -------------------------------------------------
# A 200 KiB tmpfs (needs root and mount); otherwise a file size limit
# (writes fail with EFBIG; SIGXFSZ must not kill the server).
tdir=$TMP/full/traces
mkdir -p "$TMP/full"
if mount -t tmpfs -o size=200k tmpfs "$TMP/full" 2>/dev/null; then mnt=$TMP/full; how="a full 200 KiB tmpfs"
else mnt=""; how="a file size limit (ulimit -f 128)"; fi
if [ -n "$mnt" ]; then start_server full --trace-dir "$tdir" || finish
else
    port=$(free_port)
    (ulimit -f 128; exec "$BANGTRACE" serve --model "$STORIES" --tokenizer "$TOK512" --host 127.0.0.1 --port "$port" \
        --threads 1 --trace-dir "$tdir" 2>"$TMP/full.err") &
    last_pid=$!; pids="$last_pid"
    url=http://127.0.0.1:$port; i=0
    while [ $i -lt 100 ] && ! curl -sf "$url/health" >/dev/null 2>&1; do sleep 0.1; i=$((i + 1)); done
fi
url=http://127.0.0.1:$port
# first a streamed request: its trace fails mid-way, the answer is
# generated again untraced and the client gets each byte once
curl -s -m 30 -N -X POST "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":48,"stream":true}' > "$TMP/full.sse"
"$py" - "$TMP/full.sse" "$TMP/ref48.json" <<'PY' && ok "trace disk full ($how): the stream carries the whole answer once" || fail "full disk, stream: $(head -c 400 "$TMP/full.sse")"
import json, sys
lines = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines[-1] == "[DONE]", lines[-1:]
chunks = [json.loads(l) for l in lines[:-1]]
assert not any("error" in c for c in chunks), chunks
text = "".join(c["choices"][0]["text"] for c in chunks)
ref = json.load(open(sys.argv[2]))["choices"][0]["text"]
assert text == ref, (text, ref)
PY
c=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":48}')
"$py" -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a["choices"][0]["text"] == b["choices"][0]["text"]' \
    "$TMP/b.json" "$TMP/ref48.json" 2>/dev/null && [ "$c" = 200 ] && ok "trace disk full: a later request is answered (200, same text)" || fail "full disk, later request: $c $(head -c 300 "$TMP/b.json")"
cp "$TMP/b.json" "$TMP/full2.json"
left=$(ls -A "$tdir" 2>/dev/null | grep -v '^server\.db' | tr '\n' ' ')
[ -z "$left" ] && ok "trace disk full: the partial trace and its -wal/-shm are removed" || fail "full disk: left in the trace dir: $left"
grep -q "the trace could not be written" "$TMP/full.err" && ok "trace disk full: a warning on stderr" || fail "full disk: no warning: $(cat "$TMP/full.err")"
c=$(curl -s -o "$TMP/health.json" -w '%{http_code}' "$url/health")
[ "$c" = 200 ] && grep -q '"status":"degraded"' "$TMP/health.json" && grep -q '"trace":"' "$TMP/health.json" \
    && ok "trace disk full: /health 200 says degraded, with the trace problem" || fail "full disk, /health: $c $(cat "$TMP/health.json")"
leak=0
for f in "$TMP/full.sse" "$TMP/full2.json" "$TMP/health.json"; do
    grep -qiE "$TMP|PRAGMA|sqlite|INSERT|\.db" "$f" && { leak=1; fail "full disk: $f shows a server path or SQL: $(head -c 300 "$f")"; }
done
[ $leak = 0 ] && ok "trace disk full: no server path or SQL text in what the client sees"
stop_server
[ -n "$mnt" ] && umount "$mnt" 2>/dev/null; mnt=""

# --- the queue before tokenizing, and SIGTERM under load (SmolLM2: a request
# long enough to hold an engine) ---------------------------------------------
if [ ! -f "$SMOL" ]; then
    echo "note: SmolLM2 not cached at $SMOL: the README example, queue and SIGTERM checks are skipped"
    finish
fi
# the README's serve + probe example, the request file unchanged
SERVE_MODEL="--model $SMOL" start_server readme --trace-dir "$TMP/readme" || finish
url=http://127.0.0.1:$port
expect_exit 0 "README example: probe --request examples/chat.json against serve --model SmolLM2" \
    "$BANGTRACE" probe --url "$url" --request "${BT_SRCDIR:-.}/examples/chat.json" -n 3 --max-fail 0.9 --json
"$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["classes"]["ok"] == 3, j' "$TMP/out" \
    && ok "README example: 3 of 3 answered ok" || fail "README example: $(cat "$TMP/out")"
stop_server

long='{"prompt":"1, 2, 3, 4, 5, 6, 7, 8, 9, 10,","max_tokens":3000'   # SmolLM2 counts on for seconds
"$py" -c 'import json; print(json.dumps({"prompt": "word " * 30000, "max_tokens": 4}))' > "$TMP/huge.json"
SERVE_MODEL="--model $SMOL" start_server queue --parallel 1 --queue 0 || finish
url=http://127.0.0.1:$port
curl -s -N -m 60 -X POST "$url/v1/completions" -d "$long,\"stream\":true}" > "$TMP/holder.sse" &
holder=$!
if wait_health busy 1; then
    c=$(curl -s -m 30 -o "$TMP/q.json" -w '%{http_code}' -X POST "$url/v1/completions" --data-binary @"$TMP/huge.json")
    [ "$c" = 503 ] && grep -q '"code":"overloaded"' "$TMP/q.json" && ok "queue full: a prompt past the context gets 503 before it is tokenized" \
        || fail "queue full: $c $(head -c 200 "$TMP/q.json") (400 context_length_exceeded: tokenized before the queue check)"
else fail "the long request never took the engine: $(curl -s "$url/health")"; fi
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
wait_health busy 0 || fail "the engine was not freed after the client left"
c=$(curl -s -m 30 -o "$TMP/q.json" -w '%{http_code}' -X POST "$url/v1/completions" --data-binary @"$TMP/huge.json")
[ "$c" = 400 ] && grep -q 'context_length_exceeded' "$TMP/q.json" && ok "engine free: the same prompt is tokenized and refused (400)" || fail "engine free: $c $(head -c 200 "$TMP/q.json")"
stop_server

# SIGTERM with two requests generating (one streamed), one queued, one
# slow client still sending its headers
SERVE_MODEL="--model $SMOL" start_server term --parallel 2 --queue 1 --trace-dir "$TMP/term" || finish
url=http://127.0.0.1:$port
srv=$last_pid
curl -s -N -m 60 -X POST "$url/v1/completions" -d "$long,\"stream\":true}" > "$TMP/t.sse" 2>&1 &
c1=$!
curl -s -m 60 -o "$TMP/t.json" -w '%{http_code}' -X POST "$url/v1/completions" -d "$long}" > "$TMP/t.code" 2>&1 &
c2=$!
wait_health busy 2 || fail "two requests never generated at once: $(curl -s "$url/health")"
rm -f "$TMP/q.json"
curl -s -m 60 -o "$TMP/q.json" -w '%{http_code}' -X POST "$url/v1/completions" -d "$long}" > "$TMP/q.code" 2>&1 &
c3=$!
wait_health waiting 1 || fail "the third request never queued: $(curl -s "$url/health")"
"$py" -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
time.sleep(20)' "$port" 2>/dev/null &
slowc=$!
sleep 0.3
kill -TERM "$srv"
i=0
while [ $i -lt 150 ] && kill -0 "$srv" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$srv" 2>/dev/null; then fail "SIGTERM: the server is still running after 15 s"; kill -9 "$srv"; fi
wait "$srv"; st=$?
pids=""
wait "$c1" "$c2" "$c3" 2>/dev/null
kill "$slowc" 2>/dev/null; wait "$slowc" 2>/dev/null
[ "$st" = 0 ] && ok "SIGTERM: the server stops with exit 0 (a slow client did not hold it)" || fail "SIGTERM: exit $st: $(tail -3 "$TMP/term.err")"
"$py" - "$TMP/t.sse" <<'PY' && ok "SIGTERM: the stream ends with finish_reason cancelled and [DONE]" || fail "SIGTERM stream: $(tail -c 300 "$TMP/t.sse")"
import json, sys
lines = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert lines and lines[-1] == "[DONE]", lines[-2:]
last = json.loads(lines[-2])
assert last["choices"][0]["finish_reason"] == "cancelled", last
PY
[ "$(cat "$TMP/t.code")" = 200 ] && grep -q '"finish_reason":"cancelled"' "$TMP/t.json" \
    && ok "SIGTERM: the in-flight request gets a whole answer, finish_reason cancelled" || fail "SIGTERM non-stream: $(cat "$TMP/t.code") $(head -c 300 "$TMP/t.json")"
[ "$(cat "$TMP/q.code")" = 503 ] && grep -q '"error":{' "$TMP/q.json" && ok "SIGTERM: the queued request gets 503 with a JSON error" \
    || fail "SIGTERM queued: $(cat "$TMP/q.code") $(head -c 300 "$TMP/q.json")"
"$py" - "$TMP/term" <<'PY' && ok "SIGTERM: the in-flight traces are closed as interrupted, no -wal/-shm left" || fail "SIGTERM traces: $(ls "$TMP/term")"
import os, sqlite3, sys
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if n.startswith("req-"))
assert not [n for n in os.listdir(d) if n.endswith(("-wal", "-shm"))], os.listdir(d)
assert not [n for n in names if n.endswith(("-wal", "-shm"))], names
st = [sqlite3.connect(os.path.join(d, n)).execute("select value from meta where key='status'").fetchone()[0] for n in names]
assert st.count("interrupted") == 2 and len(st) == 2, st
PY
finish
