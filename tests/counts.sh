#!/bin/sh
# Counts agree everywhere: the number of generated tokens run prints equals
# what bisect (text and JSON), report, diff and the browser's Run view say,
# for plain and speculative runs, stopped by -n or by end-of-generation.
# Rates over intervals too short to time are "n/a" (JSON null), not 1e9 t/s.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
"$PY" -c 'import json' 2>/dev/null || skip "python3 is needed to read JSON"
RUN="--model $STORIES --tokenizer $TOK512 --prompt Once_upon_a_time --threads 1"
field() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

i=0
for args in "-n 5" "-n 400" "-n 7 --spec-k 3 --draft-ngram 2" "-n 50 --spec-k 3 --draft-ngram 2" \
            "-n 400 --spec-k 3 --draft-ngram 2" "-n 30 --spec-k 4 --draft-self 2" "-n 400 --spec-k 2 --draft-self 3"; do
    i=$((i + 1))
    db="$TMP/c$i.db"
    # shellcheck disable=SC2086
    expect_exit 0 "run $args" "$BANGTRACE" run $RUN $args --trace "$db" || continue
    n=$(sed -n 's/.*, \([0-9]*\) generated in .*/\1/p' "$TMP/err")
    [ -n "$n" ] || { fail "run $args: no 'N generated' in: $(cat "$TMP/err")"; continue; }
    # shellcheck disable=SC2086
    "$BANGTRACE" -q run $RUN $args --json > "$TMP/run.json" 2>/dev/null
    [ "$(field "$TMP/run.json" 'len(j["completion_ids"])')" = "$n" ] && ok "$args: completion_ids has $n" || fail "$args: completion_ids $(field "$TMP/run.json" 'len(j["completion_ids"])'), run said $n"
    "$BANGTRACE" bisect "$db" > "$TMP/b.txt" 2>&1
    grep -q "^trace: .*, $n generated tokens)" "$TMP/b.txt" && ok "$args: bisect says $n" || fail "$args: run said $n, bisect: $(head -1 "$TMP/b.txt")"
    "$BANGTRACE" bisect "$db" --json > "$TMP/b.json" 2>/dev/null
    [ "$(field "$TMP/b.json" 'j["generated"]')" = "$n" ] && ok "$args: bisect --json $n" || fail "$args: bisect --json generated $(field "$TMP/b.json" 'j["generated"]'), run said $n"
    "$BANGTRACE" report "$db" > "$TMP/r.md" 2>&1
    grep -q "($n generated tokens)\|, $n generated tokens)" "$TMP/r.md" && ok "$args: report says $n" || fail "$args: report: $(grep -i generated "$TMP/r.md")"
    "$BANGTRACE" diff "$db" "$db" > "$TMP/d.txt" 2>&1
    [ "$(grep -c "output tokens, $n generated" "$TMP/d.txt")" = 2 ] && ok "$args: diff says $n" || fail "$args: diff: $(head -2 "$TMP/d.txt")"
    if "$BANGTRACE" browse "$db" --dump run > "$TMP/v.txt" 2>/dev/null; then
        grep -qE "^generated +$n\$" "$TMP/v.txt" && ok "$args: browse Run view says $n" || fail "$args: browse run: $(grep generated "$TMP/v.txt")"
    fi
done
# the -n 400 runs stop at end-of-generation, and that token is not counted
[ "$(sqlite3 -batch -noheader "$TMP/c2.db" "select finish_reason from tokens where finish_reason is not null" 2>/dev/null)" = stop ] \
    && ok "the -n 400 run stopped at end-of-generation" || echo "note: c2 did not stop at end-of-generation"

