/* batcher.c - continuous batching over a paged KV cache, a prefix cache and
 * the provenance of every block (see batcher.h).
 *
 * Threads: each lane's request thread calls its proxy engine's forward
 * (lane_forward), which queues the rows and waits; one scheduler thread
 * (sched) takes the waiting lanes oldest first while their rows fit,
 * allocates their blocks, runs the batched forward with the lanes' taps
 * fanned out to their own callbacks, copies each lane's logits, records
 * who wrote and read which block, and wakes them. Everything below is under
 * b->lock; the scheduler holds it across the forward (the lanes in the
 * batch are waiting, the others only wait to queue). */
#include "run/batcher.h"
#include "trace/server_db.h"
#include "tap/inject.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GATHER_US 3000          /* a server step waits at most this for the last batch's lanes */

enum { F_PREFIX_WRONG, F_PAD_NAN, F_SLOT_NORESET, F_SLOT_SWAP, F_COUNT };
static const char *const fault_names[F_COUNT] = { "prefix_wrong", "pad_nan", "slot_noreset", "slot_swap" };

typedef struct blk {
    int ref;                 /* lanes mapping it */
    bool hashed;             /* in the prefix cache */
    uint64_t hash;
    long last_use;           /* server step, for eviction */
    char writer[64];         /* request that last wrote it ("" none) */
    int writer_step;
    int bad_step;            /* first server step it held a non-finite value, -1 */
    char bad_by[96];
    char taint[160];         /* written by a request that had read another's bad data (the fault's note), "" */
} blk;

typedef struct snap {
    bool used;
    uint64_t hash;           /* chain hash of the block it ends */
    int pos;                 /* positions it covers (0..pos-1) */
    long last_use;
    float *data;             /* bt_engine_state_size floats */
    char writer[64];
    int writer_step, bad_step;
    char bad_by[96];
    char taint[160];         /* the state of a request that had read another's bad data, "" */
} snap;

typedef struct lane {
    bt_batcher *b;
    int id;
    bt_engine *proxy;        /* the caller's (bt_batcher_lane_engine) */
    /* the request */
    bool active;
    char req[64], trace[256];
    bool fault[F_COUNT];
    int32_t *toks;           /* (ctx) every token run so far */
    int32_t *table;          /* (max_logical) block table */
    int *seen;               /* (max_logical) writer_step of the block when last recorded as read */
    uint64_t *chain;         /* (max_logical) chain hash of each full block */
    int n_table, n_done;
    bool restored;           /* its state came from a snapshot (no reset) */
    bool swapped;            /* slot_swap fired for this request */
    /* what this request read that a server fault corrupted (its note, which
     * starts with the fault's name): everything it writes from then on
     * carries it, so a later request's hit on those blocks or snapshots is
     * named too; "" clean */
    char taint[160];
    bool keep_state;         /* its slot was shared by a slot_swap: continue with whatever it holds */
    int hit_tokens, first_step, last_step, n_forward;
    bt_kv_access *kva;
    int n_kva, cap_kva;
    /* the forward it waits on */
    bool pending, done, in_batch;
    bool in_last;            /* ran in the last server step: the next one waits a moment for it */
    long seq_no;
    int T, pos0, start;      /* rows pos0..pos0+T-1 asked for, start.. computed */
    bool all;
    float *dst;
    int req_step;
    int rc;
    char msg[256];
    bool cancelled;
} lane;

struct bt_batcher {
    bt_batcher_cfg cfg;
    bt_engine *e;
    bool hybrid, prefix;
    int bs, n_blocks, max_rows, max_logical, nv;
    blk *blocks;
    lane *lanes;
    snap *snaps;             /* hybrid + prefix cache: state snapshots */
    int n_snaps;
    size_t state_n;
    pthread_mutex_t lock;
    pthread_cond_t work, ready;
    pthread_t thread;
    bool started, stopping;
    long seq;
    int step;                /* server steps run */
    double t0;
    bt_server_db *db;
    bool db_warned;
    double *fault_p;
    int *fault_kind;
    int n_faults;
    /* the step being run */
    lane **cur;              /* (lanes) sequence s of the batch -> its lane */
    char (*kern)[96];        /* kernel names by (op, layer + 1), "" until asked */
    char (*slot_w)[64];      /* (lanes) request that last wrote slot i */
    int *slot_step;
    char describe[256];
};

/* ---- faults ---- */

static int parse_fault(const char *spec, int *kind, double *p)
{
    const char *at = strchr(spec, '@');
    size_t n = at ? (size_t)(at - spec) : strlen(spec);
    *kind = -1;
    for (int k = 0; k < F_COUNT; k++)
        if (strlen(fault_names[k]) == n && !strncmp(spec, fault_names[k], n)) *kind = k;
    if (*kind < 0) return bt_error(BT_EINVAL, "'%s' is not a server fault (prefix_wrong, pad_nan, slot_noreset, slot_swap)", spec);
    *p = 1;
    if (!at) return BT_OK;
    if (strncmp(at, "@p=", 3)) return bt_error(BT_EINVAL, "server fault '%s': only @p=P follows the name", spec);
    char *end = NULL;
    double v = strtod(at + 3, &end);
    if (end == at + 3 || *end || !(v >= 0 && v <= 1))
        return bt_error(BT_EINVAL, "server fault '%s': p must be a number in [0, 1]", spec);
    *p = v;
    return BT_OK;
}

bool bt_batcher_is_fault(const char *spec)
{
    for (int k = 0; k < F_COUNT; k++) {
        size_t n = strlen(fault_names[k]);
        if (!strncmp(spec, fault_names[k], n) && (spec[n] == 0 || spec[n] == '@')) return true;
    }
    return false;
}

int bt_batcher_fault_check(const char *spec)
{
    int k;
    double p;
    return parse_fault(spec, &k, &p);
}

/* ---- server.db ---- */

static void db_check(bt_batcher *b, int rc)
{
    if (rc == BT_OK || b->db_warned) return;
    b->db_warned = true;
    fprintf(stderr, "bangtrace: serve: %s (the server goes on without server.db)\n", bt_errmsg());
}

