/* The continuous-batching scheduler (lh_scheduler_*, llmhost.h) against isolated runs:
 *  - 32 greedy requests of different lengths, submitted while others run, with a token
 *    budget small enough to chunk prompts: each gives the tokens lh_engine_generate gives it
 *    alone (f32 fixtures: Llama, Qwen3-MoE, DeepSeek-V3 with latent attention; paged and
 *    vanilla);
 *  - seeded sampling: each request's tokens equal its isolated seeded run;
 *  - a KV pool too small for everyone: requests are preempted and recomputed, none fails, the
 *    tokens are unchanged;
 *  - stop ids, max_new_tokens 0, cancel (queued and running), submits from several threads
 *    while one thread steps;
 *  - refusals: an empty prompt, ids outside the vocabulary, more than max_seq_len, more than
 *    the whole pool, a budget below the slots. */
#include "llmhost.h"
#include "rt_host.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_MSG(err, needle)                                                                 \
    do {                                                                                       \
        bool found_ = strstr((err).msg, (needle)) != NULL;                                     \
        if (!found_)                                                                           \
            fprintf(stderr, "\nmessage '%s' lacks '%s'\n", (err).msg, (needle));               \
        CU_ASSERT(found_);                                                                     \
    } while (0)

#define N_REQ 32
#define MAX_NEW 12
#define MAX_LEN 48

static lh_host *host;

typedef struct outcome {
    int32_t tokens[MAX_NEW];
    int64_t n;
    bool ended;
    lh_stop_reason why;
    int32_t last_token;
    int64_t cached; /* the events' cached_tokens */
    int bad; /* a callback after the end, or past MAX_NEW */
} outcome;

typedef struct collector {
    outcome out[N_REQ + 8];
    uint64_t first_id;
    pthread_mutex_t mu; /* submitters and the stepping thread */
} collector;

static void on_token(void *user, const lh_token_event *ev)
{
    collector *c = user;
    const int32_t token = ev->token;
    const bool last = ev->last;
    const lh_stop_reason why = ev->why;
    outcome *o = &c->out[ev->id - c->first_id];
    o->cached = ev->cached_tokens;
    if (o->ended) {
        o->bad++;
        return;
    }
    if (token >= 0) {
        if (o->n < MAX_NEW)
            o->tokens[o->n++] = token;
        else
            o->bad++;
    }
    if (last) {
        o->ended = true;
        o->why = why;
        o->last_token = token;
    }
}

/* lh_scheduler_submit of a request with these fields, stream 0, the collector's callback. */
static lh_status submit(lh_scheduler *s, const int32_t *prompt, int64_t len,
                        const lh_generate_params *p, void *user, uint64_t *id, lh_err *err)
{
    const lh_request r = {.struct_size = sizeof r, .prompt = prompt, .prompt_len = len,
                          .params = p, .on_token = on_token, .user = user};
    return lh_scheduler_submit(s, &r, id, err);
}

static lh_engine *open_engine(const char *fixture, const char *backend, const char *kv_tokens)
{
    char dir[1200], kv[96];
    snprintf(dir, sizeof dir, "%s/models/%s", lh_test_env("LH_FIXTURES"), fixture);
    const char *ov[4] = {"max_batch_size=32", "max_seq_len=64", NULL, NULL};
    if (kv_tokens) {
        snprintf(kv, sizeof kv, "kv_cache.max_tokens=%s", kv_tokens);
        ov[2] = kv;
    }
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .overrides = ov,
                           .attn_backend = backend};
    lh_engine *e = NULL;
    lh_err err = {0};
    if (lh_engine_open(host, &o, &e, &err) != LH_OK)
        fprintf(stderr, "\n  %s (%s): %s\n", fixture, backend, err.msg);
    return e;
}

/* Request i's prompt: 1 .. MAX_LEN - MAX_NEW ids from a fixed generator. */
static int64_t make_prompt(int i, int32_t *p, int64_t vocab)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    const int64_t n = 1 + (int64_t)((uint64_t)i * 7 % (MAX_LEN - MAX_NEW));
    for (int64_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[k] = (int32_t)(x % (uint64_t)vocab);
    }
    return n;
}

static lh_generate_params params(const lh_engine *e, bool sample, uint64_t seed)
{
    lh_generate_params p = {.struct_size = sizeof p};
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_engine_generation_defaults(e, &p, &err), LH_OK);
    p.do_sample = sample;
    p.temperature = sample ? 0.9f : 1.0f;
    p.top_k = sample ? 40 : 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.seed = seed;
    p.max_new_tokens = MAX_NEW;
    p.stop_ids = NULL;
    p.n_stop_ids = 0;
    return p;
}

