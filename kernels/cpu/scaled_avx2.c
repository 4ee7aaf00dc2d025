/* AVX2 decoders of weights with separate scales (lh_scaled_ops_avx2): scaled_simd.inc in the
 * AVX2 vocabulary of simd_x86.h, 8 lanes. Run only when isa.c says the CPU has AVX2. */
#include "scaled.h"

#if LH_CPU_X86
#define SIMD_AVX512 0
#include "simd_x86.h"

#define SIMD_SCALED_OPS lh_scaled_ops_avx2
#include "scaled_simd.inc"
#endif
