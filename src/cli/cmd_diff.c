/* cmd_diff.c - `bangtrace diff A.db B.db`: where two traced runs part ways.
 *
 * Three comparisons, all read from the traces alone (no model is loaded):
 *
 * - tokens: the prompts, then the output sequences (roles gen and bonus in
 *   seq order). A speculative trace reaches the same text through different
 *   steps, so outputs are aligned by their index in the output, never by
 *   step number.
 * - taps: only between steps that computed the same thing. Two plain traces
 *   pair step s with step s when both have the same model, kind, pos0 and
 *   n_pos. When either trace is speculative the step numbers mean nothing
 *   across traces; a step stores one aggregate over its rows, so the only
 *   steps that can be compared are target steps covering exactly the same
 *   positions (pos0, n_pos) (draft steps too when both traces used the same
 *   drafter). Tensors are paired by name, so differing tap settings still
 *   compare what both recorded.
 * - meta: the settings that change numbers or tokens (model, argmax rule,
 *   sampling, injections, speculation, backend, tap settings).
 *
 * Everything is read before anything is printed, so an error halfway (a
 * damaged page) gives one line on stderr and no partial report. */
#include "cmd.h"
#include "run/run_meta.h"
#include "trace/analyze.h"
#include "trace/compare.h"
#include "trace/reader.h"
#include "base/text.h"
#include "base/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cmd_diff_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace diff A.db B.db [--tolerance X] [--json]\n\n"
        "Compare two traces (bangtrace run --trace), e.g. an injected run against a clean\n"
        "one, or speculation on against off.\n\n"
        "  prompt   the prompt tokens; the first differing position if they differ\n"
        "  tokens   the first diverging output token (output index, position, step, both\n"
        "           ids and pieces); the output is the gen and bonus tokens in order, so a\n"
        "           speculative trace compares with a plain one token for token\n"
        "  taps     the first diverging tap (step, layer, op, both statistics). Two plain\n"
        "           traces are compared step by step (same step, kind, pos0, n_pos). When\n"
        "           either is speculative, a trace stores only per-step aggregates over a\n"
        "           step's positions, so taps are compared only where both traces have a\n"
        "           target step covering identical positions (pos0, n_pos); the report\n"
        "           says how many steps could be compared\n"
        "  meta     differing settings: model sha256, argmax rule, sampling, injections,\n"
        "           speculation (spec_k, drafter, draft model), backend, tap settings\n\n"
        "A tap differs when its NaN/+Inf/-Inf counts differ or min, max, mean or rms differ\n"
        "by more than the relative tolerance: min and max relative to the tensor's absmax, rms\n"
        "to its rms, the mean to the larger of its own size and the rms (the rule bisect\n"
        "--reference uses; doc/trace-format.md).\n\n"
        "  --tolerance X    relative tolerance on min/max/mean/rms (default 0: the stored\n"
        "                   bf16 values must be equal)\n"
        "  --json           one JSON object: prompt_equal, first_prompt_diff, first_token_diff,\n"
        "                   first_tap_diff, compared_steps, meta_diff, ...\n\n"
        "Exit status: 0 no difference in prompt, tokens or taps (meta differences alone\n"
        "do not count), 1 a difference was found, 2 error (missing, corrupt or non-trace file).\n");
}

/* ---- one trace, loaded ---- */

typedef struct tok {
    int step, pos;
    int32_t id;
    char *piece;               /* malloc'd, NUL-terminated copy; NULL after redaction */
    size_t piece_len;
    char role[8];
} tok;

typedef struct side {
    const char *path;
    bt_trace_reader *r;
    tok *prompt, *out;
    int n_prompt, n_out, cap_prompt, cap_out;
    char finish[32];           /* finish_reason of the last output token */
    bt_trace_step_row *steps;
    int n_steps;
    bool spec;                 /* speculative: spec_k in meta or draft/verify steps */
    int n_target;              /* target steps */
    int n_gen;                 /* generated tokens (bt_analyze_generated) */
    bt_run_meta meta;          /* the trace's meta rows (run/run_meta.h) */
} side;

