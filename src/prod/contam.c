/* contam.c - the contamination probe's plan, bodies and verdict (see
 * contam.h). The prompts are plain English paragraphs written for this
 * probe; a nonce is drawn so that no two requests of a plan share one and
 * no prompt text can contain one by accident (four consonants in capitals,
 * a dash, four digits). */
#define _GNU_SOURCE         /* memmem */
#include "prod/contam.h"
#include "prod/stats.h"
#include "base/text.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Each control's own prefix: distinct from the first word on, so two
 * controls share no prefix a cache could reuse. */
static const char *const control_prefix[BT_CONTAM_CONTROLS] = {
    "The lighthouse on the northern cape had been dark for eleven winters. Every evening the keeper climbed the "
    "spiral stairs anyway, counting the steps out loud, and every evening she wrote one line in the log book about "
    "the weather, the boats she had seen and the birds that rested on the rail.",
    "In the bakery at the end of Mill Street the ovens were lit before four in the morning. The baker's son weighed "
    "the flour, the baker shaped the loaves, and the cat slept on the warm sacks by the door until the first "
    "customers arrived with their baskets and their news.",
    "A river ran past the old mill, wide and slow in summer and loud in spring. Children built dams of stones at "
    "the shallow bend, fishermen argued about the best pools, and the miller listened every night for the sound of "
    "the wheel turning in the dark.",
    "Behind the school there was a garden that nobody had planted on purpose. Tomatoes came up between the bricks, "
    "a pear tree leaned over the wall, and each autumn the pupils gathered whatever had grown, carried it inside in "
    "boxes and tried to guess where the seeds had come from.",
};
/* Prefixes of the non-sharing nonce requests: no control starts like them. */
#define N_OTHER 3
static const char *const other_prefix[N_OTHER] = {
    "Here is one parcel code from the warehouse ledger, copied exactly as it was written.",
    "An exercise in careful copying: read the code below and write it down again without changing a single "
    "character.",
    "Over the radio the operator spelled the call sign twice, so that the station across the bay could not mistake it.",
};

/* Sentences a fresh prompt is drawn from (BT_CONTAM_FRESH_SENTENCES of
 * them, in a drawn order, after its own nonce): ~85 tokens that no other
 * request starts with, so its first answer is computed from nothing cached. */
#define N_SENTENCES 12
#define FRESH_SENTENCES 5
static const char *const sentence[N_SENTENCES] = {
    "The ferry left the harbour at seven with nine passengers and a crate of oranges.",
    "A storm had closed the mountain road for three days, so the post came by boat.",
    "The clockmaker kept every broken spring in a tin beside the window.",
    "On market days the square smelled of bread, fish and wet wool.",
    "Two brothers repaired the bridge with timber from the fallen oak.",
    "The teacher read the letters aloud, one for each child in the room.",
    "At night the radio picked up music from a city nobody in the village had seen.",
    "The well in the courtyard had been dry since the summer of the long drought.",
    "Every spring the swallows returned to the barn and rebuilt the same nests.",
    "The librarian stamped each book twice, once for the date and once for luck.",
    "Snow covered the fields until the end of March, and the sheep stayed inside.",
    "A painter rented the room above the shop and left it full of blue canvases.",
};

static unsigned long long splitmix(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static const char cons[] = "BCDFGHJKLMNPQRSTVWXZ";

/* A token as a number (1 .. 20^4 * 10^4), or 0 when t[0..9) is not one. */
static unsigned long long tok_key(const char *t)
{
    unsigned long long k = 0;
    for (int i = 0; i < 4; i++) {
        const char *c = t[i] ? strchr(cons, t[i]) : NULL;
        if (!c) return 0;
        k = k * 20 + (unsigned long long)(c - cons);
    }
    if (t[4] != '-') return 0;
    for (int i = 5; i < 9; i++) {
        if (t[i] < '0' || t[i] > '9') return 0;
        k = k * 10 + (unsigned long long)(t[i] - '0');
    }
    return k + 1;
}

static void draw_token(unsigned long long *s, char *out)
{
    unsigned long long r = splitmix(s);
    for (int i = 0; i < 4; i++) { out[i] = cons[r % 20]; r /= 20; }
    out[4] = '-';
    for (int i = 5; i < 9; i++) { out[i] = (char)('0' + r % 10); r /= 10; }
    out[9] = 0;
}

static const char *bt_contam_class_name(int cls)
{
    static const char *const n[BT_CONTAM_NCLASS] = { "nonce_leak", "order_dependence", "prefix_dependence",
                                                     "cache_dependence", "history_dependence", "concurrency_dependence",
                                                     "drift" };
    return cls >= 0 && cls < BT_CONTAM_NCLASS ? n[cls] : "?";
}

static const char *bt_contam_outcome_name(int outcome)
{
    return outcome == 0 ? "clean" : outcome == 1 ? "contaminated" : "inconclusive";
}

const char *bt_contam_arm_name(const bt_contam_plan *p, int arm, char *buf, size_t cap)
{
    if (arm == BT_CONTAM_ARM_WARMUP) return "warmup";
    if (arm == BT_CONTAM_ARM_REPEAT) return "repeat";
    if (arm == BT_CONTAM_ARM_AFTER_OTHER) return "after_other";
    if (arm == BT_CONTAM_ARM_AFTER_SHARED) return "after_shared";
    if (arm == BT_CONTAM_ARM_RESENT) return "resent";
    if (arm == BT_CONTAM_ARM_FRESH) return "fresh";
    if (arm >= BT_CONTAM_ARM_BESIDE && arm < p->n_arms) {
        snprintf(buf, cap, "beside_%d", p->levels[arm - BT_CONTAM_ARM_BESIDE]);
        return buf;
    }
    return "?";
}

void bt_contam_plan_clear(bt_contam_plan *p)
{
    for (long i = 0; p->reqs && i < p->n_reqs; i++) free(p->reqs[i].prompt);
    free(p->reqs);
    free(p->units);
    memset(p, 0, sizeof *p);
}

typedef struct builder {
    bt_contam_plan *p;
    size_t rcap, ucap;
    unsigned long long rng;
    unsigned long long *seen;       /* every token drawn so far: an open-addressing set of tok_key */
    size_t seen_mask;
    char marker[BT_CONTAM_CONTROLS][BT_CONTAM_TOKEN];
    int rc;
} builder;

static void fresh_token(builder *b, char *out)
{
    for (;;) {
        draw_token(&b->rng, out);
        unsigned long long k = tok_key(out);
        size_t h = (size_t)(k * 0x9E3779B97F4A7C15ULL >> 20) & b->seen_mask;
        while (b->seen[h] && b->seen[h] != k) h = (h + 1) & b->seen_mask;
        if (b->seen[h]) continue;   /* drawn before: draw again */
        b->seen[h] = k;
        return;
    }
}

static char *join3(const char *a, const char *b, const char *c, const char *d)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c), ld = strlen(d);
    char *s = malloc(la + lb + lc + ld + 1);
    if (!s) return NULL;
    memcpy(s, a, la); memcpy(s + la, b, lb); memcpy(s + la + lb, c, lc); memcpy(s + la + lb + lc, d, ld);
    s[la + lb + lc + ld] = 0;
    return s;
}

