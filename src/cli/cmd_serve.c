/* cmd_serve.c - `bangtrace serve`: an OpenAI-compatible HTTP server on the
 * native engine (libmicrohttpd), with a trace per request.
 *
 * Concurrency: --parallel N slots, each its own engine (KV cache and
 * activations) over the one mmap'd model; a request waits for a free slot,
 * and beyond --queue waiting requests the server answers 503 (before the
 * prompt is tokenized). libmicrohttpd runs a thread per connection, each
 * on poll() (no FD_SETSIZE ceiling), at most --max-connections of them, and
 * drops a connection idle for --timeout seconds, so slow clients cannot
 * lock others out. Streaming runs the generation in a producer thread that
 * feeds the connection's content reader through a small buffer.
 *
 * Shutdown (SIGTERM/SIGINT/SIGHUP): no new connections, queued requests get
 * 503, in-flight ones finish as "cancelled" and their answers are sent; then
 * the daemon stops (exit 0), or after DRAIN_S seconds regardless (exit 1). A
 * second signal kills at once.
 *
 * Traces: a trace that cannot be written (full disk, a --trace-dir gone or
 * read-only, a file size limit) costs the client nothing: the request is
 * answered untraced, the partial trace and its -wal/-shm are removed, stderr
 * says why, /health says "degraded", and tracing pauses for TRACE_PAUSE_S.
 *
 * Generation is bt_gen_request() (src/run/slot.c), the per-request half of
 * the session module that run and bench are moving to. */
#include "cmd.h"
#include "args.h"
#include "config.h"
#include "base/util.h"

#include <stdio.h>

/* The usage lines, the same with or without libmicrohttpd (the man page
 * and tests/manpage.sh read them). */
#define SERVE_USAGE \
    "usage: bangtrace serve --model M [--tokenizer T] [--host ADDR] [--port N] [--parallel N]\n" \
    "                       [--queue N] [--threads N] [--ctx N] [--trace-dir DIR]\n" \
    "                       [--trace all|sample:N|flagged] [--inject SPEC]...\n" \
    "                       [--served-model-name NAME[,NAME...]]... [--timeout S]\n" \
    "                       [--max-connections N] [--max-connections-per-ip N]\n" \
    "                       [--batching on|off] [--block-size N] [--kv-blocks N]\n" \
    "                       [--prefix-cache on|off] [--batch-rows N] [--state-snapshots N]\n" \
    "                       [--engine native|llama.cpp] [--llama-flash-attn M] [--llama-repack on|off]\n" \
    "                       [--llama-kv-type T] [--llama-opt K=V]\n\n"

#ifndef HAVE_LIBMICROHTTPD
void cmd_serve_help(FILE *out)
{
    fprintf(out, SERVE_USAGE
                 "This bangtrace was built without libmicrohttpd: serve is unavailable\n"
                 "(install libmicrohttpd-dev and reconfigure).\n");
}
int cmd_serve(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "bangtrace: serve: this bangtrace was built without libmicrohttpd (install libmicrohttpd-dev and reconfigure)\n");
    return 2;
}
#else

#include "engine/engine.h"
#include "engines/llamacpp/llamacpp.h"
#include "model/model.h"
#include "prod/classify.h"
#include "run/slot.h"
#include "run/batcher.h"
#include "gen/request.h"
#include "run/session.h"           /* bt_llama_settings */
#include "sys/crash.h"
#include "tap/inject.h"
#include "tokenizer/tokenizer.h"
#include "kernels/cpu/kernels.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#define BODY_LIMIT (1u << 20)    /* a request body over 1 MiB is refused (413) */
#define MAX_NAMES 16             /* --served-model-name names */
#define DRAIN_S 5                /* shutdown: seconds in-flight answers get to be sent */
#define TRACE_PAUSE_S 30         /* after a trace write failed: seconds without tracing */

