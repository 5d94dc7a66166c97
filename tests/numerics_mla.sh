#!/usr/bin/env bash
# numerics_mla.sh - --numerics kv= on multi-head latent attention (deepseek2,
# issue 28): the latent cache stored as f16, bf16 or f8_e4m3 (vLLM's fp8
# cache with scale 1: round to nearest even, saturating at 448). The tapped
# attn_kv_latent is the cache write, so diff against the f32 run names it
# first (bf16's rounding, below the taps' own bf16 statistics, shows in
# attn_ctx_latent, which reads it); a latent past 448 is held at 448 by the fp8 cache (and kept by
# f16); the profile is in the trace's meta; any other part, and kv=q8_0, is
# refused with one line on an MLA model.
. "${BT_SRCDIR:-.}/tests/lib.sh"
py=${PYTHON3:-python3}
"$py" -c "import numpy, gguf" 2>/dev/null || skip "python3 has no numpy/gguf (the tiny deepseek2 writer)"
M=$TMP/ds.gguf
"$py" "$BT_SRCDIR/tools/make-tiny-deepseek2.py" "$M" --seed 3 >"$TMP/tool.log" 2>&1 || { fail "make-tiny-deepseek2.py: $(tail -1 "$TMP/tool.log")"; finish; }
P="The old man walked to the river every morning"
run() { local m=$1; shift; "$BANGTRACE" run --model "$m" --prompt "$P" -n 8 --ignore-eos "$@"; }
absmax() { sqlite3 "file:$1?mode=ro" "select max(absmax) from v_taps where op = 'attn_kv_latent'"; }
run "$M" --trace "$TMP/f32.db" >/dev/null 2>&1 || fail "the f32 run"
# taps are bf16 statistics: fp8's rounding shows in the latent's own tap,
# bf16's only in what attends to it (attn_ctx_latent, the same layer and step)
for f in f8_e4m3 bf16; do
    run "$M" --numerics kv=$f --trace "$TMP/$f.db" >/dev/null 2>"$TMP/$f.err" || { fail "kv=$f: $(tail -1 "$TMP/$f.err")"; continue; }
    "$BANGTRACE" diff "$TMP/f32.db" "$TMP/$f.db" >"$TMP/d" 2>&1
    ops=attn_kv_latent; [ $f = bf16 ] && ops="(attn_kv_latent|attn_ctx_latent)"
    grep -Eq "^first diverging tap: step 0 .*, layer 0, op $ops " "$TMP/d" \
        && ok "kv=$f: diff against f32 names the latent cache write first ($(grep '^first diverging tap' "$TMP/d" | cut -d: -f2 | cut -c1-50))" \
        || fail "kv=$f diff: $(head -5 "$TMP/d")"
    sqlite3 "file:$TMP/$f.db?mode=ro" "select value from meta where key='numerics'" | grep -q "kv=$f," \
        && ok "kv=$f: the trace's meta records the profile" || fail "kv=$f: meta numerics is not recorded"
done
run "$M" --numerics kv=f16 --trace "$TMP/f16.db" >/dev/null 2>&1 && ok "kv=f16 runs" || fail "kv=f16"
# a latent past fp8's range: the kv_a norm's weights x 1000 in a copy
cp "$M" "$TMP/hot.gguf"
"$py" - "$TMP/hot.gguf" <<'PY' || fail "could not scale the copy"
import sys, gguf
r = gguf.GGUFReader(sys.argv[1], "r+")
for t in r.tensors:
    if t.name.endswith("attn_kv_a_norm.weight"):
        t.data[...] *= 1000
r.data.flush()
PY
run "$TMP/hot.gguf" --trace "$TMP/hot32.db" >/dev/null 2>&1 || fail "the f32 run of the scaled copy"
run "$TMP/hot.gguf" --numerics kv=f8_e4m3 --trace "$TMP/hot8.db" >/dev/null 2>&1 || fail "kv=f8_e4m3 on the scaled copy"
run "$TMP/hot.gguf" --numerics kv=f16 --trace "$TMP/hot16.db" >/dev/null 2>&1 || fail "kv=f16 on the scaled copy"
a32=$(absmax "$TMP/hot32.db"); a8=$(absmax "$TMP/hot8.db"); a16=$(absmax "$TMP/hot16.db")
"$py" -c "import sys; a, b, c = map(float, sys.argv[1:]); sys.exit(0 if a > 1000 and b == 448.0 and c > 1000 else 1)" "$a32" "$a8" "$a16" \
    && ok "a latent of $a32 (f32) is held at 448 by the fp8 cache and kept by f16 ($a16)" \
    || fail "latent absmax f32 $a32, kv=f8_e4m3 $a8 (want 448), kv=f16 $a16"
"$BANGTRACE" bisect "$TMP/hot8.db" >"$TMP/b8" 2>&1; rc=$?
[ "$rc" -eq 0 ] && ok "saturation is not a non-finite value: bisect finds none (the departure is diff's and bisect --reference's to see)" \
    || fail "bisect on the saturated run: exit $rc: $(head -3 "$TMP/b8")"
expect_exit 2 "act=f16 on MLA" "$BANGTRACE" run --model "$M" --prompt "$P" -n 2 --numerics act=f16
grep -q "cover the latent cache only" "$TMP/err" && ok "act=f16 on MLA: $(head -1 "$TMP/err" | cut -c1-90)" || fail "act=f16 on MLA: $(cat "$TMP/err")"
expect_exit 2 "kv=q8_0 on MLA" "$BANGTRACE" run --model "$M" --prompt "$P" -n 2 --numerics kv=q8_0
[ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "kv=q8_0 does not cover a latent cache" "$TMP/err" \
    && ok "kv=q8_0 on MLA: one line" || fail "kv=q8_0 on MLA: $(cat "$TMP/err")"
finish
