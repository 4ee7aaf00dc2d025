/* Per-head linear maps and strided copies (lh_k_matmul_heads, lh_k_copy_view) against a
 * double-precision reference written in this file from lh_kernels.h's definition, on every ISA
 * this CPU has, both weight orientations (w_kn false: w[h] [N, K]; true: w[h] [K, N]) and every
 * weight dtype, over three layouts:
 *   contiguous  x [T, H, K], w [H, R, C], y [T, H, N] packed;
 *   strided     x rows padded (a view into a wider activation), w's heads row blocks of a larger
 *               fused weight (padded rows, head stride above R * C, other rows between the
 *               heads), y a view into a wider output;
 *   broadcast   x's head stride 0 (one row for every head), w's head stride 0 (one weight for
 *               every head), y a head-major buffer seen as [T, H, N].
 * Every element of a buffer outside a view is poisoned: NaN in the inputs (a read of one
 * would show in y) and a sentinel in y (a write must not touch it, checked bit for bit).
 *
 * Tolerance: |y - ref| <= (K + 2) 2^-24 sum_k |x w|, a bound that holds for any order of f32
 * sums (with or without fused multiply-adds), the reference using the weights as rounded to
 * their dtype. Determinism, bit for bit: 1 vs 2 threads; each row of a T = 7 or T = 70 call vs
 * the same row alone (T = 1); with w_kn false, every y[t, h, :] vs lh_k_matmul of that x row
 * and w[h] (the same tiles and K blocks). copy_view: exact, 1 to 4 dims, broadcasts, threads.
 * Then every error of both. */
#include "ktest.h"

static const lh_dtype Wdts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};

enum { LAY_CONTIG = 0, LAY_STRIDED = 1, LAY_BCAST = 2, LAY_COUNT = 3 };
static const char *const lay_name[LAY_COUNT] = {"contiguous", "strided", "broadcast"};

static const float Y_SENTINEL = 1234.5f;

/* A 3-dim view: element (a, b, c) at off + a * s0 + b * s1 + c of a buffer of n elements. */
typedef struct lay3 {
    int64_t off, s0, s1, n;
} lay3;

static lh_tensor view3(lh_dtype dt, void *buf, const lay3 *l, int64_t a, int64_t b, int64_t c)
{
    lh_tensor t = kt_t3(dt, (unsigned char *)buf + (size_t)l->off * (dt == LH_DTYPE_F32 ? 4 : 2),
                        a, b, c);
    t.stride[0] = l->s0;
    t.stride[1] = l->s1;
    t.stride[2] = 1;
    return t;
}

/* the buffer a layout needs: its last element plus a margin of poison */
static lay3 mk_lay(int64_t off, int64_t s0, int64_t s1, int64_t a, int64_t b, int64_t c)
{
    lay3 l = {off, s0, s1, 0};
    l.n = off + (a - 1) * s0 + (b - 1) * s1 + c + 5;
    return l;
}

typedef struct hcase {
    int64_t T, H, N, K;
    bool w_kn;
    lh_dtype wdt;
    int layout;
    lay3 lx, lw, ly;
    float *x;    /* lx.n: view elements uniform, the rest NaN */
    void *w;     /* lw.n in wdt: the rows of w, NaN elsewhere */
    float *wref; /* the stored weights as f32 */
    float *y0;   /* ly.n: Y_SENTINEL everywhere, the initial y */
} hcase;

static int64_t w_rows(const hcase *c)
{
    return c->w_kn ? c->K : c->N;
}
static int64_t w_cols(const hcase *c)
{
    return c->w_kn ? c->N : c->K;
}

static void set_w_nan(const hcase *c, int64_t i)
{
    if (c->wdt == LH_DTYPE_F32)
        ((float *)c->w)[i] = NAN;
    else if (c->wdt == LH_DTYPE_BF16)
        ((uint16_t *)c->w)[i] = 0x7fc0;
    else
        ((uint16_t *)c->w)[i] = 0x7e00;
    c->wref[i] = NAN;
}

