/* fuzz_request.c - OpenAI request bodies (bt_request_parse) and chat
 * templates (detection, default system prompt extraction, rendering).
 * Input: a JSON body, optionally followed by a NUL byte and a Jinja chat
 * template; with no template part the body is also tried as a template. */
#include "fuzz.h"
#include "gen/request.h"
#include "gen/chat.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { bt_log_level = 0; return 0; }

static void render_all(const bt_message *msgs, int n, const char *sys)
{
    for (int tmpl = BT_CHAT_NONE; tmpl <= BT_CHAT_LAST + 1; tmpl++) {
        for (int v = 0; v < 4; v++) {
            bt_chat_opts o = { .bos_text = v & 1 ? "" : NULL, .eos_text = v & 2 ? "<|eot|>" : NULL,
                               .default_system = sys, .no_generation_prompt = v == 3 };
            char *out = (char *)"untouched";
            int rc = bt_chat_render_opts(tmpl, msgs, n, &o, &out);
            if (rc == BT_OK) FUZZ_CHECK(out != NULL);
            else FUZZ_CHECK(out == NULL && bt_errmsg()[0]);
            free(rc == BT_OK ? out : NULL);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    const char *tmpl = nul ? (const char *)nul + 1 : (const char *)data;
    size_t tlen = nul ? size - jlen - 1 : size;

    /* the template: detection and the default system prompt */
    char *sys = NULL;
    int t = bt_chat_tmpl_detect(tmpl, tlen);
    FUZZ_CHECK(t >= BT_CHAT_NONE && t <= BT_CHAT_LAST && bt_chat_tmpl_name(t));
    if (bt_chat_default_system(tmpl, tlen, &sys) == BT_OK) FUZZ_CHECK(sys != NULL);
    else FUZZ_CHECK(sys == NULL);

    bt_request r = { 0 };
    if (bt_request_parse((const char *)data, jlen, "fuzz.json", &r) == BT_OK) {
        FUZZ_CHECK(r.json != NULL && (r.n_messages == 0 || r.messages));
        for (int i = 0; i < r.n_stop; i++) FUZZ_CHECK(r.stop[i] != NULL);
        render_all(r.messages, r.n_messages, sys);
        render_all(r.messages, r.n_messages, NULL);
        bt_request_clear(&r);
    } else {
        FUZZ_CHECK(bt_errmsg()[0]);
    }
    free(sys);
    return 0;
}
