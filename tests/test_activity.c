/* test_activity.c - the kernel trail (run --cupti) without a GPU.
 *
 * A CPU backend whose vtable gains the hooks a device backend has for it
 * (enable, mark, activity: what bangtrace-cuda.so does with CUPTI) stands in
 * for the plugin: every op the engine announces becomes one synthetic
 * "kernel" record carrying the external correlation id pushed for it, and
 * each drain adds a device-to-host copy outside any op. On stories260K this
 * checks that
 *   - the engine announces ops only once the feature is on (taps alone cost
 *     no mark);
 *   - the recorder drains the records after every forward into the kernels
 *     table, with (step, layer, op) decoded from the external id;
 *   - every tapped (step, layer, op) has kernel rows in v_kernels: the query
 *     tests/gpu/check.sh runs on a GPU, so it is tested here too;
 *   - on the plain CPU backend, and without a trace, the feature is a
 *     one-line refusal naming the flag (--cupti, --cuda-graphs). */
#include "check.h"
#include "gen/decode.h"
#include "run/session.h"
#include "backend/backend_impl.h"
#include "base/kernel_rows.h"
#include "trace/reader.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char model_path[4096], tok_path[4096];
static int32_t prompt[64];
static int n_prompt;

/* ---- the stand-in device backend ---- */

static struct bt_backend_i fake_iface;
static bool fake_on;
static uint64_t marks[4096];
static int n_marks, total_marks, drains;
static uint64_t clock_ns = 1000;

static int fake_enable(bt_backend *be, int feature)
{
    (void)be;
    if (feature != BT_BACKEND_ACTIVITY) return bt_error(BT_EUNSUPPORTED, "fake: only activity");
    fake_on = true;
    return BT_OK;
}

static int fake_mark(bt_backend *be, int step, int layer, int op)
{
    (void)be;
    total_marks++;
    CHECK(fake_on, "mark before the feature is on");
    if (op >= 0 && n_marks < (int)BT_ARRAY_SIZE(marks)) marks[n_marks++] = bt_act_ext_id(step, layer, op);
    return BT_OK;
}

static int fake_activity(bt_backend *be, bt_act_fn fn, void *user)
{
    (void)be;
    drains++;
    int rc = BT_OK;
    for (int i = 0; i < n_marks && !rc; i++) {
        bt_act a = { .kind = BT_ACT_KERNEL, .name = "_Z12fake_op_kernPKfPf", .correlation_id = (uint32_t)i + 1,
                     .start_ns = clock_ns, .end_ns = clock_ns + 500, .grid = { 4, 1, 1 }, .block = { 256, 1, 1 },
                     .registers = 32, .stream = 13 };
        clock_ns += 1000;
        rc = fn(user, &a, marks[i]);
    }
    bt_act copy = { .kind = BT_ACT_MEMCPY, .copy_kind = 2, .bytes = 2048, .start_ns = clock_ns, .end_ns = clock_ns + 100 };
    bt_act bogus = { .kind = BT_ACT_KERNEL, .name = "incomplete", .start_ns = 50, .end_ns = 10 };
    clock_ns += 1000;
    if (!rc) rc = fn(user, &copy, 0);
    if (!rc) rc = fn(user, &bogus, 0);      /* skipped by the recorder, not fatal */
    n_marks = 0;
    return rc;
}

static int fake_engine(void *user, const bt_model *m, int ctx, int max_batch, int threads, bt_engine **out)
{
    (void)user;
    bt_backend *be = NULL;
    int rc = bt_backend_cpu_new(threads, &be);
    if (rc) return rc;
    fake_iface = *be->iface;
    fake_iface.enable = fake_enable;
    fake_iface.mark = fake_mark;
    fake_iface.activity = fake_activity;
    be->iface = &fake_iface;
    bt_engine_opts o = { .ctx_len = ctx, .max_batch = max_batch, .n_threads = threads, .backend = be };
    rc = bt_engine_new_opts(m, &o, out);
    /* the engine borrows the backend: this test leaks one CPU backend per
     * session on purpose (the process ends right after) */
    return rc;
}

static int decode(bt_session *s, int n)
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
        got += m;
    }
    if (!rc) rc = bt_recorder_status(bt_session_recorder(s));
    if (!rc) rc = bt_recorder_finish(bt_session_recorder(s), "length");
    bt_decoder_free(d);
    bt_sampler_free(smp);
    return rc;
}

static bt_session_cfg base_cfg(const char *trace)
{
    bt_session_cfg c = { .model = model_path, .tokenizer = tok_path, .need_vocab = true, .need_weights = true,
                         .threads = 1, .max_batch = n_prompt + 1, .max_tokens = 6,
                         .prompt = prompt, .n_prompt = n_prompt, .trace = trace, .taps = BT_TAPS_ALL,
                         .layer_lo = -1, .layer_hi = -1, .rule = { .kind = BT_ARGMAX_FIRST } };
    return c;
}

static long long query(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "query failed: %s: %s\n", sqlite3_errmsg(db), sql);
    sqlite3_finalize(st);
    return v;
}

static int count_kernel(void *user, const bt_kernel_row *k)
{
    int *n = user;
    if (!strcmp(k->kind, "kernel")) {
        CHECK(!strcmp(k->name, "fake_op_kern"), "demangled: %s", k->name);
        CHECK(k->step >= 0 && k->op[0], "a kernel row without its op: step %d op '%s'", k->step, k->op);
    }
    (*n)++;
    return BT_OK;
}