/* The tokens request i gets alone: lh_engine_generate of its prompt as a batch of one. */
static int64_t alone(lh_engine *e, const lh_generate_params *p, const int32_t *prompt,
                     int64_t len, int32_t *out)
{
    int64_t n = 0;
    lh_stop_reason why;
    lh_err err = {0};
    const int32_t *const prompts[1] = {prompt};
    CU_ASSERT_EQUAL(lh_engine_generate(e, p, prompts, &len, 1, out, &n, &why, &err), LH_OK);
    return n;
}

/* Runs N_REQ requests through a scheduler with a budget of `budget` tokens, submitted in
 * waves (a third, then more after some steps), and compares each with its run alone. Returns
 * the requests preempted over the run. */
static int64_t check_against_alone(lh_engine *e, bool sample, int64_t budget, const char *what)
{
    const int64_t vocab = lh_engine_vocab_size(e);
    int32_t prompt[N_REQ][MAX_LEN];
    int64_t len[N_REQ];
    int32_t ref[N_REQ][MAX_NEW];
    int64_t ref_n[N_REQ];
    lh_generate_params p[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        len[i] = make_prompt(i, prompt[i], vocab);
        p[i] = params(e, sample, 1000u + (uint64_t)i);
        ref_n[i] = alone(e, &p[i], prompt[i], len[i], ref[i]);
    }
    lh_scheduler *s = NULL;
    lh_err err = {0};
    const lh_scheduler_options so = {.struct_size = sizeof so, .max_num_batched_tokens = budget};
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, &so, &s, &err), LH_OK);
    collector *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    int submitted = 0, steps = 0;
    int64_t preempted = 0, max_running = 0;
    while (submitted < N_REQ || lh_scheduler_busy(s)) {
        /* waves: 10 at first, then 4 more every third step */
        int want = submitted == 0 ? 10 : (steps % 3 == 0 ? 4 : 0);
        for (int k = 0; k < want && submitted < N_REQ; k++, submitted++) {
            uint64_t id = 0;
            CU_ASSERT_EQUAL(submit(s, prompt[submitted], len[submitted],
                                                &p[submitted], c, &id, &err),
                            LH_OK);
            if (submitted == 0)
                c->first_id = id;
            CU_ASSERT_EQUAL(id, c->first_id + (uint64_t)submitted);
        }
        lh_scheduler_step_info info;
        lh_status st = lh_scheduler_step(s, &info, &err);
        CU_ASSERT_EQUAL(st, LH_OK);
        if (st != LH_OK) {
            fprintf(stderr, "\n  %s: %s\n", what, err.msg);
            break;
        }
        CU_ASSERT(info.tokens <= budget);
        preempted += info.preempted;
        if (info.running > max_running)
            max_running = info.running;
        CU_ASSERT_FATAL(++steps < 10000);
    }
    int mismatched = 0;
    for (int i = 0; i < N_REQ; i++) {
        const outcome *o = &c->out[i];
        CU_ASSERT(o->ended);
        CU_ASSERT_EQUAL(o->bad, 0);
        CU_ASSERT_EQUAL(o->n, ref_n[i]);
        CU_ASSERT_EQUAL(o->why, LH_STOP_LENGTH);
        if (o->n != ref_n[i] || memcmp(o->tokens, ref[i], (size_t)o->n * sizeof(int32_t)) != 0)
            mismatched++;
    }
    printf("\n    %s: %d requests in %d steps (budget %lld tokens, up to %lld running, %lld "
           "preemptions): %d differ from their run alone", what, N_REQ, steps,
           (long long)budget, (long long)max_running, (long long)preempted, mismatched);
    CU_ASSERT_EQUAL(mismatched, 0);
    /* the metrics count the same run */
    lh_scheduler_metrics m = {.struct_size = sizeof m};
    lh_scheduler_metrics_get(s, &m);
    int64_t generated = 0;
    for (int i = 0; i < N_REQ; i++)
        generated += ref_n[i];
    CU_ASSERT_EQUAL(m.submitted, N_REQ);
    CU_ASSERT_EQUAL(m.finished, N_REQ);
    CU_ASSERT_EQUAL(m.preempted, preempted);
    CU_ASSERT_EQUAL(m.generated_tokens, generated);
    CU_ASSERT_EQUAL(m.ttft_count, N_REQ);
    CU_ASSERT_EQUAL(m.itl_count, generated - N_REQ);
    CU_ASSERT(m.steps > 0 && m.steps <= steps);
    CU_ASSERT(m.running == 0 && m.waiting == 0 && m.kv_blocks_used == 0);
    CU_ASSERT(m.ttft_sum >= 0 && m.itl_sum >= 0);
    for (int i = 0; i < LH_LATENCY_BUCKETS; i++) {
        CU_ASSERT(i == 0 || m.ttft_buckets[i] >= m.ttft_buckets[i - 1]);
        CU_ASSERT(i == 0 || m.itl_buckets[i] >= m.itl_buckets[i - 1]);
    }
    CU_ASSERT_EQUAL(m.ttft_buckets[LH_LATENCY_BUCKETS - 1], m.ttft_count);
    CU_ASSERT_EQUAL(m.itl_buckets[LH_LATENCY_BUCKETS - 1], m.itl_count);
    lh_scheduler_metrics small = {.struct_size = 4, .steps = -7};
    lh_scheduler_metrics_get(s, &small); /* too small: untouched */
    CU_ASSERT_EQUAL(small.steps, -7);
    free(c);
    lh_scheduler_free(s);
    return preempted;
}

