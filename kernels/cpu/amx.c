/* Whether AMX can run here (amx.h). Three conditions: the CPU's CPUID bits, the OS enabling the
 * tile state in XCR0, and -- Linux hands the 8 KiB of tile data to a process only on request --
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeding, asked once per process. */
#include "amx.h"
#include "qmatmul.h"

#if LH_CPU_X86 && defined(__linux__)
#include <cpuid.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* bit 0: AMX-INT8 usable, bit 1: AMX-BF16 usable too */
static int probe(void)
{
    if (!lh_qmm_avx512_supported())
        return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    const bool tile = d & (1u << 24), int8 = d & (1u << 25), bf16 = d & (1u << 22);
    if (!tile || !int8)
        return 0;
    unsigned a1, b1, c1, d1;
    const bool avx512bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5));
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & (3u << 17)) != (3u << 17)) /* XTILECFG and XTILEDATA */
        return 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0;
    return 1 | (bf16 && avx512bf16 ? 2 : 0);
}

static int known(void)
{
    static _Atomic int k = -1;
    int v = atomic_load_explicit(&k, memory_order_acquire);
    if (v < 0) {
        v = probe();
        atomic_store_explicit(&k, v, memory_order_release);
    }
    return v;
}

bool lh_cpu_amx_supported(void)
{
    return (known() & 1) != 0;
}

bool lh_cpu_amx_bf16_supported(void)
{
    return (known() & 2) != 0;
}

#else

bool lh_cpu_amx_supported(void)
{
    return false;
}

bool lh_cpu_amx_bf16_supported(void)
{
    return false;
}

#endif
