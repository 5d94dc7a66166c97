/* request.c - OpenAI-compatible request bodies (/v1/completions and
 * /v1/chat/completions) parsed with jansson into a plain bt_request.
 *
 * Invariants: on success exactly one of prompt / messages is set and every
 * string is a malloc'd copy (the jansson tree is freed before returning); on
 * error *out is cleared, so callers free nothing. Errors are one line that
 * names the source and either the JSON position or the field. Fields we do
 * not use are never fatal: they draw one warning each, because a body copied
 * from another client should still run. */
#include "gen/request.h"
#include "gen/chat.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BT_MAX_STOP 16

/* OpenAI fields we accept without comment when they carry their default (or
 * when they have no effect on a single, non-streamed completion). */
static const char *const quiet_fields[] = {
    "model", "user", "metadata", "store", "service_tier", "stream_options",
    "logprobs", "top_logprobs", "parallel_tool_calls",
};

static const char *src_name(const char *source) { return source && *source ? source : "request"; }

static bool in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0) return true;
    return false;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static int type_error(const char *src, const char *field, const char *want, const json_t *v)
{
    return bt_error(BT_EINVAL, "%s: field \"%s\" must be %s, not %s", src, field, want, json_kind(v));
}

static int dup_str(const char *s, char **out)
{
    *out = strdup(s);
    return *out ? BT_OK : bt_error(BT_ENOMEM, "out of memory copying a request string");
}

/* "reasoning_effort": gpt-oss's harmony template's low | medium | high. */
static int parse_effort(const char *src, const char *field, const json_t *v, bt_request *out)
{
    const char *e = json_is_string(v) ? json_string_value(v) : NULL;
    if (!e || (strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high")))
        return e ? bt_error(BT_EINVAL, "%s: field \"%s\" must be low, medium or high, not \"%s\"", src, field, e)
                 : type_error(src, field, "a string", v);
    free(out->reasoning_effort);
    return dup_str(e, &out->reasoning_effort);
}

/* An integer field; a real with an integral value (64.0) is accepted too,
 * since some clients serialise every number as a double. */
static int get_int(const char *src, const char *field, const json_t *v, long long *out)
{
    if (json_is_integer(v)) { *out = json_integer_value(v); return BT_OK; }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.0e15) { *out = (long long)d; return BT_OK; }
    }
    return type_error(src, field, "an integer", v);
}

static int get_num(const char *src, const char *field, const json_t *v, double *out)
{
    if (!json_is_number(v)) return type_error(src, field, "a number", v);
    *out = json_number_value(v);
    if (!isfinite(*out)) return bt_error(BT_EINVAL, "%s: field \"%s\" is not finite", src, field);
    return BT_OK;
}

static int parse_prompt(const char *src, const json_t *v, bt_request *r)
{
    if (json_is_string(v)) return dup_str(json_string_value(v), &r->prompt);
    if (!json_is_array(v)) return type_error(src, "prompt", "a string or an array of one string", v);
    size_t n = json_array_size(v);
    if (n == 0) return bt_error(BT_EINVAL, "%s: field \"prompt\" is an empty array", src);
    const json_t *e = json_array_get(v, 0);
    if (json_is_integer(e) || json_is_array(e))
        return bt_error(BT_EUNSUPPORTED, "%s: field \"prompt\" holds token ids; only text prompts are supported", src);
    if (!json_is_string(e)) return type_error(src, "prompt[0]", "a string", e);
    if (n > 1)
        return bt_error(BT_EUNSUPPORTED, "%s: field \"prompt\" has %zu prompts; only one prompt per request is supported", src, n);
    return dup_str(json_string_value(e), &r->prompt);
}

/* content: a string, null (an assistant turn that only called tools), or an
 * array of parts of which only {"type":"text","text":...} can be rendered. */
