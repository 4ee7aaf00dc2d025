/* Generation with sampling and stop tokens (lh_engine_generate) on the tiny fixtures, and
 * generation_config.json parsing:
 *  - greedy through lh_engine_generate equals transformers' greedy reference and
 *    lh_engine_generate_greedy;
 *  - the same seed gives the same tokens (twice, thread counts, a sequence alone vs in a
 *    batch with its stream), another seed other tokens;
 *  - a stop token ends its sequence (the token included) while the others continue;
 *  - generation_config.json: defaults, int and list eos_token_id, null values, wrong types and
 *    values, JSON syntax errors with line:column, an absent file. */
#include "config/generation_config.h"
#include "llmhost.h"
#include "runner.h"
#include "rt_host.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "llama-mha-f32"
#define N_NEW 24

static lh_host *host;
static int32_t *prompts[3];
static int64_t lens[3];
static int32_t greedy_ref[3][32];

static void model_path(char *buf, size_t n)
{
    snprintf(buf, n, "%s/models/" MODEL, lh_test_env("LH_FIXTURES"));
}

static lh_engine *open_model(const char *dir, int threads)
{
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = threads};
    const char *ov[] = {"max-batch-size=4", NULL};
    o.overrides = ov;
    lh_engine *e = NULL;
    lh_err err = {0};
    if (lh_engine_open(host, &o, &e, &err) != LH_OK)
        fprintf(stderr, "\n  %s: %s\n", dir, err.msg);
    return e;
}

/* A copy of the fixture (files symlinked) whose generation_config.json is `text` (NULL: no
 * such file). */
