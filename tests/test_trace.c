/* test_trace.c - the trace store: writer -> reader round trip of every
 * table, the v_* views (plain SQL) giving the written values (bf16-rounded
 * for packed statistics, exact for tap_bad), v_first_nonfinite, the crash
 * close, bad files (missing, empty, random bytes, text, truncated, foreign
 * SQLite, newer schema, damaged pages) giving one-line errors and never a
 * crash, and the size of a 1,000-step decode of a 30-layer model. */
#include "sys/outfile.h"
#include "trace/reader.h"
#include "trace/trace.h"
#include "base/util.h"
#include "check.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK_NEAR(a, b) do { double a_ = (a), b_ = (b); if (!(a_ == b_ || (isnan(a_) && isnan(b_)))) { failures++; \
    fprintf(stderr, "%s:%d: FAIL: %s = %.9g, want %.9g\n", __FILE__, __LINE__, #a, a_, b_); } } while (0)

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int i;
    char *p = buf[i++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(99); }
    fputs(text, f);
    fclose(f);
}

/* ---- a small synthetic model: 2 layers, 13 ops each ---- */

static const char *const ops[13] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_ctx", "attn_output",
                                     "attn_resid", "ffn_norm", "ffn_gate", "ffn_up", "ffn_act", "ffn_down", "ffn_resid" };

/* Register token_embd, n_layer x 13 ops, output_norm, logits; returns count. */
static int register_tensors(bt_trace *t, int n_layer, int dim, int n_vocab)
{
    int idx = 0;
    CHECK_OK(bt_trace_tensor(t, "target", idx++, "token_embd", -1, "token_embd", dim));
    for (int l = 0; l < n_layer; l++)
        for (int o = 0; o < 13; o++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, ops[o]);
            CHECK_OK(bt_trace_tensor(t, "target", idx++, name, l, ops[o], dim));
        }
    CHECK_OK(bt_trace_tensor(t, "target", idx++, "output_norm", -1, "output_norm", dim));
    CHECK_OK(bt_trace_tensor(t, "target", idx++, "logits", -1, "logits", n_vocab));
    return idx;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)   /* in [-1, 1) */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24) * 2 - 1);
}

static bt_tap_stats fake_stats(int width, int n_pos, float scale)
{
    bt_tap_stats s = { 0 };
    s.n = s.n_finite = (int64_t)width * n_pos;
    s.min = -scale * (1 + frand() * 0.5f);
    s.max = scale * (1 + frand() * 0.5f);
    s.absmax = fmaxf(-s.min, s.max);
    s.mean = scale * frand() * 0.1f;
    s.rms = scale * (0.3f + frand() * 0.1f);
    s.first_bad_index = s.first_bad_pos = -1;
    return s;
}

/* ---- round trip ---- */

#define N_LAYER 2
#define DIM 16
#define N_VOCAB 100
#define N_STEPS 6
#define BAD_STEP 3
#define BAD_IDX (1 + 13 * 1 + 8)   /* blk.1.ffn_gate */

static bt_tap_stats written[N_STEPS][64];
static float row_f16[N_VOCAB], row_f32[N_VOCAB];
static const char piece_esc[] = "\x1b[31mred\0zero";   /* ESC sequence and an embedded NUL */

static void write_roundtrip(const char *path)
{
    bt_trace *t;
    CHECK_OK(bt_trace_create(path, &t));
    if (!t) exit(99);
    CHECK_OK(bt_trace_meta(t, "model_path", "/models/x.gguf"));
    CHECK_OK(bt_trace_meta(t, "argv", "[\"bangtrace\",\"run\",\"--prompt\",\"hello\"]"));
    CHECK_OK(bt_trace_meta(t, "model_path", "/models/y.gguf"));   /* replaces */
    int nt = register_tensors(t, N_LAYER, DIM, N_VOCAB);
    CHECK(nt == 1 + 13 * N_LAYER + 2);
    /* prompt tokens, outside any step */
    CHECK_OK(bt_trace_token(t, 0, 0, 1, "<s>", 3, "prompt", NAN, NULL));
    CHECK_OK(bt_trace_token(t, 0, 1, 42, " hello", 6, "prompt", NAN, NULL));
    for (int s = 0; s < N_STEPS; s++) {
        int n_pos = s == 0 ? 2 : 1, pos0 = s == 0 ? 0 : s + 1;
        CHECK_OK(bt_trace_step_begin(t, s, "target", s == 0 ? "prefill" : "decode", pos0, n_pos));
        /* taps in reverse order: the writer must place them by slot */
        for (int i = nt - 1; i >= 0; i--) {
            if (s == 1 && i == 5) continue;   /* a slot left without stats: reads as "none" */
            bt_tap_stats st = fake_stats(i == nt - 1 ? N_VOCAB : DIM, n_pos, 1.0f + i);
            if (s == BAD_STEP && i >= BAD_IDX) {   /* NaN from blk.1.ffn_gate on */
                st.nan = i == BAD_IDX ? 1 : 3;
                st.pinf = i == nt - 1 ? 2 : 0;
                st.n_finite = st.n - st.nan - st.pinf;
                st.first_bad_index = i == BAD_IDX ? 5 : 0;
                st.first_bad_pos = pos0;
                st.mean = 0.123456789f;   /* full precision survives in tap_bad */
            }
            if (s == 4 && i == 2) {   /* a tensor with no finite value at all */
                st.nan = st.n; st.n_finite = 0;
                st.min = st.max = st.absmax = st.mean = st.rms = NAN;
                st.first_bad_index = 0; st.first_bad_pos = pos0;
            }
            written[s][i] = st;
            CHECK_OK(bt_trace_tap(t, i, &st));
        }
        bt_logit_summary ls = { .n_vocab = N_VOCAB, .max = 7.25f, .argmax_first = 7, .argmax_torch = 7,
                                .argmax_triton = 7, .entropy = 1.5, .k = 3 };
        ls.topk_ids[0] = 7; ls.topk_ids[1] = 3; ls.topk_ids[2] = 99;
        ls.topk_vals[0] = 7.25f; ls.topk_vals[1] = 0.1f; ls.topk_vals[2] = -1e-7f;
        if (s == BAD_STEP) { ls.nan = N_VOCAB; ls.max = NAN; ls.entropy = NAN; ls.k = 0; ls.argmax_first = 0; }
        CHECK_OK(bt_trace_logits(t, pos0 + n_pos - 1, &ls, "first", s == BAD_STEP ? 0 : 7));
        if (s == BAD_STEP) {
            for (int i = 0; i < N_VOCAB; i++) row_f16[i] = i == 4 ? NAN : i == 5 ? INFINITY : (i - 50) * 0.37f;
            CHECK_OK(bt_trace_logit_row(t, s, pos0, row_f16, N_VOCAB, "first_nonfinite", false));
            int64_t ev;
            CHECK_OK(bt_trace_event(t, s, pos0, "first_nonfinite", 1, "ffn_gate", "blk.1.ffn_gate",
                                    "1 NaN of 16 at index 5", &ev));
            CHECK(ev > 0);
            CHECK_OK(bt_trace_backtrace(t, ev, s, "first_nonfinite", "#0 0x1 f+0x2 (bangtrace)\n#1 0x3 main+0x4 (bangtrace)"));
        }
        if (s == 4) {
            for (int i = 0; i < N_VOCAB; i++) row_f32[i] = i == 0 ? -INFINITY : 1.0f / (i + 3);
            CHECK_OK(bt_trace_logit_row(t, s, pos0, row_f32, N_VOCAB, "full", true));
        }
        if (s == 2) CHECK_OK(bt_trace_token(t, s, pos0, 5, piece_esc, sizeof piece_esc - 1, "gen", -0.5, NULL));
        else CHECK_OK(bt_trace_token(t, s, pos0, s == BAD_STEP ? 0 : 7, "ab", 2, "gen", s == BAD_STEP ? NAN : -0.25, NULL));
        CHECK_OK(bt_trace_step_end(t, 1.5 + s));
    }
    CHECK_OK(bt_trace_event(t, 5, 6, "token_wall", -1, NULL, NULL, "token 7 (`ab`) 8 times", NULL));
    CHECK_OK(bt_trace_finish_reason(t, "length"));
    CHECK_OK(bt_trace_close(t, "ok"));
    CHECK(access(tmp_path("rt.db-wal"), F_OK) != 0);   /* closed: one self-contained file */
}

