#!/bin/sh
# tests/gpu/check.sh is ready for a GPU machine but cannot run here: it must
# parse (bash -n), refuse a bad command line with exit 2, and SKIP (exit 77,
# "SKIP" in its summary file) where no GPU is visible - simulated with an
# nvidia-smi that lists none, so the test means the same on a GPU machine.
. "${BT_SRCDIR:-.}/tests/lib.sh"
S=${BT_SRCDIR:-.}
command -v bash >/dev/null 2>&1 || skip "bash not installed"
bash -n "$S/tests/gpu/check.sh" && ok "check.sh parses" || fail "bash -n tests/gpu/check.sh failed"
expect_exit 2 "check.sh without OUTDIR is a usage error" bash "$S/tests/gpu/check.sh"
mkdir -p "$TMP/bin"
printf '#!/bin/sh\nexit 9\n' > "$TMP/bin/nvidia-smi"
chmod +x "$TMP/bin/nvidia-smi"
PATH="$TMP/bin:$PATH" bash "$S/tests/gpu/check.sh" "$TMP/gpu" > "$TMP/log" 2>&1
rc=$?
[ $rc -eq 77 ] && ok "no GPU: check.sh exits 77" || fail "no GPU: check.sh exited $rc, not 77: $(cat "$TMP/log")"
grep -q '^SKIP: nvidia-smi lists no GPU' "$TMP/gpu/summary.txt" 2>/dev/null && ok "the summary says SKIP and why" ||
    fail "summary.txt does not say SKIP: $(cat "$TMP/gpu/summary.txt" 2>&1)"
grep -q PASS "$TMP/log" && fail "a skipped check.sh printed PASS"
finish
