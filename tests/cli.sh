#!/bin/sh
# The command line: help tells the truth, every bad input is one line on
# stderr and exit 2, and `run` honours requests, stop strings and --json.
. "${BT_SRCDIR:-.}/tests/lib.sh"

one_line_err() {   # the last command's stderr is exactly one line naming $1
    n=$(wc -l < "$TMP/err")
    if [ "$n" -ne 1 ] || ! grep -q -e "$1" "$TMP/err"; then
        fail "expected one stderr line mentioning '$1', got: $(cat "$TMP/err")"
    fi
}

expect_exit 0 "--version" "$BANGTRACE" --version && grep -q '^bangtrace [0-9]' "$TMP/out" || fail "version line"
expect_exit 2 "no command" "$BANGTRACE"
expect_exit 2 "unknown command" "$BANGTRACE" frobnicate && one_line_err frobnicate
expect_exit 2 "unknown global flag" "$BANGTRACE" --frob && one_line_err --frob
expect_exit 0 "help" "$BANGTRACE" help && cp "$TMP/out" "$TMP/help"
for c in run inspect tokenize bench forward; do
    grep -q "^  $c " "$TMP/help" || fail "help does not list $c"
    expect_exit 0 "help $c" "$BANGTRACE" help "$c" && grep -q "usage: bangtrace $c" "$TMP/out" || fail "help $c has no usage line"
    cp "$TMP/out" "$TMP/help_c"
    expect_exit 0 "$c --help" "$BANGTRACE" "$c" --help && cmp -s "$TMP/out" "$TMP/help_c" || fail "$c --help differs from help $c"
done
expect_exit 2 "help for an unknown command" "$BANGTRACE" help nosuch && one_line_err nosuch
expect_exit 2 "run: unknown flag" "$BANGTRACE" run --bogus && one_line_err --bogus
expect_exit 2 "run: no model" "$BANGTRACE" run --prompt hi && one_line_err --model
expect_exit 2 "run: missing file" "$BANGTRACE" run --model "$TMP/none.gguf" --prompt hi && one_line_err none.gguf
expect_exit 2 "run: -n not a number" "$BANGTRACE" run --model x --prompt hi -n abc && one_line_err -n
expect_exit 2 "run: bad argmax rule" "$BANGTRACE" run --model x --prompt hi --argmax bogus && one_line_err bogus
expect_exit 2 "run: both prompt and request" "$BANGTRACE" run --model x --prompt hi --request y

need_shared
L2C="--model $STORIES --tokenizer $TOK512"
printf '{"prompt": "Once upon", "max_tokens": 4,' > "$TMP/bad.json"
expect_exit 2 "run: malformed request JSON" "$BANGTRACE" run $L2C --request "$TMP/bad.json" && one_line_err bad.json
printf '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "frobnicate": 1}' > "$TMP/req.json"
expect_exit 0 "run: completions request with an unknown field" "$BANGTRACE" run $L2C --request "$TMP/req.json"
grep -q frobnicate "$TMP/err" && ok "unknown field warned about" || fail "no warning naming the unknown field"
printf '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}' > "$TMP/chat.json"
expect_exit 2 "run: chat request on a model without a template" "$BANGTRACE" run $L2C --request "$TMP/chat.json" && one_line_err --chat-template
expect_exit 0 "run: chat request with --chat-template chatml" "$BANGTRACE" run $L2C --request "$TMP/chat.json" --chat-template chatml

# Stop strings cut the text before the stop, finish_reason "stop".
"$BANGTRACE" run $L2C --prompt "" -n 200 --json > "$TMP/full.json" 2>/dev/null || fail "greedy json run"
printf '{"prompt": "", "max_tokens": 200, "stop": ["Lily"]}' > "$TMP/stop.json"
expect_exit 0 "run: stop string" "$BANGTRACE" run $L2C --request "$TMP/stop.json"
if grep -q Lily "$TMP/out"; then fail "stop string appears in the output"; else ok "stop string cut the output"; fi
expect_exit 0 "run: stop string --json" "$BANGTRACE" run $L2C --request "$TMP/stop.json" --json
grep -q '"finish_reason": *"stop"' "$TMP/out" && ok "finish_reason stop" || fail "finish_reason: $(cat "$TMP/out")"

