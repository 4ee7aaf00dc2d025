/* Private to libllmhost_kernels: the integer-dot matmul for ggml block weights
 * (LH_K_QMM_INT8, the default of lh_k_matmul with a block-type w on the CPU).
 *
 * The scheme, which qmm_scalar.c implements as the reference and every ISA reproduces bit for
 * bit (integer sums are exact, so only the float operations need a fixed order; the library is
 * built with -ffp-contract=off, so a * b + c is always two roundings):
 *
 * 1. Each row of x is quantized once per call to 8-bit blocks of QB elements, QB = 32 for the
 *    32-element weight types (q4_0, q4_1, q5_0, q5_1, q8_0) and QB = 256 for the K types:
 *      amax = max |x| over the block, taken on the bit patterns (|x| as uint32, so the result
 *             does not depend on the order, and a NaN compares above an infinity);
 *      amax inf or NaN:   d = NaN, q = 0        (every output of the row becomes NaN)
 *      amax < 2^-120:     d = 0,   q = 0        (127 / amax would overflow near here)
 *      otherwise:         id = 127 / amax, d = amax / 127 (two f32 divisions),
 *                         q[i] = x[i] * id rounded to the nearest integer, ties to even
 *                         (|q| <= 127: x[i] * id never exceeds 127.5)
 *    and per block, for the kernels: s = d * (float)(sum of q) (q4_1, q5_1: the min term),
 *    bsum[g] = sum of q over each 16 elements (K types), lofs[j] = -off * (sum of q over
 *    elements 4j .. 4j + 3) for j < 8 (32-element types whose kernels want an offset; `off` is
 *    the ISA's business, the integers it yields are not).
 *
 * 2. 32-element types. w[e] is the weight's integer (q4_0 nibble - 8, q5_0 5-bit value - 16,
 *    q8_0 int8, q4_1 / q5_1 the unsigned value) and dw, mw its f16 scale and min. For block b:
 *      p[j] = sum over e in [4j, 4j + 4) of w[e] * q[e]          (j < 8, exact int32)
 *      acc[b % 4][j] = acc[b % 4][j] + (dw * d) * (float)p[j]     (32 running sums, from +0)
 *      q4_1, q5_1: macc[b % 4] = macc[b % 4] + mw * s                (4 running sums, from +0)
 *    and at the end, in this order:
 *      u[k][j] = acc[k][j] + acc[k + 2][j]   (k < 2)
 *      v[j] = u[0][j] + u[1][j];  v4[j] = v[j] + v[j + 4];  v2[j] = v4[j] + v4[j + 2]
 *      y = v2[0] + v2[1]
 *      q4_1, q5_1: y = y + ((macc[0] + macc[2]) + (macc[1] + macc[3]))
 *    (4 groups of 8 lanes: an AVX2 register per group or an AVX-512 register per 2 groups, so
 *    every running sum is a register lane and the end is the usual halving reduction).
 *
 * 3. K types, per 256-element super-block with f16 d (and dmin), one running sum from +0:
 *      q4_k, q5_k: isum = sum_s sc[s] * (sum over sub-block s of w[e] * q[e]),
 *                  msum = sum_s m[s] * (bsum[2s] + bsum[2s + 1])          (exact int32)
 *                  acc = acc + (d * dx) * (float)isum;  acc = acc - (dmin * dx) * (float)msum
 *      q6_k:       isum = sum_g sc[g] * (sum over group g of u[e] * q[e] - 32 * bsum[g])
 *                  (u the unsigned 6-bit value, 16 groups of 16)
 *                  acc = acc + (d * dx) * (float)isum
 *    y = acc. (float)isum rounds to nearest even where |isum| > 2^24.
 *
 * 4. With a bias, y = y + bias[n] (one f32 addition, as the f32 matmul adds it).
 *
 * AMX (LH_K_ISA_AMX and M >= LH_QMM_AMX_MIN_M; qmm_amx.c): the same quantized x. The K types
 * are computed exactly as in 3.: the tiles make exact integer sums (q6_k per group; q4_k / q5_k
 * per super-block, of the weights times base-8 / base-4 digits of the sub-block scales, whose
 * shifted sum is isum), the float steps are 3.'s, so they give the reference's bits. The 32-element types sum a block whole:
 *      isum = sum over e < 32 of w[e] * q[e]                                      (exact int32)
 *      acc = fma(dw * d, (float)isum, acc)         (one running sum from +0, blocks in order)
 *      q4_1, q5_1: then acc = fma(mw, s, acc)
 *      y = acc
 *    (fma: one rounding). That is not the bits of 2. -- fewer roundings, in another order -- but
 *    it is the same for every M >= LH_QMM_AMX_MIN_M, tiling and thread count, and the bound
 *    below holds for it too.
 *
 * How far that is from the dequantize + f32 result: |y - y_exact| <= sum_e |w_e| |x_e - d q_e|
 * + f32 rounding, and |x_e - d q_e| <= d / 2 (1 + 2^-14) for a block's scale d (a block that
 * quantizes to zero: |x_e|); test_qmatmul_int8.c checks that bound. */
