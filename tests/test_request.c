/* test_request.c - OpenAI request bodies (fields, types, ranges, warnings,
 * JSON errors with positions) and the native chat templates, compared byte
 * for byte with what jinja2 renders from the reference templates below. */
#include "gen/request.h"
#include "gen/chat.h"
#include "base/util.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_STR(got, want) check_str(__LINE__, got, want)

static void check_str(int line, const char *got, const char *want)
{
    if (got && want && strcmp(got, want) == 0) return;
    failures++;
    fprintf(stderr, "%s:%d: FAIL: strings differ\n  got:  \"", __FILE__, line);
    for (const char *p = got ? got : "(null)"; *p; p++) fputs(*p == '\n' ? "\\n" : (char[]){ *p, 0 }, stderr);
    fputs("\"\n  want: \"", stderr);
    for (const char *p = want; *p; p++) fputs(*p == '\n' ? "\\n" : (char[]){ *p, 0 }, stderr);
    fputs("\"\n", stderr);
}

/* Parse body with stderr captured into warn[] so warnings can be asserted. */
static char warn[4096];
static int parse(const char *body, bt_request *r)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0) { perror("tmpfile"); exit(99); }
    dup2(fileno(tmp), 2);
    int rc = bt_request_parse(body, strlen(body), "body.json", r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(warn, 1, sizeof warn - 1, tmp);
    warn[n] = '\0';
    fclose(tmp);
    return rc;
}

/* The call fails with code and its message mentions every given word. */
static void expect_error(int line, const char *body, int code, const char *w1, const char *w2)
{
    bt_request r;
    int rc = parse(body, &r);
    const char *msg = bt_errmsg();
    if (rc != code || (w1 && !strstr(msg, w1)) || (w2 && !strstr(msg, w2)) || r.prompt || r.messages || r.json) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: %s -> %s \"%s\" (want %s mentioning %s %s)\n", __FILE__, line, body,
                bt_strerror(rc), msg, bt_strerror(code), w1 ? w1 : "", w2 ? w2 : "");
    }
    if (strchr(msg, '\n')) { failures++; fprintf(stderr, "%s:%d: FAIL: multi-line message\n", __FILE__, line); }
    bt_request_clear(&r);
}
#define EXPECT_ERROR(body, code, w1, w2) expect_error(__LINE__, body, code, w1, w2)

static void test_completions(void)
{
    bt_request r;
    const char *body =
        "{\"model\": \"smollm2\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32,\n"
        " \"temperature\": 0, \"top_p\": 0.9, \"top_k\": 40, \"seed\": 7, \"stop\": \"\\n\\n\"}";
    CHECK(parse(body, &r) == BT_OK);
    CHECK_STR(r.prompt, "Once upon a time");
    CHECK(!r.messages && r.n_messages == 0);
    CHECK(r.has_max_tokens && r.max_tokens == 32);
    CHECK(r.has_temperature && r.temperature == 0);
    CHECK(r.has_top_p && r.top_p == 0.9f);
    CHECK(r.has_top_k && r.top_k == 40);
    CHECK(r.has_seed && r.seed == 7);
    CHECK(r.n_stop == 1 && strcmp(r.stop[0], "\n\n") == 0);
    CHECK_STR(r.json, body);
    CHECK(warn[0] == '\0'); /* "model" is standard: no warning */
    bt_request_clear(&r);
    CHECK(!r.prompt && !r.json);
    bt_request_clear(&r); /* twice is harmless */

    CHECK(parse("{\"prompt\": [\"only one\"], \"stop\": [\"a\", \"bb\", \"ccc\"], \"max_completion_tokens\": 5,"
                " \"seed\": -1, \"temperature\": null}", &r) == BT_OK);
    CHECK_STR(r.prompt, "only one");
    CHECK(r.n_stop == 3 && !strcmp(r.stop[0], "a") && !strcmp(r.stop[1], "bb") && !strcmp(r.stop[2], "ccc"));
    CHECK(r.has_max_tokens && r.max_tokens == 5);
    CHECK(r.has_seed && r.seed == ~0ULL);
    CHECK(!r.has_temperature && !r.has_top_p && !r.has_top_k);
    bt_request_clear(&r);

    /* defaults when unset */
    CHECK(parse("{\"prompt\": \"\", \"max_tokens\": 0, \"stop\": []}", &r) == BT_OK);
    CHECK(r.prompt && r.prompt[0] == '\0' && r.max_tokens == 0 && r.n_stop == 0 && !r.stop);
    CHECK(r.top_p == 1.0f && !r.has_seed);
    bt_request_clear(&r);

    /* an integral double where an integer is wanted is fine */
    CHECK(parse("{\"prompt\": \"x\", \"max_tokens\": 64.0}", &r) == BT_OK && r.max_tokens == 64);
    bt_request_clear(&r);
}

