#!/usr/bin/env bash
# spec_mtp.sh - the hybrid models' own MTP (nextn) block as the drafter
# (issue 25, run --draft-mtp):
#   - greedy speculation with the block is token for token plain decoding on
#     qwen35, qwen35moe, qwen3next and deepseek2 (an MLA + MoE block, as
#     DeepSeek-V3's: tools/make-tiny-deepseek2.py --mtp 1), with the tiny models' random block
#     (never right) and with its echo (tools/model-edit mtp-echo: it drafts
#     the trunk's last prediction, right on repetitive text, so the trail
#     has acceptances, bonus tokens and rejections the hybrid target must
#     roll back);
#   - the trace holds the block's taps under blk.N.* of the draft model
#     (N = the trunk's layers), its drafts in the spec trail with drafter
#     "mtp", and replays clean under bisect --reference;
#   - a NaN injected into the block (op=mtp_eh_proj, model=draft) stays in
#     the drafter: the output is the clean one and bisect names the
#     drafter's step, layer N and op;
#   - --inject norollback under the MTP drafter is named by diff as under
#     the other drafters;
#   - a model without an MTP block, or --draft-mtp without --spec-k, is one
#     line and exit 2;
#   - bench --spec-k 3 --draft-mtp measures the speculative text decode with
#     the block (JSON drafter "mtp", an acceptance rate) and refuses a model
#     without the block (one line, exit 2) and a second drafter.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy, gguf" 2>/dev/null || skip "python3 with numpy and gguf makes the hybrid models"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed"
trap 'rm -rf "$TMP"' EXIT
PROMPTS="The old man walked to the river every morning|a b c d e f g a b c"
for A in qwen35 qwen35moe qwen3next deepseek2; do
    M=$TMP/$A.gguf E=$TMP/$A-echo.gguf
    tiny_mtp_model $A "$M" || continue
    BANGTRACE=$BANGTRACE "$py" "$BT_SRCDIR/tools/model-edit" mtp-echo "$M" "$E" >"$TMP/tool.log" 2>&1 \
        || { fail "model-edit mtp-echo $A: $(tail -1 "$TMP/tool.log")"; continue; }
    N=$("$BANGTRACE" inspect "$M" --json --no-scan | "$py" -c 'import json,sys; print(min(int(t["name"].split(".")[1]) for t in json.load(sys.stdin)["tensors"] if ".nextn." in t["name"]))')
    mtp_lossless "$A" "$M" "$E"
    [ "$same" = "$runs" ] && ok "$A: greedy --draft-mtp is plain decoding, $same of $runs runs ($accepted with acceptances, $rejected with rejections)" \
        || fail "$A: $same of $runs --draft-mtp runs equal plain decoding"
    [ "$accepted" -ge 1 ] && [ "$rejected" -ge 2 ] || fail "$A: $accepted runs accepted and $rejected rejected a draft (both paths must run)"
    # the trace: the block's taps, the trail, a clean replay
    P="a b c d e f g a b c"
    "$BANGTRACE" run --model "$E" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$A-clean.db" >"$TMP/c.txt" 2>/dev/null \
        || fail "$A traced --draft-mtp run"
    got=$(sqlite3 "$TMP/$A-clean.db" "SELECT group_concat(name, ' ') FROM (SELECT name FROM tensors WHERE model = 'draft' AND name LIKE 'blk.$N.mtp_%' ORDER BY idx)")
    [ "$got" = "blk.$N.mtp_enorm blk.$N.mtp_hnorm blk.$N.mtp_eh_proj" ] \
        && [ "$(sqlite3 "$TMP/$A-clean.db" "SELECT count(*) FROM tensors WHERE model = 'draft' AND layer IS NOT NULL AND layer <> $N")" = 0 ] \
        && [ "$(sqlite3 "$TMP/$A-clean.db" "SELECT count(*) FROM tensors WHERE model = 'target' AND op LIKE 'mtp_%'")" = 0 ] \
        && ok "$A: the drafter's taps are the block's (blk.$N.mtp_enorm, mtp_hnorm, mtp_eh_proj, then its layer), none in the target" \
        || fail "$A block taps: '$got'"
    [ "$(sqlite3 "$TMP/$A-clean.db" "SELECT value FROM meta WHERE key = 'drafter'")" = mtp ] \
        && [ "$(sqlite3 "$TMP/$A-clean.db" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 1")" = 1 ] \
        && [ "$(sqlite3 "$TMP/$A-clean.db" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 0 AND reason = 'mismatch'")" = 1 ] \
        && ok "$A: the spec trail has the block's drafts, accepted and rejected (drafter mtp)" \
        || fail "$A trail: $(sqlite3 "$TMP/$A-clean.db" "SELECT reason, count(*) FROM spec_trail GROUP BY reason")"
    expect_exit 0 "$A: the --draft-mtp trace replays clean (bisect --reference)" "$BANGTRACE" bisect "$TMP/$A-clean.db" --reference
    # a NaN in the block stays in the drafter
    D=$(sqlite3 "$TMP/$A-clean.db" "SELECT min(step) FROM steps WHERE model = 'draft' AND step > 3")
    "$BANGTRACE" run --model "$E" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$A-nan.db" \
        --inject "nan@step=$D,layer=$N,op=mtp_eh_proj,model=draft" >"$TMP/n.txt" 2>/dev/null || fail "$A injected run"
    cmp -s "$TMP/c.txt" "$TMP/n.txt" && ok "$A: a NaN in the MTP block never reaches the output (the target verifies)" \
        || fail "$A: the drafter's NaN changed the output"
    expect_exit 1 "$A: bisect on the drafter's NaN" "$BANGTRACE" bisect "$TMP/$A-nan.db"
    grep -q "^first non-finite: step $D, .*layer $N, op mtp_eh_proj (blk.$N.mtp_eh_proj).*draft" "$TMP/out" \
        && grep -q "origin: the first non-finite came from the drafter's draft pass at step $D (blk.$N.mtp_eh_proj), not from the target" "$TMP/out" \
        && ok "$A: bisect names the drafter's step $D, layer $N, mtp_eh_proj" || fail "$A bisect: $(head -5 "$TMP/out")"
