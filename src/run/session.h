/* session.h - one run's machinery, built from one config and torn down by
 * one call: the model and its tokenizer, a draft model, the target engine
 * and a drafter's engine, the fault injector, the trace and the recorders,
 * with the crash and interrupt hooks around a trace.
 *
 * Two phases, because a run sizes its engines by the prompt, and the prompt
 * needs the tokenizer:
 *   bt_session_open   loads the model and the tokenizer (or borrows them,
 *                     and a draft model, from another session: cfg.share);
 *   bt_session_start  builds the injector, the engines (loading a separate
 *                     draft model after the target's), the trace (then
 *                     cfg.meta writes the caller's rows), the recorders,
 *                     records the prompt and installs the hooks.
 * bt_session_new does both when the sizes are known up front (bench, tests,
 * a replay). A server loads one session and opens one per request slot with
 * .share pointing at it: the models are loaded once and read by all, each
 * slot has its own engines, injector, trace and recorders. (A --inject
 * bitflip rewrites the weights, so a session with injection should own its
 * models.)
 *
 * Lives in libbttrace.a (it opens traces); the core never sees it. */
#ifndef BT_SESSION_H
#define BT_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include "gen/decode.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tap/inject.h"
#include "run/recorder.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"

typedef struct bt_session bt_session;

/* The llama.cpp path of --engine llama.cpp (run, forward, bench --against):
 * all zero is llama.cpp's own defaults (flash attention auto, the extra CPU
 * buffer types on: repacked weights, AMX where usable; an f16 KV cache).
 * Every deviation is a flag (--llama-flash-attn, --llama-repack,
 * --llama-kv-type, --llama-opt key=value) or one of the environment
 * aliases BT_LLAMA_FLASH_ATTN, BT_LLAMA_EXTRA_BUFTS, BT_LLAMA_KV_TYPE (a
 * flag wins). The strings are static or the caller's (argv). */
typedef struct bt_llama_settings {
    const char *flash_attn;         /* "auto" (NULL), "on", "off" */
    const char *repack;             /* "on" (NULL): extra buffer types; "off" */
    const char *type_k, *type_v;    /* "f16" (NULL), "f32", "bf16", "q8_0" */
    const char *amx;                /* "auto" (NULL): AMX where its tiles are usable; "off" */
    unsigned set;                   /* keys given by a flag (internal: the env aliases fill the rest) */
} bt_llama_settings;

/* The flags every command with --engine llama.cpp takes: when flag is one of
 * them, *taken is set and val parsed into s (BT_EINVAL with one line naming
 * the flag on a bad value); otherwise *taken is false and nothing happens.
 * --llama-opt takes key=value with key flash_attn, repack, kv_type (both
 * caches), type_k, type_v or amx ('-' and '_' alike). */
int bt_llama_flag(bt_llama_settings *s, const char *flag, const char *val, bool *taken);
/* The environment aliases, for the keys no flag gave (BT_EINVAL naming the
 * variable on a bad value). Idempotent. */
int bt_llama_settings_env(bt_llama_settings *s);
/* "flash_attn=auto repack=on kv=f16 amx=auto" (type_k/type_v apart when
 * they differ); every deviation from llama.cpp's defaults is in it. */
void bt_llama_settings_describe(const bt_llama_settings *s, char *buf, size_t cap);
bool bt_llama_settings_is_default(const bt_llama_settings *s);

