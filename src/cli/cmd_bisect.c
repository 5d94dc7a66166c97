/* cmd_bisect.c - `bangtrace bisect`: where a traced run first went wrong.
 *
 * Plain mode reads the trace only (src/trace/analyze.c): the first
 * non-finite tensor, how it spread, the first degenerate output step and
 * why the argmax chose what it chose. --reference hands the trace to the
 * teacher-forced replay (src/run/replay.c: the recorded tokens through a
 * clean engine on the same model file, every tap compared with
 * bt_tap_compare), which finds finite corruption that never turns into
 * NaN. This file parses flags and formats what those modules found. */
#include "cmd.h"
#include "args.h"
#include "backend/backend.h"
#include "run/run_meta.h"
#include "engine/engine.h"
#include "kernels/cpu/numerics.h"
#include "model/model.h"
#include "tap/stats.h"
#include "trace/analyze.h"
#include "trace/provenance.h"
#include "trace/compare.h"
#include "trace/headroom.h"
#include "trace/reader.h"
#include "run/replay.h"
#include "base/text.h"
#include "trace/runstate.h"
#include "base/util.h"
#include "engines/llamacpp/llamacpp.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cmd_bisect_help(FILE *out)
{
    fprintf(out,
        "usage: bangtrace bisect TRACE [--limit X] [--json]\n"
        "       bangtrace bisect TRACE --reference [--model M] [--tokenizer T] [--tolerance X]\n"
        "                        [--threads N] [--device DEV] [--all] [--numerics A [--against B]]\n"
        "                        [--json]\n\n"
        "Find where a traced run (bangtrace run --trace) went wrong.\n\n"
        "Without --reference: the first non-finite tensor (step, position, layer, op,\n"
        "index, counts), the propagation chain (the first bad tensor of every later\n"
        "layer in that step; the later step where the KV cache carried it forward, or\n"
        "where the fault recurred), the first degenerate output step (non-finite\n"
        "logits, out-of-vocabulary id, token wall, repetition loop) and a one-sentence\n"
        "explanation of the argmax at that step. Every trace, clean ones too, gets a\n"
        "one-line headroom verdict: the largest absmax of any tapped tensor against the\n"
        "f16 maximum 65504 (or --limit X), and the first tensor past half of it and\n"
        "past it (doc/numerics.md).\n\n"
        "On a speculative trace (run --spec-k) also: the drafter, k, the acceptance rate\n"
        "overall and per 8 verify steps, whether the first non-finite came from a draft\n"
        "pass or a target pass (a drafter's NaN only costs rejected drafts: the target\n"
        "verifies every token), post_stop_draft / accept_collapse events, and the\n"
        "amplification: the target positions that went through the bad op after the\n"
        "prefill, up to the collapse, against plain decoding of the same output (one\n"
        "forward of one position per emitted token).\n\n"
        "With --reference: replay the trace's exact tokens (prompt as step 0, then one\n"
        "token per step) through a clean f32 CPU engine on the same model file (its\n"
        "SHA-256 must match the trace's), no injection, and compare the statistics of\n"
        "every tapped tensor at every step. Reports the first (step, layer, op) whose\n"
        "statistics diverge: finds finite corruption that never becomes NaN. On a\n"
        "speculative trace every target forward is replayed as it ran (a verify step\n"
        "with the last accepted token and the drafts it verified); draft passes are not.\n\n"
        "  --json           one JSON object on stdout\n"
        "  --limit X        measure the headroom against X instead of the f16 maximum\n"
        "  --reference      teacher-forced replay against a clean engine\n"
        "                   (a trace of run --engine llama.cpp: the exact engine's replay of its\n"
        "                   ids, the relative error per op and layer up to where llama.cpp first\n"
        "                   departs, a verdict naming its kernel, top-1 agreement; doc/llama-cpp.md)\n"
        "  --model M        model file (default: the trace's model_path)\n"
        "  --tokenizer T    llama2.c tokenizer (not needed for the replay)\n"
        "  --tolerance X    relative tolerance on min, max, mean, rms (default 0.02; min and\n"
        "                   max relative to the tensor's absmax, mean and rms to its rms;\n"
        "                   the rule diff uses, doc/trace-format.md)\n"
        "  --threads N      compute threads (default: the trace's, at most the online CPUs)\n"
        "  --device DEV     replay on cpu (default), cuda or cuda:N (the CUDA plugin);\n"
        "                   --numerics and --against run there too (doc/numerics.md).\n"
        "                   Compares across\n"
        "                   devices (a CUDA trace on the CPU, a CPU trace on CUDA): unless\n"
        "                   --tolerance is given, the tolerance is derived from the dtypes\n"
        "                   involved (f32: one bf16 step, 2^-7; doc/cuda.md)\n"
        "  --all            keep going after the first divergence and list every divergent step\n"
        "  --numerics A     replay under numerics profile A (run --numerics; default exact f32)\n"
        "  --against B      replay the same ids under A and under B and compare the two\n"
        "                   replays instead of the trace: the first op where they depart\n"
        "                   beyond the tolerance, and the first op non-finite under one only\n\n"
        "A trace whose run did not finish (killed: status still running and no process\n"
        "writing it; crashed; interrupted; a trace write error; an error) gets one line\n"
        "saying so, with the last committed step (JSON: run_status, unfinished,\n"
        "last_committed_step), and is never called clean.\n\n"
        "Exit status: 0 clean (no non-finite value, no degenerate output, and the run\n"
        "finished; with --reference: no divergence), 1 something was found (or, without\n"
        "--reference, the run did not finish), 2 error (missing, corrupt or non-trace file).\n");
}

typedef struct bisect_opts {
    const char *trace;
    bt_args g;                  /* --model, --tokenizer, --threads, --device, --numerics A */
    bool json, reference, all;
    bool unfinished;            /* the run did not finish: "clean" would claim too much */
    double tol;
    bool tol_given;
    double limit;               /* headroom limit; 0 = the f16 maximum */
    const char *num_b;          /* --against B (the spec as given) */
    bt_numerics prof_b;
    int state_dk;               /* a gated delta net's state rows a value head (hparams ssm_head_k); 0: none */
} bisect_opts;

/* The trace's hparams ssm_head_k (0: not a hybrid model's, or an older trace). */
static int state_rows_per_head(bt_trace_reader *r)
{
    const char *hp = bt_trace_meta_get(r, "hparams");
    json_t *j = hp ? json_loads(hp, 0, NULL) : NULL;
    json_t *v = j ? json_object_get(j, "ssm_head_k") : NULL;
    int dk = json_is_integer(v) ? (int)json_integer_value(v) : 0;
    json_decref(j);
    return dk > 0 ? dk : 0;
}