static void test_greedy_equals_alone(void)
{
    static const char *const fixtures[] = {"llama-mha-f32", "qwen3moe-f32", "deepseek-v3-f32"};
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        for (int b = 0; b < 2; b++) {
            const char *backend = b ? "vanilla" : "paged";
            lh_engine *e = open_engine(fixtures[f], backend, NULL);
            CU_ASSERT_PTR_NOT_NULL_FATAL(e);
            char what[96];
            snprintf(what, sizeof what, "%s (%s), greedy", fixtures[f], backend);
            check_against_alone(e, false, 48, what);
            lh_engine_close(e);
        }
    }
}

static void test_sampled_equals_alone(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    check_against_alone(e, true, 40, "llama-mha-f32, seeded sampling");
    lh_engine_close(e);
}

static void test_preemption(void)
{
    /* 12 blocks of 16 tokens: about four requests' worth */
    lh_engine *e = open_engine("llama-mha-f32", "paged", "192");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int64_t preempted = check_against_alone(e, false, 64, "llama-mha-f32, 192-token pool");
    CU_ASSERT(preempted > 0);
    lh_engine_close(e);
}

/* Steps until nothing is queued (bounded). */
static void drain(lh_scheduler *s)
{
    lh_err err = {0};
    for (int i = 0; i < 1000 && lh_scheduler_busy(s); i++)
        CU_ASSERT_EQUAL_FATAL(lh_scheduler_step(s, NULL, &err), LH_OK);
    CU_ASSERT_FALSE(lh_scheduler_busy(s));
}

static void test_stop_cancel_and_zero(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int64_t vocab = lh_engine_vocab_size(e);
    int32_t prompt[MAX_LEN], ref[MAX_NEW];
    const int64_t len = make_prompt(5, prompt, vocab);
    lh_generate_params p = params(e, false, 0);
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, prompt, len, ref), MAX_NEW);
    lh_scheduler *s = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    collector *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    /* 0: the third token is a stop id; 1: no token wanted; 2: cancelled while queued;
     * 3: cancelled after its first token; 4: runs to the end */
    lh_generate_params ps = p, pz = p;
    ps.stop_ids = &ref[2];
    ps.n_stop_ids = 1;
    pz.max_new_tokens = 0;
    uint64_t id[5];
    CU_ASSERT_EQUAL(submit(s, prompt, len, &ps, c, &id[0], &err), LH_OK);
    c->first_id = id[0];
    CU_ASSERT_EQUAL(submit(s, prompt, len, &pz, c, &id[1], &err), LH_OK);
    CU_ASSERT_EQUAL(submit(s, prompt, len, &p, c, &id[2], &err), LH_OK);
    lh_scheduler_cancel(s, id[2]);
    CU_ASSERT_EQUAL(submit(s, prompt, len, &p, c, &id[3], &err), LH_OK);
    CU_ASSERT_EQUAL(submit(s, prompt, len, &p, c, &id[4], &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_step(s, NULL, &err), LH_OK); /* the prefills */
    CU_ASSERT_EQUAL(c->out[3].n, 1);
    lh_scheduler_cancel(s, id[3]);
    lh_scheduler_cancel(s, 999999); /* unknown: ignored */
    drain(s);
    const outcome *o = c->out;
    CU_ASSERT_EQUAL(o[0].why, LH_STOP_EOS);
    CU_ASSERT_EQUAL(o[0].n, 3);
    CU_ASSERT_EQUAL(o[0].last_token, ref[2]);
    CU_ASSERT_EQUAL(memcmp(o[0].tokens, ref, 3 * sizeof(int32_t)), 0);
    CU_ASSERT(o[1].ended && o[1].n == 0 && o[1].why == LH_STOP_LENGTH && o[1].last_token == -1);
    CU_ASSERT(o[2].ended && o[2].n == 0 && o[2].why == LH_STOP_CANCELLED);
    CU_ASSERT(o[3].ended && o[3].n == 1 && o[3].why == LH_STOP_CANCELLED &&
              o[3].last_token == -1);
    CU_ASSERT(o[4].ended && o[4].n == MAX_NEW && o[4].why == LH_STOP_LENGTH);
    CU_ASSERT_EQUAL(memcmp(o[4].tokens, ref, sizeof ref), 0);
    lh_scheduler_cancel(s, id[4]); /* already ended: ignored */
    drain(s);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(o[i].bad, 0);
    free(c);
    lh_scheduler_free(s);
    lh_engine_close(e);
}

