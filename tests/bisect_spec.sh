#!/bin/sh
# bisect, report and export on speculative traces (issue 5).
#
# Part 1 (synthetic traces laid out as the contract says, from
# tests/data-gen/make_spec_trace.py): a NaN in the target's verify pass is
# blamed on the target at the right step/layer/op with an amplification
# above 1; a NaN in a draft pass is blamed on the drafter and the output is
# clean; acceptance overall and per window, post_stop_draft and
# accept_collapse; a trace without spec tables (an older file) reads as
# plain; report has its Speculative decoding section; export keeps the
# spec tables (windowed, and under --redact).
#
# Part 2 (real runs on stories260K with run --spec-k): the same on traces
# that bangtrace itself recorded, the greedy output of a draft-injected run
# equals the clean run's, and bisect --reference replays every verify step
# of a clean speculative trace exactly. Without --spec-k in this build the
# test SKIPs (after part 1), never passes.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
"$PY" -c 'import json, sqlite3' 2>/dev/null || skip "python3 with json and sqlite3 is needed"
GEN="${BT_SRCDIR:-.}/tests/data-gen/make_spec_trace.py"
SCHEMA="${BT_SRCDIR:-.}/traces/schema.sql"
[ -f "$GEN" ] && [ -f "$SCHEMA" ] || skip "make_spec_trace.py or traces/schema.sql not found under BT_SRCDIR"

# field FILE.json EXPR: a Python expression over the parsed JSON (j)
field() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# sql DB QUERY: the first column of the first row
sql() { "$PY" -c "import sqlite3,sys; r=sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone(); print(r[0] if r else '')" "$1" "$2"; }
gen() { "$PY" "$GEN" "$@" --schema "$SCHEMA" || fail "make_spec_trace.py $*"; }
# the amplification the contract defines, straight from the tables:
# target positions / output tokens of verify+decode steps up to step S
amp_sql() {
    sql "$1" "SELECT printf('%d|%d', (SELECT sum(n_pos) FROM steps WHERE model='target' AND kind IN ('verify','decode') AND step <= $2),
                     (SELECT count(*) FROM tokens t JOIN steps s ON s.step = t.step WHERE t.role IN ('gen','bonus')
                      AND s.kind IN ('verify','decode') AND t.step <= $2))"
}

# ================= part 1: synthetic traces =================

# ---- a NaN in the target's verify pass ----
gen "$TMP/tgt.db" --k 4 --drafter self:2 --inject target:15:3:ffn_gate
[ "$(sql "$TMP/tgt.db" "SELECT kind FROM steps WHERE step = 15")" = verify ] || fail "generator: step 15 is not a verify step"
expect_exit 1 "bisect --json on a target-NaN speculative trace" "$BANGTRACE" bisect "$TMP/tgt.db" --json
cp "$TMP/out" "$TMP/tgt.json"
[ "$(field "$TMP/tgt.json" '(lambda f: (f["step"], f["layer"], f["op"], f["model"], f["pass"]))(j["first_nonfinite"])')" = "(15, 3, 'ffn_gate', 'target', 'verify')" ] \
    && ok "target NaN: step 15, layer 3, ffn_gate, target's verify pass" || fail "target NaN: $(head -c 500 "$TMP/tgt.json")"
[ "$(field "$TMP/tgt.json" '(lambda s: (s["first_nonfinite_model"], s["first_nonfinite_pass"], s["output_clean"], s["drafter"], s["k"]))(j["speculation"])')" = "('target', 'verify', False, 'self:2', 4)" ] \
    && ok "speculation: origin target/verify, output not clean, drafter self:2, k=4" || fail "speculation: $(field "$TMP/tgt.json" 'j["speculation"]')"
want=$(amp_sql "$TMP/tgt.db" 15)
got=$(field "$TMP/tgt.json" '(lambda a: "%d|%d" % (a["target_positions"], a["emitted_tokens"]))(j["speculation"]["amplification"])')
[ "$got" = "$want" ] && ok "amplification counts: $got (positions|tokens) match the tables" || fail "amplification counts $got, expected $want"
[ "$(field "$TMP/tgt.json" '(lambda a: a["ratio"] > 1 and a["tensor"] == "blk.3.ffn_gate" and a["until_step"] == 15 and a["plain_positions"] == a["emitted_tokens"] and abs(a["ratio"] - a["target_positions"] / a["emitted_tokens"]) < 1e-9)(j["speculation"]["amplification"])')" = True ] \
    && ok "amplification > 1 through blk.3.ffn_gate up to step 15" || fail "amplification: $(field "$TMP/tgt.json" 'j["speculation"]["amplification"]')"
