#!/usr/bin/env bash
# hf_hybrid.sh - the hybrid models from Hugging Face folders (issue 25):
# Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and Qwen3NextForCausalLM, with
# the converter's conversions (norms stored as an offset from 1, A_log ->
# -exp, the conv kernel squeezed, value heads from grouped to tiled order,
# Qwen3-Next's fused in_proj_qkvz split by key head, fused or per-expert
# MoE weights, the MTP block after the trunk as blk.N.*). tools/make-tiny-hybrid.py
# writes each architecture as a folder and as a GGUF from the same weights:
# the two give the same tokens and the same statistics of every tapped
# tensor at every step, and the folder becomes exactly the GGUF's tensors
# (hf_check_tool --same: names, shapes, bytes, the MTP block's blk.4.nextn.*
# too; inspect lists them alike). The image-text checkpoints
# (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration:
# text_config, model.language_model.*, a vision tower left out) derived from
# the same folder run and convert alike. A folder whose config is wrong is
# one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
TOOL=${BT_BUILDDIR:-.}/tests/hf_check_tool
[ -x "$TOOL" ] || skip "tests/hf_check_tool is not built"
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
    # the folder's MTP block drafts as the GGUF's (--draft-mtp: the draft model's taps too)
    "$BANGTRACE" run --model "$TMP/$A-hf" --prompt "$P" -n 16 --spec-k 3 --draft-mtp --trace "$TMP/$A-hf-mtp.db" >/dev/null 2>&1 \
        && "$BANGTRACE" run --model "$TMP/$A.gguf" --prompt "$P" -n 16 --spec-k 3 --draft-mtp --trace "$TMP/$A-mtp.db" >/dev/null 2>&1 \
        && [ "$(sqlite3 "$TMP/$A-hf-mtp.db" "SELECT hex(b.stats) FROM tap_blobs b JOIN steps s ON s.step = b.step WHERE s.model = 'draft' ORDER BY b.step")" = \
             "$(sqlite3 "$TMP/$A-mtp.db" "SELECT hex(b.stats) FROM tap_blobs b JOIN steps s ON s.step = b.step WHERE s.model = 'draft' ORDER BY b.step")" ] \
        && [ -n "$(sqlite3 "$TMP/$A-mtp.db" "SELECT 1 FROM tap_blobs b JOIN steps s ON s.step = b.step WHERE s.model = 'draft' LIMIT 1")" ] \
        && ok "$A: the folder's MTP block drafts as the GGUF's (every draft tap equal)" \
        || fail "$A folder --draft-mtp differs from the GGUF's"
    "$TOOL" "$TMP/$A-hf" --same "$TMP/$A.gguf" >"$TMP/same" 2>&1 && grep -q ": ok$" "$TMP/same" \
        && ok "$A: the folder's tensors are the GGUF's, bytes and all (the MTP block as blk.4.*)" \
        || fail "$A folder's tensors: $(cat "$TMP/same")"
    # inspect: the nextn tensors of the MTP block, with the GGUF's shapes (the offset column aside)
    for m in "$A-hf" "$A.gguf"; do
        "$BANGTRACE" inspect "$TMP/$m" --no-scan 2>&1 | grep -E '^  blk\.4\.' | awk '{$NF=""; print}' | sort >"$TMP/$m.t"
    done
    [ "$(grep -c '^blk\.4\.nextn\.' "$TMP/$A-hf.t")" -eq 4 ] && cmp -s "$TMP/$A-hf.t" "$TMP/$A.gguf.t" \
        && ok "$A: inspect lists the MTP block (blk.4, 4 nextn tensors) as the GGUF's" \
        || fail "$A inspect MTP block: $(diff "$TMP/$A-hf.t" "$TMP/$A.gguf.t" | head -5; grep -c nextn "$TMP/$A-hf.t")"
done
# The image-text checkpoints: the language model's config under text_config
# (tie_word_embeddings left at the top), its weights as model.language_model.*,
# mtp.* as they are, a vision tower of NaNs (model.visual.*) that must be left
# out, in two shards with an index, as the real ones.
cat >"$TMP/tocond.py" <<'PY'
import json, os, shutil, struct, sys
src, dst, cls = sys.argv[1:4]
os.makedirs(dst)
for f in os.listdir(src):
    if f not in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), dst)
tc = json.load(open(os.path.join(src, "config.json")))
del tc["architectures"]
top = {"architectures": [cls], "model_type": tc["model_type"][:-len("_text")],
       "tie_word_embeddings": tc.pop("tie_word_embeddings"), "image_token_id": 7, "video_token_id": 8,
       "vision_config": {"depth": 1, "hidden_size": 8, "out_hidden_size": tc["hidden_size"]}, "text_config": tc}
json.dump(top, open(os.path.join(dst, "config.json"), "w"), indent=2)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
ten = {}
for k, v in json.loads(raw[8:8 + n]).items():
    if k != "__metadata__":
        b, e = v["data_offsets"]
        k = k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k
        ten[k] = (v["dtype"], v["shape"], raw[8 + n + b:8 + n + e])
