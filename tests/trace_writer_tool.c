/* trace_writer_tool.c - drives the trace writer and reader for the shell
 * tests (tests/trace_crash.sh, tests/export.sh), standing in for
 * `bangtrace run --trace` where a test needs control over timing or content.
 *
 *   trace_writer_tool write OUT.db [--steps N] [--delay-ms D] [--prompt TEXT]
 *                                  [--bad-step S] [--layers L]
 *       Writes a trace shaped like a real run (meta with argv, prompt_text and
 *       request_json holding TEXT; the prompt's words as prompt tokens; per
 *       step every tap of L layers, a logit snapshot and a generated token).
 *       From step S on, blk.1.ffn_gate and everything after it is NaN, with a
 *       first_nonfinite event, a backtrace and a full logit row. Prints each
 *       step number to stdout, flushed, once it has been committed (the
 *       writer commits steps in groups, every BT_TRACE_COMMIT_MS).
 *   trace_writer_tool check TRACE
 *       Opens TRACE with the reader and prints one line:
 *       "steps N first F last L contiguous yes|no status S tokens T pieces P
 *        events E first_bad B". Exit 0, or 2 with the reader's error.
 *   trace_writer_tool time TRACE
 *       Times the reader's hot paths on TRACE (open + summary, the taps and
 *       logits of the middle step, the first non-finite tap, the tokens of
 *       ten steps) and prints them in ms: the "1 GB opens in < 1 s" check. */
#include "trace/reader.h"
#include "trace/trace.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const ops[13] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_ctx", "attn_output",
                                     "attn_resid", "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "ffn_resid" };

static int die(const char *what)
{
    fprintf(stderr, "trace_writer_tool: %s: %s\n", what, bt_errmsg());
    return 2;
}

