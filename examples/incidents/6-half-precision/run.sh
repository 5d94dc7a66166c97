#!/usr/bin/env bash
# Case 6: half precision (see README.md). stories260K with one layer's FFN
# output scaled; ~3 s on 2 cores. The f32 run, its headroom verdict, the
# f16 replay (run --numerics f16) that overflows exactly where the verdict
# said, and the bf16 replay that stays finite.
. "$(dirname "$0")/../lib.sh"
need_stories
need_python
need_sqlite3
HOT=$OUT/stories260K-hot.bin
F16_MAX=65504
RUN=(--model "$HOT" --tokenizer "$TOK512" --prompt "Once upon a time" -n 24 --threads "$THREADS")

heading "A copy of stories260K whose layer 2 FFN down-projection (w2) is 30000x larger"
"$PY" "$top/tools/model-edit" scale "$STORIES" "$HOT" --tokenizer "$TOK512" --tensor blk.2.w2 --factor 30000 --force \
    > "$OUT/edit.out" || { echo "FAIL: tools/model-edit scale"; exit 1; }
say "$(sed "s|$OUT/||" "$OUT/edit.out")"

heading "The f32 run: every value finite"
fresh "$OUT/f32.db"
bt f32 run "${RUN[@]}" --trace "$OUT/f32.db"
expect "the f32 run exits 0" eq "$rc" 0
bt f32b bisect "$OUT/f32.db"
sed -n '2,4p' "$OUT/f32b.out" | sed 's/^/   /'
expect "bisect finds no non-finite value (exit 0)" eq "$rc" 0
expect "its headroom verdict predicts the f16 overflow at blk.2.ffn_down" \
    has "$OUT/f32b.out" '^headroom: would overflow in f16 at blk\.2\.ffn_down, step [0-9]*, position [0-9]*'
pred_step=$(sed -n 's/^headroom: would overflow in f16 at blk\.2\.ffn_down, step \([0-9]*\),.*/\1/p' "$OUT/f32b.out")

heading "Its headroom, from the trace (sqlite3 on v_taps): the largest |value| per tensor"
sqlite3 -column "$OUT/f32.db" "SELECT tensor, max(absmax) AS absmax, printf('%.2f', $F16_MAX / max(absmax)) AS f16_headroom
    FROM v_taps GROUP BY tensor ORDER BY max(absmax) DESC, min(idx) LIMIT 4" | sed 's/^/   /'
top_tensor=$(sqlite3 "$OUT/f32.db" "SELECT tensor FROM v_taps ORDER BY absmax DESC, step, idx LIMIT 1")
absmax=$(sqlite3 "$OUT/f32.db" "SELECT cast(max(absmax) AS int) FROM v_taps")
expect "the peak is blk.2.ffn_down (the scaled layer): $top_tensor" eq "$top_tensor" blk.2.ffn_down
expect "its absmax ($absmax) is past the f16 maximum $F16_MAX, far inside f32's range" \
    eval '[ "$absmax" -gt "$F16_MAX" ] && [ "$absmax" -lt 131072 ]'
expect "every tensor before layer 2 stays below 1000" \
    eq "$(sqlite3 "$OUT/f32.db" "SELECT max(absmax) < 1000 FROM v_taps WHERE layer < 2 OR op = 'token_embd'")" 1

heading "The f16 replay (activations, matmul inputs and KV cache in f16)"
fresh "$OUT/f16.db"
bt f16 run "${RUN[@]}" --numerics f16 --trace "$OUT/f16.db"
bt f16b bisect "$OUT/f16.db"
grep -E '^(first non|explanation)' "$OUT/f16b.out" | sed 's/^/   /'
expect "the f16 replay overflows: bisect exits 1" eq "$rc" 1
expect "the first non-finite value is in layer 2" has "$OUT/f16b.out" '^first non-finite: step [0-9]*, position [0-9]*, layer 2, '
expect "at blk.2.ffn_down, at the step the f32 verdict named ($pred_step)" \
    has "$OUT/f16b.out" "^first non-finite: step ${pred_step:-x}, position [0-9]*, layer 2, op ffn_down "
expect "the trace records the profile" eq "$(sqlite3 "$OUT/f16.db" "SELECT value FROM meta WHERE key = 'numerics'" | cut -d: -f1)" f16

heading "The bf16 replay: same storage, bf16's range"
fresh "$OUT/bf16.db"
bt bf16 run "${RUN[@]}" --numerics bf16 --trace "$OUT/bf16.db"
bt bf16b bisect "$OUT/bf16.db"
sed -n '2,3p' "$OUT/bf16b.out" | sed 's/^/   /'
expect "the bf16 replay stays finite: bisect exits 0" eq "$rc" 0
finish
