/* The HTTP side of `llmhost serve` on libmicrohttpd: routes, authentication, body limits,
 * the simple endpoints, and the life of the daemon (start, drain on SIGTERM, stop). */
#include "srv_internal.h"

#include "core/err.h"
#include "core/strutil.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double lh_srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool lh_srv_peer_gone(const lh_srv_conn *x)
{
    if (x->fd < 0)
        return false;
    char b;
    const ssize_t n = recv(x->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    /* 0: an orderly shutdown; an error other than "nothing to read": a reset */
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result send_text(lh_srv_conn *x, int status, const char *type, char *text,
                                 size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405 && x->allow) /* RFC 9110: a 405 names the methods the path takes */
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, x->allow);
    x->status = status;
    x->started = true; /* one response per request: a body still arriving is dropped */
    const enum MHD_Result ok = MHD_queue_response(x->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result lh_srv_send_json(lh_srv_conn *x, int status, char *text)
{
    if (!text) {
        lh_srv_error e;
        lh_srv_fail(&e, 500, "out_of_memory", NULL, "out of memory for the response");
        return lh_srv_send_error(x, &e);
    }
    return send_text(x, status, "application/json", text, strlen(text));
}

enum MHD_Result lh_srv_send_error(lh_srv_conn *x, const lh_srv_error *e)
{
    char *text = lh_srv_error_json(e);
    if (!text)
        return MHD_NO;
    return send_text(x, e->status, "application/json", text, strlen(text));
}

static enum MHD_Result fail(lh_srv_conn *x, int status, const char *code, const char *fmt,
                            const char *arg)
{
    lh_srv_error e;
    lh_srv_fail(&e, status, code, NULL, fmt, arg);
    return lh_srv_send_error(x, &e);
}

/* ---- GET endpoints ------------------------------------------------------------------------- */

static enum MHD_Result health(lh_srv_conn *x)
{
    const bool d = atomic_load(&x->srv->draining);
    char *t = lh_strdup(d ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}");
    return lh_srv_send_json(x, d ? 503 : 200, t);
}

static enum MHD_Result models(lh_srv_conn *x)
{
    lh_srv *S = x->srv;
    json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:I}]}", "object", "list", "data", "id",
                          S->o->model_id, "object", "model", "created",
                          (json_int_t)time(NULL), "owned_by", "llmhost", "max_model_len",
                          (json_int_t)lh_engine_max_seq_len(S->e));
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return lh_srv_send_json(x, 200, t);
}

static enum MHD_Result metrics(lh_srv_conn *x)
{
    lh_srv *S = x->srv;
    lh_scheduler_metrics m = {.struct_size = sizeof m};
    lh_srv_core_metrics(S->core, &m);
    pthread_mutex_lock(&S->mu);
    const lh_srv_http_counts h = S->counts;
    pthread_mutex_unlock(&S->mu);
    char *t = lh_srv_metrics_text(&m, &h);
    if (!t)
        return lh_srv_send_json(x, 500, NULL);
    return send_text(x, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t));
}

/* ---- routing ------------------------------------------------------------------------------- */

typedef struct route {
    const char *path;
    const char *method;
    bool auth;
} route;

static const route routes[] = {
    {"/v1/completions", "POST", true}, {"/v1/chat/completions", "POST", true},
    {"/v1/models", "GET", true},       {"/health", "GET", false},
    {"/metrics", "GET", false},
};
#define N_ROUTES (sizeof routes / sizeof *routes)

/* Constant-time comparison: the key must not leak through timing. */
static bool key_ok(const char *header, const char *key)
{
    static const char bearer[] = "Bearer ";
    if (!header || strncmp(header, bearer, sizeof bearer - 1) != 0)
        return false;
    const char *given = header + sizeof bearer - 1;
    const size_t a = strlen(given), b = strlen(key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < a; i++)
        diff |= (unsigned char)given[i] ^ (unsigned char)key[i % (b ? b : 1)];
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    lh_srv *S = cls;
    lh_srv_conn *x = *con_cls;
    if (!x) { /* the headers are in: route, authenticate, look at the announced size */
        if (!(x = calloc(1, sizeof *x)))
            return MHD_NO;
        *con_cls = x;
        x->srv = S;
        x->mc = mc;
        x->t_start = lh_srv_now();
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        x->fd = ci ? ci->connect_fd : -1;
        x->body.limit = S->o->max_body_bytes;
        const route *r = NULL;
        bool path_known = false;
        for (size_t i = 0; i < N_ROUTES && !r; i++)
            if (strcmp(url, routes[i].path) == 0) {
                path_known = true;
                x->allow = strcmp(routes[i].method, "GET") == 0 ? "GET, HEAD" : "POST";
                if (strcmp(method, routes[i].method) == 0 ||
                    (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0))
                    r = &routes[i];
            }
        x->path = r ? r->path : url;
        if (!r && path_known)
            return fail(x, 405, "method_not_allowed", "method %s is not allowed here", method);
        if (!r)
            return fail(x, 404, "not_found", "no such endpoint: %s (see /v1/models, "
                        "/v1/completions, /v1/chat/completions, /health, /metrics)", url);
        x->path = r->path;
        if (r->auth && S->o->api_key && S->o->api_key[0] &&
            !key_ok(MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION),
                    S->o->api_key))
            return fail(x, 401, "invalid_api_key", "%s", "Incorrect API key provided (send "
                        "'Authorization: Bearer KEY')");
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > S->o->max_body_bytes) {
            char msg[96];
            snprintf(msg, sizeof msg, "%zu", S->o->max_body_bytes);
            return fail(x, 413, "request_too_large", "the body is larger than %s bytes "
                        "(--max-body-bytes)", msg);
        }
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (!x->too_big && !x->started)
            lh_strbuf_add(&x->body, upload, *upload_size);
        if (x->body.over)
            x->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    if (x->started) /* a response is queued already */
        return MHD_YES;
    x->started = true;
    if (x->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu", S->o->max_body_bytes);
        return fail(x, 413, "request_too_large", "the body is larger than %s bytes "
                    "(--max-body-bytes)", msg);
    }
    if (x->body.oom)
        return fail(x, 500, "out_of_memory", "%s", "out of memory for the request body");
    if (strcmp(x->path, "/health") == 0)
        return health(x);
    if (strcmp(x->path, "/metrics") == 0)
        return metrics(x);
    if (strcmp(x->path, "/v1/models") == 0)
        return models(x);
    return lh_srv_completion(x);
}

