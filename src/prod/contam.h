/* contam.h - the black-box cross-request contamination probe (`probe
 * --contamination`): the plan of requests it sends, the request bodies, and
 * the verdict over the answers. Pure functions over text and counts (no
 * I/O); sending the plan is src/prod/contam_run.c.
 *
 * The plan. BT_CONTAM_CONTROLS control prompts, each a long prefix of its
 * own (a paragraph, ~70 tokens: enough for block-wise prefix caches) and a
 * question carrying the control's marker; nonce requests, each carrying a
 * nonce of its own (four consonants, a dash, four digits: "QZKW-4821",
 * unique in the plan), either sharing a control's prefix or sharing
 * nothing with any control. Every request is greedy.
 *   warm-up   each control BT_CONTAM_WARMUP times in a row, first of all:
 *             the modal answer is the control's reference answer (ties:
 *             the first)
 *   blocks    n blocks, each one unit of every arm in a shuffled order:
 *     repeat        the control twice in a row, the second measured
 *                   (the baseline: nothing else ran before it)
 *     after_other   a non-sharing nonce request, then the control
 *     after_shared  a nonce request sharing the control's prefix, then the
 *                   control
 *     resent        a fresh prompt (its own nonce first, then a paragraph
 *                   drawn for it: no cache holds any of it), then the same
 *                   prompt again, measured against the first answer
 *     beside_L      the control and L-1 non-sharing nonce requests sent at
 *                   once, for each concurrency level L (2, 4, ... up to C)
 *   The control of arm a in block b is (a + b) mod BT_CONTAM_CONTROLS.
 *
 * The verdict. A measured answer deviates when it is not exactly the
 * control's reference (an http_error deviates too).
 *   nonce_leak             an answer holds a nonce or marker that is not in
 *                          its own prompt (one is enough: a random code
 *                          is not guessed)
 *   order_dependence       after_other deviates more than repeat
 *   prefix_dependence      after_shared deviates more than after_other
 *   cache_dependence       resent deviates from its first answer more than
 *                          repeat from the first of its pair (unless
 *                          order_dependence is found: a first answer
 *                          that ran after another prompt explains it)
 *   history_dependence     two or more repeat answers deviate (not an http
 *                          error, no leaked token): the same request, right
 *                          after itself, answered otherwise; a server that
 *                          answers from the prompt alone never does (unless
 *                          drift, cache_dependence or nonce_leak is found,
 *                          which explains them)
 *   concurrency_dependence some beside_L deviates more than after_other
 *   drift                  the measured answers of the last third of the
 *                          blocks deviate more than those of the first
 *                          third (every third holds the same arms)
 * Each comparison is Fisher's exact test (two-sided) at BT_STATS_ALPHA
 * divided by the number of comparisons (Bonferroni), and is called only
 * with at least BT_STATS_MIN_PER_ARM answers on each side (the replicate
 * rule of probe --compare). Outcome: contaminated when any class is
 * found; clean when every comparison was called, none saw its suspect
 * side deviate more often than its baseline (a difference too small to
 * call is not an absence), the leak rate's Wilson upper bound is under
 * max_fail and no reference answer is a token wall,
 * empty, an invalid token or non-finite (an engine that fails alone, such
 * as one that has drifted already, is compared against its own failure:
 * that is not clean); inconclusive otherwise. */
#ifndef BT_PROD_CONTAM_H
#define BT_PROD_CONTAM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "prod/classify.h"

#define BT_CONTAM_CONTROLS 4
#define BT_CONTAM_WARMUP 3
#define BT_CONTAM_MAX_LEVELS 8
#define BT_CONTAM_MAX_ARMS (4 + BT_CONTAM_MAX_LEVELS)
#define BT_CONTAM_TOKEN 10          /* "QZKW-4821" and its NUL */
#define BT_CONTAM_MAX_TOKENS 16     /* max_tokens when the template names none */

