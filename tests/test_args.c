/* test_args.c - the shared flag groups (src/cli/args.c) and the device
 * table (src/backend/registry.c): which flags a group takes, with which
 * aliases, the one error text per mistake, and the device names every
 * check reads from the table. */
#include "check.h"
#include "cli/args.h"
#include "backend/backend.h"
#include "engines/llamacpp/llamacpp.h"
#include "kernels/cpu/kernels.h"

#include <string.h>

/* Offer argv (NULL-terminated, argv[0] the command) to the groups in g one
 * by one; returns the first error, counts the arguments taken. */
static int feed(bt_args *g, const char **args, int *n_taken)
{
    int argc = 0;
    while (args[argc]) argc++;
    *n_taken = 0;
    for (int i = 1; i < argc; i++) {
        bool taken;
        int rc = bt_args_take(g, argc, (char **)args, &i, &taken);
        if (rc) return rc;
        if (taken) ++*n_taken;
    }
    return BT_OK;
}

/* A single bad flag gives exactly this message. */
static void expect_error(unsigned take, const char **args, const char *msg)
{
    bt_args g = { .take = take };
    int n;
    bt_error(BT_OK, "%s", "");
    int rc = feed(&g, args, &n);
    CHECK(rc == BT_EINVAL && !strcmp(bt_errmsg(), msg), "%s %s: rc %d, '%s', expected '%s'", args[1], args[2] ? args[2] : "",
          rc, bt_errmsg(), msg);
}

static void test_groups(void)
{
    const unsigned all = BT_ARGS_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_COMPUTE | BT_ARGS_NUMERICS | BT_ARGS_ENGINE | BT_ARGS_LLAMA;
    bt_args g = { .take = all };
    int n;
    const char *args[] = { "run", "--model", "m.gguf", "--tokenizer", "t.bin", "--threads", "3", "--ctx", "512",
                           "--device", "cuda:2", "--numerics", "f16", "--engine", "llama.cpp", "--llama-repack", "off",
                           "--prompt", "hi", NULL };
    CHECK_OK(feed(&g, args, &n));
    CHECK(n == 8, "taken %d, expected 8 (not --prompt)", n);
    CHECK(g.model && !strcmp(g.model, "m.gguf") && g.tokenizer && !strcmp(g.tokenizer, "t.bin"));
    CHECK(g.threads == 3 && g.ctx == 512 && g.device && !strcmp(g.device, "cuda:2"));
    CHECK(g.numerics_spec && !strcmp(g.numerics_spec, "f16") && !bt_numerics_is_exact(&g.numerics));
    CHECK(g.llamacpp && g.llama.repack && !strcmp(g.llama.repack, "off") && g.llama.set);

    bt_session_cfg cfg = { 0 };
    bt_args_session(&g, &cfg);
    CHECK(cfg.model == g.model && cfg.tokenizer == g.tokenizer && cfg.threads == 3 && cfg.ctx == 512 &&
          cfg.device == g.device && cfg.numerics == &g.numerics && cfg.llama.repack == g.llama.repack);
    bt_args nonum = { .take = BT_ARGS_MODEL };
    bt_args_session(&nonum, &cfg);
    CHECK(cfg.numerics == NULL, "a command without --numerics gives the session no profile");

    /* a group a command does not take leaves its flags alone */
    bt_args none = { .take = BT_ARGS_MODEL };
    const char *other[] = { "x", "--threads", "4", "--device", "cpu", "--numerics", "f16", "--engine", "native",
                            "--llama-repack", "on", "--ctx", "8", NULL };
    CHECK_OK(feed(&none, other, &n));
    CHECK(n == 0 && none.threads == 0 && !none.device, "taken %d", n);

    /* the short aliases only where asked for */
    bt_args s = { .take = BT_ARGS_MODEL | BT_ARGS_THREADS | BT_ARGS_TOKENIZER };
    const char *shorts[] = { "x", "-m", "a", "-t", "2", "-z", "t", NULL };
    CHECK_OK(feed(&s, shorts, &n));
    CHECK(n == 0 && !s.model, "-m/-t/-z without their bits: taken %d", n);
    s = (bt_args){ .take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_THREADS | BT_ARGS_T | BT_ARGS_TOKENIZER | BT_ARGS_Z };
    CHECK_OK(feed(&s, shorts, &n));
    CHECK(n == 3 && s.model && !strcmp(s.model, "a") && s.threads == 2 && s.tokenizer && !strcmp(s.tokenizer, "t"));

    /* the last --model wins, unless the command takes one model */
    bt_args two = { .take = BT_ARGS_MODEL };
    const char *twice[] = { "x", "--model", "a", "--model", "b", NULL };
    CHECK_OK(feed(&two, twice, &n));
    CHECK(two.model && !strcmp(two.model, "b"));
    expect_error(BT_ARGS_MODEL | BT_ARGS_ONE_MODEL, twice, "more than one model given ('a' and 'b')");
}

