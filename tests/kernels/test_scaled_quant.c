/* Kernel library: lh_k_quantize_scaled (symmetric absmax per block into int8 / int4 / fp8 with
 * f32 or f16 scales) on the CPU.
 *
 *  - w and scale == the reference (the header's arithmetic in plain f32 C: absmax, s = absmax /
 *    qmax, the scale as stored, rintf(v / ss) clamped, or lh_k_f32_to_fp8_e4m3(v / ss)) byte
 *    for byte, for every weight dtype x scale dtype x source dtype (f32, bf16, f16) x block
 *    shape (per channel, 1 x 32, 1 x 128, 128 x 128 with partial edges, 3 x 7, whole tensor),
 *    rows with magnitudes over four decades, zero rows and columns, 1 and 2 threads;
 *  - round trip: |dequant(quantize(v)) - v| <= ss / 2 + 2^-22 absmax (ints), <= max(2^-4 |v|,
 *    2^-10 ss) + 2^-22 absmax (fp8: half an e4m3 step of v / ss, times ss), per block;
 *  - hand-computed vectors: ties to even (f32 and f16 scales), absmax at a block's last row and
 *    column, partial blocks, zero and negative-zero blocks, an f16 scale that underflows,
 *    fp8 subnormals and saturation;
 *  - every error with its message, the first non-finite element whatever the thread count. */
#include "stest.h"

static float qmax_of(lh_dtype wdt)
{
    return wdt == LH_DTYPE_INT8 ? 127.0f : wdt == LH_DTYPE_INT4 ? 7.0f : 448.0f;
}

