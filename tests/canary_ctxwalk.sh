#!/bin/sh
# canary_ctxwalk.sh - `bangtrace canary` flags an injected server (token-0
# wall) within K checks and runs --on-fail exactly once per K-streak, stays
# quiet on a clean server, appends to its SQLite log and refuses any other
# file; `canary --report` numbers match the log; SIGTERM closes the log.
# `ctxwalk --model stories260K --inject longctx@pos>=P` reports the first
# walked length whose context reaches P. Servers bind 127.0.0.1 on free
# ports and are always stopped; every loop is bounded (--count).
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
py=${PYTHON3:-python3}
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT

# --- ctxwalk (native, no server) -----------------------------------------
expect_exit 1 "ctxwalk finds the longctx onset" "$BANGTRACE" ctxwalk --model "$STORIES" --tokenizer "$TOK512" \
    --lengths 64,96,128,160 --depths 0.1,0.9 --inject 'longctx@pos>=110,op=attn_k,scale=1.5'
# 96 tokens of context reach position 95 at most; 128 reach 110
grep -q "first failing length: 128 tokens" "$TMP/out" && ok "onset within one step (128 = first length reaching 110)" \
    || fail "ctxwalk onset: $(cat "$TMP/out")"
grep -q "^ *96 .* ok " "$TMP/out" && ! grep -q "^ *96 .*FAIL" "$TMP/out" && ok "96 passes (never reaches 110)" || fail "96: $(cat "$TMP/out")"
expect_exit 0 "ctxwalk: an onset past the walk is not reported" "$BANGTRACE" ctxwalk --model "$STORIES" --tokenizer "$TOK512" \
    --lengths 64,96 --depths 0.5 --inject 'longctx@pos>=110,op=attn_k,scale=1.5'
grep -q "no failure up to 96" "$TMP/out" || fail "no-failure wording: $(cat "$TMP/out")"
expect_exit 2 "ctxwalk: bad --lengths" "$BANGTRACE" ctxwalk --model "$STORIES" --tokenizer "$TOK512" --lengths 128,64
expect_exit 2 "ctxwalk: lengths past the context" "$BANGTRACE" ctxwalk --model "$STORIES" --tokenizer "$TOK512" --lengths 64,100000
expect_exit 2 "ctxwalk: bad --depths" "$BANGTRACE" ctxwalk --model "$STORIES" --tokenizer "$TOK512" --depths 0.5,2
expect_exit 2 "ctxwalk: --url and --model" "$BANGTRACE" ctxwalk --model "$STORIES" --url http://127.0.0.1:1
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "ctxwalk error is not one line: $(cat "$TMP/err")"

