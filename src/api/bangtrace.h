/* bangtrace.h - libbangtrace: record another engine's run into a bangtrace
 * trace, the same file `bangtrace run --trace` writes, so that bisect,
 * report, browse, diff and export read it unchanged.
 *
 * The caller (a Python package over ctypes, an engine's own C code) runs
 * the model; libbangtrace knows the model's layout (the tensors a native
 * run taps, in forward order, with their names and widths), writes the
 * trace and runs bangtrace's own recorder on what it is given: the tap rows,
 * the logit snapshots and the argmax rule, the token trail, the detectors
 * (a wall of one token, a repetition loop), the first non-finite event.
 *
 *   bangtrace_model *m;  bangtrace_model_open("qwen3-folder", &m);
 *   bangtrace_rec *r;    bangtrace_open(m, "run.db", "transformers", NULL, 0, &r);
 *   per forward:   bangtrace_forward(r, ids, n, pos0, stats, n_stats, logits, n_rows);
 *                  bangtrace_sampled(r, chosen, logprob);      (ends the step)
 *   bangtrace_close(r, "ok", "length");   bangtrace_model_close(m);
 *
 * Statistics are reduced wherever the tensor lives (a GPU: one small
 * reduction per tensor, one copy to the host per step) and handed over as
 * BANGTRACE_STAT_COUNT doubles per tensor in the model's tensor order;
 * bangtrace_stats computes them from host data with bangtrace's own reducer.
 *
 * Every function but the accessors returns 0 or a negative code, with a
 * one-line message in bangtrace_error() (per thread). One recording is not
 * to be used from two threads at once; several recordings, and several
 * models, may be used from several threads. The ABI only grows: a new
 * function or flag bumps BANGTRACE_API_VERSION. doc/pytorch.md. */
#ifndef BANGTRACE_H
#define BANGTRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BANGTRACE_API_VERSION 3

typedef struct bangtrace_model bangtrace_model;
typedef struct bangtrace_rec bangtrace_rec;

/* One tensor's statistics, as doubles at these indexes. Counts are over the
 * rows * width elements; min, max, absmax, mean and rms over the finite ones
 * (NaN when none is finite); first_bad_col and first_bad_row locate the first
 * non-finite element in row-major order (-1 when there is none). A tensor
 * whose N is negative was not computed at this step. */
enum {
    BANGTRACE_STAT_N = 0, BANGTRACE_STAT_NAN, BANGTRACE_STAT_PINF, BANGTRACE_STAT_NINF, BANGTRACE_STAT_FINITE,
    BANGTRACE_STAT_MIN, BANGTRACE_STAT_MAX, BANGTRACE_STAT_ABSMAX, BANGTRACE_STAT_MEAN, BANGTRACE_STAT_RMS,
    BANGTRACE_STAT_FIRST_BAD_COL, BANGTRACE_STAT_FIRST_BAD_ROW,
    BANGTRACE_STAT_COUNT
};

/* Element types of bangtrace_stats. */
enum { BANGTRACE_F32 = 0, BANGTRACE_F16 = 1, BANGTRACE_BF16 = 2 };

/* bangtrace_open flags. */
#define BANGTRACE_FORCE 1u   /* replace an existing bangtrace trace (never another file) */

/* BANGTRACE_API_VERSION of the library loaded. */
int bangtrace_api_version(void);
/* The message of this thread's last failing call ("" if none). */
const char *bangtrace_error(void);

/* The model: a GGUF file or a Hugging Face folder that bangtrace itself can
 * load (its configuration, tokenizer and weight layout; the weights are
 * mapped, not read). Its SHA-256 (the GGUF, or the folder's first
 * safetensors shard, as a native run records) is computed once, at the first
 * bangtrace_open. */
int bangtrace_model_open(const char *path, bangtrace_model **out);
void bangtrace_model_close(bangtrace_model *m);   /* NULL is a no-op; close its recordings first */
const char *bangtrace_model_arch(const bangtrace_model *m);   /* GGUF general.architecture: "qwen3" */
int bangtrace_model_n_layers(const bangtrace_model *m);
int bangtrace_model_n_vocab(const bangtrace_model *m);
/* The tensors a native run taps, in forward order (the trace's slots):
 * "token_embd", "blk.3.attn_q", ..., "output_norm", "logits". i out of
 * range: -1. name and op are the library's (valid until the model closes). */