static void ev(bt_batcher *b, int blkid, const char *event, const lane *L, int logical, const uint64_t *hash,
               const char *detail)
{
    if (!b->db || bt_server_db_failed(b->db)) return;
    char h[17];
    if (hash) snprintf(h, sizeof h, "%016llx", (unsigned long long)*hash);
    db_check(b, bt_server_db_block_event(b->db, b->step, blkid, event, L ? L->req : NULL, L ? logical : -1,
                                         hash ? h : NULL, detail));
}

static void kva_add(lane *L, const bt_kv_access *r)
{
    if (L->n_kva == L->cap_kva) {
        int cap = L->cap_kva ? 2 * L->cap_kva : 64;
        bt_kv_access *n = realloc(L->kva, (size_t)cap * sizeof *n);
        if (!n) return;                 /* provenance is best effort under memory pressure */
        L->kva = n;
        L->cap_kva = cap;
    }
    L->kva[L->n_kva++] = *r;
}

/* One kv_access row of the lane's request at its current step; writer,
 * bad_by, note may be NULL (none). */
static void kva_put(lane *L, const char *mode, int id, int logical, int lo, int hi, const char *writer, int writer_step,
                    int bad_step, const char *bad_by, const char *note)
{
    bt_kv_access r = { .step = L->req_step, .server_step = L->b->step, .block = id, .logical = logical, .pos_lo = lo,
                       .pos_hi = hi, .writer_step = writer_step, .bad_step = bad_step };
    snprintf(r.mode, sizeof r.mode, "%s", mode);
    snprintf(r.writer, sizeof r.writer, "%s", writer ? writer : "");
    snprintf(r.bad_by, sizeof r.bad_by, "%s", bad_by ? bad_by : "");
    snprintf(r.note, sizeof r.note, "%.159s", note ? note : "");
    kva_add(L, &r);
}

/* A KV block's row: its writer and first non-finite value as it holds them. */
static void kva_row(lane *L, const char *mode, int blkid, int logical, int lo, int hi, const blk *k, const char *note)
{
    kva_put(L, mode, blkid, logical, lo, hi, k->writer, k->writer[0] ? k->writer_step : -1, k->bad_step,
            k->bad_step >= 0 ? k->bad_by : NULL, note);
}

/* The lane read data a server fault corrupted: what it writes carries the
 * note on, "<fault>: <what happened> (<who>)". */
static void taint_of(lane *L, const char *note)
{
    if (strstr(note, " (via ")) snprintf(L->taint, sizeof L->taint, "%.159s", note);
    else snprintf(L->taint, sizeof L->taint, "%.88s (via %.60s)", note, L->req);
}

/* ---- blocks ---- */

static uint64_t hash_block(uint64_t prev, const int32_t *t, int n)
{
    uint64_t h = prev ^ 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        for (int j = 0; j < 4; j++) { h ^= (v >> (8 * j)) & 0xff; h *= 0x100000001b3ull; }
    }
    return h ? h : 1;
}

static int find_cached(const bt_batcher *b, uint64_t h)
{
    for (int i = 0; i < b->n_blocks; i++)
        if (b->blocks[i].hashed && b->blocks[i].hash == h) return i;
    return -1;
}

/* A free block: the lowest id never cached, else the least recently used
 * cached one (evicted). -1: every block is mapped. */
static int blk_alloc(bt_batcher *b, lane *L, int logical)
{
    int got = -1;
    for (int i = 0; i < b->n_blocks && got < 0; i++)
        if (!b->blocks[i].ref && !b->blocks[i].hashed) got = i;
    if (got < 0) {
        for (int i = 0; i < b->n_blocks; i++)
            if (!b->blocks[i].ref && (got < 0 || b->blocks[i].last_use < b->blocks[got].last_use)) got = i;
        if (got < 0) return -1;
        ev(b, got, "evict", L, logical, &b->blocks[got].hash, NULL);
        b->blocks[got].hashed = false;
    }
    blk *k = &b->blocks[got];
    k->ref = 1;
    k->last_use = b->step;
    /* its rows are rewritten before they are read: what it held is gone */
    k->writer[0] = 0;
    k->writer_step = -1;
    k->bad_step = -1;
    k->bad_by[0] = 0;
    k->taint[0] = 0;
    ev(b, got, "alloc", L, logical, NULL, NULL);
    return got;
}

static void lane_release(bt_batcher *b, lane *L)
{
    for (int i = 0; i < L->n_table; i++) {
        blk *k = &b->blocks[L->table[i]];
        if (k->ref > 0) k->ref--;
        if (!k->ref) ev(b, L->table[i], k->hashed ? "cached" : "free", L, i, k->hashed ? &k->hash : NULL, NULL);
    }
    L->n_table = L->n_done = 0;
}

/* ---- a hybrid model's recurrent state snapshots at block boundaries ---- */

static int find_snap(const bt_batcher *b, uint64_t h)
{
    for (int i = 0; i < b->n_snaps; i++)
        if (b->snaps[i].used && b->snaps[i].hash == h) return i;
    return -1;
}

static void slot_ev(bt_batcher *b, int slot, const char *event, const lane *L, const char *detail)
{
    if (b->db && !bt_server_db_failed(b->db))
        db_check(b, bt_server_db_slot_event(b->db, b->step, slot, event, L ? L->req : NULL, detail));
}

/* The lane's state after position end - 1 (end a block boundary whose
 * chain hash is h): kept, in a free or the least recently used snapshot. */
static void snap_take(bt_batcher *b, lane *L, int end, uint64_t h, int step)
{
    if (!b->n_snaps || find_snap(b, h) >= 0) return;
    int got = -1;
    for (int i = 0; i < b->n_snaps && got < 0; i++) if (!b->snaps[i].used) got = i;
    if (got < 0) {
        got = 0;
        for (int i = 1; i < b->n_snaps; i++) if (b->snaps[i].last_use < b->snaps[got].last_use) got = i;
    }
    snap *sp = &b->snaps[got];
    int next = 0;
    if (bt_engine_state_save(b->e, L->id, sp->data, &next) || next != end) { sp->used = false; return; }
    sp->used = true;
    sp->hash = h;
    sp->pos = end;
    sp->last_use = step;
    snprintf(sp->writer, sizeof sp->writer, "%s", L->req);
    sp->writer_step = step;
    sp->bad_step = -1;
    sp->bad_by[0] = 0;
    snprintf(sp->taint, sizeof sp->taint, "%s", L->taint);
    for (size_t i = 0; i < b->state_n; i++)
        if (!isfinite(sp->data[i])) {
            sp->bad_step = step;
            snprintf(sp->bad_by, sizeof sp->bad_by, "%s", L->req);
            break;
        }
    char d[160];
    snprintf(d, sizeof d, "snapshot %d: the state after position %d (chain hash %016llx)%s", got, end - 1,
             (unsigned long long)h, sp->bad_step >= 0 ? ", holding a non-finite value" : "");
    slot_ev(b, L->id, "snapshot", L, d);
}

