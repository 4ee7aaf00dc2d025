/* The embedding API additions (llmhost.h) on the tiny llama-mha-f32 fixture:
 *  - lh_engine_cancel: from on_step after 3 tokens (exactly 3, LH_STOP_CANCELLED, the same
 *    tokens as an uncancelled run), at the prefill, after the last step (nothing to cancel),
 *    from a second thread while the generation waits at a step, a cancel made before a call
 *    (forgotten), NULL;
 *  - the run config as YAML text (lh_engine_options.config_text, lh_resolve_request.config_text):
 *    good text (values and their "<config_text>:LINE:COL" origins), overrides over it, YAML
 *    syntax errors, unknown keys and bad values with line:column, text and file together,
 *    older struct sizes;
 *    lh_validate_run_config_text;
 *  - lh_engine_explain_json: explain's keys plus the engine section; NULL arguments. */
#include "api/host_internal.h"
#include "llmhost.h"
#include "runner.h"
#include "runtime/generate.h"
#include "rt_host.h"

#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "llama-mha-f32"
#define N_NEW 10

static lh_host *host;
static char model_dir[1200];
static const int32_t prompt_a[] = {5, 7, 9, 11};
static const int32_t prompt_b[] = {3, 1, 4, 1, 5, 9};

static lh_engine *open_engine(const char *config_text, lh_err *err)
{
    lh_engine_options o = {.struct_size = sizeof o, .model = model_dir, .n_threads = 1,
                           .config_text = config_text};
    lh_engine *e = NULL;
    if (lh_engine_open(host, &o, &e, err) != LH_OK)
        fprintf(stderr, "\n  open: %s\n", err->msg);
    return e;
}

static lh_engine *open_default(void)
{
    lh_err err = {0};
    return open_engine("max_batch_size: 2\n", &err);
}

/* ---- cancel ------------------------------------------------------------------------------ */

typedef struct cancel_ctx {
    lh_engine *e;
    int64_t cancel_at_step; /* call lh_engine_cancel in on_step of this step; -1: never */
    int64_t calls;
    int64_t tokens_seen;
} cancel_ctx;

static bool cancel_on_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                           int64_t n)
{
    (void)seqs;
    (void)ids;
    cancel_ctx *c = user;
    c->calls++;
    c->tokens_seen += n;
    if (step == c->cancel_at_step)
        lh_engine_cancel(c->e);
    return true;
}

/* Generates prompt_a and prompt_b in one batch with on_step = cb; returns the status. */
static lh_status gen2(lh_engine *e, bool (*cb)(void *, int64_t, const int64_t *, const int32_t *,
                                               int64_t),
                      void *user, int64_t max_new, int32_t out[2][N_NEW], int64_t out_lens[2],
                      lh_stop_reason stop[2], lh_err *err)
{
    lh_generate_params p = {.struct_size = sizeof p};
    if (lh_engine_generation_defaults(e, &p, err) != LH_OK)
        return err->code;
    p.max_new_tokens = max_new;
    p.on_step = cb;
    p.on_step_user = user;
    const int32_t *prompts[2] = {prompt_a, prompt_b};
    int64_t lens[2] = {4, 6};
    return lh_engine_generate(e, &p, prompts, lens, 2, &out[0][0], out_lens, stop, err);
}

