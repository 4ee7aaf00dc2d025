/* The server's engine side: one scheduler stepped by one thread, and a job per request that
 * carries its tokens from that thread to the connection waiting for them.
 *
 * Threads: lh_srv_core_* run on the main thread; lh_srv_job_* on the connection's own
 * thread (one thread per job), concurrently with each other and with the stepping thread. */
#ifndef LH_SRV_CORE_H
#define LH_SRV_CORE_H

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lh_srv_core lh_srv_core;
typedef struct lh_srv_job lh_srv_job;

/* One generated token as the connection reads it. */
typedef struct lh_srv_token {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[LH_MAX_TOP_LOGPROBS];
    float top_logprobs[LH_MAX_TOP_LOGPROBS];
} lh_srv_token;

/* A scheduler over e (borrowed; it must outlive the core) with options so, and its stepping
 * thread. *out is the caller's (lh_srv_core_stop). Errors: as lh_scheduler_create;
 * LH_E_NOMEM, LH_E_INTERNAL when the thread cannot start. */
lh_status lh_srv_core_start(lh_engine *e, const lh_scheduler_options *so, lh_srv_core **out,
                            lh_err *err);
/* Stops the thread once nothing is queued or running and frees the core. Jobs still held
 * must be released before. NULL: no-op. */
void lh_srv_core_stop(lh_srv_core *c);
/* Ends every request at the next step (LH_STOP_CANCELLED). [any thread] */
void lh_srv_core_cancel_all(lh_srv_core *c);
/* The scheduler's metrics. [any thread] */
void lh_srv_core_metrics(lh_srv_core *c, lh_scheduler_metrics *out);

/* Submits rq (its on_token and user are the job's own; the rest is read as
 * lh_scheduler_submit reads it). *out is the caller's (lh_srv_job_release).
 * Errors: as lh_scheduler_submit; LH_E_NOMEM. */
lh_status lh_srv_job_submit(lh_srv_core *c, const lh_request *rq, lh_srv_job **out,
                            lh_err *err);

/* What lh_srv_job_wait found. */
typedef struct lh_srv_job_news {
    size_t n;               /* tokens written to the caller's array */
    bool done;              /* the request ended (after these tokens) */
    lh_stop_reason why;     /* when done */
    bool failed;            /* done because an engine step failed: message says why */
    char message[256];
    int64_t cached_tokens;  /* prompt tokens taken from the prefix cache */
} lh_srv_job_news;

/* Waits up to timeout_ms for tokens the connection has not read yet (or the end), then moves
 * up to cap of them into out. Returns at once when some are there. */
void lh_srv_job_wait(lh_srv_job *j, int timeout_ms, lh_srv_token *out, size_t cap,
                     lh_srv_job_news *news);
/* Ends the request at the next step (a client that went away, a stop string in the text). */
void lh_srv_job_cancel(lh_srv_job *j);
/* The connection is done with j (cancelling it when it still runs). NULL: no-op. */
void lh_srv_job_release(lh_srv_job *j);

#endif
