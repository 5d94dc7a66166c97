#!/usr/bin/env bash
# hybrid_llamacpp.sh - qwen35 (hybrid gated delta net + gated full attention)
# computed by bangtrace's engine against llama.cpp's, on a tiny random
# model written at test time by tools/make-tiny-hybrid.py (f32 weights; two
# recurrent layers, two full-attention layers from the file's
# full_attention_interval, 2 key / 4 value heads):
#   - forward over 40 tokens (a prefill) vs forward --engine llama.cpp with
#     an f32 KV cache and flash attention off: top-1 equal on every position,
#     max abs logit difference <= 2e-3, and the GDN tensors llama.cpp names
#     (ssm_z, ssm_beta, ssm_decay, ssm_conv, ssm_out, attn_gate,
#     attn_gated) within 1e-4;
#   - the dump holds the recurrent states with their documented shapes
#     (ssm_state n_v*head_k rows of head_v, ssm_conv_state kernel-1 rows) in
#     recurrent layers only, and no ssm_* in the attention layers;
#   - greedy continuations of run vs run --engine llama.cpp (its defaults)
#     equal on three prompts (decode: the one-token recurrence);
#   - qwen35moe (experts + sigmoid-gated shared expert) and qwen3next (also
#     NEOX rope, fused ssm_ba, grouped value heads): logits within 2e-3,
#     top-1 on every position, greedy continuation equal; a clean trace of
#     run --engine llama.cpp has ffn_out-L as blk.L.ffn_moe_out and the
#     shared expert under llama.cpp's names, and bisect --reference replays
#     it with no departure (it refused once: ffn_gate-0, the shared expert's,
#     taken for the routed experts' ffn_gate);
#   - a file with an MTP (nextn) block after the trunk loads (the block is
#     not computed) and gives the same logits;
#   - a NaN injected into blk.2.ssm_state at step 3 is named by bisect and
#     recurs in step 4's ssm_core;
#   - bad input: a missing ssm.conv_kernel is one line, exit 2; without
#     full_attention_interval the default (4) does not fit the file's
#     tensors and the load is refused (layer kinds are the file's);
#   - --device cuda refuses the model naming the op the plugin lacks (when a
#     CUDA plugin is built).
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
PY=${PYTHON3:-python3}
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
TOOL=${BT_TINY_HYBRID_TOOL:-$BT_SRCDIR/tools/make-tiny-hybrid.py}
[ -f "$TOOL" ] || skip "tools/make-tiny-hybrid.py is not in this tree (set BT_TINY_HYBRID_TOOL)"
$PY -c 'import numpy' 2>/dev/null || skip "python3 has no numpy"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed"

M=$TMP/h.gguf
$PY "$TOOL" "$M" --mtp 0 --seed 3 >"$TMP/tool.log" 2>&1 || { fail "make-tiny-hybrid.py: $(tail -1 "$TMP/tool.log")"; finish; }
TOKS=$(seq 1 40 | awk '{printf "%d ", ($1 * 7919) % 50000}')
"$B" forward --model "$M" --tokens "$TOKS" --dump "$TMP/nat" --threads 1 2>"$TMP/err" ||
    { fail "forward: $(cat "$TMP/err")"; finish; }
"$B" forward --engine llama.cpp --llama-flash-attn off --llama-kv-type f32 --model "$M" --tokens "$TOKS" \
    --dump "$TMP/ref" --threads 1 2>"$TMP/err" || { fail "forward --engine llama.cpp: $(cat "$TMP/err")"; finish; }

cat >"$TMP/cmp.py" <<'PY'
import json, os, sys
import numpy as np
nat, ref = sys.argv[1], sys.argv[2]
meta = json.load(open(os.path.join(nat, "meta.json")))
def load(d, n):
    return np.fromfile(os.path.join(d, n + ".f32"), dtype=np.float32)
bad = 0
def check(cond, msg):
    global bad
    print(("ok: " if cond else "FAIL: ") + msg)
    bad += not cond
V = 50257
a, b = load(nat, "logits").reshape(-1, V), load(ref, "logits").reshape(-1, V)
check(a.shape == b.shape == (40, V), "logits of 40 positions (%s, %s)" % (a.shape, b.shape))
d = float(np.abs(a - b).max())
check(d <= 2e-3, "max abs logit difference %.3g <= 2e-3" % d)
same = int((a.argmax(1) == b.argmax(1)).sum())
check(same == 40, "top-1 equal on %d of 40 positions" % same)
for n in ["blk.0.ssm_z", "blk.0.ssm_beta", "blk.0.ssm_decay", "blk.0.ssm_conv", "blk.0.ssm_out",
          "blk.2.ssm_conv", "blk.2.ssm_out", "blk.1.attn_gate", "blk.1.attn_gated", "blk.3.attn_gated"]:
    if not os.path.exists(os.path.join(ref, n + ".f32")):
        check(False, "llama.cpp's dump has %s" % n); continue
    x, y = load(nat, n), load(ref, n)
    dd = float(np.abs(x - y).max()) if x.size == y.size else float("inf")
    check(dd <= 1e-4, "%s within 1e-4 of llama.cpp (%.3g)" % (n, dd))
