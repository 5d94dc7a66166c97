/* model.c - bt_model from a GGUF file (any architecture of model/arch.c) or,
 * by content sniffing, a llama2.c checkpoint.
 *
 * Invariant: after a successful load every bt_weight points inside the
 * mapping with rows * row_size bytes available (gguf.c validated offsets;
 * here we validate shapes against the config), so the engine never checks. */
#include "model/model.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "base/dtype.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct gguf_priv {
    const char **text;      /* token piece pointers */
    uint32_t *len;
    const char **merges;
    uint32_t *merge_len;
    float *scores;
    int32_t *types;
    char (*names)[48];      /* tensor name strings the weights point at */
} gguf_priv;

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int get_u32_opt(const bt_gguf *g, const char *key, uint32_t def, uint32_t *out)
{
    int rc = bt_gguf_get_u32(g, key, out);
    if (rc == BT_ENOTFOUND) { *out = def; return BT_OK; }
    return rc;
}

static int get_f32_opt(const bt_gguf *g, const char *key, float def, float *out)
{
    int rc = bt_gguf_get_f32(g, key, out);
    if (rc == BT_ENOTFOUND) { *out = def; return BT_OK; }
    return rc;
}

/* Fill m->vocab from tokenizer.ggml.* keys. Missing tokenizer is not an
 * error here (has_vocab stays false); commands that need text say so. */
static int load_gguf_vocab(bt_model *m, gguf_priv *pv)
{
    const bt_gguf *g = m->gguf;
    const char *path = m->path;
    bt_vocab *v = &m->vocab;
    bt_gguf_str s;
    int rc = bt_gguf_get_str(g, "tokenizer.ggml.model", &s);
    if (rc == BT_ENOTFOUND) return BT_OK;
    if (rc) return rc;
    if (s.len == 5 && !memcmp(s.ptr, "llama", 5)) v->kind = BT_VOCAB_SPM;
    else if (s.len == 4 && !memcmp(s.ptr, "gpt2", 4)) v->kind = BT_VOCAB_BPE;
    else
        return bt_error(BT_EUNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                        path, (int)BT_MIN(s.len, 64), s.ptr);
    v->pre[0] = 0;
    if (bt_gguf_get_str(g, "tokenizer.ggml.pre", &s) == BT_OK) {
        if (s.len >= sizeof(v->pre))
            return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.pre is too long", path);
        memcpy(v->pre, s.ptr, s.len);
        v->pre[s.len] = 0;
    }

    int elem; uint64_t n; const void *data;
    rc = bt_gguf_get_arr(g, "tokenizer.ggml.tokens", &elem, &n, &data);
    if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.tokens is missing", path);
    if (rc) return rc;
    if (elem != BT_GGUF_STRING) return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.tokens is not a string array", path);
    if (n == 0 || n > (1u << 24)) return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path, (unsigned long long)n);
    int64_t ki = bt_gguf_find_key(g, "tokenizer.ggml.tokens");
    v->n_tokens = (int32_t)n;
    pv->text = malloc(n * sizeof(*pv->text));
    pv->len = malloc(n * sizeof(*pv->len));
    if (!pv->text || !pv->len) return bt_error(BT_ENOMEM, "%s: out of memory for vocabulary", path);
    for (uint64_t i = 0; i < n; i++) {
        bt_gguf_str t = bt_gguf_arr_str(g, ki, i);
        if (t.len > 0xffff) return bt_error(BT_EFORMAT, "%s: token %llu is %llu bytes long", path, (unsigned long long)i, (unsigned long long)t.len);
        pv->text[i] = t.ptr;
        pv->len[i] = (uint32_t)t.len;
    }
    v->text = pv->text;
    v->len = pv->len;

    rc = bt_gguf_get_arr(g, "tokenizer.ggml.scores", &elem, &n, &data);
    if (rc == BT_OK) {
        if (elem != BT_GGUF_FLOAT32 || n != (uint64_t)v->n_tokens)
            return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.scores has %llu entries of type %s, expected %d float32",
                            path, (unsigned long long)n, bt_gguf_vtype_name(elem), v->n_tokens);
        pv->scores = malloc(n * sizeof(float));
        if (!pv->scores) return bt_error(BT_ENOMEM, "%s: out of memory", path);
        memcpy(pv->scores, data, n * sizeof(float));
        v->scores = pv->scores;
    } else if (rc != BT_ENOTFOUND) return rc;

    rc = bt_gguf_get_arr(g, "tokenizer.ggml.token_type", &elem, &n, &data);
    if (rc == BT_OK) {
        if ((elem != BT_GGUF_INT32 && elem != BT_GGUF_UINT32) || n != (uint64_t)v->n_tokens)
            return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries of type %s, expected %d int32",
                            path, (unsigned long long)n, bt_gguf_vtype_name(elem), v->n_tokens);
        pv->types = malloc(n * sizeof(int32_t));
        if (!pv->types) return bt_error(BT_ENOMEM, "%s: out of memory", path);
        memcpy(pv->types, data, n * sizeof(int32_t));
        v->type = pv->types;
    } else if (rc != BT_ENOTFOUND) return rc;

    rc = bt_gguf_get_arr(g, "tokenizer.ggml.merges", &elem, &n, &data);
    if (rc == BT_OK) {
        if (elem != BT_GGUF_STRING) return bt_error(BT_EFORMAT, "%s: tokenizer.ggml.merges is not a string array", path);
        int64_t mi = bt_gguf_find_key(g, "tokenizer.ggml.merges");
        pv->merges = malloc((n ? n : 1) * sizeof(*pv->merges));
        pv->merge_len = malloc((n ? n : 1) * sizeof(*pv->merge_len));
        if (!pv->merges || !pv->merge_len) return bt_error(BT_ENOMEM, "%s: out of memory", path);
        for (uint64_t i = 0; i < n; i++) {
            bt_gguf_str t = bt_gguf_arr_str(g, mi, i);
            pv->merges[i] = t.ptr;
            pv->merge_len[i] = (uint32_t)BT_MIN(t.len, 0xffffffffu);
        }
        v->n_merges = (int64_t)n;
        v->merges = pv->merges;
        v->merge_len = pv->merge_len;
    } else if (rc != BT_ENOTFOUND) return rc;
    if (v->kind == BT_VOCAB_BPE && v->n_merges == 0)
        return bt_error(BT_EFORMAT, "%s: BPE tokenizer has no tokenizer.ggml.merges", path);

    static const struct { const char *key; size_t off; } ids[] = {
        { "tokenizer.ggml.bos_token_id", offsetof(bt_vocab, bos) },
        { "tokenizer.ggml.eos_token_id", offsetof(bt_vocab, eos) },
        { "tokenizer.ggml.unknown_token_id", offsetof(bt_vocab, unk) },
        { "tokenizer.ggml.padding_token_id", offsetof(bt_vocab, pad) },
        { "tokenizer.ggml.eot_token_id", offsetof(bt_vocab, eot) },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(ids); i++) {
        int32_t *dst = (int32_t *)((char *)v + ids[i].off);
        int64_t val;
        rc = bt_gguf_get_i64(g, ids[i].key, &val);
        if (rc == BT_ENOTFOUND) { *dst = -1; continue; }
        if (rc) return rc;
        /* As llama.cpp does (llama_vocab::load): an id outside the
         * vocabulary is ignored with a warning, as if the key were absent.
         * Its converter writes padding_token_id = 4294967295 (uint32 -1)
         * for "no padding token", and llama.cpp loads such files. */
        if (val < 0 || val >= v->n_tokens) {
            bt_warn("%s: %s = %lld is outside the vocabulary (%d tokens); ignored (no such token)",
                    path, ids[i].key, (long long)val, v->n_tokens);
            *dst = -1;
            continue;
        }
        *dst = (int32_t)val;
    }
    bool b;
    v->add_bos = v->kind == BT_VOCAB_SPM;
    v->add_eos = false;
    v->add_space_prefix = v->kind == BT_VOCAB_SPM;
    if (bt_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == BT_OK) v->add_bos = b;
    if (bt_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == BT_OK) v->add_eos = b;
    if (bt_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == BT_OK) v->add_space_prefix = b;
    m->has_vocab = true;

    if (bt_gguf_get_str(g, "tokenizer.chat_template", &s) == BT_OK) {
        m->chat_template = malloc(s.len + 1);
        if (!m->chat_template) return bt_error(BT_ENOMEM, "%s: out of memory", path);
        memcpy(m->chat_template, s.ptr, s.len);
        m->chat_template[s.len] = 0;
    }
    return BT_OK;
}