static int parse_args(int argc, char **argv, bisect_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->g.take = BT_ARGS_MODEL | BT_ARGS_M | BT_ARGS_TOKENIZER | BT_ARGS_THREADS | BT_ARGS_T | BT_ARGS_DEVICE | BT_ARGS_NUMERICS;
    o->tol = 0.02;
    for (int i = 1; i < argc; i++) {
        bool taken;
        if (bt_args_take(&o->g, argc, argv, &i, &taken)) return BT_EINVAL;
        if (taken) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() do { if (!v) return bt_error(BT_EINVAL, "%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--reference")) o->reference = true;
        else if (!strcmp(a, "--all")) o->all = true;
        else if (!strcmp(a, "--against")) { VAL(); if (bt_numerics_parse(v, &o->prof_b)) return BT_EINVAL; o->num_b = v; }
        else if (!strcmp(a, "--limit")) { VAL(); if (bt_parse_float(a, v, 1e-30, 1e38, &o->limit)) return BT_EINVAL; }
        else if (!strcmp(a, "--tolerance")) { VAL(); if (bt_parse_float(a, v, 0, 1e6, &o->tol)) return BT_EINVAL; o->tol_given = true; }
        else if (a[0] == '-' && a[1]) return bt_error(BT_EINVAL, "unknown flag '%s' (see bangtrace help bisect)", a);
        else if (!o->trace) o->trace = a;
        else return bt_error(BT_EINVAL, "unexpected argument '%s' (one trace at a time)", a);
#undef VAL
    }
    if (!o->trace) return bt_error(BT_EINVAL, "give a trace file (see bangtrace help bisect)");
    if (o->limit > 0 && o->reference) return bt_error(BT_EINVAL, "--limit applies without --reference (the headroom of the trace)");
    if ((o->g.numerics_spec || o->num_b) && !o->reference) return bt_error(BT_EINVAL, "--numerics and --against apply with --reference");
    if (o->num_b && !o->g.numerics_spec) return bt_error(BT_EINVAL, "--against B needs --numerics A (the other side)");
    if ((o->g.model || o->g.tokenizer || o->all || o->g.threads || o->g.device) && !o->reference)
        return bt_error(BT_EINVAL, "--model, --tokenizer, --threads, --device and --all only apply with --reference");
    return BT_OK;
}

/* The numerics profile the trace ran under (meta numerics; older traces and
 * default runs: exact f32). */
static const char *llama_path_of(bt_trace_reader *r)
{
    bt_run_meta m;
    bt_run_meta_read(r, &m);
    return m.llama_cpp_path;
}

/* The engine a cross-engine trace ran on (meta engine). */
static const char *engine_of(bt_trace_reader *r)
{
    bt_run_meta m;
    bt_run_meta_read(r, &m);
    return m.engine ? m.engine : "llama.cpp";
}

static const char *numerics_of(bt_trace_reader *r)
{
    bt_run_meta m;
    bt_run_meta_read(r, &m);
    return m.numerics && *m.numerics ? m.numerics : "f32";
}

/* "verify pass", "draft pass", ... for a step kind */
static const char *pass_name(const char *kind)
{
    if (!strcmp(kind, "verify")) return "verify pass";
    if (!strcmp(kind, "draft")) return "draft pass";
    if (!strcmp(kind, "prefill")) return "prefill";
    if (!strcmp(kind, "decode")) return "decode pass";
    return "pass";
}

/* The speculation story: acceptance, where the first non-finite came from,
 * and how many target positions went through the bad op against plain
 * decoding of the same output. */
static void print_spec(const bt_analysis *x)
{
    const bt_spec_analysis *s = &x->spec;
    char k[16];
    if (s->k > 0) snprintf(k, sizeof(k), "%d", s->k); else snprintf(k, sizeof(k), "?");
    bt_text_printf(stdout, "speculation: drafter %s, k=%s: %d verify, %d draft, %d plain decode target passes",
           s->drafter[0] ? s->drafter : "?", k, s->verify_steps, s->draft_steps, s->decode_steps);
    if (isnan(s->acceptance)) bt_text_printf(stdout, "; nothing drafted\n");
    else bt_text_printf(stdout, "; acceptance %.2f (%lld of %lld drafted tokens)\n", s->acceptance, (long long)s->accepted, (long long)s->drafted);
    if (s->n_windows > 1) {
        bt_text_printf(stdout, "  acceptance per %d verify steps:", BT_SPEC_WINDOW);
        int shown = s->n_windows < 24 ? s->n_windows : 24;
        for (int i = 0; i < shown; i++) {
            const bt_spec_window *w = &s->windows[i];
            if (w->drafted) bt_text_printf(stdout, " %.2f", (double)w->accepted / w->drafted); else bt_text_printf(stdout, " -");
        }
        if (shown < s->n_windows) bt_text_printf(stdout, " ... (%d windows)", s->n_windows);
        bt_text_printf(stdout, "\n");
    }
    if (x->has_nonfinite && !strcmp(s->first_model, "draft")) {
        bt_text_printf(stdout, "  origin: the first non-finite came from the drafter's %s at step %d (%s), not from the target\n",
               pass_name(x->first.kind), x->first.step, x->first.tensor);
        if (s->nonfinite_drafts)
            bt_text_printf(stdout, "  %lld drafted token%s came from non-finite draft rows; %lld accepted (greedy: only where the target picked the same id)\n",
                   (long long)s->nonfinite_drafts, s->nonfinite_drafts == 1 ? "" : "s", (long long)s->nonfinite_drafts_accepted);
        if (s->output_clean)
            bt_text_printf(stdout, "  the target's passes stayed finite and the output is clean: the target verified every drafted token and rejected the bad ones\n");
        else if (s->target_bad_step >= 0)
            bt_text_printf(stdout, "  the target's passes went non-finite too, first at step %d (%s)\n", s->target_bad_step, s->target_bad_tensor);
        else bt_text_printf(stdout, "  the output degenerated anyway (see below)\n");
    } else if (x->has_nonfinite) {
        bt_text_printf(stdout, "  origin: the NaN came from the target's %s at step %d, not from the drafter\n", pass_name(x->first.kind), x->first.step);
    }
    if (s->amp_in_prefill) {
        bt_text_printf(stdout, "  amplification: none: the target went non-finite in the prefill, which plain decoding runs the same way\n");
    } else if (s->amp_emitted > 0) {
        char through[96];
        if (s->target_bad_step >= 0) snprintf(through, sizeof(through), "through %s", s->target_bad_tensor);
        else snprintf(through, sizeof(through), "through every target op");
        bt_text_printf(stdout, "  amplification: speculation (k=%s, %s) pushed %lld target positions %s in %lld forwards to emit %lld tokens",
               k, s->drafter[0] ? s->drafter : "?", (long long)s->amp_positions, through, (long long)s->amp_forwards,
               (long long)s->amp_emitted);
        if (s->target_bad_step >= 0) bt_text_printf(stdout, " up to step %d", s->amp_until);
        else if (x->has_degenerate) bt_text_printf(stdout, " up to the collapse at step %d", s->amp_until);
        bt_text_printf(stdout, " (%.2f per emitted token): %.2fx the %lld positions in %lld forwards plain decoding would have used\n",
               s->amp_ratio, s->amp_ratio, (long long)s->amp_emitted, (long long)s->amp_emitted);
        if (s->amp_draft_positions > 0)
            bt_text_printf(stdout, "  the self-drafter runs the same weights: %lld more positions went through %s in draft passes\n",
                   (long long)s->amp_draft_positions, s->target_bad_tensor);
    }
    if (s->partial)
        bt_text_printf(stdout, "  (an exported window: these counts cover the exported steps only)\n");
    if (s->n_post_stop)
        bt_text_printf(stdout, "  post_stop_draft: %d (first at step %d): %s\n", s->n_post_stop, s->post_stop_step, s->post_stop_detail);
    if (s->n_accept_collapse)
        bt_text_printf(stdout, "  accept_collapse: %d (first at step %d): %s\n", s->n_accept_collapse, s->accept_collapse_step, s->accept_collapse_detail);
}

