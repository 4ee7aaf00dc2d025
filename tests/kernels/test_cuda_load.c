/* Loading the CUDA half of the kernel library (kernels/cuda_load.c), one case per process:
 * meson runs this program once per case with LLMHOST_KERNELS_CUDA pointing at a missing file,
 * a file that is not a library, stubs that must be refused (tests/kernels/cuda_stubs), the real
 * library where the build has one, and nothing at all, and says what to expect:
 *   LH_CUDA_LOAD_EXPECT  the accepted states, lh_k_cuda_state_name names joined by '|'
 *   LH_CUDA_LOAD_REASON  a text the reason must contain (optional)
 * Every case: CPU work before it loads nothing; the first probe gives that state with a reason,
 * from several threads at once, never a crash; lh_k_ctx_create on CUDA is NULL with the reason
 * (or, where a device is usable, a context); the CPU still works afterwards. */
#include "ktest.h"

#include <pthread.h>

static void fail_at(int line, const char *msg)
{
    printf("\n    FAIL (line %d) %s", line, msg);
    CU_assertImplementation(CU_FALSE, (unsigned)line, msg, __FILE__, "", CU_FALSE);
}

#define FAILF(...)                                                                            \
    do {                                                                                      \
        char fm_[2048];                                                                       \
        snprintf(fm_, sizeof fm_, __VA_ARGS__);                                               \
        fail_at(__LINE__, fm_);                                                               \
    } while (0)

static const char *expect_env(void)
{
    const char *e = getenv("LH_CUDA_LOAD_EXPECT");
    return e && *e ? e : NULL;
}

/* Whether state name `name` is one of the '|'-separated names in `list`. */
static bool listed(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

/* ---- 1. CPU work loads nothing (runs first: the load happens once per process) ------------- */

static void test_cpu_work_loads_nothing(void)
{
    const char *why = NULL;
    CU_ASSERT_EQUAL(lh_k_cuda_load_state(&why), LH_K_CUDA_NOT_TRIED);
    CU_ASSERT_STRING_EQUAL(why, "");
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float xd[2 * 3] = {1, 2, 3, 4, 5, 6}, wd[4 * 3] = {0}, yd[2 * 4];
    lh_tensor x = {.data = xd, .dtype = LH_DTYPE_F32, .ndim = 2, .shape = {2, 3},
                   .stride = {3, 1}, .device = kt_cpu()};
    lh_tensor w = {.data = wd, .dtype = LH_DTYPE_F32, .ndim = 2, .shape = {4, 3},
                   .stride = {3, 1}, .device = kt_cpu()};
    lh_tensor y = {.data = yd, .dtype = LH_DTYPE_F32, .ndim = 2, .shape = {2, 4},
                   .stride = {4, 1}, .device = kt_cpu()};
    for (int i = 0; i < 4; i++)
        wd[i * 3 + i % 3] = 1.0f;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, NULL, &y), LH_OK);
    CU_ASSERT_EQUAL(yd[0], 1.0f);
    void *p = NULL;
    CU_ASSERT_EQUAL(lh_k_alloc(ctx, 4096, &p), LH_OK);
    CU_ASSERT_EQUAL(lh_k_memzero(ctx, p, 4096), LH_OK);
    lh_k_mem_stats st;
    lh_k_mem_stats_get(ctx, &st);
    CU_ASSERT_EQUAL(st.in_use, 4096);
    lh_k_free(ctx, p);
    CU_ASSERT_EQUAL(lh_k_sync(ctx), LH_OK);
    /* graph calls on a CPU context refuse, and need no CUDA library to say so */
    lh_k_graph *g = NULL;
    CU_ASSERT_EQUAL(lh_k_graph_create(ctx, &g), LH_E_UNSUPPORTED);
    int64_t caps = -1, reps = -1;
    lh_k_graph_counts(NULL, &caps, &reps);
    CU_ASSERT_EQUAL(caps, 0);
    CU_ASSERT_EQUAL(reps, 0);
    lh_k_graph_free(NULL);
    lh_k_graph_abort(ctx, NULL);
    (void)lh_k_cuda_built(); /* a build fact, not a probe */
    lh_k_ctx_free(ctx);
    CU_ASSERT_EQUAL(lh_k_cuda_load_state(NULL), LH_K_CUDA_NOT_TRIED);
}

/* ---- 2. the first probe: state and reason, from several threads at once -------------------- */

static void *probe_thread(void *arg)
{
    *(int *)arg = lh_k_cuda_device_count();
    return NULL;
}

