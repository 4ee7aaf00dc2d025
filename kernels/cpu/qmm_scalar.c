/* The integer-dot matmul's reference (lh_qmm_ops_scalar): the scheme of qmatmul.h in plain C,
 * one statement per step of its definition. The SIMD kernels (qmm_avx2.c, qmm_avx512.c) must
 * give these bits; this is also the kernel of the scalar ISA. */
#include "qmatmul.h"

/* Nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves no fraction bits, so
 * the addition itself rounds (in the default rounding mode, as the vector conversions do). */
static inline int rne(float v)
{
    return (int)((v + 12582912.0f) - 12582912.0f);
}

float lh_qmm_quant_block(const float *x, int64_t n, int8_t *q)
{
    uint32_t mb = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t a = lh_cpu_f32_bits(x[i]) & 0x7fffffffu;
        mb = a > mb ? a : mb;
    }
    if (mb >= 0x7f800000u || mb < LH_QMM_AMAX_MIN_BITS) {
        for (int64_t i = 0; i < n; i++)
            q[i] = 0;
        return mb >= 0x7f800000u ? lh_cpu_bits_f32(0x7fc00000u) : 0.0f;
    }
    const float amax = lh_cpu_bits_f32(mb);
    const float id = 127.0f / amax;
    for (int64_t i = 0; i < n; i++)
        q[i] = (int8_t)rne(x[i] * id);
    return amax / 127.0f;
}

void lh_qmm_quant_extras(lh_qact *a, int64_t m)
{
    const int8_t *q = a->q + m * a->K;
    if (a->s)
        for (int64_t b = 0; b < a->nb; b++) {
            int sum = 0;
            for (int e = 0; e < 32; e++)
                sum += q[32 * b + e];
            a->s[m * a->nb + b] = a->d[m * a->nb + b] * (float)sum;
        }
    if (a->lofs)
        for (int64_t b = 0; b < a->nb; b++)
            for (int j = 0; j < 8; j++) {
                const int8_t *g = q + 32 * b + 4 * j;
                a->lofs[(m * a->nb + b) * 8 + j] = -a->off * (g[0] + g[1] + g[2] + g[3]);
            }
    if (a->bsum)
        for (int64_t g = 0; g < a->K / 16; g++) {
            int sum = 0;
            for (int e = 0; e < 16; e++)
                sum += q[16 * g + e];
            a->bsum[m * (a->K / 16) + g] = (int16_t)sum;
        }
}

static void quant_scalar(const float *x, lh_qact *a, int64_t m)
{
    for (int64_t b = 0; b < a->nb; b++)
        a->d[m * a->nb + b] = lh_qmm_quant_block(x + b * a->qb, (int)a->qb, a->q + m * a->K + b * a->qb);
    lh_qmm_quant_extras(a, m);
}

/* ---- 32-element types ------------------------------------------------------------------------ */

void lh_qmm_block_ints(int qt, const uint8_t *b, int8_t w[32], float *dw, float *mw)
{
    *dw = lh_qmm_f16(b);
    *mw = 0.0f;
    switch (qt) {
    case LH_QT_Q4_0:
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)((b[2 + j] & 0x0f) - 8);
            w[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
        }
        break;
    case LH_QT_Q4_1:
        *mw = lh_qmm_f16(b + 2);
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)(b[4 + j] & 0x0f);
            w[j + 16] = (int8_t)(b[4 + j] >> 4);
        }
        break;
    case LH_QT_Q5_0:
    case LH_QT_Q5_1: {
        const bool one = qt == LH_QT_Q5_1;
        if (one)
            *mw = lh_qmm_f16(b + 2);
        const uint8_t *h = b + (one ? 4 : 2), *qs = h + 4;
        const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                            (uint32_t)h[3] << 24;
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)(((qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4) - (one ? 0 : 16));
            w[j + 16] = (int8_t)(((qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4) - (one ? 0 : 16));
        }
        break;
    }
    default: /* q8_0 */
        memcpy(w, b + 2, 32);
        break;
    }
}

void lh_qmm_super_scales(int qt, const uint8_t *blk, int sc[16], int mn[8], float *d, float *dmin)
{
    if (qt == LH_QT_Q6_K) {
        for (int g = 0; g < 16; g++)
            sc[g] = ((const int8_t *)(blk + 192))[g];
        *d = lh_qmm_f16(blk + 208);
        *dmin = 0.0f;
        return;
    }
    uint64_t sc8, mn8;
    lh_qmm_k_scales(blk + 4, &sc8, &mn8);
    for (int s = 0; s < 8; s++) {
        sc[s] = (int)(sc8 >> 8 * s & 0xff);
        mn[s] = (int)(mn8 >> 8 * s & 0xff);
    }
    *d = lh_qmm_f16(blk);
    *dmin = lh_qmm_f16(blk + 2);
}

