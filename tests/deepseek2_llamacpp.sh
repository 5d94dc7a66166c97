#!/usr/bin/env bash
# deepseek2_llamacpp.sh - deepseek2 (multi-head latent attention + MoE with
# shared experts) computed by bangtrace's engine against llama.cpp's, on tiny
# random models written at test time by tools/make-tiny-deepseek2.py (f32
# weights; a dense layer 0, MoE layers 1-2):
#   - forward over 40 tokens vs forward --engine llama.cpp (f32 KV cache,
#     flash attention off) for four variants: the default (q low-rank path,
#     split attn_k_b/attn_v_b, YaRN x4 with mscale, sigmoid routing with
#     exp_probs_b in 4 groups of which 2 compete, scale 2.5), the fused
#     attn_kv_b, a direct q projection (q_lora_rank 0), and softmax routing
#     without groups, bias or rope scaling: top-1 equal on every position,
#     max abs logit difference <= 2e-3, and the tensors llama.cpp names
#     (attn_norm, attn_ctx, attn_resid, ffn_norm, ffn_resid, output_norm)
#     within 1e-4;
#   - the split and fused layouts of one seed give the same logits (1e-4);
#   - the cache holds the latent: blk.L.attn_kv_latent rows are kv_lora +
#     rope wide; no attn_k / attn_v; ffn_gate_inp only in the MoE layers;
#   - greedy continuations of run vs run --engine llama.cpp (its defaults)
#     equal on three prompts (decode over the latent cache);
#   - a NaN injected into blk.1.attn_kv_latent at step 3 is named by bisect
#     and recurs through the cache into step 4's attn_ctx_latent;
#   - bad input: no attention.kv_lora_rank, or no leading_dense_block_count
#     (layer 0's dense FFN then does not fit), is one line, exit 2;
#   - --device cuda refuses the model naming the op the plugin lacks.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
PY=${PYTHON3:-python3}
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
TOOL=$BT_SRCDIR/tools/make-tiny-deepseek2.py
$PY -c 'import numpy' 2>/dev/null || skip "python3 has no numpy"

TOKS=$(seq 1 40 | awk '{printf "%d ", ($1 * 7919) % 50000}')
cat >"$TMP/cmp.py" <<'PY'
import os, sys
import numpy as np
nat, ref, label = sys.argv[1], sys.argv[2], sys.argv[3]
def load(d, n):
    return np.fromfile(os.path.join(d, n + ".f32"), dtype=np.float32)
bad = 0
def check(cond, msg):
    global bad
    print(("ok: " if cond else "FAIL: ") + label + ": " + msg)
    bad += not cond
V = 50257
a, b = load(nat, "logits").reshape(-1, V), load(ref, "logits").reshape(-1, V)
check(a.shape == b.shape == (40, V), "logits of 40 positions (%s, %s)" % (a.shape, b.shape))
d = float(np.abs(a - b).max())
check(d <= 2e-3, "max abs logit difference %.3g <= 2e-3" % d)
same = int((a.argmax(1) == b.argmax(1)).sum())
check(same == 40, "top-1 equal on %d of 40 positions" % same)
worst = 0.0
for l in range(3):
    for o in ("attn_norm", "attn_ctx", "attn_resid", "ffn_norm", "ffn_resid"):
        n = "blk.%d.%s" % (l, o)
        x, y = load(nat, n), load(ref, n)
        worst = max(worst, float(np.abs(x - y).max()) if x.size == y.size else float("inf"))