static void test_chat_body(void)
{
    bt_request r;
    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is \"},"
                "{\"type\":\"text\",\"text\":\"2+2?\"}]},{\"role\":\"assistant\",\"content\":null}],"
                "\"max_tokens\":8,\"stream\":false,\"n\":1}", &r) == BT_OK);
    CHECK(!r.prompt && r.n_messages == 3);
    CHECK_STR(r.messages[0].role, "system");
    CHECK_STR(r.messages[0].content, "Be brief.");
    CHECK_STR(r.messages[1].content, "What is 2+2?");
    CHECK_STR(r.messages[2].role, "assistant");
    CHECK_STR(r.messages[2].content, "");
    CHECK(warn[0] == '\0');
    bt_request_clear(&r);

    /* unknown fields are warned about once each, by name, and ignored */
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":\"x\"},"
                "{\"role\":\"user\",\"content\":\"b\",\"name\":\"y\"}],"
                "\"frobnicate\": 3, \"stream\": true, \"mirostat\": 2}", &r) == BT_OK);
    CHECK(r.n_messages == 2);
    CHECK(strstr(warn, "\"frobnicate\"") && strstr(warn, "\"mirostat\""));
    CHECK(strstr(warn, "stream"));
    CHECK(strstr(warn, "body.json"));
    const char *first = strstr(warn, ".name\""); /* two messages, one warning */
    CHECK(first && !strstr(first + 1, ".name\""));
    bt_request_clear(&r);
}

static void test_errors(void)
{
    /* malformed JSON names the source, the line and the column */
    EXPECT_ERROR("{\"prompt\": \"x\",\n  \"max_tokens\": 3,\n  oops}", BT_EINVAL, "body.json:3:", "malformed JSON");
    EXPECT_ERROR("", BT_EINVAL, "body.json:", "malformed");
    EXPECT_ERROR("{\"prompt\": \"x\"", BT_EINVAL, "body.json:1:", NULL);
    EXPECT_ERROR("[1, 2]", BT_EINVAL, "JSON object", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"prompt\": \"y\"}", BT_EINVAL, "body.json:1:", "duplicate");
    /* neither, both */
    EXPECT_ERROR("{\"max_tokens\": 3}", BT_EINVAL, "neither", "messages");
    EXPECT_ERROR("{\"prompt\": \"x\", \"messages\": []}", BT_EINVAL, "both", NULL);
    /* wrong types and ranges name the field */
    EXPECT_ERROR("{\"prompt\": \"x\", \"temperature\": \"hot\"}", BT_EINVAL, "\"temperature\"", "a string");
    EXPECT_ERROR("{\"prompt\": \"x\", \"temperature\": -0.5}", BT_EINVAL, "\"temperature\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"max_tokens\": -1}", BT_EINVAL, "\"max_tokens\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"max_tokens\": 1.5}", BT_EINVAL, "\"max_tokens\"", "integer");
    EXPECT_ERROR("{\"prompt\": \"x\", \"max_tokens\": 99999999999}", BT_EINVAL, "\"max_tokens\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"max_tokens\": 4, \"max_completion_tokens\": 5}", BT_EINVAL, "disagree", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"top_p\": 0}", BT_EINVAL, "\"top_p\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"top_p\": 1.01}", BT_EINVAL, "\"top_p\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"top_k\": -3}", BT_EINVAL, "\"top_k\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"top_k\": \"5\"}", BT_EINVAL, "\"top_k\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"seed\": 1.5}", BT_EINVAL, "\"seed\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"stop\": 5}", BT_EINVAL, "\"stop\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"stop\": [\"a\", 5]}", BT_EINVAL, "\"stop[1]\"", NULL);
    EXPECT_ERROR("{\"prompt\": \"x\", \"stop\": \"\"}", BT_EINVAL, "\"stop\"", "empty");
    EXPECT_ERROR("{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
                 "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", BT_EINVAL, "\"stop\"", "16");
    /* prompt shapes */
    EXPECT_ERROR("{\"prompt\": [1, 2, 3]}", BT_EUNSUPPORTED, "\"prompt\"", "token ids");
    EXPECT_ERROR("{\"prompt\": [[1, 2]]}", BT_EUNSUPPORTED, "token ids", NULL);
    EXPECT_ERROR("{\"prompt\": [\"a\", \"b\"]}", BT_EUNSUPPORTED, "\"prompt\"", NULL);
    EXPECT_ERROR("{\"prompt\": []}", BT_EINVAL, "\"prompt\"", "empty");
    EXPECT_ERROR("{\"prompt\": 12}", BT_EINVAL, "\"prompt\"", NULL);
    /* message shapes */
    EXPECT_ERROR("{\"messages\": \"hi\"}", BT_EINVAL, "\"messages\"", NULL);
    EXPECT_ERROR("{\"messages\": []}", BT_EINVAL, "\"messages\"", "empty");
    EXPECT_ERROR("{\"messages\": [{\"content\": \"hi\"}]}", BT_EINVAL, "messages[0].role", NULL);
    EXPECT_ERROR("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, 7]}", BT_EINVAL, "messages[1]", NULL);
    EXPECT_ERROR("{\"messages\": [{\"role\": \"user\", \"content\": 7}]}", BT_EINVAL, "messages[0].content", NULL);
    EXPECT_ERROR("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
                 BT_EUNSUPPORTED, "messages[0].content[0].type", "image_url");
    EXPECT_ERROR("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
                 BT_EINVAL, "messages[0].content[0].text", NULL);

    /* a NULL source still gives a usable message */
    bt_request r;
    CHECK(bt_request_parse("{", 1, NULL, &r) == BT_EINVAL && strstr(bt_errmsg(), "request:1:"));
    bt_request_clear(NULL);
}