int bangtrace_model_n_tensors(const bangtrace_model *m);
int bangtrace_model_tensor(const bangtrace_model *m, int i, const char **name, int *layer, const char **op, int *width);
/* The slot of a tensor by name, -1 if the model has none. */
int bangtrace_model_tensor_find(const bangtrace_model *m, const char *name);
/* The slot of the tensor computed with a weight, named as in the model's
 * files (a Hugging Face name as in its safetensors, "model.layers.3.mlp.
 * down_proj.weight", or a GGUF name, "blk.3.ffn_down.weight"): the matmul or
 * norm that reads it. -1 when no tapped tensor reads it (a bias, a rope
 * table) or the name is not the model's. */
int bangtrace_model_weight_tensor(const bangtrace_model *m, const char *weight_name);

/* A new trace for one request. engine names the engine that ran it
 * ("transformers", "vllm", "sglang": meta engine, which makes `bisect
 * --reference` a cross-engine comparison); settings is one line describing
 * how it ran (dtype, mode: meta engine_settings), may be NULL. An existing
 * path is refused unless flags has BANGTRACE_FORCE and it is a bangtrace
 * trace no process is writing. */
int bangtrace_open(bangtrace_model *m, const char *trace_path, const char *engine, const char *settings,
                   unsigned flags, bangtrace_rec **out);
/* A meta row of the caller's: request_id, request_json, prompt_text,
 * engine_version, dtype (other keys are refused: the rest are the
 * library's). */
int bangtrace_meta(bangtrace_rec *r, const char *key, const char *value);
/* One forward of the engine over tokens[0..n) at positions pos0..: the step
 * (prefill when pos0 is 0 or n > 1, else decode) with every tensor's
 * statistics (n_stats = bangtrace_model_n_tensors rows of
 * BANGTRACE_STAT_COUNT, in slot order) and the logits of its last n_rows
 * positions (n_rows >= 1 rows of n_vocab floats; the last row is the one
 * sampled). The prompt's tokens are recorded at the first forward. A step
 * still open from the previous forward is ended first, with tokens[0] as its
 * sampled token when this forward continues right after it. */
int bangtrace_forward(bangtrace_rec *r, const int32_t *tokens, int n, int pos0, const double *stats, int n_stats,
                      const float *logits, int n_rows);
/* API 2. The request's first n prompt tokens were not computed: the engine
 * took them from its prefix cache. Call before the first forward, which
 * then starts at position n with the rest of the prompt. The trace's
 * prefill step covers the whole prompt, its taps the rows computed, and a
 * kv_access "hit" row marks positions 0..n-1, so `bisect --reference` runs
 * them untapped before comparing. */
int bangtrace_cached_prefix(bangtrace_rec *r, const int32_t *tokens, int n);
/* API 3. The experts each computed row of the last forward was routed to
 * in mixture-of-experts layer `layer`: experts and weights hold n_rows * k
 * values, row i's k of them rank by rank (rank 0 the highest router
 * probability), each weight as it scales its expert's output in the layer's
 * output. n_rows is the forward's n; call after bangtrace_forward and
 * before bangtrace_sampled (the trace's moe_routes, as a native run's). */
int bangtrace_moe_routes(bangtrace_rec *r, int layer, const int32_t *experts, const float *weights, int n_rows, int k);
/* The token the engine chose from the last forward's last row (logprob NaN
 * when unknown): the logit snapshot, the token trail and the detectors;
 * ends the step (durable after this). */
int bangtrace_sampled(bangtrace_rec *r, int32_t token, double logprob);
/* An event of the caller's at the current step ("engine_error", ...). */
int bangtrace_event(bangtrace_rec *r, const char *kind, const char *detail);
/* Ends an open step, records the finish reason (may be NULL) and the
 * generated count, and closes the trace with status "ok" (NULL), "error"
 * or "interrupted". Frees r whatever it returns. */
int bangtrace_close(bangtrace_rec *r, const char *status, const char *finish_reason);

/* Statistics of rows x width elements of type dtype (BANGTRACE_F32, F16,
 * BF16) on the host, as bangtrace's own taps compute them. */
int bangtrace_stats(const void *data, int dtype, int rows, int width, double out[BANGTRACE_STAT_COUNT]);

#ifdef __cplusplus
}
#endif

#endif
