/* pool.c - a fixed pool of persistent worker threads.
 *
 * Decode calls bt_pool_run about 200 times per token, so dispatch must cost
 * microseconds: a run bumps a generation counter that idle workers spin on
 * for a short while (1 ms: a traced decode step spends some 0.7 ms on the
 * caller recording between forwards, and a worker that slept there costs
 * a futex wake-up per token, slow on a virtual machine) before sleeping on
 * a futex; completion is a
 * countdown the caller spins on the same way. Sleepers are counted so the
 * fast path makes no system call. The caller is thread 0 and works too.
 *
 * Invariant: bt_pool_run is not reentrant and is called from one thread at
 * a time (the engine's thread). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "base/util.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define SPIN_NS 1000000L
#define MAX_THREADS 256

struct bt_pool {
    int n;
    pthread_t *th;
    void (*fn)(void *arg, int ith, int nth);
    void *arg;
    _Atomic int gen;        /* bumped once per run; workers wait for a change */
    _Atomic int pending;    /* workers still inside fn for this run */
    _Atomic int sleepers;   /* workers blocked (or about to block) on gen */
    _Atomic int waiter;     /* 1 while the caller is blocked on pending */
    _Atomic int stop;
#ifndef __linux__
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spin until *a != old or SPIN_NS passes; true if it changed. */
static bool spin_while_equal(_Atomic int *a, int old)
{
    long t0 = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(a, memory_order_acquire) != old)
            return true;
        cpu_relax();
        if ((i & 255) == 0) {
            /* Lets the thread we wait for run when cores are oversubscribed
             * (parallel test runs); costs ~0.3 us when they are not. */
            sched_yield();
            long t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                return false;
        }
    }
}

#ifdef __linux__
static void wait_on(bt_pool *p, _Atomic int *a, int old)
{
    (void)p;
    syscall(SYS_futex, (int *)a, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void wake_all(bt_pool *p, _Atomic int *a)
{
    (void)p;
    syscall(SYS_futex, (int *)a, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
/* Portable fallback: one condvar for both directions; the mutex orders the
 * value check against the broadcast. */
static void wait_on(bt_pool *p, _Atomic int *a, int old)
{
    pthread_mutex_lock(&p->mu);
    while (atomic_load(a) == old)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void wake_all(bt_pool *p, _Atomic int *a)
{
    (void)a;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}
#endif

struct worker_arg {
    bt_pool *p;
    int ith;
};

static void *worker(void *v)
{
    struct worker_arg wa = *(struct worker_arg *)v;
    bt_pool *p = wa.p;
    free(v);
    int seen = 0; /* gen's initial value: a run may start before we do */
    for (;;) {
        if (!spin_while_equal(&p->gen, seen)) {
            /* Dekker with the caller: sleepers++ then re-check gen in the
             * kernel; the caller bumps gen then reads sleepers. */
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen)
                wait_on(p, &p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load(&p->stop))
            return NULL;
        p->fn(p->arg, wa.ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiter))
            wake_all(p, &p->pending);
    }
}

int bt_pool_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > BT_POOL_DEFAULT_MAX ? BT_POOL_DEFAULT_MAX : (int)n;
}

bt_pool *bt_pool_new(int n_threads)
{
    if (n_threads == 0) n_threads = bt_pool_default_threads();   /* the one default */
    if (n_threads < 0 || n_threads > MAX_THREADS) {
        bt_error(BT_EINVAL, "thread pool: %d threads (want 1..%d)", n_threads, MAX_THREADS);
        return NULL;
    }
    bt_pool *p = calloc(1, sizeof(*p));
    if (!p || !(p->th = calloc((size_t)n_threads, sizeof(pthread_t)))) {
        free(p);
        bt_error(BT_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    p->n = 1;
#ifndef __linux__
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
#endif
    /* p->n counts the threads started so far (thread 0 is the caller), so a
     * failure midway frees exactly what exists. */
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        int rc = wa ? 0 : ENOMEM;
        if (wa) {
            wa->p = p;
            wa->ith = i;
            rc = pthread_create(&p->th[i], NULL, worker, wa);
            if (rc)
                free(wa);
        }
        if (rc) {
            bt_pool_free(p);
            bt_error(BT_ENOMEM, "thread pool: cannot start thread %d of %d (errno %d)", i, n_threads, rc);
            return NULL;
        }
        p->n = i + 1;
    }
    return p;
}

void bt_pool_free(bt_pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    wake_all(p, &p->gen);
    for (int i = 1; i < p->n; i++)
        pthread_join(p->th[i], NULL);
#ifndef __linux__
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
#endif
    free(p->th);
    free(p);
}

int bt_pool_threads(const bt_pool *p)
{
    return p ? p->n : 1;
}

void bt_pool_run(bt_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg)
{
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);          /* seq_cst: publishes fn/arg */
    if (atomic_load(&p->sleepers) > 0)
        wake_all(p, &p->gen);
    fn(arg, 0, p->n);
    int left;
    while ((left = atomic_load_explicit(&p->pending, memory_order_acquire)) != 0) {
        if (spin_while_equal(&p->pending, left))
            continue;
        /* Dekker with the last worker: waiter=1 then re-read pending; the
         * worker decrements pending then reads waiter. */
        atomic_store(&p->waiter, 1);
        while ((left = atomic_load(&p->pending)) != 0)
            wait_on(p, &p->pending, left);
        atomic_store(&p->waiter, 0);
    }
}