# the states: shapes, and only in the recurrent layers
for l in (0, 2):
    s = load(nat, "blk.%d.ssm_state" % l)
    check(s.size == 4 * 16 * 16 and np.isfinite(s).all() and np.abs(s).max() > 0,
          "blk.%d.ssm_state: 64 rows of 16, finite, non-zero" % l)
    c = load(nat, "blk.%d.ssm_conv_state" % l)
    qkv = load(nat, "blk.%d.ssm_qkv" % l).reshape(40, -1)
    check(c.size == 3 * 128 and np.array_equal(c.reshape(3, 128), qkv[-3:]),
          "blk.%d.ssm_conv_state: the last 3 rows of ssm_qkv" % l)
for l in (1, 3):
    check(not any(os.path.exists(os.path.join(nat, "blk.%d.%s.f32" % (l, o))) for o in ("ssm_state", "ssm_conv", "ssm_qkv")),
          "no ssm_* tensors in attention layer %d" % l)
check(not os.path.exists(os.path.join(nat, "blk.0.attn_q.f32")), "no attn_q in recurrent layer 0")
sys.exit(1 if bad else 0)
PY
$PY "$TMP/cmp.py" "$TMP/nat" "$TMP/ref" >"$TMP/cmp.out" 2>&1; rc=$?
cat "$TMP/cmp.out"
[ $rc -eq 0 ] || fail "forward against llama.cpp (above)"

# greedy continuations, llama.cpp with its own defaults
greedy_equal_llamacpp "$M"

# $A (routed experts and the sigmoid-gated shared expert) and
# qwen3next (the same FFN, NEOX rope, the fused ssm_ba projection, value
# heads grouped by key head): logits and top-1 against llama.cpp, greedy equal
for A in qwen35moe qwen3next; do
$PY "$TOOL" "$TMP/$A.gguf" --arch $A --mtp 0 --seed 5 >"$TMP/tool.log" 2>&1 || fail "make-tiny-hybrid.py --arch $A: $(tail -1 "$TMP/tool.log")"
if [ -f "$TMP/$A.gguf" ]; then
    "$B" forward --model "$TMP/$A.gguf" --tokens "$TOKS" --dump "$TMP/$A-nat" --threads 1 2>"$TMP/err" || fail "forward $A: $(cat "$TMP/err")"
    "$B" forward --engine llama.cpp --llama-flash-attn off --llama-kv-type f32 --model "$TMP/$A.gguf" --tokens "$TOKS" \
        --dump "$TMP/$A-ref" --threads 1 2>"$TMP/err" || fail "forward --engine llama.cpp $A: $(cat "$TMP/err")"
    $PY - "$TMP/$A-nat/logits.f32" "$TMP/$A-ref/logits.f32" "$A" <<'PY' && ok "$A logits against llama.cpp" || fail "$A logits against llama.cpp"
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, 50257)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, 50257)
d = float(np.abs(a - b).max()); same = int((a.argmax(1) == b.argmax(1)).sum())
print(sys.argv[3] + ": max abs %.3g, top-1 %d of %d" % (d, same, a.shape[0]))
sys.exit(0 if a.shape == b.shape == (40, 50257) and d <= 2e-3 and same == 40 else 1)
PY
    "$B" run --model "$TMP/$A.gguf" --prompt "Once upon a time" -n 24 --threads 1 --json >"$TMP/a.json" 2>"$TMP/err" || fail "run $A: $(cat "$TMP/err")"
    "$B" run --engine llama.cpp --model "$TMP/$A.gguf" --prompt "Once upon a time" -n 24 --threads 1 --json >"$TMP/b.json" 2>"$TMP/err" ||
        fail "run --engine llama.cpp $A: $(cat "$TMP/err")"
    x=$(json_ids "$TMP/a.json"); y=$(json_ids "$TMP/b.json")
    [ -n "$x" ] && [ "$x" = "$y" ] && ok "$A greedy: equal to llama.cpp's" || fail "$A greedy: bangtrace [$x] llama.cpp [$y]"
    # a clean llama.cpp trace replays on the native engine with no departure:
    # its MoE layers' ffn_out (routed experts + gated shared expert) is
    # blk.L.ffn_moe_out, compared; the shared expert's ffn_gate/up/swiglu-L
    # (64 wide, llama.cpp's names, op label ffn_gate...) are not taken for
    # the routed experts' ffn_gate/up/act (32 wide, one expert's rows)
    "$B" run --engine llama.cpp --model "$TMP/$A.gguf" --prompt "Once upon a time" -n 8 --threads 1 \
        --trace "$TMP/$A.db" >/dev/null 2>"$TMP/err" || fail "run --engine llama.cpp --trace $A: $(cat "$TMP/err")"
    [ "$(sqlite3 "$TMP/$A.db" "SELECT op || ':' || width FROM tensors WHERE model = 'target' AND name = 'ffn_gate-0'")" = ffn_gate:64 ] &&
        ok "$A llama.cpp trace: the shared expert's gate keeps llama.cpp's name (ffn_gate-0, 64 wide)" ||
        fail "$A llama.cpp trace: $(sqlite3 "$TMP/$A.db" "SELECT group_concat(name || ':' || op || ':' || width, ' ') FROM tensors WHERE name LIKE 'ffn%-0'")"
    expect_exit 0 "$A: bisect --reference on a clean llama.cpp trace" "$B" bisect "$TMP/$A.db" --reference
    # the table's moe column has values in the layers, its down column none
    # (an MoE layer's ffn_down is one routed expert's: llama.cpp has no such tensor)
    grep -q "^verdict: llama.cpp stays within" "$TMP/out" &&
        awk '/^ +layer /  { for (i = 1; i <= NF; i++) { if ($i == "moe") m = i; if ($i == "down") d = i }; next }
             m && $1 ~ /^[0-9]+$/ { if ($m != ".") n++; if (d && $d != ".") bad++ }
             END { exit !(n > 0 && !bad) }' "$TMP/out" &&
        grep -Eq "^teacher-forced top-1 agreement: ([0-9]+) of \1 steps" "$TMP/out" &&
        ok "$A: no departure, ffn_moe_out compared ($(grep '^verdict' "$TMP/out" | cut -c1-90))" ||
        fail "$A bisect --reference: $(head -c 1500 "$TMP/out") $(cat "$TMP/err")"