static float src_at(lh_dtype dt, const void *src, size_t i)
{
    if (dt == LH_DTYPE_BF16)
        return lh_k_bf16_to_f32(((const uint16_t *)src)[i]);
    if (dt == LH_DTYPE_F16)
        return lh_k_f16_to_f32(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* The header's arithmetic, written out. */
static void ref_quantize(lh_dtype srcdt, const void *src, int64_t N, int64_t K, int64_t br,
                         int64_t bc, lh_dtype wdt, lh_dtype sdt, uint8_t *w, void *scale)
{
    const float qmax = qmax_of(wdt);
    const int64_t sc = st_ceil(K, bc);
    memset(w, 0, st_wbytes(wdt, N, K));
    for (int64_t rb = 0; rb < st_ceil(N, br); rb++)
        for (int64_t cb = 0; cb < sc; cb++) {
            const int64_t r1 = (rb + 1) * br < N ? (rb + 1) * br : N;
            const int64_t k1 = (cb + 1) * bc < K ? (cb + 1) * bc : K;
            float amax = 0.0f;
            for (int64_t n = rb * br; n < r1; n++)
                for (int64_t k = cb * bc; k < k1; k++)
                    amax = fmaxf(amax, fabsf(src_at(srcdt, src, (size_t)(n * K + k))));
            const float s = amax / qmax;
            float ss = s;
            if (sdt == LH_DTYPE_F16) {
                const uint16_t h = lh_k_f32_to_f16(s);
                ((uint16_t *)scale)[rb * sc + cb] = h;
                ss = lh_k_f16_to_f32(h);
            } else {
                ((float *)scale)[rb * sc + cb] = s;
            }
            for (int64_t n = rb * br; n < r1; n++)
                for (int64_t k = cb * bc; k < k1; k++) {
                    const float v = src_at(srcdt, src, (size_t)(n * K + k));
                    if (wdt == LH_DTYPE_FP8_E4M3) {
                        w[n * K + k] = ss == 0.0f ? 0 : lh_k_f32_to_fp8_e4m3(v / ss);
                        continue;
                    }
                    const float r = ss == 0.0f ? 0.0f : fminf(fmaxf(rintf(v / ss), -qmax), qmax);
                    const int q = (int)r;
                    if (wdt == LH_DTYPE_INT8)
                        w[n * K + k] = (uint8_t)(int8_t)q;
                    else
                        w[n * (K / 2) + k / 2] |= (uint8_t)(((unsigned)q & 15u) << (4 * (k % 2)));
                }
        }
}

/* [N, K] source values in srcdt (and as f32 in vf): row n uniform in +-10^(e_n), e_n in
 * [-1, 3); row 2 and column 5 zero; when `ties` (int8, blocks of one row), row 1 holds -63.5
 * at every 7th column (each block's absmax: s = 0.5) and odd multiples of 0.25 elsewhere, so
 * every v / s there is a tie. */
static void *make_src(lh_dtype srcdt, int64_t N, int64_t K, bool ties, float *vf)
{
    void *src = malloc((size_t)(N * K) * 4 + 4);
    for (int64_t n = 0; n < N; n++) {
        const float mag = powf(10.0f, kt_range(-1.0f, 3.0f));
        for (int64_t k = 0; k < K; k++) {
            float v = kt_uniform() * mag;
            if (n == 2 || k == 5)
                v = 0.0f;
            if (ties && n == 1)
                v = k % 7 == 0 ? -63.5f : ((float)((k * 37) % 254 - 127) + 0.5f) * 0.5f;
            const size_t i = (size_t)(n * K + k);
            if (srcdt == LH_DTYPE_F32)
                ((float *)src)[i] = v;
            else if (srcdt == LH_DTYPE_BF16)
                ((uint16_t *)src)[i] = lh_k_f32_to_bf16(v);
            else
                ((uint16_t *)src)[i] = lh_k_f32_to_f16(v);
            vf[i] = src_at(srcdt, src, i);
        }
    }
    return src;
}

static lh_status run_quant(lh_kctx *ctx, lh_dtype srcdt, const void *src, int64_t N, int64_t K,
                           int64_t br, int64_t bc, lh_dtype wdt, uint8_t *w, lh_dtype sdt,
                           void *scale)
{
    lh_tensor st = kt_t2(srcdt, (void *)src, N, K), wt = kt_t2(wdt, w, N, K);
    lh_tensor sct = kt_t2(sdt, scale, st_ceil(N, br), st_ceil(K, bc));
    lh_status s = lh_k_quantize_scaled(ctx, &st, br, bc, &wt, &sct);
    if (s != LH_OK)
        printf("\n    lh_k_quantize_scaled failed: %s", lh_k_last_error(ctx));
    return s;
}

static const lh_dtype src_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};

static long quant_case(lh_kctx *const *ctxs, lh_dtype srcdt, lh_dtype wdt, lh_dtype sdt,
                       const st_block *b, int64_t N, int64_t K)
{
    const int64_t br = st_br(b, N), bc = st_bc(b, K), ns = st_ceil(N, br) * st_ceil(K, bc);
    float *vf = malloc((size_t)(N * K) * sizeof(float) + 4);
    void *src = make_src(srcdt, N, K, wdt == LH_DTYPE_INT8 && b->br == 1, vf);
    const size_t wb = st_wbytes(wdt, N, K), sb = (size_t)ns * (sdt == LH_DTYPE_F16 ? 2 : 4);
    uint8_t *wref = malloc(wb + 1), *w = malloc(wb + 1);
    void *sref = malloc(sb + 1), *scale = malloc(sb + 1);
    ref_quantize(srcdt, src, N, K, br, bc, wdt, sdt, wref, sref);
    long bad = 0;
    for (int c = 0; c < 2; c++) {
        memset(w, 0xa5, wb);
        memset(scale, 0xa5, sb);
        CU_ASSERT_EQUAL(run_quant(ctxs[c], srcdt, src, N, K, br, bc, wdt, w, sdt, scale), LH_OK);
        const bool wok = memcmp(w, wref, wb) == 0, sok = memcmp(scale, sref, sb) == 0;
        if (!wok || !sok) {
            bad++;
            printf("\n    %s -> %s, %s scales, [%lld, %lld], %lld x %lld blocks, %d threads: %s "
                   "differ",
                   lh_k_dtype_name(srcdt), lh_k_dtype_name(wdt), lh_k_dtype_name(sdt),
                   (long long)N, (long long)K, (long long)br, (long long)bc,
                   lh_k_ctx_threads(ctxs[c]), !wok ? "the weights" : "the scales");
            for (size_t i = 0; i < wb && !wok; i++)
                if (w[i] != wref[i]) {
                    printf(" (byte %zu: 0x%02x, want 0x%02x)", i, w[i], wref[i]);
                    break;
                }
        }
    }
    free(vf);
    free(src);
    free(wref);
    free(w);
    free(sref);
    free(scale);
    return bad;
}

static void test_quantize_reference(void)
{
    lh_kctx *ctxs[2] = {kt_ctx(1, LH_K_ISA_SCALAR), lh_k_ctx_create(2, kt_cpu())};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctxs[1]);
    kt_seed(401);
    static const int64_t shapes[][2] = {{200, 300}, {129, 258}, {5, 46}};
    long bad = 0;
    int cases = 0;
    for (int di = 0; di < 3; di++)
        for (int wi = 0; wi < ST_N_WDTS; wi++)
            for (int si = 0; si < ST_N_SDTS; si++)
                for (size_t bi = 0; bi < ST_N_BLOCKS; bi++)
                    for (int sh = 0; sh < 3; sh++) {
                        bad += quant_case(ctxs, src_dts[di], st_wdts[wi], st_sdts[si],
                                          &st_blocks[bi], shapes[sh][0], shapes[sh][1]);
                        cases++;
                    }
    CU_ASSERT_EQUAL(cases, 3 * ST_N_WDTS * ST_N_SDTS * (int)ST_N_BLOCKS * 3);
    CU_ASSERT_EQUAL(bad, 0);
    lh_k_ctx_free(ctxs[0]);
    lh_k_ctx_free(ctxs[1]);
}

