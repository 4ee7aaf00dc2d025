/* Attention over a paged KV cache on CUDA, for a packed batch of sequences (the semantics of
 * lh_k_paged_attention_batch; CPU twin: cpu/paged_attention.c). Results match the CPU up to
 * float rounding (the partitioning differs; every partition's softmax is merged exactly).
 *
 * Metadata: one staged blob per call: row -> sequence [T] (-1: a row of no sequence, neither
 * read nor written), positions [T], the block tables as a dense int32 matrix [n_seqs, stride]
 * (stride: the context's max_blocks_per_seq bound when set), the RoPE frequencies per sequence
 * [n_seqs, rotary_dim / 2] (computed on the host: dynamic scaling depends on kv_len) and, for
 * prefill, the query tiles.
 *
 * Kernels:
 *  - pa_select_kernel (sparse only), grid (row, head): the top_k threshold of the row's
 *    candidate blocks. A block ranks by the 64-bit key (bound as an ordered uint, then the
 *    complement of its logical index), so "better" is "larger key" (ties to the lower block,
 *    NaN bounds mapped to -inf rank last) and the chosen blocks are exactly those with
 *    key >= the top_k-th largest key, found by a radix select over the keys in shared memory
 *    (in device scratch when the table stride's worth of keys does not fit). Only that
 *    threshold is kept ([T, H] keys): the attention kernels recompute a candidate's key with
 *    the same warp function on the same rotated q, which gives the same bits.
 *  - pa_decode_kernel (every sequence has n_new <= 8), grid (row, kv head x head chunk,
 *    partition): flash-decoding. A CTA takes up to 8 query heads of one kv head for one query
 *    row over one partition of PT positions, in chunks of PA_CH tokens with an online softmax;
 *    it writes the normalized partial output with its max and sum (or the output itself when
 *    there is one partition). The grid and the args depend only on T, the heads, head_dim, the
 *    SM count and the context's max_seq_len bound (else the call's longest kv_len): a
 *    partition outside a row's visible span exits at once, and pa_merge_kernel (grid (row,
 *    head)) finds the row's partitions from its staged position.
 *  - pa_prefill_kernel, grid (query tile, head): a tile is up to PF_BQ consecutive rows of
 *    one sequence; K and V tiles of PF_BK positions are decoded into shared memory and the
 *    online softmax runs over them (a warp owns a query row: its lanes are the tile's keys for
 *    the scores and the head dimensions for the weighted sum).
 * Head dims up to PA_DMAX (1024; multi-head latent attention attends over a latent of 576 with
 * one kv head, the pool's v being its k). Shared memory per CTA: decode keeps its query rows
 * in dynamic shared memory (PA_GH x D floats, 32 KiB at D = 1024) beside 13 KiB of static
 * arrays, under the default 48 KiB at every D; a thread owns D / 256 dimensions of the
 * weighted sum above D = 256 (pa_decode_kernel<DC>). Prefill needs
 * 256 + 4 BQ D + 4 BK (D + 1) + 512 bytes: 93,056 at D = 576 (BQ 8, BK 32), which every sm_80+
 * part allows (the smallest opt-in, sm_86 / sm_89, is 99 KiB); where BK = 32 would exceed
 * the device's opt-in (D = 1024: 164,736 bytes) the key tile is halved (BK 16: 99,136 bytes
 * at D = 1024). Each lane keeps D / 32 output sums (pa_prefill_kernel<NC>).
 * params->n_splits (the CPU's partitioning knob) is not used: the GPU picks its partitions from
 * the launch shape, and the results agree up to float rounding either way.
 * params->softcap > 0 soft-caps every score (pa_softcap, as the CPU's lh_cpu_attn_softcap)
 * before the online softmax in both attention kernels; sparse selection ranks by the raw
 * bound, as on the CPU. */
#include "lh_kernels.h"

/* cpu_kernels.h declares these without a C linkage block; declaring them extern "C" first
 * gives the later declarations C linkage too (they are defined in C). */
extern "C" {
lh_status lh_kerr(lh_kctx *ctx, lh_status st, const char *fmt, ...);
const float *lh_cpu_rope_inv(const lh_rope *rope, int64_t seq_len, float *buf);
}

#include "cuda_rt.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PA_THREADS 256
#define PA_WARPS (PA_THREADS / 32)
#define PA_DMAX 1024
/* decode: query heads per CTA at most, tokens per online-softmax chunk */
#define PA_GH 8
#define PA_CH 128
/* decode: partials kept at most (bytes), CTAs wanted per SM */
#define PA_PARTIAL_BYTES ((int64_t)256 << 20)
#define PA_CTAS_PER_SM 4
/* prefill: query rows per tile (head_dim <= 128; 8 above), key positions per tile */
#define PF_BQ 16
#define PF_BK 32
/* decode: the static shared arrays (sc, red, flags, sM / sL / sA) */
#define PA_DECODE_STATIC_SMEM                                                                 \
    ((size_t)PA_GH * PA_CH * 4 + (size_t)PA_THREADS * PA_GH * 4 + (size_t)PA_GH * (PA_CH + 2) + \
     3 * PA_GH * 4)

typedef unsigned long long u64;

typedef struct pa_args {
    const float *q;
    float *out;
    const unsigned char *k, *v;
    const float *k_scale, *v_scale, *k_min, *k_max;
    int k_dt, v_dt;
    int64_t block_elems, tok_stride, head_stride;
    int bs, kvh, H, G, D;
    float scale;
    float softcap; /* > 0: scores = softcap * tanh(scores / softcap) */
    int64_t window, chunk, local, top_k;
    int sparse;
    /* staged */
    const int32_t *row_seq, *pos, *tables, *tiles;
    int64_t tstride;
    const float *inv;
    int rope, rot;
    float att;
    int inter; /* interleaved RoPE pairs (2i, 2i + 1) */
    /* scratch */
    u64 *thr;           /* [T, H] sparse thresholds */
    u64 *sel_keys;      /* NULL: the selection's keys in shared memory; else [T, H, tstride] */
    float *pm, *ps, *po; /* decode partials: [T, H, NP] max, sum; [T, H, NP, D] output */
    /* decode */
    int64_t PT;
    int NP, GH, nch, direct;
    /* prefill */
    int BQ, BK;
} pa_args;