/* The headroom verdict and the growth across layers (headroom.h). */
static void print_headroom(const bt_headroom *h, const char *numerics)
{
    char line[512];
    if (strcmp(numerics, "f32")) bt_text_printf(stdout, "numerics: %s\n", numerics);
    bt_headroom_verdict(h, line, sizeof(line));
    bt_text_printf(stdout, "headroom: %s\n", line);
    if (!h->present || h->n_layers < 2) return;
    bt_headroom_growth(h, line, sizeof(line));
    bt_text_printf(stdout, "  %s\n", line);
}

static json_t *headroom_at_json(const bt_headroom *h, const bt_headroom_at *a)
{
    json_t *j = json_object();
    json_object_set_new(j, "tensor", json_string(a->tensor));
    json_object_set_new(j, "op", json_string(a->op));
    json_object_set_new(j, "layer", a->layer < 0 ? json_null() : json_integer(a->layer));
    json_object_set_new(j, "step", json_integer(a->step));
    json_object_set_new(j, "pos0", json_integer(a->pos0));
    json_object_set_new(j, "n_pos", json_integer(a->n_pos));
    json_object_set_new(j, "model", json_string(a->model));
    json_object_set_new(j, "absmax", isfinite(a->absmax) ? json_real(a->absmax) : json_null());
    json_object_set_new(j, "nonfinite", json_boolean(isinf(a->absmax)));
    double ratio = bt_headroom_ratio(h, a->absmax);
    json_object_set_new(j, "headroom", isfinite(ratio) ? json_real(ratio) : json_null());
    return j;
}

/* bisect --json's "headroom": the verdict and its fields. */
static json_t *headroom_json(const bt_headroom *h)
{
    json_t *j = json_object();
    char line[512];
    bt_headroom_verdict(h, line, sizeof(line));
    json_object_set_new(j, "verdict", json_string(line));
    json_object_set_new(j, "limit", json_real(h->limit));
    json_object_set_new(j, "f16_max", json_real(BT_F16_MAX));
    json_object_set_new(j, "bf16_max", json_real(BT_BF16_MAX));
    json_object_set_new(j, "worst", h->present ? headroom_at_json(h, &h->worst) : json_null());
    json_object_set_new(j, "worst_f16_fraction", h->present && isfinite(h->worst.absmax) ? json_real(h->worst.absmax / BT_F16_MAX) : json_null());
    json_object_set_new(j, "worst_bf16_fraction", h->present && isfinite(h->worst.absmax) ? json_real(h->worst.absmax / BT_BF16_MAX) : json_null());
    json_object_set_new(j, "first_under_2x", h->has_under2 ? headroom_at_json(h, &h->under2) : json_null());
    json_object_set_new(j, "first_under_1x", h->has_under1 ? headroom_at_json(h, &h->under1) : json_null());
    json_t *lay = json_array();
    for (int l = 0; l < h->n_layers; l++)
        json_array_append_new(lay, isfinite(h->layer_max[l]) ? json_real(h->layer_max[l]) : json_null());
    json_object_set_new(j, "layer_absmax", lay);
    return j;
}

static void print_analysis(const bisect_opts *o, const bt_analysis *x, const bt_headroom *h, const char *numerics)
{
    bt_text_printf(stdout, "trace: %s (%d steps, %d tapped tensors, %d generated tokens)\n", o->trace, x->n_steps, x->n_tensors, x->n_gen);
    if (!bt_analysis_found(x)) {
        bt_text_printf(stdout, "%s: no non-finite tensor, no degenerate output%s\n",
                       o->unfinished ? "in the committed steps" : "clean", x->n_events ? "" : ", no events");
    }
    if (x->has_nonfinite) {
        const bt_bad_tensor *f = &x->first;
        char l[16];
        bt_layer_label(f->layer, l, sizeof(l));
        if (!strcmp(f->op, "ssm_state") && o->state_dk > 0 && f->pos >= 0)   /* rows of the state, not positions */
            bt_text_printf(stdout, "first non-finite: step %d, layer %s, op %s (%s), value head %d, row %d, column %d", f->step,
                           l, f->op, f->tensor, f->pos / o->state_dk, f->pos % o->state_dk, f->first_bad_index);
        else if (!strcmp(f->op, "ssm_conv_state") && f->pos >= 0)
            bt_text_printf(stdout, "first non-finite: step %d, layer %s, op %s (%s), kept input %d, channel %d", f->step, l,
                           f->op, f->tensor, f->pos, f->first_bad_index);
        else
            bt_text_printf(stdout, "first non-finite: step %d, position %d, layer %s, op %s (%s), index %d", f->step, f->pos, l,
                           f->op, f->tensor, f->first_bad_index);
        if (x->spec.present)
            bt_text_printf(stdout, ", %s's %s", !strcmp(f->model, "draft") ? "drafter" : f->model, pass_name(f->kind));
        bt_text_printf(stdout, ": ");
        bt_bad_tensor_print_counts(stdout, f);
        bt_text_printf(stdout, "\n");
        if (x->has_first_kernel) {
            char kb[400];
            bt_text_printf(stdout, "device kernel: %s (%d kernel%s in this op, the tap's reduction included)\n",
                           bt_kernel_row_format(&x->first_kernel, kb, sizeof(kb)), x->n_first_kernels,
                           x->n_first_kernels == 1 ? "" : "s");
        }
        bt_text_printf(stdout, "propagation:\n  %-6s %-6s %-22s %-9s %s\n", "step", "layer", "tensor", "how", "values");
        for (int i = 0; i < x->n_prop; i++) {
            const bt_prop_link *p = &x->prop[i];
            bt_layer_label(p->t.layer, l, sizeof(l));
            bt_text_printf(stdout, "  %-6d %-6s %-22s %-9s ", p->t.step, l, p->t.tensor, bt_prop_kind_name(p->kind));
            bt_bad_tensor_print_counts(stdout, &p->t);
            if (p->n_bad > 1) bt_text_printf(stdout, p->t.layer >= 0 ? " (%d bad tensors in this layer)" : " (%d bad tensors)", p->n_bad);
            if (p->kind == BT_PROP_KV_CACHE) bt_text_printf(stdout, " <- KV cache: this step's inputs to the layer were finite");
            if (p->kind == BT_PROP_RECUR) bt_text_printf(stdout, " <- the fault recurs");
            bt_text_printf(stdout, "\n");
        }
    }
    if (h) print_headroom(h, numerics);
    if (x->has_degenerate)
        bt_text_printf(stdout, "first degenerate output: step %d (%s): %s\n", x->degen_step, x->degen_kind, x->degen_detail);
    if (x->explanation[0]) bt_text_printf(stdout, "explanation: %s\n", x->explanation);
    if (x->spec.present) print_spec(x);
    if (x->n_events) {
        bt_text_printf(stdout, "events (%d):", x->n_events);
        for (int i = 0; i < x->n_event_kinds; i++) {
            bt_text_printf(stdout, " %s %d", x->events[i].kind, x->events[i].count);
            if (x->events[i].first_step >= 0) bt_text_printf(stdout, " (first at step %d)", x->events[i].first_step);
            bt_text_printf(stdout, i + 1 < x->n_event_kinds ? "," : "\n");
        }
    }
}

