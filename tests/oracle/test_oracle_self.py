#!/usr/bin/env python3
"""test_oracle_self.py - prove the oracle before it judges the C engine.

  1. ref.py's greedy decoding of stories260K (float64 and float32) reproduces
     stories260K.greedy200.ids.txt, the token-level ground truth;
  2. its RoPE angles equal the freq_cis tables stored in the checkpoint;
  3. a prefill gives the same tensors as token-by-token steps with the KV cache;
  4. gguf.quants' Q8_0/Q4_0/Q4_1 dequantization (which ref.py uses) agrees
     with dequantizers written here from the ggml block layouts, and ref.py
     reads back exactly what make_random_gguf.py wrote (tied and untied);
  5. the comparison passes a correct f32 "engine" (fake_bangtrace.py) through
     the whole of test_forward.py, and catches planted bugs, naming the
     first bad tensor.
Env: BT_SHARED (shared/ folder). Exit 0 pass, 1 fail, 77 skip.
"""

import io
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True     # never litter the source tree with __pycache__
sys.path.insert(0, HERE)

import compare_forward as cf  # noqa: E402
import make_random_gguf  # noqa: E402
import ref  # noqa: E402

FAILS = []


def expect(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


def shared_dir():
    d = os.environ.get("BT_SHARED")
    if d:
        return d
    return os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


# --- dequantizers from the ggml block definitions (ggml-common.h) ---------

def _f16(b, off):
    return b[:, off:off + 2].copy().view("<f2").astype(np.float64)[:, 0]


def deq_q8_0(raw):
    """block_q8_0: f16 d; int8 qs[32]. x = d * q."""
    b = raw.reshape(-1, 34)
    d = _f16(b, 0)
    q = b[:, 2:].view(np.int8).astype(np.float64)
    return (d[:, None] * q).ravel()


def _nibbles(qs):
    # element j < 16 is the low nibble of byte j, element j + 16 the high one
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)


def deq_q4_0(raw):
    """block_q4_0: f16 d; uint8 qs[16]. x = (nibble - 8) * d."""
    b = raw.reshape(-1, 18)
    return (_f16(b, 0)[:, None] * (_nibbles(b[:, 2:]) - 8.0)).ravel()


def deq_q4_1(raw):
    """block_q4_1: f16 d; f16 m; uint8 qs[16]. x = nibble * d + m."""
    b = raw.reshape(-1, 20)
    return (_f16(b, 0)[:, None] * _nibbles(b[:, 4:]) + _f16(b, 2)[:, None]).ravel()


def test_greedy(stories, ids_path):
    want = [int(s) for s in open(ids_path).read().split()]
    m = ref.load_model(stories)
    for dt in (np.float64, np.float32):
        got = ref.greedy(m, [1], 200, dt)
        n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        expect(got == want, "greedy 200 (%s) reproduces stories260K.greedy200.ids.txt%s"
               % (np.dtype(dt).name, "" if n is None else " (first difference at %d)" % n))
    return m, want


def test_rope_tables(m, stories):
    # llama2.c stores cos/sin of its RoPE angles after the weights; they were
    # written at training time, so they pin the pairing convention.
    c = m.cfg
    hs, seq = c["head_dim"], c["ctx_len"]
    raw = np.fromfile(stories, dtype="<f4")
    tail = raw[len(raw) - seq * hs:]            # real[seq][hs/2] then imag[seq][hs/2]
    real = tail[:seq * hs // 2].reshape(seq, hs // 2)
    imag = tail[seq * hs // 2:].reshape(seq, hs // 2)
    # rotate a unit vector (1, 0) in each pair: result is (cos, sin)
    x = np.zeros((seq, 1, hs))
    x[..., 0::2] = 1.0
    y = ref.rope(x, np.arange(seq), c["rope_base"], c["rope_dim"])[:, 0, :]
    err = max(np.abs(y[:, 0::2] - real).max(), np.abs(y[:, 1::2] - imag).max())
    expect(err < 1e-5, "RoPE angles match the checkpoint's freq_cis tables (max err %.2e)" % err)


def test_prefill_vs_steps(m, toks):
    full = ref.forward(m, toks)
    cache = ref.KVCache(m.cfg["n_layers"])
    parts = [ref.forward(m, toks[:10], 0, cache)]
    for i in range(10, len(toks)):
        parts.append(ref.forward(m, toks[i:i + 1], i, cache))
    worst = 0.0
    for name in full:
        step = np.concatenate([p[name] for p in parts])
        worst = max(worst, float(np.abs(step - full[name]).max()))
    expect(worst < 1e-10, "prefill of %d tokens equals 10 + 1-token steps (max diff %.1e)"
           % (len(toks), worst))


def test_dequant_and_roundtrip(tmp):
    import gguf
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 64)).astype(np.float32) * 3
    for name, mine in (("Q8_0", deq_q8_0), ("Q4_0", deq_q4_0), ("Q4_1", deq_q4_1)):
        qt = getattr(gguf.GGMLQuantizationType, name)
        q = gguf.quants.quantize(a, qt)
        theirs = gguf.quants.dequantize(q, qt).astype(np.float64).ravel()
        err = np.abs(mine(q) - theirs).max()
        expect(err == 0.0, "%s: gguf.quants dequantize == block-layout dequantizer" % name)

    for kw in (dict(wtype="f32"), dict(wtype="f32", untied=True, n_kv_heads=4),
               dict(wtype="q4_1", embd_type="q8_0")):
        path = os.path.join(tmp, "rt.gguf")
        cfg = make_random_gguf.make(path, **kw)
        m = ref.load_gguf(path)
        same_cfg = all(abs(m.cfg[k] - v) <= 1e-6 * max(1.0, abs(v)) if isinstance(v, float)
                       else m.cfg[k] == v for k, v in cfg.items())
        # regenerate the same random stream to get the written matrices
        rng = np.random.default_rng(0)
        embd = 0.25 * rng.standard_normal((cfg["n_vocab"], cfg["dim"]))
        rng.standard_normal(cfg["dim"])                       # blk.0.attn_norm
        wq = rng.standard_normal((cfg["dim"], cfg["dim"])) / np.sqrt(cfg["dim"])
        if kw["wtype"] == "f32":
            wq_file = wq.astype(np.float32)
            embd_file = embd.astype(np.float32)
        else:
            qt = gguf.GGMLQuantizationType.Q4_1
            wq_file = deq_q4_1(gguf.quants.quantize(wq.astype(np.float32), qt)).reshape(wq.shape)
            embd_file = deq_q8_0(gguf.quants.quantize(embd.astype(np.float32),
                                                      gguf.GGMLQuantizationType.Q8_0)).reshape(embd.shape)
        ok_w = np.array_equal(m.get("blk.0.attn_q"), wq_file) and \
            np.array_equal(m.get("token_embd"), embd_file)
        tied_ok = (m.cfg["tied_output"] == (not kw.get("untied", False))) and \
            (np.array_equal(m.get("output"), m.get("token_embd")) == m.cfg["tied_output"])
        expect(same_cfg and ok_w and tied_ok,
               "random GGUF %s reads back: config, attn_q, token_embd, output tie" % kw)


