#!/usr/bin/env python3
"""ref_hybrid.py - an independent float64 numpy reference of the hybrid
gated-delta-net architectures qwen35 (Qwen3.5 dense), qwen35moe and
qwen3next (Qwen3-Next): gated
delta net (GDN) linear-attention layers with a gated full-attention layer
every full_attention_interval layers, the MTP (nextn) block, and for
qwen35moe routed experts plus a sigmoid-gated shared expert in every FFN.

Like ref.py it shares nothing with the C engine: weights come from the GGUF
through the `gguf` package (or from a Hugging Face folder, converted here the
way llama.cpp's converter converts it), the arithmetic is float64.

Every intermediate is returned under the names of notes/gdn-names.md, each an
array [rows, width]:
  GDN layer L: blk.L.attn_norm, ssm_qkv, ssm_z, ssm_beta (sigmoid(b)),
    ssm_decay (g = ssm_a * softplus(alpha + dt_bias), the log decay),
    ssm_conv (SiLU of the causal depthwise conv1d over [conv state; qkv]),
    ssm_q, ssm_k (per-head L2-normalised, before the 1/sqrt(dk) scale and
    before the head repeat), ssm_v, ssm_core (the delta-rule output),
    ssm_norm (rmsnorm per head * silu(z)), ssm_out, then ssm_state (the state
    after the last token: rows nv*dk, row h*dk + r = value head h, key
    dimension r, width dv) and ssm_conv_state (the last kernel-1 rows of
    [conv state; qkv], width conv channels);
  full-attention layer L: blk.L.attn_norm, attn_q_norm (per-head rmsnorm of
    the query half of the doubled q projection, before RoPE), attn_k_norm,
    attn_q, attn_k (after norm and RoPE, as ref.py taps qwen3), attn_v,
    attn_gate (the gate half, before sigmoid), attn_ctx (attention output
    before gating), attn_gated (attn_ctx * sigmoid(attn_gate)), attn_output;
  every layer: attn_resid, ffn_norm (the post-attention RMSNorm), ffn_gate,
    ffn_up, ffn_act, ffn_down, ffn_resid; then output_norm and logits.
  qwen35moe FFN instead: ffn_gate_inp (router logits), ffn_<op>.expert[E]
    (each expert's rows, positions in LAST_POSITIONS), ffn_moe_out (the routed
    sum plus the gated shared expert), ffn_gate_shexp, ffn_up_shexp, ffn_act_shexp, ffn_down_shexp,
    ffn_shexp_gate (sigmoid, [T, 1]), ffn_shexp_out, ffn_resid.
  MTP block (layer N = n_layer, by mtp()): blk.N.mtp_enorm, blk.N.mtp_hnorm,
    blk.N.mtp_eh_proj, then the full-attention names above for blk.N, and
    mtp_output_norm, mtp_logits.

Conventions (read from llama.cpp's src/models/qwen35.cpp and
delta-net-base.cpp, ggml's gated_delta_net and ssm_conv, and its converter):
value head j of the GGUF uses key head j % n_k_heads (the converter reorders
the HF grouped heads to this tiled order; qwen3next keeps them grouped and
llama.cpp repeats its key heads interleaved: j // (n_v/n_k)); qwen3next's
fused ssm_ba holds per key head [beta logits, alpha] of its value heads; the recurrence per value head is
S <- S * exp(g); d = beta * (v - S^T k); S <- S + k d^T; o = S^T q / sqrt(dk);
the L2 norm is x / max(|x|, eps) with eps the RMS eps; RoPE is IMROPE, which
for text (all position channels equal) is NEOX on rope.dimension_count dims;
the attention query of head h is rows [2h*hd, 2h*hd+hd) of attn_q and the
gate rows [2h*hd+hd, 2h*hd+2hd).

Library:
    m = load(path)                      # GGUF file or HF folder
    st = State(m)                       # KV caches + recurrent states, empty
    out = forward(m, [1, 2, 3], st)     # {name: [T, width]}, st advanced
    mo = mtp(m, out["output_norm"], next_ids, pos0=0)
CLI: ref_hybrid.py --model M --tokens "1 2 3" [--dump DIR] [--greedy N]
     ref_hybrid.py --model M --compare DIR   (DIR: a `bangtrace forward --dump`
     of M; every named tensor against the oracle, the first one over
     compare_forward.tol_exact_f32 named; exit 1 when one is)
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ref  # noqa: E402

ARCHS = ("qwen35", "qwen35moe", "qwen3next")
# the positions of the rows of each expert tensor of the last forward()
LAST_POSITIONS = {}
SDIST_GGUF = os.path.expanduser(
    "~/.cache/bangtrace/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")

GDN_OPS = ("attn_norm", "ssm_qkv", "ssm_z", "ssm_beta", "ssm_decay", "ssm_conv", "ssm_q", "ssm_k",
           "ssm_v", "ssm_core", "ssm_norm", "ssm_out", "ssm_state", "ssm_conv_state")
ATTN_OPS = ("attn_norm", "attn_q_norm", "attn_k_norm", "attn_q", "attn_k", "attn_v", "attn_gate",
            "attn_ctx", "attn_gated", "attn_output")
FFN_OPS = ("attn_resid", "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "ffn_resid")
# qwen35moe: the router logits, the routed experts' weighted sum, the shared
# expert (its SwiGLU, sigmoid(gate) [T, 1], the gated output); the per-expert
# tensors blk.L.ffn_<op>.expert[E] hold only their tokens' rows (not listed)
MOE_OPS = ("attn_resid", "ffn_norm", "ffn_gate_inp", "ffn_moe_out", "ffn_gate_shexp", "ffn_up_shexp",
           "ffn_act_shexp", "ffn_down_shexp", "ffn_shexp_gate", "ffn_shexp_out", "ffn_resid")
# tensors whose rows are not the forward's tokens
STATE_OPS = ("ssm_state", "ssm_conv_state")


class Model(ref.Model):
    pass


def is_recurrent(cfg, L):
    return cfg["recurrent"][L]


def tensor_names(cfg):
    """Every name forward() returns, in the order it computes them."""
    names = ["token_embd"]
    for L in range(cfg["n_layers"]):
        ops = (GDN_OPS if is_recurrent(cfg, L) else ATTN_OPS) + (MOE_OPS if cfg.get("n_expert") else FFN_OPS)
        names += ["blk.%d.%s" % (L, op) for op in ops]
    return names + ["output_norm", "logits"]


# ---------------------------------------------------------------- loading

def _import_gguf():
    p = os.environ.get("GGUF_PY") or SDIST_GGUF
    if os.path.isdir(os.path.join(p, "gguf")) and p not in sys.path:
        sys.path.insert(0, p)
    import gguf
    return gguf


class _Field:
    def __init__(self, v):
        self.v = v

    def contents(self):
        return self.v


class _Tensor:
    def __init__(self, name, shape, tensor_type, data):
        self.name, self.shape, self.tensor_type, self.data = name, shape, tensor_type, data


class _FastReader:
    """A minimal GGUF v2/v3 reader for files whose tensors are all F32/F16:
    the header, the key/values (arrays of strings are skipped, not decoded:
    the vocabulary is most of the parse time of gguf.GGUFReader) and the
    tensors as memory-mapped arrays. Anything else raises ValueError and
    load_gguf falls back to gguf.GGUFReader."""

    SCALAR = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
              11: "<i8", 12: "<f8"}

    def __init__(self, path):
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        self.path, self.fields, self.tensors = path, {}, []
        buf = raw
        if bytes(buf[:4]) != b"GGUF" or struct.unpack_from("<I", buf, 4)[0] not in (2, 3):
            raise ValueError("not GGUF v2/v3")
        n_t, n_kv = struct.unpack_from("<QQ", buf, 8)
        off = 24

        def string(o):
            n = struct.unpack_from("<Q", buf, o)[0]
            return bytes(buf[o + 8:o + 8 + n]).decode("utf-8"), o + 8 + n

        def value(t, o):
            if t == 8:
                return string(o)
            if t == 9:
                st, n = struct.unpack_from("<IQ", buf, o)
                o += 12
                if st == 8:
                    for _ in range(n):
                        o += 8 + struct.unpack_from("<Q", buf, o)[0]
                    return None, o
                if st not in self.SCALAR:
                    raise ValueError("array of type %d" % st)
                dt = np.dtype(self.SCALAR[st])
                return np.frombuffer(buf, dt, n, o).tolist(), o + n * dt.itemsize
            if t not in self.SCALAR:
                raise ValueError("value type %d" % t)
            dt = np.dtype(self.SCALAR[t])
            v = np.frombuffer(buf, dt, 1, o)[0]
            return (bool(v) if t == 7 else v.item()), o + dt.itemsize

        for _ in range(n_kv):
            k, off = string(off)
            t = struct.unpack_from("<I", buf, off)[0]
            v, off = value(t, off + 4)
            if v is not None:
                self.fields[k] = _Field(v)
        infos = []
        for _ in range(n_t):
            name, off = string(off)
            nd = struct.unpack_from("<I", buf, off)[0]
            dims = struct.unpack_from("<%dQ" % nd, buf, off + 4)
            ttype, toff = struct.unpack_from("<IQ", buf, off + 4 + 8 * nd)
            off += 4 + 8 * nd + 12
            if ttype not in (0, 1):
                raise ValueError("tensor %s has type %d" % (name, ttype))
            infos.append((name, dims, ttype, toff))
        align = int(self.fields["general.alignment"].v) if "general.alignment" in self.fields else 32
        base = off + (-off % align)
        for name, dims, ttype, toff in infos:
            n = int(np.prod(dims))
            dt = np.dtype("<f4" if ttype == 0 else "<f2")
            data = np.frombuffer(buf, dt, n, base + toff).reshape(tuple(reversed(dims)))
            self.tensors.append(_Tensor(name, np.array(dims), ttype, data))


def load_gguf(path):
    try:
        reader = _FastReader(path)
    except (ValueError, struct.error, KeyError, IndexError, UnicodeDecodeError, OSError):
        reader = None
    if reader is not None:
        return _from_reader(path, reader, None)
    try:
        gguf = _import_gguf()
    except ImportError as e:
        raise ref.RefError("%s: the gguf Python package is needed (%s)" % (path, e))
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as e:
        raise ref.RefError("%s: not a readable GGUF file: %s" % (path, e))
    return _from_reader(path, reader, gguf)


def _from_reader(path, reader, gguf):
    reader.path = path
    f = lambda k, d=None, req=False: ref._field(reader, k, d, req)  # noqa: E731
    arch = f("general.architecture", req=True)
    if arch not in ARCHS:
        raise ref.RefError("%s: general.architecture is %r, this reference computes %s"
                           % (path, arch, ", ".join(ARCHS)))
    a = arch + "."
    tensors = {t.name: t for t in reader.tensors}
    n_all = int(f(a + "block_count", req=True))
    n_mtp = int(f(a + "nextn_predict_layers", 0))
    n_layers = n_all - n_mtp
    rec = f(a + "attention.recurrent_layers")
    if rec is not None:
        recurrent = [bool(v) for v in rec][:n_layers]
    else:
        iv = int(f(a + "full_attention_interval", 4))
        recurrent = [(L + 1) % iv != 0 for L in range(n_layers)]
    n_heads = int(f(a + "attention.head_count", req=True))
    dim = int(f(a + "embedding_length", req=True))
    cfg = dict(arch=arch, dim=dim, n_layers=n_layers, n_mtp=n_mtp, recurrent=recurrent,
               hidden_dim=int(f(a + "feed_forward_length", req=True)), n_heads=n_heads,
               n_kv_heads=int(f(a + "attention.head_count_kv", n_heads)),
               head_dim=int(f(a + "attention.key_length", dim // n_heads)),
               norm_eps=float(f(a + "attention.layer_norm_rms_epsilon", 1e-6)),
               rope_base=float(f(a + "rope.freq_base", 10000.0)),
               rope_dim=int(f(a + "rope.dimension_count", 0)),
               conv_kernel=int(f(a + "ssm.conv_kernel", req=True)),
               head_k_dim=int(f(a + "ssm.state_size", req=True)),
               n_k_heads=int(f(a + "ssm.group_count", req=True)),
               n_v_heads=int(f(a + "ssm.time_step_rank", req=True)),
               n_vocab=int(tensors["token_embd.weight"].shape[1]),
               n_expert=int(f(a + "expert_count", 0)), n_expert_used=int(f(a + "expert_used_count", 0)),
               grouped_heads=arch == "qwen3next")
    inner = int(f(a + "ssm.inner_size", req=True))
    cfg["head_v_dim"] = inner // cfg["n_v_heads"]
    if cfg["n_v_heads"] % cfg["n_k_heads"] or cfg["head_v_dim"] * cfg["n_v_heads"] != inner:
        raise ref.RefError("%s: ssm heads k %d v %d inner %d do not divide"
                           % (path, cfg["n_k_heads"], cfg["n_v_heads"], inner))

    def getter(name):
        full = name if name.endswith(".bias") or name.endswith("ssm_a") else name + ".weight"
        if name == "output" and "output.weight" not in tensors:
            full = "token_embd.weight"
        t = tensors.get(full)
        if t is None:
            raise ref.RefError("%s: missing tensor %s" % (path, full))
        shape = tuple(int(n) for n in reversed(list(t.shape)))
        if gguf is None or t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w = np.asarray(t.data)
        else:
            w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        return w.reshape(shape)

    m = Model(path, "gguf", cfg, getter)
    m.has = lambda name: name in tensors or (name + ".weight") in tensors
    return m


def read_safetensors(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        base = 8 + n
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        buf = raw[base + s:base + e]
        dt = info["dtype"]
        if dt == "F32":
            arr = buf.view("<f4")
        elif dt == "F16":
            arr = buf.view("<f2").astype(np.float32)
        elif dt == "BF16":
            arr = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ref.RefError("%s: tensor %s has dtype %s" % (path, name, dt))
        out[name] = arr.reshape(info["shape"])
    return out


def load_hf(d):
    """A Qwen3_5ForCausalLM folder, converted to the GGUF conventions here
    (ssm_a = -exp(A_log), norms 1 + w except the gated norm, grouped value
    heads reordered to tiled), so forward() runs one code path."""
    try:
        with open(os.path.join(d, "config.json")) as fh:
            c = json.load(fh)
    except (OSError, ValueError) as e:
        raise ref.RefError("%s/config.json: %s" % (d, e))
    if c.get("text_config"):
        c = dict(c, **c["text_config"])
    st = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            st.update(read_safetensors(os.path.join(d, fn)))
    st = {k[len("model.language_model."):] if k.startswith("model.language_model.") else
          k[len("model."):] if k.startswith("model.") else k: v for k, v in st.items()}
    n_layers = int(c["num_hidden_layers"])
    lt = c.get("layer_types")
    iv = int(c.get("full_attention_interval", 4))
    recurrent = [t == "linear_attention" for t in lt] if lt else [(L + 1) % iv != 0 for L in range(n_layers)]
    rp = c.get("rope_parameters") or {}
    hd = int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    nk, nv = int(c["linear_num_key_heads"]), int(c["linear_num_value_heads"])
    dk, dv = int(c["linear_key_head_dim"]), int(c["linear_value_head_dim"])
    arch = {"Qwen3NextForCausalLM": "qwen3next"}.get((c.get("architectures") or [""])[0],
                                                     "qwen35moe" if c.get("num_experts") else "qwen35")
    cfg = dict(arch=arch, grouped_heads=arch == "qwen3next", dim=int(c["hidden_size"]), n_layers=n_layers,
               n_mtp=int(c.get("mtp_num_hidden_layers", 0)) if any(k.startswith("mtp.") for k in st) else 0,
               recurrent=recurrent, hidden_dim=int(c["intermediate_size"]),
               n_heads=int(c["num_attention_heads"]), n_kv_heads=int(c["num_key_value_heads"]), head_dim=hd,
               norm_eps=float(c.get("rms_norm_eps", 1e-6)),
               rope_base=float(rp.get("rope_theta", c.get("rope_theta", 10000.0))),
               rope_dim=int(hd * float(rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25)))),
               conv_kernel=int(c["linear_conv_kernel_dim"]), head_k_dim=dk, n_k_heads=nk, n_v_heads=nv,
               head_v_dim=dv, n_vocab=int(st["embed_tokens.weight"].shape[0]),
               n_expert=int(c.get("num_experts", 0)), n_expert_used=int(c.get("num_experts_per_tok", 0)))
    per = nv // nk
    perm = lambda hdim: np.arange(nv * hdim).reshape(nk, per, hdim).transpose(1, 0, 2).reshape(-1)  # noqa: E731
    if arch == "qwen3next":         # grouped value heads stay grouped
        perm = lambda hdim: np.arange(nv * hdim)  # noqa: E731
    rv, r1 = perm(dv), perm(1)
    qk = 2 * nk * dk
    # the converter's arithmetic is float32 (torch on the f32 checkpoint)
    f32 = np.float32
    plus1 = lambda a: (a.astype(f32) + f32(1.0)).astype(f32)  # noqa: E731
    W = {"token_embd": st["embed_tokens.weight"], "output_norm": plus1(st["norm.weight"])}
    W["output"] = st.get("lm_head.weight", st["embed_tokens.weight"])

    def block(hp, g):
        W[g + "attn_norm"] = plus1(st[hp + "input_layernorm.weight"])
        W[g + "post_attention_norm"] = plus1(st[hp + "post_attention_layernorm.weight"])
        if cfg["n_expert"]:
            W[g + "ffn_gate_inp"] = st[hp + "mlp.gate.weight"]
            if hp + "mlp.experts.gate_up_proj" in st:
                gu = st[hp + "mlp.experts.gate_up_proj"]
                W[g + "ffn_gate_exps"], W[g + "ffn_up_exps"] = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
                W[g + "ffn_down_exps"] = st[hp + "mlp.experts.down_proj"]
            else:
                for op in ("gate", "up", "down"):
                    W[g + "ffn_%s_exps" % op] = np.stack([st[hp + "mlp.experts.%d.%s_proj.weight" % (e, op)]
                                                          for e in range(cfg["n_expert"])])
            W[g + "ffn_gate_inp_shexp"] = st[hp + "mlp.shared_expert_gate.weight"].reshape(-1)
            for hn, gn in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                           ("down_proj", "ffn_down_shexp")):
                W[g + gn] = st[hp + "mlp.shared_expert." + hn + ".weight"]
        else:
            for hn, gn in (("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                           ("mlp.down_proj", "ffn_down")):
                W[g + gn] = st[hp + hn + ".weight"]
        if hp + "self_attn.q_proj.weight" in st:
            for hn, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                W[g + gn] = st[hp + "self_attn." + hn + ".weight"]
            W[g + "attn_q_norm"] = plus1(st[hp + "self_attn.q_norm.weight"])
            W[g + "attn_k_norm"] = plus1(st[hp + "self_attn.k_norm.weight"])
            return
        a = hp + "linear_attn."
        if a + "in_proj_qkvz.weight" in st:
            x = st[a + "in_proj_qkvz.weight"]
            E = x.shape[1]
            x = x.reshape(nk, -1, E)
            W[g + "attn_qkv"] = np.concatenate([x[:, :dk].reshape(-1, E), x[:, dk:2 * dk].reshape(-1, E),
                                                x[:, 2 * dk:2 * dk + per * dv].reshape(-1, E)])
            W[g + "attn_gate"] = x[:, 2 * dk + per * dv:].reshape(-1, E)
            W[g + "ssm_ba"] = st[a + "in_proj_ba.weight"]
        else:
            qkv = st[a + "in_proj_qkv.weight"]
            W[g + "attn_qkv"] = np.concatenate([qkv[:qk], qkv[qk:][rv]])
            W[g + "attn_gate"] = st[a + "in_proj_z.weight"][rv]
            W[g + "ssm_beta"] = st[a + "in_proj_b.weight"][r1]
            W[g + "ssm_alpha"] = st[a + "in_proj_a.weight"][r1]
        conv = st[a + "conv1d.weight"].reshape(W[g + "attn_qkv"].shape[0], -1)
        W[g + "ssm_conv1d"] = np.concatenate([conv[:qk], conv[qk:][rv]])
        W[g + "ssm_dt.bias"] = st[a + "dt_bias"][r1]
        W[g + "ssm_a"] = (-np.exp(st[a + "A_log"].astype(np.float64))).astype(f32)[r1]
        W[g + "ssm_norm"] = st[a + "norm.weight"]
        W[g + "ssm_out"] = st[a + "out_proj.weight"][:, rv]

    for L in range(n_layers):
        block("layers.%d." % L, "blk.%d." % L)
    if cfg["n_mtp"]:
        g = "blk.%d." % n_layers
        block("mtp.layers.0.", g)
        W[g + "nextn.eh_proj"] = st["mtp.fc.weight"]
        W[g + "nextn.enorm"] = plus1(st["mtp.pre_fc_norm_embedding.weight"])
        W[g + "nextn.hnorm"] = plus1(st["mtp.pre_fc_norm_hidden.weight"])
        W[g + "nextn.shared_head_norm"] = plus1(st["mtp.norm.weight"])

    def getter(name):
        if name not in W:
            raise ref.RefError("%s: no weight for %s" % (d, name))
        return W[name]

    m = Model(d, "hf", cfg, getter)
    m.has = lambda name: name in W
    return m


def load(path):
    if os.path.isdir(path):
        return load_hf(path)
    return load_gguf(path)


# ---------------------------------------------------------------- forward

class State:
    """What a forward leaves behind: per full-attention layer the keys (after
    RoPE) and values of every position, per GDN layer the conv state
    [kernel-1, channels] and the recurrent state [nv, dk, dv] (zeros at the
    start, as llama.cpp clears a fresh sequence)."""

    def __init__(self, m, n_layers=None, state_dtype=None):
        """state_dtype "bf16" or "f16": the recurrent and conv states are
        stored in that type (rounded to nearest even after every token's
        update, as an engine keeping its cache in it would), the arithmetic
        stays float64; None keeps them float64."""
        c = m.cfg
        if state_dtype not in (None, "f32", "bf16", "f16"):
            raise ValueError("state_dtype %r: f32, bf16 or f16" % state_dtype)
        self.state_dtype = state_dtype
        n = c["n_layers"] + c["n_mtp"] if n_layers is None else n_layers
        conv_dim = 2 * c["n_k_heads"] * c["head_k_dim"] + c["n_v_heads"] * c["head_v_dim"]
        self.k = [None] * n
        self.v = [None] * n
        self.conv = [np.zeros((c["conv_kernel"] - 1, conv_dim)) for _ in range(n)]
        self.ssm = [np.zeros((c["n_v_heads"], c["head_k_dim"], c["head_v_dim"])) for _ in range(n)]
        self.n = 0


def round_to(x, dtype):
    """x rounded to float32, bfloat16 (nearest even) or float16, as float64."""
    if dtype in (None, "f64"):
        return x
    if dtype == "f16":
        return np.asarray(x, dtype=np.float16).astype(np.float64)
    f = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        u = f.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        f = u.astype(np.uint32).view(np.float32)
    return f.astype(np.float64)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def l2norm(x, eps):
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def gdn_layer(m, p, h, L, st, keep):
    """One gated delta net layer over h [T, dim]; updates st.conv[L], st.ssm[L]."""
    c = m.cfg
    T = h.shape[0]
    nk, nv, dk, dv = c["n_k_heads"], c["n_v_heads"], c["head_k_dim"], c["head_v_dim"]
    eps = c["norm_eps"]
    get = lambda n: m.get(n, np.float64)  # noqa: E731
    qkv = h @ get(p + "attn_qkv").T                                   # [T, conv_dim]
    keep(p + "ssm_qkv", qkv)
    z = h @ get(p + "attn_gate").T                                    # [T, nv*dv]
    keep(p + "ssm_z", z)
    if m.has(p + "ssm_ba"):
        # qwen3next: per key head [b(nv/nk), a(nv/nk)]
        ba = (h @ get(p + "ssm_ba").T).reshape(T, nk, 2, nv // nk)
        b, alpha = ba[:, :, 0].reshape(T, nv), ba[:, :, 1].reshape(T, nv)
    else:
        b, alpha = h @ get(p + "ssm_beta").T, h @ get(p + "ssm_alpha").T
    beta = sigmoid(b)                                                 # [T, nv]
    keep(p + "ssm_beta", beta)
    g = get(p + "ssm_a").reshape(-1) * softplus(alpha + get(p + "ssm_dt.bias").reshape(-1))
    keep(p + "ssm_decay", g)
    w = get(p + "ssm_conv1d")                                         # [conv_dim, K]
    K = w.shape[1]
    xp = np.concatenate([st.conv[L], qkv])                            # [K-1+T, conv_dim]
    conv = np.zeros_like(qkv)
    for j in range(K):
        conv += xp[j:j + T] * w[:, j]
    conv = silu(conv)
    keep(p + "ssm_conv", conv)
    st.conv[L] = round_to(xp[T:], st.state_dtype)
    q = l2norm(conv[:, :nk * dk].reshape(T, nk, dk), eps)
    k = l2norm(conv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk), eps)
    v = conv[:, 2 * nk * dk:].reshape(T, nv, dv)
    keep(p + "ssm_q", q.reshape(T, nk * dk))
    keep(p + "ssm_k", k.reshape(T, nk * dk))
    keep(p + "ssm_v", v.reshape(T, nv * dv))
    scale = 1.0 / np.sqrt(dk)
    S = st.ssm[L].copy()                                              # [nv, dk, dv]
    o = np.zeros((T, nv, dv))
    if c.get("grouped_heads"):
        kh = np.arange(nv) // (nv // nk)                              # qwen3next: grouped
    else:
        kh = np.arange(nv) % nk                                       # tiled: v head j -> k head j % nk
    for t in range(T):
        S *= np.exp(g[t])[:, None, None]
        kt, qt = k[t][kh], q[t][kh]                                   # [nv, dk]
        kv = np.einsum("hkv,hk->hv", S, kt)
        d = beta[t][:, None] * (v[t] - kv)                            # [nv, dv]
        S += kt[:, :, None] * d[:, None, :]
        if st.state_dtype:
            S = round_to(S, st.state_dtype)
        o[t] = np.einsum("hkv,hk->hv", S, qt) * scale
    st.ssm[L] = S
    keep(p + "ssm_core", o.reshape(T, nv * dv))
    nrm = ref.rmsnorm(o, get(p + "ssm_norm").reshape(-1), eps) * silu(z.reshape(T, nv, dv))
    nrm = nrm.reshape(T, nv * dv)
    keep(p + "ssm_norm", nrm)
    out = nrm @ get(p + "ssm_out").T
    keep(p + "ssm_out", out)
    keep(p + "ssm_state", S.reshape(nv * dk, dv))
    keep(p + "ssm_conv_state", st.conv[L])
    return out


def attn_layer(m, p, h, L, pos, st, keep):
    """One gated full-attention layer over h [T, dim] at positions pos."""
    c = m.cfg
    T = h.shape[0]
    H, KVH, hd = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    eps = c["norm_eps"]
    get = lambda n: m.get(n, np.float64)  # noqa: E731
    qf = (h @ get(p + "attn_q").T).reshape(T, H, 2 * hd)
    q, gate = qf[..., :hd], qf[..., hd:].reshape(T, H * hd)
    k = (h @ get(p + "attn_k").T).reshape(T, KVH, hd)
    v = (h @ get(p + "attn_v").T).reshape(T, KVH, hd)
    q = ref.rmsnorm(q, get(p + "attn_q_norm").reshape(-1), eps)
    k = ref.rmsnorm(k, get(p + "attn_k_norm").reshape(-1), eps)
    keep(p + "attn_q_norm", q.reshape(T, H * hd))
    keep(p + "attn_k_norm", k.reshape(T, KVH * hd))
    rd = c["rope_dim"] or hd
    q = ref.rope(q, pos, c["rope_base"], rd, "neox")
    k = ref.rope(k, pos, c["rope_base"], rd, "neox")
    keep(p + "attn_q", q.reshape(T, H * hd))
    keep(p + "attn_k", k.reshape(T, KVH * hd))
    keep(p + "attn_v", v.reshape(T, KVH * hd))
    keep(p + "attn_gate", gate)
    Kc = k if st.k[L] is None else np.concatenate([st.k[L], k])
    Vc = v if st.v[L] is None else np.concatenate([st.v[L], v])
    st.k[L], st.v[L] = Kc, Vc
    P = Kc.shape[0]
    group = H // KVH
    Kh, Vh = np.repeat(Kc, group, axis=1), np.repeat(Vc, group, axis=1)
    kpos = np.arange(P) + (pos[0] - (P - T))
    sc = np.einsum("thd,phd->htp", q, Kh) / np.sqrt(hd)
    sc = np.where((kpos[None, :] > pos[:, None])[None], -np.inf, sc)
    sc = sc - sc.max(axis=-1, keepdims=True)
    pr = np.exp(sc)
    pr /= pr.sum(axis=-1, keepdims=True)
    ctx = np.einsum("htp,phd->thd", pr, Vh).reshape(T, H * hd)
    keep(p + "attn_ctx", ctx)
    gated = ctx * sigmoid(gate)
    keep(p + "attn_gated", gated)
    out = gated @ get(p + "attn_output").T
    keep(p + "attn_output", out)
    return out


def moe_part(m, p, h, pos, keep):
    """llama.cpp's qwen35moe FFN: softmax router, top-k renormalised
    (ref.moe_route), the routed experts' SwiGLU on their tokens, plus the
    shared expert's SwiGLU times sigmoid(ffn_gate_inp_shexp . h)."""
    c = m.cfg
    get = lambda n: m.get(n, np.float64)  # noqa: E731
    router = h @ get(p + "ffn_gate_inp").T
    keep(p + "ffn_gate_inp", router)
    sel, wts = ref.moe_route(router, c["n_expert_used"])
    gw, uw, dw = get(p + "ffn_gate_exps"), get(p + "ffn_up_exps"), get(p + "ffn_down_exps")
    moe = np.zeros_like(h)
    for e in range(c["n_expert"]):
        rows = [t for t in range(h.shape[0]) if e in sel[t]]
        if not rows:
            continue
        g = h[rows] @ gw[e].T
        u = h[rows] @ uw[e].T
        a = silu(g) * u
        d = a @ dw[e].T
        for op, val in (("ffn_gate", g), ("ffn_up", u), ("ffn_act", a), ("ffn_down", d)):
            keep("%s%s.expert[%d]" % (p, op, e), val)
            keep.positions["%s%s.expert[%d]" % (p, op, e)] = [int(pos[t]) for t in rows]
        for i, t in enumerate(rows):
            moe[t] += wts[t][list(sel[t]).index(e)] * d[i]
    g = h @ get(p + "ffn_gate_shexp").T
    u = h @ get(p + "ffn_up_shexp").T
    keep(p + "ffn_gate_shexp", g)
    keep(p + "ffn_up_shexp", u)
    a = silu(g) * u
    keep(p + "ffn_act_shexp", a)
    d = a @ get(p + "ffn_down_shexp").T
    keep(p + "ffn_down_shexp", d)
    sg = sigmoid(h @ get(p + "ffn_gate_inp_shexp").reshape(-1))[:, None]
    keep(p + "ffn_shexp_gate", sg)
    keep(p + "ffn_shexp_out", d * sg)
    # bangtrace's convention (as for qwen3moe): ffn_moe_out is the whole MoE
    # block's output, the gated shared expert included
    keep(p + "ffn_moe_out", moe + d * sg)
    return moe + d * sg