void cmd_serve_help(FILE *out)
{
    fprintf(out,
        SERVE_USAGE
        "An OpenAI-compatible server on the native engine or llama.cpp: POST\n"
        "/v1/completions and /v1/chat/completions (\"stream\": true answers as\n"
        "server-sent events), GET /v1/models and /health. Every answer carries an\n"
        "x-request-id header; with --trace-dir the request is recorded into\n"
        "DIR/<request id>.db.\n\n"
        "On the native engine requests are batched (--batching on, the default): one\n"
        "engine runs every running request's rows in each forward (continuous batching,\n"
        "prefill and decode mixed) over a paged KV cache (blocks of --block-size\n"
        "positions, a block table per request) with a prefix cache (full blocks found by\n"
        "the hash of their tokens and every token before them, reused across requests);\n"
        "a hybrid model's recurrent state lives in one slot per lane, reset when a\n"
        "request starts; a forward ending on a block boundary snapshots it there, and a\n"
        "prefix hit resumes from the last boundary with a snapshot. Every answer is the\n"
        "one the request gets alone. With --trace-dir, DIR/server.db (server-2.db, ... when one is there)\n"
        "records each forward's requests and tokens, the blocks each request read and\n"
        "wrote, each block's hash, writer and life, and the state slots' resets; each\n"
        "request's trace gets its own blocks (kv_access), and bisect and report name the\n"
        "request that wrote cached data a bad request read (doc/serve.md).\n\n"
        "  --model M            GGUF model, Hugging Face model folder (DIR), or llama2.c\n"
        "                       checkpoint (.bin)\n"
        "  --tokenizer T        llama2.c tokenizer.bin (llama2.c checkpoints only)\n"
        "  --host ADDR          IPv4 address to bind (default 127.0.0.1)\n"
        "  --port N             TCP port (default 8080; 0 picks a free one, printed on stderr)\n"
        "  --parallel N         requests generated at once (default 1): the batch's lanes;\n"
        "                       with --batching off, N engines sharing the mmap'd weights;\n"
        "                       with --engine llama.cpp, N sequences of one llama.cpp context\n"
        "  --batching on|off    on (default on the native engine): the batched server above;\n"
        "                       off: each request on an engine of its own (KV cache and all)\n"
        "  --block-size N       positions per KV block (default 16)\n"
        "  --kv-blocks N        KV blocks in all (default: --parallel x the blocks of --ctx,\n"
        "                       the memory --batching off takes; fewer can run out: a request\n"
        "                       that finds none free fails with \"the KV cache is full\")\n"
        "  --prefix-cache on|off  reuse cached full blocks across requests (default on)\n"
        "  --batch-rows N       token rows per batched forward (default 512; a longer\n"
        "                       prompt is prefilled in chunks of it)\n"
        "  --state-snapshots N  hybrid models: recurrent state snapshots kept for prefix hits\n"
        "                       (default 8 per lane, at most 1 GiB)\n"
        "  --queue N            requests allowed to wait for an engine; beyond, 503 (default 16)\n"
        "  --threads N          compute threads (batched: the one engine's, default online\n"
        "                       CPUs; --batching off: per engine, default online CPUs / N;\n"
        "                       --engine llama.cpp: the context's, default online CPUs)\n"
        "  --ctx N              context length per engine, or per llama.cpp sequence (default:\n"
        "                       the model's, at most 4096)\n"
        "  --engine NAME        native (default) or llama.cpp: llama-server's slots, one\n"
        "                       context of the pinned llama.cpp with --parallel sequences\n"
        "                       (a KV cache of --ctx cells each, as llama-server --parallel N),\n"
        "                       slot i on sequence i, cleared when a request takes it;\n"
        "                       decodes take turns, one sequence each, so a request's\n"
        "                       trace holds its own taps; GGUF models only; no kvcorrupt\n"
        "                       or bitflip --inject (doc/llama-cpp.md)\n"
        "  --llama-flash-attn M with --engine llama.cpp: auto (default), on or off\n"
        "  --llama-repack on|off  with --engine llama.cpp: repacked weights on (default) or off\n"
        "  --llama-kv-type T    with --engine llama.cpp: f16 (default), f32, bf16 or q8_0\n"
        "  --llama-opt KEY=VAL  one llama.cpp setting, as run takes it (bangtrace help run);\n"
        "                       each trace's meta records the path (llama_cpp_settings,\n"
        "                       llama_cpp_path) and its sequence (llama_cpp_seq)\n"
        "  --trace-dir DIR      record requests into DIR/<request id>.db (DIR is created,\n"
        "                       mode 0700; a trace is never overwritten)\n"
        "  --trace MODE         which requests: all (default), sample:N (every Nth), flagged\n"
        "                       (those whose answer the classifier flags: the request is\n"
        "                       generated again, deterministically, with the trace on)\n"
        "  --inject SPEC        fault injection for every request, repeatable (doc/inject.md);\n"
        "                       p=P makes a spec fire on a fraction P of requests, drawn from\n"
        "                       the request's number. The batched server's own faults\n"
        "                       (NAME or NAME@p=P): prefix_wrong (a prefix hit maps another\n"
        "                       cached block), pad_nan (the batch's padding lane writes NaN\n"
        "                       into block 0's first row, which later hits map),\n"
        "                       slot_noreset (hybrid: the state slot keeps the previous\n"
        "                       request's state), slot_swap (hybrid: sharing a batch, the\n"
        "                       request's rows run on another request's state slot);\n"
        "                       kvcorrupt needs --batching off\n"
        "  --served-model-name NAME[,NAME...]\n"
        "                       the model names requests may ask for, repeatable; others\n"
        "                       get 404 and /v1/models lists these (default: any name is\n"
        "                       accepted, as llama-server does; /v1/models lists the\n"
        "                       model's file name)\n"
        "  --timeout S          drop a connection idle for S seconds, e.g. a client that\n"
        "                       trickles its headers or stops reading (default 10)\n"
        "  --max-connections N  open connections at most; beyond, new ones are closed at\n"
        "                       once (default 2048, lowered to what the open-file limit\n"
        "                       allows)\n"
        "  --max-connections-per-ip N\n"
        "                       open connections from one client address at most (default:\n"
        "                       no limit; behind a proxy every client is the proxy)\n\n"
        "Requests: prompt or messages, max_tokens (default 128), temperature (default 0:\n"
        "greedy), top_p, top_k, seed, stop, stream. Bad requests get OpenAI-style error JSON:\n"
        "400 (malformed JSON, wrong types, max_tokens past the context), 404 (unknown path, or\n"
        "a model outside --served-model-name), 405, 413 (body over 1 MiB), 503 (queue full,\n"
        "checked before the prompt is tokenized, or shutting down).\n"
        "GET/HEAD /health: 200 {\"status\":\"ok\"}, or 200 {\"status\":\"degraded\",\"trace\":...}\n"
        "while traces cannot be written (requests are still answered, untraced), 503\n"
        "{\"status\":\"shutting_down\"}; other methods 405.\n"
        "SIGINT/SIGTERM/SIGHUP: no new connections; queued requests get 503; in-flight ones\n"
        "are cancelled between steps and answered (finish_reason \"cancelled\"; a stream gets\n"
        "its final chunk and [DONE]), their traces closed as interrupted; then the server\n"
        "exits. A second signal kills it at once.\n"
        "Exit status: 0 after a signal once every answer was sent; 1 when answers were still\n"
        "unsent after 5 s and their connections were closed (after 10 s the process exits\n"
        "regardless); 2 on a start-up error.\n");
}

enum trace_mode { TR_ALL, TR_SAMPLE, TR_FLAGGED };

typedef struct server {
    const char *model_path, *tokenizer, *host, *trace_dir;
    long port, parallel, queue, threads, ctx, sample_n;
    int trace_mode;
    const char *inject[32];
    int n_inject;
    const char *faults[32];        /* --inject specs that are the batched server's own (prefix_wrong, ...) */
    int n_faults;
    int batching;                  /* -1 unset, 0 off, 1 on */
    long block_size, kv_blocks, batch_rows, snapshots;
    int prefix_cache;              /* -1 unset */
    bt_batcher *batcher;
    char server_db[4096];
    char *names[MAX_NAMES];        /* --served-model-name; none: any name */
    int n_names;
    long timeout, max_conns, max_per_ip;
    long inflight;                 /* requests begun and not yet completed (drain waits for 0) */
    pthread_cond_t drained;
    unsigned long trace_failures;  /* traces that could not be written */
    time_t trace_fail_at;          /* the last one; tracing pauses TRACE_PAUSE_S after it */
    bool trace_bad;                /* the last trace attempt failed */
    bt_model *m;
    bt_tokenizer *tok;
    bt_gen_cfg gc;
    char name[256];
    char *argv_json;
    bt_gen **slots;
    bool *busy;
    pthread_mutex_t lock;
    pthread_cond_t freed;
    long waiting;
    unsigned long long ticket, serve_next;  /* slot_take's FIFO queue */
    unsigned long long counter;
    volatile int cancel;           /* set on SIGTERM: every generation stops */
    char salt[16];
    bool llamacpp;                 /* --engine llama.cpp: one context, --parallel sequences */
    bt_llama_settings llama;       /* its path (--llama-*) */
    char (*slot_meta)[8][512];     /* per slot: the trace meta the llama.cpp engine adds */
    const char *(*slot_kv)[20];
} server;

typedef struct conn {
    char *body;
    size_t len;
    bool too_big;
} conn;

/* --served-model-name A,B: each name non-empty, copied (freed at exit). */
static int add_names(server *s, const char *v)
{
    for (const char *p = v;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (!n) return bt_error(BT_EINVAL, "--served-model-name: an empty name in '%s'", v);
        if (s->n_names == MAX_NAMES) return bt_error(BT_EINVAL, "--served-model-name: at most %d names", MAX_NAMES);
        if (!(s->names[s->n_names] = strndup(p, n))) return bt_error(BT_ENOMEM, "out of memory");
        s->n_names++;
        if (!comma) return BT_OK;
        p = comma + 1;
    }
}

/* The request's "model": any name unless --served-model-name gave a list. */
static bool model_served(const server *s, const char *name)
{
    if (!s->n_names) return true;
    for (int i = 0; i < s->n_names; i++) if (!strcmp(s->names[i], name)) return true;
    return false;
}

