"""ref_deepseek2.py - a float64 numpy oracle of the deepseek2 forward
(multi-head latent attention, YaRN, grouped sigmoid routing) over the
weights of tools/make-tiny-deepseek2.py (by GGUF name, numpy layout).

Written from the model's definition, not from bangtrace's engine: attention
is computed decompressed (per head k_nope = W_k,h c, v = W_v,h c from the
cached latent c, as multi-head attention), where the engine absorbs W_k and
W_v into the query and the output; the absorbed query and the latent
context are computed here only to name the engine's tensors. Conventions
are llama.cpp's (src/models/deepseek2.cpp, build_moe_ffn, ggml's YaRN): NORM
rope on each head's trailing rope dims with cos/sin times the rope's
magnitude, kq scale mscale^2 / sqrt(head dim), weights the unbiased probs
of the experts chosen by the biased ones within the best groups."""

import math

import numpy as np


def rms(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def yarn(cfg, n_pos):
    """cos, sin (n_pos, rope/2) with the magnitude folded in, and kq_scale."""
    nr, base = cfg["rope"], cfg["rope_base"]
    factor = cfg["yarn"] or 1.0
    fs, ext = 1.0 / factor, 1.0 if cfg["yarn"] else 0.0
    lm = cfg["yarn_log_mul"] if cfg["yarn"] else 0.0

    def mscale(s, k):
        return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0
    attn = 1.0
    if ext:
        attn = (mscale(factor, lm if lm != 1 else 1.0) / mscale(factor, lm)) if lm else mscale(factor, 1.0)
        attn /= 1.0 + 0.1 * math.log(factor)
    mag = attn * (1.0 + 0.1 * math.log(1.0 / fs)) if ext else attn

    def corr(beta):
        return nr * math.log(cfg["orig_ctx"] / (beta * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = max(0.0, math.floor(corr(32.0))), min(nr - 1.0, math.ceil(corr(1.0)))
    i = np.arange(nr // 2)
    extrap = np.arange(n_pos)[:, None] * base ** (-2.0 * i / nr)[None, :]
    ramp = (1 - np.clip((i - lo) / max(0.001, hi - lo), 0, 1)) * ext
    theta = fs * extrap * (1 - ramp) + extrap * ramp
    ms = attn * (1 + 0.1 * math.log(1 / fs)) * (1 + 0.1 * lm * math.log(1 / fs))
    return np.cos(theta) * mag, np.sin(theta) * mag, ms * ms / math.sqrt(cfg["nope"] + cfg["rope"])


def rope(x, cos, sin):
    """NORM pairs (2i, 2i+1) of x (..., T, rope) rotated at positions 0..T-1."""
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def silu(x):
    return x / (1 + np.exp(-x))


def route(cfg, logits, bias):
    """(experts, weights) per token, best first."""
    X, k = cfg["n_expert"], cfg["n_expert_used"]
    out_e, out_w = [], []
    for z in logits:
        p = 1 / (1 + np.exp(-z)) if cfg["gating"] == "sigmoid" else np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        s = p + bias if bias is not None else p.copy()
        if cfg["n_group"] > 1:
            g = s.reshape(cfg["n_group"], -1)
            score = np.sort(g, axis=1)[:, -2:].sum(1)
            keep = np.argsort(-score, kind="stable")[:cfg["n_group_used"]]
            mask = np.full(cfg["n_group"], True)
            mask[keep] = False
            g[mask] = -np.inf
            s = g.reshape(-1)
        e = np.argsort(-s, kind="stable")[:k]
        w = p[e]
        if cfg["norm_w"]:
            w = w / max(w.sum(), 6.103515625e-5)
        if cfg["scale"] not in (0.0, 1.0):
            w = w * cfg["scale"]
        out_e.append(e)
        out_w.append(w)
    return np.array(out_e), np.array(out_w)


def forward(cfg, W, ids):
    """{bangtrace tensor name: float64 (T, width)} for the prompt ids at 0..T-1."""
    W = {k: v.astype(np.float64) for k, v in W.items()}
    T, E, H = len(ids), cfg["n_embd"], cfg["n_head"]
    nope, nr, vd, kvl, eps = cfg["nope"], cfg["rope"], cfg["v"], cfg["kv_lora"], cfg["norm_eps"]
    dk = nope + nr
    cos, sin, kq = yarn(cfg, T)
    t = {}
    x = W["token_embd.weight"][ids]
    t["token_embd"] = x
    for l in range(cfg["n_layer"]):
        p, n = "blk.%d." % l, "blk.%d." % l
        xn = rms(x, W[p + "attn_norm.weight"], eps)
        t[n + "attn_norm"] = xn
        if cfg["q_lora"]:
            qa = xn @ W[p + "attn_q_a.weight"].T
            t[n + "attn_q_a"] = qa
            qa = rms(qa, W[p + "attn_q_a_norm.weight"], eps)
            t[n + "attn_q_a_norm"] = qa
            q = qa @ W[p + "attn_q_b.weight"].T
        else:
            q = xn @ W[p + "attn_q.weight"].T
        q = q.reshape(T, H, dk).transpose(1, 0, 2).copy()          # (H, T, dk)
        q[..., nope:] = rope(q[..., nope:], cos, sin)
        t[n + "attn_q"] = q.transpose(1, 0, 2).reshape(T, H * dk)
        kva = xn @ W[p + "attn_kv_a_mqa.weight"].T
        t[n + "attn_kv_a"] = kva
        c = rms(kva[:, :kvl], W[p + "attn_kv_a_norm.weight"], eps)
        kpe = rope(kva[:, kvl:], cos, sin)
        t[n + "attn_kv_latent"] = np.concatenate([c, kpe], 1)
        if cfg["kv_layout"] == "fused":
            per = W[p + "attn_kv_b.weight"].reshape(H, nope + vd, kvl)
            wk, wv = per[:, :nope, :], per[:, nope:, :]              # (H, nope, kvl), (H, vd, kvl)
        else:
            wk, wv = W[p + "attn_k_b.weight"].transpose(0, 2, 1), W[p + "attn_v_b.weight"]
        k_nope = np.einsum("hdr,sr->hsd", wk, c)
        v = np.einsum("hjr,sr->hsj", wv, c)
        sc = (np.einsum("htd,hsd->hts", q[..., :nope], k_nope) + np.einsum("htd,sd->hts", q[..., nope:], kpe)) * kq
        sc = np.where(np.tril(np.ones((T, T), bool))[None], sc, -np.inf)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        qabs = np.concatenate([np.einsum("hdr,htd->htr", wk, q[..., :nope]), q[..., nope:]], -1)
        t[n + "attn_q_abs"] = qabs.transpose(1, 0, 2).reshape(T, -1)
        t[n + "attn_ctx_latent"] = np.einsum("hts,sr->thr", pr, c).reshape(T, -1)
        ctx = np.einsum("hts,hsj->thj", pr, v).reshape(T, H * vd)
        t[n + "attn_ctx"] = ctx
        ao = ctx @ W[p + "attn_output.weight"].T
        t[n + "attn_output"] = ao
        x = x + ao
        t[n + "attn_resid"] = x
        fn = rms(x, W[p + "ffn_norm.weight"], eps)
        t[n + "ffn_norm"] = fn
        if l < cfg["n_dense"]:
            g, u = fn @ W[p + "ffn_gate.weight"].T, fn @ W[p + "ffn_up.weight"].T
            t[n + "ffn_gate"], t[n + "ffn_up"], t[n + "ffn_act"] = g, u, silu(g) * u
            d = t[n + "ffn_act"] @ W[p + "ffn_down.weight"].T
            t[n + "ffn_down"] = d
        else:
            lg = fn @ W[p + "ffn_gate_inp.weight"].T
            t[n + "ffn_gate_inp"] = lg
            es, ws = route(cfg, lg, W.get(p + "exp_probs_b.bias"))
            t[n + "routes"] = (es, ws)
            d = np.zeros_like(x)
            for i in range(T):
                for e, w in zip(es[i], ws[i]):
                    h = silu(fn[i] @ W[p + "ffn_gate_exps.weight"][e].T) * (fn[i] @ W[p + "ffn_up_exps.weight"][e].T)
                    d[i] += w * (h @ W[p + "ffn_down_exps.weight"][e].T)
            h = silu(fn @ W[p + "ffn_gate_shexp.weight"].T) * (fn @ W[p + "ffn_up_shexp.weight"].T)
            d += h @ W[p + "ffn_down_shexp.weight"].T
            t[n + "ffn_moe_out"] = d
        x = x + d
        t[n + "ffn_resid"] = x
    xo = rms(x, W["output_norm.weight"], eps)
    t["output_norm"] = xo
    t["logits"] = xo @ W["token_embd.weight"].T
    return t
