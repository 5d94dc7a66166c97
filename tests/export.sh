#!/bin/sh
# `bangtrace export`: --redact (=prompt) leaves nothing from which the
# prompt can be rebuilt (no text, no prompt ids, no ids at prompt positions,
# no request JSON, argv text, absolute paths, host or user name: byte search
# of the file and every table), keeps generated tokens, ids and statistics;
# --redact=all removes the generated tokens too; keeps K steps around the
# first bad step (all when clean), writes one file (no -wal/-shm), never
# modifies the source; errors are one line and exit 2. On real traces
# (stories260K, and SmolLM2 when cached) every command bangtrace has tries
# to rebuild the prompt from the export.
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
    for f in "$1-wal" "$1-shm" "$1-journal" "$1".??????; do [ -e "$f" ] && fail "$f exists beside the export"; done
    return 0
}

SECRET="Zqx7-distinctive-prompt-walrus-91"
PROMPT="$SECRET tell me about purple walruses"
"$TOOL" write "$TMP/t.db" --steps 60 --bad-step 30 --prompt "$PROMPT" > /dev/null || { fail "writing the trace"; finish; }
[ "$(count "$SECRET" "$TMP/t.db")" -ge 1 ] && ok "source trace holds the prompt text" || fail "source trace lacks the prompt (test is void)"
src_line=$("$TOOL" check "$TMP/t.db")
sum_before=$(cksum < "$TMP/t.db")

expect_exit 0 "export --redact" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact
# The tool's generated tokens repeat the prompt's first word (SECRET), and
# --redact=prompt keeps generated tokens: the rest of the prompt must go.
for s in "$PROMPT" "tell me about" "purple walruses" "walruses"; do
    n=$(count "$s" "$TMP/r.db")
    [ "$n" = 0 ] && ok "no '$s' in the redacted file" || fail "'$s' found $n times in the redacted file"
done
expect_exit 0 "export --redact=all" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/ra.db" --redact=all
for s in "$SECRET" "purple walruses" "Zqx7" "walrus"; do
    n=$(count "$s" "$TMP/ra.db")
    [ "$n" = 0 ] && ok "no '$s' in the --redact=all file" || fail "'$s' found $n times in the --redact=all file"
done
line=$("$TOOL" check "$TMP/ra.db") && [ "$(field pieces "$line")" = 0 ] && ok "--redact=all: no piece: $line" ||
    fail "--redact=all: $line"
expect_exit 2 "--redact=bogus" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/rb.db" --redact=bogus
no_companions "$TMP/r.db"
line=$("$TOOL" check "$TMP/r.db") || fail "redacted export does not open"
# window: K = 16 around the first bad step 30 -> steps 14..46
if [ "$(field first "$line")" = 14 ] && [ "$(field last "$line")" = 46 ] && [ "$(field steps "$line")" = 33 ] &&
   [ "$(field contiguous "$line")" = yes ] && [ "$(field pieces "$line")" = 60 ] && [ "$(field first_bad "$line")" = 30 ] &&
   [ "$(field tokens "$line")" = "$(field tokens "$src_line")" ] && [ "$(field events "$line")" = 1 ]; then
    ok "redacted export keeps steps 14-46, every token, the 60 generated pieces only: $line"
else
    fail "redacted export content: $line (source: $src_line)"
fi
[ "$(cksum < "$TMP/t.db")" = "$sum_before" ] && ok "source unchanged" || fail "export modified the source"
[ ! -e "$TMP/t.db-wal" ] || fail "export left a WAL beside the source"