static int tok_cb(void *user, const bt_trace_token_row *t)
{
    side *s = user;
    bool prompt = !strcmp(t->role, "prompt");
    if (!prompt && strcmp(t->role, "gen") && strcmp(t->role, "bonus")) return 0;   /* draft tokens are not output */
    tok **arr = prompt ? &s->prompt : &s->out;
    int *n = prompt ? &s->n_prompt : &s->n_out, *cap = prompt ? &s->cap_prompt : &s->cap_out;
    if (BT_VEC_RESERVE(*arr, *cap, *n + 1)) return 1;
    tok *o = &(*arr)[(*n)++];
    memset(o, 0, sizeof(*o));
    o->step = t->step;
    o->pos = t->pos;
    o->id = t->id;
    snprintf(o->role, sizeof(o->role), "%s", t->role);
    if (t->piece) {
        o->piece = malloc(t->piece_len + 1);
        if (!o->piece) { bt_error(BT_ENOMEM, "%s: out of memory", s->path); return 1; }
        memcpy(o->piece, t->piece, t->piece_len);
        o->piece[t->piece_len] = 0;
        o->piece_len = t->piece_len;
    }
    if (!prompt && t->finish_reason) snprintf(s->finish, sizeof(s->finish), "%s", t->finish_reason);
    return 0;
}

static void side_free(side *s)
{
    for (int i = 0; i < s->n_prompt; i++) free(s->prompt[i].piece);
    for (int i = 0; i < s->n_out; i++) free(s->out[i].piece);
    free(s->prompt);
    free(s->out);
    free(s->steps);
    bt_trace_reader_close(s->r);
}

static int side_load(side *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    s->path = path;
    int rc = bt_trace_open(path, &s->r);
    if (rc) return rc;
    if ((rc = bt_analyze_verify(path))) return rc;
    rc = bt_trace_tokens_each(s->r, 0, 0, tok_cb, s);
    if (rc < 0) return rc;
    if (rc > 0) return BT_ENOMEM;   /* tok_cb set the message */
    if ((rc = bt_analyze_generated(s->r, &s->n_gen))) return rc;
    size_t cap = 0;
    for (;;) {
        if ((rc = BT_VEC_RESERVE(s->steps, cap, (size_t)s->n_steps + 1024))) return rc;
        int from = s->n_steps ? s->steps[s->n_steps - 1].step + 1 : 0, n = 0;
        if ((rc = bt_trace_steps(s->r, from, 1024, s->steps + s->n_steps, &n))) return rc;
        s->n_steps += n;
        if (n < 1024) break;
    }
    bt_run_meta_read(s->r, &s->meta);
    s->spec = s->meta.n_spec_k > 0;
    for (int i = 0; i < s->n_steps; i++) {
        const bt_trace_step_row *st = &s->steps[i];
        if (!strcmp(st->kind, "verify") || !strcmp(st->kind, "draft") || strcmp(st->model, "target")) s->spec = true;
        if (!strcmp(st->model, "target")) s->n_target++;
    }
    return BT_OK;
}

/* ---- pieces ---- */

/* Printable form of a piece (text.h's escaper, quotes escaped): the line
 * stays one line of valid text whatever the trace holds. */
static void piece_str(const tok *t, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!t || !t->piece) return;
    bt_text_escape(t->piece, t->piece_len, buf, cap, 0, BT_TEXT_UTF8 | BT_TEXT_SQUOTE | BT_TEXT_ELLIPSIS);
}

/* ---- tokens ---- */

typedef struct tokdiff {
    bool found;
    int index;                 /* index in the prompt / in the output */
    int pos;
    const tok *a, *b;          /* NULL: that trace has no token there */
} tokdiff;

static void diff_tokens(const tok *a, int na, const tok *b, int nb, tokdiff *d)
{
    memset(d, 0, sizeof(*d));
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        const tok *x = i < na ? &a[i] : NULL, *y = i < nb ? &b[i] : NULL;
        if (x && y && x->id == y->id) continue;
        d->found = true;
        d->index = i;
        d->a = x;
        d->b = y;
        d->pos = x ? x->pos : y->pos;
        return;
    }
}

/* ---- taps ---- */

typedef struct tapdiff {
    bool found;
    int step_a, step_b;
    bt_trace_step_row sa, sb;
    char name[64], op[32], field[16];
    int layer;
    bt_trace_tap_row ta, tb;   /* name/op point into the readers: copied above */
    bool inputs_diverged;      /* the step reaches the first differing token's position */
} tapdiff;