/* A prefix hit on a hybrid model: the lane's slot resumes from the snapshot
 * of the state at the hit's end (prefix_wrong: from another snapshot). */
static void snap_restore(bt_batcher *b, lane *L, int sn, uint64_t h)
{
    char note[160] = "";
    if (L->fault[F_PREFIX_WRONG]) {
        for (int j = 1; j < b->n_snaps; j++) {
            int c = (sn + j) % b->n_snaps;
            if (b->snaps[c].used && b->snaps[c].hash != h && b->snaps[c].pos <= L->n_done) {
                snprintf(note, sizeof note, "prefix_wrong: restored snapshot %d (a different prefix) in place of snapshot %d", c,
                         sn);
                sn = c;
                break;
            }
        }
    }
    snap *sp = &b->snaps[sn];
    if (!note[0] && sp->taint[0]) snprintf(note, sizeof note, "%s", sp->taint);
    int end = L->n_done;
    if (bt_engine_state_load(b->e, L->id, sp->data, end)) {
        /* no state, no hit: compute it all */
        lane_release(b, L);
        L->hit_tokens = 0;
        L->n_kva = 0;
        return;
    }
    sp->last_use = b->step;
    L->restored = true;
    char d[256];
    snprintf(d, sizeof d, "%s%srestored snapshot %d (the state after position %d, written by %s at server step %d)", note,
             note[0] ? "; " : "", sn, end - 1, sp->writer, sp->writer_step);
    slot_ev(b, L->id, note[0] ? "inject" : "restore", L, d);
    kva_put(L, "snap", sn, end / b->bs - 1, 0, end - 1, sp->writer, sp->writer_step, sp->bad_step,
            sp->bad_step >= 0 ? sp->bad_by : NULL, note);
    if (note[0] && !L->taint[0]) taint_of(L, note);
}

/* A new sequence (position 0) on the lane: map the prompt's cached full
 * blocks, at most (T - 1) / bs of them so one row is left to compute. */
static void prefix_lookup(bt_batcher *b, lane *L, const int32_t *tokens, int T)
{
    uint64_t hs[T / b->bs + 1];
    int maxk = (T - 1) / b->bs, n = 0;
    for (uint64_t h = 0; n < maxk; n++) {
        h = hash_block(h, tokens + (size_t)n * b->bs, b->bs);
        if (find_cached(b, h) < 0) break;
        hs[n] = h;
    }
    /* a hybrid model resumes its recurrent state only where a snapshot of
     * it was taken: the longest cached run of blocks ending at one */
    int sn = -1;
    if (b->hybrid) {
        while (n > 0 && (sn = find_snap(b, hs[n - 1])) < 0) n--;
        if (n == 0) return;
    }
    for (int k = 0; k < n; k++) {
        int id = find_cached(b, hs[k]);
        char note[160] = "";
        if (L->fault[F_PREFIX_WRONG] && !b->hybrid) {
            /* the fault: another cached block (the next one up) in its place */
            int other = -1;
            for (int j = 1; j < b->n_blocks && other < 0; j++) {
                int c = (id + j) % b->n_blocks;
                if (b->blocks[c].hashed && b->blocks[c].hash != hs[k]) other = c;
            }
            if (other >= 0) {
                snprintf(note, sizeof note, "prefix_wrong: mapped block %d (a different prefix) in place of block %d", other, id);
                id = other;
            }
        }
        blk *bk = &b->blocks[id];
        if (!note[0] && bk->taint[0]) snprintf(note, sizeof note, "%s", bk->taint);
        if (note[0] && !L->taint[0]) taint_of(L, note);
        bk->ref++;
        bk->last_use = b->step;
        L->table[k] = id;
        L->chain[k] = hs[k];
        L->seen[k] = -3;                 /* server.db gets its read with the step (provenance) */
        L->n_table = k + 1;
        char d[256];
        snprintf(d, sizeof d, "%s%swritten by %s at step %d", note, note[0] ? "; " : "", bk->writer[0] ? bk->writer : "?",
                 bk->writer_step);
        ev(b, id, note[0] ? "inject" : "hit", L, k, &hs[k], d);
        kva_row(L, "hit", id, k, k * b->bs, (k + 1) * b->bs - 1, bk, note[0] ? note : NULL);
    }
    L->n_done = L->n_table * b->bs;
    L->hit_tokens = L->n_done;
    if (sn >= 0) snap_restore(b, L, sn, hs[n - 1]);
}

/* ---- the lanes' forwards ---- */

static int lane_forward(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits)
{
    lane *L = impl;
    bt_batcher *b = L->b;
    pthread_mutex_lock(&b->lock);
    int rc = BT_OK;
    if (b->stopping) { rc = BT_EINVAL; snprintf(L->msg, sizeof L->msg, "the server is stopping"); goto out; }
    if (T > b->max_rows) {
        rc = BT_EINVAL;
        snprintf(L->msg, sizeof L->msg, "a forward of %d rows exceeds the batch of %d", T, b->max_rows);
        goto out;
    }
    bool all = bt_engine_logits_all(e);
    L->req_step = bt_engine_step(e);
    if (pos0 == 0) {
        lane_release(b, L);
        L->restored = L->swapped = L->keep_state = false;
        L->taint[0] = 0;
        memcpy(L->toks, tokens, (size_t)T * sizeof *tokens);
        if (b->prefix && !all) prefix_lookup(b, L, tokens, T);
    } else if (pos0 != L->n_done) {
        rc = BT_EUNSUPPORTED;
        snprintf(L->msg, sizeof L->msg, "the batched server continues a sequence at position %d, not %d (no rollback)",
                 L->n_done, pos0);
        goto out;
    } else {
        memcpy(L->toks + pos0, tokens, (size_t)T * sizeof *tokens);
    }
    L->T = T;
    L->pos0 = pos0;
    L->start = BT_MAX(pos0, L->n_done);
    L->all = all;
    L->dst = logits;
    L->cancelled = false;
    L->rc = BT_OK;
    L->msg[0] = 0;
    L->done = false;
    L->pending = true;
    L->seq_no = b->seq++;
    pthread_cond_signal(&b->work);
    while (!L->done) pthread_cond_wait(&b->ready, &b->lock);
    rc = L->rc;
out:
    pthread_mutex_unlock(&b->lock);
    return rc ? bt_error(rc, "%s", L->msg) : BT_OK;
}

