/* The public tensor kernels: device-independent argument checks, then the dispatch on the
 * tensors' device. This build has CPU kernels only; a tensor on any other device is refused
 * with LH_E_UNSUPPORTED naming the device (the CUDA branch will sit next to the CPU one).
 *
 * Every tensor must be contiguous row-major (stride[ndim-1] == 1 and each stride the product of
 * the later dims; dims of size 1 are not checked): views with padded rows are not supported. */
#include "cpu/cpu_kernels.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

/* dtype sets */
#define DT_F32 (1u << LH_DTYPE_F32)
#define DT_FLOAT (DT_F32 | (1u << LH_DTYPE_BF16) | (1u << LH_DTYPE_F16))

static const char *dt_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_F16: return "f16";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case LH_DTYPE_INT8: return "int8";
    case LH_DTYPE_INT4: return "int4";
    default: return "invalid";
    }
}

static const char *dt_set_name(unsigned mask)
{
    return mask == DT_F32 ? "f32" : "f32, bf16 or f16";
}

/* "[3, 7]" */
static const char *shape_str(const lh_tensor *t, char *buf, size_t size)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, size - o, "[");
    for (int i = 0; i < t->ndim && i < LH_MAX_DIMS && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
    return buf;
}

static const char *stride_str(const lh_tensor *t, char *buf, size_t size)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, size - o, "[");
    for (int i = 0; i < t->ndim && i < LH_MAX_DIMS && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? ", " : "", t->stride[i]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
    return buf;
}

#define SH(t) shape_str((t), (char[96]){0}, 96)

static lh_status begin(lh_kctx *ctx, const char *fn)
{
    if (!ctx)
        return lh_kerr(NULL, LH_E_USAGE, "%s: ctx is NULL", fn);
    if (lh_cpu_in_task(ctx)) /* ctx is busy on other threads: the message goes to this thread's
                              * slot, lh_k_last_error(NULL), not into ctx (no data race) */
        return lh_kerr(NULL, LH_E_USAGE,
                       "%s: called from inside lh_k_parallel_for on the same context (a context is "
                       "used by one thread at a time)",
                       fn);
    return LH_OK;
}

/* NULL, device, rank, dtype, shape sanity, data pointer and contiguity of one tensor. */
static lh_status check_tensor(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                              int ndim_lo, int ndim_hi, unsigned dtypes)
{
    if (!t)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is NULL", fn, arg);
    if (t->device.kind != LH_DEVICE_CPU)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: %s is on device %s:%d, but this build of libllmhost_kernels has kernels "
                       "for the CPU only",
                       fn, arg, t->device.kind == LH_DEVICE_CUDA ? "cuda" : "unknown", t->device.index);
    if (t->ndim < ndim_lo || t->ndim > ndim_hi) {
        if (ndim_lo == ndim_hi)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s must have %d dims (got ndim %d)", fn, arg, ndim_lo,
                           t->ndim);
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s must have %d to %d dims (got ndim %d)", fn, arg,
                       ndim_lo, ndim_hi, t->ndim);
    }
    if ((int)t->dtype <= LH_DTYPE_INVALID || (int)t->dtype >= LH_DTYPE_COUNT_)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s has an invalid dtype (%d)", fn, arg, (int)t->dtype);
    if (!(dtypes & (1u << t->dtype)))
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "%s: %s %s has dtype %s; supported: %s", fn, arg, SH(t),
                       dt_name(t->dtype), dt_set_name(dtypes));
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s has a negative dimension %s", fn, arg, SH(t));
        if (t->shape[i] && n > (INT64_MAX / 8) / t->shape[i])
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has too many elements", fn, arg, SH(t));
        n *= t->shape[i];
    }
    if (n > 0 && !t->data)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has no data (NULL)", fn, arg, SH(t));
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->stride[i] != expect) {
            char sb[96];
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s %s has strides %s; only contiguous row-major tensors are supported "
                           "(stride[%d] must be %" PRId64 ")",
                           fn, arg, SH(t), stride_str(t, sb, sizeof sb), i, expect);
        }
        expect *= t->shape[i];
    }
    return LH_OK;
}

