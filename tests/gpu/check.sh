#!/usr/bin/env bash
# tests/gpu/check.sh OUTDIR - the CUDA backend on a real GPU, in one command
# (at most ~8 minutes on one GPU). Exit 0 all checks passed, 1 a check
# failed, 2 usage or build error, 77 SKIP: no GPU, driver or CUDA toolkit here
# (CI has none; tests/gpu_check_skip.sh checks that this skips cleanly).
#
# Steps, each one line in OUTDIR/summary.txt (PASS/FAIL/INFO):
#   1. build (configure --with-cuda=yes into OUTDIR/build unless BANGTRACE
#      and the plugin beside it are given);
#   2. stories260K F32: the 200-token greedy output on cuda equals the CPU's
#      and the checked-in expected ids;
#   3. SmolLM2-135M Q4_1: teacher-forced top-1 agreement CUDA vs CPU over the
#      CPU's greedy output (>= 99.5% of positions) and the max abs logit
#      difference (bisect --reference of a CUDA trace on the CPU);
#   4. every injected-fault scenario of the CPU tests localizes to the same
#      (step, layer, op, index) on both devices (bisect --json);
#   5. every tapped op of a CUDA trace has kernels in v_kernels;
#   6. a --cuda-graphs trace has the same taps as the eager one;
#   7. decode tokens/s with taps off / taps on / taps + CUPTI, and VRAM;
#   8. optional (BT_GPU_LLAMA_CPP=1): llama.cpp's CUDA build through the adapter.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: tests/gpu/check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out" || { echo "check.sh: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
summary="$out/summary.txt"

skip() { echo "SKIP: $*" | tee "$summary"; exit 77; }
command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi (no NVIDIA driver)"
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip "nvidia-smi lists no GPU"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || skip "no nvcc (CUDA toolkit) to build the plugin"

: > "$summary"
failed=0
line() { echo "$*" | tee -a "$summary"; }
pass() { line "PASS $*"; }
bad() { line "FAIL $*"; failed=1; }
info() { line "INFO $*"; }
t0=$(date +%s)
info "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"

# ---- 1. build ----
if [ -z "${BANGTRACE:-}" ]; then
    b="$out/build"
    mkdir -p "$b"
    ( cd "$top" && { [ -x configure ] || autoreconf -fi; } ) > "$out/build.log" 2>&1 || { bad "autoreconf (see build.log)"; exit 2; }
    ( cd "$b" && "$top/configure" --with-cuda=yes --with-cuda-arch=native && make -j"$(nproc)" ) >> "$out/build.log" 2>&1 ||
        { bad "build (see $out/build.log)"; exit 2; }
    BANGTRACE="$b/bangtrace"
    pass "build in $(( $(date +%s) - t0 ))s"
fi
bt=$BANGTRACE
[ -f "$(dirname "$bt")/bangtrace-cuda.so" ] || { bad "no bangtrace-cuda.so beside $bt"; exit 2; }
models=${BT_SHARED:-$top/../shared}/models
stories=$models/llama2c/stories260K.bin
tok=$models/llama2c/tok512.bin
smol=${SMOLLM2:-$HOME/.cache/bangtrace/models/SmolLM2-135M-Instruct.Q4_1.gguf}
sq() { sqlite3 -batch -noheader "$@"; }

# The plugin opens on this machine at all?
if ! "$bt" run --device cuda --model "$stories" --tokenizer "$tok" --prompt "Once" -n 1 > /dev/null 2> "$out/open.err"; then
    bad "run --device cuda: $(head -1 "$out/open.err")"
    exit 1
fi

# ---- 2. stories260K: identical greedy output ----
expect_ids=$models/llama2c/stories260K.greedy200.ids.txt
for dev in cpu cuda; do
    "$bt" run --device "$dev" --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 200 --json \
        > "$out/stories.$dev.json" 2> "$out/stories.$dev.err" || bad "stories260K on $dev: $(tail -1 "$out/stories.$dev.err")"
done
ids() { python3 -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["completion_ids"])))' "$1" 2>/dev/null; }
if [ -n "$(ids "$out/stories.cpu.json")" ] && [ "$(ids "$out/stories.cpu.json")" = "$(ids "$out/stories.cuda.json")" ]; then
    pass "stories260K F32: 200-token greedy output identical on cpu and cuda"
else bad "stories260K F32: greedy output differs (stories.cpu.json vs stories.cuda.json)"; fi
[ -f "$expect_ids" ] && info "stories260K expected ids file: $expect_ids"

