/* The integer-dot matmul on AVX2 (lh_qmm_ops_avx2): the scheme of qmatmul.h with
 * _mm256_maddubs_epi16 (unsigned weight bytes times signed activation bytes, pairs summed to
 * int16) and _mm256_madd_epi16 (pairs of those summed to int32), so a 32-element block's eight
 * 4-element lane sums p[j] come out of two instructions, exactly (every int16 sum stays below
 * 2 * 63 * 127 or, for q8_0, 2 * 128 * 127, so maddubs never saturates).
 *
 * Signed weights: q4_0 and q5_0 use their unsigned nibble / 5-bit value and the activation's
 * lofs (-8 or -16 times each lane's sum of q): sum (u - off) q = sum u q - off sum q. q8_0 uses
 * the sign trick: |w| as unsigned times q carrying w's sign (|w| <= 128, |q| <= 127).
 * The float steps are the reference's, in its order: one accumulator register per lane group
 * (block b % 4), multiply then add, the fixed halving reduction at the end.
 * Per-function target attributes; run only when isa.c says the CPU has AVX2, FMA and F16C. */
#include "qmatmul.h"

#if LH_CPU_X86
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))

#include "qmm_simd.inc"



static LH_ALWAYS_INLINE TGT int hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* ---- quantization ---------------------------------------------------------------------------- */

static TGT float quant_block(const float *x, int n, int8_t *q)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    __m256i mx = _mm256_setzero_si256();
    for (int i = 0; i < n; i += 8)
        mx = _mm256_max_epu32(mx, _mm256_and_si256(load256(x + i), absmask));
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(2, 3, 0, 1)));
    const uint32_t mb = (uint32_t)_mm_cvtsi128_si32(m4);
    if (mb >= 0x7f800000u || mb < LH_QMM_AMAX_MIN_BITS) {
        for (int i = 0; i < n; i += 32)
            _mm256_storeu_si256((__m256i *)(q + i), _mm256_setzero_si256());
        return mb >= 0x7f800000u ? lh_cpu_bits_f32(0x7fc00000u) : 0.0f;
    }
    const float amax = lh_cpu_bits_f32(mb);
    const __m256 id = _mm256_set1_ps(127.0f / amax);
    /* packs work within 128-bit lanes: the dwords come out as a0-3 b0-3 c0-3 d0-3 a4-7 ... */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), id));
        const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), id));
        const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), id));
        const __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), id));
        const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(v, order));
    }
    return amax / 127.0f;
}

TGT void lh_qmm_quant_avx2(const float *x, lh_qact *a, int64_t m)
{
    for (int64_t b = 0; b < a->nb; b++)
        a->d[m * a->nb + b] = quant_block(x + b * a->qb, (int)a->qb, a->q + m * a->K + b * a->qb);
    lh_qmm_quant_extras(a, m);
}

/* ---- 32-element types ------------------------------------------------------------------------ */

/* 32 bytes -> one bit each -> 0x10 where set (bit j of qh is element j: byte j of the result) */
static LH_ALWAYS_INLINE TGT __m256i bits_to_0x10(uint32_t qh)
{
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* 16 bytes of nibbles -> elements 0..15 (low nibbles), 16..31 (high) */
static LH_ALWAYS_INLINE TGT __m256i nibbles32(const uint8_t *qs)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0f));
}

/* One block's weight bytes (unsigned, or signed for q8_0), scale and min. */
static LH_ALWAYS_INLINE TGT __m256i block_bytes(const int qt, const uint8_t *b, float *dw, float *mw)
{
    *dw = f16_at(b);
    switch (qt) {
    case LH_QT_Q4_0: return nibbles32(b + 2);
    case LH_QT_Q4_1: *mw = f16_at(b + 2); return nibbles32(b + 4);
    case LH_QT_Q5_0:
    case LH_QT_Q5_1: {
        const int o = qt == LH_QT_Q5_1 ? 4 : 2;
        if (qt == LH_QT_Q5_1)
            *mw = f16_at(b + 2);
        uint32_t qh;
        memcpy(&qh, b + o, sizeof qh);
        return _mm256_or_si256(nibbles32(b + o + 4), bits_to_0x10(qh));
    }
    default: return load256(b + 2);
    }
}

static LH_ALWAYS_INLINE TGT __m256i lane_sums(const int qt, __m256i wv, __m256i qa, const int32_t *lofs)
{
    const __m256i ones = _mm256_set1_epi16(1);
    if (qt == LH_QT_Q8_0)
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(qa, wv)),
                                 ones);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, qa), ones);
    return lofs ? _mm256_add_epi32(p, load256(lofs)) : p;
}

/* the types whose kernels add the activation's lofs (the table's off[] below) */
static LH_ALWAYS_INLINE bool has_lofs(const int qt)
{
    return qt == LH_QT_Q4_0 || qt == LH_QT_Q5_0;
}

