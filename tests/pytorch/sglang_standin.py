"""sglang_standin.py - a stand-in for SGLang's model runner on the CPU, for
tests/pytorch/sglang_check.py: SGLang has no CPU build on PyPI, so its
recorder (bangtrace.sglang) is run here on a dense Llama/Qwen3 written with
SGLang's module names and calling conventions, and hooked through SGLang's
own hook_manager (the file from its wheel; tools/sglang-hook-manager).

What it mirrors of SGLang (0.5.x, python/sglang/srt/models/llama.py and
qwen3.py, model_executor/forward_batch_info.py):
- the root's forward(input_ids, positions, forward_batch) is called directly
  (`model.forward(...)`, so the root's own hooks never fire); the root runs
  `self.model(input_ids, positions, forward_batch)` then
  `self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)`,
  whose output carries next_token_logits, one row per request;
- fused qkv_proj and gate_up_proj returning (output, bias); one rotary
  module shared by every layer, called as rotary_emb(positions, q, k);
  Qwen3's q_norm/k_norm on [tokens * heads, head_dim]; the attention module
  `attn(q, k, v, forward_batch)`; SiluAndMul `act_fn`; RMSNorm called with a
  residual returning (normed, x + residual);
- a ForwardBatch with rids, input_ids, positions, seq_lens, forward_mode
  (is_extend / is_decode) and extend_seq_lens_cpu / extend_prefix_lens_cpu;
  extend and decode passes run apart, a decode pass runs every running
  request.
What it cannot show: that SGLang's current modules still look like this
(doc/pytorch.md)."""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file


class Mode:
    def __init__(self, decode):
        self.decode = decode

    def is_decode(self):
        return self.decode

    def is_extend(self):
        return not self.decode

    def __repr__(self):
        return "DECODE" if self.decode else "EXTEND"


class ForwardBatch:
    def __init__(self, rids, ids, pos, decode, ext_lens, prefix_lens, seq_lens):
        self.rids = rids
        self.input_ids = ids
        self.positions = pos
        self.forward_mode = Mode(decode)
        self.batch_size = len(rids)
        self.extend_seq_lens_cpu = None if decode else ext_lens
        self.extend_prefix_lens_cpu = None if decode else prefix_lens
        self.seq_lens = torch.tensor(seq_lens)


class LogitsProcessorOutput:
    def __init__(self, logits):
        self.next_token_logits = logits


class Linear(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.weight = nn.Parameter(w, requires_grad=False)

    def forward(self, x):
        return x @ self.weight.t(), None


class RMSNorm(nn.Module):
    def __init__(self, w, eps):
        super().__init__()
        self.weight = nn.Parameter(w, requires_grad=False)
        self.eps = eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def forward(self, x, residual=None):
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x


class Rotary(nn.Module):
    def __init__(self, head_dim, theta):
        super().__init__()
        self.hd = head_dim
        self.inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))

    def _rot(self, x, cos, sin):
        T = x.shape[0]
        x = x.reshape(T, -1, self.hd)
        a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
        r = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
        return r.reshape(T, -1)

    def forward(self, positions, q, k):
        f = positions.double().reshape(-1, 1) * self.inv.reshape(1, -1)
        cos, sin = f.cos().float().unsqueeze(1), f.sin().float().unsqueeze(1)
        return self._rot(q, cos, sin), self._rot(k, cos, sin)


