#!/bin/sh
# bangtrace report: the markdown report of an injected trace names the first
# bad step/layer/op, carries the environment, model hash, configuration,
# propagation table, events and logit snapshot, and a reproduce command that,
# pasted into a shell, records the same finding again; a clean trace says
# so; -o writes the same report to a file; broken files exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
"$PY" -c 'import json, sqlite3' 2>/dev/null || skip "python3 with json and sqlite3 is needed"
"$BANGTRACE" help run | grep -q -- '--trace' || skip "this build's run has no --trace"

# A prompt with a space and a quote: the reproduce line must quote it right.
PROMPT="It's a sunny day"
SPEC='nan@layer=2,op=ffn_down,step=3'
expect_exit 0 "run --trace --inject" "$BANGTRACE" -q run --model "$STORIES" --tokenizer "$TOK512" --prompt "$PROMPT" -n 24 \
    --threads 2 --trace "$TMP/nan.db" --inject "$SPEC"
expect_exit 0 "report on the injected trace" "$BANGTRACE" report "$TMP/nan.db"
cp "$TMP/out" "$TMP/report.md"
has() { if grep -qF -- "$1" "$TMP/report.md"; then ok "report has: $1"; else fail "report lacks: $1"; fi; }
has '# bangtrace report: non-finite blk.2.ffn_down at step 3, layer 2'
has '- **First non-finite:** step 3, position '
has 'layer 2, op `ffn_down` (`blk.2.ffn_down`), first at index 0: 1 NaN, 0 +Inf, 0 -Inf of 64 values.'
has "- **Why this output:** step 3: logits all NaN; rule first -> id 0"
has '## Environment'
has '| threads | 2 |'
has '| backend | cpu-'
has "| SHA-256 | \`$(sha256sum "$STORIES" | cut -d' ' -f1)\` |"
has '| argmax rule | first |'
has "| fault injections | \`[\"$SPEC\"]\` |"
has '| 3 | 2 | `blk.2.ffn_down` | origin |'
has '| 4 | 3 | `blk.3.attn_ctx` | kv_cache |'
has '| first_nonfinite | 1 | 3 |'
has '## Logit snapshot at step 3'
has '| NaN / +Inf / -Inf | 512 / 0 / 0 |'
has '## Reproduce'
bts=$("$PY" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM backtraces').fetchone()[0])" "$TMP/nan.db")
if [ "$bts" -gt 0 ]; then has '## Host backtrace (first_nonfinite, step 3)'; fi

# The reproduce line, pasted into a shell, records the same first bad step/layer/op.
cmd=$(sed -n '/^## Reproduce/,$p' "$TMP/report.md" | sed -n '/^```sh$/{n;p;q}')
case "$cmd" in
    "bangtrace run "*) ok "reproduce line: $cmd" ;;
    *) fail "no reproduce command under ## Reproduce: '$cmd'" ;;
esac
case "$cmd" in *"'It'\\''s a sunny day'"*) ok "the prompt is shell-quoted" ;; *) fail "prompt not quoted as expected in: $cmd" ;; esac
mv "$TMP/nan.db" "$TMP/orig.db"
# absolute paths are shown by their base names: a maintainer runs it beside the model files
mkdir "$TMP/repro" && ln -s "$STORIES" "$TOK512" "$TMP/repro/"
expect_exit 0 "the reproduce command runs (beside the model files)" env BT="$BANGTRACE" sh -c "cd '$TMP/repro' && bangtrace() { \"\$BT\" \"\$@\"; }; $cmd"
if [ -f "$TMP/repro/nan.db" ]; then
    "$BANGTRACE" bisect "$TMP/orig.db" --json > "$TMP/a.json"
    "$BANGTRACE" bisect "$TMP/repro/nan.db" --json > "$TMP/b.json"
    same=$("$PY" -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:3]); print(a['first_nonfinite'] == b['first_nonfinite'] and a['explanation'] == b['explanation'])" "$TMP/a.json" "$TMP/b.json")
    [ "$same" = True ] && ok "the reproduced trace has the same first non-finite and explanation" || fail "reproduced trace differs: $(head -c 300 "$TMP/b.json")"
else fail "the reproduce command did not write $TMP/repro/nan.db"; fi

# -o writes the same report, atomically
expect_exit 0 "report -o FILE" "$BANGTRACE" report "$TMP/orig.db" -o "$TMP/r.md"
[ ! -s "$TMP/out" ] && ok "-o leaves stdout empty" || fail "-o printed to stdout"
"$BANGTRACE" report "$TMP/orig.db" > "$TMP/stdout.md"
cmp -s "$TMP/r.md" "$TMP/stdout.md" && ok "-o FILE equals the stdout report" || fail "-o FILE differs from stdout"
left=$(ls "$TMP" | grep '^r\.md\.' || true)
[ -z "$left" ] && ok "no temporary file left" || fail "temporary file left behind: $left"
expect_exit 2 "report -o into a missing directory" "$BANGTRACE" report "$TMP/orig.db" -o "$TMP/no/such/dir/r.md"

# A clean trace says so
expect_exit 0 "run --trace (clean)" "$BANGTRACE" -q run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 24 --trace "$TMP/clean.db"
expect_exit 0 "report on a clean trace" "$BANGTRACE" report "$TMP/clean.db"
grep -q '^# bangtrace report: clean run' "$TMP/out" && grep -q '^Clean: no non-finite tensor, no degenerate output' "$TMP/out" \
    && ok "clean report says clean" || fail "clean report: $(head -c 300 "$TMP/out")"
grep -q '^## Propagation' "$TMP/out" && fail "clean report has a propagation table" || ok "clean report has no propagation table"
grep -q '^| fault injections | - |' "$TMP/out" && ok "clean report: no injections" || fail "clean report injections row: $(grep injections "$TMP/out")"

# Broken input
head -c 4096 /dev/urandom > "$TMP/random.db"
expect_exit 2 "report on a random-bytes file" "$BANGTRACE" report "$TMP/random.db"
[ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "^bangtrace: report: $TMP/random.db: " "$TMP/err" && [ ! -s "$TMP/out" ] \
    && ok "one error line naming the file, nothing on stdout" || fail "stderr: $(cat "$TMP/err")"
expect_exit 2 "report on a missing file" "$BANGTRACE" report "$TMP/missing.db"
expect_exit 2 "report without a trace" "$BANGTRACE" report
finish