/* Bind a named weight and check its shape: ne0 x ne1 x ne2 (ggml order). */
static int bind3(const bt_model *m, bt_weight *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                 bool optional)
{
    const bt_gguf_tensor *t = bt_gguf_find_tensor(m->gguf, name);
    if (!t) {
        memset(w, 0, sizeof(*w));
        if (optional) return BT_OK;
        return bt_error(BT_EFORMAT, "%s: tensor '%s' is missing (architecture %s)", m->path, name, m->cfg.arch);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] * t->ne[3] != ne2) {
        if (ne2 > 1 || t->ne[2] * t->ne[3] > 1)
            return bt_error(BT_EFORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                            m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)(t->ne[2] * t->ne[3]),
                            (long long)ne0, (long long)ne1, (long long)ne2);
        return bt_error(BT_EFORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                        m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)ne0, (long long)ne1);
    }
    if (!bt_dtype(t->type)->compute)
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has type %s, which bangtrace cannot compute with yet",
                        m->path, name, bt_dtype(t->type)->name ? bt_dtype(t->type)->name : "?");
    w->data = t->data;
    w->type = t->type;
    w->cols = ne0;
    w->rows = ne1 * ne2;
    w->n_slab = ne2;
    w->name = name;   /* caller passes a stable string (see names below) */
    return BT_OK;
}

static int bind(const bt_model *m, bt_weight *w, const char *name, int64_t cols, int64_t rows, bool optional)
{
    return bind3(m, w, name, cols, rows, 1, optional);
}

static int check_mla_layers(const bt_model *m);

/* Tensor names live as long as the model: one arena of fixed-size slots. */
#define NAME_CAP 48

/* Every tensor of the file must be one the architecture reads: a weight we
 * skipped (rope_freqs before it was applied) means computing another model
 * than the file describes, so it is an error, never silence. */
static int check_all_used(const bt_model *m, int n_bound)
{
    const bt_gguf *g = m->gguf;
    int64_t n = bt_gguf_n_tensors(g);
    if (n == n_bound) return BT_OK;
    const bt_config *c = &m->cfg;
    char name[NAME_CAP + 16];
    for (int64_t i = 0; i < n; i++) {
        const bt_gguf_tensor *t = bt_gguf_tensor_at(g, i);
        bool used = false;
        if (t->name.len < sizeof(name)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            const bt_weight *glob[] = { &m->token_embd, &m->output_norm, &m->output, &m->rope_freqs };
            for (size_t k = 0; k < BT_ARRAY_SIZE(glob) && !used; k++)
                used = glob[k]->data && glob[k]->name && !strcmp(glob[k]->name, name);
            int l = -1, off = 0;
            /* the MTP (nextn) block after the trunk does not change its
             * logits (bind_nextn binds it for --draft-mtp) */
            if (!used && sscanf(name, "blk.%d.%n", &l, &off) == 1 && off > 0 && l >= c->n_layers &&
                l < c->n_layers + c->n_nextn)
                used = true;
            bool recr = bt_layer_recurrent(c, l);
            const bt_arch_tensor *tab = recr ? c->desc->recr : c->desc->layer;
            int n_tab = recr ? c->desc->n_recr : c->desc->n_layer;
            if (!used && sscanf(name, "blk.%d.%n", &l, &off) == 1 && off > 0 && l >= 0 && l < c->n_layers)
                for (int k = 0; k < n_tab && !used; k++) {
                    const bt_arch_tensor *at = &tab[k];
                    const bt_weight *w = (const bt_weight *)((const char *)&m->layers[l] + at->field);
                    used = w->data && !strcmp(name + off, at->name);
                }
        }
        if (!used)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor '%.*s' is not used by architecture '%s' "
                            "(computing without it would give another model's logits)",
                            m->path, (int)BT_MIN(t->name.len, 96), t->name.ptr, c->arch);
    }
    return BT_OK;
}

/* The MTP (nextn) block N = n_layers, bound when present: its layer from the
 * architecture's attention-layer table, then its own tensors. A file whose
 * block lacks a required tensor still runs its trunk; m->nextn.missing names
 * the tensor for whoever asks for the block (--draft-mtp). A tensor of the
 * wrong shape is an error, as anywhere else. names: (n_layer + 6) slots. */
