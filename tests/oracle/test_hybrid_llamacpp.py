#!/usr/bin/env python3
"""test_hybrid_llamacpp.py - the float64 qwen35 oracle (ref_hybrid.py)
against llama.cpp itself, before bangtrace's engine runs the architecture:
that shows the oracle computes what llama.cpp computes (gated delta net,
conv state, grouped key heads, gated attention, IMROPE) and so can judge the
engine tensor by tensor.

Tiny random-weight GGUFs from tools/make-tiny-hybrid.py (f32 weights: qwen35
with two seeds, a 6-layer qwen35 with full attention every 3rd layer, and
qwen35moe: 4 routed experts, 2 per token, and a gated shared expert; and
qwen3next: that MoE, NEOX rope, fused ssm_ba, grouped key heads) run
through tests/oracle/llama_logits (llama.cpp's API: f32 K/V, flash attention
off, one thread) on several prompts, each twice: the whole prompt in one
llama_decode (llama.cpp's chunked GDN path), and the first 5 ids in one call
then one id per call (its autoregressive path, the recurrent and conv state
carried between calls). For every position: the argmax must be the oracle's
and max |logit - oracle| <= 2e-3. The MTP block is held to the same bound in
llama.cpp's MTP context (llama_logits --mtp: ids 1..T-1 at positions 1..T-1,
each with the oracle's output-normed hidden state of the position before, as
llama.cpp's draft-mtp pairs them) against ref_hybrid.mtp(). When `bangtrace forward --engine llama.cpp`
accepts the model (once bangtrace loads qwen35), its logits dump is held to
the same bound.

SKIP when bangtrace was built without llama.cpp (no llama_logits), or numpy,
gguf or the shared vocabulary is missing. Exit 0 pass, 1 fail, 77 skip."""

import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hybrid_common as hc  # noqa: E402

TOL = 2e-3
MODELS = [("qwen35 seed 1", dict(seed=1)), ("qwen35 seed 2", dict(seed=2)),
          ("qwen35 6 layers interval 3 seed 3", dict(seed=3, layers=6, interval=3)),
          ("qwen35moe seed 4", dict(seed=4, arch="qwen35moe")),
          ("qwen3next seed 5", dict(seed=5, arch="qwen3next"))]


def judge(label, got, want):
    import numpy as np
    if got.shape != want.shape:
        hc.say("FAIL %s: logits shape %s, oracle %s" % (label, got.shape, want.shape))
        return False
    diff = float(np.abs(got - want).max())
    bad = [int(t) for t in np.nonzero(got.argmax(axis=1) != want.argmax(axis=1))[0]]
    srt = np.sort(want, axis=1)
    gap = float((srt[:, -1] - srt[:, -2]).min())
    good = diff <= TOL and not bad
    hc.say("%s %s: max|diff| %.3e (tolerance %.0e), top-1 differs at %d of %d positions %s "
           "(smallest oracle top-2 gap %.2e)" % ("ok  " if good else "FAIL", label, diff, TOL, len(bad),
                                                 want.shape[0], bad[:8], gap))
    return good


def main():
    why = hc.skip_reason()
    if why:
        print("SKIP: %s" % why)
        return 77
    ll = hc.llama_logits()
    if ll is None:
        print("SKIP: bangtrace was built without llama.cpp (no %s)" % os.path.join(hc.BUILD, "tests/oracle/llama_logits"))
        return 77
    import numpy as np
    import ref_hybrid as rh
    bangtrace = os.environ.get("BANGTRACE")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bt-hyb-") as tmp:
        for mi, (mlabel, kw) in enumerate(MODELS):
            path = os.path.join(tmp, "m%d.gguf" % mi)
            hc.make(path, **kw)
            m = rh.load(path)
            for pi, ids in enumerate(hc.PROMPTS):
                full = rh.forward(m, ids, want={"output_norm"})
                want = full["logits"]
                if len(ids) > 2 and pi in (0, 3):
                    hp, out = os.path.join(tmp, "h.f32"), os.path.join(tmp, "mtp.f32")
                    h = full["output_norm"][:-1].astype("<f4")
                    h.tofile(hp)
                    p = subprocess.run([ll, "--mtp", path, out, hp, "1"], input=" ".join(map(str, ids[1:])).encode(),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
                    label = "%s prompt %d MTP block (%d rows)" % (mlabel, pi, len(ids) - 1)
                    if p.returncode != 0:
                        hc.say("FAIL %s: llama_logits --mtp exit %d: %s" % (label, p.returncode,
                                                                           p.stderr.decode(errors="replace")[-400:]))
                        ok = False
                    else:
                        mw = rh.mtp(m, h.astype(np.float64), ids[1:], pos0=1, want=set())["mtp_logits"]
                        got = np.fromfile(out, dtype="<f4").astype(np.float64).reshape(len(ids) - 1, -1)
                        ok &= judge("llama.cpp " + label, got, mw)
                for first in (0, 5):
                    if first and first >= len(ids):
                        continue
                    out = os.path.join(tmp, "l.f32")
                    p = subprocess.run([ll, path, out, str(first)], input=" ".join(map(str, ids)).encode(),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
                    label = "%s prompt %d (%d ids, %s)" % (mlabel, pi, len(ids),
                                                          "one batch" if not first else "5 then 1 by 1")
                    if p.returncode != 0:
                        hc.say("FAIL %s: llama_logits exit %d: %s" % (label, p.returncode,
                                                                     p.stderr.decode(errors="replace")[-400:]))
                        ok = False
                        continue
                    got = np.fromfile(out, dtype="<f4").astype(np.float64)
                    ok &= judge("llama.cpp " + label, got.reshape(len(ids), -1), want)
                if bangtrace and os.access(bangtrace, os.X_OK) and pi == 0:
                    d = os.path.join(tmp, "bt%d" % mi)
                    p = subprocess.run([bangtrace, "forward", "--engine", "llama.cpp", "--model", path, "--tokens",
                                        " ".join(map(str, ids)), "--dump", d, "--llama-flash-attn", "off",
                                        "--llama-kv-type", "f32"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
                    err = p.stderr.decode(errors="replace").strip()
                    if p.returncode != 0 and ("not supported" in err or "without llama.cpp" in err):
                        hc.say("note: bangtrace forward --engine llama.cpp does not take this model yet: %s"
                               % err.splitlines()[-1][:200])
                    elif p.returncode != 0:
                        hc.say("FAIL %s: bangtrace forward --engine llama.cpp exit %d: %s"
                               % (mlabel, p.returncode, err[-400:]))
                        ok = False
                    else:
                        import compare_forward as cf
                        got = cf.load_dump(d)[1]["logits"].astype(np.float64)
                        ok &= judge("bangtrace --engine llama.cpp %s prompt 0" % mlabel, got, want)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
