"""bangtrace.vllm: record a vLLM deployment per request (a vLLM plugin).

    BANGTRACE_VLLM=/srv/traces vllm serve /models/qwen3-folder --enforce-eager

With the package installed (it declares the `vllm.general_plugins` entry
point, which vLLM loads in every process, the model's workers included) and
BANGTRACE_VLLM naming a directory, every request vLLM runs becomes one
bangtrace trace, DIR/<request id>.db (an existing file is never replaced: a
-2, -3 ... suffix is added), the file `bangtrace run --trace` writes:
`bisect`, `bisect --reference` (vLLM against the exact native engine on the
same folder), `report`, `browse`, `diff` and `export` read it.

How a step is recorded: the batch's rows belong to requests in the order of
the model runner's input batch, each request's scheduled tokens contiguous;
every tapped tensor is copied on its device as it comes, all of them are
reduced per request segment when the step ends (StepReducer), and the
statistics, the logit rows, the input ids and positions come to the host in
one copy per step, after vLLM sampled. Each
request's trace then gets its forward (its own rows only) and its sampled
token. A prompt prefilled in chunks is one prefill step (the chunks'
statistics merged). A request preempted and recomputed starts a new trace.

What works: eager mode (`enforce_eager=True` / `--enforce-eager`), one
tensor-parallel rank, no speculative decoding; the dense Llama, Mistral,
Qwen2 and Qwen3 decoders (those bangtrace loads from a Hugging Face folder),
Qwen3-MoE without its experts' own ops (vLLM's fused MoE kernel runs
them all at once: the router and ffn_moe_out are recorded), DeepSeek-V2/V3
without the absorbed attention its MLA kernels run inside (_install_mla),
gpt-oss without its experts' ops and its sinks' share, and the gated
delta net hybrids Qwen3.5 / Qwen3-Next without the conv, q, k and v their
fused op computes inside (_install_gdn): each request's recurrent states are
read from its mamba cache slot, which a state_slot event names.
torch.compile and CUDA graphs capture the forward without its hooks, so
those modes are refused when the model loads, with one line; so are
tensor/pipeline parallelism and speculative decoding. A request whose prompt
hit vLLM's prefix cache starts past position 0: its trace's prompt is the
whole prompt, the cached head marked as a prefix-cache hit (kv_access), the
taps those of the rows vLLM computed. doc/pytorch.md.
"""
import atexit
import logging
import os

from ._serving import Refused, RequestTraces, guard as _guard, merge_all as _merge_all
from .torch import Taps, _first, _layer_of

ENV = "BANGTRACE_VLLM"
log = logging.getLogger("bangtrace.vllm")
_patched = False


def register():
    """The vllm.general_plugins entry point: does nothing unless BANGTRACE_VLLM
    names a directory; then patches vLLM's model runner (in this process)."""
    global _patched
    d = os.environ.get(ENV)
    if not d or _patched:
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    classes = [GPUModelRunner]
    try:
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner
        classes.append(CPUModelRunner)
    except Exception:       # a build without the CPU runner
        pass
    for cls in classes:
        for name, wrap in (("load_model", _wrap_load), ("execute_model", _wrap_execute),
                           ("sample_tokens", _wrap_sample), ("shutdown", _wrap_shutdown)):
            fn = cls.__dict__.get(name)
            if fn is not None and not getattr(fn, "_bangtrace", False):
                w = wrap(fn)
                w._bangtrace = True
                setattr(cls, name, w)
    _patched = True


def _once(fn, name, body):
    """Wrap fn so that body runs once per outermost call (a subclass's method
    calling super()'s is one call)."""
    flag = "_bangtrace_in_" + name

    def w(self, *a, **kw):
        if getattr(self, flag, False):
            return fn(self, *a, **kw)
        setattr(self, flag, True)
        try:
            return body(fn, self, *a, **kw)
        finally:
            setattr(self, flag, False)
    w.__name__, w.__doc__ = fn.__name__, fn.__doc__
    return w


