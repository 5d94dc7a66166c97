#!/usr/bin/env python3
"""hf_make_spm.py VOCAB.gguf OUTDIR STYLE - a SentencePiece-converted HF tokenizer folder.

Writes OUTDIR/tokenizer.json (and tokenizer_config.json) the way transformers'
LlamaConverter writes one for a SentencePiece BPE model: model BPE with
byte_fallback and fuse_unk over the GGUF's pieces, merges derived from the
vocabulary as SentencePieceExtractor does (every split of a piece into two
pieces that are both in the vocabulary, each piece's splits ordered by the
ids of their halves, then all of them by the piece's score, highest first,
stably), <unk> <s> </s> as special added tokens.

STYLE:
  legacy          normalizer Prepend("\u2581") + Replace(" " -> "\u2581"), no
                  pre_tokenizer; decoder Replace + ByteFallback + Fuse + Strip
                  (Llama 2, Mistral, TinyLlama)
  metaspace       no normalizer; pre_tokenizer Metaspace prepend_scheme "first",
                  split false (transformers' legacy=False form)
  metaspace-split pre_tokenizer Metaspace prepend_scheme "always", split true
  digits          legacy, plus a pre_tokenizer Sequence of Digits
                  (individual) and a Split on a Regex (punctuation runs)
  model           no tokenizer.json: OUTDIR/tokenizer.model, a SentencePiece
                  ModelProto written by hand (pieces, scores, types;
                  add_dummy_prefix true)
Needs the gguf package (and numpy)."""
import json
import os
import struct
import sys

from gguf import GGUFReader

SP = "\u2581"


def field(r, key):
    f = r.fields[key]
    if len(f.data) > 1 or key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key == "tokenizer.ggml.tokens":
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    return f.parts[f.data[0]].tolist()[0]


def merges_of(tokens, scores):
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, piece in enumerate(tokens):
        local = []
        for k in range(1, len(piece)):
            l, r = piece[:k], piece[k:]
            if l in vocab and r in vocab:
                local.append((l, r, scores[i]))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    return [f"{l} {r}" for l, r, _ in merges]


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_bytes(fno, data):
    return varint(fno << 3 | 2) + varint(len(data)) + data


def pb_varint(fno, v):
    return varint(fno << 3) + varint(v)


def pb_float(fno, v):
    return varint(fno << 3 | 5) + struct.pack("<f", v)


def write_model(path, tokens, scores, types):
    out = bytearray()
    for t, s, ty in zip(tokens, scores, types):
        out += pb_bytes(1, pb_bytes(1, t.encode()) + pb_float(2, s) + pb_varint(3, ty))
    trainer = pb_varint(3, 2) + pb_varint(35, 1) + pb_varint(40, 0) + pb_varint(41, 1) + pb_varint(42, 2) \
        + pb_varint(43, (1 << 64) - 1)                       # pad_id -1, as int32 varint
    out += pb_bytes(2, trainer)
    out += pb_bytes(3, pb_bytes(1, b"identity") + pb_varint(3, 1) + pb_varint(4, 0))
    with open(path, "wb") as f:
        f.write(out)


def main():
    src, outdir, style = sys.argv[1:4]
    r = GGUFReader(src)
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    os.makedirs(outdir, exist_ok=True)
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
           "add_eos_token": False}
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    if style == "model":
        write_model(os.path.join(outdir, "tokenizer.model"), tokens, scores, types)
        return
    strip_dec = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    if style in ("legacy", "digits"):
        norm = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SP},
            {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
        pre = None
        if style == "digits":
            pre = {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Split", "pattern": {"Regex": "[^\\s\\p{L}\\p{N}\u2581]+"}, "behavior": "Isolated",
                 "invert": False}]}
    elif style in ("metaspace", "metaspace-split"):
        norm = None
        pre = {"type": "Metaspace", "replacement": SP,
               "prepend_scheme": "first" if style == "metaspace" else "always",
               "split": style == "metaspace-split"}
    else:
        sys.exit(f"hf_make_spm.py: unknown style {style}")
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in range(3)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": norm, "pre_tokenizer": pre,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": strip_dec,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges_of(tokens, scores)},
    }
    with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
