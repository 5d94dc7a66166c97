"""vllm_check.py BANGTRACE WORKDIR QWEN3_FOLDER [FOLDER...] - the bangtrace
vLLM plugin on vLLM's CPU build (run by tests/pytorch_vllm.sh in the torch
environment, with the package installed so that vLLM finds its entry point).

vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so what the
plugin hands libbangtrace is seen here (Recording.forward wrapped at class
level). Checks:
1. f32, eager, one request alone: the prefill statistics agree with
   `bangtrace forward --dump` of the same tokens within 1e-4 per named tensor,
   every name on both sides; every tensor recorded at every step; the trace's
   tokens are vLLM's output; `bisect --reference` finds no departure.
2. several concurrent requests in one batch: one trace each, holding exactly
   its own prompt and output, its statistics equal to its solo run's (1e-4).
3. (further folders) the same f32 comparison on other architectures (for
   Qwen3-MoE without the experts' own ops, which vLLM's fused kernel hides).
4. a prompt prefilled in chunks is one step, equal to the unchunked run; a
   prompt whose head hit vLLM's prefix cache is recorded whole, the head as
   a cache hit, and bisect --reference finds no departure.
5. bf16: a clean run's `bisect --reference` names no op; a broken module writing NaN
   into layer 1's down_proj output at forward 3, column 5, is named by
   `bisect` (step 3, layer 1, ffn_down, index 5) and by `bisect --reference`.
6. without enforce_eager, the model load is refused with one line.
7. with vLLM's default worker processes (a child), the plugin loads there by
   its entry point and the traces are closed at shutdown.
8. (a Qwen3.5 folder) the gated delta net hybrid in bf16: check_hybrid; (a
   Qwen3-Next folder, and FOLDER-tied beside it) check_next.
9. (a DeepSeek-V3 folder) MLA and its MoE in f32: check_mla; (a gpt-oss
   folder) the f32 comparison of 1. (its names through the model's
   hf_to_vllm_mapper).
Exit 0 all good, 1 with FAIL lines."""
import gc
import json
import os
import sqlite3
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import compare, done, fail, named_by_bisect, native, ok, reducer_fails, stays_exact, trace_tokens, traces_in  # noqa: E402
from bangtrace import _lib  # noqa: E402

WORK = sys.argv[2]
FOLDERS = sys.argv[3:]
PROMPTS = [[1, 17, 40, 9, 200, 5, 77, 12, 33], [3, 99, 14, 150, 8], [250, 2, 61, 61, 7, 19, 101],
           [44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54]]
N_NEW = 5
SOLO = {}          # (folder label, prompt) -> (trace, output) of the f32 solo runs
seen = []          # (trace path, tokens, pos0, stats[n_tensors, STAT_COUNT]) per forward handed over


_orig_forward = _lib.Recording.forward


def _capture(self, tokens, pos0, stats, logits, n_rows):
    seen.append((self.path, list(tokens), pos0, np.array(stats, dtype=np.float64).reshape(-1, _lib.STAT_COUNT)))
    return _orig_forward(self, tokens, pos0, stats, logits, n_rows)


_lib.Recording.forward = _capture

import bangtrace.vllm as btv  # noqa: E402
widest = {"n_req": 0}          # the most requests one recorded forward held
_orig_end = btv._Recorder.end


def _end(self, out):
    if self.step is not None:
        widest["n_req"] = max(widest["n_req"], self.step["n_req"])
    return _orig_end(self, out)


btv._Recorder.end = _end


def new_llm(folder, directory, dtype="float32", eager=True, **kw):
    os.environ["BANGTRACE_VLLM"] = directory
    from vllm import LLM
    kw.setdefault("enable_prefix_caching", False)
    return LLM(model=folder, enforce_eager=eager, dtype=dtype, max_model_len=128, seed=0, gpu_memory_utilization=0.5,
               **kw)


