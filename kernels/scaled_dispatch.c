/* The public kernels of weights with separate scale tensors (lh_k_matmul_scaled,
 * lh_k_dequantize_scaled, lh_k_quantize_scaled; lh_kernels.h): argument checks, then the CPU
 * implementation (kernels/cpu/scaled.c, scaled_quant.c). A CUDA context is refused after the
 * checks: there is no CUDA twin yet, and saying so beats a silent host round trip. */
#include "dispatch_checks.h"
#include "cpu/scaled.h"

#include <inttypes.h>

#define SCALED_W ((1u << LH_DTYPE_INT8) | (1u << LH_DTYPE_INT4) | (1u << LH_DTYPE_FP8_E4M3))
#define SCALED_S ((1u << LH_DTYPE_F32) | (1u << LH_DTYPE_F16))

/* The weight / scale pair: w [N, K] int8, int4 (K even) or fp8; scale f32 or f16
 * [ceil(N / br), ceil(K / bc)]; br, bc >= 1. `wname` is how the caller calls the weight. */
static lh_status check_pair(lh_kctx *ctx, const char *fn, const char *wname, const lh_tensor *w,
                            const lh_tensor *scale, int64_t br, int64_t bc)
{
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, wname, w, 2, 2, SCALED_W));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "scale", scale, 2, 2, SCALED_S));
    if (br < 1 || bc < 1)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: block_rows %" PRId64 " and block_cols %" PRId64 " must both be >= 1",
                       fn, br, bc);
    const int64_t N = w->shape[0], K = w->shape[1];
    if (w->dtype == LH_DTYPE_INT4 && K % 2 != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: %s int4 %s: K %" PRId64 " must be even (two values per byte, rows of "
                       "whole bytes)",
                       fn, wname, LH_KD_SH(w), K);
    const int64_t sr = lh_scaled_blocks(N, br), sc = lh_scaled_blocks(K, bc);
    if (scale->shape[0] != sr || scale->shape[1] != sc)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: scale %s must be [%" PRId64 ", %" PRId64 "] for %s %s with %" PRId64
                       " x %" PRId64 " blocks",
                       fn, LH_KD_SH(scale), sr, sc, wname, LH_KD_SH(w), br, bc);
    return LH_OK;
}

static lh_status refuse_cuda(lh_kctx *ctx, const char *fn, const lh_tensor *w)
{
    return lh_kerr(ctx, LH_E_UNSUPPORTED,
                   "%s: %s weights with scale tensors on cuda:%d are not implemented yet; "
                   "dequantize them on the CPU (lh_k_dequantize_scaled) and upload the result, or "
                   "run on the CPU",
                   fn, lh_kd_dt_name(w->dtype), ctx->device.index);
}

LH_EXPORT lh_status lh_k_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                       const lh_tensor *scale, int64_t block_rows,
                                       int64_t block_cols, const lh_tensor *bias, lh_tensor *y)
{
    static const char fn[] = "lh_k_matmul_scaled";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 2, 2, LH_KD_F32));
    LH_KD_CHECK(check_pair(ctx, fn, "w", w, scale, block_rows, block_cols));
    if (bias)
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "bias", bias, 1, 1, LH_KD_FLOAT));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "y", y, 2, 2, LH_KD_F32));
    if (x->shape[1] != w->shape[1])
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: x %s and w %s disagree on K (%" PRId64 " vs %" PRId64 ")", fn,
                       LH_KD_SH(x), LH_KD_SH(w), x->shape[1], w->shape[1]);
    if (y->shape[0] != x->shape[0] || y->shape[1] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: y %s must be [%" PRId64 ", %" PRId64 "] for x %s and w %s", fn,
                       LH_KD_SH(y), x->shape[0], w->shape[0], LH_KD_SH(x), LH_KD_SH(w));
    if (bias && bias->shape[0] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE, "%s: bias %s must be [%" PRId64 "] for w %s", fn,
                       LH_KD_SH(bias), w->shape[0], LH_KD_SH(w));
    if (lh_kd_overlaps(y, x) || lh_kd_overlaps(y, w) || lh_kd_overlaps(y, scale) ||
        lh_kd_overlaps(y, bias))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s overlaps an input", fn, LH_KD_SH(y));
    if (ctx->cuda)
        return refuse_cuda(ctx, fn, w);
    return lh_cpu_matmul_scaled(ctx, x, w, scale, block_rows, block_cols, bias, y);
}

LH_EXPORT lh_status lh_k_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                           int64_t block_rows, int64_t block_cols, lh_tensor *dst)
{
    static const char fn[] = "lh_k_dequantize_scaled";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(check_pair(ctx, fn, "w", w, scale, block_rows, block_cols));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "dst", dst, 2, 2, LH_KD_F32));
    if (!lh_kd_same_shape(w, dst))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s must have the shape of w %s", fn,
                       LH_KD_SH(dst), LH_KD_SH(w));
    if (lh_kd_overlaps(dst, w) || lh_kd_overlaps(dst, scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s overlaps w or scale", fn, LH_KD_SH(dst));
    if (ctx->cuda)
        return refuse_cuda(ctx, fn, w);
    return lh_cpu_dequantize_scaled(ctx, w, scale, block_rows, block_cols, dst);
}

LH_EXPORT lh_status lh_k_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                         int64_t block_cols, lh_tensor *w, lh_tensor *scale)
{
    static const char fn[] = "lh_k_quantize_scaled";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "src", src, 2, 2, LH_KD_FLOAT));
    LH_KD_CHECK(check_pair(ctx, fn, "w", w, scale, block_rows, block_cols));
    if (!lh_kd_same_shape(w, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: w %s must have the shape of src %s", fn,
                       LH_KD_SH(w), LH_KD_SH(src));
    if (lh_kd_overlaps(w, src) || lh_kd_overlaps(scale, src) || lh_kd_overlaps(w, scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src, w and scale must not overlap one another", fn);
    if (ctx->cuda)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: quantizing to %s on cuda:%d is not implemented yet; quantize on the "
                       "CPU and upload the result",
                       fn, lh_kd_dt_name(w->dtype), ctx->device.index);
    return lh_cpu_quantize_scaled(ctx, src, block_rows, block_cols, w, scale);
}