static int bind_nextn(bt_model *m, char (*names)[NAME_CAP], int *bound)
{
    bt_config *c = &m->cfg;
    const bt_arch *a = c->desc;
    int N = c->n_layers, used = 0, rc;
    bt_layer_weights *L = &m->layers[N];
    bt_nextn_weights *x = &m->nextn;
    for (int i = 0; i < a->n_layer; i++) {
        const bt_arch_tensor *t = &a->layer[i];
        char *name = names[used++];
        snprintf(name, NAME_CAP, "blk.%d.%s", N, t->name);
        bt_weight *w = (bt_weight *)((char *)L + t->field);
        int64_t ne2 = t->ne[2] ? bt_arch_dim(c, t->ne[2]) : 1;
        if ((rc = bind3(m, w, name, bt_arch_dim(c, t->ne[0]), t->ne[1] ? bt_arch_dim(c, t->ne[1]) : 1, ne2, true)))
            return rc;
        *bound += w->data != NULL;
        if (!w->data && !t->optional && !x->missing) x->missing = name;
    }
    struct { const char *n; bt_weight *w; int64_t cols, rows; bool opt; } nx[] = {
        { "nextn.eh_proj.weight", &x->eh_proj, 2 * (int64_t)c->dim, c->dim, false },
        { "nextn.enorm.weight", &x->enorm, c->dim, 1, false },
        { "nextn.hnorm.weight", &x->hnorm, c->dim, 1, false },
        { "nextn.shared_head_norm.weight", &x->shared_head_norm, c->dim, 1, true },
        { "nextn.embed_tokens.weight", &x->embed_tokens, c->dim, c->n_vocab, true },
        { "nextn.shared_head_head.weight", &x->shared_head_head, c->dim, c->n_vocab, true },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(nx); i++) {
        char *name = names[used++];
        snprintf(name, NAME_CAP, "blk.%d.%s", N, nx[i].n);
        if ((rc = bind(m, nx[i].w, name, nx[i].cols, nx[i].rows, true))) return rc;
        *bound += nx[i].w->data != NULL;
        if (!nx[i].w->data && !nx[i].opt && !x->missing) x->missing = name;
    }
    return BT_OK;
}

/* Bind the global tensors and every layer's tensors from the descriptor's
 * table; names go into the arena `names` ((n_layers * n_layer) slots). */
static int load_gguf_weights(bt_model *m, char (*names)[NAME_CAP])
{
    bt_config *c = &m->cfg;
    const bt_arch *a = c->desc;
    int used = 0, bound = 0, rc;
    if ((rc = bind(m, &m->token_embd, "token_embd.weight", c->dim, c->n_vocab, false))) return rc;
    if ((rc = bind(m, &m->output_norm, "output_norm.weight", c->dim, 1, false))) return rc;
    if ((rc = bind(m, &m->output, "output.weight", c->dim, c->n_vocab, (a->flags & BT_ARCH_TIED) != 0))) return rc;
    if (bt_gguf_find_tensor(m->gguf, "rope_freqs.weight") && !(a->flags & BT_ARCH_ROPE_FREQS))
        return bt_error(BT_EUNSUPPORTED, "%s: rope_freqs.weight is not used by architecture '%s'", m->path, c->arch);
    if ((rc = bind(m, &m->rope_freqs, "rope_freqs.weight", c->rope_dim / 2, 1, true))) return rc;
    bound = 2 + (m->output.data != NULL) + (m->rope_freqs.data != NULL);
    c->has_rope_freqs = m->rope_freqs.data != NULL;
    c->tied_output = m->output.data == NULL;
    if (c->tied_output) m->output = m->token_embd;
    bool biases = true;
    for (int l = 0; l < c->n_layers; l++) {
        bt_layer_weights *L = &m->layers[l];
        bool recr = bt_layer_recurrent(c, l);
        int n_tab = recr ? a->n_recr : a->n_layer;
        for (int i = 0; i < n_tab; i++) {
            const bt_arch_tensor *t = recr ? &a->recr[i] : &a->layer[i];
            char *name = names[used++];
            snprintf(name, NAME_CAP, "blk.%d.%s", l, t->name);
            bt_weight *w = (bt_weight *)((char *)L + t->field);
            int64_t ne2 = t->ne[2] ? bt_arch_dim(c, t->ne[2]) : 1;
            if ((rc = bind3(m, w, name, bt_arch_dim(c, t->ne[0]), t->ne[1] ? bt_arch_dim(c, t->ne[1]) : 1, ne2,
                            t->optional)))
                return rc;
            bound += w->data != NULL;
        }
        if (recr) continue;   /* no q/k/v there */
        biases &= L->bq.data && L->bk.data && L->bv.data;
        /* a file with some of q/k/v's biases is computed with the ones it has
         * (a missing one adds nothing), as llama.cpp does */
    }
    if (biases && !(c->flags & BT_ARCH_MLA)) c->flags |= BT_ARCH_QKV_BIAS;
    if (c->n_nextn > 0 && (rc = bind_nextn(m, names + used, &bound))) return rc;
    if ((c->flags & BT_ARCH_MLA) && (rc = check_mla_layers(m))) return rc;
    return check_all_used(m, bound);
}

/* ---- multi-head latent attention (deepseek2) ---- */

/* Which of the optional deepseek2 tensors a layer must have: the q
 * low-rank path or attn_q, the split or fused k/v up-projection, and a dense
 * FFN in the leading layers, the experts after (llama.cpp's loader). */
