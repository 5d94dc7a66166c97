#!/bin/sh
# The layering, enforced on the built libraries (doc/architecture.md):
# libbtcore.a (model, tokenizer, engine, taps, kernels, util) references no
# SQLite, curses or libunwind symbol, and no core source includes their
# headers; the trace library does not reach into the browser. A program that
# links only the core cannot write or read a trace.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=${BT_BUILDDIR:-.}
S=${BT_SRCDIR:-.}
command -v nm >/dev/null 2>&1 || skip "nm not installed"
for lib in libbtcore.a libbttrace.a libbttui.a; do
    [ -f "$B/$lib" ] || { fail "$B/$lib was not built"; finish; }
done

# Undefined symbols of an archive that no member of it defines.
undefined() {   # undefined LIB
    nm "$1" 2>/dev/null | awk '$1 == "U" { print $2 } NF == 3 && $2 ~ /^[TDBRVWC]$/ { print "DEF " $3 }' |
        sort -u | awk '/^DEF / { d[$2] = 1; next } { u[$1] = 1 } END { for (s in u) if (!(s in d)) print s }' | sort
}
undefined "$B/libbtcore.a" > "$TMP/core.u"
[ -s "$TMP/core.u" ] || fail "nm found no undefined symbols in libbtcore.a (is nm reading it?)"
grep -q '^pcre2_' "$TMP/core.u" && ok "nm sees the core's external references (pcre2)" || fail "no pcre2_ reference in libbtcore.a: the check below would be empty"

curses='^(initscr|endwin|newterm|set_term|newwin|delwin|wrefresh|refresh|wgetch|getch|keypad|stdscr|curscr|setupterm|tigetstr|cur_term|del_curterm|start_color|init_pair|has_colors|use_default_colors|wattr_on|wattr_off|wattrset|wmove|waddnstr|waddnwstr|mvwaddnstr|mvwaddnwstr|mvwaddch|werase|wclear|wbkgd|nodelay|cbreak|noecho|curs_set|COLS|LINES|COLORS|wtimeout)$'
if grep -E '^sqlite3_' "$TMP/core.u" > "$TMP/bad"; then fail "libbtcore.a references SQLite: $(tr '\n' ' ' < "$TMP/bad")"; else ok "core references no sqlite3_ symbol"; fi
if grep -E "$curses" "$TMP/core.u" > "$TMP/bad"; then fail "libbtcore.a references curses: $(tr '\n' ' ' < "$TMP/bad")"; else ok "core references no curses symbol"; fi
if grep -E '^(unw_|_U[A-Za-z0-9]*_)' "$TMP/core.u" > "$TMP/bad"; then fail "libbtcore.a references libunwind: $(tr '\n' ' ' < "$TMP/bad")"; else ok "core references no libunwind symbol"; fi
# Nothing the core needs may come from the trace or TUI libraries.
undefined "$B/libbttrace.a" > "$TMP/trace.u"
nm "$B/libbttrace.a" "$B/libbttui.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBR]$/ { print $3 }' | sort -u > "$TMP/upper.d"
if comm -12 "$TMP/core.u" "$TMP/upper.d" > "$TMP/bad" && [ -s "$TMP/bad" ]; then
    fail "libbtcore.a depends on the trace/TUI libraries: $(tr '\n' ' ' < "$TMP/bad")"
else ok "core depends on nothing above it"; fi
# The trace library stands below the browser.
nm "$B/libbttui.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBR]$/ { print $3 }' | sort -u > "$TMP/tui.d"
if comm -12 "$TMP/trace.u" "$TMP/tui.d" > "$TMP/bad" && [ -s "$TMP/bad" ]; then
    fail "libbttrace.a depends on the TUI: $(tr '\n' ' ' < "$TMP/bad")"
else ok "trace library depends on nothing in the TUI"; fi