static int count_cb(void *user, const bt_trace_tap_row *tap)
{
    int *n = user;
    if (*n == 0) CHECK(tap->step == BAD_STEP && tap->idx == BAD_IDX);
    (*n)++;
    return 0;
}

typedef struct { int n; int64_t seq[16]; int32_t id[16]; size_t len[16]; bool esc_ok; const char *fin; } tok_acc;
static int tok_cb(void *user, const bt_trace_token_row *tok)
{
    tok_acc *a = user;
    if (a->n < 16) { a->seq[a->n] = tok->seq; a->id[a->n] = tok->id; a->len[a->n] = tok->piece_len; }
    if (tok->piece_len == sizeof piece_esc - 1 && !memcmp(tok->piece, piece_esc, tok->piece_len)) a->esc_ok = true;
    if (tok->finish_reason) a->fin = "x";
    a->n++;
    return 0;
}

typedef struct { int n; char kinds[8][32]; } ev_acc;
static int ev_cb(void *user, const bt_trace_event_row *ev)
{
    ev_acc *a = user;
    if (a->n < 8) snprintf(a->kinds[a->n], 32, "%s", ev->kind);
    a->n++;
    return 0;
}

static int bt_cb(void *user, const bt_trace_backtrace_row *b)
{
    int *n = user;
    CHECK(!strcmp(b->kind, "first_nonfinite") && b->step == BAD_STEP && b->event_id > 0);
    CHECK(strstr(b->frames, "main+0x4") != NULL);
    (*n)++;
    return 0;
}

static void check_taps(bt_trace_reader *r)
{
    for (int s = 0; s < N_STEPS; s++) {
        bt_trace_tap_row *taps;
        int n;
        CHECK_OK(bt_trace_step_taps(r, s, &taps, &n));
        CHECK(n == 1 + 13 * N_LAYER + 2);
        for (int i = 0; i < n; i++) {
            const bt_tap_stats *w = &written[s][i];
            const bt_trace_tap_row *g = &taps[i];
            CHECK(g->idx == i && g->step == s);
            CHECK(g->n == (int64_t)(s == 0 ? 2 : 1) * (i == n - 1 ? N_VOCAB : DIM));
            if (s == 1 && i == 5) { CHECK(!g->recorded); CHECK(isnan(g->min)); continue; }
            CHECK(g->recorded);
            if (bt_stats_bad(w)) {   /* tap_bad: full precision */
                CHECK(g->nan == w->nan && g->pinf == w->pinf && g->ninf == w->ninf);
                CHECK(g->first_bad_index == w->first_bad_index && g->first_bad_pos == w->first_bad_pos);
                CHECK_NEAR(g->mean, (double)w->mean);
                CHECK_NEAR(g->min, (double)w->min);
            } else {
                CHECK(g->nan == 0 && g->first_bad_index == -1);
                CHECK_NEAR(g->min, bt_bf16_round(w->min));
                CHECK_NEAR(g->max, bt_bf16_round(w->max));
                CHECK_NEAR(g->mean, bt_bf16_round(w->mean));
                CHECK_NEAR(g->rms, bt_bf16_round(w->rms));
                CHECK_NEAR(g->absmax, fmax(fabs(bt_bf16_round(w->min)), fabs(bt_bf16_round(w->max))));
            }
        }
        if (s == 0) {
            CHECK(!strcmp(taps[0].name, "token_embd") && taps[0].layer == -1);
            CHECK(!strcmp(taps[BAD_IDX].name, "blk.1.ffn_gate") && taps[BAD_IDX].layer == 1 && !strcmp(taps[BAD_IDX].op, "ffn_gate"));
        }
        free(taps);
    }
    bt_trace_tap_row *taps;
    int n;
    CHECK(bt_trace_step_taps(r, 99, &taps, &n) == BT_ENOTFOUND);
}

static int series_cb(void *user, const bt_trace_tap_row *tap)
{
    int *n = user;
    CHECK(tap->idx == 7);
    if (!bt_stats_bad(&written[tap->step][7])) CHECK_NEAR(tap->max, bt_bf16_round(written[tap->step][7].max));
    (*n)++;
    return 0;
}