static void sleep_ms(long ms)
{
    if (ms <= 0) return;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* JSON string literal of s (for argv / request_json). */
static void json_str(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    out[o++] = '"';
    for (; *s && o + 8 < cap; s++) {
        if (*s == '"' || *s == '\\') { out[o++] = '\\'; out[o++] = *s; }
        else if ((unsigned char)*s < 0x20) o += snprintf(out + o, cap - o, "\\u%04x", *s);
        else out[o++] = *s;
    }
    out[o++] = '"';
    out[o] = 0;
}

static int cmd_write(int argc, char **argv)
{
    const char *out = argv[2], *prompt = "Once upon a time";
    long steps = 20, delay = 0, bad_step = -1, layers = 4;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--delay-ms")) delay = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "--bad-step")) bad_step = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) layers = atol(argv[i + 1]);
        else { fprintf(stderr, "trace_writer_tool: unknown flag %s\n", argv[i]); return 2; }
    }
    bt_trace *t;
    if (bt_trace_create(out, &t)) return die("create");
    int printed = -1;
    size_t plen = strlen(prompt);
    char *js = malloc(plen * 6 + 64), *buf = malloc(plen * 6 + 256);
    if (!js || !buf) return 2;
    json_str(js, plen * 6 + 64, prompt);
    snprintf(buf, plen * 6 + 256, "[\"bangtrace\",\"run\",\"--model\",\"m.gguf\",\"--prompt\",%s,\"-n\",\"%ld\"]", js, steps);
    if (bt_trace_meta(t, "argv", buf)) return die("meta");
    snprintf(buf, plen * 6 + 256, "{\"prompt\":%s,\"max_tokens\":%ld}", js, steps);
    if (bt_trace_meta(t, "request_json", buf) || bt_trace_meta(t, "prompt_text", prompt) ||
        bt_trace_meta(t, "model_path", "/models/m.gguf") || bt_trace_meta(t, "model_sha256", "00ff"))
        return die("meta");
    const int dim = 8, n_vocab = 64;
    int nt = 0;
    if (bt_trace_tensor(t, "target", nt++, "token_embd", -1, "token_embd", dim)) return die("tensor");
    for (int l = 0; l < layers; l++)
        for (int o = 0; o < 13; o++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, ops[o]);
            if (bt_trace_tensor(t, "target", nt++, name, l, ops[o], dim)) return die("tensor");
        }
    if (bt_trace_tensor(t, "target", nt++, "output_norm", -1, "output_norm", dim) ||
        bt_trace_tensor(t, "target", nt++, "logits", -1, "logits", n_vocab))
        return die("tensor");
    const int first_bad_slot = 1 + 13 + 8;   /* blk.1.ffn_gate */
    /* The prompt's words are the prompt tokens (pieces hold the text). */
    int n_prompt = 0;
    for (const char *p = prompt; *p;) {
        size_t n = strcspn(p + 1, " ") + 1;
        if (bt_trace_token(t, 0, n_prompt, 100 + n_prompt, p, n, "prompt", NAN, NULL)) return die("token");
        n_prompt++;
        p += n;
    }
    if (n_prompt == 0) n_prompt = 1;
    float row[64];
    for (long s = 0; s < steps; s++) {
        int n_pos = s == 0 ? n_prompt : 1, pos0 = s == 0 ? 0 : n_prompt + (int)s - 1;
        bool bad = bad_step >= 0 && s >= bad_step;
        if (bt_trace_step_begin(t, (int)s, "target", s == 0 ? "prefill" : "decode", pos0, n_pos)) return die("step_begin");
        for (int i = 0; i < nt; i++) {
            bt_tap_stats st = { .n = (int64_t)n_pos * (i == nt - 1 ? n_vocab : dim), .min = -1.0f - i, .max = 1.0f + i,
                                .mean = 0.01f * i, .rms = 0.5f + i, .first_bad_index = -1, .first_bad_pos = -1 };
            st.absmax = st.max;
            if (bad && (s > bad_step || i >= first_bad_slot)) {
                st.nan = st.n;
                st.min = st.max = st.absmax = st.mean = st.rms = NAN;
                st.first_bad_index = 0;
                st.first_bad_pos = pos0;
            }
            st.n_finite = st.n - st.nan;
            if (bt_trace_tap(t, i, &st)) return die("tap");
        }
        bt_logit_summary ls = { .n_vocab = n_vocab, .max = 9.5f, .argmax_first = 7, .argmax_torch = 7,
                                .argmax_triton = 7, .entropy = 1.25, .k = 5 };
        for (int k = 0; k < 5; k++) { ls.topk_ids[k] = 7 + k; ls.topk_vals[k] = 9.5f - k; }
        if (bad) { ls.nan = n_vocab; ls.max = NAN; ls.entropy = NAN; ls.k = 0; ls.argmax_first = 0; }
        if (bt_trace_logits(t, pos0 + n_pos - 1, &ls, "first", bad ? 0 : 7)) return die("logits");
        if (bad && s == bad_step) {
            for (int i = 0; i < n_vocab; i++) row[i] = NAN;
            int64_t ev;
            char detail[256];
            snprintf(detail, sizeof detail, "blk.1.ffn_gate: %d NaN of %d after token `%.*s`", n_pos * dim, n_pos * dim,
                     (int)BT_MIN(plen, 40), prompt);
            if (bt_trace_logit_row(t, (int)s, pos0, row, n_vocab, "first_nonfinite", false) ||
                bt_trace_event(t, (int)s, pos0, "first_nonfinite", 1, "ffn_gate", "blk.1.ffn_gate", detail, &ev) ||
                bt_trace_backtrace(t, ev, (int)s, "first_nonfinite", "#0 0x1 bt_engine_forward+0x10 (bangtrace)"))
                return die("first_nonfinite");
        }
        /* generated pieces: words of the prompt again (a model echoing it) */
        const char *piece = bad ? "!" : prompt;
        size_t pn = bad ? 1 : strcspn(prompt + 1, " ") + 1;
        if (bt_trace_token(t, (int)s, pos0 + n_pos, bad ? 0 : 7, piece, pn, "gen", bad ? NAN : -0.5, NULL))
            return die("token");
        if (bt_trace_step_end(t, 1.0)) return die("step_end");
        /* the steps the writer's grouped commits have made durable */
        for (int lc = bt_trace_last_committed(t); printed < lc;) printf("%d\n", ++printed);
        fflush(stdout);
        sleep_ms(delay);
    }
    if (bt_trace_finish_reason(t, "length") || bt_trace_close(t, "ok")) return die("close");
    free(js);
    free(buf);
    return 0;
}

