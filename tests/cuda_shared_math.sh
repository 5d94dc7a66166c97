#!/bin/sh
# cuda_shared_math.sh - the tap statistics the CUDA plugin computes are the
# code tests/test_cuda_math.c checks, not a copy of it: the reduction kernel
# (kernels/cuda/kernels.cu, bt_k_stats) runs math.cuh's per-thread step and
# tree fold, the plugin (backend_cuda.cu) turns an accumulator into
# bt_tap_stats only through math.cuh's bt_cu_stats_finish, the host
# emulation runs the same two steps, and the test calls those functions
# without computing a statistic itself. Reads sources only: needs no GPU
# and no nvcc.
. "${BT_SRCDIR:-.}/tests/lib.sh"
S=${BT_SRCDIR:-.}
CU=$S/kernels/cuda

# body FILE START: the lines from the first line matching START to the next
# closing brace in column 0
body() { awk -v s="$2" 'index($0, s) { on = 1 } on { print } on && /^}/ { exit }' "$1"; }

k=$(body "$CU/kernels.cu" "__global__ void bt_k_stats(")
[ -n "$k" ] || fail "bt_k_stats not found in kernels/cuda/kernels.cu"
printf '%s\n' "$k" | grep -q 'bt_cu_stats_thread(' && printf '%s\n' "$k" | grep -q 'bt_cu_stats_fold(' &&
    ok "the reduction kernel runs math.cuh's bt_cu_stats_thread and bt_cu_stats_fold" ||
    fail "bt_k_stats does not call bt_cu_stats_thread and bt_cu_stats_fold: $k"
printf '%s\n' "$k" | grep -q 'bt_cu_stats_add(\|bt_cu_stats_merge(' &&
    fail "bt_k_stats accumulates or merges by itself (a second copy of the reduction)" ||
    ok "the kernel has no reduction of its own"

e=$(body "$CU/math.cuh" "BT_HD void bt_cu_stats_emulate(")
printf '%s\n' "$e" | grep -q 'bt_cu_stats_thread(' && printf '%s\n' "$e" | grep -q 'bt_cu_stats_fold(' &&
    ok "the host emulation runs the kernel's two steps" || fail "bt_cu_stats_emulate: $e"

body "$CU/backend_cuda.cu" "static int finish_step(" | grep -q 'bt_cu_stats_finish(' &&
    ok "the plugin hands the taps bt_cu_stats_finish's statistics" ||
    fail "finish_step in backend_cuda.cu does not call bt_cu_stats_finish"
if grep -n 'first_bad_index\|n_finite\|->absmax' "$CU"/*.cu > "$TMP/own"; then
    fail "a .cu file fills bt_tap_stats itself: $(tr '\n' ' ' < "$TMP/own")"
else ok "no .cu file fills bt_tap_stats fields itself"; fi

t=$S/tests/test_cuda_math.c
grep -q 'bt_cu_stats_emulate(' "$t" && grep -q 'bt_cu_stats_finish(' "$t" && grep -q 'bt_stats_compute(' "$t" &&
    ok "test_cuda_math checks bt_cu_stats_emulate + bt_cu_stats_finish against bt_stats_compute" ||
    fail "test_cuda_math.c does not call bt_cu_stats_emulate, bt_cu_stats_finish and bt_stats_compute"
if grep -n 'first_bad_index *=[^=]\|n_finite *=[^=]\|absmax *=[^=]' "$t" > "$TMP/copy"; then
    fail "test_cuda_math.c computes statistics itself: $(tr '\n' ' ' < "$TMP/copy")"
else ok "test_cuda_math.c computes no statistic itself"; fi
finish
