/* Kernel library: lh_k_matmul with a bf16 weight on AMX-BF16 tiles (LH_K_BF16MM_TILES, the
 * default, on LH_K_ISA_AMX with M >= 16; lh_kernels.h lh_k_bf16mm):
 *
 *  - the mode: default tiles, setter, getter, names, refused values;
 *  - against the definition: each output within f32 rounding of sum_k bf16(x) w in double,
 *        |y - ref| <= (2 K + 8) 2^-24 sum_k |bf16(x) w|
 *    and within 2^-8 sum |w||x| (+ twice that) of the exact path (bf16 keeps 8 significant bits); the measured maxima are printed;
 *  - M (>= 16), tiling and thread count do not change a row's bits: rows of M = 70 equal the
 *    same rows computed as M = 16 .. 33, on 1 and 2 threads;
 *  - shapes around the tiles (M 16, 17, 33, 70; N 1, 5, 33, 100; K 2, 30, 32, 64, 576, 1000:
 *    K not a multiple of 32 and panels of fewer than 32 rows take the padded copy), each bias
 *    dtype; an inf in x makes its row non-finite and leaves the others finite;
 *  - the exact path where the tiles do not apply (LH_K_BF16MM_EXACT, M < 16): the AVX-512
 *    context's bits.
 * Skipped where the CPU or OS gives no AMX-BF16. */
#include "ktest.h"

static bool have_amx(void)
{
    /* every CPU with AMX-INT8 so far has AMX-BF16 and AVX512-BF16 too (Sapphire Rapids on) */
    if (kt_isa_supported(LH_K_ISA_AMX))
        return true;
    LH_TEST_SKIP("AMX (tiles, bf16, the OS's permission) not available");
    return false;
}

static lh_status mm(lh_kctx *ctx, const uint16_t *w, const float *x, const void *b, lh_dtype bdt,
                    float *y, int64_t M, int64_t K, int64_t N)
{
    lh_tensor xt = kt_t2(LH_DTYPE_F32, (void *)x, M, K);
    lh_tensor wt = kt_t2(LH_DTYPE_BF16, (void *)w, N, K);
    lh_tensor bt = kt_t1(bdt, (void *)b, N);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, M, N);
    lh_status st = lh_k_matmul(ctx, &xt, &wt, b ? &bt : NULL, &yt);
    if (st != LH_OK)
        printf("\n    lh_k_matmul (w bf16) failed: %s", lh_k_last_error(ctx));
    return st;
}

static void test_bf16mm_mode(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_bf16_matmul(ctx), LH_K_BF16MM_TILES);
    CU_ASSERT_EQUAL(lh_k_ctx_bf16_matmul(NULL), LH_K_BF16MM_TILES);
    CU_ASSERT_STRING_EQUAL(lh_k_bf16mm_name(LH_K_BF16MM_TILES), "tiles");
    CU_ASSERT_STRING_EQUAL(lh_k_bf16mm_name(LH_K_BF16MM_EXACT), "exact");
    CU_ASSERT_PTR_NULL(lh_k_bf16mm_name((lh_k_bf16mm)7));
    CU_ASSERT_EQUAL(lh_k_ctx_set_bf16_matmul(ctx, LH_K_BF16MM_EXACT), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_bf16_matmul(ctx), LH_K_BF16MM_EXACT);
    CU_ASSERT_EQUAL(lh_k_ctx_set_bf16_matmul(ctx, (lh_k_bf16mm)7), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "7 is not an lh_k_bf16mm value"));
    CU_ASSERT_EQUAL(lh_k_ctx_bf16_matmul(ctx), LH_K_BF16MM_EXACT);
    CU_ASSERT_EQUAL(lh_k_ctx_set_bf16_matmul(NULL, LH_K_BF16MM_EXACT), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "ctx is NULL"));
    lh_k_ctx_free(ctx);
}

/* One shape: the tiles' y against the double reference and the exact path, on 1 and 2
 * threads (the same bits). Returns the failures. */
