#!/usr/bin/env bash
# spec_mtp_llamacpp.sh - run --engine llama.cpp --draft-mtp: llama.cpp's own
# MTP context (LLAMA_CONTEXT_TYPE_MTP, its draft-mtp path) drafts for the
# llama.cpp target, on the tiny hybrid models with an MTP block
# (tools/make-tiny-hybrid.py --mtp 1), a tiny deepseek2 with one (MLA and
# MoE: tools/make-tiny-deepseek2.py --mtp 1, llama.cpp's graph_mtp) and
# their echo (tools/model-edit mtp-echo: drafts that are accepted on
# repetitive text):
#   - greedy --spec-k 3 --draft-mtp is token for token --engine llama.cpp
#     without speculation (qwen35, qwen35moe), with runs that accept and
#     runs that reject (the hybrid target's state rolled back by llama.cpp's
#     n_rs_seq snapshots);
#   - the trace: drafter mtp, the spec trail (accepted and mismatch rows),
#     spec_steps with the acceptance count, the drafter's steps and taps;
#   - bisect --reference replays the qwen35 and qwen35moe traces on the
#     native engine (verify steps with their drafts; teacher-forced top-1
#     100% on the tiny models) with no departure, but for qwen35moe under
#     llama.cpp's default f16 KV cache, where one may come only from a
#     routing near-tie (two router logits within 2e-3 at the departing step,
#     checked on the native engine's dump of that step's input: seed 7's
#     echo model has one, 2.8e-4 at layer 2, position 40 of step 96); with
#     an f32 cache and flash attention off its trace replays clean;
#   - the drafts equal the native engine's --draft-mtp drafts (same trail:
#     position, token, verdict), since both pair (h_{p-1}, x_p) the same way
#     (deepseek2: with llama.cpp's cache in f32 and flash attention off, as
#     its random block drafts from near-ties an f16 cache moves);
#   - llama.cpp's MTP context is tapped: with an f32 cache and flash
#     attention off its drafter tensors under bangtrace's names equal the
#     native drafter's (qwen35, qwen35moe); a NaN injected there is named by
#     bisect as the drafter's, and the answer stays the plain run's;
#   - bad input, one line and exit 2: a model without an MTP block; qwen3next
#     (llama.cpp cannot roll its recurrent state back); another drafter.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
built_with LLAMA_CPP || skip "bangtrace was built without llama.cpp"
"$py" -c "import numpy, gguf" 2>/dev/null || skip "python3 with numpy and gguf makes the hybrid models"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed"
trap 'rm -rf "$TMP"' EXIT
B=$BANGTRACE
# near_tie TRACE MODEL BISECT-OUT: the cross-engine departure bisect
# reported is downstream of a routing near-tie: the departing step's input
# (the token trail up to its first position, then its drafts) computed by
# the native engine has, in a layer up to the departing one, a position
# whose k-th and (k+1)-th router logits are within 2e-3 (k from llama.cpp's
# ffn_moe_weights-0 width). Prints what it found; exit 0 when such a tie is.
near_tie() {
    "$py" - "$@" "$B" "$TMP/tie-dump" <<'PY'
import os, re, sqlite3, subprocess, sys
import numpy as np
db, model, out, B, dump = sys.argv[1:6]
m = re.search(r"^first divergence: step (\d+) \((\w+), positions? (\d+)(?:-(\d+))?\), layer (\d+)", open(out).read(), re.M)
if not m:
    sys.exit("no first divergence in the bisect output")
step, pos0, layer = int(m.group(1)), int(m.group(3)), int(m.group(5))
con = sqlite3.connect(db)
tok = {}
for p, t in con.execute("SELECT pos, token_id FROM v_tokens WHERE role IN ('prompt', 'gen', 'bonus')"):
    tok[p] = t
for p, t in con.execute("SELECT draft_pos, draft_token FROM spec_trail WHERE accepted = 1"):
    tok[p] = t
seq = [tok[p] for p in range(pos0 + 1)]
drafts = [t for (t,) in con.execute("SELECT draft_token FROM spec_trail WHERE step = ? ORDER BY draft_idx", (step,))]
k = con.execute("SELECT width FROM tensors WHERE model = 'target' AND name = 'ffn_moe_weights-0'").fetchone()[0]
ids = seq + drafts
subprocess.run([B, "forward", "--model", model, "--tokens", " ".join(map(str, ids)), "--dump", dump, "--threads", "1"],
               check=True, stdout=subprocess.DEVNULL)
best = None
for l in range(layer + 1):
    f = os.path.join(dump, "blk.%d.ffn_gate_inp.f32" % l)
    if not os.path.exists(f):
        continue
    g = np.fromfile(f, dtype=np.float32).reshape(len(ids), -1)
    for p in range(pos0, len(ids)):
        s = np.sort(g[p])[::-1]
        gap = float(s[k - 1] - s[k])
        if best is None or gap < best[0]:
            best = (gap, l, p)
print("step %d (positions %d-%d), departing layer %d, %d experts a token" % (step, pos0, len(ids) - 1, layer, k))
if best is None:
    sys.exit("no router logits in the native dump")
print("router logits %d and %d apart by %.2g at layer %d, position %d (step %d)" % (k, k + 1, best[0], best[1], best[2], step))
sys.exit(0 if best[0] < 2e-3 else 1)
PY
}
trail() { sqlite3 "$1" "SELECT group_concat(draft_pos || ':' || draft_token || ':' || accepted || ':' || reason, ' ')
                       FROM (SELECT * FROM spec_trail ORDER BY step, draft_idx)"; }
PROMPTS="The old man walked to the river every morning|a b c d e f g a b c"
for A in qwen35 qwen35moe deepseek2; do
    M=$TMP/$A.gguf E=$TMP/$A-echo.gguf
    tiny_mtp_model $A "$M" || continue
    BANGTRACE=$B "$py" "$BT_SRCDIR/tools/model-edit" mtp-echo "$M" "$E" >"$TMP/tool.log" 2>&1 \
        || { fail "model-edit mtp-echo $A: $(tail -1 "$TMP/tool.log")"; continue; }
    mtp_lossless "$A" "$M" "$E" --engine llama.cpp
    [ "$same" = "$runs" ] && ok "$A: greedy --engine llama.cpp --draft-mtp is --engine llama.cpp, $same of $runs runs ($accepted with acceptances, $rejected with rejections)" \
        || fail "$A: $same of $runs llama.cpp --draft-mtp runs equal plain llama.cpp decoding"
    [ "$accepted" -ge 1 ] && [ "$rejected" -ge 2 ] || fail "$A: $accepted runs accepted and $rejected rejected a draft (both paths must run)"
    # the trace, and the drafts against the native engine's
    P="a b c d e f g a b c"
    # deepseek2's random block drafts from near-ties that llama.cpp's default
    # f16 cache moves (1 of 93 drafts at seed 7): compared with an f32 cache
    # and flash attention off, the settings that define the numbers
    LX=
    [ $A = deepseek2 ] && LX="--llama-kv-type f32 --llama-flash-attn off"
    for X in "$M" "$E"; do
        n=$(basename "$X" .gguf)
        "$B" run --engine llama.cpp $LX --model "$X" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$n-l.db" \
            >"$TMP/l.txt" 2>"$TMP/err" || fail "$n traced llama.cpp --draft-mtp run: $(tail -1 "$TMP/err")"
        "$B" run --model "$X" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$TMP/$n-n.db" \
            >"$TMP/n.txt" 2>"$TMP/err" || fail "$n traced native --draft-mtp run: $(tail -1 "$TMP/err")"
        tl=$(trail "$TMP/$n-l.db") tn=$(trail "$TMP/$n-n.db")
        [ -n "$tl" ] && [ "$tl" = "$tn" ] && cmp -s "$TMP/l.txt" "$TMP/n.txt" \
            && ok "$n: llama.cpp's MTP drafts are the native engine's (the same trail, $(echo "$tl" | wc -w) drafts${LX:+, $LX})" \
            || fail "$n: the drafts differ from the native engine's: llama.cpp '${tl:0:120}' native '${tn:0:120}'"
    done
    # the MTP context's taps: with an f32 cache and flash attention off,
    # every drafter tensor llama.cpp names equals the native drafter's
    if [ $A != deepseek2 ]; then
        n=$(basename "$M" .gguf)
        "$B" run --engine llama.cpp --llama-kv-type f32 --llama-flash-attn off --model "$M" --prompt "$P" -n 32 --ignore-eos \
            --spec-k 3 --draft-mtp --trace "$TMP/$n-lf.db" >/dev/null 2>"$TMP/err" || fail "$n f32 llama.cpp --draft-mtp run: $(tail -1 "$TMP/err")"
        "$py" - "$TMP/$n-lf.db" "$TMP/$n-n.db" >"$TMP/dt" 2>&1 <<'PY' && ok "$A: $(tail -1 "$TMP/dt")" || fail "$A drafter taps: $(tail -5 "$TMP/dt")"
import sqlite3, sys
q = "SELECT step, tensor, n, nan, rms, absmax FROM v_taps WHERE model = 'draft' AND n IS NOT NULL"
L = {(r[0], r[1]): r[2:] for r in sqlite3.connect(sys.argv[1]).execute(q)}
N = {(r[0], r[1]): r[2:] for r in sqlite3.connect(sys.argv[2]).execute(q)}
names = {t for _, t in L} & {t for _, t in N}
need = {"token_embd", "output_norm", "logits"} | {"blk.%s.%s" % (l, o) for l in range(8) for o in ("mtp_enorm", "mtp_hnorm", "mtp_eh_proj", "attn_norm", "attn_ctx", "attn_output", "ffn_resid")}
assert any(t.endswith("mtp_eh_proj") for t in names), "no mtp_eh_proj tapped in llama.cpp's MTP context: %s" % sorted(names)
missing = sorted({t for t in need if t in {x for _, x in N}} - names)
assert not missing, "llama.cpp's MTP context lacks %s" % missing
worst, n = 0.0, 0
for k in set(L) & set(N):
    a, b = L[k], N[k]
    if a[2] is None or b[2] is None:     # a row not reduced on one side (the native head's unsampled rows)
        continue
    assert a[0] == b[0] and a[1] == b[1], "%s at step %d: %s elements (%s NaN), native %s (%s)" % (k[1], k[0], a[0], a[1], b[0], b[1])
    for i in (2, 3):
        worst = max(worst, abs(a[i] - b[i]) / max(abs(b[i]), 1e-30))
    n += 1
assert worst <= 1e-4, "largest relative difference %.2g" % worst
print("llama.cpp's MTP context is tapped: %d drafter tensors under bangtrace's names, %d (step, tensor) pairs equal to the native drafter's (largest relative difference %.2g; f32 cache, flash attention off)" % (len(names), n, worst))
PY
    fi
    D=$TMP/$A-echo-l.db
    if [ $A = deepseek2 ]; then   # the trail, the replay: under llama.cpp's defaults
        "$B" run --engine llama.cpp --model "$E" --prompt "$P" -n 32 --ignore-eos --spec-k 3 --draft-mtp --trace "$D" --force \
            >/dev/null 2>"$TMP/err" || fail "$A default llama.cpp --draft-mtp run: $(tail -1 "$TMP/err")"
    fi
    [ "$(sqlite3 "$D" "SELECT value FROM meta WHERE key = 'drafter'")" = mtp ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 1")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM spec_trail WHERE accepted = 0 AND reason = 'mismatch'")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT sum(accepted) FROM spec_steps WHERE drafter = 'mtp'")" = "$(sqlite3 "$D" "SELECT count(*) FROM spec_trail WHERE accepted = 1")" ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM steps WHERE model = 'draft'")" = 1 ] \
        && [ "$(sqlite3 "$D" "SELECT count(*) > 0 FROM v_taps WHERE model = 'draft' AND tensor LIKE '%mtp_eh_proj'")" = 1 ] \
        && ok "$A: the llama.cpp trace has the MTP drafter's trail (accepted and rejected), spec_steps' acceptance counts, its draft steps and their taps" \
        || fail "$A llama.cpp trail: $(sqlite3 "$D" "SELECT reason, count(*) FROM spec_trail GROUP BY reason")"
    # the cross-engine replay: verify steps fed their drafts, top-1 over the
    # rows whose next token the run emitted (qwen35moe's too: its shared
    # expert's ffn_gate-L is no longer taken for the routed experts' ffn_gate)
    "$B" bisect "$D" --reference >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc -eq 0 ]; then
        ok "$A: bisect --reference replays the llama.cpp --draft-mtp trace on the native engine, no departure"
    elif [ $rc -eq 1 ] && [ $A = qwen35moe ] && near_tie "$D" "$E" "$TMP/out" >"$TMP/tie" 2>&1; then
        # llama.cpp's default f16 KV cache moves the router logits by ~1e-3:
        # where two experts tie closer than that, it may route otherwise
        ok "$A: bisect --reference departs only where the routing is a near-tie: $(tail -1 "$TMP/tie")"
    else
        fail "$A: bisect --reference: exit $rc: $(grep -E '^(first divergence|verdict)' "$TMP/out") $(cat "$TMP/err") $(tail -3 "$TMP/tie" 2>/dev/null)"
    fi
    grep -q "^teacher-forced top-1 agreement: \([0-9]*\) of \1 steps (100.0%)" "$TMP/out" \
        && ok "$A: $(grep '^teacher-forced' "$TMP/out")" || fail "$A cross-engine replay: $(tail -3 "$TMP/out")"
    [ $A = qwen35moe ] || continue
    # with an f32 KV cache and flash attention off the router logits agree to
    # ~1e-6 and the MoE layers' taps (ffn_moe_out from llama.cpp's ffn_out)
    # replay with no departure
    "$B" run --engine llama.cpp --llama-kv-type f32 --llama-flash-attn off --model "$E" --prompt "$P" -n 32 --ignore-eos \
        --spec-k 3 --draft-mtp --trace "$TMP/$A-f32.db" >/dev/null 2>"$TMP/err" || fail "$A f32-cache llama.cpp run: $(tail -1 "$TMP/err")"
    expect_exit 0 "$A: bisect --reference on the f32-cache llama.cpp --draft-mtp trace: no departure" "$B" bisect "$TMP/$A-f32.db" --reference
    grep -q "^verdict: llama.cpp stays within" "$TMP/out" && grep -q "^teacher-forced top-1 agreement: \([0-9]*\) of \1 steps (100.0%)" "$TMP/out" \
        && ok "$A f32 cache: $(grep '^verdict' "$TMP/out" | cut -c1-100)" || fail "$A f32 cache replay: $(grep -E '^(first|verdict|teacher)' "$TMP/out")"
