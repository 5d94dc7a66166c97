#!/usr/bin/env python3
"""hf_tokenizers_ref.py [--decode] BANGTRACE FOLDER INP... - tokenizer.json agreement.

Splits each llama.cpp vocab-test .inp file into its cases (separator
"\\n__ggml_vocab_test__\\n"), de-duplicates them, encodes each with the
`tokenizers` package (encode(text, add_special_tokens=False), which splits
added tokens as --parse-special does) and with `bangtrace tokenize --model
FOLDER --parse-special --file CASE`, and prints one line per mismatch.
With --decode, `bangtrace tokenize --decode` of those ids must also give
the text tokenizers' decode gives (special tokens kept as text; cases that
hold a special token are left out of this check, since bangtrace drops a
leading BOS the vocabulary adds).
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

args = sys.argv[1:]
check_decode = bool(args) and args[0] == "--decode"
if check_decode:
    args = args[1:]
bangtrace, folder, inps = args[0], args[1], args[2:]
tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
cases, seen = [], set()
for inp in inps:
    with open(inp, "rb") as f:
        for c in f.read().split(b"\n__ggml_vocab_test__\n")[:-1]:
            if c not in seen:
                seen.add(c)
                cases.append(c)
specials = [t.content for t in tok.get_added_tokens_decoder().values()]
bad = ndec = 0
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
            continue
        if check_decode and want and not any(sp in c.decode("utf-8") for sp in specials):
            ndec += 1
            text = tok.decode(want, skip_special_tokens=False)
            p = subprocess.run([bangtrace, "tokenize", "--model", folder, "--decode", " ".join(map(str, want))],
                               capture_output=True)
            dec = p.stdout[:-1].decode("utf-8", errors="replace") if p.returncode == 0 else p.stderr.strip()
            if dec != text:
                bad += 1
                print(f"decode mismatch case {i} {c[:40]!r}: tokenizers {text!r} bangtrace {dec!r}")
print(f"{os.path.basename(folder)}: {len(cases) - bad}/{len(cases)} cases agree with tokenizers"
      + (f" ({ndec} decodes checked)" if check_decode else ""))
sys.exit(1 if bad else 0)
