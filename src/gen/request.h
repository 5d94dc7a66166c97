/* request.h - OpenAI-compatible request bodies (the chat templates that
 * render their messages are chat.h's).
 *
 * bt_request_parse() reads a /v1/completions or /v1/chat/completions JSON
 * body (jansson) into plain data; bt_request_prompt_ids() turns it into the
 * prompt's token ids (messages rendered with bt_chat_render_opts). */
#ifndef BT_REQUEST_H
#define BT_REQUEST_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "gen/chat.h"

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
    char *reasoning_effort;   /* "reasoning_effort" (OpenAI's field) or chat_template_kwargs's: low | medium | high */
    bool no_generation_prompt; /* "add_generation_prompt": false (vLLM's extension) */
    char *json;               /* the body as given (for the trace) */
} bt_request;

/* Parse a JSON body. Unknown fields produce one warning each (bt_warn);
 * malformed JSON or wrong types are BT_EINVAL with a message naming the
 * source (path), line/column or field. */
int bt_request_parse(const char *json, size_t len, const char *source, bt_request *out);
void bt_request_clear(bt_request *r);

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
