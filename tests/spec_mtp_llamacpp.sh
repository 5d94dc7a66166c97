#!/usr/bin/env bash
# spec_mtp_llamacpp.sh - run --engine llama.cpp --draft-mtp: llama.cpp's own
# MTP context (LLAMA_CONTEXT_TYPE_MTP, its draft-mtp path) drafts for the
# llama.cpp target, on the tiny hybrid models with an MTP block
# (tools/make-tiny-hybrid.py --mtp 1) and their echo (tools/model-edit
# mtp-echo: drafts that are accepted on repetitive text):
#   - greedy --spec-k 3 --draft-mtp is token for token --engine llama.cpp
#     without speculation (qwen35, qwen35moe), with runs that accept and
#     runs that reject (the hybrid target's state rolled back by llama.cpp's
#     n_rs_seq snapshots);
#   - the trace: drafter mtp, the spec trail (accepted and mismatch rows),
#     spec_steps with the acceptance count, the drafter's steps and no draft
#     tensors (the MTP context is not tapped);
#   - bisect --reference replays the qwen35 trace on the native engine (verify
#     steps with their drafts; teacher-forced top-1 100% on the tiny models);
#   - the drafts equal the native engine's --draft-mtp drafts (same trail:
#     position, token, verdict), since both pair (h_{p-1}, x_p) the same way;
#   - bad input, one line and exit 2: a model without an MTP block; qwen3next
#     (llama.cpp cannot roll its recurrent state back); --inject model=draft
#     (nothing in the drafter is tapped); another drafter.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
"$py" -c "import numpy, gguf" 2>/dev/null || skip "python3 with numpy and gguf makes the hybrid models"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed"
trap 'rm -rf "$TMP"' EXIT
B=$BANGTRACE
trail() { sqlite3 "$1" "SELECT group_concat(draft_pos || ':' || draft_token || ':' || accepted || ':' || reason, ' ')
                       FROM (SELECT * FROM spec_trail ORDER BY step, draft_idx)"; }
PROMPTS="The old man walked to the river every morning|a b c d e f g a b c"
for A in qwen35 qwen35moe; do
    M=$TMP/$A.gguf E=$TMP/$A-echo.gguf
    "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$M" --arch $A --mtp 1 --seed 7 >"$TMP/tool.log" 2>&1 \
        || { fail "make-tiny-hybrid.py --arch $A: $(tail -1 "$TMP/tool.log")"; continue; }
    BANGTRACE=$B "$py" "$BT_SRCDIR/tools/model-edit" mtp-echo "$M" "$E" >"$TMP/tool.log" 2>&1 \
        || { fail "model-edit mtp-echo $A: $(tail -1 "$TMP/tool.log")"; continue; }
    mtp_lossless "$A" "$M" "$E" --engine llama.cpp
    [ "$same" = "$runs" ] && ok "$A: greedy --engine llama.cpp --draft-mtp is --engine llama.cpp, $same of $runs runs ($accepted with acceptances, $rejected with rejections)" \
        || fail "$A: $same of $runs llama.cpp --draft-mtp runs equal plain llama.cpp decoding"
    [ "$accepted" -ge 1 ] && [ "$rejected" -ge 2 ] || fail "$A: $accepted runs accepted and $rejected rejected a draft (both paths must run)"
    # the trace, and the drafts against the native engine's
    P="a b c d e f g a b c"
    for X in "$M" "$E"; do
        n=$(basename "$X" .gguf)
        "$B" run --engine llama.cpp --model "$X" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$n-l.db" \
            >"$TMP/l.txt" 2>"$TMP/err" || fail "$n traced llama.cpp --draft-mtp run: $(tail -1 "$TMP/err")"
        "$B" run --model "$X" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$n-n.db" \
            >"$TMP/n.txt" 2>"$TMP/err" || fail "$n traced native --draft-mtp run: $(tail -1 "$TMP/err")"
        tl=$(trail "$TMP/$n-l.db") tn=$(trail "$TMP/$n-n.db")
        [ -n "$tl" ] && [ "$tl" = "$tn" ] && cmp -s "$TMP/l.txt" "$TMP/n.txt" \
            && ok "$n: llama.cpp's MTP drafts are the native engine's (the same trail, $(echo "$tl" | wc -w) drafts)" \
            || fail "$n: the drafts differ from the native engine's: llama.cpp '${tl:0:120}' native '${tn:0:120}'"
    done
    D=$TMP/$A-echo-l.db
    [ "$(sqlite3 "$D" "SELECT value FROM meta WHERE key = 'drafter'")" = mtp ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 1")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 0 AND reason = 'mismatch'")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT sum(accepted) FROM spec_steps WHERE drafter = 'mtp'")" = "$(sqlite3 "$D" "SELECT count(*) FROM spec_trail WHERE accepted = 1")" ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM steps WHERE model = 'draft'")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) FROM tensors WHERE model = 'draft'")" = 0 ] \
        && ok "$A: the llama.cpp trace has the MTP drafter's trail (accepted and rejected), spec_steps' acceptance counts and its draft steps" \
        || fail "$A llama.cpp trail: $(sqlite3 "$D" "SELECT reason, count(*) FROM spec_trail GROUP BY reason")"
    # the cross-engine replay: verify steps fed their drafts, top-1 over the
    # rows whose next token the run emitted (qwen35 only: a qwen35moe
    # llama.cpp trace, speculative or not, is refused by the replay: its
    # ffn_gate-L is the experts' width, not the shared expert's)
    [ $A = qwen35 ] || continue
    expect_exit 0 "$A: bisect --reference replays the llama.cpp --draft-mtp trace on the native engine" "$B" bisect "$D" --reference
    grep -q "^teacher-forced top-1 agreement: \([0-9]*\) of \1 steps (100.0%)" "$TMP/out" \
        && ok "$A: $(grep '^teacher-forced' "$TMP/out")" || fail "$A cross-engine replay: $(tail -3 "$TMP/out")"
done
# bad input
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/nomtp.gguf" --arch qwen35 --mtp 0 --seed 7 >/dev/null 2>&1
expect_exit 2 "--engine llama.cpp --draft-mtp on a model without an MTP block" \
    "$B" run --engine llama.cpp --model "$TMP/nomtp.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "has no MTP (nextn) block" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "no MTP block: one line naming it" \
    || fail "no MTP block: $(cat "$TMP/err")"
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/next.gguf" --arch qwen3next --mtp 1 --seed 7 >/dev/null 2>&1
expect_exit 2 "--engine llama.cpp --draft-mtp on qwen3next" \
    "$B" run --engine llama.cpp --model "$TMP/next.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "cannot roll back the recurrent state of architecture qwen3next" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
    && ok "qwen3next: one line (llama.cpp has no partial rollback for it)" || fail "qwen3next: $(cat "$TMP/err")"
expect_exit 2 "--inject model=draft into llama.cpp's MTP drafter" \
    "$B" run --engine llama.cpp --model "$TMP/qwen35.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp --inject "nan@layer=1,op=attn_norm,model=draft"
grep -q "MTP drafter (--engine llama.cpp --draft-mtp) is not tapped" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
    && ok "model=draft on llama.cpp's drafter: one line" || fail "model=draft: $(cat "$TMP/err")"
expect_exit 2 "--engine llama.cpp with another drafter" \
    "$B" run --engine llama.cpp --model "$TMP/qwen35.gguf" --prompt hi -n 4 --spec-k 2 --draft-ngram 2
grep -q "drafts only with --draft-mtp" "$TMP/err" && ok "another drafter: one line" || fail "another drafter: $(cat "$TMP/err")"
finish
