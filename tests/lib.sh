# tests/lib.sh - sourced by shell tests. Exit 77 = SKIP, 0 = PASS, else FAIL.
set -u
: "${BANGTRACE:?BANGTRACE must point at the built binary}"
: "${BT_SHARED:=${BT_SRCDIR:-.}/../shared}"
MODELS=$BT_SHARED/models
STORIES=$MODELS/llama2c/stories260K.bin
TOK512=$MODELS/llama2c/tok512.bin
SMOL=${BT_CACHE:-$HOME/.cache/bangtrace}/models/SmolLM2-135M-Instruct.Q4_1.gguf
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bt-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
need_shared() { [ -f "$STORIES" ] || skip "test data not found at $BT_SHARED (set BT_SHARED)"; }
need_smol() { [ -f "$SMOL" ] || skip "default model not cached at $SMOL (./quickstart fetches it)"; }
# A test of our HTTP server: the test data, libmicrohttpd and curl.
need_server() {
    need_shared
    built_with LIBMICROHTTPD || skip "built without libmicrohttpd"
    command -v curl >/dev/null || skip "curl not found"
}
# expect_exit CODE DESC CMD...: run CMD, check its exit status; output in $TMP/out, $TMP/err
expect_exit() {
    local want=$1 desc=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then fail "$desc: exit $got, expected $want; stderr: $(head -c 400 "$TMP/err")"; return 1; fi
    ok "$desc"
}
# make_bad_traces GOOD.db: files that are not (whole) traces, in $TMP:
# random.db, foreign.db (another program's SQLite), truncated.db (GOOD cut
# in half), corrupt.db (GOOD with every page header smashed), empty.db.
make_bad_traces() {
    py=${PYTHON3:-python3}
    head -c 8192 /dev/urandom > "$TMP/random.db"
    "$py" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('CREATE TABLE t(x)'); d.execute('INSERT INTO t VALUES (1)'); d.commit()" "$TMP/foreign.db"
    size=$(wc -c < "$1")
    head -c $((size / 2)) "$1" > "$TMP/truncated.db"
    "$py" -c "
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
for p in range(1, len(d) // 4096):
    d[p * 4096:p * 4096 + 8] = b'\x07\xff\xff\xff\xff\xff\xff\xff'
open(sys.argv[2], 'wb').write(d)" "$1" "$TMP/corrupt.db"
    : > "$TMP/empty.db"
}
# built_with FEATURE: the build under test was configured with it
# (LIBUNWIND, NCURSESW: HAVE_<FEATURE> in config.h).
built_with() { grep -q "^#define HAVE_$1 1" "${BT_BUILDDIR:-.}/config.h" 2>/dev/null; }
finish() { [ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }; exit 0; }
# Loopback servers for serve/probe/canary tests. free_port: a free TCP port
# on 127.0.0.1. start_server NAME ARGS...: `bangtrace serve` on stories260K
# (or $SERVE_MODEL) with ARGS, sets $port and $last_pid, appends the pid to
# $pids (the caller's EXIT trap kills them), waits for /health.
free_port() { "${PYTHON3:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_up URL PID TENTHS: 0 once URL/health answers, 1 when PID exits or
# TENTHS tenths of a second pass first (every test server's start).
wait_up() {
    _w=0
    while [ "$_w" -lt "$3" ]; do
        curl -sf "$1/health" >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1; _w=$((_w + 1))
    done
    return 1
}

start_server() {
    name=$1; shift
    port=$(free_port)
    # shellcheck disable=SC2086
    "$BANGTRACE" serve ${SERVE_MODEL:---model $STORIES --tokenizer $TOK512} --host 127.0.0.1 --port "$port" --threads 1 "$@" \
        2>"$TMP/$name.err" &
    last_pid=$!
    pids="${pids:-} $last_pid"
    wait_up "http://127.0.0.1:$port" "$last_pid" 100 && return 0
    fail "$name: server did not come up: $(cat "$TMP/$name.err")"
    return 1
}

# mtp_lossless NAME MODEL ECHO [RUN-ARGS...]: greedy --spec-k 3 --draft-mtp
# against plain decoding on both models (MODEL and its mtp-echo copy ECHO)
# for each of $PROMPTS ('|'-separated); sets same, runs, accepted (runs
# with an accepted draft) and rejected (runs with a rejection)
# tiny_mtp_model ARCH OUT: a tiny random model with an MTP (nextn) block,
# seed 7: a hybrid (tools/make-tiny-hybrid.py) or deepseek2 (MLA + MoE,
# tools/make-tiny-deepseek2.py --mtp 1); FAIL and status 1 if the tool fails.
tiny_mtp_model() {
    if [ "$1" = deepseek2 ]; then
        ${py:-python3} "$BT_SRCDIR/tools/make-tiny-deepseek2.py" "$2" --mtp 1 --seed 7 >"$TMP/tool.log" 2>&1
    else
        ${py:-python3} "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$2" --arch "$1" --mtp 1 --seed 7 >"$TMP/tool.log" 2>&1
    fi || { fail "the tiny $1 model with an MTP block: $(tail -1 "$TMP/tool.log")"; return 1; }
}

mtp_lossless() {
    _n=$1 _m=$2 _e=$3; shift 3
    same=0 runs=0 accepted=0 rejected=0
    IFS='|'
    for _p in $PROMPTS; do
        unset IFS
        for _x in "$_m" "$_e"; do
            "$BANGTRACE" run "$@" --model "$_x" --prompt "$_p" -n 40 --ignore-eos >"$TMP/plain.txt" 2>"$TMP/plain.err" \
                || fail "$_n plain run: $(tail -1 "$TMP/plain.err")"
            "$BANGTRACE" run "$@" --model "$_x" --prompt "$_p" -n 40 --ignore-eos --spec-k 3 --draft-mtp >"$TMP/spec.txt" \
                2>"$TMP/spec.err" || fail "$_n --draft-mtp: $(tail -1 "$TMP/spec.err")"
            runs=$((runs + 1))
            cmp -s "$TMP/plain.txt" "$TMP/spec.txt" && [ -s "$TMP/plain.txt" ] && same=$((same + 1))
            grep -Eq "speculation mtp k=3: [0-9]+ verify steps, [1-9][0-9]* of" "$TMP/spec.err" && accepted=$((accepted + 1))
            grep -q "(100%)" "$TMP/spec.err" || rejected=$((rejected + 1))
        done
        IFS='|'
    done
    unset IFS
}

# greedy_equal_llamacpp MODEL: run and run --engine llama.cpp (its defaults)
# on three prompts, 24 tokens each, one thread; the ids must be equal.
# field FILE EXPR: EXPR (Python, over the JSON in FILE as j), printed.
field() { "${PYTHON3:-python3}" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# json_ids FILE: a `run --json` answer's prompt and completion ids, one line.
json_ids() { "${PYTHON3:-python3}" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(map(str, d["prompt_ids"] + d["completion_ids"])))' "$1"; }
greedy_equal_llamacpp() {
    for _p in "Once upon a time" "The capital of France is" "1 2 3 4"; do
        "$BANGTRACE" run --model "$1" --prompt "$_p" -n 24 --threads 1 --json >"$TMP/a.json" 2>"$TMP/err" || { fail "run '$_p': $(cat "$TMP/err")"; continue; }
        "$BANGTRACE" run --engine llama.cpp --model "$1" --prompt "$_p" -n 24 --threads 1 --json >"$TMP/b.json" 2>"$TMP/err" ||
            { fail "run --engine llama.cpp '$_p': $(tail -2 "$TMP/err")"; continue; }
        _x=$(json_ids "$TMP/a.json"); _y=$(json_ids "$TMP/b.json")
        [ -n "$_x" ] && [ "$_x" = "$_y" ] && ok "greedy '$_p': 24 tokens equal to llama.cpp's" || fail "greedy '$_p': bangtrace [$_x] llama.cpp [$_y]"
    done
}

# cuda_refuses MODEL PATTERN: where the CUDA plugin is built, --device cuda
# refuses MODEL in one line matching PATTERN (exit 2), unless no device is
# usable at all (then it says so and the check cannot reach the model).
cuda_refuses() {
    [ -f "${BT_BUILDDIR:-.}/bangtrace-cuda.so" ] || return 0
    "$BANGTRACE" forward --device cuda --model "$1" --tokens "1 2" --dump "$TMP/cu" 2>"$TMP/err"; _rc=$?
    [ $_rc -eq 2 ] && grep -q "$2" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
        ok "--device cuda: $(cat "$TMP/err")" || grep -q -i "no usable cuda\|no cuda\|driver\|device" "$TMP/err" ||
        fail "--device cuda: exit $_rc, $(cat "$TMP/err")"
}
# need_torch: the PyTorch-engine tests' set-up: numpy and gguf (the tiny
# folders' writer), the built libbangtrace.so in $lib and tools/torch-env's
# environment in $env (created once under ~/.cache/bangtrace); SKIP only when
# that environment cannot be had.
need_torch() {
    py=${PYTHON3:-python3}
    "$py" -c "import numpy, gguf" 2>/dev/null || skip "numpy and gguf are needed to write the tiny folders"
    lib=$BT_BUILDDIR/libbangtrace.so
    [ -f "$lib" ] || { fail "libbangtrace.so was not built ($lib)"; finish; }
    env=$("$BT_SRCDIR/tools/torch-env" 2>"$TMP/torch-env.log") ||
        skip "no PyTorch environment: $(tail -n 1 "$TMP/torch-env.log")"
}