expect_exit 1 "bisect (text) on the target-NaN trace" "$BANGTRACE" bisect "$TMP/tgt.db"
grep -q "^  origin: the NaN came from the target's verify pass at step 15, not from the drafter" "$TMP/out" \
    && ok "text: the NaN came from the target's verify pass" || fail "text origin: $(grep origin "$TMP/out")"
grep -q "^  amplification: speculation (k=4, self:2) pushed [0-9]* target positions through blk.3.ffn_gate" "$TMP/out" \
    && ok "text: amplification sentence" || fail "text amplification: $(grep amplification "$TMP/out")"
grep -q "^first non-finite: step 15, .*, target's verify pass:" "$TMP/out" && ok "text: first non-finite names the pass" \
    || fail "text first: $(grep '^first non-finite' "$TMP/out")"

# ---- a crafted spec_steps.k: summing it overflowed an int (UBSan, fuzzing) ----
cp "$TMP/tgt.db" "$TMP/bigk.db"
"$PY" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('UPDATE spec_steps SET k = 2147483647'); d.commit(); d.close()" "$TMP/bigk.db" \
    || fail "could not craft bigk.db"
for cmd in bisect report; do
    expect_exit 2 "$cmd on a trace with spec_steps.k = INT_MAX" "$BANGTRACE" $cmd "$TMP/bigk.db"
    grep -q "spec_steps row of step [0-9]* has k 2147483647" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
        && ok "$cmd: one line naming the spec_steps row" || fail "$cmd bigk stderr: $(head -c 300 "$TMP/err")"
done

# ---- a NaN in a draft pass ----
gen "$TMP/drf.db" --k 4 --drafter self:2 --inject draft:7:1:ffn_gate
[ "$(sql "$TMP/drf.db" "SELECT model FROM steps WHERE step = 7")" = draft ] || fail "generator: step 7 is not a draft step"
expect_exit 1 "bisect --json on a draft-NaN speculative trace" "$BANGTRACE" bisect "$TMP/drf.db" --json
cp "$TMP/out" "$TMP/drf.json"
[ "$(field "$TMP/drf.json" '(lambda f: (f["step"], f["layer"], f["op"], f["model"], f["pass"]))(j["first_nonfinite"])')" = "(7, 1, 'ffn_gate', 'draft', 'draft')" ] \
    && ok "draft NaN: step 7, layer 1, ffn_gate, draft pass" || fail "draft NaN: $(head -c 500 "$TMP/drf.json")"
[ "$(field "$TMP/drf.json" '(lambda s: (s["first_nonfinite_model"], s["output_clean"], s["target_nonfinite_step"], s["nonfinite_drafts"] >= 1, s["nonfinite_drafts_accepted"]))(j["speculation"])')" = "('draft', True, None, True, 0)" ] \
    && ok "draft NaN: output clean, target finite, the bad draft was rejected" || fail "draft speculation: $(field "$TMP/drf.json" 'j["speculation"]')"
[ "$(field "$TMP/drf.json" 'j["first_degenerate_step"] is None and j["explanation"] is None')" = True ] \
    && ok "draft NaN: the drafter's non-finite logits are not degenerate output" || fail "draft degenerate: $(field "$TMP/drf.json" 'j["degenerate"]')"
expect_exit 1 "bisect (text) on the draft-NaN trace" "$BANGTRACE" bisect "$TMP/drf.db"
grep -q "^  origin: the first non-finite came from the drafter's draft pass at step 7 (blk.1.ffn_gate), not from the target" "$TMP/out" \
    && ok "text: the drafter's pass" || fail "text draft origin: $(grep origin "$TMP/out")"
grep -q "output is clean" "$TMP/out" && ok "text: output clean" || fail "text: no 'output is clean'"

# ---- acceptance, windows, events ----
for t in tgt drf; do
    want=$(sql "$TMP/$t.db" "SELECT printf('%d|%d|%d', sum(accepted), sum(k), (count(*) + 7) / 8) FROM spec_steps")
    got=$(field "$TMP/$t.json" '(lambda s: "%d|%d|%d" % (s["accepted"], s["drafted"], len(s["acceptance_windows"])))(j["speculation"])')
    [ "$got" = "$want" ] && ok "$t: accepted|drafted|windows $got" || fail "$t: accepted|drafted|windows $got, expected $want"
    [ "$(field "$TMP/$t.json" '(lambda s: abs(s["acceptance_rate"] - s["accepted"] / s["drafted"]) < 1e-9 and sum(w["accepted"] for w in s["acceptance_windows"]) == s["accepted"])(j["speculation"])')" = True ] \
        && ok "$t: acceptance rate and windows add up" || fail "$t: acceptance: $(field "$TMP/$t.json" 'j["speculation"]["acceptance_windows"]')"
