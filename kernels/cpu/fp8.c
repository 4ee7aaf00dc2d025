/* fp8 e4m3, the OCP "FN" variant (torch.float8_e4m3fn): sign, 4 exponent bits (bias 7), 3
 * mantissa bits; no infinities; S.1111.111 is NaN; largest finite 448 (S.1111.110); exponent
 * field 0 holds the subnormals m * 2^-9.
 *
 * Decoding is exact (every code is an f32), through a 256-entry table. Encoding rounds to
 * nearest even with integer arithmetic (no dependence on the floating-point environment) and
 * saturates: a finite or infinite value whose rounded magnitude would exceed 448 becomes
 * +-448. NaN stays NaN (0x7f with the input's sign). */
#include "cpu_kernels.h"
#include "paged_kernels.h"

#include <math.h>

/* value of the code with exponent field e and mantissa m (sign excluded) */
#define FP8_MAG(e, m)                                                                             \
    ((e) == 0 ? (float)(m) / 512.0f                                                               \
              : ((e) == 15 && (m) == 7) ? NAN : (float)((8 + (m)) * (double)(1 << (e)) / 1024.0))
#define FP8_E(s, e)                                                                               \
    (s) * FP8_MAG(e, 0), (s) * FP8_MAG(e, 1), (s) * FP8_MAG(e, 2), (s) * FP8_MAG(e, 3),           \
        (s) * FP8_MAG(e, 4), (s) * FP8_MAG(e, 5), (s) * FP8_MAG(e, 6), (s) * FP8_MAG(e, 7)
#define FP8_S(s)                                                                                  \
    FP8_E(s, 0), FP8_E(s, 1), FP8_E(s, 2), FP8_E(s, 3), FP8_E(s, 4), FP8_E(s, 5), FP8_E(s, 6),    \
        FP8_E(s, 7), FP8_E(s, 8), FP8_E(s, 9), FP8_E(s, 10), FP8_E(s, 11), FP8_E(s, 12),          \
        FP8_E(s, 13), FP8_E(s, 14), FP8_E(s, 15)

/* -0.0f * x gives the negative zero for code 0x80, as the format defines it */
const float lh_cpu_fp8_e4m3_table[256] = {FP8_S(1.0f), FP8_S(-1.0f)};

float lh_k_fp8_e4m3_to_f32(uint8_t v)
{
    return lh_cpu_fp8_e4m3_table[v];
}

uint8_t lh_k_f32_to_fp8_e4m3(float f)
{
    uint32_t u = lh_cpu_f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN */
        return sign | 0x7fu;
    if (abs >= 0x43e00000u) /* >= 448 (infinity included): saturate */
        return sign | 0x7eu;
    if (abs < 0x3c800000u) { /* below 2^-6, the smallest normal: a subnormal code or zero */
        if (abs < 0x3a000000u) /* < 2^-11: rounds to zero */
            return sign;
        /* abs = man * 2^(exp - 150) with man 24 bits; the code is abs / 2^-9 rounded, i.e.
         * man >> (141 - exp), rounded to nearest even; 141 - exp is in 21..25 here. The
         * result may be 8 (2^-6), which is exactly the smallest normal's code. */
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 141u - exp;
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return sign | (uint8_t)q;
    }
    /* normal: keep 3 mantissa bits, round to nearest even (a carry bumps the exponent; values
     * below 448 never round past it, since 448 itself is representable and > 464 excluded) */
    abs += 0x7ffffu + ((abs >> 20) & 1u);
    uint32_t e = (abs >> 23) - 120u, m = (abs >> 20) & 7u;
    return sign | (uint8_t)((e << 3) | m);
}

void lh_k_convert_fp8_e4m3_to_f32(const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_cpu_fp8_e4m3_table[src[i]];
}

void lh_k_convert_f32_to_fp8_e4m3(const float *src, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_k_f32_to_fp8_e4m3(src[i]);
}
