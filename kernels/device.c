/* The public device functions of lh_kernels.h ("devices, device memory, transfers and CUDA
 * graphs"): argument checks here, then the CPU implementation (the host heap, memcpy) or the
 * CUDA one, reached through the table of libllmhost_kernels_cuda.so (kernels/cuda_load.c; a
 * CUDA context or graph exists only once that library is loaded). Where the library is not
 * usable (not built, missing, no driver ...) every CUDA question is answered with its reason
 * instead of failing. */
#include "dispatch_checks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

bool lh_k_cuda_built(void)
{
#ifdef LH_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int lh_k_cuda_device_count(void)
{
    const lh_cuda_ops *ops = lh_cuda_load();
    return ops ? ops->device_count() : 0;
}

const char *lh_k_cuda_unavailable_reason(void)
{
    const lh_cuda_ops *ops = lh_cuda_load();
    if (!ops) {
        const char *why = "";
        lh_k_cuda_load_state(&why);
        return why;
    }
    return ops->unavailable_reason();
}

lh_status lh_k_cuda_device_info(int index, lh_k_device_info *info)
{
    if (!info)
        return lh_kerr(NULL, LH_E_USAGE, "lh_k_cuda_device_info: info is NULL");
    const lh_cuda_ops *ops = lh_cuda_load();
    if (!ops)
        return lh_kerr(NULL, LH_E_UNSUPPORTED, "lh_k_cuda_device_info: cuda:%d: %s", index,
                       lh_k_cuda_unavailable_reason());
    return ops->device_info(index, info);
}

lh_device lh_k_ctx_device(const lh_kctx *ctx)
{
    lh_device cpu = {LH_DEVICE_CPU, 0};
    return ctx ? ctx->device : cpu;
}

lh_status lh_k_ctx_set_bounds(lh_kctx *ctx, int64_t max_seq_len, int64_t max_blocks_per_seq)
{
    static const char fn[] = "lh_k_ctx_set_bounds";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    if (max_seq_len < 0 || max_blocks_per_seq < 0 || (max_seq_len == 0) != (max_blocks_per_seq == 0))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: max_seq_len %" PRId64 " and max_blocks_per_seq %" PRId64
                       " must both be positive, or both 0 (no bounds)",
                       fn, max_seq_len, max_blocks_per_seq);
    if (max_blocks_per_seq > INT32_MAX)
        return lh_kerr(ctx, LH_E_USAGE, "%s: max_blocks_per_seq %" PRId64 " exceeds int32 tables",
                       fn, max_blocks_per_seq);
    ctx->bound_seq_len = max_seq_len;
    ctx->bound_blocks_per_seq = max_blocks_per_seq;
    return LH_OK;
}

/* ---- memory -------------------------------------------------------------------------------- */

/* CPU allocations carry a header with their size, for the statistics. */
#define HOST_HDR 256

