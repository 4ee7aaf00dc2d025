/* Run-time ISA detection. The AVX2 path needs AVX2 + FMA + F16C; the AVX-512 path needs
 * AVX-512F on top of those. __builtin_cpu_supports also checks that the OS saves the wider
 * register state (XGETBV), so a "supported" answer means the code can run here. AMX is the
 * AVX-512 path plus the tile unit, which also needs the OS's permission (amx.c asks). */
#include "cpu_kernels.h"
#include "amx.h"

#if LH_CPU_X86
#include <cpuid.h>

static bool has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    return (c & bit_F16C) != 0;
}
#endif

bool lh_cpu_isa_supported(lh_k_isa isa)
{
    switch (isa) {
    case LH_K_ISA_SCALAR: return true;
#if LH_CPU_X86
    case LH_K_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case LH_K_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && has_f16c();
    case LH_K_ISA_AMX:
        return lh_cpu_isa_supported(LH_K_ISA_AVX512) && lh_cpu_amx_supported();
#endif
    default: return false;
    }
}

lh_k_isa lh_cpu_isa_best(void)
{
    if (lh_cpu_isa_supported(LH_K_ISA_AMX))
        return LH_K_ISA_AMX;
    if (lh_cpu_isa_supported(LH_K_ISA_AVX512))
        return LH_K_ISA_AVX512;
    if (lh_cpu_isa_supported(LH_K_ISA_AVX2))
        return LH_K_ISA_AVX2;
    return LH_K_ISA_SCALAR;
}

const lh_cpu_ops *lh_cpu_ops_for(lh_k_isa isa)
{
    switch (isa) {
#if LH_CPU_X86
    case LH_K_ISA_AVX2: return &lh_cpu_ops_avx2;
    case LH_K_ISA_AVX512:
    case LH_K_ISA_AMX: return &lh_cpu_ops_avx512; /* AMX only changes qmatmul.c's large-M path */
#endif
    default: return &lh_cpu_ops_scalar;
    }
}

const char *lh_k_isa_name(lh_k_isa isa)
{
    switch (isa) {
    case LH_K_ISA_SCALAR: return "scalar";
    case LH_K_ISA_AVX2: return "avx2";
    case LH_K_ISA_AVX512: return "avx512";
    case LH_K_ISA_AMX: return "amx";
    default: return "unknown";
    }
}