static void read_roundtrip(const char *path)
{
    bt_trace_reader *r;
    CHECK_OK(bt_trace_open(path, &r));
    if (!r) return;
    CHECK(!strcmp(bt_trace_reader_path(r), path));
    /* meta */
    CHECK(bt_trace_meta_get(r, "tool_version") != NULL);
    CHECK(bt_trace_meta_get(r, "schema_version") && !strcmp(bt_trace_meta_get(r, "schema_version"), "1"));
    CHECK(bt_trace_meta_get(r, "started_at") && strlen(bt_trace_meta_get(r, "started_at")) == 20);
    CHECK(bt_trace_meta_get(r, "finished_at") != NULL);
    CHECK(bt_trace_meta_get(r, "status") && !strcmp(bt_trace_meta_get(r, "status"), "ok"));
    CHECK(bt_trace_meta_get(r, "model_path") && !strcmp(bt_trace_meta_get(r, "model_path"), "/models/y.gguf"));
    CHECK(bt_trace_meta_get(r, "nope") == NULL);
    /* summary */
    bt_trace_summary sum;
    CHECK_OK(bt_trace_summary_get(r, &sum));
    CHECK(sum.n_steps == N_STEPS && sum.first_step == 0 && sum.last_step == N_STEPS - 1);
    CHECK(sum.n_tokens == 2 + N_STEPS && sum.n_prompt_tokens == 2);
    CHECK(sum.n_events == 2 && sum.first_bad_step == BAD_STEP && sum.first_bad_logits_step == BAD_STEP);
    CHECK(sum.n_tensors == 1 + 13 * N_LAYER + 2);
    /* tensors */
    const bt_trace_tensor_row *tens;
    int nt;
    CHECK_OK(bt_trace_tensors(r, NULL, &tens, &nt));
    CHECK(nt == sum.n_tensors && tens[nt - 1].width == N_VOCAB && !strcmp(tens[nt - 1].name, "logits"));
    CHECK(bt_trace_tensor_find(r, NULL, "blk.1.ffn_gate") == BAD_IDX);
    CHECK(bt_trace_tensor_find(r, "draft", "blk.1.ffn_gate") == -1);
    /* steps */
    bt_trace_step_row st[8];
    int n;
    CHECK_OK(bt_trace_steps(r, 2, 8, st, &n));
    CHECK(n == N_STEPS - 2 && st[0].step == 2 && !strcmp(st[0].kind, "decode") && st[0].pos0 == 3 && st[0].n_pos == 1);
    CHECK_NEAR(st[0].ms, 3.5);
    CHECK_OK(bt_trace_step_get(r, 0, &st[0]));
    CHECK(!strcmp(st[0].kind, "prefill") && st[0].n_pos == 2 && !strcmp(st[0].model, "target"));
    CHECK(bt_trace_step_get(r, 77, &st[0]) == BT_ENOTFOUND);
    check_taps(r);
    int ns = 0;
    CHECK_OK(bt_trace_tap_series(r, 7, 1, 4, series_cb, &ns));
    CHECK(ns == 4);
    /* first non-finite and propagation */
    bt_trace_tap_row fb;
    bool found;
    CHECK_OK(bt_trace_first_nonfinite(r, &fb, &found));
    CHECK(found && fb.step == BAD_STEP && fb.idx == BAD_IDX && fb.layer == 1 && !strcmp(fb.op, "ffn_gate"));
    CHECK(fb.first_bad_index == 5 && fb.first_bad_pos == BAD_STEP + 1 && fb.nan == 1 && fb.n == DIM);
    int nb = 0;
    CHECK_OK(bt_trace_bad_each(r, 0, count_cb, &nb));
    CHECK(nb == (1 + 13 * N_LAYER + 2 - BAD_IDX) + 1);   /* step 3 from ffn_gate on, plus step 4 slot 2 */
    /* tokens */
    tok_acc ta = { 0 };
    CHECK_OK(bt_trace_tokens_each(r, 0, 0, tok_cb, &ta));
    CHECK(ta.n == 2 + N_STEPS && ta.id[1] == 42 && ta.esc_ok && ta.fin);
    tok_acc tb = { 0 };
    CHECK_OK(bt_trace_tokens_of_steps(r, 2, 3, tok_cb, &tb));
    CHECK(tb.n == 2 && tb.esc_ok && tb.len[0] == sizeof piece_esc - 1);
    tok_acc tc = { 0 };
    CHECK_OK(bt_trace_tokens_each(r, ta.seq[3], 2, tok_cb, &tc));
    CHECK(tc.n == 2 && tc.seq[0] == ta.seq[3]);
    /* logits */
    bt_trace_logits_row lg[4];
    CHECK_OK(bt_trace_step_logits(r, 1, lg, 4, &n));
    CHECK(n == 1 && lg[0].n_vocab == N_VOCAB && lg[0].k == 3 && lg[0].topk_ids[2] == 99 && lg[0].chosen == 7);
    CHECK(lg[0].topk_vals[0] == 7.25f && lg[0].topk_vals[1] == 0.1f && lg[0].topk_vals[2] == -1e-7f);
    CHECK(!strcmp(lg[0].rule, "first") && !lg[0].has_row);
    CHECK_NEAR(lg[0].entropy, 1.5);
    CHECK_OK(bt_trace_first_bad_logits(r, &lg[0], &found));
    CHECK(found && lg[0].step == BAD_STEP && lg[0].nan == N_VOCAB && isnan(lg[0].max) && isnan(lg[0].entropy) && lg[0].has_row);
    /* full rows: f16 rounding (NaN, Inf kept), f32 exact */
    float *row;
    char reason[32];
    CHECK_OK(bt_trace_logit_row_get(r, BAD_STEP, BAD_STEP + 1, &row, &n, reason));
    CHECK(n == N_VOCAB && !strcmp(reason, "first_nonfinite"));
    for (int i = 0; row && i < n; i++) CHECK_NEAR(row[i], bt_f16_to_f32(bt_f32_to_f16(row_f16[i])));
    CHECK(row && isnan(row[4]) && isinf(row[5]));
    free(row);
    CHECK_OK(bt_trace_logit_row_get(r, 4, 5, &row, &n, NULL));
    for (int i = 0; row && i < n; i++) CHECK_NEAR(row[i], row_f32[i]);
    free(row);
    CHECK(bt_trace_logit_row_get(r, 1, 2, &row, &n, NULL) == BT_ENOTFOUND && row == NULL);
    /* events, backtraces */
    ev_acc ea = { 0 };
    CHECK_OK(bt_trace_events_each(r, NULL, ev_cb, &ea));
    CHECK(ea.n == 2 && !strcmp(ea.kinds[0], "first_nonfinite") && !strcmp(ea.kinds[1], "token_wall"));
    ev_acc eb = { 0 };
    CHECK_OK(bt_trace_events_each(r, "token_wall", ev_cb, &eb));
    CHECK(eb.n == 1);
    int nbt = 0;
    CHECK_OK(bt_trace_backtraces_each(r, bt_cb, &nbt));
    CHECK(nbt == 1);
    bt_trace_reader_close(r);
}

