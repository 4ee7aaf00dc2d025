/* The context's thread pool: persistent pthread workers. A job hands out chunks of [0, n)
 * through an atomic counter; the calling thread takes part and returns when every index is
 * done.
 *
 * Waiting: after a job a worker spins (with a pause instruction) for at most LH_POOL_SPIN_NS
 * watching for the next job, then sleeps on a condition variable; the caller likewise spins
 * that long for the workers to finish before sleeping. Back-to-back kernels (a decode step)
 * so hand over in about a microsecond instead of a futex wake-up each, while an idle pool
 * burns no CPU beyond that window. With more threads than online cores nobody spins. */
#include "cpu_kernels.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define LH_POOL_SPIN_NS 50000

struct lh_pool_worker {
    struct lh_pool *pool;
    int tid;
};

struct lh_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv_start;
    pthread_cond_t cv_done;
    int n_workers;
    int n_started;
    pthread_t *threads;
    struct lh_pool_worker *args;
    int64_t spin_ns;
    _Atomic uint64_t gen;  /* job number, bumped (release, under mu) when a job is posted */
    _Atomic bool stop;
    _Atomic int pending;   /* workers that have not finished the current job */
    /* the current job (written before gen is bumped) */
    lh_cpu_task_fn fn;
    void *user;
    int64_t n;
    int64_t chunk;
    const void *owner;
    _Atomic int64_t next;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spins until *gen != seen or stop, for at most spin_ns; returns the last gen read. */
static uint64_t spin_for_job(struct lh_pool *p, uint64_t seen)
{
    uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g != seen || p->spin_ns <= 0)
        return g;
    int64_t deadline = now_ns() + p->spin_ns;
    for (unsigned i = 1;; i++) {
        cpu_relax();
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
            return g;
        if ((i & 63) == 0 && now_ns() > deadline)
            return g;
    }
}

/* The context whose job this thread is executing, and its participant id. */
static _Thread_local const void *tls_owner;
static _Thread_local int tls_tid;

bool lh_cpu_in_task(const lh_kctx *ctx)
{
    return ctx && tls_owner == (const void *)ctx;
}

static void run_chunks(struct lh_pool *p, int tid)
{
    const int64_t n = p->n, chunk = p->chunk;
    lh_cpu_task_fn fn = p->fn;
    void *user = p->user;
    for (;;) {
        int64_t s = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
        if (s >= n)
            break;
        int64_t e = n - s < chunk ? n : s + chunk;
        for (int64_t i = s; i < e; i++)
            fn(i, tid, user);
    }
}

static void *worker_main(void *arg)
{
    struct lh_pool_worker *wk = arg;
    struct lh_pool *p = wk->pool;
    tls_tid = wk->tid;
    /* Jobs are numbered from 1; a worker that starts late still sees job 1 as new. */
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = spin_for_job(p, seen);
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while (!atomic_load(&p->stop) &&
                   (g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->cv_start, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            break;
        seen = g;

        tls_owner = p->owner;
        run_chunks(p, wk->tid);
        tls_owner = NULL;

        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu); /* the caller checks pending under mu before waiting */
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

lh_pool *lh_pool_create(int n_threads, char *err, size_t err_size)
{
    struct lh_pool *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    p->n_workers = n_threads - 1;
    p->threads = calloc((size_t)p->n_workers, sizeof *p->threads);
    p->args = calloc((size_t)p->n_workers, sizeof *p->args);
    if (!p->threads || !p->args) {
        free(p->threads);
        free(p->args);
        free(p);
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->pending, 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p->spin_ns = cores >= n_threads ? LH_POOL_SPIN_NS : 0;
    for (int i = 0; i < p->n_workers; i++) {
        p->args[i].pool = p;
        p->args[i].tid = i + 1; /* the caller is participant 0 */
        int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]);
        if (rc != 0) {
            snprintf(err, err_size, "cannot start worker thread %d of %d: %s", i + 1, p->n_workers,
                     strerror(rc));
            lh_pool_free(p);
            return NULL;
        }
        p->n_started++;
    }
    return p;
}

void lh_pool_free(lh_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p);
}

void lh_cpu_parallel(lh_kctx *ctx, int64_t n, lh_cpu_task_fn fn, void *user)
{
    if (n <= 0)
        return;
    /* Inline: no pool, a single index, or a nested call from inside one of ctx's tasks (the
     * workers are busy with the outer job; waiting for them would deadlock). */
    if (!ctx || !ctx->pool || n == 1 || lh_cpu_in_task(ctx)) {
        int tid = lh_cpu_in_task(ctx) ? tls_tid : 0;
        const void *saved = tls_owner;
        int saved_tid = tls_tid;
        tls_owner = ctx;
        tls_tid = tid;
        for (int64_t i = 0; i < n; i++)
            fn(i, tid, user);
        tls_owner = saved;
        tls_tid = saved_tid;
        return;
    }
    struct lh_pool *p = ctx->pool;
    int participants = p->n_workers + 1;
    int64_t chunk = n / ((int64_t)participants * 4);
    if (chunk < 1)
        chunk = 1;

    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->user = user;
    p->n = n;
    p->chunk = chunk;
    p->owner = ctx;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);

    const void *saved = tls_owner;
    int saved_tid = tls_tid;
    tls_owner = ctx;
    tls_tid = 0;
    run_chunks(p, 0);
    tls_owner = saved;
    tls_tid = saved_tid;

    if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && p->spin_ns > 0) {
        int64_t deadline = now_ns() + p->spin_ns;
        for (unsigned i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
            cpu_relax();
            if ((i & 63) == 0 && now_ns() > deadline)
                break;
        }
    }
    if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
