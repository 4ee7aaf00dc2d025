/* Kernel library: the CUDA kernels against their CPU twins.
 *
 * Every GPU test draws random inputs from a fixed seed, runs the kernel on a CUDA context and
 * the same call on a CPU context, downloads the result and compares it with the tolerance
 * stated next to the comparison. Without a usable CUDA device (this build has no CUDA
 * kernels, no driver, no device) each GPU test is reported as skipped with the library's
 * reason, never as passed.
 *
 * A first suite runs everywhere and checks the device plumbing that needs no GPU: the
 * unavailable reason, refusing a CUDA context, a CUDA tensor handed to a CPU context, graphs
 * on a CPU context, and lh_k_alloc / lh_k_copy / lh_k_free on the host heap. */
#include "ktest.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/* ---- failure reporting ---------------------------------------------------------------------- */

/* CUnit copies the condition string of a failure, so a formatted message can be reported. */
static void fail_at(int line, const char *msg)
{
    printf("\n    FAIL (line %d) %s", line, msg);
    CU_assertImplementation(CU_FALSE, (unsigned)line, msg, __FILE__, "", CU_FALSE);
}

#define FAILF(...)                                                                                \
    do {                                                                                          \
        char fm_[1024];                                                                           \
        snprintf(fm_, sizeof fm_, __VA_ARGS__);                                                   \
        fail_at(__LINE__, fm_);                                                                   \
    } while (0)

static bool ok_at(lh_kctx *ctx, lh_status st, const char *call, int line)
{
    if (st == LH_OK)
        return true;
    char m[1024];
    snprintf(m, sizeof m, "%.300s returned %d: %.600s", call, (int)st, lh_k_last_error(ctx));
    fail_at(line, m);
    return false;
}
/* Asserts that call returns LH_OK (message from ctx, or the thread's message for NULL). */
#define OK(ctx, call) ok_at((ctx), (call), #call, __LINE__)

static bool expect_at(lh_kctx *ctx, lh_status st, lh_status want, const char *call, int line)
{
    if (st == want)
        return true;
    char m[1024];
    snprintf(m, sizeof m, "%.300s returned %d, expected %d: %.600s", call, (int)st, (int)want,
             lh_k_last_error(ctx));
    fail_at(line, m);
    return false;
}
#define EXPECT_ST(ctx, call, want) expect_at((ctx), (call), (want), #call, __LINE__)

/* Case-insensitive substring test. */
static bool icontains(const char *hay, const char *needle)
{
    if (!hay)
        return false;
    const size_t n = strlen(needle);
    for (const char *p = hay;; p++) {
        size_t i = 0;
        while (i < n && p[i] &&
               tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
        if (!*p)
            return false;
    }
}

/* ---- comparisons ---------------------------------------------------------------------------- */

/* Element checks of one case: counts the failures and remembers the first and the worst. NaN
 * matches only NaN, an infinity only the same infinity. */
/* values compared by the current test (reported when its environment closes) */
static int64_t compared;

typedef struct acc {
    int64_t n, bad, first_i, worst_i;
    double first_got, first_want, worst_got, worst_want, worst_r;
} acc;

static void acc_add(acc *a, int64_t i, double got, double want, double tol)
{
    bool ok;
    double r = 0;
    if (isnan(want) || isnan(got)) {
        ok = isnan(want) && isnan(got);
    } else if (isinf(want) || isinf(got)) {
        ok = got == want;
    } else {
        const double err = fabs(got - want);
        ok = err <= tol;
        r = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
    }
    if (!ok && !(r > 0))
        r = INFINITY;
    a->n++;
    compared++;
    if (!ok && a->bad++ == 0) {
        a->first_i = i;
        a->first_got = got;
        a->first_want = want;
    }
    if (r > a->worst_r || (!ok && a->bad == 1)) {
        if (r > a->worst_r)
            a->worst_r = r;
        a->worst_i = i;
        a->worst_got = got;
        a->worst_want = want;
    }
}

static bool acc_report_at(int line, const acc *a, const char *what)
{
    if (a->bad == 0)
        return true;
    char m[1024];
    snprintf(m, sizeof m,
             "%.400s: %lld of %lld values out of tolerance; first [%lld]: got %.9g want %.9g; "
             "worst [%lld]: got %.9g want %.9g (err/tol %.3g)",
             what, (long long)a->bad, (long long)a->n, (long long)a->first_i, a->first_got,
             a->first_want, (long long)a->worst_i, a->worst_got, a->worst_want, a->worst_r);
    fail_at(line, m);
    return false;
}
#define ACC_REPORT(a, what) acc_report_at(__LINE__, (a), (what))

/* |got - want| <= abs_tol + rel_tol |want| (+ extra[i] when extra is non-NULL). */
static bool cmp_f32_at(int line, const char *what, const float *got, const float *want, int64_t n,
                       double abs_tol, double rel_tol, const double *extra)
{
    acc a = {0};
    for (int64_t i = 0; i < n; i++)
        acc_add(&a, i, got[i], want[i],
                abs_tol + rel_tol * fabs((double)want[i]) + (extra ? extra[i] : 0.0));
    return acc_report_at(line, &a, what);
}
#define CMP(what, got, want, n, abs_tol, rel_tol, extra)                                          \
    cmp_f32_at(__LINE__, (what), (got), (want), (n), (abs_tol), (rel_tol), (extra))

static bool cmp_i32_at(int line, const char *what, const int32_t *got, const int32_t *want,
                       int64_t n)
{
    int64_t bad = 0, first = -1;
    compared += n;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ == 0)
            first = i;
    if (!bad)
        return true;
    char m[1024];
    snprintf(m, sizeof m, "%.400s: %lld of %lld ids differ; first [%lld]: got %d want %d", what,
             (long long)bad, (long long)n, (long long)first, got[first], want[first]);
    fail_at(line, m);
    return false;
}
#define CMP_IDS(what, got, want, n) cmp_i32_at(__LINE__, (what), (got), (want), (n))

static float dt_value(lh_dtype dt, const void *base, int64_t i, uint32_t *bits)
{
    if (dt == LH_DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)base + 4 * i, 4);
        memcpy(bits, &f, 4);
        return f;
    }
    const uint16_t u = ((const uint16_t *)base)[i];
    *bits = u;
    return dt == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(u) : lh_k_f16_to_f32(u);
}

/* Bit-exact comparison of f32 / bf16 / f16 data, except that any NaN matches any NaN. */
static bool cmp_bits_at(int line, const char *what, lh_dtype dt, const void *got,
                        const void *want, int64_t n)
{
    int64_t bad = 0, first = -1;
    compared += n;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bg, bw;
        const float fg = dt_value(dt, got, i, &bg), fw = dt_value(dt, want, i, &bw);
        if (bg != bw && !(isnan(fg) && isnan(fw)) && bad++ == 0)
            first = i;
    }
    if (!bad)
        return true;
    uint32_t bg, bw;
    const float fg = dt_value(dt, got, first, &bg), fw = dt_value(dt, want, first, &bw);
    char m[1024];
    snprintf(m, sizeof m,
             "%.400s: %lld of %lld values differ; first [%lld]: got 0x%x (%.9g) want 0x%x (%.9g)",
             what, (long long)bad, (long long)n, (long long)first, (unsigned)bg, (double)fg,
             (unsigned)bw, (double)fw);
    fail_at(line, m);
    return false;
}
#define CMP_BITS(what, dt, got, want, n) cmp_bits_at(__LINE__, (what), (dt), (got), (want), (n))

/* ---- host helpers --------------------------------------------------------------------------- */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "test_cuda_kernels: out of host memory\n");
        abort();
    }
    return p;
}

static void fill_uniform(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = kt_uniform() * scale;
}

static size_t dt_size(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? 4 : dt == LH_DTYPE_FP8_E4M3 ? 1 : 2;
}

static const char *dt_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_F16: return "f16";
    case LH_DTYPE_FP8_E4M3: return "fp8";
    default: return "?";
    }
}

/* ---- GPU environment: a CUDA and a CPU context, device buffers freed together -------------- */

/* LH_TEST_CUDA_AS_CPU=1: a scalar-ISA CPU context stands in for the device, so the suite's own
 * logic (buffers, shapes, tolerances) can be checked on a machine without a GPU. Tests of
 * what only a real device has (memory numbers, graphs) stay skipped then. */
static bool as_cpu(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("LH_TEST_CUDA_AS_CPU");
        mode = v && v[0] == '1' && v[1] == 0;
    }
    return mode == 1;
}

#define SKIP_WITHOUT_GPU(allow_cpu_stand_in)                                                      \
    do {                                                                                          \
        if (lh_k_cuda_device_count() == 0 && !((allow_cpu_stand_in) && as_cpu())) {              \
            char why_[512];                                                                       \
            snprintf(why_, sizeof why_, "CUDA unavailable: %s", lh_k_cuda_unavailable_reason());  \
            LH_TEST_SKIP(why_);                                                                   \
            return;                                                                               \
        }                                                                                         \
        if (!(allow_cpu_stand_in) && as_cpu()) {                                                  \
            LH_TEST_SKIP("needs a real CUDA device (LH_TEST_CUDA_AS_CPU is set)");                \
            return;                                                                               \
        }                                                                                         \
    } while (0)
/* GPU tests: skipped without a device */
#define NEED_GPU() SKIP_WITHOUT_GPU(true)
#define NEED_REAL_GPU() SKIP_WITHOUT_GPU(false)

#define MAX_BUFS 128

typedef struct genv {
    lh_kctx *g, *c; /* CUDA device 0; CPU with every core */
    void *buf[MAX_BUFS];
    int nbuf;
} genv;

static bool env_open(genv *e)
{
    memset(e, 0, sizeof *e);
    e->g = as_cpu() ? kt_ctx(1, LH_K_ISA_SCALAR) : lh_k_ctx_create(1, kt_cuda());
    if (!e->g) {
        FAILF("lh_k_ctx_create(cuda:0) failed: %s", lh_k_last_error(NULL));
        return false;
    }
    e->c = lh_k_ctx_create(0, kt_cpu());
    if (!e->c) {
        FAILF("lh_k_ctx_create(cpu) failed: %s", lh_k_last_error(NULL));
        lh_k_ctx_free(e->g);
        e->g = NULL;
        return false;
    }
    return true;
}

/* Waits for the queued work (reporting a deferred fault), then frees every device buffer. */
static void env_drop(genv *e)
{
    OK(e->g, lh_k_sync(e->g));
    for (int i = e->nbuf - 1; i >= 0; i--)
        lh_k_free(e->g, e->buf[i]);
    e->nbuf = 0;
}

static void env_close(genv *e)
{
    printf("\n    %lld values compared", (long long)compared);
    compared = 0;
    env_drop(e);
    lh_k_ctx_free(e->g);
    lh_k_ctx_free(e->c);
}

/* Device memory (uninitialized); NULL after a reported failure (the kernel given it then
 * fails its argument checks, which is reported too). */
static void *dnew(genv *e, size_t bytes)
{
    if (e->nbuf == MAX_BUFS) {
        FAILF("test bug: more than %d device buffers", MAX_BUFS);
        return NULL;
    }
    void *p = NULL;
    if (!OK(e->g, lh_k_alloc(e->g, bytes ? bytes : 1, &p)))
        return NULL;
    e->buf[e->nbuf++] = p;
    return p;
}

static lh_tensor on_gpu(lh_tensor t)
{
    if (!as_cpu())
        t.device = kt_cuda();
    return t;
}

/* dev[0..n) = host[0..n), n elements of dt. */
static bool dset(genv *e, lh_dtype dt, void *dev, const void *host, int64_t n)
{
    if (n == 0)
        return true;
    lh_tensor d = on_gpu(kt_t1(dt, dev, n)), h = kt_t1(dt, (void *)host, n);
    return OK(e->g, lh_k_copy(e->g, &d, &h));
}

/* host[0..n) = dev[0..n). */
static bool dget(genv *e, lh_dtype dt, void *host, const void *dev, int64_t n)
{
    if (n == 0)
        return true;
    lh_tensor d = on_gpu(kt_t1(dt, (void *)dev, n)), h = kt_t1(dt, host, n);
    return OK(e->g, lh_k_copy(e->g, &h, &d));
}

/* A new device buffer holding a copy of host. */
static void *dput(genv *e, lh_dtype dt, const void *host, int64_t n)
{
    void *p = dnew(e, (size_t)lh_k_dtype_bytes(dt, n));
    if (p && !dset(e, dt, p, host, n))
        return NULL;
    return p;
}

/* ================================================================================================
 * Suite 1: behaviour without a GPU (runs everywhere)
 * ============================================================================================= */

static void test_reason_when_unavailable(void)
{
    const int n = lh_k_cuda_device_count();
    const char *why = lh_k_cuda_unavailable_reason();
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_TRUE(n >= 0);
    if (n == 0) {
        if (!*why)
            FAILF("lh_k_cuda_device_count() is 0 but lh_k_cuda_unavailable_reason() is empty");
        if (!lh_k_cuda_built() && !icontains(why, "build"))
            FAILF("no CUDA in this build, but the reason does not say so: \"%s\"", why);
    } else {
        CU_ASSERT_TRUE(lh_k_cuda_built());
        if (*why)
            FAILF("%d CUDA device(s), but the unavailable reason is \"%s\"", n, why);
    }
    /* stable: a second query agrees */
    CU_ASSERT_EQUAL(lh_k_cuda_device_count(), n);
    if (!lh_k_cuda_built())
        CU_ASSERT_EQUAL(n, 0);
}

static void test_cuda_ctx_refused(void)
{
    const int n = lh_k_cuda_device_count();
    /* an ordinal past the last device is refused in every build */
    lh_device past = {LH_DEVICE_CUDA, n};
    lh_kctx *ctx = lh_k_ctx_create(1, past);
    CU_ASSERT_PTR_NULL(ctx);
    if (ctx) {
        lh_k_ctx_free(ctx);
        return;
    }
    const char *msg = lh_k_last_error(NULL);
    if (!icontains(msg, "cuda"))
        FAILF("creating a context on cuda:%d failed with a message not naming cuda: \"%s\"", n,
              msg);
    if (n == 0) {
        /* copy: the reason may be rebuilt by the next call */
        char why[512];
        snprintf(why, sizeof why, "%s", lh_k_cuda_unavailable_reason());
        ctx = lh_k_ctx_create(1, kt_cuda());
        CU_ASSERT_PTR_NULL(ctx);
        if (ctx) {
            lh_k_ctx_free(ctx);
            return;
        }
        msg = lh_k_last_error(NULL);
        if (!icontains(msg, "cuda") || !kt_contains(msg, why))
            FAILF("lh_k_ctx_create(cuda:0) without a device: message \"%s\" should name cuda "
                  "and the reason \"%s\"",
                  msg, why);
    }
}

static void test_device_info_without_device(void)
{
    const int n = lh_k_cuda_device_count();
    lh_k_device_info info;
    memset(&info, 0, sizeof info);
    EXPECT_ST(NULL, lh_k_cuda_device_info(n, &info), LH_E_UNSUPPORTED);
    if (n > 0) {
        if (OK(NULL, lh_k_cuda_device_info(0, &info))) {
            CU_ASSERT_TRUE(info.name[0] != 0);
            CU_ASSERT_TRUE(info.cc_major >= 7);
            CU_ASSERT_TRUE(info.sm_count > 0);
            CU_ASSERT_TRUE(info.total_bytes > 0);
            CU_ASSERT_TRUE(info.free_bytes > 0 && info.free_bytes <= info.total_bytes);
            CU_ASSERT_TRUE(info.bandwidth_gbs > 0);
            printf("\n    device 0: %s, sm_%d%d, %d SMs, %.1f GiB, %.0f GB/s, kernels %s",
                   info.name, info.cc_major, info.cc_minor, info.sm_count,
                   (double)info.total_bytes / 1073741824.0, info.bandwidth_gbs, info.kernels);
        }
    } else {
        EXPECT_ST(NULL, lh_k_cuda_device_info(0, &info), LH_E_UNSUPPORTED);
    }
    EXPECT_ST(NULL, lh_k_cuda_device_info(-1, &info), LH_E_UNSUPPORTED);
}

static lh_tensor as_cuda(lh_tensor t)
{
    t.device = kt_cuda();
    return t;
}

/* The device check comes before any data is touched, so a fake device pointer is safe. */
static void test_cuda_tensor_on_cpu_ctx(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_device(ctx).kind, LH_DEVICE_CPU);
    void *fake = (void *)(uintptr_t)0x10000;
    float x[4 * 8], w[8 * 8], y[4 * 8];
    memset(x, 0, sizeof x);
    memset(w, 0, sizeof w);
    memset(y, 0, sizeof y);
    lh_tensor tx = kt_t2(LH_DTYPE_F32, x, 4, 8), tw = kt_t2(LH_DTYPE_F32, w, 8, 8);
    lh_tensor ty = kt_t2(LH_DTYPE_F32, y, 4, 8);
    lh_tensor gx = as_cuda(kt_t2(LH_DTYPE_F32, fake, 4, 8));
    lh_tensor gw = as_cuda(kt_t2(LH_DTYPE_F32, fake, 8, 8));
    lh_tensor gy = as_cuda(kt_t2(LH_DTYPE_F32, fake, 4, 8));

#define REFUSED(call)                                                                             \
    do {                                                                                          \
        if (EXPECT_ST(ctx, (call), LH_E_USAGE)) {                                                 \
            const char *m_ = lh_k_last_error(ctx);                                                \
            if (!icontains(m_, "cuda") || !icontains(m_, "cpu"))                                  \
                FAILF("%s: message should name both devices: \"%s\"", #call, m_);                 \
        }                                                                                         \
    } while (0)
    REFUSED(lh_k_matmul(ctx, &gx, &tw, NULL, &ty));
    REFUSED(lh_k_matmul(ctx, &tx, &gw, NULL, &ty));
    REFUSED(lh_k_matmul(ctx, &tx, &tw, NULL, &gy));
    REFUSED(lh_k_silu_mul(ctx, &tx, &gx, &ty));
    REFUSED(lh_k_gelu_tanh_mul(ctx, &tx, &gx, &ty));
    REFUSED(lh_k_scale(ctx, &gy, 2.0f));
    REFUSED(lh_k_softmax(ctx, &gy));
    int32_t ids[4];
    REFUSED(lh_k_argmax(ctx, &gx, ids));
    lh_tensor gw1 = as_cuda(kt_t1(LH_DTYPE_F32, fake, 8));
    REFUSED(lh_k_rmsnorm(ctx, &tx, &gw1, 1e-6f, 0.0f, &ty));
    /* a CUDA tensor is neither the CPU nor this context's device for lh_k_copy either */
    REFUSED(lh_k_copy(ctx, &gx, &tx));
    REFUSED(lh_k_copy(ctx, &tx, &gx));
#undef REFUSED
    /* nothing was written */
    for (int i = 0; i < 4 * 8; i++)
        CU_ASSERT_EQUAL(y[i], 0.0f);
    lh_k_ctx_free(ctx);
}