static int check_mla_layers(const bt_model *m)
{
    const bt_config *c = &m->cfg;
    /* the MTP block's layer too when it is usable (bind_nextn: else its
     * missing tensor is named to whoever asks for it) */
    int n = c->n_layers + (c->n_nextn > 0 && !m->nextn.missing ? 1 : 0);
    for (int l = 0; l < n; l++) {
        const bt_layer_weights *L = &m->layers[l];
        const bool moe = l >= c->n_dense_lead;
        struct { const bt_weight *w; const char *name; bool need; } t[] = {
            { &L->wq_a, "attn_q_a", c->q_lora_rank > 0 }, { &L->attn_q_a_norm, "attn_q_a_norm", c->q_lora_rank > 0 },
            { &L->wq_b, "attn_q_b", c->q_lora_rank > 0 }, { &L->wq, "attn_q", c->q_lora_rank == 0 },
            { &L->wkv_b, "attn_kv_b", !c->mla_split }, { &L->wk_b, "attn_k_b", c->mla_split },
            { &L->wv_b, "attn_v_b", c->mla_split },
            { &L->w_gate, "ffn_gate", !moe }, { &L->w_up, "ffn_up", !moe }, { &L->w_down, "ffn_down", !moe },
            { &L->ffn_gate_inp, "ffn_gate_inp", moe }, { &L->ffn_gate_exps, "ffn_gate_exps", moe },
            { &L->ffn_up_exps, "ffn_up_exps", moe }, { &L->ffn_down_exps, "ffn_down_exps", moe },
        };
        for (size_t i = 0; i < BT_ARRAY_SIZE(t); i++) {
            if (t[i].need && !t[i].w->data)
                return bt_error(BT_EFORMAT, "%s: tensor 'blk.%d.%s.weight' is missing (architecture %s)", m->path, l,
                                t[i].name, c->arch);
            if (!t[i].need && t[i].w->data)
                return bt_error(BT_EUNSUPPORTED, "%s: tensor 'blk.%d.%s.weight' is not used by architecture '%s' in "
                                "this layer (q_lora_rank %d, %s k/v up-projection, %d leading dense layers)", m->path, l,
                                t[i].name, c->arch, c->q_lora_rank, c->mla_split ? "split" : "fused", c->n_dense_lead);
        }
        if (!moe && L->ffn_exp_probs_b.data)
            return bt_error(BT_EUNSUPPORTED, "%s: tensor 'blk.%d.exp_probs_b.bias' is in a dense layer", m->path, l);
        if (moe && c->n_shared_expert > 0 && (!L->ffn_gate_shexp.data || !L->ffn_up_shexp.data || !L->ffn_down_shexp.data))
            return bt_error(BT_EFORMAT, "%s: layer %d lacks its shared expert (expert_shared_count %d)", m->path, l,
                            c->n_shared_expert);
    }
    return BT_OK;
}

/* deepseek2's head sizes: with attention.key_length_mla (the split
 * layout) the query/key head is key_length_mla and the value head
 * value_length_mla (key_length / value_length then describe the latent);
 * without, key_length and value_length. */
static int load_mla_hparams(bt_model *m, int *hd_k, int *hd_v)
{
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    char key[128];
    uint32_t kq = 0, kl = 0, km = 0, vm = 0;
    int rc;
#define K_(suffix) (snprintf(key, sizeof(key), "%s." suffix, c->arch), key)
    if ((rc = bt_gguf_get_u32(g, K_("attention.kv_lora_rank"), &kl)))
        return rc == BT_ENOTFOUND ? bt_error(BT_EFORMAT, "%s: %s is missing", m->path, key) : rc;
    if ((rc = bt_gguf_get_u32(g, K_("attention.q_lora_rank"), &kq)))
        return rc == BT_ENOTFOUND ? bt_error(BT_EFORMAT, "%s: %s is missing (0: a direct q projection)", m->path, key) : rc;
    if ((rc = get_u32_opt(g, K_("attention.key_length_mla"), 0, &km))) return rc;
    if ((rc = get_u32_opt(g, K_("attention.value_length_mla"), 0, &vm))) return rc;
    if (!km != !vm)
        return bt_error(BT_EFORMAT, "%s: %s.attention.key_length_mla and value_length_mla come together", m->path, c->arch);
#undef K_
    c->mla_split = km != 0;
    if (c->mla_split) { *hd_k = (int)BT_MIN(km, 1u << 20); *hd_v = (int)BT_MIN(vm, 1u << 20); }
    c->q_lora_rank = (int)BT_MIN(kq, 1u << 20);
    c->kv_lora_rank = (int)BT_MIN(kl, 1u << 20);
    c->mla_v_dim = *hd_v;
    c->n_kv_heads = 1;   /* one latent per token, shared by every head */
    if (c->kv_lora_rank <= 0 || c->mla_v_dim <= 0 || c->mla_v_dim > 4096)
        return bt_error(BT_EFORMAT, "%s: implausible latent attention (kv_lora_rank %d, value head %d)", m->path,
                        c->kv_lora_rank, c->mla_v_dim);
    return BT_OK;
}

/* deepseek2's routing keys (llama.cpp's defaults: softmax when the file
 * says nothing, no scale, no groups). */
static int load_mla_routing(bt_model *m)
{
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    char key[128];
    uint32_t u;
    int rc;
#define K_(suffix) (snprintf(key, sizeof(key), "%s." suffix, c->arch), key)
    if ((rc = get_u32_opt(g, K_("leading_dense_block_count"), 0, &u))) return rc;
    c->n_dense_lead = (int)BT_MIN(u, 1u << 20);
    if ((rc = get_u32_opt(g, K_("expert_gating_func"), 1, &u))) return rc;
    c->gating = u == 0 ? 1 : (int)BT_MIN(u, 99u);
    if (c->gating != 1 && c->gating != 2)
        return bt_error(BT_EUNSUPPORTED, "%s: %s = %u is not supported (1 softmax, 2 sigmoid)", m->path, key, u);
    if ((rc = get_f32_opt(g, K_("expert_weights_scale"), 0.0f, &c->expert_scale))) return rc;
    if ((rc = get_u32_opt(g, K_("expert_group_count"), 0, &u))) return rc;
    c->n_expert_groups = (int)BT_MIN(u, 1u << 20);
    if ((rc = get_u32_opt(g, K_("expert_group_used_count"), 0, &u))) return rc;
    c->n_group_used = (int)BT_MIN(u, 1u << 20);
    /* the MTP (nextn) block after the trunk (DeepSeek-V3, GLM-4.5's layout):
     * an MLA layer with MoE, llama.cpp's graph_mtp */
    if ((rc = get_u32_opt(g, K_("nextn_predict_layers"), 0, &u))) return rc;
    if (u > 1) return bt_error(BT_EUNSUPPORTED, "%s: %s = %u (one MTP block is supported)", m->path, key, u);
    if ((int64_t)u >= c->n_layers) return bt_error(BT_EFORMAT, "%s: %s = %u leaves no trunk of %d blocks", m->path, key, u, c->n_layers);
    c->n_nextn = (int)u;
    c->n_layers -= c->n_nextn;
#undef K_
    if (c->n_dense_lead > c->n_layers)
        return bt_error(BT_EFORMAT, "%s: %d leading dense layers of %d", m->path, c->n_dense_lead, c->n_layers);
    if (c->n_expert_groups > 1 &&
        (c->n_expert % c->n_expert_groups || c->n_group_used <= 0 || c->n_group_used >= c->n_expert_groups ||
         c->n_expert / c->n_expert_groups < 2 || c->n_group_used * (c->n_expert / c->n_expert_groups) < c->n_expert_used))
        return bt_error(BT_EFORMAT, "%s: implausible expert groups (%d experts in %d groups, %d used, top-%d)", m->path,
                        c->n_expert, c->n_expert_groups, c->n_group_used, c->n_expert_used);
    return BT_OK;
}

