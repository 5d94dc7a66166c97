#!/usr/bin/env bash
# Case 1: the wall of "!" (see README.md). SmolLM2-135M; ~15 s on 2 cores.
. "$(dirname "$0")/../lib.sh"
need_smol
need_python
REQ=$top/examples/chat.json
FAULT=nan@step=5,layer=17,op=ffn_down,count=3
RUN=(--request "$REQ" -n 24 --threads "$THREADS")
json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" "${3:-}"; }

heading "What id 0 is in each vocabulary"
bt id0 tokenize --model "$SMOL" --decode 0
say "SmolLM2-135M-Instruct: id 0 = $(cat "$OUT/id0.out")"
expect "SmolLM2's id 0 is <|endoftext|>, not '!'" eq "$(cat "$OUT/id0.out")" "<|endoftext|>"
GPT2=$SHARED/models/gguf-vocab/ggml-vocab-gpt-2.gguf
if [ -f "$GPT2" ]; then
    bt id0gpt2 tokenize --model "$GPT2" --decode 0
    say "GPT-2 vocabulary (also Qwen2, Llama-3, DeepSeek-Coder): id 0 = $(cat "$OUT/id0gpt2.out")"
    expect "GPT-2's id 0 is '!'" eq "$(cat "$OUT/id0gpt2.out")" "!"
fi

heading "The fault on SmolLM2 as it is: the answer just stops"
bt clean run --model "$SMOL" "${RUN[@]}" --json
expect "clean run exits 0" eq "$rc" 0
clean_text=$(json "$OUT/clean.out" 'j["text"]')
say "clean:        $clean_text"
bt cut run --model "$SMOL" "${RUN[@]}" --inject "$FAULT" --json
say "with the NaN: $(json "$OUT/cut.out" 'j["text"]')   (finish_reason $(json "$OUT/cut.out" 'j["finish_reason"]'))"
expect "all-NaN logits pick id 0, <|endoftext|>, and the answer ends early with finish_reason stop" \
    eq "$(json "$OUT/cut.out" 'j["finish_reason"], len(j["completion_ids"]) < 24, sys.argv[2].startswith(j["text"])' "$clean_text")" "stop True True"

heading "A relabelled copy of SmolLM2 whose id 0 is '!' (build/, the source model is untouched)"
bang_id=$("$BT" tokenize --model "$SMOL" '!')
say "'!' is id $bang_id in SmolLM2; tools/model-edit exchanges ids 0 and $bang_id (strings, types, embedding rows)"
"$PY" "$top/tools/model-edit" swap-tokens "$SMOL" "$OUT/bang.gguf" 0 "$bang_id" --force >/dev/null \
    || { echo "FAIL: tools/model-edit swap-tokens"; exit 1; }
bt relabel run --model "$OUT/bang.gguf" "${RUN[@]}" --json
say "clean run of the copy: $(json "$OUT/relabel.out" 'j["text"]')"
expect "the relabelled copy answers exactly as SmolLM2 does" eq "$(json "$OUT/relabel.out" 'j["text"]')" "$clean_text"

heading "The same NaN on the copy: the wall of '!'"
TRACE=$OUT/wall.db
fresh "$TRACE"
bt wall run --model "$OUT/bang.gguf" "${RUN[@]}" --inject "$FAULT" --trace "$TRACE"
say "output: $(cat "$OUT/wall.out")"
grep 'event' "$OUT/wall.err" | sed 's/^bangtrace: /   /'
expect "run exits 0: nothing crashed, nothing is logged by a normal engine" eq "$rc" 0
expect "the output ends in a wall of '!'" has "$OUT/wall.out" '!!!!!!!!!!!!!!!!!!$'
expect "a token_wall event was recorded" has "$OUT/wall.err" "event token_wall .*token 0 ('!')"

heading "bisect: the first bad op"
bt bisect bisect "$TRACE"
grep -E '^(first|explanation|events)' "$OUT/bisect.out" | sed 's/^/   /'
expect "bisect exits 1 (found a fault)" eq "$rc" 1
expect "first non-finite: step 5, layer 17, ffn_down" has "$OUT/bisect.out" '^first non-finite: step 5, position [0-9]*, layer 17, op ffn_down '
expect "explanation: all-NaN logits, rule first -> id 0 ('!')" has "$OUT/bisect.out" "^explanation: step 5: logits all NaN; rule first -> id 0 ('!')"

heading "The browser's walk-back (press w in: bangtrace browse $TRACE)"
bt walk browse "$TRACE" --dump walkback
sed -n '1,8p' "$OUT/walk.out" | sed 's/^/   /'
expect "walk-back starts at step 5, layer 17, ffn_down" has "$OUT/walk.out" '^first non-finite: step 5, layer 17, ffn_down'
expect "walk-back reaches the model's output (output_norm, logits) in the same step" has "$OUT/walk.out" '^  step 5 *output_norm .*after layers'

heading "The argmax of step 5 under each rule"
bt step browse "$TRACE" --dump step --step 5
grep -E '^  (argmax|rule)' "$OUT/step.out" | sed 's/^/ /'
expect "first -> 0 '!' (the wall)" has "$OUT/step.out" "^  argmax first  0 '!'"
expect "torch -> 0, the first NaN (here the same '!')" has "$OUT/step.out" "^  argmax torch  0 '!'"
expect "triton-block -> 49152 = vocabulary size (case 2)" has "$OUT/step.out" '^  argmax triton 49152 '

heading "Something to attach to an issue: export --redact --window 4"
fresh "$OUT/share.db"
bt export export "$TRACE" -o "$OUT/share.db" --redact --window 4
expect "export exits 0" eq "$rc" 0
say "$(wc -c < "$OUT/share.db") bytes (the full trace: $(wc -c < "$TRACE"))"
bt bisect2 bisect "$OUT/share.db"
expect "the redacted window still bisects to step 5, layer 17, ffn_down" has "$OUT/bisect2.out" '^first non-finite: step 5, position [0-9]*, layer 17, op ffn_down '
expect "no prompt text is left in it" eval '! grep -q "capital of France" "$OUT/share.db"'
finish
