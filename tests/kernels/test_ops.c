/* Kernel library: embedding, RMSNorm (+ fused residual add), SiLU-gated product, softmax,
 * argmax and tensor dtype conversion, each against a double-precision reference on every ISA
 * this CPU has, vector paths against the scalar path, threads 1 vs 2, and argument errors.
 *
 * Tolerances (per element):
 *   embedding, convert      exact (conversions are exact or round-to-nearest-even, as Part 1)
 *   rmsnorm, add_rmsnorm    |out - ref| <= 1e-5 * |ref| + 1e-6 * |w + offset|; residual exact
 *   silu_mul                |out - ref| <= 1e-6 * |ref| + 1e-30
 *   gelu_tanh_mul           |out - ref| <= 1e-6 * |ref| + 1.5e-7 * |gate * up|
 *   scale                   exact (one f32 product)
 *   softmax                 |out - ref| <= 4e-6 * ref + 1e-9; masked (-inf) entries exactly 0
 *   argmax                  exact, first index on ties */
#include "ktest.h"

static const int64_t Ds[] = {1, 7, 33, 257, 1000, 4096};
static const int64_t Rows[] = {1, 3, 17};
static const lh_dtype Wdts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};

/* ---- embedding ------------------------------------------------------------------------------ */

static void embedding_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(101);
    const int64_t V = 50;
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 5; ki++) {
            const int64_t D = Ds[ki];
            void *table = malloc((size_t)(V * D) * kt_esize(Wdts[di]));
            float *ref = malloc((size_t)(V * D) * sizeof(float));
            kt_fill_w(Wdts[di], table, ref, V * D, 3.0f);
            int32_t ids[9] = {0, 49, 7, 7, 13, 0, 25, 48, 1};
            float *out = malloc((size_t)(9 * D) * sizeof(float));
            lh_tensor t = kt_t2(Wdts[di], table, V, D), o = kt_t2(LH_DTYPE_F32, out, 9, D);
            CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 9, &o), LH_OK);
            long bad = 0;
            for (int i = 0; i < 9; i++)
                bad += memcmp(out + i * D, ref + ids[i] * D, (size_t)D * sizeof(float)) != 0;
            CU_ASSERT_EQUAL(bad, 0);
            lh_tensor o0 = kt_t2(LH_DTYPE_F32, out, 0, D);
            CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, NULL, 0, &o0), LH_OK);
            free(table);
            free(ref);
            free(out);
        }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(embedding_exact)

static void test_embedding_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float table[4 * 3] = {0}, out[2 * 3];
    lh_tensor t = kt_t2(LH_DTYPE_F32, table, 4, 3), o = kt_t2(LH_DTYPE_F32, out, 2, 3);
    int32_t ids[2] = {1, 4};
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "ids[1] = 4 is outside [0, 4) (table [4, 3])"));
    ids[1] = -1;
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 2, &o), LH_E_USAGE);
    ids[1] = 3;
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 2, &o), LH_OK);
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, NULL, 2, &o), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, NULL, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 3, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "out [2, 3] must be [3, 3]"));
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, -1, &o), LH_E_USAGE);
    lh_tensor ob = o;
    ob.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, 2, &ob), LH_E_UNSUPPORTED);
    lh_tensor ti = t;
    ti.dtype = LH_DTYPE_INT4;
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &ti, ids, 2, &o), LH_E_UNSUPPORTED);
    lh_tensor tc = t;
    tc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_embedding(ctx, &tc, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "cuda:0"));
    lh_k_ctx_free(ctx);
}

/* ---- rmsnorm -------------------------------------------------------------------------------- */

/* out_ref = x / sqrt(mean(x^2) + eps) * (w + offset), in double except w + offset */
static void rms_ref(const float *x, const float *wref, int64_t D, float eps, float offset, double *out)
{
    double ss = 0;
    for (int64_t i = 0; i < D; i++)
        ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)D + (double)eps);
    for (int64_t i = 0; i < D; i++)
        out[i] = (double)x[i] * r * (double)(float)(wref[i] + offset); /* HF forms 1 + w in f32 */
}

