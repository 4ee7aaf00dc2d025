/* Shared by the kernel tests of ggml's block types (test_qmatmul.c, test_qembedding.c,
 * test_qmatmul_int8.c): the eight types' facts, random blocks with sane scales, the committed
 * extreme-scale fixtures (tests/fixtures/quant, see its README) and a bitwise comparison. */
#ifndef LH_QTEST_H
#define LH_QTEST_H

#include "ktest.h"

#include <errno.h>

typedef struct qtype {
    lh_dtype dt;
    const char *file; /* tests/fixtures/quant/<file>.bin / .f32 */
    int64_t block_elems, block_bytes;
    int n_scales;
    int scale_off[2];    /* byte offsets of the block's f16 scales */
    int64_t fixture_rows; /* the fixture's rows (its README's table) */
} qtype;

static const qtype qtypes[] = {
    {LH_DTYPE_Q4_0, "Q4_0", 32, 18, 1, {0, 0}, 5},     {LH_DTYPE_Q4_1, "Q4_1", 32, 20, 2, {0, 2}, 5},
    {LH_DTYPE_Q5_0, "Q5_0", 32, 22, 1, {0, 0}, 5},     {LH_DTYPE_Q5_1, "Q5_1", 32, 24, 2, {0, 2}, 5},
    {LH_DTYPE_Q8_0, "Q8_0", 32, 34, 1, {0, 0}, 5},     {LH_DTYPE_Q4_K, "Q4_K", 256, 144, 2, {0, 2}, 4},
    {LH_DTYPE_Q5_K, "Q5_K", 256, 176, 2, {0, 2}, 4},   {LH_DTYPE_Q6_K, "Q6_K", 256, 210, 1, {208, 0}, 4},
};
#define N_QTYPES (sizeof qtypes / sizeof qtypes[0])

/* rows x K elements of random blocks of q: random bytes, then every f16 scale replaced by a
 * small one (|d| in [1e-3, 1e-1], random sign), so no value is inf or NaN. */
static inline uint8_t *qt_random_blocks(const qtype *q, int64_t rows, int64_t K)
{
    const int64_t nblocks = rows * (K / q->block_elems);
    uint8_t *b = malloc((size_t)(nblocks * q->block_bytes) + 1);
    for (int64_t i = 0; i < nblocks; i++) {
        uint8_t *blk = b + i * q->block_bytes;
        for (int64_t k = 0; k < q->block_bytes; k++)
            blk[k] = (uint8_t)(kt_u64() >> 56);
        for (int s = 0; s < q->n_scales; s++) {
            float d = kt_range(1e-3f, 1e-1f) * ((kt_u64() >> 63) ? -1.0f : 1.0f);
            uint16_t h = lh_k_f32_to_f16(d);
            blk[q->scale_off[s]] = (uint8_t)(h & 0xff);
            blk[q->scale_off[s] + 1] = (uint8_t)(h >> 8);
        }
    }
    return b;
}

/* The whole of tests/fixtures/quant/<name>.<ext> (malloc'ed), or NULL with a message. */
static inline void *qt_read_fixture(const char *name, const char *ext, size_t *size)
{
    const char *dir = getenv("LH_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/%s.%s", dir ? dir : "tests/fixtures", name, ext);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("\n    cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* Whether got and want hold the same floats bit for bit (any NaN matching any NaN: IEEE
 * leaves payloads open); prints the first difference under `what`. */
static inline bool qt_same_bits(const char *what, const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t g, w;
        memcpy(&g, &got[i], 4);
        memcpy(&w, &want[i], 4);
        if (g != w && !(isnan(got[i]) && isnan(want[i]))) {
            printf("\n    %s: element %lld: got 0x%08x (%.9g), want 0x%08x (%.9g)", what,
                   (long long)i, (unsigned)g, (double)got[i], (unsigned)w, (double)want[i]);
            return false;
        }
    }
    return true;
}

/* The two ways the kernel tests lay a fixture of nb bytes out as a weight: [rows, cols] as its
 * README says, and one block per row: shapes[s] = {N, K}. */
static inline void qt_fixture_shapes(const qtype *q, size_t nb, int64_t shapes[2][2])
{
    const int64_t blocks = (int64_t)nb / q->block_bytes;
    shapes[0][0] = q->fixture_rows;
    shapes[0][1] = blocks / q->fixture_rows * q->block_elems;
    shapes[1][0] = blocks;
    shapes[1][1] = q->block_elems;
}

