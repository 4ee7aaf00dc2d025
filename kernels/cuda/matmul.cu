/* lh_cuda_matmul: y[M,N] = x[M,K] @ w[N,K]^T (+ bias[N]) on the GPU, the twin of
 * kernels/cpu/matmul.c (lh_cpu_matmul). x and y are f32; w and bias are f32, bf16 or f16, each
 * read in its own dtype (a model's bias is stored like its weights, but the dtypes are handled
 * independently).
 *
 * Two paths, chosen by shape only (so a decode step always takes the same one):
 *  - M <= 8 (decode, small batches): a hand-written GEMV. Decode is bound by streaming the
 *    weights once per step, so the kernel reads w in its stored dtype with 16-byte loads
 *    (8 bf16/f16 or 4 f32), several in flight per lane, accumulates in f32 registers and
 *    reduces with warp shuffles; x (a few rows, L1/L2-resident) is re-read per weight vector.
 *    A warp owns R rows of w (R = 4 when M > 2: every x value loaded then feeds four weight
 *    rows, which keeps the L1 traffic of x, M times the weights' bytes, from becoming the
 *    limit) and one or more warps split K when N alone would leave the SMs idle. Rows whose
 *    length is not a multiple of the vector, or unaligned pointers, take a scalar loop over
 *    the same mapping.
 *  - M > 8: cuBLAS GemmEx with f32 output and CUBLAS_COMPUTE_32F. For bf16/f16 weights, x is
 *    first rounded to w's dtype (tensor cores need both operands in it), then a separate kernel
 *    adds the bias.
 *
 * Tolerance consequence of the cuBLAS path: for bf16/f16 weights x is rounded to bf16/f16
 * (relative error up to 2^-8 for bf16, 2^-11 for f16 per element of x) before the f32-
 * accumulated products, whereas the CPU multiplies the f32 x by the widened weights. Results
 * therefore differ from the CPU by up to about 2^-8 (bf16) or 2^-11 (f16) times
 * sum_k |x_k w_k| per output element, far above f32 rounding: tests comparing M > 8 products
 * with bf16/f16 weights need a tolerance of that size (1e-2, 2e-3 relative to sum_k |x_k w_k|).
 * With f16 weights an |x| of 65520 or more becomes infinite (f16's range), so activations that
 * large give inf/NaN on this path where the CPU stays finite. The GEMV path (M <= 8) keeps x in
 * f32 and differs from the CPU only by the summation order. f32 weights use pure f32 GEMM
 * (CUBLAS_COMPUTE_32F; the context's handle keeps CUBLAS_DEFAULT_MATH, so no TF32).
 *
 * Graphs: the launch configuration depends on M, N, K, the dtypes, the pointers' alignment and
 * the device's SM count only. */
#include "cuda_rt.h"

#include <limits.h>
#include <string.h>

#define GV_WARPS 8
#define GV_THREADS (GV_WARPS * 32)
#define GV_MAXM 8 /* rows of x the GEMV path takes (the decode path) */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536u

/* ---- GEMV (M <= 8) ------------------------------------------------------------------------- */

struct gemv_args {
    const float *x;
    const void *w;
    const void *bias; /* NULL: none */
    float *y;
    int64_t N, K;
    int M;
    int bias_dt;
    int vec; /* 16-byte loads (K a multiple of the vector, x and w 16-byte aligned) */
    int wpr; /* warps per row group: 1, 2, 4 or 8 (they split K) */
};

/* The 4 (f32) or 8 (bf16, f16) weights of one 16-byte vector, widened to f32 (exactly). */
template <int WDT>
static __device__ __forceinline__ void unpack_w(const uint4 &v, float *f)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (WDT == LH_DTYPE_F32) {
            f[i] = __uint_as_float(u[i]);
        } else if constexpr (WDT == LH_DTYPE_BF16) {
            /* little endian: the lower half holds the element with the lower index */
            f[2 * i] = __uint_as_float(u[i] << 16);
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else {
            f[2 * i] = lh_cu_f16_to_f32((uint16_t)(u[i] & 0xffffu));
            f[2 * i + 1] = lh_cu_f16_to_f32((uint16_t)(u[i] >> 16));
        }
    }
}

