/* Kernel library: LayerNorm, GELU (exact and tanh), the exact-GELU-gated product, soft-capping,
 * residual add and the additive embedding lookup, each against a double-precision reference
 * on odd shapes, on every ISA this CPU has, in place (out == input) bit for bit as out of
 * place, threads 1 vs 2 bit for bit, and every class of bad argument.
 *
 * Tolerances (per element; x the input, ref the double reference):
 *   layernorm        |out - ref| <= 3e-6 (|ref| + |w|) + 1e-6 |b|   (f32 mean and centred sum
 *                    of squares; w and b the values stored, after bf16 / f16 rounding)
 *   gelu             |out - ref| <= 1e-6 |ref| + 1.5e-7 |x|        (erff's absolute error
 *   gelu_tanh        where 1 + erf / 1 + tanh cancels, scaled by 0.5 |x|; as gelu_tanh_mul)
 *   gelu_mul         |out - ref| <= 1e-6 |ref| + 1.5e-7 |gate * up|
 *   softcap          |out - ref| <= 1e-6 |ref| + 1e-30
 *   add              exact (one f32 addition)
 *   embedding_add    exact (an exact widening, then one f32 addition) */
#include "ktest.h"

static const lh_dtype Wdts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};

/* Odd shapes: one element, a short odd row, rows not a multiple of any vector width, a long
 * row, and enough rows to spread over the pool. */
static const int64_t LnShapes[][2] = {{1, 1}, {3, 37}, {5, 130}, {2, 4096}, {17, 1001}};
#define N_LN_SHAPES ((int)(sizeof LnShapes / sizeof LnShapes[0]))

/* ---- layernorm ------------------------------------------------------------------------------ */

/* torch.nn.LayerNorm in double: population variance, (x - mean) / sqrt(var + eps) * w + b */
static void ln_ref(const float *x, const float *w, const float *b, int64_t D, float eps, double *out)
{
    double m = 0, v = 0;
    for (int64_t i = 0; i < D; i++)
        m += x[i];
    m /= (double)D;
    for (int64_t i = 0; i < D; i++)
        v += ((double)x[i] - m) * ((double)x[i] - m);
    v /= (double)D;
    const double r = 1.0 / sqrt(v + (double)eps);
    for (int64_t i = 0; i < D; i++)
        out[i] = ((double)x[i] - m) * r * (double)w[i] + (b ? (double)b[i] : 0.0);
}

static void layernorm_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(1101);
    const float eps = 1e-5f;
    for (int si = 0; si < N_LN_SHAPES; si++)
        for (int wi = 0; wi < 3; wi++)
            for (int bi = 0; bi < 4; bi++) { /* bias: none, f32, bf16, f16 */
                const int64_t R = LnShapes[si][0], D = LnShapes[si][1], n = R * D;
                const lh_dtype wdt = Wdts[wi], bdt = bi ? Wdts[bi - 1] : LH_DTYPE_F32;
                float *x = malloc((size_t)n * sizeof(float)), *out = malloc((size_t)n * sizeof(float));
                float *o1 = malloc((size_t)n * sizeof(float)), *al = malloc((size_t)n * sizeof(float));
                float *wref = malloc((size_t)D * sizeof(float)), *bref = malloc((size_t)D * sizeof(float));
                void *w = malloc((size_t)D * kt_esize(wdt)), *b = malloc((size_t)D * kt_esize(bdt));
                double *ref = malloc((size_t)D * sizeof(double));
                /* rows with a mean far from 0 (odd rows): the centred variance matters */
                for (int64_t r = 0; r < R; r++)
                    for (int64_t i = 0; i < D; i++)
                        x[r * D + i] = kt_uniform() * 4.0f + (r % 2 ? 3.0f : 0.0f);
                kt_fill_w(wdt, w, wref, D, 2.0f);
                kt_fill_w(bdt, b, bref, D, 1.0f);
                lh_tensor xt = kt_t2(LH_DTYPE_F32, x, R, D), ot = kt_t2(LH_DTYPE_F32, out, R, D);
                lh_tensor o1t = kt_t2(LH_DTYPE_F32, o1, R, D), at = kt_t2(LH_DTYPE_F32, al, R, D);
                lh_tensor wt = kt_t1(wdt, w, D), bt = kt_t1(bdt, b, D);
                const lh_tensor *bp = bi ? &bt : NULL;
                char what[160];
                snprintf(what, sizeof what, "%s layernorm [%lld, %lld] w %s b %s", lh_k_isa_name(isa),
                         (long long)R, (long long)D, kt_dt_name(wdt), bi ? kt_dt_name(bdt) : "none");

                CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, bp, eps, &ot), LH_OK);
                kt_cmp c = {0};
                for (int64_t r = 0; r < R; r++) {
                    ln_ref(x + r * D, wref, bi ? bref : NULL, D, eps, ref);
                    for (int64_t i = 0; i < D; i++)
                        kt_check(&c, (long)(r * D + i), out[r * D + i], ref[i],
                                 3e-6 * (fabs(ref[i]) + fabs(wref[i])) +
                                     (bi ? 1e-6 * fabs(bref[i]) : 0.0));
                }
                KT_REPORT(c, what);
                /* threads 1 vs 2, and in place (out == x): the same bits */
                CU_ASSERT_EQUAL(lh_k_layernorm(c1, &xt, &wt, bp, eps, &o1t), LH_OK);
                CU_ASSERT_EQUAL(memcmp(out, o1, (size_t)n * sizeof(float)), 0);
                memcpy(al, x, (size_t)n * sizeof(float));
                CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &at, &wt, bp, eps, &at), LH_OK);
                CU_ASSERT_EQUAL(memcmp(out, al, (size_t)n * sizeof(float)), 0);
                free(x);
                free(out);
                free(o1);
                free(al);
                free(wref);
                free(bref);
                free(w);
                free(b);
                free(ref);
            }
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(c1);
}
KT_ISA_TESTS(layernorm_vs_reference)