static int parse_args(int argc, char **argv, server *s)
{
    s->host = "127.0.0.1"; s->port = 8080; s->parallel = 1; s->queue = 16; s->timeout = 10; s->max_conns = 2048;
    s->batching = -1; s->prefix_cache = -1;
    bt_args g = { .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_TOKENIZER | BT_ARGS_THREADS | BT_ARGS_CTX | BT_ARGS_ENGINE | BT_ARGS_LLAMA,
                   .ctx_min = 16 };
    for (int i = 1; i < argc; i++) {
        bool taken;
        if (bt_args_take(&g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return bt_error(BT_EINVAL, "%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "--host")) { VAL(); s->host = v; }
        else if (!strcmp(a, "--port")) { VAL(); if (bt_parse_int(a, v, 0, 65535, &s->port)) return BT_EINVAL; }
        else if (!strcmp(a, "--parallel")) { VAL(); if (bt_parse_int(a, v, 1, 256, &s->parallel)) return BT_EINVAL; }
        else if (!strcmp(a, "--queue")) { VAL(); if (bt_parse_int(a, v, 0, 100000, &s->queue)) return BT_EINVAL; }
        else if (!strcmp(a, "--trace-dir")) { VAL(); s->trace_dir = v; }
        else if (!strcmp(a, "--trace")) {
            VAL();
            if (!strcmp(v, "all")) s->trace_mode = TR_ALL;
            else if (!strcmp(v, "flagged")) s->trace_mode = TR_FLAGGED;
            else if (!strncmp(v, "sample:", 7)) {
                s->trace_mode = TR_SAMPLE;
                if (bt_parse_int("--trace sample:N", v + 7, 1, 1000000000, &s->sample_n)) return BT_EINVAL;
            } else return bt_error(BT_EINVAL, "--trace expects all, sample:N or flagged, got '%s'", v);
        } else if (!strcmp(a, "--inject")) {
            VAL();
            if (bt_batcher_is_fault(v)) {
                if (bt_batcher_fault_check(v)) return BT_EINVAL;
                if (s->n_faults == 32) return bt_error(BT_EINVAL, "at most 32 server --inject specs");
                s->faults[s->n_faults++] = v;
            } else {
                if (s->n_inject == 32) return bt_error(BT_EINVAL, "at most 32 --inject specs");
                s->inject[s->n_inject++] = v;
            }
        } else if (!strcmp(a, "--batching") || !strcmp(a, "--prefix-cache")) {
            VAL();
            int on = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 0 : -1;
            if (on < 0) return bt_error(BT_EINVAL, "%s expects on or off, got '%s'", a, v);
            if (a[2] == 'b') s->batching = on; else s->prefix_cache = on;
        } else if (!strcmp(a, "--block-size")) { VAL(); if (bt_parse_int(a, v, 1, 4096, &s->block_size)) return BT_EINVAL; }
        else if (!strcmp(a, "--kv-blocks")) { VAL(); if (bt_parse_int(a, v, 1, 100000000, &s->kv_blocks)) return BT_EINVAL; }
        else if (!strcmp(a, "--batch-rows")) { VAL(); if (bt_parse_int(a, v, 1, 65536, &s->batch_rows)) return BT_EINVAL; }
        else if (!strcmp(a, "--state-snapshots")) { VAL(); if (bt_parse_int(a, v, 1, 1000000, &s->snapshots)) return BT_EINVAL; }
        else if (!strcmp(a, "--served-model-name")) {
            VAL();
            if (add_names(s, v)) return BT_EINVAL;
        } else if (!strcmp(a, "--timeout")) { VAL(); if (bt_parse_int(a, v, 1, 86400, &s->timeout)) return BT_EINVAL; }
        else if (!strcmp(a, "--max-connections")) { VAL(); if (bt_parse_int(a, v, 1, 1000000, &s->max_conns)) return BT_EINVAL; }
        else if (!strcmp(a, "--max-connections-per-ip")) { VAL(); if (bt_parse_int(a, v, 1, 1000000, &s->max_per_ip)) return BT_EINVAL; }
        else return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help serve)", a);
#undef VAL
    }
    s->model_path = g.model; s->tokenizer = g.tokenizer; s->threads = g.threads; s->ctx = g.ctx;
    s->llamacpp = g.llamacpp; s->llama = g.llama;
    if (bt_args_need_model(&g, "serve")) return BT_EINVAL;
    if (s->llamacpp && s->tokenizer)
        return bt_error(BT_EINVAL, "--engine llama.cpp needs a GGUF model (with its vocabulary); --tokenizer is for llama2.c checkpoints");
    if (s->llamacpp && s->batching == 1)
        return bt_error(BT_EINVAL, "--batching on is the native engine's; --engine llama.cpp runs llama-server's slots");
    if (s->batching < 0) s->batching = !s->llamacpp;
    if (!s->batching) {
        const char *why = s->block_size ? "--block-size" : s->kv_blocks ? "--kv-blocks" : s->batch_rows ? "--batch-rows"
                        : s->snapshots ? "--state-snapshots"
                        : s->prefix_cache >= 0 ? "--prefix-cache" : s->n_faults ? s->faults[0] : NULL;
        if (why)
            return bt_error(BT_EINVAL, "'%s' is the batched server's (--batching on)%s", why,
                            s->llamacpp ? "; --engine llama.cpp has none" : "");
    }
    if (s->prefix_cache < 0) s->prefix_cache = 1;
    return bt_args_llama_finish(&g, s->llamacpp, "--engine llama.cpp");
}

static struct MHD_Response *json_response(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return NULL;
    return MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
}

/* Set once shutdown begins: answers then close their connections. */
static volatile int stopping;

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, struct MHD_Response *r, const char *rid)
{
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (rid) MHD_add_response_header(r, "x-request-id", rid);
    if (stopping) MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *type, const char *code_s,
                                  const char *msg, const char *rid)
{
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s*}}", "error", "message", msg, "type", type, "param", "code", code_s);
    return send_json(c, code, json_response(j), rid);
}

/* 405 with the Allow header the method needs. */
static enum MHD_Result send_405(struct MHD_Connection *c, const char *allow, const char *rid)
{
    char msg[64];
    snprintf(msg, sizeof msg, "use %s", allow);
    json_t *j = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", "invalid_request_error", "param",
                          "code", "method_not_allowed");
    struct MHD_Response *r = json_response(j);
    if (r) MHD_add_response_header(r, "Allow", allow);
    return send_json(c, 405, r, rid);
}

/* Take a free slot, waiting behind at most --queue others. -1: queue full
 * or shutting down. */
static int slot_take(server *s)
{
    pthread_mutex_lock(&s->lock);
    int got = -1;
    bool queued = false;
    unsigned long long my = 0;
    for (;;) {
        if (s->cancel) break;
        /* first come, first served: a request may take a free slot when no
         * one waits before it (llama-server's queue is FIFO too; p99) */
        if (queued ? my == s->serve_next : s->ticket == s->serve_next) {
            for (int i = 0; i < s->parallel; i++) if (!s->busy[i]) { got = i; break; }
            if (got >= 0) {
                s->busy[got] = true;
                if (queued) { s->serve_next++; pthread_cond_broadcast(&s->freed); }
                break;
            }
        }
        if (!queued) {
            if (s->waiting >= s->queue) break;
            queued = true;
            my = s->ticket++;
            s->waiting++;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&s->freed, &s->lock, &ts);
    }
    if (queued) s->waiting--;
    pthread_mutex_unlock(&s->lock);
    return got;
}
static void slot_give(server *s, int i)
{
    pthread_mutex_lock(&s->lock);
    s->busy[i] = false;
    pthread_cond_broadcast(&s->freed);   /* the head of the queue may be any waiter */
    pthread_mutex_unlock(&s->lock);
}

/* One request's job: what the handler and, when streaming, the producer
 * thread share. */