lh_status lh_k_alloc(lh_kctx *ctx, size_t bytes, void **out)
{
    static const char fn[] = "lh_k_alloc";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    if (!out)
        return lh_kerr(ctx, LH_E_USAGE, "%s: out is NULL", fn);
    *out = NULL;
    if (bytes == 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: 0 bytes asked", fn);
    if (bytes > (SIZE_MAX >> 2))
        return lh_kerr(ctx, LH_E_NOMEM, "%s: %zu bytes is beyond any device's memory", fn, bytes);
    if (ctx->cuda)
        return LH_CUDA(alloc)(ctx, bytes, out);
    void *p = NULL;
    if (posix_memalign(&p, 256, bytes + HOST_HDR) != 0)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of host memory asking for %.1f MiB (llmhost "
                       "holds %.1f MiB through this context)", fn, (double)bytes / 1048576.0,
                       (double)ctx->host_in_use / 1048576.0);
    *(size_t *)p = bytes;
    ctx->host_in_use += (int64_t)bytes;
    if (ctx->host_in_use > ctx->host_peak)
        ctx->host_peak = ctx->host_in_use;
    *out = (unsigned char *)p + HOST_HDR;
    return LH_OK;
}

void lh_k_free(lh_kctx *ctx, void *ptr)
{
    if (!ctx || !ptr)
        return;
    if (ctx->cuda) {
        LH_CUDA(free)(ctx, ptr);
        return;
    }
    unsigned char *base = (unsigned char *)ptr - HOST_HDR;
    ctx->host_in_use -= (int64_t)*(size_t *)base;
    free(base);
}

lh_status lh_k_memzero(lh_kctx *ctx, void *ptr, size_t bytes)
{
    static const char fn[] = "lh_k_memzero";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    if (bytes && !ptr)
        return lh_kerr(ctx, LH_E_USAGE, "%s: ptr is NULL (%zu bytes)", fn, bytes);
    if (ctx->cuda)
        return LH_CUDA(memzero)(ctx, ptr, bytes);
    if (bytes)
        memset(ptr, 0, bytes);
    return LH_OK;
}

void lh_k_mem_stats_get(const lh_kctx *ctx, lh_k_mem_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!ctx)
        return;
    if (ctx->cuda) {
        LH_CUDA(mem_stats)(ctx, out);
        return;
    }
    out->in_use = ctx->host_in_use;
    out->peak = ctx->host_peak;
}

/* ---- transfers ----------------------------------------------------------------------------- */

static const char *dev_name(lh_device d, char *buf, size_t size)
{
    if (d.kind == LH_DEVICE_CPU)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "%s:%d", d.kind == LH_DEVICE_CUDA ? "cuda" : "unknown", d.index);
    return buf;
}

/* A copy endpoint: the CPU, or the context's own device. */
static lh_status check_side(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                            bool *on_dev)
{
    if (!t)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is NULL", fn, arg);
    *on_dev = t->device.kind != LH_DEVICE_CPU;
    if (*on_dev && (t->device.kind != ctx->device.kind || t->device.index != ctx->device.index))
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s is on %s, but the context is on %s", fn, arg,
                       dev_name(t->device, (char[32]){0}, 32),
                       dev_name(ctx->device, (char[32]){0}, 32));
    /* bytes as they are: quantized weights too (their upload), block types in whole blocks */
    LH_KD_CHECK(lh_kd_check_layout(ctx, fn, arg, t, 1, LH_MAX_DIMS,
                                   LH_KD_KV | LH_KD_BLOCK | LH_KD_INTW));
    if (t->dtype == LH_DTYPE_INT4 && lh_cpu_numel(t) % 2 != 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s int4 %s has an odd element count (two per byte, "
                       "whole bytes only)", fn, arg, LH_KD_SH(t));
    if (lh_k_dtype_bytes(t->dtype, lh_cpu_numel(t)) < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s %s %s is not a whole number of %s blocks", fn, arg,
                       lh_kd_dt_name(t->dtype), LH_KD_SH(t), lh_kd_dt_name(t->dtype));
    return LH_OK;
}

