#!/usr/bin/env bash
# chat_harmony.sh - gpt-oss's chat format (harmony): bangtrace's renderer
# against the model's own template text, openai-gpt-oss-120b.jinja as the
# pinned llama.cpp sdist ships it (models/templates/), rendered by jinja2
# with transformers' settings, byte for byte: system/developer instructions,
# multi-turn, add_generation_prompt false (<|return|>), reasoning_effort
# (the request field and chat_template_kwargs), a later system message
# (dropped). Where the template raises (<|channel|> tags in content), and for
# tool turns bangtrace does not render, exit 2 with one line. The template is
# recognised from its text, and a bad reasoning_effort is refused.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
py=${PYTHON3:-python3}
"$py" -c 'import jinja2' 2>/dev/null || skip "python3 jinja2 is not installed"
T=${BT_CACHE:-$HOME/.cache/bangtrace}/llama.cpp/0.3.36/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/openai-gpt-oss-120b.jinja
[ -f "$T" ] || skip "gpt-oss's template comes with the pinned llama.cpp sdist (tools/llama-cpp); not at $T"
DATE=$(date +%Y-%m-%d)
"$py" - "$T" "$TMP" <<'PY' || { fail "could not make the jinja2 references"; finish; }
import datetime, json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError
import jinja2.ext
tpath, tmp = sys.argv[1], sys.argv[2]
def raise_exception(msg):
    raise TemplateError(msg)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
tmpl = env.from_string(open(tpath, encoding="utf-8").read())
S = {"role": "system", "content": "Answer in one word."}
D = {"role": "developer", "content": "Be terse.\nNo lists."}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}
conv = [S, U("Hello"), A("Hi there"), U("Who are you"), A("  I am an assistant  "), U("Another question")]
cases = [(conv, {}), (conv[1:], {}), ([U("Tell me a story\n")], {}), ([D, U("x")], {}),
         ([{"role": "system", "content": ""}, U("y")], {}), (conv, {"add_generation_prompt": False}),
         (conv[:3], {"add_generation_prompt": False}), (conv, {"reasoning_effort": "high"}),
         ([U("z")], {"reasoning_effort": "low", "kwargs": True}), ([U("a"), A("b"), S, U("c")], {}),
         ([U("\u00e9t\u00e9 \u2028 <b>")], {}),
         ([U("a"), A("<|channel|>analysis<|message|>x")], {"raises": True})]
refused = [[U("weather?"), {"role": "tool", "content": "{\"t\": 21}"}]]
for i, (msgs, kw) in enumerate(cases + [(m, {"refused": True}) for m in refused]):
    gen = kw.get("add_generation_prompt", True)
    body = {"messages": msgs}
    if not gen: body["add_generation_prompt"] = False
    args = dict(messages=msgs, add_generation_prompt=gen)
    if "reasoning_effort" in kw:
        args["reasoning_effort"] = kw["reasoning_effort"]
        if kw.get("kwargs"): body["chat_template_kwargs"] = {"reasoning_effort": kw["reasoning_effort"]}
        else: body["reasoning_effort"] = kw["reasoning_effort"]
    json.dump(body, open(f"{tmp}/case{i}.json", "w"))
    if kw.get("refused"):
        open(f"{tmp}/case{i}.raises", "w").write("bangtrace refuses")
        continue
    try:
        open(f"{tmp}/case{i}.expected", "wb").write(tmpl.render(**args).encode("utf-8"))
    except TemplateError as e:
        open(f"{tmp}/case{i}.raises", "w").write(str(e))
PY
[ "$(date +%Y-%m-%d)" = "$DATE" ] || skip "the date changed while the references were rendered (midnight); run again"
render() { "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --chat "$1" --render "${@:2}"; }
n=0
for body in "$TMP"/case*.json; do
    c=${body%.json}
    desc=$(head -c 110 "$body")
    if [ -f "$c.raises" ]; then
        expect_exit 2 "jinja2 raises (or bangtrace refuses), exit 2: $desc" render "$body" --chat-template "$T" &&
            { [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q 'harmony' "$TMP/err" && ok "one line: $(cut -c1-110 "$TMP/err")" ||
              fail "error for $desc: $(cat "$TMP/err")"; }
        continue
    fi
    expect_exit 0 "render $desc" render "$body" --chat-template "$T" || continue
    if cmp -s "$TMP/out" "$c.expected"; then ok "bytes equal jinja2: $desc"; n=$((n + 1))
    else fail "$desc: jinja2 and bangtrace differ:$(diff <(od -c "$c.expected") <(od -c "$TMP/out") | head -8)"; fi
done
[ "$n" -ge 11 ] && ok "$n renderings equal jinja2's" || fail "only $n renderings compared equal"
render "$TMP/case0.json" --chat-template harmony > "$TMP/named" 2>/dev/null
cmp -s "$TMP/named" "$TMP/case0.expected" && ok "--chat-template harmony renders as the template file" ||
    fail "--chat-template harmony differs from the file"
echo '{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"}' > "$TMP/bad.json"
expect_exit 2 "reasoning_effort \"max\" is refused" render "$TMP/bad.json" --chat-template harmony &&
    { grep -q 'must be low, medium or high' "$TMP/err" && ok "$(cat "$TMP/err")" || fail "$(cat "$TMP/err")"; }
finish
