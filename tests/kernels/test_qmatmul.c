/* Kernel library: lh_k_matmul with ggml block-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K) on the CPU, in LH_K_QMM_EXACT mode (the default, LH_K_QMM_INT8, is
 * test_qmatmul_int8.c).
 *
 * The contract is bit-identity: y = x @ w^T (+ bias) with a block-type w must equal, memcmp,
 * lh_k_dequantize(w) followed by lh_k_matmul with the f32 weight, for every ISA this CPU has,
 * on 1 and 2 threads, for GEMV (M == 1) and GEMM (M > 1, both loop orders), without a bias and
 * with an f32, bf16 or f16 one. The weights are random blocks: random quant bytes with small
 * f16 scales (|d| in [1e-3, 1e-1], random sign), so no value is inf or NaN. Then the refusals:
 * K not a multiple of the block (LH_E_USAGE naming K and the block), a quantized bias
 * (LH_E_UNSUPPORTED) and a weight on another device (LH_E_USAGE). The CUDA twin is in
 * test_cuda_kernels.c (block types). */
#include "qtest.h"

/* a context of the ISA in LH_K_QMM_EXACT mode */
static lh_kctx *exact_ctx(int threads, lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(threads, isa);
    if (ctx && lh_k_ctx_set_quant_matmul(ctx, LH_K_QMM_EXACT) != LH_OK) {
        lh_k_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* One case on every context in ctxs; returns the number of mismatching runs. */
static long check_case(lh_kctx *const *ctxs, int n_ctx, const qtype *q, int64_t M, int64_t K,
                       int64_t N, int bias_kind)
{
    static const lh_dtype bias_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    uint8_t *wq = qt_random_blocks(q, N, K);
    float *wf = malloc((size_t)(N * K) * sizeof(float));
    float *x = malloc((size_t)(M * K) * sizeof(float));
    float *yref = malloc((size_t)(M * N) * sizeof(float));
    float *yq = malloc((size_t)(M * N) * sizeof(float));
    float *bref = malloc((size_t)N * sizeof(float));
    void *bstore = malloc((size_t)N * 4);
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    const lh_dtype bdt = bias_kind > 0 ? bias_dts[bias_kind - 1] : LH_DTYPE_F32;
    if (bias_kind > 0)
        kt_fill_w(bdt, bstore, bref, N, 1.0f);
    const void *bias = bias_kind > 0 ? bstore : NULL;

    long bad = 0;
    for (int c = 0; c < n_ctx; c++) {
        lh_tensor src = kt_t2(q->dt, wq, N, K), dst = kt_t2(LH_DTYPE_F32, wf, N, K);
        CU_ASSERT_EQUAL_FATAL(lh_k_dequantize(ctxs[c], &src, &dst), LH_OK);
        CU_ASSERT_EQUAL(qt_mm(ctxs[c], LH_DTYPE_F32, wf, x, bias, bdt, yref, M, K, N), LH_OK);
        memset(yq, 0xff, (size_t)(M * N) * sizeof(float));
        CU_ASSERT_EQUAL(qt_mm(ctxs[c], q->dt, wq, x, bias, bdt, yq, M, K, N), LH_OK);
        if (memcmp(yq, yref, (size_t)(M * N) * sizeof(float)) != 0) {
            bad++;
            for (int64_t i = 0; i < M * N; i++)
                if (memcmp(&yq[i], &yref[i], sizeof(float)) != 0) {
                    printf("\n    %s M %lld K %lld N %lld bias %d threads %d: y[%lld] = %.9g, "
                           "dequantize + f32 matmul %.9g",
                           lh_k_dtype_name(q->dt), (long long)M, (long long)K, (long long)N,
                           bias_kind, lh_k_ctx_threads(ctxs[c]), (long long)i, (double)yq[i],
                           (double)yref[i]);
                    break;
                }
        }
        /* every value finite: the scales are sane */
        for (int64_t i = 0; i < M * N; i++)
            if (!isfinite(yq[i])) {
                bad++;
                printf("\n    %s: y[%lld] = %g is not finite", lh_k_dtype_name(q->dt),
                       (long long)i, (double)yq[i]);
                break;
            }
    }
    free(wq);
    free(wf);
    free(x);
    free(yref);
    free(yq);
    free(bref);
    free(bstore);
    return bad;
}

static void qmatmul_bit_identical(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {exact_ctx(1, isa), exact_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(151 + (uint64_t)isa);
    static const int64_t Ms[] = {1, 3, 17}, Ns[] = {5, 64}, Ks[] = {256, 512};
    long bad = 0;
    int cases = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++)
        for (int mi = 0; mi < 3; mi++)
            for (int ni = 0; ni < 2; ni++)
                for (int ki = 0; ki < 2; ki++) {
                    /* no bias, f32, bf16, f16 in turn */
                    bad += check_case(ctxs, 2, &qtypes[qi], Ms[mi], Ks[ki], Ns[ni],
                                      (mi + ni * 3 + ki * 2 + (int)qi) % 4);
                    cases++;
                }
    /* every bias dtype on every type once more, GEMV and GEMM */
    for (size_t qi = 0; qi < N_QTYPES; qi++)
        for (int bk = 0; bk < 4; bk++) {
            bad += check_case(ctxs, 2, &qtypes[qi], 1, 512, 5, bk);
            bad += check_case(ctxs, 2, &qtypes[qi], 3, 256, 64, bk);
            cases += 2;
        }
    CU_ASSERT_EQUAL(cases, (int)N_QTYPES * (12 + 8));
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(qmatmul_bit_identical)

/* Larger shapes: several tasks along N with a partial last one (N 100), a GEMM whose first row
 * block takes the K-blocked (prefill) loop order and whose last the weight-streaming one
 * (M 70, K 1280), and K above the K block (1280 > 512). */
static void qmatmul_large(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {exact_ctx(1, isa), exact_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(171 + (uint64_t)isa);
    long bad = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        bad += check_case(ctxs, 2, &qtypes[qi], 1, 1280, 100, (int)qi % 4);
        bad += check_case(ctxs, 2, &qtypes[qi], 70, 1280, 100, ((int)qi + 1) % 4);
    }
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(qmatmul_large)

static void test_qmatmul_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(191);
    float x[3 * 512], y[3 * 4], b[4];
    memset(x, 0, sizeof x);
    memset(b, 0, sizeof b);
    uint8_t *wq = qt_random_blocks(&qtypes[0], 4, 512); /* q4_0 [4, 512] */
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 3, 512), wt = kt_t2(LH_DTYPE_Q4_0, wq, 4, 512);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, 3, 4), bt = kt_t1(LH_DTYPE_F32, b, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, &bt, &yt), LH_OK);

    /* K not a multiple of the block */
    lh_tensor x48 = kt_t2(LH_DTYPE_F32, x, 3, 48), w48 = kt_t2(LH_DTYPE_Q4_0, wq, 4, 48);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x48, &w48, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_matmul: w q4_0 [4, 48]: K 48 is not a multiple of the q4_0 "
                               "block (32 elements)"));
    lh_tensor x288 = kt_t2(LH_DTYPE_F32, x, 3, 288), w288 = kt_t2(LH_DTYPE_Q6_K, wq, 4, 288);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x288, &w288, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "K 288 is not a multiple of the q6_k block "
                                                     "(256 elements)"));

    /* a quantized bias */
    uint8_t qb[18];
    memset(qb, 0, sizeof qb);
    lh_tensor bq = kt_t1(LH_DTYPE_Q4_0, qb, 32);
    lh_tensor w32 = kt_t2(LH_DTYPE_Q4_0, wq, 32, 64);
    lh_tensor x64 = kt_t2(LH_DTYPE_F32, x, 3, 64);
    float y32[3 * 32];
    lh_tensor y32t = kt_t2(LH_DTYPE_F32, y32, 3, 32);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x64, &w32, NULL, &y32t), LH_OK);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x64, &w32, &bq, &y32t), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "bias [32] has dtype q4_0"));

    /* a block-type weight on another device than the (CPU) context */
    lh_tensor wc = wt;
    wc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wc, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_matmul: w is on cuda:0, but the context is on cpu"));

    /* K mismatch and y shape still checked first */
    lh_tensor x256 = kt_t2(LH_DTYPE_F32, x, 3, 256);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x256, &wt, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "disagree on K (256 vs 512)"));
    free(wq);
    lh_k_ctx_free(ctx);
}

/* On a CUDA context a block-type weight is refused with a clear message, not a crash. The
 * refusal comes before any data is touched, so host pointers stand in for device memory. */

static CU_TestInfo qmatmul_tests[] = {
    {"quantized matmul == dequantize + f32 matmul, bit for bit [scalar]",
     qmatmul_bit_identical_scalar},
    {"quantized matmul == dequantize + f32 matmul, bit for bit [avx2]", qmatmul_bit_identical_avx2},
    {"quantized matmul == dequantize + f32 matmul, bit for bit [avx512]",
     qmatmul_bit_identical_avx512},
    {"quantized matmul N 100, M 70 K 1280 (both loop orders) [scalar]", qmatmul_large_scalar},
    {"quantized matmul N 100, M 70 K 1280 (both loop orders) [avx2]", qmatmul_large_avx2},
    {"quantized matmul N 100, M 70 K 1280 (both loop orders) [avx512]", qmatmul_large_avx512},
    {"quantized matmul argument errors", test_qmatmul_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: quantized matmul", NULL, NULL, NULL, NULL, qmatmul_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
