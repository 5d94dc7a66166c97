#!/bin/sh
# args_groups.sh - the flags commands share are parsed once (src/cli/args.c)
# and the devices known once (the table in src/backend/registry.c): the same
# mistake gives the same one line and exit 2 in every command that takes the
# flag, each command keeps exactly the short aliases it had, and a CPU
# trace's meta backend is still cpu-<the kernels' SIMD level>.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
L2C="--model $STORIES --tokenizer $TOK512"

# same_err DESC WANT CMD...: exit 2, exactly one stderr line, which is
# "bangtrace: <cmd>: WANT" (<cmd> the first word after the binary)
same_err() {
    desc=$1 want=$2; shift 2
    cmd=$2
    "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -ne 2 ]; then fail "$desc: exit $rc, expected 2; stderr: $(head -c 300 "$TMP/err")"; return; fi
    if [ "$(wc -l < "$TMP/err")" -ne 1 ] || [ "$(cat "$TMP/err")" != "bangtrace: $cmd: $want" ]; then
        fail "$desc: expected the one line 'bangtrace: $cmd: $want', got: $(head -c 400 "$TMP/err")"; return
    fi
    [ -s "$TMP/out" ] && { fail "$desc: wrote to stdout: $(head -c 200 "$TMP/out")"; return; }
    ok "$desc"
}
B=$BANGTRACE

# --threads: run, bench, forward, bisect, serve, probe, ctxwalk
T="--threads expects an integer in [1, 256], got '0'"
same_err "run --threads 0" "$T" "$B" run $L2C --prompt hi --threads 0
same_err "bench --threads 0" "$T" "$B" bench $L2C --threads 0
same_err "forward --threads 0" "$T" "$B" forward $L2C --tokens 1 --dump "$TMP/d" --threads 0
same_err "bisect --threads 0" "$T" "$B" bisect "$TMP/none.db" --reference --threads 0
same_err "serve --threads 0" "$T" "$B" serve $L2C --threads 0
same_err "probe --threads 0" "$T" "$B" probe --model "$STORIES" --threads 0
same_err "ctxwalk --threads 0" "$T" "$B" ctxwalk --model "$STORIES" --threads 0
[ -e "$TMP/d" ] && fail "forward made its dump folder before refusing a flag"

# --device: run, bench, forward, bisect; the list comes from the device table
D="--device expects cpu, cuda or cuda:N, got 'tpu'"
same_err "run --device tpu" "$D" "$B" run $L2C --prompt hi --device tpu
same_err "bench --device tpu" "$D" "$B" bench $L2C --device tpu
same_err "forward --device tpu" "$D" "$B" forward $L2C --tokens 1 --dump "$TMP/d" --device tpu
same_err "bisect --device tpu" "$D" "$B" bisect "$TMP/none.db" --reference --device tpu
same_err "run --device cuda:-1" "--device expects cpu, cuda or cuda:N, got 'cuda:-1'" "$B" run $L2C --prompt hi --device cuda:-1

# --numerics: run, bench, bisect give the parser's one line
"$B" run $L2C --prompt hi --numerics act=f13 2>"$TMP/nerr" >/dev/null
N=$(sed 's/^bangtrace: run: //' "$TMP/nerr")
case $N in *act*) ok "run --numerics act=f13: '$N'" ;; *) fail "run --numerics act=f13: $(cat "$TMP/nerr")" ;; esac
same_err "bench --numerics act=f13" "$N" "$B" bench $L2C --numerics act=f13
same_err "bisect --numerics act=f13" "$N" "$B" bisect "$TMP/none.db" --reference --numerics act=f13

# --engine and the --llama-* flags: run, forward (bench: --llama-* with --against)
E="--engine expects native or llama.cpp, got 'vllm'"
same_err "run --engine vllm" "$E" "$B" run $L2C --prompt hi --engine vllm
same_err "forward --engine vllm" "$E" "$B" forward $L2C --tokens 1 --dump "$TMP/d" --engine vllm
R="--llama-repack 'maybe': use on or off"
same_err "run --llama-repack maybe" "$R" "$B" run $L2C --prompt hi --llama-repack maybe
same_err "bench --llama-repack maybe" "$R" "$B" bench $L2C --llama-repack maybe
same_err "forward --llama-repack maybe" "$R" "$B" forward $L2C --tokens 1 --dump "$TMP/d" --llama-repack maybe
same_err "run --llama-repack without the engine" "the --llama-* flags choose llama.cpp's path: give --engine llama.cpp" \
    "$B" run $L2C --prompt hi --llama-repack off
