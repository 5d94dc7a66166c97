#!/usr/bin/env python3
"""make_spec_trace.py - a speculative-decoding trace built with plain SQL, laid
out as `bangtrace run --spec-k K --draft-... --trace` records it (the issue 5
contract), for the bisect/report/export tests.

Usage: make_spec_trace.py OUT [--k K] [--drafter self:2|model|ngram:3]
                              [--tokens N] [--accept P] [--seed S]
                              [--inject target|draft:STEP:LAYER:OP]
                              [--stop-at N] [--schema traces/schema.sql]

A stories260K-shaped model (5 layers, dim 64, ffn 172, vocab 512) decodes
greedily: the target's next token is a fixed function of the context, the
drafter agrees with it with probability P. Steps are global: step 0 is the
target prefill (it emits the first token), then for each round the drafter's
forwards (model 'draft', kind 'draft', one per drafted token; none for an
n-gram drafter) and the target's verify (kind 'verify', pos0 = position of
the last accepted token, n_pos = k + 1).

--inject target:S:L:OP puts a NaN into the target's blk.L.OP at step S (a
target step): every later tensor of that forward is NaN, the logits too;
later target passes read it back from the KV cache (first bad tensor
blk.L+1.attn_ctx), so the target's argmax (rule first) is id 0 from then on
and every drafted token is rejected. --inject draft:S:L:OP does the same to
a draft pass: the drafter proposes id 0 from then on, the target rejects it
and the output is the clean one.

--stop-at N: the N-th output token is the end-of-generation id 2; drafted
tokens after it are recorded (reason after_stop) and a post_stop_draft event
says none reached the output.
"""
import argparse
import json
import math
import os
import random
import sqlite3
import struct

APP_ID = 0x42545243
NAN_BF16 = 0x7FC0
OPS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_ctx", "attn_output", "attn_resid",
       "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "ffn_resid"]
N_LAYERS, DIM, KV, FFN, VOCAB = 5, 64, 64, 172, 512
EOS = 2


