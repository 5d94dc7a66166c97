#!/bin/sh
# tools/bench-compare.sh - `make bench-compare`: bangtrace against llama.cpp
# on the same SmolLM2-135M GGUF in every common weight type, same threads,
# one table: decode tokens/s (bangtrace with --taps all recorded, llama-bench
# -p 0 -n 64, taps off), prompt tokens/s (128 tokens, both), and the ratios.
#
# llama.cpp is the pinned build of tools/llama-cpp (the vendored llama.cpp
# of the llama-cpp-python sdist on PyPI) when that script is present,
# otherwise the first finished build in the cache. Its llama-quantize makes
# the test files from an F16 SmolLM2 (made once with tools/requant.py from
# the default model), kept in the model cache as smollm2-135m-<type>.gguf.
#
# Runs interleave the two tools and the types, REPS rounds (default 3),
# and print medians, since a shared machine's load drifts; the load average
# before and after is printed with the table. Figures, never assertions.
#
# Env: BANGTRACE (binary, default ./bangtrace), THREADS (2), REPS (3),
#      N (decode tokens, 64), P (prompt tokens, 128), TYPES (space separated,
#      default every type below), BT_CACHE (~/.cache/bangtrace).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
B=${BANGTRACE:-./bangtrace}
threads=${THREADS:-2}
reps=${REPS:-3}
n=${N:-64}
p=${P:-128}
types=${TYPES:-"f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m q5_k_m"}
cache=${BT_CACHE:-$HOME/.cache/bangtrace}
models=$cache/models

die() { echo "bench-compare: $*" >&2; exit 1; }

[ -x "$B" ] || die "$B is not an executable (set BANGTRACE)"
if [ -x "$here/llama-cpp" ]; then
    ldir=$("$here/llama-cpp") || die "tools/llama-cpp could not provide llama.cpp"
else
    ldir=
    for d in "$cache"/llama.cpp/*/; do
        [ -x "${d}bin/llama-bench" ] && [ -x "${d}bin/llama-quantize" ] && { ldir=${d%/}; break; }
    done
    [ -n "$ldir" ] || die "no llama.cpp build with bin/llama-bench in $cache/llama.cpp (run tools/llama-cpp)"
fi
LB=$ldir/bin/llama-bench
LQ=$ldir/bin/llama-quantize

# llama-quantize's name for each type ("every matrix in this type" where a
# mix exists: the _S variants; q4_k_m / q5_k_m are the usual mixes).
qname() {
    case $1 in
    f32) echo F32 ;; f16) echo F16 ;; bf16) echo BF16 ;;
    q8_0) echo Q8_0 ;; q4_0) echo Q4_0 ;; q4_1) echo Q4_1 ;; q5_0) echo Q5_0 ;; q5_1) echo Q5_1 ;;
    q2_k) echo Q2_K ;; q3_k) echo Q3_K_S ;; q4_k) echo Q4_K_S ;; q5_k) echo Q5_K_S ;; q6_k) echo Q6_K ;;
    q4_k_m) echo Q4_K_M ;; q5_k_m) echo Q5_K_M ;;
    *) return 1 ;;
    esac
}

mkdir -p "$models"
src=$models/smollm2-135m-f16-src.gguf
if [ ! -f "$src" ]; then
    base=$("$here/fetch-model") || die "the default model is not available"
    echo "bench-compare: making $src from $(basename "$base") (tools/requant.py)" >&2
    python3 "$here/requant.py" "$base" "$src.tmp" f16 >&2 && mv "$src.tmp" "$src" || die "requant.py failed"
fi
for t in $types; do
    q=$(qname "$t") || die "unknown type $t"
    f=$models/smollm2-135m-$t.gguf
    if [ ! -f "$f" ]; then
        echo "bench-compare: quantizing $t ($q)" >&2
        "$LQ" "$src" "$f.tmp" "$q" "$threads" >/dev/null 2>&1 && mv "$f.tmp" "$f" || { rm -f "$f.tmp"; die "llama-quantize $q failed"; }
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
r=1
while [ "$r" -le "$reps" ]; do
    for t in $types; do
        f=$models/smollm2-135m-$t.gguf
        # bangtrace: prompt (taps off) and decode with --taps all recorded
        "$B" bench --model "$f" --threads "$threads" -p "$p" -n "$n" --reps 1 --taps all --json 2>/dev/null |
            sed -n 's/.*"prompt_tokens_per_s":\([0-9.eE+-]*\).*"decode_tokens_per_s_taps":\([0-9.eE+-]*\).*/\1 \2/p' \
            >>"$tmp/bt.$t" || true
        # llama.cpp: one pp row and one tg row, taps off
        "$LB" -m "$f" -t "$threads" -p "$p" -n "$n" -r 1 -o csv 2>/dev/null | awk -F, '
            NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i }; next }
            { gsub(/"/, ""); if ($c["n_gen"] + 0 > 0) tg = $c["avg_ts"]; else pp = $c["avg_ts"] }
            END { if (pp != "" && tg != "") print pp, tg }' >>"$tmp/ll.$t" || true
    done
    r=$((r + 1))
done
load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

median() { # column $1 of file $2
    [ -s "$2" ] || { echo 0; return; }
    cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

printf 'bangtrace %s vs llama.cpp %s, %s threads, medians of %s rounds (interleaved)\n' \
    "$("$B" --version 2>/dev/null | head -n1)" "$(basename "$ldir")" "$threads" "$reps"
printf 'load average before: %s, after: %s\n\n' "$load0" "$load1"
printf '%-7s | %12s %12s %6s | %12s %12s %6s\n' type "bt decode" "llama tg$n" ratio "bt pp$p" "llama pp$p" ratio
printf '%-7s | %12s %12s %6s | %12s %12s %6s\n' "" "taps all" "taps off" "" "" "" ""
for t in $types; do
    bd=$(median 2 "$tmp/bt.$t"); bp=$(median 1 "$tmp/bt.$t")
    ld=$(median 2 "$tmp/ll.$t"); lp=$(median 1 "$tmp/ll.$t")
    awk -v t="$t" -v bd="$bd" -v ld="$ld" -v bp="$bp" -v lp="$lp" 'BEGIN {
        printf "%-7s | %12.1f %12.1f %5.2fx | %12.1f %12.1f %5.2fx\n", t, bd, ld, ld > 0 ? bd / ld : 0,
               bp, lp, lp > 0 ? bp / lp : 0 }'
done
