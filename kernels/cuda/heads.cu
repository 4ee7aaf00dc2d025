/* Per-head linear maps and strided copies on the device (lh_k_matmul_heads, lh_k_copy_view):
 * the twins of kernels/cpu/heads.c, for multi-head latent attention (the absorbed per-head
 * projections of the latent, the pieces of a fused projection seen as views).
 *
 * matmul_heads: for every head h, y[:, h, :] = x[:, h, :] @ W_h (W_h = w[h]^T when w_kn is
 * false, w[h] when true), x [T, H, K] and y [T, H, N] f32 views, w a 3-dim f32 / bf16 / f16
 * view; every view's last dimension is contiguous, the other strides are anything >= 0 (the
 * dispatch checked them, and that y overlaps nothing; a dimension of size 1 only ever indexes
 * 0, whatever its stride). K = 0 writes zeros (x and w are not read). A thread block
 * computes a tile of BM = 16 TM rows (t) by HB_BN columns (n) of one head: tiles of HB_BK
 * values of k of x and of W_h (each weight widened to f32, exactly) go through shared memory,
 * and every thread keeps TM x 4 sums in registers, one fused multiply-add per k in k's order.
 * So each y element is one sequential f32 sum over k, whatever T, the tiling or the device:
 * within 2 K 2^-24 sum_k |x w| of the CPU's sum (another order of f32 roundings). TM is 1 for
 * T <= 16 (decode: the weights stream once, no rows wasted), 4 above. The next tiles are
 * loaded into registers while the current ones are multiplied. Launch shapes depend on shapes
 * only.
 *
 * copy_view: one block per row of the last dimension (grid-stride over the rows), its threads
 * over the row; elements are copied as 32-bit patterns (NaN payloads kept, as the CPU's
 * copies). */
#include "cuda_rt.h"

#include <string.h>

#define HB_THREADS 256
#define HB_BN 64 /* columns (n) of a tile: 16 threads x 4 */
#define HB_BK 32 /* values of k per shared-memory tile */

/* ---- matmul_heads ---------------------------------------------------------------------------- */

struct heads_args {
    const float *x;
    const void *w;
    float *y;
    int64_t T, H, N, K;
    int64_t xs0, xs1;  /* x [T, H, K]: strides of t and h */
    int64_t ws0, ws1;  /* w [H, N, K] (w_kn false) or [H, K, N] (true): strides of h and dim 1 */
    int64_t ys0, ys1;  /* y [T, H, N] */
};

template <int WDT> __device__ __forceinline__ float hb_load(const void *w, int64_t i)
{
    if constexpr (WDT == LH_DTYPE_BF16)
        return lh_cu_bf16_to_f32(((const uint16_t *)w)[i]);
    else if constexpr (WDT == LH_DTYPE_F16)
        return lh_cu_f16_to_f32(((const uint16_t *)w)[i]);
    else
        return ((const float *)w)[i];
}

/* Block (tile of t, tile of n, head). Thread (ty, tx) = (tid / 16, tid % 16) owns rows
 * ty + 16 i (i < TM) and columns tx + 16 j (j < 4) of the tile. The shared tiles are stored
 * k-major with one float of padding per k, so the transposing stores do not collide in a
 * bank. */
