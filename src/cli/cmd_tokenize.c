/* cmd_tokenize.c - `bangtrace tokenize`: text -> ids (or ids -> text) with a
 * model's own tokenizer.
 *
 * Defaults match llama.cpp's tokenizer test vectors (no BOS/EOS, special-token
 * text is plain text), so `tokenize --file case.txt` can be diffed against
 * a .out line. Ids print space-separated on one line; --decode prints the
 * decoded bytes followed by one newline. */
#include "cmd.h"
#include "args.h"
#include "model/model.h"
#include "gen/request.h"
#include "tokenizer/tokenizer.h"
#include "base/text.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cmd_tokenize_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace tokenize --model M [--tokenizer T] [--add-special]\n"
        "                          [--parse-special] (TEXT | --file F)\n"
        "       bangtrace tokenize --model M [--tokenizer T] --decode \"ID ID ...\"\n"
        "       bangtrace tokenize --model M [--tokenizer T] --chat FILE.json\n"
        "                          [--chat-template NAME|FILE.jinja] [--render]\n\n"
        "Print the token ids of TEXT (or of the bytes of file F) on one line,\n"
        "space-separated, using the model's own tokenizer (SentencePiece, byte-level\n"
        "BPE with the pre-tokenizer named by tokenizer.ggml.pre or given by a\n"
        "tokenizer.json, a tokenizer.json BPE with byte fallback, or llama2.c).\n\n"
        "  --model M          GGUF model (vocab-only GGUFs work), Hugging Face model folder\n"
        "                     (tokenizer.json, else tokenizer.model; a folder of tokenizer\n"
        "                     files only works),\n"
        "                     or llama2.c checkpoint\n"
        "  --tokenizer T      llama2.c tokenizer.bin (needed with a llama2.c checkpoint)\n"
        "  --add-special      add BOS/EOS as the vocabulary asks (default: none)\n"
        "  --parse-special    map control-token text such as <|im_start|> to its id\n"
        "                     (default: such text is tokenized as plain text)\n"
        "  --file F           tokenize the exact bytes of F instead of TEXT\n"
        "  --decode IDS       print the text of whitespace- or comma-separated ids\n"
        "  --chat FILE.json   a /v1/chat/completions body: print the ids run would feed for\n"
        "                     its messages (rendered with the chat template, BOS added as\n"
        "                     the vocabulary asks; chat_template_kwargs.enable_thinking\n"
        "                     goes to qwen3)\n"
        "  --chat-template T  render with template T: a name (chatml, qwen2, qwen3, llama2,\n"
        "                     llama3, llama3.1, mistral, mistral-v0, zephyr, harmony) or a\n"
        "                     .jinja file holding\n"
        "                     a template's text (default: the model's tokenizer.chat_template)\n"
        "  --render           with --chat, print the rendered prompt text instead of ids,\n"
        "                     BOS and EOS spelled as the template does (<s>, </s>,\n"
        "                     <|begin_of_text|>); needs no tokenizer\n\n"
        "Exit status: 0 ok, 2 error.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fputs("bangtrace: tokenize: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see bangtrace help tokenize)\n", stderr);
    return 2;
}

