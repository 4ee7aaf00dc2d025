/* The "paged" attention backend against "vanilla", the oracle.
 *
 * End to end (public API, every fixture under tests/fixtures/models): greedy generation of
 * every prompt in one mixed-length batch through attn_backend "paged" is identical token for
 * token to "vanilla"; logits of prompt + continuation agree within 1e-5 absolute (f32 KV; the
 * unsplit f32 paged kernel computes exactly what vanilla's contiguous kernel does, so the
 * measured difference is 0), for multi-head latent attention within 1e-5 x max|logit| (paged
 * absorbs kv_b into the query and output where vanilla expands keys and values: the same
 * products summed in another order; measured 1.9e-6 x max|logit|); each sequence alone
 * equals the batch; 1 and 2 threads agree.
 *
 * Backend level (the plugin's own sources, driven through its ops over a host KV cache
 * manager, host/runtime/kv_cache.h): a scripted run of steps mixing prefill, chunked prefill,
 * decode and multi-token sequences in one step, with slots released and reused, for block
 * sizes 1, 16, 64, layouts NHD and HND, KV dtypes f32, bf16, f16, fp8 e4m3 and mixed
 * (fp8 keys, bf16 values), full / sliding-window / chunked attention. Each step's output
 * is compared with a double-precision reference over the keys and values the pool holds for
 * each sequence (read back independently through its block table), |out - ref| <= 2e-5 *
 * max|v| + 1e-6, and, unchunked, with lh_k_attention (vanilla's kernel) on the same values:
 * within 2e-6 * max|v| + 1e-7 (identical whenever the kernel does not split the context).
 * The pool: blocks come back on release; running out is LH_E_UNSUPPORTED naming blocks
 * needed, free and total, and changes nothing. */
#include "llmhost.h"
#include "lh_kernels.h"
#include "paged.h"
#include "runner.h"
#include "api/host_internal.h"
#include "runtime/runner.h"
#include "runtime/kv_cache.h"
#include "rt_host.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_LOGITS 1e-5
#define TOL_LOGITS_MLA_REL 1e-5
#define MAX_NEW 32

static lh_host *host;

/* ---- end to end ------------------------------------------------------------------------------ */

typedef struct fixture {
    char dir[1024];
    char name[256];
    size_t n_prompts;
    int32_t *prompts[8];
    int64_t lens[8];
    bool mla; /* config.json sets kv_lora_rank */
    bool exact_bf16; /* bf16 weights routed by a MoE router: see open_engine */
} fixture;

static bool fixture_load(const char *root, const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%.700s/%.255s", root, name);
    snprintf(f->name, sizeof f->name, "%s", name);
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    json_t *ref = json_load_file(path, 0, NULL);
    if (!ref)
        return false;
    json_t *prompts = json_object_get(ref, "prompts");
    f->n_prompts = json_array_size(prompts);
    if (f->n_prompts > 8)
        f->n_prompts = 8;
    for (size_t i = 0; i < f->n_prompts; i++) {
        json_t *p = json_array_get(prompts, i);
        f->lens[i] = (int64_t)json_array_size(p);
        f->prompts[i] = malloc((size_t)(f->lens[i] ? f->lens[i] : 1) * sizeof(int32_t));
        for (int64_t j = 0; j < f->lens[i]; j++)
            f->prompts[i][j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
    }
    json_decref(ref);
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    f->mla = json_is_integer(json_object_get(cfg, "kv_lora_rank"));
    const char *dt = json_string_value(json_object_get(cfg, "dtype"));
    if (!dt)
        dt = json_string_value(json_object_get(cfg, "torch_dtype"));
    f->exact_bf16 = dt && strcmp(dt, "bfloat16") == 0 &&
                    (json_object_get(cfg, "num_experts") ||
                     json_object_get(cfg, "num_local_experts") ||
                     json_object_get(cfg, "n_routed_experts"));
    json_decref(cfg);
    return f->n_prompts > 0;
}

static void fixture_free(fixture *f)
{
    for (size_t i = 0; i < f->n_prompts; i++)
        free(f->prompts[i]);
}

/* A mixture of experts with bf16 weights runs with bf16_matmul exact: the AMX tiles (the
 * default, for 16 rows or more: a batch's prompts) round activations to bf16, and a rounding
 * that moves a router score across another flips an expert, so two correct runs (batched and
 * alone, paged and vanilla) could choose differently. */
static lh_engine *open_engine(const fixture *f, const char *backend, int threads)
{
    static const char *const overrides[] = {"max_batch_size=8", "max_seq_len=128", NULL};
    static const char *const exact[] = {"max_batch_size=8", "max_seq_len=128",
                                        "bf16_matmul=exact", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = f->dir, .n_threads = threads,
                           .overrides = f->exact_bf16 ? exact : overrides,
                           .attn_backend = backend};
    lh_engine *e = NULL;
    lh_err err = {0};
    if (lh_engine_open(host, &o, &e, &err) != LH_OK)
        fprintf(stderr, "\n  %s (%s): %s\n", f->name, backend, err.msg);
    return e;
}

static bool generate(lh_engine *e, const fixture *f, size_t first, size_t count, int32_t *out)
{
    lh_err err = {0};
    lh_status st = lh_engine_generate_greedy(e, (const int32_t *const *)&f->prompts[first],
                                             &f->lens[first], (int64_t)count, MAX_NEW, out, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  %s: %s\n", f->name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return st == LH_OK;
}

static void for_each_fixture(void (*check)(const fixture *f))
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", lh_test_env("LH_FIXTURES"));
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    CU_ASSERT_FATAL(n > 0);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        fixture f;
        if (names[i]->d_name[0] != '.' && fixture_load(dir, names[i]->d_name, &f)) {
            check(&f);
            checked++;
            fixture_free(&f);
        }
        free(names[i]);
    }
    free(names);
    CU_ASSERT(checked >= 10);
}

