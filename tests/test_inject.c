/* test_inject.c - fault injection specs: the grammar (valid specs parse,
 * every bad one is BT_EINVAL naming the bad part), exactly which elements an
 * activation fault changes, KV-cache poisoning through a real engine, and
 * weight bit flips that corrupt memory but never the model file.
 *
 * The engine parts need stories260K (BT_SHARED/models/llama2c); without it
 * they SKIP (exit 77) after the synthetic checks have run. */
#include "engine/engine.h"
#include "model/model.h"
#include "tap/inject.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void expect_ok(const char *spec)
{
    bt_injector *inj = bt_injector_new();
    int rc = bt_injector_add(inj, spec);
    if (rc != BT_OK) { failures++; fprintf(stderr, "FAIL: '%s' rejected: %s\n", spec, bt_errmsg()); }
    bt_injector_free(inj);
}

/* Rejected with BT_EINVAL, the message quoting the spec and naming `part`. */
static void expect_bad(const char *spec, const char *part)
{
    bt_injector *inj = bt_injector_new();
    int rc = bt_injector_add(inj, spec);
    const char *msg = bt_errmsg();
    char quoted[1100];
    snprintf(quoted, sizeof quoted, "--inject '%s': ", spec);
    if (rc != BT_EINVAL || !strstr(msg, part) || strncmp(msg, quoted, strlen(quoted)) || strchr(msg, '\n')) {
        failures++;
        fprintf(stderr, "FAIL: '%s': rc %d, message \"%s\" (want BT_EINVAL naming \"%s\")\n", spec, rc, msg, part);
    }
    CHECK(bt_injector_count(inj) == 0);
    bt_injector_free(inj);
}

