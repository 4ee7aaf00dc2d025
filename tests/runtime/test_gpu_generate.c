/* The engine on a CUDA device against the same engine on the CPU, through the public API,
 * for every fixture checkpoint the inference tests use (tests/fixtures/models/<name> with a
 * reference.json), with the paged and the vanilla attention backends, CUDA graphs off and on:
 *   - greedy continuations (all prompts in one mixed-length batch, 32 new tokens) are
 *     identical token for token;
 *   - the logits of every position of each prompt agree within
 *       TOL_F32  = 1e-3 for f32 checkpoints (both compute in f32 from the same f32 weights;
 *                  only summation order differs),
 *       TOL_BF16 = 2e-2 for bf16 checkpoints (f32 compute from bf16 weights on both sides,
 *                  but the GPU's GEMMs may round the upcast operands or accumulate in
 *                  another order over larger partial sums);
 *   - with graphs on and the paged backend, decode steps really are replayed (captures >= 1,
 *     replays >= 1); the vanilla backend grows its own cache during steps and always runs
 *     eagerly (no captures);
 *   - sampled generation with a fixed seed is reproducible on the device.
 * These need a CUDA device and count as skipped where there is none. What runs everywhere:
 * device: cuda without a usable device is refused when the engine opens (LH_E_UNSUPPORTED,
 * saying why), and device: cpu runs on the CPU with cuda_graphs ignored. */
#include "api/host_internal.h"
#include "runtime/runner_internal.h"
#include "lh_kernels.h"
#include "llmhost.h"
#include "runner.h"
#include "rt_host.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_F32 1e-3
#define TOL_BF16 2e-2
#define MAX_NEW 32
#define MAX_PROMPTS 8

static lh_host *host;

#define NEED_CUDA()                                                                            \
    do {                                                                                       \
        if (lh_k_cuda_device_count() == 0) {                                                   \
            char why_[512];                                                                    \
            snprintf(why_, sizeof why_, "no usable CUDA device: %s",                           \
                     lh_k_cuda_unavailable_reason());                                          \
            LH_TEST_SKIP(why_);                                                                \
            return;                                                                            \
        }                                                                                      \
    } while (0)

typedef struct fixture {
    char dir[1024];
    char name[256];
    bool bf16;
    bool moe; /* a mixture of experts: its decode steps are never captured */
    size_t n_prompts;
    int32_t *prompts[MAX_PROMPTS];
    int64_t lens[MAX_PROMPTS];
} fixture;

static void fixture_free(fixture *f)
{
    for (size_t i = 0; i < f->n_prompts; i++)
        free(f->prompts[i]);
}

static bool fixture_load(const char *dir, const char *name, fixture *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%.700s/%.255s", dir, name);
    snprintf(f->name, sizeof f->name, "%s", name);
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    json_t *ref = json_load_file(path, 0, NULL);
    if (!ref)
        return false;
    const char *dtype = json_string_value(json_object_get(ref, "dtype"));
    f->bf16 = dtype && strstr(dtype, "bfloat16");
    const char *arch = json_string_value(json_object_get(ref, "architecture"));
    f->moe = arch && (strstr(arch, "Moe") || strstr(arch, "Mixtral"));
    json_t *prompts = json_object_get(ref, "prompts");
    size_t n = json_array_size(prompts);
    for (size_t i = 0; i < n && f->n_prompts < MAX_PROMPTS; i++) {
        json_t *arr = json_array_get(prompts, i);
        int64_t len = (int64_t)json_array_size(arr);
        if (len <= 0)
            continue;
        int32_t *ids = malloc((size_t)len * sizeof *ids);
        if (!ids)
            break;
        for (int64_t k = 0; k < len; k++)
            ids[k] = (int32_t)json_integer_value(json_array_get(arr, (size_t)k));
        f->prompts[f->n_prompts] = ids;
        f->lens[f->n_prompts++] = len;
    }
    json_decref(ref);
    return f->n_prompts > 0;
}

