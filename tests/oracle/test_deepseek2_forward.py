#!/usr/bin/env python3
"""test_deepseek2_forward.py - bangtrace's deepseek2 engine against the
float64 numpy oracle (ref_deepseek2.py), tensor by named tensor.

Tiny random models from tools/make-tiny-deepseek2.py (the default: q
low-rank path, split k/v up-projection, YaRN x4 with its mscale, sigmoid
routing with exp_probs_b in 4 groups of which 2 compete, scale 2.5; the
fused layout; a direct q projection with softmax routing and no rope
scaling) run through `bangtrace forward --dump` on 24 tokens; every tensor
the oracle names (attn_q_a .. attn_kv_latent, attn_q_abs, attn_ctx_latent,
attn_ctx, the FFN, router logits, ffn_moe_out, logits) must be within 1e-4
relative (max |bangtrace - oracle| / max |oracle|), and each expert of the
MoE layers must hold as many token rows as the oracle routes to it.
SKIP (77) without numpy or gguf or the shared vocabulary; exit 0 pass, 1 fail."""

import importlib.util
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
TOL = 1e-4
VARIANTS = [("default", dict()), ("fused", dict(kv_layout="fused")),
            ("q-direct softmax no-yarn", dict(q_lora=0, gating="softmax", groups=(0, 0), yarn=0.0))]


def main():
    try:
        import numpy as np  # noqa: F401
    except ImportError:
        print("SKIP: python3 has no numpy")
        return 77
    vocab = os.path.join(os.environ.get("BT_SHARED", "/work/shared"), "models/gguf-vocab/ggml-vocab-gpt-2.gguf")
    if not os.path.isfile(vocab):
        print("SKIP: no shared vocabulary %s" % vocab)
        return 77
    bangtrace = os.environ.get("BANGTRACE") or os.path.join(os.environ.get("BT_BUILDDIR", "build"), "bangtrace")
    spec = importlib.util.spec_from_file_location("mtd", os.path.join(SRC, "tools", "make-tiny-deepseek2.py"))
    try:
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        tool.H.import_gguf()
    except SystemExit:
        print("SKIP: no usable gguf package")
        return 77
    import numpy as np
    import compare_forward as cf
    import ref_deepseek2 as rd
    ids = [(i * 7919) % 50000 for i in range(1, 25)]
    ok = True
    with tempfile.TemporaryDirectory(prefix="bt-ds2-") as tmp:
        for vi, (label, kw) in enumerate(VARIANTS):
            path = os.path.join(tmp, "m%d.gguf" % vi)
            cfg, W = tool.make(path, seed=7 + vi, vocab=vocab, **kw)
            d = os.path.join(tmp, "d%d" % vi)
            p = subprocess.run([bangtrace, "forward", "--model", path, "--tokens", " ".join(map(str, ids)), "--dump", d,
                                "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            if p.returncode:
                print("FAIL %s: bangtrace forward exit %d: %s" % (label, p.returncode, p.stderr.decode()[-300:]))
                ok = False
                continue
            _, got = cf.load_dump(d)
            want = rd.forward(cfg, W, ids)
            worst, wname, n = 0.0, "", 0
            for name, ref in want.items():
                if name.endswith("routes"):
                    continue
                if name not in got:
                    print("FAIL %s: bangtrace's dump lacks %s" % (label, name))
                    ok = False
                    continue
                g = got[name].astype(np.float64)
                rel = float(np.abs(g - ref).max() / max(np.abs(ref).max(), 1e-30)) if g.shape == ref.shape else np.inf
                n += 1
                if rel > worst:
                    worst, wname = rel, name
            good = worst <= TOL
            print("%s %s: %d named tensors, worst relative error %.2e (%s), tolerance %.0e"
                  % ("ok  " if good else "FAIL", label, n, worst, wname, TOL))
            ok &= good
            # routing: each expert's dumped rows (the tokens routed to it) as many as the oracle routes there
            for l in range(cfg["n_dense"], cfg["n_layer"]):
                es, _ = want["blk.%d.routes" % l]
                took = np.zeros((len(ids), cfg["n_expert"]), bool)
                for i, row in enumerate(es):
                    took[i, row] = True
                counts = took.sum(0)
                have = [got["blk.%d.ffn_down.expert[%d]" % (l, e)].shape[0] if "blk.%d.ffn_down.expert[%d]" % (l, e) in got
                        else 0 for e in range(cfg["n_expert"])]
                same = list(map(int, counts)) == have
                print("%s %s layer %d: tokens per expert %s (oracle %s)" % ("ok  " if same else "FAIL", label, l, have,
                                                                            list(map(int, counts))))
                ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
