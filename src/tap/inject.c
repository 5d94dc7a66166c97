/* inject.c - fault injection specs: parse, match, apply.
 *
 * A spec is parsed once into a plain struct; matching is a handful of integer
 * compares per observed tensor. Activation faults are written in place into
 * the tensor the engine just computed (before the tap reads it). Positions
 * are rows: row r of a view holds position pos0 + r, and index/count select
 * elements within each matching row.
 *
 * State that changes during a run (which kvcorrupt positions have been
 * written and poisoned, which bit flips were done) lives in the spec records;
 * the const in the public API means "the configuration does not change". */
#include "tap/inject.h"
#include "base/dtype.h"
#include "base/util.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum kind {
    K_NAN, K_INF, K_NINF, K_ZERO, K_SCALE, K_NOISE,  /* activation faults */
    K_LONGCTX,                                       /* scale rows at pos >= P */
    K_KVCORRUPT, K_BITFLIP, K_CRASH,
    K_NOROLLBACK,                                    /* a rejected draft's state kept (hybrid models) */
};

typedef struct spec {
    char *text;          /* as given, for the trace */
    int kind;
    float value;         /* scale factor, noise amplitude, or kv poison value */
    int model;           /* 0 target, 1 draft */
    int layer;           /* -1: any */
    int op;              /* -1: any */
    int expert;          /* -1: any; else only that MoE expert's part of op */
    int step;            /* -1: any */
    bool step_ge;        /* step >= S instead of == S */
    int pos_ge;          /* -1: any position */
    int pos;             /* kvcorrupt position */
    long index;          /* element within a row (default 0) */
    long count;          /* 0: use index; else the first count elements */
    bool whole_row;      /* longctx default: every element of the row */
    char tensor[128];    /* bitflip weight name */
    long bit;
    /* run state */
    bool kv_written;     /* the kv position has been computed */
    bool kv_done;        /* and handled */
    bool kv_poisoned;    /* and the cache really was written */
    bool flipped;
    long changed;        /* activation elements changed so far */
    double p;            /* p=P: active for a request with probability P (1: always) */
    bool active;         /* this request's draw (bt_injector_set_draw) */
} spec;


struct bt_injector {
    spec *specs;
    int n, cap;
};

bt_injector *bt_injector_new(void)
{
    return calloc(1, sizeof(bt_injector));
}

void bt_injector_free(bt_injector *inj)
{
    if (!inj) return;
    for (int i = 0; i < inj->n; i++) free(inj->specs[i].text);
    free(inj->specs);
    free(inj);
}

int bt_injector_count(const bt_injector *inj) { return inj ? inj->n : 0; }

/* ---- parsing ---- */

static int bad(const char *spec, const char *fmt, const char *a, const char *b)
{
    char what[2200];
    snprintf(what, sizeof what, fmt, a ? a : "", b ? b : "");
    return bt_error(BT_EINVAL, "--inject '%s': %s", spec, what);
}

