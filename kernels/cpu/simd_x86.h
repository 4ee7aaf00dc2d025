/* The x86 vector vocabulary of the SIMD templates matmul_simd.inc and vec_simd.inc: the types,
 * the lane count, the matmul tile shape and the intrinsics the templates use, under ISA-neutral
 * names (vf_load, vf_fmadd, ...). Each name is given for AVX2 + FMA + F16C and for AVX-512F
 * side by side, SIMD_PICK(avx2, avx512); the including file picks one by defining SIMD_AVX512
 * as 0 or 1 first. A template written in these names compiles to the instructions the ISA's own
 * hand-written code would have.
 *
 * Included (only) by matmul_avx2.c, matmul_avx512.c, vec_avx2.c, vec_avx512.c, scaled_avx2.c
 * and scaled_avx512.c, inside
 * #if LH_CPU_X86. Every function gets TGT, a per-function target attribute: the library needs
 * no -march flag and runs this code only when isa.c says the CPU has the ISA. */
#ifndef LH_SIMD_X86_H
#define LH_SIMD_X86_H

#include "cpu_kernels.h"

#include <immintrin.h>

#if !defined(SIMD_AVX512) || (SIMD_AVX512 != 0 && SIMD_AVX512 != 1)
#error "define SIMD_AVX512 as 0 (AVX2) or 1 (AVX-512F) before including simd_x86.h"
#endif
#if SIMD_AVX512
#define SIMD_PICK(avx2, avx512) avx512
#else
#define SIMD_PICK(avx2, avx512) avx2
#endif

#define TGT                                                                                       \
    SIMD_PICK(__attribute__((target("avx2,fma,f16c"))),                                           \
              __attribute__((target("avx512f,avx2,fma,f16c"))))

/* what the templates define */
#define SIMD_ISA_ID SIMD_PICK(LH_K_ISA_AVX2, LH_K_ISA_AVX512)
#define SIMD_OPS SIMD_PICK(lh_cpu_ops_avx2, lh_cpu_ops_avx512)
#define SIMD_TILE_F32 SIMD_PICK(lh_cpu_tile_avx2_f32, lh_cpu_tile_avx512_f32)
#define SIMD_TILE_BF16 SIMD_PICK(lh_cpu_tile_avx2_bf16, lh_cpu_tile_avx512_bf16)
#define SIMD_TILE_F16 SIMD_PICK(lh_cpu_tile_avx2_f16, lh_cpu_tile_avx512_f16)

/* matmul tile shape (lh_cpu_ops.tile_mr, tile_nr, tile_nr1): MR x NR accumulators, NR weight
 * vectors and one x vector fill the vector registers, 12 + 3 + 1 of AVX2's 16, 16 + 4 + 1 of
 * AVX-512's 32. */
#define TILE_MR 4
#define TILE_NR SIMD_PICK(3, 4)
#define TILE_NR1 8 /* w rows per tile when M == 1 */

#define V SIMD_PICK(8, 16)                  /* f32 lanes */
typedef SIMD_PICK(__m256, __m512) vf;       /* V floats */
typedef SIMD_PICK(__m256i, __m512i) vi;     /* V int32 */
typedef SIMD_PICK(__m128i, __m256i) vh;     /* V 16-bit values (bf16, f16) */
typedef SIMD_PICK(__m256, __mmask16) vmask; /* a compare's per-lane result */

