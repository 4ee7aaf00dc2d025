/* AVX2 + FMA (+ F16C) matmul tiles: lh_cpu_tile_avx2_{f32,bf16,f16}, 8 lanes, tiles of up to
 * 4 x rows by 3 weight rows (8 weight rows when M == 1). The code is matmul_simd.inc, shared
 * with AVX-512; simd_x86.h maps its vocabulary onto AVX2 intrinsics. Per-function target
 * attributes, so the library needs no -march flag; these functions run only when isa.c says
 * the CPU has them. */
#include "cpu_kernels.h"

#if LH_CPU_X86
#define SIMD_AVX512 0
#include "simd_x86.h"

#include "matmul_simd.inc"
#endif
