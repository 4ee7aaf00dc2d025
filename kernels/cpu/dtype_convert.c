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
    case LH_DTYPE_Q4_0:
    case LH_DTYPE_Q4_1:
    case LH_DTYPE_Q5_0:
    case LH_DTYPE_Q5_1:
    case LH_DTYPE_Q8_0:
    case LH_DTYPE_Q4_K:
    case LH_DTYPE_Q5_K:
    case LH_DTYPE_Q6_K: return 0; /* block types: see lh_k_dtype_block */
    case LH_DTYPE_INVALID:
    case LH_DTYPE_COUNT_: break;
    }
    return 0;
}

bool lh_k_dtype_block(lh_dtype dt, int64_t *block_elems, int64_t *block_bytes)
{
    int64_t e = 0, b = 0;
    switch (dt) {
    case LH_DTYPE_Q4_0: e = 32, b = 18; break;
    case LH_DTYPE_Q4_1: e = 32, b = 20; break;
    case LH_DTYPE_Q5_0: e = 32, b = 22; break;
    case LH_DTYPE_Q5_1: e = 32, b = 24; break;
    case LH_DTYPE_Q8_0: e = 32, b = 34; break;
    case LH_DTYPE_Q4_K: e = 256, b = 144; break;
    case LH_DTYPE_Q5_K: e = 256, b = 176; break;
    case LH_DTYPE_Q6_K: e = 256, b = 210; break;
    case LH_DTYPE_INT4: e = 2, b = 1; break;
    case LH_DTYPE_F32:
    case LH_DTYPE_F16:
    case LH_DTYPE_BF16:
    case LH_DTYPE_FP8_E4M3:
    case LH_DTYPE_INT8: e = 1, b = lh_k_dtype_bits(dt) / 8; break;
    case LH_DTYPE_INVALID:
    case LH_DTYPE_COUNT_: break;
    }
    if (block_elems)
        *block_elems = e;
    if (block_bytes)
        *block_bytes = b;
    return e > 1 && dt != LH_DTYPE_INT4;
}

const char *lh_k_dtype_name(lh_dtype dt)
{
    switch (dt) {
    case LH_DTYPE_F32: return "f32";
    case LH_DTYPE_F16: return "f16";
    case LH_DTYPE_BF16: return "bf16";
    case LH_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case LH_DTYPE_INT8: return "int8";
    case LH_DTYPE_INT4: return "int4";
    case LH_DTYPE_Q4_0: return "q4_0";
    case LH_DTYPE_Q4_1: return "q4_1";
    case LH_DTYPE_Q5_0: return "q5_0";
    case LH_DTYPE_Q5_1: return "q5_1";
    case LH_DTYPE_Q8_0: return "q8_0";
    case LH_DTYPE_Q4_K: return "q4_k";
    case LH_DTYPE_Q5_K: return "q5_k";
    case LH_DTYPE_Q6_K: return "q6_k";
    case LH_DTYPE_INVALID:
    case LH_DTYPE_COUNT_: break;
    }
    return "invalid";
}

int64_t lh_k_dtype_bytes(lh_dtype dt, int64_t n)
{
    if (n < 0)
        return -1;
    int64_t be, bb;
    if (lh_k_dtype_block(dt, &be, &bb)) {
        int64_t total;
        if (n % be != 0 || __builtin_mul_overflow(n / be, bb, &total))
            return -1;
        return total;
    }
    unsigned bits = lh_k_dtype_bits(dt);
    if (!bits)
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
