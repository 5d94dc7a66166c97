#!/bin/sh
# libbangtrace (src/api/bangtrace.h) through its Python binding (python/bangtrace,
# ctypes; no torch): only bangtrace_* is exported; bad calls get one-line
# errors and change nothing (a file that is not a trace is never replaced);
# a run recorded from statistics of host data (bangtrace_stats) is a trace
# every command reads: bisect names the NaN a "kernel" wrote (step, layer,
# op, index), report and browse --dump read it, the token trail and the
# engine are the caller's.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy, gguf" 2>/dev/null || skip "numpy and gguf are needed (pip install numpy gguf)"
lib=$BT_BUILDDIR/libbangtrace.so
[ -f "$lib" ] || { fail "libbangtrace.so was not built ($lib)"; finish; }
other=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[TDBRW]$/ && $3 !~ /^bangtrace_/ { print $3 }')
[ -z "$other" ] && ok "libbangtrace.so exports bangtrace_* only" || fail "libbangtrace.so also exports: $(echo $other | head -c 300)"
# every symbol resolves (the link has no -z defs: a clang sanitizer build leaves its runtime's to the program)
if ! grep -q "^CFLAGS = .*fsanitize" "$BT_BUILDDIR/Makefile" 2>/dev/null; then
    ldd -r "$lib" 2>&1 | grep -q 'undefined symbol' && fail "libbangtrace.so has undefined symbols: $(ldd -r "$lib" 2>&1 | grep -m3 'undefined symbol')" \
        || ok "libbangtrace.so resolves every symbol"
fi
"$py" "$BT_SRCDIR/tests/oracle/make_random_gguf.py" "$TMP/m.gguf" --arch qwen3 --layers 2 >/dev/null || fail "make_random_gguf"
"$py" "$BT_SRCDIR/tests/oracle/make_random_gguf.py" "$TMP/moe.gguf" --arch qwen3moe --layers 2 --experts 8 --experts-used 2 \
    >/dev/null || fail "make_random_gguf qwen3moe"
echo "not a trace" > "$TMP/mine.txt"
BANGTRACE_LIB=$lib PYTHONPATH=$BT_SRCDIR/python "$py" - "$TMP" <<'PY' > "$TMP/out" 2>&1 || fail "the Python checks (below)"
import os, sys
import numpy as np
import bangtrace
from bangtrace import _lib
T = sys.argv[1]
bad = []
def expect_error(what, fn, *words):
    try:
        fn()
    except bangtrace.BangtraceError as e:
        msg = str(e)
        if "\n" in msg or not all(w in msg for w in words):
            bad.append("%s: message %r lacks %s" % (what, msg, words))
        else:
            print("ok: %s -> %s" % (what, msg))
        return
    bad.append("%s: no error" % what)

expect_error("a missing model", lambda: bangtrace.Model(os.path.join(T, "nope.gguf")), "nope.gguf")
m = bangtrace.Model(os.path.join(T, "m.gguf"))
assert m.arch == "qwen3" and m.n_layers == 2, (m.arch, m.n_layers)
names = [t.name for t in m.tensors]
assert names[0] == "token_embd" and names[-1] == "logits" and "blk.1.ffn_down" in names, names
assert m.weight_tensor("model.layers.1.mlp.down_proj.weight").name == "blk.1.ffn_down"
assert m.weight_tensor("blk.0.attn_q_norm.weight").name == "blk.0.attn_q_norm"
assert m.weight_tensor("lm_head.weight").name == "logits"
assert m.weight_tensor("model.layers.0.self_attn.q_proj.bias") is None
print("ok: the model's layout: %d tensors, token_embd .. logits; HF and GGUF weight names map to them" % len(names))
expect_error("an engine named native", lambda: bangtrace.Recording(m, os.path.join(T, "x.db"), "native"), "engine")
expect_error("a file that is not a trace", lambda: bangtrace.Recording(m, os.path.join(T, "mine.txt"), "toy", force=True), "mine.txt")
assert open(os.path.join(T, "mine.txt")).read() == "not a trace\n"
rng = np.random.default_rng(3)
n, V = len(m.tensors), m.n_vocab
def step_stats(T_, poison=None):
    st = np.empty((n, _lib.STAT_COUNT))
    for i, t in enumerate(m.tensors):
        x = rng.standard_normal((T_, t.width)).astype(np.float32)
        if poison and t.name == poison[0]:
            x[poison[1], poison[2]] = np.nan
        st[i] = bangtrace.stats(x, _lib.F32, T_, t.width)
    return st
