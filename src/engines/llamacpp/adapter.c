/* adapter.c - llama.cpp driven through its C API, as a bt_engine.
 *
 * Life of a forward: bt_engine_forward -> lc_forward fills a llama_batch
 * (every row asks for logits, so every layer keeps all T rows, as ours
 * does) -> llama_decode -> ggml's scheduler calls cb_eval twice per graph
 * node: ask (do you want it?) and, when we said yes, observe (it is
 * computed, on the host or copied there). We answer ask from a table built
 * once by a probe forward (name + ggml op -> bt_op or extra tensor) and the
 * engine's cached tap wishes, so with taps off no node is split out.
 *
 * Coupling to the recorder is ONE function, deliver(): it builds a
 * bt_tensor_view of the host copy (a host view: no backend tensor handle,
 * so the seam's bt_tensor_* calls act on the copy) and hands it to
 * bt_engine_tap_deliver,
 * which is the same eval callback the native engine calls (the recorder
 * injects, computes statistics, writes the trace). When the eval-callback
 * contract changes, deliver() is what follows it.
 *
 * Invariants: only tensors a tap (or an --inject spec) asks for are copied;
 * an injected value is written back before llama.cpp uses the tensor; one
 * llama_batch per forward, one ubatch (n_ubatch >= max batch), so a view's
 * rows are the forward's positions.
 *
 * Shared context (serve --engine llama.cpp --parallel N, llama-server's
 * slots): one lc_impl (model, context with n_seq_max = N, one KV cache per
 * sequence, threadpool, name table) behind N engines, each an lc_seq bound
 * to one seq_id. A forward holds the context's mutex from its first
 * llama_decode to its last logits copy, and each llama_decode holds only
 * that sequence's tokens, so every node cb_eval sees belongs to the engine
 * in L->e: its taps, its recorder, its trace. A forward from a position
 * below what the sequence holds (a new request on the slot starts at 0)
 * first removes those cells of that sequence only (llama_memory_seq_rm).
 * The context is freed with its last engine. */
#include "config.h"            /* BT_LLAMA_CPP_VERSION, BT_LLAMA_CPP_FLAGS */
#include "llamacpp.h"
#include "run/session.h"           /* bt_llama_settings */
#include "base/util.h"

#include <llama.h>
#include <ggml.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The nextn staging API (src/llama-ext.h, a C++ header: the symbols are
 * C++-mangled, so they are named here by their Itanium-ABI linkage names;
 * a bool is a _Bool under that ABI). What common/speculative.cpp's
 * draft-mtp calls to read the trunk's and the MTP block's h_nextn. */
#if defined(__GNUC__) && defined(__ELF__)
void lc_set_embeddings_nextn(struct llama_context *ctx, bool value, bool masked)
    __asm__("_Z26llama_set_embeddings_nextnP13llama_contextbb");
float *lc_get_embeddings_nextn_ith(struct llama_context *ctx, int32_t i)
    __asm__("_Z30llama_get_embeddings_nextn_ithP13llama_contexti");
#define LC_HAVE_NEXTN 1
#endif

#ifndef BT_LLAMA_CPP_VERSION
#error "configure defines BT_LLAMA_CPP_VERSION with HAVE_LLAMA_CPP"
#endif

#define HASH_SIZE 8192          /* power of two, > 2x the nodes a graph names */

typedef struct entry {
    char name[64];              /* llama.cpp's node name */
    int gop;                    /* ggml op */
    int op;                     /* bt_op, or BT_OP_COUNT + extra index */
    int layer;
    int seen;                   /* forward number it was last delivered in */
} entry;

typedef struct probe_node { char name[64]; int gop; bool usable; int64_t nel; } probe_node;

typedef struct lc_impl {
    struct llama_model *model;
    struct llama_context *ctx;
    struct llama_batch batch;
    const bt_model *m;
    bt_engine *e;               /* during a forward (under mu) */
    int n_vocab, max_batch;
    int n_seq;                  /* sequences in the context (engines made on it) */
    pthread_mutex_t mu;         /* one forward at a time on the context */
    int refs;                   /* engines (lc_seq) alive, plus the maker's while making */
    int T, pos0;                /* the forward in progress */
    int forward_no;             /* numbers decode calls, for entry.seen */
    bool cancelled;
    /* the probe */
    bool probing;
    probe_node *nodes;
    int n_nodes, cap_nodes;
    /* name + op -> entry */
    entry *entries;
    int n_entries;
    int hash[HASH_SIZE];        /* entry index + 1, 0 = empty */
    bt_extra_tensor *extra;
    int n_extra;
    float *scratch;
    size_t scratch_cap;
    char backend[32];
    bool fa_used;               /* the probe saw FLASH_ATTN_EXT nodes */
    /* the probe's matmul weights by buffer type: "CPU", "CPU_REPACK", "AMX" */
    struct { char buft[16]; enum ggml_type type; int n; } wb[16];
    int n_wb, n_weights;
    struct ggml_threadpool *pool;   /* the persistent CPU threadpool (see lc_attach_pool) */
    /* the target of llama.cpp's MTP drafter (bt_llamacpp_opts.mtp_k) */
    bool nextn;                 /* h_nextn kept for every row (unmasked) */
    int n_embd;
    enum ggml_type type_k, type_v;  /* the cache's, for the MTP context */
    int mtp_layer;              /* the taps of an MTP context: its block's layer (the trunk's count); else -1 */
} lc_impl;

/* One engine's view of the context: its sequence and what it holds. */
#define LC_SEQ_MAGIC 0x6c637371u
typedef struct lc_seq {
    unsigned magic;             /* LC_SEQ_MAGIC (bt_llamacpp_mtp_engine_new checks its target) */
    lc_impl *L;
    int seq;                    /* llama.cpp seq_id */
    int n_past;                 /* positions the sequence holds */
    float *hid;                 /* (max_batch, n_embd) the last forward's h_nextn rows (L->nextn) */
    int hid_rows;
} lc_seq;

static char last_log[512];

/* llama.cpp talks a lot: keep its errors for our one-line message, the rest
 * for --debug. */
static void lc_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        snprintf(last_log, sizeof(last_log), "%s", text);
        last_log[strcspn(last_log, "\n")] = 0;
    }
    if (level >= GGML_LOG_LEVEL_WARN) bt_debug("llama.cpp: %.*s", (int)strcspn(text, "\n"), text);
}

static unsigned hash_of(const char *name, int gop)
{
    unsigned h = 2166136261u ^ (unsigned)gop;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h & (HASH_SIZE - 1);
}

