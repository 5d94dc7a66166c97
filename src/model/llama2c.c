/* llama2c.c - karpathy/llama2.c checkpoints (legacy version-0 layout) and
 * their tokenizer.bin.
 *
 * Checkpoint: 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
 * classifier follows), then f32 arrays in a fixed order. We check that the
 * file size matches the header exactly (shared or separate classifier), so
 * a truncated or padded file is refused rather than read out of bounds. */
#include "model/model.h"
#include "base/dtype.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct l2c_priv {
    void *map;
    size_t map_len;
    char *tok_buf;          /* all pieces, back to back */
    const char **text;
    uint32_t *len;
    float *scores;
    int32_t *types;
} l2c_priv;

void bt_llama2c_free_priv(bt_model *m)
{
    l2c_priv *p = m->priv;
    if (!p) return;
    if (p->map) munmap(p->map, p->map_len);
    free(p->tok_buf); free(p->text); free(p->len); free(p->scores); free(p->types);
    free(p);
    m->priv = NULL;
}

static void setw(bt_weight *w, const float *data, int64_t cols, int64_t rows, const char *name)
{
    w->data = data; w->type = BT_DT_F32; w->cols = cols; w->rows = rows; w->n_slab = 1; w->name = name;
}

/* The checkpoint in data[0, size) (4-byte aligned; borrowed: it must
 * outlive the model). name is the path or a label for messages. */
static int l2c_parse(const uint8_t *data, size_t size, const char *path, bt_model *m)
{
    if (size < 28)
        return bt_error(BT_EFORMAT, "%s: not a GGUF file (no GGUF magic) and too short (%zu bytes) for a llama2.c checkpoint", path, size);
    m->file_data = data; m->file_size = size;

    int32_t h[7];
    memcpy(h, data, sizeof(h));
    /* vocab is widened before negating: -INT_MIN does not fit an int */
    int64_t vocab64 = h[5];
    int dim = h[0], hidden = h[1], nl = h[2], nh = h[3], nkv = h[4], seq = h[6];
    bool shared = vocab64 > 0;
    if (vocab64 < 0) vocab64 = -vocab64;
    if (dim <= 0 || dim > 65536 || hidden <= 0 || hidden > (1 << 20) || nl <= 0 || nl > 1024 ||
        nh <= 0 || nh > 1024 || nkv <= 0 || nkv > nh || nh % nkv || dim % nh || (dim / nh) % 2 ||
        vocab64 <= 0 || vocab64 > (1 << 24) || seq <= 0 || seq > (1 << 24))
        return bt_error(BT_EFORMAT, "%s: not a GGUF file and not a plausible llama2.c checkpoint "
                        "(header dim %d hidden %d layers %d heads %d/%d vocab %d seq %d)",
                        path, h[0], hidden, nl, nh, nkv, h[5], seq);
    int vocab = (int)vocab64;
    int hs = dim / nh;
    uint64_t kv_dim = (uint64_t)nkv * hs;
    uint64_t n = (uint64_t)vocab * dim                       /* token_embedding */
        + (uint64_t)nl * dim                                  /* rms_att */
        + (uint64_t)nl * dim * dim * 2                        /* wq, wo */
        + (uint64_t)nl * dim * kv_dim * 2                     /* wk, wv */
        + (uint64_t)nl * dim                                  /* rms_ffn */
        + (uint64_t)nl * dim * hidden * 3                     /* w1 w2 w3 */
        + dim                                                 /* rms_final */
        + (uint64_t)seq * hs;                                 /* freq_cis real + imag */
    uint64_t expect = 28 + 4 * (n + (shared ? 0 : (uint64_t)vocab * dim));
    if (size != expect)
        return bt_error(BT_EFORMAT, "%s: llama2.c checkpoint is %zu bytes but its header (dim %d, %d layers, vocab %d, %s classifier) needs %llu%s",
                        path, size, dim, nl, vocab, shared ? "shared" : "separate",
                        (unsigned long long)expect, size < expect ? " (truncated?)" : "");
    bt_config *c = &m->cfg;
    strcpy(c->arch, "llama");
    const char *bn = strrchr(path, '/');
    snprintf(c->name, sizeof(c->name), "%s", bn ? bn + 1 : path);
    c->dim = dim; c->hidden_dim = hidden; c->n_layers = nl; c->n_heads = nh; c->n_kv_heads = nkv;
    c->head_dim = hs; c->rope_dim = hs; c->n_vocab = vocab; c->ctx_len = seq;
    c->norm_eps = 1e-5f; c->rope_base = 10000.0f; c->tied_output = shared;
    c->desc = bt_arch_find("llama");
    c->flags = c->desc->flags;
    c->rope_kind = BT_ROPE_NORM;
    c->rope_freq_scale = 1.0f;
    c->embd_scale = c->resid_scale = c->logit_scale = 1.0f;
    c->attn_scale = 0;   /* 0: 1/sqrt(head_dim) */

    m->layers = calloc((size_t)nl, sizeof(*m->layers));
    if (!m->layers) return bt_error(BT_ENOMEM, "out of memory");
    const float *w = (const float *)(data + 28);
    setw(&m->token_embd, w, dim, vocab, "token_embedding"); w += (uint64_t)vocab * dim;
#define PER_LAYER(field, cols, rows, nm) \
    for (int l = 0; l < nl; l++) { setw(&m->layers[l].field, w, cols, rows, nm); w += (uint64_t)(cols) * (rows); }
    PER_LAYER(attn_norm, dim, 1, "rms_att_weight")
    PER_LAYER(wq, dim, dim, "wq")
    PER_LAYER(wk, dim, kv_dim, "wk")
    PER_LAYER(wv, dim, kv_dim, "wv")
    PER_LAYER(wo, dim, dim, "wo")
    PER_LAYER(ffn_norm, dim, 1, "rms_ffn_weight")
    PER_LAYER(w_gate, dim, hidden, "w1")
    PER_LAYER(w_down, hidden, dim, "w2")
    PER_LAYER(w_up, dim, hidden, "w3")
#undef PER_LAYER
    setw(&m->output_norm, w, dim, 1, "rms_final_weight"); w += dim;
    w += (uint64_t)seq * hs;     /* freq_cis_real, freq_cis_imag: RoPE is recomputed */
    if (shared) m->output = m->token_embd;
    else setw(&m->output, w, dim, vocab, "wcls");

    return BT_OK;
}

