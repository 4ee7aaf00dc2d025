/* Private to libllmhost_kernels: the CPU sampling kernel behind lh_k_sample and
 * lh_k_sampling_probs (sampling_dispatch.c checks the arguments first). */
#ifndef LH_KERNELS_CPU_SAMPLING_H
#define LH_KERNELS_CPU_SAMPLING_H

#include "lh_kernels.h"

typedef struct lh_sample_job {
    const lh_sampling_params *params;
    const float *logits; /* [M, V] */
    int64_t M, V;
    const int32_t *const *history;
    const int64_t *history_len; /* NULL: no history */
    uint64_t seed;
    const uint64_t *stream, *step; /* draws only */
    int32_t *out;                  /* NULL: no draw */
    float *probs;                  /* [M, V] or NULL */
} lh_sample_job;

/* per-row failures (code) */
enum { LH_SAMPLE_BAD_LOGIT = 1, LH_SAMPLE_NO_FINITE = 2, LH_SAMPLE_OVERFLOW = 3 };

/* Runs every row. On a row failure returns LH_E_USAGE with *bad_row, *code and *bad_id (the
 * logit's id) of the first failing row, without a message (the caller words it); LH_E_NOMEM
 * with a message. */
lh_status lh_cpu_sample(lh_kctx *ctx, const lh_sample_job *j, int64_t *bad_row, int *code,
                        int64_t *bad_id);

#endif
