/* analyze.h - what went wrong in a trace: the first non-finite tensor, how
 * it spread, the first degenerate output step and why the argmax picked what
 * it picked. Shared by `bisect`, `report` and the browser; built on the
 * reader (trace/reader.h), so it never touches SQL itself. (bt_analyze_verify,
 * the integrity check, is the reader's: see reader.h.)
 *
 * Functions return BT_OK or the reader's BT_E* (with its one-line message
 * naming the trace file). */
#ifndef BT_ANALYZE_H
#define BT_ANALYZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "trace/reader.h"
#include "tap/detect.h"

/* One tensor that held a non-finite value at one step. */
typedef struct bt_bad_tensor {
    int step;
    int pos;                 /* position holding the first non-finite value */
    int idx;                 /* its slot in the step's tap blob */
    int layer;               /* -1 outside layers */
    char op[32];
    char tensor[64];
    int first_bad_index;
    int64_t n, nan, pinf, ninf;
    char model[16];          /* the pass: target | draft */
    char kind[16];           /* prefill | decode | verify | draft ("" when unknown) */
} bt_bad_tensor;
/* "3 NaN, 0 +Inf, 0 -Inf of 576": the counts of t, as bisect and report print them. */
void bt_bad_tensor_print_counts(FILE *out, const bt_bad_tensor *t);
/* "bt_k_matmul <<<(576,1,1), (128,1,1)>>> 4.2 us, stream 13, device 0": a
 * kernel row as bisect and report print it. Writes buf and returns it. */
const char *bt_kernel_row_format(const bt_kernel_row *k, char *buf, size_t cap);
/* Is this kernel a tap's own statistics reduction (not the op's work)? */
bool bt_kernel_is_tap(const char *name);
/* A layer for printing: "12", or "-" outside the layers (token_embd,
 * output). Writes buf and returns it. */
const char *bt_layer_label(int layer, char *buf, size_t cap);

enum bt_prop_kind {
    BT_PROP_ORIGIN = 0,      /* the first non-finite tensor */
    BT_PROP_FORWARD,         /* first bad tensor of a later layer group, same step */
    BT_PROP_KV_CACHE,        /* later step: attn_ctx went bad while its inputs were finite */
    BT_PROP_RECUR,           /* later step: the first bad tensor is not attn_ctx (the fault recurs) */
};
const char *bt_prop_kind_name(int kind);   /* "origin", "forward", "kv_cache", "recur" */

typedef struct bt_prop_link {
    int kind;
    bt_bad_tensor t;
    int n_bad;               /* bad tensors in this layer group at this step */
} bt_prop_link;

/* The walk back from the first non-finite tap, as the browser lists it: the
 * links of bt_analysis.prop (the origin step's layer groups), then the first
 * bad group of each of up to max_later later steps of the origin's pass,
 * each kv_cache or recur (bt_analyze keeps only the first of each kind).
 * Links name their pass in t.model (t.kind is ""). *links malloc'd (free()),
 * NULL with *n = 0 on a clean trace. */
int bt_analyze_walk(bt_trace_reader *r, int max_later, bt_prop_link **links, int *n);

typedef struct bt_event_count {
    char kind[32];
    int count;
    int first_step;          /* -1 when no event of the kind had a step */
} bt_event_count;

/* Acceptance over a window of consecutive verify steps. */
typedef struct bt_spec_window {
    int first_step, last_step, n_verify;
    int drafted, accepted;
} bt_spec_window;

/* Speculative decoding: what the drafter and the target did, where the
 * first non-finite came from and how much speculation multiplied the
 * target's exposure to it. present = false on a plain trace. */