/* y = x @ w^T (+ b) through lh_k_matmul, printing the error if it fails. */
static inline lh_status qt_mm(lh_kctx *ctx, lh_dtype wdt, const void *w, const float *x, const void *b,
                    lh_dtype bdt, float *y, int64_t M, int64_t K, int64_t N)
{
    lh_tensor xt = kt_t2(LH_DTYPE_F32, (void *)x, M, K);
    lh_tensor wt = kt_t2(wdt, (void *)w, N, K);
    lh_tensor bt = kt_t1(bdt, (void *)b, N);
    lh_tensor yt = kt_t2(LH_DTYPE_F32, y, M, N);
    lh_status st = lh_k_matmul(ctx, &xt, &wt, b ? &bt : NULL, &yt);
    if (st != LH_OK)
        printf("\n    lh_k_matmul (w %s) failed: %s", lh_k_dtype_name(wdt), lh_k_last_error(ctx));
    return st;
}

/* x [M, K]: random in [-1, 1), with special rows where M allows: row 1 zeros, row 2 tiny
 * values (|x| < 2^-120 in its first block, so that block quantizes to zero) and large ones, row
 * 3 one outlier per 32 elements, row 4 wide exponents, and with `nonfinite` an inf in row
 * M - 1. */
static inline void qt_fill_x(float *x, int64_t M, int64_t K, bool nonfinite)
{
    for (int64_t i = 0; i < M * K; i++)
        x[i] = kt_uniform();
    for (int64_t k = 0; k < K; k++) {
        if (M > 1)
            x[1 * K + k] = 0.0f;
        if (M > 2)
            x[2 * K + k] = k < 256 ? kt_uniform() * 1e-37f : kt_uniform() * 3e4f;
        if (M > 3 && k % 32 == 7)
            x[3 * K + k] = 250.0f * kt_uniform();
        if (M > 4)
            x[4 * K + k] = ldexpf(kt_uniform(), (int)(kt_u64() % 60) - 30);
    }
    if (nonfinite && M > 5)
        x[(M - 1) * K + K / 2] = (kt_u64() & 1) ? INFINITY : -INFINITY;
}

/* One matmul case's inputs: x [M, K] from qt_fill_x, a bias of kind 0 (none), 1 (f32), 2 (bf16)
 * or 3 (f16) with its f32 values, and room for the reference's y and a run's y. */
typedef struct qt_case {
    int64_t M, K, N;
    int bias_kind;
    float *x, *yref, *y, *bref;
    void *bstore;
    const void *bias; /* bstore, or NULL for kind 0 */
    lh_dtype bdt;
} qt_case;

static inline void qt_case_make(qt_case *c, int64_t M, int64_t K, int64_t N, int bias_kind,
                                bool nonfinite)
{
    static const lh_dtype bias_dts[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16};
    c->M = M, c->K = K, c->N = N, c->bias_kind = bias_kind;
    c->x = malloc((size_t)(M * K) * sizeof(float) + 1);
    c->yref = malloc((size_t)(M * N) * sizeof(float) + 1);
    c->y = malloc((size_t)(M * N) * sizeof(float) + 1);
    c->bref = malloc((size_t)N * sizeof(float) + 1);
    c->bstore = malloc((size_t)N * 4 + 1);
    qt_fill_x(c->x, M, K, nonfinite);
    c->bdt = bias_kind > 0 ? bias_dts[bias_kind - 1] : LH_DTYPE_F32;
    if (bias_kind > 0)
        kt_fill_w(c->bdt, c->bstore, c->bref, N, 1.0f);
    c->bias = bias_kind > 0 ? c->bstore : NULL;
}

static inline void qt_case_free(qt_case *c)
{
    free(c->x);
    free(c->yref);
    free(c->y);
    free(c->bref);
    free(c->bstore);
}

/* w (rows of q's blocks) on each context against c->yref, bit for bit; the message names the
 * context's ISA and threads, the case, `what` (the weights) and `vs` (the reference). Returns
 * the number of failed or mismatching runs. */
static inline long qt_case_runs(qt_case *c, lh_kctx *const *ctxs, int n_ctx, const qtype *q,
                                const void *wq, const char *what, const char *vs)
{
    long bad = 0;
    for (int i = 0; i < n_ctx; i++) {
        memset(c->y, 0xff, (size_t)(c->M * c->N) * sizeof(float));
        if (qt_mm(ctxs[i], q->dt, wq, c->x, c->bias, c->bdt, c->y, c->M, c->K, c->N) != LH_OK)
            bad++;
        char label[200];
        snprintf(label, sizeof label, "%s %s %s M %lld K %lld N %lld bias %d, %d thread(s) vs %s",
                 lh_k_isa_name(lh_k_ctx_isa(ctxs[i])), lh_k_dtype_name(q->dt), what,
                 (long long)c->M, (long long)c->K, (long long)c->N, c->bias_kind,
                 lh_k_ctx_threads(ctxs[i]), vs);
        bad += !qt_same_bits(label, c->y, c->yref, c->M * c->N);
    }
    return bad;
}

#endif
