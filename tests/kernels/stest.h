/* Shared by the tests of weights with separate scale tensors (test_scaled.c,
 * test_scaled_quant.c): the dtypes and block shapes every case runs over, random weights and
 * scales, and the references -- plain f32 C written from the header's definitions (no doubles,
 * no library code but the public scalar conversions the definitions name). */
#ifndef LH_STEST_H
#define LH_STEST_H

#include "qtest.h"

static const lh_dtype st_wdts[] = {LH_DTYPE_INT8, LH_DTYPE_INT4, LH_DTYPE_FP8_E4M3};
static const lh_dtype st_sdts[] = {LH_DTYPE_F32, LH_DTYPE_F16};
#define ST_N_WDTS 3
#define ST_N_SDTS 2

/* block_rows x block_cols; 0 stands for the dimension itself (per channel: 1 x K) */
typedef struct st_block {
    int64_t br, bc;
} st_block;
static const st_block st_blocks[] = {
    {1, 0},     /* per output channel */
    {1, 32},    /* groups of 32 */
    {1, 128},   /* groups of 128 */
    {128, 128}, /* DeepSeek-V3 fp8 blocks (partial at the edges here) */
    {3, 7},     /* odd sizes: int4 blocks that split bytes */
    {0, 0},     /* one scale for the whole tensor */
};
#define ST_N_BLOCKS (sizeof st_blocks / sizeof st_blocks[0])

static inline int64_t st_br(const st_block *b, int64_t N)
{
    return b->br ? b->br : (N > 0 ? N : 1);
}
static inline int64_t st_bc(const st_block *b, int64_t K)
{
    return b->bc ? b->bc : (K > 0 ? K : 1);
}
static inline int64_t st_ceil(int64_t n, int64_t b)
{
    return (n + b - 1) / b;
}

/* bytes of a [N, K] weight */
static inline size_t st_wbytes(lh_dtype dt, int64_t N, int64_t K)
{
    return (size_t)(dt == LH_DTYPE_INT4 ? N * (K / 2) : N * K);
}

/* e4m3fn decoded from its fields: sign, exponent e (bias 7), mantissa m; e = 0 subnormal,
 * S.1111.111 NaN */
static inline float st_fp8(uint8_t c)
{
    const int e = (c >> 3) & 15, m = c & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (c & 0x80) ? -v : v;
}

/* the value of element (n, k) of a weight */
static inline float st_value(lh_dtype dt, const uint8_t *w, int64_t K, int64_t n, int64_t k)
{
    if (dt == LH_DTYPE_INT8)
        return (float)(int8_t)w[n * K + k];
    if (dt == LH_DTYPE_INT4) {
        const uint8_t b = w[n * (K / 2) + k / 2];
        const int v = k % 2 ? b >> 4 : b & 15;
        return (float)(v >= 8 ? v - 16 : v);
    }
    return st_fp8(w[n * K + k]);
}

static inline float st_scale_at(lh_dtype sdt, const void *scale, size_t i)
{
    return sdt == LH_DTYPE_F16 ? lh_k_f16_to_f32(((const uint16_t *)scale)[i])
                               : ((const float *)scale)[i];
}

/* dst [N, K] = value * scale of the element's block */
static inline void st_ref_dequant(lh_dtype dt, const uint8_t *w, lh_dtype sdt, const void *scale,
                                  int64_t N, int64_t K, int64_t br, int64_t bc, float *dst)
{
    const int64_t sc = st_ceil(K, bc);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            dst[n * K + k] =
                st_value(dt, w, K, n, k) * st_scale_at(sdt, scale, (size_t)((n / br) * sc + k / bc));
}

/* random weight bytes; fp8 without its NaN codes when `finite` */
static inline uint8_t *st_random_w(lh_dtype dt, int64_t N, int64_t K, bool finite)
{
    const size_t nb = st_wbytes(dt, N, K);
    uint8_t *w = malloc(nb + 1);
    for (size_t i = 0; i < nb; i++) {
        w[i] = (uint8_t)(kt_u64() >> 56);
        if (finite && dt == LH_DTYPE_FP8_E4M3 && (w[i] & 0x7f) == 0x7f)
            w[i] = 0;
    }
    return w;
}

/* random scales, |s| in [1e-3, 1e-1], random sign */
static inline void *st_random_scale(lh_dtype sdt, int64_t n)
{
    void *s = malloc((size_t)(n > 0 ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++) {
        const float v = kt_range(1e-3f, 1e-1f) * ((kt_u64() >> 63) ? -1.0f : 1.0f);
        if (sdt == LH_DTYPE_F16)
            ((uint16_t *)s)[i] = lh_k_f32_to_f16(v);
        else
            ((float *)s)[i] = v;
    }
    return s;
}

/* Whether two buffers are the same bits, any NaN matching any NaN (prints the first
 * difference under `what`). */
#define st_same_bits qt_same_bits

#endif