static int parse_content(const char *src, size_t i, const json_t *c, char **out)
{
    char field[64];
    snprintf(field, sizeof field, "messages[%zu].content", i);
    if (!c || json_is_null(c)) return dup_str("", out);
    if (json_is_string(c)) return dup_str(json_string_value(c), out);
    if (!json_is_array(c)) return type_error(src, field, "a string or an array of text parts", c);

    size_t total = 0, j;
    const json_t *part;
    json_array_foreach(c, j, part) {
        char pf[96];
        snprintf(pf, sizeof pf, "%s[%zu]", field, j);
        if (!json_is_object(part)) return type_error(src, pf, "an object", part);
        const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type))
            return bt_error(BT_EINVAL, "%s: field \"%s.type\" must be a string", src, pf);
        if (strcmp(json_string_value(type), "text") != 0)
            return bt_error(BT_EUNSUPPORTED, "%s: field \"%s.type\" is \"%s\"; only text parts are supported",
                            src, pf, json_string_value(type));
        if (!json_is_string(text))
            return bt_error(BT_EINVAL, "%s: field \"%s.text\" must be a string", src, pf);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return bt_error(BT_ENOMEM, "out of memory copying %s", field);
    size_t at = 0;
    json_array_foreach(c, j, part) {
        const json_t *text = json_object_get(part, "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = '\0';
    *out = s;
    return BT_OK;
}

static int parse_messages(const char *src, const json_t *v, bt_request *r)
{
    if (!json_is_array(v)) return type_error(src, "messages", "an array", v);
    size_t n = json_array_size(v);
    if (n == 0) return bt_error(BT_EINVAL, "%s: field \"messages\" is an empty array", src);
    if (n > INT_MAX) return bt_error(BT_EINVAL, "%s: field \"messages\" is too long", src);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return bt_error(BT_ENOMEM, "out of memory for %zu messages", n);
    r->n_messages = (int)n; /* entries start NULL, so clear() can free any prefix */

    /* Unknown message keys are warned about once per key name, not once per
     * message: a 50-turn conversation with "name" set should say it once. */
    const char *warned[16];
    int n_warned = 0;
    size_t i;
    const json_t *m;
    json_array_foreach(v, i, m) {
        char field[64];
        snprintf(field, sizeof field, "messages[%zu]", i);
        if (!json_is_object(m)) return type_error(src, field, "an object", m);
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role) || json_string_length(role) == 0)
            return bt_error(BT_EINVAL, "%s: field \"%s.role\" must be a non-empty string", src, field);
        int rc = dup_str(json_string_value(role), &r->messages[i].role);
        if (rc) return rc;
        if ((rc = parse_content(src, i, json_object_get(m, "content"), &r->messages[i].content))) return rc;

        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)m, key, val) {
            if (!strcmp(key, "role") || !strcmp(key, "content")) continue;
            bool seen = false;
            for (int k = 0; k < n_warned; k++) seen |= strcmp(warned[k], key) == 0;
            if (seen) continue;
            if (n_warned < (int)BT_ARRAY_SIZE(warned)) warned[n_warned++] = key;
            bt_warn("%s: field \"%s.%s\" is ignored", src, field, key);
        }
    }
    return BT_OK;
}

static int parse_stop(const char *src, const json_t *v, bt_request *r)
{
    if (json_is_null(v)) return BT_OK;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return bt_error(BT_EINVAL, "%s: field \"stop\" is an empty string", src);
        r->stop = calloc(1, sizeof *r->stop);
        if (!r->stop) return bt_error(BT_ENOMEM, "out of memory for stop strings");
        r->n_stop = 1;
        return dup_str(json_string_value(v), &r->stop[0]);
    }
    if (!json_is_array(v)) return type_error(src, "stop", "a string or an array of strings", v);
    size_t n = json_array_size(v);
    if (n > BT_MAX_STOP)
        return bt_error(BT_EINVAL, "%s: field \"stop\" has %zu strings; at most %d are allowed", src, n, BT_MAX_STOP);
    if (n == 0) return BT_OK;
    r->stop = calloc(n, sizeof *r->stop);
    if (!r->stop) return bt_error(BT_ENOMEM, "out of memory for stop strings");
    r->n_stop = (int)n;
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        char field[32];
        snprintf(field, sizeof field, "stop[%zu]", i);
        if (!json_is_string(e)) return type_error(src, field, "a string", e);
        if (json_string_length(e) == 0) return bt_error(BT_EINVAL, "%s: field \"%s\" is an empty string", src, field);
        int rc = dup_str(json_string_value(e), &r->stop[i]);
        if (rc) return rc;
    }
    return BT_OK;
}

