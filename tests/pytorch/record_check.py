"""record_check.py BANGTRACE WORKDIR FOLDER... - bangtrace.torch against the
native engine (run by tests/pytorch_record.sh in the torch environment).

For each tiny random-weight HF folder (model_type set, transformers loads it):
1. f32: a manual greedy loop (prefill computing every row's logits, then
   decode steps) recorded by bangtrace.torch.record; the prefill's statistics,
   as handed to libbangtrace, agree with `bangtrace forward --dump` of the same
   tokens within 1e-4 per named tensor, every name on both sides; the trace
   reads back with every tensor tapped at every step, and `bisect --reference`
   finds no departure, top-1 agreeing on every step.
2. bf16 (first folder; and Qwen3.5, check_hybrid_state): generate() recorded; `bisect --reference` names no op;
   a forward hook writing NaN into one module's output at one step and index
   is named by `bisect` (step, layer, op, index exactly) and by
   `bisect --reference` (the departing tensor).
Exit 0 all good, 1 with FAIL lines."""
import json
import os
import sqlite3
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bt, compare, done, fail, named_by_bisect, native, ok, stays_exact  # noqa: E402
import bangtrace.torch as btt  # noqa: E402
from bangtrace import _lib  # noqa: E402

WORK = sys.argv[2]
FOLDERS = sys.argv[3:]
PROMPT = [1, 17, 40, 9, 200, 5, 77, 12, 33]


def capture(rec):
    """Keep what bangtrace.torch hands libbangtrace at each forward."""
    seen = []
    orig = rec.rec.forward

    def wrapped(tokens, pos0, stats, logits, n_rows):
        seen.append((list(tokens), pos0, np.array(stats).reshape(-1, _lib.STAT_COUNT)))
        return orig(tokens, pos0, stats, logits, n_rows)
    rec.rec.forward = wrapped
    return seen


def is_mla(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f).get("model_type") in ("deepseek_v2", "deepseek_v3")


def is_moe(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f).get("model_type") == "qwen3_moe"


def is_gptoss(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f).get("model_type") == "gpt_oss"


def model_type(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f).get("model_type")


def is_hybrid(folder):
    return model_type(folder) in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


def is_hybrid_moe(folder):
    return model_type(folder) in ("qwen3_5_moe_text", "qwen3_next")


def load(folder, dtype, **kw):
    if is_moe(folder) or is_mla(folder) or is_gptoss(folder) or is_hybrid_moe(folder):      # the experts' own taps need the per-expert loop
        kw.setdefault("experts_implementation", "eager")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw).eval()


def count_forwards(model):
    """The model's forwards counted (calls["n"]: the running one, from 0) and
    the hook's handle."""
    calls = {"n": -1}

    def top(mod, args, kwargs):
        calls["n"] += 1
    return calls, model.register_forward_pre_hook(top, with_kwargs=True)


def generate_recorded(model, trace, n_new):
    """generate() n_new tokens of PROMPT greedily, recorded into trace."""
    with torch.no_grad(), btt.record(model, trace) as rec:
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=n_new, do_sample=False, min_new_tokens=n_new)
        rec.last_token(out[0, -1])


def greedy_loop(model, n_new):
    ids = torch.tensor([PROMPT])
    out = model(input_ids=ids, use_cache=True)
    past, toks = out.past_key_values, list(PROMPT)
    for _ in range(n_new):
        nxt = int(out.logits[0, -1].argmax())
        toks.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
    return toks, int(out.logits[0, -1].argmax())


