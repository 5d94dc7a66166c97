#!/usr/bin/env bash
# hf_mla_gptoss.sh - deepseek2 and gpt-oss from Hugging Face folders
# (issue 28): DeepseekV2ForCausalLM / DeepseekV3ForCausalLM and
# GptOssForCausalLM with the converter's conversions (kv_b_proj split into
# attn_k_b / attn_v_b, experts stacked, gpt-oss's interleaved gate_up_proj
# transposed and split, its MXFP4 blocks/scales repacked into ggml's MXFP4).
# tools/make-tiny-deepseek2.py and make-tiny-gptoss.py write each variant
# as a folder and as a GGUF from the same weights: the folder becomes
# exactly the GGUF's tensors (hf_check_tool --same: names, types, shapes,
# bytes), every tensor of `forward --dump` is bit-equal (logits included),
# and greedy `run` prints the same text. Configs the loader does not
# implement (routing, YaRN variants, quantization) are one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
TOOL=${BT_BUILDDIR:-.}/tests/hf_check_tool
[ -x "$TOOL" ] || skip "tests/hf_check_tool is not built"
"$py" -c "import numpy, gguf; gguf.GGMLQuantizationType.MXFP4" 2>/dev/null || skip "python3 with numpy and gguf (MXFP4) makes the tiny models"
[ -f "$BT_SHARED/models/gguf-vocab/ggml-vocab-gpt-2.gguf" ] || skip "the shared GPT-2 vocabulary is not at $BT_SHARED"
export BT_SHARED
P="The old man walked to the river every morning"
IDS="464 1468 582 6807 284 262 7850 790 3329 11 290"

# same NAME TOOLARGS...: folder and GGUF of the same weights agree
same() {
    local n=$1 tool=$2; shift 2
    "$py" "$BT_SRCDIR/tools/$tool" "$TMP/$n.gguf" --seed 5 "$@" >"$TMP/tool.log" 2>&1 &&
        "$py" "$BT_SRCDIR/tools/$tool" "$TMP/$n-hf" --format hf --seed 5 "$@" >>"$TMP/tool.log" 2>&1 ||
        { fail "$tool $*: $(tail -1 "$TMP/tool.log")"; return; }
    "$TOOL" "$TMP/$n-hf" --same "$TMP/$n.gguf" >"$TMP/same" 2>&1 && grep -q ": ok$" "$TMP/same" \
        && ok "$n: the folder's tensors are the GGUF's ($(sed 's/.*: \([0-9]* tensors\).*/\1/' "$TMP/same"), bytes and all)" \
        || fail "$n folder's tensors: $(cat "$TMP/same")"
    "$BANGTRACE" forward --model "$TMP/$n-hf" --tokens "$IDS" --dump "$TMP/$n-dh" >/dev/null 2>"$TMP/err" \
        || { fail "$n folder forward: $(tail -1 "$TMP/err")"; return; }
    "$BANGTRACE" forward --model "$TMP/$n.gguf" --tokens "$IDS" --dump "$TMP/$n-dg" >/dev/null 2>"$TMP/err" \
        || { fail "$n gguf forward: $(tail -1 "$TMP/err")"; return; }
    local nf=0 nd=0 f
    for f in "$TMP/$n-dg"/*.f32; do
        nf=$((nf + 1))
        cmp -s "$f" "$TMP/$n-dh/${f##*/}" || { nd=$((nd + 1)); echo "differs: ${f##*/}"; }
    done >"$TMP/cmp"
    [ "$nd" -eq 0 ] && [ "$nf" -gt 20 ] && [ -f "$TMP/$n-dh/logits.f32" ] && cmp -s "$TMP/$n-dg/meta.json" "$TMP/$n-dh/meta.json" \
        && ok "$n: forward --dump bit-equal to the GGUF's ($nf tensors, logits included)" \
        || fail "$n forward dumps: $nd of $nf differ: $(head -3 "$TMP/cmp")"
    "$BANGTRACE" run --model "$TMP/$n-hf" --prompt "$P" -n 12 >"$TMP/hf.txt" 2>"$TMP/err" || { fail "$n folder run: $(tail -1 "$TMP/err")"; return; }
    "$BANGTRACE" run --model "$TMP/$n.gguf" --prompt "$P" -n 12 >"$TMP/g.txt" 2>/dev/null || fail "$n gguf run"
    [ -s "$TMP/hf.txt" ] && cmp -s "$TMP/hf.txt" "$TMP/g.txt" && ok "$n: greedy run prints the GGUF's text" \
        || fail "$n greedy run differs: $(diff "$TMP/hf.txt" "$TMP/g.txt" | head -4)"
}