static void test_graph_on_cpu_ctx(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    lh_k_graph *g = NULL;
    EXPECT_ST(ctx, lh_k_graph_create(ctx, &g), LH_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(g);
    lh_k_graph_free(g);
    lh_k_ctx_free(ctx);
}

static void test_cpu_alloc_copy_free(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    void *p = (void *)(uintptr_t)1;
    EXPECT_ST(ctx, lh_k_alloc(ctx, 0, &p), LH_E_USAGE);

    lh_k_mem_stats s0, s1, s2;
    lh_k_mem_stats_get(ctx, &s0);
    const int64_t n = 1000;
    float *a = xcalloc((size_t)n, sizeof(float)), *b = xcalloc((size_t)n, sizeof(float));
    kt_seed(11);
    fill_uniform(a, n, 5.0f);
    void *m = NULL;
    if (OK(ctx, lh_k_alloc(ctx, (size_t)n * sizeof(float), &m))) {
        CU_ASSERT_PTR_NOT_NULL(m);
        CU_ASSERT_EQUAL((uintptr_t)m % 256, 0);
        lh_k_mem_stats_get(ctx, &s1);
        CU_ASSERT_TRUE(s1.in_use >= s0.in_use + n * (int64_t)sizeof(float));
        CU_ASSERT_TRUE(s1.peak >= s1.in_use);
        lh_tensor tm = kt_t1(LH_DTYPE_F32, m, n), ta = kt_t1(LH_DTYPE_F32, a, n);
        lh_tensor tb = kt_t1(LH_DTYPE_F32, b, n);
        OK(ctx, lh_k_copy(ctx, &tm, &ta));
        OK(ctx, lh_k_copy(ctx, &tb, &tm));
        CU_ASSERT_EQUAL(memcmp(a, b, (size_t)n * sizeof(float)), 0);
        OK(ctx, lh_k_memzero(ctx, m, (size_t)n * sizeof(float)));
        OK(ctx, lh_k_sync(ctx));
        OK(ctx, lh_k_copy(ctx, &tb, &tm));
        bool zero = true;
        for (int64_t i = 0; i < n; i++)
            zero = zero && b[i] == 0.0f;
        CU_ASSERT_TRUE(zero);
        /* shape mismatch */
        lh_tensor tshort = kt_t1(LH_DTYPE_F32, b, n - 1);
        EXPECT_ST(ctx, lh_k_copy(ctx, &tshort, &tm), LH_E_USAGE);
        /* quantized weights copy as bytes: int8 any count, int4 whole bytes only */
        lh_tensor i8a = kt_t1(LH_DTYPE_INT8, a, 7), i8b = kt_t1(LH_DTYPE_INT8, b, 7);
        OK(ctx, lh_k_copy(ctx, &i8b, &i8a));
        CU_ASSERT_EQUAL(memcmp(a, b, 7), 0);
        lh_tensor i4a = kt_t1(LH_DTYPE_INT4, a, 7), i4b = kt_t1(LH_DTYPE_INT4, b, 7);
        EXPECT_ST(ctx, lh_k_copy(ctx, &i4b, &i4a), LH_E_USAGE);
        CU_ASSERT_PTR_NOT_NULL(strstr(lh_k_last_error(ctx), "dst int4 [7] has an odd element count"));
        i4a.shape[0] = i4b.shape[0] = 8;
        OK(ctx, lh_k_copy(ctx, &i4b, &i4a));
        lh_k_free(ctx, m);
        lh_k_mem_stats_get(ctx, &s2);
        CU_ASSERT_EQUAL(s2.in_use, s0.in_use);
    }
    free(a);
    free(b);
    lh_k_ctx_free(ctx);
}

/* ================================================================================================
 * Suite 2: every CUDA kernel against its CPU twin
 * ============================================================================================= */

static void test_gpu_context_and_memory(void)
{
    NEED_REAL_GPU();
    genv e;
    if (!env_open(&e))
        return;
    CU_ASSERT_EQUAL(lh_k_ctx_device(e.g).kind, LH_DEVICE_CUDA);
    CU_ASSERT_EQUAL(lh_k_ctx_device(e.g).index, 0);

    /* an absurd size: LH_E_NOMEM with the numbers, among them the free memory */
    void *huge = NULL;
    if (EXPECT_ST(e.g, lh_k_alloc(e.g, (size_t)1 << 50, &huge), LH_E_NOMEM)) {
        if (!icontains(lh_k_last_error(e.g), "free"))
            FAILF("LH_E_NOMEM message should report the free memory: \"%s\"",
                  lh_k_last_error(e.g));
    }
    EXPECT_ST(e.g, lh_k_alloc(e.g, 0, &huge), LH_E_USAGE);

    lh_k_mem_stats s0, s1, s2;
    lh_k_mem_stats_get(e.g, &s0);
    const size_t bytes = (size_t)3 << 20;
    void *p = NULL;
    if (OK(e.g, lh_k_alloc(e.g, bytes, &p))) {
        CU_ASSERT_EQUAL((uintptr_t)p % 256, 0);
        lh_k_mem_stats_get(e.g, &s1);
        CU_ASSERT_TRUE(s1.in_use >= s0.in_use + (int64_t)bytes);
        CU_ASSERT_TRUE(s1.peak >= s1.in_use);
        CU_ASSERT_TRUE(s1.device_total > 0);
        CU_ASSERT_TRUE(s1.device_free > 0 && s1.device_free <= s1.device_total);
        /* memzero, then a round trip */
        const int64_t n = (int64_t)(bytes / sizeof(float));
        float *h = xcalloc((size_t)n, sizeof(float));
        for (int64_t i = 0; i < n; i++)
            h[i] = 1.0f;
        OK(e.g, lh_k_memzero(e.g, p, bytes));
        if (dget(&e, LH_DTYPE_F32, h, p, n)) {
            bool zero = true;
            for (int64_t i = 0; i < n; i++)
                zero = zero && h[i] == 0.0f;
            CU_ASSERT_TRUE(zero);
        }
        kt_seed(5);
        fill_uniform(h, n, 1.0f);
        float *back = xcalloc((size_t)n, sizeof(float));
        if (dset(&e, LH_DTYPE_F32, p, h, n) && dget(&e, LH_DTYPE_F32, back, p, n))
            CU_ASSERT_EQUAL(memcmp(h, back, bytes), 0);
        /* device to device */
        void *q = dnew(&e, bytes);
        lh_tensor tp = on_gpu(kt_t1(LH_DTYPE_F32, p, n)), tq = on_gpu(kt_t1(LH_DTYPE_F32, q, n));
        memset(back, 0, bytes);
        if (q && OK(e.g, lh_k_copy(e.g, &tq, &tp)) && dget(&e, LH_DTYPE_F32, back, q, n))
            CU_ASSERT_EQUAL(memcmp(h, back, bytes), 0);
        /* a CPU tensor is fine for lh_k_copy but not for a kernel on a CUDA context */
        lh_tensor hx = kt_t2(LH_DTYPE_F32, h, 4, 8);
        if (EXPECT_ST(e.g, lh_k_softmax(e.g, &hx), LH_E_USAGE)) {
            const char *m = lh_k_last_error(e.g);
            if (!icontains(m, "cuda") || !icontains(m, "cpu"))
                FAILF("a CPU tensor on a CUDA context: message should name both devices: "
                      "\"%s\"", m);
        }
        free(h);
        free(back);
        env_drop(&e);
        lh_k_free(e.g, p);
        lh_k_mem_stats_get(e.g, &s2);
        CU_ASSERT_EQUAL(s2.in_use, s0.in_use);
    }
    env_close(&e);
}

/* ---- matmul --------------------------------------------------------------------------------- */

/* Tolerances, per output element, relative to the row's sum_k |x_mk| |w_nk| (+ |bias_n|):
 *   M <= 8 (GEMV path, f32 x times converted weights): 1e-5 for every weight dtype;
 *   M > 8 (cuBLAS path): f32 weights 1e-5; bf16 weights 1e-2 (x is rounded to bf16 for the
 *   tensor cores: 2^-8 relative per product); f16 weights 2e-3 (x rounded to f16: 2^-11). */
static void test_gpu_matmul(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(101);
    static const int64_t Ms[5] = {1, 3, 8, 9, 64};
    static const int64_t NK[3][2] = {{256, 4096}, {1000, 77}, {77, 1000}};
    static const lh_dtype wdts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    const int64_t Mmax = 64;
    for (int si = 0; si < 3; si++) {
        const int64_t N = NK[si][0], K = NK[si][1];
        float *x = xcalloc((size_t)(Mmax * K), sizeof(float));
        float *wref = xcalloc((size_t)(N * K), sizeof(float));
        void *w = xcalloc((size_t)(N * K), sizeof(float));
        float *bref = xcalloc((size_t)N, sizeof(float));
        void *bias = xcalloc((size_t)N, sizeof(float));
        float *yc = xcalloc((size_t)(Mmax * N), sizeof(float));
        float *yg = xcalloc((size_t)(Mmax * N), sizeof(float));
        double *sabs = xcalloc((size_t)(Mmax * N), sizeof(double));
        double *tol = xcalloc((size_t)(Mmax * N), sizeof(double));
        for (int di = 0; di < 3; di++) {
            const lh_dtype dt = wdts[di];
            kt_fill_w(dt, w, wref, N * K, 1.0f);
            kt_fill_w(dt, bias, bref, N, 1.0f);
            void *dw = dput(&e, dt, w, N * K), *db = dput(&e, dt, bias, N);
            lh_tensor hw = kt_t2(dt, w, N, K), hb = kt_t1(dt, bias, N);
            lh_tensor gw = on_gpu(kt_t2(dt, dw, N, K)), gb = on_gpu(kt_t1(dt, db, N));
            for (int mi = 0; mi < 5; mi++) {
                const int64_t M = Ms[mi];
                fill_uniform(x, M * K, 1.0f);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double s = 0;
                        for (int64_t k = 0; k < K; k++)
                            s += fabs((double)x[m * K + k]) * fabs((double)wref[n * K + k]);
                        sabs[m * N + n] = s;
                    }
                void *dx = dput(&e, LH_DTYPE_F32, x, M * K);
                void *dy = dnew(&e, (size_t)(M * N) * sizeof(float));
                lh_tensor hx = kt_t2(LH_DTYPE_F32, x, M, K), hy = kt_t2(LH_DTYPE_F32, yc, M, N);
                lh_tensor gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, K));
                lh_tensor gy = on_gpu(kt_t2(LH_DTYPE_F32, dy, M, N));
                const double rel = M <= 8                 ? 1e-5
                                   : dt == LH_DTYPE_BF16 ? 1e-2
                                   : dt == LH_DTYPE_F16  ? 2e-3
                                                          : 1e-5;
                for (int wb = 0; wb < 2; wb++) {
                    memset(yc, 0, (size_t)(M * N) * sizeof(float));
                    memset(yg, 0, (size_t)(M * N) * sizeof(float));
                    char what[160];
                    snprintf(what, sizeof what, "matmul w %s M %lld N %lld K %lld%s",
                             dt_name(dt), (long long)M, (long long)N, (long long)K,
                             wb ? " + bias" : "");
                    const bool ok =
                        OK(e.c, lh_k_matmul(e.c, &hx, &hw, wb ? &hb : NULL, &hy)) &&
                        OK(e.g, lh_k_matmul(e.g, &gx, &gw, wb ? &gb : NULL, &gy)) &&
                        dget(&e, LH_DTYPE_F32, yg, dy, M * N);
                    if (!ok)
                        continue;
                    for (int64_t i = 0; i < M * N; i++)
                        tol[i] = rel * (sabs[i] + (wb ? fabs((double)bref[i % N]) : 0.0));
                    CMP(what, yg, yc, M * N, 0.0, 0.0, tol);
                }
            }
            env_drop(&e);
        }
        free(x);
        free(wref);
        free(w);
        free(bref);
        free(bias);
        free(yc);
        free(yg);
        free(sabs);
        free(tol);
    }
    env_close(&e);
}

/* ---- embedding, gather_rows ----------------------------------------------------------------- */

/* exact: a table lookup converts each element the same way on both devices */
static void test_gpu_embedding(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(202);
    const int64_t V = 500, D = 96, n = 13;
    static const int32_t ids[13] = {0, 499, 7, 7, 250, 1, 498, 3, 100, 200, 300, 400, 0};
    static const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    void *table = xcalloc((size_t)(V * D), sizeof(float));
    float *ref = xcalloc((size_t)(V * D), sizeof(float));
    float *oc = xcalloc((size_t)(n * D), sizeof(float)), *og = xcalloc((size_t)(n * D), sizeof(float));
    for (int di = 0; di < 3; di++) {
        const lh_dtype dt = dts[di];
        kt_fill_w(dt, table, ref, V * D, 3.0f);
        void *dtab = dput(&e, dt, table, V * D);
        void *dout = dnew(&e, (size_t)(n * D) * sizeof(float));
        lh_tensor ht = kt_t2(dt, table, V, D), ho = kt_t2(LH_DTYPE_F32, oc, n, D);
        lh_tensor gt = on_gpu(kt_t2(dt, dtab, V, D)), go = on_gpu(kt_t2(LH_DTYPE_F32, dout, n, D));
        for (int64_t nn = 1; nn <= n; nn += n - 1) {
            ho.shape[0] = go.shape[0] = nn;
            char what[64];
            snprintf(what, sizeof what, "embedding %s n %lld", dt_name(dt), (long long)nn);
            if (OK(e.c, lh_k_embedding(e.c, &ht, ids, nn, &ho)) &&
                OK(e.g, lh_k_embedding(e.g, &gt, ids, nn, &go)) &&
                dget(&e, LH_DTYPE_F32, og, dout, nn * D))
                CMP(what, og, oc, nn * D, 0.0, 0.0, NULL);
        }
        /* an id outside the table is refused on the device too */
        const int32_t bad[2] = {3, (int32_t)V};
        go.shape[0] = 2;
        EXPECT_ST(e.g, lh_k_embedding(e.g, &gt, bad, 2, &go), LH_E_USAGE);
        env_drop(&e);
    }
    free(table);
    free(ref);
    free(oc);
    free(og);
    env_close(&e);
}

/* exact: a copy */
static void test_gpu_gather_rows(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(303);
    const int64_t R = 50, D = 33, n = 17;
    float *src = xcalloc((size_t)(R * D), sizeof(float));
    float *oc = xcalloc((size_t)(n * D), sizeof(float)), *og = xcalloc((size_t)(n * D), sizeof(float));
    fill_uniform(src, R * D, 10.0f);
    int64_t rows[17];
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int64_t)(kt_u64() % (uint64_t)R);
    rows[0] = 0;
    rows[1] = R - 1;
    rows[2] = rows[3];
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < D; d++)
            oc[i * D + d] = src[rows[i] * D + d];
    void *ds = dput(&e, LH_DTYPE_F32, src, R * D), *dd = dnew(&e, (size_t)(n * D) * sizeof(float));
    lh_tensor gs = on_gpu(kt_t2(LH_DTYPE_F32, ds, R, D)), gd = on_gpu(kt_t2(LH_DTYPE_F32, dd, n, D));
    if (OK(e.g, lh_k_gather_rows(e.g, &gs, rows, n, &gd)) && dget(&e, LH_DTYPE_F32, og, dd, n * D))
        CMP("gather_rows", og, oc, n * D, 0.0, 0.0, NULL);
    /* the CPU twin gives the same */
    float *oc2 = xcalloc((size_t)(n * D), sizeof(float));
    lh_tensor hs = kt_t2(LH_DTYPE_F32, src, R, D), hd = kt_t2(LH_DTYPE_F32, oc2, n, D);
    if (OK(e.c, lh_k_gather_rows(e.c, &hs, rows, n, &hd)))
        CMP("gather_rows (cpu)", oc2, oc, n * D, 0.0, 0.0, NULL);
    const int64_t bad[2] = {0, R};
    gd.shape[0] = 2;
    EXPECT_ST(e.g, lh_k_gather_rows(e.g, &gs, bad, 2, &gd), LH_E_USAGE);
    free(src);
    free(oc);
    free(og);
    free(oc2);
    env_close(&e);
}

/* ---- rmsnorm, add_rmsnorm, silu_mul, softmax, argmax, convert ------------------------------- */

/* rmsnorm outputs: 1e-5 relative (+1e-6 absolute); the residual sum of add_rmsnorm: exact (one
 * f32 addition). Cases: separate out, out == x (aliasing), offset 0 and 1. */
static void test_gpu_rmsnorm(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(404);
    static const int64_t Ds[2] = {4096, 77};
    static const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    const int64_t M = 5;
    const float eps = 1e-5f;
    for (int si = 0; si < 2; si++) {
        const int64_t D = Ds[si], n = M * D;
        float *x = xcalloc((size_t)n, sizeof(float)), *r = xcalloc((size_t)n, sizeof(float));
        float *xc = xcalloc((size_t)n, sizeof(float)), *rc = xcalloc((size_t)n, sizeof(float));
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        float *rg = xcalloc((size_t)n, sizeof(float)), *wref = xcalloc((size_t)D, sizeof(float));
        void *w = xcalloc((size_t)D, sizeof(float));
        fill_uniform(x, n, 3.0f);
        fill_uniform(r, n, 2.0f);
        void *dx = dnew(&e, (size_t)n * sizeof(float)), *dr = dnew(&e, (size_t)n * sizeof(float));
        void *dout = dnew(&e, (size_t)n * sizeof(float));
        for (int di = 0; di < 3; di++) {
            const lh_dtype dt = dts[di];
            kt_fill_w(dt, w, wref, D, 1.0f);
            void *dw = dput(&e, dt, w, D);
            lh_tensor hw = kt_t1(dt, w, D), gw = on_gpu(kt_t1(dt, dw, D));
            for (int oi = 0; oi < 2; oi++)
                for (int cs = 0; cs < 4; cs++) {
                    const float off = (float)oi;
                    const bool add = cs >= 2, alias = cs % 2 == 1;
                    memcpy(xc, x, (size_t)n * sizeof(float));
                    memcpy(rc, r, (size_t)n * sizeof(float));
                    if (!dset(&e, LH_DTYPE_F32, dx, x, n) || !dset(&e, LH_DTYPE_F32, dr, r, n))
                        continue;
                    lh_tensor hx = kt_t2(LH_DTYPE_F32, xc, M, D), hr = kt_t2(LH_DTYPE_F32, rc, M, D);
                    lh_tensor ho = alias ? hx : kt_t2(LH_DTYPE_F32, oc, M, D);
                    lh_tensor gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, D));
                    lh_tensor gr = on_gpu(kt_t2(LH_DTYPE_F32, dr, M, D));
                    lh_tensor go = alias ? gx : on_gpu(kt_t2(LH_DTYPE_F32, dout, M, D));
                    char what[160];
                    snprintf(what, sizeof what, "%s w %s D %lld offset %g%s",
                             add ? "add_rmsnorm" : "rmsnorm", dt_name(dt), (long long)D,
                             (double)off, alias ? " out == x" : "");
                    bool ok;
                    if (add)
                        ok = OK(e.c, lh_k_add_rmsnorm(e.c, &hr, &hx, &hw, eps, off, &ho)) &&
                             OK(e.g, lh_k_add_rmsnorm(e.g, &gr, &gx, &gw, eps, off, &go));
                    else
                        ok = OK(e.c, lh_k_rmsnorm(e.c, &hx, &hw, eps, off, &ho)) &&
                             OK(e.g, lh_k_rmsnorm(e.g, &gx, &gw, eps, off, &go));
                    if (!ok || !dget(&e, LH_DTYPE_F32, og, go.data, n))
                        continue;
                    CMP(what, og, (const float *)ho.data, n, 1e-6, 1e-5, NULL);
                    if (add && dget(&e, LH_DTYPE_F32, rg, dr, n)) {
                        char w2[192];
                        snprintf(w2, sizeof w2, "%.160s: residual", what);
                        CMP(w2, rg, rc, n, 0.0, 0.0, NULL);
                    }
                }
        }
        env_drop(&e);
        free(x);
        free(r);
        free(xc);
        free(rc);
        free(oc);
        free(og);
        free(rg);
        free(wref);
        free(w);
    }
    env_close(&e);
}

/* 1e-6 relative (expf may differ by an ulp or two between libm and CUDA); out separate, out ==
 * gate, out == up. */
static void test_gpu_silu_mul(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(505);
    static const int64_t Is[2] = {1000, 4097};
    const int64_t M = 3;
    for (int si = 0; si < 2; si++) {
        const int64_t I = Is[si], n = M * I;
        float *gate = xcalloc((size_t)n, sizeof(float)), *up = xcalloc((size_t)n, sizeof(float));
        float *gc = xcalloc((size_t)n, sizeof(float)), *uc = xcalloc((size_t)n, sizeof(float));
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        fill_uniform(gate, n, 8.0f);
        fill_uniform(up, n, 3.0f);
        void *dg = dnew(&e, (size_t)n * 4), *du = dnew(&e, (size_t)n * 4), *dout = dnew(&e, (size_t)n * 4);
        for (int cs = 0; cs < 3; cs++) {
            memcpy(gc, gate, (size_t)n * sizeof(float));
            memcpy(uc, up, (size_t)n * sizeof(float));
            if (!dset(&e, LH_DTYPE_F32, dg, gate, n) || !dset(&e, LH_DTYPE_F32, du, up, n))
                continue;
            lh_tensor hg = kt_t2(LH_DTYPE_F32, gc, M, I), hu = kt_t2(LH_DTYPE_F32, uc, M, I);
            lh_tensor gg = on_gpu(kt_t2(LH_DTYPE_F32, dg, M, I)), gu = on_gpu(kt_t2(LH_DTYPE_F32, du, M, I));
            lh_tensor ho = cs == 1 ? hg : cs == 2 ? hu : kt_t2(LH_DTYPE_F32, oc, M, I);
            lh_tensor go = cs == 1 ? gg : cs == 2 ? gu : on_gpu(kt_t2(LH_DTYPE_F32, dout, M, I));
            char what[96];
            snprintf(what, sizeof what, "silu_mul I %lld%s", (long long)I,
                     cs == 1 ? " out == gate" : cs == 2 ? " out == up" : "");
            if (OK(e.c, lh_k_silu_mul(e.c, &hg, &hu, &ho)) &&
                OK(e.g, lh_k_silu_mul(e.g, &gg, &gu, &go)) &&
                dget(&e, LH_DTYPE_F32, og, go.data, n))
                CMP(what, og, (const float *)ho.data, n, 1e-12, 1e-6, NULL);
        }
        env_drop(&e);
        free(gate);
        free(up);
        free(gc);
        free(uc);
        free(oc);
        free(og);
    }
    env_close(&e);
}

/* gelu_tanh(gate) * up: the same formula without FMA on both sides; only tanhf may differ by
 * an ulp or so (scaled by 0.5 |x| |u| where 1 + tanh cancels). Aliasing as for silu_mul. */
static void test_gpu_gelu_tanh_mul(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(606);
    static const int64_t Is[2] = {1000, 4097};
    const int64_t M = 3;
    for (int si = 0; si < 2; si++) {
        const int64_t I = Is[si], n = M * I;
        float *gate = xcalloc((size_t)n, sizeof(float)), *up = xcalloc((size_t)n, sizeof(float));
        float *gc = xcalloc((size_t)n, sizeof(float)), *uc = xcalloc((size_t)n, sizeof(float));
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        double *extra = xcalloc((size_t)n, sizeof(double));
        fill_uniform(gate, n, 8.0f);
        fill_uniform(up, n, 3.0f);
        for (int64_t i = 0; i < n; i++)
            extra[i] = 2.5e-7 * fabs((double)gate[i] * up[i]);
        void *dg = dnew(&e, (size_t)n * 4), *du = dnew(&e, (size_t)n * 4), *dout = dnew(&e, (size_t)n * 4);
        for (int cs = 0; cs < 3; cs++) {
            memcpy(gc, gate, (size_t)n * sizeof(float));
            memcpy(uc, up, (size_t)n * sizeof(float));
            if (!dset(&e, LH_DTYPE_F32, dg, gate, n) || !dset(&e, LH_DTYPE_F32, du, up, n))
                continue;
            lh_tensor hg = kt_t2(LH_DTYPE_F32, gc, M, I), hu = kt_t2(LH_DTYPE_F32, uc, M, I);
            lh_tensor gg = on_gpu(kt_t2(LH_DTYPE_F32, dg, M, I)), gu = on_gpu(kt_t2(LH_DTYPE_F32, du, M, I));
            lh_tensor ho = cs == 1 ? hg : cs == 2 ? hu : kt_t2(LH_DTYPE_F32, oc, M, I);
            lh_tensor go = cs == 1 ? gg : cs == 2 ? gu : on_gpu(kt_t2(LH_DTYPE_F32, dout, M, I));
            char what[96];
            snprintf(what, sizeof what, "gelu_tanh_mul I %lld%s", (long long)I,
                     cs == 1 ? " out == gate" : cs == 2 ? " out == up" : "");
            if (OK(e.c, lh_k_gelu_tanh_mul(e.c, &hg, &hu, &ho)) &&
                OK(e.g, lh_k_gelu_tanh_mul(e.g, &gg, &gu, &go)) &&
                dget(&e, LH_DTYPE_F32, og, go.data, n))
                CMP(what, og, (const float *)ho.data, n, 1e-12, 1e-6, extra);
        }
        env_drop(&e);
        free(gate);
        free(up);
        free(gc);
        free(uc);
        free(oc);
        free(og);
        free(extra);
    }
    env_close(&e);
}

/* x *= s: one f32 product per element, bit-identical on both sides. */
static void test_gpu_scale(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(707);
    static const int64_t ns[3] = {1, 1000, 70001};
    for (int si = 0; si < 3; si++) {
        const int64_t n = ns[si];
        float *x = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        fill_uniform(x, n, 30.0f);
        void *dx = dput(&e, LH_DTYPE_F32, x, n);
        lh_tensor hx = kt_t1(LH_DTYPE_F32, x, n), gx = on_gpu(kt_t1(LH_DTYPE_F32, dx, n));
        const float s = 4.90625f;
        char what[64];
        snprintf(what, sizeof what, "scale n %lld", (long long)n);
        if (OK(e.c, lh_k_scale(e.c, &hx, s)) && OK(e.g, lh_k_scale(e.g, &gx, s)) &&
            dget(&e, LH_DTYPE_F32, og, dx, n))
            CMP(what, og, x, n, 0.0, 0.0, NULL);
        env_drop(&e);
        free(x);
        free(og);
    }
    env_close(&e);
}

/* ---- layernorm, gelu / gelu_tanh / gelu_mul, softcap, add, embedding_add (cuda/nn_ops.cu) --- */

/* LayerNorm: both sides within a few 1e-7 of the exact result (their f32 sums run in other
 * orders), so 6e-6 (|out| + |w|) + 2e-6 |b|. Cases: every w dtype, b none or of w's dtype,
 * out separate and out == x; D long, odd and 1. */
static void test_gpu_layernorm(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2101);
    static const int64_t Ds[3] = {4096, 77, 1};
    static const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    const int64_t M = 5;
    const float eps = 1e-5f;
    for (int si = 0; si < 3; si++) {
        const int64_t D = Ds[si], n = M * D;
        float *x = xcalloc((size_t)n, sizeof(float)), *xc = xcalloc((size_t)n, sizeof(float));
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        float *wref = xcalloc((size_t)D, sizeof(float)), *bref = xcalloc((size_t)D, sizeof(float));
        double *extra = xcalloc((size_t)n, sizeof(double));
        void *w = xcalloc((size_t)D, sizeof(float)), *b = xcalloc((size_t)D, sizeof(float));
        for (int64_t i = 0; i < n; i++)
            x[i] = kt_uniform() * 3.0f + ((i / D) % 2 ? 2.0f : 0.0f); /* odd rows off-centre */
        void *dx = dnew(&e, (size_t)n * sizeof(float)), *dout = dnew(&e, (size_t)n * sizeof(float));
        for (int di = 0; di < 3; di++) {
            const lh_dtype dt = dts[di];
            kt_fill_w(dt, w, wref, D, 1.5f);
            kt_fill_w(dt, b, bref, D, 1.0f);
            void *dw = dput(&e, dt, w, D), *db = dput(&e, dt, b, D);
            lh_tensor hw = kt_t1(dt, w, D), gw = on_gpu(kt_t1(dt, dw, D));
            lh_tensor hb = kt_t1(dt, b, D), gb = on_gpu(kt_t1(dt, db, D));
            for (int cs = 0; cs < 4; cs++) {
                const bool bias = cs >= 2, alias = cs % 2 == 1;
                memcpy(xc, x, (size_t)n * sizeof(float));
                if (!dset(&e, LH_DTYPE_F32, dx, x, n))
                    continue;
                lh_tensor hx = kt_t2(LH_DTYPE_F32, xc, M, D);
                lh_tensor ho = alias ? hx : kt_t2(LH_DTYPE_F32, oc, M, D);
                lh_tensor gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, D));
                lh_tensor go = alias ? gx : on_gpu(kt_t2(LH_DTYPE_F32, dout, M, D));
                char what[160];
                snprintf(what, sizeof what, "layernorm w %s b %s D %lld%s", dt_name(dt),
                         bias ? dt_name(dt) : "none", (long long)D, alias ? " out == x" : "");
                if (!OK(e.c, lh_k_layernorm(e.c, &hx, &hw, bias ? &hb : NULL, eps, &ho)) ||
                    !OK(e.g, lh_k_layernorm(e.g, &gx, &gw, bias ? &gb : NULL, eps, &go)) ||
                    !dget(&e, LH_DTYPE_F32, og, go.data, n))
                    continue;
                for (int64_t i = 0; i < n; i++)
                    extra[i] = 6e-6 * fabs((double)wref[i % D]) + (bias ? 2e-6 * fabs((double)bref[i % D]) : 0.0);
                CMP(what, og, (const float *)ho.data, n, 1e-7, 6e-6, extra);
            }
        }
        /* a shape error is refused on the device too */
        lh_tensor gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, D)), go = on_gpu(kt_t2(LH_DTYPE_F32, dout, M, D));
        lh_tensor gw2 = on_gpu(kt_t1(LH_DTYPE_F32, dx, D + 1));
        EXPECT_ST(e.g, lh_k_layernorm(e.g, &gx, &gw2, NULL, eps, &go), LH_E_USAGE);
        env_drop(&e);
        free(x);
        free(xc);
        free(oc);
        free(og);
        free(wref);
        free(bref);
        free(extra);
        free(w);
        free(b);
    }
    env_close(&e);
}