int bt_batcher_lane_engine(bt_batcher *b, int lane_i, bt_engine **out)
{
    *out = NULL;
    if (lane_i < 0 || lane_i >= b->cfg.lanes) return bt_error(BT_ERANGE, "lane %d of %d", lane_i, b->cfg.lanes);
    bt_engine_ext ext = { .forward = lane_forward, .free = NULL, .impl = &b->lanes[lane_i] };
    int rc = bt_engine_new_ext(b->cfg.model, b->cfg.ctx, b->max_rows, &ext, out);
    if (rc == BT_OK) b->lanes[lane_i].proxy = *out;
    return rc;
}

/* ---- the scheduler's taps ---- */

static const char *kernel_of(bt_batcher *b, int op, int layer)
{
    char *k = b->kern[(size_t)op * (b->cfg.model->cfg.n_layers + 1) + (size_t)(layer + 1)];
    if (!k[0]) bt_engine_kernel_name(b->e, op, layer, k, 96);
    return k;
}

static bool b_ask(void *u, int op, int layer)
{
    bt_batcher *b = u;
    for (int i = 0; i < b->cfg.lanes; i++)
        if (b->lanes[i].in_batch && bt_engine_tap_wanted(b->lanes[i].proxy, op, layer)) return true;
    return false;
}

static bool b_observe(void *u, const bt_tensor_view *t)
{
    bt_batcher *b = u;
    lane *L = b->cur[bt_engine_batch_seq(b->e)];
    if (L->cancelled || !bt_engine_tap_wanted(L->proxy, t->op, t->layer)) return true;
    bt_tensor_view v = *t;
    v.kernel = kernel_of(b, t->op, t->layer);
    if (!bt_engine_tap_deliver(L->proxy, &v)) {
        /* that lane's own callback cancelled its forward; the others go on */
        L->cancelled = true;
        L->rc = BT_EINVAL;
        snprintf(L->msg, sizeof L->msg, "%s", bt_errmsg());
    }
    return true;
}

static void b_routes(void *u, int step, int layer, int pos0, int T, int k, const int *experts, const float *weights)
{
    (void)step;
    bt_batcher *b = u;
    lane *L = b->cur[bt_engine_batch_seq(b->e)];
    if (!L->cancelled) bt_engine_routes_deliver(L->proxy, layer, pos0, T, k, experts, weights);
}

/* ---- one server step ---- */

/* Non-finite values in the K/V rows the lane wrote at positions lo..hi of
 * block k: the first one found, as "layer L, position P (K)". */
static bool scan_rows(bt_batcher *b, int blkid, int lo, int hi, char *where, size_t cap)
{
    const bt_config *c = &b->cfg.model->cfg;
    int kvd = bt_engine_kv_dim(b->e);
    for (int p = lo; p <= hi; p++) {
        int row = blkid * b->bs + p % b->bs;
        for (int l = 0; l < c->n_layers; l++) {
            if (!bt_op_in_layer(c, BT_OP_ATTN_K, l)) continue;
            for (int w = 0; w < 2; w++) {
                const float *x = bt_engine_kv(b->e, l, row, w);
                if (!x) return false;
                for (int i = 0; i < kvd; i++)
                    if (!isfinite(x[i])) {
                        snprintf(where, cap, "layer %d, position %d (%s, element %d)", l, p, w ? "V" : "K", i);
                        return true;
                    }
            }
        }
    }
    return false;
}

/* After the forward: the lane's blocks, who wrote and who read them. */
static void provenance(bt_batcher *b, lane *L, int step)
{
    int lo = L->start, hi = L->pos0 + L->T - 1, bs = b->bs;
    bt_server_db *db = b->db && !bt_server_db_failed(b->db) ? b->db : NULL;
    /* reads: blocks another request last wrote, once per (block, write) */
    for (int k = 0; k <= hi / bs && k < L->n_table; k++) {
        blk *bk = &b->blocks[L->table[k]];
        if (L->seen[k] == -3) {          /* a prefix hit: its kv_access row is written, server.db's now */
            L->seen[k] = bk->writer_step;
            if (db) db_check(b, bt_server_db_access(db, step, L->req, L->table[k], k, 'r', k * bs, (k + 1) * bs - 1));
            continue;
        }
        bool foreign = bk->writer[0] && strcmp(bk->writer, L->req);
        bool foreign_bad = bk->bad_step >= 0 && strcmp(bk->bad_by, L->req);
        if (!(foreign || foreign_bad) || L->seen[k] == bk->writer_step) continue;
        if (k * bs >= lo) continue;       /* written by us in this step */
        L->seen[k] = bk->writer_step;
        int plo = k * bs, phi = BT_MIN((k + 1) * bs - 1, lo - 1);
        if (db) db_check(b, bt_server_db_access(db, step, L->req, L->table[k], k, 'r', plo, phi));
        const char *why = bk->taint[0] && strcmp(bk->writer, L->req) ? bk->taint
                        : bk->bad_step >= 0 && strcmp(bk->bad_by, L->req) ? bk->bad_by : NULL;
        kva_row(L, "r", L->table[k], k, plo, phi, bk, why);
        if (bk->taint[0] && strcmp(bk->writer, L->req) && !L->taint[0]) taint_of(L, bk->taint);
    }
    /* writes */
    for (int k = lo / bs; k <= hi / bs; k++) {
        int id = L->table[k];
        blk *bk = &b->blocks[id];
        int plo = BT_MAX(lo, k * bs), phi = BT_MIN(hi, (k + 1) * bs - 1);
        snprintf(bk->writer, sizeof bk->writer, "%s", L->req);
        bk->writer_step = step;
        bk->last_use = step;
        snprintf(bk->taint, sizeof bk->taint, "%s", L->taint);
        L->seen[k] = step;
        char where[128];
        if (bk->bad_step < 0 && scan_rows(b, id, plo, phi, where, sizeof where)) {
            bk->bad_step = step;
            snprintf(bk->bad_by, sizeof bk->bad_by, "%s", L->req);
            char d[256];
            snprintf(d, sizeof d, "first non-finite at %s, written by %s", where, L->req);
            ev(b, id, "nonfinite", L, k, NULL, d);
        }
        if (db) db_check(b, bt_server_db_access(db, step, L->req, id, k, 'w', plo, phi));
        kva_row(L, "w", id, k, plo, phi, bk, NULL);
        /* a block that filled: its chain hash, into the prefix cache */
        if (phi == (k + 1) * bs - 1) {
            L->chain[k] = hash_block(k ? L->chain[k - 1] : 0, L->toks + (size_t)k * bs, bs);
            if (b->prefix && !bk->hashed && find_cached(b, L->chain[k]) < 0) {
                bk->hashed = true;
                bk->hash = L->chain[k];
                ev(b, id, "full", L, k, &bk->hash, NULL);
            }
        }
    }
    L->n_done = hi + 1;
    if (L->first_step < 0) L->first_step = step;
    L->last_step = step;
    L->n_forward++;
}

