#!/bin/sh
# Hugging Face folders of every mapped architecture (tests/hf_make_arch.py:
# tiny random llama with Llama 3 rope scaling, mistral, qwen2 with biases,
# qwen3 with q/k norms, qwen3moe with experts; F32 and BF16) become the GGUF
# llama.cpp's converter would write: tensor names and shapes, keys,
# rope_freqs values, q/k permutation (tests/hf_check_tool.c). inspect shows
# each folder (falling back to the file's contents where the model builder
# does not run the architecture yet) and scans its weights.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
"$PY" -c 'import numpy' 2>/dev/null || skip "python3 cannot import numpy"
TOOL=${BT_BUILDDIR:-.}/tests/hf_check_tool
"$PY" "$BT_SRCDIR/tests/hf_make_arch.py" "$TMP/arch" || { fail "hf_make_arch.py failed"; finish; }
for a in llama3 mistral qwen2 qwen3 qwen3moe; do
    "$TOOL" "$TMP/arch/$a" "$TMP/arch/$a.expect.json" > "$TMP/out" 2>&1
    rc=$?
    cat "$TMP/out"
    [ $rc -eq 0 ] && ok "$a: converter's names, shapes, keys" || fail "$a: hf_check_tool exit $rc"
    "$BANGTRACE" inspect --model "$TMP/arch/$a" > "$TMP/out" 2> "$TMP/err"
    rc=$?
    [ $rc -eq 0 ] && grep -q '^format: *hf' "$TMP/out" && grep -q 'clean: no NaN/Inf' "$TMP/out" \
        && ok "$a: inspect ($(grep -c . "$TMP/err") warning line(s))" || fail "$a: inspect exit $rc: $(cat "$TMP/err")"
done
finish
