/* AVX-512F matmul tiles (per-function target attributes; run only when isa.c says so).
 *
 * Per output element: 16 lanes accumulate x[k] * w[k] by FMA over k = lane (mod 16); a K tail
 * shorter than 16 is zero-padded into one more step; the lanes are then added in a fixed order.
 * Weights are converted in registers: bf16 is a 16-bit shift, f16 is vcvtph2ps. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx2,fma,f16c")))
#define MR 4 /* x rows per tile (M > 1) */
#define NR 4 /* w rows per tile (M > 1): 16 accumulators + 4 w + 1 x of 32 registers */
#define NR1 8 /* w rows per tile when M == 1 */

static LH_ALWAYS_INLINE TGT __m512 ld_w(const int wdt, const void *w, int64_t i)
{
    if (wdt == LH_WDT_F32)
        return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (wdt == LH_WDT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static LH_ALWAYS_INLINE TGT float hsum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

static LH_ALWAYS_INLINE const void *w_row(const int wdt, const void *w, int64_t off)
{
    return (const unsigned char *)w + (size_t)off * (wdt == LH_WDT_F32 ? 4u : 2u);
}

static LH_ALWAYS_INLINE TGT void tile(const int mr, const int nr, const int wdt, int64_t kc,
                                      const float *x, int64_t ldx, const void *w, int64_t ldw,
                                      float *acc, int64_t ldacc)
{
    __m512 a[MR][NR1];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            a[i][j] = _mm512_setzero_ps();

    int64_t k = 0;
    if (mr == 1) {
        for (; k + 16 <= kc; k += 16) {
            const __m512 xv = _mm512_loadu_ps(x + k);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                a[0][j] = _mm512_fmadd_ps(xv, ld_w(wdt, w_row(wdt, w, j * ldw), k), a[0][j]);
        }
    } else {
        for (; k + 16 <= kc; k += 16) {
            __m512 wv[NR];
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                wv[j] = ld_w(wdt, w_row(wdt, w, j * ldw), k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
#pragma GCC unroll 8
                for (int j = 0; j < nr; j++)
                    a[i][j] = _mm512_fmadd_ps(xv, wv[j], a[i][j]);
            }
        }
    }
    if (k < kc) {
        /* zero-padded tail: the raw elements are copied into small buffers (no calls here,
         * which would force the accumulators out of registers) and converted as above */
        const int64_t rem = kc - k;
        float xt[MR][16];
        union {
            float f[16];
            uint16_t h[16];
        } wt[NR1];
        for (int i = 0; i < mr; i++)
            for (int e = 0; e < 16; e++)
                xt[i][e] = e < rem ? x[i * ldx + k + e] : 0.0f;
        for (int j = 0; j < nr; j++)
            for (int e = 0; e < 16; e++) {
                if (wdt == LH_WDT_F32)
                    wt[j].f[e] = e < rem ? ((const float *)w)[j * ldw + k + e] : 0.0f;
                else
                    wt[j].h[e] = e < rem ? ((const uint16_t *)w)[j * ldw + k + e] : (uint16_t)0;
            }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m512 xv = _mm512_loadu_ps(xt[i]);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                a[i][j] = _mm512_fmadd_ps(xv, ld_w(wdt, &wt[j], 0), a[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i * ldacc + j] += hsum16(a[i][j]);
}

/* One instantiation per (mr, nr): constant trip counts keep the accumulators in registers. */
#define CASE1(NRV, WDT)                                                                           \
    case NRV: tile(1, NRV, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;
#define CASEM(MRV, WDT)                                                                           \
    case MRV:                                                                                     \
        switch (nr) {                                                                             \
        case 1: tile(MRV, 1, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                        \
        case 2: tile(MRV, 2, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                        \
        case 3: tile(MRV, 3, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                        \
        default: tile(MRV, 4, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                       \
        }

#define DEFINE_TILE(NAME, WDT)                                                                    \
    TGT void NAME(int mr, int nr, int64_t kc, const float *x, int64_t ldx, const void *w,         \
                  int64_t ldw, float *acc, int64_t ldacc)                                         \
    {                                                                                             \
        if (mr == 1) {                                                                            \
            switch (nr) {                                                                         \
                CASE1(1, WDT) CASE1(2, WDT) CASE1(3, WDT) CASE1(4, WDT)                           \
                CASE1(5, WDT) CASE1(6, WDT) CASE1(7, WDT) default:                                \
                tile(1, 8, WDT, kc, x, ldx, w, ldw, acc, ldacc);                                  \
                return;                                                                           \
            }                                                                                     \
        }                                                                                         \
        switch (mr) {                                                                             \
            CASEM(2, WDT)                                                                         \
            CASEM(3, WDT)                                                                         \
        default:                                                                                  \
            switch (nr) {                                                                         \
            case 1: tile(4, 1, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                      \
            case 2: tile(4, 2, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                      \
            case 3: tile(4, 3, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                      \
            default: tile(4, 4, WDT, kc, x, ldx, w, ldw, acc, ldacc); return;                     \
            }                                                                                     \
        }                                                                                         \
    }

DEFINE_TILE(lh_cpu_tile_avx512_f32, LH_WDT_F32)
DEFINE_TILE(lh_cpu_tile_avx512_bf16, LH_WDT_BF16)
DEFINE_TILE(lh_cpu_tile_avx512_f16, LH_WDT_F16)

#endif
