/* Residual add (y += x) and the additive embedding lookup (out[i] += table[ids[i]], learned
 * position embeddings). Both are one f32 addition per element, so every ISA and thread count
 * gives the same bits. */
#include "cpu_kernels.h"

#define ADD_CHUNK 16384 /* elements per task */
#define EMB_STAGE 1024  /* floats of a bf16 / f16 table row widened at a time */

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
    const void *table;
    const int32_t *ids;
    float *out;
    int64_t D;
};

static void emb_add_row(int64_t i, int tid, void *user)
{
    (void)tid;
    const struct emb_add_job *j = user;
    const int64_t D = j->D, base = (int64_t)j->ids[i] * D;
    float *o = j->out + i * D;
    if (j->dt == LH_DTYPE_F32) {
        j->ops->add(o, (const float *)j->table + base, D);
        return;
    }
    const uint16_t *row = (const uint16_t *)j->table + base;
    float stage[EMB_STAGE];
    for (int64_t s = 0; s < D; s += EMB_STAGE) {
        const int64_t m = D - s < EMB_STAGE ? D - s : EMB_STAGE;
        if (j->dt == LH_DTYPE_BF16)
            j->ops->bf16_to_f32(row + s, stage, m);
        else
            j->ops->f16_to_f32(row + s, stage, m);
        j->ops->add(o + s, stage, m);
    }
}

lh_status lh_cpu_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                               int64_t n, lh_tensor *out)
{
    struct emb_add_job j = {ctx->ops, table->dtype, table->data, ids, out->data, table->shape[1]};
    if (n == 0 || j.D == 0)
        return LH_OK;
    lh_cpu_parallel(ctx, n, emb_add_row, &j);
    return LH_OK;
}