rec = bangtrace.Recording(m, os.path.join(T, "run.db"), "toy", "dtype=float32 device=cpu")
rec.meta("dtype", "float32")
expect_error("a key the caller may not write", lambda: rec.meta("model_sha256", "x"), "model_sha256")
expect_error("too few statistics rows", lambda: _lib.check(_lib.lib().bangtrace_forward(rec._h, (_lib.ctypes.c_int32 * 1)(1), 1, 0,
             _lib._ptr(np.zeros(12), _lib.ctypes.c_double), 1, _lib._ptr(np.zeros(V, np.float32), _lib.ctypes.c_float), 1)), "rows of statistics")
st = step_stats(4)
st[3, _lib.STAT_NAN] = 5
expect_error("counts that do not add up", lambda: rec.forward([1, 2, 3, 4], 0, st.reshape(-1), np.zeros(V, np.float32), 1), "do not add up", m.tensors[3].name)
prompt = [1, 2, 3, 4]
rec2 = bangtrace.Recording(m, os.path.join(T, "run2.db"), "toy")
rec2.forward(prompt, 0, step_stats(4).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
toks = []
for s in range(1, 4):
    tok = 7 + s
    toks.append(tok)
    poison = ("blk.1.ffn_down", 0, 9) if s == 2 else None
    rec2.forward([tok], len(prompt) + s - 1, step_stats(1, poison).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
rec2.sampled(42)
rec2.close(None, "length")
rec.close()
print("ok: a 4-step run recorded from host statistics")
# API 2: a prompt whose head came from the engine's prefix cache
assert _lib.lib().bangtrace_api_version() >= 2
rec3 = bangtrace.Recording(m, os.path.join(T, "run3.db"), "toy")
rec3.cached_prefix([1, 2, 3])
expect_error("a first forward not right after the cached prefix", lambda: rec3.forward([4, 5], 0, step_stats(2).reshape(-1),
             np.zeros(V, np.float32), 1), "cached prefix of 3 tokens", "position 3")
rec3.forward([4, 5], 3, step_stats(2).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
expect_error("a cached prefix after the prompt", lambda: rec3.cached_prefix([1]), "has its prompt already")
rec3.forward([9], 5, step_stats(1).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
rec3.sampled(11)
rec3.close(None, "length")
print("ok: a run whose prompt head was cached: its first forward at the prefix's end")
# API 3: a MoE forward's routing per token (moe_routes, as a native run's)
assert _lib.lib().bangtrace_api_version() >= 3
rec4 = bangtrace.Recording(m, os.path.join(T, "run4.db"), "toy")
rec4.forward([1, 2], 0, step_stats(2).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
expect_error("routes of a dense model", lambda: rec4.moe_routes(0, [[1, 2], [3, 4]], [[.5, .5], [.5, .5]]),
             "not a mixture-of-experts model")
rec4.close()
mm = bangtrace.Model(os.path.join(T, "moe.gguf"))
n, V = len(mm.tensors), mm.n_vocab
m = mm
rec5 = bangtrace.Recording(mm, os.path.join(T, "run5.db"), "toy")
expect_error("routes before a forward", lambda: rec5.moe_routes(0, [[1, 2]], [[.5, .5]]), "after bangtrace_forward")
rec5.forward([1, 2, 3], 0, step_stats(3).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
expect_error("routes of too few rows", lambda: rec5.moe_routes(0, [[1, 2]], [[.5, .5]]), "1 rows", "computed 3")
expect_error("an expert out of range", lambda: rec5.moe_routes(1, [[1, 2], [3, 8], [0, 1]], [[.5, .5]] * 3), "expert 8 of 8")
expect_error("a layer out of range", lambda: rec5.moe_routes(2, [[1, 2]] * 3, [[.5, .5]] * 3), "layer 2 of a 2-layer")
expect_error("more experts a row than the model has", lambda: rec5.moe_routes(0, [list(range(9))] * 3, [[.1] * 9] * 3),
             "9 experts a row")
rec5.moe_routes(0, [[5, 1], [0, 7], [2, 3]], [[.75, .25], [.5, .5], [float("nan"), .1]])
rec5.moe_routes(1, [[4, 6], [6, 4], [1, 0]], [[.6, .4], [.9, .1], [.3, .2]])
rec5.sampled(7)
rec5.forward([7], 3, step_stats(1).reshape(-1), rng.standard_normal(V).astype(np.float32), 1)
rec5.moe_routes(1, [[3, 2]], [[.8, .2]])
rec5.sampled(9)
rec5.close(None, "length")
print("ok: a MoE run's routes recorded per forward (bad calls refused in one line)")
if bad:
    print("\n".join("FAIL: " + b for b in bad))
    sys.exit(1)
PY
grep '^ok:' "$TMP/out" | sed 's/^ok: //' | while read -r l; do ok "$l"; done
grep '^FAIL\|Error\|Traceback' "$TMP/out" && cat "$TMP/out"
"$BANGTRACE" bisect --json "$TMP/run2.db" > "$TMP/b.json" 2>"$TMP/err"
"$py" - "$TMP/b.json" <<'PY' && ok "bisect names the NaN: step 2, blk.1.ffn_down, index 9, position 5" || fail "bisect: $(head -c 600 "$TMP/b.json")"
import json, sys
f = json.load(open(sys.argv[1]))["first_nonfinite"]
assert (f["step"], f["layer"], f["op"], f["first_bad_index"], f["pos"]) == (2, 1, "ffn_down", 9, 5), f
PY
"$BANGTRACE" report "$TMP/run2.db" > "$TMP/rep" 2>&1 && grep -q '| engine | toy |' "$TMP/rep" && grep -q 'blk.1.ffn_down' "$TMP/rep" \
    && ok "report reads it (engine toy, the first non-finite tensor)" || fail "report: $(head -c 400 "$TMP/rep")"
sqlite3 "$TMP/run2.db" "select group_concat(token_id, ' ') from (select token_id from tokens order by pos)" > "$TMP/ids" 2>/dev/null
[ "$(cat "$TMP/ids")" = "1 2 3 4 8 9 10 42" ] && ok "token trail: the prompt, each forward's input as the step before's token, the last sampled" \
    || fail "token trail: $(cat "$TMP/ids")"
sqlite3 "$TMP/run2.db" "select value from meta where key='status'" | grep -qx ok && ok "status ok after close" || fail "status"
[ "$(sqlite3 "$TMP/run3.db" "select group_concat(token_id, ' ') from (select token_id from tokens order by pos)")" = "1 2 3 4 5 9 11" ] &&
[ "$(sqlite3 "$TMP/run3.db" "select pos0 || ' ' || n_pos from steps where step = 0")" = "0 5" ] &&
[ "$(sqlite3 "$TMP/run3.db" "select mode || ' ' || pos_lo || ' ' || pos_hi from kv_access")" = "hit 0 2" ] &&
    ok "the cached prefix: prompt 1 2 3 4 5, step 0 covers positions 0-4, a kv_access hit for 0-2" ||
    fail "the cached-prefix trace: $(sqlite3 "$TMP/run3.db" "select * from steps; select * from kv_access" 2>&1 | head -5)"
"$BANGTRACE" browse --dump walkback "$TMP/run2.db" > /dev/null 2>&1 && ok "browse --dump reads it" || fail "browse --dump walkback"
"$py" - "$TMP/run5.db" <<'PY' && ok "moe_routes: each row's experts by rank and weights (a NaN weight kept), the decode step at its position" ||
import math, sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("select step, pos, layer, rank, expert, weight from moe_routes order by step, layer, pos, rank").fetchall()
want = [(0, 0, 0, 0, 5, .75), (0, 0, 0, 1, 1, .25), (0, 1, 0, 0, 0, .5), (0, 1, 0, 1, 7, .5), (0, 2, 0, 0, 2, "nan"),
        (0, 2, 0, 1, 3, .1), (0, 0, 1, 0, 4, .6), (0, 0, 1, 1, 6, .4), (0, 1, 1, 0, 6, .9), (0, 1, 1, 1, 4, .1),
        (0, 2, 1, 0, 1, .3), (0, 2, 1, 1, 0, .2), (1, 3, 1, 0, 3, .8), (1, 3, 1, 1, 2, .2)]
assert len(rows) == len(want), rows
for r, w in zip(rows, want):
    assert r[:5] == w[:5], (r, w)
    assert r[5] == w[5] if isinstance(w[5], str) else abs(r[5] - w[5]) < 1e-7, (r, w)
PY
    fail "moe_routes: $(sqlite3 "$TMP/run5.db" "select * from moe_routes" 2>&1 | head -20 | tr '\n' ' ')"
finish