static void hcase_init(hcase *c, int64_t T, int64_t H, int64_t N, int64_t K, bool w_kn,
                       lh_dtype wdt, int layout)
{
    memset(c, 0, sizeof *c);
    c->T = T;
    c->H = H;
    c->N = N;
    c->K = K;
    c->w_kn = w_kn;
    c->wdt = wdt;
    c->layout = layout;
    const int64_t R = w_rows(c), C = w_cols(c);
    switch (layout) {
    case LAY_CONTIG:
        c->lx = mk_lay(0, H * K, K, T, H, K);
        c->lw = mk_lay(0, R * C, C, H, R, C);
        c->ly = mk_lay(0, H * N, N, T, H, N);
        break;
    case LAY_STRIDED: {
        /* x: rows of K + 3 (a wider activation, e.g. q's nope part of nope + rope), 5 more
         * between tokens; w: each head a block of R rows inside R + 3 rows of pitch C + 4
         * (a fused projection), starting 2 rows and 1 column in; y: rows of N + 2 */
        c->lx = mk_lay(2, H * (K + 3) + 5, K + 3, T, H, K);
        c->lw = mk_lay(2 * (C + 4) + 1, (R + 3) * (C + 4), C + 4, H, R, C);
        c->ly = mk_lay(1, H * (N + 2) + 3, N + 2, T, H, N);
        break;
    }
    default:
        c->lx = mk_lay(1, K + 1, 0, T, H, K);
        c->lw = mk_lay(0, 0, C + 2, H, R, C);
        c->ly = mk_lay(0, N + 1, T * (N + 1), T, H, N); /* element (t, h) at (h T + t)(N + 1) */
        break;
    }
    c->x = malloc((size_t)c->lx.n * sizeof(float));
    c->w = malloc((size_t)c->lw.n * kt_esize(wdt));
    c->wref = malloc((size_t)c->lw.n * sizeof(float));
    c->y0 = malloc((size_t)c->ly.n * sizeof(float));
    for (int64_t i = 0; i < c->lx.n; i++)
        c->x[i] = NAN;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t k = 0; k < K; k++)
                c->x[c->lx.off + t * c->lx.s0 + h * c->lx.s1 + k] = kt_uniform();
    for (int64_t i = 0; i < c->lw.n; i++)
        set_w_nan(c, i);
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < R; r++) {
            const int64_t o = c->lw.off + h * c->lw.s0 + r * c->lw.s1;
            kt_fill_w(wdt, (unsigned char *)c->w + (size_t)o * kt_esize(wdt), c->wref + o, C,
                      0.5f);
        }
    for (int64_t i = 0; i < c->ly.n; i++)
        c->y0[i] = Y_SENTINEL;
}

static void hcase_free(hcase *c)
{
    free(c->x);
    free(c->w);
    free(c->wref);
    free(c->y0);
}

static lh_status hcase_run(lh_kctx *ctx, const hcase *c, float *y)
{
    lh_tensor x = view3(LH_DTYPE_F32, c->x, &c->lx, c->T, c->H, c->K);
    lh_tensor w = view3(c->wdt, c->w, &c->lw, c->H, w_rows(c), w_cols(c));
    lh_tensor yt = view3(LH_DTYPE_F32, y, &c->ly, c->T, c->H, c->N);
    memcpy(y, c->y0, (size_t)c->ly.n * sizeof(float));
    lh_status st = lh_k_matmul_heads(ctx, &x, &w, c->w_kn, &yt);
    if (st != LH_OK)
        printf("\n    lh_k_matmul_heads failed: %s", lh_k_last_error(ctx));
    return st;
}

static void hcase_what(const hcase *c, const char *isa, char *buf, size_t size)
{
    snprintf(buf, size, "%s %s T %lld H %lld N %lld K %lld w %s w_kn %d", isa,
             lay_name[c->layout], (long long)c->T, (long long)c->H, (long long)c->N,
             (long long)c->K, kt_dt_name(c->wdt), (int)c->w_kn);
}

/* y against the definition, and every element outside the view still the sentinel */
static void hcase_check(const hcase *c, const float *y, const char *isa)
{
    kt_cmp cmp = {0};
    bool *in_view = calloc((size_t)c->ly.n, sizeof *in_view);
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->H; h++) {
            const float *xr = c->x + c->lx.off + t * c->lx.s0 + h * c->lx.s1;
            const float *wh = c->wref + c->lw.off + h * c->lw.s0;
            for (int64_t n = 0; n < c->N; n++) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < c->K; k++) {
                    const double wv = c->w_kn ? wh[k * c->lw.s1 + n] : wh[n * c->lw.s1 + k];
                    s += (double)xr[k] * wv;
                    mag += fabs((double)xr[k] * wv);
                }
                const int64_t yi = c->ly.off + t * c->ly.s0 + h * c->ly.s1 + n;
                in_view[yi] = true;
                kt_check(&cmp, (long)yi, y[yi], s, (double)(c->K + 2) * 0x1p-24 * mag);
            }
        }
    long touched = 0;
    for (int64_t i = 0; i < c->ly.n; i++)
        touched += !in_view[i] && memcmp(&y[i], &Y_SENTINEL, sizeof(float)) != 0;
    char what[200];
    hcase_what(c, isa, what, sizeof what);
    KT_REPORT(cmp, what);
    if (touched)
        printf("\n    FAIL %s: %ld element(s) outside y's view written", what, touched);
    CU_ASSERT_EQUAL(touched, 0);
    free(in_view);
}

/* T, H, N, K: odd sizes (no vector width or tile divides them), decode's shape at a small
 * scale, a K beyond one K block (LH_MM_KC 512), T beyond one token block of either path, N
 * beyond one column block of either path, and K 1 / N 1. */
