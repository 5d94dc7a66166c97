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
#
# Every flag and JSON field used here exists (run --device/--cupti/
# --cuda-graphs/--logits full, bisect --reference --device --json:
# reference.cross_device.{top1_agreement,logits_max_abs_diff},
# first_nonfinite.kernel, bench --device --cuda-graphs --cupti --taps --json:
# decode_tokens_per_s, decode_tokens_per_s_taps). BT_CHECK_DEVICE=cpu runs
# the same steps with cpu in place of cuda (a self-test of the script on a
# machine without a GPU: the CUDA-only steps, CUPTI and graphs, are then
# INFO lines); set BANGTRACE to a built bangtrace to skip the build.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: tests/gpu/check.sh OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out" || { echo "check.sh: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
summary="$out/summary.txt"

skip() { echo "SKIP: $*" | tee "$summary"; exit 77; }
dev=${BT_CHECK_DEVICE:-cuda}
case $dev in cuda|cuda:[0-9]*|cpu) ;; *) echo "check.sh: BT_CHECK_DEVICE must be cuda, cuda:N or cpu" >&2; exit 2 ;; esac
gpu=1; [ "$dev" = cpu ] && gpu=0
if [ $gpu = 1 ]; then
    command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi (no NVIDIA driver)"
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || skip "nvidia-smi lists no GPU"
    nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    [ -x "$nvcc" ] || skip "no nvcc (CUDA toolkit) to build the plugin"
fi

: > "$summary"
failed=0
line() { echo "$*" | tee -a "$summary"; }
pass() { line "PASS $*"; }
bad() { line "FAIL $*"; failed=1; }
info() { line "INFO $*"; }
t0=$(date +%s)
if [ $gpu = 1 ]; then info "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
else info "self-test: BT_CHECK_DEVICE=cpu, every step on the CPU (no GPU numbers)"; fi

# ---- 1. build ----
if [ -z "${BANGTRACE:-}" ]; then
    b="$out/build"
    mkdir -p "$b"
    ( cd "$top" && { [ -x configure ] || autoreconf -fi; } ) > "$out/build.log" 2>&1 || { bad "autoreconf (see build.log)"; exit 2; }
    cuda_flags="--with-cuda=yes --with-cuda-arch=native"; [ $gpu = 1 ] || cuda_flags="--with-cuda=no"
    ( cd "$b" && "$top/configure" $cuda_flags && make -j"$(nproc)" ) >> "$out/build.log" 2>&1 ||
        { bad "build (see $out/build.log)"; exit 2; }
    BANGTRACE="$b/bangtrace"
    pass "build in $(( $(date +%s) - t0 ))s"
fi
bt=$BANGTRACE
[ $gpu = 0 ] || [ -f "$(dirname "$bt")/bangtrace-cuda.so" ] || { bad "no bangtrace-cuda.so beside $bt"; exit 2; }
models=${BT_SHARED:-$top/../shared}/models
stories=$models/llama2c/stories260K.bin
tok=$models/llama2c/tok512.bin
smol=${SMOLLM2:-$HOME/.cache/bangtrace/models/SmolLM2-135M-Instruct.Q4_1.gguf}
sq() { sqlite3 -batch -noheader "$@"; }

# The plugin opens on this machine at all?
if ! "$bt" -v run --device "$dev" --model "$stories" --tokenizer "$tok" --prompt "Once" -n 1 > /dev/null 2> "$out/open.err"; then
    bad "run --device $dev: $(head -1 "$out/open.err")"
    exit 1
fi

grep -E 'weights .* uploaded' "$out/open.err" | sed 's/^[^:]*: /INFO plugin: /' | tee -a "$summary"

# ---- 2. stories260K: identical greedy output ----
expect_ids=$models/llama2c/stories260K.greedy200.ids.txt
for d in cpu "$dev"; do
    "$bt" run --device "$d" --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 200 --ignore-eos --json \
        > "$out/stories.$d.json" 2> "$out/stories.$d.err" || bad "stories260K on $d: $(tail -1 "$out/stories.$d.err")"
done
ids() { python3 -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["completion_ids"])))' "$1" 2>/dev/null; }
if [ -n "$(ids "$out/stories.cpu.json")" ] && [ "$(ids "$out/stories.cpu.json")" = "$(ids "$out/stories.$dev.json")" ]; then
    pass "stories260K F32: 200-token greedy output identical on cpu and $dev"
