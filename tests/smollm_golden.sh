#!/bin/sh
# Golden test: SmolLM2-135M Q4_1 greedy continuations of three prompts equal
# the ids recorded in tests/golden (which the numpy reference reproduced),
# with every SIMD variant the CPU has.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_smol
golden=$BT_SRCDIR/tests/golden/smollm2-q4_1.txt
grep -v '^#' "$golden" | while IFS='	' read -r prompt want; do
    for simd in scalar avx2 avx512; do
        BT_SIMD=$simd "$BANGTRACE" run --model "$SMOL" --prompt "$prompt" -n 32 --json --threads 2 > "$TMP/out" 2>"$TMP/err" ||
            { echo "FAIL: run '$prompt' ($simd): $(cat "$TMP/err")"; echo x >> "$TMP/failed"; continue; }
        got=$(sed -n 's/.*"completion_ids":\[\([0-9,]*\)\].*/\1/p' "$TMP/out" | tr ',' ' ')
        if [ "$got" = "$want" ]; then echo "ok: '$prompt' ($simd)"
        else echo "FAIL: '$prompt' ($simd): got $got"; echo x >> "$TMP/failed"; fi
    done
done
[ -f "$TMP/failed" ] && exit 1
exit 0
