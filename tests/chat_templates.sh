#!/usr/bin/env bash
# chat_templates.sh - bangtrace renders the published chat templates of
# Qwen2.5, Qwen3, Llama 3 (3.1, 3.2), Mistral and plain ChatML
# (tests/data/chat/*.jinja; SmolLM2's own, ChatML with a default system
# turn, from the GGUF when the model is cached) byte for
# byte as jinja2 renders their own text (with transformers' settings:
# trim_blocks, lstrip_blocks, raise_exception), through
# `tokenize --chat BODY --chat-template FILE.jinja --render`: system, user
# and assistant turns, multi-turn, add_generation_prompt false, Qwen3's
# think blocks and enable_thinking, Qwen's tool turns, Mistral's system
# message. Where the template raises (roles that do not alternate), bangtrace
# exits 2 with one line. Also: the template is recognised from its text, a
# named template renders the same, and the ids of --chat are the rendered
# text's.
. "${BT_SRCDIR:-.}/tests/lib.sh"
need_shared
${PYTHON3:-python3} -c 'import jinja2' 2>/dev/null || skip "python3 jinja2 is not installed"
DATA=${BT_SRCDIR:-.}/tests/data/chat
${PYTHON3:-python3} - "$DATA" "$TMP" <<'PY' || { fail "could not make the jinja2 references"; finish; }
import json, os, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError
import jinja2.ext
data, tmp = sys.argv[1], sys.argv[2]

def raise_exception(msg):
    raise TemplateError(msg)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: __import__("datetime").datetime.now().strftime(fmt)
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)