typedef struct bt_session_cfg {
    /* models (bt_session_open) */
    const char *model;              /* path; ignored with share */
    const char *tokenizer;          /* llama2.c tokenizer.bin, or NULL */
    const char *draft_model;        /* a separate drafter sharing the target's vocabulary, or NULL */
    const bt_session *share;        /* borrow models and tokenizer from this session (must outlive us) */
    bool need_vocab;                /* refuse a model without a tokenizer (running text needs one) */
    bool need_weights;              /* refuse a vocabulary-only file */

    /* engines (bt_session_start) */
    int ctx;                        /* context length; 0: the model's, at most BT_ENGINE_CTX_CAP */
    int max_batch;                  /* positions per forward; 0: 1 */
    int threads;                    /* 0: bt_pool_default_threads() */
    const char *device;             /* backend of the target and drafter: "cpu" (NULL), "cuda", "cuda:N" */
    int spec_k;                     /* tokens drafted per verify (0: no speculation) */
    int draft_self;                 /* drafter = the target's first N layers */
    int draft_ngram;                /* drafter = prompt lookup of the last N tokens */
    bool draft_mtp;                 /* drafter = the model's MTP (nextn) block */
    const bt_numerics *numerics;    /* the emulated numerics (target and drafter); NULL: exact f32 */
    bool cuda_graphs;               /* capture each step as a CUDA graph (run --cuda-graphs; cuda only) */
    bool cupti;                     /* record device activity (CUPTI) into the trace's kernels
                                     * table (run --cupti; cuda only, needs a trace) */
    /* Build the target engine another way (a foreign engine: run --engine
     * llama.cpp, src/engines/llamacpp/); NULL: the native engine on `device`.
     * Kept as a hook so that this library never links the foreign one. */
    int (*engine_new)(void *user, const bt_model *m, int ctx, int max_batch, int threads, bt_engine **out);
    void *engine_user;
    /* With engine_new: the MTP drafter of that engine (--engine llama.cpp
     * --draft-mtp: llama.cpp's own MTP context on the target's model), made
     * after the target; NULL: --draft-mtp is refused with engine_new. */
    int (*draft_mtp_new)(void *user, bt_engine *target, bt_engine **out);
    bt_llama_settings llama;        /* engine_new's llama.cpp path (the hook reads it through user) */

    /* fault injection: the specs, and the run's extent to refuse a spec
     * that can never match (bt_injector_check) */
    const char *const *inject;
    int n_inject;
    long max_tokens;                /* tokens the run may generate */
    uint64_t seed;                  /* the injector's p=P draw (the run's --seed) */

    /* the prompt (recorded as the trace's first tokens), may be NULL */
    const int32_t *prompt;
    int n_prompt;

    /* trace and recorders: a recorder exists when there is a trace or an
     * injector (injection happens in the eval callback) */
    const char *trace;              /* NULL: no trace */
    bool force;                     /* replace an existing bangtrace trace */
    int taps;                       /* bt_taps_mode (BT_TAPS_NONE without a trace) */
    int layer_lo, layer_hi;         /* tapped layers, inclusive; lo = -1: all */
    bool no_state_taps;             /* the recurrent states untapped (bench --no-state-taps) */
    bool logits_full;
    int topk;                       /* top-k in logit snapshots; 0: 20 */
    bt_argmax_rule rule;
    bool timing;                    /* per-op durations into the trace (run --timing) */
    bool account;                   /* the recorder times its own parts (bench --taps) */
    /* Called once the trace exists, before the recorders register their
     * tensors: the caller's meta rows (argv, sampling, request, ...). */
    int (*meta)(void *user, bt_trace *t, const bt_session *s);
    void *meta_user;
    /* With a trace: SIGINT & co. only set a flag (bt_interrupt_pending),
     * and a fatal signal records a crash event and closes the trace. The
     * hooks are process-wide: one session at a time may ask for them (a
     * server's slots leave this off). */
    bool hooks;
} bt_session_cfg;

/* Load (or borrow) the model and the tokenizer. On error *out holds what
 * was built: pass it to bt_session_close. */
int bt_session_open(const bt_session_cfg *cfg, bt_session **out);
/* Build the rest from cfg (the same struct as open, now with the sizes
 * filled in; the model fields are not read again). */
int bt_session_start(bt_session *s, const bt_session_cfg *cfg);
/* bt_session_open + bt_session_start. */
int bt_session_new(const bt_session_cfg *cfg, bt_session **out);
/* Close the trace if still open (status: BT_TRACE_STATUS_*; NULL: "error",
 * or "io_error" when a write failed), remove the hooks, free everything in
 * the right order. NULL is a no-op. */
void bt_session_close(bt_session *s, const char *trace_status);
/* Close only the trace now (the run's summary line wants its final size);
 * returns bt_trace_close's status. The recorders stay readable. */
int bt_session_close_trace(bt_session *s, const char *status);

/* Borrowed views (valid until bt_session_close). NULL where absent. */
const bt_model *bt_session_model(const bt_session *s);
const bt_model *bt_session_draft_model(const bt_session *s);   /* the separate draft model */
const bt_tokenizer *bt_session_tokenizer(const bt_session *s);
bt_engine *bt_session_engine(const bt_session *s);
bt_engine *bt_session_draft_engine(const bt_session *s);
const bt_injector *bt_session_injector(const bt_session *s);
bt_trace *bt_session_trace(const bt_session *s);
bt_recorder *bt_session_recorder(const bt_session *s);
/* The context length the engines get: cfg.ctx or the model's, capped. */
int bt_session_ctx(const bt_session *s);
int bt_session_threads(const bt_session *s);
/* "model", "self:N", "ngram:N", or "" without speculation. */
const char *bt_session_drafter_name(const bt_session *s);
/* The target file's SHA-256, hashed before any bitflip injection ("" when
 * the session has no trace). */
const char *bt_session_model_sha256(const bt_session *s);
/* The decoder's engine side of this session: engines, recorders, injector,
 * drafter. The caller adds sampler, greedy, rule, tok and ignore_eos. */
void bt_session_decoder_cfg(const bt_session *s, bt_decoder_cfg *dc);

#endif
