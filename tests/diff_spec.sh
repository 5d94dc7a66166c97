#!/bin/sh
# bangtrace diff with real speculative traces (run --spec-k): greedy
# self-speculation produces the same output as plain greedy decoding, so diff
# finds no token difference; taps are compared only at target steps covering
# identical positions (at least the prefill) and agree there. Two identical
# speculative runs pair every target and draft step. SKIPs while run has no
# --spec-k.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
"$PY" -c 'import json, sqlite3' 2>/dev/null || skip "python3 with json and sqlite3 is needed to check the JSON output"
"$BANGTRACE" help diff >/dev/null 2>&1 || skip "this build has no diff command"
"$BANGTRACE" help run | grep -q -- '--spec-k' || skip "this build's run has no --spec-k: speculative diff not checked"

RUN="--model $STORIES --tokenizer $TOK512 --prompt Once_upon_a_time -n 40 --threads 2"
field() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
sql() { "$PY" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$1" "$2"; }

expect_exit 0 "plain greedy run" "$BANGTRACE" -q run $RUN --trace "$TMP/plain.db"
expect_exit 0 "speculative run (--spec-k 4 --draft-self 2)" "$BANGTRACE" -q run $RUN --spec-k 4 --draft-self 2 --trace "$TMP/spec.db"
expect_exit 0 "second identical speculative run" "$BANGTRACE" -q run $RUN --spec-k 4 --draft-self 2 --trace "$TMP/spec2.db"

expect_exit 0 "spec vs plain greedy: no token or tap difference" "$BANGTRACE" diff "$TMP/spec.db" "$TMP/plain.db" --json
cp "$TMP/out" "$TMP/sp.json"
[ "$(field "$TMP/sp.json" 'j["first_token_diff"] is None and j["prompt_equal"] and j["output_tokens"]["a"] == j["output_tokens"]["b"] == 40')" = True ] \
    && ok "spec vs plain: same 40 output tokens" || fail "spec vs plain tokens: $(head -c 800 "$TMP/sp.json")"
[ "$(field "$TMP/sp.json" 'j["tap_pairing"] == "position" and j["speculative"] == {"a": True, "b": False} and j["compared_steps"] >= 1 and j["first_tap_diff"] is None')" = True ] \
    && ok "spec vs plain: taps compared at $(field "$TMP/sp.json" 'j["compared_steps"]') step(s) with identical (pos0, n_pos), equal" \
    || fail "spec vs plain taps: $(head -c 800 "$TMP/sp.json")"
[ "$(field "$TMP/sp.json" 'set(["spec_k", "drafter"]) <= set(m["key"] for m in j["meta_diff"])')" = True ] \
    && ok "spec vs plain: meta lists spec_k and drafter" || fail "spec meta: $(field "$TMP/sp.json" 'j["meta_diff"]')"
expect_exit 0 "spec vs plain (text)" "$BANGTRACE" diff "$TMP/plain.db" "$TMP/spec.db"
grep -q 'taps are compared only where both have a target step with identical (pos0, n_pos)' "$TMP/out" \
    && ok "text explains the position pairing" || fail "text: $(grep '^taps' "$TMP/out")"

expect_exit 0 "two identical speculative runs" "$BANGTRACE" diff "$TMP/spec.db" "$TMP/spec2.db" --json
steps=$(sql "$TMP/spec.db" "SELECT count(*) FROM steps WHERE model IN ('target', 'draft')")
[ "$(field "$TMP/out" 'j["compared_steps"]')" = "$steps" ] && ok "identical speculative runs: all $steps target and draft steps paired" \
    || fail "identical spec runs: compared $(field "$TMP/out" 'j["compared_steps"]') of $steps steps"
finish
