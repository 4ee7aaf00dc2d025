/* Kernel library: lh_k_matmul (y = x @ w^T + bias) against a double-precision reference, for
 * every ISA this CPU has, every weight dtype, and sizes that are not multiples of any vector
 * width or tile (M 1, 3, 17, 70; K 1, 7, 33, 257, 1000; N 1, 5, 31, 64, 100).
 *
 * Tolerance, for every weight dtype: |y - ref| <= 1e-5 * (sum_k |x_k w_k| + |bias|) + 1e-6,
 * where the reference uses the weights after rounding to their dtype (so bf16/f16 rounding is
 * not counted as error) and sums in double. The same bound applies between a vector path and
 * the scalar path. Threads 1, 2 and 5 must give bit-identical results (the blocking does not
 * depend on the thread count), and so must M == 1 (GEMV) and the same row inside an M > 1
 * call (GEMM), whichever of the two loop orders (weight-streaming, K-blocked) computed it. */
#include "ktest.h"

static const int64_t Ms[] = {1, 3, 17, 70};
static const int64_t Ks[] = {1, 7, 33, 257, 1000};
static const int64_t Ns[] = {1, 5, 31, 64, 100};
static const lh_dtype Wdts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};

struct mm_case {
    int64_t M, K, N;
    lh_dtype wdt;
    bool bias;
    float *x, *wref, *b, *y; /* b: the bias as the reference sees it (rounded to wdt) */
    void *w, *bstore;        /* bias stored in the weights' dtype, as models store it */
};

static void case_init(struct mm_case *c, int64_t M, int64_t K, int64_t N, lh_dtype wdt, bool bias)
{
    c->M = M;
    c->K = K;
    c->N = N;
    c->wdt = wdt;
    c->bias = bias;
    c->x = malloc((size_t)(M * K) * sizeof(float));
    c->wref = malloc((size_t)(N * K) * sizeof(float));
    c->w = malloc((size_t)(N * K) * kt_esize(wdt));
    c->b = malloc((size_t)N * sizeof(float));
    c->bstore = malloc((size_t)N * kt_esize(wdt));
    c->y = malloc((size_t)(M * N) * sizeof(float));
    for (int64_t i = 0; i < M * K; i++)
        c->x[i] = kt_uniform();
    kt_fill_w(wdt, c->w, c->wref, N * K, 0.5f);
    kt_fill_w(wdt, c->bstore, c->b, N, 1.0f);
}

static void case_free(struct mm_case *c)
{
    free(c->x);
    free(c->wref);
    free(c->w);
    free(c->b);
    free(c->bstore);
    free(c->y);
}

static lh_status case_run(lh_kctx *ctx, struct mm_case *c, float *y)
{
    lh_tensor x = kt_t2(LH_DTYPE_F32, c->x, c->M, c->K);
    lh_tensor w = kt_t2(c->wdt, c->w, c->N, c->K);
    lh_tensor b = kt_t1(c->wdt, c->bstore, c->N);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, c->M, c->N);
    lh_status st = lh_k_matmul(ctx, &x, &w, c->bias ? &b : NULL, &yt);
    if (st != LH_OK)
        printf("\n    lh_k_matmul failed: %s", lh_k_last_error(ctx));
    return st;
}

/* Checks y against the double reference; returns the number of bad elements. */
static long case_check(const struct mm_case *c, const float *y, const char *isa)
{
    kt_cmp cmp = {0};
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < c->K; k++) {
                double t = (double)c->x[m * c->K + k] * (double)c->wref[n * c->K + k];
                s += t;
                mag += fabs(t);
            }
            if (c->bias) {
                s += c->b[n];
                mag += fabs(c->b[n]);
            }
            kt_check(&cmp, (long)(m * c->N + n), y[m * c->N + n], s, 1e-5 * mag + 1e-6);
        }
    char what[160];
    snprintf(what, sizeof what, "%s M %lld K %lld N %lld w %s%s", isa, (long long)c->M,
             (long long)c->K, (long long)c->N, kt_dt_name(c->wdt), c->bias ? " +bias" : "");
    KT_REPORT(cmp, what);
    return cmp.bad;
}