/* Fields a client may send that change what OpenAI would do but that we do
 * not implement: accepted, with a warning only when they ask for something
 * other than the default. Returns true when the key was handled here. */
static bool ignored_field(const char *src, const char *key, const json_t *v)
{
    if (!strcmp(key, "stream")) {
        if (json_is_true(v)) bt_warn("%s: \"stream\": true is ignored; the completion is produced in one piece", src);
        return true;
    }
    if (!strcmp(key, "n") || !strcmp(key, "best_of")) {
        if (!json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
            bt_warn("%s: field \"%s\" is ignored; one completion is generated", src, key);
        return true;
    }
    if (!strcmp(key, "echo")) {
        if (json_is_true(v)) bt_warn("%s: \"echo\": true is ignored", src);
        return true;
    }
    if (!strcmp(key, "frequency_penalty") || !strcmp(key, "presence_penalty")) {
        if (!json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
            bt_warn("%s: field \"%s\" is ignored; no penalties are applied", src, key);
        return true;
    }
    if (!strcmp(key, "logit_bias")) {
        if (!json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0))
            bt_warn("%s: field \"logit_bias\" is ignored", src);
        return true;
    }
    return false;
}

int bt_request_parse(const char *json, size_t len, const char *source, bt_request *out)
{
    const char *src = src_name(source);
    memset(out, 0, sizeof *out);
    out->top_p = 1.0f;
    out->temperature = 1.0f;

    json_error_t jerr;
    /* Duplicate keys would make "which temperature did it run with?" a
     * question about jansson's internals, so they are an error. */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return bt_error(BT_EINVAL, "%s:%d:%d: malformed JSON: %s", src, jerr.line, jerr.column, jerr.text);

    int rc = BT_OK;
    if (!json_is_object(root)) {
        rc = bt_error(BT_EINVAL, "%s: the request body must be a JSON object, not %s", src, json_kind(root));
        goto done;
    }
    const json_t *prompt = json_object_get(root, "prompt"), *messages = json_object_get(root, "messages");
    if (prompt && messages) {
        rc = bt_error(BT_EINVAL, "%s: both \"prompt\" and \"messages\" are set; use \"prompt\" for "
                                 "/v1/completions or \"messages\" for /v1/chat/completions", src);
        goto done;
    }
    if (!prompt && !messages) {
        rc = bt_error(BT_EINVAL, "%s: neither \"prompt\" (/v1/completions) nor \"messages\" "
                                 "(/v1/chat/completions) is set", src);
        goto done;
    }
    if ((rc = prompt ? parse_prompt(src, prompt, out) : parse_messages(src, messages, out))) goto done;

    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        long long iv;
        double dv;
        if (!strcmp(key, "prompt") || !strcmp(key, "messages")) continue;
        /* null means "not set" for every optional OpenAI field */
        if (json_is_null(v)) continue;
        if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
            if ((rc = get_int(src, key, v, &iv))) goto done;
            if (iv < 0 || iv > INT_MAX) {
                rc = bt_error(BT_EINVAL, "%s: field \"%s\" is %lld; it must be between 0 and %d", src, key, iv, INT_MAX);
                goto done;
            }
            if (out->has_max_tokens && out->max_tokens != (int)iv) {
                rc = bt_error(BT_EINVAL, "%s: \"max_tokens\" and \"max_completion_tokens\" disagree (%d vs %lld)",
                              src, out->max_tokens, iv);
                goto done;
            }
            out->max_tokens = (int)iv;
            out->has_max_tokens = true;
        } else if (!strcmp(key, "temperature")) {
            if ((rc = get_num(src, key, v, &dv))) goto done;
            if (dv < 0) {
                rc = bt_error(BT_EINVAL, "%s: field \"temperature\" is %g; it must be >= 0", src, dv);
                goto done;
            }
            out->temperature = (float)dv;
            out->has_temperature = true;
        } else if (!strcmp(key, "top_p")) {
            if ((rc = get_num(src, key, v, &dv))) goto done;
            if (!(dv > 0 && dv <= 1)) {
                rc = bt_error(BT_EINVAL, "%s: field \"top_p\" is %g; it must be in (0, 1]", src, dv);
                goto done;
            }
            out->top_p = (float)dv;
            out->has_top_p = true;
        } else if (!strcmp(key, "top_k")) {
            if ((rc = get_int(src, key, v, &iv))) goto done;
            if (iv < 0 || iv > INT_MAX) {
                rc = bt_error(BT_EINVAL, "%s: field \"top_k\" is %lld; it must be >= 0 (0 = off)", src, iv);
                goto done;
            }
            out->top_k = (int)iv;
            out->has_top_k = true;
        } else if (!strcmp(key, "seed")) {
            if (!json_is_integer(v)) { rc = type_error(src, key, "an integer", v); goto done; }
            /* negative seeds are legal in OpenAI; keep their bits */
            out->seed = (unsigned long long)json_integer_value(v);
            out->has_seed = true;
        } else if (!strcmp(key, "stop")) {
            if ((rc = parse_stop(src, v, out))) goto done;
        } else if (!strcmp(key, "add_generation_prompt")) {
            /* vLLM's extension: false leaves off the assistant header */
            if (!json_is_boolean(v)) { rc = type_error(src, key, "true or false", v); goto done; }
            out->no_generation_prompt = json_is_false(v);
        } else if (!strcmp(key, "reasoning_effort")) {
            if ((rc = parse_effort(src, key, v, out))) goto done;
        } else if (!strcmp(key, "chat_template_kwargs")) {
            /* vLLM's and llama.cpp server's way to pass template variables;
             * we know enable_thinking (qwen3) */
            if (!json_is_object(v)) { rc = type_error(src, key, "an object", v); goto done; }
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                if (!strcmp(k2, "enable_thinking")) {
                    if (!json_is_boolean(v2)) { rc = type_error(src, "chat_template_kwargs.enable_thinking", "true or false", v2); goto done; }
                    out->enable_thinking = json_is_true(v2) ? 1 : -1;
                } else if (!strcmp(k2, "reasoning_effort")) {
                    if ((rc = parse_effort(src, "chat_template_kwargs.reasoning_effort", v2, out))) goto done;
                } else {
                    bt_warn("%s: chat_template_kwargs \"%s\" is ignored (bangtrace knows enable_thinking and "
                            "reasoning_effort)", src, k2);
                }
            }
        } else if (in_list(key, quiet_fields, BT_ARRAY_SIZE(quiet_fields)) || ignored_field(src, key, v)) {
            continue;
        } else {
            bt_warn("%s: unknown field \"%s\" is ignored", src, key);
        }
    }

    out->json = malloc(len + 1);
    if (!out->json) { rc = bt_error(BT_ENOMEM, "out of memory copying the request body"); goto done; }
    memcpy(out->json, json, len);
    out->json[len] = '\0';