/* YaRN's constants as llama.cpp sets them (llama_context's cparams, then
 * the deepseek2 graph): yarn_log_multiplier is stored times 0.1 by the
 * converter; the rope's attention factor is mscale(factor, m) /
 * mscale(factor, log_mul) (m = log_mul for deepseek2 unless it is 1),
 * divided by 1 + 0.1 ln(factor), times rope.scaling.attn_factor. */
static int load_yarn_hparams(bt_model *m)
{
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    char key[128];
    uint32_t u;
    float lm = 0.0f, af = 1.0f;
    int rc;
#define K_(suffix) (snprintf(key, sizeof(key), "%s." suffix, c->arch), key)
    if ((rc = get_u32_opt(g, K_("rope.scaling.original_context_length"), (uint32_t)c->ctx_len, &u))) return rc;
    c->yarn_orig_ctx = (int)BT_MIN(u, 1u << 30);
    if ((rc = get_f32_opt(g, K_("rope.scaling.yarn_log_multiplier"), 0.0f, &lm))) return rc;
    if ((rc = get_f32_opt(g, K_("rope.scaling.attn_factor"), 1.0f, &af))) return rc;
#undef K_
    c->yarn_log_mul = lm / 0.1f;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    float attn = 1.0f;
    if (c->yarn_ext_factor != 0.0f) {
        float factor = 1.0f / c->rope_freq_scale;
#define MSCALE(s, k) ((s) <= 1.0f ? 1.0f : 0.1f * (k) * logf(s) + 1.0f)
        if (c->yarn_log_mul != 0.0f) {
            float ms = c->yarn_log_mul != 1.0f ? c->yarn_log_mul : 1.0f;
            attn = MSCALE(factor, ms) / MSCALE(factor, c->yarn_log_mul);
        } else {
            attn = MSCALE(factor, 1.0f);
        }
#undef MSCALE
        attn *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    c->yarn_attn_factor = attn * af;
    return BT_OK;
}

/* ---- mixture of experts ---- */

bt_weight bt_moe_expert_view(const bt_weight *w, int e)
{
    bt_weight v = *w;
    int64_t rows = w->n_slab > 0 ? w->rows / w->n_slab : w->rows;
    v.data = (const char *)w->data + (size_t)e * (size_t)rows * bt_dtype_row_size(w->type, w->cols);
    v.rows = rows;
    v.n_slab = 1;
    return v;
}

/* A hybrid (gated delta net) model's own keys: the recurrent shapes, the
 * rope sections, the MTP block count (the trunk is block_count minus it) and
 * which layers are recurrent: attention.recurrent_layers when the file has
 * it, else every layer but each full_attention_interval-th (llama.cpp's
 * rule, default 4). */
static int load_hybrid_hparams(bt_model *m, const bt_arch *a)
{
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    char key[128];
    uint32_t u;
    int rc;
    (void)a;
    static const struct { const char *k; size_t off; } req[] = {
        { "ssm.conv_kernel", offsetof(bt_config, ssm_kernel) },
        { "ssm.state_size", offsetof(bt_config, ssm_head_k) },
        { "ssm.group_count", offsetof(bt_config, ssm_n_k) },
        { "ssm.time_step_rank", offsetof(bt_config, ssm_n_v) },
    };
    for (size_t i = 0; i < BT_ARRAY_SIZE(req); i++) {
        snprintf(key, sizeof(key), "%s.%s", c->arch, req[i].k);
        if ((rc = bt_gguf_get_u32(g, key, &u))) {
            if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: %s is missing", m->path, key);
            return rc;
        }
        if (u == 0 || u > 65536) return bt_error(BT_EFORMAT, "%s: %s = %u is implausible", m->path, key, u);
        *(int *)((char *)c + req[i].off) = (int)u;
    }
    c->ssm_head_v = c->ssm_head_k;
    snprintf(key, sizeof(key), "%s.ssm.inner_size", c->arch);
    if ((rc = bt_gguf_get_u32(g, key, &u))) {
        if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: %s is missing", m->path, key);
        return rc;
    }
    if ((int64_t)u != (int64_t)c->ssm_n_v * c->ssm_head_v)
        return bt_error(BT_EUNSUPPORTED, "%s: %s = %u is not time_step_rank %d x state_size %d (value heads of "
                        "another width than the key heads are not supported)", m->path, key, u, c->ssm_n_v, c->ssm_head_v);
    if (c->ssm_n_v % c->ssm_n_k)
        return bt_error(BT_EFORMAT, "%s: %d value heads are not a multiple of %d key heads", m->path, c->ssm_n_v, c->ssm_n_k);
    if (c->ssm_kernel < 2 || c->ssm_kernel > 16)
        return bt_error(BT_EUNSUPPORTED, "%s: a conv kernel of %d is not supported (2..16)", m->path, c->ssm_kernel);
    if (c->ssm_head_k > 512)
        return bt_error(BT_EUNSUPPORTED, "%s: a state head of %d is above the supported 512", m->path, c->ssm_head_k);
    snprintf(key, sizeof(key), "%s.nextn_predict_layers", c->arch);
    if ((rc = get_u32_opt(g, key, 0, &u))) return rc;
    if ((int64_t)u >= c->n_layers) return bt_error(BT_EFORMAT, "%s: %s = %u leaves no trunk of %d blocks", m->path, key, u, c->n_layers);
    c->n_nextn = (int)u;
    c->n_layers -= c->n_nextn;
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return bt_error(BT_EFORMAT, "%s: rope dimension %d of heads of %d", m->path, c->rope_dim, c->head_dim);
    /* rope sections: an array of 4 (or fewer) integers */
    memset(c->rope_sections, 0, sizeof(c->rope_sections));
    snprintf(key, sizeof(key), "%s.rope.dimension_sections", c->arch);
    int elem; uint64_t n; const void *data;
    rc = bt_gguf_get_arr(g, key, &elem, &n, &data);
    if (rc == BT_OK) {
        if ((elem != BT_GGUF_INT32 && elem != BT_GGUF_UINT32) || n > 4)
            return bt_error(BT_EFORMAT, "%s: %s is not an array of up to 4 integers", m->path, key);
        int sum = 0;
        for (uint64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, (const char *)data + i * 4, 4);
            if (v < 0 || v > 4096) return bt_error(BT_EFORMAT, "%s: %s[%llu] = %d", m->path, key, (unsigned long long)i, v);
            c->rope_sections[i] = v;
            sum += v;
        }
        if (sum <= 0 || sum > c->rope_dim / 2)
            return bt_error(BT_EFORMAT, "%s: %s sum to %d, not within the %d rotated pairs", m->path, key, sum, c->rope_dim / 2);
    } else if (rc != BT_ENOTFOUND) return rc;
    /* which layers are recurrent */
    if (c->n_layers > 1024) return bt_error(BT_EUNSUPPORTED, "%s: %d layers (at most 1024)", m->path, c->n_layers);
    memset(c->recr, 0, sizeof(c->recr));
    snprintf(key, sizeof(key), "%s.attention.recurrent_layers", c->arch);
    rc = bt_gguf_get_arr(g, key, &elem, &n, &data);
    if (rc == BT_OK) {
        if ((elem != BT_GGUF_BOOL && elem != BT_GGUF_INT32 && elem != BT_GGUF_UINT32) || n < (uint64_t)c->n_layers)
            return bt_error(BT_EFORMAT, "%s: %s is not an array of %d flags", m->path, key, c->n_layers);
        size_t w = elem == BT_GGUF_BOOL ? 1 : 4;
        for (int l = 0; l < c->n_layers; l++) {
            int32_t v = 0;
            memcpy(&v, (const char *)data + (size_t)l * w, w);
            if (v) c->recr[l >> 6] |= 1ull << (l & 63);
        }
    } else if (rc == BT_ENOTFOUND) {
        snprintf(key, sizeof(key), "%s.full_attention_interval", c->arch);
        if ((rc = get_u32_opt(g, key, 4, &u))) return rc;
        if (u == 0) return bt_error(BT_EFORMAT, "%s: %s = 0", m->path, key);
        for (int l = 0; l < c->n_layers; l++)
            if ((l + 1) % u != 0) c->recr[l >> 6] |= 1ull << (l & 63);
    } else return rc;
    return BT_OK;
}

