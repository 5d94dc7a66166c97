#!/usr/bin/env python3
"""gguf-to-hf.py - write a GGUF model as a Hugging Face model folder.

    tools/gguf-to-hf.py MODEL.gguf OUTDIR [--dtype f32|f16|bf16] [--shards N]
                        [--pre NAME] [--merges-form string|list] [--vocab-only]

OUTDIR gets config.json, generation_config.json, tokenizer_config.json (with
the GGUF's chat template), tokenizer.json (byte-level BPE built from the GGUF
vocabulary and merges) and model.safetensors (or N shards plus
model.safetensors.index.json). Quantized tensors are dequantized with
gguf.quants; tensor names and config keys are mapped back the way llama.cpp's
convert_hf_to_gguf.py maps them forward, and Llama/Mistral q/k rows are
un-permuted to the rotate-half layout Hugging Face checkpoints store (so a
loader that reads the folder must permute them again, as the converter does).

--pre overrides the GGUF's tokenizer.ggml.pre (e.g. qwen2 on the gpt-2 vocab
builds a Qwen2-style tokenizer: NFC + Qwen2's Split regex + ByteLevel).
--vocab-only writes the tokenizer files only (vocab-only GGUFs have no weights).
OUT must be new or an empty directory; --force writes into an existing HF
folder (one holding config.json or tokenizer.json), never through a link.
Needs numpy and the gguf package (pip install gguf)."""
import argparse
import json
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError:
    sys.exit("gguf-to-hf.py: needs the gguf Python package (pip install gguf)")

ARCH_CLASS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}

# tokenizer.ggml.pre -> (normalizer, pre_tokenizer, ignore_merges), as the
# original models' tokenizer.json files write them.
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
BYTELEVEL_NOREGEX = dict(BYTELEVEL, use_regex=False)
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


PRE = {
    "gpt-2": (None, BYTELEVEL, False),
    "smollm": (None, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTELEVEL]}, False),
    "starcoder": (None, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTELEVEL]}, False),
    "qwen2": ({"type": "NFC"}, {"type": "Sequence", "pretokenizers": [split(QWEN2_RE), BYTELEVEL_NOREGEX]}, False),
    "llama-bpe": (None, {"type": "Sequence", "pretokenizers": [split(LLAMA3_RE), BYTELEVEL_NOREGEX]}, True),
}


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


def hf_name(name):
    """GGUF tensor name -> (HF name, expert-stacked?)."""
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name], False
    parts = name.split(".")
    if parts[0] != "blk":
        raise SystemExit(f"gguf-to-hf.py: tensor {name} has no Hugging Face name")
    layer, base, suffix = parts[1], parts[2], parts[3]
    m = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
         "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj",
         "ffn_down_exps": "down_proj"}
    if base not in m:
        raise SystemExit(f"gguf-to-hf.py: tensor {name} has no Hugging Face name")
    if base.endswith("_exps"):
        return f"model.layers.{layer}.mlp.experts.{{}}.{m[base]}.{suffix}", True
    return f"model.layers.{layer}.{m[base]}.{suffix}", False


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf.py's permute(): interleaved -> rotate-half rows."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def to_bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16        # round to nearest even, as torch does
    return u.astype(np.uint16).tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        dt = dtype.upper()
        if arr.dtype == np.uint8:       # raw bytes (MXFP4 blocks and scales) stay U8
            data, dt = np.ascontiguousarray(arr).tobytes(), "U8"
        elif dtype == "bf16":
            data = to_bf16_bytes(arr)
        else:
            data = np.ascontiguousarray(arr, dtype="<f2" if dtype == "f16" else "<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def tokenizer_files(r, out, pre, merges_form):
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = field(r, "tokenizer.ggml.merges")
    if field(r, "tokenizer.ggml.model") != "gpt2" or not merges:
        raise SystemExit("gguf-to-hf.py: only byte-level BPE (tokenizer.ggml.model gpt2) vocabularies")
    pre = pre or field(r, "tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE:
        raise SystemExit(f"gguf-to-hf.py: pre-tokenizer {pre} has no tokenizer.json form here ({', '.join(PRE)})")
    norm, pretok, ignore_merges = PRE[pre]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):        # CONTROL, USER_DEFINED
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": ty == 4, "special": ty == 3})
        if t not in vocab:
            vocab[t] = i
    if merges_form == "list":
        merges = [m.split(" ", 1) for m in merges]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": norm, "pre_tokenizer": pretok,
          "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                    "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    tc = {"add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
          "add_eos_token": bool(field(r, "tokenizer.ggml.add_eos_token", False)),
          "bos_token": tokens[bos] if bos is not None and bos < len(tokens) else None,
          "eos_token": tokens[eos] if eos is not None and eos < len(tokens) else None,
          "model_max_length": 8192, "tokenizer_class": "GPT2Tokenizer", "clean_up_tokenization_spaces": False}
    tmpl = field(r, "tokenizer.chat_template")
    if tmpl is not None:
        tc["chat_template"] = tmpl
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)
    return len(tokens), bos, eos