static l2c_priv *l2c_priv_new(bt_model *m)
{
    l2c_priv *p = calloc(1, sizeof(*p));
    if (!p) { bt_error(BT_ENOMEM, "out of memory"); return NULL; }
    m->priv = p;
    strcpy(m->format, "llama2c");
    return p;
}

static int bt_llama2c_tokenizer_load(const char *path, int n_vocab, bt_model *m);

int bt_llama2c_load(const char *path, const char *tokenizer_path, bt_model *m)
{
    l2c_priv *p = l2c_priv_new(m);
    if (!p) return BT_ENOMEM;
    int fd = bt_open_input(path);     /* a fifo is refused, never waited on */
    if (fd < 0) return fd;
    struct stat st;
    if (fstat(fd, &st) < 0) { close(fd); return bt_error(BT_EIO, "%s: %s", path, strerror(errno)); }
    size_t size = (size_t)st.st_size;
    if (size < 28) { close(fd); return l2c_parse(NULL, size, path, m); }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return bt_error(BT_EIO, "%s: mmap failed: %s", path, strerror(errno));
    p->map = map; p->map_len = size;
    int rc = l2c_parse(map, size, path, m);
    if (rc) return rc;
    if (tokenizer_path) return bt_llama2c_tokenizer_load(tokenizer_path, m->cfg.n_vocab, m);
    return BT_OK;
}

int bt_llama2c_load_buffer(const void *data, size_t size, const char *name, bt_model *m)
{
    if (!l2c_priv_new(m)) return BT_ENOMEM;
    return l2c_parse(data, size, name, m);
}

/* Parse a tokenizer held in buf (malloc'd; the model owns it from here on,
 * whatever the outcome: the pieces point into it). */
