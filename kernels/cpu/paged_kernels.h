/* Private to libllmhost_kernels: the CPU side of the paged KV cache kernels (paged_attention.c,
 * paged_kv_write.c, fp8.c), called by kernels/paged_dispatch.c once every argument has been
 * checked. */
#ifndef LH_CPU_PAGED_KERNELS_H
#define LH_CPU_PAGED_KERNELS_H

#include "cpu_kernels.h"

/* fp8 e4m3fn code -> f32 (exact; NaN for 0x7f and 0xff) */
extern const float lh_cpu_fp8_e4m3_table[256];

/* The pool's geometry, read from checked tensors. Keys and values may have different dtypes
 * (mixed-precision KV); their layout and shape are the same. v may be k itself (one latent for
 * keys and values, multi-head latent attention): then v_dtype is k_dtype and v_scale is
 * k_scale. */
typedef struct lh_cpu_pages {
    lh_kv_layout layout;
    lh_dtype k_dtype, v_dtype;
    int64_t num_blocks, block_size, kv_heads, head_dim;
    int64_t block_elems;   /* elements per block (block_size * kv_heads * head_dim) */
    int64_t tok_stride;    /* elements between tokens of one head: NHD kv_heads * D, HND D */
    int64_t head_stride;   /* elements between heads of one token: NHD D, HND block_size * D */
    unsigned char *k, *v;
    float *k_scale, *v_scale; /* [num_blocks, kv_heads]: set for an fp8 k (v) only */
    float *k_min, *k_max;     /* [num_blocks, kv_heads, head_dim], or NULL (none kept) */
} lh_cpu_pages;

/* A checked packed batch (lh_paged_batch); block_tables[s] covers what sequence s uses. */
typedef struct lh_cpu_batch {
    int64_t n_seqs;
    const int64_t *token_start, *n_new, *kv_len;
    const int32_t *positions; /* may be NULL where nothing reads it */
    const int32_t *const *tables;
} lh_cpu_batch;

/* The attention parameters, read from lh_paged_attn_params (absent fields: 0 / NULL). */
typedef struct lh_cpu_attn_params {
    float scale;
    int64_t window, chunk, n_splits;
    const lh_rope *rope;
    int64_t top_k, local; /* local >= 1: sparse block selection */
    float softcap;        /* > 0: scores = softcap * tanh(scores / softcap); 0: none */
} lh_cpu_attn_params;

/* fn names the public entry point in messages (out of memory). */
lh_status lh_cpu_paged_attention(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                                 const lh_cpu_pages *kv, const lh_cpu_batch *b,
                                 const lh_cpu_attn_params *prm, lh_tensor *out);
/* k, v: [T, kv_heads, head_dim] f32 rows; sequence s writes rows token_start[s] .. + n_new[s]
 * at positions kv_len[s] - n_new[s] ..; rope (may be NULL) rotates the keys at positions[row]
 * with seq_len kv_len[s] first. v NULL: keys only, into a pool whose v is its k (kv->v ==
 * kv->k, kv->v_scale == kv->k_scale), as the dispatch has checked. */
lh_status lh_cpu_paged_kv_write(lh_kctx *ctx, const char *fn, const lh_cpu_pages *kv,
                                const lh_cpu_batch *b, const float *k, const float *v,
                                const lh_rope *rope);

#endif
