/* The public tensor kernels: device-independent argument checks, then the implementation for
 * the context's device (LH_KD_ON_DEVICE: kernels/cpu or kernels/cuda). A tensor on another
 * device than the context's is refused with LH_E_USAGE naming both.
 *
 * Every tensor must be contiguous row-major (stride[ndim-1] == 1 and each stride the product of
 * the later dims; dims of size 1 are not checked): views with padded rows are not supported. */
#include "dispatch_checks.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

static size_t byte_size(const lh_tensor *t)
{
    int64_t b = lh_k_dtype_bytes(t->dtype, lh_cpu_numel(t));
    return b > 0 ? (size_t)b : 0;
}

/* a and b may be the same buffer with the same layout, or disjoint; nothing in between. */
static bool same_or_disjoint(const lh_tensor *a, const lh_tensor *b)
{
    if (!lh_kd_overlaps(a, b))
        return true;
    return a->data == b->data && a->dtype == b->dtype && byte_size(a) == byte_size(b);
}


/* ---- matmul --------------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *bias, lh_tensor *y)
{
    static const char fn[] = "lh_k_matmul";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 2, 2, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "w", w, 2, 2, LH_KD_FLOAT | LH_KD_BLOCK));
    if (bias)
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "bias", bias, 1, 1, LH_KD_FLOAT));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "y", y, 2, 2, LH_KD_F32));
    if (x->shape[1] != w->shape[1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s and w %s disagree on K (%" PRId64 " vs %" PRId64 ")",
                       fn, LH_KD_SH(x), LH_KD_SH(w), x->shape[1], w->shape[1]);
    if (y->shape[0] != x->shape[0] || y->shape[1] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s must be [%" PRId64 ", %" PRId64 "] for x %s and w %s",
                       fn, LH_KD_SH(y), x->shape[0], w->shape[0], LH_KD_SH(x), LH_KD_SH(w));
    if (bias && bias->shape[0] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE, "%s: bias %s must be [%" PRId64 "] for w %s", fn, LH_KD_SH(bias),
                       w->shape[0], LH_KD_SH(w));
    int64_t be = 1;
    const bool blocked = lh_k_dtype_block(w->dtype, &be, NULL);
    if (blocked && w->shape[1] % be != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: w %s %s: K %" PRId64 " is not a multiple of the %s block (%" PRId64
                       " elements)",
                       fn, lh_kd_dt_name(w->dtype), LH_KD_SH(w), w->shape[1],
                       lh_kd_dt_name(w->dtype), be);
    if (lh_kd_overlaps(y, x) || lh_kd_overlaps(y, w) || lh_kd_overlaps(y, bias))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s overlaps an input", fn, LH_KD_SH(y));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(matmul)(ctx, x, w, bias, y),
                           lh_cpu_matmul(ctx, x, w, bias, y));
}

/* ---- embedding ------------------------------------------------------------------------------ */

/* table [V, D] f32/bf16/f16 or a block type (D whole blocks), out [n, D] f32
 * disjoint from it, every id in [0, V). */
static lh_status check_embedding(lh_kctx *ctx, const char *fn, const lh_tensor *table,
                                 const int32_t *ids, int64_t n, const lh_tensor *out)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "table", table, 2, 2, LH_KD_FLOAT | LH_KD_BLOCK));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 2, 2, LH_KD_F32));
    int64_t be = 1;
    const bool blocked = lh_k_dtype_block(table->dtype, &be, NULL);
    /* before the overlap check: a row of partial blocks has no byte size */
    if (blocked && table->shape[1] % be != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: table %s %s: D %" PRId64 " is not a multiple of the %s block (%" PRId64
                       " elements)",
                       fn, lh_kd_dt_name(table->dtype), LH_KD_SH(table), table->shape[1],
                       lh_kd_dt_name(table->dtype), be);
    if (n < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n %" PRId64 " is negative", fn, n);
    if (n > 0 && !ids)
        return lh_kerr(ctx, LH_E_USAGE, "%s: ids is NULL (n %" PRId64 ")", fn, n);
    if (out->shape[0] != n || out->shape[1] != table->shape[1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must be [%" PRId64 ", %" PRId64 "] for table %s",
                       fn, LH_KD_SH(out), n, table->shape[1], LH_KD_SH(table));
    const int64_t V = table->shape[0];
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: ids[%" PRId64 "] = %" PRId32 " is outside [0, %" PRId64 ") (table %s)",
                           fn, i, ids[i], V, LH_KD_SH(table));
    if (lh_kd_overlaps(out, table))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps table", fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                   int64_t n, lh_tensor *out)
{
    static const char fn[] = "lh_k_embedding";
    LH_KD_CHECK(check_embedding(ctx, fn, table, ids, n, out));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(embedding)(ctx, table, ids, n, out),
                           lh_cpu_embedding(ctx, table, ids, n, out));
}

LH_EXPORT lh_status lh_k_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                       int64_t n, lh_tensor *out)
{
    static const char fn[] = "lh_k_embedding_add";
    LH_KD_CHECK(check_embedding(ctx, fn, table, ids, n, out));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(embedding_add)(ctx, table, ids, n, out),
                           lh_cpu_embedding_add(ctx, table, ids, n, out));
}

