/* AVX-512F primitives (per-function target attributes). Tails use AVX-512 masks. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#include <immintrin.h>
#include <math.h>

#define TGT __attribute__((target("avx512f,avx2,fma,f16c")))
#define V 16

static LH_ALWAYS_INLINE TGT __mmask16 tail_mask(int64_t rem)
{
    return (__mmask16)((1u << rem) - 1u);
}

static LH_ALWAYS_INLINE TGT float hsum(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

static LH_ALWAYS_INLINE TGT float hmax(__m512 v)
{
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

/* exp(x): the same algorithm and constants as the AVX2 path. */
static LH_ALWAYS_INLINE TGT __m512 v_exp(__m512 x)
{
    const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo = _mm512_set1_ps(-87.33654022216797f);
    __m512 xc = _mm512_max_ps(lo, _mm512_min_ps(hi, x)); /* NaN passes (second operand) */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1);
    __m512i n2 = _mm512_sub_epi32(ni, n1);
    __m512 p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
    __m512 p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
    y = _mm512_mul_ps(_mm512_mul_ps(y, p1), p2);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
    return y;
}

static TGT float b_sumsq(const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 * V <= n; i += 2 * V) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + V);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    for (; i < n; i += V) {
        __m512 v0 = _mm512_maskz_loadu_ps(n - i >= V ? (__mmask16)0xffff : tail_mask(n - i), x + i);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
    }
    return hsum(_mm512_add_ps(a0, a1));
}

static TGT void b_add(float *res, const float *x, int64_t n)
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

static TGT void b_norm_apply(float *out, const float *x, float r, const float *wf, int64_t n)
{
    const __m512 rv = _mm512_set1_ps(r);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), rv),
                                 _mm512_maskz_loadu_ps(m, wf + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

static TGT void b_silu_mul(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 r = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), uv);
        _mm512_mask_storeu_ps(out + i, m, r);
    }
}

static TGT float b_max(const float *x, int64_t n)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i));
    }
    return hmax(mv);
}

static TGT float b_exp_sub_sum(float *x, float mx, int64_t n)
{
    const __m512 mv = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 e = v_exp(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), mv));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_add_ps(acc, e);
    }
    return hsum(acc);
}

static TGT void b_scale(float *x, float s, int64_t n)
{
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
    }
}

static TGT float b_dot(const float *a, const float *b, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 * V <= n; i += 2 * V) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + V), _mm512_loadu_ps(b + i + V), a1);
    }
    for (; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
    }
    return hsum(_mm512_add_ps(a0, a1));
}

static TGT void b_axpy(float *y, float a, const float *x, int64_t n)
{
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static TGT void b_rope_rot(float *lo, float *hi, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 l = _mm512_maskz_loadu_ps(m, lo + i), h = _mm512_maskz_loadu_ps(m, hi + i);
        __m512 cv = _mm512_maskz_loadu_ps(m, c + i), sv = _mm512_maskz_loadu_ps(m, s + i);
        _mm512_mask_storeu_ps(lo + i, m, _mm512_sub_ps(_mm512_mul_ps(l, cv), _mm512_mul_ps(h, sv)));
        _mm512_mask_storeu_ps(hi + i, m, _mm512_add_ps(_mm512_mul_ps(h, cv), _mm512_mul_ps(l, sv)));
    }
}

static TGT int64_t b_argmax(const float *x, int64_t n)
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
    const __m512 target = _mm512_set1_ps(hmax(mv));
    for (int64_t i = 0; i < n; i += V) {
        __mmask16 m = n - i >= V ? (__mmask16)0xffff : tail_mask(n - i);
        __mmask16 eq = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), target, _CMP_EQ_OQ);
        if (eq)
            return i + __builtin_ctz((unsigned)eq);
    }
    return 0; /* unreachable for n >= 1 */
}

static TGT void b_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; i++)
        dst[i] = lh_cpu_bf16_to_f32(src[i]);
}

static TGT void b_f16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++)
        dst[i] = lh_k_f16_to_f32(src[i]);
}

static TGT void b_f32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    for (; i + V <= n; i += V) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m512i u = _mm512_castps_si512(v);
        __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
        r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_or_si512(hi, quiet));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++)
        dst[i] = lh_k_f32_to_bf16(src[i]);
}

static TGT void b_f32_to_f16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + V <= n; i += V)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = lh_k_f32_to_f16(src[i]);
}

const lh_cpu_ops lh_cpu_ops_avx512 = {
    .isa = LH_K_ISA_AVX512,
    .tile_mr = 4,
    .tile_nr = 4,
    .tile_nr1 = 8,
    .tile = {lh_cpu_tile_avx512_f32, lh_cpu_tile_avx512_bf16, lh_cpu_tile_avx512_f16},
    .sumsq = b_sumsq,
    .add = b_add,
    .norm_apply = b_norm_apply,
    .silu_mul = b_silu_mul,
    .max = b_max,
    .exp_sub_sum = b_exp_sub_sum,
    .scale = b_scale,
    .dot = b_dot,
    .axpy = b_axpy,
    .rope_rot = b_rope_rot,
    .argmax = b_argmax,
    .bf16_to_f32 = b_bf16_to_f32,
    .f16_to_f32 = b_f16_to_f32,
    .f32_to_bf16 = b_f32_to_bf16,
    .f32_to_f16 = b_f32_to_f16,
};

#endif