static void test_parse(void)
{
    expect_ok("nan@layer=3,op=ffn_down");
    expect_ok("inf@op=attn_q");
    expect_ok("+inf@op=logits,step=4");
    expect_ok("-inf@layer=0,op=attn_k,step>=2,pos>=5,count=4");
    expect_ok("zero@op=token_embd,index=7");
    expect_ok("scale=1e4@layer=1,op=ffn_act");
    expect_ok("scale=-0.5@op=blk.2.attn_output");
    expect_ok("noise=0.25@layer=4,op=ffn_up,model=draft");
    expect_ok("nan");
    expect_ok("nan@model=target");
    expect_ok("longctx@pos>=100,op=attn_v,scale=1.5");
    expect_ok("longctx@pos>=100,op=attn_v,scale=1.5,layer=2,step>=1");
    expect_ok("kvcorrupt@layer=2,pos=7");
    expect_ok("kvcorrupt@layer=2,pos=7,value=inf");
    expect_ok("kvcorrupt@pos=0,layer=0,value=zero,model=draft");
    expect_ok("bitflip:tensor=blk.0.attn_q.weight,index=12,bit=30");
    expect_ok("bitflip:bit=3,index=0,tensor=token_embd.weight");
    expect_ok("crash@step=3");

    expect_bad("", "empty spec");
    expect_bad("nan@layer=x", "layer expects an integer");
    expect_bad("nan@layer=-1", "layer expects an integer");
    expect_bad("nan@layer=", "layer expects a value");
    expect_bad("nan@op=ffn_dwn", "unknown op 'ffn_dwn'");
    expect_bad("nan@op=blk.x.ffn_down", "layer 'x' is not an integer");
    expect_bad("nan@op=blk.2.logits", "logits is not a per-layer op");
    expect_bad("nan@layer=2,op=output_norm", "op output_norm is not a per-layer op");
    expect_bad("nan@layer=2,op=blk.3.ffn_up", "layer given twice");
    expect_bad("nan@layer=1,layer=2", "layer given twice");
    expect_bad("nan@step=1.5", "step expects an integer");
    expect_bad("nan@step>=", "step expects a value");
    expect_bad("nan@pos=3", "pos=P is only for kvcorrupt");
    expect_bad("nan@pos>=abc", "pos>= expects an integer");
    expect_bad("nan@index=2,count=3", "index or count, not both");
    expect_bad("nan@count=0", "count expects an integer >= 1");
    expect_bad("nan@index>=2", "index takes '=', not '>='");
    expect_bad("nan@model=both", "model expects target or draft");
    expect_bad("nan@colour=red", "unknown key 'colour'");
    expect_bad("nan@layer", "'layer' is not key=value");
    expect_bad("nan@", "nothing after '@'");
    expect_bad("nan@layer=1,,op=attn_q", "empty item");
    expect_bad("nan@layer=1,", "empty item");
    expect_bad("nann@layer=1", "unknown kind 'nann'");
    expect_bad("scale@layer=1", "scale needs a value");
    expect_bad("scale=abc@layer=1", "scale expects a finite number, not 'abc'");
    expect_bad("scale=inf@layer=1", "scale expects a finite number");
    expect_bad("noise=-1@layer=1", "noise expects a finite amplitude >= 0");
    expect_bad("longctx@op=attn_q,scale=2", "longctx needs pos>=P");
    expect_bad("longctx@pos>=10,scale=2", "longctx needs op=NAME");
    expect_bad("longctx@pos>=10,op=attn_q", "longctx needs scale=F");
    expect_bad("longctx", "longctx needs @WHERE");
    expect_bad("kvcorrupt@pos=3", "kvcorrupt needs layer=L");
    expect_bad("kvcorrupt@layer=3", "kvcorrupt needs pos=P");
    expect_bad("kvcorrupt@layer=1,pos=2,value=7", "value expects nan, inf, -inf or zero, not '7'");
    expect_bad("kvcorrupt@layer=1,pos=2,op=attn_k", "kvcorrupt takes layer, pos, value, model and p only");
    expect_bad("bitflip", "bitflip needs ':tensor=NAME,index=I,bit=B'");
    expect_bad("bitflip:index=1,bit=2", "bitflip needs tensor=WEIGHT_NAME");
    expect_bad("bitflip:tensor=output.weight,bit=2", "bitflip needs index=I");
    expect_bad("bitflip:tensor=output.weight,index=1", "bitflip needs bit=B");
    expect_bad("bitflip:tensor=output.weight,index=1,bit=32", "bit expects an integer 0..31, not '32'");
    expect_bad("bitflip:tensor=w,index=1,bit=2,layer=3", "unknown key 'layer'");
    expect_bad("nan:layer=2", "expected KIND@WHERE ('nan' before ':' is not bitflip)");
    expect_bad("crash@step>=3", "crash needs step=S");
    expect_bad("crash@step=3,layer=1", "crash takes step=S only");

    /* count, JSON, crash */
    bt_injector *inj = bt_injector_new();
    CHECK(bt_injector_count(inj) == 0);
    char *js = bt_injector_json(inj);
    CHECK(js && !strcmp(js, "[]"));
    free(js);
    CHECK(bt_injector_add(inj, "nan@layer=3,op=ffn_down") == BT_OK);
    CHECK(bt_injector_add(inj, "crash@step=4") == BT_OK);
    CHECK(bt_injector_add(inj, "bad\"spec") == BT_EINVAL);
    CHECK(bt_injector_count(inj) == 2);
    js = bt_injector_json(inj);
    CHECK(js && !strcmp(js, "[\"nan@layer=3,op=ffn_down\",\"crash@step=4\"]"));
    free(js);
    CHECK(bt_injector_crash_at(inj, 4) && !bt_injector_crash_at(inj, 3) && !bt_injector_crash_at(inj, 5));
    bt_injector_free(inj);
    bt_injector_free(NULL);
    CHECK(bt_injector_count(NULL) == 0);
}

/* A synthetic 3-row x 8-wide tensor: positions 10..12, values 1 + row*8 + col. */
enum { ROWS = 3, W = 8 };
static float data[ROWS * W], orig[ROWS * W];

static bt_tensor_view make_view(int op, int layer, int step)
{
    for (int i = 0; i < ROWS * W; i++) orig[i] = data[i] = 1.0f + (float)i;
    bt_tensor_view t = { .op = op, .layer = layer, .step = step, .pos0 = 10, .rows = ROWS, .width = W, .data = data };
    return t;
}

/* Apply one spec to a fresh view; `want` lists the (row, col) expected to
 * change as a string of '.' (unchanged) and 'x' (changed), row-major. */
