#!/usr/bin/env bash
# Case 3: the drafter is not guilty (see README.md). stories260K drafting for
# itself; ~3 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
need_stories
"$BT" help run 2>&1 | grep -q -- '--spec-k' || skip "this build's run has no --spec-k"
RUN=(--model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 60 --threads "$THREADS"
     --spec-k 4 --draft "$STORIES")
sqlv() { sqlite3 "$1" "$2" 2>/dev/null || "$PY" -c "import sqlite3,sys; print(*sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone(), sep='|')" "$1" "$2"; }

heading "Speculative decoding, clean: stories260K drafts 4 tokens for itself"
fresh "$OUT/clean.db"
bt clean run "${RUN[@]}" --trace "$OUT/clean.db"
grep '^bangtrace: speculation' "$OUT/clean.err" | sed 's/^bangtrace: /   /'
expect "clean run exits 0" eq "$rc" 0
expect "every drafted token is accepted (the drafter is the target)" has "$OUT/clean.err" 'drafted tokens accepted (100%)'
bt cleanb bisect "$OUT/clean.db"
expect "bisect finds nothing on the clean run (exit 0)" eq "$rc" 0
# Steps are numbered across both models: 0 the target's prefill, then four
# draft passes and one target verify pass, repeating: 5, 10, 15 are verifies.
expect "step 10 is a target verify pass, step 7 a draft pass" \
    eq "$(sqlv "$OUT/clean.db" "SELECT (SELECT model||'/'||kind FROM steps WHERE step=10)||' '||(SELECT model||'/'||kind FROM steps WHERE step=7)")" "target/verify draft/draft"

heading "The fault in the target (verify step 10): acceptance collapses"
fresh "$OUT/target.db"
bt target run "${RUN[@]}" --inject nan@step=10,layer=3,op=ffn_gate,index=5 --trace "$OUT/target.db"
grep '^bangtrace: speculation' "$OUT/target.err" | sed 's/^bangtrace: /   /'
bt targetb bisect "$OUT/target.db"
grep -E '^(first non|  acceptance per|  origin|  amplification)' "$OUT/targetb.out" | sed 's/^/   /'
expect "bisect exits 1" eq "$rc" 1
expect "origin: the target's verify pass at step 10, not the drafter" has "$OUT/targetb.out" "^  origin: the NaN came from the target's verify pass at step 10, not from the drafter"
expect "acceptance falls to 0 after the fault" has "$OUT/targetb.out" '^  acceptance per 8 verify steps: 0\.[0-9]* 0\.00 0\.00'
expect "the amplification figure is reported" has "$OUT/targetb.out" '^  amplification: speculation (k=4, model) pushed [0-9]* target positions through blk.3.ffn_gate'
bt targett browse "$OUT/target.db" --dump spec --step 10
say "the trail at verify step 10: the drafts are finite, the target answers <unk> (id 0 of all-NaN logits)"
sed -n '/^verify step 10/,$p' "$OUT/targett.out" | head -4 | sed 's/^/ /'
expect "trail: draft rows finite, the target's row NaN" \
    eq "$(sqlv "$OUT/target.db" "SELECT (SELECT min(draft_finite) FROM spec_trail WHERE step=10)||' '||(SELECT max(nan) FROM v_logits WHERE step=10)")" "1 512"

heading "The fault in the drafter instead (draft step 7): the output stays clean"
fresh "$OUT/draft.db"
bt draft run "${RUN[@]}" --inject nan@step=7,layer=3,op=ffn_gate,index=5,model=draft --trace "$OUT/draft.db"
grep '^bangtrace: speculation' "$OUT/draft.err" | sed 's/^bangtrace: /   /'
bt draftb bisect "$OUT/draft.db"
grep -E '^(first non|  acceptance per|  origin|  the target|  [0-9]* drafted)' "$OUT/draftb.out" | sed 's/^/   /'
expect "origin: the drafter's draft pass at step 7" has "$OUT/draftb.out" "^  origin: the first non-finite came from the drafter's draft pass at step 7 (blk.3.ffn_gate), not from the target"
expect "bisect says the target stayed finite and the output is clean" has "$OUT/draftb.out" 'the output is clean'
expect "the output is the clean run's output, token for token" eq "$(cat "$OUT/draft.out")" "$(cat "$OUT/clean.out")"
bt draftt browse "$OUT/draft.db" --dump spec --step 10
sed -n '/^verify step 10/,$p' "$OUT/draftt.out" | head -4 | sed 's/^/ /'
expect "trail: the non-finite drafts were all rejected" \
    eq "$(sqlv "$OUT/draft.db" "SELECT count(*)>0, sum(accepted) FROM spec_trail WHERE draft_finite=0")" "1|0"
finish
