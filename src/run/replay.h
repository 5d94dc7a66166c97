/* replay.h - teacher-forced replay of a trace against a clean engine.
 *
 * The trace's exact token ids (the recorded tokens, not what the reference
 * would have sampled) go through a clean f32 CPU session on the same model
 * file (its SHA-256 must match the trace's), no injection; every tapped
 * tensor's statistics are compared with the trace's step by step with
 * bt_tap_compare. That finds finite corruption which never turns into NaN.
 * Because the trace stores bf16-rounded statistics and bt_tap_compare
 * rounds the reference the same way, an unchanged run compares exactly
 * equal. On a speculative trace every target forward is replayed as it ran
 * (a verify step with the last accepted token and the drafts it verified,
 * rejected ones included); draft passes are not.
 *
 * Used by `bisect --reference`; anything else that replays (a cross-engine
 * or cross-device comparison) goes through here too. */
#ifndef BT_TRACE_REPLAY_H
#define BT_TRACE_REPLAY_H

#include <stdbool.h>
#include "kernels/cpu/numerics.h"
#include "trace/reader.h"

/* One replayed step whose taps differ from the trace's. */
typedef struct bt_replay_divergence {
    int step, pos0, n_pos;
    char kind[16];              /* prefill | decode | verify */
    int slot;                   /* the first diverging tensor (bt_trace_tensors slot) */
    int n_div;                  /* how many tensors diverge at this step */
    char field[16];             /* min | max | mean | rms, or "nonfinite" for a count mismatch */
    double tv, rv;              /* the field's value in the trace / the reference
                                 * (for "nonfinite": the total non-finite counts) */
} bt_replay_divergence;

typedef struct bt_replay_cfg {
    const char *name;           /* the trace's path, for messages */
    const char *who;            /* the command, for warnings ("bisect") */
    const char *model;          /* NULL: the trace's model_path */
    const char *tokenizer;      /* llama2.c tokenizer (not needed: ids only) */
    double tol;                 /* bt_tap_compare's relative tolerance */
    int threads;                /* 0: the trace's, at most the online CPUs */
    const char *device;         /* backend: "cpu" (NULL), "cuda", "cuda:N" (numerics: the backend's ops) */
    /* Compare across devices: the trace ran on one backend (meta backend),
     * the replay runs on `device`; tol is ignored and the tolerance derived
     * from the dtypes involved (bt_tap_tol_devices) is used instead. */
    bool device_tol;
    /* The tolerance was not given: a cross-engine trace whose engine ran in
     * a narrow dtype (meta dtype bf16, f16) gets the derived one, as across
     * devices. */
    bool tol_auto;
    bool all;                   /* keep going after the first divergence */
    /* The replay's numerics profile (NULL: exact f32). With against, the
     * same ids also go through a second engine under that profile and the
     * two replays are compared with each other (profile A vs B: the
     * trace's own statistics are not used); the result then also names
     * the first op non-finite under one profile only. */
    const bt_numerics *numerics, *against;
    /* After each replayed step (may be NULL): i of n target steps done. */
    void (*progress)(void *user, int i, int n);
    void *user;
} bt_replay_cfg;

typedef struct bt_replay_result {
    const bt_trace_tensor_row *tens;   /* the target's tensors (borrowed from the reader) */
    int n_tens;
    char model_path[1024];
    bool sha_checked;
    int threads, steps_compared, steps_total;
    int verify_steps, draft_steps_skipped;   /* speculative traces */
    /* a batched server's request (kv_access): positions its steps took from
     * the prefix cache, replayed untapped before the step's own rows */
    int cached_steps, cached_positions;
    double max_rel;             /* largest relative difference (bt_tap_diff.rel) seen */
    int max_rel_step, max_rel_slot;
    bool found;
    bt_replay_divergence first;
    bt_replay_divergence *all;  /* cfg.all: every divergent step */
    int n_all;
    /* cfg.against: the first op non-finite under one profile only */
    bool one_bad;
    bt_replay_divergence one;
    char one_side[8];           /* "A" or "B" */
    /* cross-engine: a trace of run --engine llama.cpp (meta engine) replayed
     * on the native engine; the whole trace is compared (top-1 agreement) */
    bool cross;
    double *slot_rel;           /* (n_tens) per slot: largest relative error up to the departure */
    double before_rel;          /* largest relative error before the departing tensor */
    int top1_agree, top1_n;     /* teacher-forced: native argmax == the token llama.cpp chose
                                 * (cross) or the traced run chose (cfg.device_tol) */
    double logits_max_abs;      /* device_tol: largest |trace - reference| over full logit rows */
    int logits_rows;            /* full logit rows compared (run --logits full), 0: none */
    char wtype[16];             /* the departing matmul's weight type ("q4_1"), or "" */
    /* the tolerance used (cfg.tol, or derived with cfg.device_tol) */
    double tol;
    bool tol_derived;
    int tol_bits;               /* derived: mantissa bits of the narrowest compute dtype */
    long tol_k;                 /* derived: the longest reduction */
    int tol_layers;
    char trace_backend[64];     /* meta backend of the trace ("cpu-avx2", "cuda:0"), "" if absent */
    char replay_backend[64];    /* the replay's backend name ("cpu", "cuda:0") */
} bt_replay_result;

/* Replay the trace r. BT_OK with res filled (res->found: a divergence), or
 * an error naming the trace: no model, another model (SHA-256), no taps,
 * redacted ids, steps the trail cannot feed, a tensor this model lacks.
 * Clear res with bt_replay_result_clear either way. */
int bt_replay_run(bt_trace_reader *r, const bt_replay_cfg *cfg, bt_replay_result *res);
void bt_replay_result_clear(bt_replay_result *res);
/* The bt_op a trace's tensor row holds, or -1. In a foreign engine's trace
 * (meta foreign) its own tensors keep its names and an op label that may be
 * a bangtrace op's (llama.cpp's ffn_gate-0, a qwen35moe's shared expert, is
 * labelled ffn_gate): there a row is an op's only under the op's stable
 * name (blk.0.ffn_gate). */
int bt_replay_tensor_op(const bt_trace_tensor_row *t, bool foreign);

#endif