#define vf_zero SIMD_PICK(_mm256_setzero_ps, _mm512_setzero_ps)
#define vf_set1 SIMD_PICK(_mm256_set1_ps, _mm512_set1_ps)
#define vf_load SIMD_PICK(_mm256_loadu_ps, _mm512_loadu_ps)
#define vf_store SIMD_PICK(_mm256_storeu_ps, _mm512_storeu_ps)
#define vf_add SIMD_PICK(_mm256_add_ps, _mm512_add_ps)
#define vf_mul SIMD_PICK(_mm256_mul_ps, _mm512_mul_ps)
#define vf_min SIMD_PICK(_mm256_min_ps, _mm512_min_ps)
#define vf_max SIMD_PICK(_mm256_max_ps, _mm512_max_ps)
#define vf_fmadd SIMD_PICK(_mm256_fmadd_ps, _mm512_fmadd_ps)    /* a * b + c, one rounding */
#define vf_fnmadd SIMD_PICK(_mm256_fnmadd_ps, _mm512_fnmadd_ps) /* c - a * b, one rounding */
#define vf_round(x)                                                                               \
    SIMD_PICK(_mm256_round_ps, _mm512_roundscale_ps)(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vf_cmp SIMD_PICK(_mm256_cmp_ps, _mm512_cmp_ps_mask) /* (a, b, _CMP_*) -> vmask */
#define vf_as_vi SIMD_PICK(_mm256_castps_si256, _mm512_castps_si512)
#define vf_to_vi SIMD_PICK(_mm256_cvtps_epi32, _mm512_cvtps_epi32) /* rounded to nearest */

#define vi_set1 SIMD_PICK(_mm256_set1_epi32, _mm512_set1_epi32)
#define vi_as_vf SIMD_PICK(_mm256_castsi256_ps, _mm512_castsi512_ps)
#define vi_add SIMD_PICK(_mm256_add_epi32, _mm512_add_epi32)
#define vi_sub SIMD_PICK(_mm256_sub_epi32, _mm512_sub_epi32)
#define vi_and SIMD_PICK(_mm256_and_si256, _mm512_and_si512)
#define vi_or SIMD_PICK(_mm256_or_si256, _mm512_or_si512)
#define vi_slli SIMD_PICK(_mm256_slli_epi32, _mm512_slli_epi32)
#define vi_srli SIMD_PICK(_mm256_srli_epi32, _mm512_srli_epi32)
#define vi_srai SIMD_PICK(_mm256_srai_epi32, _mm512_srai_epi32)

#define vh_load(p) SIMD_PICK(_mm_loadu_si128, _mm256_loadu_si256)((const vh *)(p))
#define vh_store(p, h) SIMD_PICK(_mm_storeu_si128, _mm256_storeu_si256)((vh *)(p), h)
#define vh_to_vi SIMD_PICK(_mm256_cvtepu16_epi32, _mm512_cvtepu16_epi32) /* zero-extended */
#define vf_from_f16 SIMD_PICK(_mm256_cvtph_ps, _mm512_cvtph_ps)
#define vf_to_f16(x) SIMD_PICK(_mm256_cvtps_ph, _mm512_cvtps_ph)(x, _MM_FROUND_TO_NEAREST_INT)
/* bf16 is the upper half of an f32 */
#define vf_from_bf16(h) vi_as_vf(vi_slli(vh_to_vi(h), 16))

/* The operations whose form differs: AVX2 blends by a vector mask, AVX-512 by a mask register;
 * AVX2 packs 32-bit lanes (each in [0, 0xffff]) to 16 bits within 128-bit halves, so the
 * halves' results are put back in order. */
#if SIMD_AVX512
#define vf_blend(x, m, y) _mm512_mask_mov_ps(x, m, y) /* x, lanes set in m taken from y */
#define vi_blend(x, m, y) _mm512_mask_mov_epi32(x, m, y)
#define vi_to_vh _mm512_cvtepi32_epi16 /* the low 16 bits of each lane */
#else
#define vf_blend(x, m, y) _mm256_blendv_ps(x, y, m)
#define vi_blend(x, m, y) _mm256_blendv_epi8(x, y, _mm256_castps_si256(m))
#define vi_to_vh(x) _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08))
#endif

/* Horizontal sum and max in a fixed order: the upper half onto the lower down to 128 bits
 * (AVX-512: 512 -> 256 -> 128), then lanes 2-3 onto 0-1, then lane 1 onto 0. */
#if SIMD_AVX512
#define SIMD_FOLD256(v, op)                                                                       \
    _mm256_##op##_ps(_mm512_castps512_ps256(v),                                                   \
                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
#else
#define SIMD_FOLD256(v, op) (v)
#endif
#define SIMD_HREDUCE(name, op)                                                                    \
    static LH_ALWAYS_INLINE TGT float name(vf v)                                                  \
    {                                                                                             \
        __m256 h = SIMD_FOLD256(v, op);                                                           \
        __m128 s = _mm_##op##_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));         \
        s = _mm_##op##_ps(s, _mm_movehl_ps(s, s));                                                \
        s = _mm_##op##_ss(s, _mm_shuffle_ps(s, s, 0x55));                                         \
        return _mm_cvtss_f32(s);                                                                  \
    }
SIMD_HREDUCE(vf_hsum, add)
SIMD_HREDUCE(vf_hmax, max)
#undef SIMD_HREDUCE
#undef SIMD_FOLD256

#endif
