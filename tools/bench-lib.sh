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
# ik_llama.cpp's llama-bench (tools/ik-llama-cpp builds it from a checkout),
# when present: IK_LLAMA_BENCH, else the newest build in the cache; sets ik
# (empty when there is none). NAME as for bench_llama_cpp.
bench_ik() {  # NAME
    ik=${IK_LLAMA_BENCH:-}
    [ -n "$ik" ] || ik=$(ls -t "${BT_CACHE:-$HOME/.cache/bangtrace}"/ik_llama.cpp/*/bin/llama-bench 2>/dev/null | head -n1 || true)
    [ -z "$ik" ] || [ -x "$ik" ] || { echo "$1: IK_LLAMA_BENCH=$ik is not an executable" >&2; exit 2; }
}
# ik's llama-bench with its own defaults but for threads, -p, -n and one
# repetition, with -rtr RTR (0: its default; 1: its run-time repacking):
# "pp tg", "n/a n/a" on failure. Depth 0 only (its llama-bench has no -d).
ikbench() {  # model rtr
    "$ik" -m "$1" -t "$threads" -p "$P" -n "$N" -r 1 -rtr "$2" -o json >"$tmp/ik.json" 2>"$tmp/ik.err" || { echo "n/a n/a"; return; }
    python3 -c 'import json,sys
rows=json.load(open(sys.argv[1]))
pp=[r["avg_ts"] for r in rows if r.get("n_prompt",0)>0 and r.get("n_gen",0)==0]
tg=[r["avg_ts"] for r in rows if r.get("n_gen",0)>0 and r.get("n_prompt",0)==0]
print("%.1f %.1f" % (pp[0] if pp else float("nan"), tg[0] if tg else float("nan")))' "$tmp/ik.json" 2>/dev/null || echo "n/a n/a"
}
# the larger of two figures ("n/a" ignored)
best() { python3 -c 'import sys
v=[float(a) for a in sys.argv[1:] if a not in ("n/a","nan")]
print("%.1f" % max(v) if v else "n/a")' "$@"; }
# Seconds since the epoch, and since such a mark (the model-making times the benches print).
now() { python3 -c 'import time; print("%.1f" % time.time())'; }
since() { python3 -c 'import sys, time; print("%.0f" % (time.time() - float(sys.argv[1])))' "$1"; }