static int for_each_fixture(void (*check)(const fixture *f))
{
    const char *root = lh_test_env("LH_FIXTURES");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", root);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    CU_ASSERT_FATAL(n > 0);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        char ref[1400];
        snprintf(ref, sizeof ref, "%s/%s/reference.json", dir, names[i]->d_name);
        FILE *probe = fopen(ref, "r");
        if (probe) {
            fclose(probe);
            fixture f;
            if (fixture_load(dir, names[i]->d_name, &f)) {
                check(&f);
                checked++;
            } else {
                CU_FAIL("fixture reference unreadable");
            }
            fixture_free(&f);
        }
        free(names[i]);
    }
    free(names);
    return checked;
}

/* An engine for fixture f on `device` ("cpu", "cuda") with `backend`; graphs as told; yaml:
 * run-config text (NULL: none), extra: one more override (NULL: none). */
static lh_engine *open_cfg(const fixture *f, const char *device, const char *backend,
                           bool graphs, const char *yaml, const char *extra)
{
    char dev_kv[64], graphs_kv[64];
    snprintf(dev_kv, sizeof dev_kv, "device=%s", device);
    snprintf(graphs_kv, sizeof graphs_kv, "cuda_graphs=%s", graphs ? "true" : "false");
    const char *const overrides[] = {"max_batch_size=8", "max_seq_len=128", dev_kv, graphs_kv,
                                     extra, NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = f->dir, .n_threads = 2,
                           .overrides = overrides, .attn_backend = backend, .config_text = yaml};
    lh_engine *e = NULL;
    lh_err err = {0};
    if (lh_engine_open(host, &o, &e, &err) != LH_OK)
        fprintf(stderr, "\n  %s on %s (%s): %s\n", f->dir, device, backend, err.msg);
    return e;
}