if command -v sqlite3 > /dev/null 2>&1; then
    m=$(sqlite3 "$TMP/r.db" "SELECT value FROM meta WHERE key = 'argv'")
    echo "$m" | grep -q -F '"--prompt","[redacted]"' && ok "argv: --prompt argument redacted ($m)" || fail "argv: $m"
    m=$(sqlite3 "$TMP/r.db" "SELECT group_concat(key || '=' || value, ' ') FROM meta WHERE key IN ('request_json', 'prompt_text', 'redacted')")
    [ "$m" = "prompt_text=[redacted] redacted=prompt request_json=[redacted]" ] && ok "meta redacted" || fail "meta: $m"
    a=$(sqlite3 "$TMP/t.db" "SELECT * FROM v_first_nonfinite")
    b=$(sqlite3 "$TMP/r.db" "SELECT * FROM v_first_nonfinite")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "v_first_nonfinite survives: $b" || fail "v_first_nonfinite: '$a' vs '$b'"
    a=$(sqlite3 "$TMP/t.db" "SELECT count(*), sum(min), sum(rms) FROM v_taps WHERE step BETWEEN 14 AND 46")
    b=$(sqlite3 "$TMP/r.db" "SELECT count(*), sum(min), sum(rms) FROM v_taps")
    [ "$a" = "$b" ] && ok "tap statistics kept ($b)" || fail "tap statistics: '$a' vs '$b'"
    d=$(sqlite3 "$TMP/r.db" "SELECT detail FROM events")
    echo "$d" | grep -q 'blk.1.ffn_gate' && ok "event detail kept, quoted text removed: $d" || fail "event detail: $d"
    a=$(sqlite3 "$TMP/t.db" "SELECT group_concat(token_id) FROM v_tokens WHERE role = 'gen'")
    b=$(sqlite3 "$TMP/r.db" "SELECT group_concat(token_id) FROM v_tokens WHERE role = 'gen'")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "generated token ids kept" || fail "generated token ids differ"
    b=$(sqlite3 "$TMP/r.db" "SELECT count(*), count(piece), min(token_id), max(token_id) FROM tokens WHERE role = 'prompt'")
    [ "$b" = "$(sqlite3 "$TMP/t.db" "SELECT count(*) FROM tokens WHERE role = 'prompt'")|0|-1|-1" ] &&
        ok "prompt tokens counted, ids and text gone ($b)" || fail "prompt tokens: $b"
    b=$(sqlite3 "$TMP/ra.db" "SELECT count(*), count(piece), max(token_id) FROM tokens")
    [ "$b" = "$(sqlite3 "$TMP/t.db" "SELECT count(*) FROM tokens")|0|-1" ] && ok "--redact=all: every id and piece gone ($b)" ||
        fail "--redact=all tokens: $b"
    b=$(sqlite3 "$TMP/ra.db" "SELECT count(*) FROM logits WHERE chosen IS NOT NULL OR topk_ids IS NOT NULL OR argmax_first IS NOT NULL")
    [ "$b" = 0 ] && ok "--redact=all: no id in logit snapshots" || fail "--redact=all: $b logit snapshots keep ids"
    b=$(sqlite3 "$TMP/ra.db" "SELECT count(*) FROM logit_rows")
    [ "$b" = 0 ] && ok "--redact=all: no full logit row" || fail "--redact=all: $b full logit rows"
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
[ "$(field steps "$line")" = 40 ] && [ "$(count "purple walruses" "$TMP/cr.db")" = 0 ] && ok "clean trace: all steps, redacted: $line" ||
    fail "clean trace export: $line"

# errors: one line, exit 2
expect_exit 2 "OUT exists" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact && one_line_err "exists"
expect_exit 0 "OUT exists, --force" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/r.db" --redact --force
[ "$(count "purple walruses" "$TMP/r.db")" = 0 ] || fail "forced export holds the prompt"
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

