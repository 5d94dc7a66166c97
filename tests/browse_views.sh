# browse_views.sh - the view registry end to end (issue 23): a view's own
# state is made by its class and kept by the app, so
#   * `browse --view spec --step 7` opens the Speculation view on the first
#     verify step at or after 7 (the class's start hook; verify steps of the
#     make_trace.py spec trace are 5, 10, 15, ...);
#   * the Speculation view's cursor survives switching to another view and
#     back (its state belongs to it, not to whichever view was drawn last);
#   * `--dump` / `--view` with an unknown name list every registered view,
#     in registry order, and exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
built_with NCURSESW || skip "built without ncursesw: no interactive browser to drive"
command -v tmux >/dev/null 2>&1 || skip "tmux not installed"
PY=${PYTHON3:-python3}
command -v "$PY" >/dev/null 2>&1 && "$PY" -c 'import sqlite3' 2>/dev/null || skip "no python3 with sqlite3 to build a trace"
"$PY" "$BT_SRCDIR/tests/data-gen/make_trace.py" spec "$TMP/S.db" || { echo "FAIL: make_trace.py spec"; exit 1; }

T="tmux -L bt-views-$$"
cleanup() { $T kill-server >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
export TERM=${TERM:-xterm}
[ "$TERM" = dumb ] && export TERM=xterm
screen() { $T capture-pane -p -t bt; }
wait_for() {    # wait_for TEXT [SECONDS]: poll the pane until TEXT shows
    local i=0 n=$(( ${2:-5} * 10 ))
    while [ $i -lt $n ]; do screen | grep -qF -- "$1" && return 0; sleep 0.1; i=$((i + 1)); done
    return 1
}

# the names, from the registry, in its order
for flag in --dump --view; do
    expect_exit 2 "$flag nope" "$BANGTRACE" browse "$TMP/S.db" $flag nope || continue
    if grep -qF "no view 'nope' (tokens, step, walkback, run, backtrace, spec, kernels, cache)" "$TMP/err" &&
        [ "$(wc -l < "$TMP/err")" -eq 1 ]; then ok "$flag nope: one line naming every view"
    else fail "$flag nope: $(cat "$TMP/err")"; fi
done

$T -f /dev/null new-session -d -s bt -x 100 -y 30 \
    "env LANG=C.UTF-8 '$BANGTRACE' browse '$TMP/S.db' --view spec --step 7; echo BROWSE-EXIT=\$?; sleep 60" || { fail "tmux new-session"; finish; }
$T set-option -t bt -g status off >/dev/null 2>&1
if wait_for "verify step 10 " 10; then ok "--view spec --step 7 opens on verify step 10"
else fail "--step 7: Speculation view not on verify step 10: $(screen | tail -2)"; fi
$T send-keys -t bt Down
wait_for "verify step 15 " && ok "Down: verify step 15" || fail "Down: $(screen | tail -1)"
$T send-keys -t bt 1
wait_for "Enter:step" && ok "1: the Tokens view" || fail "1: not the Tokens view: $(screen | tail -1)"
$T send-keys -t bt 7
sleep 0.3
$T send-keys -t bt 6
wait_for "verify step 15 " && ok "back in Speculation: still on verify step 15 (the view's own state)" ||
    fail "Speculation lost its cursor: $(screen | tail -1)"
$T send-keys -t bt q
wait_for "BROWSE-EXIT=0" && ok "q: exit 0" || fail "q: $(screen | tail -2)"
finish
