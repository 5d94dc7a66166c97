/* session.c - model, tokenizer, engines, injector, trace and recorders from
 * one config (see session.h). Moved out of cmd_run.c so that run, bench,
 * the replay, the tests and a server build them the same way.
 *
 * Invariants: everything a session built is freed by bt_session_close,
 * whatever phase failed; borrowed models (cfg.share) are never freed here;
 * the trace is closed before the hooks go, so a signal between the two
 * finds either an open trace and its hook or neither. */
#include "session.h"
#include "run/run_meta.h"
#include "kernels/cpu/kernels.h"
#include "backend/backend.h"
#include "sys/crash.h"
#include "base/util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bt_session {
    bt_model *own_model, *own_draft;      /* NULL when borrowed */
    bt_tokenizer *own_tok;
    const bt_model *model, *draft_model;
    const bt_tokenizer *tok;
    bt_engine *e, *de;
    bt_injector *inj;
    bt_trace *trace;
    bt_recorder *rec, *drec;
    bt_gen_observer obs, dobs;  /* rec and drec as the decoder's observers */
    bool hooks;
    int ctx, threads;
    int spec_k, draft_self, draft_ngram;
    bool draft_mtp;
    char drafter_name[32];
    char sha_hex[65];
};

/* A separate draft model must speak the target's vocabulary token for
 * token, or its proposals mean nothing to the target. */
static int load_draft(const bt_session_cfg *cfg, const bt_model *m, bt_model **out)
{
    int rc = bt_model_load(cfg->draft_model, cfg->tokenizer, out);
    if (rc) return rc;
    const bt_model *d = *out;
    if (!bt_model_has_weights(d)) return bt_error(BT_EINVAL, "%s: the draft model has no weights", cfg->draft_model);
    if (!d->has_vocab || d->vocab.n_tokens != m->vocab.n_tokens || d->cfg.n_vocab != m->cfg.n_vocab)
        return bt_error(BT_EINVAL, "draft model %s has a vocabulary of %d tokens; the target has %d: they must be the same",
                        cfg->draft_model, d->has_vocab ? d->vocab.n_tokens : d->cfg.n_vocab, m->vocab.n_tokens);
    for (int i = 0; i < m->vocab.n_tokens; i++)
        if (d->vocab.len[i] != m->vocab.len[i] || memcmp(d->vocab.text[i], m->vocab.text[i], m->vocab.len[i]))
            return bt_error(BT_EINVAL, "draft model %s differs from the target's vocabulary at token %d: they must be the same",
                            cfg->draft_model, i);
    return BT_OK;
}

int bt_session_open(const bt_session_cfg *cfg, bt_session **out)
{
    bt_session *s = calloc(1, sizeof(*s));
    *out = s;
    if (!s) return bt_error(BT_ENOMEM, "out of memory");
    bt_kernels_init();
    if (cfg->share) {
        s->model = cfg->share->model;
        s->tok = cfg->share->tok;
        s->draft_model = cfg->share->draft_model;
    } else {
        int rc = bt_model_load(cfg->model, cfg->tokenizer, &s->own_model);
        if (rc) return rc;
        s->model = s->own_model;
    }
    const bt_model *m = s->model;
    if (cfg->need_vocab && !m->has_vocab)
        return bt_error(BT_EINVAL, "%s has no tokenizer%s", m->path,
                        !strcmp(m->format, "llama2c") ? ": pass the llama2.c tokenizer.bin with --tokenizer" : "");
    if (cfg->need_weights && !bt_model_has_weights(m))
        return bt_error(BT_EINVAL, "%s is a vocabulary-only file: it has no weights to run", m->path);
    if (!cfg->share) {
        int rc;
        if (m->has_vocab && (rc = bt_tokenizer_new(&m->vocab, &s->own_tok))) return rc;
        s->tok = s->own_tok;
    }
    s->ctx = cfg->ctx ? cfg->ctx : BT_MIN(m->cfg.ctx_len, BT_ENGINE_CTX_CAP);
    s->threads = cfg->threads ? cfg->threads : bt_pool_default_threads();
    return BT_OK;
}

