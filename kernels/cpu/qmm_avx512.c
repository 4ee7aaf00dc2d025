/* The integer-dot matmul on AVX-512 with VNNI (lh_qmm_ops_avx512): the scheme of qmatmul.h on
 * 512-bit registers, which needs AVX512BW, AVX512VL and AVX512-VNNI besides AVX-512F
 * (lh_qmm_avx512_supported; without them qmatmul.c takes the AVX2 table, the same bits).
 *
 * 32-element types: a register holds two blocks, lanes 0..7 block b's eight 4-element sums and
 * lanes 8..15 block b + 1's, which is the reference's lane groups b % 4 = 0, 1 (and 2, 3 in a
 * second register): _mm512_dpbusd_epi32 (unsigned weight bytes times signed activation bytes,
 * four products into each int32 lane, from the activation's lofs) makes both blocks' sums in one
 * instruction. Every weight is fed unsigned: q4_0 / q5_0 as their nibble / 5-bit value with
 * lofs -8 / -16 times the lane's sum of q, q8_0 as w + 128 (w xor 0x80) with lofs -128 times it.
 * A lone last block fills only the low half; the high half then adds 0 * 0 = +0 to running sums
 * that are never -0 (they start at +0, and x + y is -0 only when both are), which leaves them
 * unchanged.
 * K types: maddubs (pairs to int16) and dpwssd (times the sub-block scales, pairs added into
 * int32): q6_k with four 16-element groups per 512-bit register; q4_k and q5_k with one
 * 32-element sub-block per 256-bit register (AVX512VL), which measured faster here than two
 * per 512-bit one (whose scale vectors need a cross-lane permute each).
 * The quantization of x is the AVX2 one (lh_qmm_quant_avx2). Per-function target attributes;
 * run only when isa.c and lh_qmm_avx512_supported say the CPU has these. */
#include "qmatmul.h"

#if LH_CPU_X86
#include <immintrin.h>
#include <stdatomic.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

#include "qmm_simd.inc"

bool lh_qmm_avx512_supported(void)
{
    static _Atomic int known = -1; /* asked once per call of lh_k_matmul: remembered */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k != 0;
}

static LH_ALWAYS_INLINE TGT __m512i load512(const void *p)
{
    return _mm512_loadu_si512(p);
}

/* [lo | hi] */
static LH_ALWAYS_INLINE TGT __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

