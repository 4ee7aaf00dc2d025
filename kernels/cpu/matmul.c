/* y[M,N] = x[M,K] @ w[N,K]^T (+ bias): the blocked driver shared by every ISA, and the scalar
 * tiles.
 *
 * Work is split into tasks of LH_MM_MB rows of x by LH_MM_NB rows of w; the tile (a few x rows
 * by a few w rows) runs every x row of the task against a micro panel of w rows that stays in
 * L1, so each weight element is read from memory once per task. Two loop orders:
 *   - prefill (the task's x rows exceed LH_MM_STREAM_FLOATS): K blocks of LH_MM_KC outermost,
 *     so the x block (MB x KC floats) stays in L2 while weight panels pass through;
 *   - decode / small batch, incl. M == 1 (the GEMV path, memory-bound): each weight panel
 *     streams through all of K (long sequential reads), the x rows staying in L2.
 * Both accumulate the K blocks of an element in the same order, so per output element the
 * summation depends only on K, LH_MM_KC and the ISA, never on the thread count, the loop order
 * or where the element fell in a tile.
 *
 * Block-quantized weights (ggml's Q4_0 .. Q6_K) go to the integer-dot kernels (qmatmul.c) in
 * the default LH_K_QMM_INT8 mode. In LH_K_QMM_EXACT mode each task first decodes its LH_MM_NB
 * weight rows, one row at a time (lh_cpu_dequant_row), into the thread's f32 scratch, then runs
 * the very same loops and f32 tiles on that panel as the f32 path runs on the weights
 * themselves, so y is bit-identical to lh_k_dequantize followed by an f32 lh_k_matmul. */
#include "cpu_kernels.h"
#include "qmatmul.h"

struct mm_job {
    const float *x;
    const unsigned char *w; /* bytes */
    lh_dtype wdt;           /* a block type: decoded per task into scratch (f32 tiles) */
    int64_t wrow_bytes;     /* bytes per weight row (block types) */
    float *scratch;         /* block types: LH_MM_NB * K floats per thread */
    size_t scratch_stride;
    const void *bias; /* [N] in bias_dtype: f32, bf16 or f16, like the weights */
    lh_dtype bias_dtype;
    float *y;
    int64_t M, N, K;
    size_t wsize;
    int64_t n_nb; /* tasks along N */
    lh_cpu_tile_fn tile;
    int mr, nr, nr1;
};

static float bias_at(const struct mm_job *j, int64_t i)
{
    switch (j->bias_dtype) {
    case LH_DTYPE_BF16: return lh_k_bf16_to_f32(((const uint16_t *)j->bias)[i]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)j->bias)[i]);
    default: return ((const float *)j->bias)[i];
    }
}

static void mm_task(int64_t t, int tid, void *user)
{
    const struct mm_job *j = user;
    const int64_t K = j->K, N = j->N;
    const int64_t m0 = (t / j->n_nb) * LH_MM_MB, n0 = (t % j->n_nb) * LH_MM_NB;
    const int64_t m1 = j->M - m0 < LH_MM_MB ? j->M : m0 + LH_MM_MB;
    const int64_t n1 = N - n0 < LH_MM_NB ? N : n0 + LH_MM_NB;
    const int64_t rows = m1 - m0, cols = n1 - n0;
    /* the weight rows [n0, n1): row n at wbase + (n - wrow0) * K elements of wsize bytes */
    const unsigned char *wbase = j->w;
    int64_t wrow0 = 0;
    if (j->scratch) {
        float *panel = j->scratch + (size_t)tid * j->scratch_stride;
        for (int64_t n = n0; n < n1; n++)
            lh_cpu_dequant_row(j->wdt, j->w + (size_t)n * (size_t)j->wrow_bytes,
                               panel + (size_t)(n - n0) * (size_t)K, K);
        wbase = (const unsigned char *)panel;
        wrow0 = n0;
    }
    float acc[LH_MM_MB * LH_MM_NB];
    for (int64_t i = 0; i < rows; i++)
        memset(acc + i * LH_MM_NB, 0, (size_t)cols * sizeof(float));

    if (rows * K <= LH_MM_STREAM_FLOATS) {
        /* Decode and small batches (the x rows fit in L2): a panel of weight rows streams
         * through all of K (long sequential reads for the prefetcher, each weight read once),
         * against every x row of the task. */
        const int nrp = rows == 1 ? j->nr1 : j->nr;
        for (int64_t n = n0; n < n1; n += nrp) {
            const int nr = (int)(n1 - n < nrp ? n1 - n : nrp);
            for (int64_t k0 = 0; k0 < K; k0 += LH_MM_KC) {
                const int64_t kc = K - k0 < LH_MM_KC ? K - k0 : LH_MM_KC;
                const void *wp = wbase + ((size_t)(n - wrow0) * (size_t)K + (size_t)k0) * j->wsize;
                for (int64_t m = m0; m < m1; m += j->mr) {
                    const int mr = (int)(m1 - m < j->mr ? m1 - m : j->mr);
                    j->tile(mr, nr, kc, j->x + m * K + k0, K, wp, K,
                            acc + (m - m0) * LH_MM_NB + (n - n0), LH_MM_NB);
                }
            }
        }
    } else {
        /* Prefill: K blocks outermost, so the task's x block (MB x KC floats) stays in L2
         * while the weight panels pass through L1. */
        for (int64_t k0 = 0; k0 < K; k0 += LH_MM_KC) {
            const int64_t kc = K - k0 < LH_MM_KC ? K - k0 : LH_MM_KC;
            for (int64_t n = n0; n < n1; n += j->nr) {
                const int nr = (int)(n1 - n < j->nr ? n1 - n : j->nr);
                const void *wp = wbase + ((size_t)(n - wrow0) * (size_t)K + (size_t)k0) * j->wsize;
                for (int64_t m = m0; m < m1; m += j->mr) {
                    const int mr = (int)(m1 - m < j->mr ? m1 - m : j->mr);
                    j->tile(mr, nr, kc, j->x + m * K + k0, K, wp, K,
                            acc + (m - m0) * LH_MM_NB + (n - n0), LH_MM_NB);
                }
            }
        }
    }

    for (int64_t i = 0; i < rows; i++) {
        float *yr = j->y + (m0 + i) * N + n0;
        const float *ar = acc + i * LH_MM_NB;
        if (j->bias)
            for (int64_t c = 0; c < cols; c++)
                yr[c] = ar[c] + bias_at(j, n0 + c);
        else
            memcpy(yr, ar, (size_t)cols * sizeof(float));
    }
}

