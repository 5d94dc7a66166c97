#!/usr/bin/env python3
"""make-tiny-gptoss.py - write a tiny random-weight gpt-oss model (llama.cpp's
GGUF architecture "gpt-oss"), deterministic from --seed, that llama.cpp
loads and runs unchanged.

    tools/make-tiny-gptoss.py OUT [--format gguf|hf] [--experts f32|mxfp4|mxfp4-f32]
                              [--seed N] [--vocab FILE.gguf] [--layers N]
                              [--window N] [--truncate true|false] [--shape bench] [--force]

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

--format hf writes the same model as a Hugging Face folder
(GptOssForCausalLM: config.json, model.safetensors, tokenizer.json) in the
layout transformers uses, which llama.cpp's converter turns into the GGUF
this tool writes: the experts fused as mlp.experts.gate_up_proj
[E, hidden, 2 ff] with gate and up in alternate columns (and
gate_up_proj_bias alike) and down_proj [E, ff, hidden]; with --experts
mxfp4 as gpt-oss ships them, *_blocks [E, rows, cols/32, 16] (element 2i
in the low nibble of byte i) and *_scales [E, rows, cols/32] (U8), and a
quantization_config of quant_method mxfp4; self_attn.sinks, mlp.router,
layer_types (the even layers sliding), rope_scaling yarn with truncate
false as the real config has it (--truncate true writes truncate: true, the
YaRN correction range rounded outwards as llama.cpp always rounds it: the
folder then computes exactly what the GGUF does; with false, transformers,
vLLM and bangtrace compute the range unrounded, llama.cpp's converter drops
the key).

The tokenizer.* keys are copied from --vocab (default: the shared GPT-2 BPE
vocabulary), as tools/make-tiny-hybrid.py does (its vocabulary reader and
its write-beside-then-rename are used). OUT must not exist; --force replaces
a regular GGUF file only (with --format hf, a folder holding config.json). Exit 0 written, 2 bad arguments or input."""

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


# --shape bench: gpt-oss-20b's head layout (heads of 64, 2:1 query to KV
# heads, window 128, YaRN over an original context of 4096) at a quarter
# of its width and a third of its depth, with its top-4 routing over 16
# experts: about 0.5 G parameters of which the experts are 0.4 G, small
# enough for the bench machine, large enough that decode reads memory.
SHAPES = {"bench": dict(n_embd=1024, n_layer=8, n_head=16, n_head_kv=8, head_dim=64, n_expert=16, n_expert_used=4,
                        n_ff_exp=1024, sliding_window=128, yarn_orig_ctx=4096)}


def default_config(layers=4, window=4, shape=None):
    cfg = dict(n_embd=64, n_layer=layers, n_head=4, n_head_kv=2, head_dim=32, n_expert=4, n_expert_used=2,
               n_ff_exp=64, sliding_window=window, norm_eps=1e-5, rope_base=150000.0, ctx_len=4096,
               yarn_factor=32.0, yarn_orig_ctx=128)
    if shape:
        cfg.update(SHAPES[shape])
    return cfg


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


