"""bangtrace.torch: record a PyTorch decoder's forwards into a bangtrace trace.

    with bangtrace.torch.record(model, "run.db", model_path=folder) as rec:
        out = model.generate(ids, max_new_tokens=32, do_sample=False)
        rec.last_token(out[0, -1])

Forward hooks on the model's modules give each tensor a native run taps
(module paths become bangtrace's names through the HF weight names, the
table the folder loader uses); each tensor is copied on its device as it is
handed over, all of a step's tensors are reduced together when the step
ends (StepReducer), and the statistics are copied to the host once per
step together with the last logit row. The engine's chosen token of a step
is the next forward's input (or last_token for the last one).

What is tapped where, for transformers' Llama/Mistral/Qwen2/Qwen3 decoders
(DeepSeek-V2/V3's MLA: _install_mla; gpt-oss's experts and sinks:
_install_gptoss_experts, _install_sinks)
(and Qwen3-MoE: the router is ffn_gate_inp, the MoE block's output
ffn_moe_out, each expert's gate/up halves, down input and output its rows of
ffn_gate, ffn_up, ffn_act, ffn_down, watched while the fused experts module
runs with experts_implementation="eager"):
  the output of each module holding a weight (embed_tokens, the norms, v_proj,
  o_proj, gate/up/down_proj, lm_head: token_embd ... logits); attn_ctx and
  ffn_act are o_proj's and down_proj's inputs; attn_resid is the input of
  post_attention_layernorm, ffn_resid the next layer's input_layernorm input
  (model.norm's for the last layer); attn_q and attn_k are the outputs of the
  modeling module's apply_rotary_pos_emb (after RoPE, as the native engine
  taps them), patched while recording.
"""
import math
import os
import re
import sys
import threading
import warnings

import torch
import torch.nn.functional as F

from . import _lib
from ._lib import BangtraceError

_models = {}
_models_lock = threading.Lock()


def model_for(path):
    """One bangtrace model per path and process (its SHA-256 is computed once)."""
    path = os.path.realpath(os.fspath(path))
    with _models_lock:
        m = _models.get(path)
        if m is None:
            m = _models[path] = _lib.Model(path)
        return m


def seg_stats(x, width, seg=None, n_seg=1):
    """bangtrace's tap statistics of x (viewed as rows of width), reduced on
    x's device: a float64 tensor [n_seg, _lib.STAT_COUNT], no host sync.
    seg (a long tensor on x's device, one entry per row) puts each row in a
    segment, a request of a batch; None: all rows in one. A segment's first
    bad row is counted from its own first row (rows of a segment are
    contiguous, in order)."""
    x = x.detach()
    n = x.numel()
    if n == 0 or n % width:
        raise BangtraceError(f"a tensor of {n} elements is not rows of {width}")
    xf = x.reshape(-1, width).float()
    R, dev = xf.shape[0], xf.device
    if seg is None:
        seg = torch.zeros(R, dtype=torch.long, device=dev)
    elif seg.shape[0] != R:
        raise BangtraceError(f"{R} rows but {seg.shape[0]} segment ids")
    f64 = torch.float64
    fin = torch.isfinite(xf)
    inf = torch.tensor(math.inf, device=dev)
    z = torch.where(fin, xf, torch.zeros((), device=dev)).double()

    def add(v):              # per-row values summed per segment
        return torch.zeros(n_seg, dtype=f64, device=dev).index_add_(0, seg, v.double())

    def red(v, how, init):
        return torch.full((n_seg,), init, dtype=f64, device=dev).scatter_reduce_(0, seg, v.double(), how)
    rows = add(torch.ones(R, device=dev))
    nfin = add(fin.sum(1))
    mn = red(torch.where(fin, xf, inf).amin(1), "amin", math.inf)
    mx = red(torch.where(fin, xf, -inf).amax(1), "amax", -math.inf)
    some = nfin > 0
    nan_t = torch.full((), math.nan, dtype=f64, device=dev)
    mn = torch.where(some, mn, nan_t)
    mx = torch.where(some, mx, nan_t)
    mean = add(z.sum(1)) / nfin
    rms = torch.sqrt(add((z * z).sum(1)) / nfin)
    # the first non-finite element of a segment: its row within the segment
    bad = ~fin
    anyr = bad.any(1)
    col = bad.to(torch.uint8).argmax(1)
    start = torch.full((n_seg,), R, dtype=torch.long, device=dev).scatter_reduce_(
        0, seg, torch.arange(R, device=dev), "amin")
    local = torch.arange(R, device=dev) - start[seg]
    big = float(R) * width
    key = red(torch.where(anyr, (local * width + col).double(), torch.full((), big, dtype=f64, device=dev)),
              "amin", big)
    anys = key < big
    neg = torch.full((), -1.0, dtype=f64, device=dev)
    fcol = torch.where(anys, torch.remainder(key, width), neg)
    frow = torch.where(anys, torch.div(key, width, rounding_mode="floor"), neg)
    return torch.stack([
        rows * width, add(torch.isnan(xf).sum(1)), add((xf == math.inf).sum(1)), add((xf == -math.inf).sum(1)),
        nfin, mn, mx, torch.maximum(mn.abs(), mx.abs()), mean, rms, fcol, frow], dim=1)


