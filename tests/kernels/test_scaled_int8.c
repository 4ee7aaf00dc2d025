/* Kernel library: lh_k_matmul_scaled's integer-dot path -- int8 weights with one scale per row
 * (block_cols >= K) in the default LH_K_QMM_INT8 mode (the scheme: kernels/cpu/scaled.h).
 *
 *  - bit for bit equal to a reference of the scheme written here (rows of x quantized to int8
 *    with one scale each, exact integer sums in int64, y = (float)isum * (s * d) + bias), on
 *    every ISA and 1 and 2 threads, GEMV and GEMM, K with and without vector tails, per-channel
 *    and per-tensor scales, f32 and f16 scales, every bias dtype, weights over all of -128..127;
 *  - sums beyond int32 (K 600001 of 127 * 127), exact on every ISA;
 *  - the derived error bound against a double-precision product of x and dequant(w):
 *    |y - y_exact| <= |s| d / 2 (1 + 2^-14) sum |w| + 2^-22 (|y| + |bias|), reached within 2% by
 *    a constructed worst case;
 *  - rows of x holding NaN or inf give NaN rows; a zero row gives the bias;
 *  - the mode: LH_K_QMM_EXACT, or any other weight (int8 groups, int4, fp8), stays bit-identical
 *    to dequantize + f32 matmul. */
#include "stest.h"

/* The scheme, step 1: one row of x into q[K]; returns d. */
static float ref_quant_row(const float *x, int64_t K, int8_t *q)
{
    float amax = 0.0f;
    bool finite = true;
    for (int64_t k = 0; k < K; k++) {
        finite = finite && isfinite(x[k]);
        amax = fmaxf(amax, fabsf(x[k]));
    }
    if (!finite || amax < 0x1p-120f) {
        memset(q, 0, (size_t)K);
        return finite ? 0.0f : NAN;
    }
    const float id = 127.0f / amax;
    for (int64_t k = 0; k < K; k++)
        q[k] = (int8_t)rintf(x[k] * id);
    return amax / 127.0f;
}

static float bias_val(lh_dtype dt, const void *b, int64_t i)
{
    return dt == LH_DTYPE_BF16  ? lh_k_bf16_to_f32(((const uint16_t *)b)[i])
           : dt == LH_DTYPE_F16 ? lh_k_f16_to_f32(((const uint16_t *)b)[i])
                                : ((const float *)b)[i];
}

/* Steps 2-3: y [M, N] */
static void ref_int8(const float *x, const int8_t *w, lh_dtype sdt, const void *scale, int64_t br,
                     const void *bias, lh_dtype bdt, int64_t M, int64_t K, int64_t N, float *y)
{
    int8_t *q = malloc((size_t)K + 1);
    for (int64_t m = 0; m < M; m++) {
        const float d = ref_quant_row(x + m * K, K, q);
        for (int64_t n = 0; n < N; n++) {
            int64_t isum = 0;
            for (int64_t k = 0; k < K; k++)
                isum += (int64_t)w[n * K + k] * q[k];
            const float s = st_scale_at(sdt, scale, (size_t)(n / br));
            float v = (float)isum * (s * d);
            if (bias)
                v = v + bias_val(bdt, bias, n);
            y[m * N + n] = v;
        }
    }
    free(q);
}

static lh_status run_mms(lh_kctx *ctx, const float *x, lh_dtype wdt, const void *w, lh_dtype sdt,
                         const void *scale, int64_t br, int64_t bc, const void *bias, lh_dtype bdt,
                         float *y, int64_t M, int64_t K, int64_t N)
{
    lh_tensor xt = kt_t2(LH_DTYPE_F32, (void *)x, M, K), wt = kt_t2(wdt, (void *)w, N, K);
    lh_tensor st = kt_t2(sdt, (void *)scale, st_ceil(N, br), st_ceil(K, bc));
    lh_tensor bt = kt_t1(bdt, (void *)bias, N), yt = kt_t2(LH_DTYPE_F32, y, M, N);
    lh_status s = lh_k_matmul_scaled(ctx, &xt, &wt, &st, br, bc, bias ? &bt : NULL, &yt);
    if (s != LH_OK)
        printf("\n    lh_k_matmul_scaled failed: %s", lh_k_last_error(ctx));
    return s;
}

struct i8case {
    int64_t M, K, N, br; /* br 0: one scale for the whole tensor */
    lh_dtype sdt;
    int bias_kind;       /* 0 none, 1 f32, 2 bf16, 3 f16 */
};