# --- canary: flags and files, no server ----------------------------------
expect_exit 2 "canary without --url" "$BANGTRACE" canary --count 1
expect_exit 2 "canary: bad --every" "$BANGTRACE" canary --url http://127.0.0.1:1 --every soon
expect_exit 2 "canary: --fail-after 0" "$BANGTRACE" canary --url http://127.0.0.1:1 --fail-after 0
printf 'not json\n' > "$TMP/bad.jsonl"
expect_exit 2 "canary: a prompts line that is not JSON" "$BANGTRACE" canary --url http://127.0.0.1:1 --prompts "$TMP/bad.jsonl"
grep -q "bad.jsonl:1" "$TMP/err" || fail "prompts error names the line: $(cat "$TMP/err")"
echo '{"prompt":"x"}' > "$TMP/noexp.jsonl"
expect_exit 2 "canary: a prompt without expect" "$BANGTRACE" canary --url http://127.0.0.1:1 --prompts "$TMP/noexp.jsonl"
echo 'keep me' > "$TMP/notes.txt"
expect_exit 2 "canary: --log on a text file is refused" "$BANGTRACE" canary --url http://127.0.0.1:1 --count 1 --log "$TMP/notes.txt"
[ "$(cat "$TMP/notes.txt")" = "keep me" ] && ok "the text file is untouched" || fail "notes.txt changed"
"$py" -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('CREATE TABLE t(x)'); d.commit()" "$TMP/foreign.db"
sum=$(cksum < "$TMP/foreign.db")
expect_exit 2 "canary: --log on another SQLite database is refused" "$BANGTRACE" canary --url http://127.0.0.1:1 --count 1 --log "$TMP/foreign.db"
[ "$(cksum < "$TMP/foreign.db")" = "$sum" ] && ok "the database is untouched" || fail "foreign.db changed"
ln -s "$TMP/new.db" "$TMP/link.db"
expect_exit 2 "canary: --log through a symbolic link is refused" "$BANGTRACE" canary --url http://127.0.0.1:1 --count 1 --log "$TMP/link.db"
[ ! -e "$TMP/new.db" ] || fail "a file was created through the link"
expect_exit 2 "canary --report on a text file" "$BANGTRACE" canary --report "$TMP/notes.txt"
[ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "not a canary log" "$TMP/err" || fail "report error: $(cat "$TMP/err")"
expect_exit 2 "canary --report on another database" "$BANGTRACE" canary --report "$TMP/foreign.db"
expect_exit 2 "canary --report on a missing file" "$BANGTRACE" canary --report "$TMP/missing.db"

built_with LIBMICROHTTPD || { echo "note: built without libmicrohttpd; server checks skipped"; finish; }
command -v curl >/dev/null || { echo "note: curl not found; server checks skipped"; finish; }

stop_server() { kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; pids=""; }
# rows LOG SQL: one value from the log
rows() { "$py" -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$1" "$2"; }

echo '{"name":"story","prompt":"Once upon a time","max_tokens":12,"expect":"^, there was"}' > "$TMP/p.jsonl"
hook='echo "$BT_CANARY_STREAK $BT_CANARY_CLASS $BT_CANARY_PROMPT" >> "$HOOK"'
export HOOK

# --- clean server: quiet ---------------------------------------------------
start_server clean || finish
url=http://127.0.0.1:$port
HOOK=$TMP/hook.clean
expect_exit 0 "canary on a clean server" "$BANGTRACE" canary --url "$url" --prompts "$TMP/p.jsonl" --every 0.2s --count 4 \
    --fail-after 2 --on-fail "$hook" --log "$TMP/clean.db"
[ ! -e "$HOOK" ] && ok "--on-fail stays quiet" || fail "hook ran on a clean server: $(cat "$HOOK")"
[ "$(grep -c ' ok story ' "$TMP/out")" -eq 4 ] || fail "clean checks: $(cat "$TMP/out")"
[ "$(rows "$TMP/clean.db" 'SELECT count(*) FROM checks WHERE ok=1')" = 4 ] && ok "4 passing checks logged" || fail "clean log"
perm=$(stat -c %a "$TMP/clean.db")
[ "$perm" = 600 ] || fail "log mode $perm, expected 600"
expect_exit 0 "a second canary appends to the log" "$BANGTRACE" canary --url "$url" --prompts "$TMP/p.jsonl" --every 0 --count 2 --log "$TMP/clean.db"
[ "$(rows "$TMP/clean.db" 'SELECT count(*) FROM checks')" = 6 ] && ok "6 checks after appending" || fail "append"

# once per K-streak: expectations fail, fail, pass, fail, fail, fail -> the hook runs twice
{ echo '{"name":"bad1","prompt":"Once upon a time","max_tokens":12,"expect":"^NEVER"}'
  echo '{"name":"bad2","prompt":"Once upon a time","max_tokens":12,"expect":"^NEVER"}'
  echo '{"name":"good","prompt":"Once upon a time","max_tokens":12,"expect":"^, there was"}'
  echo '{"name":"bad3","prompt":"Once upon a time","max_tokens":12,"expect":"^NEVER"}'
  echo '{"name":"bad4","prompt":"Once upon a time","max_tokens":12,"expect":"^NEVER"}'
  echo '{"name":"bad5","prompt":"Once upon a time","max_tokens":12,"expect":"^NEVER"}'; } > "$TMP/mix.jsonl"
HOOK=$TMP/hook.mix
expect_exit 1 "canary: two failing streaks" "$BANGTRACE" canary --url "$url" --prompts "$TMP/mix.jsonl" --every 0 --count 6 \
    --fail-after 2 --on-fail "$hook" --log "$TMP/mix.db"
[ "$(cat "$HOOK" 2>/dev/null)" = "$(printf '2 expect_failed bad2\n2 expect_failed bad4')" ] \
    && ok "--on-fail ran once per streak, with the failure in its environment" || fail "hook: $(cat "$HOOK" 2>/dev/null)"
expect_exit 0 "canary --report" "$BANGTRACE" canary --report "$TMP/mix.db"
grep -q "6 checks" "$TMP/out" && grep -q "expect_failed  *5" "$TMP/out" && grep -q "longest failing streak 3" "$TMP/out" \
    && grep -q "failure rate 83.33% (5 of 6), Wilson 95% interval \[43.65%, 96.99%\]" "$TMP/out" \
    && grep -q "first failure .*, last failure " "$TMP/out" && ok "report numbers match the log" || fail "report: $(cat "$TMP/out")"

# SIGTERM: the log is closed and complete
"$BANGTRACE" canary --url "$url" --prompts "$TMP/p.jsonl" --every 0.2s --log "$TMP/term.db" > "$TMP/term.out" 2>&1 &
cpid=$!
pids="$pids $cpid"
i=0
while [ $i -lt 50 ] && ! grep -q ' ok ' "$TMP/term.out"; do sleep 0.1; i=$((i + 1)); done
kill -TERM "$cpid"; wait "$cpid"; st=$?
[ "$st" = 143 ] && ok "SIGTERM: canary dies by the signal after closing" || fail "SIGTERM status $st: $(cat "$TMP/term.out")"
n=$(rows "$TMP/term.db" 'SELECT count(*) FROM checks')
[ "$n" -ge 1 ] && [ ! -e "$TMP/term.db-journal" ] && [ "$n" = "$(grep -c ' ok ' "$TMP/term.out")" ] \
    && ok "SIGTERM: every printed check is in the log ($n)" || fail "term log: $n rows; $(cat "$TMP/term.out")"
# ctxwalk over HTTP: stories260K cannot retrieve the needle, so every
# length fails as expect_failed (the request path works: no http_error)
expect_exit 1 "ctxwalk --url --completions" "$BANGTRACE" ctxwalk --url "$url" --completions --lengths 64,128 --depths 0.5 --max-tokens 8
[ "$(grep -c 'FAIL expect_failed' "$TMP/out")" -eq 2 ] && grep -q "first failing length: 64" "$TMP/out" \
    && ok "ctxwalk over HTTP judges retrieval" || fail "ctxwalk --url: $(cat "$TMP/out")"
expect_exit 2 "ctxwalk --completions without --url" "$BANGTRACE" ctxwalk --model "$STORIES" --completions
stop_server

# --- injected server: flagged within K -------------------------------------
start_server wall --inject 'nan@step=3,op=token_embd' || finish
HOOK=$TMP/hook.wall
expect_exit 1 "canary flags an injected server" "$BANGTRACE" canary --url "http://127.0.0.1:$port" --prompts "$TMP/p.jsonl" \
    --every 0.2s --count 5 --fail-after 3 --on-fail "$hook" --log "$TMP/wall.db"
[ "$(cat "$HOOK" 2>/dev/null)" = "3 token_wall story" ] && ok "--on-fail ran exactly once, at the 3rd failure" || fail "hook: $(cat "$HOOK" 2>/dev/null)"
grep -q "FAIL story token_wall (streak 3)" "$TMP/out" || fail "canary lines: $(cat "$TMP/out")"
expect_exit 0 "canary --report on the wall log" "$BANGTRACE" canary --report "$TMP/wall.db"
[ "$(rows "$TMP/wall.db" "SELECT count(*) FROM checks WHERE class='token_wall'")" = 5 ] && grep -q "token_wall  *5" "$TMP/out" \
    && grep -q "longest failing streak 5" "$TMP/out" && ok "wall report matches the log" || fail "wall report: $(cat "$TMP/out")"
stop_server
finish