static void test_probe_state_and_reason(void)
{
    const char *expect = expect_env();
    if (!expect) {
        LH_TEST_SKIP("LH_CUDA_LOAD_EXPECT is not set (meson sets it per case)");
        return;
    }
    pthread_t th[4];
    int counts[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, probe_thread, &counts[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    const char *why = NULL;
    const lh_k_cuda_state st = lh_k_cuda_load_state(&why);
    const char *name = lh_k_cuda_state_name(st);
    CU_ASSERT_PTR_NOT_NULL_FATAL(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    printf("\n    state: %s; reason: %s\n    ", name, why);
    if (!listed(expect, name))
        FAILF("state '%s' (reason \"%s\"), expected one of '%s'", name, why, expect);
    for (int i = 1; i < 4; i++)
        CU_ASSERT_EQUAL(counts[i], counts[0]);
    const char *reason = getenv("LH_CUDA_LOAD_REASON");
    if (reason && *reason && !strstr(why, reason))
        FAILF("reason \"%s\" does not contain \"%s\"", why, reason);
    if (st == LH_K_CUDA_OK) {
        CU_ASSERT_TRUE(counts[0] > 0);
        CU_ASSERT_STRING_EQUAL(why, "");
        CU_ASSERT_STRING_EQUAL(lh_k_cuda_unavailable_reason(), "");
        return;
    }
    CU_ASSERT_EQUAL(counts[0], 0);
    if (!*why)
        FAILF("state '%s' without a reason", name);
    CU_ASSERT_STRING_EQUAL(lh_k_cuda_unavailable_reason(), why);
    if (st != LH_K_CUDA_NOT_BUILT && st != LH_K_CUDA_NO_DEVICE &&
        !strstr(why, getenv("LLMHOST_KERNELS_CUDA") ? getenv("LLMHOST_KERNELS_CUDA")
                                                     : "libllmhost_kernels_cuda.so"))
        FAILF("reason \"%s\" does not name the library's path", why);
    if (getenv("LH_CUDA_LOAD_UNMAPPED")) { /* nothing of CUDA came into the process */
        FILE *maps = fopen("/proc/self/maps", "r");
        char line[1024];
        bool seen = false;
        while (maps && fgets(line, sizeof line, maps))
            seen |= strstr(line, "libllmhost_kernels_cuda") || strstr(line, "libcublas") ||
                    strstr(line, "libcudart");
        if (maps)
            fclose(maps);
        CU_ASSERT_PTR_NOT_NULL(maps);
        if (seen)
            FAILF("%s", "the CUDA kernels library (or cudart / cuBLAS) was mapped");
    }
    /* once per process: asking again changes nothing */
    CU_ASSERT_EQUAL(lh_k_cuda_device_count(), 0);
    CU_ASSERT_EQUAL(lh_k_cuda_load_state(NULL), st);
}

/* ---- 3. CUDA contexts and device facts give that reason -------------------------------------- */

static void test_ctx_create_reports_reason(void)
{
    if (!expect_env()) {
        LH_TEST_SKIP("LH_CUDA_LOAD_EXPECT is not set");
        return;
    }
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cuda());
    const char *why = NULL;
    const lh_k_cuda_state st = lh_k_cuda_load_state(&why);
    if (st == LH_K_CUDA_OK) {
        if (!ctx)
            FAILF("state ok, but lh_k_ctx_create(cuda:0) failed: %s", lh_k_last_error(NULL));
        lh_k_ctx_free(ctx);
        return;
    }
    CU_ASSERT_PTR_NULL(ctx);
    if (ctx)
        lh_k_ctx_free(ctx);
    const char *msg = lh_k_last_error(NULL);
    if (!strstr(msg, "lh_k_ctx_create: cuda:0 is not available") || !strstr(msg, why))
        FAILF("lh_k_ctx_create(cuda:0): \"%s\" does not give the reason \"%s\"", msg, why);
    lh_k_device_info info;
    CU_ASSERT_EQUAL(lh_k_cuda_device_info(0, &info), LH_E_UNSUPPORTED);
    msg = lh_k_last_error(NULL);
    if (!strstr(msg, "lh_k_cuda_device_info: cuda:0") || !strstr(msg, why))
        FAILF("lh_k_cuda_device_info(0): \"%s\" does not give the reason \"%s\"", msg, why);
    /* another ordinal: the same reason */
    CU_ASSERT_PTR_NULL(lh_k_ctx_create(1, (lh_device){LH_DEVICE_CUDA, 3}));
    CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(NULL), why));
}

/* ---- 4. the CPU is untouched by any of it ------------------------------------------------------ */

static void test_cpu_after(void)
{
    const lh_k_cuda_state before = lh_k_cuda_load_state(NULL);
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    lh_tensor x = {.data = d, .dtype = LH_DTYPE_F32, .ndim = 2, .shape = {2, 4},
                   .stride = {4, 1}, .device = kt_cpu()};
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, &x), LH_OK);
    CU_ASSERT_DOUBLE_EQUAL(d[0] + d[1] + d[2] + d[3], 1.0, 1e-5);
    lh_k_ctx_free(ctx);
    CU_ASSERT_EQUAL(lh_k_cuda_load_state(NULL), before);
}

static void test_state_names(void)
{
    const lh_k_cuda_state all[] = {LH_K_CUDA_NOT_TRIED,   LH_K_CUDA_NOT_BUILT,
                                   LH_K_CUDA_LIB_MISSING, LH_K_CUDA_LOAD_FAILED,
                                   LH_K_CUDA_BAD_LIBRARY, LH_K_CUDA_NO_DEVICE, LH_K_CUDA_OK};
    const size_t n = sizeof all / sizeof *all;
    for (size_t i = 0; i < n; i++) {
        const char *a = lh_k_cuda_state_name(all[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        for (size_t j = 0; j < i; j++)
            CU_ASSERT_STRING_NOT_EQUAL(a, lh_k_cuda_state_name(all[j]));
    }
    CU_ASSERT_PTR_NULL(lh_k_cuda_state_name((lh_k_cuda_state)99));
}

static CU_TestInfo load_tests[] = {
    {"CPU work loads nothing", test_cpu_work_loads_nothing},
    {"the first probe: state and reason", test_probe_state_and_reason},
    {"CUDA context and device facts give the reason", test_ctx_create_reports_reason},
    {"the CPU afterwards", test_cpu_after},
    {"state names", test_state_names},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cuda_load", NULL, NULL, NULL, NULL, load_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
