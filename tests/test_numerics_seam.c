/* test_numerics_seam.c - a numerics profile goes through the backend seam
 * (backend_impl.h, ABI 3), nowhere else:
 *   - a backend wrapping the CPU one counts the calls to its numerics ops:
 *     each part of a profile reaches the op that applies it (act= and kv=
 *     num_round, mm_in= / act_q= / mm_acc= num_matmul, norm= num_rmsnorm,
 *     attn= / softmax= num_attention, which then replaces attention), the
 *     exact profile reaches none, and every tap and logit is the bits of
 *     the plain CPU backend's;
 *   - a device stand-in (the CPU's ops, no numerics ops, no host buffers,
 *     no thread pool for the engine to borrow) runs every profile through
 *     the generic fallbacks (src/backend/backend.c) to the same bits, and
 *     refuses mm_acc=f16 with one line naming num_matmul.
 * Models: stories260K (f32 weights) and the tiny f16 GGUF; a prefill of 70
 * positions (attn=ggml's tiled path starts at 64), a second chunk and
 * decode steps, at 1 and 2 threads. */
#include "check.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "backend/backend_impl.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

static const struct bt_backend_i *cpu_i;   /* the CPU backend's own vtable */

enum { N_ROUND, N_MATMUL, N_RMSNORM, N_ATTN, N_PLAIN_ATTN, N_PLAIN_NORM, N_COUNT };
static long calls[N_COUNT];

static int c_round(bt_backend *be, bt_buf *b, size_t off, size_t rows, size_t width, int fmt)
{
    calls[N_ROUND]++;
    return cpu_i->num_round(be, b, off, rows, width, fmt);
}
static int c_matmul(bt_backend *be, const bt_numerics *n, int type, bt_buf *W, int64_t rows, int64_t cols, bt_buf *x,
                    size_t x_off, int T, bt_buf *out)
{
    calls[N_MATMUL]++;
    return cpu_i->num_matmul(be, n, type, W, rows, cols, x, x_off, T, out);
}
static int c_rmsnorm(bt_backend *be, const bt_numerics *n, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off, int T,
                     int width, float eps)
{
    calls[N_RMSNORM]++;
    return cpu_i->num_rmsnorm(be, n, out, x, w, w_off, T, width, eps);
}
static int c_attention(bt_backend *be, const bt_numerics *n, const bt_attn_args *a)
{
    calls[N_ATTN]++;
    return cpu_i->num_attention(be, n, a);
}
static int c_plain_attention(bt_backend *be, const bt_attn_args *a)
{
    calls[N_PLAIN_ATTN]++;
    return cpu_i->attention(be, a);
}
static int c_plain_rmsnorm(bt_backend *be, bt_buf *out, bt_buf *x, bt_buf *w, size_t w_off, int T, int width, float eps)
{
    calls[N_PLAIN_NORM]++;
    return cpu_i->rmsnorm(be, out, x, w, w_off, T, width, eps);
}
static const char *counting_name(bt_backend *be) { (void)be; return "counting"; }
static const char *fake_name(bt_backend *be) { (void)be; return "fake:1"; }
static void no_free(bt_backend *be) { (void)be; }

/* FNV-1a over every tapped tensor (identity and bits, read through the
 * seam) and every logit row. */
typedef struct digest { uint64_t h; long n; } digest;
static void mix(digest *d, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) d->h = (d->h ^ c[i]) * 0x100000001b3ull;
}
static bool observe(void *user, const bt_tensor_view *t)
{
    digest *d = user;
    size_t n = (size_t)t->rows * t->width;
    float *buf = malloc(n * sizeof(float));
    if (!buf || bt_tensor_read(t, 0, t->rows, buf)) { free(buf); return false; }
    int id[5] = { t->op, t->layer, t->step, t->pos0, t->rows };
    mix(d, id, sizeof(id));
    mix(d, buf, n * sizeof(float));
    d->n++;
    free(buf);
    return true;
}

/* Run the profile on backend be; BT_OK and the digest, or set_numerics's
 * refusal. */
static int run(const bt_model *m, bt_backend *be, const char *spec, digest *d)
{
    d->h = 0xcbf29ce484222325ull;
    d->n = 0;
    bt_engine_opts o = { .ctx_len = 96, .max_batch = 72, .backend = be };
    bt_engine *e = NULL;
    CHECK_OK(bt_engine_new_opts(m, &o, &e));
    if (!e) return BT_EINVAL;
    bt_numerics n;
    CHECK_OK(bt_numerics_parse(spec, &n));
    int rc = bt_engine_set_numerics(e, &n);
    if (rc) { bt_engine_free(e); return rc; }
    bt_eval_cb cb = { .observe = observe, .user = d };
    bt_engine_set_eval_cb(e, &cb);
    bt_engine_set_logits_all(e, true);
    int nv = m->cfg.n_vocab;
    int32_t toks[72];
    for (int i = 0; i < 72; i++) toks[i] = (i * 131 + 7) % nv;
    int pos = 0;
    static const int chunks[] = { 70, 2, 1, 1, 1 };
    for (size_t c = 0; c < BT_ARRAY_SIZE(chunks); c++) {
        CHECK_OK(bt_engine_forward(e, toks + (c * 3) % 16, chunks[c], pos));
        for (int r = 0; r < chunks[c]; r++) mix(d, bt_engine_logits_row(e, r), (size_t)nv * sizeof(float));
        pos += chunks[c];
    }
    bt_engine_free(e);
    return BT_OK;
}

