#!/bin/sh
# A GGUF that llama.cpp writes and loads must load: llama.cpp's converter
# stores tokenizer.ggml.padding_token_id = 4294967295 (uint32 -1) for "no
# padding token". Like llama.cpp, bangtrace ignores a special id outside
# the vocabulary with a one-line warning (inspect and run work, exit 0); an
# id inside the vocabulary is used as before.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
"$PY" -c 'import gguf, numpy' 2>/dev/null || skip "python3 with the gguf and numpy packages is needed to write the model"
GEN="$BT_SRCDIR/tests/oracle/make_random_gguf.py"

"$PY" "$GEN" "$TMP/pad.gguf" --special-id padding=4294967295 || { fail "make_random_gguf.py"; finish; }
expect_exit 0 "inspect a GGUF with padding_token_id = 4294967295" "$BANGTRACE" inspect "$TMP/pad.gguf"
[ "$(grep -c . "$TMP/err")" = 1 ] && grep -q "^bangtrace: warning: .*tokenizer.ggml.padding_token_id = 4294967295 is outside the vocabulary (320 tokens); ignored" "$TMP/err" \
    && ok "inspect: one warning line naming padding_token_id" || fail "inspect stderr: $(cat "$TMP/err")"
grep -q 'bos 1 "<s>", eos 2 "</s>"' "$TMP/out" && ok "bos and eos unaffected" || fail "inspect vocabulary: $(grep 'bos' "$TMP/out")"
expect_exit 0 "run on it" "$BANGTRACE" run --model "$TMP/pad.gguf" --prompt "the dog" -n 4 --threads 1
[ "$(grep -c 'warning: .*padding_token_id' "$TMP/err")" = 1 ] && ok "run: the warning once" || fail "run stderr: $(cat "$TMP/err")"
[ -s "$TMP/out" ] && ok "run printed a completion" || fail "run printed nothing"

# Every optional id is treated alike; the values llama.cpp's converters write for "none".
"$PY" "$GEN" "$TMP/many.gguf" --special-id padding=4294967295 --special-id eot=320 --special-id unknown=70000 || { fail "make_random_gguf.py"; finish; }
expect_exit 0 "inspect with pad, eot and unk out of range" "$BANGTRACE" inspect "$TMP/many.gguf"
[ "$(grep -c 'warning: .*is outside the vocabulary' "$TMP/err")" = 3 ] && ok "three warnings" || fail "stderr: $(cat "$TMP/err")"
for k in padding eot unknown; do
    grep -q "tokenizer.ggml.${k}_token_id = [0-9]* is outside" "$TMP/err" && ok "$k named" || fail "$k not named: $(cat "$TMP/err")"
done
expect_exit 0 "tokenize on it" "$BANGTRACE" tokenize --model "$TMP/many.gguf" "the dog"

# An in-range padding id is still taken, silently.
"$PY" "$GEN" "$TMP/ok.gguf" --special-id padding=0 || { fail "make_random_gguf.py"; finish; }
expect_exit 0 "inspect with padding_token_id = 0" "$BANGTRACE" inspect "$TMP/ok.gguf"
[ ! -s "$TMP/err" ] && ok "no warning for an id inside the vocabulary" || fail "stderr: $(cat "$TMP/err")"
finish
