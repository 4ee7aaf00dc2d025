/* lh_k_matmul with ggml block weights in LH_K_QMM_INT8 mode: the driver. The scheme and its
 * exact arithmetic are in qmatmul.h; the kernels in qmm_scalar.c (the reference), qmm_avx2.c
 * and qmm_avx512.c.
 *
 * One call: quantize every row of x once (into the context's arena, shared by the threads),
 * then tasks of QMM_MB x rows by QMM_NB weight rows; a task runs its weight rows against up to
 * LH_QMM_MR_MAX x rows at a time (one kernel call per group of x rows), so a weight block is
 * decoded once per group.
 * Each output is one dot call's value (plus the bias), computed the same way wherever it fell,
 * so the result depends on neither the thread count nor the tiling.
 *
 * With LH_K_ISA_AMX and M >= LH_QMM_AMX_MIN_M the dot tasks are qmm_amx.c's tile kernel
 * instead (the quantization is the same). Otherwise the dot kernels serve every M, prefill
 * included: the exact path is not faster for large M either. Measured
 * (bench_qgemv --gemm, one thread, w 2048 x 2048, AVX-512 and AVX2): at M = 64 and M = 512 the
 * integer path took 0.55 to 0.9 of the exact path's time for every type (q4_0 5.3 vs 8.2 ms,
 * q6_k 8.7 vs 14.3 ms at M = 64), since a weight block is decoded about as fast either way and
 * the int8 dot of 32 elements is a few instructions where the f32 tile needs 32 multiply-adds
 * per x row. */
#include "qmatmul.h"

#define QMM_MB 64              /* x rows per task: their quantized blocks stay in L2 */
#define QMM_NB 16              /* weight rows per task */
#define QMM_QUANT_INLINE 16384 /* x elements at or below which the caller quantizes alone */

static const lh_qmm_ops *qmm_ops(lh_k_isa isa)
{
    switch (isa) {
#if LH_CPU_X86
    /* the AVX-512 kernels need BW, VL and VNNI besides AVX-512F; without them the AVX2 ones,
     * which give the same bits (the scheme does not depend on the ISA) */
    case LH_K_ISA_AVX512:
    case LH_K_ISA_AMX: return lh_qmm_avx512_supported() ? &lh_qmm_ops_avx512 : &lh_qmm_ops_avx2;
    case LH_K_ISA_AVX2: return &lh_qmm_ops_avx2;
#endif
    default: return &lh_qmm_ops_scalar;
    }
}

struct qmm_job {
    const lh_qmm_ops *ops;
    lh_qdot_fn dot;
    const float *x;
    lh_qact a;
    const uint8_t *w;
    size_t wrow_bytes;
    const void *bias;
    lh_dtype bias_dtype;
    float *y;
    int64_t M, N, K;
    int64_t n_nb;     /* tasks along N */
    int64_t quant_rows; /* x rows per quantization task */
};

static void quant_task(int64_t t, int tid, void *user)
{
    (void)tid;
    struct qmm_job *j = user;
    const int64_t m0 = t * j->quant_rows;
    const int64_t m1 = m0 + j->quant_rows < j->M ? m0 + j->quant_rows : j->M;
    for (int64_t m = m0; m < m1; m++)
        j->ops->quant(j->x + m * j->K, &j->a, m);
}

static void dot_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct qmm_job *j = user;
    const int64_t m0 = (t / j->n_nb) * QMM_MB, n0 = (t % j->n_nb) * QMM_NB;
    const int64_t m1 = j->M - m0 < QMM_MB ? j->M : m0 + QMM_MB;
    const int64_t n1 = j->N - n0 < QMM_NB ? j->N : n0 + QMM_NB;
    const uint8_t *wr = j->w + (size_t)n0 * j->wrow_bytes;
    for (int64_t m = m0; m < m1; m += LH_QMM_MR_MAX) {
        const int mr = (int)(m1 - m < LH_QMM_MR_MAX ? m1 - m : LH_QMM_MR_MAX);
        j->dot(wr, j->wrow_bytes, n1 - n0, &j->a, m, mr, j->y + m * j->N + n0, j->N);
    }
    if (j->bias)
        for (int64_t m = m0; m < m1; m++)
            for (int64_t n = n0; n < n1; n++)
                j->y[m * j->N + n] = j->y[m * j->N + n] + lh_cpu_bias_at(j->bias, j->bias_dtype, n);
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

