#!/bin/sh
# The device kernel that wrote the first bad tensor (issue 10): bisect (text
# and --json) and report name it from v_kernels, joined by (step, layer, op),
# skipping the tap's own reduction (bt_k_stats). A synthetic kernel trace
# (tests/test_kernel_rows OUT.db: layer 1's ffn_down goes NaN at step 1,
# computed by bt_k_matmul and reduced by bt_k_stats) stands in for a
# `run --device cuda --cupti` trace; a CPU trace has no kernel rows and says
# so (JSON null, no kernel line).
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=${BT_BUILDDIR:-.}
py=${PYTHON3:-python3}
command -v "$py" >/dev/null 2>&1 || skip "python3 not installed"
"$B/tests/test_kernel_rows" "$TMP/k.db" || { fail "test_kernel_rows could not write the synthetic trace"; finish; }

"$BANGTRACE" bisect "$TMP/k.db" > "$TMP/b.txt" 2> "$TMP/b.err"
rc=$?
[ $rc -eq 1 ] && ok "bisect finds the fault (exit 1)" || fail "bisect exited $rc: $(cat "$TMP/b.err")"
grep -q '^device kernel: bt_k_matmul <<<(4,1,1), (128,1,1)>>> 1.4 us, stream 13, device 0 (2 kernels in this op' "$TMP/b.txt" &&
    ok "bisect names the kernel that wrote the first bad tensor" || fail "bisect: no device kernel line: $(cat "$TMP/b.txt")"

"$BANGTRACE" bisect "$TMP/k.db" --json > "$TMP/b.json" 2>&1
"$py" - "$TMP/b.json" <<'PY' && ok "bisect --json: first_nonfinite.kernel and its launch" || fail "bisect --json: $(cat "$TMP/b.json")"
import json, sys
f = json.load(open(sys.argv[1]))["first_nonfinite"]
assert f["kernel"] == "bt_k_matmul", f
k = f["kernel_launch"]
assert k["grid"] == [4, 1, 1] and k["block"] == [128, 1, 1] and k["kernels_in_op"] == 2, k
assert k["end_ns"] - k["start_ns"] == 1400 and k["stream"] == 13, k
PY

"$BANGTRACE" report "$TMP/k.db" > "$TMP/r.md" 2>&1
grep -q '^- \*\*Device kernel that wrote it:\*\* `bt_k_matmul <<<(4,1,1), (128,1,1)>>>' "$TMP/r.md" &&
    ok "report names the device kernel" || fail "report: no device kernel line"

# the browser's Kernels view (browse --dump kernels): the first bad step by
# default, its op marked, the kernel that wrote it highlighted
"$BANGTRACE" browse "$TMP/k.db" --dump kernels > "$TMP/kv.txt" 2>&1 || fail "browse --dump kernels: $(cat "$TMP/kv.txt")"
grep -q '^step 1: 6 ops, 12 device rows' "$TMP/kv.txt" && ok "Kernels view: the first bad step by default" ||
    fail "Kernels view header: $(head -1 "$TMP/kv.txt")"
grep -q '^first non-finite: blk.1.ffn_down, written by bt_k_matmul$' "$TMP/kv.txt" || fail "Kernels view: no first non-finite line"
grep -q '^! L01  ffn_down       op 2.5 us     kernels 1.7 us' "$TMP/kv.txt" && ok "Kernels view marks the first bad op with its durations" ||
    fail "Kernels view: the bad op is not marked: $(cat "$TMP/kv.txt")"
[ "$(grep -c '<- wrote the first bad tensor' "$TMP/kv.txt")" = 1 ] &&
    grep -q '^    \* bt_k_matmul .*<- wrote the first bad tensor' "$TMP/kv.txt" &&
    ok "Kernels view highlights the one kernel that wrote it" || fail "Kernels view: the writing kernel is not highlighted once"
grep -q '^      bt_k_stats .* (tap)$' "$TMP/kv.txt" || fail "Kernels view: the tap's reduction is not labelled"
"$BANGTRACE" browse "$TMP/k.db" --dump kernels --step 0 > "$TMP/kv0.txt" 2>&1
grep -q '^step 0:' "$TMP/kv0.txt" && ! grep -q '^!' "$TMP/kv0.txt" && ok "Kernels view --step 0: a clean step, nothing marked" ||
    fail "Kernels view --step 0: $(cat "$TMP/kv0.txt")"
expect_exit 2 "Kernels view of a step the trace lacks" "$BANGTRACE" browse "$TMP/k.db" --dump kernels --step 9

# a CPU trace: no kernel rows, no kernel line, JSON null; with --timing the
# Kernels view shows each op's host duration
need_shared
"$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once" -n 4 --inject 'nan@layer=1,op=ffn_down,step=2' \
    --timing --trace "$TMP/cpu.db" > /dev/null 2>&1
"$BANGTRACE" browse "$TMP/cpu.db" --dump kernels > "$TMP/kc.txt" 2>&1 || fail "browse --dump kernels (CPU): $(cat "$TMP/kc.txt")"
grep -q '^step 2: [0-9]* ops, 0 device rows; op time [0-9.]* us, kernel time -' "$TMP/kc.txt" &&
    grep -q '^no device activity recorded' "$TMP/kc.txt" && grep -q '^! L01  ffn_down       op [0-9.]* us  *kernels -' "$TMP/kc.txt" &&
    ok "Kernels view of a CPU --timing trace: op durations, the bad op marked, no kernels" ||
    fail "Kernels view (CPU): $(head -8 "$TMP/kc.txt")"
"$BANGTRACE" bisect "$TMP/cpu.db" > "$TMP/c.txt" 2>&1
grep -q 'device kernel' "$TMP/c.txt" && fail "a CPU trace printed a device kernel" || ok "a CPU trace prints no device kernel"
grep -q '^first non-finite: step 2' "$TMP/c.txt" || fail "the CPU trace's fault was not found: $(cat "$TMP/c.txt")"
"$BANGTRACE" bisect "$TMP/cpu.db" --json 2>/dev/null | "$py" -c '
import json, sys
f = json.load(sys.stdin)["first_nonfinite"]
assert "kernel" in f and f["kernel"] is None and "kernel_launch" not in f, f' &&
    ok "bisect --json on a CPU trace: kernel null" || fail "bisect --json on a CPU trace: kernel not null"
finish