/* ---- the views, through plain SQLite ---- */

static sqlite3_stmt *q1(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
        failures++;
        fprintf(stderr, "FAIL: %s: %s\n", sql, sqlite3_errmsg(db));
        return NULL;
    }
    if (sqlite3_step(s) != SQLITE_ROW) { sqlite3_finalize(s); return NULL; }
    return s;
}

static void check_views(const char *path)
{
    sqlite3 *db;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    char sql[512];
    /* every packed statistic of every step decodes to the bf16-rounded value */
    int rows = 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT step, idx, min, max, mean, rms, absmax, nan, layer, n FROM v_taps", -1, &s, NULL) == SQLITE_OK) {
        while (sqlite3_step(s) == SQLITE_ROW) {
            int st = sqlite3_column_int(s, 0), i = sqlite3_column_int(s, 1);
            const bt_tap_stats *w = &written[st][i];
            rows++;
            if (st == 1 && i == 5) { CHECK(sqlite3_column_type(s, 2) == SQLITE_NULL); continue; }
            if (bt_stats_bad(w)) {
                CHECK(sqlite3_column_int64(s, 7) == w->nan);
                if (isfinite(w->mean)) CHECK_NEAR(sqlite3_column_double(s, 4), (double)w->mean);
                else CHECK(sqlite3_column_type(s, 4) == SQLITE_NULL);
                continue;
            }
            CHECK_NEAR(sqlite3_column_double(s, 2), bt_bf16_round(w->min));
            CHECK_NEAR(sqlite3_column_double(s, 3), bt_bf16_round(w->max));
            CHECK_NEAR(sqlite3_column_double(s, 4), bt_bf16_round(w->mean));
            CHECK_NEAR(sqlite3_column_double(s, 5), bt_bf16_round(w->rms));
            CHECK_NEAR(sqlite3_column_double(s, 6), fmax(fabs(bt_bf16_round(w->min)), fabs(bt_bf16_round(w->max))));
            CHECK(sqlite3_column_int(s, 7) == 0);
        }
        sqlite3_finalize(s);
    }
    CHECK(rows == N_STEPS * (1 + 13 * N_LAYER + 2));
    if ((s = q1(db, "SELECT layer, n FROM v_taps WHERE step = 0 AND tensor = 'token_embd'"))) {
        CHECK(sqlite3_column_type(s, 0) == SQLITE_NULL && sqlite3_column_int(s, 1) == 2 * DIM);
        sqlite3_finalize(s);
    } else CHECK(!"v_taps token_embd row");
    if ((s = q1(db, "SELECT step, pos, layer, op, tensor, first_bad_index, nan, pinf, ninf, (SELECT count(*) FROM v_first_nonfinite) FROM v_first_nonfinite"))) {
        CHECK(sqlite3_column_int(s, 0) == BAD_STEP && sqlite3_column_int(s, 1) == BAD_STEP + 1);
        CHECK(sqlite3_column_int(s, 2) == 1 && !strcmp((const char *)sqlite3_column_text(s, 3), "ffn_gate"));
        CHECK(!strcmp((const char *)sqlite3_column_text(s, 4), "blk.1.ffn_gate") && sqlite3_column_int(s, 5) == 5);
        CHECK(sqlite3_column_int(s, 6) == 1 && sqlite3_column_int(s, 7) == 0 && sqlite3_column_int(s, 9) == 1);
        sqlite3_finalize(s);
    } else CHECK(!"v_first_nonfinite has a row");
    if ((s = q1(db, "SELECT count(*), sum(role = 'prompt'), max(token_id) FROM v_tokens"))) {
        CHECK(sqlite3_column_int(s, 0) == 2 + N_STEPS && sqlite3_column_int(s, 1) == 2 && sqlite3_column_int(s, 2) == 42);
        sqlite3_finalize(s);
    }
    snprintf(sql, sizeof sql, "SELECT n_vocab, nan, topk_ids, argmax_first FROM v_logits WHERE step = %d", BAD_STEP);
    if ((s = q1(db, sql))) {
        CHECK(sqlite3_column_int(s, 0) == N_VOCAB && sqlite3_column_int(s, 1) == N_VOCAB);
        CHECK(!strcmp((const char *)sqlite3_column_text(s, 2), "[]") && sqlite3_column_int(s, 3) == 0);
        sqlite3_finalize(s);
    }
    if ((s = q1(db, "SELECT topk_ids, topk_vals FROM v_logits WHERE step = 1"))) {
        CHECK(!strcmp((const char *)sqlite3_column_text(s, 0), "[7,3,99]"));
        CHECK(!strcmp((const char *)sqlite3_column_text(s, 1), "[7.25,0.1,-1e-07]"));
        sqlite3_finalize(s);
    }
    if ((s = q1(db, "SELECT step, pos, kind, layer, op, detail FROM v_events LIMIT 1"))) {
        CHECK(sqlite3_column_int(s, 0) == BAD_STEP && !strcmp((const char *)sqlite3_column_text(s, 2), "first_nonfinite"));
        sqlite3_finalize(s);
    }
    if ((s = q1(db, "PRAGMA application_id"))) { CHECK(sqlite3_column_int(s, 0) == BT_TRACE_APPLICATION_ID); sqlite3_finalize(s); }
    if ((s = q1(db, "PRAGMA user_version"))) { CHECK(sqlite3_column_int(s, 0) == BT_TRACE_SCHEMA_VERSION); sqlite3_finalize(s); }
    if ((s = q1(db, "PRAGMA journal_mode"))) { CHECK(!strcmp((const char *)sqlite3_column_text(s, 0), "delete")); sqlite3_finalize(s); }
    /* the hot queries use indexes, never a scan of the big tables */
    static const char *const plans[] = {
        "SELECT stats FROM tap_blobs WHERE step = 3",
        "SELECT * FROM tap_bad WHERE step >= 3 ORDER BY step, model, idx",
        "SELECT min(step) FROM logits WHERE nan + pinf + ninf > 0",
        "SELECT * FROM tokens WHERE step BETWEEN 2 AND 3",
        "SELECT * FROM events WHERE kind = 'token_wall' ORDER BY step, id",
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(plans); i++) {
        snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", plans[i]);
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) { CHECK(!"explain"); continue; }
        while (sqlite3_step(s) == SQLITE_ROW) {
            const char *d = (const char *)sqlite3_column_text(s, 3);
            if (d && !strncmp(d, "SCAN", 4) && !strstr(d, "USING")) {
                failures++;
                fprintf(stderr, "FAIL: full scan in '%s': %s\n", plans[i], d);
            }
        }
        sqlite3_finalize(s);
    }
    sqlite3_close(db);
}

