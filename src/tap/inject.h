/* inject.h - fault injection: make the engine compute what a broken kernel,
 * a flipped bit in device memory or a corrupted KV cache would produce.
 *
 * Specs (repeatable --inject, documented in doc/inject.md):
 *   KIND@WHERE     KIND: nan | inf | -inf | zero | scale=F | noise=F
 *                  WHERE: comma list of layer=L, op=NAME, step=S | step>=S,
 *                  pos>=P, index=I | count=K, model=target|draft
 *                  (default: index 0 only, every step, every layer)
 *   bitflip:tensor=WEIGHT_NAME,index=I,bit=B   flip one bit of one weight
 *                  element (f32/f16/bf16 element, or byte I of a quantized
 *                  tensor's data) for the whole run
 *   kvcorrupt@layer=L,pos=P[,value=nan|inf|-inf|zero]   poison the cached
 *                  key and value of one position once it has been written
 *   longctx@pos>=P,op=NAME,scale=F   scale a tensor only at positions >= P
 *   crash@step=S   (hidden, for tests) raise SIGSEGV at step S
 * A value is written into the tensor right after the op computes it and
 * before the tap observes it. */
#ifndef BT_INJECT_H
#define BT_INJECT_H

#include <stdbool.h>
#include "engine/engine.h"
#include "model/model.h"

typedef struct bt_injector bt_injector;

bt_injector *bt_injector_new(void);            /* NULL on OOM */
void bt_injector_free(bt_injector *inj);       /* NULL is a no-op */
/* Parse and add one spec. BT_EINVAL with a message naming the bad part
 * ("--inject 'nan@layer=x': layer expects an integer"). */
int bt_injector_add(bt_injector *inj, const char *spec);
int bt_injector_count(const bt_injector *inj);
/* The specs as given, as a JSON array string (malloc'd), for the trace. */
char *bt_injector_json(const bt_injector *inj);

/* What a run can compute, for bt_injector_check. */
typedef struct bt_inject_limits {
    const bt_config *target;       /* the target model */
    const bt_config *draft;        /* the draft engine's model; NULL without one
                                    * (no drafter, or --draft-ngram) */
    int draft_layers;              /* layers the draft engine runs */
    int max_pos;                   /* every position of the context is < max_pos */
    int max_step;                  /* every step the context allows is < max_step */
} bt_inject_limits;
/* Refuse a spec that can never match in this run: a layer beyond the model,
 * model=draft without a draft engine, a position past the context or a
 * step past the most forwards the context allows, an index past the op's
 * rows (a position or step merely past -n is the run's unfired warning). BT_EINVAL naming the part
 * ("--inject 'nan@layer=9': layer 9 is beyond the model's 5 layers (0..4)"). */
int bt_injector_check(const bt_injector *inj, const bt_inject_limits *lim);

/* After a run: did spec i change anything (an activation element, a cached
 * key/value, a weight bit)? *text (may be NULL) gets the spec as given. */
bool bt_injector_fired(const bt_injector *inj, int i, const char **text);

/* Does any activation spec target (op, layer) of this model? (the recorder
 * asks the engine for those tensors even when taps are off) */
bool bt_injector_wants(const bt_injector *inj, const char *model, int op, int layer);
/* Apply activation specs to a freshly computed tensor (in place). Returns
 * the number of elements changed. */
long bt_injector_apply(const bt_injector *inj, const char *model, const bt_tensor_view *t);
/* The same; *by (may be NULL) gets the text of the first spec that changed
 * an element of t, or NULL when none did. */
long bt_injector_apply_by(const bt_injector *inj, const char *model, const bt_tensor_view *t, const char **by);
/* Flip the requested weight bits once, before the run (makes the affected
 * pages of the read-only mapping writable copy-on-write). BT_ENOTFOUND /
 * BT_ERANGE for a bad tensor name or index. */
int bt_injector_apply_weights(const bt_injector *inj, bt_model *m);
/* After each forward: poison KV positions that now exist. */
void bt_injector_after_forward(const bt_injector *inj, bt_engine *e);
/* p=P (any kind but crash): a spec is active for a request with
 * probability P. The draw is a hash of (seed, spec index), so a request
 * seeded the same way draws the same; serve seeds it with the request's
 * number, run with --seed. Until called, specs draw with seed 0. */
void bt_injector_set_draw(bt_injector *inj, unsigned long long seed);
/* Is any spec active for this draw? */
bool bt_injector_active(const bt_injector *inj);
/* The draw behind p=: request seed and spec index i -> U[0, 1) (splitmix64;
 * the batched server's faults draw with their own indices, 100 + i). */
double bt_injector_draw_unit(unsigned long long seed, int i);
/* crash@step=S */
/* The first spec that writes the native engine's own memory (kvcorrupt:
 * its KV cache; bitflip: its weight mapping), which a foreign engine does
 * not share; NULL if none. */
const char *bt_injector_needs_native(const bt_injector *inj);
bool bt_injector_crash_at(const bt_injector *inj, int step);
/* norollback[@step=S|step>=S][,p=P]: at verify step `step` of a hybrid
 * model, should the decoder keep the rejected drafts in the recurrent state
 * (skip the rollback)? Counts the spec as fired. */
bool bt_injector_norollback(const bt_injector *inj, int step);

#endif
