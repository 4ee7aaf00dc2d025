/* Private to the CUDA kernel files: y = x @ W^T (+ bias) for a weight that is not stored as
 * floats, with each element of W decoded where the kernel reads it. Two users: ggml's block
 * types (dequant.cu) and weights with separate scale tensors (scaled.cu). Each hands over a
 * decoder D, a small struct of pointers and sizes with
 *     __device__ float at(int64_t n, int64_t k) const;  // W[n][k], exactly as the CPU decodes it
 * so the f32 values that multiply are those of the CPU's exact path (lh_k_dequantize /
 * lh_k_dequantize_scaled followed by the f32 matmul); only the order of the sums differs.
 *
 * A thread block per (weight row, up to MD_MR x rows); its threads stride K, each decoding a
 * weight element once for all its x rows, fused multiply-adds into per-thread sums, then a warp
 * and a block reduction. |y - y_cpu| stays within 2 K 2^-24 sum_k |x w| (test_cuda_kernels.c).
 * Correctness first: every weight byte is read from L2 once per MD_MR x rows; a decode GEMV
 * that streams whole rows per warp and a tiled prefill GEMM are future work. */
#ifndef LH_CUDA_MATMUL_DECODED_CUH
#define LH_CUDA_MATMUL_DECODED_CUH

#include "cuda_rt.h"

#include <string.h>

#define MD_THREADS 256
#define MD_MR 8

template <class D> struct md_args {
    D dec;
    const float *x;
    const void *bias;
    float *y;
    int64_t M, N, K;
    int bias_dt;
    int pad_;
};

template <class D> static __global__ void __launch_bounds__(MD_THREADS) md_kernel(const md_args<D> a)
{
    __shared__ float red[MD_MR][MD_THREADS / 32];
    const int64_t mgroups = (a.M + MD_MR - 1) / MD_MR;
    for (int64_t t = blockIdx.x; t < a.N * mgroups; t += gridDim.x) {
        const int64_t n = t % a.N, m0 = (t / a.N) * MD_MR;
        const int mr = a.M - m0 < MD_MR ? (int)(a.M - m0) : MD_MR;
        float acc[MD_MR];
#pragma unroll
        for (int i = 0; i < MD_MR; i++)
            acc[i] = 0.0f;
        for (int64_t k = threadIdx.x; k < a.K; k += MD_THREADS) {
            const float wv = a.dec.at(n, k);
#pragma unroll
            for (int i = 0; i < MD_MR; i++)
                if (i < mr)
                    acc[i] = __fmaf_rn(a.x[(m0 + i) * a.K + k], wv, acc[i]);
        }
#pragma unroll
        for (int i = 0; i < MD_MR; i++) {
            const float v = lh_cu_warp_sum(acc[i]);
            if ((threadIdx.x & 31) == 0)
                red[i][threadIdx.x >> 5] = v;
        }
        __syncthreads();
        if ((int)threadIdx.x < mr) {
            float s = 0.0f;
            for (int wi = 0; wi < MD_THREADS / 32; wi++)
                s = __fadd_rn(s, red[threadIdx.x][wi]);
            if (a.bias)
                s = __fadd_rn(s, lh_cu_load(a.bias, a.bias_dt, n));
            a.y[(m0 + threadIdx.x) * a.N + n] = s;
        }
        __syncthreads();
    }
}

/* Queues the matmul (arguments checked by the dispatch; M, N > 0, K >= 0). */
template <class D>
static lh_status lh_cu_matmul_decoded(lh_kctx *ctx, const D &dec, const lh_tensor *x, int64_t N,
                                      const lh_tensor *bias, lh_tensor *y)
{
    md_args<D> a;
    memset(&a, 0, sizeof a);
    a.dec = dec;
    a.x = (const float *)x->data;
    a.bias = bias ? bias->data : NULL;
    a.bias_dt = bias ? (int)bias->dtype : (int)LH_DTYPE_F32;
    a.y = (float *)y->data;
    a.M = x->shape[0];
    a.K = x->shape[1];
    a.N = N;
    const int64_t tasks = a.N * ((a.M + MD_MR - 1) / MD_MR);
    const dim3 grid(tasks < 65535 ? (unsigned)tasks : 65535u), block(MD_THREADS);
    return LH_CU_LAUNCH(ctx, md_kernel<D>, grid, block, 0, a);
}

#endif
