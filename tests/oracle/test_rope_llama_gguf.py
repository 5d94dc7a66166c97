#!/usr/bin/env python3
"""test_rope_llama_gguf.py - a llama GGUF rotates adjacent pairs (ggml rope
"norm"), not halves (NEOX): witnesses on real llama GGUFs besides the
SmolLM2 golden test (issue 22's mutation test: NEOX rope on a llama GGUF
passed greedy_stories.sh).

  - llama-2-tiny-random.gguf (BT_SHARED/models/gguf-tiny, written by
    llama.cpp's converter, F16): `bangtrace forward --dump` tensor by tensor
    against the numpy reference (ref.py), which reads the rope kind from its
    own architecture table;
  - stories260K converted to GGUF with tools/llama2c-to-gguf.py: the same
    weights through the GGUF loader and through the llama2.c loader give
    the same logits at every position (the llama2.c path has no
    architecture to get wrong), and the GGUF against ref.py;
  - `inspect --json` of both GGUFs names rope "norm".

Env: BANGTRACE, BT_SHARED. Exit 0 pass, 1 fail, 77 skip."""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import compare_forward as cf  # noqa: E402
import numpy as np  # noqa: E402


def shared_dir():
    d = os.environ.get("BT_SHARED")
    return d if d else os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared"))


def logits(bangtrace, model, tokens, tmp, name, tokenizer=None):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    cf.run_forward(bangtrace, model, tokens, d, tokenizer=tokenizer, threads=1)
    _, dump = cf.load_dump(d)
    return dump["logits"]


def rope_name(bangtrace, model):
    p = subprocess.run([bangtrace, "inspect", model, "--json", "--no-scan"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if p.returncode != 0:
        return "inspect exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-300:])
    found = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("rope", "rope_kind", "rope_type") and isinstance(v, str):
                    found.append(v)
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(json.loads(p.stdout.decode()))
    return found[0] if found else "no rope field"


def main():
    bangtrace = os.environ.get("BANGTRACE")
    if not bangtrace or not os.access(bangtrace, os.X_OK):
        print("SKIP: BANGTRACE is unset or not an executable (%r)" % bangtrace)
        return 77
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("SKIP: the gguf Python package is not installed")
        return 77
    sh = shared_dir()
    tiny = os.path.join(sh, "models", "gguf-tiny", "llama-2-tiny-random.gguf")
    stories = os.path.join(sh, "models", "llama2c", "stories260K.bin")
    tok512 = os.path.join(sh, "models", "llama2c", "tok512.bin")
    if not os.path.exists(tiny) or not os.path.exists(stories):
        print("SKIP: %s or %s not found (set BT_SHARED)" % (tiny, stories))
        return 77
    ok = True

    def expect(c, what):
        nonlocal ok
        print("%s %s" % ("ok  " if c else "FAIL", what))
        ok = ok and bool(c)

    # 1. a llama.cpp-written llama GGUF against the numpy reference
    # (F16 weights widen to the same f32 on both sides: the f32 policy)
    expect(cf.check(tiny, [1, 450, 4996, 17354, 1701, 29889, 13, 3], cf.tol_exact_f32, bangtrace=bangtrace,
                    threads=1, label="llama-2-tiny-random.gguf vs ref.py"),
           "llama-2-tiny-random.gguf: every tensor within the f32 policy of the reference")
    expect(rope_name(bangtrace, tiny) == "norm", "inspect: llama-2-tiny-random.gguf rope is norm (%s)"
           % rope_name(bangtrace, tiny))

    with tempfile.TemporaryDirectory(prefix="bt-rope-") as tmp:
        # 2. stories260K as a GGUF: the same logits as through the llama2.c loader
        g = os.path.join(tmp, "stories260K.gguf")
        p = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "tools", "llama2c-to-gguf.py"),
                            stories, tok512, g], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if p.returncode != 0:
            expect(False, "llama2c-to-gguf.py: exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-500:]))
            return 1
        toks = [1, 403, 407, 261, 378, 1, 9, 90, 400, 30, 500, 7]
        a = logits(bangtrace, stories, toks, tmp, "bin", tokenizer=tok512)
        b = logits(bangtrace, g, toks, tmp, "gguf")
        diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
        expect(diff <= 1e-5, "stories260K: GGUF and llama2.c logits agree at all %d positions (max |diff| %.3g)"
               % (len(toks), diff))
        expect(cf.check(g, toks, cf.tol_exact_f32, bangtrace=bangtrace, threads=1,
                        label="stories260K.gguf vs ref.py"), "stories260K.gguf: every tensor within the f32 policy")
        expect(rope_name(bangtrace, g) == "norm", "inspect: stories260K.gguf rope is norm (%s)" % rope_name(bangtrace, g))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (cf.ref.RefError, cf.DumpError, ValueError, OSError, KeyError) as e:
        print("FAIL: %s" % e)
        sys.exit(1)
