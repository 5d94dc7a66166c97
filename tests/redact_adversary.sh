#!/bin/sh
# tests/redact_adversary.sh - an adversary (tests/redact_attack.py) tries
# to undo `export --redact` from every column of every table: ids equal to a
# redacted token at its position (the logits table's chosen, argmax and
# top-k included), prompt words and redacted pieces in any text, the argmax
# of full logit rows, and the token_embd / blk.0.attn_norm statistics of
# single-position steps matched against every row of the model's embedding
# table. On SmolLM2 answering examples/chat.json ("The capital of France
# is", echoing the prompt) with the sample trace's NaN: nothing is
# recovered from --redact=prompt or --redact=all exports (of a speculative
# self-draft run too), nor from the shipped traces/wall-of-bang.db; the same attacks on an unredacted copy
# recover the echoed ids (the control); the structure of what went wrong
# (non-finite counts, the first bad op, bisect) survives.
# Without SmolLM2, stories260K (a llama2.c checkpoint, no echo) alone is
# attacked: ids, text and the embedding statistics.
. "${BT_SRCDIR:-.}/tests/lib.sh"
[ -f "$SMOL" ] || [ -f "$STORIES" ] || skip "neither SmolLM2 ($SMOL) nor stories260K ($STORIES) is here"
PY=${PYTHON3:-python3}
"$PY" -c 'import numpy, sqlite3' 2>/dev/null || skip "$PY with numpy is needed"
command -v sqlite3 > /dev/null 2>&1 || skip "the sqlite3 shell is needed"
ADV="$PY ${BT_SRCDIR:-.}/tests/redact_attack.py"
REQ=${BT_SRCDIR:-.}/examples/chat.json
FAULT=nan@step=5,layer=17,op=ffn_down,count=3

if [ -f "$STORIES" ]; then
    expect_exit 0 "stories260K: run --trace" "$BANGTRACE" -q run --model "$STORIES" --tokenizer "$TOK512" \
        --prompt "Once upon a time there was a little girl" -n 24 --inject nan@layer=0,op=ffn_down,step=6 --trace "$TMP/st.db" --threads 1
    for lvl in prompt all; do
        expect_exit 0 "stories260K: export --redact=$lvl" "$BANGTRACE" export "$TMP/st.db" -o "$TMP/st-$lvl.db" --redact=$lvl --all-steps
        $ADV "$TMP/st.db" "$TMP/st-$lvl.db" "$STORIES" > "$TMP/st-$lvl.adv" 2>&1 && ok "stories260K $lvl: $(tail -n 1 "$TMP/st-$lvl.adv")" ||
            fail "stories260K $lvl: $(head -n 5 "$TMP/st-$lvl.adv" | tr '\n' ';') $(tail -n 1 "$TMP/st-$lvl.adv")"
    done
    expect_exit 0 "stories260K: export (no redaction)" "$BANGTRACE" export "$TMP/st.db" -o "$TMP/st-plain.db" --all-steps
    $ADV "$TMP/st.db" "$TMP/st-plain.db" "$STORIES" --trail "$TMP/st-all.db" --expect-leak > "$TMP/st-control.adv" 2>&1 &&
        [ "$(grep -c '^embed: ' "$TMP/st-control.adv")" -ge 5 ] &&
        ok "stories260K control: the embedding attack names the tokens of an unredacted copy ($(grep -c '^embed: ' "$TMP/st-control.adv") matches)" ||
        fail "stories260K control: $(tail -n 1 "$TMP/st-control.adv")"
fi
if [ ! -f "$SMOL" ] || ! "$PY" -c 'import gguf' 2>/dev/null; then
    echo "note: SmolLM2 or the gguf package missing: the echo, speculative and sample-trace parts did not run"
    finish
fi

expect_exit 0 "run --trace (SmolLM2, the sample trace's request and fault)" \
    "$BANGTRACE" run --model "$SMOL" --request "$REQ" -n 24 --inject "$FAULT" --trace "$TMP/o.db" --threads 2
echo=$(sqlite3 "$TMP/o.db" "SELECT group_concat(piece, '') FROM (SELECT piece FROM tokens WHERE role = 'gen' ORDER BY seq LIMIT 5)")
[ "$echo" = "The capital of France is" ] && ok "the answer echoes the prompt: '$echo'" || fail "answer '$echo' (the test needs the echo)"