/* dequant(quantize(v)) against v, per element, with the bound of the block's stored scale */
static void test_quantize_round_trip(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(421);
    const int64_t N = 131, K = 290;
    float *vf = malloc((size_t)(N * K) * sizeof(float));
    float *d = malloc((size_t)(N * K) * sizeof(float));
    uint8_t *w = malloc((size_t)(N * K));
    float *scale = malloc((size_t)(N * K) * sizeof(float));
    long bad = 0, checked = 0;
    double worst[ST_N_WDTS] = {0};
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        for (int si = 0; si < ST_N_SDTS; si++)
            for (size_t bi = 0; bi < ST_N_BLOCKS; bi++) {
                const lh_dtype wdt = st_wdts[wi], sdt = st_sdts[si];
                const st_block *b = &st_blocks[bi];
                const int64_t br = st_br(b, N), bc = st_bc(b, K), sc = st_ceil(K, bc);
                void *src = make_src(LH_DTYPE_F32, N, K, false, vf);
                CU_ASSERT_EQUAL(run_quant(ctx, LH_DTYPE_F32, src, N, K, br, bc, wdt, w, sdt, scale),
                                LH_OK);
                lh_tensor wt = kt_t2(wdt, w, N, K), st = kt_t2(sdt, scale, st_ceil(N, br), sc);
                lh_tensor dt = kt_t2(LH_DTYPE_F32, d, N, K);
                CU_ASSERT_EQUAL(lh_k_dequantize_scaled(ctx, &wt, &st, br, bc, &dt), LH_OK);
                for (int64_t n = 0; n < N; n++)
                    for (int64_t k = 0; k < K; k++) {
                        const size_t bi2 = (size_t)((n / br) * sc + k / bc);
                        const float ss = st_scale_at(sdt, scale, bi2);
                        const float v = vf[n * K + k];
                        /* the block's absmax <= qmax * s, s within 2^-11 of ss */
                        const float amax = qmax_of(wdt) * ss * 1.001f;
                        const float err = fabsf(d[n * K + k] - v);
                        const float step =
                            wdt == LH_DTYPE_FP8_E4M3
                                ? fmaxf(ldexpf(fabsf(v), -4) * (1.0f + 0x1p-20f), ldexpf(ss, -10))
                                : ss * 0.5f;
                        const float tol = step + ldexpf(amax, -22);
                        checked++;
                        if (!(err <= tol)) {
                            if (bad++ < 3)
                                printf("\n    %s %s %lld x %lld: [%lld, %lld] %.9g -> %.9g "
                                       "(err %.3g, bound %.3g, scale %.9g)",
                                       lh_k_dtype_name(wdt), lh_k_dtype_name(sdt), (long long)br,
                                       (long long)bc, (long long)n, (long long)k, (double)v,
                                       (double)d[n * K + k], (double)err, (double)tol, (double)ss);
                        } else if (tol > 0 && err / tol > worst[wi]) {
                            worst[wi] = err / tol;
                        }
                    }
                free(src);
            }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(checked, (long)(ST_N_WDTS * ST_N_SDTS * ST_N_BLOCKS) * N * K);
    /* the bounds are tight: the worst element comes close to each */
    for (int wi = 0; wi < ST_N_WDTS; wi++)
        CU_ASSERT_TRUE(worst[wi] > 0.9);
    free(vf);
    free(d);
    free(w);
    free(scale);
    lh_k_ctx_free(ctx);
}

/* ---- hand-computed vectors ------------------------------------------------------------------- */

static lh_kctx *kctx;

