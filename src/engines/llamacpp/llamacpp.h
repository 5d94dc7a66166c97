/* llamacpp.h - llama.cpp as a second recorded engine: its C API behind a
 * bt_engine (bt_engine_new_ext), its graph tensors mapped onto bangtrace's
 * stable names through cb_eval (doc/llama-cpp.md has the table).
 *
 * Built only with configure --with-llama-cpp (HAVE_LLAMA_CPP); without it
 * the same functions exist and fail with one line (stub.c). */
#ifndef BT_LLAMACPP_H
#define BT_LLAMACPP_H

#include <stdbool.h>
#include <stddef.h>
#include "engine/engine.h"
#include "model/model.h"

typedef struct bt_llama_settings bt_llama_settings;   /* session.h */

typedef struct bt_llamacpp_opts {
    const char *model_path;     /* the GGUF bangtrace loaded as m (same file, same ids) */
    int ctx_len, max_batch, n_threads;
    const char *device;         /* "cpu" (default) or "cuda" (bt_llamacpp_device) */
    bool kv_f32;                /* an f32 KV cache (llama.cpp's default is f16): what
                                 * an f32 reference comparison needs (a type
                                 * the settings name wins) */
    const bt_llama_settings *llama; /* llama.cpp's path, the environment aliases
                                 * applied by the caller (bt_llama_settings_env);
                                 * NULL: its own defaults and the aliases */
    int mtp_k;                  /* > 0: the target of llama.cpp's MTP drafter
                                 * (run --engine llama.cpp --draft-mtp --spec-k K):
                                 * the MTP layers loaded (load_mtp), the trunk's
                                 * h_nextn kept for every row, and K recurrent-state
                                 * snapshots per sequence (n_rs_seq) so that a
                                 * rejected draft rolls back (llama_memory_seq_rm) */
} bt_llamacpp_opts;

/* The devices llama.cpp's own backends run on: the device table's names
 * without an ordinal (cpu, cuda). BT_OK with *ggml (may be NULL) the name
 * of its ggml backend ("CPU", "CUDA"; NULL device: the CPU), or BT_EINVAL
 * with "--device with --engine llama.cpp expects cpu or cuda, got 'X'". */
int bt_llamacpp_device(const char *device, const char **ggml);

/* Load the model in llama.cpp, check it against m (vocabulary size, layers),
 * probe its graph once for the tensor names, and wrap it as an engine.
 * Returns BT_OK, or BT_EUNSUPPORTED (built without llama.cpp, no CUDA in
 * this build), BT_EINVAL (llama.cpp cannot load the model, it disagrees
 * with bangtrace's view of it) with a one-line message. */
int bt_llamacpp_engine_new(const bt_model *m, const bt_llamacpp_opts *o, bt_engine **out);

/* llama-server's slots (serve --engine llama.cpp --parallel n): one model
 * and one context with n sequences (n_seq_max = n, a KV cache of
 * o->ctx_len cells per sequence, llama-server --parallel's kv_unified =
 * false), as n engines in out[0..n), engine i bound to seq_id i. Engines may
 * forward from different threads: their llama_decode calls are serialised,
 * one sequence per call, so each engine's taps (its recorder, its trace)
 * hold only its own sequence's tensors. A forward from a position the
 * sequence already holds (a new request on the slot starts at 0) first
 * removes the sequence's cells from there (llama_memory_seq_rm); other
 * sequences are untouched. Each engine is freed with bt_engine_free; the
 * context goes with the last. Errors as bt_llamacpp_engine_new (out all
 * NULL). n = 1 is bt_llamacpp_engine_new. */
int bt_llamacpp_engines_new(const bt_model *m, const bt_llamacpp_opts *o, int n, bt_engine **out);
/* llama.cpp's own MTP drafter (its draft-mtp speculation,
 * common/speculative.cpp): a context of type LLAMA_CONTEXT_TYPE_MTP on the
 * model of target (an engine made with mtp_k > 0), one sequence, its own KV
 * cache, as an engine whose forward pairs token t at position p with the
 * hidden row bt_engine_set_mtp_hidden gave it (llama_batch_ext, llama_process)
 * and whose bt_engine_hidden_rows are the block's h_nextn. Its graph is not
 * tapped (the trace has its steps, not its tensors). BT_EUNSUPPORTED with one
 * line when the model has no MTP (nextn) block; BT_EINVAL when target is not
 * such an engine. */
int bt_llamacpp_mtp_engine_new(bt_engine *target, bt_engine **out);
/* The path the last engine made took, resolved ("flash attention on (auto:
 * FLASH_ATTN_EXT); weights: 90 of 211 matmul weights repacked in CPU_REPACK
 * (q4_K as q4_K_8x8); KV cache f16; AMX: not in this build"), for the trace's
 * meta, the run banner and report; "" before any. */
const char *bt_llamacpp_last_path(void);
/* "0.3.36" (the llama-cpp-python sdist pinned in tools/llama-cpp.sha256),
 * or NULL when built without llama.cpp. */
const char *bt_llamacpp_version(void);
/* llama.cpp's own version string and the CMake flags of the build. */
const char *bt_llamacpp_lib_version(void);
const char *bt_llamacpp_build_flags(void);

/* llama-bench from the same build (bench --against llama.cpp): the build
 * directory (configure's, or $BT_LLAMA_CPP_DIR), a check that its
 * build-info.txt names the pinned version and has bin/llama-bench (its path
 * into bench), and one run of -d depth -p np -n nd -r reps on model with threads
 * threads on the path ls names (NULL: llama.cpp's defaults; -fa, -ctk, -ctv,
 * --repack as the adapter takes them). Rates are NAN
 * when llama-bench did not report them. BT_EINVAL with one line on a version
 * mismatch, a missing llama-bench or its failure; BT_EUNSUPPORTED without
 * llama.cpp. */
const char *bt_llamacpp_dir(void);
int bt_llamacpp_bench_check(char *bench, size_t cap);
int bt_llamacpp_bench_run(const char *model, int threads, int depth, int np, int nd, int reps, const bt_llama_settings *ls,
                          double *prompt_tps, double *decode_tps);

/* The name table (doc/llama-cpp.md): llama.cpp's graph name (without its
 * "-L" layer suffix) -> bt_op, or -1 when it has no counterpart. */
int bt_llamacpp_map_name(const char *base);
/* The same for layer `layer` of a model of config c (hybrid models name
 * some tensors per layer kind); -1 also when the op is not computed there. */
int bt_llamacpp_map_name_in(const bt_config *c, const char *base, int layer);
/* The same for a node of llama.cpp's MTP graph (graph_mtp: the block's
 * nodes "mtp_"-prefixed at the block's layer, c->n_layers): the bt_op, -1
 * for none; *layer becomes -1 for the embedding, h_nextn and the head. */
int bt_llamacpp_map_mtp_name(const bt_config *c, const char *base, int *layer);
/* The kernel llama.cpp's CPU backend runs for op with weights of type
 * wtype ("q4_1"; "" for ops without weights), for the cross-engine verdict. */
void bt_llamacpp_kernel_guess(int op, const char *wtype, char *buf, size_t cap);
/* The same for a trace whose meta llama_cpp_path (bt_llamacpp_last_path) is
 * path: flash attention names FLASH_ATTN_EXT, repacked weights their
 * CPU_REPACK layout, the cache its type. NULL path: the guess above. */
void bt_llamacpp_kernel_guess_path(int op, const char *wtype, const char *path, char *buf, size_t cap);

#endif
