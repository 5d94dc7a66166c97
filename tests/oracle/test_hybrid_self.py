#!/usr/bin/env python3
"""test_hybrid_self.py - the tiny hybrid models and the qwen35 oracle checked
on their own (no bangtrace, no llama.cpp needed):

  1. tools/make-tiny-hybrid.py is deterministic: the same --seed writes the
     same GGUF bytes, another seed other weights; the GGUF has the tensors
     and keys llama.cpp's qwen35 loader reads (ssm_a, ssm_dt.bias,
     ssm_conv1d [kernel x channels], attn_qkv/attn_gate on GDN layers, the
     doubled attn_q on attention layers, the blk.4.nextn.* block, and
     full_attention_interval, ssm.*, rope.dimension_sections,
     nextn_predict_layers);
  2. the HF folder of the same seed, read by the oracle through its own
     conversion, gives the GGUF's tensors (every named tensor within 1e-6),
     for qwen35, qwen35moe and qwen3next;
  3. the recurrence carries state: the prompt in one forward equals 5 ids
     then one id per forward, row for row, on every named tensor (1e-9),
     and the final ssm_state / ssm_conv_state agree; a state stored in bf16
     (f16, f32) moves blk.0.ssm_core by more than 1e-4 and less than 0.2
     (f16 at least 4x less, f32 under 1e-5); the oracle's MTP block
     run over the rows at once equals the same rows one at a time (its own
     KV cache), and its logits are finite and not the trunk's;
  4. the delta rule: blk.0.ssm_core equals an independent evaluation of the
     recurrence in its matrix form S_t = exp(g_t) (I - b_t k_t k_t^T)
     S_{t-1} + b_t k_t v_t^T (1e-9), and the final ssm_state equals that S;
  5. test_hybrid_forward.py passes a correct engine (fake_bangtrace_hybrid.py),
     SKIPs (77, "bangtrace does not run qwen35 yet") when the engine refuses
     the architecture, and fails naming the tensor for planted bugs (grouped
     instead of tiled key heads -> blk.0.ssm_core; a perturbed
     blk.2.ssm_state; a missing blk.0.ssm_conv_state);
  6. bad input: ref_hybrid.py on a non-hybrid GGUF and make-tiny-hybrid.py
     over a file it did not write, or with --layers 0, exit 2 with one line
     naming the problem, and the file is left as it was.

Exit 0 pass, 1 fail, 77 skip (numpy, gguf or the shared vocabulary missing)."""

import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import hybrid_common as hc  # noqa: E402

FAILS = []


