/* POST /v1/completions and /v1/chat/completions: the prompt, the parameters, the job, and
 * the answer -- whole, or streamed as server-sent events. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the request into a prompt and parameters ------------------------------------------- */

static int build_prompt(lh_srv_conn *x, lh_srv_error *e)
{
    lh_srv *S = x->srv;
    lh_srv_req *r = &x->req;
    const int64_t vocab = lh_engine_vocab_size(S->e);
    if (r->prompt_ids) {
        for (size_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= vocab)
                return lh_srv_fail(e, 400, "invalid_value", "prompt", "prompt token %zu is id "
                                   "%d, outside the vocabulary [0, %lld)", i, r->prompt_ids[i],
                                   (long long)vocab);
        x->prompt = r->prompt_ids;
        x->n_prompt = r->n_prompt_ids;
        r->prompt_ids = NULL;
        return 0;
    }
    lh_err err = {0};
    char *rendered = NULL;
    size_t rlen = 0;
    if (r->kind == LH_SRV_CHAT) {
        if (!S->tmpl)
            return lh_srv_fail(e, 400, "unsupported_value", "messages", "%s; use "
                               "/v1/completions", S->o->no_chat_reason
                                                      ? S->o->no_chat_reason
                                                      : "the model has no chat template");
        const lh_chat_render_options ro = {.struct_size = sizeof ro,
                                           .add_generation_prompt = true};
        if (lh_chat_template_render(S->tmpl, r->messages, r->n_messages, &ro, &rendered, &rlen,
                                    &err) != LH_OK)
            return lh_srv_fail(e, err.code == LH_E_NOMEM ? 500 : 400,
                               err.code == LH_E_NOMEM ? "out_of_memory" : "invalid_value",
                               "messages", "the chat template refused the messages: %s",
                               err.msg);
    }
    /* a chat's template writes its special tokens; a text prompt gets the tokenizer's (BOS),
     * as transformers' tokenizer(text) */
    const char *text = rendered ? rendered : r->prompt_text;
    const size_t len = rendered ? rlen : r->prompt_text_len;
    lh_status st = lh_tokenizer_encode(S->tok, text, len, !rendered, &x->prompt, &x->n_prompt,
                                       &err);
    free(rendered);
    if (st != LH_OK)
        return lh_srv_fail(e, st == LH_E_NOMEM ? 500 : 400,
                           st == LH_E_NOMEM ? "out_of_memory" : "invalid_value",
                           r->kind == LH_SRV_CHAT ? "messages" : "prompt", "%s", err.msg);
    if (x->n_prompt == 0)
        return lh_srv_fail(e, 400, "invalid_value", r->kind == LH_SRV_CHAT ? "messages"
                                                                            : "prompt",
                           "the prompt encodes to no token");
    return 0;
}

/* The request's fields over the model's defaults, as `llmhost run` applies its flags: a
 * temperature decides sampling; top_k, top_p or min_p without one turn it on. */
