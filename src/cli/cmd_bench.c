/* cmd_bench.c - `bangtrace bench`: prompt (prefill) and decode tokens/s,
 * median of several repetitions, and the effective weight bandwidth
 * (bytes of weights read per decoded token x tokens/s) against a read
 * bandwidth this command measures on the same threads. Timing lives here,
 * never in tests. */
#include "cmd.h"
#include "args.h"
#include "backend/backend.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "engine/sampler.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "gen/decode.h"
#include "run/recorder.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"
#include "run/session.h"
#include "engines/llamacpp/llamacpp.h"
#include "base/text.h"
#include "base/util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_bench_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace bench --model M [--tokenizer T] [--threads N] [-p N] [-n N] [-d N]\n"
        "                       [--reps R] [--taps MODE [--no-state-taps]] [--numerics PROFILE] [--device DEV]\n"
        "                       [--cuda-graphs] [--cupti] [--against llama.cpp] [--json]\n"
        "                       [--llama-flash-attn M] [--llama-repack on|off] [--llama-kv-type T] [--llama-opt K=V]\n\n"
        "Measure prefill of -p tokens (default 128) and greedy decode of -n tokens\n"
        "(default 64) on fixed token ids after one untimed warm-up prefill and decode\n"
        "step (as llama-bench), the median of R repetitions (default 3), and\n"
        "report tokens/s, the weight bytes read per decoded token, the effective weight\n"
        "bandwidth and the machine's measured read bandwidth; on the CPU also the\n"
        "measured f32 FMA peak and the prompt's weight matmuls in GFLOP/s against it.\n\n"
        "  -d, --depth N fill N positions of context first (untimed, -p tokens per\n"
        "                forward), so prefill runs at positions N.. and decode after\n"
        "                N + p, as llama-bench -d (default 0)\n"
        "  --numerics PROFILE\n"
        "                run every measurement under a numerics profile (run --numerics,\n"
        "                doc/numerics.md; on a device, parts the backend lacks run on the host);\n"
        "                compare with a run without it for its cost\n"
        "  --device DEV  run the ops on cpu (default), cuda or cuda:N (the CUDA plugin)\n"
        "  --cuda-graphs with --device cuda: every measurement replays CUDA graphs\n"
        "  --cupti       with --device cuda and --taps: the taps-on decode also records\n"
        "                CUPTI device activity (its cost: compare with a run without)\n"
        "  --against llama.cpp\n"
        "                the same GGUF, threads, -p, -n and reps on llama.cpp too: its own\n"
        "                llama-bench from the pinned build (tools/llama-cpp) and run\n"
        "                --engine llama.cpp's engine taps off and on (--taps, default all);\n"
        "                prints both engines' prompt and decode tokens/s and the ratios\n"
        "                (doc/llama-cpp.md; CPU, exact numerics only); both take\n"
        "                llama.cpp's default path unless --llama-flash-attn,\n"
        "                --llama-repack, --llama-kv-type or --llama-opt KEY=VAL (as\n"
        "                for run) say otherwise\n"
        "  --taps MODE   also prefill and decode with taps recorded into a temporary\n"
        "                trace (all, layers, logits) and report taps-on / taps-off;\n"
        "                the two alternate rep by rep, and the recorder's own time\n"
        "                per decode step is split into statistics, tap rows, logits\n"
        "                and token, and the step's commit\n"
        "  --no-state-taps\n"
        "                with --taps: leave a hybrid model's recurrent states\n"
        "                (ssm_state, ssm_conv_state) untapped; against a run without\n"
        "                it, what recording the states costs\n"
        "  --spec-k K --draft-self N | --draft-ngram N | --draft-mtp\n"
        "                also decode a natural-text prompt greedily with speculative\n"
        "                decoding and report tokens/s with and without it and the\n"
        "                acceptance rate; --draft-mtp drafts with the model's own MTP\n"
        "                (nextn) block, as run --draft-mtp (hybrid and deepseek2 models\n"
        "                that have one); the JSON names the drafter (self:N, ngram:N, mtp)\n");
}

static size_t weight_bytes(const bt_weight *w) { return w->data ? bt_dtype_row_size(w->type, w->cols) * (size_t)w->rows : 0; }

/* NAN (a rate too short to time, bt_rate) sorts first, so a median is
 * NAN only when most repetitions were. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) return !isnan(x) - !isnan(y);
    return (x > y) - (x < y);
}

static const char *rate_s(double r, const char *unit, char *buf, size_t cap)
{
    if (isnan(r)) snprintf(buf, cap, "n/a (interval under %g ms)", BT_RATE_MIN_S * 1e3);
    else snprintf(buf, cap, "%.1f %s", r, unit);
    return buf;
}

static json_t *rate_json(double r) { return isnan(r) ? json_null() : json_real(r); }

/* A table cell: the rate, or n/a when too short to time. */
static const char *cell(double r, char *buf, size_t cap)
{
    if (isnan(r)) snprintf(buf, cap, "n/a");
    else snprintf(buf, cap, "%.1f", r);
    return buf;
}

/* One recorded (or plain) forward of n tokens at pos, the token picked into
 * *id as `run` decodes by default, taps on or off: greedy, with its
 * log-probability (the trace's tokens carry it), whose softmax sums the
 * recorder's logit summary reuses. */
