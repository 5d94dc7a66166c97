"""bangtrace.sglang: record an SGLang deployment per request, through
SGLang's own forward-hook option (`--forward-hooks`).

    python -m bangtrace.sglang --trace-dir /srv/traces -- --model-path /models/qwen3-folder [SGLang's options]

runs `python -m sglang.launch_server` with the options given, adding
`--disable-cuda-graph` and the hook spec

    [{"name": "bangtrace", "target_modules": ["*"],
      "hook_factory": "bangtrace.sglang:hook_factory",
      "config": {"trace_dir": "/srv/traces"}}]

(give SGLang that spec yourself, `spec(DIR)` prints it, to launch it your
own way). SGLang's scheduler process resolves the factory and registers the
hook it returns on every module of the model, after CUDA-graph capture: the
hooks fire on the eager path only, so CUDA graphs are refused, as are
torch.compile, more than one tensor/pipeline rank and speculative decoding.

How a forward pass is recorded: its first hook call finds the model's root
and the pass's ForwardBatch on the Python stack (SGLang calls the root's
forward directly); the batch's rows belong to its requests (`rids`), an
extend's rows contiguous per request (`extend_seq_lens_cpu`), a decode's one
row each; every tapped tensor is copied on its device as it comes, all are
reduced per request when the logits processor's hook ends the pass, and the
statistics, the logit rows, the input ids and positions come to the host in
one copy. Each request's trace, DIR/<rid>.db, then gets its own rows. The
token sampled at a step is the next step's input (the hooks never see the
sampler); the last one is read from the scheduler's Req (its output_ids)
when the trace closes. An extend is held
until the request's first decode pass (a prompt prefilled in chunks is one
step); a request is closed when a decode pass runs without it (unless its
prompt is still being prefilled), and at exit.
A prompt whose head hit the radix cache is recorded whole: the head's ids
come from the scheduler's batch on the stack (_stack_reqs), which also
tells a chunk of a prompt from its end, so a decode pass between a prompt's
chunks does not end its trace.

Not tried on SGLang itself: it has no CPU build on PyPI, so the tests run
this recorder on a stand-in with SGLang's module layout and calling
conventions, through SGLang's own hook_manager (tests/pytorch_sglang.sh).
doc/pytorch.md says what that leaves unverified.
"""
import atexit
import json
import logging
import os
import sys

from ._serving import Refused, RequestTraces, guard as _guard, merge_all as _merge_all
from .torch import Taps, _first

ENV = "BANGTRACE_SGLANG"
log = logging.getLogger("bangtrace.sglang")

# SGLang's fused projections (its models' stacked_params_mapping), when the
# model does not say
PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def spec(trace_dir):
    """The --forward-hooks value that records into trace_dir."""
    return [{"name": "bangtrace", "target_modules": ["*"], "hook_factory": "bangtrace.sglang:hook_factory",
             "config": {"trace_dir": os.path.abspath(trace_dir)}}]


def hook_factory(config):
    """What SGLang's --forward-hooks calls (in its scheduler process): the one
    hook it registers on every module. config: {"trace_dir": DIR}, or
    BANGTRACE_SGLANG naming it."""
    d = (config or {}).get("trace_dir") or os.environ.get(ENV)
    if not d:
        log.warning("bangtrace: the hook spec names no trace_dir (and %s is unset): not recording", ENV)
        return None
    return _Recorder(d)


class _Request:
    __slots__ = ("rec", "path", "pending", "decoded", "partial", "req")

    def __init__(self, rec, path):
        self.rec, self.path = rec, path
        self.pending = None       # an extend not written yet: [tokens, pos0, stats, logits row]
        self.decoded = 0          # decode passes recorded (each fed the token the step before chose)
        self.partial = False      # its pending extend is a chunk of a prompt that goes on
        self.req = None           # the scheduler's Req (its output_ids: the last token, at the close)


