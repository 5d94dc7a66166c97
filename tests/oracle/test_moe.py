#!/usr/bin/env python3
"""test_moe.py - the mixture-of-experts FFN, tensor by tensor, against the
numpy reference (ref.py moe_ffn), and against llama.cpp itself.

1. Random qwen3moe GGUFs as llama.cpp reads them (qwen3 attention with
   q/k norms and NEOX rope; qwen3moe.expert_count / expert_used_count /
   expert_feed_forward_length, ffn_gate_inp, 3-D ffn_{gate,up,down}_exps):
   `$BANGTRACE forward --dump`
   is compared with ref.forward in float64 for every named tensor, the
   router logits (ffn_gate_inp), each routed expert's ffn_gate/up/act/down
   (blk.L.ffn_down.expert[E], the same tokens in the same order) and
   ffn_moe_out: max abs difference <= 1e-4 (f32 weights), 1e-3 relative
   (f16 weights). Variants: 8 experts top-2; 6 experts top-3 with a
   shared expert and its sigmoid gate; f16 weights, prefill of 24.
2. llama.cpp (run --engine llama.cpp, f32 KV cache through
   BT_LLAMA_KV_TYPE=f32, no flash attention) on the f32 file: the same greedy
   ids, the same argmax at every step and the recorded top-20 logits
   within 2e-3. SKIPs that part when bangtrace was built without llama.cpp.

Env: BANGTRACE (binary; SKIP if unset). Exit 0 pass, 1 fail, 77 skip."""

import json
import os
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import compare_forward as cf  # noqa: E402
import make_random_gguf  # noqa: E402
import ref  # noqa: E402

VARIANTS = [
    ("qwen3moe f32 8 experts top-2", dict(arch="qwen3moe", wtype="f32", n_expert=8, n_expert_used=2, seed=11),
     1e-4, False),
    ("qwen3moe f32 6 experts top-3 + shared expert",
     dict(arch="qwen3moe", wtype="f32", n_expert=6, n_expert_used=3, shared_expert=96, untied=True, seed=12),
     1e-4, False),
    ("qwen3moe f16 8 experts top-2", dict(arch="qwen3moe", wtype="f16", n_expert=8, n_expert_used=2, seed=13),
     1e-3, True),
]
TOKENS = [1, 17, 40, 9, 300, 5, 77, 12, 260, 18, 19, 21, 3, 44, 45, 46, 101, 7, 8, 200, 201, 33, 34, 2]

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


def check_forward(bt, tmp, label, kw, tol, relative):
    path = os.path.join(tmp, "moe-%d.gguf" % kw["seed"])
    make_random_gguf.make(path, **kw)
    dump = os.path.join(tmp, "dump-%d" % kw["seed"])
    os.makedirs(dump)
    p = subprocess.run([bt, "forward", "--model", path, "--tokens", " ".join(map(str, TOKENS)),
                        "--dump", dump, "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        fail("%s: forward exit %d: %s" % (label, p.returncode, p.stderr.decode()[-300:]))
        return path
    _, got = cf.load_dump(dump)
    with open(os.path.join(dump, "meta.json")) as f:
        got_pos = json.load(f).get("expert_positions", {})
    m = ref.load_model(path)
    out = ref.forward(m, TOKENS, dtype=np.float64)
    worst = cf.check_all(label, got, out,
                         lambda name, b: tol * max(1.0, float(np.max(np.abs(b)))) if relative else tol, fail)
    for name, pos in ref.LAST_POSITIONS.items():
        if got_pos.get(name) != pos:
            fail("%s: %s rows are positions %s, reference %s" % (label, name, got_pos.get(name), pos))
    n_exp = sum(1 for n in out if ".expert[" in n)
    print("ok: %s: %d tensors (%d expert tensors), worst %s %.3g" % (label, len(out), n_exp, worst[0], worst[1]))
    return path


def llama_cpp_check(bt, tmp, path):
    # the f32 reference path: f32 cache, no flash attention (llama.cpp's
    # default fused attention departs by ~1e-2 in the logits even in f32)
    env = dict(os.environ, BT_LLAMA_KV_TYPE="f32", BT_LLAMA_FLASH_ATTN="off")
    dbs = {}
    for eng in ("native", "llama.cpp"):
        db = os.path.join(tmp, "%s.db" % eng)
        p = subprocess.run([bt, "run", "--engine", eng, "--model", path, "--prompt", "the big dog ran to the sun",
                            "-n", "24", "--trace", db, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env)
        if p.returncode != 0:
            err = p.stderr.decode()
            if eng == "llama.cpp" and "built without llama.cpp" in err:
                print("SKIP part 2: bangtrace was built without llama.cpp")
                return
            fail("run --engine %s: exit %d: %s" % (eng, p.returncode, err[-300:]))
            return
        dbs[eng] = (json.loads(p.stdout), sqlite3.connect(db))
    (jn, cn), (jl, cl) = dbs["native"], dbs["llama.cpp"]
    if jn["completion_ids"] != jl["completion_ids"]:
        fail("greedy ids differ: native %s, llama.cpp %s" % (jn["completion_ids"], jl["completion_ids"]))
    q = "select step, pos, argmax_first, topk_ids, topk_vals from logits order by step, pos"
    rn, rl = cn.execute(q).fetchall(), cl.execute(q).fetchall()
    if len(rn) != len(rl) or not rn:
        fail("logit snapshots: %d native, %d llama.cpp" % (len(rn), len(rl)))
        return
    worst = 0.0
    for a, b in zip(rn, rl):
        if a[:3] != b[:3]:
            fail("step %d pos %d: argmax native %d, llama.cpp %d" % (a[0], a[1], a[2], b[2]))
            continue
        ia, va, ib, vb = json.loads(a[3]), json.loads(a[4]), json.loads(b[3]), json.loads(b[4])
        lb = dict(zip(ib, vb))
        for i, v in zip(ia, va):
            if i in lb:
                worst = max(worst, abs(v - lb[i]))
    if not worst <= 2e-3:
        fail("llama.cpp logits differ by %.3g > 2e-3" % worst)
    print("ok: llama.cpp: %d steps, same greedy ids and argmax, top-20 logits within %.3g" % (len(rn), worst))


def main():
    bt = os.environ.get("BANGTRACE")
    if not bt or not os.path.exists(bt):
        print("SKIP: BANGTRACE not set")
        return 77
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("SKIP: the gguf Python package is missing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        first = None
        for label, kw, tol, rel in VARIANTS:
            path = check_forward(bt, tmp, label, kw, tol, rel)
            first = first or path
        llama_cpp_check(bt, tmp, first)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
