/* Kernel library: lh_k_matmul with ggml block weights in LH_K_QMM_INT8 mode (the default):
 * x quantized to 8-bit blocks, integer dot products (kernels/cpu/qmatmul.h has the scheme).
 *
 *  - the mode: default, setter, getter, names, refused values;
 *  - bit-identity: every vector ISA gives the scalar reference's bits (memcmp, NaN matching
 *    NaN), on 1 and 2 threads, for every type, GEMV and GEMM, block counts of every residue
 *    mod 4, with and without a bias; x rows with zeros, tiny (< 2^-120) blocks, outliers and a
 *    non-finite value; weights of random blocks and of the committed extreme-scale fixtures;
 *    the same through LLMHOST_KERNELS_ISA;
 *  - the distance from the exact path (LH_K_QMM_EXACT: dequantize + f32), for every output:
 *        |y_int8 - y_exact| <= sum_e |w_e| r_e + 2 (K + 64) 2^-24 sum_e W_e (|x_e| + r_e)
 *    r_e bounds the rounding of x_e to 8 bits: with amax the largest |x| of e's activation
 *    block (32 or 256 elements) and d = amax / 127 its step, |x - d q| <= d / 2 + (the f32
 *    roundings of 127 / amax, x * id and d, each at most 2^-24 relative on values up to 127 d)
 *    <= amax / 254 (1 + 2^-14); a block below 2^-120 becomes zero, r_e = amax. The second term
 *    bounds the f32 roundings of both paths (sums of at most K + 64 rounded terms each) on
 *    W_e = |w_e| + 2 |min term of w_e| (q4_1, q5_1: m; K types: dmin * m; 0 otherwise): the
 *    exact path rounds d * q and the min separately before adding them, so its error scales
 *    with both parts, not with their (possibly cancelling) sum. The measured maxima (absolute,
 *    relative to sum |w||x|, and as a fraction of the bound) are printed;
 *  - the argument errors of lh_k_matmul in this mode. */
#include "qtest.h"

#include <float.h>

static bool ctx_int8(lh_kctx *ctx)
{
    return lh_k_ctx_quant_matmul(ctx) == LH_K_QMM_INT8;
}

/* ---- the mode ------------------------------------------------------------------------------ */

static void test_qmm_mode(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctx), LH_K_QMM_INT8);
    CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(ctx, LH_K_QMM_EXACT), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctx), LH_K_QMM_EXACT);
    CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(ctx, LH_K_QMM_INT8), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctx), LH_K_QMM_INT8);
    CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(ctx, (lh_k_qmm)7), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_ctx_set_quant_matmul: 7 is not an lh_k_qmm value"));
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctx), LH_K_QMM_INT8); /* unchanged */
    CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(NULL, LH_K_QMM_EXACT), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_ctx_set_quant_matmul: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(NULL), LH_K_QMM_INT8);
    CU_ASSERT_STRING_EQUAL(lh_k_qmm_name(LH_K_QMM_INT8), "int8");
    CU_ASSERT_STRING_EQUAL(lh_k_qmm_name(LH_K_QMM_EXACT), "exact");
    CU_ASSERT_PTR_NULL(lh_k_qmm_name((lh_k_qmm)-1));
    /* the ISA setting and the mode are independent */
    CU_ASSERT_EQUAL(lh_k_ctx_set_quant_matmul(ctx, LH_K_QMM_EXACT), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_set_isa(ctx, LH_K_ISA_SCALAR), LH_OK);
    CU_ASSERT_EQUAL(lh_k_ctx_quant_matmul(ctx), LH_K_QMM_EXACT);
    lh_k_ctx_free(ctx);
}

/* ---- bit-identity with the scalar reference ------------------------------------------------- */

