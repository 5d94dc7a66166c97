#!/usr/bin/env bash
# llamacpp_serve.sh - `serve --engine llama.cpp --parallel N` (one llama.cpp
# context, N sequences behind bangtrace's OpenAI endpoints) against the real
# llama-server of the pinned build (tools/llama-cpp) with --parallel N and its
# defaults otherwise, both on loopback, on the same GGUF: the cached SmolLM2
# Q4_1 (completions and chat) and the tiny random llama (completions). The
# same greedy requests, several at once, streamed and not, get the same text
# from both, and the same completion ids (llama-server's /completion with
# return_tokens). Each bangtrace request's trace is its own: engine, path and
# sequence in the meta, its steps cover exactly its own positions, and its
# taps equal those of the same request served again alone on a reused slot
# (taps from another sequence would change them). Start-up errors are one
# line, exit 2; bad requests get native serve's codes; SIGTERM exits 0.
# doc/llama-cpp.md, "serve --engine llama.cpp".
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
need_shared
need_smol
L=$(sed -n 's/^#define BT_LLAMA_CPP_DIR "\(.*\)"$/\1/p' "${BT_BUILDDIR:-.}/config.h")
LS=${BT_LLAMA_SERVER:-$L/bin/llama-server}
[ -x "$LS" ] || skip "no llama-server in the llama.cpp build $L (tools/llama-cpp builds it)"
command -v curl >/dev/null || skip "curl is not installed"
TINY=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
N=3
pids=
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT

# start-up errors: one line, exit 2, before any port is bound
one_line() { [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$1: not one line: $(cat "$TMP/err")"; }
expect_exit 2 "--engine bogus is refused" "$B" serve --model "$SMOL" --engine bogus --port 0
grep -q "expects native or llama.cpp, got 'bogus'" "$TMP/err" || fail "names the value: $(cat "$TMP/err")"; one_line "--engine bogus"
expect_exit 2 "--llama-repack without --engine llama.cpp" "$B" serve --model "$SMOL" --llama-repack off --port 0
grep -q "give --engine llama.cpp" "$TMP/err" || fail "says why: $(cat "$TMP/err")"; one_line "--llama-repack"
expect_exit 2 "--llama-kv-type q4 is refused" "$B" serve --model "$SMOL" --engine llama.cpp --llama-kv-type q4 --port 0
grep -q -- "--llama-kv-type 'q4'" "$TMP/err" || fail "names the flag: $(cat "$TMP/err")"; one_line "--llama-kv-type"
expect_exit 2 "--tokenizer with --engine llama.cpp" "$B" serve --model "$STORIES" --tokenizer "$TOK512" --engine llama.cpp --port 0
grep -q "needs a GGUF model" "$TMP/err" || fail "says why: $(cat "$TMP/err")"; one_line "--tokenizer"
expect_exit 2 "--inject kvcorrupt with --engine llama.cpp" "$B" serve --model "$SMOL" --engine llama.cpp --port 0 \
    --inject 'kvcorrupt@layer=1,pos=0'
grep -q "cannot apply to --engine llama.cpp" "$TMP/err" || fail "says why: $(cat "$TMP/err")"; one_line "--inject kvcorrupt"

# start_pair NAME MODEL: llama-server and bangtrace serve side by side
start_pair() {
    local name=$1 model=$2 i
    lport=$(free_port)
    "$LS" -m "$model" --host 127.0.0.1 --port "$lport" --parallel $N -t 1 >"$TMP/$name.llama.log" 2>&1 &
    lpid=$!; pids="$pids $lpid"
    SERVE_MODEL="--model $model" start_server "$name" --engine llama.cpp --parallel $N --ctx 1024 --trace-dir "$TMP/$name.tr" || return 1
    bpid=$last_pid bport=$port
    wait_up "http://127.0.0.1:$lport" "$lpid" 600 && return 0
    fail "$name: llama-server did not come up: $(tail -n 5 "$TMP/$name.llama.log")"
    return 1
}

# compare NAME CHAT: the requests, concurrently, on both servers
compare() {
    "${PYTHON3:-python3}" - "$1" "$bport" "$lport" "$TMP/$1.tr" "$2" "$N" <<'EOF'
import json, sqlite3, sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
name, bport, lport, trdir, chat, nseq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1", int(sys.argv[6])
fails = []
def fail(m): fails.append(m); print("FAIL: %s: %s" % (name, m))

def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read().decode()
        return r.status, r.headers.get("x-request-id"), raw

def ask(port, path, body):
    """(text, finish, ids or None, request id) of an OpenAI answer, streamed or not"""
    st, rid, raw = post(port, path, body)
    if st != 200: raise RuntimeError("status %d" % st)
    ids = None
    if not body.get("stream"):
        d = json.loads(raw)
        c = d["choices"][0]
        text = c["message"]["content"] if "message" in c else c["text"]
        ids = d.get("bangtrace", {}).get("completion_ids")
        return text, c["finish_reason"], ids, rid
    text, finish, done = "", None, False
    for line in raw.split("\n"):
        if not line.startswith("data: "): continue
        p = line[6:]
        if p == "[DONE]": done = True; continue
        d = json.loads(p)
        if "error" in d: raise RuntimeError("stream error %s" % d["error"])
        c = d["choices"][0]
        text += (c.get("delta", {}).get("content") or "") if "delta" in c else (c.get("text") or "")
        finish = c.get("finish_reason") or finish
        if "bangtrace" in d: ids = d["bangtrace"]["completion_ids"]
    if not done: raise RuntimeError("stream without [DONE]")
    return text, finish, ids, rid

prompts = ["The capital of France is", "Once upon a time, there was a", "def fibonacci(n):",
           "List three colours:", "The quick brown fox", "In 1969, the first"]
reqs = []
for i, p in enumerate(prompts):
    reqs.append(("/v1/completions", {"prompt": p, "max_tokens": 20 + 2 * i, "temperature": 0, "stream": i % 2 == 1}))
if chat:
    for i, q in enumerate(["What is 2+2?", "Name a fruit.", "Say hello in French."]):
        reqs.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 24,
                                               "temperature": 0, "stream": i % 2 == 0}))