/* gelu, gelu_tanh and gelu_mul: the same formulas without FMA on both sides; only erff / tanhf
 * may differ by an ulp or two (scaled by 0.5 |x| where 1 + erf / 1 + tanh cancels), so 1e-6
 * relative + 2.5e-7 |x| (|gate * up| for gelu_mul). Out separate and in place (gelu_mul: over
 * gate and over up). */
static void test_gpu_gelus(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2201);
    static const int64_t Is[2] = {1000, 4097};
    const int64_t M = 3;
    for (int si = 0; si < 2; si++) {
        const int64_t I = Is[si], n = M * I;
        float *gate = xcalloc((size_t)n, sizeof(float)), *up = xcalloc((size_t)n, sizeof(float));
        float *gc = xcalloc((size_t)n, sizeof(float)), *uc = xcalloc((size_t)n, sizeof(float));
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        double *ex1 = xcalloc((size_t)n, sizeof(double)), *ex2 = xcalloc((size_t)n, sizeof(double));
        fill_uniform(gate, n, 8.0f);
        fill_uniform(up, n, 3.0f);
        for (int64_t i = 0; i < n; i++) {
            ex1[i] = 2.5e-7 * fabs((double)gate[i]);
            ex2[i] = 2.5e-7 * fabs((double)gate[i] * up[i]);
        }
        void *dg = dnew(&e, (size_t)n * 4), *du = dnew(&e, (size_t)n * 4), *dout = dnew(&e, (size_t)n * 4);
        for (int k = 0; k < 3; k++)
            for (int cs = 0; cs < (k == 2 ? 3 : 2); cs++) {
                static const char *const names[3] = {"gelu", "gelu_tanh", "gelu_mul"};
                memcpy(gc, gate, (size_t)n * sizeof(float));
                memcpy(uc, up, (size_t)n * sizeof(float));
                if (!dset(&e, LH_DTYPE_F32, dg, gate, n) || !dset(&e, LH_DTYPE_F32, du, up, n))
                    continue;
                lh_tensor hg = kt_t2(LH_DTYPE_F32, gc, M, I), hu = kt_t2(LH_DTYPE_F32, uc, M, I);
                lh_tensor gg = on_gpu(kt_t2(LH_DTYPE_F32, dg, M, I));
                lh_tensor gu = on_gpu(kt_t2(LH_DTYPE_F32, du, M, I));
                lh_tensor ho = cs == 1 ? hg : cs == 2 ? hu : kt_t2(LH_DTYPE_F32, oc, M, I);
                lh_tensor go = cs == 1 ? gg : cs == 2 ? gu : on_gpu(kt_t2(LH_DTYPE_F32, dout, M, I));
                char what[96];
                snprintf(what, sizeof what, "%s I %lld%s", names[k], (long long)I,
                         cs == 1 ? " out == x" : cs == 2 ? " out == up" : "");
                bool ok;
                if (k == 0)
                    ok = OK(e.c, lh_k_gelu(e.c, &hg, &ho)) && OK(e.g, lh_k_gelu(e.g, &gg, &go));
                else if (k == 1)
                    ok = OK(e.c, lh_k_gelu_tanh(e.c, &hg, &ho)) &&
                         OK(e.g, lh_k_gelu_tanh(e.g, &gg, &go));
                else
                    ok = OK(e.c, lh_k_gelu_mul(e.c, &hg, &hu, &ho)) &&
                         OK(e.g, lh_k_gelu_mul(e.g, &gg, &gu, &go));
                if (ok && dget(&e, LH_DTYPE_F32, og, go.data, n))
                    CMP(what, og, (const float *)ho.data, n, 1e-12, 1e-6, k == 2 ? ex2 : ex1);
            }
        env_drop(&e);
        free(gate);
        free(up);
        free(gc);
        free(uc);
        free(oc);
        free(og);
        free(ex1);
        free(ex2);
    }
    env_close(&e);
}

/* softcap: cap * tanhf(x / cap), only tanhf may differ (1e-6 relative); add: one f32 addition
 * per element, bit-identical (also y == x). */
static void test_gpu_softcap_add(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2301);
    static const int64_t ns[3] = {1, 1000, 70001};
    static const float caps[2] = {30.0f, 0.5f};
    for (int si = 0; si < 3; si++) {
        const int64_t n = ns[si];
        float *x = xcalloc((size_t)n, sizeof(float)), *y = xcalloc((size_t)n, sizeof(float));
        float *xc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        fill_uniform(x, n, 100.0f);
        fill_uniform(y, n, 10.0f);
        void *dx = dnew(&e, (size_t)n * 4), *dy = dnew(&e, (size_t)n * 4);
        for (int ci = 0; ci < 2; ci++) {
            memcpy(xc, x, (size_t)n * sizeof(float));
            lh_tensor hx = kt_t1(LH_DTYPE_F32, xc, n), gx = on_gpu(kt_t1(LH_DTYPE_F32, dx, n));
            char what[64];
            snprintf(what, sizeof what, "softcap n %lld cap %g", (long long)n, (double)caps[ci]);
            if (dset(&e, LH_DTYPE_F32, dx, x, n) && OK(e.c, lh_k_softcap(e.c, &hx, caps[ci])) &&
                OK(e.g, lh_k_softcap(e.g, &gx, caps[ci])) && dget(&e, LH_DTYPE_F32, og, dx, n))
                CMP(what, og, xc, n, 1e-12, 1e-6, NULL);
        }
        /* y += x, then x += x */
        memcpy(xc, y, (size_t)n * sizeof(float));
        lh_tensor hy = kt_t1(LH_DTYPE_F32, xc, n), hx = kt_t1(LH_DTYPE_F32, x, n);
        lh_tensor gy = on_gpu(kt_t1(LH_DTYPE_F32, dy, n)), gx = on_gpu(kt_t1(LH_DTYPE_F32, dx, n));
        char what[64];
        snprintf(what, sizeof what, "add n %lld", (long long)n);
        if (dset(&e, LH_DTYPE_F32, dx, x, n) && dset(&e, LH_DTYPE_F32, dy, y, n) &&
            OK(e.c, lh_k_add(e.c, &hy, &hx)) && OK(e.g, lh_k_add(e.g, &gy, &gx)) &&
            dget(&e, LH_DTYPE_F32, og, dy, n))
            CMP(what, og, xc, n, 0.0, 0.0, NULL);
        snprintf(what, sizeof what, "add n %lld y == x", (long long)n);
        if (OK(e.c, lh_k_add(e.c, &hx, &hx)) && OK(e.g, lh_k_add(e.g, &gx, &gx)) &&
            dget(&e, LH_DTYPE_F32, og, dx, n))
            CMP(what, og, x, n, 0.0, 0.0, NULL);
        EXPECT_ST(e.g, lh_k_softcap(e.g, &gx, 0.0f), LH_E_USAGE);
        env_drop(&e);
        free(x);
        free(y);
        free(xc);
        free(og);
    }
    env_close(&e);
}

/* exact: out[i] += table[ids[i]] adds the same widened value on both devices */
static void test_gpu_embedding_add(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2401);
    const int64_t V = 500, D = 130, n = 13;
    static const int32_t ids[13] = {0, 499, 7, 7, 250, 1, 498, 3, 100, 200, 300, 400, 0};
    static const lh_dtype dts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    void *table = xcalloc((size_t)(V * D), sizeof(float));
    float *ref = xcalloc((size_t)(V * D), sizeof(float)), *out0 = xcalloc((size_t)(n * D), sizeof(float));
    float *oc = xcalloc((size_t)(n * D), sizeof(float)), *og = xcalloc((size_t)(n * D), sizeof(float));
    fill_uniform(out0, n * D, 5.0f);
    for (int di = 0; di < 3; di++) {
        const lh_dtype dt = dts[di];
        kt_fill_w(dt, table, ref, V * D, 3.0f);
        void *dtab = dput(&e, dt, table, V * D);
        void *dout = dnew(&e, (size_t)(n * D) * sizeof(float));
        lh_tensor ht = kt_t2(dt, table, V, D), ho = kt_t2(LH_DTYPE_F32, oc, n, D);
        lh_tensor gt = on_gpu(kt_t2(dt, dtab, V, D)), go = on_gpu(kt_t2(LH_DTYPE_F32, dout, n, D));
        for (int64_t nn = 1; nn <= n; nn += n - 1) {
            ho.shape[0] = go.shape[0] = nn;
            memcpy(oc, out0, (size_t)(n * D) * sizeof(float));
            char what[64];
            snprintf(what, sizeof what, "embedding_add %s n %lld", dt_name(dt), (long long)nn);
            if (dset(&e, LH_DTYPE_F32, dout, out0, nn * D) &&
                OK(e.c, lh_k_embedding_add(e.c, &ht, ids, nn, &ho)) &&
                OK(e.g, lh_k_embedding_add(e.g, &gt, ids, nn, &go)) &&
                dget(&e, LH_DTYPE_F32, og, dout, nn * D))
                CMP(what, og, oc, nn * D, 0.0, 0.0, NULL);
        }
        /* an id outside the table is refused on the device too */
        const int32_t bad[2] = {3, (int32_t)V};
        go.shape[0] = 2;
        EXPECT_ST(e.g, lh_k_embedding_add(e.g, &gt, bad, 2, &go), LH_E_USAGE);
        env_drop(&e);
    }
    free(table);
    free(ref);
    free(out0);
    free(oc);
    free(og);
    env_close(&e);
}

/* 1e-5 relative; 1e-4 for the 151936-wide rows (f32 sums of 150k terms in another order). Some
 * rows hold -inf entries (masked), which must come out as exact zeros. */
static void test_gpu_softmax(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(606);
    static const int64_t Ns[4] = {1, 7, 1000, 151936};
    const int64_t M = 3;
    for (int si = 0; si < 4; si++) {
        const int64_t N = Ns[si], n = M * N;
        float *x = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        fill_uniform(x, n, 10.0f);
        for (int64_t i = 1; i < N; i += 7)
            x[N + i] = -INFINITY; /* row 1: masked entries (its entry 0 stays finite) */
        void *dx = dput(&e, LH_DTYPE_F32, x, n);
        lh_tensor hx = kt_t2(LH_DTYPE_F32, x, M, N), gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, N));
        char what[64];
        snprintf(what, sizeof what, "softmax N %lld", (long long)N);
        if (OK(e.c, lh_k_softmax(e.c, &hx)) && OK(e.g, lh_k_softmax(e.g, &gx)) &&
            dget(&e, LH_DTYPE_F32, og, dx, n))
            CMP(what, og, x, n, 1e-30, N > 4096 ? 1e-4 : 1e-5, NULL);
        env_drop(&e);
        free(x);
        free(og);
    }
    env_close(&e);
}

/* exact ids: first index on ties */
static void test_gpu_argmax(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(707);
    static const int64_t Ns[4] = {1, 7, 1000, 151936};
    const int64_t M = 5;
    for (int si = 0; si < 4; si++) {
        const int64_t N = Ns[si], n = M * N;
        float *x = xcalloc((size_t)n, sizeof(float));
        fill_uniform(x, n, 4.0f);
        /* row 1: a tie of two maxima; row 2: all equal; row 3: -inf entries, max near the end;
         * row 4: all negative */
        if (N > 1) {
            const int64_t i1 = N / 3, i2 = N - 1;
            x[N + i1] = x[N + i2] = 9.0f;
        }
        for (int64_t i = 0; i < N; i++)
            x[2 * N + i] = 0.5f;
        for (int64_t i = 0; i < N; i += 3)
            x[3 * N + i] = -INFINITY;
        x[3 * N + (N > 2 ? N - 2 : 0)] = 7.0f;
        for (int64_t i = 0; i < N; i++)
            x[4 * N + i] = -5.0f - fabsf(x[4 * N + i]);
        int32_t ic[5] = {-1, -1, -1, -1, -1}, ig[5] = {-2, -2, -2, -2, -2};
        void *dx = dput(&e, LH_DTYPE_F32, x, n);
        lh_tensor hx = kt_t2(LH_DTYPE_F32, x, M, N), gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, N));
        char what[64];
        snprintf(what, sizeof what, "argmax N %lld", (long long)N);
        if (OK(e.c, lh_k_argmax(e.c, &hx, ic)) && OK(e.g, lh_k_argmax(e.g, &gx, ig))) {
            CMP_IDS(what, ig, ic, M);
            CU_ASSERT_EQUAL(ig[1], N > 1 ? (int32_t)(N / 3) : 0);
            CU_ASSERT_EQUAL(ig[2], 0);
        }
        env_drop(&e);
        free(x);
    }
    env_close(&e);
}

/* exact (same rounding: nearest even, NaN stays NaN, overflow to infinity), except that any
 * NaN matches any NaN (payloads may differ) */
static void test_gpu_convert(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(808);
    const int64_t R = 7, C = 149, n = R * C;
    float *f = xcalloc((size_t)n, sizeof(float));
    uint16_t *bf = xcalloc((size_t)n, sizeof(uint16_t)), *hf = xcalloc((size_t)n, sizeof(uint16_t));
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN,
                                    1e-40f, -1e-40f, 65504.0f, 65519.0f, 65520.0f, 70000.0f,
                                    -70000.0f, 1e-8f, 6e-8f, 3e-8f, 5.9604645e-8f,
                                    1.00390625f /* 1 + 2^-8: bf16 tie */,
                                    1.01171875f /* 1 + 3 * 2^-8: bf16 tie, rounds up */,
                                    1.00048828125f /* 1 + 2^-11: f16 tie */,
                                    1.00146484375f /* 1 + 3 * 2^-11 */, 3.0e38f, -3.4e38f,
                                    6.1035156e-05f, 6.0975552e-05f};
    const int64_t ns = (int64_t)(sizeof special / sizeof special[0]);
    for (int64_t i = 0; i < n; i++) {
        if (i < ns)
            f[i] = special[i];
        else
            f[i] = ldexpf(kt_uniform(), (int)(kt_u64() % 70) - 35);
        /* 16-bit sources: every other element an arbitrary bit pattern (NaNs, subnormals) */
        if (i % 2 && i >= ns) {
            bf[i] = (uint16_t)kt_u64();
            hf[i] = (uint16_t)kt_u64();
        } else {
            bf[i] = lh_k_f32_to_bf16(f[i]);
            hf[i] = lh_k_f32_to_f16(f[i]);
        }
    }
    static const lh_dtype dirs[6][2] = {
        {LH_DTYPE_F32, LH_DTYPE_BF16}, {LH_DTYPE_F32, LH_DTYPE_F16},
        {LH_DTYPE_BF16, LH_DTYPE_F32}, {LH_DTYPE_F16, LH_DTYPE_F32},
        {LH_DTYPE_BF16, LH_DTYPE_F16}, {LH_DTYPE_F16, LH_DTYPE_BF16},
    };
    void *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
    for (int di = 0; di < 6; di++) {
        const lh_dtype sdt = dirs[di][0], ddt = dirs[di][1];
        const void *src = sdt == LH_DTYPE_F32 ? (const void *)f : sdt == LH_DTYPE_BF16 ? (const void *)bf : (const void *)hf;
        memset(oc, 0, (size_t)n * sizeof(float));
        memset(og, 0, (size_t)n * sizeof(float));
        void *ds = dput(&e, sdt, src, n), *dd = dnew(&e, (size_t)n * dt_size(ddt));
        lh_tensor hs = kt_t2(sdt, (void *)src, R, C), hd = kt_t2(ddt, oc, R, C);
        lh_tensor gs = on_gpu(kt_t2(sdt, ds, R, C)), gd = on_gpu(kt_t2(ddt, dd, R, C));
        char what[64];
        snprintf(what, sizeof what, "convert %s -> %s", dt_name(sdt), dt_name(ddt));
        if (OK(e.c, lh_k_convert(e.c, &hs, &hd)) && OK(e.g, lh_k_convert(e.g, &gs, &gd)) &&
            dget(&e, ddt, og, dd, n))
            CMP_BITS(what, ddt, og, oc, n);
        env_drop(&e);
    }
    free(f);
    free(bf);
    free(hf);
    free(oc);
    free(og);
    env_close(&e);
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

static lh_rope_scaling scaling_of(const char *kind)
{
    lh_rope_scaling s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    return s;
}

/* 1e-5 absolute on inputs in [-1, 1): the angle is float(pos) * inv_freq in f32 on both sides,
 * its cosine and sine may differ in the last bits. Every case in both pair layouts: rotate_half
 * and interleaved (rope.interleaved: dims 2i, 2i + 1). */
static void test_gpu_rope(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(909);
    struct rcase {
        const char *name;
        lh_rope_scaling s;
        int64_t rd, D, max_pos;
        double theta;
        int dyn; /* 1: positions past max_pos (seq_len 200), 2: below it */
    } cases[11];
    memset(cases, 0, sizeof cases);
    cases[0] = (struct rcase){"default", scaling_of(NULL), 64, 64, 4096, 10000.0, 0};
    cases[1] = (struct rcase){"partial rotary", scaling_of("default"), 48, 80, 4096, 10000.0, 0};
    cases[2] = (struct rcase){"linear", scaling_of("linear"), 64, 64, 4096, 10000.0, 0};
    cases[2].s.factor = 2.0;
    cases[3] = (struct rcase){"dynamic past max", scaling_of("dynamic"), 32, 32, 64, 10000.0, 1};
    cases[3].s.factor = 2.0;
    cases[4] = (struct rcase){"dynamic below max", scaling_of("dynamic"), 32, 32, 64, 10000.0, 2};
    cases[4].s.factor = 2.0;
    cases[5] = (struct rcase){"llama3", scaling_of("llama3"), 128, 128, 131072, 500000.0, 0};
    cases[5].s.factor = 8;
    cases[5].s.low_freq_factor = 1;
    cases[5].s.high_freq_factor = 4;
    cases[5].s.original_max_position_embeddings = 8192;
    cases[6] = (struct rcase){"yarn", scaling_of("yarn"), 64, 64, 16384, 10000.0, 0};
    cases[6].s.factor = 4;
    cases[6].s.original_max_position_embeddings = 4096;
    cases[7] = (struct rcase){"yarn mscale", scaling_of("yarn"), 32, 32, 163840, 10000.0, 0};
    cases[7].s.factor = 40;
    cases[7].s.original_max_position_embeddings = 4096;
    cases[7].s.mscale = 0.707;
    cases[7].s.mscale_all_dim = 1.0;
    cases[8] = (struct rcase){"yarn partial", scaling_of("yarn"), 16, 24, 8192, 1000000.0, 0};
    cases[8].s.factor = 2;
    cases[8].s.original_max_position_embeddings = 4096;
    /* longrope with partial rotary (16 of 24 dims: 8 factors), original 64: seq_len 200
     * takes the long table, 64 the short one */
    static const double lr_short[8] = {1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0};
    static const double lr_long[8] = {1.2, 1.9, 3.1, 5.3, 8.7, 13.9, 22.4, 35.0};
    for (int li = 0; li < 2; li++) {
        struct rcase *lc = &cases[9 + li];
        *lc = (struct rcase){li ? "longrope partial, long" : "longrope partial, short",
                             scaling_of("longrope"), 16, 24, 1024, 10000.0, li ? 1 : 2};
        lc->s.short_factor = lr_short;
        lc->s.long_factor = lr_long;
        lc->s.n_factors = 8;
        lc->s.original_max_position_embeddings = 64;
    }
    static const int32_t pos_any[7] = {0, 1, 2, 17, 500, 4095, 9000};
    static const int32_t pos_hi[7] = {0, 1, 63, 64, 150, 198, 199};
    static const int32_t pos_lo[7] = {0, 1, 2, 17, 40, 62, 63};
    const int64_t T = 7, H = 3;
    for (int cj = 0; cj < 22; cj++) {
        const struct rcase *rc = &cases[cj % 11];
        const bool inter = cj >= 11;
        lh_rope r;
        const lh_rope_scaling *sp = rc->s.kind ? &rc->s : NULL;
        if (!OK(NULL, lh_k_rope_init(&r, rc->rd, rc->theta, sp, rc->max_pos)))
            continue;
        r.interleaved = inter;
        const int32_t *pos = rc->dyn == 1 ? pos_hi : rc->dyn == 2 ? pos_lo : pos_any;
        const int64_t seq_len = (int64_t)pos[T - 1] + 1;
        const int64_t D = rc->D, n = T * H * D;
        float *x = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        fill_uniform(x, n, 1.0f);
        void *dx = dput(&e, LH_DTYPE_F32, x, n);
        lh_tensor hx = kt_t3(LH_DTYPE_F32, x, T, H, D), gx = on_gpu(kt_t3(LH_DTYPE_F32, dx, T, H, D));
        char what[96];
        snprintf(what, sizeof what, "rope_apply %s (rotary %lld of %lld)%s", rc->name,
                 (long long)rc->rd, (long long)D, inter ? ", interleaved" : "");
        if (OK(e.c, lh_k_rope_apply(e.c, &r, &hx, pos, seq_len)) &&
            OK(e.g, lh_k_rope_apply(e.g, &r, &gx, pos, seq_len)) &&
            dget(&e, LH_DTYPE_F32, og, dx, n))
            CMP(what, og, x, n, 1e-5, 0.0, NULL);
        env_drop(&e);
        lh_k_rope_free(&r);
        free(x);
        free(og);
    }
    env_close(&e);
}

/* ---- attention over a contiguous cache ------------------------------------------------------ */

/* 1e-5 absolute (q, k, v in [-1, 1)). v may have its own head dim Dv (MLA without absorption:
 * q and k 192 = 128 + 64 rope dims, v 128). */