template <int WDT, bool KN, int TM>
static __global__ void __launch_bounds__(HB_THREADS) heads_kernel(const heads_args a)
{
    constexpr int BM = 16 * TM;
    static_assert(BM * HB_BK % HB_THREADS == 0 && HB_BN * HB_BK % HB_THREADS == 0,
                  "whole tiles per thread");
    __shared__ float xs[HB_BK][BM + 1];
    __shared__ float ws[HB_BK][HB_BN + 1];
    const int tid = (int)threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int64_t t0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * HB_BN;
    const int64_t h = blockIdx.z;
    const float *xh = a.x + h * a.xs1;
    const unsigned char *wh =
        (const unsigned char *)a.w + (size_t)(h * a.ws0) * (WDT == LH_DTYPE_F32 ? 4u : 2u);

    constexpr int XPT = BM * HB_BK / HB_THREADS, WPT = HB_BN * HB_BK / HB_THREADS;
    float acc[TM][4];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;

    /* the next tiles' values, loaded into registers while the current ones are multiplied:
     * element e = tid + i * HB_THREADS of a tile; x along k (consecutive threads read
     * consecutive k of one row), w along its contiguous dimension (k for w [N, K], n for
     * w [K, N]) */
    float xr[XPT], wr[WPT];
    const auto load = [&](int64_t k0) {
#pragma unroll
        for (int i = 0; i < XPT; i++) {
            const int e = tid + i * HB_THREADS, r = e / HB_BK, kk = e % HB_BK;
            const int64_t t = t0 + r, k = k0 + kk;
            xr[i] = t < a.T && k < a.K ? xh[t * a.xs0 + k] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < WPT; i++) {
            const int e = tid + i * HB_THREADS;
            const int n = KN ? e % HB_BN : e / HB_BK, kk = KN ? e / HB_BN : e % HB_BK;
            const int64_t gn = n0 + n, gk = k0 + kk;
            wr[i] = gn < a.N && gk < a.K
                        ? hb_load<WDT>(wh, KN ? gk * a.ws1 + gn : gn * a.ws1 + gk)
                        : 0.0f;
        }
    };
    if (a.K > 0)
        load(0);
    for (int64_t k0 = 0; k0 < a.K; k0 += HB_BK) {
#pragma unroll
        for (int i = 0; i < XPT; i++) {
            const int e = tid + i * HB_THREADS;
            xs[e % HB_BK][e / HB_BK] = xr[i];
        }
#pragma unroll
        for (int i = 0; i < WPT; i++) {
            const int e = tid + i * HB_THREADS;
            const int n = KN ? e % HB_BN : e / HB_BK, kk = KN ? e / HB_BN : e % HB_BK;
            ws[kk][n] = wr[i];
        }
        __syncthreads();
        if (k0 + HB_BK < a.K)
            load(k0 + HB_BK);
#pragma unroll 8
        for (int kk = 0; kk < HB_BK; kk++) {
            float xv[TM], wv[4];
#pragma unroll
            for (int i = 0; i < TM; i++)
                xv[i] = xs[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++)
                wv[j] = ws[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = __fmaf_rn(xv[i], wv[j], acc[i][j]);
        }
        __syncthreads(); /* the tiles are rewritten by the next k0 */
    }

#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int64_t t = t0 + ty + 16 * i;
        if (t >= a.T)
            continue;
        float *yr = a.y + t * a.ys0 + h * a.ys1;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tx + 16 * j;
            if (n < a.N)
                yr[n] = acc[i][j];
        }
    }
}

template <int WDT, bool KN>
static lh_status heads_launch(lh_kctx *ctx, const heads_args &a, dim3 grid, bool wide)
{
    if (wide)
        return LH_CU_LAUNCH(ctx, (heads_kernel<WDT, KN, 4>), grid, dim3(HB_THREADS), 0, a);
    return LH_CU_LAUNCH(ctx, (heads_kernel<WDT, KN, 1>), grid, dim3(HB_THREADS), 0, a);
}

template <int WDT>
static lh_status heads_dt(lh_kctx *ctx, const heads_args &a, dim3 grid, bool wide, bool kn)
{
    return kn ? heads_launch<WDT, true>(ctx, a, grid, wide)
              : heads_launch<WDT, false>(ctx, a, grid, wide);
}