/* A constant row normalizes to exactly 0 (so out == b bit for bit); rank 3 normalizes each
 * row of the last dim, as the same data seen as [rows, D]; eps 0 is allowed. */
static void test_layernorm_constant_rows_and_rank(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(1102);
    enum { D = 37 };
    float x[2 * 3 * D], out[2 * 3 * D], o2[2 * 3 * D], w[D], b[D];
    for (int i = 0; i < D; i++) {
        w[i] = kt_uniform();
        b[i] = kt_uniform();
    }
    for (int i = 0; i < 2 * 3 * D; i++)
        x[i] = i < D ? 2.5f : kt_uniform() * 3.0f; /* row 0 constant */
    lh_tensor x3 = kt_t3(LH_DTYPE_F32, x, 2, 3, D), o3 = kt_t3(LH_DTYPE_F32, out, 2, 3, D);
    lh_tensor x2 = kt_t2(LH_DTYPE_F32, x, 6, D), o2t = kt_t2(LH_DTYPE_F32, o2, 6, D);
    lh_tensor wt = kt_t1(LH_DTYPE_F32, w, D), bt = kt_t1(LH_DTYPE_F32, b, D);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x3, &wt, &bt, 1e-6f, &o3), LH_OK);
    CU_ASSERT_EQUAL(memcmp(out, b, sizeof b), 0);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x2, &wt, &bt, 1e-6f, &o2t), LH_OK);
    CU_ASSERT_EQUAL(memcmp(out, o2, sizeof out), 0);
    /* no bias: the constant row is all zeros */
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x3, &wt, NULL, 1e-6f, &o3), LH_OK);
    long bad = 0;
    for (int i = 0; i < D; i++)
        bad += out[i] != 0.0f;
    CU_ASSERT_EQUAL(bad, 0);
    /* eps 0 is allowed: finite on rows with a spread (a constant row would be 0 * inf, NaN,
     * as in torch) */
    lh_tensor x5 = kt_t2(LH_DTYPE_F32, x + D, 5, D), o5 = kt_t2(LH_DTYPE_F32, out + D, 5, D);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x5, &wt, &bt, 0.0f, &o5), LH_OK);
    bad = 0;
    for (int i = D; i < 2 * 3 * D; i++)
        bad += !isfinite(out[i]);
    CU_ASSERT_EQUAL(bad, 0);
    /* an empty tensor is nothing to do */
    lh_tensor e = kt_t2(LH_DTYPE_F32, x, 0, D);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &e, &wt, &bt, 1e-6f, &e), LH_OK);
    lh_k_ctx_free(ctx);
}

