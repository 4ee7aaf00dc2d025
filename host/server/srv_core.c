#include "srv_core.h"

#include "core/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct lh_srv_job {
    lh_srv_core *core;
    uint64_t id;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                 /* the connection's, and the scheduler's until the last event */
    lh_srv_token *toks;       /* [head, n) not read yet */
    size_t head, n, cap;
    bool done, failed, cancelled, oom;
    lh_stop_reason why;
    int64_t cached;
    char message[256];
};

struct lh_srv_core {
    lh_scheduler *s;
    pthread_t thread;
    pthread_mutex_t mu; /* quit, and the wake-up of the stepping thread */
    pthread_cond_t work;
    bool quit;
    /* the stepping thread's: jobs whose request a failed step ended, to be told why */
    lh_srv_job **failed;
    size_t n_failed, cap_failed;
};

static void job_unref(lh_srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left)
        return;
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->toks);
    free(j);
}

/* The scheduler's token callback (on the stepping thread). */
static void on_token(void *user, const lh_token_event *ev)
{
    lh_srv_job *j = user;
    lh_srv_core *c = j->core;
    pthread_mutex_lock(&j->mu);
    j->cached = ev->cached_tokens;
    if (ev->token >= 0) {
        if (j->n == j->cap) {
            /* read tokens make room first; otherwise the queue grows */
            if (j->head > 0) {
                memmove(j->toks, j->toks + j->head, (j->n - j->head) * sizeof *j->toks);
                j->n -= j->head;
                j->head = 0;
            }
            if (j->n == j->cap) {
                const size_t cap = j->cap ? 2 * j->cap : 16;
                lh_srv_token *grown = realloc(j->toks, cap * sizeof *grown);
                if (grown) {
                    j->toks = grown;
                    j->cap = cap;
                }
            }
        }
        if (j->n < j->cap) {
            lh_srv_token *t = &j->toks[j->n++];
            t->id = ev->token;
            t->logprob = ev->logprob;
            t->n_top = ev->n_top;
            memcpy(t->top_ids, ev->top_ids, (size_t)ev->n_top * sizeof *t->top_ids);
            memcpy(t->top_logprobs, ev->top_logprobs, (size_t)ev->n_top * sizeof *t->top_logprobs);
        } else {
            /* a token lost is a response that would lie: end the request instead */
            j->oom = true;
        }
    }
    bool later = false;
    if (ev->last) {
        j->why = ev->why;
        if (ev->why == LH_STOP_CANCELLED && !j->cancelled) { /* a failed step ended it */
            if (c->n_failed == c->cap_failed) {
                const size_t cap = c->cap_failed ? 2 * c->cap_failed : 8;
                lh_srv_job **grown = realloc(c->failed, cap * sizeof *grown);
                if (grown) {
                    c->failed = grown;
                    c->cap_failed = cap;
                }
            }
            later = c->n_failed < c->cap_failed;
            if (later)
                c->failed[c->n_failed++] = j; /* keeps the scheduler's reference */
            j->failed = true;
            snprintf(j->message, sizeof j->message, "an engine step failed");
        }
        j->done = !later;
    }
    const bool oom = j->oom && !j->done && !j->cancelled;
    if (oom)
        j->cancelled = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (oom)
        lh_scheduler_cancel(c->s, j->id);
    if (ev->last && !later)
        job_unref(j);
}

static void *step_loop(void *arg)
{
    lh_srv_core *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->quit && !lh_scheduler_busy(c->s))
            pthread_cond_wait(&c->work, &c->mu);
        const bool quit = c->quit && !lh_scheduler_busy(c->s);
        pthread_mutex_unlock(&c->mu);
        if (quit)
            break;
        lh_err err = {0};
        if (lh_scheduler_step(c->s, NULL, &err) != LH_OK)
            fprintf(stderr, "llmhost serve: error [%s]: %s\n", lh_status_name(err.code),
                    err.msg);
        for (size_t i = 0; i < c->n_failed; i++) {
            lh_srv_job *j = c->failed[i];
            pthread_mutex_lock(&j->mu);
            snprintf(j->message, sizeof j->message, "the engine step failed: %.200s", err.msg);
            j->done = true;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
            job_unref(j);
        }
        c->n_failed = 0;
    }
    return NULL;
}

