/* The continuous-batching scheduler (scheduler.h). */
#include "scheduler.h"

#include "core/err.h"
#include "kv_cache.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct req {
    uint64_t id;
    int32_t *tok;       /* prompt, then the tokens generated so far: [prompt_len + max_new] */
    int64_t n_tok, prompt_len, n_gen, max_new;
    int64_t computed;   /* tokens of tok whose KV the slot holds */
    int64_t slot;       /* -1: waiting */
    int32_t *stop_ids;
    int64_t n_stop_ids;
    lh_sampling_params kp;
    bool plain_greedy;  /* argmax of the raw logits, as lh_generate takes it */
    uint64_t seed, stream;
    bool admitted;      /* took its slot in the step being planned */
    lh_stop_matcher *stop_m; /* its stop strings (NULL: none) */
    double t_submit, t_last; /* CLOCK_MONOTONIC: submitted, its last token chosen */
    int64_t cached;     /* prompt tokens from the prefix cache at its first admission */
    bool seen;          /* admitted at least once */
    /* log-probabilities of the token just chosen (logprobs asked for) */
    bool logprobs;
    int32_t n_top;
    float lp;
    int32_t top_ids[LH_MAX_TOP_LOGPROBS];
    float top_lp[LH_MAX_TOP_LOGPROBS];
    lh_token_fn fn;
    void *user;
    struct req *next;   /* in the incoming or waiting list */
} req;