enum { BT_CONTAM_ARM_REPEAT, BT_CONTAM_ARM_AFTER_OTHER, BT_CONTAM_ARM_AFTER_SHARED, BT_CONTAM_ARM_RESENT, BT_CONTAM_ARM_BESIDE };
#define BT_CONTAM_ARM_WARMUP (-1)   /* a warm-up answer */
#define BT_CONTAM_ARM_NONE (-2)     /* not measured (a preceding or neighbouring request) */
#define BT_CONTAM_ARM_FRESH (-3)    /* a fresh prompt's first answer: its resent's reference */

/* FRESH: a prompt no other request shares a prefix with (it starts with
 * its own nonce), sent twice in a row (the resent arm) */
enum bt_contam_role { BT_CONTAM_CONTROL, BT_CONTAM_NONCE_SHARED, BT_CONTAM_NONCE_OTHER, BT_CONTAM_FRESH };

enum bt_contam_class {
    BT_CONTAM_LEAK, BT_CONTAM_ORDER, BT_CONTAM_PREFIX, BT_CONTAM_CACHE, BT_CONTAM_HISTORY, BT_CONTAM_CONCURRENCY,
    BT_CONTAM_DRIFT, BT_CONTAM_NCLASS
};

typedef struct bt_contam_req {
    int role;
    int control;                    /* the control (for NONCE_SHARED: whose prefix); -1 for NONCE_OTHER */
    int arm;                        /* the arm it measures, or BT_CONTAM_ARM_WARMUP / _NONE / _FRESH */
    long unit, block;               /* block -1: the warm-up */
    char token[BT_CONTAM_TOKEN];    /* its nonce, or its control's marker */
    char *prompt;
} bt_contam_req;

typedef struct bt_contam_unit {
    long first;                     /* its requests are reqs[first .. first + count) */
    int count;
    bool parallel;                  /* sent at once (beside_L), else one after another */
    int arm;
    long block;
} bt_contam_unit;

typedef struct bt_contam_plan {
    int n_levels, levels[BT_CONTAM_MAX_LEVELS];
    int n_arms;                     /* 4 + n_levels */
    long n_blocks;
    unsigned long long seed;
    bt_contam_req *reqs;
    long n_reqs;
    bt_contam_unit *units;
    long n_units;
} bt_contam_plan;

/* The plan for n_blocks blocks (>= 1) and concurrency levels 2, 4, 8, ...
 * up to max_conc, max_conc itself included (max_conc >= 2); the seed
 * draws the nonces, the markers and each block's order. */
int bt_contam_plan_new(long n_blocks, int max_conc, unsigned long long seed, bt_contam_plan *out);
void bt_contam_plan_clear(bt_contam_plan *p);
/* "repeat", "after_other", "after_shared", "beside_4"; "warmup". */
const char *bt_contam_arm_name(const bt_contam_plan *p, int arm, char *buf, size_t cap);

/* The body of one request: the template (a request JSON giving the shape;
 * NULL: a completion) with our prompt: "prompt" replaced, or for a chat
 * template ("messages") its leading system messages kept and one user
 * message with the prompt; "temperature" 0 (greedy), "stream", "n" and
 * "best_of" dropped, "max_tokens" 16 unless the template sets max_tokens
 * or max_completion_tokens. BT_EINVAL when the template is not a JSON
 * object or "messages" is not an array. */
int bt_contam_body(const char *tmpl, size_t tmpl_len, const char *prompt, char **out, size_t *out_len);

/* What one request got (index = the request's in the plan). */
typedef struct bt_contam_answer {
    bool sent;
    bool answered;                  /* HTTP 200 with a completion */
    int cls;                        /* its bt_answer class */
    char *text;                     /* the answer text (owned by whoever filled it) */
    size_t text_len;
    long order;                     /* the order in which it was sent, from 0 */
    double t0, t1;                  /* sent, answered (seconds) */
    char error[160];                /* http_error: why */
} bt_contam_answer;

