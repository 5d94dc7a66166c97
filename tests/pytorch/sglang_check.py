"""sglang_check.py BANGTRACE WORKDIR HOOK_MANAGER FOLDER... - bangtrace.sglang
(the recorder SGLang's --forward-hooks installs) on sglang_standin.py's
model runner, hooked through SGLang's own hook_manager.py (HOOK_MANAGER,
from its wheel). Checks per folder (tiny llama, qwen3):
1. one request alone: its trace holds its prompt and every generated token
   (the next pass's input is how the hooks learn a sampled token, the
   scheduler's Req the last one); the prefill statistics agree with `bangtrace forward --dump`
   within 1e-4 per named tensor, every name on both sides, every tensor at
   every step; `bisect --reference` finds no departure.
2. requests batched (two from the start, one arriving while they decode in
   its own extend pass, one that stops after its first token): one trace
   each, its statistics equal to its solo run's.
3. a prompt prefilled in chunks is one step, equal to the unchunked run's.
4. a NaN written into one request's row of layer 1's down_proj in a batched
   decode pass is named by `bisect` and `bisect --reference` in that
   request's trace; the other request's trace stays clean.
5. a prompt whose head hit the radix cache is recorded whole (the head's
   ids from the scheduler's batch on the stack) and replays clean; one
   whose head's ids are nowhere is not recorded; a recorder failing at a
   pass leaves the answers alone.
And the launcher's options: refusals with one line, the hook spec added.
Exit 0 all good, 1 with FAIL lines."""
import importlib.util
import json
import logging
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bt, compare, done, fail, named_by_bisect, native, ok, reducer_fails, stays_exact, trace_tokens, traces_in  # noqa: E402
from bangtrace import _lib  # noqa: E402
import bangtrace.sglang as bts  # noqa: E402
import sglang_standin as sgl  # noqa: E402

WORK, HM, FOLDERS = sys.argv[2], sys.argv[3], sys.argv[4:]
PROMPTS = {"req-a": [1, 17, 40, 9, 200, 5, 77, 12, 33], "req-b": [3, 99, 14, 150, 8],
           "req-c": [250, 2, 61, 61, 7, 19, 101], "req-d": [44, 45, 46, 47, 48, 49]}
N_NEW = 6
seen = []        # (trace path, tokens, pos0, stats) per forward handed over
_orig_forward = _lib.Recording.forward


def _capture(self, tokens, pos0, stats, logits, n_rows):
    seen.append((self.path, list(tokens), pos0, np.array(stats, dtype=np.float64).reshape(-1, _lib.STAT_COUNT)))
    return _orig_forward(self, tokens, pos0, stats, logits, n_rows)


_lib.Recording.forward = _capture

spec = importlib.util.spec_from_file_location("sglang_hook_manager", HM)
hook_manager = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook_manager)


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, r):
        self.lines.append(r.getMessage())


warned = Warnings()
logging.getLogger("bangtrace.sglang").addHandler(warned)


def steps_of(path):
    return [s for s in seen if s[0] == path]


def hooked(folder, d):
    """The stand-in model with SGLang's hook_manager registering the spec's
    factory on every module; returns (runner, recorder)."""
    m = sgl.CausalLM(folder)
    hook_manager.register_forward_hooks(m, bts.spec(d))
    recs = {id(h): h for mod in m.modules() for h in mod._forward_hooks.values() if isinstance(h, bts._Recorder)}
    if len(recs) != 1:
        fail("SGLang's hook_manager registered %d bangtrace recorders" % len(recs))
        return sgl.Runner(m), None
    return sgl.Runner(m), next(iter(recs.values()))


def by_request(d):
    return {trace_tokens(p)[2].get("request_id"): p for p in traces_in(d)}