def hf_mxfp4(gguf, arr):
    """f32 [..., rows, cols] -> (blocks [..., rows, cols/32, 16], scales
    [..., rows, cols/32]) in gpt-oss's checkpoint layout, the same values as
    gguf.quants' MXFP4 of arr (ggml: per block the scale, then element j in
    the low and j + 16 in the high nibble of byte j)."""
    q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.MXFP4)
    q = q.reshape(arr.shape[:-1] + (arr.shape[-1] // 32, 17))
    qs = q[..., 1:]
    elems = np.concatenate([qs & 15, qs >> 4], axis=-1)             # element 0..31
    blocks = (elems[..., 0::2] | (elems[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(blocks), np.ascontiguousarray(q[..., 0])


HF_NAMES = {"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
            "attn_sinks.weight": "self_attn.sinks", "ffn_gate_inp.weight": "mlp.router.weight",
            "ffn_gate_inp.bias": "mlp.router.bias", "ffn_down_exps.bias": "mlp.experts.down_proj_bias"}
for _o, _h in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("output", "o_proj")):
    for _k in ("weight", "bias"):
        HF_NAMES["attn_%s.%s" % (_o, _k)] = "self_attn.%s.%s" % (_h, _k)


def hf_tensors(gguf, cfg, w, experts):
    out = {"model.embed_tokens.weight": w["token_embd.weight"], "model.norm.weight": w["output_norm.weight"],
           "lm_head.weight": w["output.weight"]}
    mx = gguf.GGMLQuantizationType.MXFP4
    for L in range(cfg["n_layer"]):
        p, h = "blk.%d." % L, "model.layers.%d." % L
        for g, n in HF_NAMES.items():
            out[h + n] = w[p + g]
        gate, up, down = (w[p + n] for n in EXPERT_MATS)
        if experts == "mxfp4-f32":
            gate, up, down = (gguf.quants.dequantize(gguf.quants.quantize(a, mx), mx).reshape(a.shape)
                              for a in (gate, up, down))
        X, F, E = gate.shape
        gb = np.empty((X, 2 * F), np.float32)
        gb[:, 0::2], gb[:, 1::2] = w[p + "ffn_gate_exps.bias"], w[p + "ffn_up_exps.bias"]
        out[h + "mlp.experts.gate_up_proj_bias"] = gb
        if experts == "mxfp4":
            (gbk, gsc), (ubk, usc) = hf_mxfp4(gguf, gate), hf_mxfp4(gguf, up)
            bk = np.empty((X, 2 * F) + gbk.shape[2:], np.uint8)
            sc = np.empty((X, 2 * F) + gsc.shape[2:], np.uint8)
            bk[:, 0::2], bk[:, 1::2], sc[:, 0::2], sc[:, 1::2] = gbk, ubk, gsc, usc
            out[h + "mlp.experts.gate_up_proj_blocks"], out[h + "mlp.experts.gate_up_proj_scales"] = bk, sc
            out[h + "mlp.experts.down_proj_blocks"], out[h + "mlp.experts.down_proj_scales"] = hf_mxfp4(gguf, down)
        else:
            gu = np.empty((X, E, 2 * F), np.float32)
            gu[:, :, 0::2], gu[:, :, 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
            out[h + "mlp.experts.gate_up_proj"] = gu
            out[h + "mlp.experts.down_proj"] = np.ascontiguousarray(down.transpose(0, 2, 1))
    return out


def hf_config(cfg, n_vocab, bos, eos, experts, truncate=False):
    n = cfg["n_layer"]
    c = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": cfg["n_embd"],
         "intermediate_size": cfg["n_ff_exp"], "num_hidden_layers": n, "num_attention_heads": cfg["n_head"],
         "num_key_value_heads": cfg["n_head_kv"], "head_dim": cfg["head_dim"], "num_local_experts": cfg["n_expert"],
         "num_experts_per_tok": cfg["n_expert_used"], "experts_per_token": cfg["n_expert_used"],
         "sliding_window": cfg["sliding_window"],
         "layer_types": ["sliding_attention" if L % 2 == 0 else "full_attention" for L in range(n)],
         "rms_norm_eps": cfg["norm_eps"], "rope_theta": cfg["rope_base"],
         "rope_scaling": {"rope_type": "yarn", "factor": cfg["yarn_factor"], "beta_fast": 32.0, "beta_slow": 1.0,
                          "original_max_position_embeddings": cfg["yarn_orig_ctx"], "truncate": truncate},
         "max_position_embeddings": cfg["ctx_len"], "swiglu_limit": 7.0, "attention_bias": True,
         "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": False, "vocab_size": n_vocab,
         "torch_dtype": "float32", "bos_token_id": bos, "eos_token_id": eos}
    if experts == "mxfp4":
        c["quantization_config"] = {"quant_method": "mxfp4",
                                    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"]}
    return c


def write_hf(gguf, mth, out, cfg, w, reader, experts, truncate=False):
    import json
    spec = importlib.util.spec_from_file_location("gguf_to_hf", os.path.join(HERE, "gguf-to-hf.py"))
    g2h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g2h)
    os.makedirs(out, exist_ok=True)
    n_vocab, bos, eos = g2h.tokenizer_files(reader, out, None, "string")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, n_vocab, bos, eos, experts, truncate), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f, indent=2)
    g2h.write_safetensors(os.path.join(out, "model.safetensors"), sorted(hf_tensors(gguf, cfg, w, experts).items()), "f32")


def check_out(out, force, fmt="gguf"):
    if os.path.islink(out):
        die("%s is a symbolic link: refusing to write through it" % out)
    if not os.path.lexists(out):
        return
    if not force:
        die("%s exists: not replaced (--force replaces a %s)" % (out, "GGUF file" if fmt == "gguf" else "model folder"))
    if fmt == "hf":
        if not os.path.isdir(out) or (os.listdir(out) and not os.path.isfile(os.path.join(out, "config.json"))):
            die("%s exists and is not a model folder: refusing to replace it" % out)
    elif not os.path.isfile(out) or open(out, "rb").read(4) != b"GGUF":
        die("%s exists and is not a GGUF file: refusing to replace it" % out)


def make(out, experts="f32", seed=0, vocab=None, layers=4, window=4, fmt="gguf", truncate=False, shape=None):
    """Library entry: write the model (a GGUF, or with fmt "hf" a folder);
    returns (cfg, weights as drawn, f32)."""
    mth = hybrid_tool()
    gguf = import_gguf(mth)
    vocab = vocab or os.path.join(os.environ.get("BT_SHARED", "/work/shared"),
                                  "models/gguf-vocab/ggml-vocab-gpt-2.gguf")
    if not os.path.isfile(vocab):
        die("%s: no such vocabulary file (--vocab FILE.gguf, or set BT_SHARED)" % vocab)
    if layers < 1 or window < 1:
        die("--layers and --window must be positive")
    cfg = default_config(layers, window, shape)
    reader, fields, n_vocab = mth.read_vocab(gguf, vocab)
    w = weights(cfg, n_vocab, seed)
    if fmt == "hf":
        write_hf(gguf, mth, out, cfg, w, reader, experts, truncate)
    else:
        mth.write_beside(out, lambda tmp: write_gguf(gguf, tmp, cfg, w, fields, seed, experts))
    return cfg, w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--format", choices=("gguf", "hf"), default="gguf")
    ap.add_argument("--experts", choices=("f32", "mxfp4", "mxfp4-f32"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", help="GGUF whose tokenizer.* keys are copied (default: the shared GPT-2 vocab)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--window", type=int, default=4, help="sliding window of the even layers (default 4)")
    ap.add_argument("--truncate", choices=("true", "false"), default="false",
                    help="--format hf: rope_scaling's truncate (default false, as gpt-oss's config)")
    ap.add_argument("--shape", choices=sorted(SHAPES),
                    help="bench: a scaled-down gpt-oss of realistic layer shapes (SHAPES; GGUF)")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    if a.shape and a.format != "gguf":
        die("--shape writes a GGUF")
    check_out(a.out, a.force, a.format)
    make(a.out, a.experts, a.seed, a.vocab, a.layers, a.window, a.format, a.truncate == "true", a.shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