static size_t byte_size(const lh_tensor *t)
{
    return (size_t)lh_cpu_numel(t) * (t->dtype == LH_DTYPE_F32 ? 4u : 2u);
}

static bool overlaps(const lh_tensor *a, const lh_tensor *b)
{
    if (!a || !b || !a->data || !b->data)
        return false;
    size_t na = byte_size(a), nb = byte_size(b);
    if (!na || !nb)
        return false;
    uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
    return pa < pb + nb && pb < pa + na;
}

/* a and b may be the same buffer with the same layout, or disjoint; nothing in between. */
static bool same_or_disjoint(const lh_tensor *a, const lh_tensor *b)
{
    if (!overlaps(a, b))
        return true;
    return a->data == b->data && a->dtype == b->dtype && byte_size(a) == byte_size(b);
}

static bool same_shape(const lh_tensor *a, const lh_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

#define CHECK(expr)                                                                               \
    do {                                                                                          \
        lh_status st_ = (expr);                                                                   \
        if (st_ != LH_OK)                                                                         \
            return st_;                                                                           \
    } while (0)

/* ---- matmul --------------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *bias, lh_tensor *y)
{
    static const char fn[] = "lh_k_matmul";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "x", x, 2, 2, DT_F32));
    CHECK(check_tensor(ctx, fn, "w", w, 2, 2, DT_FLOAT));
    if (bias)
        CHECK(check_tensor(ctx, fn, "bias", bias, 1, 1, DT_FLOAT));
    CHECK(check_tensor(ctx, fn, "y", y, 2, 2, DT_F32));
    if (x->shape[1] != w->shape[1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s and w %s disagree on K (%" PRId64 " vs %" PRId64 ")",
                       fn, SH(x), SH(w), x->shape[1], w->shape[1]);
    if (y->shape[0] != x->shape[0] || y->shape[1] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s must be [%" PRId64 ", %" PRId64 "] for x %s and w %s",
                       fn, SH(y), x->shape[0], w->shape[0], SH(x), SH(w));
    if (bias && bias->shape[0] != w->shape[0])
        return lh_kerr(ctx, LH_E_USAGE, "%s: bias %s must be [%" PRId64 "] for w %s", fn, SH(bias),
                       w->shape[0], SH(w));
    if (overlaps(y, x) || overlaps(y, w) || overlaps(y, bias))
        return lh_kerr(ctx, LH_E_USAGE, "%s: y %s overlaps an input", fn, SH(y));
    return lh_cpu_matmul(ctx, x, w, bias, y);
}

/* ---- embedding ------------------------------------------------------------------------------ */

LH_EXPORT lh_status lh_k_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                   int64_t n, lh_tensor *out)
{
    static const char fn[] = "lh_k_embedding";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "table", table, 2, 2, DT_FLOAT));
    CHECK(check_tensor(ctx, fn, "out", out, 2, 2, DT_F32));
    if (n < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n %" PRId64 " is negative", fn, n);
    if (n > 0 && !ids)
        return lh_kerr(ctx, LH_E_USAGE, "%s: ids is NULL (n %" PRId64 ")", fn, n);
    if (out->shape[0] != n || out->shape[1] != table->shape[1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must be [%" PRId64 ", %" PRId64 "] for table %s",
                       fn, SH(out), n, table->shape[1], SH(table));
    const int64_t V = table->shape[0];
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: ids[%" PRId64 "] = %" PRId32 " is outside [0, %" PRId64 ") (table %s)",
                           fn, i, ids[i], V, SH(table));
    if (overlaps(out, table))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps table", fn);
    return lh_cpu_embedding(ctx, table, ids, n, out);
}

/* ---- norms ---------------------------------------------------------------------------------- */

