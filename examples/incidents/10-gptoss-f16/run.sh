#!/usr/bin/env bash
# Case 10: gpt-oss in f16 (see README.md). A random 36-layer gpt-oss-shaped
# model (tools/make-tiny-gptoss.py) whose layers' output projections grow
# 1.2441x per layer (layer 34's 2.5x more): the residual climbs from about 50
# at layer 0 to 42,000 at layer 33 and past 65,504 at layer 34. ~5 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
"$PY" -c 'import numpy, gguf' 2>/dev/null || skip "python3 with numpy and gguf writes the model (./quickstart installs them)"
need_sqlite3
M=$OUT/gptoss-36.gguf
F16_MAX=65504
RUN=(--model "$M" --prompt "The weather today" -n 8 --threads "$THREADS")

heading "A random gpt-oss (36 layers, sinks, sliding window, 4 experts) whose residual grows with depth"
"$PY" "$top/tools/make-tiny-gptoss.py" "$M" --layers 36 --seed 3 --force >/dev/null ||
    { echo "FAIL: tools/make-tiny-gptoss.py"; exit 1; }
# layer l's attention output and expert down projections (weights and biases) x 1.2441^l, layer 34's x 2.5 more
"$PY" - "$M" <<'PY' || { echo "FAIL: could not scale the projections"; exit 1; }
import sys, gguf
r = gguf.GGUFReader(sys.argv[1], "r+")
t = {x.name: x for x in r.tensors}
for l in range(36):
    g = 1.2441 ** l * (2.5 if l == 34 else 1.0)
    for nm in ("attn_output.weight", "attn_output.bias", "ffn_down_exps.weight", "ffn_down_exps.bias"):
        t["blk.%d.%s" % (l, nm)].data[...] *= g
r.data.flush()
PY
say "gptoss-36.gguf: blk.L.attn_output and blk.L.ffn_down_exps x 1.2441^L (blk.34: x 2.5 more)"

heading "f32: finite everywhere, fluent (random) text"
fresh "$OUT/f32.db"
bt f32 run "${RUN[@]}" --trace "$OUT/f32.db"
say "output: $(cat "$OUT/f32.out")"
expect "the f32 run exits 0" eq "$rc" 0
bt f32b bisect "$OUT/f32.db"
sed -n '2,4p' "$OUT/f32b.out" | sed 's/^/   /'
expect "bisect finds no non-finite value and no degenerate output (exit 0)" eq "$rc" 0
expect "its headroom verdict predicts the f16 overflow at layer 34" \
    has "$OUT/f32b.out" '^headroom: would overflow in f16 at blk\.34\.ffn_down, step [0-9]*'
pred_step=$(sed -n 's/^headroom: would overflow in f16 at blk\.34\.ffn_down, step \([0-9]*\),.*/\1/p' "$OUT/f32b.out")

heading "The climb, layer by layer (sqlite3 on v_taps: the largest |value| of each layer)"
sqlite3 "$OUT/f32.db" "SELECT layer, cast(max(absmax) AS int) FROM v_taps WHERE layer IN (0, 8, 16, 24, 30, 32, 33, 34, 35)
    GROUP BY layer ORDER BY layer" | tr '|\n' '= ' | sed 's/^/   layer=absmax: /'; echo
first=$(sqlite3 "$OUT/f32.db" "SELECT cast(max(absmax) AS int) FROM v_taps WHERE layer = 0")
l33=$(sqlite3 "$OUT/f32.db" "SELECT cast(max(absmax) AS int) FROM v_taps WHERE layer = 33")
l34=$(sqlite3 "$OUT/f32.db" "SELECT cast(max(absmax) AS int) FROM v_taps WHERE layer = 34")
expect "layer 0 stays below 100 ($first), layer 33 below the f16 maximum ($l33), layer 34 past it ($l34)" \
    eval '[ "$first" -lt 100 ] && [ "$l33" -lt "$F16_MAX" ] && [ "$l34" -gt "$F16_MAX" ]'
expect "the layers climb: every layer from 8 on is larger than 8 layers before it" \
    eq "$(sqlite3 "$OUT/f32.db" "WITH m AS (SELECT layer, max(absmax) AS a FROM v_taps WHERE layer IS NOT NULL GROUP BY layer)
        SELECT count(*) FROM m x JOIN m y ON y.layer = x.layer - 8 WHERE x.a <= y.a")" 0

heading "The f16 replay (--numerics f16: activations, matmul inputs and KV cache in f16): the wall of !"
fresh "$OUT/f16.db"
bt f16 run "${RUN[@]}" --numerics f16 --trace "$OUT/f16.db"
say "output: $(cat "$OUT/f16.out")"
expect "the f16 answer is a wall of '!' (id 0 under the first-index argmax of NaN logits)" \
    eq "$(tr -d '\n' < "$OUT/f16.out")" '!!!!!!!!'
bt f16b bisect "$OUT/f16.db"
grep -E '^(first non|explanation)' "$OUT/f16b.out" | sed 's/^/   /'
expect "bisect exits 1" eq "$rc" 1
expect "the first non-finite value is blk.34.ffn_down (an expert's output), at the step the f32 verdict named (${pred_step:-?})" \
    has "$OUT/f16b.out" "^first non-finite: step ${pred_step:-x}, position [0-9]*, layer 34, op ffn_down "
finish
