#!/usr/bin/env python3
"""test_forward.py - the C engine's forward pass, tensor by tensor, against
the numpy reference (ref.py).

Runs `$BANGTRACE forward --dump` on:
  - stories260K (llama2.c, f32, GQA 2:1), 16 tokens;
  - random GGUFs made here: F32 tied GQA, F32 untied MHA with a different
    rope base and eps, F16, BF16, Q8_0 untied, Q4_0, Q4_1 with a Q8_0
    embedding, Q5_0, Q5_1, MXFP4, and each k-quant (Q2_K..Q6_K) with a Q8_0
    embedding;
  - random GGUFs per architecture: llama with Llama 3 rope scaling
    (rope_freqs.weight), mistral, qwen2 (q/k/v biases, NEOX rope), qwen3
    (per-head q/k rmsnorm, NEOX rope; also head_dim != dim/heads);
  - SmolLM2-135M Q4_1 if it is cached (8 tokens; skipped otherwise);
and checks every dumped tensor (see compare_forward.py for the policies).
Then checks greedy decoding of stories260K through `$BANGTRACE run`.

Env: BANGTRACE (binary; SKIP if unset or missing), BT_SHARED (shared/ folder),
BT_SMOLLM2 (optional path of the SmolLM2 GGUF). Exit 0 pass, 1 fail, 77 skip.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True     # never litter the source tree with __pycache__
sys.path.insert(0, HERE)

import compare_forward as cf  # noqa: E402
import make_random_gguf  # noqa: E402

SMOLLM2_DEFAULT = os.path.join(os.path.expanduser("~"), ".cache", "bangtrace", "models",
                               "SmolLM2-135M-Instruct.Q4_1.gguf")

# Random-GGUF variants: (label, make() kwargs, tolerance policy, threads).
# Quantized weights dequantize to identical f32 values in both
# implementations; only f32 summation order differs, so 1e-3 relative to the
# tensor's magnitude leaves a wide margin (observed ~1e-6) yet catches any
# wrong block layout, scale or offset, which moves values by O(scale).
VARIANTS = [
    ("f32 tied gqa2", dict(wtype="f32"), cf.tol_exact_f32, 2),
    ("f32 untied mha base5e5 eps1e-6",
     dict(wtype="f32", untied=True, n_kv_heads=4, rope_base=500000.0, norm_eps=1e-6, seed=1),
     cf.tol_exact_f32, None),
    ("f16 tied gqa2", dict(wtype="f16", seed=2), cf.tol_exact_f32, None),
    ("q8_0 untied gqa2", dict(wtype="q8_0", untied=True, seed=3), cf.tol_scaled(1e-3), None),
    ("q4_0 tied gqa2", dict(wtype="q4_0", seed=4), cf.tol_scaled(1e-3), 2),
    ("q4_1 + q8_0 embd", dict(wtype="q4_1", embd_type="q8_0", seed=5), cf.tol_scaled(1e-3), None),
    ("bf16 tied gqa2", dict(wtype="bf16", seed=6), cf.tol_scaled(1e-3), None),
    ("q5_0 untied", dict(wtype="q5_0", untied=True, seed=7), cf.tol_scaled(1e-3), 2),
    ("q5_1 tied", dict(wtype="q5_1", seed=8), cf.tol_scaled(1e-3), None),
    # tied: the embedding rows (get_rows) and the head are mxfp4 too
    ("mxfp4 tied gqa2", dict(wtype="mxfp4", seed=26), cf.tol_scaled(1e-3), 2),
] + [
    # k-quants need rows of 256: a wider model, q8_0 embeddings as in real
    # k-quant files; 2 threads so decode splits the 4-row kernels.
    ("%s + q8_0 embd" % t, dict(wtype=t, embd_type="q8_0", dim=256, hidden=512, seed=9 + i),
     cf.tol_scaled(1e-3), 2)
    for i, t in enumerate(("q2_k", "q3_k", "q4_k", "q5_k", "q6_k"))
] + [
    # Architectures (issue 11): every named tensor of every layer within 1e-4.
    ("llama3 rope_freqs base5e5", dict(arch="llama", rope_freqs=True, rope_base=500000.0, seed=20),
     cf.tol_exact_f32, None),
    ("mistral gqa4", dict(arch="mistral", n_heads=8, n_kv_heads=2, seed=21), cf.tol_exact_f32, None),
    ("qwen2 qkv-bias neox", dict(arch="qwen2", seed=22), cf.tol_exact_f32, 2),
    ("qwen3 qk-norm neox", dict(arch="qwen3", seed=23), cf.tol_exact_f32, None),
    ("qwen3 head_dim 32 (q_dim 128 != dim 64)", dict(arch="qwen3", head_dim=32, untied=True, seed=24),
     cf.tol_exact_f32, 2),
    ("qwen2 q8_0", dict(arch="qwen2", wtype="q8_0", seed=25), cf.tol_scaled(1e-3), None),
]


def shared_dir():
    d = os.environ.get("BT_SHARED")
    if d:
        return d
    return os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def read_ids(path):
    with open(path) as f:
        return [int(s) for s in f.read().split()]


def check_greedy_run(bangtrace, model, tok, ids_path):
    """$BANGTRACE run ... --temp 0 --json must emit the 200 expected ids."""
    want = read_ids(ids_path)[1:]
    cmd = [bangtrace, "run", "--model", model, "--tokenizer", tok, "--prompt", "",
           "-n", "200", "--temp", "0", "--json"]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("FAIL greedy run: %s" % e)
        return False
    if p.returncode != 0:
        print("FAIL greedy run: exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-1000:]))
        return False
    got = None
    text = p.stdout.decode(errors="replace")
    # One JSON document, or JSON lines of which one carries completion_ids.
    docs = [text] + text.splitlines()
    for d in docs:
        try:
            j = json.loads(d)
        except ValueError:
            continue
        if isinstance(j, dict) and isinstance(j.get("completion_ids"), list):
            got = j["completion_ids"]
            break
    if got is None:
        print("FAIL greedy run: no JSON object with \"completion_ids\" in stdout")
        return False
    if got != want:
        n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print("FAIL greedy run: %d ids, first difference at completion index %d (got %s, want %s)"
              % (len(got), n, got[n:n + 1], want[n:n + 1]))
        return False
    print("ok   greedy run: 200 ids match stories260K.greedy200.ids.txt")
    return True


def main():
    try:
        return run_all()
    except (cf.ref.RefError, cf.DumpError, ValueError, OSError) as e:
        print("FAIL: %s" % e)
        return 1


def run_all():
    bangtrace = os.environ.get("BANGTRACE")
    if not bangtrace or not os.access(bangtrace, os.X_OK):
        print("SKIP: BANGTRACE is unset or not an executable (%r)" % bangtrace)
        return 77
    sh = shared_dir()
    stories = os.path.join(sh, "models", "llama2c", "stories260K.bin")
    tok512 = os.path.join(sh, "models", "llama2c", "tok512.bin")
    ids_path = os.path.join(sh, "models", "llama2c", "stories260K.greedy200.ids.txt")
    if not os.path.exists(stories):
        print("SKIP: %s not found (set BT_SHARED)" % stories)
        return 77

    try:
        import gguf  # noqa: F401  (make_random_gguf and ref need it)
    except ImportError:
        print("SKIP: the gguf Python package is not installed")
        return 77

    ok = True
    # A real sentence: BOS and the first 15 greedy tokens.
    toks = read_ids(ids_path)[:16]
    ok &= cf.check(stories, toks, cf.tol_exact_f32, bangtrace=bangtrace, tokenizer=tok512,
                   label="stories260K")

    with tempfile.TemporaryDirectory(prefix="bt-oracle-") as tmp:
        rand_toks = [1, 5, 300, 7, 260, 2, 100, 101, 102, 200, 3, 319]
        for i, (label, kw, tol, threads) in enumerate(VARIANTS):
            path = os.path.join(tmp, "random%d.gguf" % i)
            make_random_gguf.make(path, **kw)
            ok &= cf.check(path, rand_toks, tol, bangtrace=bangtrace, threads=threads,
                           label="random " + label)

    smol = os.environ.get("BT_SMOLLM2") or SMOLLM2_DEFAULT
    if os.path.exists(smol):
        # 30 layers and a hidden state with outliers near 2500: float64 vs
        # float32 differ by <= 1.5e-5 of each tensor's absmax here; 1e-3 of
        # absmax (0.03 on logits near 27) allows for a different summation
        # order yet is far below what a wrong rope base, GQA map or
        # dequantization would cause (O(1) changes in the logits).
        ok &= cf.check(smol, [1, 504, 3575, 282, 4649, 314, 9052, 30], cf.tol_scaled(1e-3),
                       bangtrace=bangtrace, label="SmolLM2-135M Q4_1")
    else:
        print("skip SmolLM2-135M Q4_1: %s not cached" % smol)

    ok &= check_greedy_run(bangtrace, stories, tok512, ids_path)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