static void check_vs_vanilla(const fixture *f)
{
    lh_engine *van = open_engine(f, "vanilla", 0), *pag = open_engine(f, "paged", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(van);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pag);
    int32_t a[8 * MAX_NEW], b[8 * MAX_NEW];
    bool ok = generate(van, f, 0, f->n_prompts, a) && generate(pag, f, 0, f->n_prompts, b);
    int first_diff = -1;
    for (size_t i = 0; ok && i < f->n_prompts * MAX_NEW && first_diff < 0; i++)
        if (a[i] != b[i])
            first_diff = (int)i;
    if (first_diff >= 0)
        printf("\n    %s: paged greedy differs from vanilla at prompt %d step %d", f->name,
               first_diff / MAX_NEW, first_diff % MAX_NEW);
    CU_ASSERT_EQUAL(first_diff, -1);
    /* logits of every position of prompt + continuation */
    const int64_t vocab = lh_engine_vocab_size(van);
    double worst = 0, max_logit = 0;
    for (size_t i = 0; ok && i < f->n_prompts; i++) {
        const int64_t n = f->lens[i] + MAX_NEW;
        int32_t *toks = malloc((size_t)n * sizeof *toks);
        memcpy(toks, f->prompts[i], (size_t)f->lens[i] * sizeof *toks);
        memcpy(toks + f->lens[i], a + i * MAX_NEW, MAX_NEW * sizeof *toks);
        float *la = malloc((size_t)(n * vocab) * sizeof(float));
        float *lb = malloc((size_t)(n * vocab) * sizeof(float));
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_engine_logits(van, toks, n, la, &err), LH_OK);
        CU_ASSERT_EQUAL(lh_engine_logits(pag, toks, n, lb, &err), LH_OK);
        for (int64_t j = 0; j < n * vocab; j++) {
            double d = fabs((double)la[j] - (double)lb[j]);
            if (!(d <= worst))
                worst = isnan(d) ? INFINITY : d;
            if (fabs((double)la[j]) > max_logit)
                max_logit = fabs((double)la[j]);
        }
        free(toks);
        free(la);
        free(lb);
    }
    printf("\n    %-22s greedy %s; max |dlogit| paged vs vanilla %.3g%s", f->name,
           first_diff < 0 ? "identical" : "DIFFERS", worst, f->mla ? " (MLA)" : "");
    CU_ASSERT(worst <= (f->mla ? TOL_LOGITS_MLA_REL * max_logit : TOL_LOGITS));
    lh_engine_close(van);
    lh_engine_close(pag);
}

static void check_alone_and_threads(const fixture *f)
{
    lh_engine *one = open_engine(f, "paged", 1), *two = open_engine(f, "paged", 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    CU_ASSERT_PTR_NOT_NULL_FATAL(two);
    int32_t a[8 * MAX_NEW], b[8 * MAX_NEW], alone[MAX_NEW];
    if (generate(one, f, 0, f->n_prompts, a) && generate(two, f, 0, f->n_prompts, b))
        CU_ASSERT_EQUAL(memcmp(a, b, f->n_prompts * MAX_NEW * sizeof *a), 0);
    for (size_t i = 0; i < f->n_prompts; i++)
        if (generate(two, f, i, 1, alone))
            CU_ASSERT_EQUAL(memcmp(alone, a + i * MAX_NEW, sizeof alone), 0);
    lh_engine_close(one);
    lh_engine_close(two);
}

static void test_greedy_and_logits(void) { for_each_fixture(check_vs_vanilla); }
static void test_alone_and_threads(void) { for_each_fixture(check_alone_and_threads); }

static void test_engine_limits(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/llama-mha-f32", lh_test_env("LH_FIXTURES"));
    const char *ov[] = {"max_seq_len=4", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = dir, .n_threads = 1,
                           .overrides = ov, .attn_backend = "paged"};
    lh_engine *e = NULL;
    lh_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lh_engine_open(host, &o, &e, &err), LH_OK);
    int32_t five[5] = {1, 2, 3, 4, 5};
    float l5[5 * 4096];
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 5, l5, &err), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_seq_len 4"));
    /* nothing stuck: a fitting request still works, twice */
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 4, l5, &err), LH_OK);
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 4, l5, &err), LH_OK);
    /* absurd requests: a token count that would overflow, and step metadata that lies */
    const int32_t *pp[1] = {five};
    int64_t len1 = 1;
    int32_t one_out[1];
    CU_ASSERT_EQUAL(lh_engine_generate_greedy(e, pp, &len1, 1, INT64_MAX, one_out, &err),
                    LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "max_seq_len 4"));
    lh_runner *d = lh_engine_runner(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int64_t start = 0, nn = 1, ctx = -1, slot = 0, row = 0;
    int32_t pos = 0, tok = 1;
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = 1, .n_seqs = 1, .positions = &pos,
                       .token_start = &start, .n_new = &nn, .ctx_len = &ctx, .slot = &slot};
    CU_ASSERT_EQUAL(lh_runner_forward(d, lh_engine_kctx(e), &st, &tok, &row, 1, l5, &err),
                    LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "-1 cached"));
    ctx = 0;
    nn = 2; /* more new tokens than the step has */
    CU_ASSERT_EQUAL(lh_runner_forward(d, lh_engine_kctx(e), &st, &tok, &row, 1, l5, &err),
                    LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_engine_logits(e, five, 4, l5, &err), LH_OK); /* nothing stuck */
    lh_engine_close(e);
}

/* ---- run-config KV settings end to end ------------------------------------------------------ */

#define KV_TOKENS 60

static lh_engine *open_cfg(const char *model, const char *backend, const char *yaml,
                           const char *const *extra, lh_err *err)
{
    const char *ov[8] = {"max_batch_size=2", "max_seq_len=128"};
    size_t n = 2;
    for (const char *const *e = extra; e && *e && n < 7; e++)
        ov[n++] = *e;
    ov[n] = NULL;
    char path[256] = "";
    if (yaml) {
        snprintf(path, sizeof path, "/tmp/lh-test-paged-%d.yaml", (int)getpid());
        FILE *f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(yaml, f);
        fclose(f);
    }
    lh_engine_options o = {.struct_size = sizeof o, .model = model, .n_threads = 2,
                           .overrides = ov, .attn_backend = backend,
                           .config_file = yaml ? path : NULL};
    lh_engine *e = NULL;
    lh_status st = lh_engine_open(host, &o, &e, err);
    if (yaml)
        remove(path);
    if (st != LH_OK)
        printf("\n    open (%s): %s", backend, err->msg);
    return e;
}

