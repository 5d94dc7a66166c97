#!/usr/bin/env bash
# Case 4: only long prompts break (see README.md). stories260K; ~2 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
need_stories
ONSET=48
FAULT="longctx@pos>=$ONSET,op=attn_k,scale=1.5"
RUN=(--model "$STORIES" --tokenizer "$TOK512" --threads "$THREADS")

heading "The fault: from position $ONSET on, every key is 1.5x too large (--inject $FAULT)"
say "finite everywhere: no NaN, no Inf, no detector fires"

heading "Short probes: all clean, even against a clean replay"
i=0
for p in "Once upon a time" "The cat sat on the mat" "Tom had a red ball"; do
    i=$((i + 1))
    fresh "$OUT/short$i.db"
    bt short$i run "${RUN[@]}" --prompt "$p" -n 16 --inject "$FAULT" --trace "$OUT/short$i.db"
    expect "probe $i runs (exit 0)" eq "$rc" 0
    bt short${i}b bisect "$OUT/short$i.db"
    expect "probe $i: bisect finds nothing (exit 0)" eq "$rc" 0
    bt short${i}r bisect "$OUT/short$i.db" --reference
    expect "probe $i: bisect --reference finds no divergence (exit 0)" eq "$rc" 0
done

heading "A long prompt: the story changes, and nothing says why"
LONG="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends."
bt clean run "${RUN[@]}" --prompt "$LONG" -n 24
say "clean:   ...$(cat "$OUT/clean.out")"
fresh "$OUT/long.db"
bt long run "${RUN[@]}" --prompt "$LONG" -n 24 --inject "$FAULT" --trace "$OUT/long.db"
say "faulty:  ...$(cat "$OUT/long.out")"
expect "the long run exits 0" eq "$rc" 0
expect "the output differs from the clean run" eval '[ "$(cat "$OUT/long.out")" != "$(cat "$OUT/clean.out")" ]'
bt longb bisect "$OUT/long.db"
sed -n 2p "$OUT/longb.out" | sed 's/^/   /'
expect "plain bisect finds nothing: every value is finite (exit 0)" eq "$rc" 0

heading "bisect --reference: replay the same tokens on a clean engine and compare every tap"
bt longr bisect "$OUT/long.db" --reference
grep -E '^first divergence' "$OUT/longr.out" | sed 's/^/   /'
expect "bisect --reference exits 1" eq "$rc" 1
expect "the first divergence is at position $ONSET, layer 0, attn_k" \
    has "$OUT/longr.out" "^first divergence: step [0-9]* (decode, position $ONSET), layer 0, op attn_k (blk.0.attn_k)"
finish
