/* Residual add (y += x) and the additive embedding lookup (out[i] += table[ids[i]], learned
 * position embeddings). Both are one f32 addition per element, so every ISA and thread count
 * gives the same bits. A block-quantized table's row is decoded by lh_cpu_dequant_row (the
 * values lh_k_dequantize gives) before the addition. */
#include "cpu_kernels.h"

#define ADD_CHUNK 16384 /* elements per task */
/* floats of a bf16 / f16 / block-type table row widened at a time: a multiple of every
 * block (32 and 256 elements), so a stage never splits one */
#define EMB_STAGE 1024

struct add_job {
    const lh_cpu_ops *ops;
    float *y;
    const float *x;
    int64_t n;
};

static void add_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct add_job *j = user;
    int64_t s = t * ADD_CHUNK, e = j->n - s < ADD_CHUNK ? j->n : s + ADD_CHUNK;
    j->ops->add(j->y + s, j->x + s, e - s);
}

lh_status lh_cpu_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x)
{
    struct add_job j = {ctx->ops, y->data, x->data, lh_cpu_numel(y)};
    if (j.n == 0)
        return LH_OK;
    lh_cpu_parallel(ctx, (j.n + ADD_CHUNK - 1) / ADD_CHUNK, add_task, &j);
    return LH_OK;
}

struct emb_add_job {
    const lh_cpu_ops *ops;
    lh_dtype dt;
    const unsigned char *table;
    const int32_t *ids;
    float *out;
    int64_t D;
    size_t row_bytes;
    int64_t block_elems, block_bytes; /* 1 and the element size for f32 / bf16 / f16 */
};

static void emb_add_row(int64_t i, int tid, void *user)
{
    (void)tid;
    const struct emb_add_job *j = user;
    const int64_t D = j->D;
    const unsigned char *row = j->table + (size_t)j->ids[i] * j->row_bytes;
    float *o = j->out + i * D;
    if (j->dt == LH_DTYPE_F32) {
        j->ops->add(o, (const float *)row, D);
        return;
    }
    float stage[EMB_STAGE];
    for (int64_t s = 0; s < D; s += EMB_STAGE) {
        const int64_t m = D - s < EMB_STAGE ? D - s : EMB_STAGE;
        const void *src = row + (size_t)(s / j->block_elems * j->block_bytes);
        if (j->dt == LH_DTYPE_BF16)
            j->ops->bf16_to_f32(src, stage, m);
        else if (j->dt == LH_DTYPE_F16)
            j->ops->f16_to_f32(src, stage, m);
        else
            lh_cpu_dequant_row(j->dt, src, stage, m);
        j->ops->add(o + s, stage, m);
    }
}

lh_status lh_cpu_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                               int64_t n, lh_tensor *out)
{
    struct emb_add_job j = {ctx->ops, table->dtype, table->data, ids, out->data, table->shape[1],
                            0, 1, 1};
    if (n == 0 || j.D == 0)
        return LH_OK;
    lh_k_dtype_block(table->dtype, &j.block_elems, &j.block_bytes);
    j.row_bytes = (size_t)lh_k_dtype_bytes(table->dtype, j.D); /* whole blocks (dispatch) */
    lh_cpu_parallel(ctx, n, emb_add_row, &j);
    return LH_OK;
}
