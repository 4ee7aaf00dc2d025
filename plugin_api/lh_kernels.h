/* llmhost kernel library (libllmhost_kernels): the one copy of every numeric routine, shared
 * by the host and all plugins. This release carries dtype facts and conversions; GEMM, norms,
 * RoPE and attention kernels are added here as the runtime grows.
 *
 * All functions are pure; none allocate; none fail on valid arguments. Conversions round to
 * nearest even and keep NaN a NaN (quiet) and infinities infinite. */
#ifndef LH_KERNELS_H
#define LH_KERNELS_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Storage bits per element (4 for int4); 0 for LH_DTYPE_INVALID or unknown values. */
LH_EXPORT unsigned lh_k_dtype_bits(lh_dtype dt);
/* Bytes needed for `n` elements, rounded up to whole bytes; -1 on overflow or unknown dtype. */
LH_EXPORT int64_t lh_k_dtype_bytes(lh_dtype dt, int64_t n);

LH_EXPORT float lh_k_bf16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_bf16(float f);
LH_EXPORT float lh_k_f16_to_f32(uint16_t v);
LH_EXPORT uint16_t lh_k_f32_to_f16(float f);

/* Row conversions; src and dst must not overlap. */
LH_EXPORT void lh_k_convert_bf16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f16_to_f32(const uint16_t *src, float *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
LH_EXPORT void lh_k_convert_f32_to_f16(const float *src, uint16_t *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
