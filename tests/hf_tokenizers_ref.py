#!/usr/bin/env python3
"""hf_tokenizers_ref.py BANGTRACE FOLDER INP... - tokenizer.json agreement.

Splits each llama.cpp vocab-test .inp file into its cases (separator
"\\n__ggml_vocab_test__\\n"), de-duplicates them, encodes each with the
`tokenizers` package (encode(text, add_special_tokens=False), which splits
added tokens as --parse-special does) and with `bangtrace tokenize --model
FOLDER --parse-special --file CASE`, and prints one line per mismatch.
Exit 0 when every case agrees, 1 otherwise, 77 when tokenizers is missing."""
import os
import subprocess
import sys
import tempfile

try:
    from tokenizers import Tokenizer
except ImportError:
    print("SKIP: the tokenizers Python package is not installed "
          "(pip install --target ~/.cache/bangtrace/py tokenizers)")
    sys.exit(77)

bangtrace, folder, inps = sys.argv[1], sys.argv[2], sys.argv[3:]
tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
cases, seen = [], set()
for inp in inps:
    with open(inp, "rb") as f:
        for c in f.read().split(b"\n__ggml_vocab_test__\n")[:-1]:
            if c not in seen:
                seen.add(c)
                cases.append(c)
bad = 0
with tempfile.TemporaryDirectory() as td:
    path = os.path.join(td, "case")
    for i, c in enumerate(cases):
        want = tok.encode(c.decode("utf-8"), add_special_tokens=False).ids
        with open(path, "wb") as f:
            f.write(c)
        p = subprocess.run([bangtrace, "tokenize", "--model", folder, "--parse-special", "--file", path],
                           capture_output=True, text=True)
        got = [int(x) for x in p.stdout.split()] if p.returncode == 0 else p.stderr.strip()
        if got != want:
            bad += 1
            print(f"mismatch case {i} {c[:40]!r}: tokenizers {want} bangtrace {got}")
print(f"{os.path.basename(folder)}: {len(cases) - bad}/{len(cases)} cases agree with tokenizers")
sys.exit(1 if bad else 0)
