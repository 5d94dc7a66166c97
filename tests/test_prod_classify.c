/* test_prod_classify.c - the answer classes of src/prod/classify.c: one
 * answer per class, the order between classes, and answers that look odd
 * but are ok (a "!!!" mid-story, a line of "====" once). */
#include "check.h"
#include "prod/classify.h"

#include <string.h>

static int cls(const char *text, const char *finish, const int32_t *ids, int n_ids, const bt_expect *ex)
{
    static char *stop[] = { "\nUser:" };
    bt_answer a = { .http_status = 200, .text = text, .text_len = text ? strlen(text) : 0, .ids = ids, .n_ids = n_ids,
                    .n_vocab = 512, .finish_reason = finish, .stop = stop, .n_stop = 1 };
    char why[200];
    int c = bt_answer_classify(&a, ex, why, sizeof why);
    printf("%-16s %s\n", bt_answer_class_name(c), why);
    return c;
}

int main(void)
{
    const char *story = "Once upon a time, there was a little girl named Lily. She liked to play outside.";
    CHECK(cls(story, "stop", NULL, 0, NULL) == BT_ANS_OK);
    bt_answer err = { .http_status = 503 };
    CHECK(bt_answer_classify(&err, NULL, NULL, 0) == BT_ANS_HTTP_ERROR);
    err.http_status = 0;
    CHECK(bt_answer_classify(&err, NULL, NULL, 0) == BT_ANS_HTTP_ERROR, "timeout");
    CHECK(cls("", "stop", NULL, 0, NULL) == BT_ANS_EMPTY);
    CHECK(cls(" \n\t ", "length", NULL, 0, NULL) == BT_ANS_EMPTY);
    CHECK(cls("Once upon a time!!!!!!!!!!!!!!!!!!!!!!", "length", NULL, 0, NULL) == BT_ANS_TOKEN_WALL, "the !!!! signature");
    int32_t zeros[12] = { 0 };
    CHECK(cls("<unk><unk>", "length", zeros, 12, NULL) == BT_ANS_TOKEN_WALL, "token 0 wall by ids");
    CHECK(cls("Wow!!! That was fun. The end of the story came and everyone went home happy.", "stop", NULL, 0, NULL) == BT_ANS_OK,
          "a short run mid-text is ok");
    CHECK(cls("Title\n========\nOnce upon a time there was a dog who liked to run in the park with his friends.", "stop", NULL, 0, NULL) == BT_ANS_OK,
          "a rule line mid-text is ok");
    int32_t oov[3] = { 5, 7, 512 };
    CHECK(cls("ab", "length", oov, 3, NULL) == BT_ANS_INVALID_TOKEN);
    CHECK(cls("ab", "invalid_token", NULL, 0, NULL) == BT_ANS_INVALID_TOKEN);
    CHECK(cls("ab\xff", "stop", NULL, 0, NULL) == BT_ANS_INVALID_TOKEN, "invalid UTF-8");
    CHECK(cls("Lily went to the park. the cat sat. the cat sat. the cat sat. the cat sat. the cat", "length", NULL, 0, NULL) == BT_ANS_LOOP);
    int32_t loop[14] = { 1, 2, 3, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9 };
    CHECK(cls("x y z w", "length", loop, 14, NULL) == BT_ANS_LOOP, "loop by ids");
    CHECK(cls("Hello there.\nUser: and then", "length", NULL, 0, NULL) == BT_ANS_PAST_STOP);
    CHECK(cls("Once upon a time there was a big dog named Max. Max liked to run. He ran to the tree, the tree, the tree,", "length", NULL, 0, NULL) == BT_ANS_DEGENERATE_TAIL,
          "tail repeats twice, cut at max_tokens");
    CHECK(cls("Once upon a time there was a big dog named Max. Max liked to run. He ran to the tree, the tree, the tree,", "stop", NULL, 0, NULL) == BT_ANS_OK,
          "the same text, stopped naturally");
    CHECK(cls("Once upon a time there was a cat. ..-.-..-.-..-.-..-.-..-.-..-.-..-.-..-.-..-.-..-.-..-.-..-.", "length", NULL, 0, NULL) != BT_ANS_OK);
    bt_expect *ex = NULL;
    CHECK_OK(bt_expect_new("\\bParis\\b", &ex));
    CHECK(cls("The capital of France is Paris.", "stop", NULL, 0, ex) == BT_ANS_OK);
    CHECK(cls("The capital of France is Lyon.", "stop", NULL, 0, ex) == BT_ANS_EXPECT_FAILED);
    CHECK(cls("!!!!!!!!!!!!!!!!", "length", NULL, 0, ex) == BT_ANS_TOKEN_WALL, "degeneracy wins over the expectation");
    /* the server's own detectors saw non-finite values: a normal-looking
     * answer (SmolLM2's id 0 is <|endoftext|>: all-NaN logits just stop it) */
    bt_answer nf = { .http_status = 200, .text = "The capital of France is", .text_len = 24, .finish_reason = "stop",
                     .n_nonfinite = 2, .nonfinite_detail = "nonfinite_logits at step 5: ..." };
    char why[300];
    CHECK(bt_answer_classify(&nf, NULL, why, sizeof why) == BT_ANS_NONFINITE, "non-finite events fail the answer without --expect");
    CHECK(strstr(why, "nonfinite_logits at step 5") != NULL, "the reason quotes the event");
    CHECK(bt_answer_classify(&nf, ex, NULL, 0) == BT_ANS_NONFINITE, "non-finite wins over the expectation");
    nf.n_nonfinite = 0;
    CHECK(bt_answer_classify(&nf, NULL, NULL, 0) == BT_ANS_OK, "without events the same answer is ok");
    nf.n_nonfinite = 1; nf.text = "!!!!!!!!!!!!!!!!"; nf.text_len = 16; nf.finish_reason = "length";
    CHECK(bt_answer_classify(&nf, NULL, NULL, 0) == BT_ANS_TOKEN_WALL, "a visible symptom keeps its class");
    CHECK(bt_event_is_nonfinite("nonfinite_logits") && bt_event_is_nonfinite("first_nonfinite") &&
          bt_event_is_nonfinite("argmax_fallthrough") && !bt_event_is_nonfinite("token_wall") && !bt_event_is_nonfinite(NULL));
    CHECK(!strcmp(bt_answer_class_name(BT_ANS_NONFINITE), "nonfinite"));
    bt_expect_free(ex);
    bt_expect *bad = NULL;
    CHECK(bt_expect_new("(unclosed", &bad) == BT_EINVAL && !bad);
    CHECK(strstr(bt_errmsg(), "--expect") != NULL);
    for (int c = 0; c < BT_ANS_COUNT; c++) CHECK(bt_answer_class_from_name(bt_answer_class_name(c)) == c);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