#ifndef LH_CPU_QMATMUL_H
#define LH_CPU_QMATMUL_H

#include "cpu_kernels.h"

/* the block types, indexed dt - LH_DTYPE_Q4_0 */
enum { LH_QT_Q4_0, LH_QT_Q4_1, LH_QT_Q5_0, LH_QT_Q5_1, LH_QT_Q8_0, LH_QT_Q4_K, LH_QT_Q5_K,
       LH_QT_Q6_K, LH_QT_COUNT };

static inline int lh_qt_index(lh_dtype dt)
{
    return (int)dt - (int)LH_DTYPE_Q4_0;
}
static inline bool lh_qt_is_k(int qt)
{
    return qt >= LH_QT_Q4_K;
}
static inline bool lh_qt_has_min(int qt)
{
    return qt == LH_QT_Q4_1 || qt == LH_QT_Q5_1;
}

/* Most activation rows one dot call serves (the weight block is decoded once for all). */
#define LH_QMM_MR_MAX 4
/* 2^-120: activation blocks whose largest magnitude is below it quantize to zero */
#define LH_QMM_AMAX_MIN_BITS 0x03800000u

/* The quantized activations of one call, rows m < M (shared by all threads, read-only once
 * made). Every array is 64-byte aligned; block b of row m is at m * nb + b. */
typedef struct lh_qact {
    int64_t M, K;
    int64_t qb;       /* 32 or 256 */
    int64_t nb;       /* K / qb */
    int8_t *q;        /* [M, K] */
    float *d;         /* [M, nb] */
    float *s;         /* [M, nb]: d * (float)(sum of the block's q); NULL unless q4_1 / q5_1 */
    int32_t *lofs;    /* [M, nb, 8]: -off * (sum of q over elements 4j .. 4j + 3); NULL if off 0 */
    int16_t *bsum;    /* [M, K / 16]: sums of q over 16 elements; NULL unless a K type */
    int off;
} lh_qact;

/* Quantizes row m of the activations from x[K] (a->qb, a->off and the arrays set). */
typedef void (*lh_qquant_fn)(const float *x, lh_qact *a, int64_t m);
/* y[i * ldy + n] = the dot of weight row n (at w + n * wrow bytes; K / block elements' blocks)
 * with activation row m + i, for n < nw and i < mr (1 <= mr <= LH_QMM_MR_MAX), as the scheme
 * above defines it (before the bias). A run of rows per call: no call per output. */
typedef void (*lh_qdot_fn)(const uint8_t *w, size_t wrow, int64_t nw, const lh_qact *a, int64_t m,
                           int mr, float *y, int64_t ldy);

/* One ISA's integer-dot kernels. Every pointer is set. */
typedef struct lh_qmm_ops {
    const char *name;
    lh_qquant_fn quant;          /* QB = a->qb */
    lh_qdot_fn dot[LH_QT_COUNT];
    int off[LH_QT_COUNT];        /* the lofs multiplier each kernel expects (0: no lofs) */
} lh_qmm_ops;

extern const lh_qmm_ops lh_qmm_ops_scalar;
#if LH_CPU_X86
extern const lh_qmm_ops lh_qmm_ops_avx2;
extern const lh_qmm_ops lh_qmm_ops_avx512;
/* Whether the CPU has what lh_qmm_ops_avx512 needs beyond AVX-512F (BW, VL, VNNI). */
bool lh_qmm_avx512_supported(void);
/* The AVX2 quantizer, which the AVX-512 table shares (qmm_avx2.c). */
void lh_qmm_quant_avx2(const float *x, lh_qact *a, int64_t m);
#endif

