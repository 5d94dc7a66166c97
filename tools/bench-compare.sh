#!/bin/sh
# tools/bench-compare.sh - `make bench-compare`: bangtrace against llama.cpp
# (llama-bench from the pinned build, tools/llama-cpp) on the same GGUF and
# threads, for F32, Q8_0, Q4_0, Q4_1 and K-quants of SmolLM2-135M (F32 made
# with tools/requant.py from the cached Q4_1, the rest with llama-quantize
# from that F32). One run each. Prints prompt and decode tokens/s:
#   native        bangtrace bench, taps off / taps all
#   llama.cpp     llama-bench (no taps)
#   llama.cpp+bt  llama.cpp's engine inside bangtrace, taps off / taps all
# and the ratios native / llama-bench: each type is one `bangtrace bench
# --against llama.cpp` (doc/llama-cpp.md). llama.cpp runs without its extra
# buffer types (AMX, repacked weights) in both, as run --engine llama.cpp
# does (BT_LLAMA_EXTRA_BUFTS=1 turns them on). Figures, never assertions.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-$(nproc 2>/dev/null || echo 2)}
P=${BENCH_P:-64}
N=${BENCH_N:-32}
cache=${BT_CACHE:-$HOME/.cache/bangtrace}/models
lc=$("$here/llama-cpp") || { echo "bench-compare: no llama.cpp build (tools/llama-cpp failed)" >&2; exit 1; }
want=$(grep -v '^#' "$here/llama-cpp.sha256" | awk '{print $2; exit}')
got=$(sed -n 's/^version=//p' "$lc/build-info.txt")
[ "$got" = "$want" ] || { echo "bench-compare: $lc is llama.cpp $got, bangtrace pins $want: version mismatch" >&2; exit 2; }
export BT_LLAMA_CPP_DIR="$lc"    # bench --against runs this build's llama-bench
src=$("$here/fetch-model") || { echo "bench-compare: the default model is not available" >&2; exit 1; }
f32=$cache/smollm2-135m-f32.gguf
[ -f "$f32" ] || python3 "$here/requant.py" "$src" "$f32" f32 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
jget() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d.get(k) if isinstance(d,dict) else None
print("%.2f" % d if isinstance(d,float) and d < 10 else "%.1f" % d if isinstance(d,(int,float)) else "n/a")' "$@"; }
printf '%-8s %-14s %9s %9s %9s\n' type engine "prompt/s" "decode/s" "taps/s"
for t in F32 Q8_0 Q4_0 Q4_1 Q4_K_M Q5_K_M Q6_K; do
    m=$cache/smollm2-135m-$(echo "$t" | tr 'A-Z' 'a-z').gguf
    if [ "$t" != F32 ] && [ ! -f "$m" ]; then
        "$lc/bin/llama-quantize" "$f32" "$m" "$t" "$threads" >"$tmp/q.log" 2>&1 || { echo "$t: llama-quantize failed" >&2; continue; }
    fi
    # one run of both engines, taps off and on (bangtrace bench --against llama.cpp)
    "$B" bench --against llama.cpp --model "$m" --threads "$threads" -p "$P" -n "$N" --reps 1 --taps all --json \
        >"$tmp/bt.json" 2>"$tmp/bt.err" || { echo "$t: $(tail -n 1 "$tmp/bt.err")" >&2; continue; }
    j=$tmp/bt.json
    printf '%-8s %-14s %9s %9s %9s\n' "$t" native "$(jget "$j" prompt_tokens_per_s)" "$(jget "$j" decode_tokens_per_s)" \
        "$(jget "$j" decode_tokens_per_s_taps)"
    printf '%-8s %-14s %9s %9s %9s\n' "" llama-bench "$(jget "$j" against llama_bench_prompt_tokens_per_s)" \
        "$(jget "$j" against llama_bench_decode_tokens_per_s)" -
    printf '%-8s %-14s %9s %9s %9s\n' "" "llama.cpp+bt" "$(jget "$j" against engine_prompt_tokens_per_s)" \
        "$(jget "$j" against engine_decode_tokens_per_s)" "$(jget "$j" against engine_decode_tokens_per_s_taps)"
    printf '%-8s %-14s %9s %9s\n' "" "native/llama" "$(jget "$j" against ratio_prompt)" "$(jget "$j" against ratio_decode)"
done