static int bench_step(bt_engine *e, bt_recorder *rec, bt_sampler *smp, const char *kind, const int32_t *in, int n,
                      int pos, int32_t *id)
{
    int rc = rec ? bt_recorder_step_begin(rec, kind, pos, n) : BT_OK;
    if (rc == BT_OK) rc = bt_engine_forward(e, in, n, pos);
    if (rc) return rc;
    const float *lg = bt_engine_logits(e);
    float lp;
    *id = bt_sampler_sample(smp, lg, bt_engine_model(e)->cfg.n_vocab, &lp);
    if (rec && (rc = bt_recorder_step_sampled(rec, lg, pos + n - 1, *id, lp, bt_sampler_sums(smp))) == BT_OK)
        rc = bt_recorder_step_end(rec, 0);
    return rc;
}

/* One repetition: with depth > 0 it first fills that many positions of
 * context (untimed, np tokens per forward), so both timings run at depth, as
 * llama-bench -d does; then the timed prompt of np tokens and nd decode
 * steps. With a recorder each forward is a recorded step, as in `run
 * --trace`, and *dec gets what recording cost during the decode steps. */
static int bench_rep(bt_engine *e, bt_recorder *rec, bt_sampler *smp, const int32_t *toks, const int32_t *dtoks, long depth, long np,
                     long nd, double *p, double *d, double *d_s, bt_recorder_costs *dec)
{
    int rc = BT_OK;
    int32_t id = toks[np - 1];
    for (long pos = 0; pos < depth && rc == BT_OK; pos += np)
        rc = bench_step(e, rec, smp, "prefill", dtoks + pos, (int)BT_MIN(np, depth - pos), (int)pos, &id);
    bt_recorder_costs c0 = { 0 }, c1 = { 0 };
    double t0 = bt_now(), t1 = t0;
    for (long i = -1; i < nd && rc == BT_OK; i++) {
        const int32_t *in = i < 0 ? toks : &id;
        int n = i < 0 ? (int)np : 1, pos = (int)depth + (i < 0 ? 0 : (int)(np + i));
        if ((rc = bench_step(e, rec, smp, i < 0 ? "prefill" : "decode", in, n, pos, &id))) break;
        if (i < 0) {
            t1 = bt_now();
            if (rec) bt_recorder_costs_get(rec, &c0);
        }
    }
    double t2 = bt_now();
    *p = bt_rate((double)np, t1 - t0);
    *d = bt_rate((double)nd, t2 - t1);
    *d_s += t2 - t1;
    if (rec && dec) {
        bt_recorder_costs_get(rec, &c1);
        dec->steps += c1.steps - c0.steps;
        dec->taps += c1.taps - c0.taps;
        dec->stats_ns += c1.stats_ns - c0.stats_ns;
        dec->rows_ns += c1.rows_ns - c0.rows_ns;
        dec->logits_ns += c1.logits_ns - c0.logits_ns;
        dec->commit_ns += c1.commit_ns - c0.commit_ns;
    }
    return rc;
}

/* A measured side: an engine, its recorder when taps are on, and its
 * repetitions' rates. */
typedef struct bench_side {
    bt_engine *e;
    bt_recorder *rec;
    bt_sampler *smp;             /* greedy, as run's */
    const char *label;
    double *pp, *dd;
    double p_med, d_med;
    bt_recorder_costs dec;       /* recording's cost over the decode steps of every repetition */
    double decode_s;             /* wall time of those decode steps */
} bench_side;

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* R rounds, each running every side once in turn (taps off, then taps on):
 * a machine whose speed drifts slows both alike, so their ratio holds; each
 * side's figure is the median of its repetitions. */
static int bench_rounds(bench_side *sides, int n_sides, const int32_t *toks, const int32_t *dtoks, long depth, long np,
                        long nd, long reps, bool quiet)
{
    int rc = BT_OK;
    for (int k = 0; k < n_sides; k++) {
        sides[k].pp = calloc((size_t)reps, sizeof(double));
        sides[k].dd = calloc((size_t)reps, sizeof(double));
        if (!sides[k].pp || !sides[k].dd) rc = bt_error(BT_ENOMEM, "out of memory");
    }
    for (long r = 0; r < reps && rc == BT_OK; r++)
        for (int k = 0; k < n_sides && rc == BT_OK; k++) {
            bench_side *sd = &sides[k];
            rc = bench_rep(sd->e, sd->rec, sd->smp, toks, dtoks, depth, np, nd, &sd->pp[r], &sd->dd[r], &sd->decode_s, &sd->dec);
            char ps[32], ds[32];
            if (!quiet && rc == BT_OK) bt_log("  %s rep %ld: prompt %s, decode %s", sd->label, r + 1,
                                              rate_s(sd->pp[r], "t/s", ps, sizeof(ps)), rate_s(sd->dd[r], "t/s", ds, sizeof(ds)));
        }
    for (int k = 0; k < n_sides; k++) {
        if (rc == BT_OK) {
            sides[k].p_med = median(sides[k].pp, reps);
            sides[k].d_med = median(sides[k].dd, reps);
        }
        free(sides[k].pp); free(sides[k].dd);
        sides[k].pp = sides[k].dd = NULL;
    }
    return rc;
}

/* Greedy decode of a natural-text prompt, plain and speculative: random
 * token ids (bench_rep) would give a drafter nothing to predict. */
