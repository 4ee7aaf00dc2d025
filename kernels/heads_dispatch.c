/* The public per-head linear maps and strided copies (lh_k_matmul_heads, lh_k_copy_view;
 * lh_kernels.h): argument checks, then the CPU implementation (kernels/cpu/heads.c) or its
 * CUDA twin (kernels/cuda/heads.cu).
 *
 * Unlike the other kernels these take views: padded rows, heads that are row blocks of a
 * fused weight, broadcasts (stride 0). What the implementations may rely on once the checks
 * pass: every stride of a dim of size > 1 is >= 0 and the last one 1; no two elements of the
 * output share an address; the output's byte span is disjoint from every input's span (a
 * conservative test: two interleaved views of one buffer are refused even where no element
 * is shared, since deciding that exactly is not worth its cost here). */
#include "dispatch_checks.h"

#include <inttypes.h>

/* Elements from the view's first to its last element, inclusive; 0 for an empty view. */
static int64_t view_span(const lh_tensor *t)
{
    int64_t span = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0)
            return 0;
        span += (t->shape[i] - 1) * t->stride[i];
    }
    return span;
}

/* Whether the byte spans of two checked views intersect (an empty view touches nothing). */
static bool spans_overlap(const lh_tensor *a, const lh_tensor *b)
{
    const int64_t na = lh_k_dtype_bytes(a->dtype, view_span(a));
    const int64_t nb = lh_k_dtype_bytes(b->dtype, view_span(b));
    if (na <= 0 || nb <= 0)
        return false;
    const uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
    return pa < pb + (uintptr_t)nb && pb < pa + (uintptr_t)na;
}

/* An output view's elements are distinct addresses: its dims of size > 1, taken by growing
 * stride, each step at least the span of the ones inside it (starting from the contiguous
 * last dim). That is the lh_kernels.h rule (stride[i] >= shape[i + 1] * stride[i + 1]) for
 * row-major views and also admits permuted ones (a [T, H, N] view of a head-major buffer),
 * which are just as free of overlap. */
static lh_status check_out_rows(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t)
{
    if (view_span(t) == 0)
        return LH_OK;
    const int last = t->ndim - 1;
    int dims[LH_MAX_DIMS], nd = 0;
    for (int i = 0; i < last; i++)
        if (t->shape[i] > 1) {
            int j = nd++; /* insertion by stride; a tie is an overlap, found below either way */
            while (j > 0 && t->stride[dims[j - 1]] > t->stride[i]) {
                dims[j] = dims[j - 1];
                j--;
            }
            dims[j] = i;
        }
    int64_t inner = t->shape[last]; /* the span of the dims inside the next one */
    for (int j = 0; j < nd; j++) {
        const int d = dims[j];
        if (t->stride[d] < inner)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s %s with strides %s overlaps itself: stride[%d] = %" PRId64
                           " is below the %" PRId64 " elements the dims inside it span (an "
                           "output may not broadcast or overlap its rows)",
                           fn, arg, LH_KD_SH(t), LH_KD_ST(t), d, t->stride[d], inner);
        inner += (t->shape[d] - 1) * t->stride[d];
    }
    return LH_OK;
}

/* ---- lh_k_matmul_heads ---------------------------------------------------------------------- */

/* What lh_k_matmul_heads' w may not be, each with its way out. */
static lh_status w_dtype_error(lh_kctx *ctx, const char *fn, const lh_tensor *w)
{
    const char *how = "convert it to f32, bf16 or f16 first";
    if (lh_k_dtype_block(w->dtype, NULL, NULL))
        how = "dequantize it first (lh_k_dequantize)";
    else if (w->dtype == LH_DTYPE_INT8 || w->dtype == LH_DTYPE_INT4 ||
             w->dtype == LH_DTYPE_FP8_E4M3)
        how = "a weight with separate scales is dequantized first (lh_k_dequantize_scaled)";
    return lh_kerr(ctx, LH_E_UNSUPPORTED, "%s: w %s has dtype %s; supported: f32, bf16 or f16 (%s)",
                   fn, LH_KD_SH(w), lh_kd_dt_name(w->dtype), how);
}