static void test_layernorm_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[12] = {1, 2}, out[12], w[4] = {1, 1, 1, 1}, b[4] = {0};
    uint16_t hw[4] = {0};
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 3, 4), ot = kt_t2(LH_DTYPE_F32, out, 3, 4);
    lh_tensor wt = kt_t1(LH_DTYPE_F32, w, 4), bt = kt_t1(LH_DTYPE_F32, b, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, 1e-5f, &ot), LH_OK);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, NULL, 1e-5f, &ot), LH_OK);
    /* NULLs */
    CU_ASSERT_EQUAL(lh_k_layernorm(NULL, &xt, &wt, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_layernorm: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, NULL, &wt, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: x is NULL"));
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, NULL, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: w is NULL"));
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, 1e-5f, NULL), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: out is NULL"));
    /* shapes and ranks */
    lh_tensor w3 = kt_t1(LH_DTYPE_F32, w, 3);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &w3, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_layernorm: w [3] must match the last dim of x [3, 4]"));
    lh_tensor b3 = kt_t1(LH_DTYPE_F32, b, 3);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &b3, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_layernorm: b [3] must match the last dim of x [3, 4]"));
    lh_tensor w2 = kt_t2(LH_DTYPE_F32, w, 1, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &w2, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: w must have 1 dims (got ndim 2)"));
    lh_tensor b2 = kt_t2(LH_DTYPE_F32, b, 1, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &b2, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: b must have 1 dims"));
    lh_tensor x0 = xt;
    x0.ndim = 0;
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x0, &wt, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: x must have 1 to"));
    lh_tensor o43 = kt_t2(LH_DTYPE_F32, out, 4, 3);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, 1e-5f, &o43), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_layernorm: out [4, 3] must have the shape of x [3, 4]"));
    /* dtypes: f32 activations; w and b f32 / bf16 / f16 */
    lh_tensor xh = kt_t2(LH_DTYPE_BF16, x, 3, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xh, &wt, &bt, 1e-5f, &ot), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: x [3, 4] has dtype bf16"));
    lh_tensor oh = kt_t2(LH_DTYPE_F16, out, 3, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, 1e-5f, &oh), LH_E_UNSUPPORTED);
    lh_tensor wi8 = kt_t1(LH_DTYPE_INT8, hw, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wi8, &bt, 1e-5f, &ot), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "w [4] has dtype int8; supported: f32, bf16 or f16"));
    lh_tensor bf8 = kt_t1(LH_DTYPE_FP8_E4M3, hw, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bf8, 1e-5f, &ot), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "b [4] has dtype fp8_e4m3"));
    lh_tensor binv = bt;
    binv.dtype = (lh_dtype)99;
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &binv, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "b has an invalid dtype (99)"));
    /* eps */
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, -1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: eps -1e-05 must be finite and >= 0"));
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, NAN, &ot), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bt, INFINITY, &ot), LH_E_USAGE);
    /* devices, layout */
    lh_tensor bc = bt;
    bc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bc, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: b is on cuda:0, but the context is on cpu"));
    lh_tensor xs = xt;
    xs.stride[0] = 5;
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xs, &wt, &bt, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "only contiguous row-major tensors"));
    lh_tensor bnull = bt;
    bnull.data = NULL;
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xt, &wt, &bnull, 1e-5f, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "b [4] has no data (NULL)"));
    /* overlaps: out partially over x, out over w, out over b */
    lh_tensor xsh = kt_t2(LH_DTYPE_F32, x, 2, 4), osh = kt_t2(LH_DTYPE_F32, x + 1, 2, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &xsh, &wt, &bt, 1e-5f, &osh), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "out partially overlaps x"));
    lh_tensor ow = kt_t2(LH_DTYPE_F32, w, 1, 4), x14 = kt_t2(LH_DTYPE_F32, x, 1, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x14, &wt, &bt, 1e-5f, &ow), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: out overlaps w"));
    lh_tensor ob = kt_t2(LH_DTYPE_F32, b, 1, 4);
    CU_ASSERT_EQUAL(lh_k_layernorm(ctx, &x14, &wt, &bt, 1e-5f, &ob), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_layernorm: out overlaps b"));
    lh_k_ctx_free(ctx);
}

/* ---- gelu, gelu_tanh, gelu_mul -------------------------------------------------------------- */

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static double gelu_tanh_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static const int64_t ActShapes[][2] = {{1, 1}, {3, 37}, {5, 130}, {1, 40007}, {3, 20001}};
#define N_ACT_SHAPES ((int)(sizeof ActShapes / sizeof ActShapes[0]))

