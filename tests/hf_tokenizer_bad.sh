#!/bin/sh
# Bad tokenizer input in a Hugging Face folder, each a one-line error with
# exit 2, never a hang:
#  - a tokenizer.json or tokenizer.model that is a FIFO (reading it would
#    block forever);
#  - a truncated tokenizer.model, and a unigram one (refused, not segmented
#    with the BPE algorithm);
#  - components that do not go together (byte_fallback with ByteLevel,
#    Metaspace without byte_fallback), named in the error;
#  - a tokenizer.json Split regex that backtracks catastrophically is stopped
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

# a FIFO where tokenizer.json should be: refused without reading it
F=$TMP/fifo
mkdir -p "$F"
if mkfifo "$F/tokenizer.json" 2>/dev/null; then
    timeout 10 "$BANGTRACE" tokenize --model "$F" hi > "$TMP/out" 2> "$TMP/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "tokenizer.json is not a regular file" "$TMP/err"; then
        ok "FIFO tokenizer.json: $(cat "$TMP/err")"
    else fail "FIFO tokenizer.json: exit $rc, $(head -c 300 "$TMP/err")"; fi
fi

# tokenizer.model: FIFO, truncated protobuf, unigram model
M=$TMP/spm
mkdir -p "$M"
if mkfifo "$M/tokenizer.model" 2>/dev/null; then
    timeout 10 "$BANGTRACE" tokenize --model "$M" hi > "$TMP/out" 2> "$TMP/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "tokenizer.model is not a regular file" "$TMP/err"; then
        ok "FIFO tokenizer.model: $(cat "$TMP/err")"
    else fail "FIFO tokenizer.model: exit $rc, $(head -c 300 "$TMP/err")"; fi
    rm -f "$M/tokenizer.model"
fi
printf '\012\005\012\003ab' > "$M/tokenizer.model"      # a piece whose text runs past its message
expect_exit 2 "truncated tokenizer.model" "$BANGTRACE" tokenize --model "$M" hi &&
    { [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "not a SentencePiece model: length past the end at byte" "$TMP/err" ||
      fail "truncated tokenizer.model: $(cat "$TMP/err")"; }
# one piece "a" (score 0, NORMAL), trainer_spec model_type 1 (unigram)
printf '\012\012\012\001a\025\000\000\000\000\030\001\022\002\030\001' > "$M/tokenizer.model"
expect_exit 2 "unigram tokenizer.model refused" "$BANGTRACE" tokenize --model "$M" hi &&
    { grep -q "SentencePiece model type 1 is not supported" "$TMP/err" || fail "unigram tokenizer.model: $(cat "$TMP/err")"; }
# the same piece in a BPE model (model_type 2, add_dummy_prefix and
# remove_extra_whitespaces false): loads, "a" is that piece
printf '\012\012\012\001a\025\000\000\000\000\030\001\022\002\030\002\032\004\030\000\040\000' > "$M/tokenizer.model"
got=$("$BANGTRACE" tokenize --model "$M" a 2>&1)
[ "$got" = "0" ] && ok "a one-piece BPE tokenizer.model: a -> $got" || fail "one-piece tokenizer.model: '$got'"

# byte_fallback with a ByteLevel pre-tokenizer; Metaspace on byte-level BPE
B=$TMP/mix
mkdir -p "$B"
sed 's/"type": "BPE",/"type": "BPE", "byte_fallback": true,/' "$D2/tokenizer.json" > "$B/tokenizer.json"
expect_exit 2 "byte_fallback + ByteLevel refused" "$BANGTRACE" tokenize --model "$B" hi &&
    { grep -q "byte_fallback with a ByteLevel" "$TMP/err" || fail "byte_fallback + ByteLevel: $(cat "$TMP/err")"; }
sed 's/"pre_tokenizer": {"type": "ByteLevel"[^}]*}/"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace"}, {"type": "ByteLevel", "use_regex": false}]}/' \
    "$D2/tokenizer.json" > "$B/tokenizer.json"
expect_exit 2 "Metaspace on byte-level BPE refused" "$BANGTRACE" tokenize --model "$B" hi &&
    { grep -q "Metaspace are supported with byte_fallback BPE only" "$TMP/err" || fail "Metaspace + ByteLevel: $(cat "$TMP/err")"; }
finish
