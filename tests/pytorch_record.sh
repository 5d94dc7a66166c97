#!/bin/sh
# bangtrace.torch (python/bangtrace) recording transformers through
# libbangtrace: tiny random-weight qwen3, llama, qwen2, qwen3moe (experts
# watched in transformers' eager experts loop), DeepSeek-V3 (MLA, the
# absorbed ops left out) and gpt-oss (its experts' `@` and bias adds and the
# sinks' softmax share watched) folders recorded in
# f32 agree with the native engine per named tensor (1e-4) with every name on
# both sides, bisect --reference finds no departure; in bf16 a NaN written by
# a forward hook is named by bisect (step, layer, op, index) and by
# bisect --reference; one expert's broken down projection is named too, and
# the default grouped_mm experts path warns that the experts' own taps are
# missing; a NaN in the MLA latent is named, and one in a gpt-oss expert's
# SwiGLU; the gated delta net models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next:
# the delta rule's and causal conv's arguments and results, the states)
# agree too, and in bf16 a NaN in the state returned by a broken delta-rule
# kernel is named as ssm_state at the native engine's index
# (tests/pytorch/record_check.py). The torch environment
# is tools/torch-env's (created once under ~/.cache/bangtrace); SKIP only
# when it cannot be had.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_torch
# the folders: GGUF and HF folder from the same weights (tests/oracle)
"$py" - "$TMP" <<'PY' || fail "could not write the tiny HF folders"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["BT_SRCDIR"], "tests", "oracle"))
import make_random_gguf, test_hf_arch as tha
out = sys.argv[1]
for arch, cls, seed in (("qwen3", "Qwen3ForCausalLM", 5), ("llama", "LlamaForCausalLM", 6), ("qwen2", "Qwen2ForCausalLM", 7)):
    g = os.path.join(out, arch + ".gguf")
    hp = make_random_gguf.make(g, arch=arch, seed=seed, untied=arch != "qwen2")
    tha.write_folder(g, os.path.join(out, arch), cls, {"model_type": arch}, hp)
g = os.path.join(out, "qwen3moe.gguf")
hp = make_random_gguf.make(g, arch="qwen3moe", n_expert=8, n_expert_used=2, seed=44, untied=True)
tha.write_folder(g, os.path.join(out, "qwen3moe"), "Qwen3MoeForCausalLM",
                 dict(model_type="qwen3_moe", decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True), hp)
PY
"$py" "$BT_SRCDIR/tools/make-tiny-deepseek2.py" "$TMP/deepseek2" --format hf --seed 3 > "$TMP/ds.log" 2>&1 ||
    fail "make-tiny-deepseek2.py --format hf: $(tail -n 1 "$TMP/ds.log")"
"$py" "$BT_SRCDIR/tools/make-tiny-gptoss.py" "$TMP/gptoss" --format hf --seed 3 > "$TMP/go.log" 2>&1 ||
    fail "make-tiny-gptoss.py --format hf: $(tail -n 1 "$TMP/go.log")"
for a in qwen35 qwen35moe qwen3next; do
    "$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/$a" --format hf --arch $a --seed 3 > "$TMP/$a.log" 2>&1 ||
        fail "make-tiny-hybrid.py --format hf --arch $a: $(tail -n 1 "$TMP/$a.log")"
done
BANGTRACE_LIB=$lib PYTHONPATH=$BT_SRCDIR/python "$env/bin/python" "$BT_SRCDIR/tests/pytorch/record_check.py" \
    "$BANGTRACE" "$TMP" "$TMP/qwen3" "$TMP/llama" "$TMP/qwen2" "$TMP/qwen3moe" "$TMP/deepseek2" "$TMP/gptoss" \
    "$TMP/qwen35" "$TMP/qwen35moe" "$TMP/qwen3next" > "$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; fail "bangtrace.torch against the native engine (above)"; }
grep '^ok:' "$TMP/out" | sed 's/^ok: //' | while read -r l; do ok "$l"; done
finish
