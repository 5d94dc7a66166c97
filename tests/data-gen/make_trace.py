#!/usr/bin/env python3
"""make_trace.py - build bangtrace traces with plain SQL for the browser tests.

Usage: make_trace.py KIND OUT [--steps N] [--schema traces/schema.sql]

KIND:
  clean     60 steps of a stories260K-shaped model (5 layers, dim 64, ffn 172,
            vocab 512); token pieces include ESC sequences, BEL and CR (the
            sanitization test), a short run of one token, and one tensor at
            one step far above its median (blk.2.ffn_down at step 30).
  collapse  NaN at step 9, layer 3, ffn_gate (1 NaN of 172 at index 5), spread
            through the rest of layer 3, all of layer 4, output_norm and logits;
            from step 10 on layer 4's attention context is NaN (the KV cache
            carries it), logits stay NaN, and the model emits token 0 ('!')
            50 times (steps 9..58). Events and a backtrace as the recorder
            writes them.
  big       SmolLM2-135M-shaped (30 layers, 393 tapped tensors) with --steps N
            decode steps (default 300000, about 1 GB); NaN at step N-20000,
            layer 17, ffn_down, then '!' to the end. --layers L (default 30,
            at least 19) makes it L layers deep, --bad-step S
            puts the NaN at step S.
  spec      speculative decoding as `run --spec-k 4 --draft-self 2` records it
            (greedy): step 0 target prefill, then per round 4 draft steps
            (model 'draft', its own tensors: blk.0..1 + embd/norm/logits) and
            one verify step (k + 1 positions); spec_steps / spec_trail rows,
            tokens with roles draft / gen / bonus. Acceptance is high for 20
            rounds, collapses for 10 (accept_collapse event), recovers; in
            round 33 the draft's blk.1.ffn_down is NaN (draft_finite 0, the
            draft is rejected); the last round accepts the stop token '</s>'
            and the 2 drafts after it are after_stop (post_stop_draft event).
            --steps N sets the number of rounds (default 41).
  foreign   a valid SQLite file that is not a trace.

The layout is the writer's (traces/schema.sql, application_id 0x42545243,
user_version 1, WAL): one tap_blobs row per step holding bf16 min, max, mean,
rms per tensor slot (0x7fc0 = none), non-finite tensors in tap_bad.
"""
import json
import math
import os
import random
import sqlite3
import struct
import sys
import time

APP_ID = 0x42545243
NAN_BF16 = 0x7FC0
OPS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_ctx", "attn_output", "attn_resid",
       "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "ffn_resid"]