typedef struct tapcmp {
    int compared_steps;        /* step pairs that compute the same positions */
    int compared_draft;        /* of which draft steps */
    int64_t compared_taps;     /* tensor pairs actually compared (until the first difference) */
    const char *mode;          /* "step" | "position" */
    bool drafts;               /* draft steps were paired too */
    tapdiff d;
} tapcmp;

/* Compare the taps of step a of A with step b of B; fills c->d on the first
 * difference. Tensors pair by name within the step's model. */
static int compare_step(side *A, side *B, const bt_trace_step_row *sa, const bt_trace_step_row *sb,
                        double tol, tapcmp *c)
{
    bt_trace_tap_row *ta = NULL, *tb = NULL;
    int na = 0, nb = 0;
    int rc = bt_trace_step_taps(A->r, sa->step, &ta, &na);
    if (!rc) rc = bt_trace_step_taps(B->r, sb->step, &tb, &nb);
    if (rc) goto out;
    for (int i = 0; i < na && !c->d.found; i++) {
        if (!ta[i].recorded) continue;
        const bt_trace_tap_row *y = NULL;
        /* same slot first (the usual case), else look the name up */
        if (i < nb && !strcmp(tb[i].name, ta[i].name)) y = &tb[i];
        else {
            int slot = bt_trace_tensor_find(B->r, sb->model, ta[i].name);
            for (int j = 0; slot >= 0 && j < nb; j++)
                if (tb[j].idx == slot) { y = &tb[j]; break; }
        }
        if (!y || !y->recorded) continue;
        c->compared_taps++;
        bt_tap_diff td;
        if (!bt_tap_compare(&ta[i], y, tol, &td)) continue;
        const char *f = td.field;
        tapdiff *d = &c->d;
        d->found = true;
        d->step_a = sa->step;
        d->step_b = sb->step;
        d->sa = *sa;
        d->sb = *sb;
        snprintf(d->name, sizeof(d->name), "%s", ta[i].name);
        snprintf(d->op, sizeof(d->op), "%s", ta[i].op);
        snprintf(d->field, sizeof(d->field), "%s", f);
        d->layer = ta[i].layer;
        d->ta = ta[i];
        d->tb = *y;
        d->ta.name = d->tb.name = d->name;
        d->ta.op = d->tb.op = d->op;
    }
out:
    free(ta);
    free(tb);
    return rc;
}

typedef struct stepkey {
    int draft, pos0, n_pos, occ;   /* occ: how many earlier steps had the same key */
    int i;                         /* index into the side's steps */
} stepkey;

static int key_cmp(const void *x, const void *y)
{
    const stepkey *a = x, *b = y;
    if (a->draft != b->draft) return a->draft < b->draft ? -1 : 1;
    if (a->pos0 != b->pos0) return a->pos0 < b->pos0 ? -1 : 1;
    if (a->n_pos != b->n_pos) return a->n_pos < b->n_pos ? -1 : 1;
    if (a->occ != b->occ) return a->occ < b->occ ? -1 : 1;
    return 0;
}

/* Keys of a side's steps (target, and draft when drafts), sorted, with
 * occurrence numbers so a repeated (pos0, n_pos) pairs in order. */
static int build_keys(const side *s, bool drafts, stepkey **out, int *n)
{
    stepkey *k = calloc(s->n_steps ? (size_t)s->n_steps : 1, sizeof(*k));
    if (!k) return bt_error(BT_ENOMEM, "%s: out of memory", s->path);
    int m = 0;
    for (int i = 0; i < s->n_steps; i++) {
        const bt_trace_step_row *st = &s->steps[i];
        bool draft = !strcmp(st->model, "draft");
        if (draft ? !drafts : strcmp(st->model, "target")) continue;
        k[m] = (stepkey){ .draft = draft, .pos0 = st->pos0, .n_pos = st->n_pos, .occ = 0, .i = i };
        m++;
    }
    /* occurrence numbers in step order: a stable sort by key without occ,
     * then count runs (qsort is not stable, so sort by (key, i) first) */
    for (int i = 0; i < m; i++) k[i].occ = k[i].i;
    qsort(k, (size_t)m, sizeof(*k), key_cmp);
    for (int i = 0; i < m; i++) {
        bool same = i > 0 && k[i].draft == k[i - 1].draft && k[i].pos0 == k[i - 1].pos0 && k[i].n_pos == k[i - 1].n_pos;
        k[i].occ = same ? k[i - 1].occ + 1 : 0;
    }
    *out = k;
    *n = m;
    return BT_OK;
}

