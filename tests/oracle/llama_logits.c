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
 *   llama_logits --mtp MODEL OUT.f32 H.f32 POS0 < ids
 *     the model's MTP (nextn) block in llama.cpp's MTP context
 *     (LLAMA_CONTEXT_TYPE_MTP, MTP layers loaded), as its draft-mtp
 *     speculation drives it: row t is id t at position POS0 + t with
 *     H.f32's row t (T x n_embd float32: the trunk's output-normed hidden
 *     state, h_nextn) as its state embedding; all rows in one call
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

static int run_mtp(struct llama_model *model, struct llama_context *ctx, const llama_token *ids, int n,
                   int n_vocab, const char *out_path, const char *h_path, int pos0)
{
    if (llama_model_n_layer_nextn(model) < 1) { fprintf(stderr, "llama_logits: the model has no MTP layer\n"); return 2; }
    int n_embd = llama_model_n_embd(model);
    float *h = malloc(sizeof(float) * (size_t)n * (size_t)n_embd);
    FILE *f = fopen(h_path, "rb");
    if (!h || !f || fread(h, sizeof(float) * (size_t)n_embd, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "llama_logits: cannot read %d rows of %d floats from %s\n", n, n_embd, h_path);
        return 2;
    }
    fclose(f);
    struct llama_batch_ext *b = llama_batch_ext_init(ctx);
    for (int i = 0; i < n; i++) {
        llama_pos pos[4] = {pos0 + i, 0, 0, 0};
        int32_t idx = llama_batch_ext_add_token(b, 0, ids[i]);
        struct llama_embd e = {h + (size_t)i * (size_t)n_embd, 1, (size_t)n_embd};
        if (idx != i || !llama_batch_ext_set_pos(b, idx, pos) || !llama_batch_ext_set_embd_token(b, idx, e)
            || !llama_batch_ext_set_output_logits(b, idx, true)) {
            fprintf(stderr, "llama_logits: cannot build the MTP batch at row %d\n", i);
            return 2;
        }
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b)) { fprintf(stderr, "llama_logits: MTP llama_process failed\n"); return 2; }
    FILE *out = fopen(out_path, "wb");
    if (!out) { fprintf(stderr, "llama_logits: cannot write %s\n", out_path); return 2; }
    for (int i = 0; i < n; i++) {
        const float *lg = llama_get_logits_ith(ctx, i);
        if (!lg || fwrite(lg, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) {
            fprintf(stderr, "llama_logits: no MTP logits for row %d\n", i);
            return 2;
        }
    }
    if (fclose(out)) { fprintf(stderr, "llama_logits: cannot write %s\n", out_path); return 2; }
    llama_batch_ext_free(b);
    free(h);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}

int main(int argc, char **argv)
{
    bool mtp = argc > 1 && !strcmp(argv[1], "--mtp");
    if (mtp) { argv++; argc--; }
    if (argc != (mtp ? 5 : 4)) {
        fprintf(stderr, "usage: llama_logits MODEL OUT.f32 FIRST < ids\n"
                        "       llama_logits --mtp MODEL OUT.f32 H.f32 POS0 < ids\n");
        return 2;
    }
    static llama_token ids[8192];
    int n = 0;
    char word[32];
    while (n < 8192 && scanf("%31s", word) == 1) ids[n++] = atoi(word);
    if (n == 0) { fprintf(stderr, "llama_logits: no token ids on stdin\n"); return 2; }
    int first = mtp ? n : atoi(argv[3]);
    if (first <= 0 || first > n) first = n;

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    mp.load_mtp = mtp;
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
    if (mtp) cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_logits: cannot create a context\n"); return 2; }

    if (mtp) return run_mtp(model, ctx, ids, n, n_vocab, argv[2], argv[3], atoi(argv[4]));
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
