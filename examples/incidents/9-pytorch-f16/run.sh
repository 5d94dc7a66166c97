#!/usr/bin/env bash
# Case 9: a PyTorch engine's f16 overflow, recorded through the Python
# package (see README.md). transformers runs a tiny random Qwen3 folder whose
# layer 1 MLP down-projection is 30000x larger, in f32 and in f16, recorded
# by bangtrace.torch; bisect reads the f32 run's headroom, names the f16
# run's first non-finite tensor, and bisect --reference names the op where
# transformers departs from the exact engine. Needs the torch environment of
# tools/torch-env (./quickstart check creates it); ~20 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
"$PY" -c 'import numpy, gguf' 2>/dev/null || skip "python3 with numpy and gguf writes the tiny model (./quickstart installs them)"
LIB=${BANGTRACE_LIB:-$(dirname "$BT")/libbangtrace.so}
[ -f "$LIB" ] || skip "libbangtrace.so is not built beside $BT"
env=$("$top/tools/torch-env" 2>"$OUT/torch-env.err") || skip "no PyTorch environment: $(tail -n 1 "$OUT/torch-env.err")"
TPY() { BANGTRACE_LIB=$LIB PYTHONPATH=$top/python "$env/bin/python" "$case_dir/record.py" "$@"; }
F16_MAX=65504

heading "A tiny random Qwen3 (Hugging Face folder), and a copy whose layer 1 down_proj is 30000x larger"
rm -rf "$OUT/qwen3" "$OUT/hot"          # this case's own copies from an earlier run
"$PY" - "$OUT" "$top" <<'PY' || { echo "FAIL: could not write the tiny folder"; exit 1; }
import os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "oracle"))
import make_random_gguf, test_hf_arch as tha
g = os.path.join(sys.argv[1], "qwen3.gguf")
hp = make_random_gguf.make(g, arch="qwen3", seed=5, untied=True)
tha.write_folder(g, os.path.join(sys.argv[1], "qwen3"), "Qwen3ForCausalLM", {"model_type": "qwen3"}, hp)
PY
TPY "$OUT/qwen3" - - "$OUT/hot" 30000 || { echo "FAIL: could not scale the weight"; exit 1; }
say "$OUT/hot: model.layers.1.mlp.down_proj.weight x 30000" | sed "s|$OUT/||"

heading "transformers in f32, recorded by bangtrace.torch: finite, but how close to f16's limit?"
fresh "$OUT/f32.db"
printf '$ python record.py hot f32.db float32\n'
f32_ids=$(TPY "$OUT/hot" "$OUT/f32.db" float32 2>"$OUT/f32.err") || { cat "$OUT/f32.err"; echo "FAIL: the f32 recording"; exit 1; }
say "generated: $f32_ids"
bt f32b bisect "$OUT/f32.db"
sed -n '2,3p' "$OUT/f32b.out" | sed 's/^/   /'
expect "bisect finds no non-finite value in the f32 run (exit 0)" eq "$rc" 0
expect "its headroom verdict predicts an f16 overflow at blk.1.ffn_down" \
    has "$OUT/f32b.out" '^headroom: would overflow in f16 at blk\.1\.ffn_down, step [0-9]*'
pred_step=$(sed -n 's/^headroom: would overflow in f16 at blk\.1\.ffn_down, step \([0-9]*\),.*/\1/p' "$OUT/f32b.out")
absmax=$(sqlite3 "$OUT/f32.db" "SELECT cast(max(absmax) AS int) FROM v_taps WHERE tensor = 'blk.1.ffn_down'" 2>/dev/null ||
         echo 0)
expect "blk.1.ffn_down's absmax ($absmax) is past the f16 maximum $F16_MAX" eval '[ "$absmax" -gt "$F16_MAX" ]'

heading "The same folder in f16: transformers says nothing, the text changes"
fresh "$OUT/f16.db"
printf '$ python record.py hot f16.db float16\n'
f16_ids=$(TPY "$OUT/hot" "$OUT/f16.db" float16 2>"$OUT/f16.err") || { cat "$OUT/f16.err"; echo "FAIL: the f16 recording"; exit 1; }
say "generated: $f16_ids"
bt f16b bisect "$OUT/f16.db"
grep -E '^(first non|explanation)' "$OUT/f16b.out" | sed 's/^/   /'
expect "bisect exits 1: the f16 run went non-finite" eq "$rc" 1
expect "the first non-finite value is blk.1.ffn_down (the scaled module), at the step the f32 verdict named (${pred_step:-?})" \
    has "$OUT/f16b.out" "^first non-finite: step ${pred_step:-x}, position [0-9]*, layer 1, op ffn_down "

heading "Where does transformers' f16 run leave the exact computation?"
bt ref bisect --reference "$OUT/f16.db"
grep -E '^verdict' "$OUT/ref.out" | sed 's/^/   /'
expect "bisect --reference: transformers first departs at blk.1.ffn_down, step ${pred_step:-?}" \
    has "$OUT/ref.out" "^verdict: transformers first departs at blk\.1\.ffn_down, step ${pred_step:-x} "
finish
