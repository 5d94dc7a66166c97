#!/bin/sh
# `run --trace` writes a trace that plain sqlite3 can read through the views:
# token trail, steps, taps, logit snapshots; a healthy model records no
# events; an injected NaN is the trace's first non-finite, exactly.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v sqlite3 >/dev/null || skip "sqlite3 CLI not installed"
q() { sqlite3 -batch -noheader "$1" "$2"; }
L2C="--model $STORIES --tokenizer $TOK512"

for p in "Once upon a time" "The little dog" "Tom and Lily went to the park"; do
    expect_exit 0 "trace clean run: $p" "$BANGTRACE" run $L2C --prompt "$p" -n 60 --trace "$TMP/clean.db" --force
    n=$(q "$TMP/clean.db" "select count(*) from v_events")
    [ "$n" = 0 ] && ok "no events for '$p'" || fail "clean run recorded $n events: $(q "$TMP/clean.db" 'select kind, detail from v_events')"
done
t=$TMP/clean.db
[ "$(q $t 'select count(*) from steps')" = 60 ] && ok "60 steps" || fail "steps: $(q $t 'select count(*) from steps')"
[ "$(q $t "select min(step) || '-' || max(step) || '-' || count(distinct step) from steps")" = "0-59-60" ] && ok "steps contiguous" || fail "steps not contiguous"
[ "$(q $t "select count(*) from v_tokens where role = 'gen'")" = 60 ] && ok "60 generated tokens in v_tokens" || fail "gen tokens"
[ "$(q $t "select count(*) from v_tokens where role = 'prompt'")" -ge 5 ] && ok "prompt tokens in v_tokens" || fail "prompt tokens"
# 5 layers x 13 ops + token_embd + output_norm + logits = 68 tensors per step
[ "$(q $t "select count(*) from v_taps where step = 3")" = 68 ] && ok "68 taps per step" || fail "taps per step: $(q $t 'select count(*) from v_taps where step = 3')"
[ "$(q $t "select count(*) from v_taps where nan + pinf + ninf > 0")" = 0 ] && ok "no non-finite taps" || fail "non-finite taps in a clean run"
[ "$(q $t "select count(*) from v_first_nonfinite")" = 0 ] && ok "v_first_nonfinite empty" || fail "v_first_nonfinite not empty"
[ "$(q $t "select count(*) from v_logits")" = 60 ] && ok "a logit snapshot per step" || fail "logit snapshots"
[ "$(q $t 'pragma user_version')" -ge 1 ] && ok "user_version set" || fail "user_version"
# the snapshot's argmax is the token that was chosen (greedy, finite)
[ "$(q $t "select count(*) from v_logits l join tokens k on k.step = l.step and k.role = 'gen' where l.argmax_first != k.token_id")" = 0 ] && ok "argmax_first = emitted token" || fail "argmax vs tokens"
# tap statistics decode: rms of token_embd at step 1 is positive and finite
r=$(q $t "select rms > 0 and rms < 100 from v_taps where step = 1 and tensor = 'token_embd'")
[ "$r" = 1 ] && ok "decoded stats plausible" || fail "decoded rms: $r"

# --taps layers / logits / none
expect_exit 0 "--taps layers" "$BANGTRACE" run $L2C --prompt "Once" -n 5 --taps layers --trace "$TMP/l.db"
[ "$(q $TMP/l.db "select count(*) from v_taps where step = 1")" = 8 ] && ok "layers: 8 taps per step" || fail "layers taps: $(q $TMP/l.db 'select count(*) from v_taps where step = 1')"
expect_exit 0 "--tap-layers 1-2" "$BANGTRACE" run $L2C --prompt "Once" -n 5 --tap-layers 1-2 --trace "$TMP/r.db"
[ "$(q $TMP/r.db "select count(distinct layer) from v_taps where layer is not null")" = 2 ] && ok "tap-layers restricts layers" || fail "tap-layers"
expect_exit 0 "--taps none" "$BANGTRACE" run $L2C --prompt "Once" -n 5 --taps none --trace "$TMP/n.db"
[ "$(q $TMP/n.db "select count(*) from v_taps")" = 0 ] && [ "$(q $TMP/n.db "select count(*) from v_logits")" = 5 ] && ok "none: no taps, snapshots kept" || fail "taps none"
expect_exit 2 "--taps bogus" "$BANGTRACE" run $L2C --prompt "Once" -n 5 --taps bogus --trace "$TMP/x.db"