/* pad_nan: the batch's padding lane lands on cache row 0 (block 0's first
 * row), in every attention layer, K and V. Run after every lane's
 * provenance of the step: the forward that wrote it has already read the
 * cache, so the lanes of this batch read the NaN at their next step, and
 * their reads must see a write newer than the one they read now. */
static void pad_nan_fill(bt_batcher *b, lane *L, int step)
{
    const bt_config *c = &b->cfg.model->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        if (!bt_op_in_layer(c, BT_OP_ATTN_K, l)) continue;
        bt_engine_kv_fill(b->e, l, 0, 0, NAN);
        bt_engine_kv_fill(b->e, l, 0, 1, NAN);
    }
    blk *b0 = &b->blocks[0];
    char by[96];
    snprintf(by, sizeof by, "padding lane of %s", L->req);
    if (b0->bad_step < 0) {
        b0->bad_step = step;
        snprintf(b0->bad_by, sizeof b0->bad_by, "%s", by);
    }
    snprintf(b0->writer, sizeof b0->writer, "%s", L->req);
    b0->writer_step = step;
    char d[200];
    snprintf(d, sizeof d, "pad_nan: %s wrote NaN into cache row 0 (block 0, offset 0) of every attention layer", by);
    ev(b, 0, "inject", L, -1, NULL, d);
    /* block 0 as the fault left it: a read the faulting lane's own, and
     * the rows another lane wrote there this step, are another's write */
    for (int i = 0; i < b->cfg.lanes; i++) {
        lane *O = &b->lanes[i];
        for (int k = 0; k < O->n_table; k++)
            if (O->table[k] == 0 && (O == L || O->seen[k] == step)) O->seen[k] = -2;
    }
}

/* slot_swap: a request's rows run on another running request's state slot
 * in this batch (a graph reused across batch shapes replaying the wrong
 * state row), both reading and writing it; both then go on with whatever
 * their slots hold. Once per request, only when it shares a batch. */
static void slot_swaps(bt_batcher *b, lane **pick, bt_seq_batch *sb, int m)
{
    for (int i = 0; i < m; i++) {
        lane *L = pick[i];
        if (!L->fault[F_SLOT_SWAP] || L->swapped) continue;
        int j = -1;
        for (int k = 1; k < m && j < 0; k++) {
            int c = (i + k) % m;
            if (sb[c].pos0 > 0 && sb[c].slot == pick[c]->id) j = c;
        }
        if (j < 0) continue;
        lane *O = pick[j];
        sb[i].slot = O->id;
        sb[i].state = sb[j].state = BT_SEQ_STATE_KEEP;
        L->swapped = L->keep_state = O->keep_state = true;
        char d[256];
        snprintf(d, sizeof d, "slot_swap: %s's rows ran on state slot %d (%s's) at server step %d", L->req, O->id, O->req, b->step);
        kva_put(L, "slot", O->id, 0, sb[i].pos0, sb[i].pos0 + sb[i].T - 1, b->slot_w[O->id][0] ? b->slot_w[O->id] : O->req,
                b->slot_step[O->id], -1, NULL, d);
        kva_put(O, "slot", O->id, 0, sb[j].pos0, sb[j].pos0 + sb[j].T - 1, L->req, b->step, -1, NULL, d);
        if (!L->taint[0]) taint_of(L, d);
        if (!O->taint[0]) taint_of(O, d);
        slot_ev(b, O->id, "inject", L, d);
    }
}

static int by_seq(const void *x, const void *y)
{
    const lane *a = *(lane *const *)x, *c = *(lane *const *)y;
    return a->seq_no < c->seq_no ? -1 : a->seq_no > c->seq_no;
}