static const char bench_text[] =
    "Once upon a time, in a small village at the edge of a forest, there lived a girl who loved "
    "to read. Every morning she walked to the library, picked a new book and read it under the "
    "old oak tree until the sun went down.";

/* The drafter: kind (BT_DRAFT_SELF, _NGRAM, _MTP), its engine de (NULL for
 * n-grams; made by draft_engine before any measuring), its name. */
static int bench_spec(const bt_model *m, const bt_tokenizer *tok, bt_engine *e, bt_engine *de, int kind, const char *name,
                      long k, long ngram, long nd, long reps, bool quiet, double *plain, double *spec, double *accept)
{
    if (!m->has_vocab) return bt_error(BT_EINVAL, "speculative bench needs the model's tokenizer (--tokenizer for llama2.c)");
    bt_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = bt_tokenize(tok, bench_text, sizeof(bench_text) - 1, true, false, &ids, &n);
    bt_sampler_cfg sc = { .top_p = 1, .rule = { .kind = BT_ARGMAX_FIRST } };
    if (!rc) rc = bt_sampler_new(&sc, m->cfg.n_vocab, &smp);
    int ctx = (int)(n + nd + k + 2);
    if (!rc && ctx > bt_engine_ctx_len(e)) {
        /* the main bench engine is sized for -p + -n; make room */
        rc = bt_error(BT_EINVAL, "speculative bench needs -p >= %d", (int)(n + k + 2));
    }
    double *tp = calloc((size_t)reps, sizeof(double)), *ts = calloc((size_t)reps, sizeof(double));
    if (!tp || !ts) rc = bt_error(BT_ENOMEM, "out of memory");
    int drafted = 0, acc = 0;
    for (long r = 0; r < reps && !rc; r++) {
        for (int spec_on = 0; spec_on < 2 && !rc; spec_on++) {
            bt_decoder_cfg dc = { .target = e, .smp = smp, .greedy = true, .rule = sc.rule, .tok = tok, .ignore_eos = true,
                                  .drafter = !spec_on ? BT_DRAFT_NONE : kind,
                                  .k = (int)k, .ngram = (int)ngram, .drafter_name = name, .draft = de };
            bt_decoder *d = NULL;
            if ((rc = bt_decoder_new(&dc, ids, (int)n, (int)nd + (int)k + 1, &d))) break;
            int32_t out[80];
            int got = 0, m_out = 0;
            double t0 = 0;
            while (!rc && got < nd + 1) {
                rc = bt_decoder_next(d, out, NULL, &m_out);
                if (got == 0) t0 = bt_now();      /* after the prefill's token */
                got += m_out;
            }
            double dt = bt_now() - t0;
            const bt_decoder_stats *st = bt_decoder_stats_get(d);
            if (spec_on) { drafted += st->drafted; acc += st->accepted; }
            (spec_on ? ts : tp)[r] = bt_rate(got - 1, dt);
            bt_decoder_free(d);
        }
        char a[32], b[32];
        if (!rc && !quiet) bt_log("  text rep %ld: plain %s, speculative %s", r + 1, rate_s(tp[r], "t/s", a, sizeof(a)),
                                  rate_s(ts[r], "t/s", b, sizeof(b)));
    }
    if (!rc) {
        qsort(tp, (size_t)reps, sizeof(double), cmp_double);
        qsort(ts, (size_t)reps, sizeof(double), cmp_double);
        *plain = tp[reps / 2];
        *spec = ts[reps / 2];
        *accept = drafted ? (double)acc / drafted : 0;
    }
    free(tp); free(ts); free(ids);
    bt_sampler_free(smp);
    return rc;
}

/* The speculative bench's drafter engine, made before any measuring so a
 * model without what the drafter needs is refused at once: the first n
 * layers (--draft-self), the MTP block (--draft-mtp; a model without one is
 * refused by bt_engine_new_opts, naming it), or none (n-grams). It runs the
 * bench's numerics profile, as run's drafter does. */
static int draft_engine(const bt_model *m, bt_engine *e, long self, bool mtp, long np, const bt_numerics *prof, bt_engine **out)
{
    *out = NULL;
    if (!self && !mtp) return BT_OK;
    if (!m->has_vocab) return bt_error(BT_EINVAL, "speculative bench needs the model's tokenizer (--tokenizer for llama2.c)");
    bt_engine_opts eo = { .ctx_len = bt_engine_ctx_len(e), .max_batch = (int)np, .n_layers = (int)self, .share_pool = e,
                          .mtp = mtp };
    int rc = bt_engine_new_opts(m, &eo, out);
    if (rc == BT_OK && !bt_numerics_is_exact(prof)) rc = bt_engine_set_numerics(*out, prof);
    if (rc) { bt_engine_free(*out); *out = NULL; }
    return rc;
}

/* A second session on the same model (its own engine: the native one, or
 * engine_new's) recording into a temporary trace in a private directory,
 * so the trace is created exclusively (as every trace is) in a place nobody
 * else can name; traced_close removes both. */
typedef struct traced { bt_session *ses; char dir[32]; char path[64]; } traced;