static void gelus_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(1201);
    for (int si = 0; si < N_ACT_SHAPES; si++) {
        const int64_t R = ActShapes[si][0], N = ActShapes[si][1], n = R * N;
        const size_t bytes = (size_t)n * sizeof(float);
        float *x = malloc(bytes), *u = malloc(bytes), *ones = malloc(bytes);
        float *out = malloc(bytes), *o1 = malloc(bytes), *al = malloc(bytes);
        for (int64_t i = 0; i < n; i++) {
            x[i] = kt_uniform() * (i % 5 == 0 ? 100.0f : 6.0f);
            u[i] = kt_uniform() * 3.0f;
            ones[i] = 1.0f;
        }
        lh_tensor xt = kt_t2(LH_DTYPE_F32, x, R, N), ut = kt_t2(LH_DTYPE_F32, u, R, N);
        lh_tensor onet = kt_t2(LH_DTYPE_F32, ones, R, N), ot = kt_t2(LH_DTYPE_F32, out, R, N);
        lh_tensor o1t = kt_t2(LH_DTYPE_F32, o1, R, N), at = kt_t2(LH_DTYPE_F32, al, R, N);
        for (int k = 0; k < 3; k++) { /* gelu, gelu_tanh, gelu_mul */
            static const char *const names[3] = {"gelu", "gelu_tanh", "gelu_mul"};
            char what[128];
            snprintf(what, sizeof what, "%s %s [%lld, %lld]", lh_k_isa_name(isa), names[k],
                     (long long)R, (long long)N);
            lh_status st = k == 0 ? lh_k_gelu(ctx, &xt, &ot)
                         : k == 1 ? lh_k_gelu_tanh(ctx, &xt, &ot)
                                  : lh_k_gelu_mul(ctx, &xt, &ut, &ot);
            CU_ASSERT_EQUAL(st, LH_OK);
            kt_cmp c = {0};
            for (int64_t i = 0; i < n; i++) {
                const double g = k == 1 ? gelu_tanh_ref(x[i]) : gelu_ref(x[i]);
                const double ref = k == 2 ? g * (double)u[i] : g;
                const double scale = k == 2 ? fabs((double)x[i] * u[i]) : fabs((double)x[i]);
                kt_check(&c, (long)i, out[i], ref, 1e-6 * fabs(ref) + 1.5e-7 * scale + 1e-30);
            }
            KT_REPORT(c, what);
            /* threads 1 vs 2: the same bits */
            st = k == 0 ? lh_k_gelu(c1, &xt, &o1t)
               : k == 1 ? lh_k_gelu_tanh(c1, &xt, &o1t)
                        : lh_k_gelu_mul(c1, &xt, &ut, &o1t);
            CU_ASSERT_EQUAL(st, LH_OK);
            CU_ASSERT_EQUAL(memcmp(out, o1, bytes), 0);
            /* in place (over x; for gelu_mul over gate, then over up): the same bits */
            memcpy(al, x, bytes);
            st = k == 0 ? lh_k_gelu(ctx, &at, &at)
               : k == 1 ? lh_k_gelu_tanh(ctx, &at, &at)
                        : lh_k_gelu_mul(ctx, &at, &ut, &at);
            CU_ASSERT_EQUAL(st, LH_OK);
            CU_ASSERT_EQUAL(memcmp(out, al, bytes), 0);
            if (k == 2) {
                memcpy(al, u, bytes);
                CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &at, &at), LH_OK);
                CU_ASSERT_EQUAL(memcmp(out, al, bytes), 0);
            }
        }
        /* one formula each: gelu_tanh(x) is gelu_tanh_mul(x, 1), gelu(x) is gelu_mul(x, 1) */
        CU_ASSERT_EQUAL(lh_k_gelu_tanh(ctx, &xt, &ot), LH_OK);
        CU_ASSERT_EQUAL(lh_k_gelu_tanh_mul(ctx, &xt, &onet, &o1t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(out, o1, bytes), 0);
        CU_ASSERT_EQUAL(lh_k_gelu(ctx, &xt, &ot), LH_OK);
        CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &onet, &o1t), LH_OK);
        CU_ASSERT_EQUAL(memcmp(out, o1, bytes), 0);
        free(x);
        free(u);
        free(ones);
        free(out);
        free(o1);
        free(al);
    }
    /* special values, rank 3 */
    float x[6] = {0.0f, NAN, -200.0f, 200.0f, 1.0f, -1.0f}, out[6];
    lh_tensor xt = kt_t3(LH_DTYPE_F32, x, 1, 2, 3), ot = kt_t3(LH_DTYPE_F32, out, 1, 2, 3);
    CU_ASSERT_EQUAL(lh_k_gelu(ctx, &xt, &ot), LH_OK);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_TRUE(isnan(out[1]));
    CU_ASSERT_TRUE(fabsf(out[2]) <= 1e-30f);
    CU_ASSERT_EQUAL(out[3], 200.0f);
    /* torch: gelu(1) = 0.8413447461, gelu(-1) = -0.1586552539 */
    CU_ASSERT_DOUBLE_EQUAL(out[4], 0.8413447461, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[5], -0.1586552539, 1e-6);
    CU_ASSERT_EQUAL(lh_k_gelu_tanh(ctx, &xt, &ot), LH_OK);
    CU_ASSERT_EQUAL(out[0], 0.0f);
    CU_ASSERT_TRUE(isnan(out[1]));
    CU_ASSERT_TRUE(fabsf(out[2]) <= 1e-30f);
    CU_ASSERT_EQUAL(out[3], 200.0f);
    /* torch: gelu(1, approximate="tanh") = 0.8411920071, gelu(-1) = -0.1588079929 */
    CU_ASSERT_DOUBLE_EQUAL(out[4], 0.8411920071, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[5], -0.1588079929, 1e-6);
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(c1);
}
KT_ISA_TESTS(gelus_vs_reference)