static void test_errors(void)
{
    const unsigned all = BT_ARGS_MODEL | BT_ARGS_TOKENIZER | BT_ARGS_COMPUTE | BT_ARGS_NUMERICS | BT_ARGS_ENGINE | BT_ARGS_LLAMA;
    expect_error(all, (const char *[]){ "x", "--model", NULL }, "--model needs a value");
    expect_error(all, (const char *[]){ "x", "--ctx", NULL }, "--ctx needs a value");
    expect_error(all, (const char *[]){ "x", "--threads", "0", NULL }, "--threads expects an integer in [1, 256], got '0'");
    expect_error(all | BT_ARGS_T, (const char *[]){ "x", "-t", "257", NULL }, "-t expects an integer in [1, 256], got '257'");
    expect_error(all, (const char *[]){ "x", "--ctx", "0", NULL }, "--ctx expects an integer in [1, 1048576], got '0'");
    expect_error(all, (const char *[]){ "x", "--device", "tpu", NULL }, "--device expects cpu, cuda or cuda:N, got 'tpu'");
    expect_error(all, (const char *[]){ "x", "--engine", "vllm", NULL }, "--engine expects native or llama.cpp, got 'vllm'");
    expect_error(all, (const char *[]){ "x", "--llama-repack", "maybe", NULL }, "--llama-repack 'maybe': use on or off");
    /* --ctx's lower bound is the command's */
    bt_args g = { .take = BT_ARGS_CTX, .ctx_min = 16 };
    int n;
    CHECK(feed(&g, (const char *[]){ "serve", "--ctx", "15", NULL }, &n) == BT_EINVAL &&
          !strcmp(bt_errmsg(), "--ctx expects an integer in [16, 1048576], got '15'"), "%s", bt_errmsg());
    CHECK_OK(feed(&g, (const char *[]){ "serve", "--ctx", "16", NULL }, &n));
    /* a bad --numerics is the numerics parser's one line, naming the flag's value */
    bt_args num = { .take = BT_ARGS_NUMERICS };
    CHECK(feed(&num, (const char *[]){ "x", "--numerics", "act=f13", NULL }, &n) == BT_EINVAL && *bt_errmsg() &&
          !strchr(bt_errmsg(), '\n') && !num.numerics_spec, "%s", bt_errmsg());

    bt_args m = { .take = BT_ARGS_MODEL };
    CHECK(bt_args_need_model(&m, "bench") == BT_EINVAL && !strcmp(bt_errmsg(), "--model is required (see bangtrace help bench)"));
    m.model = "a";
    CHECK_OK(bt_args_need_model(&m, "bench"));

    /* --llama-* without the engine, named by the command's engine flag */
    bt_args l = { .take = BT_ARGS_LLAMA };
    CHECK_OK(feed(&l, (const char *[]){ "bench", "--llama-kv-type", "q8_0", NULL }, &n));
    CHECK(bt_args_llama_finish(&l, false, "--against llama.cpp") == BT_EINVAL &&
          !strcmp(bt_errmsg(), "the --llama-* flags choose llama.cpp's path: give --against llama.cpp"), "%s", bt_errmsg());
    CHECK_OK(bt_args_llama_finish(&l, true, "--against llama.cpp"));

    /* the features a device can offer */
    bt_args d = { .take = BT_ARGS_DEVICE };
    CHECK(bt_args_need_feature(&d, BT_BACKEND_GRAPHS) == BT_EINVAL &&
          !strcmp(bt_errmsg(), "--cuda-graphs needs --device cuda (the CPU backend has no CUDA graphs)"), "%s", bt_errmsg());
    d.device = "cpu";
    CHECK(bt_args_need_feature(&d, BT_BACKEND_ACTIVITY) == BT_EINVAL &&
          !strcmp(bt_errmsg(), "--cupti needs --device cuda (the CPU backend has no CUDA activity)"), "%s", bt_errmsg());
    d.device = "cuda:1";
    CHECK_OK(bt_args_need_feature(&d, BT_BACKEND_GRAPHS));
    CHECK_OK(bt_args_need_feature(&d, BT_BACKEND_ACTIVITY));
}

