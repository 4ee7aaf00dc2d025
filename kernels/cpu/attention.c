/* Attention over a contiguous KV cache for one sequence, as HF eager attention computes it:
 * scores = (q . k) * scale over the visible cache positions, soft-capped when softcap > 0
 * (Gemma 2: scores = softcap * tanh(scores / softcap), before the mask), softmax in float32
 * (max-subtracted, normalized), out = sum_p softmax_p * v_p. Masked positions contribute
 * exactly zero in HF, so they are skipped here. One task per (token, head); head h reads kv
 * head h / (H / KVH). */
#include "cpu_kernels.h"

#include <math.h>

void lh_cpu_attn_softcap(float *x, int64_t n, float cap)
{
    /* the order of transformers' eager Gemma 2 attention: divide, tanh, multiply */
    for (int64_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

struct attn_job {
    const lh_cpu_ops *ops;
    const float *q, *k, *v;
    float *out;
    const int32_t *q_pos;
    float scale, softcap;
    int64_t window;
    int64_t H, KVH, D, Dv, group;
    float *scratch;
    size_t stride;
};

static void attn_task(int64_t idx, int tid, void *user)
{
    const struct attn_job *j = user;
    const int64_t t = idx / j->H, h = idx % j->H, kvh = h / j->group;
    const int64_t pos = j->q_pos[t];
    int64_t lo = 0;
    if (j->window > 0 && pos - j->window + 1 > 0)
        lo = pos - j->window + 1; /* keep p > pos - window */
    const int64_t n = pos - lo + 1;
    float *sc = j->scratch + (size_t)tid * j->stride;
    const float *qv = j->q + (t * j->H + h) * j->D;
    const int64_t kstride = j->KVH * j->D, vstride = j->KVH * j->Dv;
    const float *kb = j->k + lo * kstride + kvh * j->D;
    for (int64_t p = 0; p < n; p++)
        sc[p] = j->ops->dot(qv, kb + p * kstride, j->D) * j->scale;
    if (j->softcap > 0.0f)
        lh_cpu_attn_softcap(sc, n, j->softcap);
    float m = j->ops->max(sc, n);
    float s = j->ops->exp_sub_sum(sc, m, n);
    j->ops->scale(sc, 1.0f / s, n);
    float *o = j->out + (t * j->H + h) * j->Dv;
    memset(o, 0, (size_t)j->Dv * sizeof(float));
    const float *vb = j->v + lo * vstride + kvh * j->Dv;
    for (int64_t p = 0; p < n; p++)
        j->ops->axpy(o, sc[p], vb + p * vstride, j->Dv);
}

lh_status lh_cpu_attention(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k, const lh_tensor *v,
                           const int32_t *q_pos, float scale, float softcap,
                           int64_t sliding_window, lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], S = k->shape[0];
    if (T == 0 || H == 0)
        return LH_OK;
    int64_t maxpos = 0;
    for (int64_t t = 0; t < T; t++)
        if (q_pos[t] > maxpos)
            maxpos = q_pos[t];
    float *scratch = lh_cpu_scratch(ctx, (size_t)(maxpos + 1 < S ? maxpos + 1 : S));
    if (!scratch)
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_attention: out of memory (%lld scores per thread)",
                       (long long)S);
    struct attn_job j = {ctx->ops, q->data, k->data, v->data, out->data, q_pos, scale, softcap,
                         sliding_window, H, k->shape[1], q->shape[2], v->shape[2],
                         H / k->shape[1], scratch, lh_cpu_scratch_stride(ctx)};
    lh_cpu_parallel(ctx, T * H, attn_task, &j);
    return LH_OK;
}

/* lh_k_attention_positions: keys at arbitrary positions (a ring buffer). Per (token, head):
 * the scores of the visible slots, in slot order, packed into the thread's scratch; the same
 * visibility test walks the slots again to add the weighted values, so no index list is kept.
 * A query that sees no key gets zeros. */
struct attn_pos_job {
    const lh_cpu_ops *ops;
    const float *q, *k, *v;
    float *out;
    const int32_t *q_pos, *k_pos;
    float scale, softcap;
    int64_t window, sinks;
    int64_t S, H, KVH, D, Dv, group;
    float *scratch;
    size_t stride;
};

static bool pos_visible(const struct attn_pos_job *j, int64_t kp, int64_t qp)
{
    if (kp < 0 || kp > qp)
        return false;
    return kp < j->sinks || j->window <= 0 || kp > qp - j->window;
}

static void attn_pos_task(int64_t idx, int tid, void *user)
{
    const struct attn_pos_job *j = user;
    const int64_t t = idx / j->H, h = idx % j->H, kvh = h / j->group;
    const int64_t qp = j->q_pos[t];
    float *sc = j->scratch + (size_t)tid * j->stride;
    const float *qv = j->q + (t * j->H + h) * j->D;
    const int64_t kstride = j->KVH * j->D, vstride = j->KVH * j->Dv;
    const float *kb = j->k + kvh * j->D, *vb = j->v + kvh * j->Dv;
    int64_t n = 0;
    for (int64_t s = 0; s < j->S; s++)
        if (pos_visible(j, j->k_pos[s], qp))
            sc[n++] = j->ops->dot(qv, kb + s * kstride, j->D) * j->scale;
    float *o = j->out + (t * j->H + h) * j->Dv;
    memset(o, 0, (size_t)j->Dv * sizeof(float));
    if (n == 0)
        return;
    if (j->softcap > 0.0f)
        lh_cpu_attn_softcap(sc, n, j->softcap);
    float m = j->ops->max(sc, n);
    float sum = j->ops->exp_sub_sum(sc, m, n);
    j->ops->scale(sc, 1.0f / sum, n);
    int64_t i = 0;
    for (int64_t s = 0; s < j->S; s++)
        if (pos_visible(j, j->k_pos[s], qp))
            j->ops->axpy(o, sc[i++], vb + s * vstride, j->Dv);
}

lh_status lh_cpu_attention_positions(lh_kctx *ctx, const lh_tensor *q, const lh_tensor *k,
                                     const lh_tensor *v, const int32_t *q_pos,
                                     const int32_t *k_pos, float scale, float softcap,
                                     int64_t sliding_window, int64_t n_sinks, lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], S = k->shape[0];
    if (T == 0 || H == 0 || v->shape[2] == 0)
        return LH_OK;
    float *scratch = lh_cpu_scratch(ctx, (size_t)(S > 0 ? S : 1));
    if (!scratch)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_attention_positions: out of memory (%lld scores per thread)",
                       (long long)S);
    struct attn_pos_job j = {ctx->ops, q->data, k->data, v->data, out->data, q_pos, k_pos, scale,
                             softcap, sliding_window, n_sinks, S, H, k->shape[1], q->shape[2],
                             v->shape[2], H / k->shape[1], scratch, lh_cpu_scratch_stride(ctx)};
    lh_cpu_parallel(ctx, T * H, attn_pos_task, &j);
    return LH_OK;
}
