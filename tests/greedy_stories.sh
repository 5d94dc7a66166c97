#!/bin/sh
# Greedy decode of stories260K from an empty prompt reproduces llama2.c's
# reference output byte for byte, and the reference token ids.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
expect_exit 0 "run stories260K greedy 200" \
    "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "" -n 200 --temp 0 --threads 2
printf '%s' "$(cat "$TMP/out")" > "$TMP/text"
if cmp -s "$TMP/text" "$MODELS/llama2c/stories260K.greedy200.expected.txt"; then ok "text matches byte for byte"
else fail "text differs from stories260K.greedy200.expected.txt: $(head -c 200 "$TMP/text")"; fi
expect_exit 0 "run --json" \
    "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "" -n 200 --json --threads 1
ids=$(sed -n 's/.*"prompt_ids": *\[\([0-9, ]*\)\].*"completion_ids": *\[\([0-9, ]*\)\].*/\1,\2/p' "$TMP/out" | tr -d ' ' | tr ',' ' ')
want=$(cat "$MODELS/llama2c/stories260K.greedy200.ids.txt" | tr -s ' \n' '  ' | sed 's/ *$//')
[ "$ids" = "$want" ] && ok "ids match stories260K.greedy200.ids.txt" || fail "ids differ: got '$ids'"
grep -q '"finish_reason": *"length"' "$TMP/out" && ok "finish_reason length" || fail "finish_reason not length: $(cat "$TMP/out" | head -c 300)"
finish