static int build_params(lh_srv_conn *x, lh_generate_params *gp, int32_t *stop_ids,
                        lh_srv_error *e)
{
    const lh_srv_req *r = &x->req;
    *gp = x->srv->defaults;
    gp->seq_streams = NULL;
    gp->on_step = NULL;
    gp->finish = NULL;
    if (r->temperature_given) {
        gp->temperature = (float)r->temperature;
        gp->do_sample = r->temperature > 0;
    }
    if (r->top_k_given) {
        gp->top_k = r->top_k;
        gp->do_sample = gp->do_sample || !r->temperature_given;
    }
    if (r->top_p_given) {
        gp->top_p = (float)r->top_p;
        gp->do_sample = gp->do_sample || !r->temperature_given;
    }
    if (r->min_p_given) {
        gp->min_p = (float)r->min_p;
        gp->do_sample = gp->do_sample || !r->temperature_given;
    }
    if (r->repetition_penalty_given)
        gp->repetition_penalty = (float)r->repetition_penalty;
    if (r->seed_given)
        gp->seed = r->seed;
    /* stop_token_ids add to the model's eos ids (as vLLM's do); ignore_eos drops those */
    size_t n = 0;
    for (int64_t i = 0; !r->ignore_eos && i < x->srv->defaults.n_stop_ids; i++)
        stop_ids[n++] = x->srv->defaults.stop_ids[i];
    const int64_t vocab = lh_engine_vocab_size(x->srv->e);
    for (size_t i = 0; i < r->n_stop_ids; i++) {
        if (r->stop_ids[i] >= vocab)
            return lh_srv_fail(e, 400, "invalid_value", "stop_token_ids", "stop_token_ids[%zu] "
                               "= %d is outside the vocabulary [0, %lld)", i, r->stop_ids[i],
                               (long long)vocab);
        stop_ids[n++] = r->stop_ids[i];
    }
    gp->stop_ids = n ? stop_ids : NULL;
    gp->n_stop_ids = (int64_t)n;
    const int64_t max_len = lh_engine_max_seq_len(x->srv->e);
    const int64_t plen = (int64_t)x->n_prompt;
    const char *field = r->kind == LH_SRV_CHAT ? "messages" : "prompt";
    if (plen >= max_len + (r->max_tokens == 0))
        return lh_srv_fail(e, 400, "context_length_exceeded", field, "This model's maximum "
                           "context length is %lld tokens; the prompt has %lld",
                           (long long)max_len, (long long)plen);
    /* OpenAI's defaults: 16 for completions, the rest of the context for chat */
    int64_t max_new = r->max_tokens >= 0 ? r->max_tokens
                      : r->kind == LH_SRV_CHAT ? max_len - plen : 16;
    if (r->max_tokens < 0 && max_new > max_len - plen)
        max_new = max_len - plen;
    if (max_new - (max_new > 0) > max_len - plen)
        return lh_srv_fail(e, 400, "context_length_exceeded", "max_tokens", "This model's "
                           "maximum context length is %lld tokens; the prompt has %lld and "
                           "max_tokens asks for %lld more (at most %lld)", (long long)max_len,
                           (long long)plen, (long long)max_new, (long long)(max_len - plen));
    gp->max_new_tokens = max_new;
    return 0;
}

/* ---- the job's tokens into text ----------------------------------------------------------- */

static bool pend_room(lh_srv_conn *x, size_t more)
{
    if (x->n_pend + more <= x->cap_pend)
        return true;
    size_t cap = x->cap_pend ? x->cap_pend : LH_SRV_BATCH;
    while (cap < x->n_pend + more)
        cap *= 2;
    lh_srv_token *p = realloc(x->pend, cap * sizeof *p);
    if (p)
        x->pend = p;
    int64_t *o = p ? realloc(x->pend_off, cap * sizeof *o) : NULL;
    if (o)
        x->pend_off = o;
    if (!p || !o)
        return false;
    x->cap_pend = cap;
    return true;
}

/* Waits up to timeout_ms for the job's news and takes it in. Returns false once the client
 * has gone (the job is cancelled). */
static bool pump(lh_srv_conn *x, int timeout_ms)
{
    lh_srv_token toks[LH_SRV_BATCH];
    lh_srv_job_news nw;
    lh_srv_job_wait(x->job, timeout_ms, toks, LH_SRV_BATCH, &nw);
    x->usage.cached = nw.cached_tokens;
    for (size_t i = 0; i < nw.n && !x->failed; i++) {
        x->usage.completion++;
        const int64_t off = (int64_t)x->text.chars;
        lh_err err = {0};
        if (lh_srv_text_push(&x->text, toks[i].id, &err) != LH_OK) {
            x->failed = true;
            snprintf(x->fail_msg, sizeof x->fail_msg, "decoding token %d: %.200s", toks[i].id,
                     err.msg);
            lh_srv_job_cancel(x->job);
            break;
        }
        if (x->req.logprobs) {
            if (!pend_room(x, 1)) {
                x->failed = true;
                snprintf(x->fail_msg, sizeof x->fail_msg, "out of memory for logprobs");
                lh_srv_job_cancel(x->job);
                break;
            }
            x->pend[x->n_pend] = toks[i];
            x->pend_off[x->n_pend++] = off;
        }
    }
    /* a stop string that shows only in the decoded text (e.g. across a skipped special
     * token) ends the request here */
    if (x->text.stopped && !x->stopped_by_text && !nw.done) {
        x->stopped_by_text = true;
        lh_srv_job_cancel(x->job);
    }
    if (nw.done) {
        x->done = true;
        x->why = nw.why;
        if (nw.failed && !x->failed) {
            x->failed = true;
            snprintf(x->fail_msg, sizeof x->fail_msg, "%s", nw.message);
        }
        lh_err err = {0};
        if (!x->failed && lh_srv_text_finish(&x->text, &err) != LH_OK) {
            x->failed = true;
            snprintf(x->fail_msg, sizeof x->fail_msg, "decoding: %.200s", err.msg);
        }
        return true;
    }
    if (lh_srv_peer_gone(x)) {
        x->gone = true;
        lh_srv_job_cancel(x->job);
        return false;
    }
    return true;
}