/* ---- norms ---------------------------------------------------------------------------------- */

static lh_status check_norm(lh_kctx *ctx, const char *fn, const lh_tensor *x, const lh_tensor *w,
                            float eps, float offset, const lh_tensor *out)
{
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "w", w, 1, 1, LH_KD_FLOAT));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 1, LH_MAX_DIMS, LH_KD_F32));
    if (w->shape[0] != x->shape[x->ndim - 1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: w %s must match the last dim of x %s", fn, LH_KD_SH(w), LH_KD_SH(x));
    if (!lh_kd_same_shape(out, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must have the shape of x %s", fn, LH_KD_SH(out), LH_KD_SH(x));
    if (!(eps >= 0.0f) || !isfinite(eps))
        return lh_kerr(ctx, LH_E_USAGE, "%s: eps %g must be finite and >= 0", fn, (double)eps);
    if (!isfinite(offset))
        return lh_kerr(ctx, LH_E_USAGE, "%s: offset %g must be finite", fn, (double)offset);
    if (!same_or_disjoint(out, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out partially overlaps x (only exact aliasing is allowed)",
                       fn);
    if (lh_kd_overlaps(out, w))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps w", fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_rmsnorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, float eps,
                                 float offset, lh_tensor *out)
{
    static const char fn[] = "lh_k_rmsnorm";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(check_norm(ctx, fn, x, w, eps, offset, out));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(rmsnorm)(ctx, NULL, x, w, eps, offset, out),
                           lh_cpu_rmsnorm(ctx, NULL, x, w, eps, offset, out));
}

LH_EXPORT lh_status lh_k_add_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x,
                                     const lh_tensor *w, float eps, float offset, lh_tensor *out)
{
    static const char fn[] = "lh_k_add_rmsnorm";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "residual", residual, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(check_norm(ctx, fn, x, w, eps, offset, out));
    if (!lh_kd_same_shape(residual, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: residual %s must have the shape of x %s", fn, LH_KD_SH(residual),
                       LH_KD_SH(x));
    if (lh_kd_overlaps(residual, x) || lh_kd_overlaps(residual, w) || !same_or_disjoint(residual, out))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: residual overlaps x or w, or partially overlaps out", fn);
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(rmsnorm)(ctx, residual, x, w, eps, offset, out),
                           lh_cpu_rmsnorm(ctx, residual, x, w, eps, offset, out));
}

LH_EXPORT lh_status lh_k_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                   const lh_tensor *b, float eps, lh_tensor *out)
{
    static const char fn[] = "lh_k_layernorm";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(check_norm(ctx, fn, x, w, eps, 0.0f, out));
    if (b) {
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "b", b, 1, 1, LH_KD_FLOAT));
        if (b->shape[0] != x->shape[x->ndim - 1])
            return lh_kerr(ctx, LH_E_USAGE, "%s: b %s must match the last dim of x %s", fn,
                           LH_KD_SH(b), LH_KD_SH(x));
        if (lh_kd_overlaps(out, b))
            return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps b", fn);
    }
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(layernorm)(ctx, x, w, b, eps, out),
                           lh_cpu_layernorm(ctx, x, w, b, eps, out));
}

/* ---- activations ---------------------------------------------------------------------------- */

