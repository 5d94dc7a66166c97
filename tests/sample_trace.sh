# tests/sample_trace.sh - the sample trace shipped in traces/ (case 1 of
# examples/incidents, exported with --redact --window 4) opens in the browser
# and bisects to the injected op, with nothing but the binary.
. "${BT_SRCDIR:-.}/tests/lib.sh"
T=${BT_SRCDIR:-.}/traces/wall-of-bang.db
[ -f "$T" ] || { fail "$T is missing"; finish; }
size=$(wc -c < "$T")
[ "$size" -lt 1048576 ] && ok "sample trace is under 1 MiB ($size bytes)" || fail "sample trace is $size bytes"
# A copy, so that nothing (not even a -shm file) is written into the source tree.
cp "$T" "$TMP/s.db"
expect_exit 0 "browse --dump walkback opens it" "$BANGTRACE" browse "$TMP/s.db" --dump walkback
grep -q '^first non-finite: step 5, layer 17, ffn_down' "$TMP/out" && ok "walk-back starts at step 5, layer 17, ffn_down" \
    || fail "walk-back: $(head -2 "$TMP/out")"
expect_exit 0 "browse --dump step --step 5" "$BANGTRACE" browse "$TMP/s.db" --dump step --step 5
grep -q '^  argmax triton 49152 ' "$TMP/out" && ok "step 5: triton-block argmax is 49152" || fail "step 5: $(grep argmax "$TMP/out")"
expect_exit 1 "bisect finds the fault" "$BANGTRACE" bisect "$TMP/s.db"
grep -q '^first non-finite: step 5, position 41, layer 17, op ffn_down (blk.17.ffn_down), index 0: 3 NaN' "$TMP/out" \
    && ok "bisect: step 5, layer 17, ffn_down" || fail "bisect: $(grep '^first' "$TMP/out")"
grep -q '^explanation: step 5: logits all NaN; rule first -> id 0' "$TMP/out" \
    && ok "bisect: explanation of step 5" || fail "bisect explanation: $(grep '^expl' "$TMP/out")"
grep -q 'capital of France' "$T" && fail "the sample trace holds prompt text" || ok "no prompt text in the sample trace"
cmp -s "$T" "$TMP/s.db" && ok "reading left the trace byte for byte unchanged" || fail "browse or bisect changed the trace they read"
finish