def answer(port, r):
    try: return ask(port, r[0], r[1])
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        fail("port %d: %s %s: %s" % (port, r[0], json.dumps(r[1]), getattr(e, "read", lambda: b"")().decode() or e))
        return None

# all at once, more requests than slots: both servers queue and reuse slots
with ThreadPoolExecutor(len(reqs)) as ex:
    bt = list(ex.map(lambda r: answer(bport, r), reqs))
    ll = list(ex.map(lambda r: answer(lport, r), reqs))
    # llama-server's own completion ids (its native endpoint returns them)
    lids = list(ex.map(lambda r: json.loads(post(lport, "/completion", {"prompt": r[1]["prompt"], "n_predict": r[1]["max_tokens"],
                       "temperature": 0, "return_tokens": True})[2])["tokens"] if "prompt" in r[1] else None, reqs))
if None in bt or None in ll: sys.exit(1)
same = 0
for (path, body), b, l, li in zip(reqs, bt, ll, lids):
    what = "%s %r%s" % (path, body.get("prompt") or body["messages"][0]["content"], " (stream)" if body.get("stream") else "")
    if b[0] != l[0]: fail("%s: bangtrace %r, llama-server %r" % (what, b[0], l[0])); continue
    if b[1] != l[1]: fail("%s: finish %s vs llama-server's %s" % (what, b[1], l[1])); continue
    if li is not None:
        # llama-server counts the end-of-generation token; bangtrace's ids exclude it
        if not (b[2] == li or (b[1] == "stop" and b[2] == li[:-1])):
            fail("%s: ids %s, llama-server's %s" % (what, b[2], li)); continue
    if not b[0]: fail("%s: empty text" % what); continue
    same += 1
print("ok: %s: %d of %d concurrent requests answered as llama-server answers them" % (name, same, len(reqs)))

# each trace is its request's own
def trace_of(rid):
    db = sqlite3.connect("file:%s/%s.db?mode=ro" % (trdir, rid), uri=True)
    meta = dict(db.execute("SELECT key, value FROM meta"))
    steps = db.execute("SELECT s.step, s.kind, s.pos0, s.n_pos, hex(b.stats) FROM steps s LEFT JOIN tap_blobs b ON b.step = s.step "
                       "WHERE s.model = 'target' ORDER BY s.step").fetchall()
    db.close()
    return meta, steps