static entry *lookup(const lc_impl *L, const char *name, int gop)
{
    for (unsigned h = hash_of(name, gop), n = 0; n < HASH_SIZE; h = (h + 1) & (HASH_SIZE - 1), n++) {
        int i = L->hash[h];
        if (!i) return NULL;
        entry *x = &L->entries[i - 1];
        if (x->gop == gop && !strcmp(x->name, name)) return x;
    }
    return NULL;
}

static void insert(lc_impl *L, int i)
{
    unsigned h = hash_of(L->entries[i].name, L->entries[i].gop);
    while (L->hash[h]) h = (h + 1) & (HASH_SIZE - 1);
    L->hash[h] = i + 1;
}

/* A node that computes something we can read as floats: not a view, a
 * name cb() (or node_name) gave it ("Qcur-3", not "Qcur-3 (reshaped)"), contiguous, f32 or f16. */
static bool usable(const struct ggml_tensor *t, const char *name)
{
    switch (t->op) {
    case GGML_OP_NONE: case GGML_OP_RESHAPE: case GGML_OP_VIEW: case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE:
    case GGML_OP_CPY: case GGML_OP_SET_ROWS:
        return false;
    default: break;
    }
    if (!name[0] || strpbrk(name, " ()") || !strncmp(name, "node_", 5)) return false;   /* ggml's own names */
    if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16) return false;
    return ggml_is_contiguous(t);
}

/* "Qcur-17" -> base "Qcur", layer 17; "result_norm" -> layer -1. */
static int split_name(const char *name, char *base, size_t cap)
{
    snprintf(base, cap, "%s", name);
    char *dash = strrchr(base, '-');
    if (!dash || !dash[1]) return -1;
    char *end;
    long l = strtol(dash + 1, &end, 10);
    if (*end || l < 0 || l > 100000) return -1;
    *dash = 0;
    return (int)l;
}

/* The name a node is looked up by: its own, except for the fused attention
 * (FLASH_ATTN_EXT, which llama.cpp leaves unnamed): "fattn-L", L from its
 * query ("Qcur-L (permuted)"). Its output is the heads merged, the values
 * kqv_out has without flash attention (names.c maps both to attn_ctx). */
static const char *node_name(const struct ggml_tensor *t, char *buf, size_t cap)
{
    if (t->op != GGML_OP_FLASH_ATTN_EXT) return t->name;
    const struct ggml_tensor *q = t->src[0];
    for (int hop = 0; q && hop < 8 && !strchr(q->name, '-'); hop++) q = q->view_src ? q->view_src : q->src[0];
    if (!q) return t->name;
    char full[64], base[64];
    snprintf(full, sizeof(full), "%.*s", (int)strcspn(q->name, " "), q->name);
    int layer = split_name(full, base, sizeof(base));
    if (layer < 0) return t->name;
    snprintf(buf, cap, "fattn-%d", layer);
    return buf;
}

/* The interleaved layout ggml-cpu's repack buffer type gives a weight of
 * this type on this CPU (ggml_repack_get_optimal_repack_type in the pinned
 * ggml-cpu/repack.cpp, x86 and Arm), NULL when this table does not know. */
static const char *repack_layout(enum ggml_type t, int64_t rows)
{
    bool avx2 = ggml_cpu_has_avx2(), i8mm = ggml_cpu_has_neon() && ggml_cpu_has_matmul_int8(),
         dot = ggml_cpu_has_neon() && ggml_cpu_has_dotprod();
    switch (t) {
    case GGML_TYPE_Q4_0: return avx2 && rows % 8 == 0 ? "q4_0_8x8" : i8mm && rows % 4 == 0 ? "q4_0_4x8" : dot && rows % 4 == 0 ? "q4_0_4x4" : NULL;
    case GGML_TYPE_Q4_K: return (avx2 || i8mm) && rows % 8 == 0 ? "q4_K_8x8" : dot && rows % 8 == 0 ? "q4_K_8x4" : NULL;
    case GGML_TYPE_Q2_K: return ggml_cpu_has_avx512() && rows % 8 == 0 ? "q2_K_8x8" : NULL;
    case GGML_TYPE_Q5_K: return i8mm && rows % 8 == 0 ? "q5_K_8x8" : dot && rows % 8 == 0 ? "q5_K_8x4" : NULL;
    case GGML_TYPE_Q6_K: return i8mm && rows % 8 == 0 ? "q6_K_8x8" : dot && rows % 8 == 0 ? "q6_K_8x4" : NULL;
    case GGML_TYPE_IQ4_NL: return avx2 && rows % 8 == 0 ? "iq4_nl_8x8" : dot && rows % 4 == 0 ? "iq4_nl_4x4" : NULL;
    case GGML_TYPE_MXFP4: return avx2 && rows % 8 == 0 ? "mxfp4_8x8" : dot && rows % 4 == 0 ? "mxfp4_4x4" : NULL;
    case GGML_TYPE_Q8_0: return i8mm && rows % 4 == 0 ? "q8_0_4x8" : dot && rows % 4 == 0 ? "q8_0_4x4" : NULL;
    default: return NULL;
    }
}

/* What computed t, for the first_nonfinite event: "MUL_MAT q4_1 (activations
 * as q8_1) on CPU". */
static void kernel_of(const struct ggml_tensor *t, char *buf, size_t cap)
{
    const char *be = t->buffer ? ggml_backend_buffer_name(t->buffer) : "?";
    const struct ggml_tensor *w = t->src[0];
    const char *wb = w && w->buffer ? ggml_backend_buffer_name(w->buffer) : "";
    if (t->op == GGML_OP_MUL_MAT && w && (!strcmp(wb, "CPU_REPACK") || !strcmp(wb, "AMX"))) {
        /* weights in an extra buffer type: that type's own kernel, not vec_dot */
        const struct ggml_type_traits_cpu *tc = ggml_get_type_traits_cpu(w->type);
        const char *lay = !strcmp(wb, "AMX") ? NULL : repack_layout(w->type, w->ne[1]);
        snprintf(buf, cap, "MUL_MAT %s %s%s (%s %s, activations as %s) on %s [llama.cpp]", ggml_type_name(w->type),
                 lay ? "repacked as " : !strcmp(wb, "AMX") ? "in AMX tiles" : "repacked", lay ? lay : "", wb,
                 !strcmp(wb, "AMX") ? "tinygemm" : "gemm/gemv", tc ? ggml_type_name(tc->vec_dot_type) : "?", be);
    } else if (t->op == GGML_OP_FLASH_ATTN_EXT && t->src[1] && t->src[2]) {
        snprintf(buf, cap, "FLASH_ATTN_EXT (fused kq, softmax, kqv; K %s, V %s) on %s [llama.cpp]", ggml_type_name(t->src[1]->type),
                 ggml_type_name(t->src[2]->type), be);
    } else if ((t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_GET_ROWS) && w) {
        const struct ggml_type_traits_cpu *tc = ggml_get_type_traits_cpu(w->type);
        if (t->op == GGML_OP_MUL_MAT && tc && tc->vec_dot_type != GGML_TYPE_F32 && !strncmp(be, "CPU", 3))
            snprintf(buf, cap, "%s %s (activations as %s) on %s [llama.cpp]", ggml_op_desc(t), ggml_type_name(w->type),
                     ggml_type_name(tc->vec_dot_type), be);
        else
            snprintf(buf, cap, "%s %s on %s [llama.cpp]", ggml_op_desc(t), ggml_type_name(w->type), be);
    } else {
        snprintf(buf, cap, "%s %s on %s [llama.cpp]", ggml_op_desc(t), ggml_type_name(t->type), be);
    }
}