def check_f32(folder):
    label = os.path.basename(folder)
    model = load(folder, torch.float32)
    trace = os.path.join(WORK, label + "-f32.db")
    with torch.no_grad(), btt.record(model, trace) as rec:
        seen = capture(rec)
        toks, last = greedy_loop(model, 4)
        rec.last_token(last)
    names = [t.name for t in rec.bm.tensors]
    ref = native(folder, PROMPT, os.path.join(WORK, label + "-dump"))
    if ref is None:
        return
    # MLA: the absorbed computation's tensors exist in bangtrace's (and llama.cpp's) engine, not in transformers'
    absorbed = tuple(n for n in names if n.endswith((".attn_q_abs", ".attn_ctx_latent")))
    worst, worst_name = compare(label, names, seen[0][2], ref, absent_ok=absorbed)
    ok("%s f32: prefill statistics of %d tensors agree with the native engine's (largest rel %.2g at %s)%s"
       % (label, len(names) - len(absorbed), worst, worst_name,
          "; the absorbed MLA ops (%d) are not transformers'" % len(absorbed) if absorbed else ""))
    if is_moe(folder) or is_gptoss(folder) or is_hybrid_moe(folder) or is_mla(folder):
        check_routes(label, trace, os.path.join(WORK, label + "-dump"), is_gptoss(folder), folder)
    for step, (_, _, st) in enumerate(seen):
        bad = [names[i] for i in range(len(names)) if st[i][_lib.STAT_N] < 0 and names[i] not in absorbed]
        if bad:
            fail("%s: step %d misses %s" % (label, step, bad[:4]))
    db = sqlite3.connect(trace)
    nt = db.execute("select count(*) from tensors").fetchone()[0]
    ns = db.execute("select count(*) from steps").fetchone()[0]
    ng = db.execute("select count(*) from tokens where role = 'gen'").fetchone()[0]
    eng = db.execute("select value from meta where key = 'engine'").fetchone()[0]
    db.close()
    if (nt, ns, ng, eng) != (len(names), 5, 5, "transformers"):
        fail("%s: trace has %d tensors, %d steps, %d generated tokens, engine %s; want %d, 5, 5, transformers"
             % (label, nt, ns, ng, eng, len(names)))
    stays_exact(label + " f32", trace, "transformers", 5)


