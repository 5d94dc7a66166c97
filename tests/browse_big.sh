#!/bin/sh
# A big trace (>= 100k steps, about 0.5 GB, SmolLM2-shaped: 30 layers, 393
# tapped tensors) opens without loading whole tables: the browser's first
# screens, the walk-back and its dumps come back right. The open time is
# printed as a figure (browse --time-open), never asserted: timing belongs
# to benchmarks, not tests.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
"$PY" -c 'import sqlite3' 2>/dev/null || skip "python3 with sqlite3 is needed to build the big trace"
steps=${BT_BIG_STEPS:-100000}
free_kb=$(df -Pk "$TMP" | awk 'NR == 2 {print $4}')
[ "$free_kb" -gt 1500000 ] || skip "less than 1.5 GB free in $TMP for a $steps-step trace"
t0=$(date +%s)
"$PY" "$BT_SRCDIR/tests/data-gen/make_trace.py" big "$TMP/big.db" --steps "$steps" \
    --schema "$BT_SRCDIR/traces/schema.sql" > /dev/null || { fail "make_trace.py big failed"; finish; }
echo "built a $steps-step trace of $(($(wc -c < "$TMP/big.db") / 1000000)) MB in $(($(date +%s) - t0)) s"
expect_exit 0 "browse --time-open" "$BANGTRACE" browse "$TMP/big.db" --time-open && sed 's/^/  figure: /' "$TMP/out"
grep -q "^steps 0\.\.$((steps - 1)) " "$TMP/out" && ok "bounds of all $steps steps" || fail "bounds: $(head -1 "$TMP/out")"
bad=$((steps - 20000))
expect_exit 0 "--dump walkback" "$BANGTRACE" browse "$TMP/big.db" --dump walkback
grep -q "step $bad, layer 17, ffn_down" "$TMP/out" && ok "walk-back finds step $bad, layer 17, ffn_down" \
    || fail "walk-back: $(head -c 400 "$TMP/out")"
expect_exit 0 "--dump tokens near the end" "$BANGTRACE" browse "$TMP/big.db" --dump tokens --step $((steps - 10))
grep -q 'x20000' "$TMP/out" && ok "the 20000-token run is one cell" || fail "run cell: $(head -c 400 "$TMP/out")"
expect_exit 1 "bisect on the big trace finds the fault" "$BANGTRACE" bisect "$TMP/big.db" --json
grep -q '"step": *'"$bad" "$TMP/out" && grep -q '"op": *"ffn_down"' "$TMP/out" && ok "bisect: step $bad, ffn_down" \
    || fail "bisect json: $(head -c 400 "$TMP/out")"
rm -f "$TMP/big.db"
finish