/* ---- writer misuse ---- */

static void check_writer_errors(void)
{
    bt_trace *t;
    int rc = bt_trace_create("/nonexistent-dir/x.db", &t);
    CHECK(rc == BT_EIO && t == NULL && strstr(bt_errmsg(), "/nonexistent-dir/x.db"));
    CHECK_OK(bt_trace_create(tmp_path("err.db"), &t));
    if (!t) return;
    register_tensors(t, 1, 4, 10);
    bt_tap_stats st = fake_stats(4, 1, 1);
    CHECK(bt_trace_tap(t, 0, &st) == BT_EINVAL);              /* outside a step */
    CHECK(bt_trace_step_end(t, 1) == BT_EINVAL);
    CHECK_OK(bt_trace_step_begin(t, 0, NULL, "prefill", 0, 1));
    CHECK(bt_trace_step_begin(t, 1, NULL, "decode", 1, 1) == BT_EINVAL);
    CHECK(bt_trace_tap(t, 99, &st) == BT_ERANGE && strstr(bt_errmsg(), "99"));
    CHECK(bt_trace_tap(t, -1, &st) == BT_ERANGE);
    CHECK(bt_trace_tensor(t, NULL, 20, "late", -1, "late", 4) == BT_EINVAL);
    CHECK_OK(bt_trace_step_end(t, 1));
    CHECK(bt_trace_event(t, 0, 0, NULL, -1, NULL, NULL, NULL, NULL) == BT_EINVAL);
    /* a batch of rows: not inside a step, no step inside it; ended without
     * ok, its rows are gone; ended with ok, they are there (checked below) */
    CHECK(bt_trace_batch_end(t, true) == BT_EINVAL);
    CHECK_OK(bt_trace_batch_begin(t));
    CHECK(bt_trace_batch_begin(t) == BT_EINVAL);
    CHECK(bt_trace_step_begin(t, 1, NULL, "decode", 1, 1) == BT_EINVAL);
    CHECK_OK(bt_trace_tensor(t, "draft", 0, "rolled_back", -1, "rolled_back", 4));
    CHECK_OK(bt_trace_batch_end(t, false));
    CHECK_OK(bt_trace_batch_begin(t));
    CHECK_OK(bt_trace_tensor(t, "draft", 0, "kept", -1, "kept", 4));
    CHECK_OK(bt_trace_batch_end(t, true));
    CHECK_OK(bt_trace_step_begin(t, 2, NULL, "decode", 2, 1));
    CHECK(bt_trace_batch_begin(t) == BT_EINVAL);
    CHECK_OK(bt_trace_step_end(t, 1));
    /* close with an open step commits it */
    CHECK_OK(bt_trace_step_begin(t, 3, NULL, "decode", 3, 1));
    CHECK_OK(bt_trace_tap(t, 0, &st));
    CHECK_OK(bt_trace_close(t, "error"));
    CHECK_OK(bt_trace_close(NULL, "ok"));
    bt_trace_reader *r;
    CHECK_OK(bt_trace_open(tmp_path("err.db"), &r));
    bt_trace_step_row sr;
    if (r) {
        CHECK_OK(bt_trace_step_get(r, 3, &sr));
        CHECK(isnan(sr.ms));
        CHECK(!strcmp(bt_trace_meta_get(r, "status"), "error"));
        const bt_trace_tensor_row *tr = NULL;
        int ntr = 0;
        CHECK_OK(bt_trace_tensors(r, "draft", &tr, &ntr));
        CHECK(ntr == 1 && tr && !strcmp(tr[0].name, "kept"));
        bt_trace_reader_close(r);
    }
    /* an existing trace is never replaced without BT_TRACE_FORCE ... */
    CHECK(bt_trace_create(tmp_path("err.db"), &t) == BT_EINVAL && t == NULL && strstr(bt_errmsg(), "--force"));
    CHECK_OK(bt_trace_open(tmp_path("err.db"), &r));
    if (r) { CHECK_OK(bt_trace_step_get(r, 3, &sr)); bt_trace_reader_close(r); }
    /* ... and is with it */
    CHECK_OK(bt_trace_create_opts(tmp_path("err.db"), BT_TRACE_FORCE, &t));
    /* while a writer has it, nobody else may write or replace it */
    bt_trace *t2 = NULL;
    CHECK(bt_trace_create_opts(tmp_path("err.db"), BT_TRACE_FORCE, &t2) == BT_EINVAL && !t2 &&
          strstr(bt_errmsg(), "another bangtrace process is writing"));
    CHECK(bt_outfile_locked(tmp_path("err.db")) == 1);
    CHECK_OK(bt_trace_close(t, "ok"));
    CHECK(bt_outfile_locked(tmp_path("err.db")) == 0);
    CHECK_OK(bt_trace_open(tmp_path("err.db"), &r));
    if (r) { CHECK(bt_trace_step_get(r, 1, &sr) == BT_ENOTFOUND); bt_trace_reader_close(r); }
    /* a new trace is private (it holds the prompt) and closes as one file */
    struct stat fs;
    CHECK(stat(tmp_path("err.db"), &fs) == 0 && (fs.st_mode & 0777) == 0600);
    CHECK(stat(tmp_path("err.db-wal"), &fs) != 0 && stat(tmp_path("err.db-shm"), &fs) != 0);
    /* a file that is not a trace is never replaced, --force or not */
    write_text(tmp_path("notes.txt"), "keep me\n");
    CHECK(bt_trace_create_opts(tmp_path("notes.txt"), BT_TRACE_FORCE, &t) == BT_EINVAL && !t &&
          strstr(bt_errmsg(), "not a bangtrace trace"));
    CHECK(stat(tmp_path("notes.txt"), &fs) == 0 && fs.st_size == 8);
    /* nor a link to a trace */
    CHECK(symlink(tmp_path("err.db"), tmp_path("link.db")) == 0);
    CHECK(bt_trace_create_opts(tmp_path("link.db"), BT_TRACE_FORCE, &t) == BT_EINVAL && !t &&
          strstr(bt_errmsg(), "symbolic link"));
    /* the outfile rule: an output is never one of the inputs (a hard link counts) */
    CHECK(link(tmp_path("notes.txt"), tmp_path("hard.txt")) == 0);
    bt_out_input in[] = { { "--model", tmp_path("notes.txt") } };
    CHECK(bt_outfile_check(tmp_path("hard.txt"), BT_OUT_TEXT, true, in, 1, NULL) == BT_EINVAL &&
          strstr(bt_errmsg(), "--model"));
    bool exists = false;
    CHECK_OK(bt_outfile_check(tmp_path("new.md"), BT_OUT_TEXT, false, in, 1, &exists));
    CHECK(!exists);
    CHECK(bt_outfile_check(tmp_path("notes.txt"), BT_OUT_TEXT, false, NULL, 0, NULL) == BT_EINVAL);
    CHECK_OK(bt_outfile_check(tmp_path("notes.txt"), BT_OUT_TEXT, true, NULL, 0, &exists));
    CHECK(exists);
    CHECK(bt_outfile_check(tmp_path("err.db"), BT_OUT_TEXT, true, NULL, 0, NULL) == BT_EINVAL);
    CHECK(bt_outfile_check("/dev/null", BT_OUT_TRACE, true, NULL, 0, NULL) == BT_EINVAL &&
          strstr(bt_errmsg(), "character device"));
}