# DeepseekV3ForCausalLM: q low-rank path, sigmoid + noaux_tc in 4 groups, YaRN, a shared expert
same ds-v3 make-tiny-deepseek2.py
grep -q '"DeepseekV3ForCausalLM"' "$TMP/ds-v3-hf/config.json" || fail "ds-v3: not a DeepseekV3ForCausalLM folder"
# DeepseekV2ForCausalLM: direct q projection (q_lora_rank null), softmax + greedy, scale 1
same ds-v2 make-tiny-deepseek2.py --q-lora 0 --gating softmax --groups 0/0 --scale 1
grep -q '"q_lora_rank": null' "$TMP/ds-v2-hf/config.json" && grep -q '"DeepseekV2ForCausalLM"' "$TMP/ds-v2-hf/config.json" \
    || fail "ds-v2: not a DeepseekV2ForCausalLM folder with q_lora_rank null"
# no shared experts, no groups, no rope scaling
same ds-noshexp make-tiny-deepseek2.py --shared 0 --groups 0/0 --yarn 0
# two shared experts, mscale_all_dim 1 (llama.cpp's mscale 1)
same ds-shexp2 make-tiny-deepseek2.py --q-lora 0 --shared 2 --yarn-log-mul 1
# gpt-oss: f32 experts, and MXFP4 experts as gpt-oss ships them; the
# folders say truncate: true (YaRN's correction range rounded outwards, as
# llama.cpp, which drops the key, always does), so they compute the GGUF's bits
same gptoss-f32 make-tiny-gptoss.py --experts f32 --truncate true
same gptoss-mxfp4 make-tiny-gptoss.py --experts mxfp4 --truncate true
# truncate: false (the real gpt-oss configs) is honoured, as transformers and
# vLLM do: the range unrounded, so the folder departs from the GGUF first at
# the rope (attn_q), not before (tests/pytorch_record.sh checks it against
# transformers)
"$py" "$BT_SRCDIR/tools/make-tiny-gptoss.py" "$TMP/gptoss-untrunc-hf" --format hf --seed 5 --truncate false >"$TMP/tool.log" 2>&1 &&
    grep -q '"truncate": false' "$TMP/gptoss-untrunc-hf/config.json" || fail "make-tiny-gptoss.py --truncate false: $(tail -1 "$TMP/tool.log")"
if "$BANGTRACE" forward --model "$TMP/gptoss-untrunc-hf" --tokens "$IDS" --dump "$TMP/gu-d" >/dev/null 2>"$TMP/err"; then
    cmp -s "$TMP/gu-d/blk.0.attn_norm.f32" "$TMP/gptoss-f32-dg/blk.0.attn_norm.f32" &&
        cmp -s "$TMP/gu-d/blk.0.attn_v.f32" "$TMP/gptoss-f32-dg/blk.0.attn_v.f32" &&
        ! cmp -s "$TMP/gu-d/blk.0.attn_q.f32" "$TMP/gptoss-f32-dg/blk.0.attn_q.f32" &&
        ! cmp -s "$TMP/gu-d/logits.f32" "$TMP/gptoss-f32-dg/logits.f32" &&
        ok "gpt-oss truncate: false: the folder computes YaRN's range unrounded (same attn_norm and attn_v, attn_q on differ)" ||
        fail "gpt-oss truncate: false: the dumps do not differ from the rope on"
else fail "gpt-oss truncate: false folder forward: $(tail -1 "$TMP/err")"; fi
grep -q 'gate_up_proj_blocks' "$TMP/gptoss-mxfp4-hf/model.safetensors" \
    && grep -q '"U8"' "$TMP/gptoss-mxfp4-hf/model.safetensors" || fail "gptoss-mxfp4: the folder holds no U8 *_blocks"

# BF16 checkpoints: the conversions move 2-byte elements (kv_b_proj's split,
# the experts' transposes, the bias split): a BF16 copy of a folder computes
# exactly what the F32 folder of the same bf16-rounded values computes
cat >"$TMP/bf16.py" <<'PY'
import json, os, shutil, struct, sys
import numpy as np
src, dst, mode = sys.argv[1:4]
shutil.copytree(src, dst)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, out, data = json.loads(raw[8:8 + n]), {"__metadata__": {"format": "pt"}}, b""
for k, v in sorted(h.items()):
    if k == "__metadata__":
        continue
    b, e = v["data_offsets"]
    buf, dt = raw[8 + n + b:8 + n + e], v["dtype"]
    if dt == "F32":
        u = np.frombuffer(buf, "<u4").astype(np.uint64)
        r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype("<u2")        # round to nearest even
        buf, dt = (r.tobytes(), "BF16") if mode == "bf16" else ((r.astype("<u4") << 16).tobytes(), "F32")
    out[k] = {"dtype": dt, "shape": v["shape"], "data_offsets": [len(data), len(data) + len(buf)]}
    data += buf