/* Stop strings: the request ends with the token that completes one (LH_STOP_STRING), as
 * lh_stop_matcher says over its prompt and tokens; the others are not affected. */
static void test_stop_strings(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizers/bpe_gpt2.json", lh_test_env("LH_FIXTURES"));
    lh_tokenizer *tok = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_tokenizer_load(path, &tok, &err), LH_OK);
    int32_t prompt[MAX_LEN], ref[MAX_NEW];
    const int64_t len = make_prompt(7, prompt, lh_engine_vocab_size(e));
    lh_generate_params p = params(e, false, 0);
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, prompt, len, ref), MAX_NEW);
    /* the stop string: what the first new token from the third on that reads as printable
     * ASCII reads as (a lone byte of a multi-byte character decodes to U+FFFD instead) */
    char *text = NULL;
    size_t tlen = 0;
    int64_t at = -1;
    for (int64_t k = 2; k < MAX_NEW && at < 0; k++) {
        free(text);
        text = NULL;
        CU_ASSERT_EQUAL_FATAL(lh_tokenizer_decode(tok, &ref[k], 1, false, &text, &tlen, &err),
                              LH_OK);
        bool ascii = tlen > 0;
        for (size_t i = 0; i < tlen; i++)
            ascii = ascii && text[i] > ' ' && text[i] < 127;
        if (ascii)
            at = k;
    }
    CU_ASSERT_FATAL(at >= 0);
    const char *stops[1] = {text};
    /* where the matcher itself ends the sequence */
    lh_stop_matcher *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_stop_matcher_create(tok, stops, 1, &m, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_stop_matcher_add_context(m, prompt, (size_t)len, &err), LH_OK);
    int64_t want = -1;
    for (int64_t k = 0; k < MAX_NEW && want < 0; k++) {
        bool hit = false;
        CU_ASSERT_EQUAL(lh_stop_matcher_step(m, ref[k], &hit, NULL, &err), LH_OK);
        if (hit)
            want = k + 1;
    }
    lh_stop_matcher_free(m);
    CU_ASSERT_FATAL(want > 0 && want <= at + 1);
    lh_scheduler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    collector *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const lh_request with = {.struct_size = sizeof with, .prompt = prompt, .prompt_len = len,
                             .params = &p, .stop_strings = stops, .n_stop_strings = 1,
                             .tokenizer = tok, .on_token = on_token, .user = c};
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &with, &c->first_id, &err), LH_OK);
    CU_ASSERT_EQUAL(submit(s, prompt, len, &p, c, NULL, &err), LH_OK); /* no stop strings */
    drain(s);
    CU_ASSERT_EQUAL(c->out[0].why, LH_STOP_STRING);
    CU_ASSERT_EQUAL(c->out[0].n, want);
    CU_ASSERT_EQUAL(memcmp(c->out[0].tokens, ref, (size_t)want * sizeof(int32_t)), 0);
    CU_ASSERT_EQUAL(c->out[1].why, LH_STOP_LENGTH);
    CU_ASSERT_EQUAL(memcmp(c->out[1].tokens, ref, sizeof ref), 0);
    /* refused: stop strings without a tokenizer, an empty one */
    lh_request bad = with;
    bad.tokenizer = NULL;
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &bad, NULL, &err), LH_E_USAGE);
    CHECK_MSG(err, "no tokenizer");
    const char *empty[1] = {""};
    bad = with;
    bad.stop_strings = empty;
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &bad, NULL, &err), LH_E_USAGE);
    CHECK_MSG(err, "stop string 0 is empty");
    bad = with;
    bad.struct_size = 8;
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &bad, NULL, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, NULL, NULL, &err), LH_E_USAGE);
    CU_ASSERT_FALSE(lh_scheduler_busy(s));
    free(text);
    free(c);
    lh_scheduler_free(s);
    lh_tokenizer_free(tok);
    lh_engine_close(e);
}

