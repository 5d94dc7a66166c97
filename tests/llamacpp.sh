#!/bin/sh
# llamacpp.sh - `run --engine llama.cpp` (src/engines/llamacpp/, doc/llama-cpp.md)
# on stories260K (converted to GGUF by tools/llama2c-to-gguf.py) and SmolLM2
# Q4_1: a clean llama.cpp trace has no events; injected NaN/Inf land at the
# same (step, layer, op, index) as on the native engine; the cross-engine
# bisect names the first op where llama.cpp departs, the same verdict twice;
# the trace opens in report and browse --dump; bad input is one line, exit 2.
# SKIPs when bangtrace was built without llama.cpp (tools/llama-cpp needs
# PyPI for the pinned sdist).
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
if ! built_with LLAMA_CPP; then
    expect_exit 2 "without llama.cpp: --engine llama.cpp is one line, exit 2" \
        "$B" run --engine llama.cpp --model "$SMOL" --prompt hi -n 1
    grep -q "built without llama.cpp" "$TMP/err" || fail "the error says how to get llama.cpp: $(cat "$TMP/err")"
    [ "$failures" -eq 0 ] || finish
    skip "bangtrace was built without llama.cpp (tools/llama-cpp could not fetch or build the pinned sdist: no PyPI access?)"
fi
need_shared
py=${PYTHON3:-python3}
"$py" -c "import gguf, numpy" 2>/dev/null || skip "python3 with gguf and numpy is needed to convert stories260K to GGUF"
S=$TMP/stories260K.gguf
"$py" "$BT_SRCDIR/tools/llama2c-to-gguf.py" "$STORIES" "$TOK512" "$S" || { fail "llama2c-to-gguf"; finish; }

# 1. a clean run on both engines: the same greedy text, no events
expect_exit 0 "stories260K clean run on llama.cpp, traced" \
    "$B" run --engine llama.cpp --model "$S" --prompt "Once upon a time" -n 12 --trace "$TMP/clean.db" --json
cp "$TMP/out" "$TMP/clean.json"
expect_exit 0 "the same run on the native engine" \
    "$B" run --model "$S" --prompt "Once upon a time" -n 12 --trace "$TMP/native.db" --json
"$py" - "$TMP/clean.json" "$TMP/out" <<'PY' || fail "llama.cpp and native greedy ids differ on stories260K (f32)"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["prompt_ids"] == b["prompt_ids"], (a["prompt_ids"], b["prompt_ids"])
assert a["completion_ids"] == b["completion_ids"], (a["completion_ids"], b["completion_ids"])
PY
# 1b. llama.cpp's CPU threads live for the whole run (a persistent pool, as
# llama-cli and llama-server attach one), not one pool per graph split: with
# --taps all every tapped node ends a split, and a pool made per split
# created and joined thousands of threads for 4 tokens (2 threads ran ~100x
# slower than 1). Counted as the clone calls the process makes.
if command -v strace >/dev/null 2>&1; then
    strace -f -qq -e trace=clone,clone3 -o "$TMP/clones" \
        "$B" run --engine llama.cpp --model "$S" --prompt "Once upon a time" -n 4 --threads 2 \
        --trace "$TMP/pool.db" >/dev/null 2>"$TMP/err"
    n=$(grep -c clone "$TMP/clones")
    [ "$n" -ge 1 ] && [ "$n" -le 2 ] && ok "llama.cpp with 2 threads and --taps all starts its worker once ($n thread(s))" ||
        fail "llama.cpp with 2 threads and --taps all created $n threads for 4 tokens (a pool per graph split?)"
else
    echo "note: strace not installed: the thread-pool check did not run"
fi
# the same greedy request on the llama2.c checkpoint (native) and on its GGUF
# (llama.cpp): this prompt ends its story with BOS, where llama2.c stops, so
# both report the same ids (the stopping id left out), text and finish reason
# (flash attention off: over 200 tokens llama.cpp's default fused attention
# departs from the exact engine's text; this checks the stop, not numerics)
expect_exit 0 "llama.cpp: a request that ends at llama2.c's stop id" \
    "$B" run --engine llama.cpp --model "$S" --prompt "There was a big red ball" -n 220 --threads 1 --json --llama-flash-attn off
cp "$TMP/out" "$TMP/stop-llama.json"
expect_exit 0 "native, llama2.c checkpoint: the same request" \
    "$B" run --model "$STORIES" --tokenizer "$TOK512" --prompt "There was a big red ball" -n 220 --threads 1 --json
