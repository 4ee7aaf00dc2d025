/* lh_k_matmul_scaled's integer-dot path for int8 weights with one scale per row (the scheme is
 * in scaled.h): the driver and the scalar kernel, which is the reference the x86 kernels
 * (scaled_qmm_x86.c) reproduce.
 *
 * One call: every row of x is quantized once into the context's arena (zero-padded to a
 * multiple of 64 bytes, so the SIMD kernels read whole vectors), then tasks of SQ_MB x rows by
 * SQ_NB weight rows; a task runs LH_SQ_MR x rows against LH_SQ_NR weight rows per kernel call,
 * so each weight byte is loaded once per group of x rows. The float arithmetic of every output
 * happens here, once, the same on every ISA; the kernels only add integers. */
#include "scaled.h"
#include "qmatmul.h" /* lh_qmm_quant_block, lh_qmm_avx512_supported */

#define SQ_MB 64              /* x rows per task: their quantized rows stay in L2 */
#define SQ_NB 16              /* weight rows per task */
#define SQ_QUANT_INLINE 16384 /* x elements at or below which the caller quantizes alone */

void lh_sq_dot_scalar(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq, int mr,
                      int64_t K, const int64_t *qsum, int64_t *isum)
{
    (void)qsum;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            const int8_t *wr = w + (size_t)j * ldw, *qr = q + (size_t)i * ldq;
            int64_t s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (int32_t)wr[k] * qr[k];
            isum[i * LH_SQ_NR + j] = s;
        }
}

static lh_sq_dot_fn sq_dot(lh_k_isa isa)
{
    switch (isa) {
#if LH_CPU_X86
    /* as qmatmul.c: the AVX-512 kernel needs BW, VL and VNNI too; without them the AVX2 one,
     * which gives the same (exact) sums */
    case LH_K_ISA_AVX512:
    case LH_K_ISA_AMX: return lh_qmm_avx512_supported() ? lh_sq_dot_avx512 : lh_sq_dot_avx2;
    case LH_K_ISA_AVX2: return lh_sq_dot_avx2;
#endif
    default: return lh_sq_dot_scalar;
    }
}

struct sq_job {
    lh_sq_dot_fn dot;
    const float *x;
    int8_t *q;      /* [M, ldq] */
    float *d;       /* [M] */
    int64_t *qsum;  /* [M] */
    size_t ldq;
    const int8_t *w;
    const void *scale; /* [ceil(N / br), 1] */
    bool scale_f16;
    int64_t br;
    const void *bias;
    lh_dtype bias_dtype;
    float *y;
    int64_t M, N, K;
    int64_t n_nb, quant_rows;
};

static void quant_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct sq_job *j = user;
    const int64_t m0 = t * j->quant_rows;
    const int64_t m1 = j->M - m0 < j->quant_rows ? j->M : m0 + j->quant_rows;
    for (int64_t m = m0; m < m1; m++) {
        int8_t *q = j->q + (size_t)m * j->ldq;
        j->d[m] = lh_qmm_quant_block(j->x + (size_t)m * (size_t)j->K, j->K, q);
        memset(q + j->K, 0, j->ldq - (size_t)j->K);
        int64_t s = 0;
        for (int64_t k = 0; k < j->K; k++)
            s += q[k];
        j->qsum[m] = s;
    }
}

static void dot_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct sq_job *j = user;
    const int64_t m0 = (t / j->n_nb) * SQ_MB, n0 = (t % j->n_nb) * SQ_NB;
    const int64_t m1 = j->M - m0 < SQ_MB ? j->M : m0 + SQ_MB;
    const int64_t n1 = j->N - n0 < SQ_NB ? j->N : n0 + SQ_NB;
    int64_t isum[LH_SQ_MR * LH_SQ_NR];
    for (int64_t m = m0; m < m1; m += LH_SQ_MR) {
        const int mr = (int)(m1 - m < LH_SQ_MR ? m1 - m : LH_SQ_MR);
        for (int64_t n = n0; n < n1; n += LH_SQ_NR) {
            const int nr = (int)(n1 - n < LH_SQ_NR ? n1 - n : LH_SQ_NR);
            j->dot(j->w + (size_t)n * (size_t)j->K, (size_t)j->K, nr, j->q + (size_t)m * j->ldq,
                   j->ldq, mr, j->K, j->qsum + m, isum);
            for (int c = 0; c < nr; c++) {
                const size_t si = (size_t)((n + c) / j->br);
                const float s = j->scale_f16 ? lh_k_f16_to_f32(((const uint16_t *)j->scale)[si])
                                             : ((const float *)j->scale)[si];
                for (int i = 0; i < mr; i++) {
                    float v = (float)isum[i * LH_SQ_NR + c] * (s * j->d[m + i]);
                    if (j->bias)
                        v = v + lh_cpu_bias_at(j->bias, j->bias_dtype, n + c);
                    j->y[(size_t)(m + i) * (size_t)j->N + (size_t)(n + c)] = v;
                }
            }
        }
    }
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

lh_status lh_cpu_matmul_scaled_int8(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                    const lh_tensor *scale, int64_t block_rows,
                                    const lh_tensor *bias, lh_tensor *y)
{
    struct sq_job j;
    memset(&j, 0, sizeof j);
    j.dot = sq_dot(ctx->isa);
    j.x = x->data;
    j.w = w->data;
    j.scale = scale->data;
    j.scale_f16 = scale->dtype == LH_DTYPE_F16;
    j.br = block_rows;
    j.bias = bias ? bias->data : NULL;
    j.bias_dtype = bias ? bias->dtype : LH_DTYPE_F32;
    j.y = y->data;
    j.M = x->shape[0];
    j.K = x->shape[1];
    j.N = w->shape[0];
    j.ldq = round64((size_t)j.K);
    /* one arena: q, then d, then qsum */
    const size_t o_d = round64((size_t)j.M * j.ldq), o_s = o_d + round64((size_t)j.M * sizeof(float));
    const size_t total = o_s + (size_t)j.M * sizeof(int64_t);
    unsigned char *mem = lh_cpu_arena(ctx, total);
    if (!mem)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_matmul_scaled: out of memory (%zu bytes for the 8-bit activations of "
                       "x [%lld, %lld])",
                       total, (long long)j.M, (long long)j.K);
    j.q = (int8_t *)mem;
    j.d = (float *)(mem + o_d);
    j.qsum = (int64_t *)(mem + o_s);

    if ((size_t)j.M * (size_t)j.K <= SQ_QUANT_INLINE || j.M == 1) {
        j.quant_rows = j.M;
        quant_task(0, 0, &j);
    } else {
        j.quant_rows = SQ_QUANT_INLINE / j.K + 1;
        lh_cpu_parallel(ctx, (j.M + j.quant_rows - 1) / j.quant_rows, quant_task, &j);
    }
    j.n_nb = (j.N + SQ_NB - 1) / SQ_NB;
    lh_cpu_parallel(ctx, (j.M + SQ_MB - 1) / SQ_MB * j.n_nb, dot_task, &j);
    return LH_OK;
}
