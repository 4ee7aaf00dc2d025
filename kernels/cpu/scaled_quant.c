/* lh_k_quantize_scaled on the CPU: symmetric absmax quantization of an f32 / bf16 / f16 matrix
 * into int8, int4 or fp8 e4m3 with one f32 or f16 scale per block_rows x block_cols block, with
 * the arithmetic lh_kernels.h specifies (so that a numpy reference reproduces it bit for bit):
 * s = absmax / qmax, the stored scale ss = s as stored, then v / ss rounded (ints: to nearest,
 * ties to even, clamped to +-qmax; fp8: lh_k_f32_to_fp8_e4m3). Scalar C: this runs once per
 * weight, at load.
 *
 * Tasks own whole row blocks (a scale covers block_rows rows), so the threads write disjoint
 * rows of w and of scale. Per row block: pass 1 reads its rows once for every column block's
 * absmax (on the bit patterns of |v|, so the order of the maxima does not matter), the scales
 * are stored, pass 2 reads the rows again and writes w. The first non-finite source element and
 * the first block whose scale overflows f16 are kept as global minima (atomic), so the error a
 * failed call reports does not depend on the thread count. */
#include "scaled.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>

struct quant_job {
    const void *src;
    lh_dtype sdt;
    uint8_t *w;
    int wkind;            /* LH_SW_INT8, LH_SW_INT4, LH_SW_FP8 */
    void *scale;
    bool scale_f16;
    int64_t N, K, br, bc, scale_cols;
    float qmax;
    int64_t rb_per_task;  /* row blocks per task */
    uint32_t *amax;       /* per thread: scale_cols maxima of |v| bits */
    size_t amax_stride;
    float *ss;            /* per thread: scale_cols stored scales, as f32 */
    atomic_llong bad_elem;  /* first non-finite src element (n * K + k); LLONG_MAX: none */
    atomic_llong bad_block; /* first block (rb * scale_cols + c) whose f16 scale overflows */
};

