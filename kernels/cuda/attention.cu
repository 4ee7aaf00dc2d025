/* lh_cuda_attention: attention of one sequence over a contiguous KV cache, the kernel of the
 * `vanilla` backend on the GPU and the twin of kernels/cpu/attention.c (lh_cpu_attention):
 *   q [T, H, D], k [S, KVH, D], v [S, KVH, Dv], out [T, H, Dv], all f32; query head h reads
 *   kv head h / (H / KVH); token t sees cache positions p with p <= q_pos[t] and, for
 *   sliding_window > 0, p > q_pos[t] - sliding_window; scores (q . k) * scale in f32, a
 *   max-subtracted softmax, and the softmax-weighted sum of v.
 *
 * It is the GPU's reference, so it is written for clarity: one block of AT_THREADS threads per
 * (token, head), keys visited in chunks of AT_CHUNK with an online softmax (running max m,
 * running sum l, accumulator rescaled by e^(m_old - m_new) per chunk) held by warp 0 (m, l) and
 * in registers (the accumulator: thread i owns output dims i, i + AT_THREADS, ...). Per chunk:
 * each warp computes the scores of some keys (lanes split the head dim, shuffle reduction),
 * warp 0 turns the chunk's scores into weights, every thread adds its dims of the weighted v
 * rows. The output is acc * (1 / l). Against the CPU (which forms e^(s - max) with the final
 * max, normalizes the weights, then sums) the results differ by float rounding only: the
 * per-chunk rescaling and the order of the sums.
 *
 * q_pos is staged; the loop bounds are read on the device, so the launch depends on T, H and
 * the head dims only (graph replay). Head dims up to AT_MAX_D (512); larger ones are
 * LH_E_UNSUPPORTED. */
#include "cuda_rt.h"

#include <string.h>

#define AT_THREADS 128
#define AT_WARPS (AT_THREADS / 32)
#define AT_CHUNK 32 /* keys per chunk: one per lane of warp 0 */
#define AT_KPW (AT_CHUNK / AT_WARPS) /* keys each warp scores per chunk */
#define AT_MAX_D 512
#define AT_DV_PER (AT_MAX_D / AT_THREADS)
#define AT_MAX_BLOCKS (1u << 20)

struct attn_args {
    const float *q, *k, *v;
    float *out;
    const int32_t *q_pos; /* staged [T] */
    int64_t T, H, KVH, D, Dv, group;
    int64_t window; /* > 0: sliding window */
    float scale;
    int pad_;
};