typedef struct submitter {
    lh_scheduler *s;
    collector *c;
    const int32_t *prompt;
    int64_t len;
    const lh_generate_params *p;
    int n;
    atomic_int *done;
    int failures;
} submitter;

static void *submit_thread(void *arg)
{
    submitter *t = arg;
    lh_err err = {0};
    for (int i = 0; i < t->n; i++)
        if (submit(t->s, t->prompt, t->len, t->p, t->c, NULL, &err) !=
            LH_OK)
            t->failures++;
    atomic_fetch_add(t->done, 1);
    return NULL;
}

static void test_submit_from_threads(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int32_t prompt[MAX_LEN], ref[MAX_NEW];
    const int64_t len = make_prompt(3, prompt, lh_engine_vocab_size(e));
    lh_generate_params p = params(e, false, 0);
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, prompt, len, ref), MAX_NEW);
    lh_scheduler *s = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    collector *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    c->first_id = 1; /* the first id a scheduler hands out */
    atomic_int done;
    atomic_init(&done, 0);
    enum { THREADS = 4, EACH = 6 };
    submitter t[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        t[i] = (submitter){.s = s, .c = c, .prompt = prompt, .len = len, .p = &p, .n = EACH,
                           .done = &done};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, submit_thread, &t[i]), 0);
    }
    for (int i = 0; i < 10000 && (atomic_load(&done) < THREADS || lh_scheduler_busy(s)); i++)
        CU_ASSERT_EQUAL_FATAL(lh_scheduler_step(s, NULL, &err), LH_OK);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_EQUAL(t[i].failures, 0);
    }
    drain(s);
    for (int i = 0; i < THREADS * EACH; i++) {
        CU_ASSERT(c->out[i].ended && c->out[i].bad == 0);
        CU_ASSERT_EQUAL(memcmp(c->out[i].tokens, ref, sizeof ref), 0);
    }
    free(c);
    lh_scheduler_free(s);
    lh_engine_close(e);
}