typedef struct job {
    server *s;
    int slot;
    bool chat, stream;
    bt_request req;
    char rid[64];
    char trace_path[4096];
    unsigned long long number;
    bt_gen_result res;
    int rc;
    char err[512];
    /* streaming */
    pthread_t th;
    bool th_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *out; size_t out_len, out_cap, out_pos;
    bool finished, gone;
    volatile int cancel;
    time_t created;
} job;

/* Trace trouble: while it lasts, /health says "degraded"; for TRACE_PAUSE_S
 * after a failure no request is traced (each would fail again and cost a
 * second generation). */
static bool trace_paused(server *s)
{
    pthread_mutex_lock(&s->lock);
    bool p = s->trace_failures && time(NULL) - s->trace_fail_at < TRACE_PAUSE_S;
    pthread_mutex_unlock(&s->lock);
    return p;
}

static void trace_state(server *s, bool failed)
{
    pthread_mutex_lock(&s->lock);
    s->trace_bad = failed;
    if (failed) { s->trace_failures++; s->trace_fail_at = time(NULL); }
    pthread_mutex_unlock(&s->lock);
}

/* Remove a partial trace this server created, with its WAL companions. */
static void trace_remove(const char *path)
{
    char side[4096 + 8];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

/* Streamed text across a retry: the bytes the client already has are not
 * sent again (the retry is deterministic, so they are the same bytes). */
typedef struct text_relay {
    int (*fn)(void *user, const char *s, size_t n);
    void *user;
    size_t sent, skip;
} text_relay;

static int relay_text(void *u, const char *t, size_t n)
{
    text_relay *k = u;
    size_t d = BT_MIN(k->skip, n);
    k->skip -= d;
    if (d == n) return 0;
    k->sent += n - d;
    return k->fn(k->user, t + d, n - d);
}

/* bt_gen_request() with o->trace_path, where the trace may fail to be
 * written: the run is then repeated untraced (retry) and, when that
 * succeeds, the partial trace removed, the failure logged and /health set
 * degraded. A path that exists already is never traced into nor removed. */
static int gen_traced(server *s, bt_gen *g, const char *rid, const bt_request *req, const bt_gen_opts *o,
                      bt_gen_result *res, bool retry)
{
    if (!o->trace_path) return bt_gen_request(g, req, o, res);
    bt_gen_opts o1 = *o;
    text_relay k = { .fn = o->on_text, .user = o->user };
    if (o->on_text) { o1.on_text = relay_text; o1.user = &k; }
    struct stat st;
    int e = lstat(o->trace_path, &st) == 0 ? 0 : errno;
    if (e != ENOENT) {
        if (e) trace_state(s, true);
        bt_warn("serve: %s: %s: %s; answering without a trace", rid, o->trace_path, e ? strerror(e) : "exists");
        o1.trace_path = NULL;
        return bt_gen_request(g, req, &o1, res);
    }
    int rc = bt_gen_request(g, req, &o1, res);
    if (rc == BT_OK) { trace_state(s, false); return rc; }
    if (rc == BT_EINVAL || rc == BT_ERANGE || (retry && o->cancel && *o->cancel)) return rc;
    char why[1024];
    snprintf(why, sizeof why, "%s", bt_errmsg());
    if (retry) {
        bt_gen_result_clear(res);
        o1.trace_path = NULL;
        k.skip = k.sent;
        if ((rc = bt_gen_request(g, req, &o1, res))) return rc;   /* not (only) the trace: keep it as it is */
    }
    trace_remove(o->trace_path);
    trace_state(s, true);
    bt_warn("serve: %s: the trace could not be written (%s); removed it%s; no traces for %d s", rid, why,
            retry ? " and answered without it" : "", TRACE_PAUSE_S);
    return rc;
}

static bool want_trace(server *s, unsigned long long number)
{
    if (!s->trace_dir || trace_paused(s)) return false;
    return s->trace_mode == TR_ALL || (s->trace_mode == TR_SAMPLE && number % (unsigned long long)s->sample_n == 0);
}

/* What the client is told about a failed generation: the request's own
 * fault in full; anything else (engine, memory) only by request id, the
 * details (paths, SQL) going to the server's stderr. */
static void client_error(job *jb, int rc)
{
    if (rc == BT_EINVAL || rc == BT_ERANGE) { snprintf(jb->err, sizeof jb->err, "%s", bt_errmsg()); return; }
    bt_warn("serve: %s: %s", jb->rid, bt_errmsg());
    snprintf(jb->err, sizeof jb->err, "internal error (request %s); the server's log has the details", jb->rid);
}

/* The generation of one request on its slot: traced as --trace says. */
static int job_generate(job *jb, bt_gen_opts *o)
{
    server *s = jb->s;
    o->request_id = jb->rid;
    o->draw_seed = jb->number;
    o->trace_path = want_trace(s, jb->number) ? jb->trace_path : NULL;
    o->batcher = s->batcher;
    o->lane = jb->slot;
    volatile int *cancel = o->cancel;
    int rc = gen_traced(s, s->slots[jb->slot], jb->rid, &jb->req, o, &jb->res, true);
    if (rc == BT_OK && s->trace_dir && s->trace_mode == TR_FLAGGED && !trace_paused(s)) {
        bt_answer a = { .http_status = 200, .text = jb->res.text, .text_len = jb->res.text_len, .ids = jb->res.ids,
                        .n_ids = jb->res.n_ids, .n_vocab = s->m->cfg.n_vocab, .finish_reason = jb->res.finish,
                        .stop = jb->req.stop, .n_stop = jb->req.n_stop, .n_nonfinite = jb->res.n_nonfinite };
        if (bt_answer_classify(&a, NULL, NULL, 0) != BT_ANS_OK) {
            /* replay it with the trace on: same prompt, seed and draw, so the
             * same tokens; the first answer is the one the client gets */
            bt_gen_result again;
            bt_gen_opts o2 = { .request_id = jb->rid, .draw_seed = jb->number, .trace_path = jb->trace_path, .cancel = cancel,
                               .batcher = s->batcher, .lane = jb->slot };
            if (gen_traced(s, s->slots[jb->slot], jb->rid, &jb->req, &o2, &again, false) != BT_OK)
                bt_warn("serve: %s: the flagged replay failed: %s", jb->rid, bt_errmsg());
            bt_gen_result_clear(&again);
        }
    }
    if (rc) client_error(jb, rc);
    return rc;
}

static json_t *usage_json(const job *jb)
{
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", jb->res.n_prompt, "completion_tokens", jb->res.n_ids,
                     "total_tokens", jb->res.n_prompt + jb->res.n_ids);
}

static json_t *ext_json(const job *jb, bool ids)
{
    json_t *e = json_pack("{s:s,s:i,s:b}", "request_id", jb->rid, "n_vocab", jb->s->m->cfg.n_vocab, "injected", jb->res.injected);
    if (ids) {
        json_t *a = json_array();
        for (int i = 0; i < jb->res.n_ids; i++) json_array_append_new(a, json_integer(jb->res.ids[i]));
        json_object_set_new(e, "completion_ids", a);
    }
    /* the request's own detector events: a NaN that ends the answer early
     * with finish_reason "stop" (SmolLM2's id 0 is <|endoftext|>) is marked
     * here, where probe and canary look */
    json_t *evs = json_array();
    for (int i = 0; i < jb->res.n_events; i++) {
        const bt_gen_event *ev = &jb->res.events[i];
        json_array_append_new(evs, json_pack("{s:s,s:i,s:i,s:s}", "kind", ev->kind, "step", ev->step, "pos", ev->pos,
                                             "detail", ev->detail));
    }
    json_object_set_new(e, "events", evs);
    json_object_set_new(e, "events_total", json_integer(jb->res.n_events_total));
    json_object_set_new(e, "nonfinite", json_boolean(jb->res.n_nonfinite > 0));
    json_t *tr = NULL;
    if (jb->s->trace_dir && access(jb->trace_path, F_OK) == 0) tr = json_string(jb->trace_path);
    json_object_set_new(e, "trace", tr ? tr : json_null());
    return e;
}