def ffn_part(m, p, x, keep, pos=None):
    c = m.cfg
    get = lambda n: m.get(n, np.float64)  # noqa: E731
    keep(p + "attn_resid", x)
    h2 = ref.rmsnorm(x, get(p + "post_attention_norm").reshape(-1), c["norm_eps"])
    keep(p + "ffn_norm", h2)
    if c.get("n_expert"):
        x = x + moe_part(m, p, h2, pos, keep)
        keep(p + "ffn_resid", x)
        return x
    gt = h2 @ get(p + "ffn_gate").T
    up = h2 @ get(p + "ffn_up").T
    keep(p + "ffn_gate", gt)
    keep(p + "ffn_up", up)
    act = silu(gt) * up
    keep(p + "ffn_act", act)
    down = act @ get(p + "ffn_down").T
    keep(p + "ffn_down", down)
    x = x + down
    keep(p + "ffn_resid", x)
    return x


def _keeper(out, want):
    def keep(name, val):
        if want is None or name in want or name.endswith("logits"):
            out[name] = np.array(val, dtype=np.float64, copy=True)
    keep.positions = {}         # expert tensors: the position of each row
    return keep


def forward(m, tokens, st=None, want=None):
    """Run tokens at positions st.n .. st.n+T-1 (st None: a fresh state).
    Returns {name: [rows, width]}; st is advanced."""
    c = m.cfg
    tokens = np.asarray(tokens, dtype=np.int64)
    T = len(tokens)
    if T == 0:
        raise ValueError("forward: no tokens")
    if tokens.min() < 0 or tokens.max() >= c["n_vocab"]:
        raise ValueError("forward: token id out of range [0, %d)" % c["n_vocab"])
    st = st or State(m)
    pos = np.arange(st.n, st.n + T)
    out = {}
    keep = _keeper(out, want)
    global LAST_POSITIONS
    LAST_POSITIONS = keep.positions
    x = m.get("token_embd", np.float64)[tokens].copy()
    keep("token_embd", x)
    for L in range(c["n_layers"]):
        p = "blk.%d." % L
        h = ref.rmsnorm(x, m.get(p + "attn_norm", np.float64).reshape(-1), c["norm_eps"])
        keep(p + "attn_norm", h)
        if is_recurrent(c, L):
            a = gdn_layer(m, p, h, L, st, keep)
        else:
            a = attn_layer(m, p, h, L, pos, st, keep)
        x = ffn_part(m, p, x + a, keep, pos)
    on = ref.rmsnorm(x, m.get("output_norm", np.float64).reshape(-1), c["norm_eps"])
    keep("output_norm", on)
    keep("logits", on @ m.get("output", np.float64).T)
    st.n += T
    return out


