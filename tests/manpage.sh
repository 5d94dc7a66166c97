# manpage.sh - doc/bangtrace.1 lists every flag each command accepts, and
# nothing a command does not: the flags of `bangtrace help CMD` (its usage
# lines and the leading flags of its option lines) are compared with the
# man page's section for CMD (every .TP entry whose heading starts with CMD).
# A flag added to a command's --help but not to the man page (or dropped
# from a command but left in the man page) fails here, naming both.
. "${BT_SRCDIR:-.}/tests/lib.sh"
MAN=${BT_SRCDIR:-.}/doc/bangtrace.1
[ -f "$MAN" ] || { fail "no man page at $MAN"; finish; }
CMDS="run inspect tokenize bench forward bisect report export browse diff serve probe"

# help_flags CMD: one flag per line, from the usage block (up to the first
# blank line) and the flag part of option lines ("  -o, --output FILE  ...").
help_flags() {
    "$BANGTRACE" help "$1" >"$TMP/help" 2>&1 || { echo "!help-failed"; return; }
    {
        awk 'NF == 0 { exit } { print }' "$TMP/help" |
            grep -oE -- '(^|[][ (|,])--?[a-zA-Z][-a-zA-Z0-9]*' | sed -E 's/^[][ (|,]//'
        # an option line's flag part ends where its description starts (two spaces)
        grep -E '^ {2,}-' "$TMP/help" | sed -E 's/^ +//; s/  .*//' |
            grep -oE -- '(^|[][ (|,])--?[a-zA-Z][-a-zA-Z0-9]*' | sed -E 's/^[][ (|,]//'
    } | grep -E -- '^--?[a-zA-Z]' | grep -vxE -- '--help|-h' | sort -u
}

# man_section CMD: the text of every .TP entry whose heading is CMD ...,
# with roff's \- made plain.
man_section() {
    awk -v cmd="$1" '
        /^\.(TP|SH)/ { inside = 0; head = ($1 == ".TP"); next }
        head { head = 0; line = $0; sub(/^\.B[RI]* /, "", line)
               split(line, w, " "); inside = (w[1] == cmd) }
        inside { print }' "$MAN" | sed 's/\\-/-/g'
}

# man_flags CMD: flags in CMD's man section.
man_flags() {
    man_section "$1" | grep -oE -- '(^|[][ (|,])--?[a-zA-Z][-a-zA-Z0-9]*' | sed -E 's/^[][ (|,]//' |
        grep -vxE -- '--help|-h' | sort -u
}

for c in $CMDS; do
    help_flags "$c" >"$TMP/h.$c"
    man_flags "$c" >"$TMP/m.$c"
    [ -s "$TMP/m.$c" ] || [ ! -s "$TMP/h.$c" ] || { fail "$c: no section for '$c' in doc/bangtrace.1"; continue; }
    missing=$(comm -23 "$TMP/h.$c" "$TMP/m.$c" | tr '\n' ' ')
    extra=$(comm -13 "$TMP/h.$c" "$TMP/m.$c" | tr '\n' ' ')
    [ -z "$missing" ] && ok "$c: every flag of 'bangtrace help $c' is in the man page" ||
        fail "$c: doc/bangtrace.1 lacks flag(s) of 'bangtrace help $c': $missing"
    [ -z "$extra" ] && ok "$c: the man page lists no flag that 'help $c' lacks" ||
        fail "$c: doc/bangtrace.1 lists flag(s) that 'bangtrace help $c' does not: $extra"
done
# global flags: usage and the man page's synopsis
"$BANGTRACE" --help >"$TMP/g" 2>&1
for f in -q -v --version; do
    grep -qE -- "(^|[^-a-zA-Z])$f([^-a-zA-Z]|\$)" "$TMP/g" || fail "global flag $f missing from bangtrace --help"
    sed 's/\\-/-/g' "$MAN" | grep -qE -- "(^|[^-a-zA-Z])$f([^-a-zA-Z]|\$)" || fail "global flag $f missing from doc/bangtrace.1"
done
finish