LH_EXPORT lh_status lh_k_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                      bool w_kn, lh_tensor *y)
{
    static const char fn[] = "lh_k_matmul_heads";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_view(ctx, fn, "x", x, 3, 3, LH_KD_F32));
    /* any dtype here; the set is checked next, with a message that says what to do */
    LH_KD_CHECK(lh_kd_check_view(ctx, fn, "w", w, 3, 3, ~0u));
    if (!(LH_KD_FLOAT & (1u << w->dtype)))
        return w_dtype_error(ctx, fn, w);
    LH_KD_CHECK(lh_kd_check_view(ctx, fn, "y", y, 3, 3, LH_KD_F32));
    const int64_t T = x->shape[0], H = x->shape[1], K = x->shape[2];
    const int64_t wK = w_kn ? w->shape[1] : w->shape[2], N = w_kn ? w->shape[2] : w->shape[1];
    const char *wlay = w_kn ? "[H, K, N] (w_kn true)" : "[H, N, K] (w_kn false)";
    if (w->shape[0] != H)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: x %s has %" PRId64 " heads but w %s, %s, has %" PRId64, fn,
                       LH_KD_SH(x), H, LH_KD_SH(w), wlay, w->shape[0]);
    if (wK != K)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: x %s and w %s, %s, disagree on K (%" PRId64 " vs %" PRId64 ")", fn,
                       LH_KD_SH(x), LH_KD_SH(w), wlay, K, wK);
    if (y->shape[0] != T || y->shape[1] != H || y->shape[2] != N)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: y %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "] for x %s and w "
                       "%s, %s",
                       fn, LH_KD_SH(y), T, H, N, LH_KD_SH(x), LH_KD_SH(w), wlay);
    /* a weight's rows lie one after another within a head (a fused projection's row block) */
    if (w->shape[1] > 1 && w->stride[1] < w->shape[2])
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: w %s has strides %s; stride[1] must be at least its last dim (%" PRId64
                       ")",
                       fn, LH_KD_SH(w), LH_KD_ST(w), w->shape[2]);
    LH_KD_CHECK(check_out_rows(ctx, fn, "y", y));
    if (spans_overlap(y, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s overlaps x %s (their spans share bytes)", fn,
                       LH_KD_SH(y), LH_KD_SH(x));
    if (spans_overlap(y, w))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s overlaps w %s (their spans share bytes)", fn,
                       LH_KD_SH(y), LH_KD_SH(w));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(matmul_heads)(ctx, x, w, w_kn, y),
                           lh_cpu_matmul_heads(ctx, x, w, w_kn, y));
}

/* ---- lh_k_copy_view ------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src)
{
    static const char fn[] = "lh_k_copy_view";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    /* lh_kernels.h makes a dtype other than f32 a usage error here (a copy has no dtype it
     * could add), not the "unsupported" of the kernels with dtype sets */
    const lh_tensor *both[2] = {dst, src};
    for (int i = 0; i < 2; i++) {
        const char *arg = i ? "src" : "dst";
        if (both[i] && both[i]->dtype != LH_DTYPE_F32)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has dtype %s; both views must be f32", fn,
                           arg, LH_KD_SH(both[i]), lh_kd_dt_name(both[i]->dtype));
        LH_KD_CHECK(lh_kd_check_view(ctx, fn, arg, both[i], 1, LH_MAX_DIMS, LH_KD_F32));
    }
    if (!lh_kd_same_shape(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s and src %s must have the same shape", fn,
                       LH_KD_SH(dst), LH_KD_SH(src));
    LH_KD_CHECK(check_out_rows(ctx, fn, "dst", dst));
    if (spans_overlap(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s overlaps src %s (their spans share bytes)", fn,
                       LH_KD_SH(dst), LH_KD_SH(src));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(copy_view)(ctx, dst, src), lh_cpu_copy_view(ctx, dst, src));
}
