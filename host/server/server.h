/* `llmhost serve`: an OpenAI-compatible HTTP server over one engine (docs/serve.md, the
 * contract in docs/openapi.yaml). libmicrohttpd runs one thread per connection; one more
 * thread steps the scheduler. */
#ifndef LH_SERVER_H
#define LH_SERVER_H

#include "llmhost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lh_srv_options {
    const char *host;        /* the address to listen on (a name or a numeric address) */
    int port;                /* 0: any free port */
    const char *api_key;     /* NULL or "": no authentication */
    const char *model_id;    /* the id of GET /v1/models; requests' "model" must equal it */
    int64_t max_requests;    /* completion requests in flight at once; beyond: 503 */
    size_t max_body_bytes;   /* a larger request body: 413 */
    unsigned idle_timeout_s; /* an idle connection closes after this */
    /* with no chat template: why (the answer to every chat completion); NULL otherwise */
    const char *no_chat_reason;
    lh_scheduler_options scheduler;
} lh_srv_options;

/* Serves e (its tokenizer tok; tmpl may be NULL: then chat completions are refused) until
 * SIGTERM or SIGINT, then stops accepting, lets every request in flight finish (a second
 * signal cancels them) and returns LH_OK. Prints "llmhost serve: listening on
 * http://HOST:PORT" to stdout once it accepts connections. The caller must have blocked
 * SIGTERM and SIGINT in every thread (pthread_sigmask before any thread starts, so that
 * the engine's threads inherit it): they are taken with sigtimedwait here.
 * Errors (before serving): LH_E_USAGE (an address that does not resolve or cannot be bound,
 * with the reason), as lh_scheduler_create, LH_E_INTERNAL (the HTTP daemon did not start),
 * LH_E_NOMEM. */
lh_status lh_srv_run(lh_engine *e, const lh_tokenizer *tok, const lh_chat_template *tmpl,
                     const lh_srv_options *o, lh_err *err);

#endif