static json_t *bad_json(const bt_bad_tensor *t)
{
    json_t *j = json_object();
    json_object_set_new(j, "step", json_integer(t->step));
    json_object_set_new(j, "pos", json_integer(t->pos));
    json_object_set_new(j, "layer", t->layer < 0 ? json_null() : json_integer(t->layer));
    json_object_set_new(j, "op", json_string(t->op));
    json_object_set_new(j, "tensor", json_string(t->tensor));
    json_object_set_new(j, "first_bad_index", json_integer(t->first_bad_index));
    json_object_set_new(j, "nan", json_integer(t->nan));
    json_object_set_new(j, "pinf", json_integer(t->pinf));
    json_object_set_new(j, "ninf", json_integer(t->ninf));
    json_object_set_new(j, "n", json_integer(t->n));
    json_object_set_new(j, "model", json_string(t->model[0] ? t->model : "target"));
    json_object_set_new(j, "pass", t->kind[0] ? json_string(t->kind) : json_null());
    return j;
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *spec_json(const bt_analysis *x)
{
    const bt_spec_analysis *s = &x->spec;
    json_t *j = json_object();
    json_object_set_new(j, "drafter", s->drafter[0] ? json_string(s->drafter) : json_null());
    json_object_set_new(j, "k", s->k > 0 ? json_integer(s->k) : json_null());
    json_object_set_new(j, "verify_steps", json_integer(s->verify_steps));
    json_object_set_new(j, "draft_steps", json_integer(s->draft_steps));
    json_object_set_new(j, "decode_steps", json_integer(s->decode_steps));
    json_object_set_new(j, "drafted", json_integer(s->drafted));
    json_object_set_new(j, "accepted", json_integer(s->accepted));
    json_object_set_new(j, "acceptance_rate", real_or_null(s->acceptance));
    json_t *w = json_array();
    for (int i = 0; i < s->n_windows; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "first_step", json_integer(s->windows[i].first_step));
        json_object_set_new(e, "last_step", json_integer(s->windows[i].last_step));
        json_object_set_new(e, "verify_steps", json_integer(s->windows[i].n_verify));
        json_object_set_new(e, "drafted", json_integer(s->windows[i].drafted));
        json_object_set_new(e, "accepted", json_integer(s->windows[i].accepted));
        json_object_set_new(e, "rate", s->windows[i].drafted ? json_real((double)s->windows[i].accepted / s->windows[i].drafted) : json_null());
        json_array_append_new(w, e);
    }
    json_object_set_new(j, "window", json_integer(BT_SPEC_WINDOW));
    json_object_set_new(j, "acceptance_windows", w);
    json_object_set_new(j, "first_nonfinite_model", s->first_model[0] ? json_string(s->first_model) : json_null());
    json_object_set_new(j, "first_nonfinite_pass", s->first_kind[0] ? json_string(s->first_kind) : json_null());
    json_object_set_new(j, "target_nonfinite_step", s->target_bad_step >= 0 ? json_integer(s->target_bad_step) : json_null());
    json_object_set_new(j, "target_nonfinite_tensor", s->target_bad_tensor[0] ? json_string(s->target_bad_tensor) : json_null());
    json_object_set_new(j, "nonfinite_drafts", json_integer(s->nonfinite_drafts));
    json_object_set_new(j, "nonfinite_drafts_accepted", json_integer(s->nonfinite_drafts_accepted));
    json_object_set_new(j, "output_clean", json_boolean(s->output_clean));
    json_t *a = json_object();
    json_object_set_new(a, "tensor", s->target_bad_tensor[0] ? json_string(s->target_bad_tensor) : json_null());
    json_object_set_new(a, "until_step", json_integer(s->amp_until));
    json_object_set_new(a, "in_prefill", json_boolean(s->amp_in_prefill));
    json_object_set_new(a, "target_forwards", json_integer(s->amp_forwards));
    json_object_set_new(a, "target_positions", json_integer(s->amp_positions));
    json_object_set_new(a, "emitted_tokens", json_integer(s->amp_emitted));
    json_object_set_new(a, "plain_forwards", json_integer(s->amp_emitted));
    json_object_set_new(a, "plain_positions", json_integer(s->amp_emitted));
    json_object_set_new(a, "positions_per_token", real_or_null(s->amp_ratio));
    json_object_set_new(a, "ratio", real_or_null(s->amp_ratio));
    json_object_set_new(a, "partial_window", json_boolean(s->partial));
    json_object_set_new(a, "draft_positions", s->amp_draft_positions >= 0 ? json_integer(s->amp_draft_positions) : json_null());
    json_object_set_new(j, "amplification", a);
    json_t *ev = json_object(), *e;
    e = json_object();
    json_object_set_new(e, "count", json_integer(s->n_post_stop));
    json_object_set_new(e, "first_step", s->post_stop_step >= 0 ? json_integer(s->post_stop_step) : json_null());
    json_object_set_new(e, "detail", s->n_post_stop ? json_string(s->post_stop_detail) : json_null());
    json_object_set_new(ev, "post_stop_draft", e);
    e = json_object();
    json_object_set_new(e, "count", json_integer(s->n_accept_collapse));
    json_object_set_new(e, "first_step", s->accept_collapse_step >= 0 ? json_integer(s->accept_collapse_step) : json_null());
    json_object_set_new(e, "detail", s->n_accept_collapse ? json_string(s->accept_collapse_detail) : json_null());
    json_object_set_new(ev, "accept_collapse", e);
    json_object_set_new(j, "events", ev);
    return j;
}

