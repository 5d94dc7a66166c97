#!/bin/sh
# tools/bench-moe.sh - `make bench-moe`: bangtrace against llama.cpp
# (llama-bench of the pinned build, tools/llama-cpp, with its own defaults)
# on the two MoE families of issue 28 at realistic layer shapes, scaled down
# to fit this machine: a random-weight deepseek2 (MLA + fine-grained MoE,
# tools/make-tiny-deepseek2.py --shape bench: DeepSeek-V2-Lite's layout at
# half its width) and a random-weight gpt-oss with MXFP4 experts
# (tools/make-tiny-gptoss.py --shape bench --experts mxfp4: gpt-oss-20b's
# head layout at a quarter of its width, 16 experts, top 4). Same GGUF and
# threads for both tools. Figures, never assertions.
#
# Models, made once into ${BT_CACHE:-~/.cache/bangtrace}/models (the time
# each took is printed when this run makes it): the deepseek2 f32 GGUF, and
# Q8_0 from it with llama-quantize; the gpt-oss GGUF as the tool writes it
# (experts MXFP4 as gpt-oss ships them, the rest f32).
#
# Per model, in alternating rounds, each round runs
#   bangtrace bench --taps all     taps off, then every op tapped
#   llama-bench                    its defaults, -r 1
# and the table gives each figure's median over the rounds: prompt and
# decode tokens/s, taps all / llama-bench (the issue's goal: at least 1.00)
# and taps off / llama-bench; then bangtrace's weight bytes read per decoded
# token (the active experts only) and the bandwidth that makes at its decode
# rate against the machine's measured bandwidth.
#
# Environment:
#   BENCH_MODELS  which (default "deepseek2-q8_0 gptoss-mxfp4"; also deepseek2-f32)
#   BENCH_P, BENCH_N  prompt and decode tokens (default 128 and 64)
#   BENCH_ROUNDS  rounds per model (default 3)
#   THREADS       threads for both tools (default: nproc)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-$(nproc 2>/dev/null || echo 2)}
P=${BENCH_P:-128}
N=${BENCH_N:-64}
models=${BENCH_MODELS:-deepseek2-q8_0 gptoss-mxfp4}
rounds=${BENCH_ROUNDS:-3}
cache=${BT_CACHE:-$HOME/.cache/bangtrace}/models
export BT_SHARED=${BT_SHARED:-$(cd "$here/../.." && pwd)/shared}
. "$here/bench-lib.sh"
bench_llama_cpp bench-moe
mkdir -p "$cache"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
made() {  # file tool-args...: the model, made by the tool when missing
    _f=$1; shift
    [ -f "$_f" ] && return 0
    _t0=$(now)
    python3 "$@" "$_f" >/dev/null || { echo "bench-moe: $* failed" >&2; return 1; }
    echo "bench-moe: made $_f ($(du -h "$_f" | cut -f1)) in $(since "$_t0") s" >&2
}
model_for() {  # name -> the GGUF
    ds=$cache/random-deepseek2-bench-f32.gguf
    case $1 in
        deepseek2-f32) made "$ds" "$here/make-tiny-deepseek2.py" --shape bench && echo "$ds" ;;
        deepseek2-q8_0)
            made "$ds" "$here/make-tiny-deepseek2.py" --shape bench || return 1
            m=$cache/random-deepseek2-bench-q8_0.gguf t0=$(now)
            x=$(bench_quantize "$ds" "$m" Q8_0) || return 1
            [ -z "$x" ] || echo "bench-moe: llama-quantize Q8_0: $m ($(du -h "$m" | cut -f1)) in $(since "$t0") s" >&2
            echo "$m" ;;
        gptoss-mxfp4)
            m=$cache/random-gptoss-bench-mxfp4.gguf
            made "$m" "$here/make-tiny-gptoss.py" --shape bench --experts mxfp4 && echo "$m" ;;
        *) echo "bench-moe: unknown model $1 (deepseek2-f32, deepseek2-q8_0, gptoss-mxfp4)" >&2; return 1 ;;
    esac
}
echo "bench-moe: random-weight MoE models at scaled-down realistic shapes; $threads threads, prompt $P, decode $N, median of $rounds alternating rounds; llama.cpp $lc_version"
printf '%-15s %-24s %10s %10s\n' model engine "prompt/s" "decode/s"
btbench() {  # model: "off_pp off_tg taps_pp taps_tg bytes/token measured_bw"
    "$B" bench --model "$1" --threads "$threads" -p "$P" -n "$N" --reps 1 --json --taps all >"$tmp/bt.json" 2>"$tmp/bt.err" ||
        echo "bench-moe: bangtrace bench: failed: $(tail -1 "$tmp/bt.err")" >&2
    echo "$(jget "$tmp/bt.json" prompt_tokens_per_s) $(jget "$tmp/bt.json" decode_tokens_per_s)" \
         "$(jget "$tmp/bt.json" prompt_tokens_per_s_taps) $(jget "$tmp/bt.json" decode_tokens_per_s_taps)" \
         "$(jget "$tmp/bt.json" weight_bytes_per_token) $(jget "$tmp/bt.json" measured_bandwidth_gbs)"
}
for name in $models; do
    m=$(model_for "$name") || { echo "bench-moe: $name: no model" >&2; continue; }
    opp= otg= app= atg= lpp= ltg= wb= bw=
    r=0
    while [ "$r" -lt "$rounds" ]; do
        r=$((r + 1))
        set -- $(btbench "$m")
        opp="$opp $1" otg="$otg $2" app="$app $3" atg="$atg $4" wb=$5 bw="$bw $6"
        set -- $(lbench "$m" 0)
        lpp="$lpp $1" ltg="$ltg $2"
    done
    opp=$(med $opp) otg=$(med $otg) app=$(med $app) atg=$(med $atg) lpp=$(med $lpp) ltg=$(med $ltg) bw=$(med $bw)
    printf '%-15s %-24s %10s %10s\n' "$name" "bangtrace, taps off" "$opp" "$otg"
    printf '%-15s %-24s %10s %10s\n' "" "bangtrace, taps all" "$app" "$atg"
    printf '%-15s %-24s %10s %10s\n' "" "llama-bench (taps off)" "$lpp" "$ltg"
    printf '%-15s %-24s %10s %10s   (goal: >= 1.00)\n' "" "taps all / llama-bench" "$(ratio "$app" "$lpp")" "$(ratio "$atg" "$ltg")"
    printf '%-15s %-24s %10s %10s\n' "" "taps off / llama-bench" "$(ratio "$opp" "$lpp")" "$(ratio "$otg" "$ltg")"
    python3 -c 'import sys
wb, tg, bw = (float(x) if x != "n/a" else float("nan") for x in sys.argv[1:4])
print("%-15s %-24s weights read per decoded token %.0f MB (the active experts), %.1f GB/s at the taps-off decode rate, measured %.1f GB/s"
      % ("", "", wb / 1e6, wb * tg / 1e9, bw))' "$wb" "$otg" "$bw"
done