static void run_step(bt_batcher *b)
{
    int n = 0, rows = 0;
    lane **pick = b->cur;
    for (int i = 0; i < b->cfg.lanes; i++) if (b->lanes[i].pending) pick[n++] = &b->lanes[i];
    qsort(pick, (size_t)n, sizeof *pick, by_seq);
    bt_seq_batch *sb = calloc((size_t)n, sizeof *sb);
    if (!sb) {
        for (int i = 0; i < n; i++) {
            pick[i]->rc = BT_ENOMEM;
            snprintf(pick[i]->msg, sizeof pick[i]->msg, "out of memory");
            pick[i]->pending = false;
            pick[i]->done = true;
        }
        pthread_cond_broadcast(&b->ready);
        return;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        lane *L = pick[i];
        int need = L->pos0 + L->T - L->start;
        if (rows + need > b->max_rows) continue;      /* waits for the next step (the oldest always fits) */
        bool ok = true;
        for (int k = L->n_table; k <= (L->pos0 + L->T - 1) / b->bs; k++) {
            int id = blk_alloc(b, L, k);
            if (id < 0) { ok = false; break; }
            L->table[k] = id;
            L->seen[k] = -1;
            L->n_table = k + 1;
        }
        if (!ok) {
            L->rc = BT_ENOMEM;
            snprintf(L->msg, sizeof L->msg, "the KV cache is full (%d blocks of %d positions, every one mapped by a running "
                     "request): raise --kv-blocks or lower --parallel", b->n_blocks, b->bs);
            L->pending = false;
            L->done = true;
            continue;
        }
        int state = L->keep_state && L->pos0 ? BT_SEQ_STATE_KEEP : BT_SEQ_STATE_AUTO;
        if (b->hybrid && L->pos0 == 0 && !L->restored) {
            char d[160] = "";
            if (L->fault[F_SLOT_NORESET] && b->slot_w[L->id][0]) {
                state = BT_SEQ_STATE_KEEP;
                snprintf(d, sizeof d, "slot_noreset: the state of %s (last written at step %d) was kept", b->slot_w[L->id],
                         b->slot_step[L->id]);
                kva_put(L, "slot", L->id, 0, 0, 0, b->slot_w[L->id], b->slot_step[L->id], -1, NULL, d);
                taint_of(L, d);
            }
            if (b->db && !bt_server_db_failed(b->db))
                db_check(b, bt_server_db_slot_event(b->db, b->step, L->id, state == BT_SEQ_STATE_KEEP ? "keep" : "reset", L->req,
                                                    d[0] ? d : NULL));
        }
        sb[m] = (bt_seq_batch){ .tokens = L->toks + L->start, .T = need, .pos0 = L->start, .blocks = L->table, .slot = L->id,
                                .state = state, .logits_all = L->all };
        pick[m++] = L;
        rows += need;
    }
    if (!m) { free(sb); pthread_cond_broadcast(&b->ready); return; }
    if (b->hybrid && m > 1) slot_swaps(b, pick, sb, m);
    /* the batch's wishes: what any of its lanes' callbacks wants */
    bool taps = false;
    for (int i = 0; i < m; i++) pick[i]->in_batch = true;
    for (int i = 0; i < m && !taps; i++)
        for (int op = 0; op < BT_OP_COUNT && !taps; op++)
            for (int l = -1; l < b->cfg.model->cfg.n_layers && !taps; l++) taps = bt_engine_tap_wanted(pick[i]->proxy, op, l);
    bt_eval_cb cb = { .ask = b_ask, .observe = b_observe, .routes = b_routes, .user = b };
    bt_engine_set_eval_cb(b->e, taps ? &cb : NULL);
    int step = b->step;
    bt_engine_set_step(b->e, step);
    double t0 = bt_now();
    int rc = bt_engine_forward_batch(b->e, sb, m);
    double ms = (bt_now() - t0) * 1e3;
    char emsg[256] = "";
    if (rc) snprintf(emsg, sizeof emsg, "%s", bt_errmsg());
    bt_server_db *db = b->db && !bt_server_db_failed(b->db) ? b->db : NULL;
    if (db) {
        db_check(b, bt_server_db_begin(db));
        db_check(b, bt_server_db_step(db, step, t0 - b->t0, m, rows, ms));
    }
    for (int i = 0; i < b->cfg.lanes; i++) b->lanes[i].in_last = false;
    for (int i = 0, row = 0; i < m; i++) {
        lane *L = pick[i];
        L->in_last = true;
        if (db) db_check(b, bt_server_db_batch(db, step, L->req, L->id, row, sb[i].pos0, sb[i].T, L->req_step));
        row += sb[i].T;
        if (rc) {
            L->rc = rc;
            snprintf(L->msg, sizeof L->msg, "%s", emsg);
        } else if (!L->cancelled) {
            const float *src = bt_engine_logits_row(b->e, sb[i].logit_row);
            if (L->all) {
                memcpy(L->dst, bt_engine_logits_row(b->e, sb[i].logit_row - sb[i].T + 1),
                       (size_t)sb[i].T * b->nv * sizeof(float));
            } else if (src) {
                memcpy(L->dst + (size_t)(L->T - 1) * b->nv, src, (size_t)b->nv * sizeof(float));
            }
        }
        if (!rc) provenance(b, L, step);
        int end = L->pos0 + L->T;
        if (!rc && b->n_snaps && end % b->bs == 0) snap_take(b, L, end, L->chain[end / b->bs - 1], step);
        if (b->hybrid) {
            snprintf(b->slot_w[sb[i].slot], sizeof b->slot_w[sb[i].slot], "%s", L->req);
            b->slot_step[sb[i].slot] = step;
        }
        L->pending = L->in_batch = false;
        L->done = true;
    }
    for (int i = 0; i < m && !rc; i++)
        if (pick[i]->fault[F_PAD_NAN]) pad_nan_fill(b, pick[i], step);
    if (db) db_check(b, bt_server_db_commit(db));
    b->step++;
    free(sb);
    pthread_cond_broadcast(&b->ready);
}

/* A lane of the last batch still running a request that has not queued
 * its next forward yet (it is sampling, streaming, recording). */
static bool expecting(const bt_batcher *b)
{
    for (int i = 0; i < b->cfg.lanes; i++) {
        const lane *L = &b->lanes[i];
        if (L->in_last && L->active && !L->pending) return true;
    }
    return false;
}

static bool any_pending(const bt_batcher *b)
{
    for (int i = 0; i < b->cfg.lanes; i++) if (b->lanes[i].pending) return true;
    return false;
}

static void *sched(void *u)
{
    bt_batcher *b = u;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        while (!b->stopping && !any_pending(b)) pthread_cond_wait(&b->work, &b->lock);
        if (b->stopping) break;
        /* gather: the lanes of the last batch come back within a moment
         * (a decode step's sampling and recording); a forward started on
         * the first of them would run one row, the next on the rest. At
         * most GATHER_US, and never for a lane whose request ended. */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += GATHER_US * 1000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        while (!b->stopping && expecting(b))
            if (pthread_cond_timedwait(&b->work, &b->lock, &dl) == ETIMEDOUT) break;
        if (b->stopping) break;
        run_step(b);
    }
    for (int i = 0; i < b->cfg.lanes; i++) {
        lane *L = &b->lanes[i];
        if (!L->pending) continue;
        L->rc = BT_EINVAL;
        snprintf(L->msg, sizeof L->msg, "the server is stopping");
        L->pending = false;
        L->done = true;
    }
    pthread_cond_broadcast(&b->ready);
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

