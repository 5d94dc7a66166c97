/* target.c - send a request to a server (libcurl) or to the native engine
 * (see target.h). The reply is parsed the same way for both: OpenAI's
 * choices[0].text or choices[0].message.content, finish_reason, and, from
 * our own server, the generated ids (the "bangtrace" object), so the
 * classifier can judge ids where a server gives them. */
#include "prod/target.h"
#include "run/slot.h"
#include "engine/engine.h"
#include "model/model.h"
#include "gen/request.h"
#include "tap/inject.h"
#include "sys/crash.h"
#include "tokenizer/tokenizer.h"
#include "base/util.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct bt_target {
    bt_target_cfg cfg;
    char base[1024];
    bt_model *m;
    bt_tokenizer *tok;
    bt_gen **slots;
    pthread_mutex_t lock;
    unsigned long long counter;     /* native requests so far (injection draws) */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int bt_target_open(const bt_target_cfg *cfg, bt_target **out)
{
    bt_target *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ENOMEM, "out of memory");
    t->cfg = *cfg;
    if (t->cfg.slots < 1) t->cfg.slots = 1;
    pthread_mutex_init(&t->lock, NULL);
    int rc = BT_OK;
    if (cfg->url) {
        if (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)) {
            rc = bt_error(BT_EINVAL, "--url '%s' is not an http:// or https:// URL", cfg->url);
            goto fail;
        }
        size_t n = strlen(cfg->url);
        while (n && cfg->url[n - 1] == '/') n--;
        if (n >= 3 && !strncmp(cfg->url + n - 3, "/v1", 3)) n -= 3;
        if (n + 1 > sizeof t->base) { rc = bt_error(BT_EINVAL, "--url is too long"); goto fail; }
        memcpy(t->base, cfg->url, n);
        pthread_once(&curl_once, curl_init);
    } else {
        if ((rc = bt_model_load(cfg->model, cfg->tokenizer, &t->m))) goto fail;
        if (!t->m->has_vocab || !bt_model_has_weights(t->m)) {
            rc = bt_error(BT_EINVAL, "%s has no %s", cfg->model, t->m->has_vocab ? "weights" : "tokenizer (llama2.c: --tokenizer)");
            goto fail;
        }
        if ((rc = bt_tokenizer_new(&t->m->vocab, &t->tok))) goto fail;
        /* bit flips touch the shared weights: once, here, not per request */
        if (cfg->n_inject) {
            bt_injector *inj = bt_injector_new();
            if (!inj) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
            for (int i = 0; i < cfg->n_inject && rc == BT_OK; i++) rc = bt_injector_add(inj, cfg->inject[i]);
            if (rc == BT_OK) rc = bt_injector_apply_weights(inj, t->m);
            bt_injector_free(inj);
            if (rc) goto fail;
        }
        if (!(t->slots = calloc((size_t)t->cfg.slots, sizeof *t->slots))) { rc = bt_error(BT_ENOMEM, "out of memory"); goto fail; }
        bt_gen_cfg gc = { .model = t->m, .tok = t->tok, .model_path = cfg->model, .model_sha256 = "",
                          .ctx = cfg->ctx ? cfg->ctx : BT_MIN(t->m->cfg.ctx_len, BT_ENGINE_CTX_CAP),
                          .threads = cfg->threads > 0 ? cfg->threads : 1, .inject = cfg->inject, .n_inject = cfg->n_inject };
        if ((rc = bt_argmax_parse("first", &gc.rule))) goto fail;
        for (int i = 0; i < t->cfg.slots; i++) if ((rc = bt_gen_new(&gc, &t->slots[i]))) goto fail;
    }
    *out = t;
    return BT_OK;
fail:
    bt_target_close(t);
    return rc;
}

