/* cmd_run.c - `bangtrace run`: generate a completion for a prompt or an
 * OpenAI-compatible request body.
 *
 * stdout carries only the completion text (or, with --json, one JSON
 * object); progress and timings go to stderr. Text is streamed, except the
 * tail that could still turn out to be the start of a stop string. */
#include "cmd.h"
#include "args.h"
#include "backend/backend.h"
#include "gen/decode.h"
#include "gen/generate.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "gen/request.h"
#include "kernels/cpu/numerics.h"
#include "run/run_meta.h"
#include "run/session.h"
#include "sys/crash.h"
#include "sys/outfile.h"
#include "tap/inject.h"
#include "run/recorder.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"
#include "base/text.h"
#include "base/util.h"
#include "kernels/cpu/kernels.h"
#include "engines/llamacpp/llamacpp.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_run_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace run --model M [--tokenizer T] (--prompt TEXT | --request FILE.json)\n"
        "                     [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
        "                     [--threads N] [--ctx N] [--argmax RULE] [--chat-template NAME] [--json]\n"
        "                     [--numerics PROFILE]\n"
        "                     [--engine native|llama.cpp [--device cpu|cuda]]\n"
        "                     [--llama-flash-attn M] [--llama-repack on|off] [--llama-kv-type T] [--llama-opt K=V]\n"
        "                     [--trace OUT.db [--force] [--taps MODE] ...]\n\n"
        "Generate a completion. stdout gets only the completion text; progress and\n"
        "timings go to stderr.\n\n"
        "  --model M            GGUF model, Hugging Face model folder (DIR), or llama2.c\n"
        "                       checkpoint (.bin)\n"
        "  --tokenizer T        llama2.c tokenizer.bin (llama2.c checkpoints only)\n"
        "  --prompt TEXT        raw prompt (no chat template; BOS added if the vocabulary asks)\n"
        "  --request FILE       OpenAI /v1/completions or /v1/chat/completions JSON body\n"
        "                       (prompt or messages, max_tokens, temperature, top_p, top_k,\n"
        "                       seed, stop); '-' reads standard input\n"
        "  -n, --max-tokens N   tokens to generate (default 128, or the request's max_tokens)\n"
        "  --temp T             temperature, 0 = greedy (default 0, or the request's)\n"
        "  --top-k K            keep the K most likely tokens (0 = off)\n"
        "  --top-p P            nucleus sampling threshold (1 = off)\n"
        "  --seed S             sampling seed, 0 to 2^64-1 (default 42)\n"
        "  --threads N          compute threads (default: online CPUs)\n"
        "  --device DEV         where the ops run: cpu (default), cuda or cuda:N (the CUDA\n"
        "                       plugin, bangtrace-cuda.so; exit 2 when it cannot run here);\n"
        "                       with --engine llama.cpp: llama.cpp's backend, cpu or cuda\n"
        "                       (a llama.cpp build with CUDA)\n"
        "  --cuda-graphs        with --device cuda: capture each decode step (tap reductions\n"
        "                       included) as a CUDA graph and replay it; the trace equals the\n"
        "                       eager one (doc/cuda.md)\n"
        "  --cupti              with --device cuda and --trace: record CUPTI device activity\n"
        "                       (kernels, copies, memsets, syncs, driver/runtime API calls),\n"
        "                       each joined to its (step, layer, op), into the trace's kernels\n"
        "                       table (v_kernels); costs time per launch (doc/cuda.md)\n"
        "  --engine NAME        native (default: bangtrace's exact f32 engine) or llama.cpp (the\n"
        "                       pinned llama.cpp build through its C API and cb_eval: same taps,\n"
        "                       trace, --inject activation faults and sampling; GGUF models only;\n"
        "                       no speculative decoding, kvcorrupt, bitflip or --numerics;\n"
        "                       doc/llama-cpp.md)\n"
        "  --llama-flash-attn M with --engine llama.cpp: flash attention auto (default, as\n"
        "                       llama.cpp: on for the CPU), on or off (kq and kq_soft_max\n"
        "                       as tensors); alias BT_LLAMA_FLASH_ATTN\n"
        "  --llama-repack on|off  llama.cpp's extra CPU buffer types: on (default, as\n"
        "                       llama.cpp: Q4_0/Q4_K/IQ4_NL/... weights repacked into\n"
        "                       interleaved layouts, AMX where its tiles are usable) or off;\n"
        "                       alias BT_LLAMA_EXTRA_BUFTS=1|0\n"
        "  --llama-kv-type T    llama.cpp's KV cache type: f16 (default), f32, bf16, q8_0;\n"
        "                       alias BT_LLAMA_KV_TYPE\n"
        "  --llama-opt KEY=VAL  one llama.cpp setting: flash_attn, repack, kv_type, type_k,\n"
        "                       type_v or amx (auto|off); repeatable. The trace's meta\n"
        "                       (llama_cpp_settings, llama_cpp_path), the run banner and\n"
        "                       report say which path ran\n"
        "  --ctx N              context length (default: the model's, at most 4096)\n"
        "  --numerics PROFILE   emulate another engine's number formats (doc/numerics.md): a\n"
        "                       preset (f32 = exact, the default; f16, bf16, llama.cpp-cpu,\n"
        "                       llama.cpp-cpu-nofa, llama.cpp-cuda-f16, vllm-bf16, vllm-f16)\n"
        "                       and/or parts act=, mm_in=, mm_acc=, kv=, act_q=, attn=,\n"
        "                       softmax=, norm=, rope=, state= (kv=f8_e4m3: an fp8 cache),\n"
        "                       e.g. act=f16,kv=f16 or llama.cpp-cpu,kv=f32; applies to the\n"
        "                       drafter too; the trace records it (meta numerics)\n"
        "  --argmax RULE        how greedy argmax treats non-finite logits: first (default),\n"
        "                       torch, triton-block:N (see doc/argmax.md)\n"
        "  --chat-template NAME render messages with chatml, qwen2, qwen3, llama2, llama3,\n"
        "                       llama3.1, mistral, mistral-v0, zephyr or harmony (gpt-oss;\n"
        "                       \"reasoning_effort\" low|medium|high) (or the template in a .jinja\n"
        "                       file) instead of the template detected from the model\n"
        "  --ignore-eos         keep generating past end-of-generation tokens\n"
        "  --json               print one JSON object: prompt_ids, completion_ids, text,\n"
        "                       finish_reason, timings\n"
        "  --trace OUT.db       record the run into a SQLite trace (taps, logit snapshots,\n"
        "                       token trail, events, backtraces); see doc/trace-format.md.\n"
        "                       Created new, mode 0600 (it holds the prompt); an existing\n"
        "                       OUT.db is refused, and never replaced if it is not a\n"
        "                       bangtrace trace, is a link, a device or an input of the run,\n"
        "                       or another run is writing it\n"
        "  --force              replace OUT.db if it is an existing bangtrace trace\n"
        "  --taps MODE          all (default), layers (each layer's output), logits, none\n"
        "  --tap-layers A-B     tap only layers A..B\n"
        "  --timing             also record each op's host wall time (table op_timings;\n"
        "                       export --perfetto shows them): the time since the previous\n"
        "                       op, so it needs --taps all and no --tap-layers\n"
        "  --logits MODE        flagged (default: full rows only at the first non-finite\n"
        "                       step and at a collapse) or full (every step)\n"
        "  --topk K             top-k ids kept in each logit snapshot (default 20)\n"
        "  --inject SPEC        fault injection, repeatable (doc/inject.md), e.g.\n"
        "                       nan@layer=3,op=ffn_gate,step=9 (add model=draft for the drafter)\n"
        "  --spec-k K           speculative decoding: draft K tokens per target verify, with\n"
        "  --draft MODEL          a draft model sharing the target's vocabulary, or\n"
        "  --draft-self N         the target's first N layers + its output norm and head, or\n"
        "  --draft-ngram N        prompt lookup of the last N tokens in the context, or\n"
        "  --draft-mtp            the model's own MTP (nextn) block (hybrid and deepseek2\n"
        "                         models that have one), paired with the target's hidden states as\n"
        "                         llama.cpp's draft-mtp pairs them\n"
        "                       Greedy output is identical to plain decoding; sampling uses\n"
        "                       speculative rejection sampling (same distribution).\n\n"
        "Flags override the request body. Exit status: 0 done; 1 the argmax rule produced an\n"
        "id outside the vocabulary (finish_reason \"invalid_token\"), as a broken kernel would;\n"
        "2 error (a trace write that fails, e.g. a full disk, is one line and exit 2; the\n"
        "steps already committed stay readable). SIGINT, SIGTERM, SIGHUP and SIGPIPE stop a\n"
        "traced run between steps: the trace gets an `interrupted` event and status, is\n"
        "closed as one self-contained file, and bangtrace dies by the signal (130, 143, ...).\n");
}