# Generation knows no trace (issue 23): the decoder and the generation loop
# report to an observer (gen/observer.h) that src/run/recorder.c implements,
# so no object of src/gen/ references a bt_trace_* or bt_recorder_* symbol.
gen_objs=""
for o in request chat decode generate; do
    if [ -f "$B/src/gen/$o.o" ]; then gen_objs="$gen_objs $B/src/gen/$o.o"
    else fail "$B/src/gen/$o.o not found"; fi
done
if [ -n "$gen_objs" ]; then
    # shellcheck disable=SC2086
    nm -A $gen_objs | awk '$2 == "U" { print $1, $3 }' | grep -E ' (bt_trace_|bt_recorder_)' > "$TMP/bad"
    if [ -s "$TMP/bad" ]; then
        fail "src/gen/ calls the trace or the recorder: $(tr '\n' ' ' < "$TMP/bad")"
    else ok "no object of src/gen/ references bt_trace_* or bt_recorder_*"; fi
    # and the check sees what it checks: the decoder calls the engine
    # shellcheck disable=SC2086
    nm $gen_objs | awk '$1 == "U" { print $2 }' | grep -q '^bt_engine_forward$' &&
        ok "nm reads src/gen/'s objects (decode.o calls bt_engine_forward)" || fail "no bt_engine_forward reference in src/gen/'s objects"
fi

# bangtrace runs on machines without CUDA: it never links the CUDA runtime
# or CUPTI (the plugin bangtrace-cuda.so does, and is opened with dlopen).
if [ -x "$B/bangtrace" ] && command -v readelf >/dev/null 2>&1; then
    readelf -d "$B/bangtrace" | awk '/NEEDED/ { print $NF }' > "$TMP/needed"
    [ -s "$TMP/needed" ] || fail "readelf lists no NEEDED library of bangtrace (is it reading it?)"
    if grep -Ei 'cudart|cupti|libcuda\.|cublas' "$TMP/needed" > "$TMP/bad"; then
        fail "bangtrace links CUDA libraries: $(tr '\n' ' ' < "$TMP/bad")"
    else ok "bangtrace links no CUDA runtime, driver or CUPTI library"; fi
    if nm -D "$B/bangtrace" 2>/dev/null | awk '$1 == "U" { print $2 }' | grep -E '^(cuda|cupti|cu)[A-Z]' > "$TMP/bad"; then
        fail "bangtrace references CUDA symbols: $(tr '\n' ' ' < "$TMP/bad")"
    else ok "bangtrace references no cuda*/cupti* symbol"; fi
fi
if [ -f "$B/bangtrace-cuda.so" ]; then
    nm -D --defined-only "$B/bangtrace-cuda.so" | awk '$2 == "T" { print $3 }' > "$TMP/plugin.d"
    if [ "$(cat "$TMP/plugin.d")" = bt_backend_plugin_init ]; then ok "the CUDA plugin exports bt_backend_plugin_init only"
    else fail "the CUDA plugin exports: $(tr '\n' ' ' < "$TMP/plugin.d")"; fi
fi

# Numerics profiles go through the backend seam (issue 22): the engine hands
# the profile to the backend's num_* ops and runs none of the numerics code
# itself, nor borrows the CPU backend's pool or a buffer's host memory for it.
if [ -f "$B/src/engine/engine.o" ]; then
    if nm "$B/src/engine/engine.o" | awk '$1 == "U" { print $2 }' |
        grep -E '^(bt_numerics_(store|kv|matmul|rmsnorm|attention|ctx_new|ctx_use)|bt_num_round|bt_matmul)$' > "$TMP/bad"; then
        fail "src/engine/engine.c computes numerics itself: $(tr '\n' ' ' < "$TMP/bad")"
    else ok "the engine reaches numerics only through the backend seam"; fi
    nm "$B/src/engine/engine.o" | awk '$1 == "U" { print $2 }' | grep -q '^bt_backend_num_matmul$' &&
        ok "the engine calls bt_backend_num_matmul" || fail "engine.o does not call bt_backend_num_matmul (is nm reading it?)"