static void test_gelu_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[8] = {0}, u[8] = {0}, o[8];
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 2, 4), ut = kt_t2(LH_DTYPE_F32, u, 2, 4);
    lh_tensor ot = kt_t2(LH_DTYPE_F32, o, 2, 4), o3 = kt_t2(LH_DTYPE_F32, o, 2, 3);
    for (int k = 0; k < 2; k++) {
        lh_status (*fn)(lh_kctx *, const lh_tensor *, lh_tensor *) = k ? lh_k_gelu_tanh : lh_k_gelu;
        const char *name = k ? "lh_k_gelu_tanh" : "lh_k_gelu";
        char m[160];
        CU_ASSERT_EQUAL(fn(ctx, &xt, &ot), LH_OK);
        CU_ASSERT_EQUAL(fn(NULL, &xt, &ot), LH_E_USAGE);
        snprintf(m, sizeof m, "%s: ctx is NULL", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), m));
        CU_ASSERT_EQUAL(fn(ctx, NULL, &ot), LH_E_USAGE);
        snprintf(m, sizeof m, "%s: x is NULL", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), m));
        CU_ASSERT_EQUAL(fn(ctx, &xt, NULL), LH_E_USAGE);
        snprintf(m, sizeof m, "%s: out is NULL", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), m));
        CU_ASSERT_EQUAL(fn(ctx, &xt, &o3), LH_E_USAGE);
        snprintf(m, sizeof m, "%s: out [2, 3] must have the shape of x [2, 4]", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), m));
        lh_tensor x0 = xt;
        x0.ndim = 0;
        CU_ASSERT_EQUAL(fn(ctx, &x0, &ot), LH_E_USAGE);
        snprintf(m, sizeof m, "%s: x must have 1 to", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), m));
        lh_tensor xb = xt;
        xb.dtype = LH_DTYPE_BF16;
        CU_ASSERT_EQUAL(fn(ctx, &xb, &ot), LH_E_UNSUPPORTED);
        snprintf(m, sizeof m, "%s: x [2, 4] has dtype bf16; supported: f32", name);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), m));
        lh_tensor oc = ot;
        oc.device = kt_cuda();
        CU_ASSERT_EQUAL(fn(ctx, &xt, &oc), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "cuda:0"));
        lh_tensor xs = xt;
        xs.stride[0] = 5;
        CU_ASSERT_EQUAL(fn(ctx, &xs, &ot), LH_E_USAGE);
        lh_tensor xsh = kt_t2(LH_DTYPE_F32, x, 1, 4), osh = kt_t2(LH_DTYPE_F32, x + 1, 1, 4);
        CU_ASSERT_EQUAL(fn(ctx, &xsh, &osh), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "only exact aliasing"));
        lh_tensor e = kt_t2(LH_DTYPE_F32, x, 0, 4);
        CU_ASSERT_EQUAL(fn(ctx, &e, &e), LH_OK);
    }
    /* gelu_mul */
    lh_tensor u3 = kt_t2(LH_DTYPE_F32, u, 2, 3);
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &ut, &ot), LH_OK);
    CU_ASSERT_EQUAL(lh_k_gelu_mul(NULL, &xt, &ut, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_gelu_mul: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &u3, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_gelu_mul: gate [2, 4], up [2, 3] and out [2, 4] must have the same shape"));
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &ut, &o3), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, NULL, &ut, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_gelu_mul: gate is NULL"));
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, NULL, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_gelu_mul: up is NULL"));
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &ut, NULL), LH_E_USAGE);
    lh_tensor uh = ut;
    uh.dtype = LH_DTYPE_F16;
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &uh, &ot), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_gelu_mul: up [2, 4] has dtype f16"));
    lh_tensor g0 = xt;
    g0.ndim = 0;
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &g0, &ut, &ot), LH_E_USAGE);
    lh_tensor uc = ut;
    uc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &xt, &uc, &ot), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_gelu_mul: up is on cuda:0"));
    lh_tensor gshort = kt_t2(LH_DTYPE_F32, x, 1, 4), ushort = kt_t2(LH_DTYPE_F32, u, 1, 4);
    lh_tensor oshift = kt_t2(LH_DTYPE_F32, x + 1, 1, 4), ushift = kt_t2(LH_DTYPE_F32, o + 1, 1, 4);
    lh_tensor oover = kt_t2(LH_DTYPE_F32, o, 1, 4);
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &gshort, &ushort, &oshift), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "only exact aliasing"));
    CU_ASSERT_EQUAL(lh_k_gelu_mul(ctx, &gshort, &ushift, &oover), LH_E_USAGE);
    lh_k_ctx_free(ctx);
}

/* ---- softcap -------------------------------------------------------------------------------- */

static void softcap_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa), *c1 = kt_ctx(1, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    kt_seed(1301);
    static const float caps[] = {30.0f, 50.0f, 0.5f, 1e-3f};
    for (int si = 0; si < N_ACT_SHAPES; si++)
        for (int ci = 0; ci < 4; ci++) {
            const int64_t R = ActShapes[si][0], N = ActShapes[si][1], n = R * N;
            const size_t bytes = (size_t)n * sizeof(float);
            const float cap = caps[ci];
            float *x0 = malloc(bytes), *x = malloc(bytes), *x1 = malloc(bytes);
            for (int64_t i = 0; i < n; i++)
                x0[i] = kt_uniform() * (i % 3 == 0 ? 200.0f : 2.0f * cap);
            memcpy(x, x0, bytes);
            memcpy(x1, x0, bytes);
            /* any shape: rank 1, 2 or 3 */
            lh_tensor xt = si % 3 == 0 ? kt_t1(LH_DTYPE_F32, x, n)
                         : si % 3 == 1 ? kt_t2(LH_DTYPE_F32, x, R, N)
                                       : kt_t3(LH_DTYPE_F32, x, R, 1, N);
            lh_tensor x1t = kt_t2(LH_DTYPE_F32, x1, R, N);
            CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xt, cap), LH_OK);
            CU_ASSERT_EQUAL(lh_k_softcap(c1, &x1t, cap), LH_OK);
            CU_ASSERT_EQUAL(memcmp(x, x1, bytes), 0); /* threads, shapes: the same bits */
            kt_cmp c = {0};
            long over = 0;
            for (int64_t i = 0; i < n; i++) {
                const double ref = (double)cap * tanh((double)x0[i] / (double)cap);
                kt_check(&c, (long)i, x[i], ref, 1e-6 * fabs(ref) + 1e-30);
                over += fabsf(x[i]) > cap;
            }
            char what[128];
            snprintf(what, sizeof what, "%s softcap [%lld, %lld] cap %g", lh_k_isa_name(isa),
                     (long long)R, (long long)N, (double)cap);
            KT_REPORT(c, what);
            CU_ASSERT_EQUAL(over, 0);
            free(x0);
            free(x);
            free(x1);
        }
    /* special values: 0, NaN, +-inf -> +-cap, huge -> cap, tiny -> itself */
    float x[6] = {0.0f, NAN, INFINITY, -INFINITY, 1e30f, 1e-20f};
    lh_tensor xt = kt_t1(LH_DTYPE_F32, x, 6);
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xt, 30.0f), LH_OK);
    CU_ASSERT_EQUAL(x[0], 0.0f);
    CU_ASSERT_TRUE(isnan(x[1]));
    CU_ASSERT_EQUAL(x[2], 30.0f);
    CU_ASSERT_EQUAL(x[3], -30.0f);
    CU_ASSERT_EQUAL(x[4], 30.0f);
    CU_ASSERT_DOUBLE_EQUAL(x[5], 1e-20, 1e-26);
    lh_k_ctx_free(ctx);
    lh_k_ctx_free(c1);
}
KT_ISA_TESTS(softcap_vs_reference)

