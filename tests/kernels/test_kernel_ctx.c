/* Kernel library: execution context (threads, ISA choice and override, errors) and the thread
 * pool behind lh_k_parallel_for. */
#include "ktest.h"

#include <dirent.h>
#include <stdatomic.h>
#include <time.h>

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void test_ctx_basics(void)
{
    lh_kctx *ctx = lh_k_ctx_create(3, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_threads(ctx), 3);
    CU_ASSERT_STRING_EQUAL(lh_k_last_error(ctx), "");
    /* the default is the best ISA the CPU supports */
    lh_k_isa best = LH_K_ISA_SCALAR;
    for (int i = 0; i < KT_N_ISAS; i++)
        if (kt_isa_supported(kt_isas[i]))
            best = kt_isas[i];
    if (!getenv("LLMHOST_KERNELS_ISA"))
        CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), best);
    for (int i = 0; i < KT_N_ISAS; i++) {
        lh_status st = lh_k_ctx_set_isa(ctx, kt_isas[i]);
        if (kt_isa_supported(kt_isas[i])) {
            CU_ASSERT_EQUAL(st, LH_OK);
            CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), kt_isas[i]);
        } else {
            CU_ASSERT_EQUAL(st, LH_E_UNSUPPORTED);
            CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), lh_k_isa_name(kt_isas[i])));
        }
    }
    CU_ASSERT_EQUAL(lh_k_ctx_set_isa(ctx, (lh_k_isa)7), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_ctx_set_isa"));
    CU_ASSERT_STRING_EQUAL(lh_k_isa_name(LH_K_ISA_SCALAR), "scalar");
    CU_ASSERT_STRING_EQUAL(lh_k_isa_name(LH_K_ISA_AVX2), "avx2");
    CU_ASSERT_STRING_EQUAL(lh_k_isa_name(LH_K_ISA_AVX512), "avx512");
    CU_ASSERT_STRING_EQUAL(lh_k_isa_name(LH_K_ISA_AMX), "amx");
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(NULL);

    ctx = lh_k_ctx_create(0, kt_cpu()); /* all online cores */
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_TRUE(lh_k_ctx_threads(ctx) >= 1);
    lh_k_ctx_free(ctx);
    CU_ASSERT_PTR_NULL(lh_k_ctx_create(100000, kt_cpu()));
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "n_threads"));
}

static void test_ctx_cuda_refused(void)
{
    if (lh_k_cuda_device_count() > 0) {
        LH_TEST_SKIP("a CUDA device is present here (tests/kernels/test_cuda_kernels.c uses it)");
        return;
    }
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cuda());
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "cuda:0"));
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_ctx_create"));
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), lh_k_cuda_unavailable_reason()));
    lh_k_ctx_free(ctx);
}

static void test_ctx_env_override(void)
{
    char *saved = getenv("LLMHOST_KERNELS_ISA") ? strdup(getenv("LLMHOST_KERNELS_ISA")) : NULL;
    bool supported[KT_N_ISAS];
    for (int i = 0; i < KT_N_ISAS; i++)
        supported[i] = kt_isa_supported(kt_isas[i]);

    setenv("LLMHOST_KERNELS_ISA", "scalar", 1);
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), LH_K_ISA_SCALAR);
    lh_k_ctx_free(ctx);

    setenv("LLMHOST_KERNELS_ISA", "sse9", 1);
    ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NULL(ctx); /* no silent fallback */
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "sse9"));
    lh_k_ctx_free(ctx);

    for (int i = 1; i < KT_N_ISAS; i++) {
        setenv("LLMHOST_KERNELS_ISA", lh_k_isa_name(kt_isas[i]), 1);
        ctx = lh_k_ctx_create(2, kt_cpu());
        if (supported[i]) {
            CU_ASSERT_PTR_NOT_NULL(ctx);
            CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), kt_isas[i]);
        } else {
            CU_ASSERT_PTR_NULL(ctx);
            CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "does not support"));
        }
        lh_k_ctx_free(ctx);
    }
    if (saved) {
        setenv("LLMHOST_KERNELS_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("LLMHOST_KERNELS_ISA");
    }
}

struct visit {
    _Atomic int *count;
    int64_t n;
};

static void visit_fn(int64_t i, void *user)
{
    struct visit *v = user;
    if (i >= 0 && i < v->n)
        atomic_fetch_add(&v->count[i], 1);
}

static void test_parallel_for_visits_each_once(void)
{
    const int threads[] = {1, 2, 5};
    const int64_t sizes[] = {0, 1, 7, 1000};
    for (int ti = 0; ti < 3; ti++) {
        lh_kctx *ctx = lh_k_ctx_create(threads[ti], kt_cpu());
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        for (int si = 0; si < 4; si++) {
            for (int rep = 0; rep < 20; rep++) { /* repeated jobs on the same pool */
                int64_t n = sizes[si];
                _Atomic int *count = calloc((size_t)n + 1, sizeof *count);
                struct visit v = {count, n};
                lh_k_parallel_for(ctx, n, visit_fn, &v);
                long wrong = 0;
                for (int64_t i = 0; i < n; i++)
                    wrong += atomic_load(&count[i]) != 1;
                if (wrong)
                    printf("\n    threads %d n %lld: %ld indices not visited exactly once",
                           threads[ti], (long long)n, wrong);
                CU_ASSERT_EQUAL(wrong, 0);
                free(count);
            }
        }
        lh_k_ctx_free(ctx);
    }
    /* no context: runs inline */
    _Atomic int count[7] = {0};
    struct visit v = {count, 7};
    lh_k_parallel_for(NULL, 7, visit_fn, &v);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(atomic_load(&count[i]), 1);
}