else fail "$B/src/engine/engine.o not found"; fi

# Sources of the core library include none of those headers.
core_src="$S/src/base $S/src/model $S/src/tokenizer $S/src/engine $S/src/backend $S/kernels $S/src/tap
          $S/src/gen"
# shellcheck disable=SC2086
if grep -rlE '#[[:space:]]*include[[:space:]]*[<"](sqlite3|n?curses|ncursesw/curses|term|libunwind)\.h' $core_src > "$TMP/bad"; then
    fail "core sources include SQLite/curses/libunwind headers: $(tr '\n' ' ' < "$TMP/bad")"
else ok "no core source includes sqlite3.h, curses.h or libunwind.h"; fi

# Only the trace store sees SQLite (and the canary's own log, a database of
# its own): commands and the browser go through src/trace/ (reader, analyze,
# export).
if grep -rlE '#[[:space:]]*include[[:space:]]*[<"]sqlite3\.h' "$S/src" "$S/tui" | grep -v "^$S/src/trace/" |
    grep -vx "$S/src/prod/canary_log.c" > "$TMP/bad"; then
    fail "sqlite3.h included outside src/trace/ and src/prod/canary_log.c: $(tr '\n' ' ' < "$TMP/bad")"
else ok "only src/trace/ (and the canary log) include sqlite3.h"; fi

# The floors (doc/architecture.md, "Floors"): a source file includes headers
# only from its own floor or a lower one, so the folders read bottom-up the
# way the code depends. The seam headers of src/backend/ stand below the
# backends that implement them (kernels/cpu, kernels/cuda); its dispatcher
# and registry (src/backend/*.c) stand above them.
floor_of() {   # floor_of PATH (relative to the top): a number, or nothing when unplaced
    case $1 in
        src/base/*) echo 0 ;;
        src/sys/*) echo 1 ;;
        src/tokenizer/*) echo 2 ;;
        src/model/*) echo 3 ;;
        src/backend/*.h) echo 4 ;;
        kernels/cpu/*|kernels/cuda/*) echo 5 ;;
        src/backend/*) echo 6 ;;
        src/engine/*) echo 7 ;;
        src/tap/*) echo 8 ;;
        src/gen/*) echo 9 ;;
        src/trace/*) echo 10 ;;
        src/run/*|src/prod/*) echo 11 ;;
        tui/*|src/engines/*|src/api/*) echo 12 ;;
        src/cli/*) echo 13 ;;
    esac
}
: > "$TMP/floors.bad"
n_inc=0
for f in $(cd "$S" && find src kernels tui -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort); do
    ff=$(floor_of "$f")
    [ -n "$ff" ] || { echo "$f: in no floor (add its folder to floor_of)" >> "$TMP/floors.bad"; continue; }
    d=$(dirname "$f")
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$S/$f"); do
        # resolved as the compiler does: beside the file, then -I src, then -I top
        if [ -f "$S/$d/$inc" ]; then p=$d/$inc
        elif [ -f "$S/src/$inc" ]; then p=src/$inc
        elif [ -f "$S/$inc" ]; then p=$inc
        else continue; fi   # config.h and generated headers
        p=$(printf '%s\n' "$p" | sed -e 's|/\./|/|g' -e ':a' -e 's|[^/]*/\.\./||' -e 'ta')
        n_inc=$((n_inc + 1))
        fi_=$(floor_of "$p")
        [ -n "$fi_" ] || continue
        [ "$fi_" -le "$ff" ] || echo "$f (floor $ff) includes $p (floor $fi_)" >> "$TMP/floors.bad"
    done
done
[ "$n_inc" -gt 200 ] || fail "the floor check resolved only $n_inc includes (is it reading the sources?)"
if [ -s "$TMP/floors.bad" ]; then fail "includes that reach up a floor: $(tr '\n' ';' < "$TMP/floors.bad")"
else ok "no source includes a header from a floor above its own ($n_inc includes checked)"; fi
finish