static LH_ALWAYS_INLINE TGT int hsum_i32_256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static LH_ALWAYS_INLINE TGT int hsum_i32(__m512i v)
{
    return hsum_i32_256(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* ---- 32-element types ------------------------------------------------------------------------ */


/* The nibbles of blocks b0 (and b1: NULL for none, zeros) as
 * [b0 lo, b0 hi, b1 lo, b1 hi] (128-bit lanes): each block's elements 0..31 in order. Built
 * from broadcast loads and a masked shift, so that only the blend needs a shuffle port. */
static LH_ALWAYS_INLINE TGT __m512i nibbles_pair(const uint8_t *qs0, const uint8_t *qs1)
{
    const __m128i x0 = _mm_loadu_si128((const __m128i *)qs0);
    __m512i z; /* [x0, x0, x1, x1] */
    if (qs1)
        z = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(x0), (__mmask16)0xff00,
                                        _mm_loadu_si128((const __m128i *)qs1));
    else
        z = _mm512_maskz_broadcast_i32x4((__mmask16)0x00ff, x0);
    z = _mm512_mask_srli_epi16(z, (__mmask32)0xff00ff00u, z, 4); /* lanes 1 and 3: high nibbles */
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* The unsigned weight bytes of blocks b0 and b1 (b1 NULL: zeros), their scales and mins. */
static LH_ALWAYS_INLINE TGT __m512i pair_bytes(const int qt, const uint8_t *b0, const uint8_t *b1,
                                               float dw[2], float mw[2])
{
    dw[0] = f16_at(b0);
    dw[1] = b1 ? f16_at(b1) : 0.0f;
    switch (qt) {
    case LH_QT_Q4_0: return nibbles_pair(b0 + 2, b1 ? b1 + 2 : NULL);
    case LH_QT_Q4_1:
        mw[0] = f16_at(b0 + 2);
        mw[1] = b1 ? f16_at(b1 + 2) : 0.0f;
        return nibbles_pair(b0 + 4, b1 ? b1 + 4 : NULL);
    case LH_QT_Q5_0:
    case LH_QT_Q5_1: {
        const int o = qt == LH_QT_Q5_1 ? 4 : 2;
        if (qt == LH_QT_Q5_1) {
            mw[0] = f16_at(b0 + 2);
            mw[1] = b1 ? f16_at(b1 + 2) : 0.0f;
        }
        uint32_t h0, h1 = 0;
        memcpy(&h0, b0 + o, sizeof h0);
        if (b1)
            memcpy(&h1, b1 + o, sizeof h1);
        /* bit j of qh is element j: byte j (block b0) or 32 + j (block b1) of the register */
        const __mmask64 k = (__mmask64)h0 | (__mmask64)h1 << 32;
        return _mm512_or_si512(nibbles_pair(b0 + o + 4, b1 ? b1 + o + 4 : NULL),
                               _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(0x10)));
    }
    default: { /* q8_0: w + 128 */
        const __m256i lo = load256(b0 + 2), hi = b1 ? load256(b1 + 2) : _mm256_set1_epi8(-128);
        return _mm512_xor_si512(join256(lo, hi), _mm512_set1_epi8(-128));
    }
    }
}

/* the types whose kernels start from the activation's lofs (the table's off[] below) */
static LH_ALWAYS_INLINE bool has_lofs(const int qt)
{
    return qt == LH_QT_Q4_0 || qt == LH_QT_Q5_0 || qt == LH_QT_Q8_0;
}

/* The 16 lane sums of blocks b, b + 1 of activation row `row` against the weight bytes wv
 * (single: block b alone, the high half 0). */
static LH_ALWAYS_INLINE TGT __m512i pair_lanes(const int qt, const bool single, __m512i wv,
                                               const lh_qact *a, int64_t row, int64_t b)
{
    const int8_t *q = a->q + row * a->K + 32 * b;
    const __m512i qa = single ? _mm512_zextsi256_si512(load256(q)) : load512(q);
    __m512i p = _mm512_setzero_si512();
    if (has_lofs(qt)) {
        const int32_t *o = a->lofs + (row * a->nb + b) * 8;
        p = single ? _mm512_zextsi256_si512(load256(o)) : load512(o);
    }
    return _mm512_dpbusd_epi32(p, wv, qa);
}

/* Blocks b .. b + 3 into acc[r][0] (groups 0, 1) and acc[r][1] (groups 2, 3): the four scale
 * products dw * d of a row in one multiplication (each the reference's single rounding). */
static LH_ALWAYS_INLINE TGT void step_quad(const int qt, const int mr, const uint8_t *w,
                                           const lh_qact *a, int64_t m, int64_t b,
                                           __m512 acc[][2], __m128 *macc)
{
    const int bb = bbytes32[qt];
    const uint8_t *b0 = w + b * bb, *b1 = b0 + bb, *b2 = b1 + bb, *b3 = b2 + bb;
    float dw[2], mw[2]; /* unused: the quad takes the scales four at a time */
    const __m512i w01 = pair_bytes(qt, b0, b1, dw, mw), w23 = pair_bytes(qt, b2, b3, dw, mw);
    const __m128 dw4 = f16x4(b0, b1, b2, b3);
    const __m128 mw4 = lh_qt_has_min(qt) ? f16x4(b0 + 2, b1 + 2, b2 + 2, b3 + 2) : _mm_setzero_ps();
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) {
        const int64_t ab = (m + r) * a->nb + b;
        const __m512 dd4 = _mm512_castps128_ps512(_mm_mul_ps(dw4, _mm_loadu_ps(a->d + ab)));
        const __m512 f01 = _mm512_cvtepi32_ps(pair_lanes(qt, false, w01, a, m + r, b));
        const __m512 f23 = _mm512_cvtepi32_ps(pair_lanes(qt, false, w23, a, m + r, b + 2));
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_mul_ps(_mm512_permutexvar_ps(i01, dd4), f01));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_mul_ps(_mm512_permutexvar_ps(i23, dd4), f23));
        if (lh_qt_has_min(qt)) /* lane g: the min terms of group g */
            macc[r] = _mm_add_ps(macc[r], _mm_mul_ps(mw4, _mm_loadu_ps(a->s + ab)));
    }
}