/* a fresh prompt: its nonce, then FRESH_SENTENCES distinct sentences in a
 * drawn order, then its nonce again (a leaked tail carries it) */
static char *fresh_prompt(builder *b, const char *tok)
{
    int pick[N_SENTENCES];
    for (int i = 0; i < N_SENTENCES; i++) pick[i] = i;
    size_t len = 2 * strlen(tok) + 64;
    for (int i = 0; i < FRESH_SENTENCES; i++) {
        int j = i + (int)(splitmix(&b->rng) % (unsigned)(N_SENTENCES - i)), t = pick[i];
        pick[i] = pick[j]; pick[j] = t;
        len += strlen(sentence[pick[i]]) + 1;
    }
    char *s = malloc(len);
    if (!s) return NULL;
    size_t n = (size_t)snprintf(s, len, "%s:", tok);
    for (int i = 0; i < FRESH_SENTENCES; i++) n += (size_t)snprintf(s + n, len - n, " %s", sentence[pick[i]]);
    snprintf(s + n, len - n, " The page signed %s said that", tok);
    return s;
}

static void add_req(builder *b, int role, int control, int arm, long unit, long block)
{
    if (b->rc) return;
    bt_contam_plan *p = b->p;
    bt_contam_req r = { .role = role, .control = control, .arm = arm, .unit = unit, .block = block };
    if (role == BT_CONTAM_FRESH && arm == BT_CONTAM_ARM_RESENT) {
        /* the same prompt as the fresh request just before it */
        const bt_contam_req *f = &p->reqs[p->n_reqs - 1];
        memcpy(r.token, f->token, BT_CONTAM_TOKEN);
        r.prompt = strdup(f->prompt);
    } else if (role == BT_CONTAM_FRESH) {
        fresh_token(b, r.token);
        r.prompt = fresh_prompt(b, r.token);
    } else if (role == BT_CONTAM_CONTROL) {
        memcpy(r.token, b->marker[control], BT_CONTAM_TOKEN);
        r.prompt = join3(control_prefix[control], " One page of the notes was marked ", r.token, ". It said that");
    } else {
        fresh_token(b, r.token);
        if (b->rc) return;
        if (role == BT_CONTAM_NONCE_SHARED)
            r.prompt = join3(control_prefix[control], " On a card someone had written the code ", r.token,
                             ". The code on the card was");
        else
            r.prompt = join3(other_prefix[splitmix(&b->rng) % N_OTHER], " The code is ", r.token,
                             ". Written again, the code is");
    }
    if (!r.prompt || BT_VEC_PUSH(p->reqs, p->n_reqs, b->rcap, r)) { free(r.prompt); b->rc = bt_error(BT_ENOMEM, "out of memory"); }
}

static void add_unit(builder *b, int arm, long block, int control)
{
    if (b->rc) return;
    bt_contam_plan *p = b->p;
    bt_contam_unit u = { .first = p->n_reqs, .arm = arm, .block = block };
    long id = p->n_units;
    switch (arm) {
    case BT_CONTAM_ARM_REPEAT:
        add_req(b, BT_CONTAM_CONTROL, control, BT_CONTAM_ARM_NONE, id, block);
        add_req(b, BT_CONTAM_CONTROL, control, arm, id, block);
        break;
    case BT_CONTAM_ARM_AFTER_OTHER:
        add_req(b, BT_CONTAM_NONCE_OTHER, -1, BT_CONTAM_ARM_NONE, id, block);
        add_req(b, BT_CONTAM_CONTROL, control, arm, id, block);
        break;
    case BT_CONTAM_ARM_AFTER_SHARED:
        add_req(b, BT_CONTAM_NONCE_SHARED, control, BT_CONTAM_ARM_NONE, id, block);
        add_req(b, BT_CONTAM_CONTROL, control, arm, id, block);
        break;
    case BT_CONTAM_ARM_RESENT:
        add_req(b, BT_CONTAM_FRESH, -1, BT_CONTAM_ARM_FRESH, id, block);
        add_req(b, BT_CONTAM_FRESH, -1, arm, id, block);
        break;
    default: {
        int level = p->levels[arm - BT_CONTAM_ARM_BESIDE];
        u.parallel = true;
        /* the control's place among its neighbours varies */
        int at = (int)(splitmix(&b->rng) % (unsigned)level);
        for (int i = 0; i < level; i++) {
            if (i == at) add_req(b, BT_CONTAM_CONTROL, control, arm, id, block);
            else add_req(b, BT_CONTAM_NONCE_OTHER, -1, BT_CONTAM_ARM_NONE, id, block);
        }
    }
    }
    if (b->rc) return;
    u.count = (int)(p->n_reqs - u.first);
    if (BT_VEC_PUSH(p->units, p->n_units, b->ucap, u)) b->rc = bt_error(BT_ENOMEM, "out of memory");
}