/* y on ref (scalar, 1 thread) and on every context of ctxs; returns the mismatches. */
static long compare_case(lh_kctx *ref, lh_kctx *const *ctxs, int n_ctx, const qtype *q,
                         const uint8_t *wq, int64_t M, int64_t K, int64_t N, int bias_kind,
                         bool nonfinite, const char *what)
{
    qt_case c;
    qt_case_make(&c, M, K, N, bias_kind, nonfinite);
    const float *yref = c.yref;
    long bad = 0;
    CU_ASSERT_TRUE(ctx_int8(ref));
    if (qt_mm(ref, q->dt, wq, c.x, c.bias, c.bdt, c.yref, M, K, N) != LH_OK)
        bad++;
    for (int i = 0; i < n_ctx; i++)
        CU_ASSERT_TRUE(ctx_int8(ctxs[i]));
    bad += qt_case_runs(&c, ctxs, n_ctx, q, wq, what, "scalar");
    /* a non-finite x makes its row NaN, the others stay finite (random blocks: sane scales) */
    if (nonfinite && M > 5 && !strcmp(what, "random"))
        for (int64_t n = 0; n < N; n++)
            if (!isnan(yref[(M - 1) * N + n]) || !isfinite(yref[n])) {
                printf("\n    %s: the row with an inf gives %g (want NaN), row 0 %g", lh_k_dtype_name(q->dt),
                       (double)yref[(M - 1) * N + n], (double)yref[n]);
                bad++;
                break;
            }
    qt_case_free(&c);
    return bad;
}

/* K per type: block counts 1, 2, 3, 5 and 40 (every residue mod 4, several groups) */
static void qmm_vs_scalar(lh_k_isa isa)
{
    lh_kctx *ref = kt_ctx(1, LH_K_ISA_SCALAR);
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(311 + (uint64_t)isa);
    static const int64_t nblocks[] = {1, 2, 3, 5, 40};
    static const int64_t Ms[] = {1, 2, 3, 7}, Ns[] = {1, 5, 33};
    long bad = 0;
    int cases = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        for (int ki = 0; ki < 5; ki++)
            for (int mi = 0; mi < 4; mi++)
                for (int ni = 0; ni < 3; ni++) {
                    const int64_t K = nblocks[ki] * q->block_elems, M = Ms[mi], N = Ns[ni];
                    if (q->block_elems == 256 && K > 1280)
                        continue; /* 40 super-blocks add nothing the shorter rows lack */
                    uint8_t *wq = qt_random_blocks(q, N, K);
                    bad += compare_case(ref, ctxs, 2, q, wq, M, K, N, (ki + mi + ni) % 4, mi == 3,
                                        "random");
                    free(wq);
                    cases++;
                }
        /* larger: tasks along both dims, M not a multiple of the x-row group */
        const int64_t K = q->block_elems == 32 ? 1280 : 1536;
        uint8_t *wq = qt_random_blocks(q, 100, K);
        bad += compare_case(ref, ctxs, 2, q, wq, 70, K, 100, (int)qi % 4, true, "random");
        bad += compare_case(ref, ctxs, 2, q, wq, 1, K, 100, 0, false, "random");
        free(wq);
        cases += 2;
    }
    CU_ASSERT_TRUE(cases > 300);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ref);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_VEC_TESTS(qmm_vs_scalar)

/* The extreme-scale fixtures as weights (f16 scales at 65504, subnormals, zeros of both signs,
 * all-0 / all-0xFF quants, packed K scales at their limits): the products overflow to inf and
 * meet NaN, and every ISA must still give the scalar bits. */
static void qmm_fixtures_vs_scalar(lh_k_isa isa)
{
    lh_kctx *ref = kt_ctx(1, LH_K_ISA_SCALAR);
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(331 + (uint64_t)isa);
    long bad = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        size_t nb = 0;
        uint8_t *raw = qt_read_fixture(q->file, "bin", &nb);
        CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
        int64_t shapes[2][2];
        qt_fixture_shapes(q, nb, shapes);
        for (int s = 0; s < 2; s++)
            for (int64_t M = 1; M <= 6; M += 5)
                bad += compare_case(ref, ctxs, 2, q, raw, M, shapes[s][1], shapes[s][0],
                                    (int)(M + s) % 4, false, "fixture");
        free(raw);
    }
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ref);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_VEC_TESTS(qmm_fixtures_vs_scalar)