static void rmsnorm_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(202);
    const float eps = 1e-6f;
    for (int di = 0; di < 3; di++)
        for (int off = 0; off < 2; off++)
            for (int ri = 0; ri < 3; ri++)
                for (int ki = 0; ki < 6; ki++) {
                    const int64_t R = Rows[ri], D = Ds[ki];
                    const float offset = (float)off;
                    float *x = malloc((size_t)(R * D) * sizeof(float));
                    float *res = malloc((size_t)(R * D) * sizeof(float));
                    float *res0 = malloc((size_t)(R * D) * sizeof(float));
                    float *out = malloc((size_t)(R * D) * sizeof(float));
                    float *wref = malloc((size_t)D * sizeof(float));
                    void *w = malloc((size_t)D * kt_esize(Wdts[di]));
                    double *ref = malloc((size_t)D * sizeof(double));
                    for (int64_t i = 0; i < R * D; i++) {
                        x[i] = kt_uniform() * 4.0f;
                        res0[i] = res[i] = kt_uniform() * 4.0f;
                    }
                    kt_fill_w(Wdts[di], w, wref, D, 2.0f);
                    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, R, D), ot = kt_t2(LH_DTYPE_F32, out, R, D);
                    lh_tensor rt = kt_t2(LH_DTYPE_F32, res, R, D), wt = kt_t1(Wdts[di], w, D);
                    char what[128];
                    snprintf(what, sizeof what, "%s rmsnorm R %lld D %lld w %s offset %d",
                             lh_k_isa_name(isa), (long long)R, (long long)D, kt_dt_name(Wdts[di]), off);

                    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, eps, offset, &ot), LH_OK);
                    kt_cmp c = {0};
                    for (int64_t r = 0; r < R; r++) {
                        rms_ref(x + r * D, wref, D, eps, offset, ref);
                        for (int64_t i = 0; i < D; i++)
                            kt_check(&c, (long)(r * D + i), out[r * D + i], ref[i],
                                     1e-5 * fabs(ref[i]) + 1e-6 * fabs(wref[i] + offset));
                    }
                    KT_REPORT(c, what);

                    /* fused: residual += x exactly (f32 add), out = norm(residual) */
                    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &rt, &xt, &wt, eps, offset, &ot), LH_OK);
                    kt_cmp c2 = {0};
                    long res_bad = 0;
                    for (int64_t r = 0; r < R; r++) {
                        for (int64_t i = 0; i < D; i++)
                            res_bad += res[r * D + i] != res0[r * D + i] + x[r * D + i];
                        rms_ref(res + r * D, wref, D, eps, offset, ref);
                        for (int64_t i = 0; i < D; i++)
                            kt_check(&c2, (long)(r * D + i), out[r * D + i], ref[i],
                                     1e-5 * fabs(ref[i]) + 1e-6 * fabs(wref[i] + offset));
                    }
                    CU_ASSERT_EQUAL(res_bad, 0);
                    KT_REPORT(c2, what);

                    /* in place: out aliases x */
                    memcpy(out, x, (size_t)(R * D) * sizeof(float));
                    float *out2 = malloc((size_t)(R * D) * sizeof(float));
                    lh_tensor o2 = kt_t2(LH_DTYPE_F32, out2, R, D);
                    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, eps, offset, &o2), LH_OK);
                    lh_tensor alias = kt_t2(LH_DTYPE_F32, out, R, D);
                    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &alias, &wt, eps, offset, &alias), LH_OK);
                    CU_ASSERT_EQUAL(memcmp(out, out2, (size_t)(R * D) * sizeof(float)), 0);
                    free(out2);
                    free(x);
                    free(res);
                    free(res0);
                    free(out);
                    free(wref);
                    free(w);
                    free(ref);
                }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(rmsnorm_vs_reference)

static void test_rmsnorm_gemma_offset_and_ranks(void)
{
    /* offset 1: (1 + w) with w = 0 is the plain normalization; a [2, 3, 4] tensor normalizes
     * each row of 4 */
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[24], out[24], w[4] = {0, 0, 0, 0};
    for (int i = 0; i < 24; i++)
        x[i] = (float)(i % 4 == 0 ? 2 : -2);
    lh_tensor xt = kt_t3(LH_DTYPE_F32, x, 2, 3, 4), ot = kt_t3(LH_DTYPE_F32, out, 2, 3, 4);
    lh_tensor wt = kt_t1(LH_DTYPE_F32, w, 4);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, 0.0f, 1.0f, &ot), LH_OK);
    for (int i = 0; i < 24; i++)
        CU_ASSERT_EQUAL(out[i], i % 4 == 0 ? 1.0f : -1.0f);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, 0.0f, 0.0f, &ot), LH_OK);
    for (int i = 0; i < 24; i++)
        CU_ASSERT_EQUAL(out[i], 0.0f);
    lh_k_ctx_free(ctx);
}