static void test_softcap_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, x0[8];
    memcpy(x0, x, sizeof x);
    lh_tensor xt = kt_t2(LH_DTYPE_F32, x, 2, 4);
    static const float bad_caps[] = {0.0f, -0.0f, -30.0f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xt, bad_caps[i]), LH_E_USAGE);
        CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "must be finite and > 0"));
    }
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_softcap: cap -inf must be finite and > 0"));
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xt, 0.0f), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_softcap: cap 0 must be finite and > 0"));
    CU_ASSERT_EQUAL(memcmp(x, x0, sizeof x), 0); /* nothing written */
    CU_ASSERT_EQUAL(lh_k_softcap(NULL, &xt, 30.0f), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_softcap: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, NULL, 30.0f), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_softcap: x is NULL"));
    lh_tensor x0t = xt;
    x0t.ndim = 0;
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &x0t, 30.0f), LH_E_USAGE);
    lh_tensor xb = xt;
    xb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xb, 30.0f), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_softcap: x [2, 4] has dtype bf16"));
    lh_tensor xc = xt;
    xc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xc, 30.0f), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "cuda:0"));
    lh_tensor xs = xt;
    xs.stride[0] = 5;
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &xs, 30.0f), LH_E_USAGE);
    lh_tensor e = kt_t2(LH_DTYPE_F32, x, 0, 4);
    CU_ASSERT_EQUAL(lh_k_softcap(ctx, &e, 30.0f), LH_OK);
    CU_ASSERT_EQUAL(memcmp(x, x0, sizeof x), 0);
    lh_k_ctx_free(ctx);
}

/* ---- add ------------------------------------------------------------------------------------ */

static void add_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(1401);
    static const int64_t sizes[] = {1, 7, 37, 130, 40007};
    for (int si = 0; si < 5; si++) {
        const int64_t n = sizes[si];
        const size_t bytes = (size_t)n * sizeof(float);
        float *y = malloc(bytes), *y0 = malloc(bytes), *x = malloc(bytes);
        for (int64_t i = 0; i < n; i++) {
            y0[i] = y[i] = kt_uniform() * 50.0f;
            x[i] = kt_uniform() * (i % 7 == 0 ? 1e6f : 3.0f);
        }
        lh_tensor yt = n % 5 ? kt_t1(LH_DTYPE_F32, y, n) : kt_t3(LH_DTYPE_F32, y, 1, n / 5, 5);
        lh_tensor xt = n % 5 ? kt_t1(LH_DTYPE_F32, x, n) : kt_t3(LH_DTYPE_F32, x, 1, n / 5, 5);
        CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &xt), LH_OK);
        long bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += y[i] != y0[i] + x[i]; /* one f32 addition: exact */
        CU_ASSERT_EQUAL(bad, 0);
        /* y == x (exact aliasing): x doubles */
        memcpy(y0, x, bytes);
        CU_ASSERT_EQUAL(lh_k_add(ctx, &xt, &xt), LH_OK);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += x[i] != y0[i] + y0[i];
        CU_ASSERT_EQUAL(bad, 0);
        free(y);
        free(y0);
        free(x);
    }
    /* exact aliasing on known values */
    float v[5] = {1.5f, -2.0f, 0.0f, 3e38f, -0.25f};
    lh_tensor vt = kt_t1(LH_DTYPE_F32, v, 5);
    CU_ASSERT_EQUAL(lh_k_add(ctx, &vt, &vt), LH_OK);
    CU_ASSERT_EQUAL(v[0], 3.0f);
    CU_ASSERT_EQUAL(v[1], -4.0f);
    CU_ASSERT_EQUAL(v[2], 0.0f);
    CU_ASSERT_TRUE(isinf(v[3]) && v[3] > 0);
    CU_ASSERT_EQUAL(v[4], -0.5f);
    lh_tensor e = kt_t2(LH_DTYPE_F32, v, 0, 5);
    CU_ASSERT_EQUAL(lh_k_add(ctx, &e, &e), LH_OK);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(add_exact)