lh_status lh_k_copy(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src)
{
    static const char fn[] = "lh_k_copy";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    bool dst_dev, src_dev;
    LH_KD_CHECK(check_side(ctx, fn, "dst", dst, &dst_dev));
    LH_KD_CHECK(check_side(ctx, fn, "src", src, &src_dev));
    if (dst->dtype != src->dtype || !lh_kd_same_shape(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s %s and src %s %s must have the same dtype and "
                       "shape", fn, lh_kd_dt_name(dst->dtype), LH_KD_SH(dst),
                       lh_kd_dt_name(src->dtype), LH_KD_SH(src));
    const int64_t bytes = lh_k_dtype_bytes(src->dtype, lh_cpu_numel(src));
    if (bytes <= 0)
        return LH_OK;
    if (dst_dev == src_dev && lh_kd_overlaps(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst and src overlap", fn);
    if (ctx->cuda)
        return LH_CUDA(copy)(ctx, dst->data, dst_dev, src->data, src_dev, (size_t)bytes);
    memcpy(dst->data, src->data, (size_t)bytes);
    return LH_OK;
}

lh_status lh_k_gather_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows, int64_t n,
                           lh_tensor *dst)
{
    static const char fn[] = "lh_k_gather_rows";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "src", src, 2, 2, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "dst", dst, 2, 2, LH_KD_F32));
    const int64_t R = src->shape[0], D = src->shape[1];
    if (n < 0 || dst->shape[0] != n || dst->shape[1] != D)
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst %s must be [%" PRId64 ", %" PRId64 "] for src %s",
                       fn, LH_KD_SH(dst), n, D, LH_KD_SH(src));
    if (n > 0 && !rows)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rows is NULL (n %" PRId64 ")", fn, n);
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= R)
            return lh_kerr(ctx, LH_E_USAGE, "%s: rows[%" PRId64 "] = %" PRId64
                           " is outside src %s", fn, i, rows[i], LH_KD_SH(src));
    if (lh_kd_overlaps(dst, src))
        return lh_kerr(ctx, LH_E_USAGE, "%s: dst overlaps src", fn);
    if (ctx->cuda)
        return LH_CUDA(gather_rows)(ctx, src, rows, n, dst);
    const float *s = src->data;
    float *d = dst->data;
    for (int64_t i = 0; i < n; i++)
        memcpy(d + i * D, s + rows[i] * D, (size_t)D * sizeof(float));
    return LH_OK;
}

lh_status lh_k_sync(lh_kctx *ctx)
{
    LH_KD_CHECK(lh_kd_begin(ctx, "lh_k_sync"));
    if (ctx->cuda)
        return LH_CUDA(sync)(ctx);
    return LH_OK;
}

/* ---- graphs -------------------------------------------------------------------------------- */

static lh_status cuda_only(lh_kctx *ctx, const char *fn)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    if (ctx->device.kind != LH_DEVICE_CUDA)
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "%s: CUDA graphs need a CUDA context (this one is "
                       "on %s)", fn, dev_name(ctx->device, (char[32]){0}, 32));
    return LH_OK;
}

lh_status lh_k_graph_create(lh_kctx *ctx, lh_k_graph **out)
{
    static const char fn[] = "lh_k_graph_create";
    LH_KD_CHECK(cuda_only(ctx, fn));
    if (!out)
        return lh_kerr(ctx, LH_E_USAGE, "%s: out is NULL", fn);
    return LH_CUDA(graph_create)(ctx, out);
}

lh_status lh_k_graph_begin(lh_kctx *ctx, lh_k_graph *g)
{
    static const char fn[] = "lh_k_graph_begin";
    LH_KD_CHECK(cuda_only(ctx, fn));
    if (!g)
        return lh_kerr(ctx, LH_E_USAGE, "%s: graph is NULL", fn);
    return LH_CUDA(graph_begin)(ctx, g);
}

lh_status lh_k_graph_end(lh_kctx *ctx, lh_k_graph *g, bool *rerun)
{
    static const char fn[] = "lh_k_graph_end";
    LH_KD_CHECK(cuda_only(ctx, fn));
    if (!g || !rerun)
        return lh_kerr(ctx, LH_E_USAGE, "%s: graph or rerun is NULL", fn);
    return LH_CUDA(graph_end)(ctx, g, rerun);
}

void lh_k_graph_abort(lh_kctx *ctx, lh_k_graph *g)
{
    if (ctx && ctx->cuda && g)
        LH_CUDA(graph_abort)(ctx, g);
}

void lh_k_graph_counts(const lh_k_graph *g, int64_t *captures, int64_t *replays)
{
    if (g && lh_cuda_loaded) { /* a graph exists only once the CUDA library is loaded */
        LH_CUDA(graph_counts)(g, captures, replays);
        return;
    }
    if (captures)
        *captures = 0;
    if (replays)
        *replays = 0;
}

void lh_k_graph_free(lh_k_graph *g)
{
    if (g && lh_cuda_loaded)
        LH_CUDA(graph_free)(g);
}
