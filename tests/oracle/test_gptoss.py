#!/usr/bin/env python3
"""test_gptoss.py - gpt-oss against the numpy oracle (ref.py), tensor by
tensor: tiny random models from tools/make-tiny-gptoss.py (sinks, the
sliding window of 4 on the even layers, YaRN rope, q/k/v/output biases, a
router bias, 4 experts with biases and the clamped SwiGLU, softmax over the
2 chosen) through `$BANGTRACE forward --dump` over 24 positions, compared
with ref.forward in float64: every named tensor on both sides (attn_sink,
the router logits, each routed expert's ffn_gate/up/act/down with its rows'
positions, ffn_moe_out, logits), max |diff| <= 1e-4 * max(1, max|ref|).
Variants: f32 experts (seed 1); MXFP4 experts as stored (seed 2, the
oracle dequantizing with gguf.quants); a window of 2 and 2 layers (seed 3).

Env: BANGTRACE (SKIP if unset). SKIP without the gguf package. Exit 0 pass,
1 fail, 77 skip."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import compare_forward as cf  # noqa: E402
import ref  # noqa: E402

REL = 1e-4
TOKENS = [(t * 7919 + 11) % 50000 for t in range(24)]
VARIANTS = [("f32 experts", dict(experts="f32", seed=1)),
            ("MXFP4 experts", dict(experts="mxfp4", seed=2)),
            ("window 2, 2 layers", dict(experts="f32", seed=3, window=2, layers=2))]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def tool():
    p = os.path.join(HERE, "..", "..", "tools", "make-tiny-gptoss.py")
    spec = importlib.util.spec_from_file_location("make_tiny_gptoss", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    bt = os.environ.get("BANGTRACE")
    if not bt or not os.access(bt, os.X_OK):
        print("SKIP: BANGTRACE is unset or not an executable")
        return 77
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("SKIP: the gguf Python package is missing")
        return 77
    mk = tool()
    with tempfile.TemporaryDirectory(prefix="bt-gptoss-") as tmp:
        for i, (label, kw) in enumerate(VARIANTS):
            path = os.path.join(tmp, "m%d.gguf" % i)
            mk.make(path, **kw)
            dump = os.path.join(tmp, "d%d" % i)
            p = subprocess.run([bt, "forward", "--model", path, "--tokens", " ".join(map(str, TOKENS)),
                                "--dump", dump, "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=120)
            if p.returncode != 0:
                fail("%s: forward exit %d: %s" % (label, p.returncode, p.stderr.decode()[-300:]))
                continue
            _, got = cf.load_dump(dump)
            with open(os.path.join(dump, "meta.json")) as f:
                got_pos = json.load(f).get("expert_positions", {})
            m = ref.load_model(path)
            out = ref.forward(m, TOKENS, dtype=np.float64)
            worst_rel = [0.0, "-"]

            def bound(name, b):
                return REL * max(1.0, float(np.max(np.abs(b))))
            for name in out:
                if name in got and got[name].shape == out[name].shape:
                    r = float(np.max(np.abs(got[name] - out[name]))) / max(1.0, float(np.max(np.abs(out[name]))))
                    if r > worst_rel[0]:
                        worst_rel[:] = [r, name]
            cf.check_all(label, got, out, bound, fail)
            for name, pos in ref.LAST_POSITIONS.items():
                if got_pos.get(name) != pos:
                    fail("%s: %s rows are positions %s, reference %s" % (label, name, got_pos.get(name), pos))
            n_exp = sum(1 for n in out if ".expert[" in n)
            sinks = [n for n in out if n.endswith("attn_sink")]
            if len(sinks) != m.cfg["n_layers"]:
                fail("%s: %d attn_sink tensors" % (label, len(sinks)))
            print("ok: %s: %d tensors (%d expert tensors, %d attn_sink), worst relative %s %.3g (<= %g)"
                  % (label, len(out), n_exp, len(sinks), worst_rel[1], worst_rel[0], REL))
    print("PASS" if not failures else "FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
