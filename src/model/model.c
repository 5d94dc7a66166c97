/* model.c - bt_model from a GGUF file (llama architecture family) or, by
 * content sniffing, a llama2.c checkpoint.
 *
 * Invariant: after a successful load every bt_weight points inside the
 * mapping with rows * row_size bytes available (gguf.c validated offsets;
 * here we validate shapes against the config), so the engine never checks. */
#include "model/model.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "kernels.h"
#include "util.h"

#include <errno.h>
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

/* Bind a named weight and check its shape: cols x rows (ggml ne0 x ne1). */
static int bind(const bt_model *m, bt_weight *w, const char *name, int64_t cols, int64_t rows, bool optional)
{
    const bt_gguf_tensor *t = bt_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (optional) { memset(w, 0, sizeof(*w)); return BT_OK; }
        return bt_error(BT_EFORMAT, "%s: tensor '%s' is missing", m->path, name);
    }
    int64_t r = t->ne[1] * t->ne[2] * t->ne[3];
    if (t->ne[0] != cols || r != rows)
        return bt_error(BT_EFORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                        m->path, name, (long long)t->ne[0], (long long)r, (long long)cols, (long long)rows);
    if (!bt_dtype(t->type)->compute)
        return bt_error(BT_EUNSUPPORTED, "%s: tensor '%s' has type %s, which bangtrace cannot compute with yet",
                        m->path, name, bt_dtype(t->type)->name ? bt_dtype(t->type)->name : "?");
    w->data = t->data;
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->name = name;   /* caller passes a stable string (see names below) */
    return BT_OK;
}

/* Tensor names live as long as the model: one arena of fixed-size slots. */
#define NAME_CAP 48
static const char *intern(char (*slots)[NAME_CAP], int *used, const char *fmt, int layer)
{
    char *s = slots[(*used)++];
    snprintf(s, NAME_CAP, fmt, layer);
    return s;
}

static int load_gguf_weights(bt_model *m, char (*names)[NAME_CAP])
{
    bt_config *c = &m->cfg;
    int used = 0, rc;
    int64_t q_dim = (int64_t)c->n_heads * c->head_dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    if ((rc = bind(m, &m->token_embd, "token_embd.weight", c->dim, c->n_vocab, false))) return rc;
    if ((rc = bind(m, &m->output_norm, "output_norm.weight", c->dim, 1, false))) return rc;
    if ((rc = bind(m, &m->output, "output.weight", c->dim, c->n_vocab, true))) return rc;
    c->tied_output = m->output.data == NULL;
    if (c->tied_output) m->output = m->token_embd;
    for (int l = 0; l < c->n_layers; l++) {
        bt_layer_weights *L = &m->layers[l];
        struct { bt_weight *w; const char *fmt; int64_t cols, rows; } t[] = {
            { &L->attn_norm, "blk.%d.attn_norm.weight", c->dim, 1 },
            { &L->wq, "blk.%d.attn_q.weight", c->dim, q_dim },
            { &L->wk, "blk.%d.attn_k.weight", c->dim, kv_dim },
            { &L->wv, "blk.%d.attn_v.weight", c->dim, kv_dim },
            { &L->wo, "blk.%d.attn_output.weight", q_dim, c->dim },
            { &L->ffn_norm, "blk.%d.ffn_norm.weight", c->dim, 1 },
            { &L->w_gate, "blk.%d.ffn_gate.weight", c->dim, c->hidden_dim },
            { &L->w_up, "blk.%d.ffn_up.weight", c->dim, c->hidden_dim },
            { &L->w_down, "blk.%d.ffn_down.weight", c->hidden_dim, c->dim },
        };
        for (size_t i = 0; i < BT_ARRAY_SIZE(t); i++) {
            const char *name = intern(names, &used, t[i].fmt, l);
            if ((rc = bind(m, t[i].w, name, t[i].cols, t[i].rows, false))) return rc;
        }
    }
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

    /* Llama-family architectures that share the llama tensor layout. */
    static const char *const archs[] = { "llama", "mistral", "granite" };
    bool known = false;
    for (size_t i = 0; i < BT_ARRAY_SIZE(archs); i++) known |= !strcmp(c->arch, archs[i]);
    if (!known)
        return bt_error(BT_EUNSUPPORTED, "%s: architecture '%s' is not supported (llama family only)", m->path, c->arch);

    char key[128];
    uint32_t u;
#define ARCH_KEY(suffix) (snprintf(key, sizeof(key), "%s." suffix, c->arch), key)
#define REQ_U32(suffix, dst) do { \
        if ((rc = bt_gguf_get_u32(g, ARCH_KEY(suffix), &u))) { \
            if (rc == BT_ENOTFOUND) return bt_error(BT_EFORMAT, "%s: %s is missing", m->path, key); \
            return rc; } \
        (dst) = (int)BT_MIN(u, 0x7fffffffu); } while (0)
    REQ_U32("embedding_length", c->dim);
    REQ_U32("feed_forward_length", c->hidden_dim);
    REQ_U32("block_count", c->n_layers);
    REQ_U32("attention.head_count", c->n_heads);
    if ((rc = get_u32_opt(g, ARCH_KEY("attention.head_count_kv"), (uint32_t)c->n_heads, &u))) return rc;
    c->n_kv_heads = (int)BT_MIN(u, 0x7fffffffu);
    if ((rc = get_u32_opt(g, ARCH_KEY("context_length"), 2048, &u))) return rc;
    c->ctx_len = (int)BT_MIN(u, 0x7fffffffu);
    if ((rc = get_f32_opt(g, ARCH_KEY("attention.layer_norm_rms_epsilon"), 1e-5f, &c->norm_eps))) return rc;
    if ((rc = get_f32_opt(g, ARCH_KEY("rope.freq_base"), 10000.0f, &c->rope_base))) return rc;

    /* Sanity limits: reject absurd dimensions before allocating anything. */
    if (c->dim <= 0 || c->dim > 65536 || c->n_layers <= 0 || c->n_layers > 1024 ||
        c->n_heads <= 0 || c->n_heads > 1024 || c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads ||
        c->hidden_dim <= 0 || c->hidden_dim > 1 << 20 || c->dim % c->n_heads)
        return bt_error(BT_EFORMAT, "%s: implausible hyperparameters (dim %d, hidden %d, layers %d, heads %d/%d)",
                        m->path, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads);
    c->head_dim = c->dim / c->n_heads;
    if ((rc = get_u32_opt(g, ARCH_KEY("attention.key_length"), (uint32_t)c->head_dim, &u))) return rc;
    if ((int)u != c->head_dim)
        return bt_error(BT_EUNSUPPORTED, "%s: head dim %u != dim/heads %d is not supported", m->path, u, c->head_dim);
    if ((rc = get_u32_opt(g, ARCH_KEY("rope.dimension_count"), (uint32_t)c->head_dim, &u))) return rc;
    c->rope_dim = (int)u;
    if (c->rope_dim != c->head_dim)
        return bt_error(BT_EUNSUPPORTED, "%s: partial RoPE (%d of %d dims) is not supported", m->path, c->rope_dim, c->head_dim);
    if (c->ctx_len <= 0) c->ctx_len = 2048;

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
#undef ARCH_KEY

    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    char (*names)[NAME_CAP] = calloc((size_t)c->n_layers * 9 + 1, NAME_CAP);
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

    FILE *f = fopen(path, "rb");
    if (!f) { bt_error(BT_EIO, "%s: cannot open: %s", path, strerror(errno)); bt_model_free(m); return BT_EIO; }
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