static void test_devices(void)
{
    int n;
    const bt_device *t = bt_device_table(&n);
    CHECK(n >= 2 && !strcmp(t[0].name, "cpu") && t[0].builtin && !t[0].plugin, "row 0 is the built-in CPU");
    for (int i = 0; i < n; i++)
        CHECK(t[i].name && t[i].title && t[i].description && (!t[i].builtin != !t[i].plugin),
              "row %d: a name, a title, a description and one of constructor or plugin", i);
    static const struct { const char *name; int row; int ordinal; } good[] = {
        { NULL, 0, 0 }, { "", 0, 0 }, { "cpu", 0, 0 }, { "cuda", 1, 0 }, { "cuda:0", 1, 0 }, { "cuda:7", 1, 7 }, { "cuda:1024", 1, 1024 },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(good); i++) {
        const bt_device *row = NULL;
        int ord = -1;
        CHECK_OK(bt_device_parse(good[i].name, &row, &ord));
        CHECK(row == &t[good[i].row] && ord == good[i].ordinal, "'%s': row %d ordinal %d", good[i].name ? good[i].name : "(null)",
              row ? (int)(row - t) : -1, ord);
        CHECK(bt_backend_device_valid(good[i].name));
        CHECK(bt_device_is_cpu(good[i].name) == (good[i].row == 0));
    }
    static const char *const bad[] = { "tpu", "cpu:0", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1025", "cuda:1x", "cudax", "CPU",
                                       "cuda:99999999999999999999" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(bad); i++) {
        char want[128];
        snprintf(want, sizeof(want), "--device expects cpu, cuda or cuda:N, got '%s'", bad[i]);
        CHECK(bt_device_parse(bad[i], NULL, NULL) == BT_EINVAL && !strcmp(bt_errmsg(), want), "'%s': %s", bad[i], bt_errmsg());
        CHECK(!bt_backend_device_valid(bad[i]) && !bt_device_is_cpu(bad[i]), "'%s'", bad[i]);
        CHECK(!bt_device_offers(bad[i], BT_BACKEND_GRAPHS), "'%s'", bad[i]);
    }
    CHECK(!bt_device_offers(NULL, BT_BACKEND_GRAPHS) && !bt_device_offers("cpu", BT_BACKEND_ACTIVITY));
    CHECK(bt_device_offers("cuda", BT_BACKEND_GRAPHS) && bt_device_offers("cuda:3", BT_BACKEND_ACTIVITY));
    CHECK(bt_device_with(BT_BACKEND_GRAPHS) == &t[1] && bt_device_with(0x4000) == NULL);

    /* bt_backend_open reads the same table: a bad name is the same line */
    bt_backend *be = NULL;
    CHECK(bt_backend_open("tpu", 1, &be) == BT_EINVAL && !be &&
          !strcmp(bt_errmsg(), "--device expects cpu, cuda or cuda:N, got 'tpu'"), "%s", bt_errmsg());
    /* the CPU's meta backend is what traces have always recorded */
    CHECK_OK(bt_backend_open("cpu", 1, &be));
    if (be) {
        char name[64], want[64];
        bt_backend_trace_name(be, name, sizeof(name));
        snprintf(want, sizeof(want), "cpu-%s", bt_kernels_simd());
        CHECK(!strcmp(name, want), "trace name '%s', expected '%s'", name, want);
        CHECK(!strcmp(bt_backend_name(be), "cpu") && *bt_backend_describe(be));
        bt_backend_free(be);
    }

    /* llama.cpp's own backends: the table's names without an ordinal */
    const char *ggml = NULL;
    CHECK(bt_llamacpp_device(NULL, &ggml) == BT_OK && ggml && !strcmp(ggml, "CPU"));
    CHECK(bt_llamacpp_device("cpu", &ggml) == BT_OK && !strcmp(ggml, "CPU"));
    CHECK(bt_llamacpp_device("cuda", &ggml) == BT_OK && !strcmp(ggml, "CUDA"));
    static const char *const lbad[] = { "cuda:0", "cuda:1", "tpu" };
    for (size_t i = 0; i < BT_ARRAY_SIZE(lbad); i++) {
        char want[128];
        snprintf(want, sizeof(want), "--device with --engine llama.cpp expects cpu or cuda, got '%s'", lbad[i]);
        CHECK(bt_llamacpp_device(lbad[i], NULL) == BT_EINVAL && !strcmp(bt_errmsg(), want), "'%s': %s", lbad[i], bt_errmsg());
    }
}

int main(void)
{
    test_groups();
    test_errors();
    test_devices();
    printf("test_args: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