lh_status lh_cpu_qmatmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                         const lh_tensor *bias, lh_tensor *y)
{
    struct qmm_job j;
    memset(&j, 0, sizeof j);
    const int qt = lh_qt_index(w->dtype);
    j.ops = qmm_ops(ctx->isa);
    j.dot = j.ops->dot[qt];
    j.x = x->data;
    j.w = w->data;
    j.bias = bias ? bias->data : NULL;
    j.bias_dtype = bias ? bias->dtype : LH_DTYPE_F32;
    j.y = y->data;
    j.M = x->shape[0];
    j.K = x->shape[1];
    j.N = w->shape[0];
    j.wrow_bytes = (size_t)lh_k_dtype_bytes(w->dtype, j.K); /* K is whole blocks (dispatch) */

    /* the activations' arrays, one arena: q, d, then s / lofs / bsum where the type needs them */
    lh_qact *a = &j.a;
    a->M = j.M;
    a->K = j.K;
    a->qb = lh_qt_is_k(qt) ? 256 : 32;
    a->nb = j.K / a->qb;
    const bool amx = ctx->isa == LH_K_ISA_AMX && j.M >= LH_QMM_AMX_MIN_M && j.K > 0 && j.N > 0;
    a->off = amx ? 0 : j.ops->off[qt]; /* the tiles multiply signed bytes: no offsets */
    const size_t mk = (size_t)j.M * (size_t)j.K, mnb = (size_t)j.M * (size_t)a->nb;
    const size_t o_d = round64(mk), o_s = o_d + round64(mnb * sizeof(float));
    const size_t o_lofs = o_s + (lh_qt_has_min(qt) ? round64(mnb * sizeof(float)) : 0);
    const size_t o_bsum = o_lofs + (a->off ? round64(mnb * 8 * sizeof(int32_t)) : 0);
    const size_t o_amx = o_bsum + (lh_qt_is_k(qt) ? round64(mk / 16 * sizeof(int16_t)) : 0);
    const size_t total = o_amx + (amx ? lh_qmm_amx_shared_bytes(qt, j.M, j.K, a->nb) : 0);
    unsigned char *mem = lh_cpu_arena(ctx, total);
    if (!mem)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_matmul: out of memory (%zu bytes for the 8-bit activations of x "
                       "[%lld, %lld])",
                       total, (long long)j.M, (long long)j.K);
    a->q = (int8_t *)mem;
    a->d = (float *)(mem + o_d);
    a->s = lh_qt_has_min(qt) ? (float *)(mem + o_s) : NULL;
    a->lofs = a->off ? (int32_t *)(mem + o_lofs) : NULL;
    a->bsum = lh_qt_is_k(qt) ? (int16_t *)(mem + o_bsum) : NULL;

    if (mk <= QMM_QUANT_INLINE || j.M == 1) {
        j.quant_rows = j.M;
        quant_task(0, 0, &j);
    } else {
        j.quant_rows = (int64_t)(QMM_QUANT_INLINE / (size_t)j.K) + 1;
        lh_cpu_parallel(ctx, (j.M + j.quant_rows - 1) / j.quant_rows, quant_task, &j);
    }
    if (amx)
        return lh_qmm_amx_run(ctx, qt, a, j.w, j.wrow_bytes, j.N, j.bias, j.bias_dtype, j.y,
                              mem + o_amx);
    j.n_nb = (j.N + QMM_NB - 1) / QMM_NB;
    lh_cpu_parallel(ctx, (j.M + QMM_MB - 1) / QMM_MB * j.n_nb, dot_task, &j);
    return LH_OK;
}
