#include "lh_kernels.h"

#include <string.h>

unsigned lh_k_dtype_bits(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return 32;
    case LH_DTYPE_F16:
    case LH_DTYPE_BF16: return 16;
    case LH_DTYPE_FP8_E4M3:
    case LH_DTYPE_INT8: return 8;
    case LH_DTYPE_INT4: return 4;
    default: return 0;
    }
}

int64_t lh_k_dtype_bytes(lh_dtype dt, int64_t n)
{
    unsigned bits = lh_k_dtype_bits(dt);
    if (!bits || n < 0)
        return -1;
    int64_t total;
    if (__builtin_mul_overflow(n, (int64_t)bits, &total))
        return -1;
    return total / 8 + (total % 8 != 0);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float lh_k_bf16_to_f32(uint16_t v)
{
    return bits_f32((uint32_t)v << 16);
}

uint16_t lh_k_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet bit */
        return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

float lh_k_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t lh_k_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN */
        return sign | 0x7e00u;
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return sign | 0x7c00u;
    if (abs < 0x38800000u) { /* below the smallest normal half (2^-14): subnormal or zero */
        if (abs < 0x33000000u) /* < 2^-25: rounds to zero */
            return sign;
        uint32_t exp = abs >> 23;
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half_man = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (half_man & 1u)))
            half_man++;
        return sign | (uint16_t)half_man;
    }
    uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
    abs += rounding;
    return sign | (uint16_t)((abs - 0x38000000u) >> 13);
}

void lh_k_convert_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_k_bf16_to_f32(src[i]);
}

void lh_k_convert_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_k_f16_to_f32(src[i]);
}

void lh_k_convert_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_k_f32_to_bf16(src[i]);
}

void lh_k_convert_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = lh_k_f32_to_f16(src[i]);
}