/* LLMHOST_KERNELS_ISA picks the kernels of contexts made after it is set: each ISA's
 * default-mode result equals the scalar one. */
static void test_qmm_env_isa(void)
{
    char *saved = getenv("LLMHOST_KERNELS_ISA") ? strdup(getenv("LLMHOST_KERNELS_ISA")) : NULL;
    kt_seed(353);
    const qtype *q = &qtypes[5]; /* q4_k */
    const int64_t M = 3, K = 512, N = 9;
    uint8_t *wq = qt_random_blocks(q, N, K);
    float x[3 * 512], y[KT_N_ISAS][3 * 9];
    qt_fill_x(x, M, K, false);
    int ran = 0;
    for (int i = 0; i < KT_N_ISAS; i++) {
        if (!kt_isa_supported(kt_isas[i]))
            continue;
        setenv("LLMHOST_KERNELS_ISA", lh_k_isa_name(kt_isas[i]), 1);
        lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
        CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), kt_isas[i]);
        CU_ASSERT_EQUAL(qt_mm(ctx, q->dt, wq, x, NULL, LH_DTYPE_F32, y[i], M, K, N), LH_OK);
        CU_ASSERT_EQUAL(memcmp(y[i], y[0], sizeof y[0]), 0);
        lh_k_ctx_free(ctx);
        ran++;
    }
    CU_ASSERT_TRUE(ran >= 1);
    if (saved) {
        setenv("LLMHOST_KERNELS_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("LLMHOST_KERNELS_ISA");
    }
    free(wq);
}

/* ---- the distance from the exact path ------------------------------------------------------- */

/* The per-element min terms of rows of blocks of q (zero for the types without one): the same
 * blocks with every quant bit cleared, dequantized (d * 0 + m, or (d * sc) * 0 - dmin * m). */
static void min_terms(lh_kctx *ctx, const qtype *q, const uint8_t *wq, int64_t N, int64_t K,
                      float *out)
{
    const int64_t nblk = N * K / q->block_elems;
    int lo = 0, hi = 0; /* the quant bytes [lo, hi) of a block */
    switch (q->dt) {
    case LH_DTYPE_Q4_1: lo = 4, hi = 20; break;
    case LH_DTYPE_Q5_1: lo = 4, hi = 24; break;
    case LH_DTYPE_Q4_K: lo = 16, hi = 144; break;
    case LH_DTYPE_Q5_K: lo = 16, hi = 176; break;
    default: memset(out, 0, (size_t)(N * K) * sizeof(float)); return;
    }
    uint8_t *z = malloc((size_t)(nblk * q->block_bytes));
    memcpy(z, wq, (size_t)(nblk * q->block_bytes));
    for (int64_t b = 0; b < nblk; b++)
        memset(z + b * q->block_bytes + lo, 0, (size_t)(hi - lo));
    lh_tensor src = kt_t2(q->dt, z, N, K), dst = kt_t2(LH_DTYPE_F32, out, N, K);
    CU_ASSERT_EQUAL(lh_k_dequantize(ctx, &src, &dst), LH_OK);
    free(z);
}

