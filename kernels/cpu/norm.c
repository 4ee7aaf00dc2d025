/* RMSNorm and fused residual-add + RMSNorm, as Hugging Face computes them in float32:
 *   var = mean(h^2); h = h * rsqrt(var + eps); out = (w + offset) * h
 * where rsqrt is 1 / sqrt (torch's CPU rsqrt) and, for Gemma-style norms, (1 + w) is formed
 * first in float32. Rows are the last dimension; one row per task. */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>

struct norm_job {
    const lh_cpu_ops *ops;
    float *residual; /* NULL: plain RMSNorm */
    const float *x;
    const float *wf; /* w + offset in f32 */
    float *out;
    int64_t D;
    float eps;
};

static void norm_row(int64_t r, int tid, void *user)
{
    (void)tid;
    const struct norm_job *j = user;
    const int64_t D = j->D;
    const float *src = j->x + r * D;
    if (j->residual) {
        float *res = j->residual + r * D;
        j->ops->add(res, src, D); /* residual += x (reads x before out, which may alias it) */
        src = res;
    }
    float var = j->ops->sumsq(src, D) / (float)D;
    float rs = 1.0f / sqrtf(var + j->eps);
    j->ops->norm_apply(j->out + r * D, src, rs, j->wf, D);
}

lh_status lh_cpu_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x, const lh_tensor *w,
                         float eps, float offset, lh_tensor *out)
{
    const int64_t D = x->shape[x->ndim - 1];
    const int64_t rows = D ? lh_cpu_numel(x) / D : 0;
    if (rows == 0 || D == 0)
        return LH_OK;
    float *owned = NULL;
    const float *wf = w->data;
    if (w->dtype != LH_DTYPE_F32 || offset != 0.0f) {
        owned = malloc((size_t)D * sizeof(float));
        if (!owned)
            return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%lld floats for the weight)",
                           residual ? "lh_k_add_rmsnorm" : "lh_k_rmsnorm", (long long)D);
        if (w->dtype == LH_DTYPE_BF16)
            ctx->ops->bf16_to_f32(w->data, owned, D);
        else if (w->dtype == LH_DTYPE_F16)
            ctx->ops->f16_to_f32(w->data, owned, D);
        else
            memcpy(owned, w->data, (size_t)D * sizeof(float));
        if (offset != 0.0f)
            for (int64_t i = 0; i < D; i++)
                owned[i] = owned[i] + offset;
        wf = owned;
    }
    struct norm_job j = {ctx->ops, residual ? residual->data : NULL, x->data, wf, out->data, D, eps};
    lh_cpu_parallel(ctx, rows, norm_row, &j);
    free(owned);
    return LH_OK;
}