# Injected NaN: exactly localized, logits collapse, events recorded.
# spec : step : layer : op : index : NaN : +Inf : -Inf (one value per row of a decode step)
# (the last one's trace is checked for collapse events below)
for spec in "inf@step=2,layer=1,op=ffn_up,count=3:2:1:ffn_up:0:0:3:0" "-inf@step=4,layer=3,op=attn_v,count=2:4:3:attn_v:0:0:0:2" \
            "nan@step=3,layer=2,op=ffn_gate,index=5:3:2:ffn_gate:5:1:0:0" "inf@step=1,layer=0,op=attn_q,index=7:1:0:attn_q:7:0:1:0" \
            "-inf@step=6,layer=4,op=ffn_down:6:4:ffn_down:0:0:0:1"; do
    inj=${spec%%:*}; rest=${spec#*:}
    expect_exit 0 "inject $inj" "$BANGTRACE" run $L2C --prompt "Once upon a time" -n 30 --inject "$inj" --trace "$TMP/i.db" --force
    got=$(q "$TMP/i.db" "select step || ':' || layer || ':' || op || ':' || first_bad_index || ':' || nan || ':' || pinf || ':' || ninf from v_first_nonfinite")
    [ "$got" = "$rest" ] && ok "first non-finite $got (step:layer:op:index:NaN:+Inf:-Inf)" || fail "inject $inj: v_first_nonfinite gave '$got', expected '$rest'"
    # the same split in v_taps and in the first_nonfinite event
    want=${rest#*:*:*:*:}
    gotv=$(q "$TMP/i.db" "select nan || ':' || pinf || ':' || ninf from v_taps where nan + pinf + ninf > 0 order by step, idx limit 1")
    [ "$gotv" = "$want" ] && ok "v_taps split $gotv" || fail "inject $inj: v_taps split '$gotv', expected '$want'"
    IFS=: read -r wn wp wi <<EOF
$want
EOF
    q "$TMP/i.db" "select detail from v_events where kind = 'first_nonfinite'" | grep -q ": $wn NaN, $wp +Inf, $wi -Inf of " \
        && ok "first_nonfinite event says $wn NaN, $wp +Inf, $wi -Inf" || fail "event: $(q "$TMP/i.db" "select detail from v_events where kind = 'first_nonfinite'")"
    [ "$(q "$TMP/i.db" "select count(*) from v_events where kind = 'first_nonfinite'")" = 1 ] && ok "first_nonfinite event" || fail "first_nonfinite event"
    built_with LIBUNWIND && frame=bt_engine_forward || frame='without libunwind'
    [ "$(q "$TMP/i.db" "select count(*) from backtraces where kind = 'first_nonfinite' and frames like '%$frame%'")" = 1 ] && ok "backtrace names $frame" \
        || fail "backtrace: $(q "$TMP/i.db" 'select frames from backtraces')"
done
# a NaN in layer 2 of a 5-layer model reaches the logits: the collapse is on record
n=$(q "$TMP/i.db" "select count(*) from v_events where kind in ('nonfinite_logits', 'argmax_fallthrough', 'token_wall')")
[ "$n" -ge 2 ] && ok "collapse events ($n)" || fail "collapse events: $(q "$TMP/i.db" 'select kind from v_events')"
[ "$(q "$TMP/i.db" "select count(*) from logit_rows where reason = 'first_nonfinite'")" = 1 ] && ok "full logit row at first non-finite step" || fail "logit_rows"
expect_exit 2 "bad inject spec" "$BANGTRACE" run $L2C --prompt "Once" -n 3 --inject "nan@layer=x"

# Token walls: triton-block on all-NaN logits yields an out-of-vocabulary id and exit 1.
expect_exit 1 "triton-block on NaN logits exits 1" "$BANGTRACE" run $L2C --prompt "Once" -n 10 \
    --argmax triton-block:64 --inject "nan@op=logits,count=512" --trace "$TMP/t.db"
[ "$(q "$TMP/t.db" "select count(*) from v_events where kind = 'oov_token'")" = 1 ] && ok "oov_token event" || fail "oov event: $(q "$TMP/t.db" 'select kind from v_events')"
expect_exit 0 "first rule on NaN logits: wall of token 0" "$BANGTRACE" run $L2C --prompt "Once" -n 20 --inject "nan@op=logits,count=512" --trace "$TMP/w.db"
[ "$(q "$TMP/w.db" "select count(*) from v_events where kind = 'token_wall'")" = 1 ] && ok "token_wall event" || fail "wall event: $(q "$TMP/w.db" 'select kind from v_events')"

# Taps add no work: a prefill computes only the logit row it samples from,
# taps on or off, so its logits slot holds no statistics while a decode
# step's does; the sampled row is in the logits table; the replay compares
# what both computed; an injection at step 0 still reaches that row.
expect_exit 0 "traced run, multi-token prompt" "$BANGTRACE" run $L2C --prompt "Once upon a time there" -n 3 --trace "$TMP/p.db"
[ "$(q "$TMP/p.db" "select n_pos > 1 from steps where step = 0")" = 1 ] && ok "the prefill computes several positions" || fail "steps: $(q "$TMP/p.db" 'select * from steps')"
[ "$(q "$TMP/p.db" "select count(*) from v_taps where op = 'logits' and step = 0 and min is null and max is null and mean is null and rms is null")" = 1 ] \
    && ok "a prefill's logits slot is unrecorded" || fail "prefill logits tap: $(q "$TMP/p.db" "select * from v_taps where op = 'logits'")"
[ "$(q "$TMP/p.db" "select count(*) from v_taps where op = 'logits' and step >= 1 and rms > 0")" = 2 ] \
    && ok "every decode step's logits are tapped" || fail "decode logits taps: $(q "$TMP/p.db" "select * from v_taps where op = 'logits'")"
[ "$(q "$TMP/p.db" "select count(*) from v_taps where op = 'output_norm' and step = 0 and rms > 0")" = 1 ] \
    && ok "the prefill's other tensors are tapped" || fail "prefill output_norm tap"
[ "$(q "$TMP/p.db" "select count(*) from logits where step = 0 and pos = (select pos0 + n_pos - 1 from steps where step = 0)")" = 1 ] \
    && ok "the prefill's sampled row is in the logits table" || fail "prefill snapshot: $(q "$TMP/p.db" 'select step, pos from logits')"
expect_exit 0 "bisect --reference on it" "$BANGTRACE" bisect "$TMP/p.db" --reference --json
[ "$(field "$TMP/out" 'j["reference"]["divergence"] is None and j["reference"]["max_rel_diff"] == 0 and j["reference"]["steps_compared"] == 3')" = True ] \
    && ok "its replay matches exactly" || fail "replay: $(head -c 600 "$TMP/out")"
expect_exit 0 "NaN into the prefill's logits" "$BANGTRACE" run $L2C --prompt "Once upon a time there" -n 2 --inject "nan@op=logits,step=0,count=512" --trace "$TMP/pn.db" --json
[ "$(field "$TMP/out" 'j["completion_ids"][0]')" = 0 ] && ok "the injected prefill row is the one sampled (the first rule's id 0)" \
    || fail "prefill injection: $(head -c 400 "$TMP/out")"
[ "$(q "$TMP/pn.db" "select nan from logits where step = 0")" = 512 ] && ok "the snapshot counts its 512 NaN" || fail "snapshot: $(q "$TMP/pn.db" 'select * from logits where step = 0')"

# SmolLM2: clean chat runs record no events.
if [ -f "$SMOL" ]; then
    for c in "What is the capital of France?" "Write a haiku about the sea." "List three primary colors."; do
        printf '{"messages": [{"role": "user", "content": "%s"}], "max_tokens": 40}' "$c" > "$TMP/c.json"
        expect_exit 0 "SmolLM2 traced: $c" "$BANGTRACE" run --model "$SMOL" --request "$TMP/c.json" --trace "$TMP/s.db" --force
        n=$(q "$TMP/s.db" "select count(*) from v_events")
        [ "$n" = 0 ] && ok "SmolLM2 clean: no events" || fail "SmolLM2 clean run recorded events: $(q "$TMP/s.db" 'select kind, detail from v_events')"
    done
else
    echo "SmolLM2 not cached: its clean-run part is not checked"
fi
finish
