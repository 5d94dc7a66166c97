"""common.py - what the PyTorch-engine checks share (record_check.py,
vllm_check.py): ok/FAIL lines, running bangtrace, and the comparison of
recorded statistics with a native `forward --dump`."""
import contextlib
import json
import math
import os
import sqlite3
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
import compare_forward as cf  # noqa: E402
from bangtrace import _lib  # noqa: E402

BT = sys.argv[1]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def ok(msg):
    print("ok: " + msg, flush=True)


def bt(*args, check=True):
    p = subprocess.run([BT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if check and p.returncode != 0:
        fail("bangtrace %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()[-300:]))
    return p


def native(folder, tokens, dump):
    """The native engine's tensors of a forward over tokens, by name (a MoE
    op's experts, blk.L.ffn_down.expert[E], as one tensor); None on failure."""
    p = bt("forward", "--model", folder, "--tokens", " ".join(map(str, tokens)), "--dump", dump, "--threads", "2")
    if p.returncode:
        return None
    _, parts = cf.load_dump(dump)
    ref = {}
    for k in sorted(parts):
        ref.setdefault(k.split(".expert[")[0], []).append(parts[k].reshape(-1))
    return {k: np.concatenate(v) for k, v in ref.items()}


def compare(label, names, stats, ref, absent_ok=()):
    """stats (rows of STAT_COUNT, in names' order) against ref's tensors:
    every name on both sides, counts equal, min/max/mean/rms within 1e-4
    (relative to the larger of the value and the rms); names in absent_ok
    may be unrecorded. Returns (worst relative difference, where)."""
    missing = sorted(set(ref) - set(names))
    if missing:
        fail("%s: the native dump has %s, the recorder's model layout does not" % (label, missing[:5]))
    worst, worst_name = 0.0, ""
    for i, name in enumerate(names):
        s = stats[i]
        if s[_lib.STAT_N] < 0:
            if name not in absent_ok:
                fail("%s: %s was not recorded at the prefill" % (label, name))
            continue
        if name not in ref:
            fail("%s: %s recorded, but the native dump has no such tensor" % (label, name))
            continue
        a = ref[name].astype(np.float64)
        v = a[np.isfinite(a)]
        n, mn, mx, mean, rms = a.size, v.min(), v.max(), v.mean(), math.sqrt((v * v).mean())
        if int(s[_lib.STAT_N]) != n:
            fail("%s: %s has %d elements, native %d" % (label, name, s[_lib.STAT_N], n))
        got = [s[_lib.STAT_MIN], s[_lib.STAT_MAX], s[_lib.STAT_MEAN], s[_lib.STAT_RMS]]
        for g, r, what in zip(got, [mn, mx, mean, rms], ("min", "max", "mean", "rms")):
            d = abs(g - r) / max(abs(r), rms, 1e-30)
            if d > worst:
                worst, worst_name = d, "%s %s" % (name, what)
            if not d <= 1e-4:
                fail("%s: %s %s %.8g, native %.8g (rel %.2g)" % (label, name, what, g, r, d))
    return worst, worst_name


def stays_exact(label, trace, engine=None, steps=None, what="bisect --reference finds no departure"):
    """`bisect --reference` finds no departure on a clean trace: the verdict
    "ENGINE stays within" and, with steps, top-1 agreement on all of them."""
    p = bt("bisect", "--reference", trace)
    verdict = "verdict: %s stays within" % engine if engine else "stays within"
    top = "top-1 agreement: %d of %d" % (steps, steps) if steps else ""
    if verdict not in p.stdout or top not in p.stdout:
        fail("%s: bisect --reference on a clean run:\n%s" % (label, p.stdout[-800:]))
    else:
        ok("%s: %s%s" % (label, what, ", top-1 %d of %d" % (steps, steps) if steps else ""))


def named_by_bisect(label, trace, step, layer, op, index):
    """A NaN written at (step, layer, op, index) is what `bisect` names as the
    first non-finite value, and where `bisect --reference` says the engine
    first departs."""
    p = bt("bisect", "--json", trace, check=False)
    try:
        fb = json.loads(p.stdout).get("first_nonfinite") or {}
    except ValueError:
        fail("%s: bisect --json: %s %s" % (label, p.stdout[-300:], p.stderr[-300:]))
        return
    want = {"step": step, "layer": layer, "op": op}
    got = {k: fb.get(k) for k in want}
    if got != want or fb.get("first_bad_index") != index:
        fail("%s: bisect names %s index %s; want %s index %d (json: %s)"
             % (label, got, fb.get("first_bad_index"), want, index, json.dumps(fb)[:600]))
    else:
        ok("%s: bisect names the injected NaN: step %d, layer %d, %s, index %d" % (label, step, layer, op, index))
    p = bt("bisect", "--reference", trace, check=False)
    if "first departs at blk.%d.%s, step %d" % (layer, op, step) not in p.stdout:
        fail("%s: bisect --reference on the injected run:\n%s" % (label, p.stdout[-800:]))
    else:
        ok("%s: bisect --reference departs at blk.%d.%s, step %d" % (label, layer, op, step))


def traces_in(d):
    """The traces in folder d, sorted (none when d does not exist)."""
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".db")) if os.path.isdir(d) else []


def trace_tokens(path):
    """A trace's prompt ids, generated ids and meta."""
    db = sqlite3.connect(path)
    p = [r[0] for r in db.execute("select token_id from tokens where role = 'prompt' order by seq")]
    g = [r[0] for r in db.execute("select token_id from tokens where role = 'gen' order by seq")]
    meta = dict(db.execute("select key, value from meta"))
    db.close()
    return p, g, meta


@contextlib.contextmanager
def reducer_fails(rec, at=2):
    """Inside: the recorder rec's step reduction raises at its at-th call."""
    orig, calls = rec.red.finish, {"n": 0}

    def boom():
        calls["n"] += 1
        if calls["n"] == at:
            raise RuntimeError("injected reducer failure")
        return orig()
    rec.red.finish = boom
    try:
        yield
    finally:
        rec.red.finish = orig


def done():
    print("%d failures" % len(failures))
    sys.exit(1 if failures else 0)