/* ---- the requests ---- */

int bt_batcher_lane_begin(bt_batcher *b, int lane_i, const char *request, const char *trace, unsigned long long draw)
{
    if (lane_i < 0 || lane_i >= b->cfg.lanes) return bt_error(BT_ERANGE, "lane %d of %d", lane_i, b->cfg.lanes);
    pthread_mutex_lock(&b->lock);
    lane *L = &b->lanes[lane_i];
    lane_release(b, L);
    L->active = true;
    snprintf(L->req, sizeof L->req, "%s", request ? request : "");
    const char *base = trace ? strrchr(trace, '/') : NULL;
    snprintf(L->trace, sizeof L->trace, "%s", base ? base + 1 : trace ? trace : "");
    memset(L->fault, 0, sizeof L->fault);
    for (int i = 0; i < b->n_faults; i++)
        if (b->fault_p[i] >= 1 || bt_injector_draw_unit(draw, 100 + i) < b->fault_p[i]) L->fault[b->fault_kind[i]] = true;
    L->hit_tokens = 0;
    L->first_step = L->last_step = -1;
    L->n_forward = 0;
    L->n_kva = 0;
    if (b->db && !bt_server_db_failed(b->db))
        db_check(b, bt_server_db_request(b->db, L->req, lane_i, L->trace[0] ? L->trace : NULL, -1, -1, -1, 0, 0, NULL));
    pthread_mutex_unlock(&b->lock);
    return BT_OK;
}

bool bt_batcher_lane_faulted(const bt_batcher *b, int lane_i)
{
    if (lane_i < 0 || lane_i >= b->cfg.lanes) return false;
    for (int k = 0; k < F_COUNT; k++) if (b->lanes[lane_i].fault[k]) return true;
    return false;
}

