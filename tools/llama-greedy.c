/* llama-greedy.c - llama.cpp's own greedy continuation of a list of token
 * ids, with its cache type and flash-attention setting named on the command
 * line. The references in tests/golden/llama.cpp-stories260K.txt come from
 * it (tools/llama-golden builds and runs it against the pinned llama.cpp in
 * ~/.cache/bangtrace/llama.cpp/<version>).
 *
 *   llama-greedy [--text] MODEL N FA KV THREADS [REPACK]  < prompts
 *     FA: auto (llama.cpp's default) | on | off;  KV: f16 (default) | f32 | bf16 | q8_0
 *     REPACK: on (default: llama.cpp's extra CPU buffer types, weights
 *             repacked into interleaved layouts, AMX where usable) | off
 *     stdin: one prompt per line, its ids separated by spaces (BOS included);
 *            with --text, one text prompt per line, tokenized by llama.cpp
 *            (llama_tokenize, special tokens added as the vocabulary asks)
 *     stdout: one line per prompt, the N greedy ids (argmax, lowest id on a
 *             tie) that follow, stopping early at an end-of-generation id
 *             (which is not printed: bangtrace's completion ids leave the
 *             stopping token out); with --text, "PROMPT_IDS<TAB>IDS"
 *
 * With auto f16 on, everything is llama.cpp's own default (llama_model_default_params,
 * llama_context_default_params; only the context, batch and threads are
 * set). Each prompt runs in a fresh context, prompt in one batch, then one
 * token per decode, as llama.cpp's simple example and llama-cli do. */
#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("LLAMA_GREEDY_VERBOSE")) fputs(text, stderr);
}

int main(int argc, char **argv)
{
    bool text = argc > 1 && !strcmp(argv[1], "--text");
    if (text) { argv++; argc--; }
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: llama-greedy [--text] MODEL N auto|on|off f16|f32|bf16|q8_0 THREADS [on|off] < prompts\n");
        return 2;
    }
    int n_gen = atoi(argv[2]), threads = atoi(argv[5]);
    enum llama_flash_attn_type fa = !strcmp(argv[3], "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                  : !strcmp(argv[3], "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    enum ggml_type kv = !strcmp(argv[4], "f32") ? GGML_TYPE_F32 : !strcmp(argv[4], "bf16") ? GGML_TYPE_BF16
                      : !strcmp(argv[4], "q8_0") ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (argc == 7 && !strcmp(argv[6], "off")) mp.use_extra_bufts = false;   /* else llama.cpp's default (on) */
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama-greedy: cannot load %s\n", argv[1]); return 2; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    static char line[1 << 16];
    llama_token ids[4096];
    while (fgets(line, sizeof(line), stdin)) {
        int n = 0;
        if (text) {
            line[strcspn(line, "\n")] = 0;
            n = llama_tokenize(vocab, line, (int32_t)strlen(line), ids, 4096, true, false);
            if (n < 0) { fprintf(stderr, "llama-greedy: cannot tokenize a prompt\n"); return 2; }
            for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
            putchar('\t');
        } else
            for (char *s = strtok(line, " \t\n"); s && n < 4096; s = strtok(NULL, " \t\n")) ids[n++] = atoi(s);
        if (n == 0) { putchar('\n'); continue; }
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = (uint32_t)llama_model_n_ctx_train(model);
        cp.n_batch = cp.n_ubatch = 512;
        cp.n_seq_max = 1;
        cp.n_threads = cp.n_threads_batch = threads;
        cp.flash_attn_type = fa;
        cp.type_k = cp.type_v = kv;
        cp.no_perf = true;
        struct llama_context *ctx = llama_init_from_model(model, cp);
        if (!ctx) { fprintf(stderr, "llama-greedy: cannot create a context\n"); return 2; }
        llama_token tok;
        struct llama_batch b = llama_batch_get_one(ids, n);
        for (int i = 0; i < n_gen; i++) {
            if (llama_decode(ctx, b)) { fprintf(stderr, "llama-greedy: llama_decode failed\n"); return 2; }
            const float *lg = llama_get_logits_ith(ctx, -1);
            tok = 0;
            for (int v = 1; v < n_vocab; v++) if (lg[v] > lg[tok]) tok = v;
            if (llama_vocab_is_eog(vocab, tok)) break;
            printf("%s%d", i ? " " : "", tok);
            if (n + i + 1 >= (int)cp.n_ctx) break;
            b = llama_batch_get_one(&tok, 1);
        }
        putchar('\n');
        fflush(stdout);
        llama_free(ctx);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
