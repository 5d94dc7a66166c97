#!/bin/sh
# tools/bench-compare.sh - `make bench-compare`: bangtrace against llama.cpp
# (llama-bench from the pinned build, tools/llama-cpp) on the same GGUF and
# threads, every weight type of issue 15, at several context depths.
# Figures, never assertions.
#
# Models: SmolLM2-135M. F32 from the cached Q4_1 with tools/requant.py; F16,
# BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the mixes Q4_K_M, Q5_K_M with
# llama-quantize from that F32; the pure K types Q2_K .. Q6_K with
# llama-quantize --pure (note: SmolLM2's 576-wide rows are not whole 256
# blocks, so llama-quantize stores those tensors in a fallback type even
# with --pure; the ffn_down and embedding rows are the K type).
#
# Per type and depth it prints prompt and decode tokens/s of
#   native        bangtrace bench (-d DEPTH), taps off and taps all recorded
#   llama-bench   llama-bench -d DEPTH (no taps)
#   ik_llama      ik_llama.cpp's llama-bench with its defaults, and with
#   ik -rtr 1     -rtr 1 (run-time repacking), when a build is present
#                 (tools/ik-llama-cpp SRC, or IK_LLAMA_BENCH=path); depth 0
#                 only, its llama-bench has no -d
#   llama.cpp+bt  bangtrace run --engine llama.cpp, taps off / all (depth 0
#                 only; BENCH_ADAPTER=0 skips it)
# and the ratios native / llama-bench: prompt, decode taps off, and decode
# with taps all against llama-bench's taps-off decode; with ik, the same
# against the better of ik's two figures (issue 30's goal).
# The header gives the machine's memory bandwidth: bangtrace's read probe
# on the same threads and a STREAM-like triad (a = b + s*c, numpy).
#
# Environment (subsets, since the whole table takes long):
#   BENCH_TYPES   types to run (default: all fifteen, e.g. "Q4_0 Q4_K_M")
#   BENCH_DEPTHS  context depths (default "0 1024 2048 4096")
#   BENCH_P, BENCH_N  prompt and decode tokens (default 128 and 64)
#   THREADS       threads for both tools (default: nproc)
#   BENCH_ADAPTER 0: skip the run --engine llama.cpp rows
#   BENCH_ROUNDS  rounds per type and depth (default 3): each round runs
#                 bangtrace bench then llama-bench once; the table gives
#                 each figure's median over the rounds
# llama-bench runs with its own defaults (repacked weights, flash attention
# auto), as run --engine llama.cpp now does; LLAMA_REPACK=0 runs it with
# --repack 0 instead (label such figures: a peer without its fast path).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-$(nproc 2>/dev/null || echo 2)}
P=${BENCH_P:-128}
N=${BENCH_N:-64}
types=${BENCH_TYPES:-F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q4_K_M Q5_K_M}
depths=${BENCH_DEPTHS:-0 1024 2048 4096}
adapter=${BENCH_ADAPTER:-1}
rounds=${BENCH_ROUNDS:-3}
cache=${BT_CACHE:-$HOME/.cache/bangtrace}/models
. "$here/bench-lib.sh"
bench_llama_cpp bench-compare
got=$lc_version
bench_ik bench-compare
src=$("$here/fetch-model") || { echo "bench-compare: the default model is not available" >&2; exit 1; }
f32=$cache/smollm2-135m-f32.gguf
[ -f "$f32" ] || python3 "$here/requant.py" "$src" "$f32" f32 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The model file for a type: the cached one, else made with llama-quantize.
model_for() {
    t=$1 lower=$(echo "$1" | tr 'A-Z' 'a-z') pure=
    case $t in
        F32) echo "$f32"; return ;;
        Q2_K|Q3_K|Q4_K|Q5_K|Q6_K) pure=--pure lower=$lower-pure ;;
    esac
    m=$cache/smollm2-135m-$lower.gguf
    bench_quantize "$f32" "$m" "$t" $pure >/dev/null || { echo "bench-compare: $t: could not make $m" >&2; return 1; }
    echo "$m"
}

