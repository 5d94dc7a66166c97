/* sampler.h - greedy argmax under three non-finite rules, and temperature /
 * top-k / top-p sampling over the same row.
 *
 * The argmax rules reproduce real incidents (doc/argmax.md):
 *   first          sequential scan, a NaN never wins a comparison: an
 *                  all-NaN row gives 0;
 *   torch          NaN counts as the maximum: the first NaN index wins;
 *   triton-block:N block-wise argmax over blocks of N lanes, tail lanes padded
 *                  with -inf and NaN never winning: an all-NaN row gives
 *                  n_vocab, an out-of-range id (the first padded lane, or
 *                  the index reduction's sentinel when n_vocab is a multiple
 *                  of N and there is no padding). */
#ifndef BT_SAMPLER_H
#define BT_SAMPLER_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include "base/records.h"   /* bt_softmax_sums */

enum bt_argmax_kind { BT_ARGMAX_FIRST = 0, BT_ARGMAX_TORCH, BT_ARGMAX_TRITON };
typedef struct bt_argmax_rule { int kind; int block; } bt_argmax_rule;

/* Parse "first", "torch", "triton-block:N" (N a power of two, 1..65536). */
int bt_argmax_parse(const char *s, bt_argmax_rule *out);
void bt_argmax_format(const bt_argmax_rule *r, char *buf, size_t cap);
/* The id the rule picks; may be >= n for triton on a non-finite row. */
int32_t bt_argmax(const bt_argmax_rule *r, const float *x, int n);

typedef struct bt_sampler_cfg {
    float temperature;     /* 0 = greedy */
    int top_k;             /* 0 = off */
    float top_p;           /* 1 = off (0, as in a zeroed config, too) */
    uint64_t seed;
    bt_argmax_rule rule;
} bt_sampler_cfg;

typedef struct bt_sampler bt_sampler;
int bt_sampler_new(const bt_sampler_cfg *cfg, int n_vocab, bt_sampler **out);
void bt_sampler_free(bt_sampler *s);
/* Pick the next id from a logit row (not modified). Greedy uses the argmax
 * rule; sampling falls back to the argmax rule when the row is not finite
 * (what an engine that never checks would do), so non-finite rows are decided
 * the same way in both modes. "Not finite" means a NaN or +inf anywhere, or
 * no value above -inf; lone -inf entries are masked tokens (probability 0). *logprob gets log p(id) at temperature 1 (NaN
 * if undefined). */
int32_t bt_sampler_sample(bt_sampler *s, const float *logits, int n, float *logprob);
/* The softmax sums the last bt_sampler_sample took of its row (for the
 * log-probability: a finite row, logprob asked for), else NULL; valid
 * until the next call. */
const bt_softmax_sums *bt_sampler_sums(const bt_sampler *s);

/* Speculative decoding. bt_sampler_probs writes the distribution the
 * sampler draws from (temperature, top-k, top-p applied) as probs[n],
 * summing to 1; false when the row is not finite or temperature is 0 (the
 * caller then decides with bt_argmax). bt_sampler_draw picks an id with
 * probability proportional to w[i] > 0 (w need not be normalised; -1 if
 * all are 0); bt_sampler_uniform is the sampler's U[0,1). All three use
 * the sampler's seeded RNG. */
bool bt_sampler_probs(bt_sampler *s, const float *logits, int n, float *probs);
int32_t bt_sampler_draw(bt_sampler *s, const float *w, int n);
double bt_sampler_uniform(bt_sampler *s);

#endif
