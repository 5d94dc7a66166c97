#!/bin/sh
# The CUDA backend against the CPU backend, op by op (tests/test_backend.c);
# SKIP where the plugin, the driver or a GPU is missing. Then the CLI: without
# a usable device, --device cuda is a one-line error and exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=${BT_BUILDDIR:-.}
[ -x "$B/tests/test_backend" ] || { fail "$B/tests/test_backend not built"; finish; }
# a plugin built into the build tree sits beside bangtrace, not beside the test
BANGTRACE_PLUGIN_DIR=${BANGTRACE_PLUGIN_DIR:-$B}; export BANGTRACE_PLUGIN_DIR
"$B/tests/test_backend" cuda >"$TMP/backend" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
    need_shared
    # the device could not run for test_backend, so it cannot for run either
    expect_exit 2 "--device cuda without a usable device is exit 2" \
        "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once" -n 2 --device cuda
    [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "cuda" "$TMP/err" && ok "one-line error naming cuda" ||
        fail "error: $(cat "$TMP/err")"
    [ "$failures" -eq 0 ] || finish
    skip "$(head -1 "$TMP/backend")"
fi
[ "$rc" -eq 0 ] && ok "cuda ops match the CPU backend: $(tail -1 "$TMP/backend")" || fail "test_backend cuda: $(tail -20 "$TMP/backend")"
finish