static void test_refusals(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", "64");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_scheduler *s = NULL;
    lh_err err = {0};
    const lh_scheduler_options small = {.struct_size = sizeof small,
                                        .max_num_batched_tokens = 8};
    CU_ASSERT_EQUAL(lh_scheduler_create(e, &small, &s, &err), LH_E_USAGE);
    CHECK_MSG(err, "max_num_batched_tokens 8");
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(lh_scheduler_create(NULL, NULL, &s, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    lh_generate_params p = params(e, false, 0);
    int32_t prompt[70] = {0};
    CU_ASSERT_EQUAL(submit(s, prompt, 0, &p, NULL, NULL, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "empty prompt");
    prompt[1] = (int32_t)lh_engine_vocab_size(e);
    CU_ASSERT_EQUAL(submit(s, prompt, 2, &p, NULL, NULL, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "outside the vocabulary");
    prompt[1] = 0;
    CU_ASSERT_EQUAL(submit(s, prompt, 60, &p, NULL, NULL, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "max_seq_len 64");
    /* a 32-token pool (2 blocks of 16) cannot hold 40 + 2 cached tokens */
    p.max_new_tokens = 3;
    lh_engine *small_pool = open_engine("llama-mha-f32", "paged", "32");
    CU_ASSERT_PTR_NOT_NULL_FATAL(small_pool);
    lh_scheduler *s2 = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(small_pool, NULL, &s2, &err), LH_OK);
    CU_ASSERT_EQUAL(submit(s2, prompt, 40, &p, NULL, NULL, &err),
                    LH_E_UNSUPPORTED);
    CHECK_MSG(err, "needs 3 KV blocks of 16 tokens");
    CHECK_MSG(err, "the whole pool has 2");
    p.temperature = -1.0f;
    p.do_sample = true;
    CU_ASSERT_EQUAL(submit(s, prompt, 2, &p, NULL, NULL, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "temperature");
    CU_ASSERT_FALSE(lh_scheduler_busy(s));
    lh_scheduler_free(s2);
    lh_engine_close(small_pool);
    lh_scheduler_free(s);
    lh_engine_close(e);
}

/* Runs `n` requests on s (submitted at once) to their ends; returns the tokens the first step
 * took from the prefix cache. */
static int64_t run_all(lh_scheduler *s, collector *c, const int32_t *const *prompts,
                       const int64_t *lens, int n, const lh_generate_params *p)
{
    lh_err err = {0};
    for (int i = 0; i < n; i++) {
        uint64_t id;
        CU_ASSERT_EQUAL(submit(s, prompts[i], lens[i], p, c, &id,
                                            &err), LH_OK);
        if (i == 0)
            c->first_id = id;
    }
    lh_scheduler_step_info info;
    CU_ASSERT_EQUAL(lh_scheduler_step(s, &info, &err), LH_OK);
    drain(s);
    return info.cached;
}

static void test_prefix_caching(void)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/models/llama-mha-f32", lh_test_env("LH_FIXTURES"));
    const char *ov[] = {"max_batch_size=4", "max_seq_len=1100", NULL};
    lh_engine_options eo = {.struct_size = sizeof eo, .model = dir, .overrides = ov};
    lh_engine *e = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_engine_open(host, &eo, &e, &err), LH_OK);
    /* a 1,000-token system prompt, then each request's own words */
    enum { SYS = 1000 };
    int32_t a[SYS + 10], b[SYS + 7];
    int32_t tail[40];
    for (int i = 0; i < SYS; i++)
        a[i] = b[i] = (int32_t)((i * 37 + 11) % lh_engine_vocab_size(e));
    make_prompt(20, tail, lh_engine_vocab_size(e));
    for (int i = 0; i < 10; i++)
        a[SYS + i] = tail[i % 20];
    for (int i = 0; i < 7; i++)
        b[SYS + i] = tail[(i + 5) % 20] ^ 1;
    const int32_t *pa[1] = {a}, *pb[1] = {b};
    const int64_t la = SYS + 10, lb = SYS + 7;
    lh_generate_params p = params(e, false, 0);
    int32_t ref_a[MAX_NEW], ref_b[MAX_NEW];
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, a, la, ref_a), MAX_NEW);
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, b, lb, ref_b), MAX_NEW);
    /* on, then off on the same engine: a scheduler that asks for none takes none, even from
     * a pool that another one filled */
    for (int mode = 1; mode >= -1; mode -= 2) {
        lh_scheduler *s = NULL;
        const lh_scheduler_options so = {.struct_size = sizeof so, .prefix_caching = mode};
        CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, &so, &s, &err), LH_OK);
        collector *c = calloc(1, sizeof *c);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        /* cold the first time; the second time round (off) the pool holds A's blocks */
        CU_ASSERT_EQUAL(run_all(s, c, pa, &la, 1, &p), 0);
        CU_ASSERT_EQUAL(memcmp(c->out[0].tokens, ref_a, sizeof ref_a), 0);
        /* the second prefills only what follows the system prompt's whole blocks (62 of 16:
         * 992 tokens) when the cache is on; nothing is taken from it when off */
        memset(c, 0, sizeof *c);
        const int64_t cached = run_all(s, c, pb, &lb, 1, &p);
        printf("\n    prefix caching %s: the second request took %lld of its %lld prompt tokens "
               "from the cache", mode > 0 ? "on" : "off", (long long)cached, (long long)lb);
        CU_ASSERT_EQUAL(cached, mode > 0 ? 992 : 0);
        CU_ASSERT_EQUAL(c->out[0].cached, cached); /* the request hears it too */
        CU_ASSERT_EQUAL(memcmp(c->out[0].tokens, ref_b, sizeof ref_b), 0);
        /* three identical prompts at once: none can hit the others (nothing is published
         * before a step ends); then the same prompt again takes every whole block but the
         * last token's */
        memset(c, 0, sizeof *c);
        const int32_t *same[3] = {a, a, a};
        const int64_t ls[3] = {la, la, la};
        run_all(s, c, same, ls, 3, &p);
        for (int i = 0; i < 3; i++)
            CU_ASSERT_EQUAL(memcmp(c->out[i].tokens, ref_a, sizeof ref_a), 0);
        memset(c, 0, sizeof *c);
        /* 1,010 prompt tokens: 63 whole blocks (1,008) leave the last two to compute */
        CU_ASSERT_EQUAL(run_all(s, c, pa, &la, 1, &p), mode > 0 ? 1008 : 0);
        CU_ASSERT_EQUAL(memcmp(c->out[0].tokens, ref_a, sizeof ref_a), 0);
        free(c);
        lh_scheduler_free(s);
    }
    lh_engine_close(e);
    /* a backend with its own KV cache has nothing to share */
    lh_engine *v = open_engine("llama-mha-f32", "vanilla", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    lh_scheduler *s = NULL;
    const lh_scheduler_options on = {.struct_size = sizeof on, .prefix_caching = 1};
    CU_ASSERT_EQUAL(lh_scheduler_create(v, &on, &s, &err), LH_E_UNSUPPORTED);
    CHECK_MSG(err, "keeps its own KV cache");
    const lh_scheduler_options bad = {.struct_size = sizeof bad, .prefix_caching = 2};
    CU_ASSERT_EQUAL(lh_scheduler_create(v, &bad, &s, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(s);
    lh_engine_close(v);
}

/* The scheduler owns the engine's sequence slots while it lives; models whose RoPE depends
 * on the sequence length are refused; a request's random stream is its own. */
static void test_ownership_rope_and_stream(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_err err = {0};
    lh_scheduler *s = NULL, *s2 = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_scheduler_create(e, NULL, &s2, &err), LH_E_USAGE);
    CHECK_MSG(err, "belong to another scheduler");
    int32_t prompt[MAX_LEN], out[MAX_NEW];
    const int64_t len = make_prompt(4, prompt, lh_engine_vocab_size(e));
    lh_generate_params p = params(e, true, 77);
    int64_t n = 0;
    lh_stop_reason why;
    const int32_t *const prompts[1] = {prompt};
    CU_ASSERT_EQUAL(lh_engine_generate(e, &p, prompts, &len, 1, out, &n, &why, &err),
                    LH_E_USAGE);
    CHECK_MSG(err, "a scheduler holds the engine's sequence slots");
    float *logits = malloc((size_t)lh_engine_vocab_size(e) * sizeof *logits);
    CU_ASSERT_EQUAL(lh_engine_logits(e, prompt, 1, logits, &err), LH_E_USAGE);
    free(logits);
    /* stream 5, alone: lh_engine_generate's sequence with stream 5 */
    collector *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const lh_request rq = {.struct_size = sizeof rq, .prompt = prompt, .prompt_len = len,
                           .params = &p, .stream = 5, .on_token = on_token, .user = c};
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &rq, &c->first_id, &err), LH_OK);
    CU_ASSERT_EQUAL(submit(s, prompt, len, &p, c, NULL, &err), LH_OK); /* stream 0 */
    drain(s);
    lh_scheduler_free(s);
    int32_t ref5[MAX_NEW], ref0[MAX_NEW];
    const uint64_t stream5 = 5;
    lh_generate_params p5 = p;
    p5.seq_streams = &stream5;
    CU_ASSERT_EQUAL(lh_engine_generate(e, &p5, prompts, &len, 1, ref5, &n, &why, &err), LH_OK);
    CU_ASSERT_EQUAL(alone(e, &p, prompt, len, ref0), MAX_NEW);
    CU_ASSERT_EQUAL(memcmp(c->out[0].tokens, ref5, sizeof ref5), 0);
    CU_ASSERT_EQUAL(memcmp(c->out[1].tokens, ref0, sizeof ref0), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(ref5, ref0, sizeof ref0), 0); /* the streams differ */
    free(c);
    lh_engine_close(e);
    static const char *const by_length[][2] = {{"phi3-f32", "longrope"},
                                               {"llama-rope-dynamic", "dynamic RoPE"}};
    for (size_t i = 0; i < 2; i++) {
        lh_engine *r = open_engine(by_length[i][0], "paged", NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(lh_scheduler_create(r, NULL, &s, &err), LH_E_UNSUPPORTED);
        CHECK_MSG(err, by_length[i][1]);
        CHECK_MSG(err, "chunked prefill");
        lh_engine_close(r);
    }
}

