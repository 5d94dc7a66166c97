#!/bin/sh
# CLI hygiene (issue 22): a write error on stdout is exit 2 with one line
# for every command (stdout on /dev/full once exited 0); a flag that takes a
# value never swallows the next flag (`run --trace --force` once created a
# trace named "--force"); `forward --dump DIR` replaces an earlier dump only
# with --force; a full disk during `run --trace` leaves a trace that says
# so (status io_error, meta write_error), not "still running: killed?".
. "${BT_SRCDIR:-.}/tests/lib.sh"
TOOL=${BT_BUILDDIR:-.}/tests/trace_writer_tool
need_shared
[ -x "$TOOL" ] || skip "tests/trace_writer_tool is not built"
[ -w /dev/full ] || skip "/dev/full is not available"
L2C="--model $STORIES --tokenizer $TOK512"
one_line_err() {
    n=$(wc -l < "$TMP/err")
    if [ "$n" -ne 1 ] || ! grep -q -e "$1" "$TMP/err"; then fail "expected one stderr line mentioning '$1', got: $(head -c 600 "$TMP/err")"; fi
}
"$TOOL" write "$TMP/t.db" --steps 6 --bad-step 3 > /dev/null || { fail "writing a trace"; finish; }

# --- 1. stdout on a full device --------------------------------------------
# full CMD...: CMD with stdout on /dev/full exits 2, its last stderr line names the write error
full() {
    desc=$1; shift
    "$@" > /dev/full 2> "$TMP/err"
    rc=$?
    if [ "$rc" -ne 2 ]; then fail "$desc >/dev/full: exit $rc, expected 2; stderr: $(head -c 300 "$TMP/err")"; return; fi
    if tail -n 1 "$TMP/err" | grep -q "No space left on device"; then ok "$desc >/dev/full: exit 2, names the error"
    else fail "$desc >/dev/full: the error is not named: $(head -c 300 "$TMP/err")"; fi
    n=$(grep -c "No space left on device" "$TMP/err")
    [ "$n" -eq 1 ] || fail "$desc >/dev/full: $n lines about the write error, expected one: $(cat "$TMP/err")"
}
full "run" "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 8
full "run --json" "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 8 --json
full "inspect" "$BANGTRACE" inspect "$STORIES" --tokenizer "$TOK512"
full "inspect --json" "$BANGTRACE" inspect "$STORIES" --tokenizer "$TOK512" --json
full "tokenize" "$BANGTRACE" tokenize $L2C "Once upon a time"
full "bisect" "$BANGTRACE" bisect "$TMP/t.db"
full "bisect --json" "$BANGTRACE" bisect "$TMP/t.db" --json
full "report" "$BANGTRACE" report "$TMP/t.db"
full "diff" "$BANGTRACE" diff "$TMP/t.db" "$TMP/t.db"
full "help" "$BANGTRACE" help
full "help run" "$BANGTRACE" help run
full "run --help" "$BANGTRACE" run --help
full "--version" "$BANGTRACE" --version
if "$BANGTRACE" browse "$TMP/t.db" --dump tokens > /dev/null 2>&1; then
    full "browse --dump tokens" "$BANGTRACE" browse "$TMP/t.db" --dump tokens
    full "browse --dump step" "$BANGTRACE" browse "$TMP/t.db" --dump step --step 3
else echo "note: browse --dump does not run in this build; not checked"; fi
# a good stdout still exits 0
expect_exit 0 "run with a working stdout" "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 4

# --- 2a. a value flag followed by a flag -------------------------------------
cd "$TMP" || { fail "cd $TMP"; finish; }
expect_exit 2 "run --trace --force" "$BANGTRACE" run $L2C --prompt "Once" -n 2 --trace --force && one_line_err "\-\-trace needs a value"
[ -e "$TMP/--force" ] && fail "run --trace --force created a file named --force" || ok "no file named --force"
expect_exit 2 "run --prompt --json" "$BANGTRACE" run $L2C --prompt --json && one_line_err "\-\-prompt needs a value"
expect_exit 2 "run -n --json" "$BANGTRACE" run $L2C --prompt hi -n --json && one_line_err "\-n needs a value"
expect_exit 2 "report -o --force" "$BANGTRACE" report "$TMP/t.db" -o --force && one_line_err "\-o needs a value"
[ -e "$TMP/--force" ] && fail "report -o --force wrote a file named --force"
expect_exit 2 "export -o --force" "$BANGTRACE" export "$TMP/t.db" -o --force && one_line_err "\-o needs a value"
[ -e "$TMP/--force" ] && fail "export -o --force wrote a file named --force"
expect_exit 2 "bisect --limit --json" "$BANGTRACE" bisect "$TMP/t.db" --limit --json && one_line_err "\-\-limit needs a value"
expect_exit 2 "forward --dump --threads" "$BANGTRACE" forward $L2C --tokens "1 2" --dump --threads 1 && one_line_err "\-\-dump needs a value"
expect_exit 2 "browse --dump --all" "$BANGTRACE" browse "$TMP/t.db" --dump --all && one_line_err "\-\-dump needs a value"
expect_exit 2 "diff --tolerance --json" "$BANGTRACE" diff "$TMP/t.db" "$TMP/t.db" --tolerance --json && one_line_err "\-\-tolerance needs a value"
expect_exit 2 "tokenize --file --render" "$BANGTRACE" tokenize $L2C --file --render && one_line_err "\-\-file needs a value"
expect_exit 2 "serve --port --threads" "$BANGTRACE" serve $L2C --port --threads 1 && one_line_err "\-\-port needs a value"
expect_exit 2 "probe --request --json" "$BANGTRACE" probe $L2C --request --json && one_line_err "\-\-request needs a value"
expect_exit 2 "inspect --tokenizer --json" "$BANGTRACE" inspect "$STORIES" --tokenizer --json && one_line_err "\-\-tokenizer needs a value"
expect_exit 2 "bench --model --json" "$BANGTRACE" bench --model --json && one_line_err "\-\-model needs a value"
expect_exit 2 "canary --url --builtin" "$BANGTRACE" canary --url --builtin --count 1 && one_line_err "\-\-url needs a value"
expect_exit 2 "ctxwalk --url --completions" "$BANGTRACE" ctxwalk --url --completions && one_line_err "\-\-url needs a value"
expect_exit 2 "export --window --all-steps" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/w.db" --window --all-steps && one_line_err "\-\-window needs a value"
# boolean flags in a row, and a value that merely starts with '-', still work
expect_exit 0 "run --json --ignore-eos" "$BANGTRACE" run $L2C --prompt "Once" -n 2 --json --ignore-eos
expect_exit 0 "run --prompt '-- not a flag'" "$BANGTRACE" run $L2C --prompt "-- not a flag" -n 2
expect_exit 1 "bisect --limit 1e30 --json (a fault found: exit 1)" "$BANGTRACE" bisect "$TMP/t.db" --limit 1e30 --json
cd - > /dev/null

