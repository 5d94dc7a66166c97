# text_safety.sh - model- and trace-supplied text never reaches the terminal
# raw. A GGUF whose name, metadata keys and values, chat template, tensor
# names and token pieces carry OSC 0 (terminal title), OSC 52 (clipboard),
# CSI sequences, a raw C1 CSI byte (0x9b), U+009B, a bidi override and
# invalid UTF-8 (tests/data-gen/make_hostile_gguf.py), and a trace whose
# tensor names, events, backtrace, argv and meta values carry the same, go
# through every command that prints them: the output bytes hold no ESC, BEL,
# other C0 control but newline, no 0x9b, no C1 or bidi code point.
# Generated text is the model's exact bytes on a pipe (it is the product),
# but escaped on a terminal (checked under script(1)).
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
TINY=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
[ -f "$TINY" ] || skip "tiny GGUF not found at $TINY"
PY=${PYTHON3:-python3}
"$PY" -c 'import sqlite3' 2>/dev/null || skip "python3 with sqlite3 needed"
cd "$TMP" || exit 99
"$PY" "$BT_SRCDIR/tests/data-gen/make_hostile_gguf.py" "$TINY" . 2>gen.err || { fail "make_hostile_gguf.py: $(cat gen.err)"; finish; }
H=hostile.gguf

# raw_bytes FILE: count of lines holding a byte that could drive a terminal
# (C0 but \n, DEL, 0x9b anywhere, C1 as UTF-8, U+2028..U+202E). CR is
# allowed only with STRIP_CR=1 (a pty turns \n into \r\n).
raw_bytes() {
    if [ "${STRIP_CR:-0}" = 1 ]; then tr -d '\r' <"$1" >"$1.nocr"; set -- "$1.nocr"; fi
    LC_ALL=C grep -c -aP '[\x00-\x08\x0b-\x1f\x7f\x9b]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]' "$1"
}
# clean DESC CMD...: run CMD; stdout and stderr hold no raw control bytes
# and the hostile text is visible in escaped form somewhere (when WANT set).
clean() {
    local desc=$1; shift
    "$@" >out 2>err
    local rc=$? n_out n_err
    n_out=$(raw_bytes out); n_err=$(raw_bytes err)
    if [ "$n_out" != 0 ] || [ "$n_err" != 0 ]; then
        fail "$desc: raw control bytes on stdout ($n_out lines) / stderr ($n_err lines): $(LC_ALL=C grep -aP '[\x1b\x07\x9b]' out err | head -c 300 | od -c | head -5)"
        return
    fi
    if [ -n "${WANT:-}" ] && ! grep -qF -- "$WANT" out err; then fail "$desc: the escaped form '$WANT' is not shown (exit $rc): $(head -c 300 err)"; return; fi
    ok "$desc (exit $rc)"
}
ESC_SHOWN='\x1b]0;pwned-title\x07'

# the generator really wrote hostile bytes (else this test proves nothing)
[ "$(raw_bytes $H)" -gt 0 ] || fail "hostile.gguf holds no raw control bytes"

WANT=$ESC_SHOWN clean "inspect" "$BANGTRACE" inspect $H
grep -qF 'name:          evil\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[31m\x9b31m\u009b32m\u202e\xff\xfemodel' out ||
    fail "inspect: general.name not shown escaped: $(grep -a 'name:' out | head -c 200)"
