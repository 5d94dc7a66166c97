/* provenance.c - whose data a batched request read (see provenance.h). */
#include "trace/provenance.h"
#include "trace/trace.h"
#include "base/util.h"

#include <stdio.h>
#include <string.h>

typedef struct acc {
    bt_provenance *p;
    const char *self;
    int upto;
    int layer;
    int rank;                   /* of the culprit so far: 3 slot, 2 bad block, 1 fault note, 0 none */
    int hit_lo, hit_hi;
    char hit_blocks[96], hit_writer[96];
} acc;

static const char *mode_words(const char *m)
{
    return !strcmp(m, "hit") ? "prefix hit" : !strcmp(m, "r") ? "in its block table" : "written by it";
}

static void add_line(bt_provenance *p, const char *s)
{
    for (int i = 0; i < p->n_lines; i++) if (!strcmp(p->lines[i], s)) return;
    if (p->n_lines < BT_PROV_LINES) snprintf(p->lines[p->n_lines++], sizeof p->lines[0], "%s", s);
}

static int on_row(void *user, const bt_kv_access *a)
{
    acc *c = user;
    bt_provenance *p = c->p;
    p->n_rows++;
    if (!strcmp(a->mode, "hit")) {
        p->n_hit_blocks++;
        if (c->hit_lo < 0 || a->pos_lo < c->hit_lo) c->hit_lo = a->pos_lo;
        if (a->pos_hi > c->hit_hi) c->hit_hi = a->pos_hi;
        size_t n = strlen(c->hit_blocks);
        if (n < sizeof c->hit_blocks - 12) snprintf(c->hit_blocks + n, sizeof c->hit_blocks - n, "%s%d", n ? ", " : "", a->block);
        if (!c->hit_writer[0] && a->writer[0])
            snprintf(c->hit_writer, sizeof c->hit_writer, "%s at server step %d", a->writer, a->writer_step);
    }
    if (c->upto >= 0 && a->step > c->upto) return 0;
    char where[48] = "";
    if (c->layer >= 0) snprintf(where, sizeof where, ", layer %d", c->layer);
    char line[512];
    int rank = 0;
    bool other_bad = a->bad_step >= 0 && a->bad_by[0] && strcmp(a->bad_by, c->self);
    if (!strcmp(a->mode, "snap") && (other_bad || a->note[0])) {
        rank = other_bad ? 2 : 1;
        char bad[300] = "";
        if (other_bad)
            snprintf(bad, sizeof bad, "; that state first held a non-finite value at server step %d when %s%s wrote it",
                     a->bad_step, strncmp(a->bad_by, "req-", 4) ? "the " : "", a->bad_by);
        snprintf(line, sizeof line, "step %d%s: restored the recurrent state after position %d from snapshot %d (prefix hit) "
                 "written by %s at server step %d%s%s%s",
                 a->step, where, a->pos_hi, a->block, a->writer[0] ? a->writer : "?", a->writer_step, bad,
                 a->note[0] ? ": " : "", a->note);
    } else if (!strcmp(a->mode, "slot") && !strncmp(a->note, "slot_swap", 9)) {
        rank = 3;
        snprintf(line, sizeof line, "step %d%s: state slot %d written by %s at server step %d, which is not this request's "
                 "(%s)", a->step, where, a->block, a->writer[0] ? a->writer : "another request", a->writer_step, a->note);
    } else if (!strcmp(a->mode, "slot")) {
        rank = 3;
        snprintf(line, sizeof line, "step %d%s: state slot %d last written by %s at server step %d, not reset on reuse%s%s%s",
                 a->step, where, a->block, a->writer[0] ? a->writer : "another request", a->writer_step,
                 a->note[0] ? " (" : "", a->note, a->note[0] ? ")" : "");
    } else if (other_bad && strcmp(a->mode, "w")) {
        rank = 2;
        const char *by = a->bad_by;
        snprintf(line, sizeof line, "step %d%s: read KV block %d (%s, positions %d-%d) written by %s at server step %d; "
                 "that block first went non-finite at server step %d when %s%s wrote it%s%s%s",
                 a->step, where, a->block, mode_words(a->mode), a->pos_lo, a->pos_hi, a->writer[0] ? a->writer : "?",
                 a->writer_step, a->bad_step, strncmp(by, "req-", 4) ? "the " : "", by, a->note[0] ? " (" : "", a->note,
                 a->note[0] ? ")" : "");
    } else if (a->note[0]) {
        rank = 1;
        snprintf(line, sizeof line, "step %d%s: read KV block %d (%s, positions %d-%d) written by %s at server step %d: %s",
                 a->step, where, a->block, mode_words(a->mode), a->pos_lo, a->pos_hi, a->writer[0] ? a->writer : "?",
                 a->writer_step, a->note);
    }
    if (!rank) return 0;
    add_line(p, line);
    if (rank > c->rank) {
        c->rank = rank;
        p->contaminated = true;
        p->culprit_step = a->step;
        p->culprit_block = a->block;
        p->culprit_slot = rank == 3;
        p->culprit_snap = !strcmp(a->mode, "snap");
        snprintf(p->culprit, sizeof p->culprit, "%s", line);
    }
    return 0;
}

int bt_provenance_get(bt_trace_reader *r, int upto_step, int layer, bt_provenance *out)
{
    memset(out, 0, sizeof *out);
    out->culprit_step = out->culprit_block = -1;
    const char *self = bt_trace_meta_get(r, "request_id");
    acc c = { .p = out, .self = self ? self : "", .upto = upto_step, .layer = layer, .hit_lo = -1, .hit_hi = -1 };
    int rc = bt_trace_kv_access_each(r, on_row, &c);
    if (rc) return rc;
    if (out->n_hit_blocks) {
        out->hit_tokens = c.hit_hi - c.hit_lo + 1;
        snprintf(out->hits, sizeof out->hits, "positions %d-%d from block%s %s (written by %s)", c.hit_lo, c.hit_hi,
                 out->n_hit_blocks > 1 ? "s" : "", c.hit_blocks, c.hit_writer[0] ? c.hit_writer : "?");
    }
    return BT_OK;
}
