/* AVX-512F primitives: lh_cpu_ops_avx512. The primitives AVX2 shares are in vec_simd.inc (in
 * the vocabulary of simd_x86.h); this file holds the ones whose tail, the last n % 16
 * elements, goes through masked lanes (AVX2 finishes those in scalar code). Per-function target
 * attributes; run only when isa.c says the CPU has AVX-512F (and AVX2, FMA, F16C). */
#include "cpu_kernels.h"

#if LH_CPU_X86
#define SIMD_AVX512 1
#include "simd_x86.h"

#include <math.h>

static LH_ALWAYS_INLINE TGT __mmask16 tail_mask(int64_t rem)
{
    return (__mmask16)((1u << rem) - 1u);
}

/* The end of dot and sumsq (vec_simd.inc), after the pairs of vectors: the rest into a0, a whole
 * vector and / or one with masked (zeroed) lanes, then the lanes added up. */
static LH_ALWAYS_INLINE TGT float dot_tail(vf a0, vf a1, const float *a, const float *b, int64_t i,
                                           int64_t n)
{
    for (; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
    }
    return vf_hsum(_mm512_add_ps(a0, a1));
}

/* The last n % 16 elements of axpy_rows (vec_simd.inc): simd_axpy's masked step, row by
 * row, with the partial vector of y kept in a register. */
static LH_ALWAYS_INLINE TGT void axpy_rows_tail(float *y, const float *w, const float *x,
                                                int64_t xstride, int64_t rows, int64_t i, int64_t n)
{
    const __mmask16 m = tail_mask(n - i);
    __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
    for (int64_t r = 0; r < rows; r++)
        yv = _mm512_fmadd_ps(_mm512_set1_ps(w[r]), _mm512_maskz_loadu_ps(m, x + r * xstride + i), yv);
    _mm512_mask_storeu_ps(y + i, m, yv);
}

#include "vec_simd.inc"

static TGT void simd_add(float *res, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm512_storeu_ps(res + i, _mm512_add_ps(_mm512_loadu_ps(res + i), _mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(res + i, m,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m, res + i), _mm512_maskz_loadu_ps(m, x + i)));
    }
}

static TGT void simd_norm_apply(float *out, const float *x, float r, const float *wf, int64_t n)
{
    const __m512 rv = _mm512_set1_ps(r);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rv),
                                 _mm512_maskz_loadu_ps(m, wf + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

static TGT void simd_silu_mul(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        __m512 e = vf_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 r = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), uv);
        _mm512_mask_storeu_ps(out + i, m, r);
    }
}

static TGT float simd_max(const float *x, int64_t n)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i));
    }
    return vf_hmax(mv);
}

static TGT float simd_exp_sub_sum(float *x, float mx, int64_t n)
{
    const __m512 mv = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 e = vf_exp(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), mv));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return vf_hsum(acc);
}

static TGT void simd_scale(float *x, float s, int64_t n)
{
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
    }
}

static TGT void simd_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static TGT void simd_rope_rot(float *lo, float *hi, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 l = _mm512_maskz_loadu_ps(m, lo + i), h = _mm512_maskz_loadu_ps(m, hi + i);
        __m512 cv = _mm512_maskz_loadu_ps(m, c + i), sv = _mm512_maskz_loadu_ps(m, s + i);
        _mm512_mask_storeu_ps(lo + i, m, _mm512_sub_ps(_mm512_mul_ps(l, cv), _mm512_mul_ps(h, sv)));
        _mm512_mask_storeu_ps(hi + i, m, _mm512_add_ps(_mm512_mul_ps(h, cv), _mm512_mul_ps(l, sv)));
    }
}

/* Eight pairs per vector, the last ones masked: c and s spread over both lanes of their pair
 * (a permute of the eight loaded into the low lanes), the pairs' other members swapped in,
 * then a - in the even lanes (a * c - b * s) and a + in the odd ones (b * c + a * s): each
 * lane rounds its two products and their sum as the scalar code does. */
static TGT void simd_rope_rot_pairs(float *x, const float *c, const float *s, int64_t n)
{
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t rem = n - i >= 8 ? 8 : n - i;
        const __mmask16 mp = tail_mask(rem), mx = rem == 8 ? (__mmask16)0xffff : tail_mask(2 * rem);
        const __m512 cv = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mp, c + i));
        const __m512 sv = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mp, s + i));
        const __m512 xv = _mm512_maskz_loadu_ps(mx, x + 2 * i);
        const __m512 p = _mm512_mul_ps(xv, cv);
        const __m512 q = _mm512_mul_ps(_mm512_permute_ps(xv, 0xb1), sv); /* b0 a0 b1 a1 ... */
        _mm512_mask_storeu_ps(x + 2 * i, mx,
                              _mm512_mask_sub_ps(_mm512_add_ps(p, q), (__mmask16)0x5555, p, q));
    }
}

static TGT int64_t simd_argmax(const float *x, int64_t n)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    __mmask16 nanm = 0;
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i);
        nanm |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mv = _mm512_max_ps(mv, v);
    }
    if (nanm)
        return -1;
    const __m512 target = _mm512_set1_ps(vf_hmax(mv));
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __mmask16 eq = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), target, _CMP_EQ_OQ);
        if (eq)
            return i + __builtin_ctz((unsigned)eq);
    }
    return 0; /* unreachable for n >= 1 */
}

#endif