static void qmm_vs_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *ex = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ex);
    CU_ASSERT_EQUAL_FATAL(lh_k_ctx_set_quant_matmul(ex, LH_K_QMM_EXACT), LH_OK);
    kt_seed(373 + (uint64_t)isa);
    /* AMX: enough rows for its tile path (rows 5 on are plain uniform x, like row 0) */
    const int64_t M = isa == LH_K_ISA_AMX ? 20 : 6, K = 1536, N = 40;
    long bad = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        const int64_t qb = q->block_elems == 32 ? 32 : 256;
        uint8_t *wq = qt_random_blocks(q, N, K);
        float *wf = malloc((size_t)(N * K) * sizeof(float));
        float *x = malloc((size_t)(M * K) * sizeof(float));
        float *y8 = malloc((size_t)(M * N) * sizeof(float)), *yx = malloc((size_t)(M * N) * sizeof(float));
        float *wmin = malloc((size_t)(N * K) * sizeof(float));
        double *rb = malloc((size_t)(M * K / qb) * sizeof(double)); /* r_e per block */
        lh_tensor src = kt_t2(q->dt, wq, N, K), dst = kt_t2(LH_DTYPE_F32, wf, N, K);
        CU_ASSERT_EQUAL_FATAL(lh_k_dequantize(ctx, &src, &dst), LH_OK);
        min_terms(ctx, q, wq, N, K, wmin);
        qt_fill_x(x, M, K, false);
        for (int64_t i = 0; i < M * K / qb; i++) {
            double amax = 0;
            for (int64_t e = 0; e < qb; e++)
                amax = fmax(amax, fabs((double)x[i * qb + e]));
            rb[i] = amax < 0x1p-120 ? amax : amax / 254.0 * (1.0 + 0x1p-14);
        }
        CU_ASSERT_EQUAL(qt_mm(ctx, q->dt, wq, x, NULL, LH_DTYPE_F32, y8, M, K, N), LH_OK);
        CU_ASSERT_EQUAL(qt_mm(ex, q->dt, wq, x, NULL, LH_DTYPE_F32, yx, M, K, N), LH_OK);
        double worst_ratio = 0, max_abs = 0, max_rel = 0, u_abs = 0, u_rel = 0;
        long differ = 0, fails = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double qbound = 0, s = 0, sw = 0;
                for (int64_t k = 0; k < K; k++) {
                    const double aw = fabs((double)wf[n * K + k]), ax = fabs((double)x[m * K + k]);
                    const double r = rb[(m * K + k) / qb];
                    qbound += aw * r;
                    s += aw * ax;
                    sw += (aw + 2.0 * fabs((double)wmin[n * K + k])) * (ax + r);
                }
                const double tol = qbound + 2.0 * (double)(K + 64) * 0x1p-24 * sw;
                const double diff = fabs((double)y8[m * N + n] - (double)yx[m * N + n]);
                differ += diff > 0;
                if (!(diff <= tol)) {
                    if (!fails)
                        printf("\n    FAIL %s %s y[%lld, %lld]: int8 %.9g, exact %.9g, |diff| %.3g > "
                               "bound %.3g", lh_k_isa_name(isa), lh_k_dtype_name(q->dt), (long long)m,
                               (long long)n, (double)y8[m * N + n], (double)yx[m * N + n], diff, tol);
                    fails++;
                }
                if (tol > 0)
                    worst_ratio = fmax(worst_ratio, diff / tol);
                max_abs = fmax(max_abs, diff);
                if (s > 0)
                    max_rel = fmax(max_rel, diff / s);
                if (m == 0 || m == 5) { /* the rows of plain uniform x in [-1, 1) */
                    u_abs = fmax(u_abs, diff);
                    u_rel = fmax(u_rel, diff / s);
                }
            }
        printf("\n    %s %s, x [%lld, %lld], w [%lld, %lld]: |int8 - exact| max %.3g, / sum|w||x| "
               "max %.3g (rows of uniform x: %.3g, %.3g); worst |diff| / bound %.3f",
               lh_k_isa_name(isa), lh_k_dtype_name(q->dt), (long long)M, (long long)K, (long long)N,
               (long long)K, max_abs, max_rel, u_abs, u_rel, worst_ratio);
        bad += fails;
        /* the two modes really differ (x is rounded to 8 bits), except on the zero row */
        CU_ASSERT_TRUE(differ > N);
        free(wq);
        free(wf);
        free(x);
        free(y8);
        free(yx);
        free(wmin);
        free(rb);
    }
    printf("\n    ");
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(ex);
}
KT_ISA_TESTS(qmm_vs_exact)
static void qmm_vs_exact_amx(void)
{
    if (!kt_isa_supported(LH_K_ISA_AMX)) {
        LH_TEST_SKIP("AMX (tiles, int8, the OS's permission) not available");
        return;
    }
    qmm_vs_exact(LH_K_ISA_AMX);
}