else bad "stories260K F32: greedy output differs (stories.cpu.json vs stories.$dev.json)"; fi
[ -f "$expect_ids" ] && info "stories260K expected ids file: $expect_ids"

# ---- 3. SmolLM2: teacher-forced agreement, logit difference ----
if [ -f "$smol" ]; then
    rm -f "$out/smol.dev.db"
    "$bt" run --device "$dev" --model "$smol" --prompt "The capital of France is" -n 128 --ignore-eos --taps all --logits full \
        --trace "$out/smol.dev.db" > "$out/smol.dev.txt" 2> "$out/smol.dev.err" || bad "SmolLM2 on $dev: $(tail -1 "$out/smol.dev.err")"
    # bisect --reference --device cpu replays the trace's tokens teacher-forced
    # on the CPU (tolerance derived from the dtypes, doc/cuda.md)
    "$bt" bisect "$out/smol.dev.db" --reference --device cpu --model "$smol" --all --json > "$out/smol.ref.json" 2> "$out/smol.ref.err"
    python3 - "$out/smol.ref.json" >> "$summary" <<'EOF' || failed=1
import json, sys
try:
    r = json.load(open(sys.argv[1]))["reference"]["cross_device"]
except Exception as e:
    print("FAIL SmolLM2: bisect --reference --device cpu --json gave no reference.cross_device (%s)" % e); sys.exit(1)
agree, diff = r.get("top1_agreement"), r.get("logits_max_abs_diff")
if agree is None:
    print("FAIL SmolLM2: no top1_agreement (%d steps)" % r.get("top1_steps", 0)); sys.exit(1)
ok = agree >= 0.995
print("%s SmolLM2 Q4_1: teacher-forced top-1 agreement %s vs cpu %.4f (>= 0.995) over %d steps, logits max abs diff %s over %d rows, tolerance %g"
      % ("PASS" if ok else "FAIL", r["trace_backend"], agree, r["top1_steps"], diff, r.get("logits_rows", 0), r["tolerance"]))
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
first_bad() {  # TRACE -> "step layer op index kernel" of the first non-finite tensor
    "$bt" bisect "$1" --json 2>/dev/null | python3 -c '
import json, sys
f = json.load(sys.stdin).get("first_nonfinite") or {}
print(f.get("step"), f.get("layer"), f.get("op"), f.get("first_bad_index"), f.get("kernel") or "-")'
}
n_same=0
for i in "${!scenarios[@]}"; do
    s=${scenarios[$i]}
    cupti=; [ $gpu = 1 ] && cupti=--cupti
    rm -f "$out/fault$i.cpu.db" "$out/fault$i.dev.db"
    "$bt" run --device cpu --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 16 \
        --inject "$s" --trace "$out/fault$i.cpu.db" > /dev/null 2>> "$out/faults.err"
    "$bt" run --device "$dev" $cupti --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 16 \
        --inject "$s" --trace "$out/fault$i.dev.db" > /dev/null 2>> "$out/faults.err"
    a=$(first_bad "$out/fault$i.cpu.db"); b=$(first_bad "$out/fault$i.dev.db")
    if [ "${a% *}" = "${b% *}" ] && [ -n "$a" ]; then n_same=$((n_same + 1)); info "fault '$s': $b"
    else bad "fault '$s': cpu says '$a', $dev says '$b'"; fi
done
[ "$n_same" -eq "${#scenarios[@]}" ] && pass "all ${#scenarios[@]} injected faults localize identically on cpu and $dev"