static void test_gpu_attention(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1111);
    static const struct {
        int64_t T, S, H, KVH, D, window, first_pos; /* query t at first_pos + t */
        int64_t Dv;                                 /* 0: D */
    } cases[8] = {
        {1, 300, 8, 8, 64, 0, 299, 0},   /* decode */
        {5, 40, 8, 2, 128, 0, 35, 0},    /* GQA, a short continuation */
        {20, 100, 4, 1, 64, 16, 80, 0},  /* sliding window, MQA */
        {7, 7, 6, 3, 80, 0, 0, 0},       /* prefill, head_dim 80 */
        {1, 2000, 4, 2, 64, 0, 1999, 0}, /* a long decode */
        {33, 600, 8, 2, 64, 128, 567, 0},
        {6, 50, 8, 8, 192, 0, 44, 128},  /* MLA prefill: D 192, Dv 128 */
        {1, 333, 16, 16, 192, 0, 332, 128},
    };
    for (int ci = 0; ci < 8; ci++) {
        const int64_t T = cases[ci].T, S = cases[ci].S, H = cases[ci].H, KVH = cases[ci].KVH;
        const int64_t D = cases[ci].D, Dv = cases[ci].Dv ? cases[ci].Dv : D;
        const int64_t nq = T * H * D, nk = S * KVH * D, nv = S * KVH * Dv, no = T * H * Dv;
        float *q = xcalloc((size_t)nq, sizeof(float)), *k = xcalloc((size_t)nk, sizeof(float));
        float *v = xcalloc((size_t)nv, sizeof(float));
        float *oc = xcalloc((size_t)no, sizeof(float)), *og = xcalloc((size_t)no, sizeof(float));
        int32_t *qp = xcalloc((size_t)T, sizeof(int32_t));
        fill_uniform(q, nq, 1.0f);
        fill_uniform(k, nk, 1.0f);
        fill_uniform(v, nv, 1.0f);
        for (int64_t t = 0; t < T; t++)
            qp[t] = (int32_t)(cases[ci].first_pos + t);
        void *dq = dput(&e, LH_DTYPE_F32, q, nq), *dk = dput(&e, LH_DTYPE_F32, k, nk);
        void *dv = dput(&e, LH_DTYPE_F32, v, nv), *dout = dnew(&e, (size_t)no * sizeof(float));
        lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D), hk = kt_t3(LH_DTYPE_F32, k, S, KVH, D);
        lh_tensor hv = kt_t3(LH_DTYPE_F32, v, S, KVH, Dv), ho = kt_t3(LH_DTYPE_F32, oc, T, H, Dv);
        lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
        lh_tensor gk = on_gpu(kt_t3(LH_DTYPE_F32, dk, S, KVH, D));
        lh_tensor gv = on_gpu(kt_t3(LH_DTYPE_F32, dv, S, KVH, Dv));
        lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, Dv));
        const float scale = 1.0f / sqrtf((float)D);
        char what[160];
        snprintf(what, sizeof what,
                 "attention T %lld S %lld H %lld KVH %lld D %lld Dv %lld window %lld",
                 (long long)T, (long long)S, (long long)H, (long long)KVH, (long long)D,
                 (long long)Dv, (long long)cases[ci].window);
        const int64_t w = cases[ci].window;
        if (OK(e.c, lh_k_attention(e.c, &hq, &hk, &hv, qp, scale, 0.0f, w, &ho)) &&
            OK(e.g, lh_k_attention(e.g, &gq, &gk, &gv, qp, scale, 0.0f, w, &go)) &&
            dget(&e, LH_DTYPE_F32, og, dout, no))
            CMP(what, og, oc, no, 1e-5, 0.0, NULL);
        env_drop(&e);
        free(q);
        free(k);
        free(v);
        free(oc);
        free(og);
        free(qp);
    }
    env_close(&e);
}

/* lh_k_attention_positions: a ring of S slots holding the latest positions (slot order
 * shuffled, some slots empty with NaN values that must not leak), sliding windows and sinks,
 * and a query that sees nothing (zeros). Against the CPU: 1e-5 absolute (|v| <= 1). */
static void test_gpu_attention_positions(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1212);
    static const struct {
        int64_t T, S, H, KVH, D, Dv, window, sinks, next; /* positions 0..next-1 written */
    } cases[5] = {
        {1, 64, 8, 2, 64, 64, 64, 0, 500},   /* decode over a full ring */
        {5, 40, 4, 1, 128, 128, 16, 4, 77},  /* window + sinks, prefill */
        {3, 50, 6, 3, 80, 48, 0, 0, 20},     /* partly empty ring, Dv differs */
        {2, 33, 4, 4, 256, 256, 8, 0, 1000}, /* Gemma head_dim 256 */
        {1, 16, 2, 1, 32, 32, 1, 0, 3},      /* window 1 at a position nobody holds: zeros */
    };
    for (int ci = 0; ci < 5; ci++) {
        const int64_t T = cases[ci].T, S = cases[ci].S, H = cases[ci].H, KVH = cases[ci].KVH;
        const int64_t D = cases[ci].D, Dv = cases[ci].Dv, nq = T * H * D, nk = S * KVH * D;
        const int64_t nv = S * KVH * Dv, no = T * H * Dv, sinks = cases[ci].sinks;
        float *q = xcalloc((size_t)nq, sizeof(float)), *k = xcalloc((size_t)nk, sizeof(float));
        float *v = xcalloc((size_t)nv, sizeof(float));
        float *oc = xcalloc((size_t)no, sizeof(float)), *og = xcalloc((size_t)no, sizeof(float));
        int32_t *qp = xcalloc((size_t)T, sizeof(int32_t)), *kp = xcalloc((size_t)S, sizeof(int32_t));
        fill_uniform(q, nq, 1.0f);
        fill_uniform(k, nk, 1.0f);
        fill_uniform(v, nv, 1.0f);
        for (int64_t s = 0; s < S; s++)
            kp[s] = -1;
        const int64_t ns = sinks < S ? sinks : 0;
        for (int64_t p = 0; p < cases[ci].next; p++)
            kp[p < ns ? p : ns + (p - ns) % (S - ns)] = (int32_t)p;
        for (int64_t s = S - 1; s > 0; s--) {
            const int64_t r = (int64_t)(kt_u64() % (uint64_t)(s + 1));
            const int32_t tmp = kp[s];
            kp[s] = kp[r];
            kp[r] = tmp;
        }
        for (int64_t s = 0; s < S; s++)
            if (kp[s] < 0)
                for (int64_t j = 0; j < KVH * Dv; j++)
                    v[s * KVH * Dv + j] = NAN;
        for (int64_t t = 0; t < T; t++)
            qp[t] = (int32_t)(cases[ci].next - T + t);
        if (ci == 4)
            qp[0] = 7; /* no slot holds 7 (only 0, 1, 2 were written) */
        void *dq = dput(&e, LH_DTYPE_F32, q, nq), *dk = dput(&e, LH_DTYPE_F32, k, nk);
        void *dv = dput(&e, LH_DTYPE_F32, v, nv), *dout = dnew(&e, (size_t)no * sizeof(float));
        lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D), hk = kt_t3(LH_DTYPE_F32, k, S, KVH, D);
        lh_tensor hv = kt_t3(LH_DTYPE_F32, v, S, KVH, Dv), ho = kt_t3(LH_DTYPE_F32, oc, T, H, Dv);
        lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
        lh_tensor gk = on_gpu(kt_t3(LH_DTYPE_F32, dk, S, KVH, D));
        lh_tensor gv = on_gpu(kt_t3(LH_DTYPE_F32, dv, S, KVH, Dv));
        lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, Dv));
        const float scale = 1.0f / sqrtf((float)D);
        const int64_t w = cases[ci].window;
        char what[160];
        snprintf(what, sizeof what,
                 "attention_positions T %lld S %lld H %lld KVH %lld D %lld Dv %lld window %lld "
                 "sinks %lld", (long long)T, (long long)S, (long long)H, (long long)KVH,
                 (long long)D, (long long)Dv, (long long)w, (long long)sinks);
        if (OK(e.c, lh_k_attention_positions(e.c, &hq, &hk, &hv, qp, kp, scale, 0.0f, w, sinks,
                                             &ho)) &&
            OK(e.g, lh_k_attention_positions(e.g, &gq, &gk, &gv, qp, kp, scale, 0.0f, w, sinks,
                                             &go)) &&
            dget(&e, LH_DTYPE_F32, og, dout, no)) {
            CMP(what, og, oc, no, 1e-5, 0.0, NULL);
            if (ci == 4)
                for (int64_t i = 0; i < no; i++)
                    CU_ASSERT_EQUAL(og[i], 0.0f);
        }
        env_drop(&e);
        free(q);
        free(k);
        free(v);
        free(oc);
        free(og);
        free(qp);
        free(kp);
    }
    env_close(&e);
}

/* Attention-logit soft-capping (Gemma 2) in the GPU's attention kernel, both entry points, on
 * inputs where the cap matters (q scaled by 12: raw scores up to about +-15; caps 2 and 5):
 * decode, GQA prefill, a sliding window, a long decode, a ring with sinks and empty slots.
 * Against the CPU: 1e-5 absolute (|v| <= 1; the capped scores stay within +-cap). */
static void test_gpu_attention_softcap(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1313);
    static const struct {
        int64_t T, S, H, KVH, D, window, sinks;
        bool ring; /* lh_k_attention_positions over a shuffled ring; else lh_k_attention */
    } cases[6] = {
        {1, 300, 8, 2, 64, 0, 0, false},    /* decode */
        {20, 100, 4, 1, 64, 16, 0, false},  /* prefill, sliding window, MQA */
        {7, 7, 6, 3, 80, 0, 0, false},      /* prefill from 0 */
        {1, 2000, 4, 2, 128, 0, 0, false},  /* a long decode */
        {3, 40, 4, 2, 256, 16, 4, true},    /* ring: window + sinks, head_dim 256 */
        {1, 64, 8, 4, 64, 0, 0, true},      /* ring, partly empty */
    };
    static const float caps[2] = {2.0f, 5.0f};
    for (int ci = 0; ci < 6; ci++)
        for (int cj = 0; cj < 2; cj++) {
            const int64_t T = cases[ci].T, S = cases[ci].S, H = cases[ci].H;
            const int64_t KVH = cases[ci].KVH, D = cases[ci].D, nq = T * H * D, nk = S * KVH * D;
            const bool ring = cases[ci].ring;
            float *q = xcalloc((size_t)nq, sizeof(float)), *k = xcalloc((size_t)nk, sizeof(float));
            float *v = xcalloc((size_t)nk, sizeof(float));
            float *oc = xcalloc((size_t)nq, sizeof(float));
            float *og = xcalloc((size_t)nq, sizeof(float));
            int32_t *qp = xcalloc((size_t)T, sizeof(int32_t));
            int32_t *kp = xcalloc((size_t)S, sizeof(int32_t));
            fill_uniform(q, nq, 12.0f);
            fill_uniform(k, nk, 1.0f);
            fill_uniform(v, nk, 1.0f);
            /* the ring holds positions 0..next-1 (its first `sinks` slots the sinks), shuffled;
             * case 5 has written only 40 of its 64 slots (NaN values in the empty ones) */
            const int64_t next = ring ? (ci == 5 ? 40 : 77) : S, ns = cases[ci].sinks;
            for (int64_t s = 0; s < S; s++)
                kp[s] = ring ? -1 : (int32_t)s;
            if (ring) {
                for (int64_t p = 0; p < next; p++)
                    kp[p < ns ? p : ns + (p - ns) % (S - ns)] = (int32_t)p;
                for (int64_t s = S - 1; s > 0; s--) {
                    const int64_t r = (int64_t)(kt_u64() % (uint64_t)(s + 1));
                    const int32_t tmp = kp[s];
                    kp[s] = kp[r];
                    kp[r] = tmp;
                }
                for (int64_t s = 0; s < S; s++)
                    if (kp[s] < 0)
                        for (int64_t j = 0; j < KVH * D; j++)
                            v[s * KVH * D + j] = NAN;
            }
            for (int64_t t = 0; t < T; t++)
                qp[t] = (int32_t)(next - T + t);
            void *dq = dput(&e, LH_DTYPE_F32, q, nq), *dk = dput(&e, LH_DTYPE_F32, k, nk);
            void *dv = dput(&e, LH_DTYPE_F32, v, nk), *dout = dnew(&e, (size_t)nq * sizeof(float));
            lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D), hk = kt_t3(LH_DTYPE_F32, k, S, KVH, D);
            lh_tensor hv = kt_t3(LH_DTYPE_F32, v, S, KVH, D), ho = kt_t3(LH_DTYPE_F32, oc, T, H, D);
            lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
            lh_tensor gk = on_gpu(kt_t3(LH_DTYPE_F32, dk, S, KVH, D));
            lh_tensor gv = on_gpu(kt_t3(LH_DTYPE_F32, dv, S, KVH, D));
            lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, D));
            const float scale = 1.0f / sqrtf((float)D), cap = caps[cj];
            const int64_t w = cases[ci].window;
            char what[160];
            snprintf(what, sizeof what,
                     "attention%s softcap %g T %lld S %lld H %lld KVH %lld D %lld window %lld",
                     ring ? "_positions" : "", (double)cap, (long long)T, (long long)S,
                     (long long)H, (long long)KVH, (long long)D, (long long)w);
            bool ran;
            if (ring)
                ran = OK(e.c, lh_k_attention_positions(e.c, &hq, &hk, &hv, qp, kp, scale, cap, w,
                                                       ns, &ho)) &&
                      OK(e.g, lh_k_attention_positions(e.g, &gq, &gk, &gv, qp, kp, scale, cap, w,
                                                       ns, &go));
            else
                ran = OK(e.c, lh_k_attention(e.c, &hq, &hk, &hv, qp, scale, cap, w, &ho)) &&
                      OK(e.g, lh_k_attention(e.g, &gq, &gk, &gv, qp, scale, cap, w, &go));
            if (ran && dget(&e, LH_DTYPE_F32, og, dout, nq))
                CMP(what, og, oc, nq, 1e-5, 0.0, NULL);
            env_drop(&e);
            free(q);
            free(k);
            free(v);
            free(oc);
            free(og);
            free(qp);
            free(kp);
        }
    env_close(&e);
}

/* ---- paged KV cache ------------------------------------------------------------------------- */

/* The pool the CPU writes (host), the one the GPU writes (device) and a host copy of the
 * latter. Both start as all-ones bytes (NaN in every dtype, scales and summaries too), so a
 * slot written by one side only shows. An aliased pool (gpool_alias) has v = k, one tensor
 * (multi-head latent attention): its writes pass v NULL. */
typedef struct gpool {
    lh_dtype kdt, vdt;
    lh_kv_layout lay;
    int64_t bs, KVH, D, NB, nel, nsc;
    bool sums, alias;
    void *hk, *hv, *gk, *gv;
    float *hks, *hvs, *hmin, *hmax, *gks, *gvs, *gmin, *gmax;
    void *dk, *dv, *dks, *dvs, *dmin, *dmax;
    lh_kv_pages hkv, dkv;
} gpool;

static void *ones_bytes(size_t bytes)
{
    void *p = xcalloc(bytes, 1);
    memset(p, 0xff, bytes);
    return p;
}

static void gpool_init(genv *e, gpool *p, lh_dtype kdt, lh_dtype vdt, lh_kv_layout lay,
                       int64_t bs, int64_t KVH, int64_t D, int64_t NB, bool sums)
{
    memset(p, 0, sizeof *p);
    p->kdt = kdt;
    p->vdt = vdt;
    p->lay = lay;
    p->bs = bs;
    p->KVH = KVH;
    p->D = D;
    p->NB = NB;
    p->sums = sums;
    p->nel = NB * bs * KVH * D;
    p->nsc = NB * KVH;
    const int64_t shape[4] = {NB, lay == LH_KV_NHD ? bs : KVH, lay == LH_KV_NHD ? KVH : bs, D};
    p->hk = ones_bytes((size_t)p->nel * dt_size(kdt));
    p->hv = ones_bytes((size_t)p->nel * dt_size(vdt));
    p->gk = ones_bytes((size_t)p->nel * dt_size(kdt));
    p->gv = ones_bytes((size_t)p->nel * dt_size(vdt));
    p->dk = dput(e, kdt, p->hk, p->nel);
    p->dv = dput(e, vdt, p->hv, p->nel);
    p->hkv.layout = p->dkv.layout = lay;
    p->hkv.k = lh_tensor_cpu(kdt, p->hk, 4, shape);
    p->hkv.v = lh_tensor_cpu(vdt, p->hv, 4, shape);
    p->dkv.k = on_gpu(lh_tensor_cpu(kdt, p->dk, 4, shape));
    p->dkv.v = on_gpu(lh_tensor_cpu(vdt, p->dv, 4, shape));
    const size_t ns = (size_t)p->nsc * sizeof(float);
    if (kdt == LH_DTYPE_FP8_E4M3) {
        p->hks = ones_bytes(ns);
        p->gks = ones_bytes(ns);
        p->dks = dput(e, LH_DTYPE_F32, p->hks, p->nsc);
        p->hkv.k_scale = kt_t2(LH_DTYPE_F32, p->hks, NB, KVH);
        p->dkv.k_scale = on_gpu(kt_t2(LH_DTYPE_F32, p->dks, NB, KVH));
    }
    if (vdt == LH_DTYPE_FP8_E4M3) {
        p->hvs = ones_bytes(ns);
        p->gvs = ones_bytes(ns);
        p->dvs = dput(e, LH_DTYPE_F32, p->hvs, p->nsc);
        p->hkv.v_scale = kt_t2(LH_DTYPE_F32, p->hvs, NB, KVH);
        p->dkv.v_scale = on_gpu(kt_t2(LH_DTYPE_F32, p->dvs, NB, KVH));
    }
    if (sums) {
        p->hmin = ones_bytes(ns * (size_t)D);
        p->hmax = ones_bytes(ns * (size_t)D);
        p->gmin = ones_bytes(ns * (size_t)D);
        p->gmax = ones_bytes(ns * (size_t)D);
        p->dmin = dput(e, LH_DTYPE_F32, p->hmin, p->nsc * D);
        p->dmax = dput(e, LH_DTYPE_F32, p->hmax, p->nsc * D);
        p->hkv.k_min = kt_t3(LH_DTYPE_F32, p->hmin, NB, KVH, D);
        p->hkv.k_max = kt_t3(LH_DTYPE_F32, p->hmax, NB, KVH, D);
        p->dkv.k_min = on_gpu(kt_t3(LH_DTYPE_F32, p->dmin, NB, KVH, D));
        p->dkv.k_max = on_gpu(kt_t3(LH_DTYPE_F32, p->dmax, NB, KVH, D));
    }
}

/* Makes an initialized pool of kdt == vdt one tensor: v (and its fp8 scales) become k's. */
static void gpool_alias(gpool *p)
{
    free(p->hv);
    free(p->gv);
    p->hv = p->hk;
    p->gv = p->gk;
    p->dv = p->dk;
    p->hkv.v = p->hkv.k;
    p->dkv.v = p->dkv.k;
    if (p->hks) {
        free(p->hvs);
        free(p->gvs);
        p->hvs = p->hks;
        p->gvs = p->gks;
        p->dvs = p->dks;
        p->hkv.v_scale = p->hkv.k_scale;
        p->dkv.v_scale = p->dkv.k_scale;
    }
    p->alias = true;
}

static void gpool_free(gpool *p)
{
    if (p->alias)
        p->hv = p->gv = NULL, p->hvs = p->gvs = NULL;
    free(p->hk);
    free(p->hv);
    free(p->gk);
    free(p->gv);
    free(p->hks);
    free(p->hvs);
    free(p->hmin);
    free(p->hmax);
    free(p->gks);
    free(p->gvs);
    free(p->gmin);
    free(p->gmax);
}

/* the GPU's pool into gk, gv, ... */
static bool gpool_pull(genv *e, gpool *p)
{
    bool ok = dget(e, p->kdt, p->gk, p->dk, p->nel) && dget(e, p->vdt, p->gv, p->dv, p->nel);
    if (p->hks)
        ok = ok && dget(e, LH_DTYPE_F32, p->gks, p->dks, p->nsc);
    if (p->hvs)
        ok = ok && dget(e, LH_DTYPE_F32, p->gvs, p->dvs, p->nsc);
    if (p->sums)
        ok = ok && dget(e, LH_DTYPE_F32, p->gmin, p->dmin, p->nsc * p->D) &&
             dget(e, LH_DTYPE_F32, p->gmax, p->dmax, p->nsc * p->D);
    return ok;
}

/* the CPU's pool onto the device, so both attend over the same values */
static bool gpool_push(genv *e, gpool *p)
{
    bool ok = dset(e, p->kdt, p->dk, p->hk, p->nel) && dset(e, p->vdt, p->dv, p->hv, p->nel);
    if (p->hks)
        ok = ok && dset(e, LH_DTYPE_F32, p->dks, p->hks, p->nsc);
    if (p->hvs)
        ok = ok && dset(e, LH_DTYPE_F32, p->dvs, p->hvs, p->nsc);
    if (p->sums)
        ok = ok && dset(e, LH_DTYPE_F32, p->dmin, p->hmin, p->nsc * p->D) &&
             dset(e, LH_DTYPE_F32, p->dmax, p->hmax, p->nsc * p->D);
    return ok;
}

static float pool_decode(lh_dtype dt, const void *base, const float *scales, int64_t idx,
                         int64_t sidx)
{
    switch (dt) {
    case LH_DTYPE_F32: return ((const float *)base)[idx];
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)base)[idx]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)base)[idx]);
    default: return lh_k_fp8_e4m3_to_f32(((const uint8_t *)base)[idx]) * scales[sidx];
    }
}

/* Pools after the same writes, decoded to f32. Without fused RoPE: f32 / bf16 / f16 exact; fp8
 * codes may differ by one step at rounding ties: 2^-3 relative + scale * 2^-9 (the smallest
 * subnormal step); scales 1e-6 relative; summaries exact. With fused RoPE the rotated keys may
 * differ in the last bits (cos/sin), which a rounding to the pool's dtype can turn into one
 * step of that dtype: keys then 1e-5 absolute plus one step (bf16 2^-7, f16 2^-10 relative),
 * scales 1e-5 relative, summaries 1e-5 absolute. */
static void gpool_compare(const gpool *p, bool rope, const char *what)
{
    acc ak = {0}, av = {0}, as = {0}, am = {0};
    for (int is_v = 0; is_v < (p->alias ? 1 : 2); is_v++) {
        const lh_dtype dt = is_v ? p->vdt : p->kdt;
        const void *hb = is_v ? p->hv : p->hk, *gb = is_v ? p->gv : p->gk;
        const float *hs = is_v ? p->hvs : p->hks, *gs = is_v ? p->gvs : p->gks;
        const bool rot = rope && !is_v;
        for (int64_t idx = 0; idx < p->nel; idx++) {
            const int64_t D = p->D, tok = idx / D;
            int64_t phys, h;
            if (p->lay == LH_KV_NHD) {
                h = tok % p->KVH;
                phys = tok / p->KVH / p->bs;
            } else {
                h = (tok / p->bs) % p->KVH;
                phys = tok / p->bs / p->KVH;
            }
            const int64_t sidx = phys * p->KVH + h;
            const float want = pool_decode(dt, hb, hs, idx, sidx);
            const float got = pool_decode(dt, gb, gs, idx, sidx);
            double tol = 0;
            const double a = fabs((double)want);
            switch (dt) {
            case LH_DTYPE_F32: tol = rot ? 1e-5 : 0; break;
            case LH_DTYPE_BF16: tol = rot ? 1e-5 + a / 128.0 : 0; break;
            case LH_DTYPE_F16: tol = rot ? 1e-5 + a / 1024.0 : 0; break;
            default:
                tol = a / 8.0 + (double)hs[sidx] / 512.0 + (rot ? 1e-5 : 0);
                break;
            }
            acc_add(is_v ? &av : &ak, idx, got, want, tol);
        }
        if (hs)
            for (int64_t i = 0; i < p->nsc; i++)
                acc_add(&as, i, gs[i], hs[i], (rot ? 1e-5 : 1e-6) * fabs((double)hs[i]));
    }
    if (p->sums)
        for (int64_t i = 0; i < p->nsc * p->D; i++) {
            acc_add(&am, i, p->gmin[i], p->hmin[i], rope ? 1e-5 : 0);
            acc_add(&am, i + p->nsc * p->D, p->gmax[i], p->hmax[i], rope ? 1e-5 : 0);
        }
    char w[256];
    snprintf(w, sizeof w, "%.200s: kv_write keys", what);
    ACC_REPORT(&ak, w);
    snprintf(w, sizeof w, "%.200s: kv_write values", what);
    ACC_REPORT(&av, w);
    snprintf(w, sizeof w, "%.200s: kv_write fp8 scales", what);
    ACC_REPORT(&as, w);
    snprintf(w, sizeof w, "%.200s: kv_write key summaries (min, then max)", what);
    ACC_REPORT(&am, w);
}