lh_status lh_cpu_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, const lh_tensor *bias,
                        lh_tensor *y)
{
    const lh_cpu_ops *ops = ctx->ops;
    struct mm_job j;
    j.x = x->data;
    j.w = w->data;
    j.bias = bias ? bias->data : NULL;
    j.bias_dtype = bias ? bias->dtype : LH_DTYPE_F32;
    j.y = y->data;
    j.M = x->shape[0];
    j.K = x->shape[1];
    j.N = w->shape[0];
    j.wdt = w->dtype;
    j.wrow_bytes = 0;
    j.scratch = NULL;
    j.scratch_stride = 0;
    const bool blocked = lh_k_dtype_block(w->dtype, NULL, NULL); /* the dispatch admits no int4 */
    if (blocked && ctx->qmm == LH_K_QMM_INT8)
        return lh_cpu_qmatmul(ctx, x, w, bias, y);
    j.wsize = w->dtype == LH_DTYPE_F32 || blocked ? 4 : 2;
    j.tile = ops->tile[blocked ? LH_WDT_F32 : lh_cpu_wdt(w->dtype)];
    j.mr = ops->tile_mr;
    j.nr = ops->tile_nr;
    j.nr1 = ops->tile_nr1;
    if (j.M == 0 || j.N == 0)
        return LH_OK;
    int64_t n_mb = (j.M + LH_MM_MB - 1) / LH_MM_MB;
    j.n_nb = (j.N + LH_MM_NB - 1) / LH_MM_NB;
    if (blocked) {
        const int64_t panel = (j.N < LH_MM_NB ? j.N : LH_MM_NB) * j.K;
        j.wrow_bytes = lh_k_dtype_bytes(w->dtype, j.K);
        j.scratch = lh_cpu_scratch(ctx, (size_t)panel);
        if (!j.scratch)
            return lh_kerr(ctx, LH_E_NOMEM,
                           "lh_k_matmul: out of memory (%lld floats per thread to decode %s "
                           "weights)",
                           (long long)panel, lh_k_dtype_name(w->dtype));
        j.scratch_stride = lh_cpu_scratch_stride(ctx);
    }
    lh_cpu_parallel(ctx, n_mb * j.n_nb, mm_task, &j);
    return LH_OK;
}

/* ---- scalar tiles --------------------------------------------------------------------- */

/* Per element: four running sums over k mod 4, the remainder into the first, then
 * (s0 + s1) + (s2 + s3). */
static LH_ALWAYS_INLINE float dot_scalar(const int wdt, const float *x, const void *w, int64_t kc)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4) {
        s0 += x[k] * lh_cpu_load_w(wdt, w, k);
        s1 += x[k + 1] * lh_cpu_load_w(wdt, w, k + 1);
        s2 += x[k + 2] * lh_cpu_load_w(wdt, w, k + 2);
        s3 += x[k + 3] * lh_cpu_load_w(wdt, w, k + 3);
    }
    for (; k < kc; k++)
        s0 += x[k] * lh_cpu_load_w(wdt, w, k);
    return (s0 + s1) + (s2 + s3);
}

static LH_ALWAYS_INLINE void tile_scalar(const int wdt, int mr, int nr, int64_t kc, const float *x,
                                         int64_t ldx, const void *w, int64_t ldw, float *acc,
                                         int64_t ldacc)
{
    const size_t es = wdt == LH_WDT_F32 ? 4 : 2;
    for (int j = 0; j < nr; j++) {
        const void *wr = (const unsigned char *)w + (size_t)j * (size_t)ldw * es;
        for (int i = 0; i < mr; i++)
            acc[i * ldacc + j] += dot_scalar(wdt, x + i * ldx, wr, kc);
    }
}

void lh_cpu_tile_scalar_f32(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const void *w,
                            int64_t ldw, float *acc, int64_t ldacc)
{
    tile_scalar(LH_WDT_F32, mr, nr, kc, x, ldx, w, ldw, acc, ldacc);
}

void lh_cpu_tile_scalar_bf16(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const void *w,
                             int64_t ldw, float *acc, int64_t ldacc)
{
    tile_scalar(LH_WDT_BF16, mr, nr, kc, x, ldx, w, ldw, acc, ldacc);
}

void lh_cpu_tile_scalar_f16(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const void *w,
                            int64_t ldw, float *acc, int64_t ldacc)
{
    tile_scalar(LH_WDT_F16, mr, nr, kc, x, ldx, w, ldw, acc, ldacc);
}
