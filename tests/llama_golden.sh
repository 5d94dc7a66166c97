#!/usr/bin/env bash
# llama_golden.sh - greedy continuations of stories260K under the llama.cpp
# presets equal llama.cpp's own, from tests/golden/llama.cpp-stories260K*.txt
# (one "PROMPT<TAB>IDS" line per prompt, made by tools/llama-golden: the
# header names llama.cpp's settings and the preset that must reproduce them):
#   llama.cpp-stories260K.txt       llama.cpp's default (flash attention on,
#                                   f16 cache) under --numerics llama.cpp-cpu
#   llama.cpp-stories260K-nofa.txt  flash attention off (run --engine llama.cpp
#                                   --llama-flash-attn off) under --numerics
#                                   llama.cpp-cpu-nofa
# Each file must also tell the presets from exact f32: the f32 engine has to
# miss at least one of its lines, or the reference proves nothing. Where
# bangtrace is built with llama.cpp, `run --engine llama.cpp` (flash
# attention as the file says: --llama-flash-attn; nothing for auto, its
# default) must give the same ids.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
GGUF=
if built_with LLAMA_CPP && ${PYTHON3:-python3} -c "import gguf, numpy" 2>/dev/null; then
    GGUF=$TMP/stories260K.gguf
    ${PYTHON3:-python3} "${BT_SRCDIR:-.}/tools/llama2c-to-gguf.py" "$STORIES" "$TOK512" "$GGUF" >/dev/null || { fail "llama2c-to-gguf"; GGUF=; }
fi
if [ -n "$GGUF" ]; then
    BT_LLAMA_FLASH_ATTN=maybe expect_exit 2 "BT_LLAMA_FLASH_ATTN=maybe is refused" "$BANGTRACE" run --engine llama.cpp --model "$GGUF" \
        --prompt x -n 1 && { grep -q "BT_LLAMA_FLASH_ATTN='maybe'" "$TMP/err" && ok "names the variable" || fail "$(cat "$TMP/err")"; }
fi
ids_of() { ${PYTHON3:-python3} -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["completion_ids"])))' "$1"; }
for GOLD in "${BT_SRCDIR:-.}"/tests/golden/llama.cpp-stories260K.txt "${BT_SRCDIR:-.}"/tests/golden/llama.cpp-stories260K-nofa.txt; do
    [ -f "$GOLD" ] || { fail "missing $GOLD"; continue; }
    preset=$(sed -n 's/^# preset: //p' "$GOLD")
    fa=$(sed -n 's/^# flash-attn: //p' "$GOLD")
    [ -n "$preset" ] || { fail "$GOLD names no preset"; continue; }
    f32_misses=0
    while IFS=$'\t' read -r prompt ids; do
        case $prompt in '#'*|'') continue ;; esac
        n=$(echo "$ids" | wc -w)
        expect_exit 0 "run --numerics $preset: $prompt" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" \
            --prompt "$prompt" -n "$n" --threads 1 --numerics "$preset" --json || continue
        got=$(ids_of "$TMP/out")
        [ "$got" = "$ids" ] && ok "$preset matches llama.cpp: $prompt" || fail "$preset, '$prompt': llama.cpp $ids, bangtrace $got"
        "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "$prompt" -n "$n" --threads 1 --json \
            > "$TMP/f32.json" 2>/dev/null || { fail "f32 run: $prompt"; continue; }
        [ "$(ids_of "$TMP/f32.json")" = "$ids" ] || f32_misses=$((f32_misses + 1))
        if [ -n "$GGUF" ]; then
            fl=(); [ "$fa" = auto ] || fl=(--llama-flash-attn "$fa")
            "$BANGTRACE" run --engine llama.cpp "${fl[@]}" --model "$GGUF" --prompt "$prompt" -n "$n" --threads 1 --json \
                > "$TMP/ll.json" 2>"$TMP/ll.err" || { fail "run --engine llama.cpp: $prompt: $(cat "$TMP/ll.err")"; continue; }
            got=$(ids_of "$TMP/ll.json")
            [ "${got:0:${#ids}}" = "$ids" ] && ok "run --engine llama.cpp (flash attention $fa) gives the reference: $prompt" \
                || fail "run --engine llama.cpp (flash attention $fa), '$prompt': $got, reference $ids"
        fi
    done < "$GOLD"
    [ "$f32_misses" -gt 0 ] && ok "$(basename "$GOLD"): exact f32 misses $f32_misses line(s), $preset none" \
        || fail "$(basename "$GOLD"): exact f32 reproduces every line: the reference does not tell $preset from f32"
done
[ "$failures" -eq 0 ]