static void test_cancel_from_callback(void)
{
    lh_engine *e = open_default();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_err err = {0};
    int32_t full[2][N_NEW], out[2][N_NEW];
    int64_t lens[2];
    lh_stop_reason stop[2];
    CU_ASSERT_EQUAL_FATAL(gen2(e, NULL, NULL, N_NEW, full, lens, stop, &err), LH_OK);
    CU_ASSERT(lens[0] == N_NEW && lens[1] == N_NEW);
    CU_ASSERT(stop[0] == LH_STOP_LENGTH && stop[1] == LH_STOP_LENGTH);

    /* cancelled in the callback of step 2 (the 3rd token): exactly 3 tokens each */
    cancel_ctx c = {.e = e, .cancel_at_step = 2};
    CU_ASSERT_EQUAL(gen2(e, cancel_on_step, &c, N_NEW, out, lens, stop, &err), LH_OK);
    CU_ASSERT_EQUAL(c.calls, 3);
    CU_ASSERT_EQUAL(c.tokens_seen, 6);
    for (int s = 0; s < 2; s++) {
        CU_ASSERT_EQUAL(lens[s], 3);
        CU_ASSERT_EQUAL(stop[s], LH_STOP_CANCELLED);
        CU_ASSERT(memcmp(out[s], full[s], 3 * sizeof(int32_t)) == 0);
        for (int k = 3; k < N_NEW; k++)
            CU_ASSERT_EQUAL(out[s][k], -1);
    }
    /* the stats cover what ran: the prefill and two decode steps */
    lh_generate_stats gs = {.struct_size = sizeof gs};
    CU_ASSERT_EQUAL(lh_engine_last_stats(e, &gs, &err), LH_OK);
    CU_ASSERT_EQUAL(gs.prefill_tokens, 10);
    CU_ASSERT_EQUAL(gs.decode_steps, 2);
    CU_ASSERT_EQUAL(gs.decode_tokens, 4);

    /* the request belonged to that call: the next one runs to the end */
    CU_ASSERT_EQUAL(gen2(e, NULL, NULL, N_NEW, out, lens, stop, &err), LH_OK);
    CU_ASSERT(lens[0] == N_NEW && lens[1] == N_NEW && stop[0] == LH_STOP_LENGTH);
    CU_ASSERT(memcmp(out, full, sizeof full) == 0);

    /* cancelled at the prefill's callback: one token each */
    c = (cancel_ctx){.e = e, .cancel_at_step = 0};
    CU_ASSERT_EQUAL(gen2(e, cancel_on_step, &c, N_NEW, out, lens, stop, &err), LH_OK);
    CU_ASSERT(lens[0] == 1 && lens[1] == 1);
    CU_ASSERT(stop[0] == LH_STOP_CANCELLED && stop[1] == LH_STOP_CANCELLED);
    CU_ASSERT(out[0][0] == full[0][0] && out[1][0] == full[1][0]);

    /* cancelled in the last step's callback: nothing was left to stop */
    c = (cancel_ctx){.e = e, .cancel_at_step = N_NEW - 1};
    CU_ASSERT_EQUAL(gen2(e, cancel_on_step, &c, N_NEW, out, lens, stop, &err), LH_OK);
    CU_ASSERT(lens[0] == N_NEW && lens[1] == N_NEW);
    CU_ASSERT(stop[0] == LH_STOP_LENGTH && stop[1] == LH_STOP_LENGTH);
    CU_ASSERT(memcmp(out, full, sizeof full) == 0);
    lh_engine_close(e);
}

static void test_cancel_before_call_is_forgotten(void)
{
    lh_engine *e = open_default();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_err err = {0};
    int32_t out[2][N_NEW];
    int64_t lens[2];
    lh_stop_reason stop[2];
    lh_engine_cancel(e); /* no call runs: void */
    lh_engine_cancel(e);
    CU_ASSERT_EQUAL(gen2(e, NULL, NULL, N_NEW, out, lens, stop, &err), LH_OK);
    CU_ASSERT(lens[0] == N_NEW && lens[1] == N_NEW);
    CU_ASSERT(stop[0] == LH_STOP_LENGTH && stop[1] == LH_STOP_LENGTH);
    lh_engine_cancel(NULL); /* does nothing */
    /* greedy generation and logits are not cancellable: a pending request does not touch
     * them */
    lh_engine_cancel(e);
    int32_t g[N_NEW];
    const int32_t *pp[1] = {prompt_a};
    int64_t pl[1] = {4};
    CU_ASSERT_EQUAL(lh_engine_generate_greedy(e, pp, pl, 1, N_NEW, g, &err), LH_OK);
    lh_engine_close(e);
}

