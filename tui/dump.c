/* dump.c - `browse --dump VIEW`: each view as plain text for scripts, tests
 * and issue comments. Same model structs as the screen, no curses, no escape
 * sequences (token text is sanitized exactly as on screen; health is a
 * marker: '!' non-finite, '~' degenerate / far above median, '.' clean). */
#include "tui.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
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

/* A mixture-of-experts step: each position's experts per layer, best
 * first, with their weights ("pos 9  L1: expert[4] 0.731 expert[0] 0.269"). */
static int dump_routes(tui_app *a, FILE *out, int step)
{
    tui_route *r = NULL;
    int n = 0, rc = tui_step_routes(a->tr, step, &r, &n);
    if (rc || !n) { free(r); return rc; }
    fprintf(out, "expert routes (expert[E] weight, best first):\n");
    for (int i = 0; i < n; i++) {
        bool new_pos = i == 0 || r[i].pos != r[i - 1].pos || r[i].draft != r[i - 1].draft;
        bool new_layer = new_pos || r[i].layer != r[i - 1].layer;
        if (new_pos) fprintf(out, "%s  %spos %d:", i ? "\n" : "", r[i].draft ? "draft " : "", r[i].pos);
        if (new_layer) fprintf(out, "  L%d", r[i].layer);
        fprintf(out, " expert[%d] %.3f", r[i].expert, r[i].weight);
    }
    fputc('\n', out);
    free(r);
    return BT_OK;
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
    return dump_routes(a, out, st->step);
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

int tui_dump_bt(tui_app *a, FILE *out, int step)
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

/* ---- speculation ---- */

static void spec_piece(tui_app *a, int id, int64_t near, char *buf, size_t cap)
{
    int len = 0;
    const char *p = id >= 0 ? tui_trace_piece(a->tr, id, near, &len) : NULL;
    if (id < 0) { snprintf(buf, cap, "-"); return; }
    if (!p || cap < 4) { snprintf(buf, cap, "#%d", id); return; }
    buf[0] = '\'';
    tui_sanitize(p, len, buf + 1, cap - 2, 24, a->san | TUI_SAN_SHOWSPACE);
    strcat(buf, "'");
}

/* Pad a sanitized string with spaces to cols display columns (printf's
 * widths count bytes, and a shown space is two). */
static const char *pad(char *buf, size_t cap, int cols)
{
    size_t len = strlen(buf);
    for (int w = tui_text_width(buf); w < cols && len + 1 < cap; w++) buf[len++] = ' ';
    buf[len] = 0;
    return buf;
}

/* "+' a' x' big'>' little' -' dog' | correction ' little'" */
static void dump_spec_line(tui_app *a, const tui_spec_row *r, FILE *out)
{
    int64_t near = tui_trace_step_seq(a->tr, r->step);
    fprintf(out, "%7d %3d/%-3d ", r->step, r->accepted, r->k);
    for (int i = 0; i < r->n; i++) {
        const tui_spec_draft *d = &r->d[i];
        char p[112], t[112];
        spec_piece(a, d->draft_token, near, p, sizeof p);
        fprintf(out, "%s%c%s", d->draft_finite ? "" : "!", tui_spec_mark_char(d->mark), p);
        if (d->mark == TUI_SM_REJECT) { spec_piece(a, d->target_token, near, t, sizeof t); fprintf(out, ">%s", t); }
        fputc(' ', out);
    }
    if (r->bonus_token >= 0) {
        char b[112];
        spec_piece(a, r->bonus_token, near, b, sizeof b);
        fprintf(out, "| %s %s\n", r->bonus_kind[0] ? r->bonus_kind : "bonus", b);
    } else {
        fprintf(out, "| stop\n");
    }
}

static void dump_spec_detail(tui_app *a, const tui_spec_row *r, FILE *out)
{
    int64_t near = tui_trace_step_seq(a->tr, r->step);
    char b[4][112];
    if (r->bonus_token >= 0) spec_piece(a, r->bonus_token, near, b[0], sizeof b[0]);
    fprintf(out, "verify step %d: drafter %s, k %d, accepted %d of %d; %s %s", r->step, r->drafter, r->k, r->accepted, r->k,
            r->bonus_token >= 0 ? (r->bonus_kind[0] ? r->bonus_kind : "bonus") : "no bonus:",
            r->bonus_token >= 0 ? b[0] : "generation stopped");
    if (r->bonus_token >= 0) fprintf(out, " (id %d)", r->bonus_token);
    fputc('\n', out);
    fprintf(out, "  m  #   pos  draft-step  draft                    id      q       finite  target                   id      p(draft)  reason\n");
    for (int i = 0; i < r->n; i++) {
        const tui_spec_draft *d = &r->d[i];
        char ds[16];
        spec_piece(a, d->draft_token, near, b[0], sizeof b[0]);
        spec_piece(a, d->target_token, near, b[1], sizeof b[1]);
        if (d->draft_step >= 0) snprintf(ds, sizeof ds, "%d", d->draft_step);
        else snprintf(ds, sizeof ds, "-");
        const char *mk = tui_spec_mark_name(d->mark);
        bool same = !strcmp(d->reason, mk);
        fprintf(out, "  %c  %-3d %-4d %-11s %s %-7d %-7s %-7s %s %-7d %-9s %s%s%s%s\n", tui_spec_mark_char(d->mark), d->idx,
                d->pos, ds, pad(b[0], sizeof b[0], 24), d->draft_token, num(b[2], 64, d->draft_prob), d->draft_finite ? "yes" : "NO",
                pad(b[1], sizeof b[1], 24), d->target_token, num(b[3], 64, d->target_prob), d->reason[0] ? d->reason : "-",
                same ? "" : " (", same ? "" : mk, same ? "" : ")");
    }
    if (r->n < r->k) fprintf(out, "  (%d more drafts not shown)\n", r->k - r->n);
}

static int dump_spec_info(tui_app *a, const tui_spec_info *si, FILE *out, int step);

int tui_dump_spec(tui_app *a, FILE *out, int step)
{
    tui_spec_info *si = malloc(sizeof *si);
    if (!si) return bt_error(BT_ENOMEM, "out of memory");
    int rc = tui_spec_info_load(a->tr, si);
    if (!rc) rc = dump_spec_info(a, si, out, step);
    free(si);
    return rc;
}

static int dump_spec_info(tui_app *a, const tui_spec_info *si, FILE *out, int step)
{
    int rc;
    if (!si->present) { fprintf(out, "not a speculative trace: no verify steps were recorded\n"); return BT_OK; }
    double rate = si->tot_drafted ? (double)si->tot_acc / (double)si->tot_drafted : NAN;
    char b[64];
    fprintf(out, "speculation: drafter %s, k %d; verify steps %d..%d\n", si->drafter[0] ? si->drafter : "?", si->spec_k, si->min_step,
            si->max_step);
    if (isnan(rate)) snprintf(b, sizeof b, "-");
    else snprintf(b, sizeof b, "%.1f%%", 100 * rate);
    fprintf(out, "acceptance rate %s (%lld of %lld drafted tokens accepted over %lld verify steps%s)\n", b, (long long)si->tot_acc,
            (long long)si->tot_drafted, (long long)si->tot_rows, si->exact ? "" : "; sampled windows");
    int cols = a->dump_width - 2 < si->n_win ? a->dump_width - 2 : si->n_win;
    if (cols < 8) cols = si->n_win < 8 ? si->n_win : 8;
    double r[TUI_SPARK_BUCKETS];
    char spark[TUI_SPARK_BUCKETS * 3 + 1];
    tui_spark_rebin(si->win_acc, si->win_drafted, si->n_win, cols, r);
    tui_spark_render(r, cols, false, spark, sizeof spark);
    fprintf(out, "acceptance over time (steps %d..%d; %s 0%% .. %s 100%%, blank: no verify step):\n  |%s|\n", si->min_step, si->max_step,
            tui_spark_glyph(0, false), tui_spark_glyph(7, false), spark);
    fprintf(out, "marks: %c accepted, %c rejected (draft>target), %c drafted after a rejection (not reached), %c drafted after the stop "
                 "token; ! the draft row was non-finite\n",
            tui_spec_mark_char(TUI_SM_ACCEPT), tui_spec_mark_char(TUI_SM_REJECT), tui_spec_mark_char(TUI_SM_AFTER_REJECT),
            tui_spec_mark_char(TUI_SM_AFTER_STOP));

    if (step >= 0) {
        tui_spec_row row;
        if (tui_spec_row_load(a->tr, step, &row) != BT_OK) {
            int next = tui_spec_neighbor(a->tr, step, +1, false);
            if (next < 0) return bt_error(BT_ENOTFOUND, "%s: no verify step at or after step %d", tui_trace_path(a->tr), step);
            fprintf(out, "# step %d is not a verify step; the next one is %d\n", step, next);
            if ((rc = tui_spec_row_load(a->tr, next, &row))) return rc;
        }
        fputc('\n', out);
        dump_spec_detail(a, &row, out);
        return BT_OK;
    }
    /* One page of verify steps (every one with --all), read a page at a time. */
    enum { PAGE = 256 };
    tui_spec_row *rows = malloc(sizeof(tui_spec_row) * PAGE);
    if (!rows) return bt_error(BT_ENOMEM, "out of memory");
    fprintf(out, "\n#  step acc/k  drafts | bonus\n");
    int from = si->min_step, n = 0;
    do {
        if ((rc = tui_spec_rows_load(a->tr, from, +1, rows, PAGE, &n))) break;
        for (int i = 0; i < n; i++) dump_spec_line(a, &rows[i], out);
        if (n) from = rows[n - 1].step + 1;
    } while (a->dump_all && n == PAGE);
    if (!rc && !a->dump_all && n == PAGE && from <= si->max_step)
        fprintf(out, "# first %d verify steps shown; --all for every one, --step S for one in detail\n", PAGE);
    free(rows);
    return rc;
}