static int diff_taps(side *A, side *B, double tol, tapcmp *c)
{
    memset(c, 0, sizeof(*c));
    int rc = BT_OK;
    if (!A->spec && !B->spec) {
        c->mode = "step";
        int j = 0;
        for (int i = 0; i < A->n_steps; i++) {
            const bt_trace_step_row *sa = &A->steps[i];
            while (j < B->n_steps && B->steps[j].step < sa->step) j++;
            if (j >= B->n_steps) break;
            const bt_trace_step_row *sb = &B->steps[j];
            if (sb->step != sa->step || strcmp(sa->model, sb->model) || strcmp(sa->kind, sb->kind) ||
                sa->pos0 != sb->pos0 || sa->n_pos != sb->n_pos) continue;
            c->compared_steps++;
            if (!c->d.found && (rc = compare_step(A, B, sa, sb, tol, c))) return rc;
        }
        return BT_OK;
    }
    c->mode = "position";
    const char *da = A->meta.drafter, *db = B->meta.drafter;
    c->drafts = A->spec && B->spec && da && db && !strcmp(da, db);
    stepkey *ka = NULL, *kb = NULL;
    int na = 0, nb = 0;
    if ((rc = build_keys(A, c->drafts, &ka, &na)) || (rc = build_keys(B, c->drafts, &kb, &nb))) goto out;
    /* walk A's steps in step order so "first" means first in A's run */
    int *pair = malloc((size_t)(A->n_steps ? A->n_steps : 1) * sizeof(int));
    if (!pair) { rc = bt_error(BT_ENOMEM, "%s: out of memory", A->path); goto out; }
    for (int i = 0; i < A->n_steps; i++) pair[i] = -1;
    for (int i = 0; i < na; i++) {
        const stepkey *hit = bsearch(&ka[i], kb, (size_t)nb, sizeof(*kb), key_cmp);
        if (hit) pair[ka[i].i] = hit->i;
    }
    for (int i = 0; i < A->n_steps; i++) {
        if (pair[i] < 0) continue;
        c->compared_steps++;
        if (!strcmp(A->steps[i].model, "draft")) c->compared_draft++;
        if (!c->d.found && (rc = compare_step(A, B, &A->steps[i], &B->steps[pair[i]], tol, c))) break;
    }
    free(pair);
out:
    free(ka);
    free(kb);
    return rc;
}

/* ---- meta ---- */

static const char *const meta_keys[] = {
    "model_sha256", "argmax_rule", "sampling", "injections", "spec_k", "drafter", "draft_model_sha256",
    "backend", "taps", "tap_layers",
};

typedef struct metadiff { const char *key, *a, *b; } metadiff;

static int diff_meta(side *A, side *B, metadiff *out)
{
    int n = 0;
    for (size_t i = 0; i < BT_ARRAY_SIZE(meta_keys); i++) {
        const char *a = bt_run_meta_get(&A->meta, meta_keys[i]), *b = bt_run_meta_get(&B->meta, meta_keys[i]);
        if (!a && !b) continue;
        if (a && b && !strcmp(a, b)) continue;
        out[n++] = (metadiff){ meta_keys[i], a, b };
    }
    return n;
}

/* ---- output ---- */

typedef struct result {
    tokdiff prompt, out;
    tapcmp taps;
    metadiff meta[BT_ARRAY_SIZE(meta_keys)];
    int n_meta;
    double tol;
} result;

static bool result_differs(const result *x) { return x->prompt.found || x->out.found || x->taps.d.found; }

static void describe_side(const side *s, const char *label)
{
    bt_text_printf(stdout, "%s: %s (%d steps, %d prompt + %d output tokens, %d generated", label, s->path, s->n_steps,
                   s->n_prompt, s->n_out, s->n_gen);
    if (s->spec) {
        const char *k = s->meta.spec_k, *d = s->meta.drafter;
        bt_text_printf(stdout, ", speculative%s%s%s%s", k ? " k=" : "", k ? k : "", d ? " drafter " : "", d ? d : "");
    }
    bt_text_printf(stdout, ")\n");
}