static const int64_t Shapes[][4] = {
    {1, 3, 5, 7},   {7, 4, 33, 130}, {1, 5, 130, 32}, {7, 2, 17, 600},
    {70, 2, 9, 41}, {40, 2, 300, 37}, {3, 2, 1, 1},    {2, 3, 66, 1},
};
#define N_SHAPES (sizeof Shapes / sizeof Shapes[0])

/* the reference for every case; 1 and 2 threads bit-identical (sentinels included) */
static void heads_vs_reference(lh_k_isa isa)
{
    lh_kctx *ctx1 = kt_ctx(1, isa), *ctx2 = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx2);
    kt_seed(41 + (uint64_t)isa);
    int cases = 0;
    for (size_t si = 0; si < N_SHAPES; si++)
        for (int kn = 0; kn < 2; kn++)
            for (int di = 0; di < 3; di++)
                for (int lay = 0; lay < LAY_COUNT; lay++) {
                    hcase c;
                    hcase_init(&c, Shapes[si][0], Shapes[si][1], Shapes[si][2], Shapes[si][3],
                               kn, Wdts[di], lay);
                    float *y1 = malloc((size_t)c.ly.n * sizeof(float));
                    float *y2 = malloc((size_t)c.ly.n * sizeof(float));
                    CU_ASSERT_EQUAL(hcase_run(ctx1, &c, y1), LH_OK);
                    CU_ASSERT_EQUAL(hcase_run(ctx2, &c, y2), LH_OK);
                    hcase_check(&c, y1, lh_k_isa_name(isa));
                    if (memcmp(y1, y2, (size_t)c.ly.n * sizeof(float)) != 0) {
                        char what[200];
                        hcase_what(&c, lh_k_isa_name(isa), what, sizeof what);
                        printf("\n    FAIL %s: 1 and 2 threads differ", what);
                        CU_FAIL("threads");
                    }
                    free(y1);
                    free(y2);
                    hcase_free(&c);
                    cases++;
                }
    CU_ASSERT_EQUAL(cases, (int)(N_SHAPES * 2 * 3 * LAY_COUNT));
    lh_k_ctx_free(ctx1);
    lh_k_ctx_free(ctx2);
}
KT_ISA_TESTS(heads_vs_reference)

/* Row t of a T-token call equals the call on that row alone, bit for bit (strided layout, so
 * the one-row views start inside the wider buffers). */
static void heads_rows_independent(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(43 + (uint64_t)isa);
    static const int64_t Ts[] = {7, 70};
    for (int ti = 0; ti < 2; ti++)
        for (int kn = 0; kn < 2; kn++)
            for (int di = 0; di < 3; di++) {
                hcase c;
                hcase_init(&c, Ts[ti], 3, 150, 45, kn, Wdts[di], LAY_STRIDED);
                float *ya = malloc((size_t)c.ly.n * sizeof(float));
                float *yb = malloc((size_t)c.ly.n * sizeof(float));
                CU_ASSERT_EQUAL(hcase_run(ctx, &c, ya), LH_OK);
                memcpy(yb, c.y0, (size_t)c.ly.n * sizeof(float));
                lh_tensor w = view3(c.wdt, c.w, &c.lw, c.H, w_rows(&c), w_cols(&c));
                for (int64_t t = 0; t < c.T; t++) {
                    lay3 lx = c.lx, ly = c.ly;
                    lx.off += t * lx.s0;
                    ly.off += t * ly.s0;
                    lh_tensor x = view3(LH_DTYPE_F32, c.x, &lx, 1, c.H, c.K);
                    lh_tensor y = view3(LH_DTYPE_F32, yb, &ly, 1, c.H, c.N);
                    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &w, c.w_kn, &y), LH_OK);
                }
                if (memcmp(ya, yb, (size_t)c.ly.n * sizeof(float)) != 0) {
                    char what[200];
                    hcase_what(&c, lh_k_isa_name(isa), what, sizeof what);
                    printf("\n    FAIL %s: rows alone differ from the rows of one call", what);
                    CU_FAIL("rows");
                }
                free(ya);
                free(yb);
                hcase_free(&c);
            }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(heads_rows_independent)

/* w_kn false: y[t, h, :] is lh_k_matmul of x[t, h, :] and w[h] (packed copies), bit for bit,
 * for a K of one block and a K of two. */
