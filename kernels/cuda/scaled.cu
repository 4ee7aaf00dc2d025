/* Weights with separate scale tensors on the device: the twins of kernels/cpu/scaled.c,
 * scaled_qmm.c and scaled_quant.c (lh_k_dequantize_scaled, lh_k_matmul_scaled,
 * lh_k_quantize_scaled; the contracts are in lh_kernels.h, the CPU's arithmetic in scaled.h).
 *
 * Every result that the CPU defines bit for bit is reproduced bit for bit: a decoded element is
 * one f32 multiplication (__fmul_rn, so nvcc cannot fuse it), the integer path's activations
 * are quantized with the CPU's operations and its integer sums are exact (their order does not
 * matter), and the quantizer's absmax is a maximum of bit patterns, its divisions and
 * roundings single correctly rounded operations. Only the exact path's f32 sums run in another
 * order than the CPU's (matmul_decoded.cuh bounds the difference). */
#include "matmul_decoded.cuh"

extern "C" {
#include "cpu/qmatmul.h" /* LH_QMM_AMAX_MIN_BITS */
}

#define SC_THREADS 256
#define SC_MAX_BLOCKS 65535u

/* ---- decoding --------------------------------------------------------------------------------- */

/* element value (exact in f32) of row `row`, column k, for the weight kind KIND (LH_SW_*) */
template <int KIND> __device__ __forceinline__ float sw_value(const uint8_t *row, int64_t k)
{
    if (KIND == LH_SW_INT8)
        return (float)(int8_t)row[k];
    if (KIND == LH_SW_INT4) {
        const unsigned b = row[k >> 1];
        return (float)((int)(((k & 1) ? b >> 4 : b & 15u) ^ 8u) - 8);
    }
    return lh_cu_fp8_to_f32(row[k]);
}

__device__ __forceinline__ float sw_scale(const void *scale, int f16, int64_t i)
{
    return f16 ? lh_cu_f16_to_f32(((const uint16_t *)scale)[i]) : ((const float *)scale)[i];
}

/* A weight as the kernels read it; at(n, k) = value * scale, the CPU's one f32 product. */
template <int KIND> struct sw_dec {
    const uint8_t *w;
    const void *scale;
    int64_t row_bytes, br, bc, scale_cols;
    int scale_f16;
    int pad_;
    __device__ __forceinline__ float at(int64_t n, int64_t k) const
    {
        return __fmul_rn(sw_value<KIND>(w + n * row_bytes, k),
                         sw_scale(scale, scale_f16, (n / br) * scale_cols + k / bc));
    }
};

static int sw_kind(lh_dtype dt)
{
    return dt == LH_DTYPE_INT8 ? LH_SW_INT8 : dt == LH_DTYPE_INT4 ? LH_SW_INT4 : LH_SW_FP8;
}

template <int KIND>
static sw_dec<KIND> sw_make(const lh_tensor *w, const lh_tensor *scale, int64_t br, int64_t bc)
{
    sw_dec<KIND> d;
    memset(&d, 0, sizeof d);
    d.w = (const uint8_t *)w->data;
    d.scale = scale->data;
    d.row_bytes = KIND == LH_SW_INT4 ? w->shape[1] / 2 : w->shape[1]; /* int4: K even */
    d.br = br;
    d.bc = bc;
    d.scale_cols = scale->shape[1];
    d.scale_f16 = scale->dtype == LH_DTYPE_F16;
    return d;
}

static unsigned sc_blocks(int64_t n)
{
    const int64_t b = (n + SC_THREADS - 1) / SC_THREADS; /* clamped before it narrows */
    return b < (int64_t)SC_MAX_BLOCKS ? (unsigned)b : SC_MAX_BLOCKS;
}

template <int KIND> struct deq_args {
    sw_dec<KIND> dec;
    float *dst;
    int64_t N, K;
};

template <int KIND> static __global__ void deq_kernel(const deq_args<KIND> a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x, n_el = a.N * a.K;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_el; i += step)
        a.dst[i] = a.dec.at(i / a.K, i % a.K);
}

template <int KIND>
static lh_status deq_launch(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                            int64_t br, int64_t bc, lh_tensor *dst)
{
    deq_args<KIND> a;
    memset(&a, 0, sizeof a);
    a.dec = sw_make<KIND>(w, scale, br, bc);
    a.dst = (float *)dst->data;
    a.N = w->shape[0];
    a.K = w->shape[1];
    return LH_CU_LAUNCH(ctx, deq_kernel<KIND>, dim3(sc_blocks(a.N * a.K)), dim3(SC_THREADS), 0, a);
}