int bt_contam_plan_new(long n_blocks, int max_conc, unsigned long long seed, bt_contam_plan *out)
{
    memset(out, 0, sizeof *out);
    if (n_blocks < 1 || n_blocks > 1000000) return bt_error(BT_EINVAL, "contamination: %ld blocks (1 .. 1000000)", n_blocks);
    if (max_conc < 2 || max_conc > 256) return bt_error(BT_EINVAL, "contamination: concurrency %d (2 .. 256)", max_conc);
    for (int l = 2; l < max_conc && out->n_levels < BT_CONTAM_MAX_LEVELS - 1; l *= 2) out->levels[out->n_levels++] = l;
    out->levels[out->n_levels++] = max_conc;
    out->n_arms = BT_CONTAM_ARM_BESIDE + out->n_levels;
    out->n_blocks = n_blocks;
    out->seed = seed;
    builder b = { .p = out, .rng = seed };
    /* the set holds every token of the plan at most half full */
    size_t n_tok = BT_CONTAM_CONTROLS + (size_t)n_blocks * 3, cap = 64;
    for (int l = 0; l < out->n_levels; l++) n_tok += (size_t)n_blocks * (size_t)(out->levels[l] - 1);
    while (cap < 2 * n_tok) cap *= 2;
    if (!(b.seen = calloc(cap, sizeof *b.seen))) return bt_error(BT_ENOMEM, "out of memory");
    b.seen_mask = cap - 1;
    for (int k = 0; k < BT_CONTAM_CONTROLS; k++) fresh_token(&b, b.marker[k]);
    /* the warm-up: each control BT_CONTAM_WARMUP times in a row, one serial unit */
    for (int k = 0; k < BT_CONTAM_CONTROLS && !b.rc; k++) {
        bt_contam_unit u = { .first = out->n_reqs, .count = BT_CONTAM_WARMUP, .arm = BT_CONTAM_ARM_WARMUP, .block = -1 };
        for (int i = 0; i < BT_CONTAM_WARMUP; i++) add_req(&b, BT_CONTAM_CONTROL, k, BT_CONTAM_ARM_WARMUP, out->n_units, -1);
        if (!b.rc && BT_VEC_PUSH(out->units, out->n_units, b.ucap, u)) b.rc = bt_error(BT_ENOMEM, "out of memory");
    }
    int order[BT_CONTAM_MAX_ARMS];
    for (long blk = 0; blk < n_blocks && !b.rc; blk++) {
        for (int a = 0; a < out->n_arms; a++) order[a] = a;
        for (int a = out->n_arms - 1; a > 0; a--) {       /* Fisher-Yates */
            int j = (int)(splitmix(&b.rng) % (unsigned)(a + 1)), t = order[a];
            order[a] = order[j]; order[j] = t;
        }
        for (int i = 0; i < out->n_arms; i++)
            add_unit(&b, order[i], blk, (int)((order[i] + blk) % BT_CONTAM_CONTROLS));
    }
    free(b.seen);
    if (b.rc) {
        int rc = b.rc;
        if (rc == BT_ENOMEM) bt_error(BT_ENOMEM, "out of memory");
        bt_contam_plan_clear(out);
        return rc;
    }
    return BT_OK;
}

int bt_contam_body(const char *tmpl, size_t tmpl_len, const char *prompt, char **out, size_t *out_len)
{
    json_t *j;
    if (tmpl) {
        json_error_t je;
        j = json_loadb(tmpl, tmpl_len, 0, &je);
        if (!j) return bt_error(BT_EINVAL, "the request template is not JSON: line %d: %s", je.line, je.text);
        if (!json_is_object(j)) { json_decref(j); return bt_error(BT_EINVAL, "the request template is not a JSON object"); }
    } else if (!(j = json_object())) return bt_error(BT_ENOMEM, "out of memory");
    int rc = BT_OK;
    json_t *msgs = json_object_get(j, "messages");
    if (msgs) {
        if (!json_is_array(msgs)) { rc = bt_error(BT_EINVAL, "the request template's \"messages\" is not an array"); goto done; }
        json_t *nm = json_array(), *m;
        size_t i;
        json_array_foreach(msgs, i, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!role || strcmp(role, "system")) break;
            json_array_append(nm, m);
        }
        json_array_append_new(nm, json_pack("{s:s,s:s}", "role", "user", "content", prompt));
        json_object_set_new(j, "messages", nm);
        json_object_del(j, "prompt");
    } else json_object_set_new(j, "prompt", json_string(prompt));
    json_object_set_new(j, "temperature", json_real(0));
    json_object_del(j, "stream");
    json_object_del(j, "stream_options");
    json_object_del(j, "n");
    json_object_del(j, "best_of");
    if (!json_object_get(j, "max_tokens") && !json_object_get(j, "max_completion_tokens"))
        json_object_set_new(j, "max_tokens", json_integer(BT_CONTAM_MAX_TOKENS));
    char *s = json_dumps(j, JSON_COMPACT);
    if (!s) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    *out = s;
    *out_len = strlen(s);
done:
    json_decref(j);
    return rc;
}

/* ---- the verdict ------------------------------------------------------ */

typedef struct tok_ref { unsigned long long key; long req; } tok_ref;

static int cmp_tok(const void *x, const void *y)
{
    unsigned long long a = ((const tok_ref *)x)->key, b = ((const tok_ref *)y)->key;
    return a < b ? -1 : a > b;
}

static int cmp_long(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return a < b ? -1 : a > b;
}

static bool same_text(const bt_contam_answer *a, const bt_contam_answer *b)
{
    return a->text_len == b->text_len && (!a->text_len || !memcmp(a->text, b->text, a->text_len));
}