/* The last blocks: b and b + 1 (b + 1 < nb unless `single`) into acc[r][g]. */
static LH_ALWAYS_INLINE TGT void step_pair(const int qt, const int mr, const bool single,
                                           const uint8_t *w, const lh_qact *a, int64_t m, int64_t b,
                                           __m512 acc[][2], const int g, float macc[][4])
{
    const int bb = bbytes32[qt];
    float dw[2], mw[2] = {0.0f, 0.0f};
    const __m512i wv = pair_bytes(qt, w + b * bb, single ? NULL : w + (b + 1) * bb, dw, mw);
    for (int r = 0; r < mr; r++) {
        const int64_t ab = (m + r) * a->nb + b;
        const __m512i p = pair_lanes(qt, single, wv, a, m + r, b);
        const float dd0 = dw[0] * a->d[ab], dd1 = single ? 0.0f : dw[1] * a->d[ab + 1];
        const __m512 dd = _mm512_mask_mov_ps(_mm512_set1_ps(dd0), (__mmask16)0xff00, _mm512_set1_ps(dd1));
        acc[r][g] = _mm512_add_ps(acc[r][g], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(p)));
        if (lh_qt_has_min(qt)) { /* groups 2g and 2g + 1 */
            macc[r][2 * g] = macc[r][2 * g] + mw[0] * a->s[ab];
            if (!single)
                macc[r][2 * g + 1] = macc[r][2 * g + 1] + mw[1] * a->s[ab + 1];
        }
    }
}

/* the reference's end: [acc0 + acc2 | acc1 + acc3], the halves added, then halving to one lane */
static LH_ALWAYS_INLINE TGT float reduce32(__m512 g01, __m512 g23)
{
    const __m512 u = _mm512_add_ps(g01, g23);
    const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(u),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

static LH_ALWAYS_INLINE TGT void dot32(const int qt, const int mr, const uint8_t *w, const lh_qact *a,
                                       int64_t m, float *out)
{
    __m512 acc[LH_QMM_MR_MAX][2]; /* [r][0]: groups 0, 1; [r][1]: groups 2, 3 */
    __m128 macc4[LH_QMM_MR_MAX];
    float macc[LH_QMM_MR_MAX][4];
    for (int r = 0; r < mr; r++) {
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        macc4[r] = _mm_setzero_ps();
    }
    const int64_t nb = a->nb;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        qmm_prefetch(w + b * bbytes32[qt], 4 * bbytes32[qt]);
        step_quad(qt, mr, w, a, m, b, acc, macc4);
    }
    for (int r = 0; r < mr; r++)
        _mm_storeu_ps(macc[r], macc4[r]);
    switch (nb - b) {
    case 1: step_pair(qt, mr, true, w, a, m, b, acc, 0, macc); break;
    case 2: step_pair(qt, mr, false, w, a, m, b, acc, 0, macc); break;
    case 3:
        step_pair(qt, mr, false, w, a, m, b, acc, 0, macc);
        step_pair(qt, mr, true, w, a, m, b + 2, acc, 1, macc);
        break;
    default: break;
    }
    for (int r = 0; r < mr; r++) {
        float y = reduce32(acc[r][0], acc[r][1]);
        if (lh_qt_has_min(qt))
            y = y + ((macc[r][0] + macc[r][2]) + (macc[r][1] + macc[r][3]));
        out[r] = y;
    }
}

/* ---- K types ----------------------------------------------------------------------------------- */

/* q4_k / q5_k: isum[r], msum[r] of super-block b, on 256-bit registers: one sub-block per
 * register, two integer accumulators per row */