/* A request already set when the prefill would start (a cancel from another thread that
 * lands between the call's start and its first step): nothing runs, nothing is produced.
 * Driven through the internal entry point, which reads the flag without clearing it. */
static void test_cancel_before_prefill(void)
{
    lh_engine *e = open_default();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_err err = {0};
    lh_generate_params p = {.struct_size = sizeof p};
    CU_ASSERT_EQUAL_FATAL(lh_engine_generation_defaults(e, &p, &err), LH_OK);
    p.max_new_tokens = N_NEW;
    const int32_t *prompts[2] = {prompt_a, prompt_b};
    int64_t lens[2] = {4, 6}, out_lens[2] = {7, 7};
    int32_t out[2][N_NEW];
    lh_stop_reason stop[2] = {LH_STOP_EOS, LH_STOP_EOS};
    lh_generate_stats gs = {.struct_size = sizeof gs};
    atomic_bool flag;
    atomic_init(&flag, true);
    CU_ASSERT_EQUAL(lh_generate_cancellable(lh_engine_runner(e), lh_engine_kctx(e), &p, prompts,
                                            lens, 2, &out[0][0], out_lens, stop, &gs, &flag,
                                            &err), LH_OK);
    CU_ASSERT(out_lens[0] == 0 && out_lens[1] == 0);
    CU_ASSERT(stop[0] == LH_STOP_CANCELLED && stop[1] == LH_STOP_CANCELLED);
    CU_ASSERT(out[0][0] == -1 && out[1][0] == -1);
    CU_ASSERT(gs.prefill_tokens == 0 && gs.decode_steps == 0);
    CU_ASSERT(atomic_load(&flag)); /* read, never cleared */
    /* the decoder's slots were released: the engine generates normally afterwards */
    CU_ASSERT_EQUAL(gen2(e, NULL, NULL, N_NEW, out, out_lens, stop, &err), LH_OK);
    CU_ASSERT(out_lens[0] == N_NEW && stop[0] == LH_STOP_LENGTH);
    lh_engine_close(e);
}

/* A second thread cancels while the generating thread waits in step 1's callback: the
 * generation stops at the next boundary with 2 tokens each. */
typedef struct thread_ctx {
    lh_engine *e;
    sem_t at_step, cancelled;
    atomic_int steps;
} thread_ctx;

static bool wait_on_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                         int64_t n)
{
    (void)seqs;
    (void)ids;
    (void)n;
    thread_ctx *t = user;
    atomic_fetch_add(&t->steps, 1);
    if (step == 1) {
        sem_post(&t->at_step);
        while (sem_wait(&t->cancelled) != 0) /* EINTR */
            ;
    }
    return true;
}

static void *canceller(void *arg)
{
    thread_ctx *t = arg;
    while (sem_wait(&t->at_step) != 0)
        ;
    lh_engine_cancel(t->e);
    sem_post(&t->cancelled);
    return NULL;
}

static void test_cancel_from_thread(void)
{
    lh_engine *e = open_default();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    thread_ctx t = {.e = e};
    atomic_init(&t.steps, 0);
    CU_ASSERT_FATAL(sem_init(&t.at_step, 0, 0) == 0 && sem_init(&t.cancelled, 0, 0) == 0);
    pthread_t th;
    CU_ASSERT_FATAL(pthread_create(&th, NULL, canceller, &t) == 0);
    lh_err err = {0};
    int32_t out[2][N_NEW];
    int64_t lens[2];
    lh_stop_reason stop[2];
    CU_ASSERT_EQUAL(gen2(e, wait_on_step, &t, N_NEW, out, lens, stop, &err), LH_OK);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(atomic_load(&t.steps), 2);
    CU_ASSERT(lens[0] == 2 && lens[1] == 2);
    CU_ASSERT(stop[0] == LH_STOP_CANCELLED && stop[1] == LH_STOP_CANCELLED);
    CU_ASSERT(out[0][2] == -1 && out[1][2] == -1);
    sem_destroy(&t.at_step);
    sem_destroy(&t.cancelled);
    lh_engine_close(e);
}