lh_status lh_srv_core_start(lh_engine *e, const lh_scheduler_options *so, lh_srv_core **out,
                            lh_err *err)
{
    *out = NULL;
    lh_srv_core *c = calloc(1, sizeof *c);
    if (!c)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    lh_status st = lh_scheduler_create(e, so, &c->s, err);
    if (st != LH_OK) {
        free(c);
        return st;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    const int rc = pthread_create(&c->thread, NULL, step_loop, c);
    if (rc != 0) {
        lh_scheduler_free(c->s);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->work);
        free(c);
        return lh_err_set(err, LH_E_INTERNAL, "cannot start the stepping thread: %s",
                          strerror(rc));
    }
    *out = c;
    return LH_OK;
}

void lh_srv_core_stop(lh_srv_core *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    lh_scheduler_free(c->s);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work);
    free(c->failed);
    free(c);
}

void lh_srv_core_metrics(lh_srv_core *c, lh_scheduler_metrics *out)
{
    lh_scheduler_metrics_get(c->s, out);
}

static void wake(lh_srv_core *c)
{
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
}

void lh_srv_core_cancel_all(lh_srv_core *c)
{
    /* ids are 1, 2, ... in submission order; those that ended are ignored */
    lh_scheduler_metrics m = {.struct_size = sizeof m};
    lh_scheduler_metrics_get(c->s, &m);
    for (int64_t id = 1; id <= m.submitted; id++)
        lh_scheduler_cancel(c->s, (uint64_t)id);
    wake(c);
}

lh_status lh_srv_job_submit(lh_srv_core *c, const lh_request *rq, lh_srv_job **out,
                            lh_err *err)
{
    *out = NULL;
    lh_srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    j->core = c;
    j->refs = 2;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    lh_request r = *rq;
    r.on_token = on_token;
    r.user = j;
    /* the callback can run before submit returns: the id is set under the job's lock */
    pthread_mutex_lock(&j->mu);
    lh_status st = lh_scheduler_submit(c->s, &r, &j->id, err);
    pthread_mutex_unlock(&j->mu);
    if (st != LH_OK) {
        j->refs = 1;
        job_unref(j);
        return st;
    }
    wake(c);
    *out = j;
    return LH_OK;
}

void lh_srv_job_wait(lh_srv_job *j, int timeout_ms, lh_srv_token *out, size_t cap,
                     lh_srv_job_news *news)
{
    memset(news, 0, sizeof *news);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    until.tv_sec += timeout_ms / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (j->head == j->n && !j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &until) == ETIMEDOUT)
            break;
    const size_t n = j->n - j->head < cap ? j->n - j->head : cap;
    if (n)
        memcpy(out, j->toks + j->head, n * sizeof *out);
    j->head += n;
    news->n = n;
    news->done = j->done && j->head == j->n;
    news->why = j->why;
    news->failed = j->failed || j->oom;
    news->cached_tokens = j->cached;
    snprintf(news->message, sizeof news->message, "%s",
             j->oom ? "out of memory for the request's tokens" : j->message);
    pthread_mutex_unlock(&j->mu);
}

void lh_srv_job_cancel(lh_srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    const bool go = !j->done && !j->cancelled;
    j->cancelled = true;
    pthread_mutex_unlock(&j->mu);
    if (go) {
        lh_scheduler_cancel(j->core->s, j->id);
        wake(j->core);
    }
}

void lh_srv_job_release(lh_srv_job *j)
{
    if (!j)
        return;
    lh_srv_job_cancel(j);
    job_unref(j);
}
