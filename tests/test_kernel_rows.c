/* test_kernel_rows.c - CUPTI activity records -> trace rows, without a GPU.
 *
 * Synthetic activity records (what the CUDA plugin copies out of CUPTI's
 * buffers) go through bt_act_to_row: external correlation ids name the
 * (step, layer, op), kernel names are demangled, copies get a direction,
 * impossible records are refused. The rows are written into a trace with
 * bt_trace_kernel_rows (plus op timings) and read back through the reader.
 *
 * `test_kernel_rows OUT.db` only writes that synthetic trace (a 2-step run
 * of 2 layers with kernels, op timings and a first_nonfinite event) for the
 * shell tests (tests/export_perfetto.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine/engine.h"
#include "base/kernel_rows.h"
#include "trace/trace.h"
#include "trace/reader.h"

static const char *const ops[] = { "attn_norm", "attn_q", "ffn_down" };
static const int op_ids[] = { BT_OP_ATTN_NORM, BT_OP_ATTN_Q, BT_OP_FFN_DOWN };

static void test_ext_ids(void)
{
    int cases[][3] = { { 0, -1, BT_OP_TOKEN_EMBD }, { 7, 29, BT_OP_FFN_DOWN }, { 123456, 0, BT_OP_LOGITS } };
    for (size_t i = 0; i < BT_ARRAY_SIZE(cases); i++) {
        uint64_t id = bt_act_ext_id(cases[i][0], cases[i][1], cases[i][2]);
        int s, l, o;
        CHECK(id != 0);
        bt_act_ext_decode(id, &s, &l, &o);
        CHECK(s == cases[i][0] && l == cases[i][1] && o == cases[i][2], "ext id %zu: %d %d %d", i, s, l, o);
    }
}

static void test_demangle(void)
{
    char b[256];
    bt_demangle_name("_Z11bt_k_matmuliPKhmllPKfiPf", b, sizeof b);
    CHECK(!strcmp(b, "bt_k_matmul"), "%s", b);
    bt_demangle_name("_ZN7cutlass6KernelINS_4gemmEEEvT_", b, sizeof b);
    CHECK(!strcmp(b, "cutlass::Kernel"), "%s", b);
    bt_demangle_name("bt_k_stats", b, sizeof b);
    CHECK(!strcmp(b, "bt_k_stats"), "%s", b);
    bt_demangle_name("_Z999x", b, sizeof b);          /* length past the end: kept verbatim */
    CHECK(!strcmp(b, "_Z999x"), "%s", b);
    bt_demangle_name("_ZN3fooE", b, 4);                /* truncated, terminated */
    CHECK(strlen(b) <= 3);
}

static void test_convert(void)
{
    bt_kernel_row row;
    bt_act k = { .kind = BT_ACT_KERNEL, .name = "_Z11bt_k_matmuliPKhmllPKfiPf", .start_ns = 1000, .end_ns = 4000,
                 .grid = { 144, 1, 1 }, .block = { 128, 1, 1 }, .registers = 40, .static_shared = 0,
                 .dynamic_shared = 256, .stream = 7, .device = 0 };
    CHECK_OK(bt_act_to_row(&k, bt_act_ext_id(3, 2, BT_OP_FFN_DOWN), bt_op_name, &row));
    CHECK(row.step == 3 && row.layer == 2 && !strcmp(row.op, "ffn_down"), "%d %d %s", row.step, row.layer, row.op);
    CHECK(!strcmp(row.kind, "kernel") && !strcmp(row.name, "bt_k_matmul"));
    CHECK(row.grid[0] == 144 && row.block[0] == 128 && row.registers == 40 && row.shared_bytes == 256);
    CHECK(row.start_ns == 1000 && row.end_ns == 4000 && row.stream == 7 && row.bytes == -1);

    bt_act c = { .kind = BT_ACT_MEMCPY, .copy_kind = 2, .bytes = 4096, .start_ns = 5, .end_ns = 9 };
    CHECK_OK(bt_act_to_row(&c, 0, bt_op_name, &row));
    CHECK(row.step == -1 && row.layer == -1 && row.op[0] == 0 && !strcmp(row.name, "memcpy DtoH") && row.bytes == 4096);
    CHECK(row.registers == -1);
    c.copy_kind = 99;
    CHECK_OK(bt_act_to_row(&c, 0, NULL, &row));
    CHECK(!strcmp(row.name, "memcpy ?"));

    bt_act api = { .kind = BT_ACT_RUNTIME, .name = "cudaLaunchKernel", .start_ns = 1, .end_ns = 2 };
    CHECK_OK(bt_act_to_row(&api, bt_act_ext_id(0, -1, BT_OP_TOKEN_EMBD), bt_op_name, &row));
    CHECK(!strcmp(row.kind, "runtime") && !strcmp(row.name, "cudaLaunchKernel") && row.layer == -1);

    bt_act backwards = { .kind = BT_ACT_KERNEL, .name = "k", .start_ns = 10, .end_ns = 9 };
    CHECK(bt_act_to_row(&backwards, 0, NULL, &row) == BT_EFORMAT);
    bt_act unknown = { .kind = 42, .start_ns = 1, .end_ns = 2 };
    CHECK(bt_act_to_row(&unknown, 0, NULL, &row) == BT_EFORMAT);
}

/* A 2-step, 2-layer trace with kernels and op timings; the ffn_down of
 * layer 1 at step 1 goes NaN (a first_nonfinite event names its kernel). */