static char *model_with_genconfig(const char *text)
{
    char src[1200];
    model_path(src, sizeof src);
    char *abs_src = realpath(src, NULL);
    char *dir = lh_test_mkdtemp();
    if (!dir || !abs_src) {
        free(abs_src);
        free(dir);
        return NULL;
    }
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; i < 2; i++) {
        char a[1400], b[1400];
        snprintf(a, sizeof a, "%s/%s", abs_src, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        if (symlink(a, b) != 0) {
            free(abs_src);
            lh_test_rmtree(dir);
            free(dir);
            return NULL;
        }
    }
    free(abs_src);
    if (text && lh_test_write_file(dir, "generation_config.json", text) != 0) {
        lh_test_rmtree(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

static lh_generate_params defaults(lh_engine *e)
{
    lh_generate_params p = {.struct_size = sizeof p};
    lh_err err = {0};
    CU_ASSERT_EQUAL(lh_engine_generation_defaults(e, &p, &err), LH_OK);
    p.max_new_tokens = N_NEW;
    return p;
}

static lh_status gen(lh_engine *e, const lh_generate_params *p, const int32_t *const *pr,
                     const int64_t *ln, int64_t n, int32_t out[][N_NEW], int64_t *out_lens,
                     lh_stop_reason *stop, lh_err *err)
{
    return lh_engine_generate(e, p, pr, ln, n, &out[0][0], out_lens, stop, err);
}

static lh_generate_params sampling(lh_engine *e, uint64_t seed)
{
    lh_generate_params p = defaults(e);
    p.do_sample = true;
    p.temperature = 1.5f; /* flat enough on these tiny models for seeds to matter */
    p.top_k = 0;
    p.top_p = 0.95f;
    p.seed = seed;
    return p;
}

static void test_greedy_unchanged(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_generate_params p = defaults(e);
    /* the fixture's generation_config.json has none of the honoured keys */
    CU_ASSERT_FALSE(p.do_sample);
    CU_ASSERT_EQUAL(p.n_stop_ids, 0);
    CU_ASSERT_EQUAL(p.top_k, 50);
    CU_ASSERT_EQUAL(p.temperature, 1.0f);
    int32_t out[3][N_NEW], old[3 * N_NEW];
    int64_t ol[3];
    lh_stop_reason stop[3];
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, (const int32_t *const *)prompts, lens, 3, out, ol, stop,
                              &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(lh_engine_generate_greedy(e, (const int32_t *const *)prompts, lens, 3,
                                                    N_NEW, old, &err), LH_OK);
    for (int s = 0; s < 3; s++) {
        CU_ASSERT_EQUAL(ol[s], N_NEW);
        CU_ASSERT_EQUAL(stop[s], LH_STOP_LENGTH);
        CU_ASSERT_EQUAL(memcmp(out[s], greedy_ref[s], sizeof out[s]), 0);
        CU_ASSERT_EQUAL(memcmp(out[s], old + s * N_NEW, sizeof out[s]), 0);
    }
    /* temperature 0 with do_sample is greedy too, whatever top-k/top-p say */
    p.do_sample = true;
    p.temperature = 0.0f;
    p.top_k = 3;
    p.top_p = 0.5f;
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, (const int32_t *const *)prompts, lens, 3, out, ol, stop,
                              &err), LH_OK);
    for (int s = 0; s < 3; s++)
        CU_ASSERT_EQUAL(memcmp(out[s], greedy_ref[s], sizeof out[s]), 0);
    lh_generate_stats gs = {.struct_size = sizeof gs};
    CU_ASSERT_EQUAL(lh_engine_last_stats(e, &gs, &err), LH_OK);
    CU_ASSERT_EQUAL(gs.decode_steps, N_NEW - 1);
    CU_ASSERT_EQUAL(gs.decode_tokens, 3 * (N_NEW - 1));
    lh_engine_close(e);
}

static void test_same_seed_same_tokens(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e1 = open_model(dir, 1), *e4 = open_model(dir, 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e4);
    lh_generate_params p = sampling(e1, 1234);
    int32_t a[3][N_NEW], b[3][N_NEW], c[3][N_NEW], d[3][N_NEW];
    int64_t ol[3];
    lh_err err = {0};
    const int32_t *const *pr = (const int32_t *const *)prompts;
    CU_ASSERT_EQUAL_FATAL(gen(e1, &p, pr, lens, 3, a, ol, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(gen(e1, &p, pr, lens, 3, b, ol, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT_EQUAL_FATAL(gen(e4, &p, pr, lens, 3, c, ol, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, c, sizeof a), 0);
    /* sampling does leave the greedy path */
    int differ = 0;
    for (int s = 0; s < 3; s++)
        differ += memcmp(a[s], greedy_ref[s], sizeof a[s]) != 0;
    CU_ASSERT(differ > 0);
    /* another seed: other tokens */
    p.seed = 1235;
    CU_ASSERT_EQUAL_FATAL(gen(e1, &p, pr, lens, 3, d, ol, NULL, &err), LH_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(a, d, sizeof a), 0);
    /* each sequence alone, drawing from its batch stream, gives its batch tokens */
    p.seed = 1234;
    for (int s = 0; s < 3; s++) {
        uint64_t stream = (uint64_t)s;
        p.seq_streams = &stream;
        int32_t one[1][N_NEW];
        int64_t l1;
        CU_ASSERT_EQUAL_FATAL(gen(e4, &p, pr + s, lens + s, 1, one, &l1, NULL, &err), LH_OK);
        CU_ASSERT_EQUAL(memcmp(one[0], a[s], sizeof one[0]), 0);
    }
    /* and in another batch composition (reversed order, streams following the sequences) */
    const int32_t *rev[3] = {prompts[2], prompts[1], prompts[0]};
    int64_t rl[3] = {lens[2], lens[1], lens[0]};
    uint64_t streams[3] = {2, 1, 0};
    p.seq_streams = streams;
    CU_ASSERT_EQUAL_FATAL(gen(e1, &p, rev, rl, 3, d, ol, NULL, &err), LH_OK);
    for (int s = 0; s < 3; s++)
        CU_ASSERT_EQUAL(memcmp(d[s], a[2 - s], sizeof d[s]), 0);
    lh_engine_close(e1);
    lh_engine_close(e4);
}

/* the first index of `id` in row, or -1 */
static int first_at(const int32_t *row, int n, int32_t id)
{
    for (int i = 0; i < n; i++)
        if (row[i] == id)
            return i;
    return -1;
}

static void test_stop_token(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    /* a token sequence 0 produces at step >= 3 for the first time, absent from sequence 1 */
    int32_t stop_id = -1;
    int at = -1;
    for (int i = 3; i < N_NEW && stop_id < 0; i++)
        if (first_at(greedy_ref[0], N_NEW, greedy_ref[0][i]) == i &&
            first_at(greedy_ref[1], N_NEW, greedy_ref[0][i]) < 0) {
            stop_id = greedy_ref[0][i];
            at = i;
        }
    CU_ASSERT_FATAL(stop_id >= 0);
    lh_generate_params p = defaults(e);
    int32_t stops[2] = {100000, stop_id}; /* an id beyond the vocabulary never matches */
    p.stop_ids = stops;
    p.n_stop_ids = 2;
    int32_t out[3][N_NEW];
    int64_t ol[3];
    lh_stop_reason why[3];
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, (const int32_t *const *)prompts, lens, 3, out, ol, why,
                              &err), LH_OK);
    CU_ASSERT_EQUAL(ol[0], at + 1); /* the stop token is part of the output */
    CU_ASSERT_EQUAL(why[0], LH_STOP_EOS);
    CU_ASSERT_EQUAL(out[0][at], stop_id);
    CU_ASSERT_EQUAL(memcmp(out[0], greedy_ref[0], (size_t)(at + 1) * sizeof(int32_t)), 0);
    for (int k = at + 1; k < N_NEW; k++)
        CU_ASSERT_EQUAL(out[0][k], -1);
    CU_ASSERT_EQUAL(ol[1], N_NEW); /* the others continue, unchanged */
    CU_ASSERT_EQUAL(why[1], LH_STOP_LENGTH);
    CU_ASSERT_EQUAL(memcmp(out[1], greedy_ref[1], sizeof out[1]), 0);
    int at2 = first_at(greedy_ref[2], N_NEW, stop_id);
    CU_ASSERT_EQUAL(ol[2], at2 < 0 ? N_NEW : at2 + 1);
    CU_ASSERT_EQUAL(memcmp(out[2], greedy_ref[2], (size_t)ol[2] * sizeof(int32_t)), 0);
    lh_generate_stats gs = {.struct_size = sizeof gs};
    CU_ASSERT_EQUAL(lh_engine_last_stats(e, &gs, &err), LH_OK);
    CU_ASSERT(gs.decode_tokens < 3 * (N_NEW - 1));
    /* a stop id as the very first token */
    p.stop_ids = &greedy_ref[1][0];
    p.n_stop_ids = 1;
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, (const int32_t *const *)prompts + 1, lens + 1, 1, out, ol,
                              why, &err), LH_OK);
    CU_ASSERT_EQUAL(ol[0], 1);
    CU_ASSERT_EQUAL(why[0], LH_STOP_EOS);
    lh_engine_close(e);
}

static void test_bad_params(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int32_t *const *pr = (const int32_t *const *)prompts;
    int32_t out[3][N_NEW];
    int64_t ol[3];
    lh_err err = {0};
    static const struct {
        int field;
        float f;
        const char *needle;
    } cases[] = {{0, -1.0f, "temperature"}, {0, NAN, "temperature"}, {1, 1.5f, "top_p"},
                 {1, -0.1f, "top_p"},       {2, -0.5f, "min_p"},    {3, 0.0f, "repetition_penalty"},
                 {4, -1.0f, "top_k"},       {5, -1.0f, "max_new_tokens"},
                 {6, -1.0f, "stop_ids"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lh_generate_params p = defaults(e);
        int32_t bad_stop = -3;
        switch (cases[i].field) {
        case 0: p.temperature = cases[i].f; break;
        case 1: p.top_p = cases[i].f; break;
        case 2: p.min_p = cases[i].f; break;
        case 3: p.repetition_penalty = cases[i].f; break;
        case 4: p.top_k = (int64_t)cases[i].f; break;
        case 5: p.max_new_tokens = (int64_t)cases[i].f; break;
        default: p.stop_ids = &bad_stop; p.n_stop_ids = 1; break;
        }
        CU_ASSERT_EQUAL(gen(e, &p, pr, lens, 3, out, ol, NULL, &err), LH_E_USAGE);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[i].needle));
    }
    lh_generate_params p = defaults(e);
    p.struct_size = 8;
    CU_ASSERT_EQUAL(gen(e, &p, pr, lens, 3, out, ol, NULL, &err), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "struct_size"));
    lh_engine_close(e);
}

