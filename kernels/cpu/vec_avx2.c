/* AVX2 + FMA + F16C primitives (per-function target attributes). Tails shorter than a vector
 * go through zero- (or -inf-) padded buffers so that every element takes the same path. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define V 8

static LH_ALWAYS_INLINE TGT float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

static LH_ALWAYS_INLINE TGT float hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

/* exp(x), Cephes expf polynomial (about 1 ulp). x > 88.7228 gives +inf, x < -87.3365 gives 0
 * (the denormal range is flushed), NaN stays NaN. */
static LH_ALWAYS_INLINE TGT __m256 v_exp(__m256 x)
{
    const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo = _mm256_set1_ps(-87.33654022216797f);
    __m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x)); /* NaN passes (second operand) */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n in two factors, each a normal number for n in [-126, 128] */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, p1), p2);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return y;
}

static TGT float a_sumsq(const float *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 * V <= n; i += 2 * V) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + V);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    if (i + V <= n) {
        __m256 v0 = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        i += V;
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += x[i] * x[i];
    return s;
}

static TGT void a_add(float *res, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        res[i] += x[i];
}

static TGT void a_norm_apply(float *out, const float *x, float r, const float *wf, int64_t n)
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
    __m256 e = v_exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static TGT void a_silu_mul(float *out, const float *g, const float *u, int64_t n)
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

static TGT float a_max(const float *x, int64_t n)
{
    int64_t i = 0;
    float m = x[0];
    if (n >= V) {
        __m256 mv = _mm256_loadu_ps(x);
        for (i = V; i + V <= n; i += V)
            mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
        m = hmax(mv);
    }
    for (; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

static TGT float a_exp_sub_sum(float *x, float m, int64_t n)
{
    const __m256 mv = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m256 e = v_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
        float b[V];
        for (int k = 0; k < V; k++)
            b[k] = i + k < n ? x[i + k] : -INFINITY;
        __m256 e = v_exp(_mm256_sub_ps(_mm256_loadu_ps(b), mv));
        _mm256_storeu_ps(b, e);
        acc = _mm256_add_ps(acc, e);
        memcpy(x + i, b, (size_t)(n - i) * sizeof(float));
    }
    return hsum(acc);
}

static TGT void a_scale(float *x, float s, int64_t n)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    for (; i < n; i++)
        x[i] *= s;
}

static TGT float a_dot(const float *a, const float *b, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 * V <= n; i += 2 * V) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + V), _mm256_loadu_ps(b + i + V), a1);
    }
    if (i + V <= n) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        i += V;
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static TGT void a_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static TGT void a_rope_rot(float *lo, float *hi, const float *c, const float *s, int64_t n)
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

static TGT int64_t a_argmax(const float *x, int64_t n)
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
    float m = hmax(mv);
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

static TGT void a_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; i++)
        dst[i] = lh_cpu_bf16_to_f32(src[i]);
}

static TGT void a_f16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = lh_k_f16_to_f32(src[i]);
}

static TGT void a_f32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    for (; i + V <= n; i += V) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m256i u = _mm256_castps_si256(v);
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i nanr = _mm256_or_si256(hi, quiet);
        __m256i nanm = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, nanr, nanm);
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++)
        dst[i] = lh_k_f32_to_bf16(src[i]);
}

static TGT void a_f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = lh_k_f32_to_f16(src[i]);
}

const lh_cpu_ops lh_cpu_ops_avx2 = {
    .isa = LH_K_ISA_AVX2,
    .tile_mr = 4,
    .tile_nr = 3,
    .tile_nr1 = 8,
    .tile = {lh_cpu_tile_avx2_f32, lh_cpu_tile_avx2_bf16, lh_cpu_tile_avx2_f16},
    .sumsq = a_sumsq,
    .add = a_add,
    .norm_apply = a_norm_apply,
    .silu_mul = a_silu_mul,
    .max = a_max,
    .exp_sub_sum = a_exp_sub_sum,
    .scale = a_scale,
    .dot = a_dot,
    .axpy = a_axpy,
    .rope_rot = a_rope_rot,
    .argmax = a_argmax,
    .bf16_to_f32 = a_bf16_to_f32,
    .f16_to_f32 = a_f16_to_f32,
    .f32_to_bf16 = a_f32_to_bf16,
    .f32_to_f16 = a_f32_to_f16,
};

#endif
