/* The x86 kernels of lh_k_matmul_scaled's int8 path (the lh_sq_dot_fn contract of scaled.h):
 * exact integer dot products of int8 weight rows with int8 activation rows.
 *
 *  - AVX2: _mm256_maddubs_epi16 multiplies unsigned by signed bytes, so each product w * q is
 *    formed as |w| * (q with w's sign): |w| <= 128 and |q| <= 127, a pair sums to at most
 *    2 * 128 * 127 = 32512 and never saturates; _mm256_madd_epi16 by ones widens the pairs to
 *    int32 lanes. Tail columns come from a zero-padded copy of the weight bytes.
 *  - AVX-512 (F, BW, VL, VNNI): _mm512_dpbusd_epi32 on w + 128 (w xor 0x80, unsigned) and q:
 *    sum (w + 128) q = sum w q + 128 sum q, and qsum gives the second term. The tail is a
 *    masked load; the masked-off lanes read 0, become 128, and meet q's zero padding.
 * The int32 lanes are emptied into int64 totals every LH_SQ_CHUNK elements. Each kernel
 * instantiates its body per (mr, nr) so the accumulators stay in registers (AVX2 takes the
 * weight rows two at a time: 16 ymm registers). Run only when isa.c (and, for AVX-512,
 * lh_qmm_avx512_supported) say the CPU has the instructions. */
#include "scaled.h"

#if LH_CPU_X86
#include <immintrin.h>

#define TGT2 __attribute__((target("avx2,fma,f16c")))
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* The lanes' sum, widened to int64 first: each lane stays below 2^29 (LH_SQ_CHUNK), their
 * sum need not fit an int32. */
static LH_ALWAYS_INLINE TGT2 int64_t hsum256(__m256i v)
{
    const __m256i s4 = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
                                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
    return _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
}

/* 32 weight bytes at k, zero beyond K */
static LH_ALWAYS_INLINE TGT2 __m256i w32(const int8_t *w, int64_t k, int64_t K)
{
    if (K - k >= 32)
        return _mm256_loadu_si256((const __m256i *)(w + k));
    int8_t t[32] = {0};
    memcpy(t, w + k, (size_t)(K - k));
    return _mm256_loadu_si256((const __m256i *)t);
}

