/* Private to kernels/cuda/cuda_ctx.cu and kernels/cuda/graph.cu: the CUDA state of a context.
 * Kernel files use cuda_rt.h, never this. */
#ifndef LH_CUDA_STATE_H
#define LH_CUDA_STATE_H

#include "cuda_rt.h"

typedef struct lh_cu_block {
    void *ptr;
    size_t bytes;
} lh_cu_block;

/* A growable array of blocks (the pool's live and free lists, buffers retired during a
 * capture). */
typedef struct lh_cu_block_list {
    lh_cu_block *v;
    size_t n, cap;
} lh_cu_block_list;

struct lh_cuda_state {
    int dev, cc, sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_ws;
    size_t blas_ws_bytes;

    /* staging of host inputs: pin (pinned host) mirrors dstage (device) */
    unsigned char *pin, *dstage;
    size_t stage_cap, stage_off;
    /* bytes (aligned as lh_cu_stage places them) staged since lh_k_graph_begin, and the most
     * any graph step has staged: a step that outgrew the buffer is repeated, and the repeat
     * must find room for all of it from offset 0 (lh_cu_stage_reserve at graph begin) */
    size_t step_staged, stage_need;
    /* per-call device scratch */
    void *scratch;
    size_t scratch_bytes;
    /* bulk uploads (lh_k_copy host -> device): two pinned halves, double-buffered */
    unsigned char *up_pin;
    size_t up_half;
    cudaEvent_t up_done[2];

    /* bumped whenever staging or scratch move: graphs recorded before are stale */
    uint64_t gen;
    lh_cu_mode mode;
    uint64_t hash;    /* FNV-1a over what the current capture / dry run recorded */
    bool invalid;     /* the current capture / dry run cannot be used (buffers moved) */
    lh_cu_block_list retired; /* buffers replaced during a capture, freed at its end */
    bool sync_each;   /* LLMHOST_CUDA_SYNC=1 */

    /* the memory pool */
    lh_cu_block_list live, free_list;
    int64_t in_use, peak, cached;
};

/* FNV-1a over bytes, continuing from h. */
static inline uint64_t lh_cu_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}
#define LH_CU_FNV_SEED 14695981039346656037ull

/* Frees retired buffers (after a capture ends). */
void lh_cu_free_retired(struct lh_cuda_state *cs);

/* Eager mode, stream idle: makes the staging buffers hold at least `need` bytes (moving them
 * bumps gen, so graphs recorded before are recaptured). */
lh_status lh_cu_stage_reserve(lh_kctx *ctx, size_t need);

#endif
