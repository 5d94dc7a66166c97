#!/bin/sh
# tokenizer.json agreement with Hugging Face's `tokenizers` (the reference,
# used here only): tools/gguf-to-hf.py writes tokenizer.json files built
# from GGUF vocabularies (SmolLM2's own: Digits + ByteLevel; a Qwen2-style
# one over the gpt-2 vocabulary: NFC + Qwen2's Split regex + ByteLevel,
# merges as [a, b] lists; a Llama-3-style one with ignore_merges; plain
# GPT-2 ByteLevel), and every distinct case of the llama.cpp vocab-test
# inputs must tokenize to the same ids. SKIP when tokenizers, gguf or
# utf8proc (NFC) is unavailable.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
PYTHONPATH=${BT_CACHE:-$HOME/.cache/bangtrace}/py${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
"$PY" -c 'import tokenizers' 2>/dev/null || skip "the tokenizers Python package is not importable (./quickstart check installs it into ~/.cache/bangtrace/python)"
"$PY" -c 'import gguf, numpy' 2>/dev/null || skip "python3 cannot import gguf and numpy"
built_with UTF8PROC || skip "built without utf8proc: the Qwen2 tokenizer's NFC normalizer is refused"
CONV="$BT_SRCDIR/tools/gguf-to-hf.py"
VOCABS=$MODELS/gguf-vocab
GPT2=$VOCABS/ggml-vocab-gpt-2.gguf

build() {   # name gguf [converter flags]
    n=$1; g=$2; shift 2
    "$PY" "$CONV" "$g" "$TMP/$n" --vocab-only "$@" > "$TMP/conv.log" 2>&1 || { fail "$n: gguf-to-hf.py: $(tail -1 "$TMP/conv.log")"; return 1; }
}
check() {
    "$PY" "$BT_SRCDIR/tests/hf_tokenizers_ref.py" "$BANGTRACE" "$TMP/$1" "$VOCABS"/*.inp > "$TMP/agree.log" 2>&1
    rc=$?
    cat "$TMP/agree.log"
    [ $rc -eq 0 ] && ok "$1: 100% agreement" || fail "$1: tokenizers and bangtrace disagree"
}

if [ -f "$SMOL" ]; then
    build smollm2 "$SMOL" && check smollm2
else
    echo "note: $SMOL not cached; SmolLM2 tokenizer.json skipped"
fi
build qwen2-style "$GPT2" --pre qwen2 --merges-form list && check qwen2-style
build llama3-style "$GPT2" --pre llama-bpe && check llama3-style
build gpt2 "$GPT2" && check gpt2

# NFC is applied: a decomposed "A + combining ring" encodes as composed "Å" would.
printf 'A\314\212ngstr\303\266m' > "$TMP/nfd"
printf '\303\205ngstr\303\266m' > "$TMP/nfc"
a=$("$BANGTRACE" tokenize --model "$TMP/qwen2-style" --file "$TMP/nfd" 2>&1)
b=$("$BANGTRACE" tokenize --model "$TMP/qwen2-style" --file "$TMP/nfc" 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "NFC: decomposed input tokenizes as composed ($a)" || fail "NFC: '$a' vs '$b'"
finish
