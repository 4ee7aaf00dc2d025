/* AVX2 + FMA + F16C primitives: lh_cpu_ops_avx2. The primitives AVX-512 shares are in
 * vec_simd.inc (in the vocabulary of simd_x86.h); this file holds the ones whose tail, the
 * last n % 8 elements, is AVX2's own: finished in scalar code, or, in silu_mul and exp_sub_sum,
 * through a zero- (or -inf-) padded buffer so that those elements take the vector path too.
 * Per-function target attributes; run only when isa.c says the CPU has AVX2, FMA and F16C. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#define SIMD_AVX512 0
#include "simd_x86.h"

#include <math.h>

/* The end of dot and sumsq (vec_simd.inc), after the pairs of vectors: one more vector into a0,
 * the lanes added up, then the last n % 8 products one by one. */
static LH_ALWAYS_INLINE TGT float dot_tail(vf a0, vf a1, const float *a, const float *b, int64_t i,
                                           int64_t n)
{
    if (i + V <= n) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        i += V;
    }
    float s = vf_hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The last n % 8 elements of axpy_rows (vec_simd.inc): simd_axpy's scalar tail, row by row. */
static LH_ALWAYS_INLINE TGT void axpy_rows_tail(float *y, const float *w, const float *x,
                                                int64_t xstride, int64_t rows, int64_t i, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const float a = w[r], *xr = x + r * xstride;
        for (int64_t e = i; e < n; e++)
            y[e] += a * xr[e];
    }
}

#include "vec_simd.inc"

static TGT void simd_add(float *res, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        res[i] += x[i];
}

static TGT void simd_norm_apply(float *out, const float *x, float r, const float *wf, int64_t n)
{
    const __m256 rv = _mm256_set1_ps(r);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(out + i,
                         _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv), _mm256_loadu_ps(wf + i)));
    for (; i < n; i++)
        out[i] = (x[i] * r) * wf[i];
}

static LH_ALWAYS_INLINE TGT __m256 silu_mul_v(__m256 g, __m256 u)
{
    __m256 e = vf_exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static TGT void simd_silu_mul(float *out, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(out + i, silu_mul_v(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float gb[V] = {0}, ub[V] = {0}, ob[V];
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ub, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(ob, silu_mul_v(_mm256_loadu_ps(gb), _mm256_loadu_ps(ub)));
        memcpy(out + i, ob, (size_t)(n - i) * sizeof(float));
    }
}

static TGT float simd_max(const float *x, int64_t n)
{
    int64_t i = 0;
    float m = x[0];
    if (n >= V) {
        __m256 mv = _mm256_loadu_ps(x);
        for (i = V; i + V <= n; i += V)
            mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
        m = vf_hmax(mv);
    }
    for (; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

static TGT float simd_exp_sub_sum(float *x, float m, int64_t n)
{
    const __m256 mv = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m256 e = vf_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
        float b[V];
        for (int k = 0; k < V; k++)
            b[k] = i + k < n ? x[i + k] : -INFINITY;
        __m256 e = vf_exp(_mm256_sub_ps(_mm256_loadu_ps(b), mv));
        _mm256_storeu_ps(b, e);
        acc = _mm256_add_ps(acc, e);
        memcpy(x + i, b, (size_t)(n - i) * sizeof(float));
    }
    return vf_hsum(acc);
}

static TGT void simd_scale(float *x, float s, int64_t n)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; i++)
        x[i] *= s;
}

static TGT void simd_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static TGT void simd_rope_rot(float *lo, float *hi, const float *c, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m256 l = _mm256_loadu_ps(lo + i), h = _mm256_loadu_ps(hi + i);
        __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(lo + i, _mm256_sub_ps(_mm256_mul_ps(l, cv), _mm256_mul_ps(h, sv)));
        _mm256_storeu_ps(hi + i, _mm256_add_ps(_mm256_mul_ps(h, cv), _mm256_mul_ps(l, sv)));
    }
    for (; i < n; i++) {
        float l = lo[i], h = hi[i];
        lo[i] = l * c[i] - h * s[i];
        hi[i] = h * c[i] + l * s[i];
    }
}

/* Four pairs per vector: c and s duplicated into both lanes of their pair, the pairs' other
 * members swapped in, then addsub subtracts in the even lanes (a * c - b * s) and adds in the
 * odd ones (b * c + a * s): each lane rounds its two products and their sum as the scalar
 * code does. */
static TGT void simd_rope_rot_pairs(float *x, const float *c, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128 c4 = _mm_loadu_ps(c + i), s4 = _mm_loadu_ps(s + i);
        const __m256 cv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_unpacklo_ps(c4, c4)),
                                               _mm_unpackhi_ps(c4, c4), 1);
        const __m256 sv = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_unpacklo_ps(s4, s4)),
                                               _mm_unpackhi_ps(s4, s4), 1);
        const __m256 xv = _mm256_loadu_ps(x + 2 * i);
        const __m256 xs = _mm256_permute_ps(xv, 0xb1); /* b0 a0 b1 a1 ... */
        _mm256_storeu_ps(x + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(xv, cv), _mm256_mul_ps(xs, sv)));
    }
    for (; i < n; i++) {
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c[i] - b * s[i];
        x[2 * i + 1] = b * c[i] + a * s[i];
    }
}

static TGT int64_t simd_argmax(const float *x, int64_t n)
{
    /* pass 1: the maximum, and whether any element is NaN */
    __m256 mv = _mm256_set1_ps(-INFINITY);
    __m256 nanv = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m256 v = _mm256_loadu_ps(x + i);
        nanv = _mm256_or_ps(nanv, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        mv = _mm256_max_ps(mv, v);
    }
    if (_mm256_movemask_ps(nanv))
        return -1;
    float m = vf_hmax(mv);
    for (int64_t k = i; k < n; k++) {
        if (isnan(x[k]))
            return -1;
        if (x[k] > m)
            m = x[k];
    }
    /* pass 2: its first index */
    const __m256 target = _mm256_set1_ps(m);
    for (i = 0; i + V <= n; i += V) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
        if (mask)
            return i + __builtin_ctz((unsigned)mask);
    }
    for (; i < n; i++)
        if (x[i] == m)
            return i;
    return 0; /* unreachable for n >= 1 */
}

#endif