static void quant_f32(const float *src, int64_t N, int64_t K, int64_t br, int64_t bc,
                      lh_dtype wdt, uint8_t *w, lh_dtype sdt, void *scale)
{
    CU_ASSERT_EQUAL(run_quant(kctx, LH_DTYPE_F32, src, N, K, br, bc, wdt, w, sdt, scale), LH_OK);
}

static void test_quantize_known(void)
{
    kctx = lh_k_ctx_create(1, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(kctx);
    uint8_t w[32];
    float s[8];
    uint16_t h[8];

    /* int8, absmax 127: s = 1, ties to even (63.5 -> 64, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2) */
    const float a[8] = {127.0f, 63.5f, -0.5f, 1.5f, 2.5f, -1.5f, -127.0f, 0.5f};
    quant_f32(a, 1, 8, 1, 8, LH_DTYPE_INT8, w, LH_DTYPE_F32, s);
    const uint8_t a_w[8] = {127, 64, 0, 2, 2, 0xfe, 0x81, 0};
    CU_ASSERT_EQUAL(s[0], 1.0f);
    CU_ASSERT_EQUAL(memcmp(w, a_w, 8), 0);

    /* int4, absmax 7: s = 1; 3.5 -> 4, -2.5 -> -2, 0.5 -> 0; packed low nibble first */
    const float b[6] = {7.0f, 3.5f, -2.5f, 0.5f, -7.0f, 1.0f};
    quant_f32(b, 1, 6, 1, 6, LH_DTYPE_INT4, w, LH_DTYPE_F32, s);
    CU_ASSERT_EQUAL(s[0], 1.0f);
    CU_ASSERT_TRUE(w[0] == 0x47 && w[1] == 0x0e && w[2] == 0x19);

    /* fp8, absmax 448: s = 1; 448 -> 0x7e, -224 -> 0xf6, 1 -> 0x38, -0 -> 0x80, 2^-9 -> 0x01
     * (the smallest subnormal), 0.001 -> 0x01 (0.512 of a step), 2^-11 -> 0 */
    const float c[8] = {448.0f, -224.0f, 1.0f, 0.0f, -0.0f, 0x1p-9f, 0.001f, 0x1p-11f};
    quant_f32(c, 1, 8, 1, 8, LH_DTYPE_FP8_E4M3, w, LH_DTYPE_F32, s);
    const uint8_t c_w[8] = {0x7e, 0xf6, 0x38, 0x00, 0x80, 0x01, 0x01, 0x00};
    CU_ASSERT_EQUAL(s[0], 1.0f);
    CU_ASSERT_EQUAL(memcmp(w, c_w, 8), 0);
    /* fp8 saturation after an f16 scale rounded down: absmax 449 -> s = 449 / 448 =
     * 1.00223..., f16 1.001953125 (1026 / 1024), 449 / that = 448.12 -> 448 (0x7e) */
    const float c2[2] = {449.0f, -449.0f};
    quant_f32(c2, 1, 2, 1, 2, LH_DTYPE_FP8_E4M3, w, LH_DTYPE_F16, h);
    CU_ASSERT_EQUAL(h[0], lh_k_f32_to_f16(1.001953125f));
    CU_ASSERT_TRUE(w[0] == 0x7e && w[1] == 0xfe);

    /* f16 scale: absmax 1 -> s = 1/127 = 0.0078740157, f16 0x2008 = 1032 * 2^-17; the values
     * 1032 * 2^-17 * {63.5, 62.5, -0.5, -1.5} are exact ties of v / ss -> 64, 62, 0, -2, and
     * 1 / ss = 127.007 -> 127 */
    const float ss = ldexpf(1032.0f, -17);
    const float d[5] = {1.0f, 63.5f * ss, 62.5f * ss, -0.5f * ss, -1.5f * ss};
    quant_f32(d, 1, 5, 1, 5, LH_DTYPE_INT8, w, LH_DTYPE_F16, h);
    CU_ASSERT_EQUAL(h[0], 0x2008);
    const uint8_t d_w[5] = {127, 64, 62, 0, 0xfe};
    CU_ASSERT_EQUAL(memcmp(w, d_w, 5), 0);

    /* 2 x 4 blocks over [3, 6] (partial in both dims): the absmax at block (0, 0)'s last row
     * and column (1, 3), at block (0, 1)'s (1, 5), at block (1, 0)'s first element; block
     * (1, 1) all zero -> scale 0 and zeros */
    const float e[18] = {0.5f, -0.25f, 0.125f, 1.0f,  0.3f, 1.0f,
                         0.1f, 0.2f,   0.3f,   -4.0f, 0.0f, 3.0f,
                         -2.0f, 1.0f,  0.5f,   0.25f, 0.0f, -0.0f};
    quant_f32(e, 3, 6, 2, 4, LH_DTYPE_INT8, w, LH_DTYPE_F32, s);
    CU_ASSERT_TRUE(s[0] == 4.0f / 127.0f && s[1] == 3.0f / 127.0f && s[2] == 2.0f / 127.0f &&
                   s[3] == 0.0f);
    CU_ASSERT_TRUE((int8_t)w[9] == -127 && (int8_t)w[11] == 127 && (int8_t)w[12] == -127);
    CU_ASSERT_TRUE(w[16] == 0 && w[17] == 0);
    /* 1.0 / (4 / 127) = 31.75 -> 32; 0.5 / (2 / 127) = 31.75 -> 32 */
    CU_ASSERT_TRUE(w[3] == 32 && w[14] == 32);

    /* a block of negative zeros: scale +0, values 0; an f16 scale that underflows (int4,
     * absmax 1e-7: s = 1.4e-8 rounds to 0 in f16): values 0 */
    const float z[4] = {-0.0f, -0.0f, 1e-7f, -1e-7f};
    quant_f32(z, 2, 2, 1, 2, LH_DTYPE_INT4, w, LH_DTYPE_F16, h);
    CU_ASSERT_TRUE(h[0] == 0 && h[1] == 0 && w[0] == 0 && w[1] == 0);
    quant_f32(z, 2, 2, 1, 2, LH_DTYPE_INT8, w, LH_DTYPE_F32, s);
    CU_ASSERT_TRUE(s[0] == 0.0f && !signbit(s[0]) && s[1] == 1e-7f / 127.0f);
    CU_ASSERT_TRUE(w[0] == 0 && w[1] == 0 && w[2] == 127 && w[3] == 0x81);

    /* bf16 and f16 sources: 0.5 -> per-channel int8, s = 0.5/127 */
    const uint16_t bf[2] = {lh_k_f32_to_bf16(0.5f), lh_k_f32_to_bf16(-0.25f)};
    CU_ASSERT_EQUAL(run_quant(kctx, LH_DTYPE_BF16, bf, 1, 2, 1, 2, LH_DTYPE_INT8, w, LH_DTYPE_F32, s),
                    LH_OK);
    CU_ASSERT_TRUE(s[0] == 0.5f / 127.0f && w[0] == 127 && (int8_t)w[1] == -64);
    lh_k_ctx_free(kctx);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_quantize_errors(void)
{
    lh_kctx *ctx = lh_k_ctx_create(2, kt_cpu());
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int64_t N = 600, K = 300;
    float *src = calloc((size_t)(N * K), sizeof(float));
    uint8_t *w = calloc((size_t)(N * K), 1);
    float *s = calloc((size_t)N * 10, sizeof(float));
    lh_tensor srt = kt_t2(LH_DTYPE_F32, src, N, K), wt = kt_t2(LH_DTYPE_INT8, w, N, K);
    lh_tensor st = kt_t2(LH_DTYPE_F32, s, N, 10);
    CU_ASSERT_EQUAL(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &st), LH_OK);

    /* non-finite values: the first in row-major order, whichever task meets it (several tasks
     * of 218 rows here) */
    src[500 * K + 1] = NAN;
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &st), LH_E_USAGE,
               "lh_k_quantize_scaled: src f32 row 500 col 1 is nan");
    src[250 * K + 299] = -INFINITY;
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &st), LH_E_USAGE,
               "lh_k_quantize_scaled: src f32 row 250 col 299 is inf");
    src[250 * K + 298] = NAN;
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &st), LH_E_USAGE,
               "src f32 row 250 col 298 is nan");
    uint16_t hs[4] = {0, 0x7c00, 0, 0};
    lh_tensor h22 = kt_t2(LH_DTYPE_F16, hs, 2, 2), w22 = kt_t2(LH_DTYPE_FP8_E4M3, w, 2, 2);
    lh_tensor s11 = kt_t2(LH_DTYPE_F32, s, 1, 1);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &h22, 2, 2, &w22, &s11), LH_E_USAGE,
               "lh_k_quantize_scaled: src f16 row 0 col 1 is inf");
    memset(src, 0, (size_t)(N * K) * sizeof(float));

    /* an f16 scale that overflows (1e7 / 127 = 78740 > 65504); an f32 scale takes it */
    src[40] = 1e7f;
    lh_tensor sh = kt_t2(LH_DTYPE_F16, s, N, 10);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &sh), LH_E_USAGE,
               "lh_k_quantize_scaled: the block of rows [0, 1) cols [30, 60) has absmax 1e+07: its "
               "scale absmax / 127 = 78740.2 overflows f16 (largest 65504); use an f32 scale");
    CU_ASSERT_EQUAL(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wt, &st), LH_OK);
    /* fp8 with an f16 scale takes absmax up to 448 * 65504 */
    lh_tensor wf8 = kt_t2(LH_DTYPE_FP8_E4M3, w, N, K);
    CU_ASSERT_EQUAL(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wf8, &sh), LH_OK);

    /* dtypes, shapes, blocks, overlaps */
    lh_tensor wbad = kt_t2(LH_DTYPE_F16, w, N, K);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &wbad, &st), LH_E_UNSUPPORTED,
               "lh_k_quantize_scaled: w [600, 300] has dtype f16; supported: fp8_e4m3, int8 or int4");
    lh_tensor sint = kt_t2(LH_DTYPE_INT8, src, N, K);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &sint, 1, 30, &wt, &st), LH_E_UNSUPPORTED,
               "lh_k_quantize_scaled: src [600, 300] has dtype int8; supported: f32, bf16 or f16");
    lh_tensor w2 = kt_t2(LH_DTYPE_INT8, w, N, K - 30);
    lh_tensor s9 = kt_t2(LH_DTYPE_F32, s, N, 9);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 30, &w2, &s9), LH_E_USAGE,
               "lh_k_quantize_scaled: w [600, 270] must have the shape of src [600, 300]");
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 29, &wt, &st), LH_E_USAGE,
               "lh_k_quantize_scaled: scale [600, 10] must be [600, 11]");
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 2, 30, &wt, &st), LH_E_USAGE,
               "lh_k_quantize_scaled: scale [600, 10] must be [300, 10] for w [600, 300] with 2 x "
               "30 blocks");
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &srt, 1, 0, &wt, &st), LH_E_USAGE,
               "lh_k_quantize_scaled: block_rows 1 and block_cols 0 must both be >= 1");
    lh_tensor s3 = kt_t2(LH_DTYPE_F32, src, 3, 4), w3 = kt_t2(LH_DTYPE_INT4, w, 3, 3);
    lh_tensor sc3 = kt_t2(LH_DTYPE_F32, s, 3, 1);
    lh_tensor s33 = kt_t2(LH_DTYPE_F32, src, 3, 3);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &s33, 1, 3, &w3, &sc3), LH_E_USAGE,
               "lh_k_quantize_scaled: w int4 [3, 3]: K 3 must be even");
    lh_tensor wsrc = kt_t2(LH_DTYPE_INT8, src, 3, 4), sc31 = kt_t2(LH_DTYPE_F32, s, 3, 1);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &s3, 1, 4, &wsrc, &sc31), LH_E_USAGE,
               "lh_k_quantize_scaled: src, w and scale must not overlap one another");
    lh_tensor w34 = kt_t2(LH_DTYPE_INT8, w, 3, 4), sw = kt_t2(LH_DTYPE_F32, w + 8, 3, 1);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &s3, 1, 4, &w34, &sw), LH_E_USAGE,
               "must not overlap one another");
    lh_tensor ssrc = kt_t2(LH_DTYPE_F32, src + 2, 3, 1);
    EXPECT_ERR(lh_k_quantize_scaled(ctx, &s3, 1, 4, &w34, &ssrc), LH_E_USAGE,
               "must not overlap one another");
    EXPECT_ERR(lh_k_quantize_scaled(ctx, NULL, 1, 4, &w34, &sc31), LH_E_USAGE,
               "lh_k_quantize_scaled: src is NULL");
    free(src);
    free(w);
    free(s);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo quant_tests[] = {
    {"quantize_scaled == reference, byte for byte (all dtypes, blocks, 1 and 2 threads)",
     test_quantize_reference},
    {"dequant(quantize(v)) within the stated bound of v", test_quantize_round_trip},
    {"quantize_scaled known vectors (ties, block edges, zero blocks, fp8 subnormals)",
     test_quantize_known},
    {"quantize_scaled errors", test_quantize_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: quantization with scale tensors", NULL, NULL, NULL, NULL, quant_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
