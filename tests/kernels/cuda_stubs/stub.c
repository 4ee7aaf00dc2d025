/* Stand-ins for libllmhost_kernels_cuda.so that must each be refused with a typed state and a
 * reason (tests/kernels/test_cuda_load.c), one shared module per STUB_KIND:
 *   1 no entry symbol   2 a table of another ABI   3 a table of another size
 *   4 an entry that refuses the kernel library's services (returns NULL)
 *   5 a library that needs one that is not installed (cuda_stubs/gone_dep.c: its soname names
 *     no file, as a CUDA library that cudart or cuBLAS is missing for) */
#include "cuda/cuda_ops.h"

#if STUB_KIND == 1
__attribute__((visibility("default"))) int lh_kernels_cuda_something_else = 1;
#elif STUB_KIND == 5
int lh_cuda_stub_gone_dep(void);
__attribute__((visibility("default"))) int lh_cuda_stub_uses_dep(void);
int lh_cuda_stub_uses_dep(void)
{
    return lh_cuda_stub_gone_dep();
}
#else
static lh_cuda_ops table;

__attribute__((visibility("default"))) const lh_cuda_ops *lh_kernels_cuda_entry(
    const lh_cuda_host *h);

const lh_cuda_ops *lh_kernels_cuda_entry(const lh_cuda_host *h)
{
    (void)h;
    table.struct_size = (uint32_t)sizeof table;
    table.abi = LH_CUDA_ABI;
    table.kctx_size = (uint32_t)sizeof(lh_kctx);
#if STUB_KIND == 2
    table.abi = LH_CUDA_ABI + 1;
#elif STUB_KIND == 3
    table.struct_size = (uint32_t)sizeof table - 8;
#elif STUB_KIND == 4
    return NULL;
#endif
    return &table;
}
#endif
