/* Weights with separate scales, decoded: lh_k_dequantize_scaled and lh_k_matmul_scaled on the
 * CPU, and the scalar ISA's row decoders.
 *
 * A row decodes one scale block at a time (LH_SCALED_ROW_FN): for each block column c, the
 * block's scale s (scale[n / block_rows][c], widened to f32) and the segment of the row in it
 * go to the ISA's segment decoder, which writes value * s. lh_k_matmul_scaled hands the same
 * row decoder to the blocked f32 driver (lh_cpu_matmul_decoded), which decodes each tile panel
 * into a per-thread buffer and runs the f32 tiles on it: the decoded values are those
 * lh_k_dequantize_scaled writes, so y is bit-identical to dequantizing and calling the f32
 * matmul. The exception, in the default LH_K_QMM_INT8 mode: int8 weights with one scale per
 * row take the integer-dot path (scaled_qmm.c). */
#include "scaled.h"

static LH_SCALED_ROW_FN(row_int8, , lh_scaled_seg_int8)
static LH_SCALED_ROW_FN(row_int4, , lh_scaled_seg_int4)
static LH_SCALED_ROW_FN(row_fp8, , lh_scaled_seg_fp8)

const lh_scaled_ops lh_scaled_ops_scalar = {{row_int8, row_int4, row_fp8}};

static const lh_scaled_ops *scaled_ops(lh_k_isa isa)
{
    switch (isa) {
#if LH_CPU_X86
    case LH_K_ISA_AVX512:
    case LH_K_ISA_AMX: return &lh_scaled_ops_avx512;
    case LH_K_ISA_AVX2: return &lh_scaled_ops_avx2;
#endif
    default: return &lh_scaled_ops_scalar;
    }
}

/* a checked weight and the context's decoder for it */
struct scaled_rows {
    lh_scaled_w sw;
    lh_scaled_row_fn row;
};

static void scaled_rows_init(struct scaled_rows *r, const lh_kctx *ctx, const lh_tensor *w,
                             const lh_tensor *scale, int64_t br, int64_t bc)
{
    const int idx = w->dtype == LH_DTYPE_INT8 ? LH_SW_INT8
                    : w->dtype == LH_DTYPE_INT4 ? LH_SW_INT4
                                                : LH_SW_FP8;
    r->sw.w = w->data;
    r->sw.K = w->shape[1];
    /* int4: K is even (dispatch) */
    r->sw.row_bytes = (size_t)(idx == LH_SW_INT4 ? r->sw.K / 2 : r->sw.K);
    r->sw.scale = scale->data;
    r->sw.scale_f16 = scale->dtype == LH_DTYPE_F16;
    r->sw.br = br;
    r->sw.bc = bc;
    r->sw.scale_cols = scale->shape[1];
    r->row = scaled_ops(ctx->isa)->row[idx];
}

/* lh_cpu_wrows_fn for the matmul driver */
static void scaled_rows(const void *user, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                        float *dst, int64_t ldd)
{
    const struct scaled_rows *r = user;
    for (int64_t n = n0; n < n1; n++)
        r->row(&r->sw, n, k0, k1, dst + (size_t)(n - n0) * (size_t)ldd);
}

lh_status lh_cpu_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                               const lh_tensor *scale, int64_t block_rows, int64_t block_cols,
                               const lh_tensor *bias, lh_tensor *y)
{
    /* the integer path: int8 with one scale per row, in the default mode (scaled.h) */
    if (w->dtype == LH_DTYPE_INT8 && scale->shape[1] == 1 && ctx->qmm == LH_K_QMM_INT8) {
        if (x->shape[0] == 0 || w->shape[0] == 0)
            return LH_OK;
        return lh_cpu_matmul_scaled_int8(ctx, x, w, scale, block_rows, bias, y);
    }
    struct scaled_rows r;
    scaled_rows_init(&r, ctx, w, scale, block_rows, block_cols);
    return lh_cpu_matmul_decoded(ctx, x, w->shape[0], scaled_rows, &r, bias, y,
                                 "lh_k_matmul_scaled", lh_k_dtype_name(w->dtype));
}

struct deq_job {
    struct scaled_rows r;
    float *dst;
    int64_t rows, rows_per_task;
};

static void deq_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct deq_job *j = user;
    const int64_t r0 = t * j->rows_per_task;
    const int64_t r1 = j->rows - r0 < j->rows_per_task ? j->rows : r0 + j->rows_per_task;
    for (int64_t r = r0; r < r1; r++)
        j->r.row(&j->r.sw, r, 0, j->r.sw.K, j->dst + (size_t)r * (size_t)j->r.sw.K);
}

#define DEQ_TASK_ELEMS 16384 /* elements per task, at least one row */

lh_status lh_cpu_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                   int64_t block_rows, int64_t block_cols, lh_tensor *dst)
{
    struct deq_job j;
    scaled_rows_init(&j.r, ctx, w, scale, block_rows, block_cols);
    j.dst = dst->data;
    j.rows = w->shape[0];
    const int64_t K = j.r.sw.K;
    j.rows_per_task = K < DEQ_TASK_ELEMS ? DEQ_TASK_ELEMS / (K > 0 ? K : 1) : 1;
    if (j.rows == 0 || K == 0)
        return LH_OK;
    lh_cpu_parallel(ctx, (j.rows + j.rows_per_task - 1) / j.rows_per_task, deq_task, &j);
    return LH_OK;
}
