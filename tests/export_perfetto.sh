#!/bin/sh
# export --perfetto: Chrome trace-event JSON that ui.perfetto.dev opens.
# A synthetic trace with kernels, op timings and a first_nonfinite event
# (tests/test_kernel_rows OUT.db) and a real CPU run are exported; python3
# checks the structure: valid JSON, a traceEvents list, every event with
# ph/pid/tid/name, only known ph values, ts >= 0 and non-decreasing within
# each track, X events with dur >= 0, the host step/op tracks, device
# kernel tracks, the detector event as an instant. OUT follows the output
# rules (no clobbering without --force, never the trace itself).
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=${BT_BUILDDIR:-.}
py=${PYTHON3:-python3}
command -v "$py" >/dev/null 2>&1 || skip "python3 not installed"
command -v sqlite3 >/dev/null 2>&1 || skip "sqlite3 shell not installed"
"$B/tests/test_kernel_rows" "$TMP/k.db" || { fail "test_kernel_rows could not write the synthetic trace"; finish; }

check_json() {   # check_json FILE WANT_KERNELS(0|1) WANT_OPS(0|1)
    "$py" - "$@" <<'PY'
import json, sys
path, want_k, want_ops = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
d = json.load(open(path))
ev = d["traceEvents"]
assert isinstance(ev, list) and ev, "no traceEvents"
last = {}
names = {}
for e in ev:
    for f in ("ph", "pid", "name"):
        assert f in e, "event without %s: %r" % (f, e)
    assert e["ph"] in ("X", "i", "M"), "unknown ph %r" % e["ph"]
    assert isinstance(e["pid"], int)
    if e["ph"] == "M":
        names[(e["pid"], e.get("tid"))] = e["args"]["name"]
        continue
    assert isinstance(e.get("tid"), int), "event without an integer tid: %r" % e
    assert e["ts"] >= 0, e
    if e["ph"] == "X":
        assert e["dur"] >= 0, e
    key = (e["pid"], e["tid"], e["ph"])
    assert e["ts"] >= last.get(key, 0), "ts goes back on track %r: %r" % (key, e)
    last[key] = e["ts"]
steps = [e for e in ev if e.get("cat") == "step"]
assert steps and all(e["pid"] == 1 and e["tid"] == 1 for e in steps), "no step track"
assert names.get((1, None)) == "host" and names.get((1, 1)) == "steps"
ops = [e for e in ev if e.get("cat") == "op"]
kern = [e for e in ev if e.get("cat") == "kernel"]
if want_ops:
    assert ops and names.get((1, 2)) == "ops", "no op timings"
    assert steps[0]["args"]["synthetic_time"] is False
else:
    assert steps[0]["args"]["synthetic_time"] is True
if want_k:
    assert kern and all(e["pid"] >= 2 for e in kern), "no device track"
    assert names.get((2, None)) == "cuda:0" and names.get((2, 13)) == "stream 13"
    bad = [e for e in kern if e["args"]["step"] == 1 and e["args"]["layer"] == 1 and e["args"]["op"] == "ffn_down"]
    assert any(e["name"] == "bt_k_matmul" and e["args"]["registers"] == 32 for e in bad), "kernel of the bad op missing"
    assert any(e.get("cat") == "memcpy" and e["args"]["bytes"] == 512 for e in ev), "copy missing"
    inst = [e for e in ev if e["ph"] == "i"]
    assert any(e["name"] == "first_nonfinite" and e["args"]["op"] == "ffn_down" for e in inst), "event instant missing"
print("ok")
PY
}

"$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/k.json" 2> "$TMP/err" && ok "export --perfetto of a kernel trace" ||
    fail "export --perfetto failed: $(cat "$TMP/err")"
[ "$(check_json "$TMP/k.json" 1 1 2>&1)" = ok ] && ok "kernel timeline: valid trace-event JSON with host, op, device tracks and the event" ||
    fail "kernel timeline: $(check_json "$TMP/k.json" 1 1 2>&1 | tail -3)"