static void heads_nk_is_matmul(lh_k_isa isa)
{
    lh_kctx *ctx = kt_ctx(2, isa);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    kt_seed(47 + (uint64_t)isa);
    static const int64_t Ks[] = {45, 700};
    for (int ki = 0; ki < 2; ki++)
        for (int di = 0; di < 3; di++) {
            hcase c;
            hcase_init(&c, 7, 3, 37, Ks[ki], false, Wdts[di], LAY_STRIDED);
            const size_t es = kt_esize(c.wdt);
            float *y = malloc((size_t)c.ly.n * sizeof(float));
            float *xr = malloc((size_t)c.K * sizeof(float)), *yr = malloc((size_t)c.N * sizeof(float));
            unsigned char *wh = malloc((size_t)(c.N * c.K) * es);
            CU_ASSERT_EQUAL(hcase_run(ctx, &c, y), LH_OK);
            long bad = 0;
            for (int64_t h = 0; h < c.H; h++) {
                for (int64_t n = 0; n < c.N; n++)
                    memcpy(wh + (size_t)(n * c.K) * es,
                           (unsigned char *)c.w + (size_t)(c.lw.off + h * c.lw.s0 + n * c.lw.s1) * es,
                           (size_t)c.K * es);
                for (int64_t t = 0; t < c.T; t++) {
                    memcpy(xr, c.x + c.lx.off + t * c.lx.s0 + h * c.lx.s1, (size_t)c.K * sizeof(float));
                    lh_tensor xt = kt_t2(LH_DTYPE_F32, xr, 1, c.K);
                    lh_tensor wt = kt_t2(c.wdt, wh, c.N, c.K);
                    lh_tensor yt = kt_t2(LH_DTYPE_F32, yr, 1, c.N);
                    CU_ASSERT_EQUAL(lh_k_matmul(ctx, &xt, &wt, NULL, &yt), LH_OK);
                    bad += memcmp(yr, y + c.ly.off + t * c.ly.s0 + h * c.ly.s1,
                                  (size_t)c.N * sizeof(float)) != 0;
                }
            }
            if (bad)
                printf("\n    FAIL %s K %lld w %s: %ld rows differ from lh_k_matmul",
                       lh_k_isa_name(isa), (long long)c.K, kt_dt_name(c.wdt), bad);
            CU_ASSERT_EQUAL(bad, 0);
            free(y);
            free(xr);
            free(yr);
            free(wh);
            hcase_free(&c);
        }
    lh_k_ctx_free(ctx);
}
KT_ISA_TESTS(heads_nk_is_matmul)

/* Empty calls: T 0 or N 0 write nothing, K 0 writes zeros (x and w may then have no data). */
static void heads_empty(void)
{
    lh_kctx *ctx = kt_ctx(2, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float yb[2 * 3 * 4], xb[1] = {0}, wb[1] = {0};
    for (int i = 0; i < 24; i++)
        yb[i] = Y_SENTINEL;
    lh_tensor x0 = kt_t3(LH_DTYPE_F32, NULL, 2, 3, 0), w0 = kt_t3(LH_DTYPE_F32, NULL, 3, 4, 0);
    lh_tensor y = kt_t3(LH_DTYPE_F32, yb, 2, 3, 4);
    for (int kn = 0; kn < 2; kn++) {
        lh_tensor w = w0;
        if (kn) { /* [H, K, N] = [3, 0, 4] */
            w.shape[1] = 0;
            w.shape[2] = 4;
            w.stride[1] = 4;
        }
        CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x0, &w, kn, &y), LH_OK);
        for (int i = 0; i < 24; i++)
            CU_ASSERT_EQUAL(yb[i], 0.0f);
        for (int i = 0; i < 24; i++)
            yb[i] = Y_SENTINEL;
    }
    lh_tensor xt = kt_t3(LH_DTYPE_F32, xb, 0, 3, 1), wt = kt_t3(LH_DTYPE_F32, wb, 3, 4, 1);
    lh_tensor yt = kt_t3(LH_DTYPE_F32, NULL, 0, 3, 4);
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &xt, &wt, false, &yt), LH_OK);
    lh_tensor x1 = kt_t3(LH_DTYPE_F32, xb, 2, 3, 1), wn = kt_t3(LH_DTYPE_F32, NULL, 3, 0, 1);
    lh_tensor yn = kt_t3(LH_DTYPE_F32, NULL, 2, 3, 0);
    x1.stride[0] = x1.stride[1] = 0;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x1, &wn, false, &yn), LH_OK);
    for (int i = 0; i < 24; i++)
        CU_ASSERT_EQUAL(yb[i], Y_SENTINEL);
    lh_k_ctx_free(ctx);
}

/* ---- copy_view ------------------------------------------------------------------------------ */

/* dst = src over views of 1 to 4 dims: dst inside a wider buffer (the rest untouched), src
 * padded and broadcast along some dims; exact, 1 and 2 threads, rows split over tasks. */
