#!/usr/bin/env python3
"""make_random_gguf.py - write a small random-weight GGUF for tests, of
architecture llama (optionally with Llama 3 rope scaling: a rope_freqs.weight
tensor), mistral, qwen2 (q/k/v biases) or qwen3 (attn_q_norm/attn_k_norm,
optionally head_dim != dim/heads). Tensor names, shapes and keys are the ones
llama.cpp's convert_hf_to_gguf.py writes for that architecture; the q/k rows
are random, so the permutation the converter applies to llama's HF q/k is
immaterial: llama.cpp computes llama with interleaved-pair RoPE and qwen2/
qwen3 with NEOX RoPE on the rows as stored, and so must we.

The file is a complete model as far as a loader is concerned: llama.*
hyperparameters, a minimal SentencePiece ("llama") vocabulary (<unk>, <s>,
</s>, the 256 byte tokens <0x00>..<0xFF>, then ordinary pieces), and every
tensor of a Llama block. Weights are Gaussian with std 1/sqrt(fan_in), so
activations stay O(1) through the layers and attention is neither uniform
nor one-hot; norm weights are near 1; token embeddings have std 0.25.

Matrices can be F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4
(quantized with gguf.quants.quantize) or Q2_K..Q6_K (gguf.quants cannot quantize
those: random blocks whose f16 scales are set so the dequantized matrix has
the wanted standard deviation); norms stay F32 as in real files. Every row
length (dim, hidden) must be a multiple of 32 for the quantized types, of 256
for the k-quants.

Library: make(path, wtype="f32", ...) returns the config dict.
CLI:     make_random_gguf.py OUT.gguf [--type q4_1] [--untied] [--n-kv-heads 4] ...
         [--special-id padding=4294967295] (extra tokenizer.ggml.KEY_token_id
         values, stored as uint32 the way llama.cpp's converter stores them)
"""

import argparse
import sys

import numpy as np

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4",
         "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
K_TYPES = ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
# general.file_type values (llama_ftype) for "mostly <type>" (k-quants: the
# _S mixes, the closest ftype to "every matrix in this type")
_FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
              "q2_k": 10, "q3_k": 11, "q4_k": 14, "q5_k": 16, "q6_k": 18, "bf16": 32,
              "mxfp4": 38}   # MOSTLY_MXFP4_MOE, llama.cpp's one mxfp4 ftype
# k-quant block: bytes, offset of d, offset of dmin (None: no min), dmin/d
# that roughly centres the weights
_K_LAYOUT = {"q2_k": (84, 80, 82, 1.5), "q3_k": (110, 108, None, 0), "q4_k": (144, 0, 2, 7.5),
             "q5_k": (176, 0, 2, 15.5), "q6_k": (210, 208, None, 0)}


