/* llmhost plugin SDK: tensors as the kernel library sees them.
 *
 * A tensor is a view: dtype, shape, strides (in elements) and a data pointer on a device. It
 * owns nothing; whoever allocated `data` frees it. A kernel runs on its context's device
 * (lh_kernels.h) and takes tensors on that device only: a tensor on another device is
 * LH_E_USAGE naming both (move it with lh_k_copy). */
#ifndef LH_TENSOR_H
#define LH_TENSOR_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most dimensions of a tensor: a layout constant (it sizes lh_tensor), recorded in every
 * plugin's descriptor and checked by the host before any plugin code runs. */
#define LH_MAX_DIMS 4

typedef enum lh_device_kind { LH_DEVICE_CPU = 0, LH_DEVICE_CUDA = 1 } lh_device_kind;

typedef struct lh_device {
    lh_device_kind kind;
    int index; /* CUDA ordinal; 0 for the CPU */
} lh_device;

typedef struct lh_tensor {
    lh_dtype dtype;
    int ndim;
    int64_t shape[LH_MAX_DIMS];
    int64_t stride[LH_MAX_DIMS]; /* elements; row-major contiguous: stride[ndim-1] == 1 */
    void *data;
    lh_device device;
} lh_tensor;

/* A contiguous CPU tensor view over `data`. Shapes beyond ndim are ignored. */
static inline lh_tensor lh_tensor_cpu(lh_dtype dtype, void *data, int ndim, const int64_t *shape)
{
    lh_tensor t;
    t.dtype = dtype;
    t.ndim = ndim;
    t.data = data;
    t.device.kind = LH_DEVICE_CPU;
    t.device.index = 0;
    int64_t s = 1;
    for (int i = LH_MAX_DIMS - 1; i >= 0; i--) {
        t.shape[i] = i < ndim ? shape[i] : 1;
        t.stride[i] = i < ndim ? s : 0;
        if (i < ndim)
            s *= shape[i];
    }
    return t;
}

/* The same contiguous data as another shape (numel must match; the caller checks): e.g. a
 * [T, heads * D] activation seen as [T * heads, D] rows for a per-head norm. */
static inline lh_tensor lh_tensor_view(const lh_tensor *t, int ndim, const int64_t *shape)
{
    lh_tensor v = lh_tensor_cpu(t->dtype, t->data, ndim, shape);
    v.device = t->device;
    return v;
}

#ifdef __cplusplus
}
#endif
#endif
