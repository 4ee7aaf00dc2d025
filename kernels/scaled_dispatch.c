/* The public kernels of weights with separate scale tensors (lh_k_matmul_scaled,
 * lh_k_dequantize_scaled, lh_k_quantize_scaled; lh_kernels.h): argument checks, then the CPU
 * implementation (kernels/cpu/scaled.c, scaled_quant.c) or its CUDA twin (kernels/cuda/
 * scaled.cu). A refused quantization source is worded here, once for both. */
#include "dispatch_checks.h"
#include "cpu/scaled.h"

#include <inttypes.h>

#define SCALED_W (LH_KD_INTW | (1u << LH_DTYPE_FP8_E4M3))
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

/* The error for a source that lh_k_quantize_scaled refuses (f from either device). */
static lh_status quant_failed(lh_kctx *ctx, const char *fn, const lh_tensor *src, int64_t br,
                              int64_t bc, const lh_tensor *w, const lh_scaled_qfail *f)
{
    const int64_t K = src->shape[1], N = src->shape[0];
    if (f->bad_elem >= 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: src %s row %" PRId64 " col %" PRId64 " is %s", fn,
                       lh_kd_dt_name(src->dtype), f->bad_elem / K, f->bad_elem % K,
                       f->bad_nan ? "nan" : "inf");
    const int64_t scols = lh_scaled_blocks(K, bc);
    const int64_t rb = f->bad_block / scols, c = f->bad_block % scols;
    const int64_t r0 = rb * br, r1 = N - r0 < br ? N : r0 + br;
    const int64_t k0 = c * bc, k1 = K - k0 < bc ? K : k0 + bc;
    const float qmax = w->dtype == LH_DTYPE_INT8 ? 127.0f : w->dtype == LH_DTYPE_INT4 ? 7.0f : 448.0f;
    return lh_kerr(ctx, LH_E_USAGE,
                   "%s: the block of rows [%" PRId64 ", %" PRId64 ") cols [%" PRId64 ", %" PRId64
                   ") has absmax %g: its scale absmax / %g = %g overflows f16 (largest 65504); "
                   "use an f32 scale",
                   fn, r0, r1, k0, k1, (double)f->bad_amax, (double)qmax,
                   (double)(f->bad_amax / qmax));
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
    return LH_KD_ON_DEVICE(
        ctx, LH_CUDA(matmul_scaled)(ctx, x, w, scale, block_rows, block_cols, bias, y),
        lh_cpu_matmul_scaled(ctx, x, w, scale, block_rows, block_cols, bias, y));
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
    return LH_KD_ON_DEVICE(
        ctx, LH_CUDA(dequantize_scaled)(ctx, w, scale, block_rows, block_cols, dst),
        lh_cpu_dequantize_scaled(ctx, w, scale, block_rows, block_cols, dst));
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
    lh_scaled_qfail f = {.bad_elem = -1, .bad_block = -1};
    const lh_status st = LH_KD_ON_DEVICE(
        ctx, LH_CUDA(quantize_scaled)(ctx, src, block_rows, block_cols, w, scale, &f),
        lh_cpu_quantize_scaled(ctx, src, block_rows, block_cols, w, scale, &f));
    if (st != LH_OK)
        return st;
    if (f.bad_elem >= 0 || f.bad_block >= 0)
        return quant_failed(ctx, fn, src, block_rows, block_cols, w, &f);
    return LH_OK;
}
