#!/bin/sh
# probe_contam.sh - probe --contamination against servers that contaminate
# on purpose (tests/contam_server.py: leak, order, prefix, cache, history,
# concurrency, drift) finds exactly the class each one has (exit 1,
# "found"), and finds nothing on clean ones (exit 0): the clean test server
# over several seeds, in both shapes (completion and chat), and bangtrace's
# own serve (batched; stories260K and a hybrid qwen35). serve's own faults
# are found with the class a black box can see: pad_nan (a poisoned shared
# block) and slot_noreset (a state kept) history_dependence, prefix_wrong
# (a hit mapped to another block) cache_dependence, slot_swap (rows on
# another request's state beside it) concurrency_dependence. Too few
# requests is inconclusive (exit 1), bad input is exit 2 with one line.
# Servers bind 127.0.0.1 on free ports and are stopped.
. "${BT_SRCDIR:-.}/tests/lib.sh"
command -v curl >/dev/null || skip "curl not found"
py=${PYTHON3:-python3}
SRV=${BT_SRCDIR:-.}/tests/contam_server.py
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT

# start_contam MODE [ARGS]: the test server, $url set
start_contam() {
    port=$(free_port)
    "$py" "$SRV" --port "$port" "$@" 2>"$TMP/srv.err" &
    last_pid=$!
    pids="$pids $last_pid"
    url=http://127.0.0.1:$port
    wait_up "$url" "$last_pid" 100 && return 0
    fail "test server $*: did not come up: $(cat "$TMP/srv.err")"
    return 1
}
stop_last() { kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; }
# jq_py EXPR: evaluate EXPR on the JSON in $TMP/out (j), print the result
jq_py() { "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$TMP/out"; }

# --- each contamination, found with its class and nothing else ------------
for mode in leak order prefix cache history concurrency drift; do
    case $mode in
        leak) want=nonce_leak ;; order) want=order_dependence ;; prefix) want=prefix_dependence ;;
        cache) want=cache_dependence ;; history) want=history_dependence ;;
        concurrency) want=concurrency_dependence ;; drift) want=drift ;;
    esac
    start_contam --mode "$mode" || continue
    expect_exit 1 "$mode server: exit 1" "$BANGTRACE" probe --contamination --url "$url" --nonce-seed 11 --json
    got=$(jq_py '",".join(j["found"]) + " " + j["outcome"]')
    [ "$got" = "$want contaminated" ] && ok "$mode server: found $want, nothing else" || fail "$mode server: found '$got', want '$want contaminated'"
    case $mode in
        leak)
            n=$(jq_py 'j["leaks"]["first_after_requests"]')
            echo "note: first nonce leak after $n requests"
            jq_py 'all(e["token"] in e["answer"] and e["source"] != e["request"] for e in j["leaks"]["examples"]) and len(j["leaks"]["examples"]) > 0' |
                grep -qx True && ok "leak examples name a foreign token their answers hold" || fail "leak examples: $(head -c 600 "$TMP/out")" ;;
        drift)
            jq_py 'j["drift"]["first_third"]["differ"] <= 5 and j["drift"]["last_third"]["differ"] > 40' | grep -qx True &&
                ok "drift: the first third (nearly) clean, the last third corrupted" || fail "drift thirds: $(head -c 600 "$TMP/out")" ;;
        cache)
            jq_py 'j["arms"]["resent"]["differ"] == 40 and j["arms"]["repeat_pair"]["differ"] == 0 and j["arms"]["repeat"]["differ"] == 0' |
                grep -qx True && ok "cache: every resent answer departs from its first, no repeat does" || fail "cache arms: $(head -c 800 "$TMP/out")" ;;
    esac
    stop_last
done

# a weak order dependence (15% of the answers after another prompt): never
# clean; either found or inconclusive, the excess named
start_contam --mode order --rate 0.15 || true
expect_exit 1 "a weak order dependence: exit 1" "$BANGTRACE" probe --contamination --url "$url" --nonce-seed 6 --json
[ "$(jq_py 'j["outcome"] in ("contaminated", "inconclusive") and set(j["found"]) <= {"order_dependence"} and j["tests"][0]["suspect_differs_more"]')" = True ] &&
    ok "a weak order dependence: $(jq_py 'j["outcome"]'), after_other $(jq_py 'j["tests"][0]["suspect_differ"]')/40 vs repeat 0/40" ||
    fail "weak order: $(head -c 800 "$TMP/out")"
stop_last

