# browse_dump.sh - `bangtrace browse --dump VIEW` on traces built with SQL
# (tests/data-gen/make_trace.py): the walk-back names the injected step,
# layer and op; the wall of '!' is one cell with its count; hostile token
# text comes out escaped; the far-above-median tap is flagged; files that are
# not traces fail with one line and exit 2 before any terminal handling.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
command -v "$PY" >/dev/null 2>&1 || skip "python3 not found (needed to build test traces)"
"$PY" -c 'import sqlite3' 2>/dev/null || skip "python3 has no sqlite3 module"
GEN=$BT_SRCDIR/tests/data-gen/make_trace.py
for k in clean collapse foreign; do
    "$PY" "$GEN" $k "$TMP/$k.db" || { echo "FAIL: make_trace.py $k"; exit 1; }
done

# no byte below 0x20 except newline, no DEL: nothing that could drive a terminal
plain() { "$PY" -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(1 if any((b < 32 and b != 10) or b == 127 for b in d) else 0)' "$1"; }
has() { grep -qF -- "$2" "$1" || { fail "$3: '$2' not in output: $(head -c 600 "$1")"; return 1; }; }

expect_exit 0 "dump walkback" "$BANGTRACE" browse "$TMP/collapse.db" --dump walkback &&
    has "$TMP/out" "first non-finite: step 9, layer 3, ffn_gate: 1 NaN of 172 (index 5)" "walkback" &&
    has "$TMP/out" "via KV cache" "walkback chain" && plain "$TMP/out" && ok "walkback names step 9, layer 3, ffn_gate"

expect_exit 0 "dump tokens" "$BANGTRACE" browse "$TMP/collapse.db" --dump tokens &&
    has "$TMP/out" "! x50" "tokens" && grep -qE ' gen +! +50 +! x50$' "$TMP/out" && ok "the wall of '!' is one non-finite cell x50" ||
    fail "wall cell: $(grep x50 "$TMP/out")"

expect_exit 0 "dump step 9" "$BANGTRACE" browse "$TMP/collapse.db" --dump step --step 9 &&
    has "$TMP/out" "! blk.3.ffn_gate" "step 9" && has "$TMP/out" "1 NaN of 172 (index 5, pos 13)" "step 9" &&
    has "$TMP/out" "logits pos 13: 512 NaN of 512" "step 9" && grep -qE '^L03 +\. .*!' "$TMP/out" && ok "step 9 grid and taps"

expect_exit 0 "dump step 30 (clean trace)" "$BANGTRACE" browse "$TMP/clean.db" --dump step --step 30 &&
    has "$TMP/out" "~ blk.2.ffn_down" "hot tap" && has "$TMP/out" "taps: 0 non-finite, 1 far above median" "hot tap" &&
    ok "a tap far above its median is flagged '~'"

expect_exit 0 "dump tokens (hostile pieces)" "$BANGTRACE" browse "$TMP/clean.db" --dump tokens --all &&
    has "$TMP/out" '\x1b[31mred\x1b[0m' "sanitized ESC" && has "$TMP/out" '\x07' "sanitized BEL" && has "$TMP/out" '\r' "sanitized CR" &&
    has "$TMP/out" "la x3" "short run" && { plain "$TMP/out" && ok "ESC, BEL and CR in token pieces are shown escaped, never sent" ||
    fail "control bytes in the tokens dump"; }

expect_exit 0 "dump walkback (clean)" "$BANGTRACE" browse "$TMP/clean.db" --dump walkback && has "$TMP/out" "trace is clean" "clean walkback" &&
    ok "a clean trace says so"
expect_exit 0 "dump run" "$BANGTRACE" browse "$TMP/collapse.db" --dump run && has "$TMP/out" "nan@step=9,layer=3,op=ffn_gate" "run" &&
    has "$TMP/out" "first_nonfinite" "run events" && plain "$TMP/out" && ok "run metadata and events"
expect_exit 0 "dump backtrace" "$BANGTRACE" browse "$TMP/collapse.db" --dump backtrace && has "$TMP/out" "bt_engine_forward" "backtrace" &&
    ok "backtrace frames"
expect_exit 0 "dump cache (not a batched server's trace)" "$BANGTRACE" browse "$TMP/collapse.db" --dump cache &&
    has "$TMP/out" "not a batched server's trace (no kv_access)" "cache" && [ "$(wc -l < "$TMP/out")" -eq 1 ] &&
    ok "the Cache view of an ordinary trace: one line"

# Not traces: one line on stderr naming the file, exit 2, nothing on stdout.
head -c 5000 /dev/urandom >"$TMP/garbage.db"
: >"$TMP/empty.db"
head -c 40000 "$TMP/collapse.db" >"$TMP/truncated.db"
printf 'SQLite format 3\000 but not really\n' >"$TMP/fake.db"
for f in foreign garbage empty truncated fake missing; do
    expect_exit 2 "browse $f.db" "$BANGTRACE" browse "$TMP/$f.db" || continue
    [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$f.db" "$TMP/err" && [ ! -s "$TMP/out" ] &&
        ok "$f.db: $(cat "$TMP/err")" || fail "$f.db: expected one line naming the file, got: $(cat "$TMP/err")"
done
expect_exit 2 "bad --dump view" "$BANGTRACE" browse "$TMP/collapse.db" --dump nope
expect_exit 2 "--step out of range" "$BANGTRACE" browse "$TMP/collapse.db" --dump step --step 999
expect_exit 2 "not a terminal" "$BANGTRACE" browse "$TMP/collapse.db" </dev/null
# a build without ncursesw has no interactive browser and says so instead
built_with NCURSESW && want="not a terminal" || want="built without ncursesw"
[ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "$want" "$TMP/err" || fail "no one-line '$want' message: $(cat "$TMP/err")"
finish