/* The request is over (answered, failed, or its client gone): everything it held goes. */
static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    (void)mc;
    lh_srv *S = cls;
    lh_srv_conn *x = *con_cls;
    if (!x)
        return;
    *con_cls = NULL;
    const bool completion = x->path && strncmp(x->path, "/v1/", 4) == 0 &&
                            strcmp(x->path, "/v1/models") != 0;
    if (x->job && !x->done) /* a stream whose client went away while it was being written */
        x->gone = true;
    lh_srv_job_release(x->job);
    if (completion) {
        pthread_mutex_lock(&S->mu);
        if (x->gone || why == MHD_REQUEST_TERMINATED_CLIENT_ABORT)
            S->counts.disconnects++;
        else if (x->status == 200)
            S->counts.requests_ok++;
        else
            S->counts.requests_error++;
        pthread_mutex_unlock(&S->mu);
        fprintf(stderr, "llmhost serve: POST %s %d%s prompt %lld completion %lld cached %lld "
                "in %.3f s\n", x->path, x->status, x->gone ? " (client gone)" : "",
                (long long)x->usage.prompt, (long long)x->usage.completion,
                (long long)x->usage.cached, lh_srv_now() - x->t_start);
    }
    if (x->counted)
        atomic_fetch_sub(&S->in_flight, 1);
    lh_srv_req_free(&x->req);
    free(x->prompt);
    if (x->text_on)
        lh_srv_text_free(&x->text);
    free(x->pend);
    free(x->pend_off);
    lh_strbuf_free(&x->body);
    lh_strbuf_free(&x->out);
    free(x);
}

/* ---- the daemon ---------------------------------------------------------------------------- */

static lh_status listen_on(const lh_srv_options *o, int *fd_out, char *where, size_t cap,
                           lh_err *err)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *res = NULL;
    const int g = getaddrinfo(o->host, port, &hints, &res);
    if (g != 0)
        return lh_err_set(err, LH_E_USAGE, "--host '%s': %s", o->host, gai_strerror(g));
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return lh_err_set(err, LH_E_USAGE, "cannot listen on %s:%d: %s", o->host, o->port,
                          strerror(last));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(where, cap, ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", h, p);
    *fd_out = fd;
    return LH_OK;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    fputs("llmhost serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

lh_status lh_srv_run(lh_engine *e, const lh_tokenizer *tok, const lh_chat_template *tmpl,
                     const lh_srv_options *o, lh_err *err)
{
    lh_srv S = {.e = e, .tok = tok, .tmpl = tmpl, .o = o};
    atomic_init(&S.in_flight, 0);
    atomic_init(&S.draining, false);
    atomic_init(&S.next_id, 0);
    S.id_salt = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull ^ (uint64_t)getpid();
    S.defaults.struct_size = sizeof S.defaults;
    lh_status st = lh_engine_generation_defaults(e, &S.defaults, err);
    if (st != LH_OK)
        return st;
    int fd = -1;
    char where[NI_MAXHOST + 32];
    if ((st = listen_on(o, &fd, where, sizeof where, err)) != LH_OK)
        return st;
    if ((st = lh_srv_core_start(e, &o->scheduler, &S.core, err)) != LH_OK) {
        close(fd);
        return st;
    }
    pthread_mutex_init(&S.mu, NULL);
    /* one thread per connection: a completion blocks its thread while it generates, which
     * keeps each request a straight line of code; the connection limit bounds the threads */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, &S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, &S, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(o->max_requests + 64), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)o->idle_timeout_s, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20),
        MHD_OPTION_END);
    if (!d) {
        close(fd);
        lh_srv_core_stop(S.core);
        pthread_mutex_destroy(&S.mu);
        return lh_err_set(err, LH_E_INTERNAL, "the HTTP daemon (libmicrohttpd) did not start "
                          "on %s", where);
    }
    printf("llmhost serve: listening on %s\n", where);
    fflush(stdout);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    while (sigwaitinfo(&set, NULL) < 0 && errno == EINTR)
        ;
    /* drain: no new connections; what is in flight finishes; a second signal cancels it */
    atomic_store(&S.draining, true);
    const MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    fprintf(stderr, "llmhost serve: draining %lld request(s)\n",
            (long long)atomic_load(&S.in_flight));
    bool cancelled = false;
    while (atomic_load(&S.in_flight) > 0) {
        const struct timespec tick = {0, 50 * 1000 * 1000};
        if (sigtimedwait(&set, NULL, &tick) >= 0 && !cancelled) {
            fprintf(stderr, "llmhost serve: second signal: cancelling the requests in "
                    "flight\n");
            lh_srv_core_cancel_all(S.core);
            cancelled = true;
        }
    }
    MHD_stop_daemon(d);
    lh_srv_core_stop(S.core);
    pthread_mutex_destroy(&S.mu);
    fprintf(stderr, "llmhost serve: stopped\n");
    return LH_OK;
}