done
# bad input
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/nomtp.gguf" --arch qwen35 --mtp 0 --seed 7 >/dev/null 2>&1
expect_exit 2 "--engine llama.cpp --draft-mtp on a model without an MTP block" \
    "$B" run --engine llama.cpp --model "$TMP/nomtp.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "has no MTP (nextn) block" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] && ok "no MTP block: one line naming it" \
    || fail "no MTP block: $(cat "$TMP/err")"
"$py" "$BT_SRCDIR/tools/make-tiny-hybrid.py" "$TMP/next.gguf" --arch qwen3next --mtp 1 --seed 7 >/dev/null 2>&1
expect_exit 2 "--engine llama.cpp --draft-mtp on qwen3next" \
    "$B" run --engine llama.cpp --model "$TMP/next.gguf" --prompt hi -n 4 --spec-k 2 --draft-mtp
grep -q "cannot roll back the recurrent state of architecture qwen3next" "$TMP/err" && [ "$(wc -l < "$TMP/err")" -eq 1 ] \
    && ok "qwen3next: one line (llama.cpp has no partial rollback for it)" || fail "qwen3next: $(cat "$TMP/err")"
# a NaN injected into llama.cpp's MTP context (the block's ffn_down at a
# draft pass): the answer is the plain run's (the target rejects), and
# bisect names the drafter, not the target
"$B" run --engine llama.cpp --model "$TMP/qwen35.gguf" --prompt "a b c d" -n 12 --ignore-eos >"$TMP/plain.txt" 2>/dev/null
"$B" run --engine llama.cpp --model "$TMP/qwen35.gguf" --prompt "a b c d" -n 12 --ignore-eos --spec-k 3 --draft-mtp \
    --inject "nan@layer=4,op=ffn_down,model=draft,step=5" --trace "$TMP/dnan.db" >"$TMP/dnan.txt" 2>"$TMP/err" \
    || fail "--inject model=draft into llama.cpp's MTP drafter: $(tail -1 "$TMP/err")"
expect_exit 1 "bisect on the drafter-injected llama.cpp trace" "$B" bisect "$TMP/dnan.db"
cmp -s "$TMP/plain.txt" "$TMP/dnan.txt" && grep -q "^first non-finite: step 5, .*layer 4, op ffn_down (blk.4.ffn_down), index 0, draft" "$TMP/out" \
    && grep -q "origin: the first non-finite came from the drafter's draft pass at step 5 (blk.4.ffn_down), not from the target" "$TMP/out" \
    && ok "a NaN injected into llama.cpp's MTP context leaves the answer alone and bisect names the drafter's blk.4.ffn_down at step 5" \
    || fail "model=draft into llama.cpp's drafter: $(grep -E '^(first non-finite|  origin)' "$TMP/out") $(cat "$TMP/err")"
expect_exit 2 "--engine llama.cpp with another drafter" \
    "$B" run --engine llama.cpp --model "$TMP/qwen35.gguf" --prompt hi -n 4 --spec-k 2 --draft-ngram 2
grep -q "drafts only with --draft-mtp" "$TMP/err" && ok "another drafter: one line" || fail "another drafter: $(cat "$TMP/err")"
finish