/* a score (q.k * scale) soft-capped as lh_cpu_attn_softcap does: divide, tanh, multiply */
static __device__ __forceinline__ float pa_softcap(const pa_args &a, float x)
{
    return a.softcap > 0.0f ? tanhf(x / a.softcap) * a.softcap : x;
}

/* first visible position for a query at pos (causal: the last is pos itself) */
static __device__ __forceinline__ int64_t pa_lo(const pa_args &a, int64_t pos)
{
    int64_t lo = 0;
    if (a.window > 0 && pos - a.window + 1 > lo)
        lo = pos - a.window + 1;
    if (a.chunk > 0 && pos / a.chunk * a.chunk > lo)
        lo = pos / a.chunk * a.chunk;
    return lo;
}

/* Element d of query row r, head h, rotated at pos with sequence s's frequencies as
 * lh_cpu_rope_cos_sin / rope_rot do (no FMA): the pair (lo, hi) of frequency i is (i, half + i),
 * or (2i, 2i + 1) interleaved; lo' = lo c - hi s, hi' = hi c + lo s. */
static __device__ float pa_q(const pa_args &a, int64_t r, int h, int d, int s, int32_t pos)
{
    const float *row = a.q + (r * a.H + h) * a.D;
    const float x = row[d];
    if (!a.rope || d >= a.rot)
        return x;
    const int half = a.rot / 2;
    const bool lo = a.inter ? (d & 1) == 0 : d < half;
    const int i = a.inter ? d >> 1 : lo ? d : d - half;
    const int partner = a.inter ? (lo ? d + 1 : d - 1) : (lo ? d + half : d - half);
    const float f = __fmul_rn((float)pos, a.inv[(int64_t)s * half + i]);
    const float c = __fmul_rn((float)cos((double)f), a.att);
    const float sn = __fmul_rn((float)sin((double)f), a.att);
    if (lo)
        return __fsub_rn(__fmul_rn(x, c), __fmul_rn(row[partner], sn));
    return __fadd_rn(__fmul_rn(x, c), __fmul_rn(row[partner], sn));
}

/* Where position t of sequence s lives for kv head kvh: the element offset of its row and the
 * fp8 scale of its block (1 for the other dtypes). */
static __device__ __forceinline__ int64_t pa_row(const pa_args &a, int s, int64_t t, int kvh,
                                                 bool key, float *sc)
{
    /* positions are int32: 32-bit division (the 64-bit one is a long software sequence) */
    const int ti = (int)t;
    const int64_t phys = a.tables[(int64_t)s * a.tstride + ti / a.bs];
    const int dt = key ? a.k_dt : a.v_dt;
    *sc = dt == LH_DTYPE_FP8_E4M3 ? (key ? a.k_scale : a.v_scale)[phys * a.kvh + kvh] : 1.0f;
    return phys * a.block_elems + (int64_t)kvh * a.head_stride +
           (int64_t)(ti % a.bs) * a.tok_stride;
}

/* The rank key of logical block blk (physical phys) for the query qv (shared memory):
 * sum_d max(q_d kmin_d, q_d kmax_d) in a fixed order. Called by a whole warp; every lane gets
 * the same key (the butterfly adds the same two values on both lanes of a pair). */
static __device__ u64 pa_bound_key(const pa_args &a, const float *qv, int64_t phys, int kvh,
                                   int64_t blk)
{
    const int lane = threadIdx.x & 31;
    const int64_t so = (phys * a.kvh + kvh) * a.D;
    const float *mn = a.k_min + so, *mx = a.k_max + so;
    float s = 0.0f;
    for (int d = lane; d < a.D; d += 32) {
        const float p = __fmul_rn(qv[d], mn[d]), q = __fmul_rn(qv[d], mx[d]);
        s = __fadd_rn(s, p > q ? p : q);
    }
    for (int o = 16; o > 0; o >>= 1)
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (s != s)
        s = -INFINITY; /* a NaN bound ranks lowest */
    uint32_t u = __float_as_uint(s);
    if ((u & 0x7fffffffu) == 0u)
        u = 0u; /* -0 and +0 tie */
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)u << 32) | (u64)(0xffffffffu - (uint32_t)blk);
}

/* Whether query row r, head h (at pos, first visible lo) attends to logical block blk of its
 * sequence s (blk inside its visible blocks). Called by a whole warp. */
static __device__ bool pa_chosen(const pa_args &a, const float *qv, int64_t r, int h, int s,
                                 int64_t pos, int64_t lo, int64_t blk)
{
    const int64_t vb0 = lo / a.bs, vb1 = pos / a.bs;
    if (blk < vb0 || blk > vb1)
        return false;
    const int64_t lb0 = vb0 > vb1 - a.local + 1 ? vb0 : vb1 - a.local + 1;
    if (blk >= lb0)
        return true; /* a local block */
    const u64 thr = a.thr[r * a.H + h];
    if (thr == 0ull)
        return true; /* top_k covers every candidate */
    if (thr == ~0ull)
        return false; /* top_k 0 */
    const int64_t phys = a.tables[(int64_t)s * a.tstride + blk];
    return pa_bound_key(a, qv, phys, h / a.G, blk) >= thr;
}

/* ---- sparse selection ------------------------------------------------------------------------ */

