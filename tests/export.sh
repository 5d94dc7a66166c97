#!/bin/sh
# `bangtrace export`: --redact leaves no byte of the prompt text in the
# output (byte search of the file), keeps ids and statistics, keeps K steps
# around the first bad step (all when clean), writes one file (no -wal/-shm),
# never modifies the source; errors are one line and exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
TOOL=${BT_BUILDDIR:-.}/tests/trace_writer_tool
[ -x "$TOOL" ] || skip "tests/trace_writer_tool is not built"
field() { echo "$2" | tr ' ' '\n' | sed -n "/^$1\$/{n;p;q;}"; }
one_line_err() {
    n=$(wc -l < "$TMP/err")
    if [ "$n" -ne 1 ] || ! grep -q -e "$1" "$TMP/err"; then fail "expected one stderr line mentioning '$1', got: $(cat "$TMP/err")"; fi
}
# count BYTES FILE: occurrences (lines) of a byte string in a binary file
count() { grep -a -c -F -e "$1" "$2" 2>/dev/null || true; }
no_companions() {
    for f in "$1-wal" "$1-shm" "$1-journal" "$1.partial"; do [ -e "$f" ] && fail "$f exists beside the export"; done
    return 0
}

SECRET="Zqx7-distinctive-prompt-walrus-91"
PROMPT="$SECRET tell me about purple walruses"
"$TOOL" write "$TMP/t.db" --steps 60 --bad-step 30 --prompt "$PROMPT" > /dev/null || { fail "writing the trace"; finish; }
[ "$(count "$SECRET" "$TMP/t.db")" -ge 1 ] && ok "source trace holds the prompt text" || fail "source trace lacks the prompt (test is void)"
src_line=$("$TOOL" check "$TMP/t.db")
sum_before=$(cksum < "$TMP/t.db")

expect_exit 0 "export --redact" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact
for s in "$SECRET" "purple walruses" "Zqx7" "walrus"; do
    n=$(count "$s" "$TMP/r.db")
    [ "$n" = 0 ] && ok "no '$s' in the redacted file" || fail "'$s' found $n times in the redacted file"
done
no_companions "$TMP/r.db"
line=$("$TOOL" check "$TMP/r.db") || fail "redacted export does not open"
# window: K = 16 around the first bad step 30 -> steps 14..46
if [ "$(field first "$line")" = 14 ] && [ "$(field last "$line")" = 46 ] && [ "$(field steps "$line")" = 33 ] &&
   [ "$(field contiguous "$line")" = yes ] && [ "$(field pieces "$line")" = 0 ] && [ "$(field first_bad "$line")" = 30 ] &&
   [ "$(field tokens "$line")" = "$(field tokens "$src_line")" ] && [ "$(field events "$line")" = 1 ]; then
    ok "redacted export keeps steps 14-46, every token id, no piece: $line"
else
    fail "redacted export content: $line (source: $src_line)"
fi
[ "$(cksum < "$TMP/t.db")" = "$sum_before" ] && ok "source unchanged" || fail "export modified the source"
[ ! -e "$TMP/t.db-wal" ] || fail "export left a WAL beside the source"

if command -v sqlite3 > /dev/null 2>&1; then
    m=$(sqlite3 "$TMP/r.db" "SELECT value FROM meta WHERE key = 'argv'")
    echo "$m" | grep -q -F '"--prompt","[redacted]"' && ok "argv: --prompt argument redacted ($m)" || fail "argv: $m"
    m=$(sqlite3 "$TMP/r.db" "SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key IN ('request_json', 'prompt_text', 'redacted')")
    [ "$m" = "prompt_text=[redacted] redacted=yes request_json=[redacted]" ] && ok "meta redacted" || fail "meta: $m"
    a=$(sqlite3 "$TMP/t.db" "SELECT * FROM v_first_nonfinite")
    b=$(sqlite3 "$TMP/r.db" "SELECT * FROM v_first_nonfinite")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "v_first_nonfinite survives: $b" || fail "v_first_nonfinite: '$a' vs '$b'"
    a=$(sqlite3 "$TMP/t.db" "SELECT count(*), sum(min), sum(rms) FROM v_taps WHERE step BETWEEN 14 AND 46")
    b=$(sqlite3 "$TMP/r.db" "SELECT count(*), sum(min), sum(rms) FROM v_taps")
    [ "$a" = "$b" ] && ok "tap statistics kept ($b)" || fail "tap statistics: '$a' vs '$b'"
    d=$(sqlite3 "$TMP/r.db" "SELECT detail FROM events")
    echo "$d" | grep -q 'blk.1.ffn_gate' && ok "event detail kept, quoted text removed: $d" || fail "event detail: $d"
    a=$(sqlite3 "$TMP/t.db" "SELECT group_concat(token_id) FROM v_tokens")
    b=$(sqlite3 "$TMP/r.db" "SELECT group_concat(token_id) FROM v_tokens")
    [ "$a" = "$b" ] && ok "token ids kept" || fail "token ids differ"