lh_status lh_cuda_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                    int64_t block_rows, int64_t block_cols, lh_tensor *dst)
{
    if (w->shape[0] == 0 || w->shape[1] == 0)
        return LH_OK;
    switch (sw_kind(w->dtype)) {
    case LH_SW_INT8: return deq_launch<LH_SW_INT8>(ctx, w, scale, block_rows, block_cols, dst);
    case LH_SW_INT4: return deq_launch<LH_SW_INT4>(ctx, w, scale, block_rows, block_cols, dst);
    default: return deq_launch<LH_SW_FP8>(ctx, w, scale, block_rows, block_cols, dst);
    }
}

/* ---- the integer path: int8 weights with one scale per row (scaled.h) -------------------------- */

/* Largest |v| bit pattern over a thread block (every thread calls it; the result to all). */
static __device__ uint32_t block_max_bits(uint32_t m, uint32_t *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t v = __shfl_xor_sync(0xffffffffu, m, o);
        m = v > m ? v : m;
    }
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0u;
        for (int o = 16; o > 0; o >>= 1) {
            const uint32_t v = __shfl_xor_sync(0xffffffffu, m, o);
            m = v > m ? v : m;
        }
        if (threadIdx.x == 0)
            sh[0] = m;
    }
    __syncthreads();
    m = sh[0];
    __syncthreads();
    return m;
}

/* Step 1: row m of x into q[m][0..K) with d[m] (lh_qmm_quant_block's arithmetic). */
struct xq_args {
    const float *x;
    int8_t *q;
    float *d;
    int64_t M, K;
};

static __global__ void __launch_bounds__(SC_THREADS) xq_kernel(const xq_args a)
{
    __shared__ uint32_t sh[SC_THREADS / 32];
    for (int64_t m = blockIdx.x; m < a.M; m += gridDim.x) {
        const float *xr = a.x + m * a.K;
        int8_t *qr = a.q + m * a.K;
        uint32_t mb = 0;
        for (int64_t k = threadIdx.x; k < a.K; k += SC_THREADS) {
            const uint32_t b = __float_as_uint(xr[k]) & 0x7fffffffu;
            mb = b > mb ? b : mb;
        }
        mb = block_max_bits(mb, sh);
        if (mb >= 0x7f800000u || mb < LH_QMM_AMAX_MIN_BITS) {
            for (int64_t k = threadIdx.x; k < a.K; k += SC_THREADS)
                qr[k] = 0;
            if (threadIdx.x == 0)
                a.d[m] = mb >= 0x7f800000u ? __uint_as_float(0x7fc00000u) : 0.0f;
            continue;
        }
        const float amax = __uint_as_float(mb), id = __fdiv_rn(127.0f, amax);
        for (int64_t k = threadIdx.x; k < a.K; k += SC_THREADS)
            qr[k] = (int8_t)__float2int_rn(__fmul_rn(xr[k], id));
        if (threadIdx.x == 0)
            a.d[m] = __fdiv_rn(amax, 127.0f);
    }
}

/* Steps 2 and 3: a thread block per (weight row, up to MD_MR x rows), exact int64 sums. */
struct iq_args {
    const int8_t *w, *q;
    const float *d;
    const void *scale, *bias;
    float *y;
    int64_t M, N, K, br;
    int scale_f16, bias_dt;
};

