#!/bin/sh
# docs.sh - the README and the examples gallery tell the truth about the tree:
# the Layout table names every source folder and every doc, no usage example
# writes traces into the source tree's traces/, and no gallery case that
# runs as a test is described as waiting or skipped.
. "${BT_SRCDIR:-.}/tests/lib.sh"
src=${BT_SRCDIR:-.}
readme=$src/README.md
layout=$(sed -n '/^## Layout/,/^See `doc\/architecture.md`/p' "$readme")
[ -n "$layout" ] || { fail "README.md has no Layout table"; finish; }
for d in "$src"/src/*/ "$src"/src/engines/*/ "$src"/kernels/*/ "$src"/tui/ "$src"/traces/ "$src"/tools/ "$src"/examples/ "$src"/tests/ "$src"/doc/; do
    [ -d "$d" ] || continue
    rel=${d#"$src"/}
    printf '%s\n' "$layout" | grep -qF "| \`$rel\` |" && ok "Layout names $rel" || fail "README's Layout table does not name $rel"
done
printf '%s\n' "$layout" | grep -qi "placeholder" && fail "README's Layout table calls something a placeholder"
for f in "$src"/doc/*.md "$src"/doc/bangtrace.1; do
    b=$(basename "$f")
    printf '%s\n' "$layout" | grep -qF "\`$b\`" && ok "Layout names doc/$b" || fail "README's Layout table does not name doc/$b"
done
if grep -n -- '--trace-dir traces/' "$readme" "$src"/doc/*.md "$src"/examples/README.md; then
    fail "a usage example writes traces into the source tree's traces/"
else
    ok "no usage example writes into the source tree's traces/"
fi
# every gallery case registered as a test runs: none is said to wait or SKIP
for c in $(sed -n 's|.*\(examples/incidents/[^/]*\)/run.sh.*|\1|p' "$src/tests/local.mk" | sort -u); do
    name=${c#examples/incidents/}
    line=$(grep -F "[$name]" "$src/examples/README.md")
    [ -n "$line" ] || { fail "examples/README.md does not list $name"; continue; }
    printf '%s\n' "$line" | grep -qiE 'SKIP|waits for' && fail "examples/README.md says $name waits or skips, but it runs: $line" ||
        ok "examples/README.md: $name is described as running"
done
finish
