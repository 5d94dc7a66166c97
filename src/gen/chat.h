/* chat.h - chat templates: bt_chat_render() turns messages into one prompt
 * string with a template recognised from the model's tokenizer.chat_template
 * (or named explicitly with --chat-template). */
#ifndef BT_CHAT_H
#define BT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bt_message { char *role; char *content; } bt_message;

/* Chat templates we render natively. */
enum bt_chat_tmpl { BT_CHAT_NONE = 0, BT_CHAT_CHATML, BT_CHAT_LLAMA2, BT_CHAT_LLAMA3, BT_CHAT_ZEPHYR,
                   BT_CHAT_QWEN2, BT_CHAT_QWEN3, BT_CHAT_MISTRAL, BT_CHAT_MISTRAL0, BT_CHAT_LLAMA31,
                   BT_CHAT_HARMONY, BT_CHAT_LAST = BT_CHAT_HARMONY };
/* The names, for errors and --help. */
#define BT_CHAT_NAMES "chatml, qwen2, qwen3, llama2, llama3, llama3.1, mistral, mistral-v0, zephyr, harmony"
/* Name <-> id (BT_CHAT_NAMES); -1 / NULL if unknown. */
int bt_chat_tmpl_from_name(const char *name);
const char *bt_chat_tmpl_name(int tmpl);
/* Recognise a Jinja template string by its markers; BT_CHAT_NONE if unknown. */
int bt_chat_tmpl_detect(const char *jinja, size_t len);

/* Render messages with the generation prompt for the assistant appended.
 * bos_text is the BOS piece for templates that spell it: NULL means the
 * template's usual spelling ("<s>" for llama2, "<|begin_of_text|>" for
 * llama3), "" means none (pass "" when the tokenizer adds BOS itself).
 * Result malloc'd. Same as bt_chat_render_opts() with only bos_text set. */
int bt_chat_render(int tmpl, const bt_message *msgs, int n, const char *bos_text, char **out);

/* Everything a template needs besides the messages. Zero-initialise. */
typedef struct bt_chat_opts {
    const char *bos_text;       /* as in bt_chat_render() */
    const char *eos_text;       /* closes turns in llama2 / zephyr; NULL = "</s>" */
    /* Some templates add a system turn of their own when messages[0] is not
     * a system message (SmolLM2: "You are a helpful AI assistant named
     * SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen, ...").
     * Set this to bt_chat_default_system()'s result to render exactly what
     * the model's Jinja template renders; NULL = no default system turn. */
    const char *default_system;
    bool no_generation_prompt; /* leave off the trailing assistant header */
    int thinking;               /* Qwen3's enable_thinking: 0 not given (thinking on), 1 true, -1 false */
    const char *date_string;    /* llama3.1's "Today Date: ..."; NULL = "26 Jul 2024", the template's own;
                                 * harmony's "Current date: ...": NULL = today's (local time, strftime_now's) */
    const char *reasoning_effort; /* harmony (gpt-oss): "low" | "medium" | "high"; NULL = "medium", the template's own */
} bt_chat_opts;
/* Render with options (opts may be NULL). Errors: BT_EINVAL for an unknown
 * template id, for a role the template cannot express (llama2, zephyr) or
 * for llama2 turns that do not alternate user/assistant. */
int bt_chat_render_opts(int tmpl, const bt_message *msgs, int n, const bt_chat_opts *opts, char **out);

/* Find the default system prompt a Jinja template inserts when the first
 * message is not a system one: the string literal (or '+'-joined literals)
 * printed under `{% if messages[0]['role'] != 'system' %}` (also
 * `loop.first and ...`), or in the `{% else %}` branch of
 * `{% if messages[0]['role'] == 'system' %}`, with the template's own
 * system-turn wrapper (e.g. "<|im_start|>system\n" ... "<|im_end|>\n")
 * removed. *out is malloc'd. BT_ENOTFOUND when the template has no such
 * default (most templates), BT_ENOMEM on allocation failure. */
int bt_chat_default_system(const char *jinja, size_t len, char **out);

#endif