static int traced_open(const bt_session *ses, const bt_session_cfg *cfg, const bt_numerics *prof,
                       int (*engine_new)(void *, const bt_model *, int, int, int, bt_engine **), void *engine_user,
                       bool cupti, int taps, bool no_state, traced *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->dir, sizeof(t->dir), "/tmp/bangtrace-bench-XXXXXX");
    if (!mkdtemp(t->dir)) { t->dir[0] = 0; return bt_error(BT_EIO, "cannot create a temporary directory in /tmp: %s", strerror(errno)); }
    snprintf(t->path, sizeof(t->path), "%s/bench.db", t->dir);
    bt_session_cfg tcfg = { .share = ses, .ctx = cfg->ctx, .max_batch = cfg->max_batch, .threads = cfg->threads,
                            .device = engine_new ? NULL : cfg->device, .cuda_graphs = engine_new ? false : cfg->cuda_graphs,
                            .cupti = cupti,
                            .trace = t->path, .taps = taps, .layer_lo = -1, .layer_hi = -1, .no_state_taps = no_state,
                            .numerics = prof, .account = true,
                            .rule = { .kind = BT_ARGMAX_FIRST }, .engine_new = engine_new, .engine_user = engine_user };
    return bt_session_new(&tcfg, &t->ses);
}

static void traced_close(traced *t)
{
    bt_session_close(t->ses, BT_TRACE_STATUS_OK);
    t->ses = NULL;
    if (!t->dir[0]) return;
    unlink(t->path);
    char side[sizeof t->path + 8];
    snprintf(side, sizeof(side), "%s-wal", t->path); unlink(side);
    snprintf(side, sizeof(side), "%s-shm", t->path); unlink(side);
    rmdir(t->dir);
    t->dir[0] = 0;
}

/* One untimed prefill and decode step first, as llama-bench warms up: the
 * first touch of the weights' mapping and of the KV cache would otherwise
 * be timed as prefill (a quarter of an f32 prompt). */
static int bench_warm(const bench_side *sd, const int32_t *toks, long np)
{
    int32_t wid = toks[0];
    int rc = bench_step(sd->e, sd->rec, sd->smp, "prefill", toks, (int)np, 0, &wid);
    return rc ? rc : bench_step(sd->e, sd->rec, sd->smp, "decode", &wid, 1, (int)np, &wid);
}

/* What recording cost per decode step, timed by the recorder itself
 * (bt_recorder_costs): microseconds, and the share of the step. */
static void costs_per_step(const bench_side *sd, double us[5], double *step_us, double *taps)
{
    const bt_recorder_costs *c = &sd->dec;
    double n = c->steps > 0 ? (double)c->steps : NAN;
    us[0] = c->stats_ns / 1e3 / n; us[1] = c->rows_ns / 1e3 / n; us[2] = c->logits_ns / 1e3 / n; us[3] = c->commit_ns / 1e3 / n;
    us[4] = us[0] + us[1] + us[2] + us[3];
    *step_us = sd->decode_s > 0 ? sd->decode_s * 1e6 / n : NAN;
    *taps = c->taps / n;
}

static json_t *costs_json(const bench_side *sd)
{
    double us[5], step, taps;
    costs_per_step(sd, us, &step, &taps);
    if (isnan(step) || isnan(us[4])) return json_null();
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "taps", taps, "statistics_us", us[0], "rows_us", us[1],
                     "logits_us", us[2], "commit_us", us[3], "total_us", us[4], "step_us", step);
}

static void print_costs(const bench_side *sd)
{
    double us[5], step, taps;
    costs_per_step(sd, us, &step, &taps);
    if (isnan(step) || isnan(us[4])) return;
    printf("recording         per decode step %.0f us of %.0f us (%.1f%%): statistics of %.0f taps %.0f us, "
           "tap rows %.0f us, logits and token %.0f us, commit %.0f us\n",
           us[4], step, 100 * us[4] / step, taps, us[0], us[1], us[2], us[3]);
}

typedef struct lc_user { const char *model; const bt_llama_settings *llama; } lc_user;

static int llamacpp_engine(void *user, const bt_model *m, int ctx, int max_batch, int threads, bt_engine **out)
{
    const lc_user *u = user;
    bt_llamacpp_opts lo = { .model_path = u->model, .ctx_len = ctx, .max_batch = max_batch, .n_threads = threads, .llama = u->llama };
    return bt_llamacpp_engine_new(m, &lo, out);
}

static double ratio(double a, double b) { return a > 0 && b > 0 ? a / b : NAN; }

typedef struct bench_opts {
    bt_args g;                /* --model, --tokenizer, --threads, --device, --numerics, --llama-* */
    int taps;                 /* bt_taps_mode; BT_TAPS_NONE: no taps-on decode */
    long spec_k, draft_self, draft_ngram, np, nd, reps, depth;
    bool json, graphs, cupti, against, no_state, draft_mtp;
} bench_opts;

