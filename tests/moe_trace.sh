#!/bin/sh
# moe_trace.sh - a mixture-of-experts model (a random f32 qwen3moe GGUF,
# tests/oracle/make_random_gguf.py --arch qwen3moe) through run,
# the trace and its readers: every token's routes (moe_routes, v_moe_routes:
# k rows per token and layer, weights summing to 1); --inject into one
# expert's ffn_down lands there and bisect names it (blk.1.ffn_down.expert[E]);
# report and browse --dump routes show the routes; an expert spec that
# never matches says so; bad expert specs are one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
py=${PYTHON3:-python3}
"$py" -c "import gguf, numpy" 2>/dev/null || skip "python3 with gguf and numpy is needed to make the MoE model"
M=$TMP/moe.gguf
"$py" "$BT_SRCDIR/tests/oracle/make_random_gguf.py" "$M" --arch qwen3moe --experts 8 --experts-used 2 --seed 5 || { fail "make_random_gguf --experts"; finish; }

# 1. a clean traced run: routes for every token of every layer
expect_exit 0 "clean MoE run, traced" "$B" run --model "$M" --prompt "the dog ran" -n 6 --trace "$TMP/clean.db"
"$py" - "$TMP/clean.db" <<'PY' || fail "moe_routes of the clean run"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select step, pos, layer, rank, expert, weight from v_moe_routes").fetchall()
assert rows, "no routes recorded"
toks = c.execute("select count(*) from tokens").fetchone()[0]
# every (pos, layer) has ranks 0 and 1, distinct experts in range, weights summing to 1
by = {}
for step, pos, layer, rank, expert, weight in rows:
    by.setdefault((pos, layer), []).append((rank, expert, weight))
n_pos = len({p for p, _ in by})
assert n_pos >= 8, n_pos
for key, r in by.items():
    r.sort()
    assert [x[0] for x in r] == [0, 1], (key, r)
    assert r[0][1] != r[1][1] and all(0 <= x[1] < 8 for x in r), (key, r)
    assert abs(sum(x[2] for x in r) - 1) < 1e-5 and r[0][2] >= r[1][2], (key, r)
names = {n for (n,) in c.execute("select name from tensors")}
assert "blk.1.ffn_gate_inp" in names and "blk.1.ffn_moe_out" in names, sorted(names)
PY

# 2. a NaN injected into one routed expert's ffn_down at step 2
E=$("$py" -c "
import sqlite3,sys
print(sqlite3.connect(sys.argv[1]).execute('select expert from moe_routes where step=2 and layer=1 and rank=0').fetchone()[0])" "$TMP/clean.db")
expect_exit 0 "run with a NaN in expert $E" "$B" run --model "$M" --prompt "the dog ran" -n 6 --trace "$TMP/bad.db" \
    --inject "nan@op=blk.1.ffn_down.expert[$E],step=2"
expect_exit 1 "bisect finds it" "$B" bisect "$TMP/bad.db"
grep -q "first non-finite: step 2, .*layer 1, op ffn_down (blk.1.ffn_down.expert\[$E\])" "$TMP/out" ||
    fail "bisect names the expert: $(head -3 "$TMP/out")"
"$py" - "$TMP/bad.db" "$E" <<'PY' || fail "the first_nonfinite event names the expert with its own counts"
import sqlite3, sys
t, d = sqlite3.connect(sys.argv[1]).execute("select tensor, detail from events where kind='first_nonfinite'").fetchone()
assert t == "blk.1.ffn_down.expert[%s]" % sys.argv[2], t
# a decode step: one token routed to the expert, one row of 64 (not the merged rows of both experts)
assert "1 NaN, 0 +Inf, 0 -Inf of 64 " in d, d
PY
expect_exit 0 "report names the expert" "$B" report "$TMP/bad.db"
grep -q "blk.1.ffn_down.expert\[$E\]" "$TMP/out" || fail "report names blk.1.ffn_down.expert[$E]"
grep -q "## Expert routes at step 2" "$TMP/out" || fail "report has the routes of the first bad step"
expect_exit 0 "browse --dump step shows the routes" "$B" browse "$TMP/bad.db" --dump step --step 2
grep -q "expert\[$E\]" "$TMP/out" || fail "browse --dump step lists expert $E: $(head -5 "$TMP/out")"

# 3. an expert the layer never routes to at that step: nothing injected, said so
N=$("$py" -c "
import sqlite3,sys
used={r[0] for r in sqlite3.connect(sys.argv[1]).execute('select expert from moe_routes where step=2 and layer=1')}
print(min(set(range(8))-used))" "$TMP/clean.db")
expect_exit 0 "an unrouted expert" "$B" run --model "$M" --prompt "the dog ran" -n 6 --inject "nan@op=blk.1.ffn_down.expert[$N],step=2"
grep -q "never fired" "$TMP/err" || fail "an unrouted expert's spec says it never fired: $(cat "$TMP/err")"

# 4. bad expert specs: one line, exit 2
expect_exit 2 "expert of a non-FFN op" "$B" run --model "$M" --prompt hi -n 1 --inject "nan@op=blk.1.attn_q.expert[1]"
grep -q "only ffn_gate, ffn_up, ffn_act and ffn_down have experts" "$TMP/err" || fail "names the rule: $(cat "$TMP/err")"
expect_exit 2 "malformed expert" "$B" run --model "$M" --prompt hi -n 1 --inject "nan@op=blk.1.ffn_down.expert[x]"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "one line: $(cat "$TMP/err")"
finish