/* Whole-string integer >= 0 (no sign, no trailing bytes). */
static bool parse_uint(const char *s, long *out)
{
    if (!*s || *s == '-' || *s == '+' || *s == ' ') return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 0x7fffffffL) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float *out)
{
    if (!*s || *s == ' ') return false;
    errno = 0;
    char *end;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_poison(const char *s, float *out)
{
    if (!strcmp(s, "nan")) *out = NAN;
    else if (!strcmp(s, "inf")) *out = INFINITY;
    else if (!strcmp(s, "-inf")) *out = -INFINITY;
    else if (!strcmp(s, "zero")) *out = 0.0f;
    else return false;
    return true;
}

/* op=NAME accepts "ffn_down", the full "blk.3.ffn_down" (which also sets
 * the layer) and a MoE expert's part "blk.3.ffn_down.expert[5]" (which
 * also sets the expert). */
static int parse_op(const char *text, const char *v, spec *s, bool *layer_from_op)
{
    long L = -1;
    char nbuf[64];
    const char *name = v;
    const char *ex = strstr(v, ".expert[");
    if (ex) {
        long E;
        char num[16];
        const char *close = strchr(ex + 8, ']');
        size_t n = close ? (size_t)(close - (ex + 8)) : 0;
        if (!close || close[1] || n == 0 || n >= sizeof num)
            return bad(text, "op '%s': expected NAME.expert[E]", v, NULL);
        memcpy(num, ex + 8, n); num[n] = 0;
        if (!parse_uint(num, &E) || E > 1 << 20) return bad(text, "op '%s': expert '%s' is not an integer", v, num);
        if ((size_t)(ex - v) >= sizeof nbuf) return bad(text, "op '%s' is too long", v, NULL);
        memcpy(nbuf, v, (size_t)(ex - v)); nbuf[ex - v] = 0;
        s->expert = (int)E;
        v = name = nbuf;
    }
    if (!strncmp(v, "blk.", 4)) {
        const char *dot = strchr(v + 4, '.');
        char num[16];
        size_t n = dot ? (size_t)(dot - (v + 4)) : 0;
        if (!dot || n == 0 || n >= sizeof num) return bad(text, "op '%s' is not a tensor name (blk.L.OP)", v, NULL);
        memcpy(num, v + 4, n); num[n] = 0;
        if (!parse_uint(num, &L)) return bad(text, "op '%s': layer '%s' is not an integer", v, num);
        name = dot + 1;
    }
    int op = bt_op_from_name(name);
    if (op < 0) {
        char list[512];
        size_t len = 0;
        for (int o = 0; o < BT_OP_COUNT && len < sizeof list; o++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", o ? ", " : "", bt_op_name(o));
        return bad(text, "unknown op '%s' (%s)", name, list);
    }
    if (s->expert >= 0 && op != BT_OP_FFN_GATE && op != BT_OP_FFN_UP && op != BT_OP_FFN_ACT && op != BT_OP_FFN_DOWN)
        return bad(text, "op '%s': only ffn_gate, ffn_up, ffn_act and ffn_down have experts", name, NULL);
    if (L >= 0 && !bt_op_is_layer_op(op)) return bad(text, "op '%s': %s is not a per-layer op", v, name);
    s->op = op;
    if (L >= 0) { s->layer = (int)L; *layer_from_op = true; }
    return BT_OK;
}

/* Parse "key=value,key=value" for KIND@WHERE specs. */
static int parse_where(const char *text, char *where, spec *s)
{
    bool seen_layer = false, seen_op = false, seen_step = false, seen_pos_ge = false,
         seen_index = false, seen_count = false, seen_model = false, seen_pos = false,
         seen_value = false, seen_scale = false, layer_from_op = false, seen_p = false;
    if (!*where) return BT_OK;
    char *save = NULL;
    for (char *item = strtok_r(where, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char key[32];
        const char *val;
        bool ge = false;
        char *op = strstr(item, ">=");
        char *eq = strchr(item, '=');
        if (op && (!eq || op < eq)) { ge = true; val = op + 2; *op = 0; }
        else if (eq) { val = eq + 1; *eq = 0; }
        else return bad(text, "'%s' is not key=value", item, NULL);
        snprintf(key, sizeof key, "%s", item);
        if (!*key) return bad(text, "empty key before '%s'", ge ? ">=" : "=", NULL);
        if (!*val) return bad(text, "%s expects a value", key, NULL);
        long n;
#define ONCE(flag) do { if (flag) return bad(text, "%s given twice", key, NULL); flag = true; } while (0)
#define NO_GE() do { if (ge) return bad(text, "%s takes '=', not '>='", key, NULL); } while (0)
        if (s->kind == K_NOROLLBACK && strcmp(key, "step") && strcmp(key, "p")) {
            return bad(text, "unknown key '%s' (norollback takes step and p)", key, NULL);
        } else if (!strcmp(key, "layer")) {
            NO_GE(); ONCE(seen_layer);
            if (layer_from_op) return bad(text, "layer given twice (also in op)", NULL, NULL);
            if (!parse_uint(val, &n)) return bad(text, "layer expects an integer >= 0, not '%s'", val, NULL);
            s->layer = (int)n;
        } else if (!strcmp(key, "op")) {
            NO_GE(); ONCE(seen_op);
            if (seen_layer && !strncmp(val, "blk.", 4)) return bad(text, "layer given twice (also in op)", NULL, NULL);
            int rc = parse_op(text, val, s, &layer_from_op);
            if (rc) return rc;
            if (layer_from_op) seen_layer = true;
        } else if (!strcmp(key, "step")) {
            ONCE(seen_step);
            if (!parse_uint(val, &n)) return bad(text, "step expects an integer >= 0, not '%s'", val, NULL);
            s->step = (int)n; s->step_ge = ge;
        } else if (!strcmp(key, "pos") && ge) {
            ONCE(seen_pos_ge);
            if (!parse_uint(val, &n)) return bad(text, "pos>= expects an integer >= 0, not '%s'", val, NULL);
            s->pos_ge = (int)n;
        } else if (!strcmp(key, "pos")) {
            if (s->kind != K_KVCORRUPT) return bad(text, "pos=P is only for kvcorrupt; use pos>=P", NULL, NULL);
            ONCE(seen_pos);
            if (!parse_uint(val, &n)) return bad(text, "pos expects an integer >= 0, not '%s'", val, NULL);
            s->pos = (int)n;
        } else if (!strcmp(key, "index")) {
            NO_GE(); ONCE(seen_index);
            if (!parse_uint(val, &n)) return bad(text, "index expects an integer >= 0, not '%s'", val, NULL);
            s->index = n;
        } else if (!strcmp(key, "count")) {
            NO_GE(); ONCE(seen_count);
            if (!parse_uint(val, &n) || n < 1) return bad(text, "count expects an integer >= 1, not '%s'", val, NULL);
            s->count = n;
        } else if (!strcmp(key, "model")) {
            NO_GE(); ONCE(seen_model);
            if (!strcmp(val, "target")) s->model = 0;
            else if (!strcmp(val, "draft")) s->model = 1;
            else return bad(text, "model expects target or draft, not '%s'", val, NULL);
        } else if (!strcmp(key, "p") && s->kind != K_CRASH) {
            NO_GE(); ONCE(seen_p);
            char *end;
            double pv = strtod(val, &end);
            if (end == val || *end || !(pv >= 0 && pv <= 1)) return bad(text, "p expects a probability in [0, 1], not '%s'", val, NULL);
            s->p = pv;
        } else if (!strcmp(key, "value") && s->kind == K_KVCORRUPT) {
            NO_GE(); ONCE(seen_value);
            if (!parse_poison(val, &s->value)) return bad(text, "value expects nan, inf, -inf or zero, not '%s'", val, NULL);
        } else if (!strcmp(key, "scale") && s->kind == K_LONGCTX) {
            NO_GE(); ONCE(seen_scale);
            if (!parse_float(val, &s->value)) return bad(text, "scale expects a finite number, not '%s'", val, NULL);
        } else {
            return bad(text, "unknown key '%s'%s", key,
                       s->kind == K_KVCORRUPT ? " (kvcorrupt takes layer, pos, value, model, p)"
                       : s->kind == K_LONGCTX ? " (longctx takes pos>=, op, scale, layer, step, model, p)"
                       : s->kind == K_CRASH ? " (crash takes step)"
                       : " (layer, op, step, pos>=, index, count, model, p)");
        }
#undef ONCE
#undef NO_GE
    }
    if (seen_index && seen_count) return bad(text, "give index or count, not both", NULL, NULL);
    if (s->layer >= 0 && s->op >= 0 && !bt_op_is_layer_op(s->op))
        return bad(text, "op %s is not a per-layer op; drop layer=", bt_op_name(s->op), NULL);
    if (s->kind == K_KVCORRUPT) {
        if (!seen_layer) return bad(text, "kvcorrupt needs layer=L", NULL, NULL);
        if (!seen_pos) return bad(text, "kvcorrupt needs pos=P", NULL, NULL);
        if (seen_op || seen_step || seen_pos_ge || seen_index || seen_count)
            return bad(text, "kvcorrupt takes layer, pos, value, model and p only", NULL, NULL);
    }
    if (s->kind == K_LONGCTX) {
        if (!seen_pos_ge) return bad(text, "longctx needs pos>=P", NULL, NULL);
        if (!seen_op) return bad(text, "longctx needs op=NAME", NULL, NULL);
        if (!seen_scale) return bad(text, "longctx needs scale=F", NULL, NULL);
        s->whole_row = !seen_index && !seen_count;
    }
    if (s->kind == K_CRASH) {
        if (!seen_step || s->step_ge) return bad(text, "crash needs step=S", NULL, NULL);
        if (seen_layer || seen_op || seen_pos_ge || seen_index || seen_count || seen_model)
            return bad(text, "crash takes step=S only", NULL, NULL);
    }
    return BT_OK;
}

/* bitflip:tensor=NAME,index=I,bit=B */
static int parse_bitflip(const char *text, char *args, spec *s)
{
    bool seen_t = false, seen_i = false, seen_b = false;
    char *save = NULL;
    for (char *item = strtok_r(args, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) return bad(text, "'%s' is not key=value", item, NULL);
        *eq = 0;
        const char *key = item, *val = eq + 1;
        long n;
        if (!*val) return bad(text, "%s expects a value", key, NULL);
        if (!strcmp(key, "tensor")) {
            if (seen_t) return bad(text, "tensor given twice", NULL, NULL);
            seen_t = true;
            if (strlen(val) >= sizeof s->tensor) return bad(text, "tensor name '%s' is too long", val, NULL);
            snprintf(s->tensor, sizeof s->tensor, "%s", val);
        } else if (!strcmp(key, "index")) {
            if (seen_i) return bad(text, "index given twice", NULL, NULL);
            seen_i = true;
            if (!parse_uint(val, &n)) return bad(text, "index expects an integer >= 0, not '%s'", val, NULL);
            s->index = n;
        } else if (!strcmp(key, "bit")) {
            if (seen_b) return bad(text, "bit given twice", NULL, NULL);
            seen_b = true;
            if (!parse_uint(val, &n) || n > 31) return bad(text, "bit expects an integer 0..31, not '%s'", val, NULL);
            s->bit = n;
        } else {
            return bad(text, "unknown key '%s' (bitflip takes tensor, index, bit)", key, NULL);
        }
    }
    if (!seen_t) return bad(text, "bitflip needs tensor=WEIGHT_NAME", NULL, NULL);
    if (!seen_i) return bad(text, "bitflip needs index=I", NULL, NULL);
    if (!seen_b) return bad(text, "bitflip needs bit=B", NULL, NULL);
    return BT_OK;
}

int bt_injector_add(bt_injector *inj, const char *text)
{
    if (!inj || !text) return bt_error(BT_EINVAL, "--inject: no spec");
    if (!*text) return bt_error(BT_EINVAL, "--inject '': empty spec");
    size_t len = strlen(text);
    if (len > 1000) return bt_error(BT_EINVAL, "--inject: spec of %zu bytes is too long", len);
    spec s = { .kind = -1, .layer = -1, .op = -1, .expert = -1, .step = -1, .pos_ge = -1, .pos = -1, .value = NAN, .p = 1 };
    char buf[1024];
    memcpy(buf, text, len + 1);

    int rc;
    char *at = strchr(buf, '@');
    char *colon = strchr(buf, ':');
    if (!strncmp(buf, "bitflip", 7) && (buf[7] == ':' || buf[7] == '@')) {
        s.kind = K_BITFLIP;
        rc = parse_bitflip(text, buf + 8, &s);
    } else if (!strcmp(buf, "bitflip")) {
        return bad(text, "bitflip needs ':tensor=NAME,index=I,bit=B'", NULL, NULL);
    } else {
        if (colon && (!at || colon < at)) {
            *colon = 0;
            return bad(text, "expected KIND@WHERE ('%s' before ':' is not bitflip)", buf, NULL);
        }
        char *where = "";
        if (at) { *at = 0; where = at + 1; }
        const char *kind = buf;
        if (!strcmp(kind, "nan")) { s.kind = K_NAN; s.value = NAN; }
        else if (!strcmp(kind, "inf") || !strcmp(kind, "+inf")) { s.kind = K_INF; s.value = INFINITY; }
        else if (!strcmp(kind, "-inf")) { s.kind = K_NINF; s.value = -INFINITY; }
        else if (!strcmp(kind, "zero")) { s.kind = K_ZERO; s.value = 0.0f; }
        else if (!strncmp(kind, "scale=", 6)) {
            s.kind = K_SCALE;
            if (!parse_float(kind + 6, &s.value)) return bad(text, "scale expects a finite number, not '%s'", kind + 6, NULL);
        } else if (!strncmp(kind, "noise=", 6)) {
            s.kind = K_NOISE;
            if (!parse_float(kind + 6, &s.value) || s.value < 0)
                return bad(text, "noise expects a finite amplitude >= 0, not '%s'", kind + 6, NULL);
        } else if (!strcmp(kind, "longctx")) { s.kind = K_LONGCTX; s.value = NAN; }
        else if (!strcmp(kind, "kvcorrupt")) { s.kind = K_KVCORRUPT; s.value = NAN; }
        else if (!strcmp(kind, "crash")) { s.kind = K_CRASH; }
        else if (!strcmp(kind, "norollback")) { s.kind = K_NOROLLBACK; }
        else if (!strcmp(kind, "scale") || !strcmp(kind, "noise"))
            return bad(text, "%s needs a value (%s=F@WHERE)", kind, kind);
        else
            return bad(text, "unknown kind '%s' (nan, inf, -inf, zero, scale=F, noise=F, longctx, kvcorrupt, bitflip, norollback)",
                       kind, NULL);
        if ((s.kind == K_LONGCTX || s.kind == K_KVCORRUPT || s.kind == K_CRASH) && !at)
            return bad(text, "%s needs @WHERE", kind, NULL);
        if (at && !*where) return bad(text, "nothing after '@'", NULL, NULL);
        if (at && (where[0] == ',' || where[strlen(where) - 1] == ',' || strstr(where, ",,")))
            return bad(text, "empty item in '%s'", where, NULL);
        rc = parse_where(text, where, &s);
    }
    if (rc) return rc;

    if (BT_VEC_RESERVE(inj->specs, inj->cap, inj->n + 1)) return BT_ENOMEM;
    s.text = strdup(text);
    if (!s.text) return bt_error(BT_ENOMEM, "out of memory");
    /* until a request's draw says otherwise: the draw of seed 0 */
    s.active = s.p >= 1 || bt_injector_draw_unit(0, inj->n) < s.p;
    inj->specs[inj->n++] = s;
    return BT_OK;
}

char *bt_injector_json(const bt_injector *inj)
{
    size_t cap = 3;
    int n = inj ? inj->n : 0;
    for (int i = 0; i < n; i++) cap += strlen(inj->specs[i].text) * 6 + 4;
    char *out = malloc(cap), *p = out;
    if (!out) return NULL;
    *p++ = '[';
    for (int i = 0; i < n; i++) {
        if (i) *p++ = ',';
        *p++ = '"';
        for (const unsigned char *c = (const unsigned char *)inj->specs[i].text; *c; c++) {
            if (*c == '"' || *c == '\\') { *p++ = '\\'; *p++ = (char)*c; }
            else if (*c < 0x20) p += sprintf(p, "\\u%04x", *c);
            else *p++ = (char)*c;
        }
        *p++ = '"';
    }
    *p++ = ']';
    *p = 0;
    return out;
}

/* ---- activation faults ---- */

static bool is_activation(int kind)
{
    return kind <= K_NOISE || kind == K_LONGCTX;
}

static int model_id(const char *model)
{
    return model && !strcmp(model, "draft") ? 1 : 0;
}

/* The request's draw for spec i: splitmix64 of (seed, i) as U[0, 1). */
double bt_injector_draw_unit(unsigned long long seed, int i)
{
    unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

void bt_injector_set_draw(bt_injector *inj, unsigned long long seed)
{
    if (!inj) return;
    for (int i = 0; i < inj->n; i++) {
        spec *s = &inj->specs[i];
        s->active = s->p >= 1 || bt_injector_draw_unit(seed, i) < s->p;
    }
}

bool bt_injector_active(const bt_injector *inj)
{
    for (int i = 0; inj && i < inj->n; i++) if (inj->specs[i].active) return true;
    return false;
}

static bool matches(const spec *s, int model, int op, int layer)
{
    if (!s->active) return false;
    if (s->model != model) return false;
    if (op < 0 || op >= BT_OP_COUNT) return false;     /* a foreign engine's extra tensor */
    if (s->op >= 0 && s->op != op) return false;
    if (s->layer >= 0 && s->layer != layer) return false;
    return true;
}

bool bt_injector_wants(const bt_injector *inj, const char *model, int op, int layer)
{
    if (!inj) return false;
    int mid = model_id(model);
    for (int i = 0; i < inj->n; i++) {
        const spec *s = &inj->specs[i];
        if (is_activation(s->kind) && matches(s, mid, op, layer)) return true;
        /* kvcorrupt watches the layer's attn_k to learn when its position
         * has been written (see bt_injector_after_forward). */
        if (s->kind == K_KVCORRUPT && s->model == mid && op == BT_OP_ATTN_K && layer == s->layer) return true;
    }
    return false;
}

long bt_injector_apply(const bt_injector *inj, const char *model, const bt_tensor_view *t)
{
    return bt_injector_apply_by(inj, model, t, NULL);
}

long bt_injector_apply_by(const bt_injector *inj, const char *model, const bt_tensor_view *t, const char **by)
{
    if (by) *by = NULL;
    if (!inj || !t || (!t->data && !t->tensor) || t->rows <= 0 || t->width <= 0) return 0;
    int mid = model_id(model);
    long changed = 0;
    for (int i = 0; i < inj->n; i++) {
        spec *s = &inj->specs[i];
        if (s->kind == K_KVCORRUPT) {
            if (s->model == mid && t->op == BT_OP_ATTN_K && t->layer == s->layer &&
                s->pos >= t->pos0 && s->pos < t->pos0 + t->rows)
                s->kv_written = true;
            continue;
        }
        if (!is_activation(s->kind) || !matches(s, mid, t->op, t->layer)) continue;
        if (s->expert >= 0 && (!t->moe || t->moe->expert != s->expert)) continue;
        if (s->step >= 0 && (s->step_ge ? t->step < s->step : t->step != s->step)) continue;
        long lo, hi;
        if (s->whole_row) { lo = 0; hi = t->width; }
        else if (s->count) { lo = 0; hi = BT_MIN(s->count, (long)t->width); }
        else { lo = s->index; hi = s->index + 1; }
        if (lo >= t->width) continue;
        if (hi > t->width) hi = t->width;
        long before = changed;
        /* One rectangle per spec: the rows at positions >= pos_ge, columns
         * [lo, hi). The backend applies it where the tensor lives. */
        int r0 = s->pos_ge >= 0 ? BT_MAX(0, s->pos_ge - t->pos0) : 0;
        if (t->moe && s->pos_ge >= 0)    /* an expert's rows are its tokens' positions, ascending */
            for (r0 = 0; r0 < t->rows && t->moe->pos[r0] < s->pos_ge; r0++) {}
        if (r0 >= t->rows) continue;
        bt_mutation mu = { .kind = s->kind == K_SCALE || s->kind == K_LONGCTX ? BT_MUT_SCALE
                                   : s->kind == K_NOISE ? BT_MUT_NOISE : BT_MUT_SET,
                           .value = s->value, .row0 = r0, .row1 = t->rows, .col0 = lo, .col1 = hi,
                           .step = t->step, .layer = t->layer, .op = t->op, .pos0 = t->pos0 };
        long n = 0;
        if (bt_tensor_mutate(t, &mu, &n) != BT_OK)
            bt_warn("--inject '%s': %s", s->text, bt_errmsg());
        changed += n;
        if (changed > before) {
            s->changed += changed - before;
            if (by && !*by) *by = s->text;
        }
    }
    return changed;
}

/* ---- KV cache corruption ---- */

void bt_injector_after_forward(const bt_injector *inj, bt_engine *e)
{
    if (!inj || !e) return;
    for (int i = 0; i < inj->n; i++) {
        spec *s = &inj->specs[i];
        if (s->kind != K_KVCORRUPT || s->kv_done || !s->kv_written || !s->active) continue;
        s->kv_done = true;      /* once, even if out of range */
        if (s->layer < 0 || s->layer >= bt_engine_n_layers(e) || s->pos < 0 || s->pos >= bt_engine_ctx_len(e)) {
            bt_warn("--inject '%s': layer %d / position %d is outside the KV cache; nothing poisoned", s->text, s->layer, s->pos);
            continue;
        }
        /* through the engine, so a cache on a device is poisoned in place */
        if (bt_engine_kv_fill(e, s->layer, s->pos, 0, s->value) != BT_OK ||
            bt_engine_kv_fill(e, s->layer, s->pos, 1, s->value) != BT_OK) {
            bt_warn("--inject '%s': %s", s->text, bt_errmsg());
            continue;
        }
        s->kv_poisoned = true;
        bt_debug("--inject '%s': poisoned the cached key and value of layer %d position %d", s->text, s->layer, s->pos);
    }
}

const char *bt_injector_needs_native(const bt_injector *inj)
{
    for (int i = 0; inj && i < inj->n; i++)
        if (inj->specs[i].kind == K_KVCORRUPT || inj->specs[i].kind == K_BITFLIP) return inj->specs[i].text;
    return NULL;
}

bool bt_injector_norollback(const bt_injector *inj, int step)
{
    bool hit = false;
    for (int i = 0; inj && i < inj->n; i++) {
        spec *s = &inj->specs[i];     /* run state, as after_forward's */
        if (s->kind != K_NOROLLBACK || !s->active) continue;
        if (s->step >= 0 && (s->step_ge ? step < s->step : step != s->step)) continue;
        s->changed++;
        hit = true;
    }
    return hit;
}

bool bt_injector_crash_at(const bt_injector *inj, int step)
{
    if (!inj) return false;
    for (int i = 0; i < inj->n; i++)
        if (inj->specs[i].kind == K_CRASH && inj->specs[i].step == step) return true;
    return false;
}

/* ---- what a run can reach ---- */

static int unreachable(const spec *s, const char *fmt, long a, long b)
{
    char what[300];
    snprintf(what, sizeof what, fmt, a, b);
    return bt_error(BT_EINVAL, "--inject '%s': %s", s->text, what);
}

int bt_injector_check(const bt_injector *inj, const bt_inject_limits *lim)
{
    if (!inj || !lim || !lim->target) return BT_OK;
    for (int i = 0; i < inj->n; i++) {
        const spec *s = &inj->specs[i];
        if (s->kind == K_BITFLIP) continue;     /* checked against the weights when applied */
        if (s->kind == K_CRASH || s->kind == K_NOROLLBACK) {
            if (s->step >= lim->max_step)
                return unreachable(s, "step=%ld is beyond the last step this context allows (%ld)", (long)s->step, lim->max_step - 1L);
            continue;
        }
        const bt_config *c = lim->target;
        int n_layers = c->n_layers;
        if (s->model == 1) {
            if (!lim->draft)
                return bt_error(BT_EINVAL, "--inject '%s': model=draft, but this run has no draft model "
                                "(--draft MODEL, --draft-self N or --draft-mtp; --draft-ngram computes no tensors)", s->text);
            c = lim->draft;
            n_layers = lim->draft_layers;
        }
        const char *who = s->model == 1 ? "draft model's" : "model's";
        if (s->layer >= n_layers) {
            char what[200];
            snprintf(what, sizeof what, "layer %d is beyond the %s %d layers (0..%d)", s->layer, who, n_layers, n_layers - 1);
            return bt_error(BT_EINVAL, "--inject '%s': %s", s->text, what);
        }
        if (s->kind == K_KVCORRUPT) {
            if (s->pos >= lim->max_pos)
                return unreachable(s, "pos=%ld is beyond the context (positions 0..%ld; --ctx)", (long)s->pos, lim->max_pos - 1L);
            continue;
        }
        if (s->pos_ge >= lim->max_pos)
            return unreachable(s, "pos>=%ld is beyond the context (positions 0..%ld; --ctx)", (long)s->pos_ge, lim->max_pos - 1L);
        if (s->step >= lim->max_step)
            return unreachable(s, s->step_ge ? "step>=%ld is beyond the last step this context allows (%ld)" : "step=%ld is beyond the last step this context allows (%ld)",
                               (long)s->step, lim->max_step - 1L);
        if (s->op >= 0 && !bt_op_exists(c, s->op))
            return bt_error(BT_EINVAL, "--inject '%s': op %s is not computed by architecture %s", s->text,
                            bt_op_name(s->op), c->arch);
        if (!s->whole_row && !s->count) {
            /* index past every row it can select: the widest op when op is not given */
            int w = 0;
            for (int op = 0; op < BT_OP_COUNT; op++)
                if ((s->op < 0 && bt_op_exists(c, op)) || s->op == op) w = BT_MAX(w, bt_op_width(c, op));
            if (s->index >= w) {
                char what[200];
                if (s->op >= 0) snprintf(what, sizeof what, "index=%ld is past the end of %s's rows (%d values)", s->index, bt_op_name(s->op), w);
                else snprintf(what, sizeof what, "index=%ld is past the end of every tensor's rows (at most %d values)", s->index, w);
                return bt_error(BT_EINVAL, "--inject '%s': %s", s->text, what);
            }
        }
    }
    return BT_OK;
}

bool bt_injector_fired(const bt_injector *inj, int i, const char **text)
{
    if (text) *text = NULL;
    if (!inj || i < 0 || i >= inj->n) return false;
    const spec *s = &inj->specs[i];
    if (text) *text = s->text;
    switch (s->kind) {
    case K_KVCORRUPT: return s->kv_poisoned;
    case K_BITFLIP: return s->flipped;
    case K_CRASH: return false;          /* a crash that fired ended the process */
    default: return s->changed > 0;
    }
}

/* ---- weight bit flips ---- */

/* Count weights whose own name is `name` (distinct data only). */
static void try_name(const bt_weight *w, const char *name, const bt_weight **found, int *hits)
{
    if (!w->name || !w->data || strcmp(w->name, name)) return;
    if (*found && (*found)->data == w->data) return;
    (*hits)++;
    if (!*found) *found = w;
}

/* The weight named `name`: exact bt_weight.name first (GGUF names are
 * unique), then the GGUF-style names mapped onto the model's fields, so
 * "blk.2.attn_q.weight" works for llama2.c checkpoints too, whose own names
 * ("wq") repeat in every layer. */
static const bt_weight *find_weight(const bt_model *m, const char *name, int *ambiguous)
{
    /* the layer's tensors are the architecture's table (model/arch.c) */
    const bt_arch *arch = m->cfg.desc ? m->cfg.desc : bt_arch_find("llama");
    *ambiguous = 0;
    const bt_weight *found = NULL;
    int hits = 0;
    try_name(&m->token_embd, name, &found, &hits);
    try_name(&m->output_norm, name, &found, &hits);
    try_name(&m->rope_freqs, name, &found, &hits);
    if (!m->cfg.tied_output) try_name(&m->output, name, &found, &hits);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const bt_layer_weights *L = &m->layers[l];
        for (int k = 0; k < arch->n_layer; k++)
            try_name((const bt_weight *)((const char *)L + arch->layer[k].field), name, &found, &hits);
    }
    if (hits == 1) return found;
    if (hits > 1) { *ambiguous = hits; return NULL; }

    char base[128];
    snprintf(base, sizeof base, "%s", name);
    size_t bl = strlen(base);
    if (bl > 7 && !strcmp(base + bl - 7, ".weight")) base[bl - 7] = 0;
    if (!strcmp(base, "token_embd")) return m->token_embd.data ? &m->token_embd : NULL;
    if (!strcmp(base, "output_norm")) return &m->output_norm;
    if (!strcmp(base, "output")) return m->output.data ? &m->output : NULL;
    if (!strncmp(base, "blk.", 4)) {
        char *dot = strchr(base + 4, '.');
        if (!dot) return NULL;
        *dot = 0;
        long L;
        if (!parse_uint(base + 4, &L) || L >= m->cfg.n_layers) return NULL;
        const char *suffix = dot + 1;   /* "attn_q" (".weight" dropped) or "attn_q.bias" */
        for (int k = 0; k < arch->n_layer; k++) {
            const char *tn = arch->layer[k].name;
            size_t sl = strlen(suffix);
            if (!strcmp(tn, suffix) || (!strncmp(tn, suffix, sl) && !strcmp(tn + sl, ".weight"))) {
                const bt_weight *w = (const bt_weight *)((const char *)&m->layers[L] + arch->layer[k].field);
                return w->data ? w : NULL;
            }
        }
    }
    return NULL;
}

static int flip_one(spec *s, bt_model *m)
{
    int ambiguous;
    const bt_weight *w = find_weight(m, s->tensor, &ambiguous);
    if (ambiguous)
        return bt_error(BT_ENOTFOUND, "--inject '%s': weight name '%s' is used by %d tensors; use blk.L.NAME.weight",
                        s->text, s->tensor, ambiguous);
    if (!w || !w->data)
        return bt_error(BT_ENOTFOUND, "--inject '%s': no weight named '%s' in %s (names: token_embd.weight, "
                        "blk.L.attn_q.weight ..., output_norm.weight, output.weight)", s->text, s->tensor,
                        m->path ? m->path : "the model");
    size_t bytes = bt_dtype_row_size(w->type, w->cols) * (size_t)w->rows;
    if (!bytes) return bt_error(BT_EUNSUPPORTED, "--inject '%s': weight '%s' has type %d of unknown size", s->text, s->tensor, w->type);
    size_t esize, nelem;
    int bits;
    const char *unit;
    if (w->type == BT_DT_F32) { esize = 4; bits = 32; unit = "element"; }
    else if (w->type == BT_DT_F16 || w->type == BT_DT_BF16) { esize = 2; bits = 16; unit = "element"; }
    else { esize = 1; bits = 8; unit = "byte"; }
    nelem = bytes / esize;
    if ((size_t)s->index >= nelem)
        return bt_error(BT_ERANGE, "--inject '%s': index %ld is past the end of '%s' (%zu %ss)",
                        s->text, s->index, s->tensor, nelem, unit);
    if (s->bit >= bits)
        return bt_error(BT_ERANGE, "--inject '%s': bit %ld is out of range for a %s %s (0..%d)",
                        s->text, s->bit, bt_dtype(w->type)->name ? bt_dtype(w->type)->name : "?", unit, bits - 1);
    /* Little-endian: bit b of an element lives in byte b/8 of it. */
    unsigned char *byte = (unsigned char *)w->data + (size_t)s->index * esize + (size_t)(s->bit / 8);
    /* Weights in the model's file mapping are read-only. It is MAP_PRIVATE:
     * making a page writable gives this process a private copy of it, so the
     * file on disk is never modified. Data outside the mapping (a loader's
     * own buffer) is writable already. */
    bool in_map = m->file_data && byte >= m->file_data && byte < m->file_data + m->file_size;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) pg = 4096;
    void *page = (void *)((uintptr_t)byte & ~((uintptr_t)pg - 1));
    if (in_map && mprotect(page, (size_t)pg, PROT_READ | PROT_WRITE) != 0)
        return bt_error(BT_EIO, "--inject '%s': cannot make '%s' writable (mprotect): %s", s->text, s->tensor, strerror(errno));
    *byte ^= (unsigned char)(1u << (s->bit % 8));
    if (in_map) mprotect(page, (size_t)pg, PROT_READ);
    s->flipped = true;
    bt_debug("--inject '%s': flipped bit %ld of %s %ld of %s", s->text, s->bit, unit, s->index, s->tensor);
    return BT_OK;
}

int bt_injector_apply_weights(const bt_injector *inj, bt_model *m)
{
    if (!inj || !m) return BT_OK;
    for (int i = 0; i < inj->n; i++) {
        spec *s = &inj->specs[i];
        if (s->kind != K_BITFLIP || s->flipped) continue;
        if (!bt_model_has_weights(m))
            return bt_error(BT_ENOTFOUND, "--inject '%s': the model has no weights", s->text);
        int rc = flip_one(s, m);
        if (rc) return rc;
    }
    return BT_OK;
}
