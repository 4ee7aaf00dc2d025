/* Private to libllmhost_kernels: quantized weights with a separate scale tensor (int8, int4,
 * fp8 e4m3 with one f32 or f16 scale per block_rows x block_cols block; lh_k_matmul_scaled and
 * friends in lh_kernels.h), behind kernels/scaled_dispatch.c, which checks every argument.
 *
 * A weight element decodes to value * scale: value is exact in f32 (an integer of at most 8
 * bits, or an e4m3 code), the scale is an exact f32 (or an f16 widened exactly), so each
 * decoded element is one f32 multiplication and every ISA's decoder (scaled.c, scaled_simd.inc)
 * gives the same bits; only the speed differs. */
#ifndef LH_CPU_SCALED_H
#define LH_CPU_SCALED_H

#include "cpu_kernels.h"

#include "paged_kernels.h" /* lh_cpu_fp8_e4m3_table */

/* the weight dtypes, as indices into lh_scaled_ops.row */
enum { LH_SW_INT8 = 0, LH_SW_INT4 = 1, LH_SW_FP8 = 2, LH_SW_COUNT = 3 };

/* One weight as the decoders read it (scaled.c fills it from the checked tensors). */
typedef struct lh_scaled_w {
    const uint8_t *w;
    size_t row_bytes;  /* K (int8, fp8) or K / 2 (int4) */
    const void *scale; /* [ceil(N / br), scale_cols] */
    bool scale_f16;
    int64_t K, br, bc, scale_cols;
} lh_scaled_w;

/* Columns [k0, k1) of row n of dequant(w) into dst[k1 - k0]. */
typedef void (*lh_scaled_row_fn)(const lh_scaled_w *sw, int64_t n, int64_t k0, int64_t k1,
                                 float *dst);

/* One ISA's row decoders, per weight dtype. */
typedef struct lh_scaled_ops {
    lh_scaled_row_fn row[LH_SW_COUNT];
} lh_scaled_ops;

extern const lh_scaled_ops lh_scaled_ops_scalar;
#if LH_CPU_X86
extern const lh_scaled_ops lh_scaled_ops_avx2;
extern const lh_scaled_ops lh_scaled_ops_avx512;
#endif

static inline float lh_scaled_scale(const lh_scaled_w *sw, size_t i)
{
    return sw->scale_f16 ? lh_k_f16_to_f32(((const uint16_t *)sw->scale)[i])
                         : ((const float *)sw->scale)[i];
}

/* Signed value of the int4 nibble v (0..15): two's complement, -8..7. */
static inline int lh_scaled_nibble(unsigned v)
{
    return (int)(v ^ 8u) - 8;
}

/* The scalar segment decoders, dst[k - k0] = value(element k of the row) * s for k in
 * [k0, k1) (int4: k0 may be odd, a block width that splits a byte); the scalar ISA's, and the
 * SIMD decoders' tails. */
static LH_ALWAYS_INLINE void lh_scaled_seg_int8(const uint8_t *row, int64_t k0, int64_t k1,
                                                float s, float *dst)
{
    for (int64_t k = k0; k < k1; k++)
        dst[k - k0] = (float)(int8_t)row[k] * s;
}

static LH_ALWAYS_INLINE void lh_scaled_seg_int4(const uint8_t *row, int64_t k0, int64_t k1,
                                                float s, float *dst)
{
    for (int64_t k = k0; k < k1; k++) {
        const unsigned b = row[k >> 1];
        dst[k - k0] = (float)lh_scaled_nibble(k & 1 ? b >> 4 : b & 15u) * s;
    }
}

static LH_ALWAYS_INLINE void lh_scaled_seg_fp8(const uint8_t *row, int64_t k0, int64_t k1,
                                               float s, float *dst)
{
    for (int64_t k = k0; k < k1; k++)
        dst[k - k0] = lh_cpu_fp8_e4m3_table[row[k]] * s;
}

/* Defines the row decoder NAME (an lh_scaled_row_fn, with attributes ATTR) around the segment
 * decoder SEG: each scale block of [k0, k1) with its scale. A macro, so that every ISA's
 * segment code is inlined into its own row loop (a call per block of 32 costs more than the
 * block). */
#define LH_SCALED_ROW_FN(NAME, ATTR, SEG)                                                         \
    ATTR void NAME(const lh_scaled_w *sw, int64_t n, int64_t k0, int64_t k1, float *dst)          \
    {                                                                                             \
        const uint8_t *row = sw->w + (size_t)n * sw->row_bytes;                                   \
        const size_t s0 = (size_t)(n / sw->br) * (size_t)sw->scale_cols;                         \
        for (int64_t c = k0 / sw->bc, a = k0; a < k1; c++) {                                      \
            const int64_t b0 = c * sw->bc; /* < K: c < ceil(K / bc) */                            \
            const int64_t end = k1 - b0 < sw->bc ? k1 : b0 + sw->bc;                              \
            SEG(row, a, end, lh_scaled_scale(sw, s0 + (size_t)c), dst + (a - k0));                \
            a = end;                                                                              \
        }                                                                                         \
    }

/* Scale-tensor facts of the public API: ceil(n / b) for n >= 0, b >= 1 (no overflow). */
static inline int64_t lh_scaled_blocks(int64_t n, int64_t b)
{
    return n / b + (n % b != 0);
}

