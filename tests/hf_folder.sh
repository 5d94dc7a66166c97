#!/bin/sh
# Hugging Face model folders on real weights: tools/gguf-to-hf.py turns the
# default SmolLM2 Q4_1 GGUF into an F32 folder (one model.safetensors, q/k
# un-permuted to the HF rotate-half layout, so the loader's permutation is
# exercised) and a BF16 folder in 3 shards with model.safetensors.index.json.
# `run` greedy on the F32 folder must give the GGUF's ids exactly (the
# dequantized weights are the same numbers); the BF16 folder's agreement is
# reported. inspect scans the folder's weights; tokenize agrees with the GGUF.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_smol
PY=${PYTHON3:-python3}
"$PY" -c 'import gguf, numpy' 2>/dev/null || skip "python3 cannot import gguf and numpy"
CONV="$BT_SRCDIR/tools/gguf-to-hf.py"
PROMPT="The capital of France is"
N=32

ids() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(map(str, d["prompt_ids"] + d["completion_ids"])))' "$1"; }

expect_exit 0 "run on the GGUF" "$BANGTRACE" run --model "$SMOL" --prompt "$PROMPT" -n $N --json --threads 2
cp "$TMP/out" "$TMP/gguf.json"

"$PY" "$CONV" "$SMOL" "$TMP/f32" --dtype f32 > "$TMP/conv.log" 2>&1 || { fail "gguf-to-hf.py f32: $(tail -1 "$TMP/conv.log")"; finish; }
expect_exit 0 "run on the F32 folder" "$BANGTRACE" run --model "$TMP/f32" --prompt "$PROMPT" -n $N --json --threads 2
cp "$TMP/out" "$TMP/f32.json"
grep -q '(hf, 30 layers' "$TMP/err" || fail "run did not report the hf format: $(head -1 "$TMP/err")"
[ "$(ids "$TMP/gguf.json")" = "$(ids "$TMP/f32.json")" ] && ok "F32 folder: greedy ids identical to the GGUF's ($N tokens)" \
    || fail "F32 folder ids differ: gguf $(ids "$TMP/gguf.json") / hf $(ids "$TMP/f32.json")"

# the converter never replaces what is not its own
sum0=$(cksum < "$TMP/f32/config.json")
expect_exit 2 "gguf-to-hf.py into an existing folder without --force" "$PY" "$CONV" "$SMOL" "$TMP/f32" --vocab-only
[ "$(cksum < "$TMP/f32/config.json")" = "$sum0" ] && ok "the existing folder is untouched" || fail "config.json changed"
mkdir -p "$TMP/mine" && echo keep > "$TMP/mine/notes.txt"
expect_exit 2 "gguf-to-hf.py --force into a folder that is not an HF folder" "$PY" "$CONV" "$SMOL" "$TMP/mine" --vocab-only --force
[ "$(cat "$TMP/mine/notes.txt")" = keep ] && [ ! -e "$TMP/mine/tokenizer.json" ] && ok "a non-HF folder is refused even with --force" || fail "wrote into a non-HF folder"
ln -s "$TMP/f32" "$TMP/link"
expect_exit 2 "gguf-to-hf.py through a symbolic link" "$PY" "$CONV" "$SMOL" "$TMP/link" --vocab-only --force
expect_exit 0 "gguf-to-hf.py --force into its own HF folder" "$PY" "$CONV" "$SMOL" "$TMP/f32" --vocab-only --force

expect_exit 0 "inspect the F32 folder" "$BANGTRACE" inspect --model "$TMP/f32"
grep -q '^format: *hf' "$TMP/out" || fail "inspect format line: $(grep '^format' "$TMP/out")"
grep -q 'clean: no NaN/Inf in 272 tensors' "$TMP/out" && ok "inspect scans all 272 weights" || fail "inspect scan: $(grep '^scan' "$TMP/out")"
expect_exit 0 "tokenize on the GGUF" "$BANGTRACE" tokenize --model "$SMOL" --parse-special "<|im_start|>user
Hi there 1234 café<|im_end|>"
cp "$TMP/out" "$TMP/tok.gguf"
expect_exit 0 "tokenize on the folder" "$BANGTRACE" tokenize --model "$TMP/f32" --parse-special "<|im_start|>user
Hi there 1234 café<|im_end|>"
cmp -s "$TMP/out" "$TMP/tok.gguf" && ok "tokenize: folder ids equal GGUF ids" || fail "tokenize: $(cat "$TMP/out") vs $(cat "$TMP/tok.gguf")"

# A NaN planted in one weight of the folder is found by inspect's scan.
"$PY" - "$TMP/f32/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    t = h["model.layers.3.mlp.down_proj.weight"]
    f.seek(8 + n + t["data_offsets"][0] + 4 * 7)
    f.write(struct.pack("<f", float("nan")))
PYEOF
expect_exit 1 "inspect finds the planted NaN" "$BANGTRACE" inspect --model "$TMP/f32"
grep -q 'blk.3.ffn_down.weight' "$TMP/out" && ok "inspect names blk.3.ffn_down.weight" || fail "inspect did not name the tensor: $(grep -i nan "$TMP/out" | head -3)"
rm -rf "$TMP/f32"

"$PY" "$CONV" "$SMOL" "$TMP/bf16" --dtype bf16 --shards 3 > "$TMP/conv.log" 2>&1 || { fail "gguf-to-hf.py bf16: $(tail -1 "$TMP/conv.log")"; finish; }
[ -f "$TMP/bf16/model.safetensors.index.json" ] && [ -f "$TMP/bf16/model-00003-of-00003.safetensors" ] || fail "no shards written"
expect_exit 0 "run on the BF16 sharded folder" "$BANGTRACE" run --model "$TMP/bf16" --prompt "$PROMPT" -n $N --json --threads 2
cp "$TMP/out" "$TMP/bf16.json"
"$PY" - "$TMP/gguf.json" "$TMP/bf16.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p))["completion_ids"] for p in sys.argv[1:3])
same = sum(x == y for x, y in zip(a, b))
first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
print(f"BF16 folder: {same}/{len(a)} greedy tokens equal the GGUF's (identical prefix {first})")
PYEOF
finish
