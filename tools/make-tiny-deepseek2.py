#!/usr/bin/env python3
"""make-tiny-deepseek2.py - write a tiny random-weight deepseek2 (DeepSeek
V2/V3-style multi-head latent attention + fine-grained MoE) model as an f32
GGUF that llama.cpp loads and runs unchanged, deterministic from --seed.

    tools/make-tiny-deepseek2.py OUT [--format gguf|hf] [--seed N] [--vocab FILE.gguf]
                                 [--kv-layout split|fused] [--q-lora N]
                                 [--gating sigmoid|softmax] [--groups G/U]
                                 [--scale S] [--shared N] [--mtp 0|1] [--shape bench|vllm]
                                 [--yarn FACTOR] [--yarn-log-mul M] [--force]

Shapes: n_embd 64, 3 layers (layer 0 dense, n_ff 128; layers 1 and 2 MoE),
4 heads, a query/key head of 16 unrotated + 8 rotated dims (NORM rope on the
trailing 8), value heads of 16, the q low-rank path of rank --q-lora (32;
0 writes the direct attn_q projection instead, as DeepSeek-V2-Lite), the
compressed kv path of rank 32 with its norm, 8 routed experts of 32 (2 per
token) in --groups (4/2: 4 groups of 2, the 2 best groups compete, each
scored by its two best experts; 0/0: no groups), sigmoid gating with the
score-correction bias exp_probs_b (--gating softmax: no bias), weights
renormalised then times the routed scaling factor --scale (2.5), --shared
shared experts of 32 (1; 0: none). YaRN rope scaling by --yarn (4; 0: none) over an original context of 64,
with the attention-scale correction yarn_log_multiplier --yarn-log-mul
(0.707, DeepSeek-V2's mscale_all_dim; stored times 0.1 as llama.cpp's
converter does).

The k/v up-projection is drawn once as the fused kv_b [n_head*(nope+v),
kv_lora]; --kv-layout split (the default, what the pinned converter
writes) stores it as attn_k_b [n_head, kv_lora, nope] (the key rows
transposed per head) and attn_v_b [n_head, v, kv_lora], with
key_length_mla / value_length_mla and head_count_kv 1; --kv-layout fused
(older GGUFs) stores attn_kv_b itself. The same seed gives the same model in
both layouts. Weights are Gaussian with std 1/sqrt(fan_in), norm weights
1 + 0.1 N(0,1); the tokenizer is copied from --vocab (default: the shared
GPT-2 vocabulary); the embeddings are tied to the output.

--shape vllm is that model with DeepSeek's own latent, 512 + 64 rotated
dims (vLLM's CPU MLA kernels take no other), unrotated query/key and value
dims of 32 (its AMX MLA kernel packs no fewer), and an output projection of its own
(untied, as DeepSeek's checkpoints are; vLLM's DeepSeek ignores
tie_word_embeddings); --shape bench a scaled-down DeepSeek-V2-Lite (GGUF).

--mtp 1 appends an MTP (nextn) block after the trunk, as DeepSeek-V3 ships
one (llama.cpp's deepseek2 graph_mtp runs it as a drafter): block 3, an MLA
layer with the MoE FFN and its shared expert, plus blk.3.nextn.eh_proj
[n_embd, 2*n_embd], nextn.enorm, nextn.hnorm and nextn.shared_head_norm
(embedding and head shared with the trunk); block_count 4 and
deepseek2.nextn_predict_layers 1. Its weights are drawn after the trunk's,
so the trunk is the same model with or without it (GGUF only).

--format hf writes the same weights as a Hugging Face folder instead
(config.json, model.safetensors in f32, tokenizer.json from the vocabulary):
DeepseekV3ForCausalLM (topk_method noaux_tc, the bias as
e_score_correction_bias) for sigmoid gating, DeepseekV2ForCausalLM
(topk_method greedy) for softmax; kv_b_proj fused, the experts one module
each, q_lora_rank null for --q-lora 0, mscale = mscale_all_dim =
--yarn-log-mul. The folder is what llama.cpp's converter turns into the
GGUF this tool writes for the same arguments (--kv-layout split).

OUT must not exist unless --force (which overwrites only a GGUF, or with
--format hf a folder holding config.json). The GGUF
helpers (gguf package, vocabulary, writing beside and renaming) are
make-tiny-hybrid.py's. Exit 0 written, 2 bad arguments or input."""