/* logits of KV_TOKENS tokens; returns a malloc'ed [KV_TOKENS, vocab] or NULL */
static float *kv_logits(const char *model, const char *backend, const char *yaml,
                        const char *const *extra, int64_t *vocab)
{
    lh_err err = {0};
    lh_engine *e = open_cfg(model, backend, yaml, extra, &err);
    CU_ASSERT_PTR_NOT_NULL(e);
    if (!e)
        return NULL;
    *vocab = lh_engine_vocab_size(e);
    int32_t toks[KV_TOKENS];
    for (int i = 0; i < KV_TOKENS; i++)
        toks[i] = (int32_t)((i * 37 + 11) % *vocab);
    float *l = malloc((size_t)(KV_TOKENS * *vocab) * sizeof(float));
    lh_status st = lh_engine_logits(e, toks, KV_TOKENS, l, &err);
    if (st != LH_OK)
        printf("\n    logits (%s): %s", backend, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    lh_engine_close(e);
    if (st != LH_OK) {
        free(l);
        return NULL;
    }
    return l;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= w))
            w = isnan(d) ? INFINITY : d;
    }
    return w;
}

static void test_engine_kv_settings(void)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/models/llama-gqa-bf16", lh_test_env("LH_FIXTURES"));
    int64_t vocab = 0;
    const int64_t n = KV_TOKENS;
    float *van = kv_logits(model, "vanilla", NULL, NULL, &vocab);
    /* fused RoPE (the default with paged) and unfused compute the same values */
    float *fused = kv_logits(model, "paged", NULL, NULL, &vocab);
    const char *unfused_ov[] = {"fused_rope=false", NULL};
    float *unfused = kv_logits(model, "paged", NULL, unfused_ov, &vocab);
    CU_ASSERT_FATAL(van && fused && unfused);
    double d_fused = max_diff(fused, van, n * vocab), d_unf = max_diff(unfused, van, n * vocab);
    printf("\n    fused RoPE vs vanilla %.3g, unfused vs vanilla %.3g, fused vs unfused %.3g",
           d_fused, d_unf, max_diff(fused, unfused, n * vocab));
    CU_ASSERT(d_fused <= TOL_LOGITS);
    CU_ASSERT(d_unf <= TOL_LOGITS);
    /* sparse top-k whose blocks cover the whole context equals dense, bit for bit */
    float *dense4 = kv_logits(model, "paged", "kv_cache: {block_size: 4}\n", NULL, &vocab);
    float *cover = kv_logits(model, "paged",
                             "kv_cache: {block_size: 4}\nsparse_attention: {algorithm: "
                             "topk_blocks, top_k: 64, local_blocks: 1}\n", NULL, &vocab);
    float *sparse = kv_logits(model, "paged",
                              "kv_cache: {block_size: 4}\nsparse_attention: {algorithm: "
                              "topk_blocks, top_k: 2, local_blocks: 1}\n", NULL, &vocab);
    CU_ASSERT_FATAL(dense4 && cover && sparse);
    CU_ASSERT(max_diff(dense4, van, n * vocab) <= TOL_LOGITS);
    CU_ASSERT_EQUAL(memcmp(dense4, cover, (size_t)(n * vocab) * sizeof(float)), 0);
    /* 15 blocks, 3 attended: the first 12 tokens (3 blocks) see everything, later ones not */
    double d_sparse_head = max_diff(sparse, dense4, 12 * vocab);
    double d_sparse = max_diff(sparse, dense4, n * vocab);
    printf("\n    sparse top_k 2 + 1 local of 15 blocks vs dense: first 12 tokens %.3g, all %.3g",
           d_sparse_head, d_sparse);
    CU_ASSERT_EQUAL(d_sparse_head, 0.0);
    CU_ASSERT(d_sparse > 0 && isfinite(d_sparse));
    /* mixed precision (fp8 keys, bf16 values), HND: close to vanilla (fp8 keys dominate) */
    float *mixed = kv_logits(model, "paged",
                             "kv_cache: {k_dtype: fp8, v_dtype: bfloat16, layout: HND}\n", NULL,
                             &vocab);
    float *fp8 = kv_logits(model, "paged", "kv_cache: {dtype: fp8, layout: HND}\n", NULL,
                           &vocab);
    CU_ASSERT_FATAL(mixed && fp8);
    /* fp8 e4m3 keeps 3 mantissa bits: over 60 tokens the logits (|l| up to ~8) move by up to
     * ~1.5; the tolerance is a sanity bound (the backend-level test checks each value) */
    double d_mixed = max_diff(mixed, van, n * vocab), d_fp8 = max_diff(fp8, van, n * vocab);
    printf("\n    vs vanilla (f32 KV): mixed KV (fp8 keys, bf16 values, HND) %.3g, fp8 keys and "
           "values %.3g (tolerance 2.5)", d_mixed, d_fp8);
    CU_ASSERT(d_mixed <= 2.5);
    CU_ASSERT(d_fp8 <= 2.5);
    free(fp8);
    /* memory_fraction sizes a pool that works */
    const char *frac_ov[] = {"kv_cache.memory_fraction=0.01", NULL};
    float *frac = kv_logits(model, "paged", NULL, frac_ov, &vocab);
    CU_ASSERT_FATAL(frac != NULL);
    CU_ASSERT_EQUAL(memcmp(frac, fused, (size_t)(n * vocab) * sizeof(float)), 0);
    /* a pool too small for the request is refused before any step, with the numbers */
    lh_err err = {0};
    const char *small_ov[] = {"kv_cache.max_tokens=32", NULL};
    lh_engine *e = open_cfg(model, "paged", NULL, small_ov, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int32_t toks[KV_TOKENS] = {0};
    CU_ASSERT_EQUAL(lh_engine_logits(e, toks, KV_TOKENS, van, &err), LH_E_UNSUPPORTED);
    printf("\n    %s", err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "needs 4 blocks of 16 tokens (1 sequence)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "has 2 free of 2"));
    CU_ASSERT_EQUAL(lh_engine_logits(e, toks, 32, van, &err), LH_OK); /* what fits still runs */
    lh_engine_close(e);
    /* vanilla refuses what it cannot honour; knobs this runtime lacks are refused by name */
    CU_ASSERT_PTR_NULL(open_cfg(model, "vanilla", "kv_cache: {v_dtype: bfloat16}\n", NULL, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "mixed_kv"));
    const char *beam_ov[] = {"beam_width=4", NULL};
    CU_ASSERT_PTR_NULL(open_cfg(model, "paged", NULL, beam_ov, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "beam search is not implemented"));
    free(van);
    free(fused);
    free(unfused);
    free(dense4);
    free(cover);
    free(sparse);
    free(mixed);
    free(frac);
}

/* The latent cache of multi-head latent attention through the engine (deepseek-v3-f32): bf16,
 * fp8 and HND latents close to vanilla's expanded f32 cache, sparse top-k covering every
 * block equal to dense, and the mixed-precision setting refused by name. */
static void test_engine_mla_kv_settings(void)
{
    char model[1024];
    snprintf(model, sizeof model, "%s/models/deepseek-v3-f32", lh_test_env("LH_FIXTURES"));
    int64_t vocab = 0;
    const int64_t n = KV_TOKENS;
    float *van = kv_logits(model, "vanilla", NULL, NULL, &vocab);
    float *f32 = kv_logits(model, "paged", NULL, NULL, &vocab);
    float *hnd = kv_logits(model, "paged", "kv_cache: {layout: HND, block_size: 4}\n", NULL,
                           &vocab);
    float *bf16 = kv_logits(model, "paged", "kv_cache: {dtype: bfloat16}\n", NULL, &vocab);
    float *fp8 = kv_logits(model, "paged", "kv_cache: {dtype: fp8}\n", NULL, &vocab);
    float *cover = kv_logits(model, "paged",
                             "kv_cache: {layout: HND, block_size: 4}\nsparse_attention: "
                             "{algorithm: topk_blocks, top_k: 64, local_blocks: 1}\n", NULL,
                             &vocab);
    CU_ASSERT_FATAL(van && f32 && hnd && bf16 && fp8 && cover);
    double max_logit = 0;
    for (int64_t i = 0; i < n * vocab; i++)
        if (fabs((double)van[i]) > max_logit)
            max_logit = fabs((double)van[i]);
    const double d32 = max_diff(f32, van, n * vocab), dh = max_diff(hnd, van, n * vocab);
    const double db = max_diff(bf16, van, n * vocab), d8 = max_diff(fp8, van, n * vocab);
    /* the first token attends to itself alone, so what the latent's dtype changes there is
     * its own rounding, before any router downstream could choose other experts */
    const double db0 = max_diff(bf16, van, vocab), d80 = max_diff(fp8, van, vocab);
    printf("\n    MLA latent vs vanilla (expanded f32, max|logit| %.3g): f32 %.3g, HND blocks of 4 "
           "%.3g; bf16 %.3g (first token %.3g), fp8 %.3g (first token %.3g)", max_logit, d32, dh,
           db, db0, d8, d80);
    CU_ASSERT(d32 <= TOL_LOGITS_MLA_REL * max_logit);
    CU_ASSERT(dh <= TOL_LOGITS_MLA_REL * max_logit);
    /* Over 60 random tokens a rounded latent moves some router score across another and the
     * logits after it follow other experts (a mixture of experts amplifies any perturbation),
     * so the whole run gets sanity bounds only; the backend-level test (paged_mla) checks
     * every value of bf16 and fp8 latents against the pool's own */
    CU_ASSERT(db0 <= 0.05);
    CU_ASSERT(d80 <= 0.5);
    CU_ASSERT(isfinite(db) && isfinite(d8) && db <= 4 * max_logit && d8 <= 4 * max_logit);
    CU_ASSERT_EQUAL(memcmp(cover, hnd, (size_t)(n * vocab) * sizeof(float)), 0);
    /* the keys' dtype alone sets the latent's (there are no separate values) */
    float *konly = kv_logits(model, "paged", "kv_cache: {k_dtype: bfloat16}\n", NULL, &vocab);
    CU_ASSERT_FATAL(konly != NULL);
    CU_ASSERT_EQUAL(memcmp(konly, bf16, (size_t)(n * vocab) * sizeof(float)), 0);
    free(konly);
    /* int4 weights: kv_a_proj_with_mqa is split after its projection, so it may be quantized */
    float *q4 = kv_logits(model, "paged", "quant: {scheme: int4, group_size: 8}\n", NULL, &vocab);
    CU_ASSERT_FATAL(q4 != NULL);
    CU_ASSERT(isfinite(max_diff(q4, van, n * vocab)));
    free(q4);
    lh_err err = {0};
    CU_ASSERT_PTR_NULL(open_cfg(model, "paged", "kv_cache: {dtype: fp8, v_dtype: bfloat16}\n",
                                NULL, &err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "one latent"));
    free(van);
    free(f32);
    free(hnd);
    free(bf16);
    free(fp8);
    free(cover);
}

/* ---- backend level ----------------------------------------------------------------------------- */

#define MAX_SEQS 4
#define MAX_LEN 400

/* What a backend-level run is configured with (block size, layout, KV dtypes, pool size,
 * chunk size, soft-cap): the run config's kv_cache and the model's attention_chunk_size and
 * attention-logit soft-cap. */
typedef struct bk_config {
    int64_t block_size;
    lh_kv_layout layout;
    lh_dtype k_dtype, v_dtype;
    int64_t max_tokens; /* 0: max_seqs x max_seq_len */
    int64_t chunk_size;
    float softcap; /* geometry.logit_softcap; 0: none */
} bk_config;

static const bk_config bk_default = {.block_size = 16, .layout = LH_KV_NHD,
                                      .k_dtype = LH_DTYPE_F32, .v_dtype = LH_DTYPE_F32};

/* Backend under test, its host KV cache, plus what the test knows of each slot. */
typedef struct bk {
    lh_attn_layer *layer;
    lh_attn_geometry g;
    bk_config cfg;
    lh_kv_cache *cache;
    lh_kctx *kctx;
    int64_t len[MAX_SEQS];
    bool check; /* compare this step's outputs (off for most decode steps: run time) */
    double worst_ref, worst_van; /* err / max|v| */
    long bad;
} bk;

static uint64_t rng = 88172645463325252ull;
static double urand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* The value the pool holds for a sequence's (k or v, position, kv head, d). */
static float pool_get(const bk *b, const int32_t *table, const lh_kv_pages *kvp, int is_v,
                      int64_t pos, int64_t h, int64_t d)
{
    const lh_kv_pages kv = *kvp;
    const int64_t bs = b->cfg.block_size, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    const int64_t phys = table[pos / bs], off = pos % bs;
    const int64_t idx = kv.layout == LH_KV_NHD ? ((phys * bs + off) * KVH + h) * D + d
                                               : ((phys * KVH + h) * bs + off) * D + d;
    const void *base = is_v ? kv.v.data : kv.k.data;
    switch (is_v ? b->cfg.v_dtype : b->cfg.k_dtype) {
    case LH_DTYPE_F32: return ((const float *)base)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)base)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)base)[idx]);
    default: {
        const float *sc = (is_v ? kv.v_scale.data : kv.k_scale.data);
        return lh_k_fp8_e4m3_to_f32(((const uint8_t *)base)[idx]) * sc[phys * KVH + h];
    }
    }
}

