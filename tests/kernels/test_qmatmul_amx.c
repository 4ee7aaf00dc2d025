/* Kernel library: lh_k_matmul with ggml block weights on LH_K_ISA_AMX (the tile path of
 * M >= 16; kernels/cpu/qmatmul.h, "AMX"):
 *
 *  - the K types (q4_k, q5_k, q6_k) give the scalar reference's bits for every M;
 *  - the 32-element types (q4_0, q4_1, q5_0, q5_1, q8_0) give, for M >= 16, the bits of this
 *    file's own implementation of the AMX scheme (its own quantizer and block decoder, written
 *    from the scheme's text and ggml's block layouts: one exact integer sum per block, scaled
 *    with one fused multiply-add), and for M < 16 the scalar reference's bits;
 *  - both on 1 and 2 threads, with and without a bias of each dtype, for M around the tile
 *    sizes (16, 17, 31, 32, 33, 70), N around the 32-row panel (1, 5, 33, 100) and block counts
 *    of every residue mod 4; x rows with zeros, tiny blocks, outliers and an inf (its row NaN);
 *    weights of random blocks and of the committed extreme-scale fixtures.
 * Every test is reported as skipped where the CPU or OS gives no AMX. */
#include "qtest.h"

static bool have_amx(void)
{
    if (kt_isa_supported(LH_K_ISA_AMX))
        return true;
    LH_TEST_SKIP("AMX (tiles, int8, the OS's permission) not available");
    return false;
}

/* ---- the scheme of the 32-element types, from its definition --------------------------------- */

static float f16_at(const uint8_t *p)
{
    return lh_k_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* the block's integers, scale and min (ggml's layouts) */
