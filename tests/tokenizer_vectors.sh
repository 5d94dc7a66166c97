#!/bin/sh
# `bangtrace tokenize` end to end: llama.cpp's tokenizer vectors through the
# real binary (every case, every vocab; each mismatch is reported), --decode
# of the stories260K reference ids, llama2.c and SmolLM2 (chat markup with
# --parse-special) encodings, an unknown pre-tokenizer, and flag errors.
. "${BT_SRCDIR:-.}/tests/lib.sh"

one_line_err() {   # the last command's stderr is exactly one line naming $1
    n=$(wc -l < "$TMP/err")
    if [ "$n" -ne 1 ] || ! grep -q -- "$1" "$TMP/err"; then
        fail "expected one stderr line mentioning '$1', got: $(cat "$TMP/err")"
    fi
}

expect_exit 0 "tokenize --help" "$BANGTRACE" tokenize --help && grep -q '^usage: bangtrace tokenize' "$TMP/out" || fail "no usage line"
expect_exit 2 "tokenize: unknown flag" "$BANGTRACE" tokenize --model x --frob hi && one_line_err -- --frob
expect_exit 2 "tokenize: no model" "$BANGTRACE" tokenize hi && one_line_err -- --model
expect_exit 2 "tokenize: no input" "$BANGTRACE" tokenize --model x && one_line_err TEXT
expect_exit 2 "tokenize: --file without value" "$BANGTRACE" tokenize --model x --file && one_line_err -- --file
expect_exit 2 "tokenize: missing model file" "$BANGTRACE" tokenize --model "$TMP/none.gguf" hi && one_line_err none.gguf

need_shared
VOCABS=$MODELS/gguf-vocab
L2C="--model $STORIES --tokenizer $TOK512"

# llama.cpp vectors: split each .inp at "\n__ggml_vocab_test__\n" (the file
# ends with one) and compare each case's ids with its .out line.
if ! printf 'a\nSEP\nb\nSEP\n' | LC_ALL=C awk 'BEGIN { RS = "\nSEP\n" } END { exit NR != 2 }'; then
    fail "this awk cannot split on a multi-character record separator"
else
    for v in llama-spm gpt-2 falcon deepseek-coder; do
        g=$VOCABS/ggml-vocab-$v.gguf
        rm -rf "$TMP/cases"; mkdir "$TMP/cases"
        LC_ALL=C awk -v dir="$TMP/cases" 'BEGIN { RS = "\n__ggml_vocab_test__\n" }
            { f = sprintf("%s/%03d", dir, NR); printf "%s", $0 > f; close(f) }' "$g.inp"
        n=0; bad=0
        for c in "$TMP"/cases/*; do
            n=$((n + 1))
            want=$(sed -n "${n}p" "$g.out" | sed 's/^ *//; s/ *$//')
            got=$("$BANGTRACE" tokenize --model "$g" --file "$c" 2>&1)
            if [ "$got" != "$want" ]; then
                bad=$((bad + 1))
                fail "$v case $n ($(head -c 60 "$c" | tr '\n' '|')): want '$want', got '$got'"
            fi
        done
        [ "$n" -eq 46 ] || fail "$v: split $n cases, expected 46"
        [ "$bad" -eq 0 ] && ok "$v: $n/$n vectors match"
    done
fi

# --decode of the stories260K reference ids (BOS first) gives llama2.c's text.
expect_exit 0 "decode stories260K ids" "$BANGTRACE" tokenize $L2C --decode "$(cat "$MODELS/llama2c/stories260K.greedy200.ids.txt")"
{ cat "$MODELS/llama2c/stories260K.greedy200.expected.txt"; echo; } > "$TMP/want"
cmp -s "$TMP/out" "$TMP/want" && ok "decoded text matches byte for byte" \
    || fail "decoded text differs: $(head -c 200 "$TMP/out")"