static long int8_case(lh_kctx *const *ctxs, const struct i8case *c)
{
    static const lh_dtype bias_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    const int64_t M = c->M, K = c->K, N = c->N, br = c->br ? c->br : N;
    uint8_t *w = st_random_w(LH_DTYPE_INT8, N, K, true);
    void *scale = st_random_scale(c->sdt, st_ceil(N, br));
    float *x = malloc((size_t)(M * K) * sizeof(float) + 4);
    float *yref = malloc((size_t)(M * N) * sizeof(float) + 4);
    float *y = malloc((size_t)(M * N) * sizeof(float) + 4);
    float bref[256];
    uint32_t bstore[256];
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform() * (i % 7 == 3 ? 8.0f : 1.0f);
    const lh_dtype bdt = c->bias_kind > 0 ? bias_dts[c->bias_kind - 1] : LH_DTYPE_F32;
    if (c->bias_kind > 0)
        kt_fill_w(bdt, bstore, bref, N, 1.0f);
    const void *bias = c->bias_kind > 0 ? bstore : NULL;
    ref_int8(x, (const int8_t *)w, c->sdt, scale, br, bias, bdt, M, K, N, yref);
    long bad = 0;
    for (int t = 0; t < 2; t++) {
        memset(y, 0xff, (size_t)(M * N) * sizeof(float));
        CU_ASSERT_EQUAL(run_mms(ctxs[t], x, LH_DTYPE_INT8, w, c->sdt, scale, br, K, bias, bdt, y, M,
                                K, N),
                        LH_OK);
        char what[160];
        snprintf(what, sizeof what, "M %lld K %lld N %lld br %lld %s scales, bias %d, %d threads",
                 (long long)M, (long long)K, (long long)N, (long long)br, lh_k_dtype_name(c->sdt),
                 c->bias_kind, lh_k_ctx_threads(ctxs[t]));
        if (memcmp(y, yref, (size_t)(M * N) * sizeof(float)) != 0) {
            bad++;
            st_same_bits(what, y, yref, M * N);
        }
    }
    free(w);
    free(scale);
    free(x);
    free(yref);
    free(y);
    return bad;
}

static void int8_path_reference(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctxs[0]), LH_K_QMM_INT8); /* the default */
    kt_seed(501 + (uint64_t)isa);
    static const struct i8case cases[] = {
        {1, 300, 200, 1, LH_DTYPE_F32, 0},  {1, 2048, 64, 1, LH_DTYPE_F16, 1},
        {3, 77, 129, 1, LH_DTYPE_F32, 2},   {5, 64, 33, 0, LH_DTYPE_F32, 3},
        {70, 1280, 50, 1, LH_DTYPE_F16, 1}, {2, 1, 3, 1, LH_DTYPE_F32, 0},
        {4, 31, 17, 5, LH_DTYPE_F16, 3},    {9, 129, 7, 0, LH_DTYPE_F16, 2},
        {1, 33, 5, 2, LH_DTYPE_F32, 1},     {130, 96, 40, 1, LH_DTYPE_F32, 0},
    };
    long bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        bad += int8_case(ctxs, &cases[i]);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(int8_path_reference)

/* |isum| far beyond int32: K 600001 (two whole LH_SQ_CHUNKs and a vector tail) of 127 * 127
 * and -128 * 127 */