def test_tiny_shared_gguf(sh):
    path = os.path.join(sh, "models", "gguf-tiny", "llama-2-tiny-random.gguf")
    if not os.path.exists(path):
        print("skip tiny F16 GGUF: %s missing" % path)
        return
    m = ref.load_model(path)
    out = ref.forward(m, [1, 450, 4996, 17354, 1701])
    fin = all(np.all(np.isfinite(v)) for v in out.values())
    expect(fin and out["logits"].shape == (5, m.cfg["n_vocab"]),
           "llama-2-tiny-random.gguf (F16) runs through the reference")


def test_harness(tmp, stories, tok512):
    fake = os.path.join(tmp, "fake-bangtrace")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\nexec "%s" "%s" "$@"\n'
                % (os.environ.get("PYTHON3") or sys.executable, os.path.join(HERE, "fake_bangtrace.py")))
    os.chmod(fake, 0o755)
    env = dict(os.environ, BANGTRACE=fake, BT_SMOLLM2=os.path.join(tmp, "absent.gguf"))
    env.pop("FAKE_BT_BUG", None)
    p = subprocess.run([sys.executable, os.path.join(HERE, "test_forward.py")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    text = p.stdout.decode(errors="replace")
    expect(p.returncode == 0, "test_forward.py passes a correct f32 engine (fake_bangtrace)")
    if p.returncode != 0:
        print(text)

    toks = [1, 403, 407, 261, 378, 299, 433, 270]
    for bug, needle in (("rope_base", "first tensor over tolerance: blk.0.attn_q "),
                        ("ffn_gate", "first tensor over tolerance: blk.1.ffn_gate "),
                        ("drop_ctx", "problem: blk.0.attn_ctx: missing from the dump")):
        os.environ["FAKE_BT_BUG"] = bug
        try:
            buf = io.StringIO()
            ok = cf.check(stories, toks, cf.tol_exact_f32, bangtrace=fake, tokenizer=tok512,
                          label="planted " + bug, out=buf)
        finally:
            del os.environ["FAKE_BT_BUG"]
        expect(not ok and needle in buf.getvalue(),
               "planted bug %s is caught and reported as %r" % (bug, needle.strip()))
        if ok or needle not in buf.getvalue():
            print(buf.getvalue())


def main():
    sh = shared_dir()
    d = os.path.join(sh, "models", "llama2c")
    stories = os.path.join(d, "stories260K.bin")
    ids_path = os.path.join(d, "stories260K.greedy200.ids.txt")
    tok512 = os.path.join(d, "tok512.bin")
    if not os.path.exists(stories) or not os.path.exists(ids_path):
        print("SKIP: stories260K files not found under %s (set BT_SHARED)" % d)
        return 77
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("SKIP: the gguf Python package is not installed")
        return 77
    m, ids = test_greedy(stories, ids_path)
    test_rope_tables(m, stories)
    test_prefill_vs_steps(m, ids[:24])
    with tempfile.TemporaryDirectory(prefix="bt-oracle-self-") as tmp:
        test_dequant_and_roundtrip(tmp)
        test_tiny_shared_gguf(sh)
        test_harness(tmp, stories, tok512)
    if FAILS:
        print("FAIL: %d check(s) failed" % len(FAILS))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
