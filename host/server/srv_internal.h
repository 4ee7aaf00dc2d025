/* Internal to the server: what the HTTP side (srv_http.c) and the completion handling
 * (srv_generate.c) share. */
#ifndef LH_SRV_INTERNAL_H
#define LH_SRV_INTERNAL_H

#include "server.h"
#include "srv_core.h"
#include "srv_error.h"
#include "srv_metrics.h"
#include "srv_request.h"
#include "srv_response.h"
#include "srv_text.h"

#include "core/strbuf.h"

#include <microhttpd.h>

#include <pthread.h>
#include <stdatomic.h>

typedef struct lh_srv {
    lh_engine *e;
    const lh_tokenizer *tok;
    const lh_chat_template *tmpl;
    const lh_srv_options *o;
    lh_srv_core *core;
    lh_generate_params defaults; /* the model's generation defaults */
    atomic_int_fast64_t in_flight; /* completion requests accepted and not yet answered */
    atomic_bool draining;
    atomic_uint_fast64_t next_id;
    uint64_t id_salt;
    pthread_mutex_t mu; /* counts */
    lh_srv_http_counts counts;
} lh_srv;

enum { LH_SRV_BATCH = 64 }; /* tokens taken from a job per wait */

/* One HTTP request's state, from its first byte to its completion callback. */
typedef struct lh_srv_conn {
    lh_srv *srv;
    struct MHD_Connection *mc;
    int fd;               /* the client's socket: polled for a hang-up while generating */
    const char *path;     /* the route (static) */
    const char *allow;    /* the methods of a known path (static), for a 405 */
    lh_strbuf body;
    bool too_big, started;
    bool counted;         /* holds one of srv->in_flight */
    int status;           /* what was answered (for the log and the counts) */
    double t_start;
    /* a completion */
    lh_srv_req req;
    int32_t *prompt;
    size_t n_prompt;
    lh_srv_job *job;
    lh_srv_text text;
    bool text_on;
    lh_srv_resp_id rid;
    lh_srv_usage usage;
    bool done, failed, stopped_by_text, gone;
    lh_stop_reason why;
    char fail_msg[256];
    /* the tokens not yet written out (a stream chunk's, or all of a whole response's) with
     * their text offsets, for logprobs */
    lh_srv_token *pend;
    int64_t *pend_off;
    size_t n_pend, cap_pend;
    /* a stream: the bytes not yet handed to libmicrohttpd, and where it stands */
    lh_strbuf out;
    size_t out_off;
    int phase;            /* 0 first chunk due, 1 tokens, 2 everything written */
} lh_srv_conn;

/* Answers a POST to /v1/completions or /v1/chat/completions whose body is complete. */
enum MHD_Result lh_srv_completion(lh_srv_conn *x);
/* Queues a JSON response (text: malloc'ed, taken; NULL: out of memory -> 500). */
enum MHD_Result lh_srv_send_json(lh_srv_conn *x, int status, char *text);
/* Queues e as an OpenAI error object. */
enum MHD_Result lh_srv_send_error(lh_srv_conn *x, const lh_srv_error *e);
/* Whether the client closed its end of the connection. */
bool lh_srv_peer_gone(const lh_srv_conn *x);
double lh_srv_now(void);

#endif