def check_routes(label, trace, dump, gptoss, folder=None):
    """The prefill's moe_routes (the routers' choices, through
    bangtrace_moe_routes) against the native engine's forward over the same
    tokens: each token's experts are the ones the native dump routed it to,
    and the weights are the native router logits' (softmax, top-k,
    renormalised for Qwen3-MoE; top-k, then softmax over them for gpt-oss;
    DeepSeek-V3's sigmoid scores of the chosen experts, renormalised when
    norm_topk_prob, times routed_scaling_factor) within 1e-5."""
    cfg = {}
    if folder:
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
    sigmoid = cfg.get("scoring_func") == "sigmoid"
    with open(os.path.join(dump, "meta.json")) as f:
        pos = json.load(f)["expert_positions"]
    native_sets = {}
    for k, ps in pos.items():
        if ".ffn_act.expert[" not in k:
            continue
        L, e = int(k.split(".")[1]), int(k.split("[")[1].rstrip("]"))
        for p in ps:
            native_sets.setdefault((L, p), set()).add(e)
    db = sqlite3.connect(trace)
    rows = db.execute("select layer, pos, rank, expert, weight from moe_routes where step = 0 order by layer, pos, rank").fetchall()
    db.close()
    got = {}
    for L, p, r, e, w in rows:
        got.setdefault((L, p), []).append((e, w))
    if not rows or set(got) != set(native_sets):
        fail("%s routes: recorded for %d (layer, position) pairs, the native engine routed %d"
             % (label, len(got), len(native_sets)))
        return
    worst = 0.0
    for (L, p), ew in got.items():
        if {e for e, _ in ew} != native_sets[(L, p)]:
            fail("%s routes: layer %d position %d went to %s, natively to %s" % (label, L, p, [e for e, _ in ew],
                                                                                sorted(native_sets[(L, p)])))
            return
        lg = np.fromfile(os.path.join(dump, "blk.%d.ffn_gate_inp.f32" % L), dtype=np.float32).astype(np.float64)
        lg = lg.reshape(-1, lg.size // (max(q for _, q in got) + 1))[p]
        ids = [e for e, _ in ew]
        if gptoss:
            z = np.exp(lg[ids] - lg[ids].max())
            want = z / z.sum()
        elif sigmoid:
            sc = 1 / (1 + np.exp(-lg[ids]))
            want = (sc / sc.sum() if cfg.get("norm_topk_prob") else sc) * cfg.get("routed_scaling_factor", 1.0)
        else:
            pr = np.exp(lg - lg.max())
            pr /= pr.sum()
            want = pr[ids] / pr[ids].sum()
        worst = max(worst, max(abs(w - x) for (_, w), x in zip(ew, want)))
    if worst > 1e-5:
        fail("%s routes: weights depart from the native router's by %.2g" % (label, worst))
    else:
        ok("%s f32: moe_routes of the prefill (%d tokens x %d layers) route each token to the native engine's experts,"
           " weights within %.1g" % (label, len({p for _, p in got}), len({L for L, _ in got}), worst))


def check_bf16(folder):
    label = os.path.basename(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    clean = os.path.join(WORK, label + "-bf16.db")
    generate_recorded(model, clean, 6)
    stays_exact(label + " bf16", clean, what="bisect --reference names no op on the clean run")
    # a broken kernel: NaN into layer 1's down_proj output at the third forward, element (0, 5)
    L, STEP, COL = 1, 3, 5

    def poison(mod, args, out):
        if calls["n"] == STEP:
            out = out.clone()
            out.reshape(-1, out.shape[-1])[0, COL] = float("nan")
            return out
    bad = os.path.join(WORK, label + "-bf16-nan.db")
    calls, h1 = count_forwards(model)
    h2 = model.model.layers[L].mlp.down_proj.register_forward_hook(poison)
    try:
        generate_recorded(model, bad, 6)
    finally:
        h1.remove()
        h2.remove()
    named_by_bisect(label + " bf16", bad, STEP, L, "ffn_down", COL)


def check_hybrid_state(folder):
    """A gated delta net model in bf16: bisect --reference names no op on a
    clean generate(); a broken delta-rule kernel that returns layer 0's
    state with one NaN (HF value head 1, row 2, column 5) at the fourth
    forward is named by bisect as ssm_state at step 3, that element's value
    head (in the native engine's order: Qwen3.5's converter tiles the heads
    HF groups by key head), row and column, and by bisect --reference."""
    label = os.path.basename(folder)
    model = load(folder, torch.bfloat16)
    clean = os.path.join(WORK, label + "-bf16.db")
    generate_recorded(model, clean, 6)
    stays_exact(label + " bf16", clean, what="bisect --reference names no op on the clean run")
    la = model.model.layers[0].linear_attn
    mod = sys.modules[type(la).__module__]
    orig = mod.torch_recurrent_gated_delta_rule
    STEP, H, ROW, COL = 3, 1, 2, 5
    nk, nv, dk, dv = la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim
    per = nv // nk
    native_head = (H % per) * nk + H // per if model_type(folder) != "qwen3_next" else H
    cur = {}

    def broken(*a, **kw):
        core, state = orig(*a, **kw)
        if calls["n"] == STEP and cur.get("in") and state is not None:
            state = state.clone()
            state[0, H, ROW, COL] = float("nan")
        return core, state
    calls, h = count_forwards(model)
    hs = [h, la.register_forward_pre_hook(lambda m, a: cur.__setitem__("in", True)),
          la.register_forward_hook(lambda m, a, o: cur.__setitem__("in", False))]
    mod.torch_recurrent_gated_delta_rule = broken
    bad = os.path.join(WORK, label + "-state-nan.db")
    try:
        generate_recorded(model, bad, 6)
    finally:
        mod.torch_recurrent_gated_delta_rule = orig
        for h in hs:
            h.remove()
    named_by_bisect(label + " bf16 state", bad, STEP, 0, "ssm_state", COL)
    p = bt("bisect", "--json", bad, check=False)
    st = (json.loads(p.stdout).get("first_nonfinite") or {}).get("state")
    want = {"head": native_head, "row": ROW, "column": COL}
    if st != want:
        fail("%s: bisect --json names the state element %s; want %s (HF value head %d)" % (label, st, want, H))
    elif "value head %d, row %d, column %d" % (native_head, ROW, COL) not in bt("bisect", bad, check=False).stdout:
        fail("%s: bisect does not say value head %d, row %d, column %d" % (label, native_head, ROW, COL))
    else:
        ok("%s bf16 state: bisect names value head %d (HF's %d), row %d, column %d of the state"
           % (label, native_head, H, ROW, COL))


def check_mla(folder):
    """DeepSeek MLA: a NaN written by the kv_a norm (the latent) at the third
    forward is named by bisect in attn_kv_latent (step 2, that layer, the
    column) and by bisect --reference."""
    label = os.path.basename(folder)
    model = load(folder, torch.float32)
    L, STEP, COL = 1, 2, 6

    def poison(mod, args, out):
        if calls["n"] == STEP:
            out.reshape(-1, out.shape[-1])[0, COL] = float("nan")
    bad = os.path.join(WORK, label + "-nan.db")
    calls, h = count_forwards(model)
    hs = [h]
    with torch.no_grad(), btt.record(model, bad) as rec:
        hs.append(model.model.layers[L].self_attn.kv_a_layernorm.register_forward_hook(poison))
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=4, do_sample=False, min_new_tokens=4)
        rec.last_token(out[0, -1])
    for h in hs:
        h.remove()
    named_by_bisect(label + " latent", bad, STEP, L, "attn_kv_latent", COL)


def check_moe(folder):
    """Qwen3-MoE beyond the f32 agreement: a NaN written by one expert's down
    projection is named by bisect (step, layer, ffn_down) and by bisect
    --reference; transformers' default grouped_mm experts are refused no
    data but warn that the experts' own taps are missing."""
    import warnings
    label = os.path.basename(folder)
    model = load(folder, torch.float32)
    ids = torch.tensor([PROMPT])
    experts = model.model.layers[1].mlp.experts
    STEP = 2
    orig = torch.nn.functional.linear

    def broken(*a, **kw):      # a broken down-projection kernel: NaN at the step's first down call, column 3
        y = orig(*a, **kw)
        w = a[1]
        if calls["n"] == STEP and w.dim() == 2 and w.untyped_storage().data_ptr() == \
                experts.down_proj.untyped_storage().data_ptr():
            y = y.clone()
            y.reshape(-1, y.shape[-1])[0, 3] = float("nan")
        return y

    def pre(mod, args, kwargs):
        torch.nn.functional.linear = broken

    def post(mod, args, kwargs, out):
        torch.nn.functional.linear = orig
    bad = os.path.join(WORK, label + "-nan.db")
    calls, h = count_forwards(model)
    hs = [h, experts.register_forward_pre_hook(pre, with_kwargs=True),
          experts.register_forward_hook(post, with_kwargs=True)]
    try:
        generate_recorded(model, bad, 4)
    finally:
        for h in hs:
            h.remove()
    named_by_bisect(label + " expert", bad, STEP, 1, "ffn_down", 3)
    # transformers' default experts path: one kernel for all experts
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 experts_implementation="grouped_mm").eval()
    tr = os.path.join(WORK, label + "-grouped.db")
    with warnings.catch_warnings(record=True) as w, torch.no_grad(), btt.record(model, tr) as rec:
        warnings.simplefilter("always")
        seen = capture(rec)
        out = model.generate(ids, max_new_tokens=2, do_sample=False, min_new_tokens=2)
        rec.last_token(out[0, -1])
    names = [t.name for t in rec.bm.tensors]
    st = seen[0][2]
    absent = [n for i, n in enumerate(names) if st[i][_lib.STAT_N] < 0 and n != "logits"]
    want = sorted("blk.%d.%s" % (L, op) for L in range(2) for op in ("ffn_gate", "ffn_up", "ffn_act", "ffn_down"))
    warned = any("experts_implementation" in str(x.message) for x in w)
    db = sqlite3.connect(tr)
    settings = db.execute("select value from meta where key = 'engine_settings'").fetchone()[0]
    db.close()
    if sorted(absent) != want or not warned or "experts=grouped_mm" not in settings:
        fail("%s grouped_mm: not recorded %s (want the experts' own ops), warned %s, engine_settings %r"
             % (label, absent, warned, settings))
    else:
        ok("%s with grouped_mm experts: router and ffn_moe_out recorded, the experts' own ops not, with a warning;"
           " engine_settings says experts=grouped_mm"
           % label)