static __global__ void pa_select_kernel(const pa_args a)
{
    const int64_t r = blockIdx.x;
    const int h = blockIdx.y;
    const int s = a.row_seq[r];
    if (s < 0)
        return;
    const int64_t pos = a.pos[r], lo = pa_lo(a, pos);
    const int64_t vb0 = lo / a.bs, vb1 = pos / a.bs;
    const int64_t lb0 = vb0 > vb1 - a.local + 1 ? vb0 : vb1 - a.local + 1;
    const int64_t nc = lb0 - vb0, k = a.top_k;
    if (nc <= 0 || k <= 0 || k >= nc) {
        if (threadIdx.x == 0)
            a.thr[r * a.H + h] = (nc > 0 && k >= nc) ? 0ull : ~0ull;
        return;
    }
    extern __shared__ __align__(16) unsigned char pa_smem[];
    float *qv = (float *)(void *)pa_smem;
    const size_t qbytes = ((size_t)a.D * sizeof(float) + 15) / 16 * 16;
    u64 *keys = a.sel_keys ? a.sel_keys + (r * a.H + h) * a.tstride
                           : (u64 *)(void *)(pa_smem + qbytes);
    __shared__ unsigned hist[256];
    __shared__ unsigned s_bin, s_k;
    for (int d = threadIdx.x; d < a.D; d += blockDim.x)
        qv[d] = pa_q(a, r, h, d, s, (int32_t)pos);
    __syncthreads();
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t i = warp; i < nc; i += nw) {
        const int64_t blk = vb0 + i;
        const u64 key = pa_bound_key(a, qv, a.tables[(int64_t)s * a.tstride + blk], h / a.G, blk);
        if ((threadIdx.x & 31) == 0)
            keys[i] = key;
    }
    __syncthreads();
    /* radix select, 8 bits at a time from the top: the k-th largest key (keys are distinct) */
    u64 prefix = 0, mask = 0;
    unsigned kr = (unsigned)k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x)
            hist[i] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < nc; i += blockDim.x) {
            const u64 key = keys[i];
            if ((key & mask) == prefix)
                atomicAdd(&hist[(unsigned)(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned c = kr;
            int bin = 255;
            for (; bin > 0; bin--) {
                if (hist[bin] >= c)
                    break;
                c -= hist[bin];
            }
            s_bin = (unsigned)bin;
            s_k = c;
        }
        __syncthreads();
        prefix |= (u64)s_bin << shift;
        mask |= (u64)0xff << shift;
        kr = s_k;
        __syncthreads(); /* s_bin, s_k and hist are rewritten in the next round */
    }
    if (threadIdx.x == 0)
        a.thr[r * a.H + h] = prefix;
}

/* ---- decode ---------------------------------------------------------------------------------- */

static __device__ __forceinline__ float pa_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* DC: dimensions of the weighted sum per thread (head_dim <= DC * PA_THREADS). A CTA's query
 * rows (GH of them, D floats each) are dynamic shared memory. */
template <int DC>
static __global__ void __launch_bounds__(PA_THREADS) pa_decode_kernel(const pa_args a)
{
    const int64_t r = blockIdx.x;
    const int s = a.row_seq[r];
    if (s < 0)
        return;
    const int kvh = blockIdx.y / a.nch, hc = blockIdx.y % a.nch;
    const int h0 = kvh * a.G + hc * a.GH;
    const int nh = a.G - hc * a.GH < a.GH ? a.G - hc * a.GH : a.GH;
    if (nh <= 0)
        return;
    const int32_t pos32 = a.pos[r];
    const int64_t pos = pos32, lo = pa_lo(a, pos), p = blockIdx.z;
    const int64_t pa = lo > p * a.PT ? lo : p * a.PT;
    const int64_t pb = pos < p * a.PT + a.PT - 1 ? pos : p * a.PT + a.PT - 1;
    if (pa > pb)
        return; /* nothing of this partition is visible (the merge skips it too) */

    extern __shared__ __align__(16) unsigned char pa_smem[];
    float *qs = (float *)(void *)pa_smem; /* [GH][D] */
    __shared__ float sc[PA_GH][PA_CH];
    __shared__ float red[PA_THREADS * PA_GH];
    __shared__ unsigned char flags[PA_GH][PA_CH + 2];
    __shared__ float sM[PA_GH], sL[PA_GH], sA[PA_GH];
    const int D = a.D, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int i = tid; i < nh * D; i += PA_THREADS)
        qs[i] = pa_q(a, r, h0 + i / D, i % D, s, pos32);
    if (tid < PA_GH) {
        sM[tid] = -INFINITY;
        sL[tid] = 0.0f;
    }
    /* the weighted sum: groups of DP threads (DP the power of two >= D, at most PA_THREADS:
     * one group above 128 dims), a thread owns dimensions dd + c DP (c < DC) of every head */
    int DP = 32;
    while (DP < D && DP < PA_THREADS)
        DP *= 2;
    const int ng = PA_THREADS / DP, grp = tid / DP, dd = tid % DP;
    float acc[DC][PA_GH];
#pragma unroll
    for (int c = 0; c < DC; c++)
#pragma unroll
        for (int hh = 0; hh < PA_GH; hh++)
            acc[c][hh] = 0.0f;
    __syncthreads();

    for (int64_t c0 = pa; c0 <= pb; c0 += PA_CH) {
        const int64_t c1 = pb < c0 + PA_CH - 1 ? pb : c0 + PA_CH - 1;
        const int n = (int)(c1 - c0 + 1);
        const int64_t bfirst = c0 / a.bs;
        if (a.sparse) {
            const int nbl = (int)(c1 / a.bs - bfirst + 1);
            for (int i = warp; i < nh * nbl; i += PA_WARPS) {
                const int hh = i / nbl, bl = i % nbl;
                const bool ch = pa_chosen(a, qs + hh * D, r, h0 + hh, s, pos, lo, bfirst + bl);
                if (lane == 0)
                    flags[hh][bl] = ch ? 1 : 0;
            }
            __syncthreads();
        }
        /* scores: a warp per position, its lanes over the dimensions */
        for (int j = warp; j < n; j += PA_WARPS) {
            const int64_t t = c0 + j;
            const int bl = (int)t / a.bs - (int)bfirst;
            bool any = !a.sparse;
            for (int hh = 0; hh < nh && !any; hh++)
                any = flags[hh][bl] != 0;
            if (!any) {
                if (lane < nh)
                    sc[lane][j] = -INFINITY;
                continue;
            }
            float ks;
            const int64_t off = pa_row(a, s, t, kvh, true, &ks);
            float part[PA_GH];
#pragma unroll
            for (int hh = 0; hh < PA_GH; hh++)
                part[hh] = 0.0f;
            for (int d = lane; d < D; d += 32) {
                const float kx = lh_cu_load(a.k, a.k_dt, off + d) * ks;
#pragma unroll
                for (int hh = 0; hh < PA_GH; hh++)
                    if (hh < nh)
                        part[hh] += qs[hh * D + d] * kx;
            }
#pragma unroll
            for (int hh = 0; hh < PA_GH; hh++) {
                if (hh >= nh)
                    break;
                const float dot = lh_cu_warp_sum(part[hh]);
                if (lane == 0)
                    sc[hh][j] =
                        (!a.sparse || flags[hh][bl]) ? pa_softcap(a, dot * a.scale) : -INFINITY;
            }
        }
        __syncthreads();
        /* online softmax: a warp per head */
        for (int hh = warp; hh < nh; hh += PA_WARPS) {
            float mx = -INFINITY;
            for (int j = lane; j < n; j += 32)
                mx = fmaxf(mx, sc[hh][j]);
            mx = pa_warp_max(mx);
            const float mold = sM[hh], mnew = fmaxf(mold, mx);
            float alpha = 1.0f, sum = 0.0f;
            if (mnew != -INFINITY) {
                alpha = expf(mold - mnew); /* 0 while nothing was seen */
                for (int j = lane; j < n; j += 32) {
                    const float e = sc[hh][j] == -INFINITY ? 0.0f : expf(sc[hh][j] - mnew);
                    sc[hh][j] = e;
                    sum += e;
                }
            } else {
                for (int j = lane; j < n; j += 32)
                    sc[hh][j] = 0.0f;
            }
            sum = lh_cu_warp_sum(sum);
            __syncwarp();
            if (lane == 0) {
                sL[hh] = sL[hh] * alpha + sum;
                sM[hh] = mnew;
                sA[hh] = alpha;
            }
        }
        __syncthreads();
        if (dd < D) {
#pragma unroll
            for (int c = 0; c < DC; c++)
#pragma unroll
                for (int hh = 0; hh < PA_GH; hh++)
                    if (hh < nh)
                        acc[c][hh] *= sA[hh];
            for (int j = grp; j < n; j += ng) {
                bool any = false;
#pragma unroll
                for (int hh = 0; hh < PA_GH; hh++)
                    if (hh < nh && sc[hh][j] != 0.0f)
                        any = true;
                if (!any)
                    continue;
                float vs;
                const int64_t off = pa_row(a, s, c0 + j, kvh, false, &vs);
#pragma unroll
                for (int c = 0; c < DC; c++) {
                    const int d = dd + c * DP;
                    if (d >= D)
                        break;
                    const float vx = lh_cu_load(a.v, a.v_dt, off + d) * vs;
#pragma unroll
                    for (int hh = 0; hh < PA_GH; hh++)
                        if (hh < nh && sc[hh][j] != 0.0f)
                            acc[c][hh] += sc[hh][j] * vx;
                }
            }
        }
        __syncthreads(); /* sc and flags are rewritten by the next chunk */
    }

    if (ng == 1) {
        /* one group (head_dim > PA_THREADS / 2): every sum is whole in its thread */
#pragma unroll
        for (int c = 0; c < DC; c++) {
            const int d = dd + c * DP;
            if (d >= D)
                break;
#pragma unroll
            for (int hh = 0; hh < PA_GH; hh++) {
                if (hh >= nh)
                    break;
                const float l = sL[hh];
                const float o = l > 0.0f ? acc[c][hh] / l : 0.0f;
                const int64_t rh = r * a.H + h0 + hh;
                if (a.direct)
                    a.out[rh * D + d] = o;
                else
                    a.po[(rh * a.NP + p) * D + d] = o;
            }
        }
    } else {
        if (dd < D)
#pragma unroll
            for (int hh = 0; hh < PA_GH; hh++)
                if (hh < nh)
                    red[(grp * PA_GH + hh) * D + dd] = acc[0][hh];
        __syncthreads();
        for (int i = tid; i < nh * D; i += PA_THREADS) {
            const int hh = i / D, d = i % D;
            float o = 0.0f;
            for (int g = 0; g < ng; g++)
                o += red[(g * PA_GH + hh) * D + d];
            const float l = sL[hh];
            o = l > 0.0f ? o / l : 0.0f;
            const int64_t rh = r * a.H + h0 + hh;
            if (a.direct)
                a.out[rh * D + d] = o;
            else
                a.po[(rh * a.NP + p) * D + d] = o;
        }
    }
    if (!a.direct && tid < nh) {
        const int64_t i = (r * a.H + h0 + tid) * a.NP + p;
        a.pm[i] = sL[tid] > 0.0f ? sM[tid] : -INFINITY;
        a.ps[i] = sL[tid];
    }
}