/* lh_k_add from inside lh_k_parallel_for on its own context is refused (message on the
 * thread, not on the busy context). */
struct reentry {
    lh_kctx *ctx;
    lh_tensor y, x;
    int refused;
};

static void reentry_task(int64_t i, void *user)
{
    struct reentry *r = user;
    if (i == 0 && lh_k_add(r->ctx, &r->y, &r->x) == LH_E_USAGE &&
        kt_contains(lh_k_last_error(NULL), "lh_k_add: called from inside lh_k_parallel_for"))
        r->refused = 1;
}

static void test_add_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float y[8] = {0}, x[8] = {0};
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, 2, 4), xt = kt_t2(LH_DTYPE_F32, x, 2, 4);
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &xt), LH_OK);
    CU_ASSERT_EQUAL(lh_k_add(NULL, &yt, &xt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_add: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_add(ctx, NULL, &xt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: y is NULL"));
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, NULL), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: x is NULL"));
    lh_tensor x42 = kt_t2(LH_DTYPE_F32, x, 4, 2), x8 = kt_t1(LH_DTYPE_F32, x, 8);
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &x42), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: y [2, 4] and x [4, 2] must have the same shape"));
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &x8), LH_E_USAGE); /* same count, other rank */
    lh_tensor y0 = yt;
    y0.ndim = 0;
    CU_ASSERT_EQUAL(lh_k_add(ctx, &y0, &xt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: y must have 1 to"));
    lh_tensor xb = xt;
    xb.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &xb), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: x [2, 4] has dtype bf16"));
    lh_tensor yc = yt;
    yc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yc, &xt), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: y is on cuda:0"));
    lh_tensor xs = xt;
    xs.stride[0] = 5;
    CU_ASSERT_EQUAL(lh_k_add(ctx, &yt, &xs), LH_E_USAGE);
    lh_tensor ya = kt_t2(LH_DTYPE_F32, y, 1, 4), yb = kt_t2(LH_DTYPE_F32, y + 2, 1, 4);
    CU_ASSERT_EQUAL(lh_k_add(ctx, &ya, &yb), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_add: y partially overlaps x"));
    struct reentry r = {ctx, yt, xt, 0};
    lh_k_parallel_for(ctx, 1, reentry_task, &r);
    CU_ASSERT_EQUAL(r.refused, 1);
    lh_k_ctx_free(ctx);
}

/* ---- embedding_add -------------------------------------------------------------------------- */

static void embedding_add_exact(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(1501);
    static const int64_t Ds[] = {1, 7, 37, 130, 1500, 4096};
    const int64_t V = 50;
    static const int32_t ids[9] = {0, 49, 7, 7, 13, 0, 25, 48, 1};
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 6; ki++) {
            const int64_t D = Ds[ki], n = 9;
            const lh_dtype dt = Wdts[di];
            void *table = malloc((size_t)(V * D) * kt_esize(dt));
            float *ref = malloc((size_t)(V * D) * sizeof(float));
            float *out = malloc((size_t)(n * D) * sizeof(float));
            float *out0 = malloc((size_t)(n * D) * sizeof(float));
            kt_fill_w(dt, table, ref, V * D, 3.0f);
            for (int64_t i = 0; i < n * D; i++)
                out0[i] = out[i] = kt_uniform() * 5.0f;
            lh_tensor t = kt_t2(dt, table, V, D), o = kt_t2(LH_DTYPE_F32, out, n, D);
            CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, n, &o), LH_OK);
            long bad = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t d = 0; d < D; d++)
                    bad += out[i * D + d] != out0[i * D + d] + ref[ids[i] * D + d];
            if (bad)
                printf("\n    FAIL %s embedding_add %s D %lld: %ld elements differ", lh_k_isa_name(isa),
                       kt_dt_name(dt), (long long)D, bad);
            CU_ASSERT_EQUAL(bad, 0);
            /* out = 0 first: the same as lh_k_embedding */
            float *emb = malloc((size_t)(n * D) * sizeof(float));
            lh_tensor et = kt_t2(LH_DTYPE_F32, emb, n, D);
            memset(out, 0, (size_t)(n * D) * sizeof(float));
            CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, n, &o), LH_OK);
            CU_ASSERT_EQUAL(lh_k_embedding(ctx, &t, ids, n, &et), LH_OK);
            CU_ASSERT_EQUAL(memcmp(out, emb, (size_t)(n * D) * sizeof(float)), 0);
            /* n = 0: ids may be NULL */
            lh_tensor o0 = kt_t2(LH_DTYPE_F32, out, 0, D);
            CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, NULL, 0, &o0), LH_OK);
            free(emb);
            free(table);
            free(ref);
            free(out);
            free(out0);
        }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(embedding_add_exact)

