/* dump.c - `browse --dump VIEW`: each view as plain text for scripts, tests
 * and issue comments. Same model structs as the screen, no curses, no escape
 * sequences (token text is sanitized exactly as on screen; health is a
 * marker: '!' non-finite, '~' degenerate / far above median, '.' clean). */
#include "tui.h"
#include "util.h"

#include <math.h>
#include <string.h>

static const char *num(char *b, size_t cap, double v)
{
    if (isnan(v)) snprintf(b, cap, "-");
    else snprintf(b, cap, "%.4g", v);
    return b;
}

static const char *role_word(char r)
{
    return r == 'p' ? "prompt" : r == 'g' ? "gen" : r == 'd' ? "draft" : r == 'b' ? "bonus" : "?";
}

static void dump_cells(const tui_tokens *tk, FILE *out)
{
    for (int i = 0; i < tk->n; i++) {
        const tui_cell *c = &tk->cells[i];
        fprintf(out, "%8lld %6d %6d %7d %-6s %c %7lld  %s\n", (long long)c->seq0, c->step0, c->pos0, c->id, role_word(c->role),
                tui_health_marker(c->health), (long long)c->count, c->text);
    }
}

int tui_dump_tokens(tui_app *a, FILE *out, int step)
{
    tui_tokens *tk = &a->tk;
    int rc;
    if (tk->max_seq < 0) { fprintf(out, "# no tokens in this trace\n"); return BT_OK; }
    int64_t seq = tk->min_seq;
    if (step >= 0) {
        seq = tui_trace_step_seq(a->tr, step);
        if (seq < 0) return bt_error(BT_ENOTFOUND, "%s: no token at step %d", tui_trace_path(a->tr), step);
    }
    if ((rc = tui_tokens_load(a->tr, seq, a->san, tk))) return rc;
    fprintf(out, "# tokens seq %lld..%lld of %lld..%lld; health: ! non-finite logits, ~ degenerate, . clean\n",
            (long long)(a->dump_all ? tk->min_seq : tk->lo), (long long)(a->dump_all ? tk->max_seq : tk->hi),
            (long long)tk->min_seq, (long long)tk->max_seq);
    fprintf(out, "#    seq   step    pos      id role   h   count  text\n");
    if (!a->dump_all) { dump_cells(tk, out); return BT_OK; }
    for (int64_t s = tk->min_seq; s <= tk->max_seq;) {
        if ((rc = tui_tokens_load(a->tr, s + TUI_TOK_WINDOW / 2, a->san, tk))) return rc;
        /* a window starts at seq - W/2 (clamped); print only cells from s on */
        for (int i = 0; i < tk->n; i++) {
            if (tk->cells[i].seq0 < s) continue;
            tui_tokens one = { .cells = &tk->cells[i], .n = 1 };
            dump_cells(&one, out);
        }
        if (!tk->n || tk->hi < s) break;
        s = tk->hi + 1;
    }
    return BT_OK;
}

static void dump_grid(tui_app *a, const tui_step *st, FILE *out)
{
    const tui_grid *g = tui_trace_grid(a->tr, st->model);
    if (!g || !g->n_rows) { fprintf(out, "no taps recorded for model %s\n", st->model); return; }
    fprintf(out, "grid (rows: layers; ! non-finite, ~ absmax > %gx the tensor's median, . clean, blank: not tapped)\n     ",
            TUI_HOT_FACTOR);
    for (int c = 0; c < g->n_cols; c++) { char ab[8]; tui_op_abbrev(g->ops[c], ab, 4); fprintf(out, " %-4s", ab); }
    fputc('\n', out);
    for (int r = 0; r < g->n_rows; r++) {
        fprintf(out, "%-4s ", g->row_label[r]);
        for (int c = 0; c < g->n_cols; c++) {
            int idx = g->cell[r * g->n_cols + c];
            char m = idx >= 0 && idx < st->n_taps ? tui_health_marker(st->taps[idx].health) : ' ';
            fprintf(out, " %c   ", m);
        }
        fputc('\n', out);
    }
}

static void dump_tap(const tui_tap *t, FILE *out)
{
    char counts[96], b[6][32];
    tui_fmt_bad_counts(counts, sizeof counts, t->nan, t->pinf, t->ninf);
    fprintf(out, "%c %-20s layer %-3s op %-12s %s of %lld", tui_health_marker(t->health), t->name,
            t->layer >= 0 ? (snprintf(b[5], 32, "%d", t->layer), b[5]) : "-", t->op, counts, (long long)t->n);
    if (t->first_bad_index >= 0) fprintf(out, " (index %d, pos %d)", t->first_bad_index, t->first_bad_pos);
    fprintf(out, "\n    min %s max %s absmax %s mean %s rms %s median-absmax %s\n", num(b[0], 32, t->min), num(b[1], 32, t->max),
            num(b[2], 32, t->absmax), num(b[3], 32, t->mean), num(b[4], 32, t->rms), num(b[5], 32, t->median));
}

static void piece_str(tui_app *a, int id, int64_t near, char *buf, size_t cap)
{
    int len = 0;
    const char *p = id >= 0 ? tui_trace_piece(a->tr, id, near, &len) : NULL;
    if (!p || cap < 4) { snprintf(buf, cap, "?"); return; }
    buf[0] = '\'';
    tui_sanitize(p, len, buf + 1, cap - 2, 30, a->san | TUI_SAN_SHOWSPACE);
    strcat(buf, "'");
}

