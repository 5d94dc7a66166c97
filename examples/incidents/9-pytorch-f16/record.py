"""record.py FOLDER TRACE DTYPE [SCALED_FOLDER FACTOR] - case 9's PyTorch side
(run in the torch environment by run.sh).

With SCALED_FOLDER FACTOR: write a copy of FOLDER whose layer 1 MLP
down-projection weight is FACTOR times larger, and stop. Otherwise: load
FOLDER with transformers in DTYPE (float32 or float16), generate 8 tokens
greedily from a fixed prompt and record the forwards with bangtrace.torch
into TRACE; print the generated ids."""
import os
import shutil
import sys

import torch

folder, trace, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
if len(sys.argv) > 4:
    from safetensors.torch import load_file, save_file
    out, factor = sys.argv[4], float(sys.argv[5])
    if os.path.lexists(out):
        sys.exit(f"record.py: {out} exists; it is not replaced (run.sh removes its own copy first)")
    shutil.copytree(folder, out)
    w = load_file(os.path.join(folder, "model.safetensors"))
    w["model.layers.1.mlp.down_proj.weight"] = w["model.layers.1.mlp.down_proj.weight"] * factor
    save_file(w, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    sys.exit(0)

import bangtrace.torch as btt  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
ids = torch.tensor([[1, 17, 40, 9, 200, 5, 77, 12, 33]])
with torch.no_grad(), btt.record(model, trace, model_path=folder) as rec:
    out = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    rec.last_token(out[0, -1])
print(" ".join(map(str, out[0, ids.shape[1]:].tolist())))
