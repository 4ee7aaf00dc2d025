/* The one exported symbol of libllmhost_kernels_cuda.so (kernels/cuda/cuda_ops.h): the table of
 * the lh_cuda_* functions, and the services of libllmhost_kernels that the CUDA code calls
 * (error slots, RoPE frequencies, the sampling RNG), reached through the table the kernel
 * library hands over -- so this library has no undefined symbol outside cudart, cuBLAS and
 * libc, and loads whichever way libllmhost_kernels itself was loaded. */
#define LH_CUDA_LIBRARY_SIDE 1
#include "cuda_ops.h"

#include <stddef.h>

static const lh_cuda_host *host;

lh_status lh_kerr(lh_kctx *ctx, lh_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    host->kerr_v(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

const float *lh_cpu_rope_inv(const lh_rope *rope, int64_t seq_len, float *buf)
{
    return host->rope_inv(rope, seq_len, buf);
}

const char *lh_cu_last_error(const lh_kctx *ctx)
{
    return host->last_error(ctx);
}

double lh_cu_rng_uniform(uint64_t seed, uint64_t stream, uint64_t step)
{
    return host->rng_uniform(seed, stream, step);
}

static const lh_cuda_ops ops = {
    .struct_size = sizeof(lh_cuda_ops),
    .abi = LH_CUDA_ABI,
    .kctx_size = sizeof(lh_kctx),
#define LH_CUDA_OPS_INIT(name) .name = lh_cuda_##name,
    LH_CUDA_OPS_LIST(LH_CUDA_OPS_INIT)
#undef LH_CUDA_OPS_INIT
};

__attribute__((visibility("default"))) const lh_cuda_ops *lh_kernels_cuda_entry(
    const lh_cuda_host *h);

const lh_cuda_ops *lh_kernels_cuda_entry(const lh_cuda_host *h)
{
    if (!h || h->struct_size != sizeof(lh_cuda_host) || h->abi != LH_CUDA_ABI ||
        h->kctx_size != sizeof(lh_kctx) || !h->kerr_v || !h->last_error || !h->rope_inv ||
        !h->rng_uniform)
        return NULL;
    host = h;
    return &ops;
}