int bt_session_start(bt_session *s, const bt_session_cfg *cfg)
{
    const bt_model *m = s->model;
    bt_model *wm = s->own_model;          /* weights a bitflip may rewrite */
    int rc;
    s->spec_k = cfg->spec_k;
    s->draft_self = cfg->draft_self;
    s->draft_ngram = cfg->draft_ngram;
    s->draft_mtp = cfg->draft_mtp;
    /* Hash before any bitflip injection: the mapping then differs from the file. */
    if (cfg->trace && cfg->meta) bt_sha256_hex(m->file_data, m->file_size, s->sha_hex);
    if (cfg->n_inject) {
        if (!(s->inj = bt_injector_new())) return bt_error(BT_ENOMEM, "out of memory");
        for (int i = 0; i < cfg->n_inject; i++)
            if ((rc = bt_injector_add(s->inj, cfg->inject[i]))) return rc;
        bt_injector_set_draw(s->inj, cfg->seed);   /* p=P specs: one draw per run, seeded by --seed */
        if (!wm) return bt_error(BT_EINVAL, "fault injection needs a session that owns its model (not shared)");
        const char *native_only = cfg->engine_new ? bt_injector_needs_native(s->inj) : NULL;
        if (native_only)
            return bt_error(BT_EINVAL, "--inject '%s' writes the native engine's own memory; it cannot apply to --engine llama.cpp",
                            native_only);
        if ((rc = bt_injector_apply_weights(s->inj, wm))) return rc;
    }
    int batch = cfg->max_batch > 0 ? cfg->max_batch : 1;
    bt_engine_opts to = { .ctx_len = s->ctx, .max_batch = batch, .n_threads = s->threads, .device = cfg->device };
    if (cfg->engine_new) rc = cfg->engine_new(cfg->engine_user, m, s->ctx, batch, s->threads, &s->e);
    else rc = bt_engine_new_opts(m, &to, &s->e);
    if (rc) return rc;
    if (cfg->numerics && (rc = bt_engine_set_numerics(s->e, cfg->numerics))) return rc;
    if (cfg->cupti && !cfg->trace)
        return bt_error(BT_EINVAL, "--cupti records device activity into the trace: give --trace OUT.db");
    if (cfg->cuda_graphs && (rc = bt_engine_enable(s->e, BT_BACKEND_GRAPHS))) return rc;
    if (cfg->cupti && (rc = bt_engine_enable(s->e, BT_BACKEND_ACTIVITY))) return rc;
    bt_backend_mem mem;
    bool have_mem = !cfg->engine_new && bt_backend_mem_info(bt_engine_backend(s->e), &mem) == BT_OK;
    if (have_mem)
        bt_debug("%s: weights %.1f MiB uploaded in %.1f ms; device memory %.1f of %.1f MiB in use",
                 bt_backend_name(bt_engine_backend(s->e)), mem.weight_bytes / 1048576.0, mem.upload_ns / 1e6,
                 mem.device_used / 1048576.0, mem.device_total / 1048576.0);
    if (cfg->draft_model && !s->draft_model) {
        if ((rc = load_draft(cfg, m, &s->own_draft))) return rc;
        s->draft_model = s->own_draft;
    }
    if (s->draft_model || cfg->draft_self || cfg->draft_mtp) {
        if (cfg->draft_self >= m->cfg.n_layers)
            return bt_error(BT_EINVAL, "--draft-self %d must be below the target's %d layers", cfg->draft_self, m->cfg.n_layers);
        if (cfg->draft_mtp && cfg->engine_new) {
            /* the foreign engine's own MTP path (llama.cpp's draft-mtp) */
            if (!cfg->draft_mtp_new)
                return bt_error(BT_EINVAL, "--draft-mtp runs the model's MTP block on the native engine beside it; "
                                "it cannot draft for this engine");
            if ((rc = cfg->draft_mtp_new(cfg->engine_user, s->e, &s->de))) return rc;
        } else {
            bt_engine_opts eo = { .ctx_len = s->ctx, .max_batch = batch, .n_layers = cfg->draft_self, .share_pool = s->e,
                                  .mtp = cfg->draft_mtp };
            if ((rc = bt_engine_new_opts(s->draft_model ? s->draft_model : m, &eo, &s->de))) return rc;
        }
        if (cfg->numerics && (rc = bt_engine_set_numerics(s->de, cfg->numerics))) return rc;   /* the drafter runs the same profile */
    }
    if (s->inj) {
        /* Refuse, before any work, a spec no run in this context can ever
         * match: a position past the context, a step past the most forwards
         * the context allows (a plain run makes one per token that fits;
         * speculation at most k draft forwards and one verify per emitted
         * token). A spec within the context that this run's -n or an early
         * stop never reaches could have matched: that is the warning and
         * the inject_unfired event at the end, not an error (a short probe
         * on an engine whose fault needs a long context stays runnable). */
        long k = cfg->draft_ngram ? 0 : cfg->spec_k, n_fit = BT_MAX((long)s->ctx - (long)cfg->n_prompt + 1, 1L);
        bt_inject_limits lim = { .target = &m->cfg, .draft = s->de ? &(s->draft_model ? s->draft_model : m)->cfg : NULL,
                                 .draft_layers = s->de ? bt_engine_n_layers(s->de) : 0,
                                 .max_pos = s->ctx,
                                 .max_step = (int)BT_MIN((long)INT_MAX, 1 + (n_fit - 1) * (k + 1)) };
        if ((rc = bt_injector_check(s->inj, &lim))) return rc;
    }
    if (s->draft_model) snprintf(s->drafter_name, sizeof(s->drafter_name), "model");
    else if (cfg->draft_self) snprintf(s->drafter_name, sizeof(s->drafter_name), "self:%d", cfg->draft_self);
    else if (cfg->draft_ngram) snprintf(s->drafter_name, sizeof(s->drafter_name), "ngram:%d", cfg->draft_ngram);
    else if (cfg->draft_mtp) snprintf(s->drafter_name, sizeof(s->drafter_name), "mtp");
    if (cfg->trace) {
        /* From here on an interrupt closes the trace properly (the caller
         * checks between steps); before, there was nothing to lose. */
        if (cfg->hooks) {
            if ((rc = bt_interrupt_install())) return rc;
            s->hooks = true;
        }
        if ((rc = bt_trace_create_opts(cfg->trace, cfg->force ? BT_TRACE_FORCE : 0, &s->trace))) return rc;
        if (cfg->meta && (rc = cfg->meta(cfg->meta_user, s->trace, s))) return rc;
        /* the session's own rows (run/run_meta.c owns every key) */
        if (cfg->spec_k && (rc = bt_run_meta_write_spec(s->trace, cfg->spec_k, s->drafter_name, s->draft_model, cfg->draft_model)))
            return rc;
        if (have_mem && (rc = bt_run_meta_write_mem(s->trace, (long long)mem.weight_bytes, mem.upload_ns / 1e6,
                                                    (long long)mem.device_used, (long long)mem.device_total))) return rc;
        if ((rc = bt_run_meta_write_cuda(s->trace, cfg->cuda_graphs, cfg->cupti))) return rc;
    }
    if (cfg->trace || s->inj) {
        bt_recorder_cfg rc_cfg = { .trace = s->trace, .inj = s->inj, .model = m, .tok = s->tok,
                                   .taps = cfg->trace ? cfg->taps : BT_TAPS_NONE,
                                   .layer_lo = cfg->layer_lo, .layer_hi = cfg->layer_hi, .no_state = cfg->no_state_taps,
                                   .logits_full = cfg->logits_full,
                                   .topk = cfg->topk ? cfg->topk : 20, .rule = cfg->rule, .model_role = "target",
                                   .timing = cfg->timing, .kernels = cfg->cupti && s->trace,
                                   .account = cfg->account };
        if ((rc = bt_recorder_new(&rc_cfg, s->e, &s->rec))) return rc;
        bt_recorder_observer(s->rec, &s->obs);
        if (cfg->prompt && (rc = bt_recorder_prompt(s->rec, cfg->prompt, cfg->n_prompt))) return rc;
        if (s->de) {
            rc_cfg.model = s->draft_model ? s->draft_model : m;
            rc_cfg.model_role = "draft";
            rc_cfg.kernels = false;   /* the target's recorder drains the shared backend's records */
            if ((rc = bt_recorder_new(&rc_cfg, s->de, &s->drec))) return rc;
            bt_recorder_observer(s->drec, &s->dobs);
        }
        if (s->trace && cfg->hooks) {
            static char note[600];
            snprintf(note, sizeof(note), "trace closed: %s", cfg->trace);
            bt_crash_set_note(note);
            bt_crash_install(bt_recorder_crash_hook, s->rec);
        }
    }
    return BT_OK;
}