done
gen "$TMP/stop.db" --k 4 --drafter model --accept 1.0 --stop-at 18
expect_exit 0 "bisect on a run that stopped with drafts after the stop token" "$BANGTRACE" bisect "$TMP/stop.db" --json
[ "$(field "$TMP/out" '(lambda e: e["count"] == 1 and "none reached the output" in e["detail"])(j["speculation"]["events"]["post_stop_draft"])')" = True ] \
    && ok "post_stop_draft reported" || fail "post_stop_draft: $(field "$TMP/out" 'j["speculation"]["events"]')"
cp "$TMP/stop.db" "$TMP/coll.db"
"$PY" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute(\"INSERT INTO events(step, kind, detail) VALUES (10, 'accept_collapse', 'acceptance over 8 verify steps fell to 0.10 after 0.80')\"); d.commit()" "$TMP/coll.db"
"$BANGTRACE" bisect "$TMP/coll.db" > "$TMP/coll.txt"
grep -q "^  accept_collapse: 1 (first at step 10): acceptance over 8 verify steps fell" "$TMP/coll.txt" \
    && ok "accept_collapse reported" || fail "accept_collapse: $(cat "$TMP/coll.txt")"
gen "$TMP/ng.db" --k 3 --drafter ngram:3
expect_exit 0 "bisect on an n-gram speculative trace" "$BANGTRACE" bisect "$TMP/ng.db" --json
[ "$(field "$TMP/out" '(lambda s: (s["drafter"], s["draft_steps"], s["k"]))(j["speculation"])')" = "('ngram:3', 0, 3)" ] \
    && ok "n-gram: no draft passes" || fail "n-gram: $(field "$TMP/out" 'j["speculation"]')"

# ---- a trace without spec tables (an older file) reads as plain ----
"$PY" "${BT_SRCDIR:-.}/tests/data-gen/make_trace.py" collapse "$TMP/old.db" --schema "$SCHEMA" >/dev/null 2>&1 || fail "make_trace.py collapse"
"$PY" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.executescript('DROP VIEW v_spec_trail; DROP TABLE spec_trail; DROP TABLE spec_steps;')" "$TMP/old.db"
expect_exit 1 "bisect on a trace without spec tables" "$BANGTRACE" bisect "$TMP/old.db" --json
[ "$(field "$TMP/out" 'j["speculation"] is None and j["first_nonfinite"]["step"] == 9 and j["first_nonfinite"]["model"] == "target"')" = True ] \
    && ok "older trace: speculation null, first non-finite as before" || fail "older trace: $(head -c 400 "$TMP/out")"
expect_exit 0 "report on a trace without spec tables" "$BANGTRACE" report "$TMP/old.db"
grep -q "Speculative decoding" "$TMP/out" && fail "report of a plain trace has a speculative section" || ok "report of a plain trace: no speculative section"
expect_exit 0 "export of a trace without spec tables" "$BANGTRACE" export "$TMP/old.db" -o "$TMP/old-x.db" --redact

# ---- report ----
expect_exit 0 "report on the target-NaN trace" "$BANGTRACE" report "$TMP/tgt.db"
grep -q "^## Speculative decoding" "$TMP/out" && ok "report: speculative section" || fail "report: no speculative section"
grep -q "^| drafter | self:2 (the target's first 2 layers" "$TMP/out" && grep -q "^| k (tokens drafted per verify) | 4 |" "$TMP/out" \
    && ok "report: drafter and k" || fail "report: drafter/k rows: $(grep -E '^\| (drafter|k )' "$TMP/out")"
grep -q "^Draft-vs-verify trail around verify step 15" "$TMP/out" && grep -q "^| 15 \*\*<-\*\* | [0-9]* | [0-9]* .* | no | mismatch |" "$TMP/out" \
    && ok "report: trail table around step 15 with accepted marks" || fail "report trail: $(grep -A8 'Draft-vs-verify' "$TMP/out" | head -12)"
grep -q "^| 15 | [0-9]* | | | | 0 .* | | added | correction |" "$TMP/out" && ok "report: the target's correction token at step 15" \
    || fail "report: no correction row for step 15"
expect_exit 0 "report on the draft-NaN trace" "$BANGTRACE" report "$TMP/drf.db"
grep -q "^| first non-finite from | the drafter's pass at step 7" "$TMP/out" && grep -q "^| output | clean" "$TMP/out" \
    && ok "report: the drafter's NaN, output clean" || fail "report draft: $(grep -E 'first non-finite from|^\| output' "$TMP/out")"

# ---- export ----
expect_exit 0 "export --redact --window 5 of the target-NaN trace" "$BANGTRACE" export "$TMP/tgt.db" -o "$TMP/tgt-x.db" --redact --window 5
for t in spec_steps spec_trail; do
    want=$(sql "$TMP/tgt.db" "SELECT count(*) FROM $t WHERE step BETWEEN 10 AND 20")
    got=$(sql "$TMP/tgt-x.db" "SELECT count(*) FROM $t")
    [ "$got" = "$want" ] && [ "$got" -gt 0 ] && ok "export window keeps $t of steps 10-20 ($got rows)" || fail "export $t: $got rows, expected $want"
done
[ "$(sql "$TMP/tgt-x.db" "SELECT count(*) FROM spec_trail x WHERE reason IS NULL OR draft_token IS NULL")" = 0 ] \
    && ok "export --redact keeps spec_trail ids and reasons" || fail "export --redact emptied spec_trail columns"
expect_exit 1 "bisect on the exported window" "$BANGTRACE" bisect "$TMP/tgt-x.db"
grep -q "^  origin: the NaN came from the target's verify pass at step 15" "$TMP/out" && grep -q "exported window" "$TMP/out" \
    && ok "bisect on the export: target verify pass, counts marked as a window" || fail "bisect export: $(cat "$TMP/out" | head -30)"
expect_exit 0 "export --all-steps" "$BANGTRACE" export "$TMP/tgt.db" -o "$TMP/tgt-all.db" --all-steps
[ "$(sql "$TMP/tgt-all.db" "SELECT count(*) FROM spec_trail")" = "$(sql "$TMP/tgt.db" "SELECT count(*) FROM spec_trail")" ] \
    && ok "export --all-steps keeps the whole trail" || fail "export --all-steps lost spec_trail rows"

# ================= part 2: real speculative runs =================
if ! "$BANGTRACE" help run 2>&1 | grep -q -- '--spec-k'; then
    [ "$failures" -eq 0 ] || finish
    skip "this build's run has no --spec-k: the synthetic checks passed, the real-run checks did not run"
fi
[ -f "$STORIES" ] || { [ "$failures" -eq 0 ] || finish; skip "test data not found at $BT_SHARED: the real-run checks did not run"; }
RUN="--model $STORIES --tokenizer $TOK512 --prompt Once_upon_a_time -n 40 --threads 2"
SPEC="--spec-k 4 --draft-self 2"
out_tokens() { sql "$1" "SELECT group_concat(token_id, ' ') FROM (SELECT token_id FROM tokens WHERE role IN ('gen','bonus') ORDER BY seq)"; }

expect_exit 0 "run $SPEC --trace (clean)" "$BANGTRACE" -q run $RUN $SPEC --trace "$TMP/rclean.db"
expect_exit 0 "bisect on a clean speculative trace" "$BANGTRACE" bisect "$TMP/rclean.db" --json
[ "$(field "$TMP/out" '(lambda s: s["drafter"] == "self:2" and s["k"] == 4 and s["verify_steps"] > 0 and 0 <= s["acceptance_rate"] <= 1 and s["amplification"]["ratio"] >= 1 and s["output_clean"])(j["speculation"])')" = True ] \
    && ok "real clean: drafter, k, acceptance, amplification >= 1" || fail "real clean: $(field "$TMP/out" 'j["speculation"]')"
expect_exit 0 "bisect --reference on a clean speculative trace" "$BANGTRACE" bisect "$TMP/rclean.db" --reference --json
[ "$(field "$TMP/out" '(lambda r: r["divergence"] is None and r["max_rel_diff"] == 0 and r["speculative"] and r["verify_steps"] > 0 and r["steps_compared"] == r["steps"])(j["reference"])')" = True ] \
    && ok "reference replay of every verify step matches exactly" || fail "real reference: $(head -c 600 "$TMP/out")"

# a verify step and a draft step of the clean layout (the same in the injected runs up to the fault)
VS=$(sql "$TMP/rclean.db" "SELECT step FROM steps WHERE kind = 'verify' ORDER BY step LIMIT 1 OFFSET 2")
DS=$(sql "$TMP/rclean.db" "SELECT step FROM steps WHERE model = 'draft' AND step > 3 ORDER BY step LIMIT 1 OFFSET 2")
"$BANGTRACE" -q run $RUN $SPEC --trace "$TMP/rtgt.db" --inject "nan@step=$VS,layer=3,op=ffn_gate,model=target" >/dev/null 2>&1
[ -f "$TMP/rtgt.db" ] || fail "run with a target injection wrote no trace"
expect_exit 1 "bisect on a real target-NaN speculative trace" "$BANGTRACE" bisect "$TMP/rtgt.db" --json
cp "$TMP/out" "$TMP/rtgt.json"
[ "$(field "$TMP/rtgt.json" '(lambda f: (f["step"], f["layer"], f["op"], f["model"], f["pass"]))(j["first_nonfinite"])')" = "($VS, 3, 'ffn_gate', 'target', 'verify')" ] \
    && ok "real target NaN: step $VS, layer 3, ffn_gate, target's verify pass" || fail "real target NaN: $(head -c 500 "$TMP/rtgt.json")"
want=$(amp_sql "$TMP/rtgt.db" "$VS")
got=$(field "$TMP/rtgt.json" '(lambda a: "%d|%d" % (a["target_positions"], a["emitted_tokens"]))(j["speculation"]["amplification"])')
[ "$got" = "$want" ] && [ "$(field "$TMP/rtgt.json" 'j["speculation"]["amplification"]["ratio"] > 1')" = True ] \
    && ok "real amplification $got (positions|tokens), ratio > 1 for k=4" || fail "real amplification $got (expected $want): $(field "$TMP/rtgt.json" 'j["speculation"]["amplification"]')"
expect_exit 1 "bisect --reference on the real target-NaN trace" "$BANGTRACE" bisect "$TMP/rtgt.db" --reference --json
[ "$(field "$TMP/out" '(lambda d: (d["step"], d["kind"], d["tensor"], d["field"]))(j["reference"]["divergence"])')" = "($VS, 'verify', 'blk.3.ffn_gate', 'nonfinite')" ] \
    && ok "reference: first divergence at the injected verify step" || fail "real reference on NaN: $(head -c 600 "$TMP/out")"

"$BANGTRACE" -q run $RUN $SPEC --trace "$TMP/rdrf.db" --inject "nan@step=$DS,layer=1,op=ffn_gate,model=draft" >/dev/null 2>&1
[ -f "$TMP/rdrf.db" ] || fail "run with a draft injection wrote no trace"
expect_exit 1 "bisect on a real draft-NaN speculative trace" "$BANGTRACE" bisect "$TMP/rdrf.db" --json
[ "$(field "$TMP/out" '(lambda f: (f["step"], f["layer"], f["op"], f["model"], f["pass"]))(j["first_nonfinite"])')" = "($DS, 1, 'ffn_gate', 'draft', 'draft')" ] \
    && ok "real draft NaN: step $DS, layer 1, ffn_gate, draft pass" || fail "real draft NaN: $(head -c 500 "$TMP/out")"
[ "$(field "$TMP/out" '(lambda s: s["output_clean"] and s["target_nonfinite_step"] is None)(j["speculation"])')" = True ] \
    && ok "real draft NaN: target finite, output clean" || fail "real draft speculation: $(field "$TMP/out" 'j["speculation"]')"
[ "$(out_tokens "$TMP/rdrf.db")" = "$(out_tokens "$TMP/rclean.db")" ] \
    && ok "real draft NaN: the output equals the clean run's token for token (greedy)" || fail "real draft NaN: output differs from the clean run"
expect_exit 0 "bisect --reference on the real draft-NaN trace (the target never saw it)" "$BANGTRACE" bisect "$TMP/rdrf.db" --reference

expect_exit 0 "report on the real target-NaN trace" "$BANGTRACE" report "$TMP/rtgt.db"
grep -q "^## Speculative decoding" "$TMP/out" && grep -q "^Draft-vs-verify trail around verify step $VS" "$TMP/out" \
    && ok "real report: speculative section and trail around step $VS" || fail "real report: $(grep -A3 'Speculative' "$TMP/out")"
expect_exit 0 "export --redact of the real target-NaN trace" "$BANGTRACE" export "$TMP/rtgt.db" -o "$TMP/rtgt-x.db" --redact
[ "$(sql "$TMP/rtgt-x.db" "SELECT count(*) FROM spec_steps")" -gt 0 ] && [ "$(sql "$TMP/rtgt-x.db" "SELECT count(*) FROM spec_trail")" -gt 0 ] \
    && ok "real export keeps spec_steps and spec_trail" || fail "real export lost the spec tables"
finish