static void matmul_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(11 + (uint64_t)isa);
    int cases = 0;
    for (int di = 0; di < 3; di++)
        for (int mi = 0; mi < 4; mi++)
            for (int ki = 0; ki < 5; ki++)
                for (int ni = 0; ni < 5; ni++) {
                    struct mm_case c;
                    case_init(&c, Ms[mi], Ks[ki], Ns[ni], Wdts[di], (mi + ki + ni) % 2 == 0);
                    CU_ASSERT_EQUAL(case_run(ctx, &c, c.y), LH_OK);
                    case_check(&c, c.y, lh_k_isa_name(isa));
                    case_free(&c);
                    cases++;
                }
    CU_ASSERT_EQUAL(cases, 300);
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(matmul_vs_reference)

/* A decode-sized GEMV with a long K, and a prefill-sized GEMM whose row blocks exceed the
 * streaming threshold (the K-blocked loop order), every dtype. */
static void matmul_long_k(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(21);
    for (int di = 0; di < 3; di++) {
        struct mm_case c;
        case_init(&c, 1, 4096, 200, Wdts[di], false);
        CU_ASSERT_EQUAL(case_run(ctx, &c, c.y), LH_OK);
        case_check(&c, c.y, lh_k_isa_name(isa));
        case_free(&c);
        case_init(&c, 130, 1100, 50, Wdts[di], true);
        CU_ASSERT_EQUAL(case_run(ctx, &c, c.y), LH_OK);
        case_check(&c, c.y, lh_k_isa_name(isa));
        case_free(&c);
    }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(matmul_long_k)

/* Threads 1, 2 and 5 give bit-identical y; GEMV rows equal the GEMM rows bit for bit. */
static void matmul_deterministic(lh_k_isa isa)
{
    lh_kctx *c1 = kt_ctx(1, isa), *c2 = kt_ctx(2, isa), *c5 = kt_ctx(5, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c5);
    kt_seed(31);
    /* {70, 1100, 53}: the first row block takes the K-blocked (prefill) loop order, the last
     * one the weight-streaming order; both must agree with the GEMV rows bit for bit */
    const int64_t shapes[][3] = {{1, 1000, 100}, {17, 257, 64}, {70, 600, 101}, {3, 7, 5}, {70, 1100, 53}};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 5; si++) {
            struct mm_case c;
            case_init(&c, shapes[si][0], shapes[si][1], shapes[si][2], Wdts[di], si % 2 == 1);
            size_t bytes = (size_t)(c.M * c.N) * sizeof(float);
            float *y2 = malloc(bytes), *y5 = malloc(bytes), *row = malloc((size_t)c.N * sizeof(float));
            CU_ASSERT_EQUAL(case_run(c1, &c, c.y), LH_OK);
            CU_ASSERT_EQUAL(case_run(c2, &c, y2), LH_OK);
            CU_ASSERT_EQUAL(case_run(c5, &c, y5), LH_OK);
            CU_ASSERT_EQUAL(memcmp(c.y, y2, bytes), 0);
            CU_ASSERT_EQUAL(memcmp(c.y, y5, bytes), 0);
            /* each row alone (M == 1, the GEMV path) */
            long differ = 0;
            for (int64_t m = 0; m < c.M; m++) {
                lh_tensor x = kt_t2(LH_DTYPE_F32, c.x + m * c.K, 1, c.K);
                lh_tensor w = kt_t2(c.wdt, c.w, c.N, c.K);
                lh_tensor b = kt_t1(c.wdt, c.bstore, c.N);
                lh_tensor y = kt_t2(LH_DTYPE_F32, row, 1, c.N);
                CU_ASSERT_EQUAL(lh_k_matmul(c2, &x, &w, c.bias ? &b : NULL, &y), LH_OK);
                differ += memcmp(row, c.y + m * c.N, (size_t)c.N * sizeof(float)) != 0;
            }
            CU_ASSERT_EQUAL(differ, 0);
            free(y2);
            free(y5);
            free(row);
            case_free(&c);
        }
    lh_k_ctx_free(c1);
    lh_k_ctx_free(c2);
    lh_k_ctx_free(c5);
}
KT_ISA_TESTS(matmul_deterministic)

