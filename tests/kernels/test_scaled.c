/* Kernel library: weights with separate scale tensors -- lh_k_dequantize_scaled and
 * lh_k_matmul_scaled on the CPU (lh_k_quantize_scaled: test_scaled_quant.c).
 *
 *  - dequantize == the reference (value * scale of the block, f32; stest.h) bit for bit, for
 *    int8 / int4 / fp8 weights x f32 / f16 scales x per-channel, 1 x 32, 1 x 128, 128 x 128,
 *    3 x 7 and whole-tensor blocks, N and K no multiples of 128 (partial edge blocks), every
 *    ISA, 1 and 2 threads; every fp8 code decodes to lh_k_fp8_e4m3_to_f32's bits on every ISA;
 *  - matmul_scaled == dequantize_scaled + the f32 lh_k_matmul, memcmp, for the same grid, GEMV
 *    and GEMM (both loop orders), no bias and f32 / bf16 / f16 biases, 1 and 2 threads, on
 *    every ISA, in LH_K_QMM_EXACT mode (in the default mode int8 weights with one scale per
 *    row take the integer path: test_scaled_int8.c); empty shapes;
 *  - every argument error with its message, and the refusal on a CUDA context. */
#include "stest.h"

/* a context of the ISA in LH_K_QMM_EXACT mode: int8 weights with one scale per row take the
 * integer path by default (test_scaled_int8.c) */