/* ---- int8 weights with one scale per row: the integer-dot path ------------------------------
 *
 * lh_k_matmul_scaled in LH_K_QMM_INT8 mode (the default) with an int8 w whose scale has one
 * column (block_cols >= K: per channel, or per tensor). The scheme, which scaled_qmm.c's scalar
 * kernel implements as the reference and the x86 kernels (scaled_qmm_x86.c) reproduce bit for
 * bit (the integer sums are exact, and every float operation is in the ISA-independent driver):
 *   1. each row m of x is quantized once per call, as one block of K elements, exactly as
 *      step 1 of qmatmul.h (lh_qmm_quant_block): amax over the row, d[m] = amax / 127,
 *      q[m][k] = rne(x[m][k] * (127 / amax)) (|q| <= 127); a row holding inf or NaN: d = NaN,
 *      q = 0; amax < 2^-120: d = 0, q = 0;
 *   2. isum[m][n] = sum over k of w[n][k] * q[m][k], exact (an int64; the kernels' int32 lanes
 *      are emptied into it every LH_SQ_CHUNK elements, long before they could overflow);
 *   3. y[m][n] = (float)isum[m][n] * (s[n] * d[m]) with s[n] = scale[n / block_rows][0] as
 *      f32 ((float)isum rounds to nearest even beyond 2^24; two f32 multiplications, the
 *      second's operand first); with a bias, y = y + bias[n].
 * Error: |x - d q| <= d / 2 (1 + 2^-14) per element (qmatmul.h), so |y - y_exact| <= |s[n]|
 * d[m] / 2 (1 + 2^-14) sum_k |w[n][k]| plus the f32 roundings of y (test_scaled_int8.c checks
 * that bound against a double-precision product). */

/* Elements after which the kernels empty their int32 lanes into int64 totals: a lane gains
 * at most 4 * 255 * 127 per 64 elements (AVX-512: w + 128 unsigned times q), so 2^18 elements
 * keep every lane below 2^29. A multiple of 64. */
#define LH_SQ_CHUNK ((int64_t)1 << 18)
/* Most x rows and weight rows one kernel call takes. */
#define LH_SQ_MR 4
#define LH_SQ_NR 4

/* isum[i * LH_SQ_NR + j] = sum_{k < K} w[j * ldw + k] * q[i * ldq + k], exactly, for i < mr,
 * j < nr (1 <= mr <= LH_SQ_MR, 1 <= nr <= LH_SQ_NR). The q rows are zero beyond K up to ldq, a
 * multiple of 64 (so kernels may read whole vectors of q); w is read only below K. qsum[i] =
 * sum_k q[i * ldq + k] (for kernels that compute with w + 128). */
typedef void (*lh_sq_dot_fn)(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq,
                             int mr, int64_t K, const int64_t *qsum, int64_t *isum);
void lh_sq_dot_scalar(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq, int mr,
                      int64_t K, const int64_t *qsum, int64_t *isum);
#if LH_CPU_X86
void lh_sq_dot_avx2(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq, int mr,
                    int64_t K, const int64_t *qsum, int64_t *isum);
/* needs AVX-512 F, BW, VL and VNNI (lh_qmm_avx512_supported) */
void lh_sq_dot_avx512(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq, int mr,
                      int64_t K, const int64_t *qsum, int64_t *isum);
#endif

/* lh_k_matmul_scaled's integer path (scaled_qmm.c; arguments checked, M, N > 0). */
lh_status lh_cpu_matmul_scaled_int8(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                                    const lh_tensor *scale, int64_t block_rows,
                                    const lh_tensor *bias, lh_tensor *y);

/* Why lh_k_quantize_scaled refuses a source, as its CPU and CUDA implementations find it;
 * scaled_dispatch.c words the error from it, the same for both. */
typedef struct lh_scaled_qfail {
    int64_t bad_elem;  /* the first non-finite source element in row-major order, n * K + k;
                          -1: none */
    int bad_nan;       /* that element is a NaN (else an inf) */
    int64_t bad_block; /* without one: the first block (row block * scale cols + col block)
                          whose f16 scale overflows; -1: none */
    float bad_amax;    /* that block's absmax */
} lh_scaled_qfail;

/* lh_k_matmul_scaled, lh_k_dequantize_scaled, lh_k_quantize_scaled on the CPU (arguments
 * checked; scaled.c, scaled_quant.c). quantize: LH_OK with *fail saying whether the source was
 * refused (then w and scale hold no promised contents), LH_E_NOMEM. */
lh_status lh_cpu_matmul_scaled(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                               const lh_tensor *scale, int64_t block_rows, int64_t block_cols,
                               const lh_tensor *bias, lh_tensor *y);
lh_status lh_cpu_dequantize_scaled(lh_kctx *ctx, const lh_tensor *w, const lh_tensor *scale,
                                   int64_t block_rows, int64_t block_cols, lh_tensor *dst);
lh_status lh_cpu_quantize_scaled(lh_kctx *ctx, const lh_tensor *src, int64_t block_rows,
                                 int64_t block_cols, lh_tensor *w, lh_tensor *scale,
                                 lh_scaled_qfail *fail);

#endif
