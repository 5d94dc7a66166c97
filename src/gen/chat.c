/* chat.c - chat templates rendered natively in C.
 *
 * We do not run Jinja. Each supported template is the C transcription of
 * its reference Jinja text, checked byte for byte against what jinja2
 * renders (tests/test_request.c records the expected strings):
 *   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
 *           (SmolLM2, Qwen; roles printed verbatim, content not trimmed)
 *   llama2  BOS[INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST] ASSISTANT EOS...
 *           (Llama-2-chat; content stripped; user/assistant must alternate;
 *           the prompt ends at [/INST], there is no assistant header)
 *   llama3  BOS<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *           ... <|start_header_id|>assistant<|end_header_id|>\n\n
 *           (content trimmed, as the template's `| trim` does)
 *   zephyr  <|ROLE|>\nCONTENT EOS\n ... <|assistant|>\n
 *   qwen2   Qwen2.5-Instruct: chatml with the default system turn, tool
 *           turns wrapped in <tool_response>, other roles refused (the
 *           template drops them silently)
 *   qwen3   Qwen3: chatml; the assistant turns after the last user query
 *           keep their <think> block, earlier ones lose it; enable_thinking
 *           false adds an empty think block after the assistant header
 *   mistral Mistral-7B-Instruct v0.2/v0.3 ('v1'): BOS [INST] SYS\n\nUSER
 *           [/INST] ASSISTANT EOS (spaces as the template puts them)
 *   llama3.1  Llama 3.1/3.2/3.3: always a system turn that starts with
 *           "Cutting Knowledge Date: December 2023\nToday Date: D\n\n" (D:
 *           the template's 26 Jul 2024, or today for 3.2's strftime_now),
 *           then the system message trimmed; tool turns refused
 *   mistral-v0  the pre-v1 Mistral template: BOS[INST] USER [/INST]ASSISTANT
 *           EOS, no system message
 * tests/chat_templates.sh renders the published template texts
 * (tests/data/chat/) with jinja2 and compares bytes.
 * A model's template is recognised by its markers (bt_chat_tmpl_detect);
 * a template it does not recognise is BT_CHAT_NONE and the caller decides. */
#include "gen/chat.h"
#include "base/util.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const tmpl_names[] = {
    [BT_CHAT_NONE] = "none", [BT_CHAT_CHATML] = "chatml", [BT_CHAT_LLAMA2] = "llama2",
    [BT_CHAT_LLAMA3] = "llama3", [BT_CHAT_ZEPHYR] = "zephyr", [BT_CHAT_QWEN2] = "qwen2", [BT_CHAT_QWEN3] = "qwen3",
    [BT_CHAT_MISTRAL] = "mistral", [BT_CHAT_MISTRAL0] = "mistral-v0", [BT_CHAT_LLAMA31] = "llama3.1",
    [BT_CHAT_HARMONY] = "harmony",
};
_Static_assert(BT_ARRAY_SIZE(tmpl_names) == BT_CHAT_LAST + 1, "a template without a name");

int bt_chat_tmpl_from_name(const char *name)
{
    if (!name) return -1;
    for (size_t i = 0; i < BT_ARRAY_SIZE(tmpl_names); i++)
        if (strcmp(name, tmpl_names[i]) == 0) return (int)i;
    return -1;
}

const char *bt_chat_tmpl_name(int tmpl)
{
    if (tmpl < 0 || tmpl >= (int)BT_ARRAY_SIZE(tmpl_names)) return NULL;
    return tmpl_names[tmpl];
}

static const char *find_in(const char *hay, size_t len, const char *needle)
{
    size_t nl = strlen(needle);
    if (nl == 0 || nl > len) return NULL;
    for (size_t i = 0; i + nl <= len; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, nl) == 0) return hay + i;
    return NULL;
}

