#!/usr/bin/env bash
# gptoss_llamacpp.sh - gpt-oss (attention sinks, sliding-window layers, YaRN
# rope, biases, experts with the clamped SwiGLU) computed by bangtrace's
# engine against llama.cpp's, on tiny random models written at test time by
# tools/make-tiny-gptoss.py (4 layers, the even ones sliding with a window of
# 4, 4 experts of which 2 per token):
#   - f32 weights: forward over 40 tokens vs forward --engine llama.cpp (f32
#     KV cache, flash attention off): top-1 equal on every position, max abs
#     logit difference <= 2e-3, and the tensors llama.cpp names (attn_q, k, v
#     after rope, attn_ctx, attn_output, the residuals) within 1e-4;
#   - greedy continuations of run vs run --engine llama.cpp (its defaults:
#     f16 cache, flash attention) equal on three prompts, decoding past the
#     window;
#   - MXFP4 experts as llama.cpp stores them: read exactly (against
#     llama.cpp on the same values dequantized into an f32 file: <= 2e-3, top-1
#     everywhere), and against llama.cpp on the MXFP4 file itself, whose CPU
#     products quantize the activations to Q8_0 (--numerics act_q=ggml
#     emulates it): top-1 on every position and within 5e-2 (one Q8 rounding
#     step flipped by the last bit of a sum moves a logit by ~1e-2: the exact
#     figure is printed);
#   - tests/test_gptoss (C): a backend without attention_sinks or swiglu_oai
#     refuses in one line naming the op; decode equals prefill bit for bit
#     past the window; the attn_sink tap; a batched forward equals single ones;
#   - bisect names the expert of an injected NaN; the routes are recorded;
#   - bad input: a missing attn_sinks tensor, a short one, a missing
#     sliding_window: one line, exit 2;
#   - --device cuda refuses the model naming the op (when a CUDA plugin and a
#     GPU are there).
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
PY=${PYTHON3:-python3}
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
TOOL=$BT_SRCDIR/tools/make-tiny-gptoss.py
$PY -c 'import numpy, gguf' 2>/dev/null || skip "python3 has no numpy or gguf"

TOKS=$(seq 1 40 | awk '{printf "%d ", ($1 * 7919) % 50000}')
for v in f32 mxfp4 mxfp4-f32; do
    $PY "$TOOL" "$TMP/$v.gguf" --experts $v --seed 0 >"$TMP/tool.log" 2>&1 || { fail "make-tiny-gptoss.py --experts $v: $(tail -1 "$TMP/tool.log")"; finish; }
done
expect_exit 2 "the tool refuses to replace an existing file" $PY "$TOOL" "$TMP/f32.gguf"
grep -q "exists" "$TMP/err" || fail "the tool's refusal: $(cat "$TMP/err")"

nat() { "$B" forward --model "$TMP/$1.gguf" --tokens "$TOKS" --dump "$TMP/$2" --threads 1 "${@:3}" 2>"$TMP/err" || fail "forward $1: $(cat "$TMP/err")"; }
ref() { "$B" forward --engine llama.cpp --llama-flash-attn off --llama-kv-type f32 --model "$TMP/$1.gguf" --tokens "$TOKS" \
    --dump "$TMP/$2" --threads 1 2>"$TMP/err" || fail "forward --engine llama.cpp $1: $(cat "$TMP/err")"; }
nat f32 nat; ref f32 ref
nat mxfp4 natmx; ref mxfp4-f32 refmxf
nat mxfp4 natmxq --numerics act_q=ggml; ref mxfp4 refmx

cat >"$TMP/cmp.py" <<'PY'
import os, sys
import numpy as np
t = sys.argv[1]
bad = 0
def check(cond, msg):
    global bad
    print(("ok: " if cond else "FAIL: ") + msg)
    bad += not cond
def load(d, n):
    return np.fromfile(os.path.join(t, d, n + ".f32"), dtype=np.float32)
def logits(nat, ref, tol, label):
    a, b = load(nat, "logits").reshape(-1, 50257), load(ref, "logits").reshape(-1, 50257)
    d = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
    same = int((a.argmax(1) == b.argmax(1)).sum()) if a.shape == b.shape else 0
    check(a.shape == b.shape == (40, 50257) and d <= tol and same == 40,
          "%s: logits max abs diff %.3g (<= %g), top-1 equal on %d of 40 positions" % (label, d, tol, same))
