#!/usr/bin/env python3
"""redact_attack.py - try to undo `bangtrace export --redact`.

usage: redact_attack.py ORIGINAL REDACTED MODEL [--swap A:B] [--trail T] [--expect-leak]

MODEL is a GGUF file (read with the gguf package) or a llama2.c checkpoint.

The adversary knows everything an attacker with the model could know, plus
(to score itself) the original trace: the token trail with every id and
piece, the prompt text.  From the redacted trace alone it then tries, in
every column of every table, to recover what was redacted:

  ids      every integer of a row (and every integer inside a text column:
           JSON top-k lists, event sentences; in columns that hold no ids,
           values up to 16 are counts and indexes, not evidence; a
           speculative bonus token lands after the accepted drafts) equal to the id of a redacted
           token at the row's position (a logit snapshot at pos names the
           token at pos + 1); and every id-carrying column (token, chosen,
           argmax, top-k) naming a redacted token's id at all, unless a token
           that stays holds that id there;
  text     every text column, and the raw bytes of the file, holding a word
           (4+ letters) of the prompt or of a redacted piece that the kept
           text does not itself hold;
  rows     every full logit row: its argmax against the redacted token it
           predicts, and any finite value at all (a finite row ranks the
           vocabulary, the prompt's words among the likeliest);
  embed    each single-position step's (a self-drafter's too) token_embd and blk.0.attn_norm tap
           statistics (bf16 min, max, mean, rms) against the same statistics
           of every row of the model's embedding table (and of the rmsnorm
           of every row): a unique match is the input token.

Which tokens were redacted is read from the redacted trace's own trail (id
-1 where the original has an id); every prompt token must be among them
(prompt mode) and every output token inside a run of three or more that the
prompt holds (the output is the last token at each position), and every
token with meta redacted = all.

--trail T: read which tokens were redacted (and the level) from the trace
T instead of REDACTED: with REDACTED an unredacted copy and --expect-leak,
the control that shows each attack finds what a redaction must remove.

--swap A:B: the redacted trace was made with a copy of MODEL whose ids A
and B are exchanged (tools/model-edit swap-tokens), the original with MODEL.

Exit status: 0 nothing recovered (or, with --expect-leak, something was:
the control that shows the attacks work), 1 the other way round, 2 error.
Prints one line per recovery, then a summary line.
"""
import json
import re
import sqlite3
import sys
import ctypes
import ctypes.util

import numpy as np


def die(msg):
    print("redact_attack: " + msg, file=sys.stderr)
    sys.exit(2)


def rows(db, sql, args=()):
    return db.execute(sql, args).fetchall()


# ---- bf16 ----

