# tools/bench-lib.sh - helpers the benchmark scripts share (sourced by
# tools/bench-compare.sh and tools/bench-hybrid.sh, never run). The caller
# sets here (the tools folder), threads, P, N and tmp (a scratch folder)
# before calling them; bench_llama_cpp sets lc (the pinned llama.cpp
# build) and lc_version.

# The pinned llama.cpp build (tools/llama-cpp), its version checked against
# tools/llama-cpp.sha256; NAME is the caller's name for the messages.
bench_llama_cpp() {  # NAME
    lc=$("$here/llama-cpp") || { echo "$1: no llama.cpp build (tools/llama-cpp failed)" >&2; exit 1; }
    want=$(grep -v '^#' "$here/llama-cpp.sha256" | awk '{print $2; exit}')
    lc_version=$(sed -n 's/^version=//p' "$lc/build-info.txt")
    [ "$lc_version" = "$want" ] || { echo "$1: $lc is llama.cpp $lc_version, bangtrace pins $want: version mismatch" >&2; exit 2; }
}
# A number out of a JSON file (keys nested left to right), "n/a" when absent.
jget() { python3 -c 'import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: d=None
for k in sys.argv[2:]: d=d.get(k) if isinstance(d,dict) else None
print("%.1f" % d if isinstance(d,(int,float)) else "n/a")' "$@"; }
# llama-bench with its own defaults but for threads, -p, -n, depth and one
# repetition (the callers alternate rounds): "pp tg", "n/a n/a" on failure.
# LLAMA_REPACK=0 runs it with --repack 0 (label such figures).
lbench() {  # model depth
    "$lc/bin/llama-bench" -m "$1" -t "$threads" -p "$P" -n "$N" -d "$2" -r 1 ${LLAMA_REPACK:+--repack "$LLAMA_REPACK"} -o json >"$tmp/lb.json" 2>/dev/null || { echo "n/a n/a"; return; }
    python3 -c 'import json,sys
rows=json.load(open(sys.argv[1]))
pp=[r["avg_ts"] for r in rows if r.get("n_prompt",0)>0 and r.get("n_gen",0)==0]
tg=[r["avg_ts"] for r in rows if r.get("n_gen",0)>0 and r.get("n_prompt",0)==0]
print("%.1f %.1f" % (pp[0] if pp else float("nan"), tg[0] if tg else float("nan")))' "$tmp/lb.json"
}
ratio() { python3 -c 'import sys
try: print("%.2f" % (float(sys.argv[1])/float(sys.argv[2])))
except Exception: print("n/a")' "$1" "$2"; }
# median of the numbers given (n/a ignored); "n/a" when there are none
med() { python3 -c 'import sys
v=sorted(float(a) for a in sys.argv[1:] if a not in ("n/a","nan"))
print("%.1f" % v[len(v)//2] if v else "n/a")' "$@"; }
# A GGUF quantized from an f32 one with llama-quantize (TYPE as it names
# them, extra flags before the files), kept once made: "made" on stdout
# when this call made it.
bench_quantize() {  # f32 out type [flags...]
    _f=$1 _o=$2 _t=$3; shift 3
    [ -f "$_o" ] && return 0
    "$lc/bin/llama-quantize" "$@" "$_f" "$_o.tmp" "$_t" "$threads" >"$tmp/q.log" 2>&1 &&
        mv "$_o.tmp" "$_o" || { rm -f "$_o.tmp"; echo "llama-quantize $_t failed ($(tail -1 "$tmp/q.log"))" >&2; return 1; }
    echo made
}