/* The batch: a long decode (flash-decoding splits), a short decode of three tokens, a chunked-
 * prefill continuation, a prefill from position 0 and a sequence with no new tokens, packed in
 * an order that differs from the sequence order; row 20 belongs to no sequence. */
#define PSEQS 5
#define P_T 37
static const int64_t P_KVLEN[PSEQS] = {300, 45, 10, 20, 530};
static const int64_t P_NNEW[PSEQS] = {1, 12, 0, 20, 3};
static const int64_t P_TOK0[PSEQS] = {21, 25, 0, 0, 22};

typedef struct pbatch {
    int64_t NB, KVH, D, bs, n_blocks[PSEQS], kv_len[PSEQS], n_new[PSEQS], tok0[PSEQS];
    int32_t *perm;
    const int32_t *tables[PSEQS];
    float *k[PSEQS], *v[PSEQS]; /* [kv_len, KVH, D] */
    int32_t pos[P_T];
} pbatch;

static void pbatch_init(pbatch *b, int64_t KVH, int64_t D, int64_t bs)
{
    memset(b, 0, sizeof *b);
    b->KVH = KVH;
    b->D = D;
    b->bs = bs;
    int64_t total = 0;
    for (int s = 0; s < PSEQS; s++) {
        b->kv_len[s] = P_KVLEN[s];
        b->n_new[s] = P_NNEW[s];
        b->tok0[s] = P_TOK0[s];
        b->n_blocks[s] = (P_KVLEN[s] + bs - 1) / bs;
        total += b->n_blocks[s];
    }
    b->NB = total + 3;
    b->perm = xcalloc((size_t)b->NB, sizeof(int32_t));
    for (int64_t i = 0; i < b->NB; i++)
        b->perm[i] = (int32_t)i;
    for (int64_t i = b->NB - 1; i > 0; i--) {
        const int64_t r = (int64_t)(kt_u64() % (uint64_t)(i + 1));
        const int32_t t = b->perm[i];
        b->perm[i] = b->perm[r];
        b->perm[r] = t;
    }
    for (int64_t i = 0; i < P_T; i++)
        b->pos[i] = -7;
    int64_t used = 0;
    for (int s = 0; s < PSEQS; s++) {
        b->tables[s] = b->perm + used;
        used += b->n_blocks[s];
        const int64_t m = b->kv_len[s] * KVH * D;
        b->k[s] = xcalloc((size_t)m, sizeof(float));
        b->v[s] = xcalloc((size_t)m, sizeof(float));
        /* keys scaled per block, so that the blocks' bounds (sparse selection) differ */
        for (int64_t blk = 0; blk < b->n_blocks[s]; blk++) {
            const float amp = kt_range(0.2f, 1.5f);
            const int64_t end = (blk + 1) * bs * KVH * D < m ? (blk + 1) * bs * KVH * D : m;
            for (int64_t i = blk * bs * KVH * D; i < end; i++)
                b->k[s][i] = kt_uniform() * amp;
        }
        fill_uniform(b->v[s], m, 2.0f);
        for (int64_t i = 0; i < b->n_new[s]; i++)
            b->pos[b->tok0[s] + i] = (int32_t)(b->kv_len[s] - b->n_new[s] + i);
    }
}

static void pbatch_free(pbatch *b)
{
    for (int s = 0; s < PSEQS; s++) {
        free(b->k[s]);
        free(b->v[s]);
    }
    free(b->perm);
}

/* Positions [from[s], to[s]) of every sequence: one lh_k_paged_kv_write_batch on each side,
 * rows packed in reverse sequence order. */
static bool pwrite(genv *e, gpool *p, const pbatch *b, const int64_t *from, const int64_t *to,
                   const lh_rope *rope, const char *what)
{
    const int64_t row = b->KVH * b->D;
    int64_t Tw = 0;
    for (int s = 0; s < PSEQS; s++)
        Tw += to[s] - from[s];
    if (Tw == 0)
        return true;
    float *kk = xcalloc((size_t)(Tw * row), sizeof(float));
    float *vv = xcalloc((size_t)(Tw * row), sizeof(float));
    int32_t *pos = xcalloc((size_t)Tw, sizeof(int32_t));
    int64_t tok[PSEQS], nn[PSEQS], len[PSEQS], r = 0;
    for (int s = PSEQS - 1; s >= 0; s--) {
        tok[s] = r;
        nn[s] = to[s] - from[s];
        len[s] = to[s];
        memcpy(kk + r * row, b->k[s] + from[s] * row, (size_t)(nn[s] * row) * sizeof(float));
        memcpy(vv + r * row, b->v[s] + from[s] * row, (size_t)(nn[s] * row) * sizeof(float));
        for (int64_t i = 0; i < nn[s]; i++)
            pos[r + i] = (int32_t)(from[s] + i);
        r += nn[s];
    }
    lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = PSEQS, .token_start = tok,
                         .n_new = nn, .kv_len = len, .positions = pos,
                         .block_tables = b->tables, .n_blocks = b->n_blocks};
    lh_tensor hk = kt_t3(LH_DTYPE_F32, kk, Tw, b->KVH, b->D);
    lh_tensor hv = kt_t3(LH_DTYPE_F32, vv, Tw, b->KVH, b->D);
    void *dkk = dput(e, LH_DTYPE_F32, kk, Tw * row), *dvv = dput(e, LH_DTYPE_F32, vv, Tw * row);
    lh_tensor gk = on_gpu(kt_t3(LH_DTYPE_F32, dkk, Tw, b->KVH, b->D));
    lh_tensor gv = on_gpu(kt_t3(LH_DTYPE_F32, dvv, Tw, b->KVH, b->D));
    /* an aliased pool: keys only */
    bool ok = OK(e->c, lh_k_paged_kv_write_batch(e->c, &p->hkv, &pb, &hk, p->alias ? NULL : &hv,
                                                 rope)) &&
              OK(e->g, lh_k_paged_kv_write_batch(e->g, &p->dkv, &pb, &gk, p->alias ? NULL : &gv,
                                                 rope));
    /* the keys given are not changed (fused RoPE rotates a private copy) */
    float *back = xcalloc((size_t)(Tw * row), sizeof(float));
    if (ok && rope && dget(e, LH_DTYPE_F32, back, dkk, Tw * row) &&
        memcmp(back, kk, (size_t)(Tw * row) * sizeof(float)) != 0)
        FAILF("%.200s: kv_write_batch with fused RoPE changed its input keys", what);
    free(back);
    free(kk);
    free(vv);
    free(pos);
    return ok;
}

/* Writes every sequence of b into p in three pieces (the first half of its cached context,
 * the rest of it, the step's new tokens) and compares the pool with the CPU's. */
static bool pwrite_in_pieces(genv *e, gpool *p, const pbatch *b, const lh_rope *rope,
                             const char *what)
{
    int64_t cut[4][PSEQS];
    for (int s = 0; s < PSEQS; s++) {
        const int64_t h = b->kv_len[s] - b->n_new[s];
        cut[0][s] = 0;
        cut[1][s] = h / 2;
        cut[2][s] = h;
        cut[3][s] = b->kv_len[s];
    }
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
        ok = pwrite(e, p, b, cut[i], cut[i + 1], rope, what);
    if (ok && gpool_pull(e, p))
        gpool_compare(p, rope != NULL, what);
    return ok;
}

#define SENTINEL 12345.0f

/* One configuration: history written in two pieces, then the step's new tokens; pools
 * compared; then the CPU's pool is copied to the device and both attend over it. Attention:
 * 1e-4 absolute (|v| < 2) for f32 / bf16 / f16 pools, 5e-4 when either is fp8. */
static void paged_case(genv *e, lh_dtype kdt, lh_dtype vdt, lh_kv_layout lay, int64_t bs,
                       int variant, bool bounds)
{
    static const char *const vnames[8] = {"dense",          "window 100, 4 splits",
                                          "chunk 64",       "fused rope (default)",
                                          "sparse top-2 local 1", "fused dynamic rope, sparse covering, window",
                                          "fused longrope, partial rotary",
                                          "fused interleaved rope, partial rotary, sparse"};
    const int64_t H = 8, KVH = 2, D = variant % 2 ? 128 : 64, T = P_T, nq = T * H * D;
    const bool sums = variant >= 4 || bs == 16;
    char what[256];
    snprintf(what, sizeof what, "paged k %s v %s %s block %lld D %lld %s, bounds %s",
             dt_name(kdt), dt_name(vdt), lay == LH_KV_NHD ? "NHD" : "HND", (long long)bs,
             (long long)D, vnames[variant], bounds ? "set" : "unset");

    lh_rope rope_def, rope_dyn;
    lh_rope_scaling dyn = scaling_of("dynamic");
    dyn.factor = 2.0;
    if (!OK(NULL, lh_k_rope_init(&rope_def, D, 10000.0, NULL, 4096)))
        return;
    if (!OK(NULL, lh_k_rope_init(&rope_dyn, D, 10000.0, &dyn, 256))) {
        lh_k_rope_free(&rope_def);
        return;
    }
    /* longrope over half of each head, original 256: sequences (and history writes) on both
     * sides of it */
    lh_rope rope_lr;
    double lr_f[64];
    for (int i = 0; i < 32; i++) {
        lr_f[i] = 1.0 + 0.125 * i;
        lr_f[32 + i] = 1.5 + 0.75 * i * i;
    }
    lh_rope_scaling lr = scaling_of("longrope");
    lr.short_factor = lr_f;
    lr.long_factor = lr_f + 32;
    lr.n_factors = D / 4;
    lr.original_max_position_embeddings = 256;
    if (!OK(NULL, lh_k_rope_init(&rope_lr, D / 2, 10000.0, &lr, 1024))) {
        lh_k_rope_free(&rope_def);
        lh_k_rope_free(&rope_dyn);
        return;
    }
    /* interleaved pairs over half of each head (DeepSeek's rope dims) */
    lh_rope rope_il;
    if (!OK(NULL, lh_k_rope_init(&rope_il, D / 2, 10000.0, NULL, 4096))) {
        lh_k_rope_free(&rope_def);
        lh_k_rope_free(&rope_dyn);
        lh_k_rope_free(&rope_lr);
        return;
    }
    rope_il.interleaved = true;
    const lh_rope *rope = variant == 3   ? &rope_def
                          : variant == 5 ? &rope_dyn
                          : variant == 6 ? &rope_lr
                          : variant == 7 ? &rope_il
                                         : NULL;
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f / sqrtf((float)D)};
    switch (variant) {
    case 1:
        prm.sliding_window = 100;
        prm.n_splits = 4;
        break;
    case 2: prm.chunk_size = 64; break;
    case 3: prm.rope = rope; break;
    case 4:
        prm.sparse_top_k = 2;
        prm.sparse_local_blocks = 1;
        break;
    case 5:
        prm.rope = rope;
        prm.sparse_top_k = 1 << 20;
        prm.sparse_local_blocks = 1;
        prm.sliding_window = 200;
        break;
    case 6: prm.rope = rope; break;
    case 7:
        prm.rope = rope;
        prm.sparse_top_k = 2;
        prm.sparse_local_blocks = 1;
        break;
    default: break;
    }
    OK(e->g, lh_k_ctx_set_bounds(e->g, bounds ? 1024 : 0, bounds ? 1024 : 0));

    pbatch b;
    pbatch_init(&b, KVH, D, bs);
    gpool p;
    gpool_init(e, &p, kdt, vdt, lay, bs, KVH, D, b.NB, sums);
    bool ok = pwrite_in_pieces(e, &p, &b, rope, what);

    float *q = xcalloc((size_t)nq, sizeof(float)), *oc = xcalloc((size_t)nq, sizeof(float));
    float *og = xcalloc((size_t)nq, sizeof(float));
    fill_uniform(q, nq, 1.0f);
    for (int64_t i = 0; i < nq; i++)
        oc[i] = SENTINEL;
    void *dq = dput(e, LH_DTYPE_F32, q, nq), *dout = dput(e, LH_DTYPE_F32, oc, nq);
    if (ok && gpool_push(e, &p)) {
        lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = PSEQS, .token_start = b.tok0,
                             .n_new = b.n_new, .kv_len = b.kv_len, .positions = b.pos,
                             .block_tables = b.tables, .n_blocks = b.n_blocks};
        lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D), ho = kt_t3(LH_DTYPE_F32, oc, T, H, D);
        lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
        lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, D));
        const bool fp8 = kdt == LH_DTYPE_FP8_E4M3 || vdt == LH_DTYPE_FP8_E4M3;
        char w2[320];
        snprintf(w2, sizeof w2, "%.250s: attention", what);
        if (OK(e->c, lh_k_paged_attention_batch(e->c, &hq, &p.hkv, &pb, &prm, &ho)) &&
            OK(e->g, lh_k_paged_attention_batch(e->g, &gq, &p.dkv, &pb, &prm, &go)) &&
            dget(e, LH_DTYPE_F32, og, dout, nq))
            CMP(w2, og, oc, nq, fp8 ? 5e-4 : 1e-4, 0.0, NULL); /* row 20: SENTINEL on both */
        float *qback = xcalloc((size_t)nq, sizeof(float));
        if (dget(e, LH_DTYPE_F32, qback, dq, nq) &&
            memcmp(qback, q, (size_t)nq * sizeof(float)) != 0)
            FAILF("%s: paged attention changed q", what);
        free(qback);
    }
    OK(e->g, lh_k_ctx_set_bounds(e->g, 0, 0));
    env_drop(e);
    free(q);
    free(oc);
    free(og);
    gpool_free(&p);
    pbatch_free(&b);
    lh_k_rope_free(&rope_def);
    lh_k_rope_free(&rope_dyn);
    lh_k_rope_free(&rope_lr);
    lh_k_rope_free(&rope_il);
}

static void paged_layout(lh_kv_layout lay)
{
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(lay == LH_KV_NHD ? 1212 : 1313);
    static const lh_dtype pairs[7][2] = {
        {LH_DTYPE_F32, LH_DTYPE_F32},   {LH_DTYPE_BF16, LH_DTYPE_BF16},
        {LH_DTYPE_F16, LH_DTYPE_F16},   {LH_DTYPE_FP8_E4M3, LH_DTYPE_FP8_E4M3},
        {LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16}, {LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3},
        {LH_DTYPE_F32, LH_DTYPE_F16},
    };
    static const int64_t bss[2] = {1, 16};
    int cfg = lay == LH_KV_NHD ? 0 : 3;
    for (int pi = 0; pi < 7; pi++)
        for (int bi = 0; bi < 2; bi++) {
            const int variant = cfg++ % 6;
            for (int bo = 0; bo < 2; bo++)
                paged_case(&e, pairs[pi][0], pairs[pi][1], lay, bss[bi], variant, bo == 1);
        }
    /* fused longrope (partial rotary, short and long tables by kv_len) */
    paged_case(&e, LH_DTYPE_F32, LH_DTYPE_F32, lay, 16, 6, false);
    paged_case(&e, LH_DTYPE_BF16, LH_DTYPE_FP8_E4M3, lay, 1, 6, true);
    /* fused interleaved rope (partial rotary), with sparse selection over the rotated q */
    paged_case(&e, LH_DTYPE_F32, LH_DTYPE_F32, lay, 16, 7, false);
    paged_case(&e, LH_DTYPE_FP8_E4M3, LH_DTYPE_BF16, lay, 1, 7, true);
    env_close(&e);
}

static void test_gpu_paged_nhd(void)
{
    NEED_GPU();
    paged_layout(LH_KV_NHD);
}

static void test_gpu_paged_hnd(void)
{
    NEED_GPU();
    paged_layout(LH_KV_HND);
}

/* A call exceeding the promised bounds is refused. */
static void test_gpu_bounds_refused(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1414);
    pbatch b;
    pbatch_init(&b, 2, 64, 16);
    gpool p;
    gpool_init(&e, &p, LH_DTYPE_F32, LH_DTYPE_F32, LH_KV_NHD, 16, 2, 64, b.NB, false);
    const int64_t H = 4, T = P_T, D = 64, nq = T * H * D;
    float *q = xcalloc((size_t)nq, sizeof(float));
    void *dq = dput(&e, LH_DTYPE_F32, q, nq), *dout = dnew(&e, (size_t)nq * sizeof(float));
    lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
    lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, D));
    lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = PSEQS, .token_start = b.tok0,
                         .n_new = b.n_new, .kv_len = b.kv_len, .positions = b.pos,
                         .block_tables = b.tables, .n_blocks = b.n_blocks};
    lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 0.125f};
    /* the longest sequence holds 530 tokens in 34 blocks */
    if (OK(e.g, lh_k_ctx_set_bounds(e.g, 512, 64)))
        EXPECT_ST(e.g, lh_k_paged_attention_batch(e.g, &gq, &p.dkv, &pb, &prm, &go), LH_E_USAGE);
    if (OK(e.g, lh_k_ctx_set_bounds(e.g, 1024, 16)))
        EXPECT_ST(e.g, lh_k_paged_attention_batch(e.g, &gq, &p.dkv, &pb, &prm, &go), LH_E_USAGE);
    OK(e.g, lh_k_ctx_set_bounds(e.g, 0, 0));
    free(q);
    gpool_free(&p);
    pbatch_free(&b);
    env_close(&e);
}

/* Attention-logit soft-capping in the paged kernels: the mixed batch (the prefill kernel), the
 * same pool with only its decode rows (every n_new <= 8: the flash-decoding kernel and its
 * merge), and sparse top-2 selection (by the raw bound, as on the CPU), with q scaled by 12 so
 * that caps 2 and 5 matter; f32 NHD and fp8-keys / bf16-values HND pools. Against the CPU over
 * the same pool: 1e-4 absolute (|v| < 2), 5e-4 with fp8 keys. */
static void test_gpu_paged_softcap(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1717);
    static const char *const modes[3] = {"mixed batch", "decode rows only", "sparse top-2"};
    for (int ci = 0; ci < 2; ci++) {
        const lh_dtype kdt = ci ? LH_DTYPE_FP8_E4M3 : LH_DTYPE_F32;
        const lh_dtype vdt = ci ? LH_DTYPE_BF16 : LH_DTYPE_F32;
        const lh_kv_layout lay = ci ? LH_KV_HND : LH_KV_NHD;
        const int64_t bs = ci ? 1 : 16, H = 8, KVH = 2, D = 64, T = P_T, nq = T * H * D;
        char what[160];
        snprintf(what, sizeof what, "paged softcap k %s v %s %s block %lld", dt_name(kdt),
                 dt_name(vdt), lay == LH_KV_NHD ? "NHD" : "HND", (long long)bs);
        pbatch b;
        pbatch_init(&b, KVH, D, bs);
        gpool p;
        gpool_init(&e, &p, kdt, vdt, lay, bs, KVH, D, b.NB, true);
        int64_t cut[3][PSEQS];
        for (int s = 0; s < PSEQS; s++) {
            cut[0][s] = 0;
            cut[1][s] = b.kv_len[s] - b.n_new[s];
            cut[2][s] = b.kv_len[s];
        }
        bool ok = pwrite(&e, &p, &b, cut[0], cut[1], NULL, what) &&
                  pwrite(&e, &p, &b, cut[1], cut[2], NULL, what);
        float *q = xcalloc((size_t)nq, sizeof(float)), *oc = xcalloc((size_t)nq, sizeof(float));
        float *og = xcalloc((size_t)nq, sizeof(float));
        fill_uniform(q, nq, 12.0f);
        void *dq = dput(&e, LH_DTYPE_F32, q, nq), *dout = dnew(&e, (size_t)nq * sizeof(float));
        ok = ok && dq && dout && gpool_push(&e, &p); /* both attend over the CPU's pool */
        /* decode rows only: the sequences with n_new > 8 contribute no rows */
        int64_t n_dec[PSEQS];
        for (int s = 0; s < PSEQS; s++)
            n_dec[s] = b.n_new[s] <= 8 ? b.n_new[s] : 0;
        for (int mode = 0; ok && mode < 3; mode++)
            for (int cj = 0; cj < 2; cj++) {
                lh_paged_attn_params prm = {.struct_size = sizeof prm,
                                            .scale = 1.0f / sqrtf((float)D),
                                            .softcap = cj ? 5.0f : 2.0f};
                if (mode == 2) {
                    prm.sparse_top_k = 2;
                    prm.sparse_local_blocks = 1;
                }
                lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = PSEQS,
                                     .token_start = b.tok0, .n_new = mode == 1 ? n_dec : b.n_new,
                                     .kv_len = b.kv_len, .positions = b.pos,
                                     .block_tables = b.tables, .n_blocks = b.n_blocks};
                for (int64_t i = 0; i < nq; i++)
                    oc[i] = SENTINEL; /* rows of no sequence stay SENTINEL on both */
                if (!dset(&e, LH_DTYPE_F32, dout, oc, nq))
                    break;
                lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D);
                lh_tensor ho = kt_t3(LH_DTYPE_F32, oc, T, H, D);
                lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
                lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, D));
                char w2[240];
                snprintf(w2, sizeof w2, "%s, %s, softcap %g", what, modes[mode],
                         (double)prm.softcap);
                if (OK(e.c, lh_k_paged_attention_batch(e.c, &hq, &p.hkv, &pb, &prm, &ho)) &&
                    OK(e.g, lh_k_paged_attention_batch(e.g, &gq, &p.dkv, &pb, &prm, &go)) &&
                    dget(&e, LH_DTYPE_F32, og, dout, nq))
                    CMP(w2, og, oc, nq, ci ? 5e-4 : 1e-4, 0.0, NULL);
            }
        env_drop(&e);
        free(q);
        free(oc);
        free(og);
        gpool_free(&p);
        pbatch_free(&b);
    }
    env_close(&e);
}

/* ---- sampling ------------------------------------------------------------------------------- */

/* Ids equal to the CPU's (logits well separated: a permutation of evenly spaced values, so no
 * ties and no near-ties); probabilities 1e-5 absolute. */