static void copy_view_cases(void)
{
    typedef struct copy_case {
        int ndim;
        int64_t shape[4];
        int64_t dpad[4]; /* added to dst's packed strides, dim by dim from the inside */
        bool bcast[4];   /* src stride 0 */
    } copy_case;
    static const copy_case cases[] = {
        {1, {37}, {0}, {false}},
        {2, {5, 9}, {0, 3}, {false, false}},
        {2, {6, 17}, {0, 0}, {true, false}},
        {3, {3, 4, 5}, {0, 2, 1}, {false, true, false}},
        {3, {3, 70, 300}, {0, 4, 0}, {false, false, false}}, /* 210 rows: several tasks */
        {4, {2, 3, 4, 5}, {0, 1, 2, 3}, {true, false, true, false}},
        {4, {2, 1, 3, 8}, {0, 0, 0, 0}, {false, true, false, false}},
    };
    kt_seed(53);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const copy_case *cc = &cases[ci];
        const int nd = cc->ndim;
        /* dst: packed strides plus the padding; src: each stride one more than the span of
         * the dims inside it (so neither is packed), or 0 where it broadcasts */
        int64_t ds[4], ss[4], dspan = 1, sspan = 1;
        for (int i = nd - 1; i >= 0; i--) {
            ds[i] = i == nd - 1 ? 1 : ds[i + 1] * cc->shape[i + 1] + cc->dpad[i];
            ss[i] = i == nd - 1 ? 1 : cc->bcast[i] ? 0 : sspan + 1;
            dspan += (cc->shape[i] - 1) * ds[i];
            sspan += (cc->shape[i] - 1) * ss[i];
        }
        const int64_t dn = dspan + 7, sn = sspan + 3;
        float *src = malloc((size_t)sn * sizeof(float)), *dst[2];
        for (int64_t i = 0; i < sn; i++)
            src[i] = kt_uniform();
        lh_tensor st = lh_tensor_cpu(LH_DTYPE_F32, src, nd, cc->shape);
        for (int i = 0; i < nd; i++)
            st.stride[i] = ss[i];
        for (int th = 0; th < 2; th++) {
            lh_kctx *ctx = kt_ctx(th + 1, LH_K_ISA_SCALAR);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
            dst[th] = malloc((size_t)dn * sizeof(float));
            for (int64_t i = 0; i < dn; i++)
                dst[th][i] = Y_SENTINEL;
            lh_tensor dt = lh_tensor_cpu(LH_DTYPE_F32, dst[th] + 2, nd, cc->shape);
            for (int i = 0; i < nd; i++)
                dt.stride[i] = ds[i];
            if (lh_k_copy_view(ctx, &dt, &st) != LH_OK) {
                printf("\n    copy case %zu: %s", ci, lh_k_last_error(ctx));
                CU_FAIL("copy_view");
            }
            lh_k_ctx_free(ctx);
        }
        /* the expected buffer, element by element */
        float *want = malloc((size_t)dn * sizeof(float));
        bool mism = false;
        for (int64_t i = 0; i < dn; i++)
            want[i] = Y_SENTINEL;
        int64_t total = 1, idx[4] = {0};
        for (int i = 0; i < nd; i++)
            total *= cc->shape[i];
        for (int64_t e = 0; e < total; e++) {
            int64_t r = e, doff = 2, soff = 0;
            for (int i = nd - 1; i >= 0; i--) {
                idx[i] = r % cc->shape[i];
                r /= cc->shape[i];
                doff += idx[i] * ds[i];
                soff += idx[i] * ss[i];
            }
            want[doff] = src[soff];
        }
        for (int th = 0; th < 2; th++)
            mism |= memcmp(dst[th], want, (size_t)dn * sizeof(float)) != 0;
        if (mism)
            printf("\n    FAIL copy case %zu (%d dims)", ci, nd);
        CU_ASSERT(!mism);
        free(want);
        free(dst[0]);
        free(dst[1]);
        free(src);
    }
}

/* ---- errors --------------------------------------------------------------------------------- */