/* Log-probabilities in the token events: the raw model distribution of each step, as
 * lh_engine_logits gives it for the prompt and the tokens so far. */
typedef struct lp_seen {
    int64_t n;
    int32_t tokens[MAX_NEW];
    float lp[MAX_NEW], top_lp[MAX_NEW][5];
    int32_t top_ids[MAX_NEW][5], n_top[MAX_NEW];
    int64_t cached;
} lp_seen;

static void on_lp(void *user, const lh_token_event *ev)
{
    lp_seen *c = user;
    if (ev->token < 0 || c->n == MAX_NEW)
        return;
    const int64_t k = c->n++;
    c->tokens[k] = ev->token;
    c->lp[k] = ev->logprob;
    c->n_top[k] = ev->n_top;
    for (int32_t i = 0; i < ev->n_top && i < 5; i++) {
        c->top_ids[k][i] = ev->top_ids[i];
        c->top_lp[k][i] = ev->top_logprobs[i];
    }
    c->cached = ev->cached_tokens;
}

static void test_logprobs(void)
{
    lh_engine *e = open_engine("llama-mha-f32", "paged", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int64_t vocab = lh_engine_vocab_size(e);
    int32_t seq[MAX_LEN + MAX_NEW];
    const int64_t len = make_prompt(11, seq, vocab);
    lh_generate_params p = params(e, false, 0);
    CU_ASSERT_EQUAL_FATAL(alone(e, &p, seq, len, seq + len), MAX_NEW);
    float *logits = malloc((size_t)(len + MAX_NEW) * (size_t)vocab * sizeof *logits);
    CU_ASSERT_PTR_NOT_NULL_FATAL(logits);
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_engine_logits(e, seq, len + MAX_NEW, logits, &err), LH_OK);
    lh_scheduler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_scheduler_create(e, NULL, &s, &err), LH_OK);
    lp_seen *c = calloc(1, sizeof *c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const lh_request rq = {.struct_size = sizeof rq, .prompt = seq, .prompt_len = len,
                           .params = &p, .on_token = on_lp, .user = c, .logprobs = true,
                           .top_logprobs = 5};
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &rq, NULL, &err), LH_OK);
    drain(s);
    CU_ASSERT_EQUAL_FATAL(c->n, MAX_NEW);
    double worst = 0;
    for (int64_t k = 0; k < MAX_NEW; k++) {
        CU_ASSERT_EQUAL(c->tokens[k], seq[len + k]);
        /* greedy: the chosen token is the most likely one */
        CU_ASSERT_EQUAL(c->n_top[k], 5);
        CU_ASSERT_EQUAL(c->top_ids[k][0], c->tokens[k]);
        CU_ASSERT_EQUAL(c->top_lp[k][0], c->lp[k]);
        const float *row = logits + (size_t)(len - 1 + k) * (size_t)vocab;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < vocab; v++)
            mx = row[v] > mx ? row[v] : mx;
        for (int64_t v = 0; v < vocab; v++)
            sum += exp((double)row[v] - mx);
        for (int i = 0; i < 5; i++) {
            const double want = (double)row[c->top_ids[k][i]] - mx - log(sum);
            worst = fmax(worst, fabs(want - (double)c->top_lp[k][i]));
            if (i > 0) /* most likely first, and nothing left out is more likely */
                CU_ASSERT(c->top_lp[k][i] <= c->top_lp[k][i - 1]);
        }
        int above = 0;
        for (int64_t v = 0; v < vocab; v++)
            above += row[v] > row[c->top_ids[k][4]];
        CU_ASSERT(above <= 4);
    }
    printf("\n    logprobs vs lh_engine_logits: max |d| %.2e", worst);
    CU_ASSERT(worst < 1e-4);
    CU_ASSERT_EQUAL(c->cached, 0);
    /* refused: more alternatives than 20, alternatives without logprobs */
    lh_request bad = rq;
    bad.top_logprobs = LH_MAX_TOP_LOGPROBS + 1;
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &bad, NULL, &err), LH_E_USAGE);
    CHECK_MSG(err, "top_logprobs = 21 is outside [0, 20]");
    bad.top_logprobs = 3;
    bad.logprobs = false;
    CU_ASSERT_EQUAL(lh_scheduler_submit(s, &bad, NULL, &err), LH_E_USAGE);
    CHECK_MSG(err, "needs logprobs");
    free(c);
    free(logits);
    lh_scheduler_free(s);
    lh_engine_close(e);
}

static int suite_init(void)
{
    return (host = rt_builtin_host()) ? 0 : 1;
}

static int suite_clean(void)
{
    lh_host_free(host);
    return 0;
}

static CU_TestInfo tests[] = {
    {"32 greedy requests, chunked and joining late, equal their runs alone",
     test_greedy_equals_alone},
    {"seeded sampled requests equal their runs alone", test_sampled_equals_alone},
    {"a pool too small for everyone: preemption, no failure, the same tokens",
     test_preemption},
    {"stop ids, max_new_tokens 0, cancel queued and running", test_stop_cancel_and_zero},
    {"stop strings end a request with the token that completes one", test_stop_strings},
    {"submits from four threads while one steps", test_submit_from_threads},
    {"refusals name what was asked and what exists", test_refusals},
    {"prefix caching: a shared system prompt is prefilled once, tokens unchanged",
     test_prefix_caching},
    {"slot ownership, RoPE that depends on the length refused, per-request streams",
     test_ownership_rope_and_stream},
    {"log-probabilities of each token and its alternatives", test_logprobs},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"continuous-batching scheduler", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