static void test_gpu_sampling(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1515);
    static const int64_t Vs[3] = {50, 1000, 32000};
    const int64_t M = 6;
    static const lh_sampling_params P[8] = {
        {sizeof(lh_sampling_params), 0.0f, 0, 1.0f, 0.0f, 1.0f},   /* greedy */
        {sizeof(lh_sampling_params), 0.0f, 0, 1.0f, 0.0f, 1.5f},   /* greedy, penalty */
        {sizeof(lh_sampling_params), 0.7f, 0, 1.0f, 0.0f, 1.0f},   /* temperature */
        {sizeof(lh_sampling_params), 1.0f, 40, 1.0f, 0.0f, 1.0f},  /* top-k */
        {sizeof(lh_sampling_params), 0.9f, 0, 0.9f, 0.0f, 1.0f},   /* top-p */
        {sizeof(lh_sampling_params), 1.2f, 0, 1.0f, 0.05f, 1.0f},  /* min-p */
        {sizeof(lh_sampling_params), 0.8f, 50, 0.95f, 0.02f, 1.3f}, /* everything */
        {sizeof(lh_sampling_params), 1.0f, 0, 0.0f, 0.0f, 1.0f},   /* top-p 0 */
    };
    for (int vi = 0; vi < 3; vi++) {
        const int64_t V = Vs[vi], n = M * V;
        float *lg = xcalloc((size_t)n, sizeof(float));
        float *pc = xcalloc((size_t)n, sizeof(float)), *pg = xcalloc((size_t)n, sizeof(float));
        int32_t *perm = xcalloc((size_t)V, sizeof(int32_t));
        for (int64_t r = 0; r < M; r++) {
            for (int64_t i = 0; i < V; i++)
                perm[i] = (int32_t)i;
            for (int64_t i = V - 1; i > 0; i--) {
                const int64_t j = (int64_t)(kt_u64() % (uint64_t)(i + 1));
                const int32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            const float span = r % 2 ? 12.0f : 6.0f;
            for (int64_t i = 0; i < V; i++)
                lg[r * V + i] = (float)perm[i] * (span / (float)V) - span / 2;
        }
        for (int64_t i = 3; i < V; i += 5)
            lg[2 * V + i] = -INFINITY; /* row 2: masked tokens */
        /* histories: row r holds 3r ids, some repeated, some of them the row's top ids */
        int32_t hist[6][15];
        const int32_t *hp[6];
        int64_t hl[6];
        for (int r = 0; r < M; r++) {
            hl[r] = 3 * r;
            for (int i = 0; i < 15; i++)
                hist[r][i] = (int32_t)(kt_u64() % (uint64_t)V);
            if (r >= 2)
                hist[r][1] = hist[r][0];
            hp[r] = hist[r];
        }
        uint64_t stream[6], step[6];
        void *dl = dput(&e, LH_DTYPE_F32, lg, n), *dp = dnew(&e, (size_t)n * sizeof(float));
        lh_tensor hlg = kt_t2(LH_DTYPE_F32, lg, M, V), hpr = kt_t2(LH_DTYPE_F32, pc, M, V);
        lh_tensor glg = on_gpu(kt_t2(LH_DTYPE_F32, dl, M, V));
        lh_tensor gpr = on_gpu(kt_t2(LH_DTYPE_F32, dp, M, V));
        for (int pi = 0; pi < 8; pi++) {
            char what[96];
            snprintf(what, sizeof what, "sampling V %lld params %d", (long long)V, pi);
            if (OK(e.c, lh_k_sampling_probs(e.c, &P[pi], &hlg, hp, hl, &hpr)) &&
                OK(e.g, lh_k_sampling_probs(e.g, &P[pi], &glg, hp, hl, &gpr)) &&
                dget(&e, LH_DTYPE_F32, pg, dp, n)) {
                char w2[128];
                snprintf(w2, sizeof w2, "%.96s: probs", what);
                CMP(w2, pg, pc, n, 1e-5, 0.0, NULL);
            }
            for (int it = 0; it < 4; it++) {
                for (int r = 0; r < M; r++) {
                    stream[r] = (uint64_t)(r * 7 + 1);
                    step[r] = (uint64_t)(it * 3 + r);
                }
                int32_t ic[6], ig[6];
                memset(ic, 0xff, sizeof ic);
                memset(ig, 0xfe, sizeof ig);
                const uint64_t seed = 42 + (uint64_t)it;
                if (OK(e.c, lh_k_sample(e.c, &P[pi], &hlg, hp, hl, seed, stream, step, ic)) &&
                    OK(e.g, lh_k_sample(e.g, &P[pi], &glg, hp, hl, seed, stream, step, ig))) {
                    char w2[128];
                    snprintf(w2, sizeof w2, "%.96s: draw %d", what, it);
                    CMP_IDS(w2, ig, ic, M);
                }
                if (P[pi].temperature == 0.0f && it == 0) {
                    /* greedy: stream and step may be NULL; no history either */
                    if (OK(e.c, lh_k_sample(e.c, &P[pi], &hlg, NULL, NULL, 0, NULL, NULL, ic)) &&
                        OK(e.g, lh_k_sample(e.g, &P[pi], &glg, NULL, NULL, 0, NULL, NULL, ig)))
                        CMP_IDS(what, ig, ic, M);
                }
            }
        }
        /* a NaN logit is refused, naming the row */
        float nan = NAN;
        if (dset(&e, LH_DTYPE_F32, (float *)dl + 3 * V + 1, &nan, 1)) {
            int32_t ig[6];
            EXPECT_ST(e.g, lh_k_sample(e.g, &P[2], &glg, hp, hl, 1, stream, step, ig), LH_E_USAGE);
        }
        env_drop(&e);
        free(lg);
        free(pc);
        free(pg);
        free(perm);
    }
    env_close(&e);
}

/* ---- CUDA graphs ---------------------------------------------------------------------------- */

/* A decode step of B sequences: q = rmsnorm(x @ w^T); the step's key and value written with
 * fused RoPE; paged attention with fused RoPE. Host inputs: positions and kv_len. */
#define GB 3
typedef struct gstep {
    genv *e;
    int64_t K, H, KVH, D, bs;
    void *dx, *dw, *dwn, *dy, *dq, *dk, *dv, *dout;
    gpool pool;
    const int32_t *tables[GB];
    int64_t n_blocks[GB];
    lh_rope rope;
} gstep;

static lh_status gstep_run(gstep *st, const int64_t *kv_len)
{
    lh_kctx *g = st->e->g;
    const int64_t HD = st->H * st->D;
    static const int64_t tok[GB] = {0, 1, 2}, nn[GB] = {1, 1, 1};
    int32_t pos[GB];
    for (int s = 0; s < GB; s++)
        pos[s] = (int32_t)(kv_len[s] - 1);
    lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = GB, .token_start = tok,
                         .n_new = nn, .kv_len = kv_len, .positions = pos,
                         .block_tables = st->tables, .n_blocks = st->n_blocks};
    lh_tensor x = on_gpu(kt_t2(LH_DTYPE_F32, st->dx, GB, st->K));
    lh_tensor w = on_gpu(kt_t2(LH_DTYPE_BF16, st->dw, HD, st->K));
    lh_tensor wn = on_gpu(kt_t1(LH_DTYPE_F32, st->dwn, HD));
    lh_tensor y = on_gpu(kt_t2(LH_DTYPE_F32, st->dy, GB, HD));
    lh_tensor q2 = on_gpu(kt_t2(LH_DTYPE_F32, st->dq, GB, HD));
    lh_tensor q3 = on_gpu(kt_t3(LH_DTYPE_F32, st->dq, GB, st->H, st->D));
    lh_tensor k = on_gpu(kt_t3(LH_DTYPE_F32, st->dk, GB, st->KVH, st->D));
    lh_tensor v = on_gpu(kt_t3(LH_DTYPE_F32, st->dv, GB, st->KVH, st->D));
    lh_tensor out = on_gpu(kt_t3(LH_DTYPE_F32, st->dout, GB, st->H, st->D));
    lh_paged_attn_params prm = {.struct_size = sizeof prm,
                                .scale = 1.0f / sqrtf((float)st->D), .rope = &st->rope};
    lh_status s = lh_k_matmul(g, &x, &w, NULL, &y);
    if (s == LH_OK)
        s = lh_k_rmsnorm(g, &y, &wn, 1e-6f, 0.0f, &q2);
    if (s == LH_OK)
        s = lh_k_paged_kv_write_batch(g, &st->pool.dkv, &pb, &k, &v, &st->rope);
    if (s == LH_OK)
        s = lh_k_paged_attention_batch(g, &q3, &st->pool.dkv, &pb, &prm, &out);
    if (s != LH_OK)
        FAILF("graph step: %s", lh_k_last_error(g));
    return s;
}

/* Uploads the step's device inputs (x, the new key and value) for input set `which`. */
static bool gstep_inputs(gstep *st, int which)
{
    const int64_t nx = GB * st->K, nk = GB * st->KVH * st->D;
    float *x = xcalloc((size_t)nx, sizeof(float)), *k = xcalloc((size_t)nk, sizeof(float));
    float *v = xcalloc((size_t)nk, sizeof(float));
    kt_seed(1616 + (uint64_t)which);
    fill_uniform(x, nx, 1.0f);
    fill_uniform(k, nk, 1.0f);
    fill_uniform(v, nk, 1.0f);
    const bool ok = dset(st->e, LH_DTYPE_F32, st->dx, x, nx) &&
                    dset(st->e, LH_DTYPE_F32, st->dk, k, nk) &&
                    dset(st->e, LH_DTYPE_F32, st->dv, v, nk);
    free(x);
    free(k);
    free(v);
    return ok;
}

/* Eager runs of two steps, then the same steps captured (first) and replayed (second) with
 * other positions and kv_len: the graph's outputs equal the eager ones (same kernels and, with
 * the bounds set, the same launch configurations; 1e-6 absolute in case cuBLAS picks another
 * algorithm under capture); lh_k_graph_counts: 1 capture, 1 replay. */
static void test_gpu_graph(void)
{
    NEED_REAL_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1717);
    gstep st;
    memset(&st, 0, sizeof st);
    st.e = &e;
    st.K = 256;
    st.H = 4;
    st.KVH = 2;
    st.D = 64;
    st.bs = 16;
    const int64_t HD = st.H * st.D, nout = GB * HD, per_seq = 40, NB = GB * per_seq + 2;
    const int64_t L1[GB] = {300, 77, 513}, L2[GB] = {301, 78, 514};
    if (!OK(NULL, lh_k_rope_init(&st.rope, st.D, 10000.0, NULL, 4096))) {
        env_close(&e);
        return;
    }
    void *w = xcalloc((size_t)(HD * st.K), sizeof(uint16_t));
    float *wref = xcalloc((size_t)(HD * st.K), sizeof(float)), *wn = xcalloc((size_t)HD, sizeof(float));
    kt_fill_w(LH_DTYPE_BF16, w, wref, HD * st.K, 0.1f);
    for (int64_t i = 0; i < HD; i++)
        wn[i] = 1.0f + 0.5f * kt_uniform();
    st.dw = dput(&e, LH_DTYPE_BF16, w, HD * st.K);
    st.dwn = dput(&e, LH_DTYPE_F32, wn, HD);
    st.dx = dnew(&e, (size_t)(GB * st.K) * sizeof(float));
    st.dy = dnew(&e, (size_t)nout * sizeof(float));
    st.dq = dnew(&e, (size_t)nout * sizeof(float));
    st.dk = dnew(&e, (size_t)(GB * st.KVH * st.D) * sizeof(float));
    st.dv = dnew(&e, (size_t)(GB * st.KVH * st.D) * sizeof(float));
    st.dout = dnew(&e, (size_t)nout * sizeof(float));
    gpool_init(&e, &st.pool, LH_DTYPE_BF16, LH_DTYPE_BF16, LH_KV_NHD, st.bs, st.KVH, st.D, NB,
               false);
    int32_t *perm = xcalloc((size_t)NB, sizeof(int32_t));
    for (int64_t i = 0; i < NB; i++)
        perm[i] = (int32_t)(NB - 1 - i);
    for (int s = 0; s < GB; s++) {
        st.tables[s] = perm + s * per_seq;
        st.n_blocks[s] = per_seq;
    }
    /* the history: positions 0 .. L1 - 2, written eagerly */
    {
        const int64_t row = st.KVH * st.D;
        int64_t tok[GB], nn[GB], len[GB], Tw = 0;
        for (int s = 0; s < GB; s++) {
            tok[s] = Tw;
            nn[s] = len[s] = L1[s] - 1;
            Tw += nn[s];
        }
        float *kk = xcalloc((size_t)(Tw * row), sizeof(float));
        float *vv = xcalloc((size_t)(Tw * row), sizeof(float));
        int32_t *pos = xcalloc((size_t)Tw, sizeof(int32_t));
        fill_uniform(kk, Tw * row, 1.0f);
        fill_uniform(vv, Tw * row, 1.0f);
        for (int s = 0; s < GB; s++)
            for (int64_t i = 0; i < nn[s]; i++)
                pos[tok[s] + i] = (int32_t)i;
        lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = GB, .token_start = tok,
                             .n_new = nn, .kv_len = len, .positions = pos,
                             .block_tables = st.tables, .n_blocks = st.n_blocks};
        void *dkk = dput(&e, LH_DTYPE_F32, kk, Tw * row), *dvv = dput(&e, LH_DTYPE_F32, vv, Tw * row);
        lh_tensor gk = on_gpu(kt_t3(LH_DTYPE_F32, dkk, Tw, st.KVH, st.D));
        lh_tensor gv = on_gpu(kt_t3(LH_DTYPE_F32, dvv, Tw, st.KVH, st.D));
        OK(e.g, lh_k_paged_kv_write_batch(e.g, &st.pool.dkv, &pb, &gk, &gv, &st.rope));
        free(kk);
        free(vv);
        free(pos);
    }
    OK(e.g, lh_k_ctx_set_bounds(e.g, 1024, per_seq));

    float *oe1 = xcalloc((size_t)nout, sizeof(float)), *oe2 = xcalloc((size_t)nout, sizeof(float));
    float *og1 = xcalloc((size_t)nout, sizeof(float)), *og2 = xcalloc((size_t)nout, sizeof(float));
    bool ok = gstep_inputs(&st, 1) && gstep_run(&st, L1) == LH_OK &&
              dget(&e, LH_DTYPE_F32, oe1, st.dout, nout) && gstep_inputs(&st, 2) &&
              gstep_run(&st, L2) == LH_OK && dget(&e, LH_DTYPE_F32, oe2, st.dout, nout);
    lh_k_graph *g = NULL;
    if (ok && OK(e.g, lh_k_graph_create(e.g, &g))) {
        bool rerun = true;
        /* capture with the first inputs (a capture during which the context's buffers moved
         * asks for a rerun, which captures again: allowed, though the eager runs above should
         * have sized everything) */
        for (int attempt = 0; attempt < 3 && rerun; attempt++) {
            if (attempt > 0)
                printf("\n    note: capture %d asked for a rerun", attempt);
            if (!gstep_inputs(&st, 1) || !OK(e.g, lh_k_graph_begin(e.g, g)))
                break;
            if (gstep_run(&st, L1) != LH_OK) {
                lh_k_graph_abort(e.g, g);
                break;
            }
            if (!OK(e.g, lh_k_graph_end(e.g, g, &rerun)))
                break;
            if (!rerun && dget(&e, LH_DTYPE_F32, og1, st.dout, nout))
                CMP("graph capture vs eager", og1, oe1, nout, 1e-6, 0.0, NULL);
        }
        if (rerun)
            FAILF("the graph was not captured");
        /* replay with other positions, lengths and device inputs */
        rerun = true;
        if (gstep_inputs(&st, 2) && OK(e.g, lh_k_graph_begin(e.g, g))) {
            if (gstep_run(&st, L2) == LH_OK) {
                if (OK(e.g, lh_k_graph_end(e.g, g, &rerun))) {
                    if (rerun)
                        FAILF("graph replay with new positions and kv_len asked for a rerun "
                              "(launches must depend on shapes only with bounds set)");
                    else if (dget(&e, LH_DTYPE_F32, og2, st.dout, nout))
                        CMP("graph replay vs eager", og2, oe2, nout, 1e-6, 0.0, NULL);
                }
            } else {
                lh_k_graph_abort(e.g, g);
            }
        }
        int64_t captures = -1, replays = -1;
        lh_k_graph_counts(g, &captures, &replays);
        if (captures != 1 || replays != 1)
            FAILF("lh_k_graph_counts: %lld captures and %lld replays, expected 1 and 1",
                  (long long)captures, (long long)replays);
        lh_k_graph_counts(g, NULL, NULL);

        /* a call that waits for the device is refused inside begin/end */
        lh_k_graph *g2 = NULL;
        if (OK(e.g, lh_k_graph_create(e.g, &g2)) && OK(e.g, lh_k_graph_begin(e.g, g2))) {
            int32_t ids[GB];
            lh_tensor y = on_gpu(kt_t2(LH_DTYPE_F32, st.dy, GB, HD));
            EXPECT_ST(e.g, lh_k_argmax(e.g, &y, ids), LH_E_USAGE);
            EXPECT_ST(e.g, lh_k_sync(e.g), LH_E_USAGE);
            lh_k_graph_abort(e.g, g2);
        }
        lh_k_graph_free(g2);
        /* the context works eagerly afterwards */
        float *o3 = xcalloc((size_t)nout, sizeof(float));
        if (gstep_inputs(&st, 2) && gstep_run(&st, L2) == LH_OK &&
            dget(&e, LH_DTYPE_F32, o3, st.dout, nout))
            CMP("eager after graphs", o3, oe2, nout, 1e-6, 0.0, NULL);
        free(o3);
    }
    lh_k_graph_free(g);
    OK(e.g, lh_k_ctx_set_bounds(e.g, 0, 0));
    env_close(&e);
    gpool_free(&st.pool);
    lh_k_rope_free(&st.rope);
    free(perm);
    free(w);
    free(wref);
    free(wn);
    free(oe1);
    free(oe2);
    free(og1);
    free(og2);
}

/* A GPT-2-style embedding step under a CUDA graph: h = tok_emb[tok] + pos_emb[pos]
 * (lh_k_embedding, lh_k_embedding_add), y = gelu(layernorm(h)), softcap(y), y += h. Eager
 * runs with two id sets, then the step captured with the first and replayed with the second:
 * the ids are staged afresh in the dry run (as lh_k_embedding's), so the replay asks for no
 * rerun and reproduces the eager outputs (the same kernels and launch shapes: 1e-6 absolute,
 * as test_gpu_graph). */
#define NG_T 7
typedef struct nn_step {
    genv *e;
    int64_t V, P, D;
    void *dtok, *dpos, *dw, *db, *dh, *dy;
} nn_step;

static lh_status nn_step_run(nn_step *st, const int32_t *tok, const int32_t *pos)
{
    lh_kctx *g = st->e->g;
    lh_tensor ttab = on_gpu(kt_t2(LH_DTYPE_BF16, st->dtok, st->V, st->D));
    lh_tensor ptab = on_gpu(kt_t2(LH_DTYPE_F32, st->dpos, st->P, st->D));
    lh_tensor w = on_gpu(kt_t1(LH_DTYPE_F32, st->dw, st->D));
    lh_tensor b = on_gpu(kt_t1(LH_DTYPE_F16, st->db, st->D));
    lh_tensor h = on_gpu(kt_t2(LH_DTYPE_F32, st->dh, NG_T, st->D));
    lh_tensor y = on_gpu(kt_t2(LH_DTYPE_F32, st->dy, NG_T, st->D));
    lh_status s = lh_k_embedding(g, &ttab, tok, NG_T, &h);
    if (s == LH_OK)
        s = lh_k_embedding_add(g, &ptab, pos, NG_T, &h);
    if (s == LH_OK)
        s = lh_k_layernorm(g, &h, &w, &b, 1e-5f, &y);
    if (s == LH_OK)
        s = lh_k_gelu(g, &y, &y);
    if (s == LH_OK)
        s = lh_k_softcap(g, &y, 2.0f);
    if (s == LH_OK)
        s = lh_k_add(g, &y, &h);
    if (s != LH_OK)
        FAILF("nn graph step: %s", lh_k_last_error(g));
    return s;
}

static void test_gpu_nn_graph(void)
{
    NEED_REAL_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2501);
    nn_step st;
    memset(&st, 0, sizeof st);
    st.e = &e;
    st.V = 300;
    st.P = 64;
    st.D = 96;
    const int64_t no = NG_T * st.D;
    void *tok = xcalloc((size_t)(st.V * st.D), sizeof(uint16_t)), *b = xcalloc((size_t)st.D, sizeof(uint16_t));
    float *tref = xcalloc((size_t)(st.V * st.D), sizeof(float)), *bref = xcalloc((size_t)st.D, sizeof(float));
    float *pos = xcalloc((size_t)(st.P * st.D), sizeof(float)), *w = xcalloc((size_t)st.D, sizeof(float));
    kt_fill_w(LH_DTYPE_BF16, tok, tref, st.V * st.D, 1.0f);
    kt_fill_w(LH_DTYPE_F16, b, bref, st.D, 0.5f);
    fill_uniform(pos, st.P * st.D, 0.5f);
    for (int64_t i = 0; i < st.D; i++)
        w[i] = 1.0f + 0.5f * kt_uniform();
    st.dtok = dput(&e, LH_DTYPE_BF16, tok, st.V * st.D);
    st.dpos = dput(&e, LH_DTYPE_F32, pos, st.P * st.D);
    st.dw = dput(&e, LH_DTYPE_F32, w, st.D);
    st.db = dput(&e, LH_DTYPE_F16, b, st.D);
    st.dh = dnew(&e, (size_t)no * sizeof(float));
    st.dy = dnew(&e, (size_t)no * sizeof(float));
    static const int32_t tok1[NG_T] = {5, 299, 17, 17, 0, 42, 101};
    static const int32_t pos1[NG_T] = {0, 1, 2, 3, 4, 5, 6};
    static const int32_t tok2[NG_T] = {250, 3, 3, 77, 199, 1, 0};
    static const int32_t pos2[NG_T] = {40, 41, 42, 43, 63, 7, 8};
    float *oe1 = xcalloc((size_t)no, sizeof(float)), *oe2 = xcalloc((size_t)no, sizeof(float));
    float *og = xcalloc((size_t)no, sizeof(float));
    bool ok = nn_step_run(&st, tok1, pos1) == LH_OK && dget(&e, LH_DTYPE_F32, oe1, st.dy, no) &&
              nn_step_run(&st, tok2, pos2) == LH_OK && dget(&e, LH_DTYPE_F32, oe2, st.dy, no);
    lh_k_graph *g = NULL;
    if (ok && OK(e.g, lh_k_graph_create(e.g, &g))) {
        bool rerun = true;
        for (int attempt = 0; attempt < 3 && rerun; attempt++) {
            if (!OK(e.g, lh_k_graph_begin(e.g, g)))
                break;
            if (nn_step_run(&st, tok1, pos1) != LH_OK) {
                lh_k_graph_abort(e.g, g);
                break;
            }
            if (!OK(e.g, lh_k_graph_end(e.g, g, &rerun)))
                break;
            if (!rerun && dget(&e, LH_DTYPE_F32, og, st.dy, no))
                CMP("nn graph capture vs eager", og, oe1, no, 1e-6, 0.0, NULL);
        }
        if (rerun)
            FAILF("the nn graph was not captured");
        rerun = true;
        if (OK(e.g, lh_k_graph_begin(e.g, g))) {
            if (nn_step_run(&st, tok2, pos2) == LH_OK) {
                if (OK(e.g, lh_k_graph_end(e.g, g, &rerun))) {
                    if (rerun)
                        FAILF("nn graph replay with new ids asked for a rerun (ids must be "
                              "staged, launches must depend on shapes only)");
                    else if (dget(&e, LH_DTYPE_F32, og, st.dy, no))
                        CMP("nn graph replay vs eager", og, oe2, no, 1e-6, 0.0, NULL);
                }
            } else {
                lh_k_graph_abort(e.g, g);
            }
        }
        int64_t captures = -1, replays = -1;
        lh_k_graph_counts(g, &captures, &replays);
        if (captures != 1 || replays != 1)
            FAILF("lh_k_graph_counts: %lld captures and %lld replays, expected 1 and 1",
                  (long long)captures, (long long)replays);
    }
    lh_k_graph_free(g);
    env_close(&e);
    free(tok);
    free(b);
    free(tref);
    free(bref);
    free(pos);
    free(w);
    free(oe1);
    free(oe2);
    free(og);
}

/* ---- registration --------------------------------------------------------------------------- */

/* ---- dequantization: ggml block formats, bit-identical to gguf-py and to the CPU ---------- */