typedef struct bt_spec_analysis {
    bool present;
    char drafter[32];                /* model | self:N | ngram:N ("" unknown) */
    int k;                           /* meta spec_k, else the largest k drafted */
    int verify_steps, draft_steps, decode_steps, prefill_steps;
    int64_t drafted, accepted;       /* over every verify step */
    double acceptance;               /* accepted / drafted; NAN when nothing was drafted */
    bt_spec_window *windows;         /* BT_SPEC_WINDOW verify steps each, the last one partial */
    int n_windows;
    int64_t nonfinite_drafts;        /* drafted tokens whose draft logit row was not finite */
    int64_t nonfinite_drafts_accepted;
    /* the first non-finite (x->first) came from: */
    char first_model[16];            /* target | draft; "" on a clean trace */
    char first_kind[16];             /* the pass: prefill | decode | verify | draft */
    int target_bad_step;             /* first target pass with a non-finite tap, -1 if none */
    char target_bad_tensor[64];      /* its first bad tensor ("" if none) */
    bool output_clean;               /* no non-finite target pass and no degenerate output */
    /* amplification: target forwards and positions after the prefill, up to
     * and including amp_until (the first non-finite target pass, else the
     * first degenerate step, else the last step), against plain decoding
     * of the same output (one forward of one position per emitted token) */
    int amp_until;
    bool amp_in_prefill;             /* the target went bad in the prefill: identical without speculation */
    int64_t amp_forwards, amp_positions, amp_emitted;
    double amp_ratio;                /* amp_positions / amp_emitted; NAN when nothing was emitted */
    int64_t amp_draft_positions;     /* self-draft positions through the same weights; -1 n/a */
    bool partial;                    /* an exported window (meta export_window): counts cover it only */
    /* decoder events */
    int n_post_stop, post_stop_step;          /* step -1 when none */
    char post_stop_detail[256];
    int n_accept_collapse, accept_collapse_step;
    char accept_collapse_detail[256];
} bt_spec_analysis;

typedef struct bt_analysis {
    int n_steps, n_tensors, n_vocab, n_gen;
    bool has_nonfinite;
    bt_bad_tensor first;             /* valid when has_nonfinite: the fields of v_first_nonfinite */
    /* The device kernel that wrote the first bad tensor (a --cupti trace):
     * the last kernel joined to its (step, layer, op) in v_kernels that is
     * not the tap's own reduction (bt_k_stats); n_first_kernels counts
     * every kernel of that op. has_first_kernel is false without kernel rows. */
    bool has_first_kernel;
    bt_kernel_row first_kernel;
    int n_first_kernels;
    bt_prop_link *prop;              /* origin first, then forward links, then later steps */
    int n_prop;
    bool has_degenerate;
    int degen_step, degen_pos;       /* first degenerate output step (-1 if none) */
    char degen_kind[32];             /* token_wall, nonfinite_logits, ... */
    char degen_detail[256];
    int bad_logits_step;             /* first step with non-finite logits, -1 if none */
    char explanation[512];           /* one sentence; "" when there is nothing to explain */
    bt_event_count *events;          /* per kind, in order of first appearance */
    int n_event_kinds, n_events;
    bool has_crash;
    bt_spec_analysis spec;           /* speculative decoding (spec.present) */
} bt_analysis;

/* Generated tokens, the one count run, bisect, report, diff and browse
 * print (doc/trace-format.md): the completion's tokens, as run's
 * completion_ids: an end-of-generation token that stopped the run and tokens
 * a speculative burst produced past the end (stop, -n) are not counted. A
 * finished run records it (meta generated); for a run that never finished,
 * every output token of the trail (gen and bonus). */
int bt_analyze_generated(bt_trace_reader *r, int *n);

/* Fill *out (cleared first; clear it with bt_analysis_clear). */
int bt_analyze(bt_trace_reader *r, bt_analysis *out);
void bt_analysis_clear(bt_analysis *x);
/* Something worth exit status 1: non-finite, degenerate output or a crash. */
static inline bool bt_analysis_found(const bt_analysis *x) { return x->has_nonfinite || x->has_degenerate || x->has_crash; }

/* The token sequence by position: prompt tokens, then the output (gen and
 * bonus tokens; drafted ones only when accepted, as gen), so
 * ids[p] is the input at position p (what a teacher-forced replay feeds).
 * *ids malloc'd; *n_prompt counts the prompt part. */
int bt_analyze_sequence(bt_trace_reader *r, int32_t **ids, int *n, int *n_prompt);
/* The piece of token id as the trace's token trail spells it, printable
 * (escaped by text.h's bt_text_escape, quotes as \'); "" when the id
 * never appears or the pieces were redacted. */
int bt_analyze_piece(bt_trace_reader *r, int32_t id, char *buf, size_t cap);

#endif