static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){ .g = { .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_TOKENIZER | BT_ARGS_THREADS | BT_ARGS_T |
                                      BT_ARGS_DEVICE | BT_ARGS_NUMERICS | BT_ARGS_LLAMA,
                              .threads = bt_pool_default_threads() },
                       .taps = BT_TAPS_NONE, .np = 128, .nd = 64, .reps = 3 };
    bool taps_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool taken;
        if (bt_args_take(&o->g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken) continue;
        bool takes = strcmp(a, "--json") && strcmp(a, "--cuda-graphs") && strcmp(a, "--cupti") && strcmp(a, "--no-state-taps") &&
                     strcmp(a, "--draft-mtp");
        if (takes && !v) return bt_error(BT_EINVAL, "%s needs a value", a);
        if (!strcmp(a, "-p")) { if (bt_parse_int(a, argv[++i], 1, 8192, &o->np)) return BT_EINVAL; }
        else if (!strcmp(a, "-n")) { if (bt_parse_int(a, argv[++i], 1, 8192, &o->nd)) return BT_EINVAL; }
        else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) { if (bt_parse_int(a, argv[++i], 0, 131072, &o->depth)) return BT_EINVAL; }
        else if (!strcmp(a, "--reps")) { if (bt_parse_int(a, argv[++i], 1, 100, &o->reps)) return BT_EINVAL; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--cuda-graphs")) o->graphs = true;
        else if (!strcmp(a, "--cupti")) o->cupti = true;
        else if (!strcmp(a, "--no-state-taps")) o->no_state = true;
        else if (!strcmp(a, "--draft-mtp")) o->draft_mtp = true;
        else if (!strcmp(a, "--spec-k")) { if (bt_parse_int(a, argv[++i], 1, 64, &o->spec_k)) return BT_EINVAL; }
        else if (!strcmp(a, "--draft-self")) { if (bt_parse_int(a, argv[++i], 1, 100000, &o->draft_self)) return BT_EINVAL; }
        else if (!strcmp(a, "--draft-ngram")) { if (bt_parse_int(a, argv[++i], 1, 64, &o->draft_ngram)) return BT_EINVAL; }
        else if (!strcmp(a, "--against")) {
            if (strcmp(argv[++i], "llama.cpp")) return bt_error(BT_EINVAL, "--against expects llama.cpp, got '%s'", argv[i]);
            o->against = true;
        }
        else if (!strcmp(a, "--taps")) {
            taps_given = true;
            if ((o->taps = bt_taps_mode_parse(argv[++i])) < 0)
                return bt_error(BT_EINVAL, "--taps expects all, layers, logits or none, got '%s'", argv[i]);
        }
        else return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help bench)", a);
    }
    if (bt_args_need_model(&o->g, "bench")) return BT_EINVAL;
    if (o->graphs && bt_args_need_feature(&o->g, BT_BACKEND_GRAPHS)) return BT_EINVAL;
    if (o->cupti && bt_args_need_feature(&o->g, BT_BACKEND_ACTIVITY)) return BT_EINVAL;
    if (o->cupti && o->taps == BT_TAPS_NONE) return bt_error(BT_EINVAL, "--cupti records into the taps-on trace: give --taps MODE");
    if (o->no_state && !taps_given) return bt_error(BT_EINVAL, "--no-state-taps goes with --taps MODE");
    int drafters = (o->draft_self > 0) + (o->draft_ngram > 0) + o->draft_mtp;
    if (!o->spec_k != !drafters || drafters > 1)
        return bt_error(BT_EINVAL, "--spec-k K goes with one of --draft-self N, --draft-ngram N or --draft-mtp");
    if (bt_args_llama_finish(&o->g, o->against, "--against llama.cpp")) return BT_EINVAL;
    if (!o->against) return BT_OK;
    /* llama.cpp runs its own kernels on the CPU, exactly as built: a
     * native side under other conditions would not be a comparison */
    if (!bt_device_is_cpu(o->g.device))
        return bt_error(BT_EINVAL, "--against llama.cpp compares CPU engines: --device %s cannot apply", o->g.device);
    if (!bt_numerics_is_exact(&o->g.numerics))
        return bt_error(BT_EINVAL, "--against llama.cpp runs each engine's own numerics: --numerics cannot apply");
    if (o->spec_k) return bt_error(BT_EINVAL, "--against llama.cpp: speculative decoding (--spec-k) cannot apply");
    if (o->graphs || o->cupti)
        return bt_error(BT_EINVAL, "--against llama.cpp compares CPU engines: %s cannot apply", o->graphs ? "--cuda-graphs" : "--cupti");
    if (o->g.tokenizer)
        return bt_error(BT_EINVAL, "--against llama.cpp needs a GGUF model (--tokenizer is for llama2.c checkpoints)");
    if (!taps_given) o->taps = BT_TAPS_ALL;
    return BT_OK;
}