def mtp(m, h, ids, st=None, pos0=None, want=None):
    """The MTP (nextn) block as llama.cpp's qwen35 graph_mtp computes it:
    row t pairs the trunk's output-normed hidden state h[t] with the
    embedding of ids[t] (the token after the one h[t] came from), at position
    pos0 + t: eh_proj([enorm(embed); hnorm(h)]) -> a gated full-attention
    block with its own KV cache (st.k/v at index n_layers) -> the shared
    head norm (or output_norm) -> the LM head. Returns {name: [T, width]}."""
    c = m.cfg
    if not c["n_mtp"]:
        raise ref.RefError("%s: no MTP (nextn) layer" % m.path)
    L = c["n_layers"]
    p = "blk.%d." % L
    ids = np.asarray(ids, dtype=np.int64)
    h = np.asarray(h, dtype=np.float64)
    T = len(ids)
    st = st or State(m)
    if pos0 is None:
        pos0 = 0 if st.k[L] is None else st.k[L].shape[0]
    pos = np.arange(pos0, pos0 + T)
    out = {}
    keep = _keeper(out, want)
    get = lambda n: m.get(n, np.float64)  # noqa: E731
    emb_name = p + "nextn.embed_tokens" if m.has(p + "nextn.embed_tokens") else "token_embd"
    e = ref.rmsnorm(get(emb_name)[ids], get(p + "nextn.enorm").reshape(-1), c["norm_eps"])
    hn = ref.rmsnorm(h, get(p + "nextn.hnorm").reshape(-1), c["norm_eps"])
    keep(p + "mtp_enorm", e)
    keep(p + "mtp_hnorm", hn)
    x = np.concatenate([e, hn], axis=1) @ get(p + "nextn.eh_proj").T
    keep(p + "mtp_eh_proj", x)
    a = ref.rmsnorm(x, get(p + "attn_norm").reshape(-1), c["norm_eps"])
    keep(p + "attn_norm", a)
    x = ffn_part(m, p, x + attn_layer(m, p, a, L, pos, st, keep), keep, pos)
    nw = p + "nextn.shared_head_norm" if m.has(p + "nextn.shared_head_norm") else "output_norm"
    on = ref.rmsnorm(x, get(nw).reshape(-1), c["norm_eps"])
    keep("mtp_output_norm", on)
    head = p + "nextn.shared_head_head" if m.has(p + "nextn.shared_head_head") else "output"
    keep("mtp_logits", on @ get(head).T)
    return out