typedef struct bt_contam_counts {
    long n, dev;                    /* measured answers, of them deviating */
    long classes[BT_ANS_COUNT];     /* the measured answers' classes */
    double lo, hi;                  /* Wilson 95% of dev / n */
    long dev_ok;                    /* differing answers still of class ok (fluent: a changed greedy path) */
    long div_median;                /* differing answers: median bytes in common with the reference before
                                     * they depart (-1: none answered); a changed path departs late, a
                                     * foreign or broken answer early */
} bt_contam_counts;

typedef struct bt_contam_test {
    int cls;                        /* the class it would find */
    int arm, base;                  /* compared arms; drift: -1, -1 (late vs early); base
                                     * BT_CONTAM_ARM_NONE: the repeat pairs */
    long fa, na, fb, nb;            /* deviations / answers: the suspect side, the baseline */
    double p, alpha;
    bool called;                    /* at least BT_STATS_MIN_PER_ARM on each side */
    bool worse;                     /* the suspect side deviates more often than the baseline */
    bool found;                     /* called, worse, p < alpha, and not explained */
    int explained;                  /* significant, but the class named here explains it (-1: none) */
    long needed;                    /* per side for p < alpha at these rates (-1: none would) */
} bt_contam_test;

typedef struct bt_contam_leak {
    long req, src;                  /* the answer's request, the request whose prompt held the token */
    long lag;                       /* order(req) - order(src) */
    bool beside;                    /* the two were in flight together */
    char token[BT_CONTAM_TOKEN];
} bt_contam_leak;

typedef struct bt_contam_verdict {
    long sent, answered;
    long leaks;                     /* answers holding a foreign token */
    double leak_lo, leak_hi;        /* Wilson 95% of leaks / answered */
    long leak_first;                /* requests sent up to and including the first leaking answer (-1: none) */
    long leak_needed;               /* answers that would bound the leak rate under max_fail (-1: none would) */
    int ref_failed;                 /* controls whose reference answer fails alone (see below) */
    int ref_class;                  /* the first one's class */
    int unresolved;                 /* comparisons whose suspect side deviates more, not found */
    /* answers outside the warm-up that differ from a fine reference and are
     * degenerate (token wall, empty, invalid token, non-finite): a server
     * corrupting answers whatever ran before (a poisoned shared cache block,
     * a state never reset, a bad kernel) is never clean, even when every arm
     * fails alike and no comparison can attribute it */
    long degen, degen_of;
    int degen_class;                /* the commonest of their classes */
    bt_contam_leak ex[4];
    int n_ex;
    bt_contam_counts warm;          /* the warm-up answers against the reference */
    bt_contam_counts arms[BT_CONTAM_MAX_ARMS];
    bt_contam_counts early, late;   /* the first and last third of the blocks */
    bt_contam_counts pair;          /* each repeat against the first of its pair */
    bt_contam_test tests[4 + BT_CONTAM_MAX_LEVELS];
    /* history: repeat answers (not http errors) that differ from their
     * reference without holding a leaked token; a server whose greedy
     * answer depends on the prompt alone has none */
    long hist_dev, hist_n;
    double hist_lo, hist_hi;
    bool hist_called;               /* hist_n >= BT_STATS_MIN_PER_ARM */
    int hist_explained;             /* drift, cache_dependence or nonce_leak explains them (-1: none) */
    int n_tests;
    bool found[BT_CONTAM_NCLASS];
    double max_fail;
    int outcome;                    /* 0 clean, 1 contaminated, 2 inconclusive */
} bt_contam_verdict;

/* The verdict over ans[0 .. p->n_reqs). BT_EINVAL when a control has no
 * answered warm-up request (no reference). */
int bt_contam_analyze(const bt_contam_plan *p, const bt_contam_answer *ans, double max_fail, bt_contam_verdict *v);
/* The report, and the same as one JSON object. */
void bt_contam_print(FILE *f, const char *target, const bt_contam_plan *p, const bt_contam_answer *ans,
                     const bt_contam_verdict *v);
json_t *bt_contam_json(const char *target, const bt_contam_plan *p, const bt_contam_answer *ans,
                       const bt_contam_verdict *v);

#endif
