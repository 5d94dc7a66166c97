#!/usr/bin/env python3
"""hf_make_bad.py OUTDIR [GPT2_VOCAB_FOLDER] - damaged Hugging Face folders.

Writes OUTDIR/good (a tiny random Llama: config.json + model.safetensors, no
tokenizer) and one folder per damage, and OUTDIR/cases.tsv: folder name, tab,
a string the one-line error must contain. With a tokenizer-only folder
(tools/gguf-to-hf.py --vocab-only) it also writes damaged tokenizer.json
variants. numpy only; the safetensors files are written by hand so that
they can be wrong in exactly one way."""
import json
import os
import shutil
import struct
import sys

import numpy as np

out = sys.argv[1]
tokdir = sys.argv[2] if len(sys.argv) > 2 else None
rng = np.random.default_rng(7)
V, D, F, H, KV = 64, 8, 16, 2, 1
HD = D // H
CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": D, "intermediate_size": F,
          "num_hidden_layers": 1, "num_attention_heads": H, "num_key_value_heads": KV,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64,
          "vocab_size": V, "tie_word_embeddings": False}


def tensors():
    t = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D),
         "model.layers.0.input_layernorm.weight": (D,), "model.layers.0.post_attention_layernorm.weight": (D,),
         "model.layers.0.self_attn.q_proj.weight": (H * HD, D), "model.layers.0.self_attn.k_proj.weight": (KV * HD, D),
         "model.layers.0.self_attn.v_proj.weight": (KV * HD, D), "model.layers.0.self_attn.o_proj.weight": (D, H * HD),
         "model.layers.0.mlp.gate_proj.weight": (F, D), "model.layers.0.mlp.up_proj.weight": (F, D),
         "model.layers.0.mlp.down_proj.weight": (D, F)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in t.items()}


def st_bytes(ts, header_edit=None, data_edit=None):
    header, blobs, off = {}, [], 0
    for name, a in ts.items():
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if header_edit:
        header_edit(header)
    h = header if isinstance(header, (bytes, str)) else json.dumps(header)
    h = h.encode() if isinstance(h, str) else h
    data = b"".join(blobs)
    if data_edit:
        data = data_edit(data)
    return struct.pack("<Q", len(h)) + h + data


cases = []