hj = json.dumps(out).encode()
hj += b" " * (-len(hj) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(hj)) + hj + data)
PY
for n in ds-v3 gptoss-f32; do
    [ -d "$TMP/$n-hf" ] || { fail "$n: no folder for the BF16 check"; continue; }
    "$py" "$TMP/bf16.py" "$TMP/$n-hf" "$TMP/$n-bf16" bf16 && "$py" "$TMP/bf16.py" "$TMP/$n-hf" "$TMP/$n-rounded" f32 \
        || { fail "$n: BF16 copies"; continue; }
    "$BANGTRACE" forward --model "$TMP/$n-bf16" --tokens "$IDS" --dump "$TMP/$n-db" >/dev/null 2>"$TMP/err" &&
        "$BANGTRACE" forward --model "$TMP/$n-rounded" --tokens "$IDS" --dump "$TMP/$n-dr" >/dev/null 2>>"$TMP/err" \
        || { fail "$n BF16 forward: $(tail -1 "$TMP/err")"; continue; }
    nd=0
    for f in "$TMP/$n-dr"/*.f32; do cmp -s "$f" "$TMP/$n-db/${f##*/}" || nd=$((nd + 1)); done
    [ "$nd" -eq 0 ] && ok "$n: a BF16 folder computes bit for bit what F32 weights of the same values compute" \
        || fail "$n BF16: $nd tensors differ from the rounded F32 folder's"
done

# the library API maps the checkpoints' weight names (module paths) to the
# engine's tensors (bt_hf_gguf_name), as bangtrace.torch hooks them
# (not in a sanitizer build: python cannot load that library without its runtime)
lib=${BT_BUILDDIR:-.}/libbangtrace.so
if grep -q "^CFLAGS = .*fsanitize" "${BT_BUILDDIR:-.}/Makefile" 2>/dev/null; then
    echo "note: sanitizer build, the library's weight names are not checked here"
elif [ -f "$lib" ] && [ -d "$TMP/ds-v3-hf" ] && [ -d "$TMP/gptoss-f32-hf" ]; then
    BANGTRACE_LIB=$lib PYTHONPATH=$BT_SRCDIR/python "$py" - "$TMP" >"$TMP/api" 2>&1 <<'PY' \
        && ok "the library maps their weight names: $(tail -1 "$TMP/api")" || fail "weight names through the library: $(tail -3 "$TMP/api")"
import os, sys
import bangtrace
T = sys.argv[1]
want = {
    "ds-v3-hf": {"model.layers.1.self_attn.q_a_proj.weight": "blk.1.attn_q_a",
                 "model.layers.1.self_attn.q_a_layernorm.weight": "blk.1.attn_q_a_norm",
                 "model.layers.2.self_attn.kv_a_proj_with_mqa.weight": "blk.2.attn_kv_a",
                 "model.layers.1.mlp.gate.weight": "blk.1.ffn_gate_inp",
                 "model.layers.2.mlp.experts.5.down_proj.weight": "blk.2.ffn_down",
                 "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down",
                 "model.layers.1.post_attention_layernorm.weight": "blk.1.ffn_norm"},
    "gptoss-f32-hf": {"model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm",
                      "model.layers.3.mlp.router.weight": "blk.3.ffn_gate_inp",
                      "model.layers.1.self_attn.q_proj.weight": "blk.1.attn_q",
                      "lm_head.weight": "logits"},
}
n = 0
for folder, names in want.items():
    m = bangtrace.Model(os.path.join(T, folder))
    for hf, tap in names.items():
        t = m.weight_tensor(hf)
        assert t is not None and t.name == tap, (folder, hf, t and t.name, tap)
        n += 1
print("%d module weights of deepseek2 and gpt-oss" % n)
PY
else
    fail "no libbangtrace.so or no folders for the library check"
fi