done
# the bug class under the MTP drafter: rejected drafts left in the state
M=$TMP/qwen35-echo.gguf
P="The old man walked to the river every morning"
"$BANGTRACE" run --model "$M" --prompt "$P" -n 40 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/c2.db" >/dev/null 2>&1
"$BANGTRACE" run --model "$M" --prompt "$P" -n 40 --ignore-eos --spec-k 3 --draft-mtp --inject norollback --trace "$TMP/nr.db" >/dev/null 2>&1
"$BANGTRACE" diff "$TMP/c2.db" "$TMP/nr.db" >"$TMP/diff.out" 2>&1
grep -Eq "^first diverging tap: step [0-9]+ \(target verify, positions [0-9-]+\), layer [0-9]+, op ssm_" "$TMP/diff.out" \
    && ok "norollback under --draft-mtp: diff names the verify and recurrent op ($(grep '^first diverging tap' "$TMP/diff.out" | cut -c1-70))" \
    || fail "norollback diff: $(head -5 "$TMP/diff.out")"
# bad input
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/nomtp.gguf" --arch qwen35 --mtp 0 --seed 7 >/dev/null 2>&1
expect_exit 2 "--draft-mtp on a model without an MTP block" "$BANGTRACE" run --model "$TMP/nomtp.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "has no MTP (nextn) block" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "no MTP block: one line naming it" \
    || fail "no MTP block: $(cat "$TMP/err")"
expect_exit 2 "--draft-mtp without --spec-k" "$BANGTRACE" run --model "$M" --prompt hi -n 4 --draft-mtp
grep -q "a drafter needs --spec-k" "$TMP/err" && ok "--draft-mtp alone: one line" || fail "--draft-mtp alone: $(cat "$TMP/err")"
# bench --spec-k K --draft-mtp: the speculative text decode with the block
# as drafter (the echo block: some drafts are accepted), drafter "mtp" in
# the JSON; a model without the block is refused before measuring
"$BANGTRACE" bench --model "$M" -p 64 -n 16 --reps 1 --threads 1 --spec-k 3 --draft-mtp --json >"$TMP/bench.json" 2>"$TMP/err" \
    || fail "bench --draft-mtp: $(cat "$TMP/err")"
"$py" - "$TMP/bench.json" <<'PY' && ok "bench --spec-k 3 --draft-mtp: valid JSON, drafter mtp, an acceptance rate" || fail "bench --draft-mtp JSON: $(cat "$TMP/bench.json")"
import json, sys
j = json.load(open(sys.argv[1]))
a = j["spec_acceptance"]
print("drafter %s, k %s, acceptance %s" % (j["drafter"], j["spec_k"], a))
sys.exit(0 if j["drafter"] == "mtp" and j["spec_k"] == 3 and 0 < a <= 1 and j["text_decode_tokens_per_s_spec"] is not None else 1)
PY
expect_exit 2 "bench --draft-mtp on a model without an MTP block" "$BANGTRACE" bench --model "$TMP/nomtp.gguf" -p 64 -n 8 --reps 1 --spec-k 2 --draft-mtp
grep -q "has no MTP (nextn) block" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "bench, no MTP block: one line naming it" \
    || fail "bench, no MTP block: $(cat "$TMP/err")"
expect_exit 2 "bench --draft-mtp with --draft-ngram" "$BANGTRACE" bench --model "$M" --spec-k 2 --draft-mtp --draft-ngram 2
grep -q "goes with one of" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "bench: two drafters, one line" || fail "bench two drafters: $(cat "$TMP/err")"
expect_exit 2 "bench --draft-mtp without --spec-k" "$BANGTRACE" bench --model "$M" --draft-mtp
expect_exit 2 "--draft-mtp on a non-hybrid model" "$BANGTRACE" run --model "$MODELS/gguf-tiny/llama-2-tiny-random.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "no MTP (nextn) block" "$TMP/err" && ok "a model with no MTP block at all: one line" || fail "non-hybrid: $(cat "$TMP/err")"
finish