static void test_rmsnorm_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[12] = {1}, out[12], w[4] = {1, 1, 1, 1}, res[12] = {0};
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 3, 4), ot = kt_t2(LH_DTYPE_F32, out, 3, 4);
    lh_tensor wt = kt_t1(LH_DTYPE_F32, w, 4), rt = kt_t2(LH_DTYPE_F32, res, 3, 4);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, 1e-6f, 0, &ot), LH_OK);
    lh_tensor w3 = kt_t1(LH_DTYPE_F32, w, 3);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &w3, 1e-6f, 0, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_rmsnorm: w [3] must match the last dim of x [3, 4]"));
    lh_tensor o2 = kt_t2(LH_DTYPE_F32, out, 4, 3);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, 1e-6f, 0, &o2), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, -1.0f, 0, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wt, NAN, 0, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, NULL, 1e-6f, 0, &ot), LH_E_USAGE);
    lh_tensor xb = xt;
    xb.dtype = LH_DTYPE_F16;
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xb, &wt, 1e-6f, 0, &ot), LH_E_UNSUPPORTED);
    lh_tensor wc = wt;
    wc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xt, &wc, 1e-6f, 0, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "cuda:0"));
    /* partial overlap of out and x */
    lh_tensor os = kt_t2(LH_DTYPE_F32, x + 1, 2, 4), xs = kt_t2(LH_DTYPE_F32, x, 2, 4);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(ctx, &xs, &wt, 1e-6f, 0, &os), LH_E_USAGE);

    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &rt, &xt, &wt, 1e-6f, 0, &ot), LH_OK);
    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &rt, &xt, &wt, 1e-6f, 0, &xt), LH_OK); /* out aliases x */
    lh_tensor r2 = kt_t2(LH_DTYPE_F32, res, 2, 4);
    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &r2, &xt, &wt, 1e-6f, 0, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "residual [2, 4] must have the shape of x [3, 4]"));
    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, NULL, &xt, &wt, 1e-6f, 0, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &xt, &xt, &wt, 1e-6f, 0, &ot), LH_E_USAGE);
    lh_tensor rc = rt;
    rc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_add_rmsnorm(ctx, &rc, &xt, &wt, 1e-6f, 0, &ot), LH_E_USAGE);
    lh_k_ctx_free(ctx);
}

/* ---- silu_mul ------------------------------------------------------------------------------- */

static void silu_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(303);
    const int64_t sizes[] = {1, 7, 33, 257, 1000, 40000};
    for (int si = 0; si < 6; si++) {
        const int64_t n = sizes[si];
        float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float));
        float *out = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            g[i] = kt_uniform() * (i % 5 == 0 ? 100.0f : 12.0f); /* includes exp over/underflow */
            u[i] = kt_uniform() * 3.0f;
        }
        lh_tensor gt = kt_t2(LH_DTYPE_F32, g, 1, n), ut = kt_t2(LH_DTYPE_F32, u, 1, n);
        lh_tensor ot = kt_t2(LH_DTYPE_F32, out, 1, n);
        CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, &ut, &ot), LH_OK);
        kt_cmp c = {0};
        for (int64_t i = 0; i < n; i++) {
            double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
            kt_check(&c, (long)i, out[i], ref, 1e-6 * fabs(ref) + 1e-30);
        }
        KT_REPORT(c, "silu_mul");
        /* in place over gate and over up */
        float *g2 = malloc((size_t)n * sizeof(float));
        memcpy(g2, g, (size_t)n * sizeof(float));
        lh_tensor g2t = kt_t2(LH_DTYPE_F32, g2, 1, n);
        CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &g2t, &ut, &g2t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(g2, out, (size_t)n * sizeof(float)), 0);
        memcpy(g2, u, (size_t)n * sizeof(float));
        CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, &g2t, &g2t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(g2, out, (size_t)n * sizeof(float)), 0);
        free(g2);
        free(g);
        free(u);
        free(out);
    }
    /* NaN stays NaN; silu(0) = 0 */
    float g[3] = {NAN, 0.0f, -200.0f}, u[3] = {1, 1, 1}, out[3];
    lh_tensor gt = kt_t1(LH_DTYPE_F32, g, 3), ut = kt_t1(LH_DTYPE_F32, u, 3), ot = kt_t1(LH_DTYPE_F32, out, 3);
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, &ut, &ot), LH_OK);
    CU_ASSERT_TRUE(isnan(out[0]));
    CU_ASSERT_EQUAL(out[1], 0.0f);
    CU_ASSERT_TRUE(out[2] <= 0.0f && out[2] > -1e-30f);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(silu_vs_reference)

/* ---- gelu_tanh_mul, scale -------------------------------------------------------------------- */

static double gelu_tanh_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* |out - ref| <= 1e-6 |ref| + 1.5e-7 |gate * up|: tanhf's absolute error near -1 (where
 * 1 + tanh cancels) scaled by 0.5 |x| |u|, as torch's float32 has it too. */