static void atomic_min(atomic_llong *a, long long v)
{
    long long cur = atomic_load_explicit(a, memory_order_relaxed);
    while (v < cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

/* element k of source row n as f32 (exact) */
static inline float src_at(const struct quant_job *j, int64_t n, int64_t k)
{
    const size_t i = (size_t)n * (size_t)j->K + (size_t)k;
    switch (j->sdt) {
    case LH_DTYPE_BF16: return lh_cpu_bf16_to_f32(((const uint16_t *)j->src)[i]);
    case LH_DTYPE_F16: return lh_k_f16_to_f32(((const uint16_t *)j->src)[i]);
    default: return ((const float *)j->src)[i];
    }
}

/* t rounded to the nearest integer, ties to even, clamped to [-qmax, qmax]: |t| is clamped
 * first (qmax is an integer, so that commutes with the rounding), then integer arithmetic on
 * it (below 2^7, so |t| - trunc(|t|) is exact): no dependence on the floating-point rounding
 * mode. Branch-free: on real weights the fraction's test is a coin toss for the predictor. */
static inline int round_clamp(float t, float qmax)
{
    const float a = fminf(fabsf(t), qmax);
    int q = (int)a;
    const float f = a - (float)q;
    q += (f > 0.5f) | ((f == 0.5f) & q);
    const int neg = t < 0.0f;
    return (q ^ -neg) + neg;
}

/* the stored form of scale s at index i, returned as the f32 it reads back as */
static float store_scale(const struct quant_job *j, size_t i, float s)
{
    if (j->scale_f16) {
        const uint16_t h = lh_k_f32_to_f16(s);
        ((uint16_t *)j->scale)[i] = h;
        return lh_k_f16_to_f32(h);
    }
    ((float *)j->scale)[i] = s;
    return s;
}

/* Pass 1 over rows [r0, r1): every column block's absmax bits into amax; false (and the first
 * bad element recorded) when a value is inf or NaN. */
static bool block_absmax(struct quant_job *j, int64_t r0, int64_t r1, uint32_t *amax)
{
    memset(amax, 0, (size_t)j->scale_cols * sizeof *amax);
    for (int64_t n = r0; n < r1; n++)
        for (int64_t c = 0, k = 0; c < j->scale_cols; c++) {
            const int64_t k1 = j->K - k < j->bc ? j->K : k + j->bc;
            uint32_t m = amax[c];
            for (; k < k1; k++) {
                const uint32_t a = lh_cpu_f32_bits(src_at(j, n, k)) & 0x7fffffffu;
                if (a >= 0x7f800000u) {
                    atomic_min(&j->bad_elem, (long long)(n * j->K + k));
                    return false;
                }
                m = a > m ? a : m;
            }
            amax[c] = m;
        }
    return true;
}

/* element k of w's row n is q */
static inline void put_q(const struct quant_job *j, uint8_t *wrow, int64_t k, int q, int *pending)
{
    if (j->wkind != LH_SW_INT4) {
        wrow[k] = (uint8_t)q; /* int8: two's complement; fp8: the code */
    } else if (k & 1) {
        wrow[k >> 1] = (uint8_t)((unsigned)*pending & 15u) | (uint8_t)(((unsigned)q & 15u) << 4);
    } else {
        *pending = q;
    }
}

/* Pass 2: row n of w from the stored scales ss[scale_cols]. */
static void quant_row(const struct quant_job *j, int64_t n, const float *ss)
{
    const size_t row_bytes = (size_t)(j->wkind == LH_SW_INT4 ? j->K / 2 : j->K);
    uint8_t *wrow = j->w + (size_t)n * row_bytes;
    int pending = 0;
    for (int64_t c = 0, k = 0; c < j->scale_cols; c++) {
        const int64_t k1 = j->K - k < j->bc ? j->K : k + j->bc;
        const float s = ss[c];
        for (; k < k1; k++) {
            int q = 0;
            if (s != 0.0f) {
                const float t = src_at(j, n, k) / s;
                q = j->wkind == LH_SW_FP8 ? lh_k_f32_to_fp8_e4m3(t) : round_clamp(t, j->qmax);
            }
            put_q(j, wrow, k, q, &pending);
        }
    }
}

static void quant_task(int64_t t, int tid, void *user)
{
    struct quant_job *j = user;
    uint32_t *amax = j->amax + (size_t)tid * j->amax_stride;
    float *ss = (float *)amax + j->scale_cols; /* the second half of the thread's scratch */
    const int64_t n_rb = lh_scaled_blocks(j->N, j->br);
    const int64_t rb0 = t * j->rb_per_task;
    const int64_t rb1 = n_rb - rb0 < j->rb_per_task ? n_rb : rb0 + j->rb_per_task;
    for (int64_t rb = rb0; rb < rb1; rb++) {
        const int64_t r0 = rb * j->br, r1 = j->N - r0 < j->br ? j->N : r0 + j->br;
        if (!block_absmax(j, r0, r1, amax))
            return; /* the call fails; later rows hold later elements */
        for (int64_t c = 0; c < j->scale_cols; c++) {
            const float s = lh_cpu_bits_f32(amax[c]) / j->qmax;
            if (j->scale_f16 && !isfinite(lh_k_f16_to_f32(lh_k_f32_to_f16(s)))) {
                atomic_min(&j->bad_block, (long long)(rb * j->scale_cols + c));
                ss[c] = 0.0f;
                continue;
            }
            ss[c] = store_scale(j, (size_t)(rb * j->scale_cols + c), s);
        }
        for (int64_t n = r0; n < r1; n++)
            quant_row(j, n, ss);
    }
}

#define QUANT_TASK_ELEMS 65536 /* source elements per task, at least one row block */

lh_status lh_cpu_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                 int64_t block_cols, lh_tensor *w, lh_tensor *scale,
                                 lh_scaled_qfail *fail)
{
    static const char fn[] = "lh_k_quantize_scaled";
    fail->bad_elem = -1;
    fail->bad_block = -1;
    struct quant_job j;
    memset(&j, 0, sizeof j);
    j.src = src->data;
    j.sdt = src->dtype;
    j.w = w->data;
    j.wkind = w->dtype == LH_DTYPE_INT8   ? LH_SW_INT8
              : w->dtype == LH_DTYPE_INT4 ? LH_SW_INT4
                                          : LH_SW_FP8;
    j.qmax = j.wkind == LH_SW_INT8 ? 127.0f : j.wkind == LH_SW_INT4 ? 7.0f : 448.0f;
    j.scale = scale->data;
    j.scale_f16 = scale->dtype == LH_DTYPE_F16;
    j.N = src->shape[0];
    j.K = src->shape[1];
    j.br = block_rows;
    j.bc = block_cols;
    j.scale_cols = scale->shape[1];
    atomic_init(&j.bad_elem, LLONG_MAX);
    atomic_init(&j.bad_block, LLONG_MAX);
    if (j.N == 0 || j.K == 0)
        return LH_OK;
    const int64_t rb_rows = j.br < j.N ? j.br : j.N;
    j.rb_per_task = rb_rows * j.K >= QUANT_TASK_ELEMS ? 1 : QUANT_TASK_ELEMS / (rb_rows * j.K);
    /* per thread: scale_cols maxima, then scale_cols stored scales */
    float *mem = lh_cpu_scratch(ctx, 2 * (size_t)j.scale_cols);
    if (!mem)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%lld floats per thread)", fn,
                       (long long)(2 * j.scale_cols));
    j.amax = (uint32_t *)mem;
    j.amax_stride = lh_cpu_scratch_stride(ctx);
    const int64_t n_rb = lh_scaled_blocks(j.N, j.br);
    lh_cpu_parallel(ctx, (n_rb + j.rb_per_task - 1) / j.rb_per_task, quant_task, &j);

    const long long bad = atomic_load(&j.bad_elem), badb = atomic_load(&j.bad_block);
    if (bad != LLONG_MAX) {
        fail->bad_elem = (int64_t)bad;
        fail->bad_nan = isnan(src_at(&j, (int64_t)bad / j.K, (int64_t)bad % j.K));
    } else if (badb != LLONG_MAX) {
        const int64_t rb = (int64_t)badb / j.scale_cols, c = (int64_t)badb % j.scale_cols;
        const int64_t r0 = rb * j.br, r1 = j.N - r0 < j.br ? j.N : r0 + j.br;
        const int64_t k0 = c * j.bc, k1 = j.K - k0 < j.bc ? j.K : k0 + j.bc;
        float amax = 0.0f;
        for (int64_t n = r0; n < r1; n++)
            for (int64_t k = k0; k < k1; k++)
                amax = fmaxf(amax, fabsf(src_at(&j, n, k)));
        fail->bad_block = (int64_t)badb;
        fail->bad_amax = amax;
    }
    return LH_OK;
}
