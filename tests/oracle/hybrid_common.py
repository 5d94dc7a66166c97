"""hybrid_common.py - shared by the tests of the hybrid (gated delta net)
oracle: making the tiny models with tools/make-tiny-hybrid.py, finding the
llama_logits helper, the prompts."""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("BT_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BT_BUILDDIR") or os.path.join(SRC, "build")

# Prompts in the GPT-2 vocabulary of the tiny models (ids < 50257): a long
# one that wraps the conv kernel and the recurrence many times, a short one,
# a one-token one, and repeats (a state that must keep them apart).
PROMPTS = [
    [464, 3290, 373, 257, 1263, 3797, 13, 632, 1965, 284, 262, 3952, 290, 2497, 257, 3797,
     11, 1049, 1110, 318, 4950, 13, 383, 3290, 373, 3772, 318, 1204, 6, 40, 33, 50256],
    [15496, 11, 995, 0, 198],
    [7],
    [100, 100, 100, 100, 200, 200, 200, 200, 100, 200, 100, 200],
]


_TOOL = []


def tool():
    """The tools/make-tiny-hybrid.py module (loaded once: it keeps the parsed
    vocabulary)."""
    if _TOOL:
        return _TOOL[0]
    path = os.path.join(SRC, "tools", "make-tiny-hybrid.py")
    spec = importlib.util.spec_from_file_location("make_tiny_hybrid", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _TOOL.append(mod)
    return mod


def vocab():
    shared = os.environ.get("BT_SHARED") or os.path.join(SRC, "..", "shared")
    p = os.path.join(shared, "models", "gguf-vocab", "ggml-vocab-gpt-2.gguf")
    return p if os.path.isfile(p) else None


def skip_reason():
    """Why these tests cannot run here, or None."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return "numpy is not installed"
    try:
        t = tool()
        t.import_gguf()
    except SystemExit as e:
        return "no usable gguf package (%s)" % e
    except Exception as e:
        return "tools/make-tiny-hybrid.py cannot run: %s" % e
    if vocab() is None:
        return "no shared GPT-2 vocabulary (set BT_SHARED)"
    return None


def make(path, fmt="gguf", seed=0, arch="qwen35", **kw):
    return tool().make(path, fmt, arch, seed, vocab(), **kw)


def llama_logits():
    p = os.path.join(BUILD, "tests", "oracle", "llama_logits")
    return p if os.access(p, os.X_OK) else None


def say(*a):
    print(*a)
    sys.stdout.flush()