static lh_engine *open_on(const fixture *f, const char *device, const char *backend,
                          bool graphs)
{
    return open_cfg(f, device, backend, graphs, NULL, NULL);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN propagates as a failure */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static bool greedy(lh_engine *e, const fixture *f, int32_t *out)
{
    lh_err err = {0};
    lh_status st = lh_engine_generate_greedy(e, (const int32_t *const *)f->prompts, f->lens,
                                             (int64_t)f->n_prompts, MAX_NEW, out, &err);
    if (st != LH_OK)
        fprintf(stderr, "\n  %s: %s\n", f->name, err.msg);
    CU_ASSERT_EQUAL(st, LH_OK);
    return st == LH_OK;
}

/* Logits of every prompt, [sum lens, vocab]; NULL on failure. */
static float *all_logits(lh_engine *e, const fixture *f)
{
    const int64_t vocab = lh_engine_vocab_size(e);
    int64_t rows = 0;
    for (size_t i = 0; i < f->n_prompts; i++)
        rows += f->lens[i];
    float *out = malloc((size_t)(rows * vocab) * sizeof *out);
    if (!out)
        return NULL;
    int64_t at = 0;
    for (size_t i = 0; i < f->n_prompts; i++) {
        lh_err err = {0};
        lh_status st = lh_engine_logits(e, f->prompts[i], f->lens[i], out + at * vocab, &err);
        if (st != LH_OK) {
            fprintf(stderr, "\n  %s prompt %zu: %s\n", f->name, i, err.msg);
            CU_FAIL("lh_engine_logits");
            free(out);
            return NULL;
        }
        at += f->lens[i];
    }
    return out;
}

static void compare_backend(const fixture *f, const char *backend)
{
    lh_engine *cpu = open_on(f, "cpu", backend, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    CU_ASSERT_EQUAL(lh_engine_device(cpu).kind, LH_DEVICE_CPU);
    const int64_t vocab = lh_engine_vocab_size(cpu);
    int64_t rows = 0;
    for (size_t i = 0; i < f->n_prompts; i++)
        rows += f->lens[i];
    int32_t want[MAX_PROMPTS * MAX_NEW];
    bool have_want = greedy(cpu, f, want);
    float *want_logits = all_logits(cpu, f);
    lh_engine_close(cpu);
    const double tol = f->bf16 ? TOL_BF16 : TOL_F32;
    for (int graphs = 0; graphs < 2; graphs++) {
        lh_engine *gpu = open_on(f, "cuda", backend, graphs != 0);
        CU_ASSERT_PTR_NOT_NULL(gpu);
        if (!gpu)
            continue;
        CU_ASSERT_EQUAL(lh_engine_device(gpu).kind, LH_DEVICE_CUDA);
        int32_t got[MAX_PROMPTS * MAX_NEW];
        if (have_want && greedy(gpu, f, got)) {
            for (size_t i = 0; i < f->n_prompts; i++) {
                int first_diff = -1;
                for (int k = 0; k < MAX_NEW && first_diff < 0; k++)
                    if (got[i * MAX_NEW + (size_t)k] != want[i * MAX_NEW + (size_t)k])
                        first_diff = k;
                if (first_diff >= 0)
                    printf("\n    %s %s graphs %s prompt %zu: cuda greedy differs from cpu at "
                           "step %d", f->name, backend, graphs ? "on" : "off", i, first_diff);
                CU_ASSERT_EQUAL(first_diff, -1);
            }
        }
        int64_t captures = -1, replays = -1;
        lh_engine_graph_counts(gpu, &captures, &replays);
        if (graphs && strcmp(backend, "paged") == 0 && !f->moe) {
            CU_ASSERT(captures >= 1);
            CU_ASSERT(replays >= 1);
        } else {
            CU_ASSERT_EQUAL(captures, 0);
            CU_ASSERT_EQUAL(replays, 0);
        }
        float *got_logits = all_logits(gpu, f);
        if (want_logits && got_logits) {
            double d = max_abs_diff(want_logits, got_logits, (size_t)(rows * vocab));
            printf("\n    %-22s %-7s graphs %-3s max |dlogit| cuda vs cpu %.3g (tol %g), "
                   "%lld captures, %lld replays", f->name, backend, graphs ? "on" : "off", d,
                   tol, (long long)captures, (long long)replays);
            CU_ASSERT(d <= tol);
        }
        free(got_logits);
        lh_engine_close(gpu);
    }
    free(want_logits);
}

static void check_paged(const fixture *f) { compare_backend(f, "paged"); }
static void check_vanilla(const fixture *f) { compare_backend(f, "vanilla"); }

static void test_paged_matches_cpu(void)
{
    NEED_CUDA();
    CU_ASSERT(for_each_fixture(check_paged) >= 10);
}

static void test_vanilla_matches_cpu(void)
{
    NEED_CUDA();
    CU_ASSERT(for_each_fixture(check_vanilla) >= 10);
}

static void fixture_named(const char *name, fixture *f)
{
    const char *root = lh_test_env("LH_FIXTURES");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", root);
    CU_ASSERT_FATAL(fixture_load(dir, name, f));
}

/* Sampling runs on the device's logits: same seed, same ids; another seed may differ but
 * stays in the vocabulary. */
static void test_sampling_reproducible(void)
{
    NEED_CUDA();
    fixture f;
    fixture_named("qwen2-f32", &f);
    for (int graphs = 0; graphs < 2; graphs++) {
        lh_engine *e = open_on(&f, "cuda", "paged", graphs != 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        lh_generate_params p = {.struct_size = sizeof p};
        lh_err err = {0};
        CU_ASSERT_EQUAL_FATAL(lh_engine_generation_defaults(e, &p, &err), LH_OK);
        p.do_sample = true;
        p.temperature = 0.8f;
        p.top_k = 20;
        p.top_p = 0.9f;
        p.repetition_penalty = 1.1f;
        p.seed = 1234;
        p.max_new_tokens = MAX_NEW;
        p.n_stop_ids = 0;
        p.stop_ids = NULL;
        int32_t a[MAX_PROMPTS * MAX_NEW], b[MAX_PROMPTS * MAX_NEW];
        int64_t la[MAX_PROMPTS], lb[MAX_PROMPTS];
        const int64_t n = (int64_t)f.n_prompts;
        CU_ASSERT_EQUAL(lh_engine_generate(e, &p, (const int32_t *const *)f.prompts, f.lens, n,
                                           a, la, NULL, &err), LH_OK);
        CU_ASSERT_EQUAL(lh_engine_generate(e, &p, (const int32_t *const *)f.prompts, f.lens, n,
                                           b, lb, NULL, &err), LH_OK);
        CU_ASSERT_EQUAL(memcmp(a, b, (size_t)n * MAX_NEW * sizeof *a), 0);
        CU_ASSERT_EQUAL(memcmp(la, lb, (size_t)n * sizeof *la), 0);
        const int64_t vocab = lh_engine_vocab_size(e);
        for (int64_t i = 0; i < n * MAX_NEW; i++)
            CU_ASSERT(a[i] >= 0 && a[i] < vocab);
        lh_engine_close(e);
    }
    fixture_free(&f);
}

/* A KV pool beyond the device's memory (10^9 tokens x 1 KiB for this fixture) is refused
 * when the engine opens, with the numbers. */
static void test_kv_pool_too_large(void)
{
    NEED_CUDA();
    fixture f;
    fixture_named("llama-mha-f32", &f);
    const char *const ov[] = {"device=cuda", "kv_cache.max_tokens=1000000000", NULL};
    lh_engine_options o = {.struct_size = sizeof o, .model = f.dir, .overrides = ov,
                           .attn_backend = "paged"};
    lh_engine *e = NULL;
    lh_err err = {0};
    lh_status st = lh_engine_open(host, &o, &e, &err);
    CU_ASSERT_NOT_EQUAL(st, LH_OK);
    CU_ASSERT_PTR_NULL(e);
    printf("\n    %s", err.msg);
    lh_engine_close(e);
    fixture_free(&f);
}

/* Weight-only quantized weights (lh_k_matmul_scaled): the quant config's three schemes on
 * llama-mha-f32 and the two FP8 checkpoints, with llama-mha-f32's prompts (the source the FP8
 * fixtures were made from). */
typedef struct quant_case {
    const char *model; /* directory under models/ */
    const char *yaml;  /* run config, NULL: none */
    const char *extra; /* one more override, NULL: none */
} quant_case;

static const quant_case quant_cases[] = {
    {"llama-mha-f32", "quant:\n  scheme: int8\n", NULL},
    {"llama-mha-f32", "quant:\n  scheme: int8\n", "quantized_matmul=exact"},
    {"llama-mha-f32", "quant:\n  scheme: int4\n  group_size: 32\n", NULL},
    {"llama-mha-f32", "quant:\n  scheme: fp8\n", NULL},
    {"llama-fp8-block", NULL, NULL},
    {"llama-fp8-channel", NULL, NULL},
};
#define N_QUANT_CASES (sizeof quant_cases / sizeof quant_cases[0])

/* llama-mha-f32's prompts with c's model directory */
static void quant_fixture(const quant_case *c, fixture *f)
{
    fixture_named("llama-mha-f32", f);
    const char *root = lh_test_env("LH_FIXTURES");
    snprintf(f->dir, sizeof f->dir, "%.700s/models/%.255s", root, c->model);
}

/* The device computes as the CPU does (the integer path bit for bit, the rest within f32
 * rounding of the sums), so greedy tokens match and the logits stay within TOL_QUANT. */
#define TOL_QUANT 2e-3

static void test_quantized_match_cpu(void)
{
    NEED_CUDA();
    for (size_t ci = 0; ci < N_QUANT_CASES; ci++) {
        const quant_case *c = &quant_cases[ci];
        fixture f;
        quant_fixture(c, &f);
        lh_engine *cpu = open_cfg(&f, "cpu", "paged", false, c->yaml, c->extra);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
        int64_t rows = 0;
        for (size_t i = 0; i < f.n_prompts; i++)
            rows += f.lens[i];
        const int64_t vocab = lh_engine_vocab_size(cpu);
        int32_t want[MAX_PROMPTS * MAX_NEW], got[MAX_PROMPTS * MAX_NEW];
        const bool have_want = greedy(cpu, &f, want);
        float *want_logits = all_logits(cpu, &f);
        lh_engine_close(cpu);
        for (int graphs = 0; graphs < 2; graphs++) {
            lh_engine *gpu = open_cfg(&f, "cuda", "paged", graphs != 0, c->yaml, c->extra);
            CU_ASSERT_PTR_NOT_NULL(gpu);
            if (!gpu)
                continue;
            if (have_want && greedy(gpu, &f, got))
                CU_ASSERT_EQUAL(memcmp(got, want, f.n_prompts * MAX_NEW * sizeof *got), 0);
            float *got_logits = all_logits(gpu, &f);
            if (want_logits && got_logits) {
                const double d = max_abs_diff(want_logits, got_logits, (size_t)(rows * vocab));
                printf("\n    %-18s %-40s %-22s graphs %-3s max |dlogit| cuda vs cpu %.3g "
                       "(tol %g)", c->model, c->yaml ? c->yaml : "(as stored)",
                       c->extra ? c->extra : "", graphs ? "on" : "off", d, TOL_QUANT);
                CU_ASSERT(d <= TOL_QUANT);
            }
            free(got_logits);
            lh_engine_close(gpu);
        }
        free(want_logits);
        fixture_free(&f);
    }
}

/* --- what runs without a GPU ------------------------------------------------------------- */

static void test_cuda_refused_without_device(void)
{
    if (lh_k_cuda_device_count() > 0) {
        LH_TEST_SKIP("a CUDA device is usable here: nothing to refuse");
        return;
    }
    char reason[512];
    snprintf(reason, sizeof reason, "%s", lh_k_cuda_unavailable_reason());
    CU_ASSERT(reason[0] != '\0');
    fixture f;
    fixture_named("llama-mha-f32", &f);
    static const char *const asks[] = {"device=cuda", "device=cuda:0", "device=CUDA:1"};
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
        const char *const ov[] = {asks[i], NULL};
        lh_engine_options o = {.struct_size = sizeof o, .model = f.dir, .n_threads = 1,
                               .overrides = ov};
        lh_engine *e = NULL;
        lh_err err = {0};
        CU_ASSERT_EQUAL(lh_engine_open(host, &o, &e, &err), LH_E_UNSUPPORTED);
        CU_ASSERT_PTR_NULL(e);
        printf("\n    %s: %s", asks[i], err.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, reason));
        lh_engine_close(e);
    }
    fixture_free(&f);
}

/* device: cpu (and auto, without a GPU) runs on the CPU; cuda_graphs means nothing there. */
static void test_cpu_device(void)
{
    fixture f;
    fixture_named("qwen2-f32", &f);
    const bool gpu_here = lh_k_cuda_device_count() > 0;
    for (int auto_dev = 0; auto_dev < 2; auto_dev++) {
        if (auto_dev && gpu_here)
            continue; /* auto picks the GPU there: covered above */
        lh_engine *e = open_on(&f, auto_dev ? "auto" : "cpu", "paged", true);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL(lh_engine_device(e).kind, LH_DEVICE_CPU);
        int32_t out[MAX_PROMPTS * MAX_NEW];
        greedy(e, &f, out);
        int64_t c = -1, r = -1;
        lh_engine_graph_counts(e, &c, &r);
        CU_ASSERT_EQUAL(c, 0);
        CU_ASSERT_EQUAL(r, 0);
        lh_engine_close(e);
    }
    fixture_free(&f);
}

/* The upload path on the CPU (LLMHOST_COPY_WEIGHTS=1 copies the weights through lh_k_alloc
 * and lh_k_copy there too): bit-identical logits, a tied lm_head uploaded once. */
static void test_weight_copies_on_cpu(void)
{
    static const char *const models[] = {"llama-tied-f32", "qwen2-tied-bf16", "qwen3-bf16",
                                         "llama-attn-bias-f32"};
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        fixture f;
        fixture_named(models[mi], &f);
        float *logits[2] = {NULL, NULL};
        int64_t vocab = 0;
        for (int copy = 0; copy < 2; copy++) {
            if (copy)
                setenv("LLMHOST_COPY_WEIGHTS", "1", 1);
            lh_engine *e = open_on(&f, "cpu", "paged", false);
            unsetenv("LLMHOST_COPY_WEIGHTS");
            CU_ASSERT_PTR_NOT_NULL_FATAL(e);
            const lh_runner *d = lh_engine_runner(e);
            CU_ASSERT_PTR_NOT_NULL_FATAL(d);
            if (copy) {
                CU_ASSERT(d->weight_bytes > 0);
                CU_ASSERT(d->n_wbufs > 0);
            } else {
                CU_ASSERT_EQUAL(d->weight_bytes, 0);
            }
            if (strstr(models[mi], "tied")) { /* the tied head is uploaded once, shared */
                const void *head = NULL, *embed = NULL;
                for (int64_t w = 0; w < d->n_weights; w++) {
                    if (strcmp(d->weights[w].name, "lm_head.weight") == 0)
                        head = d->weights[w].t.data;
                    if (strcmp(d->weights[w].name, "model.embed_tokens.weight") == 0)
                        embed = d->weights[w].t.data;
                }
                CU_ASSERT_PTR_NOT_NULL(head);
                CU_ASSERT_PTR_EQUAL(head, embed);
            }
            vocab = lh_engine_vocab_size(e);
            logits[copy] = all_logits(e, &f);
            lh_engine_close(e);
        }
        if (logits[0] && logits[1]) {
            int64_t rows = 0;
            for (size_t i = 0; i < f.n_prompts; i++)
                rows += f.lens[i];
            CU_ASSERT_EQUAL(memcmp(logits[0], logits[1], (size_t)(rows * vocab) * sizeof(float)),
                            0);
        }
        free(logits[0]);
        free(logits[1]);
        fixture_free(&f);
    }
}

