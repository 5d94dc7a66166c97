/* fuzz_hf.c - Hugging Face folder JSON: the first input byte picks which
 * file the rest of the input becomes (0 config.json, 1 tokenizer.json,
 * 2 tokenizer_config.json, 3 generation_config.json); the other files are
 * fixed valid ones (a tiny random Llama in model.safetensors, a small
 * byte-level tokenizer.json). Drives bt_model_load on the folder (config
 * keys, tensor mapping, tokenizer.json components, special ids, chat
 * template) and, when a vocabulary loads, the tokenizer built from it. The
 * files are in a private folder on tmpfs (/dev/shm, else $TMPDIR); an input
 * rewrites its file and restores the one the previous input replaced. */
#include "fuzz.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[256];
static const char *const FILES[] = { "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json" };
static char *fixed[4];
static size_t fixed_len[4];

static void put(const char *name, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

/* byte-level vocabulary: the 256 byte stand-ins, a few merges, added tokens */
static char *tokenizer_json(void)
{
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"added_tokens\":[{\"id\":259,\"content\":\"<|im_end|>\",\"special\":true},"
        "{\"id\":260,\"content\":\"<think>\",\"special\":false}],\"normalizer\":{\"type\":\"NFC\"},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}\"},"
        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"ignore_merges\":false,\"vocab\":{");
    for (int b = 0, id = 0; b < 256; b++) {
        /* GPT-2's byte -> code point table */
        int cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) ? b : 256 + id++;
        char u[8];
        if (cp < 0x80) snprintf(u, sizeof u, "%s%c", cp == '"' || cp == '\\' ? "\\" : "", cp);
        else snprintf(u, sizeof u, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
        n += (size_t)snprintf(s + n, cap - n, "\"%s\":%d,", u, b);
    }
    n += (size_t)snprintf(s + n, cap - n, "\"\\u0120t\":256,\"he\":257,\"\\u0120the\":258},"
                          "\"merges\":[\"\\u0120 t\",[\"h\",\"e\"],\"\\u0120t he\"]}}");
    return s;
}

static void cleanup(void)
{
    char p[512];
    for (int i = 0; i < 4; i++) { snprintf(p, sizeof p, "%s/%s", dir, FILES[i]); unlink(p); }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    bt_log_level = 0;
    /* tmpfs when there is one: each input rewrites files, and on a disk
     * that was most of an input's time (waiting, not computing) */
    struct stat sb;
    const char *base = !stat("/dev/shm", &sb) && S_ISDIR(sb.st_mode) && !access("/dev/shm", W_OK) ? "/dev/shm"
                       : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/bt-fuzz-hf.XXXXXX", base);
    if (!mkdtemp(dir)) abort();
    atexit(cleanup);
    /* tiny llama: vocab 261, dim 8, 1 layer, 2 heads, 1 kv head, ffn 16, tied */
    static const struct { const char *name; int r, c; } T[] = {
        { "model.embed_tokens.weight", 261, 8 }, { "model.norm.weight", 8, 0 },
        { "model.layers.0.input_layernorm.weight", 8, 0 }, { "model.layers.0.post_attention_layernorm.weight", 8, 0 },
        { "model.layers.0.self_attn.q_proj.weight", 8, 8 }, { "model.layers.0.self_attn.k_proj.weight", 4, 8 },
        { "model.layers.0.self_attn.v_proj.weight", 4, 8 }, { "model.layers.0.self_attn.o_proj.weight", 8, 8 },
        { "model.layers.0.mlp.gate_proj.weight", 16, 8 }, { "model.layers.0.mlp.up_proj.weight", 16, 8 },
        { "model.layers.0.mlp.down_proj.weight", 8, 16 },
    };
    char h[4096];
    size_t hn = 1, off = 0;
    h[0] = '{';
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        size_t nb = (size_t)T[i].r * (T[i].c ? T[i].c : 1) * 4;
        if (T[i].c) hn += (size_t)snprintf(h + hn, sizeof h - hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                           i ? "," : "", T[i].name, T[i].r, T[i].c, off, off + nb);
        else hn += (size_t)snprintf(h + hn, sizeof h - hn, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                    i ? "," : "", T[i].name, T[i].r, off, off + nb);
        off += nb;
    }
    h[hn++] = '}';
    size_t total = 8 + hn + off;
    uint8_t *st = calloc(1, total);
    uint64_t hl = hn;
    memcpy(st, &hl, 8);
    memcpy(st + 8, h, hn);
    float *w = (float *)(st + 8 + hn);
    for (size_t i = 0; i < off / 4; i++) { float v = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f; memcpy(w + i, &v, 4); }
    put("model.safetensors", st, total);
    free(st);
    fixed[0] = strdup("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":8,\"intermediate_size\":16,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"vocab_size\":261,"
                      "\"tie_word_embeddings\":true,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                      "\"original_max_position_embeddings\":64}}");
    fixed[1] = tokenizer_json();
    fixed[2] = strdup("{\"eos_token\":\"<|im_end|>\",\"add_bos_token\":false,\"chat_template\":\"{{ messages }}\"}");
    fixed[3] = strdup("{\"eos_token_id\":[259,260]}");
    for (int i = 0; i < 4; i++) fixed_len[i] = strlen(fixed[i]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int which = data[0] & 3;
    /* only the input's file and the one the last input replaced change */
    static int last = -1;
    for (int i = 0; i < 4; i++)
        if (i == which) put(FILES[i], data + 1, size - 1);
        else if (i == last || last < 0) put(FILES[i], fixed[i], fixed_len[i]);
    last = which;
    bt_model *m = NULL;
    if (bt_model_load(dir, NULL, &m) != BT_OK) {
        FUZZ_CHECK(!m && bt_errmsg()[0]);
        return 0;
    }
    if (m->has_vocab) {
        bt_tokenizer *t = NULL;
        if (bt_tokenizer_new(&m->vocab, &t) == BT_OK) {
            static const char text[] = "the 2024 <|im_end|><think> A\xcc\x8a \xff";
            int32_t *ids = NULL; size_t n = 0;
            if (bt_tokenize(t, text, sizeof text - 1, true, true, &ids, &n) == BT_OK)
                for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < bt_tokenizer_n_vocab(t));
            free(ids);
            bt_tokenizer_free(t);
        }
    }
    bt_model_free(m);
    return 0;
}