static json_t *analysis_json(const bisect_opts *o, const bt_analysis *x)
{
    json_t *j = json_object();
    json_object_set_new(j, "trace", json_string(o->trace));
    json_object_set_new(j, "steps", json_integer(x->n_steps));
    json_object_set_new(j, "tensors", json_integer(x->n_tensors));
    json_object_set_new(j, "generated", json_integer(x->n_gen));
    json_object_set_new(j, "found", json_boolean(bt_analysis_found(x)));
    json_t *fj = x->has_nonfinite ? bad_json(&x->first) : json_null();
    if (x->has_nonfinite && !strcmp(x->first.op, "ssm_state") && o->state_dk > 0 && x->first.pos >= 0)
        json_object_set_new(fj, "state", json_pack("{s:i,s:i,s:i}", "head", x->first.pos / o->state_dk, "row",
                                                   x->first.pos % o->state_dk, "column", x->first.first_bad_index));
    if (x->has_nonfinite) {
        /* the device kernel that wrote it (a --cupti trace), else null */
        json_object_set_new(fj, "kernel", x->has_first_kernel ? json_string(x->first_kernel.name) : json_null());
        if (x->has_first_kernel) {
            const bt_kernel_row *k = &x->first_kernel;
            json_object_set_new(fj, "kernel_launch", json_pack("{s:[i,i,i], s:[i,i,i], s:I, s:I, s:I, s:I, s:i}",
                "grid", k->grid[0], k->grid[1], k->grid[2], "block", k->block[0], k->block[1], k->block[2],
                "start_ns", (json_int_t)k->start_ns, "end_ns", (json_int_t)k->end_ns, "stream", (json_int_t)k->stream,
                "device", (json_int_t)k->device, "kernels_in_op", x->n_first_kernels));
        }
    }
    json_object_set_new(j, "first_nonfinite", fj);
    json_t *prop = json_array();
    for (int i = 0; i < x->n_prop; i++) {
        json_t *p = bad_json(&x->prop[i].t);
        json_object_set_new(p, "kind", json_string(bt_prop_kind_name(x->prop[i].kind)));
        json_object_set_new(p, "bad_in_layer", json_integer(x->prop[i].n_bad));
        json_array_append_new(prop, p);
    }
    json_object_set_new(j, "propagation", prop);
    json_object_set_new(j, "first_degenerate_step", x->has_degenerate ? json_integer(x->degen_step) : json_null());
    if (x->has_degenerate) {
        json_t *d = json_object();
        json_object_set_new(d, "step", json_integer(x->degen_step));
        json_object_set_new(d, "pos", json_integer(x->degen_pos));
        json_object_set_new(d, "kind", json_string(x->degen_kind));
        json_object_set_new(d, "detail", json_string(x->degen_detail));
        json_object_set_new(j, "degenerate", d);
    } else json_object_set_new(j, "degenerate", json_null());
    json_object_set_new(j, "explanation", x->explanation[0] ? json_string(x->explanation) : json_null());
    json_t *ev = json_object(), *by = json_object();
    json_object_set_new(ev, "total", json_integer(x->n_events));
    for (int i = 0; i < x->n_event_kinds; i++) {
        json_t *k = json_object();
        json_object_set_new(k, "count", json_integer(x->events[i].count));
        json_object_set_new(k, "first_step", x->events[i].first_step < 0 ? json_null() : json_integer(x->events[i].first_step));
        json_object_set_new(by, x->events[i].kind, k);
    }
    json_object_set_new(ev, "by_kind", by);
    json_object_set_new(j, "events", ev);
    json_object_set_new(j, "speculation", x->spec.present ? spec_json(x) : json_null());
    return j;
}

static int print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    if (!s) return bt_error(BT_ENOMEM, "out of memory");
    puts(s);
    free(s);
    return BT_OK;
}

/* ---- teacher-forced reference replay (src/run/replay.c) ---- */

static void position_str(const bt_replay_divergence *d, char *buf, size_t cap)
{
    if (d->n_pos == 1) snprintf(buf, cap, "position %d", d->pos0);
    else snprintf(buf, cap, "positions %d-%d", d->pos0, d->pos0 + d->n_pos - 1);
}

/* The two sides a divergence names: the trace and the reference, or with
 * --against the replays under profile A and profile B. */
static const char *side_a = "in the trace", *side_b = "in the reference";

static void print_divergence(const bt_replay_divergence *d, const bt_trace_tensor_row *tens, int n_tens, const char *prefix)
{
    const bt_trace_tensor_row *t = &tens[d->slot];
    char pos[64], l[16];
    position_str(d, pos, sizeof(pos));
    bt_layer_label(t->layer, l, sizeof(l));
    bt_text_printf(stdout, "%sstep %d (%s, %s), layer %s, op %s (%s): ", prefix, d->step, d->kind, pos, l, t->op, t->name);
    if (!strcmp(d->field, "nonfinite"))
        bt_text_printf(stdout, "%.0f non-finite values %s, %.0f %s", d->tv, side_a, d->rv, side_b);
    else if (d->rv != 0 && isfinite(d->tv) && isfinite(d->rv))
        bt_text_printf(stdout, "%s %.6g %s vs %.6g %s (x%.3g)", d->field, d->tv, side_a, d->rv, side_b, d->tv / d->rv);
    else
        bt_text_printf(stdout, "%s %.6g %s vs %.6g %s", d->field, d->tv, side_a, d->rv, side_b);
    bt_text_printf(stdout, "; %d of %d tensors diverge at this step\n", d->n_div, n_tens);
}

static json_t *divergence_json(const bt_replay_divergence *d, const bt_trace_tensor_row *tens)
{
    const bt_trace_tensor_row *t = &tens[d->slot];
    json_t *j = json_object();
    json_object_set_new(j, "step", json_integer(d->step));
    json_object_set_new(j, "kind", json_string(d->kind));
    json_object_set_new(j, "pos", json_integer(d->pos0 + d->n_pos - 1));
    json_object_set_new(j, "pos0", json_integer(d->pos0));
    json_object_set_new(j, "n_pos", json_integer(d->n_pos));
    json_object_set_new(j, "layer", t->layer < 0 ? json_null() : json_integer(t->layer));
    json_object_set_new(j, "op", json_string(t->op));
    json_object_set_new(j, "tensor", json_string(t->name));
    json_object_set_new(j, "field", json_string(d->field));
    json_object_set_new(j, "trace", isfinite(d->tv) ? json_real(d->tv) : json_null());
    json_object_set_new(j, "reference", isfinite(d->rv) ? json_real(d->rv) : json_null());
    json_object_set_new(j, "diverging_tensors", json_integer(d->n_div));
    return j;
}

/* The replay's progress line on stderr: a terminal gets one line redrawn
 * twice a second, a pipe a line every ten seconds. */
typedef struct progress { double last; bool tty, shown; } progress;