fi
done

# an MTP block after the trunk: loaded, not computed, same logits
$PY "$TOOL" "$TMP/mtp.gguf" --mtp 1 --seed 3 >"$TMP/tool.log" 2>&1 || fail "make-tiny-hybrid.py --mtp 1: $(tail -1 "$TMP/tool.log")"
if [ -f "$TMP/mtp.gguf" ]; then
    "$B" forward --model "$TMP/mtp.gguf" --tokens "$TOKS" --dump "$TMP/mtp" --threads 1 2>"$TMP/err" || fail "forward with an MTP block: $(cat "$TMP/err")"
    cmp -s "$TMP/mtp/logits.f32" "$TMP/nat/logits.f32" && ok "an MTP block leaves the trunk's logits alone" ||
        fail "the MTP file's logits differ from the trunk-only file's"
fi

# a NaN put into a recurrent state is localized by bisect, and carried on
"$B" run --model "$M" --prompt "Once upon a time" -n 8 --threads 1 --taps all --trace "$TMP/inj.bttrace" \
    --inject 'nan@op=ssm_state,layer=2,step=3' >/dev/null 2>"$TMP/err" || fail "run --inject ssm_state: $(cat "$TMP/err")"
"$B" bisect "$TMP/inj.bttrace" >"$TMP/bis" 2>&1
grep -q "first non-finite: step 3, layer 2, op ssm_state (blk.2.ssm_state), value head 0, row 0, column 0" "$TMP/bis" &&
    ok "bisect names step 3, layer 2, ssm_state" || fail "bisect after a NaN in blk.2.ssm_state: $(head -3 "$TMP/bis")"
grep -E -q "^ +4 +2 +blk.2.ssm_core +recur" "$TMP/bis" && ok "the state carries the NaN to the next step's ssm_core" ||
    fail "no recurrence into step 4's blk.2.ssm_core: $(cat "$TMP/bis")"

# bad input: a hyperparameter missing is one line, exit 2; without the
# file's full_attention_interval llama.cpp's default (4) says layers 0-2 are
# recurrent, and the file's attention tensors in layer 1 do not fit: refused
GP=$HOME/.cache/bangtrace/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
if [ -d "$GP" ]; then
    $PY "$BT_SRCDIR/tests/gguf_drop_key.py" "$M" "$TMP/nokernel.gguf" qwen35.ssm.conv_kernel "$GP" >"$TMP/drop.log" 2>&1 &&
    $PY "$BT_SRCDIR/tests/gguf_drop_key.py" "$M" "$TMP/nointerval.gguf" qwen35.full_attention_interval "$GP" >>"$TMP/drop.log" 2>&1 ||
        fail "gguf_drop_key.py: $(tail -1 "$TMP/drop.log")"
    expect_exit 2 "a qwen35 GGUF without ssm.conv_kernel" "$B" forward --model "$TMP/nokernel.gguf" --tokens "1 2" --dump "$TMP/bd1"
    grep -q "qwen35.ssm.conv_kernel is missing" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && [ ! -e "$TMP/bd1/meta.json" ] &&
        ok "names the key, one line, nothing written" || fail "missing conv_kernel: $(cat "$TMP/err")"
    expect_exit 2 "a qwen35 GGUF without full_attention_interval" "$B" forward --model "$TMP/nointerval.gguf" --tokens "1 2" --dump "$TMP/bd2"
    grep -q "blk.1" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "layer kinds come from the file: $(cat "$TMP/err")" ||
        fail "missing interval: $(cat "$TMP/err")"
fi

# a backend without the gated delta net ops refuses, naming the op
cuda_refuses "$M" "gated delta net op"
finish