# ---- 5. every tapped op has kernels ----
if [ $gpu = 1 ]; then
    rm -f "$out/kern.db"
    "$bt" run --device "$dev" --cupti --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 8 \
        --trace "$out/kern.db" > /dev/null 2> "$out/kern.err" || bad "run --cupti: $(tail -1 "$out/kern.err")"
    # the query tests/test_activity.c runs on its stand-in backend
    missing=$(sq "$out/kern.db" "SELECT count(*) FROM (SELECT DISTINCT t.step, t.layer, t.op FROM v_taps t
        WHERE NOT EXISTS (SELECT 1 FROM v_kernels k WHERE k.step = t.step AND k.layer IS t.layer AND k.op = t.op))" 2>&1)
    total=$(sq "$out/kern.db" "SELECT count(*) FROM v_kernels WHERE kind = 'kernel'" 2>&1)
    if [ "$missing" = 0 ] && [ "${total:-0}" -gt 0 ] 2>/dev/null; then pass "every tapped op has kernels in v_kernels ($total kernel rows)"
    else bad "tapped ops without kernels in v_kernels: $missing (kernel rows: $total)"; fi
    info "CUPTI rows by kind: $(sq "$out/kern.db" "SELECT group_concat(kind || ' ' || n, ', ') FROM (SELECT kind, count(*) AS n FROM v_kernels GROUP BY kind)" 2>&1)"
    k=$(first_bad "$out/fault0.dev.db")
    case $k in *bt_k_*) pass "bisect names the CUDA kernel of the first bad tensor: $k" ;; *) bad "bisect named no CUDA kernel: '$k'" ;; esac
else info "step 5 (CUPTI kernels) needs a GPU"; fi

# ---- 6. --cuda-graphs trace equals eager ----
if [ $gpu = 1 ]; then
for mode in eager graphs; do
    rm -f "$out/$mode.db"
    flag=; [ $mode = graphs ] && flag=--cuda-graphs
    "$bt" run --device "$dev" $flag --model "$stories" --tokenizer "$tok" --prompt "Once upon a time" -n 32 \
        --trace "$out/$mode.db" > "$out/$mode.txt" 2> "$out/$mode.err" || bad "$mode run: $(tail -1 "$out/$mode.err")"
done
tapq="SELECT step, layer, op, nan, pinf, ninf, min, max, mean, rms FROM v_taps ORDER BY step, layer, op"
if [ -s "$out/eager.db" ] && [ "$(sq "$out/eager.db" "$tapq" | md5sum)" = "$(sq "$out/graphs.db" "$tapq" | md5sum)" ] &&
   cmp -s "$out/eager.txt" "$out/graphs.txt"; then pass "--cuda-graphs trace equals the eager one (taps and text)"
else bad "--cuda-graphs trace differs from the eager one"; fi
else info "step 6 (CUDA graphs) needs a GPU"; fi

# ---- 7. speed and memory ----
if [ -f "$smol" ]; then
    n_dec=256; [ $gpu = 1 ] || n_dec=16
    gflag=; [ $gpu = 1 ] && gflag=--cuda-graphs
    # one bench: decode with taps off, then with taps on (a temporary trace)
    "$bt" bench --device "$dev" $gflag --model "$smol" -p 32 -n $n_dec --reps 3 --taps all --json \
        > "$out/bench.taps.json" 2> "$out/bench.taps.err" || bad "bench --taps all: $(tail -1 "$out/bench.taps.err")"
    if [ $gpu = 1 ]; then
        "$bt" bench --device "$dev" $gflag --cupti --model "$smol" -p 32 -n $n_dec --reps 3 --taps all --json \
            > "$out/bench.cupti.json" 2> "$out/bench.cupti.err" || bad "bench --cupti: $(tail -1 "$out/bench.cupti.err")"
    fi
    python3 - "$out" "$dev" >> "$summary" <<'EOF'
import json, sys, os
def get(name, key):
    try:
        return json.load(open(os.path.join(sys.argv[1], "bench.%s.json" % name))).get(key)
    except Exception:
        return None
off, on = get("taps", "decode_tokens_per_s"), get("taps", "decode_tokens_per_s_taps")
cu = get("cupti", "decode_tokens_per_s_taps")
print("INFO SmolLM2 decode t/s on %s: taps off %s, taps on %s, taps + CUPTI %s" % (sys.argv[2], off, on, cu))
if off and on: print("INFO taps cost %.1f%%" % (100.0 * (1 - on / off)))
if on and cu: print("INFO CUPTI costs %.1f%% more" % (100.0 * (1 - cu / on)))
EOF
    if [ $gpu = 1 ]; then
        rm -f "$out/mem.db"
        "$bt" run --device "$dev" --model "$smol" --prompt "Hi" -n 1 --trace "$out/mem.db" > /dev/null 2>&1
        info "plugin memory account (meta): $(sq "$out/mem.db" "SELECT group_concat(key || '=' || value, ', ') FROM meta WHERE key LIKE 'device_%'" 2>&1)"
        info "VRAM in use now (driver view): $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)"
    fi
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
