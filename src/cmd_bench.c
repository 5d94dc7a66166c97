/* cmd_bench.c - `bangtrace bench`: prompt (prefill) and decode tokens/s,
 * median of several repetitions, and the effective weight bandwidth
 * (bytes of weights read per decoded token x tokens/s) against a read
 * bandwidth this command measures on the same threads. Timing lives here,
 * never in tests. */
#include "cmd.h"
#include "engine/engine.h"
#include "kernels.h"
#include "model/model.h"
#include "tap/recorder.h"
#include "trace/trace.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_bench_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace bench --model M [--tokenizer T] [--threads N] [-p N] [-n N] [--reps R]\n"
        "                       [--taps MODE] [--json]\n\n"
        "Measure prefill of -p tokens (default 128) and greedy decode of -n tokens\n"
        "(default 64) on fixed token ids, the median of R repetitions (default 3), and\n"
        "report tokens/s, the weight bytes read per decoded token, the effective weight\n"
        "bandwidth and the machine's measured read bandwidth.\n\n"
        "  --taps MODE   also decode with taps recorded into a temporary trace\n"
        "                (all, layers, logits) and report taps-on / taps-off\n");
}

static size_t weight_bytes(const bt_weight *w) { return w->data ? bt_dtype_row_size(w->type, w->cols) * (size_t)w->rows : 0; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Prefill np tokens then greedily decode nd, reps times; medians out. With
 * a recorder each forward is a recorded step, as in `run --trace`. */
static int bench_reps(bt_engine *e, bt_recorder *rec, const int32_t *toks, long np, long nd, long reps,
                      bool quiet, const char *label, double *p_med, double *d_med)
{
    const bt_model *m = bt_engine_model(e);
    int n_vocab = m->cfg.n_vocab;
    double *pp = calloc((size_t)reps, sizeof(double)), *dd = calloc((size_t)reps, sizeof(double));
    if (!pp || !dd) { free(pp); free(dd); return bt_error(BT_ENOMEM, "out of memory"); }
    int rc = BT_OK;
    for (long r = 0; r < reps && rc == BT_OK; r++) {
        double t0 = bt_now(), t1 = t0;
        int32_t id = toks[np - 1];
        for (long i = -1; i < nd && rc == BT_OK; i++) {
            const int32_t *in = i < 0 ? toks : &id;
            int n = i < 0 ? (int)np : 1, pos = i < 0 ? 0 : (int)(np + i);
            if (rec) rc = bt_recorder_step_begin(rec, i < 0 ? "prefill" : "decode", pos, n);
            if (rc == BT_OK) rc = bt_engine_forward(e, in, n, pos);
            if (rc) break;
            const float *lg = bt_engine_logits(e);
            int32_t best = 0;
            for (int k = 1; k < n_vocab; k++) if (lg[k] > lg[best]) best = k;
            id = best;
            if (rec && (rc = bt_recorder_step_sampled(rec, lg, pos + n - 1, id, 0)) == BT_OK)
                rc = bt_recorder_step_end(rec, 0);
            if (i < 0) t1 = bt_now();
        }
        double t2 = bt_now();
        pp[r] = np / (t1 - t0);
        dd[r] = nd / (t2 - t1);
        if (!quiet && rc == BT_OK) bt_log("  %s rep %ld: prompt %.1f t/s, decode %.1f t/s", label, r + 1, pp[r], dd[r]);
    }
    qsort(pp, (size_t)reps, sizeof(double), cmp_double);
    qsort(dd, (size_t)reps, sizeof(double), cmp_double);
    *p_med = pp[reps / 2];
    *d_med = dd[reps / 2];
    free(pp); free(dd);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL;
    int taps = BT_TAPS_NONE;
    long threads = sysconf(_SC_NPROCESSORS_ONLN), np = 128, nd = 64, reps = 3;
    bool json = false;
    bt_model *m = NULL;
    bt_engine *e = NULL;
    bt_pool *pool = NULL;
    int32_t *toks = NULL;
    int status = 2;
    if (threads < 1) threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = strcmp(a, "--json") != 0;
        if (takes && !v) { bt_error(BT_EINVAL, "%s needs a value", a); goto fail; }
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = argv[++i];
        else if (!strcmp(a, "--tokenizer")) tokenizer = argv[++i];
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) { if (bt_parse_int(a, argv[++i], 1, 256, &threads)) goto fail; }
        else if (!strcmp(a, "-p")) { if (bt_parse_int(a, argv[++i], 1, 8192, &np)) goto fail; }
        else if (!strcmp(a, "-n")) { if (bt_parse_int(a, argv[++i], 1, 8192, &nd)) goto fail; }
        else if (!strcmp(a, "--reps")) { if (bt_parse_int(a, argv[++i], 1, 100, &reps)) goto fail; }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--taps")) {
            if ((taps = bt_taps_mode_parse(argv[++i])) < 0) { bt_error(BT_EINVAL, "--taps expects all, layers, logits or none, got '%s'", argv[i]); goto fail; }
        }
        else { bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help bench)", a); goto fail; }
    }
    if (!model) { bt_error(BT_EINVAL, "--model is required"); goto fail; }
    if (bt_model_load(model, tokenizer, &m)) goto fail;
    const bt_config *c = &m->cfg;
    int ctx = (int)(np + nd);
    if (bt_engine_new(m, ctx, (int)np, (int)threads, &e)) goto fail;
    toks = malloc((size_t)np * sizeof(int32_t));
    if (!toks) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < np; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; toks[i] = (int32_t)(s % (uint64_t)c->n_vocab); }

    size_t bytes = weight_bytes(&m->output);
    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        bytes += weight_bytes(&L->wq) + weight_bytes(&L->wk) + weight_bytes(&L->wv) + weight_bytes(&L->wo) +
                 weight_bytes(&L->w_gate) + weight_bytes(&L->w_up) + weight_bytes(&L->w_down);
    }
    double p_med, d_med, d_taps = 0;
    if (!json) bt_log("bench: %s, %d threads (%s), prefill %ld, decode %ld, %ld reps", c->name, (int)threads, bt_kernels_simd(), np, nd, reps);
    if (bench_reps(e, NULL, toks, np, nd, reps, json, "taps off", &p_med, &d_med)) goto fail;
    if (taps != BT_TAPS_NONE) {
        char path[] = "/tmp/bangtrace-bench-XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0) { bt_error(BT_EIO, "cannot create a temporary trace in /tmp"); goto fail; }
        close(fd);
        bt_trace *tr = NULL;
        bt_recorder *rec = NULL;
        bt_recorder_cfg rc_cfg = { .model = m, .taps = taps, .layer_lo = -1, .layer_hi = -1, .topk = 20,
                                   .rule = { .kind = BT_ARGMAX_FIRST } };
        double pt;
        int rc = bt_trace_create(path, &tr);
        if (rc == BT_OK) { rc_cfg.trace = tr; rc = bt_recorder_new(&rc_cfg, e, &rec); }
        if (rc == BT_OK) rc = bench_reps(e, rec, toks, np, nd, reps, json, "taps on", &pt, &d_taps);
        bt_recorder_free(rec);
        bt_trace_close(tr, "ok");
        unlink(path);
        char side[4200];
        snprintf(side, sizeof(side), "%s-wal", path); unlink(side);
        snprintf(side, sizeof(side), "%s-shm", path); unlink(side);
        if (rc) goto fail;
    }
    pool = bt_pool_new((int)threads);
    double bw = pool ? bt_measure_bandwidth(pool) : 0;
    double eff = bytes * d_med / 1e9;
    if (json) {
        json_t *j = json_pack("{s:s, s:i, s:s, s:i, s:i, s:f, s:f, s:I, s:f, s:f, s:s, s:f}",
                              "model", c->name, "threads", (int)threads, "simd", bt_kernels_simd(),
                              "prompt_tokens", (int)np, "decode_tokens", (int)nd,
                              "prompt_tokens_per_s", p_med, "decode_tokens_per_s", d_med,
                              "weight_bytes_per_token", (json_int_t)bytes,
                              "effective_bandwidth_gbs", eff, "measured_bandwidth_gbs", bw,
                              "taps", bt_taps_mode_name(taps), "decode_tokens_per_s_taps", d_taps);
        char *str = json_dumps(j, JSON_COMPACT);
        puts(str ? str : "{}");
        free(str);
        json_decref(j);
    } else {
        printf("model             %s (%s)\n", c->name, m->format);
        printf("threads           %d (%s)\n", (int)threads, bt_kernels_simd());
        printf("prompt            %.1f tokens/s (%ld tokens, median of %ld)\n", p_med, np, reps);
        printf("decode            %.1f tokens/s (%ld tokens, median of %ld)\n", d_med, nd, reps);
        printf("weights/token     %.1f MB\n", bytes / 1e6);
        printf("effective bw      %.2f GB/s (%.0f%% of measured %.2f GB/s)\n", eff, bw > 0 ? 100 * eff / bw : 0, bw);
        if (taps != BT_TAPS_NONE)
            printf("decode, taps %-4s %.1f tokens/s (%.2fx of taps off)\n", bt_taps_mode_name(taps), d_taps, d_med > 0 ? d_taps / d_med : 0);
    }
    status = 0;
    goto out;
fail:
    status = bt_cmd_fail("bench");
out:
    free(toks);
    bt_pool_free(pool);
    bt_engine_free(e);
    bt_model_free(m);
    return status;
}
