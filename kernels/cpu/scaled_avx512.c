/* AVX-512F decoders of weights with separate scales (lh_scaled_ops_avx512): scaled_simd.inc in
 * the AVX-512 vocabulary of simd_x86.h, 16 lanes. Run only when isa.c says the CPU has
 * AVX-512F. */
#include "scaled.h"

#if LH_CPU_X86
#define SIMD_AVX512 1
#include "simd_x86.h"

#define SIMD_SCALED_OPS lh_scaled_ops_avx512
#include "scaled_simd.inc"
#endif