class _Recorder(Taps, RequestTraces):
    """The forward hook on every module of one SGLang model runner's model,
    and the traces of its requests."""

    def __init__(self, directory):
        import torch
        from . import _lib
        from .torch import StepReducer
        self.torch, self.lib = torch, _lib
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.root = None          # the model, found at the first pass
        self.bm = None
        self.handlers = {}        # id(module) -> handler(mod, args, out)
        self.ends = set()         # id of the logits processor: a pass ends there
        self.body = None          # id of the module the root runs the layers in (its hook: the layers are done)
        self.engine, self.engine_label, self.unit, self.log = "sglang", "SGLang", "pass", log
        self._init_requests()
        self.step = None          # the pass's layout while it runs; False: a pass not recorded
        self.red = StepReducer()
        self.layer = None         # the layer whose attention runs (a shared rotary module's caller)
        self.warned = set()
        atexit.register(self.close_all)

    # -- SGLang calls this after every module's forward --
    def __call__(self, mod, args, out):
        if self.step is None:
            if id(mod) in self.ends:
                return                        # a logits processor with no pass open
            self._begin()
        if not self.step:
            if self.step is False and (id(mod) in self.ends or id(mod) == self.body):
                self.step = None              # the end of a pass not recorded
            return
        h = self.handlers.get(id(mod))
        if h is not None:
            h(mod, args, out)

    def _warn_once(self, key, msg, *a):
        if key not in self.warned:
            self.warned.add(key)
            log.warning(msg, *a)

    # -- the model, at its first pass --
    def _frames(self):
        """(module, forward_batch) of each module frame on the stack with a
        forward_batch local, innermost first."""
        import torch.nn as nn
        f = sys._getframe(2)
        out = []
        while f is not None:
            loc = f.f_locals
            s = loc.get("self")
            if isinstance(s, nn.Module) and loc.get("forward_batch") is not None:
                out.append((s, loc["forward_batch"]))
            f = f.f_back
        return out

    @_guard
    def _begin(self):
        frames = self._frames()
        if not frames:                     # a module run outside a forward pass: not a pass
            return
        self.step = False
        root, fb = frames[-1]
        if self.root is None:
            self._install(root)
            self.body = id(frames[-2][0]) if len(frames) > 1 else None
        elif root is not self.root:
            return                         # another model (a draft): not this recorder's
        self._layout(fb)

    def _install(self, root):
        from .torch import model_for
        cfg = getattr(root, "config", None)
        path = getattr(cfg, "_name_or_path", None) or os.environ.get("BANGTRACE_SGLANG_MODEL")
        if not path or not os.path.isdir(path):
            raise Refused(f"bangtrace: the model's folder ({path!r}) is not a local folder; launch SGLang on the "
                          "folder bangtrace can load (or name it in BANGTRACE_SGLANG_MODEL)")
        self.bm = bm = model_for(path)
        torch = self.torch
        dtype = next((p.dtype for p in root.parameters()), None)
        self.dtype = str(dtype).replace("torch.", "") if dtype is not None else "unknown"
        try:
            import sglang
            ver = f"sglang {sglang.__version__}"
        except Exception:         # noqa: BLE001 - a stand-in, or a build without a version
            ver = "sglang"
        self.version = f"{ver}, torch {torch.__version__}"
        self.settings = f"dtype={self.dtype} mode=eager"
        packed = dict(PACKED)
        for p, shard, _ in getattr(root, "stacked_params_mapping", None) or ():
            packed.setdefault(p.strip("."), [])
            if shard.strip(".") not in packed[p.strip(".")]:
                packed[p.strip(".")].append(shard.strip("."))
        last = bm.n_layers - 1
        H = self.handlers
        n = 0
        for name, mod in root.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "logits_processor":
                H[id(mod)] = self._end
                self.ends.add(id(mod))
                continue
            if leaf == "rotary_emb":
                H[id(mod)] = self._rope
                continue
            if "weight" not in getattr(mod, "_parameters", {}):
                continue
            prefix = name.rsplit(".", 1)[0] + "." if "." in name else ""
            if leaf in packed:
                parts = [bm.weight_tensor(prefix + p + ".weight") for p in packed[leaf]]
                if parts and all(t is not None for t in parts):
                    H[id(mod)] = self._split_hook(parts)
                    n += 1
                continue
            t = bm.weight_tensor(name + ".weight")
            if t is None or t.op in ("attn_q", "attn_k", "logits"):     # q, k after RoPE; lm_head is not called
                continue
            L = t.layer
            taps = [self._out(t.slot)]
            inp = {"attn_output": f"blk.{L}.attn_ctx", "ffn_down": f"blk.{L}.ffn_act"}.get(t.op)
            if inp and bm.tensor(inp):
                taps.append(self._in(bm.tensor(inp).slot))
            res = {"ffn_norm": f"blk.{L}.attn_resid", "attn_norm": f"blk.{L - 1}.ffn_resid" if L > 0 else None,
                   "output_norm": f"blk.{last}.ffn_resid"}.get(t.op)
            if res and bm.tensor(res):
                taps.append(self._resid(bm.tensor(res).slot))
            H[id(mod)] = taps[0] if len(taps) == 1 else self._all(taps)
            n += 1
        if n == 0 or not self.ends:
            raise Refused(f"bangtrace: SGLang's {type(root).__name__} has no module holding a weight of {bm.path} "
                          "or no logits_processor (a model of another layout?)")
        self.root = root

    # -- a pass --
    def _layout(self, fb):
        torch = self.torch
        rids = getattr(fb, "rids", None)
        mode = getattr(fb, "forward_mode", None)
        ids, pos = getattr(fb, "input_ids", None), getattr(fb, "positions", None)
        if not rids or mode is None or ids is None or pos is None:
            self._warn_once("rids", "bangtrace: SGLang's ForwardBatch has no request ids (rids): not recording")
            return
        if mode.is_decode():
            counts, decode = [1] * len(rids), True
        elif mode.is_extend() and not any(getattr(mode, m, lambda: False)()
                                          for m in ("is_target_verify", "is_draft_extend", "is_draft_extend_v2",
                                                    "is_mixed", "is_split_prefill", "is_dllm_extend")):
            counts, decode = [int(c) for c in fb.extend_seq_lens_cpu], False
        else:
            self._warn_once(str(mode), "bangtrace: SGLang forward mode %s (speculative or mixed batches) "
                            "is not recorded", mode)
            return
        rows, total = int(ids.shape[0]), sum(counts)
        if total > rows or len(counts) != len(rids):
            return
        n_req = len(rids)
        seg = torch.repeat_interleave(torch.arange(n_req), torch.tensor(counts))
        if rows > total:
            seg = torch.cat([seg, torch.full((rows - total,), n_req, dtype=torch.long)])
        self.cur_reqs = [str(r) for r in rids]
        # an extend's requests as the scheduler holds them: a new one past
        # position 0 took its prompt's head from the radix cache (its ids), and
        # one whose prompt goes on past this pass is in a chunked prefill
        prefix, plen, held = {}, {}, {}
        if not decode:
            held = self._stack_reqs(set(self.cur_reqs))
            pl = getattr(fb, "extend_prefix_lens_cpu", None) or [0] * n_req
            for r, n in zip(self.cur_reqs, pl):
                q = held.get(r)
                toks = list(getattr(q, "origin_input_ids", None) or ()) if q is not None else None
                if toks is not None:
                    plen[r] = len(toks)
                    toks += list(getattr(q, "output_ids", None) or ())
                if int(n) > 0 and r not in self.reqs and toks is not None and len(toks) >= int(n):
                    prefix[r] = [int(t) for t in toks[: int(n)]]
        self.step = {"rids": self.cur_reqs, "counts": counts, "rows": rows, "n_req": n_req, "decode": decode,
                     "ids": ids, "pos": pos, "prefix": prefix, "plen": plen, "held": held}
        self.red.begin(seg.to(ids.device, non_blocking=True), n_req + 1)

    @staticmethod
    def _stack_reqs(rids):
        """{rid: SGLang's Req} for the rids a scheduler batch on the stack
        holds (the worker's forward_batch_generation(batch): batch.reqs)."""
        f, out = sys._getframe(1), {}
        while f is not None and len(out) < len(rids):
            for v in list(f.f_locals.values()):
                reqs = getattr(v, "reqs", None)
                if isinstance(reqs, (list, tuple)):
                    for q in reqs:
                        rid = str(getattr(q, "rid", ""))
                        if rid in rids:
                            out.setdefault(rid, q)
            f = f.f_back
        return out

    @_guard
    def _put(self, slot, x):
        st = self.step
        if not st:
            return
        t = self.bm.tensors[slot]
        x = x.reshape(-1, t.width)
        if x.shape[0] == st["rows"]:
            self.red.add(slot, x, t.width)

    def _out(self, slot):
        return lambda mod, args, out: self._put(slot, _first(out))

    def _in(self, slot):
        return lambda mod, args, out: self._put(slot, args[0]) if args else None

    def _resid(self, slot):
        def hook(mod, args, out):      # fused add + norm: (normed, x + residual)
            if isinstance(out, (tuple, list)) and len(out) > 1:
                self._put(slot, out[1])
        return hook

    @staticmethod
    def _all(taps):
        def hook(mod, args, out):
            for h in taps:
                h(mod, args, out)
        return hook

    def _split_hook(self, parts):
        widths = [t.width for t in parts]
        L = parts[0].layer if parts[0].op == "attn_q" else None

        def hook(mod, args, out):
            if L is not None:
                self.layer = L        # the rotary module that comes next is this layer's
            y = _first(out)
            if y.shape[-1] != sum(widths):
                raise Refused(f"{type(mod).__name__} gives {y.shape[-1]} columns, the model's "
                              f"{'+'.join(t.name for t in parts)} are {sum(widths)}")
            for t, piece in zip(parts, y.split(widths, dim=-1)):
                if t.op not in ("attn_q", "attn_k"):
                    self._put(t.slot, piece)
        return hook

    def _rope(self, mod, args, out):
        self._put_rope(self.layer, out)

    @_guard
    def _end(self, mod, args, out):
        st, self.step, self.layer = self.step, None, None
        pending = self.red.finish()
        lg = getattr(out, "next_token_logits", None)
        if lg is None:
            lg = _first(out)
        torch, L = self.torch, self.lib
        n_t, S, n_req = len(self.bm.tensors), L.STAT_COUNT, st["n_req"]
        if not isinstance(lg, torch.Tensor) or lg.dim() != 2 or lg.shape[0] < n_req:
            self._warn_once("logits", "bangtrace: the logits processor gave no row per request: pass not recorded")
            return
        lg = lg[:n_req]
        dev = st["ids"].device
        full = torch.full((n_t, n_req + 1, S), -1.0, dtype=torch.float64, device=dev)
        if pending:
            idx = torch.tensor(list(pending.keys()), device=dev)
            full[idx] = torch.stack([v.to(dev) for v in pending.values()])
        t = self.bm.tensor("logits")
        if t is not None:
            from .torch import seg_stats
            full[t.slot, :n_req] = seg_stats(lg, lg.shape[-1], torch.arange(n_req, device=lg.device), n_req).to(dev)
        V = lg.shape[-1]
        f = lg.detach().float().reshape(-1)
        if f.numel() % 2:
            f = torch.cat([f, f.new_zeros(1)])
        host = torch.cat([full.reshape(-1), st["ids"].reshape(-1).double(),
                          st["pos"].reshape(-1)[: st["rows"]].double(), f.view(torch.float64).to(dev)]).cpu().numpy()
        o = full.numel()
        stats = host[:o].reshape(n_t, n_req + 1, S)
        ids = host[o: o + st["rows"]].astype("int64")
        pos = host[o + st["rows"]: o + 2 * st["rows"]].astype("int64")
        logits = host[o + 2 * st["rows"]:].view("float32")[: n_req * V].reshape(n_req, V)
        start = 0
        for i, rid in enumerate(st["rids"]):
            n = st["counts"][i]
            s0, start = start, start + n
            if n == 0 or rid in self.skipped:
                continue
            try:
                self._request_step(rid, ids[s0:s0 + n].tolist(), int(pos[s0]), stats[:, i, :], logits[i], st["decode"],
                                   st["prefix"].get(rid), st["plen"].get(rid), st["held"].get(rid))
            except L.BangtraceError as e:
                log.warning("bangtrace: request %s: %s; its trace is closed", rid, e)
                self._close(rid, "error")
                self.skipped.add(rid)
        if st["decode"]:         # a decode pass runs every running request: one not in it has finished
            here = set(st["rids"])
            for rid in [r for r, q in self.reqs.items() if r not in here and (q.decoded or q.pending) and not q.partial]:
                self._close(rid, "ok")

    def _request_step(self, rid, tokens, pos0, stats, row, decode, prefix=None, plen=None, req=None):
        r = self.reqs.get(rid)
        if r is None:
            if decode or (pos0 != 0 and (prefix is None or len(prefix) != pos0
                                         or self.lib.lib().bangtrace_api_version() < 2)):
                self.skipped.add(rid)
                log.warning("bangtrace: request %s starts at position %d and the tokens before it are not known "
                            "(a decode pass ran between its prefill's chunks, or no scheduler batch on the stack "
                            "holds it): not recorded", rid, pos0)
                return
            r = self.reqs[rid] = self._open(rid)
            if pos0 != 0:
                r.rec.cached_prefix(prefix)      # SGLang's radix cache held the prompt's head
        if req is not None:
            r.req = req
        if not decode:
            p = r.pending
            if p is not None and pos0 == p[1] + len(p[0]):           # the next chunk of a prefill
                widths = [t.width for t in self.bm.tensors]
                r.pending = [p[0] + tokens, p[1], _merge_all(p[2], stats, widths), row.copy()]
            else:
                self._flush(r)
                r.pending = [tokens, pos0, stats.copy(), row.copy()]
            # more of the prompt to come (a chunked prefill): kept open across decode passes
            r.partial = plen is not None and r.pending[1] + len(r.pending[0]) < plen
            return
        self._flush(r)
        r.decoded += 1                   # its input: the token the last step chose
        self._forward(r, tokens, pos0, stats, row)

    def _forward(self, r, tokens, pos0, stats, row):
        st = stats.copy()
        lg = self.bm.tensor("logits")
        if lg is not None and len(tokens) != 1:      # SGLang computes the last row's logits only
            st[lg.slot, :] = -1.0
        r.rec.forward(tokens, pos0, st.reshape(-1), row.astype("float32", copy=False), 1)

    def _flush(self, r):
        if r.pending is not None:
            p, r.pending = r.pending, None
            self._forward(r, p[0], p[1], p[2], p[3])

    def _open(self, rid):
        return _Request(*self._recording(rid))

    def _reset_step(self, e):
        self.step = False if self.step else self.step
        self.red.begin()
        if isinstance(e, Refused):
            self.handlers = {}            # nothing of this model can be recorded: say it once, stay out of the way
            self.root = self.root or object()

    def _before_close(self, rid, r, status):
        if status != "ok":
            return
        self._flush(r)
        # the last step's token, which no later pass fed back: the scheduler's Req has it by now
        out = list(getattr(r.req, "output_ids", None) or ()) if r.req is not None else []
        if len(out) > r.decoded:
            r.rec.sampled(int(out[r.decoded]))


