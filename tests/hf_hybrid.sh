#!/usr/bin/env bash
# hf_hybrid.sh - the hybrid models from Hugging Face folders (issue 25):
# Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and Qwen3NextForCausalLM, with
# the converter's conversions (norms stored as an offset from 1, A_log ->
# -exp, the conv kernel squeezed, value heads from grouped to tiled order,
# Qwen3-Next's fused in_proj_qkvz split by key head, fused or per-expert
# MoE weights, the MTP block left out). tools/make-tiny-hybrid.py writes each
# architecture as a folder and as a GGUF from the same weights: the two give
# the same tokens and the same statistics of every tapped tensor at every
# step. A folder whose config is wrong is one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy, gguf" 2>/dev/null || skip "python3 with numpy and gguf makes the hybrid models"
trap 'rm -rf "$TMP"' EXIT
P="The old man walked to the river every morning"
for A in qwen35 qwen35moe qwen3next; do
    "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/$A-hf" --format hf --arch $A --seed 11 >"$TMP/tool.log" 2>&1 &&
        "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/$A.gguf" --arch $A --seed 11 >>"$TMP/tool.log" 2>&1 ||
        { fail "make-tiny-hybrid.py --arch $A: $(tail -1 "$TMP/tool.log")"; continue; }
    "$BANGTRACE" run --model "$TMP/$A-hf" --prompt "$P" -n 16 --trace "$TMP/$A-hf.db" >"$TMP/hf.txt" 2>"$TMP/hf.err" \
        || { fail "$A folder: $(tail -1 "$TMP/hf.err")"; continue; }
    "$BANGTRACE" run --model "$TMP/$A.gguf" --prompt "$P" -n 16 --trace "$TMP/$A.db" >"$TMP/g.txt" 2>/dev/null || fail "$A gguf run"
    "$BANGTRACE" diff "$TMP/$A-hf.db" "$TMP/$A.db" >"$TMP/d" 2>&1
    grep -q "^differ: no (tokens and taps equal)" "$TMP/d" && cmp -s "$TMP/hf.txt" "$TMP/g.txt" \
        && ok "$A: the Hugging Face folder runs as the GGUF of the same weights ($(grep '^taps: equal' "$TMP/d" | sed 's/^taps: //'))" \
        || fail "$A folder vs GGUF: $(cat "$TMP/d")"
done
# bad configs: one line naming the problem
cp -r "$TMP/qwen35-hf" "$TMP/bad"
"$py" - "$TMP/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["linear_num_key_heads"]; json.dump(c, open(sys.argv[1], "w"))
PY
expect_exit 2 "a qwen35 config without linear_num_key_heads" "$BANGTRACE" run --model "$TMP/bad" --prompt hi -n 1
grep -q "linear_num_key_heads" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "the missing key is named in one line" || fail "missing key: $(cat "$TMP/err")"
"$py" - "$TMP/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["linear_num_key_heads"] = 3; json.dump(c, open(sys.argv[1], "w"))
PY
expect_exit 2 "value heads not a multiple of the key heads" "$BANGTRACE" run --model "$TMP/bad" --prompt hi -n 1
grep -q "implausible linear attention" "$TMP/err" || fail "3 key heads: $(cat "$TMP/err")"
"$py" - "$TMP/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["linear_num_key_heads"] = 2; c["attn_output_gate"] = False; json.dump(c, open(sys.argv[1], "w"))
PY
expect_exit 2 "attn_output_gate false is refused" "$BANGTRACE" run --model "$TMP/bad" --prompt hi -n 1
grep -q "attn_output_gate false is not supported" "$TMP/err" || fail "gate: $(cat "$TMP/err")"
finish