static void show_progress(void *user, int i, int n)
{
    progress *p = user;
    double now = bt_now();
    if (now - p->last <= (p->tty ? 0.5 : 10.0)) return;
    p->last = now;
    p->shown = true;
    if (p->tty) fprintf(stderr, "\rbisect --reference: step %d/%d", i, n);
    else fprintf(stderr, "bisect --reference: step %d/%d\n", i, n);
}

/* Another engine's trace (llama.cpp, or one recorded through libbangtrace)
 * against the exact engine: the relative error of each tapped tensor up to
 * where that engine departs (beyond the tolerance, the one bt_tap_compare
 * rule), a one-line verdict (naming llama.cpp's kernel), and the
 * teacher-forced top-1 agreement. doc/llama-cpp.md, doc/pytorch.md. */
static void print_cross(const bt_replay_result *res, const bt_trace_tensor_row *tens, int n_tens, double tol, const char *engine,
                        const char *path)
{
    bool llama = !strcmp(engine, "llama.cpp");
    bt_text_printf(stdout, "cross-engine: %s trace replayed on the native f32 engine (the same %s, the same ids)\n", engine,
                   llama ? "GGUF" : "model");
    bt_text_printf(stdout, "relative error per op and layer, up to the departure (max over steps; '.' not compared):\n");
    int n_layers = 0;
    for (int i = 0; i < n_tens; i++) n_layers = BT_MAX(n_layers, tens[i].layer + 1);
    /* columns: the ops the trace has (the architecture's), in forward order */
    bool has_op[BT_OP_COUNT] = { false };
    for (int i = 0; i < n_tens; i++) {
        int op = bt_replay_tensor_op(&tens[i], true);
        if (op >= 0) has_op[op] = true;
    }
    bt_text_printf(stdout, "  layer");
    for (int op = 0; op < BT_OP_COUNT; op++)
        if (has_op[op]) bt_text_printf(stdout, " %7s", bt_op_abbrev(op));
    bt_text_printf(stdout, "\n");
    for (int l = -1; l < n_layers; l++) {
        bool any = false;
        char line[BT_OP_COUNT * 8 + 16], *p = line;
        if (l < 0) p += sprintf(p, "  %5s", "-");
        else p += sprintf(p, "  %5d", l);
        for (int op = 0; op < BT_OP_COUNT; op++) {
            if (!has_op[op]) continue;
            double v = -1;
            for (int i = 0; i < n_tens; i++)
                if (tens[i].layer == l && bt_replay_tensor_op(&tens[i], true) == op && res->slot_rel[i] > 0) v = res->slot_rel[i];
            if (v >= 0) { p += sprintf(p, " %7.1e", v); any = true; }
            else p += sprintf(p, " %7s", ".");
        }
        if (any) bt_text_printf(stdout, "%s\n", line);
    }
    if (res->found) {
        const bt_trace_tensor_row *t = &tens[res->first.slot];
        int op = bt_op_from_name(t->op);
        char kern[160] = "";
        if (llama) bt_llamacpp_kernel_guess_path(op, res->wtype, path, kern, sizeof(kern));
        else snprintf(kern, sizeof kern, "the module that computes %s", t->name);
        bt_text_printf(stdout, "verdict: %s first departs at %s, step %d (rel. err %.1e vs <= %.1e before; tolerance %g): %s\n",
                       engine, t->name, res->first.step, res->slot_rel[res->first.slot] > 0 ? res->slot_rel[res->first.slot] : INFINITY,
                       res->before_rel, tol, kern);
    } else {
        bt_text_printf(stdout, "verdict: %s stays within %g of the exact engine on every compared tensor (largest %.1e)\n",
                       engine, tol, res->max_rel);
    }
    if (res->top1_n)
        bt_text_printf(stdout, "teacher-forced top-1 agreement: %d of %d steps (%.1f%%)\n", res->top1_agree, res->top1_n,
                       100.0 * res->top1_agree / res->top1_n);
}

/* The last --inject norollback before a step: a rejection whose drafts
 * stayed in a hybrid model's recurrent state. */
typedef struct norb { int before, step; char detail[256]; } norb;
static int norb_cb(void *user, const bt_trace_event_row *ev)
{
    norb *n = user;
    if (ev->step >= 0 && ev->step < n->before && ev->step > n->step) {
        n->step = ev->step;
        snprintf(n->detail, sizeof n->detail, "%s", ev->detail ? ev->detail : "");
    }
    return 0;
}

/* A recorded request's recurrent-state slot (the vLLM plugin's state_slot
 * events: "vLLM mamba cache slot N (request ID)"); -1: none. */
static int slot_cb(void *user, const bt_trace_event_row *ev)
{
    const char *p = ev->detail ? strstr(ev->detail, "slot ") : NULL;
    if (p && sscanf(p + 5, "%d", (int *)user) == 1) return 1;    /* the first one */
    return 0;
}
static int state_slot_of(bt_trace_reader *r)
{
    int slot = -1;
    return bt_trace_events_each(r, "state_slot", slot_cb, &slot) < 0 ? -1 : slot;
}

/* The other traces of the trace's folder whose requests used the same
 * state slot and started no later (a state not reset when the slot was
 * reused comes from one of them): "ID (FILE, started T)" each, into buf. */
static void slot_sharers(const char *trace, bt_trace_reader *r, int slot, char *buf, size_t cap)
{
    buf[0] = 0;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", trace);
    char *sl = strrchr(dir, '/');
    const char *base = sl ? sl + 1 : trace;
    if (sl) *sl = 0; else snprintf(dir, sizeof dir, ".");
    const char *mine = bt_trace_meta_get(r, "started_at");
    DIR *d = opendir(dir);
    if (!d) return;
    size_t len = 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 8) {
        size_t nl = strlen(de->d_name);
        if (nl < 4 || strcmp(de->d_name + nl - 3, ".db") || !strcmp(de->d_name, base)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        bt_trace_reader *o = NULL;
        if (bt_trace_open(path, &o)) continue;     /* not a trace: passed over */
        const char *st = bt_trace_meta_get(o, "started_at"), *id = bt_trace_meta_get(o, "request_id");
        if (state_slot_of(o) == slot && st && (!mine || strcmp(st, mine) <= 0)) {
            int w = snprintf(buf + len, cap - len, "%s%s (%s, started %s)", n ? "; " : "", id ? id : "?", path, st);
            if (w > 0 && (size_t)w < cap - len) len += (size_t)w;
            n++;
        }
        bt_trace_reader_close(o);
    }
    closedir(d);
}

