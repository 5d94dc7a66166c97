#!/bin/sh
# tools/bench-compare.sh - `make bench-compare`: bangtrace against llama.cpp
# (llama-bench from the pinned build, tools/llama-cpp) on the same GGUF and
# threads, for F32, Q8_0, Q4_0, Q4_1 and K-quants of SmolLM2-135M (F32 made
# with tools/requant.py from the cached Q4_1, the rest with llama-quantize
# from that F32). One run each. Prints prompt and decode tokens/s:
#   native        bangtrace bench, taps off / taps all
#   llama.cpp     llama-bench (no taps)
#   llama.cpp+bt  bangtrace run --engine llama.cpp, taps off / taps all
# and the ratios native / llama-bench. llama.cpp runs without its extra
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
src=$("$here/fetch-model") || { echo "bench-compare: the default model is not available" >&2; exit 1; }
f32=$cache/smollm2-135m-f32.gguf
[ -f "$f32" ] || python3 "$here/requant.py" "$src" "$f32" f32 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
jget() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d.get(k) if isinstance(d,dict) else None
print("%.1f" % d if isinstance(d,(int,float)) else "n/a")' "$@"; }
lbench() {  # model -> "pp tg"
    "$lc/bin/llama-bench" -m "$1" -t "$threads" -p "$P" -n "$N" -r 1 --repack "${BT_LLAMA_EXTRA_BUFTS:-0}" -o json >"$tmp/lb.json" 2>/dev/null || { echo "n/a n/a"; return; }
    python3 -c 'import json,sys
rows=json.load(open(sys.argv[1]))
pp=[r["avg_ts"] for r in rows if r.get("n_prompt",0)>0 and r.get("n_gen",0)==0]
tg=[r["avg_ts"] for r in rows if r.get("n_gen",0)>0 and r.get("n_prompt",0)==0]
print("%.1f %.1f" % (pp[0] if pp else float("nan"), tg[0] if tg else float("nan")))' "$tmp/lb.json"
}
prompt=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog.']*$P))")
printf '%-8s %-14s %9s %9s %9s\n' type engine "prompt/s" "decode/s" "taps/s"
for t in F32 Q8_0 Q4_0 Q4_1 Q4_K_M Q5_K_M Q6_K; do
    m=$cache/smollm2-135m-$(echo "$t" | tr 'A-Z' 'a-z').gguf
    if [ "$t" != F32 ] && [ ! -f "$m" ]; then
        "$lc/bin/llama-quantize" "$f32" "$m" "$t" "$threads" >"$tmp/q.log" 2>&1 || { echo "$t: llama-quantize failed" >&2; continue; }
    fi
    "$B" bench --model "$m" --threads "$threads" -p "$P" -n "$N" --reps 1 --taps all --json >"$tmp/bt.json" 2>/dev/null || true
    set -- $(lbench "$m")
    lpp=$1 ltg=$2
    "$B" run --engine llama.cpp --model "$m" --threads "$threads" --prompt "$prompt" -n "$N" --ignore-eos --json >"$tmp/r0.json" 2>/dev/null || true
    "$B" run --engine llama.cpp --model "$m" --threads "$threads" --prompt "$prompt" -n "$N" --ignore-eos --json \
        --trace "$tmp/t-$t.db" --taps all >"$tmp/r1.json" 2>/dev/null || true
    npp=$(jget "$tmp/bt.json" prompt_tokens_per_s) ntg=$(jget "$tmp/bt.json" decode_tokens_per_s) ntap=$(jget "$tmp/bt.json" decode_tokens_per_s_taps)
    printf '%-8s %-14s %9s %9s %9s\n' "$t" native "$npp" "$ntg" "$ntap"
    printf '%-8s %-14s %9s %9s %9s\n' "" llama-bench "$lpp" "$ltg" -
    printf '%-8s %-14s %9s %9s %9s\n' "" "llama.cpp+bt" "$(jget "$tmp/r0.json" timings prompt_tokens_per_s)" \
        "$(jget "$tmp/r0.json" timings decode_tokens_per_s)" "$(jget "$tmp/r1.json" timings decode_tokens_per_s)"
    python3 -c 'import sys
def f(a,b):
    try: return "%.2f" % (float(a)/float(b))
    except Exception: return "n/a"
print("%-8s %-14s %9s %9s" % ("", "native/llama", f(sys.argv[1],sys.argv[3]), f(sys.argv[2],sys.argv[4])))' "$npp" "$ntg" "$lpp" "$ltg"
done
