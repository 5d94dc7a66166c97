#!/usr/bin/env python3
"""make-tiny-gptoss.py - write a tiny random-weight gpt-oss model (llama.cpp's
GGUF architecture "gpt-oss"), deterministic from --seed, that llama.cpp
loads and runs unchanged.

    tools/make-tiny-gptoss.py OUT.gguf [--experts f32|mxfp4|mxfp4-f32] [--seed N]
                              [--vocab FILE.gguf] [--layers N] [--window N]
                              [--force]

The model has what makes gpt-oss itself: layers alternating sliding-window
attention (even layers, llama.cpp's pattern 2: a query at position p sees
keys p-window+1..p; --window, default 4, so it matters on short prompts) and
full attention; a learned sink logit per head (attn_sinks) in each softmax's
denominator; biases on q, k, v and the attention output; a post-attention
RMSNorm (post_attention_norm) before a mixture of 4 experts of 64 (2 per
token) with a router bias and per-expert gate/up/down biases, the clamped
SwiGLU (alpha 1.702, limit 7) and softmax over the chosen experts' router
logits; NEOX rope with base 150000 and YaRN scaling keys as the converter
writes them for the real model (rope.scaling.type yarn, factor 32,
original_context_length; here 128 so the YaRN ramp falls inside the 16
rotary pairs). Shapes: n_embd 64, 4 layers, 4 heads of 32 (q width 128, not
n_embd), 2 KV heads, an untied output head.

--experts f32 (the default) stores every tensor in f32; --experts mxfp4 stores
the three expert tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps) as
llama.cpp's real gpt-oss files do, in MXFP4 (ggml type 39, blocks of 32 along
each row), quantized from the same draws by gguf.quants; --experts mxfp4-f32
stores those MXFP4 values dequantized, as f32 (the same model as mxfp4 with
f32 weights: what llama.cpp computes with f32 activations, the reference for
reading MXFP4 as stored).

The tokenizer.* keys are copied from --vocab (default: the shared GPT-2 BPE
vocabulary), as tools/make-tiny-hybrid.py does (its vocabulary reader and
its write-beside-then-rename are used). OUT must not exist; --force replaces
a regular GGUF file only. Exit 0 written, 2 bad arguments or input."""

import argparse
import importlib.util
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def die(msg):
    print("make-tiny-gptoss.py: %s" % msg, file=sys.stderr)
    sys.exit(2)