/* The reference's pieces the SIMD files share (qmm_scalar.c). */
/* The quantization of one block of n floats into q[n] (step 1 above); returns d. n is 32 or
 * 256 here; lh_k_matmul_scaled's int8 path quantizes whole rows with it (scaled_qmm.c). */
float lh_qmm_quant_block(const float *x, int64_t n, int8_t *q);
/* The eight 6-bit scales and mins of q4_k / q5_k from their 12 bytes (dequant.c's k_scales
 * has the layout), as bytes 0..7 of *sc and *m (byte k = bits 8k .. 8k + 7): four at a time
 * in 32-bit words, so the SIMD kernels get them in a register without a store and a reload. */
static inline void lh_qmm_k_scales(const uint8_t *s, uint64_t *sc, uint64_t *m)
{
    const uint32_t a = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    const uint32_t b = (uint32_t)s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 | (uint32_t)s[7] << 24;
    const uint32_t c = (uint32_t)s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 | (uint32_t)s[11] << 24;
    /* sc[k] = s[k] & 63, sc[4 + k] = (s[8 + k] & 15) | (s[k] >> 6) << 4; m likewise from s[4 + k]
     * and the high nibbles of s[8 + k] (a >> 2 moves each byte's top two bits to bits 4-5) */
    *sc = (uint64_t)(a & 0x3f3f3f3fu) | (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
    *m = (uint64_t)(b & 0x3f3f3f3fu) | (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)) << 32;
}
/* The weight integers of one block as the scheme defines them, from the block's bytes.
 * 32-element types: w[32] (q4_0 nibble - 8, q5_0 5-bit value - 16, q8_0 the byte, q4_1 / q5_1
 * the unsigned value), the f16 scale *dw and min *mw (0 where the type has none).
 * K types (one 256-element super-block): w[256] (q4_k / q5_k the unsigned 4 / 5-bit value,
 * q6_k the unsigned 6-bit u), sc[8] and mn[8] the sub-block scales and mins of q4_k / q5_k,
 * sc[16] the group scales of q6_k (mn untouched), *d and *dmin the f16 factors (dmin 0 for
 * q6_k). The reference decodes with them; the AMX kernel (qmm_amx.c) packs its tiles from them. */
void lh_qmm_block_ints(int qt, const uint8_t *b, int8_t w[32], float *dw, float *mw);
void lh_qmm_super_ints(int qt, const uint8_t *blk, int8_t w[256], int sc[16], int mn[8], float *d,
                       float *dmin);
/* lh_qmm_super_ints' scales alone (sc, mn, d, dmin as there). */
void lh_qmm_super_scales(int qt, const uint8_t *blk, int sc[16], int mn[8], float *d, float *dmin);
/* Everything of a row's quantization but the q and d themselves: s, lofs, bsum from q. */
void lh_qmm_quant_extras(lh_qact *a, int64_t m);

static inline float lh_qmm_f16(const uint8_t *p)
{
    return lh_k_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

/* The AMX path (qmm_amx.c; whether it can run: amx.h). lh_qmm_amx_run computes y
 * [a->M, N] (the bias added) from the quantized activations a (a->M >= LH_QMM_AMX_MIN_M) and
 * the block-type weight w (rows of wrow bytes), using `shared` (lh_qmm_amx_shared_bytes(qt,
 * a->M, a->K, a->nb) bytes, 64-byte aligned, the caller's) and the context's per-thread
 * scratch; LH_E_NOMEM (message on ctx) when that scratch cannot be had. */
#define LH_QMM_AMX_MIN_M 16
static inline int64_t lh_qmm_amx_mpad(int64_t M)
{
    return (M + 15) & ~(int64_t)15;
}
size_t lh_qmm_amx_shared_bytes(int qt, int64_t M, int64_t K, int64_t nb);
lh_status lh_qmm_amx_run(lh_kctx *ctx, int qt, const lh_qact *a, const uint8_t *w, size_t wrow,
                         int64_t N, const void *bias, lh_dtype bias_dtype, float *y,
                         unsigned char *shared);

/* lh_k_matmul with a block-type w in LH_K_QMM_INT8 mode (arguments checked; qmatmul.c). */
lh_status lh_cpu_qmatmul(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                         const lh_tensor *bias, lh_tensor *y);

#endif