static void tok_text(const tok *t, const char *finish, char *buf, size_t cap)
{
    char p[128];
    if (!t) { snprintf(buf, cap, "(none: output ended%s%s)", finish[0] ? ", " : "", finish); return; }
    if (!t->piece) { snprintf(buf, cap, "%d (piece redacted) (step %d)", t->id, t->step); return; }
    piece_str(t, p, sizeof(p));
    snprintf(buf, cap, "%d '%s' (step %d)", t->id, p, t->step);
}

static void print_stats(const char *label, const bt_trace_tap_row *t)
{
    bt_text_printf(stdout, "  %s: nan %lld, +inf %lld, -inf %lld, min %.9g, max %.9g, mean %.9g, rms %.9g\n", label,
           (long long)t->nan, (long long)t->pinf, (long long)t->ninf, t->min, t->max, t->mean, t->rms);
}

static void print_text(const side *A, const side *B, const result *x)
{
    char ta[192], tb[192];
    describe_side(A, "A");
    describe_side(B, "B");
    if (!x->n_meta) bt_text_printf(stdout, "meta: same model, argmax rule, sampling, injections and speculation settings\n");
    for (int i = 0; i < x->n_meta; i++)
        bt_text_printf(stdout, "meta: %s differs: A %s, B %s\n", x->meta[i].key, x->meta[i].a ? x->meta[i].a : "(unset)",
               x->meta[i].b ? x->meta[i].b : "(unset)");
    if (!x->prompt.found) bt_text_printf(stdout, "prompt: equal (%d tokens)\n", A->n_prompt);
    else {
        tok_text(x->prompt.a, "", ta, sizeof(ta));
        tok_text(x->prompt.b, "", tb, sizeof(tb));
        bt_text_printf(stdout, "prompt: differs at position %d (A %d tokens, B %d): A %s, B %s\n", x->prompt.pos,
               A->n_prompt, B->n_prompt, ta, tb);
    }
    if (!x->out.found) bt_text_printf(stdout, "tokens: equal (%d output tokens)\n", A->n_out);
    else {
        tok_text(x->out.a, A->finish, ta, sizeof(ta));
        tok_text(x->out.b, B->finish, tb, sizeof(tb));
        const tok *t = x->out.a ? x->out.a : x->out.b;
        bt_text_printf(stdout, "first diverging token: output #%d, position %d, step %d: A %s, B %s\n", x->out.index, x->out.pos,
               t->step, ta, tb);
    }
    const tapcmp *c = &x->taps;
    if (!strcmp(c->mode, "step"))
        bt_text_printf(stdout, "taps: compared step by step: %d of %d (A) / %d (B) steps had the same kind and positions\n",
               c->compared_steps, A->n_steps, B->n_steps);
    else {
        bt_text_printf(stdout, "taps: %s speculative; a trace stores only per-step aggregates, so taps are compared only where "
               "both have a target step with identical (pos0, n_pos)%s: %d step pairs (%d target steps of A's %d and B's %d",
               A->spec && B->spec ? "both traces are" : A->spec ? "A is" : "B is",
               c->drafts ? " (and draft steps, same drafter)" : "", c->compared_steps,
               c->compared_steps - c->compared_draft, A->n_target, B->n_target);
        if (c->drafts) bt_text_printf(stdout, ", %d draft steps", c->compared_draft);
        bt_text_printf(stdout, ")\n");
    }
    if (!c->d.found) {
        if (c->compared_steps && !c->compared_taps) bt_text_printf(stdout, "taps: no tapped tensor recorded in both traces\n");
        else bt_text_printf(stdout, "taps: equal%s (%lld tensor statistics compared)\n", x->tol > 0 ? " within the tolerance" : "",
                    (long long)c->compared_taps);
    } else {
        const tapdiff *d = &c->d;
        char l[16], pos[48];
        bt_layer_label(d->layer, l, sizeof(l));
        if (d->sa.n_pos == 1) snprintf(pos, sizeof(pos), "position %d", d->sa.pos0);
        else snprintf(pos, sizeof(pos), "positions %d-%d", d->sa.pos0, d->sa.pos0 + d->sa.n_pos - 1);
        bt_text_printf(stdout, "first diverging tap: step %d", d->step_a);
        if (d->step_b != d->step_a) bt_text_printf(stdout, " (B step %d)", d->step_b);
        bt_text_printf(stdout, " (%s%s%s, %s), layer %s, op %s (%s): %s differs%s\n", d->sa.model, strcmp(d->sa.model, d->sa.kind) ? " " : "",
               strcmp(d->sa.model, d->sa.kind) ? d->sa.kind : "", pos, l, d->op, d->name,
               d->field, d->inputs_diverged ? "; the step's inputs include the diverged tokens" : "");
        print_stats("A", &d->ta);
        print_stats("B", &d->tb);
    }
    bt_text_printf(stdout, "%s\n", result_differs(x) ? "differ: yes" : "differ: no (tokens and taps equal)");
}