def _wrap_load(fn):
    def body(fn, runner, *a, **kw):
        out = fn(runner, *a, **kw)
        d = os.environ.get(ENV)           # read per engine: one without it is not recorded
        if d and getattr(runner, "_bangtrace", None) is None:
            runner._bangtrace = _Recorder(runner, d)
        return out
    return _once(fn, "load", body)


def _wrap_execute(fn):
    def body(fn, runner, scheduler_output, *a, **kw):
        rec = getattr(runner, "_bangtrace", None)
        if rec is None:
            return fn(runner, scheduler_output, *a, **kw)
        rec.begin(scheduler_output)
        try:
            out = fn(runner, scheduler_output, *a, **kw)
        except BaseException:
            rec.abort()
            raise
        if out is not None:         # a step that sampled inside execute_model
            rec.end(out)
        return out
    return _once(fn, "execute", body)


def _wrap_sample(fn):
    def body(fn, runner, *a, **kw):
        out = fn(runner, *a, **kw)
        rec = getattr(runner, "_bangtrace", None)
        if rec is not None:
            rec.end(out)
        return out
    return _once(fn, "sample", body)


def _wrap_shutdown(fn):
    def body(fn, runner, *a, **kw):
        rec = getattr(runner, "_bangtrace", None)
        if rec is not None:
            rec.close_all()
        return fn(runner, *a, **kw)
    return _once(fn, "shutdown", body)


class _Request:
    __slots__ = ("rec", "tokens", "pos0", "stats", "path")

    def __init__(self, rec, path):
        self.rec, self.path = rec, path
        self.tokens, self.pos0, self.stats = [], None, None