static bool visible(int64_t p, int64_t qp, int64_t window, int64_t chunk)
{
    return p <= qp && !(window > 0 && qp - p >= window) && !(chunk > 0 && p / chunk != qp / chunk);
}

/* Checks out [n, H, D] of one sequence against the references on the pool's values. */
static void check_seq(bk *b, int64_t slot, const float *q, const int32_t *pos, int64_t n,
                      const float *out, const char *what)
{
    const int64_t H = b->g.num_heads, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    const int64_t S = b->len[slot];
    int64_t n_table;
    const int32_t *seq = lh_kv_cache_table(b->cache, slot, &n_table);
    const lh_kv_pages kv = *lh_kv_cache_layer(b->cache, 0);
    float *k = malloc((size_t)(S * KVH * D) * sizeof(float));
    float *v = malloc((size_t)(S * KVH * D) * sizeof(float));
    double vmax = 0;
    for (int64_t p = 0; p < S; p++)
        for (int64_t h = 0; h < KVH; h++)
            for (int64_t d = 0; d < D; d++) {
                k[(p * KVH + h) * D + d] = pool_get(b, seq, &kv, 0, p, h, d);
                v[(p * KVH + h) * D + d] = pool_get(b, seq, &kv, 1, p, h, d);
                vmax = fmax(vmax, fabs(v[(p * KVH + h) * D + d]));
            }
    const double tol = 2e-5 * vmax + 1e-6;
    double *sc = malloc((size_t)S * sizeof(double));
    long bad = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kvh = h / (H / KVH);
            double m = -INFINITY, sum = 0;
            for (int64_t p = 0; p < S; p++) {
                sc[p] = -INFINITY;
                if (!visible(p, pos[t], b->g.sliding_window, b->cfg.chunk_size))
                    continue;
                double s = 0;
                for (int64_t d = 0; d < D; d++)
                    s += (double)q[(t * H + h) * D + d] * k[(p * KVH + kvh) * D + d];
                sc[p] = s * b->g.scale;
                if (b->g.logit_softcap > 0)
                    sc[p] = tanh(sc[p] / b->g.logit_softcap) * b->g.logit_softcap;
                m = fmax(m, sc[p]);
            }
            for (int64_t p = 0; p < S; p++)
                sum += sc[p] == -INFINITY ? 0 : exp(sc[p] - m);
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t p = 0; p < S; p++)
                    if (sc[p] != -INFINITY)
                        o += exp(sc[p] - m) / sum * v[(p * KVH + kvh) * D + d];
                double e = fabs(out[(t * H + h) * D + d] - o);
                if (!(e <= tol))
                    bad++;
                b->worst_ref = fmax(b->worst_ref, e / vmax);
            }
        }
    if (b->cfg.chunk_size == 0) { /* vanilla's kernel on the same values */
        float *o2 = malloc((size_t)(n * H * D) * sizeof(float));
        int64_t qs[3] = {n, H, D}, kvs[3] = {S, KVH, D};
        lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, (void *)q, 3, qs);
        lh_tensor to = lh_tensor_cpu(LH_DTYPE_F32, o2, 3, qs);
        lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, k, 3, kvs);
        lh_tensor tv = lh_tensor_cpu(LH_DTYPE_F32, v, 3, kvs);
        CU_ASSERT_EQUAL(lh_k_attention(b->kctx, &tq, &tk, &tv, pos, b->g.scale,
                                       b->g.logit_softcap, b->g.sliding_window, &to), LH_OK);
        for (int64_t i = 0; i < n * H * D; i++) {
            double e = fabs(out[i] - o2[i]);
            if (!(e <= 2e-6 * vmax + 1e-7))
                bad++;
            b->worst_van = fmax(b->worst_van, e / vmax);
        }
        free(o2);
    }
    if (bad)
        printf("\n    FAIL %s: slot %lld, %lld tokens over %lld: %ld values out of tolerance", what,
               (long long)slot, (long long)n, (long long)S, bad);
    b->bad += bad;
    free(sc);
    free(k);
    free(v);
}

