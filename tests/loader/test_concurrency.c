/* Concurrent resolves on one registry (DESIGN §3: loading is serialized by one lock): every
 * resolve succeeds, every plugin is dlopened exactly once, every result names the right file;
 * and resolves while the custom dirs change (DESIGN §5.5). Also run under ThreadSanitizer
 * (suite threads, make test-tsan). */
#include "loader_util.h"

#include "resolve/resolve.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Resolves on several threads while one more declares and removes a custom dir over and over
 * (DESIGN §5.5: every change rebuilds the tables, under the same lock as loading): every
 * resolve succeeds and names one of the two providers, the built-in or the external copy, and
 * a dir declared again is restored from its log without a second dlopen. */
typedef struct toggler {
    lh_registry *reg;
    const char *custom;
    pthread_barrier_t *start;
    atomic_bool *toggling;
    unsigned failed;
    char first_error[512];
} toggler;

/* a millisecond declared, a millisecond not, so that resolves land on both sides */
static void pause_1ms(void)
{
    const struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, NULL);
}

static void *toggle_dir(void *arg)
{
    toggler *t = arg;
    pthread_barrier_wait(t->start);
    for (int it = 0; it < N_ITERS; it++) {
        lh_err err = {0};
        lh_status st = reg_add_st(t->reg, t->custom, &err);
        pause_1ms();
        if (st == LH_OK)
            st = reg_remove_st(t->reg, t->custom, &err);
        pause_1ms();
        if (st != LH_OK && !t->failed++)
            snprintf(t->first_error, sizeof t->first_error, "%.400s", err.msg);
    }
    atomic_store(t->toggling, false);
    return NULL;
}

typedef struct either_worker {
    lh_registry *reg;
    const char *builtin, *custom;
    pthread_barrier_t *start;
    atomic_bool *toggling;
    unsigned builtin_hits, custom_hits, wrong, failed;
    char first_error[512];
} either_worker;

static void *resolve_either(void *arg)
{
    either_worker *w = arg;
    lh_model_config *cfg = NULL;
    lh_err err = {0};
    if (lh_model_config_parse("{\"architectures\": [\"AlphaForCausalLM\"], \"hidden_size\": 64, "
                              "\"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                              "\"num_attention_heads\": 4, \"vocab_size\": 100}",
                              "thread.json", &cfg, &err) != LH_OK)
        cfg = NULL;
    lh_run_config rc;
    lh_run_config_init(&rc);
    pthread_barrier_wait(w->start);
    /* at least N_ITERS, and on until the dir changes are over */
    for (int it = 0; it < N_ITERS || atomic_load(w->toggling); it++) {
        lh_resolution r;
        lh_err e = {0};
        if ((cfg ? lh_resolve(w->reg, cfg, &rc, &r, &e) : LH_E_INTERNAL) != LH_OK) {
            if (!w->failed++)
                snprintf(w->first_error, sizeof w->first_error, "%.400s", e.msg);
            continue;
        }
        const lh_module_rec *m = r.entry->module;
        if (strcmp(m->file_name, "libmodel_tp_alpha.so") != 0)
            w->wrong++;
        else if (strcmp(m->dir, w->builtin) == 0 && m->builtin)
            w->builtin_hits++;
        else if (strcmp(m->dir, w->custom) == 0 && !m->builtin)
            w->custom_hits++;
        else
            w->wrong++;
        lh_resolution_free(&r);
        sched_yield(); /* the dir changes wait on the same lock */
    }
    lh_run_config_free(&rc);
    lh_model_config_free(cfg);
    return NULL;
}

static void test_resolve_while_dirs_change(void)
{
    fx f;
    if (!fx_init(&f))
        return;
    char *builtin = fx_dir(&f, "plugins", PLUGINS("libmodel_tp_alpha.so"),
                           ROWS("model AlphaForCausalLM libmodel_tp_alpha.so",
                                "model SharedForCausalLM libmodel_tp_alpha.so"));
    char *custom = fx_dir(&f, "custom", PLUGINS("libmodel_tp_alpha.so"),
                          ROWS("model AlphaForCausalLM libmodel_tp_alpha.so",
                               "model SharedForCausalLM libmodel_tp_alpha.so"));
    char *builtin_real = builtin ? realpath(builtin, NULL) : NULL;
    char *custom_real = custom ? realpath(custom, NULL) : NULL;
    lh_registry reg;
    if (builtin_real && custom_real && reg_open(&reg, builtin, false)) {
        enum { N_RESOLVERS = N_THREADS - 1 };
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, N_THREADS);
        either_worker w[N_RESOLVERS];
        pthread_t th[N_THREADS];
        atomic_bool toggling;
        atomic_init(&toggling, true);
        toggler t = {.reg = &reg, .custom = custom, .start = &start, .toggling = &toggling};
        for (int i = 0; i < N_RESOLVERS; i++) {
            w[i] = (either_worker){.reg = &reg, .builtin = builtin_real, .custom = custom_real,
                                   .start = &start, .toggling = &toggling};
            CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, resolve_either, &w[i]), 0);
        }
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[N_RESOLVERS], NULL, toggle_dir, &t), 0);
        unsigned builtin_hits = 0, custom_hits = 0;
        for (int i = 0; i < N_THREADS; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < N_RESOLVERS; i++) {
            if (w[i].failed)
                fprintf(stderr, "\n  resolver %d: %u failures, first: %s\n", i, w[i].failed,
                        w[i].first_error);
            CU_ASSERT_EQUAL(w[i].failed, 0);
            CU_ASSERT_EQUAL(w[i].wrong, 0);
            builtin_hits += w[i].builtin_hits;
            custom_hits += w[i].custom_hits;
        }
        printf("\n    %u resolves to the built-in copy, %u to the external one\n    ",
               builtin_hits, custom_hits);
        if (t.failed)
            fprintf(stderr, "\n  dir changes: %u failures, first: %s\n", t.failed, t.first_error);
        CU_ASSERT_EQUAL(t.failed, 0);
        CU_ASSERT_TRUE(builtin_hits + custom_hits >= N_RESOLVERS * N_ITERS);
        /* 50 windows of 1 ms each way: both sides are seen */
        CU_ASSERT_TRUE(builtin_hits > 0 && custom_hits > 0);
        CU_ASSERT_TRUE(reg.dlopen_calls <= 2);
        CU_ASSERT_EQUAL(reg.n_dirs, 0);
        pthread_barrier_destroy(&start);
        /* removed at the end: the built-in provides it again */
        const lh_reg_entry *e = ensure_ok(&reg, LH_KIND_MODEL, "AlphaForCausalLM");
        CU_ASSERT_TRUE(e && e->module->builtin);
        lh_registry_destroy(&reg);
    }
    free(builtin_real);
    free(custom_real);
    free(custom);
    free(builtin);
    fx_free(&f);
}

static CU_TestInfo tests[] = {
    {"8 threads x 50 resolves", test_concurrent_resolve},
    {"concurrent failing loads", test_concurrent_failures},
    {"7 threads resolving while one adds and removes a custom dir", test_resolve_while_dirs_change},
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