class _Recorder(Taps, RequestTraces):
    """The hooks on one model runner's model and the traces of its requests."""

    def __init__(self, runner, directory):
        import torch
        from . import _lib
        from .torch import model_for, StepReducer
        self.torch, self.lib = torch, _lib
        self.runner = runner
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        cfg = runner.vllm_config
        self._refuse_modes(cfg)
        mc = cfg.model_config
        path = mc.model
        if not os.path.exists(path):
            raise Refused(f"bangtrace: the model {path!r} is not a local folder; give vLLM the folder "
                          "bangtrace can load (the same weights `bisect --reference` replays)")
        self.bm = model_for(path)
        self.dtype = str(mc.dtype).replace("torch.", "")
        try:
            import vllm
            self.version = f"vllm {vllm.__version__}, torch {torch.__version__}"
        except Exception:
            self.version = f"vllm, torch {torch.__version__}"
        self.settings = f"dtype={self.dtype} device={runner.device} mode=eager"
        self.engine, self.engine_label, self.unit, self.log = "vllm", "vLLM", "step", log
        self._init_requests()
        self.sched = None          # the step's scheduler output while it runs
        self.step = None           # the forward's layout while a step is open
        self.red = StepReducer()   # the step's taps, reduced per request when it ends
        self.layer = None
        self.handles = []
        self.moe_warned = False
        self.gdn_warned = False
        self.mla_warned = False
        from vllm.forward_context import get_forward_context
        self._forward_context = get_forward_context     # the step's attention metadata (the state slots)
        self.state_slots = set()   # the tensors read from a request's state slot (a prefill's chunks: the last)
        self.slot_of = {}          # request id -> its state slot, as last recorded
        self._install(runner.get_model())
        self.state_slots = {t.slot for t in self.bm.tensors if t.op in ("ssm_state", "ssm_conv_state")}
        atexit.register(self.close_all)       # in-process engines; workers close at shutdown

    # -- what is refused --
    @staticmethod
    def _refuse_modes(cfg):
        mc, cc = cfg.model_config, cfg.compilation_config
        mode = getattr(cc, "mode", getattr(cc, "level", 0))
        mode = int(getattr(mode, "value", mode) or 0)
        cg = getattr(cc, "cudagraph_mode", None)
        cg_on = cg is not None and str(getattr(cg, "name", cg)).upper() not in ("NONE", "0")
        if not mc.enforce_eager and (mode != 0 or cg_on):
            raise Refused("bangtrace: recording vLLM needs eager mode (enforce_eager=True, --enforce-eager): "
                          "torch.compile and CUDA graphs capture the forward without the recorder's hooks")
        pc = cfg.parallel_config
        if pc.tensor_parallel_size != 1 or pc.pipeline_parallel_size != 1:
            raise Refused(f"bangtrace: recording vLLM needs one rank (tensor_parallel_size "
                          f"{pc.tensor_parallel_size}, pipeline_parallel_size {pc.pipeline_parallel_size}): "
                          "each rank sees a shard of every tensor")
        if getattr(cfg, "speculative_config", None) is not None:
            raise Refused("bangtrace: recording vLLM with speculative decoding is not supported "
                          "(several tokens per request and step); record without it, or use "
                          "`bangtrace run --spec-k` for draft trails")

    # -- hooks --
    @staticmethod
    def _hf_name(model):
        """vLLM's module path -> the checkpoint's name, undoing the model's
        hf_to_vllm_mapper (gpt-oss: .attn. for .self_attn., .embedding for
        .embed_tokens) where it renames."""
        m = getattr(model, "hf_to_vllm_mapper", None)
        pairs = [(kind, o, n) for kind, attr in (("sub", "orig_to_new_substr"), ("suf", "orig_to_new_suffix"),
                                                 ("pre", "orig_to_new_prefix"))
                 for o, n in (getattr(m, attr, None) or {}).items() if isinstance(n, str) and n]

        def hf(name):
            for kind, o, n in pairs:
                if kind == "sub" and n in name:
                    name = name.replace(n, o)
                elif kind == "suf" and name.endswith(n):
                    name = name[: -len(n)] + o
                elif kind == "pre" and name.startswith(n):
                    name = o + name[len(n):]
            return name
        return hf

    def _install(self, model):
        bm = self.bm
        hf = self._hf_name(model)

        def weight_tensor(name):
            return bm.weight_tensor(name) or bm.weight_tensor(hf(name))
        packed = getattr(model, "packed_modules_mapping", {}) or {}
        last = bm.n_layers - 1
        n_hooked = 0
        attn = {}
        rope = []
        mla = set()               # the layers whose q and latent the MLA hooks take (not RoPE's)
        torch = self.torch
        for name, mod in model.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "rotary_emb":
                rope.append(mod)
                continue
            if leaf == "logits_processor":
                self.handles.append(mod.register_forward_hook(self._logits_hook))
                continue
            L = _layer_of(name)
            if L is not None and isinstance(getattr(mod, "mla_attn", None), torch.nn.Module):
                n_hooked += self._install_mla(mod, L)      # multi-head latent attention: q and the latent
                mla.add(L)
                continue
            if L is not None and leaf == "linear_attn" and hasattr(mod, "A_log") and hasattr(mod, "in_proj_qkvz"):
                n_hooked += self._install_gdn(mod, L)       # gated delta net: its own hooks
                continue
            if L is not None and leaf == "attn" and bm.tensor(f"blk.{L}.attn_gated") is not None:
                t = bm.tensor(f"blk.{L}.attn_ctx")          # gated attention: the attention's output, before the gate
                self.handles.append(mod.register_forward_hook(self._out_hook(t.slot)))
                continue
            moe_out = bm.tensor(f"blk.{L}.ffn_moe_out") if L is not None and leaf == "mlp" else None
            if moe_out is not None:         # a MoE block: its output; its fused experts hide their own ops
                self.handles.append(mod.register_forward_hook(self._out_hook(moe_out.slot)))
                if not self.moe_warned:
                    self.moe_warned = True
                    log.warning("bangtrace: vLLM's fused MoE kernel runs every expert at once: the router "
                                "(ffn_gate_inp) and ffn_moe_out are recorded, the experts' ffn_gate, ffn_up, "
                                "ffn_act and ffn_down are not")
                continue
            if "weight" not in getattr(mod, "_parameters", {}):
                continue
            prefix = name.rsplit(".", 1)[0] + "." if "." in name else ""
            if leaf in packed:
                parts = [weight_tensor(prefix + p + ".weight") for p in packed[leaf]]
                if any(t is None for t in parts):
                    continue
                if parts[0].op == "attn_q":
                    attn[prefix.rstrip(".")] = parts[0].layer
                gate = bm.tensor(f"blk.{parts[0].layer}.attn_gate") if parts[0].op == "attn_q" else None
                self.handles.append(mod.register_forward_hook(self._split_hook(parts, gate)))
                n_hooked += 1
                continue
            t = weight_tensor(name + ".weight")
            if t is None:
                continue
            L = t.layer
            if t.op in ("attn_q", "attn_k"):        # tapped after RoPE
                if L not in mla:
                    attn[prefix.rstrip(".")] = L
                continue
            if t.op == "logits":                     # lm_head is not called; the logits processor is
                continue
            self.handles.append(mod.register_forward_hook(self._out_hook(t.slot)))
            n_hooked += 1
            # what the module's input (or its fused residual output) is
            gated = bm.tensor(f"blk.{L}.attn_gated") is not None      # then o_proj reads attn_gated
            inp = {"attn_output": f"blk.{L}.attn_gated" if gated else f"blk.{L}.attn_ctx",
                   "ffn_down": f"blk.{L}.ffn_act"}.get(t.op)
            if inp and bm.tensor(inp):
                self.handles.append(mod.register_forward_pre_hook(self._in_hook(bm.tensor(inp).slot)))
            res = {"ffn_norm": f"blk.{L}.attn_resid",
                   "attn_norm": f"blk.{L - 1}.ffn_resid" if L > 0 else None,
                   "output_norm": f"blk.{last}.ffn_resid"}.get(t.op)
            if res and bm.tensor(res):
                self.handles.append(mod.register_forward_hook(self._resid_hook(bm.tensor(res).slot)))
        if n_hooked == 0:
            raise Refused(f"bangtrace: no module of vLLM's {type(model).__name__} holds a weight of "
                          f"{bm.path} (a model of another layout?)")
        mods = dict(model.named_modules())
        for aname, L in attn.items():
            amod = mods.get(aname)
            if amod is None:
                continue
            self.handles.append(amod.register_forward_pre_hook(lambda m, a, L=L: setattr(self, "layer", L)))
            self.handles.append(amod.register_forward_hook(lambda m, a, o: setattr(self, "layer", None)))
        for r in rope:
            self.handles.append(r.register_forward_hook(self._rope_hook))
        self.handles.append(model.register_forward_pre_hook(self._forward_begin, with_kwargs=True))

    # -- multi-head latent attention (DeepSeek-V2/V3) --
    def _install_mla(self, mod, L):
        """vLLM's MLA wrapper hands its attention layer q (per head the
        unrotated then the rotated part, after RoPE), the normed latent and
        the rotated shared key: attn_q and attn_kv_latent are those. The
        absorbed ops bangtrace runs (attn_q_abs, attn_ctx_latent) happen
        inside vLLM's MLA kernels: not recorded."""
        inner = getattr(mod.mla_attn, "mla_attn", None)
        tq, tl = self.bm.tensor(f"blk.{L}.attn_q"), self.bm.tensor(f"blk.{L}.attn_kv_latent")
        if not isinstance(inner, self.torch.nn.Module) or tq is None or tl is None:
            return 0

        def hook(m, args, out):
            if len(args) < 3 or self.step is None:
                return
            q, kv_c, k_pe = args[0], args[1], args[2]
            self._put(tq.slot, q)
            self._put(tl.slot, self.torch.cat([kv_c.reshape(kv_c.shape[0], -1), k_pe.reshape(k_pe.shape[0], -1)], -1))
        self.handles.append(inner.register_forward_hook(hook))
        if not self.mla_warned:
            self.mla_warned = True
            log.warning("bangtrace: vLLM's MLA kernels run the absorbed attention inside: attn_q, attn_kv_latent, "
                        "attn_ctx are recorded, attn_q_abs and attn_ctx_latent are not")
        return 1

    # -- gated delta net layers (Qwen3.5, Qwen3-Next) --
    def _install_gdn(self, mod, L):
        """vLLM's GatedDeltaNetAttention: its fused op runs the conv, the
        L2 norms and the recurrence in one kernel over the state slots of
        its mamba cache, so ssm_conv, ssm_q, ssm_k and ssm_v are not
        recorded. ssm_qkv and ssm_z are in_proj_qkvz's output, ssm_beta and
        ssm_decay computed from in_proj_ba's as the kernel computes them
        (sigmoid(b); -exp(A_log) * softplus(a + dt_bias), in f32), ssm_core
        and ssm_norm the gated norm's input and output, ssm_out out_proj's;
        after the layer ran, each request's ssm_state and ssm_conv_state
        are read from its slot (the attention metadata's state indices). Per
        value head tensors are put in the native engine's head order (the
        converter tiles Qwen3.5's). Returns the number of tensors tapped."""
        torch, bm = self.torch, self.bm
        names = {op: bm.tensor(f"blk.{L}.{op}") for op in (
            "ssm_qkv", "ssm_z", "ssm_beta", "ssm_decay", "ssm_conv_state", "ssm_core", "ssm_state", "ssm_norm",
            "ssm_out")}
        if any(t is None for t in names.values()):
            return 0
        nk, nv, dk, dv = mod.num_k_heads, mod.num_v_heads, mod.head_k_dim, mod.head_v_dim
        per, KD, V = nv // nk, nk * dk, nv * dv
        C = 2 * KD + V
        if getattr(mod, "gqa_interleaved_layout", False):      # Qwen3-Next: per key head [q, k, v, z], [b, a]
            hrow = 2 * dk + 2 * per * dv
            heads = list(range(nv))                             # kept grouped, as the native engine computes
            qkv = ([k * hrow + i for k in range(nk) for i in range(dk)] +
                   [k * hrow + dk + i for k in range(nk) for i in range(dk)] +
                   [k * hrow + 2 * dk + i for k in range(nk) for i in range(per * dv)])
            z = [k * hrow + 2 * dk + per * dv + i for k in range(nk) for i in range(per * dv)]
            b = [k * 2 * per + i for k in range(nk) for i in range(per)]
            a = [k * 2 * per + per + i for k in range(nk) for i in range(per)]
            conv = list(range(C))
        else:                                                   # Qwen3.5: [q, k, v, z] and [b, a], heads grouped
            heads = [(n % nk) * per + n // nk for n in range(nv)]
            vcols = [h * dv + d for h in heads for d in range(dv)]
            conv = list(range(2 * KD)) + [2 * KD + c for c in vcols]
            qkv, z = conv, [C + c for c in vcols]
            b, a = heads, [nv + h for h in heads]
        dev = mod.A_log.device
        ix = {k: torch.tensor(v, device=dev) for k, v in (("qkv", qkv), ("z", z), ("b", b), ("a", a), ("conv", conv),
                                                           ("h", heads))}
        ix["v"] = torch.tensor([h * dv + d for h in heads for d in range(dv)], device=dev)
        K = mod.conv_kernel_size

        def qkvz(m, args, out):
            y = _first(out)
            self._put(names["ssm_qkv"].slot, y.index_select(-1, ix["qkv"]))
            self._put(names["ssm_z"].slot, y.index_select(-1, ix["z"]))

        def ba(m, args, out):
            y = _first(out).float()
            self._put(names["ssm_beta"].slot, torch.sigmoid(y.index_select(-1, ix["b"])))
            al = mod.A_log.float().index_select(0, ix["h"])
            dt = mod.dt_bias.float().index_select(0, ix["h"])
            self._put(names["ssm_decay"].slot,
                      -al.exp() * torch.nn.functional.softplus(y.index_select(-1, ix["a"]) + dt))

        def norm(m, args, out):
            if len(args) >= 1:
                self._put(names["ssm_core"].slot, args[0].reshape(-1, V).index_select(-1, ix["v"]))
            self._put(names["ssm_norm"].slot, _first(out).reshape(-1, V).index_select(-1, ix["v"]))

        def states(m, args, out):
            self._gdn_states(mod, names, ix, nv, dk, dv, C, K)
        for sub, fn in ((mod.in_proj_qkvz, qkvz), (mod.in_proj_ba, ba), (mod.norm, norm)):
            self.handles.append(sub.register_forward_hook(self._guarded(fn)))
        self.handles.append(mod.out_proj.register_forward_hook(self._out_hook(names["ssm_out"].slot)))
        self.handles.append(mod.register_forward_hook(self._guarded(states)))
        if not self.gdn_warned:
            self.gdn_warned = True
            log.warning("bangtrace: vLLM's fused gated delta net op runs the conv and the recurrence in one kernel: "
                        "ssm_conv, ssm_q, ssm_k and ssm_v are not recorded (ssm_beta and ssm_decay are computed from "
                        "in_proj_ba's output; the states are read from each request's cache slot)")
        return len(names)

    def _guarded(self, fn):
        def hook(m, args, out):
            if self.step is not None:
                self._hook_call(fn, m, args, out)
        return hook

    @_guard
    def _hook_call(self, fn, m, args, out):
        fn(m, args, out)

    def _gdn_states(self, mod, names, ix, nv, dk, dv, C, K):
        """Each request's state after the layer: its slot in vLLM's mamba
        cache (kv_cache[0] the conv state, kv_cache[1] the delta-rule state),
        reduced per request; the slots go to the trace as state_slot events."""
        torch, st = self.torch, self.step
        md = self._forward_context().attn_metadata
        m = md.get(mod.prefix) if isinstance(md, dict) else None
        idx = getattr(m, "non_spec_state_indices_tensor", None)
        n = st["n_req"]
        if idx is None or idx.numel() < n:
            return
        slots = idx[:n].long()
        conv_c, ssm_c = mod.kv_cache[0], mod.kv_cache[1]
        S = ssm_c.index_select(0, slots).reshape(n, nv, dk, dv).index_select(1, ix["h"]).reshape(n * nv * dk, dv)
        seg = torch.arange(n, device=S.device).repeat_interleave(nv * dk)
        st["direct"][names["ssm_state"].slot] = self._seg_stats(S, dv, seg, n)
        cs = conv_c.index_select(0, slots)
        if cs.shape[-2] == C:                 # (slot, dim, kernel-1): dim first
            cs = cs.transpose(-1, -2)
        cs = cs[:, cs.shape[1] - (K - 1):, :].index_select(-1, ix["conv"]).reshape(n * (K - 1), C)
        seg = torch.arange(n, device=cs.device).repeat_interleave(K - 1)
        st["direct"][names["ssm_conv_state"].slot] = self._seg_stats(cs, C, seg, n)
        if not st["slots"]:
            st["slots"] = [int(x) for x in slots.tolist()]     # one host read a step, the first GDN layer's

    @_guard
    def _put(self, slot, x, width=None):
        st = self.step
        if st is None:
            return
        t = self.bm.tensors[slot]
        x = x.reshape(-1, t.width)
        if x.shape[0] != st["rows"]:
            return
        self.red.add(slot, x, t.width)

    def _resid_hook(self, slot):
        def hook(mod, args, out):      # fused add + norm: (normed, x + residual)
            if isinstance(out, (tuple, list)) and len(out) > 1:
                self._put(slot, out[1])
        return hook

    def _split_hook(self, parts, gate=None):
        widths = [t.width for t in parts]
        if gate is not None:          # the q projection carries a gate per head: [q, gate] each head
            widths[0] *= 2

        def hook(mod, args, out):
            self._split(mod, _first(out), parts, widths, gate)
        return hook

    @_guard
    def _split(self, mod, y, parts, widths, gate=None):
        if self.step is None:
            return
        if y.shape[-1] != sum(widths):
            raise Refused(f"{type(mod).__name__} gives {y.shape[-1]} columns, the model's "
                          f"{'+'.join(t.name for t in parts)} are {sum(widths)}")
        for t, piece in zip(parts, y.split(widths, dim=-1)):
            if t.op == "attn_q" and gate is not None:
                hd = mod.head_size                      # QKVParallelLinear's head width
                self._put(gate.slot, piece.reshape(piece.shape[0], -1, 2 * hd)[..., hd:])
            elif t.op not in ("attn_q", "attn_k"):
                self._put(t.slot, piece)

    @_guard
    def _rope_hook(self, mod, args, out):
        if self.step is not None:
            self._put_rope(self.layer, out)

    @_guard
    def _logits_hook(self, mod, args, out):
        st = self.step
        if st is None or out is None:
            return
        lg = _first(out)
        if lg.dim() != 2 or lg.shape[0] < st["n_req"]:
            return
        st["logits"] = lg[: st["n_req"]]

    def _seg_stats(self, x, width, seg, n_seg):
        from .torch import seg_stats
        return seg_stats(x, width, seg, n_seg)

    # -- a step --
    @_guard
    def begin(self, sched):
        self.sched = sched
        for rid in getattr(sched, "finished_req_ids", ()) or ():
            self._close(rid, "ok")
            self.skipped.discard(rid)

    @_guard
    def _forward_begin(self, mod, args, kwargs):
        torch = self.torch
        sched = self.sched
        if sched is None:           # a warm-up or profiling run: nothing to record
            self.step = None
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        pos = kwargs.get("positions", args[1] if len(args) > 1 else None)
        if ids is None or pos is None:
            self.step = None
            return
        req_ids = [r for r in self.runner.input_batch.req_ids if r is not None]
        counts = [int(sched.num_scheduled_tokens.get(r, 0)) for r in req_ids]
        rows = int(ids.shape[0])
        total = sum(counts)
        if total > rows or not req_ids:
            self.step = None
            return
        n_req = len(req_ids)
        seg = torch.repeat_interleave(torch.arange(n_req), torch.tensor(counts))
        if rows > total:             # padding rows: a segment of their own, not recorded
            seg = torch.cat([seg, torch.full((rows - total,), n_req, dtype=torch.long)])
        self.cur_reqs = list(req_ids)
        # a request new to the recorder that starts past position 0 took its
        # prompt's head from vLLM's prefix cache: its tokens, from the host batch
        prefix = {}
        ib = self.runner.input_batch
        for r in req_ids:
            if r in self.reqs or r in self.skipped:
                continue
            i = ib.req_id_to_index.get(r)
            nc = int(ib.num_computed_tokens_cpu[i]) if i is not None else 0
            if nc > 0:
                prefix[r] = ib.token_ids_cpu[i, :nc].tolist()
        seg = seg.to(ids.device, non_blocking=True)
        self.step = {"req_ids": req_ids, "counts": counts, "rows": rows, "n_req": n_req, "n_seg": n_req + 1,
                     "seg": seg, "ids": ids, "pos": pos, "logits": None, "prefix": prefix, "direct": {},
                     "slots": []}
        self.red.begin(seg, n_req + 1)

    def abort(self):
        self.sched = None
        self.step = None
        self.red.begin()

    @_guard
    def end(self, out):
        st, self.step, self.sched = self.step, None, None
        if st is None:
            return
        pending = self.red.finish()
        if out is None or not getattr(out, "req_ids", None):
            return
        torch, L = self.torch, self.lib
        n_t, S, n_req = len(self.bm.tensors), L.STAT_COUNT, st["n_req"]
        dev = st["ids"].device
        full = torch.full((n_t, n_req + 1, S), -1.0, dtype=torch.float64, device=dev)
        if pending:
            idx = torch.tensor(list(pending.keys()), device=dev)
            full[idx] = torch.stack([v.to(dev) for v in pending.values()])
        for slot, v in st["direct"].items():          # per request already (the states)
            full[slot, :n_req] = v.to(dev)
        lg_slot = self.bm.tensor("logits")
        lg = st["logits"]
        if lg is not None and lg_slot is not None:
            full[lg_slot.slot, :n_req] = self._seg_stats(lg, lg.shape[-1], torch.arange(n_req, device=lg.device),
                                                         n_req).to(dev)
        parts = [full.reshape(-1), st["ids"].reshape(-1).double(), st["pos"].reshape(-1)[: st["rows"]].double()]
        V = 0
        if lg is not None:
            V = lg.shape[-1]
            f = lg.detach().float().reshape(-1)
            if f.numel() % 2:
                f = torch.cat([f, f.new_zeros(1)])
            parts.append(f.view(torch.float64).to(dev))
        host = torch.cat(parts).cpu().numpy()          # the step's one copy to the host
        o = 0
        stats = host[o: o + full.numel()].reshape(n_t, n_req + 1, S)
        o += full.numel()
        ids = host[o: o + st["rows"]].astype("int64")
        o += st["rows"]
        pos = host[o: o + st["rows"]].astype("int64")
        o += st["rows"]
        logits = host[o:].view("float32")[: n_req * V].reshape(n_req, V) if V else None
        index = getattr(out, "req_id_to_index", None) or {r: i for i, r in enumerate(out.req_ids)}
        sampled = out.sampled_token_ids
        start = 0
        for i, rid in enumerate(st["req_ids"]):
            n = st["counts"][i]
            s0, start = start, start + n
            if n == 0:
                continue
            j = index.get(rid)
            toks = sampled[j] if j is not None and j < len(sampled) else []
            toks = list(toks.tolist() if hasattr(toks, "tolist") else toks)
            try:
                self._request_step(rid, ids[s0:s0 + n].tolist(), int(pos[s0]), stats[:, i, :],
                                   None if logits is None else logits[i], toks, st["prefix"].get(rid))
                if i < len(st["slots"]):
                    self._slot_event(rid, st["slots"][i])
            except L.BangtraceError as e:
                log.warning("bangtrace: request %s: %s; its trace is closed", rid, e)
                self._close(rid, "error")
                self.skipped.add(rid)

    def _request_step(self, rid, tokens, pos0, stats, row, sampled, prefix=None):
        L = self.lib
        if rid in self.skipped:
            return
        r = self.reqs.get(rid)
        if pos0 == 0 and r is not None and r.pos0 is not None:
            self._close(rid, "interrupted")           # preempted and recomputed: a new trace
            r = None
        if r is None:
            if pos0 != 0 and (prefix is None or len(prefix) != pos0 or L.lib().bangtrace_api_version() < 2):
                self.skipped.add(rid)
                log.warning("bangtrace: request %s starts at position %d and its cached prefix is not known: "
                            "not recorded", rid, pos0)
                return
            r = self._open(rid)
            if pos0 != 0:
                r.rec.cached_prefix(prefix)       # vLLM's prefix cache held the prompt's head
        if r.stats is not None:                        # the rest of a chunked prefill
            widths = [t.width for t in self.bm.tensors]
            stats = _merge_all(r.stats, stats, widths, self.state_slots)
            tokens = r.tokens + tokens
            pos0 = r.pos0
        if not sampled:                                # a prefill chunk: the step goes on
            r.stats, r.tokens, r.pos0 = stats.copy(), tokens, pos0
            return
        r.stats, r.tokens = None, []
        r.pos0 = pos0
        st = stats.copy()
        lg = self.bm.tensor("logits")
        if lg is not None and len(tokens) != 1:        # vLLM computes the last row's logits only
            st[lg.slot, :] = -1.0
        logits = row if row is not None else None
        if logits is None:
            import numpy as np
            logits = np.full(self.bm.n_vocab, np.nan, dtype=np.float32)
        r.rec.forward(tokens, pos0, st.reshape(-1), logits.astype("float32", copy=False), 1)
        r.rec.sampled(int(sampled[-1]))

    def _slot_event(self, rid, slot):
        """A state_slot event when a request's recurrent state lives in a
        slot it did not use at its last step (its first step included): two
        requests' traces naming one slot is what a state carried from one
        request to the next needs to be told apart from a kernel fault."""
        r = self.reqs.get(rid)
        if r is None or self.slot_of.get(rid) == slot:
            return
        self.slot_of[rid] = slot
        r.rec.event("state_slot", f"vLLM mamba cache slot {slot} (request {rid})")

    def _open(self, rid):
        rec, path = self._recording(rid)
        r = self.reqs[rid] = _Request(rec, path)
        return r

    def _reset_step(self, e):
        self.step = None
        self.red.begin()

    def _before_close(self, rid, r, status):
        self.slot_of.pop(rid, None)
