#!/usr/bin/env python3
"""make-tiny-hybrid.py - write a tiny random-weight hybrid (gated delta net +
gated full attention) model, deterministic from --seed, as a GGUF file that
llama.cpp loads and runs unchanged, or as a Hugging Face folder holding the
same weights.

    tools/make-tiny-hybrid.py OUT [--format gguf|hf] [--arch qwen35|qwen35moe|qwen3next]
                              [--seed N]
                              [--vocab FILE.gguf] [--layers N] [--interval N]
                              [--mtp N] [--rope-base B] [--head-dim 16|32|64] [--untied] [--force]
    tools/make-tiny-hybrid.py OUT --shape qwen3.5-0.8b [--seed N] [--vocab FILE.gguf]
                              [--layers N] [--n-vocab N] [--force]

--format gguf (the default) writes OUT as one f32 GGUF of architecture
qwen35 (or qwen35moe, qwen3next); --format hf writes OUT as a folder with
config.json (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM), model.safetensors (Hugging
Face tensor names) and the tokenizer files. The same --seed gives the same weights in both forms.

The weights are drawn in the Hugging Face layout and conventions (A_log,
dt_bias, RMSNorm weights stored as an offset from 1, value heads grouped by
key head, conv1d [channels, 1, kernel], separate in_proj_qkv/in_proj_z/
in_proj_a/in_proj_b, mtp.* for the MTP block), and the GGUF is derived from
them by the conversions llama.cpp's converter applies (conversion/qwen.py of
the pinned sdist): ssm_a = -exp(A_log), dt_bias -> ssm_dt.bias, the conv1d
kernel squeezed to [channels, kernel], +1 on every RMSNorm weight except the
gated norm of the linear attention, value heads reordered from grouped to
tiled order (v head j of the GGUF uses key head j % n_k_heads), mtp.* renamed
to the extra nextn block after the trunk. --arch qwen35moe replaces every
FFN (the MTP block's too) by 4 routed experts of 32 (2 per token, softmax
router, weights renormalised) plus a sigmoid-gated shared expert of 64; the
HF form stores the experts fused (mlp.experts.gate_up_proj [E, 2*ff, dim],
mlp.experts.down_proj), the GGUF splits them into ffn_gate_exps/ffn_up_exps.
--arch qwen3next is Qwen3-Next: the qwen35moe FFN (experts one module each
in the HF form, stacked by the converter), NEOX rope (no sections), the
fused in_proj_qkvz (per key head [q, k, v, z], split by the converter into
attn_qkv and attn_gate) and in_proj_ba (per key head [b, a], kept as
ssm_ba), and the value heads left grouped (llama.cpp repeats the key heads
interleaved for it: v head j uses key head j // (n_v/n_k)).

Shapes (the contract with the engine, notes/gdn-names.md): n_embd 64, n_layer
4 with full attention every --interval (2: layers 1 and 3 full, 0 and 2 GDN),
n_head 4, n_head_kv 2, head_dim 16, partial rotary 0.5 (rope dim 8, imrope
sections 2,1,1,0: equal positions for text, so NEOX rope on 8 dims), GDN:
2 key heads and 4 value heads of 16, conv kernel 4, n_ff 128, one MTP layer.
Weights are Gaussian with std 1/sqrt(fan_in) so activations stay O(1); the
tokenizer (default: the GPT-2 BPE vocabulary of the shared test models) is
copied from --vocab, the embeddings are tied to the output (--untied: an
lm_head of its own; --head-dim 64: heads of 64, what vLLM's CPU GDN kernels take).

--shape qwen3.5-0.8b writes a qwen35 f32 GGUF of random weights at the
shapes of Qwen/Qwen3.5-0.8B (SHAPES below: 24 layers, 1024 wide, about 773M
parameters, 3.1 GB) for speed measurements: the same draws' distributions
(float32 draws, so other values than a tiny model's), streamed one layer at
a time (the embedding is the largest part in memory), the --vocab tokens
padded with unreachable filler tokens to the shape's 248320 rows (--n-vocab,
--layers and the other flags override the shape: a reduced model of the
same widths, for trying a pipeline quickly).

The gguf package of the pinned llama.cpp sdist is used when present
(~/.cache/bangtrace/llama.cpp/0.3.36/.../gguf-py, or $GGUF_PY), otherwise the
installed one. OUT must not exist unless --force (which overwrites only a
file or folder this tool wrote: a GGUF, or a folder with config.json).
Exit 0 written, 2 bad arguments or input."""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SDIST_GGUF = os.path.expanduser(
    "~/.cache/bangtrace/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")