def same_stats(label, a, b):
    """Forwards of two traces: the same (tokens, pos0), statistics within 1e-4."""
    sa, sb = steps_of(a), steps_of(b)
    if [x[1:3] for x in sa] != [x[1:3] for x in sb]:
        fail("%s: forwards (tokens, pos0) %s differ from %s" % (label, [x[1:3] for x in sa], [x[1:3] for x in sb]))
        return None
    worst = 0.0
    for x, y in zip(sa, sb):
        sx, sy = x[3], y[3]
        if not np.array_equal(sx[:, _lib.STAT_N:_lib.STAT_FINITE + 1], sy[:, _lib.STAT_N:_lib.STAT_FINITE + 1]):
            fail("%s: element counts differ" % label)
            return None
        m = sy[:, _lib.STAT_N] >= 0
        for c in (_lib.STAT_MIN, _lib.STAT_MAX, _lib.STAT_MEAN, _lib.STAT_RMS):
            scale = np.maximum(np.abs(sy[m, c]), np.abs(sy[m, _lib.STAT_RMS]))
            worst = max(worst, float((np.abs(sx[m, c] - sy[m, c]) / np.maximum(scale, 1e-30)).max()))
    return worst


def check(folder):
    label = os.path.basename(folder)
    solo_dir = os.path.join(WORK, label + "-solo")
    runner, rec = hooked(folder, solo_dir)
    if rec is None:
        return
    solo = {}
    for rid, prompt in PROMPTS.items():
        out = runner.run({rid: (prompt, N_NEW)})[rid]
        rec.close_all()
        path = by_request(solo_dir).get(rid)
        if path is None:
            fail("%s: request %s alone left no trace (%s)" % (label, rid, traces_in(solo_dir)))
            continue
        solo[rid] = (path, out)
        p, g, meta = trace_tokens(path)
        if (p, g) != (prompt, out):
            fail("%s: %s's trace holds prompt %s gen %s; the runner ran %s -> %s" % (label, rid, p, g, prompt, out))
        if meta.get("engine") != "sglang" or meta.get("status") != "ok":
            fail("%s: %s's trace meta engine %r status %r" % (label, rid, meta.get("engine"), meta.get("status")))
    if len(solo) != len(PROMPTS):
        return
    path = solo["req-a"][0]
    names = [t.name for t in rec.bm.tensors]
    st = steps_of(path)
    if len(st) != N_NEW:
        fail("%s: %d forwards recorded for %d passes" % (label, len(st), N_NEW))
    ref = native(folder, PROMPTS["req-a"], os.path.join(WORK, label + "-dump"))
    if ref is not None and st:
        worst, where = compare(label, names, st[0][3], ref, absent_ok=("logits",))
        ok("%s: the prefill's statistics of %d tensors agree with the native engine's (largest rel %.2g at %s); "
           "the trace holds the prompt and every generated token (the last from the scheduler's Req)" % (label, len(names) - 1, worst, where))
        for k, s in enumerate(st):
            bad = [names[i] for i in range(len(names)) if s[3][i][_lib.STAT_N] < 0 and (names[i] != "logits" or k > 0)]
            if bad:
                fail("%s: step %d misses %s" % (label, k, bad[:4]))
    stays_exact(label + " sglang", path, "sglang", N_NEW)

    # batched: a and b from the start, c arriving while they decode, d stopping after its first token
    bdir = os.path.join(WORK, label + "-batch")
    runner, rec = hooked(folder, bdir)
    reqs = {r: (p, 1 if r == "req-d" else N_NEW) for r, p in PROMPTS.items()}
    outs = runner.run(reqs, arrivals={0: ["req-a", "req-b"], 2: ["req-c", "req-d"]})
    rec.close_all()
    got = by_request(bdir)
    worst = 0.0
    for rid, (spath, sout) in solo.items():
        path = got.get(rid)
        want_gen = sout[:1] if rid == "req-d" else sout
        if path is None or trace_tokens(path)[:2] != (PROMPTS[rid], want_gen) or outs[rid] != sout[:len(outs[rid])]:
            fail("%s batched: %s's trace %s holds %s; the runner answered %s, solo %s" % (
                label, rid, path, path and trace_tokens(path)[:2], outs[rid], sout))
            continue
        if rid == "req-d":
            n = len(steps_of(path))
            if n != 1 or trace_tokens(path)[2].get("status") != "ok":
                fail("%s batched: req-d (one token) has %d forwards, status %s" % (label, n, trace_tokens(path)[2].get("status")))
            continue
        w = same_stats("%s batched %s" % (label, rid), path, spath)
        worst = max(worst, w if w is not None else 1.0)
    if len(got) != len(PROMPTS):
        fail("%s batched: %d requests made %d traces" % (label, len(PROMPTS), len(got)))
    elif worst > 1e-4:
        fail("%s batched: statistics depart from the solo runs' by %.2g" % (label, worst))
    else:
        ok("%s: 4 requests batched (one arriving in its own extend pass while two decode, one stopping after its "
           "first token): a trace each with only its own rows, equal to its solo run (largest rel %.2g)" % (label, worst))

    # chunked prefill: one step
    cdir = os.path.join(WORK, label + "-chunked")
    runner, rec = hooked(folder, cdir)
    out = runner.run({"req-a": (PROMPTS["req-a"], N_NEW)}, chunk=4)["req-a"]
    rec.close_all()
    path = by_request(cdir).get("req-a")
    w = same_stats(label + " chunked", path, solo["req-a"][0]) if path else None
    if path is None or out != solo["req-a"][1] or w is None or w > 1e-4:
        fail("%s chunked: trace %s, answer %s (solo %s), departure %s" % (label, path, out, solo["req-a"][1], w))
    else:
        ok("%s: a prompt prefilled in chunks of 4 (3 extend passes) is one step, equal to the unchunked run's "
           "(largest rel %.2g)" % (label, w))

    # chunks of a long prompt with decode passes between them (req-a decoding
    # while req-c is prefilled 4 tokens a pass): one step still, and req-c's
    # trace is not ended by the decode passes that run without it
    idir = os.path.join(WORK, label + "-interleaved")
    runner, rec = hooked(folder, idir)
    outs = runner.run({r: (PROMPTS[r], N_NEW) for r in ("req-a", "req-c")}, arrivals={0: ["req-a"], 2: ["req-c"]},
                      chunk=4, interleave=True)
    rec.close_all()
    got = by_request(idir)
    pc = got.get("req-c")
    w = same_stats(label + " interleaved", pc, solo["req-c"][0]) if pc else None
    if pc is None or outs["req-c"] != solo["req-c"][1] or w is None or w > 1e-4 or len(traces_in(idir)) != 2:
        fail("%s interleaved chunks: traces %s, req-c answered %s (solo %s), departure %s"
             % (label, sorted(got), outs["req-c"], solo["req-c"][1], w))
    else:
        ok("%s: a prompt prefilled in chunks with decode passes between them is one trace and one step, equal to "
           "its solo run (largest rel %.2g)" % (label, w))

    # a NaN in request b's row of a batched decode pass
    ndir = os.path.join(WORK, label + "-nan")
    runner, rec = hooked(folder, ndir)
    down = dict(runner.m.named_modules())["model.layers.1.mlp.down_proj"]

    def nan(mod, args, out):
        if runner.passes == 4:                      # pass 3: a decode of [a, b]
            out[0][1, 5] = float("nan")
        return out
    h = down.register_forward_hook(nan, prepend=True)
    runner.run({r: (PROMPTS[r], N_NEW) for r in ("req-a", "req-b")})
    h.remove()
    rec.close_all()
    got = by_request(ndir)
    if set(got) != {"req-a", "req-b"}:
        fail("%s nan: traces %s" % (label, sorted(got)))
    else:
        named_by_bisect(label + " nan in a batch", got["req-b"], 3, 1, "ffn_down", 5)
        p = bt("bisect", got["req-a"], check=False)
        if p.returncode != 0:
            fail("%s nan: the other request's trace is not clean: exit %d\n%s" % (label, p.returncode, p.stdout[-400:]))
        else:
            ok("%s: the request batched beside it has a clean trace" % label)

    # the radix cache: a prompt sharing req-a's first 6 tokens starts at 6,
    # its head's ids from the scheduler's batch on the stack
    xdir = os.path.join(WORK, label + "-radix-hit")
    runner, rec = hooked(folder, xdir)
    runner.radix = []
    runner.run({"req-a": (PROMPTS["req-a"], N_NEW)})
    e_prompt = PROMPTS["req-a"][:6] + [7, 8, 99]
    out = runner.run({"req-e": (e_prompt, N_NEW)})["req-e"]
    rec.close_all()
    plain, prec = hooked(folder, os.path.join(WORK, label + "-radix-plain"))
    alone = plain.run({"req-e": (e_prompt, N_NEW)})["req-e"]
    prec.close_all()
    path = by_request(xdir).get("req-e")
    st = steps_of(path) if path else []
    if not path or trace_tokens(path)[:2] != (e_prompt, out) or out != alone or not st or st[0][2] != 6:
        fail("%s radix hit: trace %s holds %s, first forward %s; answered %s, without the cache %s"
             % (label, path, path and trace_tokens(path)[:2], st[0][1:3] if st else None, out, alone))
    else:
        ok("%s: a prompt whose first 6 tokens hit the radix cache is recorded whole (its first forward at position "
           "6, the head's ids from the scheduler's batch), its answer the uncached one's" % label)
        stays_exact(label + " radix hit", path, "sglang", N_NEW)
    # a request past position 0 whose head no batch on the stack holds; a recorder failing at a pass
    rdir = os.path.join(WORK, label + "-radix")
    runner, rec = hooked(folder, rdir)
    warned.lines.clear()
    fb = sgl.ForwardBatch(["req-r"], sgl.torch.tensor([5, 6]), sgl.torch.tensor([4, 5]), False, [2], [4], [6])
    runner.m.forward(fb.input_ids, fb.positions, fb)
    rec.close_all()
    if traces_in(rdir) or not any("req-r starts at position 4" in w for w in warned.lines):
        fail("%s radix: traces %s, warnings %s" % (label, traces_in(rdir), warned.lines))
    else:
        ok("%s: a request starting at position 4 whose head's ids are nowhere on the stack is not recorded, "
           "with one warning" % label)
    with reducer_fails(rec):
        out = runner.run({"req-b": (PROMPTS["req-b"], N_NEW)})["req-b"]
    nxt = runner.run({"req-c": (PROMPTS["req-c"], N_NEW)})["req-c"]
    rec.close_all()
    got = by_request(rdir)
    sb, sc = got.get("req-b"), got.get("req-c")
    if out != solo["req-b"][1] or nxt != solo["req-c"][1] or not sb or trace_tokens(sb)[2].get("status") != "error" \
            or not sc or trace_tokens(sc)[2].get("status") != "ok" or trace_tokens(sc)[1] != nxt:
        fail("%s failure: answers %s %s (solo %s %s), traces %s" % (label, out, nxt, solo["req-b"][1], solo["req-c"][1],
                                                                  {k: trace_tokens(v)[2].get("status") for k, v in got.items()}))
    else:
        ok("%s: the recorder failing at a pass leaves the answers alone; that trace ends with status error, "
           "the next request is recorded whole" % label)