typedef struct run_opts {
    const char *model, *tokenizer, *prompt, *request, *chat_template, *argmax;
    long n; bool has_n;
    double temp; bool has_temp;
    long top_k; bool has_top_k;
    double top_p; bool has_top_p;
    unsigned long long seed; bool has_seed;
    long threads, ctx;
    bool json, ignore_eos, force, timing, cuda_graphs, cupti;
    const char *trace;
    int taps;                 /* bt_taps_mode */
    int layer_lo, layer_hi;
    bool logits_full;
    long topk;
    const char *inject[32];
    int n_inject;
    long spec_k;
    const char *draft_model;
    long draft_self, draft_ngram;
    bool draft_mtp;
    const char *numerics_spec;
    bt_numerics numerics;
    bool llamacpp;            /* --engine llama.cpp */
    bt_llama_settings llama;  /* its path: --llama-* (session.h) */
    const char *device;
} run_opts;

static int parse_args(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof(*o));
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_TOKENIZER | BT_ARGS_COMPUTE | BT_ARGS_T | BT_ARGS_NUMERICS |
                          BT_ARGS_ENGINE | BT_ARGS_LLAMA,
                  .threads = bt_pool_default_threads() };
    o->layer_lo = o->layer_hi = -1;
    o->topk = 20;
    for (int i = 1; i < argc; i++) {
        bool taken;
        if (bt_args_take(&g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return bt_error(BT_EINVAL, "%s needs a value", a); i++; } while (0)
        long l; double d;
        if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) { VAL(); o->prompt = v; }
        else if (!strcmp(a, "--request")) { VAL(); o->request = v; }
        else if (!strcmp(a, "--chat-template")) { VAL(); o->chat_template = v; }
        else if (!strcmp(a, "--argmax")) { VAL(); o->argmax = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
            VAL(); if (bt_parse_int(a, v, 0, 1 << 20, &l)) return BT_EINVAL; o->n = l; o->has_n = true;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            VAL(); if (bt_parse_float(a, v, 0, 100, &d)) return BT_EINVAL; o->temp = d; o->has_temp = true;
        } else if (!strcmp(a, "--top-k")) {
            VAL(); if (bt_parse_int(a, v, 0, 1 << 24, &l)) return BT_EINVAL; o->top_k = l; o->has_top_k = true;
        } else if (!strcmp(a, "--top-p")) {
            VAL(); if (bt_parse_float(a, v, 1e-9, 1, &d)) return BT_EINVAL; o->top_p = d; o->has_top_p = true;
        } else if (!strcmp(a, "--seed")) {
            VAL(); if (bt_parse_u64(a, v, &o->seed)) return BT_EINVAL;
            o->has_seed = true;
        } else if (!strcmp(a, "--trace")) { VAL(); o->trace = v; }
        else if (!strcmp(a, "--taps")) {
            VAL(); if ((o->taps = bt_taps_mode_parse(v)) < 0) return bt_error(BT_EINVAL, "--taps expects all, layers, logits or none, got '%s'", v);
        } else if (!strcmp(a, "--tap-layers")) {
            VAL(); char *end; long lo = strtol(v, &end, 10), hi = lo;
            if (end != v && *end == '-') { const char *h = end + 1; hi = strtol(h, &end, 10); if (end == h) end = (char *)"x"; }
            if (end == v || *end || lo < 0 || hi < lo || hi > 100000) return bt_error(BT_EINVAL, "--tap-layers expects A-B (e.g. 3-7), got '%s'", v);
            o->layer_lo = (int)lo; o->layer_hi = (int)hi;
        } else if (!strcmp(a, "--logits")) {
            VAL(); if (!strcmp(v, "full")) o->logits_full = true;
            else if (strcmp(v, "flagged")) return bt_error(BT_EINVAL, "--logits expects flagged or full, got '%s'", v);
        } else if (!strcmp(a, "--topk")) {
            VAL(); if (bt_parse_int(a, v, 1, 64, &o->topk)) return BT_EINVAL;
        } else if (!strcmp(a, "--inject")) {
            VAL(); if (o->n_inject == 32) return bt_error(BT_EINVAL, "at most 32 --inject specs");
            o->inject[o->n_inject++] = v;
        } else if (!strcmp(a, "--spec-k")) {
            VAL(); if (bt_parse_int(a, v, 1, 64, &o->spec_k)) return BT_EINVAL;
        } else if (!strcmp(a, "--draft")) { VAL(); o->draft_model = v; }
        else if (!strcmp(a, "--draft-self")) {
            VAL(); if (bt_parse_int(a, v, 1, 100000, &o->draft_self)) return BT_EINVAL;
        } else if (!strcmp(a, "--draft-mtp")) {
            o->draft_mtp = true;
        } else if (!strcmp(a, "--draft-ngram")) {
            VAL(); if (bt_parse_int(a, v, 1, 64, &o->draft_ngram)) return BT_EINVAL;
        } else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = true;
        else if (!strcmp(a, "--force")) o->force = true;
        else if (!strcmp(a, "--timing")) o->timing = true;
        else if (!strcmp(a, "--cuda-graphs")) o->cuda_graphs = true;
        else if (!strcmp(a, "--cupti")) o->cupti = true;
        else return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help run)", a);