def bf16_bits(x):
    """float32 array -> bf16 bits (round to nearest even, as bt_f32_to_bf16)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def bf16_val(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def stat_table(m):
    """bf16 bits of (min, max, mean, rms) of every row of m (float32)."""
    m64 = m.astype(np.float64)
    mean = (m64.sum(axis=1) / m.shape[1]).astype(np.float32)
    rms = np.sqrt((m64 * m64).sum(axis=1) / m.shape[1]).astype(np.float32)
    return np.stack([bf16_bits(m.min(axis=1)), bf16_bits(m.max(axis=1)), bf16_bits(mean), bf16_bits(rms)], axis=1)


def llama2c_tables(path, eps=1e-5):
    """A llama2.c checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads,
    n_kv_heads, vocab_size, seq_len), then the f32 embedding table and the
    attention rmsnorm weights of every layer."""
    with open(path, "rb") as f:
        hdr = np.frombuffer(f.read(28), dtype="<i4")
        dim, n_layers, vocab = int(hdr[0]), int(hdr[2]), abs(int(hdr[5]))
        emb = np.frombuffer(f.read(vocab * dim * 4), dtype="<f4").reshape(vocab, dim)
        norm = np.frombuffer(f.read(dim * 4), dtype="<f4")
    return emb, norm, eps


def load_model_tables(path, eps_default=1e-5):
    if not path.endswith(".gguf"):
        emb, norm, eps = llama2c_tables(path, eps_default)
        return tables_of(emb, norm, eps)
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError:
        print("SKIP: the gguf Python package is needed (pip install gguf)")
        sys.exit(77)
    r = GGUFReader(path)
    emb = norm = None
    eps = eps_default
    for k, f in r.fields.items():
        if k.endswith("attention.layer_norm_rms_epsilon"):
            eps = float(f.parts[f.data[0]][0])
    for t in r.tensors:
        if t.name == "token_embd.weight":
            emb = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1, int(t.shape[0]))
        elif t.name == "blk.0.attn_norm.weight":
            norm = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
    if emb is None:
        die(path + ": no token_embd.weight")
    return tables_of(emb, norm, eps)


def tables_of(emb, norm, eps):
    tables = {"token_embd": stat_table(emb)}
    if norm is not None:
        e64 = emb.astype(np.float64)
        scale = 1.0 / np.sqrt((e64 * e64).mean(axis=1) + eps)
        tables["attn_norm"] = stat_table(((emb * scale[:, None].astype(np.float32)) * norm[None, :]).astype(np.float32))
    return tables


def match(table, bits):
    """ids whose statistics equal bits exactly, else within one bf16 step."""
    bits = np.asarray(bits, dtype=np.int64)
    t = table.astype(np.int64)
    exact = np.nonzero((t == bits).all(axis=1))[0]
    if len(exact):
        return exact
    return np.nonzero((np.abs(t - bits) <= 1).all(axis=1))[0]


# ---- full logit rows ----

_zstd = None


def zstd_decompress(data, size):
    global _zstd
    if _zstd is None:
        name = ctypes.util.find_library("zstd") or "libzstd.so.1"
        _zstd = ctypes.CDLL(name)
        _zstd.ZSTD_decompress.restype = ctypes.c_size_t
        _zstd.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
        _zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]
    out = ctypes.create_string_buffer(size)
    n = _zstd.ZSTD_decompress(out, size, data, len(data))
    if _zstd.ZSTD_isError(n) or n != size:
        return None
    return out.raw


def decode_row(dtype, encoding, n, data):
    width = 2 if dtype == "f16" else 4
    raw = bytes(data) if encoding == "raw" else zstd_decompress(bytes(data), n * width)
    if raw is None or len(raw) != n * width:
        return None
    return np.frombuffer(raw, dtype="<f2" if width == 2 else "<f4").astype(np.float32)


# ---- the attack ----

ID_COLUMN = re.compile(r"token|chosen|argmax|topk_ids")
WORD = re.compile(r"[A-Za-z]{4,}")
NUM = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
# how the detectors name ids in a sentence: "token 7", "tokens 7 8", "-> id 7"
ID_IN_TEXT = re.compile(r"(?:token id|tokens?|-> id) ((?:-?\d+ ?)+)")
# a count or an index of that size is no evidence of an id (they are
# everywhere: NaN counts, first_bad_index); id columns and ids named in a
# sentence are checked whatever their value
SMALL = 16


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    expect_leak = "--expect-leak" in sys.argv
    swap, trail = {}, None
    for i, a in enumerate(sys.argv):
        if a == "--swap" and i + 1 < len(sys.argv):
            x, y = (int(v) for v in sys.argv[i + 1].split(":"))
            swap = {x: y, y: x}
            args = [v for v in args if v != sys.argv[i + 1]]
        if a == "--trail" and i + 1 < len(sys.argv):
            trail = sys.argv[i + 1]
            args = [v for v in args if v != trail]
    if len(args) != 3:
        die("usage: redact_attack.py ORIGINAL REDACTED MODEL.gguf [--swap A:B] [--expect-leak]")
    orig_path, red_path, model = args
    o = sqlite3.connect("file:%s?mode=ro" % orig_path, uri=True)
    d = sqlite3.connect("file:%s?mode=ro" % red_path, uri=True)
    d.text_factory = lambda b: b.decode("utf-8", "replace")
    o.text_factory = lambda b: b.decode("utf-8", "replace")
    t = sqlite3.connect("file:%s?mode=ro" % (trail or red_path), uri=True)
    meta = dict(rows(t, "SELECT key, value FROM meta"))
    level = meta.get("redacted", "no")
    omap = {seq: (pos, swap.get(tid, tid), piece, role)
            for seq, pos, tid, piece, role in rows(o, "SELECT seq, pos, token_id, piece, role FROM tokens")}
    red_tok = {seq: tid for seq, tid in rows(t, "SELECT seq, token_id FROM tokens")}
    # (a trail longer than the original's, as a relabelled model's that did not
    # stop at its end-of-text, is compared over the original's tokens)
    if not set(red_tok) & set(omap):
        die("the traces do not match: no token in common")
    redacted = {}       # pos -> set of redacted ids there
    kept = {}           # pos -> set of ids of tokens that stay there
    red_ids, red_words, kept_text = set(), set(), []
    failures = []
    for seq, (pos, tid, piece, role) in omap.items():
        gone = red_tok.get(seq, tid) == -1 and tid != -1
        if not gone and not trail and (role == "prompt" and level in ("prompt", "all") or level == "all"):
            failures.append("tokens: seq %d (%s, pos %d) kept id %d" % (seq, role, pos, tid))
        if gone:
            redacted.setdefault(pos, set()).add(tid)
            red_ids.add(tid)
            red_words.update(w.lower() for w in WORD.findall(piece or ""))
        else:
            kept.setdefault(pos, set()).add(tid)
            kept_text.append(piece or "")
    # what prompt mode must redact besides the prompt: the output (the last
    # token at each position; a speculative trail holds replaced drafts too)
    # inside a run of 3+ that the prompt holds consecutively
    if level == "prompt" and not trail:
        pids = [tid for _, (pos, tid, piece, role) in sorted(omap.items()) if role == "prompt"]
        tris = set(zip(pids, pids[1:], pids[2:]))
        last = {}
        for seq, (pos, tid, piece, role) in sorted(omap.items()):
            if role != "prompt":
                last[pos] = (seq, tid)
        outp = sorted(last.items())
        for i in range(len(outp) - 2):
            if (outp[i][1][1], outp[i + 1][1][1], outp[i + 2][1][1]) in tris:
                for pos, (seq, tid) in outp[i:i + 3]:
                    if red_tok.get(seq, -1) != -1:
                        failures.append("tokens: seq %d at position %d (id %d) echoes the prompt and was kept" % (seq, pos, tid))
    prompt = (rows(o, "SELECT value FROM meta WHERE key = 'prompt_text'") or [("",)])[0][0] or ""
    red_words.update(w.lower() for w in WORD.findall(prompt))
    kept_words = set(w.lower() for w in WORD.findall("".join(kept_text)))
    # words any trace holds (column names, template words in the schema) are no evidence
    schema_words = set(w.lower() for (sql,) in rows(d, "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")
                       for w in WORD.findall(sql))
    red_words -= kept_words | schema_words

    def found(what):
        failures.append(what)

    def id_hits(tab, col, value, positions, any_pos_ok, is_id):
        if isinstance(value, int):
            ints = [value] if is_id or value > SMALL else []
        elif isinstance(value, str):
            ints = [int(v) for v in NUM.findall(value) if re.fullmatch(r"-?\d+", v) and (is_id or int(v) > SMALL)]
            ints += [int(v) for m in ID_IN_TEXT.findall(value) for v in m.split()]
        else:
            ints = []
        for v in ints:
            for p in positions:
                if v in redacted.get(p, ()):
                    found("ids: %s.%s = %d is the redacted token at position %d" % (tab, col, v, p))
                    return
            if any_pos_ok is not None and v in red_ids and not any(v in kept.get(p, ()) for p in any_pos_ok):
                found("ids: %s.%s holds %d, the id of a redacted token" % (tab, col, v))
                return

    tables = [n for (n,) in rows(d, "SELECT name FROM sqlite_master WHERE type = 'table'")]
    for tab in tables:
        cols = [c[1] for c in rows(d, 'SELECT * FROM pragma_table_info(?)', (tab,))]
        first_draft = dict(rows(d, "SELECT step, min(draft_pos) FROM spec_trail GROUP BY step")) if tab == "spec_steps" else {}
        for r in rows(d, 'SELECT * FROM "%s"' % tab.replace('"', '""')):
            rec = dict(zip(cols, r))
            if tab == "spec_steps" and first_draft.get(rec.get("step")) is not None:
                rec_pos = first_draft[rec["step"]] + rec["accepted"]     # where the target's token lands
            else:
                rec_pos = None
            positions = []
            for pc in ("pos", "draft_pos", "first_bad_pos"):
                if isinstance(rec.get(pc), int):
                    positions += [rec[pc], rec[pc] + 1]
            for c, v in rec.items():
                if c in ("step", "pos", "seq", "draft_pos", "pos0", "n_pos", "idx", "id", "event_id", "n_vocab"):
                    continue
                is_id = ID_COLUMN.search(c) is not None
                pred = [p + 1 for p in (rec.get("pos"), rec.get("draft_pos")) if isinstance(p, int)]
                if tab == "logits":
                    pred = [rec["pos"] + 1]
                elif isinstance(rec.get("draft_pos"), int):
                    pred = [rec["draft_pos"]]
                elif isinstance(rec.get("pos"), int):
                    pred = [rec["pos"]]
                elif rec_pos is not None:
                    pred = [rec_pos]
                if rec_pos is not None and isinstance(v, int) and is_id:
                    id_hits(tab, c, v, pred, pred, is_id)
                elif isinstance(v, (int, str)) and positions:
                    id_hits(tab, c, v, positions if tab != "logits" else pred, pred if is_id else None, is_id)
                elif is_id and isinstance(v, (int, str)) and tab != "meta":
                    id_hits(tab, c, v, [], [], is_id)
                if isinstance(v, str):
                    for w in WORD.findall(v):
                        if w.lower() in red_words:
                            found("text: %s.%s holds '%s'" % (tab, c, w))
                            break
    raw = open(red_path, "rb").read().lower()
    for w in sorted(red_words):
        if w.encode() in raw:
            found("bytes: the file holds '%s'" % w)

    # full logit rows
    if "logit_rows" in tables:
        for step, pos, dtype, enc, n, data in rows(d, "SELECT step, pos, dtype, encoding, n, data FROM logit_rows"):
            row = decode_row(dtype, enc, n, data)
            if row is None:
                found("rows: step %d pos %d does not decode" % (step, pos))
                continue
            fin = np.isfinite(row)
            if fin.any():
                am = int(np.argmax(np.where(fin, row, -np.inf)))
                if am in redacted.get(pos + 1, ()):
                    found("rows: step %d pos %d: argmax %d is the redacted token at %d" % (step, pos, am, pos + 1))
                elif level != "no" and red_ids:
                    found("rows: step %d pos %d: %d finite logits rank the vocabulary" % (step, pos, int(fin.sum())))

    # the embedding attack
    # (a self-drafter's passes share the target's embedding: its steps are attacked too)
    tens = {}
    for model_, idx, op in rows(d, "SELECT model, idx, op FROM tensors WHERE op = 'token_embd' OR (layer = 0 AND op = 'attn_norm')"):
        tens.setdefault(model_, {})[op] = idx
    tables_m = None
    matched = 0
    for step, model_, pos0, n_pos, blob in rows(d, "SELECT s.step, s.model, s.pos0, s.n_pos, b.stats FROM steps s JOIN tap_blobs b "
                                                   "ON b.step = s.step WHERE s.n_pos = 1"):
        if not redacted.get(pos0) and not expect_leak:
            continue
        truth = redacted.get(pos0) or kept.get(pos0) or set()
        for op, idx in tens.get(model_, {}).items():
            b = blob[idx * 8: idx * 8 + 8]
            if len(b) < 8:
                continue
            bits = np.frombuffer(b, dtype="<u2")
            if ((bits >> 7) & 0xFF == 0xFF).any():
                continue            # "none": nothing to match
            if tables_m is None:
                tables_m = load_model_tables(model)
            if op not in tables_m:
                continue
            ids = match(tables_m[op], bits)
            ids = [swap.get(int(i), int(i)) for i in ids]
            if len(ids) == 1 and ids[0] in truth:
                matched += 1
                if ids[0] in redacted.get(pos0, ()):
                    found("embed: step %d (%s) stats match only vocabulary row %d, the redacted token at position %d"
                          % (step, op, ids[0], pos0))
    for f in failures:
        print(f)
    n_red = sum(len(v) for v in redacted.values())
    print("redact_attack: %s: %d recoveries of %d redacted tokens (level %s; %d embedding matches of any token)"
          % (red_path, len(failures), n_red, level, matched))
    if expect_leak:
        return 0 if failures else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