/* The one place that talks to the tap (see the file comment). Returns false
 * when the callback cancelled the forward. */
static bool deliver(lc_impl *L, const entry *x, struct ggml_tensor *t)
{
    int64_t nel = ggml_nelements(t);
    bool host = t->buffer && ggml_backend_buffer_is_host(t->buffer);
    float *data = NULL;
    if (host && t->type == GGML_TYPE_F32) data = t->data;
    else {
        if ((size_t)nel > L->scratch_cap) {
            float *s = realloc(L->scratch, (size_t)nel * sizeof(float));
            if (!s) { bt_error(BT_ENOMEM, "out of memory copying llama.cpp tensor %s", t->name); return false; }
            L->scratch = s;
            L->scratch_cap = (size_t)nel;
        }
        data = L->scratch;
        if (t->type == GGML_TYPE_F32) ggml_backend_tensor_get(t, data, 0, (size_t)nel * sizeof(float));
        else {
            ggml_fp16_t *h = malloc((size_t)nel * sizeof(ggml_fp16_t));
            if (!h) { bt_error(BT_ENOMEM, "out of memory copying llama.cpp tensor %s", t->name); return false; }
            ggml_backend_tensor_get(t, h, 0, (size_t)nel * sizeof(ggml_fp16_t));
            ggml_fp16_to_fp32_row(h, data, nel);
            free(h);
        }
    }
    /* rows are positions when the outermost dimension is the batch */
    int outer = t->ne[3] > 1 ? 3 : t->ne[2] > 1 ? 2 : t->ne[1] > 1 ? 1 : 0;
    int rows = (t->ne[outer] == L->T && nel % L->T == 0) ? L->T : 1;
    char kern[160];
    kernel_of(t, kern, sizeof(kern));
    /* The seam's tensor-handle contract: a view with no backend tensor
     * (.tensor NULL) lives on the host, so bt_tensor_stats/read/mutate work
     * on `data`, our host copy, synchronously (the recorder computes the
     * statistics in observe and writes them at the forward's flush, after
     * this copy is gone). The kernel name is copied by the recorder too. */
    bt_tensor_view v = { .op = x->op, .layer = x->layer, .pos0 = L->pos0, .rows = rows,
                         .width = (int)(nel / rows), .data = data, .tensor = NULL, .kernel = kern };
    bool ok = bt_engine_tap_deliver(L->e, &v);
    /* an injection changed the copy: llama.cpp must compute with it */
    if (data != t->data && t->type == GGML_TYPE_F32) ggml_backend_tensor_set(t, data, 0, (size_t)nel * sizeof(float));
    return ok;
}

static bool cb_eval(struct ggml_tensor *t, bool ask, void *user)
{
    lc_impl *L = user;
    if (L->probing) {
        if (!ask) return true;
        if (L->n_nodes == L->cap_nodes) {
            int nc = L->cap_nodes ? 2 * L->cap_nodes : 1024;
            probe_node *nn = realloc(L->nodes, (size_t)nc * sizeof(*nn));
            if (!nn) return false;
            L->nodes = nn;
            L->cap_nodes = nc;
        }
        probe_node *p = &L->nodes[L->n_nodes++];
        char nb[64];
        snprintf(p->name, sizeof(p->name), "%s", node_name(t, nb, sizeof(nb)));
        if (t->op == GGML_OP_FLASH_ATTN_EXT) L->fa_used = true;
        const struct ggml_tensor *w = t->src[0];
        if (t->op == GGML_OP_MUL_MAT && w && w->buffer && w->op == GGML_OP_NONE) {
            const char *bn = ggml_backend_buffer_name(w->buffer);
            int k = 0;
            while (k < L->n_wb && (strcmp(L->wb[k].buft, bn) || L->wb[k].type != w->type)) k++;
            if (k == L->n_wb && k < 16) {
                snprintf(L->wb[k].buft, sizeof(L->wb[k].buft), "%s", bn);
                L->wb[k].type = w->type;
                L->n_wb++;
            }
            if (k < 16) L->wb[k].n++;
            L->n_weights++;
        }
        p->gop = t->op;
        p->usable = usable(t, p->name);
        p->nel = ggml_nelements(t);
        return false;
    }
    char nb[64];
    entry *x = lookup(L, node_name(t, nb, sizeof(nb)), t->op);
    /* a name and op computed twice in one graph (norm-3: RMS_NORM before
     * attn_norm and before ffn_norm) is recorded at its first node */
    if (!x || x->seen == L->forward_no) return false;
    if (ask) return bt_engine_tap_wanted(L->e, x->op, x->layer);
    x->seen = L->forward_no;
    if (!deliver(L, x, t)) { L->cancelled = true; return false; }
    return true;
}

/* From the probe's node list: the last computing node of each name maps
 * to a bt_op (when the table has one and its width agrees); every other
 * computing node is an extra tensor, named as llama.cpp names it (an
 * earlier node of a repeated name gets ".<op>": Qcur-3.mul_mat). */
