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
#include "matmul_decoded.cuh"

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

/* Every type with a dq_fmt, for the switches that pick a kernel instance */
#define DQ_BLOCK_TYPES(X)                                                                        \
    X(LH_DTYPE_Q4_0) X(LH_DTYPE_Q4_1) X(LH_DTYPE_Q5_0) X(LH_DTYPE_Q5_1) X(LH_DTYPE_Q8_0)        \
    X(LH_DTYPE_Q4_K) X(LH_DTYPE_Q5_K) X(LH_DTYPE_Q6_K)

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
#define DQ_CASE(T) \
    case T: return dq_launch<T>(ctx, a);
        DQ_BLOCK_TYPES(DQ_CASE)
#undef DQ_CASE
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

/* ---- block-type tables and weights where the kernels read them -------------------------------
 * lh_cuda_embedding / lh_cuda_embedding_add with a block-type table and lh_cuda_matmul with a
 * block-type w come here (cuda_rt.h), so that each element is decoded by the same dq_fmt as
 * lh_k_dequantize: a looked-up row is bit-identical to that row of the dequantized table (the
 * CPU's too), and the matmul multiplies f32 x by exactly the dequantized weights. */

struct qemb_args {
    const uint8_t *table;
    const int32_t *ids; /* staged */
    float *out;
    int64_t n, D;
    int add;
    int pad_;
};

template <int DT> static __global__ void qemb_kernel(const qemb_args a)
{
    typedef dq_fmt<DT> F;
    const int64_t row_bytes = a.D / F::B * F::BYTES;
    for (int64_t row = blockIdx.x; row < a.n; row += gridDim.x) {
        const uint8_t *r = a.table + (int64_t)a.ids[row] * row_bytes;
        float *o = a.out + row * a.D;
        for (int64_t i = threadIdx.x; i < a.D; i += blockDim.x) {
            const float v = F::at(r + i / F::B * F::BYTES, (int)(i % F::B));
            o[i] = a.add ? __fadd_rn(o[i], v) : v;
        }
    }
}

lh_status lh_cu_embedding_blocks(lh_kctx *ctx, const lh_tensor *table, const int32_t *dids,
                                 int64_t n, lh_tensor *out, bool add)
{
    qemb_args a;
    memset(&a, 0, sizeof a);
    a.table = (const uint8_t *)table->data;
    a.ids = dids;
    a.out = (float *)out->data;
    a.n = n;
    a.D = table->shape[1];
    a.add = add;
    const dim3 grid(n < 65535 ? (unsigned)n : 65535u), block(DQ_THREADS);
    switch (table->dtype) {
#define QEMB_CASE(T) \
    case T: return LH_CU_LAUNCH(ctx, qemb_kernel<T>, grid, block, 0, a);
        DQ_BLOCK_TYPES(QEMB_CASE)
#undef QEMB_CASE
    default:
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "lh_k_embedding: table dtype %d has no CUDA kernel",
                       (int)table->dtype);
    }
}

/* y = x @ dequant(w)^T (+ bias) through matmul_decoded.cuh, each weight element decoded by
 * the format's dq_fmt, as lh_k_dequantize decodes it. */
template <int DT> struct blk_dec {
    const uint8_t *w;
    int64_t row_bytes;
    __device__ __forceinline__ float at(int64_t n, int64_t k) const
    {
        typedef dq_fmt<DT> F;
        return F::at(w + n * row_bytes + k / F::B * F::BYTES, (int)(k % F::B));
    }
};

template <int DT>
static lh_status qmm_launch(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                            const lh_tensor *bias, lh_tensor *y)
{
    blk_dec<DT> d;
    d.w = (const uint8_t *)w->data;
    d.row_bytes = w->shape[1] / dq_fmt<DT>::B * dq_fmt<DT>::BYTES;
    return lh_cu_matmul_decoded(ctx, d, x, w->shape[0], bias, y);
}

lh_status lh_cu_matmul_blocks(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                              const lh_tensor *bias, lh_tensor *y)
{
    switch (w->dtype) {
#define QMM_CASE(T) \
    case T: return qmm_launch<T>(ctx, x, w, bias, y);
        DQ_BLOCK_TYPES(QMM_CASE)
#undef QMM_CASE
    default:
        return lh_kerr(ctx, LH_E_UNSUPPORTED, "lh_k_matmul: w dtype %d has no CUDA kernel",
                       (int)w->dtype);
    }
}