struct nested {
    lh_kctx *ctx;
    _Atomic int inner;
    _Atomic int refused;
};

static void inner_fn(int64_t i, void *user)
{
    (void)i;
    struct nested *n = user;
    atomic_fetch_add(&n->inner, 1);
}

static void outer_fn(int64_t i, void *user)
{
    (void)i;
    struct nested *n = user;
    lh_k_parallel_for(n->ctx, 3, inner_fn, n); /* nested: runs inline, no deadlock */
    float buf[4] = {1, 2, 3, 4};
    lh_tensor t = kt_t2(LH_DTYPE_F32, buf, 1, 4);
    /* a kernel on the busy context is refused; the message is in this thread's slot */
    if (lh_k_softmax(n->ctx, &t) == LH_E_USAGE &&
        kt_contains(lh_k_last_error(NULL), "inside lh_k_parallel_for"))
        atomic_fetch_add(&n->refused, 1);
}

static void test_parallel_for_nested(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    struct nested n = {ctx, 0, 0};
    lh_k_parallel_for(ctx, 10, outer_fn, &n);
    CU_ASSERT_EQUAL(atomic_load(&n.inner), 30);
    CU_ASSERT_EQUAL(atomic_load(&n.refused), 10);
    /* after the job the context works again */
    float buf[4] = {1, 2, 3, 4};
    lh_tensor t = kt_t2(LH_DTYPE_F32, buf, 1, 4);
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, &t), LH_OK);
    lh_k_ctx_free(ctx);
}

static void test_ctx_create_free_repeatedly(void)
{
    int before = count_threads();
    for (int i = 0; i < 60; i++) {
        lh_kctx *ctx = lh_k_ctx_create(1 + i % 4, kt_cpu());
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        if (i % 2) { /* use the pool (and its scratch) before freeing */
            _Atomic int count[16] = {0};
            struct visit v = {count, 16};
            lh_k_parallel_for(ctx, 16, visit_fn, &v);
            float q[2 * 4], k[3 * 4], vv[3 * 4], o[2 * 4];
            for (int j = 0; j < 12; j++)
                k[j] = vv[j] = (float)j;
            for (int j = 0; j < 8; j++)
                q[j] = (float)j;
            int32_t pos[2] = {1, 2};
            lh_tensor tq = kt_t3(LH_DTYPE_F32, q, 2, 1, 4), tk = kt_t3(LH_DTYPE_F32, k, 3, 1, 4);
            lh_tensor tv = kt_t3(LH_DTYPE_F32, vv, 3, 1, 4), to = kt_t3(LH_DTYPE_F32, o, 2, 1, 4);
            CU_ASSERT_EQUAL(lh_k_attention(ctx, &tq, &tk, &tv, pos, 0.5f, 0.0f, 0, &to), LH_OK);
        }
        lh_k_ctx_free(ctx);
    }
    /* every worker was joined (ASan's leak check covers the memory) */
    CU_ASSERT_EQUAL(count_threads(), before);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Workers spin briefly after a job, then sleep: an idle pool burns no CPU. */
static void test_idle_pool_sleeps(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    _Atomic int count[64] = {0};
    struct visit v = {count, 64};
    lh_k_parallel_for(ctx, 64, visit_fn, &v);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL); /* past the spin window */
    double c0 = cpu_seconds();
    struct timespec idle = {0, 300 * 1000 * 1000};
    nanosleep(&idle, NULL);
    double used = cpu_seconds() - c0;
    if (used > 0.03)
        printf("\n    idle pool used %.3f s of CPU in 0.3 s", used);
    CU_ASSERT_TRUE(used < 0.03);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo ctx_tests[] = {
    {"context: threads, ISA choice, set_isa, names", test_ctx_basics},
    {"context: a CUDA device is refused where none is usable, with the reason", test_ctx_cuda_refused},
    {"context: LLMHOST_KERNELS_ISA overrides, never falls back", test_ctx_env_override},
    {"parallel_for: n = 0, 1, 7, 1000 x 1, 2, 5 threads, each index once", test_parallel_for_visits_each_once},
    {"parallel_for: nested runs inline; kernels refused inside", test_parallel_for_nested},
    {"context: create/free x60 leaves no threads behind", test_ctx_create_free_repeatedly},
    {"thread pool: idle workers sleep (no CPU burned)", test_idle_pool_sleeps},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: context and thread pool", NULL, NULL, NULL, NULL, ctx_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