/* One step: seqs[i] = {slot, n_new}; random q, k, v. Returns the status of prepare/forward. */
static lh_status bk_step(bk *b, const int64_t (*seqs)[2], int64_t n_seqs, const char *what,
                         char *msg, size_t msg_size)
{
    const int64_t H = b->g.num_heads, KVH = b->g.num_kv_heads, D = b->g.head_dim;
    int64_t T = 0, start[MAX_SEQS], nn[MAX_SEQS], ctx[MAX_SEQS], slot[MAX_SEQS];
    for (int64_t i = 0; i < n_seqs; i++) {
        slot[i] = seqs[i][0];
        nn[i] = seqs[i][1];
        ctx[i] = b->len[slot[i]];
        start[i] = T;
        T += nn[i];
    }
    int32_t *pos = malloc((size_t)(T ? T : 1) * sizeof *pos);
    float *q = malloc((size_t)(T * H * D + 1) * sizeof(float));
    float *k = malloc((size_t)(T * KVH * D + 1) * sizeof(float));
    float *v = malloc((size_t)(T * KVH * D + 1) * sizeof(float));
    float *out = malloc((size_t)(T * H * D + 1) * sizeof(float));
    for (int64_t i = 0; i < n_seqs; i++)
        for (int64_t t = 0; t < nn[i]; t++)
            pos[start[i] + t] = (int32_t)(ctx[i] + t);
    for (int64_t i = 0; i < T * H * D; i++)
        q[i] = (float)urand();
    for (int64_t i = 0; i < T * KVH * D; i++) {
        k[i] = (float)urand();
        v[i] = (float)(urand() * 2.0);
    }
    /* the host's part: blocks for every sequence's tokens after the step, all or nothing */
    int64_t after[MAX_SEQS], n_tab[MAX_SEQS];
    const int32_t *tabs[MAX_SEQS];
    for (int64_t i = 0; i < n_seqs; i++)
        after[i] = ctx[i] + nn[i];
    lh_err err = {0};
    lh_status rc = lh_kv_cache_reserve(b->cache, slot, after, n_seqs, &err);
    if (rc != LH_OK)
        snprintf(msg, msg_size, "%.480s", err.msg);
    for (int64_t i = 0; rc == LH_OK && i < n_seqs; i++)
        tabs[i] = lh_kv_cache_table(b->cache, slot[i], &n_tab[i]);
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = T, .n_seqs = n_seqs,
                       .positions = pos, .token_start = start, .n_new = nn, .ctx_len = ctx,
                       .slot = slot, .block_tables = tabs, .n_blocks = n_tab};
    const lh_attn_forward_args args = {.struct_size = sizeof args,
                                       .kv = lh_kv_cache_layer(b->cache, 0)};
    int64_t qs[3] = {T, H, D}, ks[3] = {T, KVH, D};
    lh_tensor tq = lh_tensor_cpu(LH_DTYPE_F32, q, 3, qs), to = lh_tensor_cpu(LH_DTYPE_F32, out, 3, qs);
    lh_tensor tk = lh_tensor_cpu(LH_DTYPE_F32, k, 3, ks), tv = lh_tensor_cpu(LH_DTYPE_F32, v, 3, ks);
    lh_error aerr = {0};
    if (rc == LH_OK)
        rc = paged_ops.prepare(b->layer, &st, &aerr);
    if (rc == LH_OK)
        rc = paged_ops.forward(b->layer, b->kctx, &st, &args, &tq, &tk, &tv, &to, &aerr);
    if (aerr.code != LH_OK)
        snprintf(msg, msg_size, "%.480s", aerr.msg);
    for (int64_t i = 0; rc == LH_OK && i < n_seqs; i++) {
        b->len[slot[i]] += nn[i];
        if (b->check)
            check_seq(b, slot[i], q + start[i] * H * D, pos + start[i], nn[i],
                      out + start[i] * H * D, what);
    }
    free(pos);
    free(q);
    free(k);
    free(v);
    free(out);
    return rc;
}