struct lh_scheduler {
    lh_runner *d;
    lh_kctx *kctx;
    bool prefix; /* prefix caching asked for and possible (the pool keeps it for others) */
    int64_t budget, slots;
    /* shared with submitters and cancellers */
    pthread_mutex_t mu;
    req *in_head, *in_tail;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    uint64_t next_id;
    atomic_int_fast64_t live; /* requests submitted and not ended */
    lh_scheduler_metrics m;   /* under mu (written by the stepping thread, submit) */
    /* the stepping thread's own */
    req *wait_head, *wait_tail;
    req **running; /* [slots] */
    /* one step: per scheduled request, and per token */
    req **sched;
    int64_t *chunk, *token_start, *n_new, *ctx_len, *slot, *after, *out_rows, *out_of;
    int32_t *tokens, *positions;
    float *host_row; /* [vocab]: a row of logits read back from the device, for logprobs */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void observe(int64_t *buckets, int64_t *count, double *sum, double seconds)
{
    static const double bounds[LH_LATENCY_BUCKETS] = LH_LATENCY_BOUNDS_INIT;
    for (int i = 0; i < LH_LATENCY_BUCKETS; i++)
        buckets[i] += seconds <= bounds[i];
    (*count)++;
    *sum += seconds;
}

static void req_free(req *r)
{
    if (!r)
        return;
    free(r->tok);
    free(r->stop_ids);
    lh_stop_matcher_free(r->stop_m);
    free(r);
}

/* What create allocates per slot and per token (and logprobs' row); NULL entries are fine. */
static void free_arrays(lh_scheduler *s)
{
    free(s->running);
    free(s->sched);
    free(s->chunk);
    free(s->token_start);
    free(s->n_new);
    free(s->ctx_len);
    free(s->slot);
    free(s->after);
    free(s->out_rows);
    free(s->out_of);
    free(s->tokens);
    free(s->positions);
    free(s->host_row);
}

lh_status lh_scheduler_create_on(lh_runner *d, lh_kctx *kctx, int64_t token_budget,
                                 int prefix_caching, lh_scheduler **out, lh_err *err)
{
    *out = NULL;
    if (!d || !kctx)
        return lh_err_set(err, LH_E_USAGE, "scheduler: no runner or kernel context");
    if (prefix_caching < -1 || prefix_caching > 1)
        return lh_err_set(err, LH_E_USAGE, "scheduler: prefix_caching %d is not -1 (off), 0 "
                          "(where possible) or 1 (on)", prefix_caching);
    /* a prompt chunked (or a preempted request recomputed) would rotate its keys with the
     * tables of several lengths, where a one-shot run uses the final length's */
    const char *rope_len = lh_runner_rope_refusal(d);
    if (rope_len)
        return lh_err_set(err, LH_E_UNSUPPORTED, "scheduler: %s; chunked prefill would rotate "
                          "a prompt's keys with other tables than a one-shot prefill (use "
                          "lh_engine_generate)", rope_len);
    const char *no_prefix = lh_runner_prefix_refusal(d);
    if (prefix_caching == 1 && no_prefix)
        return lh_err_set(err, LH_E_UNSUPPORTED, "scheduler: prefix caching: %s", no_prefix);
    const int64_t slots = lh_runner_max_seqs(d);
    if (token_budget == 0)
        token_budget = slots * 64 > 512 ? slots * 64 : 512;
    if (token_budget < slots || token_budget > (1 << 24))
        return lh_err_set(err, LH_E_USAGE, "scheduler: max_num_batched_tokens %lld must be in "
                          "[max_batch_size %lld, %d] (every decoding request takes one token "
                          "of a step)", (long long)token_budget, (long long)slots, 1 << 24);
    if (!lh_runner_claim_slots(d))
        return lh_err_set(err, LH_E_USAGE, "scheduler: the engine's sequence slots belong to "
                          "another scheduler (lh_scheduler_free it first)");
    const bool prefix = prefix_caching >= 0 && !no_prefix;
    if (prefix) {
        lh_kv_cache *kv = (lh_kv_cache *)lh_runner_kv(d);
        lh_status st = lh_kv_cache_prefix_on(kv) ? LH_OK : lh_kv_cache_enable_prefix(kv, err);
        if (st != LH_OK) {
            lh_runner_unclaim_slots(d);
            return st;
        }
    }
    lh_scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        lh_runner_unclaim_slots(d);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    s->d = d;
    s->kctx = kctx;
    s->prefix = prefix;
    s->budget = token_budget;
    s->slots = slots;
    s->next_id = 1;
    atomic_init(&s->live, 0);
    const size_t n = (size_t)slots, t = (size_t)token_budget;
    s->running = calloc(n, sizeof *s->running);
    s->sched = calloc(n, sizeof *s->sched);
    s->chunk = malloc(n * sizeof *s->chunk);
    s->token_start = malloc(n * sizeof *s->token_start);
    s->n_new = malloc(n * sizeof *s->n_new);
    s->ctx_len = malloc(n * sizeof *s->ctx_len);
    s->slot = malloc(n * sizeof *s->slot);
    s->after = malloc(n * sizeof *s->after);
    s->out_rows = malloc(n * sizeof *s->out_rows);
    s->out_of = malloc(n * sizeof *s->out_of);
    s->tokens = malloc(t * sizeof *s->tokens);
    s->positions = malloc(t * sizeof *s->positions);
    if (!s->running || !s->sched || !s->chunk || !s->token_start || !s->n_new || !s->ctx_len ||
        !s->slot || !s->after || !s->out_rows || !s->out_of || !s->tokens || !s->positions ||
        pthread_mutex_init(&s->mu, NULL) != 0) {
        free_arrays(s);
        free(s);
        lh_runner_unclaim_slots(d);
        return lh_err_set(err, LH_E_NOMEM, "out of memory for a scheduler of %lld slots",
                          (long long)slots);
    }
    *out = s;
    return LH_OK;
}

void lh_scheduler_free(lh_scheduler *s)
{
    if (!s)
        return;
    for (req *r = s->in_head, *nx; r; r = nx) {
        nx = r->next;
        req_free(r);
    }
    for (req *r = s->wait_head, *nx; r; r = nx) {
        nx = r->next;
        req_free(r);
    }
    for (int64_t i = 0; i < s->slots; i++)
        if (s->running[i]) {
            lh_runner_release(s->d, i);
            req_free(s->running[i]);
        }
    lh_runner_unclaim_slots(s->d);
    pthread_mutex_destroy(&s->mu);
    free(s->cancels);
    free_arrays(s);
    free(s);
}

/* ---- submit and cancel (any thread) ---------------------------------------------------------- */

static lh_status check_request(const lh_scheduler *s, const int32_t *prompt, int64_t len,
                               const lh_generate_params *p, lh_err *err)
{
    if (!p || p->struct_size < offsetof(lh_generate_params, seq_streams))
        return lh_err_set(err, LH_E_USAGE, "submit: params NULL or older than the SDK's (%u "
                          "bytes)", p ? p->struct_size : 0);
    if (!prompt || len <= 0)
        return lh_err_set(err, LH_E_USAGE, "submit: an empty prompt");
    const int64_t vocab = lh_runner_vocab(s->d);
    for (int64_t i = 0; i < len; i++)
        if (prompt[i] < 0 || prompt[i] >= vocab)
            return lh_err_set(err, LH_E_USAGE, "submit: prompt token %lld is id %d, outside the "
                              "vocabulary [0, %lld)", (long long)i, prompt[i], (long long)vocab);
    if (p->max_new_tokens < 0)
        return lh_err_set(err, LH_E_USAGE, "submit: max_new_tokens = %lld must be >= 0",
                          (long long)p->max_new_tokens);
    if (p->n_stop_ids < 0 || (p->n_stop_ids > 0 && !p->stop_ids))
        return lh_err_set(err, LH_E_USAGE, "submit: %lld stop_ids%s", (long long)p->n_stop_ids,
                          p->n_stop_ids < 0 ? "" : " but stop_ids is NULL");
    for (int64_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0)
            return lh_err_set(err, LH_E_USAGE, "submit: stop_ids[%lld] = %d is not a token id",
                              (long long)i, p->stop_ids[i]);
    const lh_sampling_params kp = {.struct_size = sizeof kp, .temperature = p->temperature,
                                   .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                                   .repetition_penalty = p->repetition_penalty};
    if (lh_k_sampling_check(NULL, &kp) != LH_OK) {
        const char *m = lh_k_last_error(NULL);
        const char *colon = strstr(m, ": ");
        return lh_err_set(err, LH_E_USAGE, "submit: %s", colon ? colon + 2 : m);
    }
    /* the last new token is never fed, so it needs no cache; compared without forming
     * len + max_new_tokens, which could overflow */
    if (p->max_new_tokens - (p->max_new_tokens > 0) > lh_runner_max_seq_len(s->d) - len)
        return lh_err_set(err, LH_E_USAGE, "submit: a prompt of %lld tokens + %lld new (the last "
                          "one is not cached) is more than max_seq_len %lld", (long long)len,
                          (long long)p->max_new_tokens, (long long)lh_runner_max_seq_len(s->d));
    const int64_t need = len + p->max_new_tokens - (p->max_new_tokens > 0);
    const lh_kv_cache *kv = lh_runner_kv(s->d);
    if (kv) {
        const lh_kv_plan *pl = lh_kv_cache_plan(kv);
        const int64_t blocks = (need + pl->block_size - 1) / pl->block_size;
        if (blocks > pl->num_blocks)
            return lh_err_set(err, LH_E_UNSUPPORTED, "submit: the request needs %lld KV blocks "
                              "of %lld tokens (%lld tokens), the whole pool has %lld (sized by "
                              "%s)", (long long)blocks, (long long)pl->block_size,
                              (long long)need, (long long)pl->num_blocks, pl->sized_by);
    }
    return LH_OK;
}

lh_status lh_scheduler_submit(lh_scheduler *s, const lh_request *rq, uint64_t *id, lh_err *err)
{
    if (id)
        *id = 0;
    if (!s || !rq || rq->struct_size < sizeof *rq)
        return lh_err_set(err, LH_E_USAGE, "submit: %s", !s ? "no scheduler"
                          : !rq ? "NULL request" : "request.struct_size is smaller than "
                                                   "sizeof(lh_request)");
    const int32_t *prompt = rq->prompt;
    const int64_t len = rq->prompt_len;
    const lh_generate_params *p = rq->params;
    lh_status st = check_request(s, prompt, len, p, err);
    if (st != LH_OK)
        return st;
    if (rq->top_logprobs < 0 || rq->top_logprobs > LH_MAX_TOP_LOGPROBS ||
        (rq->top_logprobs > 0 && !rq->logprobs))
        return lh_err_set(err, LH_E_USAGE, "submit: top_logprobs = %d %s", rq->top_logprobs,
                          rq->top_logprobs > 0 && rq->top_logprobs <= LH_MAX_TOP_LOGPROBS
                              ? "needs logprobs" : "is outside [0, 20]");
    lh_stop_matcher *m = NULL;
    if (rq->n_stop_strings > 0) {
        if (!rq->tokenizer)
            return lh_err_set(err, LH_E_USAGE, "submit: %zu stop strings but no tokenizer to "
                              "read the tokens with", rq->n_stop_strings);
        st = lh_stop_matcher_create(rq->tokenizer, rq->stop_strings, rq->n_stop_strings, &m,
                                    err);
        if (st == LH_OK)
            st = lh_stop_matcher_add_context(m, prompt, (size_t)len, err);
        if (st != LH_OK) {
            lh_stop_matcher_free(m);
            return st;
        }
    }
    req *r = calloc(1, sizeof *r);
    if (r) {
        r->tok = malloc((size_t)(len + p->max_new_tokens) * sizeof *r->tok);
        r->stop_ids = p->n_stop_ids ? malloc((size_t)p->n_stop_ids * sizeof *r->stop_ids) : NULL;
    }
    if (!r || !r->tok || (p->n_stop_ids && !r->stop_ids)) {
        req_free(r);
        lh_stop_matcher_free(m);
        return lh_err_set(err, LH_E_NOMEM, "submit: out of memory for a prompt of %lld tokens",
                          (long long)len);
    }
    r->stop_m = m;
    memcpy(r->tok, prompt, (size_t)len * sizeof *r->tok);
    if (p->n_stop_ids)
        memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
    r->n_stop_ids = p->n_stop_ids;
    r->n_tok = r->prompt_len = len;
    r->max_new = p->max_new_tokens;
    r->slot = -1;
    r->kp = (lh_sampling_params){.struct_size = sizeof r->kp,
                                 .temperature = p->do_sample ? p->temperature : 0.0f,
                                 .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                                 .repetition_penalty = p->repetition_penalty};
    r->plain_greedy = r->kp.temperature == 0.0f && p->repetition_penalty == 1.0f;
    r->seed = p->seed;
    r->stream = rq->stream;
    r->fn = rq->on_token;
    r->user = rq->user;
    r->logprobs = rq->logprobs;
    r->n_top = rq->top_logprobs;
    r->t_submit = now_s();
    pthread_mutex_lock(&s->mu);
    r->id = s->next_id++;
    s->m.submitted++;
    if (s->in_tail)
        s->in_tail->next = r;
    else
        s->in_head = r;
    s->in_tail = r;
    atomic_fetch_add(&s->live, 1);
    pthread_mutex_unlock(&s->mu);
    if (id)
        *id = r->id;
    return LH_OK;
}

void lh_scheduler_metrics_get(lh_scheduler *s, lh_scheduler_metrics *out)
{
    if (!s || !out || out->struct_size < sizeof *out)
        return;
    const uint32_t keep = out->struct_size;
    pthread_mutex_lock(&s->mu);
    *out = s->m;
    pthread_mutex_unlock(&s->mu);
    out->struct_size = keep;
}

void lh_scheduler_cancel(lh_scheduler *s, uint64_t id)
{
    if (!s || id == 0)
        return;
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        size_t cap = s->cap_cancels ? 2 * s->cap_cancels : 16;
        uint64_t *grown = realloc(s->cancels, cap * sizeof *grown);
        if (grown) {
            s->cancels = grown;
            s->cap_cancels = cap;
        }
    }
    /* out of memory: the cancel is lost, and the request runs to its end */
    if (s->n_cancels < s->cap_cancels)
        s->cancels[s->n_cancels++] = id;
    pthread_mutex_unlock(&s->mu);
}

