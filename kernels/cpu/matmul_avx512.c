/* AVX-512F matmul tiles: lh_cpu_tile_avx512_{f32,bf16,f16}, 16 lanes, tiles of up to 4 x rows
 * by 4 weight rows (8 weight rows when M == 1). The code is matmul_simd.inc, shared with AVX2;
 * simd_x86.h maps its vocabulary onto AVX-512 intrinsics. Per-function target attributes;
 * these functions run only when isa.c says the CPU has them. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#define SIMD_AVX512 1
#include "simd_x86.h"

#include "matmul_simd.inc"
#endif