static void int8_path_long_rows(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int64_t M = 2, K = 600001, N = 3;
    int8_t *w = malloc((size_t)(N * K));
    float *x = malloc((size_t)(M * K) * sizeof(float));
    for (int64_t k = 0; k < K; k++) {
        w[k] = 127;
        w[K + k] = -128;
        w[2 * K + k] = (int8_t)(k % 2 ? 127 : -128);
        x[k] = 1.0f;
        x[K + k] = k % 3 ? -2.0f : 2.0f;
    }
    const float s[3] = {1e-6f, 2e-6f, 3e-6f};
    float y[6], yref[6];
    ref_int8(x, w, LH_DTYPE_F32, s, 1, NULL, LH_DTYPE_F32, M, K, N, yref);
    CU_ASSERT_EQUAL(run_mms(ctx, x, LH_DTYPE_INT8, w, LH_DTYPE_F32, s, 1, K, NULL, LH_DTYPE_F32, y,
                            M, K, N),
                    LH_OK);
    CU_ASSERT_TRUE(st_same_bits("K 600001", y, yref, M * N));
    /* 127 * 127 * 600001 = 9677416129 > 2^31, times 1e-6 * (1 / 127) */
    CU_ASSERT_TRUE(fabsf(y[0] - 127.0f * 600001.0f * 1e-6f) < 1e-2f);
    free(w);
    free(x);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(int8_path_long_rows)

/* ---- the error bound ------------------------------------------------------------------------- */

/* y [M, N] against sum_k x * (w * s) + bias in double, with the bound of the header; returns the
 * worst error / bound and the worst error relative to sum |w s x|. */
static long check_bound(const float *x, const int8_t *w, const float *s, const float *b,
                        const float *y, int64_t M, int64_t K, int64_t N, double *worst,
                        double *worst_rel)
{
    long bad = 0;
    int8_t *q = malloc((size_t)K);
    for (int64_t m = 0; m < M; m++) {
        const float d = ref_quant_row(x + m * K, K, q);
        for (int64_t n = 0; n < N; n++) {
            double exact = b ? b[n] : 0.0, sw = 0.0, swx = 0.0;
            for (int64_t k = 0; k < K; k++) {
                exact += (double)x[m * K + k] * ((double)w[n * K + k] * s[n]);
                sw += fabs((double)w[n * K + k]);
                swx += fabs((double)w[n * K + k] * s[n] * x[m * K + k]);
            }
            const double yv = y[m * N + n];
            const double tol = fabs((double)s[n]) * d / 2.0 * (1.0 + 0x1p-14) * sw +
                               0x1p-22 * (fabs(yv) + (b ? fabs((double)b[n]) : 0.0));
            const double err = fabs(yv - exact);
            if (!(err <= tol)) {
                if (bad++ < 3)
                    printf("\n    y[%lld, %lld] = %.9g, exact %.9g: err %.3g > bound %.3g",
                           (long long)m, (long long)n, yv, exact, err, tol);
            }
            if (err / tol > *worst)
                *worst = err / tol;
            if (swx > 0 && err / swx > *worst_rel)
                *worst_rel = err / swx;
        }
    }
    free(q);
    return bad;
}

static void test_int8_path_error_bound(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(521);
    const int64_t M = 9, K = 1000, N = 40;
    int8_t *w = (int8_t *)st_random_w(LH_DTYPE_INT8, N, K, true);
    float *x = malloc((size_t)(M * K) * sizeof(float)), s[40], b[40], y[9 * 40];
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    for (int n = 0; n < N; n++) {
        s[n] = kt_range(1e-3f, 1e-1f) * (n % 2 ? -1.0f : 1.0f);
        b[n] = kt_uniform();
    }
    /* row 0, the constructed worst case: x[0] = 127 makes d = 1 exactly; every other x is an
     * integer plus 0.49 toward w's sign, so each |x - d q| = 0.49 adds up with w: the error is
     * 0.98 of the bound */
    for (int64_t k = 1; k < K; k++) {
        const int8_t wk = w[k]; /* weight row 0 */
        x[k] = (float)((k * 13) % 100 - 50) + (wk >= 0 ? 0.49f : -0.49f);
    }
    x[0] = 127.0f;
    CU_ASSERT_EQUAL(run_mms(ctx, x, LH_DTYPE_INT8, w, LH_DTYPE_F32, s, 1, K, b, LH_DTYPE_F32, y, M,
                            K, N),
                    LH_OK);
    double worst = 0, worst_rel = 0;
    CU_ASSERT_EQUAL(check_bound(x, w, s, b, y, 1, K, N, &worst, &worst_rel), 0);
    CU_ASSERT_TRUE(worst > 0.95); /* the bound is reached (y[0, 0]) */
    worst = worst_rel = 0;
    CU_ASSERT_EQUAL(check_bound(x + K, w, s, b, y + N, M - 1, K, N, &worst, &worst_rel), 0);
    printf("\n    uniform x: worst error %.3g of the bound, %.3g of sum |w s x| ", worst, worst_rel);
    CU_ASSERT_TRUE(worst > 0.0 && worst < 1.0);
    free(w);
    free(x);
    lh_k_ctx_free(ctx);
}

/* A row with NaN or inf gives NaN outputs (only there); a zero row gives the bias exactly. */
static void test_int8_path_special_rows(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(531);
    const int64_t M = 4, K = 70, N = 6;
    int8_t *w = (int8_t *)st_random_w(LH_DTYPE_INT8, N, K, true);
    float x[4 * 70], y[4 * 6], yref[4 * 6], s[6], b[6];
    for (int i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    for (int n = 0; n < N; n++) {
        s[n] = 0.01f;
        b[n] = (float)n - 2.5f;
    }
    x[1 * K + 33] = NAN;
    x[2 * K + 69] = -INFINITY;
    memset(x + 3 * K, 0, (size_t)K * sizeof(float));
    CU_ASSERT_EQUAL(run_mms(ctx, x, LH_DTYPE_INT8, w, LH_DTYPE_F32, s, 1, K, b, LH_DTYPE_F32, y, M,
                            K, N),
                    LH_OK);
    ref_int8(x, w, LH_DTYPE_F32, s, 1, b, LH_DTYPE_F32, M, K, N, yref);
    CU_ASSERT_TRUE(st_same_bits("special rows", y, yref, M * N));
    for (int n = 0; n < N; n++) {
        CU_ASSERT_TRUE(isfinite(y[n]));
        CU_ASSERT_TRUE(isnan(y[N + n]) && isnan(y[2 * N + n]));
        CU_ASSERT_EQUAL(y[3 * N + n], b[n]);
    }
    free(w);
    lh_k_ctx_free(ctx);
}

/* LH_K_QMM_EXACT takes the decoded f32 path for the same weight; in the default mode, int8
 * groups (block_cols < K), int4 and fp8 stay on it too. */
static void test_int8_path_mode(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(541);
    const int64_t M = 3, K = 256, N = 20;
    float *x = malloc((size_t)(M * K) * sizeof(float)), *wf = malloc((size_t)(N * K) * sizeof(float));
    float y[3 * 20], yref[3 * 20];
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        for (int g = 0; g < 2; g++) {
            const lh_dtype wdt = st_wdts[wi];
            const int64_t bc = g ? 32 : K;
            uint8_t *w = st_random_w(wdt, N, K, true);
            void *scale = st_random_scale(LH_DTYPE_F32, N * st_ceil(K, bc));
            lh_tensor wt = kt_t2(wdt, w, N, K), st = kt_t2(LH_DTYPE_F32, scale, N, st_ceil(K, bc));
            lh_tensor wft = kt_t2(LH_DTYPE_F32, wf, N, K), xt = kt_t2(LH_DTYPE_F32, x, M, K);
            lh_tensor yt = kt_t2(LH_DTYPE_F32, yref, M, N);
            CU_ASSERT_EQUAL(lh_k_dequantize_scaled(ctx, &wt, &st, 1, bc, &wft), LH_OK);
            CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wft, NULL, &yt), LH_OK);
            for (int mode = 0; mode < 2; mode++) {
                CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(ctx, mode ? LH_K_QMM_EXACT : LH_K_QMM_INT8),
                                LH_OK);
                CU_ASSERT_EQUAL(run_mms(ctx, x, wdt, w, LH_DTYPE_F32, scale, 1, bc, NULL,
                                        LH_DTYPE_F32, y, M, K, N),
                                LH_OK);
                const bool same = memcmp(y, yref, sizeof y) == 0;
                /* only int8 per channel in int8 mode leaves the f32 path */
                const bool int_path = wdt == LH_DTYPE_INT8 && !g && !mode;
                if (same == int_path)
                    printf("\n    %s bc %lld mode %s: %s the f32 path's bits", lh_k_dtype_name(wdt),
                           (long long)bc, lh_k_qmm_name(lh_k_ctx_quant_matmul(ctx)),
                           same ? "unexpectedly matches" : "differs from");
                CU_ASSERT_NOT_EQUAL(same, int_path);
            }
            free(w);
            free(scale);
        }
    free(x);
    free(wf);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo int8_tests[] = {
    {"int8 path == reference of its scheme, bit for bit [scalar]", int8_path_reference_scalar},
    {"int8 path == reference of its scheme, bit for bit [avx2]", int8_path_reference_avx2},
    {"int8 path == reference of its scheme, bit for bit [avx512]", int8_path_reference_avx512},
    {"int8 path: sums beyond int32 (K 600001) [scalar]", int8_path_long_rows_scalar},
    {"int8 path: sums beyond int32 (K 600001) [avx2]", int8_path_long_rows_avx2},
    {"int8 path: sums beyond int32 (K 600001) [avx512]", int8_path_long_rows_avx512},
    {"int8 path within its derived error bound (reached by a constructed case)",
     test_int8_path_error_bound},
    {"int8 path: NaN / inf rows give NaN, a zero row the bias", test_int8_path_special_rows},
    {"int8 path taken only for int8 per-row scales in int8 mode", test_int8_path_mode},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: int8 weights with scales, integer dots", NULL, NULL, NULL, NULL, int8_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