void bt_target_close(bt_target *t)
{
    if (!t) return;
    for (int i = 0; t->slots && i < t->cfg.slots; i++) bt_gen_free(t->slots[i]);
    free(t->slots);
    bt_tokenizer_free(t->tok);
    bt_model_free(t->m);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static bt_gen_cfg native_cfg(const bt_target *t)
{
    bt_gen_cfg gc = { .model = t->m, .tok = t->tok, .model_path = t->cfg.model, .model_sha256 = "",
                      .ctx = t->cfg.ctx ? t->cfg.ctx : BT_MIN(t->m->cfg.ctx_len, BT_ENGINE_CTX_CAP),
                      .threads = t->cfg.threads > 0 ? t->cfg.threads : 1 };
    return gc;
}

int bt_target_prompt_tokens(bt_target *t, const char *body, size_t len, int *n)
{
    if (!t->m) return bt_error(BT_EINVAL, "prompt tokens are known only for the native engine (--model)");
    bt_request req;
    int rc = bt_request_parse(body, len, "request", &req);
    if (rc) return rc;
    bt_gen_cfg gc = native_cfg(t);
    rc = bt_gen_prompt_tokens(&gc, &req, n);
    bt_request_clear(&req);
    return rc;
}

int bt_target_ctx(const bt_target *t)
{
    return t->m ? native_cfg(t).ctx : 0;
}

int bt_target_trained_ctx(const bt_target *t)
{
    return t->m ? t->m->cfg.ctx_len : 0;
}

void bt_reply_clear(bt_reply *r)
{
    free(r->text);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

bt_answer bt_reply_answer(const bt_reply *r, char *const *stop, int n_stop)
{
    bt_answer a = { .http_status = r->http_status, .text = r->text, .text_len = r->text_len, .ids = r->ids,
                    .n_ids = r->n_ids, .n_vocab = r->n_vocab, .finish_reason = r->finish[0] ? r->finish : NULL,
                    .stop = stop, .n_stop = n_stop, .n_nonfinite = r->n_nonfinite,
                    .nonfinite_detail = r->nonfinite[0] ? r->nonfinite : NULL };
    return a;
}

/* An answer body: an HTTP 200 whose body is not a completion is a failed
 * answer (status kept, error says why). */
void bt_reply_parse(bt_reply *r, const char *body, size_t len)
{
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    json_t *choice = j ? json_array_get(json_object_get(j, "choices"), 0) : NULL;
    if (r->http_status != 200) {
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        snprintf(r->error, sizeof r->error, "HTTP %d%s%s", r->http_status, msg ? ": " : "", msg ? msg : "");
        json_decref(j);
        return;
    }
    json_t *txt = json_object_get(choice, "text");
    if (!txt) txt = json_object_get(json_object_get(choice, "message"), "content");
    if (!json_is_string(txt)) {
        snprintf(r->error, sizeof r->error, "HTTP 200 but the body is not a completion (no choices[0].text or message.content)");
        r->http_status = 0;
        json_decref(j);
        return;
    }
    size_t n = json_string_length(txt);
    r->text = malloc(n + 1);
    if (r->text) { memcpy(r->text, json_string_value(txt), n); r->text[n] = 0; r->text_len = n; }
    const char *fin = json_string_value(json_object_get(choice, "finish_reason"));
    snprintf(r->finish, sizeof r->finish, "%s", fin ? fin : "");
    json_t *bt = json_object_get(j, "bangtrace"), *ids = json_object_get(bt, "completion_ids");
    if (json_is_array(ids) && json_array_size(ids) > 0 && (r->ids = malloc(json_array_size(ids) * sizeof(int32_t)))) {
        for (size_t i = 0; i < json_array_size(ids); i++) r->ids[i] = (int32_t)json_integer_value(json_array_get(ids, i));
        r->n_ids = (int)json_array_size(ids);
        r->n_vocab = (int)json_integer_value(json_object_get(bt, "n_vocab"));
    }
    /* our server's own detector events: non-finite ones fail the answer */
    json_t *evs = json_object_get(bt, "events"), *ev;
    size_t i;
    json_array_foreach(evs, i, ev) {
        const char *kind = json_string_value(json_object_get(ev, "kind"));
        if (!bt_event_is_nonfinite(kind)) continue;
        if (!r->n_nonfinite++) {
            const char *d = json_string_value(json_object_get(ev, "detail"));
            snprintf(r->nonfinite, sizeof r->nonfinite, "%s at step %d: %s", kind, (int)json_integer_value(json_object_get(ev, "step")),
                     d ? d : "");
        }
    }
    if (!r->n_nonfinite && json_is_true(json_object_get(bt, "nonfinite"))) {
        r->n_nonfinite = 1;
        snprintf(r->nonfinite, sizeof r->nonfinite, "the answer is marked nonfinite");
    }
    json_decref(j);
}

typedef struct buf { char *d; size_t n, cap; } buf;

static size_t on_body(char *p, size_t sz, size_t nm, void *u)
{
    buf *b = u;
    size_t n = sz * nm;
    if (b->n + n + 1 > b->cap) {
        size_t nc = BT_MAX(b->cap * 2, b->n + n + 4096);
        if (nc > (64u << 20)) return 0;            /* a 64 MiB answer is not a completion */
        char *nd = realloc(b->d, nc);
        if (!nd) return 0;
        b->d = nd; b->cap = nc;
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
    b->d[b->n] = 0;
    return n;
}

void bt_reply_header(bt_reply *r, const char *p, size_t n)
{
    if (n > 14 && !strncasecmp(p, "x-request-id:", 13)) {
        /* curl's header line is n bytes, not NUL-terminated: a value of
         * nothing but spaces must not walk past it */
        const char *v = p + 13;
        while (v < p + n && *v == ' ') v++;
        size_t l = (size_t)(p + n - v);
        while (l && (v[l - 1] == '\r' || v[l - 1] == '\n')) l--;
        snprintf(r->request_id, sizeof r->request_id, "%.*s", (int)l, v);
    }
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u)
{
    size_t n = sz * nm;
    bt_reply_header(u, p, n);
    return n;
}

/* A SIGINT/SIGTERM caught by bt_interrupt_install() (canary) ends a
 * request in flight instead of waiting out its timeout; commands that do
 * not install the handler never see a pending interrupt. */
static int on_progress(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)u; (void)dt; (void)dn; (void)ut; (void)un;
    return bt_interrupt_pending() != 0;
}

static int ask_url(bt_target *t, const char *body, size_t len, bool chat, bt_reply *r)
{
    char url[1100];
    snprintf(url, sizeof url, "%s/v1/%s", t->base, chat ? "chat/completions" : "completions");
    CURL *c = curl_easy_init();
    if (!c) return bt_error(BT_ENOMEM, "curl_easy_init failed");
    buf b = { 0 };
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(t->cfg.timeout_s * 1000));
    double t0 = bt_now();
    CURLcode cc = curl_easy_perform(c);
    r->ms = (bt_now() - t0) * 1e3;
    if (cc != CURLE_OK) {
        r->http_status = 0;
        snprintf(r->error, sizeof r->error, "%.300s: %s", url, curl_easy_strerror(cc));
    } else {
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        r->http_status = (int)code;
        bt_reply_parse(r, b.d ? b.d : "", b.n);
    }
    free(b.d);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return BT_OK;
}

static int ask_native(bt_target *t, int slot, const char *body, size_t len, bt_reply *r)
{
    bt_request req;
    double t0 = bt_now();
    if (bt_request_parse(body, len, "request", &req)) {
        r->http_status = 400;
        snprintf(r->error, sizeof r->error, "%s", bt_errmsg());
        return BT_OK;
    }
    pthread_mutex_lock(&t->lock);
    unsigned long long draw = ++t->counter;
    pthread_mutex_unlock(&t->lock);
    bt_gen_opts o = { .draw_seed = draw };
    bt_gen_result res;
    int rc = bt_gen_request(t->slots[slot], &req, &o, &res);
    r->ms = (bt_now() - t0) * 1e3;
    if (rc) {
        r->http_status = rc == BT_EINVAL || rc == BT_ERANGE ? 400 : 500;
        snprintf(r->error, sizeof r->error, "%s", bt_errmsg());
    } else {
        r->http_status = 200;
        r->text = res.text; r->text_len = res.text_len;
        r->ids = res.ids; r->n_ids = res.n_ids;
        r->n_vocab = t->m->cfg.n_vocab;
        snprintf(r->finish, sizeof r->finish, "%s", res.finish);
        r->n_nonfinite = res.n_nonfinite;
        if (res.first_nonfinite >= 0) {
            const bt_gen_event *e = &res.events[res.first_nonfinite];
            snprintf(r->nonfinite, sizeof r->nonfinite, "%s at step %d: %s", e->kind, e->step, e->detail);
        }
        res.text = NULL; res.ids = NULL;
    }
    bt_gen_result_clear(&res);
    bt_request_clear(&req);
    return BT_OK;
}

int bt_target_ask(bt_target *t, int slot, const char *body, size_t len, bt_reply *r)
{
    memset(r, 0, sizeof *r);
    if (slot < 0 || slot >= t->cfg.slots) return bt_error(BT_EINTERNAL, "slot %d of %d", slot, t->cfg.slots);
    json_error_t je;
    json_t *j = json_loadb(body, len, 0, &je);
    bool chat = j && json_object_get(j, "messages");
    json_decref(j);
    return t->cfg.url ? ask_url(t, body, len, chat, r) : ask_native(t, slot, body, len, r);
}
