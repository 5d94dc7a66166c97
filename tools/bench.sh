#!/bin/sh
# tools/bench.sh - `make bench`: prompt and decode tokens/s of the default
# model (SmolLM2-135M Q4_1) with taps off and on, plus the F32 and Q8_0
# variants of the same model when present in the cache (make them with
# tools/requant.py). Figures, never assertions.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-$(nproc 2>/dev/null || echo 2)}
cache=${BT_CACHE:-$HOME/.cache/bangtrace}/models
model=$("$here/fetch-model") || { echo "bench: the default model is not available" >&2; exit 1; }
echo "== $(basename "$model") (taps off vs all)"
"$B" bench --model "$model" --threads "$threads" --taps all
for v in smollm2-135m-q8_0.gguf smollm2-135m-f32.gguf; do
    if [ -f "$cache/$v" ]; then
        echo "== $v"
        "$B" bench --model "$cache/$v" --threads "$threads"
    else
        echo "== $v: not in $cache (python3 tools/requant.py $model $cache/$v q8_0|f32)"
    fi
done
