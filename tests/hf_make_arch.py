#!/usr/bin/env python3
"""hf_make_arch.py OUTDIR - tiny random-weight Hugging Face folders, one per
architecture the HF loader maps (llama with Llama 3 rope scaling, mistral,
qwen2 with q/k/v biases, qwen3 with q/k norms, qwen3moe with 4 experts),
F32 or BF16 safetensors written by hand, plus OUTDIR/NAME.expect.json: the
GGUF tensor names and shapes (ggml order) and the metadata keys the loader
must produce, and the Llama 3 rope_freqs computed as convert_hf_to_gguf.py
does. numpy only."""
import json
import math
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(11)
V, D, F, L, H, KV, HD, E, EF = 96, 16, 32, 2, 4, 2, 8, 4, 8


def write_st(path, ts, bf16=False):
    header, blobs, off = {}, [], 0
    for name, a in ts.items():
        if bf16:
            u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        else:
            b = a.astype("<f4").tobytes()
        header[name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def llama3_freqs(base, dim, factor, lo, hi, old):
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    out_ = []
    for fr in freqs:
        wl = 2 * math.pi / fr
        if wl < old / hi:
            out_.append(1.0)
        elif wl > old / lo:
            out_.append(factor)
        else:
            s = (old / wl - lo) / (hi - lo)
            out_.append(1 / ((1 - s) / factor + s))
    return out_


def build(name, cls, arch, bias=False, qk_norm=False, moe=False, bf16=False, rope=None, tied=False):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": [cls], "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD, "rms_norm_eps": 1e-6,
           "rope_theta": 500000.0, "max_position_embeddings": 256, "vocab_size": V, "tie_word_embeddings": tied}
    if rope:
        cfg["rope_scaling"] = rope
    if moe:
        cfg.update(num_experts=E, num_experts_per_tok=2, moe_intermediate_size=EF, norm_topk_prob=True)
    ts = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not tied:
        ts["lm_head.weight"] = (V, D)
    want = {"token_embd.weight": [D, V], "output_norm.weight": [D]}
    if not tied:
        want["output.weight"] = [D, V]
    for l in range(L):
        p, g = f"model.layers.{l}.", f"blk.{l}."
        ts.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                   p + "self_attn.q_proj.weight": (H * HD, D), p + "self_attn.k_proj.weight": (KV * HD, D),
                   p + "self_attn.v_proj.weight": (KV * HD, D), p + "self_attn.o_proj.weight": (D, H * HD)})
        want.update({g + "attn_norm.weight": [D], g + "ffn_norm.weight": [D], g + "attn_q.weight": [D, H * HD],
                     g + "attn_k.weight": [D, KV * HD], g + "attn_v.weight": [D, KV * HD],
                     g + "attn_output.weight": [H * HD, D]})
        if bias:
            for x, n in (("q", H * HD), ("k", KV * HD), ("v", KV * HD)):
                ts[p + f"self_attn.{x}_proj.bias"] = (n,)
                want[g + f"attn_{x}.bias"] = [n]
        if qk_norm:
            ts[p + "self_attn.q_norm.weight"] = (HD,)
            ts[p + "self_attn.k_norm.weight"] = (HD,)
            want[g + "attn_q_norm.weight"] = [HD]
            want[g + "attn_k_norm.weight"] = [HD]
        if moe:
            ts[p + "mlp.gate.weight"] = (E, D)
            want[g + "ffn_gate_inp.weight"] = [D, E]
            for e in range(E):
                ts.update({p + f"mlp.experts.{e}.gate_proj.weight": (EF, D), p + f"mlp.experts.{e}.up_proj.weight": (EF, D),
                           p + f"mlp.experts.{e}.down_proj.weight": (D, EF)})
            want.update({g + "ffn_gate_exps.weight": [D, EF, E], g + "ffn_up_exps.weight": [D, EF, E],
                         g + "ffn_down_exps.weight": [EF, D, E]})
        else:
            ts.update({p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D), p + "mlp.down_proj.weight": (D, F)})
            want.update({g + "ffn_gate.weight": [D, F], g + "ffn_up.weight": [D, F], g + "ffn_down.weight": [F, D]})
    arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in ts.items()}
    write_st(os.path.join(d, "model.safetensors"), arrays, bf16)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    keys = {f"{arch}.embedding_length": D, f"{arch}.block_count": L, f"{arch}.attention.head_count": H,
            f"{arch}.attention.head_count_kv": KV, f"{arch}.attention.key_length": HD, f"{arch}.rope.freq_base": 500000.0}
    if moe:
        keys.update({f"{arch}.expert_count": E, f"{arch}.expert_used_count": 2, f"{arch}.expert_feed_forward_length": EF,
                     f"{arch}.expert_weights_norm": True})
    exp = {"arch": arch, "tensors": want, "keys": keys, "dtype": "bf16" if bf16 else "f32"}
    if rope:
        want["rope_freqs.weight"] = [HD // 2]
        exp["rope_freqs"] = llama3_freqs(500000.0, HD, rope["factor"], rope["low_freq_factor"],
                                         rope["high_freq_factor"], rope["original_max_position_embeddings"])
    # values at stacked / copied positions: experts in order, biases, embeddings
    samples = {"token_embd.weight": [[5 * D + 3, float(arrays["model.embed_tokens.weight"][5, 3])]]}
    if moe:
        st = np.stack([arrays[f"model.layers.1.mlp.experts.{e}.down_proj.weight"] for e in range(E)])
        samples["blk.1.ffn_down_exps.weight"] = [[int(i), float(st.flat[i])] for i in (0, 1 * D * EF + 2 * EF + 5, 3 * D * EF + D * EF - 1)]
    if bias:
        samples["blk.1.attn_k.bias"] = [[3, float(arrays["model.layers.1.self_attn.k_proj.bias"][3])]]
    exp["samples"] = samples
    # the q rows of layer 0 as the GGUF holds them (converter's permute), to check the loader's permutation
    if cls in ("LlamaForCausalLM", "MistralForCausalLM"):
        w = arrays["model.layers.0.self_attn.q_proj.weight"]
        exp["q0_permuted_first_col"] = (w.reshape(H, 2, HD // 2, D).swapaxes(1, 2).reshape(w.shape))[:, 0].tolist()
    with open(os.path.join(out, name + ".expect.json"), "w") as f:
        json.dump(exp, f)


build("llama3", "LlamaForCausalLM", "llama", rope={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
build("mistral", "MistralForCausalLM", "mistral", bf16=True)
build("qwen2", "Qwen2ForCausalLM", "qwen2", bias=True, tied=True)
build("qwen3", "Qwen3ForCausalLM", "qwen3", qk_norm=True, bf16=True)
build("qwen3moe", "Qwen3MoeForCausalLM", "qwen3moe", qk_norm=True, moe=True)