static int build_table(lc_impl *L)
{
    L->entries = calloc((size_t)L->n_nodes + 1, sizeof(entry));
    L->extra = calloc((size_t)L->n_nodes + 1, sizeof(bt_extra_tensor));
    if (!L->entries || !L->extra) return bt_error(BT_ENOMEM, "out of memory");
    const bt_config *c = &L->m->cfg;
    for (int i = 0; i < L->n_nodes; i++) {
        probe_node *p = &L->nodes[i];
        if (!p->usable) continue;
        bool last = true;
        for (int j = i + 1; j < L->n_nodes && last; j++)
            if (L->nodes[j].usable && !strcmp(L->nodes[j].name, p->name)) last = false;
        if (lookup(L, p->name, p->gop)) continue;   /* the same name and op twice: the first wins */
        char base[64];
        int layer = split_name(p->name, base, sizeof(base)), at = layer;
        bool mtp = L->mtp_layer >= 0;
        if (layer >= c->n_layers && !(mtp && layer == L->mtp_layer)) continue;
        int op = !last ? -1 : mtp ? bt_llamacpp_map_mtp_name(c, base, &at) : bt_llamacpp_map_name_in(c, base, layer);
        if (op >= 0) layer = at;
        /* the layer's width: a deepseek2's leading dense FFN is wider than an expert */
        if (op >= 0 && (bt_op_is_layer_op(op) != (layer >= 0) || p->nel != bt_op_layer_width(c, op, layer))) {
            bt_debug("llama.cpp tensor %s (%s) has %lld values per row, %s has %d: kept under its own name",
                     p->name, ggml_op_name(p->gop), (long long)p->nel, bt_op_name(op), bt_op_layer_width(c, op, layer));
            op = -1;
        }
        entry *x = &L->entries[L->n_entries];
        snprintf(x->name, sizeof(x->name), "%s", p->name);
        x->gop = p->gop;
        x->layer = layer;
        if (op >= 0) x->op = op;
        else {
            bt_extra_tensor *xt = &L->extra[L->n_extra];
            x->op = BT_OP_COUNT + L->n_extra++;
            char lower[32];
            snprintf(lower, sizeof(lower), "%s", ggml_op_name(p->gop));
            for (char *q = lower; *q; q++) if (*q >= 'A' && *q <= 'Z') *q += 32;
            if (last) snprintf(xt->name, sizeof(xt->name), "%s", p->name);
            else snprintf(xt->name, sizeof(xt->name), "%.40s.%.20s", p->name, lower);
            if (last) snprintf(xt->op, sizeof(xt->op), "%.31s", base);   /* base is at most 63: cut to the field */
            else snprintf(xt->op, sizeof(xt->op), "%.20s.%.10s", base, lower);
            xt->layer = layer;
            xt->width = (int)(p->nel > 0x7fffffff ? 0x7fffffff : p->nel);
        }
        insert(L, L->n_entries++);
    }
    int mapped = 0;
    for (int i = 0; i < L->n_entries; i++) mapped += L->entries[i].op < BT_OP_COUNT;
    int expect = 3 + BT_OP_FFN_RESID * c->n_layers;
    bt_debug("llama.cpp graph: %d nodes, %d tensors mapped to bangtrace names (of %d), %d kept under llama.cpp names",
             L->n_nodes, mapped, expect, L->n_extra);
    if (mapped == 0)
        return bt_error(BT_EUNSUPPORTED, "%s: none of llama.cpp's graph tensors has a bangtrace name (architecture %s?)",
                        L->m->path, L->m->cfg.arch);
    return BT_OK;
}

/* One llama_decode of S's tokens only (the caller holds L->mu). */
static int decode(lc_impl *L, lc_seq *S, const int32_t *tokens, int T, int pos0)
{
    llama_memory_t mem = llama_get_memory(L->ctx);
    if (pos0 < S->n_past && !llama_memory_seq_rm(mem, S->seq, pos0, -1))
        return bt_error(BT_EINTERNAL, "llama.cpp: cannot remove positions %d.. of sequence %d", pos0, S->seq);
    if (pos0 < S->n_past) S->n_past = pos0;
    L->batch.n_tokens = T;
    for (int i = 0; i < T; i++) {
        L->batch.token[i] = tokens[i];
        L->batch.pos[i] = pos0 + i;
        L->batch.n_seq_id[i] = 1;
        L->batch.seq_id[i][0] = S->seq;
        L->batch.logits[i] = 1;
    }
    L->T = T;
    L->pos0 = pos0;
    L->cancelled = false;
    L->forward_no++;
    last_log[0] = 0;
    int32_t r = llama_decode(L->ctx, L->batch);
    if (L->cancelled) return BT_EINVAL;     /* the callback set the message */
    /* the engine's failure, not the request's (serve answers 500, not 400) */
    if (r != 0)
        return bt_error(BT_EINTERNAL, "llama.cpp: llama_decode of %d tokens at position %d failed (%d)%s%s", T, pos0, (int)r,
                        last_log[0] ? ": " : "", last_log);
    S->n_past = pos0 + T;
    return BT_OK;
}

static int lc_forward(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits)
{
    lc_seq *S = impl;
    lc_impl *L = S->L;
    pthread_mutex_lock(&L->mu);
    L->e = e;
    int rc = BT_OK;
    for (int done = 0; done < T && rc == BT_OK; done += L->max_batch) {
        int n = T - done < L->max_batch ? T - done : L->max_batch;
        if ((rc = decode(L, S, tokens + done, n, pos0 + done))) break;
        for (int i = 0; i < n && rc == BT_OK; i++) {
            const float *row = llama_get_logits_ith(L->ctx, i);
            if (!row) rc = bt_error(BT_EINTERNAL, "llama.cpp returned no logits for row %d", i);
            else memcpy(logits + (size_t)(done + i) * L->n_vocab, row, (size_t)L->n_vocab * sizeof(float));
        }
#ifdef LC_HAVE_NEXTN
        /* the rows of the last decode (the decoder's forwards are one
         * decode: it chunks by the engine's batch) */
        S->hid_rows = 0;
        for (int i = 0; L->nextn && i < n && rc == BT_OK; i++) {
            const float *h = lc_get_embeddings_nextn_ith(L->ctx, i);
            if (!h) rc = bt_error(BT_EINTERNAL, "llama.cpp returned no h_nextn for row %d", i);
            else memcpy(S->hid + (size_t)i * L->n_embd, h, (size_t)L->n_embd * sizeof(float));
            if (rc == BT_OK) S->hid_rows = i + 1;
        }
#endif
    }
    L->e = NULL;
    pthread_mutex_unlock(&L->mu);
    return rc;
}

/* A persistent CPU threadpool attached to the context, as llama.cpp's own
 * programs do (common_init_from_params: llama-cli, llama-server,
 * llama-bench), with their default polling level (50). Without one,
 * ggml-cpu makes a disposable pool per graph_compute call, i.e. creates and
 * joins its worker threads once per graph split, and every tapped node ends
 * a split: with 2 threads and --taps all that was 100x slower than 1 thread
 * (doc/llama-cpp.md, "The cost of taps on llama.cpp"). */
static int lc_attach_pool(lc_impl *L, int n_threads)
{
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
    tpp.poll = 50;
    L->pool = ggml_threadpool_new(&tpp);
    if (!L->pool) return bt_error(BT_ENOMEM, "llama.cpp: cannot create a threadpool of %d threads", n_threads);
    llama_attach_threadpool(L->ctx, L->pool, L->pool);
    return BT_OK;
}

/* What a tap state holds of its own: the probe's nodes, the name table,
 * the extra tensors, the copy scratch. */