class SiluAndMul(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class RadixAttention(nn.Module):
    """Causal attention over each request's cached K/V (the runner's cache,
    by request id)."""

    def __init__(self, layer, nh, nkv, hd, cache):
        super().__init__()
        self.layer, self.nh, self.nkv, self.hd, self.cache = layer, nh, nkv, hd, cache

    def forward(self, q, k, v, forward_batch):
        fb = forward_batch
        lens = [1] * len(fb.rids) if fb.forward_mode.is_decode() else fb.extend_seq_lens_cpu
        out, s = [], 0
        for rid, n in zip(fb.rids, lens):
            kc, vc = self.cache.setdefault((rid, self.layer), ([], []))
            kc.append(k[s:s + n].reshape(n, self.nkv, self.hd))
            vc.append(v[s:s + n].reshape(n, self.nkv, self.hd))
            K, V = torch.cat(kc), torch.cat(vc)
            Q = q[s:s + n].reshape(n, self.nh, self.hd)
            g = self.nh // self.nkv
            K, V = K.repeat_interleave(g, dim=1), V.repeat_interleave(g, dim=1)
            a = torch.einsum("thd,shd->hts", Q, K) / math.sqrt(self.hd)
            past = K.shape[0] - n
            mask = torch.arange(K.shape[0]).reshape(1, -1) > (past + torch.arange(n)).reshape(-1, 1)
            a = a.masked_fill(mask, float("-inf")).softmax(-1)
            out.append(torch.einsum("hts,shd->thd", a, V).reshape(n, -1))
            s += n
        return torch.cat(out)


class Attention(nn.Module):
    def __init__(self, W, p, L, cfg, rope, cache):
        super().__init__()
        nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.q_size, self.kv_size, self.hd = nh * hd, nkv * hd, hd
        self.qkv_proj = Linear(torch.cat([W[p + "q_proj.weight"], W[p + "k_proj.weight"], W[p + "v_proj.weight"]]))
        self.o_proj = Linear(W[p + "o_proj.weight"])
        if p + "q_norm.weight" in W:
            self.q_norm = RMSNorm(W[p + "q_norm.weight"], cfg["rms_norm_eps"])
            self.k_norm = RMSNorm(W[p + "k_norm.weight"], cfg["rms_norm_eps"])
        self.rotary_emb = rope
        self.attn = RadixAttention(L, nh, nkv, hd, cache)

    def forward(self, positions, hidden_states, forward_batch):
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if hasattr(self, "q_norm"):
            q = self.q_norm(q.reshape(-1, self.hd)).reshape(q.shape)
            k = self.k_norm(k.reshape(-1, self.hd)).reshape(k.shape)
        q, k = self.rotary_emb(positions, q, k)
        o, _ = self.o_proj(self.attn(q, k, v, forward_batch))
        return o


class MLP(nn.Module):
    def __init__(self, W, p):
        super().__init__()
        self.gate_up_proj = Linear(torch.cat([W[p + "gate_proj.weight"], W[p + "up_proj.weight"]]))
        self.act_fn = SiluAndMul()
        self.down_proj = Linear(W[p + "down_proj.weight"])

    def forward(self, x, forward_batch=None):
        gu, _ = self.gate_up_proj(x)
        x, _ = self.down_proj(self.act_fn(gu))
        return x


class DecoderLayer(nn.Module):
    def __init__(self, W, L, cfg, rope, cache):
        super().__init__()
        p = f"model.layers.{L}."
        eps = cfg["rms_norm_eps"]
        self.self_attn = Attention(W, p + "self_attn.", L, cfg, rope, cache)
        self.mlp = MLP(W, p + "mlp.")
        self.input_layernorm = RMSNorm(W[p + "input_layernorm.weight"], eps)
        self.post_attention_layernorm = RMSNorm(W[p + "post_attention_layernorm.weight"], eps)

    def forward(self, positions, hidden_states, forward_batch, residual):
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.mlp(hidden_states, forward_batch=forward_batch), residual


class Embedding(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.weight = nn.Parameter(w, requires_grad=False)

    def forward(self, ids):
        return self.weight[ids]


class Model(nn.Module):
    def __init__(self, W, cfg, cache):
        super().__init__()
        self.embed_tokens = Embedding(W["model.embed_tokens.weight"])
        rope = Rotary(cfg["head_dim"], cfg.get("rope_theta", 10000.0))      # one module, as SGLang's get_rope cache
        self.layers = nn.ModuleList([DecoderLayer(W, L, cfg, rope, cache) for L in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(W["model.norm.weight"], cfg["rms_norm_eps"])

    def forward(self, input_ids, positions, forward_batch, input_embeds=None):
        h = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            h, residual = layer(positions, h, forward_batch, residual)
        h, _ = self.norm(h, residual)
        return h


class LogitsProcessor(nn.Module):
    def forward(self, input_ids, hidden_states, lm_head, forward_batch):
        fb = forward_batch
        if fb.forward_mode.is_decode():
            last = hidden_states
        else:
            ends = torch.cumsum(torch.tensor(fb.extend_seq_lens_cpu), 0) - 1
            last = hidden_states[ends]
        return LogitsProcessorOutput(last @ lm_head.weight.t())


class Config:
    def __init__(self, d, path):
        self.__dict__.update(d)
        self._name_or_path = path


class CausalLM(nn.Module):
    def __init__(self, folder):
        super().__init__()
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        W = {k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
        self.config = Config(cfg, folder)
        self.kv = {}
        self.model = Model(W, cfg, self.kv)
        self.lm_head = Embedding(W.get("lm_head.weight", W["model.embed_tokens.weight"]))
        self.logits_processor = LogitsProcessor()

    @torch.no_grad()
    def forward(self, input_ids, positions, forward_batch):
        h = self.model(input_ids, positions, forward_batch)
        return self.logits_processor(input_ids, h, self.lm_head, forward_batch)


class Req:
    """SGLang's Req, as far as the recorder reads it."""

    def __init__(self, rid, prompt, out):
        self.rid, self.origin_input_ids, self.output_ids = rid, prompt, out


class ScheduleBatch:
    def __init__(self, reqs):
        self.reqs = reqs


class Runner:
    """SGLang's scheduler, reduced: greedy requests; each pass either an
    extend of the requests that arrived (their whole prompts, or a chunk of
    `chunk` tokens each) or a decode of every running request. With radix,
    a finished request's K/V stays cached by its tokens, and a new prompt
    starts after the longest head it shares with one (SGLang's radix cache:
    extend_prefix_lens_cpu, its worker's batch holding the Req)."""

    def __init__(self, model, radix=False):
        self.m = model
        self.passes = 0
        self.radix = [] if radix else None     # (tokens, {layer: (K, V)}) of finished requests

    def _hit(self, rid, prompt):
        """The cached head of prompt: its K/V copied into rid's cache; its length."""
        best, kv = 0, None
        for toks, cached in self.radix or ():
            n = 0
            while n < min(len(toks), len(prompt) - 1) and toks[n] == prompt[n]:
                n += 1
            if n > best:
                best, kv = n, cached
        for L, (K, V) in (kv or {}).items():
            self.m.kv[(rid, L)] = ([K[:best]], [V[:best]])
        return best

    def run(self, reqs, arrivals=None, chunk=None, interleave=False):
        """reqs: {rid: (prompt, n_new)}; arrivals: {pass number: [rids]}
        (default: all at pass 0); interleave: a decode pass of the running
        requests after every extend pass (a chunked prefill's chunks apart).
        Returns {rid: generated tokens}."""
        arrivals = arrivals or {0: list(reqs)}
        out = {r: [] for r in reqs}
        done_pos = {r: self._hit(r, reqs[r][0]) if self.radix is not None else 0 for r in reqs}  # prompt tokens prefilled
        self.batch_reqs = {r: Req(r, reqs[r][0], out[r]) for r in reqs}
        waiting, running, k = [], [], 0
        while any(len(out[r]) < reqs[r][1] for r in reqs):
            waiting += arrivals.get(k, [])
            k += 1
            if waiting:                      # an extend pass
                rids, ids, pos, lens, pre, seq = [], [], [], [], [], []
                for r in waiting:
                    p = reqs[r][0]
                    a = done_pos[r]
                    b = len(p) if chunk is None else min(len(p), a + chunk)
                    rids.append(r)
                    ids += p[a:b]
                    pos += list(range(a, b))
                    lens.append(b - a)
                    pre.append(a)
                    seq.append(b)
                    done_pos[r] = b
                lg = self._pass(rids, ids, pos, False, lens, pre, seq)
                for i, r in enumerate(rids):
                    if done_pos[r] == len(reqs[r][0]):
                        out[r].append(int(lg[i].argmax()))
                        running.append(r)
                waiting = [r for r in waiting if done_pos[r] < len(reqs[r][0])]
                running = [r for r in running if len(out[r]) < reqs[r][1]]
                if not interleave:
                    continue
            if not running:
                continue
            rids = list(running)
            ids = [out[r][-1] for r in rids]
            pos = [len(reqs[r][0]) + len(out[r]) - 1 for r in rids]
            lg = self._pass(rids, ids, pos, True, None, None, [p + 1 for p in pos])
            for i, r in enumerate(rids):
                out[r].append(int(lg[i].argmax()))
            running = [r for r in running if len(out[r]) < reqs[r][1]]
        for r in reqs if self.radix is not None else ():
            kv = {L: (torch.cat(K), torch.cat(V)) for (rid, L), (K, V) in self.m.kv.items() if rid == r}
            self.radix.append((reqs[r][0] + out[r][:-1], kv))
        for key in [key for key in self.m.kv if key[0] in reqs]:
            del self.m.kv[key]
        return out

    def _pass(self, rids, ids, pos, decode, lens, pre, seq):
        self.passes += 1
        return self.forward_batch_generation(ScheduleBatch([self.batch_reqs[r] for r in rids]),
                                             ForwardBatch(list(rids), torch.tensor(ids), torch.tensor(pos), decode,
                                                          lens, pre, seq))

    def forward_batch_generation(self, batch, forward_batch):
        """SGLang's TpModelWorker.forward_batch_generation(batch): the
        scheduler's batch a local of the frame that runs the model."""
        return self.m.forward(forward_batch.input_ids, forward_batch.positions, forward_batch).next_token_logits