static void check_apply(const char *spec, const char *model, int op, int layer, int step, const char *want, int line)
{
    bt_injector *inj = bt_injector_new();
    if (bt_injector_add(inj, spec) != BT_OK) {
        failures++; fprintf(stderr, "line %d: '%s' rejected: %s\n", line, spec, bt_errmsg());
        bt_injector_free(inj); return;
    }
    bt_tensor_view t = make_view(op, layer, step);
    long n = bt_injector_apply(inj, model, &t);
    char got[ROWS * W + 1];
    long want_n = 0;
    for (int i = 0; i < ROWS * W; i++) {
        got[i] = memcmp(&data[i], &orig[i], 4) ? 'x' : '.';
        want_n += want[i] == 'x';
    }
    got[ROWS * W] = 0;
    if (strcmp(got, want) || n != want_n) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: '%s' changed %s (%ld), want %s (%ld)\n", __FILE__, line, spec, got, n, want, want_n);
    }
    bool wants = bt_injector_wants(inj, model, op, layer);
    if (want_n && !wants) { failures++; fprintf(stderr, "%s:%d: FAIL: '%s' applied but wants() is false\n", __FILE__, line, spec); }
    bt_injector_free(inj);
}
#define APPLY(spec, model, op, layer, step, want) check_apply(spec, model, op, layer, step, want, __LINE__)

