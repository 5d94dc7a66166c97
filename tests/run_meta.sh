#!/bin/sh
# One meta owner (issue 23): every meta key a run writes is one that
# src/run/run_meta.h lists (written and read back there), for a plain, a
# speculative and an injected partially tapped run; the values the readers
# rely on are the ones asked for; and diff / report read them back.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
S=${BT_SRCDIR:-.}
command -v sqlite3 >/dev/null 2>&1 || skip "sqlite3 (the CLI) not installed"
L2C="--model $STORIES --tokenizer $TOK512"
sed -n '/^#define BT_RUN_META_KEYS(X)/,/^typedef/p' "$S/src/run/run_meta.h" | grep -o 'X([a-z_0-9]*)' | sed 's/X(\(.*\))/\1/' | sort -u > "$TMP/known"
[ "$(wc -l < "$TMP/known")" -ge 40 ] || fail "read only $(wc -l < "$TMP/known") keys from run_meta.h"
grep -qx model_sha256 "$TMP/known" && grep -qx generated "$TMP/known" && grep -qx status "$TMP/known" ||
    fail "run_meta.h's key list lacks model_sha256, generated or status"

"$BANGTRACE" run $L2C --prompt "Once upon a time" -n 8 --trace "$TMP/plain.db" >/dev/null 2>"$TMP/err" || fail "plain run: $(cat "$TMP/err")"
"$BANGTRACE" run $L2C --prompt "Once upon a time" -n 8 --spec-k 3 --draft-self 2 --trace "$TMP/spec.db" >/dev/null 2>"$TMP/err" ||
    fail "speculative run: $(cat "$TMP/err")"
"$BANGTRACE" run $L2C --prompt "Once upon a time" -n 8 --inject 'scale=2@layer=1,op=ffn_down,step=2' --tap-layers 1-2 \
    --logits full --seed 7 --trace "$TMP/inj.db" >/dev/null 2>"$TMP/err" || fail "injected run: $(cat "$TMP/err")"
for t in plain spec inj; do
    [ -f "$TMP/$t.db" ] || { fail "$t.db was not written"; continue; }
    sqlite3 "$TMP/$t.db" "SELECT key FROM meta ORDER BY key" > "$TMP/$t.keys"
    unknown=$(grep -vxF -f "$TMP/known" "$TMP/$t.keys" | tr '\n' ' ')
    [ -z "$unknown" ] && ok "$t: every meta key is run_meta's ($(wc -l < "$TMP/$t.keys") keys)" || fail "$t: meta keys run_meta.h does not list: $unknown"
done
v() { sqlite3 "$1" "SELECT value FROM meta WHERE key = '$2'"; }
[ "$(v "$TMP/plain.db" engine)" = native ] && [ "$(v "$TMP/plain.db" numerics)" = f32 ] && [ "$(v "$TMP/plain.db" generated)" = 8 ] &&
    [ "$(v "$TMP/plain.db" taps)" = all ] && [ "$(v "$TMP/plain.db" logits)" = flagged ] && [ -z "$(v "$TMP/plain.db" tap_layers)" ] &&
    ok "plain run: engine, numerics, generated, taps, logits" || fail "plain run's meta: $(sqlite3 "$TMP/plain.db" 'SELECT * FROM meta')"
[ "$(v "$TMP/plain.db" model_path)" = "$(realpath "$STORIES")" ] && [ "$(v "$TMP/plain.db" tokenizer_path)" = "$(realpath "$TOK512")" ] &&
    [ "$(v "$TMP/plain.db" model_sha256 | wc -c)" -eq 65 ] && ok "plain run: real paths and the SHA-256" || fail "plain run's model rows"
[ "$(v "$TMP/spec.db" spec_k)" = 3 ] && [ "$(v "$TMP/spec.db" drafter)" = self:2 ] && ok "speculative run: spec_k, drafter" ||
    fail "speculative run: spec_k '$(v "$TMP/spec.db" spec_k)', drafter '$(v "$TMP/spec.db" drafter)'"
[ "$(v "$TMP/inj.db" tap_layers)" = 1-2 ] && [ "$(v "$TMP/inj.db" logits)" = full ] && [ "$(v "$TMP/inj.db" seed)" = 7 ] &&
    v "$TMP/inj.db" injections | grep -q 'scale' && ok "injected run: tap_layers, logits, seed, injections" ||
    fail "injected run's meta: $(sqlite3 "$TMP/inj.db" "SELECT * FROM meta WHERE key IN ('tap_layers','logits','seed','injections')")"

# the readers: diff names the differing meta rows, report shows them
"$BANGTRACE" diff "$TMP/plain.db" "$TMP/inj.db" > "$TMP/diff.out" 2>&1
grep -q 'tap_layers' "$TMP/diff.out" && grep -q 'injections' "$TMP/diff.out" && ok "diff reads the meta rows back" ||
    fail "diff does not name tap_layers and injections: $(head -c 600 "$TMP/diff.out")"
"$BANGTRACE" report "$TMP/inj.db" > "$TMP/report.md" 2>"$TMP/err" || fail "report: $(cat "$TMP/err")"
grep -q '1-2' "$TMP/report.md" && grep -q "$(v "$TMP/inj.db" model_sha256)" "$TMP/report.md" && ok "report reads the meta rows back" ||
    fail "report lacks the tapped layers or the SHA-256"

# a served request's trace (run/slot.c): the keys that form has always had,
# and nothing of run's own (host, cpu, numerics, hparams, tokenizer, engine)
if built_with LIBMICROHTTPD && command -v curl >/dev/null 2>&1; then
    pids=""
    trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait; rm -rf "$TMP"' EXIT
    mkdir -p "$TMP/served"
    if start_server meta --trace-dir "$TMP/served"; then
        curl -s -m 30 -o "$TMP/s.json" -X POST "http://127.0.0.1:$port/v1/completions" \
            --data-binary '{"prompt":"Once upon a time","max_tokens":4,"seed":5}' >/dev/null
        kill "$last_pid" 2>/dev/null; wait "$last_pid" 2>/dev/null; pids=""
        db=$(ls "$TMP/served"/*.db 2>/dev/null | head -1)
        if [ -n "$db" ]; then
            sqlite3 "$db" "SELECT key FROM meta ORDER BY key" | tr '\n' ' ' > "$TMP/served.keys"
            want="arch argmax_rule argv backend backtraces finished_at generated injections logits model_format model_name model_path model_sha256 n_layers n_vocab prompt_text request_id request_json sampling schema_version seed started_at status taps threads tool_version "
            [ "$(cat "$TMP/served.keys")" = "$want" ] && ok "served request: the slot form's keys exactly" ||
                fail "served request's meta keys: $(cat "$TMP/served.keys")"
            [ "$(v "$db" argv)" = '["bangtrace","serve"]' ] || echo "$(v "$db" argv)" | grep -q '"serve"' &&
                [ "$(v "$db" taps)" = all ] && [ "$(v "$db" seed)" = 5 ] && [ "$(v "$db" generated)" = 4 ] &&
                [ "$(v "$db" prompt_text)" = "Once upon a time" ] && ok "served request: argv, taps, seed, generated, prompt_text" ||
                fail "served request's meta: $(sqlite3 "$db" 'SELECT * FROM meta' | head -c 800)"
        else fail "serve --trace-dir wrote no trace: $(cat "$TMP/meta.err")"; fi
    fi
fi
finish
