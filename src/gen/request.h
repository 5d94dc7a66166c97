/* request.h - OpenAI-compatible request bodies and chat templates.
 *
 * bt_request_parse() reads a /v1/completions or /v1/chat/completions JSON
 * body (jansson) into plain data; bt_chat_render() turns messages into one
 * prompt string with a template recognised from the model's
 * tokenizer.chat_template (or named explicitly with --chat-template). */
#ifndef BT_REQUEST_H
#define BT_REQUEST_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct bt_message { char *role; char *content; } bt_message;

typedef struct bt_request {
    char *prompt;             /* completions body, or NULL */
    bt_message *messages;     /* chat body, or NULL */
    int n_messages;
    /* sampling; the has_* flag says the body set it */
    int max_tokens;   bool has_max_tokens;
    float temperature; bool has_temperature;
    float top_p;      bool has_top_p;
    int top_k;        bool has_top_k;
    unsigned long long seed; bool has_seed;
    char **stop; int n_stop;  /* "stop": string or array of strings */
    int enable_thinking;      /* "chat_template_kwargs": {"enable_thinking": b}: 0 not given, 1 true, -1 false */
    bool no_generation_prompt; /* "add_generation_prompt": false (vLLM's extension) */
    char *json;               /* the body as given (for the trace) */
} bt_request;

/* Parse a JSON body. Unknown fields produce one warning each (bt_warn);
 * malformed JSON or wrong types are BT_EINVAL with a message naming the
 * source (path), line/column or field. */
int bt_request_parse(const char *json, size_t len, const char *source, bt_request *out);
void bt_request_clear(bt_request *r);

/* Chat templates we render natively. */
enum bt_chat_tmpl { BT_CHAT_NONE = 0, BT_CHAT_CHATML, BT_CHAT_LLAMA2, BT_CHAT_LLAMA3, BT_CHAT_ZEPHYR,
                   BT_CHAT_QWEN2, BT_CHAT_QWEN3, BT_CHAT_MISTRAL, BT_CHAT_MISTRAL0, BT_CHAT_LLAMA31,
                   BT_CHAT_LAST = BT_CHAT_LLAMA31 };
/* The names, for errors and --help. */
#define BT_CHAT_NAMES "chatml, qwen2, qwen3, llama2, llama3, llama3.1, mistral, mistral-v0, zephyr"
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
    const char *date_string;    /* llama3.1's "Today Date: ..."; NULL = "26 Jul 2024", the template's own */
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

/* ---- from a request to token ids (run; serve) ---- */

struct bt_model;
struct bt_tokenizer;
/* Render req's messages into the prompt text: with the template named by
 * chat_template (a name from BT_CHAT_NAMES, or the path of a .jinja file
 * holding the template's text, which is then recognised and read for its
 * default system prompt), else the one recognised in m's
 * tokenizer.chat_template. model_bos: the tokenizer adds BOS as an id, so
 * the text leaves it out; false spells it as the template family does
 * (<s>, <|begin_of_text|>). req->enable_thinking goes to qwen3. Result
 * malloc'd. BT_EINVAL / BT_EUNSUPPORTED with one line naming the template
 * or the file. */
int bt_request_render(const bt_request *req, const char *chat_template, const struct bt_model *m, bool model_bos,
                      char **out);
/* The prompt's token ids (malloc'd): `prompt` (or else req->prompt) as raw
 * text, BOS added if the vocabulary asks; without either, req's messages
 * rendered with the template named by chat_template (NULL: the one detected
 * from the model's tokenizer.chat_template) and tokenized with special
 * tokens parsed. An empty prompt becomes BOS alone. Errors: an unknown or
 * undetectable template, a vocabulary without BOS for an empty prompt. */
int bt_request_prompt_ids(const bt_request *req, const char *prompt, const char *chat_template,
                          const struct bt_model *m, const struct bt_tokenizer *tok, int32_t **ids, size_t *n_ids);
/* Stop strings over generated text[0..n): the first occurrence of any of
 * them that ends after `from` (the text before it was already searched), or
 * NULL; and how many trailing bytes could still be the start of one (held
 * back from the output until known). */
const char *bt_stop_find(const char *text, size_t n, size_t from, char *const *stop, int n_stop);
size_t bt_stop_holdback(const char *text, size_t n, char *const *stop, int n_stop);

#endif