void lh_qmm_super_ints(int qt, const uint8_t *blk, int8_t w[256], int sc[16], int mn[8], float *d,
                       float *dmin)
{
    lh_qmm_super_scales(qt, blk, sc, mn, d, dmin);
    if (qt == LH_QT_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, r = e % 128;
            const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
            const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
            w[e] = (int8_t)(lo | hi << 4);
        }
        return;
    }
    const bool five = qt == LH_QT_Q5_K;
    const uint8_t *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    for (int s = 0; s < 8; s++) {
        for (int l = 0; l < 32; l++) {
            int v = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
            if (five)
                v |= ((qh[l] >> s) & 1) << 4;
            w[32 * s + l] = (int8_t)v;
        }
    }
}

static void dot32(int qt, const uint8_t *w, const lh_qact *a, int64_t m, float *out)
{
    int64_t bb = 0;
    lh_k_dtype_block((lh_dtype)(LH_DTYPE_Q4_0 + qt), NULL, &bb);
    const int8_t *q = a->q + m * a->K;
    const float *d = a->d + m * a->nb;
    float acc[4][8] = {{0}}, macc[4] = {0};
    for (int64_t b = 0; b < a->nb; b++) {
        int8_t wi[32];
        float dw, mw;
        lh_qmm_block_ints(qt, w + b * bb, wi, &dw, &mw);
        const float dd = dw * d[b];
        for (int j = 0; j < 8; j++) {
            int p = 0;
            for (int e = 4 * j; e < 4 * j + 4; e++)
                p += wi[e] * q[32 * b + e];
            acc[b % 4][j] = acc[b % 4][j] + dd * (float)p;
        }
        if (lh_qt_has_min(qt))
            macc[b % 4] = macc[b % 4] + mw * a->s[m * a->nb + b];
    }
    float v[8], v4[4], v2[2];
    for (int j = 0; j < 8; j++)
        v[j] = (acc[0][j] + acc[2][j]) + (acc[1][j] + acc[3][j]);
    for (int j = 0; j < 4; j++)
        v4[j] = v[j] + v[j + 4];
    for (int j = 0; j < 2; j++)
        v2[j] = v4[j] + v4[j + 2];
    float y = v2[0] + v2[1];
    if (lh_qt_has_min(qt))
        y = y + ((macc[0] + macc[2]) + (macc[1] + macc[3]));
    *out = y;
}

/* ---- K types ----------------------------------------------------------------------------------- */

static void dot_k(int qt, const uint8_t *w, const lh_qact *a, int64_t m, float *out)
{
    int64_t bb = 0;
    lh_k_dtype_block((lh_dtype)(LH_DTYPE_Q4_0 + qt), NULL, &bb);
    const int8_t *q = a->q + m * a->K;
    const int16_t *bs = a->bsum + m * (a->K / 16);
    float acc = 0.0f;
    for (int64_t b = 0; b < a->nb; b++) {
        const int8_t *qb = q + 256 * b;
        const int16_t *bsb = bs + 16 * b;
        const float dx = a->d[m * a->nb + b];
        int8_t wi[256];
        int sc[16], mn[8];
        float d, dmin;
        lh_qmm_super_ints(qt, w + b * bb, wi, sc, mn, &d, &dmin);
        if (qt == LH_QT_Q6_K) {
            int isum = 0;
            for (int g = 0; g < 16; g++) {
                int dot = 0;
                for (int e = 16 * g; e < 16 * g + 16; e++)
                    dot += wi[e] * qb[e];
                isum += sc[g] * (dot - 32 * bsb[g]);
            }
            acc = acc + (d * dx) * (float)isum;
            continue;
        }
        int isum = 0, msum = 0;
        for (int s = 0; s < 8; s++) {
            int dot = 0;
            for (int l = 0; l < 32; l++)
                dot += wi[32 * s + l] * qb[32 * s + l];
            isum += sc[s] * dot;
            msum += mn[s] * (bsb[2 * s] + bsb[2 * s + 1]);
        }
        acc = acc + (d * dx) * (float)isum;
        acc = acc - (dmin * dx) * (float)msum;
    }
    *out = acc;
}

#define DOT_FN(name, qt, body)                                                                  \
    static void name(const uint8_t *w, size_t wrow, int64_t nw, const lh_qact *a, int64_t m,    \
                     int mr, float *y, int64_t ldy)                                             \
    {                                                                                           \
        for (int64_t n = 0; n < nw; n++)                                                        \
            for (int i = 0; i < mr; i++)                                                        \
                body(qt, w + (size_t)n * wrow, a, m + i, y + i * ldy + n);                      \
    }
DOT_FN(dot_q4_0, LH_QT_Q4_0, dot32)
DOT_FN(dot_q4_1, LH_QT_Q4_1, dot32)
DOT_FN(dot_q5_0, LH_QT_Q5_0, dot32)
DOT_FN(dot_q5_1, LH_QT_Q5_1, dot32)
DOT_FN(dot_q8_0, LH_QT_Q8_0, dot32)
DOT_FN(dot_q4_k, LH_QT_Q4_K, dot_k)
DOT_FN(dot_q5_k, LH_QT_Q5_K, dot_k)
DOT_FN(dot_q6_k, LH_QT_Q6_K, dot_k)

/* The reference needs no offsets: it multiplies the signed integers directly. */
const lh_qmm_ops lh_qmm_ops_scalar = {
    "scalar",
    quant_scalar,
    {dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k},
    {0, 0, 0, 0, 0, 0, 0, 0},
};
