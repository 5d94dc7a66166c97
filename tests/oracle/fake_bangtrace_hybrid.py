#!/usr/bin/env python3
"""fake_bangtrace_hybrid.py - a stand-in for the bangtrace binary on qwen35,
used only to test test_hybrid_forward.py itself (test_hybrid_self.py): the
oracle's tensors rounded to float32 are what a correct engine dumps.

  forward --model M --tokens "..." --dump DIR [--threads N] [--mtp]
  run --model M --prompt TEXT -n N --temp 0 --ignore-eos --json
      (the prompt is not tokenized: its ids are fixed, 464 3290 373 257)
FAKE_BT_BUG plants a known bug:
  refuse     - exit 2 with bangtrace's message for an unknown architecture
  heads      - value head j reads key head j // (nv/nk) (HF's grouped order
               on the GGUF's tiled weights): first bad tensor blk.0.ssm_core
  state      - blk.2.ssm_state perturbed by 1e-3 after the fact
  drop_conv  - blk.0.ssm_conv_state missing from the dump
"""

import argparse
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref  # noqa: E402
import ref_hybrid as rh  # noqa: E402

PROMPT_IDS = [464, 3290, 373, 257]


def main(argv):
    if not argv or argv[0] not in ("forward", "run"):
        print("usage: fake_bangtrace_hybrid.py forward|run ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    ap = argparse.ArgumentParser(prog="fake_bangtrace_hybrid " + cmd)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int)
    if cmd == "forward":
        ap.add_argument("--tokens", required=True)
        ap.add_argument("--dump", required=True)
        ap.add_argument("--mtp", action="store_true")
    else:
        ap.add_argument("--prompt", default="")
        ap.add_argument("-n", type=int, default=16)
        ap.add_argument("--temp", type=float, default=1.0)
        ap.add_argument("--ignore-eos", action="store_true")
        ap.add_argument("--json", action="store_true")
    a = ap.parse_args(rest)
    bug = os.environ.get("FAKE_BT_BUG", "")
    if bug == "refuse":
        print("bangtrace: %s: %s: architecture 'qwen35' is not supported (llama, mistral, qwen2, qwen3, qwen3moe)"
              % (cmd, a.model), file=sys.stderr)
        return 2
    try:
        m = rh.load(a.model)
    except ref.RefError as e:
        print("fake_bangtrace_hybrid: %s" % e, file=sys.stderr)
        return 2
    if bug == "heads":
        src = open(rh.__file__).read().replace("np.arange(nv) % nk", "np.arange(nv) // (nv // nk)")
        ns = {"__name__": "ref_hybrid_heads", "__file__": rh.__file__}
        exec(compile(src, rh.__file__, "exec"), ns)
        fwd, greedy = ns["forward"], ns["greedy"]
    else:
        fwd, greedy = rh.forward, rh.greedy
    if cmd == "run":
        ids = greedy(m, PROMPT_IDS, a.n)
        print(json.dumps({"prompt_ids": PROMPT_IDS, "completion_ids": ids[len(PROMPT_IDS):]}))
        return 0
    toks = [int(s) for s in a.tokens.split()]
    out = fwd(m, toks)
    if bug == "state":
        out["blk.2.ssm_state"][3, 5] += 1e-3
    if bug == "drop_conv":
        del out["blk.0.ssm_conv_state"]
    if a.mtp and m.cfg["n_mtp"]:
        # the MTP block as forward --mtp pairs it: id t with output_norm row t - 1
        h = np.zeros((len(toks), m.cfg["dim"]))
        h[1:] = out["output_norm"][:-1]
        out.update(rh.mtp(m, h, toks, pos0=0))
    ref.write_dump(out, toks, a.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
