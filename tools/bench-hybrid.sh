#!/bin/sh
# tools/bench-hybrid.sh - `make bench-hybrid`: bangtrace against llama.cpp
# (llama-bench of the pinned build, tools/llama-cpp, with its own defaults)
# on a random-weight qwen35 (gated delta net + gated attention hybrid) at the
# shapes of Qwen3.5's smallest dense model, Qwen3.5-0.8B (the shapes and
# their source: SHAPES in tools/make-tiny-hybrid.py), same GGUF and threads.
# Figures, never assertions.
#
# Models, made once into ${BT_CACHE:-~/.cache/bangtrace}/models: the f32 GGUF
# by tools/make-tiny-hybrid.py --shape qwen3.5-0.8b (random weights, the
# GPT-2 vocabulary padded with unreachable filler tokens to the real 248320
# rows), then Q8_0 and Q4_K_M from it with llama-quantize. The time each
# took is printed when this run makes it.
#
# Per type, in alternating rounds (a slow spell of a shared machine falls on
# every column), each round runs
#   bangtrace bench --taps all                  taps off, then every op tapped
#                                               (the recurrent states included)
#   bangtrace bench --taps all --no-state-taps  taps off, then every op but
#                                               ssm_state and ssm_conv_state
#   llama-bench                                 its defaults, -r 1
# and the table gives each figure's median over the rounds (taps off: over
# both bangtrace runs): prompt and decode tokens/s, the ratios taps all /
# llama-bench (the issue's goal: at least 1.00 for both) and taps off /
# llama-bench, and what the state taps cost (time per token with them over
# time per token without, minus one).
#
# Environment:
#   BENCH_TYPES   types (default "Q8_0 Q4_K_M"; F32 is the unquantized model)
#   BENCH_P, BENCH_N  prompt and decode tokens (default 128 and 64)
#   BENCH_ROUNDS  rounds per type (default 3)
#   THREADS       threads for both tools (default: nproc)
#   HYBRID_LAYERS, HYBRID_VOCAB  a reduced model of the same widths (fewer
#                 layers, a smaller vocabulary), for trying the pipeline
#                 quickly: its files and the table say so
#   LLAMA_REPACK  0: llama-bench --repack 0 (a peer without its fast path: label it)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-$(nproc 2>/dev/null || echo 2)}
P=${BENCH_P:-128}
N=${BENCH_N:-64}
types=${BENCH_TYPES:-Q8_0 Q4_K_M}
rounds=${BENCH_ROUNDS:-3}
shape=qwen3.5-0.8b
cache=${BT_CACHE:-$HOME/.cache/bangtrace}/models
export BT_SHARED=${BT_SHARED:-$(cd "$here/../.." && pwd)/shared}
. "$here/bench-lib.sh"
bench_llama_cpp bench-hybrid
mkdir -p "$cache"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

base=random-qwen35-$shape label="Qwen3.5-0.8B shapes" extra=
if [ -n "${HYBRID_LAYERS:-}${HYBRID_VOCAB:-}" ]; then
    base=$base-reduced${HYBRID_LAYERS:+-L$HYBRID_LAYERS}${HYBRID_VOCAB:+-V$HYBRID_VOCAB}
    label="REDUCED Qwen3.5-0.8B shapes (${HYBRID_LAYERS:+$HYBRID_LAYERS layers}${HYBRID_LAYERS:+${HYBRID_VOCAB:+, }}${HYBRID_VOCAB:+vocab $HYBRID_VOCAB}): not the real model's size"
    extra="${HYBRID_LAYERS:+--layers $HYBRID_LAYERS} ${HYBRID_VOCAB:+--n-vocab $HYBRID_VOCAB}"
fi
f32=$cache/$base-f32.gguf
if [ ! -f "$f32" ]; then
    t0=$(now)
    python3 "$here/make-tiny-hybrid.py" "$f32" --shape "$shape" $extra ||
        { echo "bench-hybrid: make-tiny-hybrid.py --shape $shape failed" >&2; exit 1; }
    echo "bench-hybrid: made $f32 ($(du -h "$f32" | cut -f1)) in $(since "$t0") s"