static long check_shape(lh_kctx *amx[2], lh_kctx *exact, int64_t M, int64_t K, int64_t N,
                        int bias_kind, double *worst_ref, double *worst_exact)
{
    static const lh_dtype bias_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    float *x = malloc((size_t)(M * K) * sizeof(float)), *wf = malloc((size_t)(N * K) * sizeof(float));
    uint16_t *w = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *y = malloc((size_t)(M * N) * sizeof(float)), *y2 = malloc((size_t)(M * N) * sizeof(float));
    float *yx = malloc((size_t)(M * N) * sizeof(float)), *bref = malloc((size_t)N * sizeof(float));
    void *bstore = malloc((size_t)N * 4);
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    kt_fill_w(LH_DTYPE_BF16, w, wf, N * K, 0.5f);
    const lh_dtype bdt = bias_kind ? bias_dts[bias_kind - 1] : LH_DTYPE_F32;
    if (bias_kind)
        kt_fill_w(bdt, bstore, bref, N, 1.0f);
    const void *bias = bias_kind ? bstore : NULL;
    long bad = 0;
    bad += mm(amx[0], w, x, bias, bdt, y, M, K, N) != LH_OK;
    bad += mm(amx[1], w, x, bias, bdt, y2, M, K, N) != LH_OK;
    bad += mm(exact, w, x, bias, bdt, yx, M, K, N) != LH_OK;
    if (memcmp(y, y2, (size_t)(M * N) * sizeof(float)) != 0) {
        printf("\n    M %lld K %lld N %lld: 1 and 2 threads differ", (long long)M, (long long)K,
               (long long)N);
        bad++;
    }
    long fails = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double ref = bias ? bref[n] : 0.0, sab = 0, sx = 0;
            for (int64_t k = 0; k < K; k++) {
                const double xb = kt_round_to(LH_DTYPE_BF16, x[m * K + k]);
                ref += xb * wf[n * K + k];
                sab += fabs(xb * wf[n * K + k]);
                sx += fabs((double)x[m * K + k] * wf[n * K + k]);
            }
            const double tol = (2.0 * (double)K + 8.0) * 0x1p-24 * (sab + (bias ? fabs(bref[n]) : 0));
            const double d = fabs((double)y[m * N + n] - ref);
            const double dx = fabs((double)y[m * N + n] - (double)yx[m * N + n]);
            const double tolx = 0x1p-8 * sx + 2.0 * tol;
            if (!(d <= tol) || !(dx <= tolx)) {
                if (!fails)
                    printf("\n    M %lld K %lld N %lld y[%lld, %lld] = %.9g: reference %.9g (|d| %.3g, "
                           "bound %.3g), exact path %.9g (|d| %.3g, bound %.3g)",
                           (long long)M, (long long)K, (long long)N, (long long)m, (long long)n,
                           (double)y[m * N + n], ref, d, tol, (double)yx[m * N + n], dx, tolx);
                fails++;
            }
            if (tol > 0)
                *worst_ref = fmax(*worst_ref, d / tol);
            if (sx > 0)
                *worst_exact = fmax(*worst_exact, dx / sx);
        }
    free(x);
    free(wf);
    free(w);
    free(y);
    free(y2);
    free(yx);
    free(bref);
    free(bstore);
    return bad + fails;
}

