/* detect.h - token-level detectors over the generated sequence.
 *
 * Fed one generated id at a time; each call reports at most a few findings
 * (a detector fires once per episode: a token wall is reported when it
 * reaches the threshold, not again for every further repeat). */
#ifndef BT_DETECT_H
#define BT_DETECT_H

#include <stdint.h>
#include <stdbool.h>
#include "tokenizer/tokenizer.h"

/* Detector thresholds, read by everyone who judges a token sequence (the
 * live detectors here, analyze.c over a trace, the browser's colouring). */
#define BT_DETECT_WALL_MIN 8          /* same token this many times in a row: a token wall */
#define BT_DETECT_LOOP_MAX_PERIOD 16  /* longest repetition-loop period (shortest: 2) */
#define BT_DETECT_LOOP_MIN_REPEATS 4  /* periods in a row that make a loop */
/* Speculative decoding's accept_collapse detector (src/gen/decode.c): the mean
 * acceptance rate over BT_SPEC_WINDOW verify steps fell below
 * BT_ACCEPT_COLLAPSE_LOW after having been at least BT_ACCEPT_COLLAPSE_HIGH.
 * analyze.c reports acceptance over the same windows. */
#define BT_SPEC_WINDOW 8
#define BT_ACCEPT_COLLAPSE_HIGH 0.6
#define BT_ACCEPT_COLLAPSE_LOW 0.25

enum bt_finding_kind {
    BT_FIND_TOKEN_WALL = 1,      /* the same token N >= 8 times in a row */
    BT_FIND_REPETITION_LOOP,     /* a period <= 16 (>= 2) repeated >= 4 times */
    BT_FIND_SPECIAL_LEAK,        /* BOS or another control token emitted mid-text */
    BT_FIND_OOV_TOKEN,           /* an id >= n_vocab (or < 0) */
};

typedef struct bt_finding {
    int kind;
    int step;                    /* step that produced the token */
    int pos;
    int32_t token;
    int start_step;              /* where the wall/loop began */
    int period;                  /* repetition_loop */
    int count;                   /* repeats so far */
    char detail[256];            /* one sentence */
} bt_finding;

typedef struct bt_detector bt_detector;
/* is_control(id) says whether an id is a control token (may be NULL). */
bt_detector *bt_detector_new(int n_vocab, bool (*is_control)(void *user, int32_t id), void *user);
void bt_detector_free(bt_detector *d);
/* Feed one generated token; writes up to max findings, returns how many. */
int bt_detector_feed(bt_detector *d, int step, int pos, int32_t id, bt_finding *out, int max);
const char *bt_finding_name(int kind);   /* "token_wall", ... */
/* Optional (may be NULL; borrowed): quote pieces in detail sentences
 * ("token 0 ('!') repeated 8 times from step 9"), and when is_control is
 * NULL, count BOS and the tokenizer's control tokens, except end-of-generation
 * ids (which end a run rather than leak into it), as control tokens. */
void bt_detector_set_tokenizer(bt_detector *d, const bt_tokenizer *t);

#endif