def bf16(x):
    """float -> bf16 bits, round to nearest even; NaN/None -> 0x7fc0."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NAN_BF16
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def widths(dim, kv, ffn):
    return {"attn_norm": dim, "attn_q": dim, "attn_k": kv, "attn_v": kv, "attn_ctx": dim,
            "attn_output": dim, "attn_resid": dim, "ffn_norm": dim, "ffn_gate": ffn, "ffn_up": ffn,
            "ffn_act": ffn, "ffn_down": dim, "ffn_resid": dim}


def tensor_list(n_layers, dim, kv, ffn, vocab):
    w = widths(dim, kv, ffn)
    t = [("token_embd", None, "token_embd", dim)]
    for layer in range(n_layers):
        for op in OPS:
            t.append(("blk.%d.%s" % (layer, op), layer, op, w[op]))
    t.append(("output_norm", None, "output_norm", dim))
    t.append(("logits", None, "logits", vocab))
    return t


def open_db(out, schema_path):
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(out + suffix):
            os.remove(out + suffix)
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    with open(schema_path) as f:
        db.executescript(f.read())
    db.execute("PRAGMA application_id=%d" % APP_ID)
    db.execute("PRAGMA user_version=1")
    return db


def finish_db(db):
    db.commit()
    db.execute("PRAGMA journal_mode=WAL")
    db.close()


def base_magnitude(name, op, layer):
    """A plausible absmax per tensor, deterministic per name."""
    r = random.Random(name)
    scale = {"attn_norm": 3, "ffn_norm": 3, "output_norm": 8, "token_embd": 0.5, "logits": 12,
             "attn_resid": 20, "ffn_resid": 25, "ffn_act": 4}.get(op, 2)
    return scale * (0.7 + 0.6 * r.random()) * (1 + 0.1 * (layer or 0))


def stats_for(mag, rnd):
    a = mag * (0.9 + 0.2 * rnd.random())
    mn = -a * (0.6 + 0.4 * rnd.random())
    mean = a * (rnd.random() - 0.5) * 0.05
    rms = a * 0.25
    return mn, a, mean, rms


def pack(stats):
    out = bytearray()
    for mn, mx, mean, rms in stats:
        out += struct.pack("<4H", bf16(mn), bf16(mx), bf16(mean), bf16(rms))
    return bytes(out)


def write_meta(db, meta):
    db.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(meta.items()))


def small_trace(kind, out, schema):
    n_layers, dim, kv, ffn, vocab = 5, 64, 32, 172, 512
    tens = tensor_list(n_layers, dim, kv, ffn, vocab)
    idx_of = {t[0]: i for i, t in enumerate(tens)}
    db = open_db(out, schema)
    inj = ["nan@step=9,layer=3,op=ffn_gate,index=5"] if kind == "collapse" else []
    write_meta(db, {
        "tool_version": "0.1.0 (tests/data-gen/make_trace.py)",
        "schema_version": "1",
        "status": "ok",
        "argv": "bangtrace run --model stories260K.bin --prompt 'Once upon a time' -n 58 --trace %s%s"
                % (os.path.basename(out), "".join(" --inject " + s for s in inj)),
        "model_path": "stories260K.bin",
        "model_sha256": "0" * 64,
        "arch": "llama",
        "config": json.dumps({"n_layers": n_layers, "dim": dim, "n_heads": 8, "n_kv_heads": 4,
                              "hidden_dim": ffn, "vocab_size": vocab}),
        "tokenizer": "tok512.bin (llama2.c)",
        "sampling": "greedy",
        "argmax_rule": "first",
        "seed": "0",
        "injections": json.dumps(inj),
        "backend": "cpu",
        "request": json.dumps({"prompt": "Once upon a time\x1b[2J"}),
    })
    for i, (name, layer, op, width) in enumerate(tens):
        db.execute("INSERT INTO tensors(model, idx, name, layer, op, width) VALUES ('target', ?, ?, ?, ?, ?)",
                   (i, name, layer, op, width))

    words = ["!", "<s>", "</s>", " Once", " upon", " a", " time", ",", " there", " was", " little",
             " girl", " named", " Lily", ".", " She", " loved", " to", " play", " outside", " in",
             " the", " park", " with", " her", " friends", " One", " day", " saw", " big", " red",
             " ball", " and", " wanted", " it", " la"]
    piece = {i: w for i, w in enumerate(words)}
    esc = {20: (400, "\x1b[31mred\x1b[0m"), 21: (401, "\x07"), 22: (402, "\r")}
    for sid, (tid, p) in esc.items():
        piece[tid] = p
    prompt = [1, 3, 4, 5, 6]                 # <s> Once upon a time
    P = len(prompt)
    n_steps = 60 if kind == "clean" else 59
    rnd = random.Random(7)
    gen = []
    story = list(range(7, 35))
    for s in range(n_steps):
        if kind == "collapse" and s >= 9:
            gen.append(0)
        elif kind == "clean" and s in esc:
            gen.append(esc[s][0])
        elif kind == "clean" and 40 <= s <= 42:
            gen.append(35)                   # ' la' x3: a short run, clean
        else:
            gen.append(story[s % len(story)])
    for p, tid in enumerate(prompt):
        db.execute("INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (0, ?, ?, ?, 'prompt')",
                   (p, tid, piece[tid]))
    mags = [base_magnitude(n, op, layer) for (n, layer, op, w) in tens]
    bad_first = {}                           # step -> {slot: (nan, first_idx)}
    if kind == "collapse":
        for s in range(9, n_steps):
            b = {}
            if s == 9:
                b[idx_of["blk.3.ffn_gate"]] = (1, 5)
                b[idx_of["blk.3.ffn_act"]] = (1, 5)
                b[idx_of["blk.3.ffn_down"]] = (dim, 0)
                b[idx_of["blk.3.ffn_resid"]] = (dim, 0)
                for op in OPS:
                    b[idx_of["blk.4." + op]] = (widths(dim, kv, ffn)[op], 0)
            else:
                for op in OPS[4:]:
                    b[idx_of["blk.4." + op]] = (widths(dim, kv, ffn)[op], 0)
            b[idx_of["output_norm"]] = (dim, 0)
            b[idx_of["logits"]] = (vocab, 0)
            bad_first[s] = b
    for s in range(n_steps):
        pos0, n_pos = (0, P) if s == 0 else (P + s - 1, 1)
        db.execute("INSERT INTO steps(step, model, kind, pos0, n_pos, ms) VALUES (?, 'target', ?, ?, ?, ?)",
                   (s, "prefill" if s == 0 else "decode", pos0, n_pos, 0.4 + 0.01 * s))
        stats = []
        bad = bad_first.get(s, {})
        for i, (name, layer, op, width) in enumerate(tens):
            mn, mx, mean, rms = stats_for(mags[i], rnd)
            if kind == "clean" and s == 30 and name == "blk.2.ffn_down":
                mx = mags[i] * 20             # a finite spike: yellow in the grid
            if i in bad and bad[i][0] >= width * n_pos:
                mn = mx = mean = rms = None   # nothing finite
            stats.append((mn, mx, mean, rms))
        db.execute("INSERT INTO tap_blobs(step, stats) VALUES (?, ?)", (s, pack(stats)))
        last = pos0 + n_pos - 1
        for i, (nan, first) in sorted(bad.items()):
            mn, mx, mean, rms = stats[i]
            db.execute("INSERT INTO tap_bad(step, model, idx, nan, pinf, ninf, first_bad_index, first_bad_pos, "
                       "min, max, mean, rms) VALUES (?, 'target', ?, ?, 0, 0, ?, ?, ?, ?, ?, ?)",
                       (s, i, nan, first, last, mn, mx, mean, rms))
        tid = gen[s]
        if bad:
            db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, "
                       "argmax_triton, rule, chosen, entropy, topk_ids, topk_vals) VALUES "
                       "(?, ?, ?, ?, 0, 0, NULL, 0, 0, 0, 'first', 0, NULL, '[]', '[]')", (s, last, vocab, vocab))
            logprob = None
        else:
            others = [t for t in range(3, 36) if t != tid]
            rnd.shuffle(others)
            ids = [tid] + others[:19]
            top = 9 + 3 * rnd.random()
            vals = [top] + sorted((top - 0.5 - 6 * rnd.random() for _ in range(19)), reverse=True)
            lse = math.log(sum(math.exp(v) for v in vals)) + 0.1
            ent = 1.0 + rnd.random()
            db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, "
                       "argmax_triton, rule, chosen, entropy, topk_ids, topk_vals) VALUES "
                       "(?, ?, ?, 0, 0, 0, ?, ?, ?, ?, 'first', ?, ?, ?, ?)",
                       (s, last, vocab, top, tid, tid, tid, tid, ent, json.dumps(ids),
                        json.dumps([round(v, 4) for v in vals])))
            logprob = vals[0] - lse
        db.execute("INSERT INTO tokens(step, pos, token_id, piece, role, logprob, finish_reason) "
                   "VALUES (?, ?, ?, ?, 'gen', ?, ?)",
                   (s, P + s, tid, piece[tid], logprob, "length" if s == n_steps - 1 else None))
    if kind == "collapse":
        cur = db.execute("INSERT INTO events(step, pos, kind, layer, op, tensor, detail) VALUES "
                         "(9, ?, 'first_nonfinite', 3, 'ffn_gate', 'blk.3.ffn_gate', "
                         "'blk.3.ffn_gate: 1 NaN of 172 (index 5) at step 9')", (P + 8,))
        ev = cur.lastrowid
        db.execute("INSERT INTO events(step, pos, kind, detail) VALUES (9, ?, 'nonfinite_logits', "
                   "'logits: 512 NaN of 512')", (P + 8,))
        db.execute("INSERT INTO events(step, pos, kind, detail) VALUES (9, ?, 'argmax_fallthrough', "
                   "'step 9: logits all NaN; rule first -> id 0 (''!''); repeated 50 times')", (P + 8,))
        db.execute("INSERT INTO events(step, pos, kind, detail) VALUES (16, ?, 'token_wall', "
                   "'token 0 (''!'') repeated 8 times in a row from step 9')", (P + 15,))
        frames = "\n".join([
            "#0 0x000055555555a1c4 bt_recorder_observe+0x1a4 (bangtrace)",
            "#1 0x0000555555561e20 bt_engine_forward+0x9d0 (bangtrace)",
            "#2 0x0000555555563a11 bt_generate+0x231 (bangtrace)",
            "#3 0x0000555555557b02 cmd_run+0x6f2 (bangtrace)",
            "#4 0x0000555555556a30 main+0x1c0 (bangtrace)",
        ])
        db.execute("INSERT INTO backtraces(event_id, step, kind, frames) VALUES (?, 9, 'first_nonfinite', ?)",
                   (ev, frames))
    finish_db(db)


def big_trace(out, schema, n_steps, n_layers=30, bad_step=None):
    dim, kv, ffn, vocab = 576, 192, 1536, 49152
    tens = tensor_list(n_layers, dim, kv, ffn, vocab)
    idx_of = {t[0]: i for i, t in enumerate(tens)}
    db = open_db(out, schema)
    db.commit()
    db.isolation_level = None            # explicit BEGIN / COMMIT below
    if bad_step is None:
        bad_step = max(1, n_steps - 20000)
    write_meta(db, {
        "tool_version": "0.1.0 (tests/data-gen/make_trace.py big)", "schema_version": "1", "status": "ok",
        "argv": "bangtrace run -n %d --inject nan@step=%d,layer=17,op=ffn_down --trace big.db" % (n_steps, bad_step),
        "model_path": "SmolLM2-135M-Instruct.Q4_1.gguf", "arch": "llama", "argmax_rule": "first",
        "injections": json.dumps(["nan@step=%d,layer=17,op=ffn_down" % bad_step]),
    })
    for i, (name, layer, op, width) in enumerate(tens):
        db.execute("INSERT INTO tensors(model, idx, name, layer, op, width) VALUES ('target', ?, ?, ?, ?, ?)",
                   (i, name, layer, op, width))
    rnd = random.Random(11)
    mags = [base_magnitude(n, op, layer) for (n, layer, op, w) in tens]
    variants = [pack([stats_for(m, rnd) for m in mags]) for _ in range(64)]
    bad_slots = [idx_of["blk.17.ffn_down"], idx_of["blk.17.ffn_resid"]] + \
                [idx_of["blk.%d.%s" % (l, op)] for l in range(18, n_layers) for op in OPS] + \
                [idx_of["output_norm"], idx_of["logits"]]
    later_slots = [idx_of["blk.18.%s" % op] for op in OPS[4:]] + \
                  [idx_of["blk.%d.%s" % (l, op)] for l in range(19, n_layers) for op in OPS] + \
                  [idx_of["output_norm"], idx_of["logits"]]
    words = [" w%d" % i for i in range(2000)]
    topk = []
    for v in range(64):
        ids = rnd.sample(range(1, 2000), 20)
        vals = sorted((10 - 6 * rnd.random() for _ in range(20)), reverse=True)
        topk.append((ids, json.dumps(ids), json.dumps([round(x, 3) for x in vals]), vals))
    t0 = time.time()
    P = 8
    for p in range(P):
        db.execute("INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (0, ?, ?, ?, 'prompt')",
                   (p, 100 + p, words[100 + p]))
    db.execute("BEGIN")
    for s in range(n_steps):
        pos0, n_pos = (0, P) if s == 0 else (P + s - 1, 1)
        last = pos0 + n_pos - 1
        db.execute("INSERT INTO steps(step, model, kind, pos0, n_pos, ms) VALUES (?, 'target', ?, ?, ?, 2.5)",
                   (s, "prefill" if s == 0 else "decode", pos0, n_pos))
        db.execute("INSERT INTO tap_blobs(step, stats) VALUES (?, ?)", (s, variants[s % 64]))
        if s >= bad_step:
            slots = bad_slots if s == bad_step else later_slots
            db.executemany("INSERT INTO tap_bad(step, model, idx, nan, pinf, ninf, first_bad_index, first_bad_pos) "
                           "VALUES (?, 'target', ?, ?, 0, 0, 0, ?)",
                           [(s, i, tens[i][3] * n_pos, last) for i in slots])
            db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, argmax_first, argmax_torch, "
                       "argmax_triton, rule, chosen, topk_ids, topk_vals) VALUES "
                       "(?, ?, ?, ?, 0, 0, 0, 0, 0, 'first', 0, '[]', '[]')", (s, last, vocab, vocab))
            db.execute("INSERT INTO tokens(step, pos, token_id, piece, role) VALUES (?, ?, 0, '!', 'gen')",
                       (s, P + s))
        else:
            ids, ids_j, vals_j, vals = topk[s % 64]
            tid = ids[0]
            db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, "
                       "argmax_triton, rule, chosen, entropy, topk_ids, topk_vals) VALUES "
                       "(?, ?, ?, 0, 0, 0, ?, ?, ?, ?, 'first', ?, 1.5, ?, ?)",
                       (s, last, vocab, vals[0], tid, tid, tid, tid, ids_j, vals_j))
            db.execute("INSERT INTO tokens(step, pos, token_id, piece, role, logprob) VALUES (?, ?, ?, ?, 'gen', -0.7)",
                       (s, P + s, tid, words[tid]))
        if s % 20000 == 19999:
            db.execute("COMMIT")
            db.execute("BEGIN")
            sys.stderr.write("  %d steps, %.0f s\n" % (s + 1, time.time() - t0))
    db.execute("INSERT INTO events(step, pos, kind, layer, op, tensor, detail) VALUES "
               "(?, ?, 'first_nonfinite', 17, 'ffn_down', 'blk.17.ffn_down', 'blk.17.ffn_down: all NaN')",
               (bad_step, P + bad_step - 1))
    db.execute("COMMIT")
    finish_db(db)


def spec_trace(out, schema, rounds):
    """A greedy self-speculative run (k = 4, first 2 layers as the drafter)."""
    n_layers, dim, kv, ffn, vocab = 5, 64, 32, 172, 512
    K, N_DRAFT = 4, 2
    tens = tensor_list(n_layers, dim, kv, ffn, vocab)
    dtens = tensor_list(N_DRAFT, dim, kv, ffn, vocab)
    didx = {t[0]: i for i, t in enumerate(dtens)}
    db = open_db(out, schema)
    db.commit()
    db.isolation_level = None
    db.execute("BEGIN")
    write_meta(db, {
        "tool_version": "0.1.0 (tests/data-gen/make_trace.py spec)", "schema_version": "1", "status": "ok",
        "argv": "bangtrace run --model stories260K.bin --prompt 'Once upon a time' --spec-k 4 --draft-self 2 --trace %s"
                % os.path.basename(out),
        "model_path": "stories260K.bin", "model_sha256": "0" * 64, "arch": "llama",
        "tokenizer": "tok512.bin (llama2.c)", "sampling": "greedy", "argmax_rule": "first", "seed": "0",
        "injections": "[]", "backend": "cpu",
        "spec_k": str(K), "drafter": "self:%d" % N_DRAFT, "draft_model_path": "", "draft_model_sha256": "",
    })
    for model, tl in (("target", tens), ("draft", dtens)):
        for i, (name, layer, op, width) in enumerate(tl):
            db.execute("INSERT INTO tensors(model, idx, name, layer, op, width) VALUES (?, ?, ?, ?, ?, ?)",
                       (model, i, name, layer, op, width))
    words = ["!", "<s>", "</s>", " Once", " upon", " a", " time", ",", " there", " was", " little",
             " girl", " named", " Lily", ".", " She", " loved", " to", " play", " outside", " in",
             " the", " park", " with", " her", " friends", " One", " day", " saw", " big", " red",
             " ball", " and", " wanted", " it", " la"]
    piece = {i: w for i, w in enumerate(words)}
    STOP = 2
    story = list(range(7, 35))
    prompt = [1, 3, 4, 5, 6]
    P = len(prompt)
    rnd = random.Random(5)
    tmag = [base_magnitude(n, op, layer) for (n, layer, op, w) in tens]
    dmag = [base_magnitude("draft." + n, op, layer) for (n, layer, op, w) in dtens]

    def truth(j):
        return story[j % len(story)]

    def logits_row(step, pos, chosen, nan=False):
        if nan:
            db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, "
                       "argmax_triton, rule, chosen, entropy, topk_ids, topk_vals) VALUES "
                       "(?, ?, ?, ?, 0, 0, NULL, 0, 0, 0, 'first', 0, NULL, '[]', '[]')", (step, pos, vocab, vocab))
            return None
        others = [t for t in range(3, 36) if t != chosen]
        rnd.shuffle(others)
        ids = [chosen] + others[:9]
        top = 9 + 3 * rnd.random()
        vals = [top] + sorted((top - 0.5 - 6 * rnd.random() for _ in range(9)), reverse=True)
        lse = math.log(sum(math.exp(v) for v in vals)) + 0.1
        db.execute("INSERT INTO logits(step, pos, n_vocab, nan, pinf, ninf, max, argmax_first, argmax_torch, "
                   "argmax_triton, rule, chosen, entropy, topk_ids, topk_vals) VALUES "
                   "(?, ?, ?, 0, 0, 0, ?, ?, ?, ?, 'first', ?, 1.2, ?, ?)",
                   (step, pos, vocab, top, chosen, chosen, chosen, chosen, json.dumps(ids),
                    json.dumps([round(v, 4) for v in vals])))
        return vals[0] - lse

    def step_row(step, model, kind, pos0, n_pos, bad=None):
        db.execute("INSERT INTO steps(step, model, kind, pos0, n_pos, ms) VALUES (?, ?, ?, ?, ?, ?)",
                   (step, model, kind, pos0, n_pos, 0.3 if model == "draft" else 0.9))
        tl, mags = (dtens, dmag) if model == "draft" else (tens, tmag)
        stats = []
        for i, (name, layer, op, width) in enumerate(tl):
            st = stats_for(mags[i], rnd)
            if bad and i in bad and bad[i] >= width * n_pos:
                st = (None, None, None, None)
            stats.append(st)
        db.execute("INSERT INTO tap_blobs(step, stats) VALUES (?, ?)", (step, pack(stats)))
        for i, nan in sorted((bad or {}).items()):
            mn, mx, mean, rms = stats[i]
            db.execute("INSERT INTO tap_bad(step, model, idx, nan, pinf, ninf, first_bad_index, first_bad_pos, "
                       "min, max, mean, rms) VALUES (?, ?, ?, ?, 0, 0, 0, ?, ?, ?, ?, ?)",
                       (step, model, i, nan, pos0 + n_pos - 1, mn, mx, mean, rms))

    def token(step, pos, tid, role, logprob=None, finish=None):
        db.execute("INSERT INTO tokens(step, pos, token_id, piece, role, logprob, finish_reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (step, pos, tid, piece[tid], role, logprob, finish))

    # step 0: the target's prefill; it produces the first output token
    for p, tid in enumerate(prompt):
        token(0, p, tid, "prompt")
    step_row(0, "target", "prefill", 0, P)
    lp = logits_row(0, P - 1, truth(0))
    token(0, P, truth(0), "gen", lp)
    n_out = 1                       # output tokens so far; the next one is truth(n_out)
    step = 1
    nan_round = 33 if rounds > 36 else -1
    rates = []
    collapse_done = False
    high_seen = False
    for r in range(rounds):
        last = r == rounds - 1
        if last:
            m, stop_at = 2, 1       # drafts: truth, </s>, then two after the stop
        elif 20 <= r < 30:
            m, stop_at = (0 if r % 3 else 1), -1
        else:
            m, stop_at = [4, 4, 3, 4, 2, 4][r % 6], -1
        if r == nan_round:
            m = 1                   # the draft row for draft #1 is NaN: '!' drafted, rejected
        base = P + n_out            # position of the first drafted token
        drafts, dsteps, finite = [], [], []
        for i in range(K):
            if stop_at >= 0:
                tid = truth(n_out + i) if i < stop_at else STOP if i == stop_at else truth(n_out + i + 3)
            elif i < m:
                tid = truth(n_out + i)
            elif i == m:
                tid = 0 if r == nan_round else truth(n_out + i + 5)
            else:
                tid = truth(n_out + i + 7)
            bad = None
            fin = True
            if r == nan_round and i == m:
                fin = False
                bad = {didx["blk.1.ffn_down"]: dim, didx["blk.1.ffn_resid"]: dim,
                       didx["output_norm"]: dim, didx["logits"]: vocab}
            n_pos = 2 if i == 0 and r > 0 else 1     # catch-up: the last verified token too
            step_row(step, "draft", "draft", base + i - n_pos, n_pos, bad)
            logits_row(step, base + i - 1, tid, nan=not fin)
            token(step, base + i, tid, "draft")
            drafts.append(tid)
            dsteps.append(step)
            finite.append(fin)
            step += 1
        v = step
        step += 1
        step_row(v, "target", "verify", base - 1, K + 1)
        acc = m if stop_at < 0 else stop_at + 1
        for i in range(K):
            if stop_at >= 0:
                ok, reason = (i <= stop_at), ("match" if i <= stop_at else "after_stop")
                tgt = drafts[i] if i <= stop_at else None
            elif i < m:
                ok, reason, tgt = True, "match", drafts[i]
            elif i == m:
                ok, reason, tgt = False, "mismatch", truth(n_out + i)
            else:
                ok, reason, tgt = False, "after_reject", None
            tp = (0.85 + 0.1 * rnd.random()) if ok else (0.01 + 0.03 * rnd.random()) if reason == "mismatch" else None
            db.execute("INSERT INTO spec_trail(step, draft_idx, draft_pos, draft_step, draft_token, draft_prob, draft_finite, "
                       "target_token, target_prob, accepted, reason) VALUES (?, ?, ?, ?, ?, 1.0, ?, ?, ?, ?, ?)",
                       (v, i, base + i, dsteps[i], drafts[i], 1 if finite[i] else 0, tgt, tp, 1 if ok else 0, reason))
        if stop_at >= 0:
            bonus, kind = None, "none"
        else:
            bonus, kind = truth(n_out + m), ("bonus" if m == K else "correction")
        db.execute("INSERT INTO spec_steps(step, drafter, k, accepted, bonus_token, bonus_kind) VALUES (?, ?, ?, ?, ?, ?)",
                   (v, "self:%d" % N_DRAFT, K, acc, bonus, kind))
        # target rows used: one per accepted draft plus the bonus row
        used = acc if bonus is None else acc + 1
        for i in range(used):
            pos = base - 1 + i
            chosen = drafts[i] if i < acc else bonus
            lp = logits_row(v, pos, chosen)
            if i < acc:
                fin = "stop" if (stop_at >= 0 and i == stop_at) else None
                token(v, base + i, drafts[i], "gen", lp, fin)
            else:
                token(v, base + i, bonus, "bonus", lp)
        n_out += used
        rates.append(acc / K)
        w = rates[-8:]
        rate = sum(w) / len(w)
        if rate >= 0.6 and len(w) == 8:
            high_seen = True
        if high_seen and not collapse_done and len(w) == 8 and rate < 0.25:
            collapse_done = True
            db.execute("INSERT INTO events(step, pos, kind, detail) VALUES (?, ?, 'accept_collapse', ?)",
                       (v, base, "acceptance over the last 8 verify steps fell to %.2f (was >= 0.60)" % rate))
        if r == nan_round:
            cur = db.execute("INSERT INTO events(step, pos, kind, layer, op, tensor, detail) VALUES "
                             "(?, ?, 'first_nonfinite', 1, 'ffn_down', 'blk.1.ffn_down', ?)",
                             (dsteps[m], base + m - 1, "draft model: blk.1.ffn_down: 64 NaN of 64 at step %d" % dsteps[m]))
            db.execute("INSERT INTO backtraces(event_id, step, kind, frames) VALUES (?, ?, 'first_nonfinite', ?)",
                       (cur.lastrowid, dsteps[m], "#0 0x0000555555561e20 bt_engine_forward+0x9d0 (bangtrace)\n"
                                                  "#1 0x0000555555563a11 bt_spec_decode+0x231 (bangtrace)"))
        if last:
            db.execute("INSERT INTO events(step, pos, kind, detail) VALUES (?, ?, 'post_stop_draft', ?)",
                       (v, base + stop_at, "2 drafted tokens followed the accepted stop token; none reached the output"))
    db.execute("COMMIT")
    finish_db(db)


def foreign(out):
    if os.path.exists(out):
        os.remove(out)
    db = sqlite3.connect(out)
    db.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO customers(name) VALUES ('x')")
    db.commit()
    db.close()


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    kind, out = argv[1], argv[2]
    steps = 300000
    layers = 30
    bad = None
    here = os.path.dirname(os.path.abspath(__file__))
    schema = os.path.join(here, "..", "..", "traces", "schema.sql")
    i = 3
    while i < len(argv):
        if argv[i] == "--steps":
            steps = int(argv[i + 1]); i += 2
        elif argv[i] == "--schema":
            schema = argv[i + 1]; i += 2
        elif argv[i] == "--bad-step":
            bad = int(argv[i + 1]); i += 2
        elif argv[i] == "--layers":
            layers = int(argv[i + 1]); i += 2
        else:
            sys.stderr.write("make_trace.py: unknown argument %s\n" % argv[i]); return 2
    if kind in ("clean", "collapse"):
        small_trace(kind, out, schema)
    elif kind == "big":
        big_trace(out, schema, steps, max(19, layers), bad)
    elif kind == "spec":
        spec_trace(out, schema, steps if steps != 300000 else 41)
    elif kind == "foreign":
        foreign(out)
    else:
        sys.stderr.write("make_trace.py: unknown kind %s\n" % kind)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