/* out = sum_i w_i o_i over the row's partitions, w_i = s_i e^(m_i - M) / sum_j s_j e^(m_j - M)
 * (in double, as the CPU merge) */
static __global__ void pa_merge_kernel(const pa_args a)
{
    const int64_t r = blockIdx.x;
    const int h = blockIdx.y;
    if (a.row_seq[r] < 0)
        return;
    const int64_t pos = a.pos[r], lo = pa_lo(a, pos);
    const int64_t p0 = lo / a.PT, p1 = pos / a.PT;
    const int64_t base = (r * a.H + h) * a.NP;
    float M = -INFINITY;
    for (int64_t p = p0; p <= p1; p++)
        if (a.ps[base + p] > 0.0f && a.pm[base + p] > M)
            M = a.pm[base + p];
    double sum = 0.0;
    for (int64_t p = p0; p <= p1; p++) {
        const float sv = a.ps[base + p];
        if (sv > 0.0f)
            sum += (double)sv * exp((double)a.pm[base + p] - (double)M);
    }
    for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t p = p0; p <= p1 && sum > 0.0; p++) {
            const float sv = a.ps[base + p];
            if (!(sv > 0.0f))
                continue;
            const double w = (double)sv * exp((double)a.pm[base + p] - (double)M) / sum;
            if (w > 0.0)
                o += (float)w * a.po[(base + p) * a.D + d];
        }
        a.out[(r * a.H + h) * a.D + d] = o;
    }
}