static json_t *chunk_json(const job *jb, const char *text, size_t n, const char *finish)
{
    json_t *ch;
    if (jb->chat) {
        json_t *delta = json_object();
        if (text) json_object_set_new(delta, "content", json_stringn(text, n));
        if (text && jb->out_len == 0) json_object_set_new(delta, "role", json_string("assistant"));
        ch = json_pack("{s:i,s:o,s:o}", "index", 0, "delta", delta, "finish_reason", finish ? json_string(finish) : json_null());
    } else {
        ch = json_pack("{s:i,s:s%,s:n,s:o}", "index", 0, "text", text ? text : "", text ? n : 0, "logprobs", "finish_reason",
                       finish ? json_string(finish) : json_null());
    }
    char id[96];
    snprintf(id, sizeof id, "%s-%s", jb->chat ? "chatcmpl" : "cmpl", jb->rid);
    return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object", jb->chat ? "chat.completion.chunk" : "text_completion",
                     "created", (json_int_t)jb->created, "model", jb->s->name, "choices", ch);
}

/* Append an SSE event to the job's buffer (under its lock). */
static void push_event(job *jb, json_t *j, const char *raw)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const char *payload = s ? s : raw;
    if (!payload) return;
    size_t need = strlen(payload) + 8;
    pthread_mutex_lock(&jb->lock);
    if (jb->out_len + need > jb->out_cap) {
        size_t nc = BT_MAX(jb->out_cap * 2, jb->out_len + need + 1024);
        char *no = realloc(jb->out, nc);
        if (no) { jb->out = no; jb->out_cap = nc; }
    }
    if (jb->out_len + need <= jb->out_cap)
        jb->out_len += (size_t)sprintf(jb->out + jb->out_len, "data: %s\n\n", payload);
    pthread_cond_signal(&jb->cond);
    pthread_mutex_unlock(&jb->lock);
    free(s);
}

static int on_text(void *user, const char *t, size_t n)
{
    job *jb = user;
    if (jb->gone) return 1;
    push_event(jb, chunk_json(jb, t, n, NULL), NULL);
    return jb->s->cancel ? 1 : 0;   /* shutting down: this stream ends "cancelled" */
}

static void *producer(void *u)
{
    job *jb = u;
    bt_gen_opts o = { .cancel = &jb->cancel, .on_text = on_text, .user = jb };
    jb->rc = job_generate(jb, &o);
    if (jb->rc == BT_OK) {
        json_t *last = chunk_json(jb, NULL, 0, jb->res.finish);
        json_object_set_new(last, "usage", usage_json(jb));
        json_object_set_new(last, "bangtrace", ext_json(jb, true));
        push_event(jb, last, NULL);
    } else {
        push_event(jb, json_pack("{s:{s:s,s:s}}", "error", "message", jb->err, "type", "server_error"), NULL);
    }
    push_event(jb, NULL, "[DONE]");
    slot_give(jb->s, jb->slot);
    pthread_mutex_lock(&jb->lock);
    jb->finished = true;
    pthread_cond_signal(&jb->cond);
    pthread_mutex_unlock(&jb->lock);
    return NULL;
}

static void job_free(job *jb)
{
    if (!jb) return;
    if (jb->th_started) pthread_join(jb->th, NULL);
    bt_gen_result_clear(&jb->res);
    bt_request_clear(&jb->req);
    pthread_mutex_destroy(&jb->lock);
    pthread_cond_destroy(&jb->cond);
    free(jb->out);
    free(jb);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    job *jb = cls;
    pthread_mutex_lock(&jb->lock);
    while (jb->out_pos == jb->out_len && !jb->finished) pthread_cond_wait(&jb->cond, &jb->lock);
    ssize_t n;
    if (jb->out_pos == jb->out_len) n = MHD_CONTENT_READER_END_OF_STREAM;
    else {
        n = (ssize_t)BT_MIN(max, jb->out_len - jb->out_pos);
        memcpy(buf, jb->out + jb->out_pos, (size_t)n);
        jb->out_pos += (size_t)n;
    }
    pthread_mutex_unlock(&jb->lock);
    (void)pos;
    return n;
}

static void stream_free(void *cls)
{
    job *jb = cls;
    jb->gone = true;
    jb->cancel = 1;
    job_free(jb);
}