static int write_trace(const char *path)
{
    bt_trace *t = NULL;
    int rc = bt_trace_create(path, &t);
    if (rc) return rc;
    int idx = 0;
    for (int l = 0; l < 2; l++)
        for (int o = 0; o < 3; o++) {
            char name[32];
            snprintf(name, sizeof name, "blk.%d.%s", l, ops[o]);
            if ((rc = bt_trace_tensor(t, "target", idx++, name, l, ops[o], 8))) goto out;
        }
    int64_t clock = 1000000;
    for (int step = 0; step < 2; step++) {
        if ((rc = bt_trace_step_begin(t, step, "target", step ? "decode" : "prefill", step ? 4 : 0, step ? 1 : 4))) goto out;
        for (int i = 0; i < idx; i++) {
            int l = i / 3, o = i % 3;
            bt_tap_stats s = { .n = 8, .n_finite = 8, .min = -1, .max = 1, .absmax = 1, .mean = 0, .rms = 0.5f,
                               .first_bad_index = -1, .first_bad_pos = -1 };
            if (step == 1 && l == 1 && o == 2) {
                s.nan = 8; s.n_finite = 0; s.min = s.max = s.absmax = s.mean = s.rms = NAN;
                s.first_bad_index = 0; s.first_bad_pos = 4;
            }
            if ((rc = bt_trace_tap(t, i, &s))) goto out;
            if ((rc = bt_trace_op_timing(t, step, "target", i, clock, 2000 + 100 * i))) goto out;
            bt_act a[2] = {
                { .kind = BT_ACT_KERNEL, .name = o == 0 ? "_Z12bt_k_rmsnormPfPKfS1_if" : "_Z11bt_k_matmuliPKhmllPKfiPf",
                  .start_ns = (uint64_t)clock + 100, .end_ns = (uint64_t)clock + 1500, .grid = { 4, 1, 1 },
                  .block = { 128, 1, 1 }, .registers = 32, .stream = 13, .device = 0 },
                { .kind = BT_ACT_KERNEL, .name = "_Z10bt_k_statsPKflP11bt_cu_statsi", .start_ns = (uint64_t)clock + 1500,
                  .end_ns = (uint64_t)clock + 1800, .grid = { 1, 1, 1 }, .block = { 256, 1, 1 }, .registers = 24,
                  .static_shared = 14336, .stream = 13, .device = 0 },
            };
            bt_kernel_row rows[2];
            for (int k = 0; k < 2; k++)
                if ((rc = bt_act_to_row(&a[k], bt_act_ext_id(step, l, op_ids[o]), bt_op_name, &rows[k]))) goto out;
            if ((rc = bt_trace_kernel_rows(t, rows, 2))) goto out;
            clock += 2000 + 100 * i;
        }
        if ((rc = bt_trace_step_end(t, 1.25 + step))) goto out;
        clock += 50000;
    }
    bt_act copy = { .kind = BT_ACT_MEMCPY, .copy_kind = 2, .bytes = 512, .start_ns = (uint64_t)clock,
                    .end_ns = (uint64_t)clock + 700, .stream = 13 };
    bt_kernel_row crow;
    if ((rc = bt_act_to_row(&copy, 0, bt_op_name, &crow)) || (rc = bt_trace_kernel_rows(t, &crow, 1))) goto out;
    rc = bt_trace_event(t, 1, 4, "first_nonfinite", 1, "ffn_down", "blk.1.ffn_down",
                        "blk.1.ffn_down has 8 NaN at step 1 (kernel bt_k_matmul)", NULL);
out:;
    int rc2 = bt_trace_close(t, rc ? "error" : "ok");
    return rc ? rc : rc2;
}

typedef struct seen { int n, kernels, with_op, first_bad; int64_t last_start; bool ordered; } seen;

static int on_kernel(void *user, const bt_kernel_row *k)
{
    seen *s = user;
    s->n++;
    s->kernels += !strcmp(k->kind, "kernel");
    s->with_op += k->op[0] != 0;
    if (k->step == 1 && k->layer == 1 && !strcmp(k->op, "ffn_down") && !strcmp(k->name, "bt_k_matmul") &&
        k->registers == 32 && k->grid[0] == 4 && k->block[0] == 128)
        s->first_bad++;
    if (k->start_ns < s->last_start) s->ordered = false;
    s->last_start = k->start_ns;
    return 0;
}

static int on_timing(void *user, const bt_trace_op_timing_row *t)
{
    seen *s = user;
    s->n++;
    if (t->step == 1 && t->layer == 1 && !strcmp(t->op, "ffn_down") && t->dur_ns == 2000 + 100 * 5) s->first_bad++;
    return 0;
}

static void test_roundtrip(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/k.db", dir);
    CHECK_OK(write_trace(path));
    bt_trace_reader *r = NULL;
    CHECK_OK(bt_trace_open(path, &r));
    if (!r) return;
    seen s = { .ordered = true };
    CHECK_OK(bt_trace_kernels_each(r, on_kernel, &s));
    CHECK(s.n == 2 * 6 * 2 + 1 && s.kernels == 24 && s.with_op == 24, "%d rows, %d kernels, %d with op", s.n, s.kernels, s.with_op);
    CHECK(s.first_bad == 1 && s.ordered);
    seen tm = { 0 };
    CHECK_OK(bt_trace_op_timings_each(r, on_timing, &tm));
    CHECK(tm.n == 12 && tm.first_bad == 1, "%d timings", tm.n);
    bt_trace_reader_close(r);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc == 2) {
        int rc = write_trace(argv[1]);
        if (rc) fprintf(stderr, "test_kernel_rows: %s\n", bt_errmsg());
        return rc ? 2 : 0;
    }
    char dir[] = "/tmp/bt-krows.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_ext_ids();
    test_demangle();
    test_convert();
    test_roundtrip(dir);
    rmdir(dir);
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