/* gpt-oss's sliding-window layers (llama.cpp's load_swa_pattern with
 * pattern 2): attention.sliding_window_pattern as an array of per-layer
 * flags, or as n (layer l slides unless l % n == n - 1; 0: every layer),
 * default 2 (the even layers). The window itself is required. */
static int load_swa(bt_model *m)
{
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    char key[128];
    if (c->sliding_window <= 0)
        return bt_error(BT_EFORMAT, "%s: %s.attention.sliding_window is missing or 0", m->path, c->arch);
    if (c->n_layers > 1024) return bt_error(BT_EUNSUPPORTED, "%s: %d layers (at most 1024)", m->path, c->n_layers);
    memset(c->swa, 0, sizeof(c->swa));
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", c->arch);
    int elem; uint64_t n; const void *data;
    int rc = bt_gguf_get_arr(g, key, &elem, &n, &data);
    if (rc == BT_OK) {
        if ((elem != BT_GGUF_BOOL && elem != BT_GGUF_INT32 && elem != BT_GGUF_UINT32) || n < (uint64_t)c->n_layers)
            return bt_error(BT_EFORMAT, "%s: %s is not an array of %d flags", m->path, key, c->n_layers);
        size_t w = elem == BT_GGUF_BOOL ? 1 : 4;
        for (int l = 0; l < c->n_layers; l++) {
            int32_t v = 0;
            memcpy(&v, (const char *)data + (size_t)l * w, w);
            if (v) c->swa[l >> 6] |= 1ull << (l & 63);
        }
        return BT_OK;
    }
    if (rc != BT_ENOTFOUND) return rc;
    uint32_t u;
    if ((rc = get_u32_opt(g, key, 2, &u))) return rc;
    for (int l = 0; l < c->n_layers; l++)
        if (u == 0 || (uint32_t)l % u < u - 1) c->swa[l >> 6] |= 1ull << (l & 63);
    return BT_OK;
}

