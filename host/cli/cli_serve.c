/* llmhost serve: the OpenAI-compatible server (host/server). */
#include "cli_commands.h"

#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char serve_help[] =
    "usage: llmhost serve MODEL [--host ADDR] [--port P] [--api-key KEY]\n"
    "       [--served-model-name NAME] [--max-num-batched-tokens N] [--no-prefix-caching]\n"
    "       [--max-requests N] [--max-body-bytes N] [--timeout SECONDS] [--threads N]\n"
    "       [--max-batch-size B] [--max-seq-len L] [--attn-backend NAME] [--device D]\n"
    "       [--config FILE.yaml] [run-config flags]\n"
    "An OpenAI-compatible HTTP server over one engine (docs/serve.md; the API is\n"
    "docs/openapi.yaml): POST /v1/completions and /v1/chat/completions (streamed with\n"
    "\"stream\": true as server-sent events), GET /v1/models, GET /health, GET /metrics\n"
    "(Prometheus text). Requests run under continuous batching: every engine step takes one\n"
    "token of each decoding request and prompt chunks of new ones, and a request joins and\n"
    "leaves at any step; full KV blocks of prompts are shared between requests (prefix\n"
    "caching) where the model allows it.\n"
    "--host ADDR        the address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
    "--port P           the port (default 8000; 0: any free one). Once listening, one line\n"
    "                   'llmhost serve: listening on http://ADDR:PORT' goes to stdout\n"
    "--api-key KEY      every /v1/ request needs 'Authorization: Bearer KEY' (default:\n"
    "                   $LLMHOST_API_KEY; unset or empty: no key)\n"
    "--served-model-name NAME  the model id requests name (default: MODEL's last path\n"
    "                   component)\n"
    "--max-num-batched-tokens N  tokens fed to the model per step (default 64 per sequence\n"
    "                   slot, at least 512); the slots are --max-batch-size (default 8 here)\n"
    "--no-prefix-caching  compute every prompt in full\n"
    "--max-requests N   completion requests in flight at once (default 256); beyond, 503\n"
    "--max-body-bytes N a larger request body is refused with 413 (default 8388608)\n"
    "--timeout SECONDS  an idle connection closes after this (default 60)\n"
    "Sampling fields a request omits take the model's generation defaults, as `llmhost run`.\n"
    "SIGTERM or SIGINT: new connections are refused, the requests in flight finish, and the\n"
    "exit status is 0; a second signal cancels what is still running.\n";

/* MODEL's last path component ("config.json" names its directory). */
static void model_id(const char *model, char *out, size_t cap)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", model);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash && strcmp(slash + 1, "config.json") == 0 && slash != buf) {
        *slash = '\0';
        slash = strrchr(buf, '/');
    }
    const char *last = slash ? slash + 1 : buf;
    const size_t len = strlen(last) < cap - 1 ? strlen(last) : cap - 1;
    memcpy(out, last, len);
    out[len] = '\0';
}

int lh_cli_serve(const lh_cli_args *a)
{
    if (a->help) {
        printf("%s\n%s", serve_help, lh_cli_exit_status_text);
        return 0;
    }
    if (!a->model) {
        fprintf(stderr, "llmhost serve: MODEL is required\n");
        return LH_E_USAGE;
    }
    /* before any thread starts (the engine's kernel threads included): every thread inherits
     * the mask, and the server takes the signals with sigwait */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a death */
    /* a server batches: without --max-batch-size (or a run config) 8 sequence slots */
    char *ov[LH_CLI_MAX_OVERRIDES + 2] = {0};
    size_t n_ov = 0;
    for (; n_ov < a->n_overrides; n_ov++)
        ov[n_ov] = a->overrides[n_ov];
    char batch[] = "max-batch-size=8";
    if (!a->batch_size_given && !a->config_file)
        ov[n_ov++] = batch;
    lh_err err = {0};
    lh_host *h = NULL;
    lh_engine *e = NULL;
    lh_tokenizer *tok = NULL;
    lh_chat_template *tmpl = NULL;
    int rc = lh_cli_open_engine(a, ov, &h, &e, &err);
    if (rc == 0 && lh_tokenizer_open(a->model, &tok, &err) != LH_OK)
        rc = (int)err.code;
    if (rc) {
        fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err.code), err.msg);
        lh_engine_close(e);
        lh_host_free(h);
        return rc;
    }
    char no_chat[600] = "";
    lh_err terr = {0};
    if (lh_chat_template_open(a->model, &tmpl, &terr) != LH_OK) {
        snprintf(no_chat, sizeof no_chat, "the model has no usable chat template: %.500s",
                 terr.msg);
        fprintf(stderr, "llmhost serve: chat completions are off: %s\n", terr.msg);
    }
    char id[256];
    model_id(a->model, id, sizeof id);
    const char *key = a->api_key ? a->api_key : getenv("LLMHOST_API_KEY");
    lh_srv_options o = {
        .host = a->listen_host ? a->listen_host : "127.0.0.1",
        .port = a->port >= 0 ? (int)a->port : 8000,
        .api_key = key && key[0] ? key : NULL,
        .model_id = a->served_name ? a->served_name : id,
        .max_requests = a->max_requests ? a->max_requests : 256,
        .max_body_bytes = a->max_body_bytes ? (size_t)a->max_body_bytes : (size_t)8 << 20,
        .idle_timeout_s = a->idle_timeout > 0 ? (unsigned)a->idle_timeout : 60,
        .no_chat_reason = tmpl ? NULL : no_chat,
        .scheduler = {.struct_size = sizeof o.scheduler,
                      .max_num_batched_tokens = a->max_batched_tokens,
                      .prefix_caching = a->no_prefix_caching ? -1 : 0},
    };
    if (lh_srv_run(e, tok, tmpl, &o, &err) != LH_OK) {
        fprintf(stderr, "llmhost: error [%s]: %s\n", lh_status_name(err.code), err.msg);
        rc = (int)err.code;
    }
    lh_chat_template_free(tmpl);
    lh_tokenizer_free(tok);
    lh_engine_close(e);
    lh_host_free(h);
    return rc;
}
