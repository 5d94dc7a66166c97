#!/usr/bin/env bash
# spec_hybrid.sh - speculative decoding on the hybrid models (issue 25): a
# rejected draft is rolled back in the recurrent state (the verify saves the
# state, a rejection restores it and recomputes the accepted positions; a
# hybrid drafter rewinds the same way), so
#   - greedy speculation (prompt lookup and the model's own first layers) is
#     token for token plain decoding on qwen35 and qwen3next, with rejections;
#   - its trace replays clean under bisect --reference;
#   - --inject norollback (the rejected drafts left in the state, the bug
#     class) changes the op outputs (and on qwen35 the text), and diff
#     against the clean run and bisect
#     --reference name the first step and recurrent op where it departs,
#     bisect naming the verify that was not rolled back;
#   - a bad norollback spec is one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy" 2>/dev/null || skip "python3 has no numpy (the hybrid models)"
trap 'rm -rf "$TMP"' EXIT
PROMPTS="The old man walked to the river every morning|Once upon a time there was a little girl named Lily|a b c d e f g a b c"
for A in qwen35 qwen3next; do
    M=$TMP/$A.gguf
    "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$M" --arch $A --mtp 0 --seed 7 >"$TMP/tool.log" 2>&1 \
        || { fail "make-tiny-hybrid.py --arch $A: $(tail -1 "$TMP/tool.log")"; continue; }
    same=0 runs=0 rejected=0
    IFS='|'
    for P in $PROMPTS; do
        unset IFS
        "$BANGTRACE" run --model "$M" --prompt "$P" -n 48 --ignore-eos >"$TMP/plain.txt" 2>/dev/null || fail "$A plain run"
        for D in "--draft-ngram 1" "--draft-self 2"; do
            # shellcheck disable=SC2086
            "$BANGTRACE" run --model "$M" --prompt "$P" -n 48 --ignore-eos --spec-k 4 $D >"$TMP/spec.txt" 2>"$TMP/spec.err" \
                || fail "$A $D: $(tail -1 "$TMP/spec.err")"
            runs=$((runs + 1))
            cmp -s "$TMP/plain.txt" "$TMP/spec.txt" && same=$((same + 1))
            grep -q "(100%)" "$TMP/spec.err" || rejected=$((rejected + 1))
        done
        IFS='|'
    done
    unset IFS
    [ "$same" = "$runs" ] && ok "$A: greedy speculation is plain decoding, $same of $runs runs ($rejected with rejections)" \
        || fail "$A: $same of $runs speculative runs equal plain decoding"
    [ "$rejected" -ge 2 ] || fail "$A: only $rejected runs rejected a draft (the rollback is untested)"
    P="The old man walked to the river every morning"
    "$BANGTRACE" run --model "$M" --prompt "$P" -n 40 --ignore-eos --spec-k 4 --draft-self 2 --trace "$TMP/clean.db" >"$TMP/c.txt" 2>/dev/null
    expect_exit 0 "$A: the speculative trace replays clean (bisect --reference)" "$BANGTRACE" bisect "$TMP/clean.db" --reference
    "$BANGTRACE" run --model "$M" --prompt "$P" -n 40 --ignore-eos --spec-k 4 --draft-self 2 --inject norollback \
        --trace "$TMP/norb.db" >"$TMP/n.txt" 2>/dev/null
    # the text may survive (a random model's argmax is robust); the tensors
    # do not, and that is what diff and bisect must name
    cmp -s "$TMP/c.txt" "$TMP/n.txt" && echo "note: $A norollback: the text came out the same" \
        || ok "$A norollback: the rejected drafts left in the state change the output"
    "$BANGTRACE" diff "$TMP/clean.db" "$TMP/norb.db" >"$TMP/diff.out" 2>&1
    grep -Eq "^first diverging tap: step [0-9]+ \(target verify, positions [0-9-]+\), layer [0-9]+, op ssm_" "$TMP/diff.out" \
        && ok "diff names the first verify and recurrent op where the un-restored state departs ($(grep '^first diverging tap' "$TMP/diff.out" | cut -c1-80))" \
        || fail "$A diff: $(cat "$TMP/diff.out")"
    expect_exit 1 "$A norollback: bisect --reference diverges" "$BANGTRACE" bisect "$TMP/norb.db" --reference
    grep -Eq "^first divergence: step [0-9]+ \(verify, .*op ssm_" "$TMP/out" \
        && grep -q "^state: the reference rolled the recurrent state back after each rejection; the trace did not (step [0-9]*: --inject norollback" "$TMP/out" \
        && ok "$A norollback: bisect --reference names the step, the recurrent op and the verify left unrestored" \
        || fail "$A norollback bisect: $(cat "$TMP/out")"
done
M=$TMP/qwen35.gguf
expect_exit 2 "norollback with a key it does not take" "$BANGTRACE" run --model "$M" --prompt hi -n 4 --spec-k 2 --draft-ngram 1 \
    --inject norollback@layer=1
grep -q "norollback takes step and p" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "a bad norollback spec: one line naming it" \
    || fail "bad norollback: $(cat "$TMP/err")"
finish