# -- the launcher --
REFUSED = {"--forward-hooks": "the launcher writes --forward-hooks itself; give SGLang the spec yourself "
                              "(python -c 'import bangtrace.sglang as s; print(s.spec(DIR))') to add your own",
           "--enable-torch-compile": "torch.compile captures the forward without the hooks",
           "--speculative-algorithm": "speculative decoding (several tokens per request and pass) is not recorded"}
ONE_RANK = ("--tp-size", "--tp", "--pp-size", "--pp")


USAGE = ("usage: python -m bangtrace.sglang --trace-dir DIR [--] SGLANG_OPTIONS...\n\n"
         "Runs python -m sglang.launch_server with SGLANG_OPTIONS, --disable-cuda-graph and --forward-hooks\n"
         "recording each request into DIR/<rid>.db (bangtrace bisect, report, browse read them).\n"
         "doc/pytorch.md says what is recorded and what is not.")


def launch_args(argv):
    """sglang.launch_server's argv from the launcher's: (trace_dir, args)."""
    if not argv:
        raise ValueError("no --trace-dir (python -m bangtrace.sglang --help)")
    if argv[0] != "--trace-dir" or len(argv) < 2:
        raise ValueError("the first option is --trace-dir DIR")
    d, rest = argv[1], argv[2:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    for i, a in enumerate(rest):
        key = a.split("=", 1)[0]
        if key in REFUSED:
            raise ValueError(f"{key}: {REFUSED[key]}")
        if key in ONE_RANK:
            v = a.split("=", 1)[1] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
            if v != "1":
                raise ValueError(f"{key} {v}: recording needs one rank (each rank sees a shard of every tensor)")
    if "--model-path" not in [a.split("=", 1)[0] for a in rest]:
        raise ValueError("no --model-path: give SGLang the model's local folder")
    out = list(rest)
    if "--disable-cuda-graph" not in out:
        out.append("--disable-cuda-graph")
    out += ["--forward-hooks", json.dumps(spec(d))]
    return d, out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    try:
        d, args = launch_args(argv)
    except ValueError as e:
        print(f"bangtrace.sglang: {e}", file=sys.stderr)
        return 2
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        print(f"bangtrace.sglang: --trace-dir {d}: {e.strerror}", file=sys.stderr)
        return 2
    os.execv(sys.executable, [sys.executable, "-m", "sglang.launch_server", *args])


if __name__ == "__main__":
    sys.exit(main())