static const char *finish_reason(const lh_srv_conn *x)
{
    if (x->stopped_by_text || x->why == LH_STOP_EOS || x->why == LH_STOP_STRING)
        return "stop";
    return x->why == LH_STOP_CANCELLED ? "abort" : "length";
}

static json_t *take_logprobs(lh_srv_conn *x)
{
    if (!x->req.logprobs)
        return NULL;
    json_t *lp = lh_srv_logprobs_json(x->req.kind, x->srv->tok, x->pend, x->pend_off,
                                      x->n_pend);
    x->n_pend = 0;
    return lp;
}

/* ---- a whole response --------------------------------------------------------------------- */

static enum MHD_Result whole(lh_srv_conn *x)
{
    /* bounded by the request's max_tokens; each wait returns within 20 ms to look at the
     * client's socket */
    while (!x->done && pump(x, 20))
        ;
    if (x->gone)
        return MHD_NO; /* nobody to answer: the connection closes */
    if (x->failed) {
        lh_srv_error e;
        lh_srv_fail(&e, 500, "internal_error", NULL, "%s", x->fail_msg);
        return lh_srv_send_error(x, &e);
    }
    const char *text = NULL;
    const size_t len = lh_srv_text_take(&x->text, &text);
    json_t *o = lh_srv_completion_json(&x->rid, text, len, finish_reason(x),
                                       take_logprobs(x), lh_srv_usage_json(&x->usage));
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return lh_srv_send_json(x, 200, body);
}

/* ---- a stream ----------------------------------------------------------------------------- */

static void sse(lh_srv_conn *x, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        x->out.oom = true;
        return;
    }
    lh_strbuf_printf(&x->out, "data: %s\n\n", s);
    free(s);
}

/* Appends the events the job's news allows: a chunk of new text (or of new tokens, with
 * logprobs), and at the end the last chunk, the usage chunk and [DONE]. */
static void stream_events(lh_srv_conn *x)
{
    const bool usage = x->req.include_usage;
    if (x->phase == 0) {
        if (x->req.kind == LH_SRV_CHAT)
            sse(x, lh_srv_chunk_json(&x->rid, "", 0, true, NULL, NULL, usage));
        x->phase = 1;
    }
    if (x->failed) {
        lh_srv_error e;
        lh_srv_fail(&e, 500, "internal_error", NULL, "%s", x->fail_msg);
        char *s = lh_srv_error_json(&e);
        if (s)
            lh_strbuf_printf(&x->out, "data: %s\n\ndata: [DONE]\n\n", s);
        free(s);
        x->phase = 2;
        return;
    }
    const char *text = NULL;
    const size_t len = lh_srv_text_take(&x->text, &text);
    if (!x->done) {
        if (len || x->n_pend)
            sse(x, lh_srv_chunk_json(&x->rid, text, len, false, NULL, take_logprobs(x), usage));
        return;
    }
    /* the rest of the text (and its tokens' logprobs), then OpenAI's closing chunk: an
     * empty delta with the finish reason */
    if (len || x->n_pend)
        sse(x, lh_srv_chunk_json(&x->rid, text, len, false, NULL, take_logprobs(x), usage));
    sse(x, lh_srv_chunk_json(&x->rid, "", 0, false, finish_reason(x), NULL, usage));
    if (usage)
        sse(x, lh_srv_usage_chunk_json(&x->rid, lh_srv_usage_json(&x->usage)));
    lh_strbuf_puts(&x->out, "data: [DONE]\n\n");
    x->phase = 2;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    lh_srv_conn *x = cls;
    for (;;) { /* bounded by the request's tokens: every pass takes news or sees the end */
        if (!lh_strbuf_ok(&x->out))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (x->out.len > x->out_off) {
            const size_t n = x->out.len - x->out_off < max ? x->out.len - x->out_off : max;
            memcpy(buf, x->out.s + x->out_off, n);
            x->out_off += n;
            if (x->out_off == x->out.len) {
                lh_strbuf_truncate(&x->out, 0);
                x->out_off = 0;
            }
            return (ssize_t)n;
        }
        if (x->phase == 2)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (x->phase == 1 && !x->done && !x->failed && !pump(x, 20))
            return MHD_CONTENT_READER_END_WITH_ERROR; /* the client went away */
        stream_events(x);
    }
}