static int cmd_reference(const bisect_opts *o, bt_trace_reader *r)
{
    int status = 2;
    bt_replay_result res;
    double t0 = bt_now();
    progress pg = { .last = t0, .tty = isatty(2) };
    bt_replay_cfg cfg = { .name = o->trace, .who = "bisect", .model = o->g.model, .tokenizer = o->g.tokenizer, .tol = o->tol,
                          .threads = (int)o->g.threads, .device = o->g.device, .device_tol = o->g.device && !o->tol_given, .tol_auto = !o->tol_given, .all = o->all, .progress = show_progress, .user = &pg,
                          .numerics = o->g.numerics_spec ? &o->g.numerics : NULL, .against = o->num_b ? &o->prof_b : NULL };
    int rc = bt_replay_run(r, &cfg, &res);
    if (pg.shown && pg.tty) fprintf(stderr, "\r%60s\r", "");
    if (rc) goto out;
    bt_debug("bisect --reference: %d steps in %.2f s", res.steps_compared, bt_now() - t0);
    const bt_trace_tensor_row *tens = res.tens;
    int n_tens = res.n_tens;
    status = res.found ? 1 : 0;
    /* a batched server's request: the cached data behind the divergence */
    bt_provenance pv;
    if (bt_provenance_get(r, res.found ? res.first.step : -1, -1, &pv)) { status = 2; goto out; }
    char suspect[800] = "";
    if (res.found && pv.contaminated) snprintf(suspect, sizeof suspect, "%s", pv.culprit);
    else if (res.found && res.first.step == 0 && pv.hits[0])
        snprintf(suspect, sizeof suspect, "step 0 read %s from the prefix cache: the first suspect for a divergence there",
                 pv.hits);
    norb nrb = { .before = res.found ? res.first.step : -1, .step = -1 };
    if (res.found && bt_trace_events_each(r, "norollback", norb_cb, &nrb) < 0) { status = 2; goto out; }
    if (o->json) {
        json_t *j = json_object(), *rj = json_object();
        json_object_set_new(j, "trace", json_string(o->trace));
        json_object_set_new(j, "found", json_boolean(res.found));
        json_object_set_new(rj, "model", json_string(res.model_path));
        json_object_set_new(rj, "sha256_verified", json_boolean(res.sha_checked));
        json_object_set_new(rj, "threads", json_integer(res.threads));
        json_object_set_new(rj, "tolerance", json_real(res.tol));
        if (res.tol_derived) {
            json_t *cd = json_pack("{s:s, s:s, s:f, s:i, s:I, s:i, s:i, s:i}",
                "trace_backend", res.trace_backend, "replay_backend", res.replay_backend, "tolerance", res.tol,
                "mant_bits", res.tol_bits, "k", (json_int_t)res.tol_k, "layers", res.tol_layers,
                "top1_agree", res.top1_agree, "top1_steps", res.top1_n);
            /* teacher-forced: the reference's argmax == the token the traced run chose */
            json_object_set_new(cd, "top1_agreement", res.top1_n ? json_real((double)res.top1_agree / res.top1_n) : json_null());
            json_object_set_new(cd, "logits_max_abs_diff", res.logits_rows ? json_real(res.logits_max_abs) : json_null());
            json_object_set_new(cd, "logits_rows", json_integer(res.logits_rows));
            json_object_set_new(rj, "cross_device", cd);
        }
        json_object_set_new(rj, "steps", json_integer(res.steps_total));
        json_object_set_new(rj, "steps_compared", json_integer(res.steps_compared));
        json_object_set_new(rj, "speculative", json_boolean(bt_trace_has_spec(r)));
        json_object_set_new(rj, "verify_steps", json_integer(res.verify_steps));
        json_object_set_new(rj, "draft_steps_skipped", json_integer(res.draft_steps_skipped));
        json_object_set_new(rj, "tensors", json_integer(n_tens));
        json_object_set_new(rj, "max_rel_diff", json_real(res.max_rel));
        json_object_set_new(rj, "divergence", res.found ? divergence_json(&res.first, tens) : json_null());
        char nb[256];
        bt_numerics_format(&o->g.numerics, nb, sizeof(nb));
        json_object_set_new(rj, "numerics", json_string(nb));
        if (o->num_b) {
            bt_numerics_format(&o->prof_b, nb, sizeof(nb));
            json_object_set_new(rj, "against", json_string(nb));
            json_t *ob = res.one_bad ? divergence_json(&res.one, tens) : json_null();
            if (res.one_bad) json_object_set_new(ob, "nonfinite_under", json_string(res.one_side));
            json_object_set_new(rj, "first_nonfinite_one_side", ob);
        }
        if (o->all) {
            json_t *arr = json_array();
            for (int i = 0; i < res.n_all; i++) json_array_append_new(arr, divergence_json(&res.all[i], tens));
            json_object_set_new(rj, "divergent_steps", arr);
        }
        if (res.cross)
            json_object_set_new(rj, "cross_engine", json_pack("{s:s,s:o,s:f,s:i,s:i}", "engine", engine_of(r),
                                "departs_at", res.found ? json_string(tens[res.first.slot].name) : json_null(),
                                "rel_before", res.before_rel, "top1_agree", res.top1_agree, "top1_steps", res.top1_n));
        json_object_set_new(rj, "prefix_cached_positions", json_integer(res.cached_positions));
        json_object_set_new(rj, "cache_provenance", suspect[0] ? json_string(suspect) : json_null());
        json_object_set_new(rj, "norollback", nrb.step >= 0 ? json_string(nrb.detail) : json_null());
        int jslot = res.found && !strncmp(tens[res.first.slot].op, "ssm_", 4) ? state_slot_of(r) : -1;
        if (jslot >= 0) {
            char who[2048];
            slot_sharers(o->trace, r, jslot, who, sizeof who);
            json_object_set_new(rj, "state_slot", json_pack("{s:i,s:s}", "slot", jslot, "earlier_requests", who));
        } else {
            json_object_set_new(rj, "state_slot", json_null());
        }
        json_object_set_new(j, "reference", rj);
        int rc = print_json(j);
        json_decref(j);
        if (rc) { status = 2; goto out; }
    } else {
        bt_text_printf(stdout, "trace: %s (%d steps, %d tapped tensors)\n", o->trace, res.steps_total, n_tens);
        char na[256], nb[256];
        bt_numerics_format(&o->g.numerics, na, sizeof(na));
        bt_numerics_format(&o->prof_b, nb, sizeof(nb));
        bool cpu = bt_device_is_cpu(o->g.device);
        bt_text_printf(stdout, "reference: %s (%s), %s %s, %d threads, no injection, tolerance %g\n", res.model_path,
               res.sha_checked ? "SHA-256 matches the trace" : "SHA-256 not verified", o->g.numerics_spec ? na : "f32",
               cpu ? "CPU" : o->g.device, res.threads, res.tol);
        if (res.tol_derived)
            bt_text_printf(stdout, "across %s: the trace ran on %s, the replay on %s; tolerance %g derived from the dtypes "
                           "(%d-bit mantissa, K = %ld, %d layers; %s)\n", res.cross && !o->g.device ? "engines" : "devices",
                           res.trace_backend[0] ? res.trace_backend : "?", res.replay_backend, res.tol, res.tol_bits, res.tol_k,
                           res.tol_layers, res.cross && !o->g.device ? "doc/pytorch.md" : "doc/cuda.md");
        if (res.tol_derived && res.top1_n)
            bt_text_printf(stdout, "teacher-forced top-1 agreement with the traced run: %d of %d steps (%.1f%%)%s\n",
                           res.top1_agree, res.top1_n, 100.0 * res.top1_agree / res.top1_n, "");
        if (res.tol_derived && res.logits_rows)
            bt_text_printf(stdout, "logits: largest absolute difference %.3g over %d full rows\n", res.logits_max_abs, res.logits_rows);
        if (o->num_b) { side_a = "under A"; side_b = "under B"; }
        if (o->num_b)
            bt_text_printf(stdout, "against: the same ids under %s (A = %s); the trace's own statistics are not used\n", nb, na);
        if (o->num_b && res.one_bad)
            print_divergence(&res.one, tens, n_tens, res.one_side[0] == 'A' ? "first non-finite under A only: " : "first non-finite under B only: ");
        else if (o->num_b) bt_text_printf(stdout, "no op is non-finite under one profile only\n");
        if (res.cached_steps)
            bt_text_printf(stdout, "prefix cache: %d position%s of %d step%s came from the batched server's prefix cache; the "
                           "reference computed them untapped first, then the step's own rows\n", res.cached_positions,
                           res.cached_positions == 1 ? "" : "s", res.cached_steps, res.cached_steps == 1 ? "" : "s");
        if (bt_trace_has_spec(r))
            bt_text_printf(stdout, "speculative trace: the target's %d verify steps replayed with the tokens they verified; %d draft passes not replayed\n",
                   res.verify_steps, res.draft_steps_skipped);
        if (res.found) {
            print_divergence(&res.first, tens, n_tens, "first divergence: ");
            if (suspect[0]) bt_text_printf(stdout, "cache provenance: %s\n", suspect);
            if (nrb.step >= 0)
                bt_text_printf(stdout, "state: the reference rolled the recurrent state back after each rejection; the trace "
                               "did not (%s)\n", nrb.detail);
            int slot = !strncmp(tens[res.first.slot].op, "ssm_", 4) ? state_slot_of(r) : -1;
            if (slot >= 0) {   /* a served request whose recurrent state departs: who held its slot before */
                char who[2048];
                slot_sharers(o->trace, r, slot, who, sizeof who);
                bt_text_printf(stdout, "state slot: this request's recurrent state lived in slot %d of the engine's cache; %s\n",
                               slot, who[0] ? "earlier requests in this folder that used it (a state not reset when the slot "
                               "was reused comes from one of them): " : "no other trace in this folder names it");
                if (who[0]) bt_text_printf(stdout, "  %s\n", who);
            }
            if (o->all) {
                bt_text_printf(stdout, "divergent steps (%d of %d compared):\n", res.n_all, res.steps_compared);
                for (int i = 0; i < res.n_all; i++) print_divergence(&res.all[i], tens, n_tens, "  ");
            } else if (!res.cross) bt_text_printf(stdout, "(stopped at the first divergence after %d steps; --all lists every divergent step)\n", res.steps_compared);
        }
        if (res.cross) print_cross(&res, tens, n_tens, res.tol, engine_of(r), llama_path_of(r));
        else if (!res.found) {
            bt_text_printf(stdout, "no divergence: %d steps x %d tensors match the reference within %g", res.steps_compared, n_tens, res.tol);
            if (res.max_rel > 0) bt_text_printf(stdout, " (largest relative difference %.3g at step %d, %s)", res.max_rel, res.max_rel_step, tens[res.max_rel_slot].name);
            bt_text_printf(stdout, "\n");
        }
    }
out:
    if (status == 2) bt_cmd_fail("bisect");
    bt_replay_result_clear(&res);
    return status;
}