def tap_stats(x, width):
    """seg_stats of x in one segment: a float64 tensor of _lib.STAT_COUNT values."""
    return seg_stats(x, width)[0]


class StepReducer:
    """A step's tapped tensors reduced together when the step ends: each
    tensor is copied as it is handed over (one device op; later in-place ops
    cannot change what was tapped), and at the end one concatenation and one
    set of segment reductions give every tensor's statistics per request
    segment at once. Reducing each tensor on its own costs some twenty small
    device ops per tensor, hundreds of tensors per step: on a CPU or a GPU
    that is launch overhead, not arithmetic. A step holding more than
    `budget` elements (a long prefill) reduces the rest of its tensors one
    by one as they come (seg_stats), so memory stays bounded.

    Rows of a tensor belong to segments by `seg` (one id per row, rows of a
    segment contiguous; every tensor of the step then has the same rows);
    seg None: one segment."""

    def __init__(self, budget=1 << 24):
        self.budget = budget
        self.begin()

    def begin(self, seg=None, n_seg=1):
        self.seg, self.n_seg = seg, n_seg
        self.items = []            # (slot, flat copy, width, rows)
        self.done = {}             # slot -> [n_seg, STAT_COUNT], reduced at once
        self.held = 0

    def add(self, slot, x, width):
        x = x.detach()
        n = x.numel()
        if n == 0 or n % width:
            raise BangtraceError(f"a tensor of {n} elements is not rows of {width}")
        if self.seg is not None and n // width != self.seg.shape[0]:
            raise BangtraceError(f"{n // width} rows but {self.seg.shape[0]} segment ids")
        if self.held + n > self.budget:
            self.done[slot] = seg_stats(x, width, self.seg, self.n_seg)
            return
        self.items.append((slot, x.reshape(-1).clone(), width, n // width))
        self.held += n

    def _lengths(self, dev):
        """Elements per group (item * n_seg + segment, in the concatenation's
        order: a tensor's rows are its segments' rows, in segment order) and
        each group's width."""
        widths = torch.tensor([w for _, _, w, _ in self.items], device=dev)
        if self.seg is None:
            counts = torch.tensor([[r] for _, _, _, r in self.items], device=dev)
        else:
            counts = torch.bincount(self.seg.to(dev), minlength=self.n_seg).reshape(1, -1)
        lengths = (widths.reshape(-1, 1) * counts).reshape(-1)
        return lengths, widths.repeat_interleave(self.n_seg)

    def finish(self):
        """slot -> float64 tensor [n_seg, STAT_COUNT] (on the tensors' device)."""
        out = dict(self.done)
        if not self.items:
            return out
        dev = self.items[0][1].device
        lengths, gw = self._lengths(dev)
        xf = torch.cat([v.float() for _, v, _, _ in self.items])
        f64 = torch.float64
        N = xf.numel()

        # three reductions over every group at once: sums, minima, maxima
        fin = torch.isfinite(xf)
        z = torch.where(fin, xf, torch.zeros((), device=dev)).double()
        sums = torch.segment_reduce(torch.stack([fin.double(), torch.isnan(xf).double(), (xf == math.inf).double(),
                                                 (xf == -math.inf).double(), z, z * z], dim=1),
                                    "sum", lengths=lengths, axis=0, initial=0.0)
        idx = torch.arange(N, device=dev, dtype=f64)
        big = torch.full((), float(N), dtype=f64, device=dev)
        inf = torch.full((), math.inf, dtype=f64, device=dev)
        xd = xf.double()
        mins = torch.segment_reduce(torch.stack([torch.where(fin, xd, inf), torch.where(fin, big, idx)], dim=1),
                                    "min", lengths=lengths, axis=0, initial=math.inf)
        mx = torch.segment_reduce(torch.where(fin, xd, -inf), "max", lengths=lengths, initial=-math.inf)
        nfin, mn, first = sums[:, 0], mins[:, 0], mins[:, 1]
        some = nfin > 0
        nan_t = torch.full((), math.nan, dtype=f64, device=dev)
        mn = torch.where(some, mn, nan_t)
        mx = torch.where(some, mx, nan_t)
        # the first non-finite element: its index in the concatenation, then in its group
        start = (torch.cumsum(lengths, 0) - lengths).double()
        anyb = first < N
        key = first - start
        neg = torch.full((), -1.0, dtype=f64, device=dev)
        gwd = gw.double()
        st = torch.stack([
            lengths.double(), sums[:, 1], sums[:, 2], sums[:, 3], nfin, mn, mx, torch.maximum(mn.abs(), mx.abs()),
            sums[:, 4] / nfin, torch.sqrt(sums[:, 5] / nfin),
            torch.where(anyb, torch.remainder(key, gwd), neg),
            torch.where(anyb, torch.div(key, gwd, rounding_mode="floor"), neg)], dim=1).reshape(
                len(self.items), self.n_seg, _lib.STAT_COUNT)
        for i, (slot, _, _, _) in enumerate(self.items):
            out[slot] = st[i]
        self.items = []
        self.held = 0
        return out


def merge_parts(parts):
    """One tensor's statistics from parts over disjoint rows (host numpy
    [k, STAT_COUNT], first bad rows absolute): counts add, min/max/absmax
    over all, mean and rms weighted by finite counts, the first non-finite
    value the one at the lowest row (then the earlier part)."""
    import numpy as np
    S = _lib
    o = np.full(S.STAT_COUNT, -1.0)
    for k in (S.STAT_N, S.STAT_NAN, S.STAT_PINF, S.STAT_NINF, S.STAT_FINITE):
        o[k] = parts[:, k].sum()
    fin = parts[:, S.STAT_FINITE]
    f = fin.sum()
    have = fin > 0
    if f > 0:
        o[S.STAT_MIN] = parts[have, S.STAT_MIN].min()
        o[S.STAT_MAX] = parts[have, S.STAT_MAX].max()
        o[S.STAT_ABSMAX] = parts[have, S.STAT_ABSMAX].max()
        o[S.STAT_MEAN] = (parts[have, S.STAT_MEAN] * fin[have]).sum() / f
        o[S.STAT_RMS] = math.sqrt((parts[have, S.STAT_RMS] ** 2 * fin[have]).sum() / f)
    else:
        o[[S.STAT_MIN, S.STAT_MAX, S.STAT_ABSMAX, S.STAT_MEAN, S.STAT_RMS]] = math.nan
    bad = np.nonzero(parts[:, S.STAT_FIRST_BAD_ROW] >= 0)[0]
    if len(bad):
        i = bad[np.argmin(parts[bad, S.STAT_FIRST_BAD_ROW])]     # the first of equal rows: the earlier part
        o[S.STAT_FIRST_BAD_COL], o[S.STAT_FIRST_BAD_ROW] = parts[i, S.STAT_FIRST_BAD_COL], parts[i, S.STAT_FIRST_BAD_ROW]
    return o


# what `a + b` reaches a TorchFunctionMode as (the method, or its dunder)
_ADDS = (torch.Tensor.add, torch.Tensor.__add__, torch.add)


def _layer_of(name):
    m = re.search(r"\.layers\.(\d+)\.", name + ".")
    return int(m.group(1)) if m else None


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


class Taps:
    """Forward hooks that hand a module's output (or input) to self._put(slot, x)."""

    def _put_rope(self, L, out):
        """A rotary module's (q, k) output: layer L's attn_q and attn_k
        (the layer whose attention called it: engines share one module)."""
        if L is None or not isinstance(out, (tuple, list)) or len(out) < 2:
            return
        for x, nm in ((out[0], "attn_q"), (out[1], "attn_k")):
            t = self.bm.tensor(f"blk.{L}.{nm}")
            if t is not None and x is not None:
                self._put(t.slot, x)

    def _out_hook(self, slot):
        def hook(mod, args, out):
            self._put(slot, _first(out))
        return hook

    def _in_hook(self, slot):
        def hook(mod, args):
            if args:
                self._put(slot, args[0])
        return hook


class record(Taps):
    """Context manager: hooks on enter, the trace closed on exit.

    model       a transformers causal LM (LlamaForCausalLM, Qwen2/Qwen3...)
    trace_path  the trace to write (an existing file is refused unless force)
    model_path  the model's folder or GGUF, as bangtrace loads it (default:
                model.config._name_or_path); its layout names the tensors and
                `bisect --reference` replays it
    arch        the expected GGUF architecture (default: the model file's)
    """

    def __init__(self, model, trace_path, model_path=None, arch=None, engine="transformers", force=False,
                 settings=None):
        self.model = model
        self.trace_path = os.fspath(trace_path)
        self.engine = engine
        self.force = force
        self.settings = settings
        cfg = getattr(model, "config", None)
        path = model_path or getattr(cfg, "_name_or_path", None)
        if not path or not os.path.exists(path):
            raise BangtraceError("bangtrace.torch.record: give model_path= (the model's folder or GGUF); "
                                 f"the model's config names {path!r}, which is not a path here")
        self.bm = model_for(path)
        if arch and arch != self.bm.arch:
            raise BangtraceError(f"bangtrace.torch.record: {path} is a {self.bm.arch} model, not {arch}")
        self.rec = None
        self._handles = []
        self._patched = []        # (module, function name, original)
        self._mla = self.bm.tensor("blk.0.attn_kv_latent") is not None
        self._gdn = {}            # gated delta net: layer -> its forward's token count
        self._gdn_put = {}        # gated delta net: layer -> its put(op, x, perm)
        self._mla_keep = {}       # MLA: layer -> the q projection's and kv_a norm's outputs of this forward
        self._parts = {}          # MoE: slot -> per-expert statistics of this step
        self._red = StepReducer()
        self._routes = {}         # MoE: layer -> (experts, weights) of this step's rows
        self._warned_experts = False
        self._layer = None
        self._step = None
        self._last = None
        self.steps = 0

    # -- mixture of experts --
    def _expert_names(self, mod, L):
        """Layer L's four expert ops (None when the model has none), and the
        one warning that an experts path other than transformers' eager
        per-expert loop leaves them untapped."""
        names = {op: self.bm.tensor(f"blk.{L}.{op}") for op in ("ffn_gate", "ffn_up", "ffn_act", "ffn_down")}
        if any(t is None for t in names.values()):
            return None
        impl = getattr(getattr(mod, "config", None), "_experts_implementation", None)
        if impl not in (None, "eager") and not self._warned_experts:
            self._warned_experts = True
            warnings.warn(f"bangtrace.torch.record: experts_implementation={impl!r} runs every expert in one "
                          "kernel, so the experts' ffn_gate, ffn_up, ffn_act and ffn_down are not tapped (the "
                          "router and ffn_moe_out are); load the model with experts_implementation=\"eager\" "
                          "for them", stacklevel=5)
        return names

    def _install_experts(self, mod, L):
        """A fused experts module (gate_up_proj [E, 2H, D], down_proj [E, D, H]):
        while it runs, F.linear is watched; a call whose weight is one expert's
        slice of gate_up_proj gives that expert's ffn_gate and ffn_up (its
        halves), one of down_proj its ffn_act (input) and ffn_down (output,
        before the routing weight). Each expert's rows are its tokens; the
        parts are merged per tensor at the end of the step (the first
        non-finite value at the lowest position, as the native recorder
        merges them). transformers' default grouped_mm path makes no such
        calls: load with experts_implementation="eager" for these taps."""
        names = self._expert_names(mod, L)
        if names is None:
            return 0
        state = {}

        def pre(m, args, kwargs):
            idx = kwargs.get("top_k_index", args[1] if len(args) > 1 else None)
            if self._step is None or idx is None:
                return
            state["idx"] = idx
            state["orig"] = F.linear
            F.linear = linear

        def post(m, args, kwargs, out):
            if "orig" in state:
                F.linear = state.pop("orig")
            state.pop("idx", None)

        def expert_of(w, p):
            if w.dim() != 2 or p.dim() != 3 or w.untyped_storage().data_ptr() != p.untyped_storage().data_ptr():
                return None
            off = w.storage_offset() - p.storage_offset()
            return off // p.stride(0) if off >= 0 and off % p.stride(0) == 0 else None

        def linear(x, w, b=None):
            y = state["orig"](x, w, b)
            x_id = expert_of(w, mod.gate_up_proj)
            is_up = x_id is not None
            if not is_up:
                x_id = expert_of(w, mod.down_proj)
            if x_id is None or self._step is None:
                return y
            # the expert's tokens, in the order the module gathered them
            tok = torch.where((state["idx"] == x_id).t())[1]
            if tok.numel() != x.reshape(-1, x.shape[-1]).shape[0]:
                return y
            if is_up:
                g, u = y.chunk(2, dim=-1)
                self._put_part(names["ffn_gate"], g, tok)
                self._put_part(names["ffn_up"], u, tok)
            else:
                self._put_part(names["ffn_act"], x, tok)
                self._put_part(names["ffn_down"], y, tok)
            return y
        self._handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(mod.register_forward_hook(post, with_kwargs=True))
        return 1

    def _install_gptoss_experts(self, mod, L):
        """gpt-oss's experts (GptOssExperts: gate_up_proj [E, D, 2H] with gate
        and up in alternate columns, down_proj [E, H, D], their biases,
        _apply_gate the clamped SwiGLU) compute with `@` and `+`, not
        F.linear: while the module runs, a TorchFunctionMode watches the adds
        of an expert's bias row, whose results are that expert's biased
        gate_up (ffn_gate the even columns, ffn_up the odd) and its down
        projection before the routing weight (ffn_down); _apply_gate's result
        is its ffn_act. Each expert's rows are its tokens in the order the
        loop gathered them (by top-k slot, then token)."""
        names = self._expert_names(mod, L)
        if names is None:
            return 0
        rec = self
        state = {}

        def tokens_of(e):
            return torch.where((state["idx"] == e).t())[1]

        def expert_of(b, p):
            """e when b is p[e] (a row of a 2-D parameter), else None."""
            if not isinstance(b, torch.Tensor) or b.dim() != p.dim() - 1 or \
                    b.untyped_storage().data_ptr() != p.untyped_storage().data_ptr():
                return None
            off = b.storage_offset() - p.storage_offset()
            return off // p.stride(0) if off >= 0 and off % p.stride(0) == 0 else None

        class Watch(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func in _ADDS and len(args) == 2 and rec._step is not None:
                    for b in args:
                        e = expert_of(b, mod.gate_up_proj_bias)
                        if e is not None:
                            state["e"] = e
                            tok = tokens_of(e)
                            if tok.numel() == out.reshape(-1, out.shape[-1]).shape[0]:
                                rec._put_part(names["ffn_gate"], out[..., ::2], tok)
                                rec._put_part(names["ffn_up"], out[..., 1::2], tok)
                            break
                        e = expert_of(b, mod.down_proj_bias)
                        if e is not None:
                            tok = tokens_of(e)
                            if tok.numel() == out.reshape(-1, out.shape[-1]).shape[0]:
                                rec._put_part(names["ffn_down"], out, tok)
                            break
                return out

        orig_gate = mod._apply_gate

        def apply_gate(gate_up):
            y = orig_gate(gate_up)
            e = state.get("e")
            if e is not None and rec._step is not None and "idx" in state:
                tok = tokens_of(e)
                if tok.numel() == y.reshape(-1, y.shape[-1]).shape[0]:
                    rec._put_part(names["ffn_act"], y, tok)
            return y

        def pre(m, args, kwargs):
            idx = kwargs.get("router_indices", args[1] if len(args) > 1 else None)
            if self._step is None or idx is None:
                return
            state["idx"] = idx
            state["mode"] = Watch()
            state["mode"].__enter__()

        def post(m, args, kwargs, out):
            if "mode" in state:
                state.pop("mode").__exit__(None, None, None)
            state.pop("idx", None)
            state.pop("e", None)
        mod._apply_gate = apply_gate
        self._patched.append((mod, "_apply_gate", orig_gate))
        self._handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(mod.register_forward_hook(post, with_kwargs=True))
        return 1

    def _install_sinks(self, amod, L):
        """Attention with a learned sink logit per head (gpt-oss): its share of
        each softmax (attn_sink, per position and head) is the last column of
        the probabilities the eager attention computes over the scores and
        the sink; a TorchFunctionMode takes them from F.softmax while the
        attention module runs. Another attention implementation (a fused
        kernel) computes no such tensor: then attn_sink is not tapped."""
        t = self.bm.tensor(f"blk.{L}.attn_sink")
        if t is None:
            return
        rec = self
        state = {}

        class Watch(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func is F.softmax and "done" not in state and rec._step is not None and out.dim() == 4 \
                        and out.shape[1] == t.width:
                    state["done"] = True
                    rec._put(t.slot, out[..., -1].permute(0, 2, 1).reshape(-1, t.width))
                return out

        self._watch(amod, Watch, state)

    # -- gated delta net (Qwen3.5, Qwen3-Next) --
    def _install_gdn(self, mod, L):
        """A gated delta net layer (transformers' Qwen3_5/Qwen3NextGatedDeltaNet):
        its computed tensors are the arguments and results of the modeling
        module's functions, patched while recording: the causal conv's input
        and output (ssm_qkv, ssm_conv; causal_conv1d_fn at a prefill,
        causal_conv1d_update at a decode step), the delta rule's q, k, v,
        g and beta (ssm_decay, ssm_beta), its output (ssm_core) and the
        state it returns (ssm_state); the gated norm's gate argument and
        output (ssm_z, ssm_norm), out_proj's output (ssm_out) and the conv
        state the cache keeps (ssm_conv_state, its last kernel-1 columns).
        ssm_q and ssm_k are the L2 norms the delta rule computes inside
        (use_qk_l2norm_in_kernel, eps 1e-6), of the key heads before they
        are repeated for the value heads. Qwen3.5's converter reorders the
        value heads (grouped by key head in HF, tiled in the GGUF the native
        engine computes); each per-value-head tensor is put in the native
        order, so a first bad index means the same element on both sides.
        Returns the number of tensors tapped."""
        names = {op: self.bm.tensor(f"blk.{L}.{op}") for op in (
            "ssm_qkv", "ssm_z", "ssm_beta", "ssm_decay", "ssm_conv", "ssm_conv_state", "ssm_q", "ssm_k", "ssm_v",
            "ssm_core", "ssm_state", "ssm_norm", "ssm_out")}
        if any(t is None for t in names.values()):
            return 0
        nk, nv, dk, dv = mod.num_k_heads, mod.num_v_heads, mod.head_k_dim, mod.head_v_dim
        K = mod.conv_kernel_size
        per = nv // nk
        if self.bm.arch in ("qwen35", "qwen35moe"):     # HF head k*per + j is native head j*nk + k
            heads = [(n % nk) * per + n // nk for n in range(nv)]
        else:
            heads = list(range(nv))
        dev = next(mod.parameters()).device
        vcols = [h * dv + d for h in heads for d in range(dv)]
        idx = {"h": torch.tensor(heads, device=dev), "v": torch.tensor(vcols, device=dev),
               "c": torch.tensor(list(range(2 * nk * dk)) + [2 * nk * dk + c for c in vcols], device=dev)}
        self._gdn[L] = {"T": 0}

        def put(op, x, perm=None):
            t = names[op]
            x = x.reshape(-1, t.width)
            self._put(t.slot, x.index_select(1, idx[perm]) if perm else x)

        def pre(m, args, kwargs):
            hs = args[0] if args else kwargs.get("hidden_states")
            self._layer = L
            self._gdn[L]["T"] = hs.shape[1]

        def post(m, args, kwargs, out):
            self._layer = None
            cp = kwargs.get("cache_params")
            if self._step is None or cp is None:
                return
            try:
                cs = cp.layers[L].conv_states[0]
            except (AttributeError, IndexError, TypeError):
                return
            if torch.is_tensor(cs) and cs.dim() == 3 and cs.shape[-1] >= K - 1:
                put("ssm_conv_state", cs[..., cs.shape[-1] - (K - 1):].transpose(1, 2), "c")

        def norm_hook(m, args, out):
            if self._step is not None and len(args) >= 2:
                put("ssm_z", args[1], "v")
                put("ssm_norm", _first(out), "v")
        self._handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(mod.register_forward_hook(post, with_kwargs=True))
        self._handles.append(mod.norm.register_forward_hook(norm_hook))
        self._handles.append(mod.out_proj.register_forward_hook(self._out_hook(names["ssm_out"].slot)))
        module = sys.modules.get(type(mod).__module__)

        def live():
            return self._step is not None and self._layer in self._gdn

        def conv(fn):
            def patched(hidden_states, *a, **kw):
                out = fn(hidden_states, *a, **kw)
                if live():
                    T = self._gdn[self._layer]["T"]        # a prefill's input may carry the cached columns first
                    put_l(self._layer, "ssm_qkv", hidden_states[..., -T:].transpose(1, 2), "c")
                    put_l(self._layer, "ssm_conv", out[..., -T:].transpose(1, 2), "c")
                return out
            return patched

        def rule(fn):
            def patched(query, key, value, *a, **kw):
                core, state = fn(query, key, value, *a, **kw)
                if live():
                    Lc, r = self._layer, query.shape[2] // nk
                    for op, x in (("ssm_q", query), ("ssm_k", key)):
                        x = x[:, :, ::r].float()
                        put_l(Lc, op, x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6))
                    put_l(Lc, "ssm_v", value, "v")
                    put_l(Lc, "ssm_beta", kw["beta"] if "beta" in kw else a[1], "h")
                    put_l(Lc, "ssm_decay", kw["g"] if "g" in kw else a[0], "h")
                    put_l(Lc, "ssm_core", core, "v")
                    if state is not None:
                        put_l(Lc, "ssm_state", state.index_select(1, idx["h"]))
                return core, state
            return patched

        def put_l(Lc, op, x, perm=None):      # the layer running now (one patch serves every layer)
            g = self._gdn_put.get(Lc)
            if g:
                g(op, x, perm)
        self._gdn_put[L] = put
        for name, wrap in (("causal_conv1d_fn", conv), ("causal_conv1d_update", conv),
                           ("torch_chunk_gated_delta_rule", rule), ("torch_recurrent_gated_delta_rule", rule)):
            fn = getattr(module, name, None)
            if fn is None or any(m is module and n == name for m, n, _ in self._patched):
                continue
            setattr(module, name, wrap(fn))
            self._patched.append((module, name, fn))
        return len(names)

    def _install_gate(self, amod, L):
        """Gated attention (Qwen3.5, Qwen3-Next: the q projection carries a
        per-head output gate): the gate is the argument of the attention
        module's torch.sigmoid, attn_ctx the other operand of the product
        with it, taken while the module runs (a TorchFunctionMode, as for
        the sinks); attn_gated is o_proj's input."""
        t = {op: self.bm.tensor(f"blk.{L}.{op}") for op in ("attn_gate", "attn_ctx", "attn_gated")}
        if any(x is None for x in t.values()):
            return
        rec = self
        state = {}
        sig = (torch.sigmoid, torch.Tensor.sigmoid)
        mul = (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__)

        class Watch(torch.overrides.TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if rec._step is None or "done" in state:
                    return out
                if func in sig and args and args[0].shape[-1] == t["attn_gate"].width:
                    state["sig"] = out
                    rec._put(t["attn_gate"].slot, args[0])
                elif func in mul and len(args) == 2 and "sig" in state and args[1] is state["sig"]:
                    state["done"] = True
                    rec._put(t["attn_ctx"].slot, args[0])     # attn_gated: o_proj's input
                return out

        self._watch(amod, Watch, state)

    def _watch(self, mod, mode_cls, state):
        """mode_cls (a TorchFunctionMode) active while mod runs a recorded
        forward; state (the mode's dict) cleared at each entry."""
        def pre(m, args, kwargs):
            if self._step is None:
                return
            state.clear()
            state["mode"] = mode_cls()
            state["mode"].__enter__()

        def post(m, args, kwargs, out):
            if "mode" in state:
                state.pop("mode").__exit__(None, None, None)
        self._handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(mod.register_forward_hook(post, with_kwargs=True))

    def _put_part(self, t, x, tok):
        """One expert's rows of t: statistics with the first bad row made the
        token's index."""
        st = tap_stats(x, t.width)
        fr = st[_lib.STAT_FIRST_BAD_ROW]
        row = torch.where(fr >= 0, tok[fr.clamp(min=0).long()].double(), fr)
        st = torch.cat([st[:_lib.STAT_FIRST_BAD_ROW], row.reshape(1)])
        self._parts.setdefault(t.slot, []).append(st)

    # -- hooks --
    def _route_hook(self, L):
        """A router returning (logits, scores, indices), as transformers 5's
        Qwen3-MoE and gpt-oss routers do: each token's experts by rank and
        the weights their outputs are scaled by, kept until the step ends."""
        def hook(mod, args, out):
            if self._step is not None and isinstance(out, (tuple, list)) and len(out) == 3:
                w, idx = out[1], out[2]
                if idx.dim() == 2 and w.shape == idx.shape:
                    self._routes[L] = (idx.detach(), w.detach())
        return hook

    def _put(self, slot, x):
        if self._step is None:
            return
        self._red.add(slot, x, self.bm.tensors[slot].width)

    def _install(self):
        bm, model = self.bm, self.model
        by_name = {t.name: t for t in bm.tensors}
        last = bm.n_layers - 1
        attn_layers = {}
        n_hooked = 0
        for name, mod in model.named_modules():
            params = getattr(mod, "_parameters", {})
            L = _layer_of(name)
            if "gate_up_proj" in params and "down_proj" in params and L is not None:
                if "gate_up_proj_bias" in params and hasattr(mod, "_apply_gate"):
                    n_hooked += self._install_gptoss_experts(mod, L)  # gpt-oss: `@` and bias adds
                else:
                    n_hooked += self._install_experts(mod, L)        # fused experts (transformers 5)
                continue
            if "A_log" in params and hasattr(mod, "out_proj") and L is not None:
                n_hooked += self._install_gdn(mod, L)                # gated delta net: its functions patched
                continue
            if "sinks" in params and L is not None:
                self._install_sinks(mod, L)                           # gpt-oss attention
            if name.endswith(".mlp") and L is not None and bm.tensor(f"blk.{L}.ffn_moe_out") is not None:
                self._handles.append(mod.register_forward_hook(self._out_hook(bm.tensor(f"blk.{L}.ffn_moe_out").slot)))
                continue
            if "weight" not in params:
                continue
            t = bm.weight_tensor(name + ".weight")
            if t is None:
                continue
            L = t.layer
            if t.op in ("attn_q", "attn_k"):      # tapped after RoPE: the rope patch
                attn_layers[name.rsplit(".", 1)[0]] = L
                continue
            self._handles.append(mod.register_forward_hook(self._out_hook(t.slot)))
            n_hooked += 1
            if t.op == "ffn_gate_inp":      # the router: its choice per token too (moe_routes)
                self._handles.append(mod.register_forward_hook(self._route_hook(L)))
            gated = bm.tensor(f"blk.{L}.attn_gated") is not None    # then o_proj reads attn_gated
            inp = {"attn_output": f"blk.{L}.attn_gated" if gated else f"blk.{L}.attn_ctx", "ffn_down": f"blk.{L}.ffn_act",
                   "ffn_norm": f"blk.{L}.attn_resid",
                   "attn_norm": f"blk.{L - 1}.ffn_resid" if L > 0 else None,
                   "output_norm": f"blk.{last}.ffn_resid"}.get(t.op)
            if inp and inp in by_name:
                self._handles.append(mod.register_forward_pre_hook(self._in_hook(by_name[inp].slot)))
        if n_hooked == 0:
            raise BangtraceError(f"bangtrace.torch.record: no module of {type(model).__name__} holds a weight "
                                 f"of {bm.path} (a model of another layout?)")
        mods = dict(model.named_modules())
        if self._mla:     # MLA attention modules by their latent norm (q_b_proj reads no tapped tensor's weight)
            for name, mod in mods.items():
                if getattr(mod, "kv_a_layernorm", None) is not None and _layer_of(name) is not None:
                    attn_layers[name] = _layer_of(name)
        for aname, L in attn_layers.items():
            amod = mods.get(aname)
            if amod is None:
                continue

            def pre(mod, args, L=L):
                self._layer = L

            def post(mod, args, out):
                self._layer = None
            self._handles.append(amod.register_forward_pre_hook(pre))
            self._handles.append(amod.register_forward_hook(post))
            if self._mla:
                self._install_mla(amod, L)
            else:
                self._patch_rope(sys.modules.get(type(amod).__module__))
                self._install_gate(amod, L)
        self._handles.append(model.register_forward_pre_hook(self._begin, with_kwargs=True))
        self._handles.append(model.register_forward_hook(self._end, with_kwargs=True))

    def _install_mla(self, amod, L):
        """Multi-head latent attention (DeepseekV2/V3 in transformers): attn_q
        is the q projection's output with its rope part rotated, the latent
        row attn_kv_latent the kv_a norm's output and the rotated shared key;
        both are put together where the modeling module applies RoPE, from
        the two outputs kept when they were computed. attn_q_abs and
        attn_ctx_latent belong to the absorbed computation bangtrace (and
        llama.cpp) run, which transformers does not: not recorded."""
        qmod = getattr(amod, "q_b_proj", None) or getattr(amod, "q_proj", None)
        kvn = getattr(amod, "kv_a_layernorm", None)
        if qmod is None or kvn is None:
            return
        keep = self._mla_keep.setdefault(L, {})
        self._handles.append(qmod.register_forward_hook(lambda m, a, o: keep.__setitem__("q", _first(o))))
        self._handles.append(kvn.register_forward_hook(lambda m, a, o: keep.__setitem__("kv", _first(o))))
        module = sys.modules.get(type(amod).__module__)
        for name in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave"):
            fn = getattr(module, name, None)
            if fn is None or any(m is module and n == name for m, n, _ in self._patched):
                continue

            def patched(q, k, *a, _fn=fn, **kw):
                qe, ke = _fn(q, k, *a, **kw)
                self._mla_put(qe, ke)
                return qe, ke
            setattr(module, name, patched)
            self._patched.append((module, name, fn))

    def _mla_put(self, q_rot, k_rot):
        L = self._layer
        keep = self._mla_keep.get(L) if L is not None else None
        if self._step is None or not keep or "q" not in keep or "kv" not in keep:
            return
        q, kv = keep.pop("q"), keep.pop("kv")
        B, H, T, R = q_rot.shape
        q = q.reshape(B, T, H, -1)
        q_full = torch.cat([q[..., : q.shape[-1] - R], q_rot.transpose(1, 2)], dim=-1)     # per head [nope, rope]
        lat = torch.cat([kv.reshape(B, T, -1), k_rot.transpose(1, 2).reshape(B, T, R)], dim=-1)
        for x, nm in ((q_full, "attn_q"), (lat, "attn_kv_latent")):
            t = self.bm.tensor(f"blk.{L}.{nm}")
            if t is not None:
                self._put(t.slot, x.reshape(-1, t.width))

    def _patch_rope(self, module):
        fn = getattr(module, "apply_rotary_pos_emb", None)
        if fn is None or any(m is module and n == "apply_rotary_pos_emb" for m, n, _ in self._patched):
            return
        bm = self.bm

        def patched(q, k, *a, **kw):
            qe, ke = fn(q, k, *a, **kw)
            L = self._layer
            if L is not None and self._step is not None:
                for x, nm in ((qe, "attn_q"), (ke, "attn_k")):
                    t = bm.tensor(f"blk.{L}.{nm}")
                    if t is not None:       # [B, heads, T, hd] -> rows of heads * hd
                        self._put(t.slot, x.transpose(1, 2).reshape(-1, t.width))
            return qe, ke
        module.apply_rotary_pos_emb = patched
        self._patched.append((module, "apply_rotary_pos_emb", fn))

    def _begin(self, mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            self._step = None
            return
        if ids.dim() == 2 and ids.shape[0] != 1:
            raise BangtraceError(f"bangtrace.torch.record: a batch of {ids.shape[0]} sequences; "
                                 "record one request at a time")
        cp = kwargs.get("cache_position")
        pkv = kwargs.get("past_key_values")
        if cp is not None:
            pos0 = int(cp.reshape(-1)[0])
        elif pkv is not None and hasattr(pkv, "get_seq_length"):
            pos0 = int(pkv.get_seq_length())
        else:
            pos0 = 0
        self._step = (ids.reshape(-1).tolist(), pos0)
        self._red.begin()
        self._parts = {}
        self._routes = {}

    def _end(self, mod, args, kwargs, out):
        if self._step is None:
            return
        tokens, pos0 = self._step
        self._step = None
        logits = getattr(out, "logits", None)
        if logits is None:
            logits = _first(out)
        rows = logits.reshape(-1, logits.shape[-1])
        pending = {k: v[0] for k, v in self._red.finish().items()}
        lg = self.bm.tensor("logits")
        if lg is not None and rows.shape[0] != len(tokens):
            pending.pop(lg.slot, None)      # logits_to_keep: not every row was computed
        n = len(self.bm.tensors)
        dev = rows.device
        full = torch.full((n, _lib.STAT_COUNT), -1.0, dtype=torch.float64, device=dev)
        if pending:
            idx = torch.tensor(list(pending.keys()), device=dev)
            full[idx] = torch.stack([v.to(dev) for v in pending.values()])
        part_slots = [(slot, len(v)) for slot, v in self._parts.items()]
        parts = [p.to(dev) for v in self._parts.values() for p in v]
        tail = torch.stack(parts).reshape(-1) if parts else full.new_zeros(0)
        routes = [(L, idx.shape) for L, (idx, w) in self._routes.items() if idx.shape[0] == len(tokens)]
        rt = [x.to(dev).double().reshape(-1) for L, _ in routes for x in self._routes[L]]
        host = torch.cat([full.reshape(-1), tail] + rt + [rows[-1].detach().double()]).cpu().numpy()   # the one copy
        S = _lib.STAT_COUNT
        st = host[: n * S].copy()
        o = n * S
        for slot, k in part_slots:
            st[slot * S:(slot + 1) * S] = merge_parts(host[o: o + k * S].reshape(k, S))
            o += k * S
        got = []
        for L, shape in routes:
            m = shape[0] * shape[1]
            got.append((L, host[o: o + m].reshape(shape), host[o + m: o + 2 * m].reshape(shape)))
            o += 2 * m
        row = host[o:].astype("float32")
        self.rec.forward(tokens, pos0, st, row, 1)
        for L, idx, w in got:
            self.rec.moe_routes(L, idx, w)
        self._routes = {}
        self._parts = {}
        self._last = tokens
        self.steps += 1

    # -- the context --
    def __enter__(self):
        dtype = next(self.model.parameters()).dtype
        device = next(self.model.parameters()).device
        settings = self.settings or f"dtype={str(dtype).replace('torch.', '')} device={device}"
        impl = getattr(getattr(self.model, "config", None), "_experts_implementation", None)
        if impl and not self.settings and any(t.op == "ffn_moe_out" for t in self.bm.tensors):
            settings += f" experts={impl}"       # which experts path ran (eager: every expert's ops tapped)
        self.rec = _lib.Recording(self.bm, self.trace_path, self.engine, settings, self.force)
        try:
            try:
                import transformers
                self.rec.meta("engine_version", f"transformers {transformers.__version__}, torch {torch.__version__}")
            except ImportError:
                self.rec.meta("engine_version", f"torch {torch.__version__}")
            self.rec.meta("dtype", str(dtype).replace("torch.", ""))
            self._install()
        except BaseException:
            self._remove()
            self.rec.close("error")
            raise
        return self

    def last_token(self, token, logprob=float("nan")):
        """The token chosen from the last forward (generate's last output)."""
        self.rec.sampled(int(token), logprob)

    def _remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        for module, name, fn in self._patched:
            setattr(module, name, fn)
        self._patched = []

    def __exit__(self, et, ev, tb):
        self._remove()
        status = "ok" if et is None else "interrupted" if issubclass(et, KeyboardInterrupt) else "error"
        self.rec.close(status, "length" if et is None else None)
        return False
