#!/bin/sh
# The vLLM plugin (python/bangtrace/vllm.py) on vLLM's CPU build: the package
# installed (its vllm.general_plugins entry point is how vLLM finds it),
# BANGTRACE_VLLM naming the trace directory. Tiny random-weight qwen3, llama
# and qwen3moe (its fused experts' own ops left out) folders (head_dim 32:
# vLLM's CPU attention takes no smaller) recorded
# in f32 agree with the native engine per named tensor (1e-4), every name on
# both sides, bisect --reference finds no departure; concurrent requests get a
# trace each holding only their own tokens, equal to their solo runs; a
# chunked prefill is one step; in bf16 a clean run names no op and a NaN
# written by a broken module is named by bisect and bisect --reference; a
# non-eager engine is refused with one line; with vLLM's worker processes the
# plugin loads there and the traces close at shutdown; a Qwen3.5 hybrid in
# bf16 is recorded (the states from each request's cache slot) with no
# departure, per request under batching, and a GDN op that does not reset a
# reused state slot is named by bisect --reference; Qwen3-Next records with
# no departure, and with tied embeddings (vLLM leaves its lm_head zero) its
# wall of id 0 is named as constant logits; DeepSeek-V3 (MLA, MoE) in f32
# on vLLM's reference CPU MLA backend agrees but for the ops inside vLLM's
# MLA and MoE kernels, and a NaN in its latent is named, and in bf16 on
# vLLM's default MLA backend (AMX where the CPU has it) no op departs; gpt-oss in f32 agrees but for its experts' ops and
# the sinks' share (tests/pytorch/vllm_check.py). The environment is tools/torch-env's;
# SKIP only when it cannot be had.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_torch
"$py" - "$TMP" <<'PY' || fail "could not write the tiny HF folders"
import os, sys
sys.path.insert(0, os.path.join(os.environ["BT_SRCDIR"], "tests", "oracle"))
import make_random_gguf, test_hf_arch as tha
out = sys.argv[1]
for arch, cls, seed, cfg in (("qwen3", "Qwen3ForCausalLM", 5, {"model_type": "qwen3"}),
                             ("llama", "LlamaForCausalLM", 6, {"model_type": "llama"}),
                             ("qwen3moe", "Qwen3MoeForCausalLM", 44, dict(model_type="qwen3_moe", decoder_sparse_step=1,
                                                                         mlp_only_layers=[], norm_topk_prob=True))):
    g = os.path.join(out, arch + ".gguf")
    extra = dict(n_expert=8, n_expert_used=2) if arch == "qwen3moe" else {}
    hp = make_random_gguf.make(g, arch=arch, seed=seed, untied=True, dim=128, hidden=256, n_heads=4, n_kv_heads=2, **extra)
    tha.write_folder(g, os.path.join(out, arch), cls, cfg, hp)
PY
# a Qwen3.5 hybrid (vLLM's CPU GDN kernels take heads of 64, bf16 only)
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/qwen35" --format hf --head-dim 64 --mtp 0 --seed 3 > "$TMP/h.log" 2>&1 ||
    fail "make-tiny-hybrid.py --head-dim 64: $(tail -n 1 "$TMP/h.log")"
# Qwen3-Next, untied (as its checkpoints are) and tied (which vLLM ignores)
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/qwen3next" --format hf --arch qwen3next --head-dim 64 --mtp 0 --untied \
    --seed 3 > "$TMP/h.log" 2>&1 || fail "make-tiny-hybrid.py --arch qwen3next --untied: $(tail -n 1 "$TMP/h.log")"
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/qwen3next-tied" --format hf --arch qwen3next --head-dim 64 --mtp 0 \
    --seed 3 > "$TMP/h.log" 2>&1 || fail "make-tiny-hybrid.py --arch qwen3next: $(tail -n 1 "$TMP/h.log")"
# DeepSeek-V3 (MLA; vLLM's CPU MLA kernels take a latent of 512 + 64 only, its AMX one head dims of 32x)
"$py" "$BT_SRCDIR/tools/make-tiny-deepseek2.py" "$TMP/deepseek" --format hf --shape vllm --q-lora 0 --seed 2 \
    > "$TMP/d.log" 2>&1 || fail "make-tiny-deepseek2.py --shape vllm: $(tail -n 1 "$TMP/d.log")"
# gpt-oss (sinks, sliding-window layers; f32 experts: vLLM's CPU build has no MXFP4 kernel)
"$py" "$BT_SRCDIR/tools/make-tiny-gptoss.py" "$TMP/gptoss" --format hf --experts f32 > "$TMP/g.log" 2>&1 ||
    fail "make-tiny-gptoss.py --format hf: $(tail -n 1 "$TMP/g.log")"
# the package as a user installs it (a copy: the build leaves nothing in the source tree)
cp -r "$BT_SRCDIR/python" "$TMP/pkg" && chmod -R u+w "$TMP/pkg"
"$env/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --target "$TMP/site" "$TMP/pkg" > "$TMP/pip.log" 2>&1 ||
    { cat "$TMP/pip.log" >&2; fail "pip install of python/ failed"; }
ls "$TMP"/site/bangtrace-*.dist-info/entry_points.txt > /dev/null 2>&1 ||
    fail "the installed package declares no entry points"
grep -q 'bangtrace = bangtrace.vllm:register' "$TMP"/site/bangtrace-*.dist-info/entry_points.txt ||
    fail "the installed package does not declare the vllm.general_plugins entry point"
ok "pip installs python/ with its vllm.general_plugins entry point"
BANGTRACE_LIB=$lib PYTHONPATH=$TMP/site VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \
    "$env/bin/python" "$BT_SRCDIR/tests/pytorch/vllm_check.py" "$BANGTRACE" "$TMP" "$TMP/qwen3" "$TMP/llama" "$TMP/qwen3moe" \
    "$TMP/qwen35" "$TMP/qwen3next" "$TMP/deepseek" "$TMP/gptoss" > "$TMP/out" 2>&1 || { grep -v '^INFO\|^(EngineCore' "$TMP/out" | tail -n 60 >&2; fail "the vLLM plugin (above)"; }
grep '^ok:' "$TMP/out" | sed 's/^ok: //' | while read -r l; do ok "$l"; done
finish