#undef VAL
    }
    /* the groups' values under the names the rest of run (and its meta) reads */
    o->model = g.model; o->tokenizer = g.tokenizer; o->threads = g.threads; o->ctx = g.ctx; o->device = g.device;
    o->numerics_spec = g.numerics_spec; o->numerics = g.numerics; o->llamacpp = g.llamacpp;
    if (bt_args_need_model(&g, "run")) return BT_EINVAL;
    if (o->force && !o->trace) return bt_error(BT_EINVAL, "--force replaces an existing --trace file: give --trace OUT.db");
    if (o->timing && !o->trace) return bt_error(BT_EINVAL, "--timing records op durations into the trace: give --trace OUT.db");
    if (o->timing && (o->taps != BT_TAPS_ALL || o->layer_lo >= 0))
        return bt_error(BT_EINVAL, "--timing needs every op tapped (--taps all, no --tap-layers): an op's duration is the time since the previous tapped op");
    for (int f = 0; f < 2; f++) {
        int feature = f ? BT_BACKEND_ACTIVITY : BT_BACKEND_GRAPHS;
        if (!(f ? o->cupti : o->cuda_graphs)) continue;
        if (o->llamacpp)
            return bt_error(BT_EINVAL, "%s is for the native engine's CUDA backend, not --engine llama.cpp", bt_backend_feature_flag(feature));
        if (bt_args_need_feature(&g, feature)) return BT_EINVAL;
    }
    if (o->cupti && !o->trace) return bt_error(BT_EINVAL, "--cupti records device activity into the trace: give --trace OUT.db");
    if (!o->prompt == !o->request) return bt_error(BT_EINVAL, "give exactly one of --prompt or --request");
    int drafters = (o->draft_model != NULL) + (o->draft_self > 0) + (o->draft_ngram > 0) + o->draft_mtp;
    if (drafters > 1) return bt_error(BT_EINVAL, "give one drafter: --draft, --draft-self, --draft-ngram or --draft-mtp");
    if (drafters && !o->spec_k) return bt_error(BT_EINVAL, "a drafter needs --spec-k K (tokens drafted per verify)");
    if (o->spec_k && !drafters)
        return bt_error(BT_EINVAL, "--spec-k needs a drafter: --draft MODEL, --draft-self N, --draft-ngram N or --draft-mtp");
    if (o->llamacpp && bt_llamacpp_device(o->device, NULL)) return BT_EINVAL;
    if (o->llamacpp && o->numerics_spec)
        return bt_error(BT_EINVAL, "--numerics emulates numerics on the native engine; it cannot apply to --engine llama.cpp");
    if (o->llamacpp && (o->spec_k || drafters) && !o->draft_mtp)
        return bt_error(BT_EINVAL, "--engine llama.cpp drafts only with --draft-mtp (llama.cpp's own MTP path): "
                        "drop --draft/--draft-self/--draft-ngram");
    if (o->llamacpp && o->tokenizer)
        return bt_error(BT_EINVAL, "--engine llama.cpp needs a GGUF model (with its vocabulary); --tokenizer is for llama2.c checkpoints");
    if (bt_args_llama_finish(&g, o->llamacpp, "--engine llama.cpp")) return BT_EINVAL;
    o->llama = g.llama;
    return BT_OK;
}

