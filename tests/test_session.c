/* test_session.c - the session module (src/run/session.c) and the replay
 * (src/run/replay.c) on stories260K: a traced greedy run built from one
 * config, a second session sharing its model (one load, own engine, same
 * tokens), the refusals (injection on a borrowed model, --draft-self past
 * the model, no vocabulary), and the replay of the trace: an unchanged run
 * compares exactly equal, a finite injected fault diverges at its step. */
#include "check.h"
#include "gen/decode.h"
#include "run/session.h"
#include "trace/reader.h"
#include "run/replay.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char model_path[4096], tok_path[4096];
static int32_t prompt[64];
static int n_prompt;

static int meta_calls;
static int test_meta(void *user, bt_trace *t, const bt_session *s)
{
    meta_calls++;
    CHECK(user == &meta_calls);
    CHECK(bt_session_model(s) != NULL);
    CHECK(strlen(bt_session_model_sha256(s)) == 64, "the model is hashed before the meta callback");
    /* what the replay needs to find and verify the model */
    int rc = bt_trace_meta(t, "model_path", model_path);
    return rc ? rc : bt_trace_meta(t, "model_sha256", bt_session_model_sha256(s));
}

/* Greedy-decode n tokens through the session's decoder cfg. */
static int decode(bt_session *s, int32_t *out, int n)
{
    bt_sampler *smp = NULL;
    bt_decoder *d = NULL;
    bt_sampler_cfg sc = { .top_p = 1, .rule = { .kind = BT_ARGMAX_FIRST } };
    int got = 0, rc = bt_sampler_new(&sc, bt_session_model(s)->cfg.n_vocab, &smp);
    bt_decoder_cfg dc = { .smp = smp, .greedy = true, .rule = sc.rule, .tok = bt_session_tokenizer(s), .ignore_eos = true };
    bt_session_decoder_cfg(s, &dc);
    if (!rc) rc = bt_decoder_new(&dc, prompt, n_prompt, n, &d);
    while (!rc && got < n) {
        int32_t burst[8];
        int m = 0;
        rc = bt_decoder_next(d, burst, NULL, &m);
        for (int i = 0; i < m && got < n; i++) out[got++] = burst[i];
    }
    if (!rc && bt_session_recorder(s)) rc = bt_recorder_finish(bt_session_recorder(s), "length");
    bt_decoder_free(d);
    bt_sampler_free(smp);
    return rc;
}

static bt_session_cfg base_cfg(const char *trace, int max_tokens)
{
    bt_session_cfg c = { .model = model_path, .tokenizer = tok_path, .need_vocab = true, .need_weights = true,
                         .threads = 1, .max_batch = n_prompt + 1, .max_tokens = max_tokens,
                         .prompt = prompt, .n_prompt = n_prompt, .trace = trace, .taps = BT_TAPS_ALL,
                         .layer_lo = -1, .layer_hi = -1, .rule = { .kind = BT_ARGMAX_FIRST } };
    return c;
}

/* the first diverging tensor's name (res->tens is the reader's, closed below) */
static char first_name[64];

static void replay(const char *trace, double tol, bt_replay_result *res, int *rc)
{
    bt_trace_reader *r = NULL;
    *rc = bt_trace_open(trace, &r);
    CHECK(*rc == BT_OK, "%s", bt_errmsg());
    if (*rc) return;
    bt_replay_cfg rcfg = { .name = trace, .who = "test", .tol = tol, .threads = 1, .all = true };
    *rc = bt_replay_run(r, &rcfg, res);
    first_name[0] = 0;
    if (*rc == BT_OK && res->found && res->first.slot >= 0 && res->first.slot < res->n_tens)
        snprintf(first_name, sizeof(first_name), "%s", res->tens[res->first.slot].name);
    res->tens = NULL;
    bt_trace_reader_close(r);
}