/* ---- the run config as YAML text ----------------------------------------------------------- */

static json_t *engine_explain(lh_engine *e)
{
    char *s = NULL;
    lh_err err = {0};
    if (lh_engine_explain_json(e, &s, &err) != LH_OK) {
        fprintf(stderr, "\n  explain: %s\n", err.msg);
        return NULL;
    }
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    return j;
}

static const char *jstr(const json_t *j, const char *a, const char *b, const char *c)
{
    const json_t *v = json_object_get(j, a);
    if (b)
        v = json_object_get(v, b);
    if (c)
        v = json_object_get(v, c);
    return json_string_value(v) ? json_string_value(v) : "";
}

static void test_config_text_good(void)
{
    lh_err err = {0};
    lh_engine *e = open_engine("# run config\n"
                               "max_seq_len: 64\n"
                               "max_batch_size: 3\n"
                               "attn_backend: Vanilla\n",
                               &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(lh_engine_max_seq_len(e), 64);
    CU_ASSERT_EQUAL(lh_engine_max_batch_size(e), 3);
    json_t *j = engine_explain(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(jstr(j, "run_config", "source", NULL), "<config_text>");
    CU_ASSERT_STRING_EQUAL(jstr(j, "run_config", "max_seq_len", "origin"), "<config_text>:2:14");
    CU_ASSERT_STRING_EQUAL(jstr(j, "run_config", "max_batch_size", "origin"),
                           "<config_text>:3:17");
    CU_ASSERT_STRING_EQUAL(jstr(j, "attention", "backend", NULL), "vanilla");
    json_decref(j);
    lh_engine_close(e);

    /* overrides apply over the text */
    lh_engine_options o = {.struct_size = sizeof o, .model = model_dir, .n_threads = 1,
                           .config_text = "max_batch_size: 2\nmax_seq_len: 64\n"};
    const char *ov[] = {"max-batch-size=4", NULL};
    o.overrides = ov;
    CU_ASSERT_EQUAL_FATAL(lh_engine_open(host, &o, &e, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_max_batch_size(e), 4);
    CU_ASSERT_EQUAL(lh_engine_max_seq_len(e), 64);
    lh_engine_close(e);

    /* an empty text is an empty config: the defaults */
    e = open_engine("", &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(lh_engine_max_batch_size(e), 1);
    lh_engine_close(e);

    /* lh_host_explain_json takes the text too */
    lh_resolve_request req = {.struct_size = sizeof req, .model = model_dir,
                              .config_text = "max_seq_len: 32\n"};
    char *s = NULL;
    CU_ASSERT_EQUAL_FATAL(lh_host_explain_json(host, &req, &s, &err), LH_OK);
    j = json_loads(s, 0, NULL);
    free(s);
    CU_ASSERT_STRING_EQUAL(jstr(j, "run_config", "max_seq_len", "origin"), "<config_text>:1:14");
    json_decref(j);
}

/* lh_engine_open with text must fail with code and a message that contains want. */
static void expect_open_error(const char *text, lh_status code, const char *want)
{
    lh_err err = {0};
    lh_engine_options o = {.struct_size = sizeof o, .model = model_dir, .config_text = text};
    lh_engine *e = (lh_engine *)&err; /* must come back NULL */
    lh_status st = lh_engine_open(host, &o, &e, &err);
    CU_ASSERT_EQUAL(st, code);
    CU_ASSERT_EQUAL(err.code, code);
    CU_ASSERT_PTR_NULL(e);
    if (getenv("LH_TEST_VERBOSE"))
        fprintf(stderr, "\n  %s\n", err.msg);
    if (!strstr(err.msg, want)) {
        fprintf(stderr, "\n  want '%s' in: %s\n", want, err.msg);
        CU_FAIL("message");
    }
    if (st == LH_OK)
        lh_engine_close(e);
}

static void test_config_text_errors(void)
{
    /* YAML syntax: an unclosed flow sequence, reported where libyaml finds it */
    expect_open_error("max_seq_len: 64\nquant: {scheme: int8\n", LH_E_CONFIG,
                      "<config_text>:3:1: YAML syntax error: did not find expected ',' or '}' "
                      "(while parsing a flow mapping at 2:8)");
    expect_open_error("max_seq_len: 64\n  - bad: [\n", LH_E_CONFIG,
                      "<config_text>:2:8: YAML syntax error");
    /* an unknown key, with line:column and a did-you-mean */
    expect_open_error("max_seq_len: 64\nkv_cache:\n  blok_size: 16\n", LH_E_CONFIG,
                      "<config_text>:3:3: unknown key 'blok_size' in kv_cache");
    expect_open_error("kv_cache:\n  blok_size: 16\n", LH_E_CONFIG, "did you mean 'block_size'?");
    /* a bad value */
    expect_open_error("max_batch_size: 2\nmax_seq_len: -5\n", LH_E_CONFIG,
                      "<config_text>:2:14: max_seq_len");
    expect_open_error("dtype: float64\n", LH_E_CONFIG, "<config_text>:1:8: dtype");
    /* the validator's cross-key rules name where each value came from */
    expect_open_error("kv_cache: {max_tokens: 64, memory_fraction: 0.5}\n", LH_E_CONFIG,
                      "kv_cache.max_tokens=64 (from <config_text>:1:24) and "
                      "kv_cache.memory_fraction=0.5 (from <config_text>:1:45) are mutually "
                      "exclusive");
    /* not a mapping */
    expect_open_error("- 1\n- 2\n", LH_E_CONFIG,
                      "<config_text>:1:1: a run config must be a mapping");

    /* the same checks without opening anything: lh_validate_run_config_text */
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_validate_run_config_text("max_seq_len: 64\n", NULL, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_validate_run_config_text(NULL, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_validate_run_config_text("max_seq_len: 64\nkv_cache:\n  blok_size: 16\n",
                                                NULL, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "<config_text>:3:3: unknown key 'blok_size'"));
    const char *bad_flag[] = {"max-seq-len=zero", NULL};
    CU_ASSERT_EQUAL(lh_validate_run_config_text("max_seq_len: 64\n", bad_flag, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max"));
}

static void test_config_text_usage(void)
{
    lh_err err = {0};
    lh_engine *e = NULL;
    /* text and file together */
    lh_engine_options o = {.struct_size = sizeof o, .model = model_dir,
                           .config_file = "/nonexistent/run.yaml", .config_text = "dtype: auto\n"};
    CU_ASSERT_EQUAL(lh_engine_open(host, &o, &e, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "both as a file (/nonexistent/run.yaml) and as text"));
    lh_resolve_request req = {.struct_size = sizeof req, .model = model_dir,
                              .config_file = "/nonexistent/run.yaml", .config_text = ""};
    char *s = (char *)"x";
    CU_ASSERT_EQUAL(lh_host_explain_json(host, &req, &s, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(lh_host_resolve_json(host, &req, &s, &err), LH_E_USAGE);

    /* a caller built before config_text: its struct ends at attn_backend, the text (beyond
     * its struct) is not read */
    o = (lh_engine_options){.struct_size = offsetof(lh_engine_options, config_text),
                            .model = model_dir, .n_threads = 1,
                            .config_text = "this: is not read\n"};
    CU_ASSERT_EQUAL_FATAL(lh_engine_open(host, &o, &e, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_max_batch_size(e), 1);
    lh_engine_close(e);
    req = (lh_resolve_request){.struct_size = offsetof(lh_resolve_request, config_text),
                               .model = model_dir, .config_text = "this: is not read\n"};
    CU_ASSERT_EQUAL(lh_host_resolve_json(host, &req, &s, &err), LH_OK);
    free(s);
    /* a struct smaller than that is refused */
    o.struct_size = offsetof(lh_engine_options, attn_backend);
    e = NULL;
    CU_ASSERT_EQUAL(lh_engine_open(host, &o, &e, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "struct_size"));
}

/* ---- explain of an open engine ----------------------------------------------------------- */

static void test_engine_explain(void)
{
    lh_engine *e = open_default();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    json_t *j = engine_explain(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(jstr(j, "architecture", NULL, NULL), "LlamaForCausalLM");
    CU_ASSERT_STRING_EQUAL(jstr(j, "origin", NULL, NULL), "builtin");
    CU_ASSERT_STRING_EQUAL(jstr(j, "attention", "backend", NULL), "paged");
    CU_ASSERT_STRING_EQUAL(jstr(j, "attention", "device", "resolved"), "cpu");
    CU_ASSERT_STRING_EQUAL(jstr(j, "engine", "device", NULL), "cpu");
    CU_ASSERT(strlen(jstr(j, "engine", "isa", NULL)) > 0);
    const json_t *eng = json_object_get(j, "engine");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(eng, "threads")), 1);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(eng, "vocab_size")),
                    lh_engine_vocab_size(e));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(eng, "max_batch_size")), 2);
    CU_ASSERT(json_integer_value(json_object_get(j, "parameters")) > 0);
    CU_ASSERT(json_integer_value(json_object_get(j, "kv_pool_tokens")) > 0);
    CU_ASSERT_PTR_NOT_NULL(json_object_get(j, "run_config"));
    /* the same keys as lh_host_explain_json for the same request */
    lh_resolve_request req = {.struct_size = sizeof req, .model = model_dir,
                              .config_text = "max_batch_size: 2\n"};
    char *s = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_host_explain_json(host, &req, &s, &err), LH_OK);
    json_t *h = json_loads(s, 0, NULL);
    free(s);
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) {
        if (!json_object_get(j, key)) {
            fprintf(stderr, "\n  engine explain lacks '%s'\n", key);
            CU_FAIL("key");
        }
    }
    CU_ASSERT(json_equal(json_object_get(h, "kv_pool_bytes"), json_object_get(j, "kv_pool_bytes")));
    CU_ASSERT(json_equal(json_object_get(h, "parameters"), json_object_get(j, "parameters")));
    json_decref(h);
    json_decref(j);

    /* NULL arguments */
    s = (char *)"x";
    CU_ASSERT_EQUAL(lh_engine_explain_json(NULL, &s, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "engine is NULL"));
    CU_ASSERT_EQUAL(lh_engine_explain_json(e, NULL, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "json_out is NULL"));
    lh_engine_close(e);
}

static int suite_init(void)
{
    if (!(host = rt_builtin_host()))
        return 1;
    snprintf(model_dir, sizeof model_dir, "%s/models/" MODEL, lh_test_env("LH_FIXTURES"));
    return 0;
}

static int suite_clean(void)
{
    lh_host_free(host);
    return 0;
}

static CU_TestInfo tests[] = {
    {"lh_engine_cancel from on_step: exactly the tokens so far", test_cancel_from_callback},
    {"a cancel made while no call runs is forgotten", test_cancel_before_call_is_forgotten},
    {"a cancel pending at the prefill: no step runs", test_cancel_before_prefill},
    {"lh_engine_cancel from a second thread", test_cancel_from_thread},
    {"run config as YAML text", test_config_text_good},
    {"malformed YAML text: errors with line:column", test_config_text_errors},
    {"YAML text and file together, older struct sizes", test_config_text_usage},
    {"lh_engine_explain_json", test_engine_explain},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"embedding API: cancel, YAML text, engine explain", suite_init, suite_clean, NULL, NULL,
     tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