int bt_chat_tmpl_detect(const char *jinja, size_t len)
{
    if (!jinja) return BT_CHAT_NONE;
    /* Order matters: a ChatML template may mention [INST] in a comment far
     * less often than a llama2 one mentions <|im_start|>, and llama3's
     * header markers are unique to it. */
    if (find_in(jinja, len, "<|im_start|>")) {
        /* Qwen3's: thinking switch and the last-query bookkeeping */
        if (find_in(jinja, len, "enable_thinking") && find_in(jinja, len, "last_query_index")) return BT_CHAT_QWEN3;
        /* Qwen2.5's: tool responses, no think blocks (QwQ and the R1
         * distills have those, and are not Qwen2.5's template) */
        if (find_in(jinja, len, "<tool_response>") && !find_in(jinja, len, "think>")) return BT_CHAT_QWEN2;
        return BT_CHAT_CHATML;
    }
    if (find_in(jinja, len, "<|start_header_id|>"))
        return find_in(jinja, len, "Cutting Knowledge Date: ") ? BT_CHAT_LLAMA31 : BT_CHAT_LLAMA3;
    if (find_in(jinja, len, "[INST]")) {
        if (find_in(jinja, len, "<<SYS>>")) return BT_CHAT_LLAMA2;
        /* Mistral's 'v1' template puts a space before [INST]; the pre-v1
         * one has none and no system message */
        if (find_in(jinja, len, "' [INST] ' + system_message")) return BT_CHAT_MISTRAL;
        if (find_in(jinja, len, "'[INST] ' + message['content'] + ' [/INST]'") &&
            find_in(jinja, len, "message['content'] + eos_token")) return BT_CHAT_MISTRAL0;
        return BT_CHAT_LLAMA2;
    }
    if (find_in(jinja, len, "<|user|>")) return BT_CHAT_ZEPHYR;
    /* gpt-oss's harmony format: channels in the turn headers */
    if (find_in(jinja, len, "<|start|>") && find_in(jinja, len, "<|channel|>")) return BT_CHAT_HARMONY;
    return BT_CHAT_NONE;
}

/* ---- rendering into a growable string (bt_sbuf, util.h) ---- */

/* The length of the Python whitespace character (str.isspace) that
 * starts at s (or, back, ends at s + n), 0 if none: ASCII \t\n\v\f\r,
 * \x1c-\x1f and space, and the Unicode ones in UTF-8. */
