/* RMSNorm, fused residual-add + RMSNorm and LayerNorm (at the end). RMSNorm as Hugging Face
 * computes it in float32:
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

/* LayerNorm as torch.nn.LayerNorm computes it in float32 (population variance):
 *   mean = sum(x) / D; c = x - mean; var = sum(c^2) / D; r = 1 / sqrt(var + eps);
 *   out = (c * r) * w + b
 * the mean first (four running f32 sums, fixed order), then the centred sum of squares of the
 * row (the ISA's sumsq); c lives in the thread's scratch, so out may alias x. One row per task. */
struct ln_job {
    const lh_cpu_ops *ops;
    const float *x;
    const float *wf, *bf; /* f32 copies (or the tensors themselves); bf NULL: no bias */
    float *out;
    float *scratch;       /* per thread, stride floats apart */
    size_t stride;
    int64_t D;
    float eps;
};

static float row_sum(const float *x, int64_t n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

static void ln_row(int64_t r, int tid, void *user)
{
    const struct ln_job *j = user;
    const int64_t D = j->D;
    const float *src = j->x + r * D;
    float *c = j->scratch + (size_t)tid * j->stride;
    float *dst = j->out + r * D;
    const float mean = row_sum(src, D) / (float)D;
    for (int64_t i = 0; i < D; i++)
        c[i] = src[i] - mean;
    const float var = j->ops->sumsq(c, D) / (float)D;
    const float rs = 1.0f / sqrtf(var + j->eps);
    j->ops->norm_apply(dst, c, rs, j->wf, D); /* (c * r) * w; src is not read any more */
    if (j->bf)
        j->ops->add(dst, j->bf, D);
}

/* dst[0:D] = src (dtype dt) as f32 */
static void widen(const lh_cpu_ops *ops, lh_dtype dt, const void *src, float *dst, int64_t D)
{
    if (dt == LH_DTYPE_BF16)
        ops->bf16_to_f32(src, dst, D);
    else if (dt == LH_DTYPE_F16)
        ops->f16_to_f32(src, dst, D);
    else
        memcpy(dst, src, (size_t)D * sizeof(float));
}

lh_status lh_cpu_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                           const lh_tensor *b, float eps, lh_tensor *out)
{
    static const char fn[] = "lh_k_layernorm";
    const int64_t D = x->shape[x->ndim - 1];
    const int64_t rows = D ? lh_cpu_numel(x) / D : 0;
    if (rows == 0 || D == 0)
        return LH_OK;
    const bool wide_w = w->dtype != LH_DTYPE_F32, wide_b = b && b->dtype != LH_DTYPE_F32;
    const float *wf = w->data, *bf = b ? b->data : NULL;
    if (wide_w || wide_b) {
        float *ar = lh_cpu_arena(ctx, (size_t)D * 2 * sizeof(float));
        if (!ar)
            return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%lld floats for w and b)", fn,
                           (long long)(2 * D));
        if (wide_w) {
            widen(ctx->ops, w->dtype, w->data, ar, D);
            wf = ar;
        }
        if (wide_b) {
            widen(ctx->ops, b->dtype, b->data, ar + D, D);
            bf = ar + D;
        }
    }
    float *scratch = lh_cpu_scratch(ctx, (size_t)D);
    if (!scratch)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%lld floats of scratch per thread)",
                       fn, (long long)D);
    struct ln_job j = {ctx->ops, x->data, wf, bf, out->data, scratch, lh_cpu_scratch_stride(ctx),
                       D, eps};
    lh_cpu_parallel(ctx, rows, ln_row, &j);
    return LH_OK;
}
