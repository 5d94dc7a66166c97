/* run_meta.h - the one owner of a recorded run's meta rows: every key a
 * run, a served request or a session writes into a trace's meta table is
 * written here, and read back here into one struct for the replay, diff,
 * report, bisect and the browser. (The trace store's own rows - schema and
 * tool version, start and finish times, status, backtraces, redacted -
 * are the trace format's, src/trace/writer.c.)
 *
 * Key names and values are the trace format's (doc/trace-format.md). */
#ifndef BT_RUN_META_H
#define BT_RUN_META_H

#include <stdbool.h>
#include <stdint.h>
#include "kernels/cpu/numerics.h"
#include "engine/sampler.h"
#include "gen/request.h"
#include "model/model.h"
#include "tap/inject.h"
#include "tokenizer/tokenizer.h"
#include "trace/reader.h"
#include "trace/trace.h"

/* Every key, in the order a run writes them (X(name) per key). */
#define BT_RUN_META_KEYS(X) \
    X(argv) X(request_id) X(host) X(cpu) X(backend) X(threads) X(numerics) \
    X(model_path) X(tokenizer_path) X(model_sha256) X(model_format) X(model_name) X(arch) X(hparams) \
    X(n_layers) X(n_vocab) X(tokenizer) X(argmax_rule) X(seed) X(sampling) X(injections) \
    X(request_json) X(prompt_text) X(taps) X(tap_layers) X(logits) X(engine) \
    X(llama_cpp_version) X(llama_cpp_lib_version) X(llama_cpp_build) X(llama_cpp_settings) X(llama_cpp_path) \
    X(llama_cpp_seq) X(llama_cpp_n_seq) X(engine_version) X(engine_settings) X(dtype) \
    X(spec_k) X(drafter) X(draft_model_path) X(draft_model_sha256) X(cuda_graphs) X(cupti) \
    X(device_weight_bytes) X(device_upload_ms) X(device_mem_used) X(device_mem_total) X(generated)
/* The trace store's own rows, read back with the rest. */
#define BT_TRACE_META_KEYS(X) \
    X(tool_version) X(schema_version) X(started_at) X(finished_at) X(status) X(backtraces) X(write_error) X(redacted)

/* What a run's meta rows are written from. Strings are borrowed. */
typedef struct bt_run_meta_src {
    /* A served request's rows (serve, probe/ctxwalk --model): the keys that
     * form has always had, no host, cpu, numerics, hparams, tokenizer or
     * engine; false: run's. */
    bool slot;
    const char *argv_json;          /* the command line as a JSON array; NULL: from argc/argv */
    int argc;                       /* argv after "bangtrace" */
    char **argv;
    const char *request_id;         /* NULL: none */
    const bt_model *model;
    const bt_tokenizer *tok;
    const char *model_path, *tokenizer_path;   /* as given (meta has their real paths) */
    const char *model_sha256;       /* hex; NULL: "" */
    const char *device;             /* "cpu" (NULL), "cuda", "cuda:N" */
    const char *backend;            /* meta "backend" as the opened backend names itself
                                     * (bt_backend_trace_name); NULL: from device */
    bool llamacpp;                  /* --engine llama.cpp */
    const char *engine;             /* another engine recorded through libbangtrace
                                     * ("transformers", "vllm"); NULL: native or llama.cpp */
    const char *llama_settings;     /* bt_llama_settings_describe's words (llamacpp) */
    const char *llama_path;         /* the path llama.cpp took (llamacpp) */
    const char *llama_version, *llama_lib_version, *llama_build;
    int threads;
    const bt_numerics *numerics;    /* NULL: exact f32 */
    const bt_sampler_cfg *sc;
    const bt_injector *inj;         /* NULL: "[]" */
    const char *request_json;       /* NULL: none */
    const char *prompt_text;        /* NULL: none */
    int taps;                       /* bt_taps_mode */
    int layer_lo, layer_hi;         /* lo = -1: every layer */
    bool logits_full;
    const char *const *extra;       /* more key, value pairs ending in NULL, written last
                                     * (so one may replace a key: "backend"); NULL: none */
} bt_run_meta_src;

int bt_run_meta_write(bt_trace *t, const bt_run_meta_src *s);
/* A speculative run's drafter: spec_k, drafter, and a separate draft
 * model's real path and SHA-256 (dm, path may be NULL). */
int bt_run_meta_write_spec(bt_trace *t, int spec_k, const char *drafter, const bt_model *dm, const char *dm_path);
/* The device's memory account after loading (device_weight_bytes,
 * device_upload_ms, device_mem_used, device_mem_total). */
int bt_run_meta_write_mem(bt_trace *t, long long weight_bytes, double upload_ms, long long used, long long total);
/* A CUDA run's switches: cuda_graphs, cupti ("1" when on). */
int bt_run_meta_write_cuda(bt_trace *t, bool cuda_graphs, bool cupti);
/* The generated-token count every reader prints (bt_analyze_generated). */
int bt_run_meta_write_generated(bt_trace *t, long n);

/* Every row read back: NULL where the trace has none. The strings are the
 * reader's (valid until it closes). */
typedef struct bt_run_meta {
#define BT_RUN_META_FIELD_(k) const char *k;
    BT_RUN_META_KEYS(BT_RUN_META_FIELD_)
    BT_TRACE_META_KEYS(BT_RUN_META_FIELD_)
#undef BT_RUN_META_FIELD_
    /* parsed */
    int n_threads;                  /* threads, 0 if absent or not a number */
    int n_spec_k;                   /* spec_k, 0 if absent */
    bool llama_cpp;                 /* engine == "llama.cpp" */
    bool foreign;                   /* engine is not the native one (llama.cpp, or another
                                     * engine recorded through libbangtrace) */
} bt_run_meta;

void bt_run_meta_read(bt_trace_reader *r, bt_run_meta *m);
/* A row by its key (one of the keys above; NULL for another or an absent one). */
const char *bt_run_meta_get(const bt_run_meta *m, const char *key);

#endif