static void count(bt_contam_counts *c, const bt_contam_answer *a, bool dev)
{
    c->n++;
    if (dev) c->dev++;
    if (dev && a->answered && a->cls == BT_ANS_OK) c->dev_ok++;
    if (a->cls >= 0 && a->cls < BT_ANS_COUNT) c->classes[a->cls]++;
}

static bool degenerate(int c)
{
    return c == BT_ANS_TOKEN_WALL || c == BT_ANS_EMPTY || c == BT_ANS_INVALID_TOKEN || c == BT_ANS_NONFINITE;
}

static void wilson(bt_contam_counts *c) { bt_stats_wilson(c->dev, c->n, &c->lo, &c->hi); }

static void set_test(bt_contam_test *t, int cls, int arm, int base, const bt_contam_counts *a, const bt_contam_counts *b)
{
    t->cls = cls; t->arm = arm; t->base = base;
    t->fa = a->dev; t->na = a->n; t->fb = b->dev; t->nb = b->n;
}

/* the index of the answer request i is measured against: its control's
 * reference, or for a resent its fresh request (-1: that got no answer) */
static long ref_of(const bt_contam_plan *p, const bt_contam_answer *ans, const long *ref, long i)
{
    const bt_contam_req *r = &p->reqs[i];
    if (r->arm == BT_CONTAM_ARM_RESENT) {
        long f = p->units[r->unit].first;
        return ans[f].answered ? f : -1;
    }
    return r->control >= 0 ? ref[r->control] : -1;
}

