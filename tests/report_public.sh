#!/bin/sh
# tests/report_public.sh - `bangtrace report` is for a public issue: on a
# trace recorded under a fake $HOME (model, request and trace under it, a
# distinctive host name where the machine lets us set one) the report names
# no host, holds no absolute path and never $HOME (the model by base name and
# SHA-256); -o FILE is created 0600 whatever the umask; a redacted export's
# report does not claim the request body is stored (nor offer bisect
# --reference); the first non-finite's backtrace starts at the engine frame
# that computed the op, not in the recorder.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
"$BANGTRACE" help run | grep -q -- '--trace' || skip "this build's run has no --trace"
H=$TMP/home/quillfeather-ann
mkdir -p "$H/models" "$H/work" || { fail "mkdir"; finish; }
cp "$STORIES" "$H/models/stories260K.bin" && cp "$TOK512" "$H/models/tok512.bin" || { fail "copying the model"; finish; }
printf '{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":12,"temperature":0}\n' > "$H/work/req.json"
set -- run --model "$H/models/stories260K.bin" --tokenizer "$H/models/tok512.bin" --request "$H/work/req.json" --chat-template chatml -n 12 \
    --threads 1 --inject 'nan@layer=1,op=ffn_down,step=3' --trace "$H/work/t.db"
# a host name of our own when we may set one (a new UTS namespace), else the machine's
HOST=bt-host-zq7wv
if command -v unshare > /dev/null 2>&1 && unshare -u sh -c "hostname $HOST" 2> /dev/null; then
    expect_exit 0 "run --trace under a fake HOME, host $HOST" env HOME="$H" unshare -u sh -c 'hostname "$0" && exec "$@"' "$HOST" "$BANGTRACE" -q "$@"
else
    HOST=$(hostname 2> /dev/null || echo "")
    expect_exit 0 "run --trace under a fake HOME" env HOME="$H" "$BANGTRACE" -q "$@"
fi
if command -v sqlite3 > /dev/null 2>&1; then
    m=$(sqlite3 "$H/work/t.db" "SELECT value FROM meta WHERE key = 'model_path'")
    [ "$m" = "$H/models/stories260K.bin" ] && ok "the trace records the absolute model path (the test is not void)" || fail "model_path '$m'"
    [ -z "$HOST" ] || [ "$(sqlite3 "$H/work/t.db" "SELECT value FROM meta WHERE key = 'host'")" = "$HOST" ] ||
        fail "the trace does not record host $HOST"
fi

# public CHECK-LABEL FILE: no host, no HOME, no absolute path
public() {
    [ -s "$2" ] || { fail "$1: no report"; return; }
    if [ ${#HOST} -ge 3 ] && grep -n -F -e "$HOST" "$2" > "$TMP/hits"; then fail "$1: host name: $(head -n 2 "$TMP/hits")"
    else ok "$1: no host name${HOST:+ ($HOST)}"; fi
    grep -q '^| host |' "$2" && fail "$1: a host row" || ok "$1: no host row"
    if grep -n -F -e "$H" -e "$TMP" "$2" > "$TMP/hits"; then fail "$1: \$HOME: $(head -n 2 "$TMP/hits")"; else ok "$1: no \$HOME"; fi
    if grep -n -E "(^|[[:space:]\`'\"(=:,|[<])/[A-Za-z0-9._~+-]" "$2" > "$TMP/hits"; then fail "$1: an absolute path: $(head -n 3 "$TMP/hits")"
    else ok "$1: no absolute path"; fi
    grep -q '^| file | `stories260K.bin` |' "$2" && grep -q "^| SHA-256 | \`$(sha256sum "$STORIES" | cut -d' ' -f1)\` |" "$2" &&
        ok "$1: the model by base name and SHA-256" || fail "$1: model rows: $(grep -A3 '^## Model' "$2" | tr '\n' ' ')"
}

cd "$TMP" || exit 1
expect_exit 0 "report -o FILE (umask 000)" sh -c "umask 000 && exec \"\$0\" report \"\$1\" -o \"\$2\"" "$BANGTRACE" "$H/work/t.db" "$TMP/r.md"
public "report -o" "$TMP/r.md"
mode=$(stat -c %a "$TMP/r.md" 2> /dev/null || stat -f %Lp "$TMP/r.md")
[ "$mode" = 600 ] && ok "-o FILE is mode 0600 under umask 000" || fail "-o FILE is mode $mode"
expect_exit 0 "report -o FILE --force replaces it" "$BANGTRACE" report "$H/work/t.db" -o "$TMP/r.md" --force
mode=$(stat -c %a "$TMP/r.md" 2> /dev/null || stat -f %Lp "$TMP/r.md")
[ "$mode" = 600 ] && ok "--force: still 0600" || fail "--force: mode $mode"
expect_exit 0 "report to stdout, HOME set" env HOME="$H" "$BANGTRACE" report "$H/work/t.db"
public "stdout" "$TMP/out"
grep -q 'The request body is stored in the trace' "$TMP/out" && ok "an unredacted trace: the request body is stored" ||
    fail "unredacted: no request-body sentence"

# the backtrace of the first non-finite starts at the op's engine frame
if grep -q '^## Host backtrace (first_nonfinite' "$TMP/r.md"; then
    first=$(sed -n '/^## Host backtrace (first_nonfinite/,/^## /p' "$TMP/r.md" | grep '^#0 ' | head -n 1)
    sym=$(echo "$first" | awk '{print $3}')
    case "$sym" in
        ''|record_tap*|cb_flush*|cb_observe*|observe_taps*|own_backtrace*|bt_backtrace*|tap+*|tap.*|tap_expert*) fail "backtrace starts in the recorder: '$first'" ;;
        *) ok "backtrace frame #0 is the op's: $first" ;;
    esac
    sed -n '/^## Host backtrace (first_nonfinite/,/^## /p' "$TMP/r.md" | grep -q -E 'record_tap|cb_flush|observe_taps' &&
        fail "the recorder's frames are listed" || ok "no recorder frame in the backtrace"
