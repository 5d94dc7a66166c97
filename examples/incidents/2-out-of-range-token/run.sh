#!/usr/bin/env bash
# Case 2: the out-of-range token (see README.md). SmolLM2-135M; ~12 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
need_smol
need_python
FAULT=nan@step=5,layer=17,op=ffn_down,count=3
RUN=(--model "$SMOL" --request "$top/examples/chat.json" -n 24 --threads "$THREADS" --inject "$FAULT" --json)
json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
V=$("$BT" inspect "$SMOL" --json --no-scan | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["config"]["n_vocab"])')

heading "The NaN of case 1 under a Triton-style block argmax (vocabulary: $V ids)"
TRACE=$OUT/oov.db
fresh "$TRACE"
bt triton run "${RUN[@]}" --argmax triton-block:1024 --trace "$TRACE"
say "completion ids: $(json "$OUT/triton.out" 'j["completion_ids"]')"
say "finish_reason:  $(json "$OUT/triton.out" 'j["finish_reason"]'), exit status $rc"
grep -E 'event oov_token|run: the argmax' "$OUT/triton.err" | sed 's/^bangtrace: /   /'
expect "run exits 1 (a GPU engine would have hit its device assert here)" eq "$rc" 1
expect "finish_reason is invalid_token" eq "$(json "$OUT/triton.out" 'j["finish_reason"]')" invalid_token
expect "the last id is $V, the vocabulary size" eq "$(json "$OUT/triton.out" 'j["completion_ids"][-1]')" "$V"
expect "an oov_token event was recorded" has "$OUT/triton.err" "event oov_token at step 5: token id $V"

heading "The block size only moves the padding: the answer is V every time"
bt triton2 run "${RUN[@]}" --argmax triton-block:32768
say "triton-block:32768 (padded with -inf to 65536 lanes): last id $(json "$OUT/triton2.out" 'j["completion_ids"][-1]'), exit $rc"
expect "triton-block:32768 also returns $V and exits 1" eq "$(json "$OUT/triton2.out" 'j["completion_ids"][-1], j["finish_reason"]') $rc" "$V invalid_token 1"

heading "The same fault under the sequential rule: no error at all"
bt first run "${RUN[@]}" --argmax first
say "first: text '$(json "$OUT/first.out" 'j["text"]')', finish_reason $(json "$OUT/first.out" 'j["finish_reason"]'), exit $rc"
expect "the first rule stops quietly (id 0 is <|endoftext|> in SmolLM2) and exits 0" \
    eq "$(json "$OUT/first.out" 'j["finish_reason"]') $rc" "stop 0"

heading "bisect and the rule comparison at step 5"
bt bisect bisect "$TRACE"
grep -E '^(first non|explanation)' "$OUT/bisect.out" | sed 's/^/   /'
expect "bisect exits 1" eq "$rc" 1
expect "first non-finite: step 5, layer 17, ffn_down" has "$OUT/bisect.out" '^first non-finite: step 5, position [0-9]*, layer 17, op ffn_down '
expect "explanation names the rule and the out-of-range id" has "$OUT/bisect.out" "^explanation: step 5: logits all NaN; rule triton-block:1024 -> id $V, outside the vocabulary"
bt step browse "$TRACE" --dump step --step 5
grep -E '^  (argmax|rule)' "$OUT/step.out" | sed 's/^/ /'
expect "first -> 0, torch -> 0, triton -> $V" \
    eval "has '$OUT/step.out' '^  argmax first  0 ' && has '$OUT/step.out' '^  argmax torch  0 ' && has '$OUT/step.out' '^  argmax triton $V '"
finish