/* Vector path against the scalar path, same tolerance as against the reference. */
static void matmul_vs_scalar(lh_k_isa isa)
{
    lh_kctx *cs = kt_ctx(2, LH_K_ISA_SCALAR), *cv = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cv);
    kt_seed(41);
    for (int di = 0; di < 3; di++)
        for (int mi = 0; mi < 4; mi++)
            for (int ki = 0; ki < 5; ki += 2) {
                struct mm_case c;
                case_init(&c, Ms[mi], Ks[ki], 31, Wdts[di], mi % 2 == 0);
                float *ys = malloc((size_t)(c.M * c.N) * sizeof(float));
                CU_ASSERT_EQUAL(case_run(cs, &c, ys), LH_OK);
                CU_ASSERT_EQUAL(case_run(cv, &c, c.y), LH_OK);
                kt_cmp cmp = {0};
                for (int64_t m = 0; m < c.M; m++)
                    for (int64_t n = 0; n < c.N; n++) {
                        double mag = c.bias ? fabs(c.b[n]) : 0;
                        for (int64_t k = 0; k < c.K; k++)
                            mag += fabs((double)c.x[m * c.K + k] * c.wref[n * c.K + k]);
                        kt_check(&cmp, (long)(m * c.N + n), c.y[m * c.N + n], ys[m * c.N + n],
                                 1e-5 * mag + 1e-6);
                    }
                KT_REPORT(cmp, "vector vs scalar");
                free(ys);
                case_free(&c);
            }
    lh_k_ctx_free(cs);
    lh_k_ctx_free(cv);
}
KT_VEC_TESTS(matmul_vs_scalar)

/* Special values: K == 0 gives bias (or 0); infinities and NaN propagate. */
static void test_matmul_edges(void)
{
    lh_kctx *ctx = kt_ctx(2, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    for (int ii = 0; ii < KT_N_ISAS; ii++) {
        if (lh_k_ctx_set_isa(ctx, kt_isas[ii]) != LH_OK)
            continue;
        float b[3] = {1, 2, 3}, y[6] = {9, 9, 9, 9, 9, 9};
        lh_tensor x = kt_t2(LH_DTYPE_F32, NULL, 2, 0), w = kt_t2(LH_DTYPE_F32, NULL, 3, 0);
        lh_tensor bt = kt_t1(LH_DTYPE_F32, b, 3), yt = kt_t2(LH_DTYPE_F32, y, 2, 3);
        CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, &bt, &yt), LH_OK);
        CU_ASSERT_EQUAL(y[0], 1.0f);
        CU_ASSERT_EQUAL(y[5], 3.0f);
        CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, NULL, &yt), LH_OK);
        CU_ASSERT_EQUAL(y[4], 0.0f);

        float xs[2 * 9], ws[2 * 9], y2[4];
        for (int i = 0; i < 18; i++)
            xs[i] = ws[i] = 1.0f;
        xs[3] = INFINITY;
        ws[9 + 4] = NAN;
        lh_tensor x2 = kt_t2(LH_DTYPE_F32, xs, 2, 9), w2 = kt_t2(LH_DTYPE_F32, ws, 2, 9);
        lh_tensor yt2 = kt_t2(LH_DTYPE_F32, y2, 2, 2);
        CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x2, &w2, NULL, &yt2), LH_OK);
        CU_ASSERT_TRUE(isinf(y2[0]) && y2[0] > 0); /* row 0 . w row 0 */
        CU_ASSERT_TRUE(isnan(y2[1]));              /* w row 1 holds NaN */
        CU_ASSERT_EQUAL(y2[2], 9.0f);
        CU_ASSERT_TRUE(isnan(y2[3]));
    }
    lh_k_ctx_free(ctx);
}