static LH_ALWAYS_INLINE TGT void ints_q45k(const bool five, const int mr, const uint8_t *blk,
                                           const lh_qact *a, int64_t m, int64_t b, int *isum,
                                           int *msum)
{
    uint64_t sc8, mn8;
    lh_qmm_k_scales(blk + 4, &sc8, &mn8);
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc8)));
    const uint8_t *qs = blk + (five ? 48 : 16);
    const __m256i low = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i iacc[LH_QMM_MR_MAX][2];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
        iacc[r][0] = iacc[r][1] = _mm256_setzero_si256();
    const __m256i qhv = five ? load256(blk + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        const __m256i y = load256(qs + 32 * t);
        __m256i lo = _mm256_and_si256(y, low), hi = _mm256_and_si256(_mm256_srli_epi16(y, 4), low);
        if (five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qhv, 2 * t + 1), one), 4));
        }
        const __m256i slo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(4 * t | (4 * t + 1) << 8)));
        const __m256i shi = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)((4 * t + 2) | (4 * t + 3) << 8)));
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            const int8_t *q = a->q + (m + r) * a->K + 256 * b + 64 * t;
            iacc[r][0] = _mm256_dpwssd_epi32(iacc[r][0], _mm256_maddubs_epi16(lo, load256(q)), slo);
            iacc[r][1] = _mm256_dpwssd_epi32(iacc[r][1], _mm256_maddubs_epi16(hi, load256(q + 32)), shi);
        }
    }
    const __m128i mb = _mm_cvtsi64_si128((long long)mn8);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++) {
        const int16_t *bs = a->bsum + (m + r) * (a->K / 16) + 16 * b;
        isum[r] = hsum_i32_256(_mm256_add_epi32(iacc[r][0], iacc[r][1]));
        msum[r] = hsum_i32_256(_mm256_madd_epi16(load256(bs), mins));
    }
}

static LH_ALWAYS_INLINE TGT void ints_q6k(const int mr, const uint8_t *blk, const lh_qact *a,
                                          int64_t m, int64_t b, int *isum)
{
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    const __m512i low = _mm512_set1_epi8(0x0f), three = _mm512_set1_epi8(3);
    __m512i iacc[LH_QMM_MR_MAX];
    for (int r = 0; r < mr; r++)
        iacc[r] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        const __m512i qlv = load512(ql + 64 * h); /* [ql A | ql B] */
        const __m256i qhv = load256(qh + 32 * h);
        const __m512i qh2 = join256(qhv, _mm256_srli_epi16(qhv, 2));
        /* elements 128 h + 0..63: [A & 15 | B & 15] with [qh & 3 | qh >> 2 & 3];
         * 128 h + 64..127: the high nibbles with the next two bit pairs */
        const __m512i u01 = _mm512_or_si512(_mm512_and_si512(qlv, low),
                                            _mm512_slli_epi16(_mm512_and_si512(qh2, three), 4));
        const __m512i u23 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(qlv, 4), low),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), three), 4));
        for (int p = 0; p < 2; p++) { /* groups 8h + 4p .. + 3, one per 128-bit lane */
            const int64_t g = 8 * h + 4 * p;
            const int64_t rep = 0x0001000100010001ll; /* an int16 in each of 4 lanes */
            const __m512i idx = _mm512_set_epi64((g + 3) * rep, (g + 3) * rep, (g + 2) * rep,
                                                 (g + 2) * rep, (g + 1) * rep, (g + 1) * rep,
                                                 g * rep, g * rep);
            const __m512i scv = _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(sc16));
            const __m512i u = p ? u23 : u01;
            for (int r = 0; r < mr; r++) {
                const int8_t *q = a->q + (m + r) * a->K + 256 * b + 128 * h + 64 * p;
                iacc[r] = _mm512_dpwssd_epi32(iacc[r], _mm512_maddubs_epi16(u, load512(q)), scv);
            }
        }
    }
    for (int r = 0; r < mr; r++) {
        const int16_t *bs = a->bsum + (m + r) * (a->K / 16) + 16 * b;
        isum[r] = hsum_i32(iacc[r]) - 32 * hsum_i32_256(_mm256_madd_epi16(load256(bs), sc16));
    }
}

QMM_DOT_FN(dot_q4_0, LH_QT_Q4_0, dot32)
QMM_DOT_FN(dot_q4_1, LH_QT_Q4_1, dot32)
QMM_DOT_FN(dot_q5_0, LH_QT_Q5_0, dot32)
QMM_DOT_FN(dot_q5_1, LH_QT_Q5_1, dot32)
QMM_DOT_FN(dot_q8_0, LH_QT_Q8_0, dot32)

const lh_qmm_ops lh_qmm_ops_avx512 = {
    "avx512",
    lh_qmm_quant_avx2,
    {dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k},
    {8, 0, 16, 0, 128, 0, 0, 0}, /* q4_0: u - 8, q5_0: u - 16, q8_0: (w + 128) - 128 */
};
#endif
