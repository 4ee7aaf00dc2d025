/* Kernel library: dtype facts and conversions, against independent references: the
 * compiler's _Float16 for f16, and "pick the nearer of the two neighbouring bf16 values, ties
 * to even" computed in double precision for bf16. */
#include "lh_kernels.h"
#include "runner.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* xorshift: deterministic, so a failure reproduces */
static uint32_t rng_state = 0x12345678u;
static uint32_t next_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = bits(f);
    uint16_t lo = (uint16_t)(u >> 16);
    uint16_t hi = (uint16_t)(lo + 1);
    double dl = fabs((double)f - (double)lh_k_bf16_to_f32(lo));
    double dh = fabs((double)lh_k_bf16_to_f32(hi) - (double)f);
    if ((u & 0xffffu) == 0)
        return lo;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_dtype_bits_and_bytes(void)
{
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_F32), 32);
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_BF16), 16);
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_F16), 16);
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_FP8_E4M3), 8);
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_INT4), 4);
    CU_ASSERT_EQUAL(lh_k_dtype_bits(LH_DTYPE_INVALID), 0);
    CU_ASSERT_EQUAL(lh_k_dtype_bits((lh_dtype)99), 0);
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_BF16, 10), 20);
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_INT4, 3), 2); /* rounded up to whole bytes */
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_INT4, 4), 2);
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_F32, -1), -1);
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_F32, INT64_MAX / 2), -1); /* overflow */
    CU_ASSERT_EQUAL(lh_k_dtype_bytes(LH_DTYPE_INVALID, 1), -1);
}

static void test_f16_all_values_round_trip(void)
{
    unsigned mismatches = 0;
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        float f = lh_k_f16_to_f32((uint16_t)h);
        _Float16 ref;
        uint16_t rb = (uint16_t)h;
        memcpy(&ref, &rb, sizeof ref);
        if (isnan(f)) {
            mismatches += !isnan((float)ref);
            mismatches += !isnan(lh_k_f16_to_f32(lh_k_f32_to_f16(f)));
            continue;
        }
        mismatches += bits(f) != bits((float)ref);
        mismatches += lh_k_f32_to_f16(f) != (uint16_t)h;
    }
    CU_ASSERT_EQUAL(mismatches, 0);
}

static void test_f32_to_f16_matches_compiler(void)
{
    unsigned mismatches = 0;
    for (int i = 0; i < 2000000; i++) {
        float f = from_bits(next_u32());
        if (i % 3 == 0) /* concentrate on the f16 range, subnormals and the overflow edge */
            f = from_bits((next_u32() & 0x80000000u) | (0x33000000u + next_u32() % 0x14800000u));
        if (isnan(f))
            continue;
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, sizeof rb);
        mismatches += lh_k_f32_to_f16(f) != rb;
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    CU_ASSERT_EQUAL(lh_k_f32_to_f16(65520.0f), 0x7c00u); /* rounds up to infinity */
    CU_ASSERT_EQUAL(lh_k_f32_to_f16(65504.0f), 0x7bffu); /* largest finite */
    CU_ASSERT_EQUAL(lh_k_f32_to_f16(-INFINITY), 0xfc00u);
    CU_ASSERT_TRUE((lh_k_f32_to_f16(NAN) & 0x7fffu) > 0x7c00u);
}

static void test_bf16_rounding(void)
{
    unsigned mismatches = 0;
    for (int i = 0; i < 2000000; i++) {
        float f = from_bits(next_u32());
        if (isnan(f) || isinf(f) || fabsf(f) > 3.3e38f) /* keep both neighbours finite */
            continue;
        mismatches += lh_k_f32_to_bf16(f) != ref_f32_to_bf16(f);
    }
    CU_ASSERT_EQUAL(mismatches, 0);
    /* ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 */
    CU_ASSERT_EQUAL(lh_k_f32_to_bf16(1.00390625f), 0x3f80u);
    CU_ASSERT_EQUAL(lh_k_f32_to_bf16(1.01171875f), 0x3f82u);
    CU_ASSERT_EQUAL(lh_k_bf16_to_f32(0x3f80u), 1.0f);
    uint16_t nan_bf = lh_k_f32_to_bf16(from_bits(0x7f800001u)); /* NaN with low payload only */
    CU_ASSERT_TRUE(isnan(lh_k_bf16_to_f32(nan_bf)));
    CU_ASSERT_EQUAL(lh_k_f32_to_bf16(INFINITY), 0x7f80u);
}

static void test_row_conversions(void)
{
    /* 37 elements: not a multiple of any vector width */
    float src[37], back[37];
    uint16_t mid[37];
    for (int i = 0; i < 37; i++)
        src[i] = (float)(i - 18) * 0.37f;
    lh_k_convert_f32_to_bf16(src, mid, 37);
    lh_k_convert_bf16_to_f32(mid, back, 37);
    for (int i = 0; i < 37; i++) {
        CU_ASSERT_EQUAL(mid[i], lh_k_f32_to_bf16(src[i]));
        CU_ASSERT_TRUE(fabsf(back[i] - src[i]) <= fabsf(src[i]) / 256.0f);
    }
    lh_k_convert_f32_to_f16(src, mid, 37);
    lh_k_convert_f16_to_f32(mid, back, 37);
    for (int i = 0; i < 37; i++) {
        CU_ASSERT_EQUAL(mid[i], lh_k_f32_to_f16(src[i]));
        CU_ASSERT_TRUE(fabsf(back[i] - src[i]) <= fabsf(src[i]) / 2048.0f);
    }
}

static CU_TestInfo dtype_tests[] = {
    {"dtype bits and bytes (int4 rounding, overflow)", test_dtype_bits_and_bytes},
    {"f16 -> f32 -> f16 exact for all 65536 values", test_f16_all_values_round_trip},
    {"f32 -> f16 equals the compiler's _Float16", test_f32_to_f16_matches_compiler},
    {"f32 -> bf16 rounds to nearest even", test_bf16_rounding},
    {"row conversions, odd length", test_row_conversions},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"kernels: dtype conversion", NULL, NULL, NULL, NULL, dtype_tests},
    CU_SUITE_INFO_NULL,
};

int main(int argc, char **argv)
{
    return lh_test_main(argc, argv, suites);
}