def die(msg):
    print("make-tiny-hybrid.py: %s" % msg, file=sys.stderr)
    sys.exit(2)


def import_gguf():
    p = os.environ.get("GGUF_PY") or SDIST_GGUF
    if os.path.isdir(os.path.join(p, "gguf")) and p not in sys.path:
        sys.path.insert(0, p)
    try:
        import gguf
    except ImportError as e:
        die("needs the gguf Python package (the pinned sdist's gguf-py or pip install gguf): %s" % e)
    if not hasattr(gguf.MODEL_ARCH, "QWEN35"):
        die("the gguf package at %s has no qwen35 architecture (too old)" % os.path.dirname(gguf.__file__))
    return gguf


ARCHS = ("qwen35", "qwen35moe", "qwen3next")

# Real models' shapes for --shape (random weights at that size, for speed
# measurements). qwen3.5-0.8b: Qwen/Qwen3.5-0.8B, the smallest dense Qwen3.5,
# text_config of its config.json as quoted (identically) by two public
# projects' test fixtures and matching the fitmygpu.com model page (24 layers,
# hidden 1024, 8 heads, 2 KV heads, 6 KV-bearing layers); the Hub file itself
# was not read here: hidden_size 1024, num_hidden_layers 24, layer_types
# [linear x3, full] x6 (full_attention_interval 4), num_attention_heads 8,
# num_key_value_heads 2, head_dim 256, attn_output_gate, linear_num_key_heads
# 16, linear_num_value_heads 16, linear_key_head_dim 128,
# linear_value_head_dim 128, linear_conv_kernel_dim 4, intermediate_size
# 3584, vocab_size 248320, tie_word_embeddings, mtp_num_hidden_layers 1,
# rms_norm_eps 1e-6, max_position_embeddings 262144, rope_parameters
# rope_theta 1e7, partial_rotary_factor 0.25 (rope dim 64), mrope_section
# [11, 11, 10] interleaved (GGUF dimension_sections [11, 11, 10, 0]).
SHAPES = {
    "qwen3.5-0.8b": dict(n_embd=1024, n_layer=24, full_attention_interval=4, n_head=8, n_head_kv=2, head_dim=256,
                         partial_rotary_factor=0.25, rope_sections=[11, 11, 10, 0], rope_base=1e7,
                         n_k_heads=16, n_v_heads=16, head_k_dim=128, head_v_dim=128, conv_kernel=4, n_ff=3584,
                         n_mtp=1, norm_eps=1e-6, ctx_len=262144, n_vocab=248320),
}


def shape_config(shape, layers=None, interval=None, mtp=None, rope_base=None, n_vocab=None):
    """The qwen35 config of a --shape; the other arguments, when given,
    override its layers, interval, MTP layers, rope base and vocabulary size
    (a reduced model of the same widths)."""
    if shape not in SHAPES:
        die("unknown --shape %s (%s)" % (shape, ", ".join(SHAPES)))
    cfg = dict(SHAPES[shape], arch="qwen35", n_expert=0, shape=shape)
    for k, v in (("n_layer", layers), ("full_attention_interval", interval), ("n_mtp", mtp),
                 ("rope_base", rope_base), ("n_vocab", n_vocab)):
        if v is not None:
            cfg[k] = type(cfg[k])(v)
    if cfg["n_layer"] < 1 or cfg["full_attention_interval"] < 1 or cfg["n_mtp"] not in (0, 1) or cfg["n_vocab"] < 1:
        die("--layers, --interval and --n-vocab must be positive, --mtp 0 or 1")
    return cfg


def default_config(arch="qwen35", layers=4, interval=2, mtp=1, rope_base=10000.0, head_dim=16, untied=False):
    if arch not in ARCHS:
        die("architecture %s is not supported (%s)" % (arch, ", ".join(ARCHS)))
    if layers < 1 or interval < 1 or mtp < 0 or mtp > 1:
        die("--layers and --interval must be positive, --mtp 0 or 1")
    if head_dim not in (16, 32, 64):
        die("--head-dim must be 16, 32 or 64")
    f = head_dim // 16     # the rope sections scale with the rotated half of the head
    cfg = dict(arch=arch, n_embd=64, n_layer=layers, full_attention_interval=interval, n_head=4,
               n_head_kv=2, head_dim=head_dim, partial_rotary_factor=0.5, rope_sections=[2 * f, f, f, 0],
               rope_base=float(rope_base), n_k_heads=2, n_v_heads=4, head_k_dim=head_dim, head_v_dim=head_dim,
               conv_kernel=4, n_ff=128, n_mtp=mtp, norm_eps=1e-6, ctx_len=2048, n_expert=0, untied=untied)
    if arch in ("qwen35moe", "qwen3next"):
        # 4 routed experts of 32, 2 per token, plus a gated shared expert of 64
        cfg.update(n_expert=4, n_expert_used=2, n_ff_exp=32, n_ff_shexp=64, n_ff=32)
    return cfg


