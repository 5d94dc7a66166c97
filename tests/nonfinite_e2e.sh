#!/bin/sh
# nonfinite_e2e.sh - end-to-end witnesses, in real traces of stories260K, of
# two rules that unit tests alone checked (issue 22's mutation test):
#  - the NaN / +Inf / -Inf split of the counts: +Inf and -Inf injected at
#    known elements of one tensor and of one logit row come back as those
#    counts in tap_bad and logits (and in the first_nonfinite event and in
#    bisect), never swapped or lumped together (test_stats alone caught a
#    swap before);
#  - each argmax rule on an all-NaN logit row (doc/argmax.md): first and
#    torch pick id 0, triton-block:N the vocabulary size (out of range: exit
#    1), recorded as chosen and in the argmax_* columns, and in the run's
#    completion_ids (test_sampler alone caught a changed `first` before);
#    with one NaN in the row torch picks it and first does not.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
command -v sqlite3 >/dev/null 2>&1 || skip "the sqlite3 shell is needed to read the traces"
PY=${PYTHON3:-python3}
"$PY" -c 'import json' 2>/dev/null || skip "python3 is needed to read JSON"
RUN="--model $STORIES --tokenizer $TOK512 --prompt Once -n 3 --threads 1"
q() { sqlite3 -batch -noheader -separator ' ' "$1" "$2"; }

# ---- +Inf / -Inf in one tensor: 3 +Inf (elements 0..2), 2 -Inf (10, 20) ----
# shellcheck disable=SC2086
expect_exit 0 "run with +Inf and -Inf injected into blk.0.attn_q at step 1" "$BANGTRACE" run $RUN \
    --inject 'inf@op=attn_q,layer=0,step=1,count=3' --inject '-inf@op=attn_q,layer=0,step=1,index=10' \
    --inject '-inf@op=attn_q,layer=0,step=1,index=20' --trace "$TMP/i.db"
got=$(q "$TMP/i.db" "select b.nan, b.pinf, b.ninf, b.first_bad_index from tap_bad b join tensors t on t.idx = b.idx
                     where b.step = 1 and t.name = 'blk.0.attn_q'")
[ "$got" = "0 3 2 0" ] && ok "tap_bad of blk.0.attn_q: 0 NaN, 3 +Inf, 2 -Inf, first at 0" \
    || fail "tap_bad of blk.0.attn_q at step 1: '$got' (nan pinf ninf first), expected '0 3 2 0'"
[ "$(q "$TMP/i.db" "select count(*) from tap_bad where step = 0")" = 0 ] && ok "nothing non-finite before step 1" \
    || fail "step 0 has non-finite taps: $(q "$TMP/i.db" 'select * from tap_bad where step = 0')"
q "$TMP/i.db" "select detail from v_events where kind = 'first_nonfinite'" | grep -q "blk.0.attn_q: 0 NaN, 3 +Inf, 2 -Inf of 64" \
    && ok "first_nonfinite event: 0 NaN, 3 +Inf, 2 -Inf" || fail "event: $(q "$TMP/i.db" "select detail from v_events where kind = 'first_nonfinite'")"
"$BANGTRACE" bisect "$TMP/i.db" --json >"$TMP/b.json" 2>/dev/null
"$BANGTRACE" bisect "$TMP/i.db" >"$TMP/b.txt" 2>&1
grep -q "^first non-finite: step 1, position [0-9]*, layer 0, op attn_q (blk.0.attn_q), index 0: 0 NaN, 3 +Inf, 2 -Inf of 64" "$TMP/b.txt" \
    && ok "bisect: 0 NaN, 3 +Inf, 2 -Inf" || fail "bisect: $(grep 'first non-finite' "$TMP/b.txt")"

# ---- +Inf / -Inf in one logit row: -Inf at 0..6, +Inf at 100 ----
# shellcheck disable=SC2086
expect_exit 0 "run with -Inf and +Inf injected into the logits at step 1" "$BANGTRACE" run $RUN \
    --inject '-inf@op=logits,step=1,count=7' --inject 'inf@op=logits,step=1,index=100' --trace "$TMP/l.db" --json
cp "$TMP/out" "$TMP/l.json"
got=$(q "$TMP/l.db" "select nan, pinf, ninf, argmax_first, chosen from logits where step = 1")
[ "$got" = "0 1 7 100 100" ] && ok "logits row: 0 NaN, 1 +Inf, 7 -Inf; the +Inf (id 100) is the argmax and chosen" \
    || fail "logits at step 1: '$got' (nan pinf ninf argmax_first chosen), expected '0 1 7 100 100'"
[ "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["completion_ids"][1])' "$TMP/l.json")" = 100 ] \
    && ok "completion_ids[1] is 100" || fail "completion_ids: $(head -c 300 "$TMP/l.json")"

# ---- an all-NaN logit row at step 1 under each argmax rule ----
for case in "first 0 0" "torch 0 0" "triton-block:64 512 1" "triton-block:128 512 1"; do
    set -- $case
    rule=$1 want=$2 rc=$3
    db="$TMP/n-$(echo "$rule" | tr ':' '-').db"
    # shellcheck disable=SC2086
    expect_exit "$rc" "all-NaN logits under --argmax $rule (exit $rc)" "$BANGTRACE" run $RUN --argmax "$rule" \
        --inject 'nan@op=logits,step=1,count=512' --trace "$db" --json || continue
    got=$(q "$db" "select nan, rule, chosen, argmax_first, argmax_torch, argmax_triton from logits where step = 1")
    [ "$got" = "512 $rule $want 0 0 512" ] && ok "$rule: chose $want; argmax first 0, torch 0, triton 512" \
        || fail "$rule: logits at step 1: '$got' (nan rule chosen first torch triton), expected '512 $rule $want 0 0 512'"
    ids=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["completion_ids"][1])' "$TMP/out" 2>/dev/null)
    [ "$ids" = "$want" ] && ok "$rule: completion_ids[1] = $want" || fail "$rule: completion_ids[1] '$ids', expected $want"
done
# one NaN (id 7): torch takes it, first skips it (the finite argmax)
# shellcheck disable=SC2086
expect_exit 0 "one NaN logit, --argmax torch" "$BANGTRACE" run $RUN --argmax torch --inject 'nan@op=logits,step=1,index=7' --trace "$TMP/t1.db"
# shellcheck disable=SC2086
expect_exit 0 "one NaN logit, --argmax first" "$BANGTRACE" run $RUN --argmax first --inject 'nan@op=logits,step=1,index=7' --trace "$TMP/f1.db"
[ "$(q "$TMP/t1.db" "select chosen, argmax_torch from logits where step = 1")" = "7 7" ] && ok "torch chose the NaN at 7" \
    || fail "torch with one NaN: $(q "$TMP/t1.db" "select chosen, argmax_torch from logits where step = 1")"
f=$(q "$TMP/f1.db" "select chosen, argmax_first from logits where step = 1")
case $f in "7 "*|*" 7"|"") fail "first with one NaN at 7: '$f'" ;; *) ok "first skipped the NaN ($f)" ;; esac
finish
