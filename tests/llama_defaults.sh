#!/usr/bin/env bash
# llama_defaults.sh - `run --engine llama.cpp` takes llama.cpp's own default
# path (flash attention auto, the extra CPU buffer types on: repacked
# weights; an f16 cache): on SmolLM2 in F32, Q8_0, Q4_0, Q4_K_M and Q6_K
# (made from the cached Q4_1 with the pinned build's llama-quantize), the
# greedy ids llama.cpp itself produces with its defaults (tools/llama-greedy.c
# built against the pinned llama.cpp: its own tokenizer, its default model
# and context parameters, no bangtrace code) are reproduced exactly, prompt
# ids and completion ids. Also: the path is recorded (trace meta, run banner,
# report), the fused attention is tapped as attn_ctx and compared by
# bisect --reference, --llama-flash-attn off brings kq_soft_max back, and bad
# --llama-* values are one line, exit 2. doc/llama-cpp.md.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
need_smol
L=$(sed -n 's/^#define BT_LLAMA_CPP_DIR "\(.*\)"$/\1/p' "${BT_BUILDDIR:-.}/config.h")
[ -x "$L/bin/llama-quantize" ] && [ -f "$L/lib/libllama.a" ] || skip "no llama-quantize and libllama.a in the llama.cpp build $L"

# bad input first (cheap)
expect_exit 2 "--llama-flash-attn maybe is refused" "$B" run --engine llama.cpp --model "$SMOL" --prompt x -n 1 --llama-flash-attn maybe
grep -q -- "--llama-flash-attn 'maybe'" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "names the flag: $(cat "$TMP/err")"
expect_exit 2 "--llama-opt with an unknown key" "$B" run --engine llama.cpp --model "$SMOL" --prompt x -n 1 --llama-opt n_ubatch=4
grep -q "unknown key 'n_ubatch'" "$TMP/err" || fail "names the key: $(cat "$TMP/err")"
expect_exit 2 "--llama-opt without '='" "$B" run --engine llama.cpp --model "$SMOL" --prompt x -n 1 --llama-opt repack
expect_exit 2 "--llama-kv-type q4" "$B" run --engine llama.cpp --model "$SMOL" --prompt x -n 1 --llama-kv-type q4
expect_exit 2 "--llama-repack without --engine llama.cpp" "$B" run --model "$SMOL" --prompt x -n 1 --llama-repack off
# forward and bench --against take the same flags (session.h bt_llama_flag)
expect_exit 2 "forward --llama-kv-type q4" "$B" forward --engine llama.cpp --model "$SMOL" --tokens "1 2" --dump "$TMP/fw" --llama-kv-type q4
grep -q -- "--llama-kv-type 'q4'" "$TMP/err" || fail "forward names the flag: $(cat "$TMP/err")"
expect_exit 2 "forward --llama-repack without --engine llama.cpp" "$B" forward --model "$SMOL" --tokens "1 2" --dump "$TMP/fw" --llama-repack off
expect_exit 2 "bench --llama-opt without --against llama.cpp" "$B" bench --model "$SMOL" --llama-opt amx=off
expect_exit 2 "bench --against llama.cpp --llama-opt amx=maybe" "$B" bench --against llama.cpp --model "$SMOL" --llama-opt amx=maybe
BT_LLAMA_EXTRA_BUFTS=2 expect_exit 2 "BT_LLAMA_EXTRA_BUFTS=2 is refused" "$B" run --engine llama.cpp --model "$SMOL" --prompt x -n 1
grep -q "BT_LLAMA_EXTRA_BUFTS='2'" "$TMP/err" || fail "names the variable: $(cat "$TMP/err")"

# llama.cpp's own greedy decoding, built against the pinned build
${CC:-cc} -O2 -I"$L/include" "$BT_SRCDIR/tools/llama-greedy.c" -o "$TMP/llama-greedy" -L"$L/lib" \
    -Wl,--start-group -lllama -lggml -lggml-cpu -lggml-base -Wl,--end-group -lstdc++ -lpthread -lm ||
    { fail "building tools/llama-greedy.c against $L"; finish; }
