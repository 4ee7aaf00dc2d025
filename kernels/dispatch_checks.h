/* Private to libllmhost_kernels: the argument checks every public kernel entry point shares
 * (kernel_dispatch.c, paged_dispatch.c). Each returns LH_OK or sets the context's (or, with a
 * NULL or busy context, the calling thread's) last error and returns its status. */
#ifndef LH_KERNELS_DISPATCH_CHECKS_H
#define LH_KERNELS_DISPATCH_CHECKS_H

#include "cpu/cpu_kernels.h"

/* The implementation for the context's device: cuda_call on a CUDA context (through the
 * loaded table of libllmhost_kernels_cuda.so, LH_CUDA(fn): a CUDA context exists only once it
 * is loaded), else cpu_call. */
#include "cuda/cuda_ops.h"
#define LH_KD_ON_DEVICE(ctx, cuda_call, cpu_call) ((ctx)->cuda ? (cuda_call) : (cpu_call))

/* dtype sets for lh_kd_check_tensor */
#define LH_KD_F32 (1u << LH_DTYPE_F32)
#define LH_KD_FLOAT (LH_KD_F32 | (1u << LH_DTYPE_BF16) | (1u << LH_DTYPE_F16))
#define LH_KD_KV (LH_KD_FLOAT | (1u << LH_DTYPE_FP8_E4M3))
/* ggml's block types (lh_k_dequantize) */
#define LH_KD_BLOCK                                                                           \
    ((1u << LH_DTYPE_Q4_0) | (1u << LH_DTYPE_Q4_1) | (1u << LH_DTYPE_Q5_0) |                  \
     (1u << LH_DTYPE_Q5_1) | (1u << LH_DTYPE_Q8_0) | (1u << LH_DTYPE_Q4_K) |                  \
     (1u << LH_DTYPE_Q5_K) | (1u << LH_DTYPE_Q6_K))

/* the integer weights of the weight-only quantized linears (lh_k_matmul_scaled) */
#define LH_KD_INTW ((1u << LH_DTYPE_INT8) | (1u << LH_DTYPE_INT4))

#define LH_KD_CHECK(expr)                                                                     \
    do {                                                                                      \
        lh_status st_ = (expr);                                                               \
        if (st_ != LH_OK)                                                                     \
            return st_;                                                                       \
    } while (0)

const char *lh_kd_dt_name(lh_dtype dt);
/* "[3, 7]" into buf */
const char *lh_kd_shape_str(const lh_tensor *t, char *buf, size_t size);
#define LH_KD_SH(t) lh_kd_shape_str((t), (char[96]){0}, 96)

/* A usable context, not called from inside its own parallel_for. */
lh_status lh_kd_begin(lh_kctx *ctx, const char *fn);
/* NULL, device (the context's own: a CPU context takes CPU tensors, a CUDA context those on its
 * device), rank in [ndim_lo, ndim_hi], dtype in `dtypes`, shape sanity, data pointer,
 * contiguous row-major layout. */
lh_status lh_kd_check_tensor(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                             int ndim_lo, int ndim_hi, unsigned dtypes);
/* The same without the device rule (lh_k_copy: either side may be host memory). */
lh_status lh_kd_check_layout(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                             int ndim_lo, int ndim_hi, unsigned dtypes);
/* Whether two tensors' byte ranges intersect (NULL or empty ones never do). */
bool lh_kd_overlaps(const lh_tensor *a, const lh_tensor *b);
/* Same rank and dims. */
bool lh_kd_same_shape(const lh_tensor *a, const lh_tensor *b);

/* Strided views (lh_k_matmul_heads, lh_k_copy_view; lh_kernels.h "views"). check_view: NULL,
 * device, rank in [ndim_lo, ndim_hi], dtype in `dtypes`, shape sanity, data pointer, the last
 * dim contiguous (stride 1 where it has more than one element), every other stride >= 0, and
 * a span that fits in int64 bytes. */
lh_status lh_kd_check_view(lh_kctx *ctx, const char *fn, const char *arg, const lh_tensor *t,
                           int ndim_lo, int ndim_hi, unsigned dtypes);
/* "[8, 1]": a tensor's strides, for messages */
const char *lh_kd_stride_str(const lh_tensor *t, char *buf, size_t size);
#define LH_KD_ST(t) lh_kd_stride_str((t), (char[96]){0}, 96)

#endif