static __global__ void __launch_bounds__(MD_THREADS) iq_kernel(const iq_args a)
{
    __shared__ long long red[MD_MR][MD_THREADS / 32];
    const int64_t mgroups = (a.M + MD_MR - 1) / MD_MR;
    for (int64_t t = blockIdx.x; t < a.N * mgroups; t += gridDim.x) {
        const int64_t n = t % a.N, m0 = (t / a.N) * MD_MR;
        const int mr = a.M - m0 < MD_MR ? (int)(a.M - m0) : MD_MR;
        const int8_t *wr = a.w + n * a.K;
        long long acc[MD_MR];
#pragma unroll
        for (int i = 0; i < MD_MR; i++)
            acc[i] = 0;
        for (int64_t k = threadIdx.x; k < a.K; k += MD_THREADS) {
            const int wv = wr[k];
#pragma unroll
            for (int i = 0; i < MD_MR; i++)
                if (i < mr)
                    acc[i] += wv * (int)a.q[(m0 + i) * a.K + k];
        }
#pragma unroll
        for (int i = 0; i < MD_MR; i++) {
            long long v = acc[i];
            for (int o = 16; o > 0; o >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
            if ((threadIdx.x & 31) == 0)
                red[i][threadIdx.x >> 5] = v;
        }
        __syncthreads();
        if ((int)threadIdx.x < mr) {
            const int64_t m = m0 + threadIdx.x;
            long long isum = 0;
            for (int wi = 0; wi < MD_THREADS / 32; wi++)
                isum += red[threadIdx.x][wi];
            const float s = sw_scale(a.scale, a.scale_f16, n / a.br);
            float v = __fmul_rn(__ll2float_rn(isum), __fmul_rn(s, a.d[m]));
            if (a.bias)
                v = __fadd_rn(v, lh_cu_load(a.bias, a.bias_dt, n));
            a.y[m * a.N + n] = v;
        }
        __syncthreads();
    }
}

static size_t round256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static lh_status matmul_int8(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                             const lh_tensor *scale, int64_t br, const lh_tensor *bias,
                             lh_tensor *y)
{
    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    const size_t qbytes = round256((size_t)M * (size_t)K);
    lh_status st = LH_OK;
    unsigned char *mem =
        (unsigned char *)lh_cu_scratch(ctx, qbytes + (size_t)M * sizeof(float), &st);
    if (!mem)
        return st;
    xq_args qa;
    memset(&qa, 0, sizeof qa);
    qa.x = (const float *)x->data;
    qa.q = (int8_t *)mem;
    qa.d = (float *)(mem + qbytes);
    qa.M = M;
    qa.K = K;
    st = LH_CU_LAUNCH(ctx, xq_kernel, dim3(M < 65535 ? (unsigned)M : 65535u), dim3(SC_THREADS), 0,
                      qa);
    if (st != LH_OK)
        return st;
    iq_args a;
    memset(&a, 0, sizeof a);
    a.w = (const int8_t *)w->data;
    a.q = qa.q;
    a.d = qa.d;
    a.scale = scale->data;
    a.scale_f16 = scale->dtype == LH_DTYPE_F16;
    a.bias = bias ? bias->data : NULL;
    a.bias_dt = bias ? (int)bias->dtype : (int)LH_DTYPE_F32;
    a.y = (float *)y->data;
    a.M = M;
    a.N = N;
    a.K = K;
    a.br = br;
    const int64_t tasks = N * ((M + MD_MR - 1) / MD_MR);
    return LH_CU_LAUNCH(ctx, iq_kernel, dim3(tasks < 65535 ? (unsigned)tasks : 65535u),
                        dim3(MD_THREADS), 0, a);
}

lh_status lh_cuda_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                const lh_tensor *scale, int64_t block_rows, int64_t block_cols,
                                const lh_tensor *bias, lh_tensor *y)
{
    const int64_t N = w->shape[0];
    if (x->shape[0] == 0 || N == 0)
        return LH_OK;
    /* the same choice as the CPU (scaled.c), so both devices give the same bits there */
    if (w->dtype == LH_DTYPE_INT8 && scale->shape[1] == 1 && ctx->qmm == LH_K_QMM_INT8)
        return matmul_int8(ctx, x, w, scale, block_rows, bias, y);
    switch (sw_kind(w->dtype)) {
    case LH_SW_INT8:
        return lh_cu_matmul_decoded(ctx, sw_make<LH_SW_INT8>(w, scale, block_rows, block_cols), x,
                                    N, bias, y);
    case LH_SW_INT4:
        return lh_cu_matmul_decoded(ctx, sw_make<LH_SW_INT4>(w, scale, block_rows, block_cols), x,
                                    N, bias, y);
    default:
        return lh_cu_matmul_decoded(ctx, sw_make<LH_SW_FP8>(w, scale, block_rows, block_cols), x,
                                    N, bias, y);
    }
}

/* ---- quantizing (scaled_quant.c's arithmetic) ------------------------------------------------ */

/* what a failed quantization leaves in scratch, first thing there */
struct qbad {
    unsigned long long elem;  /* first non-finite source element n * K + k; ~0: none */
    unsigned long long block; /* first block whose f16 scale overflows; ~0: none */
};

struct qinit_args {
    qbad *bad;
};