static const char *const profiles[] = {
    "f16", "bf16", "llama.cpp-cpu", "llama.cpp-cpu-nofa", "llama.cpp-cuda-f16", "vllm-bf16", "vllm-f16",
    "act=f16,kv=q8_0,softmax=f16", "norm=f32,rope=ggml", "mm_acc=f16,mm_in=bf16", "act_q=q8_0,kv=bf16,attn=ggml-mm",
    "llama.cpp-cpu,kv=q8_0", "act=bf16,norm=ggml,act_q=q8_1",
};

static void test_model(const char *path, const char *tok, int threads)
{
    bt_model *m = NULL;
    if (bt_model_load(path, tok, &m)) { fprintf(stderr, "no %s: skipped\n", path); return; }
    bt_backend *cpu = NULL;
    CHECK_OK(bt_backend_cpu_new(threads, &cpu));
    cpu_i = cpu->iface;
    CHECK(cpu_i->num_round && cpu_i->num_matmul && cpu_i->num_rmsnorm && cpu_i->num_attention && cpu_i->num_check,
          "the CPU backend implements every numerics op");
    /* the counting wrapper: the CPU's ops and memory, its numerics ops counted */
    struct bt_backend_i ci = *cpu_i;
    ci.name = counting_name; ci.free = no_free;
    ci.num_round = c_round; ci.num_matmul = c_matmul; ci.num_rmsnorm = c_rmsnorm; ci.num_attention = c_attention;
    ci.attention = c_plain_attention; ci.rmsnorm = c_plain_rmsnorm;
    bt_backend counting = { .iface = &ci, .ctx = cpu->ctx };
    /* the device stand-in: no numerics ops, no host memory, not the CPU's
     * vtable (so the engine finds no CPU pool behind it) */
    struct bt_backend_i fi = *cpu_i;
    fi.name = fake_name; fi.free = no_free; fi.buf_host = NULL;
    fi.num_check = NULL; fi.num_round = NULL; fi.num_matmul = NULL; fi.num_rmsnorm = NULL; fi.num_attention = NULL;
    bt_backend fake = { .iface = &fi, .ctx = cpu->ctx };

    digest ref, got;
    memset(calls, 0, sizeof(calls));
    CHECK_OK(run(m, &counting, "f32", &got));
    CHECK(calls[N_ROUND] + calls[N_MATMUL] + calls[N_RMSNORM] + calls[N_ATTN] == 0,
          "the exact profile calls no numerics op (%ld %ld %ld %ld)", calls[N_ROUND], calls[N_MATMUL], calls[N_RMSNORM],
          calls[N_ATTN]);
    CHECK(calls[N_PLAIN_ATTN] > 0 && calls[N_PLAIN_NORM] > 0);
    for (size_t i = 0; i < BT_ARRAY_SIZE(profiles); i++) {
        const char *p = profiles[i];
        bt_numerics n;
        CHECK_OK(bt_numerics_parse(p, &n));
        CHECK_OK(run(m, cpu, p, &ref));
        CHECK(ref.n > 0, "%s: taps seen", p);
        memset(calls, 0, sizeof(calls));
        CHECK_OK(run(m, &counting, p, &got));
        CHECK(got.h == ref.h && got.n == ref.n, "%s (%s, %d threads): the counting wrapper changed the bits", p, path, threads);
        bool rounds = n.act != BT_NUM_F32 || n.kv != BT_NUM_F32;
        CHECK(rounds == (calls[N_ROUND] > 0), "%s: num_round called %ld times", p, calls[N_ROUND]);
        CHECK(calls[N_MATMUL] > 0, "%s: every matmul under a profile is num_matmul's (%ld)", p, calls[N_MATMUL]);
        bool norm = bt_numerics_norm_custom_n(&n), attn = bt_numerics_attn_custom_n(&n);
        CHECK(norm == (calls[N_RMSNORM] > 0), "%s: num_rmsnorm called %ld times", p, calls[N_RMSNORM]);
        CHECK(attn == (calls[N_ATTN] > 0) && attn == (calls[N_PLAIN_ATTN] == 0),
              "%s: num_attention %ld, attention %ld", p, calls[N_ATTN], calls[N_PLAIN_ATTN]);
        int rc = run(m, &fake, p, &got);
        if (n.mm_acc == BT_NUM_F16) {
            CHECK(rc == BT_EUNSUPPORTED && strstr(bt_errmsg(), "num_matmul") && strstr(bt_errmsg(), "fake:1") &&
                  !strchr(bt_errmsg(), '\n'), "%s on fake:1: refused naming num_matmul (%d: %s)", p, rc, bt_errmsg());
        } else {
            CHECK(rc == BT_OK, "%s on fake:1: %s", p, bt_errmsg());
            CHECK(got.h == ref.h && got.n == ref.n, "%s (%s, %d threads): the fallbacks changed the bits", p, path, threads);
        }
    }
    bt_backend_free(cpu);
    bt_model_free(m);
}

int main(int argc, char **argv)
{
    const char *shared = getenv("BT_SHARED") ? getenv("BT_SHARED") : "../shared";
    if (argc > 1) shared = argv[1];
    char model[1024], tok[1024], tiny[1024];
    snprintf(model, sizeof(model), "%s/models/llama2c/stories260K.bin", shared);
    snprintf(tok, sizeof(tok), "%s/models/llama2c/tok512.bin", shared);
    snprintf(tiny, sizeof(tiny), "%s/models/gguf-tiny/llama-2-tiny-random.gguf", shared);
    FILE *f = fopen(model, "rb");
    if (!f) { printf("no %s: SKIP\n", model); return 77; }
    fclose(f);
    for (int th = 1; th <= 2; th++) {
        test_model(model, tok, th);
        test_model(tiny, NULL, th);
    }
    printf("test_numerics_seam: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