/* ---- prefill --------------------------------------------------------------------------------- */

/* NC: head dimensions per lane (head_dim <= 32 NC); a.BK key positions per tile (PF_BK, or
 * PF_BK / 2 where a tile of PF_BK keys of the head dim would not fit the device's shared
 * memory). */
template <int NC>
static __global__ void __launch_bounds__(PA_THREADS) pa_prefill_kernel(const pa_args a)
{
    const int32_t *tile = a.tiles + (int64_t)blockIdx.x * 3;
    const int64_t row0 = tile[0];
    const int nrows = tile[1], s = tile[2];
    const int h = blockIdx.y, kvh = h / a.G, D = a.D, BQ = a.BQ, KS = D + 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    extern __shared__ __align__(16) unsigned char pa_smem[];
    int64_t *rlo = (int64_t *)(void *)pa_smem, *rpos = rlo + PF_BQ;
    float *qs = (float *)(void *)(rpos + PF_BQ);      /* [BQ][D] */
    float *kt = qs + BQ * D;                           /* [BK][D + 1]: keys, then values */
    unsigned char *fl = (unsigned char *)(kt + a.BK * KS); /* [BQ][PF_BK] chosen blocks */
    if (tid < PF_BQ) {
        if (tid < nrows) {
            rpos[tid] = a.pos[row0 + tid];
            rlo[tid] = pa_lo(a, rpos[tid]);
        } else {
            rpos[tid] = -1; /* sees nothing */
            rlo[tid] = 1;
        }
    }
    for (int i = tid; i < nrows * D; i += PA_THREADS)
        qs[i] = pa_q(a, row0 + i / D, h, i % D, s, a.pos[row0 + i / D]);
    __syncthreads();
    int64_t kmin = INT64_MAX, kmax = -1;
    for (int i = 0; i < nrows; i++) {
        kmin = rlo[i] < kmin ? rlo[i] : kmin;
        kmax = rpos[i] > kmax ? rpos[i] : kmax;
    }
    const int RW = BQ / PA_WARPS; /* rows per warp: warp w owns rows w, w + 8 */
    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f}, pj[2] = {0.0f, 0.0f};
    float alpha[2] = {1.0f, 1.0f};
    float acc[2][NC];
#pragma unroll
    for (int ri = 0; ri < 2; ri++)
#pragma unroll
        for (int c = 0; c < NC; c++)
            acc[ri][c] = 0.0f;

    const int BK = a.BK;
    for (int64_t t0 = kmin; t0 <= kmax; t0 += BK) {
        const int n = (int)(kmax - t0 + 1 < BK ? kmax - t0 + 1 : BK);
        bool need = false; /* the same answer in every thread */
        for (int i = 0; i < nrows && !need; i++)
            need = rlo[i] <= t0 + n - 1 && rpos[i] >= t0;
        if (!need)
            continue;
        __syncthreads(); /* the previous tile's values are no longer read */
        for (int j = warp; j < n; j += PA_WARPS) { /* a warp per position, lanes over d */
            float ks;
            const int64_t off = pa_row(a, s, t0 + j, kvh, true, &ks);
            for (int d = lane; d < D; d += 32)
                kt[j * KS + d] = lh_cu_load(a.k, a.k_dt, off + d) * ks;
        }
        const int64_t bfirst = t0 / a.bs;
        if (a.sparse) {
            const int nbl = (int)((t0 + n - 1) / a.bs - bfirst + 1);
            for (int i = warp; i < nrows * nbl; i += PA_WARPS) {
                const int qi = i / nbl, bl = i % nbl;
                const bool ch = pa_chosen(a, qs + qi * D, row0 + qi, h, s, rpos[qi], rlo[qi],
                                          bfirst + bl);
                if (lane == 0)
                    fl[qi * PF_BK + bl] = ch ? 1 : 0;
            }
        }
        __syncthreads();
        /* scores and the online softmax: lane j is position t0 + j (constant row indices:
         * the per-row state stays in registers) */
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            if (ri >= RW)
                break;
            const int i = warp + ri * PA_WARPS;
            const int64_t t = t0 + lane;
            bool vis = i < nrows && lane < n && t >= rlo[i] && t <= rpos[i];
            if (vis && a.sparse)
                vis = fl[i * PF_BK + (int)t / a.bs - (int)bfirst] != 0;
            float sv = -INFINITY;
            if (vis) {
                const float *qi = qs + i * D, *kj = kt + lane * KS;
                float dot = 0.0f;
                for (int d = 0; d < D; d++)
                    dot += qi[d] * kj[d];
                sv = pa_softcap(a, dot * a.scale);
            }
            const float mnew = fmaxf(M[ri], pa_warp_max(sv));
            float al = 1.0f, e = 0.0f;
            if (mnew != -INFINITY) {
                al = expf(M[ri] - mnew);
                e = vis ? expf(sv - mnew) : 0.0f;
            }
            L[ri] = L[ri] * al + lh_cu_warp_sum(e);
            M[ri] = mnew;
            alpha[ri] = al;
            pj[ri] = e;
        }
        __syncthreads(); /* the keys are no longer read */
        for (int j = warp; j < n; j += PA_WARPS) {
            float vs;
            const int64_t off = pa_row(a, s, t0 + j, kvh, false, &vs);
            for (int d = lane; d < D; d += 32)
                kt[j * KS + d] = lh_cu_load(a.v, a.v_dt, off + d) * vs;
        }
        __syncthreads();
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            if (ri >= RW)
                break;