static const char *prompt_text_of(const run_opts *o, const bt_request *req)
{
    return o->prompt ? o->prompt : req->prompt ? req->prompt : NULL;
}

/* Everything `report` and `bisect --reference` need besides the model file. */
typedef struct run_meta {
    int argc; char **argv;
    const run_opts *o;
    const bt_request *req;
    const bt_sampler_cfg *sc;
    const char *prompt_text;
} run_meta;

/* The session's meta callback: called once the trace exists. */
/* The session's engine hook for --engine llama.cpp (bt_session_cfg.engine_new). */
static int llamacpp_engine(void *user, const bt_model *m, int ctx, int max_batch, int threads, bt_engine **out)
{
    const run_opts *o = user;
    bt_llamacpp_opts lo = { .model_path = o->model, .ctx_len = ctx, .max_batch = max_batch, .n_threads = threads,
                            .device = o->device, .llama = &o->llama, .mtp_k = o->draft_mtp ? (int)o->spec_k : 0 };
    return bt_llamacpp_engine_new(m, &lo, out);
}

static int llamacpp_mtp(void *user, bt_engine *target, bt_engine **out)
{
    (void)user;
    return bt_llamacpp_mtp_engine_new(target, out);
}

static int write_meta(void *user, bt_trace *t, const bt_session *s)
{
    const run_meta *rm = user;
    const run_opts *o = rm->o;
    char llama[512] = "";
    if (o->llamacpp) bt_llama_settings_describe(&o->llama, llama, sizeof(llama));
    bt_run_meta_src src = { .argc = rm->argc, .argv = rm->argv, .model = bt_session_model(s), .tok = bt_session_tokenizer(s),
                            .model_path = o->model, .tokenizer_path = o->tokenizer,
                            .model_sha256 = bt_session_model_sha256(s), .device = o->device, .llamacpp = o->llamacpp,
                            .threads = (int)o->threads, .numerics = &o->numerics, .sc = rm->sc,
                            .inj = bt_session_injector(s), .request_json = rm->req->json, .prompt_text = rm->prompt_text,
                            .taps = o->taps, .layer_lo = o->layer_lo, .layer_hi = o->layer_hi, .logits_full = o->logits_full };
    char backend[64];       /* as the opened backend names itself (the device table) */
    if (!o->llamacpp) {
        bt_backend_trace_name(bt_engine_backend(bt_session_engine(s)), backend, sizeof(backend));
        src.backend = backend;
    }
    if (o->llamacpp) {
        src.llama_version = bt_llamacpp_version();
        src.llama_lib_version = bt_llamacpp_lib_version();
        src.llama_build = bt_llamacpp_build_flags();
        src.llama_settings = llama;
        src.llama_path = bt_llamacpp_last_path();
    }
    return bt_run_meta_write(t, &src);
}