# an engine that has drifted already answers walls even alone: never clean
start_contam --mode drift --drift-after 10 || true
"$BANGTRACE" probe --contamination --url "$url" -n 2 >/dev/null 2>&1
expect_exit 1 "a drifted server: exit 1" "$BANGTRACE" probe --contamination --url "$url" --nonce-seed 4
grep -q "^INCONCLUSIVE: .*4 of 4 reference answers fail alone (token_wall)" "$TMP/out" &&
    ok "a drifted server: inconclusive, its references fail alone" || fail "drifted: $(tail -2 "$TMP/out")"
stop_last

# --- the text report names the class; the replicate rule ------------------
start_contam --mode prefix
expect_exit 1 "prefix server, text report" "$BANGTRACE" probe --contamination --url "$url" --nonce-seed 3 --concurrency 2
grep -q "^prefix_dependence .*after_shared 40/40 vs after_other 0/40.*FOUND" "$TMP/out" && grep -q "^CONTAMINATED: prefix_dependence$" "$TMP/out" &&
    grep -q "concurrency 2;" "$TMP/out" && ok "text report: after_shared 40/40 FOUND, CONTAMINATED" || fail "text report: $(cat "$TMP/out")"
expect_exit 1 "10 answers per side: not called" "$BANGTRACE" probe --contamination --url "$url" --nonce-seed 3 -n 10 --json
[ "$(jq_py 'j["outcome"] + " " + str(any(t["called"] for t in j["tests"]))')" = "inconclusive False" ] &&
    ok "fewer than 40 a side: inconclusive, no comparison called" || fail "replicate rule: $(head -c 600 "$TMP/out")"
stop_last

# --- clean: nothing found, over several seeds and both shapes --------------
start_contam --mode clean
fp=0
for s in 1 2 3; do
    "$BANGTRACE" probe --contamination --url "$url" --nonce-seed $s --json >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ $rc -eq 0 ] && [ "$(jq_py 'j["outcome"]')" = clean ] || { fp=$((fp + 1)); echo "clean run $s: exit $rc $(head -c 400 "$TMP/out") $(cat "$TMP/err")"; }
done
[ $fp -eq 0 ] && ok "clean server: 3 of 3 runs clean (exit 0)" || fail "clean server: $fp of 3 runs not clean"
printf '{"model":"any","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"x"}],"max_tokens":12,"stream":true,"cache_prompt":false}' > "$TMP/chat.json"
expect_exit 0 "clean server, chat shape from --request" "$BANGTRACE" probe --contamination --url "$url" --request "$TMP/chat.json" --concurrency 3
grep -q "^CLEAN" "$TMP/out" && grep -q "concurrency 2, 3;" "$TMP/out" && ok "chat shape: CLEAN at concurrency 2 and 3" || fail "chat shape: $(cat "$TMP/out")"
[ ! -s "$TMP/err" ] && ok "a server's own field (cache_prompt) is sent without an 'ignored' warning" || fail "stderr: $(cat "$TMP/err")"
expect_exit 1 "clean server, --max-fail 0.001: the leak bound is not met" "$BANGTRACE" probe --contamination --url "$url" --max-fail 0.001
grep -q "^INCONCLUSIVE.*answers would bound it below 0.1%" "$TMP/out" || fail "leak bound wording: $(tail -1 "$TMP/out")"

