"""What the serving-engine recorders (vllm.py, sglang.py) share: a trace
per request id in one folder, failures that never take the engine down
(logged once per kind, the traces of the step being recorded ended with
status error), and the statistics of a prompt prefilled in chunks merged
into one step."""
import functools
import os
import re


class Refused(RuntimeError):
    """A configuration the recorder cannot see into (one line)."""


def guard(fn):
    """A recorder method that must not take the engine down: an exception
    abandons the step's recording (logged, once per kind) and the engine
    goes on."""
    @functools.wraps(fn)
    def w(self, *a, **kw):
        try:
            return fn(self, *a, **kw)
        except Exception as e:       # noqa: BLE001 - anything, the engine must go on
            self._failed(fn.__name__, e)
            return None
    return w


def safe_name(rid):
    """A request id as a file name (outside [A-Za-z0-9._-]: _)."""
    s = re.sub(r"[^A-Za-z0-9._-]", "_", str(rid))[:120].lstrip(".")
    return s or "request"


def merge_stats(a, b, width):
    """Statistics of rows A then rows B from each part's (host, 1-D numpy
    float64 of STAT_COUNT; N < 0: not recorded): a prompt prefilled in
    chunks is one step. B's first bad row is counted after A's rows, then
    bangtrace.torch.merge_parts does the rest."""
    from . import _lib as L
    from .torch import merge_parts
    import numpy as np
    if a[L.STAT_N] < 0:
        return b.copy()
    if b[L.STAT_N] < 0:
        return a.copy()
    b = b.copy()
    if b[L.STAT_FIRST_BAD_ROW] >= 0:
        b[L.STAT_FIRST_BAD_ROW] += a[L.STAT_N] // width
    return merge_parts(np.stack([a, b]))


def merge_all(a, b, widths, latest=()):
    """A chunked prefill's statistics: each tensor's rows of both chunks;
    the tensors in latest (a state) as the last chunk left them."""
    import numpy as np
    out = np.empty_like(a)
    for k, w in enumerate(widths):
        out[k] = b[k] if k in latest and b[k][0] >= 0 else merge_stats(a[k], b[k], w)
    return out


class RequestTraces:
    """The traces of one engine's requests, DIR/<request id>.db. A subclass
    sets dir, bm, lib, settings, version, dtype, engine (the trace's engine
    name), engine_label and unit ("step", "pass") for its messages, log, and
    defines _reset_step (what a failure abandons) and may define
    _before_close(r, status)."""

    def _init_requests(self):
        self.reqs = {}             # request id -> the subclass's request (with .rec, .path)
        self.skipped = set()       # request ids not recorded (an unknown cached prefix, a failed step)
        self.failures = {}         # (method, exception type) -> count
        self.cur_reqs = []         # the requests of the step being recorded

    def _recording(self, rid):
        """A new trace for request rid (an existing file is never replaced:
        -2, -3 ... are added): (Recording, path)."""
        base = os.path.join(self.dir, safe_name(rid))
        path, k = base + ".db", 1
        while os.path.exists(path):
            k += 1
            path = f"{base}-{k}.db"
        rec = self.lib.Recording(self.bm, path, self.engine, self.settings)
        rec.meta("request_id", str(rid))
        rec.meta("engine_version", self.version)
        rec.meta("dtype", self.dtype)
        return rec, path

    def _failed(self, where, e):
        key = (where, type(e).__name__)
        if key not in self.failures:
            self.log.warning("bangtrace: recording failed in %s (%s: %s); this %s is not recorded, %s goes on "
                             "(further failures of this kind are counted, not logged)", where, type(e).__name__, e,
                             self.unit, self.engine_label)
        self.failures[key] = self.failures.get(key, 0) + 1
        self._reset_step(e)
        for rid in self.cur_reqs:            # their traces would miss this step: end them here
            r = self.reqs.get(rid)
            if r is not None:
                try:
                    r.rec.event("engine_error", f"bangtrace could not record this {self.unit}: "
                                f"{type(e).__name__}: {e}")
                except Exception:            # noqa: BLE001
                    pass
            self._close(rid, "error")
            self.skipped.add(rid)
        self.cur_reqs = []

    def close_all(self):
        """Close every open trace: the engine stops (status ok: their steps
        were durable already)."""
        for rid in list(self.reqs):
            self._close(rid, "ok")

    def _before_close(self, rid, r, status):
        pass

    def _close(self, rid, status):
        r = self.reqs.pop(rid, None)
        if r is None:
            return
        try:
            self._before_close(rid, r, status)
            r.rec.close(status)
        except self.lib.BangtraceError as e:
            self.log.warning("bangtrace: closing %s: %s", r.path, e)