static lh_status check_norm(lh_kctx *ctx, const char *fn, const lh_tensor *x, const lh_tensor *w,
                            float eps, float offset, const lh_tensor *out)
{
    CHECK(check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, DT_F32));
    CHECK(check_tensor(ctx, fn, "w", w, 1, 1, DT_FLOAT));
    CHECK(check_tensor(ctx, fn, "out", out, 1, LH_MAX_DIMS, DT_F32));
    if (w->shape[0] != x->shape[x->ndim - 1])
        return lh_kerr(ctx, LH_E_USAGE, "%s: w %s must match the last dim of x %s", fn, SH(w), SH(x));
    if (!same_shape(out, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must have the shape of x %s", fn, SH(out), SH(x));
    if (!(eps >= 0.0f) || !isfinite(eps))
        return lh_kerr(ctx, LH_E_USAGE, "%s: eps %g must be finite and >= 0", fn, (double)eps);
    if (!isfinite(offset))
        return lh_kerr(ctx, LH_E_USAGE, "%s: offset %g must be finite", fn, (double)offset);
    if (!same_or_disjoint(out, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out partially overlaps x (only exact aliasing is allowed)",
                       fn);
    if (overlaps(out, w))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps w", fn);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_rmsnorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, float eps,
                                 float offset, lh_tensor *out)
{
    static const char fn[] = "lh_k_rmsnorm";
    CHECK(begin(ctx, fn));
    CHECK(check_norm(ctx, fn, x, w, eps, offset, out));
    return lh_cpu_rmsnorm(ctx, NULL, x, w, eps, offset, out);
}

LH_EXPORT lh_status lh_k_add_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x,
                                     const lh_tensor *w, float eps, float offset, lh_tensor *out)
{
    static const char fn[] = "lh_k_add_rmsnorm";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "residual", residual, 1, LH_MAX_DIMS, DT_F32));
    CHECK(check_norm(ctx, fn, x, w, eps, offset, out));
    if (!same_shape(residual, x))
        return lh_kerr(ctx, LH_E_USAGE, "%s: residual %s must have the shape of x %s", fn, SH(residual),
                       SH(x));
    if (overlaps(residual, x) || overlaps(residual, w) || !same_or_disjoint(residual, out))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: residual overlaps x or w, or partially overlaps out", fn);
    return lh_cpu_rmsnorm(ctx, residual, x, w, eps, offset, out);
}

/* ---- activations ---------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                  lh_tensor *out)
{
    static const char fn[] = "lh_k_silu_mul";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "gate", gate, 1, LH_MAX_DIMS, DT_F32));
    CHECK(check_tensor(ctx, fn, "up", up, 1, LH_MAX_DIMS, DT_F32));
    CHECK(check_tensor(ctx, fn, "out", out, 1, LH_MAX_DIMS, DT_F32));
    if (!same_shape(gate, up) || !same_shape(gate, out))
        return lh_kerr(ctx, LH_E_USAGE, "%s: gate %s, up %s and out %s must have the same shape", fn,
                       SH(gate), SH(up), SH(out));
    if (!same_or_disjoint(out, gate) || !same_or_disjoint(out, up))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: out partially overlaps gate or up (only exact aliasing is allowed)", fn);
    return lh_cpu_silu_mul(ctx, gate, up, out);
}

LH_EXPORT lh_status lh_k_softmax(lh_kctx *ctx, lh_tensor *x)
{
    static const char fn[] = "lh_k_softmax";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "x", x, 1, LH_MAX_DIMS, DT_F32));
    return lh_cpu_softmax(ctx, x);
}

LH_EXPORT lh_status lh_k_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out)
{
    static const char fn[] = "lh_k_argmax";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "x", x, 1, 2, DT_F32));
    const int64_t N = x->shape[x->ndim - 1];
    if (N == 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s has empty rows", fn, SH(x));
    if (N > INT32_MAX)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s: rows longer than INT32_MAX", fn, SH(x));
    if (!out && lh_cpu_numel(x) > 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: out is NULL", fn);
    if (lh_cpu_numel(x) == 0)
        return LH_OK;
    return lh_cpu_argmax(ctx, x, out);
}

LH_EXPORT lh_status lh_k_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    static const char fn[] = "lh_k_convert";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "src", src, 1, LH_MAX_DIMS, DT_FLOAT));
    CHECK(check_tensor(ctx, fn, "dst", dst, 1, LH_MAX_DIMS, DT_FLOAT));
    if (!same_shape(src, dst))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src %s and dst %s must have the same shape", fn, SH(src),
                       SH(dst));
    if (overlaps(src, dst) && !(src->data == dst->data && src->dtype == dst->dtype))
        return lh_kerr(ctx, LH_E_USAGE, "%s: src and dst overlap", fn);
    return lh_cpu_convert(ctx, src, dst);
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

LH_EXPORT lh_status lh_k_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                                    const int32_t *positions, int64_t seq_len)
{
    static const char fn[] = "lh_k_rope_apply";
    CHECK(begin(ctx, fn));
    if (!rope || !rope->inv_freq || rope->rotary_dim < 2 || rope->rotary_dim % 2)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rope is NULL or not initialized by lh_k_rope_init", fn);
    CHECK(check_tensor(ctx, fn, "x", x, 3, 3, DT_F32));
    if (x->shape[2] < rope->rotary_dim)
        return lh_kerr(ctx, LH_E_USAGE, "%s: x %s has head_dim %" PRId64 " < rotary_dim %" PRId64, fn,
                       SH(x), x->shape[2], rope->rotary_dim);
    const int64_t T = x->shape[0];
    if (T > 0 && !positions)
        return lh_kerr(ctx, LH_E_USAGE, "%s: positions is NULL (x %s)", fn, SH(x));
    int64_t maxpos = -1;
    for (int64_t t = 0; t < T; t++) {
        if (positions[t] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: positions[%" PRId64 "] = %" PRId32 " is negative", fn,
                           t, positions[t]);
        if (positions[t] > maxpos)
            maxpos = positions[t];
    }
    if (rope->scaling.kind && !strcmp(rope->scaling.kind, "dynamic") && T > 0 && seq_len < maxpos + 1)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: dynamic RoPE needs seq_len >= max(positions) + 1 (seq_len %" PRId64
                       ", max position %" PRId64 ")",
                       fn, seq_len, maxpos);
    return lh_cpu_rope_apply(ctx, rope, x, positions, seq_len);
}

/* ---- attention ------------------------------------------------------------------------------ */