int cmd_bench(int argc, char **argv)
{
    double lb_p = NAN, lb_d = NAN, lc_p = NAN, lc_d = NAN, lc_taps = NAN;
    bt_session *ses = NULL;
    const bt_model *m = NULL;
    bt_engine *e = NULL, *de = NULL;
    bt_pool *pool = NULL;
    bt_sampler *smp = NULL;
    int32_t *toks = NULL;
    int status = 2;
    bench_opts o;
    if (parse_args(argc, argv, &o)) goto fail;
    const bt_numerics *prof = &o.g.numerics;
    lc_user lcu = { o.g.model, &o.g.llama };
    if (o.against) {
        char lb[4200];
        if (bt_llamacpp_bench_check(lb, sizeof(lb))) goto fail;   /* before any measuring */
    }
    bt_session_cfg cfg = { .max_batch = (int)o.np, .cuda_graphs = o.graphs };
    bt_args_session(&o.g, &cfg);
    cfg.ctx = (int)(o.depth + o.np + o.nd);
    if (bt_session_open(&cfg, &ses)) goto fail;
    m = bt_session_model(ses);
    if (o.against && strcmp(m->format, "gguf")) { bt_error(BT_EINVAL, "--against llama.cpp: %s is not a GGUF file", o.g.model); goto fail; }
    if (o.draft_self >= m->cfg.n_layers) { bt_error(BT_EINVAL, "--draft-self %ld must be below the model's %d layers", o.draft_self, m->cfg.n_layers); goto fail; }
    const bt_config *c = &m->cfg;
    if (o.depth + o.np + o.nd > c->ctx_len) {
        bt_error(BT_EINVAL, "-d %ld + -p %ld + -n %ld positions exceed the model's context of %d", o.depth, o.np, o.nd, c->ctx_len);
        goto fail;
    }
    if (bt_session_start(ses, &cfg)) goto fail;
    e = bt_session_engine(ses);
    /* the drafter before any measuring: a model it cannot draft for is refused at once */
    if (o.spec_k && draft_engine(m, e, o.draft_self, o.draft_mtp, o.np, prof, &de)) goto fail;
    char drafter[32] = "";
    if (o.draft_self) snprintf(drafter, sizeof(drafter), "self:%ld", o.draft_self);
    else if (o.draft_ngram) snprintf(drafter, sizeof(drafter), "ngram:%ld", o.draft_ngram);
    else if (o.draft_mtp) snprintf(drafter, sizeof(drafter), "mtp");
    char prof_s[256];
    bt_numerics_format(prof, prof_s, sizeof(prof_s));
    if (!o.json && !bt_numerics_is_exact(prof)) bt_log("bench: numerics %s", prof_s);
    /* the context filler (depth) first, then the timed prompt */
    toks = malloc((size_t)(o.depth + o.np) * sizeof(int32_t));
    if (!toks) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    if (bt_sampler_new(&(bt_sampler_cfg){ .rule = { .kind = BT_ARGMAX_FIRST } }, m->cfg.n_vocab, &smp)) goto fail;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < o.depth + o.np; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; toks[i] = (int32_t)(s % (uint64_t)c->n_vocab); }

    size_t bytes = weight_bytes(&m->output);
    /* Bytes one decode token reads: every tensor of the architecture's layer
     * table; of an expert tensor only the slabs of the experts a token uses. */
    const bt_arch *arch = c->desc ? c->desc : bt_arch_find("llama");
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < arch->n_layer; k++) {
            const bt_weight *w = (const bt_weight *)((const char *)&m->layers[l] + arch->layer[k].field);
            size_t b = weight_bytes(w);
            if (w->n_slab > 1) b = b / (size_t)w->n_slab * (size_t)BT_MAX(c->n_expert_used, 1);
            bytes += b;
        }
    /* Multiply-adds per prompt token of the weight matmuls (the prompt's
     * FLOPs but for attention's, a few percent at depth 0): every 2-D
     * weight of the layer table (of an expert tensor the slabs a token
     * uses), and the head once per prompt (its last row). */
    double macs = m->output.data ? (double)m->output.rows * m->output.cols / (double)o.np : 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < arch->n_layer; k++) {
            const bt_weight *w = (const bt_weight *)((const char *)&m->layers[l] + arch->layer[k].field);
            if (!w->data || w->rows < 2 || w->cols < 2) continue;
            double e = (double)w->rows * w->cols;
            if (w->n_slab > 1) e = e / w->n_slab * BT_MAX(c->n_expert_used, 1);
            macs += e;
        }
    double p_med, d_med, p_taps = 0, d_taps = 0, lc_ptaps = 0;
    if (!o.json) bt_log("bench: %s, %d threads (%s), depth %ld, prefill %ld, decode %ld, %ld reps", c->name, (int)o.g.threads, bt_kernels_simd(),
                      o.depth, o.np, o.nd, o.reps);
    if (o.against) {
        if (!o.json) bt_log("bench: llama-bench (%s)", bt_llamacpp_dir());
        if (bt_llamacpp_bench_run(o.g.model, (int)o.g.threads, (int)o.depth, (int)o.np, (int)o.nd, (int)o.reps, &o.g.llama, &lb_p, &lb_d)) goto fail;
    }
    /* taps off and taps on alternate, round by round (bench_rounds) */
    traced tr = { 0 };
    bench_side sides[2] = { { .e = e, .smp = smp, .label = "taps off" }, { .smp = smp, .label = "taps on" } };
    int n_sides = 1;
    if (o.taps != BT_TAPS_NONE) {
        if (traced_open(ses, &cfg, prof, NULL, NULL, o.cupti, o.taps, o.no_state, &tr)) { traced_close(&tr); goto fail; }
        sides[1].e = bt_session_engine(tr.ses);
        sides[1].rec = bt_session_recorder(tr.ses);
        n_sides = 2;
    }
    int brc = BT_OK;
    for (int k = 0; k < n_sides && brc == BT_OK; k++) brc = bench_warm(&sides[k], toks + o.depth, o.np);
    if (brc == BT_OK) brc = bench_rounds(sides, n_sides, toks + o.depth, toks, o.depth, o.np, o.nd, o.reps, o.json);
    traced_close(&tr);
    if (brc) goto fail;
    p_med = sides[0].p_med; d_med = sides[0].d_med;
    if (n_sides > 1) { p_taps = sides[1].p_med; d_taps = sides[1].d_med; }
    if (o.against) {
        /* llama.cpp's engine behind bangtrace (run --engine llama.cpp), taps off and on alternating */
        bt_session *ls = NULL;
        traced ltr = { 0 };
        bt_session_cfg lcfg = { .share = ses, .ctx = cfg.ctx, .max_batch = cfg.max_batch, .threads = cfg.threads,
                                .engine_new = llamacpp_engine, .engine_user = &lcu, .llama = o.g.llama };
        bench_side ls2[2] = { { .smp = smp, .label = "llama.cpp taps off" }, { .smp = smp, .label = "llama.cpp taps on" } };
        int rc = bt_session_new(&lcfg, &ls), nl = 1;
        if (rc == BT_OK) ls2[0].e = bt_session_engine(ls);
        if (rc == BT_OK && o.taps != BT_TAPS_NONE &&
            (rc = traced_open(ses, &cfg, NULL, llamacpp_engine, &lcu, false, o.taps, o.no_state, &ltr)) == BT_OK) {
            ls2[1].e = bt_session_engine(ltr.ses);
            ls2[1].rec = bt_session_recorder(ltr.ses);
            nl = 2;
        }
        for (int k = 0; k < nl && rc == BT_OK; k++) rc = bench_warm(&ls2[k], toks + o.depth, o.np);
        if (rc == BT_OK) rc = bench_rounds(ls2, nl, toks + o.depth, toks, o.depth, o.np, o.nd, o.reps, o.json);
        traced_close(&ltr);
        bt_session_close(ls, NULL);
        if (rc) goto fail;
        lc_p = ls2[0].p_med; lc_d = ls2[0].d_med;
        if (nl > 1) { lc_ptaps = ls2[1].p_med; lc_taps = ls2[1].d_med; }
    }
    double sp_plain = 0, sp_spec = 0, sp_accept = 0;
    int kind = o.draft_self ? BT_DRAFT_SELF : o.draft_mtp ? BT_DRAFT_MTP : BT_DRAFT_NGRAM;
    if (o.spec_k && bench_spec(m, bt_session_tokenizer(ses), e, de, kind, drafter, o.spec_k, o.draft_ngram, o.nd, o.reps, o.json,
                               &sp_plain, &sp_spec, &sp_accept)) goto fail;
    pool = bt_pool_new((int)o.g.threads);
    double bw = pool ? bt_measure_bandwidth(pool) : 0;
    /* the f32 FMA roofline of the prompt's matmuls (CPU only) */
    const char *fma_unit = NULL;
    bool on_cpu = !strcmp(bt_backend_name(bt_engine_backend(e)), "cpu");
    double fma = pool && on_cpu ? bt_measure_fma_peak(pool, &fma_unit) : NAN;
    double mm_gflops = 2.0 * macs * p_med / 1e9;
    double eff = bytes * d_med / 1e9;
    if (o.json) {
        /* rates are null when too short to time (json_real refuses NAN) */
        json_t *j = json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:o, s:o, s:I, s:o, s:f, s:s, s:o, s:i, s:o, s:o, s:f}",
                              "model", c->name, "threads", (int)o.g.threads, "simd", bt_kernels_simd(),
                              "depth", (int)o.depth, "prompt_tokens", (int)o.np, "decode_tokens", (int)o.nd,
                              "prompt_tokens_per_s", rate_json(p_med), "decode_tokens_per_s", rate_json(d_med),
                              "weight_bytes_per_token", (json_int_t)bytes,
                              "effective_bandwidth_gbs", rate_json(eff), "measured_bandwidth_gbs", bw,
                              "taps", bt_taps_mode_name(o.taps), "decode_tokens_per_s_taps", rate_json(d_taps),
                              "spec_k", (int)o.spec_k, "text_decode_tokens_per_s", rate_json(sp_plain),
                              "text_decode_tokens_per_s_spec", rate_json(sp_spec), "spec_acceptance", sp_accept);
        if (j) json_object_set_new(j, "prompt_tokens_per_s_taps", rate_json(p_taps));
        if (j) json_object_set_new(j, "state_taps", json_boolean(o.taps == BT_TAPS_ALL && !o.no_state));
        if (j && n_sides > 1) json_object_set_new(j, "recording_per_decode_step", costs_json(&sides[1]));
        if (j) json_object_set_new(j, "numerics", json_string(prof_s));
        if (j) json_object_set_new(j, "fma_peak_gflops", rate_json(fma));
        if (j) json_object_set_new(j, "prompt_matmul_gflops", rate_json(mm_gflops));
        if (j) json_object_set_new(j, "device", json_string(bt_backend_name(bt_engine_backend(e))));
        if (j) json_object_set_new(j, "cuda_graphs", json_boolean(o.graphs));
        if (j) json_object_set_new(j, "cupti", json_boolean(o.cupti));
        /* the speculative bench's drafter (run's trace meta names it alike), null without --spec-k */
        if (j) json_object_set_new(j, "drafter", o.spec_k ? json_string(drafter) : json_null());
        if (j && o.against) {
            json_t *a = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "engine", "llama.cpp",
                                  "version", bt_llamacpp_version(),
                                  "llama_bench_prompt_tokens_per_s", rate_json(lb_p), "llama_bench_decode_tokens_per_s", rate_json(lb_d),
                                  "engine_prompt_tokens_per_s", rate_json(lc_p), "engine_decode_tokens_per_s", rate_json(lc_d),
                                  "engine_decode_tokens_per_s_taps", rate_json(lc_taps),
                                  "engine_prompt_tokens_per_s_taps", rate_json(lc_ptaps),
                                  "ratio_prompt", rate_json(ratio(p_med, lb_p)), "ratio_decode", rate_json(ratio(d_med, lb_d)));
            json_object_set_new(j, "against", a ? a : json_null());
        }
        char *str = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(str ? str : "{}");
        free(str);
        json_decref(j);
    } else {
        printf("model             %s (%s)\n", bt_text_esc(c->name), m->format);
        printf("threads           %d (%s)\n", (int)o.g.threads, bt_kernels_simd());
        printf("numerics          %s\n", prof_s);
        char r1[48], r2[48];
        if (o.depth) printf("depth             %ld positions of context before each measurement\n", o.depth);
        printf("prompt            %s (%ld tokens, median of %ld)\n", rate_s(p_med, "tokens/s", r1, sizeof(r1)), o.np, o.reps);
        printf("decode            %s (%ld tokens, median of %ld)\n", rate_s(d_med, "tokens/s", r1, sizeof(r1)), o.nd, o.reps);
        printf("weights/token     %.1f MB\n", bytes / 1e6);
        if (isnan(eff)) printf("effective bw      n/a (measured %.2f GB/s)\n", bw);
        else printf("effective bw      %.2f GB/s (%.0f%% of measured %.2f GB/s)\n", eff, bw > 0 ? 100 * eff / bw : 0, bw);
        if (!isnan(fma)) {
            printf("fma peak          %.1f GFLOP/s f32 (%d threads, %s, measured)\n", fma, (int)o.g.threads, fma_unit);
            if (!isnan(mm_gflops))
                printf("prompt matmuls    %.1f GFLOP/s (weight matmuls, %.0f%% of the FMA peak)\n", mm_gflops, 100 * mm_gflops / fma);
        }
        if (o.taps != BT_TAPS_NONE) {
            printf("prompt, taps %-4s %s (%.2fx of taps off)%s\n", bt_taps_mode_name(o.taps), rate_s(p_taps, "tokens/s", r1, sizeof(r1)),
                   p_med > 0 ? p_taps / p_med : NAN, o.no_state ? ", states untapped" : "");
            printf("decode, taps %-4s %s (%.2fx of taps off)%s\n", bt_taps_mode_name(o.taps), rate_s(d_taps, "tokens/s", r1, sizeof(r1)),
                   d_med > 0 ? d_taps / d_med : NAN, o.no_state ? ", states untapped" : "");
            print_costs(&sides[1]);
        }
        if (o.spec_k)
            printf("text decode       %s plain, %s with speculation (k=%ld, drafter %s): %.2fx, acceptance %.0f%%\n",
                   rate_s(sp_plain, "tokens/s", r1, sizeof(r1)), rate_s(sp_spec, "tokens/s", r2, sizeof(r2)), o.spec_k,
                   drafter, sp_plain > 0 ? sp_spec / sp_plain : NAN, 100 * sp_accept);
        if (o.against) {
            char c1[48], c2[48], c3[48];
            printf("\nagainst llama.cpp %s (same GGUF, %d threads, depth %ld, -p %ld, -n %ld, median of %ld; taps %s)\n",
                   bt_llamacpp_version(), (int)o.g.threads, o.depth, o.np, o.nd, o.reps, bt_taps_mode_name(o.taps));
            printf("%-26s %14s %14s %14s\n", "engine", "prompt t/s", "decode t/s", "decode, taps");
            printf("%-26s %14s %14s %14s\n", "bangtrace (native)", cell(p_med, c1, sizeof(c1)),
                   cell(d_med, c2, sizeof(c2)), o.taps != BT_TAPS_NONE ? cell(d_taps, c3, sizeof(c3)) : "-");
            printf("%-26s %14s %14s %14s\n", "llama.cpp (llama-bench)", cell(lb_p, c1, sizeof(c1)),
                   cell(lb_d, c2, sizeof(c2)), "-");
            printf("%-26s %14s %14s %14s\n", "llama.cpp (in bangtrace)", cell(lc_p, c1, sizeof(c1)),
                   cell(lc_d, c2, sizeof(c2)), o.taps != BT_TAPS_NONE ? cell(lc_taps, c3, sizeof(c3)) : "-");
            double rp = ratio(p_med, lb_p), rd = ratio(d_med, lb_d);
            snprintf(c1, sizeof(c1), isnan(rp) ? "n/a" : "%.2fx", rp);
            snprintf(c2, sizeof(c2), isnan(rd) ? "n/a" : "%.2fx", rd);
            printf("%-26s %14s %14s %14s\n", "native / llama-bench", c1, c2, "-");
        }
    }
    status = 0;
    goto out;
fail:
    status = bt_cmd_fail("bench");
out:
    free(toks);
    bt_sampler_free(smp);
    bt_engine_free(de);
    bt_pool_free(pool);
    bt_session_close(ses, NULL);
    return status;
}
