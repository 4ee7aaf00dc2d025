/* The paged backend's KV block pool: fixed-size blocks of block_size tokens (keys and values
 * of every kv head, in the kernel library's NHD or HND layout and dtype f32, bf16, f16 or fp8
 * e4m3 with per-(block, head) scales), handed out to sequence slots as they grow and taken
 * back when a slot is released. Each slot has a block table (logical block i -> physical
 * block) and a length (tokens written).
 *
 * This file is self-contained (it depends on plugin_api/ only) so that it can move into a host
 * KV-cache manager shared by every layer; for now each layer instance of the backend owns one.
 *
 * Memory: the pool may hand out up to num_blocks blocks; their storage is allocated as they
 * are first needed (growing by doubling, like vanilla's contiguous caches), so a large limit
 * costs nothing until used. Block ids are stable across growth; the storage may move, so take
 * paged_pool_pages() again after any reserve.
 *
 * Running out of blocks is an error naming the numbers (LH_E_UNSUPPORTED), never a crash or a
 * silent truncation; a reservation for a step is all or nothing. */
#ifndef LH_ATTN_PAGED_KV_POOL_H
#define LH_ATTN_PAGED_KV_POOL_H

#include "lh_kernels.h"

typedef struct paged_pool_config {
    int64_t block_size;  /* tokens per block, >= 1 */
    lh_kv_layout layout; /* LH_KV_NHD or LH_KV_HND */
    lh_dtype dtype;      /* f32, bf16, f16 or fp8_e4m3 */
    int64_t num_blocks;  /* blocks the pool may hand out, 1 .. INT32_MAX */
} paged_pool_config;

typedef struct paged_seq {
    int32_t *blocks;  /* [max_blocks_per_seq]: physical block of each logical block */
    int64_t n_blocks; /* blocks held */
    int64_t len;      /* tokens written */
} paged_seq;

typedef struct paged_pool paged_pool;

/* A pool for max_seqs slots of at most max_seq_len tokens each. Errors: LH_E_USAGE (bad
 * config or geometry), LH_E_NOMEM. */
lh_status paged_pool_create(const paged_pool_config *cfg, int64_t kv_heads, int64_t head_dim,
                            int64_t max_seqs, int64_t max_seq_len, paged_pool **out, char *err,
                            size_t n);
void paged_pool_destroy(paged_pool *p);

/* Makes each slots[i] hold blocks for tokens[i] tokens (allocating what is missing; nothing is
 * freed). All or nothing: when the blocks missing over all slots exceed the free ones, nothing
 * is allocated and the error (LH_E_UNSUPPORTED) names blocks needed, free and total. Slots
 * must be distinct and in range and tokens[i] <= max_seq_len (LH_E_USAGE otherwise). */
lh_status paged_pool_reserve(paged_pool *p, const int64_t *slots, const int64_t *tokens,
                             int64_t n_slots, char *err, size_t n);
/* Returns the slot's blocks to the pool and empties it. Out-of-range slots are ignored. */
void paged_pool_release(paged_pool *p, int64_t slot);

/* The slot's state (NULL for an out-of-range slot); the caller updates len after writing. */
paged_seq *paged_pool_seq(paged_pool *p, int64_t slot);
/* A view of the storage for the kernels; valid until the next reserve. */
lh_kv_pages paged_pool_pages(const paged_pool *p);

int64_t paged_pool_total_blocks(const paged_pool *p);
int64_t paged_pool_free_blocks(const paged_pool *p);
/* Bytes of keys + values (+ scales) per block. */
size_t paged_pool_block_bytes(const paged_pool *p);

#endif
