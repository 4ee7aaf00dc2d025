/* lh_cuda_attention: attention of one sequence over a contiguous KV cache, the kernel of the
 * `vanilla` backend on the GPU and the twin of kernels/cpu/attention.c (lh_cpu_attention):
 *   q [T, H, D], k [S, KVH, D], v [S, KVH, Dv], out [T, H, Dv], all f32; query head h reads
 *   kv head h / (H / KVH); token t sees cache positions p with p <= q_pos[t] and, for
 *   sliding_window > 0, p > q_pos[t] - sliding_window; scores (q . k) * scale in f32,
 *   soft-capped when softcap > 0 (softcap * tanh(score / softcap), Gemma 2), a max-subtracted
 *   softmax, and the softmax-weighted sum of v.
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

/* One kernel serves both entry points: the contiguous cache (ring 0: slot p holds position p;
 * the slots visited are the window's), or a ring (slot s holds position k_pos[s]) whose every
 * slot is visited, the invisible ones weighing exactly 0 (empty slots may hold
 * anything, NaN included: their values are never read). */
struct attn_args {
    const float *q, *k, *v;
    float *out;
    const int32_t *q_pos; /* staged [T] */
    const int32_t *k_pos; /* ring: staged [S] */
    int64_t T, H, KVH, D, Dv, group, S;
    int64_t window; /* > 0: sliding window */
    int64_t sinks;  /* k_pos only: positions below it are always visible */
    float scale;
    float softcap; /* > 0: scores = softcap * tanh(scores / softcap) */
    int ring;
};

static __device__ bool pos_visible(const attn_args &a, int64_t kp, int64_t qp)
{
    if (kp < 0 || kp > qp)
        return false;
    return kp < a.sinks || a.window <= 0 || kp > qp - a.window;
}

static __global__ void __launch_bounds__(AT_THREADS) attention_kernel(const attn_args a)
{
    __shared__ float sq[AT_MAX_D];
    __shared__ float sc[AT_CHUNK];
    __shared__ float pw[AT_CHUNK];
    __shared__ float s_corr, s_l;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t D = a.D, Dv = a.Dv;
    const int64_t kstride = a.KVH * D, vstride = a.KVH * Dv;
    for (int64_t bid = blockIdx.x; bid < a.T * a.H; bid += gridDim.x) {
        const int64_t t = bid / a.H, h = bid % a.H, kvh = h / a.group;
        const int64_t qp = a.q_pos[t];
        const float *qv = a.q + bid * D;
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
        /* the slots to visit: the window's [lo, qp] (contiguous), or all of them */
        int64_t c_lo = 0, c_end = a.S;
        if (!a.ring) {
            c_lo = a.window > 0 && qp - a.window + 1 > 0 ? qp - a.window + 1 : 0;
            c_end = qp + 1;
        }
        for (int64_t c0 = c_lo; c0 < c_end; c0 += AT_CHUNK) {
            const int nk = c_end - c0 < AT_CHUNK ? (int)(c_end - c0) : AT_CHUNK;
            const float *kc = kb + c0 * kstride;
            bool vis[AT_KPW];
            float s[AT_KPW];
#pragma unroll
            for (int jj = 0; jj < AT_KPW; jj++) {
                const int j = warp + jj * AT_WARPS;
                /* uniform per warp */
                vis[jj] = j < nk && (!a.ring || pos_visible(a, a.k_pos[c0 + j], qp));
                s[jj] = 0.0f;
            }
            for (int64_t d = lane; d < D; d += 32) {
                const float qd = sq[d];
#pragma unroll
                for (int jj = 0; jj < AT_KPW; jj++) {
                    const int j = warp + jj * AT_WARPS;
                    if (vis[jj])
                        s[jj] = fmaf(qd, kc[j * kstride + d], s[jj]);
                }
            }
#pragma unroll
            for (int jj = 0; jj < AT_KPW; jj++) {
                const int j = warp + jj * AT_WARPS;
                if (j < nk) {
                    const float dot = vis[jj] ? lh_cu_warp_sum(s[jj]) : 0.0f;
                    if (lane == 0) {
                        float sv = dot * a.scale;
                        if (a.softcap > 0.0f) /* as lh_cpu_attn_softcap: divide, tanh, multiply */
                            sv = tanhf(sv / a.softcap) * a.softcap;
                        sc[j] = vis[jj] ? sv : -INFINITY;
                    }
                }
            }
            __syncthreads();
            if (warp == 0) {
                const float sj = lane < nk ? sc[lane] : -INFINITY;
                const float m_new = lh_cu_max_gt(m_run, lh_cu_warp_max(sj));
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
                    for (int j = 0; j < nk; j++)
                        if (!a.ring || pw[j] != 0.0f) /* never read an invisible slot */
                            o = fmaf(pw[j], vc[j * vstride], o);
                    acc[i] = o;
                }
            }
            __syncthreads(); /* sc and pw are rewritten by the next chunk */
        }
        if (tid == 0)
            s_l = l_run;
        __syncthreads();
        const float inv = s_l > 0.0f ? 1.0f / s_l : 0.0f;
        float *o = a.out + bid * Dv;
#pragma unroll
        for (int i = 0; i < AT_DV_PER; i++) {
            const int64_t d = tid + (int64_t)i * AT_THREADS;
            if (d < Dv)
                o[d] = s_l > 0.0f ? acc[i] * inv : 0.0f;
        }
        __syncthreads(); /* sq and s_l are rewritten by the next (token, head) */
    }
}

