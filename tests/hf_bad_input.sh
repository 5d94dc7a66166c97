#!/bin/sh
# Damaged Hugging Face folders (tests/hf_make_bad.py): every damage to the
# safetensors header (truncation, absurd sizes, bad JSON, duplicate names,
# overlapping / out-of-file / gapped offsets, dtype-shape mismatch), to
# config.json (unknown architecture, unsupported rope scaling, wrong types),
# to the shard index and to tokenizer.json (unknown normalizer,
# pre-tokenizer, decoder, model, split behavior, bad regex or merges) is one
# stderr line naming the problem and exit 2, for inspect and run alike; the
# undamaged folder loads.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
"$PY" -c 'import numpy' 2>/dev/null || skip "python3 cannot import numpy"
tokdir=
if "$PY" -c 'import gguf' 2>/dev/null; then
    "$PY" "$BT_SRCDIR/tools/gguf-to-hf.py" "$MODELS/gguf-vocab/ggml-vocab-gpt-2.gguf" "$TMP/tok" --vocab-only >/dev/null 2>&1 && tokdir=$TMP/tok
fi
[ -n "$tokdir" ] || echo "note: gguf package missing: tokenizer.json cases skipped"
"$PY" "$BT_SRCDIR/tests/hf_make_bad.py" "$TMP/bad" $tokdir || { fail "hf_make_bad.py failed"; finish; }

expect_exit 0 "inspect the undamaged folder" "$BANGTRACE" inspect --model "$TMP/bad/good"
n=0
while IFS="$(printf '\t')" read -r name want; do
    n=$((n + 1))
    "$BANGTRACE" inspect --model "$TMP/bad/$name" > "$TMP/out" 2> "$TMP/err"
    rc=$?
    lines=$(wc -l < "$TMP/err")
    if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$TMP/err"; then
        fail "$name: want exit 2 and one line with '$want'; got exit $rc: $(cat "$TMP/err")"
    else
        ok "$name: $(cat "$TMP/err")"
    fi
done < "$TMP/bad/cases.tsv"
[ "$n" -ge 25 ] || fail "only $n damaged folders"
# run refuses the same way (one sample)
expect_exit 2 "run on a truncated safetensors" "$BANGTRACE" run --model "$TMP/bad/st-truncated" --prompt hi -n 1
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "run: more than one stderr line: $(cat "$TMP/err")"
finish