static void test_embedding_add_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float table[4 * 3] = {1, 2, 3}, out[2 * 3] = {0}, out0[2 * 3] = {0};
    lh_tensor t = kt_t2(LH_DTYPE_F32, table, 4, 3), o = kt_t2(LH_DTYPE_F32, out, 2, 3);
    int32_t ids[3] = {1, 4, 0};
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_embedding_add: ids[1] = 4 is outside [0, 4) (table [4, 3])"));
    CU_ASSERT_EQUAL(memcmp(out, out0, sizeof out), 0); /* nothing written */
    ids[1] = -1;
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "ids[1] = -1 is outside [0, 4)"));
    CU_ASSERT_EQUAL(memcmp(out, out0, sizeof out), 0);
    ids[1] = 3;
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &o), LH_OK);
    CU_ASSERT_EQUAL(lh_k_embedding_add(NULL, &t, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "lh_k_embedding_add: ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, NULL, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: ids is NULL (n 2)"));
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, NULL, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: table is NULL"));
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, NULL), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: out is NULL"));
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 3, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx),
                               "lh_k_embedding_add: out [2, 3] must be [3, 3] for table [4, 3]"));
    lh_tensor o22 = kt_t2(LH_DTYPE_F32, out, 2, 2);
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &o22), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, -1, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: n -1 is negative"));
    lh_tensor t1 = kt_t1(LH_DTYPE_F32, table, 12);
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t1, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: table must have 2 dims (got ndim 1)"));
    lh_tensor o3 = kt_t3(LH_DTYPE_F32, out, 2, 1, 3);
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &o3), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: out must have 2 dims"));
    lh_tensor ob = o;
    ob.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &ob), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: out [2, 3] has dtype bf16"));
    lh_tensor ti = t;
    ti.dtype = LH_DTYPE_INT4;
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &ti, ids, 2, &o), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "table [4, 3] has dtype int4; supported: f32, bf16, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k or q6_k"));
    lh_tensor tc = t;
    tc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &tc, ids, 2, &o), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: table is on cuda:0"));
    lh_tensor ts = t;
    ts.stride[0] = 4;
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &ts, ids, 2, &o), LH_E_USAGE);
    lh_tensor oin = kt_t2(LH_DTYPE_F32, table + 3, 2, 3); /* out inside the table */
    CU_ASSERT_EQUAL(lh_k_embedding_add(ctx, &t, ids, 2, &oin), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_embedding_add: out overlaps table"));
    lh_k_ctx_free(ctx);
}

static CU_TestInfo nn_tests[] = {
    {"layernorm vs reference, w/b dtypes, NULL b, aliasing, threads [scalar]", layernorm_vs_reference_scalar},
    {"layernorm vs reference, w/b dtypes, NULL b, aliasing, threads [avx2]", layernorm_vs_reference_avx2},
    {"layernorm vs reference, w/b dtypes, NULL b, aliasing, threads [avx512]", layernorm_vs_reference_avx512},
    {"layernorm constant rows, rank 3, eps 0, empty", test_layernorm_constant_rows_and_rank},
    {"layernorm errors (NULL, ranks, shapes, dtypes, eps, device, overlaps)", test_layernorm_errors},
    {"gelu / gelu_tanh / gelu_mul vs reference, aliasing, threads [scalar]", gelus_vs_reference_scalar},
    {"gelu / gelu_tanh / gelu_mul vs reference, aliasing, threads [avx2]", gelus_vs_reference_avx2},
    {"gelu / gelu_tanh / gelu_mul vs reference, aliasing, threads [avx512]", gelus_vs_reference_avx512},
    {"gelu / gelu_tanh / gelu_mul errors", test_gelu_errors},
    {"softcap vs reference, ranks, threads, inf/NaN [scalar]", softcap_vs_reference_scalar},
    {"softcap vs reference, ranks, threads, inf/NaN [avx2]", softcap_vs_reference_avx2},
    {"softcap vs reference, ranks, threads, inf/NaN [avx512]", softcap_vs_reference_avx512},
    {"softcap errors (cap <= 0, NaN, inf; NULL, dtype, device)", test_softcap_errors},
    {"add exact, y == x [scalar]", add_exact_scalar},
    {"add exact, y == x [avx2]", add_exact_avx2},
    {"add exact, y == x [avx512]", add_exact_avx512},
    {"add errors (NULL, shapes, dtype, device, overlap, re-entry)", test_add_errors},
    {"embedding_add exact, all table dtypes [scalar]", embedding_add_exact_scalar},
    {"embedding_add exact, all table dtypes [avx2]", embedding_add_exact_avx2},
    {"embedding_add exact, all table dtypes [avx512]", embedding_add_exact_avx512},
    {"embedding_add errors (ids out of range, shapes, dtypes, device, overlap)", test_embedding_add_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: layernorm, gelu, softcap, add, embedding_add", NULL, NULL, NULL, NULL, nn_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