def recurrent(cfg, L):
    """Layer L is a GDN layer (llama.cpp's rule for full_attention_interval)."""
    return L < cfg["n_layer"] and (L + 1) % cfg["full_attention_interval"] != 0


# ------------------------------------------------------------- the weights

def hf_weights(cfg, n_vocab, seed):
    """Every tensor of the model under its Hugging Face name, float32, in the
    HF layout. Deterministic from seed (each tensor from its own stream)."""
    w = {}
    for _, part in hf_parts(cfg, n_vocab, seed):
        w.update(part)
    return w


def hf_parts(cfg, n_vocab, seed, lean=False, shapes_only=False):
    """The weights of hf_weights one part at a time, in GGUF order: (PART,
    dict) with PART "embed", ("layer", L), "norm", "mtp". lean (the full-size
    shapes): draw in float32 (other values than the default float64 draws,
    half the memory and time); shapes_only: zeros of the right shapes
    (calloc'd, never touched: the tensor table of a streamed GGUF)."""
    import zlib
    E, F = cfg["n_embd"], cfg["n_ff"]
    H, KVH, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    nk, nv, dk, dv = cfg["n_k_heads"], cfg["n_v_heads"], cfg["head_k_dim"], cfg["head_v_dim"]
    K = cfg["conv_kernel"]
    conv_dim = 2 * nk * dk + nv * dv
    w = {}

    def rng(name):
        return np.random.default_rng([seed, zlib.crc32(name.encode())])

    def gauss(key, shape, scale):
        if shapes_only:
            return np.zeros(shape, np.float32)
        a = rng(key).standard_normal(shape, dtype=np.float32)
        a *= np.float32(scale)
        return a

    def mat(name, n_out, n_in, gain=1.0):
        if lean:
            w[name] = gauss(name, (n_out, n_in), gain / np.sqrt(n_in))
            return
        w[name] = (rng(name).standard_normal((n_out, n_in)) * gain / np.sqrt(n_in)).astype(np.float32)

    def normw(name, n, center=0.0, std=0.1):
        # HF Qwen3.5 RMSNorm weights are an offset from 1 (center 0); the
        # gated norm of the linear attention is a plain weight (center 1)
        w[name] = (center + std * rng(name).standard_normal(n)).astype(np.float32)

    if lean:
        w["model.embed_tokens.weight"] = gauss("embed", (n_vocab, E), 0.5)
    else:
        w["model.embed_tokens.weight"] = (0.5 * rng("embed").standard_normal((n_vocab, E))).astype(np.float32)
    yield "embed", w

    def attn_block(p):
        mat(p + "self_attn.q_proj.weight", H * hd * 2, E)   # per head: [query(hd), gate(hd)]
        mat(p + "self_attn.k_proj.weight", KVH * hd, E)
        mat(p + "self_attn.v_proj.weight", KVH * hd, E)
        mat(p + "self_attn.o_proj.weight", E, H * hd)
        normw(p + "self_attn.q_norm.weight", hd)
        normw(p + "self_attn.k_norm.weight", hd)

    def ffn_block(p):
        normw(p + "input_layernorm.weight", E)
        normw(p + "post_attention_layernorm.weight", E)
        if not cfg["n_expert"]:
            mat(p + "mlp.gate_proj.weight", F, E)
            mat(p + "mlp.up_proj.weight", F, E)
            mat(p + "mlp.down_proj.weight", E, F)
            return
        # Qwen3.5-MoE checkpoints: the router, fused experts, a gated shared expert
        X, FE, FS = cfg["n_expert"], cfg["n_ff_exp"], cfg["n_ff_shexp"]
        mat(p + "mlp.gate.weight", X, E, gain=2.0)
        if cfg["arch"] == "qwen3next":      # one module per expert
            for e in range(X):
                mat(p + "mlp.experts.%d.gate_proj.weight" % e, FE, E)
                mat(p + "mlp.experts.%d.up_proj.weight" % e, FE, E)
                mat(p + "mlp.experts.%d.down_proj.weight" % e, E, FE)
        else:
            w[p + "mlp.experts.gate_up_proj"] = (rng(p + "gate_up").standard_normal((X, 2 * FE, E))
                                                 / np.sqrt(E)).astype(np.float32)
            w[p + "mlp.experts.down_proj"] = (rng(p + "down").standard_normal((X, E, FE))
                                              / np.sqrt(FE)).astype(np.float32)
        mat(p + "mlp.shared_expert.gate_proj.weight", FS, E)
        mat(p + "mlp.shared_expert.up_proj.weight", FS, E)
        mat(p + "mlp.shared_expert.down_proj.weight", E, FS)
        mat(p + "mlp.shared_expert_gate.weight", 1, E)

    for L in range(cfg["n_layer"]):
        w = {}
        p = "model.layers.%d." % L
        ffn_block(p)
        if not recurrent(cfg, L):
            attn_block(p)
            yield ("layer", L), w
            continue
        a = p + "linear_attn."
        if cfg["arch"] == "qwen3next":
            # per key head: [q(dk), k(dk), v(per*dv), z(per*dv)] and [b(per), a(per)]
            mat(a + "in_proj_qkvz.weight", 2 * conv_dim - 2 * nk * dk, E)
            mat(a + "in_proj_ba.weight", 2 * nv, E)
        else:
            mat(a + "in_proj_qkv.weight", conv_dim, E)
            mat(a + "in_proj_z.weight", nv * dv, E)
            mat(a + "in_proj_b.weight", nv, E)
            mat(a + "in_proj_a.weight", nv, E)
        w[a + "conv1d.weight"] = (rng(a + "conv1d").standard_normal((conv_dim, 1, K)) / np.sqrt(K)
                                  ).astype(np.float32)
        # A in [1, 8]; dt_bias puts softplus(alpha + dt_bias) near 0.05..0.3,
        # so the log decay g is about -0.05..-2 per token: the state both
        # remembers and forgets over a test prompt
        w[a + "A_log"] = np.log(rng(a + "A").uniform(1.0, 8.0, nv)).astype(np.float32)
        dt = rng(a + "dt").uniform(0.05, 0.3, nv)
        w[a + "dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(np.float32)   # softplus^-1(dt)
        normw(a + "norm.weight", dv, center=1.0)
        mat(a + "out_proj.weight", E, nv * dv)
        yield ("layer", L), w
    w = {}
    normw("model.norm.weight", E)
    if cfg.get("untied"):       # its own stream: every other tensor as in the tied model
        mat("lm_head.weight", n_vocab, E)
    yield "norm", w
    if cfg["n_mtp"]:
        w = {}
        p = "mtp.layers.0."
        ffn_block(p)
        attn_block(p)
        mat("mtp.fc.weight", E, 2 * E)
        normw("mtp.pre_fc_norm_embedding.weight", E)
        normw("mtp.pre_fc_norm_hidden.weight", E)
        normw("mtp.norm.weight", E)
        yield "mtp", w


def tiled(n_k, n_v_per_k, head_dim):
    """Row permutation from grouped value heads (HF: v head j serves key
    head j // n_v_per_k) to tiled order (GGUF: j serves j % n_k)."""
    idx = np.arange(n_k * n_v_per_k * head_dim).reshape(n_k, n_v_per_k, head_dim)
    return idx.transpose(1, 0, 2).reshape(-1)


def gguf_tensors(cfg, w):
    """The GGUF tensors (name, float32 array in numpy order) converted from
    the HF weights w the way llama.cpp's converter converts them."""
    parts = ["embed"] + [("layer", L) for L in range(cfg["n_layer"])] + ["norm"] + (["mtp"] if cfg["n_mtp"] else [])
    return list(gguf_parts(cfg, ((part, w) for part in parts)))


def gguf_parts(cfg, parts):
    """gguf_tensors one part at a time: parts yields (PART, HF weights of at
    least that part) as hf_parts does; yields (name, array) in GGUF order."""
    nk, nv, dk, dv = cfg["n_k_heads"], cfg["n_v_heads"], cfg["head_k_dim"], cfg["head_v_dim"]
    per = nv // nk
    rv, r1 = tiled(nk, per, dv), tiled(nk, per, 1)
    if cfg["arch"] == "qwen3next":
        # Qwen3-Next keeps the grouped order: llama.cpp repeats its key heads interleaved
        rv, r1 = np.arange(nv * dv), np.arange(nv)
    qk = 2 * nk * dk
    out, w = [], None

    def plus1(a):
        return (a + np.float32(1.0)).astype(np.float32)

    def block(hp, g):
        out.append((g + "attn_norm.weight", plus1(w[hp + "input_layernorm.weight"])))
        out.append((g + "post_attention_norm.weight", plus1(w[hp + "post_attention_layernorm.weight"])))
        if hp + "self_attn.q_proj.weight" in w:
            s = hp + "self_attn."
            out.append((g + "attn_q.weight", w[s + "q_proj.weight"]))
            out.append((g + "attn_k.weight", w[s + "k_proj.weight"]))
            out.append((g + "attn_v.weight", w[s + "v_proj.weight"]))
            out.append((g + "attn_output.weight", w[s + "o_proj.weight"]))
            out.append((g + "attn_q_norm.weight", plus1(w[s + "q_norm.weight"])))
            out.append((g + "attn_k_norm.weight", plus1(w[s + "k_norm.weight"])))
        else:
            a = hp + "linear_attn."
            if a + "in_proj_qkvz.weight" in w:
                # the converter: per key head [q, k, v, z] -> [q all, k all, v all] and z
                qkvz = w[a + "in_proj_qkvz.weight"].reshape(nk, 2 * dk + 2 * per * dv, -1)
                q, k = qkvz[:, :dk], qkvz[:, dk:2 * dk]
                v, z = qkvz[:, 2 * dk:2 * dk + per * dv], qkvz[:, 2 * dk + per * dv:]
                E = qkvz.shape[-1]
                out.append((g + "attn_qkv.weight", np.concatenate([q.reshape(-1, E), k.reshape(-1, E),
                                                                   v.reshape(-1, E)])))
                out.append((g + "attn_gate.weight", np.ascontiguousarray(z.reshape(-1, E))))
                out.append((g + "ssm_ba.weight", w[a + "in_proj_ba.weight"]))
            else:
                qkv = w[a + "in_proj_qkv.weight"]
                out.append((g + "attn_qkv.weight", np.concatenate([qkv[:qk], qkv[qk:][rv]])))
                out.append((g + "attn_gate.weight", w[a + "in_proj_z.weight"][rv]))
                out.append((g + "ssm_beta.weight", w[a + "in_proj_b.weight"][r1]))
                out.append((g + "ssm_alpha.weight", w[a + "in_proj_a.weight"][r1]))
            conv = w[a + "conv1d.weight"][:, 0, :]
            out.append((g + "ssm_conv1d.weight", np.ascontiguousarray(np.concatenate([conv[:qk], conv[qk:][rv]]))))
            out.append((g + "ssm_dt.bias", w[a + "dt_bias"][r1]))
            out.append((g + "ssm_a", (-np.exp(w[a + "A_log"].astype(np.float64))).astype(np.float32)[r1]))
            out.append((g + "ssm_norm.weight", w[a + "norm.weight"]))
            out.append((g + "ssm_out.weight", np.ascontiguousarray(w[a + "out_proj.weight"][:, rv])))
        if not cfg["n_expert"]:
            out.append((g + "ffn_gate.weight", w[hp + "mlp.gate_proj.weight"]))
            out.append((g + "ffn_up.weight", w[hp + "mlp.up_proj.weight"]))
            out.append((g + "ffn_down.weight", w[hp + "mlp.down_proj.weight"]))
            return
        FE = cfg["n_ff_exp"]
        out.append((g + "ffn_gate_inp.weight", w[hp + "mlp.gate.weight"]))
        if hp + "mlp.experts.gate_up_proj" in w:
            gu = w[hp + "mlp.experts.gate_up_proj"]
            out.append((g + "ffn_gate_exps.weight", np.ascontiguousarray(gu[:, :FE])))
            out.append((g + "ffn_up_exps.weight", np.ascontiguousarray(gu[:, FE:])))
            out.append((g + "ffn_down_exps.weight", w[hp + "mlp.experts.down_proj"]))
        else:       # the converter stacks the per-expert modules
            for op in ("gate", "up", "down"):
                out.append((g + "ffn_%s_exps.weight" % op, np.stack(
                    [w[hp + "mlp.experts.%d.%s_proj.weight" % (e, op)] for e in range(cfg["n_expert"])])))
        out.append((g + "ffn_gate_inp_shexp.weight", w[hp + "mlp.shared_expert_gate.weight"].reshape(-1)))
        out.append((g + "ffn_gate_shexp.weight", w[hp + "mlp.shared_expert.gate_proj.weight"]))
        out.append((g + "ffn_up_shexp.weight", w[hp + "mlp.shared_expert.up_proj.weight"]))
        out.append((g + "ffn_down_shexp.weight", w[hp + "mlp.shared_expert.down_proj.weight"]))

    for part, w in parts:
        out = []
        if part == "embed":
            out.append(("token_embd.weight", w["model.embed_tokens.weight"]))
        elif part == "norm":
            out.append(("output_norm.weight", plus1(w["model.norm.weight"])))
            if "lm_head.weight" in w:
                out.append(("output.weight", w["lm_head.weight"]))
        elif part == "mtp":
            g = "blk.%d." % cfg["n_layer"]
            block("mtp.layers.0.", g)
            out.append((g + "nextn.eh_proj.weight", w["mtp.fc.weight"]))
            out.append((g + "nextn.enorm.weight", plus1(w["mtp.pre_fc_norm_embedding.weight"])))
            out.append((g + "nextn.hnorm.weight", plus1(w["mtp.pre_fc_norm_hidden.weight"])))
            out.append((g + "nextn.shared_head_norm.weight", plus1(w["mtp.norm.weight"])))
        else:
            block("model.layers.%d." % part[1], "blk.%d." % part[1])
        for t in out:
            yield t


# ------------------------------------------------------------------ output

_VOCABS = {}


def read_vocab(gguf, path):
    """(reader, tokenizer.* fields, n_vocab); parsed once per process."""
    if path in _VOCABS:
        return _VOCABS[path]
    try:
        r = gguf.GGUFReader(path, "r")
    except Exception as e:
        die("%s: not a readable GGUF vocabulary: %s" % (path, e))
    fields = [(k, f) for k, f in r.fields.items() if k.startswith("tokenizer.")]
    toks = r.fields.get("tokenizer.ggml.tokens")
    if toks is None:
        die("%s: no tokenizer.ggml.tokens" % path)
    _VOCABS[path] = (r, fields, len(toks.data))
    return _VOCABS[path]


def write_gguf(gguf, path, cfg, tensors, vocab_fields, seed):
    wr = gguf.GGUFWriter(path, cfg["arch"])
    write_meta(gguf, wr, cfg, vocab_fields, seed)
    for name, arr in tensors:
        wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


# the filler rows of a vocabulary padded to a --shape's size: plain tokens
# no merge produces (so never a tokenizer's output), unique, printable ASCII
# (byte-level BPE keeps those characters as they are)
def filler_token(i):
    return "~bt_filler_%06d~" % i


def write_gguf_streamed(gguf, path, cfg, vocab_fields, seed):
    """A --shape model: the tensor table from a shapes-only pass (zeros,
    never touched), then each part drawn, converted and written in turn, so
    at most one layer's weights (and the embedding) are in memory at once."""
    n_vocab = cfg["n_vocab"]
    wr = gguf.GGUFWriter(path, cfg["arch"])
    write_meta(gguf, wr, cfg, vocab_fields, seed, n_vocab)
    for name, arr in gguf_parts(cfg, hf_parts(cfg, n_vocab, seed, lean=True, shapes_only=True)):
        wr.add_tensor_info(name, arr.shape, np.dtype(np.float32), arr.size * 4)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_ti_data_to_file()
    for name, arr in gguf_parts(cfg, hf_parts(cfg, n_vocab, seed, lean=True)):
        wr.write_tensor_data(np.ascontiguousarray(arr, dtype=np.float32))
    wr.close()


def write_meta(gguf, wr, cfg, vocab_fields, seed, n_vocab=None):
    """The architecture's keys and the vocabulary's tokenizer.* keys; with
    n_vocab, the token list padded with filler_token rows to that size."""
    arch = cfg["arch"]
    if cfg.get("shape"):
        wr.add_name("random-%s-%s-seed%d" % (arch, cfg["shape"], seed))
    else:
        wr.add_name("tiny-%s-seed%d" % (arch, seed))
    wr.add_file_type(0)
    wr.add_block_count(cfg["n_layer"] + cfg["n_mtp"])
    wr.add_context_length(cfg["ctx_len"])
    wr.add_embedding_length(cfg["n_embd"])
    wr.add_feed_forward_length(cfg["n_ff"])
    wr.add_head_count(cfg["n_head"])
    wr.add_head_count_kv(cfg["n_head_kv"])
    wr.add_key_length(cfg["head_dim"])
    wr.add_value_length(cfg["head_dim"])
    wr.add_layer_norm_rms_eps(cfg["norm_eps"])
    wr.add_rope_freq_base(cfg["rope_base"])
    wr.add_rope_dimension_count(int(cfg["head_dim"] * cfg["partial_rotary_factor"]))
    if arch != "qwen3next":        # Qwen3.5's IMROPE sections; Qwen3-Next is NEOX
        wr.add_rope_dimension_sections(cfg["rope_sections"])
    wr.add_ssm_conv_kernel(cfg["conv_kernel"])
    wr.add_ssm_state_size(cfg["head_k_dim"])
    wr.add_ssm_group_count(cfg["n_k_heads"])
    wr.add_ssm_time_step_rank(cfg["n_v_heads"])
    wr.add_ssm_inner_size(cfg["head_v_dim"] * cfg["n_v_heads"])
    wr.add_full_attention_interval(cfg["full_attention_interval"])
    if cfg["n_mtp"]:
        wr.add_nextn_predict_layers(cfg["n_mtp"])
    if cfg["n_expert"]:
        wr.add_expert_count(cfg["n_expert"])
        wr.add_expert_used_count(cfg["n_expert_used"])
        wr.add_expert_feed_forward_length(cfg["n_ff_exp"])
        wr.add_expert_shared_feed_forward_length(cfg["n_ff_shexp"])
    for k, f in vocab_fields:
        v = f.contents()
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        if n_vocab is not None and isinstance(v, list):
            have = len(v)
            if k == "tokenizer.ggml.tokens":
                v = v + [filler_token(i) for i in range(have, n_vocab)]
            elif k == "tokenizer.ggml.token_type":
                v = v + [int(gguf.TokenType.NORMAL)] * (n_vocab - have)
            elif k == "tokenizer.ggml.scores":
                v = v + [0.0] * (n_vocab - have)
        wr.add_key_value(k, v, f.types[0], sub)


def hf_config(cfg, n_vocab, bos, eos):
    n = cfg["n_layer"]
    moe = {}
    if cfg["n_expert"]:
        moe = {"num_experts": cfg["n_expert"], "num_experts_per_tok": cfg["n_expert_used"],
               "moe_intermediate_size": cfg["n_ff_exp"], "shared_expert_intermediate_size": cfg["n_ff_shexp"],
               "norm_topk_prob": True}
    cls, mt = ("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text") if moe else ("Qwen3_5ForCausalLM", "qwen3_5_text")
    if cfg["arch"] == "qwen3next":
        cls, mt = "Qwen3NextForCausalLM", "qwen3_next"
        moe.update(decoder_sparse_step=1, mlp_only_layers=[])
    return dict(moe, **{"architectures": [cls], "model_type": mt,
            "hidden_size": cfg["n_embd"], "intermediate_size": cfg["n_ff"], "num_hidden_layers": n,
            "num_attention_heads": cfg["n_head"], "num_key_value_heads": cfg["n_head_kv"],
            "head_dim": cfg["head_dim"], "rms_norm_eps": cfg["norm_eps"], "vocab_size": n_vocab,
            "max_position_embeddings": cfg["ctx_len"], "hidden_act": "silu", "tie_word_embeddings": not cfg.get("untied"),
            "attn_output_gate": True, "full_attention_interval": cfg["full_attention_interval"],
            "layer_types": ["linear_attention" if recurrent(cfg, L) else "full_attention" for L in range(n)],
            "linear_conv_kernel_dim": cfg["conv_kernel"], "linear_key_head_dim": cfg["head_k_dim"],
            "linear_value_head_dim": cfg["head_v_dim"], "linear_num_key_heads": cfg["n_k_heads"],
            "linear_num_value_heads": cfg["n_v_heads"], "mtp_num_hidden_layers": cfg["n_mtp"],
            "rope_parameters": dict({"rope_type": "default", "rope_theta": cfg["rope_base"],
                                     "partial_rotary_factor": cfg["partial_rotary_factor"]},
                                    **({} if cfg["arch"] == "qwen3next" else
                                       {"mrope_section": cfg["rope_sections"][:3], "mrope_interleaved": True})),
            "rope_theta": cfg["rope_base"], "partial_rotary_factor": cfg["partial_rotary_factor"],
            "torch_dtype": "float32", "bos_token_id": bos, "eos_token_id": eos})


def load_gguf_to_hf():
    spec = importlib.util.spec_from_file_location("gguf_to_hf", os.path.join(HERE, "gguf-to-hf.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_hf(out, cfg, w, vocab_reader):
    g2h = load_gguf_to_hf()
    model = vocab_reader.fields.get("tokenizer.ggml.model")
    if model is None or model.contents() != "gpt2" or "tokenizer.ggml.merges" not in vocab_reader.fields:
        die("--format hf needs a byte-level BPE vocabulary (tokenizer.ggml.model gpt2 with merges) for "
            "tokenizer.json")
    os.makedirs(out, exist_ok=True)
    n_vocab, bos, eos = g2h.tokenizer_files(vocab_reader, out, None, "string")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, n_vocab, bos, eos), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f, indent=2)
    g2h.write_safetensors(os.path.join(out, "model.safetensors"), sorted(w.items()), "f32")


def check_out(out, fmt, force):
    if os.path.islink(out):
        die("%s is a symbolic link: refusing to write through it" % out)
    if not os.path.exists(out):
        return
    if not force:
        die("%s exists (--force overwrites a model this tool wrote)" % out)
    if fmt == "gguf":
        ok = os.path.isfile(out) and open(out, "rb").read(4) == b"GGUF"
    else:
        ok = os.path.isdir(out) and (not os.listdir(out) or os.path.isfile(os.path.join(out, "config.json")))
    if not ok:
        die("%s exists and is not a %s model: refusing to overwrite it" % (out, fmt.upper()))


def write_beside(out, write):
    """write(tmp) beside OUT, then renamed to OUT: no half-written model
    under its name; a write error is one line, exit 2."""
    tmp = "%s.tmp%d" % (out, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, out)
    except OSError as e:
        die("%s: cannot write: %s" % (out, e))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def make(out, fmt="gguf", arch="qwen35", seed=0, vocab=None, layers=4, interval=2, mtp=1,
         rope_base=10000.0, shape=None, n_vocab=None, head_dim=16, untied=False):
    """Library entry: write the model, return (cfg, hf weights); with shape
    (a --shape model, GGUF only, streamed) the weights are not kept: (cfg,
    None). layers, interval, mtp, rope_base and n_vocab of None take the
    shape's values."""
    gguf = import_gguf()
    vocab = vocab or os.path.join(os.environ.get("BT_SHARED", "/work/shared"),
                                  "models/gguf-vocab/ggml-vocab-gpt-2.gguf")
    if not os.path.isfile(vocab):
        die("%s: no such vocabulary file (--vocab FILE.gguf, or set BT_SHARED)" % vocab)
    if shape:
        if fmt != "gguf" or arch != "qwen35":
            die("--shape writes a qwen35 GGUF only (not --format %s, --arch %s)" % (fmt, arch))
        cfg = shape_config(shape, layers, interval, mtp, rope_base, n_vocab)
        reader, fields, have = read_vocab(gguf, vocab)
        if have > cfg["n_vocab"]:
            die("%s has %d tokens, more than the %d rows of --shape %s" % (vocab, have, cfg["n_vocab"], shape))
        write_beside(out, lambda tmp: write_gguf_streamed(gguf, tmp, cfg, fields, seed))
        return cfg, None
    if n_vocab is not None:
        die("--n-vocab goes with --shape")
    cfg = default_config(arch, layers, interval, mtp, rope_base, head_dim, untied)
    reader, fields, n_vocab = read_vocab(gguf, vocab)
    w = hf_weights(cfg, n_vocab, seed)
    if fmt == "gguf":
        write_beside(out, lambda tmp: write_gguf(gguf, tmp, cfg, gguf_tensors(cfg, w), fields, seed))
    else:
        write_hf(out, cfg, w, reader)
    return cfg, w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--format", choices=("gguf", "hf"), default="gguf")
    ap.add_argument("--arch", choices=ARCHS, default="qwen35")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", help="GGUF whose tokenizer.* keys are copied (default: the shared GPT-2 vocab)")
    ap.add_argument("--shape", choices=sorted(SHAPES),
                    help="random weights at a real model's shapes (GGUF, qwen35; the flags below override them)")
    ap.add_argument("--layers", type=int, help="layers (default 4, or the shape's)")
    ap.add_argument("--interval", type=int, help="full attention every N-th layer (default 2, or the shape's)")
    ap.add_argument("--mtp", type=int, choices=(0, 1), help="MTP (nextn) layers (default 1, or the shape's)")
    ap.add_argument("--rope-base", type=float, help="rope base (default 10000, or the shape's)")
    ap.add_argument("--n-vocab", type=int, help="with --shape: vocabulary rows (default the shape's; "
                    "the --vocab tokens padded with unreachable filler tokens)")
    ap.add_argument("--head-dim", type=int, default=16,
                    help="the attention and gated delta net heads' width (16, 32 or 64; default 16; vLLM's CPU kernels take multiples of 32)")
    ap.add_argument("--untied", action="store_true",
                    help="an output head of its own (lm_head / output.weight) instead of the tied embeddings")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    check_out(a.out, a.format, a.force)
    if a.shape:
        make(a.out, a.format, a.arch, a.seed, a.vocab, a.layers, a.interval, a.mtp, a.rope_base, a.shape, a.n_vocab)
        return 0
    if a.n_vocab is not None:
        die("--n-vocab goes with --shape")
    make(a.out, a.format, a.arch, a.seed, a.vocab, 4 if a.layers is None else a.layers,
         2 if a.interval is None else a.interval, 1 if a.mtp is None else a.mtp,
         10000.0 if a.rope_base is None else a.rope_base, head_dim=a.head_dim, untied=a.untied)
    return 0


if __name__ == "__main__":
    sys.exit(main())
