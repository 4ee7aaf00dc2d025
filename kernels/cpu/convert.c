/* dtype conversion of whole tensors, and embedding lookup (a row gather + conversion; a
 * block-quantized table's row is decoded by lh_cpu_dequant_row, so it is bit for bit the row
 * lh_k_dequantize gives). */
#include "cpu_kernels.h"

#define CONV_CHUNK 16384 /* elements per task */
#define STAGE 1024       /* f32 staging for bf16 <-> f16 */

static size_t esize(lh_dtype dt)
{
    return dt == LH_DTYPE_F32 ? 4 : 2;
}

/* dst[0:n] = src[0:n] converted; src and dst do not overlap (or are the same buffer and dtype). */
static void convert_run(const lh_cpu_ops *ops, lh_dtype sdt, const void *src, lh_dtype ddt, void *dst,
                        int64_t n)
{
    if (sdt == ddt) {
        if (src != dst)
            memcpy(dst, src, (size_t)n * esize(sdt));
        return;
    }
    if (sdt == LH_DTYPE_F32) {
        if (ddt == LH_DTYPE_BF16)
            ops->f32_to_bf16(src, dst, n);
        else
            ops->f32_to_f16(src, dst, n);
        return;
    }
    if (ddt == LH_DTYPE_F32) {
        if (sdt == LH_DTYPE_BF16)
            ops->bf16_to_f32(src, dst, n);
        else
            ops->f16_to_f32(src, dst, n);
        return;
    }
    /* bf16 <-> f16 through f32 (exact widening, then one rounding) */
    float stage[STAGE];
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i += STAGE) {
        int64_t m = n - i < STAGE ? n - i : STAGE;
        if (sdt == LH_DTYPE_BF16) {
            ops->bf16_to_f32(s + i, stage, m);
            ops->f32_to_f16(stage, d + i, m);
        } else {
            ops->f16_to_f32(s + i, stage, m);
            ops->f32_to_bf16(stage, d + i, m);
        }
    }
}

struct conv_job {
    const lh_cpu_ops *ops;
    lh_dtype sdt, ddt;
    const unsigned char *src;
    unsigned char *dst;
    int64_t n;
};

static void conv_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct conv_job *j = user;
    int64_t s = t * CONV_CHUNK, e = j->n - s < CONV_CHUNK ? j->n : s + CONV_CHUNK;
    convert_run(j->ops, j->sdt, j->src + (size_t)s * esize(j->sdt), j->ddt,
                j->dst + (size_t)s * esize(j->ddt), e - s);
}

lh_status lh_cpu_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    struct conv_job j = {ctx->ops, src->dtype, dst->dtype, src->data, dst->data, lh_cpu_numel(src)};
    if (j.n == 0 || (j.sdt == j.ddt && src->data == dst->data))
        return LH_OK;
    lh_cpu_parallel(ctx, (j.n + CONV_CHUNK - 1) / CONV_CHUNK, conv_task, &j);
    return LH_OK;
}

struct emb_job {
    const lh_cpu_ops *ops;
    lh_dtype dt;
    bool blocked;
    const unsigned char *table;
    const int32_t *ids;
    float *out;
    int64_t D;
    size_t row_bytes;
};

static void emb_task(int64_t i, int tid, void *user)
{
    (void)tid;
    const struct emb_job *j = user;
    const void *row = j->table + (size_t)j->ids[i] * j->row_bytes;
    if (j->blocked)
        lh_cpu_dequant_row(j->dt, row, j->out + i * j->D, j->D);
    else
        convert_run(j->ops, j->dt, row, LH_DTYPE_F32, j->out + i * j->D, j->D);
}

lh_status lh_cpu_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids, int64_t n,
                           lh_tensor *out)
{
    const int64_t D = table->shape[1];
    struct emb_job j = {ctx->ops, table->dtype, lh_k_dtype_block(table->dtype, NULL, NULL),
                        table->data, ids, out->data, D, 0};
    if (n == 0 || j.D == 0)
        return LH_OK;
    j.row_bytes = (size_t)lh_k_dtype_bytes(table->dtype, D); /* D is whole blocks (dispatch) */
    lh_cpu_parallel(ctx, n, emb_task, &j);
    return LH_OK;
}
