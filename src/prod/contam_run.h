/* contam_run.h - send a contamination plan (prod/contam.h) to a target
 * (prod/target.h): its units in order, a serial unit's requests one after
 * another on slot 0, a parallel unit's all at once (one thread and one
 * slot each; the target needs as many slots as the plan's highest level).
 * Binary-only, as target.c. */
#ifndef BT_PROD_CONTAM_RUN_H
#define BT_PROD_CONTAM_RUN_H

#include "prod/contam.h"
#include "prod/target.h"

/* Consecutive requests without any HTTP answer (connection refused, a
 * timeout) after which the server is taken to have gone away: an error,
 * not a contamination. */
#define BT_CONTAM_MAX_TRANSPORT_FAILS 8

typedef void (*bt_contam_progress_fn)(void *u, long done, long total);

/* Fill ans[0 .. p->n_reqs) (zeroed by the caller). tmpl (may be NULL) is
 * the request template of bt_contam_body; stop the stop strings answers
 * are classified with. Errors: a warm-up request without an answer (the
 * server's reply named), BT_CONTAM_MAX_TRANSPORT_FAILS transport failures
 * in a row, a body the template cannot make, out of memory. */
int bt_contam_run(bt_target *t, const bt_contam_plan *p, const char *tmpl, size_t tmpl_len, char *const *stop, int n_stop,
                  bt_contam_answer *ans, bt_contam_progress_fn progress, void *u);
void bt_contam_answers_free(bt_contam_answer *ans, long n);

#endif