lh_status lh_cuda_matmul_heads(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w, bool w_kn,
                               lh_tensor *y)
{
    const int64_t T = x->shape[0], H = x->shape[1], K = x->shape[2], N = y->shape[2];
    if (T == 0 || H == 0 || N == 0)
        return LH_OK;
    const bool wide = T > 16; /* TM 4 */
    const int64_t bm = wide ? 64 : 16;
    const int64_t gx = (T + bm - 1) / bm, gy = (N + HB_BN - 1) / HB_BN;
    if (gx > INT32_MAX || gy > 65535 || H > 65535)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "lh_k_matmul_heads: CUDA: T %lld, N %lld or H %lld exceed the launch "
                       "limits",
                       (long long)T, (long long)N, (long long)H);
    heads_args a;
    memset(&a, 0, sizeof a); /* hashed for graph replay: no stray padding bytes */
    a.x = (const float *)x->data;
    a.w = w->data;
    a.y = (float *)y->data;
    a.T = T;
    a.H = H;
    a.N = N;
    a.K = K;
    a.xs0 = x->stride[0];
    a.xs1 = x->stride[1];
    a.ws0 = w->stride[0];
    a.ws1 = w->stride[1];
    a.ys0 = y->stride[0];
    a.ys1 = y->stride[1];
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)H);
    switch (w->dtype) {
    case LH_DTYPE_BF16: return heads_dt<LH_DTYPE_BF16>(ctx, a, grid, wide, w_kn);
    case LH_DTYPE_F16: return heads_dt<LH_DTYPE_F16>(ctx, a, grid, wide, w_kn);
    case LH_DTYPE_F32: return heads_dt<LH_DTYPE_F32>(ctx, a, grid, wide, w_kn);
    default:
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "lh_k_matmul_heads: CUDA: weight dtype %d is not supported (f32, bf16, "
                       "f16)",
                       (int)w->dtype);
    }
}

/* ---- copy_view ------------------------------------------------------------------------------- */

#define CV_MAX_BLOCKS 65535u

struct copy_view_args {
    uint32_t *dst;
    const uint32_t *src;
    int64_t shape[4];  /* leading dimensions of size 1 pad a view of fewer dims */
    int64_t ds[4], ss[4];
    int64_t rows;      /* shape[0] * shape[1] * shape[2] */
};

static __global__ void copy_view_kernel(const copy_view_args a)
{
    const int64_t n = a.shape[3];
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const int64_t i2 = row % a.shape[2], r01 = row / a.shape[2];
        const int64_t i1 = r01 % a.shape[1], i0 = r01 / a.shape[1];
        uint32_t *d = a.dst + i0 * a.ds[0] + i1 * a.ds[1] + i2 * a.ds[2];
        const uint32_t *s = a.src + i0 * a.ss[0] + i1 * a.ss[1] + i2 * a.ss[2];
        for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
            d[c * a.ds[3]] = s[c * a.ss[3]];
    }
}

lh_status lh_cuda_copy_view(lh_kctx *ctx, lh_tensor *dst, const lh_tensor *src)
{
    copy_view_args a;
    memset(&a, 0, sizeof a);
    const int nd = dst->ndim, pad = 4 - nd;
    for (int i = 0; i < 4; i++) {
        a.shape[i] = i < pad ? 1 : dst->shape[i - pad];
        a.ds[i] = i < pad ? 0 : dst->stride[i - pad];
        a.ss[i] = i < pad ? 0 : src->stride[i - pad];
        if (a.shape[i] == 0)
            return LH_OK;
    }
    a.dst = (uint32_t *)dst->data;
    a.src = (const uint32_t *)src->data;
    a.rows = a.shape[0] * a.shape[1] * a.shape[2];
    const int64_t n = a.shape[3];
    const unsigned threads = n <= 32 ? 32u : n <= 64 ? 64u : n <= 128 ? 128u : 256u;
    const unsigned blocks = a.rows < (int64_t)CV_MAX_BLOCKS ? (unsigned)a.rows : CV_MAX_BLOCKS;
    return LH_CU_LAUNCH(ctx, copy_view_kernel, dim3(blocks), dim3(threads), 0, a);
}