/* Block of GV_WARPS warps; warp `warp` works on row group blockIdx.x * (GV_WARPS / wpr) +
 * warp / wpr (rows n0 .. n0 + R - 1 of w), and within it on the K slice of sub-warp
 * warp % wpr: lane units first, first + stride, ... (a unit is one 16-byte vector, or one
 * element on the scalar path). Rows past N are clamped to N - 1 (computed, never written) so
 * the inner loop has no row test. */
template <int WDT, int R>
static __global__ void __launch_bounds__(GV_THREADS) gemv_kernel(const gemv_args a)
{
    constexpr int VEC = WDT == LH_DTYPE_F32 ? 4 : 8;
    constexpr int ES = WDT == LH_DTYPE_F32 ? 4 : 2;
    constexpr int U = 4 / R; /* 16-byte weight loads in flight per row per iteration: R * U */
    static_assert(GV_MAXM * R <= 32, "one lane per output of a warp");
    __shared__ float red[GV_WARPS][32];

    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    const int wpr = a.wpr, sub = warp % wpr;
    const int64_t n0 = ((int64_t)blockIdx.x * (GV_WARPS / wpr) + warp / wpr) * R;
    const int M = a.M;
    const int64_t N = a.N, K = a.K;

    float acc[GV_MAXM][R];
#pragma unroll
    for (int m = 0; m < GV_MAXM; m++)
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[m][r] = 0.0f;

    if (n0 < N) {
        const int64_t stride = 32 * wpr, first = sub * 32 + lane;
        const unsigned char *wrow[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t n = n0 + r < N ? n0 + r : N - 1;
            wrow[r] = (const unsigned char *)a.w + (size_t)n * (size_t)K * ES;
        }
        if (a.vec) {
            const int64_t nvec = K / VEC;
            for (int64_t v = first; v < nvec; v += U * stride) {
                uint4 wv[U][R];
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int r = 0; r < R; r++)
                        wv[u][r] = v + u * stride < nvec
                                       ? __ldcs((const uint4 *)wrow[r] + v + u * stride)
                                       : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int64_t vu = v + u * stride;
                    if (vu < nvec) {
                        float wf[R][VEC];
#pragma unroll
                        for (int r = 0; r < R; r++)
                            unpack_w<WDT>(wv[u][r], wf[r]);
                        const float *xk = a.x + vu * VEC;
#pragma unroll
                        for (int m = 0; m < GV_MAXM; m++) {
                            if (m < M) {
                                float xf[VEC];
#pragma unroll
                                for (int q = 0; q < VEC / 4; q++) {
                                    const float4 t = __ldg((const float4 *)(xk + m * K) + q);
                                    xf[4 * q] = t.x;
                                    xf[4 * q + 1] = t.y;
                                    xf[4 * q + 2] = t.z;
                                    xf[4 * q + 3] = t.w;
                                }
#pragma unroll
                                for (int r = 0; r < R; r++)
#pragma unroll
                                    for (int e = 0; e < VEC; e++)
                                        acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
                            }
                        }
                    }
                }
            }
        } else {
            for (int64_t k = first; k < K; k += stride) {
                float wf[R];
#pragma unroll
                for (int r = 0; r < R; r++)
                    wf[r] = lh_cu_load(wrow[r], WDT, k);
#pragma unroll
                for (int m = 0; m < GV_MAXM; m++) {
                    if (m < M) {
                        const float xv = __ldg(a.x + m * K + k);
#pragma unroll
                        for (int r = 0; r < R; r++)
                            acc[m][r] = fmaf(xv, wf[r], acc[m][r]);
                    }
                }
            }
        }
    }

    /* Lane m * R + r ends up with the warp's sum for output (m, n0 + r). */
    float mine = 0.0f;