# --- 2b. forward --dump DIR over an earlier dump ------------------------------
expect_exit 0 "forward --dump into a new DIR" "$BANGTRACE" forward $L2C --tokens "1 2" --dump "$TMP/dump"
cp "$TMP/dump/meta.json" "$TMP/meta.orig"
echo "mine" > "$TMP/dump/logits.f32"
expect_exit 2 "forward --dump over an earlier dump" "$BANGTRACE" forward $L2C --tokens "3 4" --dump "$TMP/dump" && one_line_err "use --force"
[ "$(cat "$TMP/dump/logits.f32")" = mine ] && cmp -s "$TMP/dump/meta.json" "$TMP/meta.orig" &&
    ok "forward left the earlier dump alone" || fail "forward replaced files without --force"
expect_exit 0 "forward --dump --force over an earlier dump" "$BANGTRACE" forward $L2C --tokens "3 4" --dump "$TMP/dump" --force
[ "$(cat "$TMP/dump/logits.f32")" != mine ] && ok "--force replaced the dump" || fail "--force did not replace logits.f32"

# --- 2c. a full disk during run --trace ---------------------------------------
# A file-size limit first (any user; bangtrace ignores SIGXFSZ, so the write fails with EFBIG)
( ulimit -f 500; exec "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 300 --ignore-eos --trace "$TMP/ul.db" ) \
    > /dev/null 2> "$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "ul.db" "$TMP/err" && ok "run under a file-size limit: exit 2 naming the trace" ||
    fail "run under a file-size limit: exit $rc: $(cat "$TMP/err")"
"$BANGTRACE" bisect "$TMP/ul.db" > "$TMP/b.out" 2> "$TMP/b.err"
grep -q "incomplete: a trace write failed" "$TMP/b.out" && ! grep -q "killed?" "$TMP/b.out" &&
    ok "bisect: the trace is incomplete, a write failed (file-size limit)" ||
    fail "bisect after a file-size limit: $(head -2 "$TMP/b.out") $(cat "$TMP/b.err")"

# A tiny tmpfs (root only): the WAL fills it while the run writes.
MNT=$TMP/full
mkdir "$MNT"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1200k tmpfs "$MNT" 2> /dev/null; then
    trap 'umount "$MNT" 2>/dev/null; rm -rf "$TMP"' EXIT
    for size in 1200k 2000k; do
        mount -o remount,size=$size "$MNT" 2> /dev/null
        rm -f "$MNT"/*
        expect_exit 2 "run --trace on a full disk ($size)" "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 300 --ignore-eos \
            --trace "$MNT/t.db"
        grep -q "disk is full\|No space" "$TMP/err" && ok "run names the full disk" || fail "run does not name the full disk: $(cat "$TMP/err")"
        "$BANGTRACE" bisect "$MNT/t.db" > "$TMP/b.out" 2> "$TMP/b.err"
        rc=$?
        if grep -q "killed?" "$TMP/b.out" "$TMP/b.err"; then fail "bisect on the disk-full trace ($size) says killed?: $(head -3 "$TMP/b.out")"
        elif grep -q "incomplete: a trace write failed.*full" "$TMP/b.out"; then ok "bisect: the trace is incomplete because a write failed (disk full) ($size, exit $rc)"
        else fail "bisect on the disk-full trace ($size): exit $rc: $(head -3 "$TMP/b.out") $(cat "$TMP/b.err")"; fi
        if command -v sqlite3 > /dev/null 2>&1; then
            st=$(sqlite3 "$MNT/t.db" "SELECT value FROM meta WHERE key = 'status'" 2>&1)
            [ "$st" = io_error ] && ok "status io_error ($size)" || fail "status after a full disk ($size): $st"
        fi
    done
    umount "$MNT"
else
    echo "note: cannot mount a tmpfs here (not root?): the full-disk check did not run"
fi
finish
