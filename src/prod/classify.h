/* classify.h - what kind of answer did a server give? One pure function
 * over an answer (HTTP status, text, ids when known, finish reason) that
 * probe, canary and ctxwalk share, so they count failures the same way.
 *
 * Classes, checked in this order (the first that applies wins):
 *   http_error      no answer: transport error, timeout, HTTP status != 200,
 *                   or a body that is not a completion
 *   invalid_token   an id outside the vocabulary (finish_reason
 *                   "invalid_token", an id < 0 or >= n_vocab), or text
 *                   that is not valid UTF-8
 *   empty           nothing but whitespace was generated
 *   token_wall      the `!!!!` / token-0 signature: the same token
 *                   BT_DETECT_WALL_MIN (8) times in a row; from text alone,
 *                   one character repeated 8+ times that reaches the end
 *                   of the text or makes up half of it
 *   repetition_loop a period of 2..BT_DETECT_LOOP_MAX_PERIOD tokens repeated
 *                   BT_DETECT_LOOP_MIN_REPEATS (4) times in a row; from
 *                   text alone, the tail repeats with a period of 2..256
 *                   bytes at least 4 times
 *   past_stop       the text contains a stop string: the server did not stop
 *   degenerate_tail cut at max_tokens (finish_reason "length") with a
 *                   degenerate tail: the last 64 bytes hold at most 3
 *                   distinct bytes, or the tail repeats with a period of
 *                   8..256 bytes at least twice
 *   nonfinite       the server's own detectors (bangtrace serve's answer
 *                   object, or the native engine) saw non-finite values
 *                   (nonfinite_logits, first_nonfinite, argmax_fallthrough)
 *                   though the text looks normal: on a model whose id 0 is
 *                   end-of-text, all-NaN logits end the answer early with
 *                   finish_reason "stop"
 *   expect_failed   --expect REGEX did not match
 *   ok
 */
#ifndef BT_PROD_CLASSIFY_H
#define BT_PROD_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bt_answer_class {
    BT_ANS_OK = 0,
    BT_ANS_HTTP_ERROR,
    BT_ANS_INVALID_TOKEN,
    BT_ANS_EMPTY,
    BT_ANS_TOKEN_WALL,
    BT_ANS_LOOP,
    BT_ANS_PAST_STOP,
    BT_ANS_DEGENERATE_TAIL,
    BT_ANS_NONFINITE,
    BT_ANS_EXPECT_FAILED,
    BT_ANS_COUNT
};

typedef struct bt_answer {
    int http_status;            /* 200 for an answer; 0: transport error / timeout */
    const char *text;           /* generated text (may be NULL = "") */
    size_t text_len;
    const int32_t *ids;         /* generated ids, when the engine tells (may be NULL) */
    int n_ids;
    int n_vocab;                /* 0: unknown */
    const char *finish_reason;  /* "stop", "length", "invalid_token", ... (may be NULL) */
    char *const *stop;          /* the request's stop strings */
    int n_stop;
    int n_nonfinite;            /* non-finite events the server's detectors reported (0: none or unknown) */
    const char *nonfinite_detail; /* the first one's "kind: detail" (may be NULL) */
} bt_answer;

/* An event kind that says a non-finite value was computed. */
bool bt_event_is_nonfinite(const char *kind);

typedef struct bt_expect bt_expect;    /* a compiled --expect REGEX */
/* Compile REGEX (PCRE2, UTF). BT_EINVAL naming the flag and the offset. */
int bt_expect_new(const char *regex, bt_expect **out);
void bt_expect_free(bt_expect *e);
bool bt_expect_match(const bt_expect *e, const char *text, size_t len);

/* Classify one answer (expect may be NULL); *why (may be NULL) gets a
 * short static-or-buffer reason sentence, written into why[cap]. */
int bt_answer_classify(const bt_answer *a, const bt_expect *expect, char *why, size_t cap);
const char *bt_answer_class_name(int cls);       /* "token_wall", ... */
int bt_answer_class_from_name(const char *name); /* -1 if unknown */

#endif
