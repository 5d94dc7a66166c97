#!/bin/sh
# report --png / export --png: the layers x steps picture beside the
# markdown. On a trace with a NaN at step 9, layer 3 (make_trace.py
# collapse: 59 steps, 5 layers) the PNG has the expected size and grid
# (its bangtrace-grid tEXt chunk), a non-finite cell is magenta at its
# computed position, the first bad cell has the green ring, a clean cell is
# on the blue ramp, the token row holds text (control bytes as escapes);
# the markdown links the file;
# an existing picture is never replaced without --force (nor a link); a
# redacted export's picture has no token text; a 3000-step, 100-layer trace
# gives a bounded, downsampled picture whose caption says so. Pixels are
# read back with zlib and struct (tests/png_pixels.py), no PIL.
# Without libpng, --png is refused with a one-line error, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
PY=${PYTHON3:-python3}
"$PY" -c 'import sqlite3, zlib, struct' 2>/dev/null || skip "python3 with sqlite3 and zlib is needed"
GEN=$BT_SRCDIR/tests/data-gen/make_trace.py
PNGPX="$PY $BT_SRCDIR/tests/png_pixels.py"
"$PY" "$GEN" collapse "$TMP/T.db" || { fail "make_trace.py collapse"; finish; }

if ! built_with LIBPNG; then
    expect_exit 2 "report --png without libpng" "$BANGTRACE" report "$TMP/T.db" -o "$TMP/r.md" --png
    [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "libpng" "$TMP/err" && ok "one line naming libpng: $(cat "$TMP/err")" ||
        fail "error is not one line naming libpng: $(cat "$TMP/err")"
    [ ! -e "$TMP/r.md" ] && [ ! -e "$TMP/r.png" ] && ok "nothing written" || fail "files written without libpng"
    expect_exit 2 "export --png without libpng" "$BANGTRACE" export "$TMP/T.db" -o "$TMP/e.db" --png
    [ ! -e "$TMP/e.db" ] && ok "no copy written either" || fail "export wrote a copy before refusing --png"
    [ "$failures" -eq 0 ] || finish
    skip "built without libpng: only the refusal was checked"
fi

# grid GEOMETRY FILE: the numbers of the bangtrace-grid chunk as shell variables
grid() {
    $PNGPX "$1" info >"$TMP/info" || return 1
    read -r W H <"$TMP/info"
    eval "$(sed -n 's/^bangtrace-grid=//p' "$TMP/info")"
}
# cell_px STEP_COLUMN ROW: centre pixel of a cell
cell_px() { $PNGPX "$P" px $((x0 + $1 * cw + cw / 2)) $((y0 + $2 * ch + ch / 2)); }

expect_exit 0 "report -o r.md --png" "$BANGTRACE" report "$TMP/T.db" -o "$TMP/r.md" --png
P=$TMP/r.png
[ -s "$P" ] && ok "r.png written beside r.md" || { fail "no r.png: $(ls "$TMP")"; finish; }
grep -qF '](r.png)' "$TMP/r.md" && ok "the markdown links it: $(grep -oF '](r.png)' "$TMP/r.md")" ||
    fail "no ![...](r.png) in the report: $(grep -n png "$TMP/r.md")"
grep -qF '59 steps (0-58), one column per step' "$TMP/r.md" && ok "caption under the picture" || fail "no caption: $(grep -A3 Picture "$TMP/r.md")"
grid "$P" || { fail "png_pixels.py cannot read r.png"; finish; }
# 59 steps x 16 px (960 / 59, at most 16... 24), 7 rows (in, layers 0-4, out) x 12 px
[ "$cols" = 59 ] && [ "$rows" = 7 ] && [ "$steps_per_col" = 1 ] && [ "$layers" = 5 ] && [ "$in_row" = 1 ] &&
    ok "grid: 59 columns (one per step), 7 rows (in, 5 layers, out)" || fail "grid: $(cat "$TMP/info")"
[ "$cw" = 16 ] && [ "$ch" = 12 ] && ok "cells 16x12" || fail "cells ${cw}x$ch, expected 16x12"
[ "$W" = $((x0 + 59 * 16 + 8)) ] && [ "$H" -gt $((y0 + 7 * 12 + 72)) ] && [ "$H" -lt 400 ] &&
    ok "size ${W}x$H: the grid plus margins, the token row and the legend" || fail "size ${W}x$H (x0 $x0, y0 $y0)"
px=$(cell_px 30 $((1 + 4)))
[ "$px" = e600e6 ] && ok "step 30, layer 4 (NaN through the KV cache) is magenta" || fail "step 30 layer 4 is $px, expected e600e6"
px=$(cell_px 9 $((1 + 3)))
[ "$px" = e600e6 ] && ok "the first bad cell (step 9, layer 3) is magenta inside" || fail "step 9 layer 3 is $px"
px=$($PNGPX "$P" px $((x0 + 9 * cw - 1)) $((y0 + 4 * ch + ch / 2)) $((x0 + 10 * cw)) $((y0 + 4 * ch + ch / 2)) | tr '\n' ' ')
[ "$px" = "00c800 00c800 " ] && ok "the first bad cell has the green ring on both sides" || fail "ring pixels: $px, expected 00c800 twice"
px=$(cell_px 8 $((1 + 3)))
[ "$px" != e600e6 ] && [ "$px" != 00c800 ] && ok "step 8, layer 3 (before the fault) is not marked ($px)" || fail "step 8 layer 3 is $px"
px=$(cell_px 2 1)
"$PY" -c "
import sys; v = int(sys.argv[1], 16); r, g, b = v >> 16, (v >> 8) & 255, v & 255
sys.exit(0 if b > r and b >= g and v not in (0xe600e6, 0xe8e8e8, 0xd7191c, 0xf5a028) else 1)" "$px" &&
    ok "a clean cell (step 2, layer 0) is on the blue ramp ($px)" || fail "step 2 layer 0 is $px, not on the blue ramp"
# the path: the next layer's first bad tensor at step 9 has the black outline
px=$($PNGPX "$P" px $((x0 + 9 * cw)) $((y0 + 5 * ch + ch / 2)))
[ "$px" = 000000 ] && ok "the walk-back path (step 9, layer 4) is outlined in black" || fail "path outline pixel is $px"
tok_y0=$((y0 + rows * ch + 4)); tok_y1=$((tok_y0 + 72))
n_text=$($PNGPX "$P" count 202020 "$x0" "$tok_y0" $((x0 + cols * cw)) "$tok_y1")
[ "$n_text" -gt 200 ] && ok "token row drawn ($n_text text pixels)" || fail "token row has $n_text text pixels"

# model text is drawn as printable ASCII only: the clean trace's ESC and BEL
# pieces come out as escapes, in the escape colour
"$PY" "$GEN" clean "$TMP/clean.db" 2>/dev/null && "$BANGTRACE" report "$TMP/clean.db" --png="$TMP/clean.png" >/dev/null 2>&1 &&
    n_esc=$($PNGPX "$TMP/clean.png" count b03000 0 "$tok_y0" 2000 "$tok_y1") && [ "$n_esc" -gt 30 ] &&
    ok "escapes for control bytes in token pieces ($n_esc pixels)" || fail "no escapes drawn for the clean trace's \\x1b / \\x07 pieces"

# never replaced without --force; never through a link
cp "$P" "$TMP/keep.png"
expect_exit 2 "a second report --png refuses the existing r.png" "$BANGTRACE" report "$TMP/T.db" -o "$TMP/r2.md" --png="$P"
cmp -s "$P" "$TMP/keep.png" && [ ! -e "$TMP/r2.md" ] && ok "r.png untouched, no r2.md" || fail "r.png changed or r2.md written"
grep -q "force" "$TMP/err" && ok "the refusal says --force: $(cat "$TMP/err")" || fail "refusal: $(cat "$TMP/err")"
expect_exit 0 "--force replaces it" "$BANGTRACE" report "$TMP/T.db" -o "$TMP/r.md" --png --force
ln -s "$TMP/keep.png" "$TMP/link.png"
expect_exit 2 "--png=LINK is refused, --force or not" "$BANGTRACE" report "$TMP/T.db" --png="$TMP/link.png" --force
cmp -s "$TMP/keep.png" "$TMP/r.png" && ok "the link's target is untouched" || fail "the link's target changed"
expect_exit 2 "--png without -o or =PNG" "$BANGTRACE" report "$TMP/T.db" --png
[ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "one line: $(cat "$TMP/err")" || fail "not one line: $(cat "$TMP/err")"
expect_exit 2 "--png=TRACE (an input) is refused" "$BANGTRACE" report "$TMP/T.db" --png="$TMP/T.db" --force
mkdir "$TMP/sub"
expect_exit 0 "report to stdout with --png=sub/p.png" "$BANGTRACE" report "$TMP/T.db" --png="$TMP/sub/p.png"
# a report is for a public issue: an absolute path is shown by its base name
# (report_public.sh), the picture's link too (both files are attached)
grep -qF "](p.png)" "$TMP/out" && ! grep -qF "$TMP" "$TMP/out" && [ -s "$TMP/sub/p.png" ] &&
    ok "stdout report links the picture by its base name" ||
    fail "link: $(grep -F 'p.png' "$TMP/out")"

# export --png: the copy's picture; a redacted copy draws no token text
expect_exit 0 "export --redact=all --png" "$BANGTRACE" export "$TMP/T.db" -o "$TMP/e.db" --redact=all --all-steps --png
P=$TMP/e.png
[ -s "$P" ] && grid "$P" && ok "e.png beside e.db" || { fail "no e.png"; finish; }
n_text=$($PNGPX "$P" count 202020 "$x0" "$tok_y0" $((x0 + cols * cw)) "$tok_y1")
n_esc=$($PNGPX "$P" count b03000 "$x0" "$tok_y0" $((x0 + cols * cw)) "$tok_y1")
[ "$n_text" -eq 0 ] && [ "$n_esc" -eq 0 ] && ok "no token text in the redacted copy's picture" ||
    fail "redacted picture has $n_text text and $n_esc escape pixels in the token row"
px=$(cell_px 9 $((1 + 3)))
[ "$px" = e600e6 ] && ok "the redacted picture still marks the first bad cell" || fail "redacted first bad cell: $px"
expect_exit 2 "export --png refuses an existing picture" "$BANGTRACE" export "$TMP/T.db" -o "$TMP/e2.db" --png="$P"
[ ! -e "$TMP/e2.db" ] && ok "refused before the copy" || fail "e2.db written before --png was refused"
expect_exit 2 "export --perfetto --png" "$BANGTRACE" export "$TMP/T.db" --perfetto "$TMP/p.json" --png

# a long, deep trace: bounded and downsampled, and the caption says so
"$PY" "$GEN" big "$TMP/big.db" --steps 3000 --layers 100 --bad-step 2000 --schema "$BT_SRCDIR/traces/schema.sql" >/dev/null ||
    { fail "make_trace.py big"; finish; }
expect_exit 0 "report --png on 3000 steps x 100 layers" "$BANGTRACE" report "$TMP/big.db" -o "$TMP/big.md" --png
P=$TMP/big.png
grid "$P" || { fail "big.png unreadable"; finish; }
[ "$W" -le 1600 ] && [ "$H" -le 800 ] && [ "$cols" -le 240 ] && [ "$steps_per_col" = 20 ] && [ "$rows" = 102 ] &&
    ok "bounded: ${W}x$H, $cols columns of $steps_per_col steps" || fail "big picture: $(cat "$TMP/info")"
grep -qF '3000 steps (0-2999) downsampled to 150 columns of 20 steps' "$TMP/big.md" &&
    ok "the caption says it is downsampled" || fail "caption: $(grep -A3 Picture "$TMP/big.md")"
px=$($PNGPX "$P" px $((x0 + 100 * cw - 1)) $((y0 + 18 * ch + ch / 2)))
[ "$px" = 00c800 ] && ok "the first bad cell (step 2000 = column 100, layer 17) has the ring" || fail "ring pixel $px"
px=$(cell_px 120 $((18 + 10)))
[ "$px" = e600e6 ] && ok "column 120, layer 28 is non-finite" || fail "column 120 layer 28: $px"
finish
