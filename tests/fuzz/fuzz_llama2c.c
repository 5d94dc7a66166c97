/* fuzz_llama2c.c - llama2.c checkpoints through bt_model_load_buffer (the
 * header's plausibility checks and the exact size rule). Inputs starting
 * with the GGUF magic belong to fuzz_gguf and are skipped. */
#include "fuzz.h"
#include "model/model.h"
#include "base/util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) { bt_log_level = 0; return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && !memcmp(data, "GGUF", 4)) return 0;
    /* libFuzzer's buffer is malloc'd, hence aligned for the f32 weights */
    bt_model *m = NULL;
    if (bt_model_load_buffer(data, size, "fuzz.bin", &m) != BT_OK) {
        FUZZ_CHECK(!m && bt_errmsg()[0]);
        return 0;
    }
    const bt_config *c = &m->cfg;
    FUZZ_CHECK(c->n_vocab > 0 && c->dim > 0 && c->n_layers > 0 && c->head_dim * c->n_heads == c->dim);
    /* every weight lies inside the buffer: the engine does not re-check */
    const float *end = (const float *)(data + size);
    const bt_weight *w[] = { &m->token_embd, &m->output_norm, &m->output };
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        FUZZ_CHECK((const uint8_t *)w[i]->data >= data && (const float *)w[i]->data + w[i]->cols * w[i]->rows <= end);
    for (int l = 0; l < c->n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        const bt_weight *lw[] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; i < sizeof lw / sizeof *lw; i++)
            FUZZ_CHECK((const float *)lw[i]->data + lw[i]->cols * lw[i]->rows <= end);
    }
    bt_model_free(m);
    return 0;
}
