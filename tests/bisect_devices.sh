#!/bin/sh
# bisect --reference --device DEV: the comparison across devices (a CUDA
# trace replayed on the CPU, a CPU trace on CUDA) with the tolerance derived
# from the dtypes involved (bt_tap_tol_devices, doc/cuda.md). Here it runs
# CPU -> CPU through the same code path: a clean trace matches within the
# derived tolerance (2^-7 for f32: one bf16 step of the stored statistics),
# a 1.2% corruption that the default tolerance (0.02) lets through is found
# at its step and op, and an explicit --tolerance wins. The CUDA direction
# runs where the plugin can open a GPU; elsewhere --device cuda must be a
# one-line error (exit 2), and that part of the test says SKIP.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
py=${PYTHON3:-python3}
command -v "$py" >/dev/null 2>&1 || skip "python3 not installed"
field() { "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }
run() { "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 6 "$@" > /dev/null 2>&1; }

run --trace "$TMP/clean.db" --logits full || { fail "clean run"; finish; }
"$BANGTRACE" bisect "$TMP/clean.db" --reference --device cpu --json > "$TMP/c.json" 2> "$TMP/c.err"
rc=$?
[ $rc -eq 0 ] && ok "clean trace, --device cpu: no divergence (exit 0)" || fail "clean --device cpu exited $rc: $(cat "$TMP/c.err")"
[ "$(field "$TMP/c.json" 'j["reference"]["tolerance"] == 2**-7 and j["reference"]["divergence"] is None')" = True ] &&
    ok "derived tolerance 2^-7 for an f32 trace" || fail "tolerance: $(head -c 400 "$TMP/c.json")"
[ "$(field "$TMP/c.json" '(lambda c: c["trace_backend"].startswith("cpu") and c["replay_backend"] == "cpu" and c["mant_bits"] == 24 and c["k"] == 172 and c["layers"] == 5)(j["reference"]["cross_device"])')" = True ] &&
    ok "JSON cross_device names both backends and the inputs of the rule" || fail "cross_device: $(head -c 600 "$TMP/c.json")"
[ "$(field "$TMP/c.json" '(lambda c: c["top1_agreement"] == 1.0 and c["top1_steps"] == 6 and c["logits_rows"] == 5 and c["logits_max_abs_diff"] < 0.1)(j["reference"]["cross_device"])')" = True ] &&
    ok "teacher-forced top-1 agreement 1.0 and the logits difference over the full rows" || fail "top-1/logits: $(head -c 800 "$TMP/c.json")"
"$BANGTRACE" bisect "$TMP/clean.db" --reference > "$TMP/plain.txt" 2>&1
grep -q 'across devices' "$TMP/plain.txt" && fail "a replay without --device printed the across-devices line" ||
    ok "without --device: the default tolerance, no across-devices line"
"$BANGTRACE" bisect "$TMP/clean.db" --reference --device cpu > "$TMP/c.txt" 2>&1
grep -q '^across devices: the trace ran on cpu-[a-z0-9]*, the replay on cpu; tolerance 0.0078125 derived from the dtypes (24-bit mantissa, K = 172, 5 layers' "$TMP/c.txt" &&
    ok "text names both devices and the derived tolerance" || fail "text: $(cat "$TMP/c.txt")"

run --trace "$TMP/scaled.db" --inject 'scale=1.012@layer=1,op=ffn_down,step=3,count=64' || { fail "scaled run"; finish; }
expect_exit 0 "a 1.2% corruption passes the default tolerance 0.02" "$BANGTRACE" bisect "$TMP/scaled.db" --reference
"$BANGTRACE" bisect "$TMP/scaled.db" --reference --device cpu --json > "$TMP/s.json" 2>&1
rc=$?
[ $rc -eq 1 ] && [ "$(field "$TMP/s.json" '(lambda d: (d["step"], d["tensor"]))(j["reference"]["divergence"]) == (3, "blk.1.ffn_down")')" = True ] &&
    ok "--device cpu: the derived tolerance finds it at step 3, blk.1.ffn_down" || fail "scaled --device cpu (exit $rc): $(head -c 600 "$TMP/s.json")"
expect_exit 0 "an explicit --tolerance wins over the derived one" "$BANGTRACE" bisect "$TMP/scaled.db" --reference --device cpu --tolerance 0.02

# the CUDA direction
if "$BANGTRACE" run --device cuda --model "$STORIES" --tokenizer "$TOK512" --prompt "Once" -n 1 > /dev/null 2> "$TMP/cuda.err"; then
    "$BANGTRACE" run --device cuda --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 6 --trace "$TMP/cuda.db" > /dev/null 2>&1
    expect_exit 0 "a CUDA trace replayed on the CPU matches within the derived tolerance" \
        "$BANGTRACE" bisect "$TMP/cuda.db" --reference --device cpu
    expect_exit 0 "a CPU trace replayed on CUDA matches within the derived tolerance" \
        "$BANGTRACE" bisect "$TMP/clean.db" --reference --device cuda
else
    expect_exit 2 "no GPU here: bisect --reference --device cuda is an error" "$BANGTRACE" bisect "$TMP/clean.db" --reference --device cuda
    [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q -- "--device cuda" "$TMP/err" || fail "the --device cuda error is not one line naming the device: $(cat "$TMP/err")"
    echo "SKIP: the CUDA direction (no GPU: $(head -1 "$TMP/cuda.err"))"
fi
finish