"$py" - "$TMP/stop-llama.json" "$TMP/out" <<'PY' && ok "llama.cpp and native stop alike: same ids, text, finish reason" || fail "llama.cpp and native end the stopped request differently"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("completion_ids", "text", "finish_reason"):
    assert a[k] == b[k], (k, a[k][-5:] if k != "finish_reason" else a[k], b[k][-5:] if k != "finish_reason" else b[k])
assert b["finish_reason"] == "stop" and 1 not in b["completion_ids"], b["finish_reason"]
PY
expect_exit 0 "a clean llama.cpp trace: bisect finds nothing" "$B" bisect "$TMP/clean.db" --json
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['first_nonfinite'] is None and d['events']['total'] == 0, d" "$TMP/out" ||
    fail "clean llama.cpp trace has events: $(head -c 300 "$TMP/out")"
expect_exit 0 "report on a llama.cpp trace" "$B" report "$TMP/clean.db"
grep -q "| engine | llama.cpp |" "$TMP/out" || fail "report names the engine"
grep -q "llama.cpp version" "$TMP/out" || fail "report names llama.cpp's version"
grep -q "| llama.cpp (llama-cpp-python sdist) | $(grep -v '^#' "$BT_SRCDIR/tools/llama-cpp.sha256" | awk '{print $2; exit}') |" "$TMP/out" ||
    fail "report names the pinned llama.cpp version: $(grep llama "$TMP/out")"
grep -q "| llama.cpp build | .*GGML_NATIVE" "$TMP/out" || fail "report gives llama.cpp's build flags"
expect_exit 0 "browse --dump run on a llama.cpp trace" "$B" browse "$TMP/clean.db" --dump run
expect_exit 0 "browse --dump tokens on a llama.cpp trace" "$B" browse "$TMP/clean.db" --dump tokens
# llama.cpp's own tensors are recorded under their names (llama.cpp's
# default path: flash attention, so no kq_soft_max; tests/llama_defaults.sh
# has the path without it)
"$py" -c "
import sqlite3,sys
names={r[0] for r in sqlite3.connect(sys.argv[1]).execute('select name from tensors')}
assert 'blk.2.ffn_down' in names and 'blk.2.attn_ctx' in names and 'Qcur-2.mul_mat' in names and 'logits' in names, sorted(names)[:40]
assert not any(n.startswith('kq_soft_max') for n in names), sorted(names)[:40]" "$TMP/clean.db" ||
    fail "mapped and unmapped tensor names in the llama.cpp trace"
# diff pairs the two engines' tensors by name
"$B" diff "$TMP/native.db" "$TMP/clean.db" >"$TMP/out" 2>"$TMP/err"
[ $? -le 1 ] || fail "diff native vs llama.cpp: $(cat "$TMP/err")"

# 2. injected faults localize where the native engine puts them
for spec in "nan@layer=2,op=ffn_gate,step=3,index=7" "inf@layer=1,op=attn_q,step=0,index=5" "-inf@layer=4,op=ffn_down,step=5,index=2"; do
    for eng in native llama.cpp; do
        "$B" run --engine "$eng" --model "$S" --prompt "Once upon a time" -n 8 --inject "$spec" \
            --trace "$TMP/inj-$eng.db" >/dev/null 2>"$TMP/err" || [ $? -eq 1 ] || fail "$eng run with $spec: $(cat "$TMP/err")"
        "$B" bisect "$TMP/inj-$eng.db" --json >"$TMP/b-$eng.json" 2>/dev/null
    done
    "$py" - "$TMP/b-native.json" "$TMP/b-llama.cpp.json" <<'PY' && ok "$spec: same (step, layer, op, index) on both engines" || fail "$spec localizes differently"
import json, sys
a, b = (json.load(open(p))["first_nonfinite"] for p in sys.argv[1:3])
key = lambda d: (d["step"], d["pos"], d["layer"], d["op"], d["first_bad_index"])
assert a and b and key(a) == key(b), (a, b)
PY
    rm -f "$TMP/inj-native.db" "$TMP/inj-llama.cpp.db"
done
"$B" run --engine llama.cpp --model "$S" --prompt "Once upon a time" -n 4 --inject "nan@layer=1,op=ffn_up,step=1" --trace "$TMP/k.db" >/dev/null 2>&1
"$B" report "$TMP/k.db" 2>/dev/null | grep -q "MUL_MAT f32 on CPU \[llama.cpp\]" ||
    "$B" report "$TMP/k.db" 2>/dev/null | grep -q "\[llama.cpp\]" || fail "first_nonfinite names llama.cpp's kernel"