int cmd_bisect(int argc, char **argv)
{
    bisect_opts o;
    bt_trace_reader *r = NULL;
    bt_analysis x;
    bt_headroom h;
    memset(&x, 0, sizeof(x));
    memset(&h, 0, sizeof(h));
    int status = 2;
    if (parse_args(argc, argv, &o)) return bt_cmd_fail("bisect");
    if (bt_trace_open(o.trace, &r) || bt_analyze_verify(o.trace)) { bt_trace_reader_close(r); return bt_cmd_fail("bisect"); }
    if (o.reference) {
        status = cmd_reference(&o, r);
        bt_trace_reader_close(r);
        return status;
    }
    if (bt_analyze(r, &x)) goto fail;
    if (bt_headroom_analyze(r, o.limit, &h)) goto fail;
    bt_run_state rs;
    if (bt_run_state_get(r, o.trace, &rs)) goto fail;
    /* a batched server's trace: whose cached data the finding read */
    bt_provenance pv;
    if (bt_provenance_get(r, x.has_nonfinite ? x.first.step : -1, x.has_nonfinite ? x.first.layer : -1, &pv)) goto fail;
    o.state_dk = state_rows_per_head(r);
    if (o.json) {
        json_t *j = analysis_json(&o, &x);
        json_object_set_new(j, "run_status", json_string(rs.status));
        json_object_set_new(j, "unfinished", rs.line[0] ? json_string(rs.line) : json_null());
        json_object_set_new(j, "last_committed_step", json_integer(rs.last_step));
        json_object_set_new(j, "numerics", json_string(numerics_of(r)));
        json_object_set_new(j, "headroom", headroom_json(&h));
        if (pv.n_rows) {
            json_t *lines = json_array();
            for (int i = 0; i < pv.n_lines; i++) json_array_append_new(lines, json_string(pv.lines[i]));
            json_object_set_new(j, "cache", json_pack("{s:i,s:s?,s:b,s:s?,s:o}", "prefix_hit_tokens", pv.hit_tokens, "prefix_hit",
                                                      pv.hits[0] ? pv.hits : NULL, "contaminated", pv.contaminated, "culprit",
                                                      pv.culprit[0] ? pv.culprit : NULL, "sources", lines));
        }
        int rc = print_json(j);
        json_decref(j);
        if (rc) goto fail;
    } else {
        if (rs.line[0]) printf("%s\n", rs.line);
        o.unfinished = rs.unfinished;
        print_analysis(&o, &x, &h, numerics_of(r));
        if (pv.hits[0]) bt_text_printf(stdout, "prefix cache: %s\n", pv.hits);
        if (pv.contaminated) bt_text_printf(stdout, "cache provenance: %s\n", pv.culprit);
    }
    /* an unfinished run is a finding: it never exits 0 as clean; nor is a
     * request that read another request's bad or misplaced cache data */
    status = bt_analysis_found(&x) || rs.unfinished || pv.contaminated ? 1 : 0;
    goto out;
fail:
    status = bt_cmd_fail("bisect");
out:
    bt_analysis_clear(&x);
    bt_headroom_clear(&h);
    bt_trace_reader_close(r);
    return status;
}