/* Block b of weight row w into lane group g of the mr rows' accumulators (the blocks after
 * the last whole group of four). */
static LH_ALWAYS_INLINE TGT void step32(const int qt, const int mr, const int g, const uint8_t *w,
                                        const lh_qact *a, int64_t m, int64_t b, __m256 acc[][4],
                                        float macc[][4])
{
    float dw, mw = 0.0f;
    const __m256i wv = block_bytes(qt, w + b * bbytes32[qt], &dw, &mw);
    for (int r = 0; r < mr; r++) {
        const int64_t ab = (m + r) * a->nb + b;
        const __m256i p = lane_sums(qt, wv, load256(a->q + (m + r) * a->K + 32 * b),
                                    has_lofs(qt) ? a->lofs + ab * 8 : NULL);
        const __m256 dd = _mm256_set1_ps(dw * a->d[ab]);
        acc[r][g] = _mm256_add_ps(acc[r][g], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(p)));
        if (lh_qt_has_min(qt))
            macc[r][g] = macc[r][g] + mw * a->s[ab];
    }
}

/* Blocks b .. b + 3 into lane groups 0 .. 3: a row's four scale products dw * d in one
 * multiplication (each the reference's single rounding), then broadcast. */
static LH_ALWAYS_INLINE TGT void quad32(const int qt, const int mr, const uint8_t *w,
                                        const lh_qact *a, int64_t m, int64_t b, __m256 acc[][4],
                                        __m128 *macc)
{
    const int bb = bbytes32[qt];
    const uint8_t *blk = w + b * bb;
    float dw, mw; /* unused: the quad takes the scales four at a time */
    __m256i wv[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++)
        wv[g] = block_bytes(qt, blk + g * bb, &dw, &mw);
    const __m128 dw4 = f16x4(blk, blk + bb, blk + 2 * bb, blk + 3 * bb);
    const __m128 mw4 = lh_qt_has_min(qt) ? f16x4(blk + 2, blk + bb + 2, blk + 2 * bb + 2, blk + 3 * bb + 2)
                                         : _mm_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) {
        const int64_t ab = (m + r) * a->nb + b;
        const __m256 dd4 = _mm256_castps128_ps256(_mm_mul_ps(dw4, _mm_loadu_ps(a->d + ab)));
        const int8_t *q = a->q + (m + r) * a->K + 32 * b;
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i p = lane_sums(qt, wv[g], load256(q + 32 * g),
                                        has_lofs(qt) ? a->lofs + (ab + g) * 8 : NULL);
            const __m256 dd = _mm256_permutevar8x32_ps(dd4, _mm256_set1_epi32(g));
            acc[r][g] = _mm256_add_ps(acc[r][g], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(p)));
        }
        if (lh_qt_has_min(qt)) /* lane g: the min terms of group g */
            macc[r] = _mm_add_ps(macc[r], _mm_mul_ps(mw4, _mm_loadu_ps(a->s + ab)));
    }
}

/* the reference's end: (acc0 + acc2) + (acc1 + acc3), then halving to one lane */
static LH_ALWAYS_INLINE TGT float reduce32(const __m256 acc[4])
{
    const __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

static LH_ALWAYS_INLINE TGT void dot32(const int qt, const int mr, const uint8_t *w, const lh_qact *a,
                                       int64_t m, float *out)
{
    __m256 acc[2][4];
    __m128 macc4[2];
    float macc[2][4];
    for (int r = 0; r < mr; r++) {
        for (int g = 0; g < 4; g++)
            acc[r][g] = _mm256_setzero_ps();
        macc4[r] = _mm_setzero_ps();
    }
    const int64_t nb = a->nb;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        qmm_prefetch(w + b * bbytes32[qt], 4 * bbytes32[qt]);
        quad32(qt, mr, w, a, m, b, acc, macc4);
    }
    for (int r = 0; r < mr; r++)
        _mm_storeu_ps(macc[r], macc4[r]);
    for (int g = 0; b + g < nb; g++)
        step32(qt, mr, g, w, a, m, b + g, acc, macc);
    for (int r = 0; r < mr; r++) {
        float y = reduce32(acc[r]);
        if (lh_qt_has_min(qt))
            y = y + ((macc[r][0] + macc[r][2]) + (macc[r][1] + macc[r][3]));
        out[r] = y;
    }
}

/* ---- K types ----------------------------------------------------------------------------------- */

/* q4_k / q5_k: the integer sums of super-block b for mr rows: isum[r], msum[r]. Two integer
 * accumulators per row (sub-block pairs 0, 2 and 1, 3), so the adds do not wait on each other. */
