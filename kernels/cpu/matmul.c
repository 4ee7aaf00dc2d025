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
 * Quantized weights are decoded as the tiles go (lh_cpu_matmul_decoded): the task runs the very
 * same loops and f32 tiles as the f32 path runs on the weights themselves, but each tile panel
 * (a few weight rows by one K block, 16 KiB at most) is first decoded into the thread's f32
 * scratch, where it stays in L1 for the tiles; every panel is decoded once per task. The tiles
 * see the same values in the same order, so y is bit-identical to decoding the whole weight
 * and running an f32 matmul. Users: ggml's block types (Q4_0 ..
 * Q6_K, one row at a time through lh_cpu_dequant_row) in LH_K_QMM_EXACT mode -- the default
 * LH_K_QMM_INT8 mode sends them to the integer-dot kernels (qmatmul.c) -- and the weights with
 * separate scales of lh_k_matmul_scaled (scaled.c).
 *
 * A bf16 weight with M >= 16 on the AMX ISA (LH_K_BF16MM_TILES, the default) goes to the bf16
 * tiles instead (matmul_amx_bf16.c), which round x to bf16. */
#include "cpu_kernels.h"
#include "amx.h"
#include "qmatmul.h"

struct mm_job {
    const float *x;
    const unsigned char *w; /* f32, bf16 or f16 bytes; NULL when the weight is decoded */
    lh_cpu_wrows_fn decode; /* quantized weights: each tile panel into scratch (f32 tiles) */
    const void *decode_user;
    float *scratch;         /* decoded weights: one tile panel per thread */
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

/* The weight panel the tiles read next, rows [n, n + nr) x columns [k0, k0 + kc), and its
 * row stride: in place for f32 / bf16 / f16 weights; decoded into the thread's buffer just
 * before, so that it is in L1 when the tiles read it, for quantized ones. */
static const void *w_panel(const struct mm_job *j, float *buf, int64_t n, int nr, int64_t k0,
                           int64_t kc, int64_t *ldw)
{
    if (!j->decode) {
        *ldw = j->K;
        return j->w + ((size_t)n * (size_t)j->K + (size_t)k0) * j->wsize;
    }
    j->decode(j->decode_user, n, n + nr, k0, k0 + kc, buf, kc);
    *ldw = kc;
    return buf;
}

static void mm_task(int64_t t, int tid, void *user)
{
    const struct mm_job *j = user;
    const int64_t K = j->K, N = j->N;
    const int64_t m0 = (t / j->n_nb) * LH_MM_MB, n0 = (t % j->n_nb) * LH_MM_NB;
    const int64_t m1 = j->M - m0 < LH_MM_MB ? j->M : m0 + LH_MM_MB;
    const int64_t n1 = N - n0 < LH_MM_NB ? N : n0 + LH_MM_NB;
    const int64_t rows = m1 - m0, cols = n1 - n0;
    float *buf = j->decode ? j->scratch + (size_t)tid * j->scratch_stride : NULL;
    float acc[LH_MM_MB * LH_MM_NB];
    for (int64_t i = 0; i < rows; i++)
        memset(acc + i * LH_MM_NB, 0, (size_t)cols * sizeof(float));

    /* Each (weight panel, K block) is visited once per task in either loop order, so a
     * quantized weight is decoded once per task. */
    if (rows * K <= LH_MM_STREAM_FLOATS) {
        /* Decode and small batches (the x rows fit in L2): a panel of weight rows streams
         * through all of K (long sequential reads for the prefetcher, each weight read once),
         * against every x row of the task. */
        const int nrp = rows == 1 ? j->nr1 : j->nr;
        for (int64_t n = n0; n < n1; n += nrp) {
            const int nr = (int)(n1 - n < nrp ? n1 - n : nrp);
            for (int64_t k0 = 0; k0 < K; k0 += LH_MM_KC) {
                const int64_t kc = K - k0 < LH_MM_KC ? K - k0 : LH_MM_KC;
                int64_t ldw;
                const void *wp = w_panel(j, buf, n, nr, k0, kc, &ldw);
                for (int64_t m = m0; m < m1; m += j->mr) {
                    const int mr = (int)(m1 - m < j->mr ? m1 - m : j->mr);
                    j->tile(mr, nr, kc, j->x + m * K + k0, K, wp, ldw,
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
                int64_t ldw;
                const void *wp = w_panel(j, buf, n, nr, k0, kc, &ldw);
                for (int64_t m = m0; m < m1; m += j->mr) {
                    const int mr = (int)(m1 - m < j->mr ? m1 - m : j->mr);
                    j->tile(mr, nr, kc, j->x + m * K + k0, K, wp, ldw,
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
                yr[c] = ar[c] + lh_cpu_bias_at(j->bias, j->bias_dtype, n0 + c);
        else
            memcpy(yr, ar, (size_t)cols * sizeof(float));
    }
}

/* The fields every path shares; the weight (w, or decode and scratch) is the caller's. */
static void mm_init(struct mm_job *j, const lh_kctx *ctx, const lh_tensor *x, int64_t N,
                    int wdt, const lh_tensor *bias, lh_tensor *y)
{
    const lh_cpu_ops *ops = ctx->ops;
    memset(j, 0, sizeof *j);
    j->x = x->data;
    j->bias = bias ? bias->data : NULL;
    j->bias_dtype = bias ? bias->dtype : LH_DTYPE_F32;
    j->y = y->data;
    j->M = x->shape[0];
    j->K = x->shape[1];
    j->N = N;
    j->wsize = wdt == LH_WDT_F32 ? 4 : 2;
    j->tile = ops->tile[wdt];
    j->mr = ops->tile_mr;
    j->nr = ops->tile_nr;
    j->nr1 = ops->tile_nr1;
    j->n_nb = (N + LH_MM_NB - 1) / LH_MM_NB;
}

static void mm_run(lh_kctx *ctx, struct mm_job *j)
{
    const int64_t n_mb = (j->M + LH_MM_MB - 1) / LH_MM_MB;
    lh_cpu_parallel(ctx, n_mb * j->n_nb, mm_task, j);
}

lh_status lh_cpu_matmul_decoded(lh_kctx *ctx, const lh_tensor *x, int64_t N,
                                lh_cpu_wrows_fn decode, const void *user, const lh_tensor *bias,
                                lh_tensor *y, const char *fn, const char *wname)
{
    struct mm_job j;
    mm_init(&j, ctx, x, N, LH_WDT_F32, bias, y);
    if (j.M == 0 || j.N == 0)
        return LH_OK;
    /* one tile panel: the most weight rows a tile takes by one K block */
    const int64_t panel = (j.nr1 > j.nr ? j.nr1 : j.nr) * (j.K < LH_MM_KC ? j.K : LH_MM_KC);
    j.scratch = lh_cpu_scratch(ctx, (size_t)panel);
    if (!j.scratch)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "%s: out of memory (%lld floats per thread to decode %s weights)", fn,
                       (long long)panel, wname);
    j.scratch_stride = lh_cpu_scratch_stride(ctx);
    j.decode = decode;
    j.decode_user = user;
    mm_run(ctx, &j);
    return LH_OK;
}

/* ggml block rows, decoded one row at a time; a K block is whole ggml blocks */
_Static_assert(LH_MM_KC % 256 == 0, "K blocks must start at a ggml block boundary");
struct ggml_rows {
    lh_dtype dt;
    const unsigned char *w;
    size_t row_bytes;
    int64_t block_elems, block_bytes;
};

static void ggml_rows_decode(const void *user, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                             float *dst, int64_t ldd)
{
    const struct ggml_rows *g = user;
    const size_t off = (size_t)(k0 / g->block_elems) * (size_t)g->block_bytes;
    for (int64_t n = n0; n < n1; n++)
        lh_cpu_dequant_row(g->dt, g->w + (size_t)n * g->row_bytes + off,
                           dst + (size_t)(n - n0) * (size_t)ldd, k1 - k0);
}

lh_status lh_cpu_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, const lh_tensor *bias,
                        lh_tensor *y)
{
    if (lh_k_dtype_block(w->dtype, NULL, NULL)) { /* the dispatch admits no int4 */
        if (ctx->qmm == LH_K_QMM_INT8)
            return lh_cpu_qmatmul(ctx, x, w, bias, y);
        struct ggml_rows g = {w->dtype, w->data, (size_t)lh_k_dtype_bytes(w->dtype, w->shape[1]),
                              0, 0};
        lh_k_dtype_block(w->dtype, &g.block_elems, &g.block_bytes);
        return lh_cpu_matmul_decoded(ctx, x, w->shape[0], ggml_rows_decode, &g, bias, y,
                                     "lh_k_matmul", lh_k_dtype_name(w->dtype));
    }
    if (w->dtype == LH_DTYPE_BF16 && ctx->isa == LH_K_ISA_AMX && ctx->bf16mm == LH_K_BF16MM_TILES &&
        x->shape[0] >= LH_AMX_BF16_MIN_M && x->shape[1] > 0 && w->shape[0] > 0 &&
        lh_cpu_amx_bf16_supported())
        return lh_cpu_matmul_bf16_amx(ctx, x, w, bias, y);
    struct mm_job j;
    mm_init(&j, ctx, x, w->shape[0], lh_cpu_wdt(w->dtype), bias, y);
    j.w = w->data;
    if (j.M == 0 || j.N == 0)
        return LH_OK;
    mm_run(ctx, &j);
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