done:
    json_decref(root);
    if (rc) bt_request_clear(out);
    return rc;
}

void bt_request_clear(bt_request *r)
{
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->json);
    free(r->reasoning_effort);
    memset(r, 0, sizeof *r);
}

/* ---- a request turned into token ids, and its stop strings (run, serve) ---- */

/* Longest suffix of text[0..n) that is a proper prefix of some stop string:
 * those bytes are held back until we know. */
size_t bt_stop_holdback(const char *text, size_t n, char *const *stop, int n_stop)
{
    size_t hold = 0;
    for (int s = 0; s < n_stop; s++) {
        size_t sl = strlen(stop[s]);
        if (!sl) continue;          /* bt_request_parse refuses them; never match one */
        for (size_t k = BT_MIN(sl - 1, n); k > hold; k--)
            if (!memcmp(text + n - k, stop[s], k)) { hold = k; break; }
    }
    return hold;
}

const char *bt_stop_find(const char *text, size_t n, size_t from, char *const *stop, int n_stop)
{
    const char *best = NULL;
    for (int s = 0; s < n_stop; s++) {
        size_t sl = strlen(stop[s]);
        if (!sl) continue;
        size_t start = from > sl ? from - sl : 0;
        for (size_t i = start; i + sl <= n; i++)
            if (!memcmp(text + i, stop[s], sl)) { if (!best || text + i < best) best = text + i; break; }
    }
    return best;
}