# --- bad input: one line, exit 2 ------------------------------------------
bad() {  # bad DESC WANT-REGEX ARGS...
    desc=$1 want=$2; shift 2
    expect_exit 2 "$desc" "$BANGTRACE" probe "$@" || return
    [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "$want" "$TMP/err" && ok "$desc: one line naming it" || fail "$desc: stderr $(cat "$TMP/err")"
}
echo '{"prompt":' > "$TMP/broken.json"
echo '[1,2]' > "$TMP/array.json"
echo '{"messages":"hi"}' > "$TMP/msgs.json"
echo '{"prompt":"a","max_tokens":"ten"}' > "$TMP/types.json"
bad "--contamination with --compare" "one target" --contamination --compare --url "$url" --url "$url"
bad "--contamination --concurrency 1" "concurrency 2 or more" --contamination --url "$url" --concurrency 1
bad "--contamination --expect" "does not apply" --contamination --url "$url" --expect x
bad "--nonce-seed without --contamination" "applies to --contamination" --url "$url" --request "$TMP/chat.json" --nonce-seed 3
bad "--nonce-seed -1" "nonce-seed" --contamination --url "$url" --nonce-seed -1
bad "a template that is not JSON" "broken.json.*not JSON" --contamination --url "$url" --request "$TMP/broken.json"
bad "a template that is not an object" "array.json.*not a JSON object" --contamination --url "$url" --request "$TMP/array.json"
bad "a template whose messages is not an array" "msgs.json.*not an array" --contamination --url "$url" --request "$TMP/msgs.json"
bad "a template with a wrong type" "max_tokens" --contamination --url "$url" --request "$TMP/types.json"
bad "a wrong path (HTTP 404)" "did not answer the first requests: HTTP 404" --contamination --url "$url/v2"
stop_last
bad "nothing listening" "did not answer the first requests" --contamination --url "http://127.0.0.1:$(free_port)" --timeout 2
[ ! -e "$TMP/broken.json.out" ] && [ "$(cat "$TMP/broken.json")" = '{"prompt":' ] && ok "inputs left as they were" || fail "an input was changed"

# --- bangtrace's own serve: native, parallel engines, clean ----------------
if [ -f "$STORIES" ] && built_with LIBMICROHTTPD; then
    echo '{"max_tokens":12}' > "$TMP/shape.json"
    start_server serve --parallel 4 && {
        expect_exit 0 "bangtrace serve --parallel 4: clean" "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" \
            --request "$TMP/shape.json" --nonce-seed 5
        grep -q "^CLEAN" "$TMP/out" || fail "serve: $(cat "$TMP/out")"
        stop_last
    }
    # the batched server's own faults, black-box: never clean. A NaN in a
    # shared block that later hits map corrupts answers at a constant rate
    # whatever ran before (every arm alike): inconclusive, saying so; a prefix
    # hit mapped to the wrong block changes answers: not clean either
    start_server padnan --parallel 4 --inject pad_nan@p=0.05 && {
        expect_exit 1 "serve --inject pad_nan@p=0.05: contaminated" "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" \
            --request "$TMP/shape.json" --nonce-seed 5
        grep -q "^CONTAMINATED: history_dependence$" "$TMP/out" &&
            grep -q "^note: [0-9]* of [0-9]* measured answers are degenerate (token_wall, most of them) where their reference answer is fine" "$TMP/out" \
            && ok "pad_nan: history_dependence, the degenerate answers behind fine references named" || fail "pad_nan probe: $(tail -4 "$TMP/out")"
        stop_last
    }
    # a prefix hit mapped to another cached block: a fresh prompt's second
    # answer departs from its first more often than a repeat from its pair's
    # first (both of which are hits); on a young server the wrong mappings
    # also grow as the cache fills (drift). Not every wrong block changes
    # stories260K's answer: -n 120
    start_server pwrong --parallel 4 --inject prefix_wrong && {
        expect_exit 1 "serve --inject prefix_wrong: contaminated" "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" \
            --request "$TMP/shape.json" --nonce-seed 5 -n 120 --json
        [ "$(jq_py '"cache_dependence" in j["found"] and set(j["found"]) <= {"cache_dependence", "drift"}')" = True ] &&
            ok "prefix_wrong: found $(jq_py '" ".join(j["found"])') (resent $(jq_py 'j["arms"]["resent"]["differ"]')/120 vs repeat_pair $(jq_py 'j["arms"]["repeat_pair"]["differ"]')/120)" ||
            fail "prefix_wrong probe: $(head -c 1500 "$TMP/out")"
        stop_last
    }
    # a hybrid model (random weights; 6 tokens an answer, shorter than a
    # token wall): clean, and its state faults found with their classes
    HYB=$TMP/qwen35.gguf
    if "$py" "${BT_SRCDIR:-.}/tools/make-tiny-hybrid.py" "$HYB" --arch qwen35 --mtp 0 --seed 7 >"$TMP/tool.log" 2>&1; then
        echo '{"max_tokens":6}' > "$TMP/shape6.json"
        for fault in none slot_noreset slot_swap; do
            case $fault in
                none) want=clean; inj= ;; slot_noreset) want="contaminated history_dependence"; inj="--inject slot_noreset" ;;
                slot_swap) want="contaminated concurrency_dependence"; inj="--inject slot_swap" ;;
            esac
            # shellcheck disable=SC2086
            SERVE_MODEL="--model $HYB" start_server "hyb-$fault" --parallel 4 $inj || continue
            "$BANGTRACE" probe --contamination --url "http://127.0.0.1:$port" --request "$TMP/shape6.json" --nonce-seed 5 --json \
                >"$TMP/out" 2>"$TMP/err"
            rc=$?
            got=$(jq_py 'j["outcome"] + (" " + " ".join(j["found"]) if j["found"] else "")')
            [ "$got" = "$want" ] && [ $rc -eq $([ "$want" = clean ] && echo 0 || echo 1) ] && ok "qwen35 serve, fault $fault: $got (exit $rc)" ||
                fail "qwen35 serve, fault $fault: exit $rc, '$got', want '$want': $(head -c 1200 "$TMP/out") $(cat "$TMP/err")"
            stop_last
        done
    else
        fail "make-tiny-hybrid.py: $(tail -1 "$TMP/tool.log")"
    fi
else
    echo "note: stories260K or libmicrohttpd missing: the serve check is skipped"
fi
finish
