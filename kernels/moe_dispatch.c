/* The public mixture-of-experts kernels (lh_k_moe_route, lh_k_scatter_add_rows; lh_kernels.h):
 * argument checks, then the CPU implementation (kernels/cpu/moe.c) or its CUDA twin
 * (kernels/cuda/moe.cu); a routed row holding inf or NaN is worded here, once for both. */
#include "dispatch_checks.h"

#include <inttypes.h>
#include <math.h>

LH_EXPORT lh_status lh_k_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                                   const lh_k_moe_route_params *p, int32_t *ids, float *weights)
{
    static const char fn[] = "lh_k_moe_route";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "logits", logits, 2, 2, LH_KD_F32));
    const int64_t T = logits->shape[0], E = logits->shape[1];
    if (bias) {
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "bias", bias, 1, 1, LH_KD_F32));
        if (bias->shape[0] != E)
            return lh_kerr(ctx, LH_E_USAGE, "%s: bias %s must be [%" PRId64 "] for logits %s", fn,
                           LH_KD_SH(bias), E, LH_KD_SH(logits));
    }
    if (!p)
        return lh_kerr(ctx, LH_E_USAGE, "%s: params is NULL", fn);
    if (E < 1 || E > LH_K_MOE_MAX_EXPERTS)
        return lh_kerr(ctx, LH_E_USAGE, "%s: logits %s: %" PRId64 " experts (1 to %d supported)",
                       fn, LH_KD_SH(logits), E, LH_K_MOE_MAX_EXPERTS);
    if (p->top_k < 1 || p->top_k > E)
        return lh_kerr(ctx, LH_E_USAGE, "%s: top_k %" PRId64 " must be in [1, %" PRId64 "]", fn,
                       p->top_k, E);
    if (p->scoring != LH_K_MOE_SOFTMAX && p->scoring != LH_K_MOE_SIGMOID)
        return lh_kerr(ctx, LH_E_USAGE, "%s: scoring %d is not a lh_k_moe_scoring", fn,
                       (int)p->scoring);
    if (p->n_group > 1) {
        if (E % p->n_group != 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: n_group %" PRId64 " does not divide the %" PRId64
                           " experts", fn, p->n_group, E);
        if (p->topk_group < 1 || p->topk_group > p->n_group)
            return lh_kerr(ctx, LH_E_USAGE, "%s: topk_group %" PRId64 " must be in [1, n_group %"
                           PRId64 "]", fn, p->topk_group, p->n_group);
        if (p->topk_group * (E / p->n_group) < p->top_k)
            return lh_kerr(ctx, LH_E_USAGE, "%s: top_k %" PRId64 " exceeds the %" PRId64
                           " experts of topk_group %" PRId64 " groups", fn, p->top_k,
                           p->topk_group * (E / p->n_group), p->topk_group);
        if (p->group_score != LH_K_MOE_GROUP_MAX && p->group_score != LH_K_MOE_GROUP_TOP2_SUM)
            return lh_kerr(ctx, LH_E_USAGE, "%s: group_score %d is not a lh_k_moe_group_score", fn,
                           (int)p->group_score);
        if (p->group_score == LH_K_MOE_GROUP_TOP2_SUM && E / p->n_group < 2)
            return lh_kerr(ctx, LH_E_USAGE, "%s: a top-2 group score needs 2 experts per group, "
                           "not %" PRId64, fn, E / p->n_group);
    } else if (p->n_group < 0) {
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_group %" PRId64 " is negative", fn, p->n_group);
    }
    if (!isfinite(p->renorm_eps) || p->renorm_eps < 0 || !isfinite(p->scale) || p->scale < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: renorm_eps %g and scale %g must be finite and >= 0",
                       fn, (double)p->renorm_eps, (double)p->scale);
    if (T > 0 && (!ids || !weights))
        return lh_kerr(ctx, LH_E_USAGE, "%s: ids or weights is NULL", fn);
    int64_t first = -1, n_bad = 0;
    const lh_status st = LH_KD_ON_DEVICE(
        ctx, LH_CUDA(moe_route)(ctx, logits, bias, p, ids, weights, &first, &n_bad),
        lh_cpu_moe_route(ctx, logits, bias, p, ids, weights, &first, &n_bad));
    if (st != LH_OK)
        return st;
    if (n_bad)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: row %" PRId64 " of logits %s holds inf or NaN (%" PRId64 " such rows); "
                       "no expert can be chosen for it",
                       fn, first, LH_KD_SH(logits), n_bad);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                          const float *scales, lh_tensor *dst)
{
    static const char fn[] = "lh_k_scatter_add_rows";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "src", src, 2, 2, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "dst", dst, 2, 2, LH_KD_F32));
    const int64_t n = src->shape[0], R = dst->shape[0];
    if (dst->shape[1] != src->shape[1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s and src %s disagree on the row width", fn,
                       LH_KD_SH(dst), LH_KD_SH(src));
    if (n > 0 && !rows)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rows is NULL (n %" PRId64 ")", fn, n);
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= R)
            return lh_kerr(ctx, LH_E_USAGE, "%s: rows[%" PRId64 "] = %" PRId64
                           " is outside dst %s", fn, i, rows[i], LH_KD_SH(dst));
    if (lh_kd_overlaps(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst overlaps src", fn);
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(scatter_add_rows)(ctx, src, rows, scales, dst),
                           lh_cpu_scatter_add_rows(ctx, src, rows, scales, dst));
}
