#!/usr/bin/env bash
# llama_golden.sh - greedy continuations of stories260K under
# --numerics llama.cpp-cpu equal llama.cpp's own (default f16 KV cache,
# flash attention auto -> on), from tests/golden/llama.cpp-stories260K.txt:
# one "PROMPT<TAB>IDS" line per prompt, produced by llama.cpp built by
# tools/llama-cpp (the command is in the file's header). SKIPs until those
# references are committed.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
GOLD=${BT_SRCDIR:-.}/tests/golden/llama.cpp-stories260K.txt
[ -f "$GOLD" ] || skip "no llama.cpp references yet ($GOLD): doc/numerics.md says what llama-cpu emulates"
while IFS=$'\t' read -r prompt ids; do
    case $prompt in '#'*|'') continue ;; esac
    n=$(echo "$ids" | wc -w)
    expect_exit 0 "run --numerics llama.cpp-cpu: $prompt" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" \
        --prompt "$prompt" -n "$n" --threads 1 --numerics llama.cpp-cpu --json || continue
    got=$(${PYTHON3:-python3} -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["completion_ids"])))' "$TMP/out")
    [ "$got" = "$ids" ] && ok "matches llama.cpp: $prompt" || fail "'$prompt': llama.cpp $ids, bangtrace $got"
done < "$GOLD"
[ "$failures" -eq 0 ]
