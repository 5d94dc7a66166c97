#!/bin/sh
# Outputs never destroy a user's file, and every closed trace is one file.
# - run --trace refuses (exit 2, bytes untouched) a text file, the --model
#   GGUF itself (by name or hard link), a link, /dev/full, an existing trace
#   without --force; --force replaces only an idle bangtrace trace.
# - report -o / export -o never write onto the trace.
# - two runs on one path: exactly one exits 2 and the other's trace is whole.
# - a trace is mode 0600 and, after a normal end, a crash, SIGINT or SIGTERM,
#   is one self-contained file: a copy of the .db alone has every step.
# - kill -9: bisect says the run never finished and does not exit 0.
# - a file-size limit mid-run (ulimit -f, as a full disk): one line, exit 2,
#   the committed steps readable.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v sqlite3 >/dev/null || skip "sqlite3 CLI not installed"
# -readonly: never create the file it asks about (a run would then find it there)
q() { sqlite3 -readonly -batch -noheader "$1" "$2"; }
RUN="run --model $STORIES --tokenizer $TOK512 --prompt Once --threads 1"
one_line() { [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q -- "$1" "$TMP/err"; }
no_side() { [ ! -e "$1-wal" ] && [ ! -e "$1-shm" ] && [ ! -e "$1-journal" ]; }

# --- never onto something that is not our trace ---
printf 'my notes\n' > "$TMP/notes.txt"
cp "$TMP/notes.txt" "$TMP/notes.orig"
expect_exit 2 "--trace onto a text file" "$BANGTRACE" $RUN -n 4 --trace "$TMP/notes.txt" && one_line "not a bangtrace trace"
expect_exit 2 "--trace onto a text file, --force" "$BANGTRACE" $RUN -n 4 --trace "$TMP/notes.txt" --force
cmp -s "$TMP/notes.txt" "$TMP/notes.orig" && ok "text file untouched" || fail "text file changed"

GGUF=$MODELS/gguf-tiny/llama-2-tiny-random.gguf
[ -f "$GGUF" ] || GGUF=$STORIES
cp "$GGUF" "$TMP/model.gguf"
ln "$TMP/model.gguf" "$TMP/hard.db"
expect_exit 2 "--trace is the --model itself" "$BANGTRACE" run --model "$TMP/model.gguf" --prompt Once -n 2 \
    --trace "$TMP/model.gguf" --force && one_line "same file as --model"
expect_exit 2 "--trace is a hard link to --model" "$BANGTRACE" run --model "$TMP/model.gguf" --prompt Once -n 2 \
    --trace "$TMP/hard.db" --force && one_line "same file as --model"
expect_exit 2 "--trace is --model by another spelling" "$BANGTRACE" run --model "$TMP/model.gguf" --prompt Once -n 2 \
    --trace "$TMP/./model.gguf" --force
cmp -s "$TMP/model.gguf" "$GGUF" && ok "model untouched" || fail "the model file changed"

ln -s "$TMP/notes.txt" "$TMP/link.db"
expect_exit 2 "--trace through a symlink, --force" "$BANGTRACE" $RUN -n 4 --trace "$TMP/link.db" --force && one_line "symbolic link"
[ -L "$TMP/link.db" ] && cmp -s "$TMP/notes.txt" "$TMP/notes.orig" && ok "link and its target untouched" || fail "link or target changed"

expect_exit 2 "--trace /dev/full, --force" "$BANGTRACE" $RUN -n 4 --trace /dev/full --force && one_line "character device"
[ -c /dev/full ] && ok "/dev/full is still a character device" || fail "/dev/full is no longer a device"
[ "$(id -u)" = 0 ] || echo "note: not root: /dev/full could not have been replaced anyway"
mkdir "$TMP/dir.db"
expect_exit 2 "--trace onto a directory" "$BANGTRACE" $RUN -n 4 --trace "$TMP/dir.db" --force

# --- our own trace: only with --force, mode 0600 ---
expect_exit 0 "run --trace" "$BANGTRACE" $RUN -n 6 --trace "$TMP/t.db"
[ "$(stat -c %a "$TMP/t.db")" = 600 ] && ok "trace mode 0600" || fail "trace mode $(stat -c %a "$TMP/t.db")"
no_side "$TMP/t.db" && ok "closed trace has no -wal/-shm" || fail "closed trace left $(ls "$TMP" | grep 't.db-')"
cp "$TMP/t.db" "$TMP/t.orig"
expect_exit 2 "existing trace, no --force" "$BANGTRACE" $RUN -n 6 --trace "$TMP/t.db" && one_line "use --force"
cmp -s "$TMP/t.db" "$TMP/t.orig" && ok "existing trace untouched" || fail "existing trace changed"
expect_exit 0 "existing trace, --force" "$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "The dog" -n 6 \
    --threads 1 --trace "$TMP/t.db" --force
[ "$(q "$TMP/t.db" "select value from meta where key = 'prompt_text'")" = "The dog" ] && ok "--force replaced the trace" \
    || fail "trace not replaced"
ln -s "$TMP/t.db" "$TMP/tlink.db"
expect_exit 2 "a symlink to a trace, --force" "$BANGTRACE" $RUN -n 4 --trace "$TMP/tlink.db" --force
[ -L "$TMP/tlink.db" ] && ok "link kept" || fail "the link was replaced"
expect_exit 2 "--force without --trace" "$BANGTRACE" $RUN -n 4 --force

# --- report / export never onto the trace ---
cp "$TMP/t.db" "$TMP/t.orig"
expect_exit 2 "report -o TRACE" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/t.db" && one_line "input"
expect_exit 2 "report -o TRACE --force" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/t.db" --force
ln "$TMP/t.db" "$TMP/t-hard.db"
expect_exit 2 "report -o a hard link of TRACE" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/t-hard.db" --force
expect_exit 2 "report -o another trace" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/t.orig" --force && one_line "SQLite"
expect_exit 2 "export -o TRACE --force" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/t.db" --force
cmp -s "$TMP/t.db" "$TMP/t.orig" && ok "trace untouched by report/export" || fail "report/export changed the trace"
expect_exit 0 "report -o new file" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/r.md"
expect_exit 2 "report -o existing file" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/r.md" && one_line "use --force"
expect_exit 0 "report -o existing file --force" "$BANGTRACE" report "$TMP/t.db" -o "$TMP/r.md" --force
expect_exit 2 "export -o a text file --force" "$BANGTRACE" export "$TMP/t.db" -o "$TMP/notes.txt" --force
cmp -s "$TMP/notes.txt" "$TMP/notes.orig" && ok "export left the text file alone" || fail "export replaced a text file"

# --- forward --dump: its own files are rewritten only with --force, never a link or the model ---
mkdir "$TMP/dump"
ln -s "$TMP/notes.txt" "$TMP/dump/token_embd.f32"
expect_exit 2 "forward --dump --force through a link" "$BANGTRACE" forward --model "$STORIES" --tokens "1 2" --dump "$TMP/dump" --force \
    && one_line "symbolic link"
cmp -s "$TMP/notes.txt" "$TMP/notes.orig" && ok "forward left the link's target alone" || fail "forward wrote through a link"

# --- two writers, one path: exactly one wins, its trace whole ---
for force in "" --force; do
    i=0
    while [ $i -lt 3 ]; do
        i=$((i + 1))
        rm -f "$TMP/p.db"
        "$BANGTRACE" $RUN -n 500 --ignore-eos --trace "$TMP/p.db" $force > /dev/null 2> "$TMP/e1" & p1=$!
        "$BANGTRACE" $RUN -n 500 --ignore-eos --trace "$TMP/p.db" $force > /dev/null 2> "$TMP/e2" & p2=$!
        wait $p1; r1=$?
        wait $p2; r2=$?
        if [ "$r1$r2" = 02 ] || [ "$r1$r2" = 20 ]; then
            ok "concurrent runs ${force:-(no --force)} #$i: exits $r1 and $r2"
            [ $r1 = 2 ] && e=$TMP/e1 || e=$TMP/e2
            grep -q "p.db" "$e" && grep -q -e "another bangtrace process is writing" -e "use --force" -e "not a bangtrace trace" "$e" \
                && ok "the loser says why" || fail "loser's message: $(cat "$e")"
        else fail "concurrent runs ${force:-(no --force)} #$i: exits $r1 and $r2 (want one 0 and one 2)"; fi
        [ "$(q "$TMP/p.db" "select value from meta where key = 'status'")" = ok ] && [ "$(q "$TMP/p.db" 'pragma integrity_check')" = ok ] \
            && ok "the winner's trace is whole" || fail "the winner's trace: $(q "$TMP/p.db" "select value from meta where key = 'status'")"
    done
done

# --- a closed trace is one file: normal end, crash, SIGINT, SIGTERM ---
# check_copy NAME STATUS MINSTEPS: copy only NAME.db elsewhere and read it
check_copy() {
    mkdir -p "$TMP/copy"
    rm -f "$TMP/copy/$1.db"*
    no_side "$TMP/$1.db" && ok "$1: no -wal/-shm after close" || fail "$1: left $(ls "$TMP" | grep "^$1.db-")"
    cp "$TMP/$1.db" "$TMP/copy/$1.db"
    st=$(q "$TMP/copy/$1.db" "select value from meta where key = 'status'")
    n=$(q "$TMP/copy/$1.db" 'select count(*) from steps')
    mx=$(q "$TMP/copy/$1.db" 'select max(step) from steps')
    [ "$st" = "$2" ] && ok "$1: status $st" || fail "$1: status '$st', want $2"
    [ "${n:-0}" -ge "$3" ] && [ "$mx" = $((n - 1)) ] && ok "$1: the copy alone has steps 0..$mx" || fail "$1: copy has $n steps (max $mx), want >= $3"
    "$BANGTRACE" report "$TMP/copy/$1.db" > "$TMP/rep" 2>&1 && ok "$1: report reads the copy" || fail "$1: report: $(head -c 300 "$TMP/rep")"
}
"$BANGTRACE" $RUN -n 30 --trace "$TMP/end.db" > /dev/null 2>&1
check_copy end ok 30
("$BANGTRACE" $RUN -n 40 --inject crash@step=7 --trace "$TMP/crash.db" > /dev/null 2>&1) 2> /dev/null   # the shell would say "Segmentation fault"
check_copy crash crashed 8

PY=${PYTHON3:-python3}
if command -v "$PY" > /dev/null 2>&1 && "$PY" -c 'import sqlite3' 2> /dev/null; then
    for sig in INT TERM; do
        # python restores SIGINT's default action (a background job of sh ignores it)
        rc=$("$PY" - "$TMP/sig$sig.db" "$sig" $BANGTRACE $RUN -n 500 --ignore-eos --logits full <<'EOF'
import os, signal, sqlite3, subprocess, sys, time
db, sig, cmd = sys.argv[1], getattr(signal, "SIG" + sys.argv[2]), sys.argv[3:]
p = subprocess.Popen(cmd + ["--trace", db], stdout=subprocess.DEVNULL, stderr=open(db + ".err", "w"),
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
t0 = time.time()
while p.poll() is None and time.time() - t0 < 20:
    n = 0
    try:
        c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
        try: n = c.execute("select count(*) from steps").fetchone()[0]
        finally: c.close()   # a reader still attached would keep the writer in WAL mode
    except sqlite3.Error:
        pass
    if n >= 10: break
    time.sleep(0.005)
p.send_signal(sig)
print(p.wait())
EOF
)
        [ $sig = INT ] && want=-2 || want=-15
        [ "$rc" = "$want" ] && ok "SIG$sig: died by the signal" || fail "SIG$sig: exit status $rc, want $want (killed by SIG$sig)"
        grep -q "interrupted by SIG$sig" "$TMP/sig$sig.db.err" && ok "SIG$sig: stderr says so" || fail "SIG$sig: stderr: $(cat "$TMP/sig$sig.db.err")"
        check_copy "sig$sig" interrupted 10
        [ "$(q "$TMP/copy/sig$sig.db" "select count(*) from events where kind = 'interrupted' and detail like 'SIG$sig%'")" = 1 ] \
            && ok "SIG$sig: an interrupted event names the signal" || fail "SIG$sig: events: $(q "$TMP/copy/sig$sig.db" 'select kind, detail from events')"
        expect_exit 1 "SIG$sig: bisect of the copy is not clean" "$BANGTRACE" bisect "$TMP/copy/sig$sig.db"
        grep -q "unfinished run: the run was interrupted.*last committed step" "$TMP/out" && ok "SIG$sig: bisect says interrupted" \
            || fail "SIG$sig: bisect: $(cat "$TMP/out")"
    done
else echo "note: no python3 with sqlite3: SIGINT/SIGTERM part not run"; fi

# --- kill -9: the status stays running; bisect must not call it clean ---
"$BANGTRACE" $RUN -n 500 --ignore-eos --logits full --trace "$TMP/k.db" > /dev/null 2>&1 &
pid=$!
i=0
while [ $i -lt 2000 ]; do
    n=$(q "$TMP/k.db" 'select count(*) from steps' 2>/dev/null) && [ "${n:-0}" -ge 10 ] && break
    sleep 0.01
    i=$((i + 1))
done
kill -9 $pid 2>/dev/null && killed=yes || killed=no
wait $pid 2>/dev/null
if [ $killed = yes ]; then
    expect_exit 1 "kill -9: bisect exits 1" "$BANGTRACE" bisect "$TMP/k.db"
    grep -q "unfinished run: the run never finished.*last committed step [0-9]" "$TMP/out" && ok "kill -9: bisect says unfinished" \
        || fail "kill -9: bisect: $(cat "$TMP/out")"
    expect_exit 0 "kill -9: report" "$BANGTRACE" report "$TMP/k.db"
    grep -q "^# bangtrace report: unfinished run" "$TMP/out" && grep -q "last committed step" "$TMP/out" \
        && ok "kill -9: report says unfinished" || fail "kill -9: report: $(head -5 "$TMP/out")"
    "$BANGTRACE" bisect --json "$TMP/k.db" > "$TMP/j" 2>/dev/null
    grep -q '"run_status": *"running"' "$TMP/j" && ok "bisect --json run_status" || fail "bisect --json: $(head -c 300 "$TMP/j")"
else fail "the run ended before kill -9"; fi

# --- a file-size limit mid-run (SIGXFSZ ignored: write fails with EFBIG) ---
if (ulimit -f 1000) 2>/dev/null; then
    (ulimit -f 1000; exec "$BANGTRACE" $RUN -n 500 --ignore-eos --logits full --trace "$TMP/full.db") > /dev/null 2> "$TMP/err"
    rc=$?
    [ $rc = 2 ] && ok "file-size limit: exit 2" || fail "file-size limit: exit $rc, want 2: $(cat "$TMP/err")"
    tail -n 1 "$TMP/err" | grep -q "full.db: .*error" && ok "one line names the trace and the error" || fail "stderr: $(cat "$TMP/err")"
    [ "$(grep -c '^bangtrace: run:' "$TMP/err")" = 1 ] && ok "exactly one error line" || fail "error lines: $(cat "$TMP/err")"
    n=$(q "$TMP/full.db" 'select count(*) from steps')
    [ "$(q "$TMP/full.db" 'pragma integrity_check')" = ok ] && [ "${n:-0}" -ge 1 ] && [ "$n" -lt 500 ] \
        && ok "file-size limit: $n committed steps readable" || fail "file-size limit: steps '$n', integrity $(q "$TMP/full.db" 'pragma integrity_check')"
    expect_exit 1 "file-size limit: bisect is not clean" "$BANGTRACE" bisect "$TMP/full.db"
    grep -q "unfinished run" "$TMP/out" && ok "file-size limit: bisect says unfinished" || fail "bisect: $(cat "$TMP/out")"
else echo "note: ulimit -f unavailable: the full-disk part not run"; fi
finish
