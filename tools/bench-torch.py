#!/usr/bin/env python3
"""bench-torch.py FOLDER [--engine transformers|vllm|both] [--rounds N]
                 [--prompt-len P] [--new N] [--dtype float32|bfloat16]

What recording costs a PyTorch engine: decode tokens/s of one greedy request
with and without bangtrace recording every tapped tensor, in alternating
rounds, medians, the ratio. Run it in the torch environment (tools/torch-env)
with BANGTRACE_LIB set and python/ on PYTHONPATH (`make bench-torch` does),
on an otherwise idle machine.

transformers: a manual greedy loop (one prefill, then N one-token forwards
with the KV cache), timed over the decode forwards; recorded by
bangtrace.torch.record. vLLM (in-process, eager): two engines on the same
folder, one loaded with BANGTRACE_VLLM set (the plugin records it) and one
without; decode time is the time of a request of N+1 tokens minus that of
a 1-token request (the prefill), per engine, alternating."""
import argparse
import os
import statistics
import sys
import tempfile
import time


def bench_transformers(folder, a, out):
    import torch
    from transformers import AutoModelForCausalLM
    import bangtrace.torch as btt
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, a.dtype)).eval()
    ids = torch.tensor([[(7 * i + 3) % 1000 + 10 for i in range(a.prompt_len)]])

    def run():
        with torch.no_grad():
            o = model(input_ids=ids, use_cache=True)
            past, nxt = o.past_key_values, int(o.logits[0, -1].argmax())
            t0 = time.perf_counter()
            for _ in range(a.new):
                o = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past, nxt = o.past_key_values, int(o.logits[0, -1].argmax())
            return a.new / (time.perf_counter() - t0), nxt

    res = {"off": [], "on": []}
    run()                                   # warm-up
    for r in range(a.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if mode == "off":
                tps, _ = run()
            else:
                path = os.path.join(out, f"tf-{r}.db")
                with btt.record(model, path, model_path=folder) as rec:
                    tps, last = run()
                    rec.last_token(last)
            res[mode].append(tps)
    return res


def bench_vllm(folder, a, out):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    prompt = TokensPrompt(prompt_token_ids=[(7 * i + 3) % 1000 + 10 for i in range(a.prompt_len)])
    kw = dict(model=folder, enforce_eager=True, dtype=a.dtype, max_model_len=a.prompt_len + a.new + 8,
              enable_prefix_caching=False, seed=0)
    os.environ["BANGTRACE_VLLM"] = os.path.join(out, "vllm")
    on = LLM(**kw)
    del os.environ["BANGTRACE_VLLM"]
    off = LLM(**kw)
    engines = {"on": on, "off": off}

    def timed(llm, n):
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        t0 = time.perf_counter()
        llm.generate([prompt], sp, use_tqdm=False)
        return time.perf_counter() - t0

    for llm in engines.values():
        timed(llm, 4)                       # warm-up
    res = {"off": [], "on": []}
    for r in range(a.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            llm = engines[mode]
            full, pre = timed(llm, a.new + 1), timed(llm, 1)
            res[mode].append(a.new / max(full - pre, 1e-9))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--engine", choices=("transformers", "vllm", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.folder, "config.json")):
        sys.exit(f"bench-torch: {a.folder}: not a Hugging Face folder (no config.json)")
    if a.rounds < 1 or a.new < 1 or a.prompt_len < 1:
        sys.exit("bench-torch: --rounds, --new and --prompt-len must be positive")
    import torch
    out = tempfile.mkdtemp(prefix="bench-torch-")
    print(f"# {a.folder}, {a.dtype}, prompt {a.prompt_len}, decode {a.new}, {a.rounds} alternating rounds, "
          f"torch threads {torch.get_num_threads()}; traces in {out}")
    print("| engine | decode tok/s, not recorded | recorded (every tensor) | recorded / not |")
    print("|---|---|---|---|")
    for eng in ("transformers", "vllm") if a.engine == "both" else (a.engine,):
        res = (bench_transformers if eng == "transformers" else bench_vllm)(a.folder, a, out)
        off, on = statistics.median(res["off"]), statistics.median(res["on"])
        print(f"| {eng} | {off:.1f} | {on:.1f} | {on / off:.3f} |", flush=True)
        print(f"#   {eng} rounds off: {' '.join('%.1f' % x for x in res['off'])}; "
              f"on: {' '.join('%.1f' % x for x in res['on'])}", flush=True)


if __name__ == "__main__":
    main()