static void *read_quant_fixture(const char *name, const char *ext, size_t *size)
{
    const char *dir = getenv("LH_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/%s.%s", dir ? dir : "tests/fixtures", name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        FAILF("cannot open %.900s: %.100s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = xcalloc(n > 0 ? (size_t)n : 1, 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) {
        FAILF("cannot read %.900s", path);
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static void test_gpu_dequantize(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    static const struct {
        const char *file;
        lh_dtype dt;
        int64_t rows;
    } types[] = {
        {"F32", LH_DTYPE_F32, 4},   {"F16", LH_DTYPE_F16, 4},   {"BF16", LH_DTYPE_BF16, 4},
        {"Q4_0", LH_DTYPE_Q4_0, 5}, {"Q4_1", LH_DTYPE_Q4_1, 5}, {"Q5_0", LH_DTYPE_Q5_0, 5},
        {"Q5_1", LH_DTYPE_Q5_1, 5}, {"Q8_0", LH_DTYPE_Q8_0, 5}, {"Q4_K", LH_DTYPE_Q4_K, 4},
        {"Q5_K", LH_DTYPE_Q5_K, 4}, {"Q6_K", LH_DTYPE_Q6_K, 4},
    };
    kt_seed(1515);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const lh_dtype dt = types[t].dt;
        char what[96];
        /* 1. the committed fixture: gguf-py's floats, bit for bit (memcmp, signed zeros) */
        size_t nb = 0, nf = 0;
        unsigned char *raw = read_quant_fixture(types[t].file, "bin", &nb);
        float *want = read_quant_fixture(types[t].file, "f32", &nf);
        if (raw && want) {
            const int64_t n = (int64_t)(nf / 4), R = types[t].rows, C = n / R;
            float *got = xcalloc((size_t)n, sizeof(float));
            void *ds = dput(&e, dt, raw, n), *dd = dnew(&e, (size_t)n * sizeof(float));
            lh_tensor gs = on_gpu(kt_t2(dt, ds, R, C)), gd = on_gpu(kt_t2(LH_DTYPE_F32, dd, R, C));
            snprintf(what, sizeof what, "dequantize %s fixture [%lld, %lld] vs gguf-py",
                     types[t].file, (long long)R, (long long)C);
            compared += n;
            if (OK(e.g, lh_k_dequantize(e.g, &gs, &gd)) && dget(&e, LH_DTYPE_F32, got, dd, n) &&
                memcmp(got, want, (size_t)n * sizeof(float)) != 0)
                CMP_BITS(what, LH_DTYPE_F32, got, want, n); /* names the first difference */
            if (memcmp(got, want, (size_t)n * sizeof(float)) != 0)
                FAILF("%s: not bit-identical", what);
            free(got);
            env_drop(&e);
        }
        free(raw);
        free(want);
        /* 2. random bytes, every scale bit pattern (NaN matches NaN), against the CPU; Q4_0 large
         * enough (2^24 + 4096 elements) that the grid-stride loop wraps */
        int64_t be = 1, bb = 0;
        lh_k_dtype_block(dt, &be, &bb);
        const int64_t C = 8 * (be > 1 ? be : 32), R = dt == LH_DTYPE_Q4_0 ? (16777216 + 4096) / C : 33;
        const int64_t n = R * C, bytes = lh_k_dtype_bytes(dt, n);
        unsigned char *rnd = xcalloc((size_t)bytes, 1);
        for (int64_t i = 0; i < bytes; i++)
            rnd[i] = (unsigned char)(kt_u64() >> 56);
        float *oc = xcalloc((size_t)n, sizeof(float)), *og = xcalloc((size_t)n, sizeof(float));
        void *ds = dput(&e, dt, rnd, n), *dd = dnew(&e, (size_t)n * sizeof(float));
        lh_tensor hs = kt_t2(dt, rnd, R, C), hd = kt_t2(LH_DTYPE_F32, oc, R, C);
        lh_tensor gs = on_gpu(kt_t2(dt, ds, R, C)), gd = on_gpu(kt_t2(LH_DTYPE_F32, dd, R, C));
        snprintf(what, sizeof what, "dequantize %s random [%lld, %lld] vs cpu", types[t].file,
                 (long long)R, (long long)C);
        if (OK(e.c, lh_k_dequantize(e.c, &hs, &hd)) && OK(e.g, lh_k_dequantize(e.g, &gs, &gd)) &&
            dget(&e, LH_DTYPE_F32, og, dd, n))
            CMP_BITS(what, LH_DTYPE_F32, og, oc, n);
        env_drop(&e);
        free(rnd);
        free(oc);
        free(og);
    }
    /* a CPU tensor on the CUDA context is refused, as for every kernel */
    static unsigned char blk[18];
    static float out[32];
    lh_tensor hs = kt_t2(LH_DTYPE_Q4_0, blk, 1, 32), hd = on_gpu(kt_t2(LH_DTYPE_F32, out, 1, 32));
    if (!as_cpu())
        EXPECT_ST(e.g, lh_k_dequantize(e.g, &hs, &hd), LH_E_USAGE);
    env_close(&e);
}

/* ---- ggml block types in the embedding and the matmul --------------------------------------- */

/* Random blocks of dt with small f16 scales (|d| in [1e-3, 0.1]) at the offsets given, so that no
 * product overflows */
static unsigned char *random_blocks(lh_dtype dt, int64_t n, const int *scale_off, int n_scales)
{
    int64_t be = 1, bb = 0;
    lh_k_dtype_block(dt, &be, &bb);
    const int64_t bytes = lh_k_dtype_bytes(dt, n);
    unsigned char *b = xcalloc((size_t)bytes, 1);
    for (int64_t i = 0; i < bytes; i++)
        b[i] = (unsigned char)(kt_u64() >> 56);
    for (int64_t blk = 0; blk < bytes / bb; blk++)
        for (int s = 0; s < n_scales; s++) {
            const float d = (0.001f + 0.099f * (kt_uniform() * 0.5f + 0.5f)) * ((kt_u64() >> 63) ? -1.0f : 1.0f);
            const uint16_t h = lh_k_f32_to_f16(d);
            b[blk * bb + scale_off[s]] = (unsigned char)(h & 0xff);
            b[blk * bb + scale_off[s] + 1] = (unsigned char)(h >> 8);
        }
    return b;
}

/* Every block type: embedding and embedding_add rows bit-identical to the CPU (each element is
 * decoded as lh_k_dequantize decodes it); the matmul against the CPU's exact path
 * (LH_K_QMM_EXACT: the same dequantized weights in f32), within 2 K 2^-24 sum_k |x w| per
 * output (another summation order), for M 1, 5 and 20, with and without a bias. */
static void test_gpu_block_types(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    OK(e.c, lh_k_ctx_set_quant_matmul(e.c, LH_K_QMM_EXACT));
    OK(e.g, lh_k_ctx_set_quant_matmul(e.g, LH_K_QMM_EXACT)); /* the CPU stand-in's path */
    static const struct {
        lh_dtype dt;
        int n_scales, off[2];
    } types[] = {
        {LH_DTYPE_Q4_0, 1, {0, 0}}, {LH_DTYPE_Q4_1, 2, {0, 2}}, {LH_DTYPE_Q5_0, 1, {0, 0}},
        {LH_DTYPE_Q5_1, 2, {0, 2}}, {LH_DTYPE_Q8_0, 1, {0, 0}}, {LH_DTYPE_Q4_K, 2, {0, 2}},
        {LH_DTYPE_Q5_K, 2, {0, 2}}, {LH_DTYPE_Q6_K, 1, {208, 0}},
    };
    kt_seed(1601);
    static const int32_t ids[5] = {3, 0, 6, 3, 1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const lh_dtype dt = types[t].dt;
        int64_t be = 1;
        lh_k_dtype_block(dt, &be, NULL);
        /* embedding: table [7, 2 blocks] */
        const int64_t V = 7, D = 2 * be, n = 5;
        unsigned char *tab = random_blocks(dt, V * D, types[t].off, types[t].n_scales);
        float *oc = xcalloc((size_t)(n * D), sizeof(float)), *og = xcalloc((size_t)(n * D), sizeof(float));
        void *dtab = dput(&e, dt, tab, V * D), *dout = dnew(&e, (size_t)(n * D) * sizeof(float));
        lh_tensor ht = kt_t2(dt, tab, V, D), ho = kt_t2(LH_DTYPE_F32, oc, n, D);
        lh_tensor gt = on_gpu(kt_t2(dt, dtab, V, D)), go = on_gpu(kt_t2(LH_DTYPE_F32, dout, n, D));
        char what[96];
        snprintf(what, sizeof what, "embedding %s", lh_k_dtype_name(dt));
        if (OK(e.c, lh_k_embedding(e.c, &ht, ids, n, &ho)) &&
            OK(e.g, lh_k_embedding(e.g, &gt, ids, n, &go)) && dget(&e, LH_DTYPE_F32, og, dout, n * D))
            CMP_BITS(what, LH_DTYPE_F32, og, oc, n * D);
        /* embedding_add onto the rows just looked up */
        snprintf(what, sizeof what, "embedding_add %s", lh_k_dtype_name(dt));
        if (OK(e.c, lh_k_embedding_add(e.c, &ht, ids, n, &ho)) &&
            OK(e.g, lh_k_embedding_add(e.g, &gt, ids, n, &go)) && dget(&e, LH_DTYPE_F32, og, dout, n * D))
            CMP_BITS(what, LH_DTYPE_F32, og, oc, n * D);
        env_drop(&e);
        free(tab);
        free(oc);
        free(og);
        /* matmul: w [37, 3 blocks] */
        const int64_t N = 37, K = 3 * be, Mmax = 20;
        unsigned char *w = random_blocks(dt, N * K, types[t].off, types[t].n_scales);
        float *wf = xcalloc((size_t)(N * K), sizeof(float));
        lh_tensor hw = kt_t2(dt, w, N, K), hwf = kt_t2(LH_DTYPE_F32, wf, N, K);
        OK(e.c, lh_k_dequantize(e.c, &hw, &hwf));
        float *x = xcalloc((size_t)(Mmax * K), sizeof(float)), *bias = xcalloc((size_t)N, sizeof(float));
        fill_uniform(x, Mmax * K, 1.0f);
        fill_uniform(bias, N, 1.0f);
        float *yc = xcalloc((size_t)(Mmax * N), sizeof(float)), *yg = xcalloc((size_t)(Mmax * N), sizeof(float));
        double *tol = xcalloc((size_t)(Mmax * N), sizeof(double));
        for (int64_t m = 0; m < Mmax; m++)
            for (int64_t c = 0; c < N; c++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += fabs((double)x[m * K + k] * wf[c * K + k]);
                tol[m * N + c] = 2.0 * (double)(K + 8) * 0x1p-24 * (s + 1.0);
            }
        void *dw = dput(&e, dt, w, N * K), *dx = dput(&e, LH_DTYPE_F32, x, Mmax * K);
        void *db = dput(&e, LH_DTYPE_F32, bias, N), *dy = dnew(&e, (size_t)(Mmax * N) * sizeof(float));
        static const int64_t Ms[3] = {1, 5, 20};
        for (int mi = 0; mi < 3; mi++)
            for (int wb = 0; wb < 2; wb++) {
                const int64_t M = Ms[mi];
                lh_tensor hx = kt_t2(LH_DTYPE_F32, x, M, K), hy = kt_t2(LH_DTYPE_F32, yc, M, N);
                lh_tensor hb = kt_t1(LH_DTYPE_F32, bias, N);
                lh_tensor gw = on_gpu(kt_t2(dt, dw, N, K)), gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, K));
                lh_tensor gb = on_gpu(kt_t1(LH_DTYPE_F32, db, N)), gy = on_gpu(kt_t2(LH_DTYPE_F32, dy, M, N));
                snprintf(what, sizeof what, "matmul w %s M %lld%s", lh_k_dtype_name(dt), (long long)M,
                         wb ? " + bias" : "");
                if (OK(e.c, lh_k_matmul(e.c, &hx, &hw, wb ? &hb : NULL, &hy)) &&
                    OK(e.g, lh_k_matmul(e.g, &gx, &gw, wb ? &gb : NULL, &gy)) &&
                    dget(&e, LH_DTYPE_F32, yg, dy, M * N))
                    CMP(what, yg, yc, M * N, 0.0, 0.0, tol);
            }
        env_drop(&e);
        free(w);
        free(wf);
        free(x);
        free(bias);
        free(yc);
        free(yg);
        free(tol);
    }
    env_close(&e);
}

/* Bytes of two buffers identical (quantized weights: int8, int4 nibbles, fp8 codes). */
static bool cmp_bytes_at(int line, const char *what, const unsigned char *got,
                         const unsigned char *want, size_t n)
{
    compared += (long long)n;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            size_t bad = 0;
            for (size_t j = i; j < n; j++)
                bad += got[j] != want[j];
            char m[1024];
            snprintf(m, sizeof m, "%.400s: %zu of %zu bytes differ; first [%zu]: got 0x%02x want 0x%02x",
                     what, bad, n, i, got[i], want[i]);
            fail_at(line, m);
            return false;
        }
    return true;
}
#define CMP_BYTES(what, got, want, n) cmp_bytes_at(__LINE__, (what), (got), (want), (n))

/* Weights with separate scales (lh_k_quantize_scaled / lh_k_dequantize_scaled /
 * lh_k_matmul_scaled), for int8, int4 and fp8 with f32 and f16 scales, per channel (640 columns:
 * more than a thread block's threads), groups of 32, odd 3 x 7 blocks (partial edge blocks, int4
 * bytes split between two blocks) and 16 x 128 blocks, from f32, bf16 and f16 sources: the quantized weights and scales and the dequantized weights bit-identical
 * to the CPU's; the integer path (int8 per channel, LH_K_QMM_INT8) bit-identical too; every
 * other matmul within 2 K 2^-24 sum_k |x w| of the CPU's (another order of the f32 sums), for
 * M 1, 5 and 20, with and without a bias; a refused source (NaN, inf, an f16 scale overflow)
 * refused with the CPU's message. */
static void test_gpu_scaled(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    static const lh_dtype wdts[3] = {LH_DTYPE_INT8, LH_DTYPE_INT4, LH_DTYPE_FP8_E4M3};
    static const lh_dtype sdts[2] = {LH_DTYPE_F32, LH_DTYPE_F16};
    const int64_t N = 37, K = 640, Mmax = 20;
    static const int64_t blocks[4][2] = {{1, 640}, {1, 32}, {3, 7}, {16, 128}};
    kt_seed(1701);
    float *src = xcalloc((size_t)(N * K), sizeof(float));
    uint16_t *srcb = xcalloc((size_t)(N * K), sizeof(uint16_t));
    uint16_t *srch = xcalloc((size_t)(N * K), sizeof(uint16_t));
    fill_uniform(src, N * K, 2.0f);
    for (int64_t i = 0; i < N * K; i++) {
        srcb[i] = lh_k_f32_to_bf16(src[i]);
        srch[i] = lh_k_f32_to_f16(src[i]);
    }
    static const lh_dtype srcdts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    float *x = xcalloc((size_t)(Mmax * K), sizeof(float)), *bias = xcalloc((size_t)N, sizeof(float));
    fill_uniform(x, Mmax * K, 1.0f);
    fill_uniform(bias, N, 1.0f);
    unsigned char *wc = xcalloc((size_t)(N * K), 1), *wg = xcalloc((size_t)(N * K), 1);
    float *sc = xcalloc((size_t)(N * K), sizeof(float)), *sg = xcalloc((size_t)(N * K), sizeof(float));
    float *dc = xcalloc((size_t)(N * K), sizeof(float)), *dg = xcalloc((size_t)(N * K), sizeof(float));
    float *yc = xcalloc((size_t)(Mmax * N), sizeof(float)), *yg = xcalloc((size_t)(Mmax * N), sizeof(float));
    double *tol = xcalloc((size_t)(Mmax * N), sizeof(double));
    char what[160];
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < 2; si++)
            for (int bi = 0; bi < 4; bi++) {
                const lh_dtype wdt = wdts[wi], sdt = sdts[si];
                const int64_t br = blocks[bi][0], bc = blocks[bi][1];
                const int64_t SR = (N + br - 1) / br, SC = (K + bc - 1) / bc;
                const lh_dtype srcdt = srcdts[(wi + si + bi) % 3];
                const size_t wbytes = (size_t)lh_k_dtype_bytes(wdt, N * K);
                snprintf(what, sizeof what, "%s w, %s scale, %lld x %lld blocks, %s source",
                         lh_k_dtype_name(wdt), lh_k_dtype_name(sdt), (long long)br, (long long)bc,
                         lh_k_dtype_name(srcdt));
                /* quantize on both */
                const void *hsrc = srcdt == LH_DTYPE_BF16  ? (const void *)srcb
                                   : srcdt == LH_DTYPE_F16 ? (const void *)srch
                                                           : (const void *)src;
                void *dsrc = dput(&e, srcdt, hsrc, N * K);
                void *dw = dnew(&e, wbytes), *ds = dnew(&e, (size_t)lh_k_dtype_bytes(sdt, SR * SC));
                lh_tensor hs = kt_t2(srcdt, (void *)hsrc, N, K), hw = kt_t2(wdt, wc, N, K);
                lh_tensor hsc = kt_t2(sdt, sc, SR, SC);
                lh_tensor gs = on_gpu(kt_t2(srcdt, dsrc, N, K)), gw = on_gpu(kt_t2(wdt, dw, N, K));
                lh_tensor gsc = on_gpu(kt_t2(sdt, ds, SR, SC));
                char w2[200];
                if (OK(e.c, lh_k_quantize_scaled(e.c, &hs, br, bc, &hw, &hsc)) &&
                    OK(e.g, lh_k_quantize_scaled(e.g, &gs, br, bc, &gw, &gsc)) &&
                    dget(&e, LH_DTYPE_INT8, wg, dw, (int64_t)wbytes) &&
                    dget(&e, sdt, sg, ds, SR * SC)) {
                    snprintf(w2, sizeof w2, "quantize_scaled %s: weights", what);
                    CMP_BYTES(w2, wg, wc, wbytes);
                    snprintf(w2, sizeof w2, "quantize_scaled %s: scales", what);
                    CMP_BITS(w2, sdt, sg, sc, SR * SC);
                }
                /* from here on both compute from the CPU's quantized weights */
                void *dd = dnew(&e, (size_t)(N * K) * sizeof(float));
                lh_tensor hd = kt_t2(LH_DTYPE_F32, dc, N, K), gd = on_gpu(kt_t2(LH_DTYPE_F32, dd, N, K));
                snprintf(w2, sizeof w2, "dequantize_scaled %s", what);
                if (dset(&e, LH_DTYPE_INT8, dw, wc, (int64_t)wbytes) && dset(&e, sdt, ds, sc, SR * SC) &&
                    OK(e.c, lh_k_dequantize_scaled(e.c, &hw, &hsc, br, bc, &hd)) &&
                    OK(e.g, lh_k_dequantize_scaled(e.g, &gw, &gsc, br, bc, &gd)) &&
                    dget(&e, LH_DTYPE_F32, dg, dd, N * K))
                    CMP_BITS(w2, LH_DTYPE_F32, dg, dc, N * K);
                for (int64_t m = 0; m < Mmax; m++)
                    for (int64_t c = 0; c < N; c++) {
                        double a = 0;
                        for (int64_t k = 0; k < K; k++)
                            a += fabs((double)x[m * K + k] * dc[c * K + k]);
                        tol[m * N + c] = 2.0 * (double)(K + 8) * 0x1p-24 * (a + 1.0);
                    }
                void *dx = dput(&e, LH_DTYPE_F32, x, Mmax * K), *db = dput(&e, LH_DTYPE_F32, bias, N);
                void *dy = dnew(&e, (size_t)(Mmax * N) * sizeof(float));
                static const int64_t Ms[3] = {1, 5, 20};
                for (int mode = 0; mode < 2; mode++) {
                    const lh_k_qmm qm = mode ? LH_K_QMM_EXACT : LH_K_QMM_INT8;
                    OK(e.c, lh_k_ctx_set_quant_matmul(e.c, qm));
                    OK(e.g, lh_k_ctx_set_quant_matmul(e.g, qm));
                    const bool integer = qm == LH_K_QMM_INT8 && wdt == LH_DTYPE_INT8 && SC == 1;
                    for (int mi = 0; mi < 3; mi++)
                        for (int wb = 0; wb < 2; wb++) {
                            const int64_t M = Ms[mi];
                            lh_tensor hx = kt_t2(LH_DTYPE_F32, x, M, K), hy = kt_t2(LH_DTYPE_F32, yc, M, N);
                            lh_tensor hb = kt_t1(LH_DTYPE_F32, bias, N);
                            lh_tensor gx = on_gpu(kt_t2(LH_DTYPE_F32, dx, M, K));
                            lh_tensor gb = on_gpu(kt_t1(LH_DTYPE_F32, db, N));
                            lh_tensor gy = on_gpu(kt_t2(LH_DTYPE_F32, dy, M, N));
                            snprintf(w2, sizeof w2, "matmul_scaled %s, %s, M %lld%s", what,
                                     lh_k_qmm_name(qm), (long long)M, wb ? " + bias" : "");
                            if (!OK(e.c, lh_k_matmul_scaled(e.c, &hx, &hw, &hsc, br, bc, wb ? &hb : NULL, &hy)) ||
                                !OK(e.g, lh_k_matmul_scaled(e.g, &gx, &gw, &gsc, br, bc, wb ? &gb : NULL, &gy)) ||
                                !dget(&e, LH_DTYPE_F32, yg, dy, M * N))
                                continue;
                            if (integer)
                                CMP_BITS(w2, LH_DTYPE_F32, yg, yc, M * N);
                            else
                                CMP(w2, yg, yc, M * N, 0.0, 0.0, tol);
                        }
                }
                env_drop(&e);
            }
    /* refused sources: the CPU's message, word for word */
    static const struct {
        int64_t at;
        float v;
        lh_dtype wdt, sdt, srcdt;
    } bad[5] = {{3 * 640 + 17, NAN, LH_DTYPE_INT8, LH_DTYPE_F32, LH_DTYPE_F32},
                {20 * 640 + 639, INFINITY, LH_DTYPE_FP8_E4M3, LH_DTYPE_F32, LH_DTYPE_F32},
                {5 * 640 + 40, 1.0e6f, LH_DTYPE_INT4, LH_DTYPE_F16, LH_DTYPE_F32},
                {7 * 640 + 3, NAN, LH_DTYPE_INT4, LH_DTYPE_F32, LH_DTYPE_BF16},
                {9 * 640 + 500, -INFINITY, LH_DTYPE_INT8, LH_DTYPE_F16, LH_DTYPE_F16}};
    for (int b = 0; b < 5; b++) {
        const lh_dtype srcdt = bad[b].srcdt;
        float *s2 = xcalloc((size_t)(N * K), sizeof(float));
        memcpy(s2, src, (size_t)(N * K) * sizeof(float));
        s2[bad[b].at] = bad[b].v;
        if (b == 0)
            s2[30 * 640 + 2] = INFINITY; /* a later one: the first is reported */
        if (srcdt != LH_DTYPE_F32) { /* the same values, narrowed in place (2 bytes each) */
            uint16_t *h = (uint16_t *)s2;
            for (int64_t i = 0; i < N * K; i++)
                h[i] = srcdt == LH_DTYPE_BF16 ? lh_k_f32_to_bf16(s2[i]) : lh_k_f32_to_f16(s2[i]);
        }
        const int64_t SR = N, SC = (K + 31) / 32;
        void *dsrc = dput(&e, srcdt, s2, N * K);
        void *dw = dnew(&e, (size_t)lh_k_dtype_bytes(bad[b].wdt, N * K));
        void *ds = dnew(&e, (size_t)lh_k_dtype_bytes(bad[b].sdt, SR * SC));
        lh_tensor hs = kt_t2(srcdt, s2, N, K), hw = kt_t2(bad[b].wdt, wc, N, K);
        lh_tensor hsc = kt_t2(bad[b].sdt, sc, SR, SC);
        lh_tensor gs = on_gpu(kt_t2(srcdt, dsrc, N, K)), gw = on_gpu(kt_t2(bad[b].wdt, dw, N, K));
        lh_tensor gsc = on_gpu(kt_t2(bad[b].sdt, ds, SR, SC));
        const lh_status stc = lh_k_quantize_scaled(e.c, &hs, 1, 32, &hw, &hsc);
        const lh_status stg = lh_k_quantize_scaled(e.g, &gs, 1, 32, &gw, &gsc);
        if (stc != LH_E_USAGE || stg != LH_E_USAGE)
            FAILF("refused source %d: status cpu %d, device %d (want %d)", b, (int)stc, (int)stg,
                  (int)LH_E_USAGE);
        else if (strcmp(lh_k_last_error(e.c), lh_k_last_error(e.g)) != 0)
            FAILF("refused source %d: cpu says \"%s\", device \"%s\"", b, lh_k_last_error(e.c),
                  lh_k_last_error(e.g));
        else if (!strstr(lh_k_last_error(e.c), bad[b].v == 1.0e6f ? "overflows f16"
                                                : isnan(bad[b].v) ? " is nan" : " is inf"))
            FAILF("refused source %d: \"%s\"", b, lh_k_last_error(e.c));
        compared++;
        env_drop(&e);
        free(s2);
    }
    free(src);
    free(srcb);
    free(srch);
    free(x);
    free(bias);
    free(wc);
    free(wg);
    free(sc);
    free(sg);
    free(dc);
    free(dg);
    free(yc);
    free(yg);
    free(tol);
    env_close(&e);
}