/* The same for quantized weights: their int8 / int4 / fp8 bytes and their scale tensors go
 * through lh_k_copy and are linked after the copy. */
static void test_quantized_weight_copies_on_cpu(void)
{
    for (size_t ci = 0; ci < N_QUANT_CASES; ci++) {
        const quant_case *c = &quant_cases[ci];
        fixture f;
        quant_fixture(c, &f);
        float *logits[2] = {NULL, NULL};
        int64_t vocab = 0, rows = 0;
        for (size_t i = 0; i < f.n_prompts; i++)
            rows += f.lens[i];
        for (int copy = 0; copy < 2; copy++) {
            if (copy)
                setenv("LLMHOST_COPY_WEIGHTS", "1", 1);
            lh_engine *e = open_cfg(&f, "cpu", "paged", false, c->yaml, c->extra);
            unsetenv("LLMHOST_COPY_WEIGHTS");
            CU_ASSERT_PTR_NOT_NULL_FATAL(e);
            const lh_runner *d = lh_engine_runner(e);
            int64_t scaled = 0;
            for (int64_t w = 0; w < d->n_weights; w++)
                if (d->weights[w].scale.data) {
                    scaled++;
                    if (copy) /* the scale is the uploaded copy, not the bound tensor */
                        for (int64_t j = 0; j < d->n_weights; j++)
                            if (d->weights[j].name && d->weights[w].scale_name &&
                                strcmp(d->weights[j].name, d->weights[w].scale_name) == 0)
                                CU_ASSERT_PTR_EQUAL(d->weights[w].scale.data,
                                                    d->weights[j].t.data);
                }
            CU_ASSERT(scaled > 0);
            CU_ASSERT(copy ? d->n_wbufs > 0 : d->weight_bytes == 0);
            vocab = lh_engine_vocab_size(e);
            logits[copy] = all_logits(e, &f);
            lh_engine_close(e);
        }
        if (logits[0] && logits[1])
            CU_ASSERT_EQUAL(memcmp(logits[0], logits[1], (size_t)(rows * vocab) * sizeof(float)),
                            0);
        free(logits[0]);
        free(logits[1]);
        fixture_free(&f);
    }
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

static CU_TestInfo tests[] = {
    {"device: cuda without a usable device is refused, saying why",
     test_cuda_refused_without_device},
    {"device: cpu runs on the CPU, cuda_graphs ignored", test_cpu_device},
    {"weights copied through lh_k_alloc/lh_k_copy on the CPU: same logits",
     test_weight_copies_on_cpu},
    {"quantized weights and their scales copied the same way: same logits",
     test_quantized_weight_copies_on_cpu},
    {"cuda equals cpu: paged backend, graphs off and on", test_paged_matches_cpu},
    {"cuda equals cpu: vanilla backend, graphs off and on", test_vanilla_matches_cpu},
    {"sampling on the device is reproducible", test_sampling_reproducible},
    {"a KV pool beyond device memory is refused", test_kv_pool_too_large},
    {"cuda equals cpu: quant config int8 / int4 / fp8, FP8 checkpoints",
     test_quantized_match_cpu},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"engine on a CUDA device vs the CPU", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
