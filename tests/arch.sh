#!/bin/sh
# arch.sh - architectures as data (issue 11, src/model/arch.c): qwen3's
# attn_q_norm / attn_k_norm are tapped, injectable and named by bisect; a
# llama trace has no such tensors and refuses to inject into them; inspect
# shows the rope kind and the features; a tensor the architecture does not
# read (rope_freqs before it was applied was one) is an error, not silence;
# refused architectures (granite) and unknown ones are one line, exit 2.
. "${BT_SRCDIR:-.}/tests/lib.sh"
B=$BANGTRACE
py=${PYTHON3:-python3}
"$py" -c "import gguf, numpy" 2>/dev/null || skip "python3 with gguf and numpy is needed to make the random models"
MK="$BT_SRCDIR/tests/oracle/make_random_gguf.py"
"$py" "$MK" "$TMP/qwen3.gguf" --arch qwen3 || { fail "make qwen3"; finish; }
"$py" "$MK" "$TMP/qwen2.gguf" --arch qwen2 || { fail "make qwen2"; finish; }
"$py" "$MK" "$TMP/llama.gguf" --arch llama || { fail "make llama"; finish; }
"$py" "$MK" "$TMP/llama3.gguf" --arch llama --rope-freqs --rope-base 500000 || { fail "make llama3"; finish; }
"$py" "$MK" "$TMP/extra.gguf" --arch llama --extra-tensor blk.0.attn_rot_embd.weight || { fail "make extra"; finish; }
"$py" "$MK" "$TMP/qwen2rf.gguf" --arch qwen2 --extra-tensor rope_freqs.weight || { fail "make qwen2 + rope_freqs"; finish; }
"$py" "$MK" "$TMP/granite.gguf" --arch granite || { fail "make granite"; finish; }

# 1. inspect names the rope kind and the features
expect_exit 0 "inspect qwen3" "$B" inspect "$TMP/qwen3.gguf"
grep -q "rope neox, qkv_bias no, qk_norm yes" "$TMP/out" || fail "inspect qwen3: $(grep rope "$TMP/out")"
expect_exit 0 "inspect qwen2" "$B" inspect "$TMP/qwen2.gguf"
grep -q "rope neox, qkv_bias yes, qk_norm no" "$TMP/out" || fail "inspect qwen2: $(grep rope "$TMP/out")"
expect_exit 0 "inspect llama3" "$B" inspect "$TMP/llama3.gguf" --json
"$py" -c "import json,sys; c=json.load(open(sys.argv[1]))['config']; assert c['rope_kind']=='norm' and c['rope_freqs'] is True, c" "$TMP/out" ||
    fail "inspect --json llama3: rope_freqs not reported"

# 2. qwen3: the q/k norms are traced, injectable, and bisect names them
expect_exit 0 "qwen3 run with a NaN injected into attn_q_norm" \
    "$B" run --model "$TMP/qwen3.gguf" --prompt "the dog" -n 3 --trace "$TMP/q3.db" \
    --inject "nan@layer=1,op=attn_q_norm,step=0,index=3"
expect_exit 1 "bisect finds it" "$B" bisect "$TMP/q3.db" --json
"$py" -c "import json,sys; d=json.load(open(sys.argv[1]))['first_nonfinite']; assert d['tensor']=='blk.1.attn_q_norm' and d['first_bad_index']==3, d" "$TMP/out" ||
    fail "bisect names blk.1.attn_q_norm: $(head -c 300 "$TMP/out")"
"$py" - "$TMP/q3.db" <<'PY' || fail "qwen3 trace: attn_q_norm/attn_k_norm rows in forward order"
import sqlite3, sys
names = [r[0] for r in sqlite3.connect(sys.argv[1]).execute("select name from tensors where model='target' order by idx")]
i = names.index("blk.0.attn_norm")
assert names[i:i + 4] == ["blk.0.attn_norm", "blk.0.attn_q_norm", "blk.0.attn_k_norm", "blk.0.attn_q"], names[:8]
PY
expect_exit 0 "browse --dump step shows the new columns" "$B" browse "$TMP/q3.db" --dump step
grep -q "qnrm" "$TMP/out" && grep -q "knrm" "$TMP/out" || fail "browse grid has qnrm/knrm columns: $(head -c 300 "$TMP/out")"

# 3. llama: no q/k norm tensors, and injecting into one is refused
expect_exit 0 "llama run, traced" "$B" run --model "$TMP/llama.gguf" --prompt "the dog" -n 2 --trace "$TMP/l.db"
"$py" -c "
import sqlite3,sys
n=[r[0] for r in sqlite3.connect(sys.argv[1]).execute('select name from tensors')]
assert not [x for x in n if 'norm' in x and ('_q_' in x or '_k_' in x)], n" "$TMP/l.db" || fail "llama trace has q/k norm tensors"
expect_exit 2 "llama: --inject into attn_q_norm" \
    "$B" run --model "$TMP/llama.gguf" --prompt "x" -n 1 --trace "$TMP/l2.db" --inject "nan@layer=0,op=attn_q_norm,step=0"
grep -q "attn_q_norm is not computed by architecture llama" "$TMP/err" || fail "the error names the op and the architecture: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "one line: $(cat "$TMP/err")"

# 4. every tensor of the file is used, or the file is refused
expect_exit 2 "a tensor llama does not read" "$B" run --model "$TMP/extra.gguf" --prompt x -n 1
grep -q "tensor 'blk.0.attn_rot_embd.weight' is not used by architecture 'llama'" "$TMP/err" || fail "names the tensor: $(cat "$TMP/err")"
expect_exit 2 "rope_freqs.weight in a qwen2 file" "$B" run --model "$TMP/qwen2rf.gguf" --prompt x -n 1
grep -q "rope_freqs.weight is not used by architecture 'qwen2'" "$TMP/err" || fail "names rope_freqs: $(cat "$TMP/err")"
expect_exit 0 "llama with rope_freqs.weight runs" "$B" run --model "$TMP/llama3.gguf" --prompt "the dog" -n 2

# 5. refused and unknown architectures: one line, exit 2
expect_exit 2 "granite is refused" "$B" run --model "$TMP/granite.gguf" --prompt x -n 1
grep -q "architecture 'granite' is refused: its embedding, residual, attention and logit scales" "$TMP/err" || fail "granite's reason: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "one line: $(cat "$TMP/err")"
"$py" - "$TMP/llama.gguf" "$TMP/phi.gguf" <<'PY' || fail "rename the architecture"
import sys
raw = open(sys.argv[1], "rb").read()
# same length: "llama" -> "phi99" in the architecture value and every key prefix
arch = b"general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00"
assert raw.count(arch + b"llama") == 1
open(sys.argv[2], "wb").write(raw.replace(b"llama.", b"phi99.").replace(arch + b"llama", arch + b"phi99"))
PY
expect_exit 2 "an unknown architecture" "$B" run --model "$TMP/phi.gguf" --prompt x -n 1
grep -q "architecture 'phi99' is not supported (llama, mistral, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next, deepseek2, gpt-oss)" "$TMP/err" || fail "lists the supported ones: $(cat "$TMP/err")"
finish