/* ---- the crash close: the open step and status 'crashed' are committed ---- */

/* Grouped commits: step_end commits once the interval has passed since the
 * last commit; flush and close commit the rest. A reader on another
 * connection sees exactly the committed steps. */
static int64_t live_steps(const char *path)
{
    bt_trace_reader *r;
    bt_trace_summary sum = { .n_steps = -1 };
    if (bt_trace_open(path, &r) == BT_OK) { bt_trace_summary_get(r, &sum); bt_trace_reader_close(r); }
    return sum.n_steps;
}

static void check_grouped_commits(void)
{
    const char *path = tmp_path("group.db");
    bt_trace *t;
    CHECK_OK(bt_trace_create(path, &t));
    if (!t) return;
    register_tensors(t, 1, 4, 10);
    CHECK(bt_trace_last_committed(t) == -1);
    bt_trace_commit_every(t, 3600 * 1000);
    for (int s = 0; s < 3; s++) {
        CHECK_OK(bt_trace_step_begin(t, s, NULL, "decode", s, 1));
        CHECK_OK(bt_trace_step_end(t, 1));
    }
    /* the first step commits at once (a watcher sees it), the rest wait */
    CHECK(bt_trace_last_committed(t) == 0 && live_steps(path) == 1);
    CHECK_OK(bt_trace_flush(t));
    CHECK(bt_trace_last_committed(t) == 2 && live_steps(path) == 3);
    CHECK_OK(bt_trace_flush(t));   /* nothing open: a no-op */
    /* interval 0: every step commits at its end */
    bt_trace_commit_every(t, 0);
    CHECK_OK(bt_trace_step_begin(t, 3, NULL, "decode", 3, 1));
    CHECK(bt_trace_flush(t) == BT_EINVAL);   /* not inside a step */
    CHECK_OK(bt_trace_step_end(t, 1));
    CHECK(bt_trace_last_committed(t) == 3 && live_steps(path) == 4);
    /* a batch commits the open group before its own transaction */
    bt_trace_commit_every(t, 3600 * 1000);
    CHECK_OK(bt_trace_step_begin(t, 4, NULL, "decode", 4, 1));
    CHECK_OK(bt_trace_step_end(t, 1));
    CHECK(live_steps(path) == 4);
    CHECK_OK(bt_trace_batch_begin(t));
    CHECK(bt_trace_last_committed(t) == 4 && live_steps(path) == 5);
    CHECK_OK(bt_trace_batch_end(t, true));
    /* kv_access rows (a served request's, written after its steps) with a
     * group open: the group commits first, then the rows (it was refused:
     * "cannot start a transaction within a transaction") */
    CHECK_OK(bt_trace_step_begin(t, 5, NULL, "decode", 5, 1));
    CHECK_OK(bt_trace_step_end(t, 1));
    bt_kv_access ka = { .step = 5, .server_step = 9, .block = 2, .logical = 0, .mode = "read", .pos_lo = 0,
                        .pos_hi = 15, .writer_step = -1, .bad_step = -1 };
    CHECK_OK(bt_trace_kv_access(t, &ka, 1));
    CHECK(bt_trace_last_committed(t) == 5 && live_steps(path) == 6);
    /* close commits an open group */
    CHECK_OK(bt_trace_step_begin(t, 6, NULL, "decode", 6, 1));
    CHECK_OK(bt_trace_step_end(t, 1));
    CHECK_OK(bt_trace_close(t, "ok"));
    CHECK(live_steps(path) == 7);
}