/* Both entry points: ring false is the contiguous cache (k_pos unused). */
static lh_status attend(lh_kctx *ctx, const char *fn, bool ring, const lh_tensor *q,
                        const lh_tensor *k, const lh_tensor *v, const int32_t *q_pos,
                        const int32_t *k_pos, float scale, float softcap,
                        int64_t sliding_window, int64_t n_sinks, lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    const int64_t S = k->shape[0], KVH = k->shape[1], Dv = v->shape[2];
    if (T == 0 || H == 0 || Dv == 0)
        return LH_OK;
    if (D > AT_MAX_D || Dv > AT_MAX_D)
        return lh_kerr(ctx, LH_E_UNSUPPORTED,
                       "%s: CUDA: head_dim %lld (q, k) / %lld (v): the CUDA kernel supports head "
                       "dims up to %d",
                       fn, (long long)D, (long long)Dv, AT_MAX_D);
    lh_status st = LH_OK;
    const int32_t *dq =
        (const int32_t *)lh_cu_stage(ctx, q_pos, (size_t)T * sizeof(int32_t), &st);
    if (!dq)
        return st;
    const int32_t *dk = NULL;
    if (ring && S > 0) {
        dk = (const int32_t *)lh_cu_stage(ctx, k_pos, (size_t)S * sizeof(int32_t), &st);
        if (!dk)
            return st;
    }
    attn_args a;
    memset(&a, 0, sizeof a); /* hashed for graph replay: no stray padding bytes */
    a.q = (const float *)q->data;
    a.k = (const float *)k->data;
    a.v = (const float *)v->data;
    a.out = (float *)out->data;
    a.q_pos = dq;
    a.k_pos = dk;
    a.T = T;
    a.H = H;
    a.KVH = KVH;
    a.D = D;
    a.Dv = Dv;
    a.group = H / KVH;
    a.S = S;
    a.window = sliding_window;
    a.sinks = n_sinks;
    a.scale = scale;
    a.softcap = softcap;
    a.ring = ring;
    if (ring && S == 0) { /* no slots: every query sees nothing and gets zeros, as on the CPU */
        struct {
            void *p;
            size_t n;
        } rec = {out->data, (size_t)(T * H * Dv) * sizeof(float)};
        if (lh_cu_record(ctx, "memzero", &rec, sizeof rec))
            LH_CU_CHECK(ctx, cudaMemsetAsync(rec.p, 0, rec.n, lh_cu_stream(ctx)));
        return LH_OK;
    }
    const int64_t n = T * H;
    const unsigned blocks = n < (int64_t)AT_MAX_BLOCKS ? (unsigned)n : AT_MAX_BLOCKS;
    return LH_CU_LAUNCH(ctx, attention_kernel, dim3(blocks), dim3(AT_THREADS), 0, a);
}

lh_status lh_cuda_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                            const lh_tensor *v, const int32_t *q_pos, float scale, float softcap,
                            int64_t sliding_window, lh_tensor *out)
{
    return attend(ctx, "lh_k_attention", false, q, k, v, q_pos, NULL, scale, softcap,
                  sliding_window, 0, out);
}

/* The twin of lh_cpu_attention_positions: every slot is visited, a key whose position the
 * query may not see (k_pos < 0, in the future, outside the window and not a sink) weighs
 * exactly 0, and a query that sees no key writes zeros. */
lh_status lh_cuda_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                      const lh_tensor *v, const int32_t *q_pos,
                                      const int32_t *k_pos, float scale, float softcap,
                                      int64_t sliding_window, int64_t n_sinks, lh_tensor *out)
{
    return attend(ctx, "lh_k_attention_positions", true, q, k, v, q_pos, k_pos, scale, softcap,
                  sliding_window, n_sinks, out);
}
