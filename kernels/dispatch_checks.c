/* Argument checks shared by every public kernel entry point (see dispatch_checks.h). */
#include "dispatch_checks.h"

#include <inttypes.h>
#include <stdio.h>

const char *lh_kd_dt_name(lh_dtype dt)
{
    return lh_k_dtype_name(dt);
}

/* "f32, bf16 or f16" for a dtype set */
static const char *dt_set_name(unsigned mask, char *buf, size_t size)
{
    static const lh_dtype order[] = {LH_DTYPE_F32, LH_DTYPE_BF16, LH_DTYPE_F16,
                                     LH_DTYPE_FP8_E4M3, LH_DTYPE_INT8, LH_DTYPE_INT4,
                                     LH_DTYPE_Q4_0, LH_DTYPE_Q4_1, LH_DTYPE_Q5_0, LH_DTYPE_Q5_1,
                                     LH_DTYPE_Q8_0, LH_DTYPE_Q4_K, LH_DTYPE_Q5_K, LH_DTYPE_Q6_K};
    size_t n = 0, total = 0, o = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        total += (mask & (1u << order[i])) != 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof order / sizeof *order && o < size; i++)
        if (mask & (1u << order[i])) {
            n++;
            o += (size_t)snprintf(buf + o, size - o, "%s%s", n == 1 ? "" : n == total ? " or " : ", ",
                                  lh_kd_dt_name(order[i]));
        }
    return buf;
}

/* "[3, 7]" */
const char *lh_kd_shape_str(const lh_tensor *t, char *buf, size_t size)
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


lh_status lh_kd_begin(lh_kctx *ctx, const char *fn)
{
    if (!ctx)
        return lh_kerr(NULL, LH_E_USAGE, "%s: ctx is NULL", fn);
    if (lh_cpu_in_task(ctx)) /* ctx is busy on other threads: the message goes to this thread's
                              * slot, lh_k_last_error(NULL), not into ctx (no data race) */
        return lh_kerr(NULL, LH_E_USAGE,
                       "%s: called from inside lh_k_parallel_for on the same context (a context is "
                       "used by one thread at a time)",
                       fn);
    if (ctx->cuda) {
        LH_CUDA(make_current)(ctx);
        LH_CUDA(call_begin)(ctx);
    }
    return LH_OK;
}

static const char *device_str(lh_device d, char *buf, size_t size)
{
    if (d.kind == LH_DEVICE_CPU)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "%s:%d", d.kind == LH_DEVICE_CUDA ? "cuda" : "unknown", d.index);
    return buf;
}

/* NULL, device, rank, dtype, shape sanity, data pointer and contiguity of one tensor. */
lh_status lh_kd_check_tensor(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                              int ndim_lo, int ndim_hi, unsigned dtypes)
{
    if (!t)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is NULL", fn, arg);
    if (t->device.kind != ctx->device.kind || t->device.index != ctx->device.index)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is on %s, but the context is on %s (copy it with "
                       "lh_k_copy first)", fn, arg, device_str(t->device, (char[32]){0}, 32),
                       device_str(ctx->device, (char[32]){0}, 32));
    return lh_kd_check_layout(ctx, fn, arg, t, ndim_lo, ndim_hi, dtypes);
}

lh_status lh_kd_check_layout(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                             int ndim_lo, int ndim_hi, unsigned dtypes)
{
    if (!t)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is NULL", fn, arg);
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
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "%s: %s %s has dtype %s; supported: %s", fn, arg, LH_KD_SH(t),
                       lh_kd_dt_name(t->dtype), dt_set_name(dtypes, (char[160]){0}, 160));
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s has a negative dimension %s", fn, arg, LH_KD_SH(t));
        if (t->shape[i] && n > (INT64_MAX / 8) / t->shape[i])
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has too many elements", fn, arg, LH_KD_SH(t));
        n *= t->shape[i];
    }
    if (n > 0 && !t->data)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has no data (NULL)", fn, arg, LH_KD_SH(t));
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->stride[i] != expect) {
            char sb[96];
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s %s has strides %s; only contiguous row-major tensors are supported "
                           "(stride[%d] must be %" PRId64 ")",
                           fn, arg, LH_KD_SH(t), stride_str(t, sb, sizeof sb), i, expect);
        }
        expect *= t->shape[i];
    }
    return LH_OK;
}