logits("nat", "ref", 2e-3, "f32 weights")
worst = (0.0, "-")
for l in range(4):
    for op in ("attn_q", "attn_k", "attn_v", "attn_ctx", "attn_output", "attn_resid", "ffn_resid"):
        n = "blk.%d.%s" % (l, op)
        if not os.path.exists(os.path.join(t, "ref", n + ".f32")):
            check(False, "llama.cpp's dump has %s" % n); continue
        x, y = load("nat", n), load("ref", n)
        dd = float(np.abs(x - y).max()) if x.size == y.size else float("inf")
        worst = max(worst, (dd, n))
check(worst[0] <= 1e-4, "the 28 tensors llama.cpp names within 1e-4 (worst %s %.3g)" % (worst[1], worst[0]))
s = load("nat", "blk.0.attn_sink").reshape(40, 4)
check(np.all((s > 0) & (s < 1)), "blk.0.attn_sink: 40 rows of 4 shares in (0, 1)")
logits("natmx", "refmxf", 2e-3, "MXFP4 experts as stored vs llama.cpp on their values in f32")
logits("natmxq", "refmx", 5e-2, "MXFP4 experts, act_q=ggml vs llama.cpp's Q8_0 activations")
sys.exit(1 if bad else 0)
PY
$PY "$TMP/cmp.py" "$TMP" >"$TMP/cmp.out" 2>&1; rc=$?
cat "$TMP/cmp.out"
[ $rc -eq 0 ] || fail "forward against llama.cpp (above)"

# greedy continuations, llama.cpp with its own defaults
greedy_equal_llamacpp "$TMP/f32.gguf"

# the engine's own checks (refusals, decode = prefill, batched = single)
"${BT_BUILDDIR:-.}/tests/test_gptoss" "$TMP/f32.gguf" >"$TMP/c.out" 2>&1 && ok "test_gptoss: $(tail -1 "$TMP/c.out")" ||
    fail "test_gptoss: $(cat "$TMP/c.out")"

# a NaN in one expert's output: bisect names the expert; the routes are recorded
"$B" run --model "$TMP/f32.gguf" --prompt "Once upon a time" -n 6 --threads 1 --taps all --trace "$TMP/inj.bttrace" \
    --inject 'nan@op=ffn_down,layer=1,step=3' >/dev/null 2>"$TMP/err" || fail "run --inject ffn_down: $(cat "$TMP/err")"
"$B" bisect "$TMP/inj.bttrace" >"$TMP/bis" 2>&1
grep -q "layer 1, op ffn_down (blk.1.ffn_down.expert\[[0-3]\])" "$TMP/bis" && ok "bisect names the expert: $(grep -o 'blk.1.ffn_down.expert\[[0-3]\]' "$TMP/bis" | head -1)" ||
    fail "bisect after a NaN in blk.1.ffn_down: $(head -5 "$TMP/bis")"

# bad input: one line, exit 2, nothing written
GP=$HOME/.cache/bangtrace/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
[ -d "$GP" ] || GP=$($PY -c 'import gguf, os; print(os.path.dirname(os.path.dirname(gguf.__file__)))')
for bad in "blk.1.attn_sinks.weight|attn_sinks" "blk.1.attn_sinks.weight:short|attn_sinks" "gpt-oss.attention.sliding_window|sliding_window"; do
    key=${bad%|*} want=${bad#*|}
    $PY "$BT_SRCDIR/tests/gguf_drop_key.py" "$TMP/f32.gguf" "$TMP/bad.gguf" "$key" "$GP" >"$TMP/drop.log" 2>&1 ||
        { fail "gguf_drop_key.py $key: $(tail -1 "$TMP/drop.log")"; continue; }
    rm -rf "$TMP/bd"
    expect_exit 2 "a gpt-oss GGUF with $key dropped or short" "$B" forward --model "$TMP/bad.gguf" --tokens "1 2" --dump "$TMP/bd"
    grep -q "$want" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -e "$TMP/bd/meta.json" ] &&
        ok "one line naming $want: $(cat "$TMP/err")" || fail "$key: $(cat "$TMP/err")"
    rm -f "$TMP/bad.gguf"
done

# a backend without the gpt-oss ops refuses, naming the op (on a machine with a GPU)
cuda_refuses "$TMP/f32.gguf" "attention_sinks"
finish
