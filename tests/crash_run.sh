#!/bin/sh
# A fatal signal during `run --trace` (the hidden --inject crash@step=S)
# leaves a consistent trace with a `crash` event and its backtrace, and the
# process exits non-zero: a death that exits 0 fools supervisors.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v sqlite3 >/dev/null || skip "sqlite3 CLI not installed"
q() { sqlite3 -batch -noheader "$TMP/c.db" "$1"; }
"$BANGTRACE" run --model "$STORIES" --tokenizer "$TOK512" --prompt "Once upon a time" -n 40 \
    --inject crash@step=7 --trace "$TMP/c.db" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && ok "exit status $rc (non-zero)" || fail "a crashed run exited 0"
[ "$rc" -eq 139 ] && ok "killed by SIGSEGV" || echo "note: exit status $rc rather than 139"
grep -q 'fatal signal SIGSEGV' "$TMP/err" && ok "stderr names the signal" || fail "stderr: $(cat "$TMP/err")"
[ "$(q 'pragma integrity_check')" = ok ] && ok "trace passes integrity_check" || fail "integrity_check: $(q 'pragma integrity_check')"
[ "$(q "select value from meta where key = 'status'")" = crashed ] && ok "meta status crashed" || fail "status: $(q "select value from meta where key = 'status'")"
[ "$(q "select count(*) from v_events where kind = 'crash'")" = 1 ] && ok "one crash event" || fail "crash events: $(q 'select kind, detail from v_events')"
[ "$(q "select step from v_events where kind = 'crash'")" = 7 ] && ok "crash at step 7" || fail "crash step: $(q "select step from v_events where kind = 'crash'")"
frames=$(q "select frames from backtraces where kind = 'crash'")
if built_with LIBUNWIND; then
    echo "$frames" | grep -q 'bt_engine_forward' && ok "crash backtrace names bt_engine_forward" || fail "crash backtrace: $frames"
    [ "$(q "select value from meta where key = 'backtraces'")" = libunwind ] && ok "meta.backtraces libunwind" || fail "meta.backtraces: $(q "select value from meta where key = 'backtraces'")"
else
    echo "$frames" | grep -q 'without libunwind' && ok "crash backtrace says it is unavailable" || fail "crash backtrace: $frames"
    [ "$(q "select value from meta where key = 'backtraces'")" = unavailable ] && ok "meta.backtraces unavailable" || fail "meta.backtraces: $(q "select value from meta where key = 'backtraces'")"
fi
# every step up to the crashing one is there, contiguous
[ "$(q 'select count(*) || ":" || min(step) || ":" || max(step) from steps')" = "8:0:7" ] && ok "steps 0..7 committed (the crashing step too)" \
    || fail "steps: $(q 'select count(*) || ":" || min(step) || ":" || max(step) from steps')"
# bisect and report read a crashed trace without complaint
"$BANGTRACE" report "$TMP/c.db" > "$TMP/rep" 2>&1 && ok "report reads the crashed trace" || fail "report: $(head -c 300 "$TMP/rep")"
finish