else
    echo "note: no first_nonfinite backtrace in this build (no libunwind)"
fi

# first_frame REPORT: the first frame line of its first_nonfinite backtrace
first_frame() { sed -n '/^## Host backtrace (first_nonfinite/,/^## /p' "$1" | grep '^#[0-9]* ' | head -n 1; }
recorder_sym() { case "$(echo "$1" | awk '{print $3}')" in record_tap*|cb_flush*|cb_observe*|observe_taps*|tap+*|tap.*) return 0 ;; esac; return 1; }
# a trace recorded before this version (its stack taken in the recorder): the report leaves those frames out
if command -v sqlite3 > /dev/null 2>&1 && grep -q '^## Host backtrace (first_nonfinite' "$TMP/r.md"; then
    cp "$H/work/t.db" "$TMP/oldbt.db"
    sqlite3 "$TMP/oldbt.db" "UPDATE backtraces SET frames = '#0 0x0000555555555461 record_tap+0x301 (bangtrace)' || char(10) ||
        '#1 0x0000555555555971 cb_flush+0x4b1 (bangtrace)' || char(10) || frames WHERE kind = 'first_nonfinite'"
    expect_exit 0 "report on a trace whose backtrace starts in the recorder" "$BANGTRACE" report "$TMP/oldbt.db"
    f=$(first_frame "$TMP/out")
    if [ -n "$f" ] && ! recorder_sym "$f" && grep -q '^(2 frames of bangtrace.s recorder above the op left out)' "$TMP/out"; then
        ok "an older trace's recorder frames are left out: $f"
    else fail "older trace: first frame '$f'"; fi
fi
# the shipped sample trace was recorded by this version
expect_exit 0 "report on traces/wall-of-bang.db" "$BANGTRACE" report "${BT_SRCDIR:-.}/traces/wall-of-bang.db"
f=$(first_frame "$TMP/out")
[ -n "$f" ] && ! recorder_sym "$f" && ! grep -q 'recorder above the op left out' "$TMP/out" &&
    ok "the sample trace's backtrace starts at the op: $f" || fail "sample trace backtrace: '$f'"

# a redacted export's report
expect_exit 0 "export --redact" "$BANGTRACE" export "$H/work/t.db" -o "$TMP/share.db" --redact
expect_exit 0 "report on the redacted export" "$BANGTRACE" report "$TMP/share.db"
grep -q 'The request body is stored' "$TMP/out" && fail "redacted: claims the request body is stored" ||
    ok "redacted: no claim that the request body is stored"
grep -q 'exported with `--redact=prompt`: the request body and prompt are not in it' "$TMP/out" &&
    ok "redacted: says the request body was removed" || fail "redacted: $(sed -n '/^## Reproduce/,$p' "$TMP/out" | tr '\n' ' ')"
grep -q -E '^bangtrace bisect .*--reference' "$TMP/out" && fail "redacted: offers bisect --reference (which refuses it)" || ok "redacted: no bisect --reference"
public "redacted" "$TMP/out"
finish