def _k_random(arr, wtype):
    """Random k-quant blocks for matrix arr (rows x cols): random codes and
    sub-block scales, f16 d (and dmin) chosen so the dequantized matrix has
    arr's standard deviation. Returns the uint8 array of blocks."""
    import zlib
    import gguf
    qt = getattr(gguf.GGMLQuantizationType, wtype.upper())
    bs, od, om, ratio = _K_LAYOUT[wtype]
    rows, cols = arr.shape
    if cols % 256:
        raise ValueError("%s needs rows of a multiple of 256 elements, not %d" % (wtype, cols))
    rng = np.random.default_rng(zlib.crc32(arr.tobytes()))
    blocks = rng.integers(0, 256, size=(rows * cols // 256, bs), dtype=np.uint8)

    def set_scales(d):
        blocks[:, od:od + 2] = np.array([d], dtype=np.float16).view(np.uint8)
        if om is not None:
            blocks[:, om:om + 2] = np.array([d * ratio], dtype=np.float16).view(np.uint8)

    set_scales(1.0)
    std = float(gguf.quants.dequantize(blocks.reshape(rows, -1), qt).std())
    set_scales(float(arr.std()) / std)
    return blocks.reshape(rows, -1)

# Ordinary SPM pieces after the byte tokens; "\u2581" is SentencePiece's space.
_PIECES = ["\u2581", "e", "t", "a", "o", "n", "i", "s", "h", "r", "d", "l", "u",
           "\u2581t", "\u2581a", "\u2581s", "\u2581w", "\u2581the", "\u2581and",
           "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ed", "es", "or",
           "\u2581to", "\u2581was", "\u2581of", "\u2581he", "\u2581she", "\u2581it",
           "\u2581in", "\u2581day", "\u2581one", "\u2581big", "\u2581dog", "\u2581cat",
           "\u2581sun", "\u2581ran", "\u2581saw", "\u2581had", "\u2581Tim", "\u2581Lily",
           "ing", "ly", "ll", "ou", "\u2581h", "\u2581b", "\u2581c", "\u2581d", "\u2581m",
           ".", ",", "!", "?", "\u2581play", "\u2581happy", "\u2581friend", "\u2581tree"]


def _vocab(n_vocab):
    """(tokens, scores, token_types) of a minimal SPM vocabulary of n_vocab."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256          # unknown, control, control, byte
    n_pieces = n_vocab - len(tokens)
    if n_pieces < 0:
        raise ValueError("vocab size %d is below the 259 special+byte tokens" % n_vocab)
    pieces = list(_PIECES[:n_pieces])
    i = 0
    while len(pieces) < n_pieces:           # filler pieces, unique by construction
        pieces.append("\u2581w%d" % i)
        i += 1
    tokens += pieces
    types += [1] * n_pieces
    scores = [0.0] * 259 + [-float(k + 1) for k in range(n_pieces)]
    return tokens, scores, types


def _store(writer, name, arr, wtype):
    import gguf
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if wtype == "f32":
        writer.add_tensor(name, arr)
    elif wtype == "f16":
        writer.add_tensor(name, arr.astype(np.float16))
    elif wtype in K_TYPES:
        qt = getattr(gguf.GGMLQuantizationType, wtype.upper())
        q = _k_random(arr, wtype)
        writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
    else:
        qt = getattr(gguf.GGMLQuantizationType, wtype.upper())
        q = gguf.quants.quantize(arr, qt)
        writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)


ARCHS = ("llama", "mistral", "qwen2", "qwen3", "qwen3moe")
# accepted by --arch for loader tests only: llama-layout files under another
# architecture name (granite, which bangtrace refuses)
REFUSED_ARCHS = ("granite",)


def llama3_rope_factors(head_dim, base, factor=8.0, low=1.0, high=4.0, old_ctx=64):
    """rope_freqs.weight as convert_hf_to_gguf.py computes it for rope_type
    llama3 (LlamaModel.generate_extra_tensors). old_ctx is small here so
    that a short test sequence sees every regime (1, smooth, factor)."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    low_wav = old_ctx / low
    high_wav = old_ctx / high
    out = []
    for f in freqs:
        wav = 2 * np.pi / f
        if wav < high_wav:
            out.append(1.0)
        elif wav > low_wav:
            out.append(factor)
        else:
            smooth = (old_ctx / wav - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def make(path, wtype="f32", embd_type=None, untied=False, dim=64, hidden=192,
         n_layers=2, n_heads=4, n_kv_heads=2, n_vocab=320, ctx_len=128,
         rope_base=10000.0, norm_eps=1e-5, seed=0, special_ids=None,
         arch="llama", rope_freqs=False, head_dim=None, extra_tensor=None, n_expert=8, n_expert_used=2,
         shared_expert=0):
    """Write the GGUF to path; returns the hyperparameters as a dict.
    embd_type: type of token_embd (and of output when untied); default wtype.
    special_ids: {"padding": 4294967295, ...} -> tokenizer.ggml.<key>_token_id
    (uint32; replaces the default bos/eos/unk ids when it names them).
    arch "qwen3moe": qwen3's attention and a mixture-of-experts FFN as
    llama.cpp reads it: qwen3moe.expert_count / expert_used_count /
    expert_feed_forward_length (= hidden: each expert is `hidden` wide), and
    per layer ffn_gate_inp [dim, n_expert] and 3-D ffn_{gate,up,down}_exps
    (ne[2] = n_expert); shared_expert > 0 adds a shared expert of that width
    (ffn_*_shexp with its sigmoid gate ffn_gate_inp_shexp; llama.cpp's
    qwen3moe does not read one)."""
    import gguf
    if wtype not in TYPES or (embd_type or wtype) not in TYPES:
        raise ValueError("weight type must be one of %s" % ", ".join(TYPES))
    embd_type = embd_type or wtype
    if arch not in ARCHS + REFUSED_ARCHS:
        raise ValueError("architecture must be one of %s" % ", ".join(ARCHS))
    if rope_freqs and arch not in ("llama", "mistral"):
        raise ValueError("rope_freqs.weight is a llama tensor")
    if (head_dim is None and dim % n_heads) or n_heads % n_kv_heads:
        raise ValueError("dim %d, n_heads %d, n_kv_heads %d do not divide" % (dim, n_heads, n_kv_heads))
    if (wtype not in ("f32", "f16") or embd_type not in ("f32", "f16")) and (dim % 32 or hidden % 32):
        raise ValueError("quantized types need dim and hidden multiples of 32")
    if (wtype in K_TYPES or embd_type in K_TYPES) and (dim % 256 or hidden % 256):
        raise ValueError("k-quant types need dim and hidden multiples of 256")
    hd = head_dim or dim // n_heads
    q_dim = n_heads * hd
    kv_dim = n_kv_heads * hd
    rng = np.random.default_rng(seed)

    def mat(n_out, n_in):
        return rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)

    def norm():
        return 1.0 + 0.1 * rng.standard_normal(dim)

    w = gguf.GGUFWriter(path, arch)
    w.add_name("random-%s-%s" % (arch, wtype))
    w.add_file_type(_FILE_TYPE[wtype])
    w.add_context_length(ctx_len)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(hidden)
    if arch == "qwen3moe":
        w.add_expert_count(n_expert)
        w.add_expert_used_count(n_expert_used)
        w.add_expert_feed_forward_length(hidden)
        if shared_expert:
            w.add_expert_shared_feed_forward_length(shared_expert)
    w.add_block_count(n_layers)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv_heads)
    w.add_layer_norm_rms_eps(norm_eps)
    w.add_rope_freq_base(rope_base)
    w.add_rope_dimension_count(hd)
    if head_dim is not None:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_vocab_size(n_vocab)
    tokens, scores, types = _vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    ids = {"bos": 1, "eos": 2, "unknown": 0}
    ids.update(special_ids or {})
    for key, val in ids.items():
        w.add_uint32("tokenizer.ggml.%s_token_id" % key, val)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    # std 0.25 keeps tied logits (dominated by the current token's own row)
    # near 10 rather than 50, so an absolute 1e-4 bound stays meaningful.
    _store(w, "token_embd.weight", 0.25 * rng.standard_normal((n_vocab, dim)), embd_type)
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, rope_base))
    for L in range(n_layers):
        p = "blk.%d." % L
        _store(w, p + "attn_norm.weight", norm(), "f32")
        _store(w, p + "attn_q.weight", mat(q_dim, dim), wtype)
        _store(w, p + "attn_k.weight", mat(kv_dim, dim), wtype)
        _store(w, p + "attn_v.weight", mat(kv_dim, dim), wtype)
        if arch == "qwen2":   # biases of O(0.5): large enough to matter
            _store(w, p + "attn_q.bias", 0.5 * rng.standard_normal(q_dim), "f32")
            _store(w, p + "attn_k.bias", 0.5 * rng.standard_normal(kv_dim), "f32")
            _store(w, p + "attn_v.bias", 0.5 * rng.standard_normal(kv_dim), "f32")
        _store(w, p + "attn_output.weight", mat(dim, q_dim), wtype)
        if arch in ("qwen3", "qwen3moe"):
            _store(w, p + "attn_q_norm.weight", 1.0 + 0.3 * rng.standard_normal(hd), "f32")
            _store(w, p + "attn_k_norm.weight", 1.0 + 0.3 * rng.standard_normal(hd), "f32")
        _store(w, p + "ffn_norm.weight", norm(), "f32")
        if arch == "qwen3moe":
            # router logits of O(1): routing neither uniform nor one-hot
            _store(w, p + "ffn_gate_inp.weight", mat(n_expert, dim), "f32")
            _store(w, p + "ffn_gate_exps.weight", np.stack([mat(hidden, dim) for _ in range(n_expert)]), wtype)
            _store(w, p + "ffn_up_exps.weight", np.stack([mat(hidden, dim) for _ in range(n_expert)]), wtype)
            _store(w, p + "ffn_down_exps.weight", np.stack([mat(dim, hidden) for _ in range(n_expert)]), wtype)
            if shared_expert:
                _store(w, p + "ffn_gate_inp_shexp.weight", mat(1, dim)[0], "f32")
                _store(w, p + "ffn_gate_shexp.weight", mat(shared_expert, dim), wtype)
                _store(w, p + "ffn_up_shexp.weight", mat(shared_expert, dim), wtype)
                _store(w, p + "ffn_down_shexp.weight", mat(dim, shared_expert), wtype)
            continue
        _store(w, p + "ffn_gate.weight", mat(hidden, dim), wtype)
        _store(w, p + "ffn_up.weight", mat(hidden, dim), wtype)
        _store(w, p + "ffn_down.weight", mat(dim, hidden), wtype)
    _store(w, "output_norm.weight", norm(), "f32")
    if untied:
        _store(w, "output.weight", mat(n_vocab, dim), embd_type)
    if extra_tensor:      # a tensor no architecture reads (loader tests)
        _store(w, extra_tensor, rng.standard_normal(dim), "f32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dict(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads,
                n_kv_heads=n_kv_heads, head_dim=hd, n_vocab=n_vocab, ctx_len=ctx_len,
                norm_eps=norm_eps, rope_base=rope_base, rope_dim=hd, tied_output=not untied,
                arch=arch, n_expert=n_expert if arch == "qwen3moe" else 0,
                n_expert_used=n_expert_used if arch == "qwen3moe" else 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description="write a small random-weight llama GGUF")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--type", default="f32", choices=TYPES, help="matrix type")
    ap.add_argument("--embd-type", choices=TYPES, help="token_embd/output type (default --type)")
    ap.add_argument("--untied", action="store_true", help="write a separate output.weight")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=320)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", default="llama", choices=ARCHS + REFUSED_ARCHS)
    ap.add_argument("--rope-freqs", action="store_true",
                    help="llama: write rope_freqs.weight (Llama 3 rope scaling)")
    ap.add_argument("--head-dim", type=int, help="attention.key_length (default dim/heads)")
    ap.add_argument("--extra-tensor", metavar="NAME", help="also write a tensor no architecture reads")
    ap.add_argument("--experts", type=int, default=8, help="qwen3moe: number of experts")
    ap.add_argument("--experts-used", type=int, default=2, help="qwen3moe: experts per token")
    ap.add_argument("--shared-expert", type=int, default=0, help="qwen3moe: width of a shared expert (0: none)")
    ap.add_argument("--special-id", action="append", default=[], metavar="KEY=N",
                    help="tokenizer.ggml.KEY_token_id = N (uint32), e.g. padding=4294967295")
    a = ap.parse_args(argv)
    special = {}
    for kv in a.special_id:
        k, _, v = kv.partition("=")
        if not k or not v.isdigit() or int(v) >= 1 << 32:
            ap.error("--special-id expects KEY=N with 0 <= N < 2^32, got %r" % kv)
        special[k] = int(v)
    try:
        make(a.out, a.type, a.embd_type, a.untied, a.dim, a.hidden, a.layers, a.heads,
             a.n_kv_heads, a.vocab, a.ctx, a.rope_base, a.eps, a.seed, special,
             a.arch, a.rope_freqs, a.head_dim, a.extra_tensor, a.experts, a.experts_used, a.shared_expert)
    except (ValueError, OSError) as e:
        print("make_random_gguf.py: %s: %s" % (a.out, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