static enum MHD_Result stream(lh_srv_conn *x)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, x, NULL);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    x->status = 200;
    x->started = true;
    const enum MHD_Result ok = MHD_queue_response(x->mc, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* ---- the request -------------------------------------------------------------------------- */

static enum MHD_Result refuse(lh_srv_conn *x, const lh_srv_error *e)
{
    return lh_srv_send_error(x, e);
}

enum MHD_Result lh_srv_completion(lh_srv_conn *x)
{
    lh_srv *S = x->srv;
    lh_srv_error e = {0};
    const lh_srv_kind kind = strcmp(x->path, "/v1/chat/completions") == 0 ? LH_SRV_CHAT
                                                                           : LH_SRV_COMPLETION;
    if (lh_srv_req_parse(kind, x->body.s ? x->body.s : "", x->body.len, &x->req, &e))
        return refuse(x, &e);
    if (strcmp(x->req.model, S->o->model_id) != 0) {
        lh_srv_fail(&e, 404, "model_not_found", "model", "The model '%s' does not exist; this "
                    "server serves '%s'", x->req.model, S->o->model_id);
        return refuse(x, &e);
    }
    if (atomic_load(&S->draining)) {
        lh_srv_fail(&e, 503, "overloaded", NULL, "the server is shutting down");
        return refuse(x, &e);
    }
    if (atomic_fetch_add(&S->in_flight, 1) >= S->o->max_requests) {
        atomic_fetch_sub(&S->in_flight, 1);
        lh_srv_fail(&e, 503, "overloaded", NULL, "%lld requests are in flight, the most this "
                    "server takes (--max-requests); retry later",
                    (long long)S->o->max_requests);
        return refuse(x, &e);
    }
    x->counted = true;
    lh_generate_params gp;
    int32_t stop_ids[LH_SRV_MAX_STOP_IDS + 64];
    if (S->defaults.n_stop_ids > 64) {
        lh_srv_fail(&e, 500, "internal_error", NULL, "the model has %lld eos ids (at most 64)",
                    (long long)S->defaults.n_stop_ids);
        return refuse(x, &e);
    }
    if (build_prompt(x, &e) || build_params(x, &gp, stop_ids, &e))
        return refuse(x, &e);
    lh_err err = {0};
    if (lh_srv_text_init(&x->text, S->tok, x->req.stop, x->req.n_stop, &err) != LH_OK) {
        lh_srv_fail(&e, 500, "out_of_memory", NULL, "%s", err.msg);
        return refuse(x, &e);
    }
    x->text_on = true;
    const lh_request rq = {.struct_size = sizeof rq, .prompt = x->prompt,
                           .prompt_len = (int64_t)x->n_prompt, .params = &gp,
                           .stop_strings = (const char *const *)x->req.stop,
                           .n_stop_strings = x->req.n_stop, .tokenizer = S->tok,
                           .logprobs = x->req.logprobs, .top_logprobs = x->req.top_logprobs};
    lh_status st = lh_srv_job_submit(S->core, &rq, &x->job, &err);
    if (st != LH_OK) {
        const char *field = kind == LH_SRV_CHAT ? "messages" : "prompt";
        if (st == LH_E_UNSUPPORTED) /* more KV blocks than the pool has */
            lh_srv_fail(&e, 400, "context_length_exceeded", field, "%s", err.msg);
        else if (st == LH_E_USAGE)
            lh_srv_fail(&e, 400, "invalid_value", NULL, "%s", err.msg);
        else
            lh_srv_fail(&e, 500, "internal_error", NULL, "%s", err.msg);
        return refuse(x, &e);
    }
    x->usage.prompt = (int64_t)x->n_prompt;
    const uint64_t n = atomic_fetch_add(&S->next_id, 1);
    uint64_t h = (n + 1) * 0x9e3779b97f4a7c15ull ^ S->id_salt;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    snprintf(x->rid.id, sizeof x->rid.id, "%s-%016llx",
             kind == LH_SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)h);
    x->rid.kind = kind;
    x->rid.created = (int64_t)time(NULL);
    x->rid.model = S->o->model_id;
    return x->req.stream ? stream(x) : whole(x);
}