def generate(llm, prompts):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    sp = SamplingParams(temperature=0.0, max_tokens=N_NEW, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def set_dir(llm, directory):
    """Point the loaded engine's recorder at another directory."""
    os.makedirs(directory, exist_ok=True)
    for rec in recorders(llm):
        rec.dir = directory


def recorders(llm):
    out = []
    # the in-process engine: its model runner holds the recorder
    eng = llm.llm_engine
    core = getattr(eng, "engine_core", None)
    core = getattr(core, "engine_core", core)
    ex = getattr(core, "model_executor", None)
    w = getattr(ex, "driver_worker", None)
    w = getattr(w, "worker", w)
    runner = getattr(w, "model_runner", None)
    r = getattr(runner, "_bangtrace", None)
    if r is not None:
        out.append(r)
    return out


def close_all(llm):
    """vLLM tells the worker a request finished with the next step: end the
    traces now, as the engine's shutdown does."""
    for rec in recorders(llm):
        rec.close_all()


def steps_of(path):
    return [s for s in seen if s[0] == path]


EXPERT_OPS = ("ffn_gate", "ffn_up", "ffn_act", "ffn_down")


def moe_hidden(names):
    """What vLLM's fused kernels hide: a MoE model's experts' own ops, the
    absorbed attention of MLA (attn_q_abs, attn_ctx_latent) and the share
    of gpt-oss's attention sinks (inside its attention kernel)."""
    moe = {n.split(".")[1] for n in names if n.endswith(".ffn_moe_out")}
    return tuple(n for n in names if n.count(".") == 2 and (n.split(".")[1] in moe and n.split(".")[2] in EXPERT_OPS
                                                            or n.split(".")[2] in ("attn_q_abs", "attn_ctx_latent",
                                                                                   "attn_sink")))


def compare_prefill(label, folder, path, names):
    ref = native(folder, PROMPTS[0], os.path.join(WORK, label + "-dump"))
    st = steps_of(path)
    if not st:
        fail("%s: nothing recorded into %s" % (label, path))
    if ref is None or not st:
        return
    # vLLM computes the last row's logits only: the prefill's logits tap is left out
    hidden = moe_hidden(names)
    worst, worst_name = compare(label, names, st[0][3], ref, absent_ok=("logits",) + hidden)
    ok("%s f32 vLLM: prefill statistics of %d tensors agree with the native engine's (largest rel %.2g at %s)%s"
       % (label, len(names) - 1 - len(hidden), worst, worst_name,
          "; %d ops inside vLLM's fused MoE, MLA or attention kernels are not recorded" % len(hidden) if hidden else ""))
    for k, (_, toks, pos0, s) in enumerate(st):
        bad = [names[i] for i in range(len(names)) if s[i][_lib.STAT_N] < 0 and (names[i] != "logits" or k > 0)
               and names[i] not in hidden]
        if bad:
            fail("%s: step %d misses %s" % (label, k, bad[:4]))


def check_failure(llm, label, solo):
    """The recorder failing inside a step (its reduction raises) must not
    take vLLM down: the request still gets its tokens, its trace is closed
    with status error, and the next request is recorded as before."""
    rec = recorders(llm)[0]
    d = os.path.join(WORK, label + "-failure")
    set_dir(llm, d)
    with reducer_fails(rec):
        out = generate(llm, [PROMPTS[1]])[0]
    close_all(llm)
    nxt = generate(llm, [PROMPTS[2]])[0]
    close_all(llm)
    traces = {tuple(trace_tokens(p)[0]): trace_tokens(p) for p in traces_in(d)}
    broken = traces.get(tuple(PROMPTS[1]))
    good = traces.get(tuple(PROMPTS[2]))
    if out != solo[tuple(PROMPTS[1])][1] or nxt != solo[tuple(PROMPTS[2])][1]:
        fail("%s: with the recorder failing, vLLM answered %s and %s; solo %s and %s" % (
            label, out, nxt, solo[tuple(PROMPTS[1])][1], solo[tuple(PROMPTS[2])][1]))
    elif not broken or broken[2].get("status") != "error" or not good or good[1] != nxt or good[2].get("status") != "ok":
        fail("%s: after an injected recorder failure: traces %s" % (label, {k: (v[1], v[2].get("status"))
                                                                          for k, v in traces.items()}))
    else:
        ok("%s: the recorder failing at a step leaves vLLM's answers alone; that request's trace ends with status "
           "error at the step before, the next request is recorded whole" % label)


def check_f32(folder, with_batch, **kw):
    label = os.path.basename(folder)
    solo_dir = os.path.join(WORK, label + "-solo")
    llm = new_llm(folder, solo_dir, **kw)
    recs = recorders(llm)
    if not recs:
        fail("%s: the plugin did not install its recorder in vLLM's model runner" % label)
        return llm
    names = [t.name for t in recs[0].bm.tensors]
    solo = {}
    for k, prompt in enumerate(PROMPTS if with_batch else PROMPTS[:1]):
        before = set(traces_in(solo_dir))
        out = generate(llm, [prompt])[0]
        close_all(llm)
        new = sorted(set(traces_in(solo_dir)) - before)
        if len(new) != 1:
            fail("%s: one request alone made %d traces" % (label, len(new)))
            continue
        solo[tuple(prompt)] = (new[0], out)
        SOLO[(label, tuple(prompt))] = (new[0], out)
        p, g, meta = trace_tokens(new[0])
        if (p, g) != (prompt, out):
            fail("%s: the trace holds prompt %s gen %s; vLLM ran %s -> %s" % (label, p, g, prompt, out))
        if meta.get("engine") != "vllm" or not meta.get("request_id"):
            fail("%s: trace meta engine %r request_id %r" % (label, meta.get("engine"), meta.get("request_id")))
        if k == 0:
            if len(steps_of(new[0])) != N_NEW:
                fail("%s: %d forwards recorded for %d tokens" % (label, len(steps_of(new[0])), N_NEW))
            compare_prefill(label, folder, new[0], names)
            stays_exact(label + " f32 vLLM", new[0], "vllm", N_NEW)
    if not with_batch:
        return llm
    batch_dir = os.path.join(WORK, label + "-batch")
    set_dir(llm, batch_dir)
    widest["n_req"] = 0
    outs = generate(llm, PROMPTS)
    close_all(llm)
    if widest["n_req"] < 2:
        fail("%s: the %d requests never shared a forward (at most %d): nothing batched to attribute"
             % (label, len(PROMPTS), widest["n_req"]))
    got = traces_in(batch_dir)
    if len(got) != len(PROMPTS):
        fail("%s: %d concurrent requests made %d traces" % (label, len(PROMPTS), len(got)))
    worst = 0.0
    matched = 0
    for path in got:
        p, g, _ = trace_tokens(path)
        if tuple(p) not in solo:
            fail("%s: batched trace %s holds prompt %s, which no request sent" % (label, path, p))
            continue
        spath, sout = solo[tuple(p)]
        if g != sout or g != outs[PROMPTS.index(p)]:
            fail("%s: batched trace of %s generated %s; solo %s, vLLM's batch output %s"
                 % (label, p, g, sout, outs[PROMPTS.index(p)]))
        a, b = steps_of(path), steps_of(spath)
        if [x[1:3] for x in a] != [x[1:3] for x in b]:
            fail("%s: batched forwards of %s (tokens, pos0) %s differ from solo %s"
                 % (label, p, [x[1:3] for x in a], [x[1:3] for x in b]))
            continue
        for k, (x, y) in enumerate(zip(a, b)):
            sx, sy = x[3], y[3]
            if not np.array_equal(sx[:, _lib.STAT_N], sy[:, _lib.STAT_N]) or \
                    not np.array_equal(sx[:, _lib.STAT_NAN:_lib.STAT_FINITE + 1], sy[:, _lib.STAT_NAN:_lib.STAT_FINITE + 1]):
                fail("%s: step %d of %s: element counts differ between the batch and the solo run" % (label, k, p))
            for c in (_lib.STAT_MIN, _lib.STAT_MAX, _lib.STAT_MEAN, _lib.STAT_RMS):
                scale = np.maximum(np.abs(sy[:, c]), np.abs(sy[:, _lib.STAT_RMS]))
                m = sy[:, _lib.STAT_N] >= 0
                d = np.abs(sx[m, c] - sy[m, c]) / np.maximum(scale[m], 1e-30)
                worst = max(worst, float(d.max()))
        matched += 1
    check_failure(llm, label, solo)
    if worst > 1e-4:
        fail("%s: batched statistics depart from the solo runs' by %.2g (> 1e-4)" % (label, worst))
    elif matched == len(PROMPTS):
        ok("%s: %d concurrent requests (up to %d in one forward), one trace each with its own prompt and output; "
           "statistics equal the solo runs' (largest rel %.2g)" % (label, matched, widest["n_req"], worst))
    return llm


def check_chunked(folder):
    """A prompt prefilled in chunks (max_num_batched_tokens 4: 9 tokens in
    4 + 4 + 1) is one prefill step, equal to the unchunked solo run's."""
    label = os.path.basename(folder)
    d = os.path.join(WORK, label + "-chunked")
    llm = new_llm(folder, d, max_num_batched_tokens=4)
    out = generate(llm, [PROMPTS[0]])[0]
    close_all(llm)
    got = traces_in(d)
    spath, sout = SOLO.get((label, tuple(PROMPTS[0])), (None, None))
    if len(got) != 1 or spath is None:
        fail("%s chunked: %d traces (solo run %s)" % (label, len(got), spath))
        return llm
    a, b = steps_of(got[0]), steps_of(spath)
    if out != sout or [x[1:3] for x in a] != [x[1:3] for x in b]:
        fail("%s chunked: forwards %s -> %s; unchunked %s -> %s" % (label, [x[1:3] for x in a], out,
                                                                  [x[1:3] for x in b], sout))
        return llm
    worst = 0.0
    for x, y in zip(a, b):
        sx, sy = x[3], y[3]
        m = sy[:, _lib.STAT_N] >= 0
        if not np.array_equal(sx[:, _lib.STAT_N], sy[:, _lib.STAT_N]):
            fail("%s chunked: element counts differ from the unchunked run" % label)
        for c in (_lib.STAT_MIN, _lib.STAT_MAX, _lib.STAT_MEAN, _lib.STAT_RMS):
            scale = np.maximum(np.abs(sy[m, c]), np.abs(sy[m, _lib.STAT_RMS]))
            worst = max(worst, float((np.abs(sx[m, c] - sy[m, c]) / np.maximum(scale, 1e-30)).max()))
    if worst > 1e-4:
        fail("%s chunked: statistics depart from the unchunked run's by %.2g" % (label, worst))
    else:
        ok("%s: a prompt prefilled in 3 chunks is one prefill step of %d tokens, its statistics the unchunked "
           "run's (largest rel %.2g)" % (label, len(PROMPTS[0]), worst))
    return llm


def check_prefix(folder):
    """vLLM's prefix cache on (its default): a request whose prompt's head is
    cached starts past position 0; its trace holds the whole prompt, a
    kv_access hit row for the cached head, the taps of the rows vLLM
    computed, and bisect --reference (which runs the cached head untapped)
    finds no departure."""
    label = os.path.basename(folder)
    d = os.path.join(WORK, label + "-prefix")
    llm = new_llm(folder, d, enable_prefix_caching=True, block_size=32)
    a = [(7 * i + 3) % 300 + 1 for i in range(80)]
    b = a[:64] + [11, 12, 13, 14, 15]
    generate(llm, [a])
    close_all(llm)
    n_seen = len(seen)
    out = generate(llm, [b])[0]
    close_all(llm)
    got = [p for p in traces_in(d) if trace_tokens(p)[0] == b]
    first = [x for x in seen[n_seen:] if got and x[0] == got[0]]
    if len(got) != 1 or not first:
        fail("%s prefix cache: traces %s for the second request" % (label, traces_in(d)))
        return llm
    p, g, _ = trace_tokens(got[0])
    db = sqlite3.connect(got[0])
    hits = db.execute("select pos_lo, pos_hi from kv_access where mode = 'hit'").fetchall()
    step0 = db.execute("select pos0, n_pos from steps where step = 0").fetchone()
    db.close()
    if first[0][2] != 64 or hits != [(0, 63)] or step0 != (0, len(b)) or g != out:
        fail("%s prefix cache: first forward at %d, hits %s, step 0 %s, generated %s (vLLM %s)"
             % (label, first[0][2], hits, step0, g, out))
        return llm
    stays_exact(label, got[0], "vllm", N_NEW, "a request whose first 64 tokens were in vLLM's prefix cache: its "
                "trace holds the whole prompt, the cached head as a hit, and bisect --reference finds no departure")
    return llm


def bf16_clean(folder, d, what):
    """A bf16 engine on folder recording into d, one request of PROMPTS[0]:
    (the engine, its trace, or None after a FAIL); bisect --reference on it
    must name no op (what: the ok line's words)."""
    label = os.path.basename(folder)
    llm = new_llm(folder, d, dtype="bfloat16")
    generate(llm, [PROMPTS[0]])
    close_all(llm)
    got = traces_in(d)
    if len(got) != 1:
        fail("%s bf16: %d traces for one request" % (label, len(got)))
        return llm, None
    stays_exact(label + " bf16 vLLM", got[0], what=what)
    return llm, got


def broken_run(llm, d, module_of, step, col, width=None):
    """One request of PROMPTS[0] into d with a broken kernel: the module
    module_of(model) picks writes NaN at column col of its output's first
    row (rows of width, or of its last dimension) at the request's forward
    `step` (its forward wrapped, so every hook sees the NaN). Returns the
    traces in d."""
    state = {"n": -1}

    def install(model):
        def top(mod, args, kwargs):
            state["n"] += 1
        mod = module_of(model)
        orig = mod.forward

        def broken(*a, **kw):
            out = orig(*a, **kw)
            if state["n"] == step:
                y = out[0] if isinstance(out, tuple) else out
                y.reshape(-1, width or y.shape[-1])[0, col] = float("nan")
            return out
        mod.forward = broken
        return [model.register_forward_pre_hook(top, with_kwargs=True)], mod, orig
    handles, mod, orig = llm.apply_model(install)[0]
    set_dir(llm, d)
    generate(llm, [PROMPTS[0]])
    close_all(llm)
    for h in handles:
        h.remove()
    mod.forward = orig
    return traces_in(d)


def check_bf16(folder):
    label = os.path.basename(folder)
    d = os.path.join(WORK, label + "-bf16")
    llm, clean = bf16_clean(folder, d, "bisect --reference names no op on the clean run")
    if clean is None:
        return llm
    # a broken kernel: NaN into layer 1's down_proj output at the request's fourth forward (step 3), column 5
    L, STEP, COL = 1, 3, 5
    bad = broken_run(llm, d + "-nan", lambda model: model.model.layers[L].mlp.down_proj, STEP, COL)
    if len(bad) != 1:
        fail("%s bf16: %d traces for the injected request" % (label, len(bad)))
        return llm
    named_by_bisect(label + " bf16 vLLM", bad[0], STEP, L, "ffn_down", COL)
    return llm


def amx_tiles():
    import torch
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except Exception:
        return False


def check_mla(folder):
    """DeepSeek-V3 (MLA, a latent of 512 + 64 rotated dims, the only one
    vLLM's CPU MLA kernels take; MoE with a shared expert) in f32 on vLLM's
    reference CPU MLA backend, named (on a CPU with AMX tiles vLLM's default
    is its AMX MLA kernel, which takes bf16 only): the prefill agrees with the
    native engine but for what vLLM's kernels run inside, and a NaN written
    into layer 1's latent norm at the third forward, column 6, is named by
    bisect (attn_kv_latent) and bisect --reference. Then bf16 on vLLM's
    default MLA backend (AMX where the CPU has it): bisect --reference names
    no op."""
    label = os.path.basename(folder)
    llm = check_f32(folder, with_batch=False, attention_backend="CPU_MLA")
    L, STEP, COL = 1, 2, 6
    bad = broken_run(llm, os.path.join(WORK, label + "-nan"), lambda model: model.model.layers[L].self_attn.kv_a_layernorm,
                     STEP, COL, width=512)
    if len(bad) != 1:
        fail("%s: %d traces for the injected request" % (label, len(bad)))
    else:
        named_by_bisect(label + " f32 vLLM MLA", bad[0], STEP, L, "attn_kv_latent", COL)
    llm = None
    gc.collect()
    backend = "AMX_MLA" if amx_tiles() else "CPU_MLA"
    llm, _ = bf16_clean(folder, os.path.join(WORK, label + "-bf16"),
                        "bisect --reference names no op on vLLM's default MLA backend (%s on this CPU)" % backend)
    return llm


GDN_HIDDEN = ("ssm_conv", "ssm_q", "ssm_k", "ssm_v")


def slot_events(path):
    db = sqlite3.connect(path)
    ev = [d for (d,) in db.execute("select detail from events where kind = 'state_slot' order by id")]
    db.close()
    return [int(d.split("slot ")[1].split()[0]) for d in ev]


def check_hybrid(folder):
    """A gated delta net hybrid (Qwen3.5; vLLM's CPU GDN op runs in bf16
    only): solo requests are recorded with every tensor but the four its
    fused op hides, bisect --reference names no op, each trace names its
    state slot; four concurrent requests get their own traces whose
    statistics, the states read from each request's slot included, are the
    solo runs'; and a GDN op that does not reset a reused slot (the
    has_initial_state of a new request forced true: the incident's bug) is
    named by bisect --reference at the first state-dependent op of the
    second request's prefill, both traces naming the same slot."""
    label = os.path.basename(folder)
    d = os.path.join(WORK, label + "-solo")
    llm = new_llm(folder, d, dtype="bfloat16")
    recs = recorders(llm)
    if not recs:
        fail("%s: the plugin did not install its recorder" % label)
        return llm
    names = [t.name for t in recs[0].bm.tensors]
    hidden = tuple(n for n in names if n.count(".") == 2 and n.split(".")[2] in GDN_HIDDEN)
    solo = {}
    for k, prompt in enumerate(PROMPTS):
        before = set(traces_in(d))
        out = generate(llm, [prompt])[0]
        close_all(llm)
        new = sorted(set(traces_in(d)) - before)
        if len(new) != 1:
            fail("%s: one request made %d traces" % (label, len(new)))
            continue
        solo[tuple(prompt)] = (new[0], out)
        if k:
            continue
        st = steps_of(new[0])
        miss = sorted({names[i] for _, _, _, x in st for i in range(len(names))
                       if x[i][_lib.STAT_N] < 0 and names[i] not in hidden and names[i] != "logits"})
        if len(st) != N_NEW or miss:
            fail("%s: %d forwards, not recorded: %s" % (label, len(st), miss[:6]))
        else:
            ok("%s bf16 vLLM: every tensor recorded at every step but the %d its fused GDN op computes inside "
               "(ssm_conv, ssm_q, ssm_k, ssm_v), the states from the request's slot" % (label, len(hidden)))
        stays_exact(label + " bf16 vLLM", new[0], what="bisect --reference names no op (the states included)")
        if not slot_events(new[0]):
            fail("%s: no state_slot event in %s" % (label, new[0]))
    # concurrent requests: each trace its own rows and its own slot's state
    bd = os.path.join(WORK, label + "-batch")
    set_dir(llm, bd)
    widest["n_req"] = 0
    outs = generate(llm, PROMPTS)
    close_all(llm)
    worst, matched, slots = 0.0, 0, set()
    st_slot = [i for i, n in enumerate(names) if n.endswith(".ssm_state")]
    worst_state = 0.0
    for path in traces_in(bd):
        p, g, _ = trace_tokens(path)
        if tuple(p) not in solo:
            fail("%s: batched trace with prompt %s" % (label, p))
            continue
        spath, sout = solo[tuple(p)]
        if g != sout or g != outs[PROMPTS.index(p)]:
            fail("%s: batched %s generated %s, solo %s" % (label, p, g, sout))
            continue
        slots.update(slot_events(path))
        for x, y in zip(steps_of(path), steps_of(spath)):
            sx, sy = x[3], y[3]
            m = (sy[:, _lib.STAT_N] >= 0) & (sx[:, _lib.STAT_N] >= 0)
            for c in (_lib.STAT_MIN, _lib.STAT_MAX, _lib.STAT_MEAN, _lib.STAT_RMS):
                scale = np.maximum(np.abs(sy[:, c]), np.abs(sy[:, _lib.STAT_RMS]))
                dd = np.abs(sx[:, c] - sy[:, c]) / np.maximum(scale, 1e-30)
                worst = max(worst, float(dd[m].max()))
                worst_state = max(worst_state, float(dd[st_slot].max()))
        matched += 1
    # bf16 kernels batch differently than they run alone: 5e-2, far below what another request's state gives
    if matched != len(PROMPTS) or widest["n_req"] < 2 or len(slots) < len(PROMPTS) or worst > 5e-2:
        fail("%s: %d of %d batched traces matched (up to %d in a forward), slots %s, largest rel %.2g"
             % (label, matched, len(PROMPTS), widest["n_req"], sorted(slots), worst))
    else:
        ok("%s: %d concurrent requests (up to %d in a forward) in %d state slots, one trace each; statistics equal "
           "the solo runs' within bf16 (largest rel %.2g; the states read from each slot %.2g)"
           % (label, matched, widest["n_req"], len(slots), worst, worst_state))
    # the incident: a reused state slot not reset
    import vllm.model_executor.layers.mamba.ops.cpu.gdn_attention as ga
    orig = ga._cpu_gdn_attention_nonspec

    def noreset(layer, md, *a, **kw):
        if md.has_initial_state is not None:
            md.has_initial_state[:] = True            # every prefill continues the slot's old state
        return orig(layer, md, *a, **kw)
    # a small cache (3 blocks): the third request takes the first one's slot again
    del recs
    llm = None
    gc.collect()
    nd = os.path.join(WORK, label + "-noreset")
    llm = new_llm(folder, nd, dtype="bfloat16", num_gpu_blocks_override=3)
    for prompt in PROMPTS[:2]:
        generate(llm, [prompt])
        close_all(llm)
    ga._cpu_gdn_attention_nonspec = noreset
    try:
        generate(llm, [PROMPTS[2]])
    finally:
        ga._cpu_gdn_attention_nonspec = orig
    close_all(llm)
    tr = {tuple(trace_tokens(x)[0]): x for x in traces_in(nd)}
    prev = [tr.get(tuple(p)) for p in PROMPTS[:2]]
    b = tr.get(tuple(PROMPTS[2]))
    if not all(prev) or not b:
        fail("%s noreset: traces %s" % (label, sorted(tr)))
        return llm
    sb = slot_events(b)
    a = next((x for x in prev if sb and slot_events(x)[:1] == sb[:1]), prev[0])
    sa = slot_events(a)
    p = subprocess.run([BT_PATH, "bisect", "--reference", b], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    dep = [ln for ln in p.stdout.splitlines() if "first departs at" in ln or ln.startswith("first divergence")]
    if not sa or sa[:1] != sb[:1]:
        fail("%s noreset: the requests ran in slots %s and %s (the test needs a slot reused)"
             % (label, [slot_events(x) for x in prev], sb))
    elif "blk.0.ssm_" not in p.stdout or not any("step 0" in ln for ln in dep):
        fail("%s noreset: bisect --reference on the second request:\n%s" % (label, p.stdout[-900:]))
    elif "state slot: this request's recurrent state lived in slot %d" % sb[0] not in p.stdout or \
            "  %s (%s," % (trace_tokens(a)[2]["request_id"], a) not in p.stdout:
        fail("%s noreset: bisect --reference does not name the slot's earlier request %s:\n%s"
             % (label, trace_tokens(a)[2]["request_id"], p.stdout[-900:]))
    else:
        ok("%s: a GDN op that does not reset a reused slot: the traces of an earlier request and the one that "
           "reused its slot both name slot %d; bisect --reference departs in the second's prefill (%s) and names "
           "the earlier request that held the slot" % (label, sb[0], dep[0].strip()[:100]))
    return llm


def check_next(folder):
    """Qwen3-Next (its fused in_proj_qkvz/in_proj_ba per key head): an
    untied folder records with no departure; the tied one (the same weights,
    tie_word_embeddings true, which vLLM's Qwen3NextForCausalLM ignores: its
    lm_head is never loaded) answers garbage that `bisect --reference` names
    as vLLM departing at logits, every tensor before them within tolerance
    (and `bisect` as constant logits when the unloaded head is zeros: a wall
    of id 0)."""
    label = os.path.basename(folder)
    llm, got = bf16_clean(folder, os.path.join(WORK, label + "-next"), "bisect --reference names no op (per key "
                          "head [q, k, v, z] put back in the native order)")
    if got is None:
        return llm
    del llm
    gc.collect()
    tied = folder + "-tied"
    d = os.path.join(WORK, label + "-tied-traces")
    llm = new_llm(tied, d, dtype="bfloat16")
    out = generate(llm, [PROMPTS[0]])[0]
    close_all(llm)
    got = traces_in(d)
    if len(got) != 1:
        fail("%s tied: %d traces" % (label, len(got)))
        return llm
    b = subprocess.run([BT_PATH, "bisect", got[0]], stdout=subprocess.PIPE, text=True, timeout=300).stdout
    r = subprocess.run([BT_PATH, "bisect", "--reference", got[0]], stdout=subprocess.PIPE, text=True, timeout=300).stdout
    # the head is never loaded: zeros in fresh memory (constant logits, a wall of id 0), else what was there
    flat = "first degenerate output: step 0 (constant_logits)" in b
    if "first departs at logits, step 0" not in r and "first departs at logits, step 1" not in r \
            or (out == [0] * N_NEW) != flat:
        fail("%s tied: vLLM answered %s; bisect:\n%s\nbisect --reference:\n%s" % (label, out, b[-600:], r[-600:]))
    else:
        ok("%s with tie_word_embeddings (vLLM never loads its lm_head): vLLM answered %s; bisect --reference: %s%s"
           % (label, out, [ln for ln in r.splitlines() if ln.startswith("verdict")][0][9:90],
              "; bisect: constant logits at step 0" if flat else ""))
    return llm


def check_refusal(folder):
    """A non-eager engine is refused when the model loads (a child process:
    the failed engine's state stays out of this one)."""
    code = ("import os, sys\nos.environ['BANGTRACE_VLLM'] = sys.argv[2]\nfrom vllm import LLM\n"
            "LLM(model=sys.argv[1], dtype='float32', max_model_len=128, enforce_eager=False)\n")
    p = subprocess.run([sys.executable, "-c", code, folder, os.path.join(WORK, "refused")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    lines = [ln for ln in p.stderr.splitlines() if "bangtrace: recording vLLM needs eager mode" in ln]
    if p.returncode == 0 or not lines:
        fail("without enforce_eager: exit %d, stderr tail %s" % (p.returncode, p.stderr[-600:]))
    else:
        ok("without enforce_eager the load is refused: %s" % lines[0].split("bangtrace: ", 1)[1].split(":")[0])


def check_workers(folder):
    """vLLM's default: the engine and its worker in other processes, which
    load the plugin through the entry point; the traces end at shutdown."""
    d = os.path.join(WORK, "mp")
    child = os.path.join(WORK, "mp_child.py")      # a file: vLLM's spawned processes re-import it
    with open(child, "w") as f:
        f.write("""import json, os, sys
if __name__ == "__main__":
    os.environ["BANGTRACE_VLLM"] = sys.argv[2]
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(model=sys.argv[1], enforce_eager=True, dtype="float32", max_model_len=128, enable_prefix_caching=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in json.loads(sys.argv[3])],
                        SamplingParams(temperature=0.0, max_tokens=%d, ignore_eos=True), use_tqdm=False)
    print("OUT " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)
    llm.llm_engine.engine_core.shutdown()
""" % N_NEW)
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    p = subprocess.run([sys.executable, child, folder, d, json.dumps(PROMPTS[:2])], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600, env=env)
    outs = [json.loads(ln[4:]) for ln in p.stdout.splitlines() if ln.startswith("OUT ")]
    if p.returncode != 0 or not outs:
        fail("vLLM with worker processes: exit %d: %s" % (p.returncode, p.stderr[-800:]))
        return
    got = traces_in(d) if os.path.isdir(d) else []
    want = {tuple(a): b for a, b in zip(PROMPTS[:2], outs[0])}
    have = {}
    for path in got:
        pr, g, meta = trace_tokens(path)
        have[tuple(pr)] = (g, meta.get("status"))
    if set(have) != set(want) or any(have[k][0] != want[k] or have[k][1] != "ok" for k in want):
        fail("vLLM with worker processes: traces %s; want %s, status ok" % (have, want))
    else:
        ok("vLLM with its engine in another process: the plugin loads there by its entry point; %d traces, "
           "each its request's tokens, closed ok at shutdown" % len(got))


def release(llm):
    del llm
    gc.collect()


def model_type(f):
    with open(os.path.join(f, "config.json")) as fh:
        return json.load(fh).get("model_type")


HYBRID = [f for f in FOLDERS if model_type(f) == "qwen3_5_text"]
NEXT = [f for f in FOLDERS if model_type(f) == "qwen3_next"]
MLA = [f for f in FOLDERS if model_type(f) in ("deepseek_v2", "deepseek_v3")]
ONLY_F32 = [f for f in FOLDERS if model_type(f) == "gpt_oss"]
FOLDERS = [f for f in FOLDERS if f not in HYBRID and f not in NEXT and f not in MLA and f not in ONLY_F32]
BT_PATH = sys.argv[1]
for folder in HYBRID:
    release(check_hybrid(folder))
for folder in NEXT:
    release(check_next(folder))
for folder in MLA:
    release(check_mla(folder))
for folder in ONLY_F32:
    release(check_f32(folder, with_batch=False))
if FOLDERS:
    release(check_f32(FOLDERS[0], with_batch=True))
    for folder in FOLDERS[1:]:
        release(check_f32(folder, with_batch=False))
    release(check_chunked(FOLDERS[0]))
    release(check_prefix(FOLDERS[0]))
    release(check_bf16(FOLDERS[0]))
    check_refusal(FOLDERS[0])
    check_workers(FOLDERS[0])
done()