int bt_session_new(const bt_session_cfg *cfg, bt_session **out)
{
    int rc = bt_session_open(cfg, out);
    return rc ? rc : bt_session_start(*out, cfg);
}

int bt_session_close_trace(bt_session *s, const char *status)
{
    if (!s || !s->trace) return BT_OK;
    if (!status) status = bt_trace_failed(s->trace) ? BT_TRACE_STATUS_IO_ERROR : BT_TRACE_STATUS_ERROR;
    int rc = bt_trace_close(s->trace, status);
    s->trace = NULL;
    return rc;
}

void bt_session_close(bt_session *s, const char *trace_status)
{
    if (!s) return;
    bt_session_close_trace(s, trace_status);
    if (s->hooks) {
        bt_crash_uninstall();
        bt_interrupt_uninstall();
    }
    bt_recorder_free(s->drec);
    bt_engine_free(s->de);
    bt_model_free(s->own_draft);
    bt_recorder_free(s->rec);
    bt_injector_free(s->inj);
    bt_engine_free(s->e);
    bt_tokenizer_free(s->own_tok);
    bt_model_free(s->own_model);
    free(s);
}

const bt_model *bt_session_model(const bt_session *s) { return s->model; }
const bt_model *bt_session_draft_model(const bt_session *s) { return s->draft_model; }
const bt_tokenizer *bt_session_tokenizer(const bt_session *s) { return s->tok; }
bt_engine *bt_session_engine(const bt_session *s) { return s->e; }
bt_engine *bt_session_draft_engine(const bt_session *s) { return s->de; }
const bt_injector *bt_session_injector(const bt_session *s) { return s->inj; }
bt_trace *bt_session_trace(const bt_session *s) { return s->trace; }
bt_recorder *bt_session_recorder(const bt_session *s) { return s->rec; }
int bt_session_ctx(const bt_session *s) { return s->ctx; }
int bt_session_threads(const bt_session *s) { return s->threads; }
const char *bt_session_drafter_name(const bt_session *s) { return s->drafter_name; }
const char *bt_session_model_sha256(const bt_session *s) { return s->sha_hex; }

