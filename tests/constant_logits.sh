#!/bin/sh
# A finite logit row whose values are all equal (a head that was never
# loaded, a norm that collapsed to zero): no token is preferred and every
# argmax rule takes id 0, the incident's wall of id 0 without a NaN in
# sight. A copy of the shared tiny llama with output_norm scaled by 0
# (tools/model-edit) makes every logit 0: the trace gets a constant_logits
# event at step 0, the row kept as reason "constant", and bisect names it as
# the first degenerate output (exit 1) with the explanation that the first
# of tied tokens won; the healthy model records none (tests/trace_run.sh
# checks that clean runs have no events at all).
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
py=${PYTHON3:-python3}
command -v sqlite3 >/dev/null || skip "sqlite3 CLI not installed"
M=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
[ -f "$M" ] || skip "$M is missing"
BANGTRACE=$BANGTRACE "$py" "$BT_SRCDIR/tools/model-edit" scale "$M" "$TMP/zero.gguf" --tensor output_norm.weight --factor 0 \
    >"$TMP/edit.log" 2>&1 || fail "model-edit scale: $(tail -1 "$TMP/edit.log")"
expect_exit 0 "run on the zeroed norm" "$BANGTRACE" run --model "$TMP/zero.gguf" --prompt "Once upon a time" -n 8 \
    --trace "$TMP/z.db"
ev=$(sqlite3 "$TMP/z.db" "select step || '|' || detail from events where kind = 'constant_logits'")
echo "$ev" | grep -q "^0|step 0: every logit is 0 (32000 of 32000): no token is preferred; rule first -> id 0 " \
    && [ "$(echo "$ev" | wc -l)" = 1 ] && ok "constant_logits at step 0, once: $(echo "$ev" | cut -c1-90)" \
    || fail "constant_logits events: '$ev'"
# kept as "constant"; the token wall starting there keeps the same row as "collapse"
case "$(sqlite3 "$TMP/z.db" "select step || ' ' || reason from logit_rows")" in
    "0 constant"|"0 collapse") ok "the constant row of step 0 is kept" ;;
    *) fail "logit_rows: $(sqlite3 "$TMP/z.db" "select step, reason from logit_rows")" ;;
esac
expect_exit 1 "bisect on constant logits" "$BANGTRACE" bisect "$TMP/z.db"
grep -q "^first degenerate output: step 0 (constant_logits)" "$TMP/out" \
    && grep -q "^explanation: step 0: logits finite and all equal (every token ties; the first wins); argmax first -> id 0 .*repeated 8 times" "$TMP/out" \
    && ok "bisect: the first degenerate output is the constant row, the first of the tied tokens won" \
    || fail "bisect: $(cat "$TMP/out")"
expect_exit 0 "the healthy model" "$BANGTRACE" run --model "$M" --prompt "Once upon a time" -n 8 --trace "$TMP/h.db"
[ "$(sqlite3 "$TMP/h.db" "select count(*) from events where kind = 'constant_logits'")" = 0 ] \
    && ok "the healthy model: no constant_logits" || fail "constant_logits on the healthy model"
finish