bool lh_scheduler_busy(lh_scheduler *s)
{
    return s && atomic_load(&s->live) > 0;
}

/* ---- the stepping thread ------------------------------------------------------------------- */

static void wait_push_back(lh_scheduler *s, req *r)
{
    r->next = NULL;
    if (s->wait_tail)
        s->wait_tail->next = r;
    else
        s->wait_head = r;
    s->wait_tail = r;
}

static void wait_push_front(lh_scheduler *s, req *r)
{
    r->next = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail)
        s->wait_tail = r;
}

static req *wait_pop(lh_scheduler *s)
{
    req *r = s->wait_head;
    if (r) {
        s->wait_head = r->next;
        if (!s->wait_head)
            s->wait_tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* The request leaves: its callback hears why, its slot (if any) is freed. */
/* Tells r's callback about `token` (-1: none), or its end when last. */
static void notify(const req *r, int32_t token, bool last, lh_stop_reason why)
{
    if (!r->fn)
        return;
    const bool lp = r->logprobs && token >= 0;
    const lh_token_event ev = {.id = r->id, .token = token, .last = last, .why = why,
                               .cached_tokens = r->cached, .logprob = lp ? r->lp : 0.0f,
                               .n_top = lp ? r->n_top : 0, .top_ids = r->top_ids,
                               .top_logprobs = r->top_lp};
    r->fn(r->user, &ev);
}

static void finish(lh_scheduler *s, req *r, int32_t token, lh_stop_reason why)
{
    if (r->slot >= 0) {
        lh_runner_release(s->d, r->slot);
        s->running[r->slot] = NULL;
    }
    notify(r, token, true, why);
    req_free(r);
    atomic_fetch_sub(&s->live, 1);
}

/* Takes the new requests and the cancels; ends the cancelled ones and those that want no
 * token. Returns how many ended. */
static int64_t intake(lh_scheduler *s)
{
    pthread_mutex_lock(&s->mu);
    req *in = s->in_head;
    s->in_head = s->in_tail = NULL;
    uint64_t *cancels = s->cancels;
    size_t n_cancels = s->n_cancels;
    s->cancels = NULL;
    s->n_cancels = s->cap_cancels = 0;
    pthread_mutex_unlock(&s->mu);
    for (req *r = in, *nx; r; r = nx) {
        nx = r->next;
        wait_push_back(s, r);
    }
    int64_t ended = 0;
    for (size_t c = 0; c < n_cancels; c++) {
        for (int64_t i = 0; i < s->slots; i++)
            if (s->running[i] && s->running[i]->id == cancels[c]) {
                finish(s, s->running[i], -1, LH_STOP_CANCELLED);
                ended++;
            }
        for (req **pp = &s->wait_head; *pp;) {
            req *r = *pp;
            if (r->id != cancels[c]) {
                pp = &r->next;
                continue;
            }
            *pp = r->next;
            if (s->wait_tail == r) { /* the new tail is the entry before, if any */
                s->wait_tail = NULL;
                for (req *q = s->wait_head; q; q = q->next)
                    s->wait_tail = q;
            }
            finish(s, r, -1, LH_STOP_CANCELLED);
            ended++;
        }
    }
    free(cancels);
    for (req **pp = &s->wait_head; *pp;) { /* nothing to generate: done at once */
        req *r = *pp;
        if (r->max_new > 0) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (s->wait_tail == r) {
            s->wait_tail = NULL;
            for (req *q = s->wait_head; q; q = q->next)
                s->wait_tail = q;
        }
        finish(s, r, -1, LH_STOP_LENGTH);
        ended++;
    }
    return ended;
}

/* Appends request r with `chunk` tokens to the step being planned (n entries so far). */
static void plan_add(lh_scheduler *s, int64_t *n, int64_t *used, req *r, int64_t chunk)
{
    s->sched[*n] = r;
    s->chunk[*n] = chunk;
    (*n)++;
    *used += chunk;
}

/* Sends a request back to wait (its blocks freed, to be recomputed from its first token). */
static void preempt(lh_scheduler *s, req *r)
{
    lh_runner_release(s->d, r->slot);
    s->running[r->slot] = NULL;
    r->slot = -1;
    r->computed = 0;
    wait_push_front(s, r);
}

/* Plans the step: every decode, then prefill chunks, within the budget and the pool. */
static lh_status plan(lh_scheduler *s, int64_t *n_out, int64_t *preempted, int64_t *cached,
                      lh_err *err)
{
    int64_t n = 0, used = 0;
    /* 1. one token for each request that is decoding */
    for (int64_t i = 0; i < s->slots; i++) {
        req *r = s->running[i];
        if (r && r->n_tok - r->computed == 1)
            plan_add(s, &n, &used, r, 1);
    }
    const int64_t n_decodes = n;
    /* 2. prompts (and recomputes) under way, the oldest first; then new ones as slots allow */
    for (;;) {
        req *best = NULL;
        for (int64_t i = 0; i < s->slots; i++) {
            req *r = s->running[i];
            if (!r || r->n_tok - r->computed <= 1 || (best && r->id > best->id))
                continue;
            bool planned = false;
            for (int64_t k = n_decodes; k < n && !planned; k++)
                planned = s->sched[k] == r;
            if (!planned)
                best = r;
        }
        if (!best)
            break;
        if (used >= s->budget)
            break;
        const int64_t left = best->n_tok - best->computed;
        plan_add(s, &n, &used, best, left < s->budget - used ? left : s->budget - used);
    }
    while (used < s->budget && s->wait_head) {
        int64_t free_slot = -1;
        for (int64_t i = 0; i < s->slots && free_slot < 0; i++)
            if (!s->running[i])
                free_slot = i;
        if (free_slot < 0)
            break;
        req *r = wait_pop(s);
        r->slot = free_slot;
        r->admitted = true;
        s->running[free_slot] = r;
        /* the longest prefix of whole cached blocks comes from the cache (0 when off) */
        const int64_t hit = s->prefix ? lh_kv_cache_attach_prefix(
                                            (lh_kv_cache *)lh_runner_kv(s->d), free_slot,
                                            r->tok, r->n_tok)
                                      : 0;
        r->computed = hit;
        *cached += hit;
        if (!r->seen)
            r->cached = hit;
        r->seen = true;
        const int64_t left = r->n_tok - r->computed;
        plan_add(s, &n, &used, r, left < s->budget - used ? left : s->budget - used);
    }
    /* 3. the pool: all or nothing; prefill chunks give way first, then the newest request */
    lh_kv_cache *kv = (lh_kv_cache *)lh_runner_kv(s->d);
    while (kv && n > 0) {
        for (int64_t k = 0; k < n; k++) {
            s->slot[k] = s->sched[k]->slot;
            s->after[k] = s->sched[k]->computed + s->chunk[k];
        }
        lh_err e = {0};
        lh_status st = lh_kv_cache_reserve(kv, s->slot, s->after, n, &e);
        if (st == LH_OK)
            break;
        if (st != LH_E_UNSUPPORTED)
            return lh_err_set(err, st, "scheduler: %s", e.msg);
        if (n > n_decodes) { /* the last prefill chunk waits */
            req *r = s->sched[--n];
            if (r->admitted) { /* new in this step: back to the front of the queue */
                *cached -= r->computed;
                lh_runner_release(s->d, r->slot);
                s->running[r->slot] = NULL;
                r->slot = -1;
                r->computed = 0;
                r->admitted = false;
                wait_push_front(s, r);
            }
            continue;
        }
        /* only decodes left: the newest running request gives its blocks back */
        req *victim = NULL;
        for (int64_t i = 0; i < s->slots; i++)
            if (s->running[i] && (!victim || s->running[i]->id > victim->id))
                victim = s->running[i];
        int64_t k = 0;
        while (k < n && s->sched[k] != victim)
            k++;
        if (k < n) { /* out of this step */
            s->sched[k] = s->sched[n - 1];
            s->chunk[k] = s->chunk[n - 1];
            n--;
        }
        preempt(s, victim);
        (*preempted)++;
    }
    for (int64_t k = 0; k < n; k++)
        s->sched[k]->admitted = false;
    *n_out = n;
    return LH_OK;
}

static bool is_stop(const req *r, int32_t id)
{
    for (int64_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id)
            return true;
    return false;
}

/* r's log-probabilities of `id` and of its n_top most likely ids, from the logits row (on
 * the device): a log-softmax in double, over the raw logits. */
static lh_status logprobs(lh_scheduler *s, const lh_tensor *row, req *r, int32_t id,
                          lh_err *err)
{
    const int64_t vocab = row->shape[1];
    const float *x = row->data;
    if (row->device.kind != LH_DEVICE_CPU) {
        if (!s->host_row && !(s->host_row = malloc((size_t)vocab * sizeof *s->host_row)))
            return lh_err_set(err, LH_E_NOMEM, "request %llu: out of memory for logprobs",
                              (unsigned long long)r->id);
        lh_tensor host = lh_tensor_cpu(LH_DTYPE_F32, s->host_row, 2, row->shape);
        if (lh_k_copy(s->kctx, &host, row) != LH_OK)
            return lh_err_set(err, LH_E_UNSUPPORTED, "request %llu: reading the logits back "
                              "for logprobs: %s", (unsigned long long)r->id,
                              lh_k_last_error(s->kctx));
        x = s->host_row;
    }
    double mx = -INFINITY;
    for (int64_t v = 0; v < vocab; v++)
        if (x[v] > mx)
            mx = x[v];
    double sum = 0;
    for (int64_t v = 0; v < vocab; v++)
        sum += exp((double)x[v] - mx);
    const double lse = mx + log(sum);
    r->lp = (float)((double)x[id] - lse);
    /* the n_top largest by insertion into a sorted list: n_top <= 20, so O(vocab x 20) */
    int32_t n = 0;
    for (int64_t v = 0; v < vocab && r->n_top > 0; v++) {
        if (n == r->n_top && !(x[v] > x[r->top_ids[n - 1]]))
            continue;
        int32_t k = n < r->n_top ? n++ : n - 1;
        while (k > 0 && x[v] > x[r->top_ids[k - 1]]) {
            r->top_ids[k] = r->top_ids[k - 1];
            k--;
        }
        r->top_ids[k] = (int32_t)v;
    }
    for (int32_t k = 0; k < n; k++)
        r->top_lp[k] = (float)((double)x[r->top_ids[k]] - lse);
    return LH_OK;
}

/* Chooses row j's next token (logits [rows, vocab] on the device) with r's parameters. */
static lh_status choose(lh_scheduler *s, const lh_tensor *logits, int64_t j, req *r, int32_t *id,
                        lh_err *err)
{
    const int64_t vocab = logits->shape[1];
    const int64_t shape[2] = {1, vocab};
    lh_tensor row = lh_tensor_view(logits, 2, shape);
    row.data = (float *)logits->data + j * vocab;
    lh_status st;
    if (r->plain_greedy) {
        st = lh_k_argmax(s->kctx, &row, id);
    } else {
        const int32_t *hist = r->tok;
        const int64_t hist_len = r->n_tok;
        const uint64_t step = (uint64_t)r->n_gen;
        st = lh_k_sample(s->kctx, &r->kp, &row, &hist, &hist_len, r->seed, &r->stream, &step,
                         id);
    }
    if (st != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED, "request %llu: %s choice: %s",
                          (unsigned long long)r->id, r->plain_greedy ? "greedy" : "sampled",
                          lh_k_last_error(s->kctx));
    return r->logprobs ? logprobs(s, &row, r, *id, err) : LH_OK;
}

/* One step; the latencies it observed go to d (merged into the metrics by the caller). */
static lh_status step_inner(lh_scheduler *s, lh_scheduler_step_info *info,
                            lh_scheduler_metrics *d, lh_err *err)
{
    info->finished = intake(s);
    int64_t n = 0;
    lh_status st = plan(s, &n, &info->preempted, &info->cached, err);
    if (st == LH_OK && n > 0) {
        int64_t t = 0, n_out = 0;
        for (int64_t k = 0; k < n; k++) {
            req *r = s->sched[k];
            s->token_start[k] = t;
            s->n_new[k] = s->chunk[k];
            s->ctx_len[k] = r->computed;
            s->slot[k] = r->slot;
            for (int64_t i = 0; i < s->chunk[k]; i++, t++) {
                s->tokens[t] = r->tok[r->computed + i];
                s->positions[t] = (int32_t)(r->computed + i);
            }
            if (r->computed + s->chunk[k] == r->n_tok) { /* its next token is due */
                s->out_rows[n_out] = t - 1;
                s->out_of[n_out++] = k;
            }
            if (s->chunk[k] == 1 && r->n_tok - r->computed == 1 && r->n_gen > 0)
                info->decodes++;
            else
                info->prefill += s->chunk[k];
        }
        info->tokens = t;
        const lh_attn_step step = {.struct_size = sizeof step, .n_tokens = t, .n_seqs = n,
                                   .positions = s->positions, .token_start = s->token_start,
                                   .n_new = s->n_new, .ctx_len = s->ctx_len, .slot = s->slot};
        lh_tensor logits = {0};
        st = lh_runner_forward_dev(s->d, s->kctx, &step, s->tokens, s->out_rows, n_out, &logits,
                                   err);
        int32_t *ids = st == LH_OK && n_out ? malloc((size_t)n_out * sizeof *ids) : NULL;
        if (st == LH_OK && n_out && !ids)
            st = lh_err_set(err, LH_E_NOMEM, "out of memory");
        for (int64_t j = 0; j < n_out && st == LH_OK; j++)
            st = choose(s, &logits, j, s->sched[s->out_of[j]], &ids[j], err);
        if (st != LH_OK) {
            /* the step's KV is partly written: its requests end, their slots freed */
            for (int64_t k = 0; k < n; k++)
                finish(s, s->sched[k], -1, LH_STOP_CANCELLED);
            info->finished += n;
            free(ids);
            return st;
        }
        lh_kv_cache *kv = (lh_kv_cache *)lh_runner_kv(s->d);
        for (int64_t k = 0; k < n; k++) { /* what is written is whole blocks to share */
            req *r = s->sched[k];
            r->computed += s->chunk[k];
            if (s->prefix)
                lh_kv_cache_publish(kv, r->slot, r->tok, r->computed);
        }
        const double t_now = now_s();
        for (int64_t j = 0; j < n_out; j++) {
            req *r = s->sched[s->out_of[j]];
            r->tok[r->n_tok++] = ids[j];
            r->n_gen++;
            info->sampled++;
            if (r->n_gen == 1)
                observe(d->ttft_buckets, &d->ttft_count, &d->ttft_sum, t_now - r->t_submit);
            else
                observe(d->itl_buckets, &d->itl_count, &d->itl_sum, t_now - r->t_last);
            r->t_last = t_now;
            const bool eos = is_stop(r, ids[j]), full = r->n_gen == r->max_new;
            bool matched = false;
            lh_err me = {0};
            /* an id the matcher cannot take (out of memory) matches nothing */
            if (r->stop_m && lh_stop_matcher_step(r->stop_m, ids[j], &matched, NULL, &me) != LH_OK)
                matched = false;
            if (eos || full || matched) {
                finish(s, r, ids[j], eos ? LH_STOP_EOS : matched ? LH_STOP_STRING
                                                                 : LH_STOP_LENGTH);
                info->finished++;
            } else {
                notify(r, ids[j], false, LH_STOP_LENGTH);
            }
        }
        free(ids);
    }
    for (int64_t i = 0; i < s->slots; i++)
        info->running += s->running[i] != NULL;
    for (req *r = s->wait_head; r; r = r->next)
        info->waiting++;
    return st;
}

lh_status lh_scheduler_step(lh_scheduler *s, lh_scheduler_step_info *info, lh_err *err)
{
    lh_scheduler_step_info dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    if (!s)
        return lh_err_set(err, LH_E_USAGE, "step: no scheduler");
    lh_scheduler_metrics d;
    memset(&d, 0, sizeof d);
    const lh_status st = step_inner(s, info, &d, err);
    const lh_kv_cache *kv = lh_runner_kv(s->d);
    pthread_mutex_lock(&s->mu);
    lh_scheduler_metrics *m = &s->m;
    m->steps += info->tokens > 0;
    m->running = info->running;
    m->waiting = info->waiting;
    if (kv) {
        m->kv_blocks_total = lh_kv_cache_plan(kv)->num_blocks;
        m->kv_blocks_used = m->kv_blocks_total - lh_kv_cache_free_blocks(kv);
    }
    m->finished += info->finished;
    m->preempted += info->preempted;
    m->prompt_tokens += info->prefill;
    m->generated_tokens += info->sampled;
    m->prefix_cached_tokens += info->cached;
    m->ttft_count += d.ttft_count;
    m->itl_count += d.itl_count;
    m->ttft_sum += d.ttft_sum;
    m->itl_sum += d.itl_sum;
    for (int i = 0; i < LH_LATENCY_BUCKETS; i++) {
        m->ttft_buckets[i] += d.ttft_buckets[i];
        m->itl_buckets[i] += d.itl_buckets[i];
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}