static void gelu_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(404);
    const int64_t sizes[] = {1, 7, 33, 257, 1000, 40000};
    for (int si = 0; si < 6; si++) {
        const int64_t n = sizes[si];
        float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float));
        float *out = malloc((size_t)n * sizeof(float)), *o1 = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            g[i] = kt_uniform() * (i % 5 == 0 ? 100.0f : 6.0f);
            u[i] = kt_uniform() * 3.0f;
        }
        lh_tensor gt = kt_t2(LH_DTYPE_F32, g, 1, n), ut = kt_t2(LH_DTYPE_F32, u, 1, n);
        lh_tensor ot = kt_t2(LH_DTYPE_F32, out, 1, n), o1t = kt_t2(LH_DTYPE_F32, o1, 1, n);
        CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, &ot), LH_OK);
        CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(c1, &gt, &ut, &o1t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(out, o1, (size_t)n * sizeof(float)), 0); /* threads 1 vs 2 */
        kt_cmp c = {0};
        for (int64_t i = 0; i < n; i++) {
            double ref = gelu_tanh_ref(g[i]) * (double)u[i];
            kt_check(&c, (long)i, out[i], ref,
                     1e-6 * fabs(ref) + 1.5e-7 * fabs((double)g[i] * u[i]) + 1e-30);
        }
        KT_REPORT(c, "gelu_tanh_mul");
        /* in place over gate and over up: the same bits */
        float *g2 = malloc((size_t)n * sizeof(float));
        memcpy(g2, g, (size_t)n * sizeof(float));
        lh_tensor g2t = kt_t2(LH_DTYPE_F32, g2, 1, n);
        CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &g2t, &ut, &g2t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(g2, out, (size_t)n * sizeof(float)), 0);
        memcpy(g2, u, (size_t)n * sizeof(float));
        CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &g2t, &g2t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(g2, out, (size_t)n * sizeof(float)), 0);
        free(g2);
        free(g);
        free(u);
        free(out);
        free(o1);
    }
    /* gelu(0) = 0, NaN stays NaN, large negative -> 0, large positive -> x; rank 3 */
    float g[6] = {0.0f, NAN, -200.0f, 200.0f, 1.0f, -1.0f}, u[6] = {1, 1, 1, 1, 2, 2}, out[6];
    lh_tensor gt = kt_t3(LH_DTYPE_F32, g, 1, 2, 3), ut = kt_t3(LH_DTYPE_F32, u, 1, 2, 3);
    lh_tensor ot = kt_t3(LH_DTYPE_F32, out, 1, 2, 3);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, &ot), LH_OK);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_TRUE(isnan(out[1]));
    CU_ASSERT_TRUE(fabsf(out[2]) <= 1e-30f);
    CU_ASSERT_EQUAL(out[3], 200.0f);
    /* torch: gelu(1, approximate="tanh") = 0.8411920071, gelu(-1) = -0.1588079929 */
    CU_ASSERT_DOUBLE_EQUAL(out[4], 2 * 0.8411920071, 2e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[5], 2 * -0.1588079929, 2e-6);
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(c1);
}
KT_ISA_TESTS(gelu_vs_reference)

static void scale_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(505);
    const int64_t sizes[] = {1, 7, 33, 257, 40000};
    const float factors[] = {4.898979485566356f, -0.5f, 0.0f, 1e-3f};
    for (int si = 0; si < 5; si++)
        for (int fi = 0; fi < 4; fi++) {
            const int64_t n = sizes[si];
            float *x = malloc((size_t)n * sizeof(float)), *x0 = malloc((size_t)n * sizeof(float));
            for (int64_t i = 0; i < n; i++)
                x0[i] = x[i] = kt_uniform() * 50.0f;
            lh_tensor xt = n % 3 ? kt_t1(LH_DTYPE_F32, x, n) : kt_t3(LH_DTYPE_F32, x, n / 3, 1, 3);
            CU_ASSERT_EQUAL(lh_k_scale(ctx, &xt, factors[fi]), LH_OK);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += x[i] != x0[i] * factors[fi]; /* one f32 product: exact */
            CU_ASSERT_EQUAL(bad, 0);
            free(x);
            free(x0);
        }
    /* empty tensor: nothing to do */
    float one = 3.0f;
    lh_tensor e = kt_t2(LH_DTYPE_F32, &one, 0, 4);
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &e, 2.0f), LH_OK);
    CU_ASSERT_EQUAL(one, 3.0f);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(scale_exact)

