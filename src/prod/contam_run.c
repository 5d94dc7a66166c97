/* contam_run.c - send a contamination plan to a target (see contam_run.h). */
#include "prod/contam_run.h"
#include "base/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct runner {
    bt_target *t;
    const bt_contam_plan *p;
    const char *tmpl;
    size_t tmpl_len;
    char *const *stop;
    int n_stop;
    bt_contam_answer *ans;
    pthread_mutex_t lock;
    long order;                     /* requests sent so far */
} runner;

typedef struct job { runner *r; long req; int slot, rc, status; char msg[512]; } job;

static void ask_one(job *j)
{
    runner *r = j->r;
    bt_contam_answer *a = &r->ans[j->req];
    char *body = NULL;
    size_t len = 0;
    if ((j->rc = bt_contam_body(r->tmpl, r->tmpl_len, r->p->reqs[j->req].prompt, &body, &len))) {
        snprintf(j->msg, sizeof j->msg, "%s", bt_errmsg());
        return;
    }
    pthread_mutex_lock(&r->lock);
    a->order = r->order++;
    pthread_mutex_unlock(&r->lock);
    bt_reply rep;
    a->t0 = bt_now();
    j->rc = bt_target_ask(r->t, j->slot, body, len, &rep);
    a->t1 = bt_now();
    free(body);
    if (j->rc) { snprintf(j->msg, sizeof j->msg, "%s", bt_errmsg()); return; }
    a->sent = true;
    bt_answer in = bt_reply_answer(&rep, r->stop, r->n_stop);
    a->cls = bt_answer_classify(&in, NULL, NULL, 0);
    a->answered = rep.http_status == 200 && rep.text;
    if (a->answered) {
        a->text = rep.text; a->text_len = rep.text_len;
        rep.text = NULL;
    } else {
        a->cls = BT_ANS_HTTP_ERROR;
        snprintf(a->error, sizeof a->error, "%.150s", rep.error[0] ? rep.error : "no completion text");
    }
    j->status = rep.http_status;    /* 0: no HTTP answer at all */
    bt_reply_clear(&rep);
}

static void *thread_main(void *u)
{
    ask_one(u);
    return NULL;
}

int bt_contam_run(bt_target *t, const bt_contam_plan *p, const char *tmpl, size_t tmpl_len, char *const *stop, int n_stop,
                  bt_contam_answer *ans, bt_contam_progress_fn progress, void *u)
{
    runner r = { .t = t, .p = p, .tmpl = tmpl, .tmpl_len = tmpl_len, .stop = stop, .n_stop = n_stop, .ans = ans };
    pthread_mutex_init(&r.lock, NULL);
    int rc = BT_OK, max = 1;
    for (int l = 0; l < p->n_levels; l++) max = BT_MAX(max, p->levels[l]);
    job *jobs = calloc((size_t)max, sizeof *jobs);
    pthread_t *th = calloc((size_t)max, sizeof *th);
    if (!jobs || !th) { rc = bt_error(BT_ENOMEM, "out of memory"); goto done; }
    long done = 0, transport = 0;
    for (long ui = 0; ui < p->n_units && !rc; ui++) {
        const bt_contam_unit *un = &p->units[ui];
        if (!un->parallel) {
            for (int i = 0; i < un->count && !rc; i++) {
                jobs[0] = (job){ .r = &r, .req = un->first + i, .slot = 0 };
                ask_one(&jobs[0]);
                if (jobs[0].rc) { rc = bt_error(jobs[0].rc, "%s", jobs[0].msg); break; }
                if (un->arm == BT_CONTAM_ARM_WARMUP && !ans[un->first + i].answered) {
                    rc = bt_error(BT_EIO, "the server did not answer the first requests: %s", ans[un->first + i].error);
                    break;
                }
                transport = jobs[0].status == 0 ? transport + 1 : 0;
                if (transport >= BT_CONTAM_MAX_TRANSPORT_FAILS) {
                    rc = bt_error(BT_EIO, "the server stopped answering (%d requests in a row): %s", BT_CONTAM_MAX_TRANSPORT_FAILS,
                                  ans[un->first + i].error);
                    break;
                }
                if (progress) progress(u, ++done, p->n_reqs);
            }
            continue;
        }
        int started = 0;
        for (int i = 0; i < un->count; i++) {
            jobs[i] = (job){ .r = &r, .req = un->first + i, .slot = i };
            if (pthread_create(&th[i], NULL, thread_main, &jobs[i])) { rc = bt_error(BT_ENOMEM, "cannot start a thread"); break; }
            started++;
        }
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < started && !rc; i++) {
            if (jobs[i].rc) { rc = bt_error(jobs[i].rc, "%s", jobs[i].msg); break; }
            transport = jobs[i].status == 0 ? transport + 1 : 0;
            if (transport >= BT_CONTAM_MAX_TRANSPORT_FAILS) {
                rc = bt_error(BT_EIO, "the server stopped answering (%d requests in a row): %s", BT_CONTAM_MAX_TRANSPORT_FAILS,
                              ans[un->first + i].error);
                break;
            }
        }
        done += started;
        if (progress && !rc) progress(u, done, p->n_reqs);
    }
done:
    free(jobs);
    free(th);
    pthread_mutex_destroy(&r.lock);
    return rc;
}

void bt_contam_answers_free(bt_contam_answer *ans, long n)
{
    for (long i = 0; ans && i < n; i++) free(ans[i].text);
}