static void bk_release(bk *b, int64_t slot)
{
    lh_kv_cache_release(b->cache, slot);
    b->len[slot] = 0;
}

static bool bk_open(bk *b, const bk_config *cfg, int64_t window, int threads)
{
    memset(b, 0, sizeof *b);
    b->check = true;
    b->g = (lh_attn_geometry){.struct_size = sizeof b->g, .layer_index = 3, .num_heads = 6,
                              .num_kv_heads = 2, .head_dim = 24, .sliding_window = window,
                              .scale = 0.2f, .max_seq_len = MAX_LEN, .max_seqs = MAX_SEQS,
                              .attention_chunk_size = cfg->chunk_size,
                              .kv_block_size = cfg->block_size, .kv_dtype = cfg->k_dtype,
                              .kv_layout = (int32_t)cfg->layout, .kv_v_dtype = cfg->v_dtype,
                              .logit_softcap = cfg->softcap};
    b->cfg = *cfg;
    lh_device cpu = {LH_DEVICE_CPU, 0};
    b->kctx = lh_k_ctx_create(threads, cpu);
    const lh_kv_cache_config kc = {.block_size = cfg->block_size, .k_dtype = cfg->k_dtype,
                                   .v_dtype = cfg->v_dtype, .layout = (int)cfg->layout,
                                   .max_tokens = cfg->max_tokens};
    lh_kv_plan plan;
    lh_err err = {0};
    lh_status st = lh_kv_plan_compute(&kc, 1, b->g.num_kv_heads, b->g.head_dim, false, false, MAX_LEN,
                                      MAX_SEQS, NULL, &plan, &err);
    if (st == LH_OK)
        st = lh_kv_cache_create(&plan, b->kctx, &b->cache, &err);
    if (st != LH_OK) {
        printf("\n    KV cache: %s", err.msg);
        return false;
    }
    lh_error cerr = {0};
    st = paged_ops.create(&b->g, &b->layer, &cerr);
    if (st != LH_OK)
        printf("\n    create: %s", cerr.msg);
    return st == LH_OK && b->kctx;
}

static void bk_close(bk *b)
{
    paged_ops.destroy(b->layer);
    lh_kv_cache_free(b->cache);
    lh_k_ctx_free(b->kctx);
}

static const char *dt_str(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    default: return "fp8";
    }
}