static void test_gelu_scale_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float g[8] = {0}, u[8] = {0}, o[8];
    lh_tensor gt = kt_t2(LH_DTYPE_F32, g, 2, 4), ut = kt_t2(LH_DTYPE_F32, u, 2, 4);
    lh_tensor ot = kt_t2(LH_DTYPE_F32, o, 2, 4), u3 = kt_t2(LH_DTYPE_F32, u, 2, 3);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, &ot), LH_OK);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(NULL, &gt, &ut, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_gelu_tanh_mul: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &u3, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_gelu_tanh_mul: gate [2, 4], up [2, 3]"));
    lh_tensor o3 = kt_t2(LH_DTYPE_F32, o, 4, 2);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, &o3), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, NULL, &ut, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, NULL, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, NULL), LH_E_USAGE);
    lh_tensor gb = gt;
    gb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gb, &ut, &ot), LH_E_UNSUPPORTED);
    lh_tensor oc = ot;
    oc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gt, &ut, &oc), LH_E_USAGE);
    lh_tensor gs = gt;
    gs.stride[0] = 5;
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gs, &ut, &ot), LH_E_USAGE);
    lh_tensor oshift = kt_t2(LH_DTYPE_F32, g + 1, 1, 4), gshort = kt_t2(LH_DTYPE_F32, g, 1, 4);
    lh_tensor ushort = kt_t2(LH_DTYPE_F32, u, 1, 4);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &gshort, &ushort, &oshift), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "only exact aliasing"));
    lh_tensor ushift = kt_t2(LH_DTYPE_F32, g + 1, 1, 4), oover = kt_t2(LH_DTYPE_F32, g, 1, 4);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &ushort, &ushift, &oover), LH_E_USAGE);
    /* scale */
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gt, 2.0f), LH_OK);
    CU_ASSERT_EQUAL(lh_k_scale(NULL, &gt, 2.0f), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_scale(ctx, NULL, 2.0f), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gt, NAN), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_scale: s nan is not finite"));
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gt, INFINITY), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gb, 2.0f), LH_E_UNSUPPORTED);
    lh_tensor gc = gt;
    gc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gc, 2.0f), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_scale(ctx, &gs, 2.0f), LH_E_USAGE);
    lh_k_ctx_free(ctx);
}

/* ---- softmax -------------------------------------------------------------------------------- */

static void softmax_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(404);
    for (int ri = 0; ri < 3; ri++)
        for (int ki = 0; ki < 6; ki++) {
            const int64_t R = Rows[ri], N = Ds[ki];
            float *x = malloc((size_t)(R * N) * sizeof(float)), *x0 = malloc((size_t)(R * N) * sizeof(float));
            for (int64_t i = 0; i < R * N; i++) {
                x0[i] = x[i] = kt_uniform() * 30.0f + (i % 3 == 0 ? 1000.0f : 0.0f);
                if (N > 1 && i % 7 == 3)
                    x0[i] = x[i] = -INFINITY; /* masked */
            }
            lh_tensor t = kt_t2(LH_DTYPE_F32, x, R, N);
            CU_ASSERT_EQUAL(lh_k_softmax(ctx, &t), LH_OK);
            kt_cmp c = {0};
            long masked_bad = 0;
            for (int64_t r = 0; r < R; r++) {
                double m = -INFINITY, s = 0;
                for (int64_t i = 0; i < N; i++)
                    m = fmax(m, x0[r * N + i]);
                for (int64_t i = 0; i < N; i++)
                    s += exp((double)x0[r * N + i] - m);
                for (int64_t i = 0; i < N; i++) {
                    double ref = exp((double)x0[r * N + i] - m) / s;
                    kt_check(&c, (long)(r * N + i), x[r * N + i], ref, 4e-6 * ref + 1e-9);
                    if (isinf(x0[r * N + i]))
                        masked_bad += x[r * N + i] != 0.0f;
                }
            }
            KT_REPORT(c, "softmax");
            CU_ASSERT_EQUAL(masked_bad, 0);
            free(x);
            free(x0);
        }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(softmax_vs_reference)

/* ---- argmax --------------------------------------------------------------------------------- */

static void argmax_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(505);
    const int64_t sizes[] = {1, 7, 33, 257, 1000, 32001};
    for (int si = 0; si < 6; si++) {
        const int64_t N = sizes[si], R = 5;
        float *x = malloc((size_t)(R * N) * sizeof(float));
        for (int64_t i = 0; i < R * N; i++)
            x[i] = kt_uniform() * 10.0f;
        /* row 1: a tie, the later copy must lose; row 2: all equal; row 3: -inf with one finite;
         * row 4: the max in the last element */
        int64_t a = N / 3, b = N - 1;
        x[1 * N + a] = 50.0f;
        x[1 * N + b] = 50.0f;
        for (int64_t i = 0; i < N; i++)
            x[2 * N + i] = 1.5f;
        for (int64_t i = 0; i < N; i++)
            x[3 * N + i] = -INFINITY;
        x[3 * N + N / 2] = -1e30f;
        x[4 * N + N - 1] = 99.0f;
        int32_t out[5];
        lh_tensor t = kt_t2(LH_DTYPE_F32, x, R, N);
        CU_ASSERT_EQUAL(lh_k_argmax(ctx, &t, out), LH_OK);
        int64_t best = 0;
        for (int64_t i = 1; i < N; i++)
            if (x[i] > x[best])
                best = i;
        CU_ASSERT_EQUAL(out[0], best);
        CU_ASSERT_EQUAL(out[1], a);
        CU_ASSERT_EQUAL(out[2], 0);
        CU_ASSERT_EQUAL(out[3], N / 2);
        CU_ASSERT_EQUAL(out[4], N - 1);
        /* a NaN anywhere in a row is an error naming the row */
        x[2 * N + N - 1] = NAN;
        CU_ASSERT_EQUAL(lh_k_argmax(ctx, &t, out), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "row 2"));
        CU_ASSERT_EQUAL(out[2], -1);
        CU_ASSERT_EQUAL(out[1], a);
        free(x);
    }
    float one[3] = {-2, 5, 5};
    int32_t o1 = -7;
    lh_tensor t1 = kt_t1(LH_DTYPE_F32, one, 3);
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &t1, &o1), LH_OK);
    CU_ASSERT_EQUAL(o1, 1);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(argmax_exact)

