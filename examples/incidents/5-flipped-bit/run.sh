#!/usr/bin/env bash
# Case 5: a flipped bit in the weights (see README.md). stories260K; ~2 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
need_stories
need_python
TENSOR=blk.2.wq INDEX=452 BIT=30
FLIPPED=$OUT/stories260K-flipped.bin
RUN=(--tokenizer "$TOK512" --prompt "Once upon a time" -n 16 --threads "$THREADS")

heading "A copy of stories260K with bit $BIT (the top exponent bit) of $TENSOR[$INDEX] flipped"
"$PY" "$top/tools/model-edit" flip-bit "$STORIES" "$FLIPPED" --tokenizer "$TOK512" \
    --tensor "$TENSOR" --index "$INDEX" --bit "$BIT" --force > "$OUT/edit.out" || { echo "FAIL: tools/model-edit flip-bit"; exit 1; }
say "$(sed "s|$OUT/||" "$OUT/edit.out")"

heading "inspect names the tensor"
bt inspect0 inspect "$STORIES" --tokenizer "$TOK512"
expect "the original scans clean (exit 0)" eq "$rc" 0
bt inspect inspect "$FLIPPED" --tokenizer "$TOK512"
grep -A1 '^scan:' "$OUT/inspect.out" | sed 's/^/   /'
expect "inspect exits 1 on the copy" eq "$rc" 1
expect "inspect names $TENSOR, row 7, column 4 (element $INDEX of a 64-wide row)" has "$OUT/inspect.out" "^  $TENSOR: nan 1, +inf 0, -inf 0, first at row 7 col 4"

heading "run shows where it first bites"
fresh "$OUT/flipped.db"
bt run run --model "$FLIPPED" "${RUN[@]}" --trace "$OUT/flipped.db"
say "output: $(cat "$OUT/run.out")"
grep 'event first_nonfinite' "$OUT/run.err" | sed 's/^bangtrace: /   /'
bt bisect bisect "$OUT/flipped.db"
grep -E '^(first|explanation)' "$OUT/bisect.out" | sed 's/^/   /'
expect "bisect exits 1" eq "$rc" 1
expect "first bite: the prefill (step 0), layer 2, attn_q, elements 6 and 7 of every position (RoPE pairs them)" \
    has "$OUT/bisect.out" '^first non-finite: step 0, position 0, layer 2, op attn_q (blk.2.attn_q), index 6: 10 NaN, 0 +Inf, 0 -Inf of 320'
expect "the event names the kernel and the weight" has "$OUT/run.err" 'written by matmul f32/[a-z0-9]* on wq'

heading "The same flip without a copy: --inject bitflip on the original file"
fresh "$OUT/inject.db"
bt inj run --model "$STORIES" "${RUN[@]}" --inject "bitflip:tensor=blk.2.attn_q.weight,index=$INDEX,bit=$BIT" --trace "$OUT/inject.db"
bt injb bisect "$OUT/inject.db"
expect "the injected flip bites at the same step, layer, op and index" \
    eq "$(grep '^first non-finite' "$OUT/injb.out")" "$(grep '^first non-finite' "$OUT/bisect.out")"
expect "the same output" eq "$(cat "$OUT/inj.out")" "$(cat "$OUT/run.out")"
bt inspect1 inspect "$STORIES" --tokenizer "$TOK512"
expect "the original file is still clean" eq "$rc" 0
finish
