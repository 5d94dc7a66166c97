# tests/lib.sh - sourced by shell tests. Exit 77 = SKIP, 0 = PASS, else FAIL.
set -u
: "${BANGTRACE:?BANGTRACE must point at the built binary}"
: "${BT_SHARED:=${BT_SRCDIR:-.}/../shared}"
MODELS=$BT_SHARED/models
STORIES=$MODELS/llama2c/stories260K.bin
TOK512=$MODELS/llama2c/tok512.bin
SMOL=${BT_CACHE:-$HOME/.cache/bangtrace}/models/SmolLM2-135M-Instruct.Q4_1.gguf
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bt-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
failures=0

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
need_shared() { [ -f "$STORIES" ] || skip "test data not found at $BT_SHARED (set BT_SHARED)"; }
need_smol() { [ -f "$SMOL" ] || skip "default model not cached at $SMOL (./quickstart fetches it)"; }
# expect_exit CODE DESC CMD...: run CMD, check its exit status; output in $TMP/out, $TMP/err
expect_exit() {
    local want=$1 desc=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then fail "$desc: exit $got, expected $want; stderr: $(head -c 400 "$TMP/err")"; return 1; fi
    ok "$desc"
}
finish() { [ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }; exit 0; }