def hybrid_tool():
    """tools/make-tiny-hybrid.py as a module (the shared GGUF helpers)."""
    spec = importlib.util.spec_from_file_location("make_tiny_hybrid", os.path.join(HERE, "make-tiny-hybrid.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def import_gguf(mth):
    gguf = mth.import_gguf()
    if not hasattr(gguf.MODEL_ARCH, "GPT_OSS") or not hasattr(gguf.GGMLQuantizationType, "MXFP4"):
        die("the gguf package at %s has no gpt-oss architecture or MXFP4 type (too old)"
            % os.path.dirname(gguf.__file__))
    return gguf


def default_config(layers=4, window=4):
    return dict(n_embd=64, n_layer=layers, n_head=4, n_head_kv=2, head_dim=32, n_expert=4, n_expert_used=2,
                n_ff_exp=64, sliding_window=window, norm_eps=1e-5, rope_base=150000.0, ctx_len=4096,
                yarn_factor=32.0, yarn_orig_ctx=128)


def weights(cfg, n_vocab, seed):
    """{gguf tensor name: f32 array in numpy order (ne reversed)}. Each
    tensor draws from its own stream (seed, name), so adding a tensor never
    changes another's values."""
    E, H, KV, D = cfg["n_embd"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    X, F = cfg["n_expert"], cfg["n_ff_exp"]

    def rng(name):
        return np.random.default_rng([seed, int.from_bytes(name.encode()[:16].ljust(16, b"\0"), "little") % (1 << 63),
                                      len(name)] + list(name.encode()))

    def gauss(name, shape, std):
        return (std * rng(name).standard_normal(shape)).astype(np.float32)

    w = {"token_embd.weight": gauss("token_embd.weight", (n_vocab, E), 0.5),
         "output_norm.weight": 1.0 + gauss("output_norm.weight", (E,), 0.1),
         "output.weight": gauss("output.weight", (n_vocab, E), 1.0 / np.sqrt(E))}
    for L in range(cfg["n_layer"]):
        p = "blk.%d." % L
        shapes = {
            "attn_norm.weight": ((E,), None), "post_attention_norm.weight": ((E,), None),
            "attn_q.weight": ((H * D, E), E), "attn_k.weight": ((KV * D, E), E), "attn_v.weight": ((KV * D, E), E),
            "attn_output.weight": ((E, H * D), H * D),
            "attn_q.bias": ((H * D,), 0), "attn_k.bias": ((KV * D,), 0), "attn_v.bias": ((KV * D,), 0),
            "attn_output.bias": ((E,), 0),
            "attn_sinks.weight": ((H,), -1),
            "ffn_gate_inp.weight": ((X, E), E), "ffn_gate_inp.bias": ((X,), 0),
            "ffn_gate_exps.weight": ((X, F, E), E), "ffn_up_exps.weight": ((X, F, E), E),
            "ffn_down_exps.weight": ((X, E, F), F),
            "ffn_gate_exps.bias": ((X, F), 0), "ffn_up_exps.bias": ((X, F), 0), "ffn_down_exps.bias": ((X, E), 0),
        }
        for name, (shape, fan_in) in shapes.items():
            key = p + name
            if fan_in is None:        # an RMSNorm weight near 1
                w[key] = 1.0 + gauss(key, shape, 0.1)
            elif fan_in == 0:         # a bias
                w[key] = gauss(key, shape, 0.2)
            elif fan_in == -1:        # sink logits: some heads give the sink real weight
                w[key] = gauss(key, shape, 1.5)
            else:
                # the gate and up projections a little larger, so the SwiGLU's clamp at 7 is reached
                gain = 3.0 if name in ("ffn_gate_exps.weight", "ffn_up_exps.weight") else 1.0
                w[key] = gauss(key, shape, gain / np.sqrt(fan_in))
    return w


EXPERT_MATS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")


def write_gguf(gguf, path, cfg, w, vocab_fields, seed, experts):
    wr = gguf.GGUFWriter(path, "gpt-oss")
    wr.add_name("tiny-gpt-oss-%s-seed%d" % (experts, seed))
    wr.add_file_type(int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE) if experts == "mxfp4" else 0)
    wr.add_block_count(cfg["n_layer"])
    wr.add_context_length(cfg["ctx_len"])
    wr.add_embedding_length(cfg["n_embd"])
    wr.add_feed_forward_length(cfg["n_ff_exp"])
    wr.add_head_count(cfg["n_head"])
    wr.add_head_count_kv(cfg["n_head_kv"])
    wr.add_key_length(cfg["head_dim"])
    wr.add_value_length(cfg["head_dim"])
    wr.add_layer_norm_rms_eps(cfg["norm_eps"])
    wr.add_rope_freq_base(cfg["rope_base"])
    wr.add_rope_dimension_count(cfg["head_dim"])
    wr.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    wr.add_rope_scaling_factor(cfg["yarn_factor"])
    wr.add_rope_scaling_orig_ctx_len(cfg["yarn_orig_ctx"])
    wr.add_sliding_window(cfg["sliding_window"])
    wr.add_expert_count(cfg["n_expert"])
    wr.add_expert_used_count(cfg["n_expert_used"])
    wr.add_expert_feed_forward_length(cfg["n_ff_exp"])
    for k, f in vocab_fields:
        v = f.contents()
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        wr.add_key_value(k, v, f.types[0], sub)
    mx = gguf.GGMLQuantizationType.MXFP4
    for name, arr in w.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if experts == "mxfp4" and name.endswith(EXPERT_MATS):
            wr.add_tensor(name, gguf.quants.quantize(arr, mx), raw_dtype=mx)
        elif experts == "mxfp4-f32" and name.endswith(EXPERT_MATS):
            wr.add_tensor(name, gguf.quants.dequantize(gguf.quants.quantize(arr, mx), mx).reshape(arr.shape))
        else:
            wr.add_tensor(name, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def check_out(out, force):
    if os.path.islink(out):
        die("%s is a symbolic link: refusing to write through it" % out)
    if not os.path.lexists(out):
        return
    if not force:
        die("%s exists: not replaced (--force replaces a GGUF file)" % out)
    if not os.path.isfile(out) or open(out, "rb").read(4) != b"GGUF":
        die("%s exists and is not a GGUF file: refusing to replace it" % out)


def make(out, experts="f32", seed=0, vocab=None, layers=4, window=4):
    """Library entry: write the model; returns (cfg, weights as drawn, f32)."""
    mth = hybrid_tool()
    gguf = import_gguf(mth)
    vocab = vocab or os.path.join(os.environ.get("BT_SHARED", "/work/shared"),
                                  "models/gguf-vocab/ggml-vocab-gpt-2.gguf")
    if not os.path.isfile(vocab):
        die("%s: no such vocabulary file (--vocab FILE.gguf, or set BT_SHARED)" % vocab)
    if layers < 1 or window < 1:
        die("--layers and --window must be positive")
    cfg = default_config(layers, window)
    _, fields, n_vocab = mth.read_vocab(gguf, vocab)
    w = weights(cfg, n_vocab, seed)
    mth.write_beside(out, lambda tmp: write_gguf(gguf, tmp, cfg, w, fields, seed, experts))
    return cfg, w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--experts", choices=("f32", "mxfp4", "mxfp4-f32"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", help="GGUF whose tokenizer.* keys are copied (default: the shared GPT-2 vocab)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--window", type=int, default=4, help="sliding window of the even layers (default 4)")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    check_out(a.out, a.force)
    make(a.out, a.experts, a.seed, a.vocab, a.layers, a.window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
