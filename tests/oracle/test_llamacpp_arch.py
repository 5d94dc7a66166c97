#!/usr/bin/env python3
"""test_llamacpp_arch.py - each architecture's random-weight f32 GGUF through
our engine and through llama.cpp itself (`forward --engine llama.cpp`: f32
weights, f32 KV cache): the argmax of every position must agree and the
logits must be within 2e-3. This is what pins the conventions (interleaved
vs NEOX RoPE, Llama 3 rope_freqs, q/k/v biases, per-head q/k norms) to the
files people have, since the numpy oracle (test_forward.py) only checks us
against our own reading of them.

llama.cpp has no "mistral" architecture (its converter writes Mistral as
"llama"); a Mistral-shaped llama (GQA 4:1, untied head) stands in for it.

Env: BANGTRACE (SKIP if unset). SKIP when bangtrace was built without
llama.cpp or the gguf package is missing. Exit 0 pass, 1 fail, 77 skip.
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import compare_forward as cf  # noqa: E402
import make_random_gguf  # noqa: E402

LOGIT_TOL = 2e-3
VARIANTS = [
    ("llama", dict(arch="llama", seed=30)),
    ("llama3 rope_freqs base5e5", dict(arch="llama", rope_freqs=True, rope_base=500000.0, seed=31)),
    ("mistral-shaped llama gqa4 untied", dict(arch="llama", n_heads=8, n_kv_heads=2, untied=True, seed=32)),
    ("qwen2 qkv-bias", dict(arch="qwen2", seed=33)),
    ("qwen3 qk-norm", dict(arch="qwen3", seed=34)),
    ("qwen3 head_dim 32", dict(arch="qwen3", head_dim=32, seed=35)),
]
TOKENS = [1, 5, 300, 7, 260, 2, 100, 101, 102, 200, 3, 319, 17, 18, 40, 41, 42, 43, 280, 290, 9, 10, 11, 12]


def dump(bangtrace, model, d, engine):
    cmd = [bangtrace, "forward", "--model", model, "--tokens", " ".join(map(str, TOKENS)), "--dump", d,
           "--engine", engine]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    err = p.stderr.decode(errors="replace").strip()
    return p.returncode, err


def main():
    bangtrace = os.environ.get("BANGTRACE")
    if not bangtrace or not os.access(bangtrace, os.X_OK):
        print("SKIP: BANGTRACE is unset or not an executable")
        return 77
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("SKIP: the gguf Python package is not installed")
        return 77
    ok = True
    with tempfile.TemporaryDirectory(prefix="bt-lcpp-") as tmp:
        for i, (label, kw) in enumerate(VARIANTS):
            path = os.path.join(tmp, "m%d.gguf" % i)
            make_random_gguf.make(path, **kw)
            dirs = {}
            for eng in ("native", "llama.cpp"):
                d = os.path.join(tmp, "%d-%s" % (i, eng))
                rc, err = dump(bangtrace, path, d, eng)
                if rc != 0 and eng == "llama.cpp" and "without llama.cpp" in err:
                    print("SKIP: bangtrace was built without llama.cpp")
                    return 77
                if rc != 0:
                    print("FAIL %s: forward --engine %s: exit %d: %s" % (label, eng, rc, err[-500:]))
                    ok = False
                    break
                dirs[eng] = cf.load_dump(d)[1]
            if len(dirs) != 2:
                continue
            a, b = dirs["native"]["logits"], dirs["llama.cpp"]["logits"]
            if a.shape != b.shape:
                print("FAIL %s: logits shapes %s vs %s" % (label, a.shape, b.shape))
                ok = False
                continue
            diff = float(np.abs(a - b).max())
            top_a, top_b = a.argmax(axis=1), b.argmax(axis=1)
            bad = [int(t) for t in np.nonzero(top_a != top_b)[0]]
            # every other tensor llama.cpp maps, for the report (not judged:
            # its intermediate layouts are its own business)
            worst = max(((float(np.abs(dirs["native"][n] - v).max()), n) for n, v in dirs["llama.cpp"].items()
                         if n in dirs["native"] and dirs["native"][n].shape == v.shape), default=(0.0, "-"))
            good = diff <= LOGIT_TOL and not bad
            ok &= good
            print("%s %s: logits max|diff| %.3e (tolerance %.0e), top-1 differs at %d of %d positions %s; "
                  "largest mapped-tensor diff %.3e (%s)"
                  % ("ok  " if good else "FAIL", label, diff, LOGIT_TOL, len(bad), len(TOKENS), bad[:8],
                     worst[0], worst[1]))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
