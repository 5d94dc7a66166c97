#!/usr/bin/env python3
"""fake_bangtrace.py - a stand-in for the bangtrace binary, used only to test
the oracle tests themselves (test_oracle_self.py).

It implements the two subcommands test_forward.py drives, with ref.py in
float32 (what a correct C engine amounts to):
  forward --model M [--tokenizer T] --tokens "..." --dump DIR [--threads N]
  run --model M --tokenizer T --prompt "" -n N --temp 0 --json
FAKE_BT_BUG in the environment plants a known bug so the self-test can check
that the comparison catches it and names the right tensor:
  rope_base  - RoPE base 10% off (first bad tensor: blk.0.attn_q)
  ffn_gate   - blk.1.ffn_gate perturbed by 1e-3 after the fact
  drop_ctx   - blk.0.attn_ctx missing from the dump
"""

import argparse
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True     # never litter the source tree with __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref  # noqa: E402


def main(argv):
    if not argv:
        print("usage: fake_bangtrace.py forward|run ...", file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    ap = argparse.ArgumentParser(prog="fake_bangtrace " + cmd)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--threads", type=int)
    if cmd == "forward":
        ap.add_argument("--tokens", required=True)
        ap.add_argument("--dump", required=True)
    elif cmd == "run":
        ap.add_argument("--prompt", default="")
        ap.add_argument("-n", type=int, default=16)
        ap.add_argument("--temp", type=float, default=1.0)
        ap.add_argument("--json", action="store_true")
    else:
        print("fake_bangtrace: unknown command %s" % cmd, file=sys.stderr)
        return 2
    a = ap.parse_args(rest)
    bug = os.environ.get("FAKE_BT_BUG", "")
    try:
        m = ref.load_model(a.model)
    except ref.RefError as e:
        print("fake_bangtrace: %s" % e, file=sys.stderr)
        return 1
    if bug == "rope_base":
        m.cfg["rope_base"] *= 1.1
    if cmd == "run":
        if a.prompt != "" or a.temp != 0:
            print("fake_bangtrace: run supports only --prompt \"\" --temp 0", file=sys.stderr)
            return 2
        ids = ref.greedy(m, [1], a.n, np.float32)
        print(json.dumps({"prompt_ids": [1], "completion_ids": ids[1:]}))
        return 0
    toks = [int(s) for s in a.tokens.split()]
    out = ref.forward(m, toks, dtype=np.float32)
    if bug == "ffn_gate" and "blk.1.ffn_gate" in out:
        out["blk.1.ffn_gate"][-1, 3] += 1e-3
    if bug == "drop_ctx":
        del out["blk.0.attn_ctx"]
    ref.write_dump(out, toks, a.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