# 3. bad input: one line, exit 2
expect_exit 2 "a llama.cpp tensor name in --inject is refused" \
    "$B" run --engine llama.cpp --model "$S" --prompt hi -n 1 --inject "nan@layer=1,op=Qcur"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "one line: $(cat "$TMP/err")"
expect_exit 2 "kvcorrupt cannot apply to llama.cpp" \
    "$B" run --engine llama.cpp --model "$S" --prompt hi -n 2 --inject "kvcorrupt@layer=1,pos=0"
expect_exit 2 "speculative decoding is refused" \
    "$B" run --engine llama.cpp --model "$S" --prompt hi -n 2 --spec-k 2 --draft-ngram 2
# one --device flag: llama.cpp's backend with --engine llama.cpp, the native
# backend otherwise (where cuda:N is valid); llama.cpp has no cuda:N
expect_exit 0 "--device cpu without --engine: the native engine's backend" "$B" run --device cpu --model "$S" --prompt hi -n 1
expect_exit 2 "--device cuda:0 with --engine llama.cpp" "$B" run --engine llama.cpp --device cuda:0 --model "$S" --prompt hi -n 1
expect_exit 2 "--numerics with --engine llama.cpp" "$B" run --engine llama.cpp --numerics f16 --model "$S" --prompt hi -n 1
"$B" run --engine llama.cpp --device cuda --model "$S" --prompt hi -n 1 >/dev/null 2>"$TMP/err"
rc=$?
{ [ $rc -eq 0 ] || { [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ]; }; } && ok "--device cuda: runs, or one line and exit 2 on a CPU build" ||
    fail "--device cuda: exit $rc, $(cat "$TMP/err")"
expect_exit 2 "a llama2.c checkpoint is not a GGUF" \
    "$B" run --engine llama.cpp --model "$STORIES" --tokenizer "$TOK512" --prompt hi -n 1