# Flags override the request body; every argmax rule runs on a healthy model.
expect_exit 0 "run: -n overrides max_tokens" "$BANGTRACE" run $L2C --request "$TMP/req.json" -n 2 --json
grep -q '"completion_ids": *\[[0-9]*, *[0-9]*\]' "$TMP/out" && ok "2 tokens" || fail "expected 2 completion ids: $(cat "$TMP/out")"
for rule in first torch triton-block:64; do
    expect_exit 0 "run --argmax $rule" "$BANGTRACE" run $L2C --prompt "Once" -n 8 --argmax "$rule"
done
# Sampling is deterministic for a seed.
"$BANGTRACE" run $L2C --prompt "Once" -n 30 --temp 0.9 --seed 7 > "$TMP/s1" 2>/dev/null
"$BANGTRACE" run $L2C --prompt "Once" -n 30 --temp 0.9 --seed 7 > "$TMP/s2" 2>/dev/null
cmp -s "$TMP/s1" "$TMP/s2" && ok "same seed, same text" || fail "sampling with one seed differs between runs"
# --seed takes the whole u64 range exactly and nothing else (2^64 was
# clamped to 2^64-1, which the trace's sampling JSON then showed as -1).
for bad in 18446744073709551616 99999999999999999999999 -1 +5 " 5" 0x10 "" 1e3; do
    expect_exit 2 "run --seed '$bad' is refused" "$BANGTRACE" run $L2C --prompt "Once" -n 1 --seed "$bad" && one_line_err "seed expects"
done
for seed in 0 9223372036854775808 18446744073709551615; do
    rm -f "$TMP/seed.db"
    expect_exit 0 "run --seed $seed" "$BANGTRACE" run $L2C --prompt "Once" -n 3 --temp 1 --seed $seed --trace "$TMP/seed.db"
    if [ -f "$TMP/seed.db" ] && command -v "${PYTHON3:-python3}" >/dev/null; then
        got=$("${PYTHON3:-python3}" -c "
import json, sqlite3, sys
d = sqlite3.connect(sys.argv[1])
m = dict(d.execute('SELECT key, value FROM meta'))
print(m['seed'], json.loads(m['sampling'])['seed'] % 2**64)" "$TMP/seed.db")
        [ "$got" = "$seed $seed" ] && ok "trace keeps seed $seed exactly" || fail "seed $seed stored as: $got"
    fi
done
expect_exit 2 "run: llama2.c model without --tokenizer" "$BANGTRACE" run --model "$STORIES" --prompt hi && one_line_err --tokenizer

# `help help` is the usage of help itself; -v prints debug lines; a directory
# given as a model, tokenizer or drafter is named as one (exit 2, one line).
expect_exit 0 "help help" "$BANGTRACE" help help && grep -q "usage: bangtrace help" "$TMP/out" || fail "help help: $(cat "$TMP/out")"
expect_exit 0 "-v run" "$BANGTRACE" -v run $L2C --prompt Once -n 2
for want in "debug: model" "debug: kernels: cpu-" "debug: sampling:"; do
    grep -q "$want" "$TMP/err" || fail "-v run: no '$want' line on stderr: $(head -c 300 "$TMP/err")"
done
expect_exit 0 "run without -v" "$BANGTRACE" run $L2C --prompt Once -n 2
grep -q "debug:" "$TMP/err" && fail "debug lines without -v"
mkdir -p "$TMP/adir"
for cmd in "run --model $TMP/adir --prompt hi" "run --model $STORIES --tokenizer $TMP/adir --prompt hi" \
           "run $L2C --draft $TMP/adir --spec-k 2 --prompt hi" "inspect $TMP/adir" "inspect --model $TMP/adir" \
           "tokenize --model $TMP/adir hi" "bench --model $TMP/adir"; do
    expect_exit 2 "directory: $cmd" "$BANGTRACE" $cmd && one_line_err "is a directory"
done
finish