fi

# no --redact, --all-steps: a faithful copy
expect_exit 0 "export --all-steps" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/c.db" --all-steps
line=$("$TOOL" check "$TMP/c.db")
[ "$(field steps "$line")" = 60 ] && [ "$(field pieces "$line")" = "$(field pieces "$src_line")" ] &&
    ok "plain copy keeps everything: $line" || fail "plain copy: $line"
expect_exit 0 "export --window 2" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/w.db" --window 2 --redact
line=$("$TOOL" check "$TMP/w.db")
[ "$(field first "$line")" = 28 ] && [ "$(field last "$line")" = 32 ] && ok "--window 2: $line" || fail "--window 2: $line"

# a clean trace keeps every step
"$TOOL" write "$TMP/clean.db" --steps 40 --prompt "$PROMPT" > /dev/null
expect_exit 0 "export a clean trace" "$BANGTRACE" export "$TMP/clean.db" -o "$TMP/cr.db" --redact
line=$("$TOOL" check "$TMP/cr.db")
[ "$(field steps "$line")" = 40 ] && [ "$(count "$SECRET" "$TMP/cr.db")" = 0 ] && ok "clean trace: all steps, redacted: $line" ||
    fail "clean trace export: $line"

# errors: one line, exit 2
expect_exit 2 "OUT exists" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact && one_line_err "exists"
expect_exit 0 "OUT exists, --force" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact --force
[ "$(count "$SECRET" "$TMP/r.db")" = 0 ] || fail "forced export holds the prompt"
no_companions "$TMP/r.db"
expect_exit 2 "missing trace" "$BANGTRACE" export "$TMP/none.db" -o "$TMP/x.db" && one_line_err "none.db"
printf 'not a database at all\n' > "$TMP/text.db"
expect_exit 2 "not a trace" "$BANGTRACE" export "$TMP/text.db" -o "$TMP/x.db" && one_line_err "text.db"
head -c 5000 "$TMP/t.db" > "$TMP/trunc.db"
expect_exit 2 "truncated trace" "$BANGTRACE" export "$TMP/trunc.db" -o "$TMP/x.db" && one_line_err "trunc.db"
[ -e "$TMP/x.db" ] && fail "a failed export left $TMP/x.db"
expect_exit 2 "no -o" "$BANGTRACE" export "$TMP/t.db" && one_line_err "-o"
expect_exit 2 "bad --window" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/x.db" --window -3 && one_line_err "--window"
expect_exit 2 "unknown flag" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/x.db" --frob && one_line_err "--frob"
expect_exit 2 "OUT is the trace" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/t.db" --force && one_line_err "input"
expect_exit 0 "help export" "$BANGTRACE" help export && grep -q "usage: bangtrace export" "$TMP/out" || fail "help export has no usage line"

# The real binary, once `run --trace` exists.
if "$BANGTRACE" help run 2>/dev/null | grep -q -e '--trace' && [ -f "$STORIES" ]; then
    expect_exit 0 "run --trace (stories260K)" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" \
        --prompt "$PROMPT" -n 40 --trace "$TMP/run.db"
    [ "$(count "$SECRET" "$TMP/run.db")" -ge 1 ] || echo "note: the run's trace does not hold the prompt text verbatim"
    expect_exit 0 "export --redact of a real trace" "$BANGTRACE" export "$TMP/run.db" -o "$TMP/runr.db" --redact
    for s in "$SECRET" "purple walruses"; do
        n=$(count "$s" "$TMP/runr.db")
        [ "$n" = 0 ] && ok "real trace: no '$s' after redaction" || fail "real trace: '$s' found $n times after redaction"
    done
    no_companions "$TMP/runr.db"
    line=$("$TOOL" check "$TMP/runr.db") && [ "$(field pieces "$line")" = 0 ] && ok "real trace export: $line" ||
        fail "real trace export: $line"
else
    echo "note: bangtrace run --trace or stories260K unavailable; real-binary part not run"
fi
finish