static lh_kctx *exact_ctx(int threads, lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(threads, isa);
    if (ctx && lh_k_ctx_set_quant_matmul(ctx, LH_K_QMM_EXACT) != LH_OK) {
        lh_k_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static lh_status run_deq(lh_kctx *ctx, lh_dtype wdt, const uint8_t *w, lh_dtype sdt,
                         const void *scale, int64_t N, int64_t K, int64_t br, int64_t bc, float *dst)
{
    lh_tensor wt = kt_t2(wdt, (void *)w, N, K);
    lh_tensor st = kt_t2(sdt, (void *)scale, st_ceil(N, br), st_ceil(K, bc));
    lh_tensor dt = kt_t2(LH_DTYPE_F32, dst, N, K);
    lh_status s = lh_k_dequantize_scaled(ctx, &wt, &st, br, bc, &dt);
    if (s != LH_OK)
        printf("\n    lh_k_dequantize_scaled failed: %s", lh_k_last_error(ctx));
    return s;
}

static lh_status run_mms(lh_kctx *ctx, const float *x, lh_dtype wdt, const uint8_t *w, lh_dtype sdt,
                         const void *scale, int64_t br, int64_t bc, const void *bias, lh_dtype bdt,
                         float *y, int64_t M, int64_t K, int64_t N)
{
    lh_tensor xt = kt_t2(LH_DTYPE_F32, (void *)x, M, K);
    lh_tensor wt = kt_t2(wdt, (void *)w, N, K);
    lh_tensor st = kt_t2(sdt, (void *)scale, st_ceil(N, br), st_ceil(K, bc));
    lh_tensor bt = kt_t1(bdt, (void *)bias, N);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, M, N);
    lh_status s = lh_k_matmul_scaled(ctx, &xt, &wt, &st, br, bc, bias ? &bt : NULL, &yt);
    if (s != LH_OK)
        printf("\n    lh_k_matmul_scaled failed: %s", lh_k_last_error(ctx));
    return s;
}

/* ---- dequantization ------------------------------------------------------------------------ */

static long deq_case(lh_kctx *const *ctxs, lh_dtype wdt, lh_dtype sdt, const st_block *b,
                     int64_t N, int64_t K)
{
    const int64_t br = st_br(b, N), bc = st_bc(b, K), ns = st_ceil(N, br) * st_ceil(K, bc);
    uint8_t *w = st_random_w(wdt, N, K, false);
    void *scale = st_random_scale(sdt, ns);
    float *want = malloc((size_t)(N * K) * sizeof(float) + 4);
    float *got = malloc((size_t)(N * K) * sizeof(float) + 4);
    st_ref_dequant(wdt, w, sdt, scale, N, K, br, bc, want);
    long bad = 0;
    for (int c = 0; c < 2; c++) {
        memset(got, 0xff, (size_t)(N * K) * sizeof(float));
        CU_ASSERT_EQUAL(run_deq(ctxs[c], wdt, w, sdt, scale, N, K, br, bc, got), LH_OK);
        char what[160];
        snprintf(what, sizeof what, "%s w [%lld, %lld], %s scales, %lld x %lld blocks, %d threads",
                 lh_k_dtype_name(wdt), (long long)N, (long long)K, lh_k_dtype_name(sdt),
                 (long long)br, (long long)bc, lh_k_ctx_threads(ctxs[c]));
        if (!st_same_bits(what, got, want, N * K))
            bad++;
    }
    free(w);
    free(scale);
    free(want);
    free(got);
    return bad;
}

static void scaled_dequant_reference(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {kt_ctx(1, isa), kt_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(301 + (uint64_t)isa);
    long bad = 0;
    int cases = 0;
    static const int64_t shapes[][2] = {{200, 300}, {129, 258}, {1, 2}, {5, 46}};
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        for (int si = 0; si < ST_N_SDTS; si++)
            for (size_t bi = 0; bi < ST_N_BLOCKS; bi++)
                for (int sh = 0; sh < 4; sh++) {
                    bad += deq_case(ctxs, st_wdts[wi], st_sdts[si], &st_blocks[bi], shapes[sh][0],
                                    shapes[sh][1]);
                    cases++;
                }
    CU_ASSERT_EQUAL(cases, ST_N_WDTS * ST_N_SDTS * (int)ST_N_BLOCKS * 4);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(scaled_dequant_reference)

/* Every fp8 code, in every position of a SIMD step and the tail (rows of 256 + 19 codes, the
 * codes rotated per row), with scale 1 (f32) gives lh_k_fp8_e4m3_to_f32's bits, NaN included;
 * with an f16 scale of 0.5 the exact half. */
static void scaled_fp8_codes(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    enum { R = 16, K = 275 };
    static uint8_t w[R * K];
    static float got[R * K], want[R * K];
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++)
            w[r * K + k] = (uint8_t)(k + 17 * r);
    float one[R];
    uint16_t half[R];
    for (int r = 0; r < R; r++) {
        one[r] = 1.0f;
        half[r] = lh_k_f32_to_f16(0.5f);
    }
    CU_ASSERT_EQUAL(run_deq(ctx, LH_DTYPE_FP8_E4M3, w, LH_DTYPE_F32, one, R, K, 1, K, got), LH_OK);
    long bad = 0;
    for (int i = 0; i < R * K; i++) {
        const float v = lh_k_fp8_e4m3_to_f32(w[i]);
        if (memcmp(&got[i], &v, 4) != 0)
            bad++;
        want[i] = v * 0.5f;
        /* and the test's own decoding agrees with the library's */
        const float mine = st_fp8(w[i]);
        if (!(mine == v || (isnan(mine) && isnan(v))))
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(run_deq(ctx, LH_DTYPE_FP8_E4M3, w, LH_DTYPE_F16, half, R, K, 1, K, got), LH_OK);
    CU_ASSERT_TRUE(st_same_bits("fp8 codes * 0.5", got, want, R * K));
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(scaled_fp8_codes)

/* Hand-computed: int8 [-128, 127, 1, -1] and int4 nibbles (byte 0x8f: element 0 = -1,
 * element 1 = -8; byte 0x71: 1, 7) with per-row scales and a 1 x 1 block split. */
static void test_scaled_dequant_known(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const uint8_t w8[4] = {0x80, 0x7f, 0x01, 0xff};
    const float s8[2] = {0.5f, -2.0f};
    float y[4];
    CU_ASSERT_EQUAL(run_deq(ctx, LH_DTYPE_INT8, w8, LH_DTYPE_F32, s8, 2, 2, 1, 2, y), LH_OK);
    CU_ASSERT_TRUE(y[0] == -64.0f && y[1] == 63.5f && y[2] == -2.0f && y[3] == 2.0f);
    const uint8_t w4[2] = {0x8f, 0x71};
    const uint16_t s4[4] = {lh_k_f32_to_f16(1.0f), lh_k_f32_to_f16(0.25f), lh_k_f32_to_f16(3.0f),
                            lh_k_f32_to_f16(-1.0f)};
    CU_ASSERT_EQUAL(run_deq(ctx, LH_DTYPE_INT4, w4, LH_DTYPE_F16, s4, 1, 4, 1, 1, y), LH_OK);
    CU_ASSERT_TRUE(y[0] == -1.0f && y[1] == -2.0f && y[2] == 3.0f && y[3] == -7.0f);
    lh_k_ctx_free(ctx);
}

/* ---- matmul: bit-identical to dequantize + f32 matmul ---------------------------------------- */

static long mm_case(lh_kctx *const *ctxs, lh_dtype wdt, lh_dtype sdt, const st_block *b,
                    int64_t M, int64_t K, int64_t N, int bias_kind)
{
    static const lh_dtype bias_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    const int64_t br = st_br(b, N), bc = st_bc(b, K), ns = st_ceil(N, br) * st_ceil(K, bc);
    uint8_t *w = st_random_w(wdt, N, K, true);
    void *scale = st_random_scale(sdt, ns);
    float *wf = malloc((size_t)(N * K) * sizeof(float) + 4);
    float *x = malloc((size_t)(M * K) * sizeof(float) + 4);
    float *yref = malloc((size_t)(M * N) * sizeof(float) + 4);
    float *y = malloc((size_t)(M * N) * sizeof(float) + 4);
    float bref[256];
    uint32_t bstore[256];
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    const lh_dtype bdt = bias_kind > 0 ? bias_dts[bias_kind - 1] : LH_DTYPE_F32;
    if (bias_kind > 0)
        kt_fill_w(bdt, bstore, bref, N, 1.0f);
    const void *bias = bias_kind > 0 ? bstore : NULL;
    long bad = 0;
    for (int c = 0; c < 2; c++) {
        CU_ASSERT_EQUAL_FATAL(run_deq(ctxs[c], wdt, w, sdt, scale, N, K, br, bc, wf), LH_OK);
        lh_tensor xt = kt_t2(LH_DTYPE_F32, x, M, K), wt = kt_t2(LH_DTYPE_F32, wf, N, K);
        lh_tensor bt = kt_t1(bdt, (void *)bias, N), yt = kt_t2(LH_DTYPE_F32, yref, M, N);
        CU_ASSERT_EQUAL(lh_k_matmul(ctxs[c], &xt, &wt, bias ? &bt : NULL, &yt), LH_OK);
        memset(y, 0xff, (size_t)(M * N) * sizeof(float));
        CU_ASSERT_EQUAL(run_mms(ctxs[c], x, wdt, w, sdt, scale, br, bc, bias, bdt, y, M, K, N),
                        LH_OK);
        if (memcmp(y, yref, (size_t)(M * N) * sizeof(float)) != 0) {
            bad++;
            char what[200];
            snprintf(what, sizeof what,
                     "%s w [%lld, %lld], %s scales %lld x %lld, M %lld, bias %d, %d threads",
                     lh_k_dtype_name(wdt), (long long)N, (long long)K, lh_k_dtype_name(sdt),
                     (long long)br, (long long)bc, (long long)M, bias_kind,
                     lh_k_ctx_threads(ctxs[c]));
            st_same_bits(what, y, yref, M * N);
        }
        for (int64_t i = 0; i < M * N; i++)
            if (!isfinite(y[i])) {
                bad++;
                break;
            }
    }
    free(w);
    free(scale);
    free(wf);
    free(x);
    free(yref);
    free(y);
    return bad;
}

static void scaled_matmul_bit_identical(lh_k_isa isa)
{
    lh_kctx *ctxs[2] = {exact_ctx(1, isa), exact_ctx(2, isa)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(331 + (uint64_t)isa);
    long bad = 0;
    int cases = 0;
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        for (int si = 0; si < ST_N_SDTS; si++)
            for (size_t bi = 0; bi < ST_N_BLOCKS; bi++) {
                const int k = wi + si + (int)bi;
                /* GEMV and small GEMM over several N tasks (N 200 > 4 x 48) */
                bad += mm_case(ctxs, st_wdts[wi], st_sdts[si], &st_blocks[bi], 1, 300, 200, k % 4);
                bad += mm_case(ctxs, st_wdts[wi], st_sdts[si], &st_blocks[bi], 3, 258, 129,
                               (k + 1) % 4);
                /* M 70, K 1280: the first row block takes the K-blocked (prefill) loop order,
                 * the last the weight-streaming one; K above the K block */
                bad += mm_case(ctxs, st_wdts[wi], st_sdts[si], &st_blocks[bi], 70, 1280, 130,
                               (k + 2) % 4);
                cases += 3;
            }
    /* every bias dtype with every weight dtype */
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        for (int bk = 0; bk < 4; bk++) {
            bad += mm_case(ctxs, st_wdts[wi], LH_DTYPE_F32, &st_blocks[3], 1, 130, 50, bk);
            cases++;
        }
    CU_ASSERT_EQUAL(cases, ST_N_WDTS * ST_N_SDTS * (int)ST_N_BLOCKS * 3 + ST_N_WDTS * 4);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}
KT_ISA_TESTS(scaled_matmul_bit_identical)

/* M, N or K zero: nothing to do, or y = bias (K 0) */
static void test_scaled_empty(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[4] = {0}, y[6], b[3] = {1.0f, -2.0f, 3.0f}, s[3] = {1, 1, 1};
    uint8_t w[8] = {0};
    lh_tensor x0 = kt_t2(LH_DTYPE_F32, x, 2, 0), w0 = kt_t2(LH_DTYPE_INT8, w, 3, 0);
    lh_tensor s0 = kt_t2(LH_DTYPE_F32, s, 3, 0), bt = kt_t1(LH_DTYPE_F32, b, 3);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, 2, 3);
    memset(y, 0xff, sizeof y);
    CU_ASSERT_EQUAL(lh_k_matmul_scaled(ctx, &x0, &w0, &s0, 1, 1, &bt, &yt), LH_OK);
    CU_ASSERT_TRUE(y[0] == 1.0f && y[1] == -2.0f && y[2] == 3.0f && y[5] == 3.0f);
    lh_tensor xm = kt_t2(LH_DTYPE_F32, x, 0, 2), wn = kt_t2(LH_DTYPE_INT4, w, 3, 2);
    lh_tensor sn = kt_t2(LH_DTYPE_F32, s, 3, 1), ym = kt_t2(LH_DTYPE_F32, y, 0, 3);
    CU_ASSERT_EQUAL(lh_k_matmul_scaled(ctx, &xm, &wn, &sn, 1, 2, NULL, &ym), LH_OK);
    lh_tensor wz = kt_t2(LH_DTYPE_FP8_E4M3, w, 0, 2), sz = kt_t2(LH_DTYPE_F32, s, 0, 1);
    lh_tensor dz = kt_t2(LH_DTYPE_F32, y, 0, 2);
    CU_ASSERT_EQUAL(lh_k_dequantize_scaled(ctx, &wz, &sz, 128, 128, &dz), LH_OK);
    lh_k_ctx_free(ctx);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_scaled_matmul_errors(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static float x[3 * 64], y[3 * 8], wf[8 * 64], s[64], b[8];
    static uint8_t w[8 * 64];
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 3, 64), wt = kt_t2(LH_DTYPE_INT8, w, 8, 64);
    lh_tensor st = kt_t2(LH_DTYPE_F32, s, 8, 2), yt = kt_t2(LH_DTYPE_F32, y, 3, 8);
    lh_tensor bt = kt_t1(LH_DTYPE_F32, b, 8);
    CU_ASSERT_EQUAL(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 32, &bt, &yt), LH_OK);

    CU_ASSERT_EQUAL(lh_k_matmul_scaled(NULL, &xt, &wt, &st, 1, 32, NULL, &yt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_matmul_scaled: ctx is NULL"));
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, NULL, &st, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: w is NULL");
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, NULL, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: scale is NULL");
    /* dtypes */
    lh_tensor wf32 = kt_t2(LH_DTYPE_F32, wf, 8, 64);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wf32, &st, 1, 32, NULL, &yt), LH_E_UNSUPPORTED,
               "lh_k_matmul_scaled: w [8, 64] has dtype f32; supported: fp8_e4m3, int8 or int4");
    lh_tensor wq = kt_t2(LH_DTYPE_Q8_0, w, 8, 64);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wq, &st, 1, 32, NULL, &yt), LH_E_UNSUPPORTED,
               "w [8, 64] has dtype q8_0");
    lh_tensor sbf = kt_t2(LH_DTYPE_BF16, s, 8, 2);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &sbf, 1, 32, NULL, &yt), LH_E_UNSUPPORTED,
               "lh_k_matmul_scaled: scale [8, 2] has dtype bf16; supported: f32 or f16");
    lh_tensor x16 = kt_t2(LH_DTYPE_F16, x, 3, 64);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &x16, &wt, &st, 1, 32, NULL, &yt), LH_E_UNSUPPORTED,
               "lh_k_matmul_scaled: x [3, 64] has dtype f16; supported: f32");
    lh_tensor bq = kt_t1(LH_DTYPE_INT8, b, 8);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 32, &bq, &yt), LH_E_UNSUPPORTED,
               "lh_k_matmul_scaled: bias [8] has dtype int8");
    /* dims */
    lh_tensor w1 = kt_t1(LH_DTYPE_INT8, w, 64);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &w1, &st, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: w must have 2 dims (got ndim 1)");
    lh_tensor s1 = kt_t1(LH_DTYPE_F32, s, 16);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &s1, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: scale must have 2 dims (got ndim 1)");
    /* block sizes */
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 0, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: block_rows 0 and block_cols 32 must both be >= 1");
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, -4, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: block_rows 1 and block_cols -4 must both be >= 1");
    /* the scale's shape */
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 64, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: scale [8, 2] must be [8, 1] for w [8, 64] with 1 x 64 blocks");
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 3, 32, NULL, &yt), LH_E_USAGE,
               "scale [8, 2] must be [3, 2] for w [8, 64] with 3 x 32 blocks");
    lh_tensor s128 = kt_t2(LH_DTYPE_F32, s, 1, 1);
    CU_ASSERT_EQUAL(lh_k_matmul_scaled(ctx, &xt, &wt, &s128, 128, 128, NULL, &yt), LH_OK);
    /* int4 with an odd K */
    lh_tensor x63 = kt_t2(LH_DTYPE_F32, x, 3, 63), w63 = kt_t2(LH_DTYPE_INT4, w, 8, 63);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &x63, &w63, &st, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: w int4 [8, 63]: K 63 must be even (two values per byte, rows "
               "of whole bytes)");
    /* shapes of x, y, bias */
    lh_tensor x32 = kt_t2(LH_DTYPE_F32, x, 3, 32);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &x32, &wt, &st, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: x [3, 32] and w [8, 64] disagree on K (32 vs 64)");
    lh_tensor y7 = kt_t2(LH_DTYPE_F32, y, 3, 7);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 32, NULL, &y7), LH_E_USAGE,
               "lh_k_matmul_scaled: y [3, 7] must be [3, 8] for x [3, 64] and w [8, 64]");
    lh_tensor b7 = kt_t1(LH_DTYPE_F32, b, 7);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 32, &b7, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: bias [7] must be [8] for w [8, 64]");
    /* overlaps */
    lh_tensor yx = kt_t2(LH_DTYPE_F32, x, 3, 8);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &st, 1, 32, NULL, &yx), LH_E_USAGE,
               "lh_k_matmul_scaled: y [3, 8] overlaps an input");
    lh_tensor ys = kt_t2(LH_DTYPE_F32, s, 3, 8);
    lh_tensor sbig = kt_t2(LH_DTYPE_F32, s + 8, 8, 2);
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wt, &sbig, 1, 32, NULL, &ys), LH_E_USAGE,
               "y [3, 8] overlaps an input");
    /* another device */
    lh_tensor wc = wt;
    wc.device = kt_cuda();
    EXPECT_ERR(lh_k_matmul_scaled(ctx, &xt, &wc, &st, 1, 32, NULL, &yt), LH_E_USAGE,
               "lh_k_matmul_scaled: w is on cuda:0, but the context is on cpu");
    lh_k_ctx_free(ctx);
}