static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *tok_json(const tok *t)
{
    if (!t) return json_null();
    json_t *j = json_object();
    json_object_set_new(j, "step", json_integer(t->step));
    json_object_set_new(j, "pos", json_integer(t->pos));
    json_object_set_new(j, "id", json_integer(t->id));
    json_t *p = NULL;
    if (t->piece) {
        p = json_stringn(t->piece, t->piece_len);   /* NULL when not valid UTF-8 */
        if (!p) {
            char buf[128];
            piece_str(t, buf, sizeof(buf));
            p = json_string(buf);
        }
    }
    json_object_set_new(j, "piece", p ? p : json_null());
    json_object_set_new(j, "role", json_string(t->role));
    return j;
}

static json_t *tokdiff_json(const tokdiff *d)
{
    if (!d->found) return json_null();
    json_t *j = json_object();
    json_object_set_new(j, "index", json_integer(d->index));
    json_object_set_new(j, "pos", json_integer(d->pos));
    json_object_set_new(j, "step", json_integer((d->a ? d->a : d->b)->step));
    json_object_set_new(j, "a", tok_json(d->a));
    json_object_set_new(j, "b", tok_json(d->b));
    return j;
}

static json_t *stats_json(const bt_trace_tap_row *t)
{
    json_t *j = json_object();
    json_object_set_new(j, "nan", json_integer(t->nan));
    json_object_set_new(j, "pinf", json_integer(t->pinf));
    json_object_set_new(j, "ninf", json_integer(t->ninf));
    json_object_set_new(j, "min", jreal(t->min));
    json_object_set_new(j, "max", jreal(t->max));
    json_object_set_new(j, "mean", jreal(t->mean));
    json_object_set_new(j, "rms", jreal(t->rms));
    json_object_set_new(j, "n", json_integer(t->n));
    return j;
}

static json_t *result_json(const side *A, const side *B, const result *x)
{
    json_t *j = json_object();
    json_object_set_new(j, "a", json_string(A->path));
    json_object_set_new(j, "b", json_string(B->path));
    json_object_set_new(j, "differ", json_boolean(result_differs(x)));
    json_object_set_new(j, "prompt_equal", json_boolean(!x->prompt.found));
    json_object_set_new(j, "first_prompt_diff", tokdiff_json(&x->prompt));
    json_object_set_new(j, "first_token_diff", tokdiff_json(&x->out));
    json_object_set_new(j, "output_tokens", json_pack("{s:i,s:i}", "a", A->n_out, "b", B->n_out));
    json_object_set_new(j, "generated", json_pack("{s:i,s:i}", "a", A->n_gen, "b", B->n_gen));
    const tapcmp *c = &x->taps;
    json_t *tap = json_null();
    if (c->d.found) {
        const tapdiff *d = &c->d;
        tap = json_object();
        json_object_set_new(tap, "step", json_integer(d->step_a));
        json_object_set_new(tap, "step_b", json_integer(d->step_b));
        json_object_set_new(tap, "model", json_string(d->sa.model));
        json_object_set_new(tap, "kind", json_string(d->sa.kind));
        json_object_set_new(tap, "pos0", json_integer(d->sa.pos0));
        json_object_set_new(tap, "n_pos", json_integer(d->sa.n_pos));
        json_object_set_new(tap, "layer", d->layer < 0 ? json_null() : json_integer(d->layer));
        json_object_set_new(tap, "op", json_string(d->op));
        json_object_set_new(tap, "tensor", json_string(d->name));
        json_object_set_new(tap, "field", json_string(d->field));
        json_object_set_new(tap, "inputs_diverged", json_boolean(d->inputs_diverged));
        json_object_set_new(tap, "a", stats_json(&d->ta));
        json_object_set_new(tap, "b", stats_json(&d->tb));
    }
    json_object_set_new(j, "first_tap_diff", tap);
    json_object_set_new(j, "compared_steps", json_integer(c->compared_steps));
    json_object_set_new(j, "compared_draft_steps", json_integer(c->compared_draft));
    json_object_set_new(j, "compared_taps", json_integer(c->compared_taps));
    json_object_set_new(j, "tap_pairing", json_string(c->mode));
    json_object_set_new(j, "speculative", json_pack("{s:b,s:b}", "a", A->spec, "b", B->spec));
    json_object_set_new(j, "steps", json_pack("{s:i,s:i}", "a", A->n_steps, "b", B->n_steps));
    json_object_set_new(j, "tolerance", json_real(x->tol));
    json_t *m = json_array();
    for (int i = 0; i < x->n_meta; i++)
        json_array_append_new(m, json_pack("{s:s,s:s?,s:s?}", "key", x->meta[i].key, "a", x->meta[i].a, "b", x->meta[i].b));
    json_object_set_new(j, "meta_diff", m);
    return j;
}