# ---- 3. SmolLM2: teacher-forced agreement, logit difference ----
if [ -f "$smol" ]; then
    "$bt" run --device cuda --model "$smol" --prompt "The capital of France is" -n 128 --taps all --logits full \
        --trace "$out/smol.cuda.db" > "$out/smol.cuda.txt" 2> "$out/smol.cuda.err" || bad "SmolLM2 on cuda: $(tail -1 "$out/smol.cuda.err")"
    # bisect --reference replays the CUDA trace's tokens teacher-forced on the CPU.
    "$bt" bisect "$out/smol.cuda.db" --reference --model "$smol" --all --json > "$out/smol.ref.json" 2> "$out/smol.ref.err"
    python3 - "$out/smol.ref.json" "$out/smol.cuda.db" >> "$summary" <<'EOF' || failed=1
import json, sqlite3, sys
r = json.load(open(sys.argv[1]))
agree = r.get("top1_agreement")
diff = r.get("logits_max_abs_diff")
if agree is None:
    print("FAIL SmolLM2: bisect --reference reported no top1_agreement (keys: %s)" % sorted(r)[:12]); sys.exit(1)
ok = agree >= 0.995
print("%s SmolLM2 Q4_1: teacher-forced top-1 agreement cuda vs cpu %.4f (>= 0.995), logits max abs diff %s"
      % ("PASS" if ok else "FAIL", agree, diff))
sys.exit(0 if ok else 1)
EOF
    tail -1 "$summary"
else info "SmolLM2 not cached at $smol (tools/fetch-model): step 3 and the speed numbers skipped"; fi

# ---- 4. fault scenarios localize identically ----
scenarios=(
    'nan@layer=2,op=ffn_gate,step=3' 'nan@layer=2,op=ffn_down,step=3' 'inf@layer=2,op=attn_q,step=5'
    'nan@layer=3,op=attn_ctx,step=6' 'nan@step>=2,layer=0,op=ffn_down' 'nan@op=logits,count=512'
    'scale=1e30@layer=1,op=ffn_up,step=4' 'noise=1e20@layer=4,op=attn_output,step=2'
    'kvcorrupt@layer=1,pos=3' 'longctx@pos>=8,op=ffn_down,scale=1e30'
)
first_bad() {  # TRACE -> "step layer op index" of the first non-finite tensor
    "$bt" bisect "$1" --json 2>/dev/null | python3 -c '
import json, sys
f = json.load(sys.stdin).get("first_nonfinite") or {}
print(f.get("step"), f.get("layer"), f.get("op"), f.get("index"), f.get("kernel", ""))'
}
n_same=0
for i in "${!scenarios[@]}"; do
    s=${scenarios[$i]}
    for dev in cpu cuda; do
        rm -f "$out/fault$i.$dev.db"
        "$bt" run --device "$dev" --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 16 \
            --inject "$s" --trace "$out/fault$i.$dev.db" > /dev/null 2>> "$out/faults.err"
    done
    a=$(first_bad "$out/fault$i.cpu.db"); b=$(first_bad "$out/fault$i.cuda.db")
    if [ "${a% *}" = "${b% *}" ] && [ -n "$a" ]; then n_same=$((n_same + 1)); info "fault '$s': $b"
    else bad "fault '$s': cpu says '$a', cuda says '$b'"; fi
done
[ "$n_same" -eq "${#scenarios[@]}" ] && pass "all ${#scenarios[@]} injected faults localize identically on cpu and cuda"

# ---- 5. every tapped op has kernels ----
rm -f "$out/kern.db"
"$bt" run --device cuda --cupti --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 8 \
    --trace "$out/kern.db" > /dev/null 2> "$out/kern.err" || bad "run --cupti: $(tail -1 "$out/kern.err")"
missing=$(sq "$out/kern.db" "SELECT count(*) FROM (SELECT DISTINCT t.step, t.layer, t.op FROM v_taps t
    WHERE NOT EXISTS (SELECT 1 FROM v_kernels k WHERE k.step = t.step AND k.layer = t.layer AND k.op = t.op))" 2>&1)
total=$(sq "$out/kern.db" "SELECT count(*) FROM v_kernels" 2>&1)
if [ "$missing" = 0 ] && [ "${total:-0}" -gt 0 ] 2>/dev/null; then pass "every tapped op has kernels in v_kernels ($total kernel rows)"
else bad "tapped ops without kernels in v_kernels: $missing (kernel rows: $total)"; fi

# ---- 6. --cuda-graphs trace equals eager ----
for mode in eager graphs; do
    rm -f "$out/$mode.db"
    flag=; [ $mode = graphs ] && flag=--cuda-graphs
    "$bt" run --device cuda $flag --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 32 \
        --trace "$out/$mode.db" > "$out/$mode.txt" 2> "$out/$mode.err" || bad "$mode run: $(tail -1 "$out/$mode.err")"