static int count_pieces(void *user, const bt_trace_token_row *tok)
{
    int *n = user;
    if (tok->piece) (*n)++;
    return 0;
}

static int cmd_check(const char *path)
{
    bt_trace_reader *r;
    if (bt_trace_open(path, &r)) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    bt_trace_summary sum;
    if (bt_trace_summary_get(r, &sum)) { fprintf(stderr, "%s\n", bt_errmsg()); bt_trace_reader_close(r); return 2; }
    /* contiguous: every step from first to last is there, and each has its blob */
    bool contiguous = sum.n_steps == (sum.n_steps ? sum.last_step - sum.first_step + 1 : 0);
    for (int s = sum.first_step; contiguous && s >= 0 && s <= sum.last_step; s++) {
        bt_trace_tap_row *taps;
        int n;
        if (bt_trace_step_taps(r, s, &taps, &n) || (sum.n_tensors > 0 && n != sum.n_tensors)) contiguous = false;
        free(taps);
    }
    int pieces = 0;
    if (bt_trace_tokens_each(r, 0, 0, count_pieces, &pieces) < 0) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    const char *status = bt_trace_meta_get(r, "status");
    printf("steps %lld first %d last %d contiguous %s status %s tokens %lld pieces %d events %lld first_bad %d\n",
           (long long)sum.n_steps, sum.first_step, sum.last_step, contiguous ? "yes" : "no", status ? status : "-",
           (long long)sum.n_tokens, pieces, (long long)sum.n_events, sum.first_bad_step);
    bt_trace_reader_close(r);
    return 0;
}

static int count_tok(void *user, const bt_trace_token_row *tok)
{
    (void)tok;
    (*(int *)user)++;
    return 0;
}

static int cmd_time(const char *path)
{
    double t0 = bt_now();
    bt_trace_reader *r;
    bt_trace_summary sum;
    if (bt_trace_open(path, &r) || bt_trace_summary_get(r, &sum)) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    double t1 = bt_now();
    int mid = (sum.first_step + sum.last_step) / 2, n, nl, nt = 0;
    bt_trace_tap_row *taps = NULL, fb;
    bt_trace_logits_row lg[4];
    bool found;
    if (bt_trace_step_taps(r, mid, &taps, &n) || bt_trace_step_logits(r, mid, lg, 4, &nl)) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    free(taps);
    double t2 = bt_now();
    if (bt_trace_first_nonfinite(r, &fb, &found)) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    double t3 = bt_now();
    if (bt_trace_tokens_of_steps(r, mid, mid + 9, count_tok, &nt) < 0) { fprintf(stderr, "%s\n", bt_errmsg()); return 2; }
    double t4 = bt_now();
    printf("steps %lld size %.1f MB: open+summary %.1f ms, step %d taps (%d) + logits %.2f ms, first non-finite %.2f ms"
           " (%s), tokens of 10 steps (%d) %.2f ms\n", (long long)sum.n_steps, bt_trace_size(path) / 1e6,
           (t1 - t0) * 1e3, mid, n, (t2 - t1) * 1e3, (t3 - t2) * 1e3, found ? "found" : "clean", nt, (t4 - t3) * 1e3);
    bt_trace_reader_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "time")) return cmd_time(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "write")) return cmd_write(argc, argv);
    if (argc == 3 && !strcmp(argv[1], "check")) return cmd_check(argv[2]);
    fprintf(stderr, "usage: trace_writer_tool write OUT.db [--steps N] [--delay-ms D] [--prompt TEXT] [--bad-step S] [--layers L]\n"
                    "       trace_writer_tool check TRACE\n       trace_writer_tool time TRACE\n");
    return 2;
}
