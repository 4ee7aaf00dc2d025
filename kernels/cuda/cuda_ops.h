/* Private to libllmhost_kernels and libllmhost_kernels_cuda: the one interface between the two
 * halves of the kernel library.
 *
 * The CUDA half (the .cu files of kernels/cuda, cudart, cuBLAS, cuBLASLt) is its own shared
 * object, libllmhost_kernels_cuda.so, installed beside libllmhost_kernels. Nothing links it:
 * the kernel library dlopens it (kernels/cuda_load.c) the first time a CUDA context is created
 * or a CUDA device is probed, once per process, so a CPU-only command never maps cuBLAS and a
 * CUDA build starts on a machine without any CUDA library.
 *
 * The CUDA library exports exactly one symbol, LH_CUDA_ENTRY_NAME: given the kernel library's
 * services (lh_cuda_host: the error slots and the few CPU helpers the CUDA code shares), it
 * returns its table of the lh_cuda_* functions of cuda_kernels.h (lh_cuda_ops). Both tables
 * carry their size and LH_CUDA_ABI, and the kernel library refuses a table of another size,
 * ABI or lh_kctx layout (the two halves are always built from one tree, so a mismatch means a
 * stale or foreign file). Bump LH_CUDA_ABI whenever either table or lh_kctx changes meaning. */
#ifndef LH_CUDA_OPS_H
#define LH_CUDA_OPS_H

#include <stdarg.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LH_CUDA_ABI 5u
#define LH_CUDA_ENTRY_NAME "lh_kernels_cuda_entry"
#define LH_CUDA_LIBRARY_NAME "libllmhost_kernels_cuda.so"

/* What the kernel library lends the CUDA library (every pointer set). */
typedef struct lh_cuda_host {
    uint32_t struct_size; /* sizeof(lh_cuda_host) */
    uint32_t abi;         /* LH_CUDA_ABI */
    uint32_t kctx_size;   /* sizeof(lh_kctx) */
    uint32_t reserved;
    lh_status (*kerr_v)(lh_kctx *ctx, lh_status st, const char *fmt, va_list ap);
    const char *(*last_error)(const lh_kctx *ctx);
    const float *(*rope_inv)(const lh_rope *rope, int64_t seq_len, float *buf);
    double (*rng_uniform)(uint64_t seed, uint64_t stream, uint64_t step);
} lh_cuda_host;

/* Every function of cuda_kernels.h, one table entry each. */
#define LH_CUDA_OPS_LIST(X)                                                                   \
    X(ctx_init) X(ctx_free) X(make_current) X(call_begin)                                     \
    X(device_count) X(unavailable_reason) X(device_info)                                      \
    X(alloc) X(free) X(memzero) X(mem_stats) X(copy) X(sync)                                  \
    X(graph_create) X(graph_begin) X(graph_end) X(graph_abort) X(graph_counts) X(graph_free)  \
    X(matmul) X(embedding) X(rmsnorm) X(silu_mul) X(gelu_tanh_mul) X(scale)                   \
    X(layernorm) X(gelu) X(gelu_tanh) X(gelu_mul) X(softcap) X(add) X(embedding_add)          \
    X(softmax) X(argmax) X(convert) X(rope_apply) X(attention) X(attention_positions)         \
    X(gather_rows) X(paged_attention) X(paged_kv_write) X(sample) X(dequantize)            \
    X(matmul_scaled) X(dequantize_scaled) X(quantize_scaled) X(moe_route) X(scatter_add_rows)  \
    X(matmul_heads) X(copy_view)

typedef struct lh_cuda_ops {
    uint32_t struct_size; /* sizeof(lh_cuda_ops) */
    uint32_t abi;         /* LH_CUDA_ABI */
    uint32_t kctx_size;   /* sizeof(lh_kctx) as the CUDA library was built */
    uint32_t reserved;
#define LH_CUDA_OPS_FIELD(name) __typeof__(lh_cuda_##name) *name;
    LH_CUDA_OPS_LIST(LH_CUDA_OPS_FIELD)
#undef LH_CUDA_OPS_FIELD
} lh_cuda_ops;

/* The entry symbol: NULL when host is not a table this library understands. */
typedef const lh_cuda_ops *(*lh_cuda_entry_fn)(const lh_cuda_host *host);

/* ---- inside libllmhost_kernels (kernels/cuda_load.c) ---------------------------------------- */

#ifndef LH_CUDA_LIBRARY_SIDE
/* The loaded table; non-NULL once the library is loaded (and then for good). Every CUDA
 * context and graph exists only after a successful load, so code that reaches a CUDA branch
 * through ctx->cuda may call LH_CUDA(fn) directly. */
extern const lh_cuda_ops *lh_cuda_loaded;
#define LH_CUDA(fn) (lh_cuda_loaded->fn)
/* Loads the library and probes the devices if not yet tried (once per process, any thread);
 * the table, or NULL when the library could not be used (lh_k_cuda_load_state says why). */
const lh_cuda_ops *lh_cuda_load(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