seqs = set()
for (path, body), b in zip(reqs, bt):
    meta, steps = trace_of(b[3])
    what = "trace %s" % b[3]
    if meta.get("request_id") != b[3] or meta.get("status") != "ok": fail("%s: request_id %s status %s" % (what, meta.get("request_id"), meta.get("status"))); continue
    if meta.get("engine") != "llama.cpp" or meta.get("backend") != "llama.cpp-cpu" or not meta.get("llama_cpp_path", "").startswith("flash attention"):
        fail("%s: engine %s backend %s path %s" % (what, meta.get("engine"), meta.get("backend"), meta.get("llama_cpp_path"))); continue
    if meta.get("llama_cpp_n_seq") != str(nseq) or not 0 <= int(meta.get("llama_cpp_seq", -1)) < nseq:
        fail("%s: sequence %s of %s" % (what, meta.get("llama_cpp_seq"), meta.get("llama_cpp_n_seq"))); continue
    seqs.add(meta["llama_cpp_seq"])
    if json.loads(meta.get("request_json", "{}")).get("max_tokens") != body["max_tokens"]: fail("%s: another request's body" % what); continue
    # its own positions, once each: the prompt, then one per generated token
    pos = 0
    for i, (step, kind, pos0, n_pos, blob) in enumerate(steps):
        if pos0 != pos or kind != ("prefill" if i == 0 else "decode") or not blob: break
        pos += n_pos
    else:
        i = len(steps)
    if i != len(steps) or not steps: fail("%s: steps are not its own positions in order: %s" % (what, steps[:4])); continue
    # every generated token is fed back but the last when max_tokens ended it
    if len(steps) - 1 != len(b[2]) - (1 if b[1] == "length" else 0):
        fail("%s: %d decode steps for %d ids (%s)" % (what, len(steps) - 1, len(b[2]), b[1])); continue
if len(seqs) < 2: fail("the requests ran on %d sequence(s), expected several of %d" % (len(seqs), nseq))
print("ok: %s: every trace holds its own request, on sequences %s" % (name, sorted(seqs)))

# the same requests again, one at a time, on slots other requests used:
# the same answer and, step for step, the same taps (another sequence's
# tensors in a trace would change its statistics)
n_eq = 0
for (path, body), b in zip(reqs, bt):
    a = ask(bport, path, dict(body, stream=False))
    if (a[0], a[2]) != (b[0], b[2]): fail("alone, %r answers %r, concurrently %r" % (body.get("prompt"), a[0], b[0])); continue
    t1, t2 = trace_of(b[3])[1], trace_of(a[3])[1]
    if t1 != t2:
        k = next((i for i, (x, y) in enumerate(zip(t1, t2)) if x != y), min(len(t1), len(t2)))
        fail("trace %s (concurrent) and %s (alone) differ from step %d" % (b[3], a[3], k)); continue
    n_eq += 1
print("ok: %s: %d of %d traces equal, tap for tap, the same request served alone" % (name, n_eq, len(reqs)))
sys.exit(1 if fails else 0)
EOF
}

# bad requests: native serve's answers (the same handler)
bad_requests() {
    local u="http://127.0.0.1:$bport" c
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/v1/completions" -d '{"prompt": ')
    [ "$c" = 400 ] && grep -q invalid_json "$TMP/body" || fail "malformed JSON: $c $(cat "$TMP/body")"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/v1/completions" -d '{"max_tokens": 3}')
    [ "$c" = 400 ] && grep -q missing_prompt "$TMP/body" || fail "no prompt: $c $(cat "$TMP/body")"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/v1/completions" -d '{"prompt": "x", "max_tokens": 5000}')
    [ "$c" = 400 ] && grep -q context_length_exceeded "$TMP/body" || fail "max_tokens past the context: $c $(cat "$TMP/body")"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/v1/completions")
    [ "$c" = 405 ] || fail "GET /v1/completions: $c"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/v1/nothing" -d '{}')
    [ "$c" = 404 ] || fail "unknown path: $c"
    c=$(curl -s -o "$TMP/body" -w '%{http_code}' "$u/health")
    [ "$c" = 200 ] && grep -q "\"slots\":$N" "$TMP/body" || fail "/health: $c $(cat "$TMP/body")"
    ok "bad requests get native serve's codes (400, 405, 404), /health has $N slots"
}

# stop_pair NAME: SIGTERM, exit 0 (every answer sent)
stop_pair() {
    kill -TERM "$bpid"; wait "$bpid"; local rc=$?
    [ "$rc" -eq 0 ] && ok "$1: SIGTERM: exit 0" || fail "$1: SIGTERM: exit $rc: $(tail -n 3 "$TMP/$1.err")"
    kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
}

if start_pair smol "$SMOL"; then
    grep -q "llama.cpp .*one context, $N sequences" "$TMP/smol.err" || fail "the banner names the shared context: $(cat "$TMP/smol.err")"
    compare smol 1 || fail "SmolLM2: bangtrace and llama-server differ (above)"
    bad_requests
    stop_pair smol
fi
if [ -f "$TINY" ] && start_pair tiny "$TINY"; then
    compare tiny 0 || fail "gguf-tiny: bangtrace and llama-server differ (above)"
    stop_pair tiny
fi
finish