void bt_session_decoder_cfg(const bt_session *s, bt_decoder_cfg *dc)
{
    dc->target = s->e;
    dc->target_obs = s->rec ? &s->obs : NULL;
    dc->inj = s->inj;
    dc->drafter = s->draft_model ? BT_DRAFT_MODEL : s->draft_self ? BT_DRAFT_SELF
                : s->draft_ngram ? BT_DRAFT_NGRAM : s->draft_mtp ? BT_DRAFT_MTP : BT_DRAFT_NONE;
    dc->k = s->spec_k;
    dc->ngram = s->draft_ngram;
    dc->drafter_name = s->drafter_name;
    dc->draft = s->de;
    dc->draft_obs = s->drec ? &s->dobs : NULL;
}

/* ---- llama.cpp's path (bt_llama_settings) ---- */

enum { LK_FA, LK_REPACK, LK_TYPE_K, LK_TYPE_V, LK_AMX, LK_KV };

static const char *llama_value(int key, const char *v)
{
    static const char *const fa[] = { "auto", "on", "off", NULL }, *const onoff[] = { "on", "off", NULL },
                             *const kv[] = { "f16", "f32", "bf16", "q8_0", NULL }, *const amx[] = { "auto", "off", NULL };
    const char *const *ok = key == LK_FA ? fa : key == LK_REPACK ? onoff : key == LK_AMX ? amx : kv;
    for (int i = 0; ok[i]; i++) if (!strcmp(v, ok[i])) return ok[i];
    /* 1/0 as the environment variable BT_LLAMA_EXTRA_BUFTS always took */
    if (key == LK_REPACK && (!strcmp(v, "1") || !strcmp(v, "0"))) return v[0] == '1' ? "on" : "off";
    return NULL;
}

static const char *llama_choices(int key)
{
    return key == LK_FA ? "auto, on or off" : key == LK_REPACK ? "on or off" : key == LK_AMX ? "auto or off"
                                                                                             : "f16, f32, bf16 or q8_0";
}

