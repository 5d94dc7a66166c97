#!/usr/bin/env bash
# numerics.sh - run --numerics end to end on stories260K: the exact profile
# (spelled as a preset and as every part) gives the default's bytes and
# token ids; presets run and the trace records the profile; bad profiles are
# one-line errors (exit 2); bisect prints the headroom verdict on a clean
# trace and puts its fields in --json; bisect --reference --numerics A
# --against B compares two replays; report states the profile.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
RUN=(run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 40 --threads 1 --json)

expect_exit 0 "default run" "$BANGTRACE" "${RUN[@]}" && cp "$TMP/out" "$TMP/default.json"
for p in f32 act=f32,mm_in=f32,mm_acc=f32,kv=f32,act_q=none,attn=f32,softmax=f32,norm=f64,rope=f64 \
         llama.cpp-cpu,kv=f32,act_q=none,attn=f32,norm=f64,rope=f64; do
    expect_exit 0 "run --numerics $p" "$BANGTRACE" "${RUN[@]}" --numerics "$p" || continue
    # timings differ; everything else must not
    for f in "$TMP/out" "$TMP/default.json"; do
        ${PYTHON3:-python3} -c 'import json,sys; j=json.load(open(sys.argv[1])); j.pop("timings",None); print(json.dumps(j,sort_keys=True))' "$f"
    done > "$TMP/pair"
    [ "$(sed -n 1p "$TMP/pair")" = "$(sed -n 2p "$TMP/pair")" ] && ok "--numerics $p is bit-identical to the default" \
        || fail "--numerics $p changed the output"
done
for p in f16 bf16 llama.cpp-cpu llama.cpp-cpu-nofa llama.cpp-cuda-f16 vllm-bf16 vllm-f16 act=f16,kv=q8_0,softmax=f16 norm=f32,rope=ggml; do
    expect_exit 0 "run --numerics $p" "$BANGTRACE" "${RUN[@]}" --numerics "$p" -n 8
done
for bad in f8 act=f8 kv=q4_0 "act=f16," zz=f16 "act=f16,f16" "" norm=f16 rope=f32; do
    expect_exit 2 "--numerics '$bad' is refused" "$BANGTRACE" "${RUN[@]}" --numerics "$bad" &&
        { [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q numerics "$TMP/err" && ok "one line naming --numerics" || fail "error for '$bad': $(cat "$TMP/err")"; }
done

# the trace records the profile; bisect and report state it and the headroom
expect_exit 0 "traced f16 run" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 8 \
    --threads 1 --numerics f16 --trace "$TMP/f16.db"
expect_exit 0 "bisect of the clean f16 trace" "$BANGTRACE" bisect "$TMP/f16.db"
grep -q '^numerics: f16: act=f16,' "$TMP/out" && ok "bisect states the profile" || fail "bisect: no numerics line: $(cat "$TMP/out")"
grep -qE '^headroom: f16-safe: worst [a-z_.0-9]+ absmax [0-9.,]+ = [0-9]+% of f16 max' "$TMP/out" && ok "clean trace: f16-safe verdict" \
    || fail "no f16-safe verdict: $(cat "$TMP/out")"
grep -q '^  absmax by layer: ' "$TMP/out" && ok "growth across layers" || fail "no growth line"
# headroom is a prediction, not a finding: the exit status stays 0
expect_exit 0 "bisect --limit 1: every trace passes a limit of 1, still exit 0" "$BANGTRACE" bisect "$TMP/f16.db" --limit 1 --json
${PYTHON3:-python3} - "$TMP/out" <<'PY' && ok "bisect --json headroom fields" || fail "bisect --json headroom: $(head -c 600 "$TMP/out")"
import json, sys
j = json.load(open(sys.argv[1]))
h = j["headroom"]
assert j["numerics"].startswith("f16:"), j["numerics"]
assert h["limit"] == 1 and h["f16_max"] == 65504, h
assert h["first_under_1x"]["tensor"] == "token_embd" or h["first_under_1x"]["step"] == 0, h["first_under_1x"]
assert h["verdict"].startswith("would overflow in limit at "), h["verdict"]
assert len(h["layer_absmax"]) == 5
PY
expect_exit 2 "--limit is refused with --reference" "$BANGTRACE" bisect "$TMP/f16.db" --reference --limit 3
expect_exit 0 "report" "$BANGTRACE" report "$TMP/f16.db"
grep -q '^| profile | `f16: act=f16' "$TMP/out" && grep -q '^| headroom | f16-safe' "$TMP/out" && ok "report states the profile and the headroom" \
    || fail "report: $(grep -A6 '## Numerics' "$TMP/out")"

# replay the f16 trace under f16: no divergence; f32 against f16 differ somewhere or not, but run
expect_exit 0 "bisect --reference --numerics f16 matches the f16 trace" "$BANGTRACE" bisect "$TMP/f16.db" --reference --numerics f16 --threads 1
expect_exit 0 "bisect --reference --numerics f32 --against act=f32 (identical profiles)" "$BANGTRACE" bisect "$TMP/f16.db" --reference \
    --numerics f32 --against act=f32 --threads 1
grep -q '^no op is non-finite under one profile only' "$TMP/out" && ok "--against: no one-sided non-finite" || fail "$(cat "$TMP/out")"
expect_exit 2 "--against without --numerics" "$BANGTRACE" bisect "$TMP/f16.db" --reference --against f16
expect_exit 2 "--numerics without --reference" "$BANGTRACE" bisect "$TMP/f16.db" --numerics f16
[ "$failures" -eq 0 ]
