/* fuzz_reply.c - what a (hostile) server answers probe, canary and ctxwalk:
 * the response header lines and body as bt_target_ask reads them
 * (bt_reply_header, bt_reply_parse), then the answer classifier they share
 * (bt_answer_classify) with stop strings and an --expect regex.
 *
 * Input: one byte for the HTTP status (0..191: 200; else 300 + the byte's
 * low bits), then header lines up to the first NUL (each passed as curl
 * passes it: its bytes with the line end, not NUL-terminated), then the
 * body; without a NUL the whole rest is the body. Invariants: a class in
 * range with a name; anything but HTTP 200 with a completion is an
 * http_error; the text is NUL-terminated at its length; the request id and
 * the reason sentence are strings within their buffers. */
#include "fuzz.h"
#include "prod/classify.h"
#include "prod/target.h"
#include "base/util.h"

static bt_expect *expect;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    bt_log_level = 0;
    if (bt_expect_new("Paris|\\bfour\\b|(?i)answer: *[0-9]+", &expect) != BT_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    bt_reply r;
    memset(&r, 0, sizeof r);
    r.http_status = data[0] < 192 ? 200 : 300 + (data[0] & 0x3f) * 4;
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
    if (nul) {
        while (p < nul) {
            const uint8_t *nl = memchr(p, '\n', (size_t)(nul - p));
            size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(nul - p);
            char *line = malloc(n ? n : 1);   /* exactly n bytes: a read past them is ASan's */
            if (!line) abort();
            memcpy(line, p, n);
            bt_reply_header(&r, line, n);
            free(line);
            p += n;
        }
        p = nul + 1;
    }
    size_t blen = (size_t)(end - p);
    char *body = malloc(blen ? blen : 1);     /* not NUL-terminated either (json_loadb takes a length) */
    if (!body) abort();
    memcpy(body, p, blen);
    bt_reply_parse(&r, body, blen);
    free(body);

    FUZZ_CHECK(memchr(r.request_id, 0, sizeof r.request_id));
    FUZZ_CHECK(memchr(r.finish, 0, sizeof r.finish));
    FUZZ_CHECK(memchr(r.error, 0, sizeof r.error));
    if (r.text) FUZZ_CHECK(r.text[r.text_len] == 0);
    FUZZ_CHECK(r.n_ids >= 0 && (r.n_ids == 0 || r.ids));

    static char *const stop[] = { "\nUser:", "</s>" };
    bt_answer a = bt_reply_answer(&r, stop, 2);
    char why[128];
    for (int e = 0; e < 2; e++) {
        memset(why, 'x', sizeof why);
        int cls = bt_answer_classify(&a, e ? expect : NULL, why, sizeof why);
        FUZZ_CHECK(cls >= 0 && cls < BT_ANS_COUNT);
        FUZZ_CHECK(bt_answer_class_name(cls) && bt_answer_class_from_name(bt_answer_class_name(cls)) == cls);
        FUZZ_CHECK(memchr(why, 0, sizeof why));
        if (r.http_status != 200 || !r.text) FUZZ_CHECK(cls == BT_ANS_HTTP_ERROR);
        if (cls == BT_ANS_OK && e) FUZZ_CHECK(bt_expect_match(expect, r.text, r.text_len));
    }
    bt_reply_clear(&r);
    return 0;
}