/* the per-step callback: what it sees, stopping from it, and a struct without it */
typedef struct step_log {
    int64_t calls, stop_after; /* stop_after < 0: never stop */
    int64_t last_step;
    int32_t seen[3][N_NEW];
    int64_t n_seen[3];
    bool order_ok;
} step_log;

static bool log_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                     int64_t n)
{
    step_log *l = user;
    if (step != l->calls)
        l->order_ok = false;
    l->calls++;
    l->last_step = step;
    for (int64_t i = 0; i < n; i++) {
        if (seqs[i] < 0 || seqs[i] >= 3 || l->n_seen[seqs[i]] != step ||
            (i > 0 && seqs[i] <= seqs[i - 1])) {
            l->order_ok = false;
            continue;
        }
        l->seen[seqs[i]][l->n_seen[seqs[i]]++] = ids[i];
    }
    return l->stop_after < 0 || step < l->stop_after;
}

static void test_step_callback(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int32_t *const *pr = (const int32_t *const *)prompts;
    int32_t out[3][N_NEW];
    int64_t ol[3];
    lh_stop_reason why[3];
    lh_err err = {0};
    /* never stops: every token of every sequence reported once, in order; output unchanged */
    step_log l = {.stop_after = -1, .order_ok = true};
    lh_generate_params p = defaults(e);
    CU_ASSERT_PTR_NULL(p.on_step); /* the defaults set no callback */
    p.on_step = log_step;
    p.on_step_user = &l;
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT_EQUAL(l.calls, N_NEW);
    CU_ASSERT(l.order_ok);
    for (int s = 0; s < 3; s++) {
        CU_ASSERT_EQUAL(l.n_seen[s], N_NEW);
        CU_ASSERT_EQUAL(memcmp(l.seen[s], greedy_ref[s], sizeof l.seen[s]), 0);
        CU_ASSERT_EQUAL(memcmp(out[s], greedy_ref[s], sizeof out[s]), 0);
        CU_ASSERT_EQUAL(why[s], LH_STOP_LENGTH);
    }
    /* a stopped sequence is no longer reported */
    int32_t stop_id = greedy_ref[1][2];
    p.stop_ids = &stop_id;
    p.n_stop_ids = 1;
    l = (step_log){.stop_after = -1, .order_ok = true};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT(l.order_ok);
    for (int s = 0; s < 3; s++)
        CU_ASSERT_EQUAL(l.n_seen[s], ol[s]);
    p.stop_ids = NULL;
    p.n_stop_ids = 0;
    /* stop after step 4: 5 tokens each, LH_STOP_CANCELLED, the rest -1, stats of 4 steps */
    l = (step_log){.stop_after = 4, .order_ok = true};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT_EQUAL(l.calls, 5);
    for (int s = 0; s < 3; s++) {
        CU_ASSERT_EQUAL(ol[s], 5);
        CU_ASSERT_EQUAL(why[s], LH_STOP_CANCELLED);
        CU_ASSERT_EQUAL(memcmp(out[s], greedy_ref[s], 5 * sizeof(int32_t)), 0);
        CU_ASSERT_EQUAL(out[s][5], -1);
    }
    lh_generate_stats gs = {.struct_size = sizeof gs};
    CU_ASSERT_EQUAL(lh_engine_last_stats(e, &gs, &err), LH_OK);
    CU_ASSERT_EQUAL(gs.decode_steps, 4);
    CU_ASSERT_EQUAL(gs.decode_tokens, 12);
    /* stop at the prefill */
    l = (step_log){.stop_after = 0, .order_ok = true};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT_EQUAL(l.calls, 1);
    CU_ASSERT_EQUAL(ol[0], 1);
    CU_ASSERT_EQUAL(why[0], LH_STOP_CANCELLED);
    /* a stop requested at the last step changes nothing: the sequences reached their length */
    l = (step_log){.stop_after = N_NEW - 1, .order_ok = true};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT_EQUAL(why[2], LH_STOP_LENGTH);
    CU_ASSERT_EQUAL(ol[2], N_NEW);
    /* a caller's struct that ends before on_step (built against the older header) still
     * works, and its callback fields are not read; the defaults fill only that much */
    lh_generate_params older;
    memset(&older, 0xAB, sizeof older);
    lh_generate_params *old = &older;
    const unsigned char *buf = (const unsigned char *)&older;
    old->struct_size = (uint32_t)offsetof(lh_generate_params, on_step);
    CU_ASSERT_EQUAL_FATAL(lh_engine_generation_defaults(e, old, &err), LH_OK);
    CU_ASSERT_EQUAL(buf[offsetof(lh_generate_params, on_step)], 0xAB); /* not written */
    old->max_new_tokens = N_NEW;
    CU_ASSERT_EQUAL_FATAL(gen(e, old, pr, lens, 3, out, ol, why, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(out[0], greedy_ref[0], sizeof out[0]), 0);
    old->struct_size = (uint32_t)offsetof(lh_generate_params, on_step) - 1;
    CU_ASSERT_EQUAL(gen(e, old, pr, lens, 3, out, ol, why, &err), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_engine_generation_defaults(e, old, &err), LH_E_USAGE);
    lh_engine_close(e);
}

/* per-sequence stop from the callback (params.finish): the marked sequence keeps the token of
 * that step and leaves the batch with LH_STOP_CALLBACK, the others continue unchanged */
typedef struct finish_ctx {
    bool *finish;
    int64_t target, at_step; /* mark sequence target when it receives its at_step-th token */
    int64_t calls_after;     /* rows of target reported after it was marked */
    bool marked;
} finish_ctx;

static bool finish_step(void *user, int64_t step, const int64_t *seqs, const int32_t *ids,
                        int64_t n)
{
    (void)ids;
    finish_ctx *f = user;
    for (int64_t i = 0; i < n; i++) {
        if (seqs[i] != f->target)
            continue;
        if (f->marked)
            f->calls_after++;
        if (step == f->at_step) {
            f->finish[seqs[i]] = true;
            f->marked = true;
        }
    }
    return true;
}

static void test_finish_flags(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    const int32_t *const *pr = (const int32_t *const *)prompts;
    int32_t out[3][N_NEW];
    int64_t ol[3];
    lh_stop_reason why[3];
    lh_err err = {0};
    bool flags[3] = {true, true, true}; /* stale flags: cleared on entry */
    const int64_t ats[] = {0, 1, 5, N_NEW - 1};
    for (size_t a = 0; a < sizeof ats / sizeof ats[0]; a++) {
        const int64_t at = ats[a];
        finish_ctx f = {.finish = flags, .target = 1, .at_step = at};
        lh_generate_params p = defaults(e);
        CU_ASSERT_PTR_NULL(p.finish); /* the defaults lend no flags */
        p.on_step = finish_step;
        p.on_step_user = &f;
        p.finish = flags;
        CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
        CU_ASSERT(f.marked);
        CU_ASSERT_EQUAL(f.calls_after, 0);
        CU_ASSERT_EQUAL(ol[1], at + 1);
        CU_ASSERT_EQUAL(why[1], LH_STOP_CALLBACK);
        CU_ASSERT_EQUAL(memcmp(out[1], greedy_ref[1], (size_t)(at + 1) * sizeof(int32_t)), 0);
        for (int64_t k = at + 1; k < N_NEW; k++)
            CU_ASSERT_EQUAL(out[1][k], -1);
        for (int s = 0; s < 3; s += 2) {
            CU_ASSERT_EQUAL(ol[s], N_NEW);
            CU_ASSERT_EQUAL(why[s], LH_STOP_LENGTH);
            CU_ASSERT_EQUAL(memcmp(out[s], greedy_ref[s], sizeof out[s]), 0);
        }
    }
    /* a stop id in the same step wins: LH_STOP_EOS */
    {
        finish_ctx f = {.finish = flags, .target = 1, .at_step = 2};
        lh_generate_params p = defaults(e);
        int32_t stop_id = greedy_ref[1][2];
        p.stop_ids = &stop_id;
        p.n_stop_ids = 1;
        p.on_step = finish_step;
        p.on_step_user = &f;
        p.finish = flags;
        CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
        bool first = true;
        for (int k = 0; k < 2; k++)
            first = first && greedy_ref[1][k] != stop_id;
        if (first) {
            CU_ASSERT_EQUAL(why[1], LH_STOP_EOS);
            CU_ASSERT_EQUAL(ol[1], 3);
        }
    }
    /* a struct that ends before finish: the field is not read */
    {
        finish_ctx f = {.finish = flags, .target = 1, .at_step = 1};
        lh_generate_params p = defaults(e);
        p.on_step = finish_step;
        p.on_step_user = &f;
        p.finish = flags;
        p.struct_size = (uint32_t)offsetof(lh_generate_params, finish);
        CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, out, ol, why, &err), LH_OK);
        CU_ASSERT_EQUAL(ol[1], N_NEW);
        CU_ASSERT_EQUAL(why[1], LH_STOP_LENGTH);
    }
    lh_engine_close(e);
}