printf '%s\n' "The capital of France is" "Once upon a time" "Water boils at" "My favourite food is" >"$TMP/prompts"
N=24
"$L/bin/llama-quantize" --allow-requantize "$SMOL" "$TMP/F32.gguf" F32 2 >"$TMP/q.log" 2>&1 || { fail "llama-quantize F32: $(tail -1 "$TMP/q.log")"; finish; }
for t in F32 Q8_0 Q4_0 Q4_K_M Q6_K; do
    m=$TMP/$t.gguf
    if [ ! -f "$m" ]; then
        "$L/bin/llama-quantize" "$TMP/F32.gguf" "$m" "$t" 2 >"$TMP/q.log" 2>&1 || { fail "llama-quantize $t: $(tail -1 "$TMP/q.log")"; continue; }
    fi
    "$TMP/llama-greedy" --text "$m" $N auto f16 1 <"$TMP/prompts" >"$TMP/ref" 2>"$TMP/lg.err" ||
        { fail "llama-greedy on $t: $(tail -1 "$TMP/lg.err")"; continue; }
    [ "$(grep -c . "$TMP/ref")" -eq 4 ] || { fail "llama-greedy on $t printed $(grep -c . "$TMP/ref") lines"; continue; }
    k=0
    while IFS= read -r p && IFS= read -r ref <&3; do
        "$B" run --engine llama.cpp --model "$m" --prompt "$p" -n $N --threads 1 --json >"$TMP/o.json" 2>"$TMP/err" ||
            { fail "$t '$p': run --engine llama.cpp: $(cat "$TMP/err")"; continue; }
        got=$(${PYTHON3:-python3} -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(" ".join(map(str, d["prompt_ids"])) + "\t" + " ".join(map(str, d["completion_ids"])))' "$TMP/o.json")
        [ "$got" = "$ref" ] && k=$((k + 1)) || fail "$t '$p': llama.cpp's own ids [$ref], run --engine llama.cpp [$got]"
    done <"$TMP/prompts" 3<"$TMP/ref"
    echo "$t: run --engine llama.cpp reproduces $k of 4 of llama.cpp's own greedy continuations"
    [ "$t" = F32 ] || rm -f "$m"
done

# the path is recorded: meta, banner, report; the fused attention is tapped
m=$TMP/Q4_0.gguf
"$L/bin/llama-quantize" "$TMP/F32.gguf" "$m" Q4_0 2 >/dev/null 2>&1
rm -f "$TMP/F32.gguf"
expect_exit 0 "Q4_0 traced on llama.cpp's default path" \
    "$B" run --engine llama.cpp --model "$m" --prompt "The capital of France is" -n 4 --threads 1 --trace "$TMP/def.db"
grep -q "^bangtrace: llama.cpp path: flash attention on (auto: FLASH_ATTN_EXT); repack on: .* q4_0 in CPU_REPACK" "$TMP/err" &&
    ok "the run banner names the path" || fail "banner: $(grep 'llama.cpp path' "$TMP/err")"
${PYTHON3:-python3} - "$TMP/def.db" <<'PY' && ok "meta has the settings and the path; attn_ctx comes from FLASH_ATTN_EXT with values; no kq_soft_max" || fail "default-path trace"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
meta = dict(c.execute("select key, value from meta"))
assert meta["llama_cpp_settings"] == "flash_attn=auto repack=on kv=f16 amx=auto", meta["llama_cpp_settings"]
assert "FLASH_ATTN_EXT" in meta["llama_cpp_path"] and "CPU_REPACK" in meta["llama_cpp_path"], meta["llama_cpp_path"]
names = {r[0] for r in c.execute("select name from tensors")}
assert not any(n.startswith("kq_soft_max") for n in names), sorted(names)[:20]
rows = list(c.execute("select step, min, max from v_taps where op = 'attn_ctx' and layer = 2"))
assert rows and all(r[1] is not None and r[2] is not None for r in rows), rows
PY
expect_exit 0 "report on it" "$B" report "$TMP/def.db"
grep -q "| llama.cpp settings | flash_attn=auto repack=on kv=f16 amx=auto |" "$TMP/out" && grep -q "| llama.cpp path | flash attention on" "$TMP/out" &&
    ok "report prints the llama.cpp path" || fail "report: $(grep 'llama.cpp' "$TMP/out")"
"$B" bisect "$TMP/def.db" --reference >"$TMP/out" 2>"$TMP/err"
[ $? -le 1 ] || fail "bisect --reference: $(cat "$TMP/err")"
${PYTHON3:-python3} - "$TMP/out" <<'PY' && ok "bisect --reference compares attn_ctx (the fused node) in every layer it reaches" || fail "attn_ctx not compared: $(sed -n '/^  layer/,/^verdict/p' "$TMP/out")"
import sys
lines = open(sys.argv[1]).read().splitlines()
h = next(i for i, l in enumerate(lines) if l.startswith("  layer"))
cols = lines[h].split()
ci = cols.index("ctx")
rows = [l.split() for l in lines[h + 1:] if l.strip() and l.split()[0].isdigit()]
full = rows[:-1] if len(rows) > 1 else rows
assert full and all(r[ci] != "." for r in full), rows
PY
grep -q "^verdict: " "$TMP/out" || fail "a verdict"
if grep -q "^verdict: llama.cpp first departs at blk.*attn_ctx" "$TMP/out"; then
    grep -q "FLASH_ATTN_EXT" "$TMP/out" || fail "the verdict at attn_ctx names FLASH_ATTN_EXT: $(grep verdict "$TMP/out")"
fi
if grep -q "^verdict: llama.cpp first departs at blk.*\(attn_[qkvo]\|attn_output\|ffn_\(gate\|up\|down\)\)" "$TMP/out"; then
    grep -q "repacked as q4_0_\|repacked (CPU_REPACK\|q6_K with" "$TMP/out" || fail "the verdict at a matmul names the repacked kernel: $(grep verdict "$TMP/out")"
fi
grep '^verdict' "$TMP/out"
# a fault in a repacked matmul names the repacked kernel
"$B" run --engine llama.cpp --model "$m" --prompt "The capital" -n 3 --threads 1 --inject "nan@layer=1,op=ffn_up,step=1" \
    --trace "$TMP/k.db" >/dev/null 2>&1
"$B" report "$TMP/k.db" >"$TMP/out" 2>&1
grep -q "computed by MUL_MAT q4_0 repacked as q4_0_8x8 (CPU_REPACK gemm/gemv, activations as q8_0) on CPU \[llama.cpp\]" "$TMP/out" ||
    grep -q "computed by MUL_MAT q4_0 repacked.* (CPU_REPACK gemm/gemv" "$TMP/out" &&
    ok "first_nonfinite in a repacked matmul names the CPU_REPACK kernel" ||
    fail "kernel of a repacked matmul: $(grep first_nonfinite "$TMP/out")"
# every deviation is a flag and shows: flash attention off, no repacking
expect_exit 0 "the same with --llama-flash-attn off --llama-repack off" \
    "$B" run --engine llama.cpp --model "$m" --prompt "The capital of France is" -n 4 --threads 1 --trace "$TMP/off.db" \
    --llama-flash-attn off --llama-repack off
${PYTHON3:-python3} - "$TMP/off.db" <<'PY' && ok "flash attention off: kq_soft_max is a tensor, the meta says off and no repacking" || fail "flags-off trace"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
meta = dict(c.execute("select key, value from meta"))
assert meta["llama_cpp_settings"] == "flash_attn=off repack=off kv=f16 amx=auto", meta["llama_cpp_settings"]
assert meta["llama_cpp_path"].startswith("flash attention off (off: kq, kq_soft_max); repack off: 0 of "), meta["llama_cpp_path"]
names = {r[0] for r in c.execute("select name from tensors")}
assert "kq_soft_max-2" in names, sorted(names)[:40]
PY
# the environment aliases still work, and a flag wins over them
BT_LLAMA_FLASH_ATTN=off BT_LLAMA_KV_TYPE=f32 expect_exit 0 "environment aliases" \
    "$B" run --engine llama.cpp --model "$m" --prompt hi -n 1 --threads 1 --trace "$TMP/env.db" --llama-opt type_v=f16
${PYTHON3:-python3} -c "
import sqlite3, sys
m = dict(sqlite3.connect(sys.argv[1]).execute('select key, value from meta'))
assert m['llama_cpp_settings'] == 'flash_attn=off repack=on type_k=f32 type_v=f16 amx=auto', m['llama_cpp_settings']
assert 'KV cache f32/f16' in m['llama_cpp_path'], m['llama_cpp_path']" "$TMP/env.db" && ok "env aliases fill what no flag gave" || fail "env aliases"
finish
