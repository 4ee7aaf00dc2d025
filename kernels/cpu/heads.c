/* lh_k_matmul_heads and lh_k_copy_view on the CPU (arguments checked by heads_dispatch.c:
 * strides >= 0, last dims contiguous, y's elements distinct and disjoint from x and w).
 *
 * matmul_heads is one small matmul per head over views. Tasks are (head, block of tokens,
 * block of outputs); each y element belongs to one task, and its sum over k is formed the same
 * way whatever the task's other rows are, so y depends on neither the thread count nor T:
 *   - w_kn false (w[h] [N, K], rows as lh_k_matmul's w): the matmul tiles of the ISA, driven
 *     as lh_cpu_matmul drives them (K blocks of LH_MM_KC, each block's tile sum added to an
 *     accumulator starting at 0, in block order). Each y[t, h, :] is bit-identical to
 *     lh_k_matmul of that x row and w[h] on the f32 path (AMX's bf16 tiles, M >= 16, aside).
 *   - w_kn true (w[h] [K, N]): y[t, h, :] = 0, then for k = 0 .. K-1 in order the ISA's
 *     axpy(y, x[t, h, k], w[h, k, :], N). Columns go in chunks of HEADS_NC (a multiple of every
 *     vector width), so only the row's own last N % V elements take the ISA's tail path, as in
 *     one axpy over the whole row; rows of K go in blocks of HEADS_KB through axpy_rows, whose
 *     arithmetic is that of axpy calls. bf16 / f16 rows are widened exactly into per-thread
 *     scratch first (once per task, shared by its tokens); f32 rows are copied there too when
 *     the task has more than one token, since rows a power of two apart (N = 512: 2 KiB)
 *     fall into a few L1 sets and evict each other between tokens (64 tokens of DeepSeek's
 *     shape: 5x faster packed); a lone token reads them in place. */
#include "cpu_kernels.h"

/* w_kn true: output columns per task, rows of w per panel, tokens per task. 128 columns:
 * 512-byte runs of each f32 weight row and, with N = 512, still 4 tasks per head for decode's
 * parallelism; a panel of 32 x 128 f32 is 16 KiB, in L1 for every token of the task. (256
 * columns or 64 rows measured no better on one core; 256 x 64 was slower.) */
#define HEADS_NC 128
#define HEADS_KB 32
#define HEADS_TB 32
_Static_assert(HEADS_NC % 64 == 0, "column chunks must be whole vectors of every ISA (16 x 4)");

struct heads_job {
    const lh_cpu_ops *ops;
    const float *x;
    int64_t xs0, xs1;
    const unsigned char *w; /* bytes; element strides ws0, ws1 of wsize bytes */
    int64_t ws0, ws1;
    size_t wsize;
    int wdt;
    float *y;
    int64_t ys0, ys1;
    int64_t T, H, N, K;
    int64_t n_tb, n_nb; /* token and column blocks per head */
    float *scratch;     /* w_kn true (bf16, f16, or f32 with T > 1): a panel per thread */
    size_t scratch_stride;
};

/* task -> head, token block [t0, t1), column block [n0, n1) for blocks of tb x nb */
static void task_range(const struct heads_job *j, int64_t task, int64_t tb, int64_t nb,
                       int64_t *h, int64_t *t0, int64_t *t1, int64_t *n0, int64_t *n1)
{
    *h = task / (j->n_tb * j->n_nb);
    const int64_t r = task % (j->n_tb * j->n_nb);
    *t0 = (r / j->n_nb) * tb;
    *t1 = j->T - *t0 < tb ? j->T : *t0 + tb;
    *n0 = (r % j->n_nb) * nb;
    *n1 = j->N - *n0 < nb ? j->N : *n0 + nb;
}