bool lh_kd_overlaps(const lh_tensor *a, const lh_tensor *b)
{
    if (!a || !b || !a->data || !b->data)
        return false;
    int64_t na = lh_k_dtype_bytes(a->dtype, lh_cpu_numel(a));
    int64_t nb = lh_k_dtype_bytes(b->dtype, lh_cpu_numel(b));
    if (na <= 0 || nb <= 0)
        return false;
    uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
    return pa < pb + (uintptr_t)nb && pb < pa + (uintptr_t)na;
}

bool lh_kd_same_shape(const lh_tensor *a, const lh_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

const char *lh_kd_stride_str(const lh_tensor *t, char *buf, size_t size)
{
    return stride_str(t, buf, size);
}

/* lh_kd_check_layout's rules with strides instead of contiguity. The span bound (elements,
 * INT64_MAX / 8, as the element count above) keeps every offset a kernel forms, and the byte
 * extent of the overlap checks, free of overflow. */
lh_status lh_kd_check_view(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                           int ndim_lo, int ndim_hi, unsigned dtypes)
{
    if (!t)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is NULL", fn, arg);
    if (t->device.kind != ctx->device.kind || t->device.index != ctx->device.index)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is on %s, but the context is on %s (copy it with "
                       "lh_k_copy first)", fn, arg, device_str(t->device, (char[32]){0}, 32),
                       device_str(ctx->device, (char[32]){0}, 32));
    if (t->ndim < ndim_lo || t->ndim > ndim_hi) {
        if (ndim_lo == ndim_hi)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s must have %d dims (got ndim %d)", fn, arg,
                           ndim_lo, t->ndim);
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s must have %d to %d dims (got ndim %d)", fn, arg,
                       ndim_lo, ndim_hi, t->ndim);
    }
    if ((int)t->dtype <= LH_DTYPE_INVALID || (int)t->dtype >= LH_DTYPE_COUNT_)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s has an invalid dtype (%d)", fn, arg, (int)t->dtype);
    if (!(dtypes & (1u << t->dtype)))
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "%s: %s %s has dtype %s; supported: %s", fn, arg,
                       LH_KD_SH(t), lh_kd_dt_name(t->dtype),
                       dt_set_name(dtypes, (char[160]){0}, 160));
    const int64_t limit = INT64_MAX / 8;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s has a negative dimension %s", fn, arg,
                           LH_KD_SH(t));
        if (t->shape[i] && n > limit / t->shape[i])
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has too many elements", fn, arg,
                           LH_KD_SH(t));
        n *= t->shape[i];
    }
    if (n > 0 && !t->data)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s has no data (NULL)", fn, arg, LH_KD_SH(t));
    const int last = t->ndim - 1;
    if (t->shape[last] > 1 && t->stride[last] != 1)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: %s %s has strides %s; its last dim must be contiguous (stride[%d] "
                       "must be 1)",
                       fn, arg, LH_KD_SH(t), LH_KD_ST(t), last);
    int64_t span = 1;
    for (int i = 0; i < last; i++) {
        if (t->stride[i] < 0)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s %s has strides %s; stride[%d] must be >= 0 (0: a broadcast)",
                           fn, arg, LH_KD_SH(t), LH_KD_ST(t), i);
        if (t->shape[i] > 1 && t->stride[i] > (limit - span) / (t->shape[i] - 1))
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s with strides %s spans too many elements",
                           fn, arg, LH_KD_SH(t), LH_KD_ST(t));
        if (t->shape[i] > 1)
            span += (t->shape[i] - 1) * t->stride[i];
    }
    /* the last dim adds shape - 1 elements to the span: below limit as n is */
    if (n > 0 && t->shape[last] - 1 > limit - span)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s with strides %s spans too many elements", fn,
                       arg, LH_KD_SH(t), LH_KD_ST(t));
    return LH_OK;
}
