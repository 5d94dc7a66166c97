#!/usr/bin/env bash
# batch_engine.sh - the batched forward over a paged KV cache gives every
# sequence the bits it gets alone (tests/test_batch.c: six sequences,
# random interleaving, prefill and decode rows mixed, scattered blocks of 4
# positions), on every kind of model the engine runs: a llama2.c
# checkpoint, a tiny Llama GGUF, SmolLM2-135M Q4_1 (quantized matmuls,
# when cached), a qwen3moe (experts routed across sequences) and the hybrid
# qwen35 and qwen3next (each sequence in its own recurrent state slot).
. "${BT_SRCDIR:-.}/tests/lib.sh"
T=${BT_BUILDDIR:-.}/tests/test_batch
[ -x "$T" ] || skip "tests/test_batch is not built"
PY=${PYTHON3:-python3}
run_on() {
    "$T" "$@" >"$TMP/out" 2>&1 && ok "$(tail -1 "$TMP/out")" || fail "test_batch $*: $(grep FAIL "$TMP/out" | head -3) $(tail -1 "$TMP/out")"
}
run_on "$BT_SHARED/models/llama2c/stories260K.bin" 1
run_on "$BT_SHARED/models/gguf-tiny/llama-2-tiny-random.gguf" 2
Q=${BT_MODEL_CACHE:-$HOME/.cache/bangtrace/models}/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$Q" ]; then run_on "$Q" 3; else echo "SKIP part: $Q is not cached"; fi
if "$PY" -c "import gguf, numpy" 2>/dev/null; then
    "$PY" "$BT_SRCDIR/tests/oracle/make_random_gguf.py" "$TMP/moe.gguf" --arch qwen3moe --experts 8 --experts-used 2 --seed 5 \
        >"$TMP/tool.log" 2>&1 && run_on "$TMP/moe.gguf" 4 || fail "make_random_gguf.py: $(tail -1 "$TMP/tool.log")"
else
    echo "SKIP part: python3 with gguf and numpy makes the MoE model"
fi
if "$PY" -c "import numpy" 2>/dev/null; then
    for A in qwen35 qwen3next; do
        "$PY" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/$A.gguf" --arch $A --mtp 0 --seed 7 >"$TMP/tool.log" 2>&1 &&
            run_on "$TMP/$A.gguf" 5 || fail "make-tiny-hybrid.py --arch $A: $(tail -1 "$TMP/tool.log")"
    done
else
    echo "SKIP part: python3 has no numpy (the hybrid models)"
fi
finish