static void lc_taps_free(lc_impl *L)
{
    free(L->nodes);
    free(L->entries);
    free(L->extra);
    free(L->scratch);
}

static void lc_destroy(lc_impl *L)
{
    if (!L) return;
    if (L->batch.token) llama_batch_free(L->batch);
    if (L->ctx) llama_free(L->ctx);
    if (L->pool) ggml_threadpool_free(L->pool);
    if (L->model) llama_model_free(L->model);
    lc_taps_free(L);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

/* Drop one reference to the context; the last frees it. */
static void lc_unref(lc_impl *L)
{
    pthread_mutex_lock(&L->mu);
    bool last = --L->refs == 0;
    pthread_mutex_unlock(&L->mu);
    if (last) lc_destroy(L);
}

static void lc_free(void *impl)
{
    lc_seq *S = impl;
    if (!S) return;
    lc_impl *L = S->L;
    free(S->hid);
    free(S);
    lc_unref(L);
}

static int lc_hidden_rows(void *impl, int row0, int n, float *dst)
{
    lc_seq *S = impl;
    if (!S->L->nextn) return bt_error(BT_EUNSUPPORTED, "this llama.cpp engine keeps no hidden rows (made without the MTP drafter)");
    if (row0 < 0 || n < 0 || row0 + n > S->hid_rows)
        return bt_error(BT_ERANGE, "hidden rows %d..%d of a forward of %d rows", row0, row0 + n - 1, S->hid_rows);
    memcpy(dst, S->hid + (size_t)row0 * S->L->n_embd, (size_t)n * S->L->n_embd * sizeof(float));
    return BT_OK;
}

static char last_path[512];

static enum ggml_type kv_type(const char *s)
{
    return !strcmp(s, "f32") ? GGML_TYPE_F32 : !strcmp(s, "bf16") ? GGML_TYPE_BF16 : !strcmp(s, "q8_0") ? GGML_TYPE_Q8_0
                                                                                                      : GGML_TYPE_F16;
}

/* Whether this process may use AMX tiles: the kernel's permission request
 * for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
 * then a read-back of the granted features. A CPU that reports AMX under a
 * hypervisor or kernel that does not enable the tiles fails here, where
 * an AMX instruction would raise SIGILL. */
static bool amx_tiles_usable(void)
{
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM_ = 0x1022, ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_)) return false;
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM_, &granted)) return false;
    return (granted >> XFEATURE_XTILEDATA_) & 1;
#else
    return false;
#endif
}

/* With repacking on, the CPU's extra buffer types are AMX (in a build for
 * a CPU with AMX) and CPU_REPACK. When the tiles are not usable here, or
 * the settings say amx=off, drop only AMX from ggml-cpu's list (the array
 * ggml_backend_dev_get_extra_bufts returns, which llama.cpp walks at model
 * load), saying so once; the repacked layouts stay. Returns how AMX stands,
 * for the path. */
static const char *amx_check(bool off)
{
    static bool said;
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = reg ? ggml_backend_reg_dev_get(reg, 0) : NULL;
    typedef ggml_backend_buffer_type_t *(*extra_fn)(ggml_backend_dev_t);
    extra_fn f = dev ? (extra_fn)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts") : NULL;
    ggml_backend_buffer_type_t *b = f ? f(dev) : NULL;
    int at = -1, n = 0;
    for (; b && b[n]; n++) if (!strcmp(ggml_backend_buft_name(b[n]), "AMX")) at = n;
    if (!ggml_cpu_has_amx_int8() && at < 0) return "not in this build";
    bool usable = amx_tiles_usable();
    if (usable && !off) return at >= 0 ? "on" : "not offered by ggml-cpu";
    if (at >= 0) memmove(b + at, b + at + 1, (size_t)(n - at) * sizeof(*b));   /* the NULL end moves too */
    if (!usable && !said) {
        fprintf(stderr, "bangtrace: note: this CPU reports AMX but its tiles are not usable here (arch_prctl "
                        "ARCH_REQ_XCOMP_PERM refused): llama.cpp's AMX buffer type is dropped, the other repacked layouts stay\n");
        said = true;
    }
    return usable ? "off (amx=off)" : "dropped (tiles not usable)";
}

static void describe_path(const lc_impl *L, const char *fa, bool repack, const char *amx, enum ggml_type tk, enum ggml_type tv)
{
    char w[320];
    size_t u = 0;
    int n_extra = 0;
    for (int k = 0; k < L->n_wb; k++)
        if (strcmp(L->wb[k].buft, "CPU") && strcmp(L->wb[k].buft, "CPU_Mapped")) n_extra += L->wb[k].n;
    u += (size_t)snprintf(w, sizeof(w), "%d of %d matmul weights in extra buffer types", n_extra, L->n_weights);
    bool first = true;
    for (int k = 0; k < L->n_wb && u < sizeof(w); k++) {
        if (!strcmp(L->wb[k].buft, "CPU") || !strcmp(L->wb[k].buft, "CPU_Mapped")) continue;
        const char *lay = !strcmp(L->wb[k].buft, "CPU_REPACK") ? repack_layout(L->wb[k].type, 8) : NULL;
        u += (size_t)snprintf(w + u, sizeof(w) - u, "%s%d %s in %s%s%s", first ? " (" : ", ", L->wb[k].n,
                              ggml_type_name(L->wb[k].type), L->wb[k].buft, lay ? " as " : "", lay ? lay : "");
        first = false;
    }
    if (!first && u < sizeof(w) - 1) { w[u++] = ')'; w[u] = 0; }
    snprintf(last_path, sizeof(last_path), "flash attention %s (%s%s); repack %s: %s; KV cache %s%s%s; AMX %s",
             L->fa_used ? "on" : "off", fa, L->fa_used ? ": FLASH_ATTN_EXT" : ": kq, kq_soft_max", repack ? "on" : "off", w,
             ggml_type_name(tk), tk == tv ? "" : "/", tk == tv ? "" : ggml_type_name(tv), amx);
}

const char *bt_llamacpp_last_path(void) { return last_path; }