import argparse
import importlib.util
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _hybrid():
    spec = importlib.util.spec_from_file_location("make_tiny_hybrid", os.path.join(HERE, "make-tiny-hybrid.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


H = _hybrid()


def die(msg):
    print("make-tiny-deepseek2.py: %s" % msg, file=sys.stderr)
    sys.exit(2)


# --shape bench: DeepSeek-V2-Lite's layout (no q low-rank path, one leading
# dense layer, then fine-grained experts with shared ones; V3's sigmoid
# routing in groups kept) at half its width and a third of its depth:
# heads of 64 unrotated + 32 rotated dims, a latent of 256, 32 experts of
# 512 of which 4 (+1 shared) per token. About 0.45 G parameters.
SHAPES = {"bench": dict(n_embd=1024, n_layer=8, n_dense=1, n_head=16, nope=64, rope=32, v=64, q_lora=0, kv_lora=256,
                        n_ff=2816, n_expert=32, n_expert_used=4, n_ff_exp=512, orig_ctx=4096, ctx_len=8192),
          # --shape vllm: the tiny model with DeepSeek's latent of 512 + 64 rotated dims, the only
          # latent vLLM's CPU MLA kernels take, 32 unrotated and value dims (its AMX kernel, the default on
          # CPUs with AMX tiles, packs its up-projections 32 rows and columns at a time), and an lm_head of its own
          # as DeepSeek's checkpoints have (vLLM's DeepSeek ignores tie_word_embeddings: tied, its
          # lm_head stays zero)
          "vllm": dict(nope=32, rope=64, v=32, kv_lora=512, untied=True)}


def config(q_lora=32, kv_layout="split", gating="sigmoid", groups=(4, 2), yarn=4.0, yarn_log_mul=0.707, scale=2.5,
           shared=1, mtp=0, shape=None):
    return dict(arch="deepseek2", n_embd=64, n_layer=3, n_dense=1, n_head=4, nope=16, rope=8, v=16,
                q_lora=q_lora, kv_lora=32, n_ff=128, n_expert=8, n_expert_used=2, n_ff_exp=32, n_shared=shared,
                n_group=groups[0], n_group_used=groups[1], gating=gating, scale=scale, norm_w=True,
                kv_layout=kv_layout, yarn=yarn, yarn_log_mul=yarn_log_mul, orig_ctx=64, ctx_len=512,
                norm_eps=1e-6, rope_base=10000.0, mtp=mtp) if not shape else dict(
                config(q_lora=q_lora, kv_layout=kv_layout, gating=gating, groups=groups, yarn=yarn, yarn_log_mul=yarn_log_mul,
                       scale=scale, shared=shared, mtp=mtp), **SHAPES[shape])


def weights(cfg, n_vocab, seed):
    """name -> float32 array in numpy order (rows, cols) / (slabs, rows, cols)."""
    rng = np.random.default_rng(seed)
    E, nh, dk, nope, nr, vd = cfg["n_embd"], cfg["n_head"], cfg["nope"] + cfg["rope"], cfg["nope"], cfg["rope"], cfg["v"]
    kvl, ql = cfg["kv_lora"], cfg["q_lora"]

    def mat(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def normw(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": (0.5 * rng.standard_normal((n_vocab, E))).astype(np.float32),
         "output_norm.weight": normw(E)}
    for l in range(cfg["n_layer"] + cfg["mtp"]):   # the MTP block's layer last: the trunk's draws unchanged
        p = "blk.%d." % l
        w[p + "attn_norm.weight"] = normw(E)
        if ql:
            w[p + "attn_q_a.weight"] = mat(ql, E)
            w[p + "attn_q_a_norm.weight"] = normw(ql)
            w[p + "attn_q_b.weight"] = mat(nh * dk, ql)
        else:
            w[p + "attn_q.weight"] = mat(nh * dk, E)
        w[p + "attn_kv_a_mqa.weight"] = mat(kvl + nr, E)
        w[p + "attn_kv_a_norm.weight"] = normw(kvl)
        kvb = mat(nh * (nope + vd), kvl)
        if cfg["kv_layout"] == "fused":
            w[p + "attn_kv_b.weight"] = kvb
        else:
            per = kvb.reshape(nh, nope + vd, kvl)
            w[p + "attn_k_b.weight"] = np.ascontiguousarray(per[:, :nope, :].transpose(0, 2, 1))
            w[p + "attn_v_b.weight"] = np.ascontiguousarray(per[:, nope:, :])
        w[p + "attn_output.weight"] = mat(E, nh * vd)
        w[p + "ffn_norm.weight"] = normw(E)
        if l < cfg["n_dense"]:
            w[p + "ffn_gate.weight"] = mat(cfg["n_ff"], E)
            w[p + "ffn_up.weight"] = mat(cfg["n_ff"], E)
            w[p + "ffn_down.weight"] = mat(E, cfg["n_ff"])
            continue
        X, F, S = cfg["n_expert"], cfg["n_ff_exp"], cfg["n_ff_exp"] * cfg["n_shared"]
        w[p + "ffn_gate_inp.weight"] = mat(X, E)
        if cfg["gating"] == "sigmoid":
            w[p + "exp_probs_b.bias"] = (0.1 * rng.standard_normal(X)).astype(np.float32)
        w[p + "ffn_gate_exps.weight"] = mat(X, F, E)
        w[p + "ffn_up_exps.weight"] = mat(X, F, E)
        w[p + "ffn_down_exps.weight"] = mat(X, E, F)
        if not S:
            continue
        w[p + "ffn_gate_shexp.weight"] = mat(S, E)
        w[p + "ffn_up_shexp.weight"] = mat(S, E)
        w[p + "ffn_down_shexp.weight"] = mat(E, S)
    if cfg["mtp"]:
        p = "blk.%d.nextn." % cfg["n_layer"]
        w[p + "eh_proj.weight"] = mat(E, 2 * E)
        w[p + "enorm.weight"] = normw(E)
        w[p + "hnorm.weight"] = normw(E)
        w[p + "shared_head_norm.weight"] = normw(E)
    if cfg.get("untied"):                          # drawn last: the other weights as the tied model's
        w["output.weight"] = mat(n_vocab, E)
    return w


def write(gguf, path, cfg, w, fields, seed):
    wr = gguf.GGUFWriter(path, "deepseek2")
    a = "deepseek2."
    wr.add_name("tiny-deepseek2-seed%d" % seed)
    wr.add_file_type(0)
    wr.add_block_count(cfg["n_layer"] + cfg["mtp"])
    if cfg["mtp"]:
        wr.add_uint32(a + "nextn_predict_layers", cfg["mtp"])
    wr.add_context_length(cfg["ctx_len"])
    wr.add_embedding_length(cfg["n_embd"])
    wr.add_feed_forward_length(cfg["n_ff"])
    wr.add_head_count(cfg["n_head"])
    dk, kvl = cfg["nope"] + cfg["rope"], cfg["kv_lora"]
    if cfg["kv_layout"] == "split":   # the latent as one MQA head; the real heads in the *_mla keys
        wr.add_head_count_kv(1)
        wr.add_key_length(kvl + cfg["rope"])
        wr.add_value_length(kvl)
        wr.add_uint32(a + "attention.key_length_mla", dk)
        wr.add_uint32(a + "attention.value_length_mla", cfg["v"])
    else:
        wr.add_head_count_kv(cfg["n_head"])
        wr.add_key_length(dk)
        wr.add_value_length(cfg["v"])
    wr.add_layer_norm_rms_eps(cfg["norm_eps"])
    wr.add_rope_freq_base(cfg["rope_base"])
    wr.add_rope_dimension_count(cfg["rope"])
    wr.add_uint32(a + "attention.q_lora_rank", cfg["q_lora"])
    wr.add_uint32(a + "attention.kv_lora_rank", kvl)
    wr.add_uint32(a + "leading_dense_block_count", cfg["n_dense"])
    wr.add_expert_count(cfg["n_expert"])
    wr.add_expert_used_count(cfg["n_expert_used"])
    wr.add_expert_feed_forward_length(cfg["n_ff_exp"])
    wr.add_uint32(a + "expert_shared_count", cfg["n_shared"])
    wr.add_float32(a + "expert_weights_scale", cfg["scale"])
    wr.add_bool(a + "expert_weights_norm", cfg["norm_w"])
    wr.add_uint32(a + "expert_gating_func", 2 if cfg["gating"] == "sigmoid" else 1)
    if cfg["n_group"] > 1:
        wr.add_uint32(a + "expert_group_count", cfg["n_group"])
        wr.add_uint32(a + "expert_group_used_count", cfg["n_group_used"])
    if cfg["yarn"]:
        wr.add_string(a + "rope.scaling.type", "yarn")
        wr.add_float32(a + "rope.scaling.factor", cfg["yarn"])
        wr.add_uint32(a + "rope.scaling.original_context_length", cfg["orig_ctx"])
        wr.add_float32(a + "rope.scaling.yarn_log_multiplier", 0.1 * cfg["yarn_log_mul"])
    for k, f in fields:
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        wr.add_key_value(k, f.contents(), f.types[0], sub)
    for name, arr in w.items():
        wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


HF_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
            "attn_q": "self_attn.q_proj", "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm",
            "attn_q_b": "self_attn.q_b_proj", "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
            "attn_kv_a_norm": "self_attn.kv_a_layernorm", "attn_kv_b": "self_attn.kv_b_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj", "ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
            "ffn_up_shexp": "mlp.shared_experts.up_proj", "ffn_down_shexp": "mlp.shared_experts.down_proj"}


def hf_tensors(cfg, w):
    """The GGUF-named weights in the checkpoint's layout: kv_b_proj fused
    again (per head the key rows then the value rows), one module per expert,
    the router's bias as e_score_correction_bias."""
    out = {}
    for name, arr in w.items():
        if name == "token_embd.weight":
            out["model.embed_tokens.weight"] = arr
            continue
        if name == "output_norm.weight":
            out["model.norm.weight"] = arr
            continue
        if name == "output.weight":
            out["lm_head.weight"] = arr
            continue
        _, l, rest = name.split(".", 2)
        p = "model.layers.%s." % l
        op, kind = rest.rsplit(".", 1)
        if op == "attn_k_b":
            kb, vb = arr, w[name.replace("attn_k_b", "attn_v_b")]
            nh, kvl = kb.shape[0], kb.shape[1]
            out[p + "self_attn.kv_b_proj.weight"] = np.concatenate([kb.transpose(0, 2, 1), vb], axis=1).reshape(-1, kvl)
        elif op == "attn_v_b":
            continue
        elif op == "exp_probs_b":
            out[p + "mlp.gate.e_score_correction_bias"] = arr
        elif op.endswith("_exps"):
            for e in range(arr.shape[0]):
                out[p + "mlp.experts.%d.%s_proj.weight" % (e, op[4:-5])] = arr[e]
        else:
            out[p + HF_LAYER[op] + "." + kind] = arr
    return out


def hf_config(cfg, n_vocab, bos, eos):
    v3 = cfg["gating"] == "sigmoid"
    grouped = cfg["n_group"] > 1
    m = cfg["yarn_log_mul"]
    return {"architectures": ["DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM"],
            "model_type": "deepseek_v3" if v3 else "deepseek_v2",
            "hidden_size": cfg["n_embd"], "intermediate_size": cfg["n_ff"], "moe_intermediate_size": cfg["n_ff_exp"],
            "num_hidden_layers": cfg["n_layer"], "num_attention_heads": cfg["n_head"],
            "num_key_value_heads": cfg["n_head"], "n_shared_experts": cfg["n_shared"],
            "n_routed_experts": cfg["n_expert"], "routed_scaling_factor": cfg["scale"],
            "kv_lora_rank": cfg["kv_lora"], "q_lora_rank": cfg["q_lora"] or None,
            "qk_rope_head_dim": cfg["rope"], "qk_nope_head_dim": cfg["nope"], "v_head_dim": cfg["v"],
            "topk_method": "noaux_tc" if v3 else "greedy",
            "n_group": cfg["n_group"] if grouped else 1, "topk_group": cfg["n_group_used"] if grouped else 1,
            "num_experts_per_tok": cfg["n_expert_used"], "first_k_dense_replace": cfg["n_dense"],
            "moe_layer_freq": 1, "norm_topk_prob": cfg["norm_w"], "scoring_func": cfg["gating"],
            "hidden_act": "silu", "max_position_embeddings": cfg["ctx_len"], "rms_norm_eps": cfg["norm_eps"],
            "rope_theta": cfg["rope_base"],
            "rope_scaling": {"type": "yarn", "factor": cfg["yarn"], "original_max_position_embeddings": cfg["orig_ctx"],
                             "beta_fast": 32, "beta_slow": 1, "mscale": m, "mscale_all_dim": m} if cfg["yarn"] else None,
            "attention_bias": False, "tie_word_embeddings": not cfg.get("untied"), "vocab_size": n_vocab,
            "torch_dtype": "float32", "bos_token_id": bos, "eos_token_id": eos}


def write_hf(out, cfg, w, reader):
    import json
    g2h = H.load_gguf_to_hf()
    os.makedirs(out, exist_ok=True)
    n_vocab, bos, eos = g2h.tokenizer_files(reader, out, None, "string")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(cfg, n_vocab, bos, eos), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f, indent=2)
    g2h.write_safetensors(os.path.join(out, "model.safetensors"), sorted(hf_tensors(cfg, w).items()), "f32")


def make(out, seed=0, vocab=None, fmt="gguf", **kw):
    """Library entry: write OUT (a GGUF, or with fmt "hf" a folder), return
    (cfg, weights by GGUF name)."""
    gguf = H.import_gguf()
    vocab = vocab or os.path.join(os.environ.get("BT_SHARED", "/work/shared"), "models/gguf-vocab/ggml-vocab-gpt-2.gguf")
    if not os.path.isfile(vocab):
        die("%s: no such vocabulary file (--vocab FILE.gguf, or set BT_SHARED)" % vocab)
    cfg = config(**kw)
    reader, fields, n_vocab = H.read_vocab(gguf, vocab)
    w = weights(cfg, n_vocab, seed)
    if fmt == "hf":
        write_hf(out, cfg, w, reader)
    else:
        H.write_beside(out, lambda tmp: write(gguf, tmp, cfg, w, fields, seed))
    return cfg, w


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--format", choices=("gguf", "hf"), default="gguf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab")
    ap.add_argument("--kv-layout", choices=("split", "fused"), default="split")
    ap.add_argument("--q-lora", type=int, default=32)
    ap.add_argument("--gating", choices=("sigmoid", "softmax"), default="sigmoid")
    ap.add_argument("--groups", default="4/2", help="G/U: G expert groups, the U best compete (0/0: none)")
    ap.add_argument("--scale", type=float, default=2.5, help="routed scaling factor (default 2.5)")
    ap.add_argument("--shared", type=int, default=1, help="shared experts (default 1)")
    ap.add_argument("--yarn", type=float, default=4.0, help="YaRN factor (0: no rope scaling)")
    ap.add_argument("--yarn-log-mul", type=float, default=0.707)
    ap.add_argument("--mtp", type=int, choices=(0, 1), default=0, help="MTP (nextn) blocks after the trunk (GGUF)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="bench: a scaled-down DeepSeek of realistic layer shapes (GGUF); vllm: the tiny "
                    "model with a latent of 512 and 64 rotated dims (vLLM's CPU MLA kernel takes no other)")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        g = tuple(int(x) for x in a.groups.split("/"))
        assert len(g) == 2 and (g == (0, 0) or (g[0] > 1 and 8 % g[0] == 0 and 0 < g[1] < g[0] and g[1] * 8 // g[0] >= 2))
    except (ValueError, AssertionError):
        die("--groups %s: G/U with G dividing 8 experts, 0 < U < G and at least 2 experts in the U groups (or 0/0)"
            % a.groups)
    if a.q_lora < 0 or a.yarn < 0 or (0 < a.yarn < 1) or not a.scale > 0 or a.shared < 0:
        die("--q-lora and --shared must be >= 0, --scale > 0 and --yarn 0 or >= 1")
    if a.shape == "bench" and a.format != "gguf":
        die("--shape bench writes a GGUF")
    if a.format == "hf" and a.mtp:
        die("--mtp is written to GGUF files only")
    if a.mtp and a.shared == 0:
        die("--mtp needs a shared expert (llama.cpp's MTP block requires one)")
    if a.format == "hf" and a.kv_layout != "split":
        die("--format hf stores kv_b_proj fused, as checkpoints do (--kv-layout is for GGUF files)")
    if os.path.islink(a.out):
        die("%s is a symbolic link: refusing to write through it" % a.out)
    if os.path.exists(a.out):
        if not a.force:
            die("%s exists (--force overwrites a model this tool wrote)" % a.out)
        if a.format == "hf":
            ok = os.path.isdir(a.out) and (not os.listdir(a.out) or os.path.isfile(os.path.join(a.out, "config.json")))
        else:
            ok = os.path.isfile(a.out) and open(a.out, "rb").read(4) == b"GGUF"
        if not ok:
            die("%s exists and is not a %s model: refusing to overwrite it" % (a.out, a.format.upper()))
    make(a.out, a.seed, a.vocab, a.format, q_lora=a.q_lora, kv_layout=a.kv_layout, gating=a.gating, groups=g,
         yarn=a.yarn, yarn_log_mul=a.yarn_log_mul, scale=a.scale, shared=a.shared, mtp=a.mtp, shape=a.shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
