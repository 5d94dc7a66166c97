#!/bin/sh
# bangtrace diff with real speculative traces (run --spec-k): greedy
# self-speculation produces the same output as plain greedy decoding, so diff
# finds no token difference; taps are compared only at target steps covering
# identical positions (at least the prefill) and agree there. Two identical
# speculative runs pair every target and draft step; a NaN injected into a
# verify or a draft forward is the first diverging tap of that step. SKIPs
# while run has no --spec-k.
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

# A NaN injected into the target's first verify step: the first diverging
# tap is that step (inputs still equal); one injected into a draft forward
# diverges there, while the greedy output stays the plain one.
V=$(sql "$TMP/spec.db" "SELECT min(step) FROM steps WHERE kind = 'verify'")
"$BANGTRACE" -q run $RUN --spec-k 4 --draft-self 2 --trace "$TMP/tinj.db" --inject "nan@step=$V,layer=3,op=ffn_up,model=target" >/dev/null 2>&1
expect_exit 1 "spec vs spec with a NaN in verify step $V" "$BANGTRACE" diff "$TMP/spec.db" "$TMP/tinj.db" --json
[ "$(field "$TMP/out" '(lambda d: (d["step"], d["model"], d["kind"], d["layer"], d["op"], d["field"], d["inputs_diverged"]))(j["first_tap_diff"])')" = "($V, 'target', 'verify', 3, 'ffn_up', 'nan', False)" ] \
    && ok "target NaN: first diverging tap is verify step $V, layer 3, ffn_up" || fail "target NaN: $(head -c 900 "$TMP/out")"
[ "$(field "$TMP/out" 'j["first_token_diff"] is not None and j["first_token_diff"]["step"] >= '"$V")" = True ] \
    && ok "target NaN: output diverges at or after step $V" || fail "target NaN tokens: $(field "$TMP/out" 'j["first_token_diff"]')"
D=$(sql "$TMP/spec.db" "SELECT min(step) FROM steps WHERE model = 'draft' AND n_pos = 1")
"$BANGTRACE" -q run $RUN --spec-k 4 --draft-self 2 --trace "$TMP/dinj.db" --inject "nan@step=$D,layer=1,op=ffn_up,model=draft" >/dev/null 2>&1
expect_exit 1 "spec vs spec with a NaN in draft step $D" "$BANGTRACE" diff "$TMP/spec.db" "$TMP/dinj.db" --json
[ "$(field "$TMP/out" '(lambda d: (d["step"], d["model"], d["layer"], d["op"], d["field"]))(j["first_tap_diff"])')" = "($D, 'draft', 1, 'ffn_up', 'nan')" ] \
    && ok "draft NaN: first diverging tap is draft step $D, layer 1, ffn_up" || fail "draft NaN: $(head -c 900 "$TMP/out")"
[ "$(field "$TMP/out" 'j["first_token_diff"] is None')" = True ] \
    && ok "draft NaN: greedy output unchanged" || fail "draft NaN changed the output: $(field "$TMP/out" 'j["first_token_diff"]')"
finish