static void heads_errors(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    /* T 2, H 3, N 4, K 5 */
    float xb[64] = {0}, wb[128] = {0}, yb[64] = {0}, big[512] = {0};
    lh_tensor x = kt_t3(LH_DTYPE_F32, xb, 2, 3, 5), w = kt_t3(LH_DTYPE_F32, wb, 3, 4, 5);
    lh_tensor y = kt_t3(LH_DTYPE_F32, yb, 2, 3, 4);
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &w, false, &y), LH_OK);

    CU_ASSERT_EQUAL(lh_k_matmul_heads(NULL, &x, &w, false, &y), LH_E_USAGE);
    CU_ASSERT(kt_contains(lh_k_last_error(NULL), "lh_k_matmul_heads: ctx is NULL"));
    EXPECT_ERR(lh_k_matmul_heads(ctx, NULL, &w, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: x is NULL");
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, NULL, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: w is NULL");
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, NULL), LH_E_USAGE,
               "lh_k_matmul_heads: y is NULL");

    /* dims */
    lh_tensor x2 = kt_t2(LH_DTYPE_F32, xb, 6, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x2, &w, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: x must have 3 dims (got ndim 2)");
    lh_tensor w2 = kt_t2(LH_DTYPE_F32, wb, 12, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w2, false, &y), LH_E_USAGE,
               "w must have 3 dims (got ndim 2)");
    int64_t s4[4] = {1, 2, 3, 4};
    lh_tensor y4 = lh_tensor_cpu(LH_DTYPE_F32, yb, 4, s4);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &y4), LH_E_USAGE,
               "y must have 3 dims (got ndim 4)");

    /* shapes that disagree */
    lh_tensor wh = kt_t3(LH_DTYPE_F32, wb, 4, 4, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wh, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: x [2, 3, 5] has 3 heads but w [4, 4, 5], [H, N, K] (w_kn "
               "false), has 4");
    lh_tensor wk = kt_t3(LH_DTYPE_F32, wb, 3, 4, 6);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wk, false, &y), LH_E_USAGE,
               "x [2, 3, 5] and w [3, 4, 6], [H, N, K] (w_kn false), disagree on K (5 vs 6)");
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, true, &y), LH_E_USAGE,
               "x [2, 3, 5] and w [3, 4, 5], [H, K, N] (w_kn true), disagree on K (5 vs 4)");
    lh_tensor wkn = kt_t3(LH_DTYPE_F32, wb, 3, 5, 4);
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &wkn, true, &y), LH_OK);
    lh_tensor yn = kt_t3(LH_DTYPE_F32, yb, 2, 3, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &yn), LH_E_USAGE,
               "y [2, 3, 5] must be [2, 3, 4] for x [2, 3, 5] and w [3, 4, 5]");
    lh_tensor yt = kt_t3(LH_DTYPE_F32, yb, 1, 3, 4);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &yt), LH_E_USAGE,
               "y [1, 3, 4] must be [2, 3, 4]");

    /* strides */
    lh_tensor xs = x;
    xs.stride[2] = 2;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xs, &w, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: x [2, 3, 5] has strides [15, 5, 2]; its last dim must be "
               "contiguous (stride[2] must be 1)");
    lh_tensor ws = w;
    ws.stride[2] = 0;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &ws, false, &y), LH_E_USAGE,
               "w [3, 4, 5] has strides [20, 5, 0]; its last dim must be contiguous");
    lh_tensor ys = y;
    ys.stride[2] = 3;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_E_USAGE,
               "y [2, 3, 4] has strides [12, 4, 3]; its last dim must be contiguous");
    xs = x;
    xs.stride[0] = -5;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xs, &w, false, &y), LH_E_USAGE,
               "x [2, 3, 5] has strides [-5, 5, 1]; stride[0] must be >= 0");
    ws = w;
    ws.stride[1] = 4;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &ws, false, &y), LH_E_USAGE,
               "w [3, 4, 5] has strides [20, 4, 1]; stride[1] must be at least its last dim (5)");
    xs = x;
    xs.stride[0] = INT64_MAX / 4;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xs, &w, false, &y), LH_E_USAGE, "spans too many elements");
    /* broadcasts of inputs are fine: x over heads and tokens, w over heads */
    xs = x;
    xs.stride[0] = xs.stride[1] = 0;
    ws = w;
    ws.stride[0] = 0;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &xs, &ws, false, &y), LH_OK);

    /* overlapping output rows */
    ys = y;
    ys.stride[1] = 2;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_E_USAGE,
               "y [2, 3, 4] with strides [12, 2, 1] overlaps itself: stride[1] = 2 is below the "
               "4 elements the dims inside it span");
    ys = y;
    ys.stride[0] = 0;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_E_USAGE,
               "y [2, 3, 4] with strides [0, 4, 1] overlaps itself: stride[0] = 0");
    ys = y;
    ys.stride[0] = 11; /* the second token's first head on the first token's last head */
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_E_USAGE,
               "stride[0] = 11 is below the 12 elements");
    ys = y;
    ys.stride[0] = 4; /* head-major: [T, H, N] over a [H, T, N] buffer, no overlap */
    ys.stride[1] = 8;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_OK);
    ys.stride[1] = 7;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &ys), LH_E_USAGE,
               "stride[1] = 7 is below the 8 elements");
    /* size-1 dims: their strides do not matter */
    lh_tensor x1 = kt_t3(LH_DTYPE_F32, xb, 1, 3, 5), y1 = kt_t3(LH_DTYPE_F32, yb, 1, 3, 4);
    y1.stride[0] = 0;
    x1.stride[0] = 0;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x1, &w, false, &y1), LH_OK);

    /* y overlapping an input */
    lh_tensor xo = kt_t3(LH_DTYPE_F32, big, 2, 3, 5), yo = kt_t3(LH_DTYPE_F32, big + 29, 2, 3, 4);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xo, &w, false, &yo), LH_E_USAGE,
               "lh_k_matmul_heads: y [2, 3, 4] overlaps x [2, 3, 5]");
    yo.data = big + 30;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &xo, &w, false, &yo), LH_OK);
    lh_tensor wo = kt_t3(LH_DTYPE_F32, big + 100, 3, 4, 5);
    wo.stride[0] = 100; /* heads 100 floats apart: the span ends at big + 320 */
    yo.data = big + 319;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wo, false, &yo), LH_E_USAGE,
               "lh_k_matmul_heads: y [2, 3, 4] overlaps w [3, 4, 5]");
    yo.data = big + 320;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &wo, false, &yo), LH_OK);
    uint16_t *wbig16 = (uint16_t *)(void *)big; /* a bf16 weight: its span counted in bytes */
    lh_tensor wo16 = kt_t3(LH_DTYPE_BF16, wbig16, 3, 4, 5);
    yo = kt_t3(LH_DTYPE_F32, big + 29, 2, 3, 4); /* bf16 span: 60 halves, 30 floats */
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wo16, false, &yo), LH_E_USAGE, "overlaps w");
    yo.data = big + 30;
    CU_ASSERT_EQUAL(lh_k_matmul_heads(ctx, &x, &wo16, false, &yo), LH_OK);

    /* dtypes */
    lh_tensor wq = kt_t3(LH_DTYPE_Q8_0, wb, 3, 4, 32);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wq, false, &y), LH_E_UNSUPPORTED,
               "lh_k_matmul_heads: w [3, 4, 32] has dtype q8_0; supported: f32, bf16 or f16 "
               "(dequantize it first");
    lh_tensor wi = kt_t3(LH_DTYPE_INT8, wb, 3, 4, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wi, false, &y), LH_E_UNSUPPORTED,
               "w [3, 4, 5] has dtype int8; supported: f32, bf16 or f16 (a weight with separate "
               "scales is dequantized first (lh_k_dequantize_scaled))");
    lh_tensor wf8 = kt_t3(LH_DTYPE_FP8_E4M3, wb, 3, 4, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wf8, false, &y), LH_E_UNSUPPORTED,
               "w [3, 4, 5] has dtype fp8_e4m3");
    lh_tensor wbad = w;
    wbad.dtype = (lh_dtype)99;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wbad, false, &y), LH_E_USAGE,
               "w has an invalid dtype (99)");
    lh_tensor xh = kt_t3(LH_DTYPE_BF16, xb, 2, 3, 5);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xh, &w, false, &y), LH_E_UNSUPPORTED,
               "lh_k_matmul_heads: x [2, 3, 5] has dtype bf16; supported: f32");
    lh_tensor yh = kt_t3(LH_DTYPE_F16, yb, 2, 3, 4);
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &yh), LH_E_UNSUPPORTED,
               "y [2, 3, 4] has dtype f16; supported: f32");

    /* data and devices */
    lh_tensor xn = x;
    xn.data = NULL;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xn, &w, false, &y), LH_E_USAGE,
               "x [2, 3, 5] has no data (NULL)");
    lh_tensor xc = x, wc = w, yc = y;
    xc.device = wc.device = yc.device = kt_cuda();
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xc, &w, false, &y), LH_E_USAGE,
               "lh_k_matmul_heads: x is on cuda:0, but the context is on cpu");
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &wc, false, &y), LH_E_USAGE,
               "w is on cuda:0, but the context is on cpu");
    EXPECT_ERR(lh_k_matmul_heads(ctx, &x, &w, false, &yc), LH_E_USAGE,
               "y is on cuda:0, but the context is on cpu");
    lh_tensor xneg = x;
    xneg.shape[0] = -1;
    EXPECT_ERR(lh_k_matmul_heads(ctx, &xneg, &w, false, &y), LH_E_USAGE,
               "x has a negative dimension [-1, 3, 5]");
    lh_k_ctx_free(ctx);
}