triad=$(python3 -c 'import time
try:
    import numpy as np
except Exception:
    print("n/a"); raise SystemExit
n=1<<25; b=np.ones(n); c=np.ones(n); a=np.empty(n); best=0
for _ in range(4):
    t=time.perf_counter(); np.multiply(c,3.0,out=a); np.add(a,b,out=a); dt=time.perf_counter()-t
    best=max(best, 4*8*n/dt/1e9)   # multiply: read c, write a; add: read a, b, write a
print("%.1f" % best)' 2>/dev/null || echo n/a)
echo "bench-compare: $threads threads, prompt $P, decode $N, depths $depths, median of $rounds alternating rounds; llama.cpp $got"
if [ -n "$ik" ]; then echo "ik_llama.cpp: $ik (its defaults, and -rtr 1; depth 0 only)"
else echo "ik_llama.cpp: none (tools/ik-llama-cpp SRC builds it, or IK_LLAMA_BENCH names one)"; fi
echo "memory bandwidth: triad (numpy, 1 thread) $triad GB/s; bangtrace read probe, $threads threads: see 'read bw' per type"
printf '%-7s %5s %-12s %9s %9s %9s   %s\n' type depth engine "prompt/s" "decode/s" "taps/s" "read bw"
for t in $types; do
    m=$(model_for "$t") || continue
    for d in $depths; do
        # rounds alternate the two tools, so a slow spell of the machine
        # (shared hosts vary by tens of percent over seconds) falls on both
        npp= ntg= ntap= lpp= ltg= bw= ipp= itg= rpp= rtg=
        r=0
        while [ "$r" -lt "$rounds" ]; do
            r=$((r + 1))
            "$B" bench --model "$m" --threads "$threads" -p "$P" -n "$N" -d "$d" --reps 1 --taps all --json >"$tmp/bt.json" 2>"$tmp/bt.err" ||
                echo "bench-compare: $t depth $d: bangtrace bench failed: $(tail -1 "$tmp/bt.err")" >&2
            set -- $(lbench "$m" "$d")
            lpp="$lpp $1" ltg="$ltg $2"
            if [ -n "$ik" ] && [ "$d" = 0 ]; then
                set -- $(ikbench "$m" 0); ipp="$ipp $1" itg="$itg $2"
                set -- $(ikbench "$m" 1); rpp="$rpp $1" rtg="$rtg $2"
            fi
            npp="$npp $(jget "$tmp/bt.json" prompt_tokens_per_s)" ntg="$ntg $(jget "$tmp/bt.json" decode_tokens_per_s)"
            ntap="$ntap $(jget "$tmp/bt.json" decode_tokens_per_s_taps)" bw="$bw $(jget "$tmp/bt.json" measured_bandwidth_gbs)"
        done
        npp=$(med $npp) ntg=$(med $ntg) ntap=$(med $ntap) bw=$(med $bw) lpp=$(med $lpp) ltg=$(med $ltg)
        ipp=$(med $ipp) itg=$(med $itg) rpp=$(med $rpp) rtg=$(med $rtg)
        printf '%-7s %5s %-12s %9s %9s %9s   %s GB/s\n' "$t" "$d" native "$npp" "$ntg" "$ntap" "$bw"
        printf '%-7s %5s %-12s %9s %9s %9s\n' "" "" llama-bench "$lpp" "$ltg" -
        if [ -n "$ik" ] && [ "$d" = 0 ]; then
            printf '%-7s %5s %-12s %9s %9s %9s\n' "" "" ik_llama "$ipp" "$itg" -
            printf '%-7s %5s %-12s %9s %9s %9s\n' "" "" "ik -rtr 1" "$rpp" "$rtg" -
        fi
        if [ "$adapter" != 0 ] && [ "$d" = 0 ]; then
            prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog.']*max(1,$P//10)))")
            "$B" run --engine llama.cpp --model "$m" --threads "$threads" --prompt "$prompt" -n "$N" --ignore-eos --json >"$tmp/r0.json" 2>/dev/null || true
            rm -f "$tmp/t.db"
            "$B" run --engine llama.cpp --model "$m" --threads "$threads" --prompt "$prompt" -n "$N" --ignore-eos --json \
                --trace "$tmp/t.db" --taps all >"$tmp/r1.json" 2>/dev/null || true
            printf '%-7s %5s %-12s %9s %9s %9s\n' "" "" "llama.cpp+bt" "$(jget "$tmp/r0.json" timings prompt_tokens_per_s)" \
                "$(jget "$tmp/r0.json" timings decode_tokens_per_s)" "$(jget "$tmp/r1.json" timings decode_tokens_per_s)"
        fi
        printf '%-7s %5s %-12s %9s %9s %9s   (taps all / llama-bench decode)\n' "" "" "native/llama" \
            "$(ratio "$npp" "$lpp")" "$(ratio "$ntg" "$ltg")" "$(ratio "$ntap" "$ltg")"
        if [ -n "$ik" ] && [ "$d" = 0 ]; then
            # against ik's better figure of the two (its defaults, -rtr 1)
            printf '%-7s %5s %-12s %9s %9s %9s   (taps all / ik decode, the better of its two)\n' "" "" "native/ik" \
                "$(ratio "$npp" "$(best "$ipp" "$rpp")")" "$(ratio "$ntg" "$(best "$itg" "$rtg")")" "$(ratio "$ntap" "$(best "$itg" "$rtg")")"
        fi
    done
done