/* ---- convert -------------------------------------------------------------------------------- */

static float wide_random(void)
{
    uint64_t r = kt_u64();
    switch (r % 8) {
    case 0: { /* any bit pattern: NaN, inf, subnormal */
        uint32_t u = (uint32_t)(r >> 32);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case 1: return kt_uniform() * 1e-6f; /* f16 subnormal range */
    case 2: return kt_uniform() * 70000.0f; /* f16 overflow edge */
    default: return kt_uniform() * 100.0f;
    }
}

static bool same_value(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static void convert_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(606);
    const int64_t n = 40007; /* several tasks and an odd tail */
    float *f = malloc((size_t)n * sizeof(float)), *fb = malloc((size_t)n * sizeof(float));
    uint16_t *h = malloc((size_t)n * 2), *h2 = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        f[i] = wide_random();
    lh_tensor tf = kt_t2(LH_DTYPE_F32, f, 1, n), tfb = kt_t2(LH_DTYPE_F32, fb, 1, n);
    const lh_dtype halves[2] = {LH_DTYPE_BF16, LH_DTYPE_F16};
    for (int hi = 0; hi < 2; hi++) {
        const lh_dtype dt = halves[hi];
        lh_tensor th = kt_t2(dt, h, 1, n);
        CU_ASSERT_EQUAL(lh_k_convert(ctx, &tf, &th), LH_OK); /* f32 -> half */
        long bad = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = dt == LH_DTYPE_BF16 ? lh_k_f32_to_bf16(f[i]) : lh_k_f32_to_f16(f[i]);
            float gw = dt == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(h[i]) : lh_k_f16_to_f32(h[i]);
            float ww = dt == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(want) : lh_k_f16_to_f32(want);
            bad += !same_value(gw, ww); /* bit-exact except NaN payloads */
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_EQUAL(lh_k_convert(ctx, &th, &tfb), LH_OK); /* half -> f32 */
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !same_value(fb[i], dt == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(h[i]) : lh_k_f16_to_f32(h[i]));
        CU_ASSERT_EQUAL(bad, 0);
        /* half -> other half: through f32, one rounding */
        const lh_dtype other = halves[1 - hi];
        lh_tensor th2 = kt_t2(other, h2, 1, n);
        CU_ASSERT_EQUAL(lh_k_convert(ctx, &th, &th2), LH_OK);
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float v = dt == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(h[i]) : lh_k_f16_to_f32(h[i]);
            uint16_t want = other == LH_DTYPE_BF16 ? lh_k_f32_to_bf16(v) : lh_k_f32_to_f16(v);
            float gw = other == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(h2[i]) : lh_k_f16_to_f32(h2[i]);
            float ww = other == LH_DTYPE_BF16 ? lh_k_bf16_to_f32(want) : lh_k_f16_to_f32(want);
            bad += !same_value(gw, ww);
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* same dtype: a copy */
        CU_ASSERT_EQUAL(lh_k_convert(ctx, &th, &th2) == LH_OK, true);
        lh_tensor th3 = kt_t2(dt, h2, 1, n);
        CU_ASSERT_EQUAL(lh_k_convert(ctx, &th, &th3), LH_OK);
        CU_ASSERT_EQUAL(memcmp(h, h2, (size_t)n * 2), 0);
    }
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &tf, &tfb), LH_OK);
    CU_ASSERT_EQUAL(memcmp(f, fb, (size_t)n * sizeof(float)), 0);
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &tf, &tf), LH_OK); /* in place, same dtype: nothing to do */
    free(f);
    free(fb);
    free(h);
    free(h2);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(convert_exact)

/* ---- vector vs scalar, threads 1 vs 2 ------------------------------------------------------- */