# --perfetto - : the same JSON on standard output, no file named '-'
(cd "$TMP" && "$BANGTRACE" export "$TMP/k.db" --perfetto - > "$TMP/k-stdout.json" 2> "$TMP/err") &&
    cmp -s "$TMP/k.json" "$TMP/k-stdout.json" && [ ! -e "$TMP/-" ] && ok "--perfetto - writes the same JSON to stdout" ||
    fail "--perfetto -: $(cat "$TMP/err")"
expect_exit 2 "--perfetto - with stdout on a full disk is exit 2" sh -c '"$0" export "$1" --perfetto - > /dev/full' "$BANGTRACE" "$TMP/k.db"
expect_exit 2 "an existing OUT.json is refused without --force" "$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/k.json"
expect_exit 0 "--force replaces it" "$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/k.json" --force
expect_exit 2 "the trace itself is never the output" "$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/k.db" --force
expect_exit 2 "--perfetto with -o is a usage error" "$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/x.json" -o "$TMP/x.db"
[ -e "$TMP/x.json" ] && fail "a refused export left $TMP/x.json behind"
ln -s "$TMP/k.json" "$TMP/link.json"
expect_exit 2 "a link is never the output" "$BANGTRACE" export "$TMP/k.db" --perfetto "$TMP/link.json" --force
ls "$TMP" | grep -q 'k.json\.' && fail "a temporary file was left beside OUT"

# export -o keeps the device activity and op timings
"$BANGTRACE" export "$TMP/k.db" -o "$TMP/copy.db" --all-steps 2> "$TMP/err" || fail "export -o: $(cat "$TMP/err")"
[ "$(sqlite3 "$TMP/copy.db" "SELECT (SELECT count(*) FROM kernels) || ' ' || (SELECT count(*) FROM op_timings)" 2>&1)" = "25 12" ] &&
    ok "export -o copies kernels and op_timings" || fail "export -o lost kernels/op_timings"

if [ -f "$STORIES" ]; then
    "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once" -n 6 --trace "$TMP/cpu.db" > /dev/null 2>&1 ||
        fail "run --trace failed"
    "$BANGTRACE" export "$TMP/cpu.db" --perfetto "$TMP/cpu.json" 2> "$TMP/err" || fail "export of a CPU trace: $(cat "$TMP/err")"
    [ "$(check_json "$TMP/cpu.json" 0 0 2>&1)" = ok ] && ok "CPU trace without timings: steps laid end to end" ||
        fail "CPU timeline: $(check_json "$TMP/cpu.json" 0 0 2>&1 | tail -3)"
    # run --timing: every op's host duration, on the op track
    "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once" -n 6 --timing --trace "$TMP/tm.db" > /dev/null 2>&1 ||
        fail "run --timing failed"
    n=$(sqlite3 "$TMP/tm.db" "SELECT (SELECT count(*) FROM op_timings) = (SELECT count(*) FROM v_taps) AND
        (SELECT count(*) FROM op_timings WHERE dur_ns < 0) = 0" 2>&1)
    [ "$n" = 1 ] && ok "run --timing: one non-negative duration per tap" || fail "run --timing: op_timings do not match the taps ($n)"
    "$BANGTRACE" export "$TMP/tm.db" --perfetto "$TMP/tm.json" 2> "$TMP/err" || fail "export of a --timing trace: $(cat "$TMP/err")"
    [ "$(check_json "$TMP/tm.json" 0 1 2>&1)" = ok ] && ok "--timing trace: ops on the host op track" ||
        fail "--timing timeline: $(check_json "$TMP/tm.json" 0 1 2>&1 | tail -3)"
    expect_exit 2 "--timing without every op tapped is refused" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" \
        --prompt Once -n 2 --timing --taps layers --trace "$TMP/tl.db"
    expect_exit 2 "--timing without --trace is refused" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt Once -n 2 --timing
else
    echo "note: $STORIES not found, the CPU run part is skipped"
fi
finish