static const char *kv_str(const bk_config *c, char *buf, size_t n)
{
    if (c->k_dtype == c->v_dtype)
        snprintf(buf, n, "%s", dt_str(c->k_dtype));
    else
        snprintf(buf, n, "k %s / v %s", dt_str(c->k_dtype), dt_str(c->v_dtype));
    return buf;
}

static void test_backend_scripted_steps(void)
{
    /* each dtype alone, then mixed precision (fp8 keys, bf16 values) */
    static const lh_dtype kdts[5] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                     LH_DTYPE_FP8_E4M3, LH_DTYPE_FP8_E4M3};
    static const lh_dtype vdts[5] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                     LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16};
    static const int64_t sizes[3] = {1, 16, 64};
    static const struct {
        const char *name;
        int64_t window, chunk;
    } masks[3] = {{"full", 0, 0}, {"window 24", 24, 0}, {"chunked 32", 0, 32}};
    double worst_ref = 0, worst_van = 0;
    int runs = 0;
    for (int di = 0; di < 5; di++)
        for (int si = 0; si < 3; si++)
            for (int li = 0; li < 2; li++)
                for (int mi = 0; mi < 3; mi++) {
                    bk_config cfg = bk_default;
                    cfg.block_size = sizes[si];
                    cfg.layout = li ? LH_KV_HND : LH_KV_NHD;
                    cfg.k_dtype = kdts[di];
                    cfg.v_dtype = vdts[di];
                    cfg.chunk_size = masks[mi].chunk;
                    char what[160], dts[64];
                    snprintf(what, sizeof what, "%s, block %lld, %s, %s",
                             kv_str(&cfg, dts, sizeof dts), (long long)sizes[si],
                             li ? "HND" : "NHD", masks[mi].name);
                    bk b;
                    CU_ASSERT_FATAL(bk_open(&b, &cfg, masks[mi].window, 3));
                    char msg[512];
                    /* prefill two, then chunked prefill + decode + a new prefill in one step */
                    const int64_t s1[][2] = {{0, 37}, {1, 5}};
                    const int64_t s2[][2] = {{0, 1}, {1, 20}, {2, 70}};
                    const int64_t s3[][2] = {{2, 3}, {0, 1}, {1, 1}}; /* 3 tokens: multi-token */
                    CU_ASSERT_EQUAL(bk_step(&b, s1, 2, what, msg, sizeof msg), LH_OK);
                    CU_ASSERT_EQUAL(bk_step(&b, s2, 3, what, msg, sizeof msg), LH_OK);
                    CU_ASSERT_EQUAL(bk_step(&b, s3, 3, what, msg, sizeof msg), LH_OK);
                    /* decode all three past several blocks (and past 256 tokens for slot 2:
                     * the kernel splits long decode contexts) */
                    for (int i = 0; i < 190; i++) {
                        const int64_t sd[][2] = {{0, 1}, {1, 1}, {2, 1}};
                        b.check = i % 16 == 0 || i >= 186;
                        lh_status st = bk_step(&b, sd, 3, what, msg, sizeof msg);
                        if (st != LH_OK) {
                            printf("\n    %s: %s", what, msg);
                            CU_FAIL("decode step");
                            break;
                        }
                    }
                    b.check = true;
                    /* slot 1 finishes; a new sequence takes it over and reuses its blocks */
                    bk_release(&b, 1);
                    const int64_t s4[][2] = {{1, 50}, {2, 1}};
                    CU_ASSERT_EQUAL(bk_step(&b, s4, 2, what, msg, sizeof msg), LH_OK);
                    const int64_t s5[][2] = {{1, 1}, {0, 1}, {3, 9}};
                    CU_ASSERT_EQUAL(bk_step(&b, s5, 3, what, msg, sizeof msg), LH_OK);
                    for (int64_t s = 0; s < MAX_SEQS; s++)
                        bk_release(&b, s);
                    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(b.cache),
                                    lh_kv_cache_plan(b.cache)->num_blocks);
                    CU_ASSERT_EQUAL(b.bad, 0);
                    worst_ref = fmax(worst_ref, b.worst_ref);
                    worst_van = fmax(worst_van, b.worst_van);
                    bk_close(&b);
                    runs++;
                }
    printf("\n    %d configurations; worst |out - ref| / max|v| %.3g, |out - lh_k_attention| / "
           "max|v| %.3g",
           runs, worst_ref, worst_van);
}