def greedy(m, prompt, n):
    st = State(m)
    ids = list(prompt)
    logits = forward(m, ids, st, want=set())["logits"][-1]
    for _ in range(n):
        ids.append(int(np.argmax(logits)))
        logits = forward(m, [ids[-1]], st, want=set())["logits"][-1]
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 numpy reference of qwen35 (gated delta net)")
    ap.add_argument("--model", required=True, help="GGUF file or HF folder")
    ap.add_argument("--tokens", default="1", help='space-separated ids, e.g. "1 2 3"')
    ap.add_argument("--dump", metavar="DIR", help="write every tensor as DIR/<name>.f32 + meta.json")
    ap.add_argument("--greedy", type=int, metavar="N", help="print tokens + N greedy ids")
    ap.add_argument("--compare", metavar="DIR", help="judge an engine dump of the same model (its tokens)")
    a = ap.parse_args(argv)
    try:
        m = load(a.model)
        toks = [int(s) for s in a.tokens.split()]
        if a.compare:
            import compare_forward as cf
            toks, dump = cf.load_dump(a.compare)
            res = cf.compare(forward(m, toks), dump, cf.tol_exact_f32, tensor_names(m.cfg))
            res.report(worst=12)
            print("PASS" if res.ok else "FAIL")
            return 0 if res.ok else 1
        if a.greedy is not None:
            print(" ".join(str(i) for i in greedy(m, toks, a.greedy)))
            return 0
        out = forward(m, toks)
    except (ref.RefError, ValueError, OSError, KeyError) as e:
        print("ref_hybrid.py: %s" % e, file=sys.stderr)
        return 2
    except Exception as e:  # compare_forward.DumpError
        if type(e).__name__ != "DumpError":
            raise
        print("ref_hybrid.py: %s" % e, file=sys.stderr)
        return 2
    if a.dump:
        ref.write_dump(out, toks, a.dump)
    last = out["logits"][-1]
    top = np.argsort(-last)[:5]
    print("top-5 of last row: %s" % " ".join("%d:%.6f" % (i, last[i]) for i in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
