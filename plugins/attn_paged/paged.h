/* Built-in attention backend "paged": internal interface, for the plugin itself and for tests
 * that drive the backend with explicit settings (split counts, pool sizes) the attention
 * contract does not carry. The registered create() reads the run config's kv_cache settings
 * and attention_chunk_size from lh_attn_geometry; paged_create_with takes them directly. */
#ifndef LH_ATTN_PAGED_H
#define LH_ATTN_PAGED_H

#include "kv_pool.h"
#include "lh_attention.h"

typedef struct paged_config {
    int64_t block_size;  /* tokens per block */
    lh_kv_layout layout; /* NHD or HND */
    lh_dtype kv_dtype;   /* f32, bf16, f16 or fp8_e4m3 */
    int64_t num_blocks;  /* 0: max_seqs * ceil(max_seq_len / block_size), which cannot run out */
    int64_t chunk_size;  /* attention_chunk_size (0: none) */
    int64_t n_splits;    /* flash-decoding partitions (0: the kernel's choice) */
} paged_config;

/* block_size 16, NHD, f32, pool sized for max_seqs full sequences, no chunking, automatic
 * splits. */
extern const paged_config paged_default_config;

/* The registered ops (create uses paged_default_config). */
extern const lh_attn_ops paged_ops;

/* create() with explicit settings. */
lh_status paged_create_with(const lh_attn_geometry *g, const paged_config *cfg,
                            lh_attn_layer **out, char *err, size_t n);

/* The layer's pool (tests inspect it). */
paged_pool *paged_layer_pool(lh_attn_layer *l);

#endif