/* repetition penalty with greedy: deterministic, and it changes the output of a model whose
 * greedy continuation repeats tokens */
static void test_repetition_penalty_greedy(void)
{
    char dir[1200];
    model_path(dir, sizeof dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_generate_params p = defaults(e);
    p.repetition_penalty = 5.0f;
    int32_t a[3][N_NEW], b[3][N_NEW];
    int64_t ol[3];
    lh_err err = {0};
    const int32_t *const *pr = (const int32_t *const *)prompts;
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, a, ol, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, pr, lens, 3, b, ol, NULL, &err), LH_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a[0], greedy_ref[0], sizeof a[0]), 0);
    lh_engine_close(e);
}

/* ---- generation_config.json ---------------------------------------------------------------- */

static lh_status parse(const char *text, lh_generation_config *g, lh_err *err)
{
    return lh_generation_config_parse(text, strlen(text), "gc.json", g, err);
}

static void test_genconfig_parse(void)
{
    lh_generation_config g;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(parse("{}", &g, &err), LH_OK);
    CU_ASSERT_FALSE(g.do_sample);
    CU_ASSERT_EQUAL(g.temperature, 1.0f);
    CU_ASSERT_EQUAL(g.top_k, 50);
    CU_ASSERT_EQUAL(g.top_p, 1.0f);
    CU_ASSERT_EQUAL(g.min_p, 0.0f);
    CU_ASSERT_EQUAL(g.repetition_penalty, 1.0f);
    CU_ASSERT_EQUAL(g.n_eos, 0);
    lh_generation_config_free(&g);
    CU_ASSERT_EQUAL_FATAL(parse("{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, "
                                "\"top_k\": 20, \"min_p\": 0.05, \"repetition_penalty\": 1.1, "
                                "\"eos_token_id\": [128001, 128008, 128009], \"max_length\": 9, "
                                "\"bos_token_id\": 1}", &g, &err), LH_OK);
    CU_ASSERT_TRUE(g.do_sample);
    CU_ASSERT_EQUAL(g.temperature, 0.6f);
    CU_ASSERT_EQUAL(g.top_p, 0.9f);
    CU_ASSERT_EQUAL(g.top_k, 20);
    CU_ASSERT_EQUAL(g.min_p, 0.05f);
    CU_ASSERT_EQUAL(g.repetition_penalty, 1.1f);
    CU_ASSERT_EQUAL_FATAL(g.n_eos, 3);
    CU_ASSERT_EQUAL(g.eos_ids[0], 128001);
    CU_ASSERT_EQUAL(g.eos_ids[2], 128009);
    lh_generation_config_free(&g);
    CU_ASSERT_EQUAL_FATAL(parse("{\"eos_token_id\": 2, \"temperature\": null, \"top_k\": null}",
                                &g, &err), LH_OK);
    CU_ASSERT_EQUAL_FATAL(g.n_eos, 1);
    CU_ASSERT_EQUAL(g.eos_ids[0], 2);
    CU_ASSERT_EQUAL(g.temperature, 1.0f);
    CU_ASSERT_EQUAL(g.top_k, 50);
    lh_generation_config_free(&g);
    CU_ASSERT_EQUAL_FATAL(parse("{\"eos_token_id\": []}", &g, &err), LH_OK);
    CU_ASSERT_EQUAL(g.n_eos, 0);
    lh_generation_config_free(&g);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"temperature\": \"hot\"}", "temperature must be a number"},
        {"{\"temperature\": -1}", "temperature=-1"},
        {"{\"top_p\": 1.5}", "top_p=1.5"},
        {"{\"top_p\": -0.5}", "top_p=-0.5"},
        {"{\"min_p\": 2}", "min_p=2"},
        {"{\"repetition_penalty\": 0}", "repetition_penalty=0"},
        {"{\"top_k\": -2}", "top_k=-2"},
        {"{\"top_k\": 2.5}", "top_k must be an integer"},
        {"{\"do_sample\": 1}", "do_sample must be true or false"},
        {"{\"eos_token_id\": \"</s>\"}", "eos_token_id must be an integer or a list"},
        {"{\"eos_token_id\": [1, \"x\"]}", "eos_token_id[1] must be an integer"},
        {"{\"eos_token_id\": -1}", "eos_token_id=-1"},
        {"[1]", "top level must be a JSON object"},
        {"{\"top_k\": 1, \"top_k\": 2}", "gc.json:1:"},
        {"{\n  \"eos_token_id\": 2,\n  \"top_k\": 5,,\n}", "gc.json:3:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = (lh_err){0};
        CU_ASSERT_EQUAL(parse(bad[i].text, &g, &err), LH_E_CONFIG);
        if (!strstr(err.msg, bad[i].needle)) {
            fprintf(stderr, "\n  %s -> %s\n", bad[i].text, err.msg);
            CU_FAIL("message does not name the problem");
        }
        CU_ASSERT_EQUAL(g.n_eos, 0);
        CU_ASSERT_PTR_NULL(g.eos_ids);
    }
    /* absent file: defaults */
    char *dir = lh_test_mkdtemp();
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL(lh_generation_config_load(dir, &g, &err), LH_OK);
    CU_ASSERT_FALSE(g.present);
    CU_ASSERT_EQUAL(g.top_k, 50);
    lh_generation_config_free(&g);
    lh_test_rmtree(dir);
    free(dir);
}