# a GGUF bangtrace reads but llama.cpp refuses: without the rms epsilon
# key (bangtrace defaults it to 1e-5; llama.cpp requires it)
"$py" - "$S" "$TMP/noeps.gguf" <<'PY' || fail "making the llama.cpp-only bad GGUF"
import sys
from gguf import GGUFReader, GGUFWriter
r = GGUFReader(sys.argv[1]); w = GGUFWriter(sys.argv[2], "llama")
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name in ("general.architecture", "llama.attention.layer_norm_rms_epsilon"):
        continue
    w.add_key_value(name, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
for t in r.tensors:
    w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
expect_exit 0 "bangtrace's own engine runs the GGUF without the epsilon key" "$B" run --model "$TMP/noeps.gguf" --prompt hi -n 1
"$B" run --engine llama.cpp --model "$TMP/noeps.gguf" --prompt hi -n 1 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "a model that fails to load: one line, exit 2" ||
    fail "model load failure: exit $rc, $(cat "$TMP/err")"

# a version mismatch: a llama.cpp build directory of another version is
# refused by bench --against (its llama-bench) and by configure (the adapter)
ver=$(grep -v '^#' "$BT_SRCDIR/tools/llama-cpp.sha256" | awk '{print $2; exit}')
mkdir -p "$TMP/lc-old/include" "$TMP/lc-old/lib" "$TMP/lc-old/bin" "$TMP/lc-nobench"
printf 'version=0.0.1\n' >"$TMP/lc-old/build-info.txt"
: >"$TMP/lc-old/include/llama.h"; : >"$TMP/lc-old/lib/libllama.a"
printf 'version=%s\n' "$ver" >"$TMP/lc-nobench/build-info.txt"
mkdir -p "$TMP/lc-nobench/include" "$TMP/lc-nobench/lib"
: >"$TMP/lc-nobench/include/llama.h"; : >"$TMP/lc-nobench/lib/libllama.a"    # a CPU build, to configure
expect_exit 2 "bench --against llama.cpp with another llama.cpp version" \
    env BT_LLAMA_CPP_DIR="$TMP/lc-old" "$B" bench --against llama.cpp --model "$S" -p 4 -n 2 --reps 1
grep -q "version mismatch" "$TMP/err" && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok "one line naming the version mismatch" ||
    fail "version mismatch message: $(cat "$TMP/err")"
expect_exit 2 "bench --against llama.cpp without llama-bench in the build" \
    env BT_LLAMA_CPP_DIR="$TMP/lc-nobench" "$B" bench --against llama.cpp --model "$S" -p 4 -n 2 --reps 1
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "llama-bench" "$TMP/err" || fail "missing llama-bench: $(cat "$TMP/err")"
expect_exit 2 "bench --against names only llama.cpp" "$B" bench --against vllm --model "$S"
expect_exit 2 "bench --against llama.cpp refuses --numerics" "$B" bench --against llama.cpp --numerics f16 --model "$S"
if [ -x "$BT_SRCDIR/configure" ]; then
    mkdir "$TMP/cfg"
    (cd "$TMP/cfg" && "$BT_SRCDIR/configure" --with-cuda=no --with-llama-cpp="$TMP/lc-old" >/dev/null 2>"$TMP/err")
    rc=$?
    [ $rc -eq 2 ] && grep -q "version mismatch" "$TMP/err" && ok "configure refuses another llama.cpp version (exit 2)" ||
        fail "configure with llama.cpp 0.0.1: exit $rc, $(tail -n 2 "$TMP/err")"
    (cd "$TMP/cfg" && "$BT_SRCDIR/configure" --with-cuda=no --with-llama-cpp="$TMP/lc-nobench" --with-llama-cpp-cuda >/dev/null 2>"$TMP/err")
    rc=$?
    [ $rc -eq 2 ] && grep -q "libggml-cuda.a" "$TMP/err" && ok "configure --with-llama-cpp-cuda refuses a CPU build (exit 2)" ||
        fail "configure --with-llama-cpp-cuda on a CPU build: exit $rc, $(tail -n 2 "$TMP/err")"
fi

# bench --against llama.cpp: one run, both engines, taps off and on
expect_exit 0 "bench --against llama.cpp" \
    "$B" bench --against llama.cpp --model "$S" -p 16 -n 8 --reps 1 --threads 1 --json
"$py" - "$TMP/out" "$ver" <<'PY' && ok "bench --against reports llama-bench, the engine taps off/on and the ratios" || fail "bench --against JSON: $(head -c 600 "$TMP/out")"
import json, sys
d = json.load(open(sys.argv[1])); a = d["against"]
assert a["engine"] == "llama.cpp" and a["version"] == sys.argv[2], a
assert d["taps"] == "all", d["taps"]          # taps on by default with --against
for k in ("llama_bench_prompt_tokens_per_s", "llama_bench_decode_tokens_per_s", "engine_prompt_tokens_per_s",
          "engine_decode_tokens_per_s", "engine_decode_tokens_per_s_taps", "ratio_prompt", "ratio_decode"):
    assert k in a, k
# llama-bench really ran: its rates are numbers (its own timing, never too short)
assert isinstance(a["llama_bench_decode_tokens_per_s"], float) and a["llama_bench_decode_tokens_per_s"] > 0, a
PY

# 4. SmolLM2 Q4_1: the cross-engine bisect names the first departing op, twice the same
if [ -f "$SMOL" ]; then
    expect_exit 0 "SmolLM2 clean run on llama.cpp" \
        "$B" run --engine llama.cpp --model "$SMOL" --prompt "The capital of France is" -n 3 --trace "$TMP/smol.db"
    expect_exit 0 "a clean SmolLM2 llama.cpp trace has no non-finite tensor" "$B" bisect "$TMP/smol.db"
    for i in 1 2; do
        "$B" bisect "$TMP/smol.db" --reference >"$TMP/ref$i.txt" 2>"$TMP/err"
        rc=$?
        [ $rc -le 1 ] || fail "cross-engine bisect: exit $rc, $(cat "$TMP/err")"
    done
    grep -q "^verdict: llama.cpp first departs at " "$TMP/ref1.txt" || fail "the verdict names where llama.cpp departs: $(cat "$TMP/ref1.txt")"
    grep -q "^teacher-forced top-1 agreement: " "$TMP/ref1.txt" || fail "top-1 agreement is reported"
    [ "$(grep '^verdict' "$TMP/ref1.txt")" = "$(grep '^verdict' "$TMP/ref2.txt")" ] && ok "the verdict is stable across two runs" ||
        fail "verdicts differ: $(grep '^verdict' "$TMP/ref1.txt") / $(grep '^verdict' "$TMP/ref2.txt")"
    grep '^verdict' "$TMP/ref1.txt"
else
    echo "note: SmolLM2 not cached at $SMOL: its cross-engine bisect was not run"
fi
finish
