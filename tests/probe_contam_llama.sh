#!/bin/sh
# probe_contam_llama.sh - probe --contamination against a real peer:
# llama.cpp's own llama-server (built from the pinned sdist by
# tools/llama-cpp into the llama.cpp build's bin/) with 4 parallel slots,
# continuous batching and its prompt cache on (its defaults), on the tiny
# random llama GGUF of ../shared. It must come out clean (exit 0), with the
# prompt cache on and off, and its log must show the probe used several
# slots and reused cached prompts. (With SmolLM2 the same build is not
# batch-invariant: doc/production.md.)
# SKIPs, saying why, while llama-server is not built (BT_LLAMA_SERVER names
# another binary).
. "${BT_SRCDIR:-.}/tests/lib.sh"
command -v curl >/dev/null || skip "curl not found"
L=$(sed -n 's/^#define BT_LLAMA_CPP_DIR "\(.*\)"$/\1/p' "${BT_BUILDDIR:-.}/config.h" 2>/dev/null)
[ -n "$L" ] || L=${BT_CACHE:-$HOME/.cache/bangtrace}/llama.cpp/0.3.36
LS=${BT_LLAMA_SERVER:-$L/bin/llama-server}
[ -x "$LS" ] || skip "no llama-server at $LS (tools/llama-cpp builds it; BT_LLAMA_SERVER names another)"
TINY=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
[ -f "$TINY" ] || skip "test data not found at $TINY (set BT_SHARED)"
lpid=""
trap '[ -n "$lpid" ] && kill "$lpid" 2>/dev/null; wait; rm -rf "$TMP"' EXIT

port=$(free_port)
# one thread: llama.cpp's thread pool spins, which on a shared 2-core machine costs more than it gains
"$LS" -m "$TINY" --host 127.0.0.1 --port "$port" -np 4 -c 2048 -t 1 >"$TMP/ls.log" 2>&1 &
lpid=$!
wait_up "http://127.0.0.1:$port" "$lpid" 300 || { fail "llama-server did not come up in 30 s: $(tail -5 "$TMP/ls.log")"; finish; }
grep -q "n_slots = 4" "$TMP/ls.log" && ok "llama-server up with 4 slots" || fail "slots: $(grep -m1 n_slots "$TMP/ls.log")"

expect_exit 0 "llama-server -np 4: clean" "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" --nonce-seed 9 --json
"${PYTHON3:-python3}" -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["outcome"] == "clean" and j["found"] == [] and j["answered"] == j["requests"] == 572, j
assert all(t["called"] and not t["found"] for t in j["tests"]), j["tests"]
' "$TMP/out" && ok "clean: every comparison called, nothing found, 572 of 572 answered" || fail "verdict: $(head -c 800 "$TMP/out")"
# the probe reached what it claims to test: several slots at once, and prompts served from a slot's cache
slots=$(sed -n 's/.*slot launch_slot_: id *\([0-9]*\) .*/\1/p' "$TMP/ls.log" | sort -u | wc -l)
[ "$slots" -ge 4 ] && ok "the probe's requests ran on $slots slots" || fail "only $slots slot(s) used"
grep -q "f_keep = 0\.[1-9]\|f_keep = 1" "$TMP/ls.log" && ok "llama-server reused cached prompt prefixes" ||
    fail "no prompt-cache reuse in the log: $(grep -m3 'selected slot' "$TMP/ls.log")"
# and with the prompt cache off (a field of llama-server's own, sent as it is)
echo '{"cache_prompt":false}' > "$TMP/nocache.json"
expect_exit 0 "llama-server -np 4, cache_prompt false: clean" "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" \
    --request "$TMP/nocache.json" --nonce-seed 10
grep -q "^CLEAN" "$TMP/out" || fail "cache off: $(tail -3 "$TMP/out")"
kill "$lpid"; wait "$lpid" 2>/dev/null; lpid=""
finish