static int tok_parse(char *buf, size_t size, const char *path, int n_vocab, bt_model *m)
{
    l2c_priv *p = m->priv;
    free(p->tok_buf); free(p->text); free(p->len); free(p->scores); free(p->types);
    p->text = NULL; p->len = NULL; p->scores = NULL; p->types = NULL;
    p->tok_buf = buf;
    if (n_vocab <= 0) return bt_error(BT_EINVAL, "%s: vocabulary size %d", path, n_vocab);
    size_t off = 0;
#define NEED(nb, what) do { if (size - off < (size_t)(nb)) { \
        return bt_error(BT_EFORMAT, "%s: truncated llama2.c tokenizer at byte %zu (%s)", path, off, what); } } while (0)
    NEED(4, "max_token_length");
    int32_t max_len;
    memcpy(&max_len, buf, 4); off = 4;
    if (max_len <= 0 || max_len > 4096) { return bt_error(BT_EFORMAT, "%s: not a llama2.c tokenizer (max_token_length %d)", path, max_len); }
    p->text = calloc((size_t)n_vocab, sizeof(*p->text));
    p->len = calloc((size_t)n_vocab, sizeof(*p->len));
    p->scores = calloc((size_t)n_vocab, sizeof(float));
    p->types = calloc((size_t)n_vocab, sizeof(int32_t));
    if (!p->text || !p->len || !p->scores || !p->types) return bt_error(BT_ENOMEM, "out of memory");
    for (int i = 0; i < n_vocab; i++) {
        NEED(8, "token header");
        int32_t len;
        memcpy(&p->scores[i], buf + off, 4);
        memcpy(&len, buf + off + 4, 4);
        off += 8;
        if (len < 0 || len > max_len) {
            return bt_error(BT_EFORMAT, "%s: token %d has length %d (max_token_length %d)", path, i, len, max_len);
        }
        if (size - off < (size_t)len)
            return bt_error(BT_EFORMAT, "%s: truncated llama2.c tokenizer at byte %zu (token %d of %d)", path, off, i, n_vocab);
        p->text[i] = buf + off;
        p->len[i] = (uint32_t)len;
        off += (size_t)len;
        unsigned b;
        char tmp[8];
        p->types[i] = BT_TOK_NORMAL;
        if (len == 6 && p->text[i][0] == '<') {
            memcpy(tmp, p->text[i], 6); tmp[6] = 0;
            if (sscanf(tmp, "<0x%2X>", &b) == 1) p->types[i] = BT_TOK_BYTE;
        }
    }
#undef NEED
    if (off != size)
        bt_warn("%s: %zu trailing bytes after %d tokens (vocabulary size mismatch?)", path, size - off, n_vocab);
    p->types[0] = BT_TOK_UNKNOWN;
    if (n_vocab > 2) { p->types[1] = BT_TOK_CONTROL; p->types[2] = BT_TOK_CONTROL; }
    bt_vocab *v = &m->vocab;
    v->kind = BT_VOCAB_LLAMA2C;
    snprintf(v->pre, sizeof(v->pre), "default");
    v->n_tokens = n_vocab;
    v->text = p->text; v->len = p->len; v->scores = p->scores; v->type = p->types;
    v->bos = 1; v->eos = 2; v->unk = 0; v->pad = -1; v->eot = -1;
    v->add_bos = true; v->add_eos = false; v->add_space_prefix = true;
    m->has_vocab = true;
    return BT_OK;
}

static int bt_llama2c_tokenizer_load(const char *path, int n_vocab, bt_model *m)
{
    char *buf;
    size_t size;
    int rc = bt_read_file(path, &buf, &size);
    if (rc) return rc;
    return tok_parse(buf, size, path, n_vocab, m);
}

int bt_llama2c_tokenizer_load_buffer(const void *data, size_t size, const char *name, int n_vocab, bt_model *m)
{
    char *buf = malloc(size ? size : 1);
    if (!buf) return bt_error(BT_ENOMEM, "out of memory");
    if (size) memcpy(buf, data, size);
    return tok_parse(buf, size, name, n_vocab, m);
}