def check_launcher():
    d = os.path.join(WORK, "launch")
    _, args = bts.launch_args(["--trace-dir", d, "--", "--model-path", FOLDERS[0], "--port", "30000"])
    hooks = json.loads(args[args.index("--forward-hooks") + 1])
    if "--disable-cuda-graph" not in args or hooks != bts.spec(d) or args[:4] != ["--model-path", FOLDERS[0], "--port", "30000"]:
        fail("launcher: sglang.launch_server would get %s" % args)
    else:
        ok("launcher: SGLang's options go through, with --disable-cuda-graph and the hook spec added")
    for bad, why in ((["--tp", "2"], "one rank"), (["--speculative-algorithm", "EAGLE"], "speculative"),
                     (["--enable-torch-compile"], "torch.compile"), (["--forward-hooks", "[]"], "writes --forward-hooks"),
                     ([], "no --model-path")):
        argv = ["--trace-dir", d, "--"] + (bad if not bad or bad[0] == "--model-path" else ["--model-path", "m"] + bad)
        try:
            bts.launch_args(argv)
            fail("launcher: %s was accepted" % bad)
        except ValueError as e:
            if why not in str(e) or "\n" in str(e):
                fail("launcher: %s refused with %r" % (bad, str(e)))
    ok("launcher: more than one rank, speculative decoding, torch.compile, a --forward-hooks of its own and no "
       "--model-path are refused with one line")


for f in FOLDERS:
    check(f)
check_launcher()
done()