/* mr x rows by nr (<= 2) weight rows: tot[i * LH_SQ_NR + j] = the exact sums */
static LH_ALWAYS_INLINE TGT2 void body_avx2(const int mr, const int nr, const int8_t *w,
                                            size_t ldw, const int8_t *q, size_t ldq, int64_t K,
                                            int64_t *tot)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            tot[i * LH_SQ_NR + j] = 0;
    for (int64_t c0 = 0; c0 < K; c0 += LH_SQ_CHUNK) {
        const int64_t c1 = K - c0 < LH_SQ_CHUNK ? K : c0 + LH_SQ_CHUNK;
        __m256i acc[LH_SQ_MR][2];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm256_setzero_si256();
        for (int64_t k = c0; k < c1; k += 32) {
            __m256i aw[2], wv[2];
#pragma GCC unroll 2
            for (int j = 0; j < nr; j++) {
                wv[j] = w32(w + (size_t)j * ldw, k, K);
                aw[j] = _mm256_sign_epi8(wv[j], wv[j]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m256i qv = _mm256_loadu_si256((const __m256i *)(q + (size_t)i * ldq + k));
#pragma GCC unroll 2
                for (int j = 0; j < nr; j++) {
                    const __m256i p = _mm256_maddubs_epi16(aw[j], _mm256_sign_epi8(qv, wv[j]));
                    acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                tot[i * LH_SQ_NR + j] += hsum256(acc[i][j]);
    }
}

#define BODY2(MR, NR) body_avx2(MR, NR, wj, ldw, q, ldq, K, isum)
#define SWITCH_NR2(MR)                                                                            \
    do {                                                                                          \
        if (nr == 1)                                                                              \
            BODY2(MR, 1);                                                                         \
        else                                                                                      \
            BODY2(MR, 2);                                                                         \
    } while (0)

TGT2 void lh_sq_dot_avx2(const int8_t *w, size_t ldw, int nr_all, const int8_t *q, size_t ldq,
                         int mr, int64_t K, const int64_t *qsum, int64_t *isum_out)
{
    (void)qsum;
    for (int j0 = 0; j0 < nr_all; j0 += 2) {
        const int nr = nr_all - j0 < 2 ? nr_all - j0 : 2;
        int64_t isum[LH_SQ_MR * LH_SQ_NR];
        const int8_t *wj = w + (size_t)j0 * ldw; /* the pair's rows */
        switch (mr) {
        case 1: SWITCH_NR2(1); break;
        case 2: SWITCH_NR2(2); break;
        case 3: SWITCH_NR2(3); break;
        default: SWITCH_NR2(4); break;
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                isum_out[i * LH_SQ_NR + j0 + j] = isum[i * LH_SQ_NR + j];
    }
}

/* as hsum256: widened to int64 before the lanes are added */
static LH_ALWAYS_INLINE TGT512 int64_t hsum512(__m512i v)
{
    return _mm512_reduce_add_epi64(
        _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
                         _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1))));
}

/* mr x rows by nr weight rows, sums of (w + 128) q; the caller subtracts 128 qsum */
static LH_ALWAYS_INLINE TGT512 void body_avx512(const int mr, const int nr, const int8_t *w,
                                                size_t ldw, const int8_t *q, size_t ldq,
                                                int64_t K, int64_t *tot)
{
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            tot[i * LH_SQ_NR + j] = 0;
    for (int64_t c0 = 0; c0 < K; c0 += LH_SQ_CHUNK) {
        const int64_t c1 = K - c0 < LH_SQ_CHUNK ? K : c0 + LH_SQ_CHUNK;
        __m512i acc[LH_SQ_MR][LH_SQ_NR];
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int j = 0; j < nr; j++)
                acc[i][j] = _mm512_setzero_si512();
        for (int64_t k = c0; k < c1; k += 64) {
            /* all ones, or the first c1 - k bytes at the tail (c1 is K there) */
            const __mmask64 mk = c1 - k >= 64 ? ~(__mmask64)0 : ~(__mmask64)0 >> (64 - (c1 - k));
            __m512i wv[LH_SQ_NR];
#pragma GCC unroll 4
            for (int j = 0; j < nr; j++)
                wv[j] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, w + (size_t)j * ldw + k), x80);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++) {
                const __m512i qv = _mm512_loadu_si512(q + (size_t)i * ldq + k);
#pragma GCC unroll 4
                for (int j = 0; j < nr; j++)
                    acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], wv[j], qv);
            }
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                tot[i * LH_SQ_NR + j] += hsum512(acc[i][j]);
    }
}

#define BODY5(MR, NR) body_avx512(MR, NR, w, ldw, q, ldq, K, isum)
#define SWITCH_NR5(MR)                                                                            \
    do {                                                                                          \
        switch (nr) {                                                                             \
        case 1: BODY5(MR, 1); break;                                                              \
        case 2: BODY5(MR, 2); break;                                                              \
        case 3: BODY5(MR, 3); break;                                                              \
        default: BODY5(MR, 4); break;                                                             \
        }                                                                                         \
    } while (0)

TGT512 void lh_sq_dot_avx512(const int8_t *w, size_t ldw, int nr, const int8_t *q, size_t ldq,
                             int mr, int64_t K, const int64_t *qsum, int64_t *isum)
{
    switch (mr) {
    case 1: SWITCH_NR5(1); break;
    case 2: SWITCH_NR5(2); break;
    case 3: SWITCH_NR5(3); break;
    default: SWITCH_NR5(4); break;
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            isum[i * LH_SQ_NR + j] -= 128 * qsum[i];
}
#endif