static enum MHD_Result handle_completion(server *s, struct MHD_Connection *c, conn *cn, bool chat)
{
    char rid[64];
    pthread_mutex_lock(&s->lock);
    unsigned long long number = ++s->counter;
    pthread_mutex_unlock(&s->lock);
    snprintf(rid, sizeof rid, "req-%s-%06llu", s->salt, number);
    if (cn->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is over the %u-byte limit", BODY_LIMIT);
        return send_error(c, 413, "invalid_request_error", "request_too_large", msg, rid);
    }
    json_error_t je;
    json_t *j = json_loadb(cn->body ? cn->body : "", cn->len, 0, &je);
    if (!j || !json_is_object(j)) {
        char msg[300];
        snprintf(msg, sizeof msg, j ? "the body must be a JSON object" : "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
        json_decref(j);
        return send_error(c, 400, "invalid_request_error", "invalid_json", msg, rid);
    }
    json_t *mv = json_object_get(j, "model"), *sv = json_object_get(j, "stream");
    if (mv && !json_is_string(mv)) { json_decref(j); return send_error(c, 400, "invalid_request_error", "invalid_type", "\"model\" must be a string", rid); }
    if (mv && !model_served(s, json_string_value(mv))) {
        char msg[512];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves '%.150s'%s", json_string_value(mv), s->name,
                 s->n_names > 1 ? " (and the other names /v1/models lists)" : "");
        json_decref(j);
        return send_error(c, 404, "invalid_request_error", "model_not_found", msg, rid);
    }
    if (sv && !json_is_boolean(sv) && !json_is_null(sv)) { json_decref(j); return send_error(c, 400, "invalid_request_error", "invalid_type", "\"stream\" must be a boolean", rid); }
    bool stream = json_is_true(sv);
    if (chat && !json_object_get(j, "messages")) { json_decref(j); return send_error(c, 400, "invalid_request_error", "missing_messages", "/v1/chat/completions needs \"messages\"", rid); }
    if (!chat && !json_object_get(j, "prompt")) { json_decref(j); return send_error(c, 400, "invalid_request_error", "missing_prompt", "/v1/completions needs \"prompt\"", rid); }
    json_object_del(j, "stream");
    json_object_del(j, "stream_options");
    char *clean = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    job *jb = calloc(1, sizeof *jb);
    if (!clean || !jb) { free(clean); free(jb); return send_error(c, 500, "server_error", NULL, "out of memory", rid); }
    pthread_mutex_init(&jb->lock, NULL);
    pthread_cond_init(&jb->cond, NULL);
    jb->s = s; jb->chat = chat; jb->stream = stream; jb->number = number; jb->created = time(NULL);
    snprintf(jb->rid, sizeof jb->rid, "%s", rid);
    if (s->trace_dir) snprintf(jb->trace_path, sizeof jb->trace_path, "%s/%s.db", s->trace_dir, rid);
    int rc = bt_request_parse(clean, strlen(clean), "request", &jb->req);
    free(clean);
    if (rc) { enum MHD_Result r = send_error(c, 400, "invalid_request_error", NULL, bt_errmsg(), rid); job_free(jb); return r; }
    /* the queue first: a full queue costs no tokenizing */
    if ((jb->slot = slot_take(s)) < 0) {
        enum MHD_Result r = send_error(c, 503, "server_error", "overloaded", s->cancel ? "the server is shutting down" : "the request queue is full; retry later", rid);
        job_free(jb);
        return r;
    }
    int n_prompt = 0;
    rc = bt_gen_prompt_tokens(&s->gc, &jb->req, &n_prompt);
    long mt = jb->req.has_max_tokens ? jb->req.max_tokens : 128;
    if (rc || n_prompt + mt > s->gc.ctx || mt < 0) {
        slot_give(s, jb->slot);
        char msg[300];
        if (rc) snprintf(msg, sizeof msg, "%s", bt_errmsg());
        else snprintf(msg, sizeof msg, "max_tokens %ld + %d prompt tokens exceed the context of %d", mt, n_prompt, s->gc.ctx);
        enum MHD_Result r = send_error(c, 400, "invalid_request_error", rc ? NULL : "context_length_exceeded", msg, rid);
        job_free(jb);
        return r;
    }
    if (stream) {
        if (pthread_create(&jb->th, NULL, producer, jb)) {
            slot_give(s, jb->slot);
            job_free(jb);
            return send_error(c, 500, "server_error", NULL, "cannot start a thread", rid);
        }
        jb->th_started = true;
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, jb, stream_free);
        if (!r) { stream_free(jb); return MHD_NO; }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "x-request-id", rid);
        if (stopping) MHD_add_response_header(r, "Connection", "close");
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    bt_gen_opts o = { .cancel = &s->cancel };
    rc = job_generate(jb, &o);
    slot_give(s, jb->slot);
    enum MHD_Result ret;
    if (rc) {
        ret = send_error(c, rc == BT_EINVAL || rc == BT_ERANGE ? 400 : 500, rc == BT_EINVAL || rc == BT_ERANGE ? "invalid_request_error" : "server_error",
                         NULL, jb->err, rid);
    } else {
        json_t *choice = chat ? json_pack("{s:i,s:{s:s,s:s%},s:s}", "index", 0, "message", "role", "assistant", "content",
                                          jb->res.text, jb->res.text_len, "finish_reason", jb->res.finish)
                              : json_pack("{s:i,s:s%,s:n,s:s}", "index", 0, "text", jb->res.text, jb->res.text_len, "logprobs",
                                          "finish_reason", jb->res.finish);
        char id[96];
        snprintf(id, sizeof id, "%s-%s", chat ? "chatcmpl" : "cmpl", rid);
        json_t *resp = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o,s:o}", "id", id, "object", chat ? "chat.completion" : "text_completion",
                                 "created", (json_int_t)jb->created, "model", s->name, "choices", choice, "usage", usage_json(jb),
                                 "bangtrace", ext_json(jb, true));
        ret = send_json(c, 200, json_response(resp), rid);
    }
    job_free(jb);
    return ret;
}

/* GET/HEAD /health: 200 "ok"; 200 "degraded" while traces cannot be
 * written (answers still come: a load balancer should keep the server);
 * 503 "shutting_down". The trace line names no path and no SQL: the
 * details are in the server's log. */
static enum MHD_Result handle_health(server *s, struct MHD_Connection *c, const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) return send_405(c, "GET, HEAD", NULL);
    pthread_mutex_lock(&s->lock);
    long busy = 0;
    for (int i = 0; i < s->parallel; i++) busy += s->busy[i];
    bool degraded = s->trace_bad || (s->trace_failures && time(NULL) - s->trace_fail_at < TRACE_PAUSE_S);
    json_t *j = json_pack("{s:s,s:I,s:I,s:I}", "status", s->cancel ? "shutting_down" : degraded ? "degraded" : "ok",
                          "slots", (json_int_t)s->parallel, "busy", (json_int_t)busy, "waiting", (json_int_t)s->waiting);
    if (s->trace_failures) {
        char when[32], msg[256];
        struct tm tm;
        gmtime_r(&s->trace_fail_at, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (degraded)
            snprintf(msg, sizeof msg, "traces cannot be written (%lu failed, the last at %s): requests are answered "
                     "untraced; see the server's log", s->trace_failures, when);
        else snprintf(msg, sizeof msg, "traces are written again (%lu failed, the last at %s)", s->trace_failures, when);
        json_object_set_new(j, "trace", json_string(msg));
        json_object_set_new(j, "trace_failures", json_integer((json_int_t)s->trace_failures));
    }
    pthread_mutex_unlock(&s->lock);
    return send_json(c, s->cancel ? 503 : 200, json_response(j), NULL);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls)
{
    server *s = cls;
    (void)version;
    bool post = !strcmp(method, "POST");
    if (!*con_cls) {
        /* a request begins: counted until completed() (shutdown waits) */
        conn *cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        pthread_mutex_lock(&s->lock);
        s->inflight++;
        pthread_mutex_unlock(&s->lock);
        if (post) return MHD_YES;
    }
    if (post && *size) {
        conn *cn = *con_cls;
        if (!cn->too_big) {
            if (cn->len + *size > BODY_LIMIT) { cn->too_big = true; free(cn->body); cn->body = NULL; cn->len = 0; }
            else {
                char *nb = realloc(cn->body, cn->len + *size + 1);
                if (!nb) return MHD_NO;
                memcpy(nb + cn->len, data, *size);
                cn->body = nb;
                cn->len += *size;
                nb[cn->len] = 0;
            }
        }
        *size = 0;
        return MHD_YES;
    }
    bool comp = !strcmp(url, "/v1/completions"), chat = !strcmp(url, "/v1/chat/completions");
    if (comp || chat) {
        if (!post) return send_405(c, "POST", NULL);
        return handle_completion(s, c, *con_cls, chat);
    }
    if (!strcmp(url, "/health")) return handle_health(s, c, method);
    if (!strcmp(url, "/v1/models")) {
        json_t *data = json_array();
        for (int i = 0; i < (s->n_names ? s->n_names : 1); i++)
            json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", s->n_names ? s->names[i] : s->name, "object", "model",
                                                  "created", 0, "owned_by", "bangtrace"));
        json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", data);
        return send_json(c, 200, json_response(j), NULL);
    }
    return send_error(c, 404, "invalid_request_error", "not_found", "no such endpoint", NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    server *s = cls;
    conn *cn = *con_cls;
    (void)c; (void)toe;
    if (!cn) return;
    free(cn->body);
    free(cn);
    *con_cls = NULL;
    pthread_mutex_lock(&s->lock);
    if (--s->inflight == 0) pthread_cond_broadcast(&s->drained);
    pthread_mutex_unlock(&s->lock);
}

