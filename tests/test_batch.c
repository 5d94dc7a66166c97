/* test_batch.c - the batched forward over a paged KV cache
 * (bt_engine_forward_batch) gives every sequence the bits it gets alone.
 *
 * test_batch MODEL [SEED]: six sequences of random tokens, each run alone
 * on a plain engine (its own chunking: a prefill, then one token at a time)
 * and all of them interleaved on a paged engine (a random subset of the
 * sequences per forward, each with a random chunk, prefill and decode rows
 * mixed; blocks of 4 positions taken from a shuffled free list, so a
 * sequence's blocks are scattered and never in order). Every position's
 * logits must be bit-identical. A hybrid model runs each sequence in its
 * own recurrent state slot. The taps of a batched forward must come one
 * view per sequence, with its rows and positions. Bad calls are refused
 * with their codes. */
#include "engine/engine.h"
#include "model/model.h"
#include "kernels/cpu/kernels.h"
#include "base/util.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define NSEQ 6
#define BS 4
#define CTX 96
#define BATCH 48
#ifndef NTH
#define NTH 2
#endif

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (unsigned)(rng % n);
}

typedef struct seq {
    int32_t tok[CTX];
    int len;               /* tokens in all */
    int done;              /* positions computed so far (batched) */
    int32_t blocks[CTX / BS + 1];
    float *ref;            /* (len, n_vocab) alone */
} seq;

typedef struct tapcheck {
    const bt_engine *e;
    const bt_seq_batch *b;
    int n, views, bad;
} tapcheck;

