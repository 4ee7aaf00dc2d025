/* Internal: NumPy .npy files (format version 1.0/2.0), float32 little-endian, C order — the
 * format `llmhost logits --out` writes and the transformers reference logits are stored in. */
#ifndef LH_CORE_NPY_H
#define LH_CORE_NPY_H

#include "llmhost.h"

/* The writer is public: lh_save_npy_f32 in llmhost.h. */
/* Reads a '<f4' C-order array of 1 or 2 dims; *cols is 1 for a vector. *data malloc'ed.
 * Errors: LH_E_IO, LH_E_CONFIG (not .npy, other dtype, Fortran order, >2 dims, truncated). */
lh_status lh_npy_read_f32(const char *path, float **data, int64_t *rows, int64_t *cols,
                          lh_err *err);

#endif
