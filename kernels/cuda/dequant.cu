/* ggml's block formats to f32 on the device (lh_k_dequantize): the twin of kernels/cpu/dequant.c,
 * bit-identical to it and to gguf-py.
 *
 * One kernel per format (a template on the format), one thread per output element, grid-stride
 * over the flat index: because every row holds whole blocks, element i lies in block i / B of
 * the whole tensor at byte (i / B) * block_bytes, whatever the row length. Each thread decodes
 * its own element from its block with byte loads (blocks of 18, 22 or 210 bytes leave their
 * fields unaligned), so writes are coalesced and no thread depends on another.
 *
 * Numerics: the same f32 operations in the same order as the CPU code, each rounded once:
 * __fmul_rn / __fadd_rn / __fsub_rn keep nvcc from contracting a * b + c into a fused
 * multiply-add (which would round once and differ from gguf-py in the last bit). The f16
 * scales widen exactly (__half2float); no subnormal f32 can arise from these formats, and the
 * library is built without flush-to-zero. */
#include "cuda_rt.h"

#include <string.h>

#define DQ_THREADS 256
#define DQ_MAX_BLOCKS 65536u

struct dequant_args {
    const uint8_t *src;
    float *dst;
    int64_t n; /* elements */
};

__device__ __forceinline__ float dq_f16(const uint8_t *p)
{
    return lh_cu_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

__device__ __forceinline__ uint32_t dq_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* nibble j of the 16 bytes qs of a 32-element block: low nibbles first, then the high ones */
__device__ __forceinline__ int dq_nib32(const uint8_t *qs, int j)
{
    return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
}

/* 6-bit scale (which = 0) or min (which = 1) of sub-block s of q4_k / q5_k (12 packed bytes) */
__device__ __forceinline__ int dq_k_scale(const uint8_t *sc, int s, int which)
{
    const int o = 4 * which;
    if (s < 4)
        return sc[o + s] & 0x3f;
    const int k = s - 4;
    return (which ? (sc[8 + k] >> 4) : (sc[8 + k] & 0x0f)) | ((sc[o + k] >> 2) & 0x30);
}

template <int DT> struct dq_fmt;

template <> struct dq_fmt<LH_DTYPE_Q4_0> {
    enum { B = 32, BYTES = 18 };
    static __device__ __forceinline__ float at(const uint8_t *b, int j)
    {
        return __fmul_rn(dq_f16(b), (float)(dq_nib32(b + 2, j) - 8));
    }
};

template <> struct dq_fmt<LH_DTYPE_Q4_1> {
    enum { B = 32, BYTES = 20 };
    static __device__ __forceinline__ float at(const uint8_t *b, int j)
    {
        return __fadd_rn(__fmul_rn(dq_f16(b), (float)dq_nib32(b + 4, j)), dq_f16(b + 2));
    }
};

template <> struct dq_fmt<LH_DTYPE_Q5_0> {
    enum { B = 32, BYTES = 22 };
    static __device__ __forceinline__ float at(const uint8_t *b, int j)
    {
        const int q = dq_nib32(b + 6, j) | (int)((dq_u32(b + 2) >> j) & 1u) << 4;
        return __fmul_rn(dq_f16(b), (float)(q - 16));
    }
};

template <> struct dq_fmt<LH_DTYPE_Q5_1> {
    enum { B = 32, BYTES = 24 };
    static __device__ __forceinline__ float at(const uint8_t *b, int j)
    {
        const int q = dq_nib32(b + 8, j) | (int)((dq_u32(b + 4) >> j) & 1u) << 4;
        return __fadd_rn(__fmul_rn(dq_f16(b), (float)q), dq_f16(b + 2));
    }
};

template <> struct dq_fmt<LH_DTYPE_Q8_0> {
    enum { B = 32, BYTES = 34 };
    static __device__ __forceinline__ float at(const uint8_t *b, int j)
    {
        return __fmul_rn((float)(int8_t)b[2 + j], dq_f16(b));
    }
};

template <> struct dq_fmt<LH_DTYPE_Q4_K> {
    enum { B = 256, BYTES = 144 };
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int s = e / 32, l = e % 32;
        const float ds = __fmul_rn(dq_f16(b), (float)dq_k_scale(b + 4, s, 0));
        const float ms = __fmul_rn(dq_f16(b + 2), (float)dq_k_scale(b + 4, s, 1));
        const int q = (b[16 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
        return __fsub_rn(__fmul_rn(ds, (float)q), ms);
    }
};

template <> struct dq_fmt<LH_DTYPE_Q5_K> {
    enum { B = 256, BYTES = 176 };
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int s = e / 32, l = e % 32;
        const float ds = __fmul_rn(dq_f16(b), (float)dq_k_scale(b + 4, s, 0));
        const float ms = __fmul_rn(dq_f16(b + 2), (float)dq_k_scale(b + 4, s, 1));
        const int q = ((b[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f) |
                      ((b[16 + l] >> s) & 1) << 4;
        return __fsub_rn(__fmul_rn(ds, (float)q), ms);
    }
};

template <> struct dq_fmt<LH_DTYPE_Q6_K> {
    enum { B = 256, BYTES = 210 };
    static __device__ __forceinline__ float at(const uint8_t *b, int e)
    {
        const int h = e / 128, r = e % 128;
        const int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
        const int hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        const float ds = __fmul_rn(dq_f16(b + 208), (float)(int8_t)b[192 + e / 16]);
        return __fmul_rn(ds, (float)((lo | hi << 4) - 32));
    }
};

template <int DT> static __global__ void dequant_kernel(const dequant_args a)
{
    typedef dq_fmt<DT> F;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        const int64_t blk = i / F::B;
        a.dst[i] = F::at(a.src + blk * F::BYTES, (int)(i - blk * F::B));
    }
}

/* f32 / f16 / bf16 sources: widening (exact), as lh_k_convert */
struct widen_args {
    const void *src;
    float *dst;
    int64_t n;
    int dt, pad_;
};

static __global__ void widen_kernel(const widen_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.dst[i] = a.dt == LH_DTYPE_F32 ? ((const float *)a.src)[i] : lh_cu_load(a.src, a.dt, i);
}

static unsigned dq_blocks(int64_t n)
{
    const unsigned b = lh_cu_blocks(n, DQ_THREADS);
    return b < DQ_MAX_BLOCKS ? b : DQ_MAX_BLOCKS;
}

template <int DT> static lh_status dq_launch(lh_kctx *ctx, const dequant_args &a)
{
    return LH_CU_LAUNCH(ctx, dequant_kernel<DT>, dim3(dq_blocks(a.n)), dim3(DQ_THREADS), 0, a);
}

lh_status lh_cuda_dequantize(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    const int64_t n = lh_cpu_numel(src);
    if (n == 0)
        return LH_OK;
    dequant_args a;
    memset(&a, 0, sizeof a);
    a.src = (const uint8_t *)src->data;
    a.dst = (float *)dst->data;
    a.n = n;
    switch (src->dtype) {
    case LH_DTYPE_Q4_0: return dq_launch<LH_DTYPE_Q4_0>(ctx, a);
    case LH_DTYPE_Q4_1: return dq_launch<LH_DTYPE_Q4_1>(ctx, a);
    case LH_DTYPE_Q5_0: return dq_launch<LH_DTYPE_Q5_0>(ctx, a);
    case LH_DTYPE_Q5_1: return dq_launch<LH_DTYPE_Q5_1>(ctx, a);
    case LH_DTYPE_Q8_0: return dq_launch<LH_DTYPE_Q8_0>(ctx, a);
    case LH_DTYPE_Q4_K: return dq_launch<LH_DTYPE_Q4_K>(ctx, a);
    case LH_DTYPE_Q5_K: return dq_launch<LH_DTYPE_Q5_K>(ctx, a);
    case LH_DTYPE_Q6_K: return dq_launch<LH_DTYPE_Q6_K>(ctx, a);
    case LH_DTYPE_F32:
    case LH_DTYPE_F16:
    case LH_DTYPE_BF16: {
        widen_args w;
        memset(&w, 0, sizeof w);
        w.src = src->data;
        w.dst = a.dst;
        w.n = n;
        w.dt = (int)src->dtype;
        return LH_CU_LAUNCH(ctx, widen_kernel, dim3(dq_blocks(n)), dim3(DQ_THREADS), 0, w);
    }
    default:
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "lh_k_dequantize: src dtype %d has no CUDA kernel",
                       (int)src->dtype);
    }
}