/* The trace directory: created 0700, or an existing directory (not a link). */
static int trace_dir_ready(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return bt_error(BT_EINVAL, "--trace-dir %s exists and is not a directory", dir);
        if (access(dir, W_OK)) return bt_error(BT_EIO, "--trace-dir %s is not writable", dir);
        return BT_OK;
    }
    if (mkdir(dir, 0700)) return bt_error(BT_EIO, "--trace-dir %s: cannot create: %s", dir, strerror(errno));
    return BT_OK;
}

/* Every connection is a thread and a descriptor: raise the soft open-file
 * limit toward what --max-connections needs (plus room for the model and
 * traces), and lower the connection limit to what it allows. */
static void connection_budget(server *s)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t want = (rlim_t)s->max_conns + 128;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        struct rlimit nl = rl;
        nl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl = nl;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        long fit = rl.rlim_cur > 160 ? (long)rl.rlim_cur - 128 : 32;
        bt_warn("serve: the open-file limit (%llu) allows %ld connections, not --max-connections %ld",
                (unsigned long long)rl.rlim_cur, fit, s->max_conns);
        s->max_conns = fit;
    }
}

static void *drain_watchdog(void *u)
{
    (void)u;
    struct timespec ts = { DRAIN_S, 0 };
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
    static const char msg[] = "bangtrace: serve: the connection threads did not stop: exiting\n";
    if (write(2, msg, sizeof msg - 1) < 0) {}
    _exit(1);
}

/* Graceful stop: no new connections; queued requests wake to 503; each
 * in-flight generation stops between steps and its answer ("cancelled") is
 * sent; then the daemon stops. DRAIN_S bounds the wait. 0: every answer
 * went out; 1: some connections were still open and were closed. */
static int drain(server *s, struct MHD_Daemon *d, int sig)
{
    pthread_mutex_lock(&s->lock);
    s->cancel = 1;
    stopping = 1;
    long busy = 0;
    for (int i = 0; i < s->parallel; i++) busy += s->busy[i];
    long waiting = s->waiting;
    pthread_cond_broadcast(&s->freed);
    pthread_mutex_unlock(&s->lock);
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    fprintf(stderr, "bangtrace: serve: %s: no new connections; cancelling %ld in-flight request%s (their traces closed as "
            "interrupted), 503 to %ld queued\n", bt_signal_name(sig), busy, busy == 1 ? "" : "s", waiting);
    fflush(stderr);
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += DRAIN_S;
    pthread_mutex_lock(&s->lock);
    while (s->inflight > 0 && pthread_cond_timedwait(&s->drained, &s->lock, &end) != ETIMEDOUT) {}
    long left = s->inflight;
    pthread_mutex_unlock(&s->lock);
    if (left) {
        bt_warn("serve: %ld request%s still unanswered after %d s: closing", left, left == 1 ? "" : "s", DRAIN_S);
        /* stopping the daemon joins the connection threads, and a handler
         * inside a step (a long prefill) has not seen the cancel yet: the
         * watchdog bounds that too */
        pthread_t wd;
        if (pthread_create(&wd, NULL, drain_watchdog, NULL) == 0) pthread_detach(wd);
    }
    MHD_stop_daemon(d);
    fprintf(stderr, "bangtrace: serve: stopped\n");
    return left ? 1 : 0;
}

/* --engine llama.cpp: llama-server's slots. One llama.cpp context with
 * --parallel sequences, slot i on sequence i (bt_llamacpp_engines_new), each
 * slot's traces saying which engine, path and sequence recorded them. */
static int llama_slots(server *s)
{
    int n = (int)s->parallel;
    bt_engine **es = calloc((size_t)n, sizeof *es);
    s->slot_meta = calloc((size_t)n, sizeof *s->slot_meta);
    s->slot_kv = calloc((size_t)n, sizeof *s->slot_kv);
    if (!es || !s->slot_meta || !s->slot_kv) { free(es); return bt_error(BT_ENOMEM, "out of memory"); }
    bt_llamacpp_opts lo = { .model_path = s->model_path, .ctx_len = s->gc.ctx, .max_batch = BT_MIN(s->gc.ctx, BT_GEN_BATCH),
                            .n_threads = s->gc.threads, .llama = &s->llama };
    int rc = bt_llamacpp_engines_new(s->m, &lo, n, es);
    static const char *const keys[] = { "llama_cpp_version", "llama_cpp_lib_version", "llama_cpp_build", "llama_cpp_settings",
                                        "llama_cpp_path", "llama_cpp_seq", "llama_cpp_n_seq" };
    for (int i = 0; i < n && rc == BT_OK; i++) {
        char (*v)[512] = s->slot_meta[i];
        const char **kv = s->slot_kv[i];
        snprintf(v[0], 512, "%s", bt_llamacpp_version());
        snprintf(v[1], 512, "%s", bt_llamacpp_lib_version());
        snprintf(v[2], 512, "%s", bt_llamacpp_build_flags());
        bt_llama_settings_describe(&s->llama, v[3], 512);
        snprintf(v[4], 512, "%s", bt_llamacpp_last_path());
        snprintf(v[5], 512, "%d", i);
        snprintf(v[6], 512, "%d", n);
        int k = 0;
        kv[k++] = "engine"; kv[k++] = "llama.cpp";
        kv[k++] = "backend"; kv[k++] = "llama.cpp-cpu";
        for (int j = 0; j < 7; j++) { kv[k++] = keys[j]; kv[k++] = v[j]; }
        kv[k] = NULL;
        bt_gen_cfg gc = s->gc;
        gc.engine = es[i];
        gc.meta = kv;
        es[i] = NULL;                      /* the slot owns it now, also on error */
        rc = bt_gen_new(&gc, &s->slots[i]);
    }
    for (int i = 0; i < n; i++) bt_engine_free(es[i]);
    free(es);
    return rc;
}

/* The batched server: one paged engine, --parallel lanes on it, each
 * slot's engine a lane (run/batcher.h); DIR/server.db beside the traces
 * (server-2.db, ... when one is there: nothing is overwritten). */
static int batch_slots(server *s, int ctx, int threads)
{
    if (s->trace_dir) {
        for (int i = 1; i < 1000; i++) {
            if (i == 1) snprintf(s->server_db, sizeof s->server_db, "%s/server.db", s->trace_dir);
            else snprintf(s->server_db, sizeof s->server_db, "%s/server-%d.db", s->trace_dir, i);
            if (access(s->server_db, F_OK) != 0) break;
        }
    }
    bt_batcher_cfg bc = { .model = s->m, .ctx = ctx, .lanes = (int)s->parallel, .max_rows = (int)s->batch_rows,
                          .block_size = (int)s->block_size, .n_blocks = (int)s->kv_blocks, .prefix_cache = s->prefix_cache,
                          .n_snapshots = (int)s->snapshots,
                          .threads = threads, .server_db = s->server_db[0] ? s->server_db : NULL, .faults = s->faults,
                          .n_faults = s->n_faults, .argv_json = s->argv_json, .model_path = s->model_path };
    int rc = bt_batcher_new(&bc, &s->batcher);
    if (rc) return rc;
    for (int i = 0; i < s->parallel; i++) {
        bt_gen_cfg gc = s->gc;
        if ((rc = bt_batcher_lane_engine(s->batcher, i, &gc.engine))) return rc;
        if ((rc = bt_gen_new(&gc, &s->slots[i]))) return rc;
    }
    return BT_OK;
}