static void copy_view_errors(void)
{
    lh_kctx *ctx = kt_ctx(1, LH_K_ISA_SCALAR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    float a[64] = {0}, b[64] = {0};
    lh_tensor d = kt_t2(LH_DTYPE_F32, a, 3, 4), s = kt_t2(LH_DTYPE_F32, b, 3, 4);
    CU_ASSERT_EQUAL(lh_k_copy_view(ctx, &d, &s), LH_OK);
    CU_ASSERT_EQUAL(lh_k_copy_view(NULL, &d, &s), LH_E_USAGE);
    CU_ASSERT(kt_contains(lh_k_last_error(NULL), "lh_k_copy_view: ctx is NULL"));
    EXPECT_ERR(lh_k_copy_view(ctx, NULL, &s), LH_E_USAGE, "lh_k_copy_view: dst is NULL");
    EXPECT_ERR(lh_k_copy_view(ctx, &d, NULL), LH_E_USAGE, "lh_k_copy_view: src is NULL");
    lh_tensor sh = kt_t2(LH_DTYPE_BF16, b, 3, 4);
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &sh), LH_E_USAGE,
               "lh_k_copy_view: src [3, 4] has dtype bf16; both views must be f32");
    lh_tensor dh = kt_t2(LH_DTYPE_F16, a, 3, 4);
    EXPECT_ERR(lh_k_copy_view(ctx, &dh, &s), LH_E_USAGE, "dst [3, 4] has dtype f16");
    lh_tensor st = kt_t2(LH_DTYPE_F32, b, 4, 3);
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &st), LH_E_USAGE,
               "lh_k_copy_view: dst [3, 4] and src [4, 3] must have the same shape");
    lh_tensor s3 = kt_t3(LH_DTYPE_F32, b, 1, 3, 4);
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &s3), LH_E_USAGE,
               "dst [3, 4] and src [1, 3, 4] must have the same shape");
    lh_tensor d0 = d;
    d0.ndim = 0;
    EXPECT_ERR(lh_k_copy_view(ctx, &d0, &s), LH_E_USAGE, "dst must have 1 to 4 dims (got ndim 0)");
    lh_tensor s5 = s;
    s5.ndim = 5;
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &s5), LH_E_USAGE, "src must have 1 to 4 dims (got ndim 5)");
    lh_tensor ss = s;
    ss.stride[1] = 2;
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &ss), LH_E_USAGE,
               "src [3, 4] has strides [4, 2]; its last dim must be contiguous");
    ss = s;
    ss.stride[0] = -4;
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &ss), LH_E_USAGE, "stride[0] must be >= 0");
    ss = s;
    ss.stride[0] = 0; /* a broadcast source is fine */
    CU_ASSERT_EQUAL(lh_k_copy_view(ctx, &d, &ss), LH_OK);
    lh_tensor db = d;
    db.stride[0] = 0;
    EXPECT_ERR(lh_k_copy_view(ctx, &db, &s), LH_E_USAGE,
               "lh_k_copy_view: dst [3, 4] with strides [0, 1] overlaps itself");
    db.stride[0] = 3;
    EXPECT_ERR(lh_k_copy_view(ctx, &db, &s), LH_E_USAGE, "stride[0] = 3 is below the 4 elements");
    lh_tensor so = kt_t2(LH_DTYPE_F32, a + 11, 3, 4);
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &so), LH_E_USAGE,
               "lh_k_copy_view: dst [3, 4] overlaps src [3, 4]");
    so.data = a + 12;
    CU_ASSERT_EQUAL(lh_k_copy_view(ctx, &d, &so), LH_OK);
    lh_tensor sc = s;
    sc.device = kt_cuda();
    EXPECT_ERR(lh_k_copy_view(ctx, &d, &sc), LH_E_USAGE,
               "lh_k_copy_view: src is on cuda:0, but the context is on cpu");
    lh_tensor dn = d;
    dn.data = NULL;
    EXPECT_ERR(lh_k_copy_view(ctx, &dn, &s), LH_E_USAGE, "dst [3, 4] has no data (NULL)");
    /* empty: nothing to copy, no data needed */
    lh_tensor de = kt_t2(LH_DTYPE_F32, NULL, 0, 4), se = kt_t2(LH_DTYPE_F32, NULL, 0, 4);
    CU_ASSERT_EQUAL(lh_k_copy_view(ctx, &de, &se), LH_OK);
    lh_k_ctx_free(ctx);
}

