#!/bin/sh
# Being told the truth about --inject: a spec this run can never match is
# refused before any work (exit 2, one line naming the part, no trace
# written); a spec that could have matched but never changed anything is a
# warning, an inject_unfired event, and report does not claim a fault was
# injected; the tensor the injector wrote is reported as the injector's,
# not as the kernel's.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v sqlite3 >/dev/null || skip "sqlite3 CLI not installed"
q() { sqlite3 -batch -noheader "$1" "$2"; }
RUN="--model $STORIES --tokenizer $TOK512 --prompt Once_upon_a_time --threads 1"
n_prompt=$("$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --add-special Once_upon_a_time | wc -w)

# ---- never matchable: exit 2 before any work, the part named ----
# -n 10: steps 0..9; positions 0 .. n_prompt + 8
last_pos=$((n_prompt + 8))
i=0
while IFS='|' read -r extra spec part; do
    i=$((i + 1))
    db="$TMP/never$i.db"
    # shellcheck disable=SC2086
    if expect_exit 2 "never matches: $spec $extra" "$BANGTRACE" run $RUN -n 10 $extra --inject "$spec" --trace "$db"; then
        if [ "$(grep -c . "$TMP/err")" = 1 ] && grep -qF -- "--inject '$spec': $part" "$TMP/err"; then ok "names it: $(cat "$TMP/err")"
        else fail "'$spec': expected one line with \"$part\"; stderr: $(cat "$TMP/err")"; fi
        [ ! -e "$db" ] && ok "no trace written" || fail "'$spec': a trace was written"
        [ ! -s "$TMP/out" ] && ok "no completion printed" || fail "'$spec': stdout: $(head -c 200 "$TMP/out")"
    fi
done <<LIST
|nan@layer=5,op=ffn_down|layer 5 is beyond the model's 5 layers (0..4)
|kvcorrupt@layer=7,pos=1|layer 7 is beyond the model's 5 layers
|nan@op=blk.5.attn_q|layer 5 is beyond
|nan@model=draft|model=draft, but this run has no draft model
--spec-k 2 --draft-ngram 2|nan@model=draft,op=logits|model=draft, but this run has no draft model
--spec-k 2 --draft-self 2|nan@model=draft,layer=2|layer 2 is beyond the draft model's 2 layers (0..1)
--ctx 64|nan@pos>=64|pos>=64 is beyond the context (positions 0..63; --ctx)
|longctx@pos>=4000,op=attn_v,scale=2|pos>=4000 is beyond the context
--ctx 64|kvcorrupt@layer=1,pos=64|pos=64 is beyond the context (positions 0..63; --ctx)
--ctx 64|nan@step=$((64 - n_prompt + 1))|step=$((64 - n_prompt + 1)) is beyond the last step this context allows ($((64 - n_prompt)))
--ctx 64|nan@step>=$((64 - n_prompt + 1)),op=logits|step>=$((64 - n_prompt + 1)) is beyond the last step this context allows
|nan@op=attn_k,index=32|index=32 is past the end of attn_k's rows (32 values)
|nan@index=512|index=512 is past the end of every tensor's rows
LIST
# inside the context but past this run's -n: it could have matched in a longer run, so it runs and warns
for spec in "nan@pos>=$((last_pos + 1))" "nan@step=10" "kvcorrupt@layer=1,pos=$((last_pos + 1))"; do
    expect_exit 0 "past -n, inside the context: $spec" "$BANGTRACE" -q run $RUN -n 10 --inject "$spec"
    grep -qF -- "--inject '$spec' never fired" "$TMP/err" && ok "'$spec' warns it never fired" || fail "'$spec': $(cat "$TMP/err")"
done
# the limits are not too tight: the last step, position and index of each kind do match
for spec in "nan@step=9,op=logits" "nan@pos>=$last_pos,op=logits" "nan@op=attn_k,index=31" "nan@layer=4" "kvcorrupt@layer=4,pos=$last_pos"; do
    expect_exit 0 "reachable: $spec" "$BANGTRACE" -q run $RUN -n 10 --inject "$spec"
    grep -q "never fired" "$TMP/err" && fail "'$spec' did not fire: $(cat "$TMP/err")" || ok "'$spec' fired"
done
expect_exit 0 "model=draft with --draft-self fires" "$BANGTRACE" -q run $RUN -n 10 --spec-k 2 --draft-self 2 --inject "nan@model=draft,layer=1,step>=3"
grep -q "never fired" "$TMP/err" && fail "draft spec did not fire: $(cat "$TMP/err")" || ok "draft spec fired"

# ---- could have matched, never fired ----
# The run stops at end-of-generation long before step 390 (but -n 400 allows it).
expect_exit 0 "a spec past the end-of-generation stop" "$BANGTRACE" -q run $RUN -n 400 --inject "nan@step=390,layer=1" --trace "$TMP/u1.db"
if [ "$(grep -c 'never fired' "$TMP/err")" = 1 ] && grep -q "^bangtrace: warning: --inject 'nan@step=390,layer=1' never fired" "$TMP/err"; then ok "warning on stderr"
else fail "no never-fired warning: $(cat "$TMP/err")"; fi
[ "$(q "$TMP/u1.db" "select count(*) from events where kind = 'inject_unfired' and detail = 'nan@step=390,layer=1'")" = 1 ] \
    && ok "inject_unfired event with the spec" || fail "events: $(q "$TMP/u1.db" 'select kind, detail from events')"
expect_exit 0 "report on it" "$BANGTRACE" report "$TMP/u1.db"
grep -q "none fired" "$TMP/out" && ok "report: none fired" || fail "report does not say none fired: $(grep -i inject "$TMP/out")"
grep -q "Faults were injected" "$TMP/out" && fail "report claims faults were injected" || ok "report does not claim an injection"
grep -q '| never fired | `\["nan@step=390,layer=1"\]` |' "$TMP/out" && ok "report lists the unfired spec" || fail "report: $(grep -i fired "$TMP/out")"

# One fires, one (scale=1 changes no value) does not.
expect_exit 0 "one fired, one not" "$BANGTRACE" -q run $RUN -n 20 --inject "scale=1@op=ffn_up" --inject "inf@layer=2,op=attn_q,step=5" --trace "$TMP/u2.db"
[ "$(grep -c 'never fired' "$TMP/err")" = 1 ] && grep -q "'scale=1@op=ffn_up' never fired" "$TMP/err" && ok "only scale=1 warned" || fail "stderr: $(cat "$TMP/err")"
[ "$(q "$TMP/u2.db" "select group_concat(detail) from events where kind = 'inject_unfired'")" = "scale=1@op=ffn_up" ] \
    && ok "one inject_unfired event, for the spec that did not fire" || fail "events: $(q "$TMP/u2.db" 'select kind, detail from events')"
expect_exit 0 "report on it" "$BANGTRACE" report "$TMP/u2.db"
cp "$TMP/out" "$TMP/rep.md"
grep -q "1 of 2 never fired" "$TMP/rep.md" && ok "report: 1 of 2 never fired" || fail "report: $(grep -i -A1 'injected\|fired' "$TMP/rep.md")"

# ---- the injector, not the kernel, wrote the first non-finite ----
d=$(q "$TMP/u2.db" "select detail from events where kind = 'first_nonfinite'")
case $d in
*"written by --inject 'inf@layer=2,op=attn_q,step=5' (the injector; computed by matmul "*) ok "first_nonfinite: written by the injector" ;;
*) fail "first_nonfinite detail: $d" ;;
esac
grep -q "written by --inject 'inf@layer=2,op=attn_q,step=5' (the injector" "$TMP/rep.md" && ok "report shows the injector" \
    || fail "report: $(grep -i 'written by' "$TMP/rep.md")"
grep -q "written by matmul" "$TMP/rep.md" && fail "report says the kernel wrote it" || ok "report does not blame the kernel"
# With only layer outputs tapped, the first bad tapped tensor is downstream of the injected one.
expect_exit 0 "layers-only taps" "$BANGTRACE" -q run $RUN -n 10 --taps layers --inject "nan@layer=2,op=ffn_gate,step=3" --trace "$TMP/u3.db"
d=$(q "$TMP/u3.db" "select detail from events where kind = 'first_nonfinite'")
case $d in
*"blk.2.ffn_resid"*"downstream of --inject 'nan@layer=2,op=ffn_gate,step=3' on blk.2.ffn_gate at step 3"*) ok "downstream tensor names the injection" ;;
*) fail "downstream detail: $d" ;;
esac
finish
