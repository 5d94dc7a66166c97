#!/usr/bin/env python3
"""ref.py - an independent numpy reference of the Llama-family forward pass
(llama, mistral, qwen2, qwen3).

This is the correctness oracle for the C engine, so it shares nothing with
it: weights are read straight from the model file (llama2.c legacy
checkpoints by hand, GGUF through the `gguf` package, quantized blocks
dequantized by gguf.quants), and the arithmetic is float64 unless --f32 asks
for float32.

Every intermediate is returned under the engine's stable tensor names
(token_embd, blk.L.attn_norm ... blk.L.ffn_resid, output_norm, logits), each
an array of shape [T, width], so a dump of the engine can be compared name
by name.

RoPE is the "normal" variant on adjacent pairs (x[2i], x[2i+1]) with
theta = pos * base^(-2i/rope_dim); the first rope_dim dims of each head are
rotated and the rest pass through. llama2.c and llama.cpp's LLAMA arch both
use it (the HF->GGUF converter permutes Wq/Wk to make that true). qwen2 and
qwen3 use the NEOX variant (pairs (x[i], x[i + rope_dim/2]), rows as HF
stores them), as llama.cpp's LLAMA_ROPE_TYPE_NEOX. Llama 3 scaling: theta
of pair i is divided by rope_freqs.weight[i]; linear scaling multiplies it
by 1/rope.scaling.factor. qwen2 adds q/k/v biases (optional elsewhere, as
attn_output.bias for llama); qwen3 applies an rmsnorm to each head of q and
k (attn_q_norm / attn_k_norm weights, tapped under those names) before
RoPE.

Library use:
    m = ref.load_model(path)            # llama2.c .bin or GGUF
    out = ref.forward(m, [1, 2, 3])      # {name: [T, width]}
    ids = ref.greedy(m, [1], 200)
CLI: ref.py --model M --tokens "1 2 3" [--f32] [--dump DIR] [--greedy N]
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

LAYER_OPS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_ctx",
             "attn_output", "attn_resid", "ffn_norm", "ffn_gate", "ffn_up",
             "ffn_act", "ffn_down", "ffn_resid")
# Architectures this reference computes: rope kind and whether q/k are
# normed per head. Written from llama.cpp's src/models/<arch>.cpp, not from
# bangtrace's descriptor.
ARCHS = {"llama": ("norm", False), "mistral": ("norm", False),
         "qwen2": ("neox", False), "qwen3": ("neox", True), "qwen3moe": ("neox", True),
         "gpt-oss": ("neox", False)}

# The positions of the rows of each expert tensor of the last forward()
# ("blk.0.ffn_down.expert[3]": [0, 5, 6]): an expert sees only its tokens.
LAST_POSITIONS = {}


class RefError(Exception):
    """A model file the reference cannot read; the message names file and field."""


def tensor_names(n_layers, qk_norm=False):
    """All stable tensor names of one forward, in the order they are computed."""
    names = ["token_embd"]
    ops = LAYER_OPS if not qk_norm else (LAYER_OPS[:1] + ("attn_q_norm", "attn_k_norm") + LAYER_OPS[1:])
    for L in range(n_layers):
        names += ["blk.%d.%s" % (L, op) for op in ops]
    return names + ["output_norm", "logits"]


class Model:
    """Hyperparameters in `cfg` and weights by GGUF-style name (without the
    ".weight" suffix), fetched through get() as float arrays: matrices are
    (n_out, n_in) so y = W @ x, vectors are 1-D."""

    def __init__(self, path, fmt, cfg, getter, cache=True):
        self.path = path
        self.format = fmt
        self.cfg = cfg
        self._getter = getter
        self._cache = {} if cache else None

    def get(self, name, dtype=np.float64):
        key = (name, np.dtype(dtype).str)
        if self._cache is not None and key in self._cache:
            return self._cache[key]
        w = np.asarray(self._getter(name), dtype=dtype)
        if self._cache is not None:
            self._cache[key] = w
        return w


# ---------------------------------------------------------------- llama2.c

def load_llama2c(path):
    """Read a llama2.c legacy (version 0) checkpoint. Raises RefError."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 28:
        raise RefError("%s: too short for a llama2.c header (%d bytes)" % (path, len(raw)))
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    for field, v in (("dim", dim), ("hidden_dim", hidden), ("n_layers", n_layers),
                     ("n_heads", n_heads), ("n_kv_heads", n_kv), ("vocab_size", vocab),
                     ("seq_len", seq)):
        if v <= 0:
            raise RefError("%s: header field %s = %d is not positive" % (path, field, v))
    if dim % n_heads or n_heads % n_kv:
        raise RefError("%s: dim %d / n_heads %d / n_kv_heads %d do not divide"
                       % (path, dim, n_heads, n_kv))
    hs = dim // n_heads
    kv_dim = n_kv * hs
    L = n_layers
    shapes = [("token_embd", (vocab, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)),
              ("wk", (L, kv_dim, dim)), ("wv", (L, kv_dim, dim)), ("wo", (L, dim, dim)),
              ("rms_ffn", (L, dim)), ("w1", (L, hidden, dim)), ("w2", (L, dim, hidden)),
              ("w3", (L, hidden, dim)), ("rms_final", (dim,)),
              ("freq_cis_real", (seq, hs // 2)), ("freq_cis_imag", (seq, hs // 2))]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    need = sum(int(np.prod(s)) for _, s in shapes)
    have = (len(raw) - 28) // 4
    if have < need:
        raise RefError("%s: %d floats after the header, the header implies %d"
                       % (path, have, need))
    flat = np.frombuffer(raw, dtype="<f4", count=need, offset=28)
    arrs, off = {}, 0
    for name, s in shapes:
        n = int(np.prod(s))
        arrs[name] = flat[off:off + n].reshape(s)
        off += n
    per_layer = {"attn_norm": "rms_att", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
                 "attn_output": "wo", "ffn_norm": "rms_ffn", "ffn_gate": "w1",
                 "ffn_up": "w3", "ffn_down": "w2"}

    def getter(name):
        if name == "token_embd":
            return arrs["token_embd"]
        if name == "output_norm":
            return arrs["rms_final"]
        if name == "output":
            return arrs["token_embd"] if shared else arrs["wcls"]
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "blk" and parts[2] in per_layer:
            return arrs[per_layer[parts[2]]][int(parts[1])]
        raise RefError("%s: no weight named %s" % (path, name))

    cfg = dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
               n_kv_heads=n_kv, head_dim=hs, n_vocab=vocab, ctx_len=seq,
               norm_eps=1e-5, rope_base=10000.0, rope_dim=hs, tied_output=shared,
               arch="llama", rope_kind="norm", qk_norm=False, rope_scale=1.0)
    m = Model(path, "llama2c", cfg, getter)
    m.has = lambda name: name in ("token_embd", "output_norm", "output") or (
        name.split(".")[-1] in per_layer)
    return m


# -------------------------------------------------------------------- GGUF

def _field(reader, key, default=None, required=False):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise RefError("%s: missing GGUF key %s" % (reader.path, key))
        return default
    return f.contents()


def load_gguf(path, cache=None):
    """Read a GGUF llama model with gguf.GGUFReader. cache=None caches
    dequantized weights only for small files. Raises RefError."""
    try:
        import gguf
    except ImportError as e:
        raise RefError("%s: the gguf Python package is needed for GGUF files (%s)" % (path, e))
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as e:  # the package raises ValueError, struct.error, ...
        raise RefError("%s: not a readable GGUF file: %s" % (path, e))
    reader.path = path
    arch = _field(reader, "general.architecture", required=True)
    if arch not in ARCHS:
        raise RefError("%s: general.architecture is %r, supported: %s" % (path, arch, ", ".join(ARCHS)))
    rope_kind, qk_norm = ARCHS[arch]
    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise RefError("%s: no token_embd.weight tensor (vocab-only file?)" % path)

    a = arch + "."
    dim = int(_field(reader, a + "embedding_length", required=True))
    n_heads = int(_field(reader, a + "attention.head_count", required=True))
    n_kv = int(_field(reader, a + "attention.head_count_kv", n_heads))
    head_dim = int(_field(reader, a + "attention.key_length", dim // n_heads))
    rope_scale = 1.0
    yarn = None
    st = _field(reader, a + "rope.scaling.type")
    if st == "linear":
        rope_scale = 1.0 / float(_field(reader, a + "rope.scaling.factor", 1.0))
    elif st == "yarn":
        factor = float(_field(reader, a + "rope.scaling.factor", 1.0))
        rope_scale = 1.0 / factor
        if factor > 1.0:
            yarn = dict(factor=factor,
                        orig_ctx=int(_field(reader, a + "rope.scaling.original_context_length",
                                            _field(reader, a + "context_length", 2048))),
                        attn_factor=float(_field(reader, a + "rope.scaling.attn_factor", 1.0)))
    elif st not in (None, "none"):
        raise RefError("%s: rope scaling %r is not supported" % (path, st))
    cfg = dict(
        dim=dim,
        hidden_dim=int(_field(reader, a + "feed_forward_length", required=True)),
        n_layers=int(_field(reader, a + "block_count", required=True)),
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        n_vocab=int(tensors["token_embd.weight"].shape[1]),
        ctx_len=int(_field(reader, a + "context_length", 2048)),
        norm_eps=float(_field(reader, a + "attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(_field(reader, a + "rope.freq_base", 10000.0)),
        rope_dim=int(_field(reader, a + "rope.dimension_count", head_dim)),
        tied_output="output.weight" not in tensors,
        arch=arch, rope_kind=rope_kind, qk_norm=qk_norm, rope_scale=rope_scale,
        n_expert=int(_field(reader, a + "expert_count", 0)),
        n_expert_used=int(_field(reader, a + "expert_used_count", 0)),
        yarn=yarn)
    if arch == "gpt-oss":
        # sinks, the sliding window on the layers of the pattern (llama.cpp's
        # default 2: every layer but each second one), the post-attention norm
        # in ffn_norm's place, experts with biases and the clamped SwiGLU
        win = int(_field(reader, a + "attention.sliding_window", 0))
        pat = _field(reader, a + "attention.sliding_window_pattern", 2)
        if isinstance(pat, list):
            swa = [bool(v) for v in pat[:cfg["n_layers"]]]
        else:
            swa = [int(pat) == 0 or L % int(pat) < int(pat) - 1 for L in range(cfg["n_layers"])]
        cfg.update(sinks=True, window=win, swa=swa, ffn_norm_name="post_attention_norm", oai_moe=True)
    if n_heads <= 0 or n_kv <= 0 or n_heads % n_kv:
        raise RefError("%s: head_count %d / head_count_kv %d invalid" % (path, n_heads, n_kv))
    if cfg["rope_dim"] > head_dim or cfg["rope_dim"] % 2:
        raise RefError("%s: rope.dimension_count %d invalid for head_dim %d"
                       % (path, cfg["rope_dim"], head_dim))

    def getter(name):
        full = name if name.endswith(".bias") else "output.weight" if name == "output" else name + ".weight"
        if name == "output" and full not in tensors:
            full = "token_embd.weight"
        t = tensors.get(full)
        if t is None:
            raise RefError("%s: missing tensor %s" % (path, full))
        # ggml order: ne[0] is the row length, so reverse for numpy.
        shape = tuple(int(n) for n in reversed(list(t.shape)))
        qt = t.tensor_type
        if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w = np.asarray(t.data)
        else:
            try:
                w = gguf.quants.dequantize(np.asarray(t.data), qt)
            except NotImplementedError:
                raise RefError("%s: tensor %s has type %s, which gguf.quants cannot dequantize"
                               % (path, full, qt.name))
        return w.reshape(shape)

    if cache is None:
        cache = os.path.getsize(path) < (64 << 20)
    m = Model(path, "gguf", cfg, getter, cache=cache)
    m.reader = reader
    m.has = lambda name: (name if name.endswith(".bias") else name + ".weight") in tensors
    return m


def load_model(path):
    """A llama2.c checkpoint or a GGUF file, by content."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return load_gguf(path)
    return load_llama2c(path)


# ----------------------------------------------------------------- forward

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_theta(pos, base, rope_dim, yarn):
    """YaRN (as llama.cpp's context and ggml's rope_ext apply it: ext_factor
    1, beta_fast 32, beta_slow 1): pair i's angle is the interpolated
    pos * theta_i / factor and the extrapolated pos * theta_i mixed by a ramp
    that is 1 below the correction dim of beta_fast and 0 above that of
    beta_slow; the magnitude scale is attn_factor * (1 + 0.1 ln factor) /
    (1 + 0.1 ln factor) * (1 + 0.1 ln factor). Returns (theta [T, half], mscale)."""
    half = rope_dim // 2
    f, n0 = yarn["factor"], yarn["orig_ctx"]

    def corr(turns):
        return rope_dim * np.log(n0 / (turns * 2 * np.pi)) / (2 * np.log(base))
    lo = max(0.0, np.floor(corr(32.0)))
    hi = min(rope_dim - 1.0, np.ceil(corr(1.0)))
    i = np.arange(half, dtype=np.float64)
    ramp = 1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)
    th = base ** (-2.0 * i / rope_dim)
    ext = np.asarray(pos, dtype=np.float64)[:, None] * th[None, :]
    theta = ext / f * (1.0 - ramp) + ext * ramp
    g = 1.0 + 0.1 * np.log(f)
    return theta, yarn["attn_factor"] * g / g * g


def rope(x, pos, base, rope_dim, kind="norm", factors=None, scale=1.0, yarn=None):
    """x: [T, n_heads, head_dim]; pos: [T]. kind "norm" rotates adjacent
    pairs (2i, 2i+1), "neox" the halves (i, i + rope_dim/2); pair i turns by
    pos * scale * base^(-2i/rope_dim) / factors[i] (yarn: yarn_theta's angles
    and magnitude)."""
    half = rope_dim // 2
    i = np.arange(half, dtype=np.float64)
    inv = base ** (-2.0 * i / rope_dim) * scale                   # [half]
    if factors is not None:
        inv = inv / np.asarray(factors, dtype=np.float64)
    theta = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [T, half]
    msc = 1.0
    if yarn is not None:
        theta, msc = yarn_theta(pos, base, rope_dim, yarn)
    c = (np.cos(theta) * msc).astype(x.dtype)[:, None, :]
    s = (np.sin(theta) * msc).astype(x.dtype)[:, None, :]
    out = x.copy()
    if kind == "neox":
        a = x[..., 0:half]
        b = x[..., half:rope_dim]
        out[..., 0:half] = a * c - b * s
        out[..., half:rope_dim] = a * s + b * c
        return out
    a = x[..., 0:rope_dim:2]
    b = x[..., 1:rope_dim:2]
    out[..., 0:rope_dim:2] = a * c - b * s
    out[..., 1:rope_dim:2] = a * s + b * c
    return out


class KVCache:
    """Keys (after RoPE) and values of every position seen so far, per layer."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers    # [P, n_kv_heads, head_dim]
        self.v = [None] * n_layers
        self.n = 0


def forward(m, tokens, pos0=0, cache=None, dtype=np.float64, want=None):
    """Run tokens at positions pos0..pos0+T-1. Returns {name: [T, width]}.

    cache: a KVCache to extend (positions before pos0 must already be in it);
    None means a fresh one, so pos0 must be 0. want: optional set of names to
    keep (the logits are always kept)."""
    c = m.cfg
    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    if T == 0:
        raise ValueError("forward: no tokens")
    if tokens.min() < 0 or tokens.max() >= c["n_vocab"]:
        raise ValueError("forward: token id out of range [0, %d)" % c["n_vocab"])
    if cache is None:
        cache = KVCache(c["n_layers"])
    if cache.n != pos0:
        raise ValueError("forward: cache holds %d positions, pos0 is %d" % (cache.n, pos0))
    H, KVH, hd = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    group = H // KVH
    eps = c["norm_eps"]
    pos = np.arange(pos0, pos0 + T)
    out = {}

    def keep(name, val):
        if want is None or name in want or name == "logits":
            out[name] = val
    keep.positions = {}        # expert tensors: the position of each row
    global LAST_POSITIONS
    LAST_POSITIONS = keep.positions

    x = m.get("token_embd", dtype)[tokens].copy()
    keep("token_embd", x)
    # causal mask: query t (position pos0+t) sees keys at positions <= pos0+t
    P = pos0 + T
    mask = np.arange(P)[None, :] > pos[:, None]                   # [T, P]
    scale = dtype(1.0 / np.sqrt(hd))
    has = getattr(m, "has", lambda name: False)
    factors = m.get("rope_freqs", np.float64) if has("rope_freqs") else None
    rscale = c.get("rope_scale", 1.0)
    for L in range(c["n_layers"]):
        p = "blk.%d." % L
        h = rmsnorm(x, m.get(p + "attn_norm", dtype), eps)
        keep(p + "attn_norm", h)
        q = h @ m.get(p + "attn_q", dtype).T
        k = h @ m.get(p + "attn_k", dtype).T
        v = h @ m.get(p + "attn_v", dtype).T
        for nm, arr in (("attn_q", q), ("attn_k", k), ("attn_v", v)):
            if has(p + nm + ".bias"):
                arr += m.get(p + nm + ".bias", dtype)
        q = q.reshape(T, H, hd)
        k = k.reshape(T, KVH, hd)
        if c.get("qk_norm"):
            q = rmsnorm(q, m.get(p + "attn_q_norm", dtype), eps)
            k = rmsnorm(k, m.get(p + "attn_k_norm", dtype), eps)
            keep(p + "attn_q_norm", q.reshape(T, H * hd))
            keep(p + "attn_k_norm", k.reshape(T, KVH * hd))
        q = rope(q, pos, c["rope_base"], c["rope_dim"], c.get("rope_kind", "norm"), factors, rscale, c.get("yarn"))
        k = rope(k, pos, c["rope_base"], c["rope_dim"], c.get("rope_kind", "norm"), factors, rscale, c.get("yarn"))
        v = v.reshape(T, KVH, hd)
        keep(p + "attn_q", q.reshape(T, H * hd))
        keep(p + "attn_k", k.reshape(T, KVH * hd))
        keep(p + "attn_v", v.reshape(T, KVH * hd))
        K = k if cache.k[L] is None else np.concatenate([cache.k[L], k])
        V = v if cache.v[L] is None else np.concatenate([cache.v[L], v])
        cache.k[L], cache.v[L] = K, V
        Kh = np.repeat(K, group, axis=1)                          # [P, H, hd]
        Vh = np.repeat(V, group, axis=1)
        scores = np.einsum("thd,phd->htp", q, Kh) * scale         # [H, T, P]
        mk = mask
        if c.get("sinks") and c["swa"][L]:   # the window: keys pos-window+1 .. pos
            mk = mask | (pos[:, None] - np.arange(P)[None, :] >= c["window"])
        scores = np.where(mk[None], -np.inf, scores)
        mx = scores.max(axis=-1, keepdims=True)                   # [H, T, 1]
        if c.get("sinks"):   # each head's sink logit, unscaled, in the max and the denominator
            sk = m.get(p + "attn_sinks", dtype).reshape(H, 1, 1)
            mx = np.maximum(mx, sk)
        pr = np.exp(scores - mx)
        den = pr.sum(axis=-1, keepdims=True)
        if c.get("sinks"):
            es = np.exp(sk - mx)
            den = den + es
            keep(p + "attn_sink", (es / den)[:, :, 0].T)          # [T, H]
        pr = pr / den
        ctx = np.einsum("htp,phd->thd", pr, Vh).reshape(T, H * hd)
        keep(p + "attn_ctx", ctx)
        ao = ctx @ m.get(p + "attn_output", dtype).T
        if has(p + "attn_output.bias"):
            ao = ao + m.get(p + "attn_output.bias", dtype)
        keep(p + "attn_output", ao)
        x = x + ao
        keep(p + "attn_resid", x)
        h2 = rmsnorm(x, m.get(p + c.get("ffn_norm_name", "ffn_norm"), dtype), eps)
        keep(p + "ffn_norm", h2)
        if c.get("n_expert"):
            x = x + moe_ffn(m, p, h2, pos, dtype, keep)
            keep(p + "ffn_resid", x)
            continue
        gate = h2 @ m.get(p + "ffn_gate", dtype).T
        up = h2 @ m.get(p + "ffn_up", dtype).T
        keep(p + "ffn_gate", gate)
        keep(p + "ffn_up", up)
        act = gate / (1.0 + np.exp(-gate)) * up
        keep(p + "ffn_act", act)
        down = act @ m.get(p + "ffn_down", dtype).T
        keep(p + "ffn_down", down)
        x = x + down
        keep(p + "ffn_resid", x)
    on = rmsnorm(x, m.get("output_norm", dtype), eps)
    keep("output_norm", on)
    keep("logits", on @ m.get("output", dtype).T)
    cache.n = P
    return out


def moe_route(logits, k):
    """llama.cpp's softmax gating (build_moe_ffn with norm_w, as qwen3moe
    builds it): probabilities, the k largest (ties to the lower expert
    index: a stable sort), weights renormalised over the k with the sum
    clamped at 2^-14. logits: [T, E]. Returns (experts [T, k], weights [T, k])."""
    z = logits - logits.max(axis=-1, keepdims=True)
    pr = np.exp(z)
    pr = pr / pr.sum(axis=-1, keepdims=True)
    sel = np.argsort(-pr, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(pr, sel, axis=-1)
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), 6.103515625e-5)
    return sel, w


def moe_route_topk_softmax(logits, k):
    """gpt-oss's gating (llama.cpp's SOFTMAX_WEIGHT): the k largest logits
    (ties to the lower index), weights the softmax over those k."""
    sel = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
    z = np.take_along_axis(logits, sel, axis=-1)
    w = np.exp(z - z.max(axis=-1, keepdims=True))
    return sel, w / w.sum(axis=-1, keepdims=True)


def moe_ffn(m, p, h, pos, dtype, keep):
    """The mixture-of-experts FFN of one layer over h [T, dim]: router
    logits (p+"ffn_gate_inp"), each routed expert's SwiGLU on its tokens
    (kept as p+"ffn_<op>.expert[E]", rows in position order, the positions
    in keep.positions), the weighted sum (p+"ffn_moe_out"), plus a shared
    expert scaled by sigmoid of its gate when the file has one."""
    c = m.cfg
    has = getattr(m, "has", lambda name: False)
    router = h @ m.get(p + "ffn_gate_inp", dtype).T              # [T, E]
    oai = c.get("oai_moe")
    if oai:
        router = router + m.get(p + "ffn_gate_inp.bias", dtype)
    keep(p + "ffn_gate_inp", router)
    sel, w = moe_route_topk_softmax(router, c["n_expert_used"]) if oai else moe_route(router, c["n_expert_used"])
    if oai:
        bias = {op: m.get(p + op + "_exps.bias", dtype) for op in ("ffn_gate", "ffn_up", "ffn_down")}
    out = np.zeros_like(h)
    gate_w = m.get(p + "ffn_gate_exps", dtype)                     # [E, ff, dim]
    up_w = m.get(p + "ffn_up_exps", dtype)
    down_w = m.get(p + "ffn_down_exps", dtype)                     # [E, dim, ff]
    for e in range(c["n_expert"]):
        rows = [t for t in range(h.shape[0]) if e in sel[t]]
        if not rows:
            continue
        xe = h[rows]
        g = xe @ gate_w[e].T
        u = xe @ up_w[e].T
        if oai:   # biases, and the clamped SwiGLU: alpha 1.702, limit 7
            g = g + bias["ffn_gate"][e]
            u = u + bias["ffn_up"][e]
            gc = np.minimum(g, 7.0)
            a = gc / (1.0 + np.exp(-1.702 * gc)) * (np.clip(u, -7.0, 7.0) + 1.0)
            d = a @ down_w[e].T + bias["ffn_down"][e]
        else:
            a = g / (1.0 + np.exp(-g)) * u
            d = a @ down_w[e].T
        for op, val in (("ffn_gate", g), ("ffn_up", u), ("ffn_act", a), ("ffn_down", d)):
            name = "%s%s.expert[%d]" % (p, op, e)
            keep(name, val)
            keep.positions[name] = [int(pos[t]) for t in rows]
        for i, t in enumerate(rows):
            out[t] += w[t][list(sel[t]).index(e)] * d[i]
    if has(p + "ffn_gate_shexp"):
        g = h @ m.get(p + "ffn_gate_shexp", dtype).T
        u = h @ m.get(p + "ffn_up_shexp", dtype).T
        d = (g / (1.0 + np.exp(-g)) * u) @ m.get(p + "ffn_down_shexp", dtype).T
        if has(p + "ffn_gate_inp_shexp"):
            s = h @ m.get(p + "ffn_gate_inp_shexp", dtype).reshape(-1)
            d = d * (1.0 / (1.0 + np.exp(-s)))[:, None]
        out = out + d
    keep(p + "ffn_moe_out", out)
    return out


def greedy(m, prompt, n, dtype=np.float64):
    """prompt ids followed by n argmax tokens (KV cache, one token per step)."""
    cache = KVCache(m.cfg["n_layers"])
    ids = list(prompt)
    logits = forward(m, ids, 0, cache, dtype, want=set())["logits"][-1]
    for _ in range(n):
        nxt = int(np.argmax(logits))
        ids.append(nxt)
        if len(ids) >= m.cfg["ctx_len"] and len(ids) - len(prompt) < n:
            raise ValueError("greedy: context length %d reached" % m.cfg["ctx_len"])
        logits = forward(m, [nxt], cache.n, cache, dtype, want=set())["logits"][-1]
    return ids


def write_dump(out, tokens, d):
    """Write tensors in the engine's dump format: DIR/<name>.f32 (raw
    little-endian float32, T rows x width) and DIR/meta.json."""
    os.makedirs(d, exist_ok=True)
    meta = {"tokens": [int(t) for t in tokens], "tensors": {}}
    for name, arr in out.items():
        arr = np.asarray(arr)
        np.asarray(arr, dtype="<f4").tofile(os.path.join(d, name + ".f32"))
        meta["tensors"][name] = [int(arr.shape[0]), int(arr.shape[1])]
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference Llama forward pass")
    ap.add_argument("--model", required=True, help="llama2.c .bin or GGUF file")
    ap.add_argument("--tokens", default="1", help='space-separated ids, e.g. "1 2 3"')
    ap.add_argument("--f32", action="store_true", help="compute in float32 (default float64)")
    ap.add_argument("--dump", metavar="DIR", help="write every tensor as DIR/<name>.f32 + meta.json")
    ap.add_argument("--greedy", type=int, metavar="N", help="print tokens + N greedy ids")
    ap.add_argument("--top", type=int, default=5, help="print the top-K logits of the last row")
    a = ap.parse_args(argv)
    dtype = np.float32 if a.f32 else np.float64
    try:
        m = load_model(a.model)
        toks = [int(s) for s in a.tokens.split()]
        if a.greedy is not None:
            print(" ".join(str(i) for i in greedy(m, toks, a.greedy, dtype)))
            return 0
        out = forward(m, toks, dtype=dtype)
    except (RefError, ValueError, OSError) as e:
        print("ref.py: %s" % e, file=sys.stderr)
        return 1
    if a.dump:
        write_dump(out, toks, a.dump)
    last = out["logits"][-1]
    top = np.argsort(-last)[:a.top]
    print("config: %s" % json.dumps(m.cfg))
    print("top-%d of last row: %s" % (a.top, " ".join("%d:%.6f" % (i, last[i]) for i in top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