int bt_contam_analyze(const bt_contam_plan *p, const bt_contam_answer *ans, double max_fail, bt_contam_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->early.div_median = v->late.div_median = -1;
    v->max_fail = max_fail;
    v->leak_first = -1;
    v->hist_explained = -1;
    /* the reference answer of each control: the warm-up's modal answer */
    long ref[BT_CONTAM_CONTROLS];
    for (int k = 0; k < BT_CONTAM_CONTROLS; k++) {
        ref[k] = -1;
        int best = 0;
        for (long i = 0; i < p->n_reqs; i++) {
            const bt_contam_req *r = &p->reqs[i];
            if (r->arm != BT_CONTAM_ARM_WARMUP || r->control != k || !ans[i].answered) continue;
            int c = 0;
            for (long j = 0; j < p->n_reqs; j++)
                if (p->reqs[j].arm == BT_CONTAM_ARM_WARMUP && p->reqs[j].control == k && ans[j].answered && same_text(&ans[i], &ans[j]))
                    c++;
            if (c > best) { best = c; ref[k] = i; }
        }
        if (ref[k] < 0) return bt_error(BT_EINVAL, "control %d got no answer in the warm-up: no reference answer", k);
    }

    /* leaks: a token of the plan in an answer whose prompt does not hold
     * it. The plan's tokens, sorted by key, each with a request holding it;
     * an answer is scanned for anything shaped like a token. */
    tok_ref *toks = malloc((size_t)p->n_reqs * sizeof *toks);
    bool *leaked = calloc((size_t)p->n_reqs, sizeof *leaked);
    if (!toks || !leaked) { free(toks); free(leaked); return bt_error(BT_ENOMEM, "out of memory"); }
    long nt_ = 0;
    for (long i = 0; i < p->n_reqs; i++) toks[nt_++] = (tok_ref){ tok_key(p->reqs[i].token), i };
    qsort(toks, (size_t)nt_, sizeof *toks, cmp_tok);
    long first_order = -1;
    for (long i = 0; i < p->n_reqs; i++) {
        const bt_contam_answer *a = &ans[i];
        if (!a->sent) continue;
        v->sent++;
        if (!a->answered) continue;
        v->answered++;
        if (a->text_len < 9) continue;
        unsigned long long own = tok_key(p->reqs[i].token);
        const tok_ref *hit = NULL;
        for (size_t k = 0; k + 9 <= a->text_len && !hit; k++) {
            if (a->text[k + 4] != '-') continue;
            char t[BT_CONTAM_TOKEN];
            memcpy(t, a->text + k, 9);
            t[9] = 0;
            unsigned long long key = tok_key(t);
            if (!key || key == own) continue;
            tok_ref want = { key, 0 };
            hit = bsearch(&want, toks, (size_t)nt_, sizeof *toks, cmp_tok);
        }
        if (!hit) continue;
        leaked[i] = true;
        v->leaks++;
        if (first_order < 0 || a->order < first_order) first_order = a->order;
        if (v->n_ex < (int)BT_ARRAY_SIZE(v->ex)) {
            /* the source: of the requests holding it (a marker: every
             * request of its control), the latest sent no later than this
             * one, else the earliest sent after it */
            const char *t = p->reqs[hit->req].token;
            long before = -1, after = -1;
            for (long q = 0; q < p->n_reqs; q++) {
                if (strcmp(p->reqs[q].token, t) || !ans[q].sent) continue;
                if (ans[q].order <= a->order) { if (before < 0 || ans[q].order > ans[before].order) before = q; }
                else if (after < 0 || ans[q].order < ans[after].order) after = q;
            }
            long src = before >= 0 ? before : after >= 0 ? after : hit->req;
            bt_contam_leak *e = &v->ex[v->n_ex++];
            e->req = i; e->src = src;
            e->lag = a->order - ans[src].order;
            e->beside = ans[src].sent && ans[src].t0 < a->t1 && a->t0 < ans[src].t1;
            memcpy(e->token, t, BT_CONTAM_TOKEN);
        }
    }
    free(toks);
    v->leak_first = first_order >= 0 ? first_order + 1 : -1;
    bt_stats_wilson(v->leaks, v->answered, &v->leak_lo, &v->leak_hi);
    v->leak_needed = bt_stats_rate_needed(v->leaks, v->answered, max_fail);
    v->found[BT_CONTAM_LEAK] = v->leaks > 0;

    /* every measured answer against its reference */
    long w = p->n_blocks / 3;
    if (w < 1) w = 1;
    long degen_by[BT_ANS_COUNT] = { 0 };
    for (long i = 0; i < p->n_reqs; i++) {
        const bt_contam_req *r = &p->reqs[i];
        const bt_contam_answer *a = &ans[i];
        long ri = ref_of(p, ans, ref, i);
        if (!a->sent || r->arm == BT_CONTAM_ARM_NONE || r->arm == BT_CONTAM_ARM_FRESH || ri < 0) continue;
        bool dev = !a->answered || !same_text(a, &ans[ri]);
        if (r->arm == BT_CONTAM_ARM_WARMUP) { count(&v->warm, a, dev); continue; }
        count(&v->arms[r->arm], a, dev);
        if (r->arm == BT_CONTAM_ARM_REPEAT) {
            /* against the first of its pair (sent right before it) */
            const bt_contam_answer *f = &ans[i - 1];
            if (f->answered) count(&v->pair, a, !a->answered || !same_text(a, f));
        }
        if (r->arm == BT_CONTAM_ARM_REPEAT && a->answered) {
            v->hist_n++;
            if (dev && !leaked[i]) v->hist_dev++;
        }
        v->degen_of++;
        if (dev && a->answered && degenerate(a->cls) && !degenerate(ans[ri].cls)) {
            v->degen++;
            degen_by[a->cls]++;
        }
        if (r->block < w) count(&v->early, a, dev);
        if (r->block >= p->n_blocks - w) count(&v->late, a, dev);
    }
    free(leaked);
    for (int c = 0; c < BT_ANS_COUNT; c++) if (degen_by[c] > degen_by[v->degen_class]) v->degen_class = c;
    wilson(&v->warm); wilson(&v->early); wilson(&v->late); wilson(&v->pair);
    bt_stats_wilson(v->hist_dev, v->hist_n, &v->hist_lo, &v->hist_hi);
    /* where the differing answers depart from their reference */
    long *pre = malloc((size_t)(p->n_blocks + BT_CONTAM_WARMUP * BT_CONTAM_CONTROLS) * sizeof *pre);
    if (!pre) return bt_error(BT_ENOMEM, "out of memory");
    for (int arm = BT_CONTAM_ARM_WARMUP; arm < p->n_arms; arm++) {
        long n = 0;
        for (long i = 0; i < p->n_reqs; i++) {
            long ri = ref_of(p, ans, ref, i);
            const bt_contam_answer *a = &ans[i];
            if (p->reqs[i].arm != arm || ri < 0 || !a->sent || !a->answered || same_text(a, &ans[ri])) continue;
            const bt_contam_answer *r = &ans[ri];
            size_t k = 0;
            while (k < a->text_len && k < r->text_len && a->text[k] == r->text[k]) k++;
            pre[n++] = (long)k;
        }
        qsort(pre, (size_t)n, sizeof *pre, cmp_long);
        (arm == BT_CONTAM_ARM_WARMUP ? &v->warm : &v->arms[arm])->div_median = n ? pre[(n - 1) / 2] : -1;
    }
    free(pre);
    for (int a = 0; a < p->n_arms; a++) wilson(&v->arms[a]);

    /* the comparisons */
    int nt = 0;
    set_test(&v->tests[nt++], BT_CONTAM_ORDER, BT_CONTAM_ARM_AFTER_OTHER, BT_CONTAM_ARM_REPEAT,
             &v->arms[BT_CONTAM_ARM_AFTER_OTHER], &v->arms[BT_CONTAM_ARM_REPEAT]);
    set_test(&v->tests[nt++], BT_CONTAM_PREFIX, BT_CONTAM_ARM_AFTER_SHARED, BT_CONTAM_ARM_AFTER_OTHER,
             &v->arms[BT_CONTAM_ARM_AFTER_SHARED], &v->arms[BT_CONTAM_ARM_AFTER_OTHER]);
    /* a pair against a pair: a resent against its fresh first answer, a
     * repeat against the send of its control just before it */
    set_test(&v->tests[nt++], BT_CONTAM_CACHE, BT_CONTAM_ARM_RESENT, BT_CONTAM_ARM_NONE,
             &v->arms[BT_CONTAM_ARM_RESENT], &v->pair);
    for (int l = 0; l < p->n_levels; l++)
        set_test(&v->tests[nt++], BT_CONTAM_CONCURRENCY, BT_CONTAM_ARM_BESIDE + l, BT_CONTAM_ARM_AFTER_OTHER,
                 &v->arms[BT_CONTAM_ARM_BESIDE + l], &v->arms[BT_CONTAM_ARM_AFTER_OTHER]);
    set_test(&v->tests[nt++], BT_CONTAM_DRIFT, -1, -1, &v->late, &v->early);
    v->n_tests = nt;
    bool all_called = true;
    for (int t = 0; t < nt; t++) {
        bt_contam_test *x = &v->tests[t];
        x->explained = -1;
        x->alpha = BT_STATS_ALPHA / nt;
        x->p = bt_stats_fisher(x->fa, x->na - x->fa, x->fb, x->nb - x->fb);
        x->called = x->na >= BT_STATS_MIN_PER_ARM && x->nb >= BT_STATS_MIN_PER_ARM;
        x->worse = x->na && x->nb && (double)x->fa / x->na > (double)x->fb / x->nb;
        x->found = x->called && x->worse && x->p < x->alpha;
        x->needed = x->worse ? bt_stats_ab_needed_alpha(x->fa, x->na, x->fb, x->nb, x->alpha) : -1;
        if (!x->called) all_called = false;
    }
    /* a fresh prompt's first answer ran after another prompt, its resent
     * after itself: on a server whose answer depends on the request before
     * it, the two differ without any cache */
    bool order = false;
    for (int t = 0; t < nt; t++) order |= v->tests[t].cls == BT_CONTAM_ORDER && v->tests[t].found;
    for (int t = 0; t < nt; t++)
        if (v->tests[t].cls == BT_CONTAM_CACHE && v->tests[t].found && order) {
            v->tests[t].found = false;
            v->tests[t].explained = BT_CONTAM_ORDER;
        }
    for (int t = 0; t < nt; t++) {
        const bt_contam_test *x = &v->tests[t];
        if (x->found) v->found[x->cls] = true;
        if (x->worse && !x->found && x->explained < 0) v->unresolved++;
    }
    /* history: the same request right after itself answered otherwise */
    v->hist_called = v->hist_n >= BT_STATS_MIN_PER_ARM;
    if (v->hist_dev && (v->found[BT_CONTAM_DRIFT] || v->found[BT_CONTAM_CACHE] || v->found[BT_CONTAM_LEAK]))
        /* answers turning with engine age, a repeat served from a cache
         * that answers otherwise, or a repeat carrying its first send's
         * leaked text */
        v->hist_explained = v->found[BT_CONTAM_DRIFT] ? BT_CONTAM_DRIFT : v->found[BT_CONTAM_CACHE] ? BT_CONTAM_CACHE : BT_CONTAM_LEAK;
    else if (v->hist_called && v->hist_dev >= 2) v->found[BT_CONTAM_HISTORY] = true;
    else if (v->hist_dev) v->unresolved++;
    if (!v->hist_called) all_called = false;
    bool any = false;
    for (int c = 0; c < BT_CONTAM_NCLASS; c++) any |= v->found[c];
    for (int k = 0; k < BT_CONTAM_CONTROLS; k++) {
        int c = ans[ref[k]].cls;
        if (degenerate(c) && !v->ref_failed++) v->ref_class = c;
    }
    v->outcome = any ? 1 : all_called && !v->unresolved && v->leak_hi < max_fail && !v->ref_failed && v->degen < 2 ? 0 : 2;
    return BT_OK;
}