LH_EXPORT lh_status lh_k_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                   const lh_tensor *v, const int32_t *q_pos, float scale,
                                   int64_t sliding_window, lh_tensor *out)
{
    static const char fn[] = "lh_k_attention";
    CHECK(begin(ctx, fn));
    CHECK(check_tensor(ctx, fn, "q", q, 3, 3, DT_F32));
    CHECK(check_tensor(ctx, fn, "k", k, 3, 3, DT_F32));
    CHECK(check_tensor(ctx, fn, "v", v, 3, 3, DT_F32));
    CHECK(check_tensor(ctx, fn, "out", out, 3, 3, DT_F32));
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    const int64_t S = k->shape[0], KVH = k->shape[1];
    if (k->shape[2] != D)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q %s and k %s disagree on head_dim", fn, SH(q), SH(k));
    if (v->shape[0] != S || v->shape[1] != KVH)
        return lh_kerr(ctx, LH_E_USAGE, "%s: v %s must be [%" PRId64 ", %" PRId64 ", Dv] like k %s", fn,
                       SH(v), S, KVH, SH(k));
    if (out->shape[0] != T || out->shape[1] != H || out->shape[2] != v->shape[2])
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must be [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                       fn, SH(out), T, H, v->shape[2]);
    if (KVH == 0 || H % KVH != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the %" PRId64 " query heads of q %s are not a multiple of the %" PRId64
                       " kv heads of k %s",
                       fn, H, SH(q), KVH, SH(k));
    if (!isfinite(scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: scale %g is not finite", fn, (double)scale);
    if (T > 0 && !q_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos is NULL (q %s)", fn, SH(q));
    for (int64_t t = 0; t < T; t++)
        if (q_pos[t] < 0 || q_pos[t] >= S)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: q_pos[%" PRId64 "] = %" PRId32 " is outside the cache [0, %" PRId64
                           ") (k %s)",
                           fn, t, q_pos[t], S, SH(k));
    if (overlaps(out, q) || overlaps(out, k) || overlaps(out, v))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps q, k or v", fn);
    return lh_cpu_attention(ctx, q, k, v, q_pos, scale, sliding_window, out);
}
