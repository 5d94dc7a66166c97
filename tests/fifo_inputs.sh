#!/bin/sh
# A fifo (or any other non-regular file) given as an input is refused at
# once with one line naming it, exit 2: it once blocked forever in open(2)
# as a model, --tokenizer, --request, a Hugging Face folder's config.json /
# tokenizer*.json / generation_config.json or a shard named in the index,
# and as a trace. Every run is bounded by timeout(1): 124 is the old hang.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v mkfifo > /dev/null 2>&1 || skip "mkfifo(1) is needed"
command -v timeout > /dev/null 2>&1 || skip "timeout(1) is needed"
PY=${PYTHON3:-python3}
L2C="--model $STORIES --tokenizer $TOK512"
mkfifo "$TMP/fifo" || skip "cannot make a fifo in $TMP"

# refused DESC WANT CMD...: exit 2 within 10 s, one stderr line naming WANT as not a regular file
refused() {
    desc=$1 want=$2; shift 2
    timeout 10 "$@" > "$TMP/out" 2> "$TMP/err" < /dev/null
    rc=$?
    if [ $rc -ne 2 ]; then fail "$desc: exit $rc, expected 2 (124 = blocked on the fifo); stderr: $(head -c 300 "$TMP/err")"; return; fi
    if [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -qF -- "$want is not a regular file" "$TMP/err"; then ok "$desc: $(cat "$TMP/err")"
    else fail "$desc: expected one line '$want is not a regular file', got: $(head -c 400 "$TMP/err")"; fi
}
F=$TMP/fifo
refused "run: the model is a fifo" "$F" "$BANGTRACE" run --model "$F" --prompt hi -n 1
refused "run: --tokenizer is a fifo" "$F" "$BANGTRACE" run --model "$STORIES" --tokenizer "$F" --prompt hi -n 1
refused "run: --request is a fifo" "$F" "$BANGTRACE" run $L2C --request "$F"
refused "inspect: the model is a fifo" "$F" "$BANGTRACE" inspect "$F"
refused "tokenize: --file is a fifo" "$F" "$BANGTRACE" tokenize $L2C --file "$F"
refused "tokenize: --chat is a fifo" "$F" "$BANGTRACE" tokenize $L2C --chat "$F"
refused "bench: the model is a fifo" "$F" "$BANGTRACE" bench --model "$F" -p 1 -n 1
refused "forward: the model is a fifo" "$F" "$BANGTRACE" forward --model "$F" --tokens "1" --dump "$TMP/fdump"
refused "probe: --request is a fifo" "$F" "$BANGTRACE" probe $L2C --request "$F" -n 1
refused "probe: the model is a fifo" "$F" "$BANGTRACE" probe --model "$F" --request "$F" -n 1
refused "canary: --prompts is a fifo" "$F" "$BANGTRACE" canary --url http://127.0.0.1:1 --prompts "$F" --count 1
for sub in bisect report browse; do
    if [ $sub = browse ]; then set -- browse "$F" --dump tokens; else set -- $sub "$F"; fi
    refused "$sub: the trace is a fifo" "$F" "$BANGTRACE" "$@"
done
refused "export: the trace is a fifo" "$F" "$BANGTRACE" export "$F" -o "$TMP/x.db"
refused "diff: a trace is a fifo" "$F" "$BANGTRACE" diff "$F" "$F"
printf '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}' > "$TMP/chat.json"
mkfifo "$TMP/t.jinja"
refused "run: --chat-template FILE.jinja is a fifo" "$TMP/t.jinja" "$BANGTRACE" run $L2C --request "$TMP/chat.json" --chat-template "$TMP/t.jinja"
refused "tokenize: --chat-template FILE.jinja is a fifo" "$TMP/t.jinja" "$BANGTRACE" tokenize $L2C --chat "$TMP/chat.json" --chat-template "$TMP/t.jinja"
refused "bisect --reference: the model is a fifo" "$F" "$BANGTRACE" bisect "$F" --reference --model "$F"
# a GGUF model
GG=$(ls "$MODELS"/gguf-tiny/*.gguf 2>/dev/null | head -n 1)
if [ -n "$GG" ]; then
    mkfifo "$TMP/m.gguf"
    refused "run: a .gguf that is a fifo" "$TMP/m.gguf" "$BANGTRACE" run --model "$TMP/m.gguf" --prompt hi -n 1
fi

# Hugging Face folders: each file the loader reads, in turn a fifo
"$PY" -c 'import numpy' 2> /dev/null || { echo "note: python3 cannot import numpy: HF folder cases skipped"; finish; }
tokdir=
if "$PY" -c 'import gguf' 2> /dev/null; then
    "$PY" "${BT_SRCDIR:-.}/tools/gguf-to-hf.py" "$MODELS/gguf-vocab/ggml-vocab-gpt-2.gguf" "$TMP/tok" --vocab-only > /dev/null 2>&1 && tokdir=$TMP/tok
fi
"$PY" "${BT_SRCDIR:-.}/tests/hf_make_bad.py" "$TMP/hf" $tokdir > /dev/null || { fail "hf_make_bad.py failed"; finish; }
# the tokenizer files: a tokenizer-only folder (a vocab-only model)
if [ -n "$tokdir" ]; then
    [ -f "$tokdir/generation_config.json" ] || echo '{}' > "$tokdir/generation_config.json"
    if timeout 20 "$BANGTRACE" inspect --model "$tokdir" > /dev/null 2> "$TMP/err"; then
        for name in tokenizer.json tokenizer_config.json generation_config.json; do
            rm -rf "$TMP/h"; cp -r "$tokdir" "$TMP/h"
            rm -f "$TMP/h/$name"; mkfifo "$TMP/h/$name"
            refused "HF folder: $name is a fifo" "$TMP/h/$name" "$BANGTRACE" inspect --model "$TMP/h"
        done
    else fail "the tokenizer-only folder does not load: $(cat "$TMP/err")"; fi
else echo "note: the gguf package is missing: the tokenizer*.json and generation_config.json cases did not run"; fi
G=$TMP/hf/good
timeout 20 "$BANGTRACE" inspect --model "$G" > /dev/null 2>&1 || { fail "the undamaged HF folder does not load"; finish; }
for name in config.json model.safetensors; do
    rm -rf "$TMP/h"; cp -r "$G" "$TMP/h"
    rm -f "$TMP/h/$name"; mkfifo "$TMP/h/$name"
    refused "HF folder: $name is a fifo" "$TMP/h/$name" "$BANGTRACE" inspect --model "$TMP/h"
done
# a shard named in model.safetensors.index.json
rm -rf "$TMP/h"; cp -r "$G" "$TMP/h"
"$PY" - "$TMP/h" <<'PY' || fail "making the sharded folder"
import json, os, struct, sys
d = sys.argv[1]
src = os.path.join(d, "model.safetensors")
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    names = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
os.rename(src, os.path.join(d, "model-00001-of-00001.safetensors"))
with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in names}}, f)
PY
timeout 20 "$BANGTRACE" inspect --model "$TMP/h" > /dev/null 2> "$TMP/err" && ok "the sharded folder loads" || fail "sharded folder: $(cat "$TMP/err")"
rm -f "$TMP/h/model-00001-of-00001.safetensors"; mkfifo "$TMP/h/model-00001-of-00001.safetensors"
refused "HF folder: a shard named in the index is a fifo" "$TMP/h/model-00001-of-00001.safetensors" "$BANGTRACE" inspect --model "$TMP/h"
rm -f "$TMP/h/model.safetensors.index.json"; mkfifo "$TMP/h/model.safetensors.index.json"
refused "HF folder: the index is a fifo" "$TMP/h/model.safetensors.index.json" "$BANGTRACE" inspect --model "$TMP/h"
finish