#pragma unroll
    for (int m = 0; m < GV_MAXM; m++) {
        if (m < M) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float s = lh_cu_warp_sum(acc[m][r]);
                if (lane == m * R + r)
                    mine = s;
            }
        }
    }
    if (wpr > 1) { /* uniform over the block */
        red[warp][lane] = mine;
        __syncthreads();
        if (sub == 0) {
            float s = 0.0f;
            for (int i = 0; i < wpr; i++)
                s += red[warp + i][lane];
            mine = s;
        }
    }
    if (sub == 0 && lane < M * R) {
        const int m = lane / R, r = lane % R;
        const int64_t n = n0 + r;
        if (n < N) {
            float yv = mine;
            if (a.bias)
                yv = mine + lh_cu_load(a.bias, a.bias_dt, n);
            a.y[(size_t)m * (size_t)N + (size_t)n] = yv;
        }
    }
}

template <int WDT, int R>
static lh_status launch_gemv(lh_kctx *ctx, unsigned blocks, const gemv_args &a)
{
    return LH_CU_LAUNCH(ctx, (gemv_kernel<WDT, R>), dim3(blocks), dim3(GV_THREADS), 0, a);
}

static lh_status gemv(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, const lh_tensor *bias,
                      lh_tensor *y, int64_t M, int64_t N, int64_t K)
{
    gemv_args a;
    memset(&a, 0, sizeof a); /* the bytes are hashed for graph replay: no stray padding */
    a.x = (const float *)x->data;
    a.w = w->data;
    a.bias = bias ? bias->data : NULL;
    a.y = (float *)y->data;
    a.N = N;
    a.K = K;
    a.M = (int)M;
    a.bias_dt = bias ? (int)bias->dtype : (int)LH_DTYPE_F32;
    const int64_t vec = w->dtype == LH_DTYPE_F32 ? 4 : 8;
    a.vec = K % vec == 0 && ((uintptr_t)x->data & 15u) == 0 && ((uintptr_t)w->data & 15u) == 0;

    /* More warps per row group while the row groups alone would leave most warp slots of
     * the GPU empty (memory-level parallelism is what a GEMV needs) and K is long enough to
     * give every lane of the split at least a full iteration. */
    const int R = M > 2 ? 4 : 1, U = 4 / R;
    const int64_t groups = (N + R - 1) / R;
    const int64_t units = a.vec ? K / vec : K;
    int64_t sms = lh_cu_sm_count(ctx);
    if (sms <= 0)
        sms = 1;
    int wpr = 1;
    while (wpr < GV_WARPS && groups * wpr < 32 * sms && units >= (int64_t)64 * wpr * U)
        wpr *= 2;
    a.wpr = wpr;
    const unsigned blocks = lh_cu_blocks(groups, GV_WARPS / wpr);

    switch (w->dtype) {
    case LH_DTYPE_BF16:
        return R == 1 ? launch_gemv<LH_DTYPE_BF16, 1>(ctx, blocks, a)
                      : launch_gemv<LH_DTYPE_BF16, 4>(ctx, blocks, a);
    case LH_DTYPE_F16:
        return R == 1 ? launch_gemv<LH_DTYPE_F16, 1>(ctx, blocks, a)
                      : launch_gemv<LH_DTYPE_F16, 4>(ctx, blocks, a);
    default:
        return R == 1 ? launch_gemv<LH_DTYPE_F32, 1>(ctx, blocks, a)
                      : launch_gemv<LH_DTYPE_F32, 4>(ctx, blocks, a);
    }
}

/* ---- helpers of the cuBLAS path ----------------------------------------------------------- */

struct to16_args {
    const float *x;
    uint16_t *dst;
    int64_t n;
    int bf16; /* 1: bf16, 0: f16 */
    int pad_;
};

static __global__ void to16_kernel(const to16_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.dst[i] = a.bf16 ? lh_cu_f32_to_bf16(a.x[i]) : lh_cu_f32_to_f16(a.x[i]);
}

/* y[m, n] = (assign ? 0 : y[m, n]) + bias[n] (bias NULL: + 0). */
struct bias_args {
    float *y;
    const void *bias;
    int64_t M, N;
    int bias_dt;
    int assign;
};