static void test_apply(void)
{
    const char *none = "........................";
    /* default: index 0 of every row (every position) */
    APPLY("nan@layer=1,op=ffn_down", "target", BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("nan@layer=1,op=ffn_down", NULL, BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("nan@op=blk.1.ffn_down", "target", BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("inf@layer=1,op=ffn_down,count=3", "target", BT_OP_FFN_DOWN, 1, 2, "xxx.....xxx.....xxx.....");
    APPLY("-inf@layer=1,op=ffn_down,count=99", "target", BT_OP_FFN_DOWN, 1, 2, "xxxxxxxxxxxxxxxxxxxxxxxx");
    APPLY("nan@layer=1,op=ffn_down,index=5,pos>=11", "target", BT_OP_FFN_DOWN, 1, 2, ".............x.......x..");
    APPLY("nan@layer=1,op=ffn_down,index=8", "target", BT_OP_FFN_DOWN, 1, 2, none);   /* past the row */
    APPLY("nan@pos>=13", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@pos>=12", "target", BT_OP_FFN_DOWN, 1, 2, "................x.......");
    /* filters that do not match */
    APPLY("nan@layer=2,op=ffn_down", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@layer=1,op=ffn_up", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@layer=1", "target", BT_OP_LOGITS, -1, 2, none);          /* layer= excludes non-layer tensors */
    APPLY("nan@op=logits", "target", BT_OP_LOGITS, -1, 2, "x.......x.......x.......");
    APPLY("nan@step=3", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@step=2", "target", BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("nan@step>=2", "target", BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("nan@step>=2", "target", BT_OP_FFN_DOWN, 1, 7, "x.......x.......x.......");
    APPLY("nan@step>=3", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@model=draft", "target", BT_OP_FFN_DOWN, 1, 2, none);
    APPLY("nan@model=draft", "draft", BT_OP_FFN_DOWN, 1, 2, "x.......x.......x.......");
    APPLY("nan", "draft", BT_OP_FFN_DOWN, 1, 2, none);                   /* default model is target */
    APPLY("nan", "target", BT_OP_TOKEN_EMBD, -1, 0, "x.......x.......x.......");
    /* zero changes only elements that were not zero already; scale=1 changes nothing */
    APPLY("zero@count=2", "target", BT_OP_ATTN_Q, 0, 0, "xx......xx......xx......");
    APPLY("scale=1@count=8", "target", BT_OP_ATTN_Q, 0, 0, none);
    /* the cache-only kinds never touch activations */
    APPLY("kvcorrupt@layer=1,pos=11", "target", BT_OP_ATTN_K, 1, 0, none);
    APPLY("crash@step=0", "target", BT_OP_ATTN_K, 1, 0, none);
    APPLY("bitflip:tensor=x,index=0,bit=0", "target", BT_OP_ATTN_K, 1, 0, none);
    /* longctx: whole rows at positions >= P, scaled, finite */
    APPLY("longctx@pos>=11,op=attn_v,scale=3", "target", BT_OP_ATTN_V, 4, 5, "........xxxxxxxxxxxxxxxx");
    APPLY("longctx@pos>=11,op=attn_v,scale=3", "target", BT_OP_ATTN_K, 4, 5, none);

    /* values */
    bt_injector *inj = bt_injector_new();
    CHECK(bt_injector_add(inj, "scale=2.5@op=ffn_act,index=1") == BT_OK);
    CHECK(bt_injector_add(inj, "inf@op=ffn_act,index=2,pos>=12") == BT_OK);
    CHECK(bt_injector_add(inj, "-inf@op=ffn_act,index=3,step=0") == BT_OK);
    CHECK(bt_injector_add(inj, "zero@op=ffn_act,index=4") == BT_OK);
    CHECK(bt_injector_add(inj, "nan@op=ffn_act,index=5") == BT_OK);
    bt_tensor_view t = make_view(BT_OP_FFN_ACT, 0, 0);
    CHECK(bt_injector_apply(inj, "target", &t) == 3 + 1 + 3 + 3 + 3);
    for (int r = 0; r < ROWS; r++) {
        const float *row = data + r * W, *o = orig + r * W;
        CHECK(row[0] == o[0]);
        CHECK(row[1] == o[1] * 2.5f);
        CHECK(r == 2 ? isinf(row[2]) && row[2] > 0 : row[2] == o[2]);
        CHECK(isinf(row[3]) && row[3] < 0);
        CHECK(row[4] == 0.0f);
        CHECK(isnan(row[5]));
        CHECK(row[6] == o[6] && row[7] == o[7]);
    }
    CHECK(bt_injector_wants(inj, "target", BT_OP_FFN_ACT, 7));
    CHECK(!bt_injector_wants(inj, "target", BT_OP_FFN_UP, 7));
    CHECK(!bt_injector_wants(inj, "draft", BT_OP_FFN_ACT, 7));
    CHECK(!bt_injector_wants(NULL, "target", BT_OP_FFN_ACT, 7));
    CHECK(bt_injector_apply(NULL, "target", &t) == 0);
    bt_injector_free(inj);

    /* noise: bounded, deterministic for the same (step, layer, op, pos,
     * index), different for a different step */
    inj = bt_injector_new();
    CHECK(bt_injector_add(inj, "noise=0.5@op=attn_q,count=8") == BT_OK);
    float a[ROWS * W], b[ROWS * W];
    t = make_view(BT_OP_ATTN_Q, 2, 4);
    CHECK(bt_injector_apply(inj, "target", &t) == ROWS * W);
    memcpy(a, data, sizeof a);
    float maxd = 0;
    int distinct = 0;
    for (int i = 0; i < ROWS * W; i++) {
        float d = fabsf(a[i] - orig[i]);
        if (d > maxd) maxd = d;
        if (i && a[i] - orig[i] != a[i - 1] - orig[i - 1]) distinct++;
    }
    CHECK(maxd > 0 && maxd <= 0.5f);
    CHECK(distinct > ROWS * W / 2);
    t = make_view(BT_OP_ATTN_Q, 2, 4);
    bt_injector_apply(inj, "target", &t);
    CHECK(!memcmp(a, data, sizeof a));
    /* the same position in a 1-row view (a decode step) gets the same noise */
    make_view(BT_OP_ATTN_Q, 2, 4);
    bt_tensor_view one = { .op = BT_OP_ATTN_Q, .layer = 2, .step = 4, .pos0 = 11, .rows = 1, .width = W, .data = data + W };
    bt_injector_apply(inj, "target", &one);
    CHECK(!memcmp(a + W, data + W, W * sizeof(float)));
    t = make_view(BT_OP_ATTN_Q, 2, 5);
    bt_injector_apply(inj, "target", &t);
    memcpy(b, data, sizeof b);
    CHECK(memcmp(a, b, sizeof a) != 0);
    bt_injector_free(inj);
}

/* ---- through a real engine (stories260K) ---- */

typedef struct cb_state {
    bt_injector *inj;
    long changed;
} cb_state;

static bool cb_ask(void *user, int op, int layer)
{
    cb_state *s = user;
    return bt_injector_wants(s->inj, "target", op, layer);
}

static bool cb_observe(void *user, const bt_tensor_view *t)
{
    cb_state *s = user;
    s->changed += bt_injector_apply(s->inj, "target", t);
    return true;
}

static bool row_all(const float *x, int n, int what)   /* what: 0 zero, 1 nan, 2 finite */
{
    for (int i = 0; i < n; i++) {
        if (what == 0 && x[i] != 0.0f) return false;
        if (what == 1 && !isnan(x[i])) return false;
        if (what == 2 && !isfinite(x[i])) return false;
    }
    return true;
}

static bool any_nonfinite(const float *x, int n)
{
    for (int i = 0; i < n; i++) if (!isfinite(x[i])) return true;
    return false;
}

static void test_kvcorrupt(const char *model_path, const char *tok_path)
{
    bt_model *m = NULL;
    if (bt_model_load(model_path, tok_path, &m) != BT_OK) { failures++; fprintf(stderr, "FAIL: load: %s\n", bt_errmsg()); return; }
    bt_engine *e = NULL;
    CHECK(bt_engine_new(m, 64, 16, 1, &e) == BT_OK);
    if (!e) { bt_model_free(m); return; }
    cb_state st = { bt_injector_new(), 0 };
    CHECK(bt_injector_add(st.inj, "kvcorrupt@layer=1,pos=2") == BT_OK);
    CHECK(bt_injector_add(st.inj, "kvcorrupt@layer=3,pos=5,value=inf") == BT_OK);
    /* kvcorrupt only watches attn_k of its layer */
    CHECK(bt_injector_wants(st.inj, "target", BT_OP_ATTN_K, 1));
    CHECK(!bt_injector_wants(st.inj, "target", BT_OP_ATTN_V, 1));
    CHECK(!bt_injector_wants(st.inj, "target", BT_OP_ATTN_K, 2));
    bt_eval_cb cb = { cb_ask, cb_observe, &st };
    bt_engine_set_eval_cb(e, &cb);
    int kvd = bt_engine_kv_dim(e), nv = m->cfg.n_vocab;

    /* prefill positions 0..3: the forward itself is clean, then (1, 2) is
     * poisoned; (3, 5) does not exist yet */
    int32_t prompt[4] = { 1, 403, 407, 261 };
    CHECK(bt_engine_forward(e, prompt, 4, 0) == BT_OK);
    CHECK(row_all(bt_engine_logits(e), nv, 2));
    CHECK(st.changed == 0);
    bt_injector_after_forward(st.inj, e);
    CHECK(row_all(bt_engine_kv(e, 1, 2, 0), kvd, 1));
    CHECK(row_all(bt_engine_kv(e, 1, 2, 1), kvd, 1));
    CHECK(row_all(bt_engine_kv(e, 1, 1, 0), kvd, 2) && row_all(bt_engine_kv(e, 1, 3, 1), kvd, 2));
    CHECK(row_all(bt_engine_kv(e, 0, 2, 0), kvd, 2) && row_all(bt_engine_kv(e, 2, 2, 1), kvd, 2));
    CHECK(row_all(bt_engine_kv(e, 3, 5, 0), kvd, 0));   /* not computed yet: still zero */

    /* decode position 4: attention at layer 1 reads the poisoned position */
    int32_t tok = 378;
    CHECK(bt_engine_forward(e, &tok, 1, 4) == BT_OK);
    CHECK(any_nonfinite(bt_engine_logits(e), nv));
    bt_injector_after_forward(st.inj, e);
    CHECK(row_all(bt_engine_kv(e, 3, 5, 0), kvd, 0));

    /* only once: repair (1, 2) by hand; a later forward does not re-poison
     * it. Position 5 is then computed and (3, 5) becomes +Inf. */
    for (int i = 0; i < kvd; i++) { bt_engine_kv(e, 1, 2, 0)[i] = 0.5f; bt_engine_kv(e, 1, 2, 1)[i] = 0.5f; }
    tok = 432;
    CHECK(bt_engine_forward(e, &tok, 1, 5) == BT_OK);
    bt_injector_after_forward(st.inj, e);
    CHECK(bt_engine_kv(e, 1, 2, 0)[0] == 0.5f);
    const float *k35 = bt_engine_kv(e, 3, 5, 0), *v35 = bt_engine_kv(e, 3, 5, 1);
    bool all_inf = true;
    for (int i = 0; i < kvd; i++) all_inf &= isinf(k35[i]) && k35[i] > 0 && isinf(v35[i]);
    CHECK(all_inf);
    CHECK(row_all(bt_engine_kv(e, 3, 6, 0), kvd, 0));   /* untouched beyond */

    /* out of range: warns, no crash, once */
    bt_injector *far = bt_injector_new();
    CHECK(bt_injector_add(far, "kvcorrupt@layer=9,pos=0") == BT_OK);
    bt_injector_after_forward(far, e);
    bt_injector_free(far);

    bt_injector_free(st.inj);
    bt_engine_free(e);
    bt_model_free(m);
}

/* Find an element of a f32 weight whose exponent is 127 (|w| in [1, 2)):
 * flipping bit 30 sets all exponent bits, making it Inf or NaN. */
static long find_exp127(const bt_weight *w)
{
    const uint32_t *u = w->data;
    long n = (long)(w->rows * w->cols);
    for (long i = 0; i < n; i++)
        if (((u[i] >> 23) & 0xff) == 127) return i;
    return -1;
}

static void test_bitflip(const char *model_path, const char *tok_path)
{
    char *file = NULL;
    size_t flen = 0;
    char before[65], after[65];
    CHECK(bt_read_file(model_path, &file, &flen) == BT_OK);
    if (!file) return;
    bt_sha256_hex(file, flen, before);

    bt_model *m = NULL;
    if (bt_model_load(model_path, tok_path, &m) != BT_OK) { failures++; fprintf(stderr, "FAIL: load: %s\n", bt_errmsg()); free(file); return; }

    /* pick a weight and element: first layer matrix with a [1,2) element */
    static const char *cands[] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
    const bt_weight *w = NULL;
    long idx = -1;
    char name[64] = "";
    for (int l = 0; l < m->cfg.n_layers && idx < 0; l++) {
        const bt_weight *ws[] = { &m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv, &m->layers[l].wo,
                                  &m->layers[l].w_gate, &m->layers[l].w_up, &m->layers[l].w_down };
        for (int k = 0; k < 7 && idx < 0; k++) {
            idx = find_exp127(ws[k]);
            if (idx >= 0) { w = ws[k]; snprintf(name, sizeof name, "blk.%d.%s.weight", l, cands[k]); }
        }
    }
    CHECK(w != NULL);
    if (!w) { bt_model_free(m); free(file); return; }
    const float *wf = w->data;
    float old = wf[idx];
    CHECK(isfinite(old) && fabsf(old) >= 1.0f && fabsf(old) < 2.0f);

    /* bad names and ranges are errors, and change nothing */
    bt_injector *bad = bt_injector_new();
    CHECK(bt_injector_add(bad, "bitflip:tensor=wq,index=0,bit=1") == BT_OK);
    CHECK(bt_injector_apply_weights(bad, m) == BT_ENOTFOUND && strstr(bt_errmsg(), "'wq' is used by"));
    bt_injector_free(bad);
    bad = bt_injector_new();
    CHECK(bt_injector_add(bad, "bitflip:tensor=blk.99.attn_q.weight,index=0,bit=1") == BT_OK);
    CHECK(bt_injector_apply_weights(bad, m) == BT_ENOTFOUND && strstr(bt_errmsg(), "no weight named 'blk.99.attn_q.weight'"));
    bt_injector_free(bad);
    bad = bt_injector_new();
    CHECK(bt_injector_add(bad, "bitflip:tensor=blk.0.attn_q.weight,index=4096,bit=1") == BT_OK);  /* 64x64 */
    CHECK(bt_injector_apply_weights(bad, m) == BT_ERANGE && strstr(bt_errmsg(), "index 4096 is past the end"));
    bt_injector_free(bad);
    CHECK(wf[idx] == old);

    char spec[160];
    snprintf(spec, sizeof spec, "bitflip:tensor=%s,index=%ld,bit=30", name, idx);
    bt_injector *inj = bt_injector_new();
    CHECK(bt_injector_add(inj, spec) == BT_OK);
    /* the llama2.c checkpoint's own name for a unique tensor works too */
    CHECK(bt_injector_add(inj, "bitflip:tensor=rms_final_weight,index=3,bit=31") == BT_OK);
    float norm_old = ((const float *)m->output_norm.data)[3];
    CHECK(bt_injector_apply_weights(inj, m) == BT_OK);
    CHECK(!isfinite(wf[idx]));
    CHECK(((const float *)m->output_norm.data)[3] == -norm_old);   /* sign bit */
    CHECK(idx == 0 || wf[idx - 1] == ((const float *)(file + ((const char *)&wf[idx - 1] - (const char *)m->file_data)))[0]);
    /* applying again does not flip back */
    CHECK(bt_injector_apply_weights(inj, m) == BT_OK);
    CHECK(!isfinite(wf[idx]));
    /* exactly the two flipped bytes differ from the file in memory */
    size_t diff = 0;
    for (size_t i = 0; i < flen && i < m->file_size; i++) diff += m->file_data[i] != (uint8_t)file[i];
    CHECK(diff == 2);

    /* the run now goes non-finite */
    bt_engine *e = NULL;
    CHECK(bt_engine_new(m, 32, 8, 1, &e) == BT_OK);
    if (e) {
        int32_t prompt[4] = { 1, 403, 407, 261 };
        CHECK(bt_engine_forward(e, prompt, 4, 0) == BT_OK);
        CHECK(any_nonfinite(bt_engine_logits(e), m->cfg.n_vocab));
        bt_engine_free(e);
    }
    bt_injector_free(inj);
    bt_model_free(m);

    /* the file on disk is unchanged */
    free(file);
    file = NULL;
    CHECK(bt_read_file(model_path, &file, &flen) == BT_OK);
    if (file) bt_sha256_hex(file, flen, after);
    CHECK(file && !strcmp(before, after));
    CHECK(!strcmp(before, "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"));
    free(file);
}

/* A spec this run can never match is refused, naming the part; one that
 * can is accepted. Limits: 4 layers, positions < 20, steps < 10. */
static void expect_check(const char *spec, const bt_inject_limits *lim, const char *part, int line)
{
    bt_injector *inj = bt_injector_new();
    if (bt_injector_add(inj, spec) != BT_OK) { failures++; fprintf(stderr, "line %d: '%s' rejected: %s\n", line, spec, bt_errmsg()); bt_injector_free(inj); return; }
    int rc = bt_injector_check(inj, lim);
    const char *msg = bt_errmsg();
    if (part ? rc != BT_EINVAL || !strstr(msg, part) || !strstr(msg, spec) : rc != BT_OK) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: check '%s': rc %d, \"%s\" (want %s)\n", __FILE__, line, spec, rc, rc ? msg : "",
                part ? part : "BT_OK");
    }
    bt_injector_free(inj);
}
#define CHECK_OK(spec, lim) expect_check(spec, lim, NULL, __LINE__)
#define CHECK_BAD(spec, lim, part) expect_check(spec, lim, part, __LINE__)

static void test_check(void)
{
    bt_config t = { .dim = 64, .hidden_dim = 172, .n_layers = 4, .n_heads = 8, .n_kv_heads = 4, .head_dim = 8, .n_vocab = 512 };
    bt_config d = t;
    bt_inject_limits plain = { .target = &t, .max_pos = 20, .max_step = 10 };
    bt_inject_limits spec = { .target = &t, .draft = &d, .draft_layers = 2, .max_pos = 20, .max_step = 10 };
    CHECK_OK("nan@layer=3,op=ffn_down", &plain);
    CHECK_BAD("nan@layer=4,op=ffn_down", &plain, "layer 4 is beyond the model's 4 layers (0..3)");
    CHECK_BAD("nan@op=blk.9.attn_q", &plain, "layer 9 is beyond the model's 4 layers");
    CHECK_BAD("kvcorrupt@layer=4,pos=1", &plain, "layer 4 is beyond");
    CHECK_BAD("nan@model=draft", &plain, "model=draft, but this run has no draft model");
    CHECK_OK("nan@model=draft,layer=1", &spec);
    CHECK_BAD("nan@model=draft,layer=2", &spec, "layer 2 is beyond the draft model's 2 layers (0..1)");
    CHECK_OK("nan@layer=3", &spec);
    CHECK_OK("nan@pos>=19", &plain);
    CHECK_BAD("nan@pos>=20", &plain, "pos>=20 is beyond the context (positions 0..19; --ctx)");
    CHECK_BAD("longctx@pos>=25,op=attn_v,scale=2", &plain, "pos>=25 is beyond");
    CHECK_OK("kvcorrupt@layer=0,pos=19", &plain);
    CHECK_BAD("kvcorrupt@layer=0,pos=20", &plain, "pos=20 is beyond the context");
    CHECK_OK("nan@step=9", &plain);
    CHECK_OK("nan@step>=9", &plain);
    CHECK_BAD("nan@step=10", &plain, "step=10 is beyond the last step this context allows (9)");
    CHECK_BAD("nan@step>=12", &plain, "step>=12 is beyond");
    CHECK_BAD("crash@step=10", &plain, "step=10 is beyond");
    CHECK_OK("nan@op=attn_k,index=31", &plain);
    CHECK_BAD("nan@op=attn_k,index=32", &plain, "index=32 is past the end of attn_k's rows (32 values)");
    CHECK_OK("nan@op=ffn_up,index=171", &plain);
    CHECK_BAD("nan@op=ffn_up,index=172", &plain, "index=172 is past the end of ffn_up's rows (172 values)");
    CHECK_OK("nan@index=511", &plain);
    CHECK_BAD("nan@index=512", &plain, "index=512 is past the end of every tensor's rows");
    CHECK_OK("nan@count=1000", &plain);              /* count is clipped to the row */
    CHECK_OK("bitflip:tensor=x,index=0,bit=1", &plain); /* checked against the weights */

    /* fired: an activation spec once it changed a value; apply_by names it */
    bt_injector *inj = bt_injector_new();
    CHECK(bt_injector_add(inj, "scale=1@op=ffn_down") == BT_OK);       /* changes nothing */
    CHECK(bt_injector_add(inj, "inf@op=ffn_down,index=2,step=2") == BT_OK);
    CHECK(bt_injector_add(inj, "nan@op=attn_q") == BT_OK);             /* never computed below */
    const char *text = NULL, *by = (const char *)1;
    CHECK(!bt_injector_fired(inj, 0, &text) && text && !strcmp(text, "scale=1@op=ffn_down"));
    bt_tensor_view v = make_view(BT_OP_FFN_DOWN, 1, 1);
    CHECK(bt_injector_apply_by(inj, "target", &v, &by) == 0 && by == NULL);
    v = make_view(BT_OP_FFN_DOWN, 1, 2);
    CHECK(bt_injector_apply_by(inj, "target", &v, &by) == ROWS && by && !strcmp(by, "inf@op=ffn_down,index=2,step=2"));
    CHECK(!bt_injector_fired(inj, 0, NULL));
    CHECK(bt_injector_fired(inj, 1, &text) && !strcmp(text, "inf@op=ffn_down,index=2,step=2"));
    CHECK(!bt_injector_fired(inj, 2, NULL));
    CHECK(!bt_injector_fired(inj, 3, &text) && text == NULL);
    bt_injector_free(inj);
}

/* p=P: a request-seeded draw; over many seeds the active fraction is P,
 * and one seed always draws the same. */
static void test_draw(void)
{
    expect_ok("nan@op=logits,p=0.25");
    expect_ok("longctx@pos>=4,op=attn_k,scale=2,p=0.5");
    expect_bad("nan@p=1.5", "p expects a probability");
    expect_bad("nan@p=x", "p expects a probability");
    expect_bad("nan@p>=0.5", "p takes '='");
    bt_injector *inj = bt_injector_new();
    CHECK(bt_injector_add(inj, "nan@op=logits,p=0.25") == BT_OK);
    int on = 0;
    for (unsigned long long s = 1; s <= 4000; s++) { bt_injector_set_draw(inj, s); on += bt_injector_active(inj); }
    CHECK(on > 880 && on < 1120, "p=0.25 fired on %d of 4000 draws", on);
    bt_injector_set_draw(inj, 77);
    bool a = bt_injector_active(inj);
    bt_injector_set_draw(inj, 78);
    bt_injector_set_draw(inj, 77);
    CHECK(bt_injector_active(inj) == a, "the same seed draws the same");
    bt_injector_free(inj);
}

int main(void)
{
    test_parse();
    test_draw();
    test_apply();
    test_check();

    const char *shared = getenv("BT_SHARED");
    char model[1024], tok[1024];
    snprintf(model, sizeof model, "%s/models/llama2c/stories260K.bin", shared && *shared ? shared : "/work/shared");
    snprintf(tok, sizeof tok, "%s/models/llama2c/tok512.bin", shared && *shared ? shared : "/work/shared");
    if (access(model, R_OK) != 0 || access(tok, R_OK) != 0) {
        if (failures) { fprintf(stderr, "test_inject: %d failure(s)\n", failures); return 1; }
        printf("SKIP: engine checks need %s (set BT_SHARED)\n", model);
        return 77;
    }
    test_kvcorrupt(model, tok);
    test_bitflip(model, tok);
    if (failures) { fprintf(stderr, "test_inject: %d failure(s)\n", failures); return 1; }
    printf("test_inject: all passed\n");
    return 0;
}