static CU_TestInfo heads_tests[] = {
    {"matmul_heads vs double reference, 3 layouts, threads 1/2 [scalar]",
     heads_vs_reference_scalar},
    {"matmul_heads vs double reference, 3 layouts, threads 1/2 [avx2]", heads_vs_reference_avx2},
    {"matmul_heads vs double reference, 3 layouts, threads 1/2 [avx512]",
     heads_vs_reference_avx512},
    {"matmul_heads rows of T=7/70 == T=1 calls [scalar]", heads_rows_independent_scalar},
    {"matmul_heads rows of T=7/70 == T=1 calls [avx2]", heads_rows_independent_avx2},
    {"matmul_heads rows of T=7/70 == T=1 calls [avx512]", heads_rows_independent_avx512},
    {"matmul_heads w_kn false == lh_k_matmul per head [scalar]", heads_nk_is_matmul_scalar},
    {"matmul_heads w_kn false == lh_k_matmul per head [avx2]", heads_nk_is_matmul_avx2},
    {"matmul_heads w_kn false == lh_k_matmul per head [avx512]", heads_nk_is_matmul_avx512},
    {"matmul_heads: T 0, N 0 write nothing; K 0 writes zeros", heads_empty},
    {"matmul_heads: every error", heads_errors},
    {"copy_view: 1-4 dims, broadcasts, views, threads 1/2", copy_view_cases},
    {"copy_view: every error", copy_view_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"per-head kernels", NULL, NULL, NULL, NULL, heads_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