# ---- real traces: try to rebuild the prompt from the export with every
# command bangtrace has, and by byte search.
USER_NAME=$(id -un 2>/dev/null || echo "")
HOST_NAME=$(hostname 2>/dev/null || echo "")
RPROMPT="Quorvath the xylophonist juggled seventeen marmalade zeppelins"
# leak_check LABEL EXPORT TRACE MODEL [TOKENIZER]: no way back to the prompt
leak_check() {
    lc=$1 exp=$2 src=$3 lm=$4 lt=${5:-}
    set -- --model "$lm"
    [ -n "$lt" ] && set -- "$@" --tokenizer "$lt"
    ids=$("$BANGTRACE" tokenize "$@" "$RPROMPT") || { fail "$lc: tokenize"; return; }
    ids_c=$(echo "$ids" | tr ' ' ',')
    # every command's output, plus every table, gathered in one file
    all=$TMP/$lc.all
    : > "$all"
    here=$(pwd)
    cd "$TMP" || return
    exp=$(basename "$exp")
    for c in report bisect; do "$BANGTRACE" $c "$exp" >> "$all" 2>&1; done
    "$BANGTRACE" diff "$exp" "$exp" >> "$all" 2>&1
    for v in tokens step walkback run backtrace spec; do "$BANGTRACE" browse "$exp" --dump $v --all >> "$all" 2>&1 ||
        "$BANGTRACE" browse "$exp" --dump $v >> "$all" 2>&1; done
    "$BANGTRACE" bisect "$exp" --reference >> "$all" 2>&1 && fail "$lc: bisect --reference replayed a redacted trace"
    if command -v sqlite3 > /dev/null 2>&1; then
        sqlite3 "$exp" .dump >> "$all"
        for tb in meta tokens logits events backtraces spec_steps spec_trail; do sqlite3 "$exp" "SELECT * FROM $tb" >> "$all"; done
    fi
    # decode every id list found: topk_ids, token ids
    if command -v sqlite3 > /dev/null 2>&1; then
        list=$(sqlite3 "$exp" "SELECT group_concat(token_id, ' ') FROM (SELECT token_id FROM tokens WHERE token_id >= 0 ORDER BY seq)")
        [ -n "$list" ] && "$BANGTRACE" tokenize "$@" --decode "$list" >> "$all" 2>&1
        sqlite3 "$exp" "SELECT topk_ids FROM logits WHERE topk_ids IS NOT NULL" | tr -d '[]' | while read -r l; do
            "$BANGTRACE" tokenize "$@" --decode "$l" 2>/dev/null; echo; done >> "$all"
        list=$(sqlite3 "$exp" "SELECT group_concat(chosen, ' ') FROM (SELECT chosen FROM logits WHERE chosen >= 0 ORDER BY step, pos)")
        [ -n "$list" ] && "$BANGTRACE" tokenize "$@" --decode "$list" >> "$all" 2>&1
    fi
    cd "$here" || return
    exp=$TMP/$exp
    for f in "$exp" "$exp-wal" "$exp-shm" "$all"; do
        [ -e "$f" ] || continue
        for s in "$RPROMPT" "Quorvath" "xylophonist" "marmalade zeppelins" "$ids" "$ids_c" "$TMP" "$BT_ABS" "$HOME/"; do
            [ -n "$s" ] || continue
            n=$(count "$s" "$f")
            [ "$n" = 0 ] || fail "$lc: '$s' found $n times in $(basename "$f")"
        done
        if [ ${#HOST_NAME} -ge 4 ]; then n=$(count "$HOST_NAME" "$f"); [ "$n" = 0 ] || fail "$lc: host name in $(basename "$f")"; fi
    done
    # the user name: anywhere but generated text (which could say "root")
    if [ -n "$USER_NAME" ] && command -v sqlite3 > /dev/null 2>&1; then
        n=$(sqlite3 "$exp" "SELECT count(*) FROM (SELECT value AS v FROM meta UNION ALL SELECT detail FROM events
              UNION ALL SELECT frames FROM backtraces) WHERE instr(v, '$USER_NAME') > 0")
        [ "$n" = 0 ] && ok "$lc: no user name in meta, events, backtraces" || fail "$lc: user name in $n meta/event/backtrace values"
    fi
    h=$(sqlite3 "$exp" "SELECT value FROM meta WHERE key = 'host'" 2>/dev/null)
    [ -z "$h" ] || [ "$h" = "[redacted]" ] || fail "$lc: meta host is '$h'"
    a=$(sqlite3 "$src" "SELECT value FROM meta WHERE key = 'model_sha256'" 2>/dev/null)
    b=$(sqlite3 "$exp" "SELECT value FROM meta WHERE key = 'model_sha256'" 2>/dev/null)
    [ "$a" = "$b" ] || fail "$lc: model SHA-256 not kept"
    b=$(sqlite3 "$exp" "SELECT value FROM meta WHERE key = 'model_path'" 2>/dev/null)
    [ "$b" = "$(basename "$lm")" ] && ok "$lc: model path kept as its base name ($b)" || fail "$lc: model_path '$b'"
    ok "$lc: checked report, bisect, diff, browse --dump, sqlite3 dump, tokenize --decode, byte search"
}
BT_ABS=$(cd "$(dirname "$STORIES")" 2>/dev/null && pwd -P)
real_trace() {   # real_trace LABEL MODEL [TOKENIZER]
    label=$1 model=$2 tokz=${3:-}
    set -- run --model "$model" --prompt "$RPROMPT" -n 24 --trace "$TMP/$label.db" --inject "nan@layer=0,op=ffn_down,step=6"
    [ -n "$tokz" ] && set -- "$@" --tokenizer "$tokz"
    expect_exit 0 "$label: run --trace" "$BANGTRACE" "$@" || return
    [ "$(count "Quorvath" "$TMP/$label.db")" -ge 1 ] || fail "$label: the source trace lacks the prompt (test is void)"
    for lvl in prompt all; do
        expect_exit 0 "$label: export --redact=$lvl" "$BANGTRACE" export "$TMP/$label.db" -o "$TMP/$label-$lvl.db" --redact=$lvl
        no_companions "$TMP/$label-$lvl.db"
        leak_check "$label-$lvl" "$TMP/$label-$lvl.db" "$TMP/$label.db" "$model" "$tokz"
        expect_exit 1 "$label-$lvl: bisect still finds the fault" "$BANGTRACE" bisect "$TMP/$label-$lvl.db" &&
            grep -q "blk.0.ffn_down" "$TMP/out" || fail "$label-$lvl: bisect output: $(head -n 3 "$TMP/out")"
    done
    if command -v sqlite3 > /dev/null 2>&1; then
        a=$(sqlite3 "$TMP/$label.db" "SELECT group_concat(piece, '') FROM (SELECT piece FROM tokens WHERE role = 'gen' ORDER BY seq)")
        b=$(sqlite3 "$TMP/$label-prompt.db" "SELECT group_concat(coalesce(piece, '?'), '') FROM (SELECT piece FROM tokens WHERE role = 'gen' ORDER BY seq)")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok "$label: --redact=prompt keeps the generated text" || fail "$label: generated text '$a' vs '$b'"
        b=$(sqlite3 "$TMP/$label-all.db" "SELECT count(*) FROM tokens WHERE piece IS NOT NULL OR token_id >= 0")
        [ "$b" = 0 ] && ok "$label: --redact=all removes the generated text and ids" || fail "$label: --redact=all leaves $b tokens"
        g=$(sqlite3 "$TMP/$label.db" "SELECT piece FROM tokens WHERE role = 'gen' AND length(piece) >= 5 ORDER BY seq LIMIT 1")
        [ -z "$g" ] || [ "$(count "$g" "$TMP/$label-all.db")" = 0 ] || fail "$label: generated piece '$g' found after --redact=all"
    fi
}
if "$BANGTRACE" help run 2>/dev/null | grep -q -e '--trace' && [ -f "$STORIES" ]; then
    real_trace stories "$STORIES" "$TOK512"
    if [ -f "$SMOL" ]; then real_trace smol "$SMOL"
    else echo "note: SmolLM2 not cached at $SMOL; its part not run"; fi
else
    echo "note: bangtrace run --trace or stories260K unavailable; real-binary part not run"
fi
# a file of the user's beside OUT (any name export could use for its build) is never touched
echo "keep me" > "$TMP/side.db.partial"
expect_exit 0 "export beside a user's file" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/side.db" --redact
[ "$(cat "$TMP/side.db.partial")" = "keep me" ] && ok "OUT.partial of the user untouched" || fail "export touched OUT.partial"
no_companions "$TMP/side.db"
finish