/* Parse "1 2 3" / "1,2,3" into a malloc'd id array. */
static int parse_ids(const char *s, int32_t **out, size_t *n)
{
    size_t cap = 0, k = 0;
    int32_t *ids = NULL;
    for (const char *p = s;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && !isspace((unsigned char)*end) && *end != ',')) {
            free(ids);
            return bt_error(BT_EINVAL, "--decode: '%.*s' is not a token id",
                            (int)strcspn(p, " \t\n,"), p);
        }
        if (BT_VEC_PUSH(ids, k, cap, (int32_t)v)) { free(ids); return BT_ENOMEM; }
        p = end;
    }
    *out = ids;
    *n = k;
    return BT_OK;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *file = NULL, *decode = NULL, *text = NULL, *chat = NULL, *tmpl = NULL;
    bool add_special = false, parse_special = false, flags_done = false, render = false;
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_TOKENIZER };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!flags_done && a[0] == '-' && a[1]) {
            bool taken;
            if (bt_args_take(&g, argc, argv, &i, &taken)) return usage_error("%s", bt_errmsg());
            if (taken) continue;
            const char **dst = !strcmp(a, "--file") || !strcmp(a, "-f") ? &file
                             : !strcmp(a, "--decode") ? &decode
                             : !strcmp(a, "--chat") ? &chat
                             : !strcmp(a, "--chat-template") ? &tmpl : NULL;
            if (dst) {
                if (i + 1 >= argc) return usage_error("%s needs a value", a);
                *dst = argv[++i];
            } else if (!strcmp(a, "--add-special")) add_special = true;
            else if (!strcmp(a, "--parse-special")) parse_special = true;
            else if (!strcmp(a, "--render")) render = true;
            else if (!strcmp(a, "--")) flags_done = true;
            else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_tokenize_help(stdout); return 0; }
            else return usage_error("unknown flag '%s'", a);
        } else if (!text) {
            text = a;
        } else {
            return usage_error("unexpected argument '%s': quote the text as one argument", a);
        }
    }
    const char *model = g.model, *tok = g.tokenizer;
    if (!model) return usage_error("%s", "--model is required");
    int inputs = (text != NULL) + (file != NULL) + (decode != NULL) + (chat != NULL);
    if (inputs == 0) return usage_error("%s", "give TEXT, --file F, --decode IDS or --chat FILE.json");
    if (inputs > 1) return usage_error("%s", "give only one of TEXT, --file F, --decode IDS, --chat FILE.json");
    if ((tmpl || render) && !chat) return usage_error("%s", "--chat-template and --render go with --chat FILE.json");
    if (chat && (add_special || parse_special))
        return usage_error("%s", "--chat adds BOS as the vocabulary asks and maps control tokens itself");

    bt_model *m = NULL;
    bt_tokenizer *t = NULL;
    char *buf = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int status = 2;
    bt_request req = {0};
    if (bt_model_load(model, tok, &m)) goto fail;
    if (chat) {
        size_t len;
        if (bt_read_file(chat, &buf, &len) || bt_request_parse(buf, len, chat, &req)) goto fail;
        if (!req.messages) { bt_error(BT_EINVAL, "%s: --chat needs a \"messages\" body (/v1/chat/completions)", chat); goto fail; }
    }
    if (chat && render) {
        char *out = NULL;
        if (bt_request_render(&req, tmpl, m, false, &out)) goto fail;
        bt_text_fput_output(out, strlen(out), stdout);
        free(out);
        goto flush;
    }
    if (!m->has_vocab) {
        bt_error(BT_ENOTFOUND, "%s: no tokenizer in this model%s", model,
                 !strcmp(m->format, "llama2c") ? " (pass --tokenizer tokenizer.bin)" : "");
        goto fail;
    }
    if (bt_tokenizer_new(&m->vocab, &t)) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", bt_errmsg());
        bt_error(BT_EUNSUPPORTED, "%s: %s", model, msg);
        goto fail;
    }

    if (chat) {
        if (bt_request_prompt_ids(&req, NULL, tmpl, m, t, &ids, &n_ids)) goto fail;
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
        fputc('\n', stdout);
    } else if (decode) {
        size_t len;
        if (parse_ids(decode, &ids, &n_ids) || bt_detokenize(t, ids, n_ids, &buf, &len)) goto fail;
        bt_text_fput_output(buf, len, stdout);
        fputc('\n', stdout);
    } else {
        size_t len;
        if (file) {
            if (bt_read_file(file, &buf, &len)) goto fail;
        } else {
            len = strlen(text);
        }
        if (bt_tokenize(t, file ? buf : text, len, add_special, parse_special, &ids, &n_ids)) goto fail;
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
        fputc('\n', stdout);
    }
flush:
    if (fflush(stdout) == 0) status = 0;
    else bt_error(BT_EIO, "writing to stdout: %s", strerror(errno));
    if (status) goto fail;
    goto done;
fail:
    status = bt_cmd_fail("tokenize");
done:
    bt_request_clear(&req);
    free(ids);
    free(buf);
    bt_tokenizer_free(t);
    bt_model_free(m);
    return status;
}
