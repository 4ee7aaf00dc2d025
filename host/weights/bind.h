/* Internal: binding checkpoint tensors to the module tree. The entry points
 * (lh_model_bind_weights, lh_model_load_weights, lh_model_param_tensor...) are declared in
 * host/model/model.h; these are the helpers behind them, exposed for tests. */
#ifndef LH_WEIGHTS_BIND_H
#define LH_WEIGHTS_BIND_H

#include "../model/model.h"
#include "checkpoint.h"
#include "progress.h"

/* Elements converted per step (bounded scratch memory, progress granularity). */
#define LH_BIND_CHUNK ((size_t)1 << 20)
#define LH_BIND_SCRATCH_BYTES (2 * LH_BIND_CHUNK * sizeof(float))

/* true for checkpoint tensors that are never parameters and never "unexpected":
 * [*.]rotary_emb.inv_freq, [*.]rotary_emb.cos_cached, [*.]rotary_emb.sin_cached. */
bool lh_bind_ignorable(const char *tensor_name);

/* Converts n elements from src (dtype sd, any alignment) to dst (dtype dd, aligned for dd);
 * sd and dd each F32, F16 or BF16; equal dtypes copy. scratch: NULL (allocated here when
 * needed) or LH_BIND_SCRATCH_BYTES, float-aligned. progress (may be NULL) advances by the
 * destination bytes. Errors: LH_E_USAGE (other dtypes), LH_E_NOMEM. */
lh_status lh_bind_convert(const void *src, lh_dtype sd, void *dst, lh_dtype dd, size_t n,
                          void *scratch, lh_progress *progress, lh_err *err);

#endif