def expect(cond, what):
    hc.say("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)
    return cond


def maxdiff(a, b):
    import numpy as np
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def check_files(tmp):
    import numpy as np
    a, b, c = (os.path.join(tmp, n) for n in ("a.gguf", "b.gguf", "c.gguf"))
    hc.make(a, seed=7)
    hc.make(b, seed=7)
    hc.make(c, seed=8)
    ra, rb, rc = (open(p, "rb").read() for p in (a, b, c))
    expect(ra == rb, "same --seed, same GGUF bytes (%d bytes)" % len(ra))
    expect(ra != rc, "another --seed, another GGUF")
    import ref_hybrid as rh
    r = rh._FastReader(a)       # shapes and scalar keys (not the vocabulary)
    t = {x.name: [int(n) for n in x.shape] for x in r.tensors}
    want = {"blk.0.ssm_a": [4], "blk.0.ssm_dt.bias": [4], "blk.0.ssm_conv1d.weight": [4, 128],
            "blk.0.attn_qkv.weight": [64, 128], "blk.0.attn_gate.weight": [64, 64],
            "blk.0.ssm_beta.weight": [64, 4], "blk.0.ssm_alpha.weight": [64, 4], "blk.0.ssm_norm.weight": [16],
            "blk.0.ssm_out.weight": [64, 64], "blk.1.attn_q.weight": [64, 128], "blk.1.attn_k.weight": [64, 32],
            "blk.1.attn_q_norm.weight": [16], "blk.1.post_attention_norm.weight": [64],
            "blk.4.nextn.eh_proj.weight": [128, 64], "blk.4.nextn.enorm.weight": [64],
            "blk.4.nextn.hnorm.weight": [64], "blk.4.attn_q.weight": [64, 128]}
    bad = ["%s %s (want %s)" % (n, t.get(n), s) for n, s in want.items() if t.get(n) != s]
    expect(not bad, "GGUF tensors and ggml shapes as llama.cpp's qwen35 loader reads them %s" % bad[:3])
    expect("blk.0.attn_q.weight" not in t and "blk.1.attn_qkv.weight" not in t,
           "GDN layers have no attn_q, attention layers no attn_qkv")
    f = lambda k: r.fields[k].contents() if k in r.fields else None  # noqa: E731
    keys = {"general.architecture": "qwen35", "qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1,
            "qwen35.full_attention_interval": 2, "qwen35.ssm.conv_kernel": 4, "qwen35.ssm.state_size": 16,
            "qwen35.ssm.group_count": 2, "qwen35.ssm.time_step_rank": 4, "qwen35.ssm.inner_size": 64,
            "qwen35.rope.dimension_count": 8, "qwen35.rope.dimension_sections": [2, 1, 1, 0],
            "qwen35.attention.head_count_kv": 2, "tokenizer.ggml.model": "gpt2"}
    badk = ["%s=%r" % (k, f(k)) for k, v in keys.items() if f(k) != v]
    expect(not badk, "GGUF keys as llama.cpp's qwen35 loader reads them %s" % badk[:3])
    ssm_a = np.asarray([x for x in r.tensors if x.name == "blk.0.ssm_a"][0].data)
    expect(bool(np.all(ssm_a < 0)), "ssm_a = -exp(A_log) is negative")
    return a


def check_hf(tmp, path):
    import ref_hybrid as rh
    hf = os.path.join(tmp, "hf")
    hc.make(hf, "hf", seed=7)
    expect(all(os.path.isfile(os.path.join(hf, n)) for n in ("config.json", "model.safetensors", "tokenizer.json")),
           "HF folder has config.json, model.safetensors, tokenizer.json")
    ids = hc.PROMPTS[0]
    g, h = rh.forward(rh.load(path), ids), rh.forward(rh.load(hf), ids)
    worst = max((maxdiff(g[n], h[n]), n) for n in g)
    expect(set(g) == set(h) and worst[0] <= 1e-6,
           "HF folder = GGUF through the oracle: %d tensors, worst %.2e (%s)" % (len(g), worst[0], worst[1]))
    for arch, what in (("qwen35moe", "fused experts"), ("qwen3next", "in_proj_qkvz, in_proj_ba, experts apart")):
        gp, hp = os.path.join(tmp, arch + ".gguf"), os.path.join(tmp, arch + "-hf")
        hc.make(gp, seed=4, arch=arch)
        hc.make(hp, "hf", seed=4, arch=arch)
        g, h = rh.forward(rh.load(gp), ids), rh.forward(rh.load(hp), ids)
        worst = max((maxdiff(g[n], h[n]), n) for n in g)
        expect(set(g) == set(h) and worst[0] <= 1e-6 and "blk.0.ffn_shexp_out" in g,
               "%s HF folder (%s) = GGUF through the oracle: %d tensors, worst %.2e (%s)"
               % (arch, what, len(g), worst[0], worst[1]))


def check_state(path):
    import numpy as np
    import ref_hybrid as rh
    m = rh.load(path)
    ids = hc.PROMPTS[0]
    whole = rh.forward(m, ids)
    st = rh.State(m)
    parts = [rh.forward(m, ids[:5], st)] + [rh.forward(m, [i], st) for i in ids[5:]]
    worst = (0.0, "-")
    for n, v in whole.items():
        if n.split(".")[-1] in rh.STATE_OPS:
            got = parts[-1][n]
        else:
            got = np.concatenate([p[n] for p in parts])
        worst = max(worst, (maxdiff(v, got), n))
    expect(worst[0] <= 1e-9, "one forward = 5 ids then 1 by 1, every tensor and the final states (worst %.2e, %s)"
           % worst)
    expect(whole["blk.0.ssm_state"].shape == (4 * 16, 16) and whole["blk.0.ssm_conv_state"].shape == (3, 128),
           "ssm_state is [nv*dk, dv] = [64, 16], ssm_conv_state [kernel-1, channels] = [3, 128]")
    expect(float(np.abs(whole["blk.0.ssm_state"]).max()) > 0.1, "the state is not ~0 after the prompt")
    # a state kept in bf16 / f16 (the numerics profiles' state=bf16|f16): it
    # leaves the f64 computation by about its mantissa, f16 less than bf16
    dev = {}
    for sd in ("bf16", "f16", "f32"):
        o = rh.forward(m, ids, rh.State(m, state_dtype=sd))
        dev[sd] = maxdiff(o["blk.0.ssm_core"], whole["blk.0.ssm_core"])
    expect(1e-4 < dev["bf16"] < 0.2 and dev["f16"] < dev["bf16"] / 4 and dev["f32"] < 1e-5,
           "state kept in bf16 / f16 / f32: blk.0.ssm_core off by %.2e / %.2e / %.2e" % (dev["bf16"], dev["f16"],
                                                                                       dev["f32"]))
    # the MTP block: all rows at once = one row at a time
    nxt = ids[1:] + [ids[0]]
    h = whole["output_norm"]
    a = rh.mtp(m, h, nxt, rh.State(m), pos0=0)
    st2 = rh.State(m)
    b = [rh.mtp(m, h[t:t + 1], nxt[t:t + 1], st2, pos0=t) for t in range(len(ids))]
    w = max((maxdiff(a[n], np.concatenate([x[n] for x in b])), n) for n in a)
    expect(w[0] <= 1e-9, "MTP block: all rows at once = one at a time with its KV cache (worst %.2e, %s)" % w)
    ml = a["mtp_logits"]
    expect(bool(np.all(np.isfinite(ml))) and maxdiff(ml, whole["logits"]) > 0.1 and ml.shape == whole["logits"].shape,
           "MTP logits finite, [T, n_vocab], not the trunk's")
    return m, whole


def check_delta_rule(m, whole):
    """The recurrence in matrix form, written apart from ref_hybrid's loop."""
    import numpy as np
    c = m.cfg
    nk, nv, dk = c["n_k_heads"], c["n_v_heads"], c["head_k_dim"]
    q = whole["blk.0.ssm_q"].reshape(-1, nk, dk)
    k = whole["blk.0.ssm_k"].reshape(-1, nk, dk)
    v = whole["blk.0.ssm_v"].reshape(-1, nv, c["head_v_dim"])
    g, b = whole["blk.0.ssm_decay"], whole["blk.0.ssm_beta"]
    T = q.shape[0]
    out = np.zeros((T, nv, c["head_v_dim"]))
    states = []
    for j in range(nv):
        S = np.zeros((dk, c["head_v_dim"]))
        kk, qq = k[:, j % nk], q[:, j % nk]
        for t in range(T):
            kt = kk[t][:, None]
            S = np.exp(g[t, j]) * (np.eye(dk) - b[t, j] * kt @ kt.T) @ S + b[t, j] * kt @ v[t, j][None, :]
            out[t, j] = S.T @ qq[t] / np.sqrt(dk)
        states.append(S)
    expect(maxdiff(out.reshape(T, -1), whole["blk.0.ssm_core"]) <= 1e-9,
           "blk.0.ssm_core = the delta rule in matrix form (%.2e)" % maxdiff(out.reshape(T, -1), whole["blk.0.ssm_core"]))
    expect(maxdiff(np.concatenate(states), whole["blk.0.ssm_state"]) <= 1e-9,
           "blk.0.ssm_state = the final S of each value head, rows h*dk + r")


def run_forward_test(tmp, bug, model):
    fake = os.path.join(tmp, "fakebt")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (os.environ.get("PYTHON3") or sys.executable,
                                                   os.path.join(HERE, "fake_bangtrace_hybrid.py")))
    os.chmod(fake, 0o755)
    env = dict(os.environ, BANGTRACE=fake, FAKE_BT_BUG=bug, BT_HYBRID_QUICK="1", BT_HYBRID_MODEL=model)
    p = subprocess.run([os.environ.get("PYTHON3") or sys.executable, os.path.join(HERE, "test_hybrid_forward.py")],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return p.returncode, p.stdout.decode(errors="replace")


def check_forward_test(tmp):
    model = os.path.join(tmp, "fwd.gguf")
    hc.make(model, seed=1)
    rc, out = run_forward_test(tmp, "", model)
    expect(rc == 0, "test_hybrid_forward.py passes a correct engine (exit %d)" % rc)
    if rc != 0:
        hc.say(out[-1500:])
    rc, out = run_forward_test(tmp, "refuse", model)
    expect(rc == 77 and "bangtrace does not run qwen35 yet" in out,
           "test_hybrid_forward.py SKIPs while the engine refuses qwen35 (exit %d)" % rc)
    for bug, needle in (("heads", "first tensor over tolerance: blk.0.ssm_core"),
                        ("state", "first tensor over tolerance: blk.2.ssm_state"),
                        ("drop_conv", "problem: blk.0.ssm_conv_state: missing from the dump")):
        rc, out = run_forward_test(tmp, bug, model)
        expect(rc == 1 and needle in out, "planted bug %s: test_hybrid_forward.py fails with '%s' (exit %d)"
               % (bug, needle, rc))


def check_bad_input(tmp):
    py = os.environ.get("PYTHON3") or sys.executable
    sys.path.insert(0, HERE)
    import make_random_gguf
    llama = os.path.join(tmp, "llama.gguf")
    make_random_gguf.make(llama)
    p = subprocess.run([py, os.path.join(HERE, "ref_hybrid.py"), "--model", llama],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode().strip()
    expect(p.returncode == 2 and len(err.splitlines()) == 1 and "'llama'" in err,
           "ref_hybrid.py on a llama GGUF: exit 2, one line naming the architecture (%d: %s)" % (p.returncode, err))
    tool = os.path.join(hc.SRC, "tools", "make-tiny-hybrid.py")
    mine = os.path.join(tmp, "notes.txt")
    with open(mine, "w") as f:
        f.write("precious\n")
    for extra in ([], ["--force"], ["--format", "hf", "--force"]):
        p = subprocess.run([py, tool, mine] + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = p.stderr.decode().strip()
        expect(p.returncode == 2 and len(err.splitlines()) == 1 and open(mine).read() == "precious\n",
               "make-tiny-hybrid.py %s over a user's file: exit 2, one line, file kept (%d: %s)"
               % (" ".join(extra), p.returncode, err))
    out = os.path.join(tmp, "x.gguf")
    p = subprocess.run([py, tool, out, "--layers", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode().strip()
    expect(p.returncode == 2 and len(err.splitlines()) == 1 and "--layers" in err and not os.path.exists(out),
           "make-tiny-hybrid.py --layers 0: exit 2, one line naming it, nothing written (%d: %s)" % (p.returncode, err))


def main():
    why = hc.skip_reason()
    if why:
        print("SKIP: %s" % why)
        return 77
    with tempfile.TemporaryDirectory(prefix="bt-hybself-") as tmp:
        path = check_files(tmp)
        check_hf(tmp, path)
        m, whole = check_state(path)
        check_delta_rule(m, whole)
        check_bad_input(tmp)
        check_forward_test(tmp)
    print("FAIL (%d)" % len(FAILS) if FAILS else "PASS")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