static void test_scaled_dequant_errors(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static float d[8 * 64], s[64];
    static uint8_t w[8 * 64];
    lh_tensor wt = kt_t2(LH_DTYPE_FP8_E4M3, w, 8, 64), st = kt_t2(LH_DTYPE_F16, s, 1, 1);
    lh_tensor dt = kt_t2(LH_DTYPE_F32, d, 8, 64);
    CU_ASSERT_EQUAL(lh_k_dequantize_scaled(ctx, &wt, &st, 128, 128, &dt), LH_OK);
    lh_tensor d2 = kt_t2(LH_DTYPE_F32, d, 8, 32);
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &st, 128, 128, &d2), LH_E_USAGE,
               "lh_k_dequantize_scaled: dst [8, 32] must have the shape of w [8, 64]");
    lh_tensor d16 = kt_t2(LH_DTYPE_F16, d, 8, 64);
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &st, 128, 128, &d16), LH_E_UNSUPPORTED,
               "lh_k_dequantize_scaled: dst [8, 64] has dtype f16; supported: f32");
    lh_tensor dw = kt_t2(LH_DTYPE_F32, w, 8, 64);
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &st, 128, 128, &dw), LH_E_USAGE,
               "lh_k_dequantize_scaled: dst [8, 64] overlaps w or scale");
    lh_tensor ss = kt_t2(LH_DTYPE_F16, d + 5, 1, 1);
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &ss, 128, 128, &dt), LH_E_USAGE,
               "dst [8, 64] overlaps w or scale");
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &st, 4, 128, &dt), LH_E_USAGE,
               "lh_k_dequantize_scaled: scale [1, 1] must be [2, 1] for w [8, 64] with 4 x 128 "
               "blocks");
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &wt, &st, 128, 0, &dt), LH_E_USAGE,
               "lh_k_dequantize_scaled: block_rows 128 and block_cols 0 must both be >= 1");
    lh_tensor w7 = kt_t2(LH_DTYPE_INT4, w, 2, 7), d7 = kt_t2(LH_DTYPE_F32, d, 2, 7);
    EXPECT_ERR(lh_k_dequantize_scaled(ctx, &w7, &st, 128, 128, &d7), LH_E_USAGE,
               "lh_k_dequantize_scaled: w int4 [2, 7]: K 7 must be even");
    lh_k_ctx_free(ctx);
}