static void test_backend_out_of_blocks(void)
{
    bk_config cfg = bk_default;
    cfg.max_tokens = 96; /* 6 blocks */
    bk b;
    CU_ASSERT_FATAL(bk_open(&b, &cfg, 0, 2));
    char msg[512] = "";
    const int64_t a[][2] = {{0, 80}};
    CU_ASSERT_EQUAL(bk_step(&b, a, 1, "pool", msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(b.cache), 1);
    /* 40 more tokens in slot 1 need 3 blocks: refused with the numbers, nothing allocated */
    const int64_t c[][2] = {{1, 40}};
    CU_ASSERT_EQUAL(bk_step(&b, c, 1, "pool", msg, sizeof msg), LH_E_UNSUPPORTED);
    printf("\n    %s", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "out of KV cache blocks"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "needs 3 more blocks of 16 tokens"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "only 1 of the pool's 6 blocks are free"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "kv_cache.max_tokens=96"));
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(b.cache), 1);
    /* slot 0 goes on to 96 tokens (its 6th block is the free one), then can go no further */
    for (int i = 0; i < 16; i++) {
        const int64_t d[][2] = {{0, 1}};
        CU_ASSERT_EQUAL(bk_step(&b, d, 1, "pool", msg, sizeof msg), LH_OK);
    }
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(b.cache), 0);
    const int64_t d[][2] = {{0, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, d, 1, "pool", msg, sizeof msg), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "needs 1 more block of 16 tokens, but only 0 of the "
                                       "pool's 6 blocks are free"));
    /* released: everything is free again and slot 1 fits */
    bk_release(&b, 0);
    CU_ASSERT_EQUAL(lh_kv_cache_free_blocks(b.cache), 6);
    const int64_t e[][2] = {{1, 40}};
    CU_ASSERT_EQUAL(bk_step(&b, e, 1, "pool", msg, sizeof msg), LH_OK);
    CU_ASSERT_EQUAL(b.bad, 0);
    /* the step's own inconsistencies: a slot twice, past max_seq_len */
    const int64_t twice[][2] = {{2, 1}, {2, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, twice, 2, "pool", msg, sizeof msg), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "appears twice"));
    bk_close(&b);

    cfg = bk_default; /* the default pool cannot run out: max_seq_len stops first */
    CU_ASSERT_FATAL(bk_open(&b, &cfg, 0, 1));
    const int64_t big[][2] = {{3, MAX_LEN}};
    CU_ASSERT_EQUAL(bk_step(&b, big, 1, "pool", msg, sizeof msg), LH_OK);
    const int64_t more[][2] = {{3, 1}};
    CU_ASSERT_EQUAL(bk_step(&b, more, 1, "pool", msg, sizeof msg), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "max_seq_len 400"));
    bk_close(&b);

    /* a forward without the host's tables or blocks is refused, not dereferenced */
    CU_ASSERT_FATAL(bk_open(&b, &cfg, 0, 1));
    int64_t start = 0, one = 1, zero = 0, slot = 0;
    int32_t pos = 0;
    lh_attn_step st = {.struct_size = sizeof st, .n_tokens = 1, .n_seqs = 1, .positions = &pos,
                       .token_start = &start, .n_new = &one, .ctx_len = &zero, .slot = &slot};
    lh_error perr = {0};
    CU_ASSERT_EQUAL(paged_ops.prepare(b.layer, &st, &perr), LH_E_USAGE);
    CU_ASSERT_EQUAL(perr.code, LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(perr.msg, "no KV block tables"));
    /* lengths that would overflow ctx_len + n_new are refused before any arithmetic */
    const int32_t *tabs[1] = {NULL};
    int64_t n_tab = 0, huge = INT64_MAX, full = MAX_LEN;
    st.block_tables = tabs;
    st.n_blocks = &n_tab;
    st.ctx_len = &full;
    st.n_new = &huge;
    CU_ASSERT_EQUAL(paged_ops.prepare(b.layer, &st, &perr), LH_E_USAGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(perr.msg, "max_seq_len 400"));
    CU_ASSERT_EQUAL(paged_ops.prepare(b.layer, &st, NULL), LH_E_USAGE); /* err may be NULL */
    bk_close(&b);
}

/* geometry.logit_softcap reaches the kernels: the same scripted steps with a cap that matters
 * (q, k in [-1, 1), D 24, scale 0.2: scores up to about 1, caps 0.3 and 0.6) against the
 * capped reference and lh_k_attention with the same cap, f32 and fp8 / bf16, full and with a
 * window, decodes long enough to split. */
static void test_backend_softcap(void)
{
    static const float caps[2] = {0.3f, 0.6f};
    double worst_ref = 0, worst_van = 0;
    for (int ci = 0; ci < 2; ci++)
        for (int di = 0; di < 2; di++) {
            bk_config cfg = bk_default;
            cfg.softcap = caps[ci];
            cfg.k_dtype = di ? LH_DTYPE_FP8_E4M3 : LH_DTYPE_F32;
            cfg.v_dtype = di ? LH_DTYPE_BF16 : LH_DTYPE_F32;
            cfg.layout = di ? LH_KV_HND : LH_KV_NHD;
            const int64_t window = ci ? 24 : 0;
            char what[96], dts[64];
            snprintf(what, sizeof what, "softcap %g, %s, window %lld", (double)cfg.softcap,
                     kv_str(&cfg, dts, sizeof dts), (long long)window);
            bk b;
            CU_ASSERT_FATAL(bk_open(&b, &cfg, window, 2));
            char msg[512] = "";
            const int64_t s1[][2] = {{0, 37}, {1, 5}};
            const int64_t s2[][2] = {{0, 1}, {1, 20}, {2, 70}};
            CU_ASSERT_EQUAL(bk_step(&b, s1, 2, what, msg, sizeof msg), LH_OK);
            CU_ASSERT_EQUAL(bk_step(&b, s2, 3, what, msg, sizeof msg), LH_OK);
            for (int i = 0; i < 200; i++) { /* slot 2 past 256 tokens: split decodes */
                const int64_t sd[][2] = {{0, 1}, {2, 1}};
                b.check = i % 25 == 0 || i >= 198;
                CU_ASSERT_EQUAL_FATAL(bk_step(&b, sd, 2, what, msg, sizeof msg), LH_OK);
            }
            CU_ASSERT_EQUAL(b.bad, 0);
            worst_ref = fmax(worst_ref, b.worst_ref);
            worst_van = fmax(worst_van, b.worst_van);
            bk_close(&b);
        }
    printf("\n    worst |out - ref| / max|v| %.3g, |out - lh_k_attention| / max|v| %.3g",
           worst_ref, worst_van);
}

static int suite_init(void)
{
    if (!(host = rt_builtin_host()))
        return 1;
    return 0;
}

static int suite_clean(void)
{
    lh_host_free(host);
    return 0;
}

static CU_TestInfo e2e_tests[] = {
    {"greedy identical to vanilla, logits within 1e-5, every fixture", test_greedy_and_logits},
    {"alone equals batch, 1 and 2 threads agree", test_alone_and_threads},
    {"max_seq_len is refused, not truncated", test_engine_limits},
    {"fused RoPE, sparse top-k, mixed KV, pool sizing through the engine",
     test_engine_kv_settings},
    {"MLA latent cache through the engine: dtypes, layout, sparse, mixed KV refused",
     test_engine_mla_kv_settings},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo backend_tests[] = {
    {"mixed prefill/decode steps vs reference: blocks, layouts, dtypes, masks",
     test_backend_scripted_steps},
    {"out of blocks, release, step errors", test_backend_out_of_blocks},
    {"geometry.logit_softcap reaches the kernels", test_backend_softcap},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"paged vs vanilla, end to end", suite_init, suite_clean, NULL, NULL, e2e_tests},
    {"paged backend", NULL, NULL, NULL, NULL, backend_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