# A trace whose run never finished (no meta generated) counts every output token of the trail.
cp "$TMP/c1.db" "$TMP/unfinished.db"
"$PY" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute(\"DELETE FROM meta WHERE key = 'generated'\"); d.commit()" "$TMP/unfinished.db"
"$BANGTRACE" bisect "$TMP/unfinished.db" --json > "$TMP/u.json" 2>/dev/null
[ "$(field "$TMP/u.json" 'j["generated"]')" = 5 ] && ok "unfinished trace: the trail's 5 output tokens" || fail "unfinished: $(head -c 300 "$TMP/u.json")"

# ---- rates: a 1-token run has no decode interval; sub-millisecond intervals are not rates ----
expect_exit 0 "1-token run" "$BANGTRACE" run $RUN -n 1
grep -q ", 1 generated in [0-9.]* ms (decode n/a)" "$TMP/err" && ok "decode rate n/a" || fail "1-token summary: $(cat "$TMP/err")"
grep -qE '[0-9]{6,}\.[0-9] t/s' "$TMP/err" && fail "an absurd rate: $(cat "$TMP/err")" || ok "no absurd rate"
expect_exit 0 "1-token run --json" "$BANGTRACE" run $RUN -n 1 --json
cp "$TMP/out" "$TMP/one.json"
[ "$(field "$TMP/one.json" 'j["timings"]["decode_tokens_per_s"] is None')" = True ] && ok "JSON decode rate null" || fail "JSON timings: $(field "$TMP/one.json" 'j["timings"]')"
[ "$(field "$TMP/one.json" '(lambda t: t is None or t < 1e7)(j["timings"]["prompt_tokens_per_s"])')" = True ] && ok "JSON prompt rate null or sane" \
    || fail "JSON timings: $(field "$TMP/one.json" 'j["timings"]')"
expect_exit 0 "bench with a 1-token decode" "$BANGTRACE" bench --model "$STORIES" -p 2 -n 1 --reps 1 --threads 1 --json
cp "$TMP/out" "$TMP/bench.json"
[ "$(field "$TMP/bench.json" '(lambda r: r is None or r < 1e7)(j["decode_tokens_per_s"])')" = True ] && ok "bench decode rate null or sane" \
    || fail "bench JSON: $(head -c 400 "$TMP/bench.json")"
# -d: context filled first (taps on, so the filler forwards are recorded
# steps too), and a depth past the model's context is refused
expect_exit 0 "bench at depth with taps" "$BANGTRACE" bench --model "$STORIES" -p 3 -n 2 -d 9 --reps 1 --threads 1 --taps all --json
[ "$(field "$TMP/out" 'j["depth"] == 9 and j["prompt_tokens"] == 3')" = True ] && ok "bench JSON names the depth" \
    || fail "bench -d JSON: $(head -c 400 "$TMP/out")"
# The recorder's own cost per decode step: every tapped tensor of the 2
# decode steps observed, the parts summing to the total, inside the step
# (stories260K: 5 layers, 13 tapped tensors each, 4 outside them)
"$PY" - "$TMP/out" <<'PYEOF' && ok "bench JSON prices the recording per decode step" || fail "recording_per_decode_step: $(head -c 600 "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["recording_per_decode_step"]
parts = c["statistics_us"] + c["rows_us"] + c["logits_us"] + c["commit_us"]
assert c["taps"] > 40, c
assert all(c[k] >= 0 for k in ("statistics_us", "rows_us", "logits_us", "commit_us")), c
assert abs(parts - c["total_us"]) < 1e-6 * max(1, parts), c
assert 0 < c["total_us"] <= c["step_us"], c
# the f32 FMA roofline, measured on the CPU, and the prompt's matmuls against it
assert j["fma_peak_gflops"] > 0, j
assert j["prompt_matmul_gflops"] is None or j["prompt_matmul_gflops"] > 0, j
PYEOF
# taps off and taps on alternate, round by round
expect_exit 0 "bench taps rounds" "$BANGTRACE" bench --model "$STORIES" -p 3 -n 2 --reps 2 --threads 1 --taps all
grep -o "taps o[nf]* rep [0-9]" "$TMP/err" | tr '\n' ';' > "$TMP/order"
[ "$(cat "$TMP/order")" = "taps off rep 1;taps on rep 1;taps off rep 2;taps on rep 2;" ] && ok "taps off and on alternate" \
    || fail "rounds order: $(cat "$TMP/order")"
grep -qE "^recording +per decode step [0-9]+ us of [0-9]+ us \([0-9.]+%\): statistics of [0-9]+ taps" "$TMP/out" && ok "bench prints the recording's cost" \
    || fail "bench text: $(cat "$TMP/out")"
expect_exit 2 "bench deeper than the context" "$BANGTRACE" bench --model "$STORIES" -p 2 -n 1 -d 100000 --reps 1 --threads 1
grep -q "exceed the model's context" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "one-line depth error" \
    || fail "bench -d error: $(cat "$TMP/err")"
finish