static CU_TestInfo scaled_tests[] = {
    {"dequantize_scaled == reference, bit for bit [scalar]", scaled_dequant_reference_scalar},
    {"dequantize_scaled == reference, bit for bit [avx2]", scaled_dequant_reference_avx2},
    {"dequantize_scaled == reference, bit for bit [avx512]", scaled_dequant_reference_avx512},
    {"every fp8 code decodes to lh_k_fp8_e4m3_to_f32 [scalar]", scaled_fp8_codes_scalar},
    {"every fp8 code decodes to lh_k_fp8_e4m3_to_f32 [avx2]", scaled_fp8_codes_avx2},
    {"every fp8 code decodes to lh_k_fp8_e4m3_to_f32 [avx512]", scaled_fp8_codes_avx512},
    {"dequantize_scaled known values", test_scaled_dequant_known},
    {"matmul_scaled == dequantize_scaled + f32 matmul, bit for bit [scalar]",
     scaled_matmul_bit_identical_scalar},
    {"matmul_scaled == dequantize_scaled + f32 matmul, bit for bit [avx2]",
     scaled_matmul_bit_identical_avx2},
    {"matmul_scaled == dequantize_scaled + f32 matmul, bit for bit [avx512]",
     scaled_matmul_bit_identical_avx512},
    {"empty shapes", test_scaled_empty},
    {"matmul_scaled argument errors", test_scaled_matmul_errors},
    {"dequantize_scaled argument errors", test_scaled_dequant_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: weights with scale tensors", NULL, NULL, NULL, NULL, scaled_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
