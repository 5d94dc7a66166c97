/* llama_logits.c - llama.cpp's own logits for every position of one list of
 * token ids, for tests/oracle/test_hybrid_llamacpp.py: it checks the float64
 * oracle (ref_hybrid.py) on architectures bangtrace's loader does not know
 * yet, so it talks to llama.cpp directly instead of through
 * `bangtrace forward --engine llama.cpp`.
 *
 *   llama_logits MODEL OUT.f32 FIRST < ids
 *     stdin: the ids, separated by spaces
 *     FIRST: how many ids go into the first llama_decode (0: all of them);
 *            the rest are decoded one per call, so the recurrent state and
 *            the KV cache are carried between calls
 *     OUT.f32: T x n_vocab little-endian float32 logits, row t for id t
 *
 * f32 weights as the file has them, f32 K/V cache, flash attention off,
 * one thread, no repacked weights (the settings the oracle's tolerance is
 * stated for). Exit 0, 2 on any error (one line on stderr). */
#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR || getenv("LLAMA_LOGITS_VERBOSE")) fputs(text, stderr);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: llama_logits MODEL OUT.f32 FIRST < ids\n");
        return 2;
    }
    static llama_token ids[8192];
    int n = 0;
    char word[32];
    while (n < 8192 && scanf("%31s", word) == 1) ids[n++] = atoi(word);
    if (n == 0) { fprintf(stderr, "llama_logits: no token ids on stdin\n"); return 2; }
    int first = atoi(argv[3]);
    if (first <= 0 || first > n) first = n;

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama_logits: cannot load %s\n", argv[1]); return 2; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) { fprintf(stderr, "llama_logits: id %d out of range\n", ids[i]); return 2; }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n < 256 ? 256 : n + 1);
    cp.n_batch = cp.n_ubatch = (uint32_t)(first < 32 ? 32 : first);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_logits: cannot create a context\n"); return 2; }

    FILE *out = fopen(argv[2], "wb");
    if (!out) { fprintf(stderr, "llama_logits: cannot write %s\n", argv[2]); return 2; }
    struct llama_batch b = llama_batch_init(first, 0, 1);
    for (int at = 0; at < n;) {
        int len = at == 0 ? first : 1;
        b.n_tokens = len;
        for (int i = 0; i < len; i++) {
            b.token[i] = ids[at + i];
            b.pos[i] = at + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        if (llama_decode(ctx, b)) { fprintf(stderr, "llama_logits: llama_decode failed at id %d\n", at); return 2; }
        for (int i = 0; i < len; i++) {
            const float *lg = llama_get_logits_ith(ctx, i);
            if (!lg || fwrite(lg, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) {
                fprintf(stderr, "llama_logits: no logits for id %d\n", at + i);
                return 2;
            }
        }
        at += len;
    }
    if (fclose(out)) { fprintf(stderr, "llama_logits: cannot write %s\n", argv[2]); return 2; }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