def check_gptoss(folder):
    """gpt-oss beyond the f32 agreement (its experts' `@` and bias adds and
    the sinks' softmax share watched): a NaN written by one expert's clamped
    SwiGLU at the third forward is named by bisect (step, layer, ffn_act,
    column) and by bisect --reference."""
    label = os.path.basename(folder)
    model = load(folder, torch.float32)
    L, STEP, COL = 1, 2, 3
    experts = model.model.layers[L].mlp.experts
    orig = experts._apply_gate

    def broken(gate_up):       # a broken SwiGLU kernel: NaN in the step's first expert, first row, column COL
        y = orig(gate_up)
        if calls["n"] == STEP and not calls.get("hit"):
            calls["hit"] = True
            y = y.clone()
            y.reshape(-1, y.shape[-1])[0, COL] = float("nan")
        return y
    experts._apply_gate = broken
    calls, h = count_forwards(model)
    bad = os.path.join(WORK, label + "-nan.db")
    try:
        generate_recorded(model, bad, 4)
    finally:
        h.remove()
        experts._apply_gate = orig
    named_by_bisect(label + " expert", bad, STEP, L, "ffn_act", COL)


def check_reducer():
    """StepReducer (every tensor of a step reduced at once, per segment)
    equals bangtrace's own reducer (libbangtrace's bangtrace_stats) on each
    tensor and segment, NaN, +-Inf and the first bad index included; over
    its budget it reduces tensor by tensor, with the same result."""
    torch.manual_seed(3)
    R = 7
    seg = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    xs = []
    for i, w in enumerate((8, 5, 16, 1, 33)):
        x = torch.randn(R, w) * (i + 1)
        if i == 1:
            x[4, 3], x[3, 0] = float("nan"), float("inf")
        if i == 2:
            x[6, 15] = -float("inf")
        if i == 4:
            x[1, 7] = x[5, 2] = float("nan")
        xs.append((i, x, w))
    worst = 0.0
    for budget in (1 << 24, 60):
        red = btt.StepReducer(budget=budget)
        for segs, n_seg in ((None, 1), (seg, 3)):
            red.begin(segs, n_seg)
            for i, x, w in xs:
                red.add(i, x, w)
            out = red.finish()
            for i, x, w in xs:
                for g in range(n_seg):
                    rows = x if segs is None else x[segs == g]
                    want = np.array(_lib.stats(rows.contiguous().numpy().astype(np.float32), _lib.F32,
                                               rows.shape[0], w))
                    got = out[i][g].numpy()
                    # bangtrace_stats gives mean and rms as floats: 1e-6 relative; the rest exact
                    same = (np.isnan(want) & np.isnan(got)) | (np.abs(want - got) <= 1e-6 * np.maximum(1, np.abs(want)))
                    if not same.all():
                        fail("StepReducer budget %d, tensor %d, segment %d: %s; bangtrace_stats %s"
                             % (budget, i, g, got.tolist(), want.tolist()))
                    worst = max(worst, float(np.nanmax(np.abs(want - got))))
    ok("StepReducer equals bangtrace_stats per tensor and segment (NaN, Inf, first bad index; largest diff %.2g)"
       % worst)


check_reducer()
for i, folder in enumerate(FOLDERS):
    check_f32(folder)
    if i == 0:
        check_bf16(folder)
    if is_moe(folder):
        check_moe(folder)
    if is_mla(folder):
        check_mla(folder)
    if is_gptoss(folder):
        check_gptoss(folder)
    if model_type(folder) == "qwen3_5_text":
        check_hybrid_state(folder)
done()
