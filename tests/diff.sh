#!/bin/sh
# bangtrace diff on real stories260K traces: a run against itself is equal
# (exit 0); an injected NaN is the first diverging tap (step 5, layer 2,
# ffn_up) and the first diverging token sits at the step where the NaN
# reached the logits; finite longctx corruption diverges in the taps exactly
# at the step computing position P and --tolerance absorbs a small one;
# different seeds at --temp 1 give different tokens; a speculative-looking
# trace (plain steps renumbered around draft steps) is paired by position,
# not by step number; missing, foreign, truncated and corrupt files give one
# line naming the file and exit 2. The real speculative run (run --spec-k)
# is checked by tests/diff_spec.sh.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
"$PY" -c 'import json, sqlite3' 2>/dev/null || skip "python3 with json and sqlite3 is needed to check the JSON output"
"$BANGTRACE" help run | grep -q -- '--trace' || skip "this build's run has no --trace"
"$BANGTRACE" help diff >/dev/null 2>&1 || skip "this build has no diff command"

RUN="--model $STORIES --tokenizer $TOK512 --prompt Once_upon_a_time -n 40 --threads 2"

# field FILE.json EXPR: evaluate a Python expression over the parsed JSON (j)
field() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# sql DB QUERY: first column of the first row
sql() { "$PY" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$1" "$2"; }
# traced run that may exit 1 (an argmax rule picking an invalid id) as long as the trace exists
trace_run() { db=$1; shift; "$BANGTRACE" -q run $RUN --trace "$db" "$@" >/dev/null 2>"$TMP/err" || [ -f "$db" ] || fail "run $*: $(head -c 300 "$TMP/err")"; }

# ---- a run against itself ----
trace_run "$TMP/a.db"
trace_run "$TMP/a2.db"
expect_exit 0 "diff of two identical runs exits 0" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a2.db"
grep -q '^tokens: equal (40 output tokens)' "$TMP/out" && grep -q '^taps: equal' "$TMP/out" && grep -q '^prompt: equal' "$TMP/out" \
    && ok "text says prompt, tokens and taps are equal" || fail "text: $(head -c 600 "$TMP/out")"
expect_exit 0 "diff --json of two identical runs" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a2.db" --json
[ "$(field "$TMP/out" 'j["prompt_equal"] and j["first_token_diff"] is None and j["first_tap_diff"] is None and j["compared_steps"] == 40 and j["meta_diff"] == [] and j["tap_pairing"] == "step" and j["compared_taps"] > 0')" = True ] \
    && ok "identical JSON: no diffs, 40 steps compared, no meta difference" || fail "identical JSON: $(head -c 600 "$TMP/out")"
expect_exit 0 "a trace against itself" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a.db" --json

# ---- an injected NaN against the clean run ----
trace_run "$TMP/nan.db" --inject nan@step=5,layer=2,op=ffn_up
expect_exit 1 "injected vs clean exits 1" "$BANGTRACE" diff "$TMP/nan.db" "$TMP/a.db" --json
cp "$TMP/out" "$TMP/nan.json"
[ "$(field "$TMP/nan.json" '(lambda d: (d["step"], d["layer"], d["op"], d["field"], d["a"]["nan"] > 0, d["b"]["nan"]))(j["first_tap_diff"])')" = "(5, 2, 'ffn_up', 'nan', True, 0)" ] \
    && ok "first diverging tap: step 5, layer 2, ffn_up (NaN count)" || fail "NaN tap diff: $(head -c 900 "$TMP/nan.json")"
bad_logits=$(sql "$TMP/nan.db" 'SELECT min(step) FROM logits WHERE nan + pinf + ninf > 0')
[ "$(field "$TMP/nan.json" 'j["first_token_diff"]["step"]')" = "$bad_logits" ] \
    && ok "first diverging token at step $bad_logits, where the NaN reached the logits" \
    || fail "first token diff at step $(field "$TMP/nan.json" 'j["first_token_diff"]["step"]'), logits went bad at $bad_logits"
[ "$(field "$TMP/nan.json" '(lambda d: d["a"]["id"] != d["b"]["id"] and d["a"]["pos"] == d["b"]["pos"] == d["pos"] and d["b"]["piece"] is not None)(j["first_token_diff"])')" = True ] \
    && ok "token diff carries both ids, the position and pieces" || fail "token diff: $(head -c 600 "$TMP/nan.json")"
[ "$(field "$TMP/nan.json" '[m["key"] for m in j["meta_diff"]] == ["injections"] and "ffn_up" in j["meta_diff"][0]["a"] and j["meta_diff"][0]["b"] == "[]"')" = True ] \
    && ok "meta difference: injections only" || fail "meta diff: $(field "$TMP/nan.json" 'j["meta_diff"]')"
expect_exit 1 "injected vs clean (text)" "$BANGTRACE" diff "$TMP/a.db" "$TMP/nan.db"
grep -q '^first diverging tap: step 5 (target decode, position [0-9]*), layer 2, op ffn_up (blk.2.ffn_up): nan differs' "$TMP/out" \
    && ok "text names step 5, layer 2, ffn_up" || fail "text: $(head -c 800 "$TMP/out")"
grep -q "^first diverging token: output #[0-9]*, position [0-9]*, step $bad_logits: A [0-9]* '[^']*' (step $bad_logits), B [0-9]* " "$TMP/out" \
    && ok "text names the diverging token" || fail "text: $(grep token "$TMP/out")"
grep -q '^meta: injections differs' "$TMP/out" && ok "text lists the meta difference" || fail "text meta: $(grep meta "$TMP/out")"

# ---- finite longctx corruption from position P ----
P=20
trace_run "$TMP/long.db" --inject "longctx@pos>=$P,op=ffn_down,scale=1.5"
expect_exit 1 "longctx vs clean exits 1" "$BANGTRACE" diff "$TMP/a.db" "$TMP/long.db" --json
cp "$TMP/out" "$TMP/long.json"
want=$(sql "$TMP/a.db" "SELECT min(step) FROM steps WHERE pos0 >= $P")
[ "$(field "$TMP/long.json" '(lambda d: (d["step"], d["pos0"], d["layer"], d["op"], d["inputs_diverged"]))(j["first_tap_diff"])')" = "($want, $P, 0, 'ffn_down', False)" ] \
    && ok "longctx: taps diverge at step $want (position $P), layer 0 ffn_down, inputs still equal" || fail "longctx tap diff: $(head -c 900 "$TMP/long.json")"
[ "$(field "$TMP/long.json" 'j["first_token_diff"] is None or j["first_token_diff"]["step"] >= '"$want")" = True ] \
    && ok "longctx: no token diverges before the corrupted step" || fail "longctx token diff: $(field "$TMP/long.json" 'j["first_token_diff"]')"
trace_run "$TMP/small.db" --inject "longctx@pos>=$P,op=ffn_down,scale=1.01"
expect_exit 1 "a 1% longctx corruption differs at tolerance 0" "$BANGTRACE" diff "$TMP/a.db" "$TMP/small.db" --json
[ "$(field "$TMP/out" '(j["first_tap_diff"]["step"], j["first_tap_diff"]["op"], j["first_token_diff"])')" = "($want, 'ffn_down', None)" ] \
    && ok "1% corruption: taps differ at step $want, tokens equal" || fail "1% corruption: $(head -c 600 "$TMP/out")"
expect_exit 0 "--tolerance 0.05 accepts the 1% corruption" "$BANGTRACE" diff "$TMP/a.db" "$TMP/small.db" --tolerance 0.05

# ---- sampling with different seeds ----
trace_run "$TMP/s1.db" --temp 1 --seed 1
trace_run "$TMP/s2.db" --temp 1 --seed 2
expect_exit 1 "different seeds at --temp 1 exit 1" "$BANGTRACE" diff "$TMP/s1.db" "$TMP/s2.db" --json
cp "$TMP/out" "$TMP/seed.json"
[ "$(field "$TMP/seed.json" 'j["first_token_diff"] is not None and j["first_token_diff"]["a"]["id"] != j["first_token_diff"]["b"]["id"]')" = True ] \
    && ok "different seeds: tokens differ" || fail "seeds: $(head -c 600 "$TMP/seed.json")"
[ "$(field "$TMP/seed.json" '(lambda t, d: d is None or (d["inputs_diverged"] and d["step"] > t["step"]))(j["first_token_diff"], j["first_tap_diff"])')" = True ] \
    && ok "different seeds: taps differ only once the diverged token is fed back" || fail "seeds taps: $(field "$TMP/seed.json" 'j["first_tap_diff"]')"
[ "$(field "$TMP/seed.json" '[m["key"] for m in j["meta_diff"]] == ["sampling"]')" = True ] \
    && ok "different seeds: meta lists sampling" || fail "seeds meta: $(field "$TMP/seed.json" 'j["meta_diff"]')"

# ---- a different prompt ----
"$BANGTRACE" -q run --model "$STORIES" --tokenizer "$TOK512" --prompt Once_upon_a_dog -n 10 --threads 2 --trace "$TMP/p.db" >/dev/null 2>&1
expect_exit 1 "different prompts exit 1" "$BANGTRACE" diff "$TMP/a.db" "$TMP/p.db" --json
[ "$(field "$TMP/out" 'j["prompt_equal"] is False and j["first_prompt_diff"]["pos"] > 0')" = True ] \
    && ok "different prompts: prompt_equal false, first differing prompt position" || fail "prompts: $(head -c 600 "$TMP/out")"

# ---- a speculative-looking trace: steps renumbered around draft steps ----
# The plain trace's step s >= 1 becomes verify step 2s, a draft step (no
# taps) goes in at 2s - 1 and a draft token before every output token; the
# target computes the same positions, so pairing by (pos0, n_pos) must find
# every step while pairing by step number would find almost none.
"$PY" - "$TMP/a.db" "$TMP/fake.db" <<'EOF'
import shutil, sqlite3, sys
shutil.copy(sys.argv[1], sys.argv[2])
d = sqlite3.connect(sys.argv[2])
for t in ("steps", "tap_blobs", "tap_bad", "tokens", "logits", "logit_rows", "events", "backtraces"):
    d.execute(f"UPDATE {t} SET step = -2 * step WHERE step > 0")
    d.execute(f"UPDATE {t} SET step = -step WHERE step < 0")
d.execute("UPDATE steps SET kind = 'verify' WHERE kind = 'decode'")
for step, pos0 in d.execute("SELECT step, pos0 FROM steps WHERE step > 0").fetchall():
    d.execute("INSERT INTO steps (step, model, kind, pos0, n_pos, ms) VALUES (?, 'draft', 'draft', ?, 1, 0.1)", (step - 1, pos0))
d.execute("UPDATE tokens SET seq = -2 * seq")
d.execute("UPDATE tokens SET seq = -seq")
for seq, step, pos in d.execute("SELECT seq, step, pos FROM tokens WHERE role = 'gen'").fetchall():
    d.execute("INSERT INTO tokens (seq, step, pos, token_id, piece, role) VALUES (?, ?, ?, 7, 'x', 'draft')", (seq - 1, max(step - 1, 0), pos))
d.execute("INSERT OR REPLACE INTO meta VALUES ('spec_k', '1')")
d.execute("INSERT OR REPLACE INTO meta VALUES ('drafter', 'self:2')")
d.commit()
EOF
expect_exit 0 "plain vs speculative-looking trace with the same computation exits 0" "$BANGTRACE" diff "$TMP/a.db" "$TMP/fake.db" --json
[ "$(field "$TMP/out" 'j["tap_pairing"] == "position" and j["compared_steps"] == 40 and j["speculative"] == {"a": False, "b": True} and j["first_token_diff"] is None and sorted(m["key"] for m in j["meta_diff"]) == ["drafter", "spec_k"]')" = True ] \
    && ok "speculative pairing: all 40 target steps paired by (pos0, n_pos), draft tokens ignored" || fail "fake spec: $(head -c 800 "$TMP/out")"
expect_exit 0 "plain vs speculative-looking trace (text)" "$BANGTRACE" diff "$TMP/a.db" "$TMP/fake.db"
grep -q 'taps are compared only where both have a target step with identical (pos0, n_pos).*: 40 step pairs' "$TMP/out" \
    && ok "text says taps are compared only at identical (pos0, n_pos) and how many" || fail "text: $(grep '^taps' "$TMP/out")"
expect_exit 1 "injected plain vs speculative-looking clean trace" "$BANGTRACE" diff "$TMP/nan.db" "$TMP/fake.db" --json
[ "$(field "$TMP/out" '(lambda d, t: (d["step"], d["step_b"], d["layer"], d["op"], t["a"]["step"], t["b"]["step"]))(j["first_tap_diff"], j["first_token_diff"])')" = "(5, 10, 2, 'ffn_up', $bad_logits, $((bad_logits * 2)))" ] \
    && ok "position pairing: NaN at A step 5 = B step 10; tokens aligned by output index" || fail "fake spec vs NaN: $(head -c 900 "$TMP/out")"

# ---- files that are not (whole) traces ----
make_bad_traces "$TMP/nan.db"
for f in random foreign truncated corrupt empty missing; do
    for order in first second; do
        if [ $order = first ]; then set -- "$TMP/$f.db" "$TMP/a.db"; else set -- "$TMP/a.db" "$TMP/$f.db"; fi
        expect_exit 2 "diff with a $f file $order" "$BANGTRACE" diff "$@" --json || continue
        if [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "^bangtrace: diff: $TMP/$f.db: " "$TMP/err" && [ ! -s "$TMP/out" ]; then ok "$f ($order): one line naming the file: $(cat "$TMP/err")"
        else fail "$f ($order): expected one error line naming the file and no stdout; stderr: $(cat "$TMP/err"); stdout: $(head -c 200 "$TMP/out")"; fi
    done
done
expect_exit 2 "diff with one trace" "$BANGTRACE" diff "$TMP/a.db"
expect_exit 2 "diff with three traces" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a.db" "$TMP/a.db"
expect_exit 2 "diff with an unknown flag" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a.db" --frobnicate
expect_exit 2 "diff with a negative tolerance" "$BANGTRACE" diff "$TMP/a.db" "$TMP/a.db" --tolerance -1
finish