/* ---- the report ------------------------------------------------------- */

static void print_counts(FILE *f, const char *name, const bt_contam_counts *c)
{
    bt_text_printf(f, "  %-14s %4ld of %4ld differ  [%5.1f%%, %5.1f%%]", name, c->dev, c->n, 100 * c->lo, 100 * c->hi);
    bool first = true;
    for (int k = 1; k < BT_ANS_COUNT; k++) {
        if (!c->classes[k]) continue;
        bt_text_printf(f, "%s%s %ld", first ? "   (" : ", ", bt_answer_class_name(k), c->classes[k]);
        first = false;
    }
    bt_text_printf(f, "%s", first ? "" : ")");
    if (c->dev && c->div_median >= 0)
        bt_text_printf(f, "; %ld still ok, departing after %ld bytes (median)", c->dev_ok, c->div_median);
    bt_text_printf(f, "\n");
}

static const char *side_name(const bt_contam_plan *p, int arm, bool late, char *buf, size_t cap)
{
    if (arm == BT_CONTAM_ARM_NONE) return "repeat_pair";
    return arm < 0 ? (late ? "last third" : "first third") : bt_contam_arm_name(p, arm, buf, cap);
}

static const char *req_name(const bt_contam_plan *p, long i, char *buf, size_t cap)
{
    const bt_contam_req *r = &p->reqs[i];
    if (r->role == BT_CONTAM_FRESH) return r->arm == BT_CONTAM_ARM_RESENT ? "a fresh prompt, resent" : "a fresh prompt";
    if (r->role != BT_CONTAM_CONTROL) return r->role == BT_CONTAM_NONCE_SHARED ? "a nonce request sharing a prefix" : "a nonce request";
    if (r->arm == BT_CONTAM_ARM_NONE) return "a control, not measured";
    char a[32];
    snprintf(buf, cap, "a control, %s", bt_contam_arm_name(p, r->arm, a, sizeof a));
    return buf;
}

/* up to 80 bytes of an answer around the leaked token */
static const char *excerpt(const bt_contam_answer *a, const char *tok, char *buf, size_t cap)
{
    const char *t = a->text ? a->text : "";
    const char *hit = a->text_len ? memmem(t, a->text_len, tok, strlen(tok)) : NULL;
    size_t from = hit && hit - t > 30 ? (size_t)(hit - t) - 30 : 0;
    snprintf(buf, cap, "%s%.*s%s", from ? "..." : "", (int)BT_MIN(a->text_len - from, (size_t)80), t + from,
             a->text_len - from > 80 ? "..." : "");
    return buf;
}

