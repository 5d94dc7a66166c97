#!/usr/bin/env python3
"""dequant_check.py - every dequantizer of kernels/cpu, in every SIMD variant
this CPU runs, against gguf.quants.dequantize from the gguf PyPI package.

Blocks come from two sources: gguf.quants.quantize of random floats (types
gguf can quantize), and random raw blocks whose f16 scale fields hold random
finite halves (all types, incl. k-quants gguf cannot quantize). MXFP4's
scale is one E8M0 exponent byte, every value of which is valid input: its
raw blocks take all 256 at random, and a second set only the extremes (the
subnormal half scales of 0 and 1, and 252..255, where weights overflow to
Inf; 0xFF, NaN in the MX spec, is the scale 2^128 in ggml and gguf). The blocks
go through tests/dequant_tool (a check_PROGRAM) and the floats must match
gguf bit for bit: both compute in float32 with the same operations in the
same order, and every product of a scale and a small integer is exact. The
one allowed difference: a NaN must be NaN, its payload bits may differ
(only raw f16 input can hold NaN; F16C quiets signalling NaNs).

Exit 0 = pass, 1 = mismatch, 77 = SKIP (gguf not importable).
Env: BT_BUILDDIR (dir holding tests/dequant_tool; default: cwd)."""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.constants import GGML_QUANT_SIZES
except Exception as e:  # ImportError, or a broken install
    print(f"SKIP: cannot import gguf/numpy ({e})")
    sys.exit(77)

# type -> byte offsets of its f16 scale fields within one block
SCALES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}
# type -> byte offset of its E8M0 exponent byte within one block
E8M0 = {Q.MXFP4: 0}
E8M0_EXTREMES = np.array([0, 1, 2, 3, 126, 127, 128, 252, 253, 254, 255], dtype=np.uint8)
QUANTIZABLE = [Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.MXFP4]
TYPES = [Q.F32, Q.F16, Q.BF16] + list(SCALES) + list(E8M0)

rng = np.random.default_rng(20240611)


def random_halves(n, specials=False):
    """Finite f16 values over many octaves, both signs, some subnormal; with
    specials, one in eight is instead an extreme (+-65504, +-0, the
    smallest subnormal) or non-finite (+-Inf, NaN) scale, whose Inf * 0 and
    NaN must come out as gguf's."""
    mag = np.exp2(rng.uniform(-26, 8, n)).astype(np.float32)
    sign = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
    h = (mag * sign).astype(np.float16)
    if specials:
        sp = np.array([65504, -65504, 0, -0.0, 2.0 ** -24, np.inf, -np.inf, np.nan], dtype=np.float16)
        pick = rng.random(n) < 0.125
        h[pick] = sp[rng.integers(0, sp.size, int(pick.sum()))]
    return h


def raw_blocks(qt, n_blocks, specials=False):
    blck, tsize = GGML_QUANT_SIZES[qt]
    if qt == Q.F32:
        return rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8)
    if qt in (Q.F16, Q.BF16):
        # every bit pattern is fair game: Inf, NaN, subnormals, -0
        return rng.integers(0, 256, n_blocks * 2, dtype=np.uint8)
    b = rng.integers(0, 256, (n_blocks, tsize), dtype=np.uint8)
    for off in SCALES.get(qt, []):
        b[:, off:off + 2] = random_halves(n_blocks, specials).view(np.uint8).reshape(n_blocks, 2)
    if qt in E8M0 and specials:
        b[:, E8M0[qt]] = E8M0_EXTREMES[rng.integers(0, E8M0_EXTREMES.size, n_blocks)]
    return b.reshape(-1)


def quantized_blocks(qt, n_blocks):
    blck, _ = GGML_QUANT_SIZES[qt]
    x = (rng.standard_normal((n_blocks, blck)) * np.exp2(rng.uniform(-8, 4, (n_blocks, 1)))).astype(np.float32)
    return np.asarray(gguf.quants.quantize(x.reshape(1, -1), qt)).view(np.uint8).reshape(-1)


def reference(qt, raw):
    blck, tsize = GGML_QUANT_SIZES[qt]
    n = raw.size // tsize * blck
    with np.errstate(invalid="ignore", over="ignore"):   # Inf * 0 on purpose
        out = gguf.quants.dequantize(raw.reshape(1, -1), qt)
    return np.asarray(out, dtype=np.float32).reshape(-1)[:n]


def run_tool(tool, qt, raw, variant, tmp):
    src = os.path.join(tmp, "in.bin")
    dst = os.path.join(tmp, "out.bin")
    raw.tofile(src)
    r = subprocess.run([tool, str(int(qt)), src, dst, variant], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dequant_tool {int(qt)} {variant} failed: {r.stderr.strip()}")
    return np.fromfile(dst, dtype=np.float32)


def compare(name, got, want):
    """None if equal bit for bit (NaN == any NaN), else a message."""
    if got.shape != want.shape:
        return f"{name}: {got.size} values, want {want.size}"
    gb, wb = got.view(np.uint32), want.view(np.uint32)
    bad = (gb != wb) & ~(np.isnan(got) & np.isnan(want))
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return (f"{name}: {int(bad.sum())} of {got.size} values differ; first at {i}: "
            f"got {got[i]!r} (0x{gb[i]:08x}), gguf {want[i]!r} (0x{wb[i]:08x})")


def main():
    build = os.environ.get("BT_BUILDDIR", ".")
    tool = os.path.join(build, "tests", "dequant_tool")
    if not os.access(tool, os.X_OK):
        print(f"FAIL: {tool} is missing (build it with `make check`, or set BT_BUILDDIR)")
        return 1
    r = subprocess.run([tool, "--variants"], capture_output=True, text=True, check=True)
    variants = r.stdout.split()
    for v in ("avx2", "avx512"):
        if v not in variants:
            print(f"note: variant {v} not available on this CPU, not checked")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for qt in TYPES:
            blck, _ = GGML_QUANT_SIZES[qt]
            n_blocks = max(4, 8192 // blck) + 3  # odd count: vector tails
            cases = [("random blocks", raw_blocks(qt, n_blocks))]
            if qt in SCALES:
                cases.append(("extreme/non-finite scales", raw_blocks(qt, n_blocks, True)))
            if qt in E8M0:
                cases.append(("extreme exponents", raw_blocks(qt, n_blocks, True)))
            if qt in QUANTIZABLE:
                cases.append(("gguf.quantize", quantized_blocks(qt, n_blocks)))
            for how, raw in cases:
                want = reference(qt, raw)
                for v in variants:
                    got = run_tool(tool, qt, raw, v, tmp)
                    msg = compare(f"{qt.name} {v} ({how})", got, want)
                    if msg:
                        print("FAIL", msg)
                        failures += 1
                    else:
                        print(f"ok   {qt.name:5} {v:7} {how}: {want.size} values bit-exact")
    if failures:
        print(f"{failures} mismatch(es)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