/* The context and its n engines (bt_llamacpp_engines_new). */
static int lc_make(const bt_model *m, const bt_llamacpp_opts *o, int n_seq, bt_engine **out)
{
    for (int i = 0; i < n_seq; i++) out[i] = NULL;
    enum { MAX_SEQ = 256 };     /* llama.cpp's LLAMA_MAX_SEQ (src/llama-cparams.h, not in llama.h) */
    if (n_seq < 1 || n_seq > MAX_SEQ)
        return bt_error(BT_EINVAL, "llama.cpp: %d sequences in one context (1 to %d)", n_seq, (int)MAX_SEQ);
    const char *ggml;        /* the device table's row as llama.cpp names its backend */
    if (bt_llamacpp_device(o->device, &ggml)) return BT_EINVAL;
    last_log[0] = 0;
    llama_log_set(lc_log, NULL);
    llama_backend_init();
    bool cuda = !strcmp(ggml, "CUDA");
    if (cuda) {
        /* two different fixes: a CPU build needs rebuilding; a CUDA build
         * with no device needs a driver or a visible GPU */
        ggml_backend_reg_t reg = ggml_backend_reg_by_name(ggml);
        if (!reg)
            return bt_error(BT_EUNSUPPORTED, "--device cuda: the linked llama.cpp (%s) has no CUDA backend; build it with "
                            "tools/llama-cpp --cuda and configure --with-llama-cpp-cuda", BT_LLAMA_CPP_VERSION);
        if (ggml_backend_reg_dev_count(reg) == 0 || !ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU))
            return bt_error(BT_EUNSUPPORTED, "--device cuda: llama.cpp's CUDA backend finds no GPU (no driver, or "
                            "CUDA_VISIBLE_DEVICES hides them)%s%s", last_log[0] ? ": " : "", last_log);
    }
    lc_impl *L = calloc(1, sizeof(*L));
    if (!L) return bt_error(BT_ENOMEM, "out of memory");
    pthread_mutex_init(&L->mu, NULL);
    L->refs = 1;                /* the maker's, dropped at the end */
    L->n_seq = n_seq;
    L->m = m;
    L->mtp_layer = -1;
    L->max_batch = o->max_batch > 0 ? o->max_batch : 1;
    int rc = BT_OK;
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = cuda ? 9999 : 0;     /* all layers and the output on the GPU */
    /* llama.cpp's own defaults unless the settings say otherwise
     * (doc/llama-cpp.md, "Which llama.cpp path"): the extra CPU buffer types
     * on (weights repacked into interleaved layouts, AMX tiles), flash
     * attention auto, an f16 cache. */
    /* a caller that passes no settings (one without the --llama-* flags)
     * still gets the environment aliases over llama.cpp's defaults */
    bt_llama_settings env_only = { 0 };
    if (!o->llama && (rc = bt_llama_settings_env(&env_only))) { lc_unref(L); return rc; }
    const bt_llama_settings *ls = o->llama ? o->llama : &env_only;
    bool repack = !ls->repack || strcmp(ls->repack, "off");
    mp.use_extra_bufts = repack;
    if (o->mtp_k > 0) {
#ifndef LC_HAVE_NEXTN
        rc = bt_error(BT_EUNSUPPORTED, "--draft-mtp with --engine llama.cpp needs llama.cpp's nextn API (an ELF build with GCC or clang)");
        goto fail;
#endif
        if (m->cfg.n_nextn <= 0) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: the model has no MTP (nextn) block to draft with (architecture %s, "
                          "nextn_predict_layers 0)", m->path, m->cfg.arch);
            goto fail;
        }
        if (n_seq != 1) { rc = bt_error(BT_EINVAL, "llama.cpp's MTP drafter drafts for one sequence"); goto fail; }
        mp.load_mtp = true;
    }
    const char *amx = cuda ? "n/a (CUDA)" : "unused (repack off)";
    if (repack && !cuda) amx = amx_check(ls->amx && !strcmp(ls->amx, "off"));
    last_log[0] = 0;
    L->model = llama_model_load_from_file(o->model_path, mp);
    if (!L->model) {
        rc = bt_error(BT_EINVAL, "llama.cpp cannot load %s%s%s", o->model_path, last_log[0] ? ": " : "", last_log);
        goto fail;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(L->model);
    L->n_vocab = llama_vocab_n_tokens(vocab);
    if (L->n_vocab != m->cfg.n_vocab || llama_model_n_layer(L->model) != m->cfg.n_layers) {
        rc = bt_error(BT_EINVAL, "%s: llama.cpp sees %d layers and %d tokens, bangtrace %d and %d: not the same model",
                      o->model_path, llama_model_n_layer(L->model), L->n_vocab, m->cfg.n_layers, m->cfg.n_vocab);
        goto fail;
    }
    struct llama_context_params cp = llama_context_default_params();
    /* ctx_len per sequence; with several, a KV cache per sequence, as
     * llama-server --parallel N has it (kv_unified is its default only for
     * the automatic slot count) */
    uint32_t ctx_seq = (uint32_t)(o->ctx_len > 0 ? o->ctx_len : 4096);
    cp.n_ctx = ctx_seq * (uint32_t)n_seq;
    cp.n_batch = cp.n_ubatch = (uint32_t)(L->max_batch < 8 ? 8 : L->max_batch);
    cp.n_seq_max = (uint32_t)n_seq;
    cp.kv_unified = false;
    cp.n_threads = cp.n_threads_batch = o->n_threads > 0 ? o->n_threads : 1;
    /* Flash attention auto (llama.cpp's default: on for the CPU) fuses kq,
     * its softmax and kqv into one FLASH_ATTN_EXT node, tapped as attn_ctx
     * (node_name); off keeps kq and kq_soft_max as tensors. */
    const char *fa = ls->flash_attn ? ls->flash_attn : "auto";
    cp.flash_attn_type = !strcmp(fa, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : !strcmp(fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (o->kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;   /* forward --engine llama.cpp */
    if (ls->type_k) cp.type_k = kv_type(ls->type_k);
    if (ls->type_v) cp.type_v = kv_type(ls->type_v);
    L->type_k = cp.type_k;
    L->type_v = cp.type_v;
    cp.cb_eval = cb_eval;
    cp.cb_eval_user_data = L;
    cp.no_perf = true;
    /* a rejected draft rolls a hybrid's recurrent state back to one of
     * these snapshots (llama_memory_seq_rm), as llama-server's does */
    if (o->mtp_k > 0) cp.n_rs_seq = (uint32_t)o->mtp_k;
    L->ctx = llama_init_from_model(L->model, cp);
    if (!L->ctx) {
        rc = bt_error(BT_EINVAL, "llama.cpp cannot create a context for %s (context %u, %d sequence%s)%s%s", o->model_path,
                      cp.n_ctx, n_seq, n_seq == 1 ? "" : "s", last_log[0] ? ": " : "", last_log);
        goto fail;
    }
    if ((rc = lc_attach_pool(L, (int)cp.n_threads))) goto fail;
    L->n_embd = llama_model_n_embd(L->model);
    if (o->mtp_k > 0) {
        if (llama_model_n_layer_nextn(L->model) < 1 || L->n_embd != m->cfg.dim) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: llama.cpp loads no MTP (nextn) block to draft with (%d nextn layers)",
                          o->model_path, (int)llama_model_n_layer_nextn(L->model));
            goto fail;
        }
        /* llama.cpp clamps n_rs_seq to 0 on an architecture whose recurrent
         * state it cannot partially roll back (llm_arch_supports_rs_rollback):
         * a rejected draft would stay in the state */
        if ((llama_model_is_recurrent(L->model) || llama_model_is_hybrid(L->model)) && llama_n_rs_seq(L->ctx) < (uint32_t)o->mtp_k) {
            rc = bt_error(BT_EUNSUPPORTED, "%s: llama.cpp cannot roll back the recurrent state of architecture %s after a "
                          "rejected draft (no n_rs_seq snapshots): --draft-mtp with --engine llama.cpp needs one it can "
                          "(qwen35, qwen35moe)", o->model_path, m->cfg.arch);
            goto fail;
        }
#ifdef LC_HAVE_NEXTN
        lc_set_embeddings_nextn(L->ctx, true, false);   /* the trunk's h_nextn, every row */
#endif
        L->nextn = true;
    }
    L->max_batch = (int)cp.n_batch;
    L->batch = llama_batch_init(L->max_batch, 0, 1);
    snprintf(L->backend, sizeof(L->backend), "%s", ggml);
    /* The probe: one forward of one token, every node asked and none
     * wanted; it tells us the names (and the backend) before any trace
     * tensor is registered. The cache is cleared after. */
    {
        int32_t tok0 = 0;
        lc_seq probe = { .L = L, .seq = 0 };
        L->probing = true;
        rc = decode(L, &probe, &tok0, 1, 0);
        L->probing = false;
        llama_memory_clear(llama_get_memory(L->ctx), true);
        if (rc) goto fail;
        if ((rc = build_table(L))) goto fail;
    }
    describe_path(L, fa, repack, amx, cp.type_k, cp.type_v);
    /* the context llama.cpp made per sequence (it pads to 256 cells) */
    int n_ctx_seq = (int)(llama_n_ctx(L->ctx) / (uint32_t)n_seq);
    for (int i = 0; i < n_seq && rc == BT_OK; i++) {
        lc_seq *S = calloc(1, sizeof(*S));
        if (!S) { rc = bt_error(BT_ENOMEM, "out of memory"); break; }
        S->magic = LC_SEQ_MAGIC;
        S->L = L;
        S->seq = i;
        if (L->nextn && !(S->hid = malloc((size_t)L->max_batch * L->n_embd * sizeof(float)))) {
            free(S);
            rc = bt_error(BT_ENOMEM, "out of memory");
            break;
        }
        pthread_mutex_lock(&L->mu);
        L->refs++;
        pthread_mutex_unlock(&L->mu);
        bt_engine_ext ext = { .forward = lc_forward, .free = lc_free, .impl = S, .extra = L->extra, .n_extra = L->n_extra,
                              .hidden_rows = lc_hidden_rows };
        rc = bt_engine_new_ext(m, n_ctx_seq < (int)ctx_seq ? n_ctx_seq : (int)ctx_seq, L->max_batch, &ext, &out[i]);
    }
    if (rc) {
        for (int i = 0; i < n_seq; i++) { bt_engine_free(out[i]); out[i] = NULL; }
    }
    lc_unref(L);
    return rc;
fail:
    lc_unref(L);
    return rc;
}

/* ---- llama.cpp's MTP drafter (bt_llamacpp_mtp_engine_new) ----
 *
 * As common/speculative.cpp's draft-mtp drives it: a context of type
 * LLAMA_CONTEXT_TYPE_MTP on the target's model (its own KV cache for the
 * block's one attention layer, no recurrent state), each row a token with
 * its state embedding (llama_batch_ext_set_embd_token), one llama_process
 * per forward. The decoder (gen/decode.c, BT_DRAFT_MTP) does the pairing:
 * position p takes (h_{p-1}, x_p), h the target's h_nextn or, drafting
 * ahead, the block's own. */
typedef struct lc_mtp {
    lc_impl *L;                 /* the target's (a reference: the model) */
    lc_impl *tp;                /* the MTP graph's taps: its probe, names and extra tensors (cb_eval's) */
    struct llama_context *ctx;
    struct llama_batch_ext *b;
    const float *h;             /* the next forward's state rows (borrowed) */
    float *hid;                 /* (max_batch, n_embd) the last forward's h_nextn */
    int hid_rows, n_past, max_batch;
} lc_mtp;

static int mtp_set_hidden(void *impl, const float *h)
{
    ((lc_mtp *)impl)->h = h;
    return BT_OK;
}

static int mtp_hidden_rows(void *impl, int row0, int n, float *dst)
{
    lc_mtp *M = impl;
    if (row0 < 0 || n < 0 || row0 + n > M->hid_rows)
        return bt_error(BT_ERANGE, "hidden rows %d..%d of an MTP forward of %d rows", row0, row0 + n - 1, M->hid_rows);
    memcpy(dst, M->hid + (size_t)row0 * M->L->n_embd, (size_t)n * M->L->n_embd * sizeof(float));
    return BT_OK;
}

static int mtp_forward(void *impl, bt_engine *e, const int32_t *tokens, int T, int pos0, float *logits)
{
    lc_mtp *M = impl;
    lc_impl *L = M->L, *tp = M->tp;
    if (!M->h) return bt_error(BT_EINVAL, "an MTP forward needs its hidden rows (bt_engine_set_mtp_hidden)");
    if (T < 1 || T > M->max_batch) return bt_error(BT_EINVAL, "an MTP forward of %d rows (1 to %d)", T, M->max_batch);
    int rc = BT_OK;
    pthread_mutex_lock(&L->mu);
    tp->e = e;                  /* NULL in the probe */
    tp->T = T;
    tp->pos0 = pos0;
    tp->cancelled = false;
    tp->forward_no++;
    /* draft positions of an earlier call are overwritten (the decoder's
     * catch-up starts where the block's real pairs end) */
    if (pos0 < M->n_past && !llama_memory_seq_rm(llama_get_memory(M->ctx), 0, pos0, -1))
        rc = bt_error(BT_EINTERNAL, "llama.cpp: cannot remove positions %d.. of the MTP context", pos0);
    if (pos0 < M->n_past) M->n_past = pos0;
    llama_batch_ext_clear(M->b);
    for (int i = 0; i < T && rc == BT_OK; i++) {
        llama_pos pos[4] = { pos0 + i, 0, 0, 0 };
        int32_t idx = llama_batch_ext_add_token(M->b, 0, tokens[i]);
        struct llama_embd em = { M->h + (size_t)i * L->n_embd, 1, (size_t)L->n_embd };
        if (idx != i || !llama_batch_ext_set_pos(M->b, idx, pos) || !llama_batch_ext_set_embd_token(M->b, idx, em)
            || !llama_batch_ext_set_output_logits(M->b, idx, true))
            rc = bt_error(BT_EINTERNAL, "llama.cpp: cannot build the MTP batch at row %d", i);
    }
    last_log[0] = 0;
    int32_t r = rc ? 0 : llama_process(M->ctx, LLAMA_PROCESS_TYPE_DECODE, M->b);
    if (rc == BT_OK && tp->cancelled) rc = BT_EINVAL;      /* the callback set the message */
    else if (rc == BT_OK && r != 0)
        rc = bt_error(BT_EINTERNAL, "llama.cpp: the MTP block's llama_process of %d tokens at position %d failed (%d)%s%s", T,
                      pos0, (int)r, last_log[0] ? ": " : "", last_log);
    M->hid_rows = 0;
    for (int i = 0; i < T && rc == BT_OK; i++) {
        const float *row = llama_get_logits_ith(M->ctx, i);
#ifdef LC_HAVE_NEXTN
        const float *h = lc_get_embeddings_nextn_ith(M->ctx, i);
#else
        const float *h = NULL;
#endif
        if (!row || !h) rc = bt_error(BT_EINTERNAL, "llama.cpp's MTP block returned no %s for row %d", row ? "h_nextn" : "logits", i);
        else {
            memcpy(logits + (size_t)i * L->n_vocab, row, (size_t)L->n_vocab * sizeof(float));
            memcpy(M->hid + (size_t)i * L->n_embd, h, (size_t)L->n_embd * sizeof(float));
            M->hid_rows = i + 1;
        }
    }
    if (rc == BT_OK) M->n_past = pos0 + T;
    M->h = NULL;
    tp->e = NULL;
    pthread_mutex_unlock(&L->mu);
    return rc;
}

static void mtp_free(void *impl)
{
    lc_mtp *M = impl;
    if (!M) return;
    if (M->b) llama_batch_ext_free(M->b);
    if (M->ctx) llama_free(M->ctx);
    free(M->hid);
    if (M->tp) lc_taps_free(M->tp);
    free(M->tp);
    lc_impl *L = M->L;
    free(M);
    if (L) lc_unref(L);
}

int bt_llamacpp_mtp_engine_new(bt_engine *target, bt_engine **out)
{
    *out = NULL;
    lc_seq *S = bt_engine_foreign_impl(target);
    if (!S || S->magic != LC_SEQ_MAGIC || !S->L->nextn)
        return bt_error(BT_EINVAL, "llama.cpp's MTP drafter needs a llama.cpp target made for it (mtp_k > 0)");
    lc_impl *L = S->L;
    lc_mtp *M = calloc(1, sizeof(*M));
    if (!M) return bt_error(BT_ENOMEM, "out of memory");
    pthread_mutex_lock(&L->mu);
    L->refs++;
    pthread_mutex_unlock(&L->mu);
    M->L = L;
    M->max_batch = L->max_batch;
    int rc = BT_OK;
    /* the MTP graph's taps: a tap state of its own, as the target's */
    if (!(M->tp = calloc(1, sizeof(*M->tp)))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    M->tp->m = L->m;
    M->tp->n_vocab = L->n_vocab;
    M->tp->mtp_layer = L->m->cfg.n_layers;
    struct llama_context_params cp = llama_context_default_params();
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.cb_eval = cb_eval;
    cp.cb_eval_user_data = M->tp;
    cp.n_ctx = llama_n_ctx(L->ctx);           /* as many cells as the target's, as common_speculative_init does */
    cp.n_batch = cp.n_ubatch = (uint32_t)L->max_batch;
    cp.n_seq_max = 1;
    cp.n_rs_seq = 0;
    cp.n_threads = cp.n_threads_batch = llama_n_threads(L->ctx);
    /* the target's path: its flash attention and cache types */
    cp.flash_attn_type = L->fa_used ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = L->type_k;
    cp.type_v = L->type_v;
    cp.no_perf = true;
    last_log[0] = 0;
    M->ctx = llama_init_from_model(L->model, cp);
    if (!M->ctx) {
        rc = bt_error(BT_EINVAL, "llama.cpp cannot create the MTP context for %s%s%s", L->m->path, last_log[0] ? ": " : "", last_log);
        goto fail;
    }
    llama_attach_threadpool(M->ctx, L->pool, L->pool);
#ifdef LC_HAVE_NEXTN
    lc_set_embeddings_nextn(M->ctx, true, true);    /* the block's own h_nextn, for the next draft */
#endif
    M->b = llama_batch_ext_init(M->ctx);
    M->hid = malloc((size_t)M->max_batch * L->n_embd * sizeof(float));
    if (!M->b || !M->hid) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
    /* the probe, as the target's: one row (token 0, a zero state row) asks
     * every node its name; the block's cache is cleared after */
    {
        float *h0 = calloc((size_t)L->n_embd, sizeof(float));
        float *lg = malloc((size_t)L->n_vocab * sizeof(float));
        int32_t tok0 = 0;
        if (!h0 || !lg) rc = bt_error(BT_ENOMEM, "out of memory");
        if (rc == BT_OK) {
            M->h = h0;
            M->tp->probing = true;
            rc = mtp_forward(M, NULL, &tok0, 1, 0, lg);
            M->tp->probing = false;
            llama_memory_clear(llama_get_memory(M->ctx), true);
            M->n_past = 0;
        }
        free(h0);
        free(lg);
        if (rc == BT_OK) rc = build_table(M->tp);
        if (rc) goto fail;
    }
    bt_engine_ext ext = { .forward = mtp_forward, .free = mtp_free, .impl = M, .extra = M->tp->extra,
                          .n_extra = M->tp->n_extra, .hidden_rows = mtp_hidden_rows, .set_mtp_hidden = mtp_set_hidden,
                          .mtp = true };
    return bt_engine_new_ext(L->m, bt_engine_ctx_len(target), M->max_batch, &ext, out);   /* frees M on error */
fail:
    mtp_free(M);
    return rc;
}

int bt_llamacpp_engine_new(const bt_model *m, const bt_llamacpp_opts *o, bt_engine **out)
{
    return lc_make(m, o, 1, out);
}

int bt_llamacpp_engines_new(const bt_model *m, const bt_llamacpp_opts *o, int n, bt_engine **out)
{
    return lc_make(m, o, n, out);
}

const char *bt_llamacpp_version(void) { return BT_LLAMA_CPP_VERSION; }
const char *bt_llamacpp_lib_version(void) { return llama_version(); }
const char *bt_llamacpp_build_flags(void) { return BT_LLAMA_CPP_FLAGS; }