static size_t py_space(const char *s, size_t n, bool back)
{
    static const char *const uni[] = { "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                       "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80" };
    if (!n) return 0;
    unsigned char c = (unsigned char)(back ? s[n - 1] : s[0]);
    if ((c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) || c == ' ') return 1;
    for (size_t i = 0; i < BT_ARRAY_SIZE(uni); i++) {
        size_t l = strlen(uni[i]);
        if (n >= l && !memcmp(back ? s + n - l : s, uni[i], l)) return l;
    }
    /* U+2000..U+200A: e2 80 80..8a */
    if (n >= 3) {
        const unsigned char *u = (const unsigned char *)(back ? s + n - 3 : s);
        if (u[0] == 0xe2 && u[1] == 0x80 && u[2] >= 0x80 && u[2] <= 0x8a) return 3;
    }
    return 0;
}

/* Python's str.strip() / Jinja's trim. */
static void sb_put_stripped(bt_sbuf *b, const char *s)
{
    size_t n = strlen(s), k;
    while ((k = py_space(s, n, false))) s += k, n -= k;
    while ((k = py_space(s, n, true))) n -= k;
    bt_sbuf_putn(b, s, n);
}

/* ---- templates ---- */

static void render_chatml(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    if (o->default_system && (n == 0 || strcmp(m[0].role, "system") != 0)) {
        bt_sbuf_puts(b, "<|im_start|>system\n");
        bt_sbuf_puts(b, o->default_system);
        bt_sbuf_puts(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        bt_sbuf_puts(b, "<|im_start|>");
        bt_sbuf_puts(b, m[i].role);
        bt_sbuf_puts(b, "\n");
        bt_sbuf_puts(b, m[i].content);
        bt_sbuf_puts(b, "<|im_end|>\n");
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|im_start|>assistant\n");
}

/* One Llama 3 turn: header, the content stripped as the template's trim. */
static void llama3_turn(bt_sbuf *b, const char *role, const char *content)
{
    bt_sbuf_puts(b, "<|start_header_id|>");
    bt_sbuf_puts(b, role);
    bt_sbuf_puts(b, "<|end_header_id|>\n\n");
    sb_put_stripped(b, content);
    bt_sbuf_puts(b, "<|eot_id|>");
}

static void render_llama3(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    /* the template prints BOS before the first message only */
    if (n > 0 || o->default_system) bt_sbuf_puts(b, o->bos_text ? o->bos_text : "<|begin_of_text|>");
    if (o->default_system && (n == 0 || strcmp(m[0].role, "system") != 0)) {
        bt_sbuf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        sb_put_stripped(b, o->default_system);
        bt_sbuf_puts(b, "<|eot_id|>");
    }
    for (int i = 0; i < n; i++) {
        llama3_turn(b, m[i].role, m[i].content);
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 3.1's template (3.2 and 3.3 differ only in how the date is made). */
static int render_llama31(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    int first = 0;
    bt_sbuf_puts(b, o->bos_text ? o->bos_text : "<|begin_of_text|>");
    bt_sbuf_puts(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
    bt_sbuf_puts(b, o->date_string ? o->date_string : "26 Jul 2024");
    bt_sbuf_puts(b, "\n\n");
    if (n > 0 && !strcmp(m[0].role, "system")) { sb_put_stripped(b, m[0].content); first = 1; }
    bt_sbuf_puts(b, "<|eot_id|>");
    for (int i = first; i < n; i++) {
        /* tool results go out as JSON (the template's tojson): not rendered */
        if (!strcmp(m[i].role, "tool") || !strcmp(m[i].role, "ipython"))
            return bt_error(BT_EINVAL, "chat template llama3.1: \"%s\" turns are not supported (message %d)", m[i].role, i);
        llama3_turn(b, m[i].role, m[i].content);
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return BT_OK;
}

/* gpt-oss's harmony template without tools (its builtin and function tools,
 * tool calls and "thinking" fields are not rendered): the system turn with
 * the model identity, knowledge cutoff, date and reasoning effort; a first
 * system or developer message as the developer turn's instructions; user
 * turns; assistant turns on the final channel, the last one closed by
 * <|return|> when no generation prompt follows; later system or developer
 * messages are dropped, as the template drops them. */
static int render_harmony(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    char date[32];
    if (o->date_string) snprintf(date, sizeof(date), "%s", o->date_string);
    else {
        time_t now = time(NULL);
        struct tm tmv;
        if (!localtime_r(&now, &tmv) || !strftime(date, sizeof(date), "%Y-%m-%d", &tmv))
            return bt_error(BT_EINVAL, "chat template harmony: cannot format today's date");
    }
    const char *effort = o->reasoning_effort ? o->reasoning_effort : "medium";
    bt_sbuf_puts(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                    "Knowledge cutoff: 2024-06\nCurrent date: ");
    bt_sbuf_puts(b, date);
    bt_sbuf_puts(b, "\n\nReasoning: ");
    bt_sbuf_puts(b, effort);
    bt_sbuf_puts(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>");
    int first = 0;
    if (n > 0 && (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer"))) {
        if (m[0].content[0]) {
            bt_sbuf_puts(b, "<|start|>developer<|message|># Instructions\n\n");
            bt_sbuf_puts(b, m[0].content);
            bt_sbuf_puts(b, "\n\n<|end|>");
        }
        first = 1;
    }
    for (int i = first; i < n; i++) {
        const char *r = m[i].role, *c = m[i].content;
        if (!strcmp(r, "assistant")) {
            if (strstr(c, "<|channel|>analysis<|message|>") || strstr(c, "<|channel|>final<|message|>"))
                return bt_error(BT_EINVAL, "chat template harmony: message %d holds <|channel|> tags in its content (the "
                                "template refuses them)", i);
            bt_sbuf_puts(b, "<|start|>assistant<|channel|>final<|message|>");
            bt_sbuf_puts(b, c);
            bt_sbuf_puts(b, i == n - 1 && o->no_generation_prompt ? "<|return|>" : "<|end|>");
        } else if (!strcmp(r, "user")) {
            bt_sbuf_puts(b, "<|start|>user<|message|>");
            bt_sbuf_puts(b, c);
            bt_sbuf_puts(b, "<|end|>");
        } else if (strcmp(r, "system") && strcmp(r, "developer")) {
            return bt_error(BT_EINVAL, "chat template harmony: \"%s\" turns are not supported (message %d; tool results "
                            "need the assistant's tool calls, which bangtrace does not render)", r, i);
        }
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|start|>assistant");
    return BT_OK;
}

static int render_llama2(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    const char *bos = o->bos_text ? o->bos_text : "<s>";
    const char *eos = o->eos_text ? o->eos_text : "</s>";
    const char *sys = o->default_system;
    int first = 0;
    if (n > 0 && strcmp(m[0].role, "system") == 0) { sys = m[0].content; first = 1; }
    for (int i = first; i < n; i++) {
        int k = i - first;
        bool user = strcmp(m[i].role, "user") == 0;
        if (!user && strcmp(m[i].role, "assistant") != 0)
            return bt_error(BT_EINVAL, "chat template llama2 has no role \"%s\" (message %d)", m[i].role, i);
        /* the reference template raises here rather than guess */
        if (user != (k % 2 == 0))
            return bt_error(BT_EINVAL, "chat template llama2: roles must alternate user/assistant "
                                       "(message %d is %s)", i, m[i].role);
        if (user) {
            bt_sbuf_puts(b, bos);
            bt_sbuf_puts(b, "[INST] ");
            if (k == 0 && sys) {
                /* the template strips "<<SYS>>\n" + sys + ... + content as a
                 * whole, so only the outer ends lose their whitespace */
                bt_sbuf t = {0};
                bt_sbuf_puts(&t, "<<SYS>>\n");
                bt_sbuf_puts(&t, sys);
                bt_sbuf_puts(&t, "\n<</SYS>>\n\n");
                bt_sbuf_puts(&t, m[i].content);
                if (t.oom) b->oom = true; /* reported by the caller */
                else sb_put_stripped(b, t.p);
                free(t.p);
            } else {
                sb_put_stripped(b, m[i].content);
            }
            bt_sbuf_puts(b, " [/INST]");
        } else {
            bt_sbuf_puts(b, " ");
            sb_put_stripped(b, m[i].content);
            bt_sbuf_puts(b, " ");
            bt_sbuf_puts(b, eos);
        }
    }
    return BT_OK;
}

static int render_zephyr(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    const char *eos = o->eos_text ? o->eos_text : "</s>";
    if (o->default_system && (n == 0 || strcmp(m[0].role, "system") != 0)) {
        bt_sbuf_puts(b, "<|system|>\n");
        bt_sbuf_puts(b, o->default_system);
        bt_sbuf_puts(b, eos);
        bt_sbuf_puts(b, "\n");
    }
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        /* the reference template silently drops other roles; we refuse
         * rather than lose part of the conversation */
        if (strcmp(r, "user") && strcmp(r, "system") && strcmp(r, "assistant"))
            return bt_error(BT_EINVAL, "chat template zephyr has no role \"%s\" (message %d)", r, i);
        bt_sbuf_puts(b, "<|");
        bt_sbuf_puts(b, r);
        bt_sbuf_puts(b, "|>\n");
        bt_sbuf_puts(b, m[i].content);
        bt_sbuf_puts(b, eos);
        bt_sbuf_puts(b, "\n");
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|assistant|>\n");
    return BT_OK;
}

static void chatml_turn(bt_sbuf *b, const char *role, const char *content)
{
    bt_sbuf_puts(b, "<|im_start|>");
    bt_sbuf_puts(b, role);
    bt_sbuf_puts(b, "\n");
    bt_sbuf_puts(b, content);
    bt_sbuf_puts(b, "<|im_end|>\n");
}

/* Both Qwen templates wrap a run of tool turns in one user turn. */
static void qwen_tool(bt_sbuf *b, const bt_message *m, int n, int i)
{
    if (i == 0 || strcmp(m[i - 1].role, "tool")) bt_sbuf_puts(b, "<|im_start|>user");
    bt_sbuf_puts(b, "\n<tool_response>\n");
    bt_sbuf_puts(b, m[i].content);
    bt_sbuf_puts(b, "\n</tool_response>");
    if (i == n - 1 || strcmp(m[i + 1].role, "tool")) bt_sbuf_puts(b, "<|im_end|>\n");
}

static int qwen_role_error(const char *tmpl, const bt_message *m, int i)
{
    /* the template skips such a turn without a word; we refuse rather than
     * lose part of the conversation */
    return bt_error(BT_EINVAL, "chat template %s has no role \"%s\" (message %d)", tmpl, m[i].role, i);
}

static int render_qwen2(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    if (n > 0 && !strcmp(m[0].role, "system")) chatml_turn(b, "system", m[0].content);
    else if (o->default_system) chatml_turn(b, "system", o->default_system);
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (!strcmp(r, "user") || !strcmp(r, "assistant") || (!strcmp(r, "system") && i > 0)) chatml_turn(b, r, m[i].content);
        else if (!strcmp(r, "tool")) qwen_tool(b, m, n, i);
        else if (strcmp(r, "system")) return qwen_role_error("qwen2", m, i);
    }
    if (!o->no_generation_prompt) bt_sbuf_puts(b, "<|im_start|>assistant\n");
    return BT_OK;
}

static bool starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }
static bool ends_with(const char *s, const char *p)
{
    size_t ls = strlen(s), lp = strlen(p);
    return ls >= lp && !memcmp(s + ls - lp, p, lp);
}

/* Python's str.strip/lstrip/rstrip('\n') bounds of s[0..n). */
static void strip_nl(const char **s, size_t *n, bool left, bool right)
{
    while (left && *n && **s == '\n') (*s)++, (*n)--;
    while (right && *n && (*s)[*n - 1] == '\n') (*n)--;
}

static int render_qwen3(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o)
{
    if (n > 0 && !strcmp(m[0].role, "system")) chatml_turn(b, "system", m[0].content);
    /* the last user turn that is not a bare tool response */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user") &&
            !(starts_with(m[i].content, "<tool_response>") && ends_with(m[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role, *c = m[i].content;
        if (!strcmp(r, "user") || (!strcmp(r, "system") && i > 0)) { chatml_turn(b, r, c); continue; }
        if (!strcmp(r, "tool")) { qwen_tool(b, m, n, i); continue; }
        if (!strcmp(r, "system")) continue;
        if (strcmp(r, "assistant")) return qwen_role_error("qwen3", m, i);
        /* content = after the last </think>, reasoning = before the first
         * one, after the last <think> in that part (the template's splits) */
        const char *content = c, *reason = "";
        size_t clen = strlen(c), rlen = 0;
        const char *first_end = strstr(c, "</think>");
        if (first_end) {
            const char *last_end = first_end, *p;
            while ((p = strstr(last_end + 1, "</think>"))) last_end = p;
            content = last_end + 8;
            clen = strlen(content);
            strip_nl(&content, &clen, true, false);
            reason = c;
            rlen = (size_t)(first_end - c);
            strip_nl(&reason, &rlen, false, true);
            const char *q = reason, *last_open = NULL;
            while ((q = find_in(q, rlen - (size_t)(q - reason), "<think>"))) last_open = q++;
            if (last_open) { rlen -= (size_t)(last_open + 7 - reason); reason = last_open + 7; }
            strip_nl(&reason, &rlen, true, false);
        }
        bt_sbuf_puts(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || rlen > 0)) {
            strip_nl(&reason, &rlen, true, true);
            bt_sbuf_puts(b, "<think>\n");
            bt_sbuf_putn(b, reason, rlen);
            bt_sbuf_puts(b, "\n</think>\n\n");
            strip_nl(&content, &clen, true, false);
        }
        bt_sbuf_putn(b, content, clen);
        bt_sbuf_puts(b, "<|im_end|>\n");
    }
    if (!o->no_generation_prompt) {
        bt_sbuf_puts(b, "<|im_start|>assistant\n");
        if (o->thinking < 0) bt_sbuf_puts(b, "<think>\n\n</think>\n\n");
    }
    return BT_OK;
}

/* Mistral 'v1' (v0 = the pre-v1 template): an optional system message
 * goes into the first user turn; user/assistant must alternate (the
 * template raises); there is no generation prompt. */
static int render_mistral(bt_sbuf *b, const bt_message *m, int n, const bt_chat_opts *o, bool v0)
{
    const char *bos = o->bos_text ? o->bos_text : "<s>";
    const char *eos = o->eos_text ? o->eos_text : "</s>";
    const char *name = v0 ? "mistral-v0" : "mistral";
    const char *sys = NULL;
    int first = 0;
    if (!v0 && n > 0 && !strcmp(m[0].role, "system")) { sys = m[0].content; first = 1; }
    bt_sbuf_puts(b, bos);
    for (int i = first; i < n; i++) {
        int k = i - first;
        bool user = !strcmp(m[i].role, "user");
        if (user != (k % 2 == 0))
            return bt_error(BT_EINVAL, "chat template %s: %sroles must alternate user/assistant (message %d is %s)", name,
                            v0 ? "" : "after the optional system message, ", i, m[i].role);
        if (user) {
            bt_sbuf_puts(b, v0 ? "[INST] " : " [INST] ");
            if (k == 0 && sys) { bt_sbuf_puts(b, sys); bt_sbuf_puts(b, "\n\n"); }
            bt_sbuf_puts(b, m[i].content);
            bt_sbuf_puts(b, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            if (!v0) bt_sbuf_puts(b, " ");
            bt_sbuf_puts(b, m[i].content);
            bt_sbuf_puts(b, eos);
        } else {
            return bt_error(BT_EINVAL, "chat template %s has no role \"%s\" (message %d)", name, m[i].role, i);
        }
    }
    return BT_OK;
}

int bt_chat_render_opts(int tmpl, const bt_message *msgs, int n, const bt_chat_opts *opts, char **out)
{
    static const bt_chat_opts defaults;
    const bt_chat_opts *o = opts ? opts : &defaults;
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return bt_error(BT_EINVAL, "chat render: bad message list (%d messages)", n);
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return bt_error(BT_EINVAL, "chat render: message %d has no role or content", i);

    bt_sbuf b = {0};
    int rc = BT_OK;
    switch (tmpl) {
    case BT_CHAT_CHATML: render_chatml(&b, msgs, n, o); break;
    case BT_CHAT_LLAMA3: render_llama3(&b, msgs, n, o); break;
    case BT_CHAT_LLAMA2: rc = render_llama2(&b, msgs, n, o); break;
    case BT_CHAT_ZEPHYR: rc = render_zephyr(&b, msgs, n, o); break;
    case BT_CHAT_QWEN2: rc = render_qwen2(&b, msgs, n, o); break;
    case BT_CHAT_QWEN3: rc = render_qwen3(&b, msgs, n, o); break;
    case BT_CHAT_MISTRAL: rc = render_mistral(&b, msgs, n, o, false); break;
    case BT_CHAT_MISTRAL0: rc = render_mistral(&b, msgs, n, o, true); break;
    case BT_CHAT_LLAMA31: rc = render_llama31(&b, msgs, n, o); break;
    case BT_CHAT_HARMONY: rc = render_harmony(&b, msgs, n, o); break;
    default:
        return bt_error(BT_EINVAL, "chat render: unknown template id %d (known: " BT_CHAT_NAMES ")", tmpl);
    }
    if (!rc && !b.p) bt_sbuf_puts(&b, ""); /* llama2 (and llama3) with no messages render "" */
    if (!rc && b.oom) rc = bt_error(BT_ENOMEM, "out of memory rendering the chat prompt");
    if (rc) { free(b.p); return rc; }
    *out = b.p;
    return BT_OK;
}

int bt_chat_render(int tmpl, const bt_message *msgs, int n, const char *bos_text, char **out)
{
    bt_chat_opts o = { .bos_text = bos_text };
    return bt_chat_render_opts(tmpl, msgs, n, &o, out);
}

/* ---- default system prompt extraction ---- */

/* Skip spaces and the Jinja whitespace-control dashes. */
static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (isspace((unsigned char)*p) || *p == '-')) p++;
    return p;
}

/* Decode one Jinja string literal at p ('...' or "...") with Python's
 * common escapes; returns the position after it, or NULL if p is not a
 * literal or it is unterminated. */
static const char *read_literal(const char *p, const char *end, bt_sbuf *b)
{
    if (p >= end || (*p != '\'' && *p != '"')) return NULL;
    char q = *p++;
    while (p < end && *p != q) {
        char c = *p++;
        if (c == '\\' && p < end) {
            char e = *p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            default: c = e; break; /* \\ \' \" and anything else literally */
            }
        }
        bt_sbuf_putn(b, &c, 1);
    }
    return p < end ? p + 1 : NULL;
}

/* Read `{{ 'a' + "b" + ... }}` starting anywhere before the next "{{"
 * (within limit), concatenating the leading literals. */
static bool read_print(const char *p, const char *limit, bt_sbuf *b)
{
    const char *open = find_in(p, (size_t)(limit - p), "{{");
    if (!open) return false;
    p = skip_ws(open + 2, limit);
    bool any = false;
    for (;;) {
        const char *q = read_literal(p, limit, b);
        if (!q) break;
        any = true;
        p = skip_ws(q, limit);
        if (p < limit && *p == '+') p = skip_ws(p + 1, limit);
        else break;
    }
    return any && !b->oom;
}

static bool strip_wrapper(char *s, const char *pre, const char *const *posts, size_t n_posts)
{
    size_t lp = strlen(pre), ls = strlen(s);
    if (ls < lp || memcmp(s, pre, lp) != 0) return false;
    for (size_t i = 0; i < n_posts; i++) {
        size_t lq = strlen(posts[i]);
        if (ls - lp >= lq && memcmp(s + ls - lq, posts[i], lq) == 0) {
            memmove(s, s + lp, ls - lp - lq);
            s[ls - lp - lq] = '\0';
            return true;
        }
    }
    return false;
}

/* Find a role-test pattern in both quote styles and both access styles. */
static const char *find_role_test(const char *j, size_t len, const char *op)
{
    static const char *const forms[] = {
        "messages[0]['role'] %s 'system'", "messages[0][\"role\"] %s \"system\"",
        "messages[0].role %s 'system'", "messages[0].role %s \"system\"",
        "messages[0]['role'] %s \"system\"", "messages[0][\"role\"] %s 'system'",
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(forms); i++) {
        char pat[64];
        snprintf(pat, sizeof pat, forms[i], op);
        const char *p = find_in(j, len, pat);
        if (p) return p + strlen(pat);
    }
    return NULL;
}

int bt_chat_default_system(const char *jinja, size_t len, char **out)
{
    *out = NULL;
    if (!jinja) return bt_error(BT_ENOTFOUND, "chat template: none given");
    const char *end = jinja + len, *body = NULL, *limit = end;

    const char *p = find_role_test(jinja, len, "!=");
    if (p) {
        /* {% if ... != 'system' %}{{ 'default' }}{% endif %} */
        body = p;
        const char *e = find_in(p, (size_t)(end - p), "endif");
        if (e) limit = e;
    } else if ((p = find_role_test(jinja, len, "=="))) {
        /* {% if ... == 'system' %}...{% else %}{{ 'default' }}{% endif %};
         * the first else/endif after the test belongs to it unless a nested
         * if opens first, which these templates do not do. */
        const char *els = find_in(p, (size_t)(end - p), "else");
        const char *e = find_in(p, (size_t)(end - p), "endif");
        const char *nested = find_in(p, (size_t)(end - p), "{%- if");
        const char *nested2 = find_in(p, (size_t)(end - p), "{% if");
        if (!nested || (nested2 && nested2 < nested)) nested = nested2;
        if (els && (!e || els < e) && (!nested || els < nested)) {
            body = els + 4;
            const char *e2 = find_in(body, (size_t)(end - body), "endif");
            if (e2) limit = e2;
        }
    }
    if (!body) return bt_error(BT_ENOTFOUND, "chat template has no default system prompt");

    bt_sbuf b = {0};
    if (!read_print(body, limit, &b)) {
        bool oom = b.oom;
        free(b.p);
        return oom ? bt_error(BT_ENOMEM, "out of memory reading the chat template")
                   : bt_error(BT_ENOTFOUND, "chat template has no default system prompt literal");
    }

    /* `{{ '' }}` prints nothing: the template adds no default turn. */
    if (!b.p || !b.p[0]) {
        free(b.p);
        return bt_error(BT_ENOTFOUND, "chat template's default system prompt is empty");
    }
    static const char *const chatml_end[] = { "<|im_end|>\n", "<|im_end|>" };
    static const char *const llama3_end[] = { "<|eot_id|>" };
    static const char *const zephyr_end[] = { "</s>\n", "</s>", "\n", "" };
    bool ok = strip_wrapper(b.p, "<|im_start|>system\n", chatml_end, 2) ||
              strip_wrapper(b.p, "<|start_header_id|>system<|end_header_id|>\n\n", llama3_end, 1) ||
              strip_wrapper(b.p, "<|system|>\n", zephyr_end, 4);
    /* A bare literal is the prompt itself, unless it carries template
     * markers we do not know how to remove. */
    if (!ok && (strstr(b.p, "<|") || strstr(b.p, "[INST]") || strstr(b.p, "<<SYS>>"))) {
        free(b.p);
        return bt_error(BT_ENOTFOUND, "chat template: default system turn has an unknown wrapper");
    }
    *out = b.p;
    return BT_OK;
}