static bool ask(void *u, int op, int layer) { (void)u; (void)layer; return op == BT_OP_ATTN_CTX || op == BT_OP_FFN_RESID; }
static bool observe(void *u, const bt_tensor_view *t)
{
    tapcheck *tc = u;
    int s = bt_engine_batch_seq(tc->e);
    tc->views++;
    if (s < 0 || s >= tc->n || t->rows != tc->b[s].T || t->pos0 != tc->b[s].pos0) tc->bad++;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: test_batch MODEL [SEED]\n"); return 2; }
    if (argc > 2) rng += strtoull(argv[2], NULL, 10) * 0x9E3779B97F4A7C15ull;
    bt_kernels_init();
    bt_model *m = NULL;
    CHECK_OK(bt_model_load(argv[1], NULL, &m));
    if (!m) return 1;
    int nv = m->cfg.n_vocab;
    bool hybrid = (m->cfg.flags & BT_ARCH_HYBRID) != 0;
    bt_engine *solo = NULL, *paged = NULL;
    bt_engine_opts so = { .ctx_len = CTX, .max_batch = BATCH, .n_threads = NTH };
    CHECK_OK(bt_engine_new_opts(m, &so, &solo));
    int n_blocks = NSEQ * (CTX / BS) + 3;
    bt_engine_opts po = { .ctx_len = CTX, .max_batch = BATCH, .n_threads = NTH, .block_size = BS, .n_blocks = n_blocks,
                          .n_slots = NSEQ };
    CHECK_OK(bt_engine_new_opts(m, &po, &paged));
    if (!solo || !paged) return 1;

    /* alone: a prefill of a random length, then a token at a time */
    seq S[NSEQ];
    memset(S, 0, sizeof S);
    bt_engine_set_logits_all(solo, true);
    for (int i = 0; i < NSEQ; i++) {
        S[i].len = 8 + (int)rnd(CTX - 8);
        for (int p = 0; p < S[i].len; p++) S[i].tok[p] = (int32_t)rnd((unsigned)nv);
        S[i].ref = malloc((size_t)S[i].len * nv * sizeof(float));
        int pre = 1 + (int)rnd((unsigned)BT_MIN(S[i].len, BATCH));
        for (int p = 0; p < S[i].len;) {
            int n = p == 0 ? pre : 1;
            CHECK_OK(bt_engine_forward(solo, S[i].tok + p, n, p));
            for (int r = 0; r < n; r++) memcpy(S[i].ref + (size_t)(p + r) * nv, bt_engine_logits_row(solo, r), nv * sizeof(float));
            p += n;
        }
    }

    /* interleaved: blocks from a shuffled free list */
    int32_t *freelist = malloc((size_t)n_blocks * sizeof(int32_t));
    for (int b = 0; b < n_blocks; b++) freelist[b] = b;
    for (int b = n_blocks - 1; b > 0; b--) { int j = (int)rnd((unsigned)b + 1); int32_t t = freelist[b]; freelist[b] = freelist[j]; freelist[j] = t; }
    int nfree = n_blocks;
    long mismatches = 0, rows_checked = 0;
    int forwards = 0, multi = 0, mixed = 0;
    tapcheck tc = { .e = paged };
    bt_eval_cb cb = { .ask = ask, .observe = observe, .user = &tc };
    bt_engine_set_eval_cb(paged, &cb);
    for (;;) {
        bt_seq_batch b[NSEQ];
        int idx[NSEQ], n = 0, rows = 0;
        bool any = false;
        for (int i = 0; i < NSEQ; i++) any |= S[i].done < S[i].len;
        if (!any) break;
        for (int i = 0; i < NSEQ; i++) {
            if (S[i].done >= S[i].len || rnd(3) == 0 || rows >= BATCH) continue;
            int left = S[i].len - S[i].done;
            /* (BT_MIN evaluates its arguments twice: draw first) */
            int cap = BT_MIN(left, BATCH - rows), t = S[i].done == 0 ? 1 + (int)rnd((unsigned)cap) : 1 + (int)rnd(3);
            t = BT_MIN(t, cap);
            for (int k = S[i].done / BS; k <= (S[i].done + t - 1) / BS; k++)
                if (k * BS >= S[i].done) S[i].blocks[k] = freelist[--nfree];
            b[n] = (bt_seq_batch){ .tokens = S[i].tok + S[i].done, .T = t, .pos0 = S[i].done, .blocks = S[i].blocks,
                                   .slot = i, .logits_all = true };
            idx[n++] = i;
            rows += t;
        }
        if (!n) continue;
        tc.b = b; tc.n = n;
        CHECK_OK(bt_engine_forward_batch(paged, b, n));
        forwards++;
        multi += n > 1;
        bool pre = false, dec = false;
        for (int j = 0; j < n; j++) { pre |= b[j].T > 1; dec |= b[j].T == 1; }
        mixed += pre && dec;
        for (int j = 0; j < n; j++) {
            seq *q = &S[idx[j]];
            for (int r = 0; r < b[j].T; r++) {
                const float *got = bt_engine_logits_row(paged, b[j].logit_row - b[j].T + 1 + r);
                rows_checked++;
                if (!got || memcmp(got, q->ref + (size_t)(q->done + r) * nv, nv * sizeof(float))) {
                    if (!mismatches) {
                        float d = 0;
                        for (int v = 0; got && v < nv; v++) d = BT_MAX(d, fabsf(got[v] - q->ref[(size_t)(q->done + r) * nv + v]));
                        fprintf(stderr, "first difference: sequence %d position %d (row %d of a chunk of %d at %d, %d sequences), "
                                "max |diff| %g\n", idx[j], q->done + r, r, b[j].T, b[j].pos0, n, d);
                    }
                    mismatches++;
                }
            }
            q->done += b[j].T;
        }
    }
    CHECK(mismatches == 0, "%ld of %ld rows' logits differ from the sequence alone", mismatches, rows_checked);
    CHECK(multi > 3 && mixed > 0, "the schedule mixed too little (%d forwards, %d batched, %d prefill+decode)", forwards, multi, mixed);
    CHECK(tc.views > 0 && tc.bad == 0, "%d of %d tap views had the wrong sequence, rows or positions", tc.bad, tc.views);
    printf("%s: %ld rows over %d forwards (%d with several sequences, %d mixing prefill and decode)%s: %s\n",
           argv[1], rows_checked, forwards, multi, mixed, hybrid ? ", hybrid state slots" : "",
           mismatches ? "DIFFERENT" : "bit-identical");

    /* bad calls */
    bt_engine_set_eval_cb(paged, NULL);
    bt_seq_batch bad = { .tokens = S[0].tok, .T = 1, .pos0 = 0, .blocks = S[0].blocks };
    CHECK(bt_engine_forward_batch(solo, &bad, 1) == BT_EINVAL, "a batched forward on a plain engine is refused");
    CHECK(bt_engine_forward(paged, S[0].tok, 1, 0) == BT_EINVAL, "a plain forward on a paged engine is refused");
    int32_t oob[2] = { n_blocks, 0 };
    bad.blocks = oob;
    CHECK(bt_engine_forward_batch(paged, &bad, 1) == BT_ERANGE, "a block past the cache is refused");
    bad.blocks = S[0].blocks; bad.slot = NSEQ;
    CHECK(bt_engine_forward_batch(paged, &bad, 1) == BT_ERANGE, "a slot past the slots is refused");
    bad.slot = 0; bad.T = BATCH + 1;
    CHECK(bt_engine_forward_batch(paged, &bad, 1) == BT_EINVAL, "rows past the batch are refused");
    bad.T = 1; bad.pos0 = CTX;
    CHECK(bt_engine_forward_batch(paged, &bad, 1) == BT_ERANGE, "a position past the context is refused");

    for (int i = 0; i < NSEQ; i++) free(S[i].ref);
    free(freelist);
    bt_engine_free(solo);
    bt_engine_free(paged);
    bt_model_free(m);
    return failures ? 1 : 0;
}