/* Reference Jinja templates. T_SMOL is byte for byte the
 * tokenizer.chat_template of SmolLM2-135M-Instruct; the others are the
 * published templates of Qwen2.5-Instruct (tools branch removed),
 * Meta-Llama-3-Instruct, Llama-2-chat and zephyr-7b-beta. */
static const char T_SMOL[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_sta"
    "rt|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";
static const char T_QWEN25[] =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n"
    "' }}\n{%- else %}\n    {{- '<|im_start|>system\\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n"
    "' }}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if not (message.role == 'system' and loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n"
    "' + message.content + '<|im_end|>' + '\\n"
    "' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
static const char T_LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_he"
    "ader_id|>' + message['role'] + '<|end_header_id|>\n\n"
    "'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_toke"
    "n + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_head"
    "er_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
static const char T_LLAMA2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_mess"
    "age = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message"
    " = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (lo"
    "op.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/"
    "assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content"
    " = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n"
    "\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if mes"
    "sage['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif messa"
    "ge['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %"
    "}";
static const char T_ZEPHYR[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n"
    "' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* Expected renderings, produced by jinja2 (trim_blocks, lstrip_blocks, as
 * transformers renders) from the templates above, with bos_token "<s>" (or
 * "<|begin_of_text|>" for llama3), eos_token "</s>" and
 * add_generation_prompt true unless named NOGEN. */
static const char X_SMOL_U[] =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end"
    "|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n";
static const char X_SMOL_CONV[] =
    "<|im_start|>system\n  Be brief. <|im_end|>\n"
    "<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n"
    "Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
    "<|im_start|>assistant\n";
static const char X_QWEN_U[] =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end"
    "|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n";
static const char X_LLAMA3_CONV[] =
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
static const char X_LLAMA3_U[] =
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
    "What is the capital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
static const char X_LLAMA2_CONV[] =
    "<s>[INST] <<SYS>>\n  Be brief. \n<</SYS>>\n\n"
    " Hi [/INST] Hello! </s><s>[INST] Bye [/INST]";
static const char X_LLAMA2_U[] =
    "<s>[INST] What is the capital of France? [/INST]";
static const char X_ZEPHYR_CONV[] =
    "<|system|>\n  Be brief. </s>\n<|user|>\n Hi\n"
    "</s>\n<|assistant|>\nHello! </s>\n<|user|>\n"
    "Bye</s>\n<|assistant|>\n";
static const char X_ZEPHYR_U[] =
    "<|user|>\nWhat is the capital of France?</s>\n"
    "<|assistant|>\n";
static const char X_SMOL_CONV_NOGEN[] =
    "<|im_start|>system\n  Be brief. <|im_end|>\n"
    "<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n"
    "Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n";

static const bt_message U[] = { { "user", "What is the capital of France?" } };
static const bt_message CONV[] = {
    { "system", "  Be brief. " }, { "user", " Hi\n" }, { "assistant", "Hello! " }, { "user", "Bye" },
};

static void check_render(int line, int tmpl, const bt_message *m, int n, const bt_chat_opts *o, const char *want)
{
    char *got = NULL;
    int rc = bt_chat_render_opts(tmpl, m, n, o, &got);
    if (rc != BT_OK) { failures++; fprintf(stderr, "%s:%d: FAIL: render: %s\n", __FILE__, line, bt_errmsg()); return; }
    check_str(line, got, want);
    free(got);
}
#define RENDER(t, m, o, want) check_render(__LINE__, t, m, (int)BT_ARRAY_SIZE(m), o, want)

static void test_templates(void)
{
    /* detection on the real template strings */
    CHECK(bt_chat_tmpl_detect(T_SMOL, strlen(T_SMOL)) == BT_CHAT_CHATML);
    CHECK(bt_chat_tmpl_detect(T_QWEN25, strlen(T_QWEN25)) == BT_CHAT_CHATML);
    CHECK(bt_chat_tmpl_detect(T_LLAMA3, strlen(T_LLAMA3)) == BT_CHAT_LLAMA3);
    CHECK(bt_chat_tmpl_detect(T_LLAMA2, strlen(T_LLAMA2)) == BT_CHAT_LLAMA2);
    CHECK(bt_chat_tmpl_detect(T_ZEPHYR, strlen(T_ZEPHYR)) == BT_CHAT_ZEPHYR);
    CHECK(bt_chat_tmpl_detect("{{ messages }}", 14) == BT_CHAT_NONE);
    /* the newer families (tests/chat_templates.sh renders the full texts);
     * a think-block ChatML that is not Qwen3's (QwQ, R1 distills) stays chatml */
#define DET(s) bt_chat_tmpl_detect(s, strlen(s))
    CHECK(DET("<|im_start|>{% if enable_thinking is defined %}{% set ns.last_query_index = 0 %}") == BT_CHAT_QWEN3);
    CHECK(DET("<|im_start|>{{ '\\n<tool_response>\\n' }}") == BT_CHAT_QWEN2);
    CHECK(DET("<|im_start|>{{ '\\n<tool_response>\\n' }}{{ content.split('</think>')[-1] }}") == BT_CHAT_CHATML);
    CHECK(DET("{{- ' [INST] ' + system_message + '\\n\\n' }}") == BT_CHAT_MISTRAL);
    CHECK(DET("{{ '[INST] ' + message['content'] + ' [/INST]' }}{{ message['content'] + eos_token}}") == BT_CHAT_MISTRAL0);
    CHECK(DET("{{ '[INST] ' + m + ' [/INST]' }}") == BT_CHAT_LLAMA2);   /* an [INST] template we do not know: as before */
#undef DET
    CHECK(bt_chat_tmpl_from_name("mistral-v0") == BT_CHAT_MISTRAL0 && !strcmp(bt_chat_tmpl_name(BT_CHAT_QWEN3), "qwen3"));
    CHECK(bt_chat_tmpl_detect(NULL, 0) == BT_CHAT_NONE);
    /* len is honoured: the marker past len is not seen */
    CHECK(bt_chat_tmpl_detect("xx<|im_start|>", 5) == BT_CHAT_NONE);

    /* names */
    const char *names[] = { "chatml", "llama2", "llama3", "zephyr" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(names); i++) {
        int id = bt_chat_tmpl_from_name(names[i]);
        CHECK(id > 0 && strcmp(bt_chat_tmpl_name(id), names[i]) == 0);
    }
    CHECK(bt_chat_tmpl_from_name("jinja") == -1 && bt_chat_tmpl_from_name(NULL) == -1);
    CHECK(bt_chat_tmpl_name(99) == NULL && bt_chat_tmpl_name(-1) == NULL);

    /* default system prompts found in the templates that have one */
    char *sys = NULL;
    CHECK(bt_chat_default_system(T_SMOL, strlen(T_SMOL), &sys) == BT_OK);
    CHECK_STR(sys, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    bt_chat_opts smol = { .default_system = sys };
    char *qsys = NULL;
    CHECK(bt_chat_default_system(T_QWEN25, strlen(T_QWEN25), &qsys) == BT_OK);
    CHECK_STR(qsys, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    bt_chat_opts qwen = { .default_system = qsys };
    char *none = (char *)"untouched";
    CHECK(bt_chat_default_system(T_LLAMA3, strlen(T_LLAMA3), &none) == BT_ENOTFOUND && !none);
    CHECK(bt_chat_default_system(T_LLAMA2, strlen(T_LLAMA2), &none) == BT_ENOTFOUND && !none);
    CHECK(bt_chat_default_system(T_ZEPHYR, strlen(T_ZEPHYR), &none) == BT_ENOTFOUND && !none);
    const char dq[] = "{% if messages[0][\"role\"] != \"system\" %}{{ \"<|start_header_id|>system<|end_header_id|>"
                      "\\n\\nBe \\\"nice\\\".<|eot_id|>\" }}{% endif %}";
    CHECK(bt_chat_default_system(dq, strlen(dq), &none) == BT_OK);
    CHECK_STR(none, "Be \"nice\".");
    free(none);
    const char joined[] = "{%- if messages[0].role != 'system' -%}{{- 'A ' + 'default' -}}{%- endif -%}";
    CHECK(bt_chat_default_system(joined, strlen(joined), &none) == BT_OK);
    CHECK_STR(none, "A default");
    free(none);
    /* a default that prints nothing is no default (this crashed: fuzzing) */
    const char empty[] = "{% if messages[0]['role'] != 'system' %}{{ '' }}{% endif %}";
    none = (char *)"untouched";
    CHECK(bt_chat_default_system(empty, strlen(empty), &none) == BT_ENOTFOUND && !none);
    const char empty2[] = "{% if messages[0]['role'] == 'system' %}x{% else %}{{- \"\" + '' -}}{% endif %}";
    none = (char *)"untouched";
    CHECK(bt_chat_default_system(empty2, strlen(empty2), &none) == BT_ENOTFOUND && !none);
    const char wrapped_empty[] = "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n<|im_end|>\\n' }}{% endif %}";
    CHECK(bt_chat_default_system(wrapped_empty, strlen(wrapped_empty), &none) == BT_OK);
    CHECK_STR(none, "");
    free(none);

    /* ChatML: SmolLM2 and Qwen with and without their default system turn */
    RENDER(BT_CHAT_CHATML, U, &smol, X_SMOL_U);
    RENDER(BT_CHAT_CHATML, CONV, &smol, X_SMOL_CONV);
    RENDER(BT_CHAT_CHATML, CONV, NULL, X_SMOL_CONV);
    RENDER(BT_CHAT_CHATML, U, &qwen, X_QWEN_U);
    bt_chat_opts nogen = { .no_generation_prompt = true };
    RENDER(BT_CHAT_CHATML, CONV, &nogen, X_SMOL_CONV_NOGEN);
    char *plain = NULL;
    CHECK(bt_chat_render(BT_CHAT_CHATML, U, 1, NULL, &plain) == BT_OK);
    CHECK_STR(plain, "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
    free(plain);

    /* Llama-3, Llama-2, Zephyr */
    RENDER(BT_CHAT_LLAMA3, CONV, NULL, X_LLAMA3_CONV);
    RENDER(BT_CHAT_LLAMA3, U, NULL, X_LLAMA3_U);
    RENDER(BT_CHAT_LLAMA2, CONV, NULL, X_LLAMA2_CONV);
    RENDER(BT_CHAT_LLAMA2, U, NULL, X_LLAMA2_U);
    RENDER(BT_CHAT_ZEPHYR, CONV, NULL, X_ZEPHYR_CONV);
    RENDER(BT_CHAT_ZEPHYR, U, NULL, X_ZEPHYR_U);
    /* bos "" leaves BOS to the tokenizer */
    CHECK(bt_chat_render(BT_CHAT_LLAMA3, U, 1, "", &plain) == BT_OK);
    CHECK_STR(plain, X_LLAMA3_U + strlen("<|begin_of_text|>"));
    free(plain);
    CHECK(bt_chat_render(BT_CHAT_LLAMA2, U, 1, "", &plain) == BT_OK);
    CHECK_STR(plain, X_LLAMA2_U + strlen("<s>"));
    free(plain);
    /* a default system turn reaches llama2's <<SYS>> block */
    bt_chat_opts l2 = { .default_system = "Sys", .eos_text = "<eos>" };
    const bt_message two[] = { { "user", "a" }, { "assistant", "b" } };
    RENDER(BT_CHAT_LLAMA2, two, &l2, "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\na [/INST] b <eos>");

    /* what the templates cannot say is an error, not a silent drop */
    const bt_message bad_order[] = { { "user", "a" }, { "user", "b" } };
    const bt_message tool[] = { { "user", "a" }, { "tool", "42" } };
    char *out = (char *)"untouched";
    CHECK(bt_chat_render(BT_CHAT_LLAMA2, bad_order, 2, NULL, &out) == BT_EINVAL && !out && strstr(bt_errmsg(), "alternate"));
    CHECK(bt_chat_render(BT_CHAT_LLAMA2, tool, 2, NULL, &out) == BT_EINVAL && strstr(bt_errmsg(), "\"tool\""));
    CHECK(bt_chat_render(BT_CHAT_ZEPHYR, tool, 2, NULL, &out) == BT_EINVAL && strstr(bt_errmsg(), "\"tool\""));
    CHECK(bt_chat_render(BT_CHAT_NONE, U, 1, NULL, &out) == BT_EINVAL && !out);
    CHECK(bt_chat_render(42, U, 1, NULL, &out) == BT_EINVAL);
    /* ChatML and Llama-3 print any role verbatim, as their templates do */
    CHECK(bt_chat_render(BT_CHAT_CHATML, tool, 2, NULL, &out) == BT_OK && strstr(out, "<|im_start|>tool\n42<|im_end|>\n"));
    free(out);

    free(sys);
    free(qsys);
}

/* A parsed body feeds the renderer: the bundled example request. */
static void test_example_file(void)
{
    const char *srcdir = getenv("BT_SRCDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/chat.json", srcdir ? srcdir : ".");
    char *body;
    size_t len;
    if (bt_read_file(path, &body, &len) != BT_OK) {
        fprintf(stderr, "note: %s not readable, example check skipped\n", path);
        return;
    }
    bt_request r;
    CHECK(bt_request_parse(body, len, path, &r) == BT_OK);
    CHECK(r.n_messages == 1 && r.has_max_tokens && r.has_temperature && r.temperature == 0);
    char *sys = NULL, *out = NULL;
    CHECK(bt_chat_default_system(T_SMOL, strlen(T_SMOL), &sys) == BT_OK);
    bt_chat_opts o = { .default_system = sys };
    if (r.n_messages == 1) {
        CHECK(bt_chat_render_opts(BT_CHAT_CHATML, r.messages, r.n_messages, &o, &out) == BT_OK);
        CHECK_STR(out, X_SMOL_U);
    }
    free(out);
    free(sys);
    free(body);
    bt_request_clear(&r);

    snprintf(path, sizeof path, "%s/examples/completion.json", srcdir ? srcdir : ".");
    if (bt_read_file(path, &body, &len) == BT_OK) {
        CHECK(bt_request_parse(body, len, path, &r) == BT_OK && r.prompt);
        bt_request_clear(&r);
        free(body);
    }
}

int main(void)
{
    test_completions();
    test_chat_body();
    test_errors();
    test_templates();
    test_example_file();
    if (failures) { fprintf(stderr, "test_request: %d failure(s)\n", failures); return 1; }
    printf("test_request: ok\n");
    return 0;
}