int main(void)
{
    const char *shared = getenv("BT_SHARED");
    snprintf(model_path, sizeof(model_path), "%s/models/llama2c/stories260K.bin", shared ? shared : "../shared");
    snprintf(tok_path, sizeof(tok_path), "%s/models/llama2c/tok512.bin", shared ? shared : "../shared");
    if (access(model_path, R_OK)) { printf("SKIP: %s not found\n", model_path); return 77; }
    char dir[] = "/tmp/bt-test-activity-XXXXXX", trace[128], trace2[128], trace3[128];
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 99; }
    snprintf(trace, sizeof(trace), "%s/cupti.db", dir);
    snprintf(trace2, sizeof(trace2), "%s/cpu.db", dir);
    snprintf(trace3, sizeof(trace3), "%s/plain.db", dir);
    for (int i = 0; i < 4; i++) prompt[i] = 1 + 7 * i;
    n_prompt = 4;

    /* taps without the feature: the engine announces nothing */
    bt_session *s = NULL;
    bt_session_cfg c = base_cfg(trace3);
    c.engine_new = fake_engine;
    CHECK_OK(bt_session_new(&c, &s));
    CHECK_OK(decode(s, 3));
    CHECK(total_marks == 0 && drains == 0, "marks %d drains %d with the feature off", total_marks, drains);
    bt_session_close(s, BT_TRACE_STATUS_OK);

    /* with it: every op announced, drained per forward */
    s = NULL;
    c = base_cfg(trace);
    c.engine_new = fake_engine;
    c.cupti = true;
    CHECK_OK(bt_session_new(&c, &s));
    CHECK(fake_on);
    CHECK_OK(decode(s, 6));
    int steps = bt_engine_step(bt_session_engine(s));
    CHECK(drains == steps, "%d drains for %d forwards", drains, steps);
    CHECK(total_marks > 0);
    bt_session_close(s, BT_TRACE_STATUS_OK);

    bt_trace_reader *r = NULL;
    CHECK_OK(bt_trace_open(trace, &r));
    int n_rows = 0;
    if (r) CHECK_OK(bt_trace_kernels_each(r, count_kernel, &n_rows));
    bt_trace_reader_close(r);
    CHECK(n_rows > 0);

    sqlite3 *db = NULL;
    CHECK(sqlite3_open_v2(trace, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    /* tests/gpu/check.sh step 5, verbatim but for the file */
    long long missing = query(db, "SELECT count(*) FROM (SELECT DISTINCT t.step, t.layer, t.op FROM v_taps t "
                                  "WHERE NOT EXISTS (SELECT 1 FROM v_kernels k WHERE k.step = t.step AND "
                                  "k.layer IS t.layer AND k.op = t.op))");
    long long taps = query(db, "SELECT count(*) FROM v_taps");
    long long outside = query(db, "SELECT count(*) FROM v_kernels WHERE step IS NULL AND kind = 'memcpy'");
    long long kern_steps = query(db, "SELECT count(DISTINCT step) FROM v_kernels WHERE kind = 'kernel'");
    long long bogus = query(db, "SELECT count(*) FROM kernels WHERE name = 'incomplete'");
    long long embd = query(db, "SELECT count(DISTINCT step) FROM v_kernels WHERE op = 'token_embd' AND layer IS NULL");
    long long meta = query(db, "SELECT count(*) FROM meta WHERE key = 'cupti' AND value = '1'");
    CHECK(taps > 0 && missing == 0, "%lld of the tapped ops have no kernel rows (%lld taps)", missing, taps);
    CHECK(outside == steps, "%lld copies outside any op for %d forwards", outside, steps);
    CHECK(kern_steps == steps, "kernels in %lld of %d steps", kern_steps, steps);
    CHECK(bogus == 0, "an impossible record reached the trace");
    CHECK(embd == steps, "token_embd kernels: %lld", embd);
    CHECK(meta == 1, "meta cupti");
    sqlite3_close(db);

    /* the CPU backend has no device activity: a one-line refusal */
    s = NULL;
    c = base_cfg(trace2);
    c.cupti = true;
    int rc = bt_session_new(&c, &s);
    CHECK(rc == BT_EUNSUPPORTED && strstr(bt_errmsg(), "--cupti needs --device cuda") && !strchr(bt_errmsg(), '\n'),
          "rc %d: %s", rc, bt_errmsg());
    bt_session_close(s, NULL);
    s = NULL;
    c = base_cfg(NULL);
    c.cuda_graphs = true;
    rc = bt_session_new(&c, &s);
    CHECK(rc == BT_EUNSUPPORTED && strstr(bt_errmsg(), "--cuda-graphs needs --device cuda"), "rc %d: %s", rc, bt_errmsg());
    bt_session_close(s, NULL);
    s = NULL;
    c = base_cfg(NULL);
    c.cupti = true;
    rc = bt_session_new(&c, &s);
    CHECK(rc == BT_EINVAL && strstr(bt_errmsg(), "give --trace"), "rc %d: %s", rc, bt_errmsg());
    bt_session_close(s, NULL);

    unlink(trace); unlink(trace2); unlink(trace3);
    char side[160];
    const char *sfx[] = { "-wal", "-shm" };
    const char *files[] = { trace, trace2, trace3 };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) { snprintf(side, sizeof(side), "%s%s", files[i], sfx[j]); unlink(side); }
    rmdir(dir);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