static __global__ void __launch_bounds__(AT_THREADS) attention_kernel(const attn_args a)
{
    __shared__ float sq[AT_MAX_D];
    __shared__ float sc[AT_CHUNK]; /* the chunk's scores */
    __shared__ float pw[AT_CHUNK]; /* the chunk's weights e^(s - m) */
    __shared__ float s_corr, s_l;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t D = a.D, Dv = a.Dv;
    const int64_t kstride = a.KVH * D, vstride = a.KVH * Dv;

    for (int64_t bid = blockIdx.x; bid < a.T * a.H; bid += gridDim.x) {
        const int64_t t = bid / a.H, h = bid % a.H, kvh = h / a.group;
        const int64_t pos = a.q_pos[t];
        int64_t lo = 0;
        if (a.window > 0 && pos - a.window + 1 > 0)
            lo = pos - a.window + 1; /* keep p > pos - window */

        const float *qv = a.q + bid * D; /* bid == t * H + h */
        for (int64_t d = tid; d < D; d += AT_THREADS)
            sq[d] = qv[d];
        __syncthreads();

        const float *kb = a.k + kvh * D;
        const float *vb = a.v + kvh * Dv;
        float acc[AT_DV_PER];
#pragma unroll
        for (int i = 0; i < AT_DV_PER; i++)
            acc[i] = 0.0f;
        float m_run = -INFINITY, l_run = 0.0f; /* meaningful in warp 0 */

        for (int64_t c0 = lo; c0 <= pos; c0 += AT_CHUNK) {
            const int nk = pos - c0 + 1 < AT_CHUNK ? (int)(pos - c0 + 1) : AT_CHUNK;
            /* warp w scores keys w, w + AT_WARPS, ...: all of them at once, so that each lane
             * has AT_KPW independent loads in flight */
            const float *kc = kb + c0 * kstride;
            float s[AT_KPW];
#pragma unroll
            for (int jj = 0; jj < AT_KPW; jj++)
                s[jj] = 0.0f;
            for (int64_t d = lane; d < D; d += 32) {
                const float qd = sq[d];
#pragma unroll
                for (int jj = 0; jj < AT_KPW; jj++) {
                    const int j = warp + jj * AT_WARPS;
                    if (j < nk)
                        s[jj] = fmaf(qd, kc[j * kstride + d], s[jj]);
                }
            }
#pragma unroll
            for (int jj = 0; jj < AT_KPW; jj++) {
                const int j = warp + jj * AT_WARPS;
                if (j < nk) { /* uniform over the warp */
                    const float dot = lh_cu_warp_sum(s[jj]);
                    if (lane == 0)
                        sc[j] = dot * a.scale;
                }
            }
            __syncthreads();
            if (warp == 0) {
                const float sj = lane < nk ? sc[lane] : -INFINITY;
                const float m_new = lh_cu_max_gt(m_run, lh_cu_warp_max(sj));
                /* -inf scores weigh 0 even while the running max is still -inf */
                const float p = sj != -INFINITY ? expf(sj - m_new) : 0.0f;
                const float corr = m_run != -INFINITY ? expf(m_run - m_new) : 0.0f;
                l_run = l_run * corr + lh_cu_warp_sum(p);
                m_run = m_new;
                pw[lane] = p;
                if (lane == 0)
                    s_corr = corr;
            }
            __syncthreads();
            const float corr = s_corr;
#pragma unroll
            for (int i = 0; i < AT_DV_PER; i++) {
                const int64_t d = tid + (int64_t)i * AT_THREADS;
                if (d < Dv) {
                    const float *vc = vb + c0 * vstride + d;
                    float o = acc[i] * corr;
#pragma unroll 8
                    for (int j = 0; j < nk; j++)
                        o = fmaf(pw[j], vc[j * vstride], o);
                    acc[i] = o;
                }
            }
        }

        if (tid == 0)
            s_l = l_run;
        __syncthreads();
        const float inv = 1.0f / s_l;
        float *o = a.out + bid * Dv;
#pragma unroll
        for (int i = 0; i < AT_DV_PER; i++) {
            const int64_t d = tid + (int64_t)i * AT_THREADS;
            if (d < Dv)
                o[d] = acc[i] * inv;
        }
        /* sq, sc, pw and s_l are rewritten by the next (token, head) only after barriers that
         * every thread reaches once done with them here. */
    }
}

lh_status lh_cuda_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                            const lh_tensor *v, const int32_t *q_pos, float scale,
                            int64_t sliding_window, lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    const int64_t KVH = k->shape[1], Dv = v->shape[2];
    if (T == 0 || H == 0)
        return LH_OK;
    if (D > AT_MAX_D || Dv > AT_MAX_D)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "lh_k_attention: CUDA: head_dim %lld (q, k) / %lld (v): the CUDA kernel "
                       "supports head dims up to %d",
                       (long long)D, (long long)Dv, AT_MAX_D);
    lh_status st = LH_OK;
    const int32_t *dpos =
        (const int32_t *)lh_cu_stage(ctx, q_pos, (size_t)T * sizeof(int32_t), &st);
    if (!dpos)
        return st;
    attn_args a;
    memset(&a, 0, sizeof a); /* hashed for graph replay: no stray padding bytes */
    a.q = (const float *)q->data;
    a.k = (const float *)k->data;
    a.v = (const float *)v->data;
    a.out = (float *)out->data;
    a.q_pos = dpos;
    a.T = T;
    a.H = H;
    a.KVH = KVH;
    a.D = D;
    a.Dv = Dv;
    a.group = H / KVH;
    a.window = sliding_window;
    a.scale = scale;
    const int64_t n = T * H;
    const unsigned blocks = n < (int64_t)AT_MAX_BLOCKS ? (unsigned)n : AT_MAX_BLOCKS;
    return LH_CU_LAUNCH(ctx, attention_kernel, dim3(blocks), dim3(AT_THREADS), 0, a);
}