int tui_dump_step(tui_app *a, FILE *out, int step)
{
    int rc, lo;
    tui_trace_bounds(a->tr, &lo, NULL, NULL, NULL);
    if (step < 0) step = lo < 0 ? 0 : lo;
    if ((rc = tui_step_load(a->tr, step, &a->st))) return rc;
    a->st_valid = true;
    const tui_step *st = &a->st;
    const tui_logits *lg = &st->lg;
    char b[4][64], counts[96];
    if (!st->present) return bt_error(BT_ENOTFOUND, "%s: no step %d in this trace", tui_trace_path(a->tr), step);
    fprintf(out, "step %d  %s  model %s  pos %d..%d  %s ms\n", st->step, st->kind, st->model, st->pos0, st->pos0 + st->n_pos - 1,
            num(b[0], 64, st->ms));
    if (lg->present) {
        tui_fmt_bad_counts(counts, sizeof counts, lg->nan, lg->pinf, lg->ninf);
        fprintf(out, "logits pos %d: %s of %d; max %s; entropy %s nats\n", lg->pos, counts, lg->n_vocab, num(b[0], 64, lg->max),
                num(b[1], 64, lg->entropy));
        static const char *const rules[3] = { "first", "torch", "triton" };
        for (int k = 0; k < 3; k++) {
            piece_str(a, lg->argmax[k], st->seq, b[0], sizeof b[0]);
            fprintf(out, "  argmax %-6s %d %s\n", rules[k], lg->argmax[k], b[0]);
        }
        piece_str(a, lg->chosen, st->seq, b[0], sizeof b[0]);
        fprintf(out, "  rule %s chose %d %s\n", lg->rule[0] ? lg->rule : "?", lg->chosen, b[0]);
        if (lg->k) fprintf(out, "  top-%d (p %s):\n", lg->k, lg->probs_exact ? "exact, from the chosen token's logprob" : "renormalized over the top-k");
        for (int i = 0; i < lg->k; i++) {
            piece_str(a, lg->ids[i], st->seq, b[0], sizeof b[0]);
            fprintf(out, "  %2d %8d %-16s %10s %s\n", i + 1, lg->ids[i], b[0], num(b[1], 64, lg->vals[i]), num(b[2], 64, lg->probs[i]));
        }
    } else {
        fprintf(out, "no logit snapshot\n");
    }
    fprintf(out, "taps: %d non-finite, %d far above median\n", st->n_bad, st->n_warn);
    dump_grid(a, st, out);
    for (int i = 0; i < st->n_taps; i++)
        if (st->taps[i].health == TUI_H_BAD || st->taps[i].health == TUI_H_WARN) dump_tap(&st->taps[i], out);
    return BT_OK;
}

int tui_dump_walk(tui_app *a, FILE *out, int step)
{
    int rc = tui_app_walk(a);
    if (rc) return rc;
    const tui_walk *w = &a->walk;
    if (!w->found) { fprintf(out, "trace is clean: no non-finite tap or logit was recorded\n"); return BT_OK; }
    fprintf(out, "first non-finite: %s\n", w->summary);
    const tui_link *o = &w->links[0];
    fprintf(out, "  tensor %s, pos %d (from %s)\n", o->tensor, o->first_bad_pos, w->source);
    if (w->extent[0]) fprintf(out, "  %s\n", w->extent);
    if (w->argmax_note[0]) {
        char tmp[300];
        tui_sanitize(w->argmax_note, strlen(w->argmax_note), tmp, sizeof tmp, 0, a->san);
        fprintf(out, "  %s\n", tmp);
    }
    fprintf(out, "propagation:\n");
    for (int i = 0; i < w->n; i++) {
        const tui_link *l = &w->links[i];
        char counts[96], where[112];
        tui_fmt_bad_counts(counts, sizeof counts, l->nan, l->pinf, l->ninf);
        if (l->layer >= 0) snprintf(where, sizeof where, "layer %d %s", l->layer, l->op);
        else snprintf(where, sizeof where, "%s", l->tensor);
        fprintf(out, "  step %-5d %-22s %-16s of %-7lld %s\n", l->step, where, counts, (long long)l->n, l->note);
    }
    return BT_OK;
}

int tui_dump_run(tui_app *a, FILE *out, int step)
{
    int rc = tui_app_run(a);
    if (rc) return rc;
    const tui_run *r = &a->run;
    char val[4096];
    for (int i = 0; i < r->n_meta; i++) {
        tui_sanitize(r->meta[i].value, strlen(r->meta[i].value), val, sizeof val, 0, a->san);
        fprintf(out, "%-16s %s\n", r->meta[i].key, val);
    }
    fprintf(out, "\nevents (%d%s):\n", r->n_events, r->events_truncated ? ", first ones only" : "");
    for (int i = 0; i < r->n_events; i++) {
        const tui_event *e = &r->events[i];
        tui_sanitize(e->detail, strlen(e->detail), val, sizeof val, 0, a->san);
        char where[112] = "";
        if (e->layer >= 0) snprintf(where, sizeof where, " layer %d %s", e->layer, e->op);
        fprintf(out, "  step %-5d %-18s%s  %s\n", e->step, e->kind, where, val);
    }
    if (!r->n_events) fprintf(out, "  none\n");
    return BT_OK;
}

int tui_dump_backtrace(tui_app *a, FILE *out, int step)
{
    int rc = tui_app_run(a);
    if (rc) return rc;
    const tui_run *r = &a->run;
    if (!r->n_bts) { fprintf(out, "no backtraces recorded\n"); return BT_OK; }
    for (int i = 0; i < r->n_bts; i++) {
        const tui_frames *f = &r->bts[i];
        fprintf(out, "%s at step %d (event %lld):\n", f->kind, f->step, (long long)f->event_id);
        const char *p = f->frames;
        while (*p) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            char line[1024];
            tui_sanitize(p, len, line, sizeof line, 0, a->san);
            fprintf(out, "  %s\n", line);
            p += len + (e ? 1 : 0);
        }
    }
    return BT_OK;
}