nan, E = struct.pack("<f", float("nan")), tc["hidden_size"]
ten["model.visual.patch_embed.proj.weight"] = ("F32", [8, 12], nan * 96)
ten["model.visual.blocks.0.attn.qkv.weight"] = ("F32", [24, 8], nan * 192)
ten["model.visual.merger.linear_fc2.weight"] = ("F32", [E, 8], nan * 8 * E)
wmap = {}
for i, f in enumerate(("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
    h, data = {"__metadata__": {"format": "pt"}}, b""
    for k in sorted(ten):
        if k.startswith(("model.visual.", "mtp.")) != (i == 1):
            continue
        dt, shape, b = ten[k]
        h[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
        wmap[k] = f
    hj = json.dumps(h).encode()
    hj += b" " * (-len(hj) % 8)
    open(os.path.join(dst, f), "wb").write(struct.pack("<Q", len(hj)) + hj + data)
json.dump({"metadata": {}, "weight_map": wmap}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
PY
for AC in qwen35:Qwen3_5ForConditionalGeneration qwen35moe:Qwen3_5MoeForConditionalGeneration; do
    A=${AC%%:*} C=${AC#*:}
    [ -f "$TMP/$A.db" ] || { fail "$C: no $A run to compare with"; continue; }
    "$py" "$TMP/tocond.py" "$TMP/$A-hf" "$TMP/$A-cg" "$C" 2>"$TMP/tool.log" || { fail "$C folder: $(tail -1 "$TMP/tool.log")"; continue; }
    grep -q '"model.language_model.layers.0.input_layernorm.weight"' "$TMP/$A-cg/model.safetensors.index.json" \
        || fail "$C: the derived folder does not name its weights model.language_model.*"
    "$BANGTRACE" run --model "$TMP/$A-cg" --prompt "$P" -n 16 --trace "$TMP/$A-cg.db" >"$TMP/cg.txt" 2>"$TMP/cg.err" \
        || { fail "$C folder: $(tail -1 "$TMP/cg.err")"; continue; }
    "$BANGTRACE" run --model "$TMP/$A.gguf" --prompt "$P" -n 16 >"$TMP/g.txt" 2>/dev/null || fail "$A gguf run"
    "$BANGTRACE" diff "$TMP/$A-cg.db" "$TMP/$A.db" >"$TMP/d" 2>&1
    grep -q "^differ: no (tokens and taps equal)" "$TMP/d" && cmp -s "$TMP/cg.txt" "$TMP/g.txt" \
        && ok "$C: the image-text folder's text model runs as the GGUF ($(grep '^taps: equal' "$TMP/d" | sed 's/^taps: //'))" \
        || fail "$C folder vs GGUF: $(cat "$TMP/d")"
    "$TOOL" "$TMP/$A-cg" --same "$TMP/$A.gguf" >"$TMP/same" 2>&1 && grep -q ": ok$" "$TMP/same" \
        && ok "$C: its tensors are the GGUF's (the vision tower left out, the MTP block in)" \
        || fail "$C folder's tensors: $(cat "$TMP/same")"
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
"$py" - "$TMP/bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["attn_output_gate"] = True; c["mtp_num_hidden_layers"] = 2; json.dump(c, open(sys.argv[1], "w"))
PY
expect_exit 2 "mtp_num_hidden_layers 2 with a 1-layer MTP block" "$BANGTRACE" run --model "$TMP/bad" --prompt hi -n 1
grep -q "mtp_num_hidden_layers is 2 but the checkpoint's MTP block has 1 layers" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
    && ok "the MTP layer count mismatch is named in one line" || fail "mtp count: $(cat "$TMP/err")"
# an image-text config: text_config not an object, or missing a key the text model needs
if [ -d "$TMP/qwen35-cg" ]; then
    rm -rf "$TMP/badcg"; cp -r "$TMP/qwen35-cg" "$TMP/badcg"
    "$py" - "$TMP/badcg/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["text_config"]["linear_num_key_heads"]; json.dump(c, open(sys.argv[1], "w"))
PY
    expect_exit 2 "a text_config without linear_num_key_heads" "$BANGTRACE" run --model "$TMP/badcg" --prompt hi -n 1
    grep -q "config.json (text_config): 'linear_num_key_heads' is missing" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
        && ok "the key missing from text_config is named in one line" || fail "text_config key: $(cat "$TMP/err")"
    "$py" - "$TMP/badcg/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"] = ["hidden_size", 64]; json.dump(c, open(sys.argv[1], "w"))
PY
    expect_exit 2 "text_config as a list" "$BANGTRACE" run --model "$TMP/badcg" --prompt hi -n 1
    grep -q "text_config must be an object" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
        && ok "a text_config that is not an object is named in one line" || fail "text_config list: $(cat "$TMP/err")"
else
    fail "no image-text folder for the bad text_config checks"
fi
finish