grep -qF 'evil.tensor\x1b]0;' out || fail "inspect: hostile tensor name not shown escaped"
grep -qF 'evil.key\x1b]0;' out || fail "inspect: hostile metadata key not shown escaped"
WANT='x1b]0;pwned-title' clean "inspect --json" "$BANGTRACE" inspect --json $H
"$PY" -c "import json,sys; d=json.load(open('out')); assert 'x1b]0;pwned' in d['name'], d['name']" || fail "inspect --json: not valid JSON or the name is missing"
WANT='\x1b]0;t\x07\x9b' clean "inspect: unsupported hostile architecture (error message)" "$BANGTRACE" inspect --no-scan hostile_arch.gguf
# stdout is the generated text (exact bytes on a pipe): only stderr here
# a tensor the architecture does not read is refused, its name escaped
WANT=$ESC_SHOWN clean "run: hostile unused tensor (error message)" "$BANGTRACE" run --model $H -n 1 --prompt hi
grep -qF "is not used by architecture" err || fail "run: the unused hostile tensor is refused: $(head -c 300 err)"
H=hostile_run.gguf     # the same model without it, which runs
WANT=$ESC_SHOWN clean "run: banner of a hostile model" sh -c '"$0" run --model "$1" -n 8 --prompt hi --trace t.db >/dev/null' "$BANGTRACE" $H
WANT=$ESC_SHOWN clean "run -v: debug lines" "$BANGTRACE" -v run --model $H -n 4 --prompt hi --json
WANT='\x1b]0;t\x07\x9b' clean "run: hostile architecture (error message)" "$BANGTRACE" run --model hostile_arch.gguf -n 1 --prompt hi
"$BANGTRACE" run --model $H -n 8 --prompt hi >gen.out 2>/dev/null
[ "$(raw_bytes gen.out)" -gt 0 ] || fail "run: generated text on a pipe is not the model's exact bytes"
if script -qc true /dev/null >/dev/null 2>&1; then
    script -qc "'$BANGTRACE' run --model $H -n 8 --prompt hi" /dev/null >tty.out 2>&1
    n=$(STRIP_CR=1 raw_bytes tty.out)
    [ "$n" = 0 ] && grep -qF "$ESC_SHOWN" tty.out && ok "run: generated text on a terminal is escaped" ||
        fail "run on a terminal: $n lines with raw control bytes"
    script -qc "'$BANGTRACE' tokenize --model $H --decode 300,301" /dev/null >tty.out 2>&1
    n=$(STRIP_CR=1 raw_bytes tty.out)
    [ "$n" = 0 ] && grep -qF "$ESC_SHOWN" tty.out && ok "tokenize --decode on a terminal is escaped" ||
        fail "tokenize --decode on a terminal: $n lines with raw control bytes"
else
    ok "script(1) not available: terminal checks skipped"
fi
clean "tokenize" "$BANGTRACE" tokenize --model $H "tok300"
WANT=$ESC_SHOWN clean "report" "$BANGTRACE" report t.db
clean "report -o" "$BANGTRACE" report t.db -o rep.md
[ "$(raw_bytes rep.md)" = 0 ] && grep -qF "$ESC_SHOWN" rep.md && ok "report -o file escaped" || fail "report -o: raw bytes in the file"
clean "bisect" "$BANGTRACE" bisect t.db
clean "diff" "$BANGTRACE" diff t.db t.db
WANT=$ESC_SHOWN clean "browse --dump run" "$BANGTRACE" browse t.db --dump run
WANT=$ESC_SHOWN clean "browse --dump tokens" "$BANGTRACE" browse t.db --dump tokens

# A faulty run (events, propagation, backtrace), then a trace edited the way
# an attacker would: every text column and meta value made hostile.
"$BANGTRACE" run --model $H -n 6 --prompt hi --trace nan.db --inject 'nan@step>=2,layer=0,op=ffn_down' >/dev/null 2>&1
[ -f nan.db ] || fail "run --inject did not write nan.db"
"$PY" - nan.db <<'PYEOF' || fail "could not craft the hostile trace"
import sqlite3, sys, json
EVIL = '\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\u009b32m\u202e'
d = sqlite3.connect(sys.argv[1])
d.execute("UPDATE tensors SET name = name || ?", (EVIL,))
d.execute("UPDATE events SET detail = coalesce(detail, '') || ?, tensor = coalesce(tensor, '') || ?", (EVIL, EVIL))
d.execute("UPDATE backtraces SET frames = frames || ?", (EVIL + '\n',))
d.execute("UPDATE meta SET value = value || ? WHERE key IN ('model_name', 'model_path', 'host', 'cpu', 'prompt_text', 'started_at')", (EVIL,))
d.execute("UPDATE meta SET value = ? WHERE key = 'argv'", (json.dumps(['bangtrace', 'run', EVIL]),))
d.execute("UPDATE tokens SET piece = CAST(? AS BLOB) WHERE rowid IN (SELECT rowid FROM tokens LIMIT 3)", (EVIL,))
d.commit()
PYEOF
WANT=$ESC_SHOWN clean "bisect of a crafted trace" "$BANGTRACE" bisect nan.db
WANT='\u001B]0;pwned-title' clean "bisect --json of a crafted trace" "$BANGTRACE" bisect --json nan.db
WANT=$ESC_SHOWN clean "report of a crafted trace" "$BANGTRACE" report nan.db
WANT=$ESC_SHOWN clean "diff of crafted traces" "$BANGTRACE" diff nan.db t.db
for v in tokens step walk run; do
    clean "browse --dump $v of a crafted trace" "$BANGTRACE" browse nan.db --dump $v
done
finish