# adversary LABEL EXPORT [ARGS]: nothing recovered
adversary() {
    lbl=$1 exp=$2
    shift 2
    $ADV "$TMP/o.db" "$exp" "$SMOL" "$@" > "$TMP/$lbl.adv" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then ok "$lbl: $(tail -n 1 "$TMP/$lbl.adv")"
    else fail "$lbl: the adversary (exit $rc): $(head -n 5 "$TMP/$lbl.adv" | tr '\n' ';') $(tail -n 1 "$TMP/$lbl.adv")"; fi
}
for lvl in prompt all; do
    expect_exit 0 "export --redact=$lvl --window 4" "$BANGTRACE" export "$TMP/o.db" -o "$TMP/w-$lvl.db" --redact=$lvl --window 4
    adversary "window-$lvl" "$TMP/w-$lvl.db"
    expect_exit 0 "export --redact=$lvl --all-steps" "$BANGTRACE" export "$TMP/o.db" -o "$TMP/a-$lvl.db" --redact=$lvl --all-steps
    adversary "all-steps-$lvl" "$TMP/a-$lvl.db"
    # what went wrong stays: the first non-finite op and its counts, bisect
    a=$(sqlite3 "$TMP/o.db" "SELECT * FROM v_first_nonfinite")
    b=$(sqlite3 "$TMP/w-$lvl.db" "SELECT * FROM v_first_nonfinite")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "$lvl: v_first_nonfinite kept ($b)" || fail "$lvl: v_first_nonfinite '$a' vs '$b'"
    a=$(sqlite3 "$TMP/o.db" "SELECT count(*), sum(nan), sum(pinf), sum(ninf) FROM tap_bad WHERE step BETWEEN 1 AND 9")
    b=$(sqlite3 "$TMP/w-$lvl.db" "SELECT count(*), sum(nan), sum(pinf), sum(ninf) FROM tap_bad")
    [ "$a" = "$b" ] && ok "$lvl: every non-finite count kept ($b)" || fail "$lvl: non-finite counts '$a' vs '$b'"
    a=$(sqlite3 "$TMP/o.db" "SELECT group_concat(nan || '/' || coalesce(entropy, '-'), ' ') FROM logits WHERE step BETWEEN 1 AND 9")
    b=$(sqlite3 "$TMP/w-$lvl.db" "SELECT group_concat(nan || '/' || coalesce(entropy, '-'), ' ') FROM logits")
    [ "$a" = "$b" ] && ok "$lvl: logit snapshots' counts and entropy kept" || fail "$lvl: logits '$a' vs '$b'"
    expect_exit 1 "$lvl: bisect still finds the fault" "$BANGTRACE" bisect "$TMP/w-$lvl.db"
    grep -q '^first non-finite: step 5, position 41, layer 17, op ffn_down' "$TMP/out" && ok "$lvl: bisect: step 5, layer 17, ffn_down" ||
        fail "$lvl: bisect: $(grep '^first' "$TMP/out")"
done
# decode steps over kept tokens keep their statistics (prompt mode)
b=$(sqlite3 "$TMP/w-prompt.db" "SELECT count(*) FROM v_taps WHERE op = 'token_embd' AND rms IS NOT NULL")
[ "$b" -ge 1 ] && ok "prompt: token_embd statistics of kept tokens stay ($b steps)" || fail "prompt: no token_embd statistics left"
b=$(sqlite3 "$TMP/w-all.db" "SELECT count(*) FROM v_taps WHERE (op = 'token_embd' OR (layer = 0 AND op IN ('attn_norm', 'attn_q', 'attn_k', 'attn_v'))) AND rms IS NOT NULL")
[ "$b" = 0 ] && ok "all: no input-token statistics" || fail "all: $b input-token statistics left"
b=$(sqlite3 "$TMP/w-all.db" "SELECT count(*) FROM v_taps WHERE layer = 17 AND rms IS NOT NULL")
[ "$b" -ge 1 ] && ok "all: later layers' statistics stay ($b)" || fail "all: layer 17 statistics gone"

# the control: the same attacks on an unredacted copy find what had to go
expect_exit 0 "export (no redaction)" "$BANGTRACE" export "$TMP/o.db" -o "$TMP/plain.db" --window 4
$ADV "$TMP/o.db" "$TMP/plain.db" "$SMOL" --trail "$TMP/w-prompt.db" --expect-leak > "$TMP/control.adv" 2>&1 &&
    grep -q '^embed: step [0-9]* (token_embd) stats match only vocabulary row 3575' "$TMP/control.adv" &&
    grep -q '^ids: logits.chosen = 3575 ' "$TMP/control.adv" && grep -q '^text: ' "$TMP/control.adv" &&
    ok "control: on an unredacted copy the adversary recovers ' capital' (embedding, logits) and the prompt's words" ||
    fail "control: the adversary found too little: $(tail -n 1 "$TMP/control.adv")"

# a speculative run (self-draft: the drafter's passes read the same
# embedding): the echo is in the corrections, among rejected drafts
if "$BANGTRACE" help run 2>&1 | grep -q -- '--spec-k'; then
    expect_exit 0 "run --spec-k 4 --draft-self 2 --trace" "$BANGTRACE" run --model "$SMOL" --request "$REQ" -n 24 --spec-k 4 --draft-self 2 \
        --trace "$TMP/sp.db" --threads 2
    for lvl in prompt all; do
        expect_exit 0 "speculative: export --redact=$lvl" "$BANGTRACE" export "$TMP/sp.db" -o "$TMP/sp-$lvl.db" --redact=$lvl --all-steps
        $ADV "$TMP/sp.db" "$TMP/sp-$lvl.db" "$SMOL" > "$TMP/sp-$lvl.adv" 2>&1 && ok "speculative $lvl: $(tail -n 1 "$TMP/sp-$lvl.adv")" ||
            fail "speculative $lvl: $(head -n 5 "$TMP/sp-$lvl.adv" | tr '\n' ';') $(tail -n 1 "$TMP/sp-$lvl.adv")"
    done
fi

# the shipped sample: made with SmolLM2 relabelled so that ids 0 and '!' swap
bang=$("$BANGTRACE" tokenize --model "$SMOL" '!')
adversary shipped "${BT_SRCDIR:-.}/traces/wall-of-bang.db" --swap "0:$bang"
finish
