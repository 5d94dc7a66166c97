#!/usr/bin/env python3
"""llama2c-to-gguf.py CHECKPOINT.bin TOKENIZER.bin OUT.gguf - convert a
llama2.c checkpoint (karpathy/llama2.c export v0: a header of 7 int32, then
f32 weights) and its tokenizer.bin into a llama-architecture GGUF (f32), so
that bangtrace's native engine and llama.cpp run the same file (the
stories260K tests of `run --engine llama.cpp`). Needs numpy and gguf.

llama2.c rotates adjacent pairs like GGUF's llama (ggml rope "norm"), so
the weights are copied unpermuted; pieces get back SentencePiece's U+2581
for the space the llama2.c export replaced it with. BOS is also written as
the end-of-turn id: llama2.c stops generating at BOS. Exit 2 on bad input."""
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("llama2c-to-gguf: the Python 'gguf' package is needed (pip install gguf)")


def die(msg):
    print(f"llama2c-to-gguf: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    if len(sys.argv) != 4:
        die("usage: llama2c-to-gguf.py CHECKPOINT.bin TOKENIZER.bin OUT.gguf")
    ckpt, tokp, out = sys.argv[1:]
    raw = open(ckpt, "rb").read()
    if len(raw) < 28:
        die(f"{ckpt}: too short for a llama2.c header")
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, n_layers, n_heads, n_kv, vocab, seq) <= 0 or dim % n_heads or n_heads % n_kv:
        die(f"{ckpt}: implausible header {dim, hidden, n_layers, n_heads, n_kv, vocab, seq}")
    hd = dim // n_heads
    kv = n_kv * hd
    w = np.frombuffer(raw, dtype="<f4", offset=28)
    sizes = [("emb", vocab * dim), ("rms_att", n_layers * dim), ("wq", n_layers * dim * dim),
             ("wk", n_layers * kv * dim), ("wv", n_layers * kv * dim), ("wo", n_layers * dim * dim),
             ("rms_ffn", n_layers * dim), ("w1", n_layers * hidden * dim), ("w2", n_layers * dim * hidden),
             ("w3", n_layers * hidden * dim), ("rms_final", dim), ("fcr", seq * hd // 2), ("fci", seq * hd // 2)]
    if not shared:
        sizes.append(("wcls", vocab * dim))
    need = sum(n for _, n in sizes)
    if w.size != need:
        die(f"{ckpt}: {w.size} floats after the header, the header implies {need}")
    t, off = {}, 0
    for name, n in sizes:
        t[name] = w[off:off + n]
        off += n

    tb = open(tokp, "rb").read()
    pos = 4
    pieces, scores = [], []
    for i in range(vocab):
        if pos + 8 > len(tb):
            die(f"{tokp}: ends at token {i} of {vocab}")
        score, ln = struct.unpack("<fi", tb[pos:pos + 8])
        pos += 8
        if ln < 0 or pos + ln > len(tb):
            die(f"{tokp}: token {i} has a bad length {ln}")
        pieces.append(tb[pos:pos + ln].decode("utf-8", "replace").replace(" ", "\u2581"))
        scores.append(score)
        pos += ln
    types = []
    for i, p in enumerate(pieces):
        if i == 0:
            types.append(gguf.TokenType.UNKNOWN)
        elif i in (1, 2):
            types.append(gguf.TokenType.CONTROL)
        elif len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)

    g = gguf.GGUFWriter(out, "llama")
    g.add_name(ckpt.rsplit("/", 1)[-1].rsplit(".", 1)[0])
    g.add_context_length(seq)
    g.add_embedding_length(dim)
    g.add_block_count(n_layers)
    g.add_feed_forward_length(hidden)
    g.add_head_count(n_heads)
    g.add_head_count_kv(n_kv)
    g.add_rope_dimension_count(hd)
    g.add_rope_freq_base(10000.0)
    g.add_layer_norm_rms_eps(1e-5)
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    g.add_tokenizer_model("llama")
    g.add_token_list(pieces)
    g.add_token_scores(scores)
    g.add_token_types(types)
    g.add_bos_token_id(1)
    g.add_eos_token_id(2)
    # llama2.c's generate loop stops at BOS (it delimits stories), and
    # bangtrace's llama2.c tokenizer does too; an end-of-turn id of 1 makes
    # both engines stop there on the GGUF (llama.cpp counts eot among its
    # end-of-generation ids), so a run on the .bin and on the GGUF give the
    # same ids and finish reason.
    g.add_eot_token_id(1)
    g.add_unk_token_id(0)
    g.add_add_bos_token(True)
    g.add_add_eos_token(False)

    def add(name, a, shape):
        g.add_tensor(name, np.ascontiguousarray(a.reshape(shape), dtype=np.float32))

    add("token_embd.weight", t["emb"], (vocab, dim))
    for l in range(n_layers):
        def sl(name, n):
            return t[name][l * n:(l + 1) * n]
        add(f"blk.{l}.attn_norm.weight", sl("rms_att", dim), (dim,))
        add(f"blk.{l}.attn_q.weight", sl("wq", dim * dim), (dim, dim))
        add(f"blk.{l}.attn_k.weight", sl("wk", kv * dim), (kv, dim))
        add(f"blk.{l}.attn_v.weight", sl("wv", kv * dim), (kv, dim))
        add(f"blk.{l}.attn_output.weight", sl("wo", dim * dim), (dim, dim))
        add(f"blk.{l}.ffn_norm.weight", sl("rms_ffn", dim), (dim,))
        add(f"blk.{l}.ffn_gate.weight", sl("w1", hidden * dim), (hidden, dim))
        add(f"blk.{l}.ffn_down.weight", sl("w2", dim * hidden), (dim, hidden))
        add(f"blk.{l}.ffn_up.weight", sl("w3", hidden * dim), (hidden, dim))
    add("output_norm.weight", t["rms_final"], (dim,))
    add("output.weight", t["emb"] if shared else t["wcls"], (vocab, dim))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


if __name__ == "__main__":
    main()