/* The gated activations: gate, up and out f32 of one shape, out equal to or disjoint from each. */
static lh_status check_gated(lh_kctx *ctx, const char *fn, const lh_tensor *gate,
                             const lh_tensor *up, const lh_tensor *out)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "gate", gate, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "up", up, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 1, LH_MAX_DIMS, LH_KD_F32));
    if (!lh_kd_same_shape(gate, up) || !lh_kd_same_shape(gate, out))
        return lh_kerr(ctx, LH_E_USAGE, "%s: gate %s, up %s and out %s must have the same shape", fn,
                       LH_KD_SH(gate), LH_KD_SH(up), LH_KD_SH(out));
    if (!same_or_disjoint(out, gate) || !same_or_disjoint(out, up))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: out partially overlaps gate or up (only exact aliasing is allowed)", fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                  lh_tensor *out)
{
    static const char fn[] = "lh_k_silu_mul";
    LH_KD_CHECK(check_gated(ctx, fn, gate, up, out));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(silu_mul)(ctx, gate, up, out),
                           lh_cpu_silu_mul(ctx, gate, up, out));
}

LH_EXPORT lh_status lh_k_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                       lh_tensor *out)
{
    static const char fn[] = "lh_k_gelu_tanh_mul";
    LH_KD_CHECK(check_gated(ctx, fn, gate, up, out));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(gelu_tanh_mul)(ctx, gate, up, out),
                           lh_cpu_gelu_tanh_mul(ctx, gate, up, out));
}

LH_EXPORT lh_status lh_k_scale(lh_kctx *ctx, lh_tensor *x, float s)
{
    static const char fn[] = "lh_k_scale";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    if (!isfinite(s))
        return lh_kerr(ctx, LH_E_USAGE, "%s: s %g is not finite", fn, (double)s);
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(scale)(ctx, x, s), lh_cpu_scale(ctx, x, s));
}

/* The plain activations: x and out f32 of the same shape, out == x or disjoint. */
static lh_status check_unary(lh_kctx *ctx, const char *fn, const lh_tensor *x, const lh_tensor *out)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 1, LH_MAX_DIMS, LH_KD_F32));
    if (!lh_kd_same_shape(x, out))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must have the shape of x %s", fn, LH_KD_SH(out),
                       LH_KD_SH(x));
    if (!same_or_disjoint(out, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out partially overlaps x (only exact aliasing is allowed)",
                       fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    static const char fn[] = "lh_k_gelu";
    LH_KD_CHECK(check_unary(ctx, fn, x, out));
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(gelu)(ctx, x, out), lh_cpu_gelu(ctx, x, out));
}

LH_EXPORT lh_status lh_k_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    static const char fn[] = "lh_k_gelu_tanh";
    LH_KD_CHECK(check_unary(ctx, fn, x, out));
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(gelu_tanh)(ctx, x, out), lh_cpu_gelu_tanh(ctx, x, out));
}

LH_EXPORT lh_status lh_k_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                  lh_tensor *out)
{
    static const char fn[] = "lh_k_gelu_mul";
    LH_KD_CHECK(check_gated(ctx, fn, gate, up, out));
    if (lh_cpu_numel(gate) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(gelu_mul)(ctx, gate, up, out),
                           lh_cpu_gelu_mul(ctx, gate, up, out));
}

LH_EXPORT lh_status lh_k_softcap(lh_kctx *ctx, lh_tensor *x, float cap)
{
    static const char fn[] = "lh_k_softcap";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    if (!isfinite(cap) || !(cap > 0.0f))
        return lh_kerr(ctx, LH_E_USAGE, "%s: cap %g must be finite and > 0", fn, (double)cap);
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(softcap)(ctx, x, cap), lh_cpu_softcap(ctx, x, cap));
}

LH_EXPORT lh_status lh_k_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x)
{
    static const char fn[] = "lh_k_add";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "y", y, 1, LH_MAX_DIMS, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    if (!lh_kd_same_shape(y, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s and x %s must have the same shape", fn, LH_KD_SH(y),
                       LH_KD_SH(x));
    if (!same_or_disjoint(y, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y partially overlaps x (only exact aliasing is allowed)",
                       fn);
    if (lh_cpu_numel(y) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(add)(ctx, y, x), lh_cpu_add(ctx, y, x));
}

LH_EXPORT lh_status lh_k_softmax(lh_kctx *ctx, lh_tensor *x)
{
    static const char fn[] = "lh_k_softmax";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, LH_KD_F32));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(softmax)(ctx, x), lh_cpu_softmax(ctx, x));
}