/* through the engine: defaults from the file, a list eos stopping generation, a malformed file
 * refusing the open with line:column, an absent file giving greedy without stop ids */
static void test_genconfig_engine(void)
{
    /* eos = the token sequence 0 produces first at step 4 (and whatever else) */
    int32_t eos = greedy_ref[0][4];
    int at = first_at(greedy_ref[0], N_NEW, eos);
    char text[256];
    snprintf(text, sizeof text, "{\"eos_token_id\": [100000, %d], \"do_sample\": false, "
             "\"temperature\": 0.7, \"top_p\": 0.8}", eos);
    char *dir = model_with_genconfig(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    lh_engine *e = open_model(dir, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    lh_generate_params p = defaults(e);
    CU_ASSERT_FALSE(p.do_sample);
    CU_ASSERT_EQUAL(p.temperature, 0.7f);
    CU_ASSERT_EQUAL(p.top_p, 0.8f);
    CU_ASSERT_EQUAL_FATAL(p.n_stop_ids, 2);
    CU_ASSERT_EQUAL(p.stop_ids[1], eos);
    int32_t out[3][N_NEW];
    int64_t ol[3];
    lh_stop_reason why[3];
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(gen(e, &p, (const int32_t *const *)prompts, lens, 1, out, ol, why,
                              &err), LH_OK);
    CU_ASSERT_EQUAL(ol[0], at + 1);
    CU_ASSERT_EQUAL(why[0], LH_STOP_EOS);
    CU_ASSERT_EQUAL(memcmp(out[0], greedy_ref[0], (size_t)(at + 1) * sizeof(int32_t)), 0);
    lh_engine_close(e);
    lh_test_rmtree(dir);
    free(dir);

    dir = model_with_genconfig("{\n  \"eos_token_id\": 2,\n  \"do_sample\": tru\n}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = 1};
    e = NULL;
    CU_ASSERT_EQUAL(lh_engine_open(host, &o, &e, &err), LH_E_CONFIG);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "generation_config.json:3:"));
    lh_test_rmtree(dir);
    free(dir);

    dir = model_with_genconfig(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    e = open_model(dir, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    p = defaults(e);
    CU_ASSERT_FALSE(p.do_sample);
    CU_ASSERT_EQUAL(p.n_stop_ids, 0);
    lh_engine_close(e);
    lh_test_rmtree(dir);
    free(dir);

    /* no generation_config.json: config.json's eos_token_id (transformers derives the
     * generation config from the model config); with the file, the file wins */
    for (int with_file = 0; with_file < 2; with_file++) {
        dir = model_with_genconfig(with_file ? "{\"eos_token_id\": 7}" : NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
        char src[1200], dst[1300];
        model_path(src, sizeof src);
        strncat(src, "/config.json", sizeof src - strlen(src) - 1);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        json_t *cfg = json_load_file(src, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
        json_object_set_new(cfg, "eos_token_id", json_pack("[i,i]", 3, 4));
        unlink(dst);
        CU_ASSERT_EQUAL(json_dump_file(cfg, dst, 0), 0);
        json_decref(cfg);
        e = open_model(dir, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        p = defaults(e);
        if (with_file) {
            CU_ASSERT_EQUAL_FATAL(p.n_stop_ids, 1);
            CU_ASSERT_EQUAL(p.stop_ids[0], 7);
        } else {
            CU_ASSERT_EQUAL_FATAL(p.n_stop_ids, 2);
            CU_ASSERT_EQUAL(p.stop_ids[0], 3);
            CU_ASSERT_EQUAL(p.stop_ids[1], 4);
        }
        lh_engine_close(e);
        lh_test_rmtree(dir);
        free(dir);
    }
}

static int suite_init(void)
{
    if (!(host = rt_builtin_host()))
        return 1;
    char path[1300], dir[1200];
    model_path(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_error_t je;
    json_t *ref = json_load_file(path, 0, &je);
    if (!ref) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    json_t *pr = json_object_get(ref, "prompts"), *gr = json_object_get(ref, "greedy");
    if (json_array_size(pr) != 3 || json_array_size(gr) != 3) {
        json_decref(ref);
        return 1;
    }
    for (size_t s = 0; s < 3; s++) {
        json_t *a = json_array_get(pr, s), *g = json_array_get(gr, s);
        lens[s] = (int64_t)json_array_size(a);
        prompts[s] = malloc((size_t)lens[s] * sizeof(int32_t));
        if (!prompts[s] || json_array_size(g) < N_NEW) {
            json_decref(ref);
            return 1;
        }
        for (size_t i = 0; i < (size_t)lens[s]; i++)
            prompts[s][i] = (int32_t)json_integer_value(json_array_get(a, i));
        for (size_t i = 0; i < N_NEW; i++)
            greedy_ref[s][i] = (int32_t)json_integer_value(json_array_get(g, i));
    }
    json_decref(ref);
    return 0;
}

static int suite_clean(void)
{
    for (int s = 0; s < 3; s++)
        free(prompts[s]);
    lh_host_free(host);
    return 0;
}

static CU_TestInfo tests[] = {
    {"greedy through lh_engine_generate is unchanged", test_greedy_unchanged},
    {"same seed same tokens (threads, alone vs batch), other seed differs",
     test_same_seed_same_tokens},
    {"a stop token ends its sequence, the others continue", test_stop_token},
    {"bad parameters are usage errors naming them", test_bad_params},
    {"the per-step callback: reports, stops, older struct sizes", test_step_callback},
    {"the callback ends single sequences through params.finish", test_finish_flags},
    {"repetition penalty under greedy", test_repetition_penalty_greedy},
    {"generation_config.json parsing", test_genconfig_parse},
    {"generation_config.json through the engine", test_genconfig_engine},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"generation with sampling and stop tokens", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
