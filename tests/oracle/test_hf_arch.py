#!/usr/bin/env python3
"""test_hf_arch.py - the Hugging Face folder path and the GGUF path of each
architecture, run together, tensor by tensor, against the numpy reference.

For each architecture a small random-weight model is written twice from the
same weights: as a GGUF (make_random_gguf.py, the file llama.cpp's converter
would write) and as a Hugging Face folder written here from that GGUF's
tensors the way transformers saves one (config.json with the model class in
architectures[0] and the keys a real checkpoint of that class carries, F32
safetensors under HF tensor names, Llama/Mistral q/k rows in the rotate-half
layout, experts as separate matrices, a byte-level BPE tokenizer.json and
tokenizer_config.json). Then `$BANGTRACE forward --dump` on the folder must
give every named tensor of every layer (router logits and each routed
expert's tensors for MoE) within 1e-4 of ref.py's float64 forward on the
GGUF, and the same values as the GGUF's own dump (within 1e-5: both load the
same f32 values; only the llama3 rope_freqs are computed from config.json on
one side, in float32 as torch does, and in float64 by make_random_gguf).

Architectures: llama with Llama 3 rope scaling (config rope_scaling
{rope_type llama3, factor, low/high_freq_factor, original_max_position_
embeddings}; the GGUF carries the rope_freqs.weight the converter computes),
mistral (GQA 4:1, a sliding_window the tokens fit in; a folder whose window
they exceed must be refused), qwen2 (q/k/v biases), qwen3 (q/k norms, head_dim 32 !=
hidden/heads), qwen3moe (8 experts, top-2, norm_topk_prob). Also: an F16 llama3 folder (norms F32 in the
same file, tied, no head_dim in config.json) and a qwen3moe folder in 3
shards (each layer's experts stacked from two files). HF's
Qwen3MoeForCausalLM has no shared expert (Qwen2Moe does), so no shared-expert
folder is built. Then a BF16-safetensors qwen3 folder: its max abs difference
from the f32 reference is reported and held to a loose sanity bound.

Env: BANGTRACE (binary). SKIP (77) without it, numpy or gguf."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

try:
    import numpy as np
    import gguf  # noqa: F401
    from gguf import GGUFReader
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

import compare_forward as cf  # noqa: E402
import make_random_gguf  # noqa: E402
import ref  # noqa: E402


def load_tool():
    """tools/gguf-to-hf.py as a module (its name has dashes): the HF tensor
    names, the q/k un-permutation and the safetensors writer live there once."""
    p = os.path.join(HERE, "..", "..", "tools", "gguf-to-hf.py")
    spec = importlib.util.spec_from_file_location("gguf_to_hf", p)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


g2h = load_tool()

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}   # = make_random_gguf.llama3_rope_factors' defaults

# (label, make() kwargs, HF class, extra config.json keys as real checkpoints of the class have them)
ARCHS = [
    ("llama3 rope_scaling", dict(arch="llama", rope_freqs=True, rope_base=500000.0, untied=True, seed=40),
     "LlamaForCausalLM", dict(model_type="llama", rope_scaling=LLAMA3, attention_bias=False, mlp_bias=False,
                              pretraining_tp=1)),
    ("mistral gqa4", dict(arch="mistral", n_heads=8, n_kv_heads=2, seed=41),
     "MistralForCausalLM", dict(model_type="mistral", sliding_window=32)),   # >= len(TOKENS)
    ("qwen2 qkv-bias", dict(arch="qwen2", seed=42, rope_base=1000000.0, norm_eps=1e-6),
     "Qwen2ForCausalLM", dict(model_type="qwen2", use_sliding_window=False, sliding_window=131072,
                              max_window_layers=2, rope_scaling=None)),
    ("qwen3 qk-norm head_dim 32", dict(arch="qwen3", head_dim=32, untied=True, seed=43, norm_eps=1e-6),
     "Qwen3ForCausalLM", dict(model_type="qwen3", use_sliding_window=False, sliding_window=None,
                              max_window_layers=2, attention_bias=False, rope_scaling=None)),
    ("qwen3moe 8 experts top-2", dict(arch="qwen3moe", n_expert=8, n_expert_used=2, seed=44),
     "Qwen3MoeForCausalLM", dict(model_type="qwen3_moe", decoder_sparse_step=1, mlp_only_layers=[],
                                 use_sliding_window=False, sliding_window=None, attention_bias=False,
                                 output_router_logits=False, router_aux_loss_coef=0.001, rope_scaling=None)),
    # F16 matrices (norms F32 in the same file), tied, and no head_dim in
    # config.json (older Llama configs): the permutation on 2-byte rows
    ("llama3 f16 tied no head_dim", dict(arch="llama", rope_freqs=True, rope_base=500000.0, wtype="f16", seed=46),
     "LlamaForCausalLM", dict(model_type="llama", rope_scaling=LLAMA3, head_dim=None), dict(dtype="f16")),
    # 3 shards: a layer's experts are stacked from two files
    ("qwen3moe 3 shards untied", dict(arch="qwen3moe", n_expert=8, n_expert_used=2, untied=True, seed=47),
     "Qwen3MoeForCausalLM", dict(model_type="qwen3_moe", norm_topk_prob=True), dict(shards=3)),
]
TOKENS = [1, 17, 40, 9, 300, 5, 77, 12, 260, 18, 19, 21, 3, 44, 45, 46, 101, 7, 8, 200, 201, 33, 34, 2]

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)


def tokenizer_files(out, n_vocab):
    """A byte-level BPE tokenizer.json (GPT-2 byte alphabet, a few merges,
    ChatML special tokens) and tokenizer_config.json; ids up to vocab_size
    that the vocabulary leaves out are padding, as in real Qwen folders."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    alphabet = [chr(c) for _, c in sorted(zip(bs, cs))]
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []
    for a, b in (("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "a")):
        merges.append("%s %s" % (a, b))
        vocab[a + b] = len(vocab)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = []
    for s in specials:
        added.append({"id": len(vocab), "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
        vocab[s] = len(vocab)
    assert len(vocab) <= n_vocab
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": bl, "post_processor": bl, "decoder": bl,
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": {k: v for k, v in vocab.items() if k not in specials}, "merges": merges}}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    tc = {"add_bos_token": False, "add_eos_token": False, "bos_token": None, "eos_token": "<|im_end|>",
          "pad_token": "<|endoftext|>", "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer",
          "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [vocab["<|im_end|>"], vocab["<|endoftext|>"]], "do_sample": False}, f)
    return vocab["<|im_end|>"]


def write_shards(out, tensors, dtype, shards):
    """model.safetensors, or `shards` files and model.safetensors.index.json
    split in tensor order (so one layer's experts straddle two shards).
    dtype "f16": tensors the GGUF holds in F16 are written F16, the others
    (norms) F32 - lossless, and a mixed-dtype file as some checkpoints are."""
    def enc(a, t):
        if dtype == "bf16":
            return "BF16", g2h.to_bf16_bytes(a)
        if dtype == "f16" and t == gguf.GGMLQuantizationType.F16:
            return "F16", np.ascontiguousarray(a, dtype="<f2").tobytes()
        return "F32", np.ascontiguousarray(a, dtype="<f4").tobytes()

    per = (len(tensors) + shards - 1) // shards
    wm = {}
    for s in range(shards):
        fn = "model.safetensors" if shards == 1 else "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        header, blobs, off = {}, [], 0
        for name, a, t in tensors[s * per:(s + 1) * per]:
            dt, b = enc(a, t)
            header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
            wm[name] = fn
        header["__metadata__"] = {"format": "pt"}
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(out, fn), "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))
    if shards > 1:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    return wm


def write_folder(gguf_path, out, hf_class, extra, hp, dtype="f32", shards=1):
    """The HF folder of the model in gguf_path, as transformers saves it;
    returns the weight map (tensor -> file)."""
    r = GGUFReader(gguf_path)
    arch = hp["arch"]
    os.makedirs(out)
    names = {t.name for t in r.tensors}
    cfg = {"architectures": [hf_class], "hidden_size": hp["dim"], "intermediate_size": hp["hidden_dim"],
           "num_hidden_layers": hp["n_layers"], "num_attention_heads": hp["n_heads"],
           "num_key_value_heads": hp["n_kv_heads"], "head_dim": hp["head_dim"], "rms_norm_eps": hp["norm_eps"],
           "rope_theta": hp["rope_base"], "max_position_embeddings": hp["ctx_len"], "vocab_size": hp["n_vocab"],
           "tie_word_embeddings": "output.weight" not in names, "hidden_act": "silu", "initializer_range": 0.02,
           "use_cache": True, "torch_dtype": {"bf16": "bfloat16", "f16": "float16"}.get(dtype, "float32"),
           "transformers_version": "4.51.0", "bos_token_id": None}
    if arch == "qwen3moe":
        cfg.update(num_experts=hp["n_expert"], num_experts_per_tok=hp["n_expert_used"],
                   moe_intermediate_size=hp["hidden_dim"], norm_topk_prob=True)
    cfg.update(extra)
    cfg = {k: v for k, v in cfg.items() if not (k == "head_dim" and v is None)}
    cfg["eos_token_id"] = tokenizer_files(out, hp["n_vocab"])
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = []
    for t in r.tensors:
        if t.name == "rope_freqs.weight":       # config.json's rope_scaling says it
            continue
        w = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        tt = t.tensor_type
        name, stacked = g2h.hf_name(t.name)
        base = t.name.split(".")[-2]
        if arch in ("llama", "mistral") and base in ("attn_q", "attn_k"):
            w = g2h.unpermute(w, hp["n_heads"] if base == "attn_q" else hp["n_kv_heads"])
        if stacked:
            tensors += [(name.format(e), w[e], tt) for e in range(w.shape[0])]
        else:
            tensors.append((name, w, tt))
    return write_shards(out, tensors, dtype, shards)


def forward_dump(bt, model, dump):
    os.makedirs(dump)
    p = subprocess.run([bt, "forward", "--model", model, "--tokens", " ".join(map(str, TOKENS)),
                        "--dump", dump, "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    if p.returncode != 0:
        raise cf.DumpError("forward --model %s: exit %d: %s" % (model, p.returncode,
                                                               p.stderr.decode(errors="replace")[-400:]))
    with open(os.path.join(dump, "meta.json")) as f:
        pos = json.load(f).get("expert_positions", {})
    return cf.load_dump(dump)[1], pos, p.stderr.decode(errors="replace")


def compare_all(label, got, ref_out, tol_fn):
    """Every name either side computes; returns (worst name, worst diff)."""
    return cf.check_all(label, got, ref_out, tol_fn, fail)


def check_arch(bt, tmp, label, kw, hf_class, extra, opts):
    gpath = os.path.join(tmp, "m%d.gguf" % kw["seed"])
    hp = make_random_gguf.make(gpath, **kw)
    folder = os.path.join(tmp, "hf%d" % kw["seed"])
    wm = write_folder(gpath, folder, hf_class, extra, hp, **opts)
    if opts.get("shards", 1) > 1:
        split = [L for L in range(hp["n_layers"])
                 if len({f for n, f in wm.items() if n.startswith("model.layers.%d.mlp.experts." % L)}) > 1]
        if not split and hp["n_expert"]:
            fail("%s: no layer's experts straddle two shards (the test lost its point)" % label)
    try:
        got_hf, pos_hf, err_hf = forward_dump(bt, folder, os.path.join(tmp, "dump-hf%d" % kw["seed"]))
        got_gg, _, _ = forward_dump(bt, gpath, os.path.join(tmp, "dump-gg%d" % kw["seed"]))
    except cf.DumpError as e:
        fail("%s: %s" % (label, e))
        return None
    m = ref.load_model(gpath)
    out = ref.forward(m, TOKENS, dtype=np.float64)
    worst = compare_all(label + " (folder vs reference)", got_hf, out, lambda n, r: 1e-4)
    for name, pos in ref.LAST_POSITIONS.items():
        if pos_hf.get(name) != pos:
            fail("%s: %s rows are positions %s, reference %s" % (label, name, pos_hf.get(name), pos))
    same, wg = 0, 0.0
    for name in got_gg:
        if name in got_hf and got_hf[name].shape == got_gg[name].shape:
            d = float(np.max(np.abs(got_hf[name] - got_gg[name])))
            same += d == 0.0
            wg = max(wg, d)
            if not d <= 1e-5:
                fail("%s: %s differs between the folder and the GGUF by %.3g" % (label, name, d))
        else:
            fail("%s: %s is in the GGUF's dump, not (so) in the folder's" % (label, name))
    if set(got_hf) - set(got_gg):
        fail("%s: folder dumps %s the GGUF does not" % (label, sorted(set(got_hf) - set(got_gg))[:5]))
    if "warning" in err_hf.lower():
        fail("%s: loading the folder warned: %s" % (label, err_hf.strip()[-300:]))
    n_exp = sum(1 for n in out if ".expert[" in n)
    print("ok: %s: %d tensors (%d expert), worst vs reference %s %.3g; vs GGUF: %d/%d identical, max %.3g"
          % (label, len(out), n_exp, worst[0], worst[1], same, len(got_gg), wg))
    return gpath, hp, out


def check_bf16(bt, tmp, gpath, hp, out, label, hf_class, extra):
    folder = os.path.join(tmp, "hf-bf16")
    write_folder(gpath, folder, hf_class, extra, hp, dtype="bf16")
    try:
        got, _, _ = forward_dump(bt, folder, os.path.join(tmp, "dump-bf16"))
    except cf.DumpError as e:
        fail("%s bf16: %s" % (label, e))
        return
    # BF16 keeps 8 bits of mantissa: weights move by up to 2^-9 relative,
    # and that compounds through 2 layers. A loose bound (5% of each
    # tensor's magnitude) still catches a misread dtype, which is O(1).
    worst = compare_all(label + " bf16", got, out, lambda n, r: 5e-2 * max(1.0, float(np.abs(r).max())))
    lg = float(np.max(np.abs(got["logits"] - out["logits"])))
    top1 = int(np.sum(np.argmax(got["logits"], axis=1) == np.argmax(out["logits"], axis=1)))
    print("ok: %s BF16 safetensors vs f32 reference: max abs diff %.3g (%s), logits %.3g (|logits| <= %.3g), "
          "top-1 same on %d/%d positions" % (label, worst[1], worst[0], lg, float(np.abs(out["logits"]).max()),
                                             top1, len(TOKENS)))


def check_sliding_window(bt, tmp):
    """Mistral's sliding_window (transformers applies it when not null):
    within it attention is full (the mistral folder above has a window of
    32 >= its 24 tokens and matches the reference); a longer context must
    be refused, never computed as full attention."""
    gpath = os.path.join(tmp, "swa.gguf")
    hp = make_random_gguf.make(gpath, arch="mistral", seed=45)
    folder = os.path.join(tmp, "hf-swa")
    write_folder(gpath, folder, "MistralForCausalLM", dict(sliding_window=8), hp)
    try:
        forward_dump(bt, folder, os.path.join(tmp, "dump-swa"))
        fail("mistral sliding_window 8: forward over %d tokens exited 0 (computed past the window)" % len(TOKENS))
    except cf.DumpError as e:
        if "sliding" not in str(e):
            fail("mistral sliding_window 8: refused without naming the window: %s" % e)
        else:
            print("ok: mistral sliding_window 8: %d tokens refused (%s)" % (len(TOKENS), str(e).split(": ", 2)[-1].strip()))


def main():
    bt = os.environ.get("BANGTRACE")
    if not bt or not os.access(bt, os.X_OK):
        print("SKIP: BANGTRACE is unset or not an executable (%r)" % bt)
        return 77
    with tempfile.TemporaryDirectory(prefix="bt-hfarch-") as tmp:
        qwen3 = None
        for label, kw, cls, extra, *opts in ARCHS:
            r = check_arch(bt, tmp, label, kw, cls, extra, opts[0] if opts else {})
            if r and kw["arch"] == "qwen3":
                qwen3 = (r, label, cls, extra)
        check_sliding_window(bt, tmp)
        print("skip: qwen3moe shared expert: Hugging Face's Qwen3MoeForCausalLM has none")
        if qwen3:
            (gpath, hp, out), label, cls, extra = qwen3
            check_bf16(bt, tmp, gpath, hp, out, label, cls, extra)
    print("PASS" if not failures else "FAIL (%d)" % failures)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