static void test_bf16_tiles_vs_definition(void)
{
    if (!have_amx())
        return;
    lh_kctx *amx[2] = {kt_ctx(1, LH_K_ISA_AMX), kt_ctx(2, LH_K_ISA_AMX)};
    lh_kctx *exact = kt_ctx(2, LH_K_ISA_AVX512);
    CU_ASSERT_PTR_NOT_NULL_FATAL(amx[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(amx[1]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(exact);
    kt_seed(601);
    static const int64_t Ms[] = {16, 17, 33, 70}, Ns[] = {1, 5, 33, 100},
                         Ks[] = {2, 30, 32, 64, 576, 1000};
    long bad = 0;
    int cases = 0;
    double worst_ref = 0, worst_exact = 0;
    for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 4; ni++)
            for (int ki = 0; ki < 6; ki++) {
                if ((mi + ni + ki) % 2 && ki != 4)
                    continue; /* half the grid; every M, N and K several times */
                bad += check_shape(amx, exact, Ms[mi], Ks[ki], Ns[ni], (mi + ni + ki) % 4,
                                   &worst_ref, &worst_exact);
                cases++;
            }
    printf("\n    %d shapes: worst |y - reference| / bound %.3f, worst |y - exact| / sum|w||x| "
           "%.3g (bound 2^-8 = %.3g)\n    ",
           cases, worst_ref, worst_exact, 0x1p-8);
    CU_ASSERT_TRUE(cases >= 48);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(amx[0]);
    lh_k_ctx_free(amx[1]);
    lh_k_ctx_free(exact);
}

/* A row's bits do not depend on M (>= 16): rows of M = 70 against the first M rows alone */
static void test_bf16_tiles_rows_independent(void)
{
    if (!have_amx())
        return;
    lh_kctx *ctx = kt_ctx(2, LH_K_ISA_AMX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(607);
    const int64_t K = 608, N = 70, Mall = 70;
    float *x = malloc((size_t)(Mall * K) * sizeof(float)), *wf = malloc((size_t)(N * K) * sizeof(float));
    uint16_t *w = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *yall = malloc((size_t)(Mall * N) * sizeof(float)), *y = malloc((size_t)(Mall * N) * sizeof(float));
    for (int64_t i = 0; i < Mall * K; i++)
        x[i] = kt_uniform();
    kt_fill_w(LH_DTYPE_BF16, w, wf, N * K, 0.5f);
    CU_ASSERT_EQUAL_FATAL(mm(ctx, w, x, NULL, LH_DTYPE_F32, yall, Mall, K, N), LH_OK);
    static const int64_t Ms[] = {16, 17, 31, 32, 33};
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(mm(ctx, w, x, NULL, LH_DTYPE_F32, y, Ms[i], K, N), LH_OK);
        CU_ASSERT_EQUAL(memcmp(y, yall, (size_t)(Ms[i] * N) * sizeof(float)), 0);
    }
    /* an inf in row 3: that row is non-finite, every other stays finite */
    x[3 * K + 100] = INFINITY;
    CU_ASSERT_EQUAL(mm(ctx, w, x, NULL, LH_DTYPE_F32, y, 20, K, N), LH_OK);
    long bad = 0;
    for (int64_t m = 0; m < 20; m++)
        for (int64_t n = 0; n < N; n++)
            bad += (m == 3) == (bool)isfinite(y[m * N + n]);
    CU_ASSERT_EQUAL(bad, 0);
    free(x);
    free(wf);
    free(w);
    free(yall);
    free(y);
    lh_k_ctx_free(ctx);
}

/* Where the tiles do not apply the result is the exact path's: LH_K_BF16MM_EXACT at any M, and
 * M < 16 in the default mode, give the AVX-512 context's bits. */
static void test_bf16_exact_where_no_tiles(void)
{
    if (!have_amx())
        return;
    lh_kctx *amx = kt_ctx(2, LH_K_ISA_AMX), *ref = kt_ctx(2, LH_K_ISA_AVX512);
    CU_ASSERT_PTR_NOT_NULL_FATAL(amx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    kt_seed(613);
    const int64_t K = 576, N = 40, M = 24;
    float *x = malloc((size_t)(M * K) * sizeof(float)), *wf = malloc((size_t)(N * K) * sizeof(float));
    uint16_t *w = malloc((size_t)(N * K) * sizeof(uint16_t));
    float *y = malloc((size_t)(M * N) * sizeof(float)), *yr = malloc((size_t)(M * N) * sizeof(float));
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    kt_fill_w(LH_DTYPE_BF16, w, wf, N * K, 0.5f);
    for (int64_t m = 1; m < 16; m += 7) { /* M < 16: the exact path in either mode */
        CU_ASSERT_EQUAL(mm(amx, w, x, NULL, LH_DTYPE_F32, y, m, K, N), LH_OK);
        CU_ASSERT_EQUAL(mm(ref, w, x, NULL, LH_DTYPE_F32, yr, m, K, N), LH_OK);
        CU_ASSERT_EQUAL(memcmp(y, yr, (size_t)(m * N) * sizeof(float)), 0);
    }
    CU_ASSERT_EQUAL(mm(amx, w, x, NULL, LH_DTYPE_F32, y, M, K, N), LH_OK);
    CU_ASSERT_EQUAL(mm(ref, w, x, NULL, LH_DTYPE_F32, yr, M, K, N), LH_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(y, yr, (size_t)(M * N) * sizeof(float)), 0); /* tiles: x rounded */
    CU_ASSERT_EQUAL_FATAL(lh_k_ctx_set_bf16_matmul(amx, LH_K_BF16MM_EXACT), LH_OK);
    CU_ASSERT_EQUAL(mm(amx, w, x, NULL, LH_DTYPE_F32, y, M, K, N), LH_OK);
    CU_ASSERT_EQUAL(memcmp(y, yr, (size_t)(M * N) * sizeof(float)), 0);
    free(x);
    free(wf);
    free(w);
    free(y);
    free(yr);
    lh_k_ctx_free(amx);
    lh_k_ctx_free(ref);
}

static CU_TestInfo amx_tests[] = {
    {"bf16 matmul mode: default tiles, set / get / name, refused values", test_bf16mm_mode},
    {"bf16 tiles: within f32 rounding of the definition, 2^-8 of the exact path, any threads",
     test_bf16_tiles_vs_definition},
    {"bf16 tiles: a row's bits do not depend on M; inf stays in its row",
     test_bf16_tiles_rows_independent},
    {"bf16 tiles: exact mode and M < 16 give the exact path's bits", test_bf16_exact_where_no_tiles},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: bf16 matmul on AMX tiles", NULL, NULL, NULL, NULL, amx_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