# bad NAME BASE EXPECT PYTHON: BASE's folder with config c changed by PYTHON
# is refused: exit 2, one line holding EXPECT
bad() {
    local n=$1 base=$2 want=$3 code=$4
    [ -d "$TMP/$base-hf" ] || { fail "$n: no $base folder"; return; }
    rm -rf "$TMP/bad"
    cp -r "$TMP/$base-hf" "$TMP/bad"
    "$py" - "$TMP/bad/config.json" "$code" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
    expect_exit 2 "$n is refused" "$BANGTRACE" run --model "$TMP/bad" --prompt hi -n 1 || return
    grep -qF -- "$want" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] \
        && ok "$n: one line naming it" || fail "$n: want one line with '$want', got: $(cat "$TMP/err")"
}
bad "an unknown topk_method" ds-v3 "topk_method 'top_p' is not supported" 'c["topk_method"] = "top_p"'
bad "FP8 quantization_config" ds-v3 "quant_method 'fp8' is not supported" \
    'c["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}'
bad "group_limited_greedy with groups" ds-v3 "topk_method group_limited_greedy with n_group 4 is not supported" \
    'c["topk_method"] = "group_limited_greedy"; c["scoring_func"] = "softmax"'
bad "noaux_tc with softmax scores" ds-v3 "noaux_tc with scoring_func softmax is not supported" 'c["scoring_func"] = "softmax"'
bad "an unknown scoring_func" ds-v3 "scoring_func 'sqrtsoftplus' is not supported" 'c["scoring_func"] = "sqrtsoftplus"'
bad "YaRN beta_fast 16" ds-v3 "beta_fast 16" 'c["rope_scaling"]["beta_fast"] = 16'
bad "YaRN mscale != mscale_all_dim" ds-v3 "mscale 1 with mscale_all_dim 0.707 is not supported" 'c["rope_scaling"]["mscale"] = 1.0'
bad "rope_scaling linear" ds-v3 "rope_scaling type 'linear' is not supported for deepseek2" \
    'c["rope_scaling"] = {"type": "linear", "factor": 2.0}'
bad "V2 normalising and scaling" ds-v3 "DeepseekV2ForCausalLM with norm_topk_prob and routed_scaling_factor 2.5" \
    'c["architectures"] = ["DeepseekV2ForCausalLM"]'
bad "noaux_tc without the correction bias" ds-v2 "but 0 of the 2 MoE layers have mlp.gate.e_score_correction_bias" \
    'c["topk_method"] = "noaux_tc"; c["scoring_func"] = "sigmoid"'
bad "a correction bias under greedy" ds-v3 "is only used with topk_method noaux_tc" \
    'c["topk_method"] = "greedy"; c["n_group"] = 1; c["topk_group"] = 1'
bad "fewer kv heads than heads" ds-v3 "num_key_value_heads 2 != num_attention_heads 4" 'c["num_key_value_heads"] = 2'
bad "a swiglu_limit other than 7" gptoss-f32 "swiglu_limit 5 is not supported" 'c["swiglu_limit"] = 5.0'
bad "gpt-oss rope_scaling linear" gptoss-f32 "rope_scaling type 'linear' is not supported for gpt-oss" \
    'c["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}'
bad "an unknown rope_scaling key" gptoss-f32 "rope_scaling 'low_freq_factor' is not supported for gpt-oss" \
    'c["rope_scaling"]["low_freq_factor"] = 1.0'
bad "gpt-oss FP8 quantization_config" gptoss-f32 "quant_method 'fp8' is not supported for gpt-oss" \
    'c["quantization_config"] = {"quant_method": "fp8"}'
bad "layer_types of the wrong length" gptoss-f32 "layer_types must list the 4 layers" 'c["layer_types"] = c["layer_types"][:3]'
# layer_types decides which layers slide: all full attention differs from the GGUF's pattern
rm -rf "$TMP/full"; cp -r "$TMP/gptoss-f32-hf" "$TMP/full"
"$py" - "$TMP/full/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["layer_types"] = ["full_attention"] * len(c["layer_types"]); json.dump(c, open(sys.argv[1], "w"))
PY
"$BANGTRACE" forward --model "$TMP/full" --tokens "$IDS" --dump "$TMP/full-d" >/dev/null 2>"$TMP/err" \
    && ! cmp -s "$TMP/full-d/logits.f32" "$TMP/gptoss-f32-dg/logits.f32" && cmp -s "$TMP/full-d/blk.0.attn_norm.f32" "$TMP/gptoss-f32-dg/blk.0.attn_norm.f32" \
    && ok "layer_types all full_attention turns the window off (other logits, same inputs)" \
    || fail "layer_types full_attention: $(tail -1 "$TMP/err")"
finish
