#!/usr/bin/env python3
"""compare_forward.py - compare an engine tensor dump with the reference.

The dump contract (`bangtrace forward --model M --tokens "..." --dump DIR`):
DIR/<tensor name>.f32 holds raw little-endian float32, T rows x width, for
every tensor the engine computed, and DIR/meta.json is
{"tokens": [...], "tensors": {"blk.0.attn_q": [T, width], ...}}.

Every tensor the reference computes must be in the dump with the same
shape; each is judged by max |engine - reference| against a tolerance that a
policy function picks per tensor. The report lists the worst tensors (by
diff / tolerance) and names the first tensor, in forward order, that is out
of tolerance: that is where a bug entered.

Library: load_dump(dir), compare(ref_out, dump, tol, order), run_forward(...),
         check_all(label, got, ref_out, bound, fail)
CLI:     compare_forward.py --model M --tokens "1 2 3" (--dump DIR | --bangtrace BIN)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True     # never litter the source tree with __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref  # noqa: E402


class DumpError(Exception):
    """A dump directory that breaks the contract; the message names the file."""


def load_dump(d):
    """(tokens, {name: float32 array [T, width]}) from a dump directory."""
    mp = os.path.join(d, "meta.json")
    try:
        with open(mp) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise DumpError("%s: cannot read: %s" % (mp, e))
    if not isinstance(meta, dict) or not isinstance(meta.get("tensors"), dict) \
            or not isinstance(meta.get("tokens"), list):
        raise DumpError("%s: needs a \"tokens\" list and a \"tensors\" object" % mp)
    out = {}
    for name, shape in meta["tensors"].items():
        if not (isinstance(shape, list) and len(shape) == 2
                and all(isinstance(v, int) and v > 0 for v in shape)):
            raise DumpError("%s: tensor %s has shape %r, want [T, width]" % (mp, name, shape))
        fp = os.path.join(d, name + ".f32")
        try:
            raw = np.fromfile(fp, dtype="<f4")
        except OSError as e:
            raise DumpError("%s: cannot read: %s" % (fp, e))
        if raw.size != shape[0] * shape[1]:
            raise DumpError("%s: %d floats, meta.json says %d x %d"
                            % (fp, raw.size, shape[0], shape[1]))
        out[name] = raw.reshape(shape)
    return [int(t) for t in meta["tokens"]], out


# Tolerance policies: fn(name, ref_array) -> max allowed |diff|.

def tol_exact_f32(name, r):
    """Float weights (F32, F16): the engine differs from float64 only by f32
    rounding and summation order (observed <= 2e-6 on these models). The
    per-layer hidden state and the logits get an absolute 1e-4; the other
    intermediates 1e-4 relative to their magnitude."""
    if name == "logits" or name.endswith(".ffn_resid"):
        return 1e-4
    return 1e-4 * max(1.0, float(np.abs(r).max()))


def tol_scaled(rel):
    """rel * max(1, absmax(ref)): for quantized weights, which the engine and
    the reference dequantize to the same f32 values, and for deep models
    where the hidden state grows large."""
    def fn(name, r):
        return rel * max(1.0, float(np.abs(r).max()))
    return fn


class Result:
    def __init__(self):
        self.rows = []          # (name, maxdiff, tol, absmax)
        self.problems = []      # contract problems: missing tensor, bad shape, NaN
        self.first_bad = None   # first tensor in forward order over tolerance

    @property
    def ok(self):
        return not self.problems and self.first_bad is None

    def report(self, out=sys.stdout, worst=8, always=("logits",)):
        rows = sorted(self.rows, key=lambda r: r[1] / r[2], reverse=True)
        print("  %-22s %12s %12s %10s" % ("tensor", "max|diff|", "tolerance", "absmax"), file=out)
        shown = set()
        for name, d, t, a in rows[:worst]:
            print("  %-22s %12.3e %12.3e %10.3g%s" % (name, d, t, a, "  FAIL" if d > t else ""),
                  file=out)
            shown.add(name)
        for name, d, t, a in self.rows:
            if name in always and name not in shown:
                print("  %-22s %12.3e %12.3e %10.3g%s" % (name, d, t, a, "  FAIL" if d > t else ""),
                      file=out)
        for p in self.problems:
            print("  problem: %s" % p, file=out)
        if self.first_bad:
            name, d, t, _ = self.first_bad
            print("  first tensor over tolerance: %s (max|diff| %.3e > %.3e)" % (name, d, t), file=out)


def compare(ref_out, dump, tol, order):
    """Compare dump {name: array} against ref_out {name: array} for every
    name in `order` (forward order). Returns a Result."""
    res = Result()
    for name in order:
        r = ref_out[name]
        e = dump.get(name)
        if e is None:
            res.problems.append("%s: missing from the dump" % name)
            continue
        if e.shape != r.shape:
            res.problems.append("%s: dump shape %s, reference %s" % (name, list(e.shape), list(r.shape)))
            continue
        absmax = float(np.abs(r).max())
        if not np.all(np.isfinite(e)):
            bad = int(np.flatnonzero(~np.isfinite(e.ravel()))[0])
            d = float("inf")
            res.problems.append("%s: non-finite value at row %d col %d"
                                % (name, bad // e.shape[1], bad % e.shape[1]))
        else:
            d = float(np.abs(e.astype(np.float64) - r).max())
        t = tol(name, r)
        res.rows.append((name, d, t, absmax))
        if d > t and res.first_bad is None:
            res.first_bad = (name, d, t, absmax)
    return res


def run_forward(bangtrace, model, tokens, dump_dir, tokenizer=None, threads=None, timeout=120):
    """Run `bangtrace forward` into dump_dir. Raises DumpError on failure."""
    cmd = [bangtrace, "forward", "--model", model, "--tokens", " ".join(str(t) for t in tokens),
           "--dump", dump_dir]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    if threads:
        cmd += ["--threads", str(threads)]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DumpError("%s: %s" % (" ".join(cmd), e))
    if p.returncode != 0:
        raise DumpError("%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                             p.stderr.decode(errors="replace").strip()[-2000:]))


def check(model, tokens, tol, dump_dir=None, bangtrace=None, tokenizer=None, threads=None,
          label=None, out=sys.stdout):
    """Reference vs engine for one model and token list; prints a report and
    returns True when everything is within tolerance."""
    label = label or os.path.basename(model)
    m = ref.load_model(model)
    r = ref.forward(m, tokens)
    tmp = None
    try:
        if dump_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="bt-dump-")
            dump_dir = tmp.name
            run_forward(bangtrace, model, tokens, dump_dir, tokenizer, threads)
        dtoks, dump = load_dump(dump_dir)
    except DumpError as e:
        print("FAIL %s: %s" % (label, e), file=out)
        return False
    finally:
        if tmp is not None:
            tmp.cleanup()
    res = compare(r, dump, tol, ref.tensor_names(m.cfg["n_layers"], m.cfg.get("qk_norm", False)))
    if dtoks != list(tokens):
        res.problems.append("meta.json tokens %s differ from the requested %s" % (dtoks, list(tokens)))
    print("%s %s (%d tokens, %d tensors)" % ("ok  " if res.ok else "FAIL", label, len(tokens),
                                            len(res.rows)), file=out)
    res.report(out)
    return res.ok


def main(argv=None):
    ap = argparse.ArgumentParser(description="compare an engine tensor dump with the numpy reference")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help='space-separated ids, e.g. "1 2 3"')
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--dump", metavar="DIR", help="an existing dump directory")
    g.add_argument("--bangtrace", metavar="BIN", help="run BIN forward to make the dump")
    ap.add_argument("--tokenizer")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--rel", type=float,
                    help="tolerance rel*max(1,absmax) for every tensor (default: the f32 policy)")
    a = ap.parse_args(argv)
    tol = tol_scaled(a.rel) if a.rel else tol_exact_f32
    try:
        ok = check(a.model, [int(s) for s in a.tokens.split()], tol, a.dump, a.bangtrace,
                   a.tokenizer, a.threads)
    except (ref.RefError, ValueError, OSError) as e:
        print("compare_forward.py: %s" % e, file=sys.stderr)
        return 1
    return 0 if ok else 1

def check_all(label, got, ref_out, bound, fail):
    """Every name either side computes must be on both sides with one shape
    and max |got - ref| <= bound(name, ref tensor); fail(msg) reports each
    miss. Returns (worst name, worst diff)."""
    worst = ("", 0.0)
    for name in sorted(set(ref_out) | set(got)):
        if name not in got:
            fail("%s: bangtrace did not dump %s" % (label, name))
            continue
        if name not in ref_out:
            fail("%s: bangtrace dumped %s, which the reference does not compute" % (label, name))
            continue
        a, b = got[name], ref_out[name]
        if a.shape != b.shape:
            fail("%s: %s has shape %s, reference %s" % (label, name, a.shape, b.shape))
            continue
        d = float(np.max(np.abs(a.astype(np.float64) - b)))
        t = bound(name, b)
        if not d <= t:
            fail("%s: %s max abs diff %.3g > %.3g" % (label, name, d, t))
        if d > worst[1]:
            worst = (name, d)
    return worst


if __name__ == "__main__":
    sys.exit(main())