static __global__ void qinit_kernel(const qinit_args a)
{
    a.bad->elem = ~0ull;
    a.bad->block = ~0ull;
}

struct qs_args {
    const void *src;
    void *scale;
    float *ss, *amax; /* per block: the stored scale as f32 (0: store zeros), absmax */
    qbad *bad;
    int64_t N, K, br, bc, scale_cols, n_blocks;
    float qmax;
    int sdt, scale_f16;
};

__device__ __forceinline__ float src_at(const void *src, int dt, int64_t i)
{
    return lh_cu_load(src, dt, i); /* f32, bf16, f16: exact */
}

/* Pass 1, a thread block per scale block: its absmax (bits, so the order does not matter), the
 * stored scale, and the first non-finite element it holds. */
static __global__ void __launch_bounds__(SC_THREADS) qscale_kernel(const qs_args a)
{
    __shared__ uint32_t sh[SC_THREADS / 32];
    for (int64_t b = blockIdx.x; b < a.n_blocks; b += gridDim.x) {
        const int64_t rb = b / a.scale_cols, c = b % a.scale_cols;
        const int64_t r0 = rb * a.br, r1 = a.N - r0 < a.br ? a.N : r0 + a.br;
        const int64_t k0 = c * a.bc, k1 = a.K - k0 < a.bc ? a.K : k0 + a.bc;
        const int64_t w = k1 - k0, n_el = (r1 - r0) * w;
        uint32_t mb = 0;
        for (int64_t e = threadIdx.x; e < n_el; e += SC_THREADS) {
            const int64_t i = (r0 + e / w) * a.K + k0 + e % w;
            const uint32_t v = __float_as_uint(src_at(a.src, a.sdt, i)) & 0x7fffffffu;
            if (v >= 0x7f800000u)
                atomicMin(&a.bad->elem, (unsigned long long)i);
            mb = v > mb ? v : mb;
        }
        mb = block_max_bits(mb, sh);
        if (threadIdx.x == 0) {
            const float amax = __uint_as_float(mb);
            float ss = 0.0f;
            if (mb < 0x7f800000u) {
                const float s = __fdiv_rn(amax, a.qmax);
                if (a.scale_f16) {
                    const uint16_t h = lh_cu_f32_to_f16(s);
                    if ((h & 0x7c00u) == 0x7c00u) {
                        atomicMin(&a.bad->block, (unsigned long long)b);
                    } else {
                        ((uint16_t *)a.scale)[b] = h;
                        ss = lh_cu_f16_to_f32(h);
                    }
                } else {
                    ((float *)a.scale)[b] = s;
                    ss = s;
                }
            }
            a.ss[b] = ss;
            a.amax[b] = amax;
        }
    }
}

struct qw_args {
    const void *src;
    uint8_t *w;
    const float *ss;
    int64_t N, K, bc, scale_cols, br;
    float qmax;
    int sdt, kind;
};

/* scaled_quant.c's round_clamp: |t| clamped to qmax, rounded to nearest even, the sign put back */
__device__ __forceinline__ int round_clamp(float t, float qmax)
{
    const int q = __float2int_rn(fminf(fabsf(t), qmax));
    return t < 0.0f ? -q : q;
}

__device__ __forceinline__ int quant_one(const qw_args &a, int64_t n, int64_t k)
{
    const float s = a.ss[(n / a.br) * a.scale_cols + k / a.bc];
    if (s == 0.0f)
        return 0;
    const float t = __fdiv_rn(src_at(a.src, a.sdt, n * a.K + k), s);
    return a.kind == LH_SW_FP8 ? (int)lh_cu_f32_to_fp8(t) : round_clamp(t, a.qmax);
}

/* Pass 2, a thread per byte of w (an int4 byte holds two elements, maybe of two blocks). */
static __global__ void qweight_kernel(const qw_args a)
{
    const int64_t per_row = a.kind == LH_SW_INT4 ? a.K / 2 : a.K, n_bytes = a.N * per_row;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_bytes; i += step) {
        const int64_t n = i / per_row, j = i % per_row;
        if (a.kind == LH_SW_INT4) {
            const int lo = quant_one(a, n, 2 * j), hi = quant_one(a, n, 2 * j + 1);
            a.w[i] = (uint8_t)(((unsigned)lo & 15u) | (((unsigned)hi & 15u) << 4));
        } else {
            a.w[i] = (uint8_t)quant_one(a, n, j);
        }
    }
}