/* ---- errors and edge shapes ------------------------------------------------------------------ */

static void test_qmm_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_TRUE(ctx_int8(ctx));
    kt_seed(397);
    static float x[3 * 512], y[3 * 4];
    uint8_t *wq = qt_random_blocks(&qtypes[0], 4, 512); /* q4_0 [4, 512] */
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 3, 512), wt = kt_t2(LH_DTYPE_Q4_0, wq, 4, 512);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, 3, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, NULL, &yt), LH_OK);
    lh_tensor x48 = kt_t2(LH_DTYPE_F32, x, 3, 48), w48 = kt_t2(LH_DTYPE_Q4_0, wq, 4, 48);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x48, &w48, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_matmul: w q4_0 [4, 48]: K 48 is not a multiple of the q4_0 "
                               "block (32 elements)"));
    lh_tensor x256 = kt_t2(LH_DTYPE_F32, x, 3, 256);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x256, &wt, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "disagree on K (256 vs 512)"));
    lh_tensor y5 = kt_t2(LH_DTYPE_F32, y, 3, 3);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, NULL, &y5), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "y [3, 3] must be [3, 4]"));
    float b3[3] = {0};
    lh_tensor bt3 = kt_t1(LH_DTYPE_F32, b3, 3);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, &bt3, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "bias [3] must be [4]"));
    lh_tensor yx = kt_t2(LH_DTYPE_F32, x, 3, 4); /* y inside x */
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, NULL, &yx), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "overlaps an input"));
    /* empty shapes: M 0, N 0, and K 0 (y = the bias) */
    lh_tensor x0 = kt_t2(LH_DTYPE_F32, x, 0, 512), y0 = kt_t2(LH_DTYPE_F32, y, 0, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x0, &wt, NULL, &y0), LH_OK);
    lh_tensor wn0 = kt_t2(LH_DTYPE_Q4_0, wq, 0, 512), yn0 = kt_t2(LH_DTYPE_F32, y, 3, 0);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wn0, NULL, &yn0), LH_OK);
    float bias[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    lh_tensor xk0 = kt_t2(LH_DTYPE_F32, x, 3, 0), wk0 = kt_t2(LH_DTYPE_Q6_K, wq, 4, 0);
    lh_tensor bt = kt_t1(LH_DTYPE_F32, bias, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xk0, &wk0, &bt, &yt), LH_OK);
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(y[i], bias[i % 4]);
    free(wq);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo qmm_tests[] = {
    {"quant matmul mode: default int8, set / get / name, refused values", test_qmm_mode},
    {"int8 quantized matmul == scalar reference, bit for bit [avx2]", qmm_vs_scalar_avx2},
    {"int8 quantized matmul == scalar reference, bit for bit [avx512]", qmm_vs_scalar_avx512},
    {"int8 quantized matmul, extreme-scale fixture weights == scalar reference [avx2]",
     qmm_fixtures_vs_scalar_avx2},
    {"int8 quantized matmul, extreme-scale fixture weights == scalar reference [avx512]",
     qmm_fixtures_vs_scalar_avx512},
    {"int8 quantized matmul under LLMHOST_KERNELS_ISA == scalar", test_qmm_env_isa},
    {"int8 quantized matmul within the derived bound of the exact path [scalar]",
     qmm_vs_exact_scalar},
    {"int8 quantized matmul within the derived bound of the exact path [avx2]", qmm_vs_exact_avx2},
    {"int8 quantized matmul within the derived bound of the exact path [avx512]",
     qmm_vs_exact_avx512},
    {"int8 quantized matmul within the derived bound of the exact path [amx, M 20]",
     qmm_vs_exact_amx},
    {"int8 quantized matmul argument errors and empty shapes", test_qmm_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: int8 quantized matmul", NULL, NULL, NULL, NULL, qmm_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