static void ops_vs_scalar(lh_k_isa isa)
{
    lh_kctx *cs = kt_ctx(1, LH_K_ISA_SCALAR), *cv1 = kt_ctx(1, isa), *cv2 = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cv1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cv2);
    kt_seed(707);
    const int64_t R = 9, D = 1003;
    const size_t bytes = (size_t)(R * D) * sizeof(float);
    float *x = malloc(bytes), *u = malloc(bytes), *w = malloc((size_t)D * sizeof(float));
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int64_t i = 0; i < R * D; i++) {
        x[i] = kt_uniform() * 8.0f;
        u[i] = kt_uniform();
    }
    for (int64_t i = 0; i < D; i++)
        w[i] = kt_uniform();
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, R, D), ut = kt_t2(LH_DTYPE_F32, u, R, D);
    lh_tensor wt = kt_t1(LH_DTYPE_F32, w, D);
    lh_tensor at = kt_t2(LH_DTYPE_F32, a, R, D), bt = kt_t2(LH_DTYPE_F32, b, R, D);
    lh_tensor ct = kt_t2(LH_DTYPE_F32, c, R, D);

    /* rmsnorm */
    CU_ASSERT_EQUAL(lh_k_rmsnorm(cs, &xt, &wt, 1e-5f, 0, &at), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(cv1, &xt, &wt, 1e-5f, 0, &bt), LH_OK);
    CU_ASSERT_EQUAL(lh_k_rmsnorm(cv2, &xt, &wt, 1e-5f, 0, &ct), LH_OK);
    CU_ASSERT_EQUAL(memcmp(b, c, bytes), 0);
    kt_cmp k1 = {0};
    for (int64_t i = 0; i < R * D; i++)
        kt_check(&k1, (long)i, b[i], a[i], 2e-5 * fabs(a[i]) + 1e-6);
    KT_REPORT(k1, "rmsnorm vector vs scalar");

    /* silu_mul */
    CU_ASSERT_EQUAL(lh_k_silu_mul(cs, &xt, &ut, &at), LH_OK);
    CU_ASSERT_EQUAL(lh_k_silu_mul(cv1, &xt, &ut, &bt), LH_OK);
    CU_ASSERT_EQUAL(lh_k_silu_mul(cv2, &xt, &ut, &ct), LH_OK);
    CU_ASSERT_EQUAL(memcmp(b, c, bytes), 0);
    kt_cmp k2 = {0};
    for (int64_t i = 0; i < R * D; i++)
        kt_check(&k2, (long)i, b[i], a[i], 8e-6 * fabs(a[i]) + 1e-30);
    KT_REPORT(k2, "silu_mul vector vs scalar");

    /* softmax */
    memcpy(a, x, bytes);
    memcpy(b, x, bytes);
    memcpy(c, x, bytes);
    CU_ASSERT_EQUAL(lh_k_softmax(cs, &at), LH_OK);
    CU_ASSERT_EQUAL(lh_k_softmax(cv1, &bt), LH_OK);
    CU_ASSERT_EQUAL(lh_k_softmax(cv2, &ct), LH_OK);
    CU_ASSERT_EQUAL(memcmp(b, c, bytes), 0);
    kt_cmp k3 = {0};
    for (int64_t i = 0; i < R * D; i++)
        kt_check(&k3, (long)i, b[i], a[i], 8e-6 * fabs(a[i]) + 1e-9);
    KT_REPORT(k3, "softmax vector vs scalar");

    /* argmax and embedding: exact */
    int32_t ia[9], ib[9];
    CU_ASSERT_EQUAL(lh_k_argmax(cs, &xt, ia), LH_OK);
    CU_ASSERT_EQUAL(lh_k_argmax(cv2, &xt, ib), LH_OK);
    CU_ASSERT_EQUAL(memcmp(ia, ib, sizeof ia), 0);
    free(x);
    free(u);
    free(w);
    free(a);
    free(b);
    free(c);
    lh_k_ctx_free(cs);
    lh_k_ctx_free(cv1);
    lh_k_ctx_free(cv2);
}
KT_VEC_TESTS(ops_vs_scalar)