static void test_matmul_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float xb[12], wb[12], yb[16], bb[4];
    memset(xb, 0, sizeof xb);
    memset(wb, 0, sizeof wb);
    lh_tensor x = kt_t2(LH_DTYPE_F32, xb, 3, 4), w = kt_t2(LH_DTYPE_F32, wb, 3, 4);
    lh_tensor y = kt_t2(LH_DTYPE_F32, yb, 3, 3), b = kt_t1(LH_DTYPE_F32, bb, 3);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, &b, &y), LH_OK);

    CU_ASSERT_EQUAL(lh_k_matmul(NULL, &x, &w, &b, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(NULL), "ctx is NULL"));
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, NULL, &w, &b, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_matmul: x is NULL"));
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, NULL, &b, &y), LH_E_USAGE);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, &b, NULL), LH_E_USAGE);

    /* dtypes: activations must be f32; int8 weights are not implemented; garbage is misuse */
    lh_tensor xbad = x;
    xbad.dtype = LH_DTYPE_BF16;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xbad, &w, &b, &y), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "x [3, 4] has dtype bf16"));
    lh_tensor wbad = w;
    wbad.dtype = LH_DTYPE_INT8;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &wbad, &b, &y), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "int8"));
    wbad.dtype = (lh_dtype)42;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &wbad, &b, &y), LH_E_USAGE);
    lh_tensor bbad = b;
    bbad.dtype = LH_DTYPE_INT8;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, &bbad, &y), LH_E_UNSUPPORTED);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "bias"));

    /* shapes */
    lh_tensor w5 = kt_t2(LH_DTYPE_F32, wb, 2, 5);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w5, NULL, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "x [3, 4] and w [2, 5] disagree on K (4 vs 5)"));
    lh_tensor y4 = kt_t2(LH_DTYPE_F32, yb, 3, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, NULL, &y4), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "y [3, 4] must be [3, 3]"));
    lh_tensor b4 = kt_t1(LH_DTYPE_F32, bb, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, &b4, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "bias [4]"));
    lh_tensor x1 = kt_t1(LH_DTYPE_F32, xb, 4);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x1, &w, NULL, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "x must have 2 dims"));

    /* layout: padded rows are not supported */
    lh_tensor xs = kt_t2(LH_DTYPE_F32, xb, 2, 4);
    xs.stride[0] = 6;
    lh_tensor ys = kt_t2(LH_DTYPE_F32, yb, 2, 3);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xs, &w, NULL, &ys), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "contiguous"));
    lh_tensor wt = w;
    wt.stride[1] = 3; /* a transposed view */
    wt.stride[0] = 1;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &wt, NULL, &y), LH_E_USAGE);
    lh_tensor xn = x;
    xn.data = NULL;
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xn, &w, NULL, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "NULL"));

    /* another device */
    lh_tensor wc = w;
    wc.device = kt_cuda();
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &wc, NULL, &y), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "lh_k_matmul: w is on cuda:0, but the context is on cpu"));

    /* y must not overlap the inputs */
    lh_tensor yx = kt_t2(LH_DTYPE_F32, xb, 3, 3);
    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &x, &w, NULL, &yx), LH_E_USAGE);
    CU_ASSERT_TRUE(kt_contains(lh_k_last_error(ctx), "overlaps"));
    lh_k_ctx_free(ctx);
}

static CU_TestInfo matmul_tests[] = {
    {"matmul vs double reference [scalar]", matmul_vs_reference_scalar},
    {"matmul vs double reference [avx2]", matmul_vs_reference_avx2},
    {"matmul vs double reference [avx512]", matmul_vs_reference_avx512},
    {"matmul GEMV K=4096, GEMM 130x1100 (K-blocked) [scalar]", matmul_long_k_scalar},
    {"matmul GEMV K=4096, GEMM 130x1100 (K-blocked) [avx2]", matmul_long_k_avx2},
    {"matmul GEMV K=4096, GEMM 130x1100 (K-blocked) [avx512]", matmul_long_k_avx512},
    {"matmul threads 1/2/5 and GEMV/GEMM bit-identical [scalar]", matmul_deterministic_scalar},
    {"matmul threads 1/2/5 and GEMV/GEMM bit-identical [avx2]", matmul_deterministic_avx2},
    {"matmul threads 1/2/5 and GEMV/GEMM bit-identical [avx512]", matmul_deterministic_avx512},
    {"matmul vector vs scalar [avx2]", matmul_vs_scalar_avx2},
    {"matmul vector vs scalar [avx512]", matmul_vs_scalar_avx512},
    {"matmul K=0, inf and NaN (every ISA)", test_matmul_edges},
    {"matmul argument errors", test_matmul_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: matmul", NULL, NULL, NULL, NULL, matmul_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