/* from: the flag or variable, for the message; flag: a flag (it wins over the environment) */
static int llama_set(bt_llama_settings *s, int key, const char *v, const char *from, bool flag)
{
    const char *c = llama_value(key, v);
    if (!c) return bt_error(BT_EINVAL, "%s '%s': use %s", from, v, llama_choices(key));
    int k0 = key == LK_KV ? LK_TYPE_K : key, k1 = key == LK_KV ? LK_TYPE_V : key;
    for (int k = k0; k <= k1; k++) {
        if (!flag && (s->set & (1u << k))) continue;
        const char **f = k == LK_FA ? &s->flash_attn : k == LK_REPACK ? &s->repack : k == LK_TYPE_K ? &s->type_k
                       : k == LK_TYPE_V ? &s->type_v : &s->amx;
        *f = c;
        if (flag) s->set |= 1u << k;
    }
    return BT_OK;
}

int bt_llama_flag(bt_llama_settings *s, const char *flag, const char *val, bool *taken)
{
    static const struct { const char *flag; int key; } flags[] = {
        { "--llama-flash-attn", LK_FA }, { "--llama-repack", LK_REPACK }, { "--llama-kv-type", LK_KV },
    };
    *taken = false;
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (!strcmp(flag, flags[i].flag)) {
            *taken = true;
            if (!val) return bt_error(BT_EINVAL, "%s needs a value (%s)", flag, llama_choices(flags[i].key));
            return llama_set(s, flags[i].key, val, flag, true);
        }
    if (strcmp(flag, "--llama-opt")) return BT_OK;
    *taken = true;
    if (!val) return bt_error(BT_EINVAL, "--llama-opt needs key=value (flash_attn, repack, kv_type, type_k, type_v, amx)");
    const char *eq = strchr(val, '=');
    char key[16];
    size_t n = eq ? (size_t)(eq - val) : 0;
    if (!eq || n == 0 || n >= sizeof(key))
        return bt_error(BT_EINVAL, "--llama-opt '%s': expected key=value (flash_attn, repack, kv_type, type_k, type_v, amx)", val);
    for (size_t i = 0; i < n; i++) key[i] = val[i] == '-' ? '_' : val[i];
    key[n] = 0;
    static const struct { const char *name; int key; } keys[] = {
        { "flash_attn", LK_FA }, { "repack", LK_REPACK }, { "kv_type", LK_KV }, { "type_k", LK_TYPE_K },
        { "type_v", LK_TYPE_V }, { "amx", LK_AMX },
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (!strcmp(key, keys[i].name)) {
            char from[40];
            snprintf(from, sizeof(from), "--llama-opt %s", keys[i].name);
            return llama_set(s, keys[i].key, eq + 1, from, true);
        }
    return bt_error(BT_EINVAL, "--llama-opt: unknown key '%s' (flash_attn, repack, kv_type, type_k, type_v, amx)", key);
}

int bt_llama_settings_env(bt_llama_settings *s)
{
    static const struct { const char *var; int key; } env[] = {
        { "BT_LLAMA_FLASH_ATTN", LK_FA }, { "BT_LLAMA_EXTRA_BUFTS", LK_REPACK }, { "BT_LLAMA_KV_TYPE", LK_KV },
    };
    for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
        const char *v = getenv(env[i].var);
        if (v && *v) {
            char from[40];
            snprintf(from, sizeof(from), "%s=", env[i].var);
            int rc = llama_set(s, env[i].key, v, from, false);
            if (rc) return bt_error(BT_EINVAL, "%s='%s': use %s", env[i].var, v, llama_choices(env[i].key));
        }
    }
    return BT_OK;
}

void bt_llama_settings_describe(const bt_llama_settings *s, char *buf, size_t cap)
{
    const char *k = s->type_k ? s->type_k : "f16", *v = s->type_v ? s->type_v : "f16";
    if (!strcmp(k, v))
        snprintf(buf, cap, "flash_attn=%s repack=%s kv=%s amx=%s", s->flash_attn ? s->flash_attn : "auto",
                 s->repack ? s->repack : "on", k, s->amx ? s->amx : "auto");
    else
        snprintf(buf, cap, "flash_attn=%s repack=%s type_k=%s type_v=%s amx=%s", s->flash_attn ? s->flash_attn : "auto",
                 s->repack ? s->repack : "on", k, v, s->amx ? s->amx : "auto");
}

bool bt_llama_settings_is_default(const bt_llama_settings *s)
{
    char a[128], b[128];
    bt_llama_settings d = { 0 };
    bt_llama_settings_describe(s, a, sizeof(a));
    bt_llama_settings_describe(&d, b, sizeof(b));
    return !strcmp(a, b);
}