def folder(name, expect, st=None, config=None, extra=None, raw=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(config if isinstance(config, str) else json.dumps(config or CONFIG))
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(raw if raw is not None else st_bytes(TS, *(st or ())))
    for fn, body in (extra or {}).items():
        with open(os.path.join(d, fn), "w") as f:
            f.write(body if isinstance(body, str) else json.dumps(body))
    if expect:
        cases.append((name, expect))


TS = tensors()
folder("good", None)
good = st_bytes(TS)


def setk(k, f):
    return lambda h: h[k].update(f(h[k]))


q = "model.layers.0.self_attn.q_proj.weight"
folder("st-truncated", "ends past end of file", raw=good[:-100])
folder("st-short", "too short", raw=good[:5])
folder("st-absurd-header", "absurd", raw=struct.pack("<Q", 1 << 40) + good[8:])
folder("st-header-past-eof", "truncated", raw=struct.pack("<Q", len(good)) + good[8:])
folder("st-bad-json", "bad header JSON", st=(lambda h: h.update({"x": float("nan")}),))
folder("st-not-object", "not a JSON object", raw=struct.pack("<Q", 2) + b"[]")
folder("st-dup-key", "bad header JSON", raw=(lambda h: struct.pack("<Q", len(h)) + h)(
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}') + b"\0" * 4)
folder("st-overlap", "overlaps", st=(setk(q, lambda t: {"data_offsets": [t["data_offsets"][0] - 4, t["data_offsets"][1] - 4]}),))
shift_last = lambda h: [h[k].update(data_offsets=[h[k]["data_offsets"][0] + 4, h[k]["data_offsets"][1] + 4]) for k in list(h)[-1:]]
folder("st-gap", "gap", st=(shift_last, lambda d: d + b"\0" * 4))
folder("st-shape-mismatch", "shape needs", st=(setk(q, lambda t: {"shape": [H * HD, D + 1]}),))
folder("st-unknown-dtype", "unknown dtype", st=(setk(q, lambda t: {"dtype": "F7"}),))
folder("st-negative-offset", "data_offsets", st=(setk(q, lambda t: {"data_offsets": [-4, t["data_offsets"][1]]}),))
folder("st-overflow-shape", "absurd", st=(setk(q, lambda t: {"shape": [1 << 40, 1 << 40]}),))
folder("st-past-eof", "past end of file", st=(shift_last,))
folder("st-trailing", "not described", st=(None, lambda d: d + b"\0" * 16))
folder("st-i64-weight", "dtype I64", st=(setk(q, lambda t: {"dtype": "I64", "shape": [H * HD, D // 2]}),))
folder("st-unknown-tensor", "no GGUF counterpart", st=(lambda h: h.__setitem__("model.layers.0.mlp.frobnicator.weight", h.pop("lm_head.weight")),))
folder("cfg-bad-json", "bad JSON", config="{\"architectures\": [")
folder("cfg-unknown-arch", "GPT2LMHeadModel", config=dict(CONFIG, architectures=["GPT2LMHeadModel"]))
folder("cfg-no-arch", "architectures", config={k: v for k, v in CONFIG.items() if k != "architectures"})
folder("cfg-rope-yarn", "yarn", config=dict(CONFIG, rope_scaling={"rope_type": "yarn", "factor": 4.0}))
folder("cfg-bad-type", "hidden_size", config=dict(CONFIG, hidden_size="eight"))
folder("cfg-layer-out-of-range", "implausible", config=dict(CONFIG, num_hidden_layers=0))
d = os.path.join(out, "no-config")
os.makedirs(d, exist_ok=True)
cases.append(("no-config", "config.json is missing"))
d = os.path.join(out, "no-weights")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump(CONFIG, f)
cases.append(("no-weights", "no model.safetensors"))
# shards: an index naming a file outside the folder, or a tensor a shard lacks
for name, wm, expect in (("idx-escape", {q: "../good/model.safetensors"}, "not a file in the folder"),
                         ("idx-missing-tensor", {"model.layers.0.nonexistent.weight": "model.safetensors"}, "missing from")):
    folder(name, expect, extra={"model.safetensors.index.json": {"weight_map": wm}})

if tokdir:
    with open(os.path.join(tokdir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    def tok(name, expect, edit):
        d = os.path.join(out, name)
        shutil.copytree(tokdir, d)
        t = json.loads(json.dumps(tj))
        edit(t)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(t, f, ensure_ascii=False)
        cases.append((name, expect))
    tok("tok-normalizer", "normalizer 'NFKC'", lambda t: t.update(normalizer={"type": "NFKC"}))
    tok("tok-pretok", "pre_tokenizer 'Whitespace'", lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}))
    tok("tok-decoder", "decoder 'WordPiece'", lambda t: t.update(decoder={"type": "WordPiece"}))
    tok("tok-model", "model 'Unigram'", lambda t: t["model"].update(type="Unigram"))
    tok("tok-behavior", "behavior 'Sideways'", lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False}, {"type": "ByteLevel"}]}))
    tok("tok-bad-regex", "pre-tokenizer regex", lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": False}, {"type": "ByteLevel"}]}))
    tok("tok-no-bytelevel", "ByteLevel", lambda t: t.update(pre_tokenizer={"type": "Digits", "individual_digits": True}))
    tok("tok-bad-merge", "merges[0]", lambda t: t["model"]["merges"].__setitem__(0, 7))
    tok("tok-dropout", "dropout", lambda t: t["model"].update(dropout=0.1))
with open(os.path.join(out, "cases.tsv"), "w") as f:
    for n, e in cases:
        f.write(f"{n}\t{e}\n")