static void test_activation_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float g[8] = {0}, u[8] = {0}, o[8];
    uint16_t h[8];
    int32_t idx[2];
    lh_tensor gt = kt_t2(LH_DTYPE_F32, g, 2, 4), ut = kt_t2(LH_DTYPE_F32, u, 2, 4);
    lh_tensor ot = kt_t2(LH_DTYPE_F32, o, 2, 4), u3 = kt_t2(LH_DTYPE_F32, u, 2, 3);
    /* silu_mul */
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, &u3, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_silu_mul: gate [2, 4], up [2, 3]"));
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, NULL, &ot), LH_E_USAGE);
    lh_tensor gb = gt;
    gb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gb, &ut, &ot), LH_E_UNSUPPORTED);
    lh_tensor oc = ot;
    oc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gt, &ut, &oc), LH_E_USAGE);
    lh_tensor oshift = kt_t2(LH_DTYPE_F32, g + 1, 1, 4), gshort = kt_t2(LH_DTYPE_F32, g, 1, 4);
    lh_tensor ushort = kt_t2(LH_DTYPE_F32, u, 1, 4);
    CU_ASSERT_EQUAL(lh_k_silu_mul(ctx, &gshort, &ushort, &oshift), LH_E_USAGE); /* partial overlap */
    /* softmax */
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, NULL), LH_E_USAGE);
    lh_tensor gh = kt_t2(LH_DTYPE_F16, h, 2, 4);
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, &gh), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_softmax: x [2, 4] has dtype f16"));
    lh_tensor gc = gt;
    gc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, &gc), LH_E_USAGE);
    lh_tensor gs = gt;
    gs.stride[0] = 5;
    CU_ASSERT_EQUAL(lh_k_softmax(ctx, &gs), LH_E_USAGE);
    /* argmax */
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &gt, NULL), LH_E_USAGE);
    lh_tensor e0 = kt_t2(LH_DTYPE_F32, g, 2, 0);
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &e0, idx), LH_E_USAGE);
    lh_tensor g3 = kt_t3(LH_DTYPE_F32, g, 2, 2, 2);
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &g3, idx), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &gc, idx), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_argmax(ctx, &gh, idx), LH_E_UNSUPPORTED);
    /* convert */
    lh_tensor h24 = kt_t2(LH_DTYPE_BF16, h, 2, 4), h42 = kt_t2(LH_DTYPE_BF16, h, 4, 2);
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &gt, &h24), LH_OK);
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &gt, &h42), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "src [2, 4] and dst [4, 2]"));
    lh_tensor i8 = kt_t2(LH_DTYPE_INT8, h, 2, 4);
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &gt, &i8), LH_E_UNSUPPORTED);
    CU_ASSERT_EQUAL(lh_k_convert(ctx, NULL, &h24), LH_E_USAGE);
    lh_tensor hc = h24;
    hc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &gt, &hc), LH_E_USAGE);
    lh_tensor over = kt_t2(LH_DTYPE_BF16, g, 2, 4); /* dst inside src */
    CU_ASSERT_EQUAL(lh_k_convert(ctx, &gt, &over), LH_E_USAGE);
    /* no context */
    CU_ASSERT_EQUAL(lh_k_softmax(NULL, &gt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_softmax: ctx is NULL"));
    lh_k_ctx_free(ctx);
}

static CU_TestInfo ops_tests[] = {
    {"embedding exact, all dtypes [scalar]", embedding_exact_scalar},
    {"embedding exact, all dtypes [avx2]", embedding_exact_avx2},
    {"embedding exact, all dtypes [avx512]", embedding_exact_avx512},
    {"embedding errors (out-of-range id, shapes, dtype, device)", test_embedding_errors},
    {"rmsnorm + add_rmsnorm vs reference [scalar]", rmsnorm_vs_reference_scalar},
    {"rmsnorm + add_rmsnorm vs reference [avx2]", rmsnorm_vs_reference_avx2},
    {"rmsnorm + add_rmsnorm vs reference [avx512]", rmsnorm_vs_reference_avx512},
    {"rmsnorm Gemma offset, rank 3", test_rmsnorm_gemma_offset_and_ranks},
    {"rmsnorm / add_rmsnorm errors", test_rmsnorm_errors},
    {"silu_mul vs reference [scalar]", silu_vs_reference_scalar},
    {"silu_mul vs reference [avx2]", silu_vs_reference_avx2},
    {"silu_mul vs reference [avx512]", silu_vs_reference_avx512},
    {"gelu_tanh_mul vs reference, aliasing, threads [scalar]", gelu_vs_reference_scalar},
    {"gelu_tanh_mul vs reference, aliasing, threads [avx2]", gelu_vs_reference_avx2},
    {"gelu_tanh_mul vs reference, aliasing, threads [avx512]", gelu_vs_reference_avx512},
    {"scale exact [scalar]", scale_exact_scalar},
    {"scale exact [avx2]", scale_exact_avx2},
    {"scale exact [avx512]", scale_exact_avx512},
    {"gelu_tanh_mul / scale errors", test_gelu_scale_errors},
    {"softmax vs reference, masked -inf [scalar]", softmax_vs_reference_scalar},
    {"softmax vs reference, masked -inf [avx2]", softmax_vs_reference_avx2},
    {"softmax vs reference, masked -inf [avx512]", softmax_vs_reference_avx512},
    {"argmax ties, -inf, NaN rows [scalar]", argmax_exact_scalar},
    {"argmax ties, -inf, NaN rows [avx2]", argmax_exact_avx2},
    {"argmax ties, -inf, NaN rows [avx512]", argmax_exact_avx512},
    {"convert f32/bf16/f16 every direction [scalar]", convert_exact_scalar},
    {"convert f32/bf16/f16 every direction [avx2]", convert_exact_avx2},
    {"convert f32/bf16/f16 every direction [avx512]", convert_exact_avx512},
    {"norm/silu/softmax/argmax vector vs scalar, threads 1 vs 2 [avx2]", ops_vs_scalar_avx2},
    {"norm/silu/softmax/argmax vector vs scalar, threads 1 vs 2 [avx512]", ops_vs_scalar_avx512},
    {"silu_mul / softmax / argmax / convert errors", test_activation_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: embedding, norms, activations, conversion", NULL, NULL, NULL, NULL, ops_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