/* The generation loop's callbacks: the completion streamed to stdout, and
 * a pending SIGINT & co. stopping a traced run between steps. */
typedef struct run_stream { bool trace; } run_stream;

static int print_text(void *user, const char *s, size_t n)
{
    (void)user;
    /* whole characters only: a terminal gets them escaped */
    bt_text_fput_output(s, n, stdout);
    fflush(stdout);
    return 0;
}

static int poll_interrupt(void *user)
{
    const run_stream *rs = user;
    return rs->trace ? bt_interrupt_pending() : 0;
}

static void json_ids(json_t *obj, const char *key, const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    json_object_set_new(obj, key, a);
}

/* SIGINT & co. stopped a traced run between steps: every step so far is
 * committed; say where it stopped, close the trace as one file, let main
 * die by the signal (the status returned). */
static int run_interrupted(bt_session *ses, const bt_generate_out *g, const char *trace_path)
{
    bt_recorder *rec = bt_session_recorder(ses);
    bt_trace *trace = bt_session_trace(ses);
    int intr = g->stopped;
    int step = rec ? bt_recorder_current_step(rec) : -1;
    char detail[160];
    snprintf(detail, sizeof(detail), "%s after %d generated tokens; last committed step %d",
             bt_signal_name(intr), g->n_ids, step);
    int tr = bt_trace_event(trace, step, -1, "interrupted", -1, NULL, NULL, detail, NULL);
    int tc = bt_session_close_trace(ses, bt_trace_failed(trace) ? BT_TRACE_STATUS_IO_ERROR : BT_TRACE_STATUS_INTERRUPTED);
    if (g->streamed) putchar('\n');
    fflush(stdout);
    if (tr || tc) fprintf(stderr, "bangtrace: run: %s\n", bt_errmsg());
    fprintf(stderr, "bangtrace: run: interrupted by %s at step %d; trace closed: %s\n", bt_signal_name(intr), step, trace_path);
    return 128 + intr;
}

typedef struct run_times { double load, prompt, decode; } run_times;