LH_EXPORT lh_status lh_k_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out)
{
    static const char fn[] = "lh_k_argmax";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 1, 2, LH_KD_F32));
    const int64_t N = x->shape[x->ndim - 1];
    if (N == 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s has empty rows", fn, LH_KD_SH(x));
    if (N > INT32_MAX)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s: rows longer than INT32_MAX", fn, LH_KD_SH(x));
    if (!out && lh_cpu_numel(x) > 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: out is NULL", fn);
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(argmax)(ctx, x, out), lh_cpu_argmax(ctx, x, out));
}

LH_EXPORT lh_status lh_k_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    static const char fn[] = "lh_k_convert";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "src", src, 1, LH_MAX_DIMS, LH_KD_FLOAT));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "dst", dst, 1, LH_MAX_DIMS, LH_KD_FLOAT));
    if (!lh_kd_same_shape(src, dst))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src %s and dst %s must have the same shape", fn, LH_KD_SH(src),
                       LH_KD_SH(dst));
    if (lh_kd_overlaps(src, dst) && !(src->data == dst->data && src->dtype == dst->dtype))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src and dst overlap", fn);
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(convert)(ctx, src, dst), lh_cpu_convert(ctx, src, dst));
}

/* ---- dequantization ------------------------------------------------------------------------ */

LH_EXPORT lh_status lh_k_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    static const char fn[] = "lh_k_dequantize";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "src", src, 2, 2, LH_KD_FLOAT | LH_KD_BLOCK));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "dst", dst, 2, 2, LH_KD_F32));
    int64_t be = 1;
    lh_k_dtype_block(src->dtype, &be, NULL);
    if (src->shape[1] % be != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: src %s %s: cols %" PRId64 " is not a multiple of the %s block (%" PRId64
                       " elements)",
                       fn, lh_kd_dt_name(src->dtype), LH_KD_SH(src), src->shape[1],
                       lh_kd_dt_name(src->dtype), be);
    if (!lh_kd_same_shape(src, dst))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s must have the shape of src %s", fn, LH_KD_SH(dst),
                       LH_KD_SH(src));
    if (lh_kd_overlaps(src, dst))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src and dst overlap", fn);
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(dequantize)(ctx, src, dst), lh_cpu_dequantize(ctx, src, dst));
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                                    const int32_t *positions, int64_t seq_len)
{
    static const char fn[] = "lh_k_rope_apply";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    if (!rope || !rope->inv_freq || rope->rotary_dim < 2 || rope->rotary_dim % 2)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rope is NULL or not initialized by lh_k_rope_init", fn);
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "x", x, 3, 3, LH_KD_F32));
    if (x->shape[2] < rope->rotary_dim)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s has head_dim %" PRId64 " < rotary_dim %" PRId64, fn,
                       LH_KD_SH(x), x->shape[2], rope->rotary_dim);
    const int64_t T = x->shape[0];
    if (T > 0 && !positions)
        return lh_kerr(ctx, LH_E_USAGE, "%s: positions is NULL (x %s)", fn, LH_KD_SH(x));
    int64_t maxpos = -1;
    for (int64_t t = 0; t < T; t++) {
        if (positions[t] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: positions[%" PRId64 "] = %" PRId32 " is negative", fn,
                           t, positions[t]);
        if (positions[t] > maxpos)
            maxpos = positions[t];
    }
    /* dynamic and longrope tables depend on the sequence length, which covers every position */
    const bool by_length = rope->inv_freq_long ||
                           (rope->scaling.kind && !strcmp(rope->scaling.kind, "dynamic"));
    if (by_length && T > 0 && seq_len < maxpos + 1)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: %s RoPE needs seq_len >= max(positions) + 1 (seq_len %" PRId64
                       ", max position %" PRId64 ")",
                       fn, rope->inv_freq_long ? "longrope" : "dynamic", seq_len, maxpos);
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(rope_apply)(ctx, rope, x, positions, seq_len),
                           lh_cpu_rope_apply(ctx, rope, x, positions, seq_len));
}

/* ---- attention ------------------------------------------------------------------------------ */