same_err "forward --llama-repack without the engine" "the --llama-* flags choose llama.cpp's path: give --engine llama.cpp" \
    "$B" forward $L2C --tokens 1 --dump "$TMP/d" --llama-repack off
same_err "bench --llama-repack without --against" "the --llama-* flags choose llama.cpp's path: give --against llama.cpp" \
    "$B" bench $L2C --llama-repack off
same_err "run --engine llama.cpp --device cuda:0" "--device with --engine llama.cpp expects cpu or cuda, got 'cuda:0'" \
    "$B" run --model "$MODELS/gguf-tiny/llama-2-tiny-random.gguf" --prompt hi --engine llama.cpp --device cuda:0

# --ctx: each command's lower bound (run 1; serve and ctxwalk 16)
same_err "run --ctx 0" "--ctx expects an integer in [1, 1048576], got '0'" "$B" run $L2C --prompt hi --ctx 0
same_err "serve --ctx 8" "--ctx expects an integer in [16, 1048576], got '8'" "$B" serve $L2C --ctx 8
same_err "ctxwalk --ctx 8" "--ctx expects an integer in [16, 1048576], got '8'" "$B" ctxwalk --model "$STORIES" --ctx 8

# --model: one text where a command requires it; inspect takes one model
same_err "run without --model" "--model is required (see bangtrace help run)" "$B" run --prompt hi
same_err "bench without --model" "--model is required (see bangtrace help bench)" "$B" bench
same_err "serve without --model" "--model is required (see bangtrace help serve)" "$B" serve
same_err "inspect two models" "more than one model given ('a' and 'b')" "$B" inspect --model a -m b
same_err "bench --model at the end" "--model needs a value" "$B" bench --model

# the CUDA features: one text in run and bench, read from the table
same_err "run --cuda-graphs on the CPU" "--cuda-graphs needs --device cuda (the CPU backend has no CUDA graphs)" \
    "$B" run $L2C --prompt hi --cuda-graphs
same_err "bench --cuda-graphs on the CPU" "--cuda-graphs needs --device cuda (the CPU backend has no CUDA graphs)" \
    "$B" bench $L2C --cuda-graphs
same_err "bench --cupti --device cpu" "--cupti needs --device cuda (the CPU backend has no CUDA activity)" \
    "$B" bench $L2C --cupti --taps all --device cpu
same_err "bench --against llama.cpp --device cuda" "--against llama.cpp compares CPU engines: --device cuda cannot apply" \
    "$B" bench $L2C --against llama.cpp --device cuda

# the short aliases are each command's own, as before: -m/-t where they were
same_err "run -t 0" "-t expects an integer in [1, 256], got '0'" "$B" run -m "$STORIES" --tokenizer "$TOK512" --prompt hi -t 0
same_err "forward has no -t" "unknown flag '-t' (see bangtrace help forward)" "$B" forward $L2C --tokens 1 --dump "$TMP/d" -t 1
same_err "serve has no -t" "unknown flag '-t' (see bangtrace help serve)" "$B" serve $L2C -t 1
same_err "ctxwalk has no -m" "unknown flag '-m' (see bangtrace help ctxwalk)" "$B" ctxwalk -m "$STORIES"

# a CPU trace records its backend as it always has: cpu-<SIMD>
"$B" -v run $L2C --prompt "Once" -n 2 --trace "$TMP/t.db" >/dev/null 2>"$TMP/v" || fail "run --trace: $(tail -n 3 "$TMP/v")"
simd=$(sed -n 's/.*debug: kernels: \(cpu-[a-z0-9]*\),.*/\1/p' "$TMP/v")
meta=$("${PYTHON3:-python3}" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT value FROM meta WHERE key='backend'\").fetchone()[0])" "$TMP/t.db" 2>&1)
if [ -n "$simd" ] && [ "$meta" = "$simd" ]; then ok "meta backend is $meta"; else fail "meta backend '$meta', the kernels say '$simd'"; fi
finish