int bt_request_render(const bt_request *req, const char *chat_template, const bt_model *m, bool model_bos,
                      char **out)
{
    *out = NULL;
    int tmpl, rc;
    char *file_text = NULL;
    const char *jinja = m ? m->chat_template : NULL;
    if (chat_template) {
        tmpl = bt_chat_tmpl_from_name(chat_template);
        if (tmpl < 0) {
            /* not a name: a file with the template's Jinja text */
            size_t len;
            if (!strchr(chat_template, '/') && !strstr(chat_template, ".jinja"))
                return bt_error(BT_EINVAL, "unknown --chat-template '%s' (" BT_CHAT_NAMES ", or a .jinja file)", chat_template);
            if ((rc = bt_read_file(chat_template, &file_text, &len))) return rc;
            jinja = file_text;
            tmpl = bt_chat_tmpl_detect(jinja, strlen(jinja));
            if (tmpl == BT_CHAT_NONE) {
                free(file_text);
                return bt_error(BT_EUNSUPPORTED, "%s: not a chat template bangtrace recognises (" BT_CHAT_NAMES ")", chat_template);
            }
        }
    } else {
        if (!jinja)
            return bt_error(BT_EINVAL, "%s has no tokenizer.chat_template; name one with --chat-template NAME (" BT_CHAT_NAMES ")",
                            m ? m->path : "the model");
        tmpl = bt_chat_tmpl_detect(jinja, strlen(jinja));
        if (tmpl == BT_CHAT_NONE)
            return bt_error(BT_EUNSUPPORTED, "the chat template of %s is not one bangtrace recognises; name one with --chat-template NAME (" BT_CHAT_NAMES ")", m->path);
    }
    /* The tokenizer adds BOS itself when the vocabulary asks (add_special
     * in bt_request_prompt_ids), so the template must not spell it again. */
    bt_chat_opts co = { .bos_text = model_bos ? "" : NULL, .thinking = req->enable_thinking,
                        .no_generation_prompt = req->no_generation_prompt, .reasoning_effort = req->reasoning_effort };
    char *sys = NULL;
    if (jinja && bt_chat_default_system(jinja, strlen(jinja), &sys) == BT_ENOMEM) {
        free(file_text);
        return bt_error(BT_ENOMEM, "out of memory");
    }
    co.default_system = sys;
    /* Llama 3.2's template dates the system turn with strftime_now (today,
     * as transformers and llama.cpp give it); 3.1's says 26 Jul 2024 */
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    if (tmpl == BT_CHAT_LLAMA31 && jinja && strstr(jinja, "strftime_now") && localtime_r(&now, &tmv) &&
        strftime(date, sizeof date, "%d %b %Y", &tmv))
        co.date_string = date;
    rc = bt_chat_render_opts(tmpl, req->messages, req->n_messages, &co, out);
    free(sys);
    free(file_text);
    return rc;
}

int bt_request_prompt_ids(const bt_request *req, const char *prompt, const char *chat_template, const bt_model *m,
                          const bt_tokenizer *tok, int32_t **ids, size_t *n_ids)
{
    const char *text = prompt ? prompt : req->prompt;
    char *rendered = NULL;
    bool parse_special = false;
    if (!text) {
        int rc = bt_request_render(req, chat_template, m, m->vocab.add_bos, &rendered);
        if (rc) return rc;
        text = rendered;
        parse_special = true;
        bt_debug("rendered prompt: %s", rendered);
    }
    int rc = bt_tokenize(tok, text, strlen(text), true, parse_special, ids, n_ids);
    free(rendered);
    if (rc) return rc;
    if (*n_ids == 0) {
        int32_t bos = bt_tokenizer_bos(tok);
        if (bos < 0) return bt_error(BT_EINVAL, "the prompt is empty and the vocabulary has no BOS token to start from");
        free(*ids);
        *ids = malloc(sizeof(int32_t));
        if (!*ids) return bt_error(BT_ENOMEM, "out of memory");
        (*ids)[0] = bos;
        *n_ids = 1;
    }
    return BT_OK;
}