#pragma unroll
            for (int c = 0; c < NC; c++)
                acc[ri][c] *= alpha[ri];
            for (int j = 0; j < n; j++) {
                const float w = __shfl_sync(0xffffffffu, pj[ri], j);
                if (w == 0.0f)
                    continue;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int d = lane + 32 * c;
                    if (d < D)
                        acc[ri][c] += w * kt[j * KS + d];
                }
            }
        }
    }
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        const int i = warp + ri * PA_WARPS;
        if (ri >= RW || i >= nrows)
            continue;
        float *o = a.out + ((row0 + i) * a.H + h) * D;
        const float l = L[ri];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int d = lane + 32 * c;
            if (d < D)
                o[d] = l > 0.0f ? acc[ri][c] / l : 0.0f;
        }
    }
}

/* ---- host ------------------------------------------------------------------------------------ */

static size_t pa_align(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Allows `bytes` of dynamic shared memory for kernel fn: beyond the default 48 KiB per block,
 * which the kernel's static shared memory counts against as well, it must opt in. */
static lh_status pa_smem_optin(lh_kctx *ctx, const char *fn, const void *kernel, size_t bytes,
                               const char *what)
{
    cudaFuncAttributes fa;
    LH_CU_CHECK(ctx, cudaFuncGetAttributes(&fa, kernel));
    if (bytes + fa.sharedSizeBytes <= 48 * 1024)
        return LH_OK;
    int maxb = 0;
    LH_CU_CHECK(ctx, cudaDeviceGetAttribute(&maxb, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                            lh_cu_device_index(ctx)));
    if (bytes + fa.sharedSizeBytes > (size_t)maxb)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: CUDA: %s needs %zu bytes of shared memory, the device allows %d", fn,
                       what, bytes + fa.sharedSizeBytes, maxb);
    LH_CU_CHECK(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)bytes));
    return LH_OK;
}