worst = max(worst, float(np.abs(load(nat, "output_norm") - load(ref, "output_norm")).max()))
check(worst <= 1e-4, "attn_norm/attn_ctx/attn_resid/ffn_norm/ffn_resid/output_norm within 1e-4 of llama.cpp (%.3g)" % worst)
sys.exit(1 if bad else 0)
PY
for v in "default:" "fused:--kv-layout fused" "q-direct:--q-lora 0" "softmax:--gating softmax --groups 0/0 --yarn 0"; do
    name=${v%%:*}; args=${v#*:}
    M=$TMP/$name.gguf
    $PY "$TOOL" "$M" --seed 3 $args >"$TMP/tool.log" 2>&1 || { fail "make-tiny-deepseek2.py $args: $(tail -1 "$TMP/tool.log")"; continue; }
    "$B" forward --model "$M" --tokens "$TOKS" --dump "$TMP/$name-nat" --threads 1 2>"$TMP/err" ||
        { fail "forward $name: $(cat "$TMP/err")"; continue; }
    "$B" forward --engine llama.cpp --llama-flash-attn off --llama-kv-type f32 --model "$M" --tokens "$TOKS" \
        --dump "$TMP/$name-ref" --threads 1 2>"$TMP/err" || { fail "forward --engine llama.cpp $name: $(tail -2 "$TMP/err")"; continue; }
    $PY "$TMP/cmp.py" "$TMP/$name-nat" "$TMP/$name-ref" "$name" >"$TMP/cmp.out" 2>&1; rc=$?
    cat "$TMP/cmp.out"
    [ $rc -eq 0 ] || fail "$name against llama.cpp (above)"
done

# one model in both layouts; the latent cache and the layer kinds in the dump
$PY - "$TMP" <<'PY' && ok "split and fused layouts agree; latent rows of 40; no attn_k/attn_v; router in MoE layers only" || fail "layouts / dump layout (above)"
import os, sys
import numpy as np
t = sys.argv[1]
def load(d, n):
    return np.fromfile(os.path.join(t, d, n + ".f32"), dtype=np.float32)
d = float(np.abs(load("default-nat", "logits") - load("fused-nat", "logits")).max())
print("split vs fused: max abs %.3g" % d)
ok = d <= 1e-4
ok &= load("default-nat", "blk.1.attn_kv_latent").size == 40 * (32 + 8)
ok &= load("default-nat", "blk.1.attn_q_abs").size == 40 * 4 * (32 + 8)
ok &= not any(os.path.exists(os.path.join(t, "default-nat", "blk.%d.%s.f32" % (l, o))) for l in range(3) for o in ("attn_k", "attn_v"))
ok &= not os.path.exists(os.path.join(t, "default-nat", "blk.0.ffn_gate_inp.f32"))
ok &= os.path.exists(os.path.join(t, "default-nat", "blk.1.ffn_gate_inp.f32"))
ok &= not os.path.exists(os.path.join(t, "q-direct-nat", "blk.0.attn_q_a.f32"))
sys.exit(0 if ok else 1)
PY

# greedy continuations, llama.cpp with its own defaults
M=$TMP/default.gguf
greedy_equal_llamacpp "$M"

# a NaN put into the latent cache's row is localized by bisect
"$B" run --model "$M" --prompt "Once upon a time" -n 8 --threads 1 --taps all --trace "$TMP/inj.bttrace" \
    --inject 'nan@op=attn_kv_latent,layer=1,step=3' >/dev/null 2>"$TMP/err" || fail "run --inject attn_kv_latent: $(cat "$TMP/err")"
"$B" bisect "$TMP/inj.bttrace" >"$TMP/bis" 2>&1
grep -E -q "first non-finite: step 3, position [0-9]+, layer 1, op attn_kv_latent \(blk.1.attn_kv_latent\)" "$TMP/bis" &&
    ok "bisect names step 3, layer 1, attn_kv_latent" || fail "bisect after a NaN in blk.1.attn_kv_latent: $(head -3 "$TMP/bis")"
grep -E -q "^ +4 +1 +blk.1.attn_ctx_latent +recur" "$TMP/bis" && ok "the latent cache carries the NaN to step 4's attn_ctx_latent" ||
    fail "no recurrence into step 4's blk.1.attn_ctx_latent: $(cat "$TMP/bis")"

# bad input: one line, exit 2
GP=$HOME/.cache/bangtrace/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
if [ -d "$GP" ]; then
    $PY "$BT_SRCDIR/tests/gguf_drop_key.py" "$M" "$TMP/nokv.gguf" deepseek2.attention.kv_lora_rank "$GP" >"$TMP/drop.log" 2>&1 &&
    $PY "$BT_SRCDIR/tests/gguf_drop_key.py" "$M" "$TMP/nodense.gguf" deepseek2.leading_dense_block_count "$GP" >>"$TMP/drop.log" 2>&1 ||
        fail "gguf_drop_key.py: $(tail -1 "$TMP/drop.log")"
    expect_exit 2 "a deepseek2 GGUF without attention.kv_lora_rank" "$B" forward --model "$TMP/nokv.gguf" --tokens "1 2" --dump "$TMP/bd1"
    grep -q "deepseek2.attention.kv_lora_rank is missing" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] &&
        ok "names the key, one line" || fail "missing kv_lora_rank: $(cat "$TMP/err")"
    expect_exit 2 "a deepseek2 GGUF without leading_dense_block_count" "$B" forward --model "$TMP/nodense.gguf" --tokens "1 2" --dump "$TMP/bd2"
    grep -q "blk.0" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "layer 0's dense FFN refused: $(cat "$TMP/err")" ||
        fail "missing leading_dense_block_count: $(cat "$TMP/err")"
fi

# a backend without host buffers refuses, naming the op
cuda_refuses "$M" "op mla_attention"
finish