void bt_contam_print(FILE *f, const char *target, const bt_contam_plan *p, const bt_contam_answer *ans,
                     const bt_contam_verdict *v)
{
    char b1[48], b2[48], ex[100];
    bt_text_printf(f, "contamination probe: %s: %ld requests (%d controls, %ld blocks, concurrency", target, v->sent,
                   BT_CONTAM_CONTROLS, p->n_blocks);
    for (int l = 0; l < p->n_levels; l++) bt_text_printf(f, "%s%d", l ? ", " : " ", p->levels[l]);
    bt_text_printf(f, "; seed %llu), %ld answered\n", p->seed, v->answered);
    bt_text_printf(f, "nonce leakage: %ld of %ld answers hold another request's nonce or marker, Wilson 95%% [%.2f%%, %.2f%%]\n",
                   v->leaks, v->answered, 100 * v->leak_lo, 100 * v->leak_hi);
    for (int e = 0; e < v->n_ex; e++) {
        const bt_contam_leak *x = &v->ex[e];
        bt_text_printf(f, "  request %ld (%s) holds %s of request %ld (%s, %s): \"%s\"\n", ans[x->req].order + 1,
                       req_name(p, x->req, b1, sizeof b1), x->token, ans[x->src].order + 1, req_name(p, x->src, b2, sizeof b2),
                       x->beside ? "in flight beside it" : x->lag > 0 ? "sent before it" : "sent after it",
                       excerpt(&ans[x->req], x->token, ex, sizeof ex));
    }
    if (v->leaks) bt_text_printf(f, "  first leak seen after %ld requests\n", v->leak_first);
    bt_text_printf(f, "greedy answers against each control's reference (the modal warm-up answer; resent: against its "
                   "own first answer; repeat_pair: a repeat against the first of its pair):\n");
    print_counts(f, "warmup", &v->warm);
    for (int a = 0; a < p->n_arms; a++) print_counts(f, bt_contam_arm_name(p, a, b1, sizeof b1), &v->arms[a]);
    print_counts(f, "repeat_pair", &v->pair);
    print_counts(f, "first third", &v->early);
    print_counts(f, "last third", &v->late);
    for (int t = 0; t < v->n_tests; t++) {
        const bt_contam_test *x = &v->tests[t];
        bt_text_printf(f, "%-22s %s %ld/%ld vs %s %ld/%ld: Fisher p = %.3g (alpha %.3g): ", bt_contam_class_name(x->cls),
                       side_name(p, x->arm, true, b1, sizeof b1), x->fa, x->na, side_name(p, x->base, false, b2, sizeof b2),
                       x->fb, x->nb, x->p, x->alpha);
        if (x->found) bt_text_printf(f, "FOUND\n");
        else if (x->explained >= 0)
            bt_text_printf(f, "significant, but %s explains it (the first answer ran after another prompt)\n",
                           bt_contam_class_name(x->explained));
        else if (!x->called) {
            bt_text_printf(f, "not called (the replicate rule needs %d per side)", BT_STATS_MIN_PER_ARM);
            if (x->needed > 0) bt_text_printf(f, "; at these rates %ld per side would show it", x->needed);
            bt_text_printf(f, "\n");
        } else if (x->fa || x->fb) {
            bt_text_printf(f, "no significant difference");
            if (x->needed > 0) bt_text_printf(f, "; at these rates %ld per side would show one", x->needed);
            bt_text_printf(f, "\n");
        } else bt_text_printf(f, "none differ\n");
    }
    bt_text_printf(f, "%-22s repeat %ld/%ld differ, not counting http errors or leaks, Wilson 95%% [%.1f%%, %.1f%%] "
                   "(a server answering from the prompt alone: 0): ", bt_contam_class_name(BT_CONTAM_HISTORY), v->hist_dev,
                   v->hist_n, 100 * v->hist_lo, 100 * v->hist_hi);
    if (v->found[BT_CONTAM_HISTORY]) bt_text_printf(f, "FOUND\n");
    else if (v->hist_explained >= 0) bt_text_printf(f, "%s explains them\n", bt_contam_class_name(v->hist_explained));
    else if (!v->hist_called) bt_text_printf(f, "not called (the replicate rule needs %d)\n", BT_STATS_MIN_PER_ARM);
    else bt_text_printf(f, "%s\n", v->hist_dev ? "one is not enough to call it" : "none differ");
    if (v->degen && v->outcome == 1)
        bt_text_printf(f, "note: %ld of %ld measured answers are degenerate (%s, most of them) where their reference answer is "
                       "fine\n", v->degen, v->degen_of, bt_answer_class_name(v->degen_class));
    if (v->warm.dev)
        bt_text_printf(f, "note: %ld of %ld warm-up answers differ from their reference: greedy answers vary even one "
                       "request at a time\n", v->warm.dev, v->warm.n);
    if (v->outcome == 1) {
        bt_text_printf(f, "CONTAMINATED:");
        for (int c = 0; c < BT_CONTAM_NCLASS; c++) if (v->found[c]) bt_text_printf(f, " %s", bt_contam_class_name(c));
        bt_text_printf(f, "\n");
    } else if (v->outcome == 0) {
        bt_text_printf(f, "CLEAN: no contamination found; every comparison called, no answer differs more often than "
                       "its baseline, the leak rate below %g%% "
                       "(upper 95%% bound %.2f%%)\n", 100 * v->max_fail, 100 * v->leak_hi);
    } else {
        bt_text_printf(f, "INCONCLUSIVE: nothing found, but");
        if (v->ref_failed) {
            bt_text_printf(f, " %d of %d reference answers fail alone (%s): the engine is degenerate before anything "
                           "else runs (plain probe measures that; after a restart this probe can see it drift)",
                           v->ref_failed, BT_CONTAM_CONTROLS, bt_answer_class_name(v->ref_class));
            bt_text_printf(f, "\n");
            return;
        }
        if (v->degen >= 2) {
            bt_text_printf(f, " %ld of %ld answers are degenerate (%s, most of them) where their request's reference answer "
                           "is fine: something corrupts answers whatever ran before them, in every arm alike, which no "
                           "comparison here can attribute (a poisoned shared cache block, a state never reset, a bad "
                           "kernel; on bangtrace serve, bisect names the writer)\n", v->degen, v->degen_of,
                           bt_answer_class_name(v->degen_class));
            return;
        }
        bool called = v->hist_called, more = false;
        for (int t = 0; t < v->n_tests; t++) called &= v->tests[t].called;
        if (!called) bt_text_printf(f, " a comparison has fewer than %d answers a side (-n %d or more calls them all)",
                                    BT_STATS_MIN_PER_ARM, BT_STATS_MIN_PER_ARM);
        else for (int t = 0; t < v->n_tests; t++) {
            const bt_contam_test *x = &v->tests[t];
            if (!x->worse || x->explained >= 0) continue;
            bt_text_printf(f, "%s %s differs more often than %s (%ld/%ld vs %ld/%ld), not significantly", more ? ";" : "",
                           side_name(p, x->arm, true, b1, sizeof b1), side_name(p, x->base, false, b2, sizeof b2), x->fa, x->na,
                           x->fb, x->nb);
            /* per side: a comparison of arms has -n answers a side, the drift's thirds n/3 blocks of every arm */
            long n = x->arm < 0 ? (3 * x->needed + p->n_arms - 1) / p->n_arms : x->needed;
            if (x->needed > 0) bt_text_printf(f, " (at these rates -n %ld would call it)", n);
            more = true;
        }
        if (called && v->hist_dev == 1 && v->hist_explained < 0) {
            bt_text_printf(f, "%s 1 repeat answer of %ld differs from its reference (the same request right after itself; "
                           "one is not enough to call history_dependence: run again)", more ? ";" : "", v->hist_n);
            more = true;
        }
        if (v->leak_hi >= v->max_fail) {
            bt_text_printf(f, "%s 0 leaks in %ld answers bound the leak rate only below %.2f%%", called && !more ? "" : ";", v->answered,
                           100 * v->leak_hi);
            if (v->leak_needed > 0) bt_text_printf(f, " (%ld answers would bound it below %g%%)", v->leak_needed, 100 * v->max_fail);
        }
        bt_text_printf(f, "\n");
    }
}