/* The completion's end on stdout (--json: the one object) and the summary
 * lines on stderr. BT_ENOMEM if the JSON cannot be built. */
static int print_result(const run_opts *o, const bt_model *m, const int32_t *prompt, size_t n_prompt,
                        const bt_generate_out *g, const char *drafter_name, const run_times *tm)
{
    const bt_decoder_stats *ds = &g->stats;
    int decoded = g->n_ids;
    /* the first token comes from the prefill: decode rate over the rest;
     * NAN (JSON null, "n/a") when an interval is too short to time */
    double pps = bt_rate((double)n_prompt, tm->prompt), dps = bt_rate(decoded - 1, tm->decode);
    char pps_s[32], dps_s[32];
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(m->cfg.name));
        json_ids(j, "prompt_ids", prompt, n_prompt);
        json_ids(j, "completion_ids", g->ids, (size_t)g->n_ids);
        size_t m;
        char *u = bt_text_utf8_repair(g->text ? g->text : "", g->text ? g->text_len : 0, &m);
        json_object_set_new(j, "text", u ? json_stringn(u, m) : json_null());   /* bytes no UTF-8 holds: U+FFFD */
        free(u);
        json_object_set_new(j, "finish_reason", json_string(g->finish));
        json_t *t = json_object();
        json_object_set_new(t, "load_ms", json_real(tm->load * 1e3));
        json_object_set_new(t, "prompt_ms", json_real(tm->prompt * 1e3));
        json_object_set_new(t, "decode_ms", json_real(tm->decode * 1e3));
        json_object_set_new(t, "prompt_tokens_per_s", isnan(pps) ? json_null() : json_real(pps));
        json_object_set_new(t, "decode_tokens_per_s", isnan(dps) ? json_null() : json_real(dps));
        json_object_set_new(j, "timings", t);
        if (o->spec_k)
            json_object_set_new(j, "speculation", json_pack("{s:s,s:i,s:i,s:i,s:i,s:f,s:i}", "drafter", drafter_name,
                                "k", (int)o->spec_k, "verify_steps", ds->verify_steps, "drafted", ds->drafted,
                                "accepted", ds->accepted, "acceptance", ds->drafted ? (double)ds->accepted / ds->drafted : 0.0,
                                "target_forwards", ds->target_forwards));
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(j);
        if (!s) return bt_error(BT_ENOMEM, "out of memory");
        puts(s);
        free(s);
    } else {
        /* the text itself was streamed by the generation loop */
        if (g->text_len && g->text[g->text_len - 1] != '\n') putchar('\n');
        fflush(stdout);
    }
    if (o->spec_k)
        bt_log("bangtrace: speculation %s k=%ld: %d verify steps, %d of %d drafted tokens accepted (%.0f%%), %d target forwards",
               drafter_name, o->spec_k, ds->verify_steps, ds->accepted, ds->drafted,
               ds->drafted ? 100.0 * ds->accepted / ds->drafted : 0.0, ds->target_forwards);
    bt_log("bangtrace: %zu prompt tokens in %.1f ms (%s), %d generated in %.1f ms (decode %s), finish_reason %s",
           n_prompt, tm->prompt * 1e3, bt_rate_fmt((double)n_prompt, tm->prompt, pps_s, sizeof(pps_s)), decoded,
           tm->decode * 1e3, bt_rate_fmt(decoded - 1, tm->decode, dps_s, sizeof(dps_s)), g->finish);
    return BT_OK;
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    bt_request req;
    memset(&req, 0, sizeof(req));
    bt_session *ses = NULL;
    const bt_model *m = NULL;
    const bt_tokenizer *tok = NULL;
    bt_engine *e = NULL;
    bt_sampler *smp = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    bt_generate_out gout = { 0 };
    int status = 2;
    bt_trace *trace = NULL;
    bt_recorder *rec = NULL;
    const char *drafter_name = "";

    if (parse_args(argc, argv, &o)) goto fail;
    if (o.trace) {
        /* Refuse a bad --trace before minutes of model loading; the create
         * below is exclusive anyway, this is for the message and the inputs. */
        const bt_out_input in[] = { { "--model", o.model }, { "--tokenizer", o.tokenizer },
                                    { "--draft", o.draft_model }, { "--request", o.request } };
        if (bt_outfile_check(o.trace, BT_OUT_TRACE, o.force, in, (int)BT_ARRAY_SIZE(in), NULL)) goto fail;
    }
    if (o.request) {
        char *body; size_t len;
        if (!strcmp(o.request, "-")) {
            if (bt_read_file("/dev/stdin", &body, &len)) goto fail;
        } else if (bt_read_file(o.request, &body, &len)) goto fail;
        int rc = bt_request_parse(body, len, o.request, &req);
        free(body);
        if (rc) goto fail;
    }
    bt_sampler_cfg sc = { .temperature = 0, .top_k = 0, .top_p = 1, .seed = 42 };
    long n_max = 128;
    if (req.has_max_tokens) n_max = req.max_tokens;
    if (req.has_temperature) sc.temperature = req.temperature;
    if (req.has_top_k) sc.top_k = req.top_k;
    if (req.has_top_p) sc.top_p = req.top_p;
    if (req.has_seed) sc.seed = req.seed;
    if (o.has_n) n_max = o.n;
    if (o.has_temp) sc.temperature = (float)o.temp;
    if (o.has_top_k) sc.top_k = (int)o.top_k;
    if (o.has_top_p) sc.top_p = (float)o.top_p;
    if (o.has_seed) sc.seed = o.seed;
    if (bt_argmax_parse(o.argmax ? o.argmax : "first", &sc.rule)) goto fail;

    double t0 = bt_now();
    run_meta rm = { argc, argv, &o, &req, &sc, prompt_text_of(&o, &req) };
    bt_session_cfg cfg = { .model = o.model, .tokenizer = o.tokenizer, .draft_model = o.draft_model,
                           .need_vocab = true, .need_weights = true, .ctx = (int)o.ctx, .threads = (int)o.threads,
                           .device = o.device, .spec_k = (int)o.spec_k, .draft_self = (int)o.draft_self, .draft_ngram = (int)o.draft_ngram,
                           .draft_mtp = o.draft_mtp,
                           .inject = o.inject, .n_inject = o.n_inject,
                           .trace = o.trace, .force = o.force, .taps = o.taps, .layer_lo = o.layer_lo,
                           .layer_hi = o.layer_hi, .logits_full = o.logits_full, .topk = (int)o.topk, .rule = sc.rule,
                           .meta = write_meta, .meta_user = &rm, .hooks = true,
                           .numerics = &o.numerics, .seed = sc.seed, .timing = o.timing,
                           .cuda_graphs = o.cuda_graphs, .cupti = o.cupti };
    if (bt_session_open(&cfg, &ses)) goto fail;
    m = bt_session_model(ses);
    tok = bt_session_tokenizer(ses);
    if (o.llamacpp && strcmp(m->format, "gguf")) { bt_error(BT_EINVAL, "--engine llama.cpp: %s is not a GGUF file", o.model); goto fail; }
    if (bt_request_prompt_ids(&req, o.prompt, o.chat_template, m, tok, &prompt, &n_prompt)) goto fail;
    int ctx = bt_session_ctx(ses);
    bt_debug("kernels: cpu-%s, %ld threads; context %d (model %d), max tokens %ld", bt_kernels_simd(), o.threads, ctx,
             m->cfg.ctx_len, n_max);
    bt_debug("sampling: temperature %g, top_k %d, top_p %g, seed %llu, argmax %s%s", (double)sc.temperature, sc.top_k,
             (double)sc.top_p, (unsigned long long)sc.seed, o.argmax ? o.argmax : "first", o.ignore_eos ? ", ignoring EOS" : "");
    bt_debug("prompt: %zu tokens%s", n_prompt, req.n_messages ? " (chat template applied)" : "");
    if ((long)n_prompt > ctx) { bt_error(BT_ERANGE, "the prompt has %zu tokens but the context is %d (use --ctx)", n_prompt, ctx); goto fail; }
    if ((long)n_prompt + n_max > ctx) {
        bt_warn("prompt (%zu) + max tokens (%ld) exceed the context (%d): generating at most %ld", n_prompt, n_max, ctx, ctx - (long)n_prompt);
        n_max = ctx - (long)n_prompt;
    }
    cfg.max_batch = (int)n_prompt + (int)o.spec_k + 1;
    cfg.max_tokens = n_max;
    cfg.prompt = prompt;
    cfg.n_prompt = (int)n_prompt;
    if (o.llamacpp) { cfg.engine_new = llamacpp_engine; cfg.draft_mtp_new = llamacpp_mtp; cfg.engine_user = &o; cfg.llama = o.llama; }
    if (o.trace)
        bt_debug("trace %s: taps %s, logits %s, top-k %ld%s", o.trace, bt_taps_mode_name(o.taps),
                 o.logits_full ? "full" : "flagged", o.topk, o.n_inject ? ", with fault injection" : "");
    if (bt_session_start(ses, &cfg)) goto fail;
    if (bt_sampler_new(&sc, m->cfg.n_vocab, &smp)) goto fail;
    e = bt_session_engine(ses);
    rec = bt_session_recorder(ses);
    trace = bt_session_trace(ses);
    drafter_name = bt_session_drafter_name(ses);
    double t_load = bt_now() - t0;
    char rule[48];
    bt_argmax_format(&sc.rule, rule, sizeof(rule));
    bt_log("bangtrace: %s (%s, %d layers, dim %d, vocab %d) loaded in %.0f ms; %zu prompt tokens, "
           "%d threads, %s, argmax %s", m->cfg.name, m->format, m->cfg.n_layers, m->cfg.dim, m->cfg.n_vocab,
           t_load * 1e3, n_prompt, (int)o.threads, sc.temperature > 0 ? "sampling" : "greedy", rule);
    if (o.llamacpp) bt_log("bangtrace: llama.cpp path: %s", bt_llamacpp_last_path());

    run_stream rs = { .trace = trace != NULL };
    bt_generate_cfg gcfg = { .dec = { .smp = smp, .greedy = sc.temperature <= 0, .rule = sc.rule, .tok = tok,
                                      .ignore_eos = o.ignore_eos },
                             .model = m, .tok = tok, .prompt = prompt, .n_prompt = (int)n_prompt, .max_tokens = n_max,
                             .ignore_eos = o.ignore_eos, .stop = req.stop, .n_stop = req.n_stop,
                             .on_text = o.json ? NULL : print_text, .poll = poll_interrupt, .user = &rs };
    bt_session_decoder_cfg(ses, &gcfg.dec);
    double t1 = bt_now();
    int rc = bt_generate(&gcfg, &gout);
    double t_prompt = gout.stats.prefill_s;
    if (rc) goto fail;
    if (!strcmp(gout.finish, "invalid_token")) {
        bt_error(BT_ERANGE, "the argmax rule %s produced id %d, outside the vocabulary (%d): "
                 "the logits were not finite", rule, gout.ids[gout.n_ids - 1], m->cfg.n_vocab);
        fprintf(stderr, "bangtrace: run: %s\n", bt_errmsg());
        status = 1;
    }
    if (gout.stopped) {
        status = run_interrupted(ses, &gout, o.trace);
        trace = NULL;
        goto out;
    }
    double t2 = t1 + t_prompt, t_end = bt_now();
    if (rec && (rc = bt_recorder_inject_unfired(rec, NULL))) goto fail;
    if (trace) {
        /* the count every reader prints (bt_analyze_generated) */
        if ((rc = bt_run_meta_write_generated(trace, gout.n_ids))) goto fail;
    }
    if (rec && (rc = bt_recorder_finish(rec, gout.finish))) goto fail;
    if (trace) {
        int tr = bt_session_close_trace(ses, BT_TRACE_STATUS_OK);
        trace = NULL;
        if (tr) goto fail;
        bt_log("bangtrace: trace %s: %lld bytes, %d events", o.trace, (long long)bt_trace_size(o.trace),
               bt_recorder_n_events(rec));
    }
    if (status == 2) status = 0;
    run_times tm = { .load = t_load, .prompt = t_prompt, .decode = t_end - t2 };
    if (print_result(&o, m, prompt, n_prompt, &gout, drafter_name, &tm)) { status = 2; goto fail; }
    goto out;
fail:
    /* the session may have got part way: ask it, not the locals */
    rec = ses ? bt_session_recorder(ses) : NULL;
    trace = ses ? bt_session_trace(ses) : NULL;
    e = ses ? bt_session_engine(ses) : NULL;
    if (rec && bt_recorder_status(rec) && !*bt_errmsg()) bt_error(bt_recorder_status(rec), "trace write failed");
    status = bt_cmd_fail("run");
    if (trace) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", bt_errmsg());
        bt_trace_event(trace, e ? bt_engine_step(e) : -1, -1, "error", -1, NULL, NULL, msg, NULL);
    }
out:
    bt_session_close(ses, status != 2 ? BT_TRACE_STATUS_OK : NULL);
    free(prompt);
    bt_generate_out_clear(&gout);
    bt_sampler_free(smp);
    bt_request_clear(&req);
    return status;
}