static void ints32(lh_dtype dt, const uint8_t *b, int w[32], float *dw, float *mw)
{
    *dw = f16_at(b);
    *mw = 0.0f;
    const bool has_min = dt == LH_DTYPE_Q4_1 || dt == LH_DTYPE_Q5_1;
    if (has_min)
        *mw = f16_at(b + 2);
    const uint8_t *p = b + (has_min ? 4 : 2);
    switch (dt) {
    case LH_DTYPE_Q4_0:
    case LH_DTYPE_Q4_1:
        for (int j = 0; j < 16; j++) {
            w[j] = (p[j] & 15) - (has_min ? 0 : 8);
            w[j + 16] = (p[j] >> 4) - (has_min ? 0 : 8);
        }
        break;
    case LH_DTYPE_Q5_0:
    case LH_DTYPE_Q5_1: {
        const uint32_t qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24;
        for (int j = 0; j < 16; j++) {
            w[j] = ((p[4 + j] & 15) | (int)((qh >> j) & 1) << 4) - (has_min ? 0 : 16);
            w[j + 16] = ((p[4 + j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - (has_min ? 0 : 16);
        }
        break;
    }
    default:
        for (int j = 0; j < 32; j++)
            w[j] = (int8_t)p[j];
    }
}

/* one 32-element block of x to 8 bits as qmatmul.h step 1 says; returns d */
static float quant32(const float *x, int q[32])
{
    uint32_t mb = 0;
    for (int i = 0; i < 32; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u &= 0x7fffffffu;
        mb = u > mb ? u : mb;
    }
    if (mb >= 0x7f800000u || mb < 0x03800000u) {
        for (int i = 0; i < 32; i++)
            q[i] = 0;
        return mb >= 0x7f800000u ? NAN : 0.0f;
    }
    float amax;
    memcpy(&amax, &mb, 4);
    const float id = 127.0f / amax;
    for (int i = 0; i < 32; i++)
        q[i] = (int)nearbyintf(x[i] * id);
    return amax / 127.0f;
}

static void ref_amx32(lh_dtype dt, const uint8_t *w, int64_t bbytes, const float *x,
                      const float *bias, float *y, int64_t M, int64_t K, int64_t N)
{
    const int64_t nb = K / 32;
    int *q = malloc((size_t)(M * K) * sizeof(int));
    float *d = malloc((size_t)(M * nb) * sizeof(float)), *s = malloc((size_t)(M * nb) * sizeof(float));
    for (int64_t m = 0; m < M; m++)
        for (int64_t b = 0; b < nb; b++) {
            int *qb = q + m * K + 32 * b;
            d[m * nb + b] = quant32(x + m * K + 32 * b, qb);
            int sum = 0;
            for (int e = 0; e < 32; e++)
                sum += qb[e];
            s[m * nb + b] = d[m * nb + b] * (float)sum;
        }
    const bool has_min = dt == LH_DTYPE_Q4_1 || dt == LH_DTYPE_Q5_1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int wi[32];
                float dw, mw;
                ints32(dt, w + (n * nb + b) * bbytes, wi, &dw, &mw);
                int isum = 0;
                for (int e = 0; e < 32; e++)
                    isum += wi[e] * q[m * K + 32 * b + e];
                acc = fmaf(dw * d[m * nb + b], (float)isum, acc);
                if (has_min)
                    acc = fmaf(mw, s[m * nb + b], acc);
            }
            y[m * N + n] = bias ? acc + bias[n] : acc;
        }
    free(q);
    free(d);
    free(s);
}

/* ---- the cases --------------------------------------------------------------------------------- */

/* the scalar reference and AMX on 1 and 2 threads */
static void ctxs_open(lh_kctx **scalar, lh_kctx *amx[2])
{
    *scalar = kt_ctx(1, LH_K_ISA_SCALAR);
    amx[0] = kt_ctx(1, LH_K_ISA_AMX);
    amx[1] = kt_ctx(2, LH_K_ISA_AMX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(*scalar);
    CU_ASSERT_PTR_NOT_NULL_FATAL(amx[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(amx[1]);
}

static void ctxs_close(lh_kctx *scalar, lh_kctx *amx[2])
{
    lh_k_ctx_free(scalar);
    lh_k_ctx_free(amx[0]);
    lh_k_ctx_free(amx[1]);
}

/* AMX on 1 and 2 threads against the scalar context (K types, or M < 16) or ref_amx32 */
static long amx_case(lh_kctx *scalar, lh_kctx *amx[2], const qtype *q, const uint8_t *wq,
                     int64_t M, int64_t K, int64_t N, int bias_kind, bool nonfinite, const char *what)
{
    qt_case c;
    qt_case_make(&c, M, K, N, bias_kind, nonfinite);
    long bad = 0;
    const bool own = q->block_elems == 32 && M >= 16;
    if (own)
        ref_amx32(q->dt, wq, q->block_bytes, c.x, c.bias ? c.bref : NULL, c.yref, M, K, N);
    else if (qt_mm(scalar, q->dt, wq, c.x, c.bias, c.bdt, c.yref, M, K, N) != LH_OK)
        bad++;
    bad += qt_case_runs(&c, amx, 2, q, wq, what, own ? "the AMX scheme" : "scalar");
    qt_case_free(&c);
    return bad;
}

static void test_amx_random(void)
{
    if (!have_amx())
        return;
    lh_kctx *scalar, *amx[2];
    ctxs_open(&scalar, amx);
    kt_seed(419);
    static const int64_t nblocks[] = {1, 2, 3, 5, 40};
    static const int64_t Ms[] = {16, 17, 31, 33, 70, 7}, Ns[] = {1, 5, 33, 100};
    long bad = 0;
    int cases = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        for (int ki = 0; ki < 5; ki++)
            for (int mi = 0; mi < 6; mi++)
                for (int ni = 0; ni < 4; ni++) {
                    const int64_t K = nblocks[ki] * q->block_elems, M = Ms[mi], N = Ns[ni];
                    if (q->block_elems == 256 && K > 1280)
                        continue;
                    if ((ki + mi + ni) % 2 && !(mi == 0 || ni == 2))
                        continue; /* half the grid; every M, N and K still several times */
                    uint8_t *wq = qt_random_blocks(q, N, K);
                    bad += amx_case(scalar, amx, q, wq, M, K, N, (ki + mi + ni) % 4, mi == 4,
                                    "random");
                    free(wq);
                    cases++;
                }
        /* a prefill-like shape: M = 32 exactly, several panels */
        const int64_t K = q->block_elems == 32 ? 576 : 1536;
        uint8_t *wq = qt_random_blocks(q, 96, K);
        bad += amx_case(scalar, amx, q, wq, 32, K, 96, 1, false, "random");
        free(wq);
        cases++;
    }
    CU_ASSERT_TRUE(cases > 300);
    CU_ASSERT_EQUAL(bad, 0);
    ctxs_close(scalar, amx);
}

/* the extreme-scale fixtures as weights: inf and NaN products, each path's bits still */
static void test_amx_fixtures(void)
{
    if (!have_amx())
        return;
    lh_kctx *scalar, *amx[2];
    ctxs_open(&scalar, amx);
    kt_seed(421);
    long bad = 0;
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        const qtype *q = &qtypes[qi];
        size_t nb = 0;
        uint8_t *raw = qt_read_fixture(q->file, "bin", &nb);
        CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
        int64_t shapes[2][2];
        qt_fixture_shapes(q, nb, shapes);
        for (int s = 0; s < 2; s++)
            bad += amx_case(scalar, amx, q, raw, 20, shapes[s][1], shapes[s][0], s + 1, s == 1,
                            "fixture");
        free(raw);
    }
    CU_ASSERT_EQUAL(bad, 0);
    ctxs_close(scalar, amx);
}

/* Empty shapes at M >= 16: K 0 gives the bias, N 0 and M 0 nothing (no tile work at all) */
static void test_amx_empty(void)
{
    if (!have_amx())
        return;
    lh_kctx *ctx = kt_ctx(2, LH_K_ISA_AMX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static float x[20 * 256], y[20 * 4];
    const float bias[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    for (size_t qi = 0; qi < N_QTYPES; qi++) {
        for (int i = 0; i < 80; i++)
            y[i] = NAN;
        CU_ASSERT_EQUAL(qt_mm(ctx, qtypes[qi].dt, x, x, bias, LH_DTYPE_F32, y, 20, 0, 4), LH_OK);
        for (int i = 0; i < 80; i++)
            CU_ASSERT_EQUAL(y[i], bias[i % 4]);
        CU_ASSERT_EQUAL(qt_mm(ctx, qtypes[qi].dt, x, x, NULL, LH_DTYPE_F32, y, 20,
                              qtypes[qi].block_elems, 0), LH_OK);
    }
    lh_k_ctx_free(ctx);
}

/* The default context takes AMX where it exists, so the engine's prefill does. */
static void test_amx_is_default(void)
{
    if (!have_amx())
        return;
    if (getenv("LLMHOST_KERNELS_ISA") && strcmp(getenv("LLMHOST_KERNELS_ISA"), "auto") != 0) {
        LH_TEST_SKIP("LLMHOST_KERNELS_ISA is set");
        return;
    }
    lh_kctx *ctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    CU_ASSERT_EQUAL(lh_k_ctx_isa(ctx), LH_K_ISA_AMX);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo amx_tests[] = {
    {"amx: random blocks == scalar (K types, M < 16) / the AMX scheme (32-element types)",
     test_amx_random},
    {"amx: extreme-scale fixture weights, the same", test_amx_fixtures},
    {"amx: empty shapes (K 0: the bias; N 0)", test_amx_empty},
    {"amx: the default ISA where the CPU and OS have it", test_amx_is_default},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: int8 quantized matmul on AMX tiles", NULL, NULL, NULL, NULL, amx_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
