#!/usr/bin/env bash
# Case 7: the gate that could not fail (see README.md). A fault that hits
# 3% of requests (an injection drawn per request: p=0.03); a 20-request
# smoke sees nothing; 400 requests measure the rate with an interval that
# excludes 0; an A/B at 40 per arm cannot call the difference and says how
# many requests would.
. "$(dirname "$0")/../lib.sh"
need_stories
heading "A failure that hits a few percent of requests"
req=$OUT/request.json
echo '{"prompt":"Once upon a time","max_tokens":24}' > "$req"
FAULT='nan@step=3,op=token_embd,p=0.03'
say "the fault: --inject $FAULT (a NaN at step 3 on 3% of requests: a token-0 wall)"

heading "The release gate: 20 requests, none may fail"
bt smoke -q probe --model "$STORIES" --tokenizer "$TOK512" --threads "$THREADS" --inject "$FAULT" \
    --request "$req" -n 20 --max-fail 0.03
cat "$OUT/smoke.out"
expect "20 requests: no failure seen" has "$OUT/smoke.out" "failure rate 0.00% (0 of 20)"
expect "... yet the rate is only bounded below 16%: not a pass at 3%" eq "$rc" 1
expect "probe says how many requests a 3% gate needs" has "$OUT/smoke.out" "INCONCLUSIVE.*more"

heading "Measured: 400 requests"
bt many -q probe --model "$STORIES" --tokenizer "$TOK512" --threads "$THREADS" --inject "$FAULT" \
    --request "$req" -n 400 --json
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("   %d of %d failed; Wilson 95%% [%.2f%%, %.2f%%]" % (j["failures"], j["requests"], 100*j["wilson95"][0], 100*j["wilson95"][1]))' "$OUT/many.out"
expect "the interval excludes 0 and covers the true 3%" "$PY" -c '
import json,sys; j=json.load(open(sys.argv[1])); lo,hi=j["wilson95"]
assert j["classes"]["token_wall"] == j["failures"] > 0 and 0 < lo <= 0.03 <= hi' "$OUT/many.out"

heading "A/B: a fixed build against the broken one, 40 requests per arm"
bt ab -q probe --compare --model "$STORIES" --model "$STORIES" --inject "$FAULT" --tokenizer "$TOK512" \
    --threads "$THREADS" --request "$req" -n 40
tail -2 "$OUT/ab.out"
expect "the difference is not called at 40 per arm" has "$OUT/ab.out" "NO SIGNIFICANT DIFFERENCE\|NOT CALLED\|neither arm failed"
expect "probe says how many requests per arm would show it" has "$OUT/ab.out" "per arm"
finish