int bt_batcher_lane_trace(bt_batcher *b, int lane_i, bt_trace *t)
{
    if (lane_i < 0 || lane_i >= b->cfg.lanes || !t) return BT_OK;
    pthread_mutex_lock(&b->lock);
    lane *L = &b->lanes[lane_i];
    int rc = L->n_kva ? bt_trace_kv_access(t, L->kva, L->n_kva) : BT_OK;
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void bt_batcher_lane_end(bt_batcher *b, int lane_i, const char *finish, int n_prompt)
{
    if (lane_i < 0 || lane_i >= b->cfg.lanes) return;
    pthread_mutex_lock(&b->lock);
    lane *L = &b->lanes[lane_i];
    if (b->db && !bt_server_db_failed(b->db))
        db_check(b, bt_server_db_request(b->db, L->req, lane_i, L->trace[0] ? L->trace : NULL, L->first_step, L->last_step,
                                         n_prompt, L->hit_tokens, L->n_forward, finish ? finish : "error"));
    lane_release(b, L);
    L->active = false;
    pthread_cond_signal(&b->work);      /* the scheduler need not wait for it */
    pthread_mutex_unlock(&b->lock);
}

/* ---- life ---- */

const char *bt_batcher_describe(const bt_batcher *b) { return b->describe; }

int bt_batcher_new(const bt_batcher_cfg *cfg, bt_batcher **out)
{
    *out = NULL;
    if (cfg->lanes < 1) return bt_error(BT_EINVAL, "a batched server needs at least one lane");
    bt_batcher *b = calloc(1, sizeof *b);
    if (!b) return bt_error(BT_ENOMEM, "out of memory");
    b->cfg = *cfg;
    b->cfg.server_db = NULL;
    b->cfg.faults = NULL;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->work, NULL);
    pthread_cond_init(&b->ready, NULL);
    const bt_config *c = &cfg->model->cfg;
    int rc = BT_OK;
    b->hybrid = (c->flags & BT_ARCH_HYBRID) != 0;
    b->bs = cfg->block_size > 0 ? cfg->block_size : 16;
    b->max_rows = cfg->max_rows > 0 ? cfg->max_rows : 512;
    b->max_rows = BT_MIN(b->max_rows, cfg->ctx);
    b->max_logical = (cfg->ctx + b->bs - 1) / b->bs;
    b->n_blocks = cfg->n_blocks > 0 ? cfg->n_blocks : cfg->lanes * b->max_logical;
    b->prefix = cfg->prefix_cache;
    b->nv = c->n_vocab;
    b->t0 = bt_now();
    if (b->n_blocks < b->max_logical) {
        rc = bt_error(BT_EINVAL, "--kv-blocks %d cannot hold one request of the context %d (%d blocks of %d)", b->n_blocks,
                      cfg->ctx, b->max_logical, b->bs);
        goto fail;
    }
    b->n_faults = cfg->n_faults;
    b->fault_kind = calloc((size_t)cfg->n_faults + 1, sizeof *b->fault_kind);
    b->fault_p = calloc((size_t)cfg->n_faults + 1, sizeof *b->fault_p);
    b->blocks = calloc((size_t)b->n_blocks, sizeof *b->blocks);
    b->lanes = calloc((size_t)cfg->lanes, sizeof *b->lanes);
    b->cur = calloc((size_t)cfg->lanes, sizeof *b->cur);
    b->kern = calloc((size_t)BT_OP_COUNT * (c->n_layers + 1), sizeof *b->kern);
    b->slot_w = calloc((size_t)cfg->lanes, sizeof *b->slot_w);
    b->slot_step = calloc((size_t)cfg->lanes, sizeof *b->slot_step);
    if (!b->fault_kind || !b->fault_p || !b->blocks || !b->lanes || !b->cur || !b->kern || !b->slot_w || !b->slot_step) {
        rc = bt_error(BT_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < cfg->n_faults; i++) {
        if ((rc = parse_fault(cfg->faults[i], &b->fault_kind[i], &b->fault_p[i]))) goto fail;
        if ((b->fault_kind[i] == F_SLOT_NORESET || b->fault_kind[i] == F_SLOT_SWAP) && !b->hybrid) {
            rc = bt_error(BT_EINVAL, "server fault '%s' needs a hybrid model (a recurrent state slot); %s has none",
                          cfg->faults[i], cfg->model_path ? cfg->model_path : "this model");
            goto fail;
        }
        if (b->fault_kind[i] == F_PREFIX_WRONG && !b->prefix) {
            rc = bt_error(BT_EINVAL, "server fault '%s' needs the prefix cache (--prefix-cache on)", cfg->faults[i]);
            goto fail;
        }
    }
    for (int i = 0; i < b->n_blocks; i++) { b->blocks[i].bad_step = -1; b->blocks[i].writer_step = -1; }
    for (int i = 0; i < cfg->lanes; i++) {
        lane *L = &b->lanes[i];
        L->b = b;
        L->id = i;
        L->first_step = L->last_step = -1;
        L->toks = calloc((size_t)cfg->ctx, sizeof *L->toks);
        L->table = calloc((size_t)b->max_logical, sizeof *L->table);
        L->seen = calloc((size_t)b->max_logical, sizeof *L->seen);
        L->chain = calloc((size_t)b->max_logical, sizeof *L->chain);
        if (!L->toks || !L->table || !L->seen || !L->chain) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    }
    bt_engine_opts eo = { .ctx_len = cfg->ctx, .max_batch = b->max_rows, .n_threads = cfg->threads, .block_size = b->bs,
                          .n_blocks = b->n_blocks, .n_slots = cfg->lanes };
    if ((rc = bt_engine_new_opts(cfg->model, &eo, &b->e))) goto fail;
    b->state_n = bt_engine_state_size(b->e);
    if (b->hybrid && b->prefix && b->state_n) {
        /* snapshots of the recurrent state at block boundaries, for prefix
         * hits: at most 1 GiB of them unless asked */
        long want = cfg->n_snapshots > 0 ? cfg->n_snapshots : 8L * cfg->lanes;
        long fit = (long)((1ull << 30) / (b->state_n * sizeof(float)));
        if (cfg->n_snapshots <= 0 && want > fit) want = BT_MAX(fit, 1L);
        b->n_snaps = (int)want;
        if (!(b->snaps = calloc((size_t)b->n_snaps, sizeof *b->snaps))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        for (int i = 0; i < b->n_snaps; i++)
            if (!(b->snaps[i].data = malloc(b->state_n * sizeof(float)))) {
                rc = bt_error(BT_ENOMEM, "out of memory for %d state snapshots of %zu floats (--state-snapshots)", b->n_snaps,
                              b->state_n);
                goto fail;
            }
    }
    if (cfg->server_db) {
        if ((rc = bt_server_db_create(cfg->server_db, &b->db))) goto fail;
        char v[64];
        bt_server_db_meta(b->db, "model", cfg->model_path ? cfg->model_path : "");
        if (cfg->argv_json) bt_server_db_meta(b->db, "argv", cfg->argv_json);
        snprintf(v, sizeof v, "%d", b->bs); bt_server_db_meta(b->db, "block_size", v);
        snprintf(v, sizeof v, "%d", b->n_blocks); bt_server_db_meta(b->db, "n_blocks", v);
        snprintf(v, sizeof v, "%d", b->max_rows); bt_server_db_meta(b->db, "batch", v);
        snprintf(v, sizeof v, "%d", cfg->lanes); bt_server_db_meta(b->db, "lanes", v);
        snprintf(v, sizeof v, "%d", cfg->ctx); bt_server_db_meta(b->db, "ctx", v);
        bt_server_db_meta(b->db, "prefix_cache", b->prefix ? "on" : "off");
        bt_server_db_meta(b->db, "hybrid", b->hybrid ? "1" : "0");
        snprintf(v, sizeof v, "%d", b->n_snaps); bt_server_db_meta(b->db, "state_snapshots", v);
        char inj[1024] = "";
        for (int i = 0; i < cfg->n_faults; i++)
            snprintf(inj + strlen(inj), sizeof inj - strlen(inj), "%s%s", i ? " " : "", cfg->faults[i]);
        bt_server_db_meta(b->db, "inject", inj);
        bt_server_db_meta(b->db, "status", "running");
    }
    char snaps[64] = "";
    if (b->n_snaps) snprintf(snaps, sizeof snaps, " (%d recurrent state snapshots)", b->n_snaps);
    snprintf(b->describe, sizeof b->describe, "continuous batching: %d lane%s, %d KV blocks of %d, batches of %d rows, prefix cache %s%s",
             cfg->lanes, cfg->lanes > 1 ? "s" : "", b->n_blocks, b->bs, b->max_rows, b->prefix ? "on" : "off", snaps);
    if (pthread_create(&b->thread, NULL, sched, b)) { rc = bt_error(BT_ENOMEM, "cannot start the scheduler thread"); goto fail; }
    b->started = true;
    *out = b;
    return BT_OK;
fail:
    bt_batcher_free(b);
    return rc;
}

int bt_batcher_close(bt_batcher *b, const char *status)
{
    if (!b) return BT_OK;
    if (b->started) {
        pthread_mutex_lock(&b->lock);
        b->stopping = true;
        pthread_cond_broadcast(&b->work);
        pthread_mutex_unlock(&b->lock);
        pthread_join(b->thread, NULL);
        b->started = false;
    }
    int rc = bt_server_db_close(b->db, status);
    b->db = NULL;
    return rc;
}

void bt_batcher_free(bt_batcher *b)
{
    if (!b) return;
    bt_batcher_close(b, "interrupted");
    for (int i = 0; b->lanes && i < b->cfg.lanes; i++) {
        lane *L = &b->lanes[i];
        free(L->toks); free(L->table); free(L->seen); free(L->chain); free(L->kva);
    }
    bt_engine_free(b->e);
    free(b->lanes); free(b->blocks); free(b->cur); free(b->kern); free(b->slot_w); free(b->slot_step);
    free(b->fault_kind); free(b->fault_p);
    for (int i = 0; b->snaps && i < b->n_snaps; i++) free(b->snaps[i].data);
    free(b->snaps);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->ready);
    free(b);
}