def bf16(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NAN_BF16
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def tensor_list(n_layers):
    w = {"attn_norm": DIM, "attn_q": DIM, "attn_k": KV, "attn_v": KV, "attn_ctx": DIM, "attn_output": DIM,
         "attn_resid": DIM, "ffn_norm": DIM, "ffn_gate": FFN, "ffn_up": FFN, "ffn_act": FFN, "ffn_down": DIM,
         "ffn_resid": DIM}
    t = [("token_embd", None, "token_embd", DIM)]
    for layer in range(n_layers):
        for op in OPS:
            t.append(("blk.%d.%s" % (layer, op), layer, op, w[op]))
    t.append(("output_norm", None, "output_norm", DIM))
    t.append(("logits", None, "logits", VOCAB))
    return t


def target_next(ctx):
    """The clean target's greedy choice after context ctx (never EOS)."""
    a, b = ctx[-1], len(ctx)
    return (a * 37 + b * 11 + 5) % (VOCAB - 3) + 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--drafter", default="self:2")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--accept", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inject", default=None)
    ap.add_argument("--stop-at", type=int, default=None)
    ap.add_argument("--schema", default=os.path.join(os.path.dirname(__file__), "..", "..", "traces", "schema.sql"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    inj = None
    if a.inject:
        m, s, l, op = a.inject.split(":")
        inj = (m, int(s), int(l), op)

    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(a.out + suffix):
            os.remove(a.out + suffix)
    db = sqlite3.connect(a.out)
    db.execute("PRAGMA journal_mode=OFF")
    with open(a.schema) as f:
        db.executescript(f.read())
    db.execute("PRAGMA application_id=%d" % APP_ID)
    db.execute("PRAGMA user_version=1")

    ngram = a.drafter.startswith("ngram:")
    draft_layers = int(a.drafter[5:]) if a.drafter.startswith("self:") else N_LAYERS
    tens = {"target": tensor_list(N_LAYERS)}
    if not ngram:
        tens["draft"] = tensor_list(draft_layers)
    for model, tl in tens.items():
        for i, (name, layer, op, width) in enumerate(tl):
            db.execute("INSERT INTO tensors VALUES (?,?,?,?,?,?)", (model, i, name, layer, op, width))

    prompt = [1, 400, 33, 90, 12, 7]
    argv = ["bangtrace", "run", "--model", "stories260K.bin", "--prompt", "Once upon a time", "-n", str(a.tokens),
            "--spec-k", str(a.k)]
    argv += (["--draft-ngram", a.drafter[6:]] if ngram else ["--draft-self", a.drafter[5:]]
             if a.drafter.startswith("self:") else ["--draft", "draft.bin"])
    if a.inject:
        argv += ["--inject", "nan@step=%d,layer=%d,op=%s,model=%s" % (inj[1], inj[2], inj[3], inj[0])]
    argv += ["--trace", a.out]
    meta = {"schema_version": "1", "tool_version": "0.1.0", "model_name": "stories260K", "model_path": "stories260K.bin",
            "model_sha256": "0" * 64, "n_vocab": str(VOCAB), "n_layers": str(N_LAYERS), "argmax_rule": "first",
            "sampling": "temperature=0", "threads": "2", "taps": "all", "logits": "snapshot",
            "prompt_text": "Once upon a time", "argv": json.dumps(argv), "status": "complete",
            "spec_k": str(a.k), "drafter": a.drafter,
            "draft_model_path": "" if ngram or a.drafter.startswith("self:") else "draft.bin",
            "injections": json.dumps([a.inject] if a.inject else [])}
    for k, v in meta.items():
        db.execute("INSERT INTO meta VALUES (?,?)", (k, v))

    seq = [0]
    tok_seq = [0]
    state = {"target_bad": False, "draft_bad": False}

    def add_token(step, pos, tid, role, finish=None):
        db.execute("INSERT INTO tokens VALUES (?,?,?,?,?,?,?,?)",
                   (tok_seq[0], step, pos, tid, "t%d" % tid, role, -0.5, finish))
        tok_seq[0] += 1

    def record_step(model, kind, pos0, n_pos, logits_rows):
        """One forward: steps, blob, tap_bad, logit snapshots. Returns (step, bad)."""
        step = seq[0]
        seq[0] += 1
        db.execute("INSERT INTO steps VALUES (?,?,?,?,?,?)", (step, model, kind, pos0, n_pos, 1.0))
        tl = tens[model]
        bad_from = None
        key = "target_bad" if model == "target" else "draft_bad"
        if inj and inj[0] == model and inj[1] == step:
            bad_from = next(i for i, t in enumerate(tl) if t[1] == inj[2] and t[2] == inj[3])
            # only the layers after it cache bad keys/values: in the last
            # layer the fault stays in this forward
            state[key] = any(t[0] == "blk.%d.attn_ctx" % (inj[2] + 1) for t in tl)
        elif state[key]:
            # the KV cache carries it: the next layer's attention context first
            name = "blk.%d.attn_ctx" % (inj[2] + 1)
            bad_from = next(i for i, t in enumerate(tl) if t[0] == name)
        blob = bytearray()
        for i, (name, layer, op, width) in enumerate(tl):
            if bad_from is not None and i >= bad_from:
                blob += struct.pack("<4H", NAN_BF16, NAN_BF16, NAN_BF16, NAN_BF16)
                n = n_pos * width
                nn = 1 if i == bad_from and step == inj[1] else n
                db.execute("INSERT INTO tap_bad VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                           (step, model, i, nn, 0, 0, 5 if i == bad_from else 0, pos0, None, None, None, None))
            else:
                v = 0.5 + rng.random() * 0.1
                blob += struct.pack("<4H", bf16(-v * 3), bf16(v * 3), bf16(0.01), bf16(v))
        db.execute("INSERT INTO tap_blobs VALUES (?,?)", (step, bytes(blob)))
        bad = bad_from is not None
        for (pos, chosen) in logits_rows:
            if bad:
                db.execute("INSERT INTO logits(step,pos,n_vocab,nan,pinf,ninf,max,argmax_first,argmax_torch,argmax_triton,"
                           "rule,chosen,entropy,topk_ids,topk_vals) VALUES (?,?,?,?,0,0,NULL,0,0,512,'first',?,NULL,'[]','[]')",
                           (step, pos, VOCAB, VOCAB, chosen))
            else:
                db.execute("INSERT INTO logits(step,pos,n_vocab,nan,pinf,ninf,max,argmax_first,argmax_torch,argmax_triton,"
                           "rule,chosen,entropy,topk_ids,topk_vals) VALUES (?,?,?,0,0,0,9.5,?,?,?,'first',?,1.2,?,?)",
                           (step, pos, VOCAB, chosen, chosen, chosen, chosen, json.dumps([chosen, 7, 9]),
                            json.dumps([9.5, 3.0, 2.5])))
        if bad and step == inj[1]:
            t = tl[bad_from]
            db.execute("INSERT INTO events(step,pos,kind,layer,op,tensor,detail) VALUES (?,?,?,?,?,?,?)",
                       (step, pos0, "first_nonfinite", t[1], t[2], t[0], "1 NaN in %s (%s pass)" % (t[0], model)))
        if bad:
            db.execute("INSERT INTO events(step,pos,kind,layer,op,tensor,detail) VALUES (?,?,?,NULL,NULL,'logits',?)",
                       (step, logits_rows[-1][0] if logits_rows else pos0, "nonfinite_logits", "logits all NaN"))
        return step, bad

    # prefill: the target reads the prompt and emits the first token
    ctx = list(prompt)
    for i, t in enumerate(prompt):
        add_token(0, i, t, "prompt")
    first = target_next(ctx)
    if inj and inj[0] == "target" and inj[1] == 0:
        first = 0
    step0, _ = record_step("target", "prefill", 0, len(prompt), [(len(prompt) - 1, first)])
    ctx.append(first)
    add_token(step0, len(ctx) - 1, first, "gen")
    emitted = 1
    draft_valid = 0                   # positions whose draft KV matches the context
    collapse_windows = []
    while emitted < a.tokens:
        k = min(a.k, a.tokens - emitted) if a.tokens - emitted > 0 else 1
        last_pos = len(ctx) - 1
        # the drafter proposes k tokens
        drafts = []
        dctx = list(ctx)
        for j in range(k):
            want = target_next(dctx)
            if ngram:
                tok, dstep, finite = (want if rng.random() < a.accept else (want % 500) + 4), None, True
            else:
                # the first forward catches up on everything since the draft's
                # KV cache was last valid (at first: the prompt, its prefill)
                n_in = len(dctx) - draft_valid if j == 0 else 1
                pos0 = draft_valid if j == 0 else len(dctx) - 1
                guess = want if rng.random() < a.accept else (want % 500) + 4
                dstep = seq[0]
                will_bad = state["draft_bad"] or (inj is not None and inj[0] == "draft" and inj[1] == dstep)
                tok = 0 if will_bad else guess
                dstep, finite_bad = record_step("draft", "draft", pos0, n_in, [(len(dctx) - 1, tok)])
                finite = not finite_bad
                add_token(dstep, len(dctx), tok, "draft")
            drafts.append((tok, dstep, finite))
            dctx.append(tok)
        # the target verifies k + 1 positions from the last accepted token
        vstep = seq[0]
        will_bad = state["target_bad"] or (inj and inj[0] == "target" and inj[1] == vstep)
        picks = []
        vctx = list(ctx)
        for j in range(k + 1):
            picks.append(0 if will_bad else target_next(vctx))
            if j < k:
                vctx.append(drafts[j][0])
        if a.stop_at is not None:
            for j in range(k + 1):
                if emitted + j == a.stop_at:
                    picks[j] = EOS
        rows = []
        acc = 0
        while acc < k and drafts[acc][0] == picks[acc]:
            acc += 1
        stop_idx = None
        for j in range(acc + 1):
            if picks[j] == EOS:
                stop_idx = j
                break
        used = acc + 1 if stop_idx is None else stop_idx + 1
        for j in range(used):
            rows.append((last_pos + j, picks[j]))
        vstep, _ = record_step("target", "verify", last_pos, k + 1, rows)
        for j in range(k):
            tok, dstep, finite = drafts[j]
            if stop_idx is not None and j > stop_idx:
                reason, accepted = "after_stop", 0
            elif j < acc:
                reason, accepted = "match", 1
            elif j == acc:
                reason, accepted = "mismatch", 0
            else:
                reason, accepted = "after_reject", 0
            db.execute("INSERT INTO spec_trail VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       (vstep, j, last_pos + 1 + j, dstep, tok, 1.0, 1 if finite else 0,
                        picks[j] if j <= acc else None, 0.9 if accepted else 0.05, accepted, reason))
        if stop_idx is not None:
            # the stop token is an accepted draft (gen) or the target's own pick (bonus)
            for j in range(stop_idx):
                ctx.append(drafts[j][0])
                add_token(vstep, len(ctx) - 1, drafts[j][0], "gen")
            ctx.append(EOS)
            role = "gen" if stop_idx < acc else "bonus"
            add_token(vstep, len(ctx) - 1, EOS, role, "stop")
            n_acc = stop_idx + (1 if role == "gen" else 0)
            db.execute("INSERT INTO spec_steps VALUES (?,?,?,?,?,?)",
                       (vstep, a.drafter, k, n_acc, None if role == "gen" else EOS, "none" if role == "gen" else "correction"))
            n_post = k - stop_idx - 1
            if n_post > 0:
                db.execute("INSERT INTO events(step,pos,kind,detail) VALUES (?,?,?,?)",
                           (vstep, len(ctx), "post_stop_draft",
                            "the drafter proposed %d tokens after the accepted stop token; none reached the output" % n_post))
            emitted += stop_idx + 1
            break
        draft_valid = len(ctx) + min(acc, k - 1)
        for j in range(acc):
            ctx.append(drafts[j][0])
            add_token(vstep, len(ctx) - 1, drafts[j][0], "gen")
        bonus = picks[acc]
        ctx.append(bonus)
        add_token(vstep, len(ctx) - 1, bonus, "bonus", "length" if emitted + acc + 1 >= a.tokens else None)
        db.execute("INSERT INTO spec_steps VALUES (?,?,?,?,?,?)",
                   (vstep, a.drafter, k, acc, bonus, "bonus" if acc == k else "correction"))
        emitted += acc + 1
        collapse_windows.append((vstep, acc, k))
        if len(collapse_windows) >= 16:
            w0 = collapse_windows[-16:-8]
            w1 = collapse_windows[-8:]
            r0 = sum(x[1] for x in w0) / max(1, sum(x[2] for x in w0))
            r1 = sum(x[1] for x in w1) / max(1, sum(x[2] for x in w1))
            if r0 >= 0.6 and r1 < 0.25 and not db.execute("SELECT 1 FROM events WHERE kind='accept_collapse'").fetchone():
                db.execute("INSERT INTO events(step,kind,detail) VALUES (?,?,?)",
                           (vstep, "accept_collapse", "acceptance over 8 verify steps fell to %.2f after %.2f" % (r1, r0)))
    # the target's wall of id 0 after a target NaN
    if state["target_bad"]:
        first0 = db.execute("SELECT min(step), min(pos) FROM tokens WHERE role IN ('gen','bonus') AND token_id = 0").fetchone()
        n0 = db.execute("SELECT count(*) FROM tokens WHERE role IN ('gen','bonus') AND token_id = 0").fetchone()[0]
        if n0 >= 8:
            db.execute("INSERT INTO events(step,pos,kind,detail) VALUES (?,?,?,?)",
                       (first0[0], first0[1], "token_wall", "token 0 ('t0') repeated %d times" % n0))
    db.commit()
    db.close()


if __name__ == "__main__":
    main()
