#!/bin/sh
# fuzz.sh - every libFuzzer harness for a short budget (BT_FUZZ_SECONDS,
# default 20 s each) as one test of `make check` in a --enable-fuzz tree.
# A crash fails the test; the log names the artifact to reproduce it with
# (tests/fuzz/fuzz_T ARTIFACT).
. "${BT_SRCDIR:-.}/tests/lib.sh"
[ -x "$BT_BUILDDIR/tests/fuzz/fuzz_gguf" ] || skip "fuzz harnesses not built (configure --enable-fuzz with clang)"
sh "$BT_SRCDIR/tests/fuzz/run.sh" "${BT_FUZZ_SECONDS:-20}" || fail "a fuzz target failed (see above)"
finish