# llama2.c's encode("Once upon a time") = " Once" " upon" " a" " time"
expect_exit 0 "llama2.c encode" "$BANGTRACE" tokenize $L2C "Once upon a time"
[ "$(cat "$TMP/out")" = "403 407 261 378" ] && ok "llama2.c ids" || fail "llama2.c ids: $(cat "$TMP/out")"
expect_exit 0 "llama2.c encode with BOS" "$BANGTRACE" tokenize $L2C --add-special "Once upon a time"
[ "$(cat "$TMP/out")" = "1 403 407 261 378" ] && ok "BOS added" || fail "with BOS: $(cat "$TMP/out")"
text='Lily said: "Hello, world!"  Then she ran. caf'"$(printf '\303\251')"
expect_exit 0 "llama2.c encode for round trip" "$BANGTRACE" tokenize $L2C "$text"
expect_exit 0 "llama2.c decode" "$BANGTRACE" tokenize $L2C --decode "$(cat "$TMP/out")"
[ "$(cat "$TMP/out")" = "$text" ] && ok "llama2.c round trip" || fail "round trip gave '$(cat "$TMP/out")'"
expect_exit 2 "llama2.c checkpoint without tokenizer" "$BANGTRACE" tokenize --model "$STORIES" hi && one_line_err -- --tokenizer
expect_exit 2 "decode: not an id" "$BANGTRACE" tokenize $L2C --decode "1 2 x3" && one_line_err x3
expect_exit 2 "decode: id out of range" "$BANGTRACE" tokenize $L2C --decode "1 512" && one_line_err 512

# An unknown pre-tokenizer is an error naming it, never silently wrong ids.
if "${PYTHON3:-python3}" -c 'import gguf' 2>/dev/null; then
    "${PYTHON3:-python3}" - "$TMP/pre.gguf" <<'EOF'
import sys, gguf
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("frobnicator-9000")
w.add_token_list(["a", "b", "ab"])
w.add_token_types([1, 1, 1])
w.add_token_merges(["a b"])
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
EOF
    expect_exit 2 "unknown pre-tokenizer" "$BANGTRACE" tokenize --model "$TMP/pre.gguf" ab && one_line_err frobnicator-9000
else
    echo "skipped: unknown pre-tokenizer GGUF (python gguf package missing; test_tokenizer covers it)"
fi

# SmolLM2: exact round trip and chat markup with --parse-special.
if [ -f "$SMOL" ]; then
    text='Hello, SmolLM2!  Numbers 12345 and code: x->y[3] /* ok */'
    expect_exit 0 "smollm encode" "$BANGTRACE" tokenize --model "$SMOL" "$text"
    expect_exit 0 "smollm decode" "$BANGTRACE" tokenize --model "$SMOL" --decode "$(cat "$TMP/out")"
    [ "$(cat "$TMP/out")" = "$text" ] && ok "smollm round trip" || fail "smollm round trip gave '$(cat "$TMP/out")'"
    chat=$(printf '<|im_start|>user\nHi<|im_end|>\n_'); chat=${chat%_}
    expect_exit 0 "smollm <|im_start|> id" "$BANGTRACE" tokenize --model "$SMOL" --parse-special '<|im_start|>'
    start=$(cat "$TMP/out")
    expect_exit 0 "smollm <|im_end|> id" "$BANGTRACE" tokenize --model "$SMOL" --parse-special '<|im_end|>'
    end=$(cat "$TMP/out")
    expect_exit 0 "smollm chat --parse-special" "$BANGTRACE" tokenize --model "$SMOL" --parse-special "$chat"
    got=$(cat "$TMP/out")
    case "$start" in *" "*|"") fail "<|im_start|> is not one id: '$start'";; esac
    case " $got " in
        " $start "*" $end "*) ok "chat markup maps to special ids $start, $end ($got)";;
        *) fail "chat markup ids '$got' do not start with $start and contain $end";;
    esac
    expect_exit 0 "smollm chat without --parse-special" "$BANGTRACE" tokenize --model "$SMOL" "$chat"
    case " $(cat "$TMP/out") " in
        *" $start "*|*" $end "*) fail "special ids without --parse-special: $(cat "$TMP/out")";;
        *) ok "without --parse-special the markup is plain text";;
    esac
    expect_exit 0 "smollm decode chat ids" "$BANGTRACE" tokenize --model "$SMOL" --decode "$got"
    printf '%s\n' "$chat" > "$TMP/want"
    cmp -s "$TMP/out" "$TMP/want" && ok "special ids decode to their text" || fail "decoded: $(cat "$TMP/out")"
else
    echo "skipped: SmolLM2 checks ($SMOL not cached)"
fi
finish
