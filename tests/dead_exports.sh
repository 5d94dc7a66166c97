#!/bin/sh
# dead_exports.sh - every function the five libraries export has a caller
# outside its own object: the binary, another library object, the CUDA
# plugin, a test program or a fuzz harness (tests/fuzz/*.c, read as source
# since they are built only with --enable-fuzz). A function called only in
# its own file should be static; one called nowhere should go (issue 23).
# Functions reached through a vtable or a table are referenced where the
# table is, so they are not exported. KNOWN lists the exports, in files
# other parts of the tree own, that had no caller when this test was
# written; one of them that gains a caller is only reported.
. "${BT_SRCDIR:-.}/tests/lib.sh"
S=${BT_SRCDIR:-.}
B=${BT_BUILDDIR:-.}
command -v nm >/dev/null 2>&1 || skip "nm (binutils) is not installed"
LIBS="libbtcore.a libbttrace.a libbttui.a libbtllama.a libbtcmd.a"
for l in $LIBS; do [ -f "$B/$l" ] || skip "$B/$l not built"; done
KNOWN="bt_llama_settings_is_default bt_session_draft_model bt_session_threads tui_run_meta"

(cd "$B" && nm --defined-only $LIBS 2>/dev/null) | awk '$2 == "T" { print $3 }' | sort -u > "$TMP/defs"
[ -s "$TMP/defs" ] || { fail "nm lists no function in $LIBS"; finish; }
{
    find "$B" -name '*.o' -exec nm -u {} + 2>/dev/null | awk 'NF == 2 && $1 == "U" { print $2 }'
    [ -f "$B/bangtrace-cuda.so" ] && nm -D -u "$B/bangtrace-cuda.so" | awk '{ print $2 }'
    cat "$S"/tests/fuzz/*.c | grep -oE '\b(bt|tui|cmd)_[A-Za-z0-9_]+\b'
} | sort -u > "$TMP/refs"
grep -qx bt_error "$TMP/refs" || { fail "nm finds no reference to bt_error (are the objects there?)"; finish; }

comm -23 "$TMP/defs" "$TMP/refs" > "$TMP/dead"
bad=
for f in $(cat "$TMP/dead"); do
    case " $(echo $KNOWN) " in
    *" $f "*) ;;
    *) bad="$bad $f" ;;
    esac
done
[ -z "$bad" ] && ok "every exported function outside KNOWN has a caller in another object ($(wc -l < "$TMP/defs") exported)" ||
    fail "exported with no caller in another object (make static or remove):$bad"
for f in $KNOWN; do
    grep -qx "$f" "$TMP/dead" || echo "note: $f has a caller now: drop it from KNOWN"
done
finish