S = {"role": "system", "content": "You are a helpful assistant"}
def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}
conv = [S, U("Hello"), A("Hi there"), U("Who are you"), A("   I am an assistant   "), U("Another question")]
nosys = conv[1:]
one = [U("Tell me a story\n")]
think_hist = [U("2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("and 3+3?"), A("<think>\n\nsix\n\n</think>\n\n6")]
think_tail = [S, U("hi"), A("<think>\nplan\n</think>\nhello"), U("<tool_response>\nx\n</tool_response>"), A("\n\nno think here")]
tools = [U("weather?"), A("checking"), {"role": "tool", "content": "{\"t\": 21}"}, {"role": "tool", "content": "{\"rain\": 0}"}, A("21 and dry"), U("thanks")]
sys_late = [U("a"), A("b"), S, U("c")]
bad_alt = [U("a"), U("b")]

qwen2, qwen3 = "qwen2.5-instruct.jinja", "qwen3.jinja"
llama3, mistral, mistral0 = "llama3-instruct.jinja", "mistral-v1.jinja", "mistral-v0.jinja"
llama31, llama32 = "llama3.1-instruct.jinja", "llama3.2-instruct.jinja"
chatml = "chatml.jinja"   # plain ChatML: no default system turn, every role as given
# Python's strip() takes Unicode whitespace too (llama3's | trim)
spaces = [{"role": "system", "content": "\u00a0\u2003 sys \x1f\n"}, U("\u3000hi\u2028"), A("\u00a0\u00e9t\u00e9\u00a0")]
cases = []
for t in (qwen2, qwen3, llama3, llama31, llama32, mistral):
    cases += [(t, conv, {}), (t, nosys, {}), (t, one, {})]
for t in (qwen2, qwen3, llama3, llama31, llama32):
    cases += [(t, conv, {"add_generation_prompt": False}), (t, sys_late, {})]
cases += [(llama3, spaces, {}), (llama31, spaces, {})]
cases += [(chatml, conv, {}), (chatml, nosys, {}), (chatml, one, {}), (chatml, conv, {"add_generation_prompt": False}),
          (chatml, sys_late, {}), (chatml, spaces, {}), (chatml, tools, {}), (chatml, think_hist, {})]
# bangtrace refuses what it does not render (the template's tojson of tool results): one line, exit 2
refused = [(llama31, tools, {})]
cases += [(mistral0, nosys, {}), (mistral0, one, {}), (mistral0, conv, {}), (mistral, bad_alt, {}), (mistral, [S, A("x")], {}),
          (qwen3, think_hist, {}), (qwen3, think_hist, {"enable_thinking": False}), (qwen3, think_hist, {"enable_thinking": True}),
          (qwen3, think_tail, {}), (qwen3, think_tail, {"add_generation_prompt": False}), (qwen3, one, {"enable_thinking": False}),
          (qwen3, tools, {}), (qwen2, tools, {}), (qwen3, think_hist[:2], {"add_generation_prompt": False})]
for i, (t, msgs, kw) in enumerate(cases + refused):
    gen = kw.get("add_generation_prompt", True)
    body = {"messages": msgs}
    if not gen: body["add_generation_prompt"] = False
    if "enable_thinking" in kw: body["chat_template_kwargs"] = {"enable_thinking": kw["enable_thinking"]}
    args = dict(messages=msgs, add_generation_prompt=gen, bos_token="<|begin_of_text|>" if t in (llama3, llama31, llama32) else "<s>", eos_token="</s>")
    if "enable_thinking" in kw: args["enable_thinking"] = kw["enable_thinking"]
    tmpl = env.from_string(open(os.path.join(data, t), encoding="utf-8").read())
    with open(f"{tmp}/case{i}.json", "w") as f: json.dump(body, f)
    with open(f"{tmp}/case{i}.tmpl", "w") as f: f.write(t)
    if i >= len(cases):
        with open(f"{tmp}/case{i}.raises", "w") as f: f.write("bangtrace refuses")
        continue
    try:
        out = tmpl.render(**args)
        with open(f"{tmp}/case{i}.expected", "wb") as f: f.write(out.encode("utf-8"))
    except TemplateError as e:
        with open(f"{tmp}/case{i}.raises", "w") as f: f.write(str(e))
print(len(cases))
PY
n=0
for body in "$TMP"/case*.json; do
    c=${body%.json}
    t=$(cat "$c.tmpl")
    desc="$t $(head -c 120 "$body")"
    if [ -f "$c.raises" ]; then
        expect_exit 2 "jinja2 raises (or bangtrace refuses, one line): $desc" "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" \
            --chat "$body" --chat-template "$DATA/$t" --render &&
            { [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q 'alternate\|no role\|not supported' "$TMP/err" && ok "one line: $(cat "$TMP/err")" ||
              fail "error for $desc: $(cat "$TMP/err")"; }
        continue
    fi
    expect_exit 0 "render $desc" "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" \
        --chat "$body" --chat-template "$DATA/$t" --render || continue
    if cmp -s "$TMP/out" "$c.expected"; then ok "bytes equal jinja2: $desc"; n=$((n + 1))
    else fail "$desc: jinja2 and bangtrace differ:$(diff <(od -c "$c.expected") <(od -c "$TMP/out") | head -8)"; fi
done
[ "$n" -ge 43 ] && ok "$n renderings equal jinja2's" || fail "only $n renderings compared equal"

# the names render what the files do (the Qwen2.5 default system turn comes from the template text)
for pair in qwen3:qwen3.jinja llama3:llama3-instruct.jinja llama3.1:llama3.1-instruct.jinja mistral:mistral-v1.jinja \
            mistral-v0:mistral-v0.jinja; do
    name=${pair%%:*} file=${pair#*:}
    "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --chat "$TMP/case0.json" --chat-template "$DATA/$file" --render \
        > "$TMP/a" 2>/dev/null
    "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --chat "$TMP/case0.json" --chat-template "$name" --render \
        > "$TMP/b" 2>/dev/null
    cmp -s "$TMP/a" "$TMP/b" && ok "--chat-template $name renders as $file" || fail "--chat-template $name differs from $file"
done
# a template bangtrace does not recognise stays an error
printf '{%% for m in messages %%}<<{{ m.content }}>>{%% endfor %%}' > "$TMP/odd.jinja"
expect_exit 2 "an unrecognised template file is refused" "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" \
    --chat "$TMP/case0.json" --chat-template "$TMP/odd.jinja" --render &&
    { grep -q 'not a chat template bangtrace recognises' "$TMP/err" && ok "names the file" || fail "$(cat "$TMP/err")"; }
expect_exit 2 "an unknown template name" "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --chat "$TMP/case0.json" \
    --chat-template qwen9 --render
expect_exit 2 "a bad enable_thinking" "$BANGTRACE" tokenize --model "$STORIES" --tokenizer "$TOK512" --chat <(echo '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"no"}}') --render --chat-template qwen3
# SmolLM2's own template (ChatML with a default system turn), read from the
# GGUF, rendered by jinja2 and by bangtrace without --chat-template
if [ -f "$SMOL" ] && "$BANGTRACE" inspect "$SMOL" --json --no-scan >"$TMP/smol.json" 2>/dev/null; then
    ${PYTHON3:-python3} - "$TMP" <<'PY' || fail "could not render SmolLM2's template with jinja2"
import json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
tmp = sys.argv[1]
t = json.load(open(tmp + "/smol.json"))["metadata"]["tokenizer.chat_template"]
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
S = {"role": "system", "content": "Be brief."}
U = lambda c: {"role": "user", "content": c}
A = lambda c: {"role": "assistant", "content": c}
for i, (msgs, gen) in enumerate([([U("Hi")], True), ([S, U("Hi"), A("Hello"), U("Bye")], True), ([U("a"), A("b")], False)]):
    body = {"messages": msgs}
    if not gen: body["add_generation_prompt"] = False
    json.dump(body, open(f"{tmp}/smol{i}.json", "w"))
    open(f"{tmp}/smol{i}.expected", "wb").write(env.from_string(t).render(messages=msgs, add_generation_prompt=gen).encode())
PY
    for i in 0 1 2; do
        expect_exit 0 "render SmolLM2's own template, case $i" "$BANGTRACE" tokenize --model "$SMOL" --chat "$TMP/smol$i.json" --render || continue
        cmp -s "$TMP/out" "$TMP/smol$i.expected" && ok "SmolLM2's template: bytes equal jinja2 (case $i)" \
            || fail "SmolLM2's template, case $i: jinja2 and bangtrace differ:$(diff <(od -c "$TMP/smol$i.expected") <(od -c "$TMP/out") | head -8)"
    done
else
    echo "SmolLM2 not cached: its own template is not rendered"
fi
# --chat without --render: the ids of the rendered text (the model's BOS added as an id)
if [ -f "$SMOL" ]; then
    expect_exit 0 "render for SmolLM2" "$BANGTRACE" tokenize --model "$SMOL" --chat "$TMP/case0.json" --chat-template "$DATA/qwen3.jinja" --render &&
        cp "$TMP/out" "$TMP/r.txt"
    expect_exit 0 "ids of the text" "$BANGTRACE" tokenize --model "$SMOL" --parse-special --add-special --file "$TMP/r.txt" && cp "$TMP/out" "$TMP/want"
    expect_exit 0 "--chat ids" "$BANGTRACE" tokenize --model "$SMOL" --chat "$TMP/case0.json" --chat-template "$DATA/qwen3.jinja" &&
        { cmp -s "$TMP/out" "$TMP/want" && ok "--chat ids are the rendered text's" || fail "--chat ids $(cat "$TMP/out") vs $(cat "$TMP/want")"; }
fi
finish