/* w_kn false: lh_cpu_matmul's task (matmul.c) with x rows xs0 apart and w rows ws1 apart */
static void nk_task(int64_t task, int tid, void *user)
{
    (void)tid;
    const struct heads_job *j = user;
    int64_t h, t0, t1, n0, n1;
    task_range(j, task, LH_MM_MB, LH_MM_NB, &h, &t0, &t1, &n0, &n1);
    const int64_t K = j->K, rows = t1 - t0, cols = n1 - n0;
    const float *x = j->x + h * j->xs1 + t0 * j->xs0;
    const unsigned char *w = j->w + (size_t)(h * j->ws0) * j->wsize;
    const int mr_max = j->ops->tile_mr;
    float acc[LH_MM_MB * LH_MM_NB];
    for (int64_t i = 0; i < rows; i++)
        memset(acc + i * LH_MM_NB, 0, (size_t)cols * sizeof(float));

    /* the two loop orders of mm_task: same sums, chosen for the caches */
    if (rows * K <= LH_MM_STREAM_FLOATS) {
        const int nrp = rows == 1 ? j->ops->tile_nr1 : j->ops->tile_nr;
        for (int64_t n = n0; n < n1; n += nrp) {
            const int nr = (int)(n1 - n < nrp ? n1 - n : nrp);
            for (int64_t k0 = 0; k0 < K; k0 += LH_MM_KC) {
                const int64_t kc = K - k0 < LH_MM_KC ? K - k0 : LH_MM_KC;
                const void *wp = w + (size_t)(n * j->ws1 + k0) * j->wsize;
                for (int64_t m = 0; m < rows; m += mr_max) {
                    const int mr = (int)(rows - m < mr_max ? rows - m : mr_max);
                    j->ops->tile[j->wdt](mr, nr, kc, x + m * j->xs0 + k0, j->xs0, wp, j->ws1,
                                         acc + m * LH_MM_NB + (n - n0), LH_MM_NB);
                }
            }
        }
    } else {
        for (int64_t k0 = 0; k0 < K; k0 += LH_MM_KC) {
            const int64_t kc = K - k0 < LH_MM_KC ? K - k0 : LH_MM_KC;
            for (int64_t n = n0; n < n1; n += j->ops->tile_nr) {
                const int nr = (int)(n1 - n < j->ops->tile_nr ? n1 - n : j->ops->tile_nr);
                const void *wp = w + (size_t)(n * j->ws1 + k0) * j->wsize;
                for (int64_t m = 0; m < rows; m += mr_max) {
                    const int mr = (int)(rows - m < mr_max ? rows - m : mr_max);
                    j->ops->tile[j->wdt](mr, nr, kc, x + m * j->xs0 + k0, j->xs0, wp, j->ws1,
                                         acc + m * LH_MM_NB + (n - n0), LH_MM_NB);
                }
            }
        }
    }
    for (int64_t i = 0; i < rows; i++)
        memcpy(j->y + (t0 + i) * j->ys0 + h * j->ys1 + n0, acc + i * LH_MM_NB,
               (size_t)cols * sizeof(float));
}

/* w_kn true: y rows [t0, t1) of head h, columns [n0, n1), accumulated in place */
static void kn_task(int64_t task, int tid, void *user)
{
    const struct heads_job *j = user;
    int64_t h, t0, t1, n0, n1;
    task_range(j, task, HEADS_TB, HEADS_NC, &h, &t0, &t1, &n0, &n1);
    const int64_t cols = n1 - n0;
    const unsigned char *w = j->w + (size_t)(h * j->ws0 + n0) * j->wsize;
    float *buf = j->scratch ? j->scratch + (size_t)tid * j->scratch_stride : NULL;
    for (int64_t t = t0; t < t1; t++)
        memset(j->y + t * j->ys0 + h * j->ys1 + n0, 0, (size_t)cols * sizeof(float));
    for (int64_t k0 = 0; k0 < j->K; k0 += HEADS_KB) {
        const int64_t kb = j->K - k0 < HEADS_KB ? j->K - k0 : HEADS_KB;
        const float *panel;
        int64_t ld;
        if (j->wdt == LH_WDT_F32 && t1 - t0 == 1) {
            panel = (const float *)(const void *)w + k0 * j->ws1;
            ld = j->ws1;
        } else if (j->wdt == LH_WDT_F32) {
            for (int64_t r = 0; r < kb; r++)
                memcpy(buf + r * cols, (const float *)(const void *)w + (k0 + r) * j->ws1,
                       (size_t)cols * sizeof(float));
            panel = buf;
            ld = cols;
        } else {
            for (int64_t r = 0; r < kb; r++) {
                const uint16_t *src = (const uint16_t *)(const void *)w + (k0 + r) * j->ws1;
                if (j->wdt == LH_WDT_BF16)
                    j->ops->bf16_to_f32(src, buf + r * cols, cols);
                else
                    j->ops->f16_to_f32(src, buf + r * cols, cols);
            }
            panel = buf;
            ld = cols;
        }
        for (int64_t t = t0; t < t1; t++)
            j->ops->axpy_rows(j->y + t * j->ys0 + h * j->ys1 + n0,
                              j->x + t * j->xs0 + h * j->xs1 + k0, panel, ld, kb, cols);
    }
}

