# examples/incidents/lib.sh - sourced by every case's run.sh.
#
# Finds the binary ($BANGTRACE, else build/bangtrace), the test data
# ($BT_SHARED, else ../shared beside the clone) and the default model
# (~/.cache/bangtrace/models, as ./quickstart demo leaves it), and gives the
# case a directory for its traces under the build tree
# (build/examples/<case>/, or $BT_BUILDDIR/examples/<case>/ under make
# check): nothing a case writes lands in the source tree.
#
# Exit status of a case: 0 every expectation met, 1 one was not (each is
# printed as FAIL), 2 it could not run (no binary), 77 SKIP (a model or a
# feature it needs is missing; the line says which).
set -u
case_dir=$(cd "$(dirname "$0")" && pwd)
case_name=$(basename "$case_dir")
top=$(cd "$case_dir/../../.." && pwd)
BT=${BANGTRACE:-$top/build/bangtrace}
SHARED=${BT_SHARED:-$top/../shared}
STORIES=$SHARED/models/llama2c/stories260K.bin
TOK512=$SHARED/models/llama2c/tok512.bin
SMOL=${BT_CACHE:-$HOME/.cache/bangtrace}/models/SmolLM2-135M-Instruct.Q4_1.gguf
PY=${PYTHON3:-python3}
THREADS=${BT_THREADS:-2}
OUT=${BT_BUILDDIR:-$top/build}/examples/$case_name
failures=0

[ -x "$BT" ] || { echo "$case_name: no bangtrace binary at $BT (run ./quickstart build, or set BANGTRACE)" >&2; exit 2; }
mkdir -p "$OUT" || exit 2

skip() { echo "SKIP: $*"; exit 77; }
need_stories() { [ -f "$STORIES" ] && [ -f "$TOK512" ] || skip "stories260K not found under $SHARED/models/llama2c (set BT_SHARED)"; }
need_smol() { [ -f "$SMOL" ] || skip "the default model is not cached at $SMOL (./quickstart demo fetches it)"; }
need_python() { "$PY" -c 'import json, struct' 2>/dev/null || skip "python3 is needed by tools/model-edit"; }
need_sqlite3() { command -v sqlite3 >/dev/null || skip "the sqlite3 shell is needed to read the trace's views"; }

heading() { printf '\n== %s\n' "$*"; }
say() { printf '   %s\n' "$*"; }
# A trace path is always fresh: run --trace does not overwrite traces.
fresh() { rm -f "$1" "$1-wal" "$1-shm"; }
# bt NAME ARGS...: show and run `bangtrace ARGS`; stdout in $OUT/NAME.out,
# stderr in $OUT/NAME.err, exit status in $rc. Paths are shown shortened.
bt() {
    local name=$1; shift
    local a shown=bangtrace
    for a in "$@"; do case $a in *" "*) shown+=" '$a'" ;; *) shown+=" $a" ;; esac; done
    shown=${shown//$OUT\//}; shown=${shown//$SHARED\/models\/llama2c\//}; shown=${shown//$SMOL/SmolLM2.gguf}
    shown=${shown//$SHARED\//../shared/}; shown=${shown//$top\//}
    printf '$ %s\n' "$shown"
    "$BT" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    rc=$?
}
# expect DESC CMD...: an expectation of the case; CMD must succeed.
expect() {
    local desc=$1; shift
    if "$@"; then printf '   ok: %s\n' "$desc"
    else printf '   FAIL: %s\n' "$desc"; failures=$((failures + 1)); fi
}
has() { grep -q -e "$2" "$1"; }        # has FILE REGEX
eq() { [ "$1" = "$2" ]; }
finish() {
    echo
    if [ "$failures" -ne 0 ]; then echo "$case_name: FAIL ($failures expectation(s) not met; outputs in $OUT)"; exit 1; fi
    echo "$case_name: ok (outputs and traces in $OUT)"
    exit 0
}
