"""ctypes binding of libbangtrace (src/api/bangtrace.h).

The library is found through BANGTRACE_LIB (a path), then next to this
package (a libbangtrace.so copied or linked there), then by the system
loader (`make install` puts libbangtrace.so.1 in $(libdir))."""
import ctypes
import ctypes.util
import os
import threading

API_VERSION = 1
STAT_COUNT = 12
(STAT_N, STAT_NAN, STAT_PINF, STAT_NINF, STAT_FINITE, STAT_MIN, STAT_MAX, STAT_ABSMAX,
 STAT_MEAN, STAT_RMS, STAT_FIRST_BAD_COL, STAT_FIRST_BAD_ROW) = range(STAT_COUNT)
F32, F16, BF16 = 0, 1, 2
FORCE = 1


class BangtraceError(RuntimeError):
    """A libbangtrace call failed; the message is the library's one line."""


_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("BANGTRACE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libbangtrace.so")]
    found = ctypes.util.find_library("bangtrace")
    out.append(found or "libbangtrace.so.1")
    return out


def lib():
    """The loaded library (loaded once; BangtraceError when none is found)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            try:
                L = ctypes.CDLL(path)
                break
            except OSError as e:
                tried.append(f"{path} ({e})")
        else:
            raise BangtraceError("libbangtrace not found: set BANGTRACE_LIB to the built "
                                 "libbangtrace.so; tried " + "; ".join(tried))
        _declare(L)
        v = L.bangtrace_api_version()
        if v < API_VERSION:
            raise BangtraceError(f"libbangtrace API {v} is older than this package's {API_VERSION}")
        _lib = L
        return L


def _declare(L):
    c_int, c_char_p, c_void_p, c_double = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_double
    P = ctypes.POINTER
    sig = {
        "bangtrace_api_version": (c_int, []),
        "bangtrace_error": (c_char_p, []),
        "bangtrace_model_open": (c_int, [c_char_p, P(c_void_p)]),
        "bangtrace_model_close": (None, [c_void_p]),
        "bangtrace_model_arch": (c_char_p, [c_void_p]),
        "bangtrace_model_n_layers": (c_int, [c_void_p]),
        "bangtrace_model_n_vocab": (c_int, [c_void_p]),
        "bangtrace_model_n_tensors": (c_int, [c_void_p]),
        "bangtrace_model_tensor": (c_int, [c_void_p, c_int, P(c_char_p), P(c_int), P(c_char_p), P(c_int)]),
        "bangtrace_model_tensor_find": (c_int, [c_void_p, c_char_p]),
        "bangtrace_model_weight_tensor": (c_int, [c_void_p, c_char_p]),
        "bangtrace_open": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, ctypes.c_uint, P(c_void_p)]),
        "bangtrace_meta": (c_int, [c_void_p, c_char_p, c_char_p]),
        "bangtrace_forward": (c_int, [c_void_p, P(ctypes.c_int32), c_int, c_int, P(c_double), c_int,
                                      P(ctypes.c_float), c_int]),
        "bangtrace_sampled": (c_int, [c_void_p, ctypes.c_int32, c_double]),
        "bangtrace_event": (c_int, [c_void_p, c_char_p, c_char_p]),
        "bangtrace_close": (c_int, [c_void_p, c_char_p, c_char_p]),
        "bangtrace_stats": (c_int, [c_void_p, c_int, c_int, c_int, P(c_double)]),
        # API 2
        "bangtrace_cached_prefix": (c_int, [c_void_p, P(ctypes.c_int32), c_int]),
        # API 3
        "bangtrace_moe_routes": (c_int, [c_void_p, c_int, P(ctypes.c_int32), P(ctypes.c_float), c_int, c_int]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name, None)
        if f is None:            # a function of a later API than the library's
            continue
        f.restype = res
        f.argtypes = args


def _b(s):
    return None if s is None else s.encode()


def check(rc):
    if rc < 0:
        raise BangtraceError(lib().bangtrace_error().decode(errors="replace"))
    return rc


class Tensor:
    __slots__ = ("slot", "name", "layer", "op", "width")

    def __init__(self, slot, name, layer, op, width):
        self.slot, self.name, self.layer, self.op, self.width = slot, name, layer, op, width

    def __repr__(self):
        return f"Tensor({self.slot}, {self.name!r}, width={self.width})"


class Model:
    """A model bangtrace can load (GGUF file or Hugging Face folder): its
    layout, the tensors a native run taps, in slot order."""

    def __init__(self, path):
        L = lib()
        h = ctypes.c_void_p()
        check(L.bangtrace_model_open(_b(os.fspath(path)), ctypes.byref(h)))
        self._h = h
        self.path = os.fspath(path)
        self.arch = L.bangtrace_model_arch(h).decode()
        self.n_layers = L.bangtrace_model_n_layers(h)
        self.n_vocab = L.bangtrace_model_n_vocab(h)
        self.tensors = []
        for i in range(L.bangtrace_model_n_tensors(h)):
            name, op = ctypes.c_char_p(), ctypes.c_char_p()
            layer, width = ctypes.c_int(), ctypes.c_int()
            check(L.bangtrace_model_tensor(h, i, ctypes.byref(name), ctypes.byref(layer), ctypes.byref(op),
                                           ctypes.byref(width)))
            self.tensors.append(Tensor(i, name.value.decode(), layer.value, op.value.decode(), width.value))
        self._by_name = {t.name: t for t in self.tensors}

    def tensor(self, name):
        return self._by_name.get(name)

    def weight_tensor(self, weight_name):
        """The tensor a weight (HF or GGUF name) is read by, or None."""
        i = lib().bangtrace_model_weight_tensor(self._h, _b(weight_name))
        return self.tensors[i] if i >= 0 else None

    def close(self):
        if self._h:
            lib().bangtrace_model_close(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Recording:
    """One trace: forward() per engine forward, sampled() per chosen token."""

    def __init__(self, model, trace_path, engine, settings=None, force=False):
        h = ctypes.c_void_p()
        check(lib().bangtrace_open(model._h, _b(os.fspath(trace_path)), _b(engine), _b(settings),
                                   FORCE if force else 0, ctypes.byref(h)))
        self._h = h
        self.model = model
        self.path = os.fspath(trace_path)

    def meta(self, key, value):
        check(lib().bangtrace_meta(self._h, _b(key), _b(str(value))))

    def forward(self, tokens, pos0, stats, logits, n_rows):
        """tokens: ints; stats: a flat sequence/buffer of n_tensors*STAT_COUNT
        doubles (ctypes array or numpy float64); logits: n_rows*n_vocab floats."""
        n = len(tokens)
        toks = (ctypes.c_int32 * n)(*tokens)
        check(lib().bangtrace_forward(self._h, toks, n, pos0, _ptr(stats, ctypes.c_double),
                                      len(self.model.tensors), _ptr(logits, ctypes.c_float), n_rows))

    def cached_prefix(self, tokens):
        """Before the first forward: the prompt's first tokens came from the
        engine's prefix cache (API 2; the first forward starts after them)."""
        if lib().bangtrace_api_version() < 2:
            raise BangtraceError("libbangtrace is older than API 2: no bangtrace_cached_prefix")
        n = len(tokens)
        toks = (ctypes.c_int32 * n)(*tokens)
        check(lib().bangtrace_cached_prefix(self._h, toks, n))

    def moe_routes(self, layer, experts, weights):
        """The open forward's routing in MoE layer `layer` (API 3): experts
        and weights of shape (rows, k), rank 0 first; rows the forward's."""
        if lib().bangtrace_api_version() < 3:
            raise BangtraceError("libbangtrace is older than API 3: no bangtrace_moe_routes")
        import numpy as np
        e = np.ascontiguousarray(experts, dtype=np.int32)
        w = np.ascontiguousarray(weights, dtype=np.float32)
        if e.ndim != 2 or e.shape != w.shape:
            raise BangtraceError(f"moe_routes: experts {e.shape} and weights {w.shape} must be (rows, k) alike")
        check(lib().bangtrace_moe_routes(self._h, int(layer), e.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                         w.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), e.shape[0], e.shape[1]))

    def sampled(self, token, logprob=float("nan")):
        check(lib().bangtrace_sampled(self._h, int(token), float(logprob)))

    def event(self, kind, detail=""):
        check(lib().bangtrace_event(self._h, _b(kind), _b(detail)))

    def close(self, status=None, finish_reason=None):
        if self._h:
            h, self._h = self._h, None
            check(lib().bangtrace_close(h, _b(status), _b(finish_reason)))


def _ptr(buf, ctype):
    """A pointer to a contiguous buffer: a ctypes array, a numpy array of the
    right dtype, or anything with the buffer protocol."""
    if isinstance(buf, ctypes.Array):
        return ctypes.cast(buf, ctypes.POINTER(ctype))
    if hasattr(buf, "ctypes"):            # numpy
        return buf.ctypes.data_as(ctypes.POINTER(ctype))
    arr = (ctype * len(buf))(*buf)
    return ctypes.cast(arr, ctypes.POINTER(ctype))


def stats(data, dtype, rows, width):
    """bangtrace's own statistics of host data (ctypes buffer or numpy)."""
    out = (ctypes.c_double * STAT_COUNT)()
    ptr = data.ctypes.data_as(ctypes.c_void_p) if hasattr(data, "ctypes") else ctypes.cast(data, ctypes.c_void_p)
    check(lib().bangtrace_stats(ptr, dtype, rows, width, out))
    return list(out)