int main(void)
{
    const char *shared = getenv("BT_SHARED");
    snprintf(model_path, sizeof(model_path), "%s/models/llama2c/stories260K.bin", shared ? shared : "../shared");
    snprintf(tok_path, sizeof(tok_path), "%s/models/llama2c/tok512.bin", shared ? shared : "../shared");
    if (access(model_path, R_OK)) { printf("SKIP: %s not found\n", model_path); return 77; }
    char dir[] = "/tmp/bt-test-session-XXXXXX", trace[128], trace2[128];
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 99; }
    snprintf(trace, sizeof(trace), "%s/clean.db", dir);
    snprintf(trace2, sizeof(trace2), "%s/scaled.db", dir);

    /* the prompt, through a session that builds nothing but the models */
    bt_session *s = NULL;
    bt_session_cfg c = base_cfg(NULL, 0);
    CHECK_OK(bt_session_open(&c, &s));
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(bt_tokenize(bt_session_tokenizer(s), "Once upon a time", 16, true, false, &ids, &n));
    n_prompt = (int)n;
    memcpy(prompt, ids, n * sizeof(int32_t));
    free(ids);
    CHECK(bt_session_ctx(s) == BT_MIN(bt_session_model(s)->cfg.ctx_len, BT_ENGINE_CTX_CAP), "ctx %d", bt_session_ctx(s));
    CHECK(bt_session_engine(s) == NULL, "open builds no engine");
    bt_session_close(s, NULL);

    /* a traced run from one config */
    int32_t a[12], b[12];
    c = base_cfg(trace, 12);
    c.meta = test_meta;
    c.meta_user = &meta_calls;
    s = NULL;
    CHECK_OK(bt_session_new(&c, &s));
    CHECK(meta_calls == 1);
    CHECK(bt_session_trace(s) && bt_session_recorder(s) && bt_session_engine(s) && !bt_session_draft_engine(s));
    CHECK(!strcmp(bt_session_drafter_name(s), ""));
    CHECK_OK(decode(s, a, 12));
    CHECK_OK(bt_session_close_trace(s, BT_TRACE_STATUS_OK));
    CHECK(bt_session_trace(s) == NULL);

    /* a second session on the same model: one load, its own engine */
    bt_session *s2 = NULL;
    bt_session_cfg c2 = base_cfg(NULL, 12);
    c2.share = s;
    CHECK_OK(bt_session_new(&c2, &s2));
    CHECK(bt_session_model(s2) == bt_session_model(s), "the model is shared, not loaded again");
    CHECK(bt_session_tokenizer(s2) == bt_session_tokenizer(s));
    CHECK(bt_session_engine(s2) != bt_session_engine(s));
    CHECK(bt_session_recorder(s2) == NULL, "no trace, no injection: no recorder");
    CHECK_OK(decode(s2, b, 12));
    CHECK(!memcmp(a, b, sizeof(a)), "the shared session decodes the same tokens");
    bt_session_close(s2, NULL);

    /* refusals */
    s2 = NULL;
    const char *spec[] = { "scale=4@layer=1,op=ffn_down,step=3,count=64" };
    c2.inject = spec;
    c2.n_inject = 1;
    CHECK(bt_session_new(&c2, &s2) == BT_EINVAL, "injection rewrites weights: a borrowed model is refused");
    bt_session_close(s2, NULL);
    s2 = NULL;
    c2 = base_cfg(NULL, 12);
    c2.share = s;
    c2.spec_k = 2;
    c2.draft_self = bt_session_model(s)->cfg.n_layers;
    CHECK(bt_session_new(&c2, &s2) == BT_EINVAL && strstr(bt_errmsg(), "--draft-self"), "%s", bt_errmsg());
    bt_session_close(s2, NULL);
    bt_session_close(s, NULL);
    s = NULL;
    c = base_cfg(NULL, 12);
    c.tokenizer = NULL;   /* a llama2.c checkpoint carries no vocabulary */
    CHECK(bt_session_open(&c, &s) == BT_EINVAL && strstr(bt_errmsg(), "no tokenizer"), "%s", bt_errmsg());
    bt_session_close(s, NULL);

    /* the replay: an unchanged run compares exactly equal */
    bt_replay_result res;
    int rc;
    replay(trace, 0, &res, &rc);
    CHECK(rc == BT_OK, "%s", bt_errmsg());
    CHECK(!res.found && res.n_all == 0, "a clean run replays without divergence");
    CHECK(res.steps_compared == 12 && res.steps_total == 12, "%d of %d steps", res.steps_compared, res.steps_total);
    CHECK(res.sha_checked && res.n_tens > 0 && res.max_rel == 0);
    CHECK(first_name[0] == 0);
    bt_replay_result_clear(&res);

    /* a finite fault at step 3 diverges there, and only from there on */
    s = NULL;
    c = base_cfg(trace2, 12);
    c.meta = test_meta;
    c.meta_user = &meta_calls;
    c.inject = spec;
    c.n_inject = 1;
    CHECK_OK(bt_session_new(&c, &s));
    CHECK(bt_session_injector(s) != NULL);
    CHECK_OK(decode(s, b, 12));
    bt_session_close(s, BT_TRACE_STATUS_OK);
    replay(trace2, 0.02, &res, &rc);
    CHECK(rc == BT_OK, "%s", bt_errmsg());
    CHECK(res.found && res.first.step == 3, "first divergence at step %d", res.first.step);
    CHECK(!strcmp(first_name, "blk.1.ffn_down"), "first diverging tensor '%s'", first_name);
    CHECK(res.n_all >= 1 && res.all[0].step == 3);
    bt_replay_result_clear(&res);

    unlink(trace);
    unlink(trace2);
    rmdir(dir);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