/* data == NULL: open and map m->path; else parse the borrowed buffer. */
static int load_gguf(bt_model *m, const void *data, size_t size)
{
    /* m->gguf already set: a synthetic handle (Hugging Face folder, hf.c) */
    int rc = m->gguf ? BT_OK : data ? bt_gguf_open_buffer(data, size, m->path, &m->gguf) : bt_gguf_open(m->path, &m->gguf);
    if (rc) return rc;
    const bt_gguf *g = m->gguf;
    bt_config *c = &m->cfg;
    strcpy(m->format, "gguf");
    m->file_data = bt_gguf_file_data(g);
    m->file_size = bt_gguf_file_size(g);

    bt_gguf_str s;
    if ((rc = bt_gguf_get_str(g, "general.architecture", &s))) {
        if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: general.architecture is missing", m->path);
        return rc;
    }
    if (s.len >= sizeof(c->arch)) return bt_error(BT_EFORMAT, "%s: general.architecture is too long", m->path);
    memcpy(c->arch, s.ptr, s.len);
    c->arch[s.len] = 0;
    if (bt_gguf_get_str(g, "general.name", &s) == BT_OK)
        snprintf(c->name, sizeof(c->name), "%.*s", (int)BT_MIN(s.len, 127), s.ptr);
    else
        snprintf(c->name, sizeof(c->name), "%s", base_name(m->path));

    gguf_priv *pv = calloc(1, sizeof(*pv));
    if (!pv) return bt_error(BT_ENOMEM, "out of memory");
    m->priv = pv;
    if ((rc = load_gguf_vocab(m, pv))) return rc;
    c->n_vocab = m->has_vocab ? m->vocab.n_tokens : 0;

    if (bt_gguf_n_tensors(g) == 0) return BT_OK;     /* vocab-only */

    const bt_arch *a = bt_arch_find(c->arch);
    if (!a)
        return bt_error(BT_EUNSUPPORTED, "%s: architecture '%s' is not supported (%s)", m->path, c->arch, bt_arch_names());
    if (a->refuse)
        return bt_error(BT_EUNSUPPORTED, "%s: architecture '%s' is refused: %s", m->path, c->arch, a->refuse);
    c->desc = a;
    c->flags = a->flags & ~BT_ARCH_QKV_BIAS;    /* set again when the biases are there */
    c->rope_kind = a->rope_kind;

    char key[128];
    uint32_t u;
#define ARCH_KEY(suffix) (snprintf(key, sizeof(key), "%s." suffix, c->arch), key)
#define REQ_U32(suffix, dst) do { \
        if ((rc = bt_gguf_get_u32(g, ARCH_KEY(suffix), &u))) { \
            if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: %s is missing", m->path, key); \
            return rc; } \
        (dst) = (int)BT_MIN(u, 0x7fffffffu); } while (0)
#define OPT_U32(suffix, def, dst) do { \
        if ((rc = get_u32_opt(g, ARCH_KEY(suffix), (uint32_t)(def), &u))) return rc; \
        (dst) = (int)BT_MIN(u, 0x7fffffffu); } while (0)
    REQ_U32("embedding_length", c->dim);
    REQ_U32("feed_forward_length", c->hidden_dim);
    REQ_U32("block_count", c->n_layers);
    REQ_U32("attention.head_count", c->n_heads);
    OPT_U32("attention.head_count_kv", c->n_heads, c->n_kv_heads);
    OPT_U32("context_length", 2048, c->ctx_len);
    OPT_U32("attention.sliding_window", 0, c->sliding_window);
    if ((rc = get_f32_opt(g, ARCH_KEY("attention.layer_norm_rms_epsilon"), 1e-5f, &c->norm_eps))) return rc;
    if ((rc = get_f32_opt(g, ARCH_KEY("rope.freq_base"), 10000.0f, &c->rope_base))) return rc;

    /* Sanity limits: reject absurd dimensions before allocating anything. */
    if (c->dim <= 0 || c->dim > 65536 || c->n_layers <= 0 || c->n_layers > 1024 ||
        c->n_heads <= 0 || c->n_heads > 1024 || c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads ||
        (a->flags & BT_ARCH_MOE ? c->hidden_dim < 0 : c->hidden_dim <= 0) || c->hidden_dim > 1 << 20)
        return bt_error(BT_EFORMAT, "%s: implausible hyperparameters (dim %d, hidden %d, layers %d, heads %d/%d)",
                        m->path, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads);
    /* head_dim is key_length when the file says (qwen3: 128 with dim 1024
     * and 16 heads), else dim / heads. */
    int hd_k, hd_v;
    OPT_U32("attention.key_length", c->dim % c->n_heads ? 0 : c->dim / c->n_heads, hd_k);
    OPT_U32("attention.value_length", hd_k, hd_v);
    if ((a->flags & BT_ARCH_MLA) && (rc = load_mla_hparams(m, &hd_k, &hd_v))) return rc;
    if (hd_k <= 0 || hd_k > 4096 || hd_k % 2)
        return bt_error(BT_EFORMAT, "%s: implausible head dimension %d (dim %d, %d heads)", m->path, hd_k, c->dim, c->n_heads);
    if (hd_v != hd_k && !(a->flags & BT_ARCH_MLA))
        return bt_error(BT_EUNSUPPORTED, "%s: key length %d != value length %d is not supported", m->path, hd_k, hd_v);
    c->head_dim = hd_k;
    OPT_U32("rope.dimension_count", c->head_dim, c->rope_dim);
    if (a->flags & BT_ARCH_HYBRID) {
        if ((rc = load_hybrid_hparams(m, a))) return rc;
    } else if (a->flags & BT_ARCH_MLA) {
        if (c->rope_dim <= 0 || c->rope_dim % 2 || c->rope_dim >= c->head_dim)
            return bt_error(BT_EFORMAT, "%s: rope dimension %d of a %d-dim key head leaves no unrotated part", m->path,
                            c->rope_dim, c->head_dim);
    } else if (c->rope_dim != c->head_dim)
        return bt_error(BT_EUNSUPPORTED, "%s: partial RoPE (%d of %d dims) is not supported", m->path, c->rope_dim, c->head_dim);
    if (c->ctx_len <= 0) c->ctx_len = 2048;
    if (a->flags & BT_ARCH_SINKS) {   /* the window is applied in attention, per layer */
        if ((rc = load_swa(m))) return rc;
    } else if (c->sliding_window > 0 && c->sliding_window < c->ctx_len) {
        c->ctx_len = c->sliding_window;
    }

    /* RoPE scaling: none, or linear (positions divided by the factor);
     * Llama 3's scaling arrives as the rope_freqs.weight tensor. */
    c->rope_freq_scale = 1.0f;
    if (bt_gguf_get_str(g, ARCH_KEY("rope.scaling.type"), &s) == BT_OK) {
        float factor = 1.0f;
        if ((rc = get_f32_opt(g, ARCH_KEY("rope.scaling.factor"), 1.0f, &factor))) return rc;
        if (s.len == 6 && !memcmp(s.ptr, "linear", 6)) {
            if (!(factor > 0.0f && factor < 1e6f))
                return bt_error(BT_EFORMAT, "%s: %s = %g is not a usable factor", m->path, key, factor);
            c->rope_freq_scale = 1.0f / factor;
        } else if (s.len == 4 && !memcmp(s.ptr, "yarn", 4) && (a->flags & BT_ARCH_MLA)) {
            if (!(factor > 0.0f && factor < 1e6f))
                return bt_error(BT_EFORMAT, "%s: %s = %g is not a usable factor", m->path, key, factor);
            c->rope_freq_scale = 1.0f / factor;
            c->yarn_ext_factor = 1.0f;
        } else if (s.len == 4 && !memcmp(s.ptr, "yarn", 4)) {
            /* YaRN (engine/gptoss.c makes the tables); llama.cpp's defaults
             * for what the file does not say */
            if (!(factor >= 1.0f && factor < 1e6f))
                return bt_error(BT_EFORMAT, "%s: %s = %g is not a usable YaRN factor", m->path, key, factor);
            c->rope_freq_scale = 1.0f / factor;
            c->rope_yarn = factor > 1.0f;
            OPT_U32("rope.scaling.original_context_length", c->ctx_len, c->yarn_orig_ctx);
            if ((rc = get_f32_opt(g, ARCH_KEY("rope.scaling.attn_factor"), 1.0f, &c->yarn_attn_factor))) return rc;
            c->yarn_truncate = true;
            rc = bt_gguf_get_bool(g, BT_YARN_TRUNCATE_KEY, &c->yarn_truncate);
            if (rc && rc != BT_ENOTFOUND) return rc;
            if (c->yarn_orig_ctx <= 0 || !(c->yarn_attn_factor > 0.0f && c->yarn_attn_factor < 1e6f))
                return bt_error(BT_EFORMAT, "%s: implausible YaRN parameters (original context %d, attn_factor %g)",
                                m->path, c->yarn_orig_ctx, c->yarn_attn_factor);
        } else if (!(s.len == 4 && !memcmp(s.ptr, "none", 4))) {
            return bt_error(BT_EUNSUPPORTED, "%s: %s.rope.scaling.type '%.*s' is not supported (none, linear, yarn)",
                            m->path, c->arch, (int)BT_MIN(s.len, 32), s.ptr);
        }
    }
    if ((a->flags & BT_ARCH_MLA) && (rc = load_yarn_hparams(m))) return rc;

    /* Mixture of experts. */
    if (a->flags & BT_ARCH_MOE) {
        OPT_U32("expert_count", 0, c->n_expert);
        OPT_U32("expert_used_count", 0, c->n_expert_used);
        OPT_U32("expert_feed_forward_length", c->hidden_dim, c->expert_ff_len);
        OPT_U32("expert_shared_count", 0, c->n_shared_expert);
        OPT_U32("expert_shared_feed_forward_length", 0, c->shared_ff_len);
        bool b = a->norm_topk_prob;
        if ((rc = bt_gguf_get_bool(g, ARCH_KEY("expert_weights_norm"), &b)) && rc != BT_ENOTFOUND) return rc;
        c->norm_topk_prob = b;
        if (a->flags & BT_ARCH_MLA) {   /* llama.cpp's deepseek2: one shared expert of the experts' width per count */
            if (c->shared_ff_len == 0) c->shared_ff_len = c->expert_ff_len * c->n_shared_expert;
            if ((rc = load_mla_routing(m))) return rc;
        }
        if (c->n_expert <= 0 || c->n_expert > 4096 || c->n_expert_used <= 0 || c->n_expert_used > c->n_expert ||
            c->expert_ff_len <= 0 || c->expert_ff_len > 1 << 20)
            return bt_error(BT_EFORMAT, "%s: implausible experts (%d experts, %d used, expert ff %d)",
                            m->path, c->n_expert, c->n_expert_used, c->expert_ff_len);
    }
    c->embd_scale = c->resid_scale = c->logit_scale = 1.0f;
    c->attn_scale = 0;   /* 1/sqrt(head_dim) */

    const bt_gguf_tensor *te = bt_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return bt_error(BT_EFORMAT, "%s: tensor 'token_embd.weight' is missing", m->path);
    if (!m->has_vocab) c->n_vocab = (int)te->ne[1];
    uint32_t vs;
    if (bt_gguf_get_u32(g, ARCH_KEY("vocab_size"), &vs) == BT_OK && (int64_t)vs != te->ne[1])
        return bt_error(BT_EFORMAT, "%s: %s = %u but token_embd has %lld rows", m->path, key, vs, (long long)te->ne[1]);
    if (m->has_vocab && te->ne[1] != c->n_vocab)
        return bt_error(BT_EFORMAT, "%s: tokenizer has %d tokens but token_embd has %lld rows",
                        m->path, c->n_vocab, (long long)te->ne[1]);
#undef REQ_U32
#undef OPT_U32
#undef ARCH_KEY

    m->layers = calloc((size_t)(c->n_layers + c->n_nextn), sizeof(*m->layers));
    char (*names)[NAME_CAP] = calloc((size_t)(c->n_layers + 1) * (size_t)BT_MAX(a->n_layer, a->n_recr) + 8, NAME_CAP);
    if (!m->layers || !names) { free(names); return bt_error(BT_ENOMEM, "out of memory"); }
    pv->names = names;
    return load_gguf_weights(m, names);
}

