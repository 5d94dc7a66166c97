#!/bin/sh
# bangtrace.sglang, the recorder SGLang's --forward-hooks installs, hooked
# through SGLang's own hook_manager.py (taken from PyPI's sglang wheel by
# tools/sglang-hook-manager: SGLang has no CPU build, so only that file of it
# runs here) onto tests/pytorch/sglang_standin.py, a dense Llama/Qwen3 with
# SGLang's module layout, ForwardBatch and extend/decode passes. Tiny qwen3
# and llama folders in f32: a request alone agrees with the native engine per
# named tensor (1e-4) and bisect --reference finds no departure; batched
# requests (one arriving in its own extend pass, one stopping after its first
# token) get a trace each equal to their solo runs; a chunked prefill is one
# step, decode passes between its chunks or not; a NaN in one request's row of a batched decode pass is named by bisect
# in its trace only; a radix-cache hit is recorded whole and replays clean; a
# start past 0 with no batch on the stack is not recorded; a failing recorder
# leaves the answers alone; the launcher refuses what it cannot record
# (tests/pytorch/sglang_check.py). SKIP only when the torch environment or
# the sglang wheel cannot be had.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_torch
hm=$(PYTHON3="$env/bin/python" "$BT_SRCDIR/tools/sglang-hook-manager" 2>"$TMP/hm.log") ||
    skip "no SGLang hook_manager.py: $(tail -n 1 "$TMP/hm.log")"
"$py" - "$TMP" <<'PY' || fail "could not write the tiny HF folders"
import os, sys
sys.path.insert(0, os.path.join(os.environ["BT_SRCDIR"], "tests", "oracle"))
import make_random_gguf, test_hf_arch as tha
out = sys.argv[1]
for arch, cls, seed in (("qwen3", "Qwen3ForCausalLM", 5), ("llama", "LlamaForCausalLM", 6)):
    g = os.path.join(out, arch + ".gguf")
    hp = make_random_gguf.make(g, arch=arch, seed=seed, untied=True, dim=128, hidden=256, n_heads=4, n_kv_heads=2)
    tha.write_folder(g, os.path.join(out, arch), cls, {"model_type": arch}, hp)
PY
BANGTRACE_LIB=$lib PYTHONPATH=$BT_SRCDIR/python "$env/bin/python" "$BT_SRCDIR/tests/pytorch/sglang_check.py" \
    "$BANGTRACE" "$TMP" "$hm" "$TMP/qwen3" "$TMP/llama" > "$TMP/out" 2>&1 ||
    { tail -n 40 "$TMP/out" >&2; fail "bangtrace.sglang (above)"; }
grep '^ok:' "$TMP/out" | sed 's/^ok: //' | while read -r l; do ok "$l"; done
finish