static void check_crash_close(void)
{
    const char *path = tmp_path("crash.db");
    bt_trace *t;
    CHECK_OK(bt_trace_create(path, &t));
    if (!t) return;
    register_tensors(t, 1, 4, 10);
    bt_trace_commit_every(t, 3600 * 1000);   /* step 1 stays in the open group (step 0 commits at once): the crash commits it */
    for (int s = 0; s < 3; s++) {
        CHECK_OK(bt_trace_step_begin(t, s, NULL, "decode", s, 1));
        bt_tap_stats st = fake_stats(4, 1, 1);
        CHECK_OK(bt_trace_tap(t, 3, &st));
        if (s < 2) CHECK_OK(bt_trace_step_end(t, 1));
    }
    CHECK_OK(bt_trace_event(t, 2, 2, "crash", -1, NULL, NULL, "fatal signal SIGSEGV", NULL));
    bt_trace_crash_close(t);
    bt_trace_crash_close(t);   /* once only */
    /* one self-contained file: a copy of the .db alone holds every step */
    char side[600];
    struct stat st;
    snprintf(side, sizeof side, "%s-wal", path);
    CHECK(stat(side, &st) != 0);
    snprintf(side, sizeof side, "%s-shm", path);
    CHECK(stat(side, &st) != 0);
    /* the process would die here: read the file as it is, WAL and all */
    bt_trace_reader *r;
    CHECK_OK(bt_trace_open(path, &r));
    if (r) {
        CHECK(bt_trace_meta_get(r, "status") && !strcmp(bt_trace_meta_get(r, "status"), "crashed"));
        bt_trace_summary sum;
        CHECK_OK(bt_trace_summary_get(r, &sum));
        CHECK(sum.n_steps == 3 && sum.last_step == 2 && sum.n_events == 1);
        bt_trace_tap_row *taps;
        int n;
        CHECK_OK(bt_trace_step_taps(r, 2, &taps, &n));
        CHECK(n == 16 && taps && taps[3].recorded && !taps[2].recorded);
        free(taps);
        bt_trace_reader_close(r);
    }
    CHECK_OK(bt_trace_close(t, "ok"));   /* after a crash close: frees only */
}

/* ---- bad files ---- */

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(99); }
    fwrite(p, 1, n, f);
    fclose(f);
}

static void expect_bad(const char *path, int code, const char *word)
{
    bt_trace_reader *r = (bt_trace_reader *)1;
    int rc = bt_trace_open(path, &r);
    const char *msg = bt_errmsg();
    if (rc != code || r != NULL || !strstr(msg, path) || (word && !strstr(msg, word)) || strchr(msg, '\n')) {
        failures++;
        fprintf(stderr, "FAIL: open %s -> %s \"%s\" (want %s mentioning '%s')\n", path, bt_strerror(rc), msg,
                bt_strerror(code), word ? word : "");
    }
    if (rc == BT_OK) bt_trace_reader_close(r);
}

static void sql_file(const char *path, const char *fmt)
{
    char sql[512];
    snprintf(sql, sizeof sql, fmt, BT_TRACE_APPLICATION_ID);
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        fprintf(stderr, "cannot build %s: %s\n", path, sqlite3_errmsg(db));
        exit(99);
    }
    sqlite3_close(db);
}

static int noop_tok(void *u, const bt_trace_token_row *t) { (void)u; (void)t; return 0; }
static int noop_tap(void *u, const bt_trace_tap_row *t) { (void)u; (void)t; return 0; }
static int noop_ev(void *u, const bt_trace_event_row *e) { (void)u; (void)e; return 0; }

/* Every query on a damaged file returns a status (EFORMAT, EIO, EUNSUPPORTED for a
 * damaged schema version, or OK), never crashes. */
static void exercise(const char *path)
{
    bt_trace_reader *r;
    int rc = bt_trace_open(path, &r);
    if (rc) { CHECK(rc == BT_EFORMAT || rc == BT_EIO || rc == BT_EUNSUPPORTED); return; }
    bt_trace_summary sum;
    bt_trace_tap_row *taps = NULL, fb;
    bt_trace_logits_row lg[4];
    bt_trace_step_row st[8];
    bool found;
    int n, errs = 0;
    float *row = NULL;
    errs += bt_trace_summary_get(r, &sum) != 0;
    for (int s = 0; s < N_STEPS; s++) {
        errs += bt_trace_step_taps(r, s, &taps, &n) != 0;
        free(taps);
        taps = NULL;
        errs += bt_trace_step_logits(r, s, lg, 4, &n) != 0;
        if (bt_trace_logit_row_get(r, s, s + 1, &row, &n, NULL) == BT_OK) free(row);
    }
    errs += bt_trace_steps(r, 0, 8, st, &n) != 0;
    errs += bt_trace_first_nonfinite(r, &fb, &found) != 0;
    errs += bt_trace_bad_each(r, 0, noop_tap, NULL) != 0;
    errs += bt_trace_tokens_each(r, 0, 0, noop_tok, NULL) != 0;
    errs += bt_trace_events_each(r, NULL, noop_ev, NULL) != 0;
    CHECK(errs == 0 || strstr(bt_errmsg(), path));
    bt_trace_reader_close(r);
}