static LH_ALWAYS_INLINE TGT void ints_q45k(const bool five, const int mr, const uint8_t *blk,
                                           const lh_qact *a, int64_t m, int64_t b, int *isum,
                                           int *msum)
{
    uint64_t sc8, mn8;
    lh_qmm_k_scales(blk + 4, &sc8, &mn8);
    /* the eight scales as int16 in both 128-bit lanes; scale s is bytes 2s, 2s + 1 */
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m256i low = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i iacc[LH_QMM_MR_MAX][2];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
        iacc[r][0] = iacc[r][1] = _mm256_setzero_si256();
    const __m256i qhv = five ? load256(blk + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) { /* sub-blocks 2t (low nibbles) and 2t + 1 (high) */
        const __m256i y = load256(qs + 32 * t);
        __m256i lo = _mm256_and_si256(y, low), hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), low);
        if (five) { /* bit s of qh[l]: bit 4 of element l of sub-block s */
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t + 1), one), 4));
        }
        const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(4 * t | (4 * t + 1) << 8)));
        const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)((4 * t + 2) | (4 * t + 3) << 8)));
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            const int8_t *q = a->q + (m + r) * a->K + 256 * b + 64 * t;
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(q)), slo);
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(q + 32)), shi);
            iacc[r][t & 1] = _mm256_add_epi32(iacc[r][t & 1], _mm256_add_epi32(plo, phi));
        }
    }
    /* sum_s m[s] (bsum[2s] + bsum[2s + 1]): madd of the 16 bsums with m[s] at 2s and 2s + 1 */
    const __m128i mb = _mm_cvtsi64_si128((long long)mn8);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) {
        const int16_t *bs = a->bsum + (m + r) * (a->K / 16) + 16 * b;
        isum[r] = hsum_i32(_mm256_add_epi32(iacc[r][0], iacc[r][1]));
        msum[r] = hsum_i32(_mm256_madd_epi16(load256(bs), mins));
    }
}

static LH_ALWAYS_INLINE TGT void ints_q6k(const int mr, const uint8_t *blk, const lh_qact *a,
                                          int64_t m, int64_t b, int *isum)
{
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const __m256i low = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
    __m256i iacc[LH_QMM_MR_MAX];
    for (int r = 0; r < mr; r++)
        iacc[r] = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i qa = load256(ql + 64 * h), qb = load256(ql + 64 * h + 32);
        const __m256i qhv = load256(qh + 32 * h);
        for (int c = 0; c < 4; c++) { /* elements 128 h + 32 c .. + 31 */
            const __m256i l4 = c < 2 ? (c == 0 ? qa : qb)
                                     : _mm256_srli_epi16(c == 2 ? qa : qb, 4);
            const __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(qhv, 2 * c), three);
            const __m256i u = _mm256_or_si256(_mm256_and_si256(l4, low), _mm256_slli_epi16(h2, 4));
            const int g = 8 * h + 2 * c; /* groups g (first 16 elements) and g + 1 */
            const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
            for (int r = 0; r < mr; r++) {
                const int8_t *q = a->q + (m + r) * a->K + 256 * b + 128 * h + 32 * c;
                iacc[r] = _mm256_add_epi32(iacc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, load256(q)), scv));
            }
        }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    for (int r = 0; r < mr; r++) {
        const int16_t *bs = a->bsum + (m + r) * (a->K / 16) + 16 * b;
        isum[r] = hsum_i32(iacc[r]) - 32 * hsum_i32(_mm256_madd_epi16(load256(bs), sc16));
    }
}

/* Entry points of the 32-element types: x rows two at a time (eight accumulator registers of
 * sixteen); the K types' (four rows) are qmm_simd.inc's. */
#define DOT32_FN(name, qt)                                                                      \
    static TGT void name(const uint8_t *w, size_t wrow, int64_t nw, const lh_qact *a, int64_t m, \
                         int mr, float *y, int64_t ldy)                                         \
    {                                                                                           \
        for (int64_t n = 0; n < nw; n++) {                                                      \
            const uint8_t *wn = w + (size_t)n * wrow;                                           \
            float o[2];                                                                         \
            int i = 0;                                                                          \
            for (; i + 2 <= mr; i += 2) {                                                       \
                dot32(qt, 2, wn, a, m + i, o);                                                  \
                y[i * ldy + n] = o[0];                                                          \
                y[(i + 1) * ldy + n] = o[1];                                                    \
            }                                                                                   \
            if (i < mr) {                                                                       \
                dot32(qt, 1, wn, a, m + i, o);                                                  \
                y[i * ldy + n] = o[0];                                                          \
            }                                                                                   \
        }                                                                                       \
    }
DOT32_FN(dot_q4_0, LH_QT_Q4_0)
DOT32_FN(dot_q4_1, LH_QT_Q4_1)
DOT32_FN(dot_q5_0, LH_QT_Q5_0)
DOT32_FN(dot_q5_1, LH_QT_Q5_1)
DOT32_FN(dot_q8_0, LH_QT_Q8_0)

const lh_qmm_ops lh_qmm_ops_avx2 = {
    "avx2",
    lh_qmm_quant_avx2,
    {dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k},
    {8, 0, 16, 0, 0, 0, 0, 0}, /* q4_0: u - 8, q5_0: u - 16 */
};
#endif