static json_t *counts_json(const bt_contam_counts *c)
{
    json_t *cl = json_object();
    for (int k = 0; k < BT_ANS_COUNT; k++)
        if (c->classes[k]) json_object_set_new(cl, bt_answer_class_name(k), json_integer(c->classes[k]));
    return json_pack("{s:I,s:I,s:[f,f],s:o,s:I,s:I}", "answers", (json_int_t)c->n, "differ", (json_int_t)c->dev, "wilson95", c->lo,
                     c->hi, "classes", cl, "differ_still_ok", (json_int_t)c->dev_ok, "departs_after_bytes_median",
                     (json_int_t)(c->dev ? c->div_median : -1));
}

json_t *bt_contam_json(const char *target, const bt_contam_plan *p, const bt_contam_answer *ans, const bt_contam_verdict *v)
{
    char b1[32], b2[32];
    json_t *levels = json_array(), *found = json_array(), *arms = json_object(), *tests = json_array(), *ex = json_array();
    for (int l = 0; l < p->n_levels; l++) json_array_append_new(levels, json_integer(p->levels[l]));
    for (int c = 0; c < BT_CONTAM_NCLASS; c++) if (v->found[c]) json_array_append_new(found, json_string(bt_contam_class_name(c)));
    json_object_set_new(arms, "warmup", counts_json(&v->warm));
    json_object_set_new(arms, "repeat_pair", counts_json(&v->pair));
    for (int a = 0; a < p->n_arms; a++) json_object_set_new(arms, bt_contam_arm_name(p, a, b1, sizeof b1), counts_json(&v->arms[a]));
    for (int t = 0; t < v->n_tests; t++) {
        const bt_contam_test *x = &v->tests[t];
        json_array_append_new(tests, json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:f,s:b,s:b,s:b,s:I,s:s?}", "class",
                                               bt_contam_class_name(x->cls), "suspect", side_name(p, x->arm, true, b1, sizeof b1),
                                               "baseline", side_name(p, x->base, false, b2, sizeof b2), "suspect_differ",
                                               (json_int_t)x->fa, "suspect_answers", (json_int_t)x->na, "baseline_differ",
                                               (json_int_t)x->fb, "baseline_answers", (json_int_t)x->nb, "fisher_p", x->p,
                                               "alpha", x->alpha, "called", x->called, "suspect_differs_more", x->worse, "found", x->found,
                                               "requests_needed_per_side", (json_int_t)x->needed, "explained_by",
                                               x->explained >= 0 ? bt_contam_class_name(x->explained) : NULL));
    }
    for (int e = 0; e < v->n_ex; e++) {
        const bt_contam_leak *x = &v->ex[e];
        json_array_append_new(ex, json_pack("{s:I,s:I,s:s,s:I,s:b,s:s%}", "request", (json_int_t)ans[x->req].order + 1,
                                            "source", (json_int_t)ans[x->src].order + 1, "token", x->token, "lag",
                                            (json_int_t)x->lag, "beside", x->beside, "answer",
                                            ans[x->req].text ? ans[x->req].text : "", BT_MIN(ans[x->req].text_len, (size_t)300)));
    }
    json_t *j = json_pack("{s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:o,s:{s:I,s:I,s:[f,f],s:I,s:I,s:o},s:i,s:o,s:{s:o,s:o},s:o,s:f}",
                     "mode", "contamination", "target", target, "outcome", bt_contam_outcome_name(v->outcome), "found", found,
                     "requests", (json_int_t)v->sent, "answered", (json_int_t)v->answered, "blocks", (json_int_t)p->n_blocks,
                     "seed", (json_int_t)p->seed, "concurrency", levels,
                     "leaks", "answers", (json_int_t)v->leaks, "of", (json_int_t)v->answered, "wilson95", v->leak_lo, v->leak_hi,
                     "first_after_requests", (json_int_t)v->leak_first, "answers_needed", (json_int_t)v->leak_needed,
                     "examples", ex, "reference_failed", v->ref_failed, "arms", arms, "drift", "first_third", counts_json(&v->early), "last_third",
                     counts_json(&v->late), "tests", tests, "max_fail", v->max_fail);
    if (j) json_object_set_new(j, "degenerate", json_pack("{s:I,s:I,s:s?}", "answers", (json_int_t)v->degen, "of",
                                                           (json_int_t)v->degen_of, "class",
                                                           v->degen ? bt_answer_class_name(v->degen_class) : NULL));
    if (j) json_object_set_new(j, "history", json_pack("{s:I,s:I,s:[f,f],s:b,s:b,s:s?}", "repeat_differ", (json_int_t)v->hist_dev,
                                                        "repeat_answers", (json_int_t)v->hist_n, "wilson95", v->hist_lo, v->hist_hi,
                                                        "called", v->hist_called, "found", v->found[BT_CONTAM_HISTORY],
                                                        "explained_by", v->hist_explained >= 0
                                                            ? bt_contam_class_name(v->hist_explained) : NULL));
    return j;
}
