#!/usr/bin/env bash
# numerics_state.sh - --numerics state=f32|f16|bf16 on the hybrid models
# (issue 25): the recurrent and conv states stored in that dtype between
# forwards. state=f32 is the exact engine bit for bit; state=bf16 and f16
# leave the f32 computation at the state itself (diff against the f32 run
# names blk.L.ssm_state, after the prefill or the first decode step); the
# profile is in the trace's
# meta; rope=ggml (the sectioned partial rope it does not cover) and a
# bad state value are refused with one line.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy" 2>/dev/null || skip "python3 has no numpy (the hybrid models)"
trap 'rm -rf "$TMP"' EXIT
M=$TMP/qwen35.gguf
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$M" --arch qwen35 --mtp 0 --seed 7 >"$TMP/tool.log" 2>&1 || fail "make-tiny-hybrid.py: $(tail -1 "$TMP/tool.log")"
P="The old man walked to the river every morning"
run() { "$BANGTRACE" run --model "$M" --prompt "$P" -n 24 --ignore-eos "$@"; }
run --trace "$TMP/f32.db" >/dev/null 2>&1 || fail "the f32 run"
run --numerics state=f32 --trace "$TMP/e.db" >/dev/null 2>&1 || fail "the state=f32 run"
"$BANGTRACE" diff "$TMP/f32.db" "$TMP/e.db" >"$TMP/d0" 2>&1
grep -q "^differ: no" "$TMP/d0" && ok "state=f32 is the exact engine (diff: no difference)" || fail "state=f32: $(cat "$TMP/d0")"
for f in bf16 f16; do
    run --numerics state=$f --trace "$TMP/$f.db" >/dev/null 2>"$TMP/$f.err" || { fail "state=$f: $(tail -1 "$TMP/$f.err")"; continue; }
    "$BANGTRACE" diff "$TMP/f32.db" "$TMP/$f.db" >"$TMP/d" 2>&1
    # the state stored after the prefill (step 0) or the first decode step:
    # taps are bf16 statistics, so bf16 rounding shows one step later
    grep -Eq "^first diverging tap: step [01] \(target (prefill|decode), positions? [0-9-]+\), layer [0-9]+, op ssm_state" "$TMP/d" \
        && ok "state=$f: diff against f32 names the state itself ($(grep '^first diverging tap' "$TMP/d" | cut -d: -f2 | cut -c1-60))" \
        || fail "state=$f diff: $(cat "$TMP/d")"
    sqlite3 "file:$TMP/$f.db?mode=ro" "select value from meta where key='numerics'" | grep -q "state=$f$" \
        && ok "state=$f: the trace's meta names the profile" || fail "state=$f meta: $(sqlite3 "$TMP/$f.db" "select value from meta where key='numerics'")"
done
expect_exit 2 "rope=ggml on a hybrid model is refused" "$BANGTRACE" run --model "$M" --prompt hi -n 2 --numerics llama.cpp-cpu
grep -q "rope=ggml does not cover the sectioned partial rope" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
    && ok "rope=ggml: one line naming the part" || fail "rope=ggml: $(cat "$TMP/err")"
expect_exit 2 "state=q8_0 is refused" "$BANGTRACE" run --model "$M" --prompt hi -n 2 --numerics state=q8_0
grep -q "state" "$TMP/err" || fail "state=q8_0: $(cat "$TMP/err")"
finish