lh_status lh_cpu_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, bool w_kn,
                              lh_tensor *y)
{
    struct heads_job j = {0};
    j.T = y->shape[0];
    j.H = y->shape[1];
    j.N = y->shape[2];
    j.K = x->shape[2];
    if (j.T == 0 || j.H == 0 || j.N == 0)
        return LH_OK;
    j.ys0 = y->stride[0];
    j.ys1 = y->stride[1];
    j.y = y->data;
    if (j.K == 0) { /* empty sums; x and w may have no data at all */
        for (int64_t t = 0; t < j.T; t++)
            for (int64_t h = 0; h < j.H; h++)
                memset(j.y + t * j.ys0 + h * j.ys1, 0, (size_t)j.N * sizeof(float));
        return LH_OK;
    }
    j.ops = ctx->ops;
    j.x = x->data;
    j.xs0 = x->stride[0];
    j.xs1 = x->stride[1];
    j.w = w->data;
    j.ws0 = w->stride[0];
    j.ws1 = w->stride[1];
    j.wdt = lh_cpu_wdt(w->dtype);
    j.wsize = j.wdt == LH_WDT_F32 ? 4 : 2;
    /* a stride of a dim of size 1 is never applied, but it still enters the offset formulas
     * (multiplied by 0): zero it so that no unchecked value takes part */
    if (j.T == 1)
        j.xs0 = j.ys0 = 0;
    if (j.H == 1)
        j.xs1 = j.ys1 = j.ws0 = 0;
    if (w->shape[1] == 1)
        j.ws1 = 0;
    if (!w_kn) {
        j.n_tb = (j.T + LH_MM_MB - 1) / LH_MM_MB;
        j.n_nb = (j.N + LH_MM_NB - 1) / LH_MM_NB;
        lh_cpu_parallel(ctx, j.H * j.n_tb * j.n_nb, nk_task, &j);
        return LH_OK;
    }
    j.n_tb = (j.T + HEADS_TB - 1) / HEADS_TB;
    j.n_nb = (j.N + HEADS_NC - 1) / HEADS_NC;
    if (j.wdt != LH_WDT_F32 || j.T > 1) {
        j.scratch = lh_cpu_scratch(ctx, (size_t)HEADS_KB * HEADS_NC);
        if (!j.scratch)
            return lh_kerr(ctx, LH_E_NOMEM,
                           "lh_k_matmul_heads: out of memory (%d floats per thread for panels of "
                           "%s weights)",
                           HEADS_KB * HEADS_NC, lh_k_dtype_name(w->dtype));
        j.scratch_stride = lh_cpu_scratch_stride(ctx);
    }
    lh_cpu_parallel(ctx, j.H * j.n_tb * j.n_nb, kn_task, &j);
    return LH_OK;
}

/* ---- lh_k_copy_view ------------------------------------------------------------------------- */

/* Rows (the last dim) per task: about 64 KiB of copying at the widths the callers use, enough to
 * amortize a task; a copy of fewer rows than one task runs inline. */
#define COPY_TASK_FLOATS (16 * 1024)

struct copy_job {
    float *dst;
    const float *src;
    int64_t shape[3], ds[3], ss[3]; /* the outer dims, padded to 3 in front with size 1 */
    int64_t cols, rows_per_task, rows;
};

static void copy_task(int64_t task, int tid, void *user)
{
    (void)tid;
    const struct copy_job *j = user;
    const int64_t r0 = task * j->rows_per_task;
    const int64_t r1 = j->rows - r0 < j->rows_per_task ? j->rows : r0 + j->rows_per_task;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i2 = r % j->shape[2], i1 = (r / j->shape[2]) % j->shape[1],
                      i0 = r / (j->shape[2] * j->shape[1]);
        memcpy(j->dst + i0 * j->ds[0] + i1 * j->ds[1] + i2 * j->ds[2],
               j->src + i0 * j->ss[0] + i1 * j->ss[1] + i2 * j->ss[2],
               (size_t)j->cols * sizeof(float));
    }
}

lh_status lh_cpu_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src)
{
    struct copy_job j = {0};
    const int nd = dst->ndim, outer = nd - 1;
    j.dst = dst->data;
    j.src = src->data;
    j.cols = dst->shape[nd - 1];
    j.rows = 1;
    for (int i = 0; i < 3; i++) {
        const int d = i - (3 - outer); /* dim of dst for padded slot i; < 0: padding */
        j.shape[i] = d >= 0 ? dst->shape[d] : 1;
        /* strides of size-1 dims are never applied (see lh_cpu_matmul_heads) */
        j.ds[i] = d >= 0 && j.shape[i] > 1 ? dst->stride[d] : 0;
        j.ss[i] = d >= 0 && j.shape[i] > 1 ? src->stride[d] : 0;
        j.rows *= j.shape[i];
    }
    if (j.rows == 0 || j.cols == 0)
        return LH_OK;
    j.rows_per_task = COPY_TASK_FLOATS / j.cols > 0 ? COPY_TASK_FLOATS / j.cols : 1;
    lh_cpu_parallel(ctx, (j.rows + j.rows_per_task - 1) / j.rows_per_task, copy_task, &j);
    return LH_OK;
}
