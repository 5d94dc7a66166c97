#!/bin/sh
# SentencePiece-converted tokenizer.json (model BPE with byte_fallback, as
# Llama 2, Mistral, Gemma, TinyLlama ship): tests/hf_make_spm.py builds one
# from Llama 2's SPM vocabulary (ggml-vocab-llama-spm.gguf) the way
# transformers' converter does, in three forms (legacy Prepend + Replace
# normalizer; Metaspace prepend_scheme first; Metaspace always + split).
# For each form, every llama.cpp vocab-test case and the cases of
# tests/data/hf_spm_extra.inp (spaces, newlines, characters with no piece ->
# <0xNN>, emoji, specials, the empty string) must encode to the ids Hugging
# Face's `tokenizers` gives (a fourth form adds Digits and a Split regex
# after the legacy normalizer), and decode (Replace, ByteFallback, Fuse, Strip)
# to the text it gives. The legacy form must also give, id for id, what
# bangtrace gives for the same vocabulary in GGUF (SPM) form: on these
# inputs the two references agree (the HF BPE merge order follows the SPM
# scores; they could differ only where two splits of one piece compete, as
# rank orders them and SPM takes the leftmost). The Metaspace forms are
# not compared with SPM: "first" does not add U+2581 before text that starts
# with a space, and split=true merges within words only.
# A folder with tokenizer.model (a SentencePiece ModelProto the generator
# writes by hand) and no tokenizer.json loads as that SPM vocabulary: id for
# id the GGUF's ids, and the same decoded text.
# SKIP when tokenizers or gguf is unavailable.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
PY=${PYTHON3:-python3}
PYTHONPATH=${BT_CACHE:-$HOME/.cache/bangtrace}/py${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH
"$PY" -c 'import tokenizers' 2>/dev/null || skip "the tokenizers Python package is not installed (pip install --target ~/.cache/bangtrace/py tokenizers)"
"$PY" -c 'import gguf, numpy' 2>/dev/null || skip "python3 cannot import gguf and numpy"
G=$MODELS/gguf-vocab/ggml-vocab-llama-spm.gguf
[ -f "$G" ] || skip "$G not found"
EXTRA=$BT_SRCDIR/tests/data/hf_spm_extra.inp

for style in legacy metaspace metaspace-split digits; do
    "$PY" "$BT_SRCDIR/tests/hf_make_spm.py" "$G" "$TMP/$style" "$style" > "$TMP/gen.log" 2>&1 ||
        { fail "$style: hf_make_spm.py: $(tail -1 "$TMP/gen.log")"; continue; }
    "$PY" "$BT_SRCDIR/tests/hf_tokenizers_ref.py" --decode "$BANGTRACE" "$TMP/$style" "$G.inp" "$EXTRA" > "$TMP/agree.log" 2>&1
    rc=$?
    cat "$TMP/agree.log"
    [ $rc -eq 0 ] && ok "$style: ids and decoded text agree with tokenizers" || fail "$style: tokenizers and bangtrace disagree"
done

"$PY" "$BT_SRCDIR/tests/hf_make_spm.py" "$G" "$TMP/model" model > "$TMP/gen.log" 2>&1 ||
    fail "tokenizer.model: hf_make_spm.py: $(tail -1 "$TMP/gen.log")"

# HF forms (legacy tokenizer.json, tokenizer.model) vs the GGUF SPM form, id
# for id and decoded text, every case
for form in legacy model; do
"$PY" - "$BANGTRACE" "$TMP/$form" "$G" "$G.inp" "$EXTRA" > "$TMP/spm.log" 2>&1 <<'PYEOF'
import subprocess, sys, tempfile, os
bt, folder, gguf_path, inps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
cases = []
for inp in inps:
    for c in open(inp, "rb").read().split(b"\n__ggml_vocab_test__\n")[:-1]:
        if c not in cases:
            cases.append(c)
bad = 0
with tempfile.TemporaryDirectory() as td:
    path = os.path.join(td, "case")
    for i, c in enumerate(cases):
        open(path, "wb").write(c)
        r = [subprocess.run([bt, "tokenize", "--model", m, "--parse-special", "--file", path],
                            capture_output=True, text=True) for m in (folder, gguf_path)]
        if r[0].returncode or r[1].returncode or r[0].stdout != r[1].stdout:
            bad += 1
            print(f"case {i} {c[:40]!r}: HF {r[0].stdout.strip() or r[0].stderr.strip()} GGUF {r[1].stdout.strip() or r[1].stderr.strip()}")
            continue
        if not r[0].stdout.strip():
            continue
        d = [subprocess.run([bt, "tokenize", "--model", m, "--decode", r[0].stdout.strip()], capture_output=True)
             for m in (folder, gguf_path)]
        if d[0].returncode or d[0].stdout != d[1].stdout:
            bad += 1
            print(f"case {i} {c[:40]!r}: decoded HF {d[0].stdout!r} GGUF {d[1].stdout!r}")
print(f"{os.path.basename(folder)}: {len(cases) - bad}/{len(cases)} cases: HF folder = GGUF SPM (ids and decoded text)")
sys.exit(1 if bad else 0)
PYEOF
rc=$?
cat "$TMP/spm.log"
[ $rc -eq 0 ] && ok "$form HF form = GGUF SPM form, id for id" || fail "$form: HF and GGUF forms of one vocabulary disagree"
done

# with BOS (the post_processor's TemplateProcessing / add_bos_token) and
# streaming-style decoding: BOS is dropped, the prefix space too
a=$("$BANGTRACE" tokenize --model "$TMP/legacy" --add-special "Hello world" 2>&1)
b=$("$BANGTRACE" tokenize --model "$G" --add-special "Hello world" 2>&1)
[ "$a" = "1 15043 3186" ] && [ "$a" = "$b" ] && ok "--add-special: $a" || fail "--add-special: HF '$a' GGUF '$b'"
t=$("$BANGTRACE" tokenize --model "$TMP/legacy" --decode "$a" 2>&1)
[ "$t" = "Hello world" ] && ok "decode with BOS: '$t'" || fail "decode with BOS: '$t'"
a=$("$BANGTRACE" tokenize --model "$TMP/model" --add-special "Hello world" 2>&1)
[ "$a" = "1 15043 3186" ] && ok "tokenizer.model --add-special: $a" || fail "tokenizer.model --add-special: '$a'"

# both files: tokenizer.json wins (a Metaspace "first" one tells them apart)
cp "$TMP/model/tokenizer.model" "$TMP/metaspace/"
a=$("$BANGTRACE" tokenize --model "$TMP/metaspace" " Hello" 2>&1)
b=$("$BANGTRACE" tokenize --model "$TMP/model" " Hello" 2>&1)
[ "$a" = "15043" ] && [ "$b" = "29871 15043" ] && ok "tokenizer.json is read before tokenizer.model ($a vs $b)" ||
    fail "tokenizer.json + tokenizer.model: '$a', tokenizer.model alone: '$b'"
finish