/* A directory opens and reads as empty on Linux, and the loaders would then
 * blame its "format": say what it is instead. */
static int check_not_dir(const char *path, const char *what)
{
    struct stat st;
    if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return bt_error(BT_EINVAL, "%s: is a directory, not a %s file", path, what);
    return BT_OK;
}

int bt_model_load(const char *path, const char *tokenizer_path, bt_model **out)
{
    *out = NULL;
    bool folder = bt_hf_is_folder(path);
    int rc0 = folder ? BT_OK : check_not_dir(path, "model");
    if (!rc0) rc0 = check_not_dir(tokenizer_path, "tokenizer");
    if (rc0) return rc0;
    bt_model *m = calloc(1, sizeof(*m));
    if (!m) return bt_error(BT_ENOMEM, "out of memory");
    m->path = strdup(path);
    if (!m->path) { free(m); return bt_error(BT_ENOMEM, "out of memory"); }
    if (folder) {       /* a Hugging Face model folder, as a GGUF-shaped source */
        int rc = bt_hf_open(path, &m->gguf);
        if (!rc) rc = load_gguf(m, NULL, 0);
        if (!rc) rc = bt_hf_attach(m);
        if (rc) { bt_model_free(m); return rc; }
        if (tokenizer_path) bt_warn("--tokenizer is ignored for model folders (the tokenizer is %s/tokenizer.json)", path);
        *out = m;
        return BT_OK;
    }

    FILE *f = bt_fopen_input(path);     /* a fifo is refused, never waited on */
    if (!f) { bt_model_free(m); return BT_EIO; }
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    int rc;
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        rc = load_gguf(m, NULL, 0);
        if (rc == BT_OK && tokenizer_path)
            bt_warn("--tokenizer is ignored for GGUF models (the tokenizer is inside %s)", path);
    } else {
        rc = bt_llama2c_load(path, tokenizer_path, m);
    }
    if (rc) { bt_model_free(m); return rc; }
    bt_debug("model %s: %s, %s \"%s\", %d layers, dim %d, vocab %d, %llu bytes mapped", path, m->format, m->cfg.arch,
             m->cfg.name, m->cfg.n_layers, m->cfg.dim, m->cfg.n_vocab, (unsigned long long)m->file_size);
    *out = m;
    return BT_OK;
}

int bt_model_load_buffer(const void *data, size_t size, const char *name, bt_model **out)
{
    *out = NULL;
    bt_model *m = calloc(1, sizeof(*m));
    if (!m) return bt_error(BT_ENOMEM, "out of memory");
    m->path = strdup(name);
    if (!m->path) { free(m); return bt_error(BT_ENOMEM, "out of memory"); }
    int rc = size >= 4 && !memcmp(data, "GGUF", 4) ? load_gguf(m, data, size)
                                                     : bt_llama2c_load_buffer(data, size, name, m);
    if (rc) { bt_model_free(m); return rc; }
    *out = m;
    return BT_OK;
}

bool bt_model_has_weights(const bt_model *m) { return m && m->cfg.n_layers > 0 && m->token_embd.data; }

void bt_llama2c_free_priv(bt_model *m);

void bt_model_free(bt_model *m)
{
    if (!m) return;
    if (m->gguf) {
        gguf_priv *pv = m->priv;
        if (pv) {
            free(pv->text); free(pv->len); free(pv->merges); free(pv->merge_len);
            free(pv->scores); free(pv->types); free(pv->names); free(pv);
        }
        bt_gguf_close(m->gguf);
    } else {
        bt_llama2c_free_priv(m);
    }
    free(m->layers);
    free(m->chat_template);
    free(m->path);
    free(m);
}
