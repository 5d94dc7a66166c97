/* generate.c - the generation loop (see generate.h). */
#include "gen/generate.h"
#include "base/text.h"
#include "base/util.h"
#include "gen/request.h"

#include <stdlib.h>
#include <string.h>

struct bt_generation {
    bt_generate_cfg c;
    bt_decoder *dec;
    int32_t *burst;                 /* (k + 1) one decoder step's tokens */
    float *burst_lp;
    size_t text_cap;
    bool done;
    bt_generate_out o;
};

void bt_generate_out_clear(bt_generate_out *o)
{
    free(o->ids);
    free(o->text);
    memset(o, 0, sizeof *o);
}

void bt_generation_free(bt_generation *g)
{
    if (!g) return;
    bt_decoder_free(g->dec);
    free(g->burst);
    free(g->burst_lp);
    bt_generate_out_clear(&g->o);
    free(g);
}

int bt_generation_new(const bt_generate_cfg *cfg, bt_generation **out)
{
    *out = NULL;
    bt_generation *g = calloc(1, sizeof *g);
    if (!g) return bt_error(BT_ENOMEM, "out of memory");
    g->c = *cfg;
    g->o.finish = "length";
    long n_max = BT_MAX(cfg->max_tokens, 0);
    int k = cfg->dec.drafter == BT_DRAFT_NONE ? 0 : BT_MAX(cfg->dec.k, 0);
    int rc = bt_decoder_new(&cfg->dec, cfg->prompt, cfg->n_prompt, (int)n_max, &g->dec);
    if (rc) { bt_generation_free(g); return rc; }
    g->burst = malloc((size_t)(k + 2) * sizeof(int32_t));
    g->burst_lp = malloc((size_t)(k + 2) * sizeof(float));
    g->o.ids = malloc((size_t)(n_max + 1) * sizeof(int32_t));
    if (!g->burst || !g->burst_lp || !g->o.ids || BT_VEC_RESERVE(g->o.text, g->text_cap, 1)) {
        bt_generation_free(g);
        return bt_error(BT_ENOMEM, "out of memory");
    }
    g->o.text[0] = 0;
    g->done = n_max <= 0;
    *out = g;
    return BT_OK;
}

bool bt_generation_done(const bt_generation *g) { return g->done; }
const bt_generate_out *bt_generation_out(const bt_generation *g) { return &g->o; }

void bt_generation_take(bt_generation *g, bt_generate_out *out)
{
    g->o.stats = *bt_decoder_stats_get(g->dec);
    *out = g->o;
    memset(&g->o, 0, sizeof g->o);
    g->text_cap = 0;
}

/* The text the caller may see now: all of it once done; before, not the
 * tail that could still start a stop string, and whole characters only. */
static void stream(bt_generation *g)
{
    bt_generate_out *o = &g->o;
    if (!g->c.on_text) return;
    size_t upto = o->text_len - (g->done ? 0 : bt_stop_holdback(o->text, o->text_len, g->c.stop, g->c.n_stop));
    if (upto > o->streamed && !g->done) upto = o->streamed + bt_text_utf8_complete(o->text + o->streamed, upto - o->streamed);
    if (upto <= o->streamed) return;
    if (g->c.on_text(g->c.user, o->text + o->streamed, upto - o->streamed)) { o->finish = "cancelled"; g->done = true; }
    o->streamed = upto;
}

/* One emitted token: its id, its text, the stop strings. */
static int take_token(bt_generation *g, int32_t id)
{
    const bt_generate_cfg *c = &g->c;
    bt_generate_out *o = &g->o;
    o->ids[o->n_ids++] = id;
    if (id < 0 || id >= c->model->cfg.n_vocab) {
        o->finish = "invalid_token";
        g->done = true;
        return BT_OK;
    }
    if (!c->ignore_eos && bt_tokenizer_is_eog(c->tok, id)) {
        o->n_ids--;
        o->finish = "stop";
        g->done = true;
        return BT_OK;
    }
    size_t pl;
    const char *piece = bt_token_piece(c->tok, id, &pl);
    /* As SentencePiece and llama2.c decode: the piece right after BOS loses
     * its leading space (the dummy prefix). */
    int32_t prev = o->n_ids > 1 ? o->ids[o->n_ids - 2] : c->prompt[c->n_prompt - 1];
    if (prev == bt_tokenizer_bos(c->tok) && pl > 0 && piece[0] == ' ' && c->model->vocab.add_space_prefix) { piece++; pl--; }
    if (BT_VEC_RESERVE(o->text, g->text_cap, o->text_len + pl + 1)) return bt_error(BT_ENOMEM, "out of memory");
    memcpy(o->text + o->text_len, piece, pl);
    size_t old = o->text_len;
    o->text_len += pl;
    o->text[o->text_len] = 0;
    const char *hit = bt_stop_find(o->text, o->text_len, old, c->stop, c->n_stop);
    if (hit) {
        o->text_len = (size_t)(hit - o->text);
        o->text[o->text_len] = 0;
        o->finish = "stop";
        g->done = true;
    }
    if (o->n_ids >= c->max_tokens) g->done = true;
    return BT_OK;
}

int bt_generation_step(bt_generation *g)
{
    if (g->done) return BT_OK;
    if (g->c.poll && (g->o.stopped = g->c.poll(g->c.user))) {
        g->o.finish = "cancelled";
        g->done = true;
        return BT_OK;
    }
    int nb = 0, rc = bt_decoder_next(g->dec, g->burst, g->burst_lp, &nb);
    if (rc) return rc;
    for (int b = 0; b < nb && !g->done; b++) {
        if ((rc = take_token(g, g->burst[b]))) return rc;
        stream(g);
    }
    return BT_OK;
}

int bt_generate(const bt_generate_cfg *cfg, bt_generate_out *out)
{
    memset(out, 0, sizeof *out);
    bt_generation *g;
    int rc = bt_generation_new(cfg, &g);
    if (rc) return rc;
    while (!rc && !g->done) rc = bt_generation_step(g);
    bt_generation_take(g, out);
    bt_generation_free(g);
    return rc;
}