lh_status lh_cuda_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                  int64_t block_cols, lh_tensor *w, lh_tensor *scale,
                                  lh_scaled_qfail *fail)
{
    static const char fn[] = "lh_k_quantize_scaled";
    fail->bad_elem = -1;
    fail->bad_block = -1;
    const int64_t N = src->shape[0], K = src->shape[1];
    if (N == 0 || K == 0)
        return LH_OK;
    /* the verdict comes back to the host, which a capture or dry run cannot do: refuse before
     * queuing anything (lh_cu_download words the error) */
    if (lh_cu_mode_of(ctx) != LH_CU_EAGER)
        return lh_cu_download(ctx, fn, nullptr, nullptr, 0);
    const int kind = sw_kind(w->dtype);
    const int64_t n_blocks = scale->shape[0] * scale->shape[1];
    const size_t o_ss = 256, o_amax = o_ss + round256((size_t)n_blocks * sizeof(float));
    lh_status st = LH_OK;
    unsigned char *mem = (unsigned char *)lh_cu_scratch(
        ctx, o_amax + (size_t)n_blocks * sizeof(float), &st);
    if (!mem)
        return st;
    qinit_args ia = {(qbad *)mem};
    if ((st = LH_CU_LAUNCH(ctx, qinit_kernel, dim3(1), dim3(1), 0, ia)) != LH_OK)
        return st;
    qs_args sa;
    memset(&sa, 0, sizeof sa);
    sa.src = src->data;
    sa.scale = scale->data;
    sa.ss = (float *)(mem + o_ss);
    sa.amax = (float *)(mem + o_amax);
    sa.bad = (qbad *)mem;
    sa.N = N;
    sa.K = K;
    sa.br = block_rows;
    sa.bc = block_cols;
    sa.scale_cols = scale->shape[1];
    sa.n_blocks = n_blocks;
    sa.qmax = kind == LH_SW_INT8 ? 127.0f : kind == LH_SW_INT4 ? 7.0f : 448.0f;
    sa.sdt = (int)src->dtype;
    sa.scale_f16 = scale->dtype == LH_DTYPE_F16;
    const dim3 grid(n_blocks < 65535 ? (unsigned)n_blocks : 65535u);
    if ((st = LH_CU_LAUNCH(ctx, qscale_kernel, grid, dim3(SC_THREADS), 0, sa)) != LH_OK)
        return st;
    qw_args wa;
    memset(&wa, 0, sizeof wa);
    wa.src = src->data;
    wa.w = (uint8_t *)w->data;
    wa.ss = sa.ss;
    wa.N = N;
    wa.K = K;
    wa.br = block_rows;
    wa.bc = block_cols;
    wa.scale_cols = sa.scale_cols;
    wa.qmax = sa.qmax;
    wa.sdt = sa.sdt;
    wa.kind = kind;
    const int64_t n_bytes = N * (kind == LH_SW_INT4 ? K / 2 : K);
    if ((st = LH_CU_LAUNCH(ctx, qweight_kernel, dim3(sc_blocks(n_bytes)), dim3(SC_THREADS), 0,
                           wa)) != LH_OK)
        return st;

    /* the verdict (this waits: quantizing is load-time work, never inside a graph step) */
    qbad bad;
    if ((st = lh_cu_download(ctx, fn, &bad, mem, sizeof bad)) != LH_OK)
        return st;
    if (bad.elem != ~0ull) {
        fail->bad_elem = (int64_t)bad.elem;
        const size_t esz = src->dtype == LH_DTYPE_F32 ? 4 : 2;
        uint32_t bits = 0;
        if ((st = lh_cu_download(ctx, fn, &bits, (const unsigned char *)src->data + bad.elem * esz,
                                 esz)) != LH_OK)
            return st;
        const uint32_t mant = src->dtype == LH_DTYPE_F32    ? 0x7fffffu
                              : src->dtype == LH_DTYPE_BF16 ? 0x7fu
                                                            : 0x3ffu;
        fail->bad_nan = (bits & mant) != 0;
    } else if (bad.block != ~0ull) {
        fail->bad_block = (int64_t)bad.block;
        if ((st = lh_cu_download(ctx, fn, &fail->bad_amax, sa.amax + bad.block,
                                 sizeof(float))) != LH_OK)
            return st;
    }
    return LH_OK;
}