fi
model_for() {  # type -> the GGUF, quantized from the f32 one when missing
    case $1 in F32) echo "$f32"; return ;; esac
    m=$cache/$base-$(echo "$1" | tr 'A-Z' 'a-z').gguf
    t0=$(now)
    made=$(bench_quantize "$f32" "$m" "$1") || return 1
    [ -z "$made" ] || echo "bench-hybrid: llama-quantize $1: $m ($(du -h "$m" | cut -f1)) in $(since "$t0") s" >&2
    echo "$m"
}

echo "bench-hybrid: random-weight qwen35, $label; $threads threads, prompt $P, decode $N, median of $rounds alternating rounds; llama.cpp $lc_version${LLAMA_REPACK:+ (llama-bench --repack $LLAMA_REPACK)}"
printf '%-7s %-26s %10s %10s\n' type engine "prompt/s" "decode/s"
# bangtrace bench once (reps 1) with the given flags: "off_pp off_tg taps_pp taps_tg"
btbench() {  # model flags...
    _m=$1; shift
    "$B" bench --model "$_m" --threads "$threads" -p "$P" -n "$N" --reps 1 --json "$@" >"$tmp/bt.json" 2>"$tmp/bt.err" ||
        echo "bench-hybrid: bangtrace bench $*: failed: $(tail -1 "$tmp/bt.err")" >&2
    echo "$(jget "$tmp/bt.json" prompt_tokens_per_s) $(jget "$tmp/bt.json" decode_tokens_per_s)" \
         "$(jget "$tmp/bt.json" prompt_tokens_per_s_taps) $(jget "$tmp/bt.json" decode_tokens_per_s_taps)"
}
# the state taps' cost: time per token with them / without them - 1, in percent
cost() { python3 -c 'import sys
try: print("%+.1f%%" % (100 * (float(sys.argv[2]) / float(sys.argv[1]) - 1)))
except Exception: print("n/a")' "$1" "$2"; }
for t in $types; do
    m=$(model_for "$t") || { echo "bench-hybrid: $t: no model" >&2; continue; }
    opp= otg= app= atg= spp= stg= lpp= ltg=
    r=0
    while [ "$r" -lt "$rounds" ]; do
        r=$((r + 1))
        set -- $(btbench "$m" --taps all)
        opp="$opp $1" otg="$otg $2" app="$app $3" atg="$atg $4"
        set -- $(lbench "$m" 0)
        lpp="$lpp $1" ltg="$ltg $2"
        set -- $(btbench "$m" --taps all --no-state-taps)
        opp="$opp $1" otg="$otg $2" spp="$spp $3" stg="$stg $4"
    done
    opp=$(med $opp) otg=$(med $otg) app=$(med $app) atg=$(med $atg)
    spp=$(med $spp) stg=$(med $stg) lpp=$(med $lpp) ltg=$(med $ltg)
    printf '%-7s %-26s %10s %10s\n' "$t" "bangtrace, taps off" "$opp" "$otg"
    printf '%-7s %-26s %10s %10s\n' "" "bangtrace, taps all" "$app" "$atg"
    printf '%-7s %-26s %10s %10s\n' "" "bangtrace, all but states" "$spp" "$stg"
    printf '%-7s %-26s %10s %10s\n' "" "llama-bench (taps off)" "$lpp" "$ltg"
    printf '%-7s %-26s %10s %10s   (goal: >= 1.00)\n' "" "taps all / llama-bench" "$(ratio "$app" "$lpp")" "$(ratio "$atg" "$ltg")"
    printf '%-7s %-26s %10s %10s\n' "" "taps off / llama-bench" "$(ratio "$opp" "$lpp")" "$(ratio "$otg" "$ltg")"
    printf '%-7s %-26s %10s %10s   (time per token, states tapped vs not)\n' "" "state taps cost" \
        "$(cost "$app" "$spp")" "$(cost "$atg" "$stg")"
done