int cmd_serve(int argc, char **argv)
{
    server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.freed, NULL);
    pthread_cond_init(&s.drained, NULL);
    struct MHD_Daemon *d = NULL;
    int status = 2;
    char sha[65] = "";
    if (parse_args(argc, argv, &s)) goto fail;
    if (s.trace_dir && trace_dir_ready(s.trace_dir)) goto fail;
    if (bt_model_load(s.model_path, s.tokenizer, &s.m)) goto fail;
    if (!s.m->has_vocab) { bt_error(BT_EINVAL, "%s has no tokenizer (llama2.c: --tokenizer)", s.model_path); goto fail; }
    if (!bt_model_has_weights(s.m)) { bt_error(BT_EINVAL, "%s has no weights", s.model_path); goto fail; }
    if (bt_tokenizer_new(&s.m->vocab, &s.tok)) goto fail;
    if (s.trace_dir) bt_sha256_hex(s.m->file_data, s.m->file_size, sha);
    if (s.n_inject) {
        bt_injector *inj = bt_injector_new();
        int rc = inj ? BT_OK : bt_error(BT_ENOMEM, "out of memory");
        for (int i = 0; i < s.n_inject && rc == BT_OK; i++) rc = bt_injector_add(inj, s.inject[i]);
        const char *native_only = rc == BT_OK && s.llamacpp ? bt_injector_needs_native(inj) : NULL;
        if (native_only)
            rc = bt_error(BT_EINVAL, "--inject '%s' writes the native engine's own memory; it cannot apply to --engine llama.cpp",
                          native_only);
        const char *kv = rc == BT_OK && s.batching ? bt_injector_needs_native(inj) : NULL;
        if (kv && !strncmp(kv, "kvcorrupt", 9))
            rc = bt_error(BT_EINVAL, "--inject '%s' writes a slot's own KV cache; the batched server's blocks are shared: "
                          "use --batching off, or its own faults (prefix_wrong, pad_nan)", kv);
        if (rc == BT_OK) rc = bt_injector_apply_weights(inj, s.m);
        bt_injector_free(inj);
        if (rc) goto fail;
    }
    const char *base = strrchr(s.model_path, '/');
    snprintf(s.name, sizeof s.name, "%s", s.n_names ? s.names[0] : base ? base + 1 : s.model_path);
    json_t *av = json_array();
    json_array_append_new(av, json_string("bangtrace"));
    for (int i = 0; i < argc; i++) json_array_append_new(av, json_string(argv[i]));
    s.argv_json = json_dumps(av, JSON_COMPACT);
    json_decref(av);
    snprintf(s.salt, sizeof s.salt, "%08x", (unsigned)(((unsigned)getpid() * 2654435761u) ^ (unsigned)time(NULL)));
    int ctx = s.ctx ? (int)s.ctx : BT_MIN(s.m->cfg.ctx_len, BT_ENGINE_CTX_CAP);
    /* llama.cpp: one context whose decodes take turns, so all the threads */
    long threads = s.threads ? s.threads : s.llamacpp || s.batching ? bt_pool_default_threads()
                 : BT_MAX(1L, bt_pool_default_threads() / s.parallel);
    s.gc = (bt_gen_cfg){ .model = s.m, .tok = s.tok, .model_path = s.model_path, .model_sha256 = sha, .ctx = ctx,
                         .threads = (int)threads, .inject = s.inject, .n_inject = s.n_inject, .argv_json = s.argv_json };
    if (bt_argmax_parse("first", &s.gc.rule)) goto fail;
    s.slots = calloc((size_t)s.parallel, sizeof *s.slots);
    s.busy = calloc((size_t)s.parallel, sizeof *s.busy);
    if (!s.slots || !s.busy) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    if (s.llamacpp) { if (llama_slots(&s)) goto fail; }
    else if (s.batching) { if (batch_slots(&s, ctx, (int)threads)) goto fail; }
    else for (int i = 0; i < s.parallel; i++) if (bt_gen_new(&s.gc, &s.slots[i])) goto fail;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s.port) };
    if (inet_pton(AF_INET, s.host, &sa.sin_addr) != 1) { bt_error(BT_EINVAL, "--host '%s' is not an IPv4 address", s.host); goto fail; }
    if (!MHD_is_feature_supported(MHD_FEATURE_POLL)) { bt_error(BT_EINVAL, "this libmicrohttpd has no poll() support"); goto fail; }
    connection_budget(&s);
    /* A write to a gone reader (stderr into a dead pipe) must fail with
     * EPIPE, not stop the server; a trace past a file size limit must fail
     * with EFBIG (and be handled like a full disk), not kill it. */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    if (bt_interrupt_install()) goto fail;
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG, (uint16_t)s.port,
                         NULL, NULL, handler, &s, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, completed, &s,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s.timeout, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s.max_conns,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s.max_per_ip, MHD_OPTION_END);
    if (!d) { bt_error(BT_EIO, "cannot listen on %s:%ld (in use?)", s.host, s.port); goto fail; }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (s.llamacpp)
        fprintf(stderr, "bangtrace: serve: %s on http://%s:%u (llama.cpp %s: one context, %ld sequence%s, %ld threads, context %d "
                "each; %s)%s%s\n", s.name, s.host, di ? di->port : (unsigned)s.port, bt_llamacpp_version(), s.parallel,
                s.parallel > 1 ? "s" : "", threads, ctx, bt_llamacpp_last_path(), s.trace_dir ? ", traces in " : "",
                s.trace_dir ? s.trace_dir : "");
    else if (s.batcher)
        fprintf(stderr, "bangtrace: serve: %s on http://%s:%u (%s; %ld threads, context %d)%s%s%s%s\n", s.name, s.host,
                di ? di->port : (unsigned)s.port, bt_batcher_describe(s.batcher), threads, ctx, s.trace_dir ? ", traces in " : "",
                s.trace_dir ? s.trace_dir : "", s.server_db[0] ? ", server trace " : "", s.server_db);
    else
        fprintf(stderr, "bangtrace: serve: %s on http://%s:%u (%ld engine%s, %ld threads each, context %d)%s%s\n", s.name, s.host,
                di ? di->port : (unsigned)s.port, s.parallel, s.parallel > 1 ? "s" : "", threads, ctx,
                s.trace_dir ? ", traces in " : "", s.trace_dir ? s.trace_dir : "");
    fflush(stderr);
    int sig;
    while (!(sig = bt_interrupt_pending())) usleep(50000);
    status = drain(&s, d, sig);
    d = NULL;
    goto out;
fail:
    status = bt_cmd_fail("serve");
out:
    if (d) MHD_stop_daemon(d);
    bt_interrupt_uninstall();
    if (s.batcher && bt_batcher_close(s.batcher, status == 0 ? "ok" : status == 1 ? "interrupted" : "error"))
        bt_warn("serve: %s", bt_errmsg());
    for (int i = 0; s.slots && i < s.parallel; i++) bt_gen_free(s.slots[i]);
    bt_batcher_free(s.batcher);
    free(s.slots);
    free(s.busy);
    free(s.slot_meta);
    free(s.slot_kv);
    free(s.argv_json);
    bt_tokenizer_free(s.tok);
    bt_model_free(s.m);
    for (int i = 0; i < s.n_names; i++) free(s.names[i]);
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.freed);
    pthread_cond_destroy(&s.drained);
    return status;
}
#endif