static __global__ void bias_kernel(const bias_args a)
{
    const int64_t total = a.M * a.N, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const float b = a.bias ? lh_cu_load(a.bias, a.bias_dt, i % a.N) : 0.0f;
        a.y[i] = a.assign ? b : a.y[i] + b;
    }
}

static unsigned ew_blocks(int64_t n)
{
    const unsigned b = lh_cu_blocks(n, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

static lh_status launch_bias(lh_kctx *ctx, const lh_tensor *bias, lh_tensor *y, int64_t M,
                             int64_t N, int assign)
{
    bias_args a;
    memset(&a, 0, sizeof a);
    a.y = (float *)y->data;
    a.bias = bias ? bias->data : NULL;
    a.M = M;
    a.N = N;
    a.bias_dt = bias ? (int)bias->dtype : (int)LH_DTYPE_F32;
    a.assign = assign;
    return LH_CU_LAUNCH(ctx, bias_kernel, dim3(ew_blocks(M * N)), dim3(EW_THREADS), 0, a);
}

/* Every argument of the GemmEx call, for the graph record. */
struct gemm_record {
    const void *A, *B;
    void *C;
    int64_t m, n, k;
    int32_t atype, btype, ctype, compute;
};

static lh_status gemm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, const lh_tensor *bias,
                      lh_tensor *y, int64_t M, int64_t N, int64_t K)
{
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "lh_k_matmul: CUDA: M %lld, N %lld or K %lld exceeds cuBLAS's int range",
                       (long long)M, (long long)N, (long long)K);
    const void *B = x->data;
    cudaDataType_t wtype = CUDA_R_32F;
    if (w->dtype != LH_DTYPE_F32) {
        wtype = w->dtype == LH_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
        lh_status st = LH_OK;
        void *xc = lh_cu_scratch(ctx, (size_t)M * (size_t)K * sizeof(uint16_t), &st);
        if (!xc)
            return st;
        to16_args c;
        memset(&c, 0, sizeof c);
        c.x = (const float *)x->data;
        c.dst = (uint16_t *)xc;
        c.n = M * K;
        c.bf16 = w->dtype == LH_DTYPE_BF16;
        st = LH_CU_LAUNCH(ctx, to16_kernel, dim3(ew_blocks(M * K)), dim3(EW_THREADS), 0, c);
        if (st != LH_OK)
            return st;
        B = xc;
    }

    /* Column-major view: y^T (N x M, ldc N) = op(A) B with A = w stored as K x N (lda K),
     * transposed, and B = x stored as K x M (ldb K). */
    gemm_record rec;
    memset(&rec, 0, sizeof rec);
    rec.A = w->data;
    rec.B = B;
    rec.C = y->data;
    rec.m = N;
    rec.n = M;
    rec.k = K;
    rec.atype = (int32_t)wtype;
    rec.btype = (int32_t)wtype;
    rec.ctype = (int32_t)CUDA_R_32F;
    rec.compute = (int32_t)CUBLAS_COMPUTE_32F;
    if (lh_cu_record(ctx, "gemm", &rec, sizeof rec)) {
        const float alpha = 1.0f, beta = 0.0f;
        LH_CUBLAS_CHECK(ctx, cublasGemmEx(lh_cu_cublas(ctx), CUBLAS_OP_T, CUBLAS_OP_N, (int)N,
                                          (int)M, (int)K, &alpha, w->data, wtype, (int)K, B, wtype,
                                          (int)K, &beta, y->data, CUDA_R_32F, (int)N,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (bias)
        return launch_bias(ctx, bias, y, M, N, 0);
    return LH_OK;
}

lh_status lh_cuda_matmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                         const lh_tensor *bias, lh_tensor *y)
{
    const int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (M == 0 || N == 0)
        return LH_OK;
    if (K == 0) /* empty sums: y = bias (or 0) */
        return launch_bias(ctx, bias, y, M, N, 1);
    if (lh_cu_is_block(w->dtype))
        return lh_cu_matmul_blocks(ctx, x, w, bias, y);
    if (M <= GV_MAXM)
        return gemv(ctx, x, w, bias, y, M, N, K);
    return gemm(ctx, x, w, bias, y, M, N, K);
}