extern "C" lh_status lh_cuda_paged_attention(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                                             const lh_cpu_pages *kv, const lh_cpu_batch *b,
                                             const lh_cpu_attn_params *prm, lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    if (T == 0 || H == 0 || D == 0)
        return LH_OK;
    if (D > PA_DMAX)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: CUDA: head_dim %" PRId64 " is not supported (at most %d)", fn, D,
                       PA_DMAX);
    const int64_t KVH = kv->kv_heads, G = H / KVH, bs = kv->block_size;
    const bool sparse = prm->local > 0;

    int64_t n_act = 0, max_kv = 0, need_blocks = 0, n_tiles = 0;
    bool decode = true;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s];
        if (n <= 0)
            continue;
        n_act++;
        max_kv = b->kv_len[s] > max_kv ? b->kv_len[s] : max_kv;
        const int64_t nb = (b->kv_len[s] + bs - 1) / bs;
        need_blocks = nb > need_blocks ? nb : need_blocks;
        if (n > 8)
            decode = false;
    }
    if (n_act == 0)
        return LH_OK;
    const int BQ = D <= 128 ? PF_BQ : PF_BQ / 2;
    if (!decode)
        for (int64_t s = 0; s < b->n_seqs; s++)
            if (b->n_new[s] > 0)
                n_tiles += (b->n_new[s] + BQ - 1) / BQ;
    int64_t bound_len = 0, bound_blocks = 0;
    lh_cu_bounds(ctx, &bound_len, &bound_blocks);
    /* the bounds make the sizes depend on shapes only; a call beyond them (refused by the
     * dispatch) would still be computed correctly */
    const int64_t stride = bound_blocks > need_blocks ? bound_blocks : need_blocks;
    const int64_t L = bound_len > max_kv ? bound_len : max_kv;
    if (T > INT32_MAX || H > 65535 || n_tiles > INT32_MAX || b->n_seqs > INT32_MAX)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: CUDA: %" PRId64 " rows of %" PRId64 " heads exceed the launch limits",
                       fn, T, H);

    /* decode launch shape: heads per CTA, partitions */
    const int64_t nch = (G + PA_GH - 1) / PA_GH, GH = (G + nch - 1) / nch;
    int64_t NP = 1, PT = L;
    if (decode) {
        const int64_t base = T * KVH * nch;
        const int64_t want = (int64_t)PA_CTAS_PER_SM * lh_cu_sm_count(ctx);
        int64_t np = (want + base - 1) / base;
        const int64_t np_len = (L + PA_CH - 1) / PA_CH;
        const int64_t np_mem = PA_PARTIAL_BYTES / (T * H * (D + 2) * (int64_t)sizeof(float));
        np = np < np_len ? np : np_len;
        np = np < np_mem ? np : np_mem;
        if (np < 1)
            np = 1;
        PT = ((L + np - 1) / np + PA_CH - 1) / PA_CH * PA_CH;
        NP = (L + PT - 1) / PT;
        if (NP < 1)
            NP = 1;
        if (NP > 65535 || KVH * nch > 65535)
            return lh_kerr(ctx, LH_E_UNSUPPORTED,
                           "%s: CUDA: %" PRId64 " context partitions exceed the launch limits",
                           fn, NP);
    }

    /* host metadata, staged as one blob */
    const int64_t half = prm->rope ? prm->rope->rotary_dim / 2 : 0;
    const size_t sz_rows = pa_align((size_t)T * sizeof(int32_t));
    const size_t sz_tab = pa_align((size_t)(b->n_seqs * stride) * sizeof(int32_t));
    const size_t sz_inv = pa_align((size_t)(b->n_seqs * half) * sizeof(float));
    const size_t sz_tiles = pa_align((size_t)(n_tiles * 3) * sizeof(int32_t));
    const size_t total = 2 * sz_rows + sz_tab + sz_inv + sz_tiles;
    unsigned char *blob = (unsigned char *)calloc(1, total);
    if (!blob)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu bytes of host staging)", fn,
                       total);
    int32_t *row_seq = (int32_t *)(void *)blob;
    int32_t *pos = (int32_t *)(void *)(blob + sz_rows);
    int32_t *tab = (int32_t *)(void *)(blob + 2 * sz_rows);
    float *inv = (float *)(void *)(blob + 2 * sz_rows + sz_tab);
    int32_t *tiles = (int32_t *)(void *)(blob + 2 * sz_rows + sz_tab + sz_inv);
    for (int64_t r = 0; r < T; r++)
        row_seq[r] = -1;
    for (int64_t s = 0, ti = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s], row0 = b->token_start[s];
        if (n <= 0)
            continue;
        for (int64_t i = 0; i < n; i++) {
            row_seq[row0 + i] = (int32_t)s;
            pos[row0 + i] = b->positions[row0 + i];
        }
        const int64_t nb = (b->kv_len[s] + bs - 1) / bs;
        memcpy(tab + s * stride, b->tables[s], (size_t)nb * sizeof(int32_t));
        if (prm->rope) {
            float *row = inv + s * half;
            const float *src = lh_cpu_rope_inv(prm->rope, b->kv_len[s], row);
            if (src != row)
                memcpy(row, src, (size_t)half * sizeof(float));
        }
        if (!decode)
            for (int64_t t0 = 0; t0 < n; t0 += BQ, ti++) {
                tiles[3 * ti] = (int32_t)(row0 + t0);
                tiles[3 * ti + 1] = (int32_t)(n - t0 < BQ ? n - t0 : BQ);
                tiles[3 * ti + 2] = (int32_t)s;
            }
    }
    lh_status st = LH_OK;
    unsigned char *dev = (unsigned char *)lh_cu_stage(ctx, blob, total, &st);
    free(blob);
    if (!dev)
        return st;

    /* the sparse selection keeps a row's candidate keys in shared memory when they fit (the
     * table stride bounds their number), else in device scratch */
    size_t sel_smem = 0, sz_keys = 0;
    if (sparse) {
        int maxb = 0;
        LH_CU_CHECK(ctx, cudaDeviceGetAttribute(&maxb, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                lh_cu_device_index(ctx)));
        /* the opt-in limit covers the kernel's static shared memory (hist) too */
        cudaFuncAttributes fa;
        LH_CU_CHECK(ctx, cudaFuncGetAttributes(&fa, (const void *)pa_select_kernel));
        sel_smem = ((size_t)D * sizeof(float) + 15) / 16 * 16;
        if (sel_smem + (size_t)stride * sizeof(u64) + fa.sharedSizeBytes <= (size_t)maxb)
            sel_smem += (size_t)stride * sizeof(u64);
        else
            sz_keys = pa_align((size_t)(T * H) * (size_t)stride * sizeof(u64));
    }

    /* device scratch: sparse thresholds (and keys), decode partials */
    const size_t sz_thr = sparse ? pa_align((size_t)(T * H) * sizeof(u64)) + sz_keys : 0;
    const size_t np_rows = decode && NP > 1 ? (size_t)(T * H * NP) : 0;
    const size_t sz_pm = pa_align(np_rows * sizeof(float));
    const size_t sz_po = pa_align(np_rows * (size_t)D * sizeof(float));
    unsigned char *scr = NULL;
    if (sz_thr + 2 * sz_pm + sz_po > 0) {
        scr = (unsigned char *)lh_cu_scratch(ctx, sz_thr + 2 * sz_pm + sz_po, &st);
        if (!scr)
            return st;
    }

    pa_args a;
    memset(&a, 0, sizeof a);
    a.q = (const float *)q->data;
    a.out = (float *)out->data;
    a.k = kv->k;
    a.v = kv->v;
    a.k_scale = kv->k_scale;
    a.v_scale = kv->v_scale;
    a.k_min = kv->k_min;
    a.k_max = kv->k_max;
    a.k_dt = (int)kv->k_dtype;
    a.v_dt = (int)kv->v_dtype;
    a.block_elems = kv->block_elems;
    a.tok_stride = kv->tok_stride;
    a.head_stride = kv->head_stride;
    a.bs = (int)bs;
    a.kvh = (int)KVH;
    a.H = (int)H;
    a.G = (int)G;
    a.D = (int)D;
    a.scale = prm->scale;
    a.softcap = prm->softcap;
    a.window = prm->window;
    a.chunk = prm->chunk;
    a.local = prm->local;
    a.top_k = prm->top_k;
    a.sparse = sparse ? 1 : 0;
    a.row_seq = (const int32_t *)(const void *)dev;
    a.pos = (const int32_t *)(const void *)(dev + sz_rows);
    a.tables = (const int32_t *)(const void *)(dev + 2 * sz_rows);
    a.inv = (const float *)(const void *)(dev + 2 * sz_rows + sz_tab);
    a.tiles = (const int32_t *)(const void *)(dev + 2 * sz_rows + sz_tab + sz_inv);
    a.tstride = stride;
    a.rope = prm->rope ? 1 : 0;
    a.rot = prm->rope ? (int)prm->rope->rotary_dim : 0;
    a.att = prm->rope ? prm->rope->attention_scaling : 1.0f;
    a.inter = prm->rope && prm->rope->interleaved ? 1 : 0;
    a.thr = sparse ? (u64 *)(void *)scr : NULL;
    a.sel_keys = sz_keys ? (u64 *)(void *)(scr + (sz_thr - sz_keys)) : NULL;
    a.pm = np_rows ? (float *)(void *)(scr + sz_thr) : NULL;
    a.ps = np_rows ? (float *)(void *)(scr + sz_thr + sz_pm) : NULL;
    a.po = np_rows ? (float *)(void *)(scr + sz_thr + 2 * sz_pm) : NULL;
    a.PT = PT;
    a.NP = (int)NP;
    a.GH = (int)GH;
    a.nch = (int)nch;
    a.direct = NP == 1 ? 1 : 0;
    a.BQ = BQ;
    a.BK = PF_BK;

    if (sparse) {
        lh_status e = pa_smem_optin(ctx, fn, (const void *)pa_select_kernel, sel_smem,
                                    "sparse block selection");
        if (e != LH_OK)
            return e;
        e = LH_CU_LAUNCH(ctx, pa_select_kernel, dim3((unsigned)T, (unsigned)H), dim3(PA_THREADS),
                         sel_smem, a);
        if (e != LH_OK)
            return e;
    }
    if (decode) {
        /* the query rows of a CTA in dynamic shared memory: at most PA_GH x PA_DMAX floats
         * (32 KiB), which with the static arrays stays under the default 48 KiB (no opt-in) */
        static_assert((size_t)PA_GH * PA_DMAX * sizeof(float) + PA_DECODE_STATIC_SMEM <=
                          48 * 1024,
                      "decode attention fits the default shared memory");
        const size_t qsmem = (size_t)GH * (size_t)D * sizeof(float);
        const int dc = (int)((D + PA_THREADS - 1) / PA_THREADS);
        lh_status e;
        const dim3 grid((unsigned)T, (unsigned)(KVH * nch), (unsigned)NP), blk(PA_THREADS);
        switch (dc) {
        case 1: e = LH_CU_LAUNCH(ctx, pa_decode_kernel<1>, grid, blk, qsmem, a); break;
        case 2: e = LH_CU_LAUNCH(ctx, pa_decode_kernel<2>, grid, blk, qsmem, a); break;
        case 3: e = LH_CU_LAUNCH(ctx, pa_decode_kernel<3>, grid, blk, qsmem, a); break;
        default: e = LH_CU_LAUNCH(ctx, pa_decode_kernel<4>, grid, blk, qsmem, a); break;
        }
        if (e != LH_OK || NP == 1)
            return e;
        const unsigned mt = (unsigned)((D + 31) / 32 * 32);
        return LH_CU_LAUNCH(ctx, pa_merge_kernel, dim3((unsigned)T, (unsigned)H), dim3(mt), 0, a);
    }
    /* prefill: the row bounds, BQ query rows, a tile of BK keys (then values) of D + 1 floats,
     * the chosen-block flags. D = 576 with BK = 32 takes 93,056 bytes (every sm_80+ part opts in
     * to 99 KiB or more); D = 1024 would take 164,736 bytes, so above what the device allows
     * the key tile halves (BK = 16: 99,136 bytes at D = 1024) */
    const int nc = D <= 128 ? 4 : D <= 256 ? 8 : D <= 576 ? 18 : 32;
    const void *pkern = nc == 4    ? (const void *)pa_prefill_kernel<4>
                        : nc == 8  ? (const void *)pa_prefill_kernel<8>
                        : nc == 18 ? (const void *)pa_prefill_kernel<18>
                                   : (const void *)pa_prefill_kernel<32>;
    int maxb = 0;
    LH_CU_CHECK(ctx, cudaDeviceGetAttribute(&maxb, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                            lh_cu_device_index(ctx)));
    cudaFuncAttributes fa;
    LH_CU_CHECK(ctx, cudaFuncGetAttributes(&fa, pkern));
    const auto prefill_smem = [&](int bk) {
        return 2 * PF_BQ * sizeof(int64_t) + (size_t)(BQ * D) * sizeof(float) +
               (size_t)(bk * (D + 1)) * sizeof(float) + (size_t)(PF_BQ * PF_BK);
    };
    a.BK = prefill_smem(PF_BK) + fa.sharedSizeBytes <= (size_t)maxb ? PF_BK : PF_BK / 2;
    const size_t smem = prefill_smem(a.BK);
    lh_status e = pa_smem_optin(ctx, fn, pkern, smem, "prefill attention");
    if (e != LH_OK)
        return e;
    const dim3 pgrid((unsigned)n_tiles, (unsigned)H), pblk(PA_THREADS);
    switch (nc) {
    case 4: return LH_CU_LAUNCH(ctx, pa_prefill_kernel<4>, pgrid, pblk, smem, a);
    case 8: return LH_CU_LAUNCH(ctx, pa_prefill_kernel<8>, pgrid, pblk, smem, a);
    case 18: return LH_CU_LAUNCH(ctx, pa_prefill_kernel<18>, pgrid, pblk, smem, a);
    default: return LH_CU_LAUNCH(ctx, pa_prefill_kernel<32>, pgrid, pblk, smem, a);
    }
}