static void check_bad_files(const char *good)
{
    expect_bad(tmp_path("missing.db"), BT_EIO, "No such file");
    expect_bad(dir, BT_EIO, "directory");
    write_bytes(tmp_path("empty.db"), "", 0);
    expect_bad(tmp_path("empty.db"), BT_EFORMAT, "empty");
    write_bytes(tmp_path("text.db"), "hello, this is not a database\n", 30);
    expect_bad(tmp_path("text.db"), BT_EFORMAT, "not an SQLite");
    unsigned char rnd[8192];
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(frand() * 127 + 128);
    write_bytes(tmp_path("random.db"), rnd, sizeof rnd);
    expect_bad(tmp_path("random.db"), BT_EFORMAT, "not an SQLite");
    /* random bytes behind a valid magic */
    memcpy(rnd, "SQLite format 3", 16);
    write_bytes(tmp_path("random2.db"), rnd, sizeof rnd);
    expect_bad(tmp_path("random2.db"), BT_EFORMAT, NULL);
    sql_file(tmp_path("foreign.db"), "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    expect_bad(tmp_path("foreign.db"), BT_EFORMAT, "application_id");
    sql_file(tmp_path("newer.db"), "PRAGMA application_id = %d; PRAGMA user_version = 7; CREATE TABLE meta(key, value);");
    expect_bad(tmp_path("newer.db"), BT_EUNSUPPORTED, "newer");   /* as reader.h says (and the browser always did) */
    sql_file(tmp_path("nometa.db"), "PRAGMA application_id = %d; PRAGMA user_version = 1; CREATE TABLE t(x);");
    expect_bad(tmp_path("nometa.db"), BT_EFORMAT, "meta");
    sql_file(tmp_path("v0.db"), "PRAGMA application_id = %d; CREATE TABLE meta(key, value);");
    expect_bad(tmp_path("v0.db"), BT_EFORMAT, "schema version");
    sql_file(tmp_path("partial.db"), "PRAGMA application_id = %d; PRAGMA user_version = 1;"
             " CREATE TABLE meta(key, value); INSERT INTO meta VALUES ('schema_version', '1');");
    expect_bad(tmp_path("partial.db"), BT_EFORMAT, NULL);
    /* truncated copies of a real trace, and copies with damaged pages */
    char *data;
    size_t len;
    if (bt_read_file(good, &data, &len)) { fprintf(stderr, "%s\n", bt_errmsg()); exit(99); }
    write_bytes(tmp_path("half.db"), data, len / 2);
    expect_bad(tmp_path("half.db"), BT_EFORMAT, "truncated");
    write_bytes(tmp_path("hdr.db"), data, 100);
    expect_bad(tmp_path("hdr.db"), BT_EFORMAT, "truncated");
    for (int k = 1; k < 16; k++) {
        unsigned char *copy = malloc(len);
        memcpy(copy, data, len);
        size_t off = len * k / 16, span = len / 40 + 1;
        for (size_t i = off; i < off + span && i < len; i++) copy[i] = (unsigned char)(frand() * 127 + 128);
        char name[32];
        snprintf(name, sizeof name, "damaged%d.db", k);
        write_bytes(tmp_path(name), copy, len);
        exercise(tmp_path(name));
        free(copy);
    }
    free(data);
}

/* ---- size of a 1,000-step decode of a 30-layer model ---- */

/* Write a synthetic decode of a 30-layer model (393 tensors per step, top-20
 * logits, one token per step); returns the file size, or -1. */
static int64_t write_decode(const char *path, int steps, double *us_per_step)
{
    const int n_layer = 30, dim = 576, n_vocab = 49152;
    bt_trace *t;
    CHECK_OK(bt_trace_create(path, &t));
    if (!t) return -1;
    CHECK_OK(bt_trace_meta(t, "model_path", "SmolLM2-135M-Instruct.Q4_1.gguf"));
    int nt = register_tensors(t, n_layer, dim, n_vocab);
    CHECK(nt == 393);
    double t0 = bt_now();
    for (int i = 0; i < 32; i++) CHECK_OK(bt_trace_token(t, 0, i, 100 + i, " word", 5, "prompt", NAN, NULL));
    for (int s = 0; s <= steps; s++) {
        int n_pos = s == 0 ? 32 : 1, pos0 = s == 0 ? 0 : 31 + s;
        CHECK_OK(bt_trace_step_begin(t, s, "target", s == 0 ? "prefill" : "decode", pos0, n_pos));
        for (int i = 0; i < nt; i++) {
            bt_tap_stats st = fake_stats(i == nt - 1 ? n_vocab : dim, n_pos, 0.5f + (i % 13) * 3.1f);
            CHECK_OK(bt_trace_tap(t, i, &st));
        }
        bt_logit_summary ls = { .n_vocab = n_vocab, .max = 18.5f + frand(), .entropy = 2.0 + frand(), .k = 20 };
        for (int k = 0; k < 20; k++) { ls.topk_ids[k] = (int32_t)((frand() + 1) * 24000); ls.topk_vals[k] = 18.5f - k * 0.731f + frand(); }
        ls.argmax_first = ls.argmax_torch = ls.argmax_triton = ls.topk_ids[0];
        CHECK_OK(bt_trace_logits(t, pos0 + n_pos - 1, &ls, "first", ls.topk_ids[0]));
        CHECK_OK(bt_trace_token(t, s, pos0 + n_pos, ls.topk_ids[0], " tok", 4, "gen", -0.7 + frand() * 0.1, NULL));
        CHECK_OK(bt_trace_step_end(t, 10.0 + frand()));
    }
    *us_per_step = (bt_now() - t0) / (steps + 1) * 1e6;
    CHECK_OK(bt_trace_finish_reason(t, "length"));
    CHECK_OK(bt_trace_close(t, "ok"));
    return bt_trace_size(path);
}

/* The budget: 1,000 decode steps < 4 MB at default detail. The file also
 * has a fixed cost (one page per table and index), so the per-1,000-step
 * figure is measured as the difference between a 2,000- and a 1,000-step
 * trace; the bounds are generous enough for noise, tight enough to catch a
 * layout regression (a row per tap would be ~20 MB). */
static void check_size(void)
{
    double us1, us2;
    int64_t s1 = write_decode(tmp_path("size1k.db"), 1000, &us1);
    int64_t s2 = write_decode(tmp_path("size2k.db"), 2000, &us2);
    int64_t per_1k = s2 - s1;
    printf("trace size, 30 layers x 393 tensors/step, top-20 logits: 1,000-step decode %.2f MB (%lld bytes);"
           " each further 1,000 steps %.2f MB; write %.0f us/step\n",
           s1 / 1e6, (long long)s1, per_1k / 1e6, (us1 + us2) / 2);
    CHECK(s1 > 0 && s1 < 5000000);
    CHECK(per_1k > 0 && per_1k < 4000000);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/bt-test-trace.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 99; }
    const char *rt = tmp_path("rt.db");
    write_roundtrip(rt);
    read_roundtrip(rt);
    check_views(rt);
    check_writer_errors();
    check_grouped_commits();
    check_crash_close();
    check_bad_files(rt);
    check_size();
    if (!getenv("BT_KEEP_TMP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    }
    if (failures) { fprintf(stderr, "%d check(s) failed\n", failures); return 1; }
    printf("test_trace: all checks passed\n");
    return 0;
}