/* The checks both attention entry points share: q [T, H, D], k [S, KVH, D], v [S, KVH, Dv],
 * out [T, H, Dv] f32, GQA grouping, a finite scale, a finite softcap >= 0, out disjoint from
 * the inputs. */
static lh_status check_attention(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                                 const lh_tensor *k, const lh_tensor *v, float scale,
                                 float softcap, const lh_tensor *out)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "q", q, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "k", k, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "v", v, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 3, 3, LH_KD_F32));
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    const int64_t S = k->shape[0], KVH = k->shape[1];
    if (k->shape[2] != D)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q %s and k %s disagree on head_dim", fn, LH_KD_SH(q), LH_KD_SH(k));
    if (v->shape[0] != S || v->shape[1] != KVH)
        return lh_kerr(ctx, LH_E_USAGE, "%s: v %s must be [%" PRId64 ", %" PRId64 ", Dv] like k %s", fn,
                       LH_KD_SH(v), S, KVH, LH_KD_SH(k));
    if (out->shape[0] != T || out->shape[1] != H || out->shape[2] != v->shape[2])
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                       fn, LH_KD_SH(out), T, H, v->shape[2]);
    if (KVH == 0 || H % KVH != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the %" PRId64 " query heads of q %s are not a multiple of the %" PRId64
                       " kv heads of k %s",
                       fn, H, LH_KD_SH(q), KVH, LH_KD_SH(k));
    if (!isfinite(scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: scale %g is not finite", fn, (double)scale);
    if (!isfinite(softcap) || softcap < 0.0f)
        return lh_kerr(ctx, LH_E_USAGE, "%s: softcap %g must be finite and >= 0 (0: none)", fn,
                       (double)softcap);
    if (lh_kd_overlaps(out, q) || lh_kd_overlaps(out, k) || lh_kd_overlaps(out, v))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps q, k or v", fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                   const lh_tensor *v, const int32_t *q_pos, float scale,
                                   float softcap, int64_t sliding_window, lh_tensor *out)
{
    static const char fn[] = "lh_k_attention";
    LH_KD_CHECK(check_attention(ctx, fn, q, k, v, scale, softcap, out));
    const int64_t T = q->shape[0], S = k->shape[0];
    if (T > 0 && !q_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos is NULL (q %s)", fn, LH_KD_SH(q));
    for (int64_t t = 0; t < T; t++)
        if (q_pos[t] < 0 || q_pos[t] >= S)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: q_pos[%" PRId64 "] = %" PRId32 " is outside the cache [0, %" PRId64
                           ") (k %s)",
                           fn, t, q_pos[t], S, LH_KD_SH(k));
    return LH_KD_ON_DEVICE(
        ctx, LH_CUDA(attention)(ctx, q, k, v, q_pos, scale, softcap, sliding_window, out),
        lh_cpu_attention(ctx, q, k, v, q_pos, scale, softcap, sliding_window, out));
}

LH_EXPORT lh_status lh_k_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                             const lh_tensor *v, const int32_t *q_pos,
                                             const int32_t *k_pos, float scale, float softcap,
                                             int64_t sliding_window, int64_t n_sinks,
                                             lh_tensor *out)
{
    static const char fn[] = "lh_k_attention_positions";
    LH_KD_CHECK(check_attention(ctx, fn, q, k, v, scale, softcap, out));
    const int64_t T = q->shape[0], S = k->shape[0];
    if (n_sinks < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_sinks %" PRId64 " is negative", fn, n_sinks);
    if (T > 0 && !q_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos is NULL (q %s)", fn, LH_KD_SH(q));
    if (S > 0 && !k_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: k_pos is NULL (k %s)", fn, LH_KD_SH(k));
    for (int64_t t = 0; t < T; t++)
        if (q_pos[t] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos[%" PRId64 "] = %" PRId32 " is negative", fn,
                           t, q_pos[t]);
    return LH_KD_ON_DEVICE(
        ctx,
        LH_CUDA(attention_positions)(ctx, q, k, v, q_pos, k_pos, scale, softcap, sliding_window,
                                    n_sinks, out),
        lh_cpu_attention_positions(ctx, q, k, v, q_pos, k_pos, scale, softcap, sliding_window,
                                   n_sinks, out));
}