/* lh_k_moe_route and lh_k_scatter_add_rows against the CPU: the same experts chosen, weights
 * within 8 E 2^-24 relative (the device's expf and sequential sums against the CPU's vector
 * ones), every option (softmax / sigmoid, bias, both group scores, renormalization, scaling);
 * the scatter bit for bit; a row with NaN refused with the CPU's message. */
static void test_gpu_moe(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    static const struct {
        int64_t E;
        bool bias;
        lh_k_moe_route_params p;
    } cases[] = {
        {8, false, {.top_k = 2, .scoring = LH_K_MOE_SOFTMAX, .renormalize = true, .scale = 1.0f}},
        {60, false, {.top_k = 4, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f}},
        {64, false, {.top_k = 6, .scoring = LH_K_MOE_SOFTMAX, .n_group = 8, .topk_group = 3,
                     .group_score = LH_K_MOE_GROUP_MAX, .scale = 16.0f}},
        {256, true, {.top_k = 8, .scoring = LH_K_MOE_SIGMOID, .n_group = 8, .topk_group = 4,
                     .group_score = LH_K_MOE_GROUP_TOP2_SUM, .renormalize = true,
                     .renorm_eps = 1e-20f, .scale = 2.5f}},
    };
    const int64_t T = 300; /* more rows than a thread block */
    kt_seed(1801);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t E = cases[c].E, K = cases[c].p.top_k;
        float *lg = xcalloc((size_t)(T * E), sizeof(float)), *bias = xcalloc((size_t)E, sizeof(float));
        fill_uniform(lg, T * E, 4.0f);
        fill_uniform(bias, E, 0.2f);
        int32_t *ic = xcalloc((size_t)(T * K), sizeof(int32_t)), *ig = xcalloc((size_t)(T * K), sizeof(int32_t));
        float *wc = xcalloc((size_t)(T * K), sizeof(float)), *wg = xcalloc((size_t)(T * K), sizeof(float));
        void *dl = dput(&e, LH_DTYPE_F32, lg, T * E), *db = dput(&e, LH_DTYPE_F32, bias, E);
        lh_tensor hl = kt_t2(LH_DTYPE_F32, lg, T, E), hb = kt_t1(LH_DTYPE_F32, bias, E);
        lh_tensor gl = on_gpu(kt_t2(LH_DTYPE_F32, dl, T, E)), gb = on_gpu(kt_t1(LH_DTYPE_F32, db, E));
        char what[96];
        snprintf(what, sizeof what, "moe_route case %zu: ids", c);
        if (OK(e.c, lh_k_moe_route(e.c, &hl, cases[c].bias ? &hb : NULL, &cases[c].p, ic, wc)) &&
            OK(e.g, lh_k_moe_route(e.g, &gl, cases[c].bias ? &gb : NULL, &cases[c].p, ig, wg))) {
            CMP_IDS(what, ig, ic, T * K);
            snprintf(what, sizeof what, "moe_route case %zu: weights", c);
            CMP(what, wg, wc, T * K, 1e-30, 8.0 * (double)E * 0x1p-24, NULL);
        }
        env_drop(&e);
        free(lg);
        free(bias);
        free(ic);
        free(ig);
        free(wc);
        free(wg);
    }
    /* a NaN row: the CPU's message */
    {
        float lg[4 * 8];
        fill_uniform(lg, 32, 1.0f);
        lg[2 * 8 + 3] = NAN;
        int32_t ids[8];
        float w[8];
        void *dl = dput(&e, LH_DTYPE_F32, lg, 32);
        lh_tensor hl = kt_t2(LH_DTYPE_F32, lg, 4, 8), gl = on_gpu(kt_t2(LH_DTYPE_F32, dl, 4, 8));
        const lh_k_moe_route_params p = {.top_k = 2, .scoring = LH_K_MOE_SOFTMAX, .scale = 1.0f};
        const lh_status sc = lh_k_moe_route(e.c, &hl, NULL, &p, ids, w);
        const lh_status sg = lh_k_moe_route(e.g, &gl, NULL, &p, ids, w);
        if (sc != LH_E_USAGE || sg != LH_E_USAGE ||
            strcmp(lh_k_last_error(e.c), lh_k_last_error(e.g)) != 0)
            FAILF("moe_route NaN row: cpu %d \"%s\", device %d \"%s\"", (int)sc,
                  lh_k_last_error(e.c), (int)sg, lh_k_last_error(e.g));
        compared++;
        env_drop(&e);
    }
    /* scatter: repeated rows, with and without scales */
    const int64_t n = 9, R = 4, D = 300;
    static const int64_t rows[9] = {2, 0, 2, 3, 2, 1, 0, 3, 2};
    float sc[9], *src = xcalloc((size_t)(n * D), sizeof(float));
    float *yc = xcalloc((size_t)(R * D), sizeof(float)), *yg = xcalloc((size_t)(R * D), sizeof(float));
    fill_uniform(src, n * D, 1.0f);
    fill_uniform(sc, 9, 1.0f);
    for (int s = 0; s < 2; s++) {
        fill_uniform(yc, R * D, 1.0f);
        void *ds = dput(&e, LH_DTYPE_F32, src, n * D), *dy = dput(&e, LH_DTYPE_F32, yc, R * D);
        lh_tensor hs = kt_t2(LH_DTYPE_F32, src, n, D), hy = kt_t2(LH_DTYPE_F32, yc, R, D);
        lh_tensor gs = on_gpu(kt_t2(LH_DTYPE_F32, ds, n, D)), gy = on_gpu(kt_t2(LH_DTYPE_F32, dy, R, D));
        if (OK(e.c, lh_k_scatter_add_rows(e.c, &hs, rows, s ? NULL : sc, &hy)) &&
            OK(e.g, lh_k_scatter_add_rows(e.g, &gs, rows, s ? NULL : sc, &gy)) &&
            dget(&e, LH_DTYPE_F32, yg, dy, R * D))
            CMP_BITS(s ? "scatter_add_rows, no scales" : "scatter_add_rows, scaled",
                     LH_DTYPE_F32, yg, yc, R * D);
        env_drop(&e);
    }
    free(src);
    free(yc);
    free(yg);
    env_close(&e);
}

/* ---- multi-head latent attention: the absorbed decode over one latent ----------------------- */

/* One configuration of MLA's cache: one kv head of the latent (D = kv_lora_rank 512 + 64 rope
 * dims = 576, or 1024), the pool's v its k (gpool_alias: the writes pass v NULL and store the
 * keys and their summaries only), H query heads attending over it with v = k. History in two
 * writes, then the step's tokens; the pools compared (keys only); then both attend over the
 * CPU's pool, the mixed batch (the prefill kernel) and its decode rows only (the
 * flash-decoding kernel: every n_new <= 8). Fused RoPE in interleaved pairs over the first 64
 * dims when rope is set (keys rotated by the write, queries by the attention). Attention
 * against the CPU: 1e-4 absolute (|v| < 1.5), 5e-4 for an fp8 pool. */
static void mla_case(genv *e, lh_dtype dt, int64_t D, int64_t H, int64_t bs, bool rope_on,
                     lh_kv_layout lay)
{
    const int64_t KVH = 1, T = P_T, nq = T * H * D;
    char what[200];
    snprintf(what, sizeof what, "mla pool %s %s block %lld D %lld H %lld%s", dt_name(dt),
             lay == LH_KV_NHD ? "NHD" : "HND", (long long)bs, (long long)D, (long long)H,
             rope_on ? ", fused interleaved rope" : "");
    lh_rope rope;
    if (!OK(NULL, lh_k_rope_init(&rope, 64, 10000.0, NULL, 4096)))
        return;
    rope.interleaved = true;
    const lh_rope *rp = rope_on ? &rope : NULL;
    pbatch b;
    pbatch_init(&b, KVH, D, bs);
    gpool p;
    gpool_init(e, &p, dt, dt, lay, bs, KVH, D, b.NB, true);
    gpool_alias(&p);
    bool ok = pwrite_in_pieces(e, &p, &b, rp, what);

    float *q = xcalloc((size_t)nq, sizeof(float)), *oc = xcalloc((size_t)nq, sizeof(float));
    float *og = xcalloc((size_t)nq, sizeof(float));
    fill_uniform(q, nq, 1.0f);
    void *dq = dput(e, LH_DTYPE_F32, q, nq), *dout = dnew(e, (size_t)nq * sizeof(float));
    ok = ok && dq && dout && gpool_push(e, &p);
    int64_t n_dec[PSEQS];
    for (int s = 0; s < PSEQS; s++)
        n_dec[s] = b.n_new[s] <= 8 ? b.n_new[s] : 0;
    const bool fp8 = dt == LH_DTYPE_FP8_E4M3;
    for (int mode = 0; ok && mode < 2; mode++) {
        /* the softmax scale of DeepSeek's absorbed attention: 1 / sqrt(qk_head_dim 192) */
        lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = 1.0f / sqrtf(192.0f),
                                    .rope = rp};
        lh_paged_batch pb = {.struct_size = sizeof pb, .n_seqs = PSEQS, .token_start = b.tok0,
                             .n_new = mode ? n_dec : b.n_new, .kv_len = b.kv_len,
                             .positions = b.pos, .block_tables = b.tables,
                             .n_blocks = b.n_blocks};
        for (int64_t i = 0; i < nq; i++)
            oc[i] = SENTINEL; /* rows of no sequence stay SENTINEL on both */
        if (!dset(e, LH_DTYPE_F32, dout, oc, nq))
            break;
        lh_tensor hq = kt_t3(LH_DTYPE_F32, q, T, H, D), ho = kt_t3(LH_DTYPE_F32, oc, T, H, D);
        lh_tensor gq = on_gpu(kt_t3(LH_DTYPE_F32, dq, T, H, D));
        lh_tensor go = on_gpu(kt_t3(LH_DTYPE_F32, dout, T, H, D));
        char w2[280];
        snprintf(w2, sizeof w2, "%.200s: attention, %s", what,
                 mode ? "decode rows only" : "mixed batch");
        if (OK(e->c, lh_k_paged_attention_batch(e->c, &hq, &p.hkv, &pb, &prm, &ho)) &&
            OK(e->g, lh_k_paged_attention_batch(e->g, &gq, &p.dkv, &pb, &prm, &go)) &&
            dget(e, LH_DTYPE_F32, og, dout, nq))
            CMP(w2, og, oc, nq, fp8 ? 5e-4 : 1e-4, 0.0, NULL);
    }
    env_drop(e);
    free(q);
    free(oc);
    free(og);
    gpool_free(&p);
    pbatch_free(&b);
    lh_k_rope_free(&rope);
}

static void test_gpu_paged_mla(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(1919);
    mla_case(&e, LH_DTYPE_F32, 576, 16, 16, true, LH_KV_NHD);
    mla_case(&e, LH_DTYPE_BF16, 576, 16, 1, false, LH_KV_NHD);
    mla_case(&e, LH_DTYPE_FP8_E4M3, 576, 16, 16, true, LH_KV_HND);
    mla_case(&e, LH_DTYPE_F16, 1024, 20, 16, true, LH_KV_NHD); /* 20 heads: chunks of 7 */
    env_close(&e);
}

/* ---- per-head linear maps and strided copies ------------------------------------------------ */

/* A 3-dim view of dtype dt at element offset off of base, strides s0, s1, 1. */
static lh_tensor view3(lh_dtype dt, void *base, int64_t off, int64_t a, int64_t b, int64_t c,
                       int64_t s0, int64_t s1)
{
    lh_tensor t = kt_t3(dt, (char *)base + (size_t)off * dt_size(dt), a, b, c);
    t.stride[0] = s0;
    t.stride[1] = s1;
    t.stride[2] = 1;
    return t;
}

/* lh_k_matmul_heads over views, both modes (w [H, N, K] transposed, w [H, K, N] as it is),
 * f32 / bf16 / f16 weights: x a slice of wider rows, each head's weight a block of a larger
 * (fused) projection at a row and column offset, y a slice of wider rows whose other elements
 * stay untouched (SENTINEL on both sides). Variants: x broadcast over the heads (stride 0), one
 * weight for every head (stride 0). Shapes: decode (T 1, MLA's 128 -> 512 absorption and
 * 512 -> 128), T 16 and 17 (either side of the tile change), a prefill of 40; K and N not
 * multiples of the tiles; K = 0 (zeros). Against the CPU: 2 K 2^-24 sum_k |x w| per element
 * (the contract). */
static void test_gpu_matmul_heads(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2020);
    static const struct {
        int64_t T, H, K, N;
    } cases[6] = {{1, 16, 128, 512}, {1, 8, 512, 128}, {16, 3, 77, 100}, {17, 2, 33, 130},
                  {40, 4, 200, 70},  {3, 2, 0, 5}};
    static const lh_dtype wdts[3] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    for (int ci = 0; ci < 6; ci++)
        for (int di = 0; di < 3; di++)
            for (int kn = 0; kn < 2; kn++)
                for (int var = 0; var < 3; var++) {
                    const int64_t T = cases[ci].T, H = cases[ci].H, K = cases[ci].K;
                    const int64_t N = cases[ci].N;
                    const lh_dtype dt = wdts[di];
                    /* x rows of K + 7 (offset 3); w heads of RA rows of LB (row 1, column 2);
                     * y rows of N + 9 (offset 2) */
                    const int64_t XL = K + 7, A = kn ? K : N, B = kn ? N : K;
                    const int64_t RA = A + 3, LB = B + 5, YL = N + 9;
                    const int64_t nx = T * H * XL, nw = H * RA * LB, ny = T * H * YL;
                    const bool xb = var == 1, wb = var == 2;
                    float *x = xcalloc((size_t)nx, sizeof(float));
                    float *wref = xcalloc((size_t)nw, sizeof(float));
                    void *w = xcalloc((size_t)nw, sizeof(float));
                    float *yc = xcalloc((size_t)ny, sizeof(float));
                    float *yg = xcalloc((size_t)ny, sizeof(float));
                    double *tol = xcalloc((size_t)ny, sizeof(double));
                    fill_uniform(x, nx, 1.0f);
                    kt_fill_w(dt, w, wref, nw, 1.0f);
                    for (int64_t i = 0; i < ny; i++)
                        yc[i] = SENTINEL;
                    const int64_t xs0 = H * XL, xs1 = xb ? 0 : XL;
                    const int64_t ws0 = wb ? 0 : RA * LB, woff = LB + 2;
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t n = 0; n < N; n++) {
                                double sa = 0;
                                for (int64_t k = 0; k < K; k++) {
                                    const int64_t wi = woff + h * ws0 +
                                                       (kn ? k * LB + n : n * LB + k);
                                    sa += fabs((double)x[t * xs0 + h * xs1 + 3 + k]) *
                                          fabs((double)wref[wi]);
                                }
                                tol[(t * H + h) * YL + 2 + n] = 2.0 * (double)K * 0x1p-24 * sa;
                            }
                    void *dx = dput(&e, LH_DTYPE_F32, x, nx), *dw = dput(&e, dt, w, nw);
                    void *dy = dput(&e, LH_DTYPE_F32, yc, ny);
                    const lh_tensor hx = view3(LH_DTYPE_F32, x, 3, T, H, K, xs0, xs1);
                    const lh_tensor hw = view3(dt, w, woff, H, A, B, ws0, LB);
                    lh_tensor hy = view3(LH_DTYPE_F32, yc, 2, T, H, N, H * YL, YL);
                    const lh_tensor gx = on_gpu(view3(LH_DTYPE_F32, dx, 3, T, H, K, xs0, xs1));
                    const lh_tensor gw = on_gpu(view3(dt, dw, woff, H, A, B, ws0, LB));
                    lh_tensor gy = on_gpu(view3(LH_DTYPE_F32, dy, 2, T, H, N, H * YL, YL));
                    char what[200];
                    snprintf(what, sizeof what,
                             "matmul_heads w %s %s T %lld H %lld K %lld N %lld%s", dt_name(dt),
                             kn ? "[H, K, N]" : "[H, N, K]", (long long)T, (long long)H,
                             (long long)K, (long long)N,
                             xb ? ", x broadcast over heads" : wb ? ", one weight for all heads"
                                                                 : "");
                    if (OK(e.c, lh_k_matmul_heads(e.c, &hx, &hw, kn != 0, &hy)) &&
                        OK(e.g, lh_k_matmul_heads(e.g, &gx, &gw, kn != 0, &gy)) &&
                        dget(&e, LH_DTYPE_F32, yg, dy, ny))
                        CMP(what, yg, yc, ny, 0.0, 0.0, tol); /* outside y: SENTINEL, exact */
                    env_drop(&e);
                    free(x);
                    free(wref);
                    free(w);
                    free(yc);
                    free(yg);
                    free(tol);
                }
    env_close(&e);
}

/* lh_k_copy_view: 1 to 4 dims, dst a slice of a larger buffer (its other elements untouched),
 * src strided and broadcast (stride 0: MLA's one rope key for every head). Bit for bit. */
static void test_gpu_copy_view(void)
{
    NEED_GPU();
    genv e;
    if (!env_open(&e))
        return;
    kt_seed(2121);
    static const struct {
        int nd;
        int64_t shape[4], ds[4], ss[4], doff, soff;
    } cases[6] = {
        {1, {1000}, {1}, {1}, 5, 3},
        {2, {7, 130}, {200, 1}, {150, 1}, 11, 0},
        {2, {9, 64}, {64, 1}, {0, 1}, 0, 17},                   /* one row repeated */
        {3, {3, 5, 64}, {5 * 192, 192, 1}, {64, 0, 1}, 128, 0}, /* k_pe into [.., 128 + 64] */
        {3, {4, 6, 33}, {400, 40, 1}, {0, 33, 1}, 1, 2},
        {4, {2, 3, 4, 33}, {1000, 300, 70, 1}, {0, 40, 0, 1}, 7, 5},
    };
    for (int ci = 0; ci < 6; ci++) {
        const int nd = cases[ci].nd;
        int64_t dn = 1, sn = 1; /* buffer sizes: one past the last element of each view */
        for (int i = 0; i < nd; i++) {
            dn += (cases[ci].shape[i] - 1) * cases[ci].ds[i];
            sn += (cases[ci].shape[i] - 1) * cases[ci].ss[i];
        }
        dn += cases[ci].doff + 3;
        sn += cases[ci].soff;
        float *src = xcalloc((size_t)sn, sizeof(float)), *dc = xcalloc((size_t)dn, sizeof(float));
        float *dg = xcalloc((size_t)dn, sizeof(float));
        fill_uniform(src, sn, 4.0f);
        for (int64_t i = 0; i < dn; i++)
            dc[i] = SENTINEL;
        void *ds = dput(&e, LH_DTYPE_F32, src, sn), *dd = dput(&e, LH_DTYPE_F32, dc, dn);
        lh_tensor hs = lh_tensor_cpu(LH_DTYPE_F32, src + cases[ci].soff, nd, cases[ci].shape);
        lh_tensor hd = lh_tensor_cpu(LH_DTYPE_F32, dc + cases[ci].doff, nd, cases[ci].shape);
        lh_tensor gs = on_gpu(lh_tensor_cpu(LH_DTYPE_F32, (float *)ds + cases[ci].soff, nd,
                                            cases[ci].shape));
        lh_tensor gd = on_gpu(lh_tensor_cpu(LH_DTYPE_F32, (float *)dd + cases[ci].doff, nd,
                                            cases[ci].shape));
        for (int i = 0; i < nd; i++) {
            hs.stride[i] = gs.stride[i] = cases[ci].ss[i];
            hd.stride[i] = gd.stride[i] = cases[ci].ds[i];
        }
        char what[96];
        snprintf(what, sizeof what, "copy_view case %d (%d dims)", ci, nd);
        if (OK(e.c, lh_k_copy_view(e.c, &hd, &hs)) && OK(e.g, lh_k_copy_view(e.g, &gd, &gs)) &&
            dget(&e, LH_DTYPE_F32, dg, dd, dn))
            CMP_BITS(what, LH_DTYPE_F32, dg, dc, dn);
        env_drop(&e);
        free(src);
        free(dc);
        free(dg);
    }
    env_close(&e);
}

static CU_TestInfo nogpu_tests[] = {
    {"device count 0 comes with a reason", test_reason_when_unavailable},
    {"a CUDA context without a device is refused, naming cuda and the reason",
     test_cuda_ctx_refused},
    {"device info outside the devices: LH_E_UNSUPPORTED", test_device_info_without_device},
    {"a CUDA tensor on a CPU context: LH_E_USAGE naming both devices", test_cuda_tensor_on_cpu_ctx},
    {"graphs on a CPU context: LH_E_UNSUPPORTED", test_graph_on_cpu_ctx},
    {"alloc / copy / memzero / free on a CPU context", test_cpu_alloc_copy_free},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo gpu_tests[] = {
    {"context, device memory, transfers", test_gpu_context_and_memory},
    {"matmul f32 / bf16 / f16 weights, GEMV and cuBLAS paths", test_gpu_matmul},
    {"embedding, every table dtype", test_gpu_embedding},
    {"gather_rows", test_gpu_gather_rows},
    {"rmsnorm and add_rmsnorm, aliasing, offsets", test_gpu_rmsnorm},
    {"silu_mul, aliasing", test_gpu_silu_mul},
    {"softmax", test_gpu_softmax},
    {"argmax, ties", test_gpu_argmax},
    {"convert, all six directions", test_gpu_convert},
    {"rope_apply: default, partial, linear, dynamic, llama3, yarn, longrope; both pair layouts",
     test_gpu_rope},
    {"attention: contiguous, GQA, sliding window, Dv != D", test_gpu_attention},
    {"attention_positions: ring, window, sinks, empty slots", test_gpu_attention_positions},
    {"attention, both entry points: logit soft-capping", test_gpu_attention_softcap},
    {"gelu_tanh_mul, aliasing", test_gpu_gelu_tanh_mul},
    {"scale", test_gpu_scale},
    {"paged kv write + attention batch, NHD", test_gpu_paged_nhd},
    {"paged kv write + attention batch, HND", test_gpu_paged_hnd},
    {"paged: calls beyond the bounds are refused", test_gpu_bounds_refused},
    {"paged attention batch: logit soft-capping (decode, prefill, sparse)",
     test_gpu_paged_softcap},
    {"sampling: ids and probabilities", test_gpu_sampling},
    {"CUDA graphs: capture, replay with new inputs", test_gpu_graph},
    {"layernorm: w/b dtypes, no bias, aliasing", test_gpu_layernorm},
    {"gelu, gelu_tanh, gelu_mul, aliasing", test_gpu_gelus},
    {"softcap, add (y == x too)", test_gpu_softcap_add},
    {"embedding_add, every table dtype", test_gpu_embedding_add},
    {"CUDA graphs: embedding_add ids staged in the dry run", test_gpu_nn_graph},
    {"dequantize: every ggml block type, bit-identical to gguf-py and the CPU",
     test_gpu_dequantize},
    {"block types: embedding(_add) bit-identical to the CPU, matmul within rounding of its exact "
     "path",
     test_gpu_block_types},
    {"weights with scale tensors: quantize, dequantize, matmul (int8 / int4 / fp8)",
     test_gpu_scaled},
    {"moe: route (every option) and scatter_add_rows", test_gpu_moe},
    {"paged MLA: one latent kv head (576, 1024), v = k, keys-only writes, interleaved rope",
     test_gpu_paged_mla},
    {"matmul_heads: both weight layouts, f32 / bf16 / f16, strided and broadcast views",
     test_gpu_matmul_heads},
    {"copy_view: 1 to 4 dims, strided, broadcast", test_gpu_copy_view},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cuda without a device", NULL, NULL, NULL, NULL, nogpu_tests},
    {"cuda kernels vs cpu", NULL, NULL, NULL, NULL, gpu_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