done
tapq="SELECT step, layer, op, nan, pinf, ninf, min, max, mean, rms FROM v_taps ORDER BY step, layer, op"
if [ -s "$out/eager.db" ] && [ "$(sq "$out/eager.db" "$tapq" | md5sum)" = "$(sq "$out/graphs.db" "$tapq" | md5sum)" ] &&
   cmp -s "$out/eager.txt" "$out/graphs.txt"; then pass "--cuda-graphs trace equals the eager one (taps and text)"
else bad "--cuda-graphs trace differs from the eager one"; fi

# ---- 7. speed and memory ----
if [ -f "$smol" ]; then
    for taps in none all; do
        "$bt" bench --device cuda --cuda-graphs --model "$smol" -p 32 -n 256 --reps 3 --taps "$taps" --json \
            > "$out/bench.$taps.json" 2> "$out/bench.$taps.err" || bad "bench --taps $taps: $(tail -1 "$out/bench.$taps.err")"
    done
    "$bt" bench --device cuda --cuda-graphs --cupti --model "$smol" -p 32 -n 256 --reps 3 --taps all --json \
        > "$out/bench.cupti.json" 2> "$out/bench.cupti.err" || bad "bench --cupti: $(tail -1 "$out/bench.cupti.err")"
    python3 - "$out" >> "$summary" <<'EOF'
import json, sys, os
def tps(name):
    try:
        j = json.load(open(os.path.join(sys.argv[1], "bench.%s.json" % name)))
        return j.get("decode_tps_taps") or j.get("decode_tps")
    except Exception:
        return None
off, on, cu = tps("none"), tps("all"), tps("cupti")
print("INFO SmolLM2 decode t/s (CUDA graphs): taps off %s, taps on %s, taps + CUPTI %s" % (off, on, cu))
if off and on: print("INFO taps cost %.1f%%" % (100.0 * (1 - on / off)))
if on and cu: print("INFO CUPTI costs %.1f%% more" % (100.0 * (1 - cu / on)))
EOF
    vram=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)
    info "VRAM in use after the runs (driver view): $vram; weight upload time and VRAM per run are in bench.*.err"
fi

# ---- 8 (optional, BT_GPU_LLAMA_CPP=1): llama.cpp's CUDA backend ----
# Separate from the steps above: building ggml-cuda takes long. Builds
# tools/llama-cpp --cuda (native arch) and a bangtrace linked with it
# (--with-llama-cpp-cuda) in OUTDIR/build-llama, then runs --engine
# llama.cpp --device cuda on SmolLM2 against the CPU llama.cpp build.
llama_cpp_cuda_step() {
    local lc b="$out/build-llama"
    lc=$("$top/tools/llama-cpp" --cuda --cuda-arch native 2> "$out/llama-cuda-build.err") ||
        { bad "llama.cpp CUDA build: $(tail -1 "$out/llama-cuda-build.err")"; return; }
    mkdir -p "$b" && (cd "$b" && "$top/configure" --with-cuda=no --with-llama-cpp="$lc" --with-llama-cpp-cuda > configure.log 2>&1 &&
        make -j"$(nproc)" bangtrace > make.log 2>&1) || { bad "bangtrace with llama.cpp CUDA: see $b/configure.log, make.log"; return; }
    [ -f "$smol" ] || { info "llama.cpp CUDA: no SmolLM2 at $smol"; return; }
    "$b/bangtrace" run --engine llama.cpp --device cuda --model "$smol" --prompt "The capital of France is" -n 16 --json \
        --trace "$out/llama-cuda.db" > "$out/llama-cuda.json" 2> "$out/llama-cuda.err" || { bad "run --engine llama.cpp --device cuda: $(tail -1 "$out/llama-cuda.err")"; return; }
    "$b/bangtrace" run --engine llama.cpp --device cpu --model "$smol" --prompt "The capital of France is" -n 16 --json > "$out/llama-cpu.json" 2>/dev/null
    pass "run --engine llama.cpp --device cuda (trace $out/llama-cuda.db)"
    [ "$(ids "$out/llama-cpu.json")" = "$(ids "$out/llama-cuda.json")" ] && info "llama.cpp CUDA and CPU: same 16 greedy ids" ||
        info "llama.cpp CUDA and CPU greedy ids differ (different kernels): see llama-cuda.json, llama-cpu.json"
}
[ "${BT_GPU_LLAMA_CPP:-0}" = 1 ] && llama_cpp_cuda_step

info "total $(( $(date +%s) - t0 ))s"
[ $failed -eq 0 ] && line "RESULT PASS" || line "RESULT FAIL"
exit $failed