/* ---- command ---- */

typedef struct diff_opts {
    const char *a, *b;
    bool json;
    double tol;
} diff_opts;

static int parse_args(int argc, char **argv, diff_opts *o)
{
    memset(o, 0, sizeof(*o));
    bool flags = true;   /* until "--": a trace named "-x.db" can still be given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flags && !strcmp(a, "--")) { flags = false; continue; }
        if (flags && !strcmp(a, "--json")) o->json = true;
        else if (flags && !strcmp(a, "--tolerance")) {
            if (i + 1 >= argc) return bt_error(BT_EINVAL, "--tolerance needs a value");
            if (bt_parse_float(a, argv[++i], 0, 1e6, &o->tol)) return BT_EINVAL;
        } else if (flags && a[0] == '-' && a[1]) return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help diff)", a);
        else if (!o->a) o->a = a;
        else if (!o->b) o->b = a;
        else return bt_error(BT_EINVAL, "unexpected argument '%s' (diff compares two traces)", a);
    }
    if (!o->b) return bt_error(BT_EINVAL, "give two trace files: bangtrace diff A.db B.db");
    return BT_OK;
}

int cmd_diff(int argc, char **argv)
{
    diff_opts o;
    side A, B;
    memset(&A, 0, sizeof(A));
    memset(&B, 0, sizeof(B));
    result x;
    memset(&x, 0, sizeof(x));
    int status = 2;
    if (parse_args(argc, argv, &o)) return bt_cmd_fail("diff");
    x.tol = o.tol;
    if (side_load(&A, o.a) || side_load(&B, o.b)) goto fail;
    diff_tokens(A.prompt, A.n_prompt, B.prompt, B.n_prompt, &x.prompt);
    diff_tokens(A.out, A.n_out, B.out, B.n_out, &x.out);
    if (diff_taps(&A, &B, o.tol, &x.taps)) goto fail;
    if (x.taps.d.found) {
        /* Different inputs explain a different tap: say whether the step
         * already consumed a diverged token. A prompt token is an input of
         * every step covering its position; an output token at position P
         * is first fed by the step starting at P (a verify step's later
         * positions hold drafts, not output tokens). Paired steps share
         * pos0 and n_pos, so A's step stands for both. */
        const tapdiff *d = &x.taps.d;
        int last = d->sa.pos0 + d->sa.n_pos - 1;
        x.taps.d.inputs_diverged = (x.prompt.found && last >= x.prompt.pos) || (x.out.found && d->sa.pos0 >= x.out.pos);
    }
    x.n_meta = diff_meta(&A, &B, x.meta);
    if (o.json) {
        json_t *j = result_json(&A, &B, &x);
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII);
        json_decref(j);
        if (!s) { bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        puts(s);
        free(s);
    } else print_text(&A, &B, &x);
    status = result_differs(&x) ? 1 : 0;
    goto out;
fail:
    status = bt_cmd_fail("diff");
out:
    side_free(&A);
    side_free(&B);
    return status;
}
