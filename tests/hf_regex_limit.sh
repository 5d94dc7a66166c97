#!/bin/sh
# A tokenizer.json Split regex that backtracks catastrophically is stopped
# by the PCRE2 match limit (src/tokenizer/pretok.h): one line naming the
# pattern, exit 2, in well under a second, where PCRE2's default limit let
# (\p{L}+)+\d spend ~60 ms on every 22-letter word (a minute for this input).
# The same pattern still tokenizes text it matches without backtracking, and
# a shipped pattern on long runs of one character class stays under the limit.
. "${BT_SRCDIR:-.}/tests/lib.sh"
D=$TMP/cat
mkdir -p "$D"
cat > "$D/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [], "normalizer": null,
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
   {"type": "Split", "pattern": {"Regex": "(\\p{L}+)+\\d"}, "behavior": "Isolated", "invert": false},
   {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
 "post_processor": null, "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab": {"a": 0, "aa": 1, "1": 2, "\u0120": 3},
           "merges": ["a a"]}}
JSON
# 1000 words of 22 letters: no digit anywhere, so every start backtracks
i=0; w=aaaaaaaaaaaaaaaaaaaaaa; line=
while [ $i -lt 50 ]; do line="$line$w "; i=$((i + 1)); done
i=0; : > "$TMP/big"
while [ $i -lt 20 ]; do printf '%s' "$line" >> "$TMP/big"; i=$((i + 1)); done
start=$(date +%s)
timeout 20 "$BANGTRACE" tokenize --model "$D" --file "$TMP/big" > "$TMP/out" 2> "$TMP/err"
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 124 ]; then fail "catastrophic regex: still running after 20 s"
elif [ $rc -ne 2 ]; then fail "catastrophic regex: exit $rc, expected 2 ($(head -c 300 "$TMP/err"))"
elif [ "$(wc -l < "$TMP/err")" -ne 1 ] || ! grep -q "exceeded its match limit" "$TMP/err" || ! grep -qF '(\p{L}+)+\d' "$TMP/err"; then
    fail "catastrophic regex: error is not one line naming the pattern and the limit: $(cat "$TMP/err")"
elif [ -s "$TMP/out" ]; then fail "catastrophic regex: ids printed after the error"
else ok "catastrophic regex: exit 2 in ${took}s: $(cat "$TMP/err")"; fi

printf 'aaaa1' > "$TMP/good"
got=$("$BANGTRACE" tokenize --model "$D" --file "$TMP/good" 2>&1)
[ "$got" = "1 1 2" ] && ok "the same regex where it matches at once: $got" || fail "aaaa1: '$got', expected '1 1 2'"

# GPT-2's own ByteLevel regex on 200000 spaces then a letter: \s+(?!\S)
# backtracks once per start, far below the limit
D2=$TMP/gpt2re
mkdir -p "$D2"
cat > "$D2/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [], "normalizer": null,
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "post_processor": null, "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab": {"a": 0, "aa": 1, "1": 2, "\u0120": 3},
           "merges": ["a a"]}}
JSON
awk 'BEGIN { for (i = 0; i < 200000; i++) printf " "; printf "a" }' > "$TMP/spaces"
n=$(timeout 60 "$BANGTRACE" tokenize --model "$D2" --file "$TMP/spaces" 2>"$TMP/err" | wc -w)
[ "$n" -eq 200001 ] && ok "ByteLevel regex on 200000 spaces: $n ids" || fail "ByteLevel regex on spaces: $n ids, $(head -c 300 "$TMP/err")"
finish
