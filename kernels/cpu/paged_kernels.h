/* Private to libllmhost_kernels: the CPU side of the paged KV cache kernels (paged_attention.c,
 * fp8.c), called by kernels/paged_dispatch.c once every argument has been checked. */
#ifndef LH_CPU_PAGED_KERNELS_H
#define LH_CPU_PAGED_KERNELS_H

#include "cpu_kernels.h"

/* fp8 e4m3fn code -> f32 (exact; NaN for 0x7f and 0xff) */
extern const float lh_cpu_fp8_e4m3_table[256];

/* The pool's geometry, read from checked tensors. */
typedef struct lh_cpu_pages {
    lh_kv_layout layout;
    lh_dtype dtype;
    int64_t num_blocks, block_size, kv_heads, head_dim;
    size_t esize;          /* bytes per element */
    int64_t block_elems;   /* elements per block (block_size * kv_heads * head_dim) */
    int64_t tok_stride;    /* elements between tokens of one head: NHD kv_heads * D, HND D */
    int64_t head_stride;   /* elements between heads of one token: NHD D, HND block_size * D */
    unsigned char *k, *v;
    float *k_scale, *v_scale; /* fp8 only */
} lh_cpu_pages;

lh_status lh_cpu_paged_attention(lh_kctx *ctx, const lh_tensor *q, const lh_cpu_pages *kv,
                                 const int32_t *table, int64_t ctx_len, const int32_t *q_pos,
                                 float scale, int64_t window, int64_t chunk, int64_t n_splits,
                                 lh_tensor *out);
lh_status lh_cpu_paged_kv_write(lh_kctx *ctx, const lh_cpu_pages *kv, const int32_t *table,
                                int64_t start, int64_t n, const float *k, const float *v);

#endif