def refuse(msg):
    """One line naming the problem, exit 2, nothing written."""
    print("gguf-to-hf.py: " + msg, file=sys.stderr)
    sys.exit(2)


def check_out(out, force):
    """Never write through a link or into a folder the user owns for something
    else: a new or empty directory, or with --force an HF folder (ours)."""
    if os.path.islink(out):
        refuse(f"{out} is a symbolic link: refusing to write through it")
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        refuse(f"{out} exists and is not a directory")
    entries = os.listdir(out)
    if not entries:
        return
    if not force:
        refuse(f"{out} is not empty (--force writes into an HF folder)")
    if not any(n in entries for n in ("config.json", "tokenizer.json")):
        refuse(f"{out} is not an HF folder (no config.json or tokenizer.json): not replacing it")
    for n in entries:
        if os.path.islink(os.path.join(out, n)):
            refuse(f"{out}/{n} is a symbolic link: refusing to write through it")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--pre", help="tokenizer.json pre-tokenizer to write (default: the GGUF's)")
    ap.add_argument("--merges-form", choices=["string", "list"], default="string")
    ap.add_argument("--vocab-only", action="store_true")
    ap.add_argument("--force", action="store_true",
                    help="write into an existing HF folder (one holding config.json or tokenizer.json)")
    a = ap.parse_args()
    check_out(a.out, a.force)
    r = GGUFReader(a.gguf)
    os.makedirs(a.out, exist_ok=True)
    n_vocab, bos, eos = tokenizer_files(r, a.out, a.pre, a.merges_form)
    if a.vocab_only:
        return
    arch = field(r, "general.architecture")
    if arch not in ARCH_CLASS:
        raise SystemExit(f"gguf-to-hf.py: architecture {arch} is not supported ({', '.join(ARCH_CLASS)})")
    k = lambda s, d=None: field(r, f"{arch}.{s}", d)
    n_head, n_kv = k("attention.head_count"), k("attention.head_count_kv", k("attention.head_count"))
    names = {t.name for t in r.tensors}
    cfg = {"architectures": [ARCH_CLASS[arch]], "model_type": arch,
           "hidden_size": k("embedding_length"), "intermediate_size": k("feed_forward_length"),
           "num_hidden_layers": k("block_count"), "num_attention_heads": n_head, "num_key_value_heads": n_kv,
           "rms_norm_eps": k("attention.layer_norm_rms_epsilon", 1e-5), "rope_theta": k("rope.freq_base", 10000.0),
           "max_position_embeddings": k("context_length", 2048), "vocab_size": n_vocab,
           "tie_word_embeddings": "output.weight" not in names, "hidden_act": "silu",
           "torch_dtype": {"bf16": "bfloat16", "f16": "float16"}.get(a.dtype, "float32"),
           "bos_token_id": bos, "eos_token_id": eos, "_name_or_path": field(r, "general.name", "")}
    if k("attention.key_length") is not None:
        cfg["head_dim"] = k("attention.key_length")
    if arch == "qwen3moe":
        cfg.update(num_experts=k("expert_count"), num_experts_per_tok=k("expert_used_count"),
                   moe_intermediate_size=k("expert_feed_forward_length"), norm_topk_prob=True)
    if "rope_freqs.weight" in names:
        raise SystemExit("gguf-to-hf.py: rope_freqs.weight (Llama 3 rope scaling) cannot be inverted to a config")
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos}, f, indent=2)

    tensors = []
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)] if len(t.shape) > 1 else [int(t.shape[0])])
        name, stacked = hf_name(t.name)
        if arch in ("llama", "mistral") and t.name.split(".")[-2:-1] in (["attn_q"], ["attn_k"]):
            w = unpermute(w, n_head if ".attn_q." in t.name else n_kv)
        if stacked:
            tensors += [(name.format(e), w[e]) for e in range(w.shape[0])]
        else:
            tensors.append((name, w))
    if a.shards <= 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.dtype)
        return
    per = (len(tensors) + a.shards - 1) // a.shards
    wm = {}
    for s in range(a.shards):
        fn = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = tensors[s * per:(s + 1) * per]
        write_safetensors(os.path.join(a.out, fn), part, a.dtype)
        wm.update({n: fn for n, _ in part})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f, indent=2)


if __name__ == "__main__":
    main()
