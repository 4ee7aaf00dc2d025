/* Concurrent resolves on one registry (DESIGN §3: loading is serialized by one lock): every
 * resolve succeeds, every plugin is dlopened exactly once, every result names the right file. */
#include "loader_util.h"

#include "resolve/resolve.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N_THREADS 8
#define N_ITERS 50
#define N_ROUNDS 10

static const struct {
    const char *arch, *file;
} names[] = {
    {"AlphaForCausalLM", "libmodel_tp_alpha.so"},
    {"SharedForCausalLM", "libmodel_tp_alpha.so"},
    {"TargetImpl", "libmodel_tp_target.so"},
    {"EAGLE3LlamaForCausalLM", "libmodel_tp_target.so"},
    {"ExtraForCausalLM", "libmodel_tp_extra.so"},
    {"UnpromisedForCausalLM", "libmodel_tp_extra.so"},
};
#define N_NAMES (sizeof names / sizeof *names)

typedef struct worker {
    lh_registry *reg;
    const char *custom;
    pthread_barrier_t *start;
    int id;
    unsigned ok, wrong, failed;
    char first_error[512];
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    lh_model_config *cfgs[N_NAMES] = {0};
    for (size_t i = 0; i < N_NAMES; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"architectures\": [\"%s\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
                 names[i].arch);
        lh_err err = {0};
        if (lh_model_config_parse(text, "thread.json", &cfgs[i], &err) != LH_OK)
            cfgs[i] = NULL;
    }
    lh_run_config rc;
    lh_run_config_init(&rc);
    pthread_barrier_wait(w->start);
    for (int it = 0; it < N_ITERS; it++) {
        /* each thread walks the names from a different offset so first loads race */
        size_t k = ((size_t)w->id + (size_t)it) % N_NAMES;
        lh_resolution r;
        lh_err err = {0};
        lh_status st = cfgs[k] ? lh_resolve(w->reg, cfgs[k], &rc, &r, &err) : LH_E_INTERNAL;
        if (st != LH_OK) {
            if (!w->failed++)
                snprintf(w->first_error, sizeof w->first_error, "%.100s: %.400s", names[k].arch,
                         err.msg);
            continue;
        }
        if (strcmp(r.entry->module->file_name, names[k].file) == 0 &&
            strcmp(r.entry->module->dir, w->custom) == 0 && strcmp(r.resolved, names[k].arch) == 0)
            w->ok++;
        else
            w->wrong++;
        lh_resolution_free(&r);
    }
    lh_run_config_free(&rc);
    for (size_t i = 0; i < N_NAMES; i++)
        lh_model_config_free(cfgs[i]);
    return NULL;
}

static void test_concurrent_resolve(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_empty_builtin(&f, "plugins");
    char *custom = fx_dir(&f, "custom",
                          PLUGINS("libmodel_tp_alpha.so", "libmodel_tp_target.so",
                                  "libmodel_tp_extra.so"),
                          ROWS("model AlphaForCausalLM libmodel_tp_alpha.so",
                               "model SharedForCausalLM libmodel_tp_alpha.so",
                               "model TargetImpl libmodel_tp_target.so",
                               "model EAGLE3LlamaForCausalLM libmodel_tp_target.so",
                               "vision_encoder AlphaVisionModel libmodel_tp_target.so",
                               "draft eagle3 libmodel_tp_target.so",
                               "draft mtp libmodel_tp_target.so",
                               "model ExtraForCausalLM libmodel_tp_extra.so",
                               "model UnpromisedForCausalLM libmodel_tp_extra.so"));
    /* several rounds, each on a fresh registry, so the first-load races happen many times */
    for (int round = 0; round < N_ROUNDS; round++) {
        lh_registry reg;
        if (!reg_open(&reg, builtin, false))
            break;
        if (!reg_add(&reg, custom)) {
            lh_registry_destroy(&reg);
            break;
        }
        CU_ASSERT_EQUAL(reg.dlopen_calls, 0);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, N_THREADS);
        worker w[N_THREADS];
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            w[i] = (worker){.reg = &reg, .custom = custom, .start = &start, .id = i};
            CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, run, &w[i]), 0);
        }
        unsigned ok = 0;
        for (int i = 0; i < N_THREADS; i++) {
            pthread_join(th[i], NULL);
            if (w[i].failed)
                fprintf(stderr, "\n  thread %d: %u failures, first: %s\n", i, w[i].failed,
                        w[i].first_error);
            CU_ASSERT_EQUAL(w[i].failed, 0);
            CU_ASSERT_EQUAL(w[i].wrong, 0);
            ok += w[i].ok;
        }
        pthread_barrier_destroy(&start);
        CU_ASSERT_EQUAL(ok, N_THREADS * N_ITERS);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 3);
        CU_ASSERT_EQUAL(reg.n_modules, 3);
        lh_registry_destroy(&reg);
    }
    free(custom);
    free(builtin);
    fx_free(&f);
}

/* Concurrent ensures of names whose files fail: one dlopen per file, the same class for all. */
static void *run_failing(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int it = 0; it < N_ITERS; it++) {
        const lh_reg_entry *e;
        lh_err err = {0};
        const char *name = (w->id + it) % 2 ? "AbiForCausalLM" : "FailForCausalLM";
        lh_status want = (w->id + it) % 2 ? LH_E_ABI : LH_E_INIT;
        lh_status st = reg_ensure(w->reg, LH_KIND_MODEL, name, &e, &err);
        if (st == want)
            w->ok++;
        else
            w->wrong++;
    }
    return NULL;
}

static void test_concurrent_failures(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_dir(&f, "plugins",
                           PLUGINS("libmodel_tp_abi_major.so", "libmodel_tp_initfail.so"),
                           ROWS("model AbiForCausalLM libmodel_tp_abi_major.so",
                                "model FailForCausalLM libmodel_tp_initfail.so"));
    lh_registry reg;
    if (reg_open(&reg, builtin, false)) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, N_THREADS);
        worker w[N_THREADS];
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            w[i] = (worker){.reg = &reg, .start = &start, .id = i};
            CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, run_failing, &w[i]), 0);
        }
        for (int i = 0; i < N_THREADS; i++) {
            pthread_join(th[i], NULL);
            CU_ASSERT_EQUAL(w[i].wrong, 0);
            CU_ASSERT_EQUAL(w[i].ok, N_ITERS);
        }
        pthread_barrier_destroy(&start);
        CU_ASSERT_EQUAL(reg.dlopen_calls, 2);
        CU_ASSERT_EQUAL(reg.n_modules, 2);
        lh_registry_destroy(&reg);
    }
    free(builtin);
    fx_free(&f);
}

static CU_TestInfo tests[] = {
    {"8 threads x 50 resolves", test_concurrent_resolve},
    {"concurrent failing loads", test_concurrent_failures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"concurrency", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
